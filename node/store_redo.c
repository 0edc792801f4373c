/* SPDX-License-Identifier: MIT */
/*
 * tb_0033, the failure-redo queue and the schedule of delayed messages:
 * entries, their levels of backoff, key order among them, running them, and
 * the operator's verbs (retry, discard).
 */
#include "store_int.h"

#include <time.h>

#include "log.h"

int store_redo_purge(struct store *st, int64_t now, int64_t retention_ms,
		     unsigned limit, unsigned *n_out)
{
	return purge_before(st, Q_REDO_PURGE, "redo purge", now, retention_ms,
			    limit, n_out);
}

/* A new tb_0033 entry for m, by statement i (Q_REDO_INSERT, or
 * Q_REDO_OWN_DEAD for this node's own undeliverable message). */
int store__redo_insert_q(struct store *st, enum q i, const struct msg *m,
			 int status, int tries, int level, int64_t next_at,
			 const char *last_error, int64_t now, const char *idb)
{
	struct db_stmt *s = q_get(st, i);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, &m->id);
	db_bind_int64(s, 5, m->type);
	bind_key(s, 6, m);
	db_bind_int64(s, 7, (int64_t)m->prev_seq);
	db_bind_int64(s, 8, m->deliver_at);
	db_bind_int64(s, 9, m->created_at);
	bind_payload(s, 10, m);
	db_bind_int64(s, 11, status);
	db_bind_int64(s, 12, tries);
	db_bind_int64(s, 13, level);
	db_bind_int64(s, 14, next_at);
	db_bind_text(s, 15, last_error);
	db_bind_int64(s, 16, now);
	rc = db_step(s);
	q_put(st, i, s);
	return rc < 0 ? dberr(st, idb) : SEMQ_OK;
}

/* Does the key have an entry with one of the statuses of query `i`, in the
 * stream of `sid` (its origin, dest and life)? */
int store__redo_key_has(struct store *st, enum q i, const struct msgid *sid,
			const char *key, int *yes)
{
	struct db_stmt *s = q_get(st, i);
	int rc, r = SEMQ_OK;

	*yes = 0;
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, sid->origin, sid->dest, sid->life);
	db_bind_text(s, 4, key);
	rc = db_step(s);
	if (rc == DB_ROW)
		*yes = 1;
	else if (rc < 0)
		r = dberr(st, "reading tb_0033 by key");
	q_put(st, i, s);
	return r;
}

/* After a head finished: the lowest waiting entry of the key becomes
 * pending (at its deliver_at when that is later), unless a head remains.
 * *released (may be NULL) gets its id, 0 when none was released. */
static int redo_release_next(struct store *st, const struct msgid *sid,
			     const char *key, int64_t now, int64_t *released)
{
	struct db_stmt *s = NULL;
	int64_t id = 0, at = now;
	int r = SEMQ_ERR_INTERNAL, rc, head;

	r = redo_key_has(st, Q_REDO_KEY_HEAD, sid, key, &head);
	if (r || head)
		return r;
	s = q_get(st, Q_REDO_KEY_NEXT);
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, sid->origin, sid->dest, sid->life);
	db_bind_text(s, 4, key);
	rc = db_step(s);
	if (rc == DB_ROW) {
		id = db_col_int64(s, 0);
		if (db_col_int64(s, 1) > at)
			at = db_col_int64(s, 1);
	} else if (rc < 0) {
		r = dberr(st, "reading tb_0033 by key");
		goto out;
	}
	q_put(st, Q_REDO_KEY_NEXT, s);
	s = NULL;
	if (!id) {
		r = SEMQ_OK;
		goto out;
	}
	s = q_get(st, Q_REDO_RELEASE);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_int64(s, 1, id);
	db_bind_int64(s, 2, at);
	db_bind_int64(s, 3, now);
	rc = db_step(s);
	q_put(st, Q_REDO_RELEASE, s);
	s = NULL;
	r = rc < 0 ? dberr(st, "releasing a waiting entry") : SEMQ_OK;
	if (!r && released)
		*released = id;
