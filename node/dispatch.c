/* SPDX-License-Identifier: MIT */
/*
 * The store workers' queue: jobs in FIFO order, and the keys (streams) the
 * workers hold or found slow, in a chained hash (see dispatch.h).
 */
#include "dispatch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 1024
#define SLOW_MAX 1024 /* keys marked slow at most; the oldest mark goes */

struct entry {
	struct entry *next;
	char key[SEMQ_ID_MAX + 1];
	int holder;       /* the worker holding it, -1: none */
	int slow;         /* its last job ran longer than the slice */
	uint64_t slow_at; /* d->ticks when marked: the oldest goes first */
	uint64_t blocked; /* d->scan in which a take skipped it */
};

struct dispatch {
	struct job *head, *tail;
	size_t queued;
	struct entry *b[BUCKETS];
	size_t n_slow;
	uint64_t ticks, scan;
};

static size_t bucket(const char *key)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (; *key; key++) {
		h ^= (unsigned char)*key;
		h *= 1099511628211ULL;
	}
	return (size_t)(h % BUCKETS);
}

static struct entry *find(const struct dispatch *d, const char *key)
{
	struct entry *e;

	for (e = d->b[bucket(key)]; e; e = e->next)
		if (strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

/* NULL on ENOMEM (the job then stays queued for a later take). */
static struct entry *get(struct dispatch *d, const char *key)
{
	struct entry *e = find(d, key);
	size_t i;

	if (e)
		return e;
	e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	snprintf(e->key, sizeof e->key, "%s", key);
	e->holder = -1;
	i = bucket(key);
	e->next = d->b[i];
	d->b[i] = e;
	return e;
}

/* Frees e when nobody holds it and it is not slow. */
static void tidy(struct dispatch *d, struct entry *e)
{
	struct entry **pp;

	if (e->holder >= 0 || e->slow)
		return;
	for (pp = &d->b[bucket(e->key)]; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			free(e);
			return;
		}
}

struct dispatch *dispatch_new(void)
{
	return calloc(1, sizeof(struct dispatch));
}

void dispatch_free(struct dispatch *d)
{
	size_t i;

	if (!d)
		return;
	while (d->head) {
		struct job *j = d->head;
		d->head = j->next;
		job_free(j);
	}
	for (i = 0; i < BUCKETS; i++)
		while (d->b[i]) {
			struct entry *e = d->b[i];
			d->b[i] = e->next;
			free(e);
		}
	free(d);
}

void dispatch_push(struct dispatch *d, struct job *j)
{
	j->next = NULL;
	if (d->tail)
		d->tail->next = j;
	else
		d->head = j;
	d->tail = j;
	d->queued++;
}

void dispatch_unshift(struct dispatch *d, struct job *jobs)
{
	struct job *last;
	size_t n = 1;

	if (!jobs)
		return;
	for (last = jobs; last->next; last = last->next)
		n++;
	last->next = d->head;
	d->head = jobs;
	if (!d->tail)
		d->tail = last;
	d->queued += n;
}

struct job *dispatch_take(struct dispatch *d, unsigned who, size_t max,
			  size_t *n)
{
	struct job *out = NULL, **outp = &out, **pp = &d->head, *prev = NULL;
	size_t taken = 0;

	d->scan++;
	while (*pp && taken < max) {
		struct job *j = *pp;
		struct entry *e = find(d, j->key);
		int alone = 0;

		if (e && (e->blocked == d->scan ||
			  (e->holder >= 0 && e->holder != (int)who) ||
			  (e->slow && taken > 0))) {
			/* another worker's, or slow behind others: skip it and
			 * every later job of its key */
			e->blocked = d->scan;
			prev = j;
			pp = &j->next;
			continue;
		}
		e = get(d, j->key);
		if (!e)
			break;
		e->holder = (int)who;
		alone = e->slow;
		*pp = j->next;
		if (d->tail == j)
			d->tail = prev;
		d->queued--;
		j->next = NULL;
		*outp = j;
		outp = &j->next;
		taken++;
		if (alone)
			break;
	}
	*n = taken;
	return out;
}

size_t dispatch_release(struct dispatch *d, unsigned who,
			int (*keep)(void *ctx, const char *key), void *ctx)
{
	size_t i, n = 0;

	for (i = 0; i < BUCKETS; i++) {
		struct entry *e = d->b[i], *next;

		for (; e; e = next) {
			next = e->next;
			if (e->holder != (int)who ||
			    (keep && keep(ctx, e->key)))
				continue;
			e->holder = -1;
			n++;
			tidy(d, e);
		}
	}
	return n;
}

void dispatch_mark_slow(struct dispatch *d, const char *key, int slow)
{
	struct entry *e = slow ? get(d, key) : find(d, key);
	size_t i;

	if (!e || e->slow == slow)
		return;
	e->slow = slow;
	e->slow_at = ++d->ticks;
	if (!slow) {
		d->n_slow--;
		tidy(d, e);
		return;
	}
	if (++d->n_slow <= SLOW_MAX)
		return;
	/* Too many: the oldest mark goes (a rare scan). */
	{
		struct entry *old = NULL;

		for (i = 0; i < BUCKETS; i++)
			for (e = d->b[i]; e; e = e->next)
				if (e->slow &&
				    (!old || e->slow_at < old->slow_at))
					old = e;
		if (old)
			dispatch_mark_slow(d, old->key, 0);
	}
}

int dispatch_holder(const struct dispatch *d, const char *key)
{
	const struct entry *e = find(d, key);

	return e ? e->holder : -1;
}

size_t dispatch_queued(const struct dispatch *d)
{
	return d->queued;
}

size_t dispatch_slow_keys(const struct dispatch *d)
{
	return d->n_slow;
}
