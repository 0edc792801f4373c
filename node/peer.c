/* SPDX-License-Identifier: MIT */
/*
 * A peer connection (see peer.h). One bufferevent per connection with
 * BEV_OPT_CLOSE_ON_FREE and an OpenSSL layer; frames are read by the codec's
 * incremental reader (codec.h), fed from the input evbuffer only what the
 * next frame lacks: the 4-byte header is checked against max_frame before
 * any of the body is waited for, so an oversized frame is refused without
 * buffering it.
 *
 * DESIGN
 *  - No frame is read before the TLS handshake verified the peer's
 *    certificate and, for a dialled connection, its id is the one configured.
 *  - Until both Hellos are exchanged, only Hello (and Error) is accepted.
 *    Once the peer's Hello is checked the owner may still refuse it
 *    (on_hello): the Error then goes out in place of an acceptor's Hello,
 *    so the peer never becomes ready (and its dialler keeps backing off).
 *  - conn_close() never frees inside a callback of the same bufferevent
 *    before the write side drained: CLOSING waits for the output to empty (or
 *    a short deadline), then frees.
 *  - Three clocks bound what a peer holds. The handshake deadline is one
 *    timer armed in conn_new() and removed at READY: it never restarts, so a
 *    peer trickling its ClientHello or its Hello a byte at a time is closed
 *    on time. The idle timeout is the bufferevent's read timeout (any byte
 *    restarts it). The write timeout is its write timeout: libevent arms it
 *    while output is pending and restarts it only when the socket takes
 *    bytes, so queuing more (a Ping, an answer) does not extend it.
 *  - Log lines a peer can cause at will are bounded. A peer's Error text is
 *    shown sanitised (printable ASCII, at most ERROR_TEXT_MAX bytes), and
 *    its Errors and its refusals after identification at most once per
 *    RATE_EVERY_MS per peer id, the next line saying how many were left
 *    out. Lines about inbound connections that never authenticated (a
 *    failed or abandoned handshake, its deadline) are at most
 *    STRANGER_LINES per STRANGER_WINDOW_MS in all, then one line with the
 *    count: strangers can open connections faster than anyone reads logs.
 */
#include "peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>

#include "codec.h"
#include "config.h"
#include "log.h"
#include "tls.h"

#define CLOSE_FLUSH_MS 2000
#define HELLO_MAX (64u * 1024)        /* bytes of a frame before Hello */
#define HIGH_WATER (8u * 1024 * 1024) /* output bytes before we stop reading */
#define ERROR_TEXT_MAX 200            /* bytes of a peer's Error text shown */
#define RATE_EVERY_MS 10000      /* one line per peer and kind this often */
#define RATE_SLOTS 256           /* (kind, peer) whose last line is kept */
#define STRANGER_LINES 20        /* lines about unauthenticated inbound */
#define STRANGER_WINDOW_MS 10000 /* connections per this long, at most */

struct conn {
	uint64_t id;
	int state;
	int outbound;
	char expect[SEMQ_ID_MAX + 1];
	char peer[SEMQ_ID_MAX + 1];
	char instance[SEMQ_INSTANCE_MAX + 1]; /* from the peer's Hello */
	unsigned revision;                    /* its wire revision */
	uint64_t peer_life;                   /* its life; 0 = revision 1 */
	char software[65];                    /* its software, "" = none */
	char addr[64];
	char remote[64];            /* the socket's other end */
	char cert[SEMQ_ID_MAX + 1]; /* the presented certificate's id or CN,
				       verified or not; "" unknown */
	unsigned peer_features;
	size_t peer_max_frame; /* from its Hello */
	int paused; /* conn_pause(): no frame is read until it resumes */
	struct codec_reader *rd; /* the frame being read; owned */
	int hello_sent;
	int closed; /* on_close called */
	struct bufferevent *bev;
	struct event *ping;
	struct event *flush_deadline;
	struct event *hs_deadline; /* conn_new() to READY */
	const struct conn_params *prm;
	const struct conn_cbs *cbs;
	void *ctx;
	void *user;
	uint64_t ping_nonce;
};

static unsigned live; /* connections not yet freed (network thread only) */
static struct conn_stats stats; /* network thread only */

/* The last line of a kind logged per peer id (network thread only). */
static struct rate_slot {
	char kind; /* 'e': its Error frames, 'r': refusals */
	char peer[SEMQ_ID_MAX + 1];
	int64_t last_ms; /* monotonic; 0 = free slot */
	uint64_t quiet;  /* lines left out since */
} rate_slots[RATE_SLOTS];

/* Lines about inbound connections before authentication, this window. */
static struct {
	int64_t start; /* monotonic ms */
	unsigned n;
	uint64_t quiet;
} strangers;

unsigned conn_live(void)
{
	return live;
}

