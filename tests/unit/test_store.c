/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the store (node/store.h) on real databases: opening and
 * migrating, the exactly-once receive path with plugin failures rolled back
 * to their savepoint, key order through the redo queue, the outbound state
 * machine, custody at a relay and an origin's undeliverable messages, and
 * watermark compaction; on PostgreSQL also several instances
 * (stores) on one database: one effect when two receive the same message,
 * one run when two run the same redo entry, compaction that never waits for
 * a stream another instance holds, a lost connection.
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
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <semq/error.h>
#include <semq/plugin.h>

#include "backend.h"
#include "migrations.h"
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

/* A statement on the run's database (schemas, another connection's view). */
static void admin_run(const char *sql)
{
	char msg[512];

	if (be_pg_run(be_admin(), sql, msg, sizeof msg))
		fail_msg("%s: %s", sql, msg);
}

/* The node and life of the store the test opened last (open_ok): ids of
 * its own messages carry its life, the others the legacy life. */
static char own_node[SEMQ_ID_MAX + 1];
static uint64_t own_life;

struct fx {
	char dir[PATH_MAX];
	char path[PATH_MAX + 16]; /* a file, or a URL with its schema */
	char schema[32];          /* PostgreSQL: this test's schema */
	struct store *st;         /* owned; closed by teardown */
	struct store *st2;        /* owned: a second instance, if any */
};

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *fx = calloc(1, sizeof *fx);
	char why[600];

	if (!fx)
		return -1;
	*state = fx;
	if (be_pg()) {
		if (be_schema_new(fx->schema, sizeof fx->schema, fx->path,
				  sizeof fx->path, why, sizeof why)) {
			fprintf(stderr, "%s", why);
			free(fx);
			return -1;
		}
		return 0;
	}
	snprintf(fx->dir, sizeof fx->dir, "%s/store-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(fx->dir)) {
		free(fx);
		return -1;
	}
	snprintf(fx->path, sizeof fx->path, "%s/node.db", fx->dir);
	return 0;
}

static int teardown(void **state)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	struct fx *fx = *state;
	char p[PATH_MAX + 32];
	size_t i;

	store_free(fx->st);
	store_free(fx->st2);
	if (be_pg()) {
		be_schema_drop(fx->schema);
		free(fx);
		return 0;
	}
	for (i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
		snprintf(p, sizeof p, "%s%s", fx->path, sfx[i]);
		unlink(p);
	}
	rmdir(fx->dir);
	free(fx);
	return 0;
}

/* The store's own connection (tx->db), checked to be of the kind tested. */
static void *dbof(struct store *st)
{
	const struct semq_plugin_tx *tx = store_plugin_tx(st);

	assert_non_null(tx);
	assert_int_equal(tx->db_kind, be_pg() ? SEMQ_DB_PG : SEMQ_DB_SQLITE);
	assert_non_null(tx->db);
	return tx->db;
}

static void exec(struct store *st, const char *sql)
{
	char *e = NULL, msg[512];

	if (be_pg()) {
		if (be_pg_run(dbof(st), sql, msg, sizeof msg))
			fail_msg("%s: %s", sql, msg);
		return;
	}
	if (sqlite3_exec(dbof(st), sql, NULL, NULL, &e) != SQLITE_OK)
		fail_msg("%s: %s", sql, e ? e : "?");
}

/* The first column of the first row of sql as text into buf (NULL when
 * there is none: no row, or NULL). */
static const char *q1_text(struct store *st, const char *sql, char *buf,
			   size_t bufsz)
{
	sqlite3_stmt *s = NULL;
	const char *v = NULL;

	buf[0] = '\0';
	if (be_pg()) {
		PGresult *res = PQexec(dbof(st), sql);

		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			snprintf(buf, bufsz, "%s", PQerrorMessage(dbof(st)));
			PQclear(res);
			fail_msg("%s: %s", sql, buf);
		}
		if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0)) {
			snprintf(buf, bufsz, "%s", PQgetvalue(res, 0, 0));
			v = buf;
		}
		PQclear(res);
		return v;
	}
	if (sqlite3_prepare_v2(dbof(st), sql, -1, &s, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(dbof(st)));
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) {
		snprintf(buf, bufsz, "%s",
			 (const char *)sqlite3_column_text(s, 0));
		v = buf;
	}
	sqlite3_finalize(s);
	return v;
}

/* First column of the first row of sql, as an integer (-999 when none). */
static int64_t q1(struct store *st, const char *sql)
{
	char buf[64];

	return q1_text(st, sql, buf, sizeof buf) ? strtoll(buf, NULL, 10)
						 : -999;
}

/* The same as text, into buf ("" when none). */
static const char *q1s(struct store *st, const char *sql, char *buf,
		       size_t bufsz)
{
	q1_text(st, sql, buf, bufsz);
	return buf;
}

/* How many migrations the back end under test has. */
static size_t n_migrations(void)
{
	return be_pg() ? semq_pg_n_migrations : semq_n_migrations;
}

static int open_opts(struct fx *fx, const char *node,
		     const struct store_opts *extra, struct store **out,
		     char *err)
{
	struct store_opts o = {.synchronous = -1};

	if (extra)
		o = *extra;
	o.path = fx->path;
	o.node_id = node;
	err[0] = '\0';
	return store_open(&o, out, err, SEMQ_ERRLEN);
}

/* Opens fx->path as `node` (must work) with the `effect` test table. */
static struct store *open_ok(struct fx *fx, const char *node,
			     const struct store_opts *extra)
{
	char err[SEMQ_ERRLEN];
	int r = open_opts(fx, node, extra, &fx->st, err);

	if (r != SEMQ_OK)
		fail_msg("store_open: %d %s", r, err);
	snprintf(own_node, sizeof own_node, "%s", node);
	own_life = store_life(fx->st);
	exec(fx->st, be_sql("CREATE TABLE IF NOT EXISTS effect(id INTEGER"
			    " PRIMARY KEY, origin TEXT, dest TEXT, seq INTEGER,"
			    " tries INTEGER)",
			    "CREATE TABLE IF NOT EXISTS effect(id BIGSERIAL"
			    " PRIMARY KEY, origin TEXT, dest TEXT, seq BIGINT,"
			    " tries BIGINT)"));
	return fx->st;
}

static void reopen(struct fx *fx, const char *node,
		   const struct store_opts *extra)
{
	store_free(fx->st);
	fx->st = NULL;
	open_ok(fx, node, extra);
}

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

/* The plugin's write: a row in `effect` through the open transaction;
 * 0, or -1 with why in msg. */
static int effect_insert(const struct semq_plugin_tx *tx, const struct msg *m,
			 unsigned tries, char *msg, size_t msgsz)
{
	char seq[24], tr[24];
	int r = -1;

	snprintf(seq, sizeof seq, "%llu", (unsigned long long)m->id.seq);
	snprintf(tr, sizeof tr, "%u", tries);
	if (tx->db_kind == SEMQ_DB_PG) {
		const char *v[4] = {m->id.origin, m->id.dest, seq, tr};
		PGresult *res = PQexecParams(
			tx->db,
			"INSERT INTO effect(origin, dest, seq, tries)"
			" VALUES ($1, $2, $3, $4)",
			4, NULL, v, NULL, NULL, 0);

		if (PQresultStatus(res) == PGRES_COMMAND_OK)
			r = 0;
		else
			snprintf(msg, msgsz, "%s", PQerrorMessage(tx->db));
		PQclear(res);
	} else {
		sqlite3_stmt *s = NULL;

		if (sqlite3_prepare_v2(tx->db,
				       "INSERT INTO effect(origin, dest, seq,"
				       " tries) VALUES (?1, ?2, ?3, ?4)",
				       -1, &s, NULL) == SQLITE_OK) {
			sqlite3_bind_text(s, 1, m->id.origin, -1,
					  SQLITE_STATIC);
			sqlite3_bind_text(s, 2, m->id.dest, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, 3, (sqlite3_int64)m->id.seq);
			sqlite3_bind_int(s, 4, (int)tries);
			if (sqlite3_step(s) == SQLITE_DONE)
				r = 0;
		}
		if (r)
			snprintf(msg, msgsz, "%s", sqlite3_errmsg(tx->db));
		sqlite3_finalize(s);
	}
	return r;
}

/* Runs SQL through the plugin's connection, ignoring the outcome. */
static void plugin_sql(const struct semq_plugin_tx *tx, const char *sql)
{
	if (tx->db_kind == SEMQ_DB_PG)
		PQclear(PQexec(tx->db, sql));
	else
		sqlite3_exec(tx->db, sql, NULL, NULL, NULL);
}

static int apply_cb(void *ctx, const struct msg *m, unsigned tries,
		    const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	struct applier *a = ctx;
	char msg[256] = "";
	int v = a->next < a->n_verdicts ? a->verdicts[a->next++]
					: SEMQ_PLUGIN_OK;
	int want = be_pg() ? SEMQ_DB_PG : SEMQ_DB_SQLITE;

	if (a->calls < 16)
		a->tries[a->calls] = tries;
	a->calls++;
	if (tx->db_kind != want || !tx->db)
		snprintf(msg, sizeof msg, "tx: kind %d, db %p; want kind %d",
			 tx->db_kind, tx->db, want);
	/* The effect is written first in every case: a failure must roll it
	 * back. */
	else
		effect_insert(tx, m, tries, msg, sizeof msg);
	if (msg[0]) {
		if (!a->in_thread)
			fail_msg("apply %s/%s/%llu: %s", m->id.origin,
				 m->id.dest, (unsigned long long)m->id.seq,
				 msg);
		snprintf(a->fault, sizeof a->fault, "%s", msg);
	}
	if (a->bad_sql)
		plugin_sql(tx, "SELECT * FROM no_such_table");
	if (a->end_tx)
		plugin_sql(tx, "COMMIT");
	if (v != SEMQ_PLUGIN_OK && a->why)
		snprintf(err, errsz, "%s", a->why);
	return v;
}

static void verdicts(struct applier *a, int n, ...)
{
	va_list ap;
	int i;

	va_start(ap, n);
	for (i = 0; i < n; i++)
		a->verdicts[a->n_verdicts++] = va_arg(ap, int);
	va_end(ap);
}

static uint64_t life_of(const char *origin)
{
	return strcmp(origin, own_node) == 0 ? own_life : SEMQ_LIFE_LEGACY;
}

static void mkmsg(struct msg *m, const char *origin, const char *dest,
		  uint64_t seq, const char *key, uint64_t prev_seq)
{
	static uint8_t body[] = "document";

	memset(m, 0, sizeof *m);
	snprintf(m->id.origin, sizeof m->id.origin, "%s", origin);
	snprintf(m->id.dest, sizeof m->id.dest, "%s", dest);
	m->id.seq = seq;
	m->id.life = life_of(origin);
	m->type = 2800;
	if (key) {
		m->has_key = 1;
		snprintf(m->key, sizeof m->key, "%s", key);
	}
	m->prev_seq = prev_seq;
	m->created_at = NOW - 1000;
	m->payload = body;
	m->payload_len = sizeof body - 1;
}

static void mkid(struct msgid *id, const char *origin, const char *dest,
		 uint64_t seq)
{
	memset(id, 0, sizeof *id);
	snprintf(id->origin, sizeof id->origin, "%s", origin);
	snprintf(id->dest, sizeof id->dest, "%s", dest);
	id->seq = seq;
	id->life = life_of(origin);
}

/* Receives m and checks the return code and result. */
static void recv_expect(struct store *st, const struct msg *m,
			struct applier *a, int64_t now, int want_r,
			int want_res)
{
	char err[SEMQ_ERRLEN] = "";
	int res = -7;
	int r = store_receive(st, m, NULL, CONFIRM_ORIGIN, now, apply_cb, a,
			      &res, err, sizeof err);

	if (r != want_r)
		fail_msg("receive seq %llu: %d (%s), wanted %d",
			 (unsigned long long)m->id.seq, r, err, want_r);
	assert_int_equal(res, want_res);
}

/*
 * PostgreSQL: busy_timeout_ms is the lock_timeout. While another connection
 * holds a stream's row, a receive on that stream waits at least busy_ms and
 * then fails cleanly (naming the lock timeout); once it is free, it works.
 */
static void expect_lock_wait(struct fx *fx, struct store *st, int busy_ms)
{
	PGconn *other = PQconnectdb(fx->path);
	struct applier a = {0};
	struct timespec t0, t1;
	struct msg m;
	char err[SEMQ_ERRLEN] = "", msg[512];
	int64_t waited_ms;
	int res;

	assert_int_equal(PQstatus(other), CONNECTION_OK);
	if (be_pg_run(other,
		      "BEGIN; INSERT INTO semq_stream_in(origin, dest, life)"
		      " VALUES ('R9', 'S1', 1); SELECT * FROM semq_stream_in"
		      " WHERE origin = 'R9' FOR UPDATE",
		      msg, sizeof msg))
		fail_msg("locking R9/S1: %s", msg);
	mkmsg(&m, "R9", "S1", 1, NULL, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(store_receive(st, &m, NULL, CONFIRM_ORIGIN, NOW,
				       apply_cb, &a, &res, err, sizeof err),
			 SEMQ_ERR_DB);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	waited_ms = (t1.tv_sec - t0.tv_sec) * 1000 +
		    (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(waited_ms >= busy_ms - 5);
	assert_non_null(strstr(err, "lock timeout"));
	assert_int_equal(a.calls, 0);
	assert_int_equal(be_pg_run(other, "ROLLBACK", msg, sizeof msg), 0);
	PQfinish(other);
	/* free again: the same message goes through */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
}

/* ---- collecting listings ---------------------------------------------- */

struct redo_seen {
	int n;
	int64_t id[32];
	uint64_t seq[32];
	int status[32];
};

static int redo_collect(void *ctx, const struct msg *m,
			const struct redo_row *row)
{
	struct redo_seen *c = ctx;

	assert_true(c->n < 32);
	c->id[c->n] = row->id;
	c->seq[c->n] = m->id.seq;
	c->status[c->n] = row->status;
	c->n++;
	return 0;
}

/* The tb_0033 entry of one seq (any stream), through store_redo_get. */
static int64_t redo_id_of(struct store *st, uint64_t seq)
{
	struct redo_seen c = {0};
	int i;

	assert_int_equal(store_redo_list(st, -100, 100, redo_collect, &c),
			 SEMQ_OK);
	for (i = 0; i < c.n; i++)
		if (c.seq[i] == seq)
			return c.id[i];
	fail_msg("no redo entry for seq %llu", (unsigned long long)seq);
	return -1;
}

static void redo_expect(struct store *st, int64_t id, int status, int tries,
			int level, int64_t next_at, const char *last_error)
{
	struct msg m;
	struct redo_row row;

	assert_int_equal(store_redo_get(st, id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, status);
	assert_int_equal(row.tries, tries);
	assert_int_equal(row.level, level);
	if (next_at >= 0)
		assert_int_equal(row.next_attempt_at, next_at);
	if (last_error) {
		assert_non_null(row.last_error);
		assert_string_equal(row.last_error, last_error);
	} else {
		assert_null(row.last_error);
	}
	msg_clear(&m);
}

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

static int out_count(void *ctx, const struct msg *m, const struct out_row *row)
{
	(void)m;
	(void)row;
	((struct out_seen *)ctx)->nested_n++;
	return 0;
}

static int out_collect(void *ctx, const struct msg *m,
		       const struct out_row *row)
{
	struct out_seen *c = ctx;

	assert_true(c->n < 64);
	snprintf(c->dest[c->n], sizeof c->dest[c->n], "%s", m->id.dest);
	c->seq[c->n] = m->id.seq;
	c->status[c->n] = row->status;
	c->n++;
	if (c->st && c->mark_sent)
		assert_int_equal(store_mark_sent(c->st, &m->id, NOW, NOW + 1),
				 SEMQ_OK);
	if (c->st && c->nested_listing)
		assert_int_equal(
			store_outbound_list(c->st, -100, 100, out_count, c),
			SEMQ_OK);
	return c->stop_after && c->n >= c->stop_after;
}

/* What the node's next batch does with the application's new rows. */
static void number(struct store *st)
{
	unsigned n = 0;
	int more = 1;

	while (more)
		assert_int_equal(
			store_number_new(st, NOW, 100000, 1, &n, &more),
			SEMQ_OK);
}

static uint64_t enqueue(struct store *st, const char *dest, const char *key)
{
	struct msg m;
	char err[SEMQ_ERRLEN] = "";
	uint64_t seq = 0;

	mkmsg(&m, "", dest, 0, key, 0);
	if (store_enqueue(st, &m, &seq, err, sizeof err) != SEMQ_OK)
		fail_msg("enqueue: %s", err);
	return seq;
}

static void out_expect_status(struct store *st, const char *origin,
			      const char *dest, uint64_t seq, int status)
{
	struct msgid id;
	struct msg m;
	struct out_row row;

	mkid(&id, origin, dest, seq);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, status);
	msg_clear(&m);
}

/* ---- opening ------------------------------------------------------------ */

/*
 * The store's busy handler: while another connection holds the write lock,
 * a batch waits at least busy_ms before it gives up (a lower bound only: a
 * slow machine makes it later, never a failure), then fails cleanly.
 */
static void expect_busy_wait(struct fx *fx, struct store *st, int busy_ms)
{
	sqlite3 *other = NULL;
	struct timespec a, b;
	int64_t waited_ms;

	assert_int_equal(sqlite3_open(fx->path, &other), SQLITE_OK);
	assert_int_equal(
		sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL),
		SQLITE_OK);
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_not_equal(store_begin(st), SEMQ_OK);
	clock_gettime(CLOCK_MONOTONIC, &b);
	waited_ms = (b.tv_sec - a.tv_sec) * 1000 +
		    (b.tv_nsec - a.tv_nsec) / 1000000;
	assert_true(waited_ms >= busy_ms - 5);
	assert_int_equal(store_in_batch(st), 0);
	sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(other);
	/* the lock is free again: the store works */
	assert_int_equal(store_begin(st), SEMQ_OK);
	assert_int_equal(store_rollback(st), SEMQ_OK);
}

static void test_open_creates_and_migrates(void **state)
{
	struct fx *fx = *state;
	struct store_opts o = {.synchronous = 1, .busy_timeout_ms = 1234};
	struct store *st = open_ok(fx, "S1", NULL);
	struct msgid id;
	struct msg m;
	struct out_row row;
	char buf[128];
	uint64_t seq;

	assert_true(store_schema_latest() >= 1);
	assert_int_equal(store_schema_version(st), store_schema_latest());
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_schema"),
			 (int64_t)n_migrations());
	assert_int_equal(q1(st, "SELECT max(version) FROM semq_schema"),
			 store_schema_latest());
	assert_true(q1(st, "SELECT applied_at FROM semq_schema") > NOW);
	assert_int_equal(
		q1(st, be_sql("SELECT count(*) FROM sqlite_master WHERE"
			      " name IN ('tb_0030', 'tb_0031',"
			      " 'tb_0033')",
			      "SELECT count(*) FROM pg_tables WHERE"
			      " schemaname = current_schema() AND"
			      " tablename IN ('tb_0030', 'tb_0031',"
			      " 'tb_0033')")),
		3);
	assert_string_equal(q1s(st,
				"SELECT value FROM semq_meta WHERE key ="
				" 'node_id'",
				buf, sizeof buf),
			    "S1");
	assert_int_equal(q1(st, "SELECT value FROM semq_meta WHERE key ="
				" 'max_payload'"),
			 16777216);
	if (be_pg()) {
		/* the default keeps the server's durable commits */
		assert_string_equal(
			q1s(st, "SHOW synchronous_commit", buf, sizeof buf),
			"on");
	} else {
		assert_string_equal(
			q1s(st, "PRAGMA journal_mode", buf, sizeof buf), "wal");
		assert_int_equal(q1(st, "PRAGMA foreign_keys"), 1);
		assert_int_equal(q1(st, "PRAGMA synchronous"), 2);
	}
	assert_int_equal(store_in_batch(st), 0);

	/* Reopening keeps the data and does not migrate again. */
	seq = enqueue(st, "R1", "K");
	assert_int_equal(seq, 1);
	o.max_payload = 1000;
	reopen(fx, "S1", &o);
	st = fx->st;
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_schema"),
			 (int64_t)n_migrations());
	if (be_pg()) {
		assert_string_equal(
			q1s(st, "SHOW synchronous_commit", buf, sizeof buf),
			"off");
		expect_lock_wait(fx, st, 1234);
	} else {
		assert_int_equal(q1(st, "PRAGMA synchronous"), 1);
		expect_busy_wait(fx, st, 1234);
	}
	assert_int_equal(q1(st, "SELECT value FROM semq_meta WHERE key ="
				" 'max_payload'"),
			 1000);
	mkid(&id, "S1", "R1", 1);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_string_equal(m.key, "K");
	assert_int_equal(m.payload_len, 8);
	assert_memory_equal(m.payload, "document", 8);
	msg_clear(&m);
	assert_int_equal(enqueue(st, "R1", NULL), 2);
}

static void test_open_other_node_refused(void **state)
{
	struct fx *fx = *state;
	struct store *st2 = NULL;
	char err[SEMQ_ERRLEN];

	open_ok(fx, "S1", NULL);
	store_free(fx->st);
	fx->st = NULL;
	assert_int_equal(open_opts(fx, "S2", NULL, &st2, err),
			 SEMQ_ERR_INVALID);
	assert_null(st2);
	assert_non_null(strstr(err, "'S1'"));
	assert_non_null(strstr(err, "'S2'"));
	assert_non_null(strstr(err, fx->path));
	/* The right id still opens it. */
	open_ok(fx, "S1", NULL);
}

static void test_open_newer_schema_refused(void **state)
{
	struct fx *fx = *state;
	struct store *st2 = NULL;
	char err[SEMQ_ERRLEN], want[64];

	open_ok(fx, "S1", NULL);
	exec(fx->st, "INSERT INTO semq_schema(version, name, applied_at)"
		     " VALUES (999, '0999_future.sql', 0)");
	store_free(fx->st);
	fx->st = NULL;
	assert_int_equal(open_opts(fx, "S1", NULL, &st2, err),
			 SEMQ_ERR_VERSION);
	assert_null(st2);
	assert_non_null(strstr(err, fx->path));
	assert_non_null(strstr(err, "schema version 999 is newer"));
	snprintf(want, sizeof want, "knows up to %d", store_schema_latest());
	assert_non_null(strstr(err, want));
	assert_non_null(strstr(err, "use a newer semqd"));
}

static void test_open_bad_files_and_options(void **state)
{
	struct fx *fx = *state;
	struct store_opts o = {.synchronous = -1};
	struct store *st2 = NULL;
	const int64_t levels[] = {100};
	char err[SEMQ_ERRLEN], buf[4096];
	FILE *f;

	if (be_pg()) {
		/* A server that is not there: named, its password not. */
		o.path = "postgresql://semq:s3cret@127.0.0.1:1/semq";
		o.node_id = "S1";
		assert_int_equal(store_open(&o, &st2, err, sizeof err),
				 SEMQ_ERR_DB);
		assert_null(st2);
		assert_non_null(
			strstr(err, "postgresql://semq:***@127.0.0.1:1/semq"));
		assert_null(strstr(err, "s3cret"));
		goto options;
	}
	/* A file that is not a database: named, not overwritten. */
	memset(buf, 'x', sizeof buf);
	f = fopen(fx->path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, sizeof buf, f), sizeof buf);
	fclose(f);
	assert_int_equal(open_opts(fx, "S1", NULL, &st2, err), SEMQ_ERR_DB);
	assert_null(st2);
	assert_non_null(strstr(err, fx->path));
	assert_non_null(strstr(err, "not a SEMQ database"));
	f = fopen(fx->path, "rb");
	assert_non_null(f);
	assert_int_equal(fread(buf, 1, sizeof buf, f), sizeof buf);
	fclose(f);
	assert_int_equal(buf[0], 'x');
	unlink(fx->path);

	/* A directory that does not exist. */
	o.path = "/nonexistent-semq-dir/node.db";
	o.node_id = "S1";
	assert_int_equal(store_open(&o, &st2, err, sizeof err), SEMQ_ERR_IO);
	assert_non_null(strstr(err, "/nonexistent-semq-dir/node.db"));

options:
	/* Options, each refused before the database is touched. */
	assert_int_equal(store_open(NULL, &st2, err, sizeof err),
			 SEMQ_ERR_INVALID);
	o.path = "";
	assert_int_equal(store_open(&o, &st2, err, sizeof err),
			 SEMQ_ERR_INVALID);
	o.path = fx->path;
	o.node_id = "not an id";
	assert_int_equal(store_open(&o, &st2, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_non_null(strstr(err, "node id"));
	o.node_id = "S1";
	o.synchronous = 4;
	assert_int_equal(store_open(&o, &st2, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_non_null(strstr(err, "synchronous"));
	o.synchronous = -1;
	o.redo_levels_ms = levels;
	o.n_redo_levels = 0;
	assert_int_equal(store_open(&o, &st2, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_non_null(strstr(err, "n_redo_levels"));
	assert_null(st2);
	if (be_pg()) {
		char sql[160];

		/* admin sees the schema from outside: nothing was made */
		snprintf(sql, sizeof sql,
			 "SELECT 1 FROM pg_tables WHERE schemaname = '%s'",
			 fx->schema);
		{
			PGresult *res = PQexec(be_admin(), sql);
			int n = PQntuples(res);

			PQclear(res);
			assert_int_equal(n, 0);
		}
	} else {
		assert_int_equal(access(fx->path, F_OK), -1);
	}
}

/* Several processes open a new file at the same moment: each succeeds and
 * the schema is applied once. */
static void test_open_concurrent_fresh(void **state)
{
	enum { N = 4 };
	struct fx *fx = *state;
	pid_t pids[N];
	int gate[2], i, status, failed = 0;

	assert_int_equal(pipe(gate), 0);
	for (i = 0; i < N; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct store_opts o = {.path = fx->path,
					       .node_id = "S1",
					       .synchronous = -1};
			struct store *st = NULL;
			char err[SEMQ_ERRLEN], c;
			int r;

			close(gate[1]);
			(void)!read(gate[0], &c, 1); /* EOF: all go at once */
			r = store_open(&o, &st, err, sizeof err);
			if (r != SEMQ_OK)
				fprintf(stderr, "child: %s\n", err);
			store_free(st);
			_exit(r == SEMQ_OK ? 0 : 1);
		}
	}
	close(gate[0]);
	close(gate[1]);
	/* Reap every child before judging, so none outlives the test. */
	for (i = 0; i < N; i++) {
		if (waitpid(pids[i], &status, 0) != pids[i] ||
		    !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	assert_int_equal(failed, 0);
	open_ok(fx, "S1", NULL);
	assert_int_equal(q1(fx->st, "SELECT count(*) FROM semq_schema"),
			 (int64_t)n_migrations());
	assert_int_equal(q1(fx->st, "SELECT count(*) FROM semq_meta WHERE"
				    " key = 'node_id'"),
			 1);
}

/* ---- receiving ---------------------------------------------------------- */

static void test_receive_processed(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct msg m;
	char err[SEMQ_ERRLEN];
	int rec = 0, res = -1;
	uint64_t w = 99;

	mkmsg(&m, "R1", "S1", 1, "K1", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.tries[0], 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 1);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030 WHERE seq = 1"),
			 RES_PROCESSED);
	assert_int_equal(q1(st, "SELECT ack_status FROM tb_0030"), AS_INIT);
	assert_int_equal(q1(st, "SELECT received_at FROM tb_0030"), NOW);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033"), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_stream_in WHERE"
				" origin = 'R1' AND dest = 'S1'"),
			 1);
	assert_int_equal(store_watermark(st, "R1", "S1", SEMQ_LIFE_LEGACY, &w),
			 SEMQ_OK);
	assert_int_equal(w, 0);
	assert_int_equal(store_lookup_received(st, &m.id, &rec, &res), SEMQ_OK);
	assert_int_equal(rec, 1);
	assert_int_equal(res, RES_PROCESSED);

	/* Via a relay that stored it: both recorded. */
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	assert_int_equal(store_receive(st, &m, "P1",
				       CONFIRM_ORIGIN | CONFIRM_RELAY, NOW,
				       apply_cb, &a, &res, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(q1(st, "SELECT confirm_need FROM tb_0030 WHERE"
				" seq = 2 AND via = 'P1'"),
			 3);
	/* Not received: a seq never seen. */
	m.id.seq = 3;
	assert_int_equal(store_lookup_received(st, &m.id, &rec, &res), SEMQ_OK);
	assert_int_equal(rec, 0);
}

static void test_receive_retry_rolls_back_plugin(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "backend busy"};
	struct msg m, got;
	struct redo_row row;
	char err[SEMQ_ERRLEN] = "";
	int res = -1;

	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, "K1", 0);
	assert_int_equal(store_receive(st, &m, NULL, CONFIRM_ORIGIN, NOW,
				       apply_cb, &a, &res, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(res, RES_REDO);
	assert_non_null(strstr(err, "backend busy"));
	assert_int_equal(a.calls, 1);
	/* The plugin's write is gone, the receipt stays, the redo entry is
	 * there: pending at the first level. */
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 0);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030 WHERE seq = 1"),
			 RES_REDO);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033"), 1);
	assert_int_equal(store_redo_get(st, redo_id_of(st, 1), &got, &row),
			 SEMQ_OK);
	assert_int_equal(row.status, RS_PENDING);
	assert_int_equal(row.tries, 1);
	assert_int_equal(row.next_attempt_at, NOW + 5000);
	assert_string_equal(row.last_error, "backend busy");
	assert_null(row.discard_reason);
	assert_int_equal(row.created_at, NOW);
	assert_int_equal(row.updated_at, NOW);
	assert_string_equal(got.id.origin, "R1");
	assert_int_equal(got.id.seq, 1);
	assert_int_equal(got.type, 2800);
	assert_string_equal(got.key, "K1");
	assert_int_equal(got.created_at, NOW - 1000);
	assert_int_equal(got.payload_len, 8);
	assert_memory_equal(got.payload, "document", 8);
	msg_clear(&got);

	/* A plugin that fails without a reason still leaves one. */
	a.why = NULL;
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	assert_int_equal(store_redo_get(st, redo_id_of(st, 2), &got, &row),
			 SEMQ_OK);
	assert_non_null(row.last_error);
	assert_non_null(strstr(row.last_error, "RETRY"));
	msg_clear(&got);
}

static void test_receive_permanent_goes_dead(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "bill: line 3: no price"};

	struct msg m;

	/* Any verdict that is not OK or RETRY counts as PERMANENT: recorded
	 * as REDO, answered DEAD (its entry is dead). */
	verdicts(&a, 2, SEMQ_PLUGIN_PERMANENT, 77);
	mkmsg(&m, "R1", "S1", 1, "K1", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 2, "K2", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030 WHERE"
				" result = 1"),
			 2);
	redo_expect(st, redo_id_of(st, 1), RS_DEAD, 1, 0, -1,
		    "bill: line 3: no price");
	redo_expect(st, redo_id_of(st, 2), RS_DEAD, 1, 0, -1,
		    "bill: line 3: no price");
}

static void test_receive_duplicate(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "x"};
	struct msg m;

	/* A second copy is answered with what it became the first time. */
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	recv_expect(st, &m, &a, NOW + 1, SEMQ_DUPLICATE, RES_PROCESSED);
	assert_int_equal(a.calls, 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 1);
	assert_int_equal(q1(st, "SELECT received_at FROM tb_0030"), NOW);

	/* One that went to redo is a duplicate too: in redo. */
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	recv_expect(st, &m, &a, NOW, SEMQ_DUPLICATE, RES_REDO);
	assert_int_equal(a.calls, 2);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033"), 1);

	/* Same seq, other stream: not a duplicate. */
	mkmsg(&m, "R2", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
}

static void test_duplicate_after_compaction(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct msg m;
	unsigned n = 99;
	int ok = 0, rec = 0, res = -1;
	uint64_t w = 0;

	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(store_ack_response(st, &m.id, CONFIRM_ORIGIN, &ok),
			 SEMQ_OK);
	assert_int_equal(ok, 1);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(store_watermark(st, "R1", "S1", SEMQ_LIFE_LEGACY, &w),
			 SEMQ_OK);
	assert_int_equal(w, 1);
	/* The watermark passed it; the row stays for the receipt retention,
	 * and a second copy is answered from it. */
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 1);
	recv_expect(st, &m, &a, NOW, SEMQ_DUPLICATE, RES_PROCESSED);

	/* Older than the retention: purged; only rows at or below their
	 * watermark go. */
	mkmsg(&m, "R1", "S1", 3, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(store_receipt_purge(st, NOW + 999, 1000, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 0);
	assert_int_equal(store_receipt_purge(st, NOW + 1001, 1000, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(q1(st, "SELECT min(seq) FROM tb_0030"), 3);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 1);

	/* Gone: a copy without a digest (a 0.1 sender) is a duplicate; one
	 * with a digest cannot be told apart and is refused undecided. */
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_DUPLICATE, RES_DUPLICATE);
	assert_int_equal(a.calls, 2);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 2);
	assert_int_equal(store_lookup_received(st, &m.id, &rec, &res), SEMQ_OK);
	assert_int_equal(rec, 1);
	assert_int_equal(res, RES_DUPLICATE);
	m.id.digest = semq_msg_digest(&m);
	recv_expect(st, &m, &a, NOW, SEMQ_DECLINED, RES_UNDECIDED);
	assert_int_equal(store_lookup_received(st, &m.id, &rec, &res), SEMQ_OK);
	assert_int_equal(rec, 1);
	assert_int_equal(res, RES_UNDECIDED);
	assert_int_equal(a.calls, 2);
	/* The row is gone: a late 810-Response is declined. */
	assert_int_equal(store_ack_response(st, &m.id, CONFIRM_ORIGIN, &ok),
			 SEMQ_DECLINED);
}

static void test_batch_commit_and_rollback(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct msg m;
	int rec = 1, res;
	uint64_t i;

	assert_int_equal(store_commit(st), SEMQ_ERR_INTERNAL);
	assert_int_equal(store_begin(st), SEMQ_OK);
	assert_int_equal(store_in_batch(st), 1);
	assert_int_equal(store_begin(st), SEMQ_ERR_INTERNAL);
	for (i = 1; i <= 3; i++) {
		mkmsg(&m, "R1", "S1", i, NULL, 0);
		recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	}
	assert_int_equal(enqueue(st, "R1", NULL), 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 3);
	assert_int_equal(store_rollback(st), SEMQ_OK);
	assert_int_equal(store_in_batch(st), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_stream_in"), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031"), 0);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	assert_int_equal(store_lookup_received(st, &m.id, &rec, &res), SEMQ_OK);
	assert_int_equal(rec, 0);
	/* A rolled back enqueue gives its seq back: no gap. */
	assert_int_equal(enqueue(st, "R1", NULL), 1);

	assert_int_equal(store_begin(st), SEMQ_OK);
	for (i = 1; i <= 3; i++) {
		mkmsg(&m, "R1", "S1", i, NULL, 0);
		recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	}
	assert_int_equal(store_commit(st), SEMQ_OK);
	assert_int_equal(store_in_batch(st), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 3);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 3);
	/* Rolling back with nothing open is harmless. */
	assert_int_equal(store_rollback(st), SEMQ_OK);

	/* Committed means durable: visible after reopening. */
	reopen(fx, "S1", NULL);
	assert_int_equal(q1(fx->st, "SELECT count(*) FROM tb_0030"), 3);
	assert_int_equal(q1(fx->st, "SELECT count(*) FROM effect"), 3);
}

