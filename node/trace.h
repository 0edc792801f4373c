/* SPDX-License-Identifier: MIT */
/*
 * Where is a message? The traced Query of `semqctl trace` (docs/PROTOCOL.md,
 * "Trace"), on the store thread beside proto.c.
 *
 * GET /trace?key=K[&dest=D][&since=MS][&limit=N] or ?id=ORIGIN/DEST/SEQ (a
 * JOB_ADMIN) and a Trace frame from a peer are answered the same way: this
 * node's own record of each message (its tb_0031 row — the origin's, or a
 * relay's custody copy —, at the destination its tb_0030 row, watermark and
 * tb_0033 entry, else the next hop and whether it is connected), then the
 * records of the hops after it, asked with a Trace frame of their own and
 * awaited for a bounded time. The admin request gets the whole path as
 * JSON; a peer's Trace gets a TraceReply.
 *
 * DESIGN
 *  - Reads only. The records are read in the batch the job runs in; the
 *    frames and the admin answer go out through the outbox after its commit.
 *  - A Trace is passed on only for this node's own messages or by a relay
 *    (a peer's rights are net.c's, as for Query), only to a peer whose Hello
 *    announced FEATURE_TRACE, and not past [node] max_hops relays. A hop
 *    that cannot be asked is a record with a note: "not connected", "does
 *    not support trace", "no answer within N s", "busy".
 *  - Bounds: at most TRACE_PENDING traces wait for answers at once, at most
 *    TRACE_PER_CONN of them for one asking connection; over that the asker
 *    gets this node's records only, with the note "busy" (counted:
 *    semq_traces_refused_total). The origin waits TRACE_WAIT_MS for its
 *    next hop, the relay after it TRACE_HOP_MS less, and so on (at least
 *    TRACE_HOP_MS), so that what a relay found out reaches the asker before
 *    the asker's own wait ends; a late answer is dropped.
 *    A Trace holds at most CODEC_TRACE_IDS ids, a reply CODEC_TRACE_HOPS
 *    hops.
 */
#ifndef SEMQ_TRACE_H
#define SEMQ_TRACE_H

#include <stdint.h>

#include "config.h"
#include "job.h"
#include "proto.h"
#include "store.h"

#define TRACE_PENDING 64
#define TRACE_PER_CONN 4
#define TRACE_WAIT_MS 4000
#define TRACE_HOP_MS 1000
#define TRACE_LIMIT 20 /* messages of a key shown by default */

struct trace;

/* st and c borrowed for its life. NULL on ENOMEM. */
struct trace *trace_new(struct store *st, const struct config *c);
void trace_free(struct trace *t); /* NULL ok */

/* GET /trace (j->admin, borrowed): the answer is queued in ob now, or when
 * the hops asked have answered (trace_on_reply) or their time is up
 * (trace_tick). r: the routes now (borrowed for the call; NULL = none). */
int trace_admin(struct trace *t, const struct routes *r, const struct job *j,
		int64_t now, struct outbox *ob);

/* A Trace or a TraceReply frame from a peer (j borrowed). */
int trace_on_frame(struct trace *t, const struct routes *r, const struct job *j,
		   int64_t now, struct outbox *ob);

/* Answers the traces whose wait is over. */
int trace_tick(struct trace *t, const struct routes *r, int64_t now,
	       struct outbox *ob);

/* When the next wait ends (unix ms), or INT64_MAX. */
int64_t trace_next_due(const struct trace *t);

/* Traces refused since the last call (busy), for metrics. */
uint64_t trace_take_refused(struct trace *t);

#endif
