/* SPDX-License-Identifier: MIT */
/*
 * The store workers' queue (worker.c): received messages to apply and redo
 * entries to run, each job under the key of its stream (its origin: the
 * destination is this node). Seed 003's dynamic routing queue: a worker takes
 * only jobs whose key no other worker holds, registers the keys it took, and
 * releases them after its commit — so a stream is applied by one worker at a
 * time, in queue order, and a slow one holds only itself.
 *
 * DESIGN
 *  - One FIFO of jobs. dispatch_take() walks it in order and takes a job when
 *    its key is free or already held by the taker; a job whose key another
 *    worker holds is skipped, and so is every later job of that key (its
 *    order stays), while the jobs of other keys behind it are taken: no
 *    global stall, no false conflict between streams.
 *  - A key marked slow (one of its jobs ran longer than a worker's slice) is
 *    taken only alone, as the first and only job of a batch: an innocent
 *    stream never shares a transaction — and so never waits for its
 *    acknowledgement — with a slow plugin call. The mark is dropped when a
 *    job of the key runs within the slice; at most SLOW_MAX keys are marked.
 *  - Jobs taken but not run (a batch cut at its slice) go back to the head
 *    in their order with dispatch_unshift(); their keys stay held until the
 *    taker releases them after its commit, so nobody overtakes them.
 *  - Pure data structure: no threads, no clock; the caller (worker.c) holds
 *    its mutex around every call.
 */
#ifndef SEMQ_DISPATCH_H
#define SEMQ_DISPATCH_H

#include <stddef.h>

#include "job.h"

struct dispatch;

struct dispatch *dispatch_new(void);    /* NULL on ENOMEM */
void dispatch_free(struct dispatch *d); /* frees queued jobs; NULL ok */

/* Appends j (ownership transferred); j->key names its stream. */
void dispatch_push(struct dispatch *d, struct job *j);
/* Puts the list `jobs` (taken by a worker, not run) back at the head, in
 * its order. */
void dispatch_unshift(struct dispatch *d, struct job *jobs);
/* Takes, in queue order, at most max jobs that worker `who` may run now
 * (see DESIGN) and holds their keys for it. Returns the list; *n its
 * length. */
struct job *dispatch_take(struct dispatch *d, unsigned who, size_t max,
			  size_t *n);
/* Worker `who` committed: releases every key it holds, except those for
 * which keep(ctx, key) says 1 (it still holds messages of that stream in
 * memory). Returns how many it released. */
size_t dispatch_release(struct dispatch *d, unsigned who,
			int (*keep)(void *ctx, const char *key), void *ctx);
/* A job of `key` ran longer than the slice (slow = 1), or within it (0). */
void dispatch_mark_slow(struct dispatch *d, const char *key, int slow);
/* The worker holding key, or -1. */
int dispatch_holder(const struct dispatch *d, const char *key);
/* Jobs queued; keys marked slow. */
size_t dispatch_queued(const struct dispatch *d);
size_t dispatch_slow_keys(const struct dispatch *d);

#endif
