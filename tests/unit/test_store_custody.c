/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store_custody.c (docs/PROTOCOL.md, "Custody"): a
 * relay's copies counted per origin and destination, an origin's rows in a
 * relay's custody and its window, the cancels of one destination, an
 * origin's undeliverable messages (held with a dead entry of their own, and
 * the redo verbs on it), the destinations a relay knows, and a relay's
 * copies for one destination.
 */
#include <stdio.h>
#include <string.h>

#include "store_fixture.h"

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

const struct CMUnitTest store_custody_tests[] = {
	STORE_TEST(test_custody_counts),
	STORE_TEST(test_custody_window),
	STORE_TEST(test_fetch_tombstones_to),
	STORE_TEST(test_undeliverable),
	STORE_TEST(test_undeliverable_again),
	STORE_TEST(test_undeliverable_redo_verbs),
	STORE_TEST(test_undeliverable_outside_batch),
	STORE_TEST(test_dests),
	STORE_TEST(test_copies_for),
};
const size_t store_custody_ntests = BE_N(store_custody_tests);
