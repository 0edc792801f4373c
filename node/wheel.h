/* SPDX-License-Identifier: MIT */
/*
 * A hashed timing wheel for the near horizon of the durable schedule.
 *
 * The durable truth of every deadline is a next_attempt_at column with an
 * index (tb_0033 for redo entries and delayed messages). The wheel holds only
 * the entries due within the next horizon (for example 60 s), refilled by an
 * indexed scan; memory therefore grows with what is due soon, never with the
 * backlog, and a restart loses nothing: the scan rebuilds it.
 *
 * `slots` buckets of `tick_ms` each; an entry further away than one turn
 * carries a count of rounds. Add, cancel and re-add are O(1) (an id index);
 * advancing costs one bucket per elapsed tick plus the entries that fire.
 * Time is passed in (unix ms); the wheel never reads a clock.
 */
#ifndef SEMQ_WHEEL_H
#define SEMQ_WHEEL_H

#include <stddef.h>
#include <stdint.h>

struct wheel;

/* A wheel starting at `now`. NULL on ENOMEM or bad sizes (slots 0 or
 * over 2^24, tick_ms <= 0). Caller frees with wheel_free(). */
struct wheel *wheel_new(unsigned slots, int64_t tick_ms, int64_t now);
void wheel_free(struct wheel *w); /* NULL ok */

/*
 * Schedules `id` at `at` (unix ms). An id already in the wheel is moved to
 * the new time. A time at or before the wheel's current time fires on the
 * next wheel_advance(). SEMQ_OK or SEMQ_ERR_NOMEM.
 */
int wheel_add(struct wheel *w, uint64_t id, int64_t at);

/* Removes `id`. SEMQ_OK, or SEMQ_ERR_NOT_FOUND when it is not there. */
int wheel_cancel(struct wheel *w, uint64_t id);

/* Is `id` scheduled? *at_out (may be NULL) gets its time. */
int wheel_contains(const struct wheel *w, uint64_t id, int64_t *at_out);

/*
 * Called for each entry that fires; the entry is already removed, so the
 * callback may add (re-schedule) or cancel anything, this id included. It
 * must not call wheel_advance() or wheel_free() on this wheel.
 */
typedef void (*wheel_fire_fn)(void *ctx, uint64_t id, int64_t at);

/*
 * Moves the wheel to `now` and fires every entry due at or before it, in
 * order of their times (ties in order of insertion). Returns how many fired.
 * A `now` earlier than the wheel's time fires nothing. An entry added or
 * re-added by the callback fires at the next advance at the earliest. ctx is
 * borrowed, passed to fn as is.
 */
size_t wheel_advance(struct wheel *w, int64_t now, wheel_fire_fn fn, void *ctx);

/* The earliest scheduled time, or INT64_MAX when empty. */
int64_t wheel_next(const struct wheel *w);

/* Entries scheduled now. */
size_t wheel_count(const struct wheel *w);

/* Bytes the wheel holds (buckets, entries, index), for tests and metrics. */
size_t wheel_memory(const struct wheel *w);

#endif
