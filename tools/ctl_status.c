/* SPDX-License-Identifier: MIT */
/*
 * `semqctl status`: counts per table, status and stream, the inbound
 * watermarks, custody and what was dead at the destinations.
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

/* ---- status -------------------------------------------------------------- */

/* The tables in the order status shows them. */
static const char *const status_tables[] = {"tb_0031", "tb_0030", "tb_0033"};

static struct held_copy *held_add(struct status_data *d, const char *a,
				  const char *b, int relay)
{
	struct held_copy *h;

	h = grow(d->held, d->n_held, &d->cap_held, sizeof *d->held);
	if (!h) {
		d->failed = 1;
		return NULL;
	}
	d->held = h;
	h = &d->held[d->n_held++];
	memset(h, 0, sizeof *h);
	snprintf(h->a, sizeof h->a, "%s", a);
	snprintf(h->b, sizeof h->b, "%s", b);
	h->relay = relay;
	return h;
}

static int status_custody_cb(void *ctx, const char *origin, const char *dest,
			     int64_t messages, int64_t bytes, int64_t oldest)
{
	struct held_copy *h = held_add(ctx, origin, dest, 1);

	if (!h)
		return 1;
	h->messages = messages;
	h->bytes = bytes;
	h->at = oldest;
	return 0;
}

static int status_waiting_cb(void *ctx, const char *dest, const char *relay,
			     int64_t n, int64_t since)
{
	struct held_copy *h = held_add(ctx, dest, relay, 0);

	if (!h)
		return 1;
	h->messages = n;
	h->at = since;
	return 0;
}

/* store_outbound_dead_at's rows. */
static int status_dead_cb(void *ctx, const char *dest, const char *relay,
			  int64_t n, int64_t since)
{
	struct status_data *d = ctx;
	struct held_copy *h;

	(void)relay;
	h = grow(d->dead, d->n_dead, &d->cap_dead, sizeof *d->dead);
	if (!h) {
		d->failed = 1;
		return 1;
	}
	d->dead = h;
	h = &d->dead[d->n_dead++];
	memset(h, 0, sizeof *h);
	snprintf(h->a, sizeof h->a, "%s", dest);
	h->messages = n;
	h->at = since;
	return 0;
}

void status_free(struct status_data *d)
{
	size_t i;

	for (i = 0; i < d->n_rows; i++) {
		free(d->rows[i].table);
		free(d->rows[i].origin);
		free(d->rows[i].dest);
	}
	for (i = 0; i < d->n_streams; i++) {
		free(d->streams[i].origin);
		free(d->streams[i].dest);
	}
	for (i = 0; i < d->n_outs; i++) {
		free(d->outs[i].dest);
		free(d->outs[i].note);
	}
	free(d->rows);
	free(d->dead);
	free(d->streams);
	free(d->outs);
	free(d->held);
}