out:
	q_put(st, Q_REDO_KEY_NEXT, s);
	return r;
}

int64_t store__level_ms(const struct store *st, int level)
{
	return semq_redo_delay(st->levels, st->n_levels, level);
}

/* ---- redo queue: tb_0033 -------------------------------------------------- */

/* Loads entry `id`; strs get its last_error and discard_reason (caller
 * frees both and msg_clear()s m). SEMQ_ERR_NOT_FOUND when there is none. */
static int redo_load(struct store *st, int64_t id, struct msg *m,
		     struct redo_row *row, char **strs)
{
	struct db_stmt *s = q_get(st, Q_REDO_GET);
	int rc, r;

	memset(m, 0, sizeof *m);
	strs[0] = strs[1] = NULL;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, id);
	rc = db_step(s);
	if (rc == DB_ROW)
		r = col_redo(st, s, m, row, strs);
	else if (rc == DB_DONE)
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "redo %" PRId64 ": no such entry", id);
	else
		r = dberr(st, "reading tb_0033");
	q_put(st, Q_REDO_GET, s);
	return r;
}

/* An entry of this node's own message: a relay found it undeliverable
 * (store_undeliverable). Never run; retry sends it again, discard cancels
 * it. */
static int own_entry(const struct store *st, const struct msg *m)
{
	return strcmp(m->id.origin, st->node_id) == 0;
}

/* Settles the dead entry of this node's own message: done (status 2) or
 * discarded (-2, with reason). */
static int own_settle(struct store *st, const struct msgid *id, int status,
		      const char *reason, int64_t now)
{
	const struct targ a[] = {TI(status), TT(reason), TI(now)};
	struct db_stmt *s;
	int k, rc;

	s = q_get(st, Q_REDO_OWN_SETTLE);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	for (k = 0; k < 3; k++)
		if (a[k].kind == TA_TEXT)
			db_bind_text(s, 5 + k, a[k].t);
		else
			db_bind_int64(s, 5 + k, a[k].v);
	rc = db_step(s);
	q_put(st, Q_REDO_OWN_SETTLE, s);
	return rc < 0 ? dberr(st, "settling a redo entry") : SEMQ_OK;
}

/* redo retry of an own entry: the message goes out again (a relay that
 * still does not know its destination makes it dead again). */
static int own_retry(struct store *st, const struct msg *m,
		     const struct redo_row *row, int64_t now)
{
	const struct targ a[] = {TI(now)};
	int r;

	if (row->status != RS_DEAD)
		return seterr(st, SEMQ_DECLINED,
			      "redo %" PRId64 ": %s, not dead", row->id,
			      semq_status_name("tb_0033", row->status));
	r = out_transition(st, Q_OUT_OWN_RESEND, &m->id, a, 1, "resend",
			   "8 (undeliverable)", NULL);
	/* Not held any more (confirmed or cancelled meanwhile): nothing to
	 * send; the entry is done either way. */
	if (r == SEMQ_DECLINED)
		r = SEMQ_OK;
	return r ? r : own_settle(st, &m->id, RS_DONE, NULL, now);
}

/* redo discard of an own entry: the message is cancelled (it never reached
 * its destination: cancelled at once; the relay's copy goes when the relay
 * next asks, docs/PROTOCOL.md "Custody"). */
static int own_discard(struct store *st, const struct msg *m,
		       const struct redo_row *row, const char *reason,
		       int64_t now)
{
	int r;

	if (row->status != RS_DEAD)
		return seterr(st, SEMQ_DECLINED,
			      "redo %" PRId64 ": %s, cannot be discarded",
			      row->id,
			      semq_status_name("tb_0033", row->status));
	r = store_cancel(st, &m->id, now);
	if (r == SEMQ_DECLINED) /* confirmed meanwhile */
		r = SEMQ_OK;
	return r ? r : own_settle(st, &m->id, RS_DISCARDED, reason, now);
}

