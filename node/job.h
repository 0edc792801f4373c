/* SPDX-License-Identifier: MIT */
/*
 * What the network thread asks of the store thread (jobs), and what comes back
 * (outputs). Jobs carry a connection id, never a pointer to a connection: the
 * connection may be gone when the answer is ready, and then the answer is
 * dropped — safely, since everything it reports is durable and the peer will
 * ask again (query) or send again.
 */
#ifndef SEMQ_JOB_H
#define SEMQ_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "semq.pb-c.h"
#include "types.h"

enum job_kind {
	JOB_FRAME,   /* a checked frame from an authenticated peer */
	JOB_PEER_UP, /* a peer finished Hello: resynchronise with it */
	JOB_ROUTES,  /* the set of reachable next hops changed */
	JOB_WAKE,    /* new outbound rows may be there: look now */
	JOB_ADMIN,   /* an admin HTTP request for the tables (report.c) */
	JOB_REDO     /* run a due redo entry (the store workers, worker.c) */
};

/* A reachable next hop: a connected peer that finished Hello. */
struct route_hop {
	char peer[SEMQ_ID_MAX + 1];
	uint64_t conn_id;
	int relay; /* the peer announced FEATURE_RELAY */
	/* The instance its Hello named ("" = the peer's only one). */
	char instance[SEMQ_INSTANCE_MAX + 1];
	unsigned revision; /* its wire revision (1: SEMQ 0.1, no lives) */
	uint64_t life;     /* the life its Hello named; 0 = revision 1 */
	size_t max_frame;  /* the largest frame it accepts (its Hello) */
	int trace;         /* it announced FEATURE_TRACE */
};

/*
 * A snapshot of who is reachable, built by the network thread and owned by
 * the store thread once sent. Static routes come from [route] in the config;
 * the store thread resolves a destination with route_lookup() (proto.h) and
 * picks the connection of a stream with routes_pick().
 *
 * DESIGN (several instances of one peer, SPEC §11)
 *  - The network thread lists one hop per (peer, instance): the newest
 *    ready connection of that pair; an older one (a reconnect replaced it)
 *    is not routed to. Hops of one peer with different instances are all
 *    listed.
 *  - routes_pick() spreads the streams (origin, dest) over the instances of
 *    a hop by rendezvous hashing: each instance scores
 *    hash(origin, dest, instance) and the highest score wins (ties: the
 *    smaller name). The choice depends only on the stream and the set of
 *    instance names, so every frame of a stream (Data, tombstones, queries,
 *    810 frames) takes the same instance while the set does not change, on
 *    every relay alike; when an instance leaves, only its streams move (to
 *    the remaining ones), and when one joins, only the streams it now wins
 *    move to it.
 */
struct routes {
	struct route_hop *hops;
	size_t n_hops;
	/* The configuration in force when the snapshot was taken, NULL for
	 * "unchanged": after a SIGHUP reload ([peer] and [route] sections,
	 * net.c) the store thread reads peers and routes from it. Borrowed:
	 * every generation lives until the process exits. */
	const struct config *cfg;
};

/*
 * The hop of `peer` that carries the stream (origin, dest): with one hop of
 * that peer, that one; with several (instances), the one routes_pick()'s
 * rendezvous hash chooses. NULL when `peer` has no hop in r (r NULL too).
 * Borrowed from r.
 */
const struct route_hop *routes_pick(const struct routes *r, const char *peer,
				    const char *origin, const char *dest);

/* The score of `instance` for the stream (origin, dest) in routes_pick():
 * FNV-1a 64 over origin, NUL, dest, NUL, instance, then the splitmix64
 * finaliser. Exposed for tests and tools that predict the spread. */
uint64_t routes_score(const char *origin, const char *dest,
		      const char *instance);

/*
 * JOB_ADMIN: an admin HTTP request, copied out of libevent by admin.c. The
 * answer comes back as a struct out with the same req_id; the request itself
 * stays on the network thread, which may have answered it meanwhile (timeout,
 * client gone) and then drops the late answer.
 */
struct admin_req {
	uint64_t req_id; /* admin.c's id of the pending request, never 0 */
	char *method;    /* "GET", "POST"... */
	char *path;      /* "/redo/42/retry", without the query */
	char *query;     /* "status=dead&limit=10", raw; NULL if none */
	char *body;      /* NUL-terminated copy of the body; NULL if none */
	size_t body_len;
	char client[64]; /* "ADDRESS:PORT" of the client, for the logs */
};
void admin_req_free(struct admin_req *q); /* NULL ok */

struct job {
	struct job *next;
	int kind;                   /* enum job_kind */
	uint64_t conn_id;           /* JOB_FRAME, JOB_PEER_UP */
	char peer[SEMQ_ID_MAX + 1]; /* the peer's authenticated id */
	int trusted_relay;          /* the peer is configured trusted_relay */
	Semq__Frame *frame;         /* JOB_FRAME: owned by the job */
	struct routes *routes;      /* JOB_ROUTES: owned by the job */
	struct admin_req *admin;    /* JOB_ADMIN: owned by the job */
	int64_t enqueued_at;        /* for latency metrics */
	size_t bytes; /* memory it holds, counted in [node] memory_budget */
	/* For the store workers (dispatch.h): the stream's key (its origin),
	 * the messages of a Data frame already applied by an earlier
	 * transaction (a frame cut at a worker's slice), the redo entry. */
	char key[SEMQ_ID_MAX + 1];
	size_t done;
	int64_t redo_id; /* JOB_REDO */
};

/* One encoded frame to write to a connection (bytes include the header);
 * or, when req_id is set, the answer to a JOB_ADMIN: an HTTP status and the
 * body in bytes (conn_id unused). */
struct out {
	struct out *next;
	uint64_t conn_id;
	uint8_t *bytes;
	size_t len;
	uint64_t req_id; /* non-zero: an admin HTTP answer (admin.c) */
	int http_status; /* with req_id: 200, 400, 404... */
};

struct job *job_new(int kind);      /* zeroed; NULL on ENOMEM */
void job_free(struct job *j);       /* frees frame, routes, admin; NULL ok */
void routes_free(struct routes *r); /* NULL ok */
struct routes *routes_copy(const struct routes *r); /* NULL on ENOMEM */
void out_free_list(struct out *o); /* frees a whole list; NULL ok */

#endif
