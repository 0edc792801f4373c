/* SPDX-License-Identifier: MIT */
/*
 * The network thread (see net.h).
 *
 * DESIGN
 *  - Connections are found by id (conn_id) in a small array; the store
 *    thread's outputs for a connection that is gone are dropped: what they
 *    reported is durable and the peer will query or resend.
 *  - A peer's rights are checked here, once, before its frame becomes a job:
 *    Data must carry the peer's own id as origin unless the peer is a
 *    configured trusted_relay; 810 frames and query replies must come from the
 *    stream's destination (or a trusted relay); queries and responses from
 *    the stream's origin (the table is rights.c's). A violation is an
 *    Error(FORBIDDEN) and the link closes; nothing of that frame is
 *    stored, other peers are unaffected. A kind the table does not list is
 *    an Error(PROTOCOL), from any peer, trusted relays included.
 *  - The routing snapshot (which peers are READY on which connection, newest
 *    first) is sent to the store thread whenever it changes. A connection
 *    stands for (peer id, instance): of several ready connections of one
 *    pair only the newest is listed (a reconnect replaced the others, which
 *    close when their peer or the idle timeout ends them); connections of
 *    one peer id with different instances are all listed, and the store
 *    thread spreads that peer's streams over them (job.h).
 *  - The wake socket guards against two semqd serving as the same instance:
 *    one per SQLite file (named after its canonical path) for the default,
 *    unnamed instance; a named instance adds its name, and on a postgresql://
 *    database the name is the URL's hash plus the instance, so several
 *    instances of one node may run on one host.
 *  - The admin HTTP server (admin.c) runs on this loop; outputs that carry a
 *    request id are its answers, the rest are frames for connections.
 *  - Backpressure: while the worker is in its disk-full state, Data frames
 *    are dropped unacknowledged before they become jobs; the sender keeps
 *    the messages and asks about them later (query_after), so nothing is
 *    lost and nothing is stored twice.
 *  - Admission. A connection is a handshake from accept (or dial) until its
 *    certificate is verified and on_identified() took it; then it is
 *    authenticated (HELLO, READY). The two are counted apart, so strangers
 *    can fill only the handshake slots: at accept, an address over
 *    max_connections_per_address or max_handshakes_per_address is refused
 *    before TLS; max_handshakes full drops the oldest accepted handshake (a
 *    real one takes milliseconds, a stranger's trickle the deadline). After
 *    identification: [tls] deny, [node] allow, max_connections (accepted
 *    ones refused), max_connections_per_peer (that id's oldest accepted
 *    connection closed). A dialled connection counts everywhere but is
 *    never closed or refused for a bound: the configuration bounds them.
 *    After its Hello: a forward-only relay's [relay] require_connected
 *    (on_hello(): Error DEST_UNAVAILABLE while none of them is connected).
 *    Refusals of strangers are logged at most once per LIMIT_LOG_MS per
 *    reason, with the count in between; every one is counted (net_stats).
 *  - accept() failing (descriptors exhausted) pauses the listener with a
 *    back-off of ACCEPT_BACKOFF_MIN_MS doubling to ACCEPT_BACKOFF_MAX_MS,
 *    instead of the level-triggered busy loop libevent would run. An
 *    episode starts with the first failure (logged) and ends when
 *    ACCEPT_BACKOFF_MAX_MS passed without one (logged, with the count): a
 *    backlog of connections taken a few at a time between failures is one
 *    episode, not a line per batch.
 */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <libpq-fe.h>

#include "admin.h"
#include "codec.h"
#include "fault.h"
#include "log.h"
#include "peer.h"
#include "rights.h"
#include "sdnotify.h"
#include "tls.h"
#include "worker.h"

#define LIMIT_LOG_MS 10000 /* one line per reason of refusal this often */
#define ACCEPT_BACKOFF_MIN_MS 100
#define ACCEPT_BACKOFF_MAX_MS 2000
#define CRL_POLL_MS 5000 /* [tls] crl: is the file new? */

struct dialer {
	struct net *n;
	const struct cfg_peer *peer;
	struct conn *conn;
	struct event *timer;
	unsigned attempts;
	int64_t next_at; /* unix ms of the next dial; 0 when connected */
};

/* What /peers shows of a connection beyond peer.h: set with conn_set_user()
 * when it is added, owned here, freed in on_close(). */
struct conn_info {
	char addr[300];   /* host:port */
	int64_t since;    /* unix ms: accepted / dial started */
	int64_t ready_at; /* unix ms: Hello done; 0 before */
	int family;       /* accepted from; 0 when dialled */
	unsigned char ip[16];
	int authed; /* counted as authenticated, else as a handshake */
};

/* Whether a configured peer is up (a connection of it is ready), for
 * /peers, /health and /metrics: one per [peer] section, in config order. */
struct peer_down {
	int64_t down_since;   /* unix ms: no ready connection since; 0 = up */
	char last_error[200]; /* the last connection's failure; "" none */
};

/* A line about refusals of one kind, at most every LIMIT_LOG_MS. */
struct limit_log {
	int64_t last_ms; /* monotonic; 0 = never */
	uint64_t quiet;  /* refusals since, not logged */
};

struct net {
	const struct config *c;
	struct event_base *base;
	SSL_CTX *tls;
	struct evconnlistener *listener;
	struct admin *admin; /* NULL when [node] admin is not set */
	struct evdns_base *dns;
	struct event *ev_accept_retry; /* the listener paused: try again */
	struct event *ev_accept_calm;  /* no failure since: episode over */
	int64_t accept_backoff_ms;     /* the next pause; 0: none yet */
	int64_t accept_paused_at;      /* monotonic ms: first failure; 0 none */
	uint64_t accept_failed;        /* failures of this episode */
	struct event *ev_crl;          /* [tls] crl poll */
	struct event *ev_watchdog;     /* systemd: WATCHDOG=1 */
	int64_t watchdog_ms;           /* its period; 0 off */
	int watchdog_starved;          /* the store thread is silent */
	struct event *ev_relief;       /* memory_budget: below half again */
	int pressed;                   /* some reading is paused for it */
	unsigned n_handshakes;         /* connections before authentication */
	unsigned n_authed;             /* and after */
	struct limit_log limit_log[NET_REFUSED_N + NET_EVICTED_N];
	int wake_fd;
	struct event *ev_wake;
	struct event *ev_out;
	struct event *ev_stop;
	struct event *ev_sig[3];
	pthread_mutex_t out_mu;
	struct out *out_head, *out_tail;
	struct worker *w;
	struct conn_params prm;
	struct conn_cbs cbs;
	struct dialer *
		*dialers; /* each its own allocation: timers point to it */
	size_t n_dialers;
	struct peer_down *down; /* per configured peer (n_down) */
	size_t n_down;
	struct conn **conns;
	size_t n_conns;
	uint64_t next_id;
	int stopping;
	uint64_t rng;
	/* Configurations of SIGHUP reloads, kept until exit (the store
	 * thread may still read one): each a parsed file, or the live copy
	 * made of the running one and the parsed file's reloadable parts
	 * (shallow: freed alone). */
	struct {
		struct config *parsed, *live;
	} * gens;
	size_t n_gens;
};

/* What the bounds did (network thread only; one net per process). */
static struct net_stats stats;

/* ---- helpers -------------------------------------------------------------- */

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t rnd(struct net *n)
{
	/* xorshift64*: jitter only, not security */
	n->rng ^= n->rng >> 12;
	n->rng ^= n->rng << 25;
	n->rng ^= n->rng >> 27;
	return n->rng * 2685821657736338717ULL;
}

static struct conn *find_conn(struct net *n, uint64_t id)
{
	size_t i;

	for (i = 0; i < n->n_conns; i++)
		if (conn_id(n->conns[i]) == id)
			return n->conns[i];
	return NULL;
}

static void submit(struct net *n, struct job *j)
{
	if (!j) {
		log_error("net", "out of memory: a job was dropped");
		return;
	}
	if (!n->w) {
		job_free(j);
		return;
	}
	worker_submit(n->w, j);
}

static void send_routes(struct net *n)
{
	struct job *j = job_new(JOB_ROUTES);
	struct routes *r;
	size_t i, k = 0;

	if (!j)
		return submit(n, NULL);
	r = calloc(1, sizeof *r);
	if (r && n->n_conns)
		r->hops = calloc(n->n_conns, sizeof *r->hops);
	if (!r || (n->n_conns && !r->hops)) {
		routes_free(r);
		job_free(j);
		return submit(n, NULL);
	}
	/* newest first: a peer (instance) that reconnected is reached on its
	 * new link only */
	for (i = n->n_conns; i-- > 0;) {
		struct conn *c = n->conns[i];
		size_t h;

		if (conn_state(c) != CONN_READY)
			continue;
		for (h = 0; h < k; h++)
			if (!strcmp(r->hops[h].peer, conn_peer(c)) &&
			    !strcmp(r->hops[h].instance, conn_peer_instance(c)))
				break;
		if (h < k)
			continue; /* replaced by a newer connection */
		snprintf(r->hops[k].peer, sizeof r->hops[k].peer, "%s",
			 conn_peer(c));
		snprintf(r->hops[k].instance, sizeof r->hops[k].instance, "%s",
			 conn_peer_instance(c));
		r->hops[k].conn_id = conn_id(c);
		r->hops[k].relay = (conn_peer_features(c) &
				    SEMQ__FEATURE__FEATURE_RELAY) != 0;
		r->hops[k].trace = (conn_peer_features(c) &
				    SEMQ__FEATURE__FEATURE_TRACE) != 0;
		r->hops[k].revision = conn_peer_revision(c);
		r->hops[k].life = conn_peer_life(c);
		r->hops[k].max_frame = conn_peer_max_frame(c);
		k++;
	}
	r->n_hops = k;
	r->cfg = n->c; /* a reload's peers and routes reach the store so */
	j->routes = r;
	submit(n, j);
}

