/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/wheel.c, the hashed timing wheel, through wheel.h only.
 * The clock is a plain integer passed to wheel_advance(); nothing sleeps.
 * Checked: firing order (by time, ties by insertion), cancel and re-add,
 * entries in the past, rounds across many turns, long jumps, callbacks that
 * re-schedule and cancel, 100,000 timers, memory that returns after a
 * million entries and stays O(entries), wheel_next, and a random sequence
 * of operations compared step by step with a plain reference model.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <semq/error.h>

#include "wheel.h"

/* ---- helpers -------------------------------------------------------------- */

/* xorshift64*: deterministic, so a failure replays. */
static uint64_t g_rng = UINT64_C(0x9e3779b97f4a7c15);

static uint64_t rnd(void)
{
	g_rng ^= g_rng >> 12;
	g_rng ^= g_rng << 25;
	g_rng ^= g_rng >> 27;
	return g_rng * UINT64_C(0x2545f4914f6cdd1d);
}

/* Uniform enough in [lo, hi]. */
static int64_t rnd_range(int64_t lo, int64_t hi)
{
	return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static void shuffle(uint64_t *v, size_t n)
{
	size_t i;

	for (i = n; i > 1; i--) {
		size_t j = (size_t)(rnd() % i);
		uint64_t t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

struct fire {
	uint64_t id;
	int64_t at;
};

/* The fires seen, in order; v is owned and freed by rec_free(). */
struct rec {
	struct fire *v;
	size_t n, cap;
};

static void rec_fn(void *ctx, uint64_t id, int64_t at)
{
	struct rec *r = ctx;

	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 64;
		r->v = realloc(r->v, r->cap * sizeof(*r->v));
		assert_non_null(r->v);
	}
	r->v[r->n].id = id;
	r->v[r->n].at = at;
	r->n++;
}

static void rec_free(struct rec *r)
{
	free(r->v);
	memset(r, 0, sizeof(*r));
}

static void count_fn(void *ctx, uint64_t id, int64_t at)
{
	(*(size_t *)ctx)++;
}

/* ---- bad arguments ---------------------------------------------------------- */

static void test_new_bad_args(void **state)
{
	struct rec r = {0};
	struct wheel *w;
	int64_t at;

	assert_null(wheel_new(0, 10, 0));
	assert_null(wheel_new(8, 0, 0));
	assert_null(wheel_new(8, -1, 0));
	assert_null(wheel_new(8, INT64_MIN, 0));
	assert_null(wheel_new((1u << 24) + 1, 10, 0));
	assert_null(wheel_new(UINT32_MAX, 10, 0));
	wheel_free(NULL);

	/* The smallest sizes and extreme times are fine. */
	w = wheel_new(1, 1, INT64_MIN);
	assert_non_null(w);
	wheel_free(w);
	w = wheel_new(1, INT64_MAX, INT64_MAX);
	assert_non_null(w);
	wheel_free(w);

	/* NULL handles are refused, not dereferenced. */
	assert_int_equal(wheel_add(NULL, 1, 10), SEMQ_ERR_INVALID);
	assert_int_equal(wheel_cancel(NULL, 1), SEMQ_ERR_INVALID);
	assert_int_equal(wheel_contains(NULL, 1, &at), 0);
	assert_int_equal(wheel_advance(NULL, 100, rec_fn, &r), 0);
	assert_true(wheel_next(NULL) == INT64_MAX);
	assert_int_equal(wheel_count(NULL), 0);
	assert_int_equal(wheel_memory(NULL), 0);

	/* A NULL callback fires nothing and loses nothing. */
	w = wheel_new(8, 10, 0);
	assert_non_null(w);
	assert_int_equal(wheel_add(w, 1, 10), SEMQ_OK);
	assert_int_equal(wheel_advance(w, 100, NULL, NULL), 0);
	assert_int_equal(wheel_count(w), 1);
	assert_int_equal(wheel_advance(w, 100, rec_fn, &r), 1);
	assert_int_equal(r.n, 1);
	wheel_free(w);
	rec_free(&r);
}

/* ---- ordering ---------------------------------------------------------------- */

/* 5,000 timers with many ties (5,000 times drawn from 3,000 ms), added in
 * random order, advanced in random steps (some longer than a turn): every
 * one fires once, in the advance that crosses its time, sorted by time and
 * ties by insertion. */
static void test_order_random(void **state)
{
	enum { N = 5000 };
	static uint64_t order[N];
	static int64_t at[N];
	static size_t rank[N];
	static int fired[N];
	struct rec r = {0};
	struct wheel *w = wheel_new(16, 10, 0); /* one turn = 160 ms */
	int64_t now = 0, prev;
	size_t i, k, total = 0;
	uint64_t last = UINT64_MAX;

	assert_non_null(w);
	for (i = 0; i < N; i++) {
		order[i] = i;
		at[i] = rnd_range(1000, 3999);
	}
	shuffle(order, N);
	for (i = 0; i < N; i++) {
		rank[order[i]] = i;
		assert_int_equal(wheel_add(w, order[i], at[order[i]]), SEMQ_OK);
	}
	assert_int_equal(wheel_count(w), N);
	while (now < 4000) {
		prev = now;
		now += rnd_range(0, 400);
		r.n = 0;
		k = wheel_advance(w, now, rec_fn, &r);
		assert_int_equal(k, r.n);
		for (i = 0; i < r.n; i++) {
			uint64_t id = r.v[i].id;

			assert_true(id < N);
			assert_false(fired[id]);
			fired[id] = 1;
			assert_true(r.v[i].at == at[id]);
			assert_true(at[id] <= now);
			assert_true(at[id] > prev);
			if (last != UINT64_MAX)
				assert_true(at[last] < at[id] ||
					    (at[last] == at[id] &&
					     rank[last] < rank[id]));
			last = id;
			total++;
		}
	}
	assert_int_equal(total, N);
	assert_int_equal(wheel_count(w), 0);
	wheel_free(w);
	rec_free(&r);
}

/* ---- cancel and re-add ---------------------------------------------------------- */

static void test_cancel(void **state)
{
	struct rec r = {0};
	struct wheel *w = wheel_new(8, 10, 0);

	assert_non_null(w);
	assert_int_equal(wheel_add(w, 1, 50), SEMQ_OK);
	assert_int_equal(wheel_add(w, 2, 60), SEMQ_OK);
	assert_int_equal(wheel_add(w, 3, 70), SEMQ_OK);
	assert_int_equal(wheel_add(w, 4, 1000), SEMQ_OK); /* rounds ahead */

	/* Before firing: gone for good. */
	assert_int_equal(wheel_cancel(w, 2), SEMQ_OK);
	assert_int_equal(wheel_contains(w, 2, NULL), 0);
	/* Twice, and an id never added. */
	assert_int_equal(wheel_cancel(w, 2), SEMQ_ERR_NOT_FOUND);
	assert_int_equal(wheel_cancel(w, 99), SEMQ_ERR_NOT_FOUND);
	assert_int_equal(wheel_cancel(w, 4), SEMQ_OK);
	assert_int_equal(wheel_count(w), 2);

	assert_int_equal(wheel_advance(w, 2000, rec_fn, &r), 2);
	assert_int_equal(r.n, 2);
	assert_int_equal(r.v[0].id, 1);
	assert_int_equal(r.v[1].id, 3);

	/* A fired id is no longer there. */
	assert_int_equal(wheel_cancel(w, 1), SEMQ_ERR_NOT_FOUND);
	assert_int_equal(wheel_cancel(w, 3), SEMQ_ERR_NOT_FOUND);
	assert_int_equal(wheel_count(w), 0);

	/* A cancelled id can be added again. */
	assert_int_equal(wheel_add(w, 2, 2100), SEMQ_OK);
	r.n = 0;
	assert_int_equal(wheel_advance(w, 2100, rec_fn, &r), 1);
	assert_int_equal(r.v[0].id, 2);
	assert_true(r.v[0].at == 2100);
	wheel_free(w);
	rec_free(&r);
}

static void test_readd_moves(void **state)
{
	struct rec r = {0};
	struct wheel *w = wheel_new(8, 10, 0); /* one turn = 80 ms */
	int64_t at = 0;

	assert_non_null(w);

	/* Later. */
	assert_int_equal(wheel_add(w, 7, 100), SEMQ_OK);
	assert_int_equal(wheel_add(w, 7, 500), SEMQ_OK);
	assert_int_equal(wheel_count(w), 1);
	assert_int_equal(wheel_contains(w, 7, &at), 1);
	assert_true(at == 500);
	assert_int_equal(wheel_advance(w, 200, rec_fn, &r), 0);
	assert_int_equal(wheel_advance(w, 499, rec_fn, &r), 0);
	assert_int_equal(wheel_advance(w, 500, rec_fn, &r), 1);
	assert_int_equal(r.v[0].id, 7);
	assert_true(r.v[0].at == 500);
	assert_int_equal(wheel_count(w), 0);

	/* Earlier, from several turns away to the next tick. */
	r.n = 0;
	assert_int_equal(wheel_add(w, 8, 5000), SEMQ_OK);
	assert_int_equal(wheel_add(w, 8, 505), SEMQ_OK);
	assert_int_equal(wheel_advance(w, 505, rec_fn, &r), 1);
	assert_true(r.v[0].at == 505);
	assert_int_equal(wheel_advance(w, 6000, rec_fn, &r), 0);

	/* A re-add is a new insertion: it goes behind its ties. */
	r.n = 0;
	assert_int_equal(wheel_add(w, 1, 7000), SEMQ_OK);
	assert_int_equal(wheel_add(w, 2, 7000), SEMQ_OK);
	assert_int_equal(wheel_add(w, 3, 7000), SEMQ_OK);
	assert_int_equal(wheel_add(w, 1, 7000), SEMQ_OK);
	assert_int_equal(wheel_advance(w, 7000, rec_fn, &r), 3);
	assert_int_equal(r.v[0].id, 2);
	assert_int_equal(r.v[1].id, 3);
	assert_int_equal(r.v[2].id, 1);
	wheel_free(w);
	rec_free(&r);
}

/* ---- the past, and time going backwards ------------------------------------------------------ */

static void test_past_fires_next_advance(void **state)
{
	struct rec r = {0};
	struct wheel *w = wheel_new(8, 10, 10000);
	int64_t at = 0;

	assert_non_null(w);
	assert_int_equal(wheel_add(w, 1, 5000), SEMQ_OK);
	assert_int_equal(wheel_add(w, 2, 10000), SEMQ_OK);
	assert_int_equal(wheel_add(w, 3, INT64_MIN), SEMQ_OK);
	assert_int_equal(wheel_add(w, 4, 10005),
			 SEMQ_OK); /* same tick, later */
	assert_int_equal(wheel_add(w, 5, 9999), SEMQ_OK);
	/* The time asked for is kept, not the clamped one. */
	assert_int_equal(wheel_contains(w, 1, &at), 1);
	assert_true(at == 5000);
	assert_true(wheel_next(w) == INT64_MIN);

	/* The next advance, even to the same time, fires them in order. */
	assert_int_equal(wheel_advance(w, 10000, rec_fn, &r), 4);
	assert_int_equal(r.v[0].id, 3);
	assert_true(r.v[0].at == INT64_MIN);
	assert_int_equal(r.v[1].id, 1);
	assert_true(r.v[1].at == 5000);
	assert_int_equal(r.v[2].id, 5);
	assert_int_equal(r.v[3].id, 2);
	assert_int_equal(wheel_count(w), 1);
	assert_true(wheel_next(w) == 10005);

	r.n = 0;
	assert_int_equal(wheel_advance(w, 10005, rec_fn, &r), 1);
	assert_int_equal(r.v[0].id, 4);

	/* Added in the past after a move: the next advance takes it. */
	r.n = 0;
	assert_int_equal(wheel_advance(w, 20000, rec_fn, &r), 0);
	assert_int_equal(wheel_add(w, 6, 15000), SEMQ_OK);
	assert_int_equal(wheel_add(w, 7, 20000), SEMQ_OK);
	assert_int_equal(wheel_advance(w, 20000, rec_fn, &r), 2);
	assert_int_equal(r.v[0].id, 6);
	assert_true(r.v[0].at == 15000);
	assert_int_equal(r.v[1].id, 7);
	wheel_free(w);
	rec_free(&r);
}

static void test_advance_backwards(void **state)
{
	struct rec r = {0};
	struct wheel *w = wheel_new(8, 10, 1000);

	assert_non_null(w);
	assert_int_equal(wheel_add(w, 1, 1005), SEMQ_OK);
	assert_int_equal(wheel_add(w, 2, 990), SEMQ_OK); /* in the past */

	/* Earlier than the wheel: nothing, not even the overdue one. */
	assert_int_equal(wheel_advance(w, 999, rec_fn, &r), 0);
	assert_int_equal(wheel_advance(w, 500, rec_fn, &r), 0);
	assert_int_equal(wheel_advance(w, INT64_MIN, rec_fn, &r), 0);
	assert_int_equal(r.n, 0);
	assert_int_equal(wheel_count(w), 2);

	assert_int_equal(wheel_advance(w, 1000, rec_fn, &r), 1);
	assert_int_equal(r.v[0].id, 2);
	assert_int_equal(wheel_advance(w, 1004, rec_fn, &r), 0);
	/* Going back did not move the wheel back: 1 is still one tick ahead
	 * of 1003 only in wall time, and fires at 1005, not before. */
	assert_int_equal(wheel_advance(w, 1003, rec_fn, &r), 0);
	assert_int_equal(r.n, 1);
	assert_int_equal(wheel_advance(w, 1005, rec_fn, &r), 1);
	assert_int_equal(r.v[1].id, 1);
	wheel_free(w);
	rec_free(&r);
}

/* Times below zero: ticks are floor(t / tick_ms), not truncated. */
static void test_negative_times(void **state)
{
	struct rec r = {0};
	struct wheel *w = wheel_new(8, 10, -1000);

	assert_non_null(w);
	assert_int_equal(wheel_add(w, 1, -995), SEMQ_OK);
	assert_int_equal(wheel_add(w, 2, -1001), SEMQ_OK);
	assert_int_equal(wheel_add(w, 3, -5), SEMQ_OK);
	assert_int_equal(wheel_add(w, 4, 5), SEMQ_OK);
	assert_int_equal(wheel_add(w, 5, -1), SEMQ_OK);
	assert_int_equal(wheel_advance(w, -996, rec_fn, &r), 1);
	assert_int_equal(r.v[0].id, 2);
	assert_int_equal(wheel_advance(w, -995, rec_fn, &r), 1);
	assert_int_equal(r.v[1].id, 1);
	assert_int_equal(wheel_advance(w, -6, rec_fn, &r), 0);
	assert_int_equal(wheel_advance(w, -5, rec_fn, &r), 1);
	assert_int_equal(r.v[2].id, 3);
	assert_int_equal(wheel_advance(w, 4, rec_fn, &r), 1);
	assert_int_equal(r.v[3].id, 5);
	assert_int_equal(wheel_advance(w, 5, rec_fn, &r), 1);
	assert_int_equal(r.v[4].id, 4);
	wheel_free(w);
	rec_free(&r);
}

/* ---- rounds ------------------------------------------------------------------------ */

/* Delays of one to five turns and around them fire exactly at their time,
 * not a turn early or late: advanced one millisecond at a time, each fire
 * happens in the advance whose now equals its time. */
static void run_rounds(int64_t start, int64_t step)
{
	enum { SLOTS = 8, TICK = 10, TURN = SLOTS * TICK };
	static const int64_t off[] = {-11, -10, -1, 0, 1, 5, 9, 10, 79};
	struct rec r = {0};
	struct wheel *w = wheel_new(SLOTS, TICK, start);
	uint64_t id = 0;
	int64_t now, k;
	size_t i, n, total = 0;

	assert_non_null(w);
	for (k = 1; k <= 5; k++)
		for (i = 0; i < sizeof(off) / sizeof(off[0]); i++)
			assert_int_equal(
				wheel_add(w, id++, start + k * TURN + off[i]),
				SEMQ_OK);
	assert_int_equal(wheel_advance(w, start, rec_fn, &r), 0);
	for (now = start + step; now < start + 6 * TURN + step; now += step) {
		r.n = 0;
		n = wheel_advance(w, now, rec_fn, &r);
		assert_int_equal(n, r.n);
		for (i = 0; i < r.n; i++) {
			assert_true(r.v[i].at <= now);
			assert_true(r.v[i].at > now - step);
			if (i > 0)
				assert_true(r.v[i - 1].at <= r.v[i].at);
		}
		total += r.n;
		/* Nothing due is left behind. */
		assert_true(wheel_next(w) > now);
	}
	assert_int_equal(total, id);
	assert_int_equal(wheel_count(w), 0);
	wheel_free(w);
	rec_free(&r);
}

static void test_rounds_wraparound(void **state)
{
	run_rounds(0, 1);
	run_rounds(37, 1); /* start inside a tick */
	run_rounds(1000003, 1);
	run_rounds(0, 10); /* tick by tick */
	run_rounds(5, 7);  /* steps across tick boundaries */
	run_rounds(0, 79); /* just under a turn */
	run_rounds(3, 80); /* a full turn per step */
	run_rounds(3, 81); /* just over */
}

/* ---- long jumps -------------------------------------------------------------------------- */

/* A jump of 10^12 ticks (and then of nearly 2^64) completes: the walk is
 * bounded by one turn, whatever the distance. Everything due fires, in
 * order, and what is not due stays. */
static void test_big_jump(void **state)
{
	enum { N = 1000 };
	struct rec r = {0};
	struct wheel *w = wheel_new(64, 1, 0);
	size_t i;
	int64_t at;

	assert_non_null(w);
	for (i = 0; i < N; i++)
		assert_int_equal(wheel_add(w, i, rnd_range(1, 1000000)),
				 SEMQ_OK);
	assert_int_equal(wheel_add(w, 5000, INT64_C(1000000000000000)),
			 SEMQ_OK);
	assert_int_equal(wheel_add(w, 5001, INT64_MAX), SEMQ_OK);

	assert_int_equal(wheel_advance(w, INT64_C(1000000000000), rec_fn, &r),
			 N);
	for (i = 1; i < r.n; i++)
		assert_true(r.v[i - 1].at <= r.v[i].at);
	assert_int_equal(wheel_count(w), 2);
	assert_true(wheel_next(w) == INT64_C(1000000000000000));

	r.n = 0;
	assert_int_equal(wheel_advance(w, INT64_MAX - 1, rec_fn, &r), 1);
	assert_int_equal(r.v[0].id, 5000);
	assert_int_equal(wheel_contains(w, 5001, &at), 1);
	assert_true(at == INT64_MAX);
	assert_int_equal(wheel_advance(w, INT64_MAX, rec_fn, &r), 1);
	assert_int_equal(r.v[1].id, 5001);
	assert_int_equal(wheel_count(w), 0);
	wheel_free(w);

	/* The whole int64 range in one advance, from a wheel at INT64_MIN. */
	w = wheel_new(4096, 1, INT64_MIN);
	assert_non_null(w);
	assert_int_equal(wheel_add(w, 1, 0), SEMQ_OK);
	assert_int_equal(wheel_add(w, 2, INT64_MIN + 1), SEMQ_OK);
	assert_int_equal(wheel_add(w, 3, INT64_MAX), SEMQ_OK);
	r.n = 0;
	assert_int_equal(wheel_advance(w, INT64_MAX, rec_fn, &r), 3);
	assert_int_equal(r.v[0].id, 2);
	assert_int_equal(r.v[1].id, 1);
	assert_int_equal(r.v[2].id, 3);
	wheel_free(w);
	rec_free(&r);
}

/* ---- callbacks -------------------------------------------------------------------------- */

struct script {
	struct wheel *w;
	struct rec rec;
	int stage;         /* fires of id 1 so far */
	int64_t next_seen; /* wheel_next() inside the callback of id 1 */
	int cancel_self;   /* wheel_cancel(1) inside its own callback */
	size_t nested;     /* what a nested wheel_advance() returned */
};

static void script_fn(void *ctx, uint64_t id, int64_t at)
{
	struct script *s = ctx;

	rec_fn(&s->rec, id, at);
	switch (id) {
	case 1:
		if (s->stage++ > 0) {
			/* Later fires only re-schedule. */
			assert_int_equal(wheel_add(s->w, 1, at + 15), SEMQ_OK);
			break;
		}
		/* Already removed: cancelling it finds nothing. */
		s->cancel_self = wheel_cancel(s->w, 1);
		assert_int_equal(wheel_contains(s->w, 1, NULL), 0);
		/* Re-schedule inside this advance's window: next advance. */
		assert_int_equal(wheel_add(s->w, 1, at + 15), SEMQ_OK);
		/* 4 is due at the same time, behind 1: on the due list. */
		assert_int_equal(wheel_cancel(s->w, 4), SEMQ_OK);
		/* 3 is due later in this advance, in another bucket. */
		assert_int_equal(wheel_cancel(s->w, 3), SEMQ_OK);
		s->next_seen = wheel_next(s->w);
		s->nested = wheel_advance(s->w, at + 1000, rec_fn, &s->rec);
		break;
	case 9:
		/* Re-schedule at the very same (past) time: no loop. */
		assert_int_equal(wheel_add(s->w, 9, at), SEMQ_OK);
		break;
	case 10:
		/* Re-add 11, due in this advance, to later in it. */
		assert_int_equal(wheel_add(s->w, 11, at + 5), SEMQ_OK);
		break;
	default: break;
	}
}

static void test_callback_reschedule_cancel(void **state)
{
	struct script s = {0};
	int64_t at = 0;

	/* 64 slots of 10 ms: the advance to 100 walks tick by tick (1 is
	 * re-added to a bucket the walk has yet to reach), the one to 10000
	 * is a long jump. */
	s.w = wheel_new(64, 10, 0);
	assert_non_null(s.w);
	assert_int_equal(wheel_add(s.w, 1, 10), SEMQ_OK);
	assert_int_equal(wheel_add(s.w, 4, 10), SEMQ_OK);
	assert_int_equal(wheel_add(s.w, 5, 15), SEMQ_OK);
	assert_int_equal(wheel_add(s.w, 2, 20), SEMQ_OK);
	assert_int_equal(wheel_add(s.w, 3, 30), SEMQ_OK);

	assert_int_equal(wheel_advance(s.w, 100, script_fn, &s), 3);
	assert_int_equal(s.rec.n, 3);
	assert_int_equal(s.rec.v[0].id, 1);
	assert_int_equal(s.rec.v[1].id, 5);
	assert_int_equal(s.rec.v[2].id, 2);
	assert_int_equal(s.cancel_self, SEMQ_ERR_NOT_FOUND);
	assert_int_equal(s.nested, 0); /* refused */
	/* Seen from the callback: 1 at 25, 5 at 15, 2 at 20 are left. */
	assert_true(s.next_seen == 15);
	/* The re-scheduled 1 waits for the next advance. */
	assert_int_equal(wheel_count(s.w), 1);
	assert_int_equal(wheel_contains(s.w, 1, &at), 1);
	assert_true(at == 25);
	assert_true(wheel_next(s.w) == 25);
	s.rec.n = 0;
	assert_int_equal(wheel_advance(s.w, 100, script_fn, &s), 1);
	assert_int_equal(s.rec.v[0].id, 1);
	assert_true(s.rec.v[0].at == 25);
	assert_int_equal(wheel_count(s.w), 1); /* it re-added itself again */
	assert_int_equal(wheel_cancel(s.w, 1), SEMQ_OK);

	/* Re-scheduling at the same time fires once per advance. */
	s.rec.n = 0;
	assert_int_equal(wheel_add(s.w, 9, 50), SEMQ_OK);
	assert_int_equal(wheel_advance(s.w, 100, script_fn, &s), 1);
	assert_int_equal(wheel_advance(s.w, 100, script_fn, &s), 1);
	assert_int_equal(s.rec.n, 2);
	assert_int_equal(wheel_count(s.w), 1);
	assert_int_equal(wheel_cancel(s.w, 9), SEMQ_OK);

	/* The same across a long jump: 10 moves 11, due later in it. */
	s.rec.n = 0;
	assert_int_equal(wheel_add(s.w, 10, 200), SEMQ_OK);
	assert_int_equal(wheel_add(s.w, 11, 5000), SEMQ_OK);
	assert_int_equal(wheel_add(s.w, 12, 6000), SEMQ_OK);
	assert_int_equal(wheel_advance(s.w, 10000, script_fn, &s), 2);
	assert_int_equal(s.rec.v[0].id, 10);
	assert_int_equal(s.rec.v[1].id, 12);
	assert_int_equal(wheel_contains(s.w, 11, &at), 1);
	assert_true(at == 205);
	assert_int_equal(wheel_advance(s.w, 10000, script_fn, &s), 1);
	assert_int_equal(s.rec.v[2].id, 11);
	assert_int_equal(wheel_count(s.w), 0);

	wheel_free(s.w);
	rec_free(&s.rec);
}

/* ---- scale and memory ---------------------------------------------------------------------- */

/* 100,000 timers over ten minutes on a 512-slot wheel of 10 ms ticks (a
 * turn is 5.12 s, so most carry rounds), advanced in random steps: each
 * fires exactly once, in the advance crossing its time, in order. */
static void test_100k_in_order(void **state)
{
	enum { N = 100000 };
	uint64_t *order = malloc(N * sizeof(*order));
	int64_t *at = malloc(N * sizeof(*at));
	size_t *rank = malloc(N * sizeof(*rank));
	unsigned char *fired = calloc(N, 1);
	struct rec r = {0};
	struct wheel *w = wheel_new(512, 10, 0);
	int64_t now = 0, prev;
	size_t i, k, total = 0;
	uint64_t last = UINT64_MAX;

	assert_non_null(order);
	assert_non_null(at);
	assert_non_null(rank);
	assert_non_null(fired);
	assert_non_null(w);
	for (i = 0; i < N; i++) {
		order[i] = i;
		at[i] = rnd_range(1, 600000);
	}
	shuffle(order, N);
	for (i = 0; i < N; i++) {
		rank[order[i]] = i;
		assert_int_equal(wheel_add(w, order[i], at[order[i]]), SEMQ_OK);
	}
	assert_int_equal(wheel_count(w), N);
	while (now < 600000) {
		prev = now;
		now += rnd_range(0, 3000);
		r.n = 0;
		k = wheel_advance(w, now, rec_fn, &r);
		assert_int_equal(k, r.n);
		for (i = 0; i < r.n; i++) {
			uint64_t id = r.v[i].id;

			assert_true(id < N);
			assert_int_equal(fired[id], 0);
			fired[id] = 1;
			assert_true(at[id] <= now && at[id] > prev);
			if (last != UINT64_MAX)
				assert_true(at[last] < at[id] ||
					    (at[last] == at[id] &&
					     rank[last] < rank[id]));
			last = id;
			total++;
		}
	}
	assert_int_equal(total, N);
	assert_int_equal(wheel_count(w), 0);
	assert_true(wheel_next(w) == INT64_MAX);
	wheel_free(w);
	rec_free(&r);
	free(order);
	free(at);
	free(rank);
	free(fired);
}

/* A million entries through the wheel, 100,000 at a time, half cancelled
 * and half fired: afterwards it is empty and holds what an empty wheel
 * holds (freeing returns memory; the index shrinks back). */
static void test_memory_returns(void **state)
{
	enum { BATCH = 100000, ROUNDS = 10 };
	struct wheel *w = wheel_new(256, 10, 0);
	size_t empty, peak = 0, fired, i, round;
	int64_t now = 0;
	uint64_t id = 0, first;

	assert_non_null(w);
	empty = wheel_memory(w);
	for (round = 0; round < ROUNDS; round++) {
		first = id;
		for (i = 0; i < BATCH; i++)
			assert_int_equal(
				wheel_add(w, id++, now + rnd_range(1, 20000)),
				SEMQ_OK);
		if (wheel_memory(w) > peak)
			peak = wheel_memory(w);
		for (i = 0; i < BATCH; i += 2)
			assert_int_equal(wheel_cancel(w, first + i), SEMQ_OK);
		now += 20000;
		fired = 0;
		assert_int_equal(wheel_advance(w, now, count_fn, &fired),
				 BATCH / 2);
		assert_int_equal(fired, BATCH / 2);
		assert_int_equal(wheel_count(w), 0);
	}
	assert_int_equal(id, 1000000);
	assert_true(peak > empty + (size_t)BATCH * 32);
	assert_true(wheel_memory(w) <= 2 * empty);
	wheel_free(w);
}

/* With 100,000 entries scheduled the wheel holds O(entries): under 128
 * bytes per entry on top of the empty wheel (buckets included there). */
static void test_memory_per_entry(void **state)
{
	enum { N = 100000 };
	struct wheel *w = wheel_new(4096, 10, 0);
	size_t empty, full, i;

	assert_non_null(w);
	empty = wheel_memory(w);
	assert_true(empty >= 4096 * 2 * sizeof(void *));
	for (i = 0; i < N; i++)
		assert_int_equal(wheel_add(w, i * 7919, rnd_range(0, 60000)),
				 SEMQ_OK);
	full = wheel_memory(w);
	assert_true(full > empty);
	assert_true((full - empty) / N < 128);
	/* Re-adding every id moves it and allocates nothing. */
	for (i = 0; i < N; i++)
		assert_int_equal(wheel_add(w, i * 7919, rnd_range(0, 60000)),
				 SEMQ_OK);
	assert_int_equal(wheel_count(w), N);
	assert_int_equal(wheel_memory(w), full);
	wheel_free(w);
}

/* ---- wheel_next ------------------------------------------------------------------------------ */

static void test_next(void **state)
{
	struct rec r = {0};
	struct wheel *w = wheel_new(8, 10, 0); /* one turn = 80 ms */

	assert_non_null(w);
	assert_true(wheel_next(w) == INT64_MAX);
	assert_int_equal(wheel_add(w, 5, 500), SEMQ_OK);
	assert_true(wheel_next(w) == 500);
	assert_int_equal(wheel_add(w, 6, 300), SEMQ_OK);
	assert_int_equal(wheel_add(w, 7, 300), SEMQ_OK);
	assert_true(wheel_next(w) == 300);
	assert_int_equal(wheel_cancel(w, 6), SEMQ_OK);
	assert_true(wheel_next(w) == 300); /* 7 still there */
	assert_int_equal(wheel_cancel(w, 7), SEMQ_OK);
	assert_true(wheel_next(w) == 500);
	assert_int_equal(wheel_add(w, 5, 1000), SEMQ_OK); /* moved later */
	assert_true(wheel_next(w) == 1000);
	assert_int_equal(wheel_add(w, 8, 100000), SEMQ_OK);
	assert_int_equal(wheel_add(w, 10, 100003), SEMQ_OK);
	assert_true(wheel_next(w) == 1000);
	/* Only entries many turns away are left. */
	assert_int_equal(wheel_cancel(w, 5), SEMQ_OK);
	assert_true(wheel_next(w) == 100000);
	assert_int_equal(wheel_advance(w, 50000, rec_fn, &r), 0);
	assert_true(wheel_next(w) == 100000);
	/* An entry in the past is the earliest. */
	assert_int_equal(wheel_add(w, 9, 10), SEMQ_OK);
	assert_true(wheel_next(w) == 10);
	assert_int_equal(wheel_advance(w, 50000, rec_fn, &r), 1);
	assert_true(wheel_next(w) == 100000);
	/* Within the same tick as now, later than now. */
	assert_int_equal(wheel_add(w, 11, 50005), SEMQ_OK);
	assert_true(wheel_next(w) == 50005);
	assert_int_equal(wheel_advance(w, 50004, rec_fn, &r), 0);
	assert_true(wheel_next(w) == 50005);
	assert_int_equal(wheel_advance(w, 100000, rec_fn, &r), 2);
	assert_true(wheel_next(w) == 100003);
	assert_int_equal(wheel_advance(w, 100003, rec_fn, &r), 1);
	assert_true(wheel_next(w) == INT64_MAX);
	wheel_free(w);
	rec_free(&r);
}

/* ---- against a reference model ------------------------------------------------------------- */

enum { MODEL_IDS = 300 };

/* The obvious implementation: an array scanned in full. */
struct model {
	int live[MODEL_IDS];
	int64_t at[MODEL_IDS];
	uint64_t seq[MODEL_IDS];
	uint64_t next_seq;
	int64_t now;
};

static int64_t model_next(const struct model *m)
{
	int64_t best = INT64_MAX;
	size_t i;

	for (i = 0; i < MODEL_IDS; i++)
		if (m->live[i] && m->at[i] < best)
			best = m->at[i];
	return best;
}

static size_t model_count(const struct model *m)
{
	size_t i, n = 0;

	for (i = 0; i < MODEL_IDS; i++)
		n += (size_t)m->live[i];
	return n;
}

/* Pops the earliest entry due at `now`: its id, or -1. */
static int model_pop(struct model *m, int64_t now)
{
	int best = -1;
	int i;

	for (i = 0; i < MODEL_IDS; i++) {
		if (!m->live[i] || m->at[i] > now)
			continue;
		if (best < 0 || m->at[i] < m->at[best] ||
		    (m->at[i] == m->at[best] && m->seq[i] < m->seq[best]))
			best = i;
	}
	if (best >= 0)
		m->live[best] = 0;
	return best;
}

static void run_model(unsigned slots, int64_t tick, int64_t start, int steps)
{
	static struct model m;
	struct rec r = {0};
	struct wheel *w = wheel_new(slots, tick, start);
	int64_t turn = (int64_t)slots * tick, at;
	int step;
	size_t i, k;

	assert_non_null(w);
	memset(&m, 0, sizeof(m));
	m.now = start;
	for (step = 0; step < steps; step++) {
		uint64_t id = rnd() % MODEL_IDS;
		unsigned op = (unsigned)(rnd() % 100);

		if (op < 45) { /* add or re-add, past to several turns on */
			at = m.now + rnd_range(-2 * tick, 6 * turn);
			assert_int_equal(wheel_add(w, id, at), SEMQ_OK);
			m.live[id] = 1;
			m.at[id] = at;
			m.seq[id] = m.next_seq++;
		} else if (op < 65) { /* cancel, present or not */
			assert_int_equal(wheel_cancel(w, id),
					 m.live[id] ? SEMQ_OK
						    : SEMQ_ERR_NOT_FOUND);
			m.live[id] = 0;
		} else { /* advance: mostly short, some back, some long */
			int64_t now = m.now;

			if (op < 85)
				now += rnd_range(0, turn / 2);
			else if (op < 90)
				now += 0;
			else if (op < 95)
				now -= rnd_range(1, turn);
			else
				now += rnd_range(turn, 8 * turn);
			r.n = 0;
			k = wheel_advance(w, now, rec_fn, &r);
			assert_int_equal(k, r.n);
			if (now >= m.now) {
				for (i = 0; i < r.n; i++) {
					int want = model_pop(&m, now);

					assert_int_equal(r.v[i].id, want);
					assert_true(r.v[i].at == m.at[want]);
				}
				assert_int_equal(model_pop(&m, now), -1);
				m.now = now;
			} else {
				assert_int_equal(r.n, 0);
			}
		}
		assert_int_equal(wheel_count(w), model_count(&m));
		assert_true(wheel_next(w) == model_next(&m));
		assert_int_equal(wheel_contains(w, id, &at), m.live[id]);
		if (m.live[id])
			assert_true(at == m.at[id]);
	}
	wheel_free(w);
	rec_free(&r);
}

static void test_model_random(void **state)
{
	run_model(8, 7, 0, 40000);
	run_model(1, 5, 12345, 20000); /* one bucket: everything rounds */
	run_model(64, 1, -5000, 20000);
	run_model(13, 100, INT64_C(1700000000000), 20000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_bad_args),
		cmocka_unit_test(test_order_random),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_readd_moves),
		cmocka_unit_test(test_past_fires_next_advance),
		cmocka_unit_test(test_advance_backwards),
		cmocka_unit_test(test_negative_times),
		cmocka_unit_test(test_rounds_wraparound),
		cmocka_unit_test(test_big_jump),
		cmocka_unit_test(test_callback_reschedule_cancel),
		cmocka_unit_test(test_100k_in_order),
		cmocka_unit_test(test_memory_returns),
		cmocka_unit_test(test_memory_per_entry),
		cmocka_unit_test(test_next),
		cmocka_unit_test(test_model_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
