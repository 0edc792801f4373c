/* SPDX-License-Identifier: MIT */
/*
 * The wire codec: turns bytes from a peer into validated semq.Frame structs
 * and frames into bytes (proto/semq.proto, see codec.h).
 *
 * This is the edge where everything a peer sends enters the node, so every
 * field is checked here, once: node ids, sequence numbers, string lengths,
 * list sizes and enum values (proto3 decodes an unknown enum number as a
 * plain int, and an unknown oneof body as "no body"), and no string may hold
 * a NUL byte (protobuf-c would silently cut it there). Error messages name the
 * field by its path in the frame, e.g.
 * "Data.messages[3].origin: 'a b' is not a node id".
 *
 * DESIGN (the incremental reader)
 *   The reader keeps one byte buffer buf[0..cap) with the unread bytes in
 *   buf[start..end). Invariants:
 *   - start <= end <= cap; when the buffer runs empty, start = end = 0.
 *   - Appending compacts first (moves buf[start..end) to the front) and only
 *     then grows, to max(end + len, min(2 * cap, max_frame + CODEC_HDR)): a
 *     reader drained after every feed never holds more than one frame with
 *     its header plus one read's worth of bytes.
 *   - A frame's header is checked as soon as its 4 bytes are there, so an
 *     oversized frame is refused before its body is buffered.
 *   - After a bad frame the reader is poisoned: its bytes are dropped, later
 *     feeds are discarded, and next() returns the same error and message
 *     forever. The connection must close; nothing after a bad frame is
 *     trusted.
 *
 * DESIGN (decoding memory)
 *   protobuf-c allocates every message, string and list of a frame while it
 *   unpacks, before any limit of ours is checked: 1,000,000 empty Messages
 *   are 2 MB on the wire and 200 MB unpacked. Frames are therefore unpacked
 *   with an allocator that counts, and refuses to go past UNPACK_FACTOR
 *   times the frame's size plus UNPACK_SLACK (a legitimate frame takes at
 *   most about eight times its size); a frame over it does not decode. Each
 *   block carries its size in a header, so that frames are freed with the
 *   same allocator whichever thread frees them (codec_frame_free).
 */
#include "codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <semq/error.h>

#include "config.h" /* config_instance_valid() */

#define LIST_MAX 65536   /* ids, verdicts, answers in one frame */
#define DATA_MAX 10000   /* messages in one Data frame */
#define TEXT_MAX 1024    /* RelayAck.detail, Error.text */
#define SOFTWARE_MAX 64  /* Hello.software */
#define STREAMS_MAX 4096 /* StreamQuery.dests, StreamState.streams */
#define HELLO_MIN_FRAME 1024
#define READER_KEEP 65536 /* an idle reader keeps a buffer up to this size */
#define QUOTE_MAX 72      /* bytes of a bad value shown in a message */
#define PATH_MAX_LEN 96   /* "AckIndication.verdicts[65535].id" and such */
#define UNPACK_FACTOR 16
#define UNPACK_SLACK (1024 * 1024)
#define BLOCK_HDR 16 /* size_t, aligned like malloc */

/* What one unpack may still allocate (see DESIGN). */
struct unpack_budget {
	size_t left;
	int refused; /* an allocation went over it */
};

static void *budget_alloc(void *data, size_t size)
{
	struct unpack_budget *b = data;
	unsigned char *p;

	if (b && (size > b->left || b->left - size < BLOCK_HDR)) {
		b->refused = 1;
		return NULL;
	}
	p = malloc(size + BLOCK_HDR);
	if (!p)
		return NULL;
	if (b)
		b->left -= size + BLOCK_HDR;
	memcpy(p, &size, sizeof size);
	return p + BLOCK_HDR;
}

static void budget_free(void *data, void *ptr)
{
	(void)data;
	if (ptr)
		free((unsigned char *)ptr - BLOCK_HDR);
}

/* Frees what budget_alloc() made, from any thread. */
static ProtobufCAllocator frame_allocator = {budget_alloc, budget_free, NULL};

/*
 * Writes `s` quoted for a one-line message into buf: printable ASCII as is,
 * other bytes as \xNN, cut after QUOTE_MAX bytes with "...". Returns buf.
 */
static const char *quote(const char *s, char *buf, size_t bufsz)
{
	size_t i, o = 0;

	if (!s) {
		snprintf(buf, bufsz, "(null)");
		return buf;
	}
	if (bufsz < 8) {
		buf[0] = '\0';
		return buf;
	}
	buf[o++] = '\'';
	for (i = 0; s[i] && o + 8 < bufsz; i++) {
		unsigned char c = (unsigned char)s[i];

		if (i >= QUOTE_MAX) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
			buf[o++] = (char)c;
		} else {
			snprintf(buf + o, bufsz - o, "\\x%02x", c);
			o += 4;
		}
	}
	buf[o++] = '\'';
	buf[o] = '\0';
	return buf;
}

/* ---- field checks ---------------------------------------------------------
 * Each takes the path of the field (e.g. "Data.messages[3].origin") and
 * returns SEMQ_OK or SEMQ_ERR_PROTO with err naming it.
 */

static int check_id(const char *path, const char *v, char *err, size_t errsz)
{
	char q[4 * QUOTE_MAX + 16];

	if (!v)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s: missing",
				 path);
	if (!semq_id_valid(v))
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"%s: %s is not a node id (1-64 of A-Za-z0-9._-)", path,
			quote(v, q, sizeof q));
	return SEMQ_OK;
}