/*
 * Loads entry `id` for a change that may release or run entries of its key:
 * on PostgreSQL the entry's stream is locked first (see stream_lock) and the
 * entry read again under the lock, as the instance that held it left it.
 */
static int redo_load_locked(struct store *st, int64_t id, struct msg *m,
			    struct redo_row *row, char **strs)
{
	uint64_t w;
	int r, known;

	r = redo_load(st, id, m, row, strs);
	if (r || !st->pg || own_entry(st, m) ||
	    stream_held(st, m->id.origin, m->id.dest, m->id.life))
		return r;
	r = stream_lock(st, m->id.origin, m->id.dest, m->id.life, 0, &w,
			&known);
	msg_clear(m);
	free(strs[0]);
	free(strs[1]);
	strs[0] = strs[1] = NULL;
	if (r)
		return r;
	return redo_load(st, id, m, row, strs);
}

int store_redo_due(struct store *st, int64_t now, unsigned limit,
		   store_redo_cb cb, void *ctx)
{
	struct db_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_due: callback is missing");
	s = q_get(st, Q_REDO_DUE);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, now);
	db_bind_int64(s, 2, limit);
	r = each_redo(st, s, cb, ctx);
	q_put(st, Q_REDO_DUE, s);
	return r;
}

int store_redo_next_due(struct store *st, int64_t *at)
{
	struct db_stmt *s;
	int r, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!at)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_next_due: at is NULL");
	s = q_get(st, Q_REDO_NEXT_DUE);
	if (!s)
		return SEMQ_ERR_DB;
	rc = db_step(s);
	if (rc != DB_ROW)
		r = rc < 0 ? dberr(st, "redo_next_due")
			   : seterr(st, SEMQ_ERR_INTERNAL, "%s",
				    "redo_next_due: no row");
	else if (db_col_null(s, 0))
		r = seterr(st, SEMQ_DECLINED, "%s", "no pending redo entry");
	else {
		*at = db_col_int64(s, 0);
		r = SEMQ_OK;
	}
	q_put(st, Q_REDO_NEXT_DUE, s);
	return r;
}

int store_redo_origin(struct store *st, int64_t id, char *origin,
		      size_t originsz)
{
	struct db_stmt *s;
	int r, rc;

	if (!st || !origin || !originsz)
		return SEMQ_ERR_INVALID;
	s = q_get(st, Q_REDO_ORIGIN);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, id);
	r = SEMQ_OK;
	{
		rc = db_step(s);
		if (rc == DB_ROW) {
			const char *o = db_col_text(s, 0);
			snprintf(origin, originsz, "%s", o ? o : "");
		} else if (rc < 0) {
			r = dberr(st, "redo_origin");
		} else {
			r = seterr(st, SEMQ_ERR_NOT_FOUND,
				   "redo %" PRId64 ": no such entry", id);
		}
	}
	q_put(st, Q_REDO_ORIGIN, s);
	return r;
}

static int redo_update(struct store *st, int64_t id, int status, int tries,
		       int level, int64_t next_at, const char *last_error,
		       int64_t now)
{
	struct db_stmt *s = q_get(st, Q_REDO_UPDATE);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, id);
	db_bind_int64(s, 2, status);
	db_bind_int64(s, 3, tries);
	db_bind_int64(s, 4, level);
	db_bind_int64(s, 5, next_at);
	db_bind_text(s, 6, last_error);
	db_bind_int64(s, 7, now);
	rc = db_step(s);
	q_put(st, Q_REDO_UPDATE, s);
	return rc < 0 ? dberr(st, "updating tb_0033") : SEMQ_OK;
}

