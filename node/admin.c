/* SPDX-License-Identifier: MIT */
/*
 * The admin HTTP server on the network thread (see admin.h).
 *
 * DESIGN
 *  - One table of routes (path pattern, method, who answers, whether it is
 *    an action). A path that matches no route is 404; a path that matches
 *    with another method is 405 with an Allow header. Exact patterns win over
 *    patterns with a '*' segment, so /redo/retry-all-dead is never read as
 *    an entry id.
 *  - A request for the tables is copied into a JOB_ADMIN (method, path,
 *    query, body) with a request id; the evhttp request stays here, in the
 *    pending list, with a 10 s timer (10 s by CLOCK_MONOTONIC: libevent's
 *    coarse clock may fire a tick early, and the timer is then re-armed for
 *    the rest; the 503's log line says how long it waited). The store
 *    thread's answer finds it by id; an answer for an id that is no longer
 *    pending (timed out, or the node is draining) is dropped. When the
 *    client went away meanwhile, libevent has detached the request from its
 *    connection, and answering it only frees it.
 *  - Nothing here reads the database or the worker's state beyond
 *    worker_get_stats() and worker_disk_full(), which are made for any
 *    thread; the connections are listed through net.c's callback.
 *  - With [node] admin_token set, every request but GET /health needs
 *    `Authorization: Bearer TOKEN` (401 with a JSON error and a
 *    WWW-Authenticate header otherwise): the tables' reads (/metrics,
 *    /streams, /redo, /redo/ID, which has a message's payload) and /peers
 *    as much as the actions. The dashboard's own files load without it (they
 *    hold no data); its script sends the token with every read. Without
 *    admin_token, reads are served to anyone who reaches the address and
 *    actions only to loopback clients; a payload is then never shown
 *    (report.c).
 *  - The bearer token is compared in constant time (for a given token
 *    length), so response times do not reveal how much of a guess matched.
 *    A refused request is logged at most once per REFUSED_LOG_S, with how
 *    many were refused meanwhile, so guessing cannot flood the log.
 */
#include "admin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <jansson.h>

#include "codec.h"
#include "log.h"
#include "net.h"
#include "peer.h"
#include "plughost.h"
#include "webui.h"
#include "worker.h"

#define REPLY_TIMEOUT_S 10   /* a request the store thread did not answer */
#define METRICS_TIMEOUT_S 3  /* /metrics: then the tables' last part */
#define MAX_PENDING 64       /* requests waiting for the store thread */
#define MAX_BODY (64 * 1024) /* bytes of a request body */
#define MAX_HEADERS (16 * 1024)
#define IDLE_TIMEOUT_S 30 /* an HTTP connection that sends nothing */
#define REFUSED_LOG_S 10  /* at most one line about refused requests */

enum route_kind { RK_HEALTH, RK_PEERS, RK_STORE, RK_LIVE };

struct route {
	const char *pattern; /* a '*' segment matches one path segment */
	enum evhttp_cmd_type method;
	int kind;    /* enum route_kind */
	int action;  /* changes the tables: needs authorisation */
	int metrics; /* /metrics: the network's part is appended here */
};

static const struct route routes[] = {
	{"/health", EVHTTP_REQ_GET, RK_HEALTH, 0, 0},
	{"/health/live", EVHTTP_REQ_GET, RK_LIVE, 0, 0},
	{"/peers", EVHTTP_REQ_GET, RK_PEERS, 0, 0},
	{"/metrics", EVHTTP_REQ_GET, RK_STORE, 0, 1},
	{"/streams", EVHTTP_REQ_GET, RK_STORE, 0, 0},
	{"/redo", EVHTTP_REQ_GET, RK_STORE, 0, 0},
	{"/outbound", EVHTTP_REQ_GET, RK_STORE, 0, 0},
	{"/redo/retry-all-dead", EVHTTP_REQ_POST, RK_STORE, 1, 0},
	{"/redo/retry", EVHTTP_REQ_POST, RK_STORE, 1, 0},
	{"/redo/discard", EVHTTP_REQ_POST, RK_STORE, 1, 0},
	{"/redo/*", EVHTTP_REQ_GET, RK_STORE, 0, 0},
	{"/redo/*/retry", EVHTTP_REQ_POST, RK_STORE, 1, 0},
	{"/redo/*/discard", EVHTTP_REQ_POST, RK_STORE, 1, 0},
	{"/trace", EVHTTP_REQ_GET, RK_STORE, 0, 0},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

/* A request waiting for the store thread's answer. */
struct pending {
	struct pending *next;
	struct admin *a;
	uint64_t id;
	struct evhttp_request *req; /* libevent's; ours to answer once */
	struct event *timer;
	int64_t submitted_ms; /* mono_ms() when it went to the store thread */
	int metrics;
};

struct admin {
	const struct config *c;
	struct event_base *base;
	struct evhttp *http;
	struct worker *w; /* NULL before attach and after drain */
	admin_peers_fn peers;
	void *peers_ctx;
	struct pending *pending;
	size_t n_pending;
	uint64_t next_id;
	int stopping;
	int64_t started_at; /* unix ms */
	struct timespec started_mono;
	time_t refused_logged;  /* monotonic s of the last refusal logged */
	unsigned refused_quiet; /* refused since, not logged */
	struct evconnlistener *listener; /* evhttp's, for accept_error() */
	struct event *accept_retry;      /* the listener paused: resume */
	unsigned accept_failed;          /* failures this episode */
	/* /metrics: the store thread's last part (the tables' counts), and
	 * when it came (monotonic ms), for an answer while it is busy */
	char *tables;
	size_t tables_len;
	int64_t tables_at;
};

/* ---- answering ------------------------------------------------------------- */

static const char *phrase(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	}
	return "Unknown";
}

static const char *method_name(enum evhttp_cmd_type m)
{
	switch (m) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_HEAD: return "HEAD";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_OPTIONS: return "OPTIONS";
	case EVHTTP_REQ_TRACE: return "TRACE";
	case EVHTTP_REQ_CONNECT: return "CONNECT";
	case EVHTTP_REQ_PATCH: return "PATCH";
	}
	return "?";
}