static void test_plugin_ending_transaction(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.end_tx = 1};
	struct msg m;
	char err[SEMQ_ERRLEN] = "";
	int res = 0;

	assert_int_equal(store_begin(st), SEMQ_OK);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	assert_int_equal(store_receive(st, &m, NULL, CONFIRM_ORIGIN, NOW,
				       apply_cb, &a, &res, err, sizeof err),
			 SEMQ_ERR_PLUGIN);
	assert_int_equal(res, -1);
	assert_non_null(strstr(err, "R1/S1/1"));
	assert_non_null(strstr(err, "must not BEGIN, COMMIT or ROLLBACK"));
	/* The batch is gone: further calls say so, rollback is clean. */
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	assert_int_equal(store_receive(st, &m, NULL, CONFIRM_ORIGIN, NOW,
				       apply_cb, &a, &res, err, sizeof err),
			 SEMQ_ERR_DB);
	assert_non_null(strstr(err, "roll it back"));
	assert_int_equal(store_rollback(st), SEMQ_OK);
	assert_int_equal(store_in_batch(st), 0);
}

static void test_receive_bad_input(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct msg m;
	char err[SEMQ_ERRLEN];
	int res;

#define BAD(call, what)                                                        \
	do {                                                                   \
		err[0] = '\0';                                                 \
		assert_int_equal(call, SEMQ_ERR_INVALID);                      \
		assert_non_null(strstr(err, what));                            \
	} while (0)

	mkmsg(&m, "bad origin", "S1", 1, NULL, 0);
	BAD(store_receive(st, &m, NULL, 1, NOW, apply_cb, &a, &res, err,
			  sizeof err),
	    "origin 'bad origin'");
	mkmsg(&m, "R1", "S1", 0, NULL, 0);
	BAD(store_receive(st, &m, NULL, 1, NOW, apply_cb, &a, &res, err,
			  sizeof err),
	    "seq 0");
	mkmsg(&m, "R1", "S1", 3, "K", 3);
	BAD(store_receive(st, &m, NULL, 1, NOW, apply_cb, &a, &res, err,
			  sizeof err),
	    "prev_seq 3");
	mkmsg(&m, "R1", "S1", 3, NULL, 0);
	BAD(store_receive(st, &m, NULL, 0, NOW, apply_cb, &a, &res, err,
			  sizeof err),
	    "confirm_need 0");
	BAD(store_receive(st, &m, NULL, CONFIRM_RELAY, NOW, apply_cb, &a, &res,
			  err, sizeof err),
	    "confirm_need 2");
	BAD(store_receive(st, &m, "no way", 1, NOW, apply_cb, &a, &res, err,
			  sizeof err),
	    "via 'no way'");
	BAD(store_receive(st, &m, NULL, 1, NOW, NULL, &a, &res, err,
			  sizeof err),
	    "apply");
	m.payload = NULL;
	BAD(store_receive(st, &m, NULL, 1, NOW, apply_cb, &a, &res, err,
			  sizeof err),
	    "payload NULL");
	mkmsg(&m, "R1", "S1", 3, NULL, 0);
	m.deliver_at = -5;
	BAD(store_receive(st, &m, NULL, 1, NOW, apply_cb, &a, &res, err,
			  sizeof err),
	    "deliver_at");
	BAD(store_receive(st, NULL, NULL, 1, NOW, apply_cb, &a, &res, err,
			  sizeof err),
	    "missing");
#undef BAD
	assert_int_equal(res, -1);
	assert_int_equal(a.calls, 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 0);
	assert_int_equal(store_receive(NULL, &m, NULL, 1, NOW, apply_cb, &a,
				       &res, err, sizeof err),
			 SEMQ_ERR_INVALID);
}

static void test_predecessor_missing(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct msg m;
	char err[SEMQ_ERRLEN] = "", buf[64];
	unsigned n;
	int ok, res;

	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_AGAIN, -1);
	assert_int_equal(store_receive(st, &m, NULL, CONFIRM_ORIGIN, NOW,
				       apply_cb, &a, &res, err, sizeof err),
			 SEMQ_AGAIN);
	assert_int_equal(a.calls, 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033"), 0);
	/* PostgreSQL: the stream's row is its lock, made before anything is
	 * read; it holds watermark 0, as no row at all means. */
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_stream_in"),
			 be_pg() ? 1 : 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_stream_in WHERE"
				" confirmed_through <> 0"),
			 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 0);
	assert_non_null(strstr(store_errmsg(st), "predecessor seq 1"));

	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_string_equal(q1s(st, SEQS("effect", ""), buf, sizeof buf),
			    "1,2");

	/* A predecessor at or below the watermark counts as recorded. */
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	assert_int_equal(store_ack_response(st, &m.id, 1, &ok), SEMQ_OK);
	m.id.seq = 2;
	assert_int_equal(store_ack_response(st, &m.id, 1, &ok), SEMQ_OK);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 1); /* one stream moved */
	mkmsg(&m, "R1", "S1", 4, "K", 2);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	/* Other keys do not wait for K's predecessor. */
	mkmsg(&m, "R1", "S1", 9, "K", 7);
	recv_expect(st, &m, &a, NOW, SEMQ_AGAIN, -1);
	mkmsg(&m, "R1", "S1", 8, "L", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
}

static void test_tombstone(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct msg m;
	int rec, res;

	mkmsg(&m, "R1", "S1", 1, "K", 0);
	m.tombstone = 1;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_CANCELLED);
	assert_int_equal(a.calls, 0);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030 WHERE seq = 1"),
			 RES_CANCELLED);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033"), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 0);
	assert_int_equal(store_lookup_received(st, &m.id, &rec, &res), SEMQ_OK);
	assert_int_equal(rec, 1);
	assert_int_equal(res, RES_CANCELLED);
	/* The real message arriving after its tombstone is a duplicate,
	 * answered cancelled. */
	m.tombstone = 0;
	recv_expect(st, &m, &a, NOW, SEMQ_DUPLICATE, RES_CANCELLED);
	assert_int_equal(a.calls, 0);
	/* Its successor with the key is not held. */
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
}

