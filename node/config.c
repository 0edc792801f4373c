/* SPDX-License-Identifier: MIT */
/*
 * node.ini (SPEC §9): reads the file with inih into struct config, checks
 * every value where it enters, and reports every problem found, each as one
 * "FILE:LINE: message" line. One table of keys (section, key, type, default,
 * offset, range, flags, meaning) drives parsing, defaults, required-key checks
 * and config_describe(), so the reference cannot drift from the parser. Each
 * key's type names its setter (ktypes[]: one per type, no switch), which
 * parses the value with the value parsers of config_value.c within the
 * bounds written beside the key; cross-key checks come after the whole file
 * (check_all).
 *
 * DESIGN. inih (Debian build: fixed 200-byte line buffer, multi-line values,
 * ';' inline comments, no line number for the handler) reads lines through
 * our reader(), which is called exactly once per physical line. The reader
 * - counts lines, so the handler knows the line of each key;
 * - strips leading blanks, so inih never sees an indented line and never
 *   glues it to the previous key as a continuation: indented keys are keys;
 * - handles comments and [section] headers itself (inih truncates section
 *   names to 49 bytes and does not report empty sections), and hands inih
 *   an empty line instead, so section state lives in struct load only;
 * - reports malformed lines (no '=' / ':', no ']', too long for inih's
 *   buffer, NUL bytes) with their line and hands inih an empty line, so every
 *   syntax error is reported, not only the first as inih would.
 * Invariants: only "key = value" lines reach inih; the handler never fails
 * (it records problems and returns 1), so a non-zero return from inih is a
 * syntax error the reader missed and is reported as such.
 */
#define _GNU_SOURCE /* asprintf, vasprintf */
#include "config.h"
#include "config_value.h"
#include "types.h" /* the redo policy's defaults */

#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Units of the table's bounds (config_value.h). */
#define KIB CV_KIB
#define GIB CV_GIB
#define TIB CV_TIB
#define HOUR CV_HOUR
#define DAY CV_DAY

#define REDO_MAX_LEVELS 32
#define MAX_FRAME_SLACK (4 * KIB)    /* max_frame >= max_payload + this */
#define MAX_FRAME_DEFAULT (64 * KIB) /* default max_frame - max_payload */
#define MSG_MAX 2048                 /* one value problem, without prefix */

enum sect {
	S_NONE,
	S_NODE,
	S_TLS,
	S_PEER,
	S_ROUTE,
	S_PLUGIN,
	S_REDO,
	S_RELAY,
	S_SKIP
};

enum ktype {
	T_STRING,
	T_PATH,     /* char *, resolved against the config file's directory */
	T_ID,       /* char[SEMQ_ID_MAX + 1] */
	T_BOOL,     /* int */
	T_DURATION, /* int64_t milliseconds */
	T_UINT,     /* unsigned */
	T_SIZE,     /* size_t bytes */
	T_ADDR,     /* struct cfg_addr */
	T_ENUM,     /* int: index into names */
	T_DURLIST,  /* int64_t * at off, size_t count at off_n */
	T_TYPELIST, /* uint32_t * at off, size_t count at off_n (cfg_plugin) */
	T_IDLIST, /* char (*)[SEMQ_ID_MAX + 1] at off, size_t count at off_n */
	T_DB,     /* char *: a T_PATH, or a postgresql:// URL kept as is
		       (and struct config's db_url set) */
	T_INSTANCE, /* char[SEMQ_INSTANCE_MAX + 1]: an instance name */
	T_ROUTE,    /* documentation only: [route] keys */
	T_OPTION,   /* documentation only: plugin options */
	N_KTYPES
};

struct key;
struct load;

/* What keys of one type do (ktypes[], beside the setters): nginx's
 * ngx_conf_set_*_slot functions, redis's typeInterface. */
struct ktype_ops {
	/* Parses v into the key's field of `base`; NULL for the types that
	 * only document keys handled outside the table. */
	int (*set)(struct load *L, const struct key *k, void *base,
		   const char *v, char *why, size_t whysz);
	/* Do the key's values differ between the structs at a and b? */
	int (*differs)(const struct key *k, const char *a, const char *b);
	const char *name; /* in the reference; NULL: text() makes it */
	const char *(*text)(const struct key *k, char *buf, size_t sz);
};

enum {
	K_REQUIRED = 1, /* an error when absent */
	K_EXISTS = 2,   /* path: must name a readable file */
	K_DIR = 4,      /* path: its directory must exist */
	K_DOC = 8       /* only documents keys handled outside the table */
};

/* One key. `type` names its setter (ktypes[]), which parses the value
 * within `min`..`max` (or one of `names`). `off` (and `off_n`) point into
 * the struct of its section: struct config for [node], [tls] and [redo],
 * struct cfg_peer for [peer], struct cfg_plugin for [plugin]. `def` is
 * written in config syntax and goes through the same setter as the file;
 * NULL = no default. */
struct key {
	enum sect sect;
	const char *name;
	enum ktype type;
	const char *def;
	size_t off, off_n;
	int64_t min, max; /* uint, duration (ms), size, list items */
	const char *const *names;
	unsigned flags;
	const char *doc;
};

struct section {
	enum sect sect;
	const char *name;
	int named; /* [peer NAME], [plugin NAME] */
	const char *doc;
};

static const char *const sync_names[] = {"off", "normal", "full", "extra",
					 NULL};
static const char *const level_names[] = {"error", "warn", "info", "debug",
					  NULL};
static const char *const allow_names[] = {"any", "listed", NULL};

#define NODE(f) offsetof(struct config, f)
#define PEER(f) offsetof(struct cfg_peer, f)
#define PLUG(f) offsetof(struct cfg_plugin, f)
/* A number's macro as the text of a default: TEXT_OF(SEMQ_REDO_MAX_TRIES). */
#define TEXT_OF_(x) #x
#define TEXT_OF(x) TEXT_OF_(x)

static const struct section sections[] = {
	{S_NODE, "node", 0,
	 "This node: identity, database, listeners, timers and limits."},
	{S_TLS, "tls", 0,
	 "Mutual TLS 1.3 with every peer. semqd needs all three when it "
	 "listens or has peers."},
	{S_PEER, "peer", 1,
	 "A node this node talks to; NAME is its node id (and certificate "
	 "CN). One section per peer."},
	{S_ROUTE, "route", 0,
	 "Next hops: each key is a destination node id or `default`, each "
	 "value the name of a [peer] to send through."},
	{S_PLUGIN, "plugin", 1,
	 "A shared object that applies arriving messages (include/semq/"
	 "plugin.h). NAME is free, 1-64 of A-Za-z0-9._-."},
	{S_REDO, "redo", 0,
	 "Retries of messages whose plugin failed (tb_0033)."},
	{S_RELAY, "relay", 0,
	 "Custody at a relay with store_and_forward: what it holds for "
	 "offline destinations, per origin and in all, and how long it holds "
	 "messages for a destination it has never seen; and what a relay "
	 "answers, and whom a forward-only one admits."},
};

