/* SPDX-License-Identifier: MIT */
/*
 * The receiver's record: tb_0030 rows, their 810-Responses, the per-stream
 * watermarks in semq_stream_in and the compaction they allow, lookups and
 * listings. The receipt itself (the exactly-once step) is store_apply.c.
 */
#include "store_int.h"

/* ---- receiver side: tb_0030, watermarks ----------------------------------- */

/* The stream's watermark; *known = 0 when it has no semq_stream_in row. */
static int stream_w(struct store *st, const char *origin, const char *dest,
		    uint64_t *w, int *known)
{
	struct db_stmt *s = q_get(st, Q_W_GET);
	int rc, r = SEMQ_OK;

	*w = 0;
	if (known)
		*known = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
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
		       const char *dest)
{
	unsigned i;

	for (i = 0; i < st->n_locked; i++)
		if (!strcmp(st->locked[i].origin, origin) &&
		    !strcmp(st->locked[i].dest, dest))
			return 1;
	return 0;
}

static void stream_remember(struct store *st, const char *origin,
			    const char *dest)
{
	if (st->n_locked >= LOCKS_MAX)
		return; /* locking it again later is cheap and harmless */
	snprintf(st->locked[st->n_locked].origin,
		 sizeof st->locked[st->n_locked].origin, "%s", origin);
	snprintf(st->locked[st->n_locked].dest,
		 sizeof st->locked[st->n_locked].dest, "%s", dest);
	st->n_locked++;
}

/*
 * PostgreSQL: locks the stream's row in semq_stream_in (creating it first)
 * until the end of the transaction, waiting for an instance that holds it;
 * *w gets the watermark as that instance left it. SQLite (one writer at a
 * time already): only reads the watermark. *known = 0 when the stream has no
 * row (SQLite only: on PostgreSQL the lock made one).
 */
int store__stream_lock(struct store *st, const char *origin, const char *dest,
		       uint64_t *w, int *known)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st->pg || stream_held(st, origin, dest))
		return stream_w(st, origin, dest, w, known);
	*w = 0;
	*known = 1;
	s = q_get(st, Q_W_CREATE);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	q_put(st, Q_W_CREATE, s);
	if (rc < 0)
		return dberr(st, "creating a stream's row");
	s = q_get(st, Q_W_LOCK);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
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
		stream_remember(st, origin, dest);
	return r;
}

/* Is (origin, dest, seq) in tb_0030? *result gets its result. */
int store__in_get(struct store *st, const char *origin, const char *dest,
		  uint64_t seq, int *found, int *result)
{
	struct db_stmt *s = q_get(st, Q_IN_GET);
	int rc, r = SEMQ_OK;

	*found = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	db_bind_int64(s, 3, (int64_t)seq);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*found = 1;
		if (result)
			*result = col_int(s, 0);
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
	db_bind_int64(s, 4, m->type);
	bind_key(s, 5, m);
	db_bind_int64(s, 6, (int64_t)m->prev_seq);
	db_bind_int64(s, 7, now);
	db_bind_text(s, 8, via);
	db_bind_int64(s, 9, result);
	db_bind_int64(s, 10, need);
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
	db_bind_int64(s, 4, result);
	rc = db_step(s);
	q_put(st, Q_IN_SET_RESULT, s);
	return rc < 0 ? dberr(st, idb) : SEMQ_OK;
}