/* A string that may be empty, at most `max` bytes. */
static int check_text(const char *path, const char *v, size_t max, char *err,
		      size_t errsz)
{
	size_t n;

	if (!v)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s: missing",
				 path);
	n = strnlen(v, max + 1);
	if (n > max)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s: %zu bytes, more than %zu", path,
				 strlen(v), max);
	return SEMQ_OK;
}

/* A repeated field: 1..max entries, the array present. */
/* Printable ASCII only (what a log line may show as it is). */
static int printable(const char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

static int check_count(const char *path, size_t n, const void *arr, size_t max,
		       char *err, size_t errsz)
{
	if (n == 0)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s: empty (1..%zu entries)", path, max);
	if (n > max)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s: %zu entries, more than %zu", path, n,
				 max);
	if (!arr)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s: %zu entries but no array", path, n);
	return SEMQ_OK;
}

static int check_msgid(const char *path, const Semq__MsgId *id, char *err,
		       size_t errsz)
{
	char p[PATH_MAX_LEN + 16];
	int r;

	if (!id)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s: missing",
				 path);
	snprintf(p, sizeof p, "%s.origin", path);
	if ((r = check_id(p, id->origin, err, errsz)))
		return r;
	snprintf(p, sizeof p, "%s.dest", path);
	if ((r = check_id(p, id->dest, err, errsz)))
		return r;
	if (id->seq == 0 || id->seq > (uint64_t)INT64_MAX)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.seq: %llu (must be 1..2^63-1)", path,
				 (unsigned long long)id->seq);
	return SEMQ_OK;
}

static int result_known(int v)
{
	return v >= SEMQ__RESULT__RESULT_PROCESSED &&
	       v <= SEMQ__RESULT__RESULT_CANCELLED;
}

/*
 * A verdict's revision-2 flags beside its result: a refusal comes with
 * DUPLICATE (what it says to a revision-1 node: nothing, it never sees one)
 * and no `dead`; `dead` comes with REDO. SEMQ_OK or SEMQ_ERR_PROTO naming
 * `path`.
 */
static int check_flags(const char *path, int result, int refusal, int dead,
		       char *err, size_t errsz)
{
	if (refusal < SEMQ__REFUSAL__REFUSAL_NONE ||
	    refusal > SEMQ__REFUSAL__REFUSAL_UNDECIDED)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.refusal: %d is not a known refusal", path,
				 refusal);
	if (refusal && result != SEMQ__RESULT__RESULT_DUPLICATE)
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"%s.refusal: %d with result %d (a refusal comes "
			"with DUPLICATE)",
			path, refusal, result);
	if (dead && result != SEMQ__RESULT__RESULT_REDO)
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"%s.dead with result %d (dead comes with REDO)", path,
			result);
	return SEMQ_OK;
}

/* ---- bodies ------------------------------------------------------------- */

static int check_hello(const Semq__Hello *h, char *err, size_t errsz)
{
	int r;

	if ((r = check_id("Hello.node_id", h->node_id, err, errsz)))
		return r;
	if (h->protocol_version < 1)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "Hello.protocol_version: %u (must be >= 1)",
				 (unsigned)h->protocol_version);
	if ((int)h->role != SEMQ__ROLE__ROLE_EDGE &&
	    (int)h->role != SEMQ__ROLE__ROLE_RELAY &&
	    (int)h->role != SEMQ__ROLE__ROLE_SERVER)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "Hello.role: %d is not EDGE, RELAY or SERVER",
				 (int)h->role);
	if (h->max_frame < HELLO_MIN_FRAME)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "Hello.max_frame: %u (must be >= %d)",
				 (unsigned)h->max_frame, HELLO_MIN_FRAME);
	if (!h->instance)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "Hello.instance: missing");
	if (!config_instance_valid(h->instance)) {
		char q[4 * QUOTE_MAX + 16];
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "Hello.instance: %s is not an instance name "
				 "(0-%d of A-Za-z0-9._:-)",
				 quote(h->instance, q, sizeof q),
				 SEMQ_INSTANCE_MAX);
	}
	/* Revision 2: the software's name is shown in logs and listings. */
	if ((r = check_text("Hello.software", h->software, SOFTWARE_MAX, err,
			    errsz)))
		return r;
	if (!printable(h->software))
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "Hello.software: not printable ASCII");
	return SEMQ_OK;
}

static int check_message(const char *path, const Semq__Message *m, char *err,
			 size_t errsz)
{
	char p[PATH_MAX_LEN + 16];
	int r;

	if (!m)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s: missing",
				 path);
	snprintf(p, sizeof p, "%s.origin", path);
	if ((r = check_id(p, m->origin, err, errsz)))
		return r;
	snprintf(p, sizeof p, "%s.dest", path);
	if ((r = check_id(p, m->dest, err, errsz)))
		return r;
	/* Every store keeps a seq as a signed 64-bit integer. */
	if (m->seq == 0 || m->seq > (uint64_t)INT64_MAX)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.seq: %llu (must be 1..2^63-1)", path,
				 (unsigned long long)m->seq);
	if (m->prev_seq >= m->seq)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.prev_seq: %llu is not below seq %llu",
				 path, (unsigned long long)m->prev_seq,
				 (unsigned long long)m->seq);
	if (m->hops > SEMQ_HOPS_MAX)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.hops: %u (at most %d)", path, m->hops,
				 SEMQ_HOPS_MAX);
	snprintf(p, sizeof p, "%s.key", path);
	if ((r = check_text(p, m->key, SEMQ_KEY_MAX, err, errsz)))
		return r;
	/* A key is compared for equality only, but it is text everywhere
	 * (protobuf string, JSON listings, a PostgreSQL TEXT column). */
	if (!semq_utf8_valid((const uint8_t *)m->key, strlen(m->key)))
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s: not UTF-8 text", p);
	/* prev_seq names the previous message of the same key; a message
	 * without a key has none. Taken at its word, it would be ordered
	 * after a message that orders nothing (found by fuzz_proto: such a
	 * message took effect before its "predecessor"). */
	if (m->prev_seq && !m->key[0])
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"%s.prev_seq: %llu, but the message has no key "
			"(prev_seq is the previous message of the same key)",
			path, (unsigned long long)m->prev_seq);
	if (m->deliver_at < 0)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.deliver_at: %lld is negative", path,
				 (long long)m->deliver_at);
	if (m->created_at < 0)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.created_at: %lld is negative", path,
				 (long long)m->created_at);
	if (m->payload.len && !m->payload.data)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.payload: %zu bytes but no data", path,
				 m->payload.len);
	snprintf(p, sizeof p, "%s.stored_by", path);
	if (!m->stored_by)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s: missing", p);
	if (m->stored_by[0] && (r = check_id(p, m->stored_by, err, errsz)))
		return r;
	return SEMQ_OK;
}

