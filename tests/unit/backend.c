/* SPDX-License-Identifier: MIT */
/*
 * The unit tests' two back ends (backend.h): the run's PostgreSQL database
 * and its schemas, connections of either kind, and a plugin test's fixture.
 *
 * DESIGN: the run is one set of statics, set by be_conn_main or be_url_main
 * (the whole of a test program's main) and read by every test it runs.
 * `pg` never changes once a test ran; `admin` and `run_db` live from the
 * start to the end of a PostgreSQL run, and every schema made in between is
 * a schema of run_db (or of the URL's database when a connection run may
 * not create one). A test's database (a directory or a schema) is removed
 * by its teardown; the run's database, schemas and all, by the run's end.
 * A racing second instance (be_race) is joined before its handle and
 * connections are freed: by the test, or by teardown when an assertion
 * left the test early.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

/* PostgreSQL options of every session of a connection run's admin side. */
#define QUIET " -c client_min_messages=warning"

static int pg;               /* this run is on PostgreSQL */
static const char *suite;    /* "bill": of groups, messages (borrowed) */
static char prog[32];        /* "test_bill": messages, database names */
static const char *base_url; /* SEMQ_TEST_PG_URL (borrowed from environ) */
static char run_db[64];      /* the run's database; "": the URL's own */
static char run_url[1024];   /* URL runs: the URL of run_db */
static PGconn *admin;        /* on run_db: makes and drops schemas (owned) */
static unsigned n_schemas;   /* schemas made so far (their names) */

int be_pg(void)
{
	return pg;
}

const char *be_sql(const char *lite, const char *pgsql)
{
	return pg ? pgsql : lite;
}

int64_t be_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

PGconn *be_admin(void)
{
	return admin;
}

/* ---- connections of either kind ------------------------------------------ */

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
	PGconn *c;

	snprintf(opts, sizeof opts, "-c search_path=%s -c lock_timeout=60s%s",
		 schema, more ? more : "");
	v[0] = base_url;
	v[1] = opts;
	v[2] = prog;
	v[3] = dbname;
	v[4] = NULL;
	c = PQconnectdbParams(k, v, 1);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "%s: cannot connect to %s: %s", prog, base_url,
			PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	return c;
}

/* Opens c on `name`: SQLite, the file dir/name; PostgreSQL, the schema
 * `name` of this run's database. 0 or -1. */
static int conn_open(struct be_conn *c, const char *dir, const char *name)
{
	char path[1200];

	memset(c, 0, sizeof *c);
	c->kind = pg ? SEMQ_DB_PG : SEMQ_DB_SQLITE;
	if (pg) {
		c->pg = pg_connect(run_db, name, NULL);
		if (!c->pg)
			return -1;
		PQsetNoticeReceiver(c->pg, count_notice, &c->notices);
		return 0;
	}
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (sqlite3_open_v2(path, &c->lite,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
			    NULL) != SQLITE_OK) {
		sqlite3_close(c->lite);
		c->lite = NULL;
		return -1;
	}
	return 0;
}

int be_conn_close(struct be_conn *c)
{
	int r = 0;

	if (c->lite && sqlite3_close(c->lite) != SQLITE_OK)
		r = -1;
	PQfinish(c->pg);
	c->lite = NULL;
	c->pg = NULL;
	return r;
}

void *be_conn_handle(const struct be_conn *c)
{
	return c->kind == SEMQ_DB_PG ? (void *)c->pg : (void *)c->lite;
}

/* Runs SQL (several statements allowed); 0 or -1 with the reason printed. */
static int conn_exec(struct be_conn *c, const char *sql)
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

void be_exec_ok(struct be_conn *c, const char *sql)
{
	assert_int_equal(conn_exec(c, sql), 0);
}

int be_admin_exec(const char *sql)
{
	struct be_conn a = {.kind = SEMQ_DB_PG, .pg = admin};

	return conn_exec(&a, sql);
}

void be_rows_free(struct be_rows *r)
{
	int i;

	for (i = 0; i < r->n * r->ncol; i++)
		free(r->cell[i]);
	free(r->cell);
	memset(r, 0, sizeof *r);
}

