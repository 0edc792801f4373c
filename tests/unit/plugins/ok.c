/* SPDX-License-Identifier: MIT */
/*
 * A test plugin for test_plughost: a well-behaved plugin whose every move the
 * test can observe through the database, since a plugin loaded with
 * RTLD_LOCAL shares no globals with the test.
 *
 * init creates ok_inits and ok_calls and writes one ok_inits row with what it
 * was given; every handle writes one ok_calls row with the message's fields
 * and then returns what the options say. Options:
 *
 *   fail = retry | permanent | bogus   return RETRY, PERMANENT, or 42
 *   errtext = normal | empty | unterminated | multiline
 *                                      what to write into err on failure
 *   refuse = yes | no                  init fails (before writing anything)
 *   fini_file = PATH                   fini appends "NAME\n" to PATH
 */
#include <semq/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

int semq_plugin_abi_version(void);
int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz);
int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err,
		       size_t errsz);
void semq_plugin_fini(void *handle);

enum errtext { ET_NORMAL, ET_EMPTY, ET_UNTERMINATED, ET_MULTILINE };

struct ok {
	char name[128];
	int result; /* what handle returns */
	int errtext;
	char *fini_file; /* owned, or NULL */
};

static int all_null(void *const *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (v[i])
			return 0;
	return 1;
}

int semq_plugin_abi_version(void)
{
	return SEMQ_PLUGIN_ABI_VERSION;
}

int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_PERMANENT;
	struct ok *o = calloc(1, sizeof *o);
	sqlite3 *db = a->tx ? a->tx->db : NULL;
	sqlite3_stmt *st = NULL;
	size_t i;

	if (!o) {
		snprintf(err, errsz, "ok: out of memory");
		goto out;
	}
	snprintf(o->name, sizeof o->name, "%s", a->name);
	o->result = SEMQ_PLUGIN_OK;
	for (i = 0; i < a->n_options; i++) {
		const char *k = a->options[i].key, *v = a->options[i].value;
		const char *w = a->options[i].where ? a->options[i].where : "?";

		if (strcmp(k, "fail") == 0 && strcmp(v, "retry") == 0)
			o->result = SEMQ_PLUGIN_RETRY;
		else if (strcmp(k, "fail") == 0 && strcmp(v, "permanent") == 0)
			o->result = SEMQ_PLUGIN_PERMANENT;
		else if (strcmp(k, "fail") == 0 && strcmp(v, "bogus") == 0)
			o->result = 42;
		else if (strcmp(k, "errtext") == 0 && strcmp(v, "normal") == 0)
			o->errtext = ET_NORMAL;
		else if (strcmp(k, "errtext") == 0 && strcmp(v, "empty") == 0)
			o->errtext = ET_EMPTY;
		else if (strcmp(k, "errtext") == 0 &&
			 strcmp(v, "unterminated") == 0)
			o->errtext = ET_UNTERMINATED;
		else if (strcmp(k, "errtext") == 0 &&
			 strcmp(v, "multiline") == 0)
			o->errtext = ET_MULTILINE;
		else if (strcmp(k, "refuse") == 0 && strcmp(v, "yes") == 0) {
			snprintf(err, errsz, "ok: %s: refusing as asked", w);
			goto out;
		} else if (strcmp(k, "refuse") == 0 && strcmp(v, "no") == 0)
			continue;
		else if (strcmp(k, "fini_file") == 0) {
			free(o->fini_file);
			o->fini_file = strdup(v);
		} else {
			snprintf(err, errsz, "ok: %s: bad option %s = %s", w, k,
				 v);
			goto out;
		}
	}
	if (!db || a->tx->db_kind != SEMQ_DB_SQLITE) {
		snprintf(err, errsz, "ok: needs a SQLite database");
		goto out;
	}
	if (sqlite3_exec(db,
			 "CREATE TABLE IF NOT EXISTS ok_inits(plugin TEXT, "
			 "node_id TEXT, abi_version INTEGER, "
			 "n_options INTEGER, reserved_clear INTEGER);"
			 "CREATE TABLE IF NOT EXISTS ok_calls(plugin TEXT, "
			 "type INTEGER, seq INTEGER, origin TEXT, dest TEXT, "
			 "msg_key TEXT, prev_seq INTEGER, deliver_at INTEGER, "
			 "created_at INTEGER, payload BLOB, tries INTEGER, "
			 "reserved_clear INTEGER)",
			 NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "INSERT INTO ok_inits VALUES (?,?,?,?,?)",
			       -1, &st, NULL) != SQLITE_OK) {
		snprintf(err, errsz, "ok: %s", sqlite3_errmsg(db));
		goto out;
	}
	sqlite3_bind_text(st, 1, a->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, a->node_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, a->abi_version);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)a->n_options);
	sqlite3_bind_int(st, 5,
			 all_null(a->reserved, 6) &&
				 all_null(a->tx->reserved, 6));
	if (sqlite3_step(st) != SQLITE_DONE) {
		snprintf(err, errsz, "ok: %s", sqlite3_errmsg(db));
		goto out;
	}
	*handle_out = o;
	o = NULL;
	r = SEMQ_PLUGIN_OK;
out:
	sqlite3_finalize(st);
	if (o)
		free(o->fini_file);
	free(o);
	return r;
}

int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	struct ok *o = handle;
	sqlite3 *db = tx->db;
	sqlite3_stmt *st = NULL;
	int rc;

	if (sqlite3_prepare_v2(db,
			       "INSERT INTO ok_calls VALUES "
			       "(?,?,?,?,?,?,?,?,?,?,?,?)",
			       -1, &st, NULL) != SQLITE_OK) {
		snprintf(err, errsz, "ok: %s", sqlite3_errmsg(db));
		return SEMQ_PLUGIN_RETRY;
	}
	sqlite3_bind_text(st, 1, o->name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, m->type);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)m->seq);
	sqlite3_bind_text(st, 4, m->origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, m->dest, -1, SQLITE_STATIC);
	if (m->key)
		sqlite3_bind_text(st, 6, m->key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 7, (sqlite3_int64)m->prev_seq);
	sqlite3_bind_int64(st, 8, m->deliver_at);
	sqlite3_bind_int64(st, 9, m->created_at);
	sqlite3_bind_blob(st, 10, m->payload, (int)m->payload_len,
			  SQLITE_STATIC);
	sqlite3_bind_int64(st, 11, m->tries);
	sqlite3_bind_int(st, 12,
			 all_null(m->reserved, 7) && all_null(tx->reserved, 6));
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		snprintf(err, errsz, "ok: insert: %s", sqlite3_errmsg(db));
		return SEMQ_PLUGIN_RETRY;
	}
	if (o->result == SEMQ_PLUGIN_OK)
		return SEMQ_PLUGIN_OK;
	switch (o->errtext) {
	case ET_EMPTY: err[0] = '\0'; break;
	case ET_UNTERMINATED: memset(err, 'x', errsz); break;
	case ET_MULTILINE:
		snprintf(err, errsz, "ok: first line\nsecond line\n");
		break;
	default:
		snprintf(err, errsz, "ok: %s failing as asked", o->name);
		break;
	}
	return o->result;
}

void semq_plugin_fini(void *handle)
{
	struct ok *o = handle;
	FILE *f;

	if (o->fini_file) {
		f = fopen(o->fini_file, "a");
		if (f) {
			fprintf(f, "%s\n", o->name);
			fclose(f);
		}
	}
	free(o->fini_file);
	free(o);
}
