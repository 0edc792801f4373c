/* SPDX-License-Identifier: MIT */
/*
 * The node/db.h contract, run against both drivers: the same test functions
 * on SQLite (a database file in a temporary directory) and, with `--pg`, on
 * PostgreSQL (a fresh database created from $SEMQ_TEST_PG_URL and dropped at
 * the end). Without SEMQ_TEST_PG_URL the PostgreSQL run says so loudly and
 * exits 77, which ctest reports as skipped (tools/test.sh always sets it).
 *
 *   test_db          SQLite
 *   test_db --pg     PostgreSQL
 *
 * Each test opens its own connection and works on tables of its own, so the
 * tests do not depend on each other's order.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "db.h"
#include <semq/error.h>

static int use_pg;
static const char *admin_url; /* $SEMQ_TEST_PG_URL */
static char target[1024];     /* the file, or the URL of our database */
static char tmpdir[512];      /* SQLite: the directory of the file */
static char dbname[64];       /* PostgreSQL: the database we created */

/* ---- helpers ---------------------------------------------------------------- */

/* Fails the test with the database's message when r is not SEMQ_OK. */
#define CHECK_OK(d, r)                                                         \
	do {                                                                   \
		int r_ = (r);                                                  \
		if (r_ != SEMQ_OK)                                             \
			fail_msg("%s:%d: %d: %s", __FILE__, __LINE__, r_,      \
				 db_errmsg(d));                                \
	} while (0)

/* The SQL of the driver under test: SQLite's or PostgreSQL's text. */
static const char *kq(const char *lite, const char *pg)
{
	return use_pg ? pg : lite;
}

static struct db *open_with(const char *t, int busy_ms)
{
	struct db_open_opts o = {
		.target = t, .synchronous = -1, .busy_timeout_ms = busy_ms};
	struct db *d = NULL;
	char err[512] = "";
	int r;

	r = db_open(&o, &d, err, sizeof(err));
	if (r != SEMQ_OK)
		fail_msg("opening %s: %d: %s", t, r, err);
	return d;
}

static struct db *open_db(int busy_ms)
{
	return open_with(target, busy_ms);
}

static void exec_ok(struct db *d, const char *sql)
{
	int r = db_exec(d, sql);

	if (r != SEMQ_OK)
		fail_msg("exec [%s]: %d: %s", sql, r, db_errmsg(d));
}

/* The first column of the first row of sql, an integer. */
static int64_t q_int(struct db *d, const char *sql)
{
	struct db_stmt *s = NULL;
	int64_t v;

	CHECK_OK(d, db_prepare(d, sql, &s));
	if (db_step(s) != DB_ROW)
		fail_msg("[%s]: no row: %s", sql, db_errmsg(d));
	v = db_col_int64(s, 0);
	db_finalize(s);
	return v;
}

/* Does the first column of the first row of sql read as the text want? */
static int q_text_is(struct db *d, const char *sql, const char *want)
{
	struct db_stmt *s = NULL;
	int eq;

	CHECK_OK(d, db_prepare(d, sql, &s));
	if (db_step(s) != DB_ROW)
		fail_msg("[%s]: no row: %s", sql, db_errmsg(d));
	eq = db_col_text(s, 0) && strcmp(db_col_text(s, 0), want) == 0;
	if (!eq)
		print_error("[%s] = '%s', not '%s'\n", sql,
			    db_col_text(s, 0) ? db_col_text(s, 0) : "(null)",
			    want);
	db_finalize(s);
	return eq;
}

static void step_done(struct db_stmt *s, struct db *d)
{
	int r = db_step(s);

	if (r != DB_DONE)
		fail_msg("step: expected DONE, got %d: %s", r, db_errmsg(d));
}

static void step_row(struct db_stmt *s, struct db *d)
{
	int r = db_step(s);

	if (r != DB_ROW)
		fail_msg("step: expected ROW, got %d: %s", r, db_errmsg(d));
}

/*
 * `url` with its database (the path of the URL) replaced by name. Writes
 * into out; the query string (host=…) is kept.
 */
static void url_with_db(const char *url, const char *name, char *out,
			size_t outsz)
{
	const char *auth = strstr(url, "://");
	const char *path, *query;

	auth = auth ? auth + 3 : url;
	path = auth + strcspn(auth, "/?");
	query = path + strcspn(path, "?");
	snprintf(out, outsz, "%.*s/%s%s", (int)(path - url), url, name, query);
}

/* ---- group setup: the database the tests use ------------------------------ */

static int group_setup(void **state)
{
	(void)state;
	if (use_pg) {
		struct db *a = open_with(admin_url, 0);
		char sql[128];

		snprintf(dbname, sizeof(dbname), "semq_test_db_%ld",
			 (long)getpid());
		snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s",
			 dbname);
		exec_ok(a, sql);
		snprintf(sql, sizeof(sql), "CREATE DATABASE %s", dbname);
		exec_ok(a, sql);
		db_close(a);
		url_with_db(admin_url, dbname, target, sizeof(target));
	} else {
		const char *t = getenv("TMPDIR");

		snprintf(tmpdir, sizeof(tmpdir), "%s/test_db.XXXXXX",
			 t && *t ? t : "/tmp");
		if (!mkdtemp(tmpdir)) {
			fprintf(stderr, "mkdtemp %s: %s\n", tmpdir,
				strerror(errno));
			return -1;
		}
		snprintf(target, sizeof(target), "%s/test.db", tmpdir);
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (use_pg) {
		struct db *a = open_with(admin_url, 0);
		char sql[128];

		snprintf(sql, sizeof(sql),
			 "DROP DATABASE IF EXISTS %s WITH (FORCE)", dbname);
		exec_ok(a, sql);
		db_close(a);
	} else {
		static const char *const suffix[] = {"", "-wal", "-shm",
						     "-journal"};
		char p[1100];
		size_t i;

		for (i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
			snprintf(p, sizeof(p), "%s%s", target, suffix[i]);
			unlink(p);
		}
		rmdir(tmpdir);
	}
	return 0;
}

static int setup(void **state)
{
	*state = open_db(0);
	return 0;
}

static int teardown(void **state)
{
	db_close(*state);
	return 0;
}

/* ---- the contract --------------------------------------------------------- */

/* db_kind/db_name/db_handle; a failed open names the target, password
 * masked, and says why. */
