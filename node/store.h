/* SPDX-License-Identifier: MIT */
/*
 * The store: the one interface through which the node reads and writes
 * persistent state — the outbound queue tb_0031, the received record tb_0030
 * with its per-stream watermarks, and the redo queue tb_0033.
 *
 * DESIGN
 *  - One `struct store` is used by one thread (the store thread in semqd, the
 *    main thread in semqctl). It is not thread-safe.
 *  - Work is batched: store_begin() opens a transaction, many calls run in it,
 *    store_commit() makes them durable at once. A mutating call made while no
 *    batch is open runs in a transaction of its own.
 *  - An acknowledgement is never sent before the commit that makes it true:
 *    callers collect what store_receive() etc. report and act on it only after
 *    store_commit() returned SEMQ_OK.
 *  - Nothing here knows which database is behind it beyond store_open():
 *    callers never see SQL or a connection (except store_plugin_tx(), which
 *    hands the open transaction to plugins). store.c runs on node/db.h: a
 *    SQLite file, or a PostgreSQL database (a postgresql:// URL) that several
 *    semqd instances of one node may share; the functions and their results
 *    are the same on both.
 *  - Several instances on one PostgreSQL database: calls that work on an
 *    inbound stream (store_receive, store_redo_run, store_redo_discard) hold
 *    that stream's lock to the end of the transaction, so another instance's
 *    call on the same stream waits for the commit or rollback and then sees
 *    what it left (a duplicate, a redo entry already run: SEMQ_DECLINED).
 *    store_advance_watermarks() skips a stream another instance holds. A
 *    deadlock or a lost connection fails the call (SEMQ_ERR_DB); the batch
 *    must then be rolled back, and the next batch connects again.
 *  - Time is a parameter (`now`, unix ms): the store never reads a clock.
 *  - Lives (docs/PROTOCOL.md, "Lives of a node"): a stream is (origin,
 *    dest, life). Every id passed in carries its life (never 0: proto
 *    resolves a life a revision-1 peer did not give); the node's own rows
 *    have the database's life (store_life). A digest of 0 is unknown.
 */
#ifndef SEMQ_STORE_H
#define SEMQ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <semq/plugin.h>

#include "types.h"

struct store;

/* How a store is opened. */
struct store_opts {
	const char *path;    /* database file, created if missing; or a
				postgresql:// (postgres://) URL of an existing
				database, migrated on open */
	const char *node_id; /* this node; recorded in the database on first
				   open, and a later open with another id fails */
	size_t max_payload;  /* recorded for the tb_0031 trigger; 0 = 16 MiB */
	int synchronous;     /* 0 OFF, 1 NORMAL, 2 FULL (default), 3 EXTRA;
				   -1 = default. PostgreSQL: below 2 turns
				   synchronous_commit off */
	int busy_timeout_ms; /* 0 = default (5000); PostgreSQL: lock_timeout */
	const int64_t
		*redo_levels_ms; /* backoff levels; NULL = semq_redo_levels */
	size_t n_redo_levels;
	unsigned max_tries; /* attempts before dead; 0 = SEMQ_REDO_MAX_TRIES */
	int no_create;      /* 1: a database that does not exist (SQLite: no
			       file) or has no SEMQ schema yet is not created
			       but refused, SEMQ_ERR_NOT_FOUND (semqctl) */
};

/*
 * Opens (creating and migrating as needed) the database. On success *out owns
 * the store (free with store_free). On failure err gets one line naming the
 * file (a URL without its password) and the problem: SEMQ_ERR_VERSION when
 * the database was written by a newer SEMQ, SEMQ_ERR_INVALID when it belongs
 * to another node id, SEMQ_ERR_NOT_FOUND with o->no_create when it does not
 * exist ("database X does not exist" / "... has no SEMQ schema"),
 * SEMQ_ERR_DB or SEMQ_ERR_IO otherwise. Several
 * processes may open one new database at once: one migrates it.
 */
int store_open(const struct store_opts *o, struct store **out, char *err,
	       size_t errsz);
void store_free(struct store *st); /* accepts NULL; rolls back an open batch */

/* Highest schema version this build knows (db/ and db/postgresql/ have the
 * same versions), and the one the database is at. */
int store_schema_latest(void);
int store_schema_version(struct store *st);
/* What store_open() found: the schema version the database was at (0: it
 * was created), and, when it migrated an older one, where the copy it kept
 * first is (a file, or a PostgreSQL schema); "" when none. Borrowed. */
int store_migrated_from(const struct store *st);
const char *store_backup(const struct store *st);
/* This database's life: a random id set when it was created, or
 * SEMQ_LIFE_LEGACY for a 0.1.0 database that had sent messages. */
uint64_t store_life(const struct store *st);

/* The message of the last failed call (borrowed until the next call). */
const char *store_errmsg(const struct store *st);
/* Did the last failed call fail because the disk (or a size limit of the
 * database) is full, or the file could not be written (SQLITE_FULL,
 * SQLITE_IOERR)? Then waiting for space is the remedy, not dropping work. */
int store_disk_full(const struct store *st);
/* Did it fail because another connection held the database's lock for
 * longer than the busy timeout (an application's transaction, a
 * checkpoint)? Then waiting for the lock is the remedy, not dropping
 * work. */
int store_locked_out(const struct store *st);
/* Inside the open batch: replaces this node's scratch row with one of
 * `bytes` bytes (zeros on SQLite, text the server cannot compress on
 * PostgreSQL; 0: removes it), so that the commit needs at least that much
 * room on the disk. A retry after a full disk commits it to learn that there
 * is space again. */
int store_probe_space(struct store *st, size_t bytes);

