/* SPDX-License-Identifier: MIT */
/*
 * Sending (see proto.h): sendable rows into Data frames, within the
 * window, the drain rate and the next hop's frame size.
 */
#include "proto_int.h"

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

int send_pending(struct proto *p, int64_t now, struct outbox *ob)
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
