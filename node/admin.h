/* SPDX-License-Identifier: MIT */
/*
 * The admin HTTP server (SPEC §8), on the network thread: libevent's evhttp
 * bound to `[node] admin` (keep it on loopback). What the network thread
 * knows it answers itself:
 *
 *   GET /health   200 {"status": "ready", "node", "uptime_s"} while serving,
 *                 503 with "stopping" once the node is stopping, and
 *                 with "disk full" while the store has no room to write
 *   GET /peers    the connections (peer, state, direction, address, since,
 *                 bytes pending) and the configured peers not connected
 *                 (when they are dialled next)
 *
 * What needs the tables (GET /streams, /redo, /redo/ID, /metrics, /trace,
 * POST /redo/ID/retry, /redo/ID/discard, /redo/retry-all-dead) becomes a
 * JOB_ADMIN for the store thread (report.c; /trace: trace.c); its answer comes back through
 * net.c's outputs and admin_deliver(). /metrics gets the network's gauges
 * and the worker's counters appended here, so it is assembled from both
 * threads without either reading the other's state.
 *
 * POST actions need `Authorization: Bearer TOKEN` when [node] admin_token is
 * set, and come only from a loopback client when it is not (401 otherwise).
 * Unknown paths are 404, a known path with another method 405, every error
 * a JSON object {"error": "..."} naming the culprit.
 */
#ifndef SEMQ_ADMIN_H
#define SEMQ_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "config.h"
#include "job.h"

struct admin;
struct worker;

/* One line of GET /peers; strings borrowed for the callback. */
struct admin_peer {
	const char *peer;     /* node id; NULL until known */
	const char *instance; /* the peer's instance name; NULL or "" when it
				 has none (its node's only instance) */
	int state;            /* enum conn_state; -1: not connected */
	int outbound;         /* dialled by us (else accepted) */
	const char *address;  /* host:port; NULL when unknown */
	uint64_t conn_id;     /* 0 when not connected */
	int64_t since;        /* unix ms the connection opened; 0 if none */
	int64_t ready_at;     /* unix ms Hello completed; 0 if not (yet) */
	size_t pending;       /* bytes queued for the peer */
	int paused;           /* not read from: memory_budget */
	int64_t next_dial_at; /* not connected: unix ms of the next dial, 0
				 when it is not dialled (accept only) */
	unsigned attempts;    /* dials since the last success */

	/* A configured peer ([peer] section; also on its connections): */
	int configured;
	int dialled;            /* its section has connect = (we dial it) */
	int64_t down_since;     /* unix ms since it has had no ready
				   connection (from the start when never);
				   0 while up */
	const char *last_error; /* why its last connection closed or failed
				   (NULL: none since the start) */
};
typedef void (*admin_peer_cb)(void *cb_ctx, const struct admin_peer *p);
/* Lists every connection, then every configured peer without one. */
typedef void (*admin_peers_fn)(void *ctx, admin_peer_cb cb, void *cb_ctx);

/*
 * Binds c->admin on base (borrowed, as c and peers_ctx, for the life of the
 * admin). A port in use or an address that is not numeric is reported in err
 * (SEMQ_ERR_IO, SEMQ_ERR_CONFIG). Requests are served once base runs.
 */
int admin_new(struct event_base *base, const struct config *c,
	      admin_peers_fn peers, void *peers_ctx, struct admin **out,
	      char *err, size_t errsz);

/* The store thread is there (w borrowed until admin_stopping): /health is
 * ready and requests for the tables are submitted to it. */
void admin_attach_worker(struct admin *a, struct worker *w);
/* The configuration in force after a SIGHUP reload (borrowed, as the one
 * given to admin_new; network thread). */
void admin_set_config(struct admin *a, const struct config *c);

/* The node is stopping: /health answers 503, requests for the tables are
 * refused with 503; those already submitted are still answered. */
void admin_stopping(struct admin *a);

/* An output with a request id (o->req_id): answers the pending request, or
 * drops the answer when the request timed out or its client went away.
 * o is borrowed. */
void admin_deliver(struct admin *a, struct out *o);

/* After the worker stopped: answers what is still pending with 503 and
 * forgets the worker. */
void admin_drain(struct admin *a);

void admin_free(struct admin *a); /* NULL ok */

#endif
