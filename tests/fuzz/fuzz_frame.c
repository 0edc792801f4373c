/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the wire codec (node/codec.c): the edge where every
 * byte a peer sends enters the node.
 *
 * Input: one byte of settings, then a byte stream as a peer would send it
 * (4-byte big-endian length, body, ...). The stream goes through two paths:
 *
 *  - by hand: each header is read with codec_frame_len and each body given
 *    to codec_decode_body, stopping at the first bad frame or at a frame
 *    that is not complete;
 *  - through a codec_reader fed in pieces whose sizes come from a small
 *    generator seeded with the settings byte, calling codec_reader_next after
 *    every piece until it asks for more;
 *  - through a codec_reader given those pieces the way peer.c reads a
 *    connection: never more than codec_reader_want() asks for, into
 *    codec_reader_reserve(), next() once want is 0.
 *
 * DESIGN (what is checked beyond "no crash, no leak, no UB")
 *  - A body that decodes is valid (codec_validate agrees), encodes, and its
 *    encoding decodes again to a frame with the very same encoding.
 *  - The reader yields exactly the frames of the hand path, in order and
 *    byte-identical once encoded, whatever the pieces; then it stops with the
 *    hand path's error (and stays poisoned), or asks for more with every
 *    byte after the last frame still pending. So does peer.c's way, which
 *    besides never holds a byte of the frame after the one it reads.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <semq/error.h>

#include "codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BIG_FRAME (1u << 20)
#define SMALL_FRAME 200u

/* An encoded frame, owned. */
struct enc {
	uint8_t *b;
	size_t n;
};

struct encs {
	struct enc *v;
	size_t n, cap;
};

static void encs_free(struct encs *e)
{
	size_t i;

	for (i = 0; i < e->n; i++)
		free(e->v[i].b);
	free(e->v);
	memset(e, 0, sizeof *e);
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_frame: invariant broken: %s%s%s\n", what,
		detail ? ": " : "", detail ? detail : "");
	abort();
}

/*
 * Encodes a decoded frame and checks that the encoding round-trips. The
 * encoding (ownership to the caller) goes into *out.
 */
static void check_frame(const Semq__Frame *f, struct enc *out)
{
	char err[SEMQ_ERRLEN];
	Semq__Frame *again = NULL;
	uint8_t *b2 = NULL;
	size_t n2 = 0, len = 0;

	if (codec_validate(f, err, sizeof err) != SEMQ_OK)
		die("a decoded frame does not validate", err);
	if (codec_encode(f, SIZE_MAX, &out->b, &out->n) != SEMQ_OK)
		die("a decoded frame does not encode", NULL);
	if (out->n < CODEC_HDR ||
	    codec_frame_len(out->b, SIZE_MAX, &len, err, sizeof err) !=
		    SEMQ_OK ||
	    len != out->n - CODEC_HDR)
		die("the header of an encoding is wrong", NULL);
	if (codec_decode_body(out->b + CODEC_HDR, len, &again, err,
			      sizeof err) != SEMQ_OK)
		die("an encoded frame does not decode", err);
	if (codec_encode(again, SIZE_MAX, &b2, &n2) != SEMQ_OK)
		die("a re-decoded frame does not encode", NULL);
	if (n2 != out->n || memcmp(b2, out->b, n2) != 0)
		die("encode(decode(encode(f))) differs from encode(f)", NULL);
	free(b2);
	codec_frame_free(again);
}

/* The hand path: frames into *e; returns SEMQ_AGAIN or the frame error, with
 * *rest = bytes after the last good frame. */
static int split_by_hand(const uint8_t *p, size_t n, size_t max_frame,
			 struct encs *e, size_t *rest)
{
	char err[SEMQ_ERRLEN];
	size_t len;
	int r;

	for (;;) {
		Semq__Frame *f = NULL;

		*rest = n;
		if (n < CODEC_HDR)
			return SEMQ_AGAIN;
		r = codec_frame_len(p, max_frame, &len, err, sizeof err);
		if (r != SEMQ_OK) {
			if (r != SEMQ_ERR_PROTO && r != SEMQ_ERR_TOO_BIG)
				die("codec_frame_len: unexpected code", err);
			return r;
		}
		if (len == 0 || len > max_frame)
			die("codec_frame_len accepted a bad length", NULL);
		if (n - CODEC_HDR < len)
			return SEMQ_AGAIN;
		r = codec_decode_body(p + CODEC_HDR, len, &f, err, sizeof err);
		if (r != SEMQ_OK) {
			if (f)
				die("codec_decode_body failed but set *out",
				    err);
			if (r != SEMQ_ERR_PROTO)
				die("codec_decode_body: unexpected code", err);
			return r;
		}
		if (e->n == e->cap) {
			size_t cap = e->cap ? e->cap * 2 : 16;
			struct enc *v = realloc(e->v, cap * sizeof *v);
			if (!v)
				die("out of memory", NULL);
			e->v = v;
			e->cap = cap;
		}
		check_frame(f, &e->v[e->n]);
		e->n++;
		codec_frame_free(f);
		p += CODEC_HDR + len;
		n -= CODEC_HDR + len;
	}
}

/* xorshift32: piece sizes for the reader. */
static uint32_t next_rand(uint32_t *s)
{
	uint32_t x = *s;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	*s = x;
	return x;
}

