/* SPDX-License-Identifier: MIT */
/*
 * `semqctl peers`: the running daemon's peer connections, over its admin
 * HTTP.
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

/* The columns of `peers`. */
enum {
	PC_PEER,
	PC_STATE,
	PC_DIRECTION,
	PC_ADDRESS,
	PC_SINCE,
	PC_PENDING,
	PC_NEXT_DIAL,
	PC_DOWN,
	PC_LAST_ERROR,
	PC_N
};

static const char *peer_str(const json_t *p, const char *key)
{
	return json_string_value(json_object_get(p, key));
}

static int64_t peer_int(const json_t *p, const char *key)
{
	return (int64_t)json_integer_value(json_object_get(p, key));
}

static const char *peer_cell(const void *ctx, size_t i, int col, int64_t now,
			     char *buf, size_t sz)
{
	static const char *const head[PC_N] = {
		"PEER",    "STATE",     "DIRECTION", "ADDRESS",   "SINCE",
		"PENDING", "NEXT_DIAL", "DOWN",      "LAST_ERROR"};
	const json_t *p;

	if (i == TABLE_HEAD)
		return head[col];
	p = json_array_get((const json_t *)ctx, i);
	switch (col) {
	case PC_PEER:
		/* one of several instances of its node id: PEER@INSTANCE */
		if (peer_str(p, "peer") && peer_str(p, "instance")) {
			snprintf(buf, sz, "%s@%s", peer_str(p, "peer"),
				 peer_str(p, "instance"));
			return buf;
		}
		return cell(peer_str(p, "peer"), 0, buf, sz);
	case PC_STATE: return cell(peer_str(p, "state"), 0, buf, sz);
	case PC_DIRECTION: return cell(peer_str(p, "direction"), 0, buf, sz);
	case PC_ADDRESS: return cell(peer_str(p, "address"), 0, buf, sz);
	case PC_SINCE: return fmt_age(peer_int(p, "since"), now, buf, sz);
	case PC_PENDING:
		if (!json_is_integer(json_object_get(p, "pending_bytes")))
			return "-";
		snprintf(buf, sz, "%lld",
			 (long long)peer_int(p, "pending_bytes"));
		return buf;
	case PC_NEXT_DIAL:
		if (!peer_int(p, "next_dial_at"))
			return "-";
		return fmt_until(peer_int(p, "next_dial_at"), now, buf, sz);
	case PC_DOWN: /* a configured peer without a ready connection */
		return fmt_age(peer_int(p, "down_since"), now, buf, sz);
	default: return cell(peer_str(p, "last_error"), 60, buf, sz);
	}
}

static const struct ctl_opt peers_opts[] = {{NULL, NULL}};

static const char peers_help[] =
	"Asks the running semqd for its peer connections, over its admin\n"
	"HTTP ([node] admin in node.ini, GET /peers): one line per\n"
	"connection with PEER (PEER@INSTANCE for one of several instances\n"
	"of a node id), STATE (tls, hello, ready, closing),\n"
	"DIRECTION (dialled or accepted), ADDRESS, SINCE (how long it has\n"
	"been open) and PENDING (bytes queued for the peer); then every\n"
	"configured peer without a connection, STATE disconnected, with\n"
	"NEXT_DIAL (when it is dialled next; - when it only dials in).\n"
	"\n"
	"Exit 1 when [node] admin is not set or the daemon does not answer.\n"
	"--json prints the daemon's answer: {\"node\", \"now\", \"peers\":\n"
	"[{\"peer\", \"instance\", \"state\", \"direction\", \"address\",\n"
	"\"conn_id\", \"since\", \"ready_at\", \"pending_bytes\"}...]}, a "
	"peer\n"
	"without a connection with \"next_dial_at\", \"next_dial_in_ms\"\n"
	"and \"attempts\" (times in unix ms, null when none); \"instance\"\n"
	"is null for a node's only instance.\n";

static int cmd_peers(struct ctl *c)
{
	json_t *doc = NULL, *arr;
	int r;

	if (c->n_pos)
		return usage_err(c, "unexpected argument '%s'", c->pos[0]);
	r = ctl_load_config(c);
	if (r)
		return r;
	r = admin_get_json(c, "peers", "/peers", "peers", JSON_ARRAY, &doc);
	if (r)
		goto out;
	arr = json_object_get(doc, "peers");
	if (c->json) {
		r = print_json(doc);
		doc = NULL;
		goto out;
	}
	if (json_array_size(arr))
		print_table(arr, json_array_size(arr), PC_N, peer_cell);
	else
		printf("no peers: node %s has no connection and no [peer] "
		       "section\n",
		       c->cfg->id);
	r = EXIT_OK;
out:
	json_decref(doc);
	return r;
}

/* The commands of `semqctl peers`, in the order --help lists them. */
const struct ctl_cmd ctl_peers_commands[] = {
	{"peers", cmd_peers, peers_opts, "",
	 "the running daemon's peer connections (over its admin HTTP)",
	 peers_help},
	{NULL, NULL, NULL, NULL, NULL, NULL}};
