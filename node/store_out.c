/* SPDX-License-Identifier: MIT */
/*
 * The origin side: tb_0031, the outbound queue — enqueueing (the
 * application's contract and a relay's store-and-forward copies), fetching
 * what may be sent, the status transitions of SPEC §4, tombstones, the
 * in-doubt rows, the purge, listings.
 */
#include "store_int.h"

#include <time.h>

/* ---- origin side: tb_0031 ------------------------------------------------- */

#define NUMBER_CHUNK 256 /* rows read before they are numbered */

int store_enqueue(struct store *st, const struct msg *m, uint64_t *seq_out,
		  char *err, size_t errsz)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0, more = 0;
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
	/* Number it now, with every row inserted before it (oldest first). */
	do {
		unsigned n = 0;
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		r = store_number_new(
			st, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
			NUMBER_CHUNK * 16, 1, &n, &more);
	} while (!r && more);
	if (r)
		goto out;
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

/* ---- numbering: the lean outbox (migration 0007) ------------------------- */

#define NUMBER_DESTS 16 /* streams one pass keeps counters of */

struct new_row {
	int64_t id;
	char dest[SEMQ_ID_MAX + 1];
	char key[SEMQ_KEY_MAX + 1];
	int has_key;
	int fix; /* Q_OUT_NUMBER_FIX after the numbering */
};

struct counter {
	char dest[SEMQ_ID_MAX + 1];
	int64_t last;
};

/* The counter of stream (this node, dest) in c[0..*n), read on first use;
 * NULL when the pass already counts NUMBER_DESTS other streams. */
static struct counter *counter_of(struct store *st, struct counter *c,
				  size_t *n, const char *dest, int *r)
{
	struct db_stmt *s;
	size_t i;
	int rc;

	for (i = 0; i < *n; i++)
		if (!strcmp(c[i].dest, dest))
			return &c[i];
	if (*n == NUMBER_DESTS)
		return NULL;
	s = q_get(st, Q_OUT_LAST_SEQ_LOCK);
	if (!s) {
		*r = SEMQ_ERR_DB;
		return NULL;
	}
	db_bind_text(s, 1, st->node_id);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	snprintf(c[*n].dest, sizeof c[*n].dest, "%s", dest);
	c[*n].last = rc == DB_ROW ? db_col_int64(s, 0) : 0;
	q_put(st, Q_OUT_LAST_SEQ_LOCK, s);
	if (rc < 0) {
		*r = dberr(st, "numbering: reading a stream's counter");
		return NULL;
	}
	return &c[(*n)++];
}

/* prev_seq of a new row of key k in stream (this node, dest). */
static int key_last(struct store *st, const char *dest, const char *k,
		    int64_t *prev)
{
	struct db_stmt *s = q_get(st, Q_OUT_KEY_LAST);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, st->node_id);
	db_bind_text(s, 2, dest);
	db_bind_text(s, 3, k);
	rc = db_step(s);
	*prev = rc == DB_ROW && !db_col_null(s, 0) ? db_col_int64(s, 0) : 0;
	q_put(st, Q_OUT_KEY_LAST, s);
	return rc < 0 ? dberr(st, "numbering: reading a key's last seq")
		      : SEMQ_OK;
}

/* Reads up to NUMBER_CHUNK rows to number, oldest first, into v. */
static int read_new(struct store *st, struct new_row *v, size_t want, size_t *n)
{
	struct db_stmt *s = q_get(st, Q_OUT_NEW);
	int rc;

	*n = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, (int64_t)want);
	while ((rc = db_step(s)) == DB_ROW && *n < want) {
		struct new_row *w = &v[(*n)++];

		w->id = db_col_int64(s, 0);
		col_text(w->dest, sizeof w->dest, s, 1);
		w->has_key = !db_col_null(s, 2);
		if (w->has_key)
			col_text(w->key, sizeof w->key, s, 2);
		w->fix = col_int(s, 3) != 0;
	}
	q_put(st, Q_OUT_NEW, s);
	return rc < 0 ? dberr(st, "numbering: reading new rows") : SEMQ_OK;
}

