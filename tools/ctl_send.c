/* SPDX-License-Identifier: MIT */
/*
 * `semqctl send`: queue a message to a node and wake the daemon.
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

#include <sys/stat.h>

/* ---- send ---------------------------------------------------------------- */

/*
 * Reads all of fd into a new buffer (*buf_out, caller frees), but no more
 * than max bytes: SEMQ_ERR_TOO_BIG when there is more. SEMQ_ERR_IO (errno
 * set) or SEMQ_ERR_NOMEM otherwise.
 */
static int read_capped(int fd, size_t max, uint8_t **buf_out, size_t *len_out)
{
	uint8_t *buf = NULL, *nb;
	size_t len = 0, cap = 0;
	ssize_t n;
	int r = SEMQ_ERR_INTERNAL;

	for (;;) {
		if (len == cap) {
			if (cap > max) {
				r = SEMQ_ERR_TOO_BIG;
				goto out;
			}
			cap = cap ? cap * 2 : 4096;
			if (cap > max + 1)
				cap = max + 1;
			nb = realloc(buf, cap);
			if (!nb) {
				r = SEMQ_ERR_NOMEM;
				goto out;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = SEMQ_ERR_IO;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max) {
			r = SEMQ_ERR_TOO_BIG;
			goto out;
		}
	}
	*buf_out = buf;
	*len_out = len;
	buf = NULL;
	r = SEMQ_OK;
out:
	free(buf);
	return r;
}

/* The message send is asked to queue, checked; payload owned (free). */
struct send_req {
	const char *to;
	uint32_t type;
	const char *key;
	int64_t deliver_at;
	const char *data, *file;
	int from_stdin;
	uint8_t *payload;
	size_t payload_len;
};

/* Checks every argument of send that does not need the configuration. */
static int send_check_args(struct ctl *c, struct send_req *q)
{
	const char *type = opt(c, "--type"), *delay = opt(c, "--delay");
	const char *at = opt(c, "--deliver-at");
	uint64_t v;
	int64_t ms;
	const char *given[3];
	size_t i, n_given = 0;

	for (i = 0; i < c->n_pos; i++) {
		if (strcmp(c->pos[i], "-"))
			return usage_err(c, "unexpected argument '%s'",
					 c->pos[i]);
		if (q->from_stdin)
			return usage_err(c, "- is given twice");
		q->from_stdin = 1;
	}
	q->to = opt(c, "--to");
	if (!q->to)
		return usage_err(c, "--to D is required");
	if (!semq_id_valid(q->to))
		return usage_err(c,
				 "--to '%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 q->to);
	if (!type)
		return usage_err(c, "--type T is required");
	if (parse_uint(type, UINT32_MAX, &v))
		return usage_err(c, "--type '%s' is not a number 0..%lu", type,
				 (unsigned long)UINT32_MAX);
	q->type = (uint32_t)v;
	q->key = opt(c, "--key");
	if (q->key && !*q->key)
		return usage_err(c, "--key '' is empty; leave it out for no "
				    "key");
	if (q->key && strlen(q->key) > SEMQ_KEY_MAX)
		return usage_err(c, "--key is %zu bytes long, at most %d",
				 strlen(q->key), SEMQ_KEY_MAX);
	if (delay && at)
		return usage_err(c, "--delay and --deliver-at are both given; "
				    "give one");
	if (delay) {
		if (config_parse_duration(delay, &ms) != SEMQ_OK || ms < 0)
			return usage_err(c,
					 "--delay '%s' is not a duration "
					 "(250ms, 5s, 1m, 2h, 1d)",
					 delay);
		q->deliver_at = now_ms() + ms;
	}
	if (at) {
		if (parse_uint(at, INT64_MAX, &v))
			return usage_err(c,
					 "--deliver-at '%s' is not a unix "
					 "time in ms",
					 at);
		q->deliver_at = (int64_t)v;
	}
	q->data = opt(c, "--data");
	q->file = opt(c, "--file");
	if (q->data)
		given[n_given++] = "--data";
	if (q->file)
		given[n_given++] = "--file";
	if (q->from_stdin)
		given[n_given++] = "- (stdin)";
	if (n_given == 0)
		return usage_err(c, "no payload: give --data S, --file F or - "
				    "(stdin)");
	if (n_given > 1)
		return usage_err(c,
				 "%s and %s%s%s are given; give exactly one "
				 "payload source",
				 given[0], given[1], n_given > 2 ? " and " : "",
				 n_given > 2 ? given[2] : "");
	return EXIT_OK;
}

/* Reads the payload into q, at most max_payload bytes. */
static int send_read_payload(struct ctl *c, struct send_req *q)
{
	size_t max = c->cfg->max_payload;
	int fd = -1, r = EXIT_FAIL, e;

	if (q->data) {
		if (strlen(q->data) > max)
			return usage_err(c,
					 "--data is %zu bytes, larger than "
					 "max_payload %zu",
					 strlen(q->data), max);
		q->payload_len = strlen(q->data);
		q->payload = malloc(q->payload_len + 1);
		if (!q->payload)
			return fail("out of memory");
		memcpy(q->payload, q->data, q->payload_len + 1);
		return EXIT_OK;
	}
	if (q->file) {
		fd = open(q->file, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return usage_err(c, "--file '%s': %s", q->file,
					 strerror(errno));
	}
	e = read_capped(q->file ? fd : STDIN_FILENO, max, &q->payload,
			&q->payload_len);
	if (e == SEMQ_OK)
		r = EXIT_OK;
	else if (e == SEMQ_ERR_TOO_BIG && q->file)
		r = usage_err(c, "--file '%s' is larger than max_payload %zu",
			      q->file, max);
	else if (e == SEMQ_ERR_TOO_BIG)
		r = usage_err(c, "- (stdin) is larger than max_payload %zu",
			      max);
	else if (e == SEMQ_ERR_IO && q->file)
		r = usage_err(c, "--file '%s': %s", q->file, strerror(errno));
	else if (e == SEMQ_ERR_IO)
		r = fail("send: reading stdin: %s", strerror(errno));
	else
		r = fail("send: %s", semq_strerror(e));
	if (fd >= 0)
		close(fd);
	return r;
}

static const struct ctl_opt send_opts[] = {{"--to", "D"},
					   {"--type", "T"},
					   {"--key", "K"},
					   {"--delay", "DURATION"},
					   {"--deliver-at", "UNIX_MS"},
					   {"--data", "S"},
					   {"--file", "F"},
					   {NULL, NULL}};

static const char send_help[] =
	"Queues a message to node D in the outbound table tb_0031, in one\n"
	"transaction, then wakes the semqd serving the database so it sends\n"
	"at once. Give exactly one payload source.\n"
	"\n"
	"  --to D               destination node id (1-64 of A-Za-z0-9._-)\n"
	"  --type T             message type, 0..4294967295\n"
	"  --key K              business object id, at most 255 bytes;\n"
	"                       messages with one key take effect in order\n"
	"  --delay DURATION     run at the destination after 5s, 1m, 2h...\n"
	"  --deliver-at UNIX_MS run at the destination at this time\n"
	"  --data S             the payload is the text S\n"
	"  --file F             the payload is the contents of file F\n"
	"  -                    the payload is read from stdin\n"
	"\n"
	"Prints the message id (origin/dest/seq); --json prints\n"
	"{\"origin\", \"dest\", \"seq\", \"woke_daemon\"}.\n";

static int cmd_send(struct ctl *c)
{
	struct send_req q = {0};
	struct msg m;
	struct msgid id;
	char err[SEMQ_ERRLEN] = "", idbuf[MSGID_STRLEN];
	uint64_t seq = 0;
	int r, woke;

	r = send_check_args(c, &q);
	if (r)
		goto out;
	r = ctl_load_config(c);
	if (r)
		goto out;
	r = send_read_payload(c, &q);
	if (r)
		goto out;
	r = ctl_open_store(c);
	if (r)
		goto out;

	memset(&m, 0, sizeof m);
	snprintf(m.id.dest, sizeof m.id.dest, "%s", q.to);
	m.type = q.type;
	if (q.key) {
		m.has_key = 1;
		snprintf(m.key, sizeof m.key, "%s", q.key);
	}
	m.deliver_at = q.deliver_at;
	m.payload = q.payload; /* borrowed by the store for the call */
	m.payload_len = q.payload_len;
	if (store_enqueue(c->st, &m, &seq, err, sizeof err) != SEMQ_OK) {
		r = fail("send: %s", err[0] ? err : store_errmsg(c->st));
		goto out;
	}

	memset(&id, 0, sizeof id);
	snprintf(id.origin, sizeof id.origin, "%s", c->cfg->id);
	snprintf(id.dest, sizeof id.dest, "%s", q.to);
	id.seq = seq;
	/* A PostgreSQL database has no wake socket: its instances find new
	 * rows within poll_interval. */
	woke = !c->cfg->db_url && semq_notify(c->cfg->db) == SEMQ_OK;
	if (c->json) {
		r = print_json(json_pack("{s:s, s:s, s:I, s:b}", "origin",
					 id.origin, "dest", id.dest, "seq",
					 (json_int_t)seq, "woke_daemon", woke));
		goto out;
	}
	printf("queued %s\n", msgid_str(&id, idbuf, sizeof idbuf));
	if (!woke && !c->cfg->db_url)
		fprintf(stderr,
			"semqctl: no semqd is running on %s to wake; "
			"the message is sent when it starts\n",
			c->db);
	r = EXIT_OK;
out:
	free(q.payload);
	return r;
}

/* The commands of `semqctl send`, in the order --help lists them. */
const struct ctl_cmd ctl_send_commands[] = {
	{"send", cmd_send, send_opts,
	 "--to D --type T [--key K] [--delay DURATION | --deliver-at UNIX_MS] "
	 "(--data S | --file F | -)",
	 "queue a message to node D and wake the daemon", send_help},
	{NULL, NULL, NULL, NULL, NULL, NULL}};
