/* SPDX-License-Identifier: MIT */
/*
 * What the files of the store-side protocol share (private: only node/proto*.c
 * include it; the interface is proto.h). proto.c holds the outbox, routing,
 * the id lists, the life of a proto, the entry points and the tick;
 * proto_recv.c receiving, proto_relay.c relaying, proto_confirm.c the 810
 * frames and queries, proto_resync.c stream state and periodic passes,
 * proto_send.c sending, proto_redo.c the redo schedule.
 */
#ifndef SEMQ_PROTO_INT_H
#define SEMQ_PROTO_INT_H

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "fault.h"
#include "log.h"
#include "proto.h"
#include "trace.h"
#include "wheel.h"

#define HELD_MAX 10000     /* messages held for a missing predecessor */
#define IDS_PER_FRAME 4096 /* ids / verdicts / answers per 810 frame */
#define DATA_FRAME_BYTES (256 * 1024) /* payload bytes per Data frame */
#define UNACKED_LIMIT 4096            /* indications repeated per pass */
#define INDOUBT_LIMIT 4096            /* queries per pass */
#define PURGE_EVERY_MS 60000
#define PURGE_LIMIT 10000
#define REDO_LIMIT 256    /* redo entries run per batch */
#define NUMBER_PER_TICK 1 /* batch_max times: new rows numbered a tick */
#define WHEEL_SLOTS 600
#define WHEEL_TICK_MS 100 /* one turn of the wheel = 60 s */
#define HORIZON_MS 60000  /* what the wheel holds ahead of now */
#define WHEEL_MAX 50000   /* entries the wheel holds at most */
#define NOTED_MAX 64      /* streams whose resync was logged this run */
#define REFUSALS (SEMQ__RELAY_REFUSAL__LOOP + 1) /* RelayAck reasons */

/* A list of node ids. */
struct names {
	char (*v)[SEMQ_ID_MAX + 1];
	size_t n, cap;
};

struct held {
	struct held *next;
	struct msg m; /* owns its payload */
	char via[SEMQ_ID_MAX + 1];
	unsigned need;
	uint64_t conn_id;
	int64_t since;
};

struct proto {
	struct store *st;
	struct plughost *ph;
	const struct config *c;
	struct routes *routes;
	struct held *held;
	size_t n_held;
	size_t held_bytes; /* their payloads */
	int more_to_send;
	int wm_dirty;
	int64_t last_unacked_pass;
	int64_t last_purge;
	int64_t now;            /* of the running send_pending() */
	int64_t bad_row_warned; /* last warning about a row the wire refuses */
	struct wheel *wheel;    /* redo and delayed entries due soon */
	int64_t filled_until;   /* the wheel holds all entries due before */
	int redo_dirty;         /* the schedule changed: scan again */
	double drain_tokens;    /* drain_rate: messages we may send now */
	int64_t drain_at;
	struct proto_counts cnt; /* this batch so far, for metrics */
	size_t stored;           /* copies this batch stored (crash points) */
	uint64_t life;           /* this node's (the database's) life */
	/* Destinations whose stream was found behind a peer in this run:
	 * the operator hears it once per stream (then at INFO). */
	char noted[NOTED_MAX][SEMQ_ID_MAX + 1];
	size_t n_noted;
	int unknown_due;           /* a peer came up: notify_unknown() now */
	int64_t last_unknown_pass; /* of notify_unknown() */
	int refusals_due;          /* a peer came up: repeat_refusals() now */
	uint64_t looped;           /* frames not passed on, since the start */
	int64_t last_refusal_pass; /* of repeat_refusals() */
	int64_t stale_logged_at;   /* last ERROR about a stale copy refused */
	/* Own streams whose ids go without their life (store_hide_life):
	 * loaded on first use, again after a rollback. */
	struct names hidden;
	int hidden_loaded;
	struct trace *trace; /* traces in progress (trace.c) */
	/* The store workers (proto.h): */
	int apply_only;         /* an apply worker's proto */
	int (*over)(void *ctx); /* the worker's slice is spent */
	void *over_ctx;
	size_t cut; /* on_data stopped before this message */
	int (*redo_out)(void *ctx, int64_t id, const char *origin);
	void *redo_ctx;
	int schedule_changed; /* for proto_take_schedule_changed() */
};

struct idlist {
	struct msgid *ids;
	int *results;    /* verdicts / answers; -1 = not received */
	uint64_t *highs; /* with a refusal: the refuser's high of the stream */
	size_t n, cap;
};

enum id_frame { IDF_INDICATION, IDF_RESPONSE, IDF_QUERY, IDF_QUERY_REPLY };

/* Per-connection id lists, for answers that go to several connections. */
struct connlists {
	struct {
		uint64_t conn;
		struct idlist l;
	} * v;
	size_t n, cap;
};

/*
 * Wire items (messages, ids, verdicts, answers) borrowed from a job's frame
 * and grouped by the connection they are forwarded to.
 */
struct fwd {
	struct {
		uint64_t conn;
		void **v;
		size_t n, cap;
	} * g;
	size_t n, cap;
};

/*
 * The streams a relay passed on in one frame, with the highest seq of each,
 * for its record (semq_stream_relay): written once per stream and frame.
 */
#define RELAYED_MAX 16

struct relayed {
	struct msgid id[RELAYED_MAX];
	size_t n;
};

/* The lists of one Data frame's answers. */
struct data_answers {
	struct idlist verdicts;  /* 810-Indications (and refusals) */
	struct idlist forwarded; /* RelayAck FORWARDED */
	struct idlist stored;    /* RelayAck STORED */
	/* RelayAck UNREACHABLE, by reason (RELAY_REFUSAL_*) */
	struct idlist refused[REFUSALS];
	char quota_why[SEMQ_ERRLEN]; /* the detail of a QUOTA refusal */
};

