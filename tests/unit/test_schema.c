/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the schema (db/0001_init.sql, and db/postgresql/0001_init.sql
 * on PostgreSQL) as the store migrates it.
 *
 * Migration: an empty database gets every table and the latest version;
 * opening again changes nothing; a database from a newer SEMQ, one of another
 * node and (SQLite) a file that is not a database are refused with a message
 * naming the database.
 *
 * The application's insert (SPEC §3, §4; the lean outbox of migration 0007):
 * a bare `INSERT INTO tb_0031(dest, type, msg_key, payload)` from any
 * application is checked by tb_0031_check and, once committed, numbered by
 * the node (store_number_new, which these tests call where the node's next
 * batch would): origin = this node, the next seq of its stream (gapless,
 * never reused, also under concurrent writers in threads and in processes),
 * prev_seq = the previous seq of its key, created_at = the insert's time and
 * status 0; bad input is refused with a message that names the column.
 *
 * The back end: SQLite by default — every test works on real files in its own
 * mkdtemp directory under $TMPDIR, opened once through store_open() (node R1)
 * so the migration runs, then used over plain sqlite3 connections, as an
 * application would. With --pg (or SEMQ_TEST_BACKEND=pg): PostgreSQL, one
 * database per run made from SEMQ_TEST_PG_URL and dropped at the end, a fresh
 * schema per test (reached through search_path in the URL), used over plain
 * libpq connections; without SEMQ_TEST_PG_URL the run says so loudly and
 * exits 77 (skipped). Two tests are about SQLite files and storage classes
 * and are skipped on PostgreSQL, saying why. That plumbing is
 * tests/unit/backend.c.
 */
#define _GNU_SOURCE /* nftw */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "backend.h"
#include "migrations.h"
#include "store.h"

#define NODE "R1"
#define BUSY_MS 5000
#define PER_WRITER 500 /* rows each concurrent writer inserts */

/* A blob literal: x'HEX' on SQLite, '\xHEX'::bytea on PostgreSQL. */
#define BLOB(hex) be_sql("x'" hex "'", "'\\x" hex "'::bytea")

/* A fresh schema of the run's database (be_schema_new): its name into name,
 * the URL that reaches it into url; the test fails unless it works. */
static void pg_schema_new(char *name, size_t namesz, char *url, size_t urlsz)
{
	char why[600];

	if (be_schema_new(name, namesz, url, urlsz, why, sizeof why))
		fail_msg("%s", why);
}

/* ---- an application's connection ------------------------------------------ */

/* A plain connection to the node database, as an application has one:
 * exactly one of the two is set. */
struct app {
	sqlite3 *lite;
	PGconn *pg;
	struct store **st; /* the node, which numbers new rows (number_all) */
};

/* One statement's outcome (app_run). */
struct outcome {
	int ok;         /* it ran */
	int constraint; /* refused by a constraint, a NOT NULL or the
			     trigger (SQLite: SQLITE_CONSTRAINT; PostgreSQL:
			     SQLSTATE class 23 or P0001) */
	char msg[512];  /* why not */
	int64_t id;     /* the row id an INSERT made (ok only) */
};

/* sql with ?1, ?2 made $1, $2 for libpq (the tests' SQL has no other '?'). */
static void pg_params(const char *sql, char *out, size_t outsz)
{
	size_t i, n = 0;

	for (i = 0; sql[i] && n + 1 < outsz; i++)
		out[n++] = sql[i] == '?' ? '$' : sql[i];
	out[n] = '\0';
}

/*
 * Runs one statement with ?1 and ?2 bound to p1 and p2 (text; NULL binds
 * NULL; nparams says how many it has). An INSERT reports the id of its row
 * (PostgreSQL: through RETURNING id, added here).
 */
static void app_run(struct app *a, const char *sql, int nparams, const char *p1,
		    const char *p2, struct outcome *o)
{
	memset(o, 0, sizeof *o);
	if (a->pg) {
		const char *v[2] = {p1, p2};
		char text[2048];
		PGresult *res;
		ExecStatusType t;
		const char *state;
		int insert = strncmp(sql, "INSERT", 6) == 0;

		pg_params(sql, text, sizeof text);
		if (insert)
			strncat(text, " RETURNING id",
				sizeof text - strlen(text) - 1);
		res = PQexecParams(a->pg, text, nparams, NULL, v, NULL, NULL,
				   0);
		t = PQresultStatus(res);
		if (t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK) {
			o->ok = 1;
			if (insert && PQntuples(res) == 1)
				o->id = strtoll(PQgetvalue(res, 0, 0), NULL,
						10);
		} else {
			state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			o->constraint = state && (!strncmp(state, "23", 2) ||
						  !strcmp(state, "P0001"));
			snprintf(o->msg, sizeof o->msg, "%s",
				 PQerrorMessage(a->pg));
		}
		PQclear(res);
	} else {
		sqlite3_stmt *st = NULL;
		int rc = sqlite3_prepare_v2(a->lite, sql, -1, &st, NULL);

		if (rc == SQLITE_OK) {
			if (nparams >= 1)
				sqlite3_bind_text(st, 1, p1, -1, SQLITE_STATIC);
			if (nparams >= 2)
				sqlite3_bind_text(st, 2, p2, -1, SQLITE_STATIC);
			rc = sqlite3_step(st);
		}
		sqlite3_finalize(st);
		if (rc == SQLITE_DONE || rc == SQLITE_ROW) {
			o->ok = 1;
			o->id = sqlite3_last_insert_rowid(a->lite);
		} else {
			o->constraint = (rc & 0xff) == SQLITE_CONSTRAINT;
			snprintf(o->msg, sizeof o->msg, "%s",
				 sqlite3_errmsg(a->lite));
		}
	}
}

/* An application's connection to `target` (caller closes with app_close).
 * *err gets why not when it fails (then NULL). */
static struct app *app_try_open(const char *target, char *err, size_t errsz)
{
	struct app *a = calloc(1, sizeof *a);

	if (!a) {
		snprintf(err, errsz, "out of memory");
		return NULL;
	}
	if (be_pg()) {
		a->pg = PQconnectdb(target);
		if (PQstatus(a->pg) != CONNECTION_OK) {
			snprintf(err, errsz, "connect %s: %s", target,
				 PQerrorMessage(a->pg));
			PQfinish(a->pg);
			free(a);
			return NULL;
		}
		PQsetNoticeProcessor(a->pg, be_quiet_notice, NULL);
		return a;
	}
	if (sqlite3_open_v2(target, &a->lite, SQLITE_OPEN_READWRITE, NULL) !=
	    SQLITE_OK) {
		snprintf(err, errsz, "open %s: %s", target,
			 a->lite ? sqlite3_errmsg(a->lite) : "?");
		sqlite3_close(a->lite);
		free(a);
		return NULL;
	}
	sqlite3_busy_timeout(a->lite, BUSY_MS);
	return a;
}

static struct app *app_open(const char *target)
{
	char err[512];
	struct app *a = app_try_open(target, err, sizeof err);

