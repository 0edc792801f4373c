/* SPDX-License-Identifier: MIT */
/*
 * Resynchronisation and periodic work (see proto.h): in-doubt rows
 * queried, unanswered indications repeated, routes and peers coming up, and
 * the stream-state exchange (StreamQuery / StreamState).
 */
#include "proto_int.h"

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
int query_in_doubt(struct proto *p, int64_t now, int64_t due,
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
int repeat_unacked(struct proto *p, int64_t before, const char *origin,
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
int on_routes(struct proto *p, const struct job *j, int64_t now,
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
const struct route_hop *hop_of(const struct proto *p, uint64_t conn)
{
	size_t i;

	for (i = 0; p->routes && i < p->routes->n_hops; i++)
		if (p->routes->hops[i].conn_id == conn)
			return &p->routes->hops[i];
	return NULL;
}

/* Does connection conn speak wire revision 2 (the new frames)? */
int speaks_2(const struct proto *p, uint64_t conn)
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

int on_peer_up(struct proto *p, const struct job *j, int64_t now,
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
int on_stream_query(struct proto *p, const struct job *j, struct outbox *ob)
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
int on_stream_state(struct proto *p, const struct job *j, int64_t now,
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