static void test_open(void **state)
{
	struct db *d = *state, *x = NULL;
	struct db_open_opts o = {0};
	char err[512];
	int r;

	assert_int_equal(db_kind(d), use_pg ? DB_PG : DB_SQLITE);
	assert_non_null(db_handle(d));
	assert_true(strlen(db_name(d)) > 0);
	assert_int_equal(db_is_url(target), use_pg);

	if (use_pg) {
		o.target = "postgresql://semq:s3cret@127.0.0.1:1/semq"
			   "?password=s3cret&connect_timeout=5";
		err[0] = '\0';
		r = db_open(&o, &x, err, sizeof(err));
		assert_true(r < 0);
		assert_null(x);
		assert_null(strstr(err, "s3cret"));
		assert_non_null(
			strstr(err, "postgresql://semq:***@127.0.0.1:1"));
		assert_non_null(strstr(err, "password=***"));
		assert_non_null(strstr(err, "cannot connect"));

		o.target = target;
		o.busy_timeout_ms = -1;
		r = db_open(&o, &x, err, sizeof(err));
		assert_int_equal(r, SEMQ_ERR_INVALID);
		assert_null(x);
		assert_non_null(strstr(err, "busy timeout"));

		/* The session: our defaults, synchronous_commit off below 2. */
		if (!strstr(target, "application_name="))
			assert_true(q_text_is(d,
					      "SELECT current_setting("
					      "'application_name')",
					      "semqd"));
		assert_true(q_text_is(
			d, "SELECT current_setting('lock_timeout')", "5s"));
		assert_true(q_text_is(
			d, "SELECT current_setting('client_encoding')",
			"UTF8"));
		assert_true(q_text_is(
			d, "SELECT current_setting('synchronous_commit')",
			"on"));
		o.busy_timeout_ms = 250;
		o.synchronous = 1;
		CHECK_OK(d, db_open(&o, &x, err, sizeof(err)));
		assert_true(q_text_is(
			x, "SELECT current_setting('synchronous_commit')",
			"off"));
		assert_true(q_text_is(
			x, "SELECT current_setting('lock_timeout')", "250ms"));
		db_close(x);
	} else {
		o.target = "/nonexistent-dir-of-test_db/x.db";
		err[0] = '\0';
		r = db_open(&o, &x, err, sizeof(err));
		assert_true(r < 0);
		assert_null(x);
		assert_non_null(
			strstr(err, "/nonexistent-dir-of-test_db/x.db"));
	}
}

/* db_exec runs several statements; a bad one fails with a message. */
static void test_exec(void **state)
{
	struct db *d = *state;
	int r;

	exec_ok(d, "CREATE TABLE t_exec(v BIGINT);"
		   " INSERT INTO t_exec VALUES (1);"
		   " INSERT INTO t_exec VALUES (2)");
	assert_int_equal(q_int(d, "SELECT count(*) FROM t_exec"), 2);
	assert_int_equal(q_int(d, "SELECT max(v) FROM t_exec"), 2);

	r = db_exec(d, "INSERT INTO t_exec VALUES (3); INSERT INTO nosuch"
		       " VALUES (4)");
	assert_int_equal(r, SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_OTHER);
	assert_non_null(strstr(db_errmsg(d), "nosuch"));
	/* The call after a failure starts clean. */
	exec_ok(d, "SELECT 1");
	assert_int_equal(db_errclass(d), DB_E_NONE);
	assert_string_equal(db_errmsg(d), "");
}

/* Bad SQL fails at prepare (SQLite) or at the first step (PostgreSQL
 * prepares lazily), with a syntax error either way. */
static void test_bad_sql(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;
	int r;

	r = db_prepare(d, "SELEC 1", &s);
	if (r == SEMQ_OK)
		r = db_step(s);
	assert_int_equal(r, SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_OTHER);
	assert_non_null(strstr(db_errmsg(d), "syntax error"));
	db_finalize(s);
}

/* ?N may appear several times; each use gets the one value. */
static void test_param_reused(void **state)
{
	struct db *d = *state;
	struct db_stmt *ins = NULL, *sel = NULL;

	exec_ok(d, "CREATE TABLE t_reuse(id BIGINT PRIMARY KEY, i BIGINT,"
		   " s TEXT)");
	CHECK_OK(d, db_prepare(d,
			       "INSERT INTO t_reuse(id, i, s)"
			       " VALUES (?1, ?1, ?2)",
			       &ins));
	db_bind_int64(ins, 1, 42);
	db_bind_text(ins, 2, "x");
	step_done(ins, d);
	CHECK_OK(d, db_prepare(d,
			       "SELECT id, i, s FROM t_reuse"
			       " WHERE id = ?1 AND i = ?1",
			       &sel));
	db_bind_int64(sel, 1, 42);
	step_row(sel, d);
	assert_int_equal(db_col_int64(sel, 0), 42);
	assert_int_equal(db_col_int64(sel, 1), 42);
	assert_string_equal(db_col_text(sel, 2), "x");
	step_done(sel, d);
	db_finalize(ins);
	db_finalize(sel);
}

/* A ?N inside a string literal, a quoted identifier or a comment is text,
 * not a parameter. */
static void test_param_in_quotes(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	CHECK_OK(d, db_prepare(d,
			       "SELECT '?1 is ''?2''' AS \"col ?3\", ?1"
			       " /* ?4 */ -- ?5\n",
			       &s));
	db_bind_text(s, 1, "v");
	step_row(s, d);
	assert_string_equal(db_col_text(s, 0), "?1 is '?2'");
	assert_string_equal(db_col_text(s, 1), "v");
	step_done(s, d);
	db_finalize(s);
}

/* int64 round trip at both ends and around zero; integers read as text. */
static void test_int64_extremes(void **state)
{
	static const int64_t v[] = {INT64_MIN, -1, 0, 1, INT64_MAX};
	struct db *d = *state;
	struct db_stmt *ins = NULL, *sel = NULL;
	char buf[32];
	size_t i;

	exec_ok(d, "CREATE TABLE t_int(id BIGINT, v BIGINT)");
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_int VALUES (?1, ?2)", &ins));
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		db_bind_int64(ins, 1, (int64_t)i);
		db_bind_int64(ins, 2, v[i]);
		step_done(ins, d);
		db_reset(ins);
	}
	CHECK_OK(d, db_prepare(d,
			       "SELECT v, v FROM t_int WHERE v >= ?1"
			       " ORDER BY id",
			       &sel));
	db_bind_int64(sel, 1, INT64_MIN);
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		step_row(sel, d);
		assert_false(db_col_null(sel, 0));
		assert_true(db_col_int64(sel, 0) == v[i]);
		snprintf(buf, sizeof(buf), "%" PRId64, v[i]);
		assert_string_equal(db_col_text(sel, 1), buf);
	}
	step_done(sel, d);
	assert_int_equal(q_int(d, "SELECT count(*) FROM t_int"), 5);
	db_finalize(ins);
	db_finalize(sel);
}

/* UTF-8 text comes back byte for byte; '' is empty, not NULL. */
static void test_text_utf8(void **state)
{
	static const char utf8[] = "gr\xc3\xbc\xc3\x9f"
				   "e \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac "
				   "\xf0\x9f\x8e\x89";
	struct db *d = *state;
	struct db_stmt *ins = NULL, *sel = NULL;

	exec_ok(d, "CREATE TABLE t_text(id BIGINT, s TEXT)");
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_text VALUES (?1, ?2)", &ins));
	db_bind_int64(ins, 1, 1);
	db_bind_text(ins, 2, utf8);
	step_done(ins, d);
	db_reset(ins);
	db_bind_int64(ins, 1, 2);
	db_bind_text(ins, 2, "");
	step_done(ins, d);

	CHECK_OK(d, db_prepare(d,
			       kq("SELECT s, length(CAST(s AS BLOB)),"
				  " length(s) FROM t_text ORDER BY id",
				  "SELECT s, octet_length(s), length(s)"
				  " FROM t_text ORDER BY id"),
			       &sel));
	step_row(sel, d);
	assert_string_equal(db_col_text(sel, 0), utf8);
	assert_int_equal(db_col_int64(sel, 1), (int64_t)strlen(utf8));
	assert_int_equal(db_col_int64(sel, 2), 12); /* characters */
	step_row(sel, d);
	assert_false(db_col_null(sel, 0));
	assert_string_equal(db_col_text(sel, 0), "");
	step_done(sel, d);
	db_finalize(ins);
	db_finalize(sel);
}

