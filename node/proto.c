/* SPDX-License-Identifier: MIT */
/*
 * The protocol of SPEC §6 on the store side (see proto.h for the design).
 *
 * Every handler runs inside the worker's open batch and only queues answers
 * in the outbox; the worker sends them after the commit. Frames are built
 * from small growable arrays of wire structs whose strings point into the
 * struct msg / struct msgid values kept alongside, so nothing is copied twice.
 */
#include "proto.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "fault.h"
#include "log.h"
#include "report.h"
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

static int names_has(const struct names *l, const char *id)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->v[i], id))
			return 1;
	return 0;
}

static int names_add(struct names *l, const char *id)
{
	if (names_has(l, id))
		return SEMQ_OK;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		void *v = realloc(l->v, cap * sizeof *l->v);
		if (!v)
			return SEMQ_ERR_NOMEM;
		l->v = v;
		l->cap = cap;
	}
	snprintf(l->v[l->n++], sizeof l->v[0], "%s", id);
	return SEMQ_OK;
}

static int life_hidden(struct proto *p, const char *dest);
static const struct route_hop *hop_of(const struct proto *p, uint64_t conn);

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

/* ---- outbox ------------------------------------------------------------- */

void outbox_init(struct outbox *ob)
{
	memset(ob, 0, sizeof *ob);
}

void outbox_clear(struct outbox *ob)
{
	out_free_list(ob->head);
	outbox_init(ob);
}

void outbox_append(struct outbox *ob, struct outbox *from)
{
	if (!from->head)
		return;
	if (ob->tail)
		ob->tail->next = from->head;
	else
		ob->head = from->head;
	ob->tail = from->tail;
	ob->n += from->n;
	outbox_init(from);
}

int outbox_frame(struct outbox *ob, uint64_t conn_id, const Semq__Frame *f,
		 size_t max_frame)
{
	struct out *o;
	int r;

	o = calloc(1, sizeof *o);
	if (!o)
		return SEMQ_ERR_NOMEM;
	r = codec_encode(f, max_frame, &o->bytes, &o->len);
	if (r != SEMQ_OK) {
		free(o);
		return r;
	}
	o->conn_id = conn_id;
	if (ob->tail)
		ob->tail->next = o;
	else
		ob->head = o;
	ob->tail = o;
	ob->n++;
	return SEMQ_OK;
}

/* ---- routing ------------------------------------------------------------
 * Every frame about a message travels on the connection of its stream
 * (origin, dest): the next hop towards where it goes (the destination for
 * Data, tombstones, queries and 810-Responses; the origin for indications
 * and query replies) is found by name, then among that peer's instances
 * routes_pick() chooses by the stream, so all of a stream's frames take the
 * same instance (job.h). A peer with one instance is reached as before.
 */

/* Is some connection of `peer` in the routes? */
static int peer_up(const struct routes *r, const char *peer)
{
	size_t i;

	if (!r)
		return 0;
	for (i = 0; i < r->n_hops; i++)
		if (strcmp(r->hops[i].peer, peer) == 0)
			return 1;
	return 0;
}

/* Is connection `conn` in the routes? */
static int conn_routed(const struct routes *r, uint64_t conn)
{
	size_t i;

	for (i = 0; r && i < r->n_hops; i++)
		if (r->hops[i].conn_id == conn)
			return 1;
	return 0;
}

/* The peer through which `toward` is reached now: itself when connected,
 * else its [route], else [route] default; NULL when that peer is not
 * connected. Borrowed from r or c. */
static const char *next_peer(const struct routes *r, const struct config *c,
			     const char *toward)
{
	size_t i;

	if (peer_up(r, toward))
		return toward;
	for (i = 0; i < c->n_routes; i++)
		if (strcmp(c->routes[i].dest, toward) == 0)
			return peer_up(r, c->routes[i].via) ? c->routes[i].via
							    : NULL;
	for (i = 0; i < c->n_routes; i++)
		if (strcmp(c->routes[i].dest, "default") == 0)
			return peer_up(r, c->routes[i].via) ? c->routes[i].via
							    : NULL;
	return NULL;
}

/* The hop carrying the stream (origin, dest) towards `toward` (dest or
 * origin), or NULL. Borrowed from r. */
static const struct route_hop *stream_hop(const struct routes *r,
					  const struct config *c,
					  const char *toward,
					  const struct msgid *id)
{
	const char *peer = next_peer(r, c, toward);

	return peer ? routes_pick(r, peer, id->origin, id->dest) : NULL;
}

/* Its connection; 0 when none. */
static uint64_t stream_conn(const struct routes *r, const struct config *c,
			    const char *toward, const struct msgid *id)
{
	const struct route_hop *h = stream_hop(r, c, toward, id);

	return h ? h->conn_id : 0;
}

const struct route_hop *route_stream_hop(const struct routes *r,
					 const struct config *c,
					 const char *toward,
					 const struct msgid *id)
{
	return stream_hop(r, c, toward, id);
}

uint64_t route_lookup(const struct routes *r, const struct config *c,
		      const char *dest)
{
	struct msgid any;

	/* Which connection reaches dest at all; of several instances of the
	 * next hop, the one of the stream ("", dest). Frames of a stream go
	 * through stream_conn(). */
	memset(&any, 0, sizeof any);
	snprintf(any.dest, sizeof any.dest, "%s", dest);
	return stream_conn(r, c, dest, &any);
}

/* ---- growable lists of ids, verdicts, answers ---------------------------- */

struct idlist {
	struct msgid *ids;
	int *results;    /* verdicts / answers; -1 = not received */
	uint64_t *highs; /* with a refusal: the refuser's high of the stream */
	size_t n, cap;
};

static void idlist_free(struct idlist *l)
{
	free(l->ids);
	free(l->results);
	free(l->highs);
	memset(l, 0, sizeof *l);
}

static int idlist_add_high(struct idlist *l, const struct msgid *id, int result,
			   uint64_t high)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct msgid *ids = realloc(l->ids, cap * sizeof *ids);
		int *res;
		uint64_t *hi;
		if (!ids)
			return SEMQ_ERR_NOMEM;
		l->ids = ids;
		res = realloc(l->results, cap * sizeof *res);
		if (!res)
			return SEMQ_ERR_NOMEM;
		l->results = res;
		hi = realloc(l->highs, cap * sizeof *hi);
		if (!hi)
			return SEMQ_ERR_NOMEM;
		l->highs = hi;
		l->cap = cap;
	}
	l->ids[l->n] = *id;
	l->results[l->n] = result;
	l->highs[l->n] = high;
	l->n++;
	return SEMQ_OK;
}

static int idlist_add(struct idlist *l, const struct msgid *id, int result)
{
	return idlist_add_high(l, id, result, 0);
}

enum id_frame { IDF_INDICATION, IDF_RESPONSE, IDF_QUERY, IDF_QUERY_REPLY };

/*
 * A verdict (RES_*) as the wire carries it: RES_DEAD is REDO with `dead`,
 * RES_CONFLICT and RES_UNDECIDED are DUPLICATE with a refusal (fields of
 * wire revision 2, which a revision-1 node ignores; it never gets a
 * refusal, which only answers a message that carries a digest).
 */
static void verdict_to_wire(int res, Semq__Result *result,
			    Semq__Refusal *refusal, protobuf_c_boolean *dead)
{
	*refusal = SEMQ__REFUSAL__REFUSAL_NONE;
	*dead = 0;
	switch (res) {
	case RES_DEAD:
		*result = SEMQ__RESULT__RESULT_REDO;
		*dead = 1;
		break;
	case RES_CONFLICT:
	case RES_UNDECIDED:
		*result = SEMQ__RESULT__RESULT_DUPLICATE;
		*refusal = res == RES_CONFLICT
				   ? SEMQ__REFUSAL__REFUSAL_CONFLICT
				   : SEMQ__REFUSAL__REFUSAL_UNDECIDED;
		break;
	default: *result = res < 0 ? 0 : (Semq__Result)res; break;
	}
}

/* The other way round (the codec checked the combination). */
static int verdict_from_wire(int result, int refusal, int dead)
{
	if (refusal == SEMQ__REFUSAL__REFUSAL_CONFLICT)
		return RES_CONFLICT;
	if (refusal == SEMQ__REFUSAL__REFUSAL_UNDECIDED)
		return RES_UNDECIDED;
	if (dead)
		return RES_DEAD;
	return result;
}

static int is_refusal(int res)
{
	return res == RES_CONFLICT || res == RES_UNDECIDED;
}

/*
 * Emits the ids of `l` as frames of `kind` to conn, IDS_PER_FRAME at a time.
 * `from` is the AckResponse sender.
 */
static int emit_ids(struct proto *p, struct outbox *ob, uint64_t conn, int kind,
		    const struct idlist *l, const char *from)
{
	Semq__MsgId *wid = NULL, **pid = NULL;
	Semq__Verdict *wv = NULL, **pv = NULL;
	Semq__QueryAnswer *wa = NULL, **pa = NULL;
	size_t off, i, n;
	int r = SEMQ_OK;

	if (!conn || !l->n)
		return SEMQ_OK;
	n = l->n < IDS_PER_FRAME ? l->n : IDS_PER_FRAME;
	wid = calloc(n, sizeof *wid);
	pid = calloc(n, sizeof *pid);
	wv = calloc(n, sizeof *wv);
	pv = calloc(n, sizeof *pv);
	wa = calloc(n, sizeof *wa);
	pa = calloc(n, sizeof *pa);
	if (!wid || !pid || !wv || !pv || !wa || !pa) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	for (off = 0; off < l->n && r == SEMQ_OK; off += n) {
		Semq__Frame f = SEMQ__FRAME__INIT;
		Semq__AckIndication ind = SEMQ__ACK_INDICATION__INIT;
		Semq__AckResponse resp = SEMQ__ACK_RESPONSE__INIT;
		Semq__Query q = SEMQ__QUERY__INIT;
		Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
		size_t k = l->n - off < n ? l->n - off : n;

		for (i = 0; i < k; i++) {
			semq__msg_id__init(&wid[i]);
			codec_msgid_to_wire(&l->ids[off + i], &wid[i]);
			if (!strcmp(l->ids[off + i].origin, p->c->id) &&
			    life_hidden(p, l->ids[off + i].dest))
				wid[i].life = SEMQ_LIFE_NONE;
			pid[i] = &wid[i];
			semq__verdict__init(&wv[i]);
			wv[i].id = &wid[i];
			verdict_to_wire(l->results[off + i], &wv[i].result,
					&wv[i].refusal, &wv[i].dead);
			if (wv[i].refusal)
				wv[i].high = l->highs[off + i];
			pv[i] = &wv[i];
			semq__query_answer__init(&wa[i]);
			wa[i].id = &wid[i];
			wa[i].received = l->results[off + i] >= 0;
			wa[i].result = wv[i].result;
			wa[i].refusal = wv[i].refusal;
			wa[i].dead = wv[i].dead;
			wa[i].high = wv[i].high;
			pa[i] = &wa[i];
		}
		switch (kind) {
		case IDF_INDICATION:
			ind.n_verdicts = k;
			ind.verdicts = pv;
			f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
			f.ack_indication = &ind;
			break;
		case IDF_RESPONSE:
			resp.n_ids = k;
			resp.ids = pid;
			resp.from = (char *)from;
			f.body_case = SEMQ__FRAME__BODY_ACK_RESPONSE;
			f.ack_response = &resp;
			break;
		case IDF_QUERY:
			q.n_ids = k;
			q.ids = pid;
			f.body_case = SEMQ__FRAME__BODY_QUERY;
			f.query = &q;
			break;
		default:
			qr.n_answers = k;
			qr.answers = pa;
			f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
			f.query_reply = &qr;
			break;
		}
		r = outbox_frame(ob, conn, &f, p->c->max_frame);
	}
out:
	free(wid);
	free(pid);
	free(wv);
	free(pv);
	free(wa);
	free(pa);
	return r;
}

/* Per-connection id lists, for answers that go to several connections. */
struct connlists {
	struct {
		uint64_t conn;
		struct idlist l;
	} * v;
	size_t n, cap;
};

static struct idlist *connlists_get(struct connlists *cl, uint64_t conn)
{
	size_t i;

	for (i = 0; i < cl->n; i++)
		if (cl->v[i].conn == conn)
			return &cl->v[i].l;
	if (cl->n == cl->cap) {
		size_t cap = cl->cap ? cl->cap * 2 : 8;
		void *v = realloc(cl->v, cap * sizeof *cl->v);
		if (!v)
			return NULL;
		cl->v = v;
		cl->cap = cap;
	}
	cl->v[cl->n].conn = conn;
	memset(&cl->v[cl->n].l, 0, sizeof cl->v[cl->n].l);
	return &cl->v[cl->n++].l;
}

static int connlists_emit(struct proto *p, struct outbox *ob,
			  struct connlists *cl, int kind, const char *from)
{
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; i < cl->n && r == SEMQ_OK; i++)
		r = emit_ids(p, ob, cl->v[i].conn, kind, &cl->v[i].l, from);
	return r;
}

static void connlists_free(struct connlists *cl)
{
	size_t i;

	for (i = 0; i < cl->n; i++)
		idlist_free(&cl->v[i].l);
	free(cl->v);
	memset(cl, 0, sizeof *cl);
}

/* ---- life ---------------------------------------------------------------- */

struct proto *proto_new(struct store *st, struct plughost *ph,
			const struct config *c)
{
	struct proto *p = calloc(1, sizeof *p);

	if (!p)
		return NULL;
	p->st = st;
	p->ph = ph;
	p->c = c;
	p->more_to_send = 1;
	p->wm_dirty = 1; /* AS_OK rows a crash left uncompacted */
	p->life = store_life(st);
	p->trace = trace_new(st, c);
	if (!p->trace) {
		free(p);
		return NULL;
	}
	return p;
}

static void held_free_all(struct proto *p)
{
	while (p->held) {
		struct held *h = p->held;
		p->held = h->next;
		msg_clear(&h->m);
		free(h);
	}
	p->n_held = 0;
	p->held_bytes = 0;
}

void proto_free(struct proto *p)
{
	if (!p)
		return;
	held_free_all(p);
	routes_free(p->routes);
	wheel_free(p->wheel);
	trace_free(p->trace);
	free(p->hidden.v);
	free(p);
}

size_t proto_held_bytes(const struct proto *p)
{
	return p->held_bytes + p->n_held * sizeof(struct held);
}

int proto_busy(const struct proto *p)
{
	return p->more_to_send && p->routes && p->routes->n_hops;
}

void proto_committed(struct proto *p)
{
	if (p->cnt.confirmed)
		fault_point("origin_after_commit");
	if (p->stored)
		fault_point("relay_store_after_commit");
	p->stored = 0;
}

void proto_rolled_back(struct proto *p)
{
	/* What the batch marked sent is back at 0: look again. The wheel may
	 * hold entries loaded inside the rolled-back transaction (their ids
	 * can be reused): rebuild it from the table. */
	p->more_to_send = 1;
	wheel_free(p->wheel);
	p->wheel = NULL;
	p->redo_dirty = 1;
	memset(&p->cnt, 0, sizeof p->cnt);
	p->stored = 0;
	p->unknown_due = 1;
	p->refusals_due = 1;
	p->hidden.n = 0;
	p->hidden_loaded = 0;
}

void proto_take_counts(struct proto *p, struct proto_counts *c)
{
	c->sent += p->cnt.sent;
	c->confirmed += p->cnt.confirmed;
	c->received += p->cnt.received;
	c->duplicates += p->cnt.duplicates;
	c->redo_created += p->cnt.redo_created;
	c->refused += p->cnt.refused;
	c->resyncs += p->cnt.resyncs;
	c->renumbered += p->cnt.renumbered;
	c->held += p->cnt.held;
	for (size_t i = 0; i < 8; i++)
		c->relay_refused[i] += p->cnt.relay_refused[i];
	c->undeliverable += p->cnt.undeliverable;
	c->looped += p->cnt.looped;
	c->relay_forwarded += p->cnt.relay_forwarded;
	c->relay_stored += p->cnt.relay_stored;
	for (size_t i = 0; i < PROTO_LATENCY_N; i++)
		c->latency[i] += p->cnt.latency[i];
	c->latency_sum_ms += p->cnt.latency_sum_ms;
	c->traces_refused += trace_take_refused(p->trace);
	memset(&p->cnt, 0, sizeof p->cnt);
}

/* The receipt made (or found) an entry in the redo queue. */
static int in_redo(int result)
{
	return result == RES_REDO || result == RES_SCHEDULED ||
	       result == RES_DEAD;
}

