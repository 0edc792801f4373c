/* SPDX-License-Identifier: MIT */
/*
 * The hashed timing wheel of wheel.h: the in-memory near horizon of the
 * durable schedule (SPEC §7). The store's indexed scan of next_attempt_at
 * feeds it the deadlines due soon; the store thread (proto.c) asks
 * wheel_next() how long it may sleep and wheel_advance() what is due. It
 * never reads a clock: every time comes in as an argument, so tests drive a
 * fake one.
 *
 * DESIGN: time is cut into ticks of tick_ms; tick(t) = floor(t / tick_ms),
 * absolute (not relative to the start), so any int64 time works. Tick T lives
 * in bucket T mod slots. Each entry is malloc'ed on its own (freeing it
 * returns its memory at once), sits on an intrusive doubly linked list (a
 * bucket, or the due list while an advance fires it) and on a chain of the id
 * index (a power-of-two table of chains, grown at load 1, shrunk below 1/8).
 * Rounds are kept implicit: an entry stores the absolute tick of its bucket,
 * so its rounds are (tick - cur_tick) / slots and a jump of any length needs
 * no per-entry decrement. Invariants, outside wheel_advance():
 *  - cur_tick == tick(now), now being the wheel's time;
 *  - every entry has tick >= cur_tick and is in bucket tick mod slots; an
 *    entry added at or before the wheel's time gets tick = cur_tick (it fires
 *    on the next advance) but keeps and reports the `at` it was given;
 *  - an entry is due exactly when at <= now of the advance;
 *  - seq (a counter bumped by every add and re-add) orders ties and is
 *    unique, so (at, seq) is a total order;
 *  - next_ok means next_at is the minimum `at` of all entries.
 * wheel_advance(now) moves the wheel to now first, then walks the buckets of
 * the ticks it crossed. A walk shorter than one turn goes tick by tick: each
 * bucket's due entries move to the due list, are merge-sorted by (at, seq)
 * and fired; buckets of distinct ticks in one turn are distinct, so this is
 * global time order. A walk of a turn or more (a suspend, a first advance
 * far ahead) visits every bucket once, moves all due entries to the due list
 * and sorts them together: O(slots + entries), whatever the jump. Firing
 * removes the entry before the callback, so the callback may cancel or
 * re-add anything; an entry added or re-added during an advance (its seq is
 * past the advance's snapshot) is never fired by that advance, which keeps
 * a callback that re-schedules itself from looping. Nothing in an advance
 * allocates, so it cannot fail.
 *
 * Costs: add, cancel, contains O(1) expected; advance O(min(ticks crossed,
 * slots) + due * log due); wheel_next O(1) when cached (it is after every
 * advance and after adds), else a scan of the buckets in tick order until
 * the first that holds an entry of the current turn: O(slots + entries seen),
 * O(slots + entries) when every entry is a turn or more away.
 */
#include "wheel.h"

#include <inttypes.h>
#include <stdlib.h>

#include <semq/error.h>

#include "log.h"

#define WHEEL_MAX_SLOTS (1u << 24) /* 256 MiB of buckets: surely a typo */
#define INDEX_MIN 16               /* chains in an empty index */

/* A link of an intrusive circular list; a list is a sentinel link. */
struct wlink {
	struct wlink *next, *prev;
};

struct entry {
	struct wlink link;   /* in its bucket, or on the due list */
	struct entry *hnext; /* next in its index chain */
	uint64_t id;
	int64_t at;   /* the time asked for, reported as given */
	int64_t tick; /* absolute tick of its bucket (>= cur_tick) */
	uint64_t seq; /* insertion order */
};

struct wheel {
	struct wlink *buckets; /* slots sentinels; owned */
	unsigned slots;
	int64_t tick_ms;
	int64_t now;      /* the wheel's time (unix ms) */
	int64_t cur_tick; /* tick(now) */

	struct entry **index; /* index_cap chains; owned, as are the entries */
	size_t index_cap;     /* a power of two >= INDEX_MIN */
	size_t count;
	uint64_t seq; /* the next entry's seq */

	struct wlink due; /* entries an advance is about to fire, sorted */
	int64_t next_at;  /* minimum `at` when next_ok */
	int next_ok;
	int advancing; /* inside wheel_advance() */
};

#define LINK_ENTRY(l)                                                          \
	((struct entry *)(void *)((char *)(l)-offsetof(struct entry, link)))