/* Writes the counters a pass moved. */
static int save_counters(struct store *st, const struct counter *c, size_t n)
{
	size_t i;
	int rc;

	for (i = 0; i < n; i++) {
		struct db_stmt *s = q_get(st, Q_OUT_SET_LAST);

		if (!s)
			return SEMQ_ERR_DB;
		db_bind_text(s, 1, st->node_id);
		db_bind_text(s, 2, c[i].dest);
		db_bind_int64(s, 3, c[i].last);
		rc = db_step(s);
		q_put(st, Q_OUT_SET_LAST, s);
		if (rc < 0)
			return dberr(st,
				     "numbering: writing a stream's counter");
	}
	return SEMQ_OK;
}

int store_number_new(struct store *st, int64_t now, unsigned limit, int wait,
		     unsigned *numbered, int *more)
{
	struct new_row *v = NULL;
	struct counter c[NUMBER_DESTS];
	struct db_stmt *s;
	size_t n = 0, nc = 0, i;
	int r, rc, own = 0, locked = 0, stop = 0;

	*numbered = 0;
	*more = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		return r;
	s = q_get(st, wait ? Q_OUT_NUMBER_WAIT : Q_OUT_NUMBER_LOCK);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	rc = db_step(s);
	locked = rc == DB_ROW && db_col_int64(s, 0) == 1;
	q_put(st, wait ? Q_OUT_NUMBER_WAIT : Q_OUT_NUMBER_LOCK, s);
	if (rc < 0) {
		r = dberr(st, "numbering: taking its lock");
		goto out;
	}
	if (!locked) /* another instance numbers */
		goto out;
	v = malloc(NUMBER_CHUNK * sizeof *v);
	if (!v) {
		r = seterr(st, SEMQ_ERR_NOMEM, "%s",
			   "numbering: out of memory");
		goto out;
	}
	while (!stop && *numbered < limit) {
		size_t want = limit - *numbered;

		r = read_new(st, v, want < NUMBER_CHUNK ? want : NUMBER_CHUNK,
			     &n);
		if (r || !n)
			break;
		for (i = 0; i < n && !r; i++) {
			struct counter *k =
				counter_of(st, c, &nc, v[i].dest, &r);
			int64_t prev = 0;

			if (!k) {
				stop = !r; /* too many streams: next pass */
				break;
			}
			if (v[i].has_key)
				r = key_last(st, v[i].dest, v[i].key, &prev);
			if (r)
				break;
			s = q_get(st, Q_OUT_NUMBER);
			if (!s) {
				r = SEMQ_ERR_DB;
				break;
			}
			db_bind_int64(s, 1, v[i].id);
			db_bind_text(s, 2, st->node_id);
			db_bind_int64(s, 3, (int64_t)st->life);
			db_bind_int64(s, 4, k->last + 1);
			db_bind_int64(s, 5, prev);
			rc = db_step(s);
			q_put(st, Q_OUT_NUMBER, s);
			if (rc < 0) {
				r = dberr(st, "numbering a new row");
				break;
			}
			if (db_changes(st->db) != 1)
				continue;
			k->last++;
			(*numbered)++;
			if (!v[i].fix)
				continue;
			s = q_get(st, Q_OUT_NUMBER_FIX);
			if (!s) {
				r = SEMQ_ERR_DB;
				break;
			}
			db_bind_int64(s, 1, v[i].id);
			db_bind_int64(s, 2, now);
			rc = db_step(s);
			q_put(st, Q_OUT_NUMBER_FIX, s);
			if (rc < 0)
				r = dberr(st, "numbering: resetting the node's "
					      "columns of a new row");
		}
		if (n < NUMBER_CHUNK)
			break;
	}
	if (!r)
		r = save_counters(st, c, nc);
	if (!r && (stop || *numbered >= limit))
		*more = 1;
out:
	free(v);
	return tx_close(st, own, r);
}

