/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store_trace.c: what `semqctl trace` reads of one
 * message, the origin's rows of a key and the receiver's row and redo
 * entry.
 */
#include <stdio.h>
#include <string.h>

#include "store_fixture.h"

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

const struct CMUnitTest store_trace_tests[] = {
	STORE_TEST(test_trace_reads),
};
const size_t store_trace_ntests = BE_N(store_trace_tests);