const int64_t proto_latency_bounds_ms[PROTO_LATENCY_N - 1] = {
	10,   25,    50,    100,   250,    500,    1000,   2500,
	5000, 10000, 30000, 60000, 300000, 900000, 3600000};

/* Counts what store_receive() answered (rr) for m at now for metrics. */
static void count_receipt(struct proto *p, int rr, int result,
			  const struct msg *m, int64_t now)
{
	int64_t age;
	size_t k;

	if (rr == SEMQ_DUPLICATE)
		p->cnt.duplicates++;
	if (rr == SEMQ_DECLINED)
		p->cnt.refused++;
	if (rr != SEMQ_OK)
		return;
	p->cnt.received++;
	if (in_redo(result))
		p->cnt.redo_created++;
	age = m->created_at > 0 && now > m->created_at ? now - m->created_at
						       : 0;
	for (k = 0; k < PROTO_LATENCY_N - 1; k++)
		if (age <= proto_latency_bounds_ms[k])
			break;
	p->cnt.latency[k]++;
	p->cnt.latency_sum_ms += (uint64_t)age;
}

/* ---- lives ----------------------------------------------------------------- */

/*
 * An id from a revision-1 peer has no life (0): it is about the stream's
 * current life here — this node's own when it is the origin, else the one
 * that began here last (store_current_life). docs/PROTOCOL.md, "The life
 * id".
 */
static int hidden_cb(void *ctx, const struct out_stream *os)
{
	struct names *l = ctx;

	return os->life_hidden && names_add(l, os->dest) != SEMQ_OK;
}

/* Does this node's stream to dest go without its life (a revision-1 node
 * carried it)? */
static int life_hidden(struct proto *p, const char *dest)
{
	if (!p->hidden_loaded) {
		p->hidden.n = 0;
		if (store_streams_out(p->st, hidden_cb, &p->hidden) != SEMQ_OK)
			return 0; /* the batch fails on its next read */
		p->hidden_loaded = 1;
	}
	return names_has(&p->hidden, dest);
}

/*
 * This node's stream to dest goes through `via`, a node of wire revision 1:
 * a store-and-forward copy it keeps loses the life, so the destination
 * files what it gets with and without it under two streams. From now on the
 * stream's ids go without the life, and every answer about them is taken
 * for this node's life (docs/PROTOCOL.md, "What holds in a mixed fleet").
 */
static int hide_life(struct proto *p, const char *dest, const char *via)
{
	int r;

	if (life_hidden(p, dest))
		return SEMQ_OK;
	r = store_hide_life(p->st, dest);
	if (r != SEMQ_OK && r != SEMQ_DECLINED)
		return r;
	r = names_add(&p->hidden, dest);
	if (r == SEMQ_OK)
		log_msg(LOG_WARN, "proto", via, NULL,
			"stream %s->%s goes through %s, which runs SEMQ 0.1: "
			"its messages go without this database's life from now "
			"on (a restore or re-image of this node is not told "
			"apart on it); upgrade %s",
			p->c->id, dest, via, via);
	return r;
}

static int resolve_life(struct proto *p, struct msgid *id)
{
	if (strcmp(id->origin, p->c->id) == 0) {
		/* Own: no life given, or one the destination resolved for a
		 * stream that goes without it. */
		if (id->life == SEMQ_LIFE_NONE ||
		    (id->life != p->life && life_hidden(p, id->dest)))
			id->life = p->life;
		return SEMQ_OK;
	}
	if (id->life != SEMQ_LIFE_NONE)
		return SEMQ_OK;
	return store_current_life(p->st, id->origin, id->dest, &id->life);
}

/* "R1/S1/7" and, unless it is this node's or the legacy life, "@LIFE". */
static const char *id_text(const struct msgid *id, char *buf, size_t sz)
{
	char lb[SEMQ_LIFE_STRLEN];
	size_t n;

	msgid_str(id, buf, sz);
	n = strlen(buf);
	if (id->life > SEMQ_LIFE_LEGACY && n + 18 < sz)
		snprintf(buf + n, sz - n, "@%s",
			 semq_life_str(id->life, lb, sizeof lb));
	return buf;
}

/* ---- receiving ----------------------------------------------------------- */

static int same_id(const struct msgid *a, const struct msgid *b)
{
	return a->seq == b->seq && a->life == b->life &&
	       strcmp(a->origin, b->origin) == 0 &&
	       strcmp(a->dest, b->dest) == 0;
}

static int is_held(const struct proto *p, const struct msgid *id)
{
	const struct held *h;

	for (h = p->held; h; h = h->next)
		if (same_id(&h->m.id, id))
			return 1;
	return 0;
}

static int hold(struct proto *p, const struct msg *m, const char *via,
		unsigned need, uint64_t conn, int64_t now)
{
	struct held *h;

	if (is_held(p, &m->id))
		return SEMQ_OK;
	/* At most HELD_MAX, and a quarter of [node] memory_budget. */
	if (p->n_held >= HELD_MAX ||
	    p->held_bytes + m->payload_len > p->c->memory_budget / 4) {
		log_msg(LOG_WARN, "proto", via, &m->id,
			"dropped: %zu messages (%zu bytes) already wait for "
			"predecessors; the sender will resend",
			p->n_held, p->held_bytes);
		return SEMQ_OK;
	}
	h = calloc(1, sizeof *h);
	if (!h)
		return SEMQ_ERR_NOMEM;
	h->m = *m;
	h->m.payload = NULL;
	if (m->payload_len) {
		h->m.payload = malloc(m->payload_len);
		if (!h->m.payload) {
			free(h);
			return SEMQ_ERR_NOMEM;
		}
		memcpy(h->m.payload, m->payload, m->payload_len);
	}
	if (via)
		snprintf(h->via, sizeof h->via, "%s", via);
	h->need = need;
	h->conn_id = conn;
	h->since = now;
	h->next = p->held;
	p->held = h;
	p->n_held++;
	p->held_bytes += m->payload_len;
	log_msg(LOG_DEBUG, "proto", via, &m->id,
		"held: predecessor %" PRIu64 " not yet received", m->prev_seq);
	return SEMQ_OK;
}

/*
 * Records one message addressed to this node. *verdict gets the result to
 * report, or -1 when it was held (no verdict yet).
 */
/* The highest seq of m's stream this node has seen: what a refusal tells
 * the origin to move past. */
static uint64_t stream_high(struct proto *p, const struct msgid *id)
{
	uint64_t high = 0;

	if (strcmp(id->dest, p->c->id) == 0)
		(void)store_stream_high(p->st, id->origin, id->dest, id->life,
					&high);
	else
		(void)store_relay_high(p->st, id->origin, id->dest, id->life,
				       &high);
	return high > id->seq ? high : id->seq;
}

static int receive_one(struct proto *p, const struct msg *m, const char *via,
		       unsigned need, uint64_t conn, int64_t now, int *verdict)
{
	char err[SEMQ_ERRLEN] = "";
	int result = -1, r;

	r = store_receive(p->st, m, via, need, now, plughost_apply, p->ph,
			  &result, err, sizeof err);
	count_receipt(p, r, result, m, now);
	switch (r) {
	case SEMQ_OK:
		*verdict = result;
		if (in_redo(result))
			p->redo_dirty = p->schedule_changed = 1;
		/* A failure of the plugin: the store logged it (dead, or the
		 * retry scheduled, with its redo entry). */
		if (result == RES_REDO || result == RES_DEAD)
			log_msg(err[0] ? LOG_DEBUG : LOG_INFO, "proto", via,
				&m->id, "%s",
				err[0] ? err
				       : "waiting in the redo queue behind an "
					 "earlier message of its key");
		return SEMQ_OK;
	case SEMQ_DUPLICATE:
		/* What it became the first time (the origin records that);
		 * a cancel of something whose record is gone took effect. */
		*verdict = result;
		if (m->tombstone && result == RES_DUPLICATE)
			*verdict = RES_PROCESSED;
		return SEMQ_OK;
	case SEMQ_DECLINED:
		/* Another message under this seq, or no longer known: not
		 * applied, not recorded; its origin renumbers or holds it. */
		*verdict = result;
		log_msg(LOG_WARN, "proto", via, &m->id, "refused (%s): %s",
			result == RES_CONFLICT ? "conflict" : "undecided",
			err[0] ? err : "");
		return SEMQ_OK;
	case SEMQ_AGAIN: *verdict = -1; return hold(p, m, via, need, conn, now);
	default:
		log_msg(LOG_ERROR, "proto", via, &m->id, "receive failed: %s",
			err[0] ? err : semq_strerror(r));
		return r;
	}
}

/* ---- relaying -------------------------------------------------------------- */

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

static int fwd_add(struct fwd *f, uint64_t conn, void *item)
{
	size_t i;

	for (i = 0; i < f->n && f->g[i].conn != conn; i++)
		;
	if (i == f->n) {
		if (f->n == f->cap) {
			size_t cap = f->cap ? f->cap * 2 : 4;
			void *g = realloc(f->g, cap * sizeof *f->g);
			if (!g)
				return SEMQ_ERR_NOMEM;
			f->g = g;
			f->cap = cap;
		}
		memset(&f->g[i], 0, sizeof f->g[i]);
		f->g[i].conn = conn;
		f->n++;
	}
	if (f->g[i].n == f->g[i].cap) {
		size_t cap = f->g[i].cap ? f->g[i].cap * 2 : 16;
		void *v = realloc(f->g[i].v, cap * sizeof *f->g[i].v);
		if (!v)
			return SEMQ_ERR_NOMEM;
		f->g[i].v = v;
		f->g[i].cap = cap;
	}
	f->g[i].v[f->g[i].n++] = item;
	return SEMQ_OK;
}

static void fwd_free(struct fwd *f)
{
	size_t i;

	for (i = 0; i < f->n; i++)
		free(f->g[i].v);
	free(f->g);
	memset(f, 0, sizeof *f);
}

/* Emits each group as one frame of the given body (same `from` for
 * responses). Items per frame stay under the codec's limits. */
/*
 * Passes frames on (Data, AckIndication, AckResponse, Query, QueryReply),
 * one relay further than `in` came (Frame.hops). An AckIndication, an
 * AckResponse, a Query or a QueryReply that would pass more than max_hops
 * relays is not passed on: routes that go round in a circle would keep it
 * circling for ever (a Data's messages carry their own hops, refused with
 * LOOP). Counted, and logged the first time and every 1000th.
 */
static int fwd_emit(struct proto *p, struct outbox *ob, struct fwd *f, int body,
		    const char *from, const struct job *in)
{
	unsigned hops = in && in->frame ? in->frame->hops + 1 : 1;
	size_t i, off;
	int r = SEMQ_OK;

	if (body != SEMQ__FRAME__BODY_DATA && hops > p->c->max_hops && f->n) {
		if (p->looped % 1000 == 0)
			log_msg(LOG_WARN, "proto", in ? in->peer : NULL, NULL,
				"not passing on a frame that has passed %u "
				"relays ([node] max_hops %u): a routing loop? "
				"(%" PRIu64 " such frames so far)",
				hops - 1, p->c->max_hops, p->looped + 1);
		p->looped++;
		p->cnt.looped++;
		return SEMQ_OK;
	}

	for (i = 0; i < f->n && r == SEMQ_OK; i++) {
		for (off = 0; off < f->g[i].n && r == SEMQ_OK;
		     off += IDS_PER_FRAME) {
			size_t k = f->g[i].n - off;
			Semq__Frame fr = SEMQ__FRAME__INIT;
			Semq__Data d = SEMQ__DATA__INIT;
			Semq__AckIndication ind = SEMQ__ACK_INDICATION__INIT;
			Semq__AckResponse resp = SEMQ__ACK_RESPONSE__INIT;
			Semq__Query q = SEMQ__QUERY__INIT;
			Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
			void **v = f->g[i].v + off;

			if (k > IDS_PER_FRAME)
				k = IDS_PER_FRAME;
			fr.body_case = body;
			fr.hops = hops > SEMQ_HOPS_MAX ? SEMQ_HOPS_MAX : hops;
			switch (body) {
			case SEMQ__FRAME__BODY_DATA:
				d.n_messages = k;
				d.messages = (Semq__Message **)v;
				fr.data = &d;
				break;
			case SEMQ__FRAME__BODY_ACK_INDICATION:
				ind.n_verdicts = k;
				ind.verdicts = (Semq__Verdict **)v;
				fr.ack_indication = &ind;
				break;
			case SEMQ__FRAME__BODY_ACK_RESPONSE:
				resp.n_ids = k;
				resp.ids = (Semq__MsgId **)v;
				resp.from = (char *)from;
				fr.ack_response = &resp;
				break;
			case SEMQ__FRAME__BODY_QUERY:
				q.n_ids = k;
				q.ids = (Semq__MsgId **)v;
				fr.query = &q;
				break;
			default:
				qr.n_answers = k;
				qr.answers = (Semq__QueryAnswer **)v;
				fr.query_reply = &qr;
				break;
			}
			r = outbox_frame(ob, f->g[i].conn, &fr,
					 p->c->max_frame);
		}
	}
	return r;
}

/* The connection of the stream of `id` towards `toward` (its dest, or its
 * origin for answers), never the connection the frame came from. */
static uint64_t next_hop(const struct proto *p, const char *toward,
			 const struct msgid *id, uint64_t from_conn)
{
	uint64_t conn = stream_conn(p->routes, p->c, toward, id);

	return conn == from_conn ? 0 : conn;
}

/* A RelayAck of `kind` for the ids of l; `reason` (RELAY_REFUSAL_*) with
 * UNREACHABLE, `about_query` when it answers a Query. */
static int emit_relay_ack(struct proto *p, struct outbox *ob, uint64_t conn,
			  int kind, int reason, int about_query,
			  const struct idlist *l, const char *detail)
{
	Semq__MsgId *w;
	Semq__MsgId **pw;
	size_t i, off, n;
	int r = SEMQ_OK;

	if (!conn || !l->n)
		return SEMQ_OK;
	n = l->n < IDS_PER_FRAME ? l->n : IDS_PER_FRAME;
	w = calloc(n, sizeof *w);
	pw = calloc(n, sizeof *pw);
	if (!w || !pw) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	for (off = 0; off < l->n && r == SEMQ_OK; off += n) {
		Semq__Frame f = SEMQ__FRAME__INIT;
		Semq__RelayAck ra = SEMQ__RELAY_ACK__INIT;
		size_t k = l->n - off < n ? l->n - off : n;

		for (i = 0; i < k; i++) {
			semq__msg_id__init(&w[i]);
			codec_msgid_to_wire(&l->ids[off + i], &w[i]);
			pw[i] = &w[i];
		}
		ra.n_ids = k;
		ra.ids = pw;
		ra.kind = kind;
		ra.reason = reason;
		ra.about_query = about_query;
		ra.detail = (char *)(detail ? detail : "");
		f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
		f.relay_ack = &ra;
		r = outbox_frame(ob, conn, &f, p->c->max_frame);
	}
out:
	free(w);
	free(pw);
	return r;
}

/*
 * The streams a relay passed on in one frame, with the highest seq of each,
 * for its record (semq_stream_relay): written once per stream and frame.
 */
#define RELAYED_MAX 16
struct relayed {
	struct msgid id[RELAYED_MAX];
	size_t n;
};

static int relayed_flush(struct proto *p, struct relayed *x, int64_t now)
{
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; i < x->n && r == SEMQ_OK; i++)
		r = store_relay_note(p->st, x->id[i].origin, x->id[i].dest,
				     x->id[i].life, x->id[i].seq, now);
	x->n = 0;
	return r;
}

static int relayed_add(struct proto *p, struct relayed *x,
		       const struct msgid *id, int64_t now)
{
	size_t i;
	int r;

	for (i = 0; i < x->n; i++)
		if (x->id[i].life == id->life &&
		    !strcmp(x->id[i].origin, id->origin) &&
		    !strcmp(x->id[i].dest, id->dest)) {
			if (id->seq > x->id[i].seq)
				x->id[i].seq = id->seq;
			return SEMQ_OK;
		}
	if (x->n == RELAYED_MAX && (r = relayed_flush(p, x, now)) != SEMQ_OK)
		return r;
	x->id[x->n++] = *id;
	return SEMQ_OK;
}

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

/* Does this node's configuration name `dest` ([peer], [route]), or send
 * every destination on ([route] default, a further relay decides)? */
static int configured_dest(const struct proto *p, const char *dest)
{
	size_t i;

	if (config_peer(p->c, dest))
		return 1;
	for (i = 0; i < p->c->n_routes; i++)
		if (!strcmp(p->c->routes[i].dest, dest) ||
		    !strcmp(p->c->routes[i].dest, "default"))
			return 1;
	return 0;
}