/* Answers req (which is gone afterwards) with len bytes of body. */
static void send_body(struct evhttp_request *req, int status, const char *ctype,
		      const void *body, size_t len)
{
	struct evbuffer *b;

	if (!evhttp_request_get_connection(req)) {
		/* The client went away: libevent detached the request and
		 * left it to us; there is no one to answer. */
		evhttp_request_free(req);
		return;
	}
	b = evbuffer_new();
	if (!b || (len && evbuffer_add(b, body, len) != 0)) {
		if (b)
			evbuffer_free(b);
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Content-Type", ctype);
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Cache-Control", "no-store");
	evhttp_send_reply(req, status, phrase(status), b);
	evbuffer_free(b);
}

/* Answers with doc (stolen) as JSON. */
static void send_json(struct evhttp_request *req, int status, json_t *doc)
{
	static const char nomem[] = "{\"error\": \"out of memory\"}\n";
	char *text = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
	size_t n;

	json_decref(doc);
	if (!text) {
		send_body(req, 500, "application/json", nomem,
			  sizeof nomem - 1);
		return;
	}
	n = strlen(text);
	text[n] = '\n'; /* json_dumps leaves the NUL; the body is n + 1 */
	send_body(req, status, "application/json", text, n + 1);
	free(text);
}

static void send_error(struct evhttp_request *req, int status, const char *fmt,
		       ...) __attribute__((format(printf, 3, 4)));

/* {"error": "..."}: one line naming the culprit. */
static void send_error(struct evhttp_request *req, int status, const char *fmt,
		       ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	send_json(req, status, json_pack("{s:s}", "error", text));
}

/* ---- routing ------------------------------------------------------------------ */

static int pattern_match(const char *pat, const char *path)
{
	while (*pat) {
		if (*pat == '*') {
			size_t n = strcspn(path, "/");
			if (n == 0)
				return 0;
			path += n;
			pat++;
			continue;
		}
		if (*pat != *path)
			return 0;
		pat++;
		path++;
	}
	return *path == '\0';
}

/*
 * The route for (path, method), or NULL: then *path_known says whether the
 * path exists with other methods, listed in allow ("GET, POST").
 */
static const struct route *route_find(const char *path,
				      enum evhttp_cmd_type method,
				      int *path_known, char *allow,
				      size_t allowsz)
{
	const struct route *found = NULL;
	int pass, matched = 0;
	size_t i;

	allow[0] = '\0';
	for (pass = 0; pass < 2 && !matched; pass++)
		for (i = 0; i < N_ROUTES; i++) {
			const struct route *r = &routes[i];
			int wild = strchr(r->pattern, '*') != NULL;
			if (wild != pass || !pattern_match(r->pattern, path))
				continue;
			matched = 1;
			if (r->method == method)
				found = r;
			if (!strstr(allow, method_name(r->method)))
				snprintf(allow + strlen(allow),
					 allowsz - strlen(allow), "%s%s",
					 allow[0] ? ", " : "",
					 method_name(r->method));
		}
	*path_known = matched;
	return found;
}

/* ---- authorisation -------------------------------------------------------------- */

/* a (the client's, alen bytes) equals the configured token t, in a time
 * that depends only on t's length. */
static int token_equal(const char *a, size_t alen, const char *t)
{
	size_t tlen = strlen(t), i;
	unsigned char d = alen != tlen;

	for (i = 0; i < tlen; i++)
		d |= (unsigned char)t[i] ^
		     (unsigned char)(i < alen ? a[i] : t[i] ^ 1);
	return d == 0;
}

static int loopback(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1) {
		if (IN6_IS_ADDR_LOOPBACK(&a6))
			return 1;
		return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
	}
	return 0;
}

/*
 * Is this request meant for us? A browser always sends Host: one naming
 * another name (DNS rebinding) is refused, for reads too. Clients that send
 * no Host (HTTP/1.0 tools) are not browsers and pass.
 */
static int host_ok(struct admin *a, struct evhttp_request *req)
{
	const char *h = evhttp_find_header(
		evhttp_request_get_input_headers(req), "Host");
	const char *colon;
	char name[300];
	size_t n;
	long port;

	if (!h)
		return 1;
	colon = strrchr(h, ':');
	if (colon && strchr(colon, ']'))
		colon = NULL; /* "[::1]" without a port */
	n = colon ? (size_t)(colon - h) : strlen(h);
	if (n >= sizeof name)
		goto refuse;
	memcpy(name, h, n);
	name[n] = '\0';
	port = colon ? strtol(colon + 1, NULL, 10) : 80;
	if (port != a->c->admin.port)
		goto refuse;
	if (name[0] == '[' && n > 2 && name[n - 1] == ']') {
		memmove(name, name + 1, n - 2);
		name[n - 2] = '\0';
	}
	if (strcmp(name, a->c->admin.host) == 0 ||
	    strcmp(name, "localhost") == 0 || loopback(name))
		return 1;
refuse:
	send_error(req, 403,
		   "Host '%.200s' is not this node's admin address; use "
		   "http://%s:%u/",
		   h, a->c->admin.host, a->c->admin.port);
	return 0;
}

/*
 * Actions come from our own page or from tools, never from another site: they
 * must carry Content-Type application/json (which a cross-site form or
 * no-preflight fetch cannot send) and, when a browser names an Origin, it
 * must be this node's own.
 */
static int action_safe(struct evhttp_request *req, const char *what)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	const char *ct = evhttp_find_header(in, "Content-Type");
	const char *origin = evhttp_find_header(in, "Origin");
	const char *host = evhttp_find_header(in, "Host");

	if (!ct || evutil_ascii_strncasecmp(ct, "application/json", 16) != 0) {
		send_error(req, 415,
			   "%s needs 'Content-Type: application/json' (also "
			   "with an empty body)",
			   what);
		return 0;
	}
	if (origin && !(host && strncmp(origin, "http://", 7) == 0 &&
			strcmp(origin + 7, host) == 0)) {
		send_error(req, 403,
			   "%s from the web origin '%.200s' refused: actions "
			   "are taken only from this node's own page",
			   what, origin);
		return 0;
	}
	return 1;
}

/* A refused request, logged at most once per REFUSED_LOG_S (with how many
 * were refused meanwhile) so that guessing cannot flood the log. */
static void log_refused(struct admin *a, const char *what, const char *host,
			const char *why)
{
	struct timespec ts;
	char more[80] = "";

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (a->refused_logged &&
	    ts.tv_sec - a->refused_logged < REFUSED_LOG_S) {
		a->refused_quiet++;
		return;
	}
	if (a->refused_quiet)
		snprintf(more, sizeof more,
			 " (and %u more requests refused, not logged)",
			 a->refused_quiet);
	log_msg(LOG_WARN, "admin", NULL, NULL, "%s from %s refused: %s%s", what,
		host, why, more);
	a->refused_logged = ts.tv_sec ? ts.tv_sec : 1;
	a->refused_quiet = 0;
}

/* A 401 for want of the right token names the scheme it needs (RFC 6750)
 * beside its JSON error. */
static void want_bearer(struct evhttp_request *req)
{
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "WWW-Authenticate", "Bearer realm=\"semqd\"");
}

/*
 * May this request go on? An action (changes the tables) always asks; a
 * read asks only when [node] admin_token is set. Answers 401 and returns 0
 * if not.
 */
static int authorised(struct admin *a, struct evhttp_request *req,
		      const char *what)
{
	struct evhttp_connection *ec = evhttp_request_get_connection(req);
	const char *h, *tok, *host;
	char *peer = NULL;
	ev_uint16_t port = 0;

	if (ec)
		evhttp_connection_get_peer(ec, &peer, &port);
	host = peer ? peer : "?";
	if (!a->c->admin_token) {
		if (loopback(host))
			return 1;
		log_refused(a, what, host, "not loopback, and no admin_token");
		send_error(req, 401,
			   "%s from %s refused: [node] admin_token is not set, "
			   "so actions are accepted only from loopback",
			   what, host);
		return 0;
	}
	h = evhttp_find_header(evhttp_request_get_input_headers(req),
			       "Authorization");
	if (!h) {
		want_bearer(req);
		send_error(req, 401,
			   "%s needs an 'Authorization: Bearer TOKEN' header "
			   "([node] admin_token is set); the header is missing",
			   what);
		return 0;
	}
	if (evutil_ascii_strncasecmp(h, "Bearer ", 7) != 0) {
		want_bearer(req);
		send_error(req, 401,
			   "%s: the Authorization header must be 'Bearer "
			   "TOKEN'",
			   what);
		return 0;
	}
	for (tok = h + 7; *tok == ' '; tok++)
		;
	if (!token_equal(tok, strlen(tok), a->c->admin_token)) {
		log_refused(a, what, host, "wrong bearer token");
		want_bearer(req);
		send_error(req, 401,
			   "%s: the bearer token does not match [node] "
			   "admin_token",
			   what);
		return 0;
	}
	return 1;
}

