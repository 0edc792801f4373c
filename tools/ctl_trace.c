/* SPDX-License-Identifier: MIT */
/*
 * `semqctl trace`: where is a message? Its help, its arguments into the
 * GET /trace request to the running daemon (ctl_admin.c), and the answer
 * printed for a person — one block per message, one line per hop,
 * statuses by name and times as UTC with their age.
 */
#include "ctl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "config.h"
#include "types.h"

static const char ctl_trace_help[] =
	"Shows where a message is: this node's record of it, then the record\n"
	"of every hop after it, asked over the protocol (a Trace frame) by\n"
	"the running semqd ([node] admin, GET /trace): at a relay its custody\n"
	"copy (or that it only forwards) and whether its next hop is\n"
	"connected; at the destination whether it was received (when, via\n"
	"which relay, its result, acknowledged or not; or confirmed and\n"
	"compacted, or not received) and its redo entry. A hop that cannot\n"
	"be asked says why: not connected, does not support trace (an older\n"
	"semqd), no answer within a few seconds, busy.\n"
	"\n"
	"  --key K            this node's messages of key K, newest first\n"
	"  --dest D           only those to node D\n"
	"  --since DURATION   only those created in the last 30m, 2h, 1d...\n"
	"  --limit N          at most N messages, 1..64 (default 20)\n"
	"  --id O/D/SEQ       one message by its id\n"
	"\n"
	"A node passes a trace on for its own messages (and a relay for\n"
	"those it carries): ask on the origin's node. Exit 1 when there is no\n"
	"such message or the daemon does not answer. --json prints the\n"
	"daemon's answer: {\"node\", \"asked\", \"messages\": [ID...],\n"
	"\"hops\": [{\"node\", \"instance\", \"relay\", "
	"\"store_and_forward\",\n"
	"\"note\", \"records\": [{\"id\", \"outbound\": {\"status\",\n"
	"\"status_name\", \"attempts\", \"created_at\", \"sent_at\",\n"
	"\"acked_at\", \"result\", \"result_name\", \"last_error\",\n"
	"\"custodian\", \"key\", \"type\"}, \"receipt\": {\"state\",\n"
	"\"result\", \"result_name\", \"ack_status\", \"received_at\", "
	"\"via\",\n"
	"\"confirmed_through\", \"high\"}, \"redo\": {\"id\", \"status\",\n"
	"\"status_name\", \"tries\", \"next_attempt_at\", \"last_error\"},\n"
	"\"next_hop\", \"next_connected\"}...]}...]} (times in unix ms).\n";

/* ---- arguments ------------------------------------------------------------------ */

/* Appends s percent-encoded (all but unreserved characters). */
static int enc(char *dst, size_t sz, size_t *o, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		int plain = (ch >= 'A' && ch <= 'Z') ||
			    (ch >= 'a' && ch <= 'z') ||
			    (ch >= '0' && ch <= '9') || ch == '-' ||
			    ch == '.' || ch == '_' || ch == '~';

		if (*o + 4 >= sz)
			return -1;
		if (plain) {
			dst[(*o)++] = (char)ch;
		} else {
			dst[(*o)++] = '%';
			dst[(*o)++] = hex[ch >> 4];
			dst[(*o)++] = hex[ch & 15];
		}
	}
	dst[*o] = '\0';
	return 0;
}

static int add(char *dst, size_t sz, size_t *o, const char *name, const char *v)
{
	int n = snprintf(dst + *o, sz - *o, "%s%s=", *o > 6 ? "&" : "?", name);

	if (n < 0 || (size_t)n >= sz - *o)
		return -1;
	*o += (size_t)n;
	return enc(dst, sz, o, v);
}

/*
 * The path and query of GET /trace for the arguments (NULL when not
 * given) into path[0..sz). 0, or -1 with err naming the argument at fault
 * (a usage error). now: unix ms, for --since.
 */
