/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store_out.c, the outbound queue tb_0031: enqueueing
 * (seqs, a relay's copies), what may be sent (the window, the order, round
 * robin over streams, older lives of a relay's copies first), the status
 * transitions of SPEC §4, the in-doubt rows, the purge, renumbering a key,
 * resyncing a stream's counter, holding and cancelling, and hiding a
 * stream's life.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_fixture.h"

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

const struct CMUnitTest store_out_tests[] = {
	STORE_TEST(test_enqueue_assigns_seq),
	STORE_TEST(test_fetch_sendable_window_and_order),
	STORE_TEST(test_fetch_sendable_round_robin),
	STORE_TEST(test_outbound_state_machine),
	STORE_TEST(test_fetch_in_doubt),
	STORE_TEST(test_purge_by_retention),
	STORE_TEST(test_enqueue_copy),
	STORE_TEST(test_renumber),
	STORE_TEST(test_stream_resync),
	STORE_TEST(test_hold_and_cancel),
	STORE_TEST(test_relay_copies_and_record),
	STORE_TEST(test_relay_sends_older_life_first),
	STORE_TEST(test_hide_life),
};
const size_t store_out_ntests = BE_N(store_out_tests);