const char *be_cell(const struct be_rows *r, int row, int col)
{
	assert_in_range(row, 0, r->n - 1);
	assert_in_range(col, 0, r->ncol - 1);
	return r->cell[row * r->ncol + col];
}

int64_t be_cell_int(const struct be_rows *r, int row, int col)
{
	const char *s = be_cell(r, row, col);

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

void be_query_rows(struct be_conn *c, const char *sql, struct be_rows *out)
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

int64_t be_query_int(struct be_conn *c, const char *sql)
{
	struct be_rows r;
	int64_t v;

	be_query_rows(c, sql, &r);
	assert_int_equal(r.n, 1);
	v = be_cell_int(&r, 0, 0);
	be_rows_free(&r);
	return v;
}

/* Runs sql, which must fit the buffer it was written to (n < size). */
static int64_t query_int_fit(struct be_conn *c, const char *sql, int n,
			     size_t size)
{
	assert_in_range(n, 0, (int)size - 1);
	return be_query_int(c, sql);
}

int64_t be_n_columns(struct be_conn *c, const char *table, const char *names)
{
	char sql[512];
	int n;

	if (c->kind == SEMQ_DB_PG)
		n = snprintf(sql, sizeof sql,
			     "SELECT count(*) FROM information_schema.columns "
			     "WHERE table_schema = current_schema() AND "
			     "table_name = '%s'%s%s%s",
			     table, names ? " AND column_name IN (" : "",
			     names ? names : "", names ? ")" : "");
	else
		n = snprintf(
			sql, sizeof sql,
			"SELECT count(*) FROM pragma_table_info('%s')%s%s%s",
			table, names ? " WHERE name IN (" : "",
			names ? names : "", names ? ")" : "");
	return query_int_fit(c, sql, n, sizeof sql);
}

int64_t be_pg_n_typed(struct be_conn *c, const char *type, const char *where)
{
	char sql[512];
	int n;

	n = snprintf(sql, sizeof sql,
		     "SELECT count(*) FROM information_schema.columns WHERE "
		     "table_schema = current_schema() AND data_type = '%s' "
		     "AND (%s)",
		     type, where);
	return query_int_fit(c, sql, n, sizeof sql);
}

int64_t be_n_indexes(struct be_conn *c, const char *table, int unique)
{
	char sql[256];
	int n;

	if (c->kind == SEMQ_DB_PG)
		n = snprintf(sql, sizeof sql,
			     "SELECT count(*) FROM pg_index WHERE indrelid = "
			     "'%s'::regclass AND %sNOT indisprimary",
			     table, unique ? "indisunique AND " : "");
	else
		n = snprintf(sql, sizeof sql,
			     "SELECT count(*) FROM pragma_index_list('%s')%s",
			     table, unique ? " WHERE \"unique\" = 1" : "");
	return query_int_fit(c, sql, n, sizeof sql);
}

/* ---- the run ------------------------------------------------------------ */

/* SEMQ_TEST_PG_URL, or NULL when it is unset or empty (borrowed). */
static const char *pg_url(void)
{
	const char *u = getenv("SEMQ_TEST_PG_URL");

	return u && u[0] ? u : NULL;
}

/* Starts a run of test_<name>. */
static void run_named(const char *name)
{
	suite = name;
	snprintf(prog, sizeof prog, "test_%s", name);
}

/* Runs the n tests as the group "<suite><suffix>"; their failures. */
static int run_group(const char *suffix, const struct CMUnitTest *tests,
		     size_t n)
{
	char group[96];

	snprintf(group, sizeof group, "%s%s", suite, suffix);
	/* What cmocka_run_group_tests_name() calls, with n given. */
	return _cmocka_run_group_tests(group, tests, n, NULL, NULL);
}

/* ---- connection runs ----------------------------------------------------- */

/*
 * PostgreSQL: a database of this run's own on the server of
 * SEMQ_TEST_PG_URL, and the admin connection to it. When the role may not
 * create databases, the URL's database is used (every test still has a
 * schema of its own). 0 or -1.
 */
static int conn_run_make(void)
{
	PGconn *root = pg_connect(NULL, "public", QUIET);
	char sql[120];
	PGresult *res;

	if (!root)
		return -1;
	snprintf(run_db, sizeof run_db, "semq_%s_%ld_%lld", prog,
		 (long)getpid(), (long long)be_now_ms());
	snprintf(sql, sizeof sql, "CREATE DATABASE %s", run_db);
	res = PQexec(root, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		fprintf(stderr,
			"%s: cannot create a database (%s); using the URL's "
			"database, a schema per test\n",
			prog, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
		run_db[0] = '\0';
	}
	PQclear(res);
	PQfinish(root);
	admin = pg_connect(run_db[0] ? run_db : NULL, "public", QUIET);
	return admin ? 0 : -1;
}

/* Drops the connection run's database. 0, or 1 when it could not (said
 * why). */
static int conn_run_end(void)
{
	struct be_conn root = {.kind = SEMQ_DB_PG};
	char sql[160];
	int r;

	PQfinish(admin);
	admin = NULL;
	if (!run_db[0])
		return 0;
	root.pg = pg_connect(NULL, "public", QUIET);
	if (!root.pg)
		return 1;
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)",
		 run_db);
	r = conn_exec(&root, sql);
	be_conn_close(&root);
	return r ? 1 : 0;
}