static void list_init(struct wlink *head)
{
	head->next = head;
	head->prev = head;
}

static void list_add_tail(struct wlink *head, struct wlink *l)
{
	l->prev = head->prev;
	l->next = head;
	head->prev->next = l;
	head->prev = l;
}

static void list_del(struct wlink *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->next = l;
	l->prev = l;
}

/* floor(a / b) for b > 0. */
static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	if (a % b < 0)
		q--;
	return q;
}

static struct wlink *bucket_of(const struct wheel *w, int64_t tick)
{
	int64_t m = tick % (int64_t)w->slots;

	if (m < 0)
		m += (int64_t)w->slots;
	return &w->buckets[m];
}

/* splitmix64's finaliser: ids are often sequential, chains must not be. */
static size_t hash_id(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	x ^= x >> 31;
	return (size_t)x;
}

static struct entry **index_chain(const struct wheel *w, uint64_t id)
{
	return &w->index[hash_id(id) & (w->index_cap - 1)];
}

static struct entry *index_find(const struct wheel *w, uint64_t id)
{
	struct entry *e;

	for (e = *index_chain(w, id); e; e = e->hnext)
		if (e->id == id)
			return e;
	return NULL;
}

/* Rehashes into `cap` chains. On ENOMEM the old table stays: chains are
 * only longer than they should be, nothing is lost. */
static void index_resize(struct wheel *w, size_t cap)
{
	struct entry **old = w->index, **nt, *e, *next;
	size_t oldcap = w->index_cap, i;

	nt = calloc(cap, sizeof(*nt));
	if (!nt)
		return;
	w->index = nt;
	w->index_cap = cap;
	for (i = 0; i < oldcap; i++) {
		for (e = old[i]; e; e = next) {
			struct entry **chain = index_chain(w, e->id);

			next = e->hnext;
			e->hnext = *chain;
			*chain = e;
		}
	}
	free(old);
}

static void index_insert(struct wheel *w, struct entry *e)
{
	struct entry **chain = index_chain(w, e->id);

	e->hnext = *chain;
	*chain = e;
	if (w->count + 1 > w->index_cap &&
	    w->index_cap <= SIZE_MAX / 2 / sizeof(*w->index))
		index_resize(w, w->index_cap * 2);
}

/* Unchains e; call with w->count already lowered. */
static void index_remove(struct wheel *w, struct entry *e)
{
	struct entry **pp = index_chain(w, e->id);
	size_t cap = w->index_cap;

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	e->hnext = NULL;
	while (cap > INDEX_MIN && w->count < cap / 8)
		cap /= 2;
	if (cap != w->index_cap)
		index_resize(w, cap);
}

/* Puts e (off every list) at `at` with a fresh seq. */
static void place(struct wheel *w, struct entry *e, int64_t at)
{
	int64_t tick = floor_div(at, w->tick_ms);

	if (tick < w->cur_tick)
		tick = w->cur_tick;
	e->at = at;
	e->tick = tick;
	e->seq = w->seq++;
	list_add_tail(bucket_of(w, tick), &e->link);
	if (w->count == 1) {
		w->next_at = at;
		w->next_ok = 1;
	} else if (w->next_ok && at < w->next_at) {
		w->next_at = at;
	}
}

/* e's time is going away: the cached minimum may have been it. */
static void forget_next(struct wheel *w, const struct entry *e)
{
	if (w->next_ok && e->at == w->next_at)
		w->next_ok = 0;
}

static void remove_entry(struct wheel *w, struct entry *e)
{
	forget_next(w, e);
	list_del(&e->link);
	w->count--;
	index_remove(w, e);
	free(e);
}

