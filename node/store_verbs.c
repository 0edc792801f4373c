/* SPDX-License-Identifier: MIT */
/*
 * The operator's verbs (store.h, "the operator's verbs"): retry,
 * retry-all, discard and cancel, once, for semqctl, the admin HTTP and
 * the bulk verbs. Each reads the entry or row, applies the verb's rule
 * (store_redo_verb_applies), changes it through the row-level functions
 * (store_redo_retry, store__redo_discard, store_cancel) and says what it
 * did: the entry after, the entries it released. A refusal is worded here
 * and nowhere else.
 *
 * DESIGN
 *  - One transaction: the check, the change and the report read the same
 *    rows (the caller's open batch in semqd, one of its own in semqctl).
 *  - What a discard released comes from the release itself (its id), not
 *    from reading the key's waiting entries before and after; the count
 *    still waiting is one count(*) on the key.
 */
#include "store_int.h"

#include <stdarg.h>

void store_verb_clear(struct store_verb *v)
{
	if (!v)
		return;
	free(v->old_reason);
	free(v->released);
	memset(v, 0, sizeof *v);
}

static int refuse(struct store_verb *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A refusal: v->why, SEMQ_DECLINED. */
static int refuse(struct store_verb *v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v->why, sizeof v->why, fmt, ap);
	va_end(ap);
	return SEMQ_DECLINED;
}

/* Reads entry `id` into v (its message, key and status); the caller
 * msg_clear()s m. SEMQ_ERR_NOT_FOUND with v->why when there is none. */
static int load_entry(struct store *st, int64_t id, struct msg *m,
		      struct store_verb *v, int keep_reason)
{
	struct redo_row row;
	int r;

	memset(m, 0, sizeof *m);
	r = store_redo_get(st, id, m, &row);
	if (r == SEMQ_ERR_NOT_FOUND) {
		snprintf(v->why, sizeof v->why, "no redo entry %" PRId64, id);
		return r;
	}
	if (r)
		return r;
	v->id = id;
	v->msg = m->id;
	v->has_key = m->has_key;
	snprintf(v->key, sizeof v->key, "%s", m->has_key ? m->key : "");
	v->status = row.status;
	free(v->old_reason);
	v->old_reason = NULL;
	if (keep_reason && row.discard_reason) {
		v->old_reason = strdup(row.discard_reason);
		if (!v->old_reason)
			return seterr(st, SEMQ_ERR_NOMEM, "%s", "redo verb");
	}
	return SEMQ_OK;
}

/* Refuses `verb` on the entry in v as it is, in the one wording. */
static int refuse_entry(struct store_verb *v, enum store_redo_verb verb)
{
	char idb[MSGID_STRLEN];

	msgid_str(&v->msg, idb, sizeof idb);
	if (verb == STORE_REDO_DISCARD && v->status == RS_DONE)
		return refuse(v,
			      "redo entry %" PRId64 " (%s) is done: it took "
			      "effect; %s",
			      v->id, idb, store_redo_verb_rule(verb));
	if (verb == STORE_REDO_DISCARD && v->status == RS_DISCARDED)
		return refuse(v,
			      "redo entry %" PRId64 " (%s) is already "
			      "discarded (reason: %s)",
			      v->id, idb,
			      v->old_reason ? v->old_reason : "none recorded");
	return refuse(v, "redo entry %" PRId64 " (%s) is %s; %s", v->id, idb,
		      semq_status_name("tb_0033", v->status),
		      store_redo_verb_rule(verb));
}

/* The status of a retried entry: pending, due now; an entry of this node's
 * own message is done (the message is sent again instead). */
static int retried_status(const struct store *st, const struct msgid *id)
{
	return strcmp(id->origin, st->node_id) ? RS_PENDING : RS_DONE;
}

/* The entry `id` after a change, into r. */
static int read_after(struct store *st, int64_t id, struct store_released *r)
{
	struct msg m;
	struct redo_row row;
	int e;

	e = store_redo_get(st, id, &m, &row);
	if (e)
		return e;
	r->id = id;
	r->msg = m.id;
	r->status = row.status;
	r->next_attempt_at = row.next_attempt_at;
	msg_clear(&m);
	return SEMQ_OK;
}

int store_verb_retry(struct store *st, int64_t id, int64_t now,
		     struct store_verb *v)
{
	struct msg m;
	int r, own = 0;

	memset(&m, 0, sizeof m);
	memset(v, 0, sizeof *v);
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		return r;
	r = load_entry(st, id, &m, v, 0);
	if (r)
		goto out;
	if (!store_redo_verb_applies(STORE_REDO_RETRY, v->status)) {
		r = refuse_entry(v, STORE_REDO_RETRY);
		goto out;
	}
	r = store_redo_retry(st, id, now);
	if (r == SEMQ_OK)
		v->status = retried_status(st, &v->msg);
	else if (r == SEMQ_DECLINED) /* changed meanwhile (another instance) */
		r = refuse_entry(v, STORE_REDO_RETRY);
out:
	msg_clear(&m);
	return tx_close(st, own, r);
}

struct retried {
	struct store_verb *v;
	int64_t now;
	int failed;
};

