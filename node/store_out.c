/* SPDX-License-Identifier: MIT */
/*
 * The origin side: tb_0031, the outbound queue — enqueueing (the
 * application's contract and a relay's store-and-forward copies), fetching
 * what may be sent, the status transitions of SPEC §4, tombstones, the
 * in-doubt rows, the purge, listings.
 */
#include "store_int.h"

/* ---- origin side: tb_0031 ------------------------------------------------- */

int store_enqueue(struct store *st, const struct msg *m, uint64_t *seq_out,
		  char *err, size_t errsz)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;
	int64_t rowid = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!m) {
		r = seterr(st, SEMQ_ERR_INVALID, "%s",
			   "enqueue: message is missing");
		goto out;
	}
	r = check_node(st, "dest", m->id.dest, sizeof m->id.dest);
	if (!r)
		r = check_body(st, "enqueue", m);
	if (r)
		goto out;
	if (m->payload_len > st->max_payload) {
		r = seterr(st, SEMQ_ERR_TOO_BIG,
			   "enqueue to %s: payload of %zu bytes is larger than "
			   "max_payload (%zu)",
			   m->id.dest, m->payload_len, st->max_payload);
		goto out;
	}
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_OUT_INSERT);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_text(s, 1, m->id.dest);
	db_bind_int64(s, 2, m->type);
	bind_key(s, 3, m);
	bind_payload(s, 4, m);
	db_bind_int64(s, 5, m->deliver_at);
	if (m->created_at > 0)
		db_bind_int64(s, 6, m->created_at);
	else
		db_bind_null(s, 6);
	rc = db_step(s);
	if (rc == DB_ROW) {
		rowid = db_col_int64(s, 0);
		rc = db_step(s); /* to the end: the insert is complete */
	}
	if (rc < 0) {
		const char *msg = db_errmsg(st->db);
		enum db_errclass ec = db_errclass(st->db);

		if (strstr(msg, "larger than max_payload"))
			r = seterr(st, SEMQ_ERR_TOO_BIG, "enqueue to %s: %s",
				   m->id.dest, msg);
		else if (ec == DB_E_CONSTRAINT || ec == DB_E_UNIQUE)
			r = seterr(st, SEMQ_ERR_INVALID, "enqueue to %s: %s",
				   m->id.dest, msg);
		else
			r = dberr(st, "enqueue");
		st->tx_failed = 1;
		goto out;
	}
	q_put(st, Q_OUT_INSERT, s);
	s = NULL;
	if (!rowid) {
		r = seterr(st, SEMQ_ERR_INTERNAL, "%s",
			   "enqueue: the insert returned no row id");
		goto out;
	}
	s = q_get(st, Q_OUT_SEQ);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_int64(s, 1, rowid);
	rc = db_step(s);
	if (rc != DB_ROW) {
		r = rc == DB_DONE ? seterr(st, SEMQ_ERR_INTERNAL, "%s",
					   "enqueue: inserted row vanished")
				  : dberr(st, "enqueue: reading seq");
		q_put(st, Q_OUT_SEQ, s);
		s = NULL;
		goto out;
	}
	if (seq_out)
		*seq_out = (uint64_t)db_col_int64(s, 0);
	q_put(st, Q_OUT_SEQ, s);
	s = NULL;
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_INSERT, s);
	r = tx_close(st, own, r);
	if (r < 0)
		copy_err(st, err, errsz);
	return r;
}

int store_enqueue_copy(struct store *st, const struct msg *m, int64_t now)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;
	char idb[MSGID_STRLEN];

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!m)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "enqueue_copy: message is missing");
	r = check_msgid(st, &m->id);
	if (r)
		return r;
	msgid_str(&m->id, idb, sizeof idb);
	r = check_body(st, idb, m);
	if (r)
		return r;
	if (m->payload_len > st->max_payload)
		return seterr(st, SEMQ_ERR_TOO_BIG,
			      "%s: payload of %zu bytes is larger than "
			      "max_payload (%zu)",
			      idb, m->payload_len, st->max_payload);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_OUT_COPY);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	bind_id(s, &m->id);
	db_bind_int64(s, 4, m->type);
	bind_key(s, 5, m);
	db_bind_int64(s, 6, (int64_t)m->prev_seq);
	db_bind_int64(s, 7, m->deliver_at);
	bind_payload(s, 8, m);
	db_bind_int64(s, 9, m->created_at);
	/* A tombstone is kept as what it is: a cancelled row to deliver. */
	db_bind_int64(s, 10, m->tombstone ? SS_CANCELLED : SS_UNSEND);
	db_bind_int64(s, 11, now);
	rc = db_step(s);
	if (rc < 0) {
		enum db_errclass ec = db_errclass(st->db);

		if (ec == DB_E_CONSTRAINT || ec == DB_E_UNIQUE) {
			r = seterr(st, SEMQ_ERR_INVALID, "%s: %s", idb,
				   db_errmsg(st->db));
			st->tx_failed = 1;
		} else {
			r = dberr(st, idb);
		}
		goto out;
	}
	if (db_changes(st->db) == 0) {
		r = seterr(st, SEMQ_DUPLICATE, "%s: already stored", idb);
		goto out;
	}
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_COPY, s);
	return tx_close(st, own, r);
}

