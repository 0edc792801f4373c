/* SPDX-License-Identifier: MIT */
/*
 * The network thread: the libevent loop that owns every socket — the
 * listener, the dialled peers (reconnecting with capped exponential backoff
 * and jitter, host names resolved with evdns), the wake socket that libsemq
 * and semqctl poke, and the signals. It never touches the database: it
 * checks what a peer may send (SPEC §10), turns frames into jobs for the
 * store thread, and writes the frames the store thread hands back, by
 * connection id.
 *
 * It also admits connections ([node] max_* keys, [tls] deny; the "Limits"
 * section of docs/ARCHITECTURE.md): before authentication (the TLS
 * handshake until the certificate is verified) connections are counted
 * apart from authenticated ones, per remote address and in all; reaching a
 * bound refuses the newcomer or drops the oldest handshake, never an
 * authenticated peer for a stranger. SIGHUP and a 5 s poll reload [tls] crl.
 */
#ifndef SEMQ_NET_H
#define SEMQ_NET_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "job.h"

struct net;
struct worker;

/*
 * Creates the loop, the TLS context, binds the listener, the admin HTTP
 * (admin.c, when [node] admin is set) and the wake socket (so a port in use
 * or a second semqd on the same database is reported at start). `c` is
 * borrowed for the life of the net. *out on success.
 */
int net_new(const struct config *c, struct net **out, char *err, size_t errsz);
void net_attach_worker(struct net *n, struct worker *w);

/* worker_output_fn: queues outputs for the loop; any thread. */
void net_deliver(void *net, struct out *list);

/* Dials the peers and runs until SIGTERM/SIGINT (or net_stop). */
int net_run(struct net *n);
/* Asks the loop to stop (any thread). */
void net_stop(struct net *n);
/* After the worker stopped: writes what it handed over last, says goodbye
 * to every peer and waits (bounded) for the bytes to leave. */
void net_drain(struct net *n);
void net_free(struct net *n); /* NULL ok */

/* Why a connection was refused: closed at accept (before TLS), right
 * after its certificate was verified, or (DEST_UNAVAILABLE) after its
 * Hello. */
enum net_refusal {
	NET_REFUSED_HANDSHAKES_PER_ADDRESS,  /* max_handshakes_per_address */
	NET_REFUSED_CONNECTIONS_PER_ADDRESS, /* max_connections_per_address */
	NET_REFUSED_HANDSHAKES,  /* max_handshakes, none could be dropped */
	NET_REFUSED_CONNECTIONS, /* max_connections */
	NET_REFUSED_CONNECTIONS_PER_PEER, /* max_connections_per_peer, only
					       dialled ones to close */
	NET_REFUSED_DENIED,               /* [tls] deny */
	NET_REFUSED_NOT_LISTED,           /* [node] allow = listed */
	NET_REFUSED_DEST_UNAVAILABLE,     /* [relay] require_connected */
	NET_REFUSED_N
};

/* Why a connection was closed to make room for a newer one. */
enum net_eviction {
	NET_EVICTED_HANDSHAKES,           /* max_handshakes: the oldest */
	NET_EVICTED_CONNECTIONS_PER_PEER, /* max_connections_per_peer */
	NET_EVICTED_N
};

/* The label of a reason in metrics and logs ("handshakes_per_address"). */
const char *net_refusal_text(int reason);
const char *net_eviction_text(int reason);

/* What the network thread's bounds did since start, and its gauges. */
struct net_stats {
	unsigned handshakes;    /* connections not authenticated yet, now */
	unsigned authenticated; /* connections past TLS, now */
	uint64_t refused[NET_REFUSED_N];
	uint64_t evicted[NET_EVICTED_N];
	uint64_t accept_pauses;      /* episodes of accept() failing (EMFILE) */
	uint64_t accept_failures;    /* accept() calls that failed */
	int accept_paused;           /* the listener waits now */
	uint64_t handshake_timeouts; /* not ready within handshake_timeout */
	uint64_t slow_readers;       /* closed by write_timeout */
	uint64_t errors_suppressed;  /* peers' Error lines not logged */
	uint64_t lines_suppressed;   /* other lines left out by rate limits */
	int64_t cert_not_after;      /* our certificate, unix s; 0 unknown */
	int64_t ca_not_after;        /* the CA file's earliest, 0 unknown */
	uint64_t crl_reloads;        /* [tls] crl read again */
	uint64_t crl_failures;       /* and could not be */
	int64_t crl_next_update;     /* earliest nextUpdate, unix s; 0 none */
	uint64_t revoked_closed;     /* links closed: revoked while up */
	uint64_t pauses;             /* memory_budget: reading paused */
	unsigned paused;             /* connections paused now */
};

/* A copy of the counters; network thread only (admin.c's /metrics). */
void net_get_stats(struct net_stats *out);

#endif