/* Blobs keep their NUL bytes and every byte value; an empty blob is a
 * zero-length value, not NULL. */
static void test_blob(void **state)
{
	struct db *d = *state;
	struct db_stmt *ins = NULL, *sel = NULL;
	unsigned char b[300];
	const void *p;
	size_t i, n;

	for (i = 0; i < sizeof(b); i++)
		b[i] = (unsigned char)(i % 256);
	b[1] = 0;
	exec_ok(d, kq("CREATE TABLE t_blob(id BIGINT, b BLOB)",
		      "CREATE TABLE t_blob(id BIGINT, b BYTEA)"));
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_blob VALUES (?1, ?2)", &ins));
	db_bind_int64(ins, 1, 1);
	db_bind_blob(ins, 2, b, sizeof(b));
	step_done(ins, d);
	db_reset(ins);
	db_bind_int64(ins, 1, 2);
	db_bind_blob(ins, 2, NULL, 0);
	step_done(ins, d);
	db_reset(ins);
	db_bind_int64(ins, 1, 3);
	db_bind_blob(ins, 2, "\0\0\0", 3);
	step_done(ins, d);

	CHECK_OK(d, db_prepare(d,
			       kq("SELECT b, length(b) FROM t_blob ORDER BY id",
				  "SELECT b, octet_length(b) FROM t_blob"
				  " ORDER BY id"),
			       &sel));
	step_row(sel, d);
	p = db_col_blob(sel, 0, &n);
	assert_int_equal(n, sizeof(b));
	assert_memory_equal(p, b, sizeof(b));
	assert_int_equal(db_col_int64(sel, 1), (int64_t)sizeof(b));
	step_row(sel, d);
	assert_false(db_col_null(sel, 0));
	n = 99;
	db_col_blob(sel, 0, &n);
	assert_int_equal(n, 0);
	assert_int_equal(db_col_int64(sel, 1), 0);
	step_row(sel, d);
	p = db_col_blob(sel, 0, &n);
	assert_int_equal(n, 3);
	assert_memory_equal(p, "\0\0\0", 3);
	step_done(sel, d);
	db_finalize(ins);
	db_finalize(sel);
}

/* NULL from bind_null, a NULL text and an unbound parameter; NULL reads as
 * 0 / NULL / empty. */
static void test_nulls(void **state)
{
	struct db *d = *state;
	struct db_stmt *ins = NULL, *sel = NULL;
	size_t n = 7;
	int k;

	exec_ok(d, kq("CREATE TABLE t_null(id BIGINT, i BIGINT, s TEXT,"
		      " b BLOB)",
		      "CREATE TABLE t_null(id BIGINT, i BIGINT, s TEXT,"
		      " b BYTEA)"));
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_null VALUES (?1, ?2, ?3, ?4)",
			       &ins));
	db_bind_int64(ins, 1, 1);
	db_bind_null(ins, 2);
	db_bind_text(ins, 3, NULL);
	/* ?4 left unbound */
	step_done(ins, d);
	db_reset(ins);
	/* db_reset drops the bindings: everything but ?1 is NULL again. */
	db_bind_int64(ins, 1, 2);
	step_done(ins, d);

	CHECK_OK(d,
		 db_prepare(d, "SELECT i, s, b FROM t_null ORDER BY id", &sel));
	for (k = 0; k < 2; k++) {
		step_row(sel, d);
		assert_true(db_col_null(sel, 0));
		assert_true(db_col_null(sel, 1));
		assert_true(db_col_null(sel, 2));
		assert_int_equal(db_col_int64(sel, 0), 0);
		assert_null(db_col_text(sel, 1));
		assert_null(db_col_blob(sel, 2, &n));
		assert_int_equal(n, 0);
	}
	step_done(sel, d);
	assert_int_equal(q_int(d, "SELECT count(*) FROM t_null WHERE i IS NULL"
				  " AND s IS NULL AND b IS NULL"),
			 2);
	db_finalize(ins);
	db_finalize(sel);
}

/* ROW for each row then DONE; a write steps straight to DONE. */
static void test_step_rows(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	exec_ok(d, "CREATE TABLE t_rows(v BIGINT)");
	CHECK_OK(d, db_prepare(d,
			       "INSERT INTO t_rows VALUES (?1), (?1 + 1),"
			       " (?1 + 2)",
			       &s));
	db_bind_int64(s, 1, 10);
	step_done(s, d);
	db_finalize(s);
	CHECK_OK(d, db_prepare(d, "SELECT v FROM t_rows ORDER BY v", &s));
	step_row(s, d);
	assert_int_equal(db_col_int64(s, 0), 10);
	step_row(s, d);
	assert_int_equal(db_col_int64(s, 0), 11);
	step_row(s, d);
	assert_int_equal(db_col_int64(s, 0), 12);
	step_done(s, d);
	db_finalize(s);
	CHECK_OK(d, db_prepare(d, "SELECT v FROM t_rows WHERE v < 0", &s));
	step_done(s, d);
	db_finalize(s);
}

/* db_reset in the middle of the rows, then the statement runs again with
 * new bindings; db_stmt_busy is true from the first step to the reset. */
static void test_reset_and_busy(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;
	int64_t want;

	exec_ok(d, "CREATE TABLE t_reset(v BIGINT); INSERT INTO t_reset"
		   " VALUES (1), (2), (3), (4), (5)");
	CHECK_OK(d, db_prepare(d,
			       "SELECT v FROM t_reset WHERE v >= ?1"
			       " ORDER BY v",
			       &s));
	assert_false(db_stmt_busy(s));
	db_bind_int64(s, 1, 1);
	assert_false(db_stmt_busy(s));
	step_row(s, d);
	assert_true(db_stmt_busy(s));
	assert_int_equal(db_col_int64(s, 0), 1);
	step_row(s, d);
	assert_int_equal(db_col_int64(s, 0), 2);
	db_reset(s);
	assert_false(db_stmt_busy(s));

	db_bind_int64(s, 1, 3);
	for (want = 3; want <= 5; want++) {
		step_row(s, d);
		assert_int_equal(db_col_int64(s, 0), want);
	}
	step_done(s, d);
	assert_true(db_stmt_busy(s));
	db_reset(s);
	assert_false(db_stmt_busy(s));
	db_finalize(s);
}

/* Another statement runs while one is in the middle of its rows. */
static void test_interleaved(void **state)
{
	struct db *d = *state;
	struct db_stmt *a = NULL, *b = NULL;
	int rows = 0;

	exec_ok(d, "CREATE TABLE t_inter(id BIGINT PRIMARY KEY, v BIGINT);"
		   " INSERT INTO t_inter VALUES (1, 0), (2, 0), (3, 0)");
	CHECK_OK(d, db_prepare(d, "SELECT id FROM t_inter ORDER BY id", &a));
	CHECK_OK(d,
		 db_prepare(d, "UPDATE t_inter SET v = ?2 WHERE id = ?1", &b));
	while (db_step(a) == DB_ROW) {
		int64_t id = db_col_int64(a, 0);

		db_bind_int64(b, 1, id);
		db_bind_int64(b, 2, id * 10);
		step_done(b, d);
		db_reset(b);
		rows++;
	}
	assert_int_equal(rows, 3);
	assert_int_equal(db_errclass(d), DB_E_NONE);
	assert_int_equal(q_int(d, "SELECT CAST(sum(v) AS BIGINT) FROM t_inter"),
			 60);
	db_finalize(a);
	db_finalize(b);
}

