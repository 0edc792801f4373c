/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/dispatch.c, the store workers' queue, through
 * dispatch.h only. Checked: a worker takes the jobs of free keys in queue
 * order and holds their keys; another worker skips a held key and every
 * later job of it but takes the other keys behind it; release frees the
 * keys (except those the worker keeps); jobs put back go first, in order;
 * a slow key is taken only alone and first; a random run of takes, puts
 * back and releases by three workers never runs two jobs of a key at once
 * and runs each key's jobs in queue order.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"

static struct job *mk(const char *key, int64_t n)
{
	struct job *j = job_new(JOB_REDO);

	assert_non_null(j);
	snprintf(j->key, sizeof j->key, "%s", key);
	j->redo_id = n; /* the job's number in its key */
	return j;
}

static size_t len(const struct job *j)
{
	size_t n = 0;

	for (; j; j = j->next)
		n++;
	return n;
}

static void free_list(struct job *j)
{
	while (j) {
		struct job *x = j->next;
		job_free(j);
		j = x;
	}
}

static void takes_free_keys_in_order(void **state)
{
	struct dispatch *d = dispatch_new();
	struct job *a, *b;
	size_t n;

	(void)state;
	dispatch_push(d, mk("R1", 1));
	dispatch_push(d, mk("R2", 1));
	dispatch_push(d, mk("R1", 2));
	dispatch_push(d, mk("R3", 1));
	a = dispatch_take(d, 1, 2, &n);
	assert_int_equal(n, 2);
	assert_string_equal(a->key, "R1");
	assert_string_equal(a->next->key, "R2");
	assert_int_equal(dispatch_holder(d, "R1"), 1);
	assert_int_equal(dispatch_holder(d, "R2"), 1);
	/* worker 2: R1 is held by 1, so R1#2 is skipped, R3 taken */
	b = dispatch_take(d, 2, 10, &n);
	assert_int_equal(n, 1);
	assert_string_equal(b->key, "R3");
	assert_int_equal(dispatch_queued(d), 1);
	/* worker 1 may take R1#2: it holds R1 */
	free_list(dispatch_take(d, 1, 10, &n));
	assert_int_equal(n, 1);
	assert_int_equal(dispatch_release(d, 1, NULL, NULL), 2);
	assert_int_equal(dispatch_holder(d, "R1"), -1);
	assert_int_equal(dispatch_holder(d, "R3"), 2);
	free_list(a);
	free_list(b);
	dispatch_free(d);
}

static int keep_r1(void *ctx, const char *key)
{
	(void)ctx;
	return strcmp(key, "R1") == 0;
}

static void held_key_blocks_later_jobs_only(void **state)
{
	struct dispatch *d = dispatch_new();
	struct job *a, *b;
	size_t n;

	(void)state;
	dispatch_push(d, mk("R1", 1));
	a = dispatch_take(d, 1, 10, &n);
	dispatch_push(d, mk("R1", 2));
	dispatch_push(d, mk("R2", 1));
	dispatch_push(d, mk("R1", 3));
	dispatch_push(d, mk("R2", 2));
	b = dispatch_take(d, 2, 10, &n);
	assert_int_equal(n, 2);
	assert_string_equal(b->key, "R2");
	assert_int_equal(b->redo_id, 1);
	assert_int_equal(b->next->redo_id, 2);
	/* worker 1 keeps R1 (it holds a message of it) */
	assert_int_equal(dispatch_release(d, 1, keep_r1, NULL), 0);
	free_list(dispatch_take(d, 2, 10, &n));
	assert_int_equal(n, 0);
	assert_int_equal(dispatch_release(d, 1, NULL, NULL), 1);
	a->next = dispatch_take(d, 2, 10, &n); /* R1 is free now */
	assert_int_equal(n, 2);
	assert_int_equal(dispatch_holder(d, "R1"), 2);
	assert_int_equal(a->next->redo_id, 2);
	assert_int_equal(a->next->next->redo_id, 3);
	free_list(a);
	free_list(b);
	dispatch_free(d);
}