void conn_get_stats(struct conn_stats *out)
{
	*out = stats;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * May a line of `kind` about `peer` be logged now? At most one per
 * RATE_EVERY_MS: 1 with *quiet = the lines left out since the last one
 * (over *quiet_ms), or 0 (counted). The least recently used slot goes to a
 * peer not seen before.
 */
static int rate_ok(char kind, const char *peer, uint64_t *quiet,
		   int64_t *quiet_ms)
{
	struct rate_slot *r = NULL, *lru = &rate_slots[0];
	int64_t now = mono_ms();
	size_t i;

	for (i = 0; i < RATE_SLOTS && !r; i++)
		if (rate_slots[i].last_ms && rate_slots[i].kind == kind &&
		    !strcmp(rate_slots[i].peer, peer))
			r = &rate_slots[i];
		else if (rate_slots[i].last_ms < lru->last_ms)
			lru = &rate_slots[i];
	if (r && now - r->last_ms < RATE_EVERY_MS) {
		r->quiet++;
		return 0;
	}
	if (!r) {
		r = lru;
		memset(r, 0, sizeof *r);
		r->kind = kind;
		snprintf(r->peer, sizeof r->peer, "%s", peer);
	}
	*quiet = r->quiet;
	*quiet_ms = r->last_ms ? now - r->last_ms : 0;
	r->last_ms = now;
	r->quiet = 0;
	return 1;
}

/* May a line about an inbound connection that has not authenticated be
 * logged now? (DESIGN) */
static int stranger_ok(const struct conn *c)
{
	int64_t now = mono_ms();

	if (c->outbound || c->state != CONN_TLS)
		return 1;
	if (now - strangers.start >= STRANGER_WINDOW_MS) {
		if (strangers.quiet)
			log_msg(LOG_WARN, "peer", NULL, NULL,
				"%" PRIu64 " more lines about connections "
				"that did not authenticate were left out in "
				"the last %lld s (at most %d per %d s)",
				strangers.quiet,
				(long long)(now - strangers.start) / 1000,
				STRANGER_LINES, STRANGER_WINDOW_MS / 1000);
		strangers.start = now;
		strangers.n = 0;
		strangers.quiet = 0;
	}
	if (strangers.n < STRANGER_LINES) {
		strangers.n++;
		return 1;
	}
	strangers.quiet++;
	stats.lines_suppressed++;
	return 0;
}

const char *conn_state_text(int state)
{
	switch (state) {
	case CONN_TLS: return "tls";
	case CONN_HELLO: return "hello";
	case CONN_READY: return "ready";
	case CONN_CLOSING: return "closing";
	}
	return "?";
}

static const char *who(const struct conn *c)
{
	return c->peer[0] ? c->peer : c->expect[0] ? c->expect : c->addr;
}

static const char *const failure_text[CONN_FAIL_N] = {
	"refused", "timeout",    "dns",     "unreachable", "reset",
	"closed",  "unknown_ca", "expired", "revoked",     "id_mismatch",
	"no_cert", "version",    "tls",     "other"};

const char *conn_failure_text(int reason)
{
	return reason >= 0 && reason < CONN_FAIL_N ? failure_text[reason] : "?";
}

/* A connection that never got ready failed for `reason`: counted once. */
static void failed(struct conn *c, int reason)
{
	if (c->state == CONN_READY || c->state == CONN_CLOSING || c->closed)
		return;
	stats.failed[c->outbound ? 1 : 0][reason]++;
}

/* The id (or CN) of the certificate the peer presented, verified or not:
 * what its refusal line names. */
static void note_cert(struct conn *c)
{
	SSL *ssl = c->bev ? bufferevent_openssl_get_ssl(c->bev) : NULL;
	X509 *x = ssl ? tls_presented_cert(ssl) : NULL;
	const X509_NAME *name;
	char cn[256];
	size_t i;

	if (c->cert[0] || !x)
		return;
	if (tls_cert_id(x, c->cert) == SEMQ_OK)
		return;
	name = X509_get_subject_name(x);
	if (!name ||
	    X509_NAME_get_text_by_NID((X509_NAME *)name, NID_commonName, cn,
				      sizeof cn) < 0)
		return;
	for (i = 0; cn[i] && i < sizeof c->cert - 1; i++) /* shown: printable */
		c->cert[i] = cn[i] > 0x20 && cn[i] < 0x7f ? cn[i] : '?';
	c->cert[i] = '\0';
}

/*
 * A line about connection c: peer=WHO as every peer line, then the text,
 * then where it is (addr=HOST:PORT, the socket's other end or the address
 * dialled) and whose certificate (cert=ID; "?" before the handshake showed
 * one).
 */
static void conn_log(struct conn *c, int level, const char *peer,
		     const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void conn_log(struct conn *c, int level, const char *peer,
		     const char *fmt, ...)
{
	char text[1600];
	va_list ap;

	note_cert(c);
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	log_msg(level, "peer", peer, NULL, "%s addr=%s cert=%s", text,
		c->remote[0] ? c->remote : c->addr,
		c->peer[0]   ? c->peer
		: c->cert[0] ? c->cert
			     : "?");
}

static void destroy(struct conn *c, const char *why)
{
	if (!c->closed) {
		c->closed = 1;
		if (c->cbs->on_close)
			c->cbs->on_close(c->ctx, c, why);
	}
	if (c->ping)
		event_free(c->ping);
	if (c->flush_deadline)
		event_free(c->flush_deadline);
	if (c->hs_deadline)
		event_free(c->hs_deadline);
	codec_reader_free(c->rd);
	if (c->bev) {
		SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
		if (ssl)
			SSL_set_shutdown(ssl, SSL_RECEIVED_SHUTDOWN);
		bufferevent_free(c->bev);
	}
	free(c);
	live--;
}

void conn_free(struct conn *c)
{
	if (c)
		destroy(c, "shutdown");
}

static int send_frame(struct conn *c, const Semq__Frame *f)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int r;

	r = codec_encode(f, c->prm->max_frame, &buf, &len);
	if (r != SEMQ_OK)
		return r;
	r = bufferevent_write(c->bev, buf, len) == 0 ? SEMQ_OK : SEMQ_ERR_IO;
	free(buf);
	return r;
}

static void flushed_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		destroy(c, "closed");
}