int store_redo_run(struct store *st, int64_t id, int64_t now,
		   store_apply_fn apply, void *ctx, int *status_out)
{
	struct msg m;
	struct redo_row row;
	char *strs[2] = {NULL, NULL};
	char idb[MSGID_STRLEN], perr[SEMQ_ERRLEN];
	int r = SEMQ_ERR_INTERNAL, own = 0, v, tries, status, level;
	int64_t next_at;

	memset(&m, 0, sizeof m);
	if (!st)
		return SEMQ_ERR_INVALID;
	if (!apply)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_run: apply is missing");
	r = tx_open(st, &own);
	if (r)
		goto out;
	/* Under the stream's lock: another instance may have run it. */
	r = redo_load_locked(st, id, &m, &row, strs);
	if (r)
		goto out;
	if (row.status != RS_PENDING || own_entry(st, &m)) {
		r = seterr(st, SEMQ_DECLINED,
			   "redo %" PRId64 ": %s, not pending", id,
			   semq_status_name("tb_0033", row.status));
		goto out;
	}
	/* The table, not the caller's memory, says when an entry is due: a
	 * delayed message never runs before its deliver_at. */
	if (row.next_attempt_at > now) {
		r = seterr(st, SEMQ_DECLINED,
			   "redo %" PRId64 ": not due until %" PRId64, id,
			   row.next_attempt_at);
		goto out;
	}
	msgid_str(&m.id, idb, sizeof idb);
	r = apply_sp(st, &m, (unsigned)row.tries, apply, ctx, perr, sizeof perr,
		     &v, idb);
	if (r)
		goto out;
	tries = row.tries + 1;
	level = row.level;
	next_at = row.next_attempt_at;
	if (v == SEMQ_PLUGIN_OK) {
		status = RS_DONE;
	} else if (v == SEMQ_PLUGIN_RETRY &&
		   !semq_redo_gives_up((unsigned)tries, st->max_tries)) {
		status = RS_PENDING;
		next_at = now + level_ms(st, level);
		level++;
	} else {
		status = RS_DEAD;
	}
	r = redo_update(st, id, status, tries, level, next_at,
			status == RS_DONE ? NULL : perr, now);
	if (!r && status != RS_DONE)
		store__redo_log(st, &m.id, status, tries, next_at, perr, now);
	/* What a second copy of it is answered from now on. */
	if (!r && status == RS_DONE)
		r = in_set_result(st, &m.id, RES_PROCESSED, idb);
	if (!r && status == RS_DONE && key_of(&m))
		r = redo_release_next(st, &m.id, m.key, now, NULL);
	if (r)
		goto out;
	if (status_out)
		*status_out = status;
	r = SEMQ_OK;
out:
	msg_clear(&m);
	free(strs[0]);
	free(strs[1]);
	return tx_close(st, own, r);
}

static int check_redo_status(struct store *st, int status)
{
	if (status < -99 || status == RS_PENDING || status == RS_WAITING ||
	    status == RS_DONE || status == RS_DEAD || status == RS_DISCARDED)
		return SEMQ_OK;
	return seterr(st, SEMQ_ERR_INVALID,
		      "tb_0033: status %d is not 0, 1, 2, -1 or -2", status);
}

int store_redo_list(struct store *st, int status, unsigned limit,
		    store_redo_cb cb, void *ctx)
{
	enum q i = status < -99 ? Q_REDO_LIST_ALL : Q_REDO_LIST;
	struct db_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_list: callback is missing");
	r = check_redo_status(st, status);
	if (r)
		return r;
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	if (i == Q_REDO_LIST_ALL) {
		db_bind_int64(s, 1, limit);
	} else {
		db_bind_int64(s, 1, status);
		db_bind_int64(s, 2, limit);
	}
	r = each_redo(st, s, cb, ctx);
	q_put(st, i, s);
	return r;
}

int store_redo_get(struct store *st, int64_t id, struct msg *m,
		   struct redo_row *row)
{
	char *strs[2];
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!m || !row)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_get: m and row are required");
	r = redo_load(st, id, m, row, strs);
	if (r) {
		msg_clear(m);
		free(strs[0]);
		free(strs[1]);
		return r;
	}
	keep_row_strs(st, strs[0], strs[1]);
	return SEMQ_OK;
}

