/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store_in.c, the receiver's record: acknowledgements
 * (store_ack_response) and the watermarks they move, compaction, the
 * unacknowledged rows, the received listing, what a second copy of a seq
 * is (the digest checks), the lives of an origin as separate streams, and
 * the receipt purge.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store_fixture.h"

/* ---- receiving ---------------------------------------------------------- */

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

/* ---- watermarks, status ------------------------------------------------- */

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

/* ---- lives, digests, refusals (docs/PROTOCOL.md, "Lives of a node") ----- */

/* Rows of `table` of one life. */
static int64_t n_of_life(struct store *st, const char *table, uint64_t life)
{
	char sql[128];

	snprintf(sql, sizeof sql,
		 "SELECT count(*) FROM %s WHERE life = %" PRId64, table,
		 (int64_t)life);
	return q1(st, sql);
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

const struct CMUnitTest store_in_tests[] = {
	STORE_TEST(test_duplicate_after_compaction),
	STORE_TEST(test_watermark_gaps),
	STORE_TEST(test_fetch_unacked),
	STORE_TEST(test_received_list),
	STORE_TEST(test_receive_digest_checks),
	STORE_TEST(test_lives_separate_streams),
	STORE_TEST(test_receipt_purge_walk),
};
const size_t store_in_ntests = BE_N(store_in_tests);
