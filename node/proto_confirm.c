/* SPDX-License-Identifier: MIT */
/*
 * Confirmations (see proto.h): 810-Indications and Responses, a
 * destination's refusals and the origin's reaction, Query and QueryReply,
 * and a relay's RelayAck at the origin.
 */
#include "proto_int.h"

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
int behind(struct proto *p, const char *dest, uint64_t high,
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

int on_indication(struct proto *p, const struct job *j, int64_t now,
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

int on_response(struct proto *p, const struct job *j, struct outbox *ob)
{
	const Semq__AckResponse *ar = j->frame->ack_response;
	struct fwd fw = {0};
	size_t i;
	int r = SEMQ_OK;

	for (i = 0; i < ar->n_ids && r == SEMQ_OK; i++) {
		struct msgid id;
		int ok = 0;
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
		r = store_ack_response(p->st, &id, bit, &ok);
		if (r == SEMQ_DECLINED)
			r = SEMQ_OK;
		if (ok)
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

int on_query(struct proto *p, const struct job *j, int64_t now,
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

int on_query_reply(struct proto *p, const struct job *j, int64_t now,
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
int undeliverable(struct proto *p, const struct msgid *id, const char *relay,
		  int reason, const char *detail, int64_t now,
		  struct idlist *retract_l, unsigned *newly)
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
int on_relay_ack(struct proto *p, const struct job *j, int64_t now,
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
