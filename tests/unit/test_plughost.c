/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the plugin host (node/plughost.c) and the journal plugin
 * (plugins/journal/journal.c), with real shared objects and a real SQLite
 * file as the transaction. The test plugins (tests/unit/plugins/) show what
 * the host did to them through tables in that file, since a plugin loaded
 * with RTLD_LOCAL shares no globals with the test: ok.so records its init and
 * every call; badabi.so claims ABI 999; nosym.so has no semq_plugin_handle.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "config.h"
#include "plughost.h"
#include "types.h"

#define OK_SO TEST_PLUGIN_DIR "/ok.so"
#define BADABI_SO TEST_PLUGIN_DIR "/badabi.so"
#define NOSYM_SO TEST_PLUGIN_DIR "/nosym.so"

/* Per test: a fresh directory under $TMPDIR holding the database file. */
struct fx {
	char dir[1024];
	char dbpath[1100];
	char finipath[1100];
	sqlite3 *db; /* owned; closed in teardown */
	struct semq_plugin_tx tx;
};

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof *f);

	if (!f)
		return -1;
	snprintf(f->dir, sizeof f->dir, "%s/plughost-XXXXXX",
		 tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->dbpath, sizeof f->dbpath, "%s/node.db", f->dir);
	snprintf(f->finipath, sizeof f->finipath, "%s/fini.txt", f->dir);
	if (sqlite3_open_v2(f->dbpath, &f->db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
			    NULL) != SQLITE_OK)
		return -1;
	f->tx.db_kind = SEMQ_DB_SQLITE;
	f->tx.db = f->db;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char p[1200];

	sqlite3_close(f->db);
	unlink(f->dbpath);
	snprintf(p, sizeof p, "%s-journal", f->dbpath);
	unlink(p);
	snprintf(p, sizeof p, "%s-wal", f->dbpath);
	unlink(p);
	snprintf(p, sizeof p, "%s-shm", f->dbpath);
	unlink(p);
	unlink(f->finipath);
	snprintf(p, sizeof p, "%s/guard", f->dir);
	unlink(p);
	snprintf(p, sizeof p, "%s/garbage.so", f->dir);
	unlink(p);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* The one integer a query returns (-1 when it returns no row). */
static int64_t q_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int64_t v = -1;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* The one text a query returns, into buf ("<null>" for NULL, "" no row). */
static const char *q_text(sqlite3 *db, const char *sql, char *buf, size_t bufsz)
{
	sqlite3_stmt *st = NULL;

	buf[0] = '\0';
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW) {
		const unsigned char *t = sqlite3_column_text(st, 0);

		snprintf(buf, bufsz, "%s", t ? (const char *)t : "<null>");
	}
	sqlite3_finalize(st);
	return buf;
}

static void exec(sqlite3 *db, const char *sql)
{
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
}

static void mkmsg(struct msg *m, uint32_t type, uint64_t seq, const char *key)
{
	memset(m, 0, sizeof *m);
	snprintf(m->id.origin, sizeof m->id.origin, "R1");
	snprintf(m->id.dest, sizeof m->id.dest, "S1");
	m->id.seq = seq;
	m->type = type;
	if (key) {
		m->has_key = 1;
		snprintf(m->key, sizeof m->key, "%s", key);
	}
}

static void slurp(const char *path, char *buf, size_t bufsz)
{
	FILE *fp = fopen(path, "r");
	size_t n = 0;

	if (fp) {
		n = fread(buf, 1, bufsz - 1, fp);
		fclose(fp);
	}
	buf[n] = '\0';
}

/* ---- refusals ------------------------------------------------------------ */

static void test_wrong_abi_refused(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	char err[SEMQ_ERRLEN * 2], want[SEMQ_ERRLEN * 2];

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "bad", BADABI_SO, NULL, 0, NULL, 0,
				      "S1", &f->tx, err, sizeof err),
			 SEMQ_ERR_VERSION);
	snprintf(want, sizeof want,
		 "plugin 'bad': '%s' was built for ABI 999, this semqd speaks "
		 "1; rebuild the plugin",
		 BADABI_SO);
	assert_string_equal(err, want);
	/* Refused before init ran, and not registered. */
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM sqlite_master "
				      "WHERE name = 'badabi_was_initialised'"),
			 0);
	assert_false(plughost_handles(h, 1));
	plughost_free(h);
}

static void test_missing_symbol_refused(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	char err[SEMQ_ERRLEN * 2], want[SEMQ_ERRLEN * 2];

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "nosym", NOSYM_SO, NULL, 0, NULL, 0,
				      "S1", &f->tx, err, sizeof err),
			 SEMQ_ERR_NOT_FOUND);
	snprintf(want, sizeof want,
		 "plugin 'nosym': '%s' lacks the required symbol "
		 "semq_plugin_handle",
		 NOSYM_SO);
	assert_string_equal(err, want);
	assert_false(plughost_handles(h, 1));
	plughost_free(h);
}