static const struct key keys[] = {
	{S_NODE, "id", T_ID, NULL, NODE(id), 0, 0, 0, NULL, K_REQUIRED,
	 "This node's id, 1-64 characters of A-Za-z0-9._-; must equal the CN "
	 "(or a semq://ID URI SAN) of its certificate."},
	{S_NODE, "db", T_DB, NULL, NODE(db), 0, 0, 0, NULL, K_REQUIRED | K_DIR,
	 "The SQLite database file; created and migrated on start. Its "
	 "directory must exist. Or a postgresql:// (postgres://) URL of a "
	 "PostgreSQL database, which several instances of this node may "
	 "share."},
	{S_NODE, "instance", T_INSTANCE, NULL, NODE(instance), 0, 0, 0, NULL, 0,
	 "This semqd's name among the instances serving the node id over one "
	 "database, 1-64 characters of A-Za-z0-9._:-; sent in Hello. A relay "
	 "spreads the streams to the id over its connected instances."},
	{S_NODE, "listen", T_ADDR, NULL, NODE(listen), 0, 0, 0, NULL, 0,
	 "Accept inbound peers on this address. Omit to only dial out."},
	{S_NODE, "admin", T_ADDR, NULL, NODE(admin), 0, 0, 0, NULL, 0,
	 "Admin HTTP (/metrics, /health, JSON) on this address; keep it on "
	 "loopback. Omit to disable."},
	{S_NODE, "admin_token", T_STRING, NULL, NODE(admin_token), 0, 0, 0,
	 NULL, 0,
	 "Bearer token every admin HTTP request but /health needs when set "
	 "(reads too); without it, actions are taken from loopback only and "
	 "payloads are never shown."},
	{S_NODE, "allow", T_ENUM, "any", NODE(allow_listed), 0, 0, 0,
	 allow_names, 0,
	 "Which peers may connect: any with a certificate from the CA, or "
	 "only those with a [peer] section (listed); others are refused "
	 "before any frame."},
	{S_NODE, "relay", T_BOOL, "no", NODE(relay), 0, 0, 0, NULL, 0,
	 "Forward messages between the nodes connected to this one "
	 "(platform role)."},
	{S_NODE, "store_and_forward", T_BOOL, "no", NODE(store_and_forward), 0,
	 0, 0, NULL, 0,
	 "With relay: keep messages for a destination that is offline and "
	 "deliver them when it connects."},
	{S_NODE, "synchronous", T_ENUM, "full", NODE(synchronous), 0, 0, 0,
	 sync_names, 0, "SQLite PRAGMA synchronous for the database."},
	{S_NODE, "poll_interval", T_DURATION, "50ms", NODE(poll_interval_ms), 0,
	 1, HOUR, NULL, 0,
	 "How often tb_0031 is scanned for rows written without "
	 "semq_notify()."},
	{S_NODE, "query_after", T_DURATION, "30s", NODE(query_after_ms), 0, 1,
	 30 * DAY, NULL, 0,
	 "Ask the destination about a message sent but unconfirmed for this "
	 "long, instead of resending blindly."},
	{S_NODE, "custody_query_after", T_DURATION, "10m",
	 NODE(custody_query_after_ms), 0, 1, 30 * DAY, NULL, 0,
	 "Ask a relay about a message it holds in custody (RelayAck STORED) "
	 "after this long; its destination's verdict comes through the relay "
	 "without asking. At least query_after is used."},
	{S_NODE, "outbound_retention", T_DURATION, "1d",
	 NODE(outbound_retention_ms), 0, 0, 3650 * DAY, NULL, 0,
	 "How long a confirmed outbound row is kept before it is deleted."},
	{S_NODE, "receipt_retention", T_DURATION, "7d",
	 NODE(receipt_retention_ms), 0, 0, 3650 * DAY, NULL, 0,
	 "How long a received row (tb_0030) is kept after the watermark "
	 "passed it: its digest tells a second copy of a message from "
	 "another message under the same seq when a sender's database went "
	 "back in time by less than this. 0 deletes it at once."},
	{S_NODE, "handshake_timeout", T_DURATION, "10s",
	 NODE(handshake_timeout_ms), 0, 1, HOUR, NULL, 0,
	 "A connection must finish its TLS handshake and Hello within this "
	 "long of being accepted or dialled, however it trickles; else it is "
	 "closed."},
	{S_NODE, "max_connections", T_UINT, "4096", NODE(max_connections), 0, 1,
	 1000000, NULL, 0,
	 "Authenticated connections (past TLS) at most, in all; a new one over "
	 "it is refused."},
	{S_NODE, "max_handshakes", T_UINT, "256", NODE(max_handshakes), 0, 1,
	 100000, NULL, 0,
	 "Connections still in their handshake at most, apart from the "
	 "authenticated ones: when full, the oldest handshake is dropped for a "
	 "new connection, so strangers cannot keep peers out."},
	{S_NODE, "max_handshakes_per_address", T_UINT, "16",
	 NODE(max_handshakes_per_address), 0, 1, 100000, NULL, 0,
	 "Handshakes from one remote address at most; more are refused at "
	 "once."},
	{S_NODE, "max_connections_per_address", T_UINT, "256",
	 NODE(max_connections_per_address), 0, 1, 1000000, NULL, 0,
	 "Connections from one remote address at most, in any state."},
	{S_NODE, "max_connections_per_peer", T_UINT, "16",
	 NODE(max_connections_per_peer), 0, 1, 100000, NULL, 0,
	 "Authenticated connections of one node id (certificate) at most; the "
	 "oldest goes for a new one over it."},
	{S_NODE, "write_timeout", T_DURATION, "60s", NODE(write_timeout_ms), 0,
	 1, DAY, NULL, 0,
	 "A peer that reads nothing of what waits for it for this long is "
	 "disconnected (a slow or dead reader)."},
	{S_NODE, "memory_budget", T_SIZE, "256MiB", NODE(memory_budget), 0,
	 1024 * 1024, 1024 * GIB, NULL, 0,
	 "Bytes of received frames waiting for the store thread, and of "
	 "messages held for a missing predecessor, at most: over it, reading "
	 "from the peers that queued them pauses until the store caught up "
	 "(back-pressure: nothing is refused or lost)."},
	{S_NODE, "max_hops", T_UINT, "8", NODE(max_hops), 0, 1, 255, NULL, 0,
	 "Relays a message may pass at most; a relay refuses one that has "
	 "passed this many (a routing loop), and its origin puts it dead."},
	{S_NODE, "plugin_timeout", T_DURATION, "30s", NODE(plugin_timeout_ms),
	 0, 1, DAY, NULL, 0,
	 "A plugin call running longer than this is logged and counted, and "
	 "/health reports it (the default of [plugin] deadline)."},
	{S_NODE, "peer_down_after", T_DURATION, "5m", NODE(peer_down_after_ms),
	 0, 1, 30 * DAY, NULL, 0,
	 "/health says degraded when a peer this node dials (connect =) has "
	 "had no ready connection for this long."},
	{S_NODE, "backlog_age_warn", T_DURATION, "15m",
	 NODE(backlog_age_warn_ms), 0, 1, 30 * DAY, NULL, 0,
	 "/health says degraded when this node's oldest unconfirmed outbound "
	 "message is older than this."},
	{S_NODE, "workers", T_UINT, "0", NODE(workers), 0, 0, 64, NULL, 0,
	 "Store workers applying received messages in parallel, each with "
	 "its own database connection; a stream is applied by one worker at "
	 "a time, so a slow plugin call holds only its own stream. 0: the "
	 "number of cores, at least 2, on PostgreSQL; 1 on SQLite (one "
	 "writer: more buy nothing there, docs/ARCHITECTURE.md)."},
	{S_NODE, "ping_interval", T_DURATION, "10s", NODE(ping_interval_ms), 0,
	 1, DAY, NULL, 0, "Send a Ping on every ready connection this often."},
	{S_NODE, "idle_timeout", T_DURATION, "60s", NODE(idle_timeout_ms), 0, 1,
	 DAY, NULL, 0,
	 "Close a connection silent for this long; more than "
	 "ping_interval."},
	{S_NODE, "reconnect_min", T_DURATION, "500ms", NODE(reconnect_min_ms),
	 0, 1, DAY, NULL, 0,
	 "First delay before dialling a peer again; it grows exponentially, "
	 "with jitter, after each failure."},
	{S_NODE, "reconnect_max", T_DURATION, "30s", NODE(reconnect_max_ms), 0,
	 1, DAY, NULL, 0,
	 "Cap of the reconnect delay; at least reconnect_min."},
	{S_NODE, "window", T_UINT, "1000", NODE(window), 0, 1, 1000000, NULL, 0,
	 "Unconfirmed messages in flight per stream, at most."},
	{S_NODE, "drain_rate", T_UINT, "0", NODE(drain_rate), 0, 0, 1000000000,
	 NULL, 0,
	 "Send queued messages (a backlog after a reconnect, a relay's "
	 "stored copies) no faster than this many a second; 0 = "
	 "unlimited."},
	{S_NODE, "batch_max", T_UINT, "1000", NODE(batch_max), 0, 1, 1000000,
	 NULL, 0, "Outbound messages read for sending per batch, at most."},
	{S_NODE, "max_payload", T_SIZE, "16MiB", NODE(max_payload), 0, 1, GIB,
	 NULL, 0, "Largest message payload, from applications and from peers."},
	{S_NODE, "max_frame", T_SIZE, NULL, NODE(max_frame), 0, 1, UINT32_MAX,
	 NULL, 0,
	 "Largest wire frame accepted; default max_payload + 64KiB, at "
	 "least max_payload + 4KiB."},
	{S_NODE, "log_level", T_ENUM, "info", NODE(log_level), 0, 0, 0,
	 level_names, 0, "Least severe level that is logged."},
	{S_NODE, "log_file", T_PATH, NULL, NODE(log_file), 0, 0, 0, NULL, K_DIR,
	 "Append the log to this file instead of stderr."},

	{S_TLS, "cert", T_PATH, NULL, NODE(tls_cert), 0, 0, 0, NULL, K_EXISTS,
	 "This node's certificate (PEM), signed by the CA."},
	{S_TLS, "key", T_PATH, NULL, NODE(tls_key), 0, 0, 0, NULL, K_EXISTS,
	 "Its private key (PEM)."},
	{S_TLS, "ca", T_PATH, NULL, NODE(tls_ca), 0, 0, 0, NULL, K_EXISTS,
	 "The deployment's CA certificate (PEM); peers must be signed by "
	 "it."},
	{S_TLS, "crl", T_PATH, NULL, NODE(tls_crl), 0, 0, 0, NULL, K_EXISTS,
	 "A PEM file of certificate revocation lists of the CA: a revoked "
	 "certificate is refused at the handshake. Read again on SIGHUP and "
	 "when the file changes."},
	{S_TLS, "deny", T_IDLIST, NULL, NODE(tls_deny), NODE(n_tls_deny), 0, 0,
	 NULL, 0,
	 "Node ids refused at the handshake whatever their certificate (a "
	 "stolen key, before the CRL has it)."},

	{S_PEER, "connect", T_ADDR, NULL, PEER(connect), 0, 0, 0, NULL, 0,
	 "Dial the peer at this address. Omit to only accept its "
	 "connections."},
	{S_PEER, "trusted_relay", T_BOOL, "no", PEER(trusted_relay), 0, 0, 0,
	 NULL, 0, "The peer may carry messages whose origin is another node."},

	{S_ROUTE, "default", T_ROUTE, NULL, 0, 0, 0, 0, NULL, K_DOC,
	 "Next hop for destinations that have no route of their own and "
	 "are not connected directly."},
	{S_ROUTE, "DEST", T_ROUTE, NULL, 0, 0, 0, 0, NULL, K_DOC,
	 "Next hop for messages to the node id DEST."},

	{S_PLUGIN, "path", T_PATH, NULL, PLUG(path), 0, 0, 0, NULL,
	 K_REQUIRED | K_EXISTS, "The plugin's shared object."},
	{S_PLUGIN, "types", T_TYPELIST, NULL, PLUG(types), PLUG(n_types), 0,
	 UINT32_MAX, NULL, K_REQUIRED,
	 "Message types it applies: * for all, or a comma list of type "
	 "numbers."},
	{S_PLUGIN, "deadline", T_DURATION, NULL, PLUG(deadline_ms), 0, 1, DAY,
	 NULL, 0,
	 "A call of this plugin running longer is logged with its message, "
	 "counted, and /health says degraded; default [node] "
	 "plugin_timeout."},
	{S_PLUGIN, "KEY", T_OPTION, NULL, 0, 0, 0, 0, NULL, K_DOC,
	 "Any other key is an option handed to the plugin, which checks "
	 "it."},

	{S_REDO, "levels", T_DURLIST, SEMQ_REDO_LEVELS_TEXT,
	 NODE(redo_levels_ms), NODE(n_redo_levels), 1, 365 * DAY, NULL, 0,
	 "Delays before the 1st, 2nd, ... retry of a failed message; 1 to "
	 "32 levels."},
	{S_REDO, "max_tries", T_UINT, TEXT_OF(SEMQ_REDO_MAX_TRIES),
	 NODE(max_tries), 0, 1, 1000, NULL, 0,
	 "Attempts before a message is dead and left to an operator."},
	{S_REDO, "retention", T_DURATION, "7d", NODE(redo_retention_ms), 0, 0,
	 3650 * DAY, NULL, 0,
	 "How long a done or discarded entry is kept before it is deleted; "
	 "dead entries stay until an operator acts."},

	{S_RELAY, "quota_messages", T_UINT, "20000000", NODE(quota_messages), 0,
	 1, 4000000000u, NULL, 0,
	 "Messages this relay holds in custody for all origins together, at "
	 "most; beyond it new custody is refused (RelayAck QUOTA), the "
	 "origins keep their rows and try again later."},
	{S_RELAY, "quota_bytes", T_SIZE, "20GiB", NODE(quota_bytes), 0, 1,
	 1024 * TIB, NULL, 0,
	 "Payload bytes held in custody for all origins together, at most."},
	{S_RELAY, "quota_messages_per_origin", T_UINT, "1000000",
	 NODE(quota_messages_per_origin), 0, 1, 4000000000u, NULL, 0,
	 "Messages held in custody for one origin, at most: one shop cannot "
	 "fill the relay for the others."},
	{S_RELAY, "quota_bytes_per_origin", T_SIZE, "1GiB",
	 NODE(quota_bytes_per_origin), 0, 1, 1024 * TIB, NULL, 0,
	 "Payload bytes held in custody for one origin, at most."},
	{S_RELAY, "unknown_dest_after", T_DURATION, "1d",
	 NODE(unknown_dest_after_ms), 0, 1, 3650 * DAY, NULL, 0,
	 "Messages for a destination that has never been connected to this "
	 "relay (and is not named in this file) are held this long, then "
	 "refused as undeliverable (RelayAck UNKNOWN_DEST): their origin "
	 "puts them dead in its redo queue for an operator."},
	{S_RELAY, "relay_ack", T_BOOL, "yes", NODE(relay_ack), 0, 0, 0, NULL, 0,
	 "Answer a message forwarded at once with RelayAck FORWARDED (its "
	 "origin's row goes to status 6). no: only the destination's "
	 "810-Indication answers it; the origin's row stays sent (4) and is "
	 "queried after query_after when none comes."},
	{S_RELAY, "require_connected", T_IDLIST, NULL, NODE(relay_require),
	 NODE(n_relay_require), 0, 0, NULL, 0,
	 "Forward-only relay (store_and_forward = no): while none of these "
	 "node ids (any instance, or the peer its [route] names) is "
	 "connected, every other peer is refused after its Hello with Error "
	 "DEST_UNAVAILABLE and dials again later."},
};