static int ctl_trace_path(const char *key, const char *id, const char *dest,
			  const char *since, const char *limit, int64_t now,
			  char *path, size_t sz, char *err, size_t errsz)
{
	size_t o;
	char num[32];

	if (!key == !id) {
		snprintf(err, errsz, "give --key K or --id ORIGIN/DEST/SEQ");
		return -1;
	}
	if (id && (dest || since || limit)) {
		snprintf(err, errsz,
			 "--dest, --since and --limit go with --key, not --id");
		return -1;
	}
	if (key && (!key[0] || strlen(key) > SEMQ_KEY_MAX)) {
		snprintf(err, errsz, "--key: 1..%d bytes", SEMQ_KEY_MAX);
		return -1;
	}
	if (id) {
		const char *a = strchr(id, '/'),
			   *b = a ? strchr(a + 1, '/') : 0;
		char *end;
		unsigned long long seq = b ? strtoull(b + 1, &end, 10) : 0;

		if (!b || strchr(b + 1, '/') || seq == 0 || *end ||
		    b[1] < '0' || b[1] > '9') {
			snprintf(err, errsz,
				 "--id '%.100s' is not ORIGIN/DEST/SEQ", id);
			return -1;
		}
	}
	if (dest && !semq_id_valid(dest)) {
		snprintf(err, errsz,
			 "--dest '%.100s' is not a node id (1-64 of "
			 "A-Za-z0-9._-)",
			 dest);
		return -1;
	}
	if (limit) {
		char *end;
		long v = strtol(limit, &end, 10);
		if (*end || !limit[0] || v < 1 || v > 64) {
			snprintf(err, errsz, "--limit '%.50s' is not 1..64",
				 limit);
			return -1;
		}
	}
	snprintf(path, sz, "/trace");
	o = strlen(path);
	if ((key && add(path, sz, &o, "key", key)) ||
	    (id && add(path, sz, &o, "id", id)) ||
	    (dest && add(path, sz, &o, "dest", dest)) ||
	    (limit && add(path, sz, &o, "limit", limit))) {
		snprintf(err, errsz, "the arguments are too long");
		return -1;
	}
	if (since) {
		int64_t ms;
		if (config_parse_duration(since, &ms) != SEMQ_OK || ms <= 0) {
			snprintf(err, errsz,
				 "--since '%.50s' is not a duration (30m, 2h, "
				 "1d...)",
				 since);
			return -1;
		}
		snprintf(num, sizeof num, "%lld",
			 (long long)(now > ms ? now - ms : 0));
		if (add(path, sz, &o, "since", num)) {
			snprintf(err, errsz, "the arguments are too long");
			return -1;
		}
	}
	return 0;
}

/* ---- the answer ------------------------------------------------------------------ */

static int64_t num(const json_t *o, const char *k)
{
	return (int64_t)json_integer_value(json_object_get(o, k));
}

static const char *str(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

/* "2026-11-26T10:49:58Z (3s ago)", or "-" */
static const char *when(int64_t ms, int64_t now, char *buf, size_t sz)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	char iso[24], age[24];
	int64_t a = now - ms;

	if (ms <= 0 || !gmtime_r(&t, &tm) ||
	    !strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm)) {
		snprintf(buf, sz, "-");
		return buf;
	}
	if (a < 0)
		snprintf(age, sizeof age, "in %llds",
			 (long long)((-a + 999) / 1000));
	else if (a < 60000)
		snprintf(age, sizeof age, "%llds ago", (long long)(a / 1000));
	else if (a < 3600000)
		snprintf(age, sizeof age, "%lldm ago", (long long)(a / 60000));
	else if (a < 86400000)
		snprintf(age, sizeof age, "%lldh ago",
			 (long long)(a / 3600000));
	else
		snprintf(age, sizeof age, "%lldd ago",
			 (long long)(a / 86400000));
	snprintf(buf, sz, "%.23s (%.23s)", iso, age);
	return buf;
}

