/* SPDX-License-Identifier: MIT */
/*
 * The rights of a peer (SPEC §10): which frame kinds a peer may send, and in
 * whose name. One table of every frame kind of proto/semq.proto, with for
 * each its name and who may send it; net.c asks it once per frame, before
 * the frame becomes a job.
 *
 * DESIGN
 *  - Fail closed: a kind the table does not list (a body number added to
 *    semq.proto and not given its rights here, or NOT_SET) is refused, for
 *    every peer, trusted relays included. Adding a frame kind means adding
 *    a row here (docs/ARCHITECTURE.md, "Adding a frame kind").
 *  - A configured trusted_relay may send every kind of the table in other
 *    nodes' names, except the connection's own handshake (Hello), which
 *    peer.c handles before any frame reaches net.c.
 *  - Pure: no state, no I/O, no clock; the frame is already valid (codec).
 */
#ifndef SEMQ_RIGHTS_H
#define SEMQ_RIGHTS_H

#include <stddef.h>

#include "semq.pb-c.h"

/* Who may send a frame kind (besides a trusted relay). */
enum rights_who {
	RIGHTS_HANDSHAKE, /* the connection's own exchange (peer.c): never
			     a job, refused here */
	RIGHTS_ANY,       /* any authenticated peer */
	RIGHTS_ORIGIN,    /* the origin of every message or id it names */
	RIGHTS_DEST,      /* the destination of every id it names */
	RIGHTS_REPORTER,  /* the node it reports for (StreamState.reporter) */
	RIGHTS_RELAY      /* custody claims: a trusted relay only; "not
			     delivered for now" from any peer */
};

struct rights_kind {
	int body;            /* SEMQ__FRAME__BODY_* */
	const char *name;    /* as in semq.proto */
	enum rights_who who; /* who may send it */
};

/*
 * May `peer` (authenticated; a configured trusted_relay when `trusted`)
 * send f? SEMQ_OK; SEMQ_DECLINED when the kind is known but this peer may
 * not send it in this frame's names (answer Error FORBIDDEN);
 * SEMQ_ERR_PROTO when the kind is not in the table or is the handshake's
 * (answer Error PROTOCOL). `why` names the kind and the peer. f is
 * borrowed, and valid (codec_validate).
 */
int rights_check(const Semq__Frame *f, const char *peer, int trusted, char *why,
		 size_t whysz);

/* The table's row of a body kind, or NULL when it has none (borrowed,
 * static). */
const struct rights_kind *rights_kind(int body);

/* The name of a body kind ("Data"), or "unknown" (static). */
const char *rights_kind_name(int body);

/* Every row of the table, *n of them, in body number order (static). */
const struct rights_kind *rights_table(size_t *n);

/* The text of a who ("origin"), for logs and docs (static). */
const char *rights_who_text(enum rights_who who);

#endif
