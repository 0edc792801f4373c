/* SPDX-License-Identifier: MIT */
/*
 * The store thread's side of the admin HTTP (see report.h): reads the tables
 * through store.h and writes JSON (jansson) or Prometheus text for one
 * request at a time.
 *
 * DESIGN
 *  - Runs inside the worker's open batch: reads see the batch's own writes,
 *    and an action (retry, discard) is answered in the outbox, which leaves
 *    only after the commit. A failed action returns its error so that the
 *    batch rolls back; a failed read answers 500 and lets the batch go on.
 *  - Every answer is one struct out carrying the request id, never a pointer
 *    to the request: admin.c may have answered it meanwhile.
 *  - Strings from the tables (keys, errors, reasons) may hold any bytes;
 *    JSON gets them as UTF-8 with every other byte replaced by '?'.
 *  - /metrics and /streams read O(streams) rows, never O(rows): they run
 *    inside the batch's write transaction, and the dashboard polls every
 *    2 s. The counts come from semq_counts (store_counts*, kept by triggers
 *    in the transaction of every change), the age of the oldest
 *    unconfirmed message from one index seek per stream.
 *  - A message's payload (GET /redo/ID) is shown only when [node]
 *    admin_token is set: admin.c then serves every read only to a request
 *    with the token. Without one the entry comes without it, and says so.
 */
#include "report.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "jsontext.h"
#include "log.h"

#define REDO_LIMIT_DEFAULT 100
#define REDO_LIMIT_MAX 10000

enum {
	HS_OK = 200,
	HS_BAD_REQUEST = 400,
	HS_NOT_FOUND = 404,
	HS_NOT_ALLOWED = 405,
	HS_CONFLICT = 409,
	HS_INTERNAL = 500
};

/* ---- statuses ------------------------------------------------------------- */

#define out_statuses semq_out_statuses
#define in_statuses semq_in_statuses
#define redo_statuses semq_redo_statuses
#define N_OUT SEMQ_N_OUT_STATUS
#define N_IN SEMQ_N_IN_STATUS
#define N_REDO SEMQ_N_REDO_STATUS

/* Index of status in v[n], or -1. */
static int status_index(const int *v, size_t n, int status)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (v[i] == status)
			return (int)i;
	return -1;
}

/* ---- answers ---------------------------------------------------------------- */

/* Queues the answer for req_id; body (ownership transferred, may be NULL
 * for an empty body) is freed on failure too. */
static int reply(struct outbox *ob, uint64_t req_id, int status, char *body,
		 size_t len)
{
	struct out *o = calloc(1, sizeof *o);

	if (!o) {
		free(body);
		return SEMQ_ERR_NOMEM;
	}
	o->req_id = req_id;
	o->http_status = status;
	o->bytes = (uint8_t *)body;
	o->len = body ? len : 0;
	if (ob->tail)
		ob->tail->next = o;
	else
		ob->head = o;
	ob->tail = o;
	ob->n++;
	return SEMQ_OK;
}

/* Queues doc (stolen) as the JSON answer. */
static int reply_json(struct outbox *ob, uint64_t req_id, int status,
		      json_t *doc)
{
	char *text = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
	char *body;
	size_t n;

	json_decref(doc);
	if (!text)
		return SEMQ_ERR_NOMEM;
	n = strlen(text);
	body = realloc(text, n + 2);
	if (!body) {
		free(text);
		return SEMQ_ERR_NOMEM;
	}
	body[n++] = '\n';
	body[n] = '\0';
	return reply(ob, req_id, status, body, n);
}

static int reply_error(struct outbox *ob, uint64_t req_id, int status,
		       const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* {"error": "..."}: one line naming the culprit. */
static int reply_error(struct outbox *ob, uint64_t req_id, int status,
		       const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	return reply_json(ob, req_id, status,
			  json_pack("{s:s}", "error", text));
}

/* ---- JSON of rows ------------------------------------------------------------ */

/* ---- the request ------------------------------------------------------------- */

/* s[0..n) as a number 1..INT64_MAX in *out (digits only); 0 when it is
 * not one. */
static int parse_positive(const char *s, size_t n, int64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (n == 0 || n > 19)
		return 0;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v == 0 || v > INT64_MAX)
		return 0;
	*out = (int64_t)v;
	return 1;
}

/* Splits the query into q (decoded). Every key must be one of `allowed`
 * (NULL-terminated) and given once; otherwise 400 is queued and *answered
 * set. */
static int parse_query(const struct admin_req *rq, const char *const *allowed,
		       struct evkeyvalq *q, struct outbox *ob, int *answered)
{
	struct evkeyval *kv, *kv2;
	size_t i;

	TAILQ_INIT(q);
	*answered = 1;
	if (!rq->query || !rq->query[0]) {
		*answered = 0;
		return SEMQ_OK;
	}
	if (evhttp_parse_query_str(rq->query, q) != 0)
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "query '%s' is malformed", rq->query);
	TAILQ_FOREACH(kv, q, next)
	{
		for (i = 0; allowed[i]; i++)
			if (!strcmp(kv->key, allowed[i]))
				break;
		if (!allowed[i])
			return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
					   "query: unknown parameter '%s'",
					   kv->key);
		for (kv2 = TAILQ_NEXT(kv, next); kv2;
		     kv2 = TAILQ_NEXT(kv2, next))
			if (!strcmp(kv->key, kv2->key))
				return reply_error(
					ob, rq->req_id, HS_BAD_REQUEST,
					"query: parameter '%s' is given twice",
					kv->key);
	}
	*answered = 0;
	return SEMQ_OK;
}

/* ---- GET /redo, GET /redo/ID ------------------------------------------------- */

struct list_ctx {
	struct store *st;
	int64_t now;
	json_t *arr;
	int failed;
};

static int list_cb(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct list_ctx *x = ctx;
	json_t *o = redo_json_at(x->st, m, row, x->now);

	if (!o || json_array_append_new(x->arr, o)) {
		x->failed = 1;
		return 1;
	}
	return 0;
}

/* key=, dest=, since=, where= of q into f (strings borrowed from q), or
 * 400 queued naming the parameter. */
static int parse_filter(const struct admin_req *rq, struct evkeyvalq *q,
			int64_t now, struct store_filter *f,
			struct semq_where *w, struct outbox *ob, int *answered)
{
	const char *kv = evhttp_find_header(q, "key");
	const char *dv = evhttp_find_header(q, "dest");
	const char *sv = evhttp_find_header(q, "since");
	const char *wv = evhttp_find_header(q, "where");

	*answered = 1;
	if (kv && (!*kv || strlen(kv) > SEMQ_KEY_MAX))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "query: key '%s' is not 1..%d bytes", kv,
				   SEMQ_KEY_MAX);
	if (dv && !semq_id_valid(dv))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "query: dest '%s' is not a node id", dv);
	if (sv && semq_when_parse(sv, now, 1, &f->since))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "query: since '%s' is not unix ms or %s", sv,
				   SEMQ_WHEN_FORMS);
	if (wv && semq_where_parse(wv, w))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "query: where '%s' is not %s", wv,
				   SEMQ_WHERE_FORMS);
	f->key = kv;
	f->dest = dv;
	f->where = wv ? w : NULL;
	*answered = 0;
	return SEMQ_OK;
}

