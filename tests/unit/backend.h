/* SPDX-License-Identifier: MIT */
/*
 * The plumbing that lets a unit test run on both node databases: SQLite by
 * default, PostgreSQL with --pg through the throw-away server named by
 * SEMQ_TEST_PG_URL (tools/pgcluster.sh start DIR prints one). A PostgreSQL
 * run makes a database of its own on that server, drops it at the end and
 * gives every test a fresh schema in it; without SEMQ_TEST_PG_URL it says so
 * loudly and main exits 77 (BE_SKIP, ctest: skipped). Used by test_bill,
 * test_journal, test_schema and test_store, linked into each of them.
 *
 * Two ways to reach the run's database, one per kind of test:
 *
 *   connection runs (be_conn_main, test_bill and test_journal): the
 *   test opens struct be_conn sessions of either kind itself, reads tables
 *   with be_query_*, and gets a fixture (struct be_fx) that loads a plugin
 *   with dlopen, as the host does, on a fresh database per test;
 *
 *   URL runs (be_url_main, test_schema and test_store): the store opens
 *   the database, so every test gets a URL that reaches its own schema
 *   (be_schema_new), and plain libpq connections run SQL with be_pg_run.
 *
 * The two kinds differ in their command line and their skip message: a
 * connection run takes nothing or exactly --pg and skips with one "***"
 * line; a URL run also takes SEMQ_TEST_BACKEND=pg and skips with a box of
 * "!!".
 *
 * Helpers that check call cmocka's assertions, so they run inside a test.
 * One run at a time per process; nothing here is thread-safe except what a
 * racing thread of a test uses (a plugin handle and its own connection).
 */
#ifndef SEMQ_TEST_BACKEND_H
#define SEMQ_TEST_BACKEND_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include <semq/plugin.h>

#define BE_ERRSZ 256 /* the size of the err buffer the host passes */
#define BE_SKIP 77   /* ctest SKIP_RETURN_CODE */

/* ---- the run ------------------------------------------------------------- */

struct CMUnitTest;

/* The number of entries of array a (of tests). */
#define BE_N(a) (sizeof(a) / sizeof((a)[0]))

/*
 * The whole main of test_<name> for a plugin (a connection run). No
 * argument: `tests` on SQLite, as the cmocka group "<name> on SQLite". --pg:
 * `tests`, then `pg_only`, on PostgreSQL ("<name> on PostgreSQL", "<name> on
 * PostgreSQL only"), in a database of the run's own that is dropped at the
 * end (the URL's database when the role may not create one). Returns main's
 * exit status: the failures (a database left behind counts one), 2 on a
 * usage error, BE_SKIP without SEMQ_TEST_PG_URL, 1 when no server answered.
 * `name` is borrowed for the whole run.
 */
int be_conn_main(int argc, char **argv, const char *name,
		 const struct CMUnitTest *tests, size_t n_tests,
		 const struct CMUnitTest *pg_only, size_t n_pg_only);

/*
 * The whole main of test_<name> for the store (a URL run). PostgreSQL with
 * --pg or SEMQ_TEST_BACKEND=pg: `tests` ("<name> on PostgreSQL"), then, when
 * n_pg_only, `pg_only`, the tests of several instances ("<name> on
 * PostgreSQL: several instances"), in a database of the run's own that is
 * dropped at the end. Else `tests` on SQLite (the group "tests"). Returns
 * main's exit status: the failures, BE_SKIP without SEMQ_TEST_PG_URL, or -1
 * when the run's database could not be made (said why). `name` is borrowed
 * for the whole run.
 */
int be_url_main(int argc, char **argv, const char *name,
		const struct CMUnitTest *tests, size_t n_tests,
		const struct CMUnitTest *pg_only, size_t n_pg_only);

/* Is this run on PostgreSQL? */
int be_pg(void);

/* The one of two SQL texts that fits the back end of this run (borrowed). */
const char *be_sql(const char *lite, const char *pg);

/* The wall clock in unix ms. */
int64_t be_now_ms(void);

/* PostgreSQL: the connection to the run's database that makes and drops
 * schemas (owned by the run; NULL outside one). */
PGconn *be_admin(void);