/* May copies for dest (not connected now) be held? A destination that has
 * never been connected here and that the configuration does not name is
 * held for unknown_dest_after from its first copy, then refused. */
static int dest_refused(struct proto *p, struct relay_frame *rf,
			const char *dest, int64_t now, int *refused)
{
	int64_t first = now;
	int seen = 0, r = SEMQ_OK;

	if (strcmp(rf->dest, dest) != 0) {
		rf->dest_refused = 0;
		rf->dest_since = now;
		if (!configured_dest(p, dest)) {
			r = store_dest_note(p->st, dest, now, &first, &seen);
			rf->dest_refused =
				r == SEMQ_OK && !seen &&
				now - first >= p->c->unknown_dest_after_ms;
			rf->dest_since = first;
		}
		if (r == SEMQ_OK)
			snprintf(rf->dest, sizeof rf->dest, "%s", dest);
	}
	*refused = rf->dest_refused;
	return r;
}

/* Would one more copy of m go over a custody quota? *why says which. */
static int over_quota(struct proto *p, struct relay_frame *rf,
		      const struct msg *m, int *over, char *why, size_t whysz)
{
	const struct config *c = p->c;
	const struct custody_use *u = &rf->use;
	int64_t len = (int64_t)m->payload_len;
	int r = SEMQ_OK;

	*over = 0;
	if (strcmp(rf->origin, m->id.origin) != 0) {
		/* Read in this transaction: the copies stored so far count
		 * (semq_custody's triggers ran); then kept up to date here. */
		r = store_custody_use(p->st, m->id.origin, &rf->use);
		if (r != SEMQ_OK)
			return r;
		snprintf(rf->origin, sizeof rf->origin, "%s", m->id.origin);
	}
	if (m->tombstone) /* a cancel only ever frees space */
		return SEMQ_OK;
	if (u->messages + 1 > (int64_t)c->quota_messages_per_origin ||
	    u->bytes + len > (int64_t)c->quota_bytes_per_origin) {
		*over = 1;
		snprintf(why, whysz,
			 "the custody quota of origin %s is full (%" PRId64
			 " messages, %" PRId64 " bytes held; [relay] "
			 "quota_messages_per_origin %u, "
			 "quota_bytes_per_origin %zu)",
			 m->id.origin, u->messages, u->bytes,
			 c->quota_messages_per_origin,
			 c->quota_bytes_per_origin);
	} else if (u->all_messages + 1 > (int64_t)c->quota_messages ||
		   u->all_bytes + len > (int64_t)c->quota_bytes) {
		*over = 1;
		snprintf(why, whysz,
			 "the relay's custody quota is full (%" PRId64
			 " messages, %" PRId64 " bytes held for all origins; "
			 "[relay] quota_messages %u, quota_bytes %zu)",
			 u->all_messages, u->all_bytes, c->quota_messages,
			 c->quota_bytes);
	}
	return SEMQ_OK;
}

/*
 * A message for another node: forward it when its next hop is connected,
 * else keep a copy (store_and_forward) within the custody quotas, else
 * refuse it with a reason. The sender learns which with a RelayAck, sent
 * after the commit that stored any copy. A copy of that id held here
 * already is custody (the same message: answered STORED, never forwarded
 * around the copy; its cancel replaces it) or a conflict (another message
 * under its id: refused with CONFLICT towards the origin, which renumbers
 * it; docs/PROTOCOL.md, "The digest"). A destination never seen here is
 * held for unknown_dest_after, then refused (docs/PROTOCOL.md, "Custody").
 */
static int relay_one(struct proto *p, const struct job *j, Semq__Message *w,
		     struct msg *m, int64_t now, struct fwd *fw,
		     struct data_answers *a, struct relayed *rel,
		     struct relay_frame *rf)
{
	char idb[MSGID_STRLEN + 20];
	uint64_t conn, have = 0;
	int r, status, refused = 0, over = 0;

	if (!p->c->relay)
		return idlist_add(&a->refused[SEMQ__RELAY_REFUSAL__NOT_A_RELAY],
				  &m->id, 0);
	/* Passing this relay: one hop more, if it may (a routing loop
	 * ends here). The copy kept and the frame passed on carry it. */
	if (m->hops + 1 > p->c->max_hops) {
		p->cnt.relay_refused[SEMQ__RELAY_REFUSAL__LOOP]++;
		return idlist_add(&a->refused[SEMQ__RELAY_REFUSAL__LOOP],
				  &m->id, 0);
	}
	m->hops++;
	w->hops = m->hops;
	if (m->payload_len > p->c->max_payload) {
		log_msg(LOG_WARN, "proto", j->peer, &m->id,
			"refused: a payload of %zu bytes is over this relay's "
			"max_payload (%zu)",
			m->payload_len, p->c->max_payload);
		return idlist_add(&a->refused[SEMQ__RELAY_REFUSAL__TOO_BIG],
				  &m->id, 0);
	}
	r = resolve_life(p, &m->id);
	if (r != SEMQ_OK)
		return r;
	conn = next_hop(p, m->id.dest, &m->id, j->conn_id);
	r = store_outbound_state(p->st, &m->id, &status, &have);
	if (r == SEMQ_OK) {
		if (have && m->id.digest && have != m->id.digest) {
			log_msg(LOG_WARN, "proto", j->peer, &m->id,
				"refused (conflict): %s: a copy of another "
				"message is held here under this id; its "
				"origin renumbers it",
				id_text(&m->id, idb, sizeof idb));
			p->cnt.refused++;
			return idlist_add_high(&a->verdicts, &m->id,
					       RES_CONFLICT,
					       stream_high(p, &m->id));
		}
		if (status == SS_HELD) {
			/* Held as undeliverable, and sent again by its
			 * origin's operator: out again if the destination
			 * is known by now. */
			if (!conn)
				r = dest_refused(p, rf, m->id.dest, now,
						 &refused);
			if (r == SEMQ_OK && refused) {
				p->cnt.relay_refused
					[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST]++;
				return idlist_add(
					&a->refused
						 [SEMQ__RELAY_REFUSAL__UNKNOWN_DEST],
					&m->id, 0);
			}
			if (r == SEMQ_OK)
				r = store_copy_unhold(p->st, &m->id, now);
			if (r == SEMQ_DECLINED) /* held for another reason */
				r = SEMQ_OK;
			else if (r == SEMQ_OK)
				p->more_to_send = 1;
		} else if (m->tombstone && status != SS_CANCELLED) {
			/* Its origin cancelled it: the copy becomes the
			 * cancel, delivered in its place. */
			r = store_copy_cancel(p->st, &m->id, now);
			if (r == SEMQ_DECLINED)
				r = SEMQ_OK;
			else if (r == SEMQ_OK)
				log_msg(LOG_INFO, "proto", j->peer, &m->id,
					"cancelled by its origin: the copy "
					"held here is replaced by the cancel");
			p->more_to_send = 1;
		}
		return r ? r : idlist_add(&a->stored, &m->id, 0);
	}
	if (r != SEMQ_ERR_NOT_FOUND)
		return r;
	if (conn) {
		r = fwd_add(fw, conn, w);
		if (r == SEMQ_OK)
			r = relayed_add(p, rel, &m->id, now);
		if (r == SEMQ_OK)
			p->cnt.relay_forwarded++;
		return r ? r : idlist_add(&a->forwarded, &m->id, 0);
	}
	if (!p->c->store_and_forward)
		return idlist_add(
			&a->refused[SEMQ__RELAY_REFUSAL__NOT_CONNECTED], &m->id,
			0);
	r = dest_refused(p, rf, m->id.dest, now, &refused);
	if (r == SEMQ_OK && refused) {
		p->cnt.relay_refused[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST]++;
		return idlist_add(
			&a->refused[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST], &m->id,
			0);
	}
	if (r == SEMQ_OK)
		r = over_quota(p, rf, m, &over, a->quota_why,
			       sizeof a->quota_why);
	if (r != SEMQ_OK)
		return r;
	if (over) {
		p->cnt.relay_refused[SEMQ__RELAY_REFUSAL__QUOTA]++;
		return idlist_add(&a->refused[SEMQ__RELAY_REFUSAL__QUOTA],
				  &m->id, 0);
	}
	r = store_enqueue_copy(p->st, m, now);
	if (r == SEMQ_DECLINED) { /* another message's copy, meanwhile */
		p->cnt.refused++;
		return idlist_add_high(&a->verdicts, &m->id, RES_CONFLICT,
				       stream_high(p, &m->id));
	}
	if (r != SEMQ_OK && r != SEMQ_DUPLICATE) {
		log_msg(LOG_ERROR, "proto", j->peer, &m->id,
			"cannot store a copy: %s", store_errmsg(p->st));
		return r;
	}
	if (r == SEMQ_OK) {
		p->stored++;
		p->cnt.relay_stored++;
		rf->use.messages++;
		rf->use.bytes += (int64_t)m->payload_len;
		rf->use.all_messages++;
		rf->use.all_bytes += (int64_t)m->payload_len;
		fault_point("relay_store_before_commit");
	}
	p->more_to_send = 1;
	r = relayed_add(p, rel, &m->id, now);
	return r ? r : idlist_add(&a->stored, &m->id, 0);
}

/* What a refusal of each reason says to the sender. */
static const char *refusal_detail(const struct proto *p, int reason,
				  const struct data_answers *a)
{
	switch (reason) {
	case SEMQ__RELAY_REFUSAL__NOT_CONNECTED:
		return p->c->relay ? "destination not connected"
				   : "this node does not relay";
	case SEMQ__RELAY_REFUSAL__QUOTA: return a ? a->quota_why : "";
	case SEMQ__RELAY_REFUSAL__UNKNOWN_DEST:
		return "destination unknown: never connected to this relay "
		       "within [relay] unknown_dest_after";
	case SEMQ__RELAY_REFUSAL__TOO_BIG:
		return "payload over the relay's max_payload";
	case SEMQ__RELAY_REFUSAL__NOT_A_RELAY:
		return "this node does not relay";
	case SEMQ__RELAY_REFUSAL__LOOP:
		return "it has passed [node] max_hops relays: a routing loop";
	}
	return "";
}

/* The operator hears of refused custody once per frame and reason. */
static void log_refusals(const struct proto *p, const struct job *j,
			 const struct data_answers *a)
{
	const struct idlist *q = &a->refused[SEMQ__RELAY_REFUSAL__QUOTA];
	const struct idlist *u = &a->refused[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST];
	const struct idlist *l = &a->refused[SEMQ__RELAY_REFUSAL__LOOP];

	if (q->n)
		log_msg(LOG_WARN, "proto", j->peer, &q->ids[0],
			"custody of %zu message(s) refused: %s; the origin "
			"keeps them and tries again later",
			q->n, a->quota_why);
	if (u->n)
		log_msg(LOG_WARN, "proto", j->peer, &u->ids[0],
			"%zu message(s) for %s refused as undeliverable: "
			"%s has never been connected to this relay within "
			"[relay] unknown_dest_after (%" PRId64 " ms); their "
			"origin puts them dead for its operator",
			u->n, u->ids[0].dest, u->ids[0].dest,
			p->c->unknown_dest_after_ms);
	if (l->n)
		log_msg(LOG_WARN, "proto", j->peer, &l->ids[0],
			"%zu message(s) refused: they have passed [node] "
			"max_hops (%u) relays, a routing loop (check [route] "
			"on the relays); their origin puts them dead",
			l->n, p->c->max_hops);
}

static int on_data(struct proto *p, const struct job *j, int64_t now,
		   struct outbox *ob)
{
	const Semq__Data *d = j->frame->data;
	struct data_answers a;
	struct relayed rel;
	struct relay_frame rf;
	struct fwd fw = {0};
	size_t i;
	int r = SEMQ_OK, k;

	memset(&a, 0, sizeof a);
	memset(&rf, 0, sizeof rf);
	rel.n = 0;
	p->cut = 0;
	for (i = j->done; i < d->n_messages && r == SEMQ_OK; i++) {
		struct msg m;
		const char *via;
		unsigned need;
		int v = -1;

		if (i > j->done && p->over && p->over(p->over_ctx)) {
			p->cut = i; /* the rest in the next transaction */
			break;
		}
		codec_msg_from_wire(d->messages[i], &m);
		if (strcmp(m.id.dest, p->c->id) != 0) {
			r = relay_one(p, j, d->messages[i], &m, now, &fw, &a,
				      &rel, &rf);
			continue;
		}
		r = resolve_life(p, &m.id);
		if (r != SEMQ_OK)
			break;
		via = strcmp(j->peer, m.id.origin) ? j->peer : NULL;
		need = CONFIRM_ORIGIN | (m.stored_by[0] ? CONFIRM_RELAY : 0);
		r = receive_one(p, &m, via, need, j->conn_id, now, &v);
		if (r == SEMQ_OK && v >= 0)
			r = idlist_add_high(
				&a.verdicts, &m.id, v,
				is_refusal(v) ? stream_high(p, &m.id) : 0);
	}
	if (r == SEMQ_OK)
		r = relayed_flush(p, &rel, now);
	if (r == SEMQ_OK)
		r = emit_ids(p, ob, j->conn_id, IDF_INDICATION, &a.verdicts,
			     NULL);
	if (r == SEMQ_OK)
		r = fwd_emit(p, ob, &fw, SEMQ__FRAME__BODY_DATA, NULL, j);
	/* [relay] relay_ack = no: the destination's 810-Indication is the
	 * only answer to a forwarded message (its origin queries after
	 * query_after when none comes); refusals and custody still answer */
	if (r == SEMQ_OK && p->c->relay_ack)
		r = emit_relay_ack(p, ob, j->conn_id,
				   SEMQ__RELAY_ACK__KIND__FORWARDED, 0, 0,
				   &a.forwarded, NULL);
	if (r == SEMQ_OK)
		r = emit_relay_ack(p, ob, j->conn_id,
				   SEMQ__RELAY_ACK__KIND__STORED, 0, 0,
				   &a.stored, NULL);
	for (k = 1; k < REFUSALS && r == SEMQ_OK; k++)
		r = emit_relay_ack(p, ob, j->conn_id,
				   SEMQ__RELAY_ACK__KIND__UNREACHABLE, k, 0,
				   &a.refused[k], refusal_detail(p, k, &a));
	if (r == SEMQ_OK)
		log_refusals(p, j, &a);
	fwd_free(&fw);
	idlist_free(&a.verdicts);
	idlist_free(&a.forwarded);
	idlist_free(&a.stored);
	for (k = 0; k < REFUSALS; k++)
		idlist_free(&a.refused[k]);
	return r;
}

/* Held messages whose predecessor has arrived since are recorded now. */
static int retry_held(struct proto *p, int64_t now, struct outbox *ob)
{
	struct connlists cl = {0};
	struct held **pp = &p->held;
	int r = SEMQ_OK;

	while (*pp && r == SEMQ_OK) {
		struct held *h = *pp;
		char err[SEMQ_ERRLEN] = "";
		int result = -1, rr;

		rr = store_receive(p->st, &h->m, h->via[0] ? h->via : NULL,
				   h->need, now, plughost_apply, p->ph, &result,
				   err, sizeof err);
		count_receipt(p, rr, result, &h->m, now);
		if (rr == SEMQ_AGAIN && now - h->since < p->c->query_after_ms) {
			pp = &h->next;
			continue;
		}
		if (rr == SEMQ_OK || rr == SEMQ_DUPLICATE ||
		    rr == SEMQ_DECLINED) {
			struct idlist *l = connlists_get(&cl, h->conn_id);
			if (!l)
				r = SEMQ_ERR_NOMEM;
			else
				r = idlist_add_high(
					l, &h->m.id, result,
					is_refusal(result)
						? stream_high(p, &h->m.id)
						: 0);
		} else if (rr != SEMQ_AGAIN) {
			r = rr;
			break;
		}
		/* recorded, or waited too long (the sender will query) */
		*pp = h->next;
		p->held_bytes -= h->m.payload_len;
		msg_clear(&h->m);
		free(h);
		p->n_held--;
	}
	if (r == SEMQ_OK)
		r = connlists_emit(p, ob, &cl, IDF_INDICATION, NULL);
	connlists_free(&cl);
	return r;
}

/* ---- confirmations --------------------------------------------------------- */

/*
 * A relay's copy that the destination refused (CONFLICT or UNDECIDED): if
 * it is the copy of that message, it is held for the operator (status 8)
 * instead of being sent again; its origin renumbers or holds its own row
 * and then takes the copy back (an 810-Response with its digest, which
 * drops it here).
 */
