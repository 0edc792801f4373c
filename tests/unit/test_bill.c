/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the bill plugin (plugins/bill/bill.c) on both node
 * databases. The test loads the built bill.so with dlopen, as the host does,
 * and calls its entry points directly:
 *
 *   test_bill        against a real SQLite file in a fresh directory under
 *                    $TMPDIR;
 *   test_bill --pg   against PostgreSQL: SEMQ_TEST_PG_URL names a server
 *                    database; the run creates a database of its own there
 *                    (dropped at the end) and gives every test a fresh
 *                    schema in it. Without SEMQ_TEST_PG_URL it says so and
 *                    exits 77 (ctest: skipped).
 *
 * Every handle call runs as the store runs it: in a transaction, inside
 * SAVEPOINT semq_apply, rolled back to the savepoint when the plugin does not
 * return OK, so the tables show exactly what the host would commit. Every
 * test of the plugin's behaviour runs on both back ends; a few PostgreSQL
 * tests cover what only a server has (sessions that reconnect, two
 * transactions importing one bill_no at once).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include <semq/plugin.h>

#define ERRSZ 256 /* the size of the err buffer the host passes */
#define SKIP 77   /* ctest SKIP_RETURN_CODE */

/* One connection to the database under test, of either kind. */
struct conn {
	int kind;      /* SEMQ_DB_SQLITE or SEMQ_DB_PG */
	sqlite3 *lite; /* owned */
	PGconn *pg;    /* owned */
	int notices;   /* PostgreSQL: NOTICEs and WARNINGs the server sent */
};

/* The back end of this run, chosen by main. */
static int g_kind = SEMQ_DB_SQLITE;
static const char *g_url; /* SEMQ_TEST_PG_URL (borrowed from environ) */
static char g_dbname[64]; /* the database this run created */
static PGconn *g_admin;   /* on g_dbname: makes and drops schemas (owned) */
static unsigned g_n_schemas;

/* One call of handle on its own thread, as a second semqd instance. */
struct fx;
struct racer {
	struct fx *f;
	void *h;    /* that instance's plugin handle */
	PGconn *pg; /* that instance's connection */
	const char *origin;
	const char *json;
	int rc;
	char err[ERRSZ];
	int done; /* set (atomically) when handle returned */
};

/*
 * Per test: a fresh database (SQLite: node.db in a new directory;
 * PostgreSQL: a new schema), bill.so loaded and inited on it.
 */
struct fx {
	char dir[1024];
	char dbpath[1100];
	char schema[32];  /* PostgreSQL: this test's schema */
	char schema2[40]; /* PostgreSQL: "other", for a second database */
	struct conn c;    /* the node's connection; closed once a test did */
	struct semq_plugin_tx tx;
	void *dl; /* dlopen handle of bill.so */
	semq_plugin_abi_version_fn abi;
	semq_plugin_init_fn init;
	semq_plugin_handle_fn handle;
	semq_plugin_fini_fn fini;
	void *h; /* the plugin handle; NULL once a test finalised it */
	char err[ERRSZ];
	/* A second instance, for the tests that race two; kept here so that
	 * teardown ends it even when an assertion left the test early. */
	struct conn more[2]; /* its connection and a watcher */
	struct racer r;      /* r.h: its plugin handle */
	pthread_t thread;    /* running r, when `racing` */
	int racing;
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The one of two SQL texts that fits the back end of this run. */
static const char *Q(const char *lite, const char *pg)
{
	return g_kind == SEMQ_DB_PG ? pg : lite;
}

static void count_notice(void *arg, const PGresult *res)
{
	(void)res;
	(*(int *)arg)++;
}

/*
 * A connection to database `dbname` of the server in SEMQ_TEST_PG_URL (NULL:
 * the URL's own) with `schema` first in its search_path. The settings are
 * connection options, so they hold again after PQreset. Caller PQfinishes.
 */
static PGconn *pg_connect(const char *dbname, const char *schema,
			  const char *more)
{
	const char *k[] = {"dbname", "options", "application_name",
			   dbname ? "dbname" : NULL, NULL};
	const char *v[5];
	char opts[256];
	PGconn *pg;

	snprintf(opts, sizeof opts, "-c search_path=%s -c lock_timeout=60s%s",
		 schema, more ? more : "");
	v[0] = g_url;
	v[1] = opts;
	v[2] = "test_bill";
	v[3] = dbname;
	v[4] = NULL;
	pg = PQconnectdbParams(k, v, 1);
	if (PQstatus(pg) != CONNECTION_OK) {
		fprintf(stderr, "test_bill: cannot connect to %s: %s", g_url,
			PQerrorMessage(pg));
		PQfinish(pg);
		return NULL;
	}
	return pg;
}

/* Opens c on `name`: SQLite, the file f->dir/name; PostgreSQL, the schema
 * `name` of this run's database. */
static int conn_open(struct fx *f, struct conn *c, const char *name)
{
	memset(c, 0, sizeof *c);
	c->kind = g_kind;
	if (g_kind == SEMQ_DB_PG) {
		c->pg = pg_connect(g_dbname, name, NULL);
		if (!c->pg)
			return -1;
		PQsetNoticeReceiver(c->pg, count_notice, &c->notices);
		return 0;
	}
	{
		char path[1200];

		snprintf(path, sizeof path, "%s/%s", f->dir, name);
		if (sqlite3_open_v2(path, &c->lite,
				    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
				    NULL) != SQLITE_OK) {
			sqlite3_close(c->lite);
			c->lite = NULL;
			return -1;
		}
	}
	return 0;
}

/* Closes c; 0, or -1 when SQLite refused (a statement was left open). */
static int conn_close(struct conn *c)
{
	int r = 0;

	if (c->lite && sqlite3_close(c->lite) != SQLITE_OK)
		r = -1;
	PQfinish(c->pg);
	c->lite = NULL;
	c->pg = NULL;
	return r;
}

/* The handle a plugin gets for c. Borrowed. */
static void *conn_handle(const struct conn *c)
{
	return c->kind == SEMQ_DB_PG ? (void *)c->pg : (void *)c->lite;
}

/* Runs SQL (several statements allowed); 0 or -1 with the reason printed. */
static int conn_exec(struct conn *c, const char *sql)
{
	if (c->kind == SEMQ_DB_PG) {
		PGresult *res = PQexec(c->pg, sql);
		ExecStatusType st = PQresultStatus(res);
		int r = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0
									: -1;

		if (r)
			fprintf(stderr, "%s: %s", sql,
				PQresultErrorMessage(res));
		PQclear(res);
		return r;
	} else {
		char *msg = NULL;
		int rc = sqlite3_exec(c->lite, sql, NULL, NULL, &msg);

		if (rc != SQLITE_OK)
			fprintf(stderr, "%s: %s\n", sql, msg ? msg : "?");
		sqlite3_free(msg);
		return rc == SQLITE_OK ? 0 : -1;
	}
}

static void exec_ok(struct conn *c, const char *sql)
{
	assert_int_equal(conn_exec(c, sql), 0);
}

/* The rows of a query, every cell as text (NULL for SQL NULL). */
struct rows {
	int n, ncol;
	char **cell; /* owned, n * ncol */
};

static void rows_free(struct rows *r)
{
	int i;

	for (i = 0; i < r->n * r->ncol; i++)
		free(r->cell[i]);
	free(r->cell);
	memset(r, 0, sizeof *r);
}

static const char *cell(const struct rows *r, int row, int col)
{
	assert_in_range(row, 0, r->n - 1);
	assert_in_range(col, 0, r->ncol - 1);
	return r->cell[row * r->ncol + col];
}

static int64_t cell_int(const struct rows *r, int row, int col)
{
	const char *s = cell(r, row, col);

	assert_non_null(s);
	return strtoll(s, NULL, 10);
}

static char *dup_or_null(const char *s)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	assert_non_null(d);
	return d;
}