/* Next stream with unsent rows after (sd, so); *found = 0 at the end. */
static int next_stream(struct store *st, const char *dest, char *sd, char *so,
		       int *found)
{
	enum q i = dest ? Q_OUT_NEXT_STREAM_DEST : Q_OUT_NEXT_STREAM;
	struct db_stmt *s = q_get(st, i);
	char nd[SEMQ_ID_MAX + 1], no[SEMQ_ID_MAX + 1];
	int rc, r = SEMQ_OK;

	*found = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, dest ? dest : sd);
	db_bind_text(s, 2, so);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*found = 1;
		col_text(nd, sizeof nd, s, 0);
		col_text(no, sizeof no, s, 1);
	} else if (rc < 0) {
		r = dberr(st, "fetch_sendable: listing streams");
	}
	q_put(st, i, s); /* sd and so are bound: overwrite them after */
	if (*found) {
		memcpy(sd, nd, sizeof nd);
		memcpy(so, no, sizeof no);
	}
	return r;
}

static int stream_cmp(const char *d1, const char *o1, const char *d2,
		      const char *o2)
{
	int c = strcmp(d1, d2);

	return c ? c : strcmp(o1, o2);
}

int store_fetch_sendable(struct store *st, const char *dest, int64_t now,
			 unsigned window, unsigned limit, store_out_cb cb,
			 void *ctx)
{
	char cd[SEMQ_ID_MAX + 1] = "", co[SEMQ_ID_MAX + 1] = ""; /* cursor */
	char sd[SEMQ_ID_MAX + 1] = "", so[SEMQ_ID_MAX + 1] = ""; /* stream */
	char ld[SEMQ_ID_MAX + 1] = "", lo[SEMQ_ID_MAX + 1] = ""; /* served */
	struct db_stmt *s = NULL;
	unsigned left = limit, n;
	int r = SEMQ_ERR_INTERNAL, found, wrapped = 0, stopped = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "fetch_sendable: callback is missing");
	if (dest) {
		r = check_node(st, "fetch_sendable: dest", dest,
			       SEMQ_ID_MAX + 1);
		if (r)
			return r;
	}
	/* Round robin: begin after the stream served last time. */
	if (!dest || strcmp(dest, st->rr_dest) == 0) {
		memcpy(cd, st->rr_dest, sizeof cd);
		memcpy(co, st->rr_origin, sizeof co);
	}
	memcpy(sd, cd, sizeof sd);
	memcpy(so, co, sizeof so);
	while (left > 0 && !stopped) {
		int64_t inflight;
		unsigned room;
		int rc;

		r = next_stream(st, dest, sd, so, &found);
		if (r)
			goto out;
		if (!found) {
			if (wrapped || (!cd[0] && !co[0]))
				break;
			wrapped = 1;
			sd[0] = so[0] = '\0';
			continue;
		}
		if (wrapped && stream_cmp(sd, so, cd, co) > 0)
			break;

		s = q_get(st, Q_OUT_INFLIGHT);
		if (!s) {
			r = SEMQ_ERR_DB;
			goto out;
		}
		db_bind_text(s, 1, so);
		db_bind_text(s, 2, sd);
		rc = db_step(s);
		if (rc != DB_ROW) {
			r = dberr(st, "fetch_sendable: counting in flight");
			goto out;
		}
		inflight = db_col_int64(s, 0);
		q_put(st, Q_OUT_INFLIGHT, s);
		s = NULL;
		room = (int64_t)window > inflight
			       ? (unsigned)((int64_t)window - inflight)
			       : 0;
		if (room > left)
			room = left;
		if (!room)
			continue;

		s = q_get(st, Q_OUT_SENDABLE);
		if (!s) {
			r = SEMQ_ERR_DB;
			goto out;
		}
		db_bind_text(s, 1, sd);
		db_bind_text(s, 2, so);
		db_bind_int64(s, 3, now);
		db_bind_int64(s, 4, room);
		n = 0;
		r = each_out(st, s, cb, ctx, &n, &stopped);
		q_put(st, Q_OUT_SENDABLE, s);
		s = NULL;
		if (r)
			goto out;
		if (n) {
			memcpy(ld, sd, sizeof ld);
			memcpy(lo, so, sizeof lo);
		}
		left -= n < left ? n : left;
	}
	if (ld[0]) {
		memcpy(st->rr_dest, ld, sizeof ld);
		memcpy(st->rr_origin, lo, sizeof lo);
	}
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_INFLIGHT, s);
	return r;
}