static void flush_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	destroy(arg, "closed (flush timed out)");
}

void conn_close(struct conn *c, int code, const char *text)
{
	struct timeval tv = {CLOSE_FLUSH_MS / 1000,
			     (CLOSE_FLUSH_MS % 1000) * 1000};
	int was_tls;

	if (!c || c->state == CONN_CLOSING)
		return;
	was_tls = c->state == CONN_TLS;
	if (code == SEMQ__ERROR__CODE__SHUTDOWN && c->state == CONN_READY)
		conn_log(c, LOG_INFO, who(c), "closing: %s",
			 text ? text : "closed by this node");
	if (code && !was_tls) {
		Semq__Frame f = SEMQ__FRAME__INIT;
		Semq__Error e = SEMQ__ERROR__INIT;
		e.code = code;
		e.text = (char *)(text ? text : "");
		e.fatal = 1;
		f.body_case = SEMQ__FRAME__BODY_ERROR;
		f.error = &e;
		send_frame(c, &f);
	}
	c->state = CONN_CLOSING;
	if (!c->closed) {
		c->closed = 1;
		if (c->cbs->on_close)
			c->cbs->on_close(c->ctx, c, text ? text : "closed");
	}
	if (c->ping)
		event_del(c->ping);
	if (c->hs_deadline)
		event_del(c->hs_deadline);
	bufferevent_disable(c->bev, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 ||
	    was_tls) {
		destroy(c, "closed");
		return;
	}
	bufferevent_setcb(c->bev, NULL, flushed_cb, NULL, c);
	c->flush_deadline =
		evtimer_new(bufferevent_get_base(c->bev), flush_deadline_cb, c);
	if (c->flush_deadline)
		evtimer_add(c->flush_deadline, &tv);
	else
		destroy(c, "closed");
}

int conn_send(struct conn *c, const uint8_t *bytes, size_t len)
{
	if (c->state != CONN_READY)
		return SEMQ_DECLINED;
	if (bufferevent_write(c->bev, bytes, len) != 0)
		return SEMQ_ERR_IO;
	/* A peer that does not read its answers is not fed more input. */
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) > HIGH_WATER)
		bufferevent_disable(c->bev, EV_READ);
	return SEMQ_OK;
}

static void send_hello(struct conn *c)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Hello h = SEMQ__HELLO__INIT;

	h.node_id = (char *)c->prm->node_id;
	h.protocol_version = SEMQ__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.role = c->prm->role;
	h.features = c->prm->features;
	h.max_frame = (uint32_t)c->prm->max_frame;
	h.instance = (char *)(c->prm->instance ? c->prm->instance : "");
	h.life = c->prm->life;
	h.wire_revision = SEMQ__WIRE_REVISION__WIRE_REVISION;
	h.software = (char *)(c->prm->software ? c->prm->software : "");
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	f.hello = &h;
	send_frame(c, &f);
	c->hello_sent = 1;
}

static void ping_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Ping p = SEMQ__PING__INIT;

	(void)fd;
	(void)what;
	if (c->state != CONN_READY)
		return;
	p.nonce = ++c->ping_nonce;
	f.body_case = SEMQ__FRAME__BODY_PING;
	f.ping = &p;
	send_frame(c, &f);
}