static void query_rows(struct conn *c, const char *sql, struct rows *out)
{
	memset(out, 0, sizeof *out);
	if (c->kind == SEMQ_DB_PG) {
		PGresult *res = PQexec(c->pg, sql);
		int i, j;

		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			fprintf(stderr, "%s: %s", sql,
				PQresultErrorMessage(res));
		assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
		out->n = PQntuples(res);
		out->ncol = PQnfields(res);
		out->cell = calloc((size_t)(out->n * out->ncol) + 1,
				   sizeof *out->cell);
		assert_non_null(out->cell);
		for (i = 0; i < out->n; i++)
			for (j = 0; j < out->ncol; j++)
				out->cell[i * out->ncol + j] = dup_or_null(
					PQgetisnull(res, i, j)
						? NULL
						: PQgetvalue(res, i, j));
		PQclear(res);
	} else {
		sqlite3_stmt *s = NULL;
		int rc, j;

		if (sqlite3_prepare_v2(c->lite, sql, -1, &s, NULL) != SQLITE_OK)
			fprintf(stderr, "%s: %s\n", sql,
				sqlite3_errmsg(c->lite));
		assert_non_null(s);
		out->ncol = sqlite3_column_count(s);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			char **nc = realloc(out->cell,
					    (size_t)((out->n + 1) * out->ncol) *
						    sizeof *nc);

			assert_non_null(nc);
			out->cell = nc;
			for (j = 0; j < out->ncol; j++)
				out->cell[out->n * out->ncol + j] = dup_or_null(
					(const char *)sqlite3_column_text(s,
									  j));
			out->n++;
		}
		assert_int_equal(rc, SQLITE_DONE);
		sqlite3_finalize(s);
	}
}

/* The one integer a query returns. */
static int64_t query_int(struct conn *c, const char *sql)
{
	struct rows r;
	int64_t v;

	query_rows(c, sql, &r);
	assert_int_equal(r.n, 1);
	v = cell_int(&r, 0, 0);
	rows_free(&r);
	return v;
}

static int64_t n_bills(struct conn *c)
{
	return query_int(c, "SELECT count(*) FROM bill");
}

static int64_t n_lines(struct conn *c)
{
	return query_int(c, "SELECT count(*) FROM bill_line");
}

/* Runs init on c with the given options; the handle goes to *out. */
static int init_on(struct fx *f, struct conn *c,
		   const struct semq_plugin_option *opts, size_t n, void **out)
{
	struct semq_plugin_tx tx = {.db_kind = c->kind, .db = conn_handle(c)};
	struct semq_plugin_init_args a;

	memset(&a, 0, sizeof a);
	a.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a.name = "bill";
	a.node_id = "S1";
	a.options = opts;
	a.n_options = n;
	a.tx = &tx;
	memset(f->err, 0, sizeof f->err);
	return f->init(&a, out, f->err, sizeof f->err);
}

/* PostgreSQL: runs SQL on this run's database as the admin connection. */
static int admin_exec(const char *sql)
{
	struct conn a = {.kind = SEMQ_DB_PG, .pg = g_admin};

	return conn_exec(&a, sql);
}

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof *f);
	char sql[200];

	if (!f)
		return -1;
	*state = f;
	if (g_kind == SEMQ_DB_PG) {
		snprintf(f->schema, sizeof f->schema, "bill_%ld_%u",
			 (long)getpid(), ++g_n_schemas);
		snprintf(f->schema2, sizeof f->schema2, "%s_other", f->schema);
		snprintf(sql, sizeof sql, "CREATE SCHEMA %s", f->schema);
		if (admin_exec(sql) || conn_open(f, &f->c, f->schema))
			return -1;
	} else {
		snprintf(f->dir, sizeof f->dir, "%s/bill-XXXXXX",
			 tmp && tmp[0] ? tmp : "/tmp");
		if (!mkdtemp(f->dir))
			return -1;
		snprintf(f->dbpath, sizeof f->dbpath, "%s/node.db", f->dir);
		if (conn_open(f, &f->c, "node.db"))
			return -1;
	}
	f->tx.db_kind = f->c.kind;
	f->tx.db = conn_handle(&f->c);
	f->dl = dlopen(BILL_SO, RTLD_NOW | RTLD_LOCAL);
	if (!f->dl) {
		fprintf(stderr, "dlopen %s: %s\n", BILL_SO, dlerror());
		return -1;
	}
	f->abi = (semq_plugin_abi_version_fn)dlsym(f->dl,
						   "semq_plugin_abi_version");
	f->init = (semq_plugin_init_fn)dlsym(f->dl, "semq_plugin_init");
	f->handle = (semq_plugin_handle_fn)dlsym(f->dl, "semq_plugin_handle");
	f->fini = (semq_plugin_fini_fn)dlsym(f->dl, "semq_plugin_fini");
	if (!f->abi || !f->init || !f->handle || !f->fini)
		return -1;
	if (init_on(f, &f->c, NULL, 0, &f->h) != SEMQ_PLUGIN_OK) {
		fprintf(stderr, "init: %s\n", f->err);
		return -1;
	}
	return 0;
}

static void rm(const char *dir, const char *name)
{
	char p[1200];

	snprintf(p, sizeof p, "%s/%s", dir, name);
	unlink(p);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char sql[200];
	int r = 0;

	if (f->h)
		f->fini(f->h);
	/* fini finalised every statement, or this close would be BUSY. */
	if (conn_close(&f->c))
		r = -1;
	/* A racing call was waiting on f->c at most, which is gone now. */
	if (f->racing)
		pthread_join(f->thread, NULL);
	if (f->r.h)
		f->fini(f->r.h);
	conn_close(&f->more[0]);
	conn_close(&f->more[1]);
	if (f->dl)
		dlclose(f->dl);
	if (g_kind == SEMQ_DB_PG) {
		snprintf(sql, sizeof sql,
			 "DROP SCHEMA IF EXISTS %s CASCADE; "
			 "DROP SCHEMA IF EXISTS %s CASCADE",
			 f->schema, f->schema2);
		if (f->schema[0] && admin_exec(sql))
			r = -1;
	} else {
		rm(f->dir, "node.db");
		rm(f->dir, "node.db-journal");
		rm(f->dir, "other.db");
		rm(f->dir, "other.db-journal");
		rmdir(f->dir);
	}
	free(f);
	return r;
}

/* Calls handle on c without a transaction or savepoint around it. */
static int call_raw(struct fx *f, struct conn *c, const char *origin,
		    const char *dest, uint64_t seq, uint32_t type,
		    const void *payload, size_t len)
{
	struct semq_plugin_tx tx = {.db_kind = c->kind, .db = conn_handle(c)};
	struct semq_plugin_msg m;

	memset(&m, 0, sizeof m);
	m.origin = origin;
	m.dest = dest;
	m.seq = seq;
	m.type = type;
	m.created_at = now_ms();
	m.payload = payload;
	m.payload_len = len;
	memset(f->err, 0, sizeof f->err);
	return f->handle(f->h, &m, &tx, f->err, sizeof f->err);
}