/* ---- what the network thread answers ---------------------------------------------- */

static int64_t uptime_ms(const struct admin *a)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)(ts.tv_sec - a->started_mono.tv_sec) * 1000 +
	       (ts.tv_nsec - a->started_mono.tv_nsec) / 1000000;
}

/* "42m", "3h05m", "2d04h": how long, for people. */
static void duration_text(char *buf, size_t sz, int64_t ms)
{
	int64_t s = ms > 0 ? ms / 1000 : 0;

	if (s < 60)
		snprintf(buf, sz, "%" PRId64 "s", s);
	else if (s < 3600)
		snprintf(buf, sz, "%" PRId64 "m", s / 60);
	else if (s < 86400)
		snprintf(buf, sz, "%" PRId64 "h%02" PRId64 "m", s / 3600,
			 s / 60 % 60);
	else
		snprintf(buf, sz, "%" PRId64 "d%02" PRId64 "h", s / 86400,
			 s / 3600 % 24);
}

/* Appends o (taken) with {"reason": code, "text": text} to arr; out of
 * memory, the answer says less. */
static void add_reason(json_t *arr, json_t *o, const char *code,
		       const char *text)
{
	if (!o)
		return;
	if (!arr || json_object_set_new(o, "reason", json_string(code)) ||
	    json_object_set_new(o, "text", json_string(text))) {
		json_decref(o);
		return;
	}
	json_array_append_new(arr, o);
}

struct down_ctx {
	struct admin *a;
	json_t *reasons;
	int64_t now;
	unsigned char *seen; /* per configured peer: reported already */
};

/* /health: a peer this node dials down longer than peer_down_after. */
static void down_cb(void *ctx, const struct admin_peer *p)
{
	struct down_ctx *x = ctx;
	const struct config *c = x->a->c;
	char text[600], dur[32];
	size_t i;

	if (!p->configured || !p->dialled || !p->down_since || !p->peer ||
	    x->now - p->down_since < c->peer_down_after_ms)
		return;
	for (i = 0; i < c->n_peers; i++)
		if (!strcmp(c->peers[i].name, p->peer))
			break;
	if (i == c->n_peers || (x->seen && x->seen[i]))
		return;
	if (x->seen)
		x->seen[i] = 1;
	duration_text(dur, sizeof dur, x->now - p->down_since);
	snprintf(text, sizeof text,
		 "peer %s down for %s (longer than peer_down_after)%s%.300s",
		 p->peer, dur, p->last_error ? ": " : "",
		 p->last_error ? p->last_error : "");
	add_reason(x->reasons,
		   json_pack("{s:s, s:I, s:s?}", "peer", p->peer, "down_since",
			     (json_int_t)p->down_since, "last_error",
			     p->last_error),
		   "peer_down", text);
}

/*
 * Why the node is degraded (it serves, 200): peers it dials down longer
 * than peer_down_after, its oldest unconfirmed outbound message older than
 * backlog_age_warn, a store worker's plugin call over its deadline.
 */
static json_t *degraded_reasons(struct admin *a, const char *worker_what)
{
	struct down_ctx x = {a, json_array(), clock_real_ms(NULL), NULL};
	char dest[SEMQ_ID_MAX + 1] = "", text[400], dur[32];
	int64_t at;

	if (!x.reasons)
		return NULL;
	if (a->c->n_peers)
		x.seen = calloc(a->c->n_peers, 1);
	a->peers(a->peers_ctx, down_cb, &x);
	free(x.seen);
	at = a->w ? worker_backlog(a->w, dest, sizeof dest) : 0;
	if (at && x.now - at > a->c->backlog_age_warn_ms) {
		duration_text(dur, sizeof dur, x.now - at);
		snprintf(text, sizeof text,
			 "the oldest unconfirmed outbound message (to %s) is "
			 "%s old (longer than backlog_age_warn)",
			 dest, dur);
		add_reason(x.reasons,
			   json_pack("{s:s, s:I, s:I}", "dest", dest,
				     "oldest_at", (json_int_t)at, "age_s",
				     (json_int_t)((x.now - at) / 1000)),
			   "backlog_old", text);
	}
	if (worker_what && worker_what[0])
		add_reason(x.reasons, json_object(), "plugin_slow",
			   worker_what);
	return x.reasons;
}

/* GET /health/live: the process and its network thread run (200 whatever
 * the node's peers and store do; an orchestrator restarts on no answer). */
static void live(struct admin *a, struct evhttp_request *req)
{
	send_json(req, 200,
		  json_pack("{s:s, s:s, s:I}", "status", "alive", "node",
			    a->c->id, "uptime_s",
			    (json_int_t)(uptime_ms(a) / 1000)));
}

static void health(struct admin *a, struct evhttp_request *req)
{
	char what[1024] = "";
	json_t *reasons = NULL, *doc;
	int full = a->w && !a->stopping && worker_disk_full(a->w);
	int stuck = a->w && !a->stopping && !full &&
		    worker_stuck(a->w, what, sizeof what);
	/* A store worker stuck holds its stream only: the node serves the
	 * others, so 200, but says which stream waits. */
	int slow = a->w && !a->stopping && !full && !stuck &&
		   worker_degraded(a->w, what, sizeof what);
	int degraded;
	const char *status;

	if (a->w && !a->stopping)
		reasons = degraded_reasons(a, slow ? what : NULL);
	if (stuck)
		add_reason(reasons, json_object(), "plugin_stuck", what);
	if (full)
		add_reason(reasons, json_object(), "disk_full",
			   "the disk is full: new messages are refused until "
			   "space is freed");
	degraded = reasons && json_array_size(reasons) > 0;
	status = a->stopping ? "stopping"
		 : full      ? "disk full"
		 : stuck     ? "plugin stuck"
		 : degraded  ? "degraded"
		 : a->w      ? "ready"
			     : "starting";

	doc = json_pack("{s:s, s:s, s:I, s:s?}", "status", status, "node",
			a->c->id, "uptime_s", (json_int_t)(uptime_ms(a) / 1000),
			"detail", stuck || slow ? what : NULL);
	if (doc) /* out of memory, it goes without them */
		(void)json_object_set_new(doc, "reasons",
					  reasons ? reasons : json_array());
	else
		json_decref(reasons);
	send_json(req, a->w && !a->stopping && !full && !stuck ? 200 : 503,
		  doc);
}

struct peers_ctx {
	json_t *arr;
	int64_t now;
	int failed;
};

static json_t *int_or_null(int64_t v)
{
	return v ? json_integer(v) : json_null();
}