/* store_redo_bulk's each: an entry it retried, as it is now. */
static int retried_cb(void *ctx, const struct msg *m,
		      const struct redo_row *row)
{
	struct retried *x = ctx;
	struct store_verb *v = x->v;
	struct store_released *nv;

	nv = realloc(v->released, (v->n_released + 1) * sizeof *nv);
	if (!nv) {
		x->failed = 1;
		return 1;
	}
	v->released = nv;
	nv[v->n_released].id = row->id;
	nv[v->n_released].msg = m->id;
	nv[v->n_released].status = RS_PENDING;
	nv[v->n_released].next_attempt_at = x->now;
	v->n_released++;
	return 0;
}

int store_verb_retry_all(struct store *st, int64_t now, struct store_verb *v)
{
	struct retried x = {v, now, 0};
	struct store_filter f = {0};
	unsigned n = 0;
	size_t i;
	int r, own = 0;

	memset(v, 0, sizeof *v);
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		return r;
	f.status = RS_DEAD;
	r = store_redo_bulk(st, STORE_REDO_RETRY, &f, NULL, now, 0, UINT_MAX,
			    retried_cb, NULL, &x, &n);
	if (x.failed)
		r = seterr(st, SEMQ_ERR_NOMEM, "%s", "retry-all: the list");
	for (i = 0; !r && i < v->n_released; i++)
		v->released[i].status = retried_status(st, &v->released[i].msg);
	if (r)
		store_verb_clear(v);
	return tx_close(st, own, r);
}

int store_verb_discard(struct store *st, int64_t id, const char *reason,
		       int64_t now, struct store_verb *v)
{
	int64_t released = 0;
	struct msg m;
	int r, own = 0;

	memset(&m, 0, sizeof m);
	memset(v, 0, sizeof *v);
	if (!st)
		return SEMQ_ERR_INVALID;
	if (!reason || !reason[0] || strlen(reason) > STORE_REASON_MAX)
		return seterr(st, SEMQ_ERR_INVALID,
			      "redo entry %" PRId64
			      ": a discard needs a reason "
			      "of 1..%d bytes",
			      id, STORE_REASON_MAX);
	r = tx_open(st, &own);
	if (r)
		return r;
	r = load_entry(st, id, &m, v, 1);
	if (r)
		goto out;
	if (!store_redo_verb_applies(STORE_REDO_DISCARD, v->status)) {
		r = refuse_entry(v, STORE_REDO_DISCARD);
		goto out;
	}
	r = store__redo_discard(st, id, reason, now, &released);
	if (r == SEMQ_DECLINED) { /* changed meanwhile (another instance) */
		msg_clear(&m);
		r = load_entry(st, id, &m, v, 1);
		if (!r)
			r = refuse_entry(v, STORE_REDO_DISCARD);
		goto out;
	}
	if (r)
		goto out;
	v->status = RS_DISCARDED;
	if (released) {
		v->released = calloc(1, sizeof *v->released);
		if (!v->released) {
			r = seterr(st, SEMQ_ERR_NOMEM, "%s", "redo discard");
			goto out;
		}
		v->n_released = 1;
		r = read_after(st, released, v->released);
		if (r)
			goto out;
	}
	if (key_of(&m))
		r = store__redo_key_waiting(st, &m.id, m.key,
					    &v->still_waiting);
out:
	msg_clear(&m);
	return tx_close(st, own, r);
}

int store_verb_cancel(struct store *st, const struct msgid *id, int64_t now,
		      struct store_verb *v)
{
	char idb[MSGID_STRLEN];
	struct out_row row;
	struct msg m;
	int r, own = 0;

	memset(&m, 0, sizeof m);
	memset(v, 0, sizeof *v);
	if (!st || !id)
		return SEMQ_ERR_INVALID;
	msgid_str(id, idb, sizeof idb);
	v->msg = *id;
	r = tx_open(st, &own);
	if (r)
		return r;
	/* Read it first: a copy held for another origin is not ours to
	 * cancel, and a cancelled one needs no second cancel. */
	r = store_outbound_get(st, id, &m, &row);
	if (r == SEMQ_ERR_NOT_FOUND) {
		snprintf(v->why, sizeof v->why, "no outbound message %s", idb);
		goto out;
	}
	if (r)
		goto out;
	v->msg = m.id;
	v->has_key = m.has_key;
	snprintf(v->key, sizeof v->key, "%s", m.has_key ? m.key : "");
	v->status = row.status;
	if (strcmp(m.id.origin, st->node_id)) {
		r = refuse(v,
			   "%s is a copy this node holds for origin %s; only "
			   "the origin can cancel it",
			   idb, m.id.origin);
		goto out;
	}
	v->already = row.status == SS_CANCELLED;
	r = store_cancel(st, id, now);
	if (r == SEMQ_DECLINED) {
		/* Confirmed meanwhile, or before: read the verdict. */
		msg_clear(&m);
		if (store_outbound_get(st, id, &m, &row) != SEMQ_OK)
			row.result = -1;
		v->status = SS_ACK2;
		v->result = row.result;
		v->already = 0;
		r = refuse(v,
			   "%s is already confirmed (result %s); it cannot be "
			   "cancelled",
			   idb, semq_result_name(row.result));
		goto out;
	}
	if (r == SEMQ_ERR_NOT_FOUND)
		snprintf(v->why, sizeof v->why, "no outbound message %s", idb);
	if (!r)
		v->status = SS_CANCELLED;
out:
	msg_clear(&m);
	return tx_close(st, own, r);
}
