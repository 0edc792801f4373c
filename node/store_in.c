/* SPDX-License-Identifier: MIT */
/*
 * The receiver's record: tb_0030 rows, their 810-Responses, the per-stream
 * watermarks in semq_stream_in, what a second copy of a seq is (the same
 * message, another one, or no longer known), the purge of old rows, the
 * lives of the origins this node hears from, and a relay's record of the
 * streams it relayed. The receipt itself (the exactly-once step) is
 * store_apply.c.
 */
#include "store_int.h"

/* ---- streams and their watermarks ----------------------------------------- */

/* The stream's watermark; *known = 0 when it has no semq_stream_in row. */
static int stream_w(struct store *st, const char *origin, const char *dest,
		    uint64_t life, uint64_t *w, int *known)
{
	struct db_stmt *s = q_get(st, Q_W_GET);
	int rc, r = SEMQ_OK;

	*w = 0;
	if (known)
		*known = 0;
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, origin, dest, life);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*w = (uint64_t)db_col_int64(s, 0);
		if (known)
			*known = 1;
	} else if (rc < 0) {
		r = dberr(st, "reading a watermark");
	}
	q_put(st, Q_W_GET, s);
	return r;
}

/* Does this transaction hold the stream's lock already? */
int store__stream_held(const struct store *st, const char *origin,
		       const char *dest, uint64_t life)
{
	unsigned i;

	for (i = 0; i < st->n_locked; i++)
		if (st->locked[i].life == life &&
		    !strcmp(st->locked[i].origin, origin) &&
		    !strcmp(st->locked[i].dest, dest))
			return 1;
	return 0;
}

static void stream_remember(struct store *st, const char *origin,
			    const char *dest, uint64_t life)
{
	struct stream_id *l;

	if (st->n_locked >= LOCKS_MAX)
		return; /* locking it again later is cheap and harmless */
	l = &st->locked[st->n_locked++];
	snprintf(l->origin, sizeof l->origin, "%s", origin);
	snprintf(l->dest, sizeof l->dest, "%s", dest);
	l->life = life;
}

/* Creates the stream's row (watermark 0, started now) unless it exists. */
int store__stream_create(struct store *st, const char *origin, const char *dest,
			 uint64_t life, int64_t now)
{
	struct db_stmt *s = q_get(st, Q_W_CREATE);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, origin, dest, life);
	db_bind_int64(s, 4, now);
	rc = db_step(s);
	q_put(st, Q_W_CREATE, s);
	return rc < 0 ? dberr(st, "creating a stream's row") : SEMQ_OK;
}

/*
 * PostgreSQL: locks the stream's row in semq_stream_in (creating it first,
 * started at `now`) until the end of the transaction, waiting for an
 * instance that holds it; *w gets the watermark as that instance left it.
 * SQLite (one writer at a time already): only reads the watermark. *known =
 * 0 when the stream has no row (SQLite only: on PostgreSQL the lock made
 * one).
 */
int store__stream_lock(struct store *st, const char *origin, const char *dest,
		       uint64_t life, int64_t now, uint64_t *w, int *known)
{
	struct db_stmt *s;
	int rc, r;

	if (!st->pg || stream_held(st, origin, dest, life))
		return stream_w(st, origin, dest, life, w, known);
	*w = 0;
	*known = 1;
	r = store__stream_create(st, origin, dest, life, now);
	if (r)
		return r;
	s = q_get(st, Q_W_LOCK);
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, origin, dest, life);
	rc = db_step(s);
	if (rc == DB_ROW)
		*w = (uint64_t)db_col_int64(s, 0);
	else if (rc == DB_DONE)
		r = seterr(st, SEMQ_ERR_INTERNAL,
			   "%s: stream %s/%s: its row vanished while locking",
			   st->name, origin, dest);
	else
		r = dberr(st, "locking a stream");
	q_put(st, Q_W_LOCK, s);
	if (!r)
		stream_remember(st, origin, dest, life);
	return r;
}

/* ---- tb_0030 rows --------------------------------------------------------- */

/* Is `id` in tb_0030? *result gets its result, *digest its digest (0 =
 * unknown). */
