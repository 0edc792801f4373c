/* SPDX-License-Identifier: MIT */
/*
 * One peer connection on the network thread: a TLS bufferevent, the frame
 * reader, the Hello exchange, heartbeats and the timeouts that bound what a
 * peer can hold: the handshake deadline, the idle timeout and the write
 * timeout. It knows nothing of the database: complete, checked frames go to
 * the owner (net.c) through callbacks.
 *
 * States: TLS (handshake) -> HELLO (ours sent, theirs awaited) -> READY ->
 * CLOSING (an Error or our last bytes are flushed, then freed). The peer's id
 * comes from its verified certificate before any frame is read; its Hello
 * must carry the same id and protocol version 1. The Hello also names the
 * peer's instance (conn_peer_instance): several semqd may serve one node id,
 * and a connection stands for the pair (peer id, instance).
 *
 * Bounds: a connection must be READY within handshake_timeout of conn_new()
 * (an absolute deadline: bytes trickling in do not extend it, as they do the
 * idle timeout); once there, output that makes no progress for
 * write_timeout closes it (a slow or dead reader), and reading from it
 * pauses while more than 8 MiB wait to be written to it. What a peer can
 * make the log say is bounded too (peer.c, DESIGN).
 */
#ifndef SEMQ_PEER_H
#define SEMQ_PEER_H

#include <stddef.h>
#include <stdint.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <openssl/ssl.h>

#include "semq.pb-c.h"
#include "types.h"

enum conn_state { CONN_TLS, CONN_HELLO, CONN_READY, CONN_CLOSING };

const char *conn_state_text(int state);

struct conn;

struct conn_params {
	const char *node_id;  /* ours, for Hello */
	const char *instance; /* ours, for Hello; "" or NULL = the only one */
	int role;             /* Semq__Role for Hello */
	unsigned features;    /* Hello feature bits */
	size_t max_frame;
	uint64_t life;        /* ours (the database's), for Hello; 0 until the
				 store opened it */
	const char *software; /* "semqd 0.2.0", for Hello */
	int64_t ping_interval_ms;
	int64_t idle_timeout_ms;
	int64_t handshake_timeout_ms; /* conn_new() to READY, at most */
	int64_t write_timeout_ms;     /* pending output without progress */
	struct evdns_base *dns;       /* resolves dialled host names */
};

struct conn_cbs {
	/* The peer's certificate id is known (conn_peer), before any frame:
	 * return non-zero, with a reason in why, to refuse the connection.
	 * May be NULL. */
	int (*on_identified)(void *ctx, struct conn *c, char *why,
			     size_t whysz);
	/* The peer's Hello is checked (conn_peer_instance() and the rest
	 * are set); an accepted connection has not sent its own yet. Return
	 * an Error code (Semq__Error__Code) with a reason in why to refuse
	 * the peer with Error(code, why) and close, or 0. May be NULL. */
	int (*on_hello)(void *ctx, struct conn *c, char *why, size_t whysz);
	/* Both Hellos exchanged and checked. */
	void (*on_ready)(void *ctx, struct conn *c);
	/* A decoded, validated frame other than Hello/Ping/Pong (ownership of f
	 * transferred). Return non-zero after calling conn_close() to stop. */
	int (*on_frame)(void *ctx, struct conn *c, Semq__Frame *f);
	/* The connection is gone (called once, just before it is freed). */
	void (*on_close)(void *ctx, struct conn *c, const char *why);
};

/*
 * Starts a connection. Inbound: fd is the accepted socket. Outbound: fd -1,
 * and host/port are dialled (a host name is resolved through params->dns,
 * without blocking the loop); expect_peer is the id its certificate must
 * carry. params and cbs are borrowed for the life of the connection.
 * Returns NULL on failure (fd closed).
 */
struct conn *conn_new(struct event_base *base, SSL_CTX *tls, int fd,
		      const char *host, int port, const char *expect_peer,
		      uint64_t id, const struct conn_params *params,
		      const struct conn_cbs *cbs, void *ctx);

/* Queues bytes (copied). SEMQ_DECLINED when the connection is not READY. */
int conn_send(struct conn *c, const uint8_t *bytes, size_t len);