int store_redo_head(struct store *st, const struct msg *m, int64_t now,
		    struct redo_head *h)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	memset(h, 0, sizeof *h);
	if (!st || !m)
		return SEMQ_ERR_INVALID;
	if (!key_of(m))
		return SEMQ_ERR_NOT_FOUND;
	s = q_get(st, Q_REDO_HEAD_OF);
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, m->id.origin, m->id.dest, m->id.life);
	db_bind_text(s, 4, m->key);
	rc = db_step(s);
	if (rc == DB_ROW) {
		int64_t deliver_at = db_col_int64(s, 4);

		h->id = db_col_int64(s, 0);
		h->seq = (uint64_t)db_col_int64(s, 1);
		h->status = col_int(s, 2);
		h->next_attempt_at = db_col_int64(s, 3);
		h->delayed = h->status == RS_PENDING && deliver_at > now &&
			     h->next_attempt_at >= deliver_at;
	} else if (rc == DB_DONE) {
		r = SEMQ_ERR_NOT_FOUND;
	} else {
		r = dberr(st, "reading tb_0033 by key");
	}
	q_put(st, Q_REDO_HEAD_OF, s);
	return r;
}

int store_redo_retry(struct store *st, int64_t id, int64_t now)
{
	struct db_stmt *s = NULL;
	struct msg m;
	struct redo_row row;
	char *strs[2] = {NULL, NULL};
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;

	memset(&m, 0, sizeof m);
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		goto out;
	r = redo_load(st, id, &m, &row, strs);
	if (r)
		goto out;
	if (own_entry(st, &m)) {
		r = own_retry(st, &m, &row, now);
		goto out;
	}
	s = q_get(st, Q_REDO_RETRY);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_int64(s, 1, id);
	db_bind_int64(s, 2, now);
	rc = db_step(s);
	q_put(st, Q_REDO_RETRY, s);
	if (rc < 0) {
		r = dberr(st, "redo retry");
		goto out;
	}
	if (db_changes(st->db) == 0) {
		r = seterr(st, SEMQ_DECLINED, "redo %" PRId64 ": %s, not dead",
			   id, semq_status_name("tb_0033", row.status));
		goto out;
	}
	r = SEMQ_OK;
out:
	msg_clear(&m);
	free(strs[0]);
	free(strs[1]);
	return tx_close(st, own, r);
}

/* Every dead entry, through the bulk verb (one transaction: the caller's
 * listing in the same transaction is exactly what it retries). */
int store_redo_retry_all_dead(struct store *st, int64_t now, unsigned *n_out)
{
	struct store_filter f = {0};

	f.status = RS_DEAD;
	return store_redo_bulk(st, STORE_REDO_RETRY, &f, NULL, now, 0, UINT_MAX,
			       NULL, NULL, NULL, n_out);
}

int store_redo_discard(struct store *st, int64_t id, const char *reason,
		       int64_t now)
{
	return store__redo_discard(st, id, reason, now, NULL);
}