/* Hello from the peer: same id as the certificate, a version we speak. */
static int on_hello(struct conn *c, const Semq__Hello *h)
{
	char text[192];
	struct timeval tv;

	if (strcmp(h->node_id, c->peer) != 0) {
		snprintf(text, sizeof text,
			 "Hello says '%s' but the certificate is for '%s'",
			 h->node_id, c->peer);
		failed(c, CONN_FAIL_ID_MISMATCH);
		conn_log(c, LOG_WARN, c->peer, "refused: %s", text);
		conn_close(c, SEMQ__ERROR__CODE__IDENTITY, text);
		return -1;
	}
	if (h->protocol_version != SEMQ__PROTOCOL_VERSION__PROTOCOL_VERSION) {
		snprintf(text, sizeof text,
			 "protocol version %u is not spoken here (1)",
			 h->protocol_version);
		failed(c, CONN_FAIL_VERSION);
		conn_log(c, LOG_WARN, c->peer, "refused: %s", text);
		conn_close(c, SEMQ__ERROR__CODE__VERSION, text);
		return -1;
	}
	c->peer_features = h->features;
	c->peer_max_frame = h->max_frame;
	/* validated by the codec: at most SEMQ_INSTANCE_MAX of the name set */
	snprintf(c->instance, sizeof c->instance, "%s", h->instance);
	c->revision = h->wire_revision >= 2 ? h->wire_revision : 1;
	c->peer_life = h->life;
	/* printable ASCII of at most 64 bytes (codec) */
	snprintf(c->software, sizeof c->software, "%s", h->software);
	if (c->cbs->on_hello) {
		char why[512];
		int code = c->cbs->on_hello(c->ctx, c, why, sizeof why);

		if (code) { /* logged by the owner, which knows why */
			conn_close(c, code, why);
			return -1;
		}
	}
	if (!c->hello_sent)
		send_hello(c);
	c->state = CONN_READY;
	if (c->hs_deadline)
		event_del(c->hs_deadline);
	tv.tv_sec = c->prm->ping_interval_ms / 1000;
	tv.tv_usec = (c->prm->ping_interval_ms % 1000) * 1000;
	c->ping = event_new(bufferevent_get_base(c->bev), -1, EV_PERSIST,
			    ping_cb, c);
	if (c->ping)
		event_add(c->ping, &tv);
	conn_log(c, LOG_INFO, c->peer,
		 "ready (%s, %s%s%s, %s, wire revision %u)",
		 c->outbound ? "dialled" : "accepted", c->addr,
		 c->instance[0] ? ", instance " : "", c->instance,
		 c->software[0] ? c->software : "semqd 0.1", c->revision);
	if (c->revision < 2)
		conn_log(c, LOG_WARN, c->peer,
			 "runs SEMQ 0.1 (wire revision 1): it knows no lives "
			 "or digests, so a restore or re-image of this node "
			 "or of %s is not detected on this link; upgrade %s",
			 c->peer, c->peer);
	if (c->cbs->on_ready)
		c->cbs->on_ready(c->ctx, c);
	return 0;
}

/*
 * The peer's Error, logged: its text with every byte that is not printable
 * ASCII replaced by '?' and cut at ERROR_TEXT_MAX; at most one line per
 * peer id per RATE_EVERY_MS (a peer that reconnects to send Errors cannot
 * fill the log), the next one saying how many were left out.
 */
static void log_peer_error(struct conn *c, const Semq__Error *e)
{
	char text[ERROR_TEXT_MAX + 1], more[96] = "";
	const char *t = e->text ? e->text : "";
	size_t i, len = strlen(t);
	uint64_t quiet;
	int64_t quiet_ms;

	if (!rate_ok('e', who(c), &quiet, &quiet_ms)) {
		stats.errors_suppressed++;
		return;
	}
	for (i = 0; i < len && i < ERROR_TEXT_MAX; i++)
		text[i] = t[i] >= 0x20 && t[i] < 0x7f ? t[i] : '?';
	text[i] = '\0';
	if (quiet)
		snprintf(more, sizeof more,
			 " (%" PRIu64 " more Error frames from it in the last "
			 "%lld s not logged)",
			 quiet, (long long)(quiet_ms / 1000));
	stats.errors_logged++;
	if (e->code == SEMQ__ERROR__CODE__DEST_UNAVAILABLE) {
		/* a forward-only relay with nowhere to forward to: say what
		 * happens next, since the operator will ask */
		conn_log(c, LOG_WARN, who(c),
			 "refused by %s for now (DEST_UNAVAILABLE): %s%s; the "
			 "messages routed through it wait here%s%s",
			 who(c), text, len > ERROR_TEXT_MAX ? "... (cut)" : "",
			 c->outbound
				 ? ", and it is dialled again with back-off "
				   "(reconnect_min doubling up to "
				   "reconnect_max)"
				 : " until it connects again",
			 more);
		return;
	}
	conn_log(c,
		 e->code == SEMQ__ERROR__CODE__SHUTDOWN ? LOG_INFO : LOG_WARN,
		 who(c), "peer reports error %d: %s%s%s", e->code, text,
		 len > ERROR_TEXT_MAX ? "... (cut)" : "", more);
}

/* Handles one frame; returns non-zero when the connection is gone. */
static int dispatch(struct conn *c, Semq__Frame *f)
{
	if (f->body_case == SEMQ__FRAME__BODY_ERROR) {
		log_peer_error(c, f->error);
		if (f->error->fatal) {
			codec_frame_free(f);
			conn_close(c, 0, "peer closed with an error");
			return -1;
		}
		codec_frame_free(f);
		return 0;
	}
	if (c->state == CONN_HELLO) {
		int r;
		if (f->body_case != SEMQ__FRAME__BODY_HELLO) {
			codec_frame_free(f);
			conn_log(c, LOG_WARN, who(c),
				 "refused: a frame before Hello");
			conn_close(c, SEMQ__ERROR__CODE__PROTOCOL,
				   "Hello expected first");
			return -1;
		}
		r = on_hello(c, f->hello);
		codec_frame_free(f);
		return r;
	}
	switch (f->body_case) {
	case SEMQ__FRAME__BODY_HELLO:
		codec_frame_free(f);
		conn_close(c, SEMQ__ERROR__CODE__PROTOCOL, "a second Hello");
		return -1;
	case SEMQ__FRAME__BODY_PING: {
		Semq__Frame pf = SEMQ__FRAME__INIT;
		Semq__Pong po = SEMQ__PONG__INIT;
		po.nonce = f->ping->nonce;
		po.sent_at = f->ping->sent_at;
		pf.body_case = SEMQ__FRAME__BODY_PONG;
		pf.pong = &po;
		send_frame(c, &pf);
		codec_frame_free(f);
		return 0;
	}
	case SEMQ__FRAME__BODY_PONG: codec_frame_free(f); return 0;
	default: return c->cbs->on_frame(c->ctx, c, f);
	}
}