/* Batches. Nested begin is SEMQ_ERR_INTERNAL, and so is a commit with no
 * batch open; a rollback with no batch open is harmless (SEMQ_OK). A failed
 * commit has rolled the batch back. */
int store_begin(struct store *st);
int store_commit(struct store *st);
int store_rollback(struct store *st);
int store_in_batch(const struct store *st);

/* ---- origin side: tb_0031 ------------------------------------------------ */

/*
 * Inserts a message of this node (m->id.origin and m->id.seq are ignored;
 * m is borrowed) as the application does, and numbers it at once
 * (store_number_new, with every row inserted before it). *seq_out gets the
 * seq.
 */
int store_enqueue(struct store *st, const struct msg *m, uint64_t *seq_out,
		  char *err, size_t errsz);

/*
 * A relay's store-and-forward copy of another node's message (m borrowed, all
 * of m->id given, with its life and digest). Unique on the id: a second copy
 * of the same message (the same digest, or either unknown) refreshes nothing
 * and returns SEMQ_DUPLICATE; a copy of another message under that id is
 * SEMQ_DECLINED (a conflict: the origin went back in time), nothing
 * written; SEMQ_OK when newly stored. A copy of a tombstone (m->tombstone)
 * is stored as a cancelled (-2) row.
 */
int store_enqueue_copy(struct store *st, const struct msg *m, int64_t now);

/*
 * Numbers the application's new rows (migration 0007: inserted with origin,
 * life and seq NULL), oldest id first, at most limit of them: origin this
 * node, life this database's, seq the stream's next, prev_seq the last seq
 * of the same key in the stream (0: none), created_at now if NULL. On
 * SQLite one writer at a time makes id order the order of the commits. On
 * PostgreSQL one instance numbers at a time (a transaction-level advisory
 * lock; the others number nothing); a row committed later than a higher id
 * is numbered when it is seen, so seq follows the commits as this node saw
 * them; wait: wait for that lock instead. *numbered: how many; *more: rows
 * may be left (limit reached).
 */
int store_number_new(struct store *st, int64_t now, unsigned limit, int wait,
		     unsigned *numbered, int *more);

/* The status (SS_*) and digest (0 = unknown) of the tb_0031 row `id`, read
 * without its payload. SEMQ_ERR_NOT_FOUND when there is none. */
int store_outbound_state(struct store *st, const struct msgid *id, int *status,
			 uint64_t *digest);
/* The digest of the tb_0031 row `id`: the one fixed when it was first sent,
 * else computed from the row. SEMQ_ERR_NOT_FOUND when there is none. */
int store_outbound_digest(struct store *st, const struct msgid *id,
			  uint64_t *digest);
/* The key predecessor of this node's row `id` (the row at its prev_seq),
 * with its digest: *open = 1 while it is unconfirmed (or a cancel not
 * answered yet). SEMQ_ERR_NOT_FOUND when the row has none here (first of
 * its key, or purged). */
int store_outbound_pred(struct store *st, const struct msgid *id,
			struct msgid *pred, int *open);
/* Where a renumbering moved the message `id` (with its digest): *seq = the
 * later seq of its stream whose row holds that digest. SEMQ_ERR_NOT_FOUND
 * when no row does. */
int store_outbound_moved(struct store *st, const struct msgid *id,
			 uint64_t *seq);

/* Callback for listings: `m` and `row` are borrowed until it returns. Return
 * non-zero to stop the iteration (the listing then returns SEMQ_OK). The
 * callback may call the store. m->tombstone is set for a cancelled row.
 * Scans and listings that do not send the message (store_fetch_in_doubt,
 * store_outbound_list) hand it over without its payload: m->payload is
 * NULL and m->payload_len the payload's length. Such an m is no message to
 * store again or to compute a digest of; store_outbound_get() reads the
 * bytes. Rows are read one at a time, never the whole result at once. */
struct out_row {
	int64_t rowid;
	int status; /* enum out_status */
	int attempts;
	int64_t next_attempt_at, sent_at, acked_at;
	int result;             /* -1 when none yet */
	const char *last_error; /* NULL when none */
	/* status 6 (or an unanswered cancel): the relay holding it in
	 * custody; "" when it was passed on, or not relayed */
	char custodian[SEMQ_ID_MAX + 1];
};
typedef int (*store_out_cb)(void *ctx, const struct msg *m,
			    const struct out_row *row);

/*
 * Messages ready to send: status 0 with next_attempt_at <= now, stream by
 * stream in seq order, at most `window` unconfirmed (status 4 or 6 plus those
 * returned) per stream, at most `limit` in all. dest NULL = every destination.
 * Rows whose deliver time has not come still travel (the receiver schedules
 * them). This does not change them: call store_mark_sent() per message.
 */
int store_fetch_sendable(struct store *st, const char *dest, int64_t now,
			 unsigned window, unsigned limit, store_out_cb cb,
			 void *ctx);

/* 0 -> 4: sent; attempts+1, sent_at = now, next_attempt_at = query_at (when it
 * becomes in doubt); id->digest, when given, becomes the row's digest unless
 * it has one. SEMQ_DECLINED when the row is not in status 0 (for these
 * four transitions also when there is no such row; store_errmsg says which). */
int store_mark_sent(struct store *st, const struct msgid *id, int64_t now,
		    int64_t query_at);
/* 4 -> 6: a relay forwarded or stored it. SEMQ_DECLINED if not in 4.
 * This and store_mark_unsent, store_defer and store_mark_custody act on the
 * message whose digest id carries: when id->digest and the row's digest are
 * both known and differ, the row is another message under that id (a
 * filler of a seq a renumbering gave up) and is left as it is (DECLINED). */
int store_mark_relay_acked(struct store *st, const struct msgid *id,
			   int64_t now, int64_t query_at);