	if (!a)
		fail_msg("%s", err);
	return a;
}

static void app_close(struct app *a)
{
	if (!a)
		return;
	sqlite3_close(a->lite);
	PQfinish(a->pg);
	free(a);
}

static void exec_ok(struct app *a, const char *sql)
{
	struct outcome o;

	app_run(a, sql, 0, NULL, NULL, &o);
	if (!o.ok)
		fail_msg("%s: %s", sql, o.msg);
}

/* The first column of the first row of `sql` (one optional text parameter
 * ?1) as an integer; NULL reads as 0. */
static int64_t q_int1(struct app *a, const char *sql, const char *p1)
{
	int64_t v = 0;

	if (a->pg) {
		char text[2048];
		const char *vals[1] = {p1};
		PGresult *res;

		pg_params(sql, text, sizeof text);
		res = PQexecParams(a->pg, text, p1 ? 1 : 0, NULL, vals, NULL,
				   NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK ||
		    PQntuples(res) < 1) {
			char msg[512];

			snprintf(msg, sizeof msg, "%s", PQerrorMessage(a->pg));
			PQclear(res);
			fail_msg("%s: no row (%s)", sql, msg);
		}
		if (!PQgetisnull(res, 0, 0))
			v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		PQclear(res);
		return v;
	} else {
		sqlite3_stmt *st = NULL;

		if (sqlite3_prepare_v2(a->lite, sql, -1, &st, NULL) !=
		    SQLITE_OK)
			fail_msg("%s: %s", sql, sqlite3_errmsg(a->lite));
		if (p1)
			sqlite3_bind_text(st, 1, p1, -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_ROW) {
			sqlite3_finalize(st);
			fail_msg("%s: no row (%s)", sql,
				 sqlite3_errmsg(a->lite));
		}
		v = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	return v;
}

/* The first column of the first row of `sql` (no parameters). */
static int64_t q_int(struct app *a, const char *sql)
{
	return q_int1(a, sql, NULL);
}

/* One test's world: a temp dir or a schema, the node database in it, the
 * store that migrated it (may be closed by a test: NULL then) and an
 * application's plain connection to the same database. All owned by the
 * fixture. */
struct fx {
	char dir[PATH_MAX / 2];
	char path[PATH_MAX]; /* a file, or a URL reaching the schema */
	char schema[32];     /* PostgreSQL: this test's schema */
	char schema2[32];    /* PostgreSQL: one more, when a test made it */
	struct store *st;
	struct app *db;
};

/* Opens `path` as node `node` through the store; the test fails unless it
 * works. The caller frees *out with store_free(). */
static void open_store(const char *path, const char *node, size_t max_payload,
		       struct store **out)
{
	struct store_opts o = {.path = path,
			       .node_id = node,
			       .max_payload = max_payload,
			       .synchronous = -1};
	char err[SEMQ_ERRLEN] = "";
	int r = store_open(&o, out, err, sizeof err);

	if (r != SEMQ_OK)
		fail_msg("store_open %s: %d %s", path, r, err);
	assert_non_null(*out);
}

/* A bare application insert of one message to `dest` with key `key` (NULL
 * binds NULL). Returns 0 or -1; *id_out gets the row id (-1 on failure). */
static int app_insert(struct app *db, const char *dest, const char *key,
		      int64_t *id_out)
{
	char sql[160];
	struct outcome o;

	snprintf(sql, sizeof sql,
		 "INSERT INTO tb_0031(dest, type, msg_key, payload)"
		 " VALUES (?1, 2800, ?2, %s)",
		 BLOB("00"));
	app_run(db, sql, 2, dest, key, &o);
	if (id_out)
		*id_out = o.ok ? o.id : -1;
	if (!o.ok)
		fprintf(stderr, "app_insert: %s\n", o.msg);
	return o.ok ? 0 : -1;
}

/* What the trigger made of one tb_0031 row. */
struct row {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
	int64_t seq, type, prev_seq, deliver_at, created_at, status;
	int key_null;
	char key[SEMQ_KEY_MAX + 1];
	int64_t payload_len;
	char payload_type[8];
};

/* The payload's storage class as the back end names it. */
#define PAYLOAD_TYPE be_sql("blob", "bytea")

/* The node numbers the application's new rows (migration 0007): what it
 * does in its next batch, done now (a->st: the fixture's node). */
static void number_all(struct app *a)
{
	unsigned n = 0;
	int more = 1;

	assert_true(a->st && *a->st);
	while (more)
		assert_int_equal(
			store_number_new(*a->st, 1, 100000, 1, &n, &more),
			SEMQ_OK);
}

static void get_row_pg(PGconn *db, int64_t id, struct row *r)
{
	static const char sql[] =
		"SELECT origin, dest, seq, type, prev_seq, deliver_at,"
		" created_at, status, msg_key, length(payload),"
		" pg_typeof(payload)::text FROM tb_0031 WHERE id = $1";
	char ids[24];
	const char *v[1] = {ids};
	PGresult *res;

	memset(r, 0, sizeof *r);
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	res = PQexecParams(db, sql, 1, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		PQclear(res);
		fail_msg("tb_0031 row %lld missing (%s)", (long long)id,
			 PQerrorMessage(db));
	}
	/* origin and seq must be real values, not NULL left by the trigger */
	if (PQgetisnull(res, 0, 0) || PQgetisnull(res, 0, 2)) {
		PQclear(res);
		fail_msg("tb_0031 row %lld: origin or seq left NULL",
			 (long long)id);
	}
	snprintf(r->origin, sizeof r->origin, "%s", PQgetvalue(res, 0, 0));
	snprintf(r->dest, sizeof r->dest, "%s", PQgetvalue(res, 0, 1));
	r->seq = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
	r->type = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
	r->prev_seq = strtoll(PQgetvalue(res, 0, 4), NULL, 10);
	r->deliver_at = strtoll(PQgetvalue(res, 0, 5), NULL, 10);
	r->created_at = strtoll(PQgetvalue(res, 0, 6), NULL, 10);
	r->status = strtoll(PQgetvalue(res, 0, 7), NULL, 10);
	r->key_null = PQgetisnull(res, 0, 8);
	snprintf(r->key, sizeof r->key, "%s", PQgetvalue(res, 0, 8));
	r->payload_len = strtoll(PQgetvalue(res, 0, 9), NULL, 10);
	snprintf(r->payload_type, sizeof r->payload_type, "%s",
		 PQgetvalue(res, 0, 10));
	PQclear(res);
}

static void get_row(struct app *a, int64_t id, struct row *r)
{
	static const char sql[] =
		"SELECT origin, dest, seq, type, prev_seq, deliver_at,"
		" created_at, status, msg_key, length(payload),"
		" typeof(payload), typeof(origin), typeof(seq)"
		" FROM tb_0031 WHERE id = ?1";
	sqlite3 *db = a->lite;
	sqlite3_stmt *st = NULL;
	const unsigned char *s;

	number_all(a);
	if (a->pg) {
		get_row_pg(a->pg, id, r);
		return;
	}
	memset(r, 0, sizeof *r);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s", sqlite3_errmsg(db));
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_finalize(st);
		fail_msg("tb_0031 row %lld missing", (long long)id);
	}
	/* origin and seq must be real values, not NULL left by the trigger */
	assert_string_equal(sqlite3_column_text(st, 11), "text");
	assert_string_equal(sqlite3_column_text(st, 12), "integer");
	snprintf(r->origin, sizeof r->origin, "%s", sqlite3_column_text(st, 0));
	snprintf(r->dest, sizeof r->dest, "%s", sqlite3_column_text(st, 1));
	r->seq = sqlite3_column_int64(st, 2);
	r->type = sqlite3_column_int64(st, 3);
	r->prev_seq = sqlite3_column_int64(st, 4);
	r->deliver_at = sqlite3_column_int64(st, 5);
	r->created_at = sqlite3_column_int64(st, 6);
	r->status = sqlite3_column_int64(st, 7);
	r->key_null = sqlite3_column_type(st, 8) == SQLITE_NULL;
	s = sqlite3_column_text(st, 8);
	snprintf(r->key, sizeof r->key, "%s", s ? (const char *)s : "");
	r->payload_len = sqlite3_column_int64(st, 9);
	snprintf(r->payload_type, sizeof r->payload_type, "%s",
		 sqlite3_column_text(st, 10));
	sqlite3_finalize(st);
}