#define N_KEYS (sizeof(keys) / sizeof(keys[0]))
#define N_SECTIONS (sizeof(sections) / sizeof(sections[0]))

/* ---- problem lists ------------------------------------------------------ */

struct problem {
	int line; /* 0 = none */
	size_t seq;
	char *text; /* "FILE:LINE: message", owned */
};

struct problems {
	const char *file; /* borrowed */
	struct problem *v;
	size_t n;
	int nomem;
};

__attribute__((format(printf, 3, 4))) static void problem(struct problems *p,
							  int line,
							  const char *fmt, ...)
{
	char *body = NULL, *text = NULL;
	struct problem *nv;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&body, fmt, ap);
	va_end(ap);
	if (n < 0) {
		p->nomem = 1;
		return;
	}
	if (line > 0)
		n = asprintf(&text, "%s:%d: %s", p->file, line, body);
	else
		n = asprintf(&text, "%s: %s", p->file, body);
	free(body);
	if (n < 0) {
		p->nomem = 1;
		return;
	}
	nv = realloc(p->v, (p->n + 1) * sizeof(*nv));
	if (!nv) {
		free(text);
		p->nomem = 1;
		return;
	}
	p->v = nv;
	p->v[p->n].line = line;
	p->v[p->n].seq = p->n;
	p->v[p->n].text = text;
	p->n++;
}

static int has_problem_at(const struct problems *p, int line)
{
	for (size_t i = 0; i < p->n; i++)
		if (p->v[i].line == line)
			return 1;
	return 0;
}