int store_enqueue_copy(struct store *st, const struct msg *m, int64_t now)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0, status;
	uint64_t have = 0;
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
	db_bind_int64(s, 5, m->type);
	bind_key(s, 6, m);
	db_bind_int64(s, 7, (int64_t)m->prev_seq);
	db_bind_int64(s, 8, m->deliver_at);
	bind_payload(s, 9, m);
	db_bind_int64(s, 10, m->created_at);
	/* A tombstone is kept as what it is: a cancelled row to deliver. */
	db_bind_int64(s, 11, m->tombstone ? SS_CANCELLED : SS_UNSEND);
	db_bind_int64(s, 12, now);
	bind_digest(s, 13, m->id.digest);
	bind_digest(s, 14, m->prev_digest);
	db_bind_int64(s, 15, m->hops);
	rc = db_step(s);
	q_put(st, Q_OUT_COPY, s);
	s = NULL;
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
		/* The same message again, or another one under its id? */
		r = store_outbound_state(st, &m->id, &status, &have);
		if (r)
			goto out;
		if (have && m->id.digest && have != m->id.digest)
			r = seterr(st, SEMQ_DECLINED,
				   "%s: a copy of another message (digest "
				   "%016" PRIx64 ") is held under this id",
				   idb, have);
		else
			r = seterr(st, SEMQ_DUPLICATE, "%s: already stored",
				   idb);
		goto out;
	}
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_COPY, s);
	return tx_close(st, own, r);
}

int store_outbound_state(struct store *st, const struct msgid *id, int *status,
			 uint64_t *digest)
{
	struct db_stmt *s;
	char idb[MSGID_STRLEN];
	int rc, r;

	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	s = q_get(st, Q_OUT_DIGEST);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW) {
		if (digest)
			*digest = db_col_null(s, 0)
					  ? 0
					  : (uint64_t)db_col_int64(s, 0);
		if (status)
			*status = col_int(s, 1);
		r = SEMQ_OK;
	} else if (rc == DB_DONE) {
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "%s: no such outbound message",
			   msgid_str(id, idb, sizeof idb));
	} else {
		r = dberr(st, "reading tb_0031");
	}
	q_put(st, Q_OUT_DIGEST, s);
	return r;
}

int store_outbound_pred(struct store *st, const struct msgid *id,
			struct msgid *pred, int *open)
{
	struct db_stmt *s;
	int rc, r;

	if (!st || !pred || !open)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	s = q_get(st, Q_OUT_PRED);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*pred = *id;
		pred->seq = (uint64_t)db_col_int64(s, 0);
		pred->digest =
			db_col_null(s, 1) ? 0 : (uint64_t)db_col_int64(s, 1);
		*open = col_int(s, 2);
		r = SEMQ_OK;
	} else {
		r = rc == DB_DONE ? SEMQ_ERR_NOT_FOUND
				  : dberr(st, "reading tb_0031");
	}
	q_put(st, Q_OUT_PRED, s);
	return r;
}

int store_outbound_moved(struct store *st, const struct msgid *id,
			 uint64_t *seq)
{
	struct db_stmt *s;
	int rc, r;

	if (!st || !seq)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	if (!id->digest)
		return SEMQ_ERR_NOT_FOUND;
	s = q_get(st, Q_OUT_MOVED);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	db_bind_int64(s, 5, (int64_t)id->digest);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*seq = (uint64_t)db_col_int64(s, 0);
		r = SEMQ_OK;
	} else {
		r = rc == DB_DONE ? SEMQ_ERR_NOT_FOUND
				  : dberr(st, "reading tb_0031");
	}
	q_put(st, Q_OUT_MOVED, s);
	return r;
}

