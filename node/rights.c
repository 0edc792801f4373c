/* SPDX-License-Identifier: MIT */
/*
 * The rights of a peer (see rights.h): the table of frame kinds and the
 * checks of the names a frame carries against the peer that sent it.
 */
#include "rights.h"

#include <stdio.h>
#include <string.h>

#include <semq/error.h>

/* Every body of semq.Frame, in body number order (proto/semq.proto). */
static const struct rights_kind kinds[] = {
	{SEMQ__FRAME__BODY_HELLO, "Hello", RIGHTS_HANDSHAKE},
	{SEMQ__FRAME__BODY_DATA, "Data", RIGHTS_ORIGIN},
	{SEMQ__FRAME__BODY_RELAY_ACK, "RelayAck", RIGHTS_RELAY},
	{SEMQ__FRAME__BODY_ACK_INDICATION, "AckIndication", RIGHTS_DEST},
	{SEMQ__FRAME__BODY_ACK_RESPONSE, "AckResponse", RIGHTS_ORIGIN},
	{SEMQ__FRAME__BODY_QUERY, "Query", RIGHTS_ORIGIN},
	{SEMQ__FRAME__BODY_QUERY_REPLY, "QueryReply", RIGHTS_DEST},
	{SEMQ__FRAME__BODY_PING, "Ping", RIGHTS_ANY},
	{SEMQ__FRAME__BODY_PONG, "Pong", RIGHTS_ANY},
	{SEMQ__FRAME__BODY_ERROR, "Error", RIGHTS_ANY},
	{SEMQ__FRAME__BODY_STREAM_QUERY, "StreamQuery", RIGHTS_ORIGIN},
	{SEMQ__FRAME__BODY_STREAM_STATE, "StreamState", RIGHTS_REPORTER},
	{SEMQ__FRAME__BODY_TRACE, "Trace", RIGHTS_ORIGIN},
	/* taken only as the answer to a Trace this node sent on that
	 * connection (the store thread matches the request) */
	{SEMQ__FRAME__BODY_TRACE_REPLY, "TraceReply", RIGHTS_ANY},
};

#define N_KINDS (sizeof kinds / sizeof kinds[0])

const struct rights_kind *rights_kind(int body)
{
	size_t i;

	for (i = 0; i < N_KINDS; i++)
		if (kinds[i].body == body)
			return &kinds[i];
	return NULL;
}

const char *rights_kind_name(int body)
{
	const struct rights_kind *k = rights_kind(body);

	return k ? k->name : "unknown";
}

const struct rights_kind *rights_table(size_t *n)
{
	*n = N_KINDS;
	return kinds;
}

const char *rights_who_text(enum rights_who who)
{
	switch (who) {
	case RIGHTS_HANDSHAKE: return "handshake";
	case RIGHTS_ANY: return "any peer";
	case RIGHTS_ORIGIN: return "origin";
	case RIGHTS_DEST: return "destination";
	case RIGHTS_REPORTER: return "reporter";
	case RIGHTS_RELAY: return "trusted relay";
	}
	return "?";
}

/* ---- the names a frame carries -------------------------------------------- */

/* Data: every message's origin is the peer. */
static int data_origin(const char *peer, const Semq__Frame *f, char *why,
		       size_t whysz)
{
	size_t i;

	for (i = 0; i < f->data->n_messages; i++)
		if (strcmp(f->data->messages[i]->origin, peer)) {
			snprintf(why, whysz,
				 "Data from '%s' carries a message of "
				 "origin '%s'; only a trusted_relay "
				 "may carry other nodes' messages",
				 peer, f->data->messages[i]->origin);
			return SEMQ_DECLINED;
		}
	return SEMQ_OK;
}

/* 810-Response: from the peer, about the peer's own messages. */
static int response_origin(const char *peer, const Semq__Frame *f, char *why,
			   size_t whysz)
{
	size_t i;

	if (strcmp(f->ack_response->from, peer)) {
		snprintf(why, whysz,
			 "810-Response from '%s' claims to "
			 "come from '%s'",
			 peer, f->ack_response->from);
		return SEMQ_DECLINED;
	}
	for (i = 0; i < f->ack_response->n_ids; i++)
		if (strcmp(f->ack_response->ids[i]->origin, peer)) {
			snprintf(why, whysz,
				 "810-Response from '%s' for a "
				 "message of origin '%s'",
				 peer, f->ack_response->ids[i]->origin);
			return SEMQ_DECLINED;
		}
	return SEMQ_OK;
}

/* Query, Trace: a peer asks about its own messages only. */
static int ids_origin(const char *what, const char *peer,
		      Semq__MsgId *const *ids, size_t n, char *why,
		      size_t whysz)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(ids[i]->origin, peer)) {
			snprintf(why, whysz,
				 "%s from '%s' about a message of "
				 "origin '%s'",
				 what, peer, ids[i]->origin);
			return SEMQ_DECLINED;
		}
	return SEMQ_OK;
}