int store__redo_discard(struct store *st, int64_t id, const char *reason,
			int64_t now, int64_t *released)
{
	struct db_stmt *s = NULL;
	struct msg m;
	struct redo_row row;
	char *strs[2] = {NULL, NULL};
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;

	memset(&m, 0, sizeof m);
	if (!st)
		return SEMQ_ERR_INVALID;
	if (!reason || !reason[0])
		return seterr(st, SEMQ_ERR_INVALID,
			      "redo %" PRId64 ": discard needs a reason", id);
	r = tx_open(st, &own);
	if (r)
		goto out;
	r = redo_load_locked(st, id, &m, &row, strs);
	if (r)
		goto out;
	if (own_entry(st, &m)) {
		r = own_discard(st, &m, &row, reason, now);
		goto out;
	}
	if (!store_redo_verb_applies(STORE_REDO_DISCARD, row.status)) {
		r = seterr(st, SEMQ_DECLINED, "redo %" PRId64 ": %s; %s", id,
			   semq_status_name("tb_0033", row.status),
			   store_redo_verb_rule(STORE_REDO_DISCARD));
		goto out;
	}
	s = q_get(st, Q_REDO_DISCARD);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_int64(s, 1, id);
	db_bind_text(s, 2, reason);
	db_bind_int64(s, 3, now);
	rc = db_step(s);
	q_put(st, Q_REDO_DISCARD, s);
	s = NULL;
	if (rc < 0) {
		r = dberr(st, "redo discard");
		goto out;
	}
	/* It will never take effect: a second copy is answered cancelled. */
	r = in_set_result(st, &m.id, RES_CANCELLED, "redo discard");
	if (r)
		goto out;
	r = key_of(&m) ? redo_release_next(st, &m.id, m.key, now, released)
		       : SEMQ_OK;
out:
	msg_clear(&m);
	free(strs[0]);
	free(strs[1]);
	return tx_close(st, own, r);
}

/* How many entries of the key wait in the stream of `sid` (its origin, dest
 * and life). */
int store__redo_key_waiting(struct store *st, const struct msgid *sid,
			    const char *key, int64_t *n)
{
	struct db_stmt *s = q_get(st, Q_REDO_KEY_WAITING);
	int rc, r = SEMQ_OK;

	*n = 0;
	if (!s)
		return SEMQ_ERR_DB;
	bind_stream(s, sid->origin, sid->dest, sid->life);
	db_bind_text(s, 4, key);
	rc = db_step(s);
	if (rc == DB_ROW)
		*n = db_col_int64(s, 0);
	else
		r = dberr(st, "counting the waiting entries of a key");
	q_put(st, Q_REDO_KEY_WAITING, s);
	return r;
}

/* ---- log lines ------------------------------------------------------------ */

#define REDO_LOG_PER_SECOND 20