/* The minimum `at` over all entries, INT64_MAX when there are none. */
static int64_t scan_next(const struct wheel *w)
{
	int64_t best = INT64_MAX;
	const struct wlink *head, *l;
	size_t b0, i;
	int found;

	/* Outside an advance, ticks cur_tick + i for i < slots sit in distinct
	 * buckets and every entry has tick >= cur_tick: the first of them that
	 * holds an entry of its own tick holds the minimum. */
	if (!w->advancing) {
		b0 = (size_t)(bucket_of(w, w->cur_tick) - w->buckets);
		for (i = 0; i < w->slots; i++) {
			head = &w->buckets[(b0 + i) % w->slots];
			found = 0;
			for (l = head->next; l != head; l = l->next) {
				const struct entry *e = LINK_ENTRY(l);

				if ((uint64_t)e->tick - (uint64_t)w->cur_tick !=
				    i)
					continue;
				found = 1;
				if (e->at < best)
					best = e->at;
			}
			if (found)
				return best;
		}
	}
	/* Every entry is a turn or more away (or ticks behind cur_tick still
	 * wait to be fired): look at all of them. */
	for (i = 0; i < w->slots; i++) {
		head = &w->buckets[i];
		for (l = head->next; l != head; l = l->next)
			if (LINK_ENTRY(l)->at < best)
				best = LINK_ENTRY(l)->at;
	}
	for (l = w->due.next; l != &w->due; l = l->next)
		if (LINK_ENTRY(l)->at < best)
			best = LINK_ENTRY(l)->at;
	return best;
}

struct wheel *wheel_new(unsigned slots, int64_t tick_ms, int64_t now)
{
	struct wheel *w = NULL, *ret = NULL;
	unsigned i;