static void peer_json_cb(void *ctx, const struct admin_peer *p)
{
	struct peers_ctx *x = ctx;
	json_t *o;

	if (x->failed)
		return;
	o = json_pack(
		"{s:s?, s:s?, s:s, s:s, s:s?, s:o, s:o, s:o, s:I, s:b}", "peer",
		p->peer, "instance",
		p->instance && p->instance[0] ? p->instance : NULL, "state",
		p->state < 0 ? "disconnected" : conn_state_text(p->state),
		"direction", p->outbound ? "dialled" : "accepted", "address",
		p->address, "conn_id", int_or_null((int64_t)p->conn_id),
		"since", int_or_null(p->since), "ready_at",
		int_or_null(p->ready_at), "pending_bytes",
		(json_int_t)p->pending, "paused", p->paused);
	if (o && p->state < 0)
		if (json_object_set_new(o, "next_dial_at",
					int_or_null(p->next_dial_at)) ||
		    json_object_set_new(
			    o, "next_dial_in_ms",
			    p->next_dial_at
				    ? json_integer(p->next_dial_at > x->now
							   ? p->next_dial_at -
								     x->now
							   : 0)
				    : json_null()) ||
		    json_object_set_new(o, "attempts",
					json_integer(p->attempts))) {
			json_decref(o);
			o = NULL;
		}
	/* a configured peer: whether and since when it is down */
	if (o &&
	    (json_object_set_new(o, "configured",
				 json_boolean(p->configured)) ||
	     json_object_set_new(o, "down_since", int_or_null(p->down_since)) ||
	     json_object_set_new(
		     o, "down_for_ms",
		     p->down_since
			     ? json_integer(x->now > p->down_since
						    ? x->now - p->down_since
						    : 0)
			     : json_null()) ||
	     json_object_set_new(o, "last_error",
				 p->last_error ? json_string(p->last_error)
					       : json_null()))) {
		json_decref(o);
		o = NULL;
	}
	if (!o || json_array_append_new(x->arr, o))
		x->failed = 1;
}

static void peers(struct admin *a, struct evhttp_request *req)
{
	struct peers_ctx x = {json_array(), clock_real_ms(NULL), 0};

	if (!x.arr) {
		send_error(req, 500, "out of memory");
		return;
	}
	a->peers(a->peers_ctx, peer_json_cb, &x);
	if (x.failed) {
		json_decref(x.arr);
		send_error(req, 500, "out of memory");
		return;
	}
	send_json(req, 200,
		  json_pack("{s:s, s:I, s:o}", "node", a->c->id, "now",
			    (json_int_t)x.now, "peers", x.arr));
}

/* ---- /metrics: the network's and the worker's part ---------------------------- */

#define N_STATES (CONN_CLOSING + 1)

struct conn_count {
	const struct config *c;
	uint64_t state[N_STATES];
	uint64_t paused;      /* connections not read from: memory_budget */
	unsigned char *ready; /* per configured peer */
	int64_t *down;        /* per configured peer: down since, unix ms */
};

static void count_cb(void *ctx, const struct admin_peer *p)
{
	struct conn_count *x = ctx;
	size_t i;

	for (i = 0; x->down && p->configured && p->peer && i < x->c->n_peers;
	     i++)
		if (!strcmp(x->c->peers[i].name, p->peer))
			x->down[i] = p->down_since;
	if (p->state < 0 || p->state >= N_STATES)
		return;
	x->state[p->state]++;
	x->paused += p->paused != 0;
	if (p->state != CONN_READY || !p->peer || !x->ready)
		return;
	for (i = 0; i < x->c->n_peers; i++)
		if (!strcmp(x->c->peers[i].name, p->peer))
			x->ready[i] = 1;
}

static void counter(struct evbuffer *b, const char *name, const char *help,
		    uint64_t v)
{
	evbuffer_add_printf(b,
			    "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n",
			    name, help, name, name, v);
}

static void gauge(struct evbuffer *b, const char *name, const char *help,
		  double v)
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n",
			    name, help, name, name, v);
}

/* A histogram; bounds and sum are scaled by `scale` (1e-6: µs -> s). */
static void histogram(struct evbuffer *b, const char *name, const char *help,
		      const struct worker_hist *h, double scale)
{
	uint64_t cum = 0;
	size_t i;

	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name,
			    help, name);
	for (i = 0; i < h->n; i++) {
		cum += h->count[i];
		if (i + 1 < h->n)
			evbuffer_add_printf(
				b, "%s_bucket{le=\"%.6g\"} %" PRIu64 "\n", name,
				(double)h->bound[i] * scale, cum);
		else
			evbuffer_add_printf(
				b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name,
				cum);
	}
	if (scale == 1.0)
		evbuffer_add_printf(b, "%s_sum %" PRIu64 "\n", name, h->sum);
	else
		evbuffer_add_printf(b, "%s_sum %.6f\n", name,
				    (double)h->sum * scale);
	evbuffer_add_printf(b, "%s_count %" PRIu64 "\n", name, h->total);
}

/* worker_plugin_cb: a plugin's line per outcome. */
static void plugin_cb(void *ctx, const char *plugin, const uint64_t *outcome)
{
	struct evbuffer *b = ctx;
	int k;

	for (k = 0; k < PLUGHOST_OUTCOMES; k++)
		evbuffer_add_printf(b,
				    "semq_plugin_calls_total{plugin=\"%s\","
				    "outcome=\"%s\"} %" PRIu64 "\n",
				    plugin ? plugin : "?",
				    plughost_outcome_text(k), outcome[k]);
}

