/* SPDX-License-Identifier: MIT */
/*
 * Counts for `semqctl status` and the admin reports: rows per table, stream
 * and status.
 */
#include "store_int.h"

/* ---- status --------------------------------------------------------------- */

static int stats_of(struct store *st, enum q i, const char *table,
		    store_stat_cb cb, void *ctx, int *stopped)
{
	struct db_stmt *s = q_get(st, i);
	int rc, r = SEMQ_OK;

	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = db_step(s)) == DB_ROW) {
		char origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];
		struct stat_row sr;

		col_text(origin, sizeof origin, s, 0);
		col_text(dest, sizeof dest, s, 1);
		sr.table = table;
		sr.origin = origin;
		sr.dest = dest;
		sr.status = col_int(s, 2);
		sr.count = db_col_int64(s, 3);
		sr.oldest = db_col_int64(s, 4);
		if (cb(ctx, &sr)) {
			*stopped = 1;
			break;
		}
	}
	if (rc < 0)
		r = dberr(st, table);
	q_put(st, i, s);
	return r;
}

int store_stats(struct store *st, store_stat_cb cb, void *ctx)
{
	int r, stopped = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "stats: callback is missing");
	r = stats_of(st, Q_STAT_OUT, "tb_0031", cb, ctx, &stopped);
	if (!r && !stopped)
		r = stats_of(st, Q_STAT_IN, "tb_0030", cb, ctx, &stopped);
	if (!r && !stopped)
		r = stats_of(st, Q_STAT_REDO, "tb_0033", cb, ctx, &stopped);
	return r;
}
