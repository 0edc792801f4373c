/* SPDX-License-Identifier: MIT */
/*
 * Relaying (see proto.h): passing frames on to the next hop, custody
 * (store_and_forward) with its quotas, RelayAck, and the destinations a
 * relay does not know.
 */
#include "proto_int.h"

/* ---- relaying -------------------------------------------------------------- */

int fwd_add(struct fwd *f, uint64_t conn, void *item)
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

void fwd_free(struct fwd *f)
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
int fwd_emit(struct proto *p, struct outbox *ob, struct fwd *f, int body,
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
uint64_t next_hop(const struct proto *p, const char *toward,
		  const struct msgid *id, uint64_t from_conn)
{
	uint64_t conn = stream_conn(p->routes, p->c, toward, id);

	return conn == from_conn ? 0 : conn;
}

/* A RelayAck of `kind` for the ids of l; `reason` (RELAY_REFUSAL_*) with
 * UNREACHABLE, `about_query` when it answers a Query. */
int emit_relay_ack(struct proto *p, struct outbox *ob, uint64_t conn, int kind,
		   int reason, int about_query, const struct idlist *l,
		   const char *detail)
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

int relayed_flush(struct proto *p, struct relayed *x, int64_t now)
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

/* Does this node's configuration name `dest` ([peer], [route]), or send
 * every destination on ([route] default, a further relay decides)? */
int configured_dest(const struct proto *p, const char *dest)
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
int relay_one(struct proto *p, const struct job *j, Semq__Message *w,
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
int notify_unknown(struct proto *p, int64_t now, struct outbox *ob)
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
int repeat_refusals(struct proto *p, struct outbox *ob)
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
int64_t unknown_pass_ms(const struct proto *p)
{
	int64_t t = p->c->unknown_dest_after_ms / 4;

	return t < 100 ? 100 : t > 60000 ? 60000 : t;
}