static int problem_cmp(const void *a, const void *b)
{
	const struct problem *x = a, *y = b;
	long lx = x->line > 0 ? x->line : (long)INT_MAX + 1;
	long ly = y->line > 0 ? y->line : (long)INT_MAX + 1;

	if (lx != ly)
		return lx < ly ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Appends the problems, in line order (those without a line last), one per
 * line, to *s (malloc'd or NULL; replaced). */
static int problems_append(struct problems *p, char **s)
{
	size_t len = *s ? strlen(*s) : 0, add = 0;
	char *out;

	qsort(p->v, p->n, sizeof(*p->v), problem_cmp);
	for (size_t i = 0; i < p->n; i++)
		add += strlen(p->v[i].text) + 1;
	out = realloc(*s, len + add + 1);
	if (!out)
		return SEMQ_ERR_NOMEM;
	for (size_t i = 0; i < p->n; i++) {
		size_t l = strlen(p->v[i].text);
		memcpy(out + len, p->v[i].text, l);
		out[len + l] = '\n';
		len += l + 1;
	}
	out[len] = '\0';
	*s = out;
	return SEMQ_OK;
}

static void problems_free(struct problems *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->v[i].text);
	free(p->v);
	p->v = NULL;
	p->n = 0;
}

/* ---- the parse state, and a setter per type ------------------------------ */

/* The parse state of one config_load(). */
struct load {
	struct config *c;
	struct problems p;
	char *dir; /* directory of the file, "" for none; owned */
	FILE *f;
	int lineno;
	int read_errno; /* set when reading failed */
	char *buf;      /* getline buffer */
	size_t bufsz;

	/* Current section. */
	enum sect sect;
	size_t idx;    /* peer or plugin index */
	int sect_line; /* line of its header; identifies the instance */
	char label[SEMQ_ID_MAX + 16]; /* "[peer P1]" */

	/* Keys seen so far: (section line, key, line). */
	struct seen {
		int sect_line;
		char *key;
		int line;
	} * seen;
	size_t n_seen;
};

static const struct key *key_find(enum sect s, const char *name)
{
	for (size_t i = 0; i < N_KEYS; i++)
		if (keys[i].sect == s && !(keys[i].flags & K_DOC) &&
		    strcmp(keys[i].name, name) == 0)
			return &keys[i];
	return NULL;
}

/* Line where `name` was set in the section starting at sect_line, or 0. */
static int seen_line(const struct load *L, int sect_line, const char *name)
{
	for (size_t i = 0; i < L->n_seen; i++)
		if (L->seen[i].sect_line == sect_line &&
		    strcmp(L->seen[i].key, name) == 0)
			return L->seen[i].line;
	return 0;
}

static int seen_add(struct load *L, const char *name)
{
	struct seen *nv = realloc(L->seen, (L->n_seen + 1) * sizeof(*nv));

	if (!nv)
		return SEMQ_ERR_NOMEM;
	L->seen = nv;
	nv[L->n_seen].key = strdup(name);
	if (!nv[L->n_seen].key)
		return SEMQ_ERR_NOMEM;
	nv[L->n_seen].sect_line = L->sect_line;
	nv[L->n_seen].line = L->lineno;
	L->n_seen++;
	return SEMQ_OK;
}

/* The struct the current section's keys point into. */
static void *section_base(struct load *L, enum sect s, size_t idx)
{
	if (s == S_PEER)
		return &L->c->peers[idx];
	if (s == S_PLUGIN)
		return &L->c->plugins[idx];
	return L->c;
}

/*
 * The setters, one per type (nginx's ngx_conf_set_*_slot): each parses `v`
 * with its value parser (config_value.h) into the field k->off of `base`,
 * within the bounds the key table gives beside the key. SEMQ_OK; or
 * SEMQ_ERR_INVALID with `why` naming the value (the caller adds the file,
 * line, section and key); or SEMQ_ERR_NOMEM. A refused value leaves the
 * field as it was, but for an address, which is left unset.
 */
#define FIELD(base, k, type) ((type *)(void *)((char *)(base) + (k)->off))
#define COUNT(base, k) ((size_t *)(void *)((char *)(base) + (k)->off_n))

/* Replaces the string at *field with a copy of v. */
static int set_dup(char **field, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return SEMQ_ERR_NOMEM;
	free(*field);
	*field = s;
	return SEMQ_OK;
}

static int set_string(struct load *L, const struct key *k, void *base,
		      const char *v, char *why, size_t whysz)
{
	(void)L;
	(void)why;
	(void)whysz;
	return set_dup(FIELD(base, k, char *), v);
}

/* A path: resolved against the directory of the file, checked as k's flags
 * (K_EXISTS, K_DIR) ask. */
static int set_path(struct load *L, const struct key *k, void *base,
		    const char *v, char *why, size_t whysz)
{
	unsigned flags = ((k->flags & K_EXISTS) ? CV_PATH_EXISTS : 0) |
			 ((k->flags & K_DIR) ? CV_PATH_DIR : 0);
	char **field = FIELD(base, k, char *);
	char *s = cv_path_resolve(L->dir, v);
	int r;

	if (!s)
		return SEMQ_ERR_NOMEM;
	r = cv_path_check(v, s, flags, why, whysz);
	if (r != SEMQ_OK) {
		free(s);
		return r;
	}
	free(*field);
	*field = s;
	return SEMQ_OK;
}

/* [node] db: a path as set_path, or a postgresql:// URL kept as written;
 * struct config's db_url says which. */
static int set_db(struct load *L, const struct key *k, void *base,
		  const char *v, char *why, size_t whysz)
{
	int r;

	if (cv_db_url_prefix(v)) {
		r = cv_db_url(v, why, whysz);
		if (r == SEMQ_OK)
			r = set_dup(FIELD(base, k, char *), v);
		if (r == SEMQ_OK)
			((struct config *)base)->db_url = 1;
		return r;
	}
	r = set_path(L, k, base, v, why, whysz);
	if (r == SEMQ_OK)
		((struct config *)base)->db_url = 0;
	return r;
}

static int set_instance(struct load *L, const struct key *k, void *base,
			const char *v, char *why, size_t whysz)
{
	(void)L;
	return cv_instance(v, FIELD(base, k, char), why, whysz);
}

static int set_id(struct load *L, const struct key *k, void *base,
		  const char *v, char *why, size_t whysz)
{
	(void)L;
	return cv_id(v, FIELD(base, k, char), why, whysz);
}

static int set_bool(struct load *L, const struct key *k, void *base,
		    const char *v, char *why, size_t whysz)
{
	(void)L;
	return cv_bool(v, FIELD(base, k, int), why, whysz);
}

static int set_duration(struct load *L, const struct key *k, void *base,
			const char *v, char *why, size_t whysz)
{
	(void)L;
	return cv_duration_in(v, k->min, k->max, FIELD(base, k, int64_t), why,
			      whysz);
}

static int set_uint(struct load *L, const struct key *k, void *base,
		    const char *v, char *why, size_t whysz)
{
	(void)L;
	return cv_uint_in(v, (unsigned)k->min, (unsigned)k->max,
			  FIELD(base, k, unsigned), why, whysz);
}

static int set_size(struct load *L, const struct key *k, void *base,
		    const char *v, char *why, size_t whysz)
{
	(void)L;
	return cv_size_in(v, (uint64_t)k->min, (uint64_t)k->max,
			  FIELD(base, k, size_t), why, whysz);
}

static int set_addr(struct load *L, const struct key *k, void *base,
		    const char *v, char *why, size_t whysz)
{
	(void)L;
	return cv_addr(v, FIELD(base, k, struct cfg_addr), why, whysz);
}

static int set_enum(struct load *L, const struct key *k, void *base,
		    const char *v, char *why, size_t whysz)
{
	(void)L;
	return cv_enum(v, k->names, FIELD(base, k, int), why, whysz);
}

/* Durations, each within the key's bounds, 1 to REDO_MAX_LEVELS of them. */
static int set_durlist(struct load *L, const struct key *k, void *base,
		       const char *v, char *why, size_t whysz)
{
	int64_t **field = FIELD(base, k, int64_t *);
	int64_t *nv;
	size_t n;
	int r;

	(void)L;
	r = cv_durations(v, k->min, k->max, REDO_MAX_LEVELS, &nv, &n, why,
			 whysz);
	if (r != SEMQ_OK)
		return r;
	free(*field);
	*field = nv;
	*COUNT(base, k) = n;
	return SEMQ_OK;
}

/* [plugin] types: "*" or type numbers, into struct cfg_plugin. */
static int set_typelist(struct load *L, const struct key *k, void *base,
			const char *v, char *why, size_t whysz)
{
	struct cfg_plugin *pl = base;
	uint32_t *nv;
	size_t n;
	int all, r;

	(void)L;
	(void)k;
	r = cv_types(v, &all, &nv, &n, why, whysz);
	if (r != SEMQ_OK)
		return r;
	free(pl->types);
	pl->types = nv;
	pl->n_types = n;
	pl->all_types = all;
	return SEMQ_OK;
}

static int set_idlist(struct load *L, const struct key *k, void *base,
		      const char *v, char *why, size_t whysz)
{
	char(**field)[SEMQ_ID_MAX + 1] = (void *)((char *)base + k->off);
	char(*nv)[SEMQ_ID_MAX + 1];
	size_t n;
	int r;

	(void)L;
	r = cv_ids(v, &nv, &n, why, whysz);
	if (r != SEMQ_OK)
		return r;
	free(*field);
	*field = nv;
	*COUNT(base, k) = n;
	return SEMQ_OK;
}

/* ---- comparing a key's values, for a reload ----------------------------- */

#define CFIELD(p, k, type) ((const type *)(const void *)((p) + (k)->off))

static int str_differs(const char *a, const char *b)
{
	return (a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0);
}

static int differs_str(const struct key *k, const char *a, const char *b)
{
	return str_differs(*CFIELD(a, k, char *), *CFIELD(b, k, char *));
}

static int differs_chars(const struct key *k, const char *a, const char *b)
{
	return strcmp(a + k->off, b + k->off) != 0;
}

static int differs_int(const struct key *k, const char *a, const char *b)
{
	return *CFIELD(a, k, int) != *CFIELD(b, k, int);
}

static int differs_i64(const struct key *k, const char *a, const char *b)
{
	return *CFIELD(a, k, int64_t) != *CFIELD(b, k, int64_t);
}

static int differs_uint(const struct key *k, const char *a, const char *b)
{
	return *CFIELD(a, k, unsigned) != *CFIELD(b, k, unsigned);
}

static int differs_size(const struct key *k, const char *a, const char *b)
{
	return *CFIELD(a, k, size_t) != *CFIELD(b, k, size_t);
}

static int differs_addr(const struct key *k, const char *a, const char *b)
{
	const struct cfg_addr *x = CFIELD(a, k, struct cfg_addr);
	const struct cfg_addr *y = CFIELD(b, k, struct cfg_addr);

	return x->set != y->set || (x->set && (strcmp(x->host, y->host) != 0 ||
					       x->port != y->port));
}

/* A list of n items of `item` bytes at off, its count at off_n. */
static int differs_list(const struct key *k, const char *a, const char *b,
			size_t item)
{
	size_t n = *(const size_t *)(const void *)(a + k->off_n);
	const void *x = *CFIELD(a, k, void *);
	const void *y = *CFIELD(b, k, void *);

	if (n != *(const size_t *)(const void *)(b + k->off_n))
		return 1;
	return n && memcmp(x, y, n * item) != 0;
}

static int differs_durlist(const struct key *k, const char *a, const char *b)
{
	return differs_list(k, a, b, sizeof(int64_t));
}

static int differs_typelist(const struct key *k, const char *a, const char *b)
{
	return differs_list(k, a, b, sizeof(uint32_t));
}

/* Ids compared as strings: the bytes of a slot after its NUL are not part
 * of the value. */
static int differs_idlist(const struct key *k, const char *a, const char *b)
{
	size_t n = *(const size_t *)(const void *)(a + k->off_n);
	char(*const *x)[SEMQ_ID_MAX + 1] = (const void *)(a + k->off);
	char(*const *y)[SEMQ_ID_MAX + 1] = (const void *)(b + k->off);

	if (n != *(const size_t *)(const void *)(b + k->off_n))
		return 1;
	for (size_t i = 0; i < n; i++)
		if (strcmp((*x)[i], (*y)[i]) != 0)
			return 1;
	return 0;
}

static int differs_never(const struct key *k, const char *a, const char *b)
{
	(void)k;
	(void)a;
	(void)b;
	return 0;
}

/* ---- naming a key's type, for the reference ------------------------------ */

static const char *text_duration(const struct key *k, char *buf, size_t sz)
{
	char a[32], b[32];

	snprintf(buf, sz, "duration %s..%s",
		 cv_fmt_duration(k->min, a, sizeof(a)),
		 cv_fmt_duration(k->max, b, sizeof(b)));
	return buf;
}

static const char *text_durlist(const struct key *k, char *buf, size_t sz)
{
	char a[32], b[32];

	snprintf(buf, sz, "durations d1,d2,... each %s..%s",
		 cv_fmt_duration(k->min, a, sizeof(a)),
		 cv_fmt_duration(k->max, b, sizeof(b)));
	return buf;
}

static const char *text_uint(const struct key *k, char *buf, size_t sz)
{
	snprintf(buf, sz, "integer %lld..%lld", (long long)k->min,
		 (long long)k->max);
	return buf;
}

static const char *text_size(const struct key *k, char *buf, size_t sz)
{
	char a[32], b[32];

	snprintf(buf, sz, "size %s..%s", cv_fmt_size(k->min, a, sizeof(a)),
		 cv_fmt_size(k->max, b, sizeof(b)));
	return buf;
}

static const char *text_enum(const struct key *k, char *buf, size_t sz)
{
	buf[0] = '\0';
	for (int i = 0; k->names[i]; i++) {
		size_t l = strlen(buf);

		snprintf(buf + l, sz - l, "%s%s", i ? "|" : "", k->names[i]);
	}
	return buf;
}

/* ---- the types ---------------------------------------------------------- */

/* What each type of the key table does: its setter, its comparison for a
 * reload, and its name in the reference (fixed, or made by text() from the
 * key's bounds or names). */
static const struct ktype_ops ktypes[] = {
	[T_STRING] = {set_string, differs_str, "string", NULL},
	[T_PATH] = {set_path, differs_str, "path", NULL},
	[T_ID] = {set_id, differs_chars, "node id", NULL},
	[T_BOOL] = {set_bool, differs_int, "yes|no", NULL},
	[T_DURATION] = {set_duration, differs_i64, NULL, text_duration},
	[T_UINT] = {set_uint, differs_uint, NULL, text_uint},
	[T_SIZE] = {set_size, differs_size, NULL, text_size},
	[T_ADDR] = {set_addr, differs_addr, "host:port or [v6]:port", NULL},
	[T_ENUM] = {set_enum, differs_int, NULL, text_enum},
	[T_DURLIST] = {set_durlist, differs_durlist, NULL, text_durlist},
	[T_TYPELIST] = {set_typelist, differs_typelist, "* or type,type,...",
			NULL},
	[T_IDLIST] = {set_idlist, differs_idlist, "node id,node id,...", NULL},
	[T_DB] = {set_db, differs_str, "path or postgresql:// URL", NULL},
	[T_INSTANCE] = {set_instance, differs_chars, "instance name", NULL},
	[T_ROUTE] = {NULL, differs_never, "peer name", NULL},
	[T_OPTION] = {NULL, differs_never, "string", NULL},
};
_Static_assert(sizeof(ktypes) / sizeof(ktypes[0]) == N_KTYPES,
	       "a struct ktype_ops for every enum ktype");

/* Sets key k in `base` from the text `v` (a line of the file or the table's
 * default) with its type's setter. Returns as the setters do. */
static int set_key(struct load *L, const struct key *k, void *base,
		   const char *v, char *why, size_t whysz)
{
	if (!*v) {
		snprintf(why, whysz, "%s", "empty value");
		return SEMQ_ERR_INVALID;
	}
	if (!ktypes[k->type].set) {
		snprintf(why, whysz, "%s",
			 "internal error: no parser for this key");
		return SEMQ_ERR_INVALID;
	}
	return ktypes[k->type].set(L, k, base, v, why, whysz);
}

/* Sets the defaults of section s into base. */
static int apply_defaults(struct load *L, enum sect s, void *base)
{
	char why[MSG_MAX];

	for (size_t i = 0; i < N_KEYS; i++) {
		int r;

		if (keys[i].sect != s || !keys[i].def)
			continue;
		r = set_key(L, &keys[i], base, keys[i].def, why, sizeof(why));
		if (r == SEMQ_ERR_NOMEM)
			return r;
		if (r != 0)
			return SEMQ_ERR_INTERNAL; /* a bad table default */
	}
	return SEMQ_OK;
}

/* ---- sections and keys -------------------------------------------------- */

/* Opens the section whose header (between the brackets) is `raw`. */
static int open_section(struct load *L, char *raw)
{
	const struct section *sec = NULL;
	char *name, *arg;
	int *once = NULL;
	size_t n;

	L->sect = S_SKIP;
	L->sect_line = L->lineno;
	name = raw + strspn(raw, " \t");
	n = strlen(name);
	while (n && (name[n - 1] == ' ' || name[n - 1] == '\t'))
		name[--n] = '\0';
	arg = name + strcspn(name, " \t");
	if (*arg) {
		*arg++ = '\0';
		arg += strspn(arg, " \t");
	}
	for (size_t i = 0; i < N_SECTIONS; i++)
		if (strcmp(sections[i].name, name) == 0)
			sec = &sections[i];
	if (!sec) {
		if (*arg)
			problem(&L->p, L->lineno, "unknown section [%s %s]",
				name, arg);
		else
			problem(&L->p, L->lineno, "unknown section [%s]", name);
		return SEMQ_OK;
	}
	if (!sec->named) {
		if (*arg) {
			problem(&L->p, L->lineno,
				"[%s] takes no name, not '%s'", name, arg);
			return SEMQ_OK;
		}
		switch (sec->sect) {
		case S_NODE: once = &L->c->node_line; break;
		case S_TLS: once = &L->c->tls_line; break;
		case S_ROUTE: once = &L->c->route_line; break;
		case S_RELAY: once = &L->c->relay_line; break;
		default: once = &L->c->redo_line; break;
		}
		if (*once) {
			problem(&L->p, L->lineno,
				"duplicate section [%s] (first at line %d)",
				name, *once);
			return SEMQ_OK;
		}
		*once = L->lineno;
		L->sect = sec->sect;
		snprintf(L->label, sizeof(L->label), "[%s]", name);
		return SEMQ_OK;
	}
	if (!*arg) {
		problem(&L->p, L->lineno, "[%s] needs a name: [%s NAME]", name,
			name);
		return SEMQ_OK;
	}
	if (!semq_id_valid(arg)) {
		problem(&L->p, L->lineno,
			"[%s %s]: '%s' is not a valid name (1-64 of "
			"A-Za-z0-9._-)",
			name, arg, arg);
		return SEMQ_OK;
	}
	if (sec->sect == S_PEER) {
		struct cfg_peer *nv;

		for (size_t i = 0; i < L->c->n_peers; i++) {
			if (strcmp(L->c->peers[i].name, arg) == 0) {
				problem(&L->p, L->lineno,
					"duplicate section [peer %s] (first "
					"at line %d)",
					arg, L->c->peers[i].line);
				return SEMQ_OK;
			}
		}
		nv = realloc(L->c->peers, (L->c->n_peers + 1) * sizeof(*nv));
		if (!nv)
			return SEMQ_ERR_NOMEM;
		L->c->peers = nv;
		memset(&nv[L->c->n_peers], 0, sizeof(*nv));
		snprintf(nv[L->c->n_peers].name, sizeof(nv->name), "%s", arg);
		nv[L->c->n_peers].line = L->lineno;
		L->idx = L->c->n_peers++;
	} else {
		struct cfg_plugin *nv;

		for (size_t i = 0; i < L->c->n_plugins; i++) {
			if (strcmp(L->c->plugins[i].name, arg) == 0) {
				problem(&L->p, L->lineno,
					"duplicate section [plugin %s] (first "
					"at line %d)",
					arg, L->c->plugins[i].line);
				return SEMQ_OK;
			}
		}
		nv = realloc(L->c->plugins,
			     (L->c->n_plugins + 1) * sizeof(*nv));
		if (!nv)
			return SEMQ_ERR_NOMEM;
		L->c->plugins = nv;
		memset(&nv[L->c->n_plugins], 0, sizeof(*nv));
		snprintf(nv[L->c->n_plugins].name, sizeof(nv->name), "%s", arg);
		nv[L->c->n_plugins].line = L->lineno;
		L->idx = L->c->n_plugins++;
	}
	L->sect = sec->sect;
	snprintf(L->label, sizeof(L->label), "[%s %s]", name, arg);
	return apply_defaults(L, sec->sect, section_base(L, L->sect, L->idx));
}

static int add_route(struct load *L, const char *dest, const char *via)
{
	struct cfg_route *nv;

	if (strcmp(dest, "default") != 0 && !semq_id_valid(dest)) {
		problem(&L->p, L->lineno,
			"[route] '%s': not 'default' or a node id (1-64 of "
			"A-Za-z0-9._-)",
			dest);
		return SEMQ_OK;
	}
	if (!*via) {
		problem(&L->p, L->lineno, "[route] %s: empty value", dest);
		return SEMQ_OK;
	}
	if (!semq_id_valid(via)) {
		problem(&L->p, L->lineno,
			"[route] %s: '%s' is not a peer name (1-64 of "
			"A-Za-z0-9._-)",
			dest, via);
		return SEMQ_OK;
	}
	nv = realloc(L->c->routes, (L->c->n_routes + 1) * sizeof(*nv));
	if (!nv)
		return SEMQ_ERR_NOMEM;
	L->c->routes = nv;
	nv = &nv[L->c->n_routes++];
	memset(nv, 0, sizeof(*nv));
	snprintf(nv->dest, sizeof(nv->dest), "%s", dest);
	snprintf(nv->via, sizeof(nv->via), "%s", via);
	nv->line = L->lineno;
	return SEMQ_OK;
}

static int add_option(struct load *L, const char *key, const char *value)
{
	struct cfg_plugin *pl = &L->c->plugins[L->idx];
	struct semq_plugin_option *nv, *o;
	char *k = strdup(key), *v = strdup(value), *w = NULL;

	if (!k || !v || asprintf(&w, "%s:%d", L->c->file, L->lineno) < 0)
		goto nomem;
	nv = realloc(pl->options, (pl->n_options + 1) * sizeof(*nv));
	if (!nv)
		goto nomem;
	pl->options = nv;
	o = &nv[pl->n_options++];
	o->key = k;
	o->value = v;
	o->where = w;
	return SEMQ_OK;
nomem:
	free(k);
	free(v);
	free(w);
	return SEMQ_ERR_NOMEM;
}

/* Handles one "key = value" of the current section. */
static int on_key(struct load *L, const char *name, const char *value)
{
	char why[MSG_MAX];
	const struct key *k;
	int first, r;

	if (L->sect == S_SKIP)
		return SEMQ_OK; /* its header was reported */
	if (L->sect == S_NONE) {
		problem(&L->p, L->lineno, "key '%s' outside any section", name);
		return SEMQ_OK;
	}
	if (!*name) {
		problem(&L->p, L->lineno, "empty key name in %s", L->label);
		return SEMQ_OK;
	}
	first = seen_line(L, L->sect_line, name);
	if (first) {
		problem(&L->p, L->lineno,
			"duplicate key '%s' in %s (first at line %d)", name,
			L->label, first);
		return SEMQ_OK;
	}
	r = seen_add(L, name);
	if (r != SEMQ_OK)
		return r;
	if (L->sect == S_ROUTE)
		return add_route(L, name, value);
	k = key_find(L->sect, name);
	if (!k) {
		if (L->sect == S_PLUGIN)
			return add_option(L, name, value);
		problem(&L->p, L->lineno, "unknown key '%s' in %s", name,
			L->label);
		return SEMQ_OK;
	}
	r = set_key(L, k, section_base(L, L->sect, L->idx), value, why,
		    sizeof(why));
	if (r == SEMQ_ERR_NOMEM)
		return r;
	if (r != 0)
		problem(&L->p, L->lineno, "%s %s: %s", L->label, name, why);
	return SEMQ_OK;
}

static int handler(void *user, const char *section, const char *name,
		   const char *value)
{
	struct load *L = user;

	(void)section; /* ours is in L: see DESIGN */
	if (on_key(L, name, value) == SEMQ_ERR_NOMEM)
		L->p.nomem = 1;
	return 1;
}

/* inih's find_chars_or_comment(): the first of `chars`, or the start of an
 * inline comment (';' after a blank), or the end of s. */
static char *find_chars_or_comment(char *s, const char *chars)
{
	int was_space = 0;

	while (*s && !(chars && strchr(chars, *s)) &&
	       !(was_space && *s == ';')) {
		was_space = *s == ' ' || *s == '\t' || *s == '\r' ||
			    *s == '\n' || *s == '\v' || *s == '\f';
		s++;
	}
	return s;
}

/* The ini_reader: one physical line per call (see DESIGN). */
static char *reader(char *str, int num, void *stream)
{
	struct load *L = stream;
	ssize_t got;
	size_t n;
	char *s, *e;

	errno = 0;
	got = getline(&L->buf, &L->bufsz, L->f);
	if (got < 0) {
		if (ferror(L->f))
			L->read_errno = errno ? errno : EIO;
		return NULL;
	}
	L->lineno++;
	str[0] = '\0';
	s = L->buf;
	if (memchr(s, '\0', (size_t)got)) {
		problem(&L->p, L->lineno, "%s", "NUL byte in line");
		return str;
	}
	if (L->lineno == 1 && (unsigned char)s[0] == 0xEF &&
	    (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
		s += 3;
	s += strspn(s, " \t\r\n\v\f");
	n = strlen(s);
	while (n && strchr(" \t\r\n\v\f", s[n - 1]))
		s[--n] = '\0';
	if (n == 0 || s[0] == ';' || s[0] == '#')
		return str;
	if (s[0] == '[') {
		char *rest;

		e = find_chars_or_comment(s + 1, "]");
		if (*e != ']') {
			problem(&L->p, L->lineno,
				"syntax error: no ']' to close the section "
				"header");
			L->sect = S_SKIP;
			return str;
		}
		*e = '\0';
		rest = e + 1 + strspn(e + 1, " \t");
		if (*rest && *rest != ';' && *rest != '#') {
			problem(&L->p, L->lineno,
				"syntax error: text after ']': '%s'", rest);
			L->sect = S_SKIP;
			return str;
		}
		if (open_section(L, s + 1) == SEMQ_ERR_NOMEM)
			L->p.nomem = 1;
		return str;
	}
	e = find_chars_or_comment(s, "=:");
	if (*e != '=' && *e != ':') {
		problem(&L->p, L->lineno, "%s",
			"syntax error: expected [section], key = value or a "
			"comment");
		return str;
	}
	if (num < 3 || n > (size_t)num - 3) {
		problem(&L->p, L->lineno,
			"line longer than %d characters (inih's limit)",
			num < 3 ? 0 : num - 3);
		return str;
	}
	memcpy(str, s, n + 1);
	return str;
}

/* ---- whole-file checks -------------------------------------------------- */

static void check_required(struct load *L, enum sect s, int sect_line,
			   const char *label)
{
	for (size_t i = 0; i < N_KEYS; i++) {
		if (keys[i].sect != s || !(keys[i].flags & K_REQUIRED))
			continue;
		if (sect_line && seen_line(L, sect_line, keys[i].name))
			continue;
		problem(&L->p, sect_line, "%s %s is required", label,
			keys[i].name);
	}
}

/*
 * The instance name of a semqd on a shared (PostgreSQL) database when
 * [node] instance is not set: "HOST-PID", the host name cut so that the
 * whole fits SEMQ_INSTANCE_MAX and any character outside the name's set
 * replaced by '-'. Unique among the processes of a host, and readable in a
 * relay's /peers.
 */
static void default_instance(char *out, size_t outsz)
{
	char host[256] = "";
	char pid[24];
	size_t hl, pl;

	if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
		snprintf(host, sizeof(host), "%s", "host");
	pl = (size_t)snprintf(pid, sizeof(pid), "-%ld", (long)getpid());
	hl = strlen(host);
	if (hl + pl > SEMQ_INSTANCE_MAX)
		hl = SEMQ_INSTANCE_MAX - pl;
	host[hl] = '\0';
	for (size_t i = 0; i < hl; i++) {
		char one[2] = {host[i], '\0'};
		if (!config_instance_valid(one))
			host[i] = '-';
	}
	/* hl + pl <= SEMQ_INSTANCE_MAX, the room of the caller's field: the
	 * precision says so to the compiler too */
	snprintf(out, outsz, "%.*s%s", (int)hl, host, pid);
}

/* [relay] relay_ack and require_connected: what they need of [node]. */
static void check_relay(struct load *L)
{
	const struct config *c = L->c;
	int rl = c->relay_line;
	int l = rl ? seen_line(L, rl, "require_connected") : 0;

	if (l && (!c->relay || c->store_and_forward))
		problem(&L->p, l,
			"[relay] require_connected: only for a forward-only "
			"relay (relay = yes, store_and_forward = no); a relay "
			"that stores keeps the messages of an absent "
			"destination instead of refusing its peers");
	for (size_t i = 0; l && i < c->n_relay_require; i++)
		if (c->id[0] && strcmp(c->relay_require[i], c->id) == 0)
			problem(&L->p, l,
				"[relay] require_connected: '%s' is this node "
				"itself",
				c->id);
	l = rl ? seen_line(L, rl, "relay_ack") : 0;
	if (l && !c->relay_ack && !c->relay)
		problem(&L->p, l,
			"[relay] relay_ack: only a relay (relay = yes) sends "
			"RelayAck");
}

/* Problems that involve several keys or sections. */
static void check_all(struct load *L)
{
	struct config *c = L->c;
	int nl = c->node_line, l;
	char label[SEMQ_ID_MAX + 16];

	check_required(L, S_NODE, nl, "[node]");
	for (size_t i = 0; i < c->n_plugins; i++) {
		snprintf(label, sizeof(label), "[plugin %s]",
			 c->plugins[i].name);
		check_required(L, S_PLUGIN, c->plugins[i].line, label);
	}

	/* Sizes: max_frame defaults to max_payload + 64KiB. */
	l = nl ? seen_line(L, nl, "max_frame") : 0;
	if (!l) {
		c->max_frame = c->max_payload + (size_t)MAX_FRAME_DEFAULT;
	} else if (c->max_frame < c->max_payload + (size_t)MAX_FRAME_SLACK) {
		problem(&L->p, l,
			"[node] max_frame: %zu is less than max_payload + 4KiB "
			"(%zu)",
			c->max_frame, c->max_payload + (size_t)MAX_FRAME_SLACK);
	}
	if (c->reconnect_min_ms > c->reconnect_max_ms) {
		l = nl ? seen_line(L, nl, "reconnect_max") : 0;
		if (!l && nl)
			l = seen_line(L, nl, "reconnect_min");
		problem(&L->p, l,
			"[node] reconnect_max: %lldms is less than "
			"reconnect_min (%lldms)",
			(long long)c->reconnect_max_ms,
			(long long)c->reconnect_min_ms);
	}
	if (c->idle_timeout_ms <= c->ping_interval_ms) {
		l = nl ? seen_line(L, nl, "idle_timeout") : 0;
		if (!l && nl)
			l = seen_line(L, nl, "ping_interval");
		problem(&L->p, l,
			"[node] idle_timeout: %lldms must be more than "
			"ping_interval (%lldms)",
			(long long)c->idle_timeout_ms,
			(long long)c->ping_interval_ms);
	}

	if (!(nl && seen_line(L, nl, "instance")) && c->db_url)
		default_instance(c->instance, sizeof(c->instance));
	for (size_t i = 0; i < c->n_peers; i++)
		if (c->id[0] && strcmp(c->peers[i].name, c->id) == 0)
			problem(&L->p, c->peers[i].line,
				"[peer %s]: a peer cannot have this node's own "
				"id",
				c->id);
	check_relay(L);
	for (size_t i = 0; i < c->n_routes; i++) {
		const struct cfg_route *r = &c->routes[i];

		if (c->id[0] && strcmp(r->dest, c->id) == 0)
			problem(&L->p, r->line,
				"[route] %s: a route to this node itself",
				r->dest);
		if (!config_peer(c, r->via))
			problem(&L->p, r->line,
				"[route] %s: no [peer %s] to route through",
				r->dest, r->via);
	}
}

/* ---- public ------------------------------------------------------------- */

int config_parse_duration(const char *s, int64_t *ms_out)
{
	int64_t ms;

	if (!ms_out || cv_duration(s, &ms) != SEMQ_OK)
		return SEMQ_ERR_INVALID;
	*ms_out = ms;
	return SEMQ_OK;
}

int config_parse_size(const char *s, size_t *out)
{
	size_t v;

	if (!out || cv_size(s, &v) != SEMQ_OK)
		return SEMQ_ERR_INVALID;
	*out = v;
	return SEMQ_OK;
}

int config_parse_addr(const char *s, struct cfg_addr *out)
{
	char why[MSG_MAX];
	struct cfg_addr a;

	if (!out || cv_addr(s, &a, why, sizeof(why)) != SEMQ_OK)
		return SEMQ_ERR_INVALID;
	*out = a;
	return SEMQ_OK;
}

unsigned config_workers(const struct config *c)
{
	long n;

	if (c->workers)
		return c->workers;
	if (!c->db_url)
		return 1;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 2 ? 2 : n > 64 ? 64 : (unsigned)n;
}

/* ---- reload: what differs ------------------------------------------------- */

static const char *section_name(enum sect sect)
{
	size_t i;

	for (i = 0; i < sizeof sections / sizeof sections[0]; i++)
		if (sections[i].sect == sect)
			return sections[i].name;
	return "?";
}

static int plugin_differs(const struct cfg_plugin *a,
			  const struct cfg_plugin *b)
{
	size_t i;

	if (str_differs(a->path, b->path) || a->all_types != b->all_types ||
	    a->n_types != b->n_types || a->deadline_ms != b->deadline_ms ||
	    a->n_options != b->n_options ||
	    (a->n_types &&
	     memcmp(a->types, b->types, a->n_types * sizeof *a->types)))
		return 1;
	for (i = 0; i < a->n_options; i++)
		if (strcmp(a->options[i].key, b->options[i].key) ||
		    strcmp(a->options[i].value, b->options[i].value))
			return 1;
	return 0;
}

void config_diff(const struct config *a, const struct config *b,
		 void (*fn)(void *ctx, const char *sect, const char *name,
			    const char *key),
		 void *ctx)
{
	size_t i, k;

	for (i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		const struct key *key = &keys[i];

		if (key->sect == S_PEER || key->sect == S_PLUGIN ||
		    key->sect == S_ROUTE || (key->flags & K_DOC))
			continue;
		if (ktypes[key->type].differs(key, (const char *)a,
					      (const char *)b))
			fn(ctx, section_name(key->sect), NULL, key->name);
	}
	for (i = 0; i < a->n_plugins; i++) {
		const struct cfg_plugin *pa = &a->plugins[i], *pb = NULL;

		for (k = 0; k < b->n_plugins && !pb; k++)
			if (!strcmp(b->plugins[k].name, pa->name))
				pb = &b->plugins[k];
		if (!pb || plugin_differs(pa, pb))
			fn(ctx, "plugin", pa->name, pb ? "changed" : "removed");
	}
	for (k = 0; k < b->n_plugins; k++) {
		for (i = 0; i < a->n_plugins; i++)
			if (!strcmp(b->plugins[k].name, a->plugins[i].name))
				break;
		if (i == a->n_plugins)
			fn(ctx, "plugin", b->plugins[k].name, "added");
	}
}

void config_free(struct config *c)
{
	if (!c)
		return;
	free(c->file);
	free(c->db);
	free(c->admin_token);
	free(c->log_file);
	free(c->tls_cert);
	free(c->tls_key);
	free(c->tls_ca);
	free(c->tls_crl);
	free(c->tls_deny);
	free(c->relay_require);
	free(c->peers);
	free(c->routes);
	for (size_t i = 0; i < c->n_plugins; i++) {
		struct cfg_plugin *p = &c->plugins[i];

		free(p->path);
		free(p->types);
		for (size_t j = 0; j < p->n_options; j++) {
			free((char *)p->options[j].key);
			free((char *)p->options[j].value);
			free((char *)p->options[j].where);
		}
		free(p->options);
	}
	free(c->plugins);
	free(c->redo_levels_ms);
	free(c);
}

const char *config_pick_path(const char *given, const char **how)
{
	const char *env = getenv("SEMQ_CONFIG");

	if (given) {
		*how = "-c";
		return given;
	}
	if (env && *env) {
		*how = "$SEMQ_CONFIG";
		return env;
	}
	*how = "the default: neither -c nor $SEMQ_CONFIG given";
	return SEMQ_CONFIG_DEFAULT;
}

int config_file_exists(const char *path, const char *how, char *err,
		       size_t errsz)
{
	struct stat st;

	if (stat(path, &st) == 0 || errno != ENOENT)
		return SEMQ_OK;
	snprintf(err, errsz, "configuration file %s (%s) does not exist", path,
		 how);
	return SEMQ_ERR_NOT_FOUND;
}

int config_load(const char *path, struct config **out, char **errs_out)
{
	struct load L;
	const char *slash;
	char *errs = NULL;
	int r = SEMQ_ERR_INTERNAL, ir;

	memset(&L, 0, sizeof(L));
	if (out)
		*out = NULL;
	if (errs_out)
		*errs_out = NULL;
	if (!path || !*path || !out)
		return SEMQ_ERR_INVALID;
	L.p.file = path;
	L.c = calloc(1, sizeof(*L.c));
	if (!L.c) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	L.c->file = strdup(path);
	slash = strrchr(path, '/');
	/* "b1.ini" is in "." as much as "./b1.ini": a relative path in it
	 * becomes "./x", which dlopen() takes as a file, not as a name to
	 * look up in the library path. */
	L.dir = slash ? strndup(path,
				slash == path ? 1 : (size_t)(slash - path))
		      : strdup(".");
	if (!L.c->file || !L.dir) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	L.f = fopen(path, "r");
	if (!L.f) {
		problem(&L.p, 0, "cannot open: %s", strerror(errno));
		r = SEMQ_ERR_IO;
		goto out;
	}
	r = apply_defaults(&L, S_NODE, L.c);
	if (r == SEMQ_OK)
		r = apply_defaults(&L, S_REDO, L.c);
	if (r == SEMQ_OK)
		r = apply_defaults(&L, S_RELAY, L.c);
	if (r != SEMQ_OK)
		goto out;

	ir = ini_parse_stream(reader, &L, handler, &L);
	if (L.read_errno) {
		problem(&L.p, 0, "read error: %s", strerror(L.read_errno));
		r = SEMQ_ERR_IO;
		goto out;
	}
	if (ir == -2 || L.p.nomem) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	if (ir > 0 && !has_problem_at(&L.p, ir))
		problem(&L.p, ir, "%s", "syntax error");
	check_all(&L);
	if (L.p.nomem) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	if (L.p.n) {
		r = SEMQ_ERR_CONFIG;
		goto out;
	}
	*out = L.c;
	L.c = NULL;
	r = SEMQ_OK;
out:
	if (L.p.n && errs_out && problems_append(&L.p, &errs) == SEMQ_OK) {
		*errs_out = errs;
		errs = NULL;
	}
	free(errs);
	problems_free(&L.p);
	for (size_t i = 0; i < L.n_seen; i++)
		free(L.seen[i].key);
	free(L.seen);
	free(L.buf);
	free(L.dir);
	if (L.f)
		fclose(L.f);
	config_free(L.c);
	return r;
}

const struct cfg_peer *config_peer(const struct config *c, const char *name)
{
	if (!c || !name)
		return NULL;
	for (size_t i = 0; i < c->n_peers; i++)
		if (strcmp(c->peers[i].name, name) == 0)
			return &c->peers[i];
	return NULL;
}

int config_check_daemon(const struct config *c, char **errs_out)
{
	struct problems p;
	int r = SEMQ_ERR_INTERNAL;

	memset(&p, 0, sizeof(p));
	if (!c)
		return SEMQ_ERR_INVALID;
	p.file = c->file ? c->file : "node.ini";
	if (c->listen.set || c->n_peers || c->tls_cert || c->tls_key ||
	    c->tls_ca) {
		const char *why = c->listen.set ? "[node] listen is set"
				  : c->n_peers  ? "there are [peer] sections"
						: "[tls] is partly set";
		if (!c->tls_cert)
			problem(&p, c->tls_line, "[tls] cert is required: %s",
				why);
		if (!c->tls_key)
			problem(&p, c->tls_line, "[tls] key is required: %s",
				why);
		if (!c->tls_ca)
			problem(&p, c->tls_line, "[tls] ca is required: %s",
				why);
	}
	if (!c->listen.set && !c->n_peers && !c->n_plugins)
		problem(&p, c->node_line, "%s",
			"[node] has no listen, no [peer] and no [plugin]: "
			"semqd would have nothing to do");
	if (c->listen.set && c->allow_listed && !c->n_peers)
		problem(&p, c->node_line, "%s",
			"[node] allow = listed, listen is set and there is no "
			"[peer] section: every peer that connects would be "
			"refused; list them ([peer ID]) or set allow = any");
	for (size_t i = 0; i < c->n_routes; i++)
		if (!config_peer(c, c->routes[i].via))
			problem(&p, c->routes[i].line,
				"[route] %s: no [peer %s] to route through",
				c->routes[i].dest, c->routes[i].via);
	if (p.nomem) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	r = p.n ? SEMQ_ERR_CONFIG : SEMQ_OK;
	if (p.n && errs_out && problems_append(&p, errs_out) != SEMQ_OK)
		r = SEMQ_ERR_NOMEM;
out:
	problems_free(&p);
	return r;
}

static const char *type_text(const struct key *k, char *buf, size_t sz)
{
	const struct ktype_ops *t = &ktypes[k->type];

	return t->text ? t->text(k, buf, sz) : t->name;
}

/* Writes `text` then `tail` as words, wrapped at 79 columns, each line
 * indented by `indent` spaces. */
static void put_wrapped(FILE *f, int indent, const char *text, const char *tail)
{
	const char *parts[2] = {text, tail};
	int col = 0;

	for (int i = 0; i < 2; i++) {
		const char *p = parts[i];

		while (*p) {
			size_t w;

			p += strspn(p, " ");
			w = strcspn(p, " ");
			if (!w)
				break;
			if (col && col + 1 + (int)w > 79) {
				fputc('\n', f);
				col = 0;
			}
			if (!col)
				col = fprintf(f, "%*s", indent, "");
			else
				col += fprintf(f, "%s", " ");
			col += fprintf(f, "%.*s", (int)w, p);
			p += w;
		}
	}
	fputc('\n', f);
}

/* What a key is when left out: "required", "default 30s", "optional"... */
static const char *key_default(const struct key *k, char *buf, size_t sz)
{
	if (k->flags & K_REQUIRED)
		return "required";
	if (k->def) {
		snprintf(buf, sz, "default %s", k->def);
		return buf;
	}
	if (k->sect == S_NODE && strcmp(k->name, "max_frame") == 0)
		return "default max_payload + 64KiB";
	if (k->sect == S_NODE && strcmp(k->name, "instance") == 0)
		return "default none, or HOST-PID with a URL db";
	return "optional";
}

void config_describe(FILE *f)
{
	char tb[128], db[160];

	fprintf(f, "%s",
		"node.ini reference (SEMQ). Durations: 250ms, 5s, 1m, 6h, 2d; "
		"a bare number is\n"
		"seconds. Sizes: 1000 (bytes), 64KiB or 64K, 16MiB or 16M, "
		"1GiB or 1G.\n"
		"Relative paths are resolved against the directory of this "
		"file. Comments\n"
		"start with ';' or '#' at the start of a line, or ' ;' after "
		"a value.\n");
	for (size_t s = 0; s < N_SECTIONS; s++) {
		const struct section *sec = &sections[s];

		fprintf(f, "\n[%s%s]\n", sec->name, sec->named ? " NAME" : "");
		put_wrapped(f, 4, sec->doc, "");
		for (size_t i = 0; i < N_KEYS; i++) {
			const struct key *k = &keys[i];

			if (k->sect != sec->sect)
				continue;
			fprintf(f, "  %s = <%s>", k->name,
				type_text(k, tb, sizeof(tb)));
			fprintf(f, "  (%s)", key_default(k, db, sizeof(db)));
			fputc('\n', f);
			put_wrapped(f, 6, k->doc,
				    (k->flags & K_EXISTS) ? "Must exist." : "");
		}
	}
}

/* `s` as roff text: backslashes and hyphens escaped, a leading '.' or '\''
 * kept from being read as a request. */
static void roff_text(FILE *f, const char *s)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", f);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\e", f);
		else if (*s == '-')
			fputs("\\-", f);
		else
			fputc(*s, f);
	}
}