void store__redo_log(struct store *st, const struct msgid *id, int status,
		     int tries, int64_t next_at, const char *reason,
		     int64_t now)
{
	struct db_stmt *s;
	int64_t rid = 0;
	char when[32];
	struct tm tm;
	time_t t;

	if (status != RS_DEAD && status != RS_PENDING)
		return;
	if (now / 1000 != st->log_second) {
		if (st->log_dropped)
			log_msg(LOG_WARN, "redo", NULL, NULL,
				"%u more lines about dead and retried "
				"entries left out (more than %d a second); "
				"'semqctl redo list --group-by error' "
				"sums them up",
				st->log_dropped, REDO_LOG_PER_SECOND);
		st->log_second = now / 1000;
		st->log_lines = st->log_dropped = 0;
	}
	if (st->log_lines >= REDO_LOG_PER_SECOND) {
		st->log_dropped++;
		return;
	}
	st->log_lines++;
	s = q_get(st, Q_REDO_ID_OF);
	if (s) {
		bind_id(s, id);
		if (db_step(s) == DB_ROW)
			rid = db_col_int64(s, 0);
		q_put(st, Q_REDO_ID_OF, s);
	}
	if (status == RS_DEAD) {
		log_msg(LOG_WARN, "redo", NULL, id,
			"dead: redo entry %" PRId64 " after %d tr%s of %u: %s"
			" (semqctl redo show %" PRId64 ")",
			rid, tries, tries == 1 ? "y" : "ies", st->max_tries,
			reason && reason[0] ? reason : "permanent failure",
			rid);
		return;
	}
	t = (time_t)(next_at / 1000);
	if (!gmtime_r(&t, &tm) ||
	    !strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(when, sizeof when, "%" PRId64, next_at);
	log_msg(LOG_INFO, "redo", NULL, id,
		"retry %d/%u of redo entry %" PRId64 " at %s (in %" PRId64
		" s): %s",
		tries + 1, st->max_tries, rid, when,
		(next_at - now + 999) / 1000, reason ? reason : "");
}

/* ---- filters and the bulk verbs ------------------------------------------- */

int store_redo_verb_applies(enum store_redo_verb verb, int status)
{
	if (verb == STORE_REDO_RETRY)
		return status == RS_DEAD;
	return status == RS_DEAD || status == RS_PENDING ||
	       status == RS_WAITING;
}

const char *store_redo_verb_rule(enum store_redo_verb verb)
{
	return verb == STORE_REDO_RETRY
		       ? "only dead entries can be retried"
		       : "only pending, waiting or dead entries can be "
			 "discarded";
}

static int check_filter_redo(struct store *st, const struct store_filter *f)
{
	if (!f)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo filter is NULL");
	return check_redo_status(st, f->status);
}

/* dead first: the entries an operator acts on, then the live ones. */
#define REDO_ORDER_DEAD_FIRST                                                  \
	" ORDER BY CASE status WHEN -1 THEN 0 WHEN 0 THEN 1 WHEN 1 THEN 2"     \
	" WHEN 2 THEN 3 ELSE 4 END, id"

int store_redo_select(struct store *st, const struct store_filter *f,
		      store_redo_cb cb, void *ctx)
{
	struct db_stmt *s = NULL;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_select: callback is missing");
	r = check_filter_redo(st, f);
	if (!r)
		r = store__filter_stmt(
			st, FT_REDO, f, NULL, store__redo_select_sql,
			f->dead_first ? REDO_ORDER_DEAD_FIRST : " ORDER BY id",
			1, &s);
	if (!r)
		r = each_redo(st, s, cb, ctx);
	db_finalize(s);
	return r;
}

int store_redo_count(struct store *st, const struct store_filter *f, int64_t *n)
{
	struct db_stmt *s = NULL;
	int r, rc;

	if (!st || !n)
		return SEMQ_ERR_INVALID;
	r = check_filter_redo(st, f);
	if (!r)
		r = store__filter_stmt(st, FT_REDO, f, NULL,
				       "SELECT count(*) FROM tb_0033", "", 0,
				       &s);
	if (!r) {
		rc = db_step(s);
		if (rc == DB_ROW)
			*n = db_col_int64(s, 0);
		else
			r = rc < 0 ? dberr(st, "counting tb_0033")
				   : seterr(st, SEMQ_ERR_INTERNAL, "%s",
					    "counting tb_0033: no row");
	}
	db_finalize(s);
	return r;
}

int store_redo_groups(struct store *st, const struct store_filter *f,
		      store_group_cb cb, void *ctx)
{
	struct db_stmt *s = NULL;
	int r, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_groups: callback is missing");
	r = check_filter_redo(st, f);
	if (!r)
		r = store__filter_stmt(
			st, FT_REDO, f, NULL,
			st->pg ? "SELECT last_error, count(*), min(created_at),"
				 " max(created_at), string_agg(DISTINCT dest,"
				 " ',') FROM tb_0033"
			       : "SELECT last_error, count(*), min(created_at),"
				 " max(created_at), group_concat(DISTINCT dest)"
				 " FROM tb_0033",
			" GROUP BY last_error ORDER BY count(*) DESC,"
			" min(created_at)",
			1, &s);
	if (r)
		goto out;
	while ((rc = db_step(s)) == DB_ROW) {
		struct redo_group g;
		char *err =
			db_col_null(s, 0) ? NULL : strdup(db_col_text(s, 0));
		char *dests =
			strdup(db_col_null(s, 4) ? "" : db_col_text(s, 4));
		int stop;

		if ((!err && !db_col_null(s, 0)) || !dests) {
			free(err);
			free(dests);
			r = seterr(st, SEMQ_ERR_NOMEM, "%s", "redo_groups");
			goto out;
		}
		g.error = err;
		g.count = db_col_int64(s, 1);
		g.oldest = db_col_int64(s, 2);
		g.newest = db_col_int64(s, 3);
		g.dests = dests;
		stop = cb(ctx, &g);
		free(err);
		free(dests);
		if (stop)
			break;
	}
	if (rc < 0)
		r = dberr(st, "grouping tb_0033");
out:
	db_finalize(s);
	return r;
}

struct idlist {
	int64_t *v;
	size_t n, cap;
	int failed;
};

static int collect_id(void *ctx, const struct msg *m,
		      const struct redo_row *row)
{
	struct idlist *l = ctx;
	int64_t *nv;

	(void)m;
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 256;
		nv = realloc(l->v, l->cap * sizeof *nv);
		if (!nv) {
			l->failed = 1;
			return 1;
		}
		l->v = nv;
	}
	l->v[l->n++] = row->id;
	return 0;
}