/* ---- fixture -------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	return remove(p);
}

static void rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static struct fx *fx_new(size_t max_payload)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof *f);

	assert_non_null(f);
	if (be_pg()) {
		pg_schema_new(f->schema, sizeof f->schema, f->path,
			      sizeof f->path);
	} else {
		snprintf(f->dir, sizeof f->dir, "%s/semq-schema-XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(f->dir))
			fail_msg("mkdtemp %s: %s", f->dir, strerror(errno));
		snprintf(f->path, sizeof f->path, "%s/r1.db", f->dir);
	}
	open_store(f->path, NODE, max_payload, &f->st);
	f->db = app_open(f->path);
	f->db->st = &f->st;
	return f;
}

static int setup(void **state)
{
	*state = fx_new(0);
	return 0;
}

/* For the bad-input tests: a node whose max_payload is 1024 bytes. */
static int setup_small(void **state)
{
	*state = fx_new(1024);
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (!f)
		return 0;
	app_close(f->db);
	store_free(f->st);
	if (be_pg()) {
		be_schema_drop(f->schema);
		be_schema_drop(f->schema2);
	} else {
		rm_tree(f->dir);
	}
	free(f);
	return 0;
}

/* Does `s` contain the number n as a whole token (no digit on either side)? */
static int has_number(const char *s, long n)
{
	char num[32];
	size_t len = (size_t)snprintf(num, sizeof num, "%ld", n);
	const char *p = s;

	while ((p = strstr(p, num)) != NULL) {
		int before = p > s && p[-1] >= '0' && p[-1] <= '9';
		int after = p[len] >= '0' && p[len] <= '9';
		if (!before && !after)
			return 1;
		p++;
	}
	return 0;
}

/* ---- migration ------------------------------------------------------------ */

static const char *const tables[] = {
	"tb_0031",        "tb_0030",   "tb_0033",     "semq_stream_out",
	"semq_stream_in", "semq_meta", "semq_schema",
};

static int64_t table_exists(struct app *db, const char *name)
{
	return q_int1(db,
		      be_sql("SELECT count(*) FROM sqlite_master"
			     " WHERE type = 'table' AND name = ?1",
			     "SELECT count(*) FROM pg_tables"
			     " WHERE schemaname = current_schema()"
			     " AND tablename = ?1"),
		      name);
}

/* Every object of the database (tables, indexes, triggers, functions). */
#define ALL_OBJECTS                                                            \
	be_sql("SELECT count(*) FROM sqlite_master",                           \
	       "SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n"   \
	       " ON n.oid = c.relnamespace WHERE n.nspname = "                 \
	       "current_schema())"                                             \
	       " + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n"        \
	       " ON n.oid = p.pronamespace WHERE n.nspname = "                 \
	       "current_schema())"                                             \
	       " + (SELECT count(*) FROM pg_trigger t JOIN pg_class c"         \
	       " ON c.oid = t.tgrelid JOIN pg_namespace n"                     \
	       " ON n.oid = c.relnamespace WHERE NOT t.tgisinternal"           \
	       " AND n.nspname = current_schema())")

static void test_migrate_empty_file(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	struct store *st = NULL;
	struct app *db;
	size_t i;
	int fd;

	if (be_pg()) {
		/* an empty schema besides the fixture's */
		pg_schema_new(f->schema2, sizeof f->schema2, path, sizeof path);
	} else {
		/* an existing zero-byte file (the fixture covered a missing
		 * one) */
		snprintf(path, sizeof path, "%s/empty.db", f->dir);
		fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
		assert_true(fd >= 0);
		close(fd);
	}

	open_store(path, NODE, 0, &st);
	assert_true(store_schema_latest() >= 1);
	assert_int_equal(store_schema_version(st), store_schema_latest());
	db = app_open(path);
	for (i = 0; i < sizeof tables / sizeof tables[0]; i++)
		if (table_exists(db, tables[i]) != 1)
			fail_msg("table %s missing after migration", tables[i]);
	assert_int_equal(
		q_int(db, be_sql("SELECT count(*) FROM sqlite_master"
				 " WHERE type = 'trigger'"
				 " AND name = 'tb_0031_check'",
				 "SELECT count(*) FROM pg_trigger t"
				 " JOIN pg_class c ON c.oid = t.tgrelid"
				 " JOIN pg_namespace n"
				 " ON n.oid = c.relnamespace"
				 " WHERE n.nspname = current_schema()"
				 " AND t.tgname = 'tb_0031_check'")),
		1);
	assert_int_equal(q_int(db, be_sql("SELECT count(*) FROM sqlite_master"
					  " WHERE type = 'index'"
					  " AND name = 'idx_0030_1'",
					  "SELECT count(*) FROM pg_indexes"
					  " WHERE schemaname = current_schema()"
					  " AND indexname = 'idx_0030_1'")),
			 1);
	assert_int_equal(q_int(db, "SELECT count(*) FROM semq_meta"
				   " WHERE key = 'node_id' AND value = 'R1'"),
			 1);
	/* the database is empty of messages */
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"), 0);
	app_close(db);
	store_free(st);

	/* and the fixture's database, which did not exist before, the same */
	assert_int_equal(store_schema_version(f->st), store_schema_latest());
	for (i = 0; i < sizeof tables / sizeof tables[0]; i++)
		assert_int_equal(table_exists(f->db, tables[i]), 1);
}

