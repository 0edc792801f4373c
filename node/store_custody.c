/* SPDX-License-Identifier: MIT */
/*
 * Custody (docs/PROTOCOL.md, "Custody"): an origin's rows that a relay holds
 * (tb_0031.custodian), a relay's copies counted per origin and destination
 * for its quotas (semq_custody, kept by triggers of db/0004_custody.sql),
 * the destinations a relay knows (semq_dest), cancels that replace a copy,
 * and an origin's undeliverable messages, dead in its own tb_0033 with the
 * relay's reason until an operator retries or discards them.
 */
#include "store_int.h"

int store_mark_custody(struct store *st, const struct msgid *id,
		       const char *relay, int64_t next_at)
{
	const struct targ a[] = {TT(relay), TI(next_at),
				 TD(id ? id->digest : 0)};
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "mark custody: relay", relay, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	return out_transition(st, Q_OUT_MARK_CUSTODY, id, a, 3, "mark custody",
			      "4, 6 or an unanswered -2", NULL);
}

int store_fetch_tombstones_to(struct store *st, const char *dest, int64_t now,
			      unsigned limit, store_out_cb cb, void *ctx)
{
	struct db_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "fetch tombstones: dest", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	s = q_get(st, Q_OUT_TOMBSTONES_TO);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, now);
	db_bind_int64(s, 2, limit);
	db_bind_text(s, 3, dest);
	r = each_out(st, s, cb, ctx, NULL, NULL);
	q_put(st, Q_OUT_TOMBSTONES_TO, s);
	return r;
}

int store_undeliverable(struct store *st, const struct msgid *id,
			const char *why, int64_t now, int *settled)
{
	struct msg m;
	struct out_row row;
	char idb[MSGID_STRLEN];
	int r, own = 0;

	*settled = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		return r;
	r = store_outbound_get(st, id, &m, &row);
	if (r == SEMQ_ERR_NOT_FOUND) {
		*settled = 1; /* purged, or renumbered away */
		return tx_close(st, own, r);
	}
	if (r)
		return tx_close(st, own, r);
	msgid_str(id, idb, sizeof idb);
	if (strcmp(m.id.origin, st->node_id) != 0 ||
	    (id->digest && m.id.digest && id->digest != m.id.digest)) {
		/* a relay's copy, or another message under this id */
		r = seterr(st, SEMQ_DECLINED, "%s: not this node's message",
			   idb);
	} else if (row.status == SS_CANCELLED && row.result < 0) {
		/* The cancel of a message nobody could deliver: it took no
		 * effect anywhere. */
		const struct targ a[] = {TI(RES_CANCELLED), TI(now), TD(0)};
		r = out_transition(st, Q_OUT_MARK_CONFIRMED, id, a, 3,
				   "mark confirmed", "-2", NULL);
		*settled = r == SEMQ_OK;
	} else if (row.status == SS_UNSEND || row.status == SS_SEND ||
		   row.status == SS_ACK) {
		r = store_hold(st, id, RES_UNDELIVERABLE, why, now);
		if (!r)
			r = store__redo_insert_q(st, Q_REDO_OWN_DEAD, &m,
						 RS_DEAD, 0, 0, now, why, now,
						 idb);
		*settled = r == SEMQ_OK;
	} else {
		/* held already, or finished: nothing made undeliverable now */
		*settled = row.status != SS_HELD ||
			   row.result == RES_UNDELIVERABLE;
		r = seterr(st, SEMQ_DECLINED, "%s: %s already", idb,
			   semq_status_name("tb_0031", row.status));
	}
	msg_clear(&m);
	return tx_close(st, own, r);
}

/* Rows of statement q (bound: this node's id) as (dest, relay, n, since):
 * the custody an origin's rows are in, counted (Q_CNT_WAITING) or scanned
 * (Q_OUT_WAITING). */