static int check_data(const Semq__Data *d, char *err, size_t errsz)
{
	char p[PATH_MAX_LEN];
	size_t i;
	int r;

	if ((r = check_count("Data.messages", d->n_messages, d->messages,
			     DATA_MAX, err, errsz)))
		return r;
	for (i = 0; i < d->n_messages; i++) {
		snprintf(p, sizeof p, "Data.messages[%zu]", i);
		if ((r = check_message(p, d->messages[i], err, errsz)))
			return r;
	}
	return SEMQ_OK;
}

/* ids[0..n) of RelayAck, AckResponse or Query; `path` is e.g. "Query.ids". */
static int check_ids(const char *path, size_t n, Semq__MsgId *const *ids,
		     char *err, size_t errsz)
{
	char p[PATH_MAX_LEN];
	size_t i;
	int r;

	if ((r = check_count(path, n, ids, LIST_MAX, err, errsz)))
		return r;
	for (i = 0; i < n; i++) {
		snprintf(p, sizeof p, "%s[%zu]", path, i);
		if ((r = check_msgid(p, ids[i], err, errsz)))
			return r;
	}
	return SEMQ_OK;
}

static int check_relay_ack(const Semq__RelayAck *a, char *err, size_t errsz)
{
	int r;

	if ((r = check_ids("RelayAck.ids", a->n_ids, a->ids, err, errsz)))
		return r;
	if ((int)a->kind != SEMQ__RELAY_ACK__KIND__FORWARDED &&
	    (int)a->kind != SEMQ__RELAY_ACK__KIND__STORED &&
	    (int)a->kind != SEMQ__RELAY_ACK__KIND__UNREACHABLE)
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"RelayAck.kind: %d is not FORWARDED, STORED or "
			"UNREACHABLE",
			(int)a->kind);
	if ((int)a->reason < SEMQ__RELAY_REFUSAL__RELAY_REFUSAL_NONE ||
	    (int)a->reason > SEMQ__RELAY_REFUSAL__LOOP)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "RelayAck.reason: %d is not a known reason",
				 (int)a->reason);
	if (a->reason && a->kind != SEMQ__RELAY_ACK__KIND__UNREACHABLE)
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"RelayAck.reason: %d with kind %d (a reason comes "
			"only with UNREACHABLE)",
			(int)a->reason, (int)a->kind);
	if (a->about_query && a->kind == SEMQ__RELAY_ACK__KIND__FORWARDED)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s",
				 "RelayAck.about_query with kind FORWARDED (a "
				 "question is answered STORED or UNREACHABLE)");
	return check_text("RelayAck.detail", a->detail, TEXT_MAX, err, errsz);
}

static int check_ack_indication(const Semq__AckIndication *a, char *err,
				size_t errsz)
{
	char p[PATH_MAX_LEN];
	size_t i;
	int r;

	if ((r = check_count("AckIndication.verdicts", a->n_verdicts,
			     a->verdicts, LIST_MAX, err, errsz)))
		return r;
	for (i = 0; i < a->n_verdicts; i++) {
		const Semq__Verdict *v = a->verdicts[i];

		snprintf(p, sizeof p, "AckIndication.verdicts[%zu]", i);
		if (!v)
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s: missing", p);
		if (!result_known((int)v->result))
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s.result: %d is not a known result",
					 p, (int)v->result);
		if ((r = check_flags(p, (int)v->result, (int)v->refusal,
				     v->dead, err, errsz)))
			return r;
		if (v->high > (uint64_t)INT64_MAX)
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s.high: %llu (must be 0..2^63-1)", p,
					 (unsigned long long)v->high);
		snprintf(p, sizeof p, "AckIndication.verdicts[%zu].id", i);
		if ((r = check_msgid(p, v->id, err, errsz)))
			return r;
	}
	return SEMQ_OK;
}

static int check_ack_response(const Semq__AckResponse *a, char *err,
			      size_t errsz)
{
	int r;

	if ((r = check_ids("AckResponse.ids", a->n_ids, a->ids, err, errsz)))
		return r;
	return check_id("AckResponse.from", a->from, err, errsz);
}