static void test_reopen_is_noop(void **state)
{
	struct fx *f = *state;
	int64_t id, objs, schema_rows;
	struct row r;
	int v;

	assert_int_equal(app_insert(f->db, "S1", "K1", &id), 0);
	objs = q_int(f->db, ALL_OBJECTS);
	schema_rows = q_int(f->db, "SELECT count(*) FROM semq_schema");
	v = store_schema_version(f->st);
	store_free(f->st);
	f->st = NULL;

	open_store(f->path, NODE, 0, &f->st);
	assert_int_equal(store_schema_version(f->st), v);
	assert_int_equal(store_schema_version(f->st), store_schema_latest());
	assert_int_equal(q_int(f->db, ALL_OBJECTS), objs);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM semq_schema"),
			 schema_rows);
	/* data kept, the stream counter too */
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 1);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 1);
	assert_string_equal(r.key, "K1");
	assert_int_equal(app_insert(f->db, "S1", "K1", &id), 0);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.prev_seq, 1);
}

/*
 * A database of version 1 is migrated to the latest: on SQLite 0002 edits the
 * status and result CHECK constraints in place into comparisons (no IN list
 * left: SQLite builds an ephemeral b-tree per IN-list evaluation); the rows
 * stay, the constraints still refuse what they refused. On PostgreSQL 0002
 * changes nothing and the version still moves.
 */
static void expect_refused(struct app *db, const char *sql, const char *param,
			   const char *needle);

static void test_upgrade_from_version_1(void **state)
{
	struct fx *f = *state;
	const struct migration *v1 = NULL;
	char path[PATH_MAX], sql[256];
	struct store *st = NULL;
	struct app *db;
	int64_t id;
	size_t i, n = be_pg() ? semq_pg_n_migrations : semq_n_migrations;

	for (i = 0; i < n; i++)
		if ((be_pg() ? semq_pg_migrations : semq_migrations)[i]
			    .version == 1)
			v1 = &(be_pg() ? semq_pg_migrations
				       : semq_migrations)[i];
	assert_non_null(v1);
	if (be_pg())
		pg_schema_new(f->schema2, sizeof f->schema2, path, sizeof path);
	else {
		int fd;

		snprintf(path, sizeof path, "%s/v1.db", f->dir);
		fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
		assert_true(fd >= 0);
		close(fd);
	}
	/* what a SEMQ of schema version 1 left: its schema, its bookkeeping,
	 * its node id and a message */
	db = app_open(path);
	snprintf(sql, sizeof sql,
		 "CREATE TABLE semq_schema (version INTEGER PRIMARY KEY,"
		 " name TEXT, applied_at BIGINT);"
		 " INSERT INTO semq_schema VALUES (1, '0001_init.sql', 0);"
		 " INSERT INTO semq_meta(key, value) VALUES ('node_id', '%s')",
		 NODE);
	if (be_pg()) {
		PGresult *res = PQexec(db->pg, v1->sql);
		assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
		PQclear(res);
		res = PQexec(db->pg, sql);
		assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
		PQclear(res);
	} else {
		assert_int_equal(
			sqlite3_exec(db->lite, v1->sql, NULL, NULL, NULL),
			SQLITE_OK);
		assert_int_equal(sqlite3_exec(db->lite, sql, NULL, NULL, NULL),
				 SQLITE_OK);
	}
	assert_int_equal(app_insert(db, "S1", "K1", &id), 0);

	open_store(path, NODE, 0, &st);
	assert_true(store_schema_latest() >= 2);
	assert_int_equal(store_schema_version(st), store_schema_latest());
	/* one row per migration (their versions need not be contiguous) */
	assert_int_equal(q_int(db, "SELECT count(*) FROM semq_schema"), (int)n);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"), 1);
	if (!be_pg()) {
		assert_int_equal(q_int(db,
				       "SELECT count(*) FROM sqlite_schema"
				       " WHERE name IN ('tb_0031', 'tb_0030',"
				       " 'tb_0033') AND (sql LIKE"
				       " '%IN (0, 4, 6, 100, -2)%' OR sql LIKE"
				       " '%IN (0, 1, 2, 3, 4)%' OR sql LIKE"
				       " '%IN (0, 1, 3, 4)%' OR sql LIKE"
				       " '%IN (0, 1, 2, -1, -2)%')"),
				 0);
		assert_int_equal(q_int(db,
				       "SELECT count(*) FROM sqlite_schema"
				       " WHERE name = 'tb_0031' AND sql LIKE"
				       " '%status = 0 OR status = 4 OR%'"),
				 1);
		assert_int_equal(q_int(db, "SELECT count(*) FROM"
					   " pragma_integrity_check()"
					   " WHERE integrity_check <> 'ok'"),
				 0);
	}
	/* the constraints refuse what they refused, and take what version 3
	 * added: status 8 (held), results 5 (dead), 7 (undecided) and 8
	 * (undeliverable) */
	expect_refused(db, "UPDATE tb_0031 SET status = 5", NULL, "status");
	expect_refused(db, "UPDATE tb_0031 SET result = 9", NULL, "result");
	exec_ok(db, "UPDATE tb_0031 SET status = 8, result = 8");
	exec_ok(db, "UPDATE tb_0031 SET status = 8, result = 7");
	exec_ok(db, "UPDATE tb_0031 SET status = 4, result = 5");
	exec_ok(db, "UPDATE tb_0031 SET status = 100, result = 2");
	/* a database that had sent keeps its streams in the legacy life, its
	 * row too, and the copy of it before the migration is kept */
	assert_int_equal(store_life(st), SEMQ_LIFE_LEGACY);
	assert_int_equal(q_int(db, "SELECT life FROM tb_0031"),
			 SEMQ_LIFE_LEGACY);
	assert_int_equal(store_migrated_from(st), 1);
	assert_true(store_backup(st)[0] != '\0');
	if (!be_pg()) {
		struct stat sb;
		struct app *old;

		assert_int_equal(stat(store_backup(st), &sb), 0);
		old = app_open(store_backup(st));
		assert_int_equal(q_int(old, "SELECT max(version)"
					    " FROM semq_schema"),
				 1);
		assert_int_equal(q_int(old, "SELECT count(*) FROM tb_0031"), 1);
		app_close(old);
	} else {
		assert_non_null(strstr(store_backup(st), "_schema1_bak"));
	}
	app_close(db);
	store_free(st);
}

static void test_newer_version_refused(void **state)
{
	struct fx *f = *state;
	struct store_opts o = {
		.path = f->path, .node_id = NODE, .synchronous = -1};
	struct store *st = NULL;
	char err[SEMQ_ERRLEN] = "", rest[SEMQ_ERRLEN];
	char *p;
	int latest = store_schema_latest(), r;

	store_free(f->st);
	f->st = NULL;
	/* a newer SEMQ migrated this database to version 999 */
	exec_ok(f->db,
		"UPDATE semq_schema SET version = 999"
		" WHERE version = (SELECT max(version) FROM semq_schema)");

	r = store_open(&o, &st, err, sizeof err);
	assert_int_equal(r, SEMQ_ERR_VERSION);
	assert_null(st);
	/* (a URL without a password: the store names it as given) */
	if (!strstr(err, f->path))
		fail_msg("message does not name the database: %s", err);
	/* both versions named: look outside the path (it may hold digits) */
	snprintf(rest, sizeof rest, "%s", err);
	p = strstr(rest, f->path);
	memset(p, ' ', strlen(f->path));
	if (!has_number(rest, 999) || !has_number(rest, latest))
		fail_msg("message does not name versions 999 and %d: %s",
			 latest, err);
	/* and the database was left alone */
	assert_int_equal(q_int(f->db, "SELECT max(version) FROM semq_schema"),
			 999);
}