/* ---- URL runs: a schema per test, plain libpq ---------------------------- */

/* Runs sql on a libpq connection (no rows wanted); 0, or -1 with the
 * server's message in msg (when not NULL). */
int be_pg_run(PGconn *c, const char *sql, char *msg, size_t msgsz);

/* A notice processor that drops "drop cascades to ..." and the like. */
void be_quiet_notice(void *arg, const char *message);

/* A fresh schema of the run's database: its name into name, the URL that
 * reaches it (through search_path) into url. 0, or -1 with why not in why. */
int be_schema_new(char *name, size_t namesz, char *url, size_t urlsz, char *why,
		  size_t whysz);

/* Drops schema `name` (nothing when it is ""); a failure is said on
 * stderr. */
void be_schema_drop(const char *name);

/* ---- connection runs: sessions of either kind ---------------------------- */

/* One connection to the database under test, of either kind. */
struct be_conn {
	int kind;      /* SEMQ_DB_SQLITE or SEMQ_DB_PG */
	sqlite3 *lite; /* owned */
	PGconn *pg;    /* owned */
	int notices;   /* PostgreSQL: NOTICEs and WARNINGs the server sent */
};

/* Closes c (a closed or zeroed one too); 0, or -1 when SQLite refused (a
 * statement was left open). */
int be_conn_close(struct be_conn *c);

/* The handle a plugin gets for c. Borrowed. */
void *be_conn_handle(const struct be_conn *c);

/* Runs SQL (several statements allowed); the test fails unless it works. */
void be_exec_ok(struct be_conn *c, const char *sql);

/* PostgreSQL: runs SQL on the run's database as the admin connection; 0 or
 * -1 with the reason printed. */
int be_admin_exec(const char *sql);

/* The rows of a query, every cell as text (NULL for SQL NULL). */
struct be_rows {
	int n, ncol;
	char **cell; /* owned, n * ncol */
};

/* Runs a query that must work; its rows into *out, freed by be_rows_free. */
void be_query_rows(struct be_conn *c, const char *sql, struct be_rows *out);
void be_rows_free(struct be_rows *r);

/* The cell at row, col, which must exist (borrowed from r). */
const char *be_cell(const struct be_rows *r, int row, int col);

/* The cell at row, col as an integer; it must not be NULL. */
int64_t be_cell_int(const struct be_rows *r, int row, int col);

/* The one integer a query returns. */
int64_t be_query_int(struct be_conn *c, const char *sql);

/* How many columns `table` has among `names` (quoted and comma-separated,
 * as in SQL; all of them when NULL): pragma_table_info on SQLite,
 * information_schema in the current schema on PostgreSQL. */
int64_t be_n_columns(struct be_conn *c, const char *table, const char *names);

/* PostgreSQL: how many columns of the current schema are of data_type `type`
 * and match the SQL condition `where`. */
int64_t be_pg_n_typed(struct be_conn *c, const char *type, const char *where);

/* How many indexes `table` has, unique ones only when `unique`: all of
 * pragma_index_list on SQLite, all but the primary key on PostgreSQL. */
int64_t be_n_indexes(struct be_conn *c, const char *table, int unique);

/* ---- connection runs: a plugin test's fixture ---------------------------- */

struct be_fx;

/* What a second instance does on its own thread (be_race): a call of the
 * plugin on f->more[0], with the reason to f->race_err; returns the
 * verdict. arg is the test's, and must outlive the test (a literal). */
typedef int be_race_fn(struct be_fx *f, const void *arg);

/*
 * Per test: a fresh database (SQLite: node.db in a new directory under
 * $TMPDIR; PostgreSQL: a new schema of the run's database), the plugin
 * loaded with dlopen and inited on it.
 */