/* db_changes: the rows of the last INSERT/UPDATE/DELETE. */
static void test_changes(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	exec_ok(d, "CREATE TABLE t_chg(v BIGINT)");
	CHECK_OK(d,
		 db_prepare(d, "INSERT INTO t_chg VALUES (1), (2), (3)", &s));
	step_done(s, d);
	assert_int_equal(db_changes(d), 3);
	db_finalize(s);

	CHECK_OK(d,
		 db_prepare(d, "UPDATE t_chg SET v = v + 10 WHERE v > ?1", &s));
	db_bind_int64(s, 1, 1);
	step_done(s, d);
	assert_int_equal(db_changes(d), 2);
	db_reset(s);
	db_bind_int64(s, 1, 1000);
	step_done(s, d);
	assert_int_equal(db_changes(d), 0);
	db_finalize(s);

	CHECK_OK(d, db_prepare(d, "DELETE FROM t_chg WHERE v = ?1", &s));
	db_bind_int64(s, 1, 1);
	step_done(s, d);
	assert_int_equal(db_changes(d), 1);
	db_finalize(s);
}

/* db_in_tx follows BEGIN / COMMIT / ROLLBACK, and stays true after a
 * failed statement inside the transaction. */
static void test_in_tx(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	exec_ok(d, "CREATE TABLE t_tx(k BIGINT PRIMARY KEY)");
	assert_false(db_in_tx(d));
	exec_ok(d, "BEGIN");
	assert_true(db_in_tx(d));
	exec_ok(d, "INSERT INTO t_tx VALUES (1)");
	exec_ok(d, "COMMIT");
	assert_false(db_in_tx(d));

	exec_ok(d, "BEGIN");
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_tx VALUES (?1)", &s));
	db_bind_int64(s, 1, 1);
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_UNIQUE);
	assert_true(db_in_tx(d));
	exec_ok(d, "ROLLBACK");
	assert_false(db_in_tx(d));
	db_finalize(s);

	/* Transactions through prepared statements too. */
	CHECK_OK(d, db_prepare(d, "BEGIN", &s));
	step_done(s, d);
	assert_true(db_in_tx(d));
	db_finalize(s);
	exec_ok(d, "COMMIT");
	assert_false(db_in_tx(d));
}

/* A unique index refusing a row is DB_E_UNIQUE; the statement runs again
 * after a reset. */
static void test_err_unique(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	exec_ok(d, "CREATE TABLE t_u(k BIGINT, v TEXT);"
		   " CREATE UNIQUE INDEX idx_t_u ON t_u(k)");
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_u VALUES (?1, 'x')", &s));
	db_bind_int64(s, 1, 1);
	step_done(s, d);
	db_reset(s);
	db_bind_int64(s, 1, 1);
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_UNIQUE);
	assert_true(strstr(db_errmsg(d), "idx_t_u") ||
		    strstr(db_errmsg(d), "t_u.k"));
	db_reset(s);
	db_bind_int64(s, 1, 2);
	step_done(s, d);
	assert_int_equal(db_errclass(d), DB_E_NONE);
	assert_int_equal(q_int(d, "SELECT count(*) FROM t_u"), 2);
	db_finalize(s);
}

/* A CHECK and a NOT NULL are DB_E_CONSTRAINT; the message names the
 * CHECK's constraint. */
static void test_err_check(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	exec_ok(d, "CREATE TABLE t_chk(v BIGINT NOT NULL"
		   " CONSTRAINT \"t_chk.v must be positive\" CHECK (v > 0))");
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_chk VALUES (?1)", &s));
	db_bind_int64(s, 1, -5);
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_CONSTRAINT);
	assert_non_null(strstr(db_errmsg(d), "t_chk.v must be positive"));
	db_reset(s);
	db_bind_null(s, 1);
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_CONSTRAINT);
	db_reset(s);
	db_bind_int64(s, 1, 5);
	step_done(s, d);
	db_finalize(s);
}

/* A trigger's RAISE (SQLite RAISE(ABORT), PostgreSQL RAISE EXCEPTION) is
 * DB_E_CONSTRAINT with the trigger's message. */
static void test_err_raise(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	exec_ok(d, "CREATE TABLE t_r(v BIGINT)");
	exec_ok(d, kq("CREATE TRIGGER t_r_refuse BEFORE INSERT ON t_r"
		      " WHEN NEW.v < 0 BEGIN"
		      " SELECT RAISE(ABORT, 't_r.v: refused by the trigger');"
		      " END",
		      "CREATE FUNCTION t_r_refuse() RETURNS trigger"
		      " LANGUAGE plpgsql AS $$ BEGIN"
		      " RAISE EXCEPTION 't_r.v: refused by the trigger';"
		      " END $$;"
		      " CREATE TRIGGER t_r_refuse BEFORE INSERT ON t_r"
		      " FOR EACH ROW WHEN (NEW.v < 0)"
		      " EXECUTE FUNCTION t_r_refuse()"));
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_r VALUES (?1)", &s));
	db_bind_int64(s, 1, -1);
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_CONSTRAINT);
	assert_non_null(strstr(db_errmsg(d), "t_r.v: refused by the trigger"));
	db_reset(s);
	db_bind_int64(s, 1, 1);
	step_done(s, d);
	db_finalize(s);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A lock held by another connection past the timeout is DB_E_BUSY, and not
 * before the timeout has passed by the clock (SQLite: the busy handler
 * counts time, not tries). */
static void test_err_busy(void **state)
{
	struct db *d = *state, *b = open_db(200);
	struct db_stmt *s = NULL;
	int64_t t0;

	exec_ok(d, "CREATE TABLE t_busy(k BIGINT PRIMARY KEY, v BIGINT);"
		   " INSERT INTO t_busy VALUES (1, 0)");
	exec_ok(d, kq("BEGIN IMMEDIATE", "BEGIN"));
	exec_ok(d, "UPDATE t_busy SET v = 1 WHERE k = 1");
	CHECK_OK(b, db_prepare(b,
			       kq("BEGIN IMMEDIATE",
				  "UPDATE t_busy SET v = 2 WHERE k = 1"),
			       &s));
	t0 = mono_ms();
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_true(mono_ms() - t0 >= 200);
	assert_int_equal(db_errclass(b), DB_E_BUSY);
	assert_true(strlen(db_errmsg(b)) > 0);
	db_finalize(s);
	exec_ok(d, "ROLLBACK");
	db_close(b);
}

/*
 * A deadlock. PostgreSQL: this connection holds row 1, a second (in a
 * thread) holds row 2; this one asks for row 2 and waits first, the other
 * asks for row 1 half a second later; the deadlock check of the first
 * waiter (after deadlock_timeout, 1 s) aborts it: DB_E_CONFLICT, and the
 * other goes on. SQLite has no deadlock: the second writer gets DB_E_BUSY.
 */
struct peer_arg {
	pthread_barrier_t *locked;
	int r; /* the thread's last result */
	char msg[256];
};

