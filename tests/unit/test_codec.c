/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the wire codec (node/codec.c): every frame type survives a
 * round trip; the incremental reader copes with any split of the byte stream
 * and with many frames per read; bad frames (oversized, empty, garbage, no
 * body, unknown body, invalid fields, unknown enum numbers, a Hello.instance
 * outside the instance names) are refused with a message naming the culprit
 * and poison the reader; struct msg converts to and from the wire; random
 * input never crashes the reader nor yields a frame that does not validate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <semq/error.h>

#include "codec.h"

#define MAXF (1024 * 1024)

/* ---- helpers ------------------------------------------------------------- */

/* Encodes f (must succeed); caller frees *out. */
static void enc(const Semq__Frame *f, uint8_t **out, size_t *len)
{
	assert_int_equal(codec_encode(f, MAXF, out, len), SEMQ_OK);
	assert_non_null(*out);
	assert_true(*len > CODEC_HDR);
}

/* Bytes of the body of an encoded frame, without its header. */
static void enc_body(const Semq__Frame *f, uint8_t **out, size_t *len)
{
	enc(f, out, len);
	memmove(*out, *out + CODEC_HDR, *len - CODEC_HDR);
	*len -= CODEC_HDR;
}

/* Encodes f, feeds it to a fresh reader, returns the one frame it yields. */
static Semq__Frame *roundtrip(const Semq__Frame *f)
{
	struct codec_reader *r = codec_reader_new(MAXF);
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *out = NULL, *none = NULL;
	uint8_t *buf;
	size_t len;

	assert_non_null(r);
	enc(f, &buf, &len);
	assert_int_equal(codec_reader_feed(r, buf, len), SEMQ_OK);
	assert_int_equal(codec_reader_pending(r), len);
	assert_int_equal(codec_reader_next(r, &out, err, sizeof err), SEMQ_OK);
	assert_non_null(out);
	assert_int_equal(codec_reader_pending(r), 0);
	assert_int_equal(codec_reader_next(r, &none, err, sizeof err),
			 SEMQ_AGAIN);
	assert_null(none);
	codec_reader_free(r);
	free(buf);
	return out;
}

/* The decoded frame encodes to the same bytes as the original. */
static void assert_same_bytes(const Semq__Frame *a, const Semq__Frame *b)
{
	uint8_t *ba, *bb;
	size_t la, lb;

	enc(a, &ba, &la);
	enc(b, &bb, &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(ba, bb, la);
	free(ba);
	free(bb);
}

/* Validates f in memory and through encode + decode; both must refuse it
 * with SEMQ_ERR_PROTO and a message containing `want`. */
static void assert_refused(const Semq__Frame *f, const char *want)
{
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *out = (Semq__Frame *)1;
	uint8_t *body;
	size_t len;

	assert_int_equal(codec_validate(f, err, sizeof err), SEMQ_ERR_PROTO);
	if (!strstr(err, want))
		fail_msg("validate said \"%s\", wanted \"%s\"", err, want);
	enc_body(f, &body, &len);
	err[0] = '\0';
	assert_int_equal(codec_decode_body(body, len, &out, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(out);
	if (!strstr(err, want))
		fail_msg("decode said \"%s\", wanted \"%s\"", err, want);
	free(body);
}

/* Same, for frames that cannot be encoded (NULL pointers): memory only. */
static void assert_refused_mem(const Semq__Frame *f, const char *want)
{
	char err[SEMQ_ERRLEN] = "";

	assert_int_equal(codec_validate(f, err, sizeof err), SEMQ_ERR_PROTO);
	if (!strstr(err, want))
		fail_msg("validate said \"%s\", wanted \"%s\"", err, want);
}

static void assert_valid(const Semq__Frame *f)
{
	char err[SEMQ_ERRLEN] = "";

	if (codec_validate(f, err, sizeof err) != SEMQ_OK)
		fail_msg("valid frame refused: %s", err);
}

/* A valid message R1 -> S1 with seq `seq`. */
static void mk_message(Semq__Message *m, uint64_t seq)
{
	static uint8_t payload[] = "bill 42";
	Semq__Message init = SEMQ__MESSAGE__INIT;

	*m = init;
	m->origin = "R1";
	m->dest = "S1";
	m->seq = seq;
	m->type = 2800;
	m->key = "bill-42";
	m->prev_seq = seq - 1;
	m->deliver_at = 0;
	m->created_at = 1700000000000;
	m->payload.data = payload;
	m->payload.len = sizeof payload - 1;
}

static void mk_id(Semq__MsgId *id, const char *origin, const char *dest,
		  uint64_t seq)
{
	Semq__MsgId init = SEMQ__MSG_ID__INIT;

	*id = init;
	id->origin = (char *)origin;
	id->dest = (char *)dest;
	id->seq = seq;
}

/* A Data frame of one message, built in caller storage. */
struct data1 {
	Semq__Frame f;
	Semq__Data d;
	Semq__Message m;
	Semq__Message *mp[1];
};

static void mk_data1(struct data1 *x, uint64_t seq)
{
	Semq__Frame fi = SEMQ__FRAME__INIT;
	Semq__Data di = SEMQ__DATA__INIT;

	x->f = fi;
	x->d = di;
	mk_message(&x->m, seq);
	x->mp[0] = &x->m;
	x->d.n_messages = 1;
	x->d.messages = x->mp;
	x->f.body_case = SEMQ__FRAME__BODY_DATA;
	x->f.data = &x->d;
}

/* A Ping frame with `nonce`, in caller storage. */
static void mk_ping(Semq__Frame *f, Semq__Ping *p, uint64_t nonce)
{
	Semq__Frame fi = SEMQ__FRAME__INIT;
	Semq__Ping pi = SEMQ__PING__INIT;

	*f = fi;
	*p = pi;
	p->nonce = nonce;
	p->sent_at = 1234;
	f->body_case = SEMQ__FRAME__BODY_PING;
	f->ping = p;
}

/* ---- round trips ----------------------------------------------------------- */

static void test_roundtrip_hello(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__Hello h = SEMQ__HELLO__INIT;

	(void)state;
	h.node_id = "P1.relay-a_2";
	h.protocol_version = SEMQ__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.role = SEMQ__ROLE__ROLE_RELAY;
	h.features = SEMQ__FEATURE__FEATURE_RELAY |
		     SEMQ__FEATURE__FEATURE_STORE_AND_FORWARD;
	h.max_frame = 1024;
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	f.hello = &h;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_HELLO);
	assert_string_equal(o->hello->node_id, "P1.relay-a_2");
	assert_int_equal(o->hello->protocol_version, 1);
	assert_int_equal(o->hello->role, SEMQ__ROLE__ROLE_RELAY);
	assert_int_equal(o->hello->features, 3);
	assert_int_equal(o->hello->max_frame, 1024);
	assert_same_bytes(&f, o);
	codec_frame_free(o);
}

static void test_roundtrip_data(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Message m[3], *mp[3];
	size_t i;

	(void)state;
	for (i = 0; i < 3; i++) {
		mk_message(&m[i], 10 + i);
		mp[i] = &m[i];
	}
	m[1].key = "";
	m[1].prev_seq = 0;
	m[1].payload.data = NULL;
	m[1].payload.len = 0;
	m[2].tombstone = 1;
	m[2].stored_by = "P1";
	m[2].deliver_at = 1700000060000;
	m[2].type = 0xffffffffu;
	d.n_messages = 3;
	d.messages = mp;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_DATA);
	assert_int_equal(o->data->n_messages, 3);
	assert_string_equal(o->data->messages[0]->origin, "R1");
	assert_string_equal(o->data->messages[0]->dest, "S1");
	assert_int_equal(o->data->messages[0]->seq, 10);
	assert_int_equal(o->data->messages[0]->prev_seq, 9);
	assert_int_equal(o->data->messages[0]->type, 2800);
	assert_string_equal(o->data->messages[0]->key, "bill-42");
	assert_int_equal(o->data->messages[0]->payload.len, 7);
	assert_memory_equal(o->data->messages[0]->payload.data, "bill 42", 7);
	assert_int_equal(o->data->messages[0]->created_at, 1700000000000);
	assert_string_equal(o->data->messages[1]->key, "");
	assert_int_equal(o->data->messages[1]->payload.len, 0);
	assert_true(o->data->messages[2]->tombstone);
	assert_string_equal(o->data->messages[2]->stored_by, "P1");
	assert_int_equal(o->data->messages[2]->deliver_at, 1700000060000);
	assert_int_equal(o->data->messages[2]->type, 0xffffffffu);
	assert_same_bytes(&f, o);
	codec_frame_free(o);
}

static void test_roundtrip_relay_ack(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__RelayAck a = SEMQ__RELAY_ACK__INIT;
	Semq__MsgId id[2], *ip[2] = {&id[0], &id[1]};

	(void)state;
	mk_id(&id[0], "R1", "S1", 1);
	mk_id(&id[1], "R1", "S2", (uint64_t)INT64_MAX); /* the largest seq */
	a.n_ids = 2;
	a.ids = ip;
	a.kind = SEMQ__RELAY_ACK__KIND__STORED;
	a.detail = "S2 offline";
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &a;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_RELAY_ACK);
	assert_int_equal(o->relay_ack->n_ids, 2);
	assert_string_equal(o->relay_ack->ids[1]->dest, "S2");
	assert_true(o->relay_ack->ids[1]->seq == (uint64_t)INT64_MAX);
	assert_int_equal(o->relay_ack->kind, SEMQ__RELAY_ACK__KIND__STORED);
	assert_string_equal(o->relay_ack->detail, "S2 offline");
	assert_same_bytes(&f, o);
	codec_frame_free(o);
}

static void test_roundtrip_ack_indication(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__AckIndication a = SEMQ__ACK_INDICATION__INIT;
	Semq__Verdict v[5], *vp[5];
	Semq__MsgId id[5];
	Semq__Verdict vi = SEMQ__VERDICT__INIT;
	size_t i;

	(void)state;
	for (i = 0; i < 5; i++) {
		mk_id(&id[i], "R1", "S1", i + 1);
		v[i] = vi;
		v[i].id = &id[i];
		v[i].result = (Semq__Result)i; /* every Result value */
		vp[i] = &v[i];
	}
	a.n_verdicts = 5;
	a.verdicts = vp;
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &a;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_ACK_INDICATION);
	assert_int_equal(o->ack_indication->n_verdicts, 5);
	for (i = 0; i < 5; i++) {
		assert_int_equal(o->ack_indication->verdicts[i]->id->seq,
				 i + 1);
		assert_int_equal(o->ack_indication->verdicts[i]->result, i);
	}
	assert_same_bytes(&f, o);
	codec_frame_free(o);
}

static void test_roundtrip_ack_response(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__AckResponse a = SEMQ__ACK_RESPONSE__INIT;
	Semq__MsgId id, *ip = &id;

	(void)state;
	mk_id(&id, "R1", "S1", 7);
	a.n_ids = 1;
	a.ids = &ip;
	a.from = "P1";
	f.body_case = SEMQ__FRAME__BODY_ACK_RESPONSE;
	f.ack_response = &a;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_ACK_RESPONSE);
	assert_int_equal(o->ack_response->n_ids, 1);
	assert_int_equal(o->ack_response->ids[0]->seq, 7);
	assert_string_equal(o->ack_response->from, "P1");
	assert_same_bytes(&f, o);
	codec_frame_free(o);
}