/* 4/6 -> 0: send again at retry_at (not received, unreachable); err text is
 * kept in last_error (may be NULL). SEMQ_DECLINED if not in 4 or 6. */
int store_mark_unsent(struct store *st, const struct msgid *id,
		      int64_t retry_at, const char *error);
/* 0/4/6/8/-2 -> 100 with the destination's verdict (RES_PROCESSED ..
 * RES_DEAD); acked_at = now. SEMQ_DECLINED when already 100 (a repeated
 * indication: harmless). */
int store_mark_confirmed(struct store *st, const struct msgid *id, int result,
			 int64_t now);
/* Moves the deadline of an unconfirmed row without changing its status:
 * status 4 or 6 (when to query it next) or a cancelled row whose tombstone is
 * not answered yet (when to send the tombstone again). SEMQ_DECLINED in any
 * other state. */
int store_defer(struct store *st, const struct msgid *id, int64_t next_at);
/* Deletes a relay's store-and-forward copy (a row whose origin is another
 * node) once its destination confirmed it; when id->digest is given, only a
 * copy of that message (or of an unknown digest). SEMQ_DECLINED when there
 * is no such copy (already dropped, another message, or a row of this
 * node's own). */
int store_drop_copy(struct store *st, const struct msgid *id);
/* Cancelled rows (-2) whose tombstone is due (next_attempt_at <= now) and
 * not answered yet; m->tombstone is set. A tombstone's answer goes through
 * store_mark_confirmed(): RES_CANCELLED keeps the row at -2 with that result,
 * any other verdict (it took effect first) makes it 100. */
int store_fetch_tombstones(struct store *st, int64_t now, unsigned limit,
			   store_out_cb cb, void *ctx);
/* Rows in status 4 or 6 whose next_attempt_at <= now: in doubt, to query.
 * Without their payloads (payload NULL, payload_len set). */
int store_fetch_in_doubt(struct store *st, int64_t now, unsigned limit,
			 store_out_cb cb, void *ctx);
/* Operator cancel: any status but 100 -> -2 (already -2: SEMQ_OK), with
 * next_attempt_at = now; a held row (8) has no tombstone to send and ends
 * cancelled at once (result RES_CANCELLED). SEMQ_DECLINED when already
 * 100, SEMQ_ERR_NOT_FOUND when there is no such row. */
int store_cancel(struct store *st, const struct msgid *id, int64_t now);
/* 0/4/6 -> 8 (held for the operator) with result (RES_UNDECIDED) and why.
 * SEMQ_DECLINED in any other status. */
int store_hold(struct store *st, const struct msgid *id, int result,
	       const char *why, int64_t now);

/*
 * Renumbering (docs/PROTOCOL.md, "What the origin does"): the row `id` of
 * this node — a message that a receiver or relay refused because it holds
 * another message under that seq — gets the next seq of its stream, and so
 * do the unconfirmed later rows of its key, in their order, each its
 * predecessor's new seq as prev_seq. Each goes back to unsent (a cancelled
 * one stays cancelled, its tombstone to be sent under the new seq) with
 * `why` as its last_error. *olds gets their ids before (with their digests,
 * 0 when never sent; caller frees), *n_out how many, *first_out the first
 * new seq. The row's own seq is taken as the lost timeline's (its refuser
 * holds another message there): seen_high rises to it. Each old seq above
 * seen_high, how far the lost timeline reached, gets a filler (a cancel of
 * nothing, semq_filler_digest()) so that the destination's watermark can
 * pass it. SEMQ_DECLINED when the row is
 * confirmed or not this node's;
 * SEMQ_ERR_NOT_FOUND when there is none.
 */
int store_renumber(struct store *st, const struct msgid *id, int64_t now,
		   const char *why, struct msgid **olds, unsigned *n_out,
		   uint64_t *first_out);

/* Is row `id` a filler of this node (put under a seq that a renumbering
 * gave up)? *filler = 0 when there is no such row. */
int store_is_filler(struct store *st, const struct msgid *id, int *filler);
/* The counter of this node's stream to dest (0 when it has none). */
int store_last_seq(struct store *st, const char *dest, uint64_t *last);
/*
 * A peer has seen this node's stream to `dest` up to `high`: when that is
 * above the counter, the database went back in time. The counter moves to
 * `high` (the next message gets high + 1), the stream's resync count grows
 * and `note` is kept with `now` for semqctl status; with `record` the count
 * and note are written even when the counter does not move (the first
 * sign of it this run). *moved_from gets the counter before and *moved
 * whether it moved. SEMQ_DECLINED when the counter and the count stayed.
 * A `high` above the counter is kept as seen_high (how far the lost timeline
 * reached, for put_filler); one at or below it may count this database's
 * own messages and is not.
 */
int store_stream_resync(struct store *st, const char *dest, uint64_t high,
			int64_t now, const char *note, int record,
			uint64_t *moved_from, int *moved);
/* This node's outbound streams: the counter and the last resync. Strings
 * borrowed until the callback returns; note NULL when never resynced. */
struct out_stream {
	const char *dest;
	uint64_t last_seq;
	int64_t resyncs, resync_at;
	const char *note;
	int life_hidden; /* its ids go without the life (store_hide_life) */
};
typedef int (*store_out_stream_cb)(void *ctx, const struct out_stream *s);
int store_streams_out(struct store *st, store_out_stream_cb cb, void *ctx);
/* This node's stream to dest went through a node of wire revision 1, whose
 * store-and-forward copies lose the life: from now on its ids go without
 * it (docs/PROTOCOL.md, "What holds in a mixed fleet"). SEMQ_DECLINED when
 * it did already. */
int store_hide_life(struct store *st, const char *dest);
/* Deletes confirmed (100) rows acked before now - retention_ms, at most
 * `limit`; *n_out gets how many. A relay's copies go when confirmed too. */