/* Sends Error(code, text) when possible, flushes, then frees the connection
 * (on_close is called). Safe to call more than once. */
void conn_close(struct conn *c, int code, const char *text);

/* Frees at once without flushing (shutdown). on_close is called. */
void conn_free(struct conn *c);

uint64_t conn_id(const struct conn *c);
const char *conn_peer(const struct conn *c); /* "" until authenticated */
/* The instance the peer's Hello named; "" before Hello or when it named
 * none. Borrowed while the connection lives. */
const char *conn_peer_instance(const struct conn *c);
int conn_state(const struct conn *c);
int conn_outbound(const struct conn *c);
unsigned conn_peer_features(const struct conn *c);
/* What the peer's Hello said of wire revision 2 (docs/PROTOCOL.md): its
 * revision (1 when it sent none: SEMQ 0.1), its database's life (0 then)
 * and its software ("" then). Borrowed while the connection lives. */
unsigned conn_peer_revision(const struct conn *c);
uint64_t conn_peer_life(const struct conn *c);
const char *conn_peer_software(const struct conn *c);
size_t conn_output_pending(const struct conn *c);
/* The largest frame the peer accepts (its Hello's max_frame). */
size_t conn_peer_max_frame(const struct conn *c);
/* Stops reading frames from c (on) or goes on (off): back-pressure for
 * [node] memory_budget; the peer's sends wait in TCP, nothing is lost. */
void conn_pause(struct conn *c, int on);
int conn_paused(const struct conn *c);
/* Verifies an established link's peer certificate again (tls.h,
 * tls_peer_recheck): SEMQ_DECLINED with err when it fails now. */
int conn_tls_recheck(struct conn *c, char *err, size_t errsz);
void conn_set_user(struct conn *c, void *user);
void *conn_user(const struct conn *c);

/* Connections not yet freed, closing ones included. */
unsigned conn_live(void);

/* Why a connection failed before it was ready (semq_connections_failed_total
 * {direction, reason}): the dial itself, or the TLS handshake, by what the
 * certificate check or the peer's alert said. Refusals by a bound or a
 * rule after the certificate was verified are net.h's net_refusal. */
enum conn_failure {
	CONN_FAIL_REFUSED,     /* ECONNREFUSED: nothing listens there */
	CONN_FAIL_TIMEOUT,     /* handshake_timeout, or ETIMEDOUT */
	CONN_FAIL_DNS,         /* the host name does not resolve */
	CONN_FAIL_UNREACHABLE, /* no route to the host or network */
	CONN_FAIL_RESET,       /* reset by the peer */
	CONN_FAIL_CLOSED,      /* closed by the peer before ready */
	CONN_FAIL_UNKNOWN_CA,  /* a certificate of another CA */
	CONN_FAIL_EXPIRED,     /* expired, or not valid yet */
	CONN_FAIL_REVOKED,     /* revoked by [tls] crl */
	CONN_FAIL_ID_MISMATCH, /* not the id dialled, or Hello differs */
	CONN_FAIL_NO_CERT,     /* no certificate, or one without a valid id */
	CONN_FAIL_VERSION,     /* not TLS 1.3 (or not TLS), or not SEMQ v1 */
	CONN_FAIL_TLS_OTHER,   /* another TLS failure */
	CONN_FAIL_OTHER,       /* another socket error */
	CONN_FAIL_N
};
/* The label of a reason ("unknown_ca"). */
const char *conn_failure_text(int reason);

/* What the connections' own bounds did since start (network thread). */
struct conn_stats {
	uint64_t handshake_timeouts; /* not READY within handshake_timeout */
	uint64_t slow_readers;       /* closed by write_timeout */
	uint64_t errors_logged;      /* peers' Error frames logged */
	uint64_t errors_suppressed;  /* and not logged (rate limit) */
	uint64_t lines_suppressed;   /* other lines left out (rate limits) */
	uint64_t failed[2][CONN_FAIL_N]; /* [0] accepted, [1] dialled */
};
void conn_get_stats(struct conn_stats *out);

#endif