int store__waiting_rows(struct store *st, enum q q, const char *what,
			store_waiting_cb cb, void *ctx)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s: callback is missing",
			      what);
	s = q_get(st, q);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, st->node_id);
	while ((rc = db_step(s)) == DB_ROW) {
		char dest[SEMQ_ID_MAX + 1], relay[SEMQ_ID_MAX + 1];

		col_text(dest, sizeof dest, s, 0);
		col_text(relay, sizeof relay, s, 1);
		if (cb(ctx, dest, relay, db_col_int64(s, 2),
		       db_col_null(s, 3) ? 0 : db_col_int64(s, 3)))
			break;
	}
	if (rc < 0)
		r = dberr(st, what);
	q_put(st, q, s);
	return r;
}

int store_custody_waiting(struct store *st, store_waiting_cb cb, void *ctx)
{
	return store__waiting_rows(st, Q_OUT_WAITING, "reading custody", cb,
				   ctx);
}

int store_custody_use(struct store *st, const char *origin,
		      struct custody_use *u)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	memset(u, 0, sizeof *u);
	if (!st)
		return SEMQ_ERR_INVALID;
	s = q_get(st, Q_CUSTODY_USE);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin ? origin : "");
	rc = db_step(s);
	if (rc == DB_ROW) {
		u->messages = db_col_int64(s, 0);
		u->bytes = db_col_int64(s, 1);
		u->all_messages = db_col_int64(s, 2);
		u->all_bytes = db_col_int64(s, 3);
	} else {
		r = dberr(st, "reading semq_custody");
	}
	q_put(st, Q_CUSTODY_USE, s);
	return r;
}

int store_custody_list(struct store *st, store_custody_cb cb, void *ctx)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st || !cb)
		return SEMQ_ERR_INVALID;
	s = q_get(st, Q_CUSTODY_LIST);
	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = db_step(s)) == DB_ROW) {
		char origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];

		col_text(origin, sizeof origin, s, 0);
		col_text(dest, sizeof dest, s, 1);
		if (cb(ctx, origin, dest, db_col_int64(s, 2),
		       db_col_int64(s, 3),
		       db_col_null(s, 4) ? 0 : db_col_int64(s, 4)))
			break;
	}
	if (rc < 0)
		r = dberr(st, "reading semq_custody");
	q_put(st, Q_CUSTODY_LIST, s);
	return r;
}

int store_copy_cancel(struct store *st, const struct msgid *id, int64_t now)
{
	const struct targ a[] = {TI(now), TD(id ? id->digest : 0)};

	return out_transition(st, Q_COPY_CANCEL, id, a, 2, "cancel a copy",
			      "a copy in 0, 4 or 6", NULL);
}

int store_copy_unhold(struct store *st, const struct msgid *id, int64_t now)
{
	const struct targ a[] = {TI(now)};

	return out_transition(st, Q_COPY_UNHOLD, id, a, 1, "send a copy again",
			      "a copy held undeliverable", NULL);
}

int store_dest_seen(struct store *st, const char *dest, int64_t now)
{
	struct db_stmt *s;
	int r, rc, own = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "dest seen", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	r = tx_open(st, &own);
	if (r)
		return r;
	s = q_get(st, Q_DEST_SEEN);
	if (!s)
		return tx_close(st, own, SEMQ_ERR_DB);
	db_bind_text(s, 1, dest);
	db_bind_int64(s, 2, now);
	rc = db_step(s);
	q_put(st, Q_DEST_SEEN, s);
	return tx_close(st, own, rc < 0 ? dberr(st, "writing semq_dest") : r);
}

int store_dest_note(struct store *st, const char *dest, int64_t now,
		    int64_t *first_at, int *seen)
{
	struct db_stmt *s;
	int r, rc, own = 0;

	*first_at = now;
	*seen = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "dest note", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	r = tx_open(st, &own);
	if (r)
		return r;
	s = q_get(st, Q_DEST_NOTE);
	if (!s)
		return tx_close(st, own, SEMQ_ERR_DB);
	db_bind_text(s, 1, dest);
	db_bind_int64(s, 2, now);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*first_at = db_col_null(s, 0) ? now : db_col_int64(s, 0);
		*seen = !db_col_null(s, 1);
		while ((rc = db_step(s)) == DB_ROW)
			;
	}
	q_put(st, Q_DEST_NOTE, s);
	if (rc < 0)
		r = dberr(st, "writing semq_dest");
	return tx_close(st, own, r);
}