/*
 * What relaying one Data frame has looked up, so that a frame of one
 * stream reads the custody counters and the destination's record once:
 * the origin's custody and everyone's (what the copies of this frame add
 * included), and whether the last destination may be held for.
 */
struct relay_frame {
	char origin[SEMQ_ID_MAX + 1];
	struct custody_use use;
	char dest[SEMQ_ID_MAX + 1];
	int dest_refused; /* unknown for longer than unknown_dest_after */
	int64_t dest_since;
};

/* ---- proto.c ----------------------------------------------------------------- */

int names_add(struct names *l, const char *id);
int peer_up(const struct routes *r, const char *peer);
int conn_routed(const struct routes *r, uint64_t conn);
const struct route_hop *stream_hop(const struct routes *r,
				   const struct config *c, const char *toward,
				   const struct msgid *id);
uint64_t stream_conn(const struct routes *r, const struct config *c,
		     const char *toward, const struct msgid *id);
void idlist_free(struct idlist *l);
int idlist_add_high(struct idlist *l, const struct msgid *id, int result,
		    uint64_t high);
int idlist_add(struct idlist *l, const struct msgid *id, int result);
int verdict_from_wire(int result, int refusal, int dead);
int is_refusal(int res);
int emit_ids(struct proto *p, struct outbox *ob, uint64_t conn, int kind,
	     const struct idlist *l, const char *from);
struct idlist *connlists_get(struct connlists *cl, uint64_t conn);
int connlists_emit(struct proto *p, struct outbox *ob, struct connlists *cl,
		   int kind, const char *from);
void connlists_free(struct connlists *cl);
int in_redo(int result);
void count_receipt(struct proto *p, int rr, int result, const struct msg *m,
		   int64_t now);
int life_hidden(struct proto *p, const char *dest);
int hide_life(struct proto *p, const char *dest, const char *via);
int resolve_life(struct proto *p, struct msgid *id);
const char *id_text(const struct msgid *id, char *buf, size_t sz);

/* ---- proto_recv.c ------------------------------------------------------------ */

uint64_t stream_high(struct proto *p, const struct msgid *id);
const char *refusal_detail(const struct proto *p, int reason,
			   const struct data_answers *a);
int on_data(struct proto *p, const struct job *j, int64_t now,
	    struct outbox *ob);
int retry_held(struct proto *p, int64_t now, struct outbox *ob);

/* ---- proto_relay.c ----------------------------------------------------------- */

int fwd_add(struct fwd *f, uint64_t conn, void *item);
void fwd_free(struct fwd *f);
int fwd_emit(struct proto *p, struct outbox *ob, struct fwd *f, int body,
	     const char *from, const struct job *in);
uint64_t next_hop(const struct proto *p, const char *toward,
		  const struct msgid *id, uint64_t from_conn);
int emit_relay_ack(struct proto *p, struct outbox *ob, uint64_t conn, int kind,
		   int reason, int about_query, const struct idlist *l,
		   const char *detail);
int relayed_flush(struct proto *p, struct relayed *x, int64_t now);
int configured_dest(const struct proto *p, const char *dest);
int relay_one(struct proto *p, const struct job *j, Semq__Message *w,
	      struct msg *m, int64_t now, struct fwd *fw,
	      struct data_answers *a, struct relayed *rel,
	      struct relay_frame *rf);
int notify_unknown(struct proto *p, int64_t now, struct outbox *ob);
int repeat_refusals(struct proto *p, struct outbox *ob);
int64_t unknown_pass_ms(const struct proto *p);

/* ---- proto_confirm.c --------------------------------------------------------- */

int behind(struct proto *p, const char *dest, uint64_t high,
	   const char *reporter, const char *how, int64_t now);
int on_indication(struct proto *p, const struct job *j, int64_t now,
		  struct outbox *ob);
int on_response(struct proto *p, const struct job *j, struct outbox *ob);
int on_query(struct proto *p, const struct job *j, int64_t now,
	     struct outbox *ob);
int on_query_reply(struct proto *p, const struct job *j, int64_t now,
		   struct outbox *ob);
int undeliverable(struct proto *p, const struct msgid *id, const char *relay,
		  int reason, const char *detail, int64_t now,
		  struct idlist *retract_l, unsigned *newly);
int on_relay_ack(struct proto *p, const struct job *j, int64_t now,
		 struct outbox *ob);

/* ---- proto_resync.c ---------------------------------------------------------- */

int query_in_doubt(struct proto *p, int64_t now, int64_t due,
		   uint64_t only_conn, const struct routes *old,
		   struct outbox *ob);
int repeat_unacked(struct proto *p, int64_t before, const char *origin,
		   struct outbox *ob);
int on_routes(struct proto *p, const struct job *j, int64_t now,
	      struct outbox *ob);
const struct route_hop *hop_of(const struct proto *p, uint64_t conn);
int speaks_2(const struct proto *p, uint64_t conn);
int on_peer_up(struct proto *p, const struct job *j, int64_t now,
	       struct outbox *ob);
int on_stream_query(struct proto *p, const struct job *j, struct outbox *ob);
int on_stream_state(struct proto *p, const struct job *j, int64_t now,
		    struct outbox *ob);

/* ---- proto_send.c ------------------------------------------------------------ */

int send_pending(struct proto *p, int64_t now, struct outbox *ob);

/* ---- proto_redo.c ------------------------------------------------------------ */

int run_due_redo(struct proto *p, int64_t now);

#endif