int store_purge(struct store *st, int64_t now, int64_t retention_ms,
		unsigned limit, unsigned *n_out);
/* Deletes tb_0033 entries done (2) or discarded (-2) before now -
 * retention_ms, at most `limit`; *n_out gets how many. Pending, waiting and
 * dead entries stay. */
int store_redo_purge(struct store *st, int64_t now, int64_t retention_ms,
		     unsigned limit, unsigned *n_out);
/* One outbound row by id (m's payload owned by the caller: msg_clear). */
int store_outbound_get(struct store *st, const struct msgid *id, struct msg *m,
		       struct out_row *row);
/* Listing of tb_0031 (status < -99 = all), newest first, at most limit;
 * without the payloads (payload NULL, payload_len set). */
int store_outbound_list(struct store *st, int status, unsigned limit,
			store_out_cb cb, void *ctx);

/* ---- receiver side: tb_0030, watermarks ---------------------------------- */

/*
 * Applies one message — the plugin runs here. Called on the store thread; the
 * `m` and `tx` it gets are borrowed for the call. Returns a
 * semq_plugin_result and, on failure, writes why into err.
 */
typedef int (*store_apply_fn)(void *ctx, const struct msg *m, unsigned tries,
			      const struct semq_plugin_tx *tx, char *err,
			      size_t errsz);

/*
 * Records a received message — the exactly-once step of SPEC §6, inside the
 * open batch (or a transaction of its own):
 *
 *  - already in tb_0030 with the same digest (or either unknown):
 *    SEMQ_DUPLICATE, *result_out = its recorded verdict (RES_DEAD when its
 *    redo entry is dead), nothing written, apply not called; at or below
 *    the watermark with the row gone (older than the receipt retention):
 *    SEMQ_DUPLICATE with RES_DUPLICATE when m has no digest;
 *  - a refusal: SEMQ_DECLINED, nothing written, apply not called, and
 *    *result_out = RES_CONFLICT when tb_0030 has another digest under that
 *    seq or under its prev_seq (m->prev_digest), RES_UNDECIDED when m has
 *    a digest and the row of its seq (<= watermark) is gone; errmsg says
 *    which;
 *  - prev_seq > 0 and that predecessor has not been recorded: SEMQ_AGAIN,
 *    nothing written (hold it and offer it again later) — on PostgreSQL
 *    beyond the stream's row in semq_stream_in (watermark 0), its lock;
 *  - a tombstone: tb_0030 row with RES_CANCELLED, apply not called;
 *  - deliver_at > now: tb_0030 row + tb_0033 pending at deliver_at,
 *    RES_SCHEDULED (waiting instead when its key has an unfinished entry;
 *    released then no earlier than deliver_at);
 *  - the key has an unfinished tb_0033 entry in this stream: tb_0030 row +
 *    tb_0033 waiting, RES_REDO;
 *  - otherwise tb_0030 row, then apply() inside a SAVEPOINT: OK -> RES_PROCESSED;
 *    RETRY -> rolled back to the savepoint, tb_0033 pending at the first
 *    redo level, RES_REDO; PERMANENT -> rolled back, tb_0033 dead, RES_REDO.
 *
 * via: the peer that delivered it when that is not the origin, else NULL.
 * confirm_need: CONFIRM_ORIGIN, | CONFIRM_RELAY when a relay stored a copy.
 * m is borrowed. SEMQ_OK / SEMQ_DUPLICATE / SEMQ_AGAIN or an error; on an error
 * the batch must be rolled back. After a plugin failure (SEMQ_OK, RES_REDO)
 * err holds the plugin's reason.
 */
int store_receive(struct store *st, const struct msg *m, const char *via,
		  unsigned confirm_need, int64_t now, store_apply_fn apply,
		  void *ctx, int *result_out, char *err, size_t errsz);

/*
 * Was this message received? *received = 1 with *result (RES_*) when it is in
 * tb_0030 (its verdict, RES_DEAD when its redo entry is dead) or at or below
 * the watermark (then RES_DUPLICATE, the row being gone — RES_UNDECIDED when
 * id->digest is given); RES_CONFLICT when the row has another digest than
 * id->digest. 0 otherwise.
 */
int store_lookup_received(struct store *st, const struct msgid *id,
			  int *received, int *result);

/*
 * An 810-Response arrived: confirm_got |= bit; AS_OK once every needed bit is
 * there (*now_ok = 1). SEMQ_DECLINED when the row is gone (already compacted).
 */
int store_ack_response(struct store *st, const struct msgid *id, unsigned bit,
		       int *now_ok);

/* Received rows still waiting for an 810-Response, received before `before`
 * (to repeat their indications). m carries only id/type/key; `result` is the
 * recorded verdict and `need`/`got` the confirm bits, `via` may be NULL. */
typedef int (*store_unacked_cb)(void *ctx, const struct msgid *id, int result,
				unsigned need, unsigned got, const char *via);
int store_fetch_unacked(struct store *st, int64_t before, unsigned limit,
			store_unacked_cb cb, void *ctx);

/* One tb_0030 row for listings: every string is borrowed until the callback
 * returns. */
struct recv_row {
	int64_t rowid;
	struct msgid id;
	uint32_t type;
	const char *key; /* NULL when none */
	uint64_t prev_seq;
	int64_t received_at;
	const char *via; /* the relay that delivered it; NULL when direct */
	int result;      /* enum msg_result */
	int ack_status;  /* AS_INIT or AS_OK */
	unsigned confirm_need, confirm_got; /* CONFIRM_* bits */
};
typedef int (*store_recv_cb)(void *ctx, const struct recv_row *r);