int store_lookup_received(struct store *st, const struct msgid *id,
			  int *received, int *result)
{
	uint64_t w;
	int r, found = 0, res = -1;

	if (received)
		*received = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	r = in_get(st, id->origin, id->dest, id->seq, &found, &res);
	if (r)
		return r;
	if (!found) {
		r = stream_w(st, id->origin, id->dest, &w, NULL);
		if (r)
			return r;
		if (id->seq <= w) {
			found = 1;
			res = RES_DUPLICATE;
		}
	}
	if (received)
		*received = found;
	if (found && result)
		*result = res;
	return SEMQ_OK;
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
	db_bind_int64(s, 4, bit);
	while ((rc = db_step(s)) == DB_ROW)
		ok = col_int(s, 0);
	if (rc < 0) {
		r = dberr(st, idb);
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
		int has_via = !db_col_null(s, 6);

		memset(&id, 0, sizeof id);
		col_text(id.origin, sizeof id.origin, s, 0);
		col_text(id.dest, sizeof id.dest, s, 1);
		id.seq = (uint64_t)db_col_int64(s, 2);
		col_text(via, sizeof via, s, 6);
		if (cb(ctx, &id, col_int(s, 3), (unsigned)col_int(s, 4),
		       (unsigned)col_int(s, 5), has_via ? via : NULL))
			break;
	}
	if (rc < 0)
		r = dberr(st, "fetch_unacked");
	q_put(st, Q_IN_UNACKED, s);
	return r;
}

int store_received_list(struct store *st, const char *origin, unsigned limit,
			store_recv_cb cb, void *ctx)
{
	enum q i = origin ? Q_IN_LIST : Q_IN_LIST_ALL;
	struct db_stmt *s;
	int r = SEMQ_OK, rc;

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
		if (cb(ctx, &row))
			break;
	}
	if (rc < 0)
		r = dberr(st, "reading tb_0030");
	q_put(st, i, s);
	return r;
}

struct stream_w {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
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
		v[len].w = (uint64_t)db_col_int64(s, 2);
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
	db_bind_text(s, 1, sw->origin);
	db_bind_text(s, 2, sw->dest);
	db_bind_int64(s, 3, (int64_t)w);
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
	if (stream_held(st, sw->origin, sw->dest)) {
		*got = 1;
		return stream_w(st, sw->origin, sw->dest, w, NULL);
	}
	s = q_get(st, Q_W_LOCK_SKIP);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, sw->origin);
	db_bind_text(s, 2, sw->dest);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*got = 1;
		*w = (uint64_t)db_col_int64(s, 0);
	} else if (rc < 0) {
		r = dberr(st, "locking a stream");
	}
	q_put(st, Q_W_LOCK_SKIP, s);
	if (!r && *got)
		stream_remember(st, sw->origin, sw->dest);
	return r;
}

/* Moves one stream's watermark over its run of AS_OK rows, compacting. On
 * PostgreSQL only a stream with something to do is locked, and one that
 * another instance holds is skipped. */
static int advance_one(struct store *st, const struct stream_w *sw,
		       unsigned *compacted)
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
	db_bind_text(s, 1, sw->origin);
	db_bind_text(s, 2, sw->dest);
	db_bind_int64(s, 3, (int64_t)nw);
	rc = db_step(s);
	q_put(st, Q_W_SET, s);
	if (rc < 0)
		return dberr(st, "advancing a watermark");

	s = q_get(st, Q_IN_COMPACT);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, sw->origin);
	db_bind_text(s, 2, sw->dest);
	db_bind_int64(s, 3, (int64_t)w);
	db_bind_int64(s, 4, (int64_t)nw);
	rc = db_step(s);
	q_put(st, Q_IN_COMPACT, s);
	if (rc < 0)
		return dberr(st, "compacting tb_0030");
	*compacted += (unsigned)db_changes(st->db);
	return SEMQ_OK;
}

int store_advance_watermarks(struct store *st, unsigned *compacted)
{
	struct stream_w *v = NULL;
	unsigned n = 0;
	size_t len = 0, i;
	int r = SEMQ_ERR_INTERNAL, own = 0;

	if (compacted)
		*compacted = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		goto out;
	r = streams_load(st, &v, &len);
	for (i = 0; !r && i < len; i++)
		r = advance_one(st, &v[i], &n);
	if (!r && compacted)
		*compacted = n;
out:
	free(v);
	return tx_close(st, own, r);
}

int store_watermark(struct store *st, const char *origin, const char *dest,
		    uint64_t *w)
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
	return stream_w(st, origin, dest, w, NULL);
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
		if (cb(ctx, v[i].origin, v[i].dest, v[i].w))
			break;
	free(v);
	return r;
}