int store_outbound_digest(struct store *st, const struct msgid *id,
			  uint64_t *digest)
{
	struct msg m;
	struct out_row row;
	int r, status;

	*digest = 0;
	r = store_outbound_state(st, id, &status, digest);
	if (r || *digest)
		return r;
	r = store_outbound_get(st, id, &m, &row);
	if (r)
		return r;
	*digest = semq_msg_digest(&m);
	msg_clear(&m);
	return SEMQ_OK;
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

/*
 * Which life of stream (dest, origin) is sent now: this node's own rows
 * have its life; a relay's copies of several lives of one origin (it was
 * re-imaged while copies of its earlier life were held) go oldest life
 * first — the one that began at this relay first — so that a business
 * object's documents reach their destination in the order they were made.
 */
static int sendable_life(struct store *st, const char *dest, const char *origin,
			 uint64_t *life)
{
	struct db_stmt *s;
	uint64_t cand = 0, best = 0;
	int64_t best_at = INT64_MAX;
	int rc, r = SEMQ_OK, k;

	*life = st->life;
	if (strcmp(origin, st->node_id) == 0)
		return SEMQ_OK;
	/* One seek per life with unsent copies (a handful at most). */
	for (k = 0; k < 64; k++) {
		int found = 0;
		int64_t at = 0;

		s = q_get(st, Q_OUT_NEXT_LIFE);
		if (!s)
			return SEMQ_ERR_DB;
		db_bind_text(s, 1, dest);
		db_bind_text(s, 2, origin);
		db_bind_int64(s, 3, (int64_t)cand);
		rc = db_step(s);
		if (rc == DB_ROW) {
			found = 1;
			cand = (uint64_t)db_col_int64(s, 0);
			at = db_col_null(s, 1) ? 0 : db_col_int64(s, 1);
		}
		q_put(st, Q_OUT_NEXT_LIFE, s);
		if (rc < 0)
			return dberr(st, "fetch_sendable: lives of a stream");
		if (!found)
			break;
		if (!best || at < best_at) {
			best = cand;
			best_at = at;
		}
	}
	if (best)
		*life = best;
	return r;
}

int store_fetch_sendable(struct store *st, const char *dest, int64_t now,
			 unsigned window, unsigned limit, store_out_cb cb,
			 void *ctx)
{
	uint64_t life = 0;
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

		r = sendable_life(st, sd, so, &life);
		if (r)
			goto out;
		s = q_get(st, Q_OUT_SENDABLE);
		if (!s) {
			r = SEMQ_ERR_DB;
			goto out;
		}
		db_bind_text(s, 1, sd);
		db_bind_text(s, 2, so);
		db_bind_int64(s, 3, now);
		db_bind_int64(s, 4, room);
		db_bind_int64(s, 5, (int64_t)life);
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
 * Runs one of the outbound transitions: `i` binds the id as ?1..?4 and
 * args[0..n) as ?5 on. SEMQ_DECLINED (errmsg says why, *declined_status the
 * status found or INT_MIN when there is no row) when no row was in a status
 * the transition applies to.
 */
int store__out_transition(struct store *st, enum q i, const struct msgid *id,
			  const struct targ *args, int n, const char *what,
			  const char *wanted, int *declined_status)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0, ds, k;
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
	for (k = 0; k < n; k++) {
		if (args[k].kind == TA_TEXT)
			db_bind_text(s, 5 + k, args[k].t);
		else if (args[k].kind == TA_DIGEST)
			bind_digest(s, 5 + k, (uint64_t)args[k].v);
		else
			db_bind_int64(s, 5 + k, args[k].v);
	}
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
	const struct targ a[] = {TI(now), TI(query_at),
				 TD(id ? id->digest : 0)};

	return out_transition(st, Q_OUT_MARK_SENT, id, a, 3, "mark sent", "0",
			      NULL);
}

int store_mark_relay_acked(struct store *st, const struct msgid *id,
			   int64_t now, int64_t query_at)
{
	const struct targ a[] = {TI(query_at), TD(id ? id->digest : 0)};

	(void)now;
	return out_transition(st, Q_OUT_MARK_RELAY, id, a, 2,
			      "mark relay-acked", "4", NULL);
}

int store_mark_unsent(struct store *st, const struct msgid *id,
		      int64_t retry_at, const char *error)
{
	const struct targ a[] = {TI(retry_at), TT(error),
				 TD(id ? id->digest : 0)};

	return out_transition(st, Q_OUT_MARK_UNSENT, id, a, 3, "mark unsent",
			      "4 or 6", NULL);
}

int store_mark_confirmed(struct store *st, const struct msgid *id, int result,
			 int64_t now)
{
	const struct targ a[] = {TI(result), TI(now), TD(id ? id->digest : 0)};

	if (!st)
		return SEMQ_ERR_INVALID;
	if (result < RES_PROCESSED || result > RES_DEAD)
		return seterr(st, SEMQ_ERR_INVALID,
			      "mark confirmed: result %d is not 0..5", result);
	return out_transition(st, Q_OUT_MARK_CONFIRMED, id, a, 3,
			      "mark confirmed", "0, 4, 6, 8 or -2", NULL);
}

int store_cancel(struct store *st, const struct msgid *id, int64_t now)
{
	const struct targ a[] = {TI(now)};
	int r, status;

	r = out_transition(st, Q_OUT_CANCEL, id, a, 1, "cancel", "0, 4, 6 or 8",
			   &status);
	if (r != SEMQ_DECLINED)
		return r;
	if (status == INT_MIN) /* errmsg: no such message */
		return SEMQ_ERR_NOT_FOUND;
	if (status == SS_CANCELLED) /* already cancelled: nothing to do */
		return SEMQ_OK;
	return SEMQ_DECLINED;
}

int store_hold(struct store *st, const struct msgid *id, int result,
	       const char *why, int64_t now)
{
	const struct targ a[] = {TI(result), TT(why), TI(now)};

	return out_transition(st, Q_OUT_HOLD, id, a, 3, "hold",
			      "0, 4, 6 or an unanswered -2", NULL);
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
	const struct targ a[] = {TI(next_at), TD(id ? id->digest : 0)};

	return out_transition(st, Q_OUT_DEFER, id, a, 2, "defer",
			      "4, 6 or unanswered -2", NULL);
}

int store_drop_copy(struct store *st, const struct msgid *id)
{
	const struct targ a[] = {TD(id ? id->digest : 0)};

	return out_transition(st, Q_OUT_DROP_COPY, id, a, 1, "drop copy",
			      "a relay copy of that message", NULL);
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
	    status == SS_ACK || status == SS_HELD || status == SS_ACK2 ||
	    status == SS_CANCELLED)
		return SEMQ_OK;
	return seterr(st, SEMQ_ERR_INVALID,
		      "tb_0031: status %d is not 0, 4, 6, 8, 100 or -2",
		      status);
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

static int check_filter_out(struct store *st, const struct store_filter *f)
{
	if (!f)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "outbound filter is NULL");
	if (f->where)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "tb_0031 has no last_error filter");
	return check_out_status(st, f->status);
}

