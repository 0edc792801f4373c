/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the journal plugin (plugins/journal/journal.c) on both node
 * databases, loading the built journal.so with dlopen as the host does:
 *
 *   test_journal        against a real SQLite file in a fresh directory
 *                       under $TMPDIR;
 *   test_journal --pg   against PostgreSQL: SEMQ_TEST_PG_URL names a server
 *                       database; the run creates a database of its own
 *                       there (dropped at the end) and gives every test a
 *                       fresh schema in it. Without SEMQ_TEST_PG_URL it says
 *                       so and exits 77 (ctest: skipped).
 *
 * Calls run as the store runs them: in a transaction, each inside SAVEPOINT
 * semq_apply, rolled back to it when the plugin does not return OK.
 * tests/unit/test_plughost.c checks the journal through the plugin host on
 * SQLite; this file checks the plugin itself, the same way on both back ends,
 * plus what only a server has (a session that is lost and reset, two
 * instances creating the table at once).
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

struct fx;
/* One call of init on its own thread, as a second semqd instance starting. */
struct racer {
	struct fx *f;
	struct conn *c; /* that instance's connection */
	void *h;        /* the handle it got */
	int rc;
	char err[ERRSZ];
	int done; /* set (atomically) when init returned */
};

/*
 * Per test: a fresh database (SQLite: node.db in a new directory;
 * PostgreSQL: a new schema), journal.so loaded and inited on it.
 */