static int trusted(const struct net *n, const char *peer)
{
	const struct cfg_peer *p = config_peer(n->c, peer);

	return p && p->trusted_relay;
}

/* "host:port", "[v6]:port" */
static void addr_text(char *buf, size_t sz, const char *host, unsigned port)
{
	snprintf(buf, sz, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
}

/* Remembers where c goes and since when, for /peers and admission; NULL
 * when out of memory. */
static struct conn_info *conn_info_set(struct conn *c, const char *addr)
{
	struct conn_info *ci = calloc(1, sizeof *ci);

	if (!ci)
		return NULL;
	snprintf(ci->addr, sizeof ci->addr, "%s", addr);
	ci->since = clock_real_ms(NULL);
	conn_set_user(c, ci);
	return ci;
}

/* ---- admission ([node] max_*, [tls] deny) ---------------------------------- */

static const char *const refusal_names[NET_REFUSED_N] = {
	"handshakes_per_address",
	"connections_per_address",
	"handshakes",
	"connections",
	"connections_per_peer",
	"denied",
	"not_listed",
	"dest_unavailable"};
static const char *const eviction_names[NET_EVICTED_N] = {
	"handshakes", "connections_per_peer"};

const char *net_refusal_text(int reason)
{
	return reason >= 0 && reason < NET_REFUSED_N ? refusal_names[reason]
						     : "?";
}

const char *net_eviction_text(int reason)
{
	return reason >= 0 && reason < NET_EVICTED_N ? eviction_names[reason]
						     : "?";
}

void net_get_stats(struct net_stats *out)
{
	struct conn_stats cs;

	conn_get_stats(&cs);
	*out = stats;
	out->handshake_timeouts = cs.handshake_timeouts;
	out->slow_readers = cs.slow_readers;
	out->errors_suppressed = cs.errors_suppressed;
	out->lines_suppressed += cs.lines_suppressed;
}

/* c (in n->conns, with its conn_info) enters (+1) or leaves (-1) the count
 * of its kind: handshakes, or authenticated once ci->authed. */
static void count(struct net *n, const struct conn_info *ci, int d)
{
	if (ci && ci->authed)
		n->n_authed += (unsigned)d;
	else
		n->n_handshakes += (unsigned)d;
	stats.handshakes = n->n_handshakes;
	stats.authenticated = n->n_authed;
}

/*
 * A line about a bound that strangers can hit thousands of times a second
 * (slot: a refusal reason, or NET_REFUSED_N + an eviction reason): the
 * first is logged, then at most one per LIMIT_LOG_MS with how many were
 * left out in between. The counters have every one.
 */
static void limit_note(struct net *n, size_t slot, const char *peer,
		       const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void limit_note(struct net *n, size_t slot, const char *peer,
		       const char *fmt, ...)
{
	struct limit_log *l = &n->limit_log[slot];
	int64_t now = mono_ms();
	char text[400], more[128] = "";
	va_list ap;

	if (l->last_ms && now - l->last_ms < LIMIT_LOG_MS) {
		l->quiet++;
		stats.lines_suppressed++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	if (l->quiet)
		snprintf(more, sizeof more,
			 " (and %llu more for the same reason in the last "
			 "%lld s, not logged)",
			 (unsigned long long)l->quiet,
			 (long long)(now - l->last_ms) / 1000);
	l->last_ms = now;
	l->quiet = 0;
	log_msg(LOG_WARN, "net", peer, NULL, "%s%s", text, more);
}

/* Accepted connections from (family, ip): all of them, and how many of
 * those are handshakes. */
static void count_address(const struct net *n, int family,
			  const unsigned char ip[16], unsigned *all,
			  unsigned *hs)
{
	size_t i;

	*all = *hs = 0;
	for (i = 0; i < n->n_conns; i++) {
		const struct conn_info *ci = conn_user(n->conns[i]);

		if (!ci || ci->family != family || memcmp(ci->ip, ip, 16))
			continue;
		(*all)++;
		if (!ci->authed)
			(*hs)++;
	}
}

/* max_handshakes is full: closes the oldest accepted handshake (never a
 * dialled one) for a connection from `addr`. 0 when there is none. */
static int evict_handshake(struct net *n, const char *addr)
{
	size_t i;

	for (i = 0; i < n->n_conns; i++) {
		struct conn *c = n->conns[i];
		const struct conn_info *ci = conn_user(c);

		if (conn_outbound(c) || !ci || ci->authed)
			continue;
		stats.evicted[NET_EVICTED_HANDSHAKES]++;
		limit_note(n, NET_REFUSED_N + NET_EVICTED_HANDSHAKES, NULL,
			   "%u handshakes in progress (max_handshakes): "
			   "dropped the oldest, from %s, %lld ms old, for a "
			   "new connection from %s",
			   n->n_handshakes, ci->addr,
			   (long long)(clock_real_ms(NULL) - ci->since), addr);
		conn_close(c, 0, "dropped for a newer handshake");
		return 1;
	}
	return 0;
}

/* The oldest authenticated connection of `peer` this node accepted (not
 * dialled) other than `except`; NULL when none. */
static struct conn *oldest_accepted(struct net *n, const char *peer,
				    const struct conn *except)
{
	size_t i;

	for (i = 0; i < n->n_conns; i++) {
		struct conn *c = n->conns[i];
		const struct conn_info *ci = conn_user(c);

		if (c != except && !conn_outbound(c) && ci && ci->authed &&
		    !strcmp(conn_peer(c), peer))
			return c;
	}
	return NULL;
}

/*
 * The certificate is verified: [tls] deny, [node] allow = listed (only ids
 * with a [peer] section; a dialled peer always has one), max_connections
 * (for an accepted connection), max_connections_per_peer (that id's oldest
 * accepted connection makes room). Taken, the connection leaves the
 * handshakes for the authenticated ones.
 */
static int on_identified(void *ctx, struct conn *c, char *why, size_t whysz)
{
	struct net *n = ctx;
	struct conn_info *ci = conn_user(c);
	const char *id = conn_peer(c);
	unsigned k = 0;
	size_t i;
	int reason;

	for (i = 0; i < n->c->n_tls_deny; i++)
		if (!strcmp(n->c->tls_deny[i], id)) {
			snprintf(why, whysz,
				 "'%s' is in [tls] deny: its certificate is "
				 "not accepted",
				 id);
			reason = NET_REFUSED_DENIED;
			goto refuse;
		}
	if (n->c->allow_listed && !config_peer(n->c, id)) {
		snprintf(why, whysz,
			 "'%s' has no [peer %s] section and this node allows "
			 "only listed peers ([node] allow = listed); add the "
			 "section to let it in",
			 id, id);
		reason = NET_REFUSED_NOT_LISTED;
		goto refuse;
	}
	if (!conn_outbound(c) && n->n_authed >= n->c->max_connections) {
		snprintf(why, whysz,
			 "%u connections are authenticated already "
			 "(max_connections)",
			 n->n_authed);
		reason = NET_REFUSED_CONNECTIONS;
		goto refuse;
	}
	for (i = 0; i < n->n_conns; i++) {
		const struct conn_info *o = conn_user(n->conns[i]);

		if (o && o->authed && !strcmp(conn_peer(n->conns[i]), id))
			k++;
	}
	while (k >= n->c->max_connections_per_peer) {
		struct conn *old = oldest_accepted(n, id, c);
		const struct conn_info *oi;

		if (!old)
			break;
		oi = conn_user(old);
		stats.evicted[NET_EVICTED_CONNECTIONS_PER_PEER]++;
		limit_note(n, NET_REFUSED_N + NET_EVICTED_CONNECTIONS_PER_PEER,
			   id,
			   "%u connections of '%s' (max_connections_per_peer): "
			   "closed the oldest, from %s (%s), for a new one",
			   k, id, oi->addr, conn_state_text(conn_state(old)));
		conn_close(old, 0, "closed for a newer connection of its peer");
		k--;
	}
	if (k >= n->c->max_connections_per_peer && !conn_outbound(c)) {
		snprintf(why, whysz,
			 "'%s' has %u connections already, all dialled by this "
			 "node (max_connections_per_peer)",
			 id, k);
		reason = NET_REFUSED_CONNECTIONS_PER_PEER;
		goto refuse;
	}
	if (ci) {
		count(n, ci, -1);
		ci->authed = 1;
		count(n, ci, +1);
	}
	return 0;
refuse:
	stats.refused[reason]++;
	return -1;
}

/* ---- a forward-only relay's destinations ([relay] require_connected) ------ */

/* The peer a [route] line names for dest, or NULL. */
static const char *route_of(const struct config *c, const char *dest)
{
	size_t i;

	for (i = 0; i < c->n_routes; i++)
		if (!strcmp(c->routes[i].dest, dest))
			return c->routes[i].via;
	return NULL;
}

/* Is `id` one of the required destinations, or the peer [route] names for
 * one? Such a peer is what the others wait for: never refused. */
static int dest_or_hop(const struct config *c, const char *id)
{
	size_t i;

	for (i = 0; i < c->n_relay_require; i++) {
		const char *via = route_of(c, c->relay_require[i]);

		if (!strcmp(c->relay_require[i], id) ||
		    (via && !strcmp(via, id)))
			return 1;
	}
	return 0;
}

/* Has a required destination (any of its instances) or its route a ready
 * connection? */
static int dest_reachable(const struct net *n)
{
	size_t i;

	for (i = 0; i < n->n_conns; i++)
		if (conn_state(n->conns[i]) == CONN_READY &&
		    dest_or_hop(n->c, conn_peer(n->conns[i])))
			return 1;
	return 0;
}

/*
 * The peer's Hello is checked. A forward-only relay with [relay]
 * require_connected refuses every peer but those destinations (and their
 * route hops) while none of them is connected: it could forward nothing,
 * and storing is not its job. The peer gets Error(DEST_UNAVAILABLE) in
 * place of this node's Hello, so it never becomes ready and its dialler
 * backs off. Links already up stay up when the last destination leaves:
 * their messages are answered RelayAck(UNREACHABLE, NOT_CONNECTED) and
 * their senders retry, which costs nothing while an instance restarts,
 * where closing every shop's link would bring them all back at once.
 */
static int on_hello(void *ctx, struct conn *c, char *why, size_t whysz)
{
	struct net *n = ctx;
	const struct config *cf = n->c;
	char dests[300] = "";
	size_t i, k = 0;

	if (!cf->n_relay_require || dest_or_hop(cf, conn_peer(c)) ||
	    dest_reachable(n))
		return 0;
	for (i = 0; i < cf->n_relay_require && k < sizeof dests; i++)
		k += (size_t)snprintf(dests + k, sizeof dests - k, "%s%s",
				      i ? ", " : "", cf->relay_require[i]);
	snprintf(why, whysz,
		 "no instance of %s%s is connected to %s, a forward-only "
		 "relay: it has nowhere to forward messages to; connect again "
		 "later",
		 cf->n_relay_require > 1 ? "any of " : "", dests, cf->id);
	stats.refused[NET_REFUSED_DEST_UNAVAILABLE]++;
	limit_note(n, NET_REFUSED_DEST_UNAVAILABLE, conn_peer(c),
		   "refused '%s' after its Hello: %s (no instance of %s is "
		   "connected: [relay] require_connected)",
		   conn_peer(c), "Error DEST_UNAVAILABLE", dests);
	return SEMQ__ERROR__CODE__DEST_UNAVAILABLE;
}

/* ---- configured peers: up, or down since when ------------------------------ */

/* The [peer] section of id, or NULL. */
static struct peer_down *peer_down_of(struct net *n, const char *id)
{
	size_t i;

	if (!id || !id[0])
		return NULL;
	for (i = 0; i < n->n_down && i < n->c->n_peers; i++)
		if (!strcmp(n->c->peers[i].name, id))
			return &n->down[i];
	return NULL;
}

/* Does id have a ready connection other than `except`? */
static int peer_ready(struct net *n, const char *id, const struct conn *except)
{
	size_t i;

	for (i = 0; i < n->n_conns; i++)
		if (n->conns[i] != except &&
		    conn_state(n->conns[i]) == CONN_READY &&
		    !strcmp(conn_peer(n->conns[i]), id))
			return 1;
	return 0;
}

/* A reload's new [peer] list: a peer kept keeps its record, a new one is
 * down from now until it connects. Out of memory: the old records stay
 * (peer_down_of checks both bounds). */
static void peer_down_rebuild(struct net *n, const struct config *nc)
{
	struct peer_down *d = NULL;
	int64_t now = clock_real_ms(NULL);
	size_t i;

	if (nc->n_peers) {
		d = calloc(nc->n_peers, sizeof *d);
		if (!d)
			return;
	}
	for (i = 0; i < nc->n_peers; i++) {
		const struct peer_down *old =
			peer_down_of(n, nc->peers[i].name);

		if (old)
			d[i] = *old;
		else if (!peer_ready(n, nc->peers[i].name, NULL))
			d[i].down_since = now;
	}
	free(n->down);
	n->down = d;
	n->n_down = nc->n_peers;
}

/* A connection of configured peer id closed (why: its reason): down from
 * now when it was its last ready one; the reason is kept either way. */
static void peer_note_close(struct net *n, const char *id, int was_ready,
			    const struct conn *c, const char *why)
{
	struct peer_down *pd = peer_down_of(n, id);

	if (!pd)
		return;
	if (why && why[0])
		snprintf(pd->last_error, sizeof pd->last_error, "%s", why);
	if (was_ready && !pd->down_since && !peer_ready(n, id, c))
		pd->down_since = clock_real_ms(NULL);
}

/* ---- connection callbacks -------------------------------------------------- */

static void on_ready(void *ctx, struct conn *c)
{
	struct net *n = ctx;
	struct job *j;
	size_t i;

	for (i = 0; i < n->n_dialers; i++)
		if (n->dialers[i]->conn == c)
			n->dialers[i]->attempts = 0;
	if (conn_user(c))
		((struct conn_info *)conn_user(c))->ready_at =
			clock_real_ms(NULL);
	{
		struct peer_down *pd = peer_down_of(n, conn_peer(c));
		if (pd)
			pd->down_since = 0;
	}
	send_routes(n);
	j = job_new(JOB_PEER_UP);
	if (j) {
		j->conn_id = conn_id(c);
		snprintf(j->peer, sizeof j->peer, "%s", conn_peer(c));
		j->trusted_relay = trusted(n, conn_peer(c));
	}
	submit(n, j);
}

/*
 * Data while the disk is full is not taken (the store could not record it):
 * a relay says so for the messages it would have taken custody of or passed
 * on, with a reason the senders show and back off on; its own messages the
 * senders query later, as from any receiver.
 */
static void refuse_disk_full(struct net *n, struct conn *c,
			     const Semq__Frame *f)
{
	const Semq__Data *d = f->data;
	Semq__MsgId **ids;
	size_t i, k = 0;

	if (!n->c->relay || !d->n_messages)
		return;
	ids = calloc(d->n_messages, sizeof *ids);
	if (!ids)
		return;
	for (i = 0; i < d->n_messages; i++) {
		Semq__MsgId *id = calloc(1, sizeof *id);

		if (!id)
			break;
		semq__msg_id__init(id);
		id->origin = d->messages[i]->origin;
		id->dest = d->messages[i]->dest;
		id->seq = d->messages[i]->seq;
		id->life = d->messages[i]->life;
		id->digest = d->messages[i]->digest;
		if (strcmp(id->dest, n->c->id) == 0) {
			free(id);
			continue;
		}
		ids[k++] = id;
	}
	if (k) {
		Semq__Frame fr = SEMQ__FRAME__INIT;
		Semq__RelayAck ra = SEMQ__RELAY_ACK__INIT;
		uint8_t *buf = NULL;
		size_t len = 0;

		ra.n_ids = k;
		ra.ids = ids;
		ra.kind = SEMQ__RELAY_ACK__KIND__UNREACHABLE;
		ra.reason = SEMQ__RELAY_REFUSAL__DISK_FULL;
		ra.detail = "the relay's disk is full";
		fr.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
		fr.relay_ack = &ra;
		if (codec_encode(&fr, n->c->max_frame, &buf, &len) == SEMQ_OK) {
			conn_send(c, buf, len);
			free(buf);
		}
	}
	for (i = 0; i < k; i++)
		free(ids[i]);
	free(ids);
}

static int on_frame(void *ctx, struct conn *c, Semq__Frame *f)
{
	struct net *n = ctx;
	char why[256];
	struct job *j;
	int r;

	/* the rights of a peer (SPEC §10, rights.h): a kind the table does
	 * not list is refused, never let through */
	r = rights_check(f, conn_peer(c), trusted(n, conn_peer(c)), why,
			 sizeof why);
	if (r != SEMQ_OK) {
		log_msg(LOG_WARN, "net", conn_peer(c), NULL, "refused: %s",
			why);
		codec_frame_free(f);
		conn_close(c,
			   r == SEMQ_DECLINED ? SEMQ__ERROR__CODE__FORBIDDEN
					      : SEMQ__ERROR__CODE__PROTOCOL,
			   why);
		return -1;
	}
	if (f->body_case == SEMQ__FRAME__BODY_DATA && n->w &&
	    worker_disk_full(n->w)) {
		log_msg(LOG_DEBUG, "net", conn_peer(c), NULL,
			"Data refused: the disk is full; the sender keeps it");
		refuse_disk_full(n, c, f);
		codec_frame_free(f);
		return 0;
	}
	j = job_new(JOB_FRAME);
	if (!j) {
		codec_frame_free(f);
		conn_close(c, SEMQ__ERROR__CODE__INTERNAL, "out of memory");
		return -1;
	}
	j->conn_id = conn_id(c);
	snprintf(j->peer, sizeof j->peer, "%s", conn_peer(c));
	j->trusted_relay = trusted(n, conn_peer(c));
	j->frame = f;
	/* what it holds until the store thread is done with it: the
	 * unpacked frame, about three times its wire size */
	j->bytes = sizeof *j + 3 * semq__frame__get_packed_size(f);
	submit(n, j);
	/* [node] memory_budget: over it, the peers holding most of it are
	 * not read from until the store thread has caught up. */
	if (n->w && worker_heavy(n->w, conn_id(c))) {
		if (!n->pressed) {
			int over = 0;
			size_t q = worker_queued_bytes(n->w, &over);

			log_msg(LOG_WARN, "net", conn_peer(c), NULL,
				"%zu bytes wait for the store thread, over "
				"memory_budget (%zu): reading paused from the "
				"peers holding the most, until it caught up",
				q, n->c->memory_budget);
		}
		n->pressed = 1;
		stats.pauses++;
		conn_pause(c, 1);
	}
	return 0;
}

/* The store thread (worker_set_relief): below half the budget again. */
static void relief(void *ctx)
{
	struct net *n = ctx;

	event_active(n->ev_relief, EV_READ, 0);
}

static void relief_cb(evutil_socket_t fd, short what, void *arg)
{
	struct net *n = arg;
	uint64_t *ids;
	size_t i, k = 0;

	(void)fd;
	(void)what;
	if (!n->pressed)
		return;
	n->pressed = 0;
	ids = calloc(n->n_conns + 1, sizeof *ids);
	if (!ids)
		return;
	for (i = 0; i < n->n_conns; i++)
		if (conn_paused(n->conns[i]))
			ids[k++] = conn_id(n->conns[i]);
	if (k)
		log_msg(LOG_INFO, "net", NULL, NULL,
			"the store thread caught up: reading %zu paused "
			"connection(s) again",
			k);
	/* resuming reads what waited, which may close a connection or
	 * pause it again: found again by id */
	for (i = 0; i < k; i++) {
		struct conn *c = find_conn(n, ids[i]);
		if (c)
			conn_pause(c, 0);
	}
	free(ids);
}

static void schedule_dial(struct dialer *d);

static void on_close(void *ctx, struct conn *c, const char *why)
{
	struct net *n = ctx;
	int was_ready = conn_state(c) == CONN_READY || conn_peer(c)[0];
	struct conn_info *ci = conn_user(c);
	const char *id = conn_peer(c);
	size_t i;

	for (i = 0; !id[0] && i < n->n_dialers; i++)
		if (n->dialers[i]->conn == c)
			id = n->dialers[i]->peer->name;
	peer_note_close(n, id, ci && ci->ready_at, c, why);
	for (i = 0; i < n->n_conns; i++)
		if (n->conns[i] == c) {
			count(n, ci, -1);
			memmove(&n->conns[i], &n->conns[i + 1],
				(n->n_conns - i - 1) * sizeof *n->conns);
			n->n_conns--;
			break;
		}
	free(ci);
	conn_set_user(c, NULL);
	for (i = 0; i < n->n_dialers; i++)
		if (n->dialers[i]->conn == c) {
			n->dialers[i]->conn = NULL;
			if (!n->stopping)
				schedule_dial(n->dialers[i]);
		}
	if (was_ready && !n->stopping)
		send_routes(n);
}

static int add_conn(struct net *n, struct conn *c)
{
	struct conn **v;

	v = realloc(n->conns, (n->n_conns + 1) * sizeof *v);
	if (!v)
		return SEMQ_ERR_NOMEM;
	n->conns = v;
	n->conns[n->n_conns++] = c;
	count(n, conn_user(c), +1);
	return SEMQ_OK;
}

/* ---- dialling ----------------------------------------------------------------- */

static void dial_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dialer *d = arg;
	struct net *n = d->n;
	char addr[300];
	struct conn *c;

	(void)fd;
	(void)what;
	if (n->stopping || d->conn)
		return;
	d->attempts++;
	/* Ours count among the handshakes too: make room as for a stranger,
	 * but never wait for it. */
	if (n->n_handshakes >= n->c->max_handshakes)
		evict_handshake(n, "this node's dial");
	addr_text(addr, sizeof addr, d->peer->connect.host,
		  d->peer->connect.port);
	c = conn_new(n->base, n->tls, -1, d->peer->connect.host,
		     d->peer->connect.port, d->peer->name, ++n->next_id,
		     &n->prm, &n->cbs, n);
	if (!c || !conn_info_set(c, addr) || add_conn(n, c) != SEMQ_OK) {
		if (c)
			conn_free(c);
		log_msg(LOG_WARN, "net", d->peer->name, NULL,
			"cannot dial %s:%u", d->peer->connect.host,
			d->peer->connect.port);
		peer_note_close(n, d->peer->name, 0, NULL,
				"cannot start a connection (out of memory?)");
		schedule_dial(d);
		return;
	}
	d->conn = c;
	d->next_at = 0;
	log_msg(LOG_DEBUG, "net", d->peer->name, NULL, "dialling %s:%u",
		d->peer->connect.host, d->peer->connect.port);
}

/* A dialer for peer (borrowed from the configuration in force), appended
 * to n->dialers, not scheduled; NULL when out of memory. */
static struct dialer *dialer_add(struct net *n, const struct cfg_peer *peer)
{
	struct dialer **v, *d = calloc(1, sizeof *d);

	v = d ? realloc(n->dialers, (n->n_dialers + 1) * sizeof *v) : NULL;
	if (v)
		n->dialers = v;
	if (d)
		d->timer = evtimer_new(n->base, dial_cb, d);
	if (!v || !d->timer) {
		if (d && d->timer)
			event_free(d->timer);
		free(d);
		return NULL;
	}
	d->n = n;
	d->peer = peer;
	n->dialers[n->n_dialers++] = d;
	return d;
}

static void dialer_free(struct dialer *d)
{
	if (!d)
		return;
	if (d->timer)
		event_free(d->timer);
	free(d);
}

static void schedule_dial(struct dialer *d)
{
	struct net *n = d->n;
	int64_t delay = n->c->reconnect_min_ms;
	struct timeval tv;
	unsigned i;

	for (i = 1; i < d->attempts && delay < n->c->reconnect_max_ms; i++)
		delay *= 2;
	if (delay > n->c->reconnect_max_ms)
		delay = n->c->reconnect_max_ms;
	if (d->attempts == 0)
		delay = 0;
	else /* jitter: between half and all of the delay */
		delay = delay / 2 +
			(int64_t)(rnd(n) % (uint64_t)(delay / 2 + 1));
	tv.tv_sec = delay / 1000;
	tv.tv_usec = (delay % 1000) * 1000;
	d->next_at = clock_real_ms(NULL) + delay;
	evtimer_add(d->timer, &tv);
}

/* ---- listener, wake socket, outputs, signals --------------------------------- */

/* Closes an accepted socket at once, with a reset: no TIME_WAIT here for a
 * connection that was never taken. */
static void refuse_fd(evutil_socket_t fd)
{
	struct linger lg = {1, 0};

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	evutil_closesocket(fd);
}

/* The episode ends unless another failure comes within
 * ACCEPT_BACKOFF_MAX_MS (accept_error_cb removes the timer). */
static void accept_calm_later(struct net *n)
{
	struct timeval tv = {ACCEPT_BACKOFF_MAX_MS / 1000,
			     (ACCEPT_BACKOFF_MAX_MS % 1000) * 1000};

	if (n->accept_paused_at && !evtimer_pending(n->ev_accept_calm, NULL))
		evtimer_add(n->ev_accept_calm, &tv);
}

/* An accept() worked again: the back-off starts from the bottom. */
static void accept_resumed(struct net *n)
{
	n->accept_backoff_ms = 0;
	stats.accept_paused = 0;
	accept_calm_later(n);
}

static void accept_calm_cb(evutil_socket_t fd, short what, void *arg)
{
	struct net *n = arg;

	(void)fd;
	(void)what;
	log_msg(LOG_INFO, "net", NULL, NULL,
		"accepting connections again, after %llu failed accept() "
		"calls in %lld ms",
		(unsigned long long)n->accept_failed,
		(long long)(mono_ms() - n->accept_paused_at));
	n->accept_failed = 0;
	n->accept_paused_at = 0;
	n->accept_backoff_ms = 0;
	stats.accept_paused = 0;
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int salen, void *arg)
{
	struct net *n = arg;
	char host[INET6_ADDRSTRLEN] = "?", addr[INET6_ADDRSTRLEN + 8];
	unsigned char ip[16] = {0};
	unsigned port = 0, all, hs;
	struct conn_info *ci;
	struct conn *c;

	(void)l;
	(void)salen;
	if (n->accept_backoff_ms)
		accept_resumed(n);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		evutil_inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		port = ntohs(in->sin_port);
		memcpy(ip, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		evutil_inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		port = ntohs(in6->sin6_port);
		memcpy(ip, &in6->sin6_addr, 16);
		/* Counted by its /64: a host holds a whole /64 and may
		 * take a new address of it for every connection. */
		if (!IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
			memset(ip + 8, 0, 8);
	}
	addr_text(addr, sizeof addr, host, port);
	if (n->stopping) {
		evutil_closesocket(fd);
		return;
	}
	count_address(n, sa->sa_family, ip, &all, &hs);
	if (all >= n->c->max_connections_per_address) {
		stats.refused[NET_REFUSED_CONNECTIONS_PER_ADDRESS]++;
		limit_note(n, NET_REFUSED_CONNECTIONS_PER_ADDRESS, NULL,
			   "refused a connection from %s: %u connections from "
			   "%s already (max_connections_per_address)",
			   addr, all, host);
		refuse_fd(fd);
		return;
	}
	if (hs >= n->c->max_handshakes_per_address) {
		stats.refused[NET_REFUSED_HANDSHAKES_PER_ADDRESS]++;
		limit_note(n, NET_REFUSED_HANDSHAKES_PER_ADDRESS, NULL,
			   "refused a connection from %s: %u handshakes from "
			   "%s in progress (max_handshakes_per_address)",
			   addr, hs, host);
		refuse_fd(fd);
		return;
	}
	if (n->n_handshakes >= n->c->max_handshakes &&
	    !evict_handshake(n, addr)) {
		stats.refused[NET_REFUSED_HANDSHAKES]++;
		limit_note(n, NET_REFUSED_HANDSHAKES, NULL,
			   "refused a connection from %s: %u handshakes in "
			   "progress, all of them dialled by this node "
			   "(max_handshakes)",
			   addr, n->n_handshakes);
		refuse_fd(fd);
		return;
	}
	evutil_make_socket_nonblocking(fd);
	c = conn_new(n->base, n->tls, fd, NULL, 0, NULL, ++n->next_id, &n->prm,
		     &n->cbs, n);
	if (!c)
		return;
	ci = conn_info_set(c, addr);
	if (ci) {
		ci->family = sa->sa_family;
		memcpy(ci->ip, ip, sizeof ip);
	}
	if (!ci || add_conn(n, c) != SEMQ_OK)
		conn_free(c);
}

/*
 * accept() failed for another reason than a connection that went away: in
 * practice no descriptor is left (EMFILE, ENFILE) or no kernel memory. The
 * listening socket stays readable, so libevent would call again at once,
 * for ever: the listener pauses instead, ACCEPT_BACKOFF_MIN_MS first,
 * doubling to ACCEPT_BACKOFF_MAX_MS while it fails. One line starts the
 * episode; accept_resumed() ends it with the count.
 */
static void accept_error_cb(struct evconnlistener *l, void *arg)
{
	struct net *n = arg;
	int e = EVUTIL_SOCKET_ERROR();
	struct timeval tv;

	stats.accept_failures++;
	stats.accept_paused = 1;
	n->accept_failed++;
	evtimer_del(n->ev_accept_calm);
	if (!n->accept_paused_at) {
		stats.accept_pauses++;
		n->accept_paused_at = mono_ms();
		log_msg(LOG_WARN, "net", NULL, NULL,
			"accept: %s (%zu connections open); new connections "
			"wait: trying again in %d ms, then every %d ms at "
			"most, until one is taken",
			evutil_socket_error_to_string(e), n->n_conns,
			ACCEPT_BACKOFF_MIN_MS, ACCEPT_BACKOFF_MAX_MS);
	}
	if (!n->accept_backoff_ms)
		n->accept_backoff_ms = ACCEPT_BACKOFF_MIN_MS;
	else if (n->accept_backoff_ms < ACCEPT_BACKOFF_MAX_MS) {
		n->accept_backoff_ms *= 2;
		if (n->accept_backoff_ms > ACCEPT_BACKOFF_MAX_MS)
			n->accept_backoff_ms = ACCEPT_BACKOFF_MAX_MS;
	}
	evconnlistener_disable(l);
	tv.tv_sec = n->accept_backoff_ms / 1000;
	tv.tv_usec = (n->accept_backoff_ms % 1000) * 1000;
	evtimer_add(n->ev_accept_retry, &tv);
}

static void accept_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct net *n = arg;

	(void)fd;
	(void)what;
	if (n->stopping || !n->listener)
		return;
	/* the connection that failed may have gone meanwhile: then nothing
	 * is accepted, and no failure for a while ends the episode too */
	accept_calm_later(n);
	evconnlistener_enable(n->listener);
}

/* ---- [tls] crl ---------------------------------------------------------------- */

/*
 * Reads [tls] crl again: forced on SIGHUP, else only when the file changed
 * (the CRL_POLL_MS poll). A file that cannot be used leaves the CRLs read
 * before in force (tls.c does not try the same file with the same error
 * again until it changes or a reload is forced; a stale list it logs
 * itself).
 */
static void crl_reload(struct net *n, int force)
{
	char err[SEMQ_ERRLEN] = "";
	int r;

	if (!n->tls || !n->c->tls_crl || !n->c->tls_crl[0])
		return;
	r = tls_crl_reload(n->tls, n->c->tls_crl, force, err, sizeof err);
	if (r == SEMQ_OK) {
		size_t i = 0;

		stats.crl_reloads++;
		log_msg(LOG_INFO, "net", NULL, NULL,
			"[tls] crl read again (%s): %s; new handshakes are "
			"checked against it, and the links up now",
			force ? "SIGHUP" : "the file changed", err);
		/* A peer revoked while connected goes now, not at its next
		 * reconnect. */
		while (i < n->n_conns) {
			struct conn *c = n->conns[i];
			char why[SEMQ_ERRLEN];

			if (conn_tls_recheck(c, why, sizeof why) !=
			    SEMQ_DECLINED) {
				i++;
				continue;
			}
			stats.revoked_closed++;
			log_msg(LOG_WARN, "net", conn_peer(c), NULL,
				"closed: its certificate fails now (%s)", why);
			conn_close(c, SEMQ__ERROR__CODE__FORBIDDEN, why);
			/* on_close took it out of n->conns */
		}
	} else if (r != SEMQ_DECLINED) {
		stats.crl_failures++;
		log_msg(LOG_ERROR, "net", NULL, NULL,
			"[tls] crl: %s; the revocation lists read before stay "
			"in force",
			err);
	}
	stats.crl_next_update = tls_crl_next_update(n->tls);
}

static void crl_poll_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	crl_reload(arg, 0);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct net *n = arg;
	char buf[64];

	(void)what;
	while (recv(fd, buf, sizeof buf, 0) > 0)
		;
	submit(n, job_new(JOB_WAKE));
}

void net_deliver(void *arg, struct out *list)
{
	struct net *n = arg;
	struct out *last = list;

	if (!list)
		return;
	while (last->next)
		last = last->next;
	pthread_mutex_lock(&n->out_mu);
	if (n->out_tail)
		n->out_tail->next = list;
	else
		n->out_head = list;
	n->out_tail = last;
	pthread_mutex_unlock(&n->out_mu);
	event_active(n->ev_out, EV_READ, 0);
}

static void out_cb(evutil_socket_t fd, short what, void *arg)
{
	struct net *n = arg;
	struct out *o, *list;

	(void)fd;
	(void)what;
	pthread_mutex_lock(&n->out_mu);
	list = n->out_head;
	n->out_head = n->out_tail = NULL;
	pthread_mutex_unlock(&n->out_mu);
	for (o = list; o; o = o->next) {
		struct conn *c;
		if (o->req_id) { /* an answer to an admin HTTP request */
			if (n->admin)
				admin_deliver(n->admin, o);
			continue;
		}
		c = find_conn(n, o->conn_id);
		if (c) {
			fault_point("before_send");
			conn_send(c, o->bytes, o->len);
		}
	}
	out_free_list(list);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct net *n = arg;

	(void)fd;
	(void)what;
	if (!n->stopping) {
		log_info("net", "stopping: no new connections");
		sdnotify_send("STOPPING=1\nSTATUS=stopping");
	}
	n->stopping = 1;
	if (n->listener)
		evconnlistener_disable(n->listener);
	if (n->admin)
		admin_stopping(n->admin);
	event_base_loopexit(n->base, NULL);
}

static int is_numeric(const char *host);

/* ---- SIGHUP: reload node.ini ------------------------------------------------ */

/* A key that differs, as config_diff() reports it: the reloadable ones
 * were taken, the others wait for a restart. */
struct reload_diff {
	unsigned changes;
};

static int reloadable(const char *sect, const char *key)
{
	static const char *const safe[][2] = {{"node", "allow"},
					      {"node", "log_level"},
					      {"tls", "deny"},
					      {"tls", "crl"},
					      {"relay", "require_connected"}};
	size_t i;

	for (i = 0; key && i < sizeof safe / sizeof safe[0]; i++)
		if (!strcmp(safe[i][0], sect) && !strcmp(safe[i][1], key))
			return 1;
	return 0;
}

static void reload_key(void *ctx, const char *sect, const char *name,
		       const char *key)
{
	struct reload_diff *x = ctx;

	x->changes++;
	if (name) /* a [plugin] section */
		log_msg(LOG_WARN, "main", NULL, NULL,
			"reload: [%s %s] %s: needs a restart (plugins stay "
			"as loaded)",
			sect, name, key);
	else if (reloadable(sect, key))
		log_msg(LOG_NOTICE, "main", NULL, NULL,
			"reload: [%s] %s changed: applied", sect, key);
	else
		log_msg(LOG_WARN, "main", NULL, NULL,
			"reload: [%s] %s changed: needs a restart (the running "
			"value stays)",
			sect, key);
}

static const char *yesno(int v)
{
	return v ? "yes" : "no";
}

/* [peer] sections: one line per peer added, removed or changed. */
static void reload_peers(const struct config *a, const struct config *b,
			 struct reload_diff *x)
{
	char was[300], now[300];
	size_t i;

	for (i = 0; i < a->n_peers; i++) {
		const struct cfg_peer *pa = &a->peers[i];
		const struct cfg_peer *pb = config_peer(b, pa->name);

		if (pa->connect.set)
			addr_text(was, sizeof was, pa->connect.host,
				  pa->connect.port);
		else
			snprintf(was, sizeof was, "none");
		if (!pb) {
			x->changes++;
			log_msg(LOG_NOTICE, "main", pa->name, NULL,
				"reload: [peer %s] removed (connect %s): its "
				"connections close",
				pa->name, was);
			continue;
		}
		if (pb->connect.set)
			addr_text(now, sizeof now, pb->connect.host,
				  pb->connect.port);
		else
			snprintf(now, sizeof now, "none");
		if (strcmp(was, now)) {
			x->changes++;
			log_msg(LOG_NOTICE, "main", pa->name, NULL,
				"reload: [peer %s] connect %s -> %s", pa->name,
				was, now);
		}
		if (pa->trusted_relay != pb->trusted_relay) {
			x->changes++;
			log_msg(LOG_NOTICE, "main", pa->name, NULL,
				"reload: [peer %s] trusted_relay %s -> %s: its "
				"connections close and reconnect",
				pa->name, yesno(pa->trusted_relay),
				yesno(pb->trusted_relay));
		}
	}
	for (i = 0; i < b->n_peers; i++) {
		const struct cfg_peer *pb = &b->peers[i];

		if (config_peer(a, pb->name))
			continue;
		x->changes++;
		if (pb->connect.set)
			addr_text(now, sizeof now, pb->connect.host,
				  pb->connect.port);
		else
			snprintf(now, sizeof now, "none");
		log_msg(LOG_NOTICE, "main", pb->name, NULL,
			"reload: [peer %s] added (connect %s, trusted_relay "
			"%s)",
			pb->name, now, yesno(pb->trusted_relay));
	}
}

/* [route]: one line per destination added, removed or sent elsewhere. */
static void reload_routes(const struct config *a, const struct config *b,
			  struct reload_diff *x)
{
	size_t i;

	for (i = 0; i < a->n_routes; i++) {
		const char *via = route_of(b, a->routes[i].dest);

		if (via && !strcmp(via, a->routes[i].via))
			continue;
		x->changes++;
		log_msg(LOG_NOTICE, "main", NULL, NULL,
			"reload: [route] %s = %s%s%s", a->routes[i].dest,
			a->routes[i].via, via ? " -> " : " removed",
			via ? via : "");
	}
	for (i = 0; i < b->n_routes; i++) {
		if (route_of(a, b->routes[i].dest))
			continue;
		x->changes++;
		log_msg(LOG_NOTICE, "main", NULL, NULL,
			"reload: [route] %s = %s added", b->routes[i].dest,
			b->routes[i].via);
	}
}

/* The dialers for the configuration in force: a peer whose address is
 * unchanged keeps its dialer (and its connection); a removed or moved one
 * loses it (its connection closes: dialled again at the new address). */
static int reload_dialers(struct net *n)
{
	size_t i, k;
	int r = SEMQ_OK;

	for (i = 0; i < n->n_dialers;) {
		struct dialer *d = n->dialers[i];
		const struct cfg_peer *p = config_peer(n->c, d->peer->name);

		if (p && p->connect.set &&
		    !strcmp(p->connect.host, d->peer->connect.host) &&
		    p->connect.port == d->peer->connect.port) {
			d->peer = p;
			i++;
			continue;
		}
		if (d->conn) {
			struct conn *c = d->conn;

			d->conn = NULL; /* on_close must not redial it */
			conn_close(c, SEMQ__ERROR__CODE__SHUTDOWN,
				   "reconfigured: this node no longer dials "
				   "this address");
		}
		dialer_free(d);
		memmove(&n->dialers[i], &n->dialers[i + 1],
			(n->n_dialers - i - 1) * sizeof *n->dialers);
		n->n_dialers--;
	}
	for (k = 0; k < n->c->n_peers; k++) {
		const struct cfg_peer *p = &n->c->peers[k];
		struct dialer *d;

		if (!p->connect.set)
			continue;
		for (i = 0; i < n->n_dialers; i++)
			if (n->dialers[i]->peer == p)
				break;
		if (i < n->n_dialers)
			continue;
		if (!is_numeric(p->connect.host) && !n->dns) {
			n->dns = evdns_base_new(
				n->base,
				EVDNS_BASE_INITIALIZE_NAMESERVERS |
					EVDNS_BASE_DISABLE_WHEN_INACTIVE);
			n->prm.dns = n->dns;
		}
		d = dialer_add(n, p);
		if (!d) {
			r = SEMQ_ERR_NOMEM;
			continue;
		}
		schedule_dial(d);
	}
	return r;
}

/* Connections the configuration in force no longer lets in, or whose
 * rights changed (trusted_relay): closed; dialled ones are dialled again,
 * accepted ones come back with the new rights. */
static void reload_conns(struct net *n, const struct config *was)
{
	size_t i = 0;

	while (i < n->n_conns) {
		struct conn *c = n->conns[i];
		const char *id = conn_peer(c);
		const struct cfg_peer *pa = config_peer(was, id);
		const struct cfg_peer *pb = config_peer(n->c, id);
		const char *why = NULL;
		int code = SEMQ__ERROR__CODE__FORBIDDEN;
		size_t k;

		if (!id[0]) {
			i++;
			continue;
		}
		for (k = 0; k < n->c->n_tls_deny && !why; k++)
			if (!strcmp(n->c->tls_deny[k], id))
				why = "reconfigured: its id is in [tls] deny";
		if (!why && n->c->allow_listed && !pb)
			why = "reconfigured: it has no [peer] section and "
			      "[node] allow = listed";
		if (!why && (pa ? pa->trusted_relay : 0) !=
				    (pb ? pb->trusted_relay : 0)) {
			why = "reconfigured: its trusted_relay changed; "
			      "reconnect";
			code = SEMQ__ERROR__CODE__SHUTDOWN;
		}
		if (!why) {
			i++;
			continue;
		}
		log_msg(LOG_NOTICE, "net", id, NULL, "closed: %s", why);
		conn_close(c, code, why); /* leaves n->conns */
		if (i < n->n_conns && n->conns[i] == c)
			i++;
	}
}

/*
 * SIGHUP: node.ini again. A file that does not load or check keeps the
 * running configuration (its errors logged with file:line). Otherwise the
 * reloadable parts ([peer], [route], [node] allow, log_level, [tls] deny,
 * crl, [relay] require_connected) go into a live copy of the running
 * configuration that replaces it here and, with the next routing snapshot,
 * on the store thread; every other key that changed is logged as needing a
 * restart. One line per change, or "no change".
 */
static void reload(struct net *n)
{
	struct config *nc = NULL, *live = NULL;
	const struct config *was = n->c;
	struct reload_diff x = {0};
	char *errs = NULL, *line, *save = NULL;
	void *v;
	int r;

	sdnotify_send("RELOADING=1");
	log_msg(LOG_NOTICE, "main", NULL, NULL, "SIGHUP: reading %s again",
		was->file);
	r = config_load(was->file, &nc, &errs);
	if (r == SEMQ_OK)
		r = config_check_daemon(nc, &errs);
	if (r != SEMQ_OK) {
		for (line = errs ? strtok_r(errs, "\n", &save) : NULL; line;
		     line = strtok_r(NULL, "\n", &save))
			log_msg(LOG_ERROR, "main", NULL, NULL, "reload: %s",
				line);
		log_msg(LOG_ERROR, "main", NULL, NULL,
			"reload refused: the running configuration stays");
		goto out;
	}
	live = malloc(sizeof *live);
	v = live ? realloc(n->gens, (n->n_gens + 2) * sizeof *n->gens) : NULL;
	if (!v) {
		free(live);
		log_msg(LOG_ERROR, "main", NULL, NULL,
			"reload: out of memory; the running configuration "
			"stays");
		goto out;
	}
	n->gens = v;
	*live = *was;
	live->peers = nc->peers;
	live->n_peers = nc->n_peers;
	live->routes = nc->routes;
	live->n_routes = nc->n_routes;
	live->route_line = nc->route_line;
	live->allow_listed = nc->allow_listed;
	live->log_level = nc->log_level;
	live->tls_deny = nc->tls_deny;
	live->n_tls_deny = nc->n_tls_deny;
	live->tls_crl = nc->tls_crl;
	live->relay_require = nc->relay_require;
	live->n_relay_require = nc->n_relay_require;

	config_diff(was, nc, reload_key, &x);
	reload_peers(was, live, &x);
	reload_routes(was, live, &x);
	if (!x.changes) {
		log_msg(LOG_NOTICE, "main", NULL, NULL, "reload: no change");
		free(live);
		goto out;
	}
	/* both live until exit: the store thread may read either */
	n->gens[n->n_gens].parsed = nc;
	n->gens[n->n_gens].live = NULL;
	n->gens[n->n_gens + 1].parsed = NULL;
	n->gens[n->n_gens + 1].live = live;
	n->n_gens += 2;
	nc = NULL;
	peer_down_rebuild(n, live);
	n->c = live;
	log_set_level(live->log_level);
	if (n->admin)
		admin_set_config(n->admin, live);
	if (reload_dialers(n) != SEMQ_OK)
		log_msg(LOG_ERROR, "main", NULL, NULL,
			"reload: out of memory: some peers are not dialled");
	reload_conns(n, was);
	send_routes(n);
out:
	/* the CRL is read again on every SIGHUP (logrotate's too) */
	crl_reload(n, 1);
	config_free(nc);
	free(errs);
	sdnotify_send("READY=1");
}

/*
 * systemd's watchdog, every half of WATCHDOG_USEC: this callback running
 * proves the network loop; worker_alive() the store thread (it turned its
 * loop within the period, or it is in a plugin call within its deadline).
 * Silent longer, it is not fed, and systemd restarts semqd
 * (docs/OPERATIONS.md, "systemd").
 */
static void watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	struct net *n = arg;
	int64_t age = 0;

	(void)fd;
	(void)what;
	if (!n->w || worker_alive(n->w, n->watchdog_ms, &age)) {
		if (n->watchdog_starved)
			log_msg(LOG_WARN, "main", NULL, NULL,
				"the store thread makes progress again: "
				"feeding the systemd watchdog again");
		n->watchdog_starved = 0;
		sdnotify_send("WATCHDOG=1");
		return;
	}
	if (!n->watchdog_starved)
		log_msg(LOG_ERROR, "main", NULL, NULL,
			"the store thread has made no progress for %lld ms "
			"(WATCHDOG_USEC %lld ms): not feeding the systemd "
			"watchdog, which restarts semqd",
			(long long)age, (long long)n->watchdog_ms);
	n->watchdog_starved = 1;
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	if (sig == SIGHUP) {
		if (log_reopen() != SEMQ_OK)
			log_warn("net", "SIGHUP: cannot reopen the log file");
		if (!((struct net *)arg)->stopping)
			reload(arg);
		return;
	}
	stop_cb(-1, 0, arg);
}