int store__in_get(struct store *st, const struct msgid *id, int *found,
		  int *result, uint64_t *digest)
{
	struct db_stmt *s = q_get(st, Q_IN_GET);
	int rc, r = SEMQ_OK;

	*found = 0;
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*found = 1;
		if (result)
			*result = col_int(s, 0);
		if (digest)
			*digest = db_col_null(s, 1)
					  ? 0
					  : (uint64_t)db_col_int64(s, 1);
	} else if (rc < 0) {
		r = dberr(st, "reading tb_0030");
	}
	q_put(st, Q_IN_GET, s);
	return r;
}

/* Inserts the tb_0030 row; SEMQ_DUPLICATE when the unique index has it
 * (recorded by another connection after our check). */
int store__in_insert(struct store *st, const struct msg *m, const char *via,
		     unsigned need, int64_t now, int result, const char *idb)
{
	struct db_stmt *s = q_get(st, Q_IN_INSERT);
	int rc, r = SEMQ_OK;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, &m->id);
	db_bind_int64(s, 5, m->type);
	bind_key(s, 6, m);
	db_bind_int64(s, 7, (int64_t)m->prev_seq);
	db_bind_int64(s, 8, now);
	db_bind_text(s, 9, via);
	db_bind_int64(s, 10, result);
	db_bind_int64(s, 11, need);
	bind_digest(s, 12, m->id.digest);
	rc = db_step(s);
	if (rc < 0)
		r = dberr(st, idb);
	else if (db_changes(st->db) == 0)
		r = seterr(st, SEMQ_DUPLICATE, "%s: already received", idb);
	q_put(st, Q_IN_INSERT, s);
	return r;
}

int store__in_set_result(struct store *st, const struct msgid *id, int result,
			 const char *idb)
{
	struct db_stmt *s = q_get(st, Q_IN_SET_RESULT);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	db_bind_int64(s, 5, result);
	rc = db_step(s);
	q_put(st, Q_IN_SET_RESULT, s);
	return rc < 0 ? dberr(st, idb) : SEMQ_OK;
}

/* A recorded RES_REDO or RES_SCHEDULED as its tb_0033 entry stands now:
 * dead reads RES_DEAD (done and discarded were written back to tb_0030
 * when they happened). */
static int redo_verdict(struct store *st, const struct msgid *id, int *res)
{
	struct db_stmt *s;
	int rc;

	if (*res != RES_REDO && *res != RES_SCHEDULED)
		return SEMQ_OK;
	s = q_get(st, Q_REDO_STATUS_OF);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW && col_int(s, 0) == RS_DEAD)
		*res = RES_DEAD;
	q_put(st, Q_REDO_STATUS_OF, s);
	return rc < 0 ? dberr(st, "reading tb_0033") : SEMQ_OK;
}

/*
 * What this node has under id->seq of its stream, whose watermark is w
 * (docs/PROTOCOL.md, "The digest"): *seen = 0 when nothing; else *result
 * is the recorded verdict of the same message (RES_DEAD for a dead redo
 * entry), RES_CONFLICT when the row holds another digest than id->digest,
 * RES_DUPLICATE when the seq is at or below w with the row gone and
 * id->digest unknown, RES_UNDECIDED when it is given.
 */
int store__in_seen(struct store *st, const struct msgid *id, uint64_t w,
		   int *seen, int *result)
{
	uint64_t have = 0;
	int r, found = 0, res = -1;

	*seen = 0;
	r = in_get(st, id, &found, &res, &have);
	if (r)
		return r;
	if (found) {
		*seen = 1;
		if (have && id->digest && have != id->digest) {
			*result = RES_CONFLICT;
			return SEMQ_OK;
		}
		r = redo_verdict(st, id, &res);
		*result = res;
		return r;
	}
	if (id->seq <= w) {
		*seen = 1;
		*result = id->digest ? RES_UNDECIDED : RES_DUPLICATE;
	}
	return SEMQ_OK;
}

int store_lookup_received(struct store *st, const struct msgid *id,
			  int *received, int *result)
{
	uint64_t w;
	int r, seen = 0, res = -1;

	if (received)
		*received = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	r = stream_w(st, id->origin, id->dest, id->life, &w, NULL);
	if (!r)
		r = store__in_seen(st, id, w, &seen, &res);
	if (r)
		return r;
	if (received)
		*received = seen;
	if (seen && result)
		*result = res;
	return SEMQ_OK;
}