static int check_origin(const char *peer, const Semq__Frame *f, char *why,
			size_t whysz)
{
	switch (f->body_case) {
	case SEMQ__FRAME__BODY_DATA: return data_origin(peer, f, why, whysz);
	case SEMQ__FRAME__BODY_ACK_RESPONSE:
		return response_origin(peer, f, why, whysz);
	case SEMQ__FRAME__BODY_QUERY:
		return ids_origin("Query", peer, f->query->ids, f->query->n_ids,
				  why, whysz);
	case SEMQ__FRAME__BODY_TRACE:
		return ids_origin("Trace", peer, f->trace->ids, f->trace->n_ids,
				  why, whysz);
	case SEMQ__FRAME__BODY_STREAM_QUERY:
		if (strcmp(f->stream_query->origin, peer)) {
			snprintf(why, whysz,
				 "StreamQuery from '%s' about the streams of "
				 "'%s'",
				 peer, f->stream_query->origin);
			return SEMQ_DECLINED;
		}
		return SEMQ_OK;
	default: break;
	}
	snprintf(why, whysz,
		 "a %s frame from '%s': its origin rule is not written "
		 "(rights.c)",
		 rights_kind_name(f->body_case), peer);
	return SEMQ_ERR_PROTO;
}

static int check_dest(const char *peer, const Semq__Frame *f, char *why,
		      size_t whysz)
{
	size_t i;

	switch (f->body_case) {
	case SEMQ__FRAME__BODY_ACK_INDICATION:
		for (i = 0; i < f->ack_indication->n_verdicts; i++)
			if (strcmp(f->ack_indication->verdicts[i]->id->dest,
				   peer)) {
				snprintf(why, whysz,
					 "810-Indication from '%s' for a "
					 "message to '%s'",
					 peer,
					 f->ack_indication->verdicts[i]
						 ->id->dest);
				return SEMQ_DECLINED;
			}
		return SEMQ_OK;
	case SEMQ__FRAME__BODY_QUERY_REPLY:
		for (i = 0; i < f->query_reply->n_answers; i++)
			if (strcmp(f->query_reply->answers[i]->id->dest,
				   peer)) {
				snprintf(why, whysz,
					 "QueryReply from '%s' about a "
					 "message to '%s'",
					 peer,
					 f->query_reply->answers[i]->id->dest);
				return SEMQ_DECLINED;
			}
		return SEMQ_OK;
	default: break;
	}
	snprintf(why, whysz,
		 "a %s frame from '%s': its destination rule is not written "
		 "(rights.c)",
		 rights_kind_name(f->body_case), peer);
	return SEMQ_ERR_PROTO;
}

static int check_reporter(const char *peer, const Semq__Frame *f, char *why,
			  size_t whysz)
{
	if (f->body_case != SEMQ__FRAME__BODY_STREAM_STATE) {
		snprintf(why, whysz,
			 "a %s frame from '%s': its reporter rule is not "
			 "written (rights.c)",
			 rights_kind_name(f->body_case), peer);
		return SEMQ_ERR_PROTO;
	}
	if (strcmp(f->stream_state->reporter, peer)) {
		snprintf(why, whysz, "StreamState from '%s' reporting for '%s'",
			 peer, f->stream_state->reporter);
		return SEMQ_DECLINED;
	}
	return SEMQ_OK;
}

/* "Not delivered" from anyone only delays a resend; a claim of custody
 * (forwarded, stored), or that nobody knows the destination or a routing
 * loop (the origin puts the message dead) only from a trusted relay. */
static int check_relay(const char *peer, const Semq__Frame *f, char *why,
		       size_t whysz)
{
	if (f->body_case != SEMQ__FRAME__BODY_RELAY_ACK) {
		snprintf(why, whysz,
			 "a %s frame from '%s': its relay rule is not written "
			 "(rights.c)",
			 rights_kind_name(f->body_case), peer);
		return SEMQ_ERR_PROTO;
	}
	if (f->relay_ack->kind == SEMQ__RELAY_ACK__KIND__UNREACHABLE &&
	    f->relay_ack->reason != SEMQ__RELAY_REFUSAL__UNKNOWN_DEST &&
	    f->relay_ack->reason != SEMQ__RELAY_REFUSAL__LOOP)
		return SEMQ_OK;
	snprintf(why, whysz,
		 "RelayAck (%s) from '%s', which is not a "
		 "trusted_relay",
		 f->relay_ack->kind == SEMQ__RELAY_ACK__KIND__UNREACHABLE
			 ? "undeliverable"
			 : "custody",
		 peer);
	return SEMQ_DECLINED;
}

int rights_check(const Semq__Frame *f, const char *peer, int trusted, char *why,
		 size_t whysz)
{
	const struct rights_kind *k = rights_kind(f->body_case);

	if (!k) {
		/* fail closed: a kind without a row has no rights */
		snprintf(why, whysz,
			 "a frame of unknown kind (body %d) from '%s': no "
			 "peer may send it",
			 (int)f->body_case, peer);
		return SEMQ_ERR_PROTO;
	}
	if (k->who == RIGHTS_HANDSHAKE) {
		snprintf(why, whysz, "a %s frame from '%s' after the handshake",
			 k->name, peer);
		return SEMQ_ERR_PROTO;
	}
	if (trusted)
		return SEMQ_OK;
	switch (k->who) {
	case RIGHTS_ANY: return SEMQ_OK;
	case RIGHTS_ORIGIN: return check_origin(peer, f, why, whysz);
	case RIGHTS_DEST: return check_dest(peer, f, why, whysz);
	case RIGHTS_REPORTER: return check_reporter(peer, f, why, whysz);
	case RIGHTS_RELAY: return check_relay(peer, f, why, whysz);
	case RIGHTS_HANDSHAKE: break;
	}
	snprintf(why, whysz, "a %s frame from '%s': rule %d is not known",
		 k->name, peer, (int)k->who);
	return SEMQ_ERR_PROTO;
}