/*
 * Frames leave as soon as the loop has written them: the bufferevent already
 * gathers everything the loop produced into one TLS write, so Nagle's
 * algorithm only holds a small frame back until the peer's delayed ACK (up to
 * 40 ms) — which it was doing to every Data frame sent while an earlier one
 * was unacknowledged (docs/PERFORMANCE.md, fix 5).
 */
static void no_delay(struct conn *c)
{
	int one = 1;
	evutil_socket_t fd = bufferevent_getfd(c->bev);

	if (fd >= 0 &&
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
		conn_log(c, LOG_WARN, who(c),
			 "TCP_NODELAY: %s (frames may wait for the peer's "
			 "ACK)",
			 strerror(errno));
}

/*
 * Frames come out of the codec's reader (codec.h), which is given from the
 * input evbuffer only what the next frame still lacks: the header is
 * checked against the limit as soon as it is there, before any of the body
 * is waited for, and whatever follows the frame stays in the evbuffer
 * while the connection is paused.
 */
static void read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	while (c->state == CONN_HELLO || c->state == CONN_READY) {
		char err[SEMQ_ERRLEN];
		Semq__Frame *f = NULL;
		size_t want, have, limit;
		uint8_t *dst;
		int r;

		if (c->paused)
			return;
		/* Before Hello only a Hello may come: a small frame. */
		limit = c->prm->max_frame;
		if (c->state == CONN_HELLO && limit > HELLO_MAX)
			limit = HELLO_MAX;
		codec_reader_set_max(c->rd, limit);
		r = codec_reader_want(c->rd, &want, err, sizeof err);
		if (r != SEMQ_OK) {
			conn_log(c, LOG_WARN, who(c), "refused: %s", err);
			conn_close(c,
				   r == SEMQ_ERR_TOO_BIG
					   ? SEMQ__ERROR__CODE__FRAME_TOO_BIG
					   : SEMQ__ERROR__CODE__PROTOCOL,
				   err);
			return;
		}
		if (want) {
			have = evbuffer_get_length(in);
			if (have == 0) {
				/* wake when the rest of the frame is there
				 * (no earlier than a whole header) */
				bufferevent_setwatermark(bev, EV_READ, want, 0);
				return;
			}
			if (have > want)
				have = want;
			if (have > INT_MAX) /* evbuffer_remove's int */
				have = INT_MAX;
			if (codec_reader_reserve(c->rd, have, &dst) !=
				    SEMQ_OK ||
			    evbuffer_remove(in, dst, have) != (int)have) {
				conn_log(c, LOG_ERROR, who(c),
					 "out of memory reading a frame");
				conn_close(c, SEMQ__ERROR__CODE__INTERNAL,
					   "out of memory");
				return;
			}
			continue;
		}
		bufferevent_setwatermark(bev, EV_READ, 0, 0);
		r = codec_reader_next(c->rd, &f, err, sizeof err);
		if (r != SEMQ_OK) {
			conn_log(c, LOG_WARN, who(c), "refused a bad frame: %s",
				 err);
			conn_close(c,
				   r == SEMQ_ERR_TOO_BIG
					   ? SEMQ__ERROR__CODE__FRAME_TOO_BIG
					   : SEMQ__ERROR__CODE__PROTOCOL,
				   err);
			return;
		}
		if (dispatch(c, f) != 0)
			return;
	}
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	/* Below the high-water mark again: resume reading (unless paused
	 * for the memory budget). */
	if (c->state == CONN_READY && !c->paused &&
	    evbuffer_get_length(bufferevent_get_output(bev)) < HIGH_WATER / 2)
		bufferevent_enable(bev, EV_READ);
}

/* What an OpenSSL error (ours, or the peer's alert) says of the failure;
 * CONN_FAIL_N when it says nothing more than "verify failed". */
static int tls_failure_of(unsigned long e)
{
	switch (ERR_GET_REASON(e)) {
	case SSL_R_TLSV1_ALERT_UNKNOWN_CA: return CONN_FAIL_UNKNOWN_CA;
	case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED: return CONN_FAIL_EXPIRED;
	case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED: return CONN_FAIL_REVOKED;
	case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
	case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED: return CONN_FAIL_NO_CERT;
	case SSL_R_UNSUPPORTED_PROTOCOL:
	case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
	case SSL_R_WRONG_VERSION_NUMBER:
	case SSL_R_NO_PROTOCOLS_AVAILABLE:
	case SSL_R_HTTP_REQUEST: return CONN_FAIL_VERSION;
	case SSL_R_CERTIFICATE_VERIFY_FAILED: return CONN_FAIL_N;
	}
	return CONN_FAIL_TLS_OTHER;
}

/* The same for a certificate check's result (X509_V_ERR_*). */
static int verify_failure_of(long v)
{
	switch (v) {
	case X509_V_ERR_CERT_HAS_EXPIRED:
	case X509_V_ERR_CERT_NOT_YET_VALID: return CONN_FAIL_EXPIRED;
	case X509_V_ERR_CERT_REVOKED: return CONN_FAIL_REVOKED;
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
	case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
	case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
	case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
	case X509_V_ERR_CERT_SIGNATURE_FAILURE: return CONN_FAIL_UNKNOWN_CA;
	}
	return CONN_FAIL_TLS_OTHER;
}