static int hold_copy(struct proto *p, const struct msgid *id, int res,
		     const char *peer, int64_t now)
{
	char why[SEMQ_ERRLEN], idb[MSGID_STRLEN + 20];
	uint64_t have = 0;
	int r, status;

	r = store_outbound_state(p->st, id, &status, &have);
	if (r == SEMQ_ERR_NOT_FOUND)
		return SEMQ_OK;
	if (r != SEMQ_OK)
		return r;
	if (have && id->digest && have != id->digest)
		return SEMQ_OK; /* about another message under its id */
	snprintf(why, sizeof why,
		 "%s refused it (%s): %s; held for the operator until its "
		 "origin takes it back",
		 peer, res == RES_CONFLICT ? "conflict" : "undecided",
		 res == RES_CONFLICT ? "it holds another message under this "
				       "seq"
				     : "its record of this seq is gone");
	r = store_hold(p->st, id, res, why, now);
	if (r == SEMQ_OK) {
		p->cnt.held++;
		log_msg(LOG_WARN, "proto", peer, id, "copy %s held: %s",
			id_text(id, idb, sizeof idb), why);
	}
	return r == SEMQ_DECLINED ? SEMQ_OK : r;
}

/* Sends an 810-Response for each of ids[0..n) (with their digests) towards
 * their destination: the origin has done with those ids — a relay still
 * holding a copy of one of them drops it. */
static int retract(struct proto *p, const struct msgid *ids, unsigned n,
		   struct outbox *ob)
{
	struct connlists cl = {0};
	unsigned k;
	int r = SEMQ_OK;

	for (k = 0; k < n && r == SEMQ_OK; k++) {
		uint64_t conn =
			stream_conn(p->routes, p->c, ids[k].dest, &ids[k]);
		struct idlist *l;

		if (!conn)
			continue;
		l = connlists_get(&cl, conn);
		r = l ? idlist_add(l, &ids[k], 0) : SEMQ_ERR_NOMEM;
	}
	if (r == SEMQ_OK)
		r = connlists_emit(p, ob, &cl, IDF_RESPONSE, p->c->id);
	connlists_free(&cl);
	return r;
}

/* Was the stream to dest found behind in this run already? Remembers it. */
static int noted_before(struct proto *p, const char *dest)
{
	size_t i;

	for (i = 0; i < p->n_noted; i++)
		if (!strcmp(p->noted[i], dest))
			return 1;
	if (p->n_noted < NOTED_MAX)
		snprintf(p->noted[p->n_noted++], sizeof p->noted[0], "%s",
			 dest);
	return 0;
}

/*
 * A peer has seen this node's stream to dest up to `high` (stream state, or
 * a refusal): when that is beyond the counter, this database went back in
 * time. The counter moves past it, so every message enqueued from then on
 * gets a seq nobody has seen; it is recorded for semqctl status and
 * counted, and the operator hears it (ERROR) once per stream and run.
 */
static int behind(struct proto *p, const char *dest, uint64_t high,
		  const char *reporter, const char *how, int64_t now)
{
	char note[SEMQ_ERRLEN], lb[SEMQ_LIFE_STRLEN];
	uint64_t from = 0;
	int r, moved = 0, first = !noted_before(p, dest);

	snprintf(note, sizeof note, "%s had seen up to seq %" PRIu64 " (%s)",
		 reporter, high, how);
	r = store_stream_resync(p->st, dest, high, now, note, first, &from,
				&moved);
	if (r == SEMQ_DECLINED)
		return SEMQ_OK;
	if (r != SEMQ_OK)
		return r;
	p->cnt.resyncs++;
	log_msg(first ? LOG_ERROR : LOG_WARN, "proto", reporter, NULL,
		"stream %s->%s (life %s) went back in time: this database had "
		"handed out seqs up to %" PRIu64 ", %s has seen up to %" PRIu64
		" (%s; the database was restored from an older copy?)%s",
		p->c->id, dest, semq_life_str(p->life, lb, sizeof lb), from,
		reporter, high, how,
		moved ? "; the counter moves past it: messages enqueued from "
			"now on get new seqs, those enqueued since the "
			"restore are checked by their digests and renumbered "
			"where they collide"
		      : "; messages enqueued since the restore are "
			"renumbered where they collide");
	return SEMQ_OK;
}

/*
 * A refusal of an id this node has no row under, or a filler under: when a
 * renumbering moved its message (a later seq holds its digest), the
 * 810-Response that takes the old id's copy back was lost or not yet
 * delivered: sent again. A relay repeats the refusal of each copy it
 * holds, so the copy goes in the end. SEMQ_ERR_NOT_FOUND when no row has
 * its digest (purged, or a message of a lost timeline).
 */
static int refused_moved(struct proto *p, const struct msgid *id,
			 const char *peer, struct outbox *ob)
{
	char idb[MSGID_STRLEN];
	uint64_t seq = 0;
	int r = store_outbound_moved(p->st, id, &seq);

	if (r != SEMQ_OK) /* NOT_FOUND: purged, or of a lost timeline */
		return r;
	log_msg(LOG_INFO, "proto", peer, id,
		"%s refused %s, renumbered to seq %" PRIu64
		": taking the old copy back",
		peer, id_text(id, idb, sizeof idb), seq);
	return retract(p, id, 1, ob);
}

/*
 * A refusal of one of this node's own messages (docs/PROTOCOL.md, "What
 * the origin does"): the counter moves past what the refuser has seen
 * (`high`); CONFLICT renumbers the message and the unconfirmed later rows
 * of its key — once its key predecessor is confirmed, which is asked
 * first (tests/model/README.md, "Endless renumbering") — and UNDECIDED
 * holds it for the operator.
 */
static int on_refusal(struct proto *p, const struct msgid *id, int res,
		      uint64_t high, const char *peer, int64_t now,
		      struct outbox *ob)
{
	char why[4 * SEMQ_ERRLEN], idb[MSGID_STRLEN];
	struct msgid *olds = NULL, pred;
	uint64_t have = 0, first = 0;
	unsigned n = 0;
	int r, status, open = 0;

	r = store_outbound_state(p->st, id, &status, &have);
	if (r == SEMQ_ERR_NOT_FOUND) { /* renumbered already, or purged */
		r = refused_moved(p, id, peer, ob);
		return r == SEMQ_ERR_NOT_FOUND ? SEMQ_OK : r;
	}
	if (r != SEMQ_OK)
		return r;
	msgid_str(id, idb, sizeof idb);
	if (have && id->digest && have != id->digest) {
		/* Another message under this id here: a filler in the place
		 * of this one, renumbered; or a copy of this id from before
		 * this database went back in time, whose message cannot be
		 * sent again from here. The relay that holds such a copy
		 * keeps it for the operator, and repeats its refusal: heard
		 * once per query_after. */
		int loud = now - p->stale_logged_at >= p->c->query_after_ms;

		r = refused_moved(p, id, peer, ob);
		if (r != SEMQ_ERR_NOT_FOUND)
			return r;
		if (loud)
			p->stale_logged_at = now;
		log_msg(loud ? LOG_ERROR : LOG_DEBUG, "proto", peer, id,
			"%s refused another message under %s than this "
			"database's (a copy made before this database went "
			"back in time); the copy is held where it is, see "
			"semqctl outbound list --status held there",
			peer, idb);
		return SEMQ_OK;
	}
	if (status == SS_CANCELLED && have && have == semq_filler_digest(id)) {
		/* A filler where the refuser holds a message already: that
		 * seq is filled; a copy of the filler goes back. */
		r = store_mark_confirmed(p->st, id, RES_CANCELLED, now);
		if (r != SEMQ_OK && r != SEMQ_DECLINED)
			return r;
		log_msg(LOG_INFO, "proto", peer, id,
			"%s holds a message under %s: its filler is not needed",
			peer, idb);
		return retract(p, id, 1, ob);
	}
	if (status == SS_ACK2) /* took effect: a copy still held is stale */
		return id->digest && have == id->digest ? retract(p, id, 1, ob)
							: SEMQ_OK;
	if (status == SS_HELD)
		return SEMQ_OK;
	r = behind(p, id->dest, high > id->seq ? high : id->seq, peer,
		   res == RES_CONFLICT ? "it holds another message under a seq "
					 "this database handed out again"
				       : "its record of a seq this database "
					 "handed out again is gone",
		   now);
	if (r != SEMQ_OK)
		return r;
	if (res == RES_UNDECIDED) {
		snprintf(why, sizeof why,
			 "%s cannot tell whether it has this message: its "
			 "record of seq %" PRIu64 " is older than its "
			 "receipt_retention (this database went back in time "
			 "by more than that?); if it is new, semqctl outbound "
			 "renumber %s; if it took effect, semqctl outbound "
			 "cancel %s",
			 peer, id->seq, idb, idb);
		r = store_hold(p->st, id, RES_UNDECIDED, why, now);
		if (r == SEMQ_OK) {
			p->cnt.held++;
			log_msg(LOG_ERROR, "proto", peer, id, "held: %s", why);
		}
		return r == SEMQ_DECLINED ? SEMQ_OK : r;
	}
	r = store_outbound_pred(p->st, id, &pred, &open);
	if (r == SEMQ_OK && open) {
		/* The refusal may be about its prev_seq, which the refuser
		 * holds for another message: renumbering this row alone
		 * would keep that prev_seq and be refused again. Ask about
		 * the predecessor first: refused, it is renumbered with its
		 * chain (this row too); confirmed, this row's next refusal
		 * renumbers it alone. */
		r = store_defer(p->st, &pred, now);
		if (r == SEMQ_DECLINED) /* unsent or held: it goes first */
			r = SEMQ_OK;
		log_msg(LOG_INFO, "proto", peer, id,
			"%s refused %s; its key predecessor seq %" PRIu64
			" is unconfirmed: asking about it before renumbering",
			peer, idb, pred.seq);
		return r;
	}
	if (r != SEMQ_OK && r != SEMQ_ERR_NOT_FOUND)
		return r;
	snprintf(why, sizeof why,
		 "%s holds another message under seq %" PRIu64
		 ": this database went back in time (restored from an older "
		 "copy?); renumbered",
		 peer, id->seq);
	r = store_renumber(p->st, id, now, why, &olds, &n, &first);
	if (r == SEMQ_DECLINED)
		return SEMQ_OK;
	if (r != SEMQ_OK)
		return r;
	p->cnt.renumbered += n;
	log_msg(LOG_INFO, "proto", peer, id,
		"renumbered: %s holds another message under seq %" PRIu64
		"; %u message(s) of this key get seq %" PRIu64 "..%" PRIu64
		" and are sent again",
		peer, id->seq, n, first, first + (n ? n - 1 : 0));
	p->more_to_send = 1;
	r = retract(p, olds, n, ob);
	free(olds);
	return r;
}

static int on_indication(struct proto *p, const struct job *j, int64_t now,
			 struct outbox *ob)
{
	const Semq__AckIndication *ind = j->frame->ack_indication;
	struct idlist resp = {0}, relay_resp = {0};
	struct fwd fw = {0};
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; i < ind->n_verdicts && r == SEMQ_OK; i++) {
		const Semq__Verdict *v = ind->verdicts[i];
		struct msgid id;
		uint64_t conn;
		int rr, res;

		codec_msgid_from_wire(v->id, &id);
		res = verdict_from_wire(v->result, v->refusal, v->dead);
		r = resolve_life(p, &id);
		if (r != SEMQ_OK)
			break;
		if (strcmp(id.origin, p->c->id) != 0) {
			/* Relaying: our copy (if any) is done with; confirm
			 * for ourselves (harmless when the destination did not
			 * need it, and it covers a lost earlier response) and
			 * pass the verdict on to the origin. A refusal
			 * recorded nothing to confirm: the copy is held. */
			if (is_refusal(res)) {
				r = hold_copy(p, &id, res, j->peer, now);
			} else {
				rr = store_drop_copy(p->st, &id);
				if (rr != SEMQ_OK && rr != SEMQ_DECLINED) {
					r = rr;
					break;
				}
				r = idlist_add(&relay_resp, &id, 0);
			}
			conn = next_hop(p, id.origin, &id, j->conn_id);
			if (r == SEMQ_OK && conn)
				r = fwd_add(&fw, conn, ind->verdicts[i]);
			continue;
		}
		if (id.life != p->life) {
			/* A message of an earlier life of this node: nothing
			 * of it is here; let the receiver finish its record. */
			if (!is_refusal(res))
				r = idlist_add(&resp, &id, 0);
			continue;
		}
		if (is_refusal(res)) {
			r = on_refusal(p, &id, res, v->high, j->peer, now, ob);
			continue;
		}
		rr = store_mark_confirmed(p->st, &id, res, now);
		if (rr == SEMQ_OK)
			p->cnt.confirmed++;
		if (rr != SEMQ_OK && rr != SEMQ_DECLINED &&
		    rr != SEMQ_ERR_NOT_FOUND) {
			r = rr;
			break;
		}
		r = idlist_add(&resp, &id, 0);
	}
	if (r == SEMQ_OK && resp.n)
		fault_point("origin_before_commit");
	if (r == SEMQ_OK)
		r = emit_ids(p, ob, j->conn_id, IDF_RESPONSE, &resp, p->c->id);
	if (r == SEMQ_OK)
		r = emit_ids(p, ob, j->conn_id, IDF_RESPONSE, &relay_resp,
			     p->c->id);
	if (r == SEMQ_OK)
		r = fwd_emit(p, ob, &fw, SEMQ__FRAME__BODY_ACK_INDICATION, NULL,
			     j);
	if (resp.n)
		p->more_to_send = 1; /* the window moved */
	fwd_free(&fw);
	idlist_free(&resp);
	idlist_free(&relay_resp);
	return r;
}

static int on_response(struct proto *p, const struct job *j, struct outbox *ob)
{
	const Semq__AckResponse *ar = j->frame->ack_response;
	struct fwd fw = {0};
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; i < ar->n_ids && r == SEMQ_OK; i++) {
		struct msgid id;
		unsigned bit;

		codec_msgid_from_wire(ar->ids[i], &id);
		r = resolve_life(p, &id);
		if (r != SEMQ_OK)
			break;
		if (strcmp(id.dest, p->c->id) != 0) {
			uint64_t conn = next_hop(p, id.dest, &id, j->conn_id);

			/* The origin is done with this message id: a copy of
			 * that very message held here (refused, or taken
			 * back after a renumbering) goes. */
			if (id.digest && strcmp(ar->from, id.origin) == 0) {
				r = store_drop_copy(p->st, &id);
				if (r == SEMQ_DECLINED)
					r = SEMQ_OK;
			}
			if (r == SEMQ_OK && conn)
				r = fwd_add(&fw, conn, ar->ids[i]);
			continue;
		}
		bit = strcmp(ar->from, id.origin) == 0 ? CONFIRM_ORIGIN
						       : CONFIRM_RELAY;
		/* Not asked whether the row became AS_OK (or is gone): so
		 * the update waits for no answer (a deferred write), and the
		 * watermarks are looked at after the batch anyway. */
		r = store_ack_response(p->st, &id, bit, NULL);
		if (r == SEMQ_OK)
			p->wm_dirty = 1;
	}
	if (r == SEMQ_OK && p->wm_dirty)
		fault_point("ack_before_commit");
	if (r == SEMQ_OK)
		r = fwd_emit(p, ob, &fw, SEMQ__FRAME__BODY_ACK_RESPONSE,
			     ar->from, j);
	fwd_free(&fw);
	return r;
}

/* ---- queries ----------------------------------------------------------------- */

/*
 * A relay asked about another node's message: a copy it holds unsent (or
 * a cancel of one) it answers for itself, custody (STORED); one it holds
 * as undeliverable, or one for a destination it refuses, UNKNOWN_DEST; a
 * question it cannot pass on now (no link onwards), NOT_CONNECTED, so that
 * the asker asks again soon instead of after query_after. Others go on to
 * the destination. *done = 1 when answered here.
 */