void net_stop(struct net *n)
{
	event_active(n->ev_stop, EV_READ, 0);
}

/* What /peers says of p's configured peer: down since, its last error. */
static void peer_fill_down(struct net *n, struct admin_peer *p)
{
	const struct peer_down *pd = peer_down_of(n, p->peer);

	p->configured = pd != NULL;
	p->dialled = 0;
	if (!pd)
		return;
	p->dialled = n->c->peers[pd - n->down].connect.set;
	p->down_since = pd->down_since;
	p->last_error = pd->last_error[0] ? pd->last_error : NULL;
}

/* admin_peers_fn: every connection, then the configured peers without
 * one (with when they are dialled next). */
static void list_peers(void *ctx, admin_peer_cb cb, void *cb_ctx)
{
	struct net *n = ctx;
	char addr[300];
	size_t i, k;

	for (i = 0; i < n->n_conns; i++) {
		struct conn *c = n->conns[i];
		const struct conn_info *ci = conn_user(c);
		struct admin_peer p = {0};

		p.peer = conn_peer(c)[0] ? conn_peer(c) : NULL;
		for (k = 0; !p.peer && k < n->n_dialers; k++)
			if (n->dialers[k]->conn == c)
				p.peer = n->dialers[k]->peer->name;
		p.instance = conn_peer_instance(c);
		p.state = conn_state(c);
		p.outbound = conn_outbound(c);
		p.address = ci ? ci->addr : NULL;
		p.conn_id = conn_id(c);
		p.since = ci ? ci->since : 0;
		p.ready_at = ci ? ci->ready_at : 0;
		p.pending = conn_output_pending(c);
		p.paused = conn_paused(c);
		peer_fill_down(n, &p);
		cb(cb_ctx, &p);
	}
	for (k = 0; k < n->c->n_peers; k++) {
		const struct cfg_peer *cp = &n->c->peers[k];
		const struct dialer *d = NULL;
		struct admin_peer p = {0};

		for (i = 0; i < n->n_conns; i++)
			if (!strcmp(conn_peer(n->conns[i]), cp->name))
				break;
		if (i < n->n_conns)
			continue;
		for (i = 0; i < n->n_dialers; i++)
			if (n->dialers[i]->peer == cp)
				d = n->dialers[i];
		if (d && d->conn)
			continue; /* dialling: listed with the connections */
		p.peer = cp->name;
		p.state = -1;
		p.outbound = cp->connect.set;
		if (cp->connect.set) {
			addr_text(addr, sizeof addr, cp->connect.host,
				  cp->connect.port);
			p.address = addr;
		}
		p.next_dial_at = d ? d->next_at : 0;
		p.attempts = d ? d->attempts : 0;
		peer_fill_down(n, &p);
		cb(cb_ctx, &p);
	}
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
	const unsigned char *p;

	for (p = (const unsigned char *)s; *p; p++) {
		h ^= *p;
		h *= 1099511628211ULL;
	}
	return h;
}