int store_outbound_select(struct store *st, const struct store_filter *f,
			  store_out_cb cb, void *ctx)
{
	struct db_stmt *s = NULL;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "outbound_select: callback is missing");
	r = check_filter_out(st, f);
	if (!r)
		r = store__filter_stmt(st, FT_OUT, f, NULL,
				       store__out_select_sql,
				       " ORDER BY id DESC", 1, &s);
	if (!r)
		r = each_out(st, s, cb, ctx, NULL, NULL);
	db_finalize(s);
	return r;
}

/* The first column of the one row of a count(*) statement s. */
static int count_of(struct store *st, struct db_stmt *s, const char *what,
		    int64_t *n)
{
	int rc = db_step(s);

	if (rc == DB_ROW) {
		*n = db_col_int64(s, 0);
		return SEMQ_OK;
	}
	return rc < 0 ? dberr(st, what)
		      : seterr(st, SEMQ_ERR_INTERNAL, "%s: no row", what);
}

int store_outbound_count(struct store *st, const struct store_filter *f,
			 int64_t *n)
{
	struct db_stmt *s = NULL;
	int r;

	if (!st || !n)
		return SEMQ_ERR_INVALID;
	r = check_filter_out(st, f);
	if (!r)
		r = store__filter_stmt(st, FT_OUT, f, NULL,
				       "SELECT count(*) FROM tb_0031", "", 0,
				       &s);
	if (!r)
		r = count_of(st, s, "counting tb_0031", n);
	db_finalize(s);
	return r;
}

int store_outbound_dead_at(struct store *st, store_waiting_cb cb, void *ctx)
{
	return store__waiting_rows(st, Q_OUT_DEAD_AT, "dead at the destination",
				   cb, ctx);
}

/* ---- renumbering and stream counters ------------------------------------ */

