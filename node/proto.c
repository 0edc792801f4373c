/* SPDX-License-Identifier: MIT */
/*
 * The protocol of SPEC §6 on the store side (see proto.h for the design).
 *
 * Every handler runs inside the worker's open batch and only queues answers
 * in the outbox; the worker sends them after the commit. Frames are built
 * from small growable arrays of wire structs whose strings point into the
 * struct msg / struct msgid values kept alongside, so nothing is copied twice.
 *
 * This file holds what the others share (the outbox, routing, id lists, the
 * life of a proto, lives), the entry points and the tick; receiving,
 * relaying, confirmations, resynchronisation, sending and redo have a
 * proto_*.c each, behind the private proto_int.h.
 */
#include "proto.h"
#include "proto_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "fault.h"
#include "log.h"
#include "report.h"
#include "rights.h"
#include "trace.h"
#include "wheel.h"

static int names_has(const struct names *l, const char *id)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->v[i], id))
			return 1;
	return 0;
}

int names_add(struct names *l, const char *id)
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
int peer_up(const struct routes *r, const char *peer)
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
int conn_routed(const struct routes *r, uint64_t conn)
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
const struct route_hop *stream_hop(const struct routes *r,
				   const struct config *c, const char *toward,
				   const struct msgid *id)
{
	const char *peer = next_peer(r, c, toward);

	return peer ? routes_pick(r, peer, id->origin, id->dest) : NULL;
}

/* Its connection; 0 when none. */
uint64_t stream_conn(const struct routes *r, const struct config *c,
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

void idlist_free(struct idlist *l)
{
	free(l->ids);
	free(l->results);
	free(l->highs);
	memset(l, 0, sizeof *l);
}

int idlist_add_high(struct idlist *l, const struct msgid *id, int result,
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

int idlist_add(struct idlist *l, const struct msgid *id, int result)
{
	return idlist_add_high(l, id, result, 0);
}

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
int verdict_from_wire(int result, int refusal, int dead)
{
	if (refusal == SEMQ__REFUSAL__REFUSAL_CONFLICT)
		return RES_CONFLICT;
	if (refusal == SEMQ__REFUSAL__REFUSAL_UNDECIDED)
		return RES_UNDECIDED;
	if (dead)
		return RES_DEAD;
	return result;
}

int is_refusal(int res)
{
	return res == RES_CONFLICT || res == RES_UNDECIDED;
}

/*
 * Emits the ids of `l` as frames of `kind` to conn, IDS_PER_FRAME at a time.
 * `from` is the AckResponse sender.
 */
int emit_ids(struct proto *p, struct outbox *ob, uint64_t conn, int kind,
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

struct idlist *connlists_get(struct connlists *cl, uint64_t conn)
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

int connlists_emit(struct proto *p, struct outbox *ob, struct connlists *cl,
		   int kind, const char *from)
{
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; i < cl->n && r == SEMQ_OK; i++)
		r = emit_ids(p, ob, cl->v[i].conn, kind, &cl->v[i].l, from);
	return r;
}

void connlists_free(struct connlists *cl)
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
	/* A watermark the batch advanced is back where it was; proto_tick
	 * cleared wm_dirty before the commit: look again. */
	p->wm_dirty = 1;
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
int in_redo(int result)
{
	return result == RES_REDO || result == RES_SCHEDULED ||
	       result == RES_DEAD;
}

const int64_t proto_latency_bounds_ms[PROTO_LATENCY_N - 1] = {
	10,   25,    50,    100,   250,    500,    1000,   2500,
	5000, 10000, 30000, 60000, 300000, 900000, 3600000};

/* Counts what store_receive() answered (rr) for m at now for metrics. */
void count_receipt(struct proto *p, int rr, int result, const struct msg *m,
		   int64_t now)
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
int life_hidden(struct proto *p, const char *dest)
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
int hide_life(struct proto *p, const char *dest, const char *via)
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

int resolve_life(struct proto *p, struct msgid *id)
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
const char *id_text(const struct msgid *id, char *buf, size_t sz)
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

/*
 * A frame of a kind the store thread has no handler for: Hello, Ping, Pong
 * and Error stay on the network thread, and a kind rights.c does not list
 * never becomes a job, so this is a bug upstream or a kind added without
 * its handler. Refused, never ignored: logged with the kind and the peer,
 * and the peer is sent a fatal Error(PROTOCOL) naming the kind (it closes
 * the link); nothing of the frame is stored, the batch goes on.
 */
static int refuse_kind(struct proto *p, const struct job *j, struct outbox *ob)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Error e = SEMQ__ERROR__INIT;
	char text[160];

	snprintf(text, sizeof text,
		 "a %s frame (body %d) has no handler on the store thread",
		 rights_kind_name(j->frame->body_case),
		 (int)j->frame->body_case);
	log_msg(LOG_ERROR, "proto", j->peer, NULL, "refused: %s", text);
	e.code = SEMQ__ERROR__CODE__PROTOCOL;
	e.text = text;
	e.fatal = 1;
	f.body_case = SEMQ__FRAME__BODY_ERROR;
	f.error = &e;
	return outbox_frame(ob, j->conn_id, &f, p->c->max_frame);
}

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
	default:
		log_msg(LOG_ERROR, "proto", NULL, NULL,
			"a job of kind %d has no handler", (int)j->kind);
		return SEMQ_ERR_INTERNAL;
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
	default: return refuse_kind(p, j, ob);
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
