/* SPDX-License-Identifier: MIT */
/*
 * Receiving (see proto.h): Data frames for this node and their
 * receipts, messages held for a missing predecessor, and on_data(), which
 * also hands the copies for other nodes to proto_relay.c.
 */
#include "proto_int.h"

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
uint64_t stream_high(struct proto *p, const struct msgid *id)
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

/* What a refusal of each reason says to the sender. */
const char *refusal_detail(const struct proto *p, int reason,
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

int on_data(struct proto *p, const struct job *j, int64_t now,
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
int retry_held(struct proto *p, int64_t now, struct outbox *ob)
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