static int group_cb(void *ctx, const struct redo_group *g)
{
	struct list_ctx *x = ctx;
	json_t *o = json_object(), *dests = json_array();
	const char *p, *e;
	int failed = !o || !dests;

	for (p = g->dests; dests && *p; p = *e ? e + 1 : e) {
		e = p + strcspn(p, ",");
		if (json_array_append_new(dests,
					  json_stringn(p, (size_t)(e - p))))
			failed = 1;
	}
	jset(o, "error", json_text(g->error), &failed);
	jset(o, "count", json_integer(g->count), &failed);
	jset(o, "oldest", json_integer(g->oldest), &failed);
	jset(o, "newest", json_integer(g->newest), &failed);
	jset(o, "dests", dests, &failed);
	if (failed || json_array_append_new(x->arr, o)) {
		x->failed = 1;
		return 1;
	}
	return 0;
}

/* The answer of a listing's page: {"status", "statuses" (every status name
 * of `table`, in semq_statuses' order: what status= takes besides "all"),
 * "limit", "offset", "total", "count", NAME: arr (borrowed)}. */
static int reply_page(const struct admin_req *rq, struct outbox *ob,
		      const char *table, int status, int64_t limit,
		      int64_t offset, int64_t total, const char *name,
		      json_t *arr)
{
	const int *v;
	size_t n = semq_statuses(table, &v), i;
	json_t *names = json_array(), *doc = NULL;
	int failed = !names;

	for (i = 0; i < n && names; i++)
		if (json_array_append_new(
			    names, json_string(semq_status_name(table, v[i]))))
			failed = 1;
	if (!failed)
		doc = json_pack(
			"{s:s, s:o, s:I, s:I, s:I, s:I, s:O}", "status",
			status == -100 ? "all"
				       : semq_status_name(table, status),
			"statuses", names, "limit", (json_int_t)limit, "offset",
			(json_int_t)offset, "total", (json_int_t)total, "count",
			(json_int_t)json_array_size(arr), name, arr);
	else
		json_decref(names);
	return doc ? reply_json(ob, rq->req_id, HS_OK, doc) : SEMQ_ERR_NOMEM;
}

/* The page of a listing: status= (a status name of `table`, semq_statuses;
 * "all" or none: -100), limit= (1..REDO_LIMIT_MAX, else REDO_LIMIT_DEFAULT)
 * and offset= (0..INT32_MAX). SEMQ_OK, with *answered = 1 when a 400 was
 * queued. */
static int parse_page(const struct admin_req *rq, struct evkeyvalq *q,
		      const char *table, struct outbox *ob, int *answered,
		      int *status, int64_t *limit, int64_t *offset)
{
	const char *sv = evhttp_find_header(q, "status");
	const char *lv = evhttp_find_header(q, "limit");
	const char *ov = evhttp_find_header(q, "offset");
	const int *statuses;
	size_t n = semq_statuses(table, &statuses), i;
	char names[128];

	*status = -100;
	*limit = REDO_LIMIT_DEFAULT;
	*offset = 0;
	*answered = 1;
	if (sv && strcmp(sv, "all")) {
		for (i = 0; i < n; i++)
			if (!strcmp(sv, semq_status_name(table, statuses[i])))
				break;
		if (i == n)
			return reply_error(
				ob, rq->req_id, HS_BAD_REQUEST,
				"query: status '%s' is not one of %s, all", sv,
				semq_status_list(table, 0, names,
						 sizeof names));
		*status = statuses[i];
	}
	if (lv &&
	    (!parse_positive(lv, strlen(lv), limit) || *limit > REDO_LIMIT_MAX))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "query: limit '%s' is not a number 1..%d",
				   lv, REDO_LIMIT_MAX);
	if (ov && strcmp(ov, "0") &&
	    (!parse_positive(ov, strlen(ov), offset) || *offset > INT32_MAX))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "query: offset '%s' is not a number 0..%d",
				   ov, INT32_MAX);
	*answered = 0;
	return SEMQ_OK;
}

static int redo_list(struct store *st, const struct admin_req *rq, int64_t now,
		     struct outbox *ob)
{
	static const char *const allowed[] = {
		"status", "limit", "offset", "key",      "dest",
		"since",  "where", "order",  "group_by", NULL};
	struct list_ctx x = {st, now, NULL, 0};
	struct store_filter f = {0};
	struct semq_where w;
	struct evkeyvalq q;
	const char *gv, *orv;
	int status = -100, answered = 0, r;
	int64_t limit = REDO_LIMIT_DEFAULT, offset = 0, total = 0;
	json_t *doc = NULL;

	r = parse_query(rq, allowed, &q, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	r = parse_page(rq, &q, "tb_0033", ob, &answered, &status, &limit,
		       &offset);
	if (r != SEMQ_OK || answered)
		goto out;
	orv = evhttp_find_header(&q, "order");
	if (orv && strcmp(orv, "id") && strcmp(orv, "dead_first")) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"query: order '%s' is not id or dead_first",
				orv);
		goto out;
	}
	gv = evhttp_find_header(&q, "group_by");
	if (gv && strcmp(gv, "error")) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"query: group_by '%s' is not error", gv);
		goto out;
	}
	r = parse_filter(rq, &q, now, &f, &w, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	f.status = status;
	f.limit = (unsigned)limit;
	f.offset = (unsigned)offset;
	f.dead_first = orv && !strcmp(orv, "dead_first");
	x.arr = json_array();
	if (!x.arr) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	if (gv) {
		r = store_redo_groups(st, &f, group_cb, &x);
		if (r != SEMQ_OK) {
			r = reply_error(ob, rq->req_id, HS_INTERNAL,
					"reading tb_0033: %s",
					store_errmsg(st));
			goto out;
		}
		doc = x.failed ? NULL
			       : json_pack("{s:s, s:I, s:O}", "group_by",
					   "error", "count",
					   (json_int_t)json_array_size(x.arr),
					   "groups", x.arr);
		r = doc ? reply_json(ob, rq->req_id, HS_OK, doc)
			: SEMQ_ERR_NOMEM;
		goto out;
	}
	r = store_redo_count(st, &f, &total);
	if (r == SEMQ_OK)
		r = store_redo_select(st, &f, list_cb, &x);
	if (r != SEMQ_OK) {
		r = reply_error(ob, rq->req_id, HS_INTERNAL,
				"reading tb_0033: %s", store_errmsg(st));
		goto out;
	}
	r = x.failed ? SEMQ_ERR_NOMEM
		     : reply_page(rq, ob, "tb_0033", status, limit, offset,
				  total, "entries", x.arr);
out:
	json_decref(x.arr);
	evhttp_clear_headers(&q);
	return r;
}

/* Reads entry id into m/row; on SEMQ_ERR_NOT_FOUND queues 404, on another
 * error 500 (read_only) or returns it; *answered says whether it did. */