static int errno_failure_of(int e)
{
	switch (e) {
	case ECONNREFUSED: return CONN_FAIL_REFUSED;
	case ETIMEDOUT: return CONN_FAIL_TIMEOUT;
	case EHOSTUNREACH:
	case ENETUNREACH: return CONN_FAIL_UNREACHABLE;
	case ECONNRESET:
	case EPIPE: return CONN_FAIL_RESET;
	}
	return CONN_FAIL_OTHER;
}

/* The OpenSSL errors of bev as text (or the socket error), and what they
 * say of the failure in *reason (CONN_FAIL_N: nothing). */
static void tls_error_text(struct bufferevent *bev, char *buf, size_t bufsz,
			   int *reason)
{
	unsigned long e;
	size_t n = 0;

	buf[0] = '\0';
	*reason = CONN_FAIL_N;
	while ((e = bufferevent_get_openssl_error(bev)) != 0 && n < bufsz) {
		char one[160];
		if (ERR_GET_LIB(e) == 0)
			continue; /* a bare errno libevent queued: no text */
		if (*reason == CONN_FAIL_N || *reason == CONN_FAIL_TLS_OTHER)
			*reason = tls_failure_of(e);
		ERR_error_string_n(e, one, sizeof one);
		n += (size_t)snprintf(buf + n, bufsz - n, "%s%s", n ? "; " : "",
				      one);
	}
	if (!buf[0] && EVUTIL_SOCKET_ERROR()) {
		snprintf(buf, bufsz, "%s",
			 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		*reason = errno_failure_of(EVUTIL_SOCKET_ERROR());
	}
}

/* Is c's TCP connection established (or was it, before the peer closed
 * it)? A dial refused or unanswered has no peer address. */
static int tcp_connected(const struct conn *c)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	evutil_socket_t fd = bufferevent_getfd(c->bev);

	return fd >= 0 && getpeername(fd, (struct sockaddr *)&ss, &sl) == 0;
}

/* Why c's connect failed: the socket's pending error, else `last` (the
 * error when the event came). */
static int tcp_error(const struct conn *c, int last)
{
	evutil_socket_t fd = bufferevent_getfd(c->bev);
	int e = 0;
	socklen_t sl = sizeof e;

	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) != 0 || !e)
		e = last;
	return e;
}

