/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the rights of a peer (node/rights.c): every body of
 * semq.Frame has a row; for each kind a frame in the peer's own name is
 * allowed and one in another node's name refused (FORBIDDEN), except from
 * a trusted relay; Hello after the handshake, a body number the table does
 * not know and NOT_SET are refused for everyone (PROTOCOL), trusted relays
 * included; every refusal names the kind and the peer.
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

#include "rights.h"

#define PEER "R1"
#define OTHER "R2"

static char why[512];

/* rights_check of f from PEER, not trusted, with why cleared first. */
static int check(const Semq__Frame *f, int trusted)
{
	why[0] = '\0';
	return rights_check(f, PEER, trusted, why, sizeof why);
}

/* A refusal's text names the peer and, when given, the kind. */
static void assert_names(const char *kind)
{
	if (!strstr(why, "'" PEER "'"))
		fail_msg("refusal does not name the peer: %s", why);
	if (kind && !strstr(why, kind))
		fail_msg("refusal does not name %s: %s", kind, why);
}

static void id_init(Semq__MsgId *id, const char *origin, const char *dest)
{
	semq__msg_id__init(id);
	id->origin = (char *)origin;
	id->dest = (char *)dest;
	id->seq = 1;
}

/* ---- the table ------------------------------------------------------------ */

/* Every member of Frame's oneof body (the .proto) has a row, with a name,
 * and the rows list no body the .proto lacks. */