/*
 * Listing of tb_0030, newest first (in the order the rows were recorded), at
 * most `limit`; origin NULL = every origin. Rows at or below their stream's
 * watermark are compacted away and not listed. The callback may call the
 * store; non-zero from it stops the listing (SEMQ_OK).
 */
int store_received_list(struct store *st, const char *origin, unsigned limit,
			store_recv_cb cb, void *ctx);

/*
 * Moves every stream's confirmed_through over the run of AS_OK rows above it.
 * *advanced gets how many streams moved. The rows stay (their digests tell a
 * second copy from another message) until store_receipt_purge().
 */
int store_advance_watermarks(struct store *st, unsigned *advanced);
/* Deletes tb_0030 rows at or below their stream's watermark that were
 * received before now - retention_ms, at most `limit`; *n_out gets how
 * many. */
int store_receipt_purge(struct store *st, int64_t now, int64_t retention_ms,
			unsigned limit, unsigned *n_out);
/* The watermark of one inbound stream (0 when unknown). */
int store_watermark(struct store *st, const char *origin, const char *dest,
		    uint64_t life, uint64_t *w);
/* The highest seq of (origin, dest, life) this node recorded or passed
 * with its watermark (0 when none). */
int store_stream_high(struct store *st, const char *origin, const char *dest,
		      uint64_t life, uint64_t *high);
/*
 * The current life of the stream (origin, dest) here: this node's own life
 * when origin is this node; else the life whose stream began here last, as
 * a receiver (dest is this node) or as a relay; SEMQ_LIFE_LEGACY when none.
 * For an id whose life a revision-1 peer did not give.
 */
int store_current_life(struct store *st, const char *origin, const char *dest,
		       uint64_t *life);

/* The life of origin whose stream (to this node, or relayed by it) began
 * here last; *known = 0 when this node has none of origin's streams. */
int store_origin_life(struct store *st, const char *origin, uint64_t *life,
		      int *known);

/* ---- a relay's record of the streams it relayed --------------------------- */

/* The highest seq of (origin, dest, life) this relay forwarded or stored
 * (0 when none). */
int store_relay_high(struct store *st, const char *origin, const char *dest,
		     uint64_t life, uint64_t *high);
/* The relay forwarded or stored seq `seq` of (origin, dest, life). */
int store_relay_note(struct store *st, const char *origin, const char *dest,
		     uint64_t life, uint64_t seq, int64_t now);
/* The highest seq relayed per destination of (origin, life). */
typedef int (*store_high_cb)(void *ctx, const char *dest, uint64_t high);
int store_relay_streams(struct store *st, const char *origin, uint64_t life,
			store_high_cb cb, void *ctx);

/* ---- custody (docs/PROTOCOL.md, "Custody") --------------------------------- */

/* Origin: a relay took custody of the row (RelayAck STORED, also answering
 * a query): 4/6 -> 6 with custodian = relay, next query at next_at (a row
 * in custody is outside `window`); an unanswered cancel keeps its status.
 * SEMQ_DECLINED in any other state. */
int store_mark_custody(struct store *st, const struct msgid *id,
		       const char *relay, int64_t next_at);
/* Origin: cancels due for `dest` (as store_fetch_tombstones). */
int store_fetch_tombstones_to(struct store *st, const char *dest, int64_t now,
			      unsigned limit, store_out_cb cb, void *ctx);
/* Origin: a relay does not know the row's destination. An unconfirmed row
 * (0, 4, 6) is held (8, result RES_UNDELIVERABLE, why) and gets a dead
 * entry in tb_0033 for the operator (redo retry sends it again, discard
 * cancels it); an unanswered cancel ends cancelled (it never reached a
 * destination). *settled = 1 when the row has nothing more to send (it is
 * held, cancelled, finished, or gone): the relay may drop its copy.
 * SEMQ_DECLINED when nothing was made undeliverable now (held or finished
 * already, another message), SEMQ_ERR_NOT_FOUND when the row is gone. */
int store_undeliverable(struct store *st, const struct msgid *id,
			const char *why, int64_t now, int *settled);
/* Origin: this node's rows in a relay's custody, per destination and
 * relay: how many, and the earliest hand-over (sent_at). */
typedef int (*store_waiting_cb)(void *ctx, const char *dest, const char *relay,
				int64_t n, int64_t since);
int store_custody_waiting(struct store *st, store_waiting_cb cb, void *ctx);

/* Relay: what it holds in custody (semq_custody), for one origin and in
 * all. */
struct custody_use {
	int64_t messages, bytes;         /* of the origin */
	int64_t all_messages, all_bytes; /* of every origin */
};
int store_custody_use(struct store *st, const char *origin,
		      struct custody_use *u);
/* Relay: custody per (origin, dest), with the oldest copy's created_at. */
typedef int (*store_custody_cb)(void *ctx, const char *origin, const char *dest,
				int64_t messages, int64_t bytes,
				int64_t oldest);
int store_custody_list(struct store *st, store_custody_cb cb, void *ctx);
/* Relay: the cancel of a copy it holds replaces the copy (its payload
 * goes, it is delivered as the cancel); id->digest, when given, must be the
 * copy's. SEMQ_DECLINED when there is no such copy in 0, 4 or 6. */
int store_copy_cancel(struct store *st, const struct msgid *id, int64_t now);
/* Relay: a copy held as undeliverable goes out again (8 -> 0).
 * SEMQ_DECLINED when it is not held so. */
int store_copy_unhold(struct store *st, const struct msgid *id, int64_t now);
/* Relay: `dest` was connected at `now`: a known destination. */
int store_dest_seen(struct store *st, const char *dest, int64_t now);
/* Relay: custody for `dest` at `now`: *first_at gets since when copies
 * have been held for it while it was never seen (now, the first time),
 * *seen whether it was ever connected. */
