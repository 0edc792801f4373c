/* SPDX-License-Identifier: MIT */
/*
 * A peer connection (see peer.h). One bufferevent per connection with
 * BEV_OPT_CLOSE_ON_FREE and an OpenSSL layer; frames are read straight out of
 * the input evbuffer: the 4-byte header is checked against max_frame before
 * any of the body is waited for, so an oversized frame is refused without
 * buffering it.
 *
 * DESIGN
 *  - No frame is read before the TLS handshake verified the peer's
 *    certificate and, for a dialled connection, its id is the one configured.
 *  - Until both Hellos are exchanged, only Hello (and Error) is accepted.
 *  - conn_close() never frees inside a callback of the same bufferevent
 *    before the write side drained: CLOSING waits for the output to empty (or
 *    a short deadline), then frees.
 */
#include "peer.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>

#include "codec.h"
#include "config.h"
#include "log.h"
#include "tls.h"

#define CLOSE_FLUSH_MS 2000
#define HIGH_WATER (8u * 1024 * 1024) /* output bytes before we stop reading */

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
	unsigned peer_features;
	int hello_sent;
	int closed; /* on_close called */
	struct bufferevent *bev;
	struct event *ping;
	struct event *flush_deadline;
	const struct conn_params *prm;
	const struct conn_cbs *cbs;
	void *ctx;
	void *user;
	uint64_t ping_nonce;
};

static unsigned live; /* connections not yet freed (network thread only) */

unsigned conn_live(void)
{
	return live;
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
		log_msg(LOG_WARN, "peer", c->peer, NULL, "refused: %s", text);
		conn_close(c, SEMQ__ERROR__CODE__IDENTITY, text);
		return -1;
	}
	if (h->protocol_version != SEMQ__PROTOCOL_VERSION__PROTOCOL_VERSION) {
		snprintf(text, sizeof text,
			 "protocol version %u is not spoken here (1)",
			 h->protocol_version);
		log_msg(LOG_WARN, "peer", c->peer, NULL, "refused: %s", text);
		conn_close(c, SEMQ__ERROR__CODE__VERSION, text);
		return -1;
	}
	c->peer_features = h->features;
	/* validated by the codec: at most SEMQ_INSTANCE_MAX of the name set */
	snprintf(c->instance, sizeof c->instance, "%s", h->instance);
	c->revision = h->wire_revision >= 2 ? h->wire_revision : 1;
	c->peer_life = h->life;
	/* printable ASCII of at most 64 bytes (codec) */
	snprintf(c->software, sizeof c->software, "%s", h->software);
	if (!c->hello_sent)
		send_hello(c);
	c->state = CONN_READY;
	tv.tv_sec = c->prm->ping_interval_ms / 1000;
	tv.tv_usec = (c->prm->ping_interval_ms % 1000) * 1000;
	c->ping = event_new(bufferevent_get_base(c->bev), -1, EV_PERSIST,
			    ping_cb, c);
	if (c->ping)
		event_add(c->ping, &tv);
	log_msg(LOG_INFO, "peer", c->peer, NULL,
		"ready (%s, %s%s%s, %s, wire revision %u)",
		c->outbound ? "dialled" : "accepted", c->addr,
		c->instance[0] ? ", instance " : "", c->instance,
		c->software[0] ? c->software : "semqd 0.1", c->revision);
	if (c->revision < 2)
		log_msg(LOG_WARN, "peer", c->peer, NULL,
			"runs SEMQ 0.1 (wire revision 1): it knows no lives "
			"or digests, so a restore or re-image of this node "
			"or of %s is not detected on this link; upgrade %s",
			c->peer, c->peer);
	if (c->cbs->on_ready)
		c->cbs->on_ready(c->ctx, c);
	return 0;
}