static void test_roundtrip_query(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__Query q = SEMQ__QUERY__INIT;
	Semq__MsgId id[2], *ip[2] = {&id[0], &id[1]};

	(void)state;
	mk_id(&id[0], "R1", "S1", 3);
	mk_id(&id[1], "R1", "S1", 4);
	q.n_ids = 2;
	q.ids = ip;
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_QUERY);
	assert_int_equal(o->query->n_ids, 2);
	assert_int_equal(o->query->ids[1]->seq, 4);
	assert_same_bytes(&f, o);
	codec_frame_free(o);
}

static void test_roundtrip_query_reply(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__QueryReply q = SEMQ__QUERY_REPLY__INIT;
	Semq__QueryAnswer a[2], *ap[2] = {&a[0], &a[1]};
	Semq__QueryAnswer ai = SEMQ__QUERY_ANSWER__INIT;
	Semq__MsgId id[2];

	(void)state;
	mk_id(&id[0], "R1", "S1", 3);
	mk_id(&id[1], "R1", "S1", 4);
	a[0] = ai;
	a[0].id = &id[0];
	a[0].received = 1;
	a[0].result = SEMQ__RESULT__RESULT_SCHEDULED;
	a[1] = ai;
	a[1].id = &id[1];
	a[1].received = 0;
	q.n_answers = 2;
	q.answers = ap;
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &q;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_QUERY_REPLY);
	assert_int_equal(o->query_reply->n_answers, 2);
	assert_true(o->query_reply->answers[0]->received);
	assert_int_equal(o->query_reply->answers[0]->result,
			 SEMQ__RESULT__RESULT_SCHEDULED);
	assert_false(o->query_reply->answers[1]->received);
	assert_int_equal(o->query_reply->answers[1]->id->seq, 4);
	assert_same_bytes(&f, o);
	codec_frame_free(o);
}

static void test_roundtrip_ping_pong(void **state)
{
	Semq__Frame f, *o;
	Semq__Ping p;
	Semq__Frame g = SEMQ__FRAME__INIT;
	Semq__Pong q = SEMQ__PONG__INIT;

	(void)state;
	mk_ping(&f, &p, UINT64_MAX);
	p.sent_at = -5; /* Ping carries anything */
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_PING);
	assert_true(o->ping->nonce == UINT64_MAX);
	assert_int_equal(o->ping->sent_at, -5);
	codec_frame_free(o);

	/* An all-default Pong is a 2-byte body: field 9, length 0. */
	g.body_case = SEMQ__FRAME__BODY_PONG;
	g.pong = &q;
	o = roundtrip(&g);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_PONG);
	assert_int_equal(o->pong->nonce, 0);
	q.nonce = 99;
	q.sent_at = 1700000000000;
	codec_frame_free(o);
	o = roundtrip(&g);
	assert_int_equal(o->pong->nonce, 99);
	assert_int_equal(o->pong->sent_at, 1700000000000);
	codec_frame_free(o);
}

static void test_roundtrip_error(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__Error e = SEMQ__ERROR__INIT;

	(void)state;
	e.code = SEMQ__ERROR__CODE__FRAME_TOO_BIG;
	e.text = "frame length 2000000 is over max_frame 1048576";
	e.fatal = 1;
	f.body_case = SEMQ__FRAME__BODY_ERROR;
	f.error = &e;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_ERROR);
	assert_int_equal(o->error->code, SEMQ__ERROR__CODE__FRAME_TOO_BIG);
	assert_string_equal(o->error->text, e.text);
	assert_true(o->error->fatal);
	assert_same_bytes(&f, o);
	codec_frame_free(o);
}

/* ---- the reader: splits and batches --------------------------------------- */

static void test_split_every_point(void **state)
{
	struct data1 x;
	uint8_t *buf;
	size_t len, k;
	char err[SEMQ_ERRLEN];

	(void)state;
	mk_data1(&x, 5);
	enc(&x.f, &buf, &len);
	for (k = 1; k < len; k++) {
		struct codec_reader *r = codec_reader_new(MAXF);
		Semq__Frame *o = NULL;

		assert_non_null(r);
		assert_int_equal(codec_reader_feed(r, buf, k), SEMQ_OK);
		assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
				 SEMQ_AGAIN);
		assert_null(o);
		assert_int_equal(codec_reader_pending(r), k);
		assert_int_equal(codec_reader_feed(r, buf + k, len - k),
				 SEMQ_OK);
		assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
				 SEMQ_OK);
		assert_non_null(o);
		assert_int_equal(o->data->messages[0]->seq, 5);
		assert_same_bytes(&x.f, o);
		assert_int_equal(codec_reader_pending(r), 0);
		codec_frame_free(o);
		codec_reader_free(r);
	}
	free(buf);
}

static void test_one_byte_at_a_time(void **state)
{
	struct codec_reader *r = codec_reader_new(MAXF);
	struct data1 x;
	Semq__Frame pf;
	Semq__Ping pp;
	uint8_t *a, *b, *all;
	size_t la, lb, i, got = 0;
	char err[SEMQ_ERRLEN];

	(void)state;
	assert_non_null(r);
	mk_data1(&x, 8);
	mk_ping(&pf, &pp, 77);
	enc(&x.f, &a, &la);
	enc(&pf, &b, &lb);
	all = malloc(la + lb);
	assert_non_null(all);
	memcpy(all, a, la);
	memcpy(all + la, b, lb);
	for (i = 0; i < la + lb; i++) {
		Semq__Frame *o = NULL;
		int rc;

		assert_int_equal(codec_reader_feed(r, all + i, 1), SEMQ_OK);
		rc = codec_reader_next(r, &o, err, sizeof err);
		if (i == la - 1) {
			assert_int_equal(rc, SEMQ_OK);
			assert_int_equal(o->body_case, SEMQ__FRAME__BODY_DATA);
			got++;
		} else if (i == la + lb - 1) {
			assert_int_equal(rc, SEMQ_OK);
			assert_int_equal(o->body_case, SEMQ__FRAME__BODY_PING);
			assert_int_equal(o->ping->nonce, 77);
			got++;
		} else {
			assert_int_equal(rc, SEMQ_AGAIN);
			assert_null(o);
		}
		codec_frame_free(o);
	}
	assert_int_equal(got, 2);
	assert_int_equal(codec_reader_pending(r), 0);
	free(a);
	free(b);
	free(all);
	codec_reader_free(r);
}

static void test_many_frames_one_feed(void **state)
{
	enum { N = 50 };
	struct codec_reader *r = codec_reader_new(MAXF);
	uint8_t *all = NULL;
	size_t total = 0, i;
	char err[SEMQ_ERRLEN];
	Semq__Frame *o = NULL;

	(void)state;
	assert_non_null(r);
	for (i = 0; i < N; i++) {
		struct data1 x;
		Semq__Frame pf;
		Semq__Ping pp;
		uint8_t *b;
		size_t lb;

		if (i % 2) {
			mk_data1(&x, i + 1);
			enc(&x.f, &b, &lb);
		} else {
			mk_ping(&pf, &pp, i);
			enc(&pf, &b, &lb);
		}
		all = realloc(all, total + lb);
		assert_non_null(all);
		memcpy(all + total, b, lb);
		total += lb;
		free(b);
	}
	/* A partial frame after the N whole ones stays buffered. */
	assert_int_equal(codec_reader_feed(r, all, total), SEMQ_OK);
	assert_int_equal(codec_reader_feed(r, all, 3), SEMQ_OK);
	for (i = 0; i < N; i++) {
		assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
				 SEMQ_OK);
		if (i % 2) {
			assert_int_equal(o->body_case, SEMQ__FRAME__BODY_DATA);
			assert_int_equal(o->data->messages[0]->seq, i + 1);
		} else {
			assert_int_equal(o->body_case, SEMQ__FRAME__BODY_PING);
			assert_int_equal(o->ping->nonce, i);
		}
		codec_frame_free(o);
	}
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err), SEMQ_AGAIN);
	assert_int_equal(codec_reader_pending(r), 3);
	/* The rest of that frame completes it. */
	assert_int_equal(codec_reader_feed(r, all + 3, total - 3), SEMQ_OK);
	for (i = 0; i < N; i++) {
		assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
				 SEMQ_OK);
		codec_frame_free(o);
	}
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err), SEMQ_AGAIN);
	assert_int_equal(codec_reader_pending(r), 0);
	free(all);
	codec_reader_free(r);
}

static void test_truncated_frame(void **state)
{
	struct codec_reader *r = codec_reader_new(MAXF);
	struct data1 x;
	uint8_t *buf;
	size_t len;
	char err[SEMQ_ERRLEN];
	Semq__Frame *o = NULL;

	(void)state;
	assert_non_null(r);
	mk_data1(&x, 1);
	enc(&x.f, &buf, &len);
	assert_int_equal(codec_reader_feed(r, buf, len - 1), SEMQ_OK);
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err), SEMQ_AGAIN);
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err), SEMQ_AGAIN);
	assert_null(o);
	assert_int_equal(codec_reader_pending(r), len - 1);
	assert_int_equal(codec_reader_feed(r, buf + len - 1, 1), SEMQ_OK);
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err), SEMQ_OK);
	assert_int_equal(o->data->messages[0]->seq, 1);
	codec_frame_free(o);
	free(buf);
	codec_reader_free(r);
}

/* ---- the reader, taking only what the next frame lacks (peer.c) ---------- */

/* Moves at most `avail` bytes of src into r the way peer.c does: no more
 * than codec_reader_want() asks for. Returns the bytes taken. */
static size_t take(struct codec_reader *r, const uint8_t *src, size_t avail)
{
	char err[SEMQ_ERRLEN] = "";
	size_t want = 0, n;
	uint8_t *dst = NULL;

	assert_int_equal(codec_reader_want(r, &want, err, sizeof err), SEMQ_OK);
	n = avail < want ? avail : want;
	if (!n)
		return 0;
	assert_int_equal(codec_reader_reserve(r, n, &dst), SEMQ_OK);
	assert_non_null(dst);
	memcpy(dst, src, n);
	return n;
}

/*
 * Two frames back to back, offered in pieces of every size: the reader
 * takes the header, then exactly the body, never a byte of the next frame;
 * want is 0 exactly when next() yields the frame.
 */
static void test_want_takes_one_frame(void **state)
{
	struct data1 x;
	Semq__Frame pf;
	Semq__Ping pp;
	uint8_t *a, *b, *all;
	size_t la, lb, piece;

	(void)state;
	mk_data1(&x, 9);
	enc(&x.f, &a, &la);
	mk_ping(&pf, &pp, 5);
	enc(&pf, &b, &lb);
	all = malloc(la + lb);
	assert_non_null(all);
	memcpy(all, a, la);
	memcpy(all + la, b, lb);
	for (piece = 1; piece <= la + lb; piece++) {
		struct codec_reader *r = codec_reader_new(MAXF);
		char err[SEMQ_ERRLEN] = "";
		size_t off = 0, want = 0, frames = 0;
		Semq__Frame *o = NULL;

		assert_non_null(r);
		while (off < la + lb) {
			size_t avail = la + lb - off;

			off += take(r, all + off,
				    avail < piece ? avail : piece);
			assert_int_equal(
				codec_reader_want(r, &want, err, sizeof err),
				SEMQ_OK);
			if (want) {
				assert_int_equal(codec_reader_next(r, &o, err,
								   sizeof err),
						 SEMQ_AGAIN);
				continue;
			}
			/* whole: not a byte of the next frame taken */
			assert_int_equal(off, frames ? la + lb : la);
			assert_int_equal(codec_reader_pending(r),
					 frames ? lb : la);
			assert_int_equal(
				codec_reader_next(r, &o, err, sizeof err),
				SEMQ_OK);
			if (frames++)
				assert_int_equal(o->ping->nonce, 5);
			else
				assert_int_equal(o->data->messages[0]->seq, 9);
			codec_frame_free(o);
		}
		assert_int_equal(frames, 2);
		assert_int_equal(codec_reader_want(r, &want, err, sizeof err),
				 SEMQ_OK);
		assert_int_equal(want, CODEC_HDR);
		codec_reader_free(r);
	}
	free(all);
	free(a);
	free(b);
}