/*
 * Why an outbound transition did not apply: no row, or its status.
 * *status gets the row's status (INT_MIN when there is no row).
 */
static int out_declined(struct store *st, const struct msgid *id,
			const char *what, const char *wanted, int *status)
{
	struct db_stmt *s = q_get(st, Q_OUT_STATUS);
	char idb[MSGID_STRLEN];
	int rc, r;

	*status = INT_MIN;
	msgid_str(id, idb, sizeof idb);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*status = col_int(s, 0);
		r = seterr(st, SEMQ_DECLINED, "%s: %s: in status %d, not %s",
			   idb, what, *status, wanted);
	} else if (rc == DB_DONE) {
		r = seterr(st, SEMQ_DECLINED, "%s: %s: no such message", idb,
			   what);
	} else {
		r = dberr(st, idb);
	}
	q_put(st, Q_OUT_STATUS, s);
	return r;
}

/*
 * Runs one of the outbound transitions: `i` binds the id as ?1..?3 and, as
 * far as its statement has `nargs` parameters, a4/a5 (a5_text when
 * `a5_is_text`) as ?4/?5. SEMQ_DECLINED (errmsg says why, *declined_status
 * the status found or INT_MIN when there is no row) when no row was in a
 * status the transition applies to.
 */
static int out_transition(struct store *st, enum q i, const struct msgid *id,
			  int nargs, int64_t a4, int64_t a5,
			  const char *a5_text, int a5_is_text, const char *what,
			  const char *wanted, int *declined_status)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0, ds;
	char idb[MSGID_STRLEN];

	if (!declined_status)
		declined_status = &ds;
	*declined_status = INT_MIN;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, i);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	bind_id(s, id);
	if (nargs >= 4)
		db_bind_int64(s, 4, a4);
	if (nargs >= 5 && a5_is_text)
		db_bind_text(s, 5, a5_text);
	else if (nargs >= 5)
		db_bind_int64(s, 5, a5);
	rc = db_step(s);
	q_put(st, i, s);
	s = NULL;
	if (rc < 0) {
		r = dberr(st, msgid_str(id, idb, sizeof idb));
		goto out;
	}
	if (db_changes(st->db) == 0) {
		r = out_declined(st, id, what, wanted, declined_status);
		goto out;
	}
	r = SEMQ_OK;
out:
	return tx_close(st, own, r);
}

int store_mark_sent(struct store *st, const struct msgid *id, int64_t now,
		    int64_t query_at)
{
	return out_transition(st, Q_OUT_MARK_SENT, id, 5, now, query_at, NULL,
			      0, "mark sent", "0", NULL);
}

int store_mark_relay_acked(struct store *st, const struct msgid *id,
			   int64_t now, int64_t query_at)
{
	return out_transition(st, Q_OUT_MARK_RELAY, id, 4, query_at, 0, NULL, 0,
			      "mark relay-acked", "4", NULL);
}

int store_mark_unsent(struct store *st, const struct msgid *id,
		      int64_t retry_at, const char *error)
{
	return out_transition(st, Q_OUT_MARK_UNSENT, id, 5, retry_at, 0, error,
			      1, "mark unsent", "4 or 6", NULL);
}

int store_mark_confirmed(struct store *st, const struct msgid *id, int result,
			 int64_t now)
{
	if (!st)
		return SEMQ_ERR_INVALID;
	if (result < RES_PROCESSED || result > RES_CANCELLED)
		return seterr(st, SEMQ_ERR_INVALID,
			      "mark confirmed: result %d is not 0..4", result);
	return out_transition(st, Q_OUT_MARK_CONFIRMED, id, 5, result, now,
			      NULL, 0, "mark confirmed", "0, 4, 6 or -2", NULL);
}