/* Handles one frame; returns non-zero when the connection is gone. */
static int dispatch(struct conn *c, Semq__Frame *f)
{
	if (f->body_case == SEMQ__FRAME__BODY_ERROR) {
		log_msg(f->error->code == SEMQ__ERROR__CODE__SHUTDOWN
				? LOG_INFO
				: LOG_WARN,
			"peer", who(c), NULL, "peer reports error %d: %s",
			f->error->code, f->error->text);
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
			log_msg(LOG_WARN, "peer", who(c), NULL,
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
		log_msg(LOG_WARN, "peer", who(c), NULL,
			"TCP_NODELAY: %s (frames may wait for the peer's "
			"ACK)",
			strerror(errno));
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	while (c->state == CONN_HELLO || c->state == CONN_READY) {
		uint8_t hdr[CODEC_HDR];
		char err[SEMQ_ERRLEN];
		Semq__Frame *f = NULL;
		size_t len;
		uint8_t *body;
		int r;

		if (evbuffer_get_length(in) < CODEC_HDR)
			return;
		evbuffer_copyout(in, hdr, CODEC_HDR);
		r = codec_frame_len(hdr, c->prm->max_frame, &len, err,
				    sizeof err);
		if (r != SEMQ_OK) {
			log_msg(LOG_WARN, "peer", who(c), NULL, "refused: %s",
				err);
			conn_close(c,
				   r == SEMQ_ERR_TOO_BIG
					   ? SEMQ__ERROR__CODE__FRAME_TOO_BIG
					   : SEMQ__ERROR__CODE__PROTOCOL,
				   err);
			return;
		}
		if (evbuffer_get_length(in) < CODEC_HDR + len) {
			bufferevent_setwatermark(bev, EV_READ, CODEC_HDR + len,
						 0);
			return;
		}
		bufferevent_setwatermark(bev, EV_READ, 0, 0);
		body = evbuffer_pullup(in, (ev_ssize_t)(CODEC_HDR + len));
		r = codec_decode_body(body + CODEC_HDR, len, &f, err,
				      sizeof err);
		evbuffer_drain(in, CODEC_HDR + len);
		if (r != SEMQ_OK) {
			log_msg(LOG_WARN, "peer", who(c), NULL,
				"refused a bad frame: %s", err);
			conn_close(c, SEMQ__ERROR__CODE__PROTOCOL, err);
			return;
		}
		if (dispatch(c, f) != 0)
			return;
	}
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	/* Below the high-water mark again: resume reading. */
	if (c->state == CONN_READY &&
	    evbuffer_get_length(bufferevent_get_output(bev)) < HIGH_WATER / 2)
		bufferevent_enable(bev, EV_READ);
}

static void tls_error_text(struct bufferevent *bev, char *buf, size_t bufsz)
{
	unsigned long e;
	size_t n = 0;

	buf[0] = '\0';
	while ((e = bufferevent_get_openssl_error(bev)) != 0 && n < bufsz) {
		char one[160];
		if (ERR_GET_LIB(e) == 0)
			continue; /* a bare errno libevent queued: no text */
		ERR_error_string_n(e, one, sizeof one);
		n += (size_t)snprintf(buf + n, bufsz - n, "%s%s", n ? "; " : "",
				      one);
	}
	if (!buf[0] && EVUTIL_SOCKET_ERROR())
		snprintf(buf, bufsz, "%s",
			 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	char why[512];

	if (what & BEV_EVENT_CONNECTED) {
		SSL *ssl = bufferevent_openssl_get_ssl(bev);
		char err[SEMQ_ERRLEN];

		if (tls_peer_id(ssl, c->peer, err, sizeof err) != SEMQ_OK) {
			log_msg(LOG_WARN, "peer", c->addr, NULL, "refused: %s",
				err);
			c->peer[0] = '\0';
			destroy(c, err);
			return;
		}
		if (c->outbound && strcmp(c->peer, c->expect) != 0) {
			snprintf(why, sizeof why,
				 "dialled '%s' but its certificate is for '%s'",
				 c->expect, c->peer);
			log_msg(LOG_WARN, "peer", c->expect, NULL,
				"refused: %s", why);
			destroy(c, why);
			return;
		}
		if (c->cbs->on_identified &&
		    c->cbs->on_identified(c->ctx, c, why, sizeof why) != 0) {
			log_msg(LOG_WARN, "peer", c->peer, NULL, "refused: %s",
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
	if (what & BEV_EVENT_TIMEOUT) {
		snprintf(why, sizeof why, "idle for %lld ms",
			 (long long)c->prm->idle_timeout_ms);
	} else if (what & BEV_EVENT_EOF) {
		snprintf(why, sizeof why, "closed by peer");
	} else {
		SSL *ssl = bufferevent_openssl_get_ssl(bev);
		long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
		char tls[400];

		tls_error_text(bev, tls, sizeof tls);
		/* "certificate verify failed" alone does not tell an expired
		 * certificate from one of another CA: say which. */
		snprintf(why, sizeof why, "%s%s%s%s%s",
			 c->state == CONN_TLS ? "TLS handshake failed: "
					      : "connection error: ",
			 tls[0] ? tls : "unknown",
			 v != X509_V_OK ? " (certificate: " : "",
			 v != X509_V_OK ? X509_verify_cert_error_string(v) : "",
			 v != X509_V_OK ? ")" : "");
	}
	log_msg(c->state == CONN_READY ? LOG_INFO : LOG_WARN, "peer", who(c),
		NULL, "%s: %s", conn_state_text(c->state), why);
	destroy(c, why);
}

struct conn *conn_new(struct event_base *base, SSL_CTX *tls, int fd,
		      const char *host, int port, const char *expect_peer,
		      uint64_t id, const struct conn_params *params,
		      const struct conn_cbs *cbs, void *ctx)
{
	struct timeval idle = {params->idle_timeout_ms / 1000,
			       (params->idle_timeout_ms % 1000) * 1000};
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
	bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	bufferevent_set_timeouts(c->bev, &idle, NULL);
	bufferevent_setwatermark(c->bev, EV_WRITE, HIGH_WATER / 2, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	if (c->outbound && bufferevent_socket_connect_hostname(
				   c->bev, NULL, AF_UNSPEC, host, port) != 0) {
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