/* SQLite, after Q_IN_ACK changed the row: its ack_status into *ok. */
static int ack_status_of(struct store *st, const struct msgid *id, int *ok)
{
	struct db_stmt *s = q_get(st, Q_IN_ACK_STATUS);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW)
		*ok = col_int(s, 0);
	q_put(st, Q_IN_ACK_STATUS, s);
	return rc < 0 ? dberr(st, "reading tb_0030") : SEMQ_OK;
}

int store_ack_response(struct store *st, const struct msgid *id, unsigned bit,
		       int *now_ok)
{
	struct db_stmt *s = NULL;
	char idb[MSGID_STRLEN];
	int r = SEMQ_ERR_INTERNAL, rc, own = 0, ok = -1;

	if (now_ok)
		*now_ok = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	msgid_str(id, idb, sizeof idb);
	if (bit != CONFIRM_ORIGIN && bit != CONFIRM_RELAY)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: confirm bit %u is not 1 or 2", idb, bit);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_IN_ACK);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	bind_id(s, id);
	db_bind_int64(s, 5, bit);
	while ((rc = db_step(s)) == DB_ROW)
		ok = col_int(s, 0);
	if (rc < 0) {
		r = dberr(st, idb);
		goto out;
	}
	if (!st->pg && db_changes(st->db) > 0) {
		r = ack_status_of(st, id, &ok);
		if (r)
			goto out;
	}
	if (ok < 0) {
		r = seterr(st, SEMQ_DECLINED,
			   "%s: no received row (compacted or never received)",
			   idb);
		goto out;
	}
	if (now_ok)
		*now_ok = ok == AS_OK;
	r = SEMQ_OK;
out:
	q_put(st, Q_IN_ACK, s);
	return tx_close(st, own, r);
}

int store_fetch_unacked(struct store *st, int64_t before, unsigned limit,
			store_unacked_cb cb, void *ctx)
{
	struct db_stmt *s;
	int r = SEMQ_OK, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "fetch_unacked: callback is missing");
	s = q_get(st, Q_IN_UNACKED);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, before);
	db_bind_int64(s, 2, limit);
	while ((rc = db_step(s)) == DB_ROW) {
		struct msgid id;
		char via[SEMQ_ID_MAX + 1];
		int has_via = !db_col_null(s, 6), res = col_int(s, 3);

		memset(&id, 0, sizeof id);
		col_text(id.origin, sizeof id.origin, s, 0);
		col_text(id.dest, sizeof id.dest, s, 1);
		id.seq = (uint64_t)db_col_int64(s, 2);
		id.life = (uint64_t)db_col_int64(s, 7);
		id.digest =
			db_col_null(s, 8) ? 0 : (uint64_t)db_col_int64(s, 8);
		col_text(via, sizeof via, s, 6);
		/* Copied out: the callback may use the store. */
		if (cb(ctx, &id, res, (unsigned)col_int(s, 4),
		       (unsigned)col_int(s, 5), has_via ? via : NULL))
			break;
	}
	if (rc < 0)
		r = dberr(st, "fetch_unacked");
	q_put(st, Q_IN_UNACKED, s);
	return r;
}