/* want refuses an oversized or empty header before any body is asked for,
 * poisons the reader, and the limit set_max gives applies to the next
 * header (a connection's limit before and after its handshake). */
static void test_want_checks_header(void **state)
{
	struct codec_reader *r = codec_reader_new(1024);
	uint8_t big[CODEC_HDR] = {0, 0, 4, 1}, zero[CODEC_HDR] = {0};
	char err[SEMQ_ERRLEN] = "", err2[SEMQ_ERRLEN] = "";
	size_t want = 99;
	uint8_t *dst = NULL;
	Semq__Frame *o = NULL;

	(void)state;
	assert_non_null(r);
	assert_int_equal(take(r, big, 2), 2);
	assert_int_equal(codec_reader_want(r, &want, err, sizeof err), SEMQ_OK);
	assert_int_equal(want, 2);
	assert_int_equal(take(r, big + 2, 2), 2);
	assert_int_equal(codec_reader_want(r, &want, err, sizeof err),
			 SEMQ_ERR_TOO_BIG);
	assert_int_equal(want, 0);
	assert_non_null(strstr(err, "1025"));
	assert_non_null(strstr(err, "1024"));
	/* poisoned: the same error, nothing more taken */
	assert_int_equal(codec_reader_want(r, &want, err2, sizeof err2),
			 SEMQ_ERR_TOO_BIG);
	assert_string_equal(err, err2);
	assert_int_equal(codec_reader_reserve(r, 1, &dst), SEMQ_ERR_TOO_BIG);
	assert_null(dst);
	assert_int_equal(codec_reader_next(r, &o, err2, sizeof err2),
			 SEMQ_ERR_TOO_BIG);
	assert_null(o);
	codec_reader_free(r);

	r = codec_reader_new(1024);
	assert_non_null(r);
	assert_int_equal(take(r, zero, sizeof zero), CODEC_HDR);
	assert_int_equal(codec_reader_want(r, &want, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_non_null(strstr(err, "length 0"));
	codec_reader_free(r);

	/* 1025 bytes: over a limit of 1024, within one raised to 2048 */
	r = codec_reader_new(1024);
	assert_non_null(r);
	codec_reader_set_max(r, 2048);
	assert_int_equal(take(r, big, sizeof big), CODEC_HDR);
	assert_int_equal(codec_reader_want(r, &want, err, sizeof err), SEMQ_OK);
	assert_int_equal(want, 1025);
	codec_reader_set_max(r, 1024);
	assert_int_equal(codec_reader_want(r, &want, err, sizeof err),
			 SEMQ_ERR_TOO_BIG);
	codec_reader_free(r);
	codec_reader_set_max(NULL, 1); /* accepts NULL */
}

/* ---- the reader: bad frames --------------------------------------------- */

static void test_frame_len(void **state)
{
	uint8_t h[CODEC_HDR] = {0, 0, 4, 0};
	size_t len = 0;
	char err[SEMQ_ERRLEN] = "";

	(void)state;
	assert_int_equal(codec_frame_len(h, 1024, &len, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(len, 1024);
	h[3] = 1;
	assert_int_equal(codec_frame_len(h, 1024, &len, err, sizeof err),
			 SEMQ_ERR_TOO_BIG);
	assert_non_null(strstr(err, "1025"));
	assert_non_null(strstr(err, "1024"));
	memset(h, 0xff, sizeof h);
	assert_int_equal(codec_frame_len(h, MAXF, &len, err, sizeof err),
			 SEMQ_ERR_TOO_BIG);
	assert_non_null(strstr(err, "4294967295"));
	assert_non_null(strstr(err, "1048576"));
	memset(h, 0, sizeof h);
	assert_int_equal(codec_frame_len(h, MAXF, &len, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_non_null(strstr(err, "length 0"));
}

static void test_oversized_header(void **state)
{
	struct codec_reader *r = codec_reader_new(1024);
	uint8_t hdr[CODEC_HDR] = {0, 0, 4, 1}; /* 1025 */
	uint8_t *body = calloc(1, 4096);
	char err[SEMQ_ERRLEN] = "", err2[SEMQ_ERRLEN] = "";
	Semq__Frame *o = NULL;

	(void)state;
	assert_non_null(r);
	assert_non_null(body);
	assert_int_equal(codec_reader_feed(r, hdr, sizeof hdr), SEMQ_OK);
	/* Refused on the header alone, before any body byte arrived. */
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
			 SEMQ_ERR_TOO_BIG);
	assert_null(o);
	assert_non_null(strstr(err, "1025"));
	assert_non_null(strstr(err, "1024"));
	assert_int_equal(codec_reader_pending(r), 0);
	/* The body that follows is not buffered. */
	assert_int_equal(codec_reader_feed(r, body, 4096), SEMQ_OK);
	assert_int_equal(codec_reader_pending(r), 0);
	assert_int_equal(codec_reader_next(r, &o, err2, sizeof err2),
			 SEMQ_ERR_TOO_BIG);
	assert_string_equal(err, err2);
	free(body);
	codec_reader_free(r);

	/* A frame exactly at max_frame is accepted; one byte over is not. */
	{
		struct data1 x;
		uint8_t *buf;
		size_t len;

		mk_data1(&x, 1);
		enc(&x.f, &buf, &len);
		r = codec_reader_new(len - CODEC_HDR);
		assert_int_equal(codec_reader_feed(r, buf, len), SEMQ_OK);
		assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
				 SEMQ_OK);
		codec_frame_free(o);
		codec_reader_free(r);
		r = codec_reader_new(len - CODEC_HDR - 1);
		assert_int_equal(codec_reader_feed(r, buf, len), SEMQ_OK);
		assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
				 SEMQ_ERR_TOO_BIG);
		codec_reader_free(r);
		free(buf);
	}
}

static void test_zero_length(void **state)
{
	struct codec_reader *r = codec_reader_new(MAXF);
	uint8_t zero[CODEC_HDR] = {0, 0, 0, 0};
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *o = NULL;

	(void)state;
	assert_non_null(r);
	assert_int_equal(codec_reader_feed(r, zero, sizeof zero), SEMQ_OK);
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "length 0"));
	codec_reader_free(r);
}

static void test_garbage(void **state)
{
	/* Field 1 as a length-delimited body claiming 127 bytes; then a
	 * field with wire type 7, which does not exist. */
	static const uint8_t g1[] = {0x0a, 0x7f, 0x01, 0x02};
	static const uint8_t g2[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	static const uint8_t g3[] = {0x0f};
	struct codec_reader *r = codec_reader_new(MAXF);
	uint8_t frame[CODEC_HDR + sizeof g2] = {0, 0, 0, sizeof g2};
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *o = (Semq__Frame *)1;

	(void)state;
	assert_int_equal(codec_decode_body(g1, sizeof g1, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "frame does not decode"));
	assert_int_equal(codec_decode_body(g2, sizeof g2, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_non_null(strstr(err, "frame does not decode"));
	assert_int_equal(codec_decode_body(g3, sizeof g3, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_non_null(strstr(err, "frame does not decode"));

	memcpy(frame + CODEC_HDR, g2, sizeof g2);
	assert_non_null(r);
	assert_int_equal(codec_reader_feed(r, frame, sizeof frame), SEMQ_OK);
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "frame does not decode"));
	codec_reader_free(r);
}

static void test_no_body(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	/* A Frame with only a known-but-empty field would be a body; this is
	 * a Frame whose bytes hold nothing but an unrelated varint field 20. */
	static const uint8_t only_other[] = {0xa0, 0x01, 0x05};
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *o = (Semq__Frame *)1;
	uint8_t *buf = NULL;
	size_t len = 0;

	(void)state;
	assert_refused_mem(&f, "frame has no known body");
	/* Encoded, it is a zero-length frame, which the receiver refuses. */
	assert_int_equal(codec_encode(&f, MAXF, &buf, &len), SEMQ_OK);
	assert_int_equal(len, CODEC_HDR);
	assert_memory_equal(buf, "\0\0\0\0", 4);
	free(buf);
	/* An empty body given to decode directly. */
	assert_int_equal(
		codec_decode_body((const uint8_t *)"", 0, &o, err, sizeof err),
		SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "frame has no known body"));
	assert_int_equal(codec_decode_body(only_other, sizeof only_other, &o,
					   err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "frame has no known body"));
}

static void test_unknown_body(void **state)
{
	/* Field 99, length-delimited (tag (99 << 3) | 2 = 794 = 0x9a 0x06),
	 * holding a 2-byte message {field 1 = 1}: a body from a newer node. */
	static const uint8_t frame[] = {0,    0,    0,    5,   0x9a,
					0x06, 0x02, 0x08, 0x01};
	struct codec_reader *r = codec_reader_new(MAXF);
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *o = (Semq__Frame *)1;

	(void)state;
	assert_int_equal(codec_decode_body(frame + CODEC_HDR,
					   sizeof frame - CODEC_HDR, &o, err,
					   sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "frame has no known body"));
	assert_non_null(r);
	assert_int_equal(codec_reader_feed(r, frame, sizeof frame), SEMQ_OK);
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_non_null(strstr(err, "frame has no known body"));
	codec_reader_free(r);
}

/* A field numbered 0 is malformed protobuf: protobuf-c would keep it as an
 * unknown field and write it back out (a relay forwarding it would make the
 * next hop close the link), so it is refused at the edge, at any depth. */
static void test_field_number_zero(void **state)
{
	/* Frame { error (10) { code = 5, <field 0 as the overlong varint tag
	 * 0x80 0x00, value 0>, <again, fixed32> } }: protobuf-c accepts the
	 * overlong tag (found by fuzz_frame) */
	static const uint8_t overlong[] = {0x52, 0x08, 0x08, 0x05, 0x80,
					   0x00, 0x00, 0x80, 0x00, 0x00};
	/* the plain forms, nested and at the top: protobuf-c refuses them */
	static const uint8_t nested[] = {0x42, 0x05, 0x05, 1, 2, 3, 4};
	static const uint8_t top[] = {0x05, 1, 2, 3, 4, 0x42, 0x00};
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *o = (Semq__Frame *)1;

	(void)state;
	assert_int_equal(codec_decode_body(overlong, sizeof overlong, &o, err,
					   sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "field numbered 0"));
	o = (Semq__Frame *)1;
	assert_int_equal(
		codec_decode_body(nested, sizeof nested, &o, err, sizeof err),
		SEMQ_ERR_PROTO);
	assert_null(o);
	o = (Semq__Frame *)1;
	assert_int_equal(
		codec_decode_body(top, sizeof top, &o, err, sizeof err),
		SEMQ_ERR_PROTO);
	assert_null(o);
}

/* ---- field rules ------------------------------------------------------------ */

static void test_invalid_ids(void **state)
{
	char long65[66], long64[65];
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Message m[4], *mp[4];
	Semq__Hello h = SEMQ__HELLO__INIT;
	Semq__AckResponse ar = SEMQ__ACK_RESPONSE__INIT;
	Semq__Query q = SEMQ__QUERY__INIT;
	Semq__MsgId id, *ip = &id;
	size_t i;

	(void)state;
	memset(long65, 'a', 65);
	long65[65] = '\0';
	memset(long64, 'a', 64);
	long64[64] = '\0';
	for (i = 0; i < 4; i++) {
		mk_message(&m[i], i + 1);
		mp[i] = &m[i];
	}
	d.n_messages = 4;
	d.messages = mp;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	m[3].origin = long64;
	m[3].dest = "a.b_c-D9";
	assert_valid(&f);

	m[3].origin = "a b";
	assert_refused(&f, "Data.messages[3].origin: 'a b' is not a node id");
	m[3].origin = long65;
	assert_refused(&f, "Data.messages[3].origin: 'aaaa");
	m[3].origin = "";
	assert_refused(&f, "Data.messages[3].origin: '' is not a node id");
	m[3].origin = "R1";
	m[3].dest = "S1/x";
	assert_refused(&f, "Data.messages[3].dest: 'S1/x' is not a node id");
	m[3].dest = "S\n1";
	assert_refused(&f, "Data.messages[3].dest: 'S\\x0a1' is not");
	m[3].dest = "S1";
	m[0].stored_by = "P 1";
	assert_refused(&f, "Data.messages[0].stored_by: 'P 1'");
	m[0].stored_by = long65;
	assert_refused(&f, "Data.messages[0].stored_by");
	m[0].stored_by = "";
	assert_valid(&f);

	h.node_id = "";
	h.protocol_version = 1;
	h.role = SEMQ__ROLE__ROLE_EDGE;
	h.max_frame = MAXF;
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	f.hello = &h;
	assert_refused(&f, "Hello.node_id: '' is not a node id");
	h.node_id = long65;
	assert_refused(&f, "Hello.node_id");
	h.node_id = "R1";
	assert_valid(&f);

	mk_id(&id, "R1", "S1", 1);
	ar.n_ids = 1;
	ar.ids = &ip;
	ar.from = "";
	f.body_case = SEMQ__FRAME__BODY_ACK_RESPONSE;
	f.ack_response = &ar;
	assert_refused(&f, "AckResponse.from: '' is not a node id");
	ar.from = "R1";
	assert_valid(&f);
	id.dest = "S 1";
	assert_refused(&f, "AckResponse.ids[0].dest: 'S 1' is not a node id");

	id.dest = "S1";
	id.origin = long65;
	q.n_ids = 1;
	q.ids = &ip;
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	assert_refused(&f, "Query.ids[0].origin");
}

static void test_seq_zero(void **state)
{
	struct data1 x;
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__RelayAck a = SEMQ__RELAY_ACK__INIT;
	Semq__MsgId id, *ip = &id;

	(void)state;
	mk_data1(&x, 1);
	x.m.seq = 0;
	x.m.prev_seq = 0;
	assert_refused(&x.f, "Data.messages[0].seq: 0");

	mk_id(&id, "R1", "S1", 0);
	a.n_ids = 1;
	a.ids = &ip;
	a.kind = SEMQ__RELAY_ACK__KIND__FORWARDED;
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &a;
	assert_refused(&f, "RelayAck.ids[0].seq: 0");
	id.seq = 1;
	assert_valid(&f);
	/* above what a store keeps (a signed 64-bit integer) */
	id.seq = (uint64_t)INT64_MAX + 1;
	assert_refused(&f, "RelayAck.ids[0].seq: 9223372036854775808 (must be "
			   "1..2^63-1)");
	id.seq = (uint64_t)INT64_MAX;
	assert_valid(&f);
	mk_data1(&x, 1);
	x.m.seq = UINT64_MAX;
	assert_refused(&x.f, "Data.messages[0].seq: 18446744073709551615");
	x.m.seq = (uint64_t)INT64_MAX;
	assert_valid(&x.f);
}

static void test_prev_seq(void **state)
{
	struct data1 x;

	(void)state;
	mk_data1(&x, 5);
	x.m.prev_seq = 4;
	assert_valid(&x.f);
	x.m.prev_seq = 5;
	assert_refused(&x.f, "Data.messages[0].prev_seq: 5 is not below seq 5");
	x.m.prev_seq = 6;
	assert_refused(&x.f, "Data.messages[0].prev_seq: 6");
	x.m.prev_seq = 0;
	assert_valid(&x.f);
	/* Only a message with a key has a previous one. */
	x.m.key = (char *)"";
	assert_valid(&x.f);
	x.m.prev_seq = 4;
	assert_refused(&x.f, "Data.messages[0].prev_seq: 4, but the message "
			     "has no key (prev_seq is the previous message of "
			     "the same key)");
}

static void test_key_and_times(void **state)
{
	struct data1 x;
	char key[SEMQ_KEY_MAX + 2];

	(void)state;
	mk_data1(&x, 5);
	memset(key, 'k', sizeof key);
	key[SEMQ_KEY_MAX] = '\0';
	x.m.key = key;
	assert_valid(&x.f);
	key[SEMQ_KEY_MAX] = 'k';
	key[SEMQ_KEY_MAX + 1] = '\0';
	assert_refused(&x.f, "Data.messages[0].key: 256 bytes, more than 255");
	x.m.key = "Bon-\xc3\xa9t\xc3\xa9-\xe4\xb8\xad"; /* UTF-8: fine */
	assert_valid(&x.f);
	x.m.key = "K\xff"
		  "1"; /* not UTF-8 */
	assert_refused(&x.f, "Data.messages[0].key: not UTF-8 text");
	x.m.key = "K\xc0\xaf"; /* an overlong '/' */
	assert_refused(&x.f, "Data.messages[0].key: not UTF-8 text");
	x.m.key = "";
	x.m.prev_seq = 0; /* no key, no previous message */
	x.m.deliver_at = -1;
	assert_refused(&x.f, "Data.messages[0].deliver_at: -1");
	x.m.deliver_at = 0;
	x.m.created_at = -7;
	assert_refused(&x.f, "Data.messages[0].created_at: -7");
}

static void test_bad_enums(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Hello h = SEMQ__HELLO__INIT;
	Semq__RelayAck ra = SEMQ__RELAY_ACK__INIT;
	Semq__AckIndication ai = SEMQ__ACK_INDICATION__INIT;
	Semq__Verdict v = SEMQ__VERDICT__INIT, *vp = &v;
	Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
	Semq__QueryAnswer qa = SEMQ__QUERY_ANSWER__INIT, *qap = &qa;
	Semq__Error e = SEMQ__ERROR__INIT;
	Semq__MsgId id, *ip = &id;

	(void)state;
	mk_id(&id, "R1", "S1", 1);

	/* Hello: role, version, max_frame */
	h.node_id = "R1";
	h.protocol_version = 1;
	h.role = SEMQ__ROLE__ROLE_SERVER;
	h.max_frame = 1024;
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	f.hello = &h;
	assert_valid(&f);
	h.role = SEMQ__ROLE__ROLE_UNSPECIFIED;
	assert_refused(&f, "Hello.role: 0");
	h.role = (Semq__Role)4;
	assert_refused(&f, "Hello.role: 4");
	h.role = (Semq__Role)-1;
	assert_refused(&f, "Hello.role: -1");
	h.role = SEMQ__ROLE__ROLE_EDGE;
	h.protocol_version = 0;
	assert_refused(&f, "Hello.protocol_version: 0");
	h.protocol_version = 2; /* a newer version is Hello's to refuse */
	assert_valid(&f);
	h.max_frame = 1023;
	assert_refused(&f, "Hello.max_frame: 1023");

	/* RelayAck.kind */
	ra.n_ids = 1;
	ra.ids = &ip;
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &ra;
	assert_refused(&f, "RelayAck.kind: 0"); /* KIND_UNSPECIFIED */
	ra.kind = (Semq__RelayAck__Kind)4;
	assert_refused(&f, "RelayAck.kind: 4");
	ra.kind = SEMQ__RELAY_ACK__KIND__UNREACHABLE;
	assert_valid(&f);

	/* Verdict.result */
	v.id = &id;
	v.result = (Semq__Result)5;
	ai.n_verdicts = 1;
	ai.verdicts = &vp;
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &ai;
	assert_refused(&f, "AckIndication.verdicts[0].result: 5");
	v.result = (Semq__Result)-1;
	assert_refused(&f, "AckIndication.verdicts[0].result: -1");
	v.result = SEMQ__RESULT__RESULT_CANCELLED;
	assert_valid(&f);

	/* QueryAnswer.result */
	qa.id = &id;
	qa.result = (Semq__Result)9;
	qr.n_answers = 1;
	qr.answers = &qap;
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &qr;
	assert_refused(&f, "QueryReply.answers[0].result: 9");
	qa.result = SEMQ__RESULT__RESULT_DUPLICATE;
	assert_valid(&f);

	/* Error.code */
	e.code = (Semq__Error__Code)10;
	f.body_case = SEMQ__FRAME__BODY_ERROR;
	f.error = &e;
	assert_refused(&f, "Error.code: 10");
	e.code = (Semq__Error__Code)-3;
	assert_refused(&f, "Error.code: -3");
	e.code = SEMQ__ERROR__CODE__SHUTDOWN;
	assert_valid(&f);
	e.code = SEMQ__ERROR__CODE__DEST_UNAVAILABLE;
	assert_valid(&f);
}

static void test_lengths_and_counts(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__RelayAck ra = SEMQ__RELAY_ACK__INIT;
	Semq__AckIndication ai = SEMQ__ACK_INDICATION__INIT;
	Semq__AckResponse ar = SEMQ__ACK_RESPONSE__INIT;
	Semq__Query q = SEMQ__QUERY__INIT;
	Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
	Semq__Error e = SEMQ__ERROR__INIT;
	Semq__MsgId id, **many;
	Semq__Message m, **msgs;
	char text[1026];
	size_t i;

	(void)state;
	mk_id(&id, "R1", "S1", 1);
	mk_message(&m, 1);
	many = malloc(65537 * sizeof *many);
	msgs = malloc(10001 * sizeof *msgs);
	assert_non_null(many);
	assert_non_null(msgs);
	for (i = 0; i < 65537; i++)
		many[i] = &id;
	for (i = 0; i < 10001; i++)
		msgs[i] = &m;

	/* Empty lists, on the wire too. */
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	assert_refused(&f, "Data.messages: empty");
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &ra;
	ra.kind = SEMQ__RELAY_ACK__KIND__FORWARDED;
	assert_refused(&f, "RelayAck.ids: empty");
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &ai;
	assert_refused(&f, "AckIndication.verdicts: empty");
	f.body_case = SEMQ__FRAME__BODY_ACK_RESPONSE;
	f.ack_response = &ar;
	ar.from = "R1";
	assert_refused(&f, "AckResponse.ids: empty");
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	assert_refused(&f, "Query.ids: empty");
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &qr;
	assert_refused(&f, "QueryReply.answers: empty");

	/* The upper bounds, exactly and one over (in memory). */
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d; /* the bodies share a union: point at each anew */
	d.messages = msgs;
	d.n_messages = 10000;
	assert_valid(&f);
	d.n_messages = 10001;
	assert_refused_mem(&f, "Data.messages: 10001 entries");
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	q.ids = many;
	q.n_ids = 65536;
	assert_valid(&f);
	q.n_ids = 65537;
	assert_refused_mem(&f, "Query.ids: 65537 entries");
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &ra;
	ra.ids = many;
	ra.n_ids = 65537;
	assert_refused_mem(&f, "RelayAck.ids: 65537 entries");
	ra.n_ids = 1;

	/* RelayAck.detail and Error.text: at most 1024 bytes. */
	memset(text, 'x', sizeof text);
	text[1024] = '\0';
	ra.detail = text;
	assert_valid(&f);
	text[1024] = 'x';
	text[1025] = '\0';
	assert_refused(&f, "RelayAck.detail: 1025 bytes");
	f.body_case = SEMQ__FRAME__BODY_ERROR;
	f.error = &e;
	e.code = SEMQ__ERROR__CODE__PROTOCOL;
	e.text = text;
	assert_refused(&f, "Error.text: 1025 bytes");
	text[1024] = '\0';
	assert_valid(&f);

	free(many);
	free(msgs);
}

/*
 * A frame that would unpack to many times its size in memory (1,000,000
 * empty Messages: 2 MB on the wire, about 200 MB unpacked) does not
 * decode: the unpack stops at 16 times the frame's size, before any list
 * limit is even looked at. The legitimate worst case (10,000 messages, in
 * test_lengths_and_counts) decodes.
 */
static void test_unpack_budget(void **state)
{
	const size_t n = 1000000;
	size_t dlen = 2 * n, k = 0, i;
	uint8_t *body = malloc(16 + dlen);
	Semq__Frame *o = NULL;
	char err[256];

	(void)state;
	assert_non_null(body);
	body[k++] = 0x12; /* Frame.data, length-delimited */
	for (i = dlen; i >= 0x80; i >>= 7)
		body[k++] = (uint8_t)(i | 0x80);
	body[k++] = (uint8_t)i;
	for (i = 0; i < n; i++) {
		body[k++] = 0x0a; /* Data.messages, an empty Message */
		body[k++] = 0x00;
	}
	assert_int_equal(codec_decode_body(body, k, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "16 times its size"));
	free(body);
}

static void test_null_pointers(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Message m, *mp[2];
	Semq__AckIndication ai = SEMQ__ACK_INDICATION__INIT;
	Semq__Verdict v = SEMQ__VERDICT__INIT, *vp = &v;
	Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
	Semq__QueryAnswer qa = SEMQ__QUERY_ANSWER__INIT, *qap = &qa;
	Semq__Query q = SEMQ__QUERY__INIT;
	Semq__MsgId *nullid = NULL;

	(void)state;
	/* A body case with no body. */
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	assert_refused_mem(&f, "Hello: missing");
	f.body_case = SEMQ__FRAME__BODY_PING;
	assert_refused_mem(&f, "Ping: missing");
	assert_int_equal(codec_validate(NULL, NULL, 0), SEMQ_ERR_PROTO);

	/* A NULL element of a list, a list with a count and no array. */
	mk_message(&m, 1);
	mp[0] = &m;
	mp[1] = NULL;
	d.n_messages = 2;
	d.messages = mp;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	assert_refused_mem(&f, "Data.messages[1]: missing");
	d.messages = NULL;
	assert_refused_mem(&f, "Data.messages: 2 entries but no array");
	d.n_messages = 1;
	d.messages = mp;
	m.key = NULL;
	assert_refused_mem(&f, "Data.messages[0].key: missing");
	m.key = "";
	m.origin = NULL;
	assert_refused_mem(&f, "Data.messages[0].origin: missing");
	m.origin = "R1";
	m.payload.data = NULL;
	assert_refused_mem(&f, "Data.messages[0].payload");
	m.payload.len = 0;
	assert_valid(&f);

	q.n_ids = 1;
	q.ids = &nullid;
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	assert_refused_mem(&f, "Query.ids[0]: missing");

	/* A Verdict or QueryAnswer without its id: possible on the wire. */
	ai.n_verdicts = 1;
	ai.verdicts = &vp;
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &ai;
	assert_refused(&f, "AckIndication.verdicts[0].id: missing");
	qr.n_answers = 1;
	qr.answers = &qap;
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &qr;
	assert_refused(&f, "QueryReply.answers[0].id: missing");
}

/* Encodes f, replaces the first `mark` byte in its body by NUL, decodes. */
static void assert_nul_refused(const Semq__Frame *f, char mark,
			       const char *want)
{
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *o = (Semq__Frame *)1;
	uint8_t *body, *at;
	size_t len;

	enc_body(f, &body, &len);
	at = memchr(body, mark, len);
	assert_non_null(at);
	*at = 0;
	assert_int_equal(codec_decode_body(body, len, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	if (!strstr(err, want))
		fail_msg("decode said \"%s\", wanted \"%s\"", err, want);
	free(body);
}

/* Hello.instance: 0..64 of [A-Za-z0-9._:-]; "" (or absent: an older node)
 * is the node's only instance. */
static void test_hello_instance(void **state)
{
	/* Frame{hello{node_id "R1", protocol_version 1, role EDGE,
	 * max_frame 1024}}: a Hello from before the field existed. */
	static const uint8_t old_hello[] = {0x0a, 0x0b, 0x0a, 0x02, 'R',
					    '1',  0x10, 0x01, 0x18, 0x01,
					    0x28, 0x80, 0x08};
	char err[SEMQ_ERRLEN] = "", name[70];
	Semq__Frame f = SEMQ__FRAME__INIT, *o = NULL;
	Semq__Hello h = SEMQ__HELLO__INIT;

	(void)state;
	assert_int_equal(codec_decode_body(old_hello, sizeof old_hello, &o, err,
					   sizeof err),
			 SEMQ_OK);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_HELLO);
	assert_string_equal(o->hello->node_id, "R1");
	assert_string_equal(o->hello->instance, "");
	codec_frame_free(o);

	h.node_id = "S1";
	h.protocol_version = SEMQ__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.role = SEMQ__ROLE__ROLE_SERVER;
	h.max_frame = 4096;
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	f.hello = &h;
	assert_valid(&f); /* the INIT value: "" */
	h.instance = "db1-a.2_x:7103";
	o = roundtrip(&f);
	assert_string_equal(o->hello->instance, "db1-a.2_x:7103");
	assert_same_bytes(&f, o);
	codec_frame_free(o);

	/* 64 characters are fine, 65 are not. */
	memset(name, 'i', 65);
	name[64] = '\0';
	h.instance = name;
	o = roundtrip(&f);
	assert_string_equal(o->hello->instance, name);
	codec_frame_free(o);
	name[64] = 'i';
	name[65] = '\0';
	assert_refused(&f, "Hello.instance: 'iiii");
	assert_refused(&f, "is not an instance name (0-64 of A-Za-z0-9._:-)");

	/* Characters outside the set, shown quoted. */
	h.instance = "a b";
	assert_refused(&f, "Hello.instance: 'a b' is not an instance name");
	h.instance = "S1/a";
	assert_refused(&f, "Hello.instance: 'S1/a' is not an instance name");
	h.instance = "caf\xc3\xa9";
	assert_refused(
		&f, "Hello.instance: 'caf\\xc3\\xa9' is not an instance name");
	h.instance = "a@b";
	assert_refused(&f, "Hello.instance: 'a@b' is not an instance name");

	/* A NUL byte would cut the name short: refused, not truncated. */
	h.instance = "a#b";
	assert_nul_refused(&f, '#', "Hello.instance: contains a NUL");
	/* Built in memory without a string at all. */
	h.instance = NULL;
	assert_refused_mem(&f, "Hello.instance: missing");
}

static void test_nul_in_string(void **state)
{
	/* Query{ids[{origin "R1\0x", dest "S1", seq 1}]}: protobuf-c would
	 * hand out "R1", a valid id, if the codec did not look. */
	static const uint8_t q[] = {0x32, 0x0e, 0x0a, 0x0c, 0x0a, 0x04,
				    'R',  '1',  0,    'x',  0x12, 0x02,
				    'S',  '1',  0x18, 0x01};
	char err[SEMQ_ERRLEN] = "";
	Semq__Frame *o = (Semq__Frame *)1;
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Message m[2], *mp[2] = {&m[0], &m[1]};
	Semq__RelayAck ra = SEMQ__RELAY_ACK__INIT;
	Semq__MsgId id, *ip = &id;

	(void)state;
	assert_int_equal(codec_decode_body(q, sizeof q, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "Query.ids[0].origin: contains a NUL"));

	/* The key of the second message of a Data frame. */
	mk_message(&m[0], 1);
	mk_message(&m[1], 2);
	m[1].key = "ab#c";
	d.n_messages = 2;
	d.messages = mp;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	assert_valid(&f);
	assert_nul_refused(&f, '#', "Data.messages[1].key: contains a NUL");

	/* RelayAck.detail */
	mk_id(&id, "R1", "S1", 1);
	ra.n_ids = 1;
	ra.ids = &ip;
	ra.kind = SEMQ__RELAY_ACK__KIND__FORWARDED;
	ra.detail = "via#P1";
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &ra;
	assert_nul_refused(&f, '#', "RelayAck.detail: contains a NUL");
}

/* Trace and TraceReply (semqctl trace): a round trip, then each rule. */
static void test_trace_frames(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__Trace t = SEMQ__TRACE__INIT;
	Semq__TraceReply tr = SEMQ__TRACE_REPLY__INIT;
	Semq__TraceHop h[2], *hp[2] = {&h[0], &h[1]};
	Semq__TraceRecord rc[2], *rp[2] = {&rc[0], &rc[1]};
	Semq__MsgId id[CODEC_TRACE_IDS + 1], *ip[CODEC_TRACE_IDS + 1];
	Semq__TraceHop *many[CODEC_TRACE_HOPS + 1];
	size_t i;

	(void)state;
	for (i = 0; i <= CODEC_TRACE_IDS; i++) {
		mk_id(&id[i], "R1", "S1", i + 1);
		ip[i] = &id[i];
	}
	t.request = 9;
	t.n_ids = 2;
	t.ids = ip;
	f.body_case = SEMQ__FRAME__BODY_TRACE;
	f.trace = &t;
	f.hops = 1;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_TRACE);
	assert_int_equal(o->trace->request, 9);
	assert_int_equal(o->trace->n_ids, 2);
	assert_int_equal(o->trace->ids[1]->seq, 2);
	assert_int_equal(o->hops, 1);
	codec_frame_free(o);
	t.request = 0;
	assert_refused(&f, "Trace.request: 0");
	t.request = 9;
	t.n_ids = CODEC_TRACE_IDS + 1;
	assert_refused(&f, "Trace.ids: 65 entries, more than 64");
	t.n_ids = 0;
	assert_refused(&f, "Trace.ids: empty");
	t.n_ids = 1;
	id[0].seq = 0;
	assert_refused(&f, "Trace.ids[0].seq: 0");
	id[0].seq = 1;
	id[0].origin = "R 1";
	assert_refused(&f, "Trace.ids[0].origin");
	id[0].origin = "R1";

	/* A reply: the relay's custody copy, then the destination's row. */
	for (i = 0; i < 2; i++) {
		semq__trace_record__init(&rc[i]);
		rc[i].id = &id[0];
		rc[i].result = -1;
		semq__trace_hop__init(&h[i]);
		h[i].records = &rp[i];
		h[i].n_records = 1;
	}
	h[0].node = "P1";
	h[0].relay = 1;
	rc[0].outbound = 1;
	rc[0].status = 6;
	rc[0].custodian = "P1";
	rc[0].next_hop = "S1";
	h[1].node = "S1";
	rc[1].receipt = SEMQ__TRACE_RECORD__RECEIPT__RECEIVED;
	rc[1].receipt_result = 1;
	rc[1].redo_id = 4;
	rc[1].redo_status = -1;
	rc[1].redo_error = "permanent: bad key";
	rc[1].via = "P1";
	tr.request = 9;
	tr.n_hops = 2;
	tr.hops = hp;
	f.body_case = SEMQ__FRAME__BODY_TRACE_REPLY;
	f.trace_reply = &tr;
	f.hops = 0;
	o = roundtrip(&f);
	assert_int_equal(o->trace_reply->n_hops, 2);
	assert_string_equal(o->trace_reply->hops[0]->node, "P1");
	assert_int_equal(o->trace_reply->hops[0]->records[0]->status, 6);
	assert_int_equal(o->trace_reply->hops[1]->records[0]->redo_status, -1);
	assert_string_equal(o->trace_reply->hops[1]->records[0]->redo_error,
			    "permanent: bad key");
	assert_same_bytes(&f, o);
	codec_frame_free(o);

	tr.request = 0;
	assert_refused(&f, "TraceReply.request: 0");
	tr.request = 9;
	for (i = 0; i <= CODEC_TRACE_HOPS; i++)
		many[i] = &h[0];
	tr.hops = many;
	tr.n_hops = CODEC_TRACE_HOPS + 1;
	assert_refused(&f, "TraceReply.hops: 17 entries, more than 16");
	tr.hops = hp;
	tr.n_hops = 2;
	h[0].node = "";
	assert_refused(&f, "TraceReply.hops[0].node");
	h[0].node = "P1";
	h[0].instance = "a b";
	assert_refused(&f, "TraceReply.hops[0].instance");
	h[0].instance = "";
	h[0].note = "bell\a";
	assert_refused(&f, "TraceReply.hops[0].note: not printable");
	h[0].note = "";
	rc[0].status = 5;
	assert_refused(&f, "hops[0].records[0].status: 5 is not an outbound");
	rc[0].status = 6;
	rc[0].result = 9;
	assert_refused(&f, "hops[0].records[0].result: 9");
	rc[0].result = -1;
	rc[0].next_hop = "S 1";
	assert_refused(&f, "hops[0].records[0].next_hop");
	rc[0].next_hop = "";
	rc[1].receipt = 4;
	assert_refused(&f, "hops[1].records[0].receipt: 4");
	rc[1].receipt = SEMQ__TRACE_RECORD__RECEIPT__NOT_RECEIVED;
	rc[1].redo_status = 3;
	assert_refused(&f, "hops[1].records[0].redo_id 4 / redo_status 3");
	rc[1].redo_status = -1;
	rc[1].key = "\xff";
	assert_refused(&f, "hops[1].records[0].key: not UTF-8");
	rc[1].key = "";
	rc[1].id = NULL;
	assert_refused_mem(&f, "hops[1].records[0].id: missing");
	rc[1].id = &id[0];
	assert_valid(&f);
	rc[1].redo_error = "a~b";
	assert_nul_refused(&f, '~', "records[0].redo_error: contains a NUL");
}

static void test_poisoned_reader(void **state)
{
	struct codec_reader *r = codec_reader_new(MAXF);
	struct data1 x;
	uint8_t *buf;
	size_t len;
	int i;
	char err[SEMQ_ERRLEN] = "", again[SEMQ_ERRLEN] = "";
	Semq__Frame *o = NULL;

	(void)state;
	assert_non_null(r);
	/* A good frame, a bad one (seq 0), then a good one. */
	mk_data1(&x, 1);
	enc(&x.f, &buf, &len);
	assert_int_equal(codec_reader_feed(r, buf, len), SEMQ_OK);
	free(buf);
	x.m.seq = 0;
	x.m.prev_seq = 0;
	enc(&x.f, &buf, &len);
	assert_int_equal(codec_reader_feed(r, buf, len), SEMQ_OK);
	free(buf);
	mk_data1(&x, 2);
	enc(&x.f, &buf, &len);
	assert_int_equal(codec_reader_feed(r, buf, len), SEMQ_OK);

	assert_int_equal(codec_reader_next(r, &o, err, sizeof err), SEMQ_OK);
	codec_frame_free(o);
	assert_int_equal(codec_reader_next(r, &o, err, sizeof err),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_non_null(strstr(err, "Data.messages[0].seq: 0"));
	for (i = 0; i < 3; i++) {
		assert_int_equal(codec_reader_next(r, &o, again, sizeof again),
				 SEMQ_ERR_PROTO);
		assert_null(o);
		assert_string_equal(again, err);
	}
	/* Even a good frame fed afterwards does not come out. */
	assert_int_equal(codec_reader_feed(r, buf, len), SEMQ_OK);
	assert_int_equal(codec_reader_pending(r), 0);
	assert_int_equal(codec_reader_next(r, &o, again, sizeof again),
			 SEMQ_ERR_PROTO);
	assert_null(o);
	assert_string_equal(again, err);
	free(buf);
	codec_reader_free(r);
	codec_reader_free(NULL);
	codec_frame_free(NULL);
}

static void test_encode_too_big(void **state)
{
	static uint8_t payload[2000];
	struct data1 x;
	uint8_t *buf = (uint8_t *)1;
	size_t len = 99;

	(void)state;
	mk_data1(&x, 1);
	x.m.payload.data = payload;
	x.m.payload.len = sizeof payload;
	assert_int_equal(codec_encode(&x.f, 1024, &buf, &len),
			 SEMQ_ERR_TOO_BIG);
	assert_null(buf);
	assert_int_equal(len, 0);
	assert_int_equal(codec_encode(&x.f, 4096, &buf, &len), SEMQ_OK);
	assert_true(len > 2000 + CODEC_HDR);
	assert_int_equal(((size_t)buf[2] << 8 | buf[3]) + CODEC_HDR, len);
	free(buf);
}

/* ---- conversions ------------------------------------------------------------ */

static void test_msg_conversions(void **state)
{
	static uint8_t payload[] = {0, 1, 2, 0xff};
	struct msg m, back;
	Semq__Message w = SEMQ__MESSAGE__INIT, *wp = &w;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	struct msgid id, id2;
	Semq__MsgId wid = SEMQ__MSG_ID__INIT;

	(void)state;
	memset(&m, 0, sizeof m);
	strcpy(m.id.origin, "R1");
	strcpy(m.id.dest, "S1");
	m.id.seq = 42;
	m.type = 2800;
	m.has_key = 1;
	strcpy(m.key, "order-7");
	m.prev_seq = 40;
	m.deliver_at = 1700000099000;
	m.created_at = 1700000000000;
	m.payload = payload;
	m.payload_len = sizeof payload;
	m.tombstone = 1;
	strcpy(m.stored_by, "P1");

	codec_msg_to_wire(&m, &w);
	/* Borrowed: the wire message points into m. */
	assert_ptr_equal(w.origin, m.id.origin);
	assert_ptr_equal(w.payload.data, m.payload);
	assert_string_equal(w.key, "order-7");
	d.n_messages = 1;
	d.messages = &wp;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	o = roundtrip(&f);
	codec_msg_from_wire(o->data->messages[0], &back);
	assert_string_equal(back.id.origin, "R1");
	assert_string_equal(back.id.dest, "S1");
	assert_int_equal(back.id.seq, 42);
	assert_int_equal(back.type, 2800);
	assert_int_equal(back.has_key, 1);
	assert_string_equal(back.key, "order-7");
	assert_int_equal(back.prev_seq, 40);
	assert_int_equal(back.deliver_at, 1700000099000);
	assert_int_equal(back.created_at, 1700000000000);
	assert_int_equal(back.tombstone, 1);
	assert_string_equal(back.stored_by, "P1");
	assert_int_equal(back.payload_len, sizeof payload);
	assert_memory_equal(back.payload, payload, sizeof payload);
	/* The payload is borrowed from the frame, not copied. */
	assert_ptr_equal(back.payload, o->data->messages[0]->payload.data);
	codec_frame_free(o);

	/* No key <-> empty key (and so no previous message); no payload, not
	 * stored. */
	m.has_key = 0;
	strcpy(m.key, "ignored");
	m.prev_seq = 0;
	m.payload = NULL;
	m.payload_len = 0;
	m.tombstone = 0;
	m.stored_by[0] = '\0';
	codec_msg_to_wire(&m, &w);
	assert_string_equal(w.key, "");
	assert_int_equal(w.payload.len, 0);
	o = roundtrip(&f);
	memset(&back, 0x5a, sizeof back);
	codec_msg_from_wire(o->data->messages[0], &back);
	assert_int_equal(back.has_key, 0);
	assert_string_equal(back.key, "");
	assert_int_equal(back.payload_len, 0);
	assert_int_equal(back.tombstone, 0);
	assert_string_equal(back.stored_by, "");
	codec_frame_free(o);

	/* msgid both ways. */
	strcpy(id.origin, "R1");
	strcpy(id.dest, "S.2");
	id.seq = 9;
	codec_msgid_to_wire(&id, &wid);
	assert_string_equal(wid.origin, "R1");
	assert_string_equal(wid.dest, "S.2");
	assert_int_equal(wid.seq, 9);
	memset(&id2, 0x5a, sizeof id2);
	codec_msgid_from_wire(&wid, &id2);
	assert_string_equal(id2.origin, "R1");
	assert_string_equal(id2.dest, "S.2");
	assert_int_equal(id2.seq, 9);
}

/* ---- wire revision 2: lives, digests, refusals, stream state ------------- */

/* Every field of revision 2 survives a round trip, on each body that has
 * one, and the conversions to and from struct msg / struct msgid carry the
 * life and the digests. */
static void test_roundtrip_revision2(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT, *o;
	Semq__Hello h = SEMQ__HELLO__INIT;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Message m, *mp = &m;
	Semq__Query q = SEMQ__QUERY__INIT;
	Semq__MsgId id[2], *ip[2] = {&id[0], &id[1]};
	Semq__AckIndication ai = SEMQ__ACK_INDICATION__INIT;
	Semq__Verdict v[3], *vp[3] = {&v[0], &v[1], &v[2]};
	Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
	Semq__QueryAnswer a[3], *ap[3] = {&a[0], &a[1], &a[2]};
	Semq__StreamQuery sq = SEMQ__STREAM_QUERY__INIT;
	Semq__StreamState ss = SEMQ__STREAM_STATE__INIT;
	Semq__StreamHigh sh[2], *shp[2] = {&sh[0], &sh[1]};
	char *dests[3] = {"S1", "S.2", "S_3"};
	const uint64_t big = UINT64_C(0xfedcba9876543210); /* top bit set */
	struct msg cm, back;
	struct msgid cid, cid2;
	Semq__MsgId wid = SEMQ__MSG_ID__INIT;
	Semq__Message wm = SEMQ__MESSAGE__INIT;
	size_t i;

	(void)state;
	/* Hello: life, wire_revision, software */
	h.node_id = "R1";
	h.protocol_version = SEMQ__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.role = SEMQ__ROLE__ROLE_EDGE;
	h.max_frame = 1024;
	h.life = big;
	h.wire_revision = 2;
	h.software = "semqd 0.2.0 (test; x86_64)";
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	f.hello = &h;
	o = roundtrip(&f);
	assert_true(o->hello->life == big);
	assert_int_equal(o->hello->wire_revision, 2);
	assert_string_equal(o->hello->software, "semqd 0.2.0 (test; x86_64)");
	assert_same_bytes(&f, o);
	codec_frame_free(o);

	/* Message: life, digest, prev_digest */
	mk_message(&m, 5);
	m.life = 0x1234;
	m.digest = big;
	m.prev_digest = UINT64_MAX;
	d.n_messages = 1;
	d.messages = &mp;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	o = roundtrip(&f);
	assert_int_equal(o->data->messages[0]->life, 0x1234);
	assert_true(o->data->messages[0]->digest == big);
	assert_true(o->data->messages[0]->prev_digest == UINT64_MAX);
	assert_same_bytes(&f, o);
	/* ... and into a struct msg */
	memset(&back, 0x5a, sizeof back);
	codec_msg_from_wire(o->data->messages[0], &back);
	assert_int_equal(back.id.life, 0x1234);
	assert_true(back.id.digest == big);
	assert_true(back.prev_digest == UINT64_MAX);
	codec_frame_free(o);

	/* MsgId: life, digest (a Query's ids) */
	mk_id(&id[0], "R1", "S1", 3);
	id[0].life = 77;
	id[0].digest = big;
	mk_id(&id[1], "R1", "S1", 4); /* revision 1: neither given */
	q.n_ids = 2;
	q.ids = ip;
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	o = roundtrip(&f);
	assert_int_equal(o->query->ids[0]->life, 77);
	assert_true(o->query->ids[0]->digest == big);
	assert_int_equal(o->query->ids[1]->life, 0);
	assert_int_equal(o->query->ids[1]->digest, 0);
	assert_same_bytes(&f, o);
	codec_frame_free(o);

	/* Verdict: refusal (with DUPLICATE), dead (with REDO), high */
	for (i = 0; i < 3; i++) {
		Semq__Verdict vi = SEMQ__VERDICT__INIT;

		v[i] = vi;
		v[i].id = &id[0];
	}
	v[0].result = SEMQ__RESULT__RESULT_DUPLICATE;
	v[0].refusal = SEMQ__REFUSAL__REFUSAL_CONFLICT;
	v[0].high = (uint64_t)INT64_MAX;
	v[1].result = SEMQ__RESULT__RESULT_DUPLICATE;
	v[1].refusal = SEMQ__REFUSAL__REFUSAL_UNDECIDED;
	v[1].high = 600;
	v[2].result = SEMQ__RESULT__RESULT_REDO;
	v[2].dead = 1;
	ai.n_verdicts = 3;
	ai.verdicts = vp;
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &ai;
	o = roundtrip(&f);
	assert_int_equal(o->ack_indication->verdicts[0]->refusal,
			 SEMQ__REFUSAL__REFUSAL_CONFLICT);
	assert_true(o->ack_indication->verdicts[0]->high ==
		    (uint64_t)INT64_MAX);
	assert_false(o->ack_indication->verdicts[0]->dead);
	assert_int_equal(o->ack_indication->verdicts[1]->refusal,
			 SEMQ__REFUSAL__REFUSAL_UNDECIDED);
	assert_int_equal(o->ack_indication->verdicts[1]->high, 600);
	assert_int_equal(o->ack_indication->verdicts[2]->result,
			 SEMQ__RESULT__RESULT_REDO);
	assert_true(o->ack_indication->verdicts[2]->dead);
	assert_int_equal(o->ack_indication->verdicts[2]->refusal,
			 SEMQ__REFUSAL__REFUSAL_NONE);
	assert_true(o->ack_indication->verdicts[0]->id->digest == big);
	assert_int_equal(o->ack_indication->verdicts[0]->id->life, 77);
	assert_same_bytes(&f, o);
	codec_frame_free(o);

	/* QueryAnswer: the same */
	for (i = 0; i < 3; i++) {
		Semq__QueryAnswer qi = SEMQ__QUERY_ANSWER__INIT;

		a[i] = qi;
		a[i].id = &id[0];
		a[i].received = 1;
	}
	a[0].result = SEMQ__RESULT__RESULT_DUPLICATE;
	a[0].refusal = SEMQ__REFUSAL__REFUSAL_UNDECIDED;
	a[0].high = 9;
	a[1].result = SEMQ__RESULT__RESULT_REDO;
	a[1].dead = 1;
	a[2].received = 0; /* not received: nothing else */
	qr.n_answers = 3;
	qr.answers = ap;
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &qr;
	o = roundtrip(&f);
	assert_int_equal(o->query_reply->answers[0]->refusal,
			 SEMQ__REFUSAL__REFUSAL_UNDECIDED);
	assert_int_equal(o->query_reply->answers[0]->high, 9);
	assert_true(o->query_reply->answers[0]->received);
	assert_true(o->query_reply->answers[1]->dead);
	assert_int_equal(o->query_reply->answers[1]->result,
			 SEMQ__RESULT__RESULT_REDO);
	assert_false(o->query_reply->answers[2]->received);
	assert_same_bytes(&f, o);
	codec_frame_free(o);

	/* StreamQuery: origin, life, dests (none is fine too) */
	sq.origin = "R1";
	sq.life = big;
	sq.n_dests = 3;
	sq.dests = dests;
	f.body_case = SEMQ__FRAME__BODY_STREAM_QUERY;
	f.stream_query = &sq;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_STREAM_QUERY);
	assert_string_equal(o->stream_query->origin, "R1");
	assert_true(o->stream_query->life == big);
	assert_int_equal(o->stream_query->n_dests, 3);
	assert_string_equal(o->stream_query->dests[0], "S1");
	assert_string_equal(o->stream_query->dests[1], "S.2");
	assert_string_equal(o->stream_query->dests[2], "S_3");
	assert_same_bytes(&f, o);
	codec_frame_free(o);
	sq.n_dests = 0;
	sq.dests = NULL;
	o = roundtrip(&f);
	assert_int_equal(o->stream_query->n_dests, 0);
	codec_frame_free(o);

	/* StreamState: origin, life, reporter, streams{dest, high} */
	for (i = 0; i < 2; i++) {
		Semq__StreamHigh hi = SEMQ__STREAM_HIGH__INIT;

		sh[i] = hi;
	}
	sh[0].dest = "S1";
	sh[0].high = 600;
	sh[1].dest = "S2";
	sh[1].high = (uint64_t)INT64_MAX;
	ss.origin = "R1";
	ss.life = 3;
	ss.reporter = "P1";
	ss.n_streams = 2;
	ss.streams = shp;
	f.body_case = SEMQ__FRAME__BODY_STREAM_STATE;
	f.stream_state = &ss;
	o = roundtrip(&f);
	assert_int_equal(o->body_case, SEMQ__FRAME__BODY_STREAM_STATE);
	assert_string_equal(o->stream_state->origin, "R1");
	assert_int_equal(o->stream_state->life, 3);
	assert_string_equal(o->stream_state->reporter, "P1");
	assert_int_equal(o->stream_state->n_streams, 2);
	assert_string_equal(o->stream_state->streams[0]->dest, "S1");
	assert_int_equal(o->stream_state->streams[0]->high, 600);
	assert_string_equal(o->stream_state->streams[1]->dest, "S2");
	assert_true(o->stream_state->streams[1]->high == (uint64_t)INT64_MAX);
	assert_same_bytes(&f, o);
	codec_frame_free(o);
	ss.n_streams = 0;
	ss.streams = NULL;
	assert_valid(&f);

	/* struct msg and struct msgid <-> wire */
	memset(&cm, 0, sizeof cm);
	strcpy(cm.id.origin, "R1");
	strcpy(cm.id.dest, "S1");
	cm.id.seq = 8;
	cm.id.life = big;
	cm.id.digest = 42;
	cm.prev_digest = 41;
	codec_msg_to_wire(&cm, &wm);
	assert_true(wm.life == big);
	assert_int_equal(wm.digest, 42);
	assert_int_equal(wm.prev_digest, 41);
	memset(&cid, 0, sizeof cid);
	strcpy(cid.origin, "R1");
	strcpy(cid.dest, "S1");
	cid.seq = 8;
	cid.life = 5;
	cid.digest = big;
	codec_msgid_to_wire(&cid, &wid);
	assert_int_equal(wid.life, 5);
	assert_true(wid.digest == big);
	memset(&cid2, 0x5a, sizeof cid2);
	codec_msgid_from_wire(&wid, &cid2);
	assert_int_equal(cid2.life, 5);
	assert_true(cid2.digest == big);
	assert_int_equal(cid2.seq, 8);
}

/* The rules of the revision-2 fields, each refusal naming its field. */
static void test_revision2_rules(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Hello h = SEMQ__HELLO__INIT;
	Semq__AckIndication ai = SEMQ__ACK_INDICATION__INIT;
	Semq__Verdict v = SEMQ__VERDICT__INIT, *vp = &v;
	Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
	Semq__QueryAnswer qa = SEMQ__QUERY_ANSWER__INIT, *qap = &qa;
	Semq__StreamQuery sq = SEMQ__STREAM_QUERY__INIT;
	Semq__StreamState ss = SEMQ__STREAM_STATE__INIT;
	Semq__StreamHigh sh = SEMQ__STREAM_HIGH__INIT, *shp = &sh, **manyh;
	Semq__MsgId id;
	char *dests[2] = {"S1", "S 2"}, **manyd, sw[70];
	size_t i;

	(void)state;
	mk_id(&id, "R1", "S1", 1);

	/* Verdict: a refusal only with DUPLICATE, dead only with REDO, a
	 * known refusal, high within 0..2^63-1. */
	v.id = &id;
	ai.n_verdicts = 1;
	ai.verdicts = &vp;
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &ai;
	v.result = SEMQ__RESULT__RESULT_DUPLICATE;
	v.refusal = SEMQ__REFUSAL__REFUSAL_CONFLICT;
	v.high = (uint64_t)INT64_MAX;
	assert_valid(&f);
	/* Frame.hops: the relays a forwarded frame passed, 0..255 */
	f.hops = 255;
	assert_valid(&f);
	f.hops = 256;
	assert_refused(&f, "frame.hops: 256 (at most 255)");
	f.hops = 0;
	v.result = SEMQ__RESULT__RESULT_PROCESSED;
	assert_refused(&f, "AckIndication.verdicts[0].refusal: 1 with "
			   "result 0");
	v.result = SEMQ__RESULT__RESULT_REDO;
	v.refusal = SEMQ__REFUSAL__REFUSAL_UNDECIDED;
	assert_refused(&f, "AckIndication.verdicts[0].refusal: 2 with "
			   "result 1");
	v.result = SEMQ__RESULT__RESULT_DUPLICATE;
	v.refusal = (Semq__Refusal)3;
	assert_refused(&f, "AckIndication.verdicts[0].refusal: 3 is not a "
			   "known refusal");
	v.refusal = (Semq__Refusal)-1;
	assert_refused(&f, "AckIndication.verdicts[0].refusal: -1 is not a "
			   "known refusal");
	v.refusal = SEMQ__REFUSAL__REFUSAL_NONE;
	v.dead = 1;
	assert_refused(&f, "AckIndication.verdicts[0].dead with result 2");
	v.result = SEMQ__RESULT__RESULT_PROCESSED;
	assert_refused(&f, "AckIndication.verdicts[0].dead with result 0");
	v.result = SEMQ__RESULT__RESULT_REDO;
	assert_valid(&f);
	/* dead and a refusal together: the refusal's result is not REDO */
	v.refusal = SEMQ__REFUSAL__REFUSAL_CONFLICT;
	assert_refused(&f, "AckIndication.verdicts[0].refusal");
	v.refusal = SEMQ__REFUSAL__REFUSAL_NONE;
	v.dead = 0;
	v.high = (uint64_t)INT64_MAX + 1;
	assert_refused(&f, "AckIndication.verdicts[0].high: "
			   "9223372036854775808");
	v.high = UINT64_MAX;
	assert_refused(&f, "AckIndication.verdicts[0].high");
	v.high = 0;
	assert_valid(&f);

	/* QueryAnswer: the same, and a refusal only when received */
	qa.id = &id;
	qa.received = 1;
	qr.n_answers = 1;
	qr.answers = &qap;
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &qr;
	qa.result = SEMQ__RESULT__RESULT_DUPLICATE;
	qa.refusal = SEMQ__REFUSAL__REFUSAL_UNDECIDED;
	qa.high = 12;
	assert_valid(&f);
	qa.received = 0;
	assert_refused(&f, "QueryReply.answers[0].refusal: 2 but received "
			   "is false");
	qa.received = 1;
	qa.result = SEMQ__RESULT__RESULT_SCHEDULED;
	assert_refused(&f, "QueryReply.answers[0].refusal: 2 with result 3");
	qa.result = SEMQ__RESULT__RESULT_DUPLICATE;
	qa.refusal = (Semq__Refusal)7;
	assert_refused(&f, "QueryReply.answers[0].refusal: 7 is not a known "
			   "refusal");
	qa.refusal = SEMQ__REFUSAL__REFUSAL_NONE;
	qa.dead = 1;
	assert_refused(&f, "QueryReply.answers[0].dead with result 2");
	qa.result = SEMQ__RESULT__RESULT_REDO;
	assert_valid(&f);
	qa.dead = 0;
	qa.high = (uint64_t)INT64_MAX + 1;
	assert_refused(&f, "QueryReply.answers[0].high: 9223372036854775808");
	qa.high = 0;
	assert_valid(&f);

	/* StreamQuery: origin a node id, life not 0, dests node ids, at
	 * most 4096 of them */
	sq.origin = "R1";
	sq.life = 1;
	sq.n_dests = 1;
	sq.dests = dests;
	f.body_case = SEMQ__FRAME__BODY_STREAM_QUERY;
	f.stream_query = &sq;
	assert_valid(&f);
	sq.life = 0;
	assert_refused(&f, "StreamQuery.life: 0");
	sq.life = 1;
	sq.origin = "R 1";
	assert_refused(&f, "StreamQuery.origin: 'R 1' is not a node id");
	sq.origin = "R1";
	sq.n_dests = 2;
	assert_refused(&f, "StreamQuery.dests[1]: 'S 2' is not a node id");
	dests[1] = "";
	assert_refused(&f, "StreamQuery.dests[1]: '' is not a node id");
	manyd = malloc(4097 * sizeof *manyd);
	assert_non_null(manyd);
	for (i = 0; i < 4097; i++)
		manyd[i] = "S1";
	sq.dests = manyd;
	sq.n_dests = 4096;
	assert_valid(&f);
	sq.n_dests = 4097;
	assert_refused(&f, "StreamQuery.dests: 4097 entries, more than 4096");
	sq.dests = NULL;
	sq.n_dests = 1;
	assert_refused_mem(&f, "StreamQuery.dests: 1 entries but no array");
	free(manyd);

	/* StreamState: origin and reporter node ids, life not 0, streams
	 * with node ids and highs within 0..2^63-1, at most 4096 */
	sh.dest = "S1";
	sh.high = 600;
	ss.origin = "R1";
	ss.life = 9;
	ss.reporter = "S1";
	ss.n_streams = 1;
	ss.streams = &shp;
	f.body_case = SEMQ__FRAME__BODY_STREAM_STATE;
	f.stream_state = &ss;
	assert_valid(&f);
	ss.life = 0;
	assert_refused(&f, "StreamState.life: 0");
	ss.life = 9;
	ss.reporter = "P/1";
	assert_refused(&f, "StreamState.reporter: 'P/1' is not a node id");
	ss.reporter = "S1";
	ss.origin = "";
	assert_refused(&f, "StreamState.origin: '' is not a node id");
	ss.origin = "R1";
	sh.dest = "S 1";
	assert_refused(&f, "StreamState.streams[0].dest: 'S 1' is not a "
			   "node id");
	sh.dest = "S1";
	sh.high = (uint64_t)INT64_MAX + 1;
	assert_refused(&f, "StreamState.streams[0].high: "
			   "9223372036854775808");
	sh.high = (uint64_t)INT64_MAX;
	assert_valid(&f);
	manyh = malloc(4097 * sizeof *manyh);
	assert_non_null(manyh);
	for (i = 0; i < 4097; i++)
		manyh[i] = &sh;
	ss.streams = manyh;
	ss.n_streams = 4096;
	assert_valid(&f);
	ss.n_streams = 4097;
	assert_refused(&f, "StreamState.streams: 4097 entries, more than "
			   "4096");
	manyh[0] = NULL;
	ss.n_streams = 2;
	assert_refused_mem(&f, "StreamState.streams[0]: missing");
	free(manyh);

	/* Hello.software: at most 64 bytes of printable ASCII */
	h.node_id = "R1";
	h.protocol_version = 1;
	h.role = SEMQ__ROLE__ROLE_EDGE;
	h.max_frame = 1024;
	h.wire_revision = 2;
	h.life = 5;
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	f.hello = &h;
	memset(sw, 'v', sizeof sw);
	sw[64] = '\0';
	h.software = sw;
	assert_valid(&f);
	sw[64] = 'v';
	sw[65] = '\0';
	assert_refused(&f, "Hello.software: 65 bytes, more than 64");
	h.software = "semqd\t0.2";
	assert_refused(&f, "Hello.software: not printable ASCII");
	h.software = "semqd 0.2\x7f";
	assert_refused(&f, "Hello.software: not printable ASCII");
	h.software = "caf\xc3\xa9 0.2";
	assert_refused(&f, "Hello.software: not printable ASCII");
	h.software = "semqd 0.2.0 ~!@#$%^&*()_+{}|:\"<>?";
	assert_valid(&f);
	h.software = "";
	assert_valid(&f);
}

/* ---- random input ----------------------------------------------------------- */

static uint64_t rng_state = 0x5e3a9c1d2b4f6071ull;

static uint32_t rnd(void)
{
	/* xorshift64*: deterministic across platforms. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* Appends n bytes to *buf (size *len). */
static void append(uint8_t **buf, size_t *len, const void *p, size_t n)
{
	if (n == 0)
		return; /* realloc(p, 0) may free p */
	*buf = realloc(*buf, *len + n);
	assert_non_null(*buf);
	memcpy(*buf + *len, p, n);
	*len += n;
}

/* A stream of random-ish frames: valid ones, valid ones with bytes flipped,
 * random bodies under plausible headers, and raw random bytes. */
static void random_stream(uint8_t **buf, size_t *len)
{
	int parts = 1 + rnd() % 6, i;

	for (i = 0; i < parts; i++) {
		uint32_t kind = rnd() % 4;
		uint8_t *b = NULL, tmp[300];
		size_t lb, j, n;
		struct data1 x;

		switch (kind) {
		case 0:
		case 1:
			mk_data1(&x, 1 + rnd() % 1000);
			enc(&x.f, &b, &lb);
			if (kind == 1) {
				n = 1 + rnd() % 4;
				for (j = 0; j < n; j++)
					b[CODEC_HDR +
					  rnd() % (lb - CODEC_HDR)] ^=
						(uint8_t)(1u << (rnd() % 8));
			}
			append(buf, len, b, lb);
			free(b);
			break;
		case 2:
			n = rnd() % 200;
			tmp[0] = tmp[1] = tmp[2] = 0;
			tmp[3] = (uint8_t)n;
			for (j = 0; j < n; j++)
				tmp[CODEC_HDR + j] = (uint8_t)rnd();
			append(buf, len, tmp, CODEC_HDR + n);
			break;
		default:
			n = rnd() % 64;
			for (j = 0; j < n; j++)
				tmp[j] = (uint8_t)rnd();
			append(buf, len, tmp, n);
			break;
		}
	}
}

static void test_random_input(void **state)
{
	int iter, frames = 0, errors = 0;

	(void)state;
	for (iter = 0; iter < 3000; iter++) {
		struct codec_reader *r = codec_reader_new(4096);
		uint8_t *buf = NULL;
		size_t len = 0, off = 0;
		int last = SEMQ_AGAIN;

		assert_non_null(r);
		random_stream(&buf, &len);
		while (off < len) {
			size_t n = 1 + rnd() % 64;
			Semq__Frame *o = NULL;
			char err[SEMQ_ERRLEN];
			int rc;

			if (n > len - off)
				n = len - off;
			assert_int_equal(codec_reader_feed(r, buf + off, n),
					 SEMQ_OK);
			off += n;
			while ((rc = codec_reader_next(
					r, &o, err, sizeof err)) == SEMQ_OK) {
				char verr[SEMQ_ERRLEN];

				assert_non_null(o);
				if (codec_validate(o, verr, sizeof verr))
					fail_msg("reader yielded an invalid "
						 "frame: %s",
						 verr);
				frames++;
				codec_frame_free(o);
				o = NULL;
			}
			assert_null(o);
			if (rc != SEMQ_AGAIN) {
				assert_true(rc == SEMQ_ERR_PROTO ||
					    rc == SEMQ_ERR_TOO_BIG);
				if (last != SEMQ_AGAIN)
					assert_int_equal(rc, last);
				last = rc;
			}
			assert_true(codec_reader_pending(r) <=
				    4096 + CODEC_HDR + 64);
		}
		if (last != SEMQ_AGAIN)
			errors++;
		free(buf);
		codec_reader_free(r);
	}
	/* The mix exercised both outcomes. */
	assert_true(frames > 100);
	assert_true(errors > 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_hello),
		cmocka_unit_test(test_roundtrip_data),
		cmocka_unit_test(test_roundtrip_relay_ack),
		cmocka_unit_test(test_roundtrip_ack_indication),
		cmocka_unit_test(test_roundtrip_ack_response),
		cmocka_unit_test(test_roundtrip_query),
		cmocka_unit_test(test_roundtrip_query_reply),
		cmocka_unit_test(test_roundtrip_ping_pong),
		cmocka_unit_test(test_roundtrip_error),
		cmocka_unit_test(test_split_every_point),
		cmocka_unit_test(test_one_byte_at_a_time),
		cmocka_unit_test(test_many_frames_one_feed),
		cmocka_unit_test(test_truncated_frame),
		cmocka_unit_test(test_want_takes_one_frame),
		cmocka_unit_test(test_want_checks_header),
		cmocka_unit_test(test_frame_len),
		cmocka_unit_test(test_oversized_header),
		cmocka_unit_test(test_unpack_budget),
		cmocka_unit_test(test_zero_length),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_no_body),
		cmocka_unit_test(test_unknown_body),
		cmocka_unit_test(test_field_number_zero),
		cmocka_unit_test(test_invalid_ids),
		cmocka_unit_test(test_seq_zero),
		cmocka_unit_test(test_prev_seq),
		cmocka_unit_test(test_key_and_times),
		cmocka_unit_test(test_bad_enums),
		cmocka_unit_test(test_lengths_and_counts),
		cmocka_unit_test(test_null_pointers),
		cmocka_unit_test(test_hello_instance),
		cmocka_unit_test(test_nul_in_string),
		cmocka_unit_test(test_trace_frames),
		cmocka_unit_test(test_poisoned_reader),
		cmocka_unit_test(test_encode_too_big),
		cmocka_unit_test(test_msg_conversions),
		cmocka_unit_test(test_random_input),
		cmocka_unit_test(test_roundtrip_revision2),
		cmocka_unit_test(test_revision2_rules),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
