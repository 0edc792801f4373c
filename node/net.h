/* SPDX-License-Identifier: MIT */
/*
 * The network thread: the libevent loop that owns every socket — the
 * listener, the dialled peers (reconnecting with capped exponential backoff
 * and jitter), the wake socket that libsemq and semqctl poke, and the
 * signals. It never touches the database: it checks what a peer may send
 * (SPEC §10), turns frames into jobs for the store thread, and writes the
 * frames the store thread hands back, by connection id.
 */
#ifndef SEMQ_NET_H
#define SEMQ_NET_H

#include <stddef.h>

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

#endif