/* Steps s (IN_COLS) into cb until it says stop. */
static int each_recv(struct store *st, struct db_stmt *s, store_recv_cb cb,
		     void *ctx)
{
	int r = SEMQ_OK, rc;

	while ((rc = db_step(s)) == DB_ROW) {
		/* Copied out first: the callback may use the store. */
		char key[SEMQ_KEY_MAX + 1], via[SEMQ_ID_MAX + 1];
		struct recv_row row;

		memset(&row, 0, sizeof row);
		col_text(row.id.origin, sizeof row.id.origin, s, 0);
		col_text(row.id.dest, sizeof row.id.dest, s, 1);
		row.id.seq = (uint64_t)db_col_int64(s, 2);
		row.type = (uint32_t)db_col_int64(s, 3);
		col_text(key, sizeof key, s, 4);
		row.key = db_col_null(s, 4) ? NULL : key;
		row.prev_seq = (uint64_t)db_col_int64(s, 5);
		row.received_at = db_col_int64(s, 6);
		col_text(via, sizeof via, s, 7);
		row.via = db_col_null(s, 7) ? NULL : via;
		row.result = col_int(s, 8);
		row.ack_status = col_int(s, 9);
		row.confirm_need = (unsigned)col_int(s, 10);
		row.confirm_got = (unsigned)col_int(s, 11);
		row.rowid = db_col_int64(s, 12);
		row.id.life = (uint64_t)db_col_int64(s, 13);
		row.id.digest =
			db_col_null(s, 14) ? 0 : (uint64_t)db_col_int64(s, 14);
		if (cb(ctx, &row))
			break;
	}
	if (rc < 0)
		r = dberr(st, "reading tb_0030");
	return r;
}

int store_received_list(struct store *st, const char *origin, unsigned limit,
			store_recv_cb cb, void *ctx)
{
	enum q i = origin ? Q_IN_LIST : Q_IN_LIST_ALL;
	struct db_stmt *s;
	int r = SEMQ_OK;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "received_list: callback is missing");
	if (origin) {
		r = check_node(st, "origin", origin, SEMQ_ID_MAX + 1);
		if (r)
			return r;
	}
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	if (origin) {
		db_bind_text(s, 1, origin);
		db_bind_int64(s, 2, limit);
	} else {
		db_bind_int64(s, 1, limit);
	}
	r = each_recv(st, s, cb, ctx);
	q_put(st, i, s);
	return r;
}

int store_received_select(struct store *st, const char *origin,
			  const struct store_filter *f, store_recv_cb cb,
			  void *ctx)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_OK;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb || !f)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "received_select: callback or filter missing");
	if (f->where)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "tb_0030 has no last_error filter");
	if (origin)
		r = check_node(st, "origin", origin, SEMQ_ID_MAX + 1);
	if (!r)
		r = store__filter_stmt(st, FT_IN, f, origin,
				       "SELECT " IN_COLS " FROM tb_0030",
				       " ORDER BY id DESC", 1, &s);
	if (!r)
		r = each_recv(st, s, cb, ctx);
	db_finalize(s);
	return r;
}

/* ---- watermarks ----------------------------------------------------------- */

struct stream_w {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
	uint64_t life;
	uint64_t w;
};

/* Every inbound stream and its watermark: *out (caller frees), *n. */
static int streams_load(struct store *st, struct stream_w **out, size_t *n)
{
	struct stream_w *v = NULL, *nv;
	size_t cap = 0, len = 0;
	struct db_stmt *s = q_get(st, Q_W_LIST);
	int rc, r = SEMQ_OK;

	*out = NULL;
	*n = 0;
	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = db_step(s)) == DB_ROW) {
		if (len == cap) {
			cap = cap ? 2 * cap : 16;
			nv = realloc(v, cap * sizeof *v);
			if (!nv) {
				r = seterr(st, SEMQ_ERR_NOMEM, "%s",
					   "listing streams: out of memory");
				goto out;
			}
			v = nv;
		}
		col_text(v[len].origin, sizeof v[len].origin, s, 0);
		col_text(v[len].dest, sizeof v[len].dest, s, 1);
		v[len].life = (uint64_t)db_col_int64(s, 2);
		v[len].w = (uint64_t)db_col_int64(s, 3);
		len++;
	}
	if (rc < 0)
		r = dberr(st, "listing streams");
out:
	q_put(st, Q_W_LIST, s);
	if (r) {
		free(v);
		return r;
	}
	*out = v;
	*n = len;
	return SEMQ_OK;
}

/* The end of the run of AS_OK rows right above w: *nw (w when none). */
static int run_end(struct store *st, const struct stream_w *sw, uint64_t w,
		   uint64_t *nw)
{
	struct db_stmt *s = q_get(st, Q_IN_RUN);
	int rc, r = SEMQ_OK;

	*nw = w;
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, sw->origin, sw->dest, sw->life);
	db_bind_int64(s, 4, (int64_t)w);
	while ((rc = db_step(s)) == DB_ROW) {
		if ((uint64_t)db_col_int64(s, 0) != *nw + 1 ||
		    col_int(s, 1) != AS_OK)
			break;
		(*nw)++;
	}
	if (rc < 0)
		r = dberr(st, "advancing a watermark");
	q_put(st, Q_IN_RUN, s);
	return r;
}