/* The record of hop h about message id, or NULL. */
static const json_t *record_of(const json_t *h, const char *id)
{
	const json_t *recs = json_object_get(h, "records"), *r;
	size_t i;

	json_array_foreach(recs, i, r)
	{
		const char *rid = str(r, "id");
		if (rid && !strcmp(rid, id))
			return r;
	}
	return NULL;
}

static void print_outbound(FILE *out, const json_t *ob, int own, int64_t now)
{
	const char *cust = str(ob, "custodian"), *le = str(ob, "last_error");
	const json_t *res = json_object_get(ob, "result");
	char a[64], b[64];

	fprintf(out, "%s %s", own ? "outbound:" : "custody copy:",
		str(ob, "status_name") ? str(ob, "status_name") : "?");
	if (cust && num(ob, "status") == 6)
		fprintf(out, " (held by %s)", cust);
	if (json_is_integer(res))
		fprintf(out, ", result %s", str(ob, "result_name"));
	fprintf(out, ", attempts %lld", (long long)num(ob, "attempts"));
	if (num(ob, "sent_at"))
		fprintf(out, ", sent %s",
			when(num(ob, "sent_at"), now, a, sizeof a));
	if (num(ob, "acked_at"))
		fprintf(out, ", acked %s",
			when(num(ob, "acked_at"), now, b, sizeof b));
	if (le)
		fprintf(out, ", last error: %s", le);
}

static void print_receipt(FILE *out, const json_t *rc, int64_t now)
{
	const char *state = str(rc, "state"), *via = str(rc, "via");
	char a[64];

	if (state && !strcmp(state, "received")) {
		fprintf(out, "received %s",
			when(num(rc, "received_at"), now, a, sizeof a));
		fprintf(out, " %s%s, result %s, %s", via ? "via " : "direct",
			via ? via : "", str(rc, "result_name"),
			str(rc, "ack_status"));
	} else if (state && !strcmp(state, "confirmed")) {
		fprintf(out,
			"received and confirmed (row compacted: seq <= "
			"confirmed_through %lld)",
			(long long)num(rc, "confirmed_through"));
	} else {
		fprintf(out, "not received (highest seq of the stream: %lld)",
			(long long)num(rc, "high"));
	}
}

static void print_redo(FILE *out, const json_t *rd, int64_t now)
{
	const char *le = str(rd, "last_error");
	char a[64];

	fprintf(out, "; redo entry #%lld %s, tries %lld",
		(long long)num(rd, "id"), str(rd, "status_name"),
		(long long)num(rd, "tries"));
	if (num(rd, "status") == 0 && num(rd, "next_attempt_at"))
		fprintf(out, ", next attempt %s",
			when(num(rd, "next_attempt_at"), now, a, sizeof a));
	if (le)
		fprintf(out, ", last error: %s", le);
}

/* Prints the answer of GET /trace (doc borrowed) for a person. now: unix
 * ms, for the ages. */