static int status_stat_cb(void *ctx, const struct stat_row *r)
{
	struct status_data *d = ctx;
	struct stat_copy *s;

	s = grow(d->rows, d->n_rows, &d->cap_rows, sizeof *d->rows);
	if (!s)
		goto nomem;
	d->rows = s;
	s = &d->rows[d->n_rows];
	memset(s, 0, sizeof *s);
	s->table = strdup(r->table ? r->table : "?");
	s->origin = dup_or_null(r->origin);
	s->dest = dup_or_null(r->dest);
	s->status = r->status;
	s->count = r->count;
	s->oldest = r->oldest;
	d->n_rows++;
	if (!s->table || (r->origin && !s->origin) || (r->dest && !s->dest))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

int status_stream_cb(void *ctx, const char *origin, const char *dest,
		     uint64_t life, uint64_t confirmed_through)
{
	struct status_data *d = ctx;
	struct stream_copy *s;

	s = grow(d->streams, d->n_streams, &d->cap_streams, sizeof *d->streams);
	if (!s)
		goto nomem;
	d->streams = s;
	s = &d->streams[d->n_streams++];
	s->origin = dup_or_null(origin);
	s->dest = dup_or_null(dest);
	s->life = life;
	s->confirmed_through = confirmed_through;
	if ((origin && !s->origin) || (dest && !s->dest))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

static int status_out_cb(void *ctx, const struct out_stream *os)
{
	struct status_data *d = ctx;
	struct out_copy *o;

	o = grow(d->outs, d->n_outs, &d->cap_outs, sizeof *d->outs);
	if (!o) {
		d->failed = 1;
		return 1;
	}
	d->outs = o;
	o = &d->outs[d->n_outs++];
	o->dest = dup_or_null(os->dest);
	o->note = dup_or_null(os->note);
	o->last_seq = os->last_seq;
	o->resyncs = os->resyncs;
	o->resync_at = os->resync_at;
	if (!o->dest || (os->note && !o->note)) {
		d->failed = 1;
		return 1;
	}
	return 0;
}

static int table_rank(const char *table)
{
	size_t i;

	for (i = 0; i < sizeof status_tables / sizeof status_tables[0]; i++)
		if (!strcmp(table, status_tables[i]))
			return (int)i;
	return (int)i;
}

/* Table order of SPEC §4, then stream, then status. */
static int stat_cmp(const void *pa, const void *pb)
{
	const struct stat_copy *a = pa, *b = pb;
	int d = table_rank(a->table) - table_rank(b->table);

	if (!d)
		d = strcmp(a->table, b->table);
	if (!d)
		d = strcmp_null(a->origin, b->origin);
	if (!d)
		d = strcmp_null(a->dest, b->dest);
	if (!d)
		d = (a->status > b->status) - (a->status < b->status);
	return d;
}

static int width(int w, const char *s)
{
	int n = (int)strlen(s ? s : "-");

	return n > w ? n : w;
}

/* What relays hold of this node's messages, and what this relay holds,
 * with its quotas. */
static void status_print_custody(const struct ctl *c,
				 const struct status_data *d, int64_t now)
{
	const struct config *cf = c->cfg;
	int64_t m = 0, b = 0;
	char tbuf[48];
	int any = 0;
	size_t i;

	for (i = 0; i < d->n_held; i++) {
		const struct held_copy *h = &d->held[i];
		if (h->relay)
			continue;
		if (!any++)
			printf("\nheld by relays (in custody, outside the "
			       "window)\n%-20s  %-20s  %10s  %s\n",
			       "DEST", "RELAY", "MESSAGES", "SINCE");
		printf("%-20s  %-20s  %10lld  %s\n", h->a, h->b,
		       (long long)h->messages,
		       fmt_oldest(h->at, now, tbuf, sizeof tbuf));
	}
	any = 0;
	for (i = 0; i < d->n_held; i++) {
		const struct held_copy *h = &d->held[i];
		if (!h->relay)
			continue;
		if (!any++)
			printf("\ncustody (this relay holds)\n%-20s  %-20s  "
			       "%10s  %12s  %s\n",
			       "ORIGIN", "DEST", "MESSAGES", "BYTES", "OLDEST");
		printf("%-20s  %-20s  %10lld  %12lld  %s\n", h->a, h->b,
		       (long long)h->messages, (long long)h->bytes,
		       fmt_oldest(h->at, now, tbuf, sizeof tbuf));
		m += h->messages;
		b += h->bytes;
	}
	if (cf->relay && cf->store_and_forward)
		printf("%scustody quota: %lld of %u messages, %lld of %zu "
		       "bytes; per origin %u messages, %zu bytes\n",
		       any ? "" : "\n", (long long)m, cf->quota_messages,
		       (long long)b, cf->quota_bytes,
		       cf->quota_messages_per_origin,
		       cf->quota_bytes_per_origin);
}

static void status_print_text(const struct ctl *c, const struct status_data *d)
{
	int wt = 5, wo = 6, wd = 4, ws = 6, wc = 5;
	char sbuf[48], tbuf[48];
	int64_t now = now_ms();
	size_t i;

	char lb[SEMQ_LIFE_STRLEN];

	printf("node %s  life %s  db %s  schema %d\n\n", c->cfg->id,
	       semq_life_str(store_life(c->st), lb, sizeof lb), c->db,
	       store_schema_version(c->st));
	/* A database that went back in time: what the peers had seen. */
	for (i = 0; i < d->n_outs; i++)
		if (d->outs[i].resyncs)
			printf("RESYNC %s->%s: %lld time(s), last %s: %s\n",
			       c->cfg->id, d->outs[i].dest,
			       (long long)d->outs[i].resyncs,
			       fmt_oldest(d->outs[i].resync_at, now, tbuf,
					  sizeof tbuf),
			       d->outs[i].note ? d->outs[i].note : "-");
	if (!d->n_rows)
		printf("no messages\n");
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		wt = width(wt, semq_table_title(r->table));
		wo = width(wo, r->origin);
		wd = width(wd, r->dest);
		ws = width(ws, semq_status_name(r->table, r->status));
		snprintf(sbuf, sizeof sbuf, "%lld", (long long)r->count);
		wc = width(wc, sbuf);
	}
	if (d->n_rows)
		printf("%-*s  %-*s  %-*s  %-*s  %*s  %s\n", wt, "TABLE", wo,
		       "ORIGIN", wd, "DEST", ws, "STATUS", wc, "COUNT",
		       "OLDEST");
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		printf("%-*s  %-*s  %-*s  %-*s  %*lld  %s\n", wt,
		       semq_table_title(r->table), wo,
		       r->origin ? r->origin : "-", wd, r->dest ? r->dest : "-",
		       ws, semq_status_name(r->table, r->status), wc,
		       (long long)r->count,
		       fmt_oldest(r->oldest, now, tbuf, sizeof tbuf));
	}
	status_print_custody(c, d, now);
	for (i = 0; i < d->n_dead; i++) {
		if (!i)
			printf("\nconfirmed, dead at the destination (its "
			       "answer when it confirmed; 'semqctl trace' asks "
			       "it now)\n%-20s  %10s  %s\n",
			       "DEST", "MESSAGES", "FIRST");
		printf("%-20s  %10lld  %s\n", d->dead[i].a,
		       (long long)d->dead[i].messages,
		       fmt_oldest(d->dead[i].at, now, tbuf, sizeof tbuf));
	}
	if (!d->n_streams)
		return;
	wo = 6;
	wd = 4;
	for (i = 0; i < d->n_streams; i++) {
		wo = width(wo, d->streams[i].origin);
		wd = width(wd, d->streams[i].dest);
	}
	printf("\ninbound streams\n%-*s  %-*s  %-16s  %s\n", wo, "ORIGIN", wd,
	       "DEST", "LIFE", "CONFIRMED_THROUGH");
	for (i = 0; i < d->n_streams; i++)
		printf("%-*s  %-*s  %-16s  %llu\n", wo,
		       d->streams[i].origin ? d->streams[i].origin : "-", wd,
		       d->streams[i].dest ? d->streams[i].dest : "-",
		       semq_life_str(d->streams[i].life, lb, sizeof lb),
		       (unsigned long long)d->streams[i].confirmed_through);
}