/* PostgreSQL: takes the stream's row unless another instance holds it
 * (*got = 0 then: leave it to the next pass); *w gets its watermark. */
static int stream_try_lock(struct store *st, const struct stream_w *sw,
			   uint64_t *w, int *got)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	*got = 0;
	if (stream_held(st, sw->origin, sw->dest, sw->life)) {
		*got = 1;
		return stream_w(st, sw->origin, sw->dest, sw->life, w, NULL);
	}
	s = q_get(st, Q_W_LOCK_SKIP);
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, sw->origin, sw->dest, sw->life);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*got = 1;
		*w = (uint64_t)db_col_int64(s, 0);
	} else if (rc < 0) {
		r = dberr(st, "locking a stream");
	}
	q_put(st, Q_W_LOCK_SKIP, s);
	if (!r && *got)
		stream_remember(st, sw->origin, sw->dest, sw->life);
	return r;
}

/* Moves one stream's watermark over its run of AS_OK rows. On PostgreSQL
 * only a stream with something to do is locked, and one that another
 * instance holds is skipped. */
static int advance_one(struct store *st, const struct stream_w *sw,
		       unsigned *advanced)
{
	struct db_stmt *s;
	uint64_t w = sw->w, nw;
	int rc, r, got;

	r = run_end(st, sw, w, &nw);
	if (r || nw == w)
		return r;
	if (st->pg) {
		r = stream_try_lock(st, sw, &w, &got);
		if (r || !got)
			return r;
		r = run_end(st, sw, w, &nw); /* as of the lock */
		if (r || nw == w)
			return r;
	}
	s = q_get(st, Q_W_SET);
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, sw->origin, sw->dest, sw->life);
	db_bind_int64(s, 4, (int64_t)nw);
	rc = db_step(s);
	q_put(st, Q_W_SET, s);
	if (rc < 0)
		return dberr(st, "advancing a watermark");
	(*advanced)++;
	return SEMQ_OK;
}

int store_advance_watermarks(struct store *st, unsigned *advanced)
{
	struct stream_w *v = NULL;
	unsigned n = 0;
	size_t len = 0, i;
	int r = SEMQ_ERR_INTERNAL, own = 0;

	if (advanced)
		*advanced = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		goto out;
	r = streams_load(st, &v, &len);
	for (i = 0; !r && i < len; i++)
		r = advance_one(st, &v[i], &n);
	if (!r && advanced)
		*advanced = n;
out:
	free(v);
	return tx_close(st, own, r);
}

int store_receipt_purge(struct store *st, int64_t now, int64_t retention_ms,
			unsigned limit, unsigned *n_out)
{
	return purge_before(st, Q_IN_PURGE, "receipt purge", now, retention_ms,
			    limit, n_out);
}

int store_watermark(struct store *st, const char *origin, const char *dest,
		    uint64_t life, uint64_t *w)
{
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!w)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "watermark: w is NULL");
	*w = 0;
	r = check_node(st, "origin", origin, SEMQ_ID_MAX + 1);
	if (!r)
		r = check_node(st, "dest", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	return stream_w(st, origin, dest, life, w, NULL);
}

int store_stream_high(struct store *st, const char *origin, const char *dest,
		      uint64_t life, uint64_t *high)
{
	struct db_stmt *s;
	uint64_t w = 0;
	int r, rc;

	*high = 0;
	r = store_watermark(st, origin, dest, life, &w);
	if (r)
		return r;
	s = q_get(st, Q_W_HIGH);
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, origin, dest, life);
	rc = db_step(s);
	if (rc == DB_ROW && !db_col_null(s, 0))
		*high = (uint64_t)db_col_int64(s, 0);
	q_put(st, Q_W_HIGH, s);
	if (rc < 0)
		return dberr(st, "reading tb_0030");
	if (w > *high)
		*high = w;
	return SEMQ_OK;
}