static int check_query_reply(const Semq__QueryReply *q, char *err, size_t errsz)
{
	char p[PATH_MAX_LEN];
	size_t i;
	int r;

	if ((r = check_count("QueryReply.answers", q->n_answers, q->answers,
			     LIST_MAX, err, errsz)))
		return r;
	for (i = 0; i < q->n_answers; i++) {
		const Semq__QueryAnswer *a = q->answers[i];

		snprintf(p, sizeof p, "QueryReply.answers[%zu]", i);
		if (!a)
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s: missing", p);
		if (!result_known((int)a->result))
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s.result: %d is not a known result",
					 p, (int)a->result);
		if ((r = check_flags(p, (int)a->result, (int)a->refusal,
				     a->dead, err, errsz)))
			return r;
		if (a->high > (uint64_t)INT64_MAX)
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s.high: %llu (must be 0..2^63-1)", p,
					 (unsigned long long)a->high);
		if (a->refusal && !a->received)
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s.refusal: %d but received is false",
					 p, (int)a->refusal);
		snprintf(p, sizeof p, "QueryReply.answers[%zu].id", i);
		if ((r = check_msgid(p, a->id, err, errsz)))
			return r;
	}
	return SEMQ_OK;
}

/* A life in a StreamQuery or StreamState: given (not 0). */
static int check_life(const char *path, uint64_t life, char *err, size_t errsz)
{
	if (life == SEMQ_LIFE_NONE)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s: 0 (a life is never 0)", path);
	return SEMQ_OK;
}

static int check_stream_query(const Semq__StreamQuery *q, char *err,
			      size_t errsz)
{
	char p[PATH_MAX_LEN];
	size_t i;
	int r;

	if ((r = check_id("StreamQuery.origin", q->origin, err, errsz)) ||
	    (r = check_life("StreamQuery.life", q->life, err, errsz)))
		return r;
	if (q->n_dests > STREAMS_MAX)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "StreamQuery.dests: %zu entries, more than %d",
				 q->n_dests, STREAMS_MAX);
	if (q->n_dests && !q->dests)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "StreamQuery.dests: %zu entries but no array",
				 q->n_dests);
	for (i = 0; i < q->n_dests; i++) {
		snprintf(p, sizeof p, "StreamQuery.dests[%zu]", i);
		if ((r = check_id(p, q->dests[i], err, errsz)))
			return r;
	}
	return SEMQ_OK;
}

static int check_stream_state(const Semq__StreamState *st, char *err,
			      size_t errsz)
{
	char p[PATH_MAX_LEN];
	size_t i;
	int r;

	if ((r = check_id("StreamState.origin", st->origin, err, errsz)) ||
	    (r = check_life("StreamState.life", st->life, err, errsz)) ||
	    (r = check_id("StreamState.reporter", st->reporter, err, errsz)))
		return r;
	if (st->n_streams > STREAMS_MAX)
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"StreamState.streams: %zu entries, more than %d",
			st->n_streams, STREAMS_MAX);
	if (st->n_streams && !st->streams)
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"StreamState.streams: %zu entries but no array",
			st->n_streams);
	for (i = 0; i < st->n_streams; i++) {
		const Semq__StreamHigh *h = st->streams[i];

		snprintf(p, sizeof p, "StreamState.streams[%zu]", i);
		if (!h)
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s: missing", p);
		snprintf(p, sizeof p, "StreamState.streams[%zu].dest", i);
		if ((r = check_id(p, h->dest, err, errsz)))
			return r;
		if (h->high > (uint64_t)INT64_MAX)
			return semq_fail(
				err, errsz, SEMQ_ERR_PROTO,
				"StreamState.streams[%zu].high: %llu (must "
				"be 0..2^63-1)",
				i, (unsigned long long)h->high);
	}
	return SEMQ_OK;
}

/* ---- Trace, TraceReply ---------------------------------------------------- */

static int check_trace(const Semq__Trace *t, char *err, size_t errsz)
{
	int r;

	if (t->request == 0)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s",
				 "Trace.request: 0 (must be > 0)");
	if ((r = check_count("Trace.ids", t->n_ids, t->ids, CODEC_TRACE_IDS,
			     err, errsz)))
		return r;
	return check_ids("Trace.ids", t->n_ids, t->ids, err, errsz);
}

/* An optional node id (empty allowed). */
static int check_opt_id(const char *path, const char *v, char *err,
			size_t errsz)
{
	if (v && !v[0])
		return SEMQ_OK;
	return check_id(path, v, err, errsz);
}

static int check_trace_record(const char *path, const Semq__TraceRecord *t,
			      char *err, size_t errsz)
{
	char p[PATH_MAX_LEN + 32];
	int r;

	if (!t)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s: missing",
				 path);
	snprintf(p, sizeof p, "%s.id", path);
	if ((r = check_msgid(p, t->id, err, errsz)))
		return r;
	snprintf(p, sizeof p, "%s.status", path);
	if (t->status != SS_UNSEND && t->status != SS_SEND &&
	    t->status != SS_ACK && t->status != SS_HELD &&
	    t->status != SS_ACK2 && t->status != SS_CANCELLED)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s: %d is not an outbound status", p,
				 (int)t->status);
	if (t->result < -1 || t->result > RES_UNDELIVERABLE)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.result: %d is not a known result", path,
				 (int)t->result);
	if ((int)t->receipt <
		    SEMQ__TRACE_RECORD__RECEIPT__RECEIPT_UNSPECIFIED ||
	    (int)t->receipt > SEMQ__TRACE_RECORD__RECEIPT__NOT_RECEIVED)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.receipt: %d is not a known receipt", path,
				 (int)t->receipt);
	if (t->receipt_result > RES_UNDELIVERABLE || t->ack_status > AS_OK)
		return semq_fail(
			err, errsz, SEMQ_ERR_PROTO,
			"%s.receipt_result %u / ack_status %u: not known", path,
			t->receipt_result, t->ack_status);
	if (t->redo_id < 0 || t->redo_status < RS_DISCARDED ||
	    t->redo_status > RS_DONE)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.redo_id %lld / redo_status %d: not valid",
				 path, (long long)t->redo_id,
				 (int)t->redo_status);
	if (t->confirmed_through > (uint64_t)INT64_MAX ||
	    t->high > (uint64_t)INT64_MAX)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "%s.confirmed_through / high: over 2^63-1",
				 path);
	snprintf(p, sizeof p, "%s.key", path);
	if ((r = check_text(p, t->key, SEMQ_KEY_MAX, err, errsz)))
		return r;
	if (!semq_utf8_valid((const uint8_t *)t->key, strlen(t->key)))
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s: not UTF-8",
				 p);
	snprintf(p, sizeof p, "%s.last_error", path);
	if ((r = check_text(p, t->last_error, TEXT_MAX, err, errsz)))
		return r;
	snprintf(p, sizeof p, "%s.redo_error", path);
	if ((r = check_text(p, t->redo_error, TEXT_MAX, err, errsz)))
		return r;
	snprintf(p, sizeof p, "%s.custodian", path);
	if ((r = check_opt_id(p, t->custodian, err, errsz)))
		return r;
	snprintf(p, sizeof p, "%s.via", path);
	if ((r = check_opt_id(p, t->via, err, errsz)))
		return r;
	snprintf(p, sizeof p, "%s.next_hop", path);
	return check_opt_id(p, t->next_hop, err, errsz);
}