/*
 * The wake socket's abstract name (see DESIGN): for the unnamed instance of a
 * SQLite file, semq_wake_name() (what semq_notify() and semqctl poke); for a
 * named instance that name plus "@INSTANCE"; for a postgresql:// database
 * "semq-wake-pg-HASH@INSTANCE", HASH the FNV-1a of the connection options
 * libpq reads in [node] db (URL or key=value), every one but the passwords:
 * abstract socket names are visible to every local user
 * (/proc/net/unix), and an unsalted hash of a short password is soon
 * guessed.
 */
static int wake_name(const struct config *c, char *name, size_t namesz,
		     size_t *len, char *err, size_t errsz)
{
	uint64_t h = 14695981039346656037ULL;
	int k;

	if (c->db_url) {
		PQconninfoOption *opts, *o;
		char *perr = NULL;

		opts = PQconninfoParse(c->db, &perr);
		if (!opts) {
			size_t m = perr ? strlen(perr) : 0;

			while (m && (perr[m - 1] == '\n' || perr[m - 1] == ' '))
				perr[--m] = '\0';
			snprintf(err, errsz,
				 "[node] db: libpq cannot read the connection "
				 "string: %s",
				 perr && perr[0] ? perr : "out of memory");
			PQfreemem(perr);
			return SEMQ_ERR_CONFIG;
		}
		for (o = opts; o->keyword; o++) {
			if (!o->val || !strcmp(o->keyword, "password") ||
			    !strcmp(o->keyword, "sslpassword"))
				continue;
			h = fnv1a(h, o->keyword);
			h = fnv1a(h, "=");
			h = fnv1a(h, o->val);
			h = fnv1a(h, "\n");
		}
		PQconninfoFree(opts);
		name[0] = '\0';
		k = snprintf(name + 1, namesz - 1, "semq-wake-pg-%016llx@%s",
			     (unsigned long long)h, c->instance);
		*len = 1 + (size_t)k;
		return SEMQ_OK;
	}
	if (semq_wake_name(c->db, name, namesz, len) != SEMQ_OK) {
		snprintf(err, errsz, "%s: cannot resolve the database path",
			 c->db);
		return SEMQ_ERR_IO;
	}
	if (c->instance[0]) {
		k = snprintf(name + *len, namesz - *len, "@%s", c->instance);
		*len += (size_t)k;
	}
	return SEMQ_OK;
}