static int redo_read(struct store *st, const struct admin_req *rq, int64_t id,
		     struct msg *m, struct redo_row *row, int read_only,
		     struct outbox *ob, int *answered)
{
	int r;

	*answered = 0;
	memset(m, 0, sizeof *m);
	r = store_redo_get(st, id, m, row);
	if (r == SEMQ_OK)
		return SEMQ_OK;
	*answered = 1;
	if (r == SEMQ_ERR_NOT_FOUND)
		return reply_error(ob, rq->req_id, HS_NOT_FOUND,
				   "no redo entry %" PRId64, id);
	if (!read_only) {
		log_msg(LOG_ERROR, "admin", NULL, NULL,
			"reading redo entry %" PRId64 ": %s", id,
			store_errmsg(st));
		return r;
	}
	return reply_error(ob, rq->req_id, HS_INTERNAL,
			   "reading redo entry %" PRId64 ": %s", id,
			   store_errmsg(st));
}

/* Why GET /redo/ID has no "payload" on a node without [node] admin_token. */
#define PAYLOAD_WITHHELD                                                       \
	"[node] admin_token is not set: the payload is shown only to a "       \
	"request with the admin token (semqctl redo show reads it from the "   \
	"database)"

static int redo_show(struct store *st, const struct config *c,
		     const struct admin_req *rq, int64_t id, int64_t now,
		     struct outbox *ob)
{
	struct redo_row row;
	struct msg m;
	json_t *o = NULL;
	char *b64 = NULL;
	int answered, failed = 0, r;

	r = redo_read(st, rq, id, &m, &row, 1, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	o = redo_json_at(st, &m, &row, now);
	failed = !o;
	if (!c->admin_token) {
		jset(o, "payload_withheld", json_string(PAYLOAD_WITHHELD),
		     &failed);
	} else {
		b64 = base64_encode(m.payload, m.payload_len);
		jset(o, "payload", b64 ? json_string(b64) : NULL, &failed);
		if (semq_utf8_valid(m.payload, m.payload_len))
			jset(o, "payload_text",
			     m.payload_len
				     ? json_stringn((const char *)m.payload,
						    m.payload_len)
				     : json_string(""),
			     &failed);
	}
	if (failed) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	r = reply_json(ob, rq->req_id, HS_OK, o);
	o = NULL;
out:
	json_decref(o);
	free(b64);
	msg_clear(&m);
	return r;
}

/* ---- POST /redo/ID/retry, /redo/ID/discard, /redo/retry-all-dead -------------- */

/* The entry after an action: {"id", "message", ACTION: true, "status",
 * "status_name", "next_attempt_at", "discard_reason"}. */
static int action_done(struct store *st, const struct admin_req *rq, int64_t id,
		       const char *action, struct outbox *ob)
{
	struct redo_row row;
	struct msg m;
	char idb[MSGID_STRLEN];
	int answered, failed = 0, r;
	json_t *o;

	r = redo_read(st, rq, id, &m, &row, 0, ob, &answered);
	if (r != SEMQ_OK || answered)
		return r;
	o = json_object();
	failed = !o;
	jset(o, "id", json_integer(id), &failed);
	jset(o, "message", json_string(msgid_str(&m.id, idb, sizeof idb)),
	     &failed);
	jset(o, action, json_true(), &failed);
	jset(o, "status", json_integer(row.status), &failed);
	jset(o, "status_name",
	     json_string(semq_status_name("tb_0033", row.status)), &failed);
	jset(o, "next_attempt_at", json_integer(row.next_attempt_at), &failed);
	jset(o, "discard_reason", json_text(row.discard_reason), &failed);
	msg_clear(&m);
	if (failed) {
		json_decref(o);
		return SEMQ_ERR_NOMEM;
	}
	return reply_json(ob, rq->req_id, HS_OK, o);
}

/* 409: the verb refused (store_verb_*: v->why in its one wording). */
static int refuse_verb(const struct admin_req *rq, const struct store_verb *v,
		       struct outbox *ob)
{
	char idb[MSGID_STRLEN];

	return reply_json(ob, rq->req_id, HS_CONFLICT,
			  json_pack("{s:s, s:I, s:s, s:i, s:s}", "error",
				    v->why, "id", (json_int_t)v->id, "message",
				    msgid_str(&v->msg, idb, sizeof idb),
				    "status", v->status, "status_name",
				    semq_status_name("tb_0033", v->status)));
}

/* A verb's answer: 404, 409, the entry after it, or its error (logged; the
 * batch rolls back). */
static int verb_answer(struct store *st, const struct admin_req *rq, int64_t id,
		       const char *action, int r, const struct store_verb *v,
		       struct outbox *ob)
{
	char idb[MSGID_STRLEN];

	if (r == SEMQ_ERR_NOT_FOUND)
		return reply_error(ob, rq->req_id, HS_NOT_FOUND, "%s", v->why);
	if (r == SEMQ_DECLINED)
		return refuse_verb(rq, v, ob);
	if (r == SEMQ_OK)
		return action_done(st, rq, id, action, ob);
	log_msg(LOG_ERROR, "admin", NULL, v->msg.origin[0] ? &v->msg : NULL,
		"%s redo entry %" PRId64 " (%s): %s",
		!strcmp(action, "retried") ? "retrying" : "discarding", id,
		msgid_str(&v->msg, idb, sizeof idb), store_errmsg(st));
	return r;
}

static int redo_retry(struct store *st, const struct admin_req *rq, int64_t id,
		      int64_t now, struct outbox *ob, int *changed)
{
	struct store_verb v;
	int r;

	r = store_verb_retry(st, id, now, &v);
	if (r == SEMQ_OK) {
		*changed = 1;
		log_msg(LOG_INFO, "admin", NULL, &v.msg,
			"redo entry %" PRId64 " retried by an operator (admin "
			"HTTP from %s)",
			id, rq->client);
	}
	r = verb_answer(st, rq, id, "retried", r, &v, ob);
	store_verb_clear(&v);
	return r;
}

/* The discard body: {"reason": "..."}, nothing else. The reason goes to
 * *reason (owned by *doc, which the caller frees) or 400 is queued. */
static int discard_body(const struct admin_req *rq, json_t **doc,
			const char **reason, struct outbox *ob, int *answered)
{
	const char *need = "body: {\"reason\": \"...\"} is required";
	json_error_t e;
	const char *key;
	json_t *v;

	*answered = 1;
	*doc = NULL;
	if (!rq->body || !rq->body_len)
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST, "%s", need);
	*doc = json_loadb(rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &e);
	if (!*doc)
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "body: not JSON (line %d, column %d: %s)",
				   e.line, e.column, e.text);
	if (!json_is_object(*doc))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "body: not a JSON object; %s", need);
	json_object_foreach(*doc, key, v)
	{
		if (strcmp(key, "reason"))
			return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
					   "body: unknown key '%s'; %s", key,
					   need);
	}
	v = json_object_get(*doc, "reason");
	if (!v)
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "body: \"reason\" is missing; %s", need);
	if (!json_is_string(v))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "body: \"reason\" is not a string");
	if (json_string_length(v) == 0 ||
	    json_string_length(v) > STORE_REASON_MAX)
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "body: \"reason\" must be 1..%d bytes",
				   STORE_REASON_MAX);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "body: \"reason\" contains a NUL character");
	*reason = json_string_value(v);
	*answered = 0;
	return SEMQ_OK;
}