/* Calls handle as the store does: in a transaction, inside a savepoint that
 * is rolled back when the plugin fails, then committed. */
static int call_on(struct fx *f, struct conn *c, const char *origin,
		   const char *dest, uint64_t seq, uint32_t type,
		   const void *payload, size_t len)
{
	int rc;

	exec_ok(c, "BEGIN");
	exec_ok(c, "SAVEPOINT semq_apply");
	rc = call_raw(f, c, origin, dest, seq, type, payload, len);
	if (rc != SEMQ_PLUGIN_OK)
		exec_ok(c, "ROLLBACK TO semq_apply");
	exec_ok(c, "RELEASE semq_apply");
	exec_ok(c, "COMMIT");
	return rc;
}

/* A bill from R1 to S1 with sequence number seq. */
static int call(struct fx *f, uint64_t seq, const char *json)
{
	return call_on(f, &f->c, "R1", "S1", seq, 2800, json, strlen(json));
}

/* Checks that json is refused PERMANENT with exactly `want`, writing nothing. */
static void refused(struct fx *f, const char *json, const char *want)
{
	int rc = call(f, 1, json);

	if (rc != SEMQ_PLUGIN_PERMANENT || strcmp(f->err, want) != 0)
		fprintf(stderr, "payload %s\n  gave %d '%s'\n  want '%s'\n",
			json, rc, f->err, want);
	assert_int_equal(rc, SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, want);
	assert_int_equal(n_bills(&f->c), 0);
	assert_int_equal(n_lines(&f->c), 0);
}

/* ---- the ABI and init ---------------------------------------------------- */

static void test_abi_version(void **state)
{
	struct fx *f = *state;

	assert_int_equal(f->abi(), SEMQ_PLUGIN_ABI_VERSION);
}

static void test_init_creates_tables(void **state)
{
	struct fx *f = *state;
	struct conn *c = &f->c;
	void *h2 = NULL;

	assert_int_equal(
		query_int(c, Q("SELECT count(*) FROM pragma_table_info('bill')"
			       " WHERE name IN ('id', 'bill_no', 'shop', "
			       "'currency', 'issued_at', 'total_minor', "
			       "'origin', 'dest', 'seq', 'imported_at')",
			       "SELECT count(*) FROM information_schema.columns"
			       " WHERE table_schema = current_schema() AND "
			       "table_name = 'bill' AND column_name IN ('id', "
			       "'bill_no', 'shop', 'currency', 'issued_at', "
			       "'total_minor', 'origin', 'dest', 'seq', "
			       "'imported_at')")),
		10);
	assert_int_equal(
		query_int(c, Q("SELECT count(*) FROM pragma_table_info('bill')",
			       "SELECT count(*) FROM information_schema.columns"
			       " WHERE table_schema = current_schema() AND "
			       "table_name = 'bill'")),
		10);
	assert_int_equal(
		query_int(c, Q("SELECT count(*) FROM "
			       "pragma_table_info('bill_line') WHERE name IN "
			       "('bill_id', 'line_no', 'item', 'qty', "
			       "'price_minor')",
			       "SELECT count(*) FROM information_schema.columns"
			       " WHERE table_schema = current_schema() AND "
			       "table_name = 'bill_line' AND column_name IN "
			       "('bill_id', 'line_no', 'item', 'qty', "
			       "'price_minor')")),
		5);
	assert_int_equal(
		query_int(c, Q("SELECT count(*) FROM "
			       "pragma_table_info('bill_line')",
			       "SELECT count(*) FROM information_schema.columns"
			       " WHERE table_schema = current_schema() AND "
			       "table_name = 'bill_line'")),
		5);
	/* bill_no is unique, and it is the only unique key besides the
	 * primary key. */
	assert_int_equal(
		query_int(c,
			  Q("SELECT count(*) FROM pragma_index_list('bill') l,"
			    " pragma_index_info(l.name) i WHERE "
			    "l.\"unique\" = 1 AND i.name = 'bill_no'",
			    "SELECT count(*) FROM pg_index i JOIN pg_attribute"
			    " a ON a.attrelid = i.indrelid AND a.attnum = "
			    "ANY(i.indkey) WHERE i.indrelid = 'bill'::regclass"
			    " AND i.indisunique AND NOT i.indisprimary AND "
			    "a.attname = 'bill_no'")),
		1);
	assert_int_equal(
		query_int(c, Q("SELECT count(*) FROM pragma_index_list('bill') "
			       "WHERE \"unique\" = 1",
			       "SELECT count(*) FROM pg_index WHERE indrelid = "
			       "'bill'::regclass AND indisunique AND NOT "
			       "indisprimary")),
		1);
	if (g_kind == SEMQ_DB_PG) {
		/* Integers are BIGINT, text is TEXT. */
		assert_int_equal(
			query_int(c,
				  "SELECT count(*) FROM "
				  "information_schema.columns WHERE "
				  "table_schema = current_schema() AND "
				  "data_type = 'bigint' AND ((table_name = "
				  "'bill' AND column_name IN ('id', "
				  "'total_minor', 'seq', 'imported_at')) OR "
				  "(table_name = 'bill_line' AND column_name "
				  "IN ('bill_id', 'line_no', 'qty', "
				  "'price_minor')))"),
			8);
		assert_int_equal(
			query_int(c, "SELECT count(*) FROM "
				     "information_schema.columns WHERE "
				     "table_schema = current_schema() AND "
				     "data_type = 'text' AND table_name IN "
				     "('bill', 'bill_line')"),
			7);
	}
	/* A second init on the same database (a restart) finds them. */
	assert_int_equal(init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	assert_non_null(h2);
	f->fini(h2);
	/* Neither init made the server send a NOTICE (libpq would print it on
	 * the node's stderr). */
	assert_int_equal(c->notices, 0);
}

static void test_unknown_option_refused(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_option o = {"max_line", "5", "node.ini:7"};
	void *h2 = NULL;

	assert_int_equal(init_on(f, &f->c, &o, 1, &h2), SEMQ_PLUGIN_PERMANENT);
	assert_null(h2);
	assert_string_equal(f->err, "bill: node.ini:7: unknown option "
				    "'max_line' (max_lines)");
}

static void test_bad_max_lines_refused(void **state)
{
	static const char *const bad[] = {
		"0", "-1", "abc", "10x", "", "1000001", "99999999999999999999"};
	struct fx *f = *state;
	struct semq_plugin_option two[2] = {{"max_lines", "5", "node.ini:3"},
					    {"max_lines", "6", "node.ini:4"}};
	char want[ERRSZ];
	size_t i;

	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct semq_plugin_option o = {"max_lines", bad[i],
					       "node.ini:9"};
		void *h2 = NULL;

		assert_int_equal(init_on(f, &f->c, &o, 1, &h2),
				 SEMQ_PLUGIN_PERMANENT);
		assert_null(h2);
		snprintf(want, sizeof want,
			 "bill: node.ini:9: max_lines '%s' is not a whole "
			 "number from 1 to 1000000",
			 bad[i]);
		assert_string_equal(f->err, want);
	}
	{
		void *h2 = NULL;

		assert_int_equal(init_on(f, &f->c, two, 2, &h2),
				 SEMQ_PLUGIN_PERMANENT);
		assert_null(h2);
		assert_string_equal(f->err,
				    "bill: node.ini:4: max_lines given twice");
	}
}

