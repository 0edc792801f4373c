/* SPDX-License-Identifier: MIT */
/*
 * Where is a message? (see trace.h for the design)
 *
 * A trace in progress (struct tpend) keeps its hops' records packed
 * (TraceHop bytes): this node's own first, then a note for each next hop
 * that could not be asked, then what each asked hop (struct tsub) answered.
 * When every asked hop answered, or the wait is over, they are unpacked
 * once more into the TraceReply for the asking peer, or into the JSON of
 * GET /trace.
 */
#include "trace.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "codec.h"
#include "jsontext.h"
#include "log.h"
#include "report.h"

#define ERR_SHOWN 256 /* bytes of a last_error in a record */

struct blob {
	uint8_t *p;
	size_t n;
};

/* Packed TraceHops, at most CODEC_TRACE_HOPS. */
struct hops {
	struct blob v[CODEC_TRACE_HOPS];
	size_t n;
};

/* One Trace sent onward. */
struct tsub {
	uint64_t conn_id, request;
	char peer[SEMQ_ID_MAX + 1];
	char instance[SEMQ_INSTANCE_MAX + 1];
	int answered;
	struct msgid ids[CODEC_TRACE_IDS];
	size_t n_ids;
	struct hops hops;
};

struct tpend {
	struct tpend *next;
	uint64_t req_id;       /* GET /trace: the admin request; else 0 */
	uint64_t from_conn;    /* a peer's Trace: its connection */
	uint64_t from_request; /* and its request id */
	unsigned hops_in;      /* relays the Trace passed before us */
	int64_t deadline;
	unsigned wait_ms;
	json_t *asked;   /* GET /trace: the question (owned) */
	json_t *ids;     /* GET /trace: the messages, in order (owned) */
	struct hops own; /* this node's record, then the notes */
	struct tsub *subs;
	size_t n_subs;
};

struct trace {
	struct store *st;
	const struct config *c;
	struct tpend *pend;
	size_t n_pend;
	uint64_t next_request;
	uint64_t refused;
};

/* A record with the storage its strings point into. */
struct rec {
	Semq__TraceRecord r;
	Semq__MsgId id;
	char origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];
	char key[SEMQ_KEY_MAX + 1];
	char last_error[ERR_SHOWN], redo_error[ERR_SHOWN];
	char custodian[SEMQ_ID_MAX + 1], via[SEMQ_ID_MAX + 1];
	char next_hop[SEMQ_ID_MAX + 1];
};

struct trace *trace_new(struct store *st, const struct config *c)
{
	struct trace *t = calloc(1, sizeof *t);

	if (!t)
		return NULL;
	t->st = st;
	t->c = c;
	return t;
}

static void hops_clear(struct hops *h)
{
	size_t i;

	for (i = 0; i < h->n; i++)
		free(h->v[i].p);
	h->n = 0;
}

static void pend_free(struct tpend *p)
{
	size_t i;

	if (!p)
		return;
	hops_clear(&p->own);
	for (i = 0; i < p->n_subs; i++)
		hops_clear(&p->subs[i].hops);
	free(p->subs);
	json_decref(p->asked);
	json_decref(p->ids);
	free(p);
}

void trace_free(struct trace *t)
{
	if (!t)
		return;
	while (t->pend) {
		struct tpend *p = t->pend;
		t->pend = p->next;
		pend_free(p);
	}
	free(t);
}

uint64_t trace_take_refused(struct trace *t)
{
	uint64_t n = t ? t->refused : 0;

	if (t)
		t->refused = 0;
	return n;
}

int64_t trace_next_due(const struct trace *t)
{
	const struct tpend *p;
	int64_t due = INT64_MAX;

	for (p = t ? t->pend : NULL; p; p = p->next)
		if (p->deadline < due)
			due = p->deadline;
	return due;
}

/* ---- records ----------------------------------------------------------------- */

/* Copies at most sz - 1 bytes of s (NULL = ""). */
static void copy_text(char *dst, size_t sz, const char *s)
{
	size_t n = s ? strnlen(s, sz - 1) : 0;

	if (n)
		memcpy(dst, s, n);
	dst[n] = '\0';
}

/* The peer this node sends dest's messages to: dest itself when it is a
 * configured peer, else its [route], else [route] default; NULL when none.
 * Borrowed from c. */
