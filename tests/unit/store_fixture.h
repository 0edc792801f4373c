/* SPDX-License-Identifier: MIT */
/*
 * The fixture the unit tests of the store (node/store.h) share, one file of
 * tests per file of the store (tests/unit/test_store_<concern>.c), run
 * together by test_store (tests/unit/test_store.c, the main).
 *
 * The back end: SQLite by default (each test gets a database file in a fresh
 * mkdtemp directory under $TMPDIR); with --pg (or SEMQ_TEST_BACKEND=pg)
 * PostgreSQL: one database per run, created from SEMQ_TEST_PG_URL and
 * dropped at the end, and a fresh schema per test that the store reaches
 * through search_path in its URL. Without SEMQ_TEST_PG_URL the PostgreSQL
 * run says so loudly and exits 77 (skipped). The plugin is played by apply
 * callbacks that write to a table `effect` through tx->db (a `sqlite3 *` or
 * a `PGconn *`) and then return what the test asks for; tests read tables
 * through small helpers that speak to either. The back-end plumbing is
 * tests/unit/backend.c.
 *
 * What is here is what more than one file of tests uses; a helper of one
 * file's tests only is a static of that file. The helpers check with
 * cmocka's assertions, so they run inside a test.
 */
#ifndef SEMQ_TEST_STORE_FIXTURE_H
#define SEMQ_TEST_STORE_FIXTURE_H

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <semq/error.h>
#include <semq/plugin.h>

#include "backend.h"
#include "store.h"
#include "types.h"

#define NOW INT64_C(1700000000000)

/* "s1,s2,...": the seq column of TABLE's rows (WHERE clause W), in the order
 * they were written (id). */
#define SEQS(table, w)                                                         \
	be_sql("SELECT group_concat(seq) FROM (SELECT seq FROM " table " " w   \
	       " ORDER BY id)",                                                \
	       "SELECT string_agg(seq::text, ',' ORDER BY id) FROM " table     \
	       " " w)

/* Two lives of R1 (not this node's): numbered so that the one that began
 * here later has the smaller number. */
#define LIFE_A UINT64_C(0x1a2b3c4d5e6f7)
#define LIFE_B UINT64_C(0x0badcafe)

/* ---- the groups of tests ------------------------------------------------- */

/* A test of the store with the fixture's setup and teardown. */
#define STORE_TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

/* The tests of each file (test_store_<concern>.c) and their number. Every
 * group but the last runs on both back ends; store_pg_instances_tests runs
 * on PostgreSQL only. */
extern const struct CMUnitTest store_open_tests[];
extern const size_t store_open_ntests;
extern const struct CMUnitTest store_apply_tests[];
extern const size_t store_apply_ntests;
extern const struct CMUnitTest store_in_tests[];
extern const size_t store_in_ntests;
extern const struct CMUnitTest store_redo_tests[];
extern const size_t store_redo_ntests;
extern const struct CMUnitTest store_verbs_tests[];
extern const size_t store_verbs_ntests;
extern const struct CMUnitTest store_out_tests[];
extern const size_t store_out_ntests;
extern const struct CMUnitTest store_custody_tests[];
extern const size_t store_custody_ntests;
extern const struct CMUnitTest store_stat_tests[];
extern const size_t store_stat_ntests;
extern const struct CMUnitTest store_trace_tests[];
extern const size_t store_trace_ntests;
extern const struct CMUnitTest store_pg_instances_tests[];
extern const size_t store_pg_instances_ntests;

/* ---- the fixture --------------------------------------------------------- */

struct fx {
	char dir[PATH_MAX];
	char path[PATH_MAX + 16]; /* a file, or a URL with its schema */
	char schema[32];          /* PostgreSQL: this test's schema */
	struct store *st;         /* owned; closed by teardown */
	struct store *st2;        /* owned: a second instance, if any */
};

/* cmocka setup and teardown: a struct fx into *state with a fresh database
 * (a directory or a schema); teardown closes the stores and removes it. */
int setup(void **state);
int teardown(void **state);

/* The node and life of the store the test opened last (open_ok): ids of
 * its own messages carry its life, the others the legacy life. */
extern char own_node[SEMQ_ID_MAX + 1];
extern uint64_t own_life;

/* A statement on the run's database (schemas, another connection's view). */
void admin_run(const char *sql);

/* The store's own connection (tx->db), checked to be of the kind tested. */
void *dbof(struct store *st);

/* Runs sql on the store's connection; the test fails unless it works. */
void exec(struct store *st, const char *sql);

/* First column of the first row of sql, as an integer (-999 when none). */
int64_t q1(struct store *st, const char *sql);

/* The same as text, into buf ("" when none). */
const char *q1s(struct store *st, const char *sql, char *buf, size_t bufsz);

/* store_open of fx->path as `node` with the options extra (NULL: none but
 * synchronous = -1) into *out; the reason into err (SEMQ_ERRLEN bytes). */
int open_opts(struct fx *fx, const char *node, const struct store_opts *extra,
	      struct store **out, char *err);

/* Opens fx->path as `node` (must work) with the `effect` test table. */
struct store *open_ok(struct fx *fx, const char *node,
		      const struct store_opts *extra);

/* Closes fx->st and opens it again (open_ok). */
void reopen(struct fx *fx, const char *node, const struct store_opts *extra);

/* ---- the plugin stand-in ------------------------------------------------ */