static void test_other_node_refused(void **state)
{
	struct fx *f = *state;
	struct store_opts o = {
		.path = f->path, .node_id = "R2", .synchronous = -1};
	struct store *st = NULL;
	char err[SEMQ_ERRLEN] = "";
	int64_t id;
	struct row r;

	store_free(f->st);
	f->st = NULL;
	assert_int_equal(store_open(&o, &st, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_null(st);
	if (!strstr(err, f->path) || !strstr(err, "R1") || !strstr(err, "R2"))
		fail_msg("message does not name database and both ids: %s",
			 err);
	/* the recorded id is unchanged: inserts still get origin R1 */
	open_store(f->path, NODE, 0, &f->st);
	assert_int_equal(app_insert(f->db, "S1", NULL, &id), 0);
	get_row(f->db, id, &r);
	assert_string_equal(r.origin, "R1");
}

static void test_not_a_database_refused(void **state)
{
	struct fx *f = *state;
	static const char junk[] =
		"this is a text file, not a SQLite database; it must not be "
		"overwritten by a node that was pointed at it by mistake.\n";
	char path[PATH_MAX], back[sizeof junk * 40];
	char err[SEMQ_ERRLEN] = "";
	struct store_opts o = {.node_id = NODE, .synchronous = -1};
	struct store *st = NULL;
	FILE *fp;
	size_t n;
	int i, r;

	if (be_pg()) {
		fprintf(stderr, "test_not_a_database_refused: about files "
				"that are not SQLite databases; skipped on "
				"PostgreSQL\n");
		skip();
	}
	snprintf(path, sizeof path, "%s/notes.txt", f->dir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	for (i = 0; i < 32; i++) /* well past a SQLite header's 100 bytes */
		fputs(junk, fp);
	fclose(fp);

	o.path = path;
	r = store_open(&o, &st, err, sizeof err);
	if (r != SEMQ_ERR_DB && r != SEMQ_ERR_IO)
		fail_msg("store_open of a text file: %d (%s)", r, err);
	assert_null(st);
	if (!strstr(err, path))
		fail_msg("message does not name the file: %s", err);
	if (!strstr(err, "not a") || !strstr(err, "database"))
		fail_msg("message does not say what is wrong: %s", err);

	fp = fopen(path, "r");
	assert_non_null(fp);
	n = fread(back, 1, sizeof back, fp);
	fclose(fp);
	assert_int_equal(n, 32 * (sizeof junk - 1));
	assert_memory_equal(back, junk, sizeof junk - 1);
}

/* ---- the fill trigger ------------------------------------------------------ */

/* Runs an INSERT (no parameters) that must work; returns its row id. */
static int64_t insert_ok(struct app *db, const char *sql)
{
	struct outcome o;

	app_run(db, sql, 0, NULL, NULL, &o);
	if (!o.ok)
		fail_msg("%s: %s", sql, o.msg);
	return o.id;
}

/* How many of the node's own columns of tb_0031 (attempts, next_attempt_at,
 * sent_at, acked_at, result) are not at their initial value, over all rows
 * (a sum). */
static int64_t node_columns_set(struct app *db)
{
	return q_int(db, be_sql("SELECT sum(attempts + next_attempt_at"
				" + (sent_at IS NOT NULL)"
				" + (acked_at IS NOT NULL)"
				" + (result IS NOT NULL)) FROM tb_0031",
				"SELECT sum(attempts + next_attempt_at"
				" + (sent_at IS NOT NULL)::int"
				" + (acked_at IS NOT NULL)::int"
				" + (result IS NOT NULL)::int) FROM tb_0031"));
}

static void test_bare_insert_filled(void **state)
{
	struct fx *f = *state;
	int64_t before, after, id;
	struct row r;

	before = be_now_ms();
	id = insert_ok(f->db, be_sql("INSERT INTO tb_0031(dest,type,msg_key,"
				     "payload) VALUES('S1',2800,'K1',x'00')",
				     "INSERT INTO tb_0031(dest,type,msg_key,"
				     "payload) VALUES('S1',2800,'K1',"
				     "'\\x00'::bytea)"));
	after = be_now_ms();
	get_row(f->db, id, &r);
	assert_string_equal(r.origin, NODE);
	assert_string_equal(r.dest, "S1");
	assert_int_equal(r.seq, 1);
	assert_int_equal(r.prev_seq, 0);
	assert_int_equal(r.type, 2800);
	assert_false(r.key_null);
	assert_string_equal(r.key, "K1");
	assert_int_equal(r.status, 0);
	assert_int_equal(r.deliver_at, 0);
	assert_int_equal(r.payload_len, 1);
	assert_string_equal(r.payload_type, PAYLOAD_TYPE);
	if (r.created_at < before - 1000 || r.created_at > after + 1000)
		fail_msg("created_at %lld not within a second of [%lld, %lld]",
			 (long long)r.created_at, (long long)before,
			 (long long)after);
	assert_int_equal(node_columns_set(f->db), 0);

	/* the next with the same key points back at it */
	id = insert_ok(f->db, be_sql("INSERT INTO tb_0031(dest,type,msg_key,"
				     "payload) VALUES('S1',2800,'K1',x'00')",
				     "INSERT INTO tb_0031(dest,type,msg_key,"
				     "payload) VALUES('S1',2800,'K1',"
				     "'\\x00'::bytea)"));
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.prev_seq, 1);
	assert_int_equal(q_int(f->db, "SELECT last_seq FROM semq_stream_out"
				      " WHERE origin = 'R1' AND dest = 'S1'"),
			 2);
}

static void test_prev_seq_interleaved_keys(void **state)
{
	struct fx *f = *state;
	static const char *const keys[] = {"K1", "K2", "K1", "K3", "K2"};
	static const int64_t want_prev[] = {0, 0, 1, 0, 2};
	int64_t id;
	struct row r;
	size_t i;

	for (i = 0; i < 5; i++) {
		assert_int_equal(app_insert(f->db, "S1", keys[i], &id), 0);
		get_row(f->db, id, &r);
		assert_int_equal(r.seq, (int64_t)i + 1);
		assert_string_equal(r.key, keys[i]);
		if (r.prev_seq != want_prev[i])
			fail_msg("message %zu (key %s): prev_seq %lld, want "
				 "%lld",
				 i + 1, keys[i], (long long)r.prev_seq,
				 (long long)want_prev[i]);
	}
}

static void test_streams_count_separately(void **state)
{
	struct fx *f = *state;
	static const char *const dests[] = {"S1", "S2", "S1", "S2", "S2"};
	static const int64_t want_seq[] = {1, 1, 2, 2, 3};
	static const int64_t want_prev[] = {0, 0, 1, 1, 2};
	int64_t id;
	struct row r;
	size_t i;

	/* the same key in both streams: chains do not cross streams */
	for (i = 0; i < 5; i++) {
		assert_int_equal(app_insert(f->db, dests[i], "K1", &id), 0);
		get_row(f->db, id, &r);
		assert_string_equal(r.dest, dests[i]);
		assert_int_equal(r.seq, want_seq[i]);
		assert_int_equal(r.prev_seq, want_prev[i]);
	}
	assert_int_equal(q_int(f->db, "SELECT last_seq FROM semq_stream_out"
				      " WHERE origin = 'R1' AND dest = 'S1'"),
			 2);
	assert_int_equal(q_int(f->db, "SELECT last_seq FROM semq_stream_out"
				      " WHERE origin = 'R1' AND dest = 'S2'"),
			 3);
}

/*
 * Columns that are the node's (status, attempts, next_attempt_at, sent_at,
 * acked_at, result) are reset whatever the application wrote into them, and
 * a text payload is stored as bytes; an insert that leaves them alone gets
 * the same row (schema 3 resets them only when needed).
 */
static void test_node_columns_reset(void **state)
{
	struct fx *f = *state;
	int64_t id;
	struct row r;

	id = insert_ok(
		f->db,
		be_sql("INSERT INTO tb_0031(dest, type, msg_key, payload,"
		       " status, attempts, next_attempt_at, sent_at,"
		       " acked_at, result)"
		       " VALUES('S1', 1, 'K1', 'text', 100, 3, 5, 7, 9, 0)",
		       "INSERT INTO tb_0031(dest, type, msg_key, payload,"
		       " status, attempts, next_attempt_at, sent_at,"
		       " acked_at, result)"
		       " VALUES('S1', 1, 'K1', 'text'::bytea, 100, 3, 5, 7, 9,"
		       " 0)"));
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 1);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.payload_len, 4);
	assert_string_equal(r.payload_type, PAYLOAD_TYPE);
	assert_int_equal(node_columns_set(f->db), 0);
	/* one of them alone is enough */
	id = insert_ok(f->db,
		       be_sql("INSERT INTO tb_0031(dest, type, payload, result)"
			      " VALUES('S1', 1, x'00', 4)",
			      "INSERT INTO tb_0031(dest, type, payload, result)"
			      " VALUES('S1', 1, '\\x00'::bytea, 4)"));
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.status, 0);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"
				      " WHERE result IS NOT NULL"),
			 0);
	/* and a plain one stays as it was written */
	assert_int_equal(app_insert(f->db, "S1", "K1", &id), 0);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 3);
	assert_int_equal(r.prev_seq, 1);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.payload_len, 1);
	assert_string_equal(r.payload_type, PAYLOAD_TYPE);
}