static const char *next_name(const struct config *c, const char *dest)
{
	size_t i;

	if (config_peer(c, dest))
		return dest;
	for (i = 0; i < c->n_routes; i++)
		if (!strcmp(c->routes[i].dest, dest))
			return c->routes[i].via;
	for (i = 0; i < c->n_routes; i++)
		if (!strcmp(c->routes[i].dest, "default"))
			return c->routes[i].via;
	return NULL;
}

static void rec_init(struct rec *x, const struct msgid *id)
{
	memset(x, 0, sizeof *x);
	semq__trace_record__init(&x->r);
	semq__msg_id__init(&x->id);
	copy_text(x->origin, sizeof x->origin, id->origin);
	copy_text(x->dest, sizeof x->dest, id->dest);
	x->id.origin = x->origin;
	x->id.dest = x->dest;
	x->id.seq = id->seq;
	x->id.life = id->life;
	x->r.id = &x->id;
	x->r.result = -1;
	x->r.key = x->key;
	x->r.last_error = x->last_error;
	x->r.redo_error = x->redo_error;
	x->r.custodian = x->custodian;
	x->r.via = x->via;
	x->r.next_hop = x->next_hop;
}

/* This node's record of *id (its life filled in when not given). */
static int local_record(struct trace *t, const struct routes *r,
			struct msgid *id, struct rec *x)
{
	const struct config *c = t->c;
	struct msg m;
	struct out_row row;
	int rc;

	if (!id->life &&
	    store_current_life(t->st, id->origin, id->dest, &id->life))
		id->life = 0;
	rec_init(x, id);
	rc = store_outbound_get(t->st, id, &m, &row);
	if (rc == SEMQ_OK) {
		x->r.outbound = 1;
		x->r.status = row.status;
		x->r.attempts = (uint32_t)row.attempts;
		x->r.sent_at = row.sent_at;
		x->r.acked_at = row.acked_at;
		x->r.result = row.result;
		copy_text(x->last_error, sizeof x->last_error, row.last_error);
		copy_text(x->custodian, sizeof x->custodian, row.custodian);
		copy_text(x->key, sizeof x->key, m.key);
		x->r.type = m.type;
		x->r.created_at = m.created_at;
		msg_clear(&m);
	} else if (rc != SEMQ_ERR_NOT_FOUND) {
		return rc;
	}
	if (!strcmp(id->dest, c->id)) {
		struct trace_in in;
		struct trace_redo rd;
		uint64_t w = 0, high = 0;

		if ((rc = store_trace_in(t->st, id, &in, &rd)) ||
		    (rc = store_watermark(t->st, id->origin, id->dest, id->life,
					  &w)) ||
		    (rc = store_stream_high(t->st, id->origin, id->dest,
					    id->life, &high)))
			return rc;
		x->r.confirmed_through = w;
		x->r.high = high;
		if (in.found) {
			x->r.receipt = SEMQ__TRACE_RECORD__RECEIPT__RECEIVED;
			x->r.receipt_result = (uint32_t)in.result;
			x->r.ack_status = (uint32_t)in.ack_status;
			x->r.received_at = in.received_at;
			copy_text(x->via, sizeof x->via, in.via);
		} else {
			x->r.receipt =
				id->seq <= w
					? SEMQ__TRACE_RECORD__RECEIPT__CONFIRMED
					: SEMQ__TRACE_RECORD__RECEIPT__NOT_RECEIVED;
		}
		if (rd.id) {
			x->r.redo_id = rd.id;
			x->r.redo_status = rd.status;
			x->r.tries = (uint32_t)rd.tries;
			x->r.next_attempt_at = rd.next_attempt_at;
			copy_text(x->redo_error, sizeof x->redo_error,
				  rd.last_error);
		}
	} else {
		const struct route_hop *h =
			route_stream_hop(r, c, id->dest, id);

		copy_text(x->next_hop, sizeof x->next_hop,
			  h ? h->peer : next_name(c, id->dest));
		x->r.next_connected = h != NULL;
	}
	return SEMQ_OK;
}

/* Packs a TraceHop into h (dropped when h is full). */
static int hop_add(struct hops *h, const char *node, const char *instance,
		   int relay, int saf, const char *note,
		   Semq__TraceRecord **recs, size_t n)
{
	Semq__TraceHop th = SEMQ__TRACE_HOP__INIT;
	size_t len;
	uint8_t *p;

	if (h->n >= CODEC_TRACE_HOPS)
		return SEMQ_OK;
	th.node = (char *)node;
	th.instance = (char *)(instance ? instance : "");
	th.relay = relay;
	th.store_and_forward = saf;
	th.note = (char *)(note ? note : "");
	th.records = recs;
	th.n_records = n;
	len = semq__trace_hop__get_packed_size(&th);
	p = malloc(len ? len : 1);
	if (!p)
		return SEMQ_ERR_NOMEM;
	semq__trace_hop__pack(&th, p);
	h->v[h->n].p = p;
	h->v[h->n].n = len;
	h->n++;
	return SEMQ_OK;
}

