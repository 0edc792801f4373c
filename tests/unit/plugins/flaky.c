/* SPDX-License-Identifier: MIT */
/*
 * A test plugin for test_proto whose outcome the test decides at run time,
 * per message key, through the database the plugin is handed (a plugin
 * loaded with RTLD_LOCAL shares no globals with the test, but it shares the
 * node's database file).
 *
 * init creates two tables:
 *
 *   flaky_rules(msg_key TEXT PRIMARY KEY, outcome TEXT)
 *       written by the test: outcome 'retry' makes handle return RETRY
 *       ("flaky: told to retry"), 'permanent' makes it return PERMANENT
 *       ("flaky: told to fail permanently"); any other outcome is a bad rule
 *       and fails PERMANENT naming it;
 *   flaky_done(id INTEGER PRIMARY KEY, origin, dest, seq, msg_key, tries)
 *       one row per successful handle, in the order the effects were applied,
 *       so a test sees exactly-once and key order by reading it.
 *
 * A message without a key, or whose key has no rule, succeeds. The plugin
 * keeps no state of its own and takes no options.
 */
#include <semq/plugin.h>

#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

int semq_plugin_abi_version(void)
{
	return SEMQ_PLUGIN_ABI_VERSION;
}

int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz)
{
	sqlite3 *db;
	char *e = NULL;
	int r = SEMQ_PLUGIN_PERMANENT;

	*handle_out = NULL; /* no state: every rule lives in the database */
	if (a->n_options) {
		snprintf(err, errsz, "flaky: %s: unknown option '%s'",
			 a->options[0].where ? a->options[0].where : "?",
			 a->options[0].key);
		goto out;
	}
	if (!a->tx || a->tx->db_kind != SEMQ_DB_SQLITE || !a->tx->db) {
		snprintf(err, errsz, "flaky: needs a SQLite database");
		goto out;
	}
	db = a->tx->db;
	if (sqlite3_exec(db,
			 "CREATE TABLE IF NOT EXISTS flaky_rules("
			 "msg_key TEXT PRIMARY KEY, outcome TEXT);"
			 "CREATE TABLE IF NOT EXISTS flaky_done("
			 "id INTEGER PRIMARY KEY, origin TEXT, dest TEXT, "
			 "seq INTEGER, msg_key TEXT, tries INTEGER)",
			 NULL, NULL, &e) != SQLITE_OK) {
		snprintf(err, errsz, "flaky: creating tables: %s",
			 e ? e : sqlite3_errmsg(db));
		goto out;
	}
	r = SEMQ_PLUGIN_OK;
out:
	sqlite3_free(e);
	return r;
}

/* The rule for `key` into outcome ("" when none). SQLITE_OK or an error. */
static int rule_of(sqlite3 *db, const char *key, char *outcome, size_t cap)
{
	sqlite3_stmt *st = NULL;
	int rc;

	outcome[0] = '\0';
	if (!key)
		return SQLITE_OK;
	rc = sqlite3_prepare_v2(db,
				"SELECT outcome FROM flaky_rules "
				"WHERE msg_key = ?1",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const unsigned char *o = sqlite3_column_text(st, 0);
		snprintf(outcome, cap, "%s", o ? (const char *)o : "");
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	sqlite3 *db = tx->db;
	sqlite3_stmt *st = NULL;
	char outcome[64];
	int rc;

	(void)handle;
	if (rule_of(db, m->key, outcome, sizeof outcome) != SQLITE_OK) {
		snprintf(err, errsz, "flaky: reading flaky_rules: %s",
			 sqlite3_errmsg(db));
		return SEMQ_PLUGIN_RETRY;
	}
	if (strcmp(outcome, "retry") == 0) {
		snprintf(err, errsz, "flaky: told to retry");
		return SEMQ_PLUGIN_RETRY;
	}
	if (strcmp(outcome, "permanent") == 0) {
		snprintf(err, errsz, "flaky: told to fail permanently");
		return SEMQ_PLUGIN_PERMANENT;
	}
	if (outcome[0]) {
		snprintf(err, errsz, "flaky: key '%s': unknown outcome '%.32s'",
			 m->key, outcome);
		return SEMQ_PLUGIN_PERMANENT;
	}
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO flaky_done(origin, dest, seq, "
			       "msg_key, tries) VALUES (?1, ?2, ?3, ?4, ?5)",
			       -1, &st, NULL) != SQLITE_OK) {
		snprintf(err, errsz, "flaky: %s", sqlite3_errmsg(db));
		return SEMQ_PLUGIN_RETRY;
	}
	sqlite3_bind_text(st, 1, m->origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, m->dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)m->seq);
	if (m->key)
		sqlite3_bind_text(st, 4, m->key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, m->tries);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		snprintf(err, errsz, "flaky: insert: %s", sqlite3_errmsg(db));
		return SEMQ_PLUGIN_RETRY;
	}
	return SEMQ_PLUGIN_OK;
}