static int bind_wake(struct net *n, char *err, size_t errsz)
{
	struct sockaddr_un sa;
	char name[sizeof sa.sun_path];
	size_t len;
	int r;

	r = wake_name(n->c, name, sizeof name, &len, err, errsz);
	if (r != SEMQ_OK)
		return r;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, name, len);
	n->wake_fd =
		socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (n->wake_fd < 0 ||
	    bind(n->wake_fd, (struct sockaddr *)&sa,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) !=
		    0) {
		if (errno == EADDRINUSE && n->c->db_url)
			snprintf(err, errsz,
				 "[node] db: another semqd on this host is "
				 "already serving this database as instance "
				 "'%s'; give each instance its own [node] "
				 "instance",
				 n->c->instance);
		else if (errno == EADDRINUSE && n->c->instance[0])
			snprintf(err, errsz,
				 "%s: another semqd is already serving this "
				 "database as instance '%s'",
				 n->c->db, n->c->instance);
		else if (errno == EADDRINUSE)
			snprintf(err, errsz,
				 "%s: another semqd is already serving this "
				 "database",
				 n->c->db);
		else
			snprintf(err, errsz, "wake socket: %s",
				 strerror(errno));
		return SEMQ_ERR_IO;
	}
	return SEMQ_OK;
}