static void test_max_lines_option(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_option o = {"max_lines", "2", "node.ini:5"};
	void *h2 = NULL;

	assert_int_equal(init_on(f, &f->c, &o, 1, &h2), SEMQ_PLUGIN_OK);
	f->fini(f->h);
	f->h = h2;
	assert_int_equal(call(f, 1,
			      "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
			      "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
			      "{\"item\":\"B\",\"qty\":1,\"price\":\"1\"}]}"),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 2,
			      "{\"bill_no\":\"B-2\",\"shop\":\"R1\",\"lines\":"
			      "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
			      "{\"item\":\"B\",\"qty\":1,\"price\":\"1\"},"
			      "{\"item\":\"C\",\"qty\":1,\"price\":\"1\"}]}"),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: lines has 3 entries, more than max_lines 2");
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 2);
}

static void test_bad_call_is_retry(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_msg m;
	struct semq_plugin_tx none = {0};

	memset(&m, 0, sizeof m);
	m.type = 2800;
	assert_int_equal(f->handle(NULL, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without handle or message");
	assert_int_equal(f->handle(f->h, NULL, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without handle or message");
	assert_int_equal(f->handle(f->h, &m, NULL, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without a transaction");
	assert_int_equal(f->handle(f->h, &m, &none, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without a transaction");
	m.payload_len = 3;
	assert_int_equal(f->handle(f->h, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err,
			    "bill: called with 3 payload bytes but no payload");
}

/* A database kind the plugin does not know is refused at init and, should a
 * host still call, PERMANENT: retrying cannot help. The connection handed
 * over is not touched. */
static void test_unknown_db_kind_refused(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_tx odd = {.db_kind = 7, .db = f->tx.db};
	struct semq_plugin_init_args a;
	struct semq_plugin_msg m;
	const char *json = "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
			   "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}";
	void *h2 = NULL;

	memset(&a, 0, sizeof a);
	a.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a.name = "bill";
	a.node_id = "S1";
	a.tx = &odd;
	assert_int_equal(f->init(&a, &h2, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_null(h2);
	assert_string_equal(f->err, "bill: unknown database kind 7 (1 SQLite, "
				    "2 PostgreSQL)");
	a.tx = NULL;
	assert_int_equal(f->init(&a, &h2, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_null(h2);
	assert_string_equal(f->err, "bill: init called without a database");

	memset(&m, 0, sizeof m);
	m.origin = "R1";
	m.dest = "S1";
	m.seq = 1;
	m.type = 2800;
	m.payload = (const uint8_t *)json;
	m.payload_len = strlen(json);
	assert_int_equal(f->handle(f->h, &m, &odd, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: unknown database kind 7 (1 SQLite, "
				    "2 PostgreSQL)");
	assert_int_equal(n_bills(&f->c), 0);
	/* The same message on the right kind is imported. */
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 1);
}

/* ---- good bills ---------------------------------------------------------- */

static void test_good_bill_imported(void **state)
{
	struct fx *f = *state;
	const char *json = "{\"bill_no\":\"B-2026-0001\",\"shop\":\"R1\","
			   "\"currency\":\"EUR\","
			   "\"issued_at\":\"2026-11-22T10:00:00Z\","
			   "\"lines\":[{\"item\":\"SKU-1\",\"qty\":2,"
			   "\"price\":\"3.50\"}]}";
	int64_t before = now_ms(), after;
	struct rows r;

	assert_int_equal(
		call_on(f, &f->c, "R1", "S1", 7, 2800, json, strlen(json)),
		SEMQ_PLUGIN_OK);
	after = now_ms();
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 1);
	query_rows(&f->c,
		   "SELECT bill_no, shop, currency, issued_at, total_minor, "
		   "origin, dest, seq, imported_at, id FROM bill",
		   &r);
	assert_int_equal(r.n, 1);
	assert_string_equal(cell(&r, 0, 0), "B-2026-0001");
	assert_string_equal(cell(&r, 0, 1), "R1");
	assert_string_equal(cell(&r, 0, 2), "EUR");
	assert_string_equal(cell(&r, 0, 3), "2026-11-22T10:00:00Z");
	assert_int_equal(cell_int(&r, 0, 4), 700);
	assert_string_equal(cell(&r, 0, 5), "R1");
	assert_string_equal(cell(&r, 0, 6), "S1");
	assert_int_equal(cell_int(&r, 0, 7), 7);
	assert_in_range(cell_int(&r, 0, 8), before, after);
	assert_non_null(cell(&r, 0, 9));
	rows_free(&r);

	query_rows(&f->c,
		   "SELECT l.line_no, l.item, l.qty, l.price_minor "
		   "FROM bill_line l JOIN bill b ON b.id = l.bill_id",
		   &r);
	assert_int_equal(r.n, 1);
	assert_int_equal(cell_int(&r, 0, 0), 1);
	assert_string_equal(cell(&r, 0, 1), "SKU-1");
	assert_int_equal(cell_int(&r, 0, 2), 2);
	assert_int_equal(cell_int(&r, 0, 3), 350);
	rows_free(&r);
}

static void test_several_lines(void **state)
{
	static const struct {
		const char *item;
		int64_t qty, price;
	} want[] = {
		{"SKU-1", 2, 350},    {"SKU-2", 1, 350}, {"SKU-3", 3, 300},
		{"SKU-4", 1, 200},    {"SKU-5", 4, 125}, {"SKU-6", 10, 7},
		{"Käse 🧀", 1, 0}, {"SKU-8", 5, 10},  {"SKU-9", 1, 1999},
	};
	struct fx *f = *state;
	const char *json =
		"{\"lines\":["
		"{\"item\":\"SKU-1\",\"qty\":2,\"price\":\"3.50\"},"
		"{\"item\":\"SKU-2\",\"qty\":1,\"price\":\"3.5\"},"
		"{\"item\":\"SKU-3\",\"qty\":3.0,\"price\":\"3\"},"
		"{\"price\":2,\"item\":\"SKU-4\",\"qty\":1},"
		"{\"item\":\"SKU-5\",\"qty\":4,\"price\":1.25},"
		"{\"item\":\"SKU-6\",\"qty\":10,\"price\":\"0.07\"},"
		"{\"item\":\"K\\u00e4se \xf0\x9f\xa7\x80\",\"qty\":1,"
		"\"price\":\"0\"},"
		"{\"item\":\"SKU-8\",\"qty\":5,\"price\":0.1},"
		"{\"item\":\"SKU-9\",\"qty\":1,\"price\":19.99}],"
		"\"shop\":\"R2\",\"bill_no\":\"B-9\",\"currency\":\"EUR\"}";
	struct rows r;
	int64_t total = 0;
	size_t i;

	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 9);
	query_rows(&f->c,
		   "SELECT line_no, item, qty, price_minor FROM bill_line "
		   "ORDER BY line_no",
		   &r);
	assert_int_equal(r.n, sizeof want / sizeof *want);
	for (i = 0; i < sizeof want / sizeof *want; i++) {
		assert_int_equal(cell_int(&r, (int)i, 0), (int64_t)i + 1);
		assert_string_equal(cell(&r, (int)i, 1), want[i].item);
		assert_int_equal(cell_int(&r, (int)i, 2), want[i].qty);
		assert_int_equal(cell_int(&r, (int)i, 3), want[i].price);
		total += want[i].qty * want[i].price;
	}
	rows_free(&r);
	assert_int_equal(total,
			 700 + 350 + 900 + 200 + 500 + 70 + 0 + 50 + 1999);
	assert_int_equal(query_int(&f->c, "SELECT total_minor FROM bill"),
			 total);
}

static void test_optional_fields_absent_or_null(void **state)
{
	struct fx *f = *state;

	assert_int_equal(
		call(f, 1,
		     "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
		     "[{\"item\":\"A\",\"qty\":1,\"price\":\"1.00\"}]}"),
		SEMQ_PLUGIN_OK);
	assert_int_equal(
		call(f, 2,
		     "{\"bill_no\":\"B-2\",\"shop\":\"R1\","
		     "\"currency\":null,\"issued_at\":null,\"lines\":"
		     "[{\"item\":\"A\",\"qty\":1,\"price\":\"1.00\"}]}"),
		SEMQ_PLUGIN_OK);
	assert_int_equal(query_int(&f->c, "SELECT count(*) FROM bill WHERE "
					  "currency IS NULL AND issued_at IS "
					  "NULL AND total_minor = 100"),
			 2);
}

/* issued_at: RFC 3339 with fractions, offsets, leap days and leap seconds
 * is taken as given; anything else is refused. */
static void test_issued_at_forms(void **state)
{
	static const char *const good[] = {
		"2026-11-22T10:00:00Z", "2024-02-29T23:59:60.123+01:00",
		"2026-11-22t10:00:00z", "2000-02-29T00:00:00-12:30"};
	static const char *const bad[] = {
		"2026-11-22 10:00:00Z",     "2026-13-01T00:00:00Z",
		"2026-11-22T10:00:00+1:00", "2100-02-29T00:00:00Z",
		"2026-11-22T24:00:00Z",     "2026-11-22T10:00:00",
		"2026-11-22T10:00:00.Z",    "2026-11-22T10:00:00Zx"};
	struct fx *f = *state;
	char json[512], want[ERRSZ];
	size_t i;

	for (i = 0; i < sizeof good / sizeof *good; i++) {
		snprintf(json, sizeof json,
			 "{\"bill_no\":\"B-%zu\",\"shop\":\"R1\","
			 "\"issued_at\":\"%s\",\"lines\":"
			 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
			 i, good[i]);
		assert_int_equal(call(f, i + 1, json), SEMQ_PLUGIN_OK);
	}
	assert_int_equal(
		query_int(&f->c, "SELECT count(*) FROM bill WHERE issued_at = "
				 "'2024-02-29T23:59:60.123+01:00'"),
		1);
	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		snprintf(json, sizeof json,
			 "{\"bill_no\":\"X-%zu\",\"shop\":\"R1\","
			 "\"issued_at\":\"%s\",\"lines\":"
			 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
			 i, bad[i]);
		snprintf(want, sizeof want,
			 "bill: issued_at '%s' is not an RFC 3339 time like "
			 "'2026-11-22T10:00:00Z'",
			 bad[i]);
		assert_int_equal(call(f, 100 + i, json), SEMQ_PLUGIN_PERMANENT);
		assert_string_equal(f->err, want);
	}
	assert_int_equal(n_bills(&f->c), sizeof good / sizeof *good);
}

static void test_text_length_boundary(void **state)
{
	struct fx *f = *state;
	char json[1024], no[300];
	size_t i;

	/* 64 two-byte characters are 64 characters, not 128. */
	no[0] = '\0';
	for (i = 0; i < 64; i++)
		strcat(no, "\xc3\xa9");
	snprintf(json, sizeof json,
		 "{\"bill_no\":\"%s\",\"shop\":\"R1\",\"lines\":"
		 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
		 no);
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(query_int(&f->c, "SELECT length(bill_no) FROM bill"),
			 64);
	strcat(no, "e");
	snprintf(json, sizeof json,
		 "{\"bill_no\":\"%s\",\"shop\":\"R1\",\"lines\":"
		 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
		 no);
	assert_int_equal(call(f, 2, json), SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no is longer than 64 characters (65)");
	assert_int_equal(n_bills(&f->c), 1);
}

static void test_price_limit(void **state)
{
	struct fx *f = *state;

	assert_int_equal(call(f, 1,
			      "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
			      "[{\"item\":\"A\",\"qty\":1,"
			      "\"price\":\"9999999999999.99\"}]}"),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(query_int(&f->c, "SELECT price_minor FROM bill_line"),
			 INT64_C(999999999999999));
}

/* ---- refused documents --------------------------------------------------- */

#define L1 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]"
#define HEAD "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
/* A bill whose only line is {ITEM_QTY_PRICE}. */
#define LINE(x) HEAD "[{" x "}]}"
#define S65 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

static const struct {
	const char *json, *err;
} malformed[] = {
	/* not JSON at all, or not an object */
	{"{bill", "bill: payload is not JSON: string or '}' expected near "
		  "'bill' at line 1 column 5"},
	{"not json", "bill: payload is not JSON: invalid token near 'not' at "
		     "line 1 column 3"},
	{HEAD L1 "} trailing", "bill: payload is not JSON: end of file "
			       "expected near 'trailing' at line 1 column "
			       "81"},
	{"{\"bill_no\":\"A\",\"bill_no\":\"B\"}",
	 "bill: payload is not JSON: duplicate object key near '\"bill_no\"' "
	 "at line 1 column 24"},
	{"[1,2]", "bill: payload is not a JSON object: [1,2]"},
	{"\"B-1\"", "bill: payload is not a JSON object: \"B-1\""},
	{"42", "bill: payload is not a JSON object: 42"},
	{"null", "bill: payload is not a JSON object: null"},
	/* the bill's own fields */
	{"{\"shop\":\"R1\",\"lines\":" L1 "}", "bill: bill_no is missing"},
	{"{\"bill_no\":\"B-1\",\"lines\":" L1 "}", "bill: shop is missing"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\"}", "bill: lines is missing"},
	{"{\"bill_no\":\"\",\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no is empty"},
	{"{\"bill_no\":12,\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no: 12 is not a string"},
	{"{\"bill_no\":null,\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no: null is not a string"},
	{"{\"bill_no\":\"B-1\",\"shop\":[\"R1\"],\"lines\":" L1 "}",
	 "bill: shop: [\"R1\"] is not a string"},
	{"{\"bill_no\":\"" S65 "\",\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no is longer than 64 characters (65)"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"" S65 "\",\"lines\":" L1 "}",
	 "bill: shop is longer than 64 characters (65)"},
	{"{\"bill_no\":\"B-1 \",\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no 'B-1 ' has leading or trailing blanks"},
	{"{\"bill_no\":\"B\\n1\",\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no contains a control character"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"totl\":5,\"lines\":" L1 "}",
	 "bill: unknown key 'totl' (bill_no, shop, currency, issued_at, "
	 "lines)"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"currency\":\"euro\","
	 "\"lines\":" L1 "}",
	 "bill: currency 'euro' is not a three-letter code like 'EUR'"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"currency\":978,"
	 "\"lines\":" L1 "}",
	 "bill: currency: 978 is not a string"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"issued_at\":\"2026-02-29T10:"
	 "00:00Z\",\"lines\":" L1 "}",
	 "bill: issued_at '2026-02-29T10:00:00Z' is not an RFC 3339 time like "
	 "'2026-11-22T10:00:00Z'"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"issued_at\":\"yesterday\","
	 "\"lines\":" L1 "}",
	 "bill: issued_at 'yesterday' is not an RFC 3339 time like "
	 "'2026-11-22T10:00:00Z'"},
	/* lines */
	{HEAD "[]}", "bill: lines is empty"},
	{HEAD "{\"item\":\"A\"}}",
	 "bill: lines: {\"item\":\"A\"} is not an array"},
	{HEAD "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},7]}",
	 "bill: lines[1]: 7 is not an object"},
	{LINE("\"qty\":1,\"price\":\"1\""), "bill: lines[0].item is missing"},
	{LINE("\"item\":\"A\",\"price\":\"1\""),
	 "bill: lines[0].qty is missing"},
	{LINE("\"item\":\"A\",\"qty\":1"), "bill: lines[0].price is missing"},
	{LINE("\"item\":\"A\",\"qty\":1,\"prcie\":\"1\""),
	 "bill: lines[0]: unknown key 'prcie' (item, qty, price)"},
	{LINE("\"item\":\"" S65 "\",\"qty\":1,\"price\":\"1\""),
	 "bill: lines[0].item is longer than 64 characters (65)"},
	{LINE("\"item\":5,\"qty\":1,\"price\":\"1\""),
	 "bill: lines[0].item: 5 is not a string"},
	{HEAD "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
	      "{\"item\":\"B\",\"qty\":1,\"price\":\"1\"},"
	      "{\"item\":\"C\",\"qty\":-1,\"price\":\"1\"}]}",
	 "bill: lines[2].qty: -1 is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":0,\"price\":\"1\""),
	 "bill: lines[0].qty: 0 is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":1.5,\"price\":\"1\""),
	 "bill: lines[0].qty: 1.5 is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":\"2\",\"price\":\"1\""),
	 "bill: lines[0].qty: \"2\" is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":null,\"price\":\"1\""),
	 "bill: lines[0].qty: null is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":1e300,\"price\":\"1\""),
	 "bill: lines[0].qty: 1e300 is too large"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"abc\""),
	 "bill: lines[0].price: \"abc\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"\""),
	 "bill: lines[0].price: \"\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"3.\""),
	 "bill: lines[0].price: \"3.\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\".5\""),
	 "bill: lines[0].price: \".5\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"1e2\""),
	 "bill: lines[0].price: \"1e2\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\" 1\""),
	 "bill: lines[0].price: \" 1\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":true"),
	 "bill: lines[0].price: true is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"1.234567\""),
	 "bill: lines[0].price: \"1.234567\" has more than 2 decimal places"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":1.234"),
	 "bill: lines[0].price: 1.234 has more than 2 decimal places"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"-1.00\""),
	 "bill: lines[0].price: \"-1.00\" is negative"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":-1"),
	 "bill: lines[0].price: -1 is negative"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":-0.5"),
	 "bill: lines[0].price: -0.5 is negative"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"10000000000000\""),
	 "bill: lines[0].price: \"10000000000000\" is larger than "
	 "9999999999999.99"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":10000000000000"),
	 "bill: lines[0].price: 10000000000000 is larger than "
	 "9999999999999.99"},
	/* amounts that do not fit */
	{LINE("\"item\":\"A\",\"qty\":9223372036854775807,\"price\":\"2\""),
	 "bill: lines[0]: qty 9223372036854775807 times price 200 overflows "
	 "a 64-bit amount"},
	{HEAD "[{\"item\":\"A\",\"qty\":4611686018427387904,"
	      "\"price\":\"0.01\"},"
	      "{\"item\":\"B\",\"qty\":4611686018427387904,"
	      "\"price\":\"0.01\"}]}",
	 "bill: the total overflows a 64-bit amount at lines[1]"},
};