int store_streams_in(struct store *st, store_stream_cb cb, void *ctx)
{
	struct stream_w *v = NULL;
	size_t len = 0, i;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "streams_in: callback is missing");
	r = streams_load(st, &v, &len);
	for (i = 0; !r && i < len; i++)
		if (cb(ctx, v[i].origin, v[i].dest, v[i].life, v[i].w))
			break;
	free(v);
	return r;
}

/* One life of a statement's first column for (origin, dest): *found. */
static int life_of(struct store *st, enum q i, const char *origin,
		   const char *dest, uint64_t *life, int *found)
{
	struct db_stmt *s = q_get(st, i);
	int rc;

	*found = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*life = (uint64_t)db_col_int64(s, 0);
		*found = 1;
	}
	q_put(st, i, s);
	return rc < 0 ? dberr(st, "reading a stream's life") : SEMQ_OK;
}

int store_current_life(struct store *st, const char *origin, const char *dest,
		       uint64_t *life)
{
	int r, found = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	*life = SEMQ_LIFE_LEGACY;
	r = check_node(st, "origin", origin, SEMQ_ID_MAX + 1);
	if (!r)
		r = check_node(st, "dest", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	if (strcmp(origin, st->node_id) == 0) {
		*life = st->life;
		return SEMQ_OK;
	}
	r = life_of(st,
		    strcmp(dest, st->node_id) == 0 ? Q_W_CURRENT
						   : Q_RELAY_CURRENT,
		    origin, dest, life, &found);
	if (!r && !found)
		*life = SEMQ_LIFE_LEGACY;
	return r;
}

int store_origin_life(struct store *st, const char *origin, uint64_t *life,
		      int *known)
{
	struct db_stmt *s;
	int rc;

	*known = 0;
	*life = SEMQ_LIFE_NONE;
	if (!st)
		return SEMQ_ERR_INVALID;
	s = q_get(st, Q_ORIGIN_LIFE);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*known = 1;
		*life = (uint64_t)db_col_int64(s, 0);
	}
	q_put(st, Q_ORIGIN_LIFE, s);
	return rc < 0 ? dberr(st, "reading a stream's life") : SEMQ_OK;
}

/* ---- a relay's record of the streams it relayed --------------------------- */

int store_relay_note(struct store *st, const char *origin, const char *dest,
		     uint64_t life, uint64_t seq, int64_t now)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, own = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (seq == 0 || seq > (uint64_t)INT64_MAX || life == SEMQ_LIFE_NONE)
		return seterr(st, SEMQ_ERR_INVALID,
			      "relay note: seq %" PRIu64 " or life 0", seq);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_RELAY_NOTE);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	bind_stream(s, origin, dest, life);
	db_bind_int64(s, 4, (int64_t)seq);
	db_bind_int64(s, 5, now);
	r = db_step(s) < 0 ? dberr(st, "writing semq_stream_relay") : SEMQ_OK;
out:
	q_put(st, Q_RELAY_NOTE, s);
	return tx_close(st, own, r);
}

int store_relay_high(struct store *st, const char *origin, const char *dest,
		     uint64_t life, uint64_t *high)
{
	struct db_stmt *s;
	int rc;

	*high = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	s = q_get(st, Q_RELAY_HIGH);
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, origin, dest, life);
	rc = db_step(s);
	if (rc == DB_ROW)
		*high = (uint64_t)db_col_int64(s, 0);
	q_put(st, Q_RELAY_HIGH, s);
	return rc < 0 ? dberr(st, "reading semq_stream_relay") : SEMQ_OK;
}

int store_relay_streams(struct store *st, const char *origin, uint64_t life,
			store_high_cb cb, void *ctx)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "relay_streams: callback is missing");
	s = q_get(st, Q_RELAY_LIST);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_int64(s, 2, (int64_t)life);
	while ((rc = db_step(s)) == DB_ROW) {
		char dest[SEMQ_ID_MAX + 1];

		col_text(dest, sizeof dest, s, 0);
		if (cb(ctx, dest, (uint64_t)db_col_int64(s, 1)))
			break;
	}
	if (rc < 0)
		r = dberr(st, "reading semq_stream_relay");
	q_put(st, Q_RELAY_LIST, s);
	return r;
}