/*
 * The stream read as peer.c reads a connection: pieces arrive (sizes from
 * the same generator as the reader path), and the reader takes from what
 * has arrived only what codec_reader_want() asks for.
 */
static void peer_way(const uint8_t *data, size_t size, size_t max_frame,
		     uint8_t settings, const struct encs *hand, int want_end,
		     size_t rest)
{
	struct codec_reader *rd = codec_reader_new(max_frame);
	char err[SEMQ_ERRLEN];
	uint32_t seed = 0x9e3779b9u ^ settings ^ ((uint32_t)(size + 1) << 8);
	size_t arrived = 0, off = 0, got = 0, frame_start = 0;
	int r = SEMQ_AGAIN;

	if (!rd)
		die("out of memory", NULL);
	for (;;) {
		size_t want = 0, n;
		uint8_t *dst = NULL;
		Semq__Frame *f = NULL;
		struct enc e = {0};

		r = codec_reader_want(rd, &want, err, sizeof err);
		if (r != SEMQ_OK)
			break;
		if (want && off == arrived) {
			uint32_t x;
			size_t piece;

			r = SEMQ_AGAIN;
			if (arrived == size)
				break; /* the stream ends inside a frame */
			/* the next piece arrives */
			x = next_rand(&seed);
			piece = (x & 0x700) == 0 ? size - arrived
						 : 1 + (x & 63);
			arrived +=
				piece > size - arrived ? size - arrived : piece;
			continue;
		}
		if (want) {
			n = arrived - off < want ? arrived - off : want;
			if (codec_reader_reserve(rd, n, &dst) != SEMQ_OK)
				die("codec_reader_reserve failed", NULL);
			memcpy(dst, data + off, n);
			off += n;
			continue;
		}
		if (codec_reader_pending(rd) != off - frame_start)
			die("peer way: the reader holds bytes of the next "
			    "frame",
			    NULL);
		r = codec_reader_next(rd, &f, err, sizeof err);
		if (r != SEMQ_OK)
			break;
		if (got >= hand->n)
			die("peer way: more frames than the stream holds",
			    NULL);
		check_frame(f, &e);
		if (e.n != hand->v[got].n ||
		    memcmp(e.b, hand->v[got].b, e.n) != 0)
			die("peer way: another frame than the stream holds",
			    NULL);
		got++;
		frame_start = off;
		free(e.b);
		codec_frame_free(f);
	}
	if (got != hand->n)
		die("peer way: fewer frames than the stream holds", NULL);
	if (r != want_end)
		die("peer way: ends with another code than the stream", err);
	if (r == SEMQ_AGAIN && codec_reader_pending(rd) != rest)
		die("peer way: pending bytes differ from the unread rest",
		    NULL);
	codec_reader_free(rd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct encs hand = {0};
	struct codec_reader *rd = NULL;
	char err[SEMQ_ERRLEN];
	size_t max_frame, rest = 0, off = 0, got = 0;
	uint32_t seed;
	uint8_t settings;
	int want, r = SEMQ_AGAIN;

	if (size < 1)
		return 0;
	settings = data[0];
	max_frame = (data[0] & 0x80) ? SMALL_FRAME : BIG_FRAME;
	seed = 0x9e3779b9u ^ data[0] ^ ((uint32_t)size << 8);
	data++;
	size--;

	want = split_by_hand(data, size, max_frame, &hand, &rest);

	rd = codec_reader_new(max_frame);
	if (!rd)
		die("out of memory", NULL);
	while (off < size && r == SEMQ_AGAIN) {
		/* pieces of 1..64 bytes, or the rest at once now and then */
		uint32_t x = next_rand(&seed);
		size_t piece = (x & 0x700) == 0 ? size - off : 1 + (x & 63);

		if (piece > size - off)
			piece = size - off;
		if (codec_reader_feed(rd, data + off, piece) != SEMQ_OK)
			die("codec_reader_feed failed", NULL);
		off += piece;
		for (;;) {
			Semq__Frame *f = NULL;
			struct enc e = {0};

			r = codec_reader_next(rd, &f, err, sizeof err);
			if (r != SEMQ_OK) {
				if (f)
					die("codec_reader_next failed but set "
					    "*out",
					    err);
				break;
			}
			if (got >= hand.n)
				die("the reader yields more frames than the "
				    "stream holds",
				    NULL);
			check_frame(f, &e);
			if (e.n != hand.v[got].n ||
			    memcmp(e.b, hand.v[got].b, e.n) != 0)
				die("the reader yields another frame than the "
				    "stream holds",
				    NULL);
			got++;
			free(e.b);
			codec_frame_free(f);
		}
	}
	if (got != hand.n)
		die("the reader yields fewer frames than the stream holds",
		    NULL);
	if (r != want)
		die("the reader ends with another code than the stream", err);
	if (r == SEMQ_AGAIN) {
		if (codec_reader_pending(rd) != rest)
			die("pending bytes differ from the unread rest", NULL);
	} else {
		Semq__Frame *f = NULL;

		/* poisoned: more bytes change nothing */
		if (codec_reader_feed(rd, data, size) != SEMQ_OK ||
		    codec_reader_next(rd, &f, err, sizeof err) != want || f)
			die("a poisoned reader recovered", NULL);
	}
	codec_reader_free(rd);
	peer_way(data, size, max_frame, settings, &hand, want, rest);
	encs_free(&hand);
	return 0;
}
