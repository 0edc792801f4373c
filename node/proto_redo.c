/* SPDX-License-Identifier: MIT */
/*
 * Redo and delayed messages (see proto.h): the wheel that holds what
 * tb_0033 has due soon, and running due entries.
 */
#include "proto_int.h"

/* ---- redo and delayed messages ------------------------------------------ */

/*
 * tb_0033's next_attempt_at is the durable schedule. The wheel holds what is
 * due within HORIZON_MS (at most WHEEL_MAX entries), loaded by an indexed
 * scan when the horizon runs short or when this node changed the schedule
 * (a receipt went to redo, a redo ran, an operator woke us). A restart loses
 * nothing: the first scan rebuilds the wheel from the table.
 */
struct fill_ctx {
	struct proto *p;
	size_t n;
	int64_t last_at;
	int r;
};

static int fill_cb(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct fill_ctx *x = ctx;

	(void)m;
	x->r = wheel_add(x->p->wheel, (uint64_t)row->id, row->next_attempt_at);
	x->n++;
	x->last_at = row->next_attempt_at;
	return x->r != SEMQ_OK;
}

static int refill_wheel(struct proto *p, int64_t now)
{
	struct fill_ctx x = {p, 0, 0, SEMQ_OK};
	int r;

	if (!p->wheel) {
		p->wheel = wheel_new(WHEEL_SLOTS, WHEEL_TICK_MS, now);
		if (!p->wheel)
			return SEMQ_ERR_NOMEM;
		p->redo_dirty = 1;
	}
	if (!p->redo_dirty && now + HORIZON_MS / 2 < p->filled_until)
		return SEMQ_OK;
	r = store_redo_due(p->st, now + HORIZON_MS, WHEEL_MAX, fill_cb, &x);
	if (r == SEMQ_OK)
		r = x.r;
	if (r != SEMQ_OK)
		return r;
	/* Loaded everything within the horizon, or up to the last entry the
	 * cap let in: the next scan starts being needed from there. */
	p->filled_until = x.n >= WHEEL_MAX ? x.last_at : now + HORIZON_MS;
	p->redo_dirty = 0;
	return SEMQ_OK;
}

struct fired {
	uint64_t ids[REDO_LIMIT];
	size_t n;
	int more;
};

static void fire_cb(void *ctx, uint64_t id, int64_t at)
{
	struct fired *x = ctx;

	(void)at;
	if (x->n < REDO_LIMIT)
		x->ids[x->n++] = id;
	else
		x->more = 1; /* fired but not run now: the rescan brings it */
}

int run_due_redo(struct proto *p, int64_t now)
{
	struct fired x;
	size_t i;
	int r;

	r = refill_wheel(p, now);
	if (r != SEMQ_OK)
		return r;
	x.n = 0;
	x.more = 0;
	wheel_advance(p->wheel, now, fire_cb, &x);
	for (i = 0; i < x.n && r == SEMQ_OK; i++) {
		int status = 0;

		if (p->redo_out) {
			/* A store worker runs it (proto_set_redo_out). */
			char origin[SEMQ_ID_MAX + 1];

			r = store_redo_origin(p->st, (int64_t)x.ids[i], origin,
					      sizeof origin);
			if (r == SEMQ_OK)
				r = p->redo_out(p->redo_ctx, (int64_t)x.ids[i],
						origin);
			if (r == SEMQ_ERR_NOT_FOUND) /* gone meanwhile */
				r = SEMQ_OK;
			continue;
		}
		r = store_redo_run(p->st, (int64_t)x.ids[i], now,
				   plughost_apply, p->ph, &status);
		if (r == SEMQ_DECLINED) /* done, discarded or moved meanwhile */
			r = SEMQ_OK;
	}
	if (r == SEMQ_OK && (x.n || x.more)) {
		/* Next levels and released successors are in the table now
		 * (this transaction): load them so the worker's sleep and
		 * the next tick see them at once. */
		p->redo_dirty = 1;
		r = refill_wheel(p, now);
	}
	return r;
}
