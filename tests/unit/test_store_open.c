/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store.c and node/store_schema.c: opening a database
 * (creating and migrating it, the node it belongs to, a schema newer than
 * this SEMQ, bad files and options, several processes opening a new file at
 * once, the busy and lock timeouts), batches committed and rolled back, and
 * what store.c does for every table's reads: callbacks that re-enter the
 * store (even the listing they are called from), and scans and listings
 * that hand out no payload bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "migrations.h"
#include "store_fixture.h"

/* ---- opening ------------------------------------------------------------ */

/* How many migrations the back end under test has. */
static size_t n_migrations(void)
{
	return be_pg() ? semq_pg_n_migrations : semq_n_migrations;
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

/* ---- batches, callbacks that re-enter the store -------------------------- */

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

const struct CMUnitTest store_open_tests[] = {
	STORE_TEST(test_open_creates_and_migrates),
	STORE_TEST(test_open_other_node_refused),
	STORE_TEST(test_open_newer_schema_refused),
	STORE_TEST(test_open_bad_files_and_options),
	STORE_TEST(test_open_concurrent_fresh),
	STORE_TEST(test_batch_commit_and_rollback),
	STORE_TEST(test_callbacks_reenter_store),
	STORE_TEST(test_listings_without_payload),
	STORE_TEST(test_bulk_reads_reenter),
};
const size_t store_open_ntests = BE_N(store_open_tests);
