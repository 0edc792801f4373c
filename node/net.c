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
 *    the stream's origin. A violation is an Error(FORBIDDEN) and the link
 *    closes; nothing of that frame is stored, other peers are unaffected.
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
 */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "admin.h"
#include "codec.h"
#include "fault.h"
#include "log.h"
#include "peer.h"
#include "tls.h"
#include "worker.h"

#define MAX_CONNS 4096

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
	char addr[INET6_ADDRSTRLEN + 8]; /* host:port */
	int64_t since;                   /* unix ms: accepted / dial started */
	int64_t ready_at;                /* unix ms: Hello done; 0 before */
};

struct net {
	const struct config *c;
	struct event_base *base;
	SSL_CTX *tls;
	struct evconnlistener *listener;
	struct admin *admin; /* NULL when [node] admin is not set */
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
	struct dialer *dialers;
	size_t n_dialers;
	struct conn **conns;
	size_t n_conns;
	uint64_t next_id;
	int stopping;
	uint64_t rng;
};

/* ---- helpers -------------------------------------------------------------- */

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
		r->hops[k].revision = conn_peer_revision(c);
		r->hops[k].life = conn_peer_life(c);
		k++;
	}
	r->n_hops = k;
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

/* Remembers where c goes and since when, for /peers (without them when out
 * of memory). */
static void conn_info_set(struct conn *c, const char *addr)
{
	struct conn_info *ci = calloc(1, sizeof *ci);

	if (!ci)
		return;
	snprintf(ci->addr, sizeof ci->addr, "%s", addr);
	ci->since = clock_real_ms(NULL);
	conn_set_user(c, ci);
}

/* ---- rights of a peer (SPEC §10) ------------------------------------------ */

static int check_rights(struct net *n, const char *peer, const Semq__Frame *f,
			char *why, size_t whysz)
{
	size_t i;

	if (trusted(n, peer))
		return 0;
	switch (f->body_case) {
	case SEMQ__FRAME__BODY_DATA:
		for (i = 0; i < f->data->n_messages; i++)
			if (strcmp(f->data->messages[i]->origin, peer)) {
				snprintf(why, whysz,
					 "Data from '%s' carries a message of "
					 "origin '%s'; only a trusted_relay "
					 "may carry other nodes' messages",
					 peer, f->data->messages[i]->origin);
				return -1;
			}
		return 0;
	case SEMQ__FRAME__BODY_ACK_INDICATION:
		for (i = 0; i < f->ack_indication->n_verdicts; i++)
			if (strcmp(f->ack_indication->verdicts[i]->id->dest,
				   peer)) {
				snprintf(why, whysz,
					 "810-Indication from '%s' for a "
					 "message to '%s'",
					 peer,
					 f->ack_indication->verdicts[i]
						 ->id->dest);
				return -1;
			}
		return 0;
	case SEMQ__FRAME__BODY_QUERY_REPLY:
		for (i = 0; i < f->query_reply->n_answers; i++)
			if (strcmp(f->query_reply->answers[i]->id->dest,
				   peer)) {
				snprintf(why, whysz,
					 "QueryReply from '%s' about a "
					 "message to '%s'",
					 peer,
					 f->query_reply->answers[i]->id->dest);
				return -1;
			}
		return 0;
	case SEMQ__FRAME__BODY_ACK_RESPONSE:
		if (strcmp(f->ack_response->from, peer)) {
			snprintf(why, whysz,
				 "810-Response from '%s' claims to "
				 "come from '%s'",
				 peer, f->ack_response->from);
			return -1;
		}
		for (i = 0; i < f->ack_response->n_ids; i++)
			if (strcmp(f->ack_response->ids[i]->origin, peer)) {
				snprintf(why, whysz,
					 "810-Response from '%s' for a "
					 "message of origin '%s'",
					 peer, f->ack_response->ids[i]->origin);
				return -1;
			}
		return 0;
	case SEMQ__FRAME__BODY_RELAY_ACK:
		/* "Not delivered" from anyone only delays a resend; a claim
		 * of custody (forwarded, stored) or that nobody knows the
		 * destination (the origin puts the message dead) only from a
		 * trusted relay. */
		if (f->relay_ack->kind == SEMQ__RELAY_ACK__KIND__UNREACHABLE &&
		    f->relay_ack->reason != SEMQ__RELAY_REFUSAL__UNKNOWN_DEST)
			return 0;
		snprintf(why, whysz,
			 "RelayAck (%s) from '%s', which is not a "
			 "trusted_relay",
			 f->relay_ack->kind ==
					 SEMQ__RELAY_ACK__KIND__UNREACHABLE
				 ? "unknown destination"
				 : "custody",
			 peer);
		return -1;
	case SEMQ__FRAME__BODY_QUERY:
		for (i = 0; i < f->query->n_ids; i++)
			if (strcmp(f->query->ids[i]->origin, peer)) {
				snprintf(why, whysz,
					 "Query from '%s' about a message of "
					 "origin '%s'",
					 peer, f->query->ids[i]->origin);
				return -1;
			}
		return 0;
	case SEMQ__FRAME__BODY_STREAM_QUERY:
		if (strcmp(f->stream_query->origin, peer)) {
			snprintf(why, whysz,
				 "StreamQuery from '%s' about the streams of "
				 "'%s'",
				 peer, f->stream_query->origin);
			return -1;
		}
		return 0;
	case SEMQ__FRAME__BODY_STREAM_STATE:
		if (strcmp(f->stream_state->reporter, peer)) {
			snprintf(why, whysz,
				 "StreamState from '%s' reporting for '%s'",
				 peer, f->stream_state->reporter);
			return -1;
		}
		return 0;
	case SEMQ__FRAME__BODY_PING:
	case SEMQ__FRAME__BODY_PONG:
	case SEMQ__FRAME__BODY_ERROR: return 0;
	default:
		/* A body this table does not know is refused, never let
		 * through (a new frame kind must be given its rights here). */
		snprintf(why, whysz, "a frame of body %d has no rights here",
			 (int)f->body_case);
		return -1;
	}
}