/* The --json document of status (new reference, NULL when out of memory). */
static json_t *status_json(const struct ctl *c, const struct status_data *d)
{
	json_t *doc = NULL, *queues = json_array(), *streams = json_array();
	json_t *outs = json_array(), *held = json_array();
	json_t *waiting = json_array(), *dead = json_array(), *e;
	char lb[SEMQ_LIFE_STRLEN];
	size_t i;

	if (!queues || !streams || !outs || !held || !waiting || !dead)
		goto out;
	for (i = 0; i < d->n_dead; i++) {
		e = json_pack("{s:s, s:I, s:I}", "dest", d->dead[i].a,
			      "messages", (json_int_t)d->dead[i].messages,
			      "first_at", (json_int_t)d->dead[i].at);
		if (!e || json_array_append_new(dead, e))
			goto out;
	}
	for (i = 0; i < d->n_rows; i++) {
		const struct stat_copy *r = &d->rows[i];
		e = json_pack("{s:s, s:s?, s:s?, s:i, s:s, s:I, s:o}", "table",
			      r->table, "origin", r->origin, "dest", r->dest,
			      "status", r->status, "status_name",
			      semq_status_name(r->table, r->status), "count",
			      (json_int_t)r->count, "oldest",
			      r->oldest > 0 ? json_integer(r->oldest)
					    : json_null());
		if (!e || json_array_append_new(queues, e))
			goto out;
	}
	for (i = 0; i < d->n_streams; i++) {
		e = json_pack("{s:s?, s:s?, s:s, s:I}", "origin",
			      d->streams[i].origin, "dest", d->streams[i].dest,
			      "life",
			      semq_life_str(d->streams[i].life, lb, sizeof lb),
			      "confirmed_through",
			      (json_int_t)d->streams[i].confirmed_through);
		if (!e || json_array_append_new(streams, e))
			goto out;
	}
	for (i = 0; i < d->n_outs; i++) {
		const struct out_copy *o = &d->outs[i];

		e = json_pack("{s:s, s:I, s:I, s:o, s:s?}", "dest", o->dest,
			      "last_seq", (json_int_t)o->last_seq, "resyncs",
			      (json_int_t)o->resyncs, "resync_at",
			      o->resync_at ? json_integer(o->resync_at)
					   : json_null(),
			      "resync_note", o->note);
		if (!e || json_array_append_new(outs, e))
			goto out;
	}
	for (i = 0; i < d->n_held; i++) {
		const struct held_copy *h = &d->held[i];

		e = h->relay
			    ? json_pack(
				      "{s:s, s:s, s:I, s:I, s:o}", "origin",
				      h->a, "dest", h->b, "messages",
				      (json_int_t)h->messages, "bytes",
				      (json_int_t)h->bytes, "oldest_created_at",
				      h->at ? json_integer(h->at) : json_null())
			    : json_pack("{s:s, s:s, s:I, s:o}", "dest", h->a,
					"relay", h->b, "messages",
					(json_int_t)h->messages, "since",
					h->at ? json_integer(h->at)
					      : json_null());
		if (!e || json_array_append_new(h->relay ? held : waiting, e))
			goto out;
	}
	/* "o" steals the arrays, even when packing fails. */
	doc = json_pack(
		"{s:s, s:s, s:s, s:i, s:o, s:o, s:o, s:o, s:{s:o, s:o, s:{s:I, "
		"s:I, s:I, s:I}}}",
		"node", c->cfg->id, "life",
		semq_life_str(store_life(c->st), lb, sizeof lb), "db", c->db,
		"schema_version", store_schema_version(c->st), "queues", queues,
		"streams_in", streams, "streams_out", outs, "dead_at_dest",
		dead, "custody", "held", held, "waiting", waiting, "quota",
		"messages", (json_int_t)c->cfg->quota_messages, "bytes",
		(json_int_t)c->cfg->quota_bytes, "messages_per_origin",
		(json_int_t)c->cfg->quota_messages_per_origin,
		"bytes_per_origin", (json_int_t)c->cfg->quota_bytes_per_origin);
	queues = streams = outs = held = waiting = dead = NULL;
out:
	json_decref(dead);
	json_decref(queues);
	json_decref(streams);
	json_decref(outs);
	json_decref(held);
	json_decref(waiting);
	return doc;
}

