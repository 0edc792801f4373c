/* SPDX-License-Identifier: MIT */
/*
 * minimal: the smallest complete SEMQ plugin, as a starting point for your
 * own (docs/PLUGINS.md walks through it). It copies every message it is given
 * into the table
 *
 *   minimal_inbox(origin, dest, seq, type, msg_key, payload, tries)
 *
 * inside the node's transaction, so the row commits together with the
 * node's record that the message was received: exactly once, or not at all.
 *
 * One option, to show how options and PERMANENT failures work:
 *
 *   reject_empty = yes|no    (default no) a message with an empty payload is
 *                            a bad document: PERMANENT, dead in the redo
 *                            queue for an operator
 *
 * It serves SQLite nodes only, to stay short: on a node whose database is
 * PostgreSQL (tx->db_kind SEMQ_DB_PG, tx->db a `PGconn *`) init refuses.
 * docs/PLUGINS.md, "PostgreSQL", shows what a plugin adds to serve both.
 *
 * Build it alone with
 *
 *   gcc -shared -fPIC -Wall -Wextra -Iinclude -o minimal.so \
 *       examples/minimal_plugin/minimal.c -lsqlite3
 *
 * and name it in node.ini:
 *
 *   [plugin minimal]
 *   path = /usr/local/lib/semq/plugins/minimal.so
 *   types = *
 *   reject_empty = yes
 */
#include <semq/plugin.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

/* The plugin's own state: made by init, released by fini. */
struct minimal {
	int reject_empty;
};

__attribute__((format(printf, 3, 4))) static void errf(char *err, size_t errsz,
						       const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

int semq_plugin_abi_version(void)
{
	return SEMQ_PLUGIN_ABI_VERSION; /* as compiled into this plugin */
}

int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_PERMANENT; /* init: anything but OK refuses */
	struct minimal *mp = NULL;     /* owned until handed out */
	char *msg = NULL;

	if (a->tx->db_kind != SEMQ_DB_SQLITE) {
		errf(err, errsz, "minimal: needs a SQLite node database");
		goto out;
	}
	mp = calloc(1, sizeof *mp);
	if (!mp) {
		errf(err, errsz, "minimal: out of memory");
		goto out;
	}
	/* Options are borrowed for this call: check each one here, once, and
	 * name its config line (o->where) in the message. */
	for (size_t i = 0; i < a->n_options; i++) {
		const struct semq_plugin_option *o = &a->options[i];

		if (strcmp(o->key, "reject_empty") != 0) {
			errf(err, errsz,
			     "minimal: %s: unknown option '%s' (reject_empty)",
			     o->where, o->key);
			goto out;
		}
		if (strcmp(o->value, "yes") == 0) {
			mp->reject_empty = 1;
		} else if (strcmp(o->value, "no") == 0) {
			mp->reject_empty = 0;
		} else {
			errf(err, errsz,
			     "minimal: %s: reject_empty '%s' is not yes or no",
			     o->where, o->value);
			goto out;
		}
	}
	/* Outside any transaction: the place to create your tables. */
	if (sqlite3_exec(a->tx->db,
			 "CREATE TABLE IF NOT EXISTS minimal_inbox("
			 "origin TEXT NOT NULL, dest TEXT NOT NULL, "
			 "seq INTEGER NOT NULL, type INTEGER NOT NULL, "
			 "msg_key TEXT, payload BLOB NOT NULL, "
			 "tries INTEGER NOT NULL, "
			 "PRIMARY KEY (origin, dest, seq))",
			 NULL, NULL, &msg) != SQLITE_OK) {
		errf(err, errsz, "minimal: cannot create minimal_inbox: %s",
		     msg ? msg : sqlite3_errmsg(a->tx->db));
		goto out;
	}
	*handle_out = mp;
	mp = NULL;
	r = SEMQ_PLUGIN_OK;
out:
	sqlite3_free(msg);
	free(mp);
	return r;
}

int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	const struct minimal *mp = handle;
	sqlite3 *db = tx->db; /* the open transaction: never BEGIN/COMMIT */
	sqlite3_stmt *ins = NULL;
	int r = SEMQ_PLUGIN_RETRY;

	if (mp->reject_empty && m->payload_len == 0) {
		errf(err, errsz, "minimal: %s/%s/%llu has an empty payload",
		     m->origin, m->dest, (unsigned long long)m->seq);
		return SEMQ_PLUGIN_PERMANENT; /* a bad document: no retry */
	}
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO minimal_inbox(origin, dest, seq, "
			       "type, msg_key, payload, tries) "
			       "VALUES (?, ?, ?, ?, ?, ?, ?)",
			       -1, &ins, NULL) != SQLITE_OK)
		goto fail;
	sqlite3_bind_text(ins, 1, m->origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 2, m->dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(ins, 3, (sqlite3_int64)m->seq);
	sqlite3_bind_int64(ins, 4, (sqlite3_int64)m->type);
	if (m->key)
		sqlite3_bind_text(ins, 5, m->key, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(ins, 5);
	/* A zero-length blob, not NULL, when the payload is empty. */
	sqlite3_bind_blob(ins, 6,
			  m->payload_len ? (const void *)m->payload : "",
			  (int)m->payload_len, SQLITE_STATIC);
	sqlite3_bind_int(ins, 7, (int)m->tries);
	if (sqlite3_step(ins) != SQLITE_DONE)
		goto fail;
	r = SEMQ_PLUGIN_OK;
	goto out;
fail:
	/* A database problem is transient: RETRY, from the redo queue. */
	errf(err, errsz, "minimal: insert failed: %s", sqlite3_errmsg(db));
out:
	sqlite3_finalize(ins);
	return r;
}

void semq_plugin_fini(void *handle)
{
	free(handle);
}