/* The next seq of this node's stream to dest (the counter moves). */
static int next_seq(struct store *st, const char *dest, uint64_t *seq)
{
	struct db_stmt *s = q_get(st, Q_OUT_NEXT_SEQ);
	int rc, r = SEMQ_OK;

	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, st->node_id);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	if (rc == DB_ROW)
		*seq = (uint64_t)db_col_int64(s, 0);
	else if (rc == DB_DONE)
		r = seterr(st, SEMQ_ERR_INTERNAL,
			   "%s: stream %s/%s has no counter", st->name,
			   st->node_id, dest);
	else
		r = dberr(st, "renumber: the stream's counter");
	if (rc == DB_ROW)
		rc = db_step(s); /* to the end: the update is complete */
	q_put(st, Q_OUT_NEXT_SEQ, s);
	return r;
}

int store_is_filler(struct store *st, const struct msgid *id, int *filler)
{
	uint64_t have = 0;
	int status = 0, r = store_outbound_state(st, id, &status, &have);

	*filler = r == SEMQ_OK && status == SS_CANCELLED && have &&
		  strcmp(id->origin, st->node_id) == 0 &&
		  have == semq_filler_digest(id);
	return r == SEMQ_ERR_NOT_FOUND ? SEMQ_OK : r;
}

/* A peer has seen this node's stream to dest up to `high`. */
static int note_seen(struct store *st, const char *dest, uint64_t high)
{
	struct db_stmt *s = q_get(st, Q_OUT_SEEN);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, st->node_id);
	db_bind_text(s, 2, dest);
	db_bind_int64(s, 3, (int64_t)high);
	rc = db_step(s);
	q_put(st, Q_OUT_SEEN, s);
	return rc < 0 ? dberr(st, "resync: noting how far a peer has seen")
		      : SEMQ_OK;
}

/*
 * Renumbering gave up seq old->seq (its message now has `moved_to`). Above
 * how far the lost timeline reached (semq_stream_out.seen_high), nothing
 * else will ever arrive under it at the destination, whose watermark would
 * stop below it for good: a filler goes there instead, a cancel of nothing
 * (docs/PROTOCOL.md, "What the origin does"); a peer that holds a message
 * of the lost timeline under it after all refuses the filler, which is then
 * done. At or below seen_high the destination has,
 * or may yet get, a message of the lost timeline there.
 */
static int put_filler(struct store *st, const struct msgid *old,
		      uint64_t moved_to, int64_t now)
{
	char why[SEMQ_ERRLEN];
	struct db_stmt *s;
	uint64_t seen = 0, digest = semq_filler_digest(old);
	int rc;

	s = q_get(st, Q_OUT_SEEN_GET);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, old->origin);
	db_bind_text(s, 2, old->dest);
	rc = db_step(s);
	if (rc == DB_ROW)
		seen = (uint64_t)db_col_int64(s, 0);
	q_put(st, Q_OUT_SEEN_GET, s);
	if (rc < 0)
		return dberr(st, "renumber: reading seen_high");
	if (old->seq <= seen || !digest)
		return SEMQ_OK;
	snprintf(why, sizeof why,
		 "filler: seq %" PRIu64 " was given up when its message was "
		 "renumbered to %" PRIu64 "; this record without effect takes "
		 "its place at %s, so that its watermark passes it",
		 old->seq, moved_to, old->dest);
	s = q_get(st, Q_OUT_FILLER);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, old);
	db_bind_int64(s, 5, now);
	bind_digest(s, 6, digest);
	db_bind_text(s, 7, why);
	rc = db_step(s);
	q_put(st, Q_OUT_FILLER, s);
	return rc < 0 ? dberr(st, "renumber: a filler") : SEMQ_OK;
}