static void test_deliver_at_scheduled(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct redo_seen c = {0};
	struct msg m;
	int64_t at = 0, id;
	int status = -9;

	assert_int_equal(store_redo_next_due(st, &at), SEMQ_DECLINED);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	m.deliver_at = NOW + 60000;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	assert_int_equal(a.calls, 0);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030"), RES_SCHEDULED);
	id = redo_id_of(st, 1);
	redo_expect(st, id, RS_PENDING, 0, 0, NOW + 60000, NULL);
	assert_int_equal(store_redo_next_due(st, &at), SEMQ_OK);
	assert_int_equal(at, NOW + 60000);
	assert_int_equal(store_redo_due(st, NOW + 59999, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(store_redo_due(st, NOW + 60000, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.id[0], id);

	/* Same key while it is scheduled: behind it. */
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW + 10, SEMQ_OK, RES_REDO);
	redo_expect(st, redo_id_of(st, 2), RS_WAITING, 0, 0, -1, NULL);

	assert_int_equal(
		store_redo_run(st, id, NOW + 60000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.tries[0], 0);
	redo_expect(st, id, RS_DONE, 1, 0, -1, NULL);
	redo_expect(st, redo_id_of(st, 2), RS_PENDING, 0, 0, NOW + 60000, NULL);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 1);
	assert_int_equal(
		store_redo_run(st, id, NOW + 60000, apply_cb, &a, &status),
		SEMQ_DECLINED);
	assert_int_equal(store_redo_run(st, 4242, NOW, apply_cb, &a, &status),
			 SEMQ_ERR_NOT_FOUND);
}

/* A scheduled message of a key that is waiting behind a failed head is
 * not released before its deliver_at. */
static void test_scheduled_behind_failed_head(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct msg m;
	int status;

	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	m.deliver_at = NOW + 100000;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	redo_expect(st, redo_id_of(st, 2), RS_WAITING, 0, 0, -1, NULL);
	assert_int_equal(store_redo_run(st, redo_id_of(st, 1), NOW + 5000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	redo_expect(st, redo_id_of(st, 2), RS_PENDING, 0, 0, NOW + 100000,
		    NULL);
	/* Released, but not due: it does not run a millisecond early, whoever
	 * asks (the table, not the caller's memory, decides). */
	a.calls = 0;
	assert_int_equal(store_redo_run(st, redo_id_of(st, 2), NOW + 99999,
					apply_cb, &a, &status),
			 SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "not due"));
	assert_int_equal(a.calls, 0);
	redo_expect(st, redo_id_of(st, 2), RS_PENDING, 0, 0, NOW + 100000,
		    NULL);
	assert_int_equal(store_redo_run(st, redo_id_of(st, 2), NOW + 100000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(a.calls, 1);
}

static void test_key_waiting_and_release_order(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "backend busy"};
	struct redo_seen c = {0};
	struct msg m;
	char buf[64];
	int64_t id1, id2, id4;
	int status;

	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 3, "L", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 4, "K", 2);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 5, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	/* Same key, other stream: not held up either. */
	mkmsg(&m, "R2", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(a.calls, 4); /* 2 and 4 never reached the plugin */
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030 WHERE"
				" origin = 'R1' AND result = 1"),
			 3);

	id1 = redo_id_of(st, 1);
	id2 = redo_id_of(st, 2);
	id4 = redo_id_of(st, 4);
	redo_expect(st, id1, RS_PENDING, 1, 1, NOW + 5000, "backend busy");
	redo_expect(st, id2, RS_WAITING, 0, 0, -1, NULL);
	redo_expect(st, id4, RS_WAITING, 0, 0, -1, NULL);
	/* A waiting entry is not run. */
	assert_int_equal(store_redo_run(st, id2, NOW, apply_cb, &a, &status),
			 SEMQ_DECLINED);
	assert_int_equal(store_redo_due(st, NOW + 5000, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.id[0], id1);

	assert_int_equal(
		store_redo_run(st, id1, NOW + 5000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	assert_int_equal(a.tries[4], 1);
	redo_expect(st, id1, RS_DONE, 2, 1, -1, NULL);
	redo_expect(st, id2, RS_PENDING, 0, 0, NOW + 5000, NULL);
	redo_expect(st, id4, RS_WAITING, 0, 0, -1, NULL);

	assert_int_equal(
		store_redo_run(st, id2, NOW + 6000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	redo_expect(st, id4, RS_PENDING, 0, 0, NOW + 6000, NULL);
	assert_int_equal(
		store_redo_run(st, id4, NOW + 6000, apply_cb, &a, &status),
		SEMQ_OK);
	/* K took effect in seq order. */
	assert_string_equal(q1s(st,
				SEQS("effect", "WHERE origin = 'R1' AND seq IN"
					       " (1, 2, 4)"),
				buf, sizeof buf),
			    "1,2,4");
	/* Nothing unfinished for K now: the next one runs at once. */
	mkmsg(&m, "R1", "S1", 6, "K", 4);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
}

/* The operator's verbs (store_verbs.c): the rule, one wording for a
 * refusal, and what they released, reported by the store itself. */
static void test_verb_discard_reports(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "bad document"};
	struct store_verb v;
	struct msg m;
	char want[256], longer[STORE_REASON_MAX + 2];
	int64_t id1, id2, id3, id4;
	int status;

	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 3, "K", 2);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 4, "K", 3);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	id1 = redo_id_of(st, 1);
	id2 = redo_id_of(st, 2);
	id3 = redo_id_of(st, 3);
	id4 = redo_id_of(st, 4);

	/* Not there; no reason, or a reason too long: nothing changes. */
	assert_int_equal(store_verb_discard(st, 4242, "x", NOW, &v),
			 SEMQ_ERR_NOT_FOUND);
	assert_string_equal(v.why, "no redo entry 4242");
	store_verb_clear(&v);
	assert_int_equal(store_verb_discard(st, id1, "", NOW, &v),
			 SEMQ_ERR_INVALID);
	memset(longer, 'r', sizeof longer - 1);
	longer[sizeof longer - 1] = '\0';
	assert_int_equal(store_verb_discard(st, id1, longer, NOW, &v),
			 SEMQ_ERR_INVALID);
	store_verb_clear(&v);
	redo_expect(st, id1, RS_DEAD, 1, 0, -1, "bad document");

	/* The dead head: discarded, the next entry of K released (pending
	 * now), two still waiting; said by the verb, not reconstructed. */
	assert_int_equal(store_verb_discard(st, id1, "operator", NOW + 1, &v),
			 SEMQ_OK);
	assert_int_equal(v.id, id1);
	assert_int_equal(v.msg.seq, 1);
	assert_string_equal(v.msg.origin, "R1");
	assert_int_equal(v.status, RS_DISCARDED);
	assert_true(v.has_key);
	assert_string_equal(v.key, "K");
	assert_int_equal(v.n_released, 1);
	assert_int_equal(v.released[0].id, id2);
	assert_int_equal(v.released[0].msg.seq, 2);
	assert_int_equal(v.released[0].status, RS_PENDING);
	assert_int_equal(v.released[0].next_attempt_at, NOW + 1);
	assert_int_equal(v.still_waiting, 2);
	store_verb_clear(&v);
	redo_expect(st, id2, RS_PENDING, 0, 0, NOW + 1, NULL);

	/* Twice: refused with the reason it was discarded for. */
	assert_int_equal(store_verb_discard(st, id1, "again", NOW + 2, &v),
			 SEMQ_DECLINED);
	snprintf(want, sizeof want,
		 "redo entry %lld (R1/S1/1) is already discarded (reason: "
		 "operator)",
		 (long long)id1);
	assert_string_equal(v.why, want);
	assert_int_equal(v.status, RS_DISCARDED);
	assert_string_equal(v.old_reason, "operator");
	store_verb_clear(&v);

	/* A waiting entry behind the pending one: nothing released. */
	assert_int_equal(store_verb_discard(st, id3, "superseded", NOW + 3, &v),
			 SEMQ_OK);
	assert_int_equal(v.n_released, 0);
	assert_null(v.released);
	assert_int_equal(v.still_waiting, 1);
	store_verb_clear(&v);
	redo_expect(st, id4, RS_WAITING, 0, 0, -1, NULL);

	/* Done: it took effect, it cannot be discarded. */
	assert_int_equal(
		store_redo_run(st, id2, NOW + 4, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	assert_int_equal(store_verb_discard(st, id2, "late", NOW + 5, &v),
			 SEMQ_DECLINED);
	snprintf(want, sizeof want,
		 "redo entry %lld (R1/S1/2) is done: it took effect; only "
		 "pending, waiting or dead entries can be discarded",
		 (long long)id2);
	assert_string_equal(v.why, want);
	assert_int_equal(v.status, RS_DONE);
	store_verb_clear(&v);
	store_verb_clear(NULL);
}

static void test_verb_retry_reports(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct store_verb v;
	struct msg m;
	char want[256];
	int64_t id1, id5, id6;

	verdicts(&a, 3, SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_PERMANENT,
		 SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 5, "A", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 6, "B", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	id1 = redo_id_of(st, 1);
	id5 = redo_id_of(st, 5);
	id6 = redo_id_of(st, 6);

	assert_int_equal(store_verb_retry(st, 4242, NOW, &v),
			 SEMQ_ERR_NOT_FOUND);
	assert_string_equal(v.why, "no redo entry 4242");
	store_verb_clear(&v);

	assert_int_equal(store_verb_retry(st, id1, NOW + 10, &v), SEMQ_OK);
	assert_int_equal(v.status, RS_PENDING);
	assert_int_equal(v.msg.seq, 1);
	store_verb_clear(&v);
	redo_expect(st, id1, RS_PENDING, 1, 0, NOW + 10, "down");

	/* Not dead any more: refused, in the one wording. */
	assert_int_equal(store_verb_retry(st, id1, NOW + 11, &v),
			 SEMQ_DECLINED);
	snprintf(want, sizeof want,
		 "redo entry %lld (R1/S1/1) is pending; only dead entries can "
		 "be retried",
		 (long long)id1);
	assert_string_equal(v.why, want);
	assert_int_equal(v.status, RS_PENDING);
	store_verb_clear(&v);

	/* retry-all: exactly the dead entries, each now pending. */
	assert_int_equal(store_verb_retry_all(st, NOW + 20, &v), SEMQ_OK);
	assert_int_equal(v.n_released, 2);
	assert_int_equal(v.released[0].id, id5);
	assert_int_equal(v.released[0].msg.seq, 5);
	assert_int_equal(v.released[1].id, id6);
	assert_int_equal(v.released[1].status, RS_PENDING);
	assert_int_equal(v.released[1].next_attempt_at, NOW + 20);
	store_verb_clear(&v);
	redo_expect(st, id5, RS_PENDING, 1, 0, NOW + 20, "down");
	redo_expect(st, id6, RS_PENDING, 1, 0, NOW + 20, "down");
	assert_int_equal(store_verb_retry_all(st, NOW + 30, &v), SEMQ_OK);
	assert_int_equal(v.n_released, 0);
	store_verb_clear(&v);
}

static void test_verb_cancel_reports(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct store_verb v;
	struct msgid id;

	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	mkid(&id, "R1", "S1", 9);
	assert_int_equal(store_verb_cancel(st, &id, NOW, &v),
			 SEMQ_ERR_NOT_FOUND);
	assert_string_equal(v.why, "no outbound message R1/S1/9");
	store_verb_clear(&v);

	mkid(&id, "R1", "S1", 2);
	assert_int_equal(store_verb_cancel(st, &id, NOW, &v), SEMQ_OK);
	assert_int_equal(v.status, SS_CANCELLED);
	assert_false(v.already);
	store_verb_clear(&v);
	assert_int_equal(store_verb_cancel(st, &id, NOW, &v), SEMQ_OK);
	assert_true(v.already);
	store_verb_clear(&v);

	mkid(&id, "R1", "S1", 1);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 100), SEMQ_OK);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW + 1),
			 SEMQ_OK);
	assert_int_equal(store_verb_cancel(st, &id, NOW + 2, &v),
			 SEMQ_DECLINED);
	assert_string_equal(v.why, "R1/S1/1 is already confirmed (result "
				   "processed); it cannot be cancelled");
	assert_int_equal(v.status, SS_ACK2);
	assert_int_equal(v.result, RES_PROCESSED);
	store_verb_clear(&v);
	out_expect_status(st, "R1", "S1", 1, SS_ACK2);
}

static void test_redo_discard_releases(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "bad document"};
	struct msg m, got;
	struct redo_row row;
	int64_t id1, id2, id3;
	int status;

	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 3, "K", 2);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	id1 = redo_id_of(st, 1);
	id2 = redo_id_of(st, 2);
	id3 = redo_id_of(st, 3);
	redo_expect(st, id1, RS_DEAD, 1, 0, -1, "bad document");

	assert_int_equal(store_redo_discard(st, id1, "", NOW),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_redo_discard(st, id1, NULL, NOW),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_redo_discard(st, 4242, "x", NOW),
			 SEMQ_ERR_NOT_FOUND);

	/* Discarding a waiting entry behind the dead head releases nothing. */
	assert_int_equal(store_redo_discard(st, id2, "superseded", NOW + 1),
			 SEMQ_OK);
	assert_int_equal(store_redo_get(st, id2, &got, &row), SEMQ_OK);
	assert_int_equal(row.status, RS_DISCARDED);
	assert_string_equal(row.discard_reason, "superseded");
	assert_int_equal(row.updated_at, NOW + 1);
	msg_clear(&got);
	redo_expect(st, id3, RS_WAITING, 0, 0, -1, NULL);

	/* Discarding the head releases the next one. */
	assert_int_equal(store_redo_discard(st, id1, "operator", NOW + 2),
			 SEMQ_OK);
	redo_expect(st, id3, RS_PENDING, 0, 0, NOW + 2, NULL);
	assert_int_equal(store_redo_discard(st, id1, "again", NOW + 3),
			 SEMQ_DECLINED);
	assert_int_equal(
		store_redo_run(st, id3, NOW + 3, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	assert_int_equal(store_redo_discard(st, id3, "late", NOW + 4),
			 SEMQ_DECLINED);
	/* The operator's discard left no effect behind, and a second copy
	 * of each is answered with what became of it. */
	assert_int_equal(q1(st, SEQS("effect", "")), 3);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW + 5, SEMQ_DUPLICATE, RES_CANCELLED);
	mkmsg(&m, "R1", "S1", 3, "K", 2);
	recv_expect(st, &m, &a, NOW + 5, SEMQ_DUPLICATE, RES_PROCESSED);
}

/* The ids store_redo_select / store_redo_bulk hand over, in order. */
struct idseen {
	int64_t id[16];
	int n;
};

static int idseen_cb(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct idseen *c = ctx;

	(void)m;
	if (c->n < 16)
		c->id[c->n++] = row->id;
	return 0;
}

struct groups_seen {
	char text[512];
};

static int groups_cb(void *ctx, const struct redo_group *g)
{
	struct groups_seen *c = ctx;
	size_t n = strlen(c->text);

	snprintf(c->text + n, sizeof c->text - n, "%s%lld:%s:%s", n ? "|" : "",
		 (long long)g->count, g->error ? g->error : "-", g->dests);
	return 0;
}

static int recv_count_cb(void *ctx, const struct recv_row *r)
{
	(void)r;
	(*(int *)ctx)++;
	return 0;
}

/* The operator's filters (key, dest, since, last_error; order, paging),
 * groups by error and the bulk verbs, on both databases: a dry run lists
 * what the real run changes; a bulk retry of a dead head releases nothing,
 * a bulk discard of it releases the next entry of its key. */
static void test_redo_filters_and_bulk(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct store_filter f = {.status = -100};
	struct semq_where w;
	struct groups_seen g = {""};
	struct idseen c = {{0}, 0};
	struct msg m;
	int64_t id[7], n = 0;
	unsigned done = 0;
	int i, got = 0;

	verdicts(&a, 5, SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_PERMANENT,
		 SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_OK, SEMQ_PLUGIN_PERMANENT);
	a.why = "Timeout at db";
	mkmsg(&m, "R1", "S1", 1, "A", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 2, "A", 1); /* waits behind 1 */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	a.why = "bad document";
	mkmsg(&m, "R1", "S1", 3, "B", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	a.why = "timeout at DB";
	mkmsg(&m, "R1", "S1", 4, "C", 0);
	recv_expect(st, &m, &a, NOW + 10, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 5, "D", 0);
	recv_expect(st, &m, &a, NOW + 10, SEMQ_OK, RES_PROCESSED);
	a.why = "bad document";
	mkmsg(&m, "R1", "S1", 6, "E", 0);
	recv_expect(st, &m, &a, NOW + 10, SEMQ_OK, RES_DEAD);
	for (i = 1; i <= 6; i++)
		id[i] = i == 5 ? 0 : redo_id_of(st, (uint64_t)i);

	/* error~TIMEOUT: any case; dead only. */
	assert_int_equal(semq_where_parse("error~TIMEOUT", &w), 0);
	f.where = &w;
	f.status = RS_DEAD;
	assert_int_equal(store_redo_select(st, &f, idseen_cb, &c), SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.id[0], id[1]);
	assert_int_equal(c.id[1], id[4]);
	/* error=: exactly */
	assert_int_equal(semq_where_parse("error=timeout at DB", &w), 0);
	assert_int_equal(store_redo_count(st, &f, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	/* key, dest, since */
	memset(&f, 0, sizeof f);
	f.status = -100;
	f.key = "A";
	assert_int_equal(store_redo_count(st, &f, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	f.key = NULL;
	f.dest = "S9";
	assert_int_equal(store_redo_count(st, &f, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	f.dest = "S1";
	f.since = NOW + 10;
	assert_int_equal(store_redo_count(st, &f, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	/* dead first, then waiting; paging counts in that order */
	memset(&f, 0, sizeof f);
	f.status = -100;
	f.dead_first = 1;
	c.n = 0;
	assert_int_equal(store_redo_select(st, &f, idseen_cb, &c), SEMQ_OK);
	assert_int_equal(c.n, 5);
	assert_int_equal(c.id[4], id[2]);
	f.limit = 2;
	f.offset = 3;
	c.n = 0;
	assert_int_equal(store_redo_select(st, &f, idseen_cb, &c), SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.id[0], id[6]);
	assert_int_equal(c.id[1], id[2]);
	/* groups: the largest first; the waiting entry has no error */
	f.limit = f.offset = 0;
	f.status = RS_DEAD;
	assert_int_equal(store_redo_groups(st, &f, groups_cb, &g), SEMQ_OK);
	assert_string_equal(g.text, "2:bad document:S1|1:Timeout at db:S1|"
				    "1:timeout at DB:S1");
	/* received rows by key */
	memset(&f, 0, sizeof f);
	f.key = "C";
	assert_int_equal(
		store_received_select(st, NULL, &f, recv_count_cb, &got),
		SEMQ_OK);
	assert_int_equal(got, 1);

	/* Bulk retry: dead only; the dry run changes nothing. */
	memset(&f, 0, sizeof f);
	f.status = RS_PENDING;
	assert_int_equal(semq_where_parse("error~timeout", &w), 0);
	f.where = &w;
	assert_int_equal(store_redo_bulk(st, STORE_REDO_RETRY, &f, NULL, NOW, 0,
					 0, NULL, NULL, NULL, &done),
			 SEMQ_ERR_INVALID);
	f.status = -100;
	c.n = 0;
	assert_int_equal(store_redo_bulk(st, STORE_REDO_RETRY, &f, NULL,
					 NOW + 20, 1, 1, idseen_cb, NULL, &c,
					 &done),
			 SEMQ_OK);
	assert_int_equal(done, 2);
	assert_int_equal(c.n, 2);
	redo_expect(st, id[1], RS_DEAD, 1, 0, -1, "Timeout at db");
	c.n = 0;
	assert_int_equal(store_redo_bulk(st, STORE_REDO_RETRY, &f, NULL,
					 NOW + 20, 0, 1, idseen_cb, NULL, &c,
					 &done),
			 SEMQ_OK);
	assert_int_equal(done, 2);
	assert_int_equal(c.id[0], id[1]);
	assert_int_equal(c.id[1], id[4]);
	redo_expect(st, id[1], RS_PENDING, 1, 0, NOW + 20, "Timeout at db");
	redo_expect(st, id[4], RS_PENDING, 1, 0, NOW + 20, "timeout at DB");
	/* a retried head releases nothing until it succeeds */
	redo_expect(st, id[2], RS_WAITING, 0, 0, -1, NULL);

	/* Bulk discard: a reason; dead by default; the head of A (pending
	 * now) by --status pending, which releases 2. */
	assert_int_equal(semq_where_parse("error=bad document", &w), 0);
	assert_int_equal(store_redo_bulk(st, STORE_REDO_DISCARD, &f, NULL,
					 NOW + 30, 0, 0, NULL, NULL, NULL,
					 &done),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_redo_bulk(st, STORE_REDO_DISCARD, &f, "bad",
					 NOW + 30, 0, 0, NULL, NULL, NULL,
					 &done),
			 SEMQ_OK);
	assert_int_equal(done, 2);
	redo_expect(st, id[3], RS_DISCARDED, 1, 0, -1, "bad document");
	redo_expect(st, id[6], RS_DISCARDED, 1, 0, -1, "bad document");
	assert_int_equal(semq_where_parse("error~TIMEOUT", &w), 0);
	f.status = RS_PENDING;
	f.key = "A";
	assert_int_equal(store_redo_bulk(st, STORE_REDO_DISCARD, &f, "old",
					 NOW + 40, 0, 0, NULL, NULL, NULL,
					 &done),
			 SEMQ_OK);
	assert_int_equal(done, 1);
	redo_expect(st, id[1], RS_DISCARDED, 1, 0, -1, "Timeout at db");
	redo_expect(st, id[2], RS_PENDING, 0, 0, NOW + 40, NULL);
	redo_expect(st, id[4], RS_PENDING, 1, 0, NOW + 20, "timeout at DB");
}

/* Done and discarded entries go after the retention, counted from when
 * they finished; dead, pending and waiting ones stay; a copy of a purged
 * message is still a duplicate (tb_0030 decides that, not tb_0033). */
static void test_redo_purge_by_retention(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct msg m;
	char buf[64];
	int64_t id2, id3;
	unsigned n = 99;
	int status = -9;

	verdicts(&a, 3, SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_RETRY,
		 SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, NULL, 0); /* dead at once */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 2, NULL, 0); /* done at NOW + 5000 */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 3, NULL, 0); /* discarded at NOW + 10 */
	m.deliver_at = NOW + 999999;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	mkmsg(&m, "R1", "S1", 4, NULL, 0); /* stays pending */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	id2 = redo_id_of(st, 2);
	id3 = redo_id_of(st, 3);
	assert_int_equal(store_redo_discard(st, id3, "not wanted", NOW + 10),
			 SEMQ_OK);
	verdicts(&a, 1, SEMQ_PLUGIN_OK);
	assert_int_equal(
		store_redo_run(st, id2, NOW + 5000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);

	/* The discard finished long before the cutoff, the run after it. */
	assert_int_equal(store_redo_purge(st, NOW + 5500, 1000, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033 WHERE seq = 3"),
			 0);
	assert_int_equal(store_redo_purge(st, NOW + 99999, 1000, 0, &n),
			 SEMQ_OK);
	assert_int_equal(n, 0);
	assert_int_equal(store_redo_purge(st, NOW + 7000, 1000, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 1);
	/* Dead and pending stay, however old. */
	assert_int_equal(store_redo_purge(st, NOW + 9999999, 1000, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 0);
	assert_string_equal(q1s(st, SEQS("tb_0033", ""), buf, sizeof buf),
			    "1,4");
	/* A copy of the purged, done message is a duplicate: processed (its
	 * record says so), and of the dead one: dead. */
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW + 8000, SEMQ_DUPLICATE, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW + 8000, SEMQ_DUPLICATE, RES_DEAD);
	assert_int_equal(store_redo_purge(st, NOW, -1, 100, &n),
			 SEMQ_ERR_INVALID);
}

static void test_redo_levels_and_dead(void **state)
{
	struct fx *fx = *state;
	const int64_t levels[] = {100, 200, 300};
	struct store_opts o = {.synchronous = -1,
			       .redo_levels_ms = levels,
			       .n_redo_levels = 3,
			       .max_tries = 5};
	struct store *st = open_ok(fx, "S1", &o);
	struct applier a = {.why = "still down"};
	struct redo_seen c = {0};
	struct msg m;
	int64_t id, t = NOW;
	unsigned n = 0;
	int status = -9;

	verdicts(&a, 5, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY,
		 SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, t, SEMQ_OK, RES_REDO);
	id = redo_id_of(st, 1);
	redo_expect(st, id, RS_PENDING, 1, 1, t + 100, "still down");

	t += 100;
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_PENDING);
	redo_expect(st, id, RS_PENDING, 2, 2, t + 200, "still down");
	t += 200;
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_OK);
	redo_expect(st, id, RS_PENDING, 3, 3, t + 300, "still down");
	t += 300;
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_OK);
	/* Past the last level: the last one repeats. */
	redo_expect(st, id, RS_PENDING, 4, 4, t + 300, "still down");
	t += 300;
	a.why = "gave up";
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DEAD);
	redo_expect(st, id, RS_DEAD, 5, 4, -1, "gave up");
	assert_int_equal(a.calls, 5);
	assert_int_equal(a.tries[1], 1);
	assert_int_equal(a.tries[4], 4);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 0);
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_DECLINED);

	/* Operator retry: pending now, tries kept, level reset. */
	assert_int_equal(store_redo_retry(st, id, t + 1), SEMQ_OK);
	redo_expect(st, id, RS_PENDING, 5, 0, t + 1, "gave up");
	assert_int_equal(store_redo_retry(st, id, t + 1), SEMQ_DECLINED);
	assert_int_equal(store_redo_retry(st, 4242, t + 1), SEMQ_ERR_NOT_FOUND);
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	assert_int_equal(store_redo_run(st, id, t + 1, apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DEAD);

	/* Retry every dead entry. */
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, t, SEMQ_OK, RES_DEAD);
	assert_int_equal(store_redo_list(st, RS_DEAD, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(store_redo_retry_all_dead(st, t + 5, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	c.n = 0;
	assert_int_equal(store_redo_due(st, t + 5, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(store_redo_retry_all_dead(st, t + 5, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	/* Listings are by id and respect limit; a bad status is refused. */
	c.n = 0;
	assert_int_equal(store_redo_list(st, -100, 1, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.id[0], id);
	assert_int_equal(store_redo_list(st, 7, 10, redo_collect, &c),
			 SEMQ_ERR_INVALID);
}

static void test_max_tries_one_is_dead_at_once(void **state)
{
	struct fx *fx = *state;
	struct store_opts o = {.synchronous = -1, .max_tries = 1};
	struct store *st = open_ok(fx, "S1", &o);
	struct applier a = {.why = "nope"};
	struct msg m;

	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	redo_expect(st, redo_id_of(st, 1), RS_DEAD, 1, 0, -1, "nope");
}

/* ---- outbound ----------------------------------------------------------- */

static void test_enqueue_assigns_seq(void **state)
{
	struct fx *fx = *state;
	struct store_opts o = {.synchronous = -1, .max_payload = 16};
	struct store *st = open_ok(fx, "R1", &o);
	struct msgid id;
	struct msg m;
	struct out_row row;
	char err[SEMQ_ERRLEN];
	uint8_t big[17] = {0};
	uint64_t seq;

	assert_int_equal(enqueue(st, "S1", "K"), 1);
	assert_int_equal(enqueue(st, "S1", NULL), 2);
	assert_int_equal(enqueue(st, "S1", "K"), 3);
	assert_int_equal(enqueue(st, "S2", "K"), 1);

	mkid(&id, "R1", "S1", 3);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_string_equal(m.id.origin, "R1");
	assert_int_equal(m.prev_seq, 1);
	assert_int_equal(m.type, 2800);
	assert_int_equal(m.created_at, NOW - 1000);
	assert_int_equal(m.tombstone, 0);
	assert_int_equal(row.status, SS_UNSEND);
	assert_int_equal(row.attempts, 0);
	assert_int_equal(row.result, -1);
	assert_null(row.last_error);
	msg_clear(&m);
	mkid(&id, "R1", "S1", 9);
	assert_int_equal(store_outbound_get(st, &id, &m, &row),
			 SEMQ_ERR_NOT_FOUND);

	mkmsg(&m, "", "bad dest", 0, NULL, 0);
	assert_int_equal(store_enqueue(st, &m, &seq, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_non_null(strstr(err, "dest 'bad dest'"));
	mkmsg(&m, "", "S1", 0, NULL, 0);
	m.payload = big;
	m.payload_len = sizeof big;
	assert_int_equal(store_enqueue(st, &m, &seq, err, sizeof err),
			 SEMQ_ERR_TOO_BIG);
	assert_non_null(strstr(err, "max_payload"));
	m.payload = NULL;
	assert_int_equal(store_enqueue(st, &m, &seq, err, sizeof err),
			 SEMQ_ERR_INVALID);
	/* A key that is not UTF-8 text is refused (and uses no seq). */
	m.payload_len = 0;
	m.has_key = 1;
	snprintf(m.key, sizeof m.key, "K\xff");
	assert_int_equal(store_enqueue(st, &m, &seq, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_non_null(strstr(err, "key is not UTF-8 text"));
	m.has_key = 0;
	m.key[0] = '\0';
	/* An empty payload is fine. */
	assert_int_equal(store_enqueue(st, &m, &seq, err, sizeof err), SEMQ_OK);
	assert_int_equal(seq, 4);
	assert_int_equal(q1(st, "SELECT length(payload) FROM tb_0031 WHERE"
				" dest = 'S1' AND seq = 4"),
			 0);
}

static void test_fetch_sendable_window_and_order(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct out_seen c;
	struct msgid id;
	int i;

	for (i = 0; i < 5; i++)
		enqueue(st, "S1", NULL);
	for (i = 0; i < 2; i++)
		enqueue(st, "S2", NULL);

	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, NULL, NOW, 3, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 5);
	for (i = 0; i < c.n; i++) {
		assert_int_equal(c.status[i], SS_UNSEND);
		/* Seq order within each stream, streams one after another. */
		if (i > 0 && strcmp(c.dest[i], c.dest[i - 1]) == 0)
			assert_int_equal(c.seq[i], c.seq[i - 1] + 1);
	}
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031 WHERE"
				" status = 0"),
			 7); /* fetching does not change them */

	/* Two in flight (one sent, one held by a relay): room for one. */
	mkid(&id, "R1", "S1", 1);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	assert_int_equal(store_mark_relay_acked(st, &id, NOW, NOW + 30000),
			 SEMQ_OK);
	id.seq = 2;
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, "S1", NOW, 3, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 3);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, "S1", NOW, 2, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0);

	/* limit caps the total; window 0 sends nothing. */
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, NULL, NOW, 100, 2, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 2);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, NULL, NOW, 0, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0);

	/* Sent back to unsent with a retry time: not before it. */
	assert_int_equal(store_mark_unsent(st, &id, NOW + 1000, "peer gone"),
			 SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, "S1", NOW, 100, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 3);
	assert_int_equal(c.seq[0], 3);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_sendable(st, "S1", NOW + 1000, 100, 100,
					      out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 4);
	assert_int_equal(c.seq[0], 2);
	assert_int_equal(c.seq[3], 5);
	for (i = 0; i < c.n; i++)
		assert_string_equal(c.dest[i], "S1");

	/* The callback may stop it. */
	memset(&c, 0, sizeof c);
	c.stop_after = 1;
	assert_int_equal(store_fetch_sendable(st, NULL, NOW + 1000, 100, 100,
					      out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(
		store_fetch_sendable(st, "no dest", NOW, 1, 1, out_collect, &c),
		SEMQ_ERR_INVALID);
	assert_int_equal(store_fetch_sendable(st, NULL, NOW, 1, 1, NULL, &c),
			 SEMQ_ERR_INVALID);
}

/* A small limit does not starve the streams that sort last. */
static void test_fetch_sendable_round_robin(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct out_seen c;
	int i, s1 = 0, s2 = 0, s3 = 0;

	for (i = 0; i < 3; i++) {
		enqueue(st, "S1", NULL);
		enqueue(st, "S2", NULL);
		enqueue(st, "S3", NULL);
	}
	for (i = 0; i < 3; i++) {
		memset(&c, 0, sizeof c);
		assert_int_equal(store_fetch_sendable(st, NULL, NOW, 100, 1,
						      out_collect, &c),
				 SEMQ_OK);
		assert_int_equal(c.n, 1);
		assert_int_equal(c.seq[0], 1);
		s1 += strcmp(c.dest[0], "S1") == 0;
		s2 += strcmp(c.dest[0], "S2") == 0;
		s3 += strcmp(c.dest[0], "S3") == 0;
	}
	assert_int_equal(s1, 1);
	assert_int_equal(s2, 1);
	assert_int_equal(s3, 1);
}

/* Callbacks may use the store, even the listing they are called from. */
static void test_callbacks_reenter_store(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct out_seen c;
	int i;

	for (i = 0; i < 4; i++)
		enqueue(st, "S1", NULL);
	memset(&c, 0, sizeof c);
	c.st = st;
	c.mark_sent = 1;
	assert_int_equal(
		store_fetch_sendable(st, NULL, NOW, 10, 10, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 4);
	for (i = 0; i < 4; i++)
		assert_int_equal(c.seq[i], (uint64_t)i + 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031 WHERE"
				" status = 4"),
			 4);

	memset(&c, 0, sizeof c);
	c.st = st;
	c.nested_listing = 1;
	assert_int_equal(store_outbound_list(st, -100, 10, out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 4);
	assert_int_equal(c.nested_n, 16);
	/* Newest first. */
	assert_int_equal(c.seq[0], 4);
	assert_int_equal(c.seq[3], 1);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_outbound_list(st, SS_UNSEND, 10, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(store_outbound_list(st, 5, 10, out_collect, &c),
			 SEMQ_ERR_INVALID);
}

static void test_outbound_state_machine(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct msgid id;
	struct msg m;
	struct out_row row;

	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	mkid(&id, "R1", "S1", 1);

	assert_int_equal(store_mark_relay_acked(st, &id, NOW, NOW),
			 SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "R1/S1/1"));
	assert_int_equal(store_mark_unsent(st, &id, NOW, NULL), SEMQ_DECLINED);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, SS_SEND);
	assert_int_equal(row.attempts, 1);
	assert_int_equal(row.sent_at, NOW);
	assert_int_equal(row.next_attempt_at, NOW + 30000);
	msg_clear(&m);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_DECLINED);
	assert_int_equal(store_mark_relay_acked(st, &id, NOW + 5, NOW + 40000),
			 SEMQ_OK);
	out_expect_status(st, "R1", "S1", 1, SS_ACK);
	assert_int_equal(store_mark_relay_acked(st, &id, NOW, NOW),
			 SEMQ_DECLINED);
	assert_int_equal(store_mark_unsent(st, &id, NOW + 500, "unreachable"),
			 SEMQ_OK);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, SS_UNSEND);
	assert_int_equal(row.next_attempt_at, NOW + 500);
	assert_string_equal(row.last_error, "unreachable");
	msg_clear(&m);
	assert_int_equal(store_mark_sent(st, &id, NOW + 500, NOW + 900),
			 SEMQ_OK);
	assert_int_equal(
		store_mark_confirmed(st, &id, RES_PROCESSED, NOW + 600),
		SEMQ_OK);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, SS_ACK2);
	assert_int_equal(row.attempts, 2);
	assert_int_equal(row.result, RES_PROCESSED);
	assert_int_equal(row.acked_at, NOW + 600);
	msg_clear(&m);
	/* Confirmed is final. */
	assert_int_equal(store_mark_confirmed(st, &id, RES_DUPLICATE, NOW),
			 SEMQ_DECLINED);
	assert_int_equal(store_mark_unsent(st, &id, NOW, NULL), SEMQ_DECLINED);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_DECLINED);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_DECLINED);
	assert_int_equal(store_mark_confirmed(st, &id, 9, NOW),
			 SEMQ_ERR_INVALID);

	/* Cancel: -2 (twice is fine), shown as a tombstone; a recorded
	 * tombstone keeps the row cancelled with result 4, and it is no longer
	 * due for sending. */
	id.seq = 2;
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, SS_CANCELLED);
	assert_int_equal(m.tombstone, 1);
	msg_clear(&m);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_DECLINED);
	assert_int_equal(store_defer(st, &id, NOW + 5), SEMQ_OK);
	assert_int_equal(store_mark_confirmed(st, &id, RES_CANCELLED, NOW),
			 SEMQ_OK);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, SS_CANCELLED);
	assert_int_equal(row.result, RES_CANCELLED);
	msg_clear(&m);
	assert_int_equal(store_defer(st, &id, NOW + 5), SEMQ_DECLINED);

	/* A cancel that arrived after the message took effect: the
	 * receiver's verdict wins and the row is confirmed. */
	mkid(&id, "R1", "S1", enqueue(st, "S1", NULL));
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, SS_ACK2);
	assert_int_equal(row.result, RES_PROCESSED);
	msg_clear(&m);

	/* No such row; a bad id. */
	id.seq = 99;
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_ERR_NOT_FOUND);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "no such message"));
	id.seq = 0;
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_ERR_INVALID);
	assert_int_equal(store_cancel(st, NULL, NOW), SEMQ_ERR_INVALID);
}

static void test_fetch_in_doubt(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct out_seen c;
	struct msgid id;

	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	mkid(&id, "R1", "S1", 1);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	id.seq = 2;
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 60000), SEMQ_OK);
	assert_int_equal(store_mark_relay_acked(st, &id, NOW, NOW + 40000),
			 SEMQ_OK);

	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_in_doubt(st, NOW + 29999, 10, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(
		store_fetch_in_doubt(st, NOW + 30000, 10, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 1);
	assert_int_equal(c.status[0], SS_SEND);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_in_doubt(st, NOW + 50000, 10, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.seq[1], 2);
	assert_int_equal(c.status[1], SS_ACK);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_in_doubt(st, NOW + 50000, 1, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	/* A confirmed one is no longer in doubt; unsent ones never were. */
	id.seq = 1;
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_in_doubt(st, NOW + 99999, 10, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 2);
}

static void test_purge_by_retention(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct msgid id;
	unsigned n = 99;

	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	mkid(&id, "R1", "S1", 1);
	assert_int_equal(store_mark_confirmed(st, &id, 0, NOW + 1000), SEMQ_OK);
	id.seq = 2;
	assert_int_equal(store_mark_confirmed(st, &id, 0, NOW + 2000), SEMQ_OK);

	assert_int_equal(store_purge(st, NOW + 1400, 500, 100, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	assert_int_equal(store_purge(st, NOW + 1600, 500, 100, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	id.seq = 1;
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_ERR_NOT_FOUND);
	assert_int_equal(store_purge(st, NOW + 99999, 500, 0, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	assert_int_equal(store_purge(st, NOW + 99999, 500, 100, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	/* The unconfirmed one stays, and seqs are never reused. */
	assert_int_equal(q1(st, SEQS("tb_0031", "")), 3);
	assert_int_equal(enqueue(st, "S1", NULL), 4);
	assert_int_equal(store_purge(st, NOW, -1, 100, &n), SEMQ_ERR_INVALID);
}

static void test_enqueue_copy(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct msg m, got;
	struct out_row row;
	struct out_seen c;

	mkmsg(&m, "R1", "S1", 7, "K", 5);
	m.deliver_at = NOW + 50;
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	assert_int_equal(store_enqueue_copy(st, &m, NOW + 1), SEMQ_DUPLICATE);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031"), 1);
	/* Stored as given: the trigger did not renumber it. */
	assert_int_equal(store_outbound_get(st, &m.id, &got, &row), SEMQ_OK);
	assert_string_equal(got.id.origin, "R1");
	assert_int_equal(got.id.seq, 7);
	assert_int_equal(got.prev_seq, 5);
	assert_string_equal(got.key, "K");
	assert_int_equal(got.deliver_at, NOW + 50);
	assert_int_equal(got.created_at, NOW - 1000);
	assert_int_equal(got.payload_len, 8);
	assert_int_equal(row.status, SS_UNSEND);
	msg_clear(&got);
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_stream_out"), 0);
	/* It travels like any other. */
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, "S1", NOW, 10, 10, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 7);

	/* A relayed tombstone is kept as a cancelled row. */
	mkmsg(&m, "R1", "S1", 8, NULL, 0);
	m.tombstone = 1;
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	out_expect_status(st, "R1", "S1", 8, SS_CANCELLED);

	mkmsg(&m, "R1", "S1", 0, NULL, 0);
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_ERR_INVALID);
	mkmsg(&m, "R 1", "S1", 1, NULL, 0);
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_ERR_INVALID);
	assert_non_null(strstr(store_errmsg(st), "origin 'R 1'"));
}

/* ---- watermarks, status ------------------------------------------------- */

static void ack(struct store *st, uint64_t seq, unsigned bit, int want_ok)
{
	struct msgid id;
	int ok = -1;

	mkid(&id, "R1", "S1", seq);
	assert_int_equal(store_ack_response(st, &id, bit, &ok), SEMQ_OK);
	assert_int_equal(ok, want_ok);
}

static void test_watermark_gaps(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct msg m;
	struct msgid id;
	char buf[64];
	unsigned n = 99;
	uint64_t w = 99, i;
	int ok;

	for (i = 1; i <= 4; i++) {
		mkmsg(&m, "R1", "S1", i, NULL, 0);
		recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	}
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	ack(st, 1, CONFIRM_ORIGIN, 1);
	ack(st, 2, CONFIRM_ORIGIN, 1);
	ack(st, 4, CONFIRM_ORIGIN, 1);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(store_watermark(st, "R1", "S1", SEMQ_LIFE_LEGACY, &w),
			 SEMQ_OK);
	assert_int_equal(w, 2);
	/* A purge without retention takes exactly the rows it passed. */
	assert_int_equal(store_receipt_purge(st, NOW + 1, 0, 100, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	assert_string_equal(q1s(st, SEQS("tb_0030", ""), buf, sizeof buf),
			    "3,4");
	ack(st, 3, CONFIRM_ORIGIN, 1);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(store_watermark(st, "R1", "S1", SEMQ_LIFE_LEGACY, &w),
			 SEMQ_OK);
	assert_int_equal(w, 4);
	assert_int_equal(store_receipt_purge(st, NOW + 1, 0, 100, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 0);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 0);

	/* Two confirmations needed: the relay's too. */
	mkmsg(&m, "R1", "S1", 5, NULL, 0);
	assert_int_equal(store_receive(st, &m, "P1",
				       CONFIRM_ORIGIN | CONFIRM_RELAY, NOW,
				       apply_cb, &a, NULL, NULL, 0),
			 SEMQ_OK);
	ack(st, 5, CONFIRM_ORIGIN, 0);
	ack(st, 5, CONFIRM_ORIGIN, 0); /* repeated: still waiting */
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	ack(st, 5, CONFIRM_RELAY, 1);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(store_watermark(st, "R1", "S1", SEMQ_LIFE_LEGACY, &w),
			 SEMQ_OK);
	assert_int_equal(w, 5);

	mkid(&id, "R1", "S1", 6);
	assert_int_equal(store_ack_response(st, &id, 4, &ok), SEMQ_ERR_INVALID);
	assert_int_equal(store_ack_response(st, &id, 1, &ok), SEMQ_DECLINED);
	assert_int_equal(store_watermark(st, "R2", "S1", SEMQ_LIFE_LEGACY, &w),
			 SEMQ_OK);
	assert_int_equal(w, 0);
	assert_int_equal(
		store_watermark(st, "bad id", "S1", SEMQ_LIFE_LEGACY, &w),
		SEMQ_ERR_INVALID);
}

struct unacked_seen {
	int n;
	uint64_t seq[8];
	unsigned need[8], got[8];
	char via[8][SEMQ_ID_MAX + 1];
};

static int unacked_collect(void *ctx, const struct msgid *id, int result,
			   unsigned need, unsigned got, const char *via)
{
	struct unacked_seen *c = ctx;

	assert_true(c->n < 8);
	assert_int_equal(result, RES_PROCESSED);
	c->seq[c->n] = id->seq;
	c->need[c->n] = need;
	c->got[c->n] = got;
	snprintf(c->via[c->n], sizeof c->via[c->n], "%s", via ? via : "-");
	c->n++;
	return 0;
}

static void test_fetch_unacked(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct unacked_seen c;
	struct msg m;

	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	assert_int_equal(store_receive(st, &m, "P1", 3, NOW + 10, apply_cb, &a,
				       NULL, NULL, 0),
			 SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_unacked(st, NOW + 5, 10, unacked_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 1);
	assert_string_equal(c.via[0], "-");
	memset(&c, 0, sizeof c);
	ack(st, 2, CONFIRM_RELAY, 0);
	assert_int_equal(
		store_fetch_unacked(st, NOW + 100, 10, unacked_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.seq[1], 2);
	assert_int_equal(c.need[1], 3);
	assert_int_equal(c.got[1], CONFIRM_RELAY);
	assert_string_equal(c.via[1], "P1");
	ack(st, 1, CONFIRM_ORIGIN, 1);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_unacked(st, NOW + 100, 10, unacked_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 2);
}

/* What store_received_list() handed over, one line per row. */
struct recv_seen {
	int n;
	char line[16][256];
	int stop_after;   /* return 1 after this many rows (0 = never) */
	struct store *st; /* when set: list again from inside the callback */
	int nested_n;
};

static int recv_count(void *ctx, const struct recv_row *r)
{
	(void)r;
	((struct recv_seen *)ctx)->nested_n++;
	return 0;
}

static int recv_collect(void *ctx, const struct recv_row *r)
{
	struct recv_seen *c = ctx;

	assert_true(c->n < 16);
	snprintf(c->line[c->n], sizeof c->line[c->n],
		 "%s/%s/%llu t%lu k=%s p%llu at%lld via=%s r%d a%d %u/%u",
		 r->id.origin, r->id.dest, (unsigned long long)r->id.seq,
		 (unsigned long)r->type, r->key ? r->key : "(null)",
		 (unsigned long long)r->prev_seq,
		 (long long)(r->received_at - NOW), r->via ? r->via : "(null)",
		 r->result, r->ack_status, r->confirm_need, r->confirm_got);
	assert_true(r->rowid > 0);
	c->n++;
	if (c->st)
		assert_int_equal(
			store_received_list(c->st, NULL, 100, recv_count, c),
			SEMQ_OK);
	return c->stop_after && c->n >= c->stop_after;
}

/* store_trace_own(): this node's messages of a key, newest first. */
struct trace_seen {
	uint64_t seq[8];
	char dest[8][SEMQ_ID_MAX + 1];
	size_t n;
};

static int trace_cb(void *ctx, const struct msg *m, const struct out_row *row)
{
	struct trace_seen *x = ctx;

	(void)row;
	assert_null(m->payload);
	if (x->n < 8) {
		x->seq[x->n] = m->id.seq;
		snprintf(x->dest[x->n], sizeof x->dest[0], "%s", m->id.dest);
		x->n++;
	}
	return 0;
}

/* What semqctl trace reads: the origin's rows of a key (by destination,
 * since, limit), the receiver's row and redo entry of one message. */
static void test_trace_reads(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "bill refused"};
	struct trace_seen x;
	struct trace_in in;
	struct trace_redo rd;
	struct msg m;

	/* This node's own messages: S1 -> S2, S3 with keys. */
	enqueue(st, "S2", "B1");
	enqueue(st, "S3", "B1");
	enqueue(st, "S2", "B2");
	enqueue(st, "S2", "B1");
	memset(&x, 0, sizeof x);
	assert_int_equal(store_trace_own(st, "B1", NULL, 0, 10, trace_cb, &x),
			 SEMQ_OK);
	assert_int_equal(x.n, 3); /* S1/S2/3, S1/S3/1, S1/S2/1 */
	assert_int_equal(x.seq[0], 3);
	assert_string_equal(x.dest[0], "S2");
	assert_string_equal(x.dest[1], "S3");
	assert_string_equal(x.dest[2], "S2");
	assert_int_equal(x.seq[2], 1);
	memset(&x, 0, sizeof x);
	assert_int_equal(store_trace_own(st, "B1", "S2", 0, 1, trace_cb, &x),
			 SEMQ_OK);
	assert_int_equal(x.n, 1);
	assert_int_equal(x.seq[0], 3);
	memset(&x, 0, sizeof x);
	assert_int_equal(
		store_trace_own(st, "B1", "", INT64_MAX, 10, trace_cb, &x),
		SEMQ_OK);
	assert_int_equal(x.n, 0);
	assert_int_equal(store_trace_own(st, "B1", "S 2", 0, 10, trace_cb, &x),
			 SEMQ_ERR_INVALID);

	/* Received: one through P1, processed; one in redo. */
	mkmsg(&m, "R1", "S1", 1, "K1", 0);
	assert_int_equal(store_receive(st, &m, "P1",
				       CONFIRM_ORIGIN | CONFIRM_RELAY, NOW,
				       apply_cb, &a, NULL, NULL, 0),
			 SEMQ_OK);
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW + 1, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	assert_int_equal(store_trace_in(st, &m.id, &in, &rd), SEMQ_OK);
	assert_true(in.found);
	assert_int_equal(in.result, RES_PROCESSED);
	assert_int_equal(in.received_at, NOW);
	assert_string_equal(in.via, "P1");
	assert_int_equal(rd.id, 0);
	m.id.seq = 2;
	assert_int_equal(store_trace_in(st, &m.id, &in, &rd), SEMQ_OK);
	assert_true(in.found);
	assert_int_equal(in.result, RES_REDO);
	assert_string_equal(in.via, "");
	assert_true(rd.id > 0);
	assert_int_equal(rd.status, RS_DEAD);
	assert_int_equal(rd.tries, 1);
	assert_non_null(strstr(rd.last_error, "bill refused"));
	m.id.seq = 3;
	assert_int_equal(store_trace_in(st, &m.id, &in, &rd), SEMQ_OK);
	assert_false(in.found);
	assert_int_equal(rd.id, 0);
}

static void test_received_list(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct recv_seen c;
	struct msg m;
	unsigned n;

	memset(&c, 0, sizeof c);
	assert_int_equal(store_received_list(st, NULL, 100, recv_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 0);

	/* One row of every result, one through a relay that stored it. */
	mkmsg(&m, "R1", "S1", 1, "K1", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW + 1, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R2", "S1", 1, "K2", 0);
	m.deliver_at = NOW + 60000;
	recv_expect(st, &m, &a, NOW + 2, SEMQ_OK, RES_SCHEDULED);
	mkmsg(&m, "R1", "S1", 3, "K1", 1);
	m.tombstone = 1;
	recv_expect(st, &m, &a, NOW + 3, SEMQ_OK, RES_CANCELLED);
	mkmsg(&m, "R2", "S1", 2, NULL, 0);
	m.type = 7;
	assert_int_equal(store_receive(st, &m, "P1",
				       CONFIRM_ORIGIN | CONFIRM_RELAY, NOW + 4,
				       apply_cb, &a, NULL, NULL, 0),
			 SEMQ_OK);
	ack(st, 1, CONFIRM_ORIGIN, 1);

	memset(&c, 0, sizeof c);
	assert_int_equal(store_received_list(st, NULL, 100, recv_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 5);
	assert_string_equal(c.line[0], "R2/S1/2 t7 k=(null) p0 at4 via=P1 r0 "
				       "a0 3/0");
	assert_string_equal(c.line[1], "R1/S1/3 t2800 k=K1 p1 at3 "
				       "via=(null) r4 a0 1/0");
	assert_string_equal(c.line[2], "R2/S1/1 t2800 k=K2 p0 at2 "
				       "via=(null) r3 a0 1/0");
	assert_string_equal(c.line[3], "R1/S1/2 t2800 k=(null) p0 at1 "
				       "via=(null) r1 a0 1/0");
	assert_string_equal(c.line[4], "R1/S1/1 t2800 k=K1 p0 at0 "
				       "via=(null) r0 a1 1/1");

	/* By origin, and at most `limit`, still newest first. */
	memset(&c, 0, sizeof c);
	assert_int_equal(store_received_list(st, "R2", 100, recv_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_true(!strncmp(c.line[0], "R2/S1/2 ", 8));
	assert_true(!strncmp(c.line[1], "R2/S1/1 ", 8));
	memset(&c, 0, sizeof c);
	assert_int_equal(store_received_list(st, "R1", 2, recv_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_true(!strncmp(c.line[0], "R1/S1/3 ", 8));
	assert_true(!strncmp(c.line[1], "R1/S1/2 ", 8));
	memset(&c, 0, sizeof c);
	assert_int_equal(store_received_list(st, "R9", 100, recv_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 0);

	/* The callback stops it, and may list again meanwhile. */
	memset(&c, 0, sizeof c);
	c.stop_after = 2;
	c.st = st;
	assert_int_equal(store_received_list(st, NULL, 100, recv_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.nested_n, 10);

	/* Rows purged (at or below the watermark, past the receipt
	 * retention) are not listed. */
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_received_list(st, "R1", 100, recv_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 3);
	assert_int_equal(store_receipt_purge(st, NOW + 10, 0, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 1);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_received_list(st, "R1", 100, recv_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_true(!strncmp(c.line[1], "R1/S1/2 ", 8));

	/* Bad input. */
	assert_int_equal(
		store_received_list(st, "bad id", 100, recv_collect, &c),
		SEMQ_ERR_INVALID);
	assert_non_null(strstr(store_errmsg(st), "origin"));
	assert_int_equal(store_received_list(st, "", 100, recv_collect, &c),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_received_list(st, NULL, 100, NULL, &c),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_received_list(NULL, NULL, 100, recv_collect, &c),
			 SEMQ_ERR_INVALID);
}

struct stats_seen {
	int n;
	struct {
		char table[8], origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];
		int status;
		int64_t count, oldest;
	} r[32];
	int streams;
	char stream[8][2 * SEMQ_ID_MAX + 32];
};

static int stats_collect(void *ctx, const struct stat_row *r)
{
	struct stats_seen *c = ctx;

	assert_true(c->n < 32);
	snprintf(c->r[c->n].table, sizeof c->r[c->n].table, "%s", r->table);
	snprintf(c->r[c->n].origin, sizeof c->r[c->n].origin, "%s", r->origin);
	snprintf(c->r[c->n].dest, sizeof c->r[c->n].dest, "%s", r->dest);
	c->r[c->n].status = r->status;
	c->r[c->n].count = r->count;
	c->r[c->n].oldest = r->oldest;
	c->n++;
	return 0;
}

static int stream_collect(void *ctx, const char *origin, const char *dest,
			  uint64_t life, uint64_t w)
{
	struct stats_seen *c = ctx;

	assert_int_equal(life, SEMQ_LIFE_LEGACY);
	assert_true(c->streams < 8);
	snprintf(c->stream[c->streams], sizeof c->stream[c->streams],
		 "%s>%s@%llu", origin, dest, (unsigned long long)w);
	c->streams++;
	return 0;
}

/* The count of one stats line (-1 when there is no such line). */
static int64_t stat_of(const struct stats_seen *c, const char *table,
		       const char *origin, const char *dest, int status,
		       int64_t *oldest)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (!strcmp(c->r[i].table, table) &&
		    !strcmp(c->r[i].origin, origin) &&
		    !strcmp(c->r[i].dest, dest) && c->r[i].status == status) {
			if (oldest)
				*oldest = c->r[i].oldest;
			return c->r[i].count;
		}
	return -1;
}

static void test_stats_and_streams(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct stats_seen c;
	struct msg m;
	struct msgid id;
	int64_t oldest = 0;
	unsigned n;

	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW + 7, SEMQ_OK, RES_PROCESSED);
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R2", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW + 3, SEMQ_OK, RES_REDO);
	enqueue(st, "R1", NULL);
	enqueue(st, "R1", NULL);
	mkid(&id, "S1", "R1", 1);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_OK);
	ack(st, 1, CONFIRM_ORIGIN, 1);

	memset(&c, 0, sizeof c);
	assert_int_equal(store_stats(st, stats_collect, &c), SEMQ_OK);
	assert_int_equal(c.n, 6);
	assert_int_equal(stat_of(&c, "tb_0031", "S1", "R1", SS_UNSEND, NULL),
			 1);
	assert_int_equal(stat_of(&c, "tb_0031", "S1", "R1", SS_SEND, NULL), 1);
	assert_int_equal(stat_of(&c, "tb_0030", "R1", "S1", AS_OK, &oldest), 1);
	assert_int_equal(oldest, NOW);
	assert_int_equal(stat_of(&c, "tb_0030", "R1", "S1", AS_INIT, &oldest),
			 1);
	assert_int_equal(oldest, NOW + 7);
	assert_int_equal(stat_of(&c, "tb_0030", "R2", "S1", AS_INIT, &oldest),
			 1);
	assert_int_equal(oldest, NOW + 3);
	assert_int_equal(
		stat_of(&c, "tb_0033", "R2", "S1", RS_PENDING, &oldest), 1);
	assert_int_equal(oldest, NOW + 3);

	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(store_streams_in(st, stream_collect, &c), SEMQ_OK);
	assert_int_equal(c.streams, 2);
	assert_string_equal(c.stream[0], "R1>S1@1");
	assert_string_equal(c.stream[1], "R2>S1@0");
	assert_int_equal(store_stats(st, NULL, &c), SEMQ_ERR_INVALID);
}

/* ---- lives, digests, refusals (docs/PROTOCOL.md, "Lives of a node") ----- */

/* Two lives of R1 (not this node's): numbered so that the one that began
 * here later has the smaller number. */
#define LIFE_A UINT64_C(0x1a2b3c4d5e6f7)
#define LIFE_B UINT64_C(0x0badcafe)

static uint8_t other_body[] = "another document";

/* m with another payload: another message (another digest). */
static void other_content(struct msg *m)
{
	m->payload = other_body;
	m->payload_len = sizeof other_body - 1;
}

/* Rows of `table` of one life. */
static int64_t n_of_life(struct store *st, const char *table, uint64_t life)
{
	char sql[128];

	snprintf(sql, sizeof sql,
		 "SELECT count(*) FROM %s WHERE life = %" PRId64, table,
		 (int64_t)life);
	return q1(st, sql);
}

static void lookup_expect(struct store *st, const struct msgid *id,
			  int want_received, int want_res)
{
	int rec = -1, res = -7;

	assert_int_equal(store_lookup_received(st, id, &rec, &res), SEMQ_OK);
	assert_int_equal(rec, want_received);
	if (want_received)
		assert_int_equal(res, want_res);
}

/*
 * The digest decides what a second copy of a seq is: the same digest (or
 * either unknown) is a duplicate with the verdict recorded the first time;
 * another digest is refused as a conflict, nothing written and no plugin
 * call; a seq at or below the watermark whose row was purged is refused
 * undecided when the copy has a digest, a duplicate when it has none; a
 * message whose prev_digest is not what was recorded for its prev_seq is a
 * conflict. store_lookup_received answers alike.
 */
static void test_receive_digest_checks(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct msg m, m1;
	char buf[32];
	uint64_t d1, d2;
	unsigned n = 99;
	int ok = 0;

	mkmsg(&m1, "R1", "S1", 1, "K", 0);
	d1 = semq_msg_digest(&m1);
	m1.id.digest = d1;
	recv_expect(st, &m1, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(q1(st, "SELECT digest FROM tb_0030 WHERE seq = 1"),
			 (int64_t)d1);

	/* The same message: its recorded verdict; an unknown digest on
	 * either side is taken for the same message. */
	recv_expect(st, &m1, &a, NOW + 1, SEMQ_DUPLICATE, RES_PROCESSED);
	m = m1;
	m.id.digest = 0;
	recv_expect(st, &m, &a, NOW + 1, SEMQ_DUPLICATE, RES_PROCESSED);
	assert_int_equal(a.calls, 1);

	/* Another message under seq 1: a conflict, nothing written. */
	m = m1;
	other_content(&m);
	d2 = semq_msg_digest(&m);
	assert_true(d2 != d1 && d2 != 0);
	m.id.digest = d2;
	recv_expect(st, &m, &a, NOW + 2, SEMQ_DECLINED, RES_CONFLICT);
	assert_non_null(strstr(store_errmsg(st), "another message"));
	assert_int_equal(a.calls, 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033"), 0);
	assert_int_equal(q1(st, "SELECT digest FROM tb_0030 WHERE seq = 1"),
			 (int64_t)d1);
	assert_int_equal(q1(st, "SELECT received_at FROM tb_0030"), NOW);
	lookup_expect(st, &m1.id, 1, RES_PROCESSED);
	lookup_expect(st, &m.id, 1, RES_CONFLICT);
	m.id.digest = 0;
	lookup_expect(st, &m.id, 1, RES_PROCESSED);

	/* The recorded verdict, whatever it is: redo. */
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 2, "L", 0);
	m.id.digest = semq_msg_digest(&m);
	recv_expect(st, &m, &a, NOW + 3, SEMQ_OK, RES_REDO);
	recv_expect(st, &m, &a, NOW + 4, SEMQ_DUPLICATE, RES_REDO);
	lookup_expect(st, &m.id, 1, RES_REDO);
	assert_int_equal(a.calls, 2);

	/* A row recorded without a digest (a revision-1 sender): a copy
	 * with one is the same message. */
	mkmsg(&m, "R1", "S1", 3, NULL, 0);
	recv_expect(st, &m, &a, NOW + 5, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030 WHERE seq = 3"
				" AND digest IS NULL"),
			 1);
	m.id.digest = d2;
	recv_expect(st, &m, &a, NOW + 6, SEMQ_DUPLICATE, RES_PROCESSED);
	lookup_expect(st, &m.id, 1, RES_PROCESSED);
	assert_int_equal(a.calls, 3);

	/* prev_digest: seq 4 follows seq 1 of key K, naming another message
	 * as its predecessor: a conflict, nothing written. */
	mkmsg(&m, "R1", "S1", 4, "K", 1);
	m.id.digest = semq_msg_digest(&m);
	m.prev_digest = d2;
	recv_expect(st, &m, &a, NOW + 7, SEMQ_DECLINED, RES_CONFLICT);
	assert_non_null(strstr(store_errmsg(st), "predecessor seq 1"));
	assert_int_equal(a.calls, 3);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030 WHERE seq = 4"),
			 0);
	/* ... naming the recorded one, or none: applied. */
	m.prev_digest = d1;
	recv_expect(st, &m, &a, NOW + 8, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 5, "K", 4);
	m.id.digest = semq_msg_digest(&m);
	m.prev_digest = 0;
	recv_expect(st, &m, &a, NOW + 9, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(a.calls, 5);

	/* The watermark passes seq 1 and its row is purged. */
	assert_int_equal(store_ack_response(st, &m1.id, CONFIRM_ORIGIN, &ok),
			 SEMQ_OK);
	assert_int_equal(ok, 1);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(store_receipt_purge(st, NOW + 100, 0, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 1);
	assert_string_equal(q1s(st, SEQS("tb_0030", ""), buf, sizeof buf),
			    "2,3,4,5");
	/* With a digest, it cannot tell: undecided, whichever digest. */
	recv_expect(st, &m1, &a, NOW + 10, SEMQ_DECLINED, RES_UNDECIDED);
	assert_non_null(strstr(store_errmsg(st), "cannot tell"));
	lookup_expect(st, &m1.id, 1, RES_UNDECIDED);
	m = m1;
	other_content(&m);
	m.id.digest = d2;
	recv_expect(st, &m, &a, NOW + 10, SEMQ_DECLINED, RES_UNDECIDED);
	lookup_expect(st, &m.id, 1, RES_UNDECIDED);
	/* Without one (a revision-1 sender): a duplicate, as in 0.1. */
	m.id.digest = 0;
	recv_expect(st, &m, &a, NOW + 10, SEMQ_DUPLICATE, RES_DUPLICATE);
	lookup_expect(st, &m.id, 1, RES_DUPLICATE);
	assert_int_equal(a.calls, 5);
	/* (seq 2 went to redo: its effect was rolled back) */
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 4);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 4);
	/* Not seen at all: not received, with or without a digest. */
	mkmsg(&m, "R1", "S1", 9, NULL, 0);
	lookup_expect(st, &m.id, 0, 0);
	m.id.digest = d1;
	lookup_expect(st, &m.id, 0, 0);
}

struct lives_seen {
	int n;
	char line[8][160];
};

static int lives_collect(void *ctx, const struct life_row *r)
{
	struct lives_seen *c = ctx;

	assert_true(c->n < 8);
	snprintf(c->line[c->n], sizeof c->line[c->n],
		 "%s>%s %llx %s mark=%llu rows=%lld at=%lld", r->origin,
		 r->dest, (unsigned long long)r->life,
		 r->relay ? "relay" : "in", (unsigned long long)r->mark,
		 (long long)r->rows, (long long)(r->started_at - NOW));
	c->n++;
	return 0;
}

static int streams_in_collect(void *ctx, const char *origin, const char *dest,
			      uint64_t life, uint64_t w)
{
	struct lives_seen *c = ctx;

	assert_true(c->n < 8);
	snprintf(c->line[c->n], sizeof c->line[c->n], "%s>%s %llx @%llu",
		 origin, dest, (unsigned long long)life, (unsigned long long)w);
	c->n++;
	return 0;
}

static void recv_life(struct store *st, struct applier *a, uint64_t life,
		      uint64_t seq, int64_t now, int want_r, int want_res)
{
	struct msg m;

	mkmsg(&m, "R1", "S1", seq, NULL, 0);
	m.id.life = life;
	m.id.digest = semq_msg_digest(&m);
	recv_expect(st, &m, a, now, want_r, want_res);
}

/*
 * A stream is (origin, dest, life): the same seq of two lives of R1 is two
 * messages, each applied once, each stream with its own watermark; the
 * current life is the one that began here last. store_life_drop refuses
 * the current life without force and a life with unfinished work, drops a
 * retired one with its records, and knows no unknown one.
 */
static void test_lives_separate_streams(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct lives_seen c;
	struct msgid id;
	struct msg m;
	uint64_t w = 99, life = 0, high = 0;
	unsigned n;
	int ok, known = -1;

	recv_life(st, &a, LIFE_A, 1, NOW, SEMQ_OK, RES_PROCESSED);
	recv_life(st, &a, LIFE_B, 1, NOW + 10, SEMQ_OK, RES_PROCESSED);
	recv_life(st, &a, LIFE_A, 2, NOW + 20, SEMQ_OK, RES_PROCESSED);
	recv_life(st, &a, LIFE_A, 1, NOW + 30, SEMQ_DUPLICATE, RES_PROCESSED);
	recv_life(st, &a, LIFE_B, 1, NOW + 30, SEMQ_DUPLICATE, RES_PROCESSED);
	assert_int_equal(a.calls, 3);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect WHERE seq = 1"),
			 2);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 3);

	/* A watermark per life. */
	mkid(&id, "R1", "S1", 1);
	id.life = LIFE_A;
	assert_int_equal(store_ack_response(st, &id, CONFIRM_ORIGIN, &ok),
			 SEMQ_OK);
	id.seq = 2;
	assert_int_equal(store_ack_response(st, &id, CONFIRM_ORIGIN, &ok),
			 SEMQ_OK);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(store_watermark(st, "R1", "S1", LIFE_A, &w), SEMQ_OK);
	assert_int_equal(w, 2);
	assert_int_equal(store_watermark(st, "R1", "S1", LIFE_B, &w), SEMQ_OK);
	assert_int_equal(w, 0);
	assert_int_equal(store_watermark(st, "R1", "S1", SEMQ_LIFE_LEGACY, &w),
			 SEMQ_OK);
	assert_int_equal(w, 0);
	assert_int_equal(store_stream_high(st, "R1", "S1", LIFE_A, &high),
			 SEMQ_OK);
	assert_int_equal(high, 2);
	assert_int_equal(store_stream_high(st, "R1", "S1", LIFE_B, &high),
			 SEMQ_OK);
	assert_int_equal(high, 1);
	/* The row of seq 1 of life B is not the one acked. */
	assert_int_equal(n_of_life(st, "tb_0030", LIFE_B), 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030 WHERE"
				" ack_status = 1"),
			 2);

	/* The current life: the newest started here. */
	assert_int_equal(store_current_life(st, "R1", "S1", &life), SEMQ_OK);
	assert_true(life == LIFE_B);
	assert_int_equal(store_current_life(st, "R9", "S1", &life), SEMQ_OK);
	assert_true(life == SEMQ_LIFE_LEGACY);
	assert_int_equal(store_current_life(st, "S1", "R1", &life), SEMQ_OK);
	assert_true(life == own_life);
	assert_int_equal(store_origin_life(st, "R1", &life, &known), SEMQ_OK);
	assert_int_equal(known, 1);
	assert_true(life == LIFE_B);
	assert_int_equal(store_origin_life(st, "R9", &life, &known), SEMQ_OK);
	assert_int_equal(known, 0);

	/* Both listed, in the order they began here. */
	memset(&c, 0, sizeof c);
	assert_int_equal(store_lives(st, lives_collect, &c), SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.line[0],
			    "R1>S1 1a2b3c4d5e6f7 in mark=2 rows=2 at=0");
	assert_string_equal(c.line[1], "R1>S1 badcafe in mark=0 rows=1 at=10");
	memset(&c, 0, sizeof c);
	assert_int_equal(store_streams_in(st, streams_in_collect, &c), SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.line[0], "R1>S1 1a2b3c4d5e6f7 @2");
	assert_string_equal(c.line[1], "R1>S1 badcafe @0");

	/* The current life is not dropped without force. */
	assert_int_equal(store_life_drop(st, "R1", LIFE_B, 0), SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "current life"));
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_stream_in"), 2);

	/* An unfinished redo entry of the life keeps it, even forced. */
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	recv_life(st, &a, LIFE_A, 3, NOW + 40, SEMQ_OK, RES_REDO);
	assert_int_equal(store_life_drop(st, "R1", LIFE_A, 0), SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "1 redo entries"));
	assert_int_equal(store_life_drop(st, "R1", LIFE_A, 1), SEMQ_DECLINED);
	assert_int_equal(n_of_life(st, "tb_0030", LIFE_A), 3);
	assert_int_equal(
		store_redo_discard(st, redo_id_of(st, 3), "retired", NOW + 50),
		SEMQ_OK);

	/* Retired and finished: dropped, its watermark and rows with it;
	 * the other life keeps its own. */
	assert_int_equal(store_life_drop(st, "R1", LIFE_A, 0), SEMQ_OK);
	assert_int_equal(n_of_life(st, "semq_stream_in", LIFE_A), 0);
	assert_int_equal(n_of_life(st, "tb_0030", LIFE_A), 0);
	assert_int_equal(n_of_life(st, "tb_0030", LIFE_B), 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_stream_in"), 1);
	assert_int_equal(store_watermark(st, "R1", "S1", LIFE_A, &w), SEMQ_OK);
	assert_int_equal(w, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_lives(st, lives_collect, &c), SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.line[0], "R1>S1 badcafe in mark=0 rows=1 at=10");

	/* Unknown lives and origins. */
	assert_int_equal(store_life_drop(st, "R1", LIFE_A, 0),
			 SEMQ_ERR_NOT_FOUND);
	assert_int_equal(store_life_drop(st, "R1", 0x999, 1),
			 SEMQ_ERR_NOT_FOUND);
	assert_int_equal(store_life_drop(st, "R9", LIFE_B, 1),
			 SEMQ_ERR_NOT_FOUND);
	assert_int_equal(store_life_drop(st, "bad id", LIFE_B, 1),
			 SEMQ_ERR_INVALID);

	/* A relay's record of a life: kept while a copy of it is held. */
	assert_int_equal(store_relay_note(st, "R2", "S9", LIFE_A, 5, NOW + 60),
			 SEMQ_OK);
	mkmsg(&m, "R2", "S9", 5, NULL, 0);
	m.id.life = LIFE_A;
	assert_int_equal(store_enqueue_copy(st, &m, NOW + 60), SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_lives(st, lives_collect, &c), SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.line[1],
			    "R2>S9 1a2b3c4d5e6f7 relay mark=5 rows=0 at=60");
	assert_int_equal(store_life_drop(st, "R2", LIFE_A, 1), SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "1 relay copies"));
	assert_int_equal(store_drop_copy(st, &m.id), SEMQ_OK);
	assert_int_equal(store_life_drop(st, "R2", LIFE_A, 1), SEMQ_OK);
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_stream_relay"), 0);

	/* The current life goes with force. */
	assert_int_equal(store_life_drop(st, "R1", LIFE_B, 1), SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_lives(st, lives_collect, &c), SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 0);
}

/* Enqueues one message of this node of `type` (to tell rows apart). */
static uint64_t enqueue_t(struct store *st, const char *dest, const char *key,
			  uint32_t type)
{
	struct msg m;
	char err[SEMQ_ERRLEN] = "";
	uint64_t seq = 0;

	mkmsg(&m, "", dest, 0, key, 0);
	m.type = type;
	if (store_enqueue(st, &m, &seq, err, sizeof err) != SEMQ_OK)
		fail_msg("enqueue: %s", err);
	return seq;
}

/* The id of this node's row dest/seq, with a digest. */
static struct msgid own_id(const char *dest, uint64_t seq, uint64_t digest)
{
	struct msgid id;

	mkid(&id, own_node, dest, seq);
	id.digest = digest;
	return id;
}

/* One outbound row: its status, type, prev_seq, result, last_error. */
struct out_line {
	int status, result;
	uint32_t type;
	uint64_t prev_seq, digest;
	int64_t next_at;
	char last_error[SEMQ_ERRLEN];
};

static int out_line(struct store *st, const char *origin, const char *dest,
		    uint64_t seq, struct out_line *l)
{
	struct msgid id;
	struct msg m;
	struct out_row row;
	int r;

	mkid(&id, origin, dest, seq);
	memset(l, 0, sizeof *l);
	r = store_outbound_get(st, &id, &m, &row);
	if (r != SEMQ_OK)
		return r;
	l->status = row.status;
	l->result = row.result;
	l->type = m.type;
	l->prev_seq = m.prev_seq;
	l->digest = m.id.digest;
	l->next_at = row.next_attempt_at;
	snprintf(l->last_error, sizeof l->last_error, "%s",
		 row.last_error ? row.last_error : "");
	msg_clear(&m);
	return SEMQ_OK;
}

/*
 * store_renumber: the refused row and the unconfirmed later rows of its
 * key — not the rows of other keys or streams, not the confirmed ones —
 * get the next seqs of the stream after its counter, in order, each
 * chained to the one before; they go back to unsent (a cancelled row whose
 * tombstone is unanswered stays cancelled) and the old ids come back with
 * their digests. A confirmed row and a relay's copy are declined.
 */
static void test_renumber(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	const char *why = "S1 holds another message under seq 2";
	struct msgid id, *olds = NULL;
	struct out_line l;
	struct msg m;
	unsigned n = 99;
	uint64_t first = 0, last = 0, i;
	const uint64_t d2 = UINT64_C(0xd2d2d2d2d2d2d2d2), d4 = 44;

	assert_int_equal(enqueue_t(st, "S1", "K", 101), 1);
	assert_int_equal(enqueue_t(st, "S1", "K", 102), 2);
	assert_int_equal(enqueue_t(st, "S1", "L", 103), 3);
	assert_int_equal(enqueue_t(st, "S1", "K", 104), 4);
	assert_int_equal(enqueue_t(st, "S1", "K", 105), 5);
	assert_int_equal(enqueue_t(st, "S1", NULL, 106), 6);
	assert_int_equal(enqueue_t(st, "S1", "K", 107), 7);
	assert_int_equal(enqueue_t(st, "S1", "K", 108), 8);
	assert_int_equal(enqueue_t(st, "S2", "K", 201), 1);
	/* 1 confirmed, 2 sent (digest d2), 4 relay-acked (digest d4), 5
	 * confirmed, 7 cancelled (tombstone unanswered), 3, 6, 8 unsent */
	id = own_id("S1", 1, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	id = own_id("S1", 2, d2);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	id = own_id("S1", 4, d4);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	assert_int_equal(store_mark_relay_acked(st, &id, NOW, NOW + 30000),
			 SEMQ_OK);
	id = own_id("S1", 5, 55);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	id = own_id("S1", 7, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);

	/* S1 has reported seeing up to 4: at or below the counter (8), that
	 * may be this database's own messages, so it does not tell how far
	 * the lost timeline reached; the refused row's own seq (2) does. */
	assert_int_equal(
		store_stream_resync(st, "S1", 4, NOW, why, 0, NULL, NULL),
		SEMQ_DECLINED);
	id = own_id("S1", 2, d2);
	assert_int_equal(
		store_renumber(st, &id, NOW + 5, why, &olds, &n, &first),
		SEMQ_OK);
	assert_int_equal(n, 4);
	assert_int_equal(first, 9);
	assert_non_null(olds);
	assert_int_equal(olds[0].seq, 2);
	assert_true(olds[0].digest == d2);
	assert_int_equal(olds[1].seq, 4);
	assert_true(olds[1].digest == d4);
	assert_int_equal(olds[2].seq, 7);
	assert_true(olds[2].digest == 0); /* never sent */
	assert_int_equal(olds[3].seq, 8);
	assert_true(olds[3].digest == 0);
	for (i = 0; i < n; i++) {
		assert_string_equal(olds[i].origin, "R1");
		assert_string_equal(olds[i].dest, "S1");
		assert_true(olds[i].life == own_life);
	}
	free(olds);
	olds = NULL;

	/* The refused seq is gone (the lost timeline's message fills it);
	 * the others (4, its copy at the relay taken back, and 7, 8) get a
	 * filler each, a cancel of nothing that S1's watermark can pass;
	 * the rows are at 9..12, in their order, chained from the first
	 * one's predecessor. */
	assert_int_equal(out_line(st, "R1", "S1", 2, &l), SEMQ_ERR_NOT_FOUND);
	assert_int_equal(q1(st, "SELECT seen_high FROM semq_stream_out WHERE"
				" dest = 'S1'"),
			 2);
	for (i = 4; i <= 8; i++) {
		int filler = 0;

		if (i == 5 || i == 6)
			continue;
		id = own_id("S1", i, 0);
		assert_int_equal(out_line(st, "R1", "S1", i, &l), SEMQ_OK);
		assert_int_equal(l.status, SS_CANCELLED);
		assert_int_equal(l.result, -1); /* to send */
		assert_int_equal(l.type, 0);
		assert_int_equal(l.prev_seq, 0);
		assert_true(l.digest == semq_filler_digest(&id));
		assert_int_equal(l.next_at, NOW + 5);
		assert_non_null(strstr(l.last_error, "filler"));
		assert_int_equal(store_is_filler(st, &id, &filler), SEMQ_OK);
		assert_true(filler);
	}
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031 WHERE seq IN"
				" (4, 7, 8) AND msg_key IS NULL"
				" AND length(payload) = 0"),
			 3);
	assert_int_equal(out_line(st, "R1", "S1", 9, &l), SEMQ_OK);
	assert_int_equal(l.type, 102);
	assert_int_equal(l.prev_seq, 1);
	assert_int_equal(l.status, SS_UNSEND);
	assert_true(l.digest == d2); /* the same message, the same digest */
	assert_int_equal(l.next_at, NOW + 5);
	assert_string_equal(l.last_error, why);
	assert_int_equal(out_line(st, "R1", "S1", 10, &l), SEMQ_OK);
	assert_int_equal(l.type, 104);
	assert_int_equal(l.prev_seq, 9);
	assert_int_equal(l.status, SS_UNSEND);
	assert_true(l.digest == d4);
	assert_string_equal(l.last_error, why);
	assert_int_equal(out_line(st, "R1", "S1", 11, &l), SEMQ_OK);
	assert_int_equal(l.type, 107);
	assert_int_equal(l.prev_seq, 10);
	assert_int_equal(l.status, SS_CANCELLED);
	assert_int_equal(l.result, -1);
	assert_int_equal(out_line(st, "R1", "S1", 12, &l), SEMQ_OK);
	assert_int_equal(l.type, 108);
	assert_int_equal(l.prev_seq, 11);
	assert_int_equal(l.status, SS_UNSEND);

	/* The rest stays where it was. */
	assert_int_equal(out_line(st, "R1", "S1", 1, &l), SEMQ_OK);
	assert_int_equal(l.type, 101);
	assert_int_equal(l.status, SS_ACK2);
	assert_int_equal(out_line(st, "R1", "S1", 3, &l), SEMQ_OK);
	assert_int_equal(l.type, 103);
	assert_int_equal(l.status, SS_UNSEND);
	assert_int_equal(out_line(st, "R1", "S1", 5, &l), SEMQ_OK);
	assert_int_equal(l.type, 105);
	assert_int_equal(l.status, SS_ACK2);
	assert_int_equal(l.prev_seq, 4); /* as it was: it took effect */
	assert_int_equal(out_line(st, "R1", "S1", 6, &l), SEMQ_OK);
	assert_int_equal(l.type, 106);
	assert_int_equal(out_line(st, "R1", "S2", 1, &l), SEMQ_OK);
	assert_int_equal(l.type, 201);
	assert_int_equal(l.status, SS_UNSEND);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031"), 12);

	/* The counter moved past them; the next message follows. */
	assert_int_equal(store_last_seq(st, "S1", &last), SEMQ_OK);
	assert_int_equal(last, 12);
	assert_int_equal(store_last_seq(st, "S2", &last), SEMQ_OK);
	assert_int_equal(last, 1);
	assert_int_equal(enqueue_t(st, "S1", "K", 109), 13);
	assert_int_equal(out_line(st, "R1", "S1", 13, &l), SEMQ_OK);
	assert_int_equal(l.prev_seq, 12);

	/* A row without a key moves alone. */
	id = own_id("S1", 6, 0);
	assert_int_equal(
		store_renumber(st, &id, NOW + 6, why, &olds, &n, &first),
		SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(first, 14);
	free(olds);
	olds = NULL;
	assert_int_equal(out_line(st, "R1", "S1", 14, &l), SEMQ_OK);
	assert_int_equal(l.type, 106);
	assert_int_equal(l.prev_seq, 0);
	/* its own seq is the lost timeline's: no filler there */
	assert_int_equal(out_line(st, "R1", "S1", 6, &l), SEMQ_ERR_NOT_FOUND);
	assert_int_equal(q1(st, "SELECT seen_high FROM semq_stream_out WHERE"
				" dest = 'S1'"),
			 6);

	/* A filler is no message: it is never renumbered. */
	id = own_id("S1", 7, 0);
	assert_int_equal(
		store_renumber(st, &id, NOW + 6, why, &olds, &n, &first),
		SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "filler"));
	assert_null(olds);

	/* Declined: a confirmed row, a recorded tombstone, a relay's copy;
	 * none: not found. Nothing moves. */
	id = own_id("S1", 5, 0);
	assert_int_equal(
		store_renumber(st, &id, NOW + 7, why, &olds, &n, &first),
		SEMQ_DECLINED);
	assert_null(olds);
	assert_int_equal(n, 0);
	id = own_id("S1", 11, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_CANCELLED, NOW),
			 SEMQ_OK);
	assert_int_equal(
		store_renumber(st, &id, NOW + 7, why, &olds, &n, &first),
		SEMQ_DECLINED);
	mkmsg(&m, "R9", "S1", 3, "K", 0);
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	assert_int_equal(
		store_renumber(st, &m.id, NOW + 7, why, &olds, &n, &first),
		SEMQ_DECLINED);
	assert_null(olds);
	assert_non_null(strstr(store_errmsg(st), "not a message of this"));
	id = own_id("S1", 99, 0);
	assert_int_equal(
		store_renumber(st, &id, NOW + 7, why, &olds, &n, &first),
		SEMQ_ERR_NOT_FOUND);
	assert_int_equal(store_last_seq(st, "S1", &last), SEMQ_OK);
	assert_int_equal(last, 14);
	assert_int_equal(out_line(st, "R9", "S1", 3, &l), SEMQ_OK);
}

struct streams_out_seen {
	int n;
	char line[4][SEMQ_ERRLEN + 96];
};

static int streams_out_collect(void *ctx, const struct out_stream *s)
{
	struct streams_out_seen *c = ctx;

	assert_true(c->n < 4);
	snprintf(c->line[c->n], sizeof c->line[c->n],
		 "%s last=%llu resyncs=%lld at=%lld note=%s", s->dest,
		 (unsigned long long)s->last_seq, (long long)s->resyncs,
		 (long long)(s->resync_at ? s->resync_at - NOW : -1),
		 s->note ? s->note : "(null)");
	c->n++;
	return 0;
}

static void streams_out_expect(struct store *st, int n, const char *first)
{
	struct streams_out_seen c;

	memset(&c, 0, sizeof c);
	assert_int_equal(store_streams_out(st, streams_out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, n);
	if (first)
		assert_string_equal(c.line[0], first);
}

/*
 * store_stream_resync moves a stream's counter up to what a peer has seen,
 * never down; each resync is counted and its note kept for semqctl status;
 * `record` writes one without moving; nothing to do is declined. The next
 * message gets the seq after the counter.
 */
static void test_stream_resync(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	uint64_t from = 99, last = 0;
	int moved = -1;

	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	streams_out_expect(st, 1, "S1 last=3 resyncs=0 at=-1 note=(null)");

	/* At or below the counter: nothing to do. */
	assert_int_equal(
		store_stream_resync(st, "S1", 2, NOW, "two", 0, &from, &moved),
		SEMQ_DECLINED);
	assert_int_equal(moved, 0);
	assert_int_equal(store_stream_resync(st, "S1", 3, NOW, "three", 0,
					     &from, &moved),
			 SEMQ_DECLINED);
	streams_out_expect(st, 1, "S1 last=3 resyncs=0 at=-1 note=(null)");
	/* ... and such a high may count this database's own messages: it
	 * does not tell how far the lost timeline reached */
	assert_int_equal(q1(st, "SELECT seen_high FROM semq_stream_out"), 0);

	/* Above: the counter moves, counted, noted; the lost timeline
	 * reached that far. */
	assert_int_equal(store_stream_resync(st, "S1", 10, NOW + 1,
					     "P1 had seen up to seq 10", 0,
					     &from, &moved),
			 SEMQ_OK);
	assert_int_equal(from, 3);
	assert_int_equal(moved, 1);
	assert_int_equal(store_last_seq(st, "S1", &last), SEMQ_OK);
	assert_int_equal(last, 10);
	streams_out_expect(st, 1,
			   "S1 last=10 resyncs=1 at=1 note=P1 had seen up to "
			   "seq 10");
	assert_int_equal(q1(st, "SELECT seen_high FROM semq_stream_out"), 10);

	/* Recorded without moving, never down. */
	assert_int_equal(store_stream_resync(st, "S1", 5, NOW + 2,
					     "S1 had seen up to seq 5", 1,
					     &from, &moved),
			 SEMQ_OK);
	assert_int_equal(from, 10);
	assert_int_equal(moved, 0);
	assert_int_equal(store_last_seq(st, "S1", &last), SEMQ_OK);
	assert_int_equal(last, 10);
	streams_out_expect(st, 1,
			   "S1 last=10 resyncs=2 at=2 note=S1 had seen up to "
			   "seq 5");
	assert_int_equal(store_stream_resync(st, "S1", 5, NOW + 3, "again", 0,
					     &from, &moved),
			 SEMQ_DECLINED);
	streams_out_expect(st, 1,
			   "S1 last=10 resyncs=2 at=2 note=S1 had seen up to "
			   "seq 5");

	/* The next message gets counter + 1, and so on. */
	assert_int_equal(enqueue(st, "S1", NULL), 11);
	assert_int_equal(enqueue(st, "S1", NULL), 12);

	/* A stream this database never used: it starts after high. */
	assert_int_equal(store_stream_resync(st, "S2", 7, NOW + 4, "new", 0,
					     &from, &moved),
			 SEMQ_OK);
	assert_int_equal(from, 0);
	assert_int_equal(moved, 1);
	assert_int_equal(enqueue(st, "S2", NULL), 8);
	streams_out_expect(st, 2, NULL);
	assert_int_equal(store_stream_resync(st, "S1", (uint64_t)INT64_MAX + 1,
					     NOW, "x", 1, &from, &moved),
			 SEMQ_ERR_INVALID);
}

/*
 * store_hold: an unconfirmed row (0, 4, 6) is held for the operator (8)
 * with the result and the reason, and is neither sent nor queried; a
 * cancel of a held row ends it cancelled at once (no tombstone to send);
 * a confirmation ends it too. store_mark_confirmed takes RES_DEAD.
 */
static void test_hold_and_cancel(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	const char *why = "S1 cannot tell whether it has this message";
	struct out_seen c;
	struct out_line l;
	struct msgid id;
	int i;

	for (i = 0; i < 6; i++)
		enqueue(st, "S1", NULL);
	/* 1 unsent, 2 sent, 3 relay-acked: all may be held */
	id = own_id("S1", 1, 0);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, why, NOW + 1),
			 SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S1", 1, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_HELD);
	assert_int_equal(l.result, RES_UNDECIDED);
	assert_string_equal(l.last_error, why);
	assert_int_equal(l.next_at, NOW + 1);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, why, NOW),
			 SEMQ_DECLINED);
	id = own_id("S1", 2, 0);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 10), SEMQ_OK);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, why, NOW), SEMQ_OK);
	id = own_id("S1", 3, 0);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 10), SEMQ_OK);
	assert_int_equal(store_mark_relay_acked(st, &id, NOW, NOW + 10),
			 SEMQ_OK);
	assert_int_equal(store_hold(st, &id, RES_CONFLICT, why, NOW), SEMQ_OK);
	/* not 4: confirmed, nor a row that is not there */
	id = own_id("S1", 4, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, why, NOW),
			 SEMQ_DECLINED);
	/* an unanswered cancel is held too: its destination cannot tell
	 * what it would cancel (it is not sent again and again) */
	id = own_id("S1", 5, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, why, NOW), SEMQ_OK);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, why, NOW),
			 SEMQ_DECLINED);
	id = own_id("S1", 9, 0);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, why, NOW),
			 SEMQ_DECLINED);

	/* Held rows are not sent, not queried, not tombstones. */
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_sendable(st, "S1", NOW + 100, 100, 100,
					      out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 6);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_in_doubt(st, INT64_MAX, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_tombstones(st, INT64_MAX, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0); /* the held cancel (5) goes no more */

	/* The operator cancels a held row: cancelled and answered at once. */
	id = own_id("S1", 1, 0);
	assert_int_equal(store_cancel(st, &id, NOW + 200), SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S1", 1, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_CANCELLED);
	assert_int_equal(l.result, RES_CANCELLED);
	assert_int_equal(q1(st, "SELECT acked_at FROM tb_0031 WHERE seq = 1"),
			 NOW + 200);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_tombstones(st, INT64_MAX, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0); /* no cancel of it to send */
	assert_int_equal(store_cancel(st, &id, NOW + 300), SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S1", 1, &l), SEMQ_OK);
	assert_int_equal(l.result, RES_CANCELLED);

	/* A held row confirmed after all (it took effect) is confirmed. */
	id = own_id("S1", 2, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S1", 2, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_ACK2);
	assert_int_equal(l.result, RES_PROCESSED);

	/* Dead at the destination: a verdict like the others. */
	id = own_id("S1", 6, 0);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 10), SEMQ_OK);
	assert_int_equal(store_mark_confirmed(st, &id, RES_DEAD, NOW + 400),
			 SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S1", 6, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_ACK2);
	assert_int_equal(l.result, RES_DEAD);
	id = own_id("S1", 3, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_DEAD, NOW + 400),
			 SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S1", 3, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_ACK2);
	assert_int_equal(l.result, RES_DEAD);
	/* A refusal is no verdict to confirm with. */
	id = own_id("S1", 5, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_CONFLICT, NOW),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_mark_confirmed(st, &id, RES_UNDECIDED, NOW),
			 SEMQ_ERR_INVALID);
}

struct highs_seen {
	int n;
	char line[4][96];
};

static int highs_collect(void *ctx, const char *dest, uint64_t high)
{
	struct highs_seen *c = ctx;

	assert_true(c->n < 4);
	snprintf(c->line[c->n], sizeof c->line[c->n], "%s:%llu", dest,
		 (unsigned long long)high);
	c->n++;
	return 0;
}

/*
 * A relay's copies: unique on their id; a second copy of the same message
 * (or an unknown digest) is a duplicate, one of another message is
 * declined and changes nothing. store_outbound_state / _digest read the
 * status and digest; store_drop_copy with a digest drops only the copy of
 * that message. The relay's record keeps the highest seq per stream and
 * life.
 */
static void test_relay_copies_and_record(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct msg m, m2, got;
	struct out_row row;
	struct highs_seen c;
	struct msgid id;
	uint64_t d1, d2, dig = 7, high = 99;
	int status = -1;

	mkmsg(&m, "R1", "S1", 7, "K", 5);
	m.id.life = LIFE_A;
	d1 = semq_msg_digest(&m);
	m.id.digest = d1;
	m.prev_digest = 4242;
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	m2 = m;
	other_content(&m2);
	d2 = semq_msg_digest(&m2);
	m2.id.digest = d2;
	assert_int_equal(store_enqueue_copy(st, &m2, NOW + 1), SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "another message"));
	assert_int_equal(store_enqueue_copy(st, &m, NOW + 1), SEMQ_DUPLICATE);
	m2.id.digest = 0;
	assert_int_equal(store_enqueue_copy(st, &m2, NOW + 1), SEMQ_DUPLICATE);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031"), 1);
	assert_int_equal(store_outbound_get(st, &m.id, &got, &row), SEMQ_OK);
	assert_memory_equal(got.payload, "document", 8);
	assert_true(got.id.digest == d1);
	assert_true(got.id.life == LIFE_A);
	assert_int_equal(got.prev_digest, 4242);
	assert_int_equal(row.next_attempt_at, NOW);
	msg_clear(&got);

	/* Its status and digest, without the payload. */
	assert_int_equal(store_outbound_state(st, &m.id, &status, &dig),
			 SEMQ_OK);
	assert_int_equal(status, SS_UNSEND);
	assert_true(dig == d1);
	dig = 0;
	assert_int_equal(store_outbound_digest(st, &m.id, &dig), SEMQ_OK);
	assert_true(dig == d1);
	mkid(&id, "R1", "S1", 8);
	id.life = LIFE_A;
	assert_int_equal(store_outbound_state(st, &id, &status, &dig),
			 SEMQ_ERR_NOT_FOUND);
	assert_int_equal(store_outbound_digest(st, &id, &dig),
			 SEMQ_ERR_NOT_FOUND);
	/* Another life is another id. */
	mkid(&id, "R1", "S1", 7);
	assert_int_equal(store_outbound_state(st, &id, &status, &dig),
			 SEMQ_ERR_NOT_FOUND);

	/* A row of this node's own: no digest until sent; the digest of its
	 * content meanwhile; the one it was sent with after. */
	assert_int_equal(enqueue(st, "S1", NULL), 1);
	id = own_id("S1", 1, 0);
	assert_int_equal(store_outbound_state(st, &id, &status, &dig), SEMQ_OK);
	assert_true(dig == 0);
	assert_int_equal(store_outbound_digest(st, &id, &dig), SEMQ_OK);
	mkmsg(&m2, "P1", "S1", 1, NULL, 0);
	assert_true(dig == semq_msg_digest(&m2));
	id.digest = 0xabc;
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 10), SEMQ_OK);
	assert_int_equal(store_outbound_state(st, &id, &status, &dig), SEMQ_OK);
	assert_int_equal(status, SS_SEND);
	assert_int_equal(dig, 0xabc);
	assert_int_equal(store_outbound_digest(st, &id, &dig), SEMQ_OK);
	assert_int_equal(dig, 0xabc);
	/* ... and a copy is never this node's row to drop */
	assert_int_equal(store_drop_copy(st, &id), SEMQ_DECLINED);

	/* Dropped only as the copy of that message. */
	id = m.id;
	id.digest = d2;
	assert_int_equal(store_drop_copy(st, &id), SEMQ_DECLINED);
	assert_int_equal(store_outbound_state(st, &m.id, &status, &dig),
			 SEMQ_OK);
	id.digest = d1;
	assert_int_equal(store_drop_copy(st, &id), SEMQ_OK);
	assert_int_equal(store_outbound_state(st, &m.id, &status, &dig),
			 SEMQ_ERR_NOT_FOUND);
	assert_int_equal(store_drop_copy(st, &id), SEMQ_DECLINED);
	/* A copy whose digest is unknown goes with any; no digest given
	 * drops any copy. */
	m.id.digest = 0;
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	id.digest = d2;
	assert_int_equal(store_drop_copy(st, &id), SEMQ_OK);
	m.id.digest = d1;
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	id.digest = 0;
	assert_int_equal(store_drop_copy(st, &id), SEMQ_OK);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031"), 1);

	/* The relay's record: the max per (origin, dest, life). */
	assert_int_equal(store_relay_note(st, "R1", "S1", LIFE_A, 5, NOW),
			 SEMQ_OK);
	assert_int_equal(store_relay_note(st, "R1", "S1", LIFE_A, 3, NOW + 1),
			 SEMQ_OK);
	assert_int_equal(store_relay_high(st, "R1", "S1", LIFE_A, &high),
			 SEMQ_OK);
	assert_int_equal(high, 5);
	assert_int_equal(store_relay_note(st, "R1", "S1", LIFE_A, 9, NOW + 2),
			 SEMQ_OK);
	assert_int_equal(store_relay_note(st, "R1", "S2", LIFE_A, 4, NOW + 2),
			 SEMQ_OK);
	assert_int_equal(store_relay_note(st, "R1", "S1", LIFE_B, 2, NOW + 3),
			 SEMQ_OK);
	assert_int_equal(store_relay_high(st, "R1", "S1", LIFE_A, &high),
			 SEMQ_OK);
	assert_int_equal(high, 9);
	assert_int_equal(store_relay_high(st, "R1", "S1", LIFE_B, &high),
			 SEMQ_OK);
	assert_int_equal(high, 2);
	assert_int_equal(store_relay_high(st, "R1", "S3", LIFE_A, &high),
			 SEMQ_OK);
	assert_int_equal(high, 0);
	assert_int_equal(store_relay_high(st, "R2", "S1", LIFE_A, &high),
			 SEMQ_OK);
	assert_int_equal(high, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_relay_streams(st, "R1", LIFE_A, highs_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.line[0], "S1:9");
	assert_string_equal(c.line[1], "S2:4");
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_relay_streams(st, "R1", LIFE_B, highs_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.line[0], "S1:2");
	/* It began when first noted. */
	assert_int_equal(q1(st, "SELECT min(started_at) FROM"
				" semq_stream_relay WHERE dest = 'S1'"),
			 NOW);
	assert_int_equal(q1(st, "SELECT max(started_at) FROM"
				" semq_stream_relay WHERE dest = 'S1'"),
			 NOW + 3);
	assert_int_equal(store_relay_note(st, "R1", "S1", LIFE_A, 0, NOW),
			 SEMQ_ERR_INVALID);
	assert_int_equal(
		store_relay_note(st, "R1", "S1", SEMQ_LIFE_NONE, 3, NOW),
		SEMQ_ERR_INVALID);
}

