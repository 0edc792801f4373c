/* SPDX-License-Identifier: MIT */
/*
 * What this node's tables say of one message, for `semqctl trace` (trace.c,
 * docs/OPERATIONS.md, "Where is document X?"): the node's own messages of a
 * key, and a received message's row in tb_0030 with its tb_0033 entry.
 *
 * DESIGN
 *  - Reads only, on the store thread inside its batch (or a transaction of
 *    semqctl's own); every read is by an index (idx_0031_key's origin,
 *    idx_0030_1, idx_0033_1) and bounded by its limit.
 */
#include "store_int.h"

int store_trace_own(struct store *st, const char *key, const char *dest,
		    int64_t since, unsigned limit, store_out_cb cb, void *ctx)
{
	struct db_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb || !key || !key[0])
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "trace_own: a key and a callback are required");
	if (dest && dest[0]) {
		r = check_node(st, "dest", dest, SEMQ_ID_MAX + 1);
		if (r)
			return r;
	}
	s = q_get(st, Q_TRACE_OWN);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, key);
	db_bind_text(s, 2, dest ? dest : "");
	db_bind_int64(s, 3, since);
	db_bind_text(s, 4, st->node_id);
	db_bind_int64(s, 5, limit);
	r = each_out(st, s, cb, ctx, NULL, NULL);
	q_put(st, Q_TRACE_OWN, s);
	return r;
}

int store_trace_in(struct store *st, const struct msgid *id,
		   struct trace_in *in, struct trace_redo *rd)
{
	struct db_stmt *s;
	char idb[MSGID_STRLEN];
	int r, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!in || !rd)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "trace_in: in and rd are required");
	memset(in, 0, sizeof *in);
	memset(rd, 0, sizeof *rd);
	r = check_msgid(st, id);
	if (r)
		return r;
	msgid_str(id, idb, sizeof idb);
	s = q_get(st, Q_TRACE_IN);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW) {
		in->found = 1;
		in->result = col_int(s, 0);
		in->ack_status = col_int(s, 1);
		in->received_at = db_col_int64(s, 2);
		col_text(in->via, sizeof in->via, s, 3);
	}
	q_put(st, Q_TRACE_IN, s);
	if (rc != DB_ROW && rc != DB_DONE)
		return dberr(st, idb);
	s = q_get(st, Q_TRACE_REDO);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW) {
		rd->id = db_col_int64(s, 0);
		rd->status = col_int(s, 1);
		rd->tries = col_int(s, 2);
		rd->next_attempt_at = db_col_int64(s, 3);
		col_text(rd->last_error, sizeof rd->last_error, s, 4);
	}
	q_put(st, Q_TRACE_REDO, s);
	if (rc != DB_ROW && rc != DB_DONE)
		return dberr(st, idb);
	return SEMQ_OK;
}