static void test_malformed_refused(void **state)
{
	struct fx *f = *state;
	size_t i;

	for (i = 0; i < sizeof malformed / sizeof *malformed; i++)
		refused(f, malformed[i].json, malformed[i].err);
}

static void test_wrong_type_refused(void **state)
{
	struct fx *f = *state;
	const char *json = HEAD L1 "}";

	assert_int_equal(
		call_on(f, &f->c, "R1", "S1", 1, 2801, json, strlen(json)),
		SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: type 2801 is not a bill (2800)");
	assert_int_equal(n_bills(&f->c), 0);
}

static void test_empty_payload_refused(void **state)
{
	struct fx *f = *state;

	assert_int_equal(call_on(f, &f->c, "R1", "S1", 1, 2800, NULL, 0),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: payload is empty");
	assert_int_equal(n_bills(&f->c), 0);
}

/* Bytes that are not UTF-8 are refused, and the message itself stays UTF-8. */
static void test_not_utf8_refused(void **state)
{
	struct fx *f = *state;
	static const char json[] = "{\"bill_no\":\"B\xff-1\",\"shop\":\"R1\"}";

	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: payload is not JSON: unable to "
				    "decode byte 0xff near '\"B' at line 1 "
				    "column 13");
	assert_int_equal(n_bills(&f->c), 0);
}

/* ---- one bill number, several messages ----------------------------------- */

static void test_bill_no_from_another_message(void **state)
{
	struct fx *f = *state;
	const char *a = HEAD L1 "}";
	const char *b = "{\"bill_no\":\"B-1\",\"shop\":\"R2\",\"lines\":"
			"[{\"item\":\"Z\",\"qty\":9,\"price\":\"9\"}]}";

	assert_int_equal(call_on(f, &f->c, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	/* Another sequence number of the same stream. */
	assert_int_equal(call_on(f, &f->c, "R1", "S1", 4, 2800, b, strlen(b)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no 'B-1' was already imported from "
			    "R1/S1/3");
	/* Another stream with the same sequence number. */
	assert_int_equal(call_on(f, &f->c, "R2", "S1", 3, 2800, b, strlen(b)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no 'B-1' was already imported from "
			    "R1/S1/3");
	/* The first import is untouched. */
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 1);
	assert_int_equal(query_int(&f->c, "SELECT count(*) FROM bill WHERE "
					  "shop = 'R1' AND total_minor = 100 "
					  "AND seq = 3"),
			 1);
}

static void test_same_message_again_is_ok(void **state)
{
	struct fx *f = *state;
	const char *a = HEAD L1 "}";

	assert_int_equal(call_on(f, &f->c, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call_on(f, &f->c, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	assert_string_equal(f->err, "");
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 1);
}

/* ---- database errors ----------------------------------------------------- */

/* A write that fails part way is RETRY, and the host's rollback of the
 * savepoint leaves no row of the bill behind. */
static void test_db_error_partial_rolled_back(void **state)
{
	struct fx *f = *state;
	const char *json = HEAD "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
				"{\"item\":\"BOOM\",\"qty\":1,\"price\":\"1\"},"
				"{\"item\":\"C\",\"qty\":1,\"price\":\"1\"}]}";
	int rc;

	exec_ok(&f->c,
		Q("CREATE TRIGGER boom BEFORE INSERT ON bill_line "
		  "WHEN NEW.item = 'BOOM' BEGIN "
		  "SELECT RAISE(ABORT, 'no BOOM here'); END",
		  "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS "
		  "$$ BEGIN IF NEW.item = 'BOOM' THEN "
		  "RAISE EXCEPTION 'no BOOM here'; END IF; RETURN NEW; END $$; "
		  "CREATE TRIGGER boom BEFORE INSERT ON bill_line "
		  "FOR EACH ROW EXECUTE FUNCTION boom()"));
	exec_ok(&f->c, "BEGIN");
	exec_ok(&f->c, "SAVEPOINT semq_apply");
	rc = call_raw(f, &f->c, "R1", "S1", 1, 2800, json, strlen(json));
	assert_int_equal(rc, SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: insert into bill_line failed at "
				    "lines[1]: no BOOM here");
	if (g_kind == SEMQ_DB_PG) {
		/* PostgreSQL aborted the transaction at the failed INSERT:
		 * nothing can be read in it until the host rolls back. */
		assert_int_equal(PQtransactionStatus(f->c.pg), PQTRANS_INERROR);
	} else {
		/* The plugin had written the bill and its first line... */
		assert_int_equal(n_bills(&f->c), 1);
		assert_int_equal(n_lines(&f->c), 1);
	}
	exec_ok(&f->c, "ROLLBACK TO semq_apply");
	exec_ok(&f->c, "RELEASE semq_apply");
	/* ...and the host's rollback took them away. */
	assert_int_equal(n_bills(&f->c), 0);
	assert_int_equal(n_lines(&f->c), 0);
	exec_ok(&f->c, "COMMIT");

	/* Redone once the cause is gone, it imports the whole bill. */
	exec_ok(&f->c,
		Q("DROP TRIGGER boom", "DROP TRIGGER boom ON bill_line"));
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 3);
}

/* A table locked by another connection past the lock wait is RETRY. */
static void test_busy_is_retry(void **state)
{
	struct fx *f = *state;
	struct conn other;
	const char *first =
		"{\"bill_no\":\"B-0\",\"shop\":\"R1\",\"lines\":" L1 "}";
	const char *json = HEAD L1 "}";

	/* A first bill, so that the statements are prepared: the wait below
	 * is the INSERT's. */
	assert_int_equal(call(f, 1, first), SEMQ_PLUGIN_OK);
	assert_int_equal(
		conn_open(f, &other,
			  g_kind == SEMQ_DB_PG ? f->schema : "node.db"),
		0);
	if (g_kind == SEMQ_DB_PG) {
		exec_ok(&f->c, "SET lock_timeout = '200ms'");
		exec_ok(&other, "BEGIN; LOCK TABLE bill IN EXCLUSIVE MODE");
	} else {
		exec_ok(&other, "BEGIN IMMEDIATE");
	}
	assert_int_equal(call(f, 2, json), SEMQ_PLUGIN_RETRY);
	assert_string_equal(
		f->err, Q("bill: insert into bill failed: database is locked",
			  "bill: insert into bill failed: canceling statement "
			  "due to lock timeout"));
	exec_ok(&other, "ROLLBACK");
	assert_int_equal(conn_close(&other), 0);
	assert_int_equal(call(f, 2, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 2);
}

static void test_missing_table_is_retry(void **state)
{
	struct fx *f = *state;

	exec_ok(&f->c, "DROP TABLE bill_line");
	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err,
			    Q("bill: cannot prepare the bill_line insert: no "
			      "such table: bill_line",
			      "bill: cannot prepare the bill_line insert: "
			      "relation \"bill_line\" does not exist"));
	assert_int_equal(n_bills(&f->c), 0);
}

/* Statements follow the connection: moving to another one finalises those
 * on the first (SQLite: else closing it would be BUSY; PostgreSQL: the other
 * session has statements of its own), and fini finalises the rest (checked
 * by the close in teardown). Going back to the first works too. */
static void test_other_connection(void **state)
{
	struct fx *f = *state;
	const char *b2 =
		"{\"bill_no\":\"B-2\",\"shop\":\"R1\",\"lines\":" L1 "}";
	struct conn other;
	char sql[100];
	void *h2 = NULL;

	if (g_kind == SEMQ_DB_PG) {
		snprintf(sql, sizeof sql, "CREATE SCHEMA %s", f->schema2);
		assert_int_equal(admin_exec(sql), 0);
	}
	assert_int_equal(
		conn_open(f, &other,
			  g_kind == SEMQ_DB_PG ? f->schema2 : "other.db"),
		0);
	assert_int_equal(init_on(f, &other, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);

	assert_int_equal(call_on(f, &other, "R1", "S1", 1, 2800, HEAD L1 "}",
				 strlen(HEAD L1 "}")),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_OK);
	assert_int_equal(
		call_on(f, &other, "R1", "S1", 2, 2800, b2, strlen(b2)),
		SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 2, b2), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&other), 2);
	assert_int_equal(n_bills(&f->c), 2);
	assert_int_equal(conn_close(&other), 0);
}

static void test_fini_finalises(void **state)
{
	struct fx *f = *state;

	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_OK);
	if (g_kind == SEMQ_DB_PG) {
		/* fini never touches a connection: the host may have closed
		 * it first (ASan would catch a use after PQfinish). */
		assert_int_equal(conn_close(&f->c), 0);
		f->fini(f->h);
		f->h = NULL;
	} else {
		f->fini(f->h);
		f->h = NULL;
		assert_int_equal(conn_close(&f->c), 0);
	}
	f->fini(NULL); /* accepted and does nothing */
}

/* ---- PostgreSQL only ----------------------------------------------------- */

/*
 * The server ends the session (a restart, a failover): the call is RETRY with
 * a one-line reason, and so is the next one on the dead connection. After
 * PQreset (what the host's reconnect does: same PGconn *, new session) the
 * plugin prepares its statements again and imports.
 */
static void test_pg_session_lost_then_reset(void **state)
{
	struct fx *f = *state;
	const char *b2 =
		"{\"bill_no\":\"B-2\",\"shop\":\"R1\",\"lines\":" L1 "}";
	const char *before = "bill: cannot look up bill_no: ";
	char sql[120];
	int pid;

	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_OK);
	pid = PQbackendPID(f->c.pg);
	snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, 10000)",
		 pid);
	assert_int_equal(admin_exec(sql), 0);

	assert_int_equal(
		call_raw(f, &f->c, "R1", "S1", 2, 2800, b2, strlen(b2)),
		SEMQ_PLUGIN_RETRY);
	if (strncmp(f->err, before, strlen(before)) != 0)
		fprintf(stderr, "got '%s'\n", f->err);
	assert_memory_equal(f->err, before, strlen(before));
	assert_true(strlen(f->err) > strlen(before));
	assert_null(strchr(f->err, '\n'));
	assert_int_equal(PQstatus(f->c.pg), CONNECTION_BAD);
	assert_int_equal(
		call_raw(f, &f->c, "R1", "S1", 2, 2800, b2, strlen(b2)),
		SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: cannot prepare the bill lookup: "
				    "no connection to the server");

	PQreset(f->c.pg);
	assert_int_equal(PQstatus(f->c.pg), CONNECTION_OK);
	assert_int_not_equal(PQbackendPID(f->c.pg), pid);
	assert_int_equal(call(f, 2, b2), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 2);
	assert_int_equal(n_lines(&f->c), 2);
}