static int relay_query(struct proto *p, const struct job *j,
		       const struct msgid *id, struct idlist *ans,
		       struct idlist *ra, struct relay_frame *rf, int64_t now,
		       int *done)
{
	struct out_row row;
	struct msg m;
	uint64_t have = 0;
	int r, status = SS_UNSEND - 99;

	*done = 1;
	if (!p->c->relay)
		return idlist_add(&ra[SEMQ__RELAY_REFUSAL__NOT_A_RELAY], id, 0);
	r = store_outbound_state(p->st, id, &status, &have);
	if (r == SEMQ_OK && have && id->digest && have != id->digest) {
		/* A copy of another message under that id: the asker's
		 * message cannot be that one. */
		p->cnt.refused++;
		return idlist_add_high(ans, id, RES_CONFLICT,
				       stream_high(p, id));
	}
	if (r != SEMQ_OK && r != SEMQ_ERR_NOT_FOUND)
		return r;
	if (r == SEMQ_ERR_NOT_FOUND)
		status = SS_UNSEND - 99; /* no copy */
	if (r == SEMQ_OK && (status == SS_UNSEND || status == SS_CANCELLED))
		return idlist_add(&ra[0], id, 0); /* custody */
	if (r == SEMQ_OK && status == SS_HELD) {
		r = store_outbound_get(p->st, id, &m, &row);
		if (r != SEMQ_OK)
			return r;
		msg_clear(&m);
		if (row.result == RES_UNDELIVERABLE)
			return idlist_add(
				&ra[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST], id, 0);
	}
	if (next_hop(p, id->dest, id, j->conn_id)) {
		*done = 0;
		return SEMQ_OK;
	}
	if (status == SS_SEND || status == SS_ACK)
		return idlist_add(&ra[0], id, 0); /* custody, in doubt here */
	/* Nothing here, and no way on: a destination refused as unknown
	 * (read only: a question notes nothing about it), else ask again
	 * later. */
	(void)rf;
	if (p->c->store_and_forward && !configured_dest(p, id->dest)) {
		int64_t first = 0;
		int seen = 0, found = 0;

		r = store_dest_get(p->st, id->dest, &first, &seen, &found);
		if (r != SEMQ_OK)
			return r;
		if (found && !seen && first &&
		    now - first >= p->c->unknown_dest_after_ms)
			return idlist_add(
				&ra[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST], id, 0);
	}
	return idlist_add(&ra[SEMQ__RELAY_REFUSAL__NOT_CONNECTED], id, 0);
}

static int on_query(struct proto *p, const struct job *j, int64_t now,
		    struct outbox *ob)
{
	const Semq__Query *q = j->frame->query;
	struct idlist ans = {0};
	/* RelayAck answers: [0] STORED, [reason] UNREACHABLE */
	struct idlist ra[REFUSALS];
	struct relay_frame rf;
	struct fwd fw = {0};
	size_t i;
	int r = SEMQ_OK, k;

	memset(ra, 0, sizeof ra);
	memset(&rf, 0, sizeof rf);
	for (i = 0; i < q->n_ids && r == SEMQ_OK; i++) {
		struct msgid id;
		int received = 0, result = 0;

		codec_msgid_from_wire(q->ids[i], &id);
		r = resolve_life(p, &id);
		if (r != SEMQ_OK)
			break;
		if (strcmp(id.dest, p->c->id) != 0) {
			int done = 0;

			r = relay_query(p, j, &id, &ans, ra, &rf, now, &done);
			if (r == SEMQ_OK && !done)
				r = fwd_add(
					&fw,
					next_hop(p, id.dest, &id, j->conn_id),
					q->ids[i]);
			continue;
		}
		r = store_lookup_received(p->st, &id, &received, &result);
		if (r == SEMQ_OK && received && is_refusal(result))
			p->cnt.refused++;
		if (r == SEMQ_OK)
			r = idlist_add_high(&ans, &id, received ? result : -1,
					    received && is_refusal(result)
						    ? stream_high(p, &id)
						    : 0);
	}
	if (r == SEMQ_OK)
		r = emit_ids(p, ob, j->conn_id, IDF_QUERY_REPLY, &ans, NULL);
	if (r == SEMQ_OK)
		r = fwd_emit(p, ob, &fw, SEMQ__FRAME__BODY_QUERY, NULL, j);
	if (r == SEMQ_OK)
		r = emit_relay_ack(p, ob, j->conn_id,
				   SEMQ__RELAY_ACK__KIND__STORED, 0, 1, &ra[0],
				   "held here for delivery");
	for (k = 1; k < REFUSALS && r == SEMQ_OK; k++)
		r = emit_relay_ack(p, ob, j->conn_id,
				   SEMQ__RELAY_ACK__KIND__UNREACHABLE, k, 1,
				   &ra[k], refusal_detail(p, k, NULL));
	fwd_free(&fw);
	idlist_free(&ans);
	for (k = 0; k < REFUSALS; k++)
		idlist_free(&ra[k]);
	return r;
}

/* The status of our store-and-forward copy of `id` (SS_*), or -99 when we
 * hold none (or it is confirmed already). */
#define NO_COPY (-99)

static int copy_status(struct proto *p, const struct msgid *id, int *status)
{
	struct out_row row;
	struct msg m;
	int r;

	*status = NO_COPY;
	r = store_outbound_get(p->st, id, &m, &row);
	if (r == SEMQ_ERR_NOT_FOUND)
		return SEMQ_OK;
	if (r != SEMQ_OK)
		return r;
	msg_clear(&m);
	if (row.status == SS_UNSEND || row.status == SS_SEND ||
	    row.status == SS_ACK || row.status == SS_HELD)
		*status = row.status;
	return SEMQ_OK;
}

/*
 * An answer about another origin's message of which we hold a copy: it
 * answers our own query first. Received: our copy is done (dropped, and the
 * destination gets our confirmation, which its record needs). Not received:
 * a copy we had sent is sent again; and the origin, instead of the "not
 * received" that would make it resend past our queue (and drain_rate),
 * hears that we still hold it.
 */
static int answer_for_copy(struct proto *p, const struct job *j,
			   const Semq__QueryAnswer *a, const struct msgid *id,
			   int status, uint64_t origin_conn, struct fwd *fw,
			   struct idlist *relay_resp, struct connlists *custody,
			   int64_t now)
{
	char why[200];
	int r, res = verdict_from_wire(a->result, a->refusal, a->dead);

	if (a->received && is_refusal(res)) {
		/* Nothing recorded there: the copy is held, the origin
		 * hears the refusal. */
		r = hold_copy(p, id, res, j->peer, now);
		if (r == SEMQ_OK && origin_conn)
			r = fwd_add(fw, origin_conn, (void *)a);
		return r;
	}
	if (a->received) {
		r = store_drop_copy(p->st, id);
		if (r != SEMQ_OK && r != SEMQ_DECLINED)
			return r;
		r = idlist_add(relay_resp, id, 0);
		if (r == SEMQ_OK && origin_conn)
			r = fwd_add(fw, origin_conn, (void *)a);
		return r;
	}
	if (status == SS_SEND || status == SS_ACK) {
		snprintf(why, sizeof why, "%s: not received; the relay resends",
			 id->dest);
		r = store_mark_unsent(p->st, id, 0, why);
		if (r != SEMQ_OK && r != SEMQ_DECLINED)
			return r;
		p->more_to_send = 1;
	}
	(void)j;
	if (origin_conn) {
		struct idlist *l = connlists_get(custody, origin_conn);
		return l ? idlist_add(l, id, 0) : SEMQ_ERR_NOMEM;
	}
	return SEMQ_OK;
}

static int on_query_reply(struct proto *p, const struct job *j, int64_t now,
			  struct outbox *ob)
{
	const Semq__QueryReply *qr = j->frame->query_reply;
	struct idlist resp = {0}, relay_resp = {0};
	struct connlists custody = {0};
	struct fwd fw = {0};
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; i < qr->n_answers && r == SEMQ_OK; i++) {
		const Semq__QueryAnswer *a = qr->answers[i];
		struct msgid id;
		int rr, res = verdict_from_wire(a->result, a->refusal, a->dead);

		codec_msgid_from_wire(a->id, &id);
		r = resolve_life(p, &id);
		if (r != SEMQ_OK)
			break;
		if (strcmp(id.origin, p->c->id) != 0) {
			uint64_t conn = next_hop(p, id.origin, &id, j->conn_id);
			int cst = NO_COPY;

			r = copy_status(p, &id, &cst);
			if (r != SEMQ_OK)
				break;
			if (cst != NO_COPY)
				r = answer_for_copy(p, j, a, &id, cst, conn,
						    &fw, &relay_resp, &custody,
						    now);
			else if (conn)
				r = fwd_add(&fw, conn, qr->answers[i]);
			continue;
		}
		if (id.life != p->life) {
			/* about an earlier life of this node: nothing here */
			if (a->received && !is_refusal(res))
				r = idlist_add(&resp, &id, 0);
			continue;
		}
		if (a->received && is_refusal(res)) {
			r = on_refusal(p, &id, res, a->high, j->peer, now, ob);
		} else if (a->received) {
			rr = store_mark_confirmed(p->st, &id, res, now);
			if (rr == SEMQ_OK)
				p->cnt.confirmed++;
			if (rr == SEMQ_OK || rr == SEMQ_DECLINED ||
			    rr == SEMQ_ERR_NOT_FOUND)
				r = idlist_add(&resp, &id, 0);
			else
				r = rr;
		} else {
			char why[200];
			snprintf(why, sizeof why,
				 "%s: not received; resent%s%s", id.dest,
				 strcmp(j->peer, id.dest) ? " (answer via "
							  : "",
				 strcmp(j->peer, id.dest) ? j->peer : "");
			if (strcmp(j->peer, id.dest))
				strncat(why, ")", sizeof why - strlen(why) - 1);
			rr = store_mark_unsent(p->st, &id, now, why);
			if (rr != SEMQ_OK && rr != SEMQ_DECLINED &&
			    rr != SEMQ_ERR_NOT_FOUND)
				r = rr;
			else
				p->more_to_send = 1;
		}
	}
	if (r == SEMQ_OK)
		r = emit_ids(p, ob, j->conn_id, IDF_RESPONSE, &resp, p->c->id);
	if (r == SEMQ_OK)
		r = emit_ids(p, ob, j->conn_id, IDF_RESPONSE, &relay_resp,
			     p->c->id);
	if (r == SEMQ_OK)
		r = fwd_emit(p, ob, &fw, SEMQ__FRAME__BODY_QUERY_REPLY, NULL,
			     j);
	for (i = 0; i < custody.n && r == SEMQ_OK; i++)
		r = emit_relay_ack(p, ob, custody.v[i].conn,
				   SEMQ__RELAY_ACK__KIND__STORED, 0, 1,
				   &custody.v[i].l, "still held for delivery");
	fwd_free(&fw);
	idlist_free(&resp);
	idlist_free(&relay_resp);
	connlists_free(&custody);
	return r;
}

/* When to ask a relay again about a row it holds in custody. */
static int64_t custody_recheck(const struct proto *p, int64_t now)
{
	int64_t after = p->c->custody_query_after_ms;

	return now +
	       (after > p->c->query_after_ms ? after : p->c->query_after_ms);
}

/* Why a relay did not take a message, for last_error and the log. */
static const char *relay_reason_name(int reason)
{
	switch (reason) {
	case SEMQ__RELAY_REFUSAL__QUOTA: return "custody quota full";
	case SEMQ__RELAY_REFUSAL__DISK_FULL: return "disk full";
	case SEMQ__RELAY_REFUSAL__UNKNOWN_DEST: return "unknown destination";
	case SEMQ__RELAY_REFUSAL__TOO_BIG: return "payload too big";
	case SEMQ__RELAY_REFUSAL__NOT_A_RELAY: return "not a relay";
	case SEMQ__RELAY_REFUSAL__LOOP: return "routing loop";
	}
	return "unreachable";
}

/*
 * A relay does not know where one of this node's messages goes
 * (UNKNOWN_DEST): the message is dead here, in the redo queue, for the
 * operator; a cancel of it has nothing left to cancel. When the row has
 * nothing more to send, the relay may drop its copy: it is taken back
 * (`retract`).
 */
static int undeliverable(struct proto *p, const struct msgid *id,
			 const char *relay, int reason, const char *detail,
			 int64_t now, struct idlist *retract_l, unsigned *newly)
{
	char why[SEMQ_ERRLEN];
	int r, settled = 0;

	if (reason == SEMQ__RELAY_REFUSAL__LOOP)
		snprintf(why, sizeof why,
			 "undeliverable: relay %s refused it, a routing loop "
			 "(%s); fix [route] on the relays, then semqctl redo "
			 "retry sends it again",
			 relay, detail);
	else
		snprintf(why, sizeof why,
			 "undeliverable: relay %s does not know %s (%s); "
			 "semqctl redo retry sends it again, semqctl redo "
			 "discard cancels it",
			 relay, id->dest, detail);
	r = store_undeliverable(p->st, id, why, now, &settled);
	if (r == SEMQ_OK) {
		p->cnt.undeliverable++;
		(*newly)++;
	}
	if (r == SEMQ_DECLINED || r == SEMQ_ERR_NOT_FOUND)
		r = SEMQ_OK;
	if (r == SEMQ_OK && settled)
		r = idlist_add(retract_l, id, 0);
	return r;
}

/* A relay's word on messages we sent (or asked about) through it. */
static int on_relay_ack(struct proto *p, const struct job *j, int64_t now,
			struct outbox *ob)
{
	const Semq__RelayAck *ra = j->frame->relay_ack;
	struct idlist take_back = {0};
	struct connlists onward = {0};
	unsigned newly = 0, elsewhere = 0;
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; i < ra->n_ids && r == SEMQ_OK; i++) {
		struct msgid id;
		struct out_row row;
		struct msg m;
		char why[SEMQ_ERRLEN];
		int own;

		/* Our own rows, or a relay's copies sent on to a further
		 * relay; ids we hold nothing for are declined below. */
		codec_msgid_from_wire(ra->ids[i], &id);
		r = resolve_life(p, &id);
		if (r != SEMQ_OK)
			break;
		/* Only the hop its stream goes to can say what became of a
		 * message there. */
		if (stream_conn(p->routes, p->c, id.dest, &id) != j->conn_id) {
			elsewhere++;
			continue;
		}
		own = strcmp(id.origin, p->c->id) == 0;
		if (ra->kind == SEMQ__RELAY_ACK__KIND__FORWARDED) {
			r = store_mark_relay_acked(p->st, &id, now,
						   now + p->c->query_after_ms);
		} else if (ra->kind == SEMQ__RELAY_ACK__KIND__STORED) {
			/* In its custody: outside our window, asked about
			 * rarely (its destination's verdict comes through
			 * it). */
			r = store_mark_custody(p->st, &id, j->peer,
					       custody_recheck(p, now));
		} else if ((ra->reason == SEMQ__RELAY_REFUSAL__UNKNOWN_DEST ||
			    ra->reason == SEMQ__RELAY_REFUSAL__LOOP) &&
			   own) {
			r = undeliverable(p, &id, j->peer, ra->reason,
					  ra->detail, now, &take_back, &newly);
		} else if (ra->reason == SEMQ__RELAY_REFUSAL__UNKNOWN_DEST ||
			   ra->reason == SEMQ__RELAY_REFUSAL__LOOP) {
			/* A further relay's verdict on a copy we passed on:
			 * its origin decides (and takes the copy back). */
			uint64_t conn = next_hop(p, id.origin, &id, j->conn_id);
			struct idlist *l =
				conn ? connlists_get(&onward, conn) : NULL;
			if (conn)
				r = l ? idlist_add(l, &id, 0) : SEMQ_ERR_NOMEM;
		} else if (ra->about_query) {
			/* The relay cannot pass our question on now (its
			 * link onwards is down): ask again soon after a
			 * relay's restart, less and less often the longer the
			 * row has been in doubt, at most every query_after. */
			int64_t sent = 0, again;

			r = store_outbound_sent_at(p->st, &id, &sent);
			again = sent && now > sent ? (now - sent) / 2 : 0;
			if (again < p->c->reconnect_min_ms * 2)
				again = p->c->reconnect_min_ms * 2;
			if (again > p->c->query_after_ms)
				again = p->c->query_after_ms;
			if (r == SEMQ_OK)
				r = store_defer(p->st, &id, now + again);
		} else {
			/* Not delivered anywhere: try again later, backing
			 * off with the attempts already made. */
			int64_t delay = p->c->reconnect_min_ms;
			int k;

			r = store_outbound_get(p->st, &id, &m, &row);
			if (r == SEMQ_ERR_NOT_FOUND) {
				r = SEMQ_OK; /* nothing of ours */
				continue;
			}
			if (r != SEMQ_OK)
				break;
			msg_clear(&m);
			for (k = 1;
			     k < row.attempts && delay < p->c->reconnect_max_ms;
			     k++)
				delay *= 2;
			if (delay > p->c->reconnect_max_ms)
				delay = p->c->reconnect_max_ms;
			snprintf(why, sizeof why, "relay %s: %s (%s)", j->peer,
				 relay_reason_name(ra->reason), ra->detail);
			r = store_mark_unsent(p->st, &id, now + delay, why);
		}
		if (r == SEMQ_DECLINED || r == SEMQ_ERR_NOT_FOUND)
			r = SEMQ_OK;
	}
	if (elsewhere)
		log_msg(LOG_WARN, "proto", j->peer, NULL,
			"ignored a RelayAck about %u message(s) not sent "
			"through %s",
			elsewhere, j->peer);
	if (r == SEMQ_OK && newly)
		log_msg(LOG_WARN, "proto", j->peer, &take_back.ids[0],
			"%u message(s) to %s undeliverable: relay %s: %s (%s); "
			"dead in the redo queue, see semqctl redo list",
			newly, take_back.ids[0].dest, j->peer,
			relay_reason_name(ra->reason), ra->detail);
	if (r == SEMQ_OK)
		r = retract(p, take_back.ids, (unsigned)take_back.n, ob);
	for (i = 0; i < onward.n && r == SEMQ_OK; i++)
		r = emit_relay_ack(p, ob, onward.v[i].conn, ra->kind,
				   ra->reason, ra->about_query, &onward.v[i].l,
				   ra->detail);
	idlist_free(&take_back);
	connlists_free(&onward);
	return r;
}