/* Has the TLS handshake of c begun (its TCP connection was made)? */
static int ssl_started(const struct conn *c)
{
	SSL *ssl = bufferevent_openssl_get_ssl(c->bev);

	return ssl && SSL_get_state(ssl) != TLS_ST_BEFORE;
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	int last = EVUTIL_SOCKET_ERROR();
	struct conn *c = arg;
	char why[512];

	if (what & BEV_EVENT_CONNECTED) {
		SSL *ssl = bufferevent_openssl_get_ssl(bev);
		char err[SEMQ_ERRLEN];

		if (tls_peer_id(ssl, c->peer, err, sizeof err) != SEMQ_OK) {
			failed(c, CONN_FAIL_NO_CERT);
			if (stranger_ok(c))
				conn_log(c, LOG_WARN, c->addr, "refused: %s",
					 err);
			c->peer[0] = '\0';
			destroy(c, err);
			return;
		}
		if (c->outbound && strcmp(c->peer, c->expect) != 0) {
			snprintf(why, sizeof why,
				 "dialled '%s' but its certificate is for '%s'",
				 c->expect, c->peer);
			failed(c, CONN_FAIL_ID_MISMATCH);
			conn_log(c, LOG_WARN, c->expect, "refused: %s", why);
			destroy(c, why);
			return;
		}
		if (c->cbs->on_identified &&
		    c->cbs->on_identified(c->ctx, c, why, sizeof why) != 0) {
			uint64_t quiet;
			int64_t quiet_ms;

			/* a denied id that keeps coming back: one line per
			 * RATE_EVERY_MS */
			if (!rate_ok('r', c->peer, &quiet, &quiet_ms))
				stats.lines_suppressed++;
			else if (quiet)
				conn_log(c, LOG_WARN, c->peer,
					 "refused: %s (and %" PRIu64
					 " times more in the last %lld s, not "
					 "logged)",
					 why, quiet,
					 (long long)quiet_ms / 1000);
			else
				conn_log(c, LOG_WARN, c->peer, "refused: %s",
					 why);
			destroy(c, why);
			return;
		}
		no_delay(c);
		c->state = CONN_HELLO;
		if (c->outbound)
			send_hello(c);
		bufferevent_enable(bev, EV_READ | EV_WRITE);
		read_cb(bev, c);
		return;
	}
	if ((what & BEV_EVENT_TIMEOUT) && (what & BEV_EVENT_WRITING)) {
		/* A peer that reads nothing: it would hold our output (and,
		 * through the high-water mark, its own input) forever. */
		stats.slow_readers++;
		snprintf(why, sizeof why,
			 "slow reader: it took none of the %zu bytes waiting "
			 "for it in %lld ms (write_timeout)",
			 evbuffer_get_length(bufferevent_get_output(bev)),
			 (long long)c->prm->write_timeout_ms);
		conn_log(c, LOG_WARN, who(c), "%s: %s; closed",
			 conn_state_text(c->state), why);
		destroy(c, why);
		return;
	} else if (what & BEV_EVENT_TIMEOUT) {
		snprintf(why, sizeof why, "idle for %lld ms",
			 (long long)c->prm->idle_timeout_ms);
		failed(c, CONN_FAIL_TIMEOUT);
	} else if (c->outbound && c->state == CONN_TLS && !tcp_connected(c) &&
		   !bufferevent_socket_get_dns_error(bev)) {
		/* the dial found nobody: say so, not "closed by peer" */
		int e = tcp_error(c, last), reason = errno_failure_of(e);

		snprintf(why, sizeof why, "cannot connect: %s reason=%s",
			 e ? evutil_socket_error_to_string(e)
			   : "connection not established",
			 conn_failure_text(reason));
		failed(c, reason);
	} else if (what & BEV_EVENT_EOF) {
		snprintf(why, sizeof why, "closed by peer%s",
			 c->state == CONN_READY ? "" : " reason=closed");
		failed(c, CONN_FAIL_CLOSED);
	} else if (c->outbound && bufferevent_socket_get_dns_error(bev)) {
		snprintf(why, sizeof why, "cannot resolve %s: %s reason=dns",
			 c->addr,
			 evutil_gai_strerror(
				 bufferevent_socket_get_dns_error(bev)));
		failed(c, CONN_FAIL_DNS);
	} else {
		SSL *ssl = bufferevent_openssl_get_ssl(bev);
		long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
		char tls[400];
		int reason;

		tls_error_text(bev, tls, sizeof tls, &reason);
		if (v != X509_V_OK &&
		    (reason == CONN_FAIL_N || reason == CONN_FAIL_TLS_OTHER))
			reason = verify_failure_of(v);
		if (reason == CONN_FAIL_N)
			reason = CONN_FAIL_TLS_OTHER;
		failed(c, reason);
		/* "certificate verify failed" alone does not tell an expired
		 * certificate from one of another CA: say which. A dial that
		 * found nobody is not a TLS failure: say that too. */
		snprintf(why, sizeof why, "%s%s%s%s%s%s%s",
			 c->state != CONN_TLS ? "connection error: "
			 : c->outbound && !ssl_started(c) &&
					 reason != CONN_FAIL_TLS_OTHER
				 ? "cannot connect: "
				 : "TLS handshake failed: ",
			 tls[0] ? tls : "unknown",
			 v != X509_V_OK ? " (certificate: " : "",
			 v != X509_V_OK ? X509_verify_cert_error_string(v) : "",
			 v != X509_V_OK ? ")" : "",
			 c->state == CONN_READY ? "" : " reason=",
			 c->state == CONN_READY ? ""
						: conn_failure_text(reason));
	}
	if (stranger_ok(c))
		conn_log(c, c->state == CONN_READY ? LOG_INFO : LOG_WARN,
			 who(c), "%s: %s", conn_state_text(c->state), why);
	destroy(c, why);
}

/*
 * The handshake deadline: the connection is not READY handshake_timeout
 * after conn_new(), however many bytes trickled in meanwhile. The line says
 * from where and how far it got.
 */
static void hs_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
	char why[400], stage[200];

	(void)fd;
	(void)what;
	if (c->state != CONN_TLS && c->state != CONN_HELLO)
		return;
	stats.handshake_timeouts++;
	failed(c, CONN_FAIL_TIMEOUT);
	if (c->state == CONN_TLS && c->outbound && ssl &&
	    SSL_get_state(ssl) == TLS_ST_BEFORE)
		snprintf(stage, sizeof stage,
			 "still connecting (name resolution or TCP)");
	else if (c->state == CONN_TLS && ssl &&
		 SSL_get_state(ssl) == TLS_ST_BEFORE)
		snprintf(stage, sizeof stage,
			 "TLS handshake unfinished: its ClientHello "
			 "incomplete");
	else if (c->state == CONN_TLS)
		snprintf(stage, sizeof stage, "TLS handshake unfinished (%s)",
			 ssl ? SSL_state_string_long(ssl) : "?");
	else
		snprintf(stage, sizeof stage,
			 "TLS done%s, the peer's Hello incomplete (%zu bytes "
			 "of it received)",
			 c->hello_sent ? " and our Hello sent" : "",
			 evbuffer_get_length(bufferevent_get_input(c->bev)) +
				 codec_reader_pending(c->rd));
	snprintf(why, sizeof why,
		 "handshake not finished within %lld ms (handshake_timeout) "
		 "of being %s: %s",
		 (long long)c->prm->handshake_timeout_ms,
		 c->outbound ? "dialled" : "accepted", stage);
	if (stranger_ok(c))
		conn_log(c, LOG_WARN, who(c), "%s%s%s: %s; closed",
			 conn_state_text(c->state),
			 !c->remote[0] ? ""
			 : c->outbound ? " to "
				       : " from ",
			 c->remote, why);
	if (c->state == CONN_TLS)
		destroy(c, why);
	else
		conn_close(c, SEMQ__ERROR__CODE__PROTOCOL,
			   "handshake not finished in time");
}