static void network_metrics(struct admin *a, struct evbuffer *b)
{
	struct conn_count x = {a->c, {0}, 0, NULL, NULL};
	struct worker_stats s;
	struct net_stats ns;
	struct conn_stats cs;
	size_t i;

	if (a->w) {
		worker_get_stats(a->w, &s);
		counter(b, "semq_messages_sent_total",
			"Outbound messages (tb_0031 rows) put in Data frames: "
			"resends, tombstones and a relay's stored copies "
			"included.",
			s.sent);
		counter(b, "semq_messages_confirmed_total",
			"Outbound messages confirmed by their destination "
			"(tb_0031 status 100).",
			s.confirmed);
		counter(b, "semq_messages_received_total",
			"Messages recorded as received in tb_0030 (exactly "
			"once each).",
			s.received);
		counter(b, "semq_messages_duplicate_total",
			"Copies of messages received before: recognised, not "
			"applied again.",
			s.duplicates);
		counter(b, "semq_redo_created_total",
			"Received messages queued in tb_0033: plugin failures, "
			"messages behind an unfinished key, delayed messages.",
			s.redo_created);
		counter(b, "semq_messages_refused_total",
			"Copies refused as another message under a seq seen "
			"before (conflict) or no longer known (undecided): "
			"not applied; their origin renumbers or holds them.",
			s.refused);
		counter(b, "semq_resyncs_total",
			"Times this node found its database behind what a peer "
			"had seen of its streams (restored from an older "
			"copy?): a counter moved by stream state, or a "
			"conflict that renumbered messages.",
			s.resyncs);
		counter(b, "semq_messages_renumbered_total",
			"Own messages given a new seq after a conflict.",
			s.renumbered);
		counter(b, "semq_messages_held_total",
			"Messages (or a relay's copies) held for the operator: "
			"their destination could not tell whether it has them.",
			s.held);
		counter(b, "semq_messages_undeliverable_total",
			"Own messages a relay refused because it does not "
			"know their destination: dead in tb_0033 for the "
			"operator (semqctl redo).",
			s.undeliverable);
		evbuffer_add_printf(
			b,
			"# HELP semq_relay_refused_total Messages this relay "
			"refused to take custody of, by reason (their "
			"origins keep them).\n"
			"# TYPE semq_relay_refused_total counter\n");
		evbuffer_add_printf(
			b,
			"semq_relay_refused_total{reason=\"quota\"} "
			"%" PRIu64 "\n",
			s.relay_refused[SEMQ__RELAY_REFUSAL__QUOTA]);
		evbuffer_add_printf(
			b,
			"semq_relay_refused_total{reason=\"unknown_dest\"} "
			"%" PRIu64 "\n",
			s.relay_refused[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST]);
		evbuffer_add_printf(
			b,
			"semq_relay_refused_total{reason=\"loop\"} %" PRIu64
			"\n",
			s.relay_refused[SEMQ__RELAY_REFUSAL__LOOP]);
		counter(b, "semq_relay_forwarded_total",
			"Messages for other nodes this relay passed on to "
			"their connected next hop, once committed (a copy "
			"sent again by its origin counts again).",
			s.relay_forwarded);
		counter(b, "semq_relay_stored_total",
			"Messages for other nodes this relay took into "
			"custody (store_and_forward), once committed.",
			s.relay_stored);
		histogram(b, "semq_delivery_latency_seconds",
			  "Messages recorded as received here: the time from "
			  "their created_at at the origin (its clock) to the "
			  "commit here; clock skew shifts it, a negative "
			  "value counts as 0.",
			  &s.latency_ms, 1e-3);
		counter(b, "semq_frames_looped_total",
			"Acknowledgements and queries this relay did not "
			"pass on: they had passed max_hops relays (a routing "
			"loop).",
			s.looped);
		counter(b, "semq_traces_refused_total",
			"Traces (semqctl trace) answered with this node's "
			"records only: too many were in progress.",
			s.traces_refused);
		counter(b, "semq_plugin_deadline_exceeded_total",
			"Plugin calls that ran longer than their [plugin] "
			"deadline (each counted once, while it still ran).",
			s.plugin_overdue);
		evbuffer_add_printf(
			b, "# HELP semq_plugin_calls_total Plugin calls by "
			   "outcome: ok, retry, permanent (an invalid return "
			   "code included), crash (not handed to the plugin: "
			   "the message crashed the node before), deadline "
			   "(returned after its [plugin] deadline; also "
			   "counted by what it returned).\n"
			   "# TYPE semq_plugin_calls_total counter\n");
		worker_plugin_outcomes(a->w, plugin_cb, b);
		gauge(b, "semq_disk_full",
		      "1 while the store has no room to write: Data is "
		      "refused (the senders keep it) and /health answers "
		      "503 until a probe commits again.",
		      worker_disk_full(a->w) ? 1.0 : 0.0);
		evbuffer_add_printf(
			b, "# HELP semq_disk_full_probes_total Space probes "
			   "while the disk is full, every 2 s: failed (still "
			   "full) or ok (the state ended).\n"
			   "# TYPE semq_disk_full_probes_total counter\n");
		evbuffer_add_printf(
			b,
			"semq_disk_full_probes_total{result=\"failed\"} "
			"%" PRIu64 "\n"
			"semq_disk_full_probes_total{result=\"ok\"} %" PRIu64
			"\n",
			s.disk_probes[0], s.disk_probes[1]);
		gauge(b, "semq_store_workers",
		      "Store workers applying received messages (1: the "
		      "store thread itself).",
		      (double)worker_workers(a->w));
		gauge(b, "semq_apply_queue_jobs",
		      "Received frames waiting for a store worker.",
		      (double)s.apply_queued);
		gauge(b, "semq_slow_streams",
		      "Streams whose last frame ran longer than a store "
		      "worker's slice: taken alone, never in a batch with "
		      "others.",
		      (double)s.slow_streams);
		counter(b, "semq_commit_batches_total",
			"Transactions of the store thread (one per batch of "
			"jobs and periodic work).",
			s.batches);
		histogram(b, "semq_commit_batch_jobs",
			  "Jobs per batch that carried work.", &s.batch_jobs,
			  1.0);
		histogram(b, "semq_commit_batch_messages",
			  "Messages per batch that carried work: received, "
			  "duplicates and sent.",
			  &s.batch_messages, 1.0);
		histogram(b, "semq_commit_duration_seconds",
			  "Time of a batch that carried work, from BEGIN to "
			  "its last COMMIT.",
			  &s.commit_us, 1e-6);
	}
	if (a->c->n_peers) {
		x.ready = calloc(a->c->n_peers, 1);
		x.down = calloc(a->c->n_peers, sizeof *x.down);
	}
	a->peers(a->peers_ctx, count_cb, &x);
	evbuffer_add_printf(b, "# HELP semq_connections Peer connections by "
			       "state.\n# TYPE semq_connections gauge\n");
	for (i = 0; i < N_STATES; i++)
		evbuffer_add_printf(
			b, "semq_connections{state=\"%s\"} %" PRIu64 "\n",
			conn_state_text((int)i), x.state[i]);
	if (x.ready) {
		evbuffer_add_printf(
			b, "# HELP semq_peer_ready 1 when a configured peer "
			   "has a connection in state ready.\n"
			   "# TYPE semq_peer_ready gauge\n");
		for (i = 0; i < a->c->n_peers; i++)
			evbuffer_add_printf(b,
					    "semq_peer_ready{peer=\"%s\"} %d\n",
					    a->c->peers[i].name, x.ready[i]);
	}
	if (x.down) {
		int64_t now = clock_real_ms(NULL);

		evbuffer_add_printf(
			b,
			"# HELP semq_peer_down_seconds How long a configured "
			"peer has had no ready connection (since the start "
			"when it never had one); 0 while it is up.\n"
			"# TYPE semq_peer_down_seconds gauge\n");
		for (i = 0; i < a->c->n_peers; i++) {
			int64_t d = x.down[i] && now > x.down[i]
					    ? now - x.down[i]
					    : 0;
			evbuffer_add_printf(
				b,
				"semq_peer_down_seconds{peer=\"%s\"} "
				"%" PRId64 ".%03d\n",
				a->c->peers[i].name, d / 1000, (int)(d % 1000));
		}
	}
	free(x.ready);
	free(x.down);
	/* the network's bounds (docs/ARCHITECTURE.md, "Limits") */
	net_get_stats(&ns);
	evbuffer_add_printf(
		b,
		"# HELP semq_handshakes Connections accepted or dialled whose "
		"certificate is not verified yet (bound: max_handshakes).\n"
		"# TYPE semq_handshakes gauge\nsemq_handshakes %u\n"
		"# HELP semq_connections_authenticated Connections past TLS "
		"(bound: max_connections).\n"
		"# TYPE semq_connections_authenticated gauge\n"
		"semq_connections_authenticated %u\n",
		ns.handshakes, ns.authenticated);
	evbuffer_add_printf(
		b, "# HELP semq_connections_refused_total Connections refused "
		   "by a bound or a rule, by reason: at accept (per address, "
		   "handshakes) or once the certificate was verified.\n"
		   "# TYPE semq_connections_refused_total counter\n");
	for (i = 0; i < NET_REFUSED_N; i++)
		evbuffer_add_printf(
			b,
			"semq_connections_refused_total{reason=\"%s\"}"
			" %" PRIu64 "\n",
			net_refusal_text((int)i), ns.refused[i]);
	evbuffer_add_printf(
		b,
		"# HELP semq_connections_evicted_total Connections closed to "
		"make room for a newer one, by reason: the oldest handshake "
		"(max_handshakes), a peer's oldest connection "
		"(max_connections_per_peer).\n"
		"# TYPE semq_connections_evicted_total counter\n");
	for (i = 0; i < NET_EVICTED_N; i++)
		evbuffer_add_printf(
			b,
			"semq_connections_evicted_total{reason=\"%s\"}"
			" %" PRIu64 "\n",
			net_eviction_text((int)i), ns.evicted[i]);
	conn_get_stats(&cs);
	evbuffer_add_printf(
		b, "# HELP semq_connections_failed_total Connections that "
		   "failed before they were ready, by direction (accepted, "
		   "dialled) and reason: the dial (refused, timeout, dns, "
		   "unreachable, reset, closed, other) or the TLS handshake "
		   "(unknown_ca, expired, revoked, id_mismatch, no_cert, "
		   "version, tls).\n"
		   "# TYPE semq_connections_failed_total counter\n");
	for (i = 0; i < 2 * CONN_FAIL_N; i++)
		evbuffer_add_printf(
			b,
			"semq_connections_failed_total{direction=\"%s\","
			"reason=\"%s\"} %" PRIu64 "\n",
			i < CONN_FAIL_N ? "accepted" : "dialled",
			conn_failure_text((int)(i % CONN_FAIL_N)),
			cs.failed[i / CONN_FAIL_N][i % CONN_FAIL_N]);
	counter(b, "semq_handshake_timeouts_total",
		"Connections closed for not finishing TLS and Hello within "
		"handshake_timeout.",
		ns.handshake_timeouts);
	counter(b, "semq_slow_readers_closed_total",
		"Connections closed because the peer took nothing of its "
		"pending output for write_timeout.",
		ns.slow_readers);
	counter(b, "semq_accept_pauses_total",
		"Times accept() failed (descriptors exhausted) and the "
		"listener paused with a back-off.",
		ns.accept_pauses);
	counter(b, "semq_accept_failures_total",
		"accept() calls that failed, all pauses together.",
		ns.accept_failures);
	evbuffer_add_printf(b,
			    "# HELP semq_accept_paused 1 while the listener "
			    "waits for descriptors.\n"
			    "# TYPE semq_accept_paused gauge\n"
			    "semq_accept_paused %d\n",
			    ns.accept_paused);
	/* memory_budget: back-pressure on the peers that fill it */
	evbuffer_add_printf(
		b,
		"# HELP semq_store_queue_bytes Bytes of received frames "
		"waiting for the store thread and of messages held for a "
		"missing predecessor (bound: memory_budget).\n"
		"# TYPE semq_store_queue_bytes gauge\n"
		"semq_store_queue_bytes %zu\n",
		a->w ? worker_queued_bytes(a->w, NULL) : (size_t)0);
	counter(b, "semq_read_pauses_total",
		"Times reading from a peer paused because memory_budget was "
		"reached (back-pressure; resumed below half of it).",
		ns.pauses);
	evbuffer_add_printf(b,
			    "# HELP semq_connections_paused Connections not "
			    "read from now, for memory_budget.\n"
			    "# TYPE semq_connections_paused gauge\n"
			    "semq_connections_paused %" PRIu64 "\n",
			    x.paused);
	evbuffer_add_printf(
		b,
		"# HELP semq_log_lines_suppressed_total Log lines left out by "
		"the rate limits (the counters above have every event): a "
		"peer's Error frames, refusals and connections that never "
		"authenticated.\n"
		"# TYPE semq_log_lines_suppressed_total counter\n"
		"semq_log_lines_suppressed_total{kind=\"peer_error\"} "
		"%" PRIu64 "\n"
		"semq_log_lines_suppressed_total{kind=\"connection\"} "
		"%" PRIu64 "\n",
		ns.errors_suppressed, ns.lines_suppressed);
	if (ns.cert_not_after || ns.ca_not_after)
		evbuffer_add_printf(
			b, "# HELP semq_tls_cert_expiry_timestamp_seconds When "
			   "a certificate expires (notAfter), unix seconds: "
			   "this node's (cert=\"node\") and the earliest of "
			   "its CA file (cert=\"ca\").\n"
			   "# TYPE semq_tls_cert_expiry_timestamp_seconds "
			   "gauge\n");
	if (ns.cert_not_after)
		evbuffer_add_printf(b,
				    "semq_tls_cert_expiry_timestamp_seconds{"
				    "cert=\"node\"} %" PRId64 "\n",
				    ns.cert_not_after);
	if (ns.ca_not_after)
		evbuffer_add_printf(b,
				    "semq_tls_cert_expiry_timestamp_seconds{"
				    "cert=\"ca\"} %" PRId64 "\n",
				    ns.ca_not_after);
	evbuffer_add_printf(
		b,
		"# HELP semq_build_info This semqd's version and database "
		"(the value is always 1).\n"
		"# TYPE semq_build_info gauge\n"
		"semq_build_info{version=\"%s\",db=\"%s\"} 1\n",
		SEMQ_VERSION, a->c->db_url ? "postgresql" : "sqlite");
	if (a->c->tls_crl) {
		counter(b, "semq_tls_crl_reloads_total",
			"Times [tls] crl was read again (SIGHUP, or the file "
			"changed).",
			ns.crl_reloads);
		counter(b, "semq_tls_crl_reload_failures_total",
			"Attempts to read [tls] crl again that failed (the "
			"lists read before stay in force).",
			ns.crl_failures);
		if (ns.crl_next_update)
			evbuffer_add_printf(
				b,
				"# HELP semq_tls_crl_next_update_seconds The "
				"earliest nextUpdate of the loaded CRLs, unix "
				"seconds: past it, the list is stale.\n"
				"# TYPE semq_tls_crl_next_update_seconds "
				"gauge\n"
				"semq_tls_crl_next_update_seconds %" PRId64
				"\n",
				ns.crl_next_update);
	}
	evbuffer_add_printf(b,
			    "# HELP semq_start_time_seconds When semqd "
			    "started, unix seconds.\n"
			    "# TYPE semq_start_time_seconds gauge\n"
			    "semq_start_time_seconds %" PRId64 ".%03d\n",
			    a->started_at / 1000, (int)(a->started_at % 1000));
}