static void test_missing_file_refused(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	char err[SEMQ_ERRLEN * 8], want[1200], path[1100];
	FILE *fp;

	assert_non_null(h);
	snprintf(path, sizeof path, "%s/nope.so", f->dir);
	assert_int_equal(plughost_add(h, "nope", path, NULL, 0, NULL, 0, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_ERR_NOT_FOUND);
	snprintf(want, sizeof want, "plugin 'nope': cannot load '%s': ", path);
	assert_memory_equal(err, want, strlen(want));
	assert_true(strlen(err) > strlen(want)); /* dlerror's cause follows */

	/* A file that is there but is no shared object. */
	snprintf(path, sizeof path, "%s/garbage.so", f->dir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("not an ELF file\n", fp);
	fclose(fp);
	assert_int_equal(plughost_add(h, "garbage", path, NULL, 0, NULL, 0,
				      "S1", &f->tx, err, sizeof err),
			 SEMQ_ERR_PLUGIN);
	snprintf(want, sizeof want,
		 "plugin 'garbage': cannot load '%s': ", path);
	assert_memory_equal(err, want, strlen(want));
	plughost_free(h);
}

static void test_init_refusal_propagates(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	struct semq_plugin_option refuse[] = {{"refuse", "yes", "node.ini:9"}};
	struct semq_plugin_option odd[] = {{"colour", "red", "node.ini:10"}};
	char err[SEMQ_ERRLEN * 2];

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "okr", OK_SO, NULL, 0, refuse, 1, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_ERR_PLUGIN);
	assert_string_equal(err, "plugin 'okr': init failed: ok: node.ini:9: "
				 "refusing as asked");
	assert_int_equal(plughost_add(h, "oko", OK_SO, NULL, 0, odd, 1, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_ERR_PLUGIN);
	assert_string_equal(err, "plugin 'oko': init failed: ok: node.ini:10: "
				 "bad option colour = red");
	assert_false(plughost_handles(h, 1));

	/* A refused plugin leaves the host as it was: a good one still loads,
	 * and a second plugin of the same name is refused. */
	assert_int_equal(plughost_add(h, "good", OK_SO, NULL, 0, NULL, 0, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(plughost_add(h, "good", OK_SO, NULL, 0, NULL, 0, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_ERR_CONFIG);
	assert_string_equal(err,
			    "plugin 'good': a plugin of that name is loaded");
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM ok_inits"), 1);
	plughost_free(h);
}

/* ---- routing and the call ----------------------------------------------- */

static void apply_and_expect(struct plughost *h, struct fx *f, uint32_t type,
			     uint64_t seq, const char *plugin)
{
	struct msg m;
	char err[SEMQ_ERRLEN], sql[128], got[64];

	mkmsg(&m, type, seq, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	assert_string_equal(err, "");
	snprintf(sql, sizeof sql,
		 "SELECT plugin FROM ok_calls WHERE seq = %llu",
		 (unsigned long long)seq);
	assert_string_equal(q_text(f->db, sql, got, sizeof got), plugin);
}

static void test_routing(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty(), *spec = plughost_empty();
	const uint32_t t5[] = {5}, t57[] = {5, 7};
	struct msg m;
	char err[SEMQ_ERRLEN];

	assert_non_null(h);
	assert_non_null(spec);
	/* In this order: star1 (*), specA (5), star2 (*), specB (5, 7). */
	assert_int_equal(plughost_add(h, "star1", OK_SO, NULL, 0, NULL, 0, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(plughost_add(h, "specA", OK_SO, t5, 1, NULL, 0, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(plughost_add(h, "star2", OK_SO, NULL, 0, NULL, 0, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(plughost_add(h, "specB", OK_SO, t57, 2, NULL, 0, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);

	apply_and_expect(h, f, 5, 1,
			 "specA"); /* specific beats *, first wins */
	apply_and_expect(h, f, 7, 2, "specB"); /* the only specific one */
	apply_and_expect(h, f, 9, 3, "star1"); /* first of the * plugins */
	assert_true(plughost_handles(h, 5));
	assert_true(plughost_handles(h, 123456));
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM ok_calls"), 3);

	/* Only a specific plugin: another type waits as RETRY. */
	assert_int_equal(plughost_add(spec, "only5", OK_SO, t5, 1, NULL, 0,
				      "S1", &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_true(plughost_handles(spec, 5));
	assert_false(plughost_handles(spec, 9));
	mkmsg(&m, 9, 4, NULL);
	assert_int_equal(plughost_apply(spec, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(err, "no plugin handles type 9");
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM ok_calls"), 3);
	apply_and_expect(spec, f, 5, 5, "only5");

	plughost_free(spec);
	plughost_free(h);

	/* An empty host, and no host at all, take nothing. */
	h = plughost_empty();
	assert_non_null(h);
	assert_false(plughost_handles(h, 1));
	mkmsg(&m, 2800, 6, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(err, "no plugin handles type 2800");
	assert_int_equal(plughost_apply(NULL, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(err, "no plugin handles type 2800");
	plughost_free(h);
	plughost_free(NULL);
}

static void test_message_fields(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	struct semq_plugin_option opts[] = {{"refuse", "no", "node.ini:3"},
					    {"fail", "retry", "node.ini:4"}};
	uint8_t payload[] = {'d', 'o', 'c', 0, 0xff};
	struct msg m;
	char err[SEMQ_ERRLEN], got[256];
	sqlite3_stmt *st = NULL;

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "fields", OK_SO, NULL, 0, opts, 2,
				      "S1", &f->tx, err, sizeof err),
			 SEMQ_OK);
	/* What init was given. */
	assert_string_equal(
		q_text(f->db, "SELECT node_id FROM ok_inits", got, sizeof got),
		"S1");
	assert_int_equal(q_int(f->db, "SELECT abi_version FROM ok_inits"),
			 SEMQ_PLUGIN_ABI_VERSION);
	assert_int_equal(q_int(f->db, "SELECT n_options FROM ok_inits"), 2);
	assert_int_equal(q_int(f->db, "SELECT reserved_clear FROM ok_inits"),
			 1);

	/* Every field, a key that is set but flagged absent, tries 3. */
	mkmsg(&m, 2800, 42, NULL);
	snprintf(m.key, sizeof m.key, "stale");
	m.prev_seq = 40;
	m.deliver_at = 1700000000123;
	m.created_at = 1600000000456;
	m.payload = payload;
	m.payload_len = sizeof payload;
	assert_int_equal(plughost_apply(h, &m, 3, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(err, "ok: fields failing as asked");
	assert_int_equal(
		sqlite3_prepare_v2(f->db,
				   "SELECT type, seq, origin, dest, msg_key, "
				   "prev_seq, deliver_at, created_at, payload, "
				   "tries, reserved_clear FROM ok_calls",
				   -1, &st, NULL),
		SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int64(st, 0), 2800);
	assert_int_equal(sqlite3_column_int64(st, 1), 42);
	assert_string_equal((const char *)sqlite3_column_text(st, 2), "R1");
	assert_string_equal((const char *)sqlite3_column_text(st, 3), "S1");
	assert_int_equal(sqlite3_column_type(st, 4), SQLITE_NULL);
	assert_int_equal(sqlite3_column_int64(st, 5), 40);
	assert_int_equal(sqlite3_column_int64(st, 6), 1700000000123);
	assert_int_equal(sqlite3_column_int64(st, 7), 1600000000456);
	assert_int_equal(sqlite3_column_bytes(st, 8), sizeof payload);
	assert_memory_equal(sqlite3_column_blob(st, 8), payload,
			    sizeof payload);
	assert_int_equal(sqlite3_column_int64(st, 9), 3);
	assert_int_equal(sqlite3_column_int64(st, 10), 1);
	assert_int_equal(sqlite3_step(st), SQLITE_DONE);
	sqlite3_finalize(st);

	/* With a key. */
	mkmsg(&m, 2800, 43, "BILL-7");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(q_text(f->db,
				   "SELECT msg_key || '/' || tries FROM "
				   "ok_calls WHERE seq = 43",
				   got, sizeof got),
			    "BILL-7/0");
	plughost_free(h);
}

static void test_plugin_results_checked(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	const uint32_t t1[] = {1}, t2[] = {2}, t3[] = {3}, t4[] = {4},
		       t5[] = {5};
	struct semq_plugin_option perm[] = {{"fail", "permanent", NULL}};
	struct semq_plugin_option bogus[] = {{"fail", "bogus", NULL}};
	struct semq_plugin_option empty[] = {{"fail", "retry", NULL},
					     {"errtext", "empty", NULL}};
	struct semq_plugin_option unterm[] = {
		{"fail", "permanent", NULL}, {"errtext", "unterminated", NULL}};
	struct semq_plugin_option multi[] = {{"fail", "retry", NULL},
					     {"errtext", "multiline", NULL}};
	char err[SEMQ_ERRLEN * 2], want[SEMQ_ERRLEN];
	struct msg m;

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "perm", OK_SO, t1, 1, perm, 1, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(plughost_add(h, "bogus", OK_SO, t2, 1, bogus, 1, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(plughost_add(h, "mute", OK_SO, t3, 1, empty, 2, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(plughost_add(h, "long", OK_SO, t4, 1, unterm, 2, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(plughost_add(h, "multi", OK_SO, t5, 1, multi, 2, "S1",
				      &f->tx, err, sizeof err),
			 SEMQ_OK);

	mkmsg(&m, 1, 1, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(err, "ok: perm failing as asked");

	/* 42 is not a result: PERMANENT, and the err says so. */
	mkmsg(&m, 2, 2, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(err, "plugin 'bogus' returned 42, which is not OK, "
				 "RETRY or PERMANENT; treated as PERMANENT: "
				 "ok: bogus failing as asked");

	/* A failure without a word gets a text naming the plugin. */
	mkmsg(&m, 3, 3, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(err,
			    "plugin 'mute' failed (RETRY) without saying why");

	/* A plugin filling the whole buffer without a NUL: cut, terminated. */
	mkmsg(&m, 4, 4, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_PERMANENT);
	memset(want, 'x', SEMQ_ERRLEN - 1);
	want[SEMQ_ERRLEN - 1] = '\0';
	assert_string_equal(err, want);

	/* Several lines become one. */
	mkmsg(&m, 5, 5, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(err, "ok: first line second line");

	/* A small caller buffer is respected and terminated. */
	mkmsg(&m, 1, 6, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, 8),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(err, "ok: per");
	plughost_free(h);
}

/* ---- the journal plugin --------------------------------------------------- */

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_journal_rows(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	uint8_t payload[5] = {1, 2, 3, 4, 5};
	struct msg m;
	char err[SEMQ_ERRLEN], got[256];
	int64_t t0, t1;

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "journal", JOURNAL_SO, NULL, 0, NULL,
				      0, "S1", &f->tx, err, sizeof err),
			 SEMQ_OK);
	/* No unique constraint: no index at all on journal. */
	assert_int_equal(
		q_int(f->db,
		      "SELECT count(*) FROM pragma_index_list('journal')"),
		0);

	t0 = wall_ms();
	mkmsg(&m, 2800, 7, "BILL-7");
	m.payload = payload;
	m.payload_len = sizeof payload;
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	/* The same message again: a second row, as a duplicate effect. */
	assert_int_equal(plughost_apply(h, &m, 1, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	mkmsg(&m, 17, 8, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	t1 = wall_ms();

	assert_int_equal(q_int(f->db, "SELECT count(*) FROM journal"), 3);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM journal WHERE "
				      "origin = 'R1' AND dest = 'S1' AND "
				      "seq = 7 AND type = 2800 AND "
				      "msg_key = 'BILL-7' AND "
				      "payload_len = 5"),
			 2);
	assert_string_equal(q_text(f->db,
				   "SELECT origin || '/' || dest || '/' || seq "
				   "|| ' ' || type || ' ' || "
				   "coalesce(msg_key, '<null>') || ' ' || "
				   "payload_len FROM journal WHERE seq = 8",
				   got, sizeof got),
			    "R1/S1/8 17 <null> 0");
	assert_true(q_int(f->db, "SELECT min(handled_at) FROM journal") >= t0);
	assert_true(q_int(f->db, "SELECT max(handled_at) FROM journal") <= t1);
	plughost_free(h);
}

/*
 * Runs n calls through a fresh journal with `opts` inside one transaction;
 * verdicts[i] gets the result of call i. Returns the number of RETRYs and
 * checks that exactly the OK calls left a row.
 */
static int journal_run(struct fx *f, const struct semq_plugin_option *opts,
		       size_t n_opts, int n, char *verdicts, char *last_err,
		       size_t errsz)
{
	struct plughost *h = plughost_empty();
	struct msg m;
	char err[SEMQ_ERRLEN];
	int i, retries = 0, oks = 0;

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "journal", JOURNAL_SO, NULL, 0, opts,
				      n_opts, "S1", &f->tx, err, sizeof err),
			 SEMQ_OK);
	exec(f->db, "DELETE FROM journal; BEGIN");
	for (i = 0; i < n; i++) {
		int rc;

		mkmsg(&m, 2800, (uint64_t)i + 1, "K");
		rc = plughost_apply(h, &m, 0, &f->tx, err, sizeof err);
		assert_true(rc == SEMQ_PLUGIN_OK || rc == SEMQ_PLUGIN_RETRY);
		verdicts[i] = (char)rc;
		if (rc == SEMQ_PLUGIN_RETRY) {
			retries++;
			snprintf(last_err, errsz, "%s", err);
		} else {
			oks++;
		}
	}
	exec(f->db, "COMMIT");
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM journal"), oks);
	plughost_free(h);
	return retries;
}

static void test_journal_fail_rate(void **state)
{
	struct fx *f = *state;
	enum { N = 1000 };
	struct semq_plugin_option half42[] = {{"fail_rate", "0.5", "n:1"},
					      {"fail_seed", "42", "n:2"}};
	struct semq_plugin_option half43[] = {{"fail_rate", "0.5", "n:1"},
					      {"fail_seed", "43", "n:2"}};
	struct semq_plugin_option half1[] = {{"fail_rate", "0.5", "n:1"},
					     {"fail_seed", "1", "n:2"}};
	struct semq_plugin_option zero[] = {{"fail_rate", "0", "n:1"}};
	struct semq_plugin_option one[] = {{"fail_rate", "1", "n:1"}};
	struct semq_plugin_option third[] = {{"fail_rate", "0.3", "n:1"}};
	static char a[N], b[N], c[N], d[N];
	char last[SEMQ_ERRLEN] = "";
	int r;

	r = journal_run(f, half42, 2, N, a, last, sizeof last);
	assert_in_range(r, 400, 600);
	assert_string_equal(last, "journal: injected failure (fail_rate 0.5)");
	/* Same seed, same sequence. */
	assert_int_equal(journal_run(f, half42, 2, N, b, last, sizeof last), r);
	assert_memory_equal(a, b, N);
	/* Another seed, another sequence. */
	assert_in_range(journal_run(f, half43, 2, N, c, last, sizeof last), 400,
			600);
	assert_memory_not_equal(a, c, N);
	/* No fail_seed means seed 1. */
	journal_run(f, half1, 2, N, c, last, sizeof last);
	journal_run(f, half1, 1, N, d, last, sizeof last);
	assert_memory_equal(c, d, N);

	assert_int_equal(journal_run(f, zero, 1, N, a, last, sizeof last), 0);
	last[0] = '\0';
	assert_int_equal(journal_run(f, one, 1, N, a, last, sizeof last), N);
	assert_string_equal(last, "journal: injected failure (fail_rate 1)");
	assert_in_range(journal_run(f, third, 1, N, a, last, sizeof last), 200,
			400);
	assert_string_equal(last, "journal: injected failure (fail_rate 0.3)");
}

static void test_journal_permanent_keys(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	struct semq_plugin_option opts[] = {
		{"permanent_keys", "A, B ,C", "node.ini:7"}};
	struct semq_plugin_option always[] = {
		{"fail_rate", "1", "node.ini:8"},
		{"permanent_keys", "X", "node.ini:9"}};
	struct msg m;
	char err[SEMQ_ERRLEN];

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "journal", JOURNAL_SO, NULL, 0, opts,
				      1, "S1", &f->tx, err, sizeof err),
			 SEMQ_OK);
	mkmsg(&m, 2800, 1, "B");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(err, "journal: key B is listed in permanent_keys");
	mkmsg(&m, 2800, 2, "C");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, 2800, 3, "D");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	mkmsg(&m, 2800, 4, " B");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	mkmsg(&m, 2800, 5, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM journal"), 3);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM journal WHERE "
				      "msg_key IN ('B', 'C')"),
			 0);
	plughost_free(h);

	/* A permanent key is PERMANENT even when every call would fail. */
	h = plughost_empty();
	assert_non_null(h);
	assert_int_equal(plughost_add(h, "journal", JOURNAL_SO, NULL, 0, always,
				      2, "S1", &f->tx, err, sizeof err),
			 SEMQ_OK);
	mkmsg(&m, 2800, 6, "X");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, 2800, 7, "Y");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_RETRY);
	plughost_free(h);
}

static void expect_journal_refusal(struct fx *f, const char *key,
				   const char *value, const char *where,
				   const char *want)
{
	struct plughost *h = plughost_empty();
	struct semq_plugin_option o = {key, value, where};
	char err[SEMQ_ERRLEN * 2], full[SEMQ_ERRLEN * 2];

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "journal", JOURNAL_SO, NULL, 0, &o, 1,
				      "S1", &f->tx, err, sizeof err),
			 SEMQ_ERR_PLUGIN);
	snprintf(full, sizeof full, "plugin 'journal': init failed: %s", want);
	assert_string_equal(err, full);
	assert_false(plughost_handles(h, 2800));
	plughost_free(h);
}

static void test_journal_bad_options(void **state)
{
	struct fx *f = *state;
	struct plughost *h;
	struct semq_plugin_option twice[] = {{"fail_seed", "1", "node.ini:5"},
					     {"fail_seed", "2", "node.ini:6"}};
	char err[SEMQ_ERRLEN * 2];

	expect_journal_refusal(
		f, "bogus", "1", "node.ini:31",
		"journal: node.ini:31: unknown option 'bogus' "
		"(fail_rate, fail_seed, permanent_keys, "
		"crash_keys, stall_keys, stall_ms, slow_keys, slow_ms)");
	expect_journal_refusal(f, "fail_rate", "2", "node.ini:32",
			       "journal: node.ini:32: fail_rate '2' is not "
			       "between 0 and 1");
	expect_journal_refusal(f, "fail_rate", "-0.1", "node.ini:33",
			       "journal: node.ini:33: fail_rate '-0.1' is not "
			       "between 0 and 1");
	expect_journal_refusal(f, "fail_rate", "nan", "node.ini:34",
			       "journal: node.ini:34: fail_rate 'nan' is not "
			       "between 0 and 1");
	expect_journal_refusal(f, "fail_rate", "half", "node.ini:35",
			       "journal: node.ini:35: fail_rate 'half' is not "
			       "a number between 0 and 1");
	expect_journal_refusal(f, "fail_rate", "", "node.ini:36",
			       "journal: node.ini:36: fail_rate '' is not "
			       "a number between 0 and 1");
	expect_journal_refusal(f, "fail_seed", "-1", "node.ini:37",
			       "journal: node.ini:37: fail_seed '-1' is not "
			       "an unsigned 64-bit integer");
	expect_journal_refusal(f, "fail_seed", "18446744073709551616",
			       "node.ini:38",
			       "journal: node.ini:38: fail_seed "
			       "'18446744073709551616' is not an unsigned "
			       "64-bit integer");
	expect_journal_refusal(f, "permanent_keys", "A,,B", "node.ini:39",
			       "journal: node.ini:39: permanent_keys 'A,,B' "
			       "has an empty key");
	/* Options given without a config line. */
	expect_journal_refusal(
		f, "colour", "red", NULL,
		"journal: options: unknown option 'colour' "
		"(fail_rate, fail_seed, permanent_keys, "
		"crash_keys, stall_keys, stall_ms, slow_keys, slow_ms)");
	expect_journal_refusal(f, "crash_keys", "A,", "node.ini:40",
			       "journal: node.ini:40: crash_keys 'A,' has an "
			       "empty key");
	expect_journal_refusal(f, "stall_ms", "-5", "node.ini:41",
			       "journal: node.ini:41: stall_ms '-5' is not a "
			       "number of ms 0..3600000");

	h = plughost_empty();
	assert_non_null(h);
	assert_int_equal(plughost_add(h, "journal", JOURNAL_SO, NULL, 0, twice,
				      2, "S1", &f->tx, err, sizeof err),
			 SEMQ_ERR_PLUGIN);
	assert_string_equal(err, "plugin 'journal': init failed: journal: "
				 "node.ini:6: fail_seed given twice");
	plughost_free(h);
}

static void test_journal_new_connection(void **state)
{
	struct fx *f = *state;
	struct plughost *h = plughost_empty();
	struct semq_plugin_tx tx2 = {.db_kind = SEMQ_DB_SQLITE};
	sqlite3 *db2 = NULL;
	struct msg m;
	char err[SEMQ_ERRLEN], got[64];

	assert_non_null(h);
	assert_int_equal(plughost_add(h, "journal", JOURNAL_SO, NULL, 0, NULL,
				      0, "S1", &f->tx, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(
		sqlite3_open_v2(f->dbpath, &db2, SQLITE_OPEN_READWRITE, NULL),
		SQLITE_OK);
	tx2.db = db2;
	mkmsg(&m, 1, 1, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	mkmsg(&m, 1, 2, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &tx2, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	mkmsg(&m, 1, 3, NULL);
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(q_int(db2, "SELECT count(*) FROM journal"), 3);
	assert_string_equal(q_text(f->db,
				   "SELECT group_concat(seq) FROM "
				   "(SELECT seq FROM journal ORDER BY id)",
				   got, sizeof got),
			    "1,2,3");
	/* Neither connection is left holding a statement after free. */
	plughost_free(h);
	assert_null(sqlite3_next_stmt(db2, NULL));
	assert_null(sqlite3_next_stmt(f->db, NULL));
	assert_int_equal(sqlite3_close(db2), SQLITE_OK);
}

/* ---- plughost_new from a config ----------------------------------------- */

/* A heap config as config_load would give, freed with cfg_free(). */
static struct config *cfg_alloc(size_t n_plugins)
{
	struct config *c = calloc(1, sizeof *c);

	assert_non_null(c);
	c->file = strdup("node.ini");
	snprintf(c->id, sizeof c->id, "S1");
	c->plugins = calloc(n_plugins, sizeof *c->plugins);
	assert_non_null(c->plugins);
	c->n_plugins = n_plugins;
	return c;
}

static void cfg_plugin_set(struct cfg_plugin *p, const char *name,
			   const char *path, int line, const uint32_t *types,
			   size_t n_types, const char *const *kv, size_t n_kv)
{
	size_t i;
	char where[32];

	snprintf(p->name, sizeof p->name, "%s", name);
	p->path = strdup(path);
	p->line = line;
	p->all_types = n_types == 0;
	if (n_types) {
		p->types = malloc(n_types * sizeof *p->types);
		assert_non_null(p->types);
		memcpy(p->types, types, n_types * sizeof *p->types);
		p->n_types = n_types;
	}
	p->options = calloc(n_kv ? n_kv : 1, sizeof *p->options);
	assert_non_null(p->options);
	for (i = 0; i < n_kv; i++) {
		snprintf(where, sizeof where, "node.ini:%d", line + 1 + (int)i);
		p->options[i].key = strdup(kv[2 * i]);
		p->options[i].value = strdup(kv[2 * i + 1]);
		p->options[i].where = strdup(where);
	}
	p->n_options = n_kv;
}

/* Frees c after scribbling over every string, so that a host that kept a
 * pointer into it would be caught (by ASan, or by a wrong result). */
static void cfg_free(struct config *c)
{
	size_t i, j;

	for (i = 0; i < c->n_plugins; i++) {
		struct cfg_plugin *p = &c->plugins[i];

		for (j = 0; j < p->n_options; j++) {
			memset((char *)p->options[j].key, '#',
			       strlen(p->options[j].key));
			memset((char *)p->options[j].value, '#',
			       strlen(p->options[j].value));
			free((char *)p->options[j].key);
			free((char *)p->options[j].value);
			free((char *)p->options[j].where);
		}
		free(p->options);
		memset(p->path, '#', strlen(p->path));
		free(p->path);
		free(p->types);
	}
	memset(c->plugins, 0xa5, c->n_plugins * sizeof *c->plugins);
	free(c->plugins);
	free(c->file);
	memset(c, 0xa5, sizeof *c);
	free(c);
}

static void test_new_from_config(void **state)
{
	struct fx *f = *state;
	const uint32_t bills[] = {2800};
	const char *jopts[] = {"fail_seed", "5", "permanent_keys", "BAD"};
	const char *okopts[] = {"fini_file", f->finipath};
	struct config *c = cfg_alloc(2);
	struct plughost *h = NULL;
	struct msg m;
	char err[SEMQ_ERRLEN * 2], got[64];

	cfg_plugin_set(&c->plugins[0], "journal", JOURNAL_SO, 20, NULL, 0,
		       jopts, 2);
	cfg_plugin_set(&c->plugins[1], "bills", OK_SO, 24, bills, 1, okopts, 1);
	assert_int_equal(plughost_new(c, &f->tx, &h, err, sizeof err), SEMQ_OK);
	assert_non_null(h);
	cfg_free(c);

	mkmsg(&m, 2800, 1, "BAD");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	assert_string_equal(
		q_text(f->db, "SELECT plugin FROM ok_calls", got, sizeof got),
		"bills");
	mkmsg(&m, 1, 2, "BAD");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(err,
			    "journal: key BAD is listed in permanent_keys");
	mkmsg(&m, 1, 3, "GOOD");
	assert_int_equal(plughost_apply(h, &m, 0, &f->tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM journal"), 1);
	assert_string_equal(
		q_text(f->db, "SELECT node_id FROM ok_inits", got, sizeof got),
		"S1");

	plughost_free(h); /* fini runs */
	slurp(f->finipath, got, sizeof got);
	assert_string_equal(got, "bills\n");

	/* No plugins: an empty host. */
	c = cfg_alloc(0);
	assert_int_equal(plughost_new(c, &f->tx, &h, err, sizeof err), SEMQ_OK);
	assert_non_null(h);
	assert_false(plughost_handles(h, 2800));
	plughost_free(h);
	cfg_free(c);

	/* No config, no types. */
	h = (struct plughost *)&h;
	assert_int_equal(plughost_new(NULL, &f->tx, &h, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_null(h);
	c = cfg_alloc(1);
	cfg_plugin_set(&c->plugins[0], "none", OK_SO, 12, NULL, 0, NULL, 0);
	c->plugins[0].all_types = 0;
	assert_int_equal(plughost_new(c, &f->tx, &h, err, sizeof err),
			 SEMQ_ERR_CONFIG);
	assert_string_equal(err, "plugin 'none' (node.ini:12): no types (give "
				 "* or a list of types)");
	assert_null(h);
	cfg_free(c);
}

static void test_new_failure_unloads(void **state)
{
	struct fx *f = *state;
	const char *okopts[] = {"fini_file", f->finipath};
	const char *jbad[] = {"fail_rate", "2"};
	struct config *c;
	struct plughost *h = NULL;
	char err[SEMQ_ERRLEN * 2], want[SEMQ_ERRLEN * 2], got[64];

	/* Wrong ABI in second place: the first one is finalised. */
	c = cfg_alloc(3);
	cfg_plugin_set(&c->plugins[0], "first", OK_SO, 10, NULL, 0, okopts, 1);
	cfg_plugin_set(&c->plugins[1], "second", OK_SO, 14, NULL, 0, okopts, 1);
	cfg_plugin_set(&c->plugins[2], "bad", BADABI_SO, 30, NULL, 0, NULL, 0);
	h = (struct plughost *)&h;
	assert_int_equal(plughost_new(c, &f->tx, &h, err, sizeof err),
			 SEMQ_ERR_VERSION);
	assert_null(h);
	snprintf(want, sizeof want,
		 "plugin 'bad' (node.ini:30): '%s' was built for ABI 999, this "
		 "semqd speaks 1; rebuild the plugin",
		 BADABI_SO);
	assert_string_equal(err, want);
	slurp(f->finipath, got, sizeof got);
	assert_string_equal(got, "second\nfirst\n"); /* in reverse order */
	cfg_free(c);
	unlink(f->finipath);

	/* A missing file names the line and the path. */
	c = cfg_alloc(2);
	cfg_plugin_set(&c->plugins[0], "first", OK_SO, 10, NULL, 0, okopts, 1);
	cfg_plugin_set(&c->plugins[1], "journal", "/x/journal.so", 20, NULL, 0,
		       NULL, 0);
	assert_int_equal(plughost_new(c, &f->tx, &h, err, sizeof err),
			 SEMQ_ERR_NOT_FOUND);
	assert_null(h);
	snprintf(want, sizeof want,
		 "plugin 'journal' (node.ini:20): cannot load "
		 "'/x/journal.so': ");
	assert_memory_equal(err, want, strlen(want));
	slurp(f->finipath, got, sizeof got);
	assert_string_equal(got, "first\n");
	cfg_free(c);
	unlink(f->finipath);

	/* An init refusal carries the plugin's own words and line. */
	c = cfg_alloc(2);
	cfg_plugin_set(&c->plugins[0], "first", OK_SO, 10, NULL, 0, okopts, 1);
	cfg_plugin_set(&c->plugins[1], "journal", JOURNAL_SO, 20, NULL, 0, jbad,
		       1);
	assert_int_equal(plughost_new(c, &f->tx, &h, err, sizeof err),
			 SEMQ_ERR_PLUGIN);
	assert_null(h);
	assert_string_equal(err, "plugin 'journal' (node.ini:20): init failed: "
				 "journal: node.ini:21: fail_rate '2' is not "
				 "between 0 and 1");
	slurp(f->finipath, got, sizeof got);
	assert_string_equal(got, "first\n");
	cfg_free(c);
}

/* A host with the journal plugin (options opts) and the crash guard in the
 * fixture's directory, on its own connection to the fixture's database. */
static struct plughost *guarded_journal(struct fx *f,
					const struct semq_plugin_option *opts,
					size_t n_opts, sqlite3 **db,
					struct semq_plugin_tx *tx)
{
	struct plughost *h = plughost_empty();
	char err[SEMQ_ERRLEN], gpath[1200];

	assert_non_null(h);
	assert_int_equal(sqlite3_open(f->dbpath, db), SQLITE_OK);
	tx->db_kind = SEMQ_DB_SQLITE;
	tx->db = *db;
	assert_int_equal(plughost_add(h, "journal", JOURNAL_SO, NULL, 0, opts,
				      n_opts, "S1", tx, err, sizeof err),
			 SEMQ_OK);
	snprintf(gpath, sizeof gpath, "%s/guard", f->dir);
	assert_int_equal(plughost_guard_open(h, gpath, err, sizeof err),
			 SEMQ_OK);
	return h;
}

/* A child process handles R1/S1/seq (key) once with the journal whose
 * crash_keys is "BOOM", and dies if the plugin crashes; its exit status. */
static int child_apply(struct fx *f, uint64_t seq, const char *key)
{
	const struct semq_plugin_option crash[1] = {
		{"crash_keys", "BOOM", "test"}};
	pid_t pid = fork();
	int status = 0;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct semq_plugin_tx tx;
		struct plughost *h;
		struct msg m;
		sqlite3 *db;
		char err[SEMQ_ERRLEN];

		h = guarded_journal(f, crash, 1, &db, &tx);
		mkmsg(&m, 2800, seq, key);
		_exit(plughost_apply(h, &m, 0, &tx, err, sizeof err) ==
				      SEMQ_PLUGIN_OK
			      ? 0
			      : 3);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

/*
 * The crash guard: a document on which the plugin crashes the process is
 * counted at the next start, and after two crashes it is not handed to the
 * plugin again: PERMANENT "crashed the node 2 times", nothing written. Other
 * documents go on; one whose call returns is forgiven.
 */
static void test_guard_crashing_document(void **state)
{
	struct fx *f = *state;
	const struct semq_plugin_option crash[1] = {
		{"crash_keys", "BOOM", "test"}};
	struct semq_plugin_tx tx;
	struct plughost *h;
	struct msg m;
	sqlite3 *db;
	char err[SEMQ_ERRLEN];
	int st;

	/* twice it takes the process down */
	st = child_apply(f, 7, "BOOM");
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
	st = child_apply(f, 7, "BOOM");
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
	/* the third start: counted twice, not handed over */
	h = guarded_journal(f, crash, 1, &db, &tx);
	mkmsg(&m, 2800, 7, "BOOM");
	assert_int_equal(plughost_apply(h, &m, 0, &tx, err, sizeof err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_non_null(strstr(err, "crashed the node 2 times"));
	assert_non_null(strstr(err, "journal"));
	/* others go on */
	mkmsg(&m, 2800, 8, "K");
	assert_int_equal(plughost_apply(h, &m, 0, &tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(q_int(db, "SELECT count(*) FROM journal"), 1);
	plughost_free(h);
	sqlite3_close(db);

	/* a crash once, then a call that returns: forgiven */
	st = child_apply(f, 9, "BOOM");
	assert_true(WIFSIGNALED(st));
	{
		const struct semq_plugin_option none[1] = {
			{"crash_keys", "OTHER", "test"}};

		h = guarded_journal(f, none, 1, &db, &tx);
		mkmsg(&m, 2800, 9, "BOOM");
		assert_int_equal(plughost_apply(h, &m, 0, &tx, err, sizeof err),
				 SEMQ_PLUGIN_OK);
		plughost_free(h);
		sqlite3_close(db);
	}
	st = child_apply(f, 9, "BOOM");
	assert_true(WIFSIGNALED(st));
	h = guarded_journal(f, crash, 1, &db, &tx);
	mkmsg(&m, 2800, 9, "OK-NOW");
	m.has_key = 0;
	/* R1/S1/9 crashed once since it was forgiven: handed over again
	 * (with another key, so that it returns) */
	assert_int_equal(plughost_apply(h, &m, 0, &tx, err, sizeof err),
			 SEMQ_PLUGIN_OK);
	plughost_free(h);
	sqlite3_close(db);
}

struct stall_call {
	struct plughost *h;
	struct semq_plugin_tx *tx;
	int rc;
};

static void *stall_thread(void *arg)
{
	struct stall_call *c = arg;
	struct msg m;
	char err[SEMQ_ERRLEN];

	mkmsg(&m, 2800, 11, "SLOW");
	c->rc = plughost_apply(c->h, &m, 0, c->tx, err, sizeof err);
	return NULL;
}

/* plughost_stuck: a call running longer than the timeout is reported, with
 * the plugin and the message; not before it started, not after it
 * returned. */
static void test_guard_stuck_call(void **state)
{
	struct fx *f = *state;
	const struct semq_plugin_option stall[2] = {
		{"stall_keys", "SLOW", "test"}, {"stall_ms", "1500", "test"}};
	struct semq_plugin_tx tx;
	struct stall_call c;
	pthread_t th;
	sqlite3 *db;
	char what[256];
	int seen = 0, i;

	c.h = guarded_journal(f, stall, 2, &db, &tx);
	c.tx = &tx;
	assert_false(plughost_stuck(c.h, wall_ms(), 100, what, sizeof what));
	assert_int_equal(pthread_create(&th, NULL, stall_thread, &c), 0);
	for (i = 0; i < 200 && !seen; i++) { /* waits for the event */
		struct timespec ts = {0, 20 * 1000 * 1000};

		seen = plughost_stuck(c.h, wall_ms(), 100, what, sizeof what);
		if (!seen)
			nanosleep(&ts, NULL);
	}
	assert_true(seen);
	assert_non_null(strstr(what, "plugin 'journal'"));
	assert_non_null(strstr(what, "R1/S1/11"));
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(c.rc, SEMQ_PLUGIN_OK);
	assert_false(plughost_stuck(c.h, wall_ms(), 100, what, sizeof what));
	plughost_free(c.h);
	sqlite3_close(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_wrong_abi_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_missing_symbol_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_file_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_init_refusal_propagates,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_routing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_message_fields, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_plugin_results_checked,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_guard_crashing_document,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_guard_stuck_call, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_journal_rows, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_journal_fail_rate, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_journal_permanent_keys,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_journal_bad_options, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_journal_new_connection,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_from_config, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_new_failure_unloads, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