int store_cancel(struct store *st, const struct msgid *id, int64_t now)
{
	int r, status;

	r = out_transition(st, Q_OUT_CANCEL, id, 4, now, 0, NULL, 0, "cancel",
			   "0, 4 or 6", &status);
	if (r != SEMQ_DECLINED)
		return r;
	if (status == INT_MIN) /* errmsg: no such message */
		return SEMQ_ERR_NOT_FOUND;
	if (status == SS_CANCELLED) /* already cancelled: nothing to do */
		return SEMQ_OK;
	return SEMQ_DECLINED;
}

/* Rows of query i due at `now` (bound as ?1), at most `limit` (?2). */
static int fetch_due(struct store *st, enum q i, const char *what, int64_t now,
		     unsigned limit, store_out_cb cb, void *ctx)
{
	struct db_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s: callback is missing",
			      what);
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, now);
	db_bind_int64(s, 2, limit);
	r = each_out(st, s, cb, ctx, NULL, NULL);
	q_put(st, i, s);
	return r;
}

int store_fetch_in_doubt(struct store *st, int64_t now, unsigned limit,
			 store_out_cb cb, void *ctx)
{
	return fetch_due(st, Q_OUT_IN_DOUBT, "fetch_in_doubt", now, limit, cb,
			 ctx);
}

int store_defer(struct store *st, const struct msgid *id, int64_t next_at)
{
	return out_transition(st, Q_OUT_DEFER, id, 4, next_at, 0, NULL, 0,
			      "defer", "4, 6 or unanswered -2", NULL);
}

int store_drop_copy(struct store *st, const struct msgid *id)
{
	return out_transition(st, Q_OUT_DROP_COPY, id, 3, 0, 0, NULL, 0,
			      "drop copy", "a relay copy", NULL);
}

int store_fetch_tombstones(struct store *st, int64_t now, unsigned limit,
			   store_out_cb cb, void *ctx)
{
	return fetch_due(st, Q_OUT_TOMBSTONES, "fetch_tombstones", now, limit,
			 cb, ctx);
}

int store_purge(struct store *st, int64_t now, int64_t retention_ms,
		unsigned limit, unsigned *n_out)
{
	return purge_before(st, Q_OUT_PURGE, "purge", now, retention_ms, limit,
			    n_out);
}

int store_outbound_get(struct store *st, const struct msgid *id, struct msg *m,
		       struct out_row *row)
{
	struct db_stmt *s = NULL;
	char idb[MSGID_STRLEN];
	char *le = NULL;
	int r = SEMQ_ERR_INTERNAL, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!m || !row)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "outbound_get: m and row are required");
	memset(m, 0, sizeof *m);
	r = check_msgid(st, id);
	if (r)
		return r;
	msgid_str(id, idb, sizeof idb);
	s = q_get(st, Q_OUT_GET);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_DONE) {
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "%s: no such outbound message", idb);
		goto out;
	}
	if (rc != DB_ROW) {
		r = dberr(st, idb);
		goto out;
	}
	r = col_out(st, s, m, row, &le);
	if (r) {
		msg_clear(m);
		free(le);
		goto out;
	}
	keep_row_strs(st, le, NULL);
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_GET, s);
	return r;
}

static int check_out_status(struct store *st, int status)
{
	if (status < -99 || status == SS_UNSEND || status == SS_SEND ||
	    status == SS_ACK || status == SS_ACK2 || status == SS_CANCELLED)
		return SEMQ_OK;
	return seterr(st, SEMQ_ERR_INVALID,
		      "tb_0031: status %d is not 0, 4, 6, 100 or -2", status);
}

int store_outbound_list(struct store *st, int status, unsigned limit,
			store_out_cb cb, void *ctx)
{
	enum q i = status < -99 ? Q_OUT_LIST_ALL : Q_OUT_LIST;
	struct db_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "outbound_list: callback is missing");
	r = check_out_status(st, status);
	if (r)
		return r;
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	if (i == Q_OUT_LIST_ALL) {
		db_bind_int64(s, 1, limit);
	} else {
		db_bind_int64(s, 1, status);
		db_bind_int64(s, 2, limit);
	}
	r = each_out(st, s, cb, ctx, NULL, NULL);
	q_put(st, i, s);
	return r;
}