int be_conn_main(int argc, char **argv, const char *name,
		 const struct CMUnitTest *tests, size_t n_tests,
		 const struct CMUnitTest *pg_only, size_t n_pg_only)
{
	int r;

	run_named(name);
	if (argc == 1)
		return run_group(" on SQLite", tests, n_tests);
	if (argc != 2 || strcmp(argv[1], "--pg") != 0) {
		fprintf(stderr, "usage: %s [--pg]\n", argv[0]);
		return 2;
	}
	pg = 1;
	base_url = pg_url();
	if (!base_url) {
		fprintf(stderr,
			"\n*** %s --pg: SKIPPED: SEMQ_TEST_PG_URL is not set, "
			"so the %s plugin was NOT tested on PostgreSQL. "
			"tools/test.sh starts a server and sets it; by hand: "
			"SEMQ_TEST_PG_URL=$(tools/pgcluster.sh start DIR) "
			"***\n\n",
			prog, suite);
		return BE_SKIP;
	}
	if (conn_run_make())
		return 1;
	r = run_group(" on PostgreSQL", tests, n_tests);
	r += run_group(" on PostgreSQL only", pg_only, n_pg_only);
	return r + conn_run_end();
}

/* ---- URL runs ------------------------------------------------------------ */

/*
 * url with its database replaced by db (and, when schema is not NULL,
 * search_path set to schema through the connection's options) into out.
 */
static int url_with(const char *url, const char *db, const char *schema,
		    char *out, size_t outsz)
{
	const char *auth = strstr(url, "://"), *end, *query;
	size_t n;

	if (!auth)
		return -1;
	auth += 3;
	end = auth + strcspn(auth, "/?");
	query = strchr(end, '?');
	n = (size_t)snprintf(out, outsz, "%.*s/%s%s", (int)(end - url), url, db,
			     query ? query : "");
	if (schema)
		n += (size_t)snprintf(out + n, n < outsz ? outsz - n : 0,
				      "%coptions=-csearch_path%%3D%s",
				      query ? '&' : '?', schema);
	return n < outsz ? 0 : -1;
}

int be_pg_run(PGconn *c, const char *sql, char *msg, size_t msgsz)
{
	PGresult *res = PQexec(c, sql);
	ExecStatusType t = PQresultStatus(res);
	int r = t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK ? 0 : -1;

	if (r && msg)
		snprintf(msg, msgsz, "%s", PQerrorMessage(c));
	PQclear(res);
	return r;
}

void be_quiet_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* The run's database: made from SEMQ_TEST_PG_URL; 0, BE_SKIP when there is
 * no server to test with, or -1 (said why). */