int store_renumber(struct store *st, const struct msgid *id, int64_t now,
		   const char *why, struct msgid **olds, unsigned *n_out,
		   uint64_t *first_out)
{
	struct db_stmt *s = NULL;
	struct msg m;
	struct out_row row;
	struct msgid *seqs = NULL;
	uint64_t prev, nseq = 0;
	size_t n = 0, cap = 0, k;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0, filler = 0;
	char idb[MSGID_STRLEN];

	memset(&m, 0, sizeof m);
	if (olds)
		*olds = NULL;
	if (n_out)
		*n_out = 0;
	if (first_out)
		*first_out = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		goto out;
	r = store_outbound_get(st, id, &m, &row);
	if (r)
		goto out;
	msgid_str(id, idb, sizeof idb);
	if (strcmp(m.id.origin, st->node_id) != 0 || m.id.life != st->life) {
		r = seterr(st, SEMQ_DECLINED,
			   "%s: not a message of this node's life", idb);
		goto out;
	}
	if (row.status == SS_ACK2 ||
	    (row.status == SS_CANCELLED && row.result >= 0)) {
		r = seterr(st, SEMQ_DECLINED, "%s: already %s", idb,
			   semq_status_name("tb_0031", row.status));
		goto out;
	}
	r = store_is_filler(st, id, &filler);
	if (r == SEMQ_OK && filler)
		r = seterr(st, SEMQ_DECLINED,
			   "%s: a filler (a cancel of nothing) has no message "
			   "to renumber",
			   idb);
	if (r)
		goto out;
	/* Its own seq is the lost timeline's: the refuser holds another
	 * message there, or held one (UNDECIDED, renumbered by the
	 * operator). That timeline reached at least this far. */
	r = note_seen(st, m.id.dest, m.id.seq);
	if (r)
		goto out;
	/* The row and the unconfirmed later rows of its key, in order. */
	s = q_get(st, Q_OUT_CHAIN);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_text(s, 1, m.id.origin);
	db_bind_text(s, 2, m.id.dest);
	db_bind_int64(s, 3, (int64_t)m.id.life);
	db_bind_int64(s, 4, (int64_t)m.id.seq);
	bind_key(s, 5, &m);
	while ((rc = db_step(s)) == DB_ROW) {
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct msgid *v = realloc(seqs, nc * sizeof *v);
			if (!v) {
				r = seterr(st, SEMQ_ERR_NOMEM, "%s",
					   "renumber: out of memory");
				goto out;
			}
			seqs = v;
			cap = nc;
		}
		seqs[n] = m.id;
		seqs[n].seq = (uint64_t)db_col_int64(s, 0);
		seqs[n].digest =
			db_col_null(s, 1) ? 0 : (uint64_t)db_col_int64(s, 1);
		n++;
	}
	q_put(st, Q_OUT_CHAIN, s);
	s = NULL;
	if (rc < 0) {
		r = dberr(st, "renumber: reading the key's rows");
		goto out;
	}
	/* The first keeps its predecessor; each later one follows the one
	 * renumbered before it. */
	prev = m.prev_seq;
	for (k = 0; k < n; k++) {
		struct msgid old = seqs[k];

		r = next_seq(st, m.id.dest, &nseq);
		if (r)
			goto out;
		s = q_get(st, Q_OUT_RENUMBER);
		if (!s) {
			r = SEMQ_ERR_DB;
			goto out;
		}
		bind_id(s, &old);
		db_bind_int64(s, 5, (int64_t)nseq);
		db_bind_int64(s, 6, (int64_t)(k ? prev : m.prev_seq));
		db_bind_int64(s, 7, now);
		db_bind_text(s, 8, why);
		rc = db_step(s);
		q_put(st, Q_OUT_RENUMBER, s);
		s = NULL;
		if (rc < 0) {
			r = dberr(st, "renumber");
			goto out;
		}
		if (k == 0 && first_out)
			*first_out = nseq;
		prev = nseq;
		r = put_filler(st, &old, nseq, now);
		if (r)
			goto out;
	}
	if (n_out)
		*n_out = (unsigned)n;
	if (olds) {
		*olds = seqs;
		seqs = NULL;
	}
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_CHAIN, s);
	msg_clear(&m);
	free(seqs);
	return tx_close(st, own, r);
}

