/* SPDX-License-Identifier: MIT */
/*
 * `semqctl lives` and `lives drop`: this database's life and the lives of
 * the origins it heard from.
 */
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "config.h"
#include "jsontext.h"
#include "store.h"
#include "types.h"

/* ---- lives ------------------------------------------------------------------ */

struct life_copy {
	char *origin, *dest;
	uint64_t life, mark;
	int relay, current;
	int64_t started_at, rows;
};

struct lives_data {
	struct life_copy *v;
	size_t n, cap;
	int failed;
};

static int lives_cb(void *ctx, const struct life_row *lr)
{
	struct lives_data *d = ctx;
	struct life_copy *x;

	x = grow(d->v, d->n, &d->cap, sizeof *d->v);
	if (!x) {
		d->failed = 1;
		return 1;
	}
	d->v = x;
	x = &d->v[d->n++];
	memset(x, 0, sizeof *x);
	x->origin = strdup(lr->origin);
	x->dest = strdup(lr->dest);
	x->life = lr->life;
	x->mark = lr->mark;
	x->relay = lr->relay;
	x->started_at = lr->started_at;
	x->rows = lr->rows;
	if (!x->origin || !x->dest) {
		d->failed = 1;
		return 1;
	}
	return 0;
}

static void lives_free(struct lives_data *d)
{
	size_t i;

	for (i = 0; i < d->n; i++) {
		free(d->v[i].origin);
		free(d->v[i].dest);
	}
	free(d->v);
}

static const struct ctl_opt lives_opts[] = {{NULL, NULL}};

static const char lives_help[] =
	"A node's database is one life of the node (docs/PROTOCOL.md,\n"
	"\"Lives of a node\"): a re-imaged node starts a new life, and its\n"
	"streams start afresh at every receiver and relay. Shows this\n"
	"database's LIFE (16 hex digits; 0000000000000001 is the legacy life\n"
	"of a database from SEMQ 0.1), then one line per origin, life and\n"
	"stream this node knows: ORIGIN, LIFE, CURRENT (yes: its newest life\n"
	"here), AS (receiver: the stream to this node; relay: one this node\n"
	"relayed), DEST, MARK (receiver: the watermark; relay: the highest\n"
	"seq relayed), ROWS (received rows kept) and SINCE (when the life\n"
	"began here).\n"
	"\n"
	"--json prints {\"node\", \"life\", \"lives\": [{\"origin\",\n"
	"\"life\", \"current\", \"as\", \"dest\", \"mark\", \"rows\",\n"
	"\"started_at\"}...]}.\n";