struct life_out_seen {
	int n;
	uint64_t seq[16], life[16];
};

static int life_out_collect(void *ctx, const struct msg *m,
			    const struct out_row *row)
{
	struct life_out_seen *c = ctx;

	(void)row;
	assert_true(c->n < 16);
	c->seq[c->n] = m->id.seq;
	c->life[c->n] = m->id.life;
	c->n++;
	return 0;
}

/*
 * A relay holding copies of two lives of R1 for S1 sends first those of
 * the life that began at the relay first (its record's started_at, not the
 * life's number), and those of the other life only once none of the first
 * is left to send.
 */
static void test_relay_sends_older_life_first(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct life_out_seen c;
	struct msg m;
	struct msgid id;
	uint64_t i;
	int k;

	/* LIFE_B (the smaller number) began here later than LIFE_A. */
	assert_int_equal(store_relay_note(st, "R1", "S1", LIFE_A, 2, NOW),
			 SEMQ_OK);
	assert_int_equal(store_relay_note(st, "R1", "S1", LIFE_B, 3, NOW + 50),
			 SEMQ_OK);
	for (i = 1; i <= 3; i++) {
		mkmsg(&m, "R1", "S1", i, NULL, 0);
		m.id.life = LIFE_B;
		assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	}
	for (i = 1; i <= 2; i++) {
		mkmsg(&m, "R1", "S1", i, NULL, 0);
		m.id.life = LIFE_A;
		assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	}

	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_sendable(st, "S1", NOW, 100, 100,
					      life_out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	for (k = 0; k < c.n; k++) {
		assert_true(c.life[k] == LIFE_A);
		assert_int_equal(c.seq[k], k + 1);
	}
	/* The same with every destination. */
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_sendable(st, NULL, NOW, 100, 100,
					      life_out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_true(c.life[0] == LIFE_A && c.life[1] == LIFE_A);

	/* One of LIFE_A sent, one back to unsent: LIFE_A still goes first. */
	mkid(&id, "R1", "S1", 1);
	id.life = LIFE_A;
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 10), SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_sendable(st, "S1", NOW, 100, 100,
					      life_out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_true(c.life[0] == LIFE_A);
	assert_int_equal(c.seq[0], 2);

	/* Only when LIFE_A has nothing left to send does LIFE_B go. */
	id.seq = 2;
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 10), SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_sendable(st, "S1", NOW, 100, 100,
					      life_out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 3);
	for (k = 0; k < c.n; k++) {
		assert_true(c.life[k] == LIFE_B);
		assert_int_equal(c.seq[k], k + 1);
	}
	/* The window counts the stream's copies in flight of every life. */
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_sendable(st, "S1", NOW, 3, 100,
					      life_out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
}

/*
 * What became of a message in the redo queue is what a second copy of it
 * is answered: done -> processed, discarded -> cancelled, dead -> dead (a
 * receipt that died at once, or a redo entry that died later); a
 * scheduled message that ran -> processed.
 */
static void test_redo_write_back(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct msg m1, m2, m3, m4, m5;
	int status = -9;

	verdicts(&a, 4, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY,
		 SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_RETRY);
	mkmsg(&m1, "R1", "S1", 1, "K1", 0);
	m1.id.digest = semq_msg_digest(&m1);
	recv_expect(st, &m1, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m2, "R1", "S1", 2, "K2", 0);
	m2.id.digest = semq_msg_digest(&m2);
	recv_expect(st, &m2, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m3, "R1", "S1", 3, "K3", 0);
	m3.id.digest = semq_msg_digest(&m3);
	recv_expect(st, &m3, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m4, "R1", "S1", 4, "K4", 0);
	recv_expect(st, &m4, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m5, "R1", "S1", 5, "K5", 0);
	m5.deliver_at = NOW + 60000;
	recv_expect(st, &m5, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	recv_expect(st, &m5, &a, NOW, SEMQ_DUPLICATE, RES_SCHEDULED);

	/* done */
	assert_int_equal(store_redo_run(st, redo_id_of(st, 1), NOW + 5000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	recv_expect(st, &m1, &a, NOW + 6000, SEMQ_DUPLICATE, RES_PROCESSED);
	lookup_expect(st, &m1.id, 1, RES_PROCESSED);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030 WHERE seq = 1"),
			 RES_PROCESSED);
	/* discarded */
	assert_int_equal(
		store_redo_discard(st, redo_id_of(st, 2), "operator", NOW + 1),
		SEMQ_OK);
	recv_expect(st, &m2, &a, NOW + 6000, SEMQ_DUPLICATE, RES_CANCELLED);
	lookup_expect(st, &m2.id, 1, RES_CANCELLED);
	/* dead at once: recorded as redo, answered dead */
	recv_expect(st, &m3, &a, NOW + 6000, SEMQ_DUPLICATE, RES_DEAD);
	lookup_expect(st, &m3.id, 1, RES_DEAD);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030 WHERE seq = 3"),
			 RES_REDO);
	/* dead later (PERMANENT on its run) */
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	assert_int_equal(store_redo_run(st, redo_id_of(st, 4), NOW + 5000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DEAD);
	recv_expect(st, &m4, &a, NOW + 6000, SEMQ_DUPLICATE, RES_DEAD);
	lookup_expect(st, &m4.id, 1, RES_DEAD);
	/* ... and retried by the operator: redo again until it runs */
	assert_int_equal(store_redo_retry(st, redo_id_of(st, 4), NOW + 7000),
			 SEMQ_OK);
	lookup_expect(st, &m4.id, 1, RES_REDO);
	assert_int_equal(store_redo_run(st, redo_id_of(st, 4), NOW + 7000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	lookup_expect(st, &m4.id, 1, RES_PROCESSED);
	/* scheduled, then run at its time */
	assert_int_equal(store_redo_run(st, redo_id_of(st, 5), NOW + 60000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	recv_expect(st, &m5, &a, NOW + 60001, SEMQ_DUPLICATE, RES_PROCESSED);
	{
		char buf[32];

		assert_string_equal(
			q1s(st, SEQS("effect", ""), buf, sizeof buf), "1,4,5");
	}
}

/* ---- custody (docs/PROTOCOL.md, "Custody") ------------------------------- */

/* NOW as SQL text, to write created_at as an offset. */
#define NOW_SQL "1700000000000"

/* A relay's copy of origin/dest/seq: a payload of len bytes, created at
 * NOW + created, digest 0xd000 + seq. */
static void copy_in(struct store *st, const char *origin, const char *dest,
		    uint64_t seq, size_t len, int64_t created)
{
	static uint8_t body[64];
	struct msg m;

	assert_true(len <= sizeof body);
	memset(body, 'x', sizeof body);
	mkmsg(&m, origin, dest, seq, NULL, 0);
	m.payload = body;
	m.payload_len = len;
	m.created_at = NOW + created;
	m.id.digest = 0xd000 + seq;
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
}

/* The id of a copy made by copy_in (with its digest). */
static struct msgid copy_id(const char *origin, const char *dest, uint64_t seq)
{
	struct msgid id;

	mkid(&id, origin, dest, seq);
	id.digest = 0xd000 + seq;
	return id;
}

struct custody_seen {
	char line[1024];
};

static int custody_collect(void *ctx, const char *origin, const char *dest,
			   int64_t messages, int64_t bytes, int64_t oldest)
{
	struct custody_seen *c = ctx;
	size_t n = strlen(c->line);

	snprintf(c->line + n, sizeof c->line - n, "%s%s/%s:%lld:%lld:%lld",
		 n ? ";" : "", origin, dest, (long long)messages,
		 (long long)bytes, (long long)(oldest - NOW));
	return 0;
}

/*
 * "origin/dest:messages:bytes:oldest-NOW;..." of the copies of relay P1:
 * what store_custody_list says (semq_custody, kept by the triggers) and
 * what the rows of tb_0031 say must both be `want`; store_custody_use of
 * origin agrees.
 */
static void custody_expect(struct store *st, const char *origin,
			   const char *want, int64_t o_msgs, int64_t o_bytes,
			   int64_t all_msgs, int64_t all_bytes)
{
	struct custody_seen c;
	struct custody_use u;
	char buf[512];

	memset(&c, 0, sizeof c);
	assert_int_equal(store_custody_list(st, custody_collect, &c), SEMQ_OK);
	assert_string_equal(c.line, want);
	q1s(st,
	    be_sql("SELECT group_concat(line, ';') FROM (SELECT origin || '/'"
		   " || dest || ':' || count(*) || ':' || sum(length(payload))"
		   " || ':' || (min(created_at) - " NOW_SQL ") AS line"
		   " FROM tb_0031 WHERE origin <> 'P1' GROUP BY origin, dest"
		   " ORDER BY origin, dest)",
		   "SELECT string_agg(origin || '/' || dest || ':' || n || ':'"
		   " || b || ':' || o, ';' ORDER BY origin, dest) FROM"
		   " (SELECT origin, dest, count(*) AS n,"
		   " sum(octet_length(payload)) AS b, min(created_at) "
		   "- " NOW_SQL " AS o FROM tb_0031 WHERE origin <> 'P1'"
		   " GROUP BY origin, dest) t"),
	    buf, sizeof buf);
	assert_string_equal(buf, want);
	assert_int_equal(store_custody_use(st, origin, &u), SEMQ_OK);
	assert_int_equal(u.messages, o_msgs);
	assert_int_equal(u.bytes, o_bytes);
	assert_int_equal(u.all_messages, all_msgs);
	assert_int_equal(u.all_bytes, all_bytes);
}

/*
 * semq_custody follows every copy a relay holds, whoever changes it: a copy
 * stored (store_enqueue_copy, a tombstone too), replaced by its cancel
 * (store_copy_cancel: its payload bytes go, it stays a message), dropped
 * (store_drop_copy), confirmed and purged (store_purge). This node's own
 * rows are never counted. store_custody_use (one origin, and all) and
 * store_custody_list (with the oldest copy's created_at) agree with
 * tb_0031 at every step.
 */
static void test_custody_counts(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct custody_use u;
	struct msgid id;
	struct msg m;
	unsigned n = 0;

	custody_expect(st, "R1", "", 0, 0, 0, 0);
	copy_in(st, "R1", "S1", 1, 10, -50);
	copy_in(st, "R1", "S1", 2, 20, -80);
	copy_in(st, "R1", "S2", 1, 5, 0);
	copy_in(st, "R2", "S1", 1, 7, -10);
	/* this node's own rows: never custody */
	enqueue(st, "S1", NULL);
	enqueue(st, "S3", NULL);
	custody_expect(st, "R1", "R1/S1:2:30:-80;R1/S2:1:5:0;R2/S1:1:7:-10", 3,
		       35, 4, 42);
	custody_expect(st, "R2", "R1/S1:2:30:-80;R1/S2:1:5:0;R2/S1:1:7:-10", 1,
		       7, 4, 42);
	assert_int_equal(store_custody_use(st, "R9", &u), SEMQ_OK);
	assert_int_equal(u.messages, 0);
	assert_int_equal(u.bytes, 0);
	assert_int_equal(u.all_messages, 4);
	/* a second copy of the same message adds nothing */
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	m.id.digest = 0xd001;
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_DUPLICATE);
	/* a relayed tombstone is a message of no bytes */
	mkmsg(&m, "R2", "S2", 4, NULL, 0);
	m.payload_len = 0;
	m.tombstone = 1;
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	custody_expect(st, "R2",
		       "R1/S1:2:30:-80;R1/S2:1:5:0;R2/S1:1:7:-10;"
		       "R2/S2:1:0:-1000",
		       2, 7, 5, 42);

	/* The cancel of R1/S1/2 replaces the copy: its 20 bytes go. */
	id = copy_id("R1", "S1", 2);
	assert_int_equal(store_copy_cancel(st, &id, NOW + 5), SEMQ_OK);
	out_expect_status(st, "R1", "S1", 2, SS_CANCELLED);
	assert_int_equal(q1(st, "SELECT length(payload) FROM tb_0031"
				" WHERE origin = 'R1' AND seq = 2"),
			 0);
	custody_expect(st, "R1",
		       "R1/S1:2:10:-80;R1/S2:1:5:0;R2/S1:1:7:-10;"
		       "R2/S2:1:0:-1000",
		       3, 15, 5, 22);
	/* once only; not a copy of another message; never an own row */
	assert_int_equal(store_copy_cancel(st, &id, NOW + 6), SEMQ_DECLINED);
	id = copy_id("R1", "S1", 1);
	id.digest = 0xbad;
	assert_int_equal(store_copy_cancel(st, &id, NOW + 6), SEMQ_DECLINED);
	out_expect_status(st, "R1", "S1", 1, SS_UNSEND);
	id = own_id("S1", 1, 0);
	assert_int_equal(store_copy_cancel(st, &id, NOW + 6), SEMQ_DECLINED);
	out_expect_status(st, "P1", "S1", 1, SS_UNSEND);

	/* Dropped (delivered): the message and its bytes go. */
	id = copy_id("R1", "S1", 1);
	assert_int_equal(store_drop_copy(st, &id), SEMQ_OK);
	custody_expect(st, "R1",
		       "R1/S1:1:0:-80;R1/S2:1:5:0;R2/S1:1:7:-10;"
		       "R2/S2:1:0:-1000",
		       2, 5, 4, 12);

	/* Confirmed and purged; own rows purged change nothing. */
	id = copy_id("R2", "S1", 1);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	id = own_id("S1", 1, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	custody_expect(st, "R2",
		       "R1/S1:1:0:-80;R1/S2:1:5:0;R2/S1:1:7:-10;"
		       "R2/S2:1:0:-1000",
		       2, 7, 4, 12);
	assert_int_equal(store_purge(st, NOW + 100, 10, 100, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	custody_expect(st, "R2", "R1/S1:1:0:-80;R1/S2:1:5:0;R2/S2:1:0:-1000", 1,
		       0, 3, 5);
	assert_int_equal(q1(st, "SELECT messages FROM semq_custody"
				" WHERE origin = 'R2' AND dest = 'S1'"),
			 0);

	/* A rolled-back batch leaves the counters as they were. */
	assert_int_equal(store_begin(st), SEMQ_OK);
	copy_in(st, "R1", "S2", 9, 40, 0);
	id = copy_id("R1", "S2", 1);
	assert_int_equal(store_drop_copy(st, &id), SEMQ_OK);
	assert_int_equal(store_custody_use(st, "R1", &u), SEMQ_OK);
	assert_int_equal(u.messages, 2);
	assert_int_equal(u.bytes, 40);
	assert_int_equal(store_rollback(st), SEMQ_OK);
	custody_expect(st, "R1", "R1/S1:1:0:-80;R1/S2:1:5:0;R2/S2:1:0:-1000", 2,
		       5, 3, 5);
	assert_int_equal(store_custody_list(st, NULL, NULL), SEMQ_ERR_INVALID);
}

struct waiting_seen {
	int n;
	char line[8][256];
};

static int waiting_collect(void *ctx, const char *dest, const char *relay,
			   int64_t n, int64_t since)
{
	struct waiting_seen *c = ctx;

	assert_true(c->n < 8);
	snprintf(c->line[c->n], sizeof c->line[c->n],
		 "%s via %s: %lld since %lld", dest, relay, (long long)n,
		 (long long)(since - NOW));
	c->n++;
	return 0;
}

static void custodian_expect(struct store *st, uint64_t seq, const char *dest,
			     int status, const char *custodian)
{
	struct msgid id = own_id(dest, seq, 0);
	struct msg m;
	struct out_row row;

	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, status);
	assert_string_equal(row.custodian, custodian);
	msg_clear(&m);
}

/*
 * At the origin: store_mark_custody takes a row in flight (4) or passed on
 * (6) into a relay's custody (6 with custodian) and an unanswered cancel
 * too (it stays -2); any other row is declined. `window` counts status 4,
 * and 6 without a custodian (store_mark_relay_acked), never what a relay
 * holds. store_mark_unsent clears the custodian. store_custody_waiting
 * groups this node's rows in custody per destination and relay.
 */
static void test_custody_window(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct waiting_seen w;
	struct out_seen c;
	struct msgid id;
	int i;

	for (i = 0; i < 8; i++)
		enqueue(st, "S1", NULL);
	enqueue(st, "S2", NULL);
	for (i = 1; i <= 4; i++) {
		id = own_id("S1", (uint64_t)i, 0);
		assert_int_equal(store_mark_sent(st, &id, NOW + i, NOW + 30000),
				 SEMQ_OK);
	}
	/* 1: in P1's custody; 2: passed on (FORWARDED); 3, 4: in flight */
	id = own_id("S1", 1, 0);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW + 600000),
			 SEMQ_OK);
	custodian_expect(st, 1, "S1", SS_ACK, "P1");
	assert_int_equal(q1(st, "SELECT next_attempt_at FROM tb_0031"
				" WHERE dest = 'S1' AND seq = 1"),
			 NOW + 600000);
	id = own_id("S1", 2, 0);
	assert_int_equal(store_mark_relay_acked(st, &id, NOW, NOW + 30000),
			 SEMQ_OK);
	custodian_expect(st, 2, "S1", SS_ACK, "");
	/* in flight: 2, 3, 4 (not 1) */
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, "S1", NOW, 4, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 5);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, "S1", NOW, 3, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0);
	/* the relay takes 2 and 3 in custody too: room for two more */
	id = own_id("S1", 2, 0);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW + 600000),
			 SEMQ_OK);
	custodian_expect(st, 2, "S1", SS_ACK, "P1");
	id = own_id("S1", 3, 0);
	assert_int_equal(store_mark_custody(st, &id, "P2", NOW + 600000),
			 SEMQ_OK);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, "S1", NOW, 3, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.seq[0], 5);
	assert_int_equal(c.seq[1], 6);
	/* ... and a row in custody forwarded after all counts again */
	id = own_id("S1", 3, 0);
	assert_int_equal(store_mark_unsent(st, &id, NOW, "relay gone"),
			 SEMQ_OK);
	custodian_expect(st, 3, "S1", SS_UNSEND, "");
	assert_int_equal(store_mark_sent(st, &id, NOW + 3, NOW + 30000),
			 SEMQ_OK);
	assert_int_equal(store_mark_relay_acked(st, &id, NOW, NOW + 30000),
			 SEMQ_OK);
	custodian_expect(st, 3, "S1", SS_ACK, "");
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, "S1", NOW, 3, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);

	/* Declined: unsent, confirmed, held, an answered cancel. */
	id = own_id("S1", 5, 0);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW), SEMQ_DECLINED);
	id = own_id("S1", 4, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW), SEMQ_DECLINED);
	id = own_id("S1", 6, 0);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, "?", NOW), SEMQ_OK);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW), SEMQ_DECLINED);
	id = own_id("S1", 99, 0);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW), SEMQ_DECLINED);
	id = own_id("S1", 1, 0);
	assert_int_equal(store_mark_custody(st, &id, "P 1", NOW),
			 SEMQ_ERR_INVALID);
	/* An unanswered cancel stays a cancel, held by the relay; answered,
	 * it is declined. */
	id = own_id("S1", 7, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW + 600000),
			 SEMQ_OK);
	custodian_expect(st, 7, "S1", SS_CANCELLED, "P1");
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031 WHERE dest ="
				" 'S1' AND seq = 7 AND result IS NULL"),
			 1);
	id = own_id("S1", 8, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	assert_int_equal(store_mark_confirmed(st, &id, RES_CANCELLED, NOW),
			 SEMQ_OK);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW), SEMQ_DECLINED);
	id = own_id("S2", 1, 0);
	assert_int_equal(store_mark_sent(st, &id, NOW + 9, NOW + 30000),
			 SEMQ_OK);
	assert_int_equal(store_mark_custody(st, &id, "P2", NOW + 600000),
			 SEMQ_OK);

	/* Per destination and relay: how many, since the earliest sent_at. */
	memset(&w, 0, sizeof w);
	assert_int_equal(store_custody_waiting(st, waiting_collect, &w),
			 SEMQ_OK);
	assert_int_equal(w.n, 2);
	assert_string_equal(w.line[0], "S1 via P1: 3 since 1");
	assert_string_equal(w.line[1], "S2 via P2: 1 since 9");
	/* confirmed: out of custody */
	id = own_id("S1", 2, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);
	custodian_expect(st, 2, "S1", SS_ACK2, "");
	memset(&w, 0, sizeof w);
	assert_int_equal(store_custody_waiting(st, waiting_collect, &w),
			 SEMQ_OK);
	assert_string_equal(w.line[0], "S1 via P1: 2 since 1");
	assert_int_equal(store_custody_waiting(st, NULL, NULL),
			 SEMQ_ERR_INVALID);
}