static int check_trace_reply(const Semq__TraceReply *t, char *err, size_t errsz)
{
	char p[PATH_MAX_LEN];
	size_t i, k;
	int r;

	if (t->request == 0)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s",
				 "TraceReply.request: 0 (must be > 0)");
	if ((r = check_count("TraceReply.hops", t->n_hops, t->hops,
			     CODEC_TRACE_HOPS, err, errsz)))
		return r;
	for (i = 0; i < t->n_hops; i++) {
		const Semq__TraceHop *h = t->hops[i];

		snprintf(p, sizeof p, "TraceReply.hops[%zu]", i);
		if (!h)
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s: missing", p);
		snprintf(p, sizeof p, "TraceReply.hops[%zu].node", i);
		if ((r = check_id(p, h->node, err, errsz)))
			return r;
		if (!h->instance || !config_instance_valid(h->instance))
			return semq_fail(
				err, errsz, SEMQ_ERR_PROTO,
				"TraceReply.hops[%zu].instance: not an "
				"instance name",
				i);
		snprintf(p, sizeof p, "TraceReply.hops[%zu].note", i);
		if ((r = check_text(p, h->note, TEXT_MAX, err, errsz)))
			return r;
		if (!printable(h->note))
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s: not printable ASCII", p);
		if (h->n_records > CODEC_TRACE_IDS ||
		    (h->n_records && !h->records))
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "TraceReply.hops[%zu].records: %zu "
					 "entries (0..%d)",
					 i, h->n_records, CODEC_TRACE_IDS);
		for (k = 0; k < h->n_records; k++) {
			snprintf(p, sizeof p,
				 "TraceReply.hops[%zu].records[%zu]", i, k);
			if ((r = check_trace_record(p, h->records[k], err,
						    errsz)))
				return r;
		}
	}
	return SEMQ_OK;
}

static int check_error(const Semq__Error *e, char *err, size_t errsz)
{
	/* CODE_UNSPECIFIED is a value of the enum: a peer may not say why. */
	if ((int)e->code < SEMQ__ERROR__CODE__CODE_UNSPECIFIED ||
	    (int)e->code > SEMQ__ERROR__CODE__DEST_UNAVAILABLE)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "Error.code: %d is not a known code",
				 (int)e->code);
	return check_text("Error.text", e->text, TEXT_MAX, err, errsz);
}

/* ---- raw bytes: strings with a NUL ---------------------------------------
 * protobuf-c hands strings out as C strings, so "R1\0x" on the wire would
 * reach us as a valid "R1". This walks the (already unpacked, so well-formed)
 * bytes along the descriptors and refuses a NUL inside any string field.
 * Unknown fields are skipped; the schema is not recursive, so depth is small.
 */

/* Reads a varint from p[0..n); bytes used, 0 when it does not end. */
static size_t rd_varint(const uint8_t *p, size_t n, uint64_t *v)
{
	size_t i;

	*v = 0;
	for (i = 0; i < n && i < 10; i++) {
		*v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80))
			return i + 1;
	}
	return 0;
}

static int check_nul(const ProtobufCMessageDescriptor *d, const uint8_t *p,
		     size_t n, const char *path, char *err, size_t errsz)
{
	unsigned count[16] = {0}; /* occurrences per field, for [i] */
	char sub[PATH_MAX_LEN + 32];
	uint64_t tag, v;
	size_t k;
	int r;

	while (n) {
		const ProtobufCFieldDescriptor *fd;
		size_t idx;

		if (!(k = rd_varint(p, n, &tag)))
			goto bad;
		p += k;
		n -= k;
		/* protobuf-c keeps a field numbered 0 as an unknown field and
		 * writes it back out, where the next hop refuses it: it is
		 * malformed protobuf, refused here, at the edge. */
		if (tag >> 3 == 0)
			return semq_fail(err, errsz, SEMQ_ERR_PROTO,
					 "%s: a field numbered 0 is not valid "
					 "protobuf",
					 path);
		switch (tag & 7) {
		case 0:
			if (!(k = rd_varint(p, n, &v)))
				goto bad;
			break;
		case 1: k = 8; break;
		case 5: k = 4; break;
		case 2:
			if (!(k = rd_varint(p, n, &v)) || v > n - k)
				goto bad;
			p += k;
			n -= k;
			k = (size_t)v;
			break;
		default: goto bad;
		}
		if (k > n)
			goto bad;
		fd = (tag & 7) == 2 && tag >> 3 <= UINT32_MAX
			     ? protobuf_c_message_descriptor_get_field(
				       d, (unsigned)(tag >> 3))
			     : NULL;
		if (fd && (fd->type == PROTOBUF_C_TYPE_STRING ||
			   fd->type == PROTOBUF_C_TYPE_MESSAGE)) {
			idx = (size_t)(fd - d->fields);
			if (d == &semq__frame__descriptor)
				snprintf(sub, sizeof sub, "%s",
					 ((const ProtobufCMessageDescriptor *)
						  fd->descriptor)
						 ->short_name);
			else if (fd->label == PROTOBUF_C_LABEL_REPEATED &&
				 idx < 16)
				snprintf(sub, sizeof sub, "%s.%s[%u]", path,
					 fd->name, count[idx]++);
			else
				snprintf(sub, sizeof sub, "%s.%s", path,
					 fd->name);
			if (fd->type == PROTOBUF_C_TYPE_STRING) {
				if (memchr(p, 0, k))
					return semq_fail(
						err, errsz, SEMQ_ERR_PROTO,
						"%s: contains a NUL byte", sub);
			} else if ((r = check_nul(fd->descriptor, p, k, sub,
						  err, errsz))) {
				return r;
			}
		}
		p += k;
		n -= k;
	}
	return SEMQ_OK;
bad:
	return semq_fail(err, errsz, SEMQ_ERR_PROTO,
			 "%s: frame does not decode", path);
}