/* ---- resynchronisation and periodic work ------------------------------------- */

struct indoubt_ctx {
	struct proto *p;
	struct connlists *cl;
	uint64_t only_conn; /* 0 = any */
	/* Non-NULL: the routes before a change; only rows whose stream moved
	 * off a connection that is gone, onto one that was there already, are
	 * queried (and deferred); the others are left alone. */
	const struct routes *old;
	struct idlist defer;
	int r;
};

static int indoubt_cb(void *ctx, const struct msg *m, const struct out_row *row)
{
	struct indoubt_ctx *x = ctx;
	uint64_t conn = stream_conn(x->p->routes, x->p->c, m->id.dest, &m->id);
	struct idlist *l;

	(void)row;
	if (x->old) {
		uint64_t was = stream_conn(x->old, x->p->c, m->id.dest, &m->id);

		if (!was || conn_routed(x->p->routes, was) || !conn ||
		    !conn_routed(x->old, conn))
			return 0;
	}
	/* A link coming up is about the rows routed through it: the others
	 * keep their timers (custody_query_after, query_after). */
	if (x->only_conn && conn != x->only_conn)
		return 0;
	if (x->r == SEMQ_OK)
		x->r = idlist_add(&x->defer, &m->id, 0);
	if (!conn)
		return x->r != SEMQ_OK;
	l = connlists_get(x->cl, conn);
	if (!l) {
		x->r = SEMQ_ERR_NOMEM;
		return 1;
	}
	if (x->r == SEMQ_OK)
		x->r = idlist_add(l, &m->id, 0);
	return x->r != SEMQ_OK;
}

/* Queries rows in doubt (all of them routed via only_conn when given; those
 * whose stream moved off a connection gone since `old` when old is given). */
static int query_in_doubt(struct proto *p, int64_t now, int64_t due,
			  uint64_t only_conn, const struct routes *old,
			  struct outbox *ob)
{
	struct connlists cl = {0};
	struct indoubt_ctx x = {p, &cl, only_conn, old, {0}, SEMQ_OK};
	size_t i;
	int r;

	r = store_fetch_in_doubt(p->st, due, INDOUBT_LIMIT, indoubt_cb, &x);
	if (r == SEMQ_OK)
		r = x.r;
	for (i = 0; i < x.defer.n && r == SEMQ_OK; i++)
		r = store_defer(p->st, &x.defer.ids[i],
				now + p->c->query_after_ms);
	if (r == SEMQ_OK)
		r = connlists_emit(p, ob, &cl, IDF_QUERY, NULL);
	connlists_free(&cl);
	idlist_free(&x.defer);
	return r;
}

struct unacked_ctx {
	struct proto *p;
	struct connlists *cl;
	const char *only_origin; /* NULL = any */
	int r;
};

static int unacked_cb(void *ctx, const struct msgid *id, int result,
		      unsigned need, unsigned got, const char *via)
{
	struct unacked_ctx *x = ctx;
	struct idlist *l;
	uint64_t conn;

	(void)need;
	(void)got;
	if (x->only_origin && strcmp(x->only_origin, id->origin) != 0 &&
	    !(via && strcmp(x->only_origin, via) == 0))
		return 0;
	conn = stream_conn(x->p->routes, x->p->c, id->origin, id);
	if (!conn && via) {
		const struct route_hop *h =
			routes_pick(x->p->routes, via, id->origin, id->dest);
		conn = h ? h->conn_id : 0;
	}
	if (!conn)
		return 0;
	l = connlists_get(x->cl, conn);
	if (!l) {
		x->r = SEMQ_ERR_NOMEM;
		return 1;
	}
	x->r = idlist_add(l, id, result);
	return x->r != SEMQ_OK;
}

/* Repeats the 810-Indication of received rows still waiting for a response. */
static int repeat_unacked(struct proto *p, int64_t before, const char *origin,
			  struct outbox *ob)
{
	struct connlists cl = {0};
	struct unacked_ctx x = {p, &cl, origin, SEMQ_OK};
	int r;

	r = store_fetch_unacked(p->st, before, UNACKED_LIMIT, unacked_cb, &x);
	if (r == SEMQ_OK)
		r = x.r;
	if (r == SEMQ_OK)
		r = connlists_emit(p, ob, &cl, IDF_INDICATION, NULL);
	connlists_free(&cl);
	return r;
}

/*
 * A new routing snapshot. When a connection is gone while its peer is still
 * reachable on others (an instance left, or an older link of a pair was
 * dropped), the streams it carried moved: their in-doubt rows are queried on
 * their new connection now, as PEER_UP does for a connection that came up,
 * instead of after query_after.
 */
static int on_routes(struct proto *p, const struct job *j, int64_t now,
		     struct outbox *ob)
{
	struct routes *old = p->routes;
	size_t i;
	int moved = 0, r = SEMQ_OK;

	p->routes = routes_copy(j->routes);
	p->more_to_send = 1;
	if (p->routes && p->routes->cfg) /* a reload: new peers, routes */
		p->c = p->routes->cfg;
	if (!p->routes) {
		routes_free(old);
		return SEMQ_ERR_NOMEM;
	}
	if (p->apply_only) { /* for emit_ids (speaks_2, frame_limit) only */
		routes_free(old);
		return SEMQ_OK;
	}
	for (i = 0; old && i < old->n_hops && !moved; i++)
		moved = !conn_routed(p->routes, old->hops[i].conn_id) &&
			peer_up(p->routes, old->hops[i].peer);
	if (moved)
		r = query_in_doubt(p, now, INT64_MAX, 0, old, ob);
	routes_free(old);
	return r;
}

/* The hop of connection conn in the routes; NULL when it is not routed. */
static const struct route_hop *hop_of(const struct proto *p, uint64_t conn)
{
	size_t i;

	for (i = 0; p->routes && i < p->routes->n_hops; i++)
		if (p->routes->hops[i].conn_id == conn)
			return &p->routes->hops[i];
	return NULL;
}

/* Does connection conn speak wire revision 2 (the new frames)? */
static int speaks_2(const struct proto *p, uint64_t conn)
{
	const struct route_hop *h = hop_of(p, conn);

	return h && h->revision >= 2;
}

/* StreamQuery{origin, life, dests[0..n)} to conn (at most STREAMS per
 * frame). */
#define STREAMS_PER_FRAME 4096
static int emit_stream_query(struct proto *p, struct outbox *ob, uint64_t conn,
			     const char *origin, uint64_t life,
			     const struct names *dests)
{
	size_t off = 0, k;
	char **pd = NULL;
	int r = SEMQ_OK;

	if (dests->n)
		pd = calloc(dests->n, sizeof *pd);
	if (dests->n && !pd)
		return SEMQ_ERR_NOMEM;
	for (k = 0; k < dests->n; k++)
		pd[k] = (char *)dests->v[k];
	do {
		Semq__Frame f = SEMQ__FRAME__INIT;
		Semq__StreamQuery q = SEMQ__STREAM_QUERY__INIT;

		q.origin = (char *)origin;
		q.life = life;
		q.n_dests = dests->n - off < STREAMS_PER_FRAME
				    ? dests->n - off
				    : STREAMS_PER_FRAME;
		q.dests = pd ? pd + off : NULL;
		f.body_case = SEMQ__FRAME__BODY_STREAM_QUERY;
		f.stream_query = &q;
		r = outbox_frame(ob, conn, &f, p->c->max_frame);
		off += q.n_dests;
	} while (r == SEMQ_OK && off < dests->n);
	free(pd);
	return r;
}

static int out_dest_cb(void *ctx, const struct out_stream *os)
{
	return names_add(ctx, os->dest) != SEMQ_OK;
}

/*
 * A peer that says (Hello) it has another database than the one whose
 * stream to this node began here last was re-imaged or replaced: its new
 * messages start a new stream here, the earlier life's records stay. The
 * operator hears of it once per link.
 */
static int note_new_life(struct proto *p, const struct job *j)
{
	const struct route_hop *h = hop_of(p, j->conn_id);
	char lb[SEMQ_LIFE_STRLEN], ob[SEMQ_LIFE_STRLEN];
	uint64_t cur = 0;
	int r, known = 0;

	if (!h || h->revision < 2 || h->life == SEMQ_LIFE_NONE)
		return SEMQ_OK;
	r = store_origin_life(p->st, j->peer, &cur, &known);
	if (r != SEMQ_OK || !known || cur == h->life)
		return r;
	log_msg(LOG_WARN, "proto", j->peer, NULL,
		"%s has another database than before (life %s; its messages "
		"here came from life %s): re-imaged or replaced? Its new "
		"messages start new streams; the earlier life's records stay "
		"(semqctl lives)",
		j->peer, semq_life_str(h->life, lb, sizeof lb),
		semq_life_str(cur, ob, sizeof ob));
	return SEMQ_OK;
}

static int on_peer_up(struct proto *p, const struct job *j, int64_t now,
		      struct outbox *ob)
{
	struct names dests = {0};
	int r;

	log_msg(LOG_DEBUG, "proto", j->peer, NULL, "resynchronising");
	r = note_new_life(p, j);
	if (r == SEMQ_OK)
		r = query_in_doubt(p, now, INT64_MAX, j->conn_id, NULL, ob);
	if (r == SEMQ_OK)
		r = repeat_unacked(p, INT64_MAX, j->peer, ob);
	/* How far has this peer (and what is behind it) seen our streams?
	 * A database that went back in time learns it here. */
	if (r == SEMQ_OK && speaks_2(p, j->conn_id)) {
		r = store_streams_out(p->st, out_dest_cb, &dests);
		/* no stream of ours yet: nothing it could have seen */
		if (r == SEMQ_OK && dests.n)
			r = emit_stream_query(p, ob, j->conn_id, p->c->id,
					      p->life, &dests);
	}
	free(dests.v);
	/* A relay knows a destination once it has been connected. */
	if (r == SEMQ_OK && p->c->relay) {
		r = store_dest_seen(p->st, j->peer, now);
		p->unknown_due = 1;
		p->refusals_due = 1;
	}
	p->more_to_send = 1;
	return r;
}

/* ---- destinations a relay does not know ------------------------------------ */

struct unknown_ctx {
	struct proto *p;
	struct names dests;
	struct copy_ref *v;
	size_t n, cap;
	int r;
};

static int unknown_dest_cb(void *ctx, const char *dest, int64_t first_at)
{
	struct unknown_ctx *x = ctx;

	(void)first_at;
	if (configured_dest(x->p, dest) || peer_up(x->p->routes, dest))
		return 0;
	x->r = names_add(&x->dests, dest);
	return x->r != SEMQ_OK;
}

static int unknown_copy_cb(void *ctx, const struct copy_ref *c)
{
	struct unknown_ctx *x = ctx;

	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 64;
		void *v = realloc(x->v, cap * sizeof *x->v);
		if (!v) {
			x->r = SEMQ_ERR_NOMEM;
			return 1;
		}
		x->v = v;
		x->cap = cap;
	}
	x->v[x->n++] = *c;
	return 0;
}

/* The nodes whose streams could be told something now: every connected
 * peer, and each [route] destination whose next hop is connected. */
static int names_connected(const struct proto *p, struct names *l)
{
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; p->routes && i < p->routes->n_hops && r == SEMQ_OK; i++)
		r = names_add(l, p->routes->hops[i].peer);
	for (i = 0; i < p->c->n_routes && r == SEMQ_OK; i++)
		if (strcmp(p->c->routes[i].dest, "default") &&
		    peer_up(p->routes, p->c->routes[i].via))
			r = names_add(l, p->c->routes[i].dest);
	return r;
}

/*
 * Copies held for a destination that has never been connected here for
 * longer than unknown_dest_after: each origin connected now hears that
 * they are undeliverable (RelayAck UNKNOWN_DEST); it puts them dead for
 * its operator and takes them back, which drops them here. Until then they
 * are held (8, result undeliverable), not sent, and told again on every
 * pass (an answer may be lost; a copy an origin sends again is looked at
 * afresh, relay_one). At most INDOUBT_LIMIT copies per pass.
 */
static int notify_unknown(struct proto *p, int64_t now, struct outbox *ob)
{
	struct unknown_ctx x = {p, {0}, NULL, 0, 0, SEMQ_OK};
	struct names origins = {0};
	size_t i, k, o, budget = INDOUBT_LIMIT;
	int r;

	r = store_dests_unknown(p->st, now - p->c->unknown_dest_after_ms,
				unknown_dest_cb, &x);
	if (r == SEMQ_OK)
		r = x.r;
	r = r == SEMQ_OK ? names_connected(p, &origins) : r;
	for (i = 0; i < x.dests.n && r == SEMQ_OK; i++) {
		struct connlists cl = {0};
		char why[SEMQ_ERRLEN];
		unsigned newly = 0;

		/* Only copies whose origin can be told now, origin by origin:
		 * a backlog of one that is away holds up no other. */
		x.n = 0;
		for (o = 0; o < origins.n && r == SEMQ_OK && x.n < budget; o++)
			r = store_copies_for(p->st, x.dests.v[i], origins.v[o],
					     (unsigned)(budget - x.n),
					     unknown_copy_cb, &x);
		if (r == SEMQ_OK)
			r = x.r;
		budget -= x.n;
		snprintf(why, sizeof why,
			 "undeliverable: %s has never been connected to this "
			 "relay within [relay] unknown_dest_after; held until "
			 "its origin takes it back",
			 x.dests.v[i]);
		for (k = 0; k < x.n && r == SEMQ_OK; k++) {
			uint64_t conn = stream_conn(
				p->routes, p->c, x.v[k].id.origin, &x.v[k].id);
			struct idlist *l;

			if (!conn)
				continue; /* told when it connects */
			if (x.v[k].status == SS_UNSEND) {
				r = store_hold(p->st, &x.v[k].id,
					       RES_UNDELIVERABLE, why, now);
				if (r == SEMQ_OK)
					newly++;
				if (r == SEMQ_DECLINED)
					r = SEMQ_OK;
			}
			l = connlists_get(&cl, conn);
			if (r == SEMQ_OK)
				r = l ? idlist_add(l, &x.v[k].id, 0)
				      : SEMQ_ERR_NOMEM;
		}
		for (k = 0; k < cl.n && r == SEMQ_OK; k++)
			r = emit_relay_ack(
				p, ob, cl.v[k].conn,
				SEMQ__RELAY_ACK__KIND__UNREACHABLE,
				SEMQ__RELAY_REFUSAL__UNKNOWN_DEST, 0,
				&cl.v[k].l,
				refusal_detail(
					p, SEMQ__RELAY_REFUSAL__UNKNOWN_DEST,
					NULL));
		connlists_free(&cl);
		if (r == SEMQ_OK && newly) {
			p->cnt.relay_refused
				[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST] += newly;
			log_msg(LOG_WARN, "proto", NULL, NULL,
				"%u message(s) for %s held as undeliverable: "
				"%s has never been connected to this relay "
				"within [relay] unknown_dest_after (%" PRId64
				" ms); their origins were told and put them "
				"dead for their operators",
				newly, x.dests.v[i], x.dests.v[i],
				p->c->unknown_dest_after_ms);
		}
	}
	free(x.dests.v);
	free(x.v);
	free(origins.v);
	return r;
}

struct refused_ctx {
	struct proto *p;
	struct connlists *cl;
	unsigned n;
	int r;
};

static int refused_copy_cb(void *ctx, const struct copy_ref *c)
{
	struct refused_ctx *x = ctx;
	uint64_t conn =
		stream_conn(x->p->routes, x->p->c, c->id.origin, &c->id);
	struct idlist *l;

	x->n++;
	if (!conn || !speaks_2(x->p, conn)) /* refusals are revision 2 */
		return 0;
	l = connlists_get(x->cl, conn);
	x->r = l ? idlist_add(l, &c->id, c->result) : SEMQ_ERR_NOMEM;
	return x->r != SEMQ_OK;
}