int store_last_seq(struct store *st, const char *dest, uint64_t *last)
{
	struct db_stmt *s;
	int rc, r;

	*last = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "dest", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	s = q_get(st, Q_OUT_LAST_SEQ);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, st->node_id);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	if (rc == DB_ROW)
		*last = (uint64_t)db_col_int64(s, 0);
	r = rc < 0 ? dberr(st, "reading a stream's counter") : SEMQ_OK;
	q_put(st, Q_OUT_LAST_SEQ, s);
	return r;
}

int store_stream_resync(struct store *st, const char *dest, uint64_t high,
			int64_t now, const char *note, int record,
			uint64_t *moved_from, int *moved)
{
	struct db_stmt *s = NULL;
	uint64_t last = 0;
	int r = SEMQ_ERR_INTERNAL, own = 0;

	if (moved_from)
		*moved_from = 0;
	if (moved)
		*moved = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	if (high > (uint64_t)INT64_MAX)
		return seterr(st, SEMQ_ERR_INVALID,
			      "resync: seq %" PRIu64 " out of range", high);
	r = tx_open(st, &own);
	if (r)
		goto out;
	/* Read under the write lock (SQLite) or before a row lock that the
	 * upsert takes (PostgreSQL: GREATEST keeps it from going down). */
	r = store_last_seq(st, dest, &last);
	if (r)
		goto out;
	/* Only a high above the counter tells of the lost timeline: one at
	 * or below it may be this database's own messages, sent since. */
	r = last < high ? note_seen(st, dest, high) : SEMQ_OK;
	if (r)
		goto out;
	if (last >= high && !record) {
		r = seterr(st, SEMQ_DECLINED,
			   "%s/%s: counter %" PRIu64 " is not below %" PRIu64,
			   st->node_id, dest, last, high);
		goto out;
	}
	s = q_get(st, Q_OUT_RESYNC);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_text(s, 1, st->node_id);
	db_bind_text(s, 2, dest);
	db_bind_int64(s, 3, (int64_t)high);
	db_bind_int64(s, 4, now);
	db_bind_text(s, 5, note);
	if (db_step(s) < 0) {
		r = dberr(st, "resync: moving the stream's counter");
		goto out;
	}
	if (moved_from)
		*moved_from = last;
	if (moved)
		*moved = last < high;
	if (last < high)
		r = note_seen(st, dest, high); /* the row may be new */
out:
	q_put(st, Q_OUT_RESYNC, s);
	return tx_close(st, own, r);
}

int store_streams_out(struct store *st, store_out_stream_cb cb, void *ctx)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "streams_out: callback is missing");
	s = q_get(st, Q_OUT_STREAMS);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, st->node_id);
	while ((rc = db_step(s)) == DB_ROW) {
		char dest[SEMQ_ID_MAX + 1], *note = NULL;
		struct out_stream os;
		int stop;

		col_text(dest, sizeof dest, s, 0);
		if (col_dup(s, 4, &note)) {
			r = seterr(st, SEMQ_ERR_NOMEM, "%s",
				   "streams_out: out of memory");
			break;
		}
		os.dest = dest;
		os.last_seq = (uint64_t)db_col_int64(s, 1);
		os.resyncs = db_col_int64(s, 2);
		os.resync_at = db_col_null(s, 3) ? 0 : db_col_int64(s, 3);
		os.note = note;
		os.life_hidden = col_int(s, 5);
		stop = cb(ctx, &os);
		free(note);
		if (stop)
			break;
	}
	if (rc < 0)
		r = dberr(st, "reading semq_stream_out");
	q_put(st, Q_OUT_STREAMS, s);
	return r;
}

int store_hide_life(struct store *st, const char *dest)
{
	struct db_stmt *s;
	int r, rc, own = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_node(st, "hide life: dest", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	r = tx_open(st, &own);
	if (r)
		return r;
	s = q_get(st, Q_OUT_HIDE_LIFE);
	if (!s)
		return tx_close(st, own, SEMQ_ERR_DB);
	db_bind_text(s, 1, st->node_id);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	q_put(st, Q_OUT_HIDE_LIFE, s);
	if (rc < 0)
		r = dberr(st, "writing semq_stream_out");
	else if (db_changes(st->db) == 0)
		r = seterr(st, SEMQ_DECLINED, "%s: hidden already", dest);
	return tx_close(st, own, r);
}