int store_redo_bulk(struct store *st, enum store_redo_verb verb,
		    const struct store_filter *f, const char *reason,
		    int64_t now, int dry_run, unsigned batch,
		    store_redo_cb each, store_progress_fn progress, void *ctx,
		    unsigned *n_out)
{
	const char *what = verb == STORE_REDO_RETRY ? "retry" : "discard";
	struct store_filter g;
	struct idlist l = {NULL, 0, 0, 0};
	unsigned done = 0;
	size_t i = 0, end;
	int r, own;

	if (n_out)
		*n_out = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	if (!f)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_bulk: filter is NULL");
	g = *f;
	g.limit = g.offset = 0;
	g.dead_first = 0;
	if (g.status < -99)
		g.status = RS_DEAD;
	if (!store_redo_verb_applies(verb, g.status))
		return seterr(st, SEMQ_ERR_INVALID, "redo %s: %s, not %s ones",
			      what, store_redo_verb_rule(verb),
			      semq_status_name("tb_0033", g.status));
	if (verb == STORE_REDO_DISCARD && (!reason || !reason[0]))
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo discard: a reason is required");
	if (!batch)
		batch = 500;
	r = store_redo_select(st, &g, collect_id, &l);
	if (!r && l.failed)
		r = seterr(st, SEMQ_ERR_NOMEM, "%s", "redo bulk: ids");
	while (!r && i < l.n) {
		end = i + batch < l.n ? i + batch : l.n;
		r = dry_run ? SEMQ_OK : tx_open(st, &own);
		if (r)
			break;
		for (; !r && i < end; i++) {
			struct msg m;
			struct redo_row row;
			char *strs[2] = {NULL, NULL};
			char idb[MSGID_STRLEN];

			r = redo_load(st, l.v[i], &m, &row, strs);
			if (r == SEMQ_ERR_NOT_FOUND) { /* purged meanwhile */
				r = SEMQ_OK;
				goto next;
			}
			if (r)
				goto next;
			if (row.status != g.status) /* changed meanwhile */
				goto next;
			if (!dry_run) {
				struct store_verb v;

				r = verb == STORE_REDO_RETRY
					    ? store_verb_retry(st, row.id, now,
							       &v)
					    : store_verb_discard(st, row.id,
								 reason, now,
								 &v);
				store_verb_clear(&v);
			}
			if (r == SEMQ_DECLINED) {
				r = SEMQ_OK;
				goto next;
			}
			if (r)
				goto next;
			done++;
			if (!dry_run)
				log_msg(LOG_DEBUG, "redo", NULL, &m.id,
					"redo entry %" PRId64 ": %s (bulk %s)",
					row.id,
					verb == STORE_REDO_RETRY ? "retried"
								 : "discarded",
					what);
			(void)idb;
			if (each && each(ctx, &m, &row))
				r = SEMQ_ERR_INTERNAL;
		next:
			msg_clear(&m);
			free(strs[0]);
			free(strs[1]);
		}
		if (!dry_run)
			r = tx_close(st, own, r);
		if (!r && progress)
			progress(ctx, (unsigned)i, (unsigned)l.n);
	}
	free(l.v);
	if (n_out)
		*n_out = done;
	return r;
}
