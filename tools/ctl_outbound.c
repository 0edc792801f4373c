/* SPDX-License-Identifier: MIT */
/*
 * `semqctl outbound list|show|cancel|renumber`: the node's outbound
 * queue tb_0031.
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

/* The message an outbound command names. */
struct target {
	struct msgid id; /* origin "" until target_resolve() for a bare SEQ */
	int bare;        /* given as SEQ --dest D: origin is this node */
	char text[MSGID_STRLEN];
};

/* Copies the node id s[0..n) into out (SEMQ_ID_MAX + 1 bytes) if valid. */
static int take_id(const char *s, size_t n, char *out)
{
	if (n == 0 || n > SEMQ_ID_MAX)
		return SEMQ_ERR_INVALID;
	memcpy(out, s, n);
	out[n] = '\0';
	return semq_id_valid(out) ? SEMQ_OK : SEMQ_ERR_INVALID;
}

/* Checks the message id argument (and --dest) of show and cancel. */
static int parse_target(struct ctl *c, struct target *t)
{
	const char *dest = opt(c, "--dest"), *a, *s1, *s2;
	uint64_t seq;

	memset(t, 0, sizeof *t);
	if (c->n_pos == 0)
		return usage_err(c, "a message id ORIGIN/DEST/SEQ (or SEQ "
				    "--dest D) is required");
	if (c->n_pos > 1)
		return usage_err(c, "unexpected argument '%s'", c->pos[1]);
	a = c->pos[0];
	if (dest && !semq_id_valid(dest))
		return usage_err(c,
				 "--dest '%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 dest);
	s1 = strchr(a, '/');
	s2 = s1 ? strchr(s1 + 1, '/') : NULL;
	if (!s1) {
		if (parse_uint(a, INT64_MAX, &seq) || seq == 0)
			return usage_err(c,
					 "'%s' is not a message id "
					 "ORIGIN/DEST/SEQ nor a SEQ 1..%lld",
					 a, (long long)INT64_MAX);
		if (!dest)
			return usage_err(c,
					 "'%s' is a bare SEQ: give --dest D "
					 "too, or the full id ORIGIN/DEST/SEQ",
					 a);
		t->bare = 1;
		snprintf(t->id.dest, sizeof t->id.dest, "%s", dest);
		t->id.seq = seq;
		return EXIT_OK;
	}
	if (dest)
		return usage_err(c,
				 "--dest D goes with a bare SEQ; '%s' names "
				 "its destination already",
				 a);
	if (!s2 || strchr(s2 + 1, '/'))
		return usage_err(c, "'%s' is not a message id ORIGIN/DEST/SEQ",
				 a);
	if (take_id(a, (size_t)(s1 - a), t->id.origin))
		return usage_err(c,
				 "'%s': origin '%.*s' is not a node id (1-64 "
				 "of A-Za-z0-9._-)",
				 a, (int)(s1 - a), a);
	if (take_id(s1 + 1, (size_t)(s2 - s1 - 1), t->id.dest))
		return usage_err(c,
				 "'%s': destination '%.*s' is not a node id "
				 "(1-64 of A-Za-z0-9._-)",
				 a, (int)(s2 - s1 - 1), s1 + 1);
	if (parse_uint(s2 + 1, INT64_MAX, &seq) || seq == 0)
		return usage_err(c, "'%s': seq '%s' is not a number 1..%lld", a,
				 s2 + 1, (long long)INT64_MAX);
	t->id.seq = seq;
	msgid_str(&t->id, t->text, sizeof t->text);
	return EXIT_OK;
}

/* Loads the configuration, completes a bare SEQ with this node's id, and
 * opens the database. */
static int target_open(struct ctl *c, struct target *t, int number)
{
	int r = ctl_load_config(c), more = 1;
	unsigned n = 0;

	if (r)
		return r;
	if (t->bare)
		snprintf(t->id.origin, sizeof t->id.origin, "%s", c->cfg->id);
	msgid_str(&t->id, t->text, sizeof t->text);
	r = ctl_open_store(c);
	if (r)
		return r;
	/* A command that changes a message numbers the application's new rows
	 * first, as the daemon's next batch would (it may be stopped): their
	 * seqs are the ones the daemon would give them (migration 0007). */
	while (number && more)
		if (store_number_new(c->st, now_ms(), 4096, 1, &n, &more) !=
		    SEMQ_OK) {
			fail("%s: %s", c->db, store_errmsg(c->st));
			return EXIT_FAIL;
		}
	/* The life: this database's for this node's own rows; for a relay's
	 * copy, the one of its stream that began here last. */
	if (store_current_life(c->st, t->id.origin, t->id.dest, &t->id.life) !=
	    SEMQ_OK) {
		fail("%s: %s", c->db, store_errmsg(c->st));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* ---- outbound list ---- */

/* One listed row: m without its payload (payload_len kept), row with its
 * last_error owned. */
struct list_item {
	struct msg m;
	struct out_row row;
};

struct list_data {
	struct list_item *v; /* owned; list_free */
	size_t n, cap;
	const char *dest; /* only this destination; NULL = all */
	size_t limit;
	int failed; /* out of memory in the callback */
};

static void list_free(struct list_data *d)
{
	size_t i;

	for (i = 0; i < d->n; i++)
		free((char *)d->v[i].row.last_error);
	free(d->v);
}

static int list_cb(void *ctx, const struct msg *m, const struct out_row *row)
{
	struct list_data *d = ctx;
	struct list_item *it;

	if (d->dest && strcmp(m->id.dest, d->dest))
		return 0;
	it = grow(d->v, d->n, &d->cap, sizeof *d->v);
	if (!it)
		goto nomem;
	d->v = it;
	it = &d->v[d->n];
	it->m = *m;
	it->m.payload = NULL; /* borrowed from the store: not kept */
	it->row = *row;
	it->row.last_error = dup_or_null(row->last_error);
	d->n++;
	if (row->last_error && !it->row.last_error)
		goto nomem;
	return d->n >= d->limit;
nomem:
	d->failed = 1;
	return 1;
}

/* The columns of the listing; LAST_ERROR last, since it is not padded. */
enum {
	LC_ID,
	LC_TYPE,
	LC_KEY,
	LC_STATUS,
	LC_RESULT,
	LC_ATTEMPTS,
	LC_AGE,
	LC_ERROR,
	LC_N
};

/* The text of column `col` of `it` (NULL: the heading), in buf or static. */
static const char *list_col(const struct list_item *it, int col, int64_t now,
			    char *buf, size_t sz)
{
	static const char *const head[LC_N] = {
		"ID",     "TYPE",     "KEY", "STATUS",
		"RESULT", "ATTEMPTS", "AGE", "LAST_ERROR"};

	if (!it)
		return head[col];
	switch (col) {
	case LC_ID: return msgid_str(&it->m.id, buf, sz);
	case LC_TYPE:
		snprintf(buf, sz, "%lu", (unsigned long)it->m.type);
		break;
	case LC_KEY: return cell(it->m.has_key ? it->m.key : NULL, 0, buf, sz);
	case LC_STATUS: return semq_status_name("tb_0031", it->row.status);
	case LC_RESULT:
		if (it->row.result == RES_DEAD) {
			snprintf(buf, sz, "dead at %s", it->m.id.dest);
			break;
		}
		return result_name(it->row.result);
	case LC_ATTEMPTS: snprintf(buf, sz, "%d", it->row.attempts); break;
	case LC_AGE: return fmt_age(it->m.created_at, now, buf, sz);
	default: return cell(it->row.last_error, ERROR_COLS, buf, sz);
	}
	return buf;
}

static const char *list_cell(const void *ctx, size_t i, int col, int64_t now,
			     char *buf, size_t sz)
{
	const struct list_data *d = ctx;

	return list_col(i == TABLE_HEAD ? NULL : &d->v[i], col, now, buf, sz);
}

static void list_print_text(const struct list_data *d)
{
	if (!d->n) {
		printf("no outbound messages\n");
		return;
	}
	print_table(d, d->n, LC_N, list_cell);
}

static const struct ctl_opt outbound_list_opts[] = {
	{"--status", "S"},   {"--dest", "D"},  {"--key", "K"},
	{"--since", "WHEN"}, {"--limit", "N"}, {NULL, NULL}};

static const char outbound_list_help[] =
	"Lists rows of the outbound queue tb_0031, newest first: ID\n"
	"(origin/dest/seq), TYPE, KEY, STATUS, RESULT (the destination's\n"
	"verdict), ATTEMPTS, AGE and LAST_ERROR (shortened).\n"
	"\n"
	"  --status S   only rows in status S: unsent (0), sent (4),\n"
	"               relay-acked (6), held (8: for the operator, see\n"
	"               outbound renumber), confirmed (100), cancelled (-2)\n"
	"  --dest D     only messages to node D\n"
	"  --key K      only messages with key K (where is bill K?)\n"
	"  --since WHEN only rows created since WHEN: a duration back\n"
	"               (90s, 15m, 2h, 3d) or 2026-11-26T03:00:00Z\n"
	"  --limit N    at most N rows, 1..100000 (default 100)\n"
	"\n"
	"RESULT \"dead at D\": D answered that its redo entry for the\n"
	"message is dead; a snapshot from the confirmation (a later retry\n"
	"at D does not come back here): 'semqctl trace' asks D now.\n"
	"\n"
	"--json prints an array of objects with every column: id, origin,\n"
	"dest, seq, rowid, type, key, prev_seq, deliver_at, created_at,\n"
	"status, status_name, result, result_name, attempts,\n"
	"next_attempt_at, sent_at, acked_at, last_error, payload_len,\n"
	"custodian (the relay holding it in custody, status relay-acked)\n"
	"(times in unix ms; result, key, last_error and custodian null\n"
	"when none).\n";

static int cmd_outbound_list(struct ctl *c)
{
	struct list_data d = {0};
	struct store_filter f = {0};
	struct semq_where w;
	const char *status = opt(c, "--status"), *limit = opt(c, "--limit");
	json_t *arr = NULL, *e;
	uint64_t v = LIST_LIMIT_DEFAULT;
	int r, want = -100;
	char names[128], nums[64];
	size_t i;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	if (status && parse_status("tb_0031", status, &want))
		return usage_err(
			c, "--status '%s' is not %s or %s", status,
			semq_status_list("tb_0031", 0, names, sizeof names),
			semq_status_list("tb_0031", 1, nums, sizeof nums));
	r = parse_filter(c, &f, &w);
	if (r)
		return r;
	if (limit && (parse_uint(limit, LIST_LIMIT_MAX, &v) || v == 0))
		return usage_err(c, "--limit '%s' is not a number 1..%d", limit,
				 LIST_LIMIT_MAX);
	d.limit = (size_t)v;
	f.status = want;
	f.limit = (unsigned)v;
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;

	r = EXIT_FAIL;
	if (store_outbound_select(c->st, &f, list_cb, &d) != SEMQ_OK) {
		fail("%s: reading tb_0031: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	if (d.failed) {
		fail("out of memory");
		goto out;
	}
	if (c->json) {
		arr = json_array();
		for (i = 0; arr && i < d.n; i++) {
			e = out_json(&d.v[i].m, &d.v[i].row);
			if (!e || json_array_append_new(arr, e)) {
				json_decref(arr);
				arr = NULL;
			}
		}
		r = print_json(arr); /* reports NULL as out of memory */
		goto out;
	}
	list_print_text(&d);
	r = EXIT_OK;
out:
	list_free(&d);
	return r;
}

/* ---- outbound show ---- */

static void show_print_text(const struct msg *m, const struct out_row *row)
{
	char buf[CELL_MAX];

	printf("%-16s %s\n", "id", msgid_str(&m->id, buf, sizeof buf));
	printf("%-16s %lld\n", "rowid", (long long)row->rowid);
	printf("%-16s %lu\n", "type", (unsigned long)m->type);
	printf("%-16s %s\n", "key",
	       cell(m->has_key ? m->key : NULL, 0, buf, sizeof buf));
	printf("%-16s %llu\n", "prev_seq", (unsigned long long)m->prev_seq);
	printf("%-16s %s\n", "deliver_at",
	       fmt_time(m->deliver_at, buf, sizeof buf));
	printf("%-16s %s\n", "created_at",
	       fmt_time(m->created_at, buf, sizeof buf));
	printf("%-16s %d %s\n", "status", row->status,
	       semq_status_name("tb_0031", row->status));
	if (row->result < 0)
		printf("%-16s -\n", "result");
	else if (row->result == RES_DEAD)
		printf("%-16s %d dead at %s (its redo entry there was dead "
		       "when it confirmed; a later retry there does not come "
		       "back here: 'semqctl trace' asks %s now)\n",
		       "result", row->result, m->id.dest, m->id.dest);
	else
		printf("%-16s %d %s\n", "result", row->result,
		       result_name(row->result));
	printf("%-16s %d\n", "attempts", row->attempts);
	printf("%-16s %s\n", "next_attempt_at",
	       fmt_time(row->next_attempt_at, buf, sizeof buf));
	printf("%-16s %s\n", "sent_at",
	       fmt_time(row->sent_at, buf, sizeof buf));
	printf("%-16s %s\n", "acked_at",
	       fmt_time(row->acked_at, buf, sizeof buf));
	show_long_text("last_error", row->last_error);
	show_payload(m);
}

/* show --json: out_json() plus the payload in base64 and, when it is
 * UTF-8, as text (new reference, NULL when out of memory). */
static json_t *show_json(const struct msg *m, const struct out_row *row)
{
	json_t *o = out_json(m, row);
	int failed = !o;

	if (o)
		payload_json(o, m, &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static const struct ctl_opt outbound_id_opts[] = {{"--dest", "D"},
						  {NULL, NULL}};

static const char outbound_show_help[] =
	"Shows one message of tb_0031: every column, then the payload as\n"
	"text when it is printable UTF-8, else as a hex dump; at most 4 KiB\n"
	"of it, then how many more bytes there are.\n"
	"\n"
	"  ORIGIN/DEST/SEQ  the message id, e.g. R1/S1/7\n"
	"  SEQ --dest D     a message of this node to D, e.g. 7 --dest S1\n"
	"\n"
	"--json prints the object of 'outbound list --json' plus \"payload\"\n"
	"(all of it, base64) and \"payload_text\" when it is UTF-8.\n"
	"A message that is not there is exit 1.\n";

static int cmd_outbound_show(struct ctl *c)
{
	struct target t;
	struct msg m;
	struct out_row row;
	int r, e;

	memset(&m, 0, sizeof m);
	r = parse_target(c, &t);
	if (r)
		goto out;
	r = target_open(c, &t, 0);
	if (r)
		goto out;
	e = store_outbound_get(c->st, &t.id, &m, &row);
	if (e == SEMQ_ERR_NOT_FOUND) {
		r = fail("no outbound message %s in %s", t.text, c->db);
		goto out;
	}
	if (e != SEMQ_OK) {
		r = fail("%s: %s", t.text, store_errmsg(c->st));
		goto out;
	}
	if (c->json) {
		r = print_json(show_json(&m, &row));
		goto out;
	}
	show_print_text(&m, &row);
	r = EXIT_OK;
out:
	msg_clear(&m);
	return r;
}

/* ---- outbound cancel ---- */

/* cancel --json: {"id", "cancelled", "status", ...}. */
static int cancel_json(const struct target *t, int cancelled, int status,
		       int already, int woke)
{
	return print_json(json_pack("{s:s, s:b, s:i, s:b, s:b}", "id", t->text,
				    "cancelled", cancelled, "status", status,
				    "already_cancelled", already, "woke_daemon",
				    woke));
}

static const char outbound_cancel_help[] =
	"Cancels a message of this node that its destination has not\n"
	"confirmed (status unsent, sent or relay-acked -> -2 cancelled) and\n"
	"wakes the daemon, which sends a tombstone for it. The destination\n"
	"records the tombstone without effect (result 4 cancelled), or, if\n"
	"the message took effect first, answers that verdict and the row\n"
	"becomes confirmed with it. Cancelling a cancelled message is a\n"
	"no-op (exit 0).\n"
	"\n"
	"  ORIGIN/DEST/SEQ  the message id, e.g. R1/S1/7\n"
	"  SEQ --dest D     a message of this node to D, e.g. 7 --dest S1\n"
	"\n"
	"Exit 1 when the message is already confirmed, not there, or a copy\n"
	"held for another origin. --json prints {\"id\", \"cancelled\",\n"
	"\"status\", \"already_cancelled\", \"woke_daemon\"} (also when the\n"
	"cancel is refused, with \"cancelled\": false). A held message\n"
	"(status 8: its destination cannot tell whether it has it) has no\n"
	"tombstone to send: cancelling it ends it at once, cancelled.\n";

static int cmd_outbound_cancel(struct ctl *c)
{
	struct store_verb v;
	struct target t;
	int r, e, woke;

	memset(&v, 0, sizeof v);
	r = parse_target(c, &t);
	if (r)
		goto out;
	r = target_open(c, &t, 1);
	if (r)
		goto out;
	e = store_verb_cancel(c->st, &t.id, now_ms(), &v);
	if (e == SEMQ_ERR_NOT_FOUND) {
		r = fail("%s in %s", v.why, c->db);
		goto out;
	}
	if (e == SEMQ_DECLINED) {
		if (c->json)
			(void)cancel_json(&t, 0, v.status, 0, 0);
		r = fail("%s", v.why);
		goto out;
	}
	if (e != SEMQ_OK) {
		r = fail("cancel %s: %s", t.text, store_errmsg(c->st));
		goto out;
	}
	/* A PostgreSQL database has no wake socket: its instances find new
	 * rows within poll_interval. */
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	if (c->json) {
		r = cancel_json(&t, 1, SS_CANCELLED, v.already, woke);
		goto out;
	}
	if (v.already)
		printf("%s was already cancelled\n", t.text);
	else
		printf("cancelled %s; a tombstone will be sent\n", t.text);
	if (!woke && !c->cfg->db_url)
		fprintf(stderr,
			"semqctl: no semqd is running on %s to wake; the "
			"tombstone is sent when it starts\n",
			c->db);
	r = EXIT_OK;
out:
	store_verb_clear(&v);
	return r;
}

static const char outbound_renumber_help[] =
	"Gives an unconfirmed message of this node the next seq of its\n"
	"stream, and so the unconfirmed later messages of its key, in\n"
	"order; they go back to unsent and the daemon is woken to send\n"
	"them. For a held message (status 8) whose destination could not\n"
	"tell whether it has it: renumber it when you know it is a new\n"
	"message (it did not take effect), cancel it when it took effect.\n"
	"The daemon renumbers by itself a message its destination refused\n"
	"because it holds another message under that seq\n"
	"(docs/PROTOCOL.md, \"Lives of a node\").\n"
	"\n"
	"  ORIGIN/DEST/SEQ  the message id, e.g. R1/S1/7\n"
	"  SEQ --dest D     a message of this node to D, e.g. 7 --dest S1\n"
	"\n"
	"Exit 1 when the message is confirmed, not there, or a copy held\n"
	"for another origin. --json prints {\"id\", \"new_seq\",\n"
	"\"renumbered\", \"woke_daemon\"}.\n";

static int cmd_outbound_renumber(struct ctl *c)
{
	struct target t;
	struct msgid *olds = NULL;
	uint64_t first = 0;
	unsigned n = 0;
	int r, e, woke;

	r = parse_target(c, &t);
	if (r)
		return r;
	r = target_open(c, &t, 1);
	if (r)
		return r;
	if (strcmp(t.id.origin, c->cfg->id) != 0)
		return fail("%s is a copy this node holds for origin %s; only "
			    "the origin can renumber it",
			    t.text, t.id.origin);
	e = store_renumber(c->st, &t.id, now_ms(),
			   "renumbered by the operator (semqctl outbound "
			   "renumber)",
			   &olds, &n, &first);
	free(olds);
	if (e == SEMQ_ERR_NOT_FOUND)
		return fail("no outbound message %s in %s", t.text, c->db);
	if (e == SEMQ_DECLINED)
		return fail("%s: %s; it cannot be renumbered", t.text,
			    store_errmsg(c->st));
	if (e != SEMQ_OK)
		return fail("renumber %s: %s", t.text, store_errmsg(c->st));
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	if (c->json)
		return print_json(json_pack("{s:s, s:I, s:i, s:b}", "id",
					    t.text, "new_seq",
					    (json_int_t)first, "renumbered",
					    (int)n, "woke_daemon", woke));
	printf("renumbered %s to %s/%s/%llu", t.text, t.id.origin, t.id.dest,
	       (unsigned long long)first);
	if (n > 1)
		printf(" and %u later message(s) of its key after it", n - 1);
	printf("; it will be sent again\n");
	return EXIT_OK;
}

/* The commands of `semqctl outbound`, in the order --help lists them. */
const struct ctl_cmd ctl_outbound_commands[] = {
	{"outbound list", cmd_outbound_list, outbound_list_opts,
	 "[--status unsent|sent|relay-acked|held|confirmed|cancelled|N] "
	 "[--dest D] [--key K] [--since WHEN] [--limit N]",
	 "list the outbound queue tb_0031, newest first", outbound_list_help},
	{"outbound show", cmd_outbound_show, outbound_id_opts,
	 "ORIGIN/DEST/SEQ | SEQ --dest D",
	 "one outbound message with every column and its payload",
	 outbound_show_help},
	{"outbound cancel", cmd_outbound_cancel, outbound_id_opts,
	 "ORIGIN/DEST/SEQ | SEQ --dest D",
	 "cancel an unconfirmed message of this node (sends a tombstone)",
	 outbound_cancel_help},
	{"outbound renumber", cmd_outbound_renumber, outbound_id_opts,
	 "ORIGIN/DEST/SEQ | SEQ --dest D",
	 "send an unconfirmed message of this node again under a new seq",
	 outbound_renumber_help},
	{NULL, NULL, NULL, NULL, NULL, NULL}};