/* ---- frames ------------------------------------------------------------- */

int codec_validate(const Semq__Frame *f, char *err, size_t errsz)
{
	const char *name = NULL;
	const void *body = NULL;

	if (!f)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "frame: missing");
	switch (f->body_case) {
	case SEMQ__FRAME__BODY_HELLO:
		name = "Hello";
		body = f->hello;
		break;
	case SEMQ__FRAME__BODY_DATA:
		name = "Data";
		body = f->data;
		break;
	case SEMQ__FRAME__BODY_RELAY_ACK:
		name = "RelayAck";
		body = f->relay_ack;
		break;
	case SEMQ__FRAME__BODY_ACK_INDICATION:
		name = "AckIndication";
		body = f->ack_indication;
		break;
	case SEMQ__FRAME__BODY_ACK_RESPONSE:
		name = "AckResponse";
		body = f->ack_response;
		break;
	case SEMQ__FRAME__BODY_QUERY:
		name = "Query";
		body = f->query;
		break;
	case SEMQ__FRAME__BODY_QUERY_REPLY:
		name = "QueryReply";
		body = f->query_reply;
		break;
	case SEMQ__FRAME__BODY_PING:
		name = "Ping";
		body = f->ping;
		break;
	case SEMQ__FRAME__BODY_PONG:
		name = "Pong";
		body = f->pong;
		break;
	case SEMQ__FRAME__BODY_ERROR:
		name = "Error";
		body = f->error;
		break;
	case SEMQ__FRAME__BODY_STREAM_QUERY:
		name = "StreamQuery";
		body = f->stream_query;
		break;
	case SEMQ__FRAME__BODY_STREAM_STATE:
		name = "StreamState";
		body = f->stream_state;
		break;
	case SEMQ__FRAME__BODY_TRACE:
		name = "Trace";
		body = f->trace;
		break;
	case SEMQ__FRAME__BODY_TRACE_REPLY:
		name = "TraceReply";
		body = f->trace_reply;
		break;
	default:
		/* NOT_SET, which is also what a newer body number decodes to. */
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "frame has no known body (case %d)",
				 (int)f->body_case);
	}
	if (!body)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO, "%s: missing",
				 name);
	if (f->hops > SEMQ_HOPS_MAX)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "frame.hops: %u (at most %d)", f->hops,
				 SEMQ_HOPS_MAX);

	switch (f->body_case) {
	case SEMQ__FRAME__BODY_HELLO: return check_hello(f->hello, err, errsz);
	case SEMQ__FRAME__BODY_DATA: return check_data(f->data, err, errsz);
	case SEMQ__FRAME__BODY_RELAY_ACK:
		return check_relay_ack(f->relay_ack, err, errsz);
	case SEMQ__FRAME__BODY_ACK_INDICATION:
		return check_ack_indication(f->ack_indication, err, errsz);
	case SEMQ__FRAME__BODY_ACK_RESPONSE:
		return check_ack_response(f->ack_response, err, errsz);
	case SEMQ__FRAME__BODY_QUERY:
		return check_ids("Query.ids", f->query->n_ids, f->query->ids,
				 err, errsz);
	case SEMQ__FRAME__BODY_QUERY_REPLY:
		return check_query_reply(f->query_reply, err, errsz);
	case SEMQ__FRAME__BODY_ERROR: return check_error(f->error, err, errsz);
	case SEMQ__FRAME__BODY_STREAM_QUERY:
		return check_stream_query(f->stream_query, err, errsz);
	case SEMQ__FRAME__BODY_STREAM_STATE:
		return check_stream_state(f->stream_state, err, errsz);
	case SEMQ__FRAME__BODY_TRACE: return check_trace(f->trace, err, errsz);
	case SEMQ__FRAME__BODY_TRACE_REPLY:
		return check_trace_reply(f->trace_reply, err, errsz);
	default: return SEMQ_OK; /* Ping, Pong: any values */
	}
}

int codec_frame_len(const uint8_t hdr[CODEC_HDR], size_t max_frame,
		    size_t *len_out, char *err, size_t errsz)
{
	size_t len = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 |
		     (size_t)hdr[2] << 8 | (size_t)hdr[3];

	if (len == 0)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "frame length 0 (must be 1..%zu)", max_frame);
	if (len > max_frame)
		return semq_fail(err, errsz, SEMQ_ERR_TOO_BIG,
				 "frame length %zu is over max_frame %zu", len,
				 max_frame);
	*len_out = len;
	return SEMQ_OK;
}