static void *deadlock_peer(void *p)
{
	struct peer_arg *a = p;
	struct db *b = open_db(0);
	const char *step[] = {"SELECT pg_sleep(0.5)",
			      "UPDATE t_dl SET v = v + 1 WHERE k = 1",
			      "COMMIT"};
	size_t i;

	a->r = db_exec(b, "BEGIN");
	if (a->r == SEMQ_OK)
		a->r = db_exec(b, "UPDATE t_dl SET v = v + 1 WHERE k = 2");
	pthread_barrier_wait(a->locked);
	for (i = 0; i < 3 && a->r == SEMQ_OK; i++)
		a->r = db_exec(b, step[i]);
	snprintf(a->msg, sizeof(a->msg), "%s", db_errmsg(b));
	db_close(b);
	return NULL;
}

static void test_err_conflict(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	exec_ok(d, "CREATE TABLE t_dl(k BIGINT PRIMARY KEY, v BIGINT);"
		   " INSERT INTO t_dl VALUES (1, 0), (2, 0)");
	if (use_pg) {
		pthread_barrier_t locked;
		struct peer_arg a = {.locked = &locked};
		pthread_t t;

		pthread_barrier_init(&locked, NULL, 2);
		exec_ok(d, "BEGIN");
		exec_ok(d, "UPDATE t_dl SET v = v + 1 WHERE k = 1");
		assert_int_equal(pthread_create(&t, NULL, deadlock_peer, &a),
				 0);
		pthread_barrier_wait(&locked);
		CHECK_OK(d,
			 db_prepare(d, "UPDATE t_dl SET v = v + 1 WHERE k = 2",
				    &s));
		assert_int_equal(db_step(s), SEMQ_ERR_DB);
		assert_int_equal(db_errclass(d), DB_E_CONFLICT);
		assert_non_null(strstr(db_errmsg(d), "deadlock"));
		assert_true(db_in_tx(d));
		exec_ok(d, "ROLLBACK");
		pthread_join(t, NULL);
		pthread_barrier_destroy(&locked);
		if (a.r != SEMQ_OK)
			fail_msg("the other side of the deadlock failed: %s",
				 a.msg);
		/* The survivor's update committed, ours did not. */
		assert_int_equal(q_int(d, "SELECT v FROM t_dl WHERE k = 1"), 1);
		assert_int_equal(q_int(d, "SELECT v FROM t_dl WHERE k = 2"), 1);
	} else {
		struct db *b = open_db(200);

		exec_ok(d, "BEGIN");
		exec_ok(d, "UPDATE t_dl SET v = v + 1 WHERE k = 1");
		exec_ok(b, "BEGIN");
		assert_int_equal(q_int(b, "SELECT count(*) FROM t_dl"), 2);
		CHECK_OK(b,
			 db_prepare(b, "UPDATE t_dl SET v = v + 1 WHERE k = 2",
				    &s));
		assert_int_equal(db_step(s), SEMQ_ERR_DB);
		assert_int_equal(db_errclass(b), DB_E_BUSY);
		db_finalize(s);
		s = NULL;
		exec_ok(b, "ROLLBACK");
		exec_ok(d, "COMMIT");
		db_close(b);
	}
	db_finalize(s);
}

/*
 * The server ends the session (PostgreSQL: pg_terminate_backend from a
 * second connection): the next call reports DB_E_LOST; after db_reconnect a
 * statement prepared before works again. SQLite has no server: reconnect is
 * a no-op and statements keep working.
 */
static void test_reconnect(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL, *k = NULL;
	int64_t pid = 0;

	exec_ok(d, "CREATE TABLE t_rc(v BIGINT); INSERT INTO t_rc VALUES"
		   " (1), (2), (3)");
	CHECK_OK(d,
		 db_prepare(d, "SELECT count(*) FROM t_rc WHERE v >= ?1", &s));
	db_bind_int64(s, 1, 2);
	step_row(s, d);
	assert_int_equal(db_col_int64(s, 0), 2);
	db_reset(s);

	if (use_pg) {
		struct db *b = open_db(0);

		pid = q_int(d, "SELECT pg_backend_pid()");
		CHECK_OK(b,
			 db_prepare(b, "SELECT pg_terminate_backend(?1, 10000)",
				    &k));
		db_bind_int64(k, 1, pid);
		step_row(k, b);
		assert_int_equal(db_col_int64(k, 0), 1);
		db_finalize(k);
		db_close(b);

		db_bind_int64(s, 1, 2);
		assert_int_equal(db_step(s), SEMQ_ERR_DB);
		assert_int_equal(db_errclass(d), DB_E_LOST);
		assert_true(strlen(db_errmsg(d)) > 0);
		db_reset(s);
		/* Still lost until we reconnect. */
		assert_int_equal(db_exec(d, "SELECT 1"), SEMQ_ERR_DB);
		assert_int_equal(db_errclass(d), DB_E_LOST);
	}
	CHECK_OK(d, db_reconnect(d));
	assert_false(db_in_tx(d));
	db_bind_int64(s, 1, 3);
	step_row(s, d);
	assert_int_equal(db_col_int64(s, 0), 1);
	step_done(s, d);
	db_finalize(s);
	if (use_pg) {
		/* A new session, set up again. */
		assert_true(q_int(d, "SELECT pg_backend_pid()") != pid);
		assert_int_equal(q_int(d, "SELECT count(*) FROM pg_settings"
					  " WHERE name = 'lock_timeout'"
					  " AND setting = '5000'"),
				 1);
	}
}

/* ---- PostgreSQL only ------------------------------------------------------ */

/* E'…' strings (backslash escapes) and $tag$ strings are literals too. */
static void test_pg_quotes(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	CHECK_OK(d,
		 db_prepare(d, "SELECT E'it\\'s ?2', $q$ ?3 $q$, ?1, '?' || ?1",
			    &s));
	db_bind_text(s, 1, "v");
	step_row(s, d);
	assert_string_equal(db_col_text(s, 0), "it's ?2");
	assert_string_equal(db_col_text(s, 1), " ?3 ");
	assert_string_equal(db_col_text(s, 2), "v");
	assert_string_equal(db_col_text(s, 3), "?v");
	step_done(s, d);
	db_finalize(s);
}

/* A column the driver cannot carry (numeric) fails the step, naming it. */
static void test_pg_unsupported_column(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	CHECK_OK(d, db_prepare(d, "SELECT 1 AS n, 1.5::numeric AS amount", &s));
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_non_null(strstr(db_errmsg(d), "amount"));
	assert_non_null(strstr(db_errmsg(d), "numeric"));
	db_finalize(s);
	/* bool, int2, int4 and oid read as integers. */
	CHECK_OK(d, db_prepare(d,
			       "SELECT true, false, 7::smallint, -9::int,"
			       " 4000000000::oid",
			       &s));
	step_row(s, d);
	assert_int_equal(db_col_int64(s, 0), 1);
	assert_int_equal(db_col_int64(s, 1), 0);
	assert_int_equal(db_col_int64(s, 2), 7);
	assert_int_equal(db_col_int64(s, 3), -9);
	assert_true(db_col_int64(s, 4) == INT64_C(4000000000));
	db_finalize(s);
}