int store_dest_note(struct store *st, const char *dest, int64_t now,
		    int64_t *first_at, int *seen);
/* Relay: what it knows of dest without noting anything: *found = 0 when
 * nothing; else *first_at (0: none) and *seen. */
int store_dest_get(struct store *st, const char *dest, int64_t *first_at,
		   int *seen, int *found);
/* Relay: destinations never connected whose first copy is from before
 * `before`. */
typedef int (*store_dest_cb)(void *ctx, const char *dest, int64_t first_at);
int store_dests_unknown(struct store *st, int64_t before, store_dest_cb cb,
			void *ctx);
/* Relay: its copies for `dest` (of `origin`; NULL: of any) that wait
 * (unsent, unanswered cancels, held as undeliverable), ids with digests, at
 * most `limit`. */
struct copy_ref {
	struct msgid id; /* with its digest */
	int status;      /* enum out_status */
	int tombstone;   /* an unanswered cancel */
	int result;      /* store_copies_refused(): RES_CONFLICT|UNDECIDED */
};
typedef int (*store_copy_cb)(void *ctx, const struct copy_ref *c);
int store_copies_for(struct store *st, const char *dest, const char *origin,
		     unsigned limit, store_copy_cb cb, void *ctx);
/* Relay: its copies of `origin` that their destination refused (held with
 * result RES_CONFLICT or RES_UNDECIDED), at most `limit`. */
int store_copies_refused(struct store *st, const char *origin, unsigned limit,
			 store_copy_cb cb, void *ctx);
/* When an outbound row was last sent (0: never); SEMQ_ERR_NOT_FOUND. */
int store_outbound_sent_at(struct store *st, const struct msgid *id,
			   int64_t *sent_at);

/* ---- lives ---------------------------------------------------------------- */

/* One stream of one life this node knows: as a receiver (relay 0: `mark`
 * is the watermark, `rows` the tb_0030 rows kept) or as a relay (relay 1:
 * `mark` the highest seq relayed). Strings borrowed until the callback
 * returns. Ordered by origin, then when the life began here. */
struct life_row {
	const char *origin, *dest;
	uint64_t life;
	int relay;
	uint64_t mark;
	int64_t started_at, rows;
};
typedef int (*store_life_cb)(void *ctx, const struct life_row *r);
int store_lives(struct store *st, store_life_cb cb, void *ctx);
/* Forgets a retired life of origin: its watermarks, its received rows and
 * its relay record. SEMQ_DECLINED (errmsg says why) while it has redo
 * entries not finished or relay copies not delivered, or when it is the
 * current life of one of origin's streams and !force; SEMQ_ERR_NOT_FOUND
 * when this node knows no such life. */
int store_life_drop(struct store *st, const char *origin, uint64_t life,
		    int force);

/* ---- redo queue: tb_0033 ------------------------------------------------- */

struct redo_row {
	int64_t id;
	int status; /* enum redo_status */
	int tries;
	int level;
	int64_t next_attempt_at, created_at, updated_at;
	const char *last_error;     /* NULL when none */
	const char *discard_reason; /* NULL when none */
};
/* Callback for store_redo_due and store_redo_list, as store_out_cb: the
 * entries come without their payloads (m->payload NULL, m->payload_len
 * the payload's length); store_redo_get() reads one with its bytes. */
typedef int (*store_redo_cb)(void *ctx, const struct msg *m,
			     const struct redo_row *row);

/* Pending entries due at `now` (next_attempt_at <= now), oldest first,
 * without their payloads. */
int store_redo_due(struct store *st, int64_t now, unsigned limit,
		   store_redo_cb cb, void *ctx);
/* What a waiting entry (status 1) of message m waits for: the head of its
 * key (pending or dead). A head that is pending with a deliver_at still to
 * come is a delayed message (SPEC §6, "Ordering": it holds the later
 * messages of its key until it is due). SEMQ_ERR_NOT_FOUND when there is
 * none (the entry is released by the next run). */
struct redo_head {
	int64_t id;
	uint64_t seq;
	int status;              /* RS_PENDING or RS_DEAD */
	int delayed;             /* pending until its deliver_at */
	int64_t next_attempt_at; /* when it runs (delayed: its deliver_at) */
};
int store_redo_head(struct store *st, const struct msg *m, int64_t now,
		    struct redo_head *h);
/* The earliest next_attempt_at of a pending entry, or SEMQ_DECLINED if none. */
int store_redo_next_due(struct store *st, int64_t *at);
/*
 * Runs entry `id` (pending) once: apply() in a SAVEPOINT; OK -> done, and the
 * next waiting entry of its key becomes pending at `now`; RETRY -> next level,
 * or dead after max_tries; PERMANENT -> dead. *status_out gets the new status.
 * SEMQ_DECLINED when the entry is not pending, or not due yet
 * (next_attempt_at > now).
 */
int store_redo_run(struct store *st, int64_t id, int64_t now,
		   store_apply_fn apply, void *ctx, int *status_out);
/* The origin of entry id (its stream's key for the store workers).
 * SEMQ_ERR_NOT_FOUND when there is none. */
int store_redo_origin(struct store *st, int64_t id, char *origin,
		      size_t originsz);
/* Listing (status < -99 = all), by id, at most limit, without the
 * payloads. */
int store_redo_list(struct store *st, int status, unsigned limit,
		    store_redo_cb cb, void *ctx);
/* One entry: payload owned by the caller (msg_clear); row strings valid until
 * the next store call. SEMQ_ERR_NOT_FOUND when there is none. */
int store_redo_get(struct store *st, int64_t id, struct msg *m,
		   struct redo_row *row);
/* Operator: dead -> pending now (tries kept, level reset). SEMQ_DECLINED when
 * not dead. */