/* An IPv4 or IPv6 address, not a name to resolve. */
static int is_numeric(const char *host)
{
	unsigned char buf[16];

	return evutil_inet_pton(AF_INET, host, buf) == 1 ||
	       evutil_inet_pton(AF_INET6, host, buf) == 1;
}

int net_new(const struct config *c, struct net **out, char *err, size_t errsz)
{
	static const int sigs[3] = {SIGTERM, SIGINT, SIGHUP};
	struct net *n;
	size_t i;
	int r = SEMQ_ERR_NOMEM, need_dns = 0;

	*out = NULL;
	n = calloc(1, sizeof *n);
	if (!n) {
		snprintf(err, errsz, "out of memory");
		return SEMQ_ERR_NOMEM;
	}
	n->c = c;
	n->wake_fd = -1;
	n->rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL | 1;
	pthread_mutex_init(&n->out_mu, NULL);
	n->prm.node_id = c->id;
	n->prm.instance = c->instance;
	n->prm.role = c->relay        ? SEMQ__ROLE__ROLE_RELAY
		      : c->listen.set ? SEMQ__ROLE__ROLE_SERVER
				      : SEMQ__ROLE__ROLE_EDGE;
	n->prm.features =
		(c->relay ? SEMQ__FEATURE__FEATURE_RELAY : 0) |
		(c->store_and_forward ? SEMQ__FEATURE__FEATURE_STORE_AND_FORWARD
				      : 0) |
		SEMQ__FEATURE__FEATURE_TRACE;
	n->prm.max_frame = c->max_frame;
	n->prm.software = "semqd " SEMQ_VERSION;
	n->prm.ping_interval_ms = c->ping_interval_ms;
	n->prm.idle_timeout_ms = c->idle_timeout_ms;
	n->prm.handshake_timeout_ms = c->handshake_timeout_ms;
	n->prm.write_timeout_ms = c->write_timeout_ms;
	n->cbs.on_identified = on_identified;
	n->cbs.on_hello = on_hello;
	n->cbs.on_ready = on_ready;
	n->cbs.on_frame = on_frame;
	n->cbs.on_close = on_close;

	n->base = event_base_new();
	if (!n->base) {
		snprintf(err, errsz, "cannot create the event loop");
		goto out;
	}
	/* A node with neither a listener nor peers (plugins only, fed by
	 * local applications) needs no TLS at all. */
	if (c->listen.set || c->n_peers) {
		n->tls = tls_ctx_new(c->tls_cert, c->tls_key, c->tls_ca,
				     c->tls_crl, c->id, err, errsz);
		if (!n->tls) {
			r = SEMQ_ERR_CONFIG;
			goto out;
		}
		stats.cert_not_after = tls_cert_not_after(n->tls);
		stats.ca_not_after = tls_ca_not_after(n->tls);
		stats.crl_next_update = tls_crl_next_update(n->tls);
	}
	r = bind_wake(n, err, errsz);
	if (r != SEMQ_OK)
		goto out;
	r = SEMQ_ERR_NOMEM;
	n->ev_wake = event_new(n->base, n->wake_fd, EV_READ | EV_PERSIST,
			       wake_cb, n);
	n->ev_out = event_new(n->base, -1, 0, out_cb, n);
	n->ev_stop = event_new(n->base, -1, 0, stop_cb, n);
	n->ev_accept_retry = evtimer_new(n->base, accept_retry_cb, n);
	n->ev_accept_calm = evtimer_new(n->base, accept_calm_cb, n);
	n->ev_relief = event_new(n->base, -1, 0, relief_cb, n);
	if (!n->ev_wake || !n->ev_out || !n->ev_stop || !n->ev_accept_retry ||
	    !n->ev_accept_calm || !n->ev_relief)
		goto out;
	if (n->tls && c->tls_crl && c->tls_crl[0]) {
		struct timeval poll = {CRL_POLL_MS / 1000,
				       (CRL_POLL_MS % 1000) * 1000};

		n->ev_crl = event_new(n->base, -1, EV_PERSIST, crl_poll_cb, n);
		if (!n->ev_crl)
			goto out;
		event_add(n->ev_crl, &poll);
	}
	event_add(n->ev_wake, NULL);
	for (i = 0; i < 3; i++) {
		n->ev_sig[i] = evsignal_new(n->base, sigs[i], signal_cb, n);
		if (!n->ev_sig[i])
			goto out;
		event_add(n->ev_sig[i], NULL);
	}
	if (c->listen.set) {
		struct sockaddr_storage ss;
		int sslen = sizeof ss;
		char hp[300];

		snprintf(hp, sizeof hp,
			 strchr(c->listen.host, ':') ? "[%s]:%u" : "%s:%u",
			 c->listen.host, c->listen.port);
		if (evutil_parse_sockaddr_port(hp, (struct sockaddr *)&ss,
					       &sslen) != 0) {
			snprintf(err, errsz,
				 "[node] listen: '%s' is not a numeric "
				 "address",
				 hp);
			r = SEMQ_ERR_CONFIG;
			goto out;
		}
		n->listener = evconnlistener_new_bind(
			n->base, accept_cb, n,
			LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
				LEV_OPT_CLOSE_ON_EXEC,
			128, (struct sockaddr *)&ss, sslen);
		if (!n->listener) {
			snprintf(err, errsz, "[node] listen %s: %s", hp,
				 strerror(errno));
			r = SEMQ_ERR_IO;
			goto out;
		}
		evconnlistener_set_error_cb(n->listener, accept_error_cb);
	}
	if (c->admin.set) {
		r = admin_new(n->base, c, list_peers, n, &n->admin, err, errsz);
		if (r != SEMQ_OK)
			goto out;
		r = SEMQ_ERR_NOMEM;
	}
	for (i = 0; i < c->n_peers; i++)
		if (c->peers[i].connect.set) {
			n->n_dialers++;
			if (!is_numeric(c->peers[i].connect.host))
				need_dns = 1;
		}
	/* Host names are resolved on the loop (evdns), never with a
	 * blocking getaddrinfo(); numeric addresses need no resolver. */
	if (need_dns) {
		n->dns = evdns_base_new(
			n->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
					 EVDNS_BASE_DISABLE_WHEN_INACTIVE);
		if (!n->dns) {
			snprintf(err, errsz,
				 "cannot set up the DNS resolver (from "
				 "/etc/resolv.conf)");
			r = SEMQ_ERR_IO;
			goto out;
		}
		n->prm.dns = n->dns;
	}
	if (c->n_peers) {
		/* every configured peer is down from the start until it
		 * connects */
		int64_t now = clock_real_ms(NULL);
		n->down = calloc(c->n_peers, sizeof *n->down);
		if (!n->down)
			goto out;
		n->n_down = c->n_peers;
		for (i = 0; i < c->n_peers; i++)
			n->down[i].down_since = now;
	}
	n->n_dialers = 0;
	for (i = 0; i < c->n_peers; i++)
		if (c->peers[i].connect.set && !dialer_add(n, &c->peers[i]))
			goto out;
	*out = n;
	n = NULL;
	r = SEMQ_OK;
out:
	net_free(n);
	return r;
}

