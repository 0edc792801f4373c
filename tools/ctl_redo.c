/* SPDX-License-Identifier: MIT */
/*
 * `semqctl redo list|show|retry|discard`: the redo queue tb_0033.
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

/* ---- redo: list, show, retry, discard ------------------------------------ */

/* The NEXT column: when a pending entry runs; "-" for every other status,
 * which no attempt is scheduled for. */
static const char *redo_next(const struct redo_row *row, int64_t now, char *buf,
			     size_t sz)
{
	if (row->status != RS_PENDING)
		return "-";
	return fmt_until(row->next_attempt_at, now, buf, sz);
}

/* A redo entry ID argument: 1..INT64_MAX. */
static int parse_redo_id(struct ctl *c, int64_t *id)
{
	uint64_t v;

	if (c->n_pos == 0)
		return usage_err(c, "a redo entry ID is required");
	if (c->n_pos > 1)
		return usage_err(c, "unexpected argument '%s'", c->pos[1]);
	if (parse_uint(c->pos[0], INT64_MAX, &v) || v == 0)
		return usage_err(c, "'%s' is not a redo entry ID 1..%lld",
				 c->pos[0], (long long)INT64_MAX);
	*id = (int64_t)v;
	return EXIT_OK;
}

/* One listed entry: m without its payload (payload_len kept), row with its
 * strings owned. */
struct redo_item {
	struct msg m;
	struct redo_row row;
	char behind[2 * MSGID_STRLEN + 96]; /* a waiting entry: what for */
};

struct redo_data {
	struct redo_item *v; /* owned; redo_data_free */
	size_t n, cap;
	int failed; /* out of memory in the callback */
};

static void redo_data_free(struct redo_data *d)
{
	size_t i;

	for (i = 0; i < d->n; i++) {
		free((char *)d->v[i].row.last_error);
		free((char *)d->v[i].row.discard_reason);
	}
	free(d->v);
	memset(d, 0, sizeof *d);
}