int store_redo_retry(struct store *st, int64_t id, int64_t now);
/* Operator: every dead entry -> pending; *n_out gets the count. */
int store_redo_retry_all_dead(struct store *st, int64_t now, unsigned *n_out);
/* Operator: pending, waiting or dead -> discarded with a reason; releases the
 * next waiting entry of the key. SEMQ_DECLINED when done or discarded. */
int store_redo_discard(struct store *st, int64_t id, const char *reason,
		       int64_t now);

/* ---- the operator's verbs (store_verbs.c) --------------------------------- */

/*
 * retry, retry-all, discard and cancel as an operator asks for them —
 * semqctl, the admin HTTP and the bulk verbs (store_redo_bulk) all call
 * these. Each checks the verb's rule, changes the rows in one transaction
 * (the caller's open one, else one of its own) and reports in a struct
 * store_verb what it did, or why it refused in one wording that every
 * presenter shows as it is. Returns SEMQ_OK (done), SEMQ_DECLINED
 * (refused: v->why, v->status as it is), SEMQ_ERR_NOT_FOUND (v->why: "no
 * redo entry 7", "no outbound message R/S/7"; the caller may say where it
 * looked), SEMQ_ERR_INVALID for a missing or too long reason, or another
 * error (store_errmsg). v is cleared first; store_verb_clear() frees it.
 */
#define STORE_REASON_MAX 1000 /* bytes of a discard reason */

/* One entry a verb released (discard: the next waiting entry of the key,
 * now pending) or retried (retry-all). */
struct store_released {
	int64_t id;
	struct msgid msg;
	int status;
	int64_t next_attempt_at;
};

struct store_verb {
	int64_t id;       /* the redo entry (cancel: 0) */
	struct msgid msg; /* its message */
	int has_key;      /* and the message's key */
	char key[SEMQ_KEY_MAX + 1];
	int status;       /* after the verb; refused: as it is */
	int result;       /* cancel refused as confirmed: its verdict */
	int already;      /* cancel: it was cancelled already */
	char *old_reason; /* discard refused as discarded: its reason
			      (owned, NULL when none) */
	struct store_released *released; /* owned */
	size_t n_released;
	int64_t still_waiting; /* discard: entries of the key still waiting */
	char why[SEMQ_ERRLEN]; /* refused or not there: one line */
};
void store_verb_clear(struct store_verb *v);

/* Dead -> pending now (tries kept, level reset); this node's own message
 * (held undeliverable at a relay) is sent again and its entry is done. */
int store_verb_retry(struct store *st, int64_t id, int64_t now,
		     struct store_verb *v);
/* Every dead entry, as store_verb_retry, in one transaction: v->released
 * lists them (status: after). Never refused. */
int store_verb_retry_all(struct store *st, int64_t now, struct store_verb *v);
/* Pending, waiting or dead -> discarded with `reason` (1..STORE_REASON_MAX
 * bytes); a head of its key releases the next waiting entry (v->released,
 * v->still_waiting). This node's own message is cancelled. */
int store_verb_discard(struct store *st, int64_t id, const char *reason,
		       int64_t now, struct store_verb *v);
/* An unconfirmed message of this node -> cancelled (store_cancel). Refused
 * for a copy held for another origin and a confirmed message (v->result);
 * v->already when it was cancelled before (done, nothing changed). */
int store_verb_cancel(struct store *st, const struct msgid *id, int64_t now,
		      struct store_verb *v);

/* ---- filters of the listings (semqctl, the admin HTTP) ------------------ */

/*
 * Which rows a listing or a bulk verb takes; a member left 0/NULL takes
 * any. Every filter runs in SQL on bound parameters (the statement's text
 * is made of fixed fragments only), so the indexes serve it: status, key
 * (idx_0031_msg_key, idx_0033_msg_key), dest.
 */
struct store_filter {
	int status;       /* < -99: any status */
	const char *dest; /* the message's destination */
	const char *key;  /* its key */
	int64_t since;    /* created (tb_0031, tb_0033) or received (tb_0030)
			     at or after this unix ms; 0: any time */
	const struct semq_where *where; /* tb_0033: its last_error */
	int dead_first;  /* tb_0033: dead, pending, waiting, done, discarded,
			   then by id; else by id (tb_0031, tb_0030: newest
			   first) */
	unsigned limit;  /* 0: no limit */
	unsigned offset; /* rows skipped first */
};

/* tb_0033 entries of the filter, without their payloads (as
 * store_redo_list). */
int store_redo_select(struct store *st, const struct store_filter *f,
		      store_redo_cb cb, void *ctx);
/* How many entries the filter takes (limit and offset ignored). */
int store_redo_count(struct store *st, const struct store_filter *f,
		     int64_t *n);
/* One group of entries with one last_error: strings borrowed until the
 * callback returns. */
struct redo_group {
	const char *error; /* NULL: entries without one */
	int64_t count;
	int64_t oldest, newest; /* created_at of the first and last entry */
	const char *dests;      /* their destinations, comma-separated */
};
typedef int (*store_group_cb)(void *ctx, const struct redo_group *g);
/* The filter's entries grouped by last_error, the largest group first
 * (limit and offset apply to the groups). */
int store_redo_groups(struct store *st, const struct store_filter *f,
		      store_group_cb cb, void *ctx);

/*
 * The operator's bulk verbs: retry (dead -> pending, as store_redo_retry)
 * or discard (with a reason, as store_redo_discard, releasing the next
 * waiting entry of each key discarded) every entry of the filter (limit and
 * offset ignored), entry by entry through the single-entry verbs, so that
 * their rules hold. A retry takes dead entries only (f->status must be
 * any or dead); a discard takes dead ones unless f->status says pending or
 * waiting. The entries are read first, in id order; `each` is called for
 * every entry as it was before the verb (dry_run: for every entry it would
 * take, and nothing changes). The real run goes in transactions of `batch`
 * entries (in semqd's open batch: in that batch); `progress` (may be NULL)
 * after each. An entry another caller changed meanwhile so that the verb
 * no longer applies is skipped (not counted, not passed to each). *n_out:
 * entries changed (dry run: entries listed).
 */