/* Binding a parameter the statement does not have fails the step. */
static void test_pg_bind_out_of_range(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;

	CHECK_OK(d, db_prepare(d, "SELECT ?1::bigint", &s));
	db_bind_int64(s, 1, 1);
	db_bind_int64(s, 2, 5);
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_non_null(strstr(db_errmsg(d), "?2"));
	db_reset(s);
	db_bind_int64(s, 1, 9);
	step_row(s, d);
	assert_int_equal(db_col_int64(s, 0), 9);
	db_finalize(s);
}

/* A statement prepared many times: each gets its own server-side name, and
 * finalizing frees it on the server. */
static void test_pg_many_statements(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;
	int64_t before;
	int i;

	before = q_int(d, "SELECT count(*) FROM pg_prepared_statements");
	for (i = 0; i < 50; i++) {
		CHECK_OK(d, db_prepare(d, "SELECT ?1::bigint * 2", &s));
		db_bind_int64(s, 1, i);
		step_row(s, d);
		assert_int_equal(db_col_int64(s, 0), 2 * i);
		db_finalize(s);
	}
	assert_int_equal(
		q_int(d, "SELECT count(*) FROM pg_prepared_statements"),
		before);
}

/* Reads a whole file; NULL when it cannot. Caller frees. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		if (buf)
			buf[n] = '\0';
	}
	fclose(f);
	return buf;
}

/* The other session of test_pg_schema_fill: inserts into the stream and
 * holds its transaction open a moment after the barrier. */
static void *fill_peer(void *p)
{
	struct peer_arg *a = p;
	struct db *b = open_db(0);

	a->r = db_exec(b, "BEGIN");
	if (a->r == SEMQ_OK)
		a->r = db_exec(b, "INSERT INTO tb_0031(dest, type, msg_key)"
				  " VALUES ('S1', 1, 'k')");
	pthread_barrier_wait(a->locked);
	if (a->r == SEMQ_OK)
		a->r = db_exec(b, "SELECT pg_sleep(0.3)");
	if (a->r == SEMQ_OK)
		a->r = db_exec(b, "COMMIT");
	snprintf(a->msg, sizeof(a->msg), "%s", db_errmsg(b));
	db_close(b);
	return NULL;
}

/*
 * db/postgresql/0001_init.sql through this driver: a bare INSERT INTO
 * tb_0031 gets origin, seq, prev_seq, created_at and status from the
 * trigger; the trigger refuses with SQLite's messages; a second session
 * inserting into the same stream waits for the first and takes the next
 * seq, with prev_seq pointing at the first's row.
 */
static void test_pg_schema_fill(void **state)
{
	struct db *d = *state;
	struct db_stmt *ins = NULL, *sel = NULL;
	pthread_barrier_t locked;
	struct peer_arg a = {.locked = &locked};
	char *sql = slurp(SEMQ_SOURCE_DIR "/db/postgresql/0001_init.sql");
	int64_t now = (int64_t)time(NULL) * 1000;
	pthread_t t;

	assert_non_null(sql);
	exec_ok(d, sql);
	free(sql);
	CHECK_OK(d, db_prepare(d,
			       "INSERT INTO tb_0031(dest, type, msg_key,"
			       " payload) VALUES (?1, 2800, ?2, ?3)",
			       &ins));
	db_bind_text(ins, 1, "S1");
	db_bind_text(ins, 2, "k");
	db_bind_blob(ins, 3, "a\0b", 3);
	assert_int_equal(db_step(ins), SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_CONSTRAINT);
	assert_string_equal(db_errmsg(d),
			    "tb_0031: this database has no node id; open it "
			    "once with semqd or semqctl");
	db_reset(ins);

	exec_ok(d, "INSERT INTO semq_meta VALUES ('node_id', 'R1')");
	db_bind_text(ins, 1, "S 1");
	db_bind_blob(ins, 3, "", 0);
	assert_int_equal(db_step(ins), SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_CONSTRAINT);
	assert_non_null(strstr(db_errmsg(d), "tb_0031.dest must be a node id"));
	db_reset(ins);
	assert_int_equal(db_exec(d, "INSERT INTO tb_0031(dest, origin)"
				    " VALUES ('S1', 'X')"),
			 SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_CONSTRAINT);
	assert_string_equal(db_errmsg(d), "tb_0031.origin: leave it empty, "
					  "it is filled with this node's id");

	db_bind_text(ins, 1, "S1");
	db_bind_text(ins, 2, "k");
	db_bind_blob(ins, 3, "a\0b", 3);
	step_done(ins, d);
	assert_int_equal(db_changes(d), 1);
	db_reset(ins);
	db_bind_text(ins, 1, "S1");
	db_bind_text(ins, 2, "k");
	db_bind_blob(ins, 3, "", 0);
	step_done(ins, d);

	/* A second session takes seq 3 and holds it; ours waits, then 4. */
	pthread_barrier_init(&locked, NULL, 2);
	assert_int_equal(pthread_create(&t, NULL, fill_peer, &a), 0);
	pthread_barrier_wait(&locked);
	db_reset(ins);
	db_bind_text(ins, 1, "S1");
	db_bind_text(ins, 2, "k");
	db_bind_blob(ins, 3, "", 0);
	step_done(ins, d);
	pthread_join(t, NULL);
	pthread_barrier_destroy(&locked);
	if (a.r != SEMQ_OK)
		fail_msg("the other session failed: %s", a.msg);

	CHECK_OK(d, db_prepare(d,
			       "SELECT origin, seq, prev_seq, created_at,"
			       " status, payload, type FROM tb_0031"
			       " ORDER BY seq",
			       &sel));
	{
		static const int64_t prev[] = {0, 1, 2, 3};
		const void *p;
		size_t n;
		int i;

		for (i = 0; i < 4; i++) {
			step_row(sel, d);
			assert_string_equal(db_col_text(sel, 0), "R1");
			assert_int_equal(db_col_int64(sel, 1), i + 1);
			assert_int_equal(db_col_int64(sel, 2), prev[i]);
			assert_true(db_col_int64(sel, 3) > now - 600000 &&
				    db_col_int64(sel, 3) < now + 600000);
			assert_int_equal(db_col_int64(sel, 4), 0);
			p = db_col_blob(sel, 5, &n);
			if (i == 0) {
				assert_int_equal(n, 3);
				assert_memory_equal(p, "a\0b", 3);
			}
		}
		step_done(sel, d);
	}
	assert_int_equal(q_int(d, "SELECT last_seq FROM semq_stream_out"
				  " WHERE origin = 'R1' AND dest = 'S1'"),
			 4);
	db_finalize(ins);
	db_finalize(sel);
}

/*
 * SQLite: the WAL is checkpointed by the driver's own thread (db_sqlite.c),
 * not in the committing connection. 700 pages are more than the driver's
 * threshold (500) and fewer than SQLite's automatic checkpoint (1000), so
 * only the checkpointer can have copied them into the database file.
 */