void config_describe_man(FILE *f, const char *version, const char *date)
{
	char tb[128], db[160];

	fprintf(f,
		".TH SEMQ.INI 5 \"%s\" \"semq %s\" \"File Formats Manual\"\n"
		".SH NAME\n"
		"semq.ini \\- configuration file of a SEMQ node (node.ini)\n"
		".SH SYNOPSIS\n"
		"/etc/semq/node.ini\n"
		".SH DESCRIPTION\n"
		"The configuration of one SEMQ node, read by \\fBsemqd\\fR(8) "
		"and \\fBsemqctl\\fR(8): \\fB\\-c\\fR \\fIFILE\\fR, else "
		"\\fB$SEMQ_CONFIG\\fR, else \\fI/etc/semq/node.ini\\fR.\n"
		".PP\n"
		"Syntax: \\fB[section]\\fR, \\fIkey\\fR = \\fIvalue\\fR; "
		"comments start with ';' or '#' at the start of a line, or ' "
		";' "
		"after a value. Durations: 250ms, 5s, 1m, 6h, 2d; a bare "
		"number "
		"is seconds. Sizes: 1000 (bytes), 64KiB or 64K, 16MiB or 16M, "
		"1GiB or 1G. Relative paths are resolved against the directory "
		"of the file. Every problem is reported as FILE:LINE: message; "
		"\\fBsemqd \\-\\-check\\fR checks a file.\n"
		".PP\n"
		"This page is generated from the key table of semqd "
		"(\\fBsemqd \\-\\-config\\-reference\\fR).\n",
		date, version);
	for (size_t s = 0; s < N_SECTIONS; s++) {
		const struct section *sec = &sections[s];

		fprintf(f, ".SH [%s%s]\n", sec->name,
			sec->named ? " NAME" : "");
		roff_text(f, sec->doc);
		fputc('\n', f);
		for (size_t i = 0; i < N_KEYS; i++) {
			const struct key *k = &keys[i];

			if (k->sect != sec->sect)
				continue;
			fputs(".TP\n\\fB", f);
			roff_text(f, k->name);
			fputs("\\fR = \\fI", f);
			roff_text(f, type_text(k, tb, sizeof(tb)));
			fputs("\\fR (", f);
			roff_text(f, key_default(k, db, sizeof(db)));
			fputs(")\n", f);
			roff_text(f, k->doc);
			if (k->flags & K_EXISTS)
				fputs(" Must exist.", f);
			fputc('\n', f);
		}
	}
	fputs(".SH SEE ALSO\n"
	      "\\fBsemqd\\fR(8), \\fBsemqctl\\fR(8); the sample "
	      "/usr/share/doc/semq/node.ini.sample and CONFIG.md beside it.\n",
	      f);
}