struct fx {
	char dir[1024];
	char dbpath[1100];
	char schema[32];  /* PostgreSQL: this test's schema */
	char schema2[40]; /* PostgreSQL: "other", for a second database */
	struct conn c;    /* the node's connection; closed once a test did */
	struct semq_plugin_tx tx;
	void *dl; /* dlopen handle of journal.so */
	semq_plugin_abi_version_fn abi;
	semq_plugin_init_fn init;
	semq_plugin_handle_fn handle;
	semq_plugin_fini_fn fini;
	void *h; /* the plugin handle; NULL once a test finalised it */
	char err[ERRSZ];
	/* A second instance, for the tests that race two; kept here so that
	 * teardown ends it even when an assertion left the test early. */
	struct conn more[2]; /* its connection and a watcher */
	struct racer r;      /* r.h: the handle it got */
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
	v[2] = "test_journal";
	v[3] = dbname;
	v[4] = NULL;
	pg = PQconnectdbParams(k, v, 1);
	if (PQstatus(pg) != CONNECTION_OK) {
		fprintf(stderr, "test_journal: cannot connect to %s: %s", g_url,
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

static int64_t n_rows(struct conn *c)
{
	return query_int(c, "SELECT count(*) FROM journal");
}

/* Runs init on c with the given options; the handle goes to *out. */
static int init_on(struct fx *f, struct conn *c,
		   const struct semq_plugin_option *opts, size_t n, void **out)
{
	struct semq_plugin_tx tx = {.db_kind = c->kind, .db = conn_handle(c)};
	struct semq_plugin_init_args a;

	memset(&a, 0, sizeof a);
	a.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a.name = "journal";
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
		snprintf(f->schema, sizeof f->schema, "journal_%ld_%u",
			 (long)getpid(), ++g_n_schemas);
		snprintf(f->schema2, sizeof f->schema2, "%s_other", f->schema);
		snprintf(sql, sizeof sql, "CREATE SCHEMA %s", f->schema);
		if (admin_exec(sql) || conn_open(f, &f->c, f->schema))
			return -1;
	} else {
		snprintf(f->dir, sizeof f->dir, "%s/journal-XXXXXX",
			 tmp && tmp[0] ? tmp : "/tmp");
		if (!mkdtemp(f->dir))
			return -1;
		snprintf(f->dbpath, sizeof f->dbpath, "%s/node.db", f->dir);
		if (conn_open(f, &f->c, "node.db"))
			return -1;
	}
	f->tx.db_kind = f->c.kind;
	f->tx.db = conn_handle(&f->c);
	f->dl = dlopen(JOURNAL_SO, RTLD_NOW | RTLD_LOCAL);
	if (!f->dl) {
		fprintf(stderr, "dlopen %s: %s\n", JOURNAL_SO, dlerror());
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
static int call_raw(struct fx *f, struct conn *c, void *h, uint64_t seq,
		    uint32_t type, const char *key, size_t payload_len)
{
	static const uint8_t payload[64];
	struct semq_plugin_tx tx = {.db_kind = c->kind, .db = conn_handle(c)};
	struct semq_plugin_msg m;

	assert_true(payload_len <= sizeof payload);
	memset(&m, 0, sizeof m);
	m.origin = "R1";
	m.dest = "S1";
	m.seq = seq;
	m.type = type;
	m.key = key;
	m.created_at = now_ms();
	m.payload = payload;
	m.payload_len = payload_len;
	memset(f->err, 0, sizeof f->err);
	return f->handle(h, &m, &tx, f->err, sizeof f->err);
}

/* Calls handle as the store does, inside SAVEPOINT semq_apply of an open
 * transaction, rolled back to it when the plugin fails. */
static int call_sp(struct fx *f, struct conn *c, void *h, uint64_t seq,
		   const char *key)
{
	int rc;

	exec_ok(c, "SAVEPOINT semq_apply");
	rc = call_raw(f, c, h, seq, 2800, key, 5);
	if (rc != SEMQ_PLUGIN_OK)
		exec_ok(c, "ROLLBACK TO semq_apply");
	exec_ok(c, "RELEASE semq_apply");
	return rc;
}

/* One message R1/S1/seq with key, in a transaction of its own. */
static int call(struct fx *f, uint64_t seq, const char *key)
{
	int rc;

	exec_ok(&f->c, "BEGIN");
	rc = call_sp(f, &f->c, f->h, seq, key);
	exec_ok(&f->c, "COMMIT");
	return rc;
}

static void test_abi_version(void **state)
{
	struct fx *f = *state;

	assert_int_equal(f->abi(), SEMQ_PLUGIN_ABI_VERSION);
}

static void test_init_creates_table(void **state)
{
	struct fx *f = *state;
	struct conn *c = &f->c;
	void *h2 = NULL;

	assert_int_equal(
		query_int(c, Q("SELECT count(*) FROM pragma_table_info("
			       "'journal') WHERE name IN ('id', 'origin', "
			       "'dest', 'seq', 'type', 'msg_key', "
			       "'payload_len', 'handled_at')",
			       "SELECT count(*) FROM information_schema.columns"
			       " WHERE table_schema = current_schema() AND "
			       "table_name = 'journal' AND column_name IN "
			       "('id', 'origin', 'dest', 'seq', 'type', "
			       "'msg_key', 'payload_len', 'handled_at')")),
		8);
	assert_int_equal(
		query_int(c,
			  Q("SELECT count(*) FROM pragma_table_info('journal')",
			    "SELECT count(*) FROM information_schema.columns "
			    "WHERE table_schema = current_schema() AND "
			    "table_name = 'journal'")),
		8);
	/* No unique constraint: a message applied twice shows as two rows. */
	assert_int_equal(
		query_int(c, Q("SELECT count(*) FROM pragma_index_list("
			       "'journal')",
			       "SELECT count(*) FROM pg_index WHERE indrelid = "
			       "'journal'::regclass AND NOT indisprimary")),
		0);
	if (g_kind == SEMQ_DB_PG) {
		assert_int_equal(
			query_int(c, "SELECT count(*) FROM "
				     "information_schema.columns WHERE "
				     "table_schema = current_schema() AND "
				     "table_name = 'journal' AND data_type = "
				     "'bigint' AND column_name IN ('id', "
				     "'seq', 'type', 'payload_len', "
				     "'handled_at')"),
			5);
		assert_int_equal(
			query_int(c, "SELECT count(*) FROM "
				     "information_schema.columns WHERE "
				     "table_schema = current_schema() AND "
				     "table_name = 'journal' AND data_type = "
				     "'text'"),
			3);
	}
	/* A restart: init again on the same database finds the table. */
	assert_int_equal(init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	assert_non_null(h2);
	f->fini(h2);
	/* No NOTICE from either init (libpq prints them on stderr). */
	assert_int_equal(c->notices, 0);
}

/* Every call appends a row, the same message twice gives two. */
static void test_rows(void **state)
{
	struct fx *f = *state;
	int64_t t0 = now_ms(), t1;
	struct rows r;

	assert_int_equal(call(f, 7, "BILL-7"), SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 7, "BILL-7"), SEMQ_PLUGIN_OK);
	exec_ok(&f->c, "BEGIN");
	assert_int_equal(call_raw(f, &f->c, f->h, 8, 17, NULL, 0),
			 SEMQ_PLUGIN_OK);
	exec_ok(&f->c, "COMMIT");
	assert_int_equal(call(f, UINT64_C(9007199254740993), "big"),
			 SEMQ_PLUGIN_OK);
	t1 = now_ms();

	assert_int_equal(n_rows(&f->c), 4);
	query_rows(&f->c,
		   "SELECT origin, dest, seq, type, msg_key, payload_len, "
		   "handled_at, id FROM journal ORDER BY id",
		   &r);
	assert_int_equal(r.n, 4);
	assert_string_equal(cell(&r, 0, 0), "R1");
	assert_string_equal(cell(&r, 0, 1), "S1");
	assert_int_equal(cell_int(&r, 0, 2), 7);
	assert_int_equal(cell_int(&r, 0, 3), 2800);
	assert_string_equal(cell(&r, 0, 4), "BILL-7");
	assert_int_equal(cell_int(&r, 0, 5), 5);
	assert_in_range(cell_int(&r, 0, 6), t0, t1);
	assert_true(cell_int(&r, 1, 7) > cell_int(&r, 0, 7));
	assert_int_equal(cell_int(&r, 1, 2), 7);
	assert_int_equal(cell_int(&r, 2, 2), 8);
	assert_int_equal(cell_int(&r, 2, 3), 17);
	assert_null(cell(&r, 2, 4));
	assert_int_equal(cell_int(&r, 2, 5), 0);
	assert_int_equal(cell_int(&r, 3, 2), INT64_C(9007199254740993));
	assert_in_range(cell_int(&r, 3, 6), t0, t1);
	rows_free(&r);
}

/* Runs n calls through a new handle with opts in one transaction; the
 * verdicts go to v. Returns the RETRYs; exactly the OKs left rows. */
static int run(struct fx *f, const struct semq_plugin_option *opts,
	       size_t n_opts, int n, char *v, char *last, size_t lastsz)
{
	void *h = NULL;
	int i, retries = 0, oks = 0;

	assert_int_equal(init_on(f, &f->c, opts, n_opts, &h), SEMQ_PLUGIN_OK);
	exec_ok(&f->c, "DELETE FROM journal");
	exec_ok(&f->c, "BEGIN");
	for (i = 0; i < n; i++) {
		int rc = call_sp(f, &f->c, h, (uint64_t)i + 1, "K");

		assert_true(rc == SEMQ_PLUGIN_OK || rc == SEMQ_PLUGIN_RETRY);
		v[i] = (char)rc;
		if (rc == SEMQ_PLUGIN_RETRY) {
			retries++;
			snprintf(last, lastsz, "%s", f->err);
		} else {
			oks++;
		}
	}
	exec_ok(&f->c, "COMMIT");
	assert_int_equal(n_rows(&f->c), oks);
	f->fini(h);
	return retries;
}

static void test_fail_rate(void **state)
{
	enum { N = 300 };
	struct fx *f = *state;
	struct semq_plugin_option s42[] = {{"fail_rate", "0.5", "n:1"},
					   {"fail_seed", "42", "n:2"}};
	struct semq_plugin_option s43[] = {{"fail_rate", "0.5", "n:1"},
					   {"fail_seed", "43", "n:2"}};
	struct semq_plugin_option one[] = {{"fail_rate", "1", "n:1"}};
	struct semq_plugin_option zero[] = {{"fail_rate", "0", "n:1"}};
	static char a[N], b[N], c[N];
	char last[ERRSZ] = "";
	int r;

	r = run(f, s42, 2, N, a, last, sizeof last);
	assert_in_range(r, N / 2 - 40, N / 2 + 40);
	assert_string_equal(last, "journal: injected failure (fail_rate 0.5)");
	/* The same seed gives the same verdicts; another seed others. */
	assert_int_equal(run(f, s42, 2, N, b, last, sizeof last), r);
	assert_memory_equal(a, b, N);
	run(f, s43, 2, N, c, last, sizeof last);
	assert_memory_not_equal(a, c, N);
	assert_int_equal(run(f, one, 1, N, a, last, sizeof last), N);
	assert_string_equal(last, "journal: injected failure (fail_rate 1)");
	assert_int_equal(run(f, zero, 1, N, a, last, sizeof last), 0);
}

static void test_permanent_keys(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_option keys[] = {
		{"permanent_keys", "A, B ,C", "node.ini:7"}};
	struct semq_plugin_option always[] = {
		{"fail_rate", "1", "node.ini:8"},
		{"permanent_keys", "X", "node.ini:9"}};
	void *h = NULL;

	assert_int_equal(init_on(f, &f->c, keys, 1, &h), SEMQ_PLUGIN_OK);
	f->fini(f->h);
	f->h = h;
	assert_int_equal(call(f, 1, "B"), SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "journal: key B is listed in permanent_keys");
	assert_int_equal(call(f, 2, "C"), SEMQ_PLUGIN_PERMANENT);
	assert_int_equal(call(f, 3, "D"), SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 4, " B"), SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 5, NULL), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&f->c), 3);
	assert_int_equal(query_int(&f->c, "SELECT count(*) FROM journal "
					  "WHERE msg_key IN ('B', 'C')"),
			 0);

	/* A permanent key is PERMANENT even when every call would fail. */
	h = NULL;
	assert_int_equal(init_on(f, &f->c, always, 2, &h), SEMQ_PLUGIN_OK);
	f->fini(f->h);
	f->h = h;
	assert_int_equal(call(f, 6, "X"), SEMQ_PLUGIN_PERMANENT);
	assert_int_equal(call(f, 7, "Y"), SEMQ_PLUGIN_RETRY);
	assert_int_equal(n_rows(&f->c), 3);
}

static void test_bad_options(void **state)
{
	static const struct {
		const char *key, *value, *want;
	} bad[] = {
		{"fail_rat", "0.5",
		 "journal: n:3: unknown option 'fail_rat' (fail_rate, "
		 "fail_seed, permanent_keys)"},
		{"fail_rate", "1.5",
		 "journal: n:3: fail_rate '1.5' is not between 0 and 1"},
		{"fail_rate", "half",
		 "journal: n:3: fail_rate 'half' is not a number between 0 "
		 "and 1"},
		{"fail_seed", "-1",
		 "journal: n:3: fail_seed '-1' is not an unsigned 64-bit "
		 "integer"},
		{"permanent_keys", "A,,B",
		 "journal: n:3: permanent_keys 'A,,B' has an empty key"},
	};
	struct fx *f = *state;
	struct semq_plugin_option twice[] = {{"fail_seed", "1", "n:2"},
					     {"fail_seed", "2", "n:3"}};
	size_t i;

	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct semq_plugin_option o = {bad[i].key, bad[i].value, "n:3"};
		void *h = NULL;

		assert_int_equal(init_on(f, &f->c, &o, 1, &h),
				 SEMQ_PLUGIN_PERMANENT);
		assert_null(h);
		assert_string_equal(f->err, bad[i].want);
	}
	{
		void *h = NULL;

		assert_int_equal(init_on(f, &f->c, twice, 2, &h),
				 SEMQ_PLUGIN_PERMANENT);
		assert_null(h);
		assert_string_equal(f->err,
				    "journal: n:3: fail_seed given twice");
	}
}

