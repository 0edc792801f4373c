/* SPDX-License-Identifier: MIT */
/*
 * The exactly-once step of SPEC §6: store_receive() records a message and
 * runs its plugin in one transaction, or recognises it as already received.
 * Everything it decides is written in the DESIGN block of store_int.h.
 */
#include "store_int.h"

/*
 * SQLite rolled the transaction back during the plugin's call: was it because
 * the disk is full or a write failed (then errmsg says so and store_disk_full
 * is set)? The plugin writes through the `sqlite3 *` itself, past node/db.h,
 * so only SQLite's own last error knows.
 */
static int plugin_hit_full(struct store *st, const char *idb)
{
	sqlite3 *h;
	int rc;

	if (st->pg)
		return 0;
	h = db_handle(st->db);
	rc = sqlite3_extended_errcode(h) & 0xff;
	if (rc != SQLITE_FULL && rc != SQLITE_IOERR)
		return 0;
	seterr(st, SEMQ_ERR_DB, "%s: %s: %s", st->name, idb, sqlite3_errmsg(h));
	st->full = 1;
	st->tx_failed = 1;
	return 1;
}

/*
 * apply() inside SAVEPOINT semq_apply. *verdict gets OK, RETRY or PERMANENT
 * (anything else counts as PERMANENT); on a failure the plugin's writes are
 * rolled back and perr holds its reason (never empty).
 */
int store__apply_sp(struct store *st, const struct msg *m, unsigned tries,
		    store_apply_fn apply, void *ctx, char *perr, size_t perrsz,
		    int *verdict, const char *idb)
{
	int v;

	if (q_exec(st, Q_SP, "savepoint") != SEMQ_OK)
		return SEMQ_ERR_DB;
	perr[0] = '\0';
	v = apply(ctx, m, tries, &st->tx, perr, perrsz);
	perr[perrsz - 1] = '\0';
	if (!db_in_tx(st->db)) {
		/* SQLite ends the transaction itself when the disk is full;
		 * anything else that ended it was the plugin. */
		if (plugin_hit_full(st, idb))
			return SEMQ_ERR_DB;
		st->tx_failed = 1;
		return seterr(st, SEMQ_ERR_PLUGIN,
			      "%s: the transaction ended inside the plugin (a "
			      "plugin must not BEGIN, COMMIT or ROLLBACK)",
			      idb);
	}
	if (v == SEMQ_PLUGIN_OK) {
		*verdict = v;
		return q_exec(st, Q_SP_RELEASE, "release savepoint");
	}
	if (v != SEMQ_PLUGIN_RETRY)
		v = SEMQ_PLUGIN_PERMANENT;
	if (!perr[0])
		snprintf(perr, perrsz,
			 "the plugin returned %s without a reason",
			 v == SEMQ_PLUGIN_RETRY ? "RETRY" : "PERMANENT");
	*verdict = v;
	if (q_exec(st, Q_SP_UNDO, "rollback to savepoint") != SEMQ_OK)
		return SEMQ_ERR_DB;
	return q_exec(st, Q_SP_RELEASE, "release savepoint");
}

static int check_receive(struct store *st, const struct msg *m, const char *via,
			 unsigned need, store_apply_fn apply)
{
	char idb[MSGID_STRLEN];
	int r;

	if (!m)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "receive: message is missing");
	r = check_msgid(st, &m->id);
	if (r)
		return r;
	msgid_str(&m->id, idb, sizeof idb);
	r = check_body(st, idb, m);
	if (r)
		return r;
	if (m->prev_seq >= m->id.seq)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: prev_seq %" PRIu64 " is not below its seq",
			      idb, m->prev_seq);
	if (via && !semq_id_valid(via))
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: via '%.64s' is not a node id", idb, via);
	if (!(need & CONFIRM_ORIGIN) || (need & ~3u))
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: confirm_need %u is not 1 or 3", idb, need);
	if (!apply)
		return seterr(st, SEMQ_ERR_INVALID, "%s: apply is missing",
			      idb);
	return SEMQ_OK;
}

