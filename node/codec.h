/* SPDX-License-Identifier: MIT */
/*
 * The wire codec: length-prefixed protobuf-c frames (proto/semq.proto).
 *
 * A frame on the wire is a 4-byte big-endian length N followed by N bytes of
 * an encoded semq.Frame. Decoding is incremental — bytes arrive in any pieces;
 * a reader yields each complete frame once, and several frames may come out
 * of one read — and strict: a frame over max_frame, a body that does not
 * unpack, an unknown or empty body, or any field outside its rules (node id
 * charset and length, instance names, seq > 0, key length, known enum
 * values) is a protocol error with a message naming the field. A frame that
 * decodes is valid: the layers above use its fields without checking them
 * again.
 */
#ifndef SEMQ_CODEC_H
#define SEMQ_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "semq.pb-c.h"
#include "types.h"

#define CODEC_HDR 4
#define CODEC_TRACE_IDS 64  /* Trace.ids, TraceHop.records: at most */
#define CODEC_TRACE_HOPS 16 /* TraceReply.hops: at most */

/*
 * Reads the 4-byte header at `hdr`. SEMQ_OK with *len_out = body length;
 * SEMQ_ERR_TOO_BIG when it is over max_frame; SEMQ_ERR_PROTO when it is 0.
 */
int codec_frame_len(const uint8_t hdr[CODEC_HDR], size_t max_frame,
		    size_t *len_out, char *err, size_t errsz);

/*
 * Unpacks and validates one body of `len` bytes. On SEMQ_OK *out is a new
 * frame (caller frees with codec_frame_free). SEMQ_ERR_PROTO otherwise, with
 * err naming the problem.
 */
int codec_decode_body(const uint8_t *body, size_t len, Semq__Frame **out,
		      char *err, size_t errsz);

/* Validates a frame built in memory or unpacked (what decode does). */
int codec_validate(const Semq__Frame *f, char *err, size_t errsz);

void codec_frame_free(Semq__Frame *f); /* accepts NULL */

/*
 * Encodes `f` with its header into a new buffer (*out, caller frees, *len_out
 * bytes). SEMQ_ERR_TOO_BIG when the body exceeds max_frame.
 */
int codec_encode(const Semq__Frame *f, size_t max_frame, uint8_t **out,
		 size_t *len_out);

/* ---- incremental reader -------------------------------------------------- */

struct codec_reader;

struct codec_reader *codec_reader_new(size_t max_frame);
void codec_reader_free(struct codec_reader *r); /* accepts NULL */

/* Appends bytes (copied). SEMQ_ERR_NOMEM on allocation failure. */
int codec_reader_feed(struct codec_reader *r, const void *data, size_t len);

/*
 * The next complete frame: SEMQ_OK with *out (caller frees), SEMQ_AGAIN when
 * more bytes are needed, SEMQ_ERR_PROTO / SEMQ_ERR_TOO_BIG on a bad frame —
 * after which the reader is poisoned and returns the same error forever (the
 * connection must close).
 */
int codec_reader_next(struct codec_reader *r, Semq__Frame **out, char *err,
		      size_t errsz);

/* Bytes buffered but not yet returned as frames. */
size_t codec_reader_pending(const struct codec_reader *r);

/*
 * For a caller that takes bytes from a buffer of its own (peer.c, from the
 * connection's evbuffer) and should take no more than the next frame needs,
 * so that the rest stays where it is (a paused connection, a new limit):
 *
 * codec_reader_want() checks the next frame's header as soon as it is
 * complete — SEMQ_ERR_TOO_BIG / SEMQ_ERR_PROTO as next() would, poisoning
 * the reader, before any of the body is asked for — and sets *want to the
 * bytes the next frame still lacks: 0 means next() yields it now.
 *
 * codec_reader_reserve() appends `len` bytes that the caller writes at
 * *dst at once (borrowed until the next call on r); SEMQ_ERR_NOMEM.
 *
 * codec_reader_set_max() sets the largest body accepted from the next
 * header checked on (a connection before and after its handshake).
 */
int codec_reader_want(struct codec_reader *r, size_t *want, char *err,
		      size_t errsz);
int codec_reader_reserve(struct codec_reader *r, size_t len, uint8_t **dst);
void codec_reader_set_max(struct codec_reader *r, size_t max_frame);

/* ---- conversions between wire messages and struct msg ------------------- */

/* Fills `m` from a validated wire message; m->payload points INTO `w`
 * (borrowed while the frame lives). */
void codec_msg_from_wire(const Semq__Message *w, struct msg *m);
/* Fills `w` (zero-initialised by the caller with SEMQ__MESSAGE__INIT) from m;
 * strings and payload point into m (borrowed). */
void codec_msg_to_wire(const struct msg *m, Semq__Message *w);
/* Would a peer accept m in a Data frame? SEMQ_OK, or SEMQ_ERR_PROTO with
 * the reason a peer would give, naming the field. */
int codec_check_msg(const struct msg *m, char *err, size_t errsz);
void codec_msgid_from_wire(const Semq__MsgId *w, struct msgid *id);
void codec_msgid_to_wire(const struct msgid *id, Semq__MsgId *w);

#endif