static int redo_discard(struct store *st, const struct admin_req *rq,
			int64_t id, int64_t now, struct outbox *ob,
			int *changed)
{
	const char *reason = NULL;
	struct store_verb v;
	json_t *doc = NULL;
	int answered, r;

	memset(&v, 0, sizeof v);
	r = discard_body(rq, &doc, &reason, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	r = store_verb_discard(st, id, reason, now, &v);
	if (r == SEMQ_OK) {
		*changed = 1;
		log_msg(LOG_WARN, "admin", NULL, &v.msg,
			"redo entry %" PRId64 " discarded by an operator "
			"(admin HTTP from %s): %s",
			id, rq->client, reason);
	}
	r = verb_answer(st, rq, id, "discarded", r, &v, ob);
out:
	store_verb_clear(&v);
	json_decref(doc);
	return r;
}

static int retry_all_dead(struct store *st, const struct admin_req *rq,
			  int64_t now, struct outbox *ob, int *changed)
{
	struct store_verb v;
	size_t n;
	int r;

	r = store_verb_retry_all(st, now, &v);
	if (r != SEMQ_OK) {
		log_msg(LOG_ERROR, "admin", NULL, NULL,
			"retrying every dead redo entry: %s", store_errmsg(st));
		return r;
	}
	n = v.n_released;
	store_verb_clear(&v);
	if (n) {
		*changed = 1;
		log_msg(LOG_INFO, "admin", NULL, NULL,
			"%zu dead redo entries retried by an operator (admin "
			"HTTP from %s, retry-all-dead)",
			n, rq->client);
	}
	return reply_json(ob, rq->req_id, HS_OK,
			  json_pack("{s:I}", "retried", (json_int_t)n));
}

/* ---- GET /outbound ------------------------------------------------------------ */

static int out_list_cb(void *ctx, const struct msg *m,
		       const struct out_row *row)
{
	struct list_ctx *x = ctx;
	json_t *o = out_json(m, row);

	if (!o || json_array_append_new(x->arr, o)) {
		x->failed = 1;
		return 1;
	}
	return 0;
}

/* tb_0031 rows, newest first: status= (a name, or all), key=, dest=,
 * since=, limit=, offset=; {"status", "limit", "offset", "total",
 * "count", "rows": [...]}. */
static int outbound_list(struct store *st, const struct admin_req *rq,
			 int64_t now, struct outbox *ob)
{
	static const char *const allowed[] = {
		"status", "limit", "offset", "key", "dest", "since", NULL};
	struct list_ctx x = {st, now, NULL, 0};
	struct store_filter f = {0};
	struct semq_where w;
	struct evkeyvalq q;
	int status = -100, answered = 0, r;
	int64_t limit = REDO_LIMIT_DEFAULT, offset = 0, total = 0;

	r = parse_query(rq, allowed, &q, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	r = parse_page(rq, &q, "tb_0031", ob, &answered, &status, &limit,
		       &offset);
	if (r != SEMQ_OK || answered)
		goto out;
	r = parse_filter(rq, &q, now, &f, &w, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	f.status = status;
	f.limit = (unsigned)limit;
	f.offset = (unsigned)offset;
	x.arr = json_array();
	if (!x.arr) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	r = store_outbound_count(st, &f, &total);
	if (r == SEMQ_OK)
		r = store_outbound_select(st, &f, out_list_cb, &x);
	if (r != SEMQ_OK) {
		r = reply_error(ob, rq->req_id, HS_INTERNAL,
				"reading tb_0031: %s", store_errmsg(st));
		goto out;
	}
	r = x.failed ? SEMQ_ERR_NOMEM
		     : reply_page(rq, ob, "tb_0031", status, limit, offset,
				  total, "rows", x.arr);
out:
	json_decref(x.arr);
	evhttp_clear_headers(&q);
	return r;
}

/* ---- POST /redo/retry, /redo/discard: the bulk verbs ------------------------ */

static int bulk_each(void *ctx, const struct msg *m, const struct redo_row *row)
{
	json_t *arr = ctx, *o = json_object();
	char idb[MSGID_STRLEN];
	int failed = !o;

	jset(o, "id", json_integer(row->id), &failed);
	jset(o, "message", json_string(msgid_str(&m->id, idb, sizeof idb)),
	     &failed);
	jset(o, "key", m->has_key ? json_text(m->key) : json_null(), &failed);
	jset(o, "status_name",
	     json_string(semq_status_name("tb_0033", row->status)), &failed);
	jset(o, "last_error", json_text(row->last_error), &failed);
	return failed || json_array_append_new(arr, o);
}

/* Body: {"where", "dest", "key", "since", "status", "reason" (discard),
 * "dry_run"}; "where" required. */
static int redo_bulk(struct store *st, const struct admin_req *rq,
		     enum store_redo_verb verb, int64_t now, struct outbox *ob,
		     int *changed)
{
	static const char *const keys[] = {"where",   "dest",   "key",
					   "since",   "status", "reason",
					   "dry_run", NULL};
	const char *name = verb == STORE_REDO_RETRY ? "retry" : "discard";
	struct store_filter f = {0};
	struct semq_where w;
	json_error_t e;
	json_t *doc = NULL, *v, *arr = NULL;
	const char *key, *reason = NULL, *sv;
	unsigned n = 0;
	int dry = 0, r, k;

	f.status = -100;
	if (!rq->body || !rq->body_len) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"body: {\"where\": \"error~TEXT\", ...} is "
				"required");
		goto out;
	}
	doc = json_loadb(rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &e);
	if (!doc || !json_is_object(doc)) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"body: not a JSON object");
		goto out;
	}
	json_object_foreach(doc, key, v)
	{
		for (k = 0; keys[k] && strcmp(keys[k], key); k++)
			;
		if (!keys[k] ||
		    (!strcmp(key, "dry_run") && !json_is_boolean(v)) ||
		    (strcmp(key, "dry_run") && !json_is_string(v)) ||
		    (!strcmp(key, "reason") && verb == STORE_REDO_RETRY)) {
			r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
					"body: '%s' is not a parameter of "
					"POST /redo/%s (where, dest, key, "
					"since, status%s, dry_run)",
					key, name,
					verb == STORE_REDO_DISCARD ? ", reason"
								   : "");
			goto out;
		}
	}