static void test_table_covers_proto(void **state)
{
	const ProtobufCMessageDescriptor *d = &semq__frame__descriptor;
	const struct rights_kind *t;
	size_t i, n, bodies = 0;

	(void)state;
	for (i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *fd = &d->fields[i];
		const struct rights_kind *k;

		if (!(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
			continue;
		bodies++;
		k = rights_kind((int)fd->id);
		if (!k)
			fail_msg("Frame.%s (body %u) has no row in rights.c",
				 fd->name, fd->id);
		assert_non_null(k->name);
		assert_string_not_equal(rights_kind_name((int)fd->id),
					"unknown");
	}
	t = rights_table(&n);
	assert_int_equal(n, bodies);
	for (i = 0; i < n; i++) {
		assert_non_null(protobuf_c_message_descriptor_get_field(
			d, (unsigned)t[i].body));
		assert_string_not_equal(rights_who_text(t[i].who), "?");
	}
	assert_string_equal(rights_kind_name(99), "unknown");
	assert_null(rights_kind(SEMQ__FRAME__BODY__NOT_SET));
}

/* ---- fail closed ---------------------------------------------------------- */

static void test_unknown_kind_refused(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Ping p = SEMQ__PING__INIT;

	(void)state;
	f.ping = &p; /* a body there, under a number nobody listed */
	f.body_case = (Semq__Frame__BodyCase)99;
	assert_int_equal(check(&f, 0), SEMQ_ERR_PROTO);
	assert_names("body 99");
	assert_int_equal(check(&f, 1), SEMQ_ERR_PROTO); /* trusted too */
	assert_names("body 99");
	f.body_case = SEMQ__FRAME__BODY__NOT_SET;
	assert_int_equal(check(&f, 0), SEMQ_ERR_PROTO);
	assert_int_equal(check(&f, 1), SEMQ_ERR_PROTO);
	assert_names("unknown kind");
}

static void test_hello_refused(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Hello h = SEMQ__HELLO__INIT;

	(void)state;
	h.node_id = PEER;
	f.body_case = SEMQ__FRAME__BODY_HELLO;
	f.hello = &h;
	assert_int_equal(check(&f, 0), SEMQ_ERR_PROTO);
	assert_names("Hello");
	assert_int_equal(check(&f, 1), SEMQ_ERR_PROTO);
	assert_names("Hello");
}

/* ---- any peer ------------------------------------------------------------- */

static void test_ping_pong_error_trace_reply(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Ping pi = SEMQ__PING__INIT;
	Semq__Pong po = SEMQ__PONG__INIT;
	Semq__Error e = SEMQ__ERROR__INIT;
	Semq__TraceReply tr = SEMQ__TRACE_REPLY__INIT;

	(void)state;
	f.body_case = SEMQ__FRAME__BODY_PING;
	f.ping = &pi;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	f.body_case = SEMQ__FRAME__BODY_PONG;
	f.pong = &po;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	f.body_case = SEMQ__FRAME__BODY_ERROR;
	f.error = &e;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	tr.request = 1;
	f.body_case = SEMQ__FRAME__BODY_TRACE_REPLY;
	f.trace_reply = &tr;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	assert_int_equal(check(&f, 1), SEMQ_OK);
}

/* ---- the origin ----------------------------------------------------------- */

static void test_data(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Message m[2], *pm[2] = {&m[0], &m[1]};

	(void)state;
	semq__message__init(&m[0]);
	semq__message__init(&m[1]);
	m[0].origin = PEER;
	m[0].dest = "S1";
	m[1].origin = PEER;
	m[1].dest = "S2";
	d.n_messages = 2;
	d.messages = pm;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	m[1].origin = OTHER; /* the second of two is another node's */
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("Data");
	assert_non_null(strstr(why, "'" OTHER "'"));
	assert_int_equal(check(&f, 1),
			 SEMQ_OK); /* a trusted relay carries it */
}

static void test_ack_response(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__AckResponse ar = SEMQ__ACK_RESPONSE__INIT;
	Semq__MsgId id, *pid = &id;

	(void)state;
	id_init(&id, PEER, "S1");
	ar.from = PEER;
	ar.n_ids = 1;
	ar.ids = &pid;
	f.body_case = SEMQ__FRAME__BODY_ACK_RESPONSE;
	f.ack_response = &ar;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	ar.from = OTHER; /* claims to come from another node */
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("810-Response");
	assert_int_equal(check(&f, 1), SEMQ_OK);
	ar.from = PEER;
	id.origin = OTHER; /* about another node's message */
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("810-Response");
	assert_int_equal(check(&f, 1), SEMQ_OK);
}

static void test_query(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Query q = SEMQ__QUERY__INIT;
	Semq__MsgId id, *pid = &id;

	(void)state;
	id_init(&id, PEER, "S1");
	q.n_ids = 1;
	q.ids = &pid;
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	id.origin = OTHER;
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("Query");
	assert_int_equal(check(&f, 1), SEMQ_OK);
}

static void test_trace(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Trace t = SEMQ__TRACE__INIT;
	Semq__MsgId id, *pid = &id;

	(void)state;
	id_init(&id, PEER, "S1");
	t.request = 1;
	t.n_ids = 1;
	t.ids = &pid;
	f.body_case = SEMQ__FRAME__BODY_TRACE;
	f.trace = &t;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	id.origin = OTHER;
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("Trace");
	assert_int_equal(check(&f, 1), SEMQ_OK);
}

static void test_stream_query(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__StreamQuery q = SEMQ__STREAM_QUERY__INIT;

	(void)state;
	q.origin = PEER;
	f.body_case = SEMQ__FRAME__BODY_STREAM_QUERY;
	f.stream_query = &q;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	q.origin = OTHER;
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("StreamQuery");
	assert_int_equal(check(&f, 1), SEMQ_OK);
}

/* ---- the destination ------------------------------------------------------ */

static void test_ack_indication(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__AckIndication a = SEMQ__ACK_INDICATION__INIT;
	Semq__Verdict v, *pv = &v;
	Semq__MsgId id;

	(void)state;
	id_init(&id, "S1", PEER); /* R1 confirms a message it received */
	semq__verdict__init(&v);
	v.id = &id;
	a.n_verdicts = 1;
	a.verdicts = &pv;
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &a;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	id.dest = OTHER; /* a message to another node */
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("810-Indication");
	assert_int_equal(check(&f, 1), SEMQ_OK);
}

static void test_query_reply(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
	Semq__QueryAnswer a, *pa = &a;
	Semq__MsgId id;

	(void)state;
	id_init(&id, "S1", PEER);
	semq__query_answer__init(&a);
	a.id = &id;
	qr.n_answers = 1;
	qr.answers = &pa;
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &qr;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	id.dest = OTHER;
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("QueryReply");
	assert_int_equal(check(&f, 1), SEMQ_OK);
}

/* ---- the reporter --------------------------------------------------------- */

static void test_stream_state(void **state)
{
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__StreamState st = SEMQ__STREAM_STATE__INIT;

	(void)state;
	st.origin = "S1";
	st.reporter = PEER;
	f.body_case = SEMQ__FRAME__BODY_STREAM_STATE;
	f.stream_state = &st;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	st.reporter = OTHER;
	assert_int_equal(check(&f, 0), SEMQ_DECLINED);
	assert_names("StreamState");
	assert_int_equal(check(&f, 1), SEMQ_OK);
}

/* ---- custody: a trusted relay --------------------------------------------- */

static void test_relay_ack(void **state)
{
	static const int custody[] = {SEMQ__RELAY_ACK__KIND__FORWARDED,
				      SEMQ__RELAY_ACK__KIND__STORED};
	static const int final[] = {SEMQ__RELAY_REFUSAL__UNKNOWN_DEST,
				    SEMQ__RELAY_REFUSAL__LOOP};
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__RelayAck ra = SEMQ__RELAY_ACK__INIT;
	Semq__MsgId id, *pid = &id;
	size_t i;

	(void)state;
	id_init(&id, "S1", "S2");
	ra.n_ids = 1;
	ra.ids = &pid;
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &ra;
	/* "not delivered for now" from any peer: it only delays a resend */
	ra.kind = SEMQ__RELAY_ACK__KIND__UNREACHABLE;
	ra.reason = SEMQ__RELAY_REFUSAL__DISK_FULL;
	assert_int_equal(check(&f, 0), SEMQ_OK);
	/* custody, or a final refusal: a trusted relay only */
	for (i = 0; i < 2; i++) {
		ra.kind = custody[i];
		ra.reason = 0;
		assert_int_equal(check(&f, 0), SEMQ_DECLINED);
		assert_names("RelayAck (custody)");
		assert_int_equal(check(&f, 1), SEMQ_OK);
	}
	for (i = 0; i < 2; i++) {
		ra.kind = SEMQ__RELAY_ACK__KIND__UNREACHABLE;
		ra.reason = final[i];
		assert_int_equal(check(&f, 0), SEMQ_DECLINED);
		assert_names("RelayAck (undeliverable)");
		assert_int_equal(check(&f, 1), SEMQ_OK);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_covers_proto),
		cmocka_unit_test(test_unknown_kind_refused),
		cmocka_unit_test(test_hello_refused),
		cmocka_unit_test(test_ping_pong_error_trace_reply),
		cmocka_unit_test(test_data),
		cmocka_unit_test(test_ack_response),
		cmocka_unit_test(test_query),
		cmocka_unit_test(test_trace),
		cmocka_unit_test(test_stream_query),
		cmocka_unit_test(test_ack_indication),
		cmocka_unit_test(test_query_reply),
		cmocka_unit_test(test_stream_state),
		cmocka_unit_test(test_relay_ack),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