static const struct ctl_opt status_opts[] = {{NULL, NULL}};

static const char status_help[] =
	"Shows the node id and database, then one line per table, stream and\n"
	"status with its count and, for unconfirmed rows (tb_0031 unsent,\n"
	"sent, relay-acked; tb_0030 unacked), the age of the first of them,\n"
	"then every inbound stream with its confirmed_through watermark, and\n"
	"per destination this node's confirmed messages that were dead there\n"
	"when it confirmed them (its redo entry; a snapshot: 'semqctl trace'\n"
	"asks the destination now). The\n"
	"counts are kept by the database (semq_counts): status reads a few\n"
	"rows per stream, however long the queues. --json prints\n"
	"{\"node\", \"db\", \"schema_version\", \"dead_at_dest\": "
	"[{\"dest\",\n"
	"\"messages\", \"first_at\"}...], \"queues\": [...] (with\n"
	"\"oldest\" null where none is shown), \"streams_in\": [...]}.\n";

static int cmd_status(struct ctl *c)
{
	struct status_data d = {0};
	int r;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;

	/* O(streams) reads, as /metrics: never a count of the queues, which
	 * can be long on a node that could not send for days. */
	r = EXIT_FAIL;
	if (store_counts(c->st, status_stat_cb, &d) != SEMQ_OK ||
	    store_streams_in(c->st, status_stream_cb, &d) != SEMQ_OK ||
	    store_streams_out(c->st, status_out_cb, &d) != SEMQ_OK ||
	    store_counts_custody(c->st, status_custody_cb, &d) != SEMQ_OK ||
	    store_counts_waiting(c->st, status_waiting_cb, &d) != SEMQ_OK ||
	    store_outbound_dead_at(c->st, status_dead_cb, &d) != SEMQ_OK) {
		fail("%s: reading the queues: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (d.n_rows)
		qsort(d.rows, d.n_rows, sizeof *d.rows, stat_cmp);
	if (c->json) {
		r = print_json(status_json(c, &d));
		goto out;
	}
	status_print_text(c, &d);
	r = EXIT_OK;
out:
	status_free(&d);
	return r;
}

/* The commands of `semqctl status`, in the order --help lists them. */
const struct ctl_cmd ctl_status_commands[] = {
	{"status", cmd_status, status_opts, "",
	 "counts per table, status and stream; inbound watermarks",
	 status_help},
	{NULL, NULL, NULL, NULL, NULL, NULL}};