static int url_run_make(void)
{
	char sql[128], msg[512];
	PGconn *c;
	int r;

	base_url = pg_url();
	if (!base_url) {
		fprintf(stderr,
			"\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
			"!!!!!!!!!!!!!!!!!!!\n"
			"!! %s --pg: SEMQ_TEST_PG_URL is not set: the %s's "
			"PostgreSQL\n"
			"!! tests did NOT run (tools/pgcluster.sh start DIR "
			"prints a URL to set).\n"
			"!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
			"!!!!!!!!!!!!!!!!!!\n\n",
			prog, suite);
		return BE_SKIP;
	}
	snprintf(run_db, sizeof run_db, "semq_%s_%ld_%ld", prog, (long)getpid(),
		 (long)time(NULL));
	if (url_with(base_url, run_db, NULL, run_url, sizeof run_url)) {
		fprintf(stderr,
			"%s: SEMQ_TEST_PG_URL '%s' is not a postgresql:// "
			"URL\n",
			prog, base_url);
		return -1;
	}
	c = PQconnectdb(base_url);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "%s: cannot connect to %s: %s", prog, base_url,
			PQerrorMessage(c));
		PQfinish(c);
		return -1;
	}
	snprintf(sql, sizeof sql, "CREATE DATABASE %s", run_db);
	r = be_pg_run(c, sql, msg, sizeof msg);
	PQfinish(c);
	if (r) {
		fprintf(stderr, "%s: %s: %s", prog, sql, msg);
		return -1;
	}
	admin = PQconnectdb(run_url);
	if (PQstatus(admin) != CONNECTION_OK) {
		fprintf(stderr, "%s: cannot connect to %s: %s", prog, run_url,
			PQerrorMessage(admin));
		return -1;
	}
	PQsetNoticeProcessor(admin, be_quiet_notice, NULL);
	return 0;
}

/* Drops the URL run's database; a failure is a warning on stderr. */
static void url_run_end(void)
{
	char sql[128], msg[512];
	PGconn *c;

	PQfinish(admin);
	admin = NULL;
	if (!run_db[0])
		return;
	c = PQconnectdb(base_url);
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)",
		 run_db);
	if (PQstatus(c) != CONNECTION_OK || be_pg_run(c, sql, msg, sizeof msg))
		fprintf(stderr, "%s: warning: %s failed: %s", prog, sql,
			PQerrorMessage(c));
	PQfinish(c);
}

int be_url_main(int argc, char **argv, const char *name,
		const struct CMUnitTest *tests, size_t n_tests,
		const struct CMUnitTest *pg_only, size_t n_pg_only)
{
	const char *be = getenv("SEMQ_TEST_BACKEND");
	int r;

	run_named(name);
	pg = (argc > 1 && strcmp(argv[1], "--pg") == 0) ||
	     (be && strcmp(be, "pg") == 0);
	if (!pg)
		return _cmocka_run_group_tests("tests", tests, n_tests, NULL,
					       NULL);
	r = url_run_make();
	if (r) {
		url_run_end();
		return r;
	}
	r = run_group(" on PostgreSQL", tests, n_tests);
	if (n_pg_only)
		r += run_group(" on PostgreSQL: several instances", pg_only,
			       n_pg_only);
	url_run_end();
	return r;
}

int be_schema_new(char *name, size_t namesz, char *url, size_t urlsz, char *why,
		  size_t whysz)
{
	char sql[64], msg[512];

	snprintf(name, namesz, "t%u", ++n_schemas);
	snprintf(sql, sizeof sql, "CREATE SCHEMA %s", name);
	if (be_pg_run(admin, sql, msg, sizeof msg)) {
		snprintf(why, whysz, "%s: %s", sql, msg);
		return -1;
	}
	if (url_with(run_url, run_db, name, url, urlsz)) {
		snprintf(why, whysz, "URL of schema %s too long", name);
		return -1;
	}
	return 0;
}

void be_schema_drop(const char *name)
{
	char sql[64], msg[512];

	if (!name[0])
		return;
	snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", name);
	if (be_pg_run(admin, sql, msg, sizeof msg))
		fprintf(stderr, "%s: %s", sql, msg);
}

/* ---- a plugin test's fixture --------------------------------------------- */

