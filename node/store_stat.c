/* SPDX-License-Identifier: MIT */
/*
 * Counts for `semqctl status` and the admin reports: rows per table, stream
 * and status.
 *
 * DESIGN
 *  - store_counts(), store_counts_waiting() and store_counts_custody() are
 *    what /metrics, /streams and `semqctl status` read, inside the store
 *    thread's write transaction (or semqctl's own): O(streams), never
 *    O(rows). The counts are semq_counts, which triggers on tb_0031, tb_0030
 *    and tb_0033 keep in the transaction of every change (schema 5); the age
 *    of the oldest unconfirmed message is the first row of an index per
 *    stream (Q_CNT_LIST says which). test_store's test_count_plans proves it
 *    (the plans, and work that does not grow with the rows).
 *  - store_stats() counts the rows themselves (GROUP BY over the three
 *    tables): for tests and checks, never on a path that runs while the node
 *    serves.
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
	if (i == Q_STAT_OUT)
		db_bind_text(s, 1, st->node_id);
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

/* ---- counts without scans -------------------------------------------------- */

/*
 * PostgreSQL: the other connections' shards of semq_counts that nobody holds
 * now go into this connection's (db/postgresql/0005_counts.sql), so that
 * the counts keep about one row per writer. A write: in the open batch, or a
 * transaction of its own. SQLite has one writer and no shards.
 */
static int counts_fold(struct store *st)
{
	int own = 0, r;

	if (!st->pg)
		return SEMQ_OK;
	r = tx_open(st, &own);
	if (r == SEMQ_OK)
		r = q_exec(st, Q_CNT_FOLD, "folding semq_counts");
	return tx_close(st, own, r);
}

/* The application's rows still to number, per destination (migration
 * 0007: the counts take a row in when it is numbered). */
struct new_count {
	char dest[SEMQ_ID_MAX + 1];
	int64_t count, oldest;
	int used;
};

static int new_counts(struct store *st, struct new_count **v, size_t *n)
{
	struct db_stmt *s = q_get(st, Q_CNT_NEW);
	size_t cap = 0;
	int rc;

	*v = NULL;
	*n = 0;
	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = db_step(s)) == DB_ROW) {
		if (*n == cap) {
			struct new_count *w;

			cap = cap ? 2 * cap : 8;
			w = realloc(*v, cap * sizeof *w);
			if (!w) {
				q_put(st, Q_CNT_NEW, s);
				return seterr(st, SEMQ_ERR_NOMEM, "%s",
					      "counts: out of memory");
			}
			*v = w;
		}
		col_text((*v)[*n].dest, sizeof(*v)[*n].dest, s, 0);
		(*v)[*n].count = db_col_int64(s, 1);
		(*v)[*n].oldest = db_col_null(s, 2) ? 0 : db_col_int64(s, 2);
		(*v)[*n].used = 0;
		(*n)++;
	}
	q_put(st, Q_CNT_NEW, s);
	return rc < 0 ? dberr(st, "counting the rows to number") : SEMQ_OK;
}

/* Adds dest's unnumbered rows to sr, this node's unsent line of dest. */
static void add_new(struct new_count *v, size_t n, struct stat_row *sr)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!v[i].used && !strcmp(v[i].dest, sr->dest)) {
			v[i].used = 1;
			sr->count += v[i].count;
			if (v[i].oldest &&
			    (!sr->oldest || v[i].oldest < sr->oldest))
				sr->oldest = v[i].oldest;
			return;
		}
}

/*
 * One line per (table, origin, dest, status) of semq_counts; the rows the
 * application inserted and the node has not numbered yet count as this
 * node's unsent rows of their destination (they are: tb_0031_check refuses
 * another origin), so that `semqctl status` shows them while the daemon is
 * stopped too.
 */
int store_counts(struct store *st, store_stat_cb cb, void *ctx)
{
	struct new_count *nv = NULL;
	struct db_stmt *s;
	size_t nn = 0, i;
	int rc = DB_DONE, r, stopped = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "counts: callback is missing");
	r = counts_fold(st);
	if (r == SEMQ_OK)
		r = new_counts(st, &nv, &nn);
	if (r != SEMQ_OK)
		goto out;
	s = q_get(st, Q_CNT_LIST);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	while (!stopped && (rc = db_step(s)) == DB_ROW) {
		char table[16], origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];
		struct stat_row sr;

		col_text(table, sizeof table, s, 0);
		col_text(origin, sizeof origin, s, 1);
		col_text(dest, sizeof dest, s, 2);
		sr.table = table;
		sr.origin = origin;
		sr.dest = dest;
		sr.status = col_int(s, 3);
		sr.count = db_col_int64(s, 4);
		sr.oldest = db_col_null(s, 5) ? 0 : db_col_int64(s, 5);
		if (!strcmp(table, "tb_0031") && sr.status == SS_UNSEND &&
		    !strcmp(origin, st->node_id))
			add_new(nv, nn, &sr);
		stopped = cb(ctx, &sr);
	}
	if (rc < 0)
		r = dberr(st, "reading semq_counts");
	q_put(st, Q_CNT_LIST, s);
	for (i = 0; i < nn && r == SEMQ_OK && !stopped; i++) {
		struct stat_row sr = {.table = "tb_0031",
				      .origin = st->node_id,
				      .dest = nv[i].dest,
				      .status = SS_UNSEND};

		if (nv[i].used)
			continue;
		sr.count = nv[i].count;
		sr.oldest = nv[i].oldest;
		stopped = cb(ctx, &sr);
	}
out:
	free(nv);
	return r;
}

int store_counts_waiting(struct store *st, store_waiting_cb cb, void *ctx)
{
	return store__waiting_rows(st, Q_CNT_WAITING, "reading semq_counts", cb,
				   ctx);
}

int store_counts_custody(struct store *st, store_custody_cb cb, void *ctx)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "counts: callback is missing");
	s = q_get(st, Q_CNT_CUSTODY);
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
	q_put(st, Q_CNT_CUSTODY, s);
	return r;
}
