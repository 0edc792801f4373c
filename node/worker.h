/* SPDX-License-Identifier: MIT */
/*
 * The store thread. It owns the store (the `sqlite3 *`) and the plugins, and
 * runs the loop: take every waiting job, BEGIN, proto_job() each, proto_tick(),
 * COMMIT, then hand the outbox to the network thread. One commit covers all
 * the work that was waiting (group commit); when idle it sleeps until a job
 * arrives or poll_interval passes — there is no fixed batching delay.
 *
 * DESIGN
 *  - Nothing from the outbox leaves before store_commit() returned SEMQ_OK.
 *  - A failed batch is rolled back and its outbox dropped; the jobs are lost
 *    on purpose (peers resend and query), the node keeps serving.
 *  - Outputs reach the network thread through worker_output_fn, called on the
 *    store thread (or a store worker); the network thread's implementation
 *    queues them and wakes its loop (event_active), never touching a
 *    connection from here.
 *  - [node] workers >= 2: store workers apply the Data for this node and
 *    run redo entries, one stream per worker at a time (dispatch.h); the
 *    store thread does everything else. Each has its own store connection.
 */
#ifndef SEMQ_WORKER_H
#define SEMQ_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "job.h"

struct worker;

/* Called on the store thread with a list of outputs (ownership transferred). */
typedef void (*worker_output_fn)(void *ctx, struct out *list);

/* Injected time: unix ms. NULL = the real clock. */
typedef int64_t (*clock_fn)(void *ctx);
int64_t clock_real_ms(void *ctx);

/*
 * Opens the store and loads the plugins (on the calling thread, so start-up
 * errors are reported before anything runs); `c` is borrowed for the life of
 * the worker. On failure err names the cause and *out is NULL.
 */
int worker_new(const struct config *c, worker_output_fn out, void *out_ctx,
	       clock_fn clock, void *clock_ctx, struct worker **wout, char *err,
	       size_t errsz);
/* Starts the thread. */
int worker_start(struct worker *w);
/* Queues a job (ownership transferred); thread-safe. */
void worker_submit(struct worker *w, struct job *j);
/* Finishes the open batch, stops the thread and joins it. Idempotent. */
void worker_stop(struct worker *w);
/* Stops if needed, then closes plugins and the store. NULL ok. */
void worker_free(struct worker *w);

/* The life of the node's database (store_life): set when the worker was
 * made, read-only after; any thread. */
uint64_t worker_life(const struct worker *w);

/* Is the worker in the disk-full state (worker.c)? A batch failed for lack
 * of space and no retry has committed since: the network thread refuses
 * Data meanwhile, /health reports it. Any thread. */
int worker_disk_full(struct worker *w);

/*
 * [node] memory_budget: bytes held by queued jobs (job.bytes) and by the
 * messages proto holds for a missing predecessor. worker_submit() counts a
 * job in, per connection; it is counted out when its batch is done. Over
 * the budget, worker_heavy() says whether connection conn holds more than
 * its share (half the budget over the connections that hold any) — the one
 * to stop reading from; the others go on. Once the queue is below half the
 * budget again the worker calls relief(ctx) (from the store thread), once
 * per time it went over.
 */
int worker_heavy(struct worker *w, uint64_t conn);
void worker_set_relief(struct worker *w, void (*relief)(void *ctx), void *ctx);
/* The bytes counted now, and whether over the budget (any thread). */
size_t worker_queued_bytes(struct worker *w, int *over);
/* Is the store thread in a plugin call longer than its deadline ([plugin]
 * deadline, else [node] plugin_timeout)? Then 1 — the node waits for it —
 * and `what` says which (any thread). */
int worker_stuck(struct worker *w, char *what, size_t whatsz);
/*
 * Does the store thread make progress (for the systemd watchdog)? 1 when it
 * turned its loop (a batch done, or an idle wait of at most poll_interval
 * ended) within `within_ms`, or when it is in a plugin call not past the
 * call's deadline; 0 when it is silent longer than that: stuck in a plugin
 * call past its deadline (what /health calls "plugin stuck") or in the
 * database. *age_ms (may be NULL): ms since its last turn. Any thread.
 */
int worker_alive(struct worker *w, int64_t within_ms, int64_t *age_ms);
/* Is a store worker in such a call? Then 1 — its stream waits, the rest go
 * on — and `what` names the calls and their streams (any thread). */
int worker_degraded(struct worker *w, char *what, size_t whatsz);
/* The created_at (unix ms) of this node's oldest unconfirmed outbound
 * message (unsent, sent or in a relay's custody) as the store thread last
 * looked (every second), its destination in dest; 0 when there is none
 * (any thread). */
int64_t worker_backlog(struct worker *w, char *dest, size_t destsz);
/* Calls cb with each plugin's name (borrowed for the call) and its calls
 * by outcome (enum plughost_outcome), summed over the store workers (any
 * thread). */
typedef void (*worker_plugin_cb)(void *ctx, const char *plugin,
				 const uint64_t *outcome);
void worker_plugin_outcomes(struct worker *w, worker_plugin_cb cb, void *ctx);
/* Store workers applying received messages (1: the store thread itself). */
size_t worker_workers(const struct worker *w);

/* A histogram for metrics: n buckets with ascending upper bounds, the last
 * one unbounded (+Inf, its bound unused); count[i] is what fell in bucket i
 * alone (not cumulative); sum and total of every observation. */
#define WORKER_HIST_MAX 16
struct worker_hist {
	size_t n;
	uint64_t bound[WORKER_HIST_MAX];
	uint64_t count[WORKER_HIST_MAX];
	uint64_t sum, total;
};

/*
 * Counters for logs and metrics (read from any thread). They are updated once
 * per batch under the worker's lock, so a snapshot is consistent: all of it
 * describes the same committed batches. received .. redo_created are what
 * committed batches did (see struct proto_counts). The histograms observe
 * every batch that carried a job or a message.
 */
struct worker_stats {
	uint64_t batches, jobs, commit_us_total;
	uint64_t received, duplicates, sent, confirmed;
	uint64_t redo_created;
	uint64_t refused, resyncs, renumbered, held; /* lives, proto.h */
	uint64_t relay_refused[8];     /* custody refused, by RELAY_REFUSAL_* */
	uint64_t undeliverable;        /* own messages put dead: unknown dest */
	uint64_t looped;               /* frames not passed on past max_hops */
	uint64_t traces_refused;       /* traces answered "busy" (trace.h) */
	struct worker_hist batch_jobs; /* jobs per batch */
	struct worker_hist batch_messages; /* received + duplicates + sent */
	struct worker_hist commit_us;      /* BEGIN to last COMMIT, in µs */
	uint64_t plugin_overdue; /* plugin calls past their deadline */
	uint64_t apply_queued;   /* jobs waiting for a store worker (gauge) */
	uint64_t slow_streams;   /* streams taken alone: slow (gauge) */
	uint64_t relay_forwarded, relay_stored; /* proto_counts */
	struct worker_hist latency_ms; /* created_at at the origin to receipt */
	/* Space probes while the disk is full (DISK_FULL_RETRY_MS apart):
	 * [0] failed (still full), [1] committed (the state ended). */
	uint64_t disk_probes[2];
};
void worker_get_stats(struct worker *w, struct worker_stats *s);

#endif