int store_dest_get(struct store *st, const char *dest, int64_t *first_at,
		   int *seen, int *found)
{
	struct db_stmt *s;
	int r, rc;

	*first_at = 0;
	*seen = *found = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "dest get", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	s = q_get(st, Q_DEST_GET);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, dest);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*found = 1;
		*first_at = db_col_null(s, 0) ? 0 : db_col_int64(s, 0);
		*seen = !db_col_null(s, 1);
	}
	r = rc < 0 ? dberr(st, "reading semq_dest") : SEMQ_OK;
	q_put(st, Q_DEST_GET, s);
	return r;
}

int store_dests_unknown(struct store *st, int64_t before, store_dest_cb cb,
			void *ctx)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st || !cb)
		return SEMQ_ERR_INVALID;
	s = q_get(st, Q_DEST_UNKNOWN);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, before);
	while ((rc = db_step(s)) == DB_ROW) {
		char dest[SEMQ_ID_MAX + 1];

		col_text(dest, sizeof dest, s, 0);
		if (cb(ctx, dest, db_col_int64(s, 1)))
			break;
	}
	if (rc < 0)
		r = dberr(st, "reading semq_dest");
	q_put(st, Q_DEST_UNKNOWN, s);
	return r;
}

int store_copies_for(struct store *st, const char *dest, const char *origin,
		     unsigned limit, store_copy_cb cb, void *ctx)
{
	struct db_stmt *s;
	int rc, r;

	if (!st || !cb)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "copies for", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	s = q_get(st, Q_COPIES_FOR);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, dest);
	db_bind_int64(s, 2, limit);
	db_bind_text(s, 3, origin);
	while ((rc = db_step(s)) == DB_ROW) {
		struct copy_ref c;

		memset(&c, 0, sizeof c);
		col_text(c.id.origin, sizeof c.id.origin, s, 0);
		col_text(c.id.dest, sizeof c.id.dest, s, 1);
		c.id.seq = (uint64_t)db_col_int64(s, 2);
		c.id.life = (uint64_t)db_col_int64(s, 3);
		c.id.digest =
			db_col_null(s, 4) ? 0 : (uint64_t)db_col_int64(s, 4);
		c.status = col_int(s, 5);
		c.tombstone = c.status == SS_CANCELLED;
		if (cb(ctx, &c))
			break;
	}
	r = rc < 0 ? dberr(st, "reading copies") : SEMQ_OK;
	q_put(st, Q_COPIES_FOR, s);
	return r;
}

int store_copies_refused(struct store *st, const char *origin, unsigned limit,
			 store_copy_cb cb, void *ctx)
{
	struct db_stmt *s;
	int rc, r;

	if (!st || !cb)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "refused copies of", origin, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	s = q_get(st, Q_COPIES_REFUSED);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_int64(s, 2, limit);
	while ((rc = db_step(s)) == DB_ROW) {
		struct copy_ref c;

		memset(&c, 0, sizeof c);
		col_text(c.id.origin, sizeof c.id.origin, s, 0);
		col_text(c.id.dest, sizeof c.id.dest, s, 1);
		c.id.seq = (uint64_t)db_col_int64(s, 2);
		c.id.life = (uint64_t)db_col_int64(s, 3);
		c.id.digest =
			db_col_null(s, 4) ? 0 : (uint64_t)db_col_int64(s, 4);
		c.status = SS_HELD;
		c.result = col_int(s, 5);
		if (cb(ctx, &c))
			break;
	}
	r = rc < 0 ? dberr(st, "reading refused copies") : SEMQ_OK;
	q_put(st, Q_COPIES_REFUSED, s);
	return r;
}

int store_outbound_sent_at(struct store *st, const struct msgid *id,
			   int64_t *sent_at)
{
	struct db_stmt *s;
	int rc, r;

	*sent_at = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	s = q_get(st, Q_OUT_SENT_AT);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW)
		*sent_at = db_col_null(s, 0) ? 0 : db_col_int64(s, 0);
	r = rc == DB_ROW    ? SEMQ_OK
	    : rc == DB_DONE ? SEMQ_ERR_NOT_FOUND
			    : dberr(st, "reading tb_0031");
	q_put(st, Q_OUT_SENT_AT, s);
	return r;
}