static void test_sqlite_wal_checkpointer(void **state)
{
	struct db *d = *state;
	struct db_stmt *ins = NULL;
	static char blob[4000];
	struct stat sb;
	off_t want;
	int i;

	exec_ok(d, "CREATE TABLE ck (b BLOB)");
	assert_int_equal(stat(target, &sb), 0);
	want = sb.st_size + 700 * 4000;
	memset(blob, 'x', sizeof blob);
	exec_ok(d, "BEGIN");
	CHECK_OK(d, db_prepare(d, "INSERT INTO ck (b) VALUES (?1)", &ins));
	for (i = 0; i < 700; i++) {
		db_bind_blob(ins, 1, blob, sizeof blob);
		assert_int_equal(db_step(ins), DB_DONE);
		db_reset(ins);
	}
	db_finalize(ins);
	exec_ok(d, "COMMIT");
	for (i = 0; i < 1000; i++) { /* up to 10 s */
		assert_int_equal(stat(target, &sb), 0);
		if (sb.st_size >= want)
			break;
		usleep(10000);
	}
	if (sb.st_size < want)
		fail_msg("after 10 s the database file holds %lld bytes: no "
			 "checkpoint copied the 700 committed pages",
			 (long long)sb.st_size);
	assert_int_equal(q_int(d, "SELECT count(*) FROM ck"), 700);
}