void net_attach_worker(struct net *n, struct worker *w)
{
	n->w = w;
	n->prm.life = worker_life(w); /* for Hello: the store has opened */
	worker_set_relief(w, relief, n);
	if (n->admin)
		admin_attach_worker(n->admin, w);
}

int net_run(struct net *n)
{
	size_t i;

	for (i = 0; i < n->n_dialers; i++)
		schedule_dial(n->dialers[i]);
	n->watchdog_ms = sdnotify_watchdog_ms();
	if (n->watchdog_ms > 0) {
		int64_t half = n->watchdog_ms / 2 ? n->watchdog_ms / 2 : 1;
		struct timeval tv = {half / 1000, (half % 1000) * 1000};

		n->ev_watchdog =
			event_new(n->base, -1, EV_PERSIST, watchdog_cb, n);
		if (n->ev_watchdog)
			event_add(n->ev_watchdog, &tv);
		sdnotify_send("WATCHDOG=1");
	}
	event_base_dispatch(n->base);
	n->stopping = 1;
	return SEMQ_OK;
}

void net_drain(struct net *n)
{
	struct timeval tick = {0, 50000};
	int rounds;

	n->stopping = 1;
	n->w = NULL; /* the worker is stopped: nothing more is submitted */
	out_cb(-1, 0, n);
	if (n->admin)
		admin_drain(n->admin);
	while (n->n_conns)
		conn_close(n->conns[0], SEMQ__ERROR__CODE__SHUTDOWN,
			   "node is stopping");
	/* conn_close removed them from the array; their bytes are still
	 * flushing: give the loop a bounded time to send them. */
	for (rounds = 0; rounds < 40 && conn_live() > 0; rounds++) {
		event_base_loopexit(n->base, &tick);
		event_base_dispatch(n->base);
	}
	/* bufferevent_free() defers the real free (and the SSL's) to the
	 * loop while callbacks of the bufferevent are pending: a connection
	 * destroyed just before the stop (a failed handshake) is gone from
	 * conn_live() but not yet freed. Let the loop run them once. */
	event_base_loop(n->base, EVLOOP_NONBLOCK);
}