#define STR(k) json_string_value(json_object_get(doc, k))
	if (!STR("where") || semq_where_parse(STR("where"), &w)) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"body: where '%s' is not %s",
				STR("where") ? STR("where") : "(missing)",
				SEMQ_WHERE_FORMS);
		goto out;
	}
	f.where = &w;
	f.dest = STR("dest");
	f.key = STR("key");
	if (f.dest && !semq_id_valid(f.dest)) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"body: dest '%s' is not a node id", f.dest);
		goto out;
	}
	if (f.key && (!*f.key || strlen(f.key) > SEMQ_KEY_MAX)) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"body: key is not 1..%d bytes", SEMQ_KEY_MAX);
		goto out;
	}
	sv = STR("since");
	if (sv && semq_when_parse(sv, now, 1, &f.since)) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"body: since '%s' is not unix ms or %s", sv,
				SEMQ_WHEN_FORMS);
		goto out;
	}
	sv = STR("status");
	if (sv) {
		for (k = 0; k < N_REDO; k++)
			if (!strcmp(sv, semq_status_name("tb_0033",
							 redo_statuses[k])))
				break;
		if (k == N_REDO ||
		    !store_redo_verb_applies(verb, redo_statuses[k])) {
			r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
					"body: status '%s': %s", sv,
					store_redo_verb_rule(verb));
			goto out;
		}
		f.status = redo_statuses[k];
	}
	reason = STR("reason");
	if (verb == STORE_REDO_DISCARD &&
	    (!reason || !*reason || strlen(reason) > STORE_REASON_MAX)) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"body: reason must be 1..%d bytes",
				STORE_REASON_MAX);
		goto out;
	}
#undef STR
	dry = json_is_true(json_object_get(doc, "dry_run"));
	arr = json_array();
	if (!arr) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	r = store_redo_bulk(st, verb, &f, reason, now, dry, 500, bulk_each,
			    NULL, arr, &n);
	if (r != SEMQ_OK) {
		log_msg(LOG_ERROR, "admin", NULL, NULL,
			"bulk redo %s over the admin HTTP: %s", name,
			store_errmsg(st));
		goto out;
	}
	if (!dry && n) {
		*changed = 1;
		log_msg(verb == STORE_REDO_RETRY ? LOG_INFO : LOG_WARN, "admin",
			NULL, NULL,
			"an operator (admin HTTP from %s, POST /redo/%s) %s "
			"%u redo entr%s where %s%s%s%s%s%s%s%s",
			rq->client, name,
			verb == STORE_REDO_RETRY ? "retried" : "discarded", n,
			n == 1 ? "y" : "ies", w.exact ? "error=" : "error~",
			w.text, f.dest ? ", dest " : "", f.dest ? f.dest : "",
			f.key ? ", key " : "", f.key ? f.key : "",
			reason ? ": " : "", reason ? reason : "");
	}
	r = reply_json(ob, rq->req_id, HS_OK,
		       json_pack("{s:s, s:b, s:I, s:O}", "verb", name,
				 "dry_run", dry, "count", (json_int_t)n,
				 "entries", arr));
out:
	json_decref(arr);
	json_decref(doc);
	return r;
}

/* ---- streams: GET /streams and the tables' metrics ---------------------------- */

/* One stream as the tables know it. Outbound: tb_0031 rows per status.
 * Inbound: tb_0030 rows per ack status, tb_0033 entries per status and the
 * watermark. */
struct stream {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
	int out;
	int64_t n[N_OUT];     /* by out_statuses, or in_statuses (inbound) */
	int64_t redo[N_REDO]; /* inbound: by redo_statuses */
	int64_t other;        /* rows in a status this build does not know */
	int64_t depth;        /* unconfirmed: 0/4/6 out, unacked in */
	int64_t oldest;       /* created_at / received_at of the oldest
				 unconfirmed row; 0 when none */
	int has_wm;
	uint64_t wm;     /* confirmed_through of its current life */
	uint64_t life;   /* that life */
	int lives;       /* lives of the origin seen on this stream */
	int64_t resyncs; /* outbound: times it was found behind a peer */
};

/* Custody: what a relay holds per (origin, dest) (relay: 1), or what of
 * this node's own a relay holds per (dest, relay) (relay: 0). */
struct held {
	char a[SEMQ_ID_MAX + 1]; /* origin, or dest */
	char b[SEMQ_ID_MAX + 1]; /* dest, or the relay */
	int relay;
	int64_t messages, bytes;
	int64_t at; /* the oldest copy's created_at, or the first hand-over */
};

struct streams {
	struct stream *v;
	size_t n, cap;
	struct held *h;
	size_t n_h, cap_h;
	int failed;
	const char *node; /* this node: the origin of its outbound streams */
};

static struct held *held_add(struct streams *s)
{
	if (s->n_h == s->cap_h) {
		size_t cap = s->cap_h ? s->cap_h * 2 : 16;
		void *v = realloc(s->h, cap * sizeof *s->h);
		if (!v) {
			s->failed = 1;
			return NULL;
		}
		s->h = v;
		s->cap_h = cap;
	}
	memset(&s->h[s->n_h], 0, sizeof s->h[0]);
	return &s->h[s->n_h++];
}

static int custody_cb(void *ctx, const char *origin, const char *dest,
		      int64_t messages, int64_t bytes, int64_t oldest)
{
	struct held *h = held_add(ctx);

	if (!h)
		return 1;
	snprintf(h->a, sizeof h->a, "%s", origin);
	snprintf(h->b, sizeof h->b, "%s", dest);
	h->relay = 1;
	h->messages = messages;
	h->bytes = bytes;
	h->at = oldest;
	return 0;
}

static int waiting_cb(void *ctx, const char *dest, const char *relay, int64_t n,
		      int64_t since)
{
	struct held *h = held_add(ctx);

	if (!h)
		return 1;
	snprintf(h->a, sizeof h->a, "%s", dest);
	snprintf(h->b, sizeof h->b, "%s", relay);
	h->messages = n;
	h->at = since;
	return 0;
}

static struct stream *stream_get(struct streams *s, int out, const char *origin,
				 const char *dest)
{
	struct stream *x;
	size_t i;

	for (i = 0; i < s->n; i++)
		if (s->v[i].out == out && !strcmp(s->v[i].origin, origin) &&
		    !strcmp(s->v[i].dest, dest))
			return &s->v[i];
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		void *v = realloc(s->v, cap * sizeof *s->v);
		if (!v) {
			s->failed = 1;
			return NULL;
		}
		s->v = v;
		s->cap = cap;
	}
	x = &s->v[s->n++];
	memset(x, 0, sizeof *x);
	snprintf(x->origin, sizeof x->origin, "%s", origin);
	snprintf(x->dest, sizeof x->dest, "%s", dest);
	x->out = out;
	return x;
}

static void oldest_of(struct stream *x, int64_t at)
{
	if (at > 0 && (!x->oldest || at < x->oldest))
		x->oldest = at;
}

static int stat_cb(void *ctx, const struct stat_row *r)
{
	struct streams *s = ctx;
	int out = !strcmp(r->table, "tb_0031");
	struct stream *x = stream_get(s, out, r->origin, r->dest);
	int k;

	if (!x)
		return 1;
	if (out) {
		k = status_index(out_statuses, N_OUT, r->status);
		if (r->status == SS_UNSEND || r->status == SS_SEND ||
		    r->status == SS_ACK) {
			x->depth += r->count;
			oldest_of(x, r->oldest);
		}
	} else if (!strcmp(r->table, "tb_0030")) {
		k = status_index(in_statuses, N_IN, r->status);
		if (r->status == AS_INIT) {
			x->depth += r->count;
			oldest_of(x, r->oldest);
		}
	} else {
		k = status_index(redo_statuses, N_REDO, r->status);
		if (k >= 0)
			x->redo[k] += r->count;
		else
			x->other += r->count;
		return 0;
	}
	if (k >= 0)
		x->n[k] += r->count;
	else
		x->other += r->count;
	return 0;
}