static void test_empty_key_is_null(void **state)
{
	struct fx *f = *state;
	static const char *const keys[] = {NULL, "", NULL, ""};
	int64_t id;
	struct row r;
	size_t i;

	for (i = 0; i < 4; i++) {
		assert_int_equal(app_insert(f->db, "S1", keys[i], &id), 0);
		get_row(f->db, id, &r);
		assert_int_equal(r.seq, (int64_t)i + 1);
		assert_true(r.key_null);
		assert_int_equal(r.prev_seq, 0);
	}
	/* a keyed message after them starts its own chain */
	assert_int_equal(app_insert(f->db, "S1", "K1", &id), 0);
	get_row(f->db, id, &r);
	assert_int_equal(r.prev_seq, 0);
}

static void test_seq_not_reused_after_purge(void **state)
{
	struct fx *f = *state;
	int64_t id;
	struct row r;
	int i;

	for (i = 0; i < 3; i++)
		assert_int_equal(app_insert(f->db, "S1", NULL, &id), 0);
	number_all(f->db); /* the node numbers them before it purges them */
	exec_ok(f->db, "DELETE FROM tb_0031");
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 0);
	assert_int_equal(app_insert(f->db, "S1", NULL, &id), 0);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 4);
}

static void test_rollback_leaves_no_gap(void **state)
{
	struct fx *f = *state;
	int64_t id;
	struct row r;

	assert_int_equal(app_insert(f->db, "S1", "K1", &id), 0);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 1);
	exec_ok(f->db, "BEGIN");
	assert_int_equal(app_insert(f->db, "S1", "K1", &id), 0);
	/* inside the transaction the row waits, unnumbered: the node numbers
	 * committed rows only */
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"
				      " WHERE seq IS NULL AND origin IS NULL"),
			 1);
	exec_ok(f->db, "ROLLBACK");
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 1);
	assert_int_equal(q_int(f->db, "SELECT last_seq FROM semq_stream_out"
				      " WHERE dest = 'S1'"),
			 1);

	assert_int_equal(app_insert(f->db, "S1", "K1", &id), 0);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.prev_seq, 1);
}

/* ---- concurrent writers ---------------------------------------------------- */

/*
 * One writer: its own connection to `path`, PER_WRITER inserts into stream
 * R1->S1, type 100 + w, keys K0..K4 shared with the other writer (so key chains
 * interleave across connections). batch 1 = each insert in its own (autocommit)
 * transaction; batch n = BEGIN (IMMEDIATE on SQLite), n inserts, COMMIT.
 * Returns 0, or -1 with a message in err. Used by threads and by forked
 * children alike (no cmocka asserts here: they would jump).
 */
static int writer_run(const char *path, int w, int batch, char *err,
		      size_t errsz)
{
	char sql[160], type[16], key[8], why[512];
	struct app *db;
	struct outcome o;
	int i, r = -1;

	db = app_try_open(path, why, sizeof why);
	if (!db) {
		snprintf(err, errsz, "writer %d: %.200s", w, why);
		return -1;
	}
	/* PostgreSQL: what is tested is the order of seqs, not durability;
	 * commits that do not wait for the disk keep the test quick */
	if (db->pg && be_pg_run(db->pg, "SET synchronous_commit = off", why,
				sizeof why)) {
		snprintf(err, errsz, "writer %d: %.200s", w, why);
		goto out;
	}
	snprintf(sql, sizeof sql,
		 "INSERT INTO tb_0031(dest, type, msg_key, payload)"
		 " VALUES ('S1', CAST(?1 AS INTEGER), ?2, %s)",
		 BLOB("0102"));
	snprintf(type, sizeof type, "%d", 100 + w);
	for (i = 0; i < PER_WRITER; i++) {
		if (batch > 1 && i % batch == 0) {
			app_run(db, be_sql("BEGIN IMMEDIATE", "BEGIN"), 0, NULL,
				NULL, &o);
			if (!o.ok) {
				snprintf(err, errsz,
					 "writer %d: BEGIN at %d: %.200s", w, i,
					 o.msg);
				goto out;
			}
		}
		snprintf(key, sizeof key, "K%d", i % 5);
		app_run(db, sql, 2, type, key, &o);
		if (!o.ok) {
			snprintf(err, errsz, "writer %d: insert %d: %.200s", w,
				 i, o.msg);
			goto out;
		}
		if (batch > 1 &&
		    (i % batch == batch - 1 || i == PER_WRITER - 1)) {
			app_run(db, "COMMIT", 0, NULL, NULL, &o);
			if (!o.ok) {
				snprintf(err, errsz,
					 "writer %d: COMMIT at %d: %.200s", w,
					 i, o.msg);
				goto out;
			}
		}
	}
	r = 0;
out:
	app_close(db);
	return r;
}