struct be_fx {
	const char *name; /* the plugin's: "bill" (borrowed) */
	char dir[1024];   /* SQLite: the test's directory */
	char schema[32];  /* PostgreSQL: this test's schema */
	char schema2[40]; /* PostgreSQL: "other", for a second database */
	struct be_conn c; /* the node's connection; closed once a test did */
	struct semq_plugin_tx tx; /* on c */
	void *dl;                 /* dlopen handle of the plugin */
	semq_plugin_abi_version_fn abi;
	semq_plugin_init_fn init;
	semq_plugin_handle_fn handle;
	semq_plugin_fini_fn fini;
	void *h; /* the plugin handle; NULL once a test finalised it */
	char err[BE_ERRSZ];
	/* A second instance, for the tests that race two; kept here so that
	 * teardown ends it even when an assertion left the test early. */
	struct be_conn more[2]; /* its connection and a watcher */
	void *h2;               /* its plugin handle (finalised by teardown) */
	be_race_fn *race_fn;    /* its call on `thread`, when `racing` */
	const void *race_arg;
	pthread_t thread;
	int racing;
	int race_rc;             /* the call's verdict, once joined */
	char race_err[BE_ERRSZ]; /* and its reason */
	int race_done;           /* set (atomically) when it returned */
};

/* cmocka setup: a struct be_fx into *state for plugin `name` (borrowed),
 * loaded from the file `so`. 0 or -1. */
int be_fx_setup(void **state, const char *name, const char *so);

/* cmocka teardown: ends what the test left (the second instance's thread
 * too), unloads the plugin and removes the test's database. 0, or -1 when
 * the node's connection could not be closed or the schema dropped. */
int be_fx_teardown(void **state);

/* Runs init on c with the given options, as the host does; the handle goes
 * to *out (caller finalises), the reason of a refusal to f->err. */
int be_init_on(struct be_fx *f, struct be_conn *c,
	       const struct semq_plugin_option *opts, size_t n, void **out);

/* Opens c (caller closes) on the test's database again. 0 or -1. */
int be_open_again(struct be_fx *f, struct be_conn *c);

/* Opens c (caller closes) on a second, empty database of the test: SQLite,
 * other.db beside node.db; PostgreSQL, the schema f->schema2, created here.
 * 0 or -1. */
int be_open_other(struct be_fx *f, struct be_conn *c);

/* PostgreSQL: opens the second instance's connection and its watcher
 * (f->more) on the test's database. 0 or -1. */
int be_second_open(struct be_fx *f);

/* Starts fn(f, arg) on f->thread, the second instance racing the first. */
void be_race(struct be_fx *f, be_race_fn *fn, const void *arg);

/* A be_race_fn: the second instance starting, init on f->more[0]; its
 * handle to f->h2. */
int be_race_init(struct be_fx *f, const void *arg);

/* Has the racing call returned? */
int be_race_done(struct be_fx *f);

/* PostgreSQL: does the racing call wait on a lock? Asked through f->more[1]
 * every 10 ms, for up to 30 s or until the call returned. 1 or 0. */
int be_race_waits(struct be_fx *f);

/* Waits for the racing call to return: then f->race_rc and f->race_err. */
void be_race_join(struct be_fx *f);

/* ---- connection runs: what every plugin does alike ----------------------- */

/* init with the options opts[0..n) is refused, PERMANENT and without a
 * handle, with exactly `want`. */
void be_check_init_refused(struct be_fx *f,
			   const struct semq_plugin_option *opts, size_t n,
			   const char *want);

/*
 * init refuses, PERMANENT and without a handle, a transaction of a database
 * kind it does not know (7) with "<name>: unknown database kind 7 (1 SQLite,
 * 2 PostgreSQL)", and none at all with "<name>: init called without a
 * database".
 */
void be_check_init_needs_db(struct be_fx *f);

/*
 * fini of f->h (after the test's calls) finalises every statement, so that
 * SQLite closes the node's connection afterwards without BUSY, and never
 * touches the connection, so that on PostgreSQL it runs after the host
 * closed it (ASan would catch a use after PQfinish); fini(NULL) does
 * nothing. Leaves f->h NULL and f->c closed.
 */
void be_check_fini(struct be_fx *f);

/* PostgreSQL: the server ends the session of f->c, as a restart or a
 * failover does; the backend pid it had. */
int be_pg_end_session(struct be_fx *f);

/* A plugin's reason err starts with `before`, says more and is one line. */
void be_check_reason(const char *err, const char *before);

/* PostgreSQL: PQreset of f->c, the host's reconnect (the same PGconn *),
 * gives a session other than that of backend `pid`. */
void be_pg_reset(struct be_fx *f, int pid);

#endif