/* The arguments of init as the host passes them for plugin f->name, node S1,
 * on tx (borrowed), without options. */
static void init_args(struct be_fx *f, struct semq_plugin_init_args *a,
		      struct semq_plugin_tx *tx)
{
	memset(a, 0, sizeof *a);
	a->abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a->name = f->name;
	a->node_id = "S1";
	a->tx = tx;
}

int be_init_on(struct be_fx *f, struct be_conn *c,
	       const struct semq_plugin_option *opts, size_t n, void **out)
{
	struct semq_plugin_tx tx = {.db_kind = c->kind,
				    .db = be_conn_handle(c)};
	struct semq_plugin_init_args a;

	init_args(f, &a, &tx);
	a.options = opts;
	a.n_options = n;
	memset(f->err, 0, sizeof f->err);
	return f->init(&a, out, f->err, sizeof f->err);
}

int be_open_again(struct be_fx *f, struct be_conn *c)
{
	return conn_open(c, f->dir, pg ? f->schema : "node.db");
}

int be_open_other(struct be_fx *f, struct be_conn *c)
{
	char sql[100];

	if (pg) {
		snprintf(sql, sizeof sql, "CREATE SCHEMA %s", f->schema2);
		if (be_admin_exec(sql))
			return -1;
	}
	return conn_open(c, f->dir, pg ? f->schema2 : "other.db");
}

int be_second_open(struct be_fx *f)
{
	if (be_open_again(f, &f->more[0]))
		return -1;
	return be_open_again(f, &f->more[1]);
}

