/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store_apply.c, the exactly-once receive path
 * (store_receive): a message recorded and its plugin run in one
 * transaction, a plugin's failure rolled back to its savepoint (retry,
 * permanent), duplicates, a plugin that ends the transaction, bad input, a
 * missing predecessor of a key, and tombstones.
 */
#include <string.h>

#include "store_fixture.h"

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

const struct CMUnitTest store_apply_tests[] = {
	STORE_TEST(test_receive_processed),
	STORE_TEST(test_receive_retry_rolls_back_plugin),
	STORE_TEST(test_receive_permanent_goes_dead),
	STORE_TEST(test_receive_duplicate),
	STORE_TEST(test_plugin_ending_transaction),
	STORE_TEST(test_receive_bad_input),
	STORE_TEST(test_predecessor_missing),
	STORE_TEST(test_tombstone),
};
const size_t store_apply_ntests = BE_N(store_apply_tests);
