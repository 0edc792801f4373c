/* SPDX-License-Identifier: MIT */
/*
 * semqctl's client of the daemon's admin HTTP ([node] admin): one GET,
 * a JSON answer (`peers`, `trace`).
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

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>

/* ---- peers (the daemon's admin HTTP) -------------------------------------- */

#define ADMIN_TIMEOUT_S 5 /* the daemon answers at once or not at all */
#define ADMIN_ANSWER_MAX (8 << 20) /* bytes of an answer */

/* Writes all n bytes of p to fd; 0 or -1 (errno). */
static int write_all(int fd, const char *p, size_t n)
{
	ssize_t k;

	while (n) {
		k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Connects to the daemon's admin address `where` (host:port); the socket,
 * or -1 after printing one line. */
static int admin_connect(struct ctl *c, const char *where)
{
	const struct cfg_addr *a = &c->cfg->admin;
	struct timeval tv = {ADMIN_TIMEOUT_S, 0};
	struct addrinfo hints, *ai = NULL, *p;
	char port[8];
	int fd = -1, e = ECONNREFUSED, gai;

	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(port, sizeof port, "%u", a->port);
	gai = getaddrinfo(a->host, port, &hints, &ai);
	if (gai) {
		fail("%s: [node] admin %s: %s", c->config_path, where,
		     gai_strerror(gai));
		return -1;
	}
	for (p = ai; p; p = p->ai_next) {
		fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC,
			    p->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		if (connect(fd, p->ai_addr, p->ai_addrlen) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		fail("cannot reach semqd's admin HTTP at %s ([node] admin of "
		     "%s): %s; is semqd running?",
		     where, c->config_path, strerror(e));
	return fd;
}

/*
 * GET `path` from the running daemon's admin HTTP: HTTP/1.0, so the daemon
 * closes after its answer. EXIT_OK with *status and *body (NUL-terminated,
 * caller frees); otherwise one line was printed.
 */
static int admin_get(struct ctl *c, const char *path, int *status, char **body)
{
	const struct cfg_addr *a = &c->cfg->admin;
	char where[300], req[4096], *buf = NULL, *end;
	size_t len = 0, cap = 0;
	int fd, n, r = EXIT_FAIL;
	ssize_t k;

	snprintf(where, sizeof where,
		 strchr(a->host, ':') ? "[%s]:%u" : "%s:%u", a->host, a->port);
	fd = admin_connect(c, where);
	if (fd < 0)
		return EXIT_FAIL;
	/* With [node] admin_token every read needs it: node.ini has it. */
	n = snprintf(req, sizeof req,
		     "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: "
		     "application/json\r\nUser-Agent: semqctl\r\n%s%s%s\r\n",
		     path, where,
		     c->cfg->admin_token ? "Authorization: Bearer " : "",
		     c->cfg->admin_token ? c->cfg->admin_token : "",
		     c->cfg->admin_token ? "\r\n" : "");
	if (n < 0 || (size_t)n >= sizeof req) {
		fail("admin HTTP at %s: [node] admin_token is too long for a "
		     "request header",
		     where);
		goto out;
	}
	if (write_all(fd, req, (size_t)n) != 0) {
		fail("admin HTTP at %s: sending the request: %s", where,
		     strerror(errno));
		goto out;
	}
	for (;;) {
		if (cap - len < 4096) {
			char *v;
			if (cap >= ADMIN_ANSWER_MAX) {
				fail("admin HTTP at %s: the answer is over %d "
				     "bytes",
				     where, ADMIN_ANSWER_MAX);
				goto out;
			}
			v = realloc(buf, cap ? cap * 2 : 16384);
			if (!v) {
				fail("out of memory");
				goto out;
			}
			buf = v;
			cap = cap ? cap * 2 : 16384;
		}
		k = read(fd, buf + len, cap - len - 1);
		if (k == 0)
			break;
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			fail("admin HTTP at %s: %s", where,
			     errno == EAGAIN || errno == EWOULDBLOCK
				     ? "no answer within 5 s"
				     : strerror(errno));
			goto out;
		}
		len += (size_t)k;
	}
	buf[len] = '\0';
	end = strstr(buf, "\r\n\r\n");
	if (sscanf(buf, "HTTP/%*d.%*d %d", status) != 1 || !end) {
		fail("admin HTTP at %s: the answer is not HTTP", where);
		goto out;
	}
	end += 4;
	memmove(buf, end, len - (size_t)(end - buf) + 1);
	*body = buf;
	buf = NULL;
	r = EXIT_OK;
out:
	close(fd);
	free(buf);
	return r;
}

/*
 * Asks the running daemon for GET `path` (the command `what` needs [node]
 * admin) and parses its 200 answer: EXIT_OK with *doc (caller frees) whose
 * `field` has the JSON type `want` (JSON_ARRAY, JSON_OBJECT); else a
 * message naming the failure and its exit status.
 */
int admin_get_json(struct ctl *c, const char *what, const char *path,
		   const char *field, json_type want, json_t **doc_out)
{
	json_t *doc = NULL, *v;
	json_error_t e;
	char *body = NULL;
	int status = 0, r;

	*doc_out = NULL;
	if (!c->cfg->admin.set)
		return fail("%s: [node] admin is not set; semqctl %s asks the "
			    "running daemon over it",
			    c->config_path, what);
	r = admin_get(c, path, &status, &body);
	if (r)
		return r;
	r = EXIT_FAIL;
	doc = json_loads(body, 0, &e);
	v = json_object_get(doc, field);
	if (status != 200) {
		const char *why =
			json_string_value(json_object_get(doc, "error"));
		fail("semqd answered GET %s with %d: %s", path, status,
		     why ? why : "(no reason given)");
	} else if (!v || json_typeof(v) != want) {
		fail("semqd's answer to GET %s is not the expected JSON%s%s",
		     path, doc ? "" : ": ", doc ? "" : e.text);
	} else {
		*doc_out = doc;
		doc = NULL;
		r = EXIT_OK;
	}
	json_decref(doc);
	free(body);
	return r;
}