int store_receive(struct store *st, const struct msg *m, const char *via,
		  unsigned confirm_need, int64_t now, store_apply_fn apply,
		  void *ctx, int *result_out, char *err, size_t errsz)
{
	char idb[MSGID_STRLEN] = "";
	char perr[SEMQ_ERRLEN];
	const char *key;
	uint64_t w = 0;
	int r = SEMQ_ERR_INTERNAL, own = 0, res = -1, known, found = 0;
	int busy = 0;
	int v = SEMQ_PLUGIN_OK;

	if (result_out)
		*result_out = -1;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_receive(st, m, via, confirm_need, apply);
	if (r)
		goto out;
	msgid_str(&m->id, idb, sizeof idb);
	key = key_of(m);
	r = tx_open(st, &own);
	if (r)
		goto out;

	/* Seen before: in tb_0030, or at or below the watermark — as the
	 * other instances left the stream (PostgreSQL: we hold its lock).
	 * The same message again is a duplicate with its recorded verdict;
	 * another message under this seq, or one this node can no longer
	 * tell, is refused (docs/PROTOCOL.md, "The digest"). */
	r = stream_lock(st, m->id.origin, m->id.dest, m->id.life, now, &w,
			&known);
	if (r)
		goto out;
	r = in_seen(st, &m->id, w, &found, &res);
	if (r)
		goto out;
	if (found && (res == RES_CONFLICT || res == RES_UNDECIDED)) {
		r = seterr(st, SEMQ_DECLINED,
			   res == RES_CONFLICT
				   ? "%s: another message (another digest) was "
				     "received under this seq"
				   : "%s: its seq is at or below the watermark "
				     "and its record is gone (older than the "
				     "receipt retention): cannot tell whether "
				     "it is the same message",
			   idb);
		goto out;
	}
	if (found) {
		r = seterr(st, SEMQ_DUPLICATE, "%s: already received", idb);
		goto out;
	}
	/* The predecessor with the same key must have been recorded, and be
	 * the message this one follows (its digest, when both are known). */
	if (m->prev_seq > 0) {
		struct msgid pid = m->id;
		uint64_t have = 0;

		pid.seq = m->prev_seq;
		r = in_get(st, &pid, &found, NULL, &have);
		if (r)
			goto out;
		if (!found && m->prev_seq > w) {
			res = -1;
			r = seterr(st, SEMQ_AGAIN,
				   "%s: predecessor seq %" PRIu64
				   " not received yet",
				   idb, m->prev_seq);
			goto out;
		}
		if (found && have && m->prev_digest && have != m->prev_digest) {
			res = RES_CONFLICT;
			r = seterr(st, SEMQ_DECLINED,
				   "%s: its predecessor seq %" PRIu64
				   " was received as another message",
				   idb, m->prev_seq);
			goto out;
		}
	}
	if (!m->tombstone && key) {
		r = redo_key_has(st, Q_REDO_KEY_BUSY, &m->id, key, &busy);
		if (r)
			goto out;
	}

	if (m->tombstone)
		res = RES_CANCELLED;
	else if (m->deliver_at > now)
		res = RES_SCHEDULED;
	else if (busy)
		res = RES_REDO;
	else
		res = RES_PROCESSED;
	r = in_insert(st, m, via, confirm_need, now, res, idb);
	if (r) {
		if (r == SEMQ_DUPLICATE)
			res = RES_DUPLICATE;
		goto out;
	}
	if (!known) {
		r = stream_create(st, m->id.origin, m->id.dest, m->id.life,
				  now);
		if (r)
			goto out;
	}

	switch (res) {
	case RES_CANCELLED: r = SEMQ_OK; goto out;
	case RES_SCHEDULED:
		/* Due at deliver_at; behind an unfinished entry of its key it
		 * waits first (released no earlier than deliver_at). */
		r = redo_insert(st, m, busy ? RS_WAITING : RS_PENDING, 0, 0,
				m->deliver_at, NULL, now, idb);
		goto out;
	case RES_REDO:
		r = redo_insert(st, m, RS_WAITING, 0, 0, m->deliver_at, NULL,
				now, idb);
		goto out;
	default: break;
	}

	r = apply_sp(st, m, 0, apply, ctx, perr, sizeof perr, &v, idb);
	if (r)
		goto out;
	if (v == SEMQ_PLUGIN_OK)
		goto out;
	res = RES_REDO;
	r = in_set_result(st, &m->id, RES_REDO, idb);
	if (r)
		goto out;
	if (v == SEMQ_PLUGIN_RETRY && !semq_redo_gives_up(1, st->max_tries)) {
		r = redo_insert(st, m, RS_PENDING, 1, 1, now + level_ms(st, 0),
				perr, now, idb);
	} else {
		res = RES_DEAD; /* recorded as REDO, its entry dead */
		r = redo_insert(st, m, RS_DEAD, 1, 0, now, perr, now, idb);
	}
	if (!r) {
		store__redo_log(st, &m->id,
				res == RES_DEAD ? RS_DEAD : RS_PENDING, 1,
				now + level_ms(st, 0), perr, now);
		seterr(st, SEMQ_OK, "%s: %s", idb, perr);
	}
out:
	r = tx_close(st, own, r);
	if (r < 0)
		res = -1;
	if (result_out)
		*result_out = res;
	/* On an error, and on a plugin failure (why it went to redo). */
	if (r < 0 || r == SEMQ_DECLINED ||
	    (r == SEMQ_OK && v != SEMQ_PLUGIN_OK))
		copy_err(st, err, errsz);
	return r;
}