/* A hop that could not be asked: bare records of ids[0..n) and a note. */
static int note_add(struct hops *h, const char *node, const char *instance,
		    const struct msgid *ids, size_t n, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

static int note_add(struct hops *h, const char *node, const char *instance,
		    const struct msgid *ids, size_t n, const char *fmt, ...)
{
	Semq__TraceRecord *rp[CODEC_TRACE_IDS];
	struct rec *x = calloc(n ? n : 1, sizeof *x);
	char note[200];
	va_list ap;
	size_t i;
	int r;

	if (!x)
		return SEMQ_ERR_NOMEM;
	va_start(ap, fmt);
	vsnprintf(note, sizeof note, fmt, ap);
	va_end(ap);
	for (i = 0; i < n; i++) {
		rec_init(&x[i], &ids[i]);
		rp[i] = &x[i].r;
	}
	r = hop_add(h, node, instance, 0, 0, note, rp, n);
	free(x);
	return r;
}

/* ---- answers ----------------------------------------------------------------- */

static const char *receipt_name(int receipt)
{
	switch (receipt) {
	case SEMQ__TRACE_RECORD__RECEIPT__RECEIVED: return "received";
	case SEMQ__TRACE_RECORD__RECEIPT__CONFIRMED: return "confirmed";
	case SEMQ__TRACE_RECORD__RECEIPT__NOT_RECEIVED: return "not received";
	default: return "unknown";
	}
}

static json_t *ms_or_null(int64_t v)
{
	return v ? json_integer(v) : json_null();
}

static json_t *record_json(const struct config *c, const Semq__TraceRecord *r,
			   int bare)
{
	char idb[MSGID_STRLEN];
	struct msgid id;
	json_t *o = json_object(), *x;
	int f = 0;

	codec_msgid_from_wire(r->id, &id);
	jset(o, "id", json_text(msgid_str(&id, idb, sizeof idb)), &f);
	if (bare)
		return f ? (json_decref(o), NULL) : o;
	if (r->outbound) {
		x = json_object();
		jset(x, "status", json_integer(r->status), &f);
		jset(x, "status_name",
		     json_text(semq_status_name("tb_0031", r->status)), &f);
		jset(x, "attempts", json_integer(r->attempts), &f);
		jset(x, "created_at", ms_or_null(r->created_at), &f);
		jset(x, "sent_at", ms_or_null(r->sent_at), &f);
		jset(x, "acked_at", ms_or_null(r->acked_at), &f);
		jset(x, "result",
		     r->result < 0 ? json_null() : json_integer(r->result), &f);
		jset(x, "result_name", json_text(semq_result_name(r->result)),
		     &f);
		jset(x, "last_error",
		     r->last_error[0] ? json_text(r->last_error) : json_null(),
		     &f);
		jset(x, "custodian",
		     r->custodian[0] ? json_text(r->custodian) : json_null(),
		     &f);
		jset(x, "key", r->key[0] ? json_text(r->key) : json_null(), &f);
		jset(x, "type", json_integer(r->type), &f);
		jset(o, "outbound", x, &f);
	}
	if (r->receipt) {
		x = json_object();
		jset(x, "state", json_text(receipt_name(r->receipt)), &f);
		if (r->receipt == SEMQ__TRACE_RECORD__RECEIPT__RECEIVED) {
			jset(x, "result", json_integer(r->receipt_result), &f);
			jset(x, "result_name",
			     json_text(
				     semq_result_name((int)r->receipt_result)),
			     &f);
			jset(x, "ack_status",
			     json_text(semq_status_name("tb_0030",
							(int)r->ack_status)),
			     &f);
			jset(x, "received_at", ms_or_null(r->received_at), &f);
			jset(x, "via",
			     r->via[0] ? json_text(r->via) : json_null(), &f);
		}
		jset(x, "confirmed_through",
		     json_integer((json_int_t)r->confirmed_through), &f);
		jset(x, "high", json_integer((json_int_t)r->high), &f);
		jset(o, "receipt", x, &f);
	}
	if (r->redo_id) {
		x = json_object();
		jset(x, "id", json_integer(r->redo_id), &f);
		jset(x, "status", json_integer(r->redo_status), &f);
		jset(x, "status_name",
		     json_text(semq_status_name("tb_0033", r->redo_status)),
		     &f);
		jset(x, "tries", json_integer(r->tries), &f);
		jset(x, "next_attempt_at", ms_or_null(r->next_attempt_at), &f);
		jset(x, "last_error",
		     r->redo_error[0] ? json_text(r->redo_error) : json_null(),
		     &f);
		jset(o, "redo", x, &f);
	}
	if (strcmp(id.dest, c->id) && !r->receipt) {
		jset(o, "next_hop",
		     r->next_hop[0] ? json_text(r->next_hop) : json_null(), &f);
		jset(o, "next_connected", json_boolean(r->next_connected), &f);
	}
	if (f) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* Appends the hop packed in b to arr as JSON. */
static int hop_json(const struct config *c, const struct blob *b, json_t *arr)
{
	Semq__TraceHop *h = semq__trace_hop__unpack(NULL, b->n, b->p);
	json_t *o, *recs;
	size_t i;
	int f = 0;

	if (!h)
		return SEMQ_ERR_NOMEM;
	o = json_object();
	recs = json_array();
	jset(o, "node", json_text(h->node), &f);
	jset(o, "instance",
	     h->instance[0] ? json_text(h->instance) : json_null(), &f);
	jset(o, "relay", json_boolean(h->relay), &f);
	jset(o, "store_and_forward", json_boolean(h->store_and_forward), &f);
	jset(o, "note", h->note[0] ? json_text(h->note) : json_null(), &f);
	for (i = 0; recs && i < h->n_records; i++) {
		json_t *x = record_json(c, h->records[i], h->note[0] != 0);
		if (!x || json_array_append_new(recs, x))
			f = 1;
	}
	jset(o, "records", recs, &f);
	semq__trace_hop__free_unpacked(h, NULL);
	if (f || json_array_append_new(arr, o))
		return SEMQ_ERR_NOMEM;
	return SEMQ_OK;
}

/* Every hop of p in order: its own, then each asked hop's answer. */
static int each_hop(const struct tpend *p,
		    int (*fn)(void *ctx, const struct blob *b), void *ctx)
{
	size_t i, k;
	int r;

	for (i = 0; i < p->own.n; i++)
		if ((r = fn(ctx, &p->own.v[i])))
			return r;
	for (k = 0; k < p->n_subs; k++)
		for (i = 0; i < p->subs[k].hops.n; i++)
			if ((r = fn(ctx, &p->subs[k].hops.v[i])))
				return r;
	return SEMQ_OK;
}

struct json_ctx {
	const struct config *c;
	json_t *arr;
};

static int json_cb(void *ctx, const struct blob *b)
{
	struct json_ctx *x = ctx;

	return hop_json(x->c, b, x->arr);
}

struct reply_ctx {
	Semq__TraceHop *v[CODEC_TRACE_HOPS];
	size_t n;
};

static int reply_cb(void *ctx, const struct blob *b)
{
	struct reply_ctx *x = ctx;

	if (x->n >= CODEC_TRACE_HOPS)
		return SEMQ_OK;
	x->v[x->n] = semq__trace_hop__unpack(NULL, b->n, b->p);
	if (!x->v[x->n])
		return SEMQ_ERR_NOMEM;
	x->n++;
	return SEMQ_OK;
}

/* The max_frame of connection conn, as its Hello said. */
static size_t frame_max(const struct trace *t, const struct routes *r,
			uint64_t conn)
{
	size_t i;

	for (i = 0; r && i < r->n_hops; i++)
		if (r->hops[i].conn_id == conn && r->hops[i].max_frame)
			return r->hops[i].max_frame;
	return t->c->max_frame;
}

/* Answers p (the admin request, or the asking peer). */
static int finish(struct trace *t, const struct routes *rt, struct tpend *p,
		  struct outbox *ob)
{
	int r;

	if (p->req_id) {
		struct json_ctx x = {t->c, json_array()};
		json_t *doc = json_object();
		int f = 0;

		r = x.arr ? each_hop(p, json_cb, &x) : SEMQ_ERR_NOMEM;
		jset(doc, "node", json_text(t->c->id), &f);
		jset(doc, "asked", json_incref(p->asked), &f);
		jset(doc, "messages", json_incref(p->ids), &f);
		jset(doc, "hops", x.arr, &f);
		if (r || f) {
			json_decref(doc);
			return report_answer_error(ob, p->req_id, 500,
						   "trace: out of memory");
		}
		return report_answer_json(ob, p->req_id, 200, doc);
	} else {
		struct reply_ctx x = {{0}, 0};
		Semq__TraceReply tr = SEMQ__TRACE_REPLY__INIT;
		Semq__Frame f = SEMQ__FRAME__INIT;
		size_t i;

		r = each_hop(p, reply_cb, &x);
		if (r == SEMQ_OK) {
			tr.request = p->from_request;
			tr.hops = x.v;
			tr.n_hops = x.n;
			f.body_case = SEMQ__FRAME__BODY_TRACE_REPLY;
			f.trace_reply = &tr;
			r = outbox_frame(ob, p->from_conn, &f,
					 frame_max(t, rt, p->from_conn));
			if (r == SEMQ_ERR_TOO_BIG) {
				log_msg(LOG_WARN, "trace", NULL, NULL,
					"a TraceReply of %zu hops is over the "
					"asker's max_frame: not sent",
					x.n);
				r = SEMQ_OK;
			}
		}
		for (i = 0; i < x.n; i++)
			semq__trace_hop__free_unpacked(x.v[i], NULL);
		return r;
	}
}

static void pend_unlink(struct trace *t, struct tpend *p)
{
	struct tpend **pp;

	for (pp = &t->pend; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			t->n_pend--;
			return;
		}
}

/* ---- starting a trace ---------------------------------------------------------- */

static size_t pending_of(const struct trace *t, uint64_t conn)
{
	const struct tpend *p;
	size_t n = 0;

	for (p = t->pend; p; p = p->next)
		if (p->from_conn == conn)
			n++;
	return n;
}

/* The ids of one next hop that could not be asked, and why. */
struct group {
	char peer[SEMQ_ID_MAX + 1];
	char instance[SEMQ_INSTANCE_MAX + 1];
	const char *note;                   /* static */
	unsigned char idx[CODEC_TRACE_IDS]; /* into the traced ids */
	size_t n;
};

/* Adds the traced id number idx to the group of (peer, instance, note) in
 * g[0..*n). */
static void group_add(struct group *g, size_t *n, const char *peer,
		      const char *instance, const char *note, size_t idx)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if (!strcmp(g[i].peer, peer) &&
		    !strcmp(g[i].instance, instance) && g[i].note == note)
			break;
	if (i == *n) {
		copy_text(g[i].peer, sizeof g[i].peer, peer);
		copy_text(g[i].instance, sizeof g[i].instance, instance);
		g[i].note = note;
		g[i].n = 0;
		(*n)++;
	}
	if (g[i].n < CODEC_TRACE_IDS)
		g[i].idx[g[i].n++] = (unsigned char)idx;
}

/*
 * Traces ids[0..n) (lives filled in here) for p (req_id or from_conn set):
 * the own records, then a Trace to each next hop that can be asked. Answers
 * at once when nobody is asked, else links p into t (owned by t from then
 * on, also on error).
 */
static int start(struct trace *t, const struct routes *rt, struct tpend *p,
		 struct msgid *ids, size_t n, int64_t now, struct outbox *ob)
{
	const struct config *c = t->c;
	Semq__TraceRecord *rp[CODEC_TRACE_IDS];
	struct rec *x = calloc(n ? n : 1, sizeof *x);
	struct group *g = calloc(n ? n : 1, sizeof *g);
	int busy = 0, r = SEMQ_OK, past = 0;
	unsigned level;
	char note[120] = "";
	size_t i, k, ng = 0;

	if (!x || !g) {
		free(x);
		free(g);
		pend_free(p);
		return SEMQ_ERR_NOMEM;
	}
	p->next = t->pend;
	t->pend = p;
	t->n_pend++;
	for (i = 0; i < n && r == SEMQ_OK; i++) {
		r = local_record(t, rt, &ids[i], &x[i]);
		rp[i] = &x[i].r;
	}
	if (r)
		goto out;
	if (t->n_pend > TRACE_PENDING ||
	    (p->from_conn && pending_of(t, p->from_conn) > TRACE_PER_CONN)) {
		busy = 1;
		t->refused++;
		snprintf(note, sizeof note,
			 "busy: too many traces in progress, not asked "
			 "further");
	} else if (p->from_conn && p->hops_in + 1 > c->max_hops) {
		past = 1;
		snprintf(note, sizeof note,
			 "max_hops: passed %u relays, not asked further",
			 p->hops_in);
	}
	r = hop_add(&p->own, c->id, c->instance, c->relay, c->store_and_forward,
		    note, rp, n);
	if (r || busy || past)
		goto out;
	/* Onward: this node's own messages, or any as a relay. */
	for (i = 0; i < n; i++) {
		const struct msgid *id = &ids[i];
		const struct route_hop *h;
		const char *nh;
		struct tsub *s = NULL;

		if (!strcmp(id->dest, c->id) ||
		    (strcmp(id->origin, c->id) && !c->relay))
			continue;
		nh = next_name(c, id->dest);
		h = route_stream_hop(rt, c, id->dest, id);
		if (!h) {
			if (nh)
				group_add(g, &ng, nh, "", "not connected", i);
			continue;
		}
		if (!h->trace) {
			group_add(g, &ng, h->peer, h->instance,
				  "does not support trace", i);
			continue;
		}
		for (k = 0; k < p->n_subs; k++)
			if (p->subs[k].conn_id == h->conn_id)
				s = &p->subs[k];
		if (!s) {
			void *v = realloc(p->subs,
					  (p->n_subs + 1) * sizeof *p->subs);
			if (!v) {
				r = SEMQ_ERR_NOMEM;
				goto out;
			}
			p->subs = v;
			s = &p->subs[p->n_subs++];
			memset(s, 0, sizeof *s);
			s->conn_id = h->conn_id;
			s->request = ++t->next_request;
			copy_text(s->peer, sizeof s->peer, h->peer);
			copy_text(s->instance, sizeof s->instance, h->instance);
		}
		s->ids[s->n_ids++] = *id;
	}
	for (k = 0; k < ng && r == SEMQ_OK; k++) {
		struct msgid gi[CODEC_TRACE_IDS];

		for (i = 0; i < g[k].n; i++)
			gi[i] = ids[g[k].idx[i]];
		r = note_add(&p->own, g[k].peer, g[k].instance, gi, g[k].n,
			     "%s", g[k].note);
	}
	for (k = 0; k < p->n_subs && r == SEMQ_OK; k++) {
		struct tsub *s = &p->subs[k];
		Semq__MsgId wid[CODEC_TRACE_IDS], *wp[CODEC_TRACE_IDS];
		Semq__Trace tr = SEMQ__TRACE__INIT;
		Semq__Frame f = SEMQ__FRAME__INIT;

		for (i = 0; i < s->n_ids; i++) {
			semq__msg_id__init(&wid[i]);
			codec_msgid_to_wire(&s->ids[i], &wid[i]);
			wp[i] = &wid[i];
		}
		tr.request = s->request;
		tr.ids = wp;
		tr.n_ids = s->n_ids;
		f.body_case = SEMQ__FRAME__BODY_TRACE;
		f.trace = &tr;
		f.hops = p->from_conn ? p->hops_in + 1 : 0;
		r = outbox_frame(ob, s->conn_id, &f,
				 frame_max(t, rt, s->conn_id));
	}
	/* the origin waits longest, each relay after it a hop less */
	level = p->from_conn ? p->hops_in + 1 : 0;
	p->wait_ms = TRACE_WAIT_MS > TRACE_HOP_MS * (level + 1)
			     ? TRACE_WAIT_MS - TRACE_HOP_MS * level
			     : TRACE_HOP_MS;
	p->deadline = now + p->wait_ms;
out:
	free(x);
	free(g);
	if (r || !p->n_subs) {
		pend_unlink(t, p);
		if (r == SEMQ_OK)
			r = finish(t, rt, p, ob);
		pend_free(p);
	}
	return r;
}

/* ---- GET /trace ------------------------------------------------------------------ */

/* "ORIGIN/DEST/SEQ" into id; 0 when it is not one. */
static int parse_id(const char *s, struct msgid *id)
{
	const char *a = strchr(s, '/'), *b = a ? strchr(a + 1, '/') : NULL;
	char *end;
	unsigned long long seq;

	memset(id, 0, sizeof *id);
	if (!a || !b || (size_t)(a - s) > SEMQ_ID_MAX ||
	    (size_t)(b - a - 1) > SEMQ_ID_MAX)
		return 0;
	memcpy(id->origin, s, (size_t)(a - s));
	memcpy(id->dest, a + 1, (size_t)(b - a - 1));
	if (!semq_id_valid(id->origin) || !semq_id_valid(id->dest))
		return 0;
	if (b[1] < '0' || b[1] > '9')
		return 0;
	seq = strtoull(b + 1, &end, 10);
	if (*end || seq == 0 || seq > INT64_MAX)
		return 0;
	id->seq = seq;
	return 1;
}

/* s as a number 0..INT64_MAX; 0 when it is not one. */
static int parse_num(const char *s, int64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || s[0] < '0' || s[0] > '9')
		return 0;
	v = strtoull(s, &end, 10);
	if (*end || v > INT64_MAX)
		return 0;
	*out = (int64_t)v;
	return 1;
}