int codec_decode_body(const uint8_t *body, size_t len, Semq__Frame **out,
		      char *err, size_t errsz)
{
	int r = SEMQ_ERR_INTERNAL;
	Semq__Frame *f = NULL; /* owned until handed out */

	*out = NULL;
	if (!body && len)
		return semq_fail(err, errsz, SEMQ_ERR_PROTO,
				 "frame body: %zu bytes but no data", len);
	{
		struct unpack_budget b = {len * UNPACK_FACTOR + UNPACK_SLACK,
					  0};
		ProtobufCAllocator a = {budget_alloc, budget_free, &b};

		f = semq__frame__unpack(&a, len, body);
		if (!f) {
			r = semq_fail(
				err, errsz, SEMQ_ERR_PROTO,
				"frame does not decode (%zu bytes)%s", len,
				b.refused ? ": it would take more than 16 "
					    "times its size in memory"
					  : "");
			goto out;
		}
	}
	if ((r = check_nul(&semq__frame__descriptor, body, len, "Frame", err,
			   errsz)))
		goto out;
	if ((r = codec_validate(f, err, errsz)))
		goto out;
	*out = f;
	f = NULL;
	r = SEMQ_OK;
out:
	codec_frame_free(f);
	return r;
}

void codec_frame_free(Semq__Frame *f)
{
	if (f)
		semq__frame__free_unpacked(f, &frame_allocator);
}