/* ---- requests for the store thread ----------------------------------------------- */

static void pending_unlink(struct admin *a, struct pending *p)
{
	struct pending **pp;

	for (pp = &a->pending; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			a->n_pending--;
			break;
		}
	if (p->timer)
		event_free(p->timer);
	free(p);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * /metrics: the tables' part (from the store thread, `tables` of age
 * `age_ms`, -1 when there is none) and the network's, which is always
 * current. semq_metrics_tables_age_seconds says how old the first part is:
 * 0 when the store thread answered this request, more when it was busy
 * (a long lock on the database) and its last answer was used.
 */
static void send_metrics(struct admin *a, struct evhttp_request *req,
			 const char *tables, size_t len, int64_t age_ms)
{
	struct evbuffer *b = evbuffer_new();
	size_t n;
	char *body;

	if (!b || (len && evbuffer_add(b, tables, len) != 0)) {
		if (b)
			evbuffer_free(b);
		send_error(req, 500, "out of memory");
		return;
	}
	evbuffer_add_printf(
		b,
		"# HELP semq_metrics_tables_age_seconds How old the counts of "
		"the tables above are: 0 when the store thread answered this "
		"request; when it was busy (the database locked) its last "
		"answer is used; -1: none yet.\n"
		"# TYPE semq_metrics_tables_age_seconds gauge\n"
		"semq_metrics_tables_age_seconds %.3f\n",
		age_ms < 0 ? -1.0 : (double)age_ms / 1000.0);
	network_metrics(a, b);
	n = evbuffer_get_length(b);
	body = (char *)evbuffer_pullup(b, -1);
	if (body)
		send_body(req, 200, "text/plain; version=0.0.4; charset=utf-8",
			  body, n);
	else
		send_error(req, 500, "out of memory");
	evbuffer_free(b);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	struct admin *a = p->a;
	int64_t waited;

	(void)fd;
	(void)what;
	if (p->metrics) {
		/* The bounds' metrics matter most when the store is stuck:
		 * answer with what is known. */
		log_msg(LOG_DEBUG, "admin", NULL, NULL,
			"request %" PRIu64 ": /metrics with the tables' counts "
			"of %s (the store thread did not answer within %d s)",
			p->id, a->tables ? "its last answer" : "none yet",
			METRICS_TIMEOUT_S);
		send_metrics(a, p->req, a->tables, a->tables_len,
			     a->tables ? mono_ms() - a->tables_at : -1);
		pending_unlink(a, p);
		return;
	}
	/* libevent's coarse clock may fire a tick early: wait the rest, so
	 * that 10 s is 10 s by this node's own clock, which the line says. */
	waited = mono_ms() - p->submitted_ms;
	if (waited < REPLY_TIMEOUT_S * 1000) {
		struct timeval rest = {
			(time_t)((REPLY_TIMEOUT_S * 1000 - waited) / 1000),
			(suseconds_t)((REPLY_TIMEOUT_S * 1000 - waited) % 1000 *
				      1000)};

		evtimer_add(p->timer, &rest);
		return;
	}
	log_msg(LOG_WARN, "admin", NULL, NULL,
		"request %" PRIu64 ": no answer from the store thread within "
		"%d s (waited %" PRId64 " ms)",
		p->id, REPLY_TIMEOUT_S, waited);
	send_error(p->req, 503,
		   "the store thread did not answer within %d s; try again",
		   REPLY_TIMEOUT_S);
	pending_unlink(p->a, p);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* Copies req into a new admin_req (NULL when out of memory). */
static struct admin_req *copy_request(struct evhttp_request *req, uint64_t id,
				      const char *method, const char *path,
				      const char *query)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t n = in ? evbuffer_get_length(in) : 0;
	struct admin_req *q = calloc(1, sizeof *q);

	struct evhttp_connection *ec = evhttp_request_get_connection(req);
	char *peer = NULL;
	ev_uint16_t port = 0;

	if (!q)
		return NULL;
	if (ec)
		evhttp_connection_get_peer(ec, &peer, &port);
	snprintf(q->client, sizeof q->client, "%s:%u", peer ? peer : "?",
		 (unsigned)port);
	q->req_id = id;
	q->method = strdup(method);
	q->path = strdup(path);
	q->query = dup_or_null(query);
	if (n) {
		q->body = malloc(n + 1);
		if (q->body) {
			evbuffer_copyout(in, q->body, n);
			q->body[n] = '\0';
			q->body_len = n;
		}
	}
	if (!q->method || !q->path || (query && !q->query) || (n && !q->body)) {
		admin_req_free(q);
		return NULL;
	}
	return q;
}