/*
 * Copies this relay holds because their destination refused them
 * (hold_copy): their origins heard the refusal once, when it passed here;
 * that answer, or the origin's 810-Response taking the copy back, may have
 * been lost. Each origin connected now hears the refusal again (an
 * 810-Indication with it, as the destination repeats its indications): it
 * takes back a copy whose message it renumbered, and renumbers one it
 * still has under that seq. At most INDOUBT_LIMIT copies per pass.
 */
static int repeat_refusals(struct proto *p, struct outbox *ob)
{
	struct connlists cl = {0};
	struct names origins = {0};
	struct refused_ctx x = {p, &cl, 0, SEMQ_OK};
	size_t i;
	int r = names_connected(p, &origins);

	for (i = 0; i < origins.n && r == SEMQ_OK && x.n < INDOUBT_LIMIT; i++) {
		r = store_copies_refused(p->st, origins.v[i],
					 (unsigned)(INDOUBT_LIMIT - x.n),
					 refused_copy_cb, &x);
		if (r == SEMQ_OK)
			r = x.r;
	}
	for (i = 0; i < cl.n && r == SEMQ_OK; i++)
		r = emit_ids(p, ob, cl.v[i].conn, IDF_INDICATION, &cl.v[i].l,
			     NULL);
	connlists_free(&cl);
	free(origins.v);
	return r;
}

/* How often notify_unknown() runs (and at once after a peer came up). */
static int64_t unknown_pass_ms(const struct proto *p)
{
	int64_t t = p->c->unknown_dest_after_ms / 4;

	return t < 100 ? 100 : t > 60000 ? 60000 : t;
}

/* ---- stream state ------------------------------------------------------------ */

struct highs {
	Semq__StreamHigh *v;
	size_t n, cap;
	char (*dest)[SEMQ_ID_MAX + 1];
	int r;
};

static int highs_add(struct highs *h, const char *dest, uint64_t high)
{
	if (!high || h->n >= STREAMS_PER_FRAME)
		return SEMQ_OK;
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 16;
		void *v = realloc(h->v, cap * sizeof *h->v);
		void *d;
		if (!v)
			return SEMQ_ERR_NOMEM;
		h->v = v;
		d = realloc(h->dest, cap * sizeof *h->dest);
		if (!d)
			return SEMQ_ERR_NOMEM;
		h->dest = d;
		h->cap = cap;
	}
	snprintf(h->dest[h->n], sizeof h->dest[0], "%s", dest);
	semq__stream_high__init(&h->v[h->n]);
	h->v[h->n].high = high;
	h->n++;
	return SEMQ_OK;
}

static int relay_high_cb(void *ctx, const char *dest, uint64_t high)
{
	struct highs *h = ctx;

	h->r = highs_add(h, dest, high);
	return h->r != SEMQ_OK;
}

/*
 * StreamQuery: what this node has seen of (origin, life) — as the
 * destination of one of its streams, and as a relay of the others — goes
 * back to the asker; a relay also passes the question on to the
 * destinations behind it that speak revision 2, which answer end to end.
 */
static int on_stream_query(struct proto *p, const struct job *j,
			   struct outbox *ob)
{
	const Semq__StreamQuery *q = j->frame->stream_query;
	struct highs h = {0};
	struct names dests = {0};
	Semq__StreamHigh **ph = NULL;
	uint64_t high = 0;
	size_t i, k;
	int r;

	if (!strcmp(q->origin, p->c->id))
		return SEMQ_OK; /* our own question came back */
	r = store_stream_high(p->st, q->origin, p->c->id, q->life, &high);
	if (r == SEMQ_OK)
		r = highs_add(&h, p->c->id, high);
	if (r == SEMQ_OK && p->c->relay) {
		r = store_relay_streams(p->st, q->origin, q->life,
					relay_high_cb, &h);
		if (r == SEMQ_OK)
			r = h.r;
	}
	if (r == SEMQ_OK && h.n) {
		Semq__Frame f = SEMQ__FRAME__INIT;
		Semq__StreamState ss = SEMQ__STREAM_STATE__INIT;

		ph = calloc(h.n, sizeof *ph);
		if (!ph)
			r = SEMQ_ERR_NOMEM;
		for (i = 0; ph && i < h.n; i++) {
			h.v[i].dest = h.dest[i];
			ph[i] = &h.v[i];
		}
		ss.origin = q->origin;
		ss.life = q->life;
		ss.reporter = (char *)p->c->id;
		ss.n_streams = h.n;
		ss.streams = ph;
		f.body_case = SEMQ__FRAME__BODY_STREAM_STATE;
		f.stream_state = &ss;
		if (r == SEMQ_OK)
			r = outbox_frame(ob, j->conn_id, &f, p->c->max_frame);
	}
	/* A relay asks the destinations it can reach, once per link. */
	for (i = 0; r == SEMQ_OK && p->c->relay && i < q->n_dests; i++)
		r = names_add(&dests, q->dests[i]);
	for (i = 0; r == SEMQ_OK && p->c->relay && i < h.n; i++)
		r = names_add(&dests, h.dest[i]);
	for (i = 0; r == SEMQ_OK && i < dests.n; i++) {
		struct msgid sid;
		struct names one = {0};
		uint64_t conn;

		memset(&sid, 0, sizeof sid);
		snprintf(sid.origin, sizeof sid.origin, "%s", q->origin);
		snprintf(sid.dest, sizeof sid.dest, "%s", dests.v[i]);
		if (!strcmp(sid.dest, p->c->id) || !strcmp(sid.dest, q->origin))
			continue;
		conn = next_hop(p, sid.dest, &sid, j->conn_id);
		if (!conn || !speaks_2(p, conn))
			continue;
		for (k = 0; k < i; k++) { /* asked on this link already? */
			struct msgid o = sid;
			snprintf(o.dest, sizeof o.dest, "%s", dests.v[k]);
			if (next_hop(p, o.dest, &o, j->conn_id) == conn)
				break;
		}
		if (k < i)
			continue;
		/* every destination of the list behind this link */
		for (k = i; r == SEMQ_OK && k < dests.n; k++) {
			struct msgid o = sid;
			snprintf(o.dest, sizeof o.dest, "%s", dests.v[k]);
			if (strcmp(o.dest, p->c->id) &&
			    next_hop(p, o.dest, &o, j->conn_id) == conn)
				r = names_add(&one, o.dest);
		}
		if (r == SEMQ_OK)
			r = emit_stream_query(p, ob, conn, q->origin, q->life,
					      &one);
		free(one.v);
	}
	free(ph);
	free(h.v);
	free(h.dest);
	free(dests.v);
	return r;
}

/* StreamState: at the origin, a peer that has seen a stream further than
 * this database's counter says that the database went back in time; on
 * the way, passed on towards the origin. */
static int on_stream_state(struct proto *p, const struct job *j, int64_t now,
			   struct outbox *ob)
{
	const Semq__StreamState *ss = j->frame->stream_state;
	char note[SEMQ_ERRLEN], lb[SEMQ_LIFE_STRLEN];
	size_t i;
	int r = SEMQ_OK;

	if (strcmp(ss->origin, p->c->id) != 0) {
		struct msgid sid;
		uint64_t conn;
		Semq__Frame f = SEMQ__FRAME__INIT;

		memset(&sid, 0, sizeof sid);
		snprintf(sid.origin, sizeof sid.origin, "%s", ss->origin);
		snprintf(sid.dest, sizeof sid.dest, "%s", ss->reporter);
		conn = next_hop(p, ss->origin, &sid, j->conn_id);
		if (!conn || !speaks_2(p, conn))
			return SEMQ_OK;
		f.body_case = SEMQ__FRAME__BODY_STREAM_STATE;
		f.stream_state = (Semq__StreamState *)ss;
		return outbox_frame(ob, conn, &f, p->c->max_frame);
	}
	if (ss->life != p->life) {
		log_msg(LOG_DEBUG, "proto", j->peer, NULL,
			"stream state of an earlier life %s from %s: nothing "
			"of it here",
			semq_life_str(ss->life, lb, sizeof lb), ss->reporter);
		return SEMQ_OK;
	}
	for (i = 0; i < ss->n_streams && r == SEMQ_OK; i++) {
		uint64_t last = 0;

		snprintf(note, sizeof note, "its stream state, via %s",
			 j->peer);
		r = store_last_seq(p->st, ss->streams[i]->dest, &last);
		if (r == SEMQ_OK && ss->streams[i]->high > last)
			r = behind(p, ss->streams[i]->dest,
				   ss->streams[i]->high, ss->reporter, note,
				   now);
	}
	return r;
}

/* ---- sending ------------------------------------------------------------------ */

struct send_item {
	struct msg m; /* owns payload */
	uint64_t conn;
	int hide_life; /* goes without its life (hide_life()) */
};

struct send_ctx {
	struct proto *p;
	struct send_item *v;
	size_t n, cap;
	size_t fetched;
	struct idlist too_big; /* larger than the next hop accepts */
	struct names too_big_peer;
	int r;
};

/* The largest frame the hop accepts, and ours. */
static size_t frame_limit(const struct proto *p, const struct route_hop *h)
{
	size_t lim = p->c->max_frame;

	if (h && h->max_frame && h->max_frame < lim)
		lim = h->max_frame;
	return lim;
}

/* The bytes a frame of this one message takes, about (Data and Message
 * fields around the payload). */
#define FRAME_OVERHEAD 4096

/* The digest of m's key predecessor: from the rows fetched in this batch
 * (sent before it, in seq order), else the table (0 when it is gone). */
static int prev_digest(struct send_ctx *x, const struct msg *m, uint64_t *d)
{
	struct msgid pid = m->id;
	size_t i;
	int r;

	*d = 0;
	for (i = x->n; i-- > 0;)
		if (x->v[i].m.id.seq == m->prev_seq &&
		    x->v[i].m.id.life == m->id.life &&
		    !strcmp(x->v[i].m.id.dest, m->id.dest) &&
		    !strcmp(x->v[i].m.id.origin, m->id.origin)) {
			*d = x->v[i].m.id.digest;
			return SEMQ_OK;
		}
	pid.seq = m->prev_seq;
	pid.digest = 0;
	r = store_outbound_digest(x->p->st, &pid, d);
	return r == SEMQ_ERR_NOT_FOUND ? SEMQ_OK : r;
}

static int send_cb(void *ctx, const struct msg *m, const struct out_row *row)
{
	struct send_ctx *x = ctx;
	char why[SEMQ_ERRLEN];
	const struct route_hop *hop =
		stream_hop(x->p->routes, x->p->c, m->id.dest, &m->id);
	uint64_t conn = hop ? hop->conn_id : 0;
	struct send_item *it;

	(void)row;
	x->fetched++;
	/* A row the wire refuses (written into tb_0031 by hand: a key that is
	 * not UTF-8, a prev_seq without a key) would make every peer refuse
	 * the whole frame: the row stays unsent, visible in `semqctl
	 * outbound`, and the rest of the stream goes on. */
	if (codec_check_msg(m, why, sizeof why) != SEMQ_OK) {
		if (x->p->now - x->p->bad_row_warned >= 60000) {
			x->p->bad_row_warned = x->p->now;
			log_msg(LOG_ERROR, "proto", NULL, &m->id,
				"not sent, a peer would refuse it: %s; fix the "
				"row (UPDATE tb_0031 ...) or cancel it "
				"(semqctl outbound cancel)",
				why);
		}
		return 0;
	}
	/* A relay's copy never goes back towards the node it came from. */
	if (conn && strcmp(m->id.origin, x->p->c->id) != 0 &&
	    strcmp(hop->peer, m->id.origin) == 0)
		conn = 0;
	/* One the next hop would refuse as too big (its Hello's max_frame
	 * is below ours) would close the link at every try. */
	if (conn && m->payload_len + FRAME_OVERHEAD > frame_limit(x->p, hop)) {
		x->r = idlist_add(&x->too_big, &m->id, 0);
		if (x->r == SEMQ_OK)
			x->r = names_add(&x->too_big_peer, hop->peer);
		return x->r != SEMQ_OK;
	}
	if (!conn)
		return 0;
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 64;
		void *v = realloc(x->v, cap * sizeof *x->v);
		if (!v) {
			x->r = SEMQ_ERR_NOMEM;
			return 1;
		}
		x->v = v;
		x->cap = cap;
	}
	it = &x->v[x->n];
	it->m = *m;
	it->m.payload = NULL;
	it->hide_life = 0;
	if (strcmp(m->id.origin, x->p->c->id) == 0) {
		if (hop->revision < 2)
			x->r = hide_life(x->p, m->id.dest, hop->peer);
		if (x->r != SEMQ_OK)
			return 1;
		it->hide_life = life_hidden(x->p, m->id.dest);
		/* This node's own row: its digest (fixed when it is first
		 * sent) and its key predecessor's. A relay's copy carries
		 * what its origin sent. */
		if (!it->m.id.digest)
			it->m.id.digest = semq_msg_digest(m);
		it->m.prev_digest = 0;
		if (m->prev_seq) {
			x->r = prev_digest(x, m, &it->m.prev_digest);
			if (x->r != SEMQ_OK)
				return 1;
		}
	}
	if (m->tombstone)
		it->m.payload_len = 0; /* a cancel carries no document */
	if (strcmp(m->id.origin, x->p->c->id) != 0) /* a relay's copy */
		snprintf(it->m.stored_by, sizeof it->m.stored_by, "%s",
			 x->p->c->id);
	if (it->m.payload_len) {
		it->m.payload = malloc(m->payload_len);
		if (!it->m.payload) {
			x->r = SEMQ_ERR_NOMEM;
			return 1;
		}
		memcpy(it->m.payload, m->payload, m->payload_len);
	}
	it->conn = conn;
	x->n++;
	return 0;
}

/*
 * Messages larger than their next hop accepts (its Hello's max_frame):
 * sending one would close the link at every try. This node's own goes dead
 * for the operator (undeliverable, taken back from no one); a relay's copy
 * is held (status 8) with the reason.
 */
static int too_big(struct proto *p, struct send_ctx *x, int64_t now,
		   struct outbox *ob)
{
	struct idlist none = {0};
	size_t i;
	unsigned newly = 0;
	int r = SEMQ_OK;

	(void)ob;
	for (i = 0; i < x->too_big.n && r == SEMQ_OK; i++) {
		const struct msgid *id = &x->too_big.ids[i];
		char why[SEMQ_ERRLEN];
		int settled = 0;

		snprintf(why, sizeof why,
			 "undeliverable: larger than the next hop towards %s "
			 "(%s) accepts in a frame (its max_frame); raise its "
			 "[node] max_frame, then semqctl redo retry",
			 id->dest,
			 x->too_big_peer.n ? x->too_big_peer.v[0] : "?");
		if (strcmp(id->origin, p->c->id) == 0) {
			r = store_undeliverable(p->st, id, why, now, &settled);
			if (r == SEMQ_OK) {
				p->cnt.undeliverable++;
				newly++;
			}
		} else {
			r = store_hold(p->st, id, RES_UNDELIVERABLE, why, now);
			if (r == SEMQ_OK)
				newly++;
		}
		if (r == SEMQ_DECLINED || r == SEMQ_ERR_NOT_FOUND)
			r = SEMQ_OK;
	}
	if (newly)
		log_msg(LOG_ERROR, "proto", NULL, &x->too_big.ids[0],
			"%u message(s) larger than %s accepts in a frame: held "
			"for the operator (semqctl redo list / outbound list "
			"--status held)",
			newly, x->too_big_peer.n ? x->too_big_peer.v[0] : "?");
	idlist_free(&none);
	return r;
}

/* Emits the items of one connection as Data frames of bounded size. */
static int emit_data(struct proto *p, struct outbox *ob, uint64_t conn,
		     struct send_item *v, size_t n)
{
	Semq__Message *w = calloc(n, sizeof *w);
	Semq__Message **pw = calloc(n, sizeof *pw);
	size_t i, start = 0, bytes = 0, k = 0;
	size_t lim = frame_limit(p, hop_of(p, conn));
	int r = SEMQ_OK;