static int cmd_lives(struct ctl *c)
{
	struct lives_data d = {0};
	char lb[SEMQ_LIFE_STRLEN], tbuf[48];
	json_t *arr = NULL, *e;
	int64_t now = now_ms();
	size_t i;
	int r;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	r = ctl_load_config(c);
	if (!r)
		r = ctl_open_store(c);
	if (r)
		return r;
	r = EXIT_FAIL;
	if (store_lives(c->st, lives_cb, &d) != SEMQ_OK) {
		fail("%s: reading the lives: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	for (i = 0; i < d.n && !d.failed; i++) {
		uint64_t cur = 0;

		if (store_current_life(c->st, d.v[i].origin, d.v[i].dest,
				       &cur) != SEMQ_OK) {
			fail("%s: %s", c->db, store_errmsg(c->st));
			goto out;
		}
		d.v[i].current = cur == d.v[i].life;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (c->json) {
		arr = json_array();
		for (i = 0; arr && i < d.n; i++) {
			const struct life_copy *x = &d.v[i];
			char xl[SEMQ_LIFE_STRLEN];

			e = json_pack("{s:s, s:s, s:b, s:s, s:s, s:I, s:I, "
				      "s:I}",
				      "origin", x->origin, "life",
				      semq_life_str(x->life, xl, sizeof xl),
				      "current", x->current, "as",
				      x->relay ? "relay" : "receiver", "dest",
				      x->dest, "mark", (json_int_t)x->mark,
				      "rows", (json_int_t)x->rows, "started_at",
				      (json_int_t)x->started_at);
			if (!e || json_array_append_new(arr, e)) {
				json_decref(arr);
				arr = NULL;
			}
		}
		r = print_json(arr ? json_pack("{s:s, s:s, s:o}", "node",
					       c->cfg->id, "life",
					       semq_life_str(store_life(c->st),
							     lb, sizeof lb),
					       "lives", arr)
				   : NULL);
		goto out;
	}
	printf("node %s  life %s\n", c->cfg->id,
	       semq_life_str(store_life(c->st), lb, sizeof lb));
	if (!d.n) {
		printf("no lives of other nodes known here\n");
		r = EXIT_OK;
		goto out;
	}
	printf("\n%-16s  %-16s  %-7s  %-8s  %-16s  %10s  %8s  %s\n", "ORIGIN",
	       "LIFE", "CURRENT", "AS", "DEST", "MARK", "ROWS", "SINCE");
	for (i = 0; i < d.n; i++) {
		const struct life_copy *x = &d.v[i];

		printf("%-16s  %-16s  %-7s  %-8s  %-16s  %10llu  %8lld  %s\n",
		       x->origin, semq_life_str(x->life, lb, sizeof lb),
		       x->current ? "yes" : "no",
		       x->relay ? "relay" : "receiver", x->dest,
		       (unsigned long long)x->mark, (long long)x->rows,
		       x->started_at > 0 ? fmt_oldest(x->started_at, now, tbuf,
						      sizeof tbuf)
					 : "before 0.2");
	}
	r = EXIT_OK;
out:
	lives_free(&d);
	return r;
}

static const struct ctl_opt lives_drop_opts[] = {{"--force", NULL},
						 {NULL, NULL}};

static const char lives_drop_help[] =
	"Forgets a life of ORIGIN this node knows (LIFE as 'lives' shows\n"
	"it): its watermarks, its received rows and its relay record, one\n"
	"row each per stream. Refused while it has redo entries that are not\n"
	"finished or relay copies not delivered, and, without --force, when\n"
	"it is the current life of one of ORIGIN's streams here (a message\n"
	"of that life arriving later would start its stream afresh and\n"
	"could take effect again: drop a current life only when ORIGIN's\n"
	"database is gone for good).\n"
	"\n"
	"  --force  drop it even when it is a current life\n"
	"\n"
	"--json prints {\"origin\", \"life\", \"dropped\"}.\n";

static int cmd_lives_drop(struct ctl *c)
{
	const char *origin, *ls;
	uint64_t life = 0;
	int r, e, force = opt(c, "--force") != NULL;

	if (c->n_pos < 2)
		return usage_err(c, "ORIGIN and LIFE are required (see "
				    "'semqctl lives')");
	if (c->n_pos > 2)
		return usage_err(c, "unexpected argument '%s'", c->pos[2]);
	origin = c->pos[0];
	ls = c->pos[1];
	if (!semq_id_valid(origin))
		return usage_err(c,
				 "'%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 origin);
	if (semq_life_parse(ls, &life))
		return usage_err(c,
				 "'%s' is not a life (1-16 hex digits, not "
				 "0, as 'semqctl lives' shows it)",
				 ls);
	r = ctl_load_config(c);
	if (!r)
		r = ctl_open_store(c);
	if (r)
		return r;
	e = store_life_drop(c->st, origin, life, force);
	if (e == SEMQ_ERR_NOT_FOUND || e == SEMQ_DECLINED || e != SEMQ_OK) {
		if (c->json)
			(void)print_json(json_pack("{s:s, s:s, s:b}", "origin",
						   origin, "life", ls,
						   "dropped", 0));
		return fail("%s", store_errmsg(c->st));
	}
	if (c->json)
		return print_json(json_pack("{s:s, s:s, s:b}", "origin", origin,
					    "life", ls, "dropped", 1));
	printf("dropped life %s of %s\n", ls, origin);
	return EXIT_OK;
}

/* The commands of `semqctl lives`, in the order --help lists them. */
const struct ctl_cmd ctl_lives_commands[] = {
	{"lives", cmd_lives, lives_opts, "",
	 "this database's life and the lives of the origins it heard from",
	 lives_help},
	{"lives drop", cmd_lives_drop, lives_drop_opts, "ORIGIN LIFE [--force]",
	 "forget a retired life of an origin", lives_drop_help},
	{NULL, NULL, NULL, NULL, NULL, NULL}};