/* ---- bulk statements (db_prepare_bulk) ------------------------------------ */

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* A "VmRSS:"-style line of /proc/self/status, in KiB (-1: not found). */
static long proc_kib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t n = strlen(key);
	long v = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, n) == 0) {
			v = strtol(line + n, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* Resets VmHWM to the current RSS (Linux: clear_refs 5). 0 when it did. */
static int reset_peak(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	int r;

	if (!f)
		return -1;
	r = fputs("5", f) < 0 ? -1 : 0;
	if (fclose(f) != 0)
		r = -1;
	return r;
}

/* The rows of a bulk statement come in order, with their columns and
 * names, while other statements of every kind run between two steps: a
 * plain query, db_exec, db_in_tx, a second bulk statement read to its end
 * and a third stopped early, a finalize. Values of the current row handed
 * out before stay valid; db_reset in the middle and a run again work. */
static void bulk_walk(struct db *d, int in_tx)
{
	struct db_stmt *s = NULL, *n = NULL, *x = NULL;
	int64_t want = 1;
	size_t len = 0;
	int rc;

	CHECK_OK(d, db_prepare_bulk(d,
				    "SELECT id, v AS payload, id * 2 AS twice"
				    " FROM t_bulk WHERE id >= ?1 ORDER BY id",
				    &s));
	CHECK_OK(d, db_prepare(d, "SELECT count(*) FROM t_bulk", &x));
	if (in_tx)
		exec_ok(d, "BEGIN");
	db_bind_int64(s, 1, 1);
	while ((rc = db_step(s)) == DB_ROW) {
		const void *p = db_col_blob(s, 1, &len);

		assert_int_equal(db_col_int64(s, 0), want);
		assert_int_equal(len, 1000);
		assert_int_equal(((const unsigned char *)p)[0], want % 251);
		switch (want) {
		case 100: /* a plain query */
			assert_int_equal(
				q_int(d, "SELECT count(*) FROM t_bulk"), 3000);
			break;
		case 200: /* db_exec, and the transaction as it is */
			exec_ok(d, "INSERT INTO t_bulk_log VALUES (200)");
			assert_int_equal(db_in_tx(d), in_tx);
			break;
		case 300: /* a second bulk statement, to its end */
			CHECK_OK(d,
				 db_prepare_bulk(
					 d, "SELECT id FROM t_bulk ORDER BY id",
					 &n));
			while (db_step(n) == DB_ROW)
				;
			assert_int_equal(db_errclass(d), DB_E_NONE);
			db_finalize(n);
			break;
		case 400: /* one stopped early, reset and run again */
			CHECK_OK(d,
				 db_prepare_bulk(d,
						 "SELECT id FROM t_bulk WHERE"
						 " id > ?1 ORDER BY id",
						 &n));
			db_bind_int64(n, 1, 2990);
			step_row(n, d);
			assert_int_equal(db_col_int64(n, 0), 2991);
			db_reset(n);
			db_bind_int64(n, 1, 2998);
			step_row(n, d);
			step_row(n, d);
			assert_int_equal(db_col_int64(n, 0), 3000);
			step_done(n, d);
			db_finalize(n);
			break;
		case 500: /* a finalize (PostgreSQL: a DEALLOCATE) */
			step_row(x, d);
			db_finalize(x);
			x = NULL;
			break;
		default: break;
		}
		/* The current row outlives all of that. */
		assert_int_equal(db_col_int64(s, 0), want);
		assert_ptr_equal(db_col_blob(s, 1, &len), p);
		assert_string_equal(db_col_name(s, 1), "payload");
		assert_int_equal(db_col_int64(s, 2), want * 2);
		want++;
		if (want == 2001)
			break;
	}
	assert_int_equal(rc, DB_ROW);
	assert_int_equal(want, 2001);
	/* Stopped early: reset, and the same statement again from 2990. */
	db_reset(s);
	db_bind_int64(s, 1, 2990);
	for (want = 2990; want <= 3000; want++) {
		step_row(s, d);
		assert_int_equal(db_col_int64(s, 0), want);
	}
	step_done(s, d);
	db_finalize(s);
	db_finalize(x);
	if (in_tx)
		exec_ok(d, "COMMIT");
	assert_false(db_in_tx(d));
	assert_int_equal(q_int(d, "SELECT count(*) FROM t_bulk_log"),
			 in_tx ? 2 : 1);
}

static void test_bulk_reentry(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;
	unsigned char v[1000];
	int i;

	exec_ok(d, kq("CREATE TABLE t_bulk(id INTEGER PRIMARY KEY, v BLOB);"
		      " CREATE TABLE t_bulk_log(at BIGINT)",
		      "CREATE TABLE t_bulk(id BIGINT PRIMARY KEY, v BYTEA);"
		      " CREATE TABLE t_bulk_log(at BIGINT)"));
	exec_ok(d, "BEGIN");
	CHECK_OK(d, db_prepare(d, "INSERT INTO t_bulk VALUES (?1, ?2)", &s));
	for (i = 1; i <= 3000; i++) {
		memset(v, i % 251, sizeof v);
		db_bind_int64(s, 1, i);
		db_bind_blob(s, 2, v, sizeof v);
		step_done(s, d);
		db_reset(s);
	}
	db_finalize(s);
	exec_ok(d, "COMMIT");
	bulk_walk(d, 0);
	bulk_walk(d, 1);
}

/*
 * A large result is never held whole: 200,000 rows of 1 KiB (195 MiB)
 * stepped through a bulk statement. PostgreSQL: when the first row is
 * handed out the server has produced only what the socket holds (a
 * sequence counts the rows it made; a plain statement, for contrast, has
 * made all of them); on both, the process's peak RSS while stepping stays
 * far below the result's size (not under AddressSanitizer, whose
 * quarantine keeps freed memory resident).
 */
#define BULK_ROWS 200000
#define BULK_ROW_BYTES 1024

static int64_t other_int(const char *sql)
{
	struct db *o = open_db(0);
	int64_t v = q_int(o, sql);

	db_close(o);
	return v;
}

static void test_bulk_peak_memory(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;
	const char *q = kq("WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL"
			   " SELECT n + 1 FROM g WHERE n < ?1)"
			   " SELECT n, zeroblob(1024) FROM g",
			   "SELECT nextval('t_bulk_seq'),"
			   " decode(repeat('ab', 1024), 'hex')"
			   " FROM generate_series(1, ?1)");
	long rss0, hwm, made = -1;
	int64_t n = 0, sum = 0;
	size_t len = 0;
	int peak_ok, rc;

	if (use_pg) {
		/* Contrast: a plain statement fetches its whole result at the
		 * first step (20,000 rows: 20 MiB). */
		exec_ok(d, "CREATE SEQUENCE t_bulk_seq");
		CHECK_OK(d, db_prepare(d, q, &s));
		db_bind_int64(s, 1, 20000);
		step_row(s, d);
		assert_int_equal(other_int("SELECT last_value FROM t_bulk_seq"),
				 20000);
		db_finalize(s);
		exec_ok(d, "ALTER SEQUENCE t_bulk_seq RESTART");
	}
	peak_ok = reset_peak() == 0;
	rss0 = proc_kib("VmRSS:");
	CHECK_OK(d, db_prepare_bulk(d, q, &s));
	db_bind_int64(s, 1, BULK_ROWS);
	while ((rc = db_step(s)) == DB_ROW) {
		if (n == 0 && use_pg)
			made = (long)other_int(
				"SELECT last_value FROM t_bulk_seq");
		db_col_blob(s, 1, &len);
		assert_int_equal(len, BULK_ROW_BYTES);
		sum += db_col_int64(s, 0);
		n++;
	}
	assert_int_equal(rc, DB_DONE);
	hwm = proc_kib("VmHWM:");
	db_finalize(s);
	assert_int_equal(n, BULK_ROWS);
	assert_int_equal(sum, (int64_t)BULK_ROWS * (BULK_ROWS + 1) / 2);
	print_message("    bulk read: %d rows of %d B (%ld MiB): RSS before "
		      "%ld KiB, peak while stepping %ld KiB (%+ld KiB)%s",
		      BULK_ROWS, BULK_ROW_BYTES,
		      (long)((int64_t)BULK_ROWS * BULK_ROW_BYTES >> 20), rss0,
		      hwm, hwm - rss0,
		      peak_ok ? "" : " (peak not resettable: not checked)");
	if (use_pg)
		print_message("; the server had made %ld rows when the first "
			      "was read",
			      made);
	print_message("\n");
	if (use_pg) {
		assert_true(made >= 1);
		assert_true(made < BULK_ROWS / 4);
	}
	if (peak_ok && !UNDER_ASAN && rss0 > 0 && hwm > 0)
		/* The rows are 195 MiB; one at a time is a few KiB. */
		assert_true(hwm - rss0 < 32 * 1024);
}

/* PostgreSQL: an error that ends a bulk statement's rows comes at the row
 * it ended them, whether the rows were streaming or read ahead; a reset or
 * finalize in the middle of a large result leaves the connection free; a
 * reconnect while one streams ends it with DB_E_LOST. */
static void test_pg_bulk_error_and_stop(void **state)
{
	struct db *d = *state;
	struct db_stmt *s = NULL;
	int ahead, i, rc;

	for (ahead = 0; ahead <= 1; ahead++) {
		CHECK_OK(d, db_prepare_bulk(d,
					    "SELECT 1000 / (g - 500)"
					    " FROM generate_series(1, 1000) g",
					    &s));
		for (i = 1; (rc = db_step(s)) == DB_ROW; i++) {
			assert_int_equal(db_col_int64(s, 0), 1000 / (i - 500));
			if (ahead && i == 10)
				assert_int_equal(q_int(d, "SELECT 7"), 7);
		}
		assert_int_equal(i, 500);
		assert_int_equal(rc, SEMQ_ERR_DB);
		assert_non_null(strstr(db_errmsg(d), "division by zero"));
		assert_int_equal(db_step(s), DB_DONE);
		db_finalize(s);
		assert_int_equal(q_int(d, "SELECT 8"), 8);
		assert_false(db_in_tx(d));
	}

	/* Stopped in the middle of 100,000 rows, streaming or read ahead. */
	for (ahead = 0; ahead <= 1; ahead++) {
		CHECK_OK(d, db_prepare_bulk(d,
					    "SELECT g FROM"
					    " generate_series(1, 100000) g",
					    &s));
		step_row(s, d);
		step_row(s, d);
		if (ahead)
			assert_false(db_in_tx(d));
		db_reset(s);
		assert_int_equal(q_int(d, "SELECT 9"), 9);
		step_row(s, d);
		assert_int_equal(db_col_int64(s, 0), 1);
		db_finalize(s); /* while it streams */
		assert_int_equal(q_int(d, "SELECT 10"), 10);
	}

	/* A reconnect takes the rows not read yet with the old session. */
	CHECK_OK(d, db_prepare_bulk(d, "SELECT g FROM generate_series(1, 5) g",
				    &s));
	step_row(s, d);
	CHECK_OK(d, db_reconnect(d));
	assert_int_equal(db_step(s), SEMQ_ERR_DB);
	assert_int_equal(db_errclass(d), DB_E_LOST);
	db_reset(s);
	for (i = 1; i <= 5; i++) {
		step_row(s, d);
		assert_int_equal(db_col_int64(s, 0), i);
	}
	step_done(s, d);
	db_finalize(s);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest common[] = {
		cmocka_unit_test_setup_teardown(test_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_sql, setup, teardown),
		cmocka_unit_test_setup_teardown(test_param_reused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_param_in_quotes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_int64_extremes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_text_utf8, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_blob, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nulls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_step_rows, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reset_and_busy, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_interleaved, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_changes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_in_tx, setup, teardown),
		cmocka_unit_test_setup_teardown(test_err_unique, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_err_check, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_err_raise, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_err_busy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_err_conflict, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reconnect, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bulk_reentry, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bulk_peak_memory, setup,
						teardown),
	};
	const struct CMUnitTest pg_only[] = {
		cmocka_unit_test_setup_teardown(test_pg_quotes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pg_unsupported_column,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pg_bind_out_of_range,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pg_many_statements, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pg_schema_fill, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pg_bulk_error_and_stop,
						setup, teardown),
	};
	const struct CMUnitTest sqlite_only[] = {
		cmocka_unit_test_setup_teardown(test_sqlite_wal_checkpointer,
						setup, teardown),
	};
	int failed;

	if (argc == 2 && strcmp(argv[1], "--pg") == 0) {
		use_pg = 1;
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--pg]\n", argv[0]);
		return 2;
	}
	if (use_pg) {
		admin_url = getenv("SEMQ_TEST_PG_URL");
		if (!admin_url || !*admin_url) {
			fprintf(stderr,
				"\n*** test_db --pg: SKIPPED: SEMQ_TEST_PG_URL "
				"is not set, so the PostgreSQL driver was NOT "
				"tested.\n*** Start a cluster with "
				"tools/pgcluster.sh start DIR and export its "
				"URL (tools/test.sh does).\n\n");
			return 77;
		}
		if (!db_is_url(admin_url)) {
			fprintf(stderr,
				"test_db --pg: SEMQ_TEST_PG_URL='%s' is not a "
				"postgresql:// URL\n",
				admin_url);
			return 2;
		}
	}
	failed = cmocka_run_group_tests_name(
		use_pg ? "db on PostgreSQL" : "db on SQLite", common,
		group_setup, group_teardown);
	if (use_pg)
		failed += cmocka_run_group_tests_name("db, PostgreSQL only",
						      pg_only, group_setup,
						      group_teardown);
	else
		failed += cmocka_run_group_tests_name("db, SQLite only",
						      sqlite_only, group_setup,
						      group_teardown);
	return failed;
}