	if (!w || !pw) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	for (i = 0; i <= n && r == SEMQ_OK; i++) {
		int flush = i == n;

		if (!flush && v[i].conn != conn)
			continue;
		if (!flush && k > 0 &&
		    (bytes + v[i].m.payload_len + 512 > DATA_FRAME_BYTES ||
		     bytes + v[i].m.payload_len + FRAME_OVERHEAD > lim))
			flush = 2;
		if (flush && k > 0) {
			Semq__Frame f = SEMQ__FRAME__INIT;
			Semq__Data d = SEMQ__DATA__INIT;
			d.n_messages = k;
			d.messages = pw + start;
			f.body_case = SEMQ__FRAME__BODY_DATA;
			f.data = &d;
			r = outbox_frame(ob, conn, &f, lim);
			start += k;
			k = 0;
			bytes = 0;
		}
		if (i == n)
			break;
		semq__message__init(&w[start + k]);
		codec_msg_to_wire(&v[i].m, &w[start + k]);
		if (v[i].hide_life)
			w[start + k].life = SEMQ_LIFE_NONE;
		pw[start + k] = &w[start + k];
		bytes += v[i].m.payload_len + 64;
		k++;
	}
out:
	free(w);
	free(pw);
	return r;
}

/* The cancels, then the messages, due for dest (NULL: every one), within
 * what is left of limit. Cancels first: a later message of the same key
 * waits for its cancelled predecessor to be recorded. */
static int fetch_dest(struct proto *p, const char *dest, int64_t now,
		      unsigned limit, struct send_ctx *x)
{
	int r;

	if (x->fetched >= limit)
		return SEMQ_OK;
	r = dest ? store_fetch_tombstones_to(p->st, dest, now,
					     limit - (unsigned)x->fetched,
					     send_cb, x)
		 : store_fetch_tombstones(p->st, now,
					  limit - (unsigned)x->fetched, send_cb,
					  x);
	if (r == SEMQ_OK)
		r = x->r;
	if (r != SEMQ_OK || x->fetched >= limit)
		return r;
	return store_fetch_sendable(p->st, dest, now, p->c->window,
				    limit - (unsigned)x->fetched, send_cb, x);
}

/*
 * Fetches sendable rows (cancels and messages) only for destinations that
 * have a route now: all of them when the default route is up, else each
 * connected peer (once, however many instances of it are connected) and
 * each [route] destination whose next hop is connected. A backlog (or a
 * pile of cancels) for an offline destination is never read just to be
 * skipped, and never holds up another destination.
 */
static int fetch_reachable(struct proto *p, int64_t now, unsigned limit,
			   struct send_ctx *x)
{
	size_t i, k;
	int r = SEMQ_OK;

	if (route_lookup(p->routes, p->c, "default") &&
	    !peer_up(p->routes, "default"))
		return fetch_dest(p, NULL, now, limit, x);
	for (i = 0; i < p->routes->n_hops && r == SEMQ_OK; i++) {
		const char *peer = p->routes->hops[i].peer;

		if (x->fetched >= limit)
			return SEMQ_OK;
		for (k = 0; k < i; k++)
			if (strcmp(p->routes->hops[k].peer, peer) == 0)
				break;
		if (k < i)
			continue; /* another instance: fetched already */
		r = fetch_dest(p, peer, now, limit, x);
	}
	for (i = 0; i < p->c->n_routes && r == SEMQ_OK; i++) {
		const struct cfg_route *rt = &p->c->routes[i];
		if (x->fetched >= limit)
			return SEMQ_OK;
		if (strcmp(rt->dest, "default") == 0 ||
		    peer_up(p->routes, rt->dest) ||
		    !peer_up(p->routes, rt->via))
			continue;
		r = fetch_dest(p, rt->dest, now, limit, x);
	}
	return r;
}

static int send_pending(struct proto *p, int64_t now, struct outbox *ob)
{
	struct send_ctx x = {p, NULL, 0, 0, 0, {0}, {0}, SEMQ_OK};
	unsigned limit = p->c->batch_max;
	size_t i, j, n_sent = 0;
	int r;

	p->now = now;
	p->more_to_send = 0;
	if (!p->routes || !p->routes->n_hops)
		return SEMQ_OK;
	if (p->c->drain_rate) {
		/* A token bucket: at most drain_rate a second, bursts of at
		 * most one second's worth. */
		double rate = p->c->drain_rate;
		if (p->drain_at)
			p->drain_tokens +=
				rate * (double)(now - p->drain_at) / 1000.0;
		p->drain_at = now;
		if (p->drain_tokens > rate)
			p->drain_tokens = rate;
		if (p->drain_tokens < limit)
			limit = (unsigned)p->drain_tokens;
		if (!limit)
			return SEMQ_OK;
	}
	r = fetch_reachable(p, now, limit, &x);
	if (r == SEMQ_OK)
		r = x.r;
	if (r == SEMQ_OK && x.too_big.n)
		r = too_big(p, &x, now, ob);
	for (i = 0; i < x.n && r == SEMQ_OK; i++) {
		int64_t again = now + p->c->query_after_ms;
		if (x.v[i].m.tombstone)
			r = store_defer(p->st, &x.v[i].m.id, again);
		else
			r = store_mark_sent(p->st, &x.v[i].m.id, now, again);
		/* Declined: the row left status 0 meanwhile — another instance
		 * of this node (a shared PostgreSQL database) sent it, or it
		 * was cancelled. It is not sent from here (conn 0). */
		if (r == SEMQ_DECLINED) {
			x.v[i].conn = 0;
			r = SEMQ_OK;
		} else if (r == SEMQ_OK) {
			n_sent++;
		}
	}
	/* One run of frames per connection, in the order fetched (seq order
	 * within each stream). */
	for (i = 0; i < x.n && r == SEMQ_OK; i++) {
		uint64_t conn = x.v[i].conn;
		int first = conn != 0;
		for (j = 0; j < i && first; j++)
			if (x.v[j].conn == conn)
				first = 0;
		if (first)
			r = emit_data(p, ob, conn, x.v + i, x.n - i);
	}
	if (r == SEMQ_OK)
		p->cnt.sent += n_sent;
	if (p->c->drain_rate)
		p->drain_tokens -= (double)x.n;
	if (x.fetched >= limit && limit == p->c->batch_max)
		p->more_to_send = 1;
	for (i = 0; i < x.n; i++)
		msg_clear(&x.v[i].m);
	free(x.v);
	idlist_free(&x.too_big);
	free(x.too_big_peer.v);
	return r;
}

/* ---- redo and delayed messages ------------------------------------------ */

/*
 * tb_0033's next_attempt_at is the durable schedule. The wheel holds what is
 * due within HORIZON_MS (at most WHEEL_MAX entries), loaded by an indexed
 * scan when the horizon runs short or when this node changed the schedule
 * (a receipt went to redo, a redo ran, an operator woke us). A restart loses
 * nothing: the first scan rebuilds the wheel from the table.
 */
struct fill_ctx {
	struct proto *p;
	size_t n;
	int64_t last_at;
	int r;
};

static int fill_cb(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct fill_ctx *x = ctx;

	(void)m;
	x->r = wheel_add(x->p->wheel, (uint64_t)row->id, row->next_attempt_at);
	x->n++;
	x->last_at = row->next_attempt_at;
	return x->r != SEMQ_OK;
}

static int refill_wheel(struct proto *p, int64_t now)
{
	struct fill_ctx x = {p, 0, 0, SEMQ_OK};
	int r;

	if (!p->wheel) {
		p->wheel = wheel_new(WHEEL_SLOTS, WHEEL_TICK_MS, now);
		if (!p->wheel)
			return SEMQ_ERR_NOMEM;
		p->redo_dirty = 1;
	}
	if (!p->redo_dirty && now + HORIZON_MS / 2 < p->filled_until)
		return SEMQ_OK;
	r = store_redo_due(p->st, now + HORIZON_MS, WHEEL_MAX, fill_cb, &x);
	if (r == SEMQ_OK)
		r = x.r;
	if (r != SEMQ_OK)
		return r;
	/* Loaded everything within the horizon, or up to the last entry the
	 * cap let in: the next scan starts being needed from there. */
	p->filled_until = x.n >= WHEEL_MAX ? x.last_at : now + HORIZON_MS;
	p->redo_dirty = 0;
	return SEMQ_OK;
}

struct fired {
	uint64_t ids[REDO_LIMIT];
	size_t n;
	int more;
};

static void fire_cb(void *ctx, uint64_t id, int64_t at)
{
	struct fired *x = ctx;

	(void)at;
	if (x->n < REDO_LIMIT)
		x->ids[x->n++] = id;
	else
		x->more = 1; /* fired but not run now: the rescan brings it */
}

static int run_due_redo(struct proto *p, int64_t now)
{
	struct fired x;
	size_t i;
	int r;

	r = refill_wheel(p, now);
	if (r != SEMQ_OK)
		return r;
	x.n = 0;
	x.more = 0;
	wheel_advance(p->wheel, now, fire_cb, &x);
	for (i = 0; i < x.n && r == SEMQ_OK; i++) {
		int status = 0;

		if (p->redo_out) {
			/* A store worker runs it (proto_set_redo_out). */
			char origin[SEMQ_ID_MAX + 1];

			r = store_redo_origin(p->st, (int64_t)x.ids[i], origin,
					      sizeof origin);
			if (r == SEMQ_OK)
				r = p->redo_out(p->redo_ctx, (int64_t)x.ids[i],
						origin);
			if (r == SEMQ_ERR_NOT_FOUND) /* gone meanwhile */
				r = SEMQ_OK;
			continue;
		}
		r = store_redo_run(p->st, (int64_t)x.ids[i], now,
				   plughost_apply, p->ph, &status);
		if (r == SEMQ_DECLINED) /* done, discarded or moved meanwhile */
			r = SEMQ_OK;
	}
	if (r == SEMQ_OK && (x.n || x.more)) {
		/* Next levels and released successors are in the table now
		 * (this transaction): load them so the worker's sleep and
		 * the next tick see them at once. */
		p->redo_dirty = 1;
		r = refill_wheel(p, now);
	}
	return r;
}

void proto_set_apply_only(struct proto *p, int (*over)(void *ctx), void *ctx)
{
	p->apply_only = 1;
	p->over = over;
	p->over_ctx = ctx;
}

size_t proto_cut(const struct proto *p)
{
	return p->cut;
}

void proto_set_redo_out(struct proto *p,
			int (*out)(void *ctx, int64_t id, const char *origin),
			void *ctx)
{
	p->redo_out = out;
	p->redo_ctx = ctx;
}

int proto_take_schedule_changed(struct proto *p)
{
	int changed = p->schedule_changed;

	p->schedule_changed = 0;
	return changed;
}

int proto_holds(const struct proto *p, const char *origin)
{
	const struct held *h;

	for (h = p->held; h; h = h->next)
		if (strcmp(h->m.id.origin, origin) == 0)
			return 1;
	return 0;
}

int64_t proto_next_due(const struct proto *p)
{
	int64_t due = p->wheel ? wheel_next(p->wheel) : INT64_MAX,
		tr = trace_next_due(p->trace);

	return tr < due ? tr : due;
}

/* ---- entry points ------------------------------------------------------------ */

int proto_job(struct proto *p, const struct job *j, int64_t now,
	      struct outbox *ob)
{
	switch (j->kind) {
	case JOB_ROUTES: return on_routes(p, j, now, ob);
	case JOB_WAKE:
		/* new rows to send, or an operator changed the redo queue */
		p->more_to_send = 1;
		p->redo_dirty = 1;
		return SEMQ_OK;
	case JOB_PEER_UP: return on_peer_up(p, j, now, ob);
	case JOB_ADMIN: {
		if (!strcmp(j->admin->path, "/trace"))
			return trace_admin(p->trace, p->routes, j, now, ob);
		int changed = 0,
		    r = report_handle(p->st, p->c, j, now, ob, &changed);
		if (changed) /* an operator retried or discarded: rescan */
			p->redo_dirty = 1;
		return r;
	}
	case JOB_REDO: {
		int status = 0,
		    r = store_redo_run(p->st, j->redo_id, now, plughost_apply,
				       p->ph, &status);
		p->schedule_changed = 1;
		return r == SEMQ_DECLINED ? SEMQ_OK : r;
	}
	case JOB_FRAME: break;
	default: return SEMQ_ERR_INTERNAL;
	}
	switch (j->frame->body_case) {
	case SEMQ__FRAME__BODY_DATA: return on_data(p, j, now, ob);
	case SEMQ__FRAME__BODY_ACK_INDICATION:
		return on_indication(p, j, now, ob);
	case SEMQ__FRAME__BODY_ACK_RESPONSE: return on_response(p, j, ob);
	case SEMQ__FRAME__BODY_QUERY: return on_query(p, j, now, ob);
	case SEMQ__FRAME__BODY_QUERY_REPLY:
		return on_query_reply(p, j, now, ob);
	case SEMQ__FRAME__BODY_RELAY_ACK: return on_relay_ack(p, j, now, ob);
	case SEMQ__FRAME__BODY_STREAM_QUERY: return on_stream_query(p, j, ob);
	case SEMQ__FRAME__BODY_STREAM_STATE:
		return on_stream_state(p, j, now, ob);
	case SEMQ__FRAME__BODY_TRACE:
	case SEMQ__FRAME__BODY_TRACE_REPLY:
		return trace_on_frame(p->trace, p->routes, j, now, ob);
	default:
		/* Hello, Ping, Pong, Error stay on the network thread: a job
		 * with any other body is a bug upstream. */
		log_msg(LOG_ERROR, "proto", j->peer, NULL,
			"a frame of body %d reached the store thread",
			(int)j->frame->body_case);
		return SEMQ_ERR_INTERNAL;
	}
}

/* The application's new rows get their seq (migration 0007), in the batch
 * after their commit whether or not their destination is connected: at most
 * NUMBER_PER_TICK batches' worth a tick, the rest in the next, which comes
 * at once. */
static int number_new(struct proto *p, int64_t now)
{
	unsigned n = 0;
	int more = 0;
	int r = store_number_new(p->st, now, p->c->batch_max * NUMBER_PER_TICK,
				 0, &n, &more);

	if (r == SEMQ_OK && more)
		p->more_to_send = 1;
	return r;
}

int proto_tick(struct proto *p, int64_t now, struct outbox *ob)
{
	unsigned advanced = 0;
	int r = SEMQ_OK;

	if (p->held)
		r = retry_held(p, now, ob);
	if (p->apply_only)
		return r;
	if (r == SEMQ_OK)
		r = number_new(p, now);
	if (r == SEMQ_OK)
		r = send_pending(p, now, ob);
	if (r == SEMQ_OK && p->routes && p->routes->n_hops)
		r = query_in_doubt(p, now, now, 0, NULL, ob);
	if (r == SEMQ_OK &&
	    now - p->last_unacked_pass >= p->c->query_after_ms) {
		p->last_unacked_pass = now;
		r = repeat_unacked(p, now - p->c->query_after_ms, NULL, ob);
	}
	if (r == SEMQ_OK && p->wm_dirty) {
		r = store_advance_watermarks(p->st, &advanced);
		if (r == SEMQ_OK)
			p->wm_dirty = 0;
		/* Without a receipt retention the rows the watermark passed
		 * go at once (as before 0.2); else in the minute's purge. */
		if (r == SEMQ_OK && advanced && !p->c->receipt_retention_ms) {
			unsigned n = 0;
			r = store_receipt_purge(p->st, now, 0, PURGE_LIMIT, &n);
		}
		if (r == SEMQ_OK && advanced)
			fault_point("compaction_before_commit");
	}
	if (r == SEMQ_OK && now - p->last_purge >= PURGE_EVERY_MS) {
		unsigned n = 0;
		p->last_purge = now;
		r = store_purge(p->st, now, p->c->outbound_retention_ms,
				PURGE_LIMIT, &n);
		if (r == SEMQ_OK)
			r = store_redo_purge(p->st, now,
					     p->c->redo_retention_ms,
					     PURGE_LIMIT, &n);
		if (r == SEMQ_OK)
			r = store_receipt_purge(p->st, now,
						p->c->receipt_retention_ms,
						PURGE_LIMIT, &n);
	}
	if (r == SEMQ_OK && p->c->relay && p->c->store_and_forward &&
	    p->routes && p->routes->n_hops &&
	    (p->unknown_due ||
	     now - p->last_unknown_pass >= unknown_pass_ms(p))) {
		p->unknown_due = 0;
		p->last_unknown_pass = now;
		r = notify_unknown(p, now, ob);
	}
	if (r == SEMQ_OK && p->c->relay && p->routes && p->routes->n_hops &&
	    (p->refusals_due ||
	     now - p->last_refusal_pass >= p->c->query_after_ms)) {
		p->refusals_due = 0;
		p->last_refusal_pass = now;
		r = repeat_refusals(p, ob);
	}
	if (r == SEMQ_OK)
		r = run_due_redo(p, now);
	if (r == SEMQ_OK && trace_next_due(p->trace) <= now)
		r = trace_tick(p->trace, p->routes, now, ob);
	return r;
}
