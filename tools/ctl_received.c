/* SPDX-License-Identifier: MIT */
/*
 * `semqctl received list`: the received record tb_0030 and the inbound
 * watermarks.
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

/* ---- received list -------------------------------------------------------- */

/* One listed tb_0030 row with its strings owned. */
struct recv_item {
	struct msgid id;
	uint32_t type;
	char *key, *via; /* NULL when none */
	uint64_t prev_seq;
	int64_t received_at, rowid;
	int result, ack_status;
	unsigned need, got;
};

struct recv_data {
	struct recv_item *v; /* owned; recv_data_free */
	size_t n, cap;
	int failed; /* out of memory in the callback */
};

static void recv_data_free(struct recv_data *d)
{
	size_t i;

	for (i = 0; i < d->n; i++) {
		free(d->v[i].key);
		free(d->v[i].via);
	}
	free(d->v);
}

static int recv_collect_cb(void *ctx, const struct recv_row *r)
{
	struct recv_data *d = ctx;
	struct recv_item *it;

	it = grow(d->v, d->n, &d->cap, sizeof *d->v);
	if (!it)
		goto nomem;
	d->v = it;
	it = &d->v[d->n++];
	it->id = r->id;
	it->type = r->type;
	it->key = dup_or_null(r->key);
	it->via = dup_or_null(r->via);
	it->prev_seq = r->prev_seq;
	it->received_at = r->received_at;
	it->rowid = r->rowid;
	it->result = r->result;
	it->ack_status = r->ack_status;
	it->need = r->confirm_need;
	it->got = r->confirm_got;
	if ((r->key && !it->key) || (r->via && !it->via))
		goto nomem;
	return 0;
nomem:
	d->failed = 1;
	return 1;
}

/* The ack status's name, "acked"; for an unacked one the 810-Responses
 * missing: "unacked (awaits origin+relay)". */
static const char *ack_text(const struct recv_item *it, char *buf, size_t sz)
{
	unsigned miss = it->need & ~it->got;
	const char *name = semq_status_name("tb_0030", it->ack_status);

	if (it->ack_status == AS_OK ||
	    !(miss & (CONFIRM_ORIGIN | CONFIRM_RELAY)))
		return name;
	snprintf(buf, sz, "%s (awaits %s%s%s)", name,
		 miss & CONFIRM_ORIGIN ? "origin" : "",
		 (miss & CONFIRM_ORIGIN) && (miss & CONFIRM_RELAY) ? "+" : "",
		 miss & CONFIRM_RELAY ? "relay" : "");
	return buf;
}

enum {
	VC_MESSAGE,
	VC_TYPE,
	VC_KEY,
	VC_RECEIVED,
	VC_VIA,
	VC_RESULT,
	VC_ACK,
	VC_N
};

static const char *recv_cell(const void *ctx, size_t i, int col, int64_t now,
			     char *buf, size_t sz)
{
	static const char *const head[VC_N] = {
		"MESSAGE", "TYPE", "KEY", "RECEIVED", "VIA", "RESULT", "ACK"};
	const struct recv_data *d = ctx;
	const struct recv_item *it;

	if (i == TABLE_HEAD)
		return head[col];
	it = &d->v[i];
	switch (col) {
	case VC_MESSAGE: return msgid_str(&it->id, buf, sz);
	case VC_TYPE: snprintf(buf, sz, "%lu", (unsigned long)it->type); break;
	case VC_KEY: return cell(it->key, 0, buf, sz);
	case VC_RECEIVED: return fmt_age(it->received_at, now, buf, sz);
	case VC_VIA: return cell(it->via, 0, buf, sz);
	case VC_RESULT: return result_name(it->result);
	default: return ack_text(it, buf, sz);
	}
	return buf;
}