struct own_ctx {
	struct msgid ids[CODEC_TRACE_IDS];
	size_t n;
};

static int own_cb(void *ctx, const struct msg *m, const struct out_row *row)
{
	struct own_ctx *x = ctx;

	(void)row;
	if (x->n < CODEC_TRACE_IDS)
		x->ids[x->n++] = m->id;
	return x->n >= CODEC_TRACE_IDS;
}

int trace_admin(struct trace *t, const struct routes *r, const struct job *j,
		int64_t now, struct outbox *ob)
{
	static const char *const allowed[] = {"key",   "id",    "dest",
					      "since", "limit", NULL};
	const struct admin_req *rq = j->admin;
	struct evkeyvalq q;
	struct evkeyval *kv;
	const char *key = NULL, *ids = NULL, *dest = NULL;
	int64_t since = 0, limit = TRACE_LIMIT;
	struct own_ctx *x = NULL;
	struct tpend *p = NULL;
	char idb[MSGID_STRLEN];
	int rc = SEMQ_OK;
	size_t i;

	TAILQ_INIT(&q);
	if (rq->query && evhttp_parse_query_str(rq->query, &q) != 0)
		return report_answer_error(ob, rq->req_id, 400,
					   "query '%.200s' is malformed",
					   rq->query);
	TAILQ_FOREACH(kv, &q, next)
	{
		for (i = 0; allowed[i]; i++)
			if (!strcmp(kv->key, allowed[i]))
				break;
		if (!allowed[i]) {
			rc = report_answer_error(
				ob, rq->req_id, 400,
				"query: unknown parameter '%.100s' (there are "
				"key, id, dest, since, limit)",
				kv->key);
			goto out;
		}
		if (!strcmp(kv->key, "key"))
			key = kv->value;
		else if (!strcmp(kv->key, "id"))
			ids = kv->value;
		else if (!strcmp(kv->key, "dest"))
			dest = kv->value;
		else if (!strcmp(kv->key, "since") &&
			 !parse_num(kv->value, &since)) {
			rc = report_answer_error(ob, rq->req_id, 400,
						 "since: '%.100s' is not unix "
						 "milliseconds",
						 kv->value);
			goto out;
		} else if (!strcmp(kv->key, "limit") &&
			   (!parse_num(kv->value, &limit) || limit < 1 ||
			    limit > CODEC_TRACE_IDS)) {
			rc = report_answer_error(ob, rq->req_id, 400,
						 "limit: '%.100s' is not 1..%d",
						 kv->value, CODEC_TRACE_IDS);
			goto out;
		}
	}
	if (!key == !ids) {
		rc = report_answer_error(ob, rq->req_id, 400, "%s",
					 "trace: give key=K or id=O/D/SEQ");
		goto out;
	}
	if (dest && !semq_id_valid(dest)) {
		rc = report_answer_error(ob, rq->req_id, 400,
					 "dest: '%.100s' is not a node id",
					 dest);
		goto out;
	}
	if (key && (!key[0] || strlen(key) > SEMQ_KEY_MAX ||
		    !semq_utf8_valid((const uint8_t *)key, strlen(key)))) {
		rc = report_answer_error(ob, rq->req_id, 400,
					 "key: not 1..%d bytes of UTF-8",
					 SEMQ_KEY_MAX);
		goto out;
	}
	x = calloc(1, sizeof *x);
	p = calloc(1, sizeof *p);
	if (!x || !p) {
		rc = SEMQ_ERR_NOMEM;
		goto out;
	}
	p->req_id = rq->req_id;
	p->ids = json_array();
	p->asked = key ? json_pack("{s:s,s:s?,s:I}", "key", key, "dest", dest,
				   "since", (json_int_t)since)
		       : json_pack("{s:s}", "id", ids);
	if (!p->ids || !p->asked) {
		rc = SEMQ_ERR_NOMEM;
		goto out;
	}
	if (ids) {
		if (!parse_id(ids, &x->ids[0])) {
			rc = report_answer_error(ob, rq->req_id, 400,
						 "id: '%.200s' is not "
						 "ORIGIN/DEST/SEQ",
						 ids);
			goto out;
		}
		x->n = 1;
	} else {
		rc = store_trace_own(t->st, key, dest, since, (unsigned)limit,
				     own_cb, x);
		if (rc)
			goto out;
		if (!x->n) {
			rc = report_answer_error(
				ob, rq->req_id, 404,
				"no message of key '%.200s'%s%.64s from %s",
				key, dest ? " to " : "", dest ? dest : "",
				t->c->id);
			goto out;
		}
	}
	for (i = 0; i < x->n; i++)
		if (json_array_append_new(p->ids,
					  json_text(msgid_str(&x->ids[i], idb,
							      sizeof idb)))) {
			rc = SEMQ_ERR_NOMEM;
			goto out;
		}
	rc = start(t, r, p, x->ids, x->n, now, ob);
	p = NULL;
out:
	evhttp_clear_headers(&q);
	pend_free(p);
	free(x);
	return rc;
}