int codec_encode(const Semq__Frame *f, size_t max_frame, uint8_t **out,
		 size_t *len_out)
{
	int r = SEMQ_ERR_INTERNAL;
	uint8_t *buf = NULL; /* owned until handed out */
	size_t n;

	*out = NULL;
	*len_out = 0;
	if (!f) {
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	n = semq__frame__get_packed_size(f);
	if (n > max_frame || n > UINT32_MAX) {
		r = SEMQ_ERR_TOO_BIG;
		goto out;
	}
	buf = malloc(CODEC_HDR + n);
	if (!buf) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	buf[0] = (uint8_t)(n >> 24);
	buf[1] = (uint8_t)(n >> 16);
	buf[2] = (uint8_t)(n >> 8);
	buf[3] = (uint8_t)n;
	if (semq__frame__pack(f, buf + CODEC_HDR) != n)
		goto out; /* SEMQ_ERR_INTERNAL: the size changed under us */
	*out = buf;
	*len_out = CODEC_HDR + n;
	buf = NULL;
	r = SEMQ_OK;
out:
	free(buf);
	return r;
}

/* ---- incremental reader ------------------------------------------------- */

struct codec_reader {
	uint8_t *buf;     /* owned; NULL while empty */
	size_t cap;       /* bytes allocated at buf */
	size_t start;     /* first unread byte */
	size_t end;       /* one past the last byte fed */
	size_t max_frame; /* largest body accepted */
	int poison;       /* 0, or the error returned forever */
	char poison_msg[SEMQ_ERRLEN];
};

struct codec_reader *codec_reader_new(size_t max_frame)
{
	struct codec_reader *r = calloc(1, sizeof *r);

	if (!r)
		return NULL;
	/* The header holds 32 bits: no body is ever larger. */
	r->max_frame = max_frame > UINT32_MAX ? UINT32_MAX : max_frame;
	return r;
}

void codec_reader_free(struct codec_reader *r)
{
	if (!r)
		return;
	free(r->buf);
	free(r);
}

/* Drops the buffer; `code` and `msg` are what next() returns from now on. */
static int reader_poison(struct codec_reader *r, int code, const char *msg)
{
	r->poison = code;
	snprintf(r->poison_msg, sizeof r->poison_msg, "%s", msg);
	free(r->buf);
	r->buf = NULL;
	r->cap = r->start = r->end = 0;
	return code;
}

int codec_reader_reserve(struct codec_reader *r, size_t len, uint8_t **dst)
{
	size_t want, ncap;
	uint8_t *nbuf;

	*dst = NULL;
	if (!r)
		return SEMQ_ERR_INVALID;
	if (r->poison)
		return r->poison;
	if (len > r->cap - r->end && r->start > 0) {
		memmove(r->buf, r->buf + r->start, r->end - r->start);
		r->end -= r->start;
		r->start = 0;
	}
	if (len > r->cap - r->end) {
		if (len > SIZE_MAX - r->end)
			return SEMQ_ERR_NOMEM;
		want = r->end + len;
		ncap = r->cap ? r->cap * 2 : 4096;
		if (ncap < r->cap || ncap > r->max_frame + CODEC_HDR)
			ncap = r->max_frame + CODEC_HDR;
		if (ncap < want)
			ncap = want;
		nbuf = realloc(r->buf, ncap);
		if (!nbuf)
			return SEMQ_ERR_NOMEM;
		r->buf = nbuf;
		r->cap = ncap;
	}
	*dst = r->buf + r->end;
	r->end += len;
	return SEMQ_OK;
}

int codec_reader_feed(struct codec_reader *r, const void *data, size_t len)
{
	uint8_t *dst;
	int rc;

	if (!r || (!data && len))
		return SEMQ_ERR_INVALID;
	if (r->poison || len == 0)
		return SEMQ_OK; /* a poisoned reader discards what comes */
	if ((rc = codec_reader_reserve(r, len, &dst)) != SEMQ_OK)
		return rc;
	memcpy(dst, data, len);
	return SEMQ_OK;
}

void codec_reader_set_max(struct codec_reader *r, size_t max_frame)
{
	/* The header holds 32 bits: no body is ever larger. */
	if (r)
		r->max_frame = max_frame > UINT32_MAX ? UINT32_MAX : max_frame;
}

int codec_reader_want(struct codec_reader *r, size_t *want, char *err,
		      size_t errsz)
{
	char msg[SEMQ_ERRLEN];
	size_t avail, len;
	int rc;

	*want = 0;
	if (!r)
		return semq_fail(err, errsz, SEMQ_ERR_INVALID, "reader: NULL");
	if (r->poison)
		return semq_fail(err, errsz, r->poison, "%s", r->poison_msg);
	avail = r->end - r->start;
	if (avail < CODEC_HDR) {
		*want = CODEC_HDR - avail;
		return SEMQ_OK;
	}
	rc = codec_frame_len(r->buf + r->start, r->max_frame, &len, msg,
			     sizeof msg);
	if (rc)
		return semq_fail(err, errsz, reader_poison(r, rc, msg), "%s",
				 msg);
	*want = avail - CODEC_HDR < len ? len - (avail - CODEC_HDR) : 0;
	return SEMQ_OK;
}

int codec_reader_next(struct codec_reader *r, Semq__Frame **out, char *err,
		      size_t errsz)
{
	char msg[SEMQ_ERRLEN];
	size_t avail, len;
	int rc;

	*out = NULL;
	if (!r)
		return semq_fail(err, errsz, SEMQ_ERR_INVALID, "reader: NULL");
	if (r->poison)
		return semq_fail(err, errsz, r->poison, "%s", r->poison_msg);
	avail = r->end - r->start;
	if (avail < CODEC_HDR)
		return SEMQ_AGAIN;
	rc = codec_frame_len(r->buf + r->start, r->max_frame, &len, msg,
			     sizeof msg);
	if (rc)
		return semq_fail(err, errsz, reader_poison(r, rc, msg), "%s",
				 msg);
	if (avail - CODEC_HDR < len)
		return SEMQ_AGAIN;
	rc = codec_decode_body(r->buf + r->start + CODEC_HDR, len, out, msg,
			       sizeof msg);
	if (rc)
		return semq_fail(err, errsz, reader_poison(r, rc, msg), "%s",
				 msg);
	r->start += CODEC_HDR + len;
	if (r->start == r->end) {
		r->start = r->end = 0;
		if (r->cap > READER_KEEP) {
			/* A big frame went through: do not keep its room. */
			free(r->buf);
			r->buf = NULL;
			r->cap = 0;
		}
	}
	return SEMQ_OK;
}

size_t codec_reader_pending(const struct codec_reader *r)
{
	return r ? r->end - r->start : 0;
}

/* ---- conversions -------------------------------------------------------- */

/* Copies NUL-terminated `src` (NULL = "") into dst[dstsz], cut to fit. */
static void copy_str(char *dst, size_t dstsz, const char *src)
{
	size_t n = src ? strnlen(src, dstsz - 1) : 0;

	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

void codec_msg_from_wire(const Semq__Message *w, struct msg *m)
{
	memset(m, 0, sizeof *m);
	copy_str(m->id.origin, sizeof m->id.origin, w->origin);
	copy_str(m->id.dest, sizeof m->id.dest, w->dest);
	m->id.seq = w->seq;
	m->type = w->type;
	copy_str(m->key, sizeof m->key, w->key);
	m->has_key = m->key[0] != '\0';
	m->prev_seq = w->prev_seq;
	m->deliver_at = w->deliver_at;
	m->created_at = w->created_at;
	m->payload = w->payload.data; /* borrowed from the frame */
	m->payload_len = w->payload.len;
	m->tombstone = w->tombstone ? 1 : 0;
	copy_str(m->stored_by, sizeof m->stored_by, w->stored_by);
	m->id.life = w->life;
	m->id.digest = w->digest;
	m->prev_digest = w->prev_digest;
	m->hops = w->hops;
}

void codec_msg_to_wire(const struct msg *m, Semq__Message *w)
{
	/* protobuf-c's struct holds non-const pointers; packing only reads. */
	w->origin = (char *)m->id.origin;
	w->dest = (char *)m->id.dest;
	w->seq = m->id.seq;
	w->type = m->type;
	w->key = m->has_key ? (char *)m->key : (char *)protobuf_c_empty_string;
	w->prev_seq = m->prev_seq;
	w->deliver_at = m->deliver_at;
	w->created_at = m->created_at;
	w->payload.data = m->payload;
	w->payload.len = m->payload ? m->payload_len : 0;
	w->tombstone = m->tombstone ? 1 : 0;
	w->stored_by = (char *)m->stored_by;
	w->life = m->id.life;
	w->digest = m->id.digest;
	w->prev_digest = m->prev_digest;
	w->hops = m->hops;
}

int codec_check_msg(const struct msg *m, char *err, size_t errsz)
{
	Semq__Message w = SEMQ__MESSAGE__INIT;

	codec_msg_to_wire(m, &w);
	return check_message("Message", &w, err, errsz);
}

void codec_msgid_from_wire(const Semq__MsgId *w, struct msgid *id)
{
	memset(id, 0, sizeof *id);
	copy_str(id->origin, sizeof id->origin, w->origin);
	copy_str(id->dest, sizeof id->dest, w->dest);
	id->seq = w->seq;
	id->life = w->life;
	id->digest = w->digest;
}

void codec_msgid_to_wire(const struct msgid *id, Semq__MsgId *w)
{
	w->origin = (char *)id->origin;
	w->dest = (char *)id->dest;
	w->seq = id->seq;
	w->life = id->life;
	w->digest = id->digest;
}