/* ---- connection callbacks -------------------------------------------------- */

/* [node] allow = listed: only ids with a [peer] section get past TLS (a
 * dialled peer always has one). */
static int on_identified(void *ctx, struct conn *c, char *why, size_t whysz)
{
	struct net *n = ctx;

	if (!n->c->allow_listed || config_peer(n->c, conn_peer(c)))
		return 0;
	snprintf(why, whysz,
		 "'%s' has no [peer %s] section and this node allows only "
		 "listed peers ([node] allow = listed); add the section to let "
		 "it in",
		 conn_peer(c), conn_peer(c));
	return -1;
}

static void on_ready(void *ctx, struct conn *c)
{
	struct net *n = ctx;
	struct job *j;
	size_t i;

	for (i = 0; i < n->n_dialers; i++)
		if (n->dialers[i].conn == c)
			n->dialers[i].attempts = 0;
	if (conn_user(c))
		((struct conn_info *)conn_user(c))->ready_at =
			clock_real_ms(NULL);
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

	if (check_rights(n, conn_peer(c), f, why, sizeof why) != 0) {
		log_msg(LOG_WARN, "net", conn_peer(c), NULL, "refused: %s",
			why);
		codec_frame_free(f);
		conn_close(c, SEMQ__ERROR__CODE__FORBIDDEN, why);
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
	submit(n, j);
	return 0;
}

static void schedule_dial(struct dialer *d);

static void on_close(void *ctx, struct conn *c, const char *why)
{
	struct net *n = ctx;
	int was_ready = conn_state(c) == CONN_READY || conn_peer(c)[0];
	size_t i;

	(void)why;
	free(conn_user(c));
	conn_set_user(c, NULL);
	for (i = 0; i < n->n_conns; i++)
		if (n->conns[i] == c) {
			memmove(&n->conns[i], &n->conns[i + 1],
				(n->n_conns - i - 1) * sizeof *n->conns);
			n->n_conns--;
			break;
		}
	for (i = 0; i < n->n_dialers; i++)
		if (n->dialers[i].conn == c) {
			n->dialers[i].conn = NULL;
			if (!n->stopping)
				schedule_dial(&n->dialers[i]);
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
	c = conn_new(n->base, n->tls, -1, d->peer->connect.host,
		     d->peer->connect.port, d->peer->name, ++n->next_id,
		     &n->prm, &n->cbs, n);
	if (!c || add_conn(n, c) != SEMQ_OK) {
		if (c)
			conn_free(c);
		log_msg(LOG_WARN, "net", d->peer->name, NULL,
			"cannot dial %s:%u", d->peer->connect.host,
			d->peer->connect.port);
		schedule_dial(d);
		return;
	}
	d->conn = c;
	d->next_at = 0;
	addr_text(addr, sizeof addr, d->peer->connect.host,
		  d->peer->connect.port);
	conn_info_set(c, addr);
	log_msg(LOG_DEBUG, "net", d->peer->name, NULL, "dialling %s:%u",
		d->peer->connect.host, d->peer->connect.port);
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

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int salen, void *arg)
{
	struct net *n = arg;
	char host[INET6_ADDRSTRLEN] = "?", addr[INET6_ADDRSTRLEN + 8];
	unsigned port = 0;
	struct conn *c;

	(void)l;
	(void)salen;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		evutil_inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		port = ntohs(in->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		evutil_inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		port = ntohs(in6->sin6_port);
	}
	addr_text(addr, sizeof addr, host, port);
	if (n->stopping || n->n_conns >= MAX_CONNS) {
		evutil_closesocket(fd);
		return;
	}
	evutil_make_socket_nonblocking(fd);
	c = conn_new(n->base, n->tls, fd, NULL, 0, NULL, ++n->next_id, &n->prm,
		     &n->cbs, n);
	if (c && add_conn(n, c) != SEMQ_OK)
		conn_free(c);
	else if (c)
		conn_info_set(c, addr);
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
	if (!n->stopping)
		log_info("net", "stopping: no new connections");
	n->stopping = 1;
	if (n->listener)
		evconnlistener_disable(n->listener);
	if (n->admin)
		admin_stopping(n->admin);
	event_base_loopexit(n->base, NULL);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	if (sig == SIGHUP) {
		if (log_reopen() != SEMQ_OK)
			log_warn("net", "SIGHUP: cannot reopen the log file");
		return;
	}
	stop_cb(-1, 0, arg);
}

void net_stop(struct net *n)
{
	event_active(n->ev_stop, EV_READ, 0);
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
			if (n->dialers[k].conn == c)
				p.peer = n->dialers[k].peer->name;
		p.instance = conn_peer_instance(c);
		p.state = conn_state(c);
		p.outbound = conn_outbound(c);
		p.address = ci ? ci->addr : NULL;
		p.conn_id = conn_id(c);
		p.since = ci ? ci->since : 0;
		p.ready_at = ci ? ci->ready_at : 0;
		p.pending = conn_output_pending(c);
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
			if (n->dialers[i].peer == cp)
				d = &n->dialers[i];
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
		cb(cb_ctx, &p);
	}
}

/*
 * The wake socket's abstract name (see DESIGN): for the unnamed instance of a
 * SQLite file, semq_wake_name() (what semq_notify() and semqctl poke); for a
 * named instance that name plus "@INSTANCE"; for a postgresql:// database
 * "semq-wake-pg-HASH@INSTANCE", HASH the FNV-1a of the URL (never the URL
 * itself: it may hold a password).
 */
static int wake_name(const struct config *c, char *name, size_t namesz,
		     size_t *len, char *err, size_t errsz)
{
	uint64_t h = 14695981039346656037ULL;
	const unsigned char *p;
	int k;

	if (c->db_url) {
		for (p = (const unsigned char *)c->db; *p; p++) {
			h ^= *p;
			h *= 1099511628211ULL;
		}
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

int net_new(const struct config *c, struct net **out, char *err, size_t errsz)
{
	static const int sigs[3] = {SIGTERM, SIGINT, SIGHUP};
	struct net *n;
	size_t i;
	int r = SEMQ_ERR_NOMEM;

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
				      : 0);
	n->prm.max_frame = c->max_frame;
	n->prm.software = "semqd " SEMQ_VERSION;
	n->prm.ping_interval_ms = c->ping_interval_ms;
	n->prm.idle_timeout_ms = c->idle_timeout_ms;
	n->cbs.on_identified = on_identified;
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
		n->tls = tls_ctx_new(c->tls_cert, c->tls_key, c->tls_ca, c->id,
				     err, errsz);
		if (!n->tls) {
			r = SEMQ_ERR_CONFIG;
			goto out;
		}
	}
	r = bind_wake(n, err, errsz);
	if (r != SEMQ_OK)
		goto out;
	r = SEMQ_ERR_NOMEM;
	n->ev_wake = event_new(n->base, n->wake_fd, EV_READ | EV_PERSIST,
			       wake_cb, n);
	n->ev_out = event_new(n->base, -1, 0, out_cb, n);
	n->ev_stop = event_new(n->base, -1, 0, stop_cb, n);
	if (!n->ev_wake || !n->ev_out || !n->ev_stop)
		goto out;
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
	}
	if (c->admin.set) {
		r = admin_new(n->base, c, list_peers, n, &n->admin, err, errsz);
		if (r != SEMQ_OK)
			goto out;
		r = SEMQ_ERR_NOMEM;
	}
	for (i = 0; i < c->n_peers; i++)
		if (c->peers[i].connect.set)
			n->n_dialers++;
	if (n->n_dialers) {
		size_t k = 0;
		n->dialers = calloc(n->n_dialers, sizeof *n->dialers);
		if (!n->dialers)
			goto out;
		for (i = 0; i < c->n_peers; i++) {
			struct dialer *d;
			if (!c->peers[i].connect.set)
				continue;
			d = &n->dialers[k++];
			d->n = n;
			d->peer = &c->peers[i];
			d->timer = evtimer_new(n->base, dial_cb, d);
			if (!d->timer)
				goto out;
		}
	}
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
	if (n->admin)
		admin_attach_worker(n->admin, w);
}

int net_run(struct net *n)
{
	size_t i;

	for (i = 0; i < n->n_dialers; i++)
		schedule_dial(&n->dialers[i]);
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
		if (n->dialers[i].timer)
			event_free(n->dialers[i].timer);
	free(n->dialers);
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
