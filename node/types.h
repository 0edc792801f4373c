/* SPDX-License-Identifier: MIT */
/*
 * Plain data types shared by the node's modules (store, protocol, plugin
 * host, semqctl). Only structs, enums and limits live here, so that any
 * header can include this one without pulling in another module.
 */
#ifndef SEMQ_TYPES_H
#define SEMQ_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include <semq/semq.h>

#define SEMQ_KEY_MAX 255 /* bytes of a message key */
#define SEMQ_ERRLEN 256  /* size of the err buffers passed around */

/* tb_0031.status */
enum out_status {
	SS_UNSEND = 0,
	SS_SEND = 4,
	SS_ACK = 6,
	SS_HELD = 8, /* held for the operator: the destination cannot tell
			whether it has this message, or a relay does not
			know the destination (docs/PROTOCOL.md) */
	SS_ACK2 = 100,
	SS_CANCELLED = -2
};

/*
 * tb_0031.result, tb_0030.result and the wire's Result (same numbers, 0..4).
 * The others are answers of wire revision 2 that travel as flags beside a
 * wire Result (Verdict.dead with REDO; Verdict.refusal with DUPLICATE):
 * RES_DEAD is kept in tb_0031.result (the destination's redo entry is
 * dead), RES_UNDECIDED and RES_UNDELIVERABLE in a held row's result; a
 * conflict is never stored
 * (the row is renumbered).
 */
enum msg_result {
	RES_PROCESSED = 0,
	RES_REDO = 1,
	RES_DUPLICATE = 2,
	RES_SCHEDULED = 3,
	RES_CANCELLED = 4,
	RES_DEAD = 5,
	RES_CONFLICT = 6,
	RES_UNDECIDED = 7,
	RES_UNDELIVERABLE = 8 /* a held row's result: no relay knows its
				 destination ([relay] unknown_dest_after) */
};

/* Lives of a node (docs/PROTOCOL.md): a database's random 64-bit id; the
 * legacy life of streams begun by SEMQ 0.1.0; 0 = not given on the wire. */
#define SEMQ_LIFE_NONE 0u
#define SEMQ_LIFE_LEGACY 1u
/* "0123456789abcdef": a life as listings show it (buf >= 17 bytes). */
#define SEMQ_LIFE_STRLEN 17
const char *semq_life_str(uint64_t life, char *buf, size_t bufsz);
/* Parses 1..16 hex digits; -1 when it is not a life (0 is not one). */
int semq_life_parse(const char *s, uint64_t *life);

/* tb_0030.ack_status and confirm bits */
enum { AS_INIT = 0, AS_OK = 1 };
enum { CONFIRM_ORIGIN = 1, CONFIRM_RELAY = 2 };

/* tb_0033.status */
enum redo_status {
	RS_PENDING = 0,
	RS_WAITING = 1,
	RS_DONE = 2,
	RS_DEAD = -1,
	RS_DISCARDED = -2
};

/*
 * The id of a message everywhere: origin/dest/seq, in the origin's life
 * (its text form leaves the life out). `digest` rides along where an
 * answer depends on which message has that id (queries, refusals): 0 =
 * unknown. Two ids are the same message id when origin, dest, seq and life
 * are equal; the digest is not part of the identity.
 */
struct msgid {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
	uint64_t seq;
	uint64_t life;   /* 0 = not given (a revision-1 peer): proto resolves */
	uint64_t digest; /* semq_msg_digest() of the message; 0 = unknown */
};

/*
 * One message. Strings are inline; the payload is owned by the struct when it
 * comes out of the store (free it with msg_clear()), borrowed when a caller
 * fills one in to pass it to the store.
 */
struct msg {
	struct msgid id;
	uint32_t type;
	int has_key;
	char key[SEMQ_KEY_MAX + 1];
	uint64_t prev_seq;
	int64_t deliver_at; /* 0 = at once */
	int64_t created_at;
	uint8_t *payload;
	size_t payload_len;
	int tombstone;                   /* cancelled by the origin */
	char stored_by[SEMQ_ID_MAX + 1]; /* relay holding a copy, or "" */
	uint64_t prev_digest; /* digest of the prev_seq message; 0 = unknown */
	unsigned hops;        /* relays it has passed (Message.hops) */
};
#define SEMQ_HOPS_MAX 255 /* Message.hops, at most */

/*
 * The digest of a message's content: the first 64 bits of SHA-256 over
 * type, key, deliver_at, created_at and payload (not its id, nor whether it
 * is a tombstone: a renumbered message and its cancel keep it). Never 0 (0
 * means "unknown" everywhere). docs/PROTOCOL.md, "The digest".
 */
uint64_t semq_msg_digest(const struct msg *m);
/*
 * The digest of a filler: the cancel of nothing that an origin sends under a
 * seq it gave up when it renumbered (docs/PROTOCOL.md, "What the origin
 * does"). SHA-256 over another tag and the id (origin, dest, life, seq), so
 * it names that id alone and no message's content. Never 0.
 */
uint64_t semq_filler_digest(const struct msgid *id);

/* Frees m->payload and zeroes m. Accepts NULL. */
void msg_clear(struct msg *m);

/* Formats "origin/dest/seq" into buf (at least 2*64+24 bytes); returns buf. */
#define MSGID_STRLEN (2 * SEMQ_ID_MAX + 24)
const char *msgid_str(const struct msgid *id, char *buf, size_t bufsz);

/* Standard base64 (RFC 4648, padded) of p[0..n). Caller frees; NULL on
 * ENOMEM. */