/* Checks stream R1->S1 after two writers: seqs exactly 1..2*PER_WRITER. */
static void check_gapless(struct app *db)
{
	const int64_t n = 2 * PER_WRITER;

	number_all(db);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"), n);
	assert_int_equal(q_int(db, "SELECT count(DISTINCT seq) FROM tb_0031"),
			 n);
	assert_int_equal(q_int(db, "SELECT min(seq) FROM tb_0031"), 1);
	assert_int_equal(q_int(db, "SELECT max(seq) FROM tb_0031"), n);
	assert_int_equal(
		q_int(db, be_sql("SELECT count(*) FROM tb_0031"
				 " WHERE origin IS NOT 'R1' OR dest <> 'S1'",
				 "SELECT count(*) FROM tb_0031 WHERE origin"
				 " IS DISTINCT FROM 'R1' OR dest <> 'S1'")),
		0);
	/* seqs follow commit order exactly: in rowid order each is one
	 * more. SQLite only: there an insert takes the database's write lock
	 * before it gets its rowid. PostgreSQL hands out ids (an identity
	 * sequence) before the trigger waits for the stream's counter, so
	 * two writers' ids may cross their seqs; the gapless counts above and
	 * the key chains below are what must hold there. */
	if (!be_pg())
		assert_int_equal(q_int(db, "SELECT count(*) FROM (SELECT seq,"
					   " lag(seq) OVER (ORDER BY id) AS p"
					   " FROM tb_0031) WHERE p IS NOT NULL"
					   " AND seq <> p + 1"),
				 0);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"
				   " WHERE type = 100"),
			 PER_WRITER);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"
				   " WHERE type = 101"),
			 PER_WRITER);
	/* key chains stayed right although both writers used the same keys */
	assert_int_equal(q_int(db, "SELECT count(*) FROM (SELECT prev_seq,"
				   " lag(seq, 1, 0) OVER (PARTITION BY msg_key"
				   " ORDER BY seq) AS p FROM tb_0031) c"
				   " WHERE prev_seq <> p"),
			 0);
	assert_int_equal(q_int(db, "SELECT last_seq FROM semq_stream_out"
				   " WHERE origin = 'R1' AND dest = 'S1'"),
			 n);
}

struct writer {
	const char *path;
	int w, batch;
	pthread_barrier_t *start;
	int r;
	char err[256];
};

static void *writer_thread(void *arg)
{
	struct writer *wr = arg;

	pthread_barrier_wait(wr->start);
	wr->r = writer_run(wr->path, wr->w, wr->batch, wr->err, sizeof wr->err);
	return NULL;
}

static void run_threads(struct fx *f, int batch)
{
	pthread_barrier_t start;
	pthread_t th[2];
	struct writer wr[2];
	int i;

	assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
	for (i = 0; i < 2; i++) {
		memset(&wr[i], 0, sizeof wr[i]);
		wr[i].path = f->path;
		wr[i].w = i;
		wr[i].batch = batch;
		wr[i].start = &start;
		assert_int_equal(
			pthread_create(&th[i], NULL, writer_thread, &wr[i]), 0);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start);
	for (i = 0; i < 2; i++)
		if (wr[i].r != 0)
			fail_msg("%s", wr[i].err);
	check_gapless(f->db);
}

static void test_concurrent_threads(void **state)
{
	run_threads(*state, 1);
}

static void test_concurrent_threads_batched(void **state)
{
	run_threads(*state, 10);
}

/*
 * Two processes. No connection may cross fork(), so the fixture closes its own
 * before forking and opens a fresh one afterwards; the children wait on a pipe
 * so that both start together. (The run's admin connection stays open in the
 * parent; the children never touch it and leave with _exit.)
 */
static void run_processes(struct fx *f, int batch)
{
	int gate[2], i, status;
	pid_t pid[2];
	char c;

	app_close(f->db);
	f->db = NULL;
	store_free(f->st);
	f->st = NULL;
	assert_int_equal(pipe(gate), 0);
	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			char err[256];
			close(gate[1]);
			if (read(gate[0], &c, 1) < 0) /* EOF when released */
				_exit(3);
			if (writer_run(f->path, i, batch, err, sizeof err)) {
				fprintf(stderr, "%s\n", err);
				_exit(1);
			}
			_exit(0);
		}
	}
	close(gate[0]);
	close(gate[1]); /* go */
	for (i = 0; i < 2; i++) {
		assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("writer process %d failed (status 0x%x)", i,
				 status);
	}
	f->db = app_open(f->path);
	open_store(f->path, NODE, 0, &f->st);
	f->db->st = &f->st;
	check_gapless(f->db);
}

static void test_concurrent_processes(void **state)
{
	run_processes(*state, 1);
}

static void test_concurrent_processes_batched(void **state)
{
	run_processes(*state, 10);
}

/* ---- bad input ------------------------------------------------------------- */

/*
 * `sql` (with ?1 bound to param when not NULL) must fail as a constraint
 * violation whose message contains `needle`, and leave no trace: no row and no
 * stream counter moved.
 */
static void expect_refused(struct app *db, const char *sql, const char *param,
			   const char *needle)
{
	int64_t rows = q_int(db, "SELECT count(*) FROM tb_0031");
	int64_t ctr = q_int(db, "SELECT coalesce(sum(last_seq), 0)"
				" FROM semq_stream_out");
	struct outcome o;

	app_run(db, sql, param ? 1 : 0, param, NULL, &o);
	if (o.ok)
		fail_msg("accepted: %s [%s]", sql, param ? param : "");
	if (!o.constraint)
		fail_msg("%s: want a constraint error, got: %s", sql, o.msg);
	if (!strstr(o.msg, needle))
		fail_msg("%s: message '%s' does not name '%s'", sql, o.msg,
			 needle);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"), rows);
	assert_int_equal(q_int(db, "SELECT coalesce(sum(last_seq), 0)"
				   " FROM semq_stream_out"),
			 ctr);
}