	if (slots == 0 || slots > WHEEL_MAX_SLOTS) {
		log_error("wheel", "wheel_new: slots %u is not in 1..%u", slots,
			  WHEEL_MAX_SLOTS);
		goto out;
	}
	if (tick_ms <= 0) {
		log_error("wheel",
			  "wheel_new: tick_ms %" PRId64 " is not positive",
			  tick_ms);
		goto out;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		goto out;
	list_init(&w->due);
	w->buckets = malloc(slots * sizeof(*w->buckets));
	if (!w->buckets)
		goto out;
	w->slots = slots;
	for (i = 0; i < slots; i++)
		list_init(&w->buckets[i]);
	w->index = calloc(INDEX_MIN, sizeof(*w->index));
	if (!w->index)
		goto out;
	w->index_cap = INDEX_MIN;
	w->tick_ms = tick_ms;
	w->now = now;
	w->cur_tick = floor_div(now, tick_ms);
	w->next_at = INT64_MAX;
	w->next_ok = 1;
	ret = w;
	w = NULL;
out:
	wheel_free(w);
	return ret;
}

static void free_list(struct wlink *head)
{
	while (head->next != head) {
		struct wlink *l = head->next;

		list_del(l);
		free(LINK_ENTRY(l));
	}
}

void wheel_free(struct wheel *w)
{
	unsigned i;

	if (!w)
		return;
	if (w->buckets)
		for (i = 0; i < w->slots; i++)
			free_list(&w->buckets[i]);
	free_list(&w->due);
	free(w->index);
	free(w->buckets);
	free(w);
}

int wheel_add(struct wheel *w, uint64_t id, int64_t at)
{
	int r = SEMQ_ERR_INTERNAL;
	struct entry *e;

	if (!w) {
		log_error("wheel", "wheel_add: the wheel is NULL");
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	e = index_find(w, id);
	if (e) {
		forget_next(w, e);
		list_del(&e->link);
	} else {
		e = malloc(sizeof(*e));
		if (!e) {
			r = SEMQ_ERR_NOMEM;
			goto out;
		}
		e->id = id;
		list_init(&e->link);
		index_insert(w, e);
		w->count++;
	}
	place(w, e, at);
	r = SEMQ_OK;
out:
	return r;
}

int wheel_cancel(struct wheel *w, uint64_t id)
{
	int r = SEMQ_ERR_INTERNAL;
	struct entry *e;

	if (!w) {
		log_error("wheel", "wheel_cancel: the wheel is NULL");
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	e = index_find(w, id);
	if (!e) {
		r = SEMQ_ERR_NOT_FOUND;
		goto out;
	}
	remove_entry(w, e);
	r = SEMQ_OK;
out:
	return r;
}

int wheel_contains(const struct wheel *w, uint64_t id, int64_t *at_out)
{
	const struct entry *e;

	if (!w)
		return 0;
	e = index_find(w, id);
	if (e && at_out)
		*at_out = e->at;
	return e != NULL;
}

static int before(const struct wlink *a, const struct wlink *b)
{
	const struct entry *x = LINK_ENTRY(a), *y = LINK_ENTRY(b);

	return x->at < y->at || (x->at == y->at && x->seq < y->seq);
}

/* Merges two NULL-terminated runs sorted by (at, seq). */
static struct wlink *merge(struct wlink *a, struct wlink *b)
{
	struct wlink head, *t = &head;

	while (a && b) {
		if (before(b, a)) {
			t->next = b;
			b = b->next;
		} else {
			t->next = a;
			a = a->next;
		}
		t = t->next;
	}
	t->next = a ? a : b;
	return head.next;
}

/* Sorts the due list by (at, seq): a bottom-up merge sort over its next
 * pointers (bins[i] holds a sorted run of 2^i links), then the prev
 * pointers are rebuilt. O(n log n), no allocation. */
static void sort_due(struct wheel *w)
{
	struct wlink *bins[64] = {NULL}, *list, *run, *prev;
	int i;

	if (w->due.next == &w->due || w->due.next->next == &w->due)
		return;
	list = w->due.next;
	w->due.prev->next = NULL;
	while (list) {
		run = list;
		list = list->next;
		run->next = NULL;
		for (i = 0; i < 63 && bins[i]; i++) {
			run = merge(bins[i], run);
			bins[i] = NULL;
		}
		bins[i] = bins[i] ? merge(bins[i], run) : run;
	}
	run = NULL;
	for (i = 0; i < 64; i++)
		if (bins[i])
			run = merge(bins[i], run);
	prev = &w->due;
	for (; run; run = run->next) {
		prev->next = run;
		run->prev = prev;
		prev = run;
	}
	prev->next = &w->due;
	w->due.prev = prev;
}

/* Moves the entries of `head` due at `now` and older than the advance
 * (seq < limit) to the due list. */
static void collect(struct wheel *w, struct wlink *head, int64_t now,
		    uint64_t limit)
{
	struct wlink *l, *next;

	for (l = head->next; l != head; l = next) {
		const struct entry *e = LINK_ENTRY(l);

		next = l->next;
		if (e->at <= now && e->seq < limit) {
			list_del(l);
			list_add_tail(&w->due, l);
		}
	}
}

/* Sorts and fires the due list. The callback may cancel entries still on
 * it (they are unlinked and never fire) or re-add them (they move to a
 * bucket with a seq past the snapshot). */
static size_t fire_due(struct wheel *w, wheel_fire_fn fn, void *ctx)
{
	size_t n = 0;

	sort_due(w);
	while (w->due.next != &w->due) {
		struct entry *e = LINK_ENTRY(w->due.next);
		uint64_t id = e->id;
		int64_t at = e->at;

		remove_entry(w, e);
		fn(ctx, id, at);
		n++;
	}
	return n;
}

size_t wheel_advance(struct wheel *w, int64_t now, wheel_fire_fn fn, void *ctx)
{
	size_t fired = 0;
	int64_t start, end;
	uint64_t span, limit, i;

	if (!w || !fn) {
		log_error("wheel", "wheel_advance: the %s is NULL",
			  !w ? "wheel" : "callback");
		goto out;
	}
	if (w->advancing) {
		log_error("wheel",
			  "wheel_advance: called from its own callback");
		goto out;
	}
	if (now < w->now)
		goto out;
	start = w->cur_tick;
	end = floor_div(now, w->tick_ms);
	span = (uint64_t)end - (uint64_t)start; /* exact: end >= start */
	limit = w->seq;
	/* Move first, so that adds from the callbacks land at tick >= end. */
	w->now = now;
	w->cur_tick = end;
	w->advancing = 1;
	if (span >= w->slots) {
		for (i = 0; i < w->slots; i++)
			collect(w, &w->buckets[i], now, limit);
		fired += fire_due(w, fn, ctx);
	} else {
		for (i = 0; i <= span; i++) {
			collect(w, bucket_of(w, start + (int64_t)i), now,
				limit);
			fired += fire_due(w, fn, ctx);
		}
	}
	w->advancing = 0;
	if (!w->next_ok) {
		w->next_at = w->count ? scan_next(w) : INT64_MAX;
		w->next_ok = 1;
	}
out:
	return fired;
}

int64_t wheel_next(const struct wheel *w)
{
	if (!w || w->count == 0)
		return INT64_MAX;
	if (w->next_ok)
		return w->next_at;
	return scan_next(w);
}

size_t wheel_count(const struct wheel *w)
{
	return w ? w->count : 0;
}

size_t wheel_memory(const struct wheel *w)
{
	if (!w)
		return 0;
	return sizeof(*w) + (size_t)w->slots * sizeof(*w->buckets) +
	       w->index_cap * sizeof(*w->index) +
	       w->count * sizeof(struct entry);
}