static void to_store(struct admin *a, struct evhttp_request *req,
		     const struct route *rt, const char *method,
		     const char *path, const char *query)
{
	struct timeval tv = {rt->metrics ? METRICS_TIMEOUT_S : REPLY_TIMEOUT_S,
			     0};
	struct pending *p = NULL;
	struct job *j = NULL;

	if (a->stopping || !a->w) {
		send_error(req, 503, "the node is %s",
			   a->stopping ? "stopping" : "starting");
		return;
	}
	if (a->n_pending >= MAX_PENDING) {
		send_error(req, 503,
			   "busy: %d requests wait for the store thread",
			   MAX_PENDING);
		return;
	}
	p = calloc(1, sizeof *p);
	j = job_new(JOB_ADMIN);
	if (!p || !j)
		goto nomem;
	p->a = a;
	p->id = ++a->next_id;
	p->req = req;
	p->metrics = rt->metrics;
	p->submitted_ms = mono_ms();
	p->timer = evtimer_new(a->base, timeout_cb, p);
	j->admin = copy_request(req, p->id, method, path, query);
	if (!p->timer || !j->admin)
		goto nomem;
	evtimer_add(p->timer, &tv);
	p->next = a->pending;
	a->pending = p;
	a->n_pending++;
	worker_submit(a->w, j);
	return;
nomem:
	if (p && p->timer)
		event_free(p->timer);
	free(p);
	job_free(j);
	send_error(req, 500, "out of memory");
}

void admin_deliver(struct admin *a, struct out *o)
{
	struct pending *p;
	char *copy;

	for (p = a->pending; p; p = p->next)
		if (p->id == o->req_id)
			break;
	if (!p) {
		log_msg(LOG_DEBUG, "admin", NULL, NULL,
			"request %" PRIu64 ": answered already; late answer "
			"dropped",
			o->req_id);
		return;
	}
	if (!p->metrics || o->http_status != 200) {
		send_body(p->req, o->http_status, "application/json", o->bytes,
			  o->len);
		pending_unlink(a, p);
		return;
	}
	copy = malloc(o->len ? o->len : 1);
	if (copy) {
		memcpy(copy, o->bytes, o->len);
		free(a->tables);
		a->tables = copy;
		a->tables_len = o->len;
		a->tables_at = mono_ms();
	}
	send_metrics(a, p->req, (const char *)o->bytes, o->len, 0);
	pending_unlink(a, p);
}

/* ---- the server ------------------------------------------------------------------- */

/*
 * accept() on the admin port failed for want of descriptors (EMFILE,
 * ENFILE): the socket stays readable and libevent would call again at once,
 * for ever. The listener pauses ADMIN_ACCEPT_PAUSE_MS instead; one line
 * starts the episode, the next request ends it with the count (net.c does
 * the same, with a back-off, for the peers' port).
 */
#define ADMIN_ACCEPT_PAUSE_MS 1000

/* The admin whose listener this is: libevent hands the error callback the
 * argument of evhttp's accept callback (the evhttp), so it is found here;
 * there is one admin per process. */
static struct admin *listening;

static void accept_error(struct evconnlistener *l, void *arg)
{
	struct admin *a = listening;
	struct timeval tv = {ADMIN_ACCEPT_PAUSE_MS / 1000,
			     (ADMIN_ACCEPT_PAUSE_MS % 1000) * 1000};

	(void)arg;
	if (!a || a->listener != l)
		return;
	if (!a->accept_failed++)
		log_msg(LOG_WARN, "admin", NULL, NULL,
			"accept: %s; the admin port takes no connection for "
			"%d ms, then tries again",
			evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()),
			ADMIN_ACCEPT_PAUSE_MS);
	evconnlistener_disable(l);
	if (evtimer_add(a->accept_retry, &tv) != 0)
		evconnlistener_enable(l); /* cannot wait: as before */
}