static int redo_collect_cb(void *ctx, const struct msg *m,
			   const struct redo_row *row)
{
	struct redo_data *d = ctx;
	struct redo_item *it;

	it = grow(d->v, d->n, &d->cap, sizeof *d->v);
	if (!it)
		goto nomem;
	d->v = it;
	it = &d->v[d->n];
	it->m = *m;
	it->m.payload = NULL; /* borrowed from the store: not kept */
	it->row = *row;
	it->row.last_error = dup_or_null(row->last_error);
	it->row.discard_reason = dup_or_null(row->discard_reason);
	it->behind[0] = '\0';
	d->n++;
	if ((row->last_error && !it->row.last_error) ||
	    (row->discard_reason && !it->row.discard_reason))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

/* ---- redo list ---- */

/* The columns of the listing; LAST_ERROR last, since it is not padded. */
enum {
	RC_ID,
	RC_MESSAGE,
	RC_TYPE,
	RC_KEY,
	RC_STATUS,
	RC_TRIES,
	RC_LEVEL,
	RC_NEXT,
	RC_ERROR,
	RC_N
};

static const char *redo_cell(const void *ctx, size_t i, int col, int64_t now,
			     char *buf, size_t sz)
{
	static const char *const head[RC_N] = {
		"ID",    "MESSAGE", "TYPE", "KEY",       "STATUS",
		"TRIES", "LEVEL",   "NEXT", "LAST_ERROR"};
	const struct redo_data *d = ctx;
	const struct redo_item *it;

	if (i == TABLE_HEAD)
		return head[col];
	it = &d->v[i];
	switch (col) {
	case RC_ID: snprintf(buf, sz, "%lld", (long long)it->row.id); break;
	case RC_MESSAGE: return msgid_str(&it->m.id, buf, sz);
	case RC_TYPE:
		snprintf(buf, sz, "%lu", (unsigned long)it->m.type);
		break;
	case RC_KEY: return cell(it->m.has_key ? it->m.key : NULL, 0, buf, sz);
	case RC_STATUS: return semq_status_name("tb_0033", it->row.status);
	case RC_TRIES: snprintf(buf, sz, "%d", it->row.tries); break;
	case RC_LEVEL: snprintf(buf, sz, "%d", it->row.level); break;
	case RC_NEXT: return redo_next(&it->row, now, buf, sz);
	default:
		/* what a waiting entry waits for, whole; an error shortened */
		return it->behind[0]
			       ? cell(it->behind, CELL_MAX - 1, buf, sz)
			       : cell(it->row.last_error, ERROR_COLS, buf, sz);
	}
	return buf;
}

/* redo list --group-by error */
struct group_data {
	json_t *arr; /* --json: the groups */
	int64_t now;
	size_t n;
	int failed;
};

static int group_cb(void *ctx, const struct redo_group *g)
{
	struct group_data *d = ctx;
	char a[32], b[32];
	json_t *o, *dests;
	const char *p, *q;
	int failed = 0;

	d->n++;
	if (!d->arr) {
		if (d->n == 1)
			printf("%-7s %-7s %-7s %-16s %s\n", "COUNT", "OLDEST",
			       "NEWEST", "DESTS", "ERROR");
		printf("%-7lld %-7s %-7s %-16s %s\n", (long long)g->count,
		       fmt_age(g->oldest, d->now, a, sizeof a),
		       fmt_age(g->newest, d->now, b, sizeof b), g->dests,
		       g->error ? g->error : "-");
		return 0;
	}
	dests = json_array();
	for (p = g->dests; dests && *p; p = *q ? q + 1 : q) {
		q = p + strcspn(p, ",");
		if (json_array_append_new(dests,
					  json_stringn(p, (size_t)(q - p))))
			failed = 1;
	}
	o = json_object();
	failed |= !o || !dests;
	jset(o, "error", json_text(g->error), &failed);
	jset(o, "count", json_integer(g->count), &failed);
	jset(o, "oldest", json_integer(g->oldest), &failed);
	jset(o, "newest", json_integer(g->newest), &failed);
	jset(o, "dests", dests, &failed);
	if (failed || json_array_append_new(d->arr, o)) {
		d->failed = 1;
		return 1;
	}
	return 0;
}

static int redo_groups(struct ctl *c, const struct store_filter *f)
{
	struct group_data d = {NULL, now_ms(), 0, 0};

	if (c->json && !(d.arr = json_array()))
		return fail("out of memory");
	if (store_redo_groups(c->st, f, group_cb, &d) != SEMQ_OK) {
		json_decref(d.arr);
		return fail("%s: reading tb_0033: %s", c->db,
			    store_errmsg(c->st));
	}
	if (d.failed) {
		json_decref(d.arr);
		return fail("out of memory");
	}
	if (c->json)
		return print_json(json_pack("{s:o}", "groups", d.arr));
	if (!d.n)
		printf("no redo entries\n");
	return EXIT_OK;
}

static const struct ctl_opt redo_list_opts[] = {
	{"--status", "S"},   {"--dest", "D"},     {"--key", "K"},
	{"--since", "WHEN"}, {"--where", "EXPR"}, {"--group-by", "error"},
	{"--limit", "N"},    {"--offset", "N"},   {NULL, NULL}};

static const char redo_list_help[] =
	"Lists entries of the redo queue tb_0033 (failed messages waiting\n"
	"for a retry, delayed messages, entries held behind an earlier one\n"
	"of their key), oldest first: ID (the entry), MESSAGE\n"
	"(origin/dest/seq), TYPE, KEY, STATUS, TRIES (attempts made), LEVEL\n"
	"(the backoff level a next failure uses), NEXT (when a pending entry\n"
	"runs: \"in 25s\", or \"due\"; \"-\" for the others) and LAST_ERROR\n"
	"(shortened; 'redo show ID' prints it whole).\n"
	"\n"
	"  --status S   only entries in status S: pending (0), waiting (1),\n"
	"               dead (-1), done (2), discarded (-2)\n"
	"  --dest D     only messages to node D\n"
	"  --key K      only messages with key K\n"
	"  --since WHEN only entries created since WHEN: a duration back\n"
	"               (90s, 15m, 2h, 3d) or 2026-11-26T03:00:00Z\n"
	"  --where EXPR error~TEXT (last_error contains TEXT, any case)\n"
	"               or error=TEXT (last_error is TEXT)\n"
	"  --group-by error  one line per distinct last_error of the\n"
	"               entries selected: COUNT, OLDEST, NEWEST (ages of\n"
	"               the first and last entry), DESTS and ERROR, the\n"
	"               largest group first; --json prints {\"groups\":\n"
	"               [{\"error\", \"count\", \"oldest\", \"newest\",\n"
	"               \"dests\": [...]}...]} (times in unix ms)\n"
	"  --limit N    at most N entries (groups), 1..100000 (default 100)\n"
	"  --offset N   skip the first N entries (groups)\n"
	"\n"
	"--json prints an array of objects with every column: id, message,\n"
	"origin, dest, seq, type, key, prev_seq, deliver_at, msg_created_at,\n"
	"status, status_name, tries, level, next_attempt_at, created_at,\n"
	"updated_at, last_error, discard_reason, payload_len (times in unix\n"
	"ms; key, last_error and discard_reason null when none).\n";

static int cmd_redo_list(struct ctl *c)
{
	struct redo_data d = {0};
	const char *status = opt(c, "--status"), *limit = opt(c, "--limit");
	const char *offset = opt(c, "--offset"), *group = opt(c, "--group-by");
	struct store_filter f = {0};
	struct semq_where w;
	json_t *arr = NULL, *e;
	uint64_t v = LIST_LIMIT_DEFAULT, off = 0;
	int r, want = -100;
	char names[128], nums[64];
	size_t i;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	if (status && parse_status("tb_0033", status, &want))
		return usage_err(
			c, "--status '%s' is not %s or %s", status,
			semq_status_list("tb_0033", 0, names, sizeof names),
			semq_status_list("tb_0033", 1, nums, sizeof nums));
	if (limit && (parse_uint(limit, LIST_LIMIT_MAX, &v) || v == 0))
		return usage_err(c, "--limit '%s' is not a number 1..%d", limit,
				 LIST_LIMIT_MAX);
	if (offset && parse_uint(offset, UINT_MAX, &off))
		return usage_err(c, "--offset '%s' is not a number 0..%u",
				 offset, UINT_MAX);
	if (group && strcmp(group, "error"))
		return usage_err(c, "--group-by '%s': only 'error' is known",
				 group);
	r = parse_filter(c, &f, &w);
	if (r)
		return r;
	f.status = want;
	f.limit = (unsigned)v;
	f.offset = (unsigned)off;
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;
	if (group)
		return redo_groups(c, &f);

	r = EXIT_FAIL;
	if (store_redo_select(c->st, &f, redo_collect_cb, &d) != SEMQ_OK) {
		fail("%s: reading tb_0033: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (c->json) {
		arr = json_array();
		for (i = 0; arr && i < d.n; i++) {
			e = redo_json_at(c->st, &d.v[i].m, &d.v[i].row,
					 now_ms());
			if (!e || json_array_append_new(arr, e)) {
				json_decref(arr);
				arr = NULL;
			}
		}
		r = print_json(arr); /* reports NULL as out of memory */
		goto out;
	}
	for (i = 0; i < d.n; i++) {
		struct redo_head h;

		if (d.v[i].row.status == RS_WAITING &&
		    store_redo_head(c->st, &d.v[i].m, now_ms(), &h) == SEMQ_OK)
			redo_behind_text(&d.v[i].m, &h, d.v[i].behind,
					 sizeof d.v[i].behind);
	}
	if (d.n)
		print_table(&d, d.n, RC_N, redo_cell);
	else
		printf("no redo entries\n");
	r = EXIT_OK;
out:
	redo_data_free(&d);
	return r;
}

/* ---- redo show ---- */

/* "level N", and for an entry that may still fail, what a retryable failure
 * would do next under this node's [redo] levels and max_tries. */
static void show_level(const struct ctl *c, const struct redo_row *row)
{
	const struct config *cfg = c->cfg;
	size_t n = cfg->n_redo_levels;
	char buf[32];

	if ((row->status != RS_PENDING && row->status != RS_WAITING) || !n) {
		printf("%-16s %d\n", "level", row->level);
		return;
	}
	if (semq_redo_gives_up((unsigned)row->tries + 1, cfg->max_tries))
		printf("%-16s %d (a retryable failure would make it dead)\n",
		       "level", row->level);
	else
		printf("%-16s %d (a retryable failure would wait %s)\n",
		       "level", row->level,
		       cv_fmt_duration(semq_redo_delay(cfg->redo_levels_ms, n,
						       row->level),
				       buf, sizeof buf));
}

static void redo_show_text(const struct ctl *c, const struct msg *m,
			   const struct redo_row *row)
{
	char buf[CELL_MAX], rel[32], text[2 * MSGID_STRLEN + 96];
	int64_t now = now_ms();
	struct redo_head h;

	printf("%-16s %lld\n", "id", (long long)row->id);
	printf("%-16s %s\n", "message", msgid_str(&m->id, buf, sizeof buf));
	printf("%-16s %lu\n", "type", (unsigned long)m->type);
	printf("%-16s %s\n", "key",
	       cell(m->has_key ? m->key : NULL, 0, buf, sizeof buf));
	printf("%-16s %llu\n", "prev_seq", (unsigned long long)m->prev_seq);
	printf("%-16s %s\n", "deliver_at",
	       fmt_time(m->deliver_at, buf, sizeof buf));
	printf("%-16s %s\n", "msg_created_at",
	       fmt_time(m->created_at, buf, sizeof buf));
	printf("%-16s %d %s\n", "status", row->status,
	       semq_status_name("tb_0033", row->status));
	printf("%-16s %d (max_tries %u)\n", "tries", row->tries,
	       c->cfg->max_tries);
	show_level(c, row);
	if (row->status == RS_PENDING)
		printf("%-16s %s, %s\n", "next_attempt_at",
		       fmt_time(row->next_attempt_at, buf, sizeof buf),
		       fmt_until(row->next_attempt_at, now, rel, sizeof rel));
	else
		printf("%-16s %s, not scheduled: %s\n", "next_attempt_at",
		       fmt_time(row->next_attempt_at, buf, sizeof buf),
		       row->status == RS_WAITING
			       ? "waiting behind an earlier entry of its key"
			       : semq_status_name("tb_0033", row->status));
	if (row->status == RS_WAITING &&
	    store_redo_head(c->st, m, now, &h) == SEMQ_OK)
		printf("%-16s %s\n", "behind",
		       redo_behind_text(m, &h, text, sizeof text));
	printf("%-16s %s\n", "created_at",
	       fmt_time(row->created_at, buf, sizeof buf));
	printf("%-16s %s\n", "updated_at",
	       fmt_time(row->updated_at, buf, sizeof buf));
	show_long_text("last_error", row->last_error);
	show_long_text("discard_reason", row->discard_reason);
	show_payload(m);
}

/* Reads entry `id` (m's payload owned by the caller: msg_clear). EXIT_OK,
 * or EXIT_FAIL after reporting that it is not there or why it could not be
 * read. */
static int redo_read(struct ctl *c, int64_t id, struct msg *m,
		     struct redo_row *row)
{
	int e = store_redo_get(c->st, id, m, row);

	if (e == SEMQ_OK)
		return EXIT_OK;
	if (e == SEMQ_ERR_NOT_FOUND)
		return fail("no redo entry %lld in %s", (long long)id, c->db);
	return fail("redo %lld: %s", (long long)id, store_errmsg(c->st));
}

static const struct ctl_opt redo_show_opts[] = {{NULL, NULL}};

static const char redo_show_help[] =
	"Shows one entry of tb_0033: every column, the whole last_error and\n"
	"discard_reason, when it runs next (UTC and relative) and what a\n"
	"further failure would do, then the payload as text when it is\n"
	"printable UTF-8, else as a hex dump; at most 4 KiB of it, then how\n"
	"many more bytes there are.\n"
	"\n"
	"  ID   the entry's id, as 'redo list' shows it\n"
	"\n"
	"--json prints the object of 'redo list --json' plus \"payload\"\n"
	"(all of it, base64) and \"payload_text\" when it is UTF-8.\n"
	"An entry that is not there is exit 1.\n";

static int cmd_redo_show(struct ctl *c)
{
	struct msg m;
	struct redo_row row;
	json_t *o;
	int64_t id = 0;
	int r, failed = 0;

	memset(&m, 0, sizeof m);
	r = parse_redo_id(c, &id);
	if (r)
		goto out;
	r = ctl_load_config(c);
	if (r)
		goto out;
	r = ctl_open_store(c);
	if (r)
		goto out;
	r = redo_read(c, id, &m, &row);
	if (r)
		goto out;
	if (c->json) {
		o = redo_json_at(c->st, &m, &row, now_ms());
		if (o)
			payload_json(o, &m, &failed);
		if (failed) {
			json_decref(o);
			o = NULL;
		}
		r = print_json(o); /* reports NULL as out of memory */
		goto out;
	}
	redo_show_text(c, &m, &row);
	r = EXIT_OK;
out:
	msg_clear(&m);
	return r;
}

/* ---- redo retry ---- */

/* Tells the operator that no daemon heard the wake-up. */
static void note_not_woken(const struct ctl *c, const char *what)
{
	if (c->cfg->db_url) /* PostgreSQL: the instances poll for work */
		return;
	fprintf(stderr,
		"semqctl: no semqd is running on %s to wake; %s when it "
		"starts\n",
		c->db, what);
}

/* retry ID --json: {"id", "message", "retried", "status", ...}. */
static int retry_json(int64_t id, const char *msgid, int retried, int status,
		      int woke)
{
	return print_json(json_pack("{s:I, s:s, s:b, s:i, s:s, s:b}", "id",
				    (json_int_t)id, "message", msgid, "retried",
				    retried, "status", status, "status_name",
				    semq_status_name("tb_0033", status),
				    "woke_daemon", woke));
}

/* One dead entry -> pending now (store_verb_retry: the check and the
 * change in one transaction). */
static int redo_retry_one(struct ctl *c, int64_t id)
{
	struct store_verb v;
	char idb[MSGID_STRLEN];
	int r = EXIT_FAIL, e, woke;

	e = store_verb_retry(c->st, id, now_ms(), &v);
	msgid_str(&v.msg, idb, sizeof idb);
	if (e == SEMQ_ERR_NOT_FOUND) {
		r = fail("%s in %s", v.why, c->db);
		goto out;
	}
	if (e == SEMQ_DECLINED) {
		if (c->json)
			(void)retry_json(id, idb, 0, v.status, 0);
		r = fail("%s", v.why);
		goto out;
	}
	if (e != SEMQ_OK) {
		r = fail("retry redo %lld: %s", (long long)id,
			 store_errmsg(c->st));
		goto out;
	}
	/* A PostgreSQL database has no wake socket: its instances find new
	 * rows within poll_interval. */
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	operator_said(c, "retried redo entry %lld (%s)", (long long)id, idb);
	if (c->json) {
		r = retry_json(id, idb, 1, v.status, woke);
		goto out;
	}
	printf("%s (redo %lld) will be retried now\n", idb, (long long)id);
	if (!woke)
		note_not_woken(c, "it is retried");
	r = EXIT_OK;
out:
	store_verb_clear(&v);
	return r;
}

/* Every dead entry -> pending now; store_verb_retry_all lists exactly the
 * entries it retried. */
static int redo_retry_all(struct ctl *c)
{
	struct store_verb v;
	char idb[MSGID_STRLEN];
	json_t *arr = NULL, *e;
	size_t i, n;
	int r = EXIT_FAIL, woke = 0;

	if (store_verb_retry_all(c->st, now_ms(), &v) != SEMQ_OK) {
		fail("retry every dead redo entry: %s", store_errmsg(c->st));
		goto out;
	}
	n = v.n_released;
	if (n) {
		/* A PostgreSQL database has no wake socket: its instances
		 * find new rows within poll_interval. */
		woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
		operator_said(c, "retried %zu dead redo entr%s (--all-dead)", n,
			      n == 1 ? "y" : "ies");
	}
	if (c->json) {
		arr = json_array();
		for (i = 0; arr && i < n; i++) {
			e = json_pack(
				"{s:I, s:s}", "id",
				(json_int_t)v.released[i].id, "message",
				msgid_str(&v.released[i].msg, idb, sizeof idb));
			if (!e || json_array_append_new(arr, e)) {
				json_decref(arr);
				arr = NULL;
			}
		}
		/* "o" steals the array, even when packing fails. */
		r = print_json(arr ? json_pack("{s:o, s:I, s:b}", "retried",
					       arr, "count", (json_int_t)n,
					       "woke_daemon", woke)
				   : NULL);
		goto out;
	}
	if (!n) {
		printf("no dead redo entries; nothing to retry\n");
		r = EXIT_OK;
		goto out;
	}
	for (i = 0; i < n; i++)
		printf("%s (redo %lld) will be retried now\n",
		       msgid_str(&v.released[i].msg, idb, sizeof idb),
		       (long long)v.released[i].id);
	printf("%zu dead entr%s will be retried now\n", n,
	       n == 1 ? "y" : "ies");
	if (!woke)
		note_not_woken(c, "they are retried");
	r = EXIT_OK;
out:
	store_verb_clear(&v);
	return r;
}

/* ---- redo retry|discard --where ...: the bulk verbs ---- */

struct bulk_out {
	const char *verb; /* "retried", "discarded" */
	json_t *arr;      /* the entries, as they were */
	int failed;
};

static int bulk_each(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct bulk_out *b = ctx;
	char idb[MSGID_STRLEN];
	int failed = 0;
	json_t *o = json_object();

	failed = !o;
	jset(o, "id", json_integer(row->id), &failed);
	jset(o, "message", json_string(msgid_str(&m->id, idb, sizeof idb)),
	     &failed);
	jset(o, "key", m->has_key ? json_text(m->key) : json_null(), &failed);
	jset(o, "status_name",
	     json_string(semq_status_name("tb_0033", row->status)), &failed);
	jset(o, "last_error", json_text(row->last_error), &failed);
	if (failed || json_array_append_new(b->arr, o)) {
		b->failed = 1;
		return 1;
	}
	return 0;
}

static void bulk_progress(void *ctx, unsigned done, unsigned total)
{
	const struct bulk_out *b = ctx;

	fprintf(stderr, "%s %u/%u\n", b->verb, done, total);
}

static int redo_bulk(struct ctl *c, enum store_redo_verb verb,
		     const char *reason)
{
	const char *status = opt(c, "--status");
	int dry = opt(c, "--dry-run") != NULL, r, want = -100, woke = 0;
	struct bulk_out b = {verb == STORE_REDO_RETRY ? "retried" : "discarded",
			     NULL, 0};
	struct store_filter f = {0};
	struct semq_where w;
	unsigned n = 0;
	size_t i;

	if (c->n_pos)
		return usage_err(c,
				 "an ID ('%s') and --where are both given; "
				 "give one",
				 c->pos[0]);
	if (!opt(c, "--where"))
		return usage_err(c, "--where EXPR is required with --dest, "
				    "--key, --since, --status or --dry-run");
	r = parse_filter(c, &f, &w);
	if (r)
		return r;
	if (status && parse_status("tb_0033", status, &want))
		return usage_err(c, "--status '%s' is not a status of tb_0033",
				 status);
	if (status && !store_redo_verb_applies(verb, want))
		return usage_err(c, "--status '%s': %s", status,
				 store_redo_verb_rule(verb));
	f.status = want;
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;
	b.arr = json_array();
	if (!b.arr)
		return fail("out of memory");
	if (store_redo_bulk(c->st, verb, &f, reason, now_ms(), dry, 500,
			    bulk_each, dry ? NULL : bulk_progress, &b,
			    &n) != SEMQ_OK) {
		r = fail("redo %s --where %s: %s (%u done before)",
			 verb == STORE_REDO_RETRY ? "retry" : "discard",
			 opt(c, "--where"), store_errmsg(c->st), n);
		goto out;
	}
	if (b.failed) {
		r = fail("out of memory");
		goto out;
	}
	if (!dry && n) {
		woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
		/* The operator's record: the daemon's log is not semqctl's. */
		operator_said(
			c, "%s %u redo entr%s (--where %s%s%s%s%s%s%s)%s%s",
			b.verb, n, n == 1 ? "y" : "ies", opt(c, "--where"),
			f.dest ? " --dest " : "", f.dest ? f.dest : "",
			f.key ? " --key " : "", f.key ? f.key : "",
			opt(c, "--since") ? " --since " : "",
			opt(c, "--since") ? opt(c, "--since") : "",
			reason ? ": " : "", reason ? reason : "");
	}
	if (c->json) {
		r = print_json(json_pack(
			"{s:s, s:b, s:I, s:O, s:b}", "verb",
			verb == STORE_REDO_RETRY ? "retry" : "discard",
			"dry_run", dry, "count", (json_int_t)n, "entries",
			b.arr, "woke_daemon", woke));
		goto out;
	}
	for (i = 0; i < json_array_size(b.arr); i++) {
		json_t *o = json_array_get(b.arr, i);
		const char *k = json_string_value(json_object_get(o, "key"));
		const char *e =
			json_string_value(json_object_get(o, "last_error"));
		char buf[CELL_MAX];

		printf("%s%s (redo %lld, key %s): %s\n", dry ? "would be " : "",
		       b.verb,
		       (long long)json_integer_value(json_object_get(o, "id")),
		       k ? k : "-", cell(e, ERROR_COLS * 2, buf, sizeof buf));
	}
	printf("%s%u redo entr%s %s%s\n", dry ? "dry run: " : "", n,
	       n == 1 ? "y" : "ies", dry ? "would be " : "", b.verb);
	r = EXIT_OK;
out:
	json_decref(b.arr);
	return r;
}

/* Does the command have one of the bulk options? */
static int bulk_asked(const struct ctl *c)
{
	return opt(c, "--where") || opt(c, "--dest") || opt(c, "--key") ||
	       opt(c, "--since") || opt(c, "--status") || opt(c, "--dry-run");
}

static const struct ctl_opt redo_retry_opts[] = {
	{"--all-dead", NULL}, {"--where", "EXPR"}, {"--dest", "D"},
	{"--key", "K"},       {"--since", "WHEN"}, {"--status", "S"},
	{"--dry-run", NULL},  {NULL, NULL}};

#define BULK_JSON_HELP                                                         \
	"BULK --json prints {\"verb\", \"dry_run\", \"count\", \"entries\":\n" \
	"[{\"id\", \"message\", \"key\", \"status_name\", "                    \
	"\"last_error\"}...],\n"                                               \
	"\"woke_daemon\"}: the entries as they were before.\n"

static const char redo_retry_help[] =
	"Makes a dead entry pending again, due now, and wakes the semqd\n"
	"serving the database so it runs it at once. The backoff level\n"
	"starts over; tries are kept, so a retryable failure makes it dead\n"
	"again at once while tries >= max_tries.\n"
	"\n"
	"  ID           the dead entry to retry\n"
	"  --all-dead   every dead entry\n"
	"\n"
	"Bulk (BULK below): every dead entry that --where EXPR (error~TEXT:\n"
	"last_error contains TEXT, any case; error=TEXT: is TEXT) and the\n"
	"filters --dest D, --key K, --since WHEN (as 'redo list') select;\n"
	"--status may only say dead. --dry-run lists exactly those entries\n"
	"and changes nothing. The real run retries the entries it lists, in\n"
	"transactions of 500, with progress on stderr (retried 500/1950).\n"
	"\n" BULK_JSON_HELP
	"Exit 1 when the entry is not dead or not there. --json prints\n"
	"{\"id\", \"message\", \"retried\", \"status\", \"status_name\",\n"
	"\"woke_daemon\"} (also when it is refused, with \"retried\": "
	"false),\n"
	"or for --all-dead {\"retried\": [{\"id\", \"message\"}...],\n"
	"\"count\", \"woke_daemon\"}.\n";

static int cmd_redo_retry(struct ctl *c)
{
	int all = opt(c, "--all-dead") != NULL, r;
	int64_t id = 0;

	if (bulk_asked(c)) {
		if (all)
			return usage_err(c, "--all-dead and --where are both "
					    "given; give one");
		return redo_bulk(c, STORE_REDO_RETRY, NULL);
	}

	if (all && c->n_pos)
		return usage_err(c,
				 "--all-dead and an ID ('%s') are both given; "
				 "give one",
				 c->pos[0]);
	if (!all && !c->n_pos)
		return usage_err(c, "a redo entry ID (or --all-dead) is "
				    "required");
	if (!all) {
		r = parse_redo_id(c, &id);
		if (r)
			return r;
	}
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;
	return all ? redo_retry_all(c) : redo_retry_one(c, id);
}

/* ---- redo discard ---- */

/* discard --json when it was refused: {"id", "message", "discarded":
 * false, "status", ...}. */
static int discard_refused_json(int64_t id, const char *msgid, int status,
				const char *old_reason)
{
	return print_json(json_pack(
		"{s:I, s:s, s:b, s:i, s:s, s:s?}", "id", (json_int_t)id,
		"message", msgid, "discarded", 0, "status", status,
		"status_name", semq_status_name("tb_0033", status),
		"discard_reason", old_reason));
}

static json_t *discard_json(const char *reason, const struct store_verb *v,
			    int woke)
{
	json_t *arr = json_array(), *e;
	char idb[MSGID_STRLEN];
	size_t i;

	for (i = 0; arr && i < v->n_released; i++) {
		const struct store_released *it = &v->released[i];
		e = json_pack("{s:I, s:s, s:i, s:I}", "id", (json_int_t)it->id,
			      "message", msgid_str(&it->msg, idb, sizeof idb),
			      "status", it->status, "next_attempt_at",
			      (json_int_t)it->next_attempt_at);
		if (!e || json_array_append_new(arr, e)) {
			json_decref(arr);
			arr = NULL;
		}
	}
	if (!arr)
		return NULL;
	/* "o" steals the array, even when packing fails. */
	return json_pack("{s:I, s:s, s:b, s:i, s:s, s:o, s:I, s:b}", "id",
			 (json_int_t)v->id, "message",
			 msgid_str(&v->msg, idb, sizeof idb), "discarded", 1,
			 "status", RS_DISCARDED, "discard_reason", reason,
			 "released", arr, "still_waiting",
			 (json_int_t)v->still_waiting, "woke_daemon", woke);
}

static void discard_text(const struct ctl *c, const char *reason,
			 const struct store_verb *v, int woke)
{
	char buf[CELL_MAX], idb[MSGID_STRLEN], rel[32];
	char *rb = malloc(strlen(reason) + 16); /* cell() never grows it */
	int64_t now = now_ms();
	size_t i;

	printf("discarded %s (redo %lld): %s\n",
	       msgid_str(&v->msg, idb, sizeof idb), (long long)v->id,
	       rb ? cell(reason, 0, rb, strlen(reason) + 16) : reason);
	free(rb);
	for (i = 0; i < v->n_released; i++) {
		const struct store_released *it = &v->released[i];
		printf("released %s (redo %lld), the next entry of key %s: "
		       "pending, due %s\n",
		       msgid_str(&it->msg, idb, sizeof idb), (long long)it->id,
		       cell(v->key, 0, buf, sizeof buf),
		       it->next_attempt_at <= now
			       ? "now"
			       : fmt_until(it->next_attempt_at, now, rel,
					   sizeof rel));
	}
	if (v->has_key && v->still_waiting)
		printf("%lld more entr%s of key %s still wait%s in key order\n",
		       (long long)v->still_waiting,
		       v->still_waiting == 1 ? "y" : "ies",
		       cell(v->key, 0, buf, sizeof buf),
		       v->still_waiting == 1 ? "s" : "");
	else if (v->has_key && !v->n_released)
		printf("no entry of key %s was waiting behind it\n",
		       cell(v->key, 0, buf, sizeof buf));
	if (!woke && v->n_released)
		note_not_woken(c, "released entries run");
}

static const struct ctl_opt redo_discard_opts[] = {
	{"--reason", "TEXT"}, {"--where", "EXPR"}, {"--dest", "D"},
	{"--key", "K"},       {"--since", "WHEN"}, {"--status", "S"},
	{"--dry-run", NULL},  {NULL, NULL}};

static const char redo_discard_help[] =
	"Discards a pending, waiting or dead entry: it will never take\n"
	"effect, and the reason is kept with it. When it was the head of\n"
	"its key, the next waiting entry of the key is released (pending,\n"
	"due now or at its deliver_at), and the daemon is woken to run it.\n"
	"\n"
	"  ID             the entry to discard\n"
	"  --reason TEXT  why, for whoever looks later (required, 1..1000\n"
	"                 bytes)\n"
	"\n"
	"Bulk: every entry that --where EXPR and the filters --dest,\n"
	"--key, --since select, in status --status (dead unless it says\n"
	"pending or waiting), discarded one by one as above (each releases\n"
	"the next waiting entry of its key), in transactions of 500 with\n"
	"progress on stderr; --dry-run lists them and changes nothing.\n"
	"\n" BULK_JSON_HELP
	"Exit 1 when the entry is done or discarded already, or not there.\n"
	"--json prints {\"id\", \"message\", \"discarded\", \"status\",\n"
	"\"discard_reason\", \"released\": [{\"id\", \"message\", "
	"\"status\",\n"
	"\"next_attempt_at\"}...], \"still_waiting\", \"woke_daemon\"}\n"
	"(when refused: \"discarded\": false with the entry's status).\n";

static int cmd_redo_discard(struct ctl *c)
{
	const char *reason = opt(c, "--reason");
	struct store_verb v;
	char idb[MSGID_STRLEN];
	int64_t id = 0;
	int r, e, woke;

	memset(&v, 0, sizeof v);
	if (!bulk_asked(c)) {
		r = parse_redo_id(c, &id);
		if (r)
			return r;
	}
	if (!reason)
		return usage_err(c, "--reason TEXT is required: say why it is "
				    "discarded");
	if (!*reason)
		return usage_err(c, "--reason '' is empty: say why it is "
				    "discarded");
	if (strlen(reason) > STORE_REASON_MAX)
		return usage_err(c, "--reason is %zu bytes long, at most %d",
				 strlen(reason), STORE_REASON_MAX);
	if (bulk_asked(c))
		return redo_bulk(c, STORE_REDO_DISCARD, reason);
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;

	r = EXIT_FAIL;
	e = store_verb_discard(c->st, id, reason, now_ms(), &v);
	msgid_str(&v.msg, idb, sizeof idb);
	if (e == SEMQ_ERR_NOT_FOUND) {
		r = fail("%s in %s", v.why, c->db);
		goto out;
	}
	if (e == SEMQ_DECLINED) {
		if (c->json)
			(void)discard_refused_json(id, idb, v.status,
						   v.old_reason);
		r = fail("%s", v.why);
		goto out;
	}
	if (e != SEMQ_OK) {
		r = fail("discard redo %lld: %s", (long long)id,
			 store_errmsg(c->st));
		goto out;
	}
	/* A PostgreSQL database has no wake socket: its instances find new
	 * rows within poll_interval. */
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	operator_said(c, "discarded redo entry %lld (%s): %s", (long long)id,
		      idb, reason);
	if (c->json) {
		r = print_json(discard_json(reason, &v, woke));
		goto out;
	}
	discard_text(c, reason, &v, woke);
	r = EXIT_OK;
out:
	store_verb_clear(&v);
	return r;
}

/* The commands of `semqctl redo`, in the order --help lists them. */
const struct ctl_cmd ctl_redo_commands[] = {
	{"redo list", cmd_redo_list, redo_list_opts,
	 "[--status pending|waiting|dead|done|discarded|N] [--dest D] "
	 "[--key K] [--since WHEN] [--where EXPR] [--group-by error] "
	 "[--limit N] [--offset N]",
	 "list the redo queue tb_0033, oldest first", redo_list_help},
	{"redo show", cmd_redo_show, redo_show_opts, "ID",
	 "one redo entry with every column and its payload", redo_show_help},
	{"redo retry", cmd_redo_retry, redo_retry_opts,
	 "ID | --all-dead | --where EXPR [--dest D] [--key K] [--since WHEN] "
	 "[--dry-run]",
	 "run dead redo entries again now", redo_retry_help},
	{"redo discard", cmd_redo_discard, redo_discard_opts,
	 "ID --reason TEXT | --where EXPR --reason TEXT [--dest D] [--key K] "
	 "[--since WHEN] [--status dead|pending|waiting] [--dry-run]",
	 "give up on a redo entry, with a reason; releases its key",
	 redo_discard_help},
	{NULL, NULL, NULL, NULL, NULL, NULL}};