/* The thread of be_race. */
static void *race_thread(void *arg)
{
	struct be_fx *f = arg;

	f->race_rc = f->race_fn(f, f->race_arg);
	__atomic_store_n(&f->race_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

void be_race(struct be_fx *f, be_race_fn *fn, const void *arg)
{
	f->race_fn = fn;
	f->race_arg = arg;
	assert_int_equal(pthread_create(&f->thread, NULL, race_thread, f), 0);
	f->racing = 1;
}

int be_race_init(struct be_fx *f, const void *arg)
{
	struct semq_plugin_tx tx = {.db_kind = SEMQ_DB_PG, .db = f->more[0].pg};
	struct semq_plugin_init_args a;

	(void)arg;
	init_args(f, &a, &tx);
	return f->init(&a, &f->h2, f->race_err, sizeof f->race_err);
}

int be_race_done(struct be_fx *f)
{
	return __atomic_load_n(&f->race_done, __ATOMIC_ACQUIRE);
}

int be_race_waits(struct be_fx *f)
{
	char sql[200];
	int i, waiting = 0;

	snprintf(sql, sizeof sql,
		 "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND "
		 "wait_event_type = 'Lock'",
		 PQbackendPID(f->more[0].pg));
	for (i = 0; i < 3000 && !be_race_done(f); i++) {
		waiting = (int)be_query_int(&f->more[1], sql);
		if (waiting)
			break;
		usleep(10000);
	}
	return waiting;
}

void be_race_join(struct be_fx *f)
{
	assert_int_equal(pthread_join(f->thread, NULL), 0);
	f->racing = 0;
}

int be_fx_setup(void **state, const char *name, const char *so)
{
	const char *tmp = getenv("TMPDIR");
	struct be_fx *f = calloc(1, sizeof *f);
	char sql[200];

	if (!f)
		return -1;
	*state = f;
	f->name = name;
	if (pg) {
		snprintf(f->schema, sizeof f->schema, "%s_%ld_%u", name,
			 (long)getpid(), ++n_schemas);
		snprintf(f->schema2, sizeof f->schema2, "%s_other", f->schema);
		snprintf(sql, sizeof sql, "CREATE SCHEMA %s", f->schema);
		if (be_admin_exec(sql))
			return -1;
	} else {
		snprintf(f->dir, sizeof f->dir, "%s/%s-XXXXXX",
			 tmp && tmp[0] ? tmp : "/tmp", name);
		if (!mkdtemp(f->dir))
			return -1;
	}
	if (be_open_again(f, &f->c))
		return -1;
	f->tx.db_kind = f->c.kind;
	f->tx.db = be_conn_handle(&f->c);
	f->dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (!f->dl) {
		fprintf(stderr, "dlopen %s: %s\n", so, dlerror());
		return -1;
	}
	f->abi = (semq_plugin_abi_version_fn)dlsym(f->dl,
						   "semq_plugin_abi_version");
	f->init = (semq_plugin_init_fn)dlsym(f->dl, "semq_plugin_init");
	f->handle = (semq_plugin_handle_fn)dlsym(f->dl, "semq_plugin_handle");
	f->fini = (semq_plugin_fini_fn)dlsym(f->dl, "semq_plugin_fini");
	if (!f->abi || !f->init || !f->handle || !f->fini)
		return -1;
	if (be_init_on(f, &f->c, NULL, 0, &f->h) != SEMQ_PLUGIN_OK) {
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

int be_fx_teardown(void **state)
{
	struct be_fx *f = *state;
	char sql[200];
	int r = 0;

	if (f->h)
		f->fini(f->h);
	/* fini finalised every statement, or this close would be BUSY. */
	if (be_conn_close(&f->c))
		r = -1;
	/* A racing call was waiting on f->c at most, which is gone now. */
	if (f->racing)
		pthread_join(f->thread, NULL);
	if (f->h2)
		f->fini(f->h2);
	be_conn_close(&f->more[0]);
	be_conn_close(&f->more[1]);
	if (f->dl)
		dlclose(f->dl);
	if (pg) {
		snprintf(sql, sizeof sql,
			 "DROP SCHEMA IF EXISTS %s CASCADE; "
			 "DROP SCHEMA IF EXISTS %s CASCADE",
			 f->schema, f->schema2);
		if (f->schema[0] && be_admin_exec(sql))
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

/* ---- what every plugin does alike ---------------------------------------- */

void be_check_init_refused(struct be_fx *f,
			   const struct semq_plugin_option *opts, size_t n,
			   const char *want)
{
	void *h = NULL;

	assert_int_equal(be_init_on(f, &f->c, opts, n, &h),
			 SEMQ_PLUGIN_PERMANENT);
	assert_null(h);
	assert_string_equal(f->err, want);
}

void be_check_init_needs_db(struct be_fx *f)
{
	struct semq_plugin_tx odd = {.db_kind = 7, .db = f->tx.db};
	struct semq_plugin_init_args a;
	char want[BE_ERRSZ];
	void *h = NULL;

	init_args(f, &a, &odd);
	assert_int_equal(f->init(&a, &h, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_null(h);
	snprintf(want, sizeof want,
		 "%s: unknown database kind 7 (1 SQLite, 2 PostgreSQL)",
		 f->name);
	assert_string_equal(f->err, want);
	a.tx = NULL;
	assert_int_equal(f->init(&a, &h, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_null(h);
	snprintf(want, sizeof want, "%s: init called without a database",
		 f->name);
	assert_string_equal(f->err, want);
}

void be_check_fini(struct be_fx *f)
{
	if (pg) {
		assert_int_equal(be_conn_close(&f->c), 0);
		f->fini(f->h);
		f->h = NULL;
	} else {
		f->fini(f->h);
		f->h = NULL;
		assert_int_equal(be_conn_close(&f->c), 0);
	}
	f->fini(NULL);
}

int be_pg_end_session(struct be_fx *f)
{
	int pid = PQbackendPID(f->c.pg);
	char sql[120];

	snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, 10000)",
		 pid);
	assert_int_equal(be_admin_exec(sql), 0);
	return pid;
}

void be_check_reason(const char *err, const char *before)
{
	if (strncmp(err, before, strlen(before)) != 0)
		fprintf(stderr, "got '%s'\n", err);
	assert_memory_equal(err, before, strlen(before));
	assert_true(strlen(err) > strlen(before));
	assert_null(strchr(err, '\n'));
}

void be_pg_reset(struct be_fx *f, int pid)
{
	PQreset(f->c.pg);
	assert_int_equal(PQstatus(f->c.pg), CONNECTION_OK);
	assert_int_not_equal(PQbackendPID(f->c.pg), pid);
}