void net_free(struct net *n)
{
	size_t i;

	if (!n)
		return;
	n->stopping = 1;
	while (n->n_conns)
		conn_free(n->conns[0]);
	for (i = 0; i < n->n_dialers; i++)
		dialer_free(n->dialers[i]);
	free(n->dialers);
	free(n->down);
	for (i = 0; i < n->n_gens; i++)
		if (n->gens[i].parsed)
			config_free(n->gens[i].parsed);
		else
			free(n->gens[i].live);
	free(n->gens);
	free(n->conns);
	out_free_list(n->out_head);
	for (i = 0; i < 3; i++)
		if (n->ev_sig[i])
			event_free(n->ev_sig[i]);
	if (n->ev_wake)
		event_free(n->ev_wake);
	if (n->ev_out)
		event_free(n->ev_out);
	if (n->ev_stop)
		event_free(n->ev_stop);
	if (n->ev_accept_retry)
		event_free(n->ev_accept_retry);
	if (n->ev_accept_calm)
		event_free(n->ev_accept_calm);
	if (n->ev_crl)
		event_free(n->ev_crl);
	if (n->ev_watchdog)
		event_free(n->ev_watchdog);
	if (n->ev_relief)
		event_free(n->ev_relief);
	if (n->dns)
		evdns_base_free(n->dns, 1);
	if (n->wake_fd >= 0)
		close(n->wake_fd);
	if (n->listener)
		evconnlistener_free(n->listener);
	admin_free(n->admin);
	if (n->tls)
		SSL_CTX_free(n->tls);
	if (n->base)
		event_base_free(n->base);
	pthread_mutex_destroy(&n->out_mu);
	free(n);
}
