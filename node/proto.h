/* SPDX-License-Identifier: MIT */
/*
 * The protocol of SPEC §6 on the store side: what each frame means for the
 * tables, and which frames answer it. Runs on the store thread, inside the
 * batch transaction the worker opened; it never touches a socket. Answers are
 * collected in an outbox that the worker hands to the network thread only
 * after the commit (and throws away on rollback), so an acknowledgement never
 * leaves before the commit that makes it true.
 *
 * DESIGN
 *  - Sender: proto_tick() fetches sendable rows for destinations that have a
 *    route, marks them sent (0 -> 4) and emits Data, at most `window`
 *    unconfirmed per stream. Rows in 4/6 past query_after are queried, never
 *    resent blindly; on PEER_UP every in-doubt row routed through that peer is
 *    queried at once.
 *  - Receiver: Data -> store_receive() per message -> one AckIndication per
 *    connection. A message whose predecessor is missing is held in memory
 *    (bounded) and offered again after later commits; dropping it is safe,
 *    the sender will query and resend.
 *  - 810-Response -> AS_OK; the watermark advances and compacts in the tick.
 *  - Time is a parameter; tests drive proto with a fake clock and no threads.
 */
#ifndef SEMQ_PROTO_H
#define SEMQ_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "job.h"
#include "plughost.h"
#include "store.h"

struct proto;

/* Frames to send after the commit, in order. */
struct outbox {
	struct out *head, *tail;
	size_t n;
};
void outbox_init(struct outbox *ob);
void outbox_clear(struct outbox *ob); /* frees everything queued */
void outbox_append(struct outbox *ob, struct outbox *from); /* moves all */
/* Encodes f for conn_id and queues it. SEMQ_ERR_NOMEM / SEMQ_ERR_TOO_BIG. */
int outbox_frame(struct outbox *ob, uint64_t conn_id, const Semq__Frame *f,
		 size_t max_frame);

/*
 * store, plugins and config are borrowed for the life of the proto (the
 * worker owns them). Returns NULL on ENOMEM.
 */
struct proto *proto_new(struct store *st, struct plughost *ph,
			const struct config *c);
void proto_free(struct proto *p); /* NULL ok */

/* Handles one job inside the open batch, queuing answers in ob. An error
 * (SEMQ_ERR_DB ...) means the batch must be rolled back. */
int proto_job(struct proto *p, const struct job *j, int64_t now,
	      struct outbox *ob);

/* Periodic work inside the open batch: send, query in-doubt rows, repeat
 * unanswered indications, advance watermarks, purge, run due redo entries,
 * retry held messages. */
int proto_tick(struct proto *p, int64_t now, struct outbox *ob);

/* Does the next tick have work right away (more to send, held messages)? */
int proto_busy(const struct proto *p);

/* The earliest redo or delayed-message deadline held in memory (unix ms), or
 * INT64_MAX: the worker sleeps no longer than until then. */
int64_t proto_next_due(const struct proto *p);

/* The batch committed / rolled back: keep or forget per-batch memory. */
void proto_committed(struct proto *p);
void proto_rolled_back(struct proto *p);

/* What a batch did, for metrics. Counted as it runs, forgotten when it rolls
 * back; after its commit proto_take_counts() adds them to *c and starts
 * counting from zero again. */
#define PROTO_LATENCY_N 16 /* buckets of proto_counts.latency */
/* Their upper bounds in ms, ascending; the last bucket is unbounded. */
extern const int64_t proto_latency_bounds_ms[PROTO_LATENCY_N - 1];

struct proto_counts {
	uint64_t sent;         /* tb_0031 rows put in Data frames (resends,
				  tombstones, a relay's stored copies too) */
	uint64_t confirmed;    /* tb_0031 rows confirmed by their destination */
	uint64_t received;     /* messages recorded in tb_0030 */
	uint64_t duplicates;   /* copies recognised as already received */
	uint64_t redo_created; /* receipts that went to tb_0033 (redo, delay) */
	uint64_t refused;      /* copies refused: another message under their
				  seq, or one no longer known */
	uint64_t resyncs;      /* times this node found its database behind
				  (stream state, or a conflict it caused) */
	uint64_t renumbered;   /* own messages renumbered after a conflict */
	uint64_t held;         /* messages or copies held for the operator */
	/* relay: messages it refused to take custody of or pass on, by
	 * reason (RELAY_REFUSAL_*: quota, unknown destination) */
	uint64_t relay_refused[8];
	uint64_t undeliverable; /* own messages a relay could not deliver,
				   put dead for the operator */
	uint64_t looped;        /* frames not passed on: past max_hops */
	/* relay: messages passed on to a connected next hop, and copies
	 * taken into custody (store_and_forward), counted once committed */
	uint64_t relay_forwarded, relay_stored;
	/* messages recorded as received: now - their created_at at the
	 * origin (0 when negative: clock skew), by bucket of
	 * proto_latency_bounds_ms (the last one +Inf), and the sum in ms */
	uint64_t latency[PROTO_LATENCY_N];
	uint64_t latency_sum_ms;
	uint64_t traces_refused; /* traces not passed on: busy (trace.h) */
};
void proto_take_counts(struct proto *p, struct proto_counts *c);

/*
 * The store workers (worker.c, dispatch.h). An apply worker's proto
 * (proto_set_apply_only) gets only Data frames whose messages are all for
 * this node, JOB_REDO and JOB_ROUTES; its tick only retries held messages.
 * over(ctx), asked before each message of a Data frame after the first one
 * of the call, says the worker's slice is spent: the call stops there and
 * proto_cut() says at which message (0: it ran to the end), so that the
 * worker commits and runs the rest of the frame (job->done) next.
 */
void proto_set_apply_only(struct proto *p, int (*over)(void *ctx), void *ctx);
size_t proto_cut(const struct proto *p);
/* The store thread of a node with store workers: a due redo entry is handed
 * to out(ctx, id, origin) (a JOB_REDO for a worker) instead of being run on
 * the store thread; out returns SEMQ_OK or an error that fails the batch. */
void proto_set_redo_out(struct proto *p,
			int (*out)(void *ctx, int64_t id, const char *origin),
			void *ctx);
/* Did the batch change the redo schedule (a receipt went to redo, an entry
 * ran)? Then 1, once: the store thread must scan it again (JOB_WAKE). */
int proto_take_schedule_changed(struct proto *p);
/* Does p hold a message of origin's stream for a missing predecessor? */
int proto_holds(const struct proto *p, const char *origin);

/* Bytes of the messages held for a missing predecessor ([node]
 * memory_budget counts them; at most a quarter of it). */
size_t proto_held_bytes(const struct proto *p);

/* The hop carrying the stream of id towards `toward` (its dest, or its
 * origin): `toward` itself when connected, else its [route], else [route]
 * default, and of that peer's instances the stream's; NULL when none is
 * connected. Borrowed from r. */
const struct route_hop *route_stream_hop(const struct routes *r,
					 const struct config *c,
					 const char *toward,
					 const struct msgid *id);

/* Which connection reaches `dest` now: a direct hop, else the [route] for it,
 * else [route] default; 0 when none. */
uint64_t route_lookup(const struct routes *r, const struct config *c,
		      const char *dest);

#endif
