/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the store on PostgreSQL only, the group "store on
 * PostgreSQL: several instances" of test_store --pg: several instances
 * (stores) on one database — one effect when two receive the same message,
 * the unique index as a backstop, one run when two run the same redo entry,
 * compaction that never waits for a stream another instance holds, counts
 * in rows of each connection's own — a lost connection, and a batch a
 * failed statement aborted.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "store_fixture.h"

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

const struct CMUnitTest store_pg_instances_tests[] = {
	STORE_TEST(test_pg_two_instances_receive),
	STORE_TEST(test_pg_unique_index_backstop),
	STORE_TEST(test_pg_two_instances_redo),
	STORE_TEST(test_pg_advance_skips_locked),
	STORE_TEST(test_pg_connection_lost),
	STORE_TEST(test_pg_aborted_batch_not_committed),
	STORE_TEST(test_pg_counts_no_hot_rows),
};
const size_t store_pg_instances_ntests = BE_N(store_pg_instances_tests);