/* store_fetch_tombstones_to: the cancels of one destination only (this
 * node's and a relay's copies), due and unanswered, at most limit. */
static void test_fetch_tombstones_to(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct out_seen c;
	struct msgid id;
	struct msg m;
	int i;

	for (i = 0; i < 4; i++) {
		enqueue(st, "S1", NULL);
		enqueue(st, "S2", NULL);
	}
	id = own_id("S1", 1, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	id = own_id("S1", 2, 0);
	assert_int_equal(store_cancel(st, &id, NOW + 100), SEMQ_OK);
	id = own_id("S1", 3, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	assert_int_equal(store_mark_confirmed(st, &id, RES_CANCELLED, NOW),
			 SEMQ_OK);
	id = own_id("S2", 1, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	mkmsg(&m, "R7", "S1", 5, NULL, 0);
	m.payload_len = 0;
	m.tombstone = 1;
	assert_int_equal(store_enqueue_copy(st, &m, NOW + 50), SEMQ_OK);

	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_tombstones_to(st, "S1", NOW, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 1);
	assert_int_equal(c.status[0], SS_CANCELLED);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_tombstones_to(st, "S1", NOW + 100, 100,
						   out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 3);
	assert_int_equal(c.seq[0], 1);
	assert_int_equal(c.seq[1], 5); /* R7's, due at NOW + 50 */
	assert_int_equal(c.seq[2], 2);
	for (i = 0; i < c.n; i++)
		assert_string_equal(c.dest[i], "S1");
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_tombstones_to(st, "S1", NOW + 100, 2,
						   out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_tombstones_to(st, "S2", INT64_MAX, 100,
						   out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.dest[0], "S2");
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_tombstones_to(st, "S3", INT64_MAX, 100,
						   out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(
		store_fetch_tombstones_to(st, "S 1", NOW, 1, out_collect, &c),
		SEMQ_ERR_INVALID);
}

/*
 * store_undeliverable, store_redo_retry and store_redo_discard of an own
 * entry, each in a batch of its own, as semqd and semqctl call them (see
 * test_undeliverable_outside_batch for the calls made without one).
 */
static int undeliverable_b(struct store *st, const struct msgid *id,
			   const char *why, int64_t now, int *settled)
{
	int r;

	assert_int_equal(store_begin(st), SEMQ_OK);
	r = store_undeliverable(st, id, why, now, settled);
	if (r >= 0)
		assert_int_equal(store_commit(st), SEMQ_OK);
	else
		assert_int_equal(store_rollback(st), SEMQ_OK);
	return r;
}

static int redo_retry_b(struct store *st, int64_t id, int64_t now)
{
	int r;

	assert_int_equal(store_begin(st), SEMQ_OK);
	r = store_redo_retry(st, id, now);
	if (r >= 0)
		assert_int_equal(store_commit(st), SEMQ_OK);
	else
		assert_int_equal(store_rollback(st), SEMQ_OK);
	return r;
}

static int redo_discard_b(struct store *st, int64_t id, const char *reason,
			  int64_t now)
{
	int r;

	assert_int_equal(store_begin(st), SEMQ_OK);
	r = store_redo_discard(st, id, reason, now);
	if (r >= 0)
		assert_int_equal(store_commit(st), SEMQ_OK);
	else
		assert_int_equal(store_rollback(st), SEMQ_OK);
	return r;
}

/* A dead entry in tb_0033 of this node's own message dest/seq. */
static void own_redo_expect(struct store *st, const char *dest, uint64_t seq,
			    int status, int tries)
{
	char sql[256];

	snprintf(sql, sizeof sql,
		 "SELECT status FROM tb_0033 WHERE origin = '%s' AND dest ="
		 " '%s' AND seq = %llu",
		 own_node, dest, (unsigned long long)seq);
	assert_int_equal(q1(st, sql), status);
	snprintf(sql, sizeof sql,
		 "SELECT tries FROM tb_0033 WHERE origin = '%s' AND dest ="
		 " '%s' AND seq = %llu",
		 own_node, dest, (unsigned long long)seq);
	assert_int_equal(q1(st, sql), tries);
}

/*
 * store_undeliverable: a relay does not know the destination. An
 * unconfirmed row (0, 4, 6) is held (8, result 8) with a dead entry of its
 * own in tb_0033 (origin = this node, for the operator), settled; an
 * unanswered cancel ends cancelled (result 4), settled; a row of another
 * message under that id (another digest) or a relay's copy is declined and
 * not settled.
 */
static void test_undeliverable(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	const char *why = "undeliverable: relay P1 does not know S9";
	struct out_seen c;
	struct out_line l;
	struct msgid id;
	struct msg m;
	int i, settled = -1;

	for (i = 0; i < 5; i++)
		enqueue(st, "S9", NULL);
	/* 0 -> 8 */
	id = own_id("S9", 1, 0);
	assert_int_equal(undeliverable_b(st, &id, why, NOW + 1, &settled),
			 SEMQ_OK);
	assert_int_equal(settled, 1);
	assert_int_equal(out_line(st, "R1", "S9", 1, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_HELD);
	assert_int_equal(l.result, RES_UNDELIVERABLE);
	assert_string_equal(l.last_error, why);
	own_redo_expect(st, "S9", 1, RS_DEAD, 0);
	redo_expect(st, redo_id_of(st, 1), RS_DEAD, 0, 0, -1, why);
	/* 4 -> 8, its digest given */
	id = own_id("S9", 2, 0xd2);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	settled = -1;
	assert_int_equal(undeliverable_b(st, &id, why, NOW + 2, &settled),
			 SEMQ_OK);
	assert_int_equal(settled, 1);
	assert_int_equal(out_line(st, "R1", "S9", 2, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_HELD);
	assert_int_equal(l.result, RES_UNDELIVERABLE);
	own_redo_expect(st, "S9", 2, RS_DEAD, 0);
	/* 6 in custody -> 8, out of custody */
	id = own_id("S9", 3, 0);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	assert_int_equal(store_mark_custody(st, &id, "P1", NOW + 600000),
			 SEMQ_OK);
	assert_int_equal(undeliverable_b(st, &id, why, NOW + 3, &settled),
			 SEMQ_OK);
	assert_int_equal(settled, 1);
	custodian_expect(st, 3, "S9", SS_HELD, "");
	own_redo_expect(st, "S9", 3, RS_DEAD, 0);
	/* an unanswered cancel: cancelled, no entry */
	id = own_id("S9", 4, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	settled = -1;
	assert_int_equal(undeliverable_b(st, &id, why, NOW + 4, &settled),
			 SEMQ_OK);
	assert_int_equal(settled, 1);
	assert_int_equal(out_line(st, "R1", "S9", 4, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_CANCELLED);
	assert_int_equal(l.result, RES_CANCELLED);
	own_redo_expect(st, "S9", 4, -999, -999);
	/* another message under the id: declined, not settled */
	id = own_id("S9", 5, 0xd5);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	id.digest = 0xbad;
	settled = -1;
	assert_int_equal(undeliverable_b(st, &id, why, NOW + 5, &settled),
			 SEMQ_DECLINED);
	assert_int_equal(settled, 0);
	out_expect_status(st, "R1", "S9", 5, SS_SEND);
	own_redo_expect(st, "S9", 5, -999, -999);
	/* a relay's copy is not this node's message */
	mkmsg(&m, "R2", "S9", 1, NULL, 0);
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	mkid(&id, "R2", "S9", 1);
	settled = -1;
	assert_int_equal(undeliverable_b(st, &id, why, NOW + 6, &settled),
			 SEMQ_DECLINED);
	assert_int_equal(settled, 0);
	out_expect_status(st, "R2", "S9", 1, SS_UNSEND);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033"), 3);

	/* Held: neither sent, nor queried, nor a tombstone to send. */
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_sendable(st, "S9", INT64_MAX, 100, 100,
					      out_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1); /* R2's copy */
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_in_doubt(st, INT64_MAX, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.seq[0], 5);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_tombstones(st, INT64_MAX, 100, out_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0);
}

/*
 * A repeated UNKNOWN_DEST about a row that is held already, or finished,
 * or gone changes nothing: settled (the relay may drop its copy), and
 * declined (nothing was made undeliverable now: no second dead entry, no
 * count).
 */
static void test_undeliverable_again(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	const char *why = "undeliverable: relay P1 does not know S9";
	struct msgid id;
	int r_held, r_done, r_gone, settled = -1;

	enqueue(st, "S9", NULL);
	enqueue(st, "S9", NULL);
	id = own_id("S9", 1, 0);
	assert_int_equal(undeliverable_b(st, &id, why, NOW, &settled), SEMQ_OK);
	id = own_id("S9", 2, 0);
	assert_int_equal(store_mark_confirmed(st, &id, RES_PROCESSED, NOW),
			 SEMQ_OK);

	/* held already */
	id = own_id("S9", 1, 0);
	settled = -1;
	r_held = undeliverable_b(st, &id, why, NOW + 1, &settled);
	assert_int_equal(settled, 1);
	out_expect_status(st, "R1", "S9", 1, SS_HELD);
	own_redo_expect(st, "S9", 1, RS_DEAD, 0);
	/* finished */
	id = own_id("S9", 2, 0);
	settled = -1;
	r_done = undeliverable_b(st, &id, why, NOW + 2, &settled);
	assert_int_equal(settled, 1);
	out_expect_status(st, "R1", "S9", 2, SS_ACK2);
	/* gone (purged, renumbered away) */
	id = own_id("S9", 9, 0);
	settled = -1;
	r_gone = undeliverable_b(st, &id, why, NOW + 3, &settled);
	assert_int_equal(settled, 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033"), 1);

	/* Nothing was made undeliverable now: declined (gone: not found),
	 * settled, so that proto only takes the relay's copy back and does
	 * not count or log it again. */
	assert_int_equal(r_held, SEMQ_DECLINED);
	assert_int_equal(r_done, SEMQ_DECLINED);
	assert_true(r_gone == SEMQ_DECLINED || r_gone == SEMQ_ERR_NOT_FOUND);
}

/*
 * The redo verbs on an own undeliverable entry: retry puts the row back
 * to unsent and the entry to done; a relay refusing it again makes the
 * entry dead again (tries + 1); discard cancels the row (it reached no
 * destination: -2 with result 4 at once) and discards the entry;
 * retry-all handles own and received dead entries together; an own entry
 * is never run.
 */
static void test_undeliverable_redo_verbs(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	const char *why = "undeliverable: relay P1 does not know S9";
	struct applier a = {0};
	struct redo_seen rs = {0};
	struct out_line l;
	struct msgid id;
	struct msg m;
	struct redo_row row;
	int64_t e1, e2, e3, eq;
	unsigned n = 0;
	int i, settled, status = -9;

	for (i = 0; i < 4; i++)
		enqueue(st, "S9", NULL);
	for (i = 1; i <= 4; i++) {
		id = own_id("S9", (uint64_t)i, 0);
		assert_int_equal(undeliverable_b(st, &id, why, NOW, &settled),
				 SEMQ_OK);
	}
	e1 = redo_id_of(st, 1);
	e2 = redo_id_of(st, 2);
	e3 = redo_id_of(st, 3);
	/* listed and read like every entry */
	assert_int_equal(store_redo_list(st, RS_DEAD, 100, redo_collect, &rs),
			 SEMQ_OK);
	assert_int_equal(rs.n, 4);
	assert_int_equal(store_redo_get(st, e1, &m, &row), SEMQ_OK);
	assert_string_equal(m.id.origin, "R1");
	assert_string_equal(m.id.dest, "S9");
	assert_int_equal(row.status, RS_DEAD);
	msg_clear(&m);

	/* retry: the row goes out again, the entry is done */
	assert_int_equal(redo_retry_b(st, e1, NOW + 10), SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S9", 1, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_UNSEND);
	assert_int_equal(l.result, -1);
	assert_int_equal(l.next_at, NOW + 10);
	own_redo_expect(st, "S9", 1, RS_DONE, 0);
	assert_int_equal(redo_retry_b(st, e1, NOW + 11), SEMQ_DECLINED);
	/* refused again: dead again, one more try */
	id = own_id("S9", 1, 0);
	assert_int_equal(store_mark_sent(st, &id, NOW + 20, NOW + 30000),
			 SEMQ_OK);
	assert_int_equal(undeliverable_b(st, &id, why, NOW + 30, &settled),
			 SEMQ_OK);
	assert_int_equal(settled, 1);
	out_expect_status(st, "R1", "S9", 1, SS_HELD);
	own_redo_expect(st, "S9", 1, RS_DEAD, 1);
	assert_int_equal(redo_id_of(st, 1), e1);

	/* discard: cancelled at once, the entry discarded with the reason */
	assert_int_equal(redo_discard_b(st, e2, "shop closed", NOW + 40),
			 SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S9", 2, &l), SEMQ_OK);
	assert_int_equal(l.status, SS_CANCELLED);
	assert_int_equal(l.result, RES_CANCELLED);
	own_redo_expect(st, "S9", 2, RS_DISCARDED, 0);
	assert_int_equal(store_redo_get(st, e2, &m, &row), SEMQ_OK);
	assert_non_null(row.discard_reason);
	assert_string_equal(row.discard_reason, "shop closed");
	msg_clear(&m);
	assert_int_equal(redo_discard_b(st, e2, "again", NOW + 41),
			 SEMQ_DECLINED);
	assert_int_equal(redo_retry_b(st, e2, NOW + 41), SEMQ_DECLINED);

	/* an own entry is never run, even if it were pending */
	exec(st, "UPDATE tb_0033 SET status = 0, next_attempt_at = 0"
		 " WHERE dest = 'S9' AND seq = 4");
	assert_int_equal(store_redo_run(st, redo_id_of(st, 4), NOW + 50,
					apply_cb, &a, &status),
			 SEMQ_DECLINED);
	assert_int_equal(a.calls, 0);
	out_expect_status(st, "R1", "S9", 4, SS_HELD);
	exec(st, "UPDATE tb_0033 SET status = -1"
		 " WHERE dest = 'S9' AND seq = 4");

	/* retry-all: own dead entries (1, 3, 4) and a received one (R5's) */
	mkmsg(&m, "R5", "R1", 1, NULL, 0);
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	a.calls = 0;
	eq = -1;
	{
		struct redo_seen all = {0};

		assert_int_equal(
			store_redo_list(st, -100, 100, redo_collect, &all),
			SEMQ_OK);
		for (i = 0; i < all.n; i++)
			if (all.id[i] != e1 && all.id[i] != e2 &&
			    all.id[i] != e3 && all.seq[i] == 1)
				eq = all.id[i];
	}
	assert_true(eq > 0);
	assert_int_equal(store_redo_retry_all_dead(st, NOW + 60, &n), SEMQ_OK);
	assert_int_equal(n, 4);
	for (i = 1; i <= 4; i++) {
		if (i == 2)
			continue;
		out_expect_status(st, "R1", "S9", (uint64_t)i, SS_UNSEND);
		own_redo_expect(st, "S9", (uint64_t)i, RS_DONE, i == 1 ? 1 : 0);
	}
	out_expect_status(st, "R1", "S9", 2, SS_CANCELLED);
	own_redo_expect(st, "S9", 2, RS_DISCARDED, 0);
	{
		struct redo_row rr;

		assert_int_equal(store_redo_get(st, eq, &m, &rr), SEMQ_OK);
		assert_string_equal(m.id.origin, "R5");
		assert_int_equal(rr.status, RS_PENDING);
		assert_int_equal(rr.next_attempt_at, NOW + 60);
		msg_clear(&m);
	}
	assert_int_equal(store_redo_retry_all_dead(st, NOW + 70, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	assert_int_equal(a.calls, 0);
}

/*
 * store.h: "A mutating call made while no batch is open runs in a
 * transaction of its own." So do store_undeliverable, and redo retry and
 * discard of an own undeliverable entry.
 *
 * They are made of other calls of the store, which join the transaction
 * the outer call opened instead of beginning their own (store__tx_open).
 */
static void test_undeliverable_outside_batch(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	const char *why = "undeliverable: relay P1 does not know S9";
	struct msgid id;
	struct out_line l2, l3;
	int r1, r2, r3, settled = -1;

	enqueue(st, "S9", NULL);
	enqueue(st, "S9", NULL);
	enqueue(st, "S9", NULL);
	id = own_id("S9", 1, 0);
	r1 = store_undeliverable(st, &id, why, NOW, &settled);
	id = own_id("S9", 2, 0);
	assert_int_equal(undeliverable_b(st, &id, why, NOW, &settled), SEMQ_OK);
	id = own_id("S9", 3, 0);
	assert_int_equal(undeliverable_b(st, &id, why, NOW, &settled), SEMQ_OK);
	assert_false(store_in_batch(st));
	r2 = store_redo_retry(st, redo_id_of(st, 2), NOW + 1);
	r3 = store_redo_discard(st, redo_id_of(st, 3), "closed", NOW + 2);
	assert_int_equal(out_line(st, "R1", "S9", 2, &l2), SEMQ_OK);
	assert_int_equal(out_line(st, "R1", "S9", 3, &l3), SEMQ_OK);

	assert_int_equal(r1, SEMQ_OK);
	out_expect_status(st, "R1", "S9", 1, SS_HELD);
	assert_int_equal(r2, SEMQ_OK);
	assert_int_equal(l2.status, SS_UNSEND);
	assert_int_equal(r3, SEMQ_OK);
	assert_int_equal(l3.status, SS_CANCELLED);
}

/*
 * store_redo_head: what a waiting entry waits for — the head of its key:
 * a dead entry, a pending one retrying, or a delayed message (pending
 * until its deliver_at, delayed = 1 while that is still to come).
 */
static void test_redo_head(void **state)
{
	struct fx *fx = *state;
	const int64_t levels[] = {5000, 30000};
	struct store_opts o = {.synchronous = -1,
			       .redo_levels_ms = levels,
			       .n_redo_levels = 2};
	struct store *st = open_ok(fx, "S1", &o);
	struct applier a = {.why = "down"};
	struct redo_head h;
	struct msg m, w;

	/* K: delayed head */
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	m.deliver_at = NOW + 60000;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	mkmsg(&w, "R1", "S1", 2, "K", 1);
	recv_expect(st, &w, &a, NOW + 1, SEMQ_OK, RES_REDO);
	redo_expect(st, redo_id_of(st, 2), RS_WAITING, 0, 0, -1, NULL);
	assert_int_equal(store_redo_head(st, &w, NOW + 2, &h), SEMQ_OK);
	assert_int_equal(h.id, redo_id_of(st, 1));
	assert_int_equal(h.seq, 1);
	assert_int_equal(h.status, RS_PENDING);
	assert_int_equal(h.delayed, 1);
	assert_int_equal(h.next_attempt_at, NOW + 60000);
	/* its time has come: no longer "delayed" */
	assert_int_equal(store_redo_head(st, &w, NOW + 60000, &h), SEMQ_OK);
	assert_int_equal(h.delayed, 0);

	/* L: dead head */
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 3, "L", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&w, "R1", "S1", 4, "L", 3);
	recv_expect(st, &w, &a, NOW + 1, SEMQ_OK, RES_REDO);
	assert_int_equal(store_redo_head(st, &w, NOW + 2, &h), SEMQ_OK);
	assert_int_equal(h.id, redo_id_of(st, 3));
	assert_int_equal(h.seq, 3);
	assert_int_equal(h.status, RS_DEAD);
	assert_int_equal(h.delayed, 0);

	/* M: a head retrying, pending at its next level */
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 5, "M", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&w, "R1", "S1", 6, "M", 5);
	recv_expect(st, &w, &a, NOW + 1, SEMQ_OK, RES_REDO);
	assert_int_equal(store_redo_head(st, &w, NOW + 2, &h), SEMQ_OK);
	assert_int_equal(h.id, redo_id_of(st, 5));
	assert_int_equal(h.status, RS_PENDING);
	assert_int_equal(h.delayed, 0);
	assert_int_equal(h.next_attempt_at, NOW + 5000);

	/* a delayed message retried after its time: not delayed */
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	{
		int status = -9;

		assert_int_equal(store_redo_run(st, redo_id_of(st, 1),
						NOW + 60000, apply_cb, &a,
						&status),
				 SEMQ_OK);
		assert_int_equal(status, RS_PENDING);
	}
	mkmsg(&w, "R1", "S1", 2, "K", 1);
	assert_int_equal(store_redo_head(st, &w, NOW + 60001, &h), SEMQ_OK);
	assert_int_equal(h.seq, 1);
	assert_int_equal(h.delayed, 0);
	assert_true(h.next_attempt_at > NOW + 60000);

	/* no key, or a key with nothing unfinished: none */
	mkmsg(&w, "R1", "S1", 7, NULL, 0);
	assert_int_equal(store_redo_head(st, &w, NOW, &h), SEMQ_ERR_NOT_FOUND);
	mkmsg(&w, "R1", "S1", 7, "N", 0);
	assert_int_equal(store_redo_head(st, &w, NOW, &h), SEMQ_ERR_NOT_FOUND);
	/* another stream's key of the same name is not its head */
	mkmsg(&w, "R2", "S1", 1, "L", 0);
	assert_int_equal(store_redo_head(st, &w, NOW, &h), SEMQ_ERR_NOT_FOUND);
}

struct dests_seen {
	int n;
	char line[8][96];
};

static int dests_collect(void *ctx, const char *dest, int64_t first_at)
{
	struct dests_seen *c = ctx;

	assert_true(c->n < 8);
	snprintf(c->line[c->n], sizeof c->line[c->n], "%s@%lld", dest,
		 (long long)(first_at - NOW));
	c->n++;
	return 0;
}

static void dest_note_expect(struct store *st, const char *dest, int64_t now,
			     int64_t want_first, int want_seen)
{
	int64_t first = -1;
	int seen = -1;

	assert_int_equal(store_dest_note(st, dest, now, &first, &seen),
			 SEMQ_OK);
	assert_int_equal(first, want_first);
	assert_int_equal(seen, want_seen);
}

/*
 * A relay's destinations: store_dest_note sets first_at once (the first
 * copy held for a destination never seen) and says whether it was ever
 * connected; store_dest_seen records a connection; store_dests_unknown
 * lists the never seen ones held for since before a time.
 */
static void test_dests(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct dests_seen c;
	int64_t first = -1;
	int seen = -1;

	dest_note_expect(st, "S9", NOW, NOW, 0);
	dest_note_expect(st, "S9", NOW + 5, NOW, 0);
	dest_note_expect(st, "S8", NOW + 10, NOW + 10, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_dests_unknown(st, NOW - 1, dests_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(store_dests_unknown(st, NOW, dests_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.line[0], "S9@0");
	memset(&c, 0, sizeof c);
	assert_int_equal(store_dests_unknown(st, NOW + 100, dests_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.line[0], "S8@10");
	assert_string_equal(c.line[1], "S9@0");

	/* S8 connects: known from then on */
	assert_int_equal(store_dest_seen(st, "S8", NOW + 20), SEMQ_OK);
	dest_note_expect(st, "S8", NOW + 30, NOW + 10, 1);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_dests_unknown(st, NOW + 100, dests_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.line[0], "S9@0");
	assert_int_equal(store_dest_seen(st, "S8", NOW + 40), SEMQ_OK);
	assert_int_equal(q1(st, "SELECT seen_at FROM semq_dest WHERE dest ="
				" 'S8'"),
			 NOW + 40);
	/* seen before any copy was held for it */
	assert_int_equal(store_dest_seen(st, "S7", NOW), SEMQ_OK);
	dest_note_expect(st, "S7", NOW + 50, NOW + 50, 1);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_dests_unknown(st, INT64_MAX, dests_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	/* inside a batch, and rolled back */
	assert_int_equal(store_begin(st), SEMQ_OK);
	dest_note_expect(st, "S6", NOW, NOW, 0);
	assert_int_equal(store_rollback(st), SEMQ_OK);
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_dest"), 3);
	assert_int_equal(store_dest_note(st, "S 9", NOW, &first, &seen),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_dest_seen(st, "", NOW), SEMQ_ERR_INVALID);
	assert_int_equal(store_dests_unknown(st, NOW, NULL, NULL),
			 SEMQ_ERR_INVALID);
}

struct copies_seen {
	int n;
	char line[16][256];
	int stop_after;
};

static int copies_collect(void *ctx, const struct copy_ref *r)
{
	struct copies_seen *c = ctx;

	assert_true(c->n < 16);
	snprintf(c->line[c->n], sizeof c->line[c->n], "%s/%s/%llu %d%s %llx",
		 r->id.origin, r->id.dest, (unsigned long long)r->id.seq,
		 r->status, r->tombstone ? "t" : "",
		 (unsigned long long)r->id.digest);
	assert_true(r->id.life == SEMQ_LIFE_LEGACY);
	c->n++;
	return c->stop_after && c->n >= c->stop_after;
}

/* Is line among the n first of c? */
static int copies_has(const struct copies_seen *c, const char *line)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (!strcmp(c->line[i], line))
			return 1;
	return 0;
}

/*
 * store_copies_for: a relay's copies for one destination that wait —
 * unsent, unanswered cancels, held as undeliverable — with their digests;
 * not those sent, answered, held for another reason, of another
 * destination, nor this node's own rows. store_copy_unhold sends a copy
 * held as undeliverable again, and nothing else.
 */
static void test_copies_for(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct copies_seen c;
	struct msgid id;
	int settled;

	copy_in(st, "R1", "S9", 1, 8, 0); /* unsent */
	copy_in(st, "R1", "S9", 2, 8, 0); /* sent */
	id = copy_id("R1", "S9", 2);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW + 30000), SEMQ_OK);
	copy_in(st, "R1", "S9", 3, 8, 0); /* cancelled by its origin */
	id = copy_id("R1", "S9", 3);
	assert_int_equal(store_copy_cancel(st, &id, NOW), SEMQ_OK);
	copy_in(st, "R1", "S9", 4, 8, 0); /* held as undeliverable */
	id = copy_id("R1", "S9", 4);
	assert_int_equal(store_hold(st, &id, RES_UNDELIVERABLE, "unknown", NOW),
			 SEMQ_OK);
	copy_in(st, "R1", "S9", 5, 8, 0); /* held: a conflict */
	id = copy_id("R1", "S9", 5);
	assert_int_equal(store_hold(st, &id, RES_CONFLICT, "conflict", NOW),
			 SEMQ_OK);
	copy_in(st, "R1", "S9", 6, 8, 0); /* a cancel answered */
	id = copy_id("R1", "S9", 6);
	assert_int_equal(store_copy_cancel(st, &id, NOW), SEMQ_OK);
	assert_int_equal(store_mark_confirmed(st, &id, RES_CANCELLED, NOW),
			 SEMQ_OK);
	copy_in(st, "R2", "S9", 1, 8, 0);
	copy_in(st, "R1", "S8", 1, 8, 0);
	/* this node's own rows to S9: unsent, cancelled, undeliverable */
	enqueue(st, "S9", NULL);
	enqueue(st, "S9", NULL);
	enqueue(st, "S9", NULL);
	id = own_id("S9", 2, 0);
	assert_int_equal(store_cancel(st, &id, NOW), SEMQ_OK);
	id = own_id("S9", 3, 0);
	assert_int_equal(store_begin(st), SEMQ_OK);
	assert_int_equal(store_undeliverable(st, &id, "x", NOW, &settled),
			 SEMQ_OK);
	assert_int_equal(store_commit(st), SEMQ_OK);

	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_copies_for(st, "S9", NULL, 100, copies_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 4);
	assert_true(copies_has(&c, "R1/S9/1 0 d001"));
	assert_true(copies_has(&c, "R2/S9/1 0 d001"));
	assert_true(copies_has(&c, "R1/S9/3 -2t d003"));
	assert_true(copies_has(&c, "R1/S9/4 8 d004"));
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_copies_for(st, "S9", NULL, 2, copies_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 2);
	/* of one origin only */
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_copies_for(st, "S9", "R2", 100, copies_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_true(copies_has(&c, "R2/S9/1 0 d001"));
	memset(&c, 0, sizeof c);
	c.stop_after = 1;
	assert_int_equal(
		store_copies_for(st, "S9", NULL, 100, copies_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_copies_for(st, "S8", NULL, 100, copies_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.line[0], "R1/S8/1 0 d001");
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_copies_for(st, "S7", NULL, 100, copies_collect, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(
		store_copies_for(st, "S 9", NULL, 1, copies_collect, &c),
		SEMQ_ERR_INVALID);

	/* unhold: only a copy held as undeliverable */
	id = copy_id("R1", "S9", 4);
	assert_int_equal(store_copy_unhold(st, &id, NOW + 7), SEMQ_OK);
	out_expect_status(st, "R1", "S9", 4, SS_UNSEND);
	assert_int_equal(q1(st,
			    "SELECT count(*) FROM tb_0031 WHERE origin ="
			    " 'R1' AND dest = 'S9' AND seq = 4 AND result"
			    " IS NULL AND next_attempt_at = " NOW_SQL " + 7"),
			 1);
	assert_int_equal(store_copy_unhold(st, &id, NOW + 8), SEMQ_DECLINED);
	id = copy_id("R1", "S9", 5);
	assert_int_equal(store_copy_unhold(st, &id, NOW + 8), SEMQ_DECLINED);
	out_expect_status(st, "R1", "S9", 5, SS_HELD);
	id = own_id("S9", 3, 0);
	assert_int_equal(store_copy_unhold(st, &id, NOW + 8), SEMQ_DECLINED);
	out_expect_status(st, "P1", "S9", 3, SS_HELD);
}

struct hidden_seen {
	int n;
	char line[4][128];
};

static int hidden_collect(void *ctx, const struct out_stream *s)
{
	struct hidden_seen *c = ctx;

	assert_true(c->n < 4);
	snprintf(c->line[c->n], sizeof c->line[c->n], "%s:%d", s->dest,
		 s->life_hidden);
	c->n++;
	return 0;
}

/* store_hide_life: this node's stream to dest goes without its life from
 * now on (out_stream.life_hidden); once. */
static void test_hide_life(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct hidden_seen c;

	enqueue(st, "S1", NULL);
	enqueue(st, "S2", NULL);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_streams_out(st, hidden_collect, &c), SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.line[0], "S1:0");
	assert_string_equal(c.line[1], "S2:0");
	assert_int_equal(store_hide_life(st, "S2"), SEMQ_OK);
	assert_int_equal(store_hide_life(st, "S2"), SEMQ_DECLINED);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_streams_out(st, hidden_collect, &c), SEMQ_OK);
	assert_string_equal(c.line[0], "S1:0");
	assert_string_equal(c.line[1], "S2:1");
	/* a stream this node has none of */
	assert_int_equal(store_hide_life(st, "S3"), SEMQ_DECLINED);
	/* it survives a reopen; the next message keeps its seq order */
	reopen(fx, "R1", NULL);
	st = fx->st;
	memset(&c, 0, sizeof c);
	assert_int_equal(store_streams_out(st, hidden_collect, &c), SEMQ_OK);
	assert_string_equal(c.line[1], "S2:1");
	assert_int_equal(enqueue(st, "S2", NULL), 2);
	assert_int_equal(store_hide_life(st, "S 1"), SEMQ_ERR_INVALID);
}

/* ---- PostgreSQL: several instances on one database ----------------------- */

/* A second instance of node S1 on the fixture's database (fx->st2). */
static struct store *open_second(struct fx *fx, const struct store_opts *extra)
{
	char err[SEMQ_ERRLEN];
	int r = open_opts(fx, "S1", extra, &fx->st2, err);

	if (r != SEMQ_OK)
		fail_msg("store_open (second instance): %d %s", r, err);
	return fx->st2;
}

/* One store call run on a thread of its own (the store is used by that
 * thread alone until it is joined). */
struct bg {
	pthread_t th;
	struct store *st;
	int batch; /* in a batch of its own: begin, the calls, commit */
	struct msg m[2];
	int n_msgs;   /* receive these, or ... */
	int64_t redo; /* ... run this redo entry (when n_msgs is 0) */
	int64_t now;
	struct applier a;
	int r[2], res[2], status, commit_r;
	char err[SEMQ_ERRLEN];
};

static void *bg_main(void *arg)
{
	struct bg *b = arg;
	int i;

	b->a.in_thread = 1;
	if (b->batch)
		b->commit_r = store_begin(b->st);
	if (b->n_msgs == 0) {
		b->r[0] = store_redo_run(b->st, b->redo, b->now, apply_cb,
					 &b->a, &b->status);
		snprintf(b->err, sizeof b->err, "%s", store_errmsg(b->st));
	}
	for (i = 0; i < b->n_msgs; i++)
		b->r[i] = store_receive(b->st, &b->m[i], NULL, CONFIRM_ORIGIN,
					b->now, apply_cb, &b->a, &b->res[i],
					b->err, sizeof b->err);
	if (b->batch && b->commit_r == SEMQ_OK)
		b->commit_r = store_commit(b->st);
	return NULL;
}

static void bg_start(struct bg *b)
{
	assert_int_equal(pthread_create(&b->th, NULL, bg_main, b), 0);
}

static void bg_join(struct bg *b)
{
	assert_int_equal(pthread_join(b->th, NULL), 0);
	if (b->a.fault[0])
		fail_msg("the second instance's plugin: %s", b->a.fault);
}

/* Waits (up to 20 s) until the server shows backend `pid` waiting for a
 * lock: the other instance is blocked, not merely slow. */
static void wait_blocked(int pid)
{
	char sql[160];
	int i;

	snprintf(sql, sizeof sql,
		 "SELECT 1 FROM pg_stat_activity WHERE pid = %d"
		 " AND wait_event_type = 'Lock'",
		 pid);
	for (i = 0; i < 2000; i++) {
		PGresult *res = PQexec(be_admin(), sql);
		int n = PQntuples(res);
		struct timespec ts = {0, 10 * 1000 * 1000};

		PQclear(res);
		if (n == 1)
			return;
		nanosleep(&ts, NULL);
	}
	fail_msg("backend %d never waited for a lock", pid);
}

/* The backend serving a store's connection. */
static int backend_of(struct store *st)
{
	return PQbackendPID(dbof(st));
}

/*
 * Two instances receive the same message: the second waits for the stream
 * the first holds inside its open batch; when the first commits, the second
 * reports a duplicate; when the first rolls back, the second applies it.
 * Either way exactly one apply() took effect.
 */
static void test_pg_two_instances_receive(void **state)
{
	struct fx *fx = *state;
	struct store *a_st = open_ok(fx, "S1", NULL);
	struct store *b_st = open_second(fx, NULL);
	struct applier a = {0};
	struct bg b;

	/* committed by A: B's copy is a duplicate */
	memset(&b, 0, sizeof b);
	b.st = b_st;
	b.now = NOW;
	b.n_msgs = 1;
	mkmsg(&b.m[0], "R1", "S1", 1, "K", 0);
	assert_int_equal(store_begin(a_st), SEMQ_OK);
	recv_expect(a_st, &b.m[0], &a, NOW, SEMQ_OK, RES_PROCESSED);
	bg_start(&b);
	wait_blocked(backend_of(b_st));
	assert_int_equal(store_commit(a_st), SEMQ_OK);
	bg_join(&b);
	assert_int_equal(b.r[0], SEMQ_DUPLICATE);
	assert_int_equal(b.res[0], RES_PROCESSED); /* as A recorded it */
	assert_int_equal(b.a.calls, 0);
	assert_int_equal(a.calls, 1);
	assert_int_equal(q1(a_st, "SELECT count(*) FROM effect WHERE seq = 1"),
			 1);
	assert_int_equal(q1(a_st, "SELECT count(*) FROM tb_0030"), 1);

	/* rolled back by A: B applies it, once */
	memset(&b, 0, sizeof b);
	b.st = b_st;
	b.now = NOW;
	b.n_msgs = 1;
	mkmsg(&b.m[0], "R1", "S1", 2, "K", 1);
	assert_int_equal(store_begin(a_st), SEMQ_OK);
	recv_expect(a_st, &b.m[0], &a, NOW, SEMQ_OK, RES_PROCESSED);
	bg_start(&b);
	wait_blocked(backend_of(b_st));
	assert_int_equal(store_rollback(a_st), SEMQ_OK);
	bg_join(&b);
	assert_int_equal(b.r[0], SEMQ_OK);
	assert_int_equal(b.res[0], RES_PROCESSED);
	assert_int_equal(b.a.calls, 1);
	assert_int_equal(q1(a_st, "SELECT count(*) FROM effect WHERE seq = 2"),
			 1);
	/* ... and now A sees it as received, as B recorded it */
	recv_expect(a_st, &b.m[0], &a, NOW, SEMQ_DUPLICATE, RES_PROCESSED);
}

/*
 * The unique index idx_0030_1 is the backstop: a copy recorded by a
 * connection that does not take the stream's lock, not yet committed. The
 * instance waits for it, then reports a duplicate without calling apply()
 * and without failing its batch: the next message of the batch is applied
 * and the batch commits.
 */
static void test_pg_unique_index_backstop(void **state)
{
	struct fx *fx = *state;
	struct store *a_st = open_ok(fx, "S1", NULL);
	PGconn *raw = PQconnectdb(fx->path);
	char msg[512];
	struct bg b;

	assert_int_equal(PQstatus(raw), CONNECTION_OK);
	if (be_pg_run(
		    raw,
		    "BEGIN; INSERT INTO tb_0030(origin, dest, seq, type,"
		    " received_at, result) VALUES ('R1', 'S1', 1, 2800, 0, 0)",
		    msg, sizeof msg))
		fail_msg("raw insert: %s", msg);
	memset(&b, 0, sizeof b);
	b.st = a_st;
	b.now = NOW;
	b.batch = 1;
	b.n_msgs = 2;
	mkmsg(&b.m[0], "R1", "S1", 1, NULL, 0);
	mkmsg(&b.m[1], "R1", "S1", 2, NULL, 0);
	bg_start(&b);
	wait_blocked(backend_of(a_st));
	assert_int_equal(be_pg_run(raw, "COMMIT", msg, sizeof msg), 0);
	PQfinish(raw);
	bg_join(&b);
	if (b.r[0] != SEMQ_DUPLICATE)
		fail_msg("the copy recorded meanwhile: %d (%s)", b.r[0], b.err);
	assert_int_equal(b.res[0], RES_DUPLICATE);
	assert_int_equal(b.r[1], SEMQ_OK);
	assert_int_equal(b.res[1], RES_PROCESSED);
	assert_int_equal(b.commit_r, SEMQ_OK);
	assert_int_equal(b.a.calls, 1);
	assert_int_equal(q1(a_st, SEQS("effect", "")), 2);
	assert_int_equal(q1(a_st, "SELECT count(*) FROM tb_0030"), 2);
}

/*
 * Two instances run the same redo entry: the second waits for the first's
 * stream; after the first committed, it reads the entry again, finds it
 * done and declines; after the first rolled back, it runs it itself.
 */
static void test_pg_two_instances_redo(void **state)
{
	struct fx *fx = *state;
	struct store *a_st = open_ok(fx, "S1", NULL);
	struct store *b_st = open_second(fx, NULL);
	struct applier a = {.why = "down"};
	struct msg m;
	struct bg b;
	int64_t id1, id2;
	int status = -9;

	verdicts(&a, 2, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(a_st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 2, "L", 0);
	recv_expect(a_st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	id1 = redo_id_of(a_st, 1);
	id2 = redo_id_of(a_st, 2);

	/* A runs it and commits: B declines */
	memset(&b, 0, sizeof b);
	b.st = b_st;
	b.redo = id1;
	b.now = NOW + 5000;
	assert_int_equal(store_begin(a_st), SEMQ_OK);
	assert_int_equal(
		store_redo_run(a_st, id1, NOW + 5000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	bg_start(&b);
	wait_blocked(backend_of(b_st));
	assert_int_equal(store_commit(a_st), SEMQ_OK);
	bg_join(&b);
	if (b.r[0] != SEMQ_DECLINED)
		fail_msg("second run of redo %lld: %d (%s)", (long long)id1,
			 b.r[0], b.err);
	assert_non_null(strstr(b.err, "done, not pending"));
	assert_int_equal(b.a.calls, 0);
	assert_int_equal(q1(a_st, "SELECT count(*) FROM effect WHERE seq = 1"),
			 1);
	redo_expect(a_st, id1, RS_DONE, 2, 1, -1, NULL);

	/* A runs it and rolls back: B runs it, once */
	memset(&b, 0, sizeof b);
	b.st = b_st;
	b.redo = id2;
	b.now = NOW + 5000;
	assert_int_equal(store_begin(a_st), SEMQ_OK);
	assert_int_equal(
		store_redo_run(a_st, id2, NOW + 5000, apply_cb, &a, &status),
		SEMQ_OK);
	bg_start(&b);
	wait_blocked(backend_of(b_st));
	assert_int_equal(store_rollback(a_st), SEMQ_OK);
	bg_join(&b);
	assert_int_equal(b.r[0], SEMQ_OK);
	assert_int_equal(b.status, RS_DONE);
	assert_int_equal(b.a.calls, 1);
	assert_int_equal(q1(a_st, "SELECT count(*) FROM effect WHERE seq = 2"),
			 1);
	redo_expect(a_st, id2, RS_DONE, 2, 1, -1, NULL);
}

/*
 * Compaction never waits for a stream another instance holds: it leaves
 * that stream for a later pass (at once, well inside the lock timeout), and
 * compacts it once the other committed.
 */
static void test_pg_advance_skips_locked(void **state)
{
	struct fx *fx = *state;
	struct store_opts o = {.synchronous = -1, .busy_timeout_ms = 3000};
	struct store *a_st = open_ok(fx, "S1", &o);
	struct store *b_st = open_second(fx, NULL);
	struct applier a = {0};
	struct timespec t0, t1;
	struct msg m;
	unsigned n = 99;
	uint64_t w = 99, i;
	int64_t ms;

	for (i = 1; i <= 2; i++) {
		mkmsg(&m, "R1", "S1", i, NULL, 0);
		recv_expect(a_st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
		ack(a_st, i, CONFIRM_ORIGIN, 1);
	}
	mkmsg(&m, "R2", "S1", 1, NULL, 0);
	recv_expect(a_st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	m.id.seq = 1;
	{
		int ok = 0;

		assert_int_equal(
			store_ack_response(a_st, &m.id, CONFIRM_ORIGIN, &ok),
			SEMQ_OK);
		assert_int_equal(ok, 1);
	}
	/* B holds stream R1/S1 in an open batch */
	assert_int_equal(store_begin(b_st), SEMQ_OK);
	mkmsg(&m, "R1", "S1", 3, NULL, 0);
	recv_expect(b_st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(store_advance_watermarks(a_st, &n), SEMQ_OK);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (t1.tv_sec - t0.tv_sec) * 1000 +
	     (t1.tv_nsec - t0.tv_nsec) / 1000000;
	if (ms >= 2000)
		fail_msg("advance_watermarks took %lld ms: it waited",
			 (long long)ms);
	assert_int_equal(n, 1); /* R2/S1 only */
	assert_int_equal(
		store_watermark(a_st, "R1", "S1", SEMQ_LIFE_LEGACY, &w),
		SEMQ_OK);
	assert_int_equal(w, 0);
	assert_int_equal(
		store_watermark(a_st, "R2", "S1", SEMQ_LIFE_LEGACY, &w),
		SEMQ_OK);
	assert_int_equal(w, 1);

	assert_int_equal(store_commit(b_st), SEMQ_OK);
	assert_int_equal(store_advance_watermarks(a_st, &n), SEMQ_OK);
	assert_int_equal(n, 1); /* R1/S1 now */
	assert_int_equal(
		store_watermark(a_st, "R1", "S1", SEMQ_LIFE_LEGACY, &w),
		SEMQ_OK);
	assert_int_equal(w, 2);
	assert_int_equal(store_receipt_purge(a_st, NOW + 1, 0, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 3);
	assert_int_equal(q1(a_st, SEQS("tb_0030", "")), 3);
}

/*
 * The connection to the server is lost (the backend is terminated): the
 * call that meets it fails; the next batch connects again first, its
 * statements are prepared again, and it works; plugins get the live
 * connection.
 */
static void test_pg_connection_lost(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct msg m;
	char sql[96];
	int pid;

	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	pid = backend_of(st);
	snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, 5000)", pid);
	admin_run(sql);

	assert_int_equal(store_begin(st), SEMQ_ERR_DB);
	assert_int_equal(store_in_batch(st), 0);
	assert_int_equal(store_begin(st), SEMQ_OK);
	assert_true(backend_of(st) != pid);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(store_commit(st), SEMQ_OK);
	assert_int_equal(a.calls, 2);
	{
		char buf[32];

		assert_string_equal(
			q1s(st, SEQS("effect", ""), buf, sizeof buf), "1,2");
	}

	/* outside a batch too: a call of its own connects again */
	pid = backend_of(st);
	snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, 5000)", pid);
	admin_run(sql);
	mkmsg(&m, "R1", "S1", 3, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_ERR_DB, -1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 3);
}

/*
 * A failed statement aborts a PostgreSQL transaction (SQLite keeps it): a
 * plugin that ignores its own failed SQL and returns OK fails the receive,
 * and the batch can only be rolled back — store_commit refuses instead of
 * letting the server turn COMMIT into a silent ROLLBACK.
 */
static void test_pg_aborted_batch_not_committed(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.bad_sql = 1};
	struct msg m;
	char err[SEMQ_ERRLEN] = "";
	int res;

	assert_int_equal(store_begin(st), SEMQ_OK);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	assert_int_equal(store_receive(st, &m, NULL, CONFIRM_ORIGIN, NOW,
				       apply_cb, &a, &res, err, sizeof err),
			 SEMQ_ERR_DB);
	assert_int_equal(res, -1);
	a.bad_sql = 0;
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	assert_int_equal(store_receive(st, &m, NULL, CONFIRM_ORIGIN, NOW,
				       apply_cb, &a, &res, err, sizeof err),
			 SEMQ_ERR_DB);
	assert_non_null(strstr(err, "roll it back"));
	assert_int_equal(store_commit(st), SEMQ_ERR_DB);
	assert_non_null(strstr(store_errmsg(st), "aborted"));
	assert_int_equal(store_in_batch(st), 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 0);
	/* the store goes on */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
}

/* ---- scans and listings without payloads ---------------------------------- */

/* What a scan or listing handed out: ids, lengths, and how many rows came
 * with payload bytes. With `st` set, each row re-enters the store. */
struct bare_seen {
	int n;
	int64_t id[320];
	uint64_t seq[320];
	size_t len[320];
	int with_bytes;
	struct store *st;
	int64_t now;
	int run;   /* redo: run the entry (its plugin) from the callback */
	int defer; /* outbound: defer the row from the callback */
	int nested_n;
};

/* A payload of n bytes that tells its message: byte i is (seq + i). */
static uint8_t *pattern(uint64_t seq, size_t n)
{
	uint8_t *p = malloc(n ? n : 1);
	size_t i;

	assert_non_null(p);
	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(seq + i);
	return p;
}

static void expect_pattern(const struct msg *m, size_t n)
{
	size_t i;

	assert_int_equal(m->payload_len, n);
	if (!n)
		return;
	assert_non_null(m->payload);
	for (i = 0; i < n; i++)
		if (m->payload[i] != (uint8_t)(m->id.seq + i))
			fail_msg("seq %llu: byte %zu is %u",
				 (unsigned long long)m->id.seq, i,
				 m->payload[i]);
}

static int redo_count(void *ctx, const struct msg *m,
		      const struct redo_row *row)
{
	(void)m;
	(void)row;
	((struct bare_seen *)ctx)->nested_n++;
	return 0;
}

static int redo_bare(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct bare_seen *c = ctx;
	struct applier a = {0};
	struct redo_row r2;
	struct msg full;
	int status = -9;

	assert_true(c->n < 320);
	c->id[c->n] = row->id;
	c->seq[c->n] = m->id.seq;
	c->len[c->n] = m->payload_len;
	c->with_bytes += m->payload != NULL;
	c->n++;
	if (!c->st)
		return 0;
	/* One entry read whole, a scan within the scan, a run (its plugin
	 * writes through the store's connection) from inside the scan. */
	assert_int_equal(store_redo_get(c->st, row->id, &full, &r2), SEMQ_OK);
	expect_pattern(&full, m->payload_len);
	msg_clear(&full);
	if (c->n % 50 == 1)
		assert_int_equal(
			store_redo_due(c->st, INT64_MAX, 1000, redo_count, c),
			SEMQ_OK);
	if (c->run) {
		assert_int_equal(store_redo_run(c->st, row->id, c->now,
						apply_cb, &a, &status),
				 SEMQ_OK);
		assert_int_equal(status, RS_DONE);
	}
	return 0;
}

static int out_bare(void *ctx, const struct msg *m, const struct out_row *row)
{
	struct bare_seen *c = ctx;
	struct out_row r2;
	struct msg full;

	(void)row;
	assert_true(c->n < 320);
	c->seq[c->n] = m->id.seq;
	c->len[c->n] = m->payload_len;
	c->with_bytes += m->payload != NULL;
	c->n++;
	if (!c->st)
		return 0;
	assert_int_equal(store_outbound_get(c->st, &m->id, &full, &r2),
			 SEMQ_OK);
	expect_pattern(&full, m->payload_len);
	msg_clear(&full);
	if (c->defer)
		assert_int_equal(store_defer(c->st, &m->id, c->now), SEMQ_OK);
	return 0;
}

/* The payload length of row k of a listing that is seq-ordered `up`. */
static void expect_bare(const struct bare_seen *c, int n, const size_t *sizes,
			int newest_first)
{
	int k;

	assert_int_equal(c->n, n);
	assert_int_equal(c->with_bytes, 0);
	for (k = 0; k < n; k++) {
		int i = newest_first ? n - 1 - k : k;

		assert_int_equal(c->seq[k], (uint64_t)i + 1);
		assert_int_equal(c->len[k], sizes[i]);
	}
}

/*
 * The redo timer's refill (store_redo_due), the in-doubt scan
 * (store_fetch_in_doubt) and the listings (store_redo_list,
 * store_outbound_list) hand out no payload bytes, only payload_len, on rows
 * with payloads up to 1 MiB; store_fetch_sendable, store_outbound_get and
 * store_redo_get still give the bytes.
 */
static void test_listings_without_payload(void **state)
{
	static const size_t sizes[] = {(size_t)1 << 20, 300000, 0, 5};
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct bare_seen c;
	struct out_seen sent;
	struct redo_row rrow;
	struct out_row orow;
	struct applier a;
	struct msgid id;
	struct msg m;
	uint8_t *p;
	char err[SEMQ_ERRLEN];
	int i;

	for (i = 0; i < 4; i++) {
		uint64_t seq = 0;

		mkmsg(&m, "", "S1", 0, NULL, 0);
		p = pattern((uint64_t)i + 1, sizes[i]);
		m.payload = p;
		m.payload_len = sizes[i];
		if (store_enqueue(st, &m, &seq, err, sizeof err) != SEMQ_OK)
			fail_msg("enqueue: %s", err);
		assert_int_equal(seq, (uint64_t)i + 1);
		free(p);
	}
	/* What is sent carries its bytes. */
	memset(&sent, 0, sizeof sent);
	memset(&c, 0, sizeof c);
	assert_int_equal(
		store_fetch_sendable(st, NULL, NOW, 10, 10, out_bare, &c),
		SEMQ_OK);
	assert_int_equal(c.n, 4);
	assert_int_equal(c.with_bytes, 3); /* all but the empty one */
	for (i = 0; i < 4; i++) {
		mkid(&id, "R1", "S1", (uint64_t)i + 1);
		assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_OK);
	}
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_in_doubt(st, NOW, 10, out_bare, &c),
			 SEMQ_OK);
	expect_bare(&c, 4, sizes, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_outbound_list(st, -100, 10, out_bare, &c),
			 SEMQ_OK);
	expect_bare(&c, 4, sizes, 1);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_outbound_list(st, SS_SEND, 10, out_bare, &c),
			 SEMQ_OK);
	expect_bare(&c, 4, sizes, 1);
	for (i = 0; i < 4; i++) {
		mkid(&id, "R1", "S1", (uint64_t)i + 1);
		assert_int_equal(store_outbound_get(st, &id, &m, &orow),
				 SEMQ_OK);
		expect_pattern(&m, sizes[i]);
		msg_clear(&m);
	}

	/* Redo entries of received messages whose plugin asked to retry. */
	for (i = 0; i < 4; i++) {
		memset(&a, 0, sizeof a);
		verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
		mkmsg(&m, "R9", "R1", (uint64_t)i + 1, NULL, 0);
		p = pattern((uint64_t)i + 1, sizes[i]);
		m.payload = p;
		m.payload_len = sizes[i];
		recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
		free(p);
	}
	memset(&c, 0, sizeof c);
	assert_int_equal(store_redo_due(st, NOW + 4999, 10, redo_bare, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(store_redo_due(st, NOW + 5000, 10, redo_bare, &c),
			 SEMQ_OK);
	expect_bare(&c, 4, sizes, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_redo_list(st, -100, 10, redo_bare, &c), SEMQ_OK);
	expect_bare(&c, 4, sizes, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_redo_list(st, RS_PENDING, 10, redo_bare, &c),
			 SEMQ_OK);
	expect_bare(&c, 4, sizes, 0);
	for (i = 0; i < 4; i++) {
		assert_int_equal(store_redo_get(st, c.id[i], &m, &rrow),
				 SEMQ_OK);
		expect_pattern(&m, sizes[i]);
		msg_clear(&m);
	}
}

/*
 * The bulk reads are read row by row on PostgreSQL; their callbacks still
 * re-enter the store, whatever they run: 300 redo entries listed while each
 * is read whole and the due ones are scanned within the scan; then run one
 * by one (their plugin writing through the store's connection) from inside
 * store_redo_due, outside a batch; 300 in-doubt rows deferred from inside
 * store_fetch_in_doubt, in a batch. Every row comes once, in order.
 */
static void test_bulk_reads_reenter(void **state)
{
	enum { N = 300, LEN = 2048 };
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "R1", NULL);
	struct bare_seen c;
	struct applier a;
	struct msgid id;
	struct msg m;
	uint8_t *p;
	int i;

	assert_int_equal(store_begin(st), SEMQ_OK);
	for (i = 1; i <= N; i++) {
		memset(&a, 0, sizeof a);
		verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
		mkmsg(&m, "R9", "R1", (uint64_t)i, NULL, 0);
		p = pattern((uint64_t)i, LEN);
		m.payload = p;
		m.payload_len = LEN;
		recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
		mkmsg(&m, "", "S1", 0, NULL, 0);
		m.payload = p;
		m.payload_len = LEN;
		if (store_enqueue(st, &m, NULL, NULL, 0) != SEMQ_OK)
			fail_msg("enqueue: %s", store_errmsg(st));
		free(p);
		mkid(&id, "R1", "S1", (uint64_t)i);
		assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_OK);
	}
	assert_int_equal(store_commit(st), SEMQ_OK);

	memset(&c, 0, sizeof c);
	c.st = st;
	assert_int_equal(store_redo_list(st, -100, 1000, redo_bare, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, N);
	assert_int_equal(c.with_bytes, 0);
	assert_int_equal(c.nested_n, (N / 50) * N);
	for (i = 0; i < N; i++) {
		assert_int_equal(c.seq[i], (uint64_t)i + 1);
		assert_int_equal(c.len[i], LEN);
		if (i)
			assert_true(c.id[i] > c.id[i - 1]);
	}

	memset(&c, 0, sizeof c);
	c.st = st;
	c.run = 1;
	c.now = NOW + 5000;
	assert_int_equal(store_redo_due(st, NOW + 5000, 1000, redo_bare, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, N);
	for (i = 0; i < N; i++)
		assert_int_equal(c.seq[i], (uint64_t)i + 1);
	assert_int_equal(
		q1(st, "SELECT count(*) FROM tb_0033 WHERE status = 2"), N);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), N);

	assert_int_equal(store_begin(st), SEMQ_OK);
	memset(&c, 0, sizeof c);
	c.st = st;
	c.defer = 1;
	c.now = NOW + 7000;
	assert_int_equal(store_fetch_in_doubt(st, NOW, 1000, out_bare, &c),
			 SEMQ_OK);
	assert_int_equal(store_commit(st), SEMQ_OK);
	assert_int_equal(c.n, N);
	assert_int_equal(c.with_bytes, 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0031"
				" WHERE next_attempt_at = 1700000007000"),
			 N);
	memset(&c, 0, sizeof c);
	assert_int_equal(store_fetch_in_doubt(st, NOW, 1000, out_bare, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 0);
}

/* ---- counts without scans (semq_counts, schema 5) ------------------------ */

/* A copy of what a counts listing said, to compare two of them. */
struct cnt_seen {
	int n;
	struct {
		char table[8], a[SEMQ_ID_MAX + 1], b[SEMQ_ID_MAX + 1];
		int status;
		int64_t count, bytes, oldest;
	} r[48];
};

static int cnt_stat(void *ctx, const struct stat_row *r)
{
	struct cnt_seen *c = ctx;

	assert_true(c->n < 48);
	snprintf(c->r[c->n].table, sizeof c->r[c->n].table, "%s", r->table);
	snprintf(c->r[c->n].a, sizeof c->r[c->n].a, "%s", r->origin);
	snprintf(c->r[c->n].b, sizeof c->r[c->n].b, "%s", r->dest);
	c->r[c->n].status = r->status;
	c->r[c->n].count = r->count;
	c->r[c->n].oldest = r->oldest;
	c->n++;
	return 0;
}

static int cnt_waiting(void *ctx, const char *dest, const char *relay,
		       int64_t n, int64_t since)
{
	struct cnt_seen *c = ctx;

	assert_true(c->n < 48);
	snprintf(c->r[c->n].a, sizeof c->r[c->n].a, "%s", dest);
	snprintf(c->r[c->n].b, sizeof c->r[c->n].b, "%s", relay);
	c->r[c->n].count = n;
	c->r[c->n].oldest = since;
	c->n++;
	return 0;
}

static int cnt_custody(void *ctx, const char *origin, const char *dest,
		       int64_t messages, int64_t bytes, int64_t oldest)
{
	struct cnt_seen *c = ctx;

	assert_true(c->n < 48);
	snprintf(c->r[c->n].a, sizeof c->r[c->n].a, "%s", origin);
	snprintf(c->r[c->n].b, sizeof c->r[c->n].b, "%s", dest);
	c->r[c->n].count = messages;
	c->r[c->n].bytes = bytes;
	c->r[c->n].oldest = oldest;
	c->n++;
	return 0;
}

/* Does `c` hold the line of x (table, a, b, status, count; with_oldest:
 * and oldest; bytes too)? */
static int cnt_has(const struct cnt_seen *c, const struct cnt_seen *x, int i,
		   int with_oldest)
{
	int k;

	for (k = 0; k < c->n; k++)
		if (!strcmp(c->r[k].table, x->r[i].table) &&
		    !strcmp(c->r[k].a, x->r[i].a) &&
		    !strcmp(c->r[k].b, x->r[i].b) &&
		    c->r[k].status == x->r[i].status &&
		    c->r[k].count == x->r[i].count &&
		    c->r[k].bytes == x->r[i].bytes &&
		    (!with_oldest || c->r[k].oldest == x->r[i].oldest))
			return 1;
	return 0;
}

/* Two listings say the same, line for line (in any order). */
static void cnt_same(const char *what, const struct cnt_seen *want,
		     const struct cnt_seen *got, int with_oldest)
{
	int i;

	for (i = 0; i < want->n; i++)
		if (!cnt_has(got, want, i, with_oldest))
			fail_msg("%s: %s %s>%s status %d: %lld rows (oldest "
				 "%lld) not in the counts",
				 what, want->r[i].table, want->r[i].a,
				 want->r[i].b, want->r[i].status,
				 (long long)want->r[i].count,
				 (long long)want->r[i].oldest);
	if (got->n != want->n)
		fail_msg("%s: %d counts, %d lines counted from the rows", what,
			 got->n, want->n);
}

/*
 * What the counts say (store_counts, store_counts_waiting,
 * store_counts_custody) is what counting the rows says (store_stats, a
 * GROUP BY over the tables; store_custody_waiting, store_custody_list).
 * The oldest rows are compared where both read the same row.
 */
static void counts_agree(struct store *st, const char *when)
{
	struct cnt_seen want, got;
	char what[128];

	memset(&want, 0, sizeof want);
	memset(&got, 0, sizeof got);
	assert_int_equal(store_stats(st, cnt_stat, &want), SEMQ_OK);
	assert_int_equal(store_counts(st, cnt_stat, &got), SEMQ_OK);
	snprintf(what, sizeof what, "%s: counts", when);
	cnt_same(what, &want, &got, 0);
	memset(&want, 0, sizeof want);
	memset(&got, 0, sizeof got);
	assert_int_equal(store_custody_waiting(st, cnt_waiting, &want),
			 SEMQ_OK);
	assert_int_equal(store_counts_waiting(st, cnt_waiting, &got), SEMQ_OK);
	snprintf(what, sizeof what, "%s: waiting", when);
	cnt_same(what, &want, &got, 1);
	memset(&want, 0, sizeof want);
	memset(&got, 0, sizeof got);
	assert_int_equal(store_custody_list(st, cnt_custody, &want), SEMQ_OK);
	assert_int_equal(store_counts_custody(st, cnt_custody, &got), SEMQ_OK);
	snprintf(what, sizeof what, "%s: custody", when);
	cnt_same(what, &want, &got, 1);
}

/* The count of one line of store_counts (0 when there is none) and its
 * oldest. */
static int64_t count_of(struct store *st, const char *table, const char *origin,
			const char *dest, int status, int64_t *oldest)
{
	struct cnt_seen c;
	int i;

	memset(&c, 0, sizeof c);
	assert_int_equal(store_counts(st, cnt_stat, &c), SEMQ_OK);
	for (i = 0; i < c.n; i++)
		if (!strcmp(c.r[i].table, table) && !strcmp(c.r[i].a, origin) &&
		    !strcmp(c.r[i].b, dest) && c.r[i].status == status) {
			if (oldest)
				*oldest = c.r[i].oldest;
			return c.r[i].count;
		}
	if (oldest)
		*oldest = 0;
	return 0;
}

static void mark(struct store *st, const char *dest, uint64_t seq, int what,
		 const char *relay, int64_t at)
{
	struct msgid id;

	mkid(&id, own_node, dest, seq);
	switch (what) {
	case SS_SEND:
		assert_int_equal(store_mark_sent(st, &id, at, at + 30000),
				 SEMQ_OK);
		break;
	case SS_ACK:
		if (relay)
			assert_int_equal(
				store_mark_custody(st, &id, relay, at + 30000),
				SEMQ_OK);
		else
			assert_int_equal(
				store_mark_relay_acked(st, &id, at, at + 30000),
				SEMQ_OK);
		break;
	case SS_ACK2:
		assert_int_equal(
			store_mark_confirmed(st, &id, RES_PROCESSED, at),
			SEMQ_OK);
		break;
	case SS_CANCELLED:
		assert_int_equal(store_cancel(st, &id, at), SEMQ_OK);
		break;
	default: fail_msg("mark: %d", what);
	}
}

/*
 * semq_counts follows every change of the three tables, whoever makes it —
 * the store's calls, an application's INSERT, an operator's UPDATE and
 * DELETE, a relay's copies, the purges — and a rolled-back batch takes its
 * counts back with its rows. After each step the counts are what a GROUP BY
 * over the tables says, and the custody views what the scanning ones say.
 */
static void test_counts_follow_changes(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct applier a = {.why = "down"};
	struct msgid id;
	struct msg m;
	int64_t oldest;
	unsigned n;
	int i;

	counts_agree(st, "empty");
	/* Own messages, from the store and from an application's INSERT. */
	for (i = 0; i < 6; i++)
		enqueue(st, "S1", NULL);
	exec(st, be_sql("INSERT INTO tb_0031(dest, type, payload, created_at)"
			" VALUES ('S2', 1, x'00', 1700000000005)",
			"INSERT INTO tb_0031(dest, type, payload, created_at)"
			" VALUES ('S2', 1, '\\x00'::bytea, 1700000000005)"));
	counts_agree(st, "inserted"); /* the new row: P1's, unsent */
	assert_int_equal(
		count_of(st, "tb_0031", "P1", "S2", SS_UNSEND, &oldest), 1);
	assert_int_equal(oldest, NOW + 5);
	number(st); /* what the node's next batch does */
	counts_agree(st, "enqueued");
	assert_int_equal(
		count_of(st, "tb_0031", "P1", "S1", SS_UNSEND, &oldest), 6);
	assert_int_equal(oldest, NOW - 1000);
	assert_int_equal(
		count_of(st, "tb_0031", "P1", "S2", SS_UNSEND, &oldest), 1);
	assert_int_equal(oldest, NOW + 5);

	/* Every transition of tb_0031. */
	mark(st, "S1", 1, SS_SEND, NULL, NOW);
	mark(st, "S1", 2, SS_SEND, NULL, NOW);
	mark(st, "S1", 2, SS_ACK, NULL, NOW);
	mark(st, "S1", 3, SS_SEND, NULL, NOW + 1);
	mark(st, "S1", 3, SS_ACK, "Q1", NOW + 1);
	mark(st, "S1", 4, SS_SEND, NULL, NOW + 2);
	mark(st, "S1", 4, SS_ACK, "Q2", NOW + 2);
	mark(st, "S1", 4, SS_CANCELLED, NULL, NOW + 3); /* held by Q2 */
	mark(st, "S1", 5, SS_SEND, NULL, NOW + 3);
	mark(st, "S1", 5, SS_ACK2, NULL, NOW + 4);
	mkid(&id, "P1", "S1", 6);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, "test", NOW),
			 SEMQ_OK);
	counts_agree(st, "transitions");
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_ACK, NULL), 2);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_SEND, NULL), 1);

	/* A relay's copies: stored, refreshed, dropped. */
	for (i = 1; i <= 3; i++) {
		mkmsg(&m, "R1", "S1", (uint64_t)i, NULL, 0);
		assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	}
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_DUPLICATE);
	assert_int_equal(
		store_relay_note(st, "R1", "S1", SEMQ_LIFE_LEGACY, 3, NOW),
		SEMQ_OK);
	mkid(&id, "R1", "S1", 1);
	assert_int_equal(store_drop_copy(st, &id), SEMQ_OK);
	mkid(&id, "R1", "S1", 2);
	assert_int_equal(store_copy_cancel(st, &id, NOW), SEMQ_OK);
	counts_agree(st, "copies");
	assert_int_equal(count_of(st, "tb_0031", "R1", "S1", SS_UNSEND, NULL),
			 1);

	/* Received messages and the redo queue. */
	for (i = 1; i <= 4; i++) {
		mkmsg(&m, "R1", "P1", (uint64_t)i, NULL, 0);
		recv_expect(st, &m, &a, NOW + i, SEMQ_OK, RES_PROCESSED);
	}
	verdicts(&a, 2, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R2", "P1", 1, "k", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R2", "P1", 2, "k2", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R2", "P1", 3, "k", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO); /* waiting */
	mkid(&id, "R1", "P1", 1);
	assert_int_equal(store_ack_response(st, &id, CONFIRM_ORIGIN, &i),
			 SEMQ_OK);
	mkid(&id, "R1", "P1", 2);
	assert_int_equal(store_ack_response(st, &id, CONFIRM_ORIGIN, &i),
			 SEMQ_OK);
	counts_agree(st, "received");
	assert_int_equal(count_of(st, "tb_0030", "R1", "P1", AS_INIT, &oldest),
			 2);
	assert_int_equal(oldest, NOW + 3);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(count_of(st, "tb_0030", "R1", "P1", AS_INIT, &oldest),
			 2);
	assert_int_equal(oldest, NOW + 3); /* the first above the watermark */
	assert_int_equal(store_redo_retry_all_dead(st, NOW, &n), SEMQ_OK);
	assert_int_equal(store_redo_discard(st, redo_id_of(st, 2), "test", NOW),
			 SEMQ_OK);
	counts_agree(st, "redo");

	/* A rolled-back batch leaves the counts as they were. */
	assert_int_equal(store_begin(st), SEMQ_OK);
	enqueue(st, "S1", NULL);
	enqueue(st, "S3", NULL);
	mark(st, "S1", 1, SS_ACK2, NULL, NOW + 9);
	mkmsg(&m, "R1", "P1", 9, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R3", "P1", 1, NULL, 0);
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	assert_int_equal(store_rollback(st), SEMQ_OK);
	counts_agree(st, "rolled back");
	assert_int_equal(count_of(st, "tb_0031", "P1", "S3", SS_UNSEND, NULL),
			 0);

	/* The purges. */
	assert_int_equal(store_purge(st, NOW + 100000, 0, 100, &n), SEMQ_OK);
	assert_true(n >= 1);
	assert_int_equal(store_receipt_purge(st, NOW + 100000, 0, 100, &n),
			 SEMQ_OK);
	assert_true(n >= 1);
	assert_int_equal(store_redo_purge(st, NOW + 100000, 0, 100, &n),
			 SEMQ_OK);
	assert_true(n >= 1);
	counts_agree(st, "purged");

	/* An operator's SQL. */
	exec(st, "UPDATE tb_0031 SET status = 0, custodian = NULL"
		 " WHERE status = 6 AND custodian = 'Q1'");
	exec(st, "UPDATE tb_0030 SET origin = 'R7' WHERE seq = 4");
	exec(st, "UPDATE tb_0033 SET status = -1 WHERE status = 0");
	exec(st, "DELETE FROM tb_0031 WHERE dest = 'S2'");
	exec(st, "DELETE FROM tb_0030 WHERE seq = 3");
	counts_agree(st, "manual SQL");
	if (be_pg()) {
		exec(st, "TRUNCATE tb_0033");
		counts_agree(st, "TRUNCATE");
	}
	exec(st, "DELETE FROM tb_0031");
	exec(st, "DELETE FROM tb_0030");
	exec(st, "DELETE FROM tb_0033");
	counts_agree(st, "all deleted");
}

/*
 * A database of schema 4 with rows in it gets its counts at the migration
 * to schema 5: one pass over the tables, in the migration's transaction.
 */
/* What schema 6 added (0006_filters.sql). */
#define DROP_0006                                                              \
	" DROP INDEX idx_0031_msg_key; DROP INDEX idx_0033_msg_key;"           \
	" DROP INDEX idx_0031_dead; DROP INDEX idx_0031_new"
/* What schema 8 took away (0008_lean_receipt.sql). */
#define UNDO_0008 " CREATE INDEX idx_0030_received ON tb_0030(received_at)"

static void test_counts_from_migration(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct applier a = {0};
	struct msg m;
	int i;

	for (i = 0; i < 3; i++)
		enqueue(st, "S1", NULL);
	mark(st, "S1", 1, SS_SEND, NULL, NOW);
	mark(st, "S1", 1, SS_ACK, "Q1", NOW);
	mkmsg(&m, "R1", "S1", 4, NULL, 0);
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	mkmsg(&m, "R1", "P1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	/* Back to schema 4, as a database written before this one. */
	exec(st, "DROP TABLE semq_counts");
	exec(st, "DELETE FROM semq_schema WHERE version >= 5");
	if (be_pg())
		exec(st, "DROP FUNCTION tb_0031_count() CASCADE;"
			 " DROP FUNCTION tb_0031_count_fill() CASCADE;"
			 " DROP FUNCTION tb_0031_check() CASCADE;"
			 " DROP FUNCTION tb_0030_count() CASCADE;"
			 " DROP FUNCTION tb_0033_count() CASCADE;"
			 " DROP FUNCTION semq_count_truncate() CASCADE;"
			 " DROP INDEX idx_0031_held;" DROP_0006 ";" UNDO_0008);
	else
		exec(st, "DROP TRIGGER tb_0031_count_add;"
			 " DROP TRIGGER tb_0031_check;"
			 " DROP TRIGGER tb_0031_count_fill;"
			 " DROP TRIGGER tb_0031_count_move;"
			 " DROP TRIGGER tb_0031_count_drop;"
			 " DROP TRIGGER tb_0030_count_add;"
			 " DROP TRIGGER tb_0030_count_move;"
			 " DROP TRIGGER tb_0030_count_drop;"
			 " DROP TRIGGER tb_0033_count_add;"
			 " DROP TRIGGER tb_0033_count_move;"
			 " DROP TRIGGER tb_0033_count_drop;"
			 " DROP INDEX idx_0031_held;" DROP_0006 ";" UNDO_0008);
	reopen(fx, "P1", NULL);
	st = fx->st;
	assert_int_equal(store_migrated_from(st), 4);
	if (!be_pg()) /* the copy kept before migrating: not the test's */
		unlink(store_backup(st));
	assert_int_equal(store_schema_version(st), store_schema_latest());
	counts_agree(st, "migrated");
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_UNSEND, NULL),
			 2);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_ACK, NULL), 1);
	assert_int_equal(count_of(st, "tb_0031", "R1", "S1", SS_UNSEND, NULL),
			 1);
	assert_int_equal(count_of(st, "tb_0030", "R1", "P1", AS_INIT, NULL), 1);
	enqueue(st, "S1", NULL);
	counts_agree(st, "after the migration");
}

/* ---- the plans of the counts' reads (SQLite) ---- */

/* The statements a read ran (their SQL) and the virtual machine steps they
 * took: sqlite3_trace_v2's profile event, at the end of each run. */
struct read_trace {
	int n;
	char sql[24][4096];
	int64_t steps;
};

static int read_trace_cb(unsigned type, void *ctx, void *p, void *x)
{
	struct read_trace *t = ctx;
	sqlite3_stmt *s = p;
	const char *sql = sqlite3_sql(s);
	int i;

	(void)x;
	if (type != SQLITE_TRACE_PROFILE || !sql)
		return 0;
	t->steps += sqlite3_stmt_status(s, SQLITE_STMTSTATUS_VM_STEP, 1);
	for (i = 0; i < t->n; i++)
		if (!strcmp(t->sql[i], sql))
			return 0;
	if (t->n < 24)
		snprintf(t->sql[t->n++], sizeof t->sql[0], "%s", sql);
	return 0;
}

static int read_ignore(void *ctx, const void *r)
{
	(void)ctx;
	(void)r;
	return 0;
}

static int stat_ignore(void *ctx, const struct stat_row *r)
{
	return read_ignore(ctx, r);
}

static int waiting_ignore(void *ctx, const char *dest, const char *relay,
			  int64_t n, int64_t since)
{
	(void)dest;
	(void)relay;
	(void)n;
	(void)since;
	return read_ignore(ctx, NULL);
}

static int custody_ignore(void *ctx, const char *origin, const char *dest,
			  int64_t messages, int64_t bytes, int64_t oldest)
{
	(void)origin;
	(void)dest;
	(void)messages;
	(void)bytes;
	(void)oldest;
	return read_ignore(ctx, NULL);
}

static int in_ignore(void *ctx, const char *origin, const char *dest,
		     uint64_t life, uint64_t w)
{
	(void)origin;
	(void)dest;
	(void)life;
	(void)w;
	return read_ignore(ctx, NULL);
}

static int out_ignore(void *ctx, const struct out_stream *os)
{
	return read_ignore(ctx, os);
}

/* Runs every read of /metrics and /streams (report.c streams_read) and of
 * `semqctl status`, traced into t. */
static void report_reads(struct store *st, struct read_trace *t)
{
	sqlite3 *db = dbof(st);
	sqlite3_stmt *s = NULL;

	/* Counters of earlier runs are not this one's. */
	while ((s = sqlite3_next_stmt(db, s)))
		sqlite3_stmt_status(s, SQLITE_STMTSTATUS_VM_STEP, 1);
	memset(t, 0, sizeof *t);
	sqlite3_trace_v2(db, SQLITE_TRACE_PROFILE, read_trace_cb, t);
	assert_int_equal(store_counts(st, stat_ignore, NULL), SEMQ_OK);
	assert_int_equal(store_streams_in(st, in_ignore, NULL), SEMQ_OK);
	assert_int_equal(store_streams_out(st, out_ignore, NULL), SEMQ_OK);
	assert_int_equal(store_counts_custody(st, custody_ignore, NULL),
			 SEMQ_OK);
	assert_int_equal(store_counts_waiting(st, waiting_ignore, NULL),
			 SEMQ_OK);
	sqlite3_trace_v2(db, 0, NULL, NULL);
}

/* The tables whose size is the number of streams (or less): a read may
 * go through all of them. */
static int small_table(const char *name)
{
	static const char *const small[] = {
		"semq_counts",  "semq_stream_in",    "semq_stream_out",
		"semq_custody", "semq_stream_relay", "semq_meta"};
	size_t i, n;

	for (i = 0; i < sizeof small / sizeof small[0]; i++) {
		n = strlen(small[i]);
		if (!strncmp(name, small[i], n) &&
		    (name[n] == '\0' || name[n] == ' '))
			return 1;
	}
	return 0;
}

/*
 * The plan of sql: no SCAN of a table but the small ones, and no temporary
 * b-tree (a sort) beside a search of a queue — a search that sorts what it
 * found reads all of it. Fails naming the statement and the plan.
 */
static void plan_check(sqlite3 *db, const char *sql)
{
	struct {
		int id, parent;
		char detail[256];
	} p[64];
	char q[4200], plan[4096] = "";
	sqlite3_stmt *s = NULL;
	int n = 0, i, k, bad = 0;

	snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", sql);
	if (sqlite3_prepare_v2(db, q, -1, &s, NULL) != SQLITE_OK)
		fail_msg("%s: %s", q, sqlite3_errmsg(db));
	while (sqlite3_step(s) == SQLITE_ROW && n < 64) {
		p[n].id = sqlite3_column_int(s, 0);
		p[n].parent = sqlite3_column_int(s, 1);
		snprintf(p[n].detail, sizeof p[n].detail, "%s",
			 (const char *)sqlite3_column_text(s, 3));
		snprintf(plan + strlen(plan), sizeof plan - strlen(plan),
			 "\n  %s", p[n].detail);
		n++;
	}
	sqlite3_finalize(s);
	for (i = 0; i < n; i++) {
		/* idx_0031_new holds the rows committed since the node's
		 * last batch, which numbers them (migration 0007). */
		if (!strncmp(p[i].detail, "SCAN ", 5) &&
		    !small_table(p[i].detail + 5) &&
		    strcmp(p[i].detail + 5,
			   "tb_0031 USING INDEX idx_0031_new") &&
		    strncmp(p[i].detail + 5, "CONSTANT ROW", 12) &&
		    p[i].detail[5] != '(')
			bad = 1;
		if (strncmp(p[i].detail, "USE TEMP B-TREE", 15))
			continue;
		for (k = 0; k < n; k++)
			if (p[k].parent == p[i].parent &&
			    !strncmp(p[k].detail, "SEARCH tb_00", 12))
				bad = 1;
	}
	if (bad)
		fail_msg("a read of the reports scans a queue:\n%s\nplan:%s",
			 sql, plan);
}

/*
 * Every read of /metrics, /streams and `semqctl status` is O(streams), not
 * O(rows): its plan scans no queue (tb_0031, tb_0030, tb_0033) and sorts
 * nothing it found in one, and the work it does (SQLite's virtual machine
 * steps) is the same with ten times the rows in the same streams and
 * statuses. SQLite only: PostgreSQL plans by the statistics of the moment.
 */
static void test_count_plans(void **state)
{
	enum { MORE = 300 };
	struct fx *fx = *state;
	struct store *st;
	struct applier a = {0};
	struct read_trace t1, t2;
	struct msgid id;
	struct msg m;
	char sql[1024];
	unsigned n;
	int i;

	if (be_pg())
		skip();
	st = open_ok(fx, "P1", NULL);
	/* Every kind of count the reads look into. */
	for (i = 0; i < 8; i++)
		enqueue(st, "S1", NULL);
	mark(st, "S1", 1, SS_SEND, NULL, NOW);
	mark(st, "S1", 2, SS_SEND, NULL, NOW);
	mark(st, "S1", 2, SS_ACK, NULL, NOW);
	mark(st, "S1", 3, SS_SEND, NULL, NOW);
	mark(st, "S1", 3, SS_ACK, "Q1", NOW);
	mark(st, "S1", 4, SS_SEND, NULL, NOW);
	mark(st, "S1", 4, SS_ACK2, NULL, NOW);
	mark(st, "S1", 5, SS_CANCELLED, NULL, NOW);
	for (i = 1; i <= 2; i++) {
		mkmsg(&m, "R1", "S1", (uint64_t)i, NULL, 0);
		assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	}
	assert_int_equal(
		store_relay_note(st, "R1", "S1", SEMQ_LIFE_LEGACY, 2, NOW),
		SEMQ_OK);
	for (i = 1; i <= 3; i++) {
		mkmsg(&m, "R1", "P1", (uint64_t)i, NULL, 0);
		recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	}
	mkid(&id, "R1", "P1", 1);
	assert_int_equal(store_ack_response(st, &id, CONFIRM_ORIGIN, &i),
			 SEMQ_OK);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	verdicts(&a, 2, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R2", "P1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R2", "P1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	report_reads(st, &t1);

	/* Ten times the rows, in the same streams and statuses, each behind
	 * the first of its kind. */
#define MORE_ROWS(status, extra_cols, extra_vals, base)                        \
	snprintf(sql, sizeof sql,                                              \
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"     \
		 " FROM g WHERE i < %d) INSERT INTO tb_0031(origin, dest,"     \
		 " seq, life, type, payload, created_at, status" extra_cols    \
		 ") SELECT 'P1', 'S1', %d + i, %" PRId64 ", 1, x'00',"         \
		 " %" PRId64 " + i, %d" extra_vals " FROM g",                  \
		 MORE, base, (int64_t)own_life, NOW, status);                  \
	exec(st, sql)
	MORE_ROWS(SS_ACK2, "", "", 1000);
	MORE_ROWS(SS_UNSEND, "", "", 2000);
	MORE_ROWS(SS_SEND, ", sent_at", ", 1700000000000 + i", 3000);
	MORE_ROWS(SS_ACK, ", sent_at", ", 1700000000000 + i", 4000);
	MORE_ROWS(SS_ACK, ", sent_at, custodian", ", 1700000000000 + i, 'Q1'",
		  5000);
	MORE_ROWS(SS_CANCELLED, "", "", 6000);
#undef MORE_ROWS
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0031(origin, dest,"
		 " seq, life, type, payload, created_at) SELECT 'R1', 'S1',"
		 " 100 + i, 1, 1, x'00', %" PRId64 " + i FROM g",
		 MORE, NOW);
	exec(st, sql);
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0030(origin, dest,"
		 " seq, life, type, received_at, result, ack_status)"
		 " SELECT 'R1', 'P1', 100 + i, 1, 1, %" PRId64 " + i, 0, %d"
		 " FROM g",
		 MORE, NOW, AS_OK);
	exec(st, sql);
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0030(origin, dest,"
		 " seq, life, type, received_at, result, ack_status)"
		 " SELECT 'R1', 'P1', 1000 + i, 1, 1, %" PRId64 " + i, 0, %d"
		 " FROM g",
		 MORE, NOW, AS_INIT);
	exec(st, sql);
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0033(origin, dest,"
		 " seq, life, type, payload, status, created_at, updated_at)"
		 " SELECT 'R2', 'P1', s.b + i, 1, 1, x'00', s.v, 1, 1"
		 " FROM g, (SELECT 0 AS v, 100 AS b UNION ALL"
		 " SELECT -1, 1000) s",
		 MORE);
	exec(st, sql);
	assert_true(q1(st, "SELECT count(*) FROM tb_0031") > 7 * MORE);
	report_reads(st, &t2);

	assert_true(t1.n >= 5);
	assert_int_equal(t1.n, t2.n);
	for (i = 0; i < t2.n; i++)
		plan_check(dbof(st), t2.sql[i]);
	if (t2.steps != t1.steps)
		fail_msg("the reads took %lld steps, %lld with %d times the "
			 "rows: they grow with the rows",
			 (long long)t1.steps, (long long)t2.steps, MORE);
	counts_agree(st, "plans");
}

/* ---- the receipt purge (schema 8: no index on received_at) ---- */

/* Rows received_at NOW + seq of stream R1 -> S1, seqs from..to, AS_OK up
 * to w (the stream's watermark, set too; the rows below it AS_OK too),
 * AS_INIT above. */
static void recv_rows(struct store *st, int from, int to, int w)
{
	char sql[1024];

	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT %d UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0030(origin, dest,"
		 " seq, life, type, received_at, result, ack_status,"
		 " confirm_got) SELECT 'R1', 'S1', i, 1, 1, %" PRId64 " + i,"
		 " 0, CASE WHEN i <= %d THEN 1 ELSE 0 END,"
		 " CASE WHEN i <= %d THEN 1 ELSE 0 END FROM g",
		 from, to, NOW, w, w);
	exec(st, sql);
	snprintf(sql, sizeof sql,
		 "INSERT INTO semq_stream_in(origin, dest, life,"
		 " confirmed_through, started_at) VALUES ('R1', 'S1', 1, %d, 0)"
		 " ON CONFLICT (origin, dest, life)"
		 " DO UPDATE SET confirmed_through = %d",
		 w, w);
	exec(st, sql);
	snprintf(sql, sizeof sql,
		 "UPDATE tb_0030 SET ack_status = 1, confirm_got = 1"
		 " WHERE seq <= %d AND ack_status = 0",
		 w);
	exec(st, sql);
}

/* The virtual machine steps of one store_receipt_purge (SQLite). */
static int64_t purge_steps(struct store *st, int64_t before, unsigned *n)
{
	sqlite3 *db = dbof(st);
	sqlite3_stmt *s = NULL;
	struct read_trace t;

	while ((s = sqlite3_next_stmt(db, s)))
		sqlite3_stmt_status(s, SQLITE_STMTSTATUS_VM_STEP, 1);
	memset(&t, 0, sizeof t);
	sqlite3_trace_v2(db, SQLITE_TRACE_PROFILE, read_trace_cb, &t);
	assert_int_equal(store_receipt_purge(st, before, 0, 100, n), SEMQ_OK);
	sqlite3_trace_v2(db, 0, NULL, NULL);
	return t.steps;
}

/*
 * The receipt purge walks each stream from its first row: it takes the
 * rows at or below the watermark received before the cut, at most its
 * limit a call, never a row above the watermark; a row received late at
 * the bottom holds back the old ones above it until it is old too; and
 * (SQLite) its work does not grow with the rows the retention keeps.
 */
static void test_receipt_purge_walk(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	int64_t steps = 0;
	unsigned n = 99;
	int i;

	recv_rows(st, 1, 1100, 1000);
	if (!be_pg())
		steps = purge_steps(st, NOW, &n);
	else
		assert_int_equal(store_receipt_purge(st, NOW, 0, 100, &n),
				 SEMQ_OK);
	assert_int_equal(n, 0); /* every row younger than the cut */
	recv_rows(st, 1101, 11000, 10000);
	if (!be_pg()) /* ten times the rows kept: the same walk */
		assert_true(purge_steps(st, NOW, &n) <= steps);
	assert_int_equal(n, 0);

	/* Seqs 1..250 are older than NOW + 251: 100, 100, 50, then none. */
	for (i = 0; i < 3; i++) {
		assert_int_equal(store_receipt_purge(st, NOW + 251, 0, 100, &n),
				 SEMQ_OK);
		assert_int_equal(n, i < 2 ? 100 : 50);
	}
	assert_int_equal(store_receipt_purge(st, NOW + 251, 0, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 0);
	assert_int_equal(q1(st, "SELECT min(seq) FROM tb_0030"), 251);

	/* Seq 251 came late: the rows above it wait for it. */
	exec(st, "UPDATE tb_0030 SET received_at = received_at + 100000"
		 " WHERE seq = 251");
	assert_int_equal(store_receipt_purge(st, NOW + 400, 0, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 0);
	assert_int_equal(store_receipt_purge(st, NOW + 100252, 0, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 100); /* 251..350 */
	assert_int_equal(q1(st, "SELECT min(seq) FROM tb_0030"), 351);

	/* Everything old: all rows at or below the watermark go, the 1,000
	 * above it stay. */
	do
		assert_int_equal(
			store_receipt_purge(st, NOW + 999999, 0, 1000, &n),
			SEMQ_OK);
	while (n > 0);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030"), 1000);
	assert_int_equal(q1(st, "SELECT min(seq) FROM tb_0030"), 10001);
	counts_agree(st, "purged");
}

/*
 * PostgreSQL: every connection counts into rows of its own (its backend pid),
 * so that writers never wait for each other's counts: semqd's batch goes on
 * while an application's (or another instance's) open transaction holds the
 * counts of the same stream and status, and a reader neither waits for it
 * nor sees its rows. The reader folds the other connections' committed
 * counts into its own.
 */
static void test_pg_counts_no_hot_rows(void **state)
{
	struct fx *fx = *state;
	const struct store_opts quick = {.synchronous = -1,
					 .busy_timeout_ms = 300};
	struct store *st = open_ok(fx, "P1", &quick), *st2;
	char err[SEMQ_ERRLEN];

	enqueue(st, "S1", NULL);
	enqueue(st, "S1", NULL);
	assert_int_equal(open_opts(fx, "P1", &quick, &fx->st2, err), SEMQ_OK);
	st2 = fx->st2;
	/* The other connection's batch holds its counts of P1>S1 unsent. */
	assert_int_equal(store_begin(st2), SEMQ_OK);
	enqueue(st2, "S2", NULL);
	mark(st2, "S1", 2, SS_SEND, NULL, NOW);
	/* This one sends another row of the stream: no wait for those. */
	mark(st, "S1", 1, SS_SEND, NULL, NOW);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_UNSEND, NULL),
			 1);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_SEND, NULL), 1);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S2", SS_UNSEND, NULL),
			 0);
	assert_int_equal(store_commit(st2), SEMQ_OK);
	/* Once committed, its counts are folded into the reader's. */
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_SEND, NULL), 2);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_UNSEND, NULL),
			 0);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S2", SS_UNSEND, NULL),
			 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM semq_counts"
				" WHERE shard <> pg_backend_pid()"),
			 0);
	counts_agree(st, "folded");
	counts_agree(st2, "folded back");
}

int main(int argc, char **argv)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_open_creates_and_migrates),
		T(test_open_other_node_refused),
		T(test_open_newer_schema_refused),
		T(test_open_bad_files_and_options),
		T(test_open_concurrent_fresh),
		T(test_receive_processed),
		T(test_receive_retry_rolls_back_plugin),
		T(test_receive_permanent_goes_dead),
		T(test_receive_duplicate),
		T(test_duplicate_after_compaction),
		T(test_batch_commit_and_rollback),
		T(test_plugin_ending_transaction),
		T(test_receive_bad_input),
		T(test_predecessor_missing),
		T(test_tombstone),
		T(test_deliver_at_scheduled),
		T(test_scheduled_behind_failed_head),
		T(test_key_waiting_and_release_order),
		T(test_redo_discard_releases),
		T(test_verb_discard_reports),
		T(test_verb_retry_reports),
		T(test_verb_cancel_reports),
		T(test_redo_filters_and_bulk),
		T(test_redo_purge_by_retention),
		T(test_redo_levels_and_dead),
		T(test_max_tries_one_is_dead_at_once),
		T(test_enqueue_assigns_seq),
		T(test_fetch_sendable_window_and_order),
		T(test_fetch_sendable_round_robin),
		T(test_callbacks_reenter_store),
		T(test_outbound_state_machine),
		T(test_fetch_in_doubt),
		T(test_purge_by_retention),
		T(test_enqueue_copy),
		T(test_watermark_gaps),
		T(test_fetch_unacked),
		T(test_trace_reads),
		T(test_received_list),
		T(test_stats_and_streams),
		T(test_receive_digest_checks),
		T(test_lives_separate_streams),
		T(test_renumber),
		T(test_stream_resync),
		T(test_hold_and_cancel),
		T(test_relay_copies_and_record),
		T(test_relay_sends_older_life_first),
		T(test_redo_write_back),
		T(test_custody_counts),
		T(test_custody_window),
		T(test_fetch_tombstones_to),
		T(test_undeliverable),
		T(test_undeliverable_again),
		T(test_undeliverable_redo_verbs),
		T(test_undeliverable_outside_batch),
		T(test_redo_head),
		T(test_dests),
		T(test_copies_for),
		T(test_hide_life),
		T(test_listings_without_payload),
		T(test_bulk_reads_reenter),
		T(test_counts_follow_changes),
		T(test_counts_from_migration),
		T(test_count_plans),
		T(test_receipt_purge_walk),
	};
	const struct CMUnitTest pg_tests[] = {
		T(test_pg_two_instances_receive),
		T(test_pg_unique_index_backstop),
		T(test_pg_two_instances_redo),
		T(test_pg_advance_skips_locked),
		T(test_pg_connection_lost),
		T(test_pg_aborted_batch_not_committed),
		T(test_pg_counts_no_hot_rows),
	};
#undef T

	return be_url_main(argc, argv, "store", tests, BE_N(tests), pg_tests,
			   BE_N(pg_tests));
}