static void put_back_goes_first(void **state)
{
	struct dispatch *d = dispatch_new();
	struct job *a;
	size_t n;

	(void)state;
	dispatch_push(d, mk("R1", 1));
	dispatch_push(d, mk("R1", 2));
	dispatch_push(d, mk("R2", 1));
	a = dispatch_take(d, 1, 2, &n);
	dispatch_push(d, mk("R1", 3));
	/* R1#2 not run: back at the head, R1 still held by worker 1 */
	dispatch_unshift(d, a->next);
	a->next = NULL;
	free_list(dispatch_take(d, 2, 10, &n));
	assert_int_equal(n, 1); /* R2 only */
	dispatch_release(d, 1, NULL, NULL);
	dispatch_release(d, 2, NULL, NULL);
	free_list(a);
	a = dispatch_take(d, 2, 10, &n);
	assert_int_equal(n, 2);
	assert_int_equal(a->redo_id, 2);
	assert_int_equal(a->next->redo_id, 3);
	free_list(a);
	assert_int_equal(dispatch_queued(d), 0);
	dispatch_free(d);
}

static void slow_key_alone_and_first(void **state)
{
	struct dispatch *d = dispatch_new();
	struct job *a;
	size_t n;

	(void)state;
	dispatch_mark_slow(d, "R9", 1);
	assert_int_equal(dispatch_slow_keys(d), 1);
	dispatch_push(d, mk("R1", 1));
	dispatch_push(d, mk("R9", 1));
	dispatch_push(d, mk("R9", 2));
	dispatch_push(d, mk("R2", 1));
	a = dispatch_take(d, 1, 10, &n); /* not behind R1 in one batch */
	assert_int_equal(n, 2);
	assert_string_equal(a->key, "R1");
	assert_string_equal(a->next->key, "R2");
	free_list(a);
	a = dispatch_take(d, 2, 10, &n); /* first: alone */
	assert_int_equal(n, 1);
	assert_string_equal(a->key, "R9");
	assert_int_equal(a->redo_id, 1);
	free_list(a);
	dispatch_mark_slow(d, "R9", 0);
	assert_int_equal(dispatch_slow_keys(d), 0);
	dispatch_release(d, 1, NULL, NULL);
	dispatch_release(d, 2, NULL, NULL);
	a = dispatch_take(d, 1, 10, &n);
	assert_int_equal(n, 1);
	assert_int_equal(a->redo_id, 2);
	free_list(a);
	dispatch_free(d);
}

/* Three workers, random takes, put-backs and releases: never two holders
 * of a key's jobs at once, each key's jobs run in order. */
static void random_run_keeps_order(void **state)
{
	enum { KEYS = 7, JOBS = 3000, W = 3 };
	struct dispatch *d = dispatch_new();
	struct job *held[W + 1] = {0};
	int64_t next_run[KEYS] = {0}, pushed[KEYS] = {0};
	uint64_t rng = 12345;
	size_t total = 0, done = 0, n, i;

	(void)state;
	while (done < JOBS) {
		unsigned w;

		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		if (total < JOBS && (rng >> 61) < 4) {
			unsigned k = (unsigned)(rng >> 33) % KEYS;
			char key[8];

			snprintf(key, sizeof key, "K%u", k);
			dispatch_push(d, mk(key, ++pushed[k]));
			total++;
			continue;
		}
		w = 1 + (unsigned)((rng >> 40) % W);
		if (!held[w]) {
			held[w] = dispatch_take(d, w, 1 + (rng >> 50) % 4, &n);
			assert_int_equal(len(held[w]), n);
			if (!n)
				dispatch_release(d, w, NULL, NULL);
			continue;
		}
		/* runs its first job; sometimes puts the rest back */
		{
			struct job *j = held[w];
			unsigned k = (unsigned)atoi(j->key + 1);

			for (i = 1; i <= W; i++)
				for (struct job *x = i != w ? held[i] : NULL; x;
				     x = x->next)
					assert_string_not_equal(x->key, j->key);
			assert_int_equal(j->redo_id, next_run[k] + 1);
			next_run[k] = j->redo_id;
			held[w] = j->next;
			job_free(j);
			done++;
			if (held[w] && (rng >> 58) == 0) {
				dispatch_unshift(d, held[w]);
				held[w] = NULL;
			}
			if (!held[w])
				dispatch_release(d, w, NULL, NULL);
		}
	}
	for (i = 0; i < KEYS; i++)
		assert_int_equal(next_run[i], pushed[i]);
	for (i = 1; i <= W; i++)
		free_list(held[i]);
	dispatch_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(takes_free_keys_in_order),
		cmocka_unit_test(held_key_blocks_later_jobs_only),
		cmocka_unit_test(put_back_goes_first),
		cmocka_unit_test(slow_key_alone_and_first),
		cmocka_unit_test(random_run_keeps_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