/* A call without what it needs is RETRY (a host fault, not the message's);
 * a database kind the plugin does not know is refused at init and
 * PERMANENT in handle; the connection handed over is not touched. */
static void test_bad_call_and_unknown_kind(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_tx none = {0};
	struct semq_plugin_tx odd = {.db_kind = 7, .db = f->tx.db};
	struct semq_plugin_init_args a;
	struct semq_plugin_msg m;
	void *h = NULL;

	memset(&m, 0, sizeof m);
	m.origin = "R1";
	m.dest = "S1";
	m.seq = 1;
	m.type = 2800;
	assert_int_equal(f->handle(NULL, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err,
			    "journal: called without handle or message");
	assert_int_equal(f->handle(f->h, NULL, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_int_equal(f->handle(f->h, &m, &none, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "journal: called without a transaction");
	assert_int_equal(f->handle(f->h, &m, NULL, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "journal: called without a transaction");
	assert_int_equal(f->handle(f->h, &m, &odd, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "journal: unknown database kind 7 (1 "
				    "SQLite, 2 PostgreSQL)");
	assert_int_equal(n_rows(&f->c), 0);

	memset(&a, 0, sizeof a);
	a.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a.name = "journal";
	a.node_id = "S1";
	a.tx = &odd;
	assert_int_equal(f->init(&a, &h, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_null(h);
	assert_string_equal(f->err, "journal: unknown database kind 7 (1 "
				    "SQLite, 2 PostgreSQL)");
	a.tx = NULL;
	assert_int_equal(f->init(&a, &h, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_null(h);
	assert_string_equal(f->err, "journal: init called without a database");
	assert_int_equal(f->init(NULL, &h, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "journal: init called without arguments");
}

/* Database errors are RETRY with the database's reason, and the host's
 * rollback leaves nothing behind. */
static void test_db_errors_are_retry(void **state)
{
	struct fx *f = *state;

	exec_ok(&f->c,
		Q("CREATE TRIGGER nope BEFORE INSERT ON journal "
		  "WHEN NEW.msg_key = 'NOPE' BEGIN "
		  "SELECT RAISE(ABORT, 'no NOPE here'); END",
		  "CREATE FUNCTION nope() RETURNS trigger LANGUAGE plpgsql AS "
		  "$$ BEGIN IF NEW.msg_key = 'NOPE' THEN "
		  "RAISE EXCEPTION 'no NOPE here'; END IF; RETURN NEW; END $$;"
		  " CREATE TRIGGER nope BEFORE INSERT ON journal "
		  "FOR EACH ROW EXECUTE FUNCTION nope()"));
	assert_int_equal(call(f, 1, "OK"), SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 2, "NOPE"), SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "journal: insert failed: no NOPE here");
	assert_int_equal(call(f, 3, "OK"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&f->c), 2);

	/* A table that is gone: the prepare fails (a fresh handle). */
	exec_ok(&f->c, "DROP TABLE journal");
	f->fini(f->h);
	f->h = NULL;
	assert_int_equal(init_on(f, &f->c, NULL, 0, &f->h), SEMQ_PLUGIN_OK);
	exec_ok(&f->c, "DROP TABLE journal");
	assert_int_equal(call(f, 4, "OK"), SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err,
			    Q("journal: cannot prepare the insert: no such "
			      "table: journal",
			      "journal: cannot prepare the insert: relation "
			      "\"journal\" does not exist"));
}

/* The statement follows the connection it is handed, there and back. */
static void test_other_connection(void **state)
{
	struct fx *f = *state;
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
	exec_ok(&other, "BEGIN");
	assert_int_equal(call_sp(f, &other, f->h, 1, "A"), SEMQ_PLUGIN_OK);
	exec_ok(&other, "COMMIT");
	assert_int_equal(call(f, 2, "B"), SEMQ_PLUGIN_OK);
	exec_ok(&other, "BEGIN");
	assert_int_equal(call_sp(f, &other, f->h, 3, "C"), SEMQ_PLUGIN_OK);
	exec_ok(&other, "COMMIT");
	assert_int_equal(call(f, 4, "D"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&other), 2);
	assert_int_equal(n_rows(&f->c), 2);
	/* SQLite: BUSY if a statement were still open on it. */
	assert_int_equal(conn_close(&other), 0);
}

static void test_fini(void **state)
{
	struct fx *f = *state;

	assert_int_equal(call(f, 1, "A"), SEMQ_PLUGIN_OK);
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
	f->fini(NULL);
}

/* ---- PostgreSQL only ----------------------------------------------------- */

/* The server ends the session: RETRY with a one-line reason, again on the
 * dead connection, and after PQreset (the host's reconnect: same PGconn *,
 * new session) the statement is prepared again. */
static void test_pg_session_lost_then_reset(void **state)
{
	struct fx *f = *state;
	const char *before = "journal: insert failed: ";
	char sql[120];
	int pid;

	assert_int_equal(call(f, 1, "A"), SEMQ_PLUGIN_OK);
	pid = PQbackendPID(f->c.pg);
	snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, 10000)",
		 pid);
	assert_int_equal(admin_exec(sql), 0);

	assert_int_equal(call_raw(f, &f->c, f->h, 2, 2800, "B", 1),
			 SEMQ_PLUGIN_RETRY);
	if (strncmp(f->err, before, strlen(before)) != 0)
		fprintf(stderr, "got '%s'\n", f->err);
	assert_memory_equal(f->err, before, strlen(before));
	assert_true(strlen(f->err) > strlen(before));
	assert_null(strchr(f->err, '\n'));
	assert_int_equal(PQstatus(f->c.pg), CONNECTION_BAD);
	assert_int_equal(call_raw(f, &f->c, f->h, 2, 2800, "B", 1),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "journal: cannot prepare the insert: no "
				    "connection to the server");

	PQreset(f->c.pg);
	assert_int_equal(PQstatus(f->c.pg), CONNECTION_OK);
	assert_int_not_equal(PQbackendPID(f->c.pg), pid);
	assert_int_equal(call(f, 2, "B"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&f->c), 2);
}

static void *init_call(void *arg)
{
	struct racer *r = arg;
	struct semq_plugin_tx tx = {.db_kind = SEMQ_DB_PG, .db = r->c->pg};
	struct semq_plugin_init_args a;

	memset(&a, 0, sizeof a);
	a.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a.name = "journal";
	a.node_id = "S1";
	a.tx = &tx;
	r->rc = r->f->init(&a, &r->h, r->err, sizeof r->err);
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Two instances start at once on a database without the table: the second
 * init waits for the first one's creation to commit (the advisory lock),
 * then finds the table instead of failing on a duplicate CREATE.
 */
static void test_pg_init_waits_for_a_concurrent_create(void **state)
{
	struct fx *f = *state;
	struct racer *r = &f->r;
	struct conn *b = &f->more[0], *watch = &f->more[1];
	char sql[200];
	int i, waiting = 0;

	exec_ok(&f->c, "DROP TABLE journal");
	assert_int_equal(conn_open(f, b, f->schema), 0);
	assert_int_equal(conn_open(f, watch, f->schema), 0);
	r->f = f;
	r->c = b;
	/* Instance A is creating the table, as init does, not committed. */
	exec_ok(&f->c, "BEGIN");
	exec_ok(&f->c, "SELECT pg_advisory_xact_lock(1936026993, 1)");
	exec_ok(&f->c, "CREATE TABLE journal(id BIGINT GENERATED BY DEFAULT "
		       "AS IDENTITY PRIMARY KEY, origin TEXT, dest TEXT, "
		       "seq BIGINT, type BIGINT, msg_key TEXT, "
		       "payload_len BIGINT, handled_at BIGINT)");
	assert_int_equal(pthread_create(&f->thread, NULL, init_call, r), 0);
	f->racing = 1;
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
	exec_ok(&f->c, "COMMIT");
	assert_int_equal(pthread_join(f->thread, NULL), 0);
	f->racing = 0;
	if (r->rc != SEMQ_PLUGIN_OK)
		fprintf(stderr, "B's init: %s\n", r->err);
	assert_int_equal(r->rc, SEMQ_PLUGIN_OK);
	assert_int_equal(b->notices, 0);

	/* Both instances write into the one table. */
	exec_ok(b, "BEGIN");
	assert_int_equal(call_sp(f, b, r->h, 1, "B"), SEMQ_PLUGIN_OK);
	exec_ok(b, "COMMIT");
	assert_int_equal(call(f, 2, "A"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&f->c), 2);
}

/* ---- running ------------------------------------------------------------- */

/* PostgreSQL: a database of this run's own on the server of
 * SEMQ_TEST_PG_URL, and the admin connection to it. When the role may not
 * create databases, the URL's database is used (a schema per test). */
static int pg_run_start(void)
{
	PGconn *root =
		pg_connect(NULL, "public", " -c client_min_messages=warning");
	char sql[120];
	PGresult *res;

	if (!root)
		return -1;
	snprintf(g_dbname, sizeof g_dbname, "semq_test_journal_%ld_%lld",
		 (long)getpid(), (long long)now_ms());
	snprintf(sql, sizeof sql, "CREATE DATABASE %s", g_dbname);
	res = PQexec(root, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		fprintf(stderr,
			"test_journal: cannot create a database (%s); using "
			"the URL's database, a schema per test\n",
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
	struct conn root = {.kind = SEMQ_DB_PG};
	char sql[160];
	int r;

	PQfinish(g_admin);
	g_admin = NULL;
	if (!g_dbname[0])
		return 0;
	root.pg = pg_connect(NULL, "public", " -c client_min_messages=warning");
	if (!root.pg)
		return -1;
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)",
		 g_dbname);
	r = conn_exec(&root, sql);
	conn_close(&root);
	return r;
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(test_abi_version),
		T(test_init_creates_table),
		T(test_rows),
		T(test_fail_rate),
		T(test_permanent_keys),
		T(test_bad_options),
		T(test_bad_call_and_unknown_kind),
		T(test_db_errors_are_retry),
		T(test_other_connection),
		T(test_fini),
	};
	const struct CMUnitTest pg_only[] = {
		T(test_pg_session_lost_then_reset),
		T(test_pg_init_waits_for_a_concurrent_create),
	};
	int r;

	if (argc == 1)
		return cmocka_run_group_tests_name("journal on SQLite", tests,
						   NULL, NULL);
	if (argc != 2 || strcmp(argv[1], "--pg") != 0) {
		fprintf(stderr, "usage: %s [--pg]\n", argv[0]);
		return 2;
	}
	g_kind = SEMQ_DB_PG;
	g_url = getenv("SEMQ_TEST_PG_URL");
	if (!g_url || !g_url[0]) {
		fprintf(stderr,
			"\n*** test_journal --pg: SKIPPED: SEMQ_TEST_PG_URL is "
			"not set, so the journal plugin was NOT tested on "
			"PostgreSQL. tools/test.sh starts a server and sets it;"
			" by hand: SEMQ_TEST_PG_URL=$(tools/pgcluster.sh start "
			"DIR) ***\n\n");
		return SKIP;
	}
	if (pg_run_start())
		return 1;
	r = cmocka_run_group_tests_name("journal on PostgreSQL", tests, NULL,
					NULL);
	r += cmocka_run_group_tests_name("journal on PostgreSQL only", pg_only,
					 NULL, NULL);
	if (pg_run_end())
		r++;
	return r;
}