/* The same statement is accepted; returns the id of its row. */
static int64_t expect_accepted(struct app *db, const char *sql,
			       const char *param)
{
	struct outcome o;

	app_run(db, sql, param ? 1 : 0, param, NULL, &o);
	if (!o.ok)
		fail_msg("refused: %s [%s]: %s", sql, param ? param : "",
			 o.msg);
	return o.id;
}

#define INS_DEST                                                               \
	be_sql("INSERT INTO tb_0031(dest, type, payload) VALUES (?1, 1, x'')", \
	       "INSERT INTO tb_0031(dest, type, payload)"                      \
	       " VALUES (?1, 1, '\\x'::bytea)")
#define INS_KEY                                                                \
	be_sql("INSERT INTO tb_0031(dest, type, msg_key, payload)"             \
	       " VALUES ('S1', 1, ?1, x'')",                                   \
	       "INSERT INTO tb_0031(dest, type, msg_key, payload)"             \
	       " VALUES ('S1', 1, ?1, '\\x'::bytea)")
/* An INSERT of columns (cols) with values (vals) and an empty payload. */
#define INS(cols, vals)                                                        \
	be_sql("INSERT INTO tb_0031(" cols ", payload) VALUES (" vals          \
	       ", x'')",                                                       \
	       "INSERT INTO tb_0031(" cols ", payload) VALUES (" vals          \
	       ", '\\x'::bytea)")

static void test_bad_input_refused(void **state)
{
	struct fx *f = *state;
	char s[300];
	struct row r;
	int64_t id;

	/* dest: space, too long, empty, missing */
	expect_refused(f->db, INS_DEST, "S 1", "tb_0031.dest");
	memset(s, 'd', 65);
	s[65] = '\0';
	expect_refused(f->db, INS_DEST, s, "tb_0031.dest");
	s[64] = '\0';
	expect_accepted(f->db, INS_DEST, s); /* 64 is the limit */
	expect_refused(f->db, INS_DEST, "", "tb_0031.dest");
	expect_refused(f->db, INS_DEST, "S\xc3\xa9", "tb_0031.dest");
	/* a missing value: SQLite names it table.column, PostgreSQL
	 * column "name" of relation "table" */
	expect_refused(f->db, INS("dest, type", "NULL, 1"), NULL,
		       be_sql("tb_0031.dest", "column \"dest\""));
	expect_accepted(f->db, INS_DEST, "S-1.a_b");

	/* type: text (SQLite: on PostgreSQL the column's type refuses it
	 * before any constraint), negative, above uint32 */
	if (!be_pg())
		expect_refused(f->db, INS("dest, type", "'S1', 'abc'"), NULL,
			       "tb_0031.type");
	expect_refused(f->db, INS("dest, type", "'S1', -1"), NULL,
		       "tb_0031.type");
	expect_refused(f->db, INS("dest, type", "'S1', 4294967296"), NULL,
		       "tb_0031.type");
	expect_accepted(f->db, INS("dest, type", "'S1', 4294967295"), NULL);

	/* key: 255 bytes is the limit, counted in bytes */
	memset(s, 'k', 256);
	s[256] = '\0';
	expect_refused(f->db, INS_KEY, s, "tb_0031.msg_key");
	s[255] = '\0';
	expect_accepted(f->db, INS_KEY, s);
	for (int i = 0; i < 128; i++) /* 128 x U+00E9 = 256 bytes */
		memcpy(s + 2 * i, "\xc3\xa9", 2);
	s[256] = '\0';
	expect_refused(f->db, INS_KEY, s, "tb_0031.msg_key");

	/* origin: another node's id is refused, our own is fine */
	expect_refused(f->db, INS("origin, dest, type", "'R2', 'S1', 1"), NULL,
		       "tb_0031.origin");
	expect_accepted(f->db, INS("origin, dest, type", "'R1', 'S1', 1"),
			NULL);

	/* payload: over max_payload (1024 here), or missing */
	expect_refused(f->db,
		       be_sql("INSERT INTO tb_0031(dest, type, payload)"
			      " VALUES ('S1', 1, zeroblob(1025))",
			      "INSERT INTO tb_0031(dest, type, payload)"
			      " VALUES ('S1', 1, decode(repeat('00', 1025),"
			      " 'hex'))"),
		       NULL, "tb_0031.payload");
	expect_accepted(f->db,
			be_sql("INSERT INTO tb_0031(dest, type, payload)"
			       " VALUES ('S1', 1, zeroblob(1024))",
			       "INSERT INTO tb_0031(dest, type, payload)"
			       " VALUES ('S1', 1, decode(repeat('00', 1024),"
			       " 'hex'))"),
			NULL);
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES ('S1', 1, NULL)",
		       NULL, be_sql("tb_0031.payload", "column \"payload\""));

	/* deliver_at: negative */
	expect_refused(f->db, INS("dest, type, deliver_at", "'S1', 1, -1"),
		       NULL, "tb_0031.deliver_at");
	id = expect_accepted(
		f->db, INS("dest, type, deliver_at", "'S1', 1, 1700000000000"),
		NULL);
	get_row(f->db, id, &r);
	assert_int_equal(r.deliver_at, 1700000000000LL);

	/* the refusals consumed no seq: S1 has had 5 accepted messages */
	assert_int_equal(app_insert(f->db, "S1", NULL, &id), 0);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 6);
}

/*
 * Values of the wrong storage class: SQLite's affinity lets text into an
 * INTEGER column, and a text payload's length() counts characters, not bytes.
 * The schema must still refuse what the daemon could not read back.
 * (PostgreSQL's column types refuse such values themselves: skipped there.)
 */
static void test_mistyped_values_refused(void **state)
{
	struct fx *f = *state;
	char s[1400];
	int i;

	if (be_pg()) {
		fprintf(stderr, "test_mistyped_values_refused: about SQLite's "
				"storage classes; PostgreSQL's column types "
				"refuse these values: skipped there\n");
		skip();
	}
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload, deliver_at)"
		       " VALUES ('S1', 1, x'', 'abc')",
		       NULL, "tb_0031.deliver_at");
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload, deliver_at)"
		       " VALUES ('S1', 1, x'', 1.5)",
		       NULL, "tb_0031.deliver_at");
	/* 600 x U+00E9: 600 characters but 1200 bytes > max_payload 1024 */
	for (i = 0; i < 600; i++)
		memcpy(s + 2 * i, "\xc3\xa9", 2);
	s[1200] = '\0';
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES ('S1', 1, ?1)",
		       s, "tb_0031.payload");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_migrate_empty_file, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reopen_is_noop, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_upgrade_from_version_1,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_newer_version_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_node_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_not_a_database_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_bare_insert_filled, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_prev_seq_interleaved_keys,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_streams_count_separately,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_node_columns_reset, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_empty_key_is_null, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_seq_not_reused_after_purge,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_rollback_leaves_no_gap,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_threads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_threads_batched,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_processes,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_concurrent_processes_batched, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input_refused,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_mistyped_values_refused,
						setup_small, teardown),
	};

	return be_url_main(argc, argv, "schema", tests, BE_N(tests), NULL, 0);
}