static void accept_retry(evutil_socket_t fd, short what, void *arg)
{
	struct admin *a = arg;

	(void)fd;
	(void)what;
	if (a->stopping || !a->listener)
		return;
	evconnlistener_enable(a->listener);
}

/* A request came: accept() works again, the episode is over. */
static void accept_works(struct admin *a)
{
	if (!a->accept_failed)
		return;
	log_msg(LOG_INFO, "admin", NULL, NULL,
		"accepting connections again, after %u failed accept() calls",
		a->accept_failed);
	a->accept_failed = 0;
}

/* A file of the dashboard (webui.h), GET only. The page may load nothing
 * but its own origin's files and API, and may not be framed. */
static void serve_file(struct evhttp_request *req, enum evhttp_cmd_type m,
		       const char *path, const struct webui_file *f)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	if (m != EVHTTP_REQ_GET) {
		evhttp_add_header(h, "Allow", "GET");
		send_error(req, 405,
			   "%s is not allowed on %.200s; allowed: GET",
			   method_name(m), path);
		return;
	}
	evhttp_add_header(h, "Content-Security-Policy",
			  "default-src 'self'; frame-ancestors 'none'");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	send_body(req, 200, f->content_type, f->bytes, f->len);
}

static void on_request(struct evhttp_request *req, void *arg)
{
	struct admin *a = arg;
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const struct webui_file *f;
	const struct route *rt;
	const char *path, *query;
	char allow[64], what[300];
	int known;

	accept_works(a);
	path = uri ? evhttp_uri_get_path(uri) : NULL;
	query = uri ? evhttp_uri_get_query(uri) : NULL;
	if (!path || !path[0])
		path = "/";
	if (!host_ok(a, req))
		return;
	f = webui_find(path);
	if (f) {
		serve_file(req, m, path, f);
		return;
	}
	rt = route_find(path, m, &known, allow, sizeof allow);
	if (!rt && !known) {
		send_error(req, 404,
			   "no such resource '%.200s'; there are /health, "
			   "/peers, /metrics, /streams, /redo and /redo/ID",
			   path);
		return;
	}
	if (!rt) {
		evhttp_add_header(evhttp_request_get_output_headers(req),
				  "Allow", allow);
		send_error(req, 405, "%s is not allowed on %.200s; allowed: %s",
			   method_name(m), path, allow);
		return;
	}
	snprintf(what, sizeof what, "%s %.200s", method_name(m), path);
	if (rt->action &&
	    (!action_safe(req, what) || !authorised(a, req, what)))
		return;
	/* Reads: everything but /health needs the token when there is one. */
	if (!rt->action && rt->kind != RK_HEALTH && rt->kind != RK_LIVE &&
	    a->c->admin_token && !authorised(a, req, what))
		return;
	switch (rt->kind) {
	case RK_HEALTH: health(a, req); break;
	case RK_LIVE: live(a, req); break;
	case RK_PEERS: peers(a, req); break;
	default: to_store(a, req, rt, method_name(m), path, query); break;
	}
}

int admin_new(struct event_base *base, const struct config *c,
	      admin_peers_fn peers_fn, void *peers_ctx, struct admin **out,
	      char *err, size_t errsz)
{
	struct evconnlistener *l = NULL;
	struct sockaddr_storage ss;
	int sslen = sizeof ss;
	struct admin *a;
	char hp[300];
	int r = SEMQ_ERR_NOMEM;

	*out = NULL;
	a = calloc(1, sizeof *a);
	if (!a) {
		snprintf(err, errsz, "out of memory");
		return SEMQ_ERR_NOMEM;
	}
	a->c = c;
	a->base = base;
	a->peers = peers_fn;
	a->peers_ctx = peers_ctx;
	a->started_at = clock_real_ms(NULL);
	clock_gettime(CLOCK_MONOTONIC, &a->started_mono);
	snprintf(hp, sizeof hp,
		 strchr(c->admin.host, ':') ? "[%s]:%u" : "%s:%u",
		 c->admin.host, c->admin.port);
	if (evutil_parse_sockaddr_port(hp, (struct sockaddr *)&ss, &sslen) !=
	    0) {
		snprintf(err, errsz,
			 "[node] admin: '%s' is not a numeric address", hp);
		r = SEMQ_ERR_CONFIG;
		goto out;
	}
	a->http = evhttp_new(base);
	if (!a->http) {
		snprintf(err, errsz, "[node] admin: out of memory");
		goto out;
	}
	l = evconnlistener_new_bind(base, NULL, NULL,
				    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
					    LEV_OPT_CLOSE_ON_EXEC,
				    64, (struct sockaddr *)&ss, sslen);
	if (!l) {
		snprintf(err, errsz, "[node] admin %s: %s", hp,
			 strerror(errno));
		r = SEMQ_ERR_IO;
		goto out;
	}
	if (!evhttp_bind_listener(a->http, l)) { /* owns l from here */
		evconnlistener_free(l);
		snprintf(err, errsz, "[node] admin %s: out of memory", hp);
		goto out;
	}
	a->listener = l;
	a->accept_retry = evtimer_new(base, accept_retry, a);
	if (!a->accept_retry) {
		snprintf(err, errsz, "[node] admin %s: out of memory", hp);
		goto out;
	}
	listening = a;
	evconnlistener_set_error_cb(l, accept_error);
	evhttp_set_gencb(a->http, on_request, a);
	evhttp_set_allowed_methods(
		a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
				 EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
				 EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
	evhttp_set_max_body_size(a->http, MAX_BODY);
	evhttp_set_max_headers_size(a->http, MAX_HEADERS);
	evhttp_set_timeout(a->http, IDLE_TIMEOUT_S);
	if (!loopback(c->admin.host) && !c->admin_token)
		log_msg(LOG_WARN, "admin", NULL, NULL,
			"[node] admin %s is not a loopback address: anyone who "
			"can reach it reads the node's state (actions stay "
			"loopback-only, and payloads hidden, without "
			"admin_token)",
			hp);
	*out = a;
	a = NULL;
	r = SEMQ_OK;
out:
	admin_free(a);
	return r;
}

void admin_attach_worker(struct admin *a, struct worker *w)
{
	a->w = w;
}

void admin_set_config(struct admin *a, const struct config *c)
{
	a->c = c;
}

void admin_stopping(struct admin *a)
{
	a->stopping = 1;
}

void admin_drain(struct admin *a)
{
	a->stopping = 1;
	while (a->pending) {
		send_error(a->pending->req, 503, "the node is stopping");
		pending_unlink(a, a->pending);
	}
	a->w = NULL;
}

void admin_free(struct admin *a)
{
	if (!a)
		return;
	if (listening == a)
		listening = NULL;
	free(a->tables);
	if (a->accept_retry)
		event_free(a->accept_retry);
	/* Requests still pending belong to connections evhttp_free() frees:
	 * answer them first, so no pointer to them survives. */
	admin_drain(a);
	if (a->http)
		evhttp_free(a->http);
	free(a);
}