static void ctl_trace_print(FILE *out, const json_t *doc, int64_t now)
{
	const json_t *ids = json_object_get(doc, "messages"),
		     *hops = json_object_get(doc, "hops"),
		     *asked = json_object_get(doc, "asked"), *v, *h;
	size_t i, k;

	if (str(asked, "key"))
		fprintf(out,
			"Trace of key '%s'%s%s from %s: %zu message%s, "
			"newest first\n",
			str(asked, "key"), str(asked, "dest") ? " to " : "",
			str(asked, "dest") ? str(asked, "dest") : "",
			str(doc, "node"), json_array_size(ids),
			json_array_size(ids) == 1 ? "" : "s");
	else
		fprintf(out, "Trace of %s from %s\n", str(asked, "id"),
			str(doc, "node"));
	json_array_foreach(ids, i, v)
	{
		const char *id = json_string_value(v), *key = NULL;
		char path[1024] = "";
		size_t pl = 0;
		int width = 4;

		if (!id)
			continue;
		json_array_foreach(hops, k, h)
		{
			const json_t *r = record_of(h, id);
			const char *node = str(h, "node");
			int n;

			if (!r || !node)
				continue;
			if ((int)strlen(node) > width)
				width = (int)strlen(node);
			if (!key)
				key = str(json_object_get(r, "outbound"),
					  "key");
			n = snprintf(path + pl, sizeof path - pl, "%s%s",
				     pl ? " -> " : "", node);
			if (n > 0 && (size_t)n < sizeof path - pl)
				pl += (size_t)n;
		}
		fprintf(out, "\n%s%s%s\n  path: %s\n", id, key ? "  key " : "",
			key ? key : "", path);
		json_array_foreach(hops, k, h)
		{
			const json_t *r = record_of(h, id), *ob, *rc, *rd;
			const char *node = str(h, "node"),
				   *note = str(h, "note");
			const char *nh;

			if (!r || !node)
				continue;
			fprintf(out, "  %-*s  ", width, node);
			if (note && !json_object_get(r, "outbound") &&
			    !json_object_get(r, "receipt")) {
				fprintf(out, "%s\n", note);
				continue;
			}
			ob = json_object_get(r, "outbound");
			rc = json_object_get(r, "receipt");
			rd = json_object_get(r, "redo");
			if (ob)
				print_outbound(out, ob, k == 0, now);
			else if (!rc && json_is_true(json_object_get(
						h, "store_and_forward")))
				fprintf(out, "no custody copy (forwarded, "
					     "or delivered and dropped)");
			else if (!rc &&
				 json_is_true(json_object_get(h, "relay")))
				fprintf(out, "forwarding only (no custody "
					     "copy)");
			else if (!rc)
				fprintf(out, "no outbound row here");
			if (rc) {
				if (ob)
					fprintf(out, "; ");
				print_receipt(out, rc, now);
			}
			if (rd)
				print_redo(out, rd, now);
			if (json_object_get(r, "next_connected")) {
				nh = str(r, "next_hop");
				if (!nh)
					fprintf(out, "; no route onward");
				else
					fprintf(out, "; next hop %s %s", nh,
						json_is_true(json_object_get(
							r, "next_connected"))
							? "connected"
							: "not connected");
			}
			if (note)
				fprintf(out, " [%s]", note);
			fputc('\n', out);
		}
	}
}

/* ---- trace (tools/ctl_trace.c) -------------------------------------------- */

static const struct ctl_opt trace_opts[] = {
	{"--key", "K"},   {"--id", "ORIGIN/DEST/SEQ"},
	{"--dest", "D"},  {"--since", "DURATION"},
	{"--limit", "N"}, {NULL, NULL}};

static int cmd_trace(struct ctl *c)
{
	char path[1024], err[256];
	json_t *doc = NULL;
	int r;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	if (ctl_trace_path(c->val[0], c->val[1], c->val[2], c->val[3],
			   c->val[4], now_ms(), path, sizeof path, err,
			   sizeof err))
		return usage_err(c, "%s", err);
	r = ctl_load_config(c);
	if (r)
		return r;
	r = admin_get_json(c, "trace", path, "hops", JSON_ARRAY, &doc);
	if (r)
		goto out;
	if (c->json) {
		r = print_json(doc);
		doc = NULL;
		goto out;
	}
	ctl_trace_print(stdout, doc, now_ms());
	r = EXIT_OK;
out:
	json_decref(doc);
	return r;
}

/* The commands of `semqctl trace`, in the order --help lists them. */
const struct ctl_cmd ctl_trace_commands[] = {
	{"trace", cmd_trace, trace_opts,
	 "(--key K [--dest D] [--since DURATION] [--limit N] | --id "
	 "ORIGIN/DEST/SEQ)",
	 "where is a message: its record at every hop (asks the daemon)",
	 ctl_trace_help},
	{NULL, NULL, NULL, NULL, NULL, NULL}};