char *base64_encode(const uint8_t *p, size_t n);

/* A database target as it may be shown in logs, errors and listings: a
 * postgresql:// URL with its password (`user:PASSWORD@` and `password=`)
 * replaced by "***"; a file path unchanged. Always NUL-terminated. */
void semq_db_shown(const char *target, char *out, size_t outsz);

/* The length of the UTF-8 character at p (n bytes left), 0 when it is not
 * one: strict, as jansson and PostgreSQL check it (no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
size_t semq_utf8_char(const uint8_t *p, size_t n);
/* Are the n bytes at p UTF-8? */
int semq_utf8_valid(const uint8_t *p, size_t n);

/* Every status of each table, in the order listings and reports show them
 * (the one list semqctl, the admin reports and the dashboard read). */
#define SEMQ_N_OUT_STATUS 6
extern const int semq_out_statuses[SEMQ_N_OUT_STATUS];
#define SEMQ_N_IN_STATUS 2
extern const int semq_in_statuses[SEMQ_N_IN_STATUS];
#define SEMQ_N_REDO_STATUS 5
extern const int semq_redo_statuses[SEMQ_N_REDO_STATUS];

/*
 * The redo policy (SPEC §7), its one home: the backoff levels and max_tries
 * a node uses unless its [redo] section says otherwise, how long a
 * retryable failure waits, and when a failure makes an entry dead. The
 * store applies it, config's key table takes its defaults from here (the
 * text and the numbers below say the same levels: test_config checks it),
 * semqctl shows it.
 */
#define SEMQ_REDO_LEVELS_TEXT "5s,30s,1m,10m,30m,1h,6h,1d,2d"
#define SEMQ_REDO_N_LEVELS 9
extern const int64_t semq_redo_levels[SEMQ_REDO_N_LEVELS]; /* ms */
#define SEMQ_REDO_MAX_TRIES 9
/* The wait after a retryable failure of an entry at `level` (0 for the
 * first failure) under levels[0..n), n >= 1: levels[level], and the last
 * level for every level beyond them; a negative level counts as 0. */
int64_t semq_redo_delay(const int64_t *levels, size_t n, int level);
/* Does a retryable failure make an entry dead, when its attempts, this one
 * counted, are `tries`? (A permanent failure always does.) */
int semq_redo_gives_up(unsigned tries, unsigned max_tries);

/* Formats an error text into err[errsz] (nothing when err is NULL or errsz
 * 0): the one helper every module with an `err, errsz` out parameter uses.
 * semq_fail does the same and returns `code`, for `return semq_fail(...)`. */
void semq_errf(char *err, size_t errsz, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int semq_fail(char *err, size_t errsz, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The name of a verdict (enum msg_result): "processed", "redo",
 * "duplicate", "scheduled", "cancelled", "dead", "conflict", "undecided";
 * "-" for none (-1), "unknown" for another value. */
const char *semq_result_name(int result);

/* The name semqctl and the admin reports give status `status` of `table`
 * ("tb_0031", "tb_0030" — its ack_status —, "tb_0033"): "unsent",
 * "confirmed", "dead", ...; "unknown" for a value outside the table's. */
const char *semq_status_name(const char *table, int status);
/* The statuses of `table` ("tb_0031", "tb_0030", "tb_0033") in *v, in the
 * order of semq_out_statuses, semq_in_statuses, semq_redo_statuses
 * (borrowed, static); how many, 0 for another table. */
size_t semq_statuses(const char *table, const int **v);
/* The statuses of `table` for a message naming what is accepted, in that
 * order: their names ("pending, waiting, done, dead, discarded"), or with
 * `numbers` their numbers ("0, 1, 2, -1, -2"). Returns buf, cut short to
 * bufsz like snprintf. */
const char *semq_status_list(const char *table, int numbers, char *buf,
			     size_t bufsz);
/* What human output calls `table`: "outbound" (tb_0031), "received"
 * (tb_0030), "redo" (tb_0033); the table name itself for another. Table
 * names stay in --json fields and the docs. */
const char *semq_table_title(const char *table);

/*
 * WHEN of the listings' --since and since= filters: a duration back from
 * `now` ("90s", "15m", "2h", "3d": digits and one unit s, m, h or d) or an
 * RFC 3339 UTC time ("2026-11-26T03:00:00Z", optionally with .fff
 * fractions); with `unix_ms` also a number of unix milliseconds (HTTP).
 * *out gets the time in unix ms. 0, or -1 when s is none of these (the
 * caller names the option).
 */
int semq_when_parse(const char *s, int64_t now, int unix_ms, int64_t *out);
#define SEMQ_WHEN_FORMS                                                        \
	"a duration back from now (90s, 15m, 2h, 3d) or an RFC 3339 UTC "      \
	"time (2026-11-26T03:00:00Z)"

/*
 * The --where expression of the bulk redo verbs (and where=): `error~TEXT`
 * (last_error contains TEXT, ASCII letters compared case-insensitively) or
 * `error=TEXT` (last_error is exactly TEXT); TEXT is 1..255 bytes.
 */
#define SEMQ_WHERE_MAX 255
struct semq_where {
	int exact;                     /* error=TEXT */
	char text[SEMQ_WHERE_MAX + 1]; /* TEXT */
};
/* 0, or -1 when s is not an expression of that grammar. */
int semq_where_parse(const char *s, struct semq_where *w);
#define SEMQ_WHERE_FORMS                                                       \
	"error~TEXT (last_error contains TEXT, any case) or error=TEXT "       \
	"(last_error is TEXT)"

#endif