/* Per (origin, dest) the watermark of its current life (the last one the
 * store lists) and how many lives it has seen here. */
static int wm_cb(void *ctx, const char *origin, const char *dest, uint64_t life,
		 uint64_t confirmed_through)
{
	struct streams *s = ctx;
	struct stream *x = stream_get(s, 0, origin, dest);

	if (!x)
		return 1;
	x->has_wm = 1;
	x->wm = confirmed_through;
	x->life = life;
	x->lives++;
	return 0;
}

/* An outbound stream's counter and resyncs (semq_stream_out). */
static int out_cb(void *ctx, const struct out_stream *os)
{
	struct streams *s = ctx;
	struct stream *x = stream_get(s, 1, s->node, os->dest);

	if (!x)
		return 1;
	x->resyncs = os->resyncs;
	return 0;
}

/* Reads every stream, O(streams) rows (no count of the queues: see the
 * DESIGN above); on a failed read 500 is queued (*answered). */
static int streams_read(struct store *st, const struct admin_req *rq,
			struct streams *s, struct outbox *ob, int *answered)
{
	int r;

	*answered = 0;
	r = store_counts(st, stat_cb, s);
	if (r == SEMQ_OK && !s->failed)
		r = store_streams_in(st, wm_cb, s);
	if (r == SEMQ_OK && !s->failed)
		r = store_streams_out(st, out_cb, s);
	if (r == SEMQ_OK && !s->failed)
		r = store_counts_custody(st, custody_cb, s);
	if (r == SEMQ_OK && !s->failed)
		r = store_counts_waiting(st, waiting_cb, s);
	if (s->failed)
		return SEMQ_ERR_NOMEM;
	if (r != SEMQ_OK) {
		*answered = 1;
		return reply_error(ob, rq->req_id, HS_INTERNAL,
				   "reading the tables: %s", store_errmsg(st));
	}
	return SEMQ_OK;
}

static json_t *counts_json(const char *table, const int *statuses, size_t n,
			   const int64_t *v, int *failed)
{
	json_t *o = json_object();
	size_t i;

	if (!o)
		*failed = 1;
	for (i = 0; i < n && o; i++)
		jset(o, semq_status_name(table, statuses[i]),
		     json_integer(v[i]), failed);
	return o;
}

static json_t *stream_json(const struct stream *x, int64_t now, int *failed)
{
	json_t *o = json_object();

	if (!o) {
		*failed = 1;
		return NULL;
	}
	jset(o, "origin", json_string(x->origin), failed);
	jset(o, "dest", json_string(x->dest), failed);
	if (x->out) {
		jset(o, "counts",
		     counts_json("tb_0031", out_statuses, N_OUT, x->n, failed),
		     failed);
	} else {
		jset(o, "counts",
		     counts_json("tb_0030", in_statuses, N_IN, x->n, failed),
		     failed);
		jset(o, "redo",
		     counts_json("tb_0033", redo_statuses, N_REDO, x->redo,
				 failed),
		     failed);
		jset(o, "confirmed_through",
		     x->has_wm ? json_integer((json_int_t)x->wm) : json_null(),
		     failed);
		if (x->has_wm) {
			char lb[SEMQ_LIFE_STRLEN];

			jset(o, "life",
			     json_string(semq_life_str(x->life, lb, sizeof lb)),
			     failed);
			jset(o, "lives", json_integer(x->lives), failed);
		}
	}
	if (x->other)
		jset(o, "other_status", json_integer(x->other), failed);
	jset(o, "depth", json_integer(x->depth), failed);
	jset(o, "oldest_unconfirmed_at",
	     x->oldest ? json_integer(x->oldest) : json_null(), failed);
	jset(o, "oldest_unconfirmed_age_ms",
	     x->oldest ? json_integer(now > x->oldest ? now - x->oldest : 0)
		       : json_null(),
	     failed);
	return o;
}

/* {"held": [...] (a relay's custody), "waiting": [...] (own messages a
 * relay holds), "quota": {...}}. */
static json_t *custody_json(const struct streams *s, const struct config *c,
			    int64_t now, int *failed)
{
	json_t *o = json_object(), *held = json_array(), *wait = json_array();
	json_t *q = json_object();
	int64_t m = 0, b = 0;
	size_t i;

	if (!o || !held || !wait || !q)
		*failed = 1;
	for (i = 0; i < s->n_h && !*failed; i++) {
		const struct held *h = &s->h[i];
		json_t *e = json_object();

		if (!e) {
			*failed = 1;
			break;
		}
		jset(e, h->relay ? "origin" : "dest", json_string(h->a),
		     failed);
		jset(e, h->relay ? "dest" : "relay", json_string(h->b), failed);
		jset(e, "messages", json_integer(h->messages), failed);
		if (h->relay) {
			jset(e, "bytes", json_integer(h->bytes), failed);
			m += h->messages;
			b += h->bytes;
		}
		jset(e, h->relay ? "oldest_created_at" : "since",
		     h->at ? json_integer(h->at) : json_null(), failed);
		jset(e, h->relay ? "oldest_age_ms" : "age_ms",
		     h->at ? json_integer(now > h->at ? now - h->at : 0)
			   : json_null(),
		     failed);
		if (json_array_append_new(h->relay ? held : wait, e))
			*failed = 1;
	}
	jset(q, "messages", json_integer(m), failed);
	jset(q, "bytes", json_integer(b), failed);
	jset(q, "quota_messages", json_integer(c->quota_messages), failed);
	jset(q, "quota_bytes", json_integer((json_int_t)c->quota_bytes),
	     failed);
	jset(q, "quota_messages_per_origin",
	     json_integer(c->quota_messages_per_origin), failed);
	jset(q, "quota_bytes_per_origin",
	     json_integer((json_int_t)c->quota_bytes_per_origin), failed);
	jset(o, "held", held, failed);
	jset(o, "waiting", wait, failed);
	jset(o, "quota", q, failed);
	return o;
}

static int streams_get(struct store *st, const struct config *c,
		       const struct admin_req *rq, int64_t now,
		       struct outbox *ob)
{
	static const char *const allowed[] = {"dest", "origin", "key", "since",
					      NULL};
	struct streams s = {.node = c->id};
	json_t *doc = NULL, *outv = NULL, *inv = NULL;
	const char *dv = NULL, *ov = NULL, *no;
	struct evkeyvalq q;
	int answered, failed = 0, r;
	size_t i;