enum store_redo_verb { STORE_REDO_RETRY, STORE_REDO_DISCARD };
/* The operator's verbs' rule, the one semqctl, the admin HTTP and the bulk
 * verb apply: may `verb` take an entry in `status`? (retry: dead; discard:
 * pending, waiting or dead.) */
int store_redo_verb_applies(enum store_redo_verb verb, int status);
/* The rule in words: "only dead entries can be retried", "only pending,
 * waiting or dead entries can be discarded". Static. */
const char *store_redo_verb_rule(enum store_redo_verb verb);
typedef void (*store_progress_fn)(void *ctx, unsigned done, unsigned total);
int store_redo_bulk(struct store *st, enum store_redo_verb verb,
		    const struct store_filter *f, const char *reason,
		    int64_t now, int dry_run, unsigned batch,
		    store_redo_cb each, store_progress_fn progress, void *ctx,
		    unsigned *n_out);

/* tb_0031 rows of the filter (newest first), as store_outbound_list. */
int store_outbound_select(struct store *st, const struct store_filter *f,
			  store_out_cb cb, void *ctx);
/* How many rows the filter takes (limit and offset ignored). */
int store_outbound_count(struct store *st, const struct store_filter *f,
			 int64_t *n);
/* Confirmed rows whose destination's redo entry was dead when it answered
 * (result dead), per destination: cb(ctx, dest, "", count, the first
 * such answer's acked_at). */
int store_outbound_dead_at(struct store *st, store_waiting_cb cb, void *ctx);
/* tb_0030 rows of the filter and of `origin` (NULL: any; f->status
 * unused), newest first, as store_received_list. */
int store_received_select(struct store *st, const char *origin,
			  const struct store_filter *f, store_recv_cb cb,
			  void *ctx);

/* ---- status --------------------------------------------------------------- */

/* One line of `semqctl status`: a count of rows of one table in one status,
 * for one stream. table is "tb_0031", "tb_0030" or "tb_0033". */
struct stat_row {
	const char *table;
	const char *origin;
	const char *dest;
	int status; /* tb_0030: ack_status */
	int64_t count;
	int64_t oldest; /* smallest created_at / received_at, unix ms */
};
typedef int (*store_stat_cb)(void *ctx, const struct stat_row *r);
int store_stats(struct store *st, store_stat_cb cb, void *ctx);

/* Inbound streams (one per origin, dest and life) and their watermarks;
 * of one (origin, dest) the current life comes last. */
typedef int (*store_stream_cb)(void *ctx, const char *origin, const char *dest,
			       uint64_t life, uint64_t confirmed_through);
int store_streams_in(struct store *st, store_stream_cb cb, void *ctx);

/* ---- counts without scans (store_stat.c) ---------------------------------- */

/*
 * What /metrics, /streams and `semqctl status` read: O(streams) rows, never
 * a scan of a queue (semq_counts, kept by triggers of schema 5 in the
 * transaction of every change, whoever makes it). store_stats above counts
 * the rows themselves (a scan of each table): for tests and checks only.
 *
 * store_counts: every count that is not 0, by table, stream and status, as
 * store_stats gives them (r->table, r->origin, r->dest borrowed until the
 * callback returns); r->oldest is the created_at (tb_0030: received_at) of
 * the first unconfirmed row of the stream in that status, found by one
 * index seek: tb_0031 unsent (the first in stream order), sent and
 * relay-acked (the oldest in flight, or the first handed to each relay that
 * holds some in custody), tb_0030 unacked (the first above the watermark);
 * 0 for the other statuses. On PostgreSQL it first folds other connections'
 * counts into this one's (a write: in the open batch or a transaction of its
 * own).
 */
int store_counts(struct store *st, store_stat_cb cb, void *ctx);
/* As store_custody_waiting (this node's rows in a relay's custody, per
 * destination and relay, with the earliest hand-over), from the counts. */
int store_counts_waiting(struct store *st, store_waiting_cb cb, void *ctx);
/* As store_custody_list (a relay's custody per origin and destination),
 * with the oldest copy found by one seek per life of the stream. */
int store_counts_custody(struct store *st, store_custody_cb cb, void *ctx);

/* ---- trace (store_trace.c): where is a message? ---------------------------- */

/* This node's own messages (origin = its id) of `key`, to `dest` (NULL or
 * "" = any destination), created at or after `since`, newest first, at most
 * limit; without the payloads, as store_outbound_list. */
int store_trace_own(struct store *st, const char *key, const char *dest,
		    int64_t since, unsigned limit, store_out_cb cb, void *ctx);

/* A received message's row in tb_0030 and its tb_0033 entry. */
struct trace_in {
	int found; /* the row is there (else compacted away, or never) */
	int result, ack_status;
	int64_t received_at;
	char via[SEMQ_ID_MAX + 1]; /* "" when direct */
};
struct trace_redo {
	int64_t id; /* 0: no entry */
	int status, tries;
	int64_t next_attempt_at;
	char last_error[1024]; /* "" when none; may be cut */
};
int store_trace_in(struct store *st, const struct msgid *id,
		   struct trace_in *in, struct trace_redo *rd);

/* The open transaction for plugins (borrowed while the store lives):
 * {SEMQ_DB_SQLITE, sqlite3 *} or {SEMQ_DB_PG, PGconn *}. */
const struct semq_plugin_tx *store_plugin_tx(struct store *st);

#endif
