/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store_verbs.c, the operator's verbs (discard, retry,
 * retry-all, cancel): the rule, one wording for a refusal, and what they
 * released, reported by the store itself.
 */
#include <stdio.h>
#include <string.h>

#include "store_fixture.h"

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

const struct CMUnitTest store_verbs_tests[] = {
	STORE_TEST(test_verb_discard_reports),
	STORE_TEST(test_verb_retry_reports),
	STORE_TEST(test_verb_cancel_reports),
};
const size_t store_verbs_ntests = BE_N(store_verbs_tests);