static void *race_call(void *arg)
{
	struct racer *r = arg;
	struct semq_plugin_tx tx = {.db_kind = SEMQ_DB_PG, .db = r->pg};
	struct semq_plugin_msg m;

	memset(&m, 0, sizeof m);
	m.origin = r->origin;
	m.dest = "S1";
	m.seq = 1;
	m.type = 2800;
	m.created_at = now_ms();
	m.payload = (const uint8_t *)r->json;
	m.payload_len = strlen(r->json);
	r->rc = r->f->handle(r->h, &m, &tx, r->err, sizeof r->err);
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Two instances import bill_no B-1 at the same time: instance A (the
 * fixture's connection) has written it and not committed; instance B, from
 * message origin_b/S1/1, found no bill and must wait on A's row. Once A
 * commits, B answers as it would have had the bill been there: want_rc with
 * want_err. Either way exactly one bill, A's, is left.
 */
static void race(struct fx *f, const char *origin_b, int want_rc,
		 const char *want_err)
{
	const char *a_json = HEAD L1 "}";
	const char *b_json = "{\"bill_no\":\"B-1\",\"shop\":\"R2\",\"lines\":"
			     "[{\"item\":\"Z\",\"qty\":9,\"price\":\"9\"}]}";
	struct racer *r = &f->r;
	struct conn *b = &f->more[0], *watch = &f->more[1];
	char sql[200];
	int i, waiting = 0;

	assert_int_equal(conn_open(f, b, f->schema), 0);
	assert_int_equal(conn_open(f, watch, f->schema), 0);
	assert_int_equal(init_on(f, b, NULL, 0, &r->h), SEMQ_PLUGIN_OK);
	r->f = f;
	r->pg = b->pg;
	r->origin = origin_b;
	r->json = strcmp(origin_b, "R1") == 0 ? a_json : b_json;

	exec_ok(&f->c, "BEGIN");
	exec_ok(&f->c, "SAVEPOINT semq_apply");
	assert_int_equal(
		call_raw(f, &f->c, "R1", "S1", 1, 2800, a_json, strlen(a_json)),
		SEMQ_PLUGIN_OK);
	exec_ok(b, "BEGIN");
	exec_ok(b, "SAVEPOINT semq_apply");
	assert_int_equal(pthread_create(&f->thread, NULL, race_call, r), 0);
	f->racing = 1;
	/* B must get stuck on A's uncommitted bill, not pass it. */
	snprintf(sql, sizeof sql,
		 "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND "
		 "wait_event_type = 'Lock'",
		 PQbackendPID(b->pg));
	for (i = 0; i < 3000 && !__atomic_load_n(&r->done, __ATOMIC_ACQUIRE);
	     i++) {
		waiting = (int)query_int(watch, sql);
		if (waiting)
			break;
		usleep(10000);
	}
	assert_int_equal(waiting, 1);
	assert_false(__atomic_load_n(&r->done, __ATOMIC_ACQUIRE));
	exec_ok(&f->c, "RELEASE semq_apply");
	exec_ok(&f->c, "COMMIT");
	assert_int_equal(pthread_join(f->thread, NULL), 0);
	f->racing = 0;

	if (r->rc != want_rc || strcmp(r->err, want_err) != 0)
		fprintf(stderr, "B gave %d '%s'\n", r->rc, r->err);
	assert_int_equal(r->rc, want_rc);
	assert_string_equal(r->err, want_err);
	/* B's transaction is usable: no unique violation aborted it. */
	assert_int_equal(PQtransactionStatus(b->pg), PQTRANS_INTRANS);
	if (r->rc != SEMQ_PLUGIN_OK)
		exec_ok(b, "ROLLBACK TO semq_apply");
	exec_ok(b, "RELEASE semq_apply");
	exec_ok(b, "COMMIT");

	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 1);
	assert_int_equal(query_int(&f->c, "SELECT count(*) FROM bill WHERE "
					  "origin = 'R1' AND seq = 1 AND "
					  "shop = 'R1' AND total_minor = 100"),
			 1);
}

static void test_pg_same_bill_no_at_once(void **state)
{
	race(*state, "R2", SEMQ_PLUGIN_PERMANENT,
	     "bill: bill_no 'B-1' was already imported from R1/S1/1");
}

static void test_pg_same_message_at_once(void **state)
{
	race(*state, "R1", SEMQ_PLUGIN_OK, "");
}

/* ---- running ------------------------------------------------------------- */

/*
 * PostgreSQL: a database of this run's own on the server of
 * SEMQ_TEST_PG_URL, and the admin connection to it. When the role may not
 * create databases, the URL's database is used (every test still has a
 * schema of its own).
 */
static int pg_run_start(void)
{
	PGconn *root =
		pg_connect(NULL, "public", " -c client_min_messages=warning");
	char sql[120];
	PGresult *res;
	int ok;

	if (!root)
		return -1;
	snprintf(g_dbname, sizeof g_dbname, "semq_test_bill_%ld_%lld",
		 (long)getpid(), (long long)now_ms());
	snprintf(sql, sizeof sql, "CREATE DATABASE %s", g_dbname);
	res = PQexec(root, sql);
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok) {
		fprintf(stderr,
			"test_bill: cannot create a database (%s); using the "
			"URL's database, a schema per test\n",
			PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
		g_dbname[0] = '\0';
	}
	PQclear(res);
	PQfinish(root);
	g_admin = pg_connect(g_dbname[0] ? g_dbname : NULL, "public",
			     " -c client_min_messages=warning");
	return g_admin ? 0 : -1;
}

static int pg_run_end(void)
{
	PGconn *root;
	char sql[160];
	int r;

	PQfinish(g_admin);
	g_admin = NULL;
	if (!g_dbname[0])
		return 0;
	root = pg_connect(NULL, "public", " -c client_min_messages=warning");
	if (!root)
		return -1;
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)",
		 g_dbname);
	{
		struct conn c = {.kind = SEMQ_DB_PG, .pg = root};

		r = conn_exec(&c, sql);
	}
	PQfinish(root);
	return r;
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(test_abi_version),
		T(test_init_creates_tables),
		T(test_unknown_option_refused),
		T(test_bad_max_lines_refused),
		T(test_max_lines_option),
		T(test_bad_call_is_retry),
		T(test_unknown_db_kind_refused),
		T(test_good_bill_imported),
		T(test_several_lines),
		T(test_optional_fields_absent_or_null),
		T(test_issued_at_forms),
		T(test_text_length_boundary),
		T(test_price_limit),
		T(test_malformed_refused),
		T(test_wrong_type_refused),
		T(test_empty_payload_refused),
		T(test_not_utf8_refused),
		T(test_bill_no_from_another_message),
		T(test_same_message_again_is_ok),
		T(test_db_error_partial_rolled_back),
		T(test_busy_is_retry),
		T(test_missing_table_is_retry),
		T(test_other_connection),
		T(test_fini_finalises),
	};
	const struct CMUnitTest pg_only[] = {
		T(test_pg_session_lost_then_reset),
		T(test_pg_same_bill_no_at_once),
		T(test_pg_same_message_at_once),
	};
	int r;

	if (argc == 1)
		return cmocka_run_group_tests_name("bill on SQLite", tests,
						   NULL, NULL);
	if (argc != 2 || strcmp(argv[1], "--pg") != 0) {
		fprintf(stderr, "usage: %s [--pg]\n", argv[0]);
		return 2;
	}
	g_kind = SEMQ_DB_PG;
	g_url = getenv("SEMQ_TEST_PG_URL");
	if (!g_url || !g_url[0]) {
		fprintf(stderr,
			"\n*** test_bill --pg: SKIPPED: SEMQ_TEST_PG_URL is "
			"not "
			"set, so the bill plugin was NOT tested on PostgreSQL. "
			"tools/test.sh starts a server and sets it; by hand: "
			"SEMQ_TEST_PG_URL=$(tools/pgcluster.sh start DIR) "
			"***\n\n");
		return SKIP;
	}
	if (pg_run_start())
		return 1;
	r = cmocka_run_group_tests_name("bill on PostgreSQL", tests, NULL,
					NULL);
	r += cmocka_run_group_tests_name("bill on PostgreSQL only", pg_only,
					 NULL, NULL);
	if (pg_run_end())
		r++;
	return r;
}