static json_t *recv_json(const struct recv_item *it)
{
	json_t *o = json_object();
	char idb[MSGID_STRLEN];
	int failed = !o;

	jset(o, "message", json_string(msgid_str(&it->id, idb, sizeof idb)),
	     &failed);
	jset(o, "origin", json_string(it->id.origin), &failed);
	jset(o, "dest", json_string(it->id.dest), &failed);
	jset(o, "seq", json_integer((json_int_t)it->id.seq), &failed);
	{
		char lb[SEMQ_LIFE_STRLEN];
		jset(o, "life",
		     json_string(semq_life_str(it->id.life, lb, sizeof lb)),
		     &failed);
	}
	jset(o, "rowid", json_integer(it->rowid), &failed);
	jset(o, "type", json_integer(it->type), &failed);
	jset(o, "key", json_text(it->key), &failed);
	jset(o, "prev_seq", json_integer((json_int_t)it->prev_seq), &failed);
	jset(o, "received_at", json_integer(it->received_at), &failed);
	jset(o, "via", json_text(it->via), &failed);
	jset(o, "result", json_integer(it->result), &failed);
	jset(o, "result_name", json_string(result_name(it->result)), &failed);
	jset(o, "ack_status", json_integer(it->ack_status), &failed);
	jset(o, "ack_name",
	     json_string(semq_status_name("tb_0030", it->ack_status)), &failed);
	jset(o, "confirm_need", json_integer(it->need), &failed);
	jset(o, "confirm_got", json_integer(it->got), &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* received list --json: {"received": [...], "streams_in": [...]} (new
 * reference, NULL when out of memory). */
static json_t *received_json(const struct recv_data *d,
			     const struct status_data *s, const char *origin)
{
	json_t *rows = json_array(), *streams = json_array(), *doc = NULL, *e;
	size_t i;

	if (!rows || !streams)
		goto out;
	for (i = 0; i < d->n; i++) {
		e = recv_json(&d->v[i]);
		if (!e || json_array_append_new(rows, e))
			goto out;
	}
	for (i = 0; i < s->n_streams; i++) {
		const struct stream_copy *sc = &s->streams[i];
		if (origin && strcmp_null(sc->origin, origin))
			continue;
		char lb[SEMQ_LIFE_STRLEN];

		e = json_pack("{s:s?, s:s?, s:s, s:I}", "origin", sc->origin,
			      "dest", sc->dest, "life",
			      semq_life_str(sc->life, lb, sizeof lb),
			      "confirmed_through",
			      (json_int_t)sc->confirmed_through);
		if (!e || json_array_append_new(streams, e))
			goto out;
	}
	/* "o" steals the arrays, even when packing fails. */
	doc = json_pack("{s:o, s:o}", "received", rows, "streams_in", streams);
	rows = streams = NULL;
out:
	json_decref(rows);
	json_decref(streams);
	return doc;
}

static const struct ctl_opt received_list_opts[] = {
	{"--origin", "O"},   {"--dest", "D"},  {"--key", "K"},
	{"--since", "WHEN"}, {"--limit", "N"}, {NULL, NULL}};

static const char received_list_help[] =
	"Lists the received record tb_0030, newest first: MESSAGE\n"
	"(origin/dest/seq), TYPE, KEY, RECEIVED (how long ago), VIA (the\n"
	"relay that delivered it, - when direct), RESULT (processed, redo,\n"
	"scheduled, cancelled) and ACK (acked once every 810-Response it\n"
	"needs arrived; unacked says which are missing). Then one line per\n"
	"inbound stream (per life of its origin) with its confirmed_through\n"
	"watermark: the rows at or below it stay for [node]\n"
	"receipt_retention, then they are purged and no longer listed.\n"
	"\n"
	"  --origin O   only messages from node O\n"
	"  --dest D     only messages to node D (a relay's or instance's)\n"
	"  --key K      only messages with key K\n"
	"  --since WHEN only rows received since WHEN: a duration back\n"
	"               (90s, 15m, 2h, 3d) or 2026-11-26T03:00:00Z\n"
	"  --limit N    at most N rows, 1..100000 (default 100)\n"
	"\n"
	"--json prints {\"received\": [...], \"streams_in\": [{\"origin\",\n"
	"\"dest\", \"life\", \"confirmed_through\"}...]}, a received row "
	"with\n"
	"message, origin, dest, seq, life, rowid, type, key, prev_seq,\n"
	"received_at, via,\n"
	"result, result_name, ack_status, ack_name, confirm_need and\n"
	"confirm_got (bits: 1 origin, 2 relay).\n";

static int cmd_received_list(struct ctl *c)
{
	struct recv_data d = {0};
	struct status_data s = {0};
	const char *origin = opt(c, "--origin"), *limit = opt(c, "--limit");
	struct store_filter f = {0};
	struct semq_where w;
	uint64_t v = LIST_LIMIT_DEFAULT;
	int r, footer = 0;
	size_t i;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	if (origin && !semq_id_valid(origin))
		return usage_err(c,
				 "--origin '%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 origin);
	if (limit && (parse_uint(limit, LIST_LIMIT_MAX, &v) || v == 0))
		return usage_err(c, "--limit '%s' is not a number 1..%d", limit,
				 LIST_LIMIT_MAX);
	r = parse_filter(c, &f, &w);
	if (r)
		return r;
	f.status = -100;
	f.limit = (unsigned)v;
	r = ctl_load_config(c);
	if (r)
		return r;
	r = ctl_open_store(c);
	if (r)
		return r;

	r = EXIT_FAIL;
	if (store_received_select(c->st, origin, &f, recv_collect_cb, &d) !=
		    SEMQ_OK ||
	    store_streams_in(c->st, status_stream_cb, &s) != SEMQ_OK) {
		fail("%s: reading tb_0030: %s", c->db, store_errmsg(c->st));
		goto out;
	}
	if (d.failed || s.failed) {
		fail("out of memory");
		goto out;
	}
	if (c->json) {
		r = print_json(received_json(&d, &s, origin));
		goto out;
	}
	if (d.n)
		print_table(&d, d.n, VC_N, recv_cell);
	else
		printf("no received messages\n");
	for (i = 0; i < s.n_streams; i++) {
		const struct stream_copy *sc = &s.streams[i];
		if (origin && strcmp_null(sc->origin, origin))
			continue;
		if (!footer++)
			fputc('\n', stdout);
		printf("stream %s/%s", sc->origin ? sc->origin : "-",
		       sc->dest ? sc->dest : "-");
		if (sc->life != SEMQ_LIFE_LEGACY) {
			char lb[SEMQ_LIFE_STRLEN];
			printf(" life %s",
			       semq_life_str(sc->life, lb, sizeof lb));
		}
		printf(": confirmed_through %llu (rows at or below it are kept "
		       "for receipt_retention)\n",
		       (unsigned long long)sc->confirmed_through);
	}
	r = EXIT_OK;
out:
	recv_data_free(&d);
	status_free(&s);
	return r;
}

/* The commands of `semqctl received`, in the order --help lists them. */
const struct ctl_cmd ctl_received_commands[] = {
	{"received list", cmd_received_list, received_list_opts,
	 "[--origin O] [--dest D] [--key K] [--since WHEN] [--limit N]",
	 "list the received record tb_0030, newest first", received_list_help},
	{NULL, NULL, NULL, NULL, NULL, NULL}};