/* ---- lives ---------------------------------------------------------------- */

int store_lives(struct store *st, store_life_cb cb, void *ctx)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "lives: callback is missing");
	s = q_get(st, Q_LIVES);
	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = db_step(s)) == DB_ROW) {
		char origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];
		const char *kind = db_col_text(s, 2);
		struct life_row lr;

		col_text(origin, sizeof origin, s, 0);
		col_text(dest, sizeof dest, s, 3);
		lr.origin = origin;
		lr.dest = dest;
		lr.life = (uint64_t)db_col_int64(s, 1);
		lr.relay = kind && strcmp(kind, "relay") == 0;
		lr.mark = (uint64_t)db_col_int64(s, 4);
		lr.started_at = db_col_int64(s, 5);
		lr.rows = db_col_int64(s, 6);
		if (cb(ctx, &lr))
			break;
	}
	if (rc < 0)
		r = dberr(st, "listing lives");
	q_put(st, Q_LIVES, s);
	return r;
}

/* Runs a statement of (?1 origin, ?2 life) and ignores its rows. */
static int life_exec(struct store *st, enum q i, const char *origin,
		     uint64_t life, int64_t *changed)
{
	struct db_stmt *s = q_get(st, i);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_int64(s, 2, (int64_t)life);
	rc = db_step(s);
	q_put(st, i, s);
	if (rc < 0)
		return dberr(st, "dropping a life");
	if (changed)
		*changed += db_changes(st->db);
	return SEMQ_OK;
}

/* Is `life` the current life of one of origin's streams here? */
struct current_ctx {
	struct store *st;
	const char *origin;
	uint64_t life;
	int current;
	int r;
};

static int current_cb(void *ctx, const struct life_row *lr)
{
	struct current_ctx *x = ctx;
	uint64_t cur = 0;

	if (strcmp(lr->origin, x->origin) != 0 || lr->life != x->life)
		return 0;
	x->r = store_current_life(x->st, lr->origin, lr->dest, &cur);
	if (x->r == SEMQ_OK && cur == x->life)
		x->current = 1;
	return x->r != SEMQ_OK || x->current;
}

int store_life_drop(struct store *st, const char *origin, uint64_t life,
		    int force)
{
	struct db_stmt *s = NULL;
	struct current_ctx cx = {st, origin, life, 0, SEMQ_OK};
	int64_t redo = 0, copies = 0, gone = 0;
	char lb[SEMQ_LIFE_STRLEN];
	int r = SEMQ_ERR_INTERNAL, own = 0, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "origin", origin, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	semq_life_str(life, lb, sizeof lb);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_LIFE_BUSY);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_text(s, 1, origin);
	db_bind_int64(s, 2, (int64_t)life);
	rc = db_step(s);
	if (rc == DB_ROW) {
		redo = db_col_int64(s, 0);
		copies = db_col_int64(s, 1);
	}
	q_put(st, Q_LIFE_BUSY, s);
	if (rc < 0) {
		r = dberr(st, "reading a life");
		goto out;
	}
	if (redo || copies) {
		r = seterr(st, SEMQ_DECLINED,
			   "%s life %s: %" PRId64 " redo entries not finished "
			   "and %" PRId64 " relay copies not delivered; "
			   "finish or discard them first",
			   origin, lb, redo, copies);
		goto out;
	}
	r = store_lives(st, current_cb, &cx);
	if (!r)
		r = cx.r;
	if (r)
		goto out;
	if (cx.current && !force) {
		r = seterr(st, SEMQ_DECLINED,
			   "%s life %s is the current life of its streams "
			   "here: its next message would be taken for a new "
			   "stream's; add --force if %s's database is gone",
			   origin, lb, origin);
		goto out;
	}
	r = life_exec(st, Q_LIFE_DROP_IN, origin, life, &gone);
	if (!r)
		r = life_exec(st, Q_LIFE_DROP_RELAY, origin, life, &gone);
	if (!r && !gone)
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "%s life %s: this node knows no such life", origin,
			   lb);
	if (!r)
		r = life_exec(st, Q_LIFE_DROP_RECV, origin, life, NULL);
out:
	return tx_close(st, own, r);
}