struct applier {
	int verdicts[16]; /* returned in order; then SEMQ_PLUGIN_OK */
	int n_verdicts, next;
	int calls;
	unsigned tries[16]; /* `tries` of each call */
	const char *why;    /* err text on failure; NULL = leave it empty */
	int end_tx;         /* COMMIT from inside the plugin (misbehave) */
	int bad_sql;        /* run failing SQL, ignore it, return OK */
	int in_thread;      /* called off the test's thread: record, no
			       cmocka asserts (they jump) */
	char fault[256];    /* in_thread: what went wrong, "" if nothing */
};

/* The plugin's apply (ctx: a struct applier): writes a row to `effect`,
 * then returns the next of the applier's verdicts. */
int apply_cb(void *ctx, const struct msg *m, unsigned tries,
	     const struct semq_plugin_tx *tx, char *err, size_t errsz);

/* Appends n verdicts (ints) to a's. */
void verdicts(struct applier *a, int n, ...);

/* A message origin/dest/seq of type 2800 ("document"), with key (when not
 * NULL) and prev_seq; its life is own_life when origin is own_node. */
void mkmsg(struct msg *m, const char *origin, const char *dest, uint64_t seq,
	   const char *key, uint64_t prev_seq);

/* The id origin/dest/seq, with the life mkmsg gives. */
void mkid(struct msgid *id, const char *origin, const char *dest, uint64_t seq);

/* Receives m and checks the return code and result. */
void recv_expect(struct store *st, const struct msg *m, struct applier *a,
		 int64_t now, int want_r, int want_res);

/* m with another payload: another message (another digest). */
void other_content(struct msg *m);

/* store_lookup_received of id says want_received, and then want_res. */
void lookup_expect(struct store *st, const struct msgid *id, int want_received,
		   int want_res);

/* ---- collecting listings ---------------------------------------------- */

struct redo_seen {
	int n;
	int64_t id[32];
	uint64_t seq[32];
	int status[32];
};

/* A listing's callback of tb_0033 (ctx: a struct redo_seen). */
int redo_collect(void *ctx, const struct msg *m, const struct redo_row *row);

/* The tb_0033 entry of one seq (any stream), through store_redo_get. */
int64_t redo_id_of(struct store *st, uint64_t seq);

/* Entry id has status, tries and level, next_at (when >= 0) and
 * last_error (NULL: none). */
void redo_expect(struct store *st, int64_t id, int status, int tries, int level,
		 int64_t next_at, const char *last_error);

struct out_seen {
	int n;
	char dest[64][SEMQ_ID_MAX + 1];
	uint64_t seq[64];
	int status[64];
	int stop_after;     /* return 1 after this many rows (0 = never) */
	struct store *st;   /* when set: re-enter the store from the callback */
	int mark_sent;      /* ... marking each row sent */
	int nested_listing; /* ... listing tb_0031 again */
	int nested_n;
};

/* A listing's callback of tb_0031 (ctx: a struct out_seen). */
int out_collect(void *ctx, const struct msg *m, const struct out_row *row);

/* ---- the outbound queue -------------------------------------------------- */

/* Enqueues a message to dest (key: NULL for none) as the application does;
 * its seq. */
uint64_t enqueue(struct store *st, const char *dest, const char *key);

/* Row origin/dest/seq of tb_0031 has status. */
void out_expect_status(struct store *st, const char *origin, const char *dest,
		       uint64_t seq, int status);

/* The id of this node's row dest/seq, with a digest. */
struct msgid own_id(const char *dest, uint64_t seq, uint64_t digest);

/* One outbound row: its status, type, prev_seq, result, last_error. */
struct out_line {
	int status, result;
	uint32_t type;
	uint64_t prev_seq, digest;
	int64_t next_at;
	char last_error[SEMQ_ERRLEN];
};

/* Row origin/dest/seq of tb_0031 into *l; SEMQ_OK or what
 * store_outbound_get said. */
int out_line(struct store *st, const char *origin, const char *dest,
	     uint64_t seq, struct out_line *l);

/* Moves this node's row dest/seq on: SS_SEND (sent at `at`), SS_ACK (acked
 * by a relay, or in the custody of `relay` when not NULL), SS_ACK2
 * (confirmed), SS_CANCELLED. */
void mark(struct store *st, const char *dest, uint64_t seq, int what,
	  const char *relay, int64_t at);

/* ---- watermarks ---------------------------------------------------------- */

/* store_ack_response of R1/S1/seq with bit says want_ok. */
void ack(struct store *st, uint64_t seq, unsigned bit, int want_ok);

/* ---- counts without scans (semq_counts, schema 5) ------------------------ */

/*
 * What the counts say (store_counts, store_counts_waiting,
 * store_counts_custody) is what counting the rows says (store_stats, a
 * GROUP BY over the tables; store_custody_waiting, store_custody_list).
 * The oldest rows are compared where both read the same row.
 */
void counts_agree(struct store *st, const char *when);

/* The count of one line of store_counts (0 when there is none) and its
 * oldest. */
int64_t count_of(struct store *st, const char *table, const char *origin,
		 const char *dest, int status, int64_t *oldest);

/* The statements a read ran (their SQL) and the virtual machine steps they
 * took: sqlite3_trace_v2's profile event, at the end of each run. */
struct read_trace {
	int n;
	char sql[24][4096];
	int64_t steps;
};

/* sqlite3_trace_v2's callback (ctx: a struct read_trace). */
int read_trace_cb(unsigned type, void *ctx, void *p, void *x);

#endif