	/* dest=, origin= pick streams; key= and since= are filters of the
	 * listings of rows, not of the counts per stream. */
	r = parse_query(rq, allowed, &q, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	no = evhttp_find_header(&q, "key") ? "key" : "since";
	if (evhttp_find_header(&q, no)) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"query: %s= does not filter /streams (counts "
				"per stream); GET /outbound?%s=... or "
				"/redo?%s=... list the rows",
				no, no, no);
		goto out;
	}
	dv = evhttp_find_header(&q, "dest");
	ov = evhttp_find_header(&q, "origin");
	if ((dv && !semq_id_valid(dv)) || (ov && !semq_id_valid(ov))) {
		r = reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				"query: %s '%s' is not a node id",
				dv && !semq_id_valid(dv) ? "dest" : "origin",
				dv && !semq_id_valid(dv) ? dv : ov);
		goto out;
	}
	r = streams_read(st, rq, &s, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	outv = json_array();
	inv = json_array();
	failed = !outv || !inv;
	for (i = 0; i < s.n && !failed; i++) {
		json_t *o;

		if ((dv && strcmp(dv, s.v[i].dest)) ||
		    (ov && strcmp(ov, s.v[i].origin)))
			continue;
		o = stream_json(&s.v[i], now, &failed);
		if (o && json_array_append_new(s.v[i].out ? outv : inv, o))
			failed = 1;
	}
	doc = json_object();
	jset(doc, "node", json_string(c->id), &failed);
	jset(doc, "now", json_integer(now), &failed);
	jset(doc, "outbound", outv, &failed);
	outv = NULL;
	jset(doc, "inbound", inv, &failed);
	inv = NULL;
	jset(doc, "custody", custody_json(&s, c, now, &failed), &failed);
	if (failed) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	r = reply_json(ob, rq->req_id, HS_OK, doc);
	doc = NULL;
out:
	evhttp_clear_headers(&q);
	json_decref(doc);
	json_decref(outv);
	json_decref(inv);
	free(s.v);
	free(s.h);
	return r;
}

/* Label values are node ids ([A-Za-z0-9._-]) today; escaped anyway as the
 * text format wants: backslash, double quote and newline. */
static void label(struct evbuffer *b, const char *name, const char *v)
{
	evbuffer_add_printf(b, "%s=\"", name);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			evbuffer_add_printf(b, "\\%c", *v);
		else if (*v == '\n')
			evbuffer_add(b, "\\n", 2);
		else
			evbuffer_add(b, v, 1);
	}
	evbuffer_add(b, "\"", 1);
}

static void depth_line(struct evbuffer *b, const char *table,
		       const struct stream *x, int status, int64_t n)
{
	evbuffer_add_printf(b, "semq_queue_depth{table=\"%s\",", table);
	label(b, "origin", x->origin);
	evbuffer_add(b, ",", 1);
	label(b, "dest", x->dest);
	evbuffer_add_printf(b, ",status=\"%s\"} %" PRId64 "\n",
			    semq_status_name(table, status), n);
}

static void seconds(struct evbuffer *b, int64_t ms)
{
	evbuffer_add_printf(b, "%" PRId64 ".%03d\n", ms / 1000,
			    (int)(ms % 1000));
}

/* A relay's custody per (origin, dest), its quotas; an origin's rows held
 * by relays per (dest, relay). */
static void custody_text(struct evbuffer *b, const struct streams *s,
			 const struct config *c, int64_t now)
{
	static const char *const what[3] = {"messages", "bytes",
					    "oldest_age_seconds"};
	static const char *const help[3] = {
		"Messages this relay holds in custody, per origin and "
		"destination.",
		"Payload bytes this relay holds in custody, per origin and "
		"destination.",
		"Age of the oldest document this relay holds, per origin and "
		"destination."};
	size_t i, k;

	for (k = 0; k < 3; k++) {
		evbuffer_add_printf(b,
				    "# HELP semq_custody_%s %s\n"
				    "# TYPE semq_custody_%s gauge\n",
				    what[k], help[k], what[k]);
		for (i = 0; i < s->n_h; i++) {
			const struct held *h = &s->h[i];
			if (!h->relay)
				continue;
			evbuffer_add_printf(b, "semq_custody_%s{", what[k]);
			label(b, "origin", h->a);
			evbuffer_add(b, ",", 1);
			label(b, "dest", h->b);
			evbuffer_add(b, "} ", 2);
			if (k == 0)
				evbuffer_add_printf(b, "%" PRId64 "\n",
						    h->messages);
			else if (k == 1)
				evbuffer_add_printf(b, "%" PRId64 "\n",
						    h->bytes);
			else
				seconds(b,
					h->at && now > h->at ? now - h->at : 0);
		}
	}
	evbuffer_add_printf(
		b,
		"# HELP semq_custody_quota The relay's custody quotas "
		"([relay]).\n"
		"# TYPE semq_custody_quota gauge\n"
		"semq_custody_quota{limit=\"messages\",scope=\"all\"} %u\n"
		"semq_custody_quota{limit=\"bytes\",scope=\"all\"} %zu\n"
		"semq_custody_quota{limit=\"messages\",scope=\"origin\"} %u\n"
		"semq_custody_quota{limit=\"bytes\",scope=\"origin\"} %zu\n",
		c->quota_messages, c->quota_bytes, c->quota_messages_per_origin,
		c->quota_bytes_per_origin);
	evbuffer_add_printf(
		b, "# HELP semq_outbound_in_custody This node's messages a "
		   "relay holds for their destination, per destination and "
		   "relay (status 6, outside the window).\n"
		   "# TYPE semq_outbound_in_custody gauge\n");
	for (i = 0; i < s->n_h; i++) {
		const struct held *h = &s->h[i];
		if (h->relay)
			continue;
		evbuffer_add_printf(b, "semq_outbound_in_custody{");
		label(b, "dest", h->a);
		evbuffer_add(b, ",", 1);
		label(b, "relay", h->b);
		evbuffer_add_printf(b, "} %" PRId64 "\n", h->messages);
	}
}