/* ---- frames --------------------------------------------------------------------- */

static int on_trace(struct trace *t, const struct routes *r,
		    const struct job *j, int64_t now, struct outbox *ob)
{
	const Semq__Trace *tr = j->frame->trace;
	struct msgid *ids = calloc(tr->n_ids, sizeof *ids);
	struct tpend *p = calloc(1, sizeof *p);
	size_t i;
	int rc;

	if (!ids || !p) {
		free(ids);
		free(p);
		return SEMQ_ERR_NOMEM;
	}
	for (i = 0; i < tr->n_ids; i++)
		codec_msgid_from_wire(tr->ids[i], &ids[i]);
	p->from_conn = j->conn_id;
	p->from_request = tr->request;
	p->hops_in = j->frame->hops;
	log_msg(LOG_DEBUG, "trace", j->peer, &ids[0],
		"trace of %zu message(s) asked", tr->n_ids);
	rc = start(t, r, p, ids, tr->n_ids, now, ob);
	free(ids);
	return rc;
}

static int on_reply(struct trace *t, const struct routes *r,
		    const struct job *j, struct outbox *ob)
{
	const Semq__TraceReply *tr = j->frame->trace_reply;
	struct tpend *p;
	size_t i, k;

	for (p = t->pend; p; p = p->next)
		for (k = 0; k < p->n_subs; k++) {
			struct tsub *s = &p->subs[k];
			int open = 0, rc;

			if (s->conn_id != j->conn_id ||
			    s->request != tr->request || s->answered)
				continue;
			s->answered = 1;
			for (i = 0; i < tr->n_hops; i++) {
				size_t len = semq__trace_hop__get_packed_size(
					tr->hops[i]);
				uint8_t *b;

				if (s->hops.n >= CODEC_TRACE_HOPS)
					break;
				b = malloc(len ? len : 1);
				if (!b)
					return SEMQ_ERR_NOMEM;
				semq__trace_hop__pack(tr->hops[i], b);
				s->hops.v[s->hops.n].p = b;
				s->hops.v[s->hops.n++].n = len;
			}
			for (i = 0; i < p->n_subs; i++)
				open += !p->subs[i].answered;
			if (open)
				return SEMQ_OK;
			pend_unlink(t, p);
			rc = finish(t, r, p, ob);
			pend_free(p);
			return rc;
		}
	/* late (its wait was over), or never asked: nothing to do */
	return SEMQ_OK;
}

int trace_on_frame(struct trace *t, const struct routes *r, const struct job *j,
		   int64_t now, struct outbox *ob)
{
	switch (j->frame->body_case) {
	case SEMQ__FRAME__BODY_TRACE: return on_trace(t, r, j, now, ob);
	case SEMQ__FRAME__BODY_TRACE_REPLY: return on_reply(t, r, j, ob);
	default: return SEMQ_ERR_INTERNAL;
	}
}

int trace_tick(struct trace *t, const struct routes *r, int64_t now,
	       struct outbox *ob)
{
	struct tpend *p, *next;
	int rc = SEMQ_OK;
	size_t k;

	for (p = t->pend; p && rc == SEMQ_OK; p = next) {
		next = p->next;
		if (p->deadline > now)
			continue;
		for (k = 0; k < p->n_subs && rc == SEMQ_OK; k++) {
			struct tsub *s = &p->subs[k];
			if (!s->answered)
				rc = note_add(&s->hops, s->peer, s->instance,
					      s->ids, s->n_ids,
					      "no answer within %u s",
					      p->wait_ms / 1000);
		}
		pend_unlink(t, p);
		if (rc == SEMQ_OK)
			rc = finish(t, r, p, ob);
		pend_free(p);
	}
	return rc;
}