/* "host:port" of the socket's other end, "" when unknown. */
static void remote_text(int fd, char *buf, size_t bufsz)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char host[INET6_ADDRSTRLEN];

	buf[0] = '\0';
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
		return;
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)&ss;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		snprintf(buf, bufsz, "%s:%u", host, ntohs(in->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)&ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		snprintf(buf, bufsz, "[%s]:%u", host, ntohs(in6->sin6_port));
	}
}

struct conn *conn_new(struct event_base *base, SSL_CTX *tls, int fd,
		      const char *host, int port, const char *expect_peer,
		      uint64_t id, const struct conn_params *params,
		      const struct conn_cbs *cbs, void *ctx)
{
	struct timeval idle = {params->idle_timeout_ms / 1000,
			       (params->idle_timeout_ms % 1000) * 1000};
	struct timeval wr = {params->write_timeout_ms / 1000,
			     (params->write_timeout_ms % 1000) * 1000};
	struct timeval hs = {params->handshake_timeout_ms / 1000,
			     (params->handshake_timeout_ms % 1000) * 1000};
	struct conn *c;
	SSL *ssl;

	c = calloc(1, sizeof *c);
	ssl = SSL_new(tls);
	if (!c || !ssl) {
		free(c);
		SSL_free(ssl);
		if (fd >= 0)
			evutil_closesocket(fd);
		return NULL;
	}
	c->id = id;
	c->outbound = fd < 0;
	c->prm = params;
	c->cbs = cbs;
	c->ctx = ctx;
	c->state = CONN_TLS;
	if (expect_peer)
		snprintf(c->expect, sizeof c->expect, "%s", expect_peer);
	if (host)
		snprintf(c->addr, sizeof c->addr, "%s:%d", host, port);
	else
		snprintf(c->addr, sizeof c->addr, "conn#%llu",
			 (unsigned long long)id);
	if (fd >= 0)
		remote_text(fd, c->remote, sizeof c->remote);
	else
		snprintf(c->remote, sizeof c->remote, "%s", c->addr);
	c->bev = bufferevent_openssl_socket_new(
		base, fd, ssl,
		c->outbound ? BUFFEREVENT_SSL_CONNECTING
			    : BUFFEREVENT_SSL_ACCEPTING,
		BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (!c->bev) {
		SSL_free(ssl);
		if (fd >= 0)
			evutil_closesocket(fd);
		free(c);
		return NULL;
	}
	live++;
	c->hs_deadline = evtimer_new(base, hs_deadline_cb, c);
	c->rd = codec_reader_new(params->max_frame);
	if (!c->hs_deadline || !c->rd) {
		c->closed = 1; /* never started: no on_close */
		destroy(c, "out of memory");
		return NULL;
	}
	evtimer_add(c->hs_deadline, &hs);
	bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	bufferevent_set_timeouts(c->bev, &idle,
				 params->write_timeout_ms > 0 ? &wr : NULL);
	bufferevent_setwatermark(c->bev, EV_WRITE, HIGH_WATER / 2, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	if (c->outbound &&
	    bufferevent_socket_connect_hostname(c->bev, params->dns, AF_UNSPEC,
						host, port) != 0) {
		c->closed = 1; /* never started: no on_close */
		destroy(c, "connect failed");
		return NULL;
	}
	return c;
}

uint64_t conn_id(const struct conn *c)
{
	return c->id;
}

const char *conn_peer(const struct conn *c)
{
	return c->peer;
}

const char *conn_peer_instance(const struct conn *c)
{
	return c->instance;
}

int conn_state(const struct conn *c)
{
	return c->state;
}

int conn_outbound(const struct conn *c)
{
	return c->outbound;
}

unsigned conn_peer_features(const struct conn *c)
{
	return c->peer_features;
}

unsigned conn_peer_revision(const struct conn *c)
{
	return c->revision ? c->revision : 1;
}

uint64_t conn_peer_life(const struct conn *c)
{
	return c->peer_life;
}

const char *conn_peer_software(const struct conn *c)
{
	return c->software;
}

size_t conn_peer_max_frame(const struct conn *c)
{
	return c->peer_max_frame;
}

void conn_pause(struct conn *c, int on)
{
	if (c->state != CONN_READY || c->paused == !!on)
		return;
	c->paused = !!on;
	if (on) {
		bufferevent_disable(c->bev, EV_READ);
		return;
	}
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) < HIGH_WATER)
		bufferevent_enable(c->bev, EV_READ);
	/* frames read before the pause are still in the input */
	read_cb(c->bev, c);
}

int conn_paused(const struct conn *c)
{
	return c->paused;
}

int conn_tls_recheck(struct conn *c, char *err, size_t errsz)
{
	SSL *ssl = c->bev ? bufferevent_openssl_get_ssl(c->bev) : NULL;

	if (!ssl || c->state == CONN_TLS || c->state == CONN_CLOSING)
		return SEMQ_OK;
	return tls_peer_recheck(ssl, err, errsz);
}

size_t conn_output_pending(const struct conn *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev));
}

void conn_set_user(struct conn *c, void *user)
{
	c->user = user;
}

void *conn_user(const struct conn *c)
{
	return c->user;
}