static void metrics_text(struct evbuffer *b, const struct streams *s,
			 const struct config *c, int64_t now)
{
	int64_t redo[N_REDO] = {0};
	size_t i, k;

	evbuffer_add_printf(
		b, "# HELP semq_queue_depth Rows of a table per stream and "
		   "status: tb_0031 (outbound) by status, tb_0030 (received) "
		   "by ack status, tb_0033 (redo) by status.\n"
		   "# TYPE semq_queue_depth gauge\n");
	for (i = 0; i < s->n; i++) {
		const struct stream *x = &s->v[i];
		if (x->out) {
			for (k = 0; k < N_OUT; k++)
				depth_line(b, "tb_0031", x, out_statuses[k],
					   x->n[k]);
			continue;
		}
		for (k = 0; k < N_IN; k++)
			depth_line(b, "tb_0030", x, in_statuses[k], x->n[k]);
		for (k = 0; k < N_REDO; k++) {
			depth_line(b, "tb_0033", x, redo_statuses[k],
				   x->redo[k]);
			redo[k] += x->redo[k];
		}
	}
	evbuffer_add_printf(b, "# HELP semq_redo_entries Entries of the redo "
			       "queue tb_0033 by status, every stream.\n"
			       "# TYPE semq_redo_entries gauge\n");
	for (k = 0; k < N_REDO; k++)
		evbuffer_add_printf(
			b, "semq_redo_entries{status=\"%s\"} %" PRId64 "\n",
			semq_status_name("tb_0033", redo_statuses[k]), redo[k]);
	evbuffer_add_printf(
		b, "# HELP semq_stream_unconfirmed Messages of a stream not "
		   "confirmed yet: outbound rows in status 0, 4 or 6; inbound "
		   "rows waiting for an 810-Response.\n"
		   "# TYPE semq_stream_unconfirmed gauge\n");
	for (i = 0; i < s->n; i++) {
		evbuffer_add_printf(b,
				    "semq_stream_unconfirmed{direction=\"%s\",",
				    s->v[i].out ? "out" : "in");
		label(b, "origin", s->v[i].origin);
		evbuffer_add(b, ",", 1);
		label(b, "dest", s->v[i].dest);
		evbuffer_add_printf(b, "} %" PRId64 "\n", s->v[i].depth);
	}
	evbuffer_add_printf(
		b, "# HELP semq_oldest_unconfirmed_age_seconds Age of the "
		   "oldest unconfirmed message of a stream (0 when none).\n"
		   "# TYPE semq_oldest_unconfirmed_age_seconds gauge\n");
	for (i = 0; i < s->n; i++) {
		int64_t age = s->v[i].oldest && now > s->v[i].oldest
				      ? now - s->v[i].oldest
				      : 0;
		evbuffer_add_printf(b,
				    "semq_oldest_unconfirmed_age_seconds{"
				    "direction=\"%s\",",
				    s->v[i].out ? "out" : "in");
		label(b, "origin", s->v[i].origin);
		evbuffer_add(b, ",", 1);
		label(b, "dest", s->v[i].dest);
		evbuffer_add_printf(b, "} %" PRId64 ".%03d\n", age / 1000,
				    (int)(age % 1000));
	}
	evbuffer_add_printf(
		b, "# HELP semq_confirmed_through Watermark of an inbound "
		   "stream: every seq at or below it is confirmed.\n"
		   "# TYPE semq_confirmed_through gauge\n");
	for (i = 0; i < s->n; i++) {
		if (s->v[i].out || !s->v[i].has_wm)
			continue;
		evbuffer_add_printf(b, "semq_confirmed_through{");
		label(b, "origin", s->v[i].origin);
		evbuffer_add(b, ",", 1);
		label(b, "dest", s->v[i].dest);
		evbuffer_add_printf(b, "} %" PRIu64 "\n", s->v[i].wm);
	}
	evbuffer_add_printf(
		b, "# HELP semq_stream_resyncs_total Times this node's stream "
		   "was found behind what a peer had seen (its database went "
		   "back in time: restored from an older copy), kept in the "
		   "database.\n"
		   "# TYPE semq_stream_resyncs_total counter\n");
	for (i = 0; i < s->n; i++) {
		if (!s->v[i].out)
			continue;
		evbuffer_add_printf(b, "semq_stream_resyncs_total{");
		label(b, "origin", s->v[i].origin);
		evbuffer_add(b, ",", 1);
		label(b, "dest", s->v[i].dest);
		evbuffer_add_printf(b, "} %" PRId64 "\n", s->v[i].resyncs);
	}
	custody_text(b, s, c, now);
}

static int metrics_get(struct store *st, const struct config *c,
		       const struct admin_req *rq, int64_t now,
		       struct outbox *ob)
{
	struct streams s = {.node = c->id};
	struct evbuffer *b = NULL;
	char *body = NULL;
	size_t n;
	int answered, r;

	r = streams_read(st, rq, &s, ob, &answered);
	if (r != SEMQ_OK || answered)
		goto out;
	r = SEMQ_ERR_NOMEM;
	b = evbuffer_new();
	if (!b)
		goto out;
	metrics_text(b, &s, c, now);
	n = evbuffer_get_length(b);
	body = malloc(n + 1);
	if (!body || evbuffer_remove(b, body, n) != (int)n)
		goto out;
	body[n] = '\0';
	r = reply(ob, rq->req_id, HS_OK, body, n);
	body = NULL;
out:
	free(body);
	if (b)
		evbuffer_free(b);
	free(s.v);
	free(s.h);
	return r;
}

/* ---- dispatch ----------------------------------------------------------------- */

int report_handle(struct store *st, const struct config *c, const struct job *j,
		  int64_t now, struct outbox *ob, int *changed)
{
	const struct admin_req *rq = j->admin;
	const char *path, *rest;
	int get, post;
	int64_t id;
	size_t n;

	*changed = 0;
	if (!rq || !rq->req_id || !rq->method || !rq->path)
		return SEMQ_ERR_INTERNAL;
	path = rq->path;
	get = !strcmp(rq->method, "GET");
	post = !strcmp(rq->method, "POST");
	if (!strcmp(path, "/streams") && get)
		return streams_get(st, c, rq, now, ob);
	if (!strcmp(path, "/metrics") && get)
		return metrics_get(st, c, rq, now, ob);
	if (!strcmp(path, "/redo") && get)
		return redo_list(st, rq, now, ob);
	if (!strcmp(path, "/outbound") && get)
		return outbound_list(st, rq, now, ob);
	if (!strcmp(path, "/redo/retry") && post)
		return redo_bulk(st, rq, STORE_REDO_RETRY, now, ob, changed);
	if (!strcmp(path, "/redo/discard") && post)
		return redo_bulk(st, rq, STORE_REDO_DISCARD, now, ob, changed);
	if (!strcmp(path, "/redo/retry-all-dead") && post)
		return retry_all_dead(st, rq, now, ob, changed);
	if (strncmp(path, "/redo/", 6) != 0)
		return reply_error(ob, rq->req_id, HS_NOT_FOUND,
				   "no such resource '%s'", path);
	path += 6;
	rest = strchr(path, '/');
	n = rest ? (size_t)(rest - path) : strlen(path);
	if (!parse_positive(path, n, &id))
		return reply_error(ob, rq->req_id, HS_BAD_REQUEST,
				   "redo id '%.*s' is not a number 1..%" PRId64,
				   (int)(n > 64 ? 64 : n), path, INT64_MAX);
	if (!rest && get)
		return redo_show(st, c, rq, id, now, ob);
	if (rest && !strcmp(rest, "/retry") && post)
		return redo_retry(st, rq, id, now, ob, changed);
	if (rest && !strcmp(rest, "/discard") && post)
		return redo_discard(st, rq, id, now, ob, changed);
	return reply_error(ob, rq->req_id, HS_NOT_ALLOWED,
			   "%s %s is not served here", rq->method, rq->path);
}

int report_answer_json(struct outbox *ob, uint64_t req_id, int status,
		       json_t *doc)
{
	return reply_json(ob, req_id, status, doc);
}

int report_answer_error(struct outbox *ob, uint64_t req_id, int status,
			const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	return reply_json(ob, req_id, status,
			  json_pack("{s:s}", "error", text));
}
