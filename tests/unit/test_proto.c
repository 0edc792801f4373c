/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the store-side protocol (node/proto.h) and its redo schedule
 * on a fake clock: no threads, no sockets, no sleeps. Time is an int64 the
 * test moves forward.
 *
 * Each test gets a real store in a fresh mkdtemp directory under $TMPDIR, a
 * plugin host with the `flaky` test plugin (tests/unit/plugins/flaky.c, whose
 * outcome per message key the test sets in the table flaky_rules), and a
 * proto. batch() plays the worker: begin, every queued job, one tick,
 * commit, and then decodes the outbox with the codec, so every assertion on
 * what was sent is made on the bytes that would go to the network thread
 * after the commit. A second database connection reads the tables: it sees
 * only what committed, so "the verdict in the outbox is true" is checked
 * against durable rows.
 */
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include <semq/error.h>

#include "codec.h"
#include "config.h"
#include "job.h"
#include "log.h"
#include "plughost.h"
#include "proto.h"
#include "store.h"
#include "trace.h"
#include "types.h"

#define T0 INT64_C(1700000000000)
#define DAY_MS INT64_C(86400000)
#define FLAKY_SO TEST_PLUGIN_DIR "/flaky.so"
#define MAX_JOB_MSGS 8 /* messages per Data frame built by push_data */

/* One decoded frame of the last batch's outbox. */
struct got {
	uint64_t conn;
	Semq__Frame *f; /* owned */
};

struct fx {
	char dir[PATH_MAX];
	char path[PATH_MAX + 16];
	int64_t levels[3];
	struct cfg_route routes[2];
	struct config c;         /* borrowed by the proto */
	struct store *st;        /* owned */
	struct plughost *ph;     /* owned */
	struct proto *p;         /* owned */
	sqlite3 *db;             /* second connection, reads what committed */
	struct job *jobs, *last; /* queued for the next batch; owned */
	struct got *got;         /* frames the last batch emitted; owned */
	size_t n_got;
};

/* ---- fixture -------------------------------------------------------------- */

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *fx = calloc(1, sizeof *fx);

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof fx->dir, "%s/proto-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(fx->dir)) {
		free(fx);
		return -1;
	}
	snprintf(fx->path, sizeof fx->path, "%s/node.db", fx->dir);

	/* A receiver S1 unless a test says otherwise; every field proto.c
	 * reads is set. */
	snprintf(fx->c.id, sizeof fx->c.id, "S1");
	fx->c.relay = 0;
	fx->c.store_and_forward = 0;
	fx->c.synchronous = 0;
	fx->c.poll_interval_ms = 50;
	fx->c.query_after_ms = 30000;
	fx->c.outbound_retention_ms = DAY_MS;
	fx->c.redo_retention_ms = 2 * DAY_MS;
	fx->c.ping_interval_ms = 10000;
	fx->c.idle_timeout_ms = 60000;
	fx->c.reconnect_min_ms = 500;
	fx->c.reconnect_max_ms = 30000;
	fx->c.window = 1000;
	fx->c.drain_rate = 0;
	fx->c.batch_max = 1000;
	fx->c.max_payload = 1 << 20;
	/* [relay] as config.c's defaults */
	fx->c.quota_messages = 20000000;
	fx->c.quota_bytes = (size_t)20 << 30;
	fx->c.quota_messages_per_origin = 1000000;
	fx->c.quota_bytes_per_origin = (size_t)1 << 30;
	fx->c.unknown_dest_after_ms = 86400000;
	fx->c.relay_ack = 1; /* [relay] default */
	fx->c.custody_query_after_ms = 600000;
	fx->c.max_hops = 8; /* [node] defaults */
	fx->c.memory_budget = (size_t)256 << 20;
	fx->c.max_frame = fx->c.max_payload + 64 * 1024;
	fx->c.routes = fx->routes;
	fx->c.n_routes = 0;
	fx->levels[0] = 5000;
	fx->levels[1] = 30000;
	fx->levels[2] = 60000;
	fx->c.redo_levels_ms = fx->levels;
	fx->c.n_redo_levels = 3;
	fx->c.max_tries = 4;
	*state = fx;
	return 0;
}

static void got_clear(struct fx *fx)
{
	size_t i;

	for (i = 0; i < fx->n_got; i++)
		codec_frame_free(fx->got[i].f);
	free(fx->got);
	fx->got = NULL;
	fx->n_got = 0;
}

static void jobs_free(struct fx *fx)
{
	while (fx->jobs) {
		struct job *j = fx->jobs;
		fx->jobs = j->next;
		job_free(j);
	}
	fx->last = NULL;
}

/* Shuts the node down: proto, plugins and store (a restart is stop+start). */
static void stop(struct fx *fx)
{
	proto_free(fx->p);
	fx->p = NULL;
	plughost_free(fx->ph);
	fx->ph = NULL;
	store_free(fx->st);
	fx->st = NULL;
}

static int teardown(void **state)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	struct fx *fx = *state;
	char p[PATH_MAX + 32];
	size_t i;

	stop(fx);
	sqlite3_close(fx->db);
	got_clear(fx);
	jobs_free(fx);
	for (i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
		snprintf(p, sizeof p, "%s%s", fx->path, sfx[i]);
		unlink(p);
	}
	rmdir(fx->dir);
	free(fx);
	return 0;
}

/* Opens the store with the redo levels of fx->c, loads flaky.so, makes the
 * proto, and the second connection the first time. */
static void start(struct fx *fx)
{
	struct store_opts o = {0};
	char err[SEMQ_ERRLEN * 2] = "";

	o.path = fx->path;
	o.node_id = fx->c.id;
	o.max_payload = fx->c.max_payload;
	o.synchronous = 0;
	o.redo_levels_ms = fx->c.redo_levels_ms;
	o.n_redo_levels = fx->c.n_redo_levels;
	o.max_tries = fx->c.max_tries;
	if (store_open(&o, &fx->st, err, sizeof err) != SEMQ_OK)
		fail_msg("store_open: %s", err);
	fx->ph = plughost_empty();
	assert_non_null(fx->ph);
	if (plughost_add(fx->ph, "flaky", FLAKY_SO, NULL, 0, NULL, 0, fx->c.id,
			 store_plugin_tx(fx->st), err, sizeof err) != SEMQ_OK)
		fail_msg("plughost_add: %s", err);
	fx->p = proto_new(fx->st, fx->ph, &fx->c);
	assert_non_null(fx->p);
	if (!fx->db) {
		assert_int_equal(sqlite3_open_v2(fx->path, &fx->db,
						 SQLITE_OPEN_READWRITE, NULL),
				 SQLITE_OK);
		sqlite3_busy_timeout(fx->db, 5000);
	}
}

/* ---- jobs ----------------------------------------------------------------- */

static void push(struct fx *fx, struct job *j)
{
	assert_non_null(j);
	if (fx->last)
		fx->last->next = j;
	else
		fx->jobs = j;
	fx->last = j;
}

/* A JOB_FRAME from `peer` on `conn` carrying f, which goes through the codec
 * (encode, then decode and validate) as it would off the wire. */
static void push_frame(struct fx *fx, uint64_t conn, const char *peer,
		       const Semq__Frame *f)
{
	char err[SEMQ_ERRLEN] = "";
	uint8_t *buf = NULL;
	size_t len = 0, blen = 0;
	Semq__Frame *dec = NULL;
	struct job *j;

	assert_int_equal(codec_encode(f, fx->c.max_frame, &buf, &len), SEMQ_OK);
	assert_int_equal(
		codec_frame_len(buf, fx->c.max_frame, &blen, err, sizeof err),
		SEMQ_OK);
	assert_int_equal(blen + CODEC_HDR, len);
	if (codec_decode_body(buf + CODEC_HDR, blen, &dec, err, sizeof err) !=
	    SEMQ_OK)
		fail_msg("test frame does not decode: %s", err);
	free(buf);
	j = job_new(JOB_FRAME);
	assert_non_null(j);
	j->conn_id = conn;
	snprintf(j->peer, sizeof j->peer, "%s", peer);
	j->frame = dec;
	push(fx, j);
}

struct mspec {
	const char *origin, *dest;
	uint64_t seq;
	const char *key; /* NULL = none */
	uint64_t prev;
	int64_t deliver_at;
};

static void push_data(struct fx *fx, uint64_t conn, const char *peer,
		      const struct mspec *ms, size_t n)
{
	Semq__Message w[MAX_JOB_MSGS], *pw[MAX_JOB_MSGS];
	char pl[MAX_JOB_MSGS][64];
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;
	size_t i;

	assert_true(n > 0 && n <= MAX_JOB_MSGS);
	for (i = 0; i < n; i++) {
		int k = snprintf(pl[i], sizeof pl[i], "doc %s/%s/%" PRIu64,
				 ms[i].origin, ms[i].dest, ms[i].seq);
		semq__message__init(&w[i]);
		w[i].origin = (char *)ms[i].origin;
		w[i].dest = (char *)ms[i].dest;
		w[i].seq = ms[i].seq;
		w[i].type = 7;
		w[i].key = (char *)(ms[i].key ? ms[i].key : "");
		w[i].prev_seq = ms[i].prev;
		w[i].deliver_at = ms[i].deliver_at;
		w[i].created_at = T0;
		w[i].payload.data = (uint8_t *)pl[i];
		w[i].payload.len = (size_t)k;
		pw[i] = &w[i];
	}
	d.n_messages = n;
	d.messages = pw;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	push_frame(fx, conn, peer, &f);
}

/* An 810-Indication for seqs of origin->dest, each with results[i]. */
static void push_indication(struct fx *fx, uint64_t conn, const char *peer,
			    const char *origin, const char *dest,
			    const uint64_t *seqs, const int *results, size_t n)
{
	Semq__MsgId id[MAX_JOB_MSGS];
	Semq__Verdict v[MAX_JOB_MSGS], *pv[MAX_JOB_MSGS];
	Semq__AckIndication ind = SEMQ__ACK_INDICATION__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;
	size_t i;

	assert_true(n > 0 && n <= MAX_JOB_MSGS);
	for (i = 0; i < n; i++) {
		semq__msg_id__init(&id[i]);
		id[i].origin = (char *)origin;
		id[i].dest = (char *)dest;
		id[i].seq = seqs[i];
		semq__verdict__init(&v[i]);
		v[i].id = &id[i];
		v[i].result = results[i];
		pv[i] = &v[i];
	}
	ind.n_verdicts = n;
	ind.verdicts = pv;
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &ind;
	push_frame(fx, conn, peer, &f);
}

/* id[0..n) = origin/dest/seqs[i], pid[i] = &id[i] (borrowing the strings). */
static void fill_ids(Semq__MsgId *id, Semq__MsgId **pid, const char *origin,
		     const char *dest, const uint64_t *seqs, size_t n)
{
	size_t i;

	assert_true(n > 0 && n <= MAX_JOB_MSGS);
	for (i = 0; i < n; i++) {
		semq__msg_id__init(&id[i]);
		id[i].origin = (char *)origin;
		id[i].dest = (char *)dest;
		id[i].seq = seqs[i];
		pid[i] = &id[i];
	}
}

static void push_relay_ack(struct fx *fx, uint64_t conn, const char *peer,
			   int kind, const char *origin, const char *dest,
			   const uint64_t *seqs, size_t n, const char *detail)
{
	Semq__MsgId id[MAX_JOB_MSGS], *pid[MAX_JOB_MSGS];
	Semq__RelayAck ra = SEMQ__RELAY_ACK__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	fill_ids(id, pid, origin, dest, seqs, n);
	ra.n_ids = n;
	ra.ids = pid;
	ra.kind = kind;
	ra.detail = (char *)detail;
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &ra;
	push_frame(fx, conn, peer, &f);
}

/* A QueryReply: received[i] with results[i], or not received. */
static void push_query_reply(struct fx *fx, uint64_t conn, const char *peer,
			     const char *origin, const char *dest,
			     const uint64_t *seqs, const int *received,
			     const int *results, size_t n)
{
	Semq__MsgId id[MAX_JOB_MSGS];
	Semq__QueryAnswer a[MAX_JOB_MSGS], *pa[MAX_JOB_MSGS];
	Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;
	size_t i;

	assert_true(n > 0 && n <= MAX_JOB_MSGS);
	for (i = 0; i < n; i++) {
		semq__msg_id__init(&id[i]);
		id[i].origin = (char *)origin;
		id[i].dest = (char *)dest;
		id[i].seq = seqs[i];
		semq__query_answer__init(&a[i]);
		a[i].id = &id[i];
		a[i].received = received[i];
		a[i].result = results[i];
		pa[i] = &a[i];
	}
	qr.n_answers = n;
	qr.answers = pa;
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &qr;
	push_frame(fx, conn, peer, &f);
}

/* JOB_ROUTES with the given hops (copied into the job). */
static void push_routes(struct fx *fx, const struct route_hop *hops, size_t n)
{
	struct routes r = {(struct route_hop *)hops, n, NULL};
	struct job *j = job_new(JOB_ROUTES);

	assert_non_null(j);
	j->routes = routes_copy(&r);
	assert_non_null(j->routes);
	push(fx, j);
}

static void push_wake(struct fx *fx)
{
	push(fx, job_new(JOB_WAKE));
}

/* ---- the batch: what the worker does ----------------------------------------- */

/*
 * begin; proto_job for every queued job; proto_tick(now); commit. Then the
 * outbox is decoded into fx->got (the previous batch's frames are dropped).
 * Returns how many frames were emitted.
 */
static size_t batch(struct fx *fx, int64_t now)
{
	char err[SEMQ_ERRLEN] = "";
	struct outbox ob;
	struct job *j;
	struct out *o;
	size_t n = 0;

	got_clear(fx);
	outbox_init(&ob);
	assert_int_equal(store_begin(fx->st), SEMQ_OK);
	for (j = fx->jobs; j; j = j->next)
		if (proto_job(fx->p, j, now, &ob) != SEMQ_OK)
			fail_msg("proto_job (kind %d): %s", j->kind,
				 store_errmsg(fx->st));
	if (proto_tick(fx->p, now, &ob) != SEMQ_OK)
		fail_msg("proto_tick: %s", store_errmsg(fx->st));
	assert_int_equal(store_commit(fx->st), SEMQ_OK);
	proto_committed(fx->p);
	jobs_free(fx);

	fx->got = calloc(ob.n ? ob.n : 1, sizeof *fx->got);
	assert_non_null(fx->got);
	for (o = ob.head; o; o = o->next) {
		size_t len = 0;
		Semq__Frame *f = NULL;

		assert_true(o->len > CODEC_HDR);
		assert_int_equal(codec_frame_len(o->bytes, fx->c.max_frame,
						 &len, err, sizeof err),
				 SEMQ_OK);
		assert_int_equal(len + CODEC_HDR, o->len);
		if (codec_decode_body(o->bytes + CODEC_HDR, len, &f, err,
				      sizeof err) != SEMQ_OK)
			fail_msg("outbox frame does not decode: %s", err);
		fx->got[n].conn = o->conn_id;
		fx->got[n].f = f;
		fx->n_got = ++n;
	}
	assert_int_equal(n, ob.n);
	outbox_clear(&ob);
	return n;
}

/* Frames of body `body` sent to conn (0 = any connection). */
static size_t count_frames(const struct fx *fx, uint64_t conn, int body)
{
	size_t i, n = 0;

	for (i = 0; i < fx->n_got; i++)
		if ((!conn || fx->got[i].conn == conn) &&
		    (int)fx->got[i].f->body_case == body)
			n++;
	return n;
}

/* The k-th frame of body `body` to conn (0 = any), or fails. */
static const Semq__Frame *frame_at(const struct fx *fx, uint64_t conn, int body,
				   size_t k)
{
	size_t i;

	for (i = 0; i < fx->n_got; i++)
		if ((!conn || fx->got[i].conn == conn) &&
		    (int)fx->got[i].f->body_case == body && k-- == 0)
			return fx->got[i].f;
	fail_msg("no frame %d of body %d to conn %" PRIu64, (int)k, body, conn);
	return NULL;
}

/* Every verdict sent to conn, across its AckIndication frames, in order. */
static size_t verdicts_to(const struct fx *fx, uint64_t conn, uint64_t *seqs,
			  int *results, size_t cap)
{
	size_t i, k, n = 0;

	for (i = 0; i < fx->n_got; i++) {
		const Semq__Frame *f = fx->got[i].f;
		if (fx->got[i].conn != conn ||
		    f->body_case != SEMQ__FRAME__BODY_ACK_INDICATION)
			continue;
		for (k = 0; k < f->ack_indication->n_verdicts; k++) {
			const Semq__Verdict *v = f->ack_indication->verdicts[k];
			assert_true(n < cap);
			seqs[n] = v->id->seq;
			/* as proto.c reads it: the flags of revision 2 */
			results[n] =
				v->refusal == SEMQ__REFUSAL__REFUSAL_CONFLICT
					? RES_CONFLICT
				: v->refusal ? RES_UNDECIDED
				: v->dead    ? RES_DEAD
					     : (int)v->result;
			n++;
		}
	}
	return n;
}

/* Every message sent in Data frames to conn, in order. */
static size_t data_to(const struct fx *fx, uint64_t conn,
		      const Semq__Message **msgs, size_t cap)
{
	size_t i, k, n = 0;

	for (i = 0; i < fx->n_got; i++) {
		const Semq__Frame *f = fx->got[i].f;
		if (fx->got[i].conn != conn ||
		    f->body_case != SEMQ__FRAME__BODY_DATA)
			continue;
		for (k = 0; k < f->data->n_messages; k++) {
			assert_true(n < cap);
			msgs[n++] = f->data->messages[k];
		}
	}
	return n;
}

/* ---- reading the tables through the second connection -------------------- */

static sqlite3_stmt *prep(struct fx *fx, const char *sql)
{
	sqlite3_stmt *s = NULL;

	if (sqlite3_prepare_v2(fx->db, sql, -1, &s, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(fx->db));
	return s;
}

static void set_rule(struct fx *fx, const char *key, const char *outcome)
{
	sqlite3_stmt *s;

	if (outcome) {
		s = prep(fx, "INSERT OR REPLACE INTO flaky_rules(msg_key, "
			     "outcome) VALUES (?1, ?2)");
		sqlite3_bind_text(s, 2, outcome, -1, SQLITE_STATIC);
	} else {
		s = prep(fx, "DELETE FROM flaky_rules WHERE msg_key = ?1");
	}
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(s), SQLITE_DONE);
	sqlite3_finalize(s);
}

/* The seqs flaky applied, in the order it applied them (and their tries). */
static size_t done_seqs(struct fx *fx, uint64_t *seqs, int *tries, size_t cap)
{
	sqlite3_stmt *s = prep(fx, "SELECT seq, tries FROM flaky_done "
				   "ORDER BY id");
	size_t n = 0;

	while (sqlite3_step(s) == SQLITE_ROW) {
		assert_true(n < cap);
		seqs[n] = (uint64_t)sqlite3_column_int64(s, 0);
		if (tries)
			tries[n] = sqlite3_column_int(s, 1);
		n++;
	}
	sqlite3_finalize(s);
	return n;
}

static size_t n_done(struct fx *fx)
{
	uint64_t seqs[64];

	return done_seqs(fx, seqs, NULL, 64);
}

/* tb_0030.result of origin/<this node>/seq, or -1 when there is no row. */
static int recv_result(struct fx *fx, const char *origin, uint64_t seq)
{
	sqlite3_stmt *s = prep(fx, "SELECT result FROM tb_0030 WHERE "
				   "origin = ?1 AND dest = ?2 AND seq = ?3");
	int r = -1;

	sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, fx->c.id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)seq);
	if (sqlite3_step(s) == SQLITE_ROW)
		r = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	return r;
}

struct redo_view {
	int found;
	int64_t id;
	int status, tries, level;
	int64_t next_at;
	char last_error[SEMQ_ERRLEN];
};

/* The tb_0033 entry of origin/dest/seq. */
static struct redo_view redo_at(struct fx *fx, const char *origin,
				const char *dest, uint64_t seq)
{
	sqlite3_stmt *s = prep(fx, "SELECT id, status, tries, level, "
				   "next_attempt_at, last_error FROM tb_0033 "
				   "WHERE origin = ?1 AND dest = ?2 AND "
				   "seq = ?3");
	struct redo_view v;

	memset(&v, 0, sizeof v);
	sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)seq);
	if (sqlite3_step(s) == SQLITE_ROW) {
		v.found = 1;
		v.id = sqlite3_column_int64(s, 0);
		v.status = sqlite3_column_int(s, 1);
		v.tries = sqlite3_column_int(s, 2);
		v.level = sqlite3_column_int(s, 3);
		v.next_at = sqlite3_column_int64(s, 4);
		if (sqlite3_column_text(s, 5))
			snprintf(v.last_error, sizeof v.last_error, "%s",
				 (const char *)sqlite3_column_text(s, 5));
	}
	sqlite3_finalize(s);
	return v;
}

/* The tb_0033 entry of origin/<this node>/seq. */
static struct redo_view redo_of(struct fx *fx, const char *origin, uint64_t seq)
{
	return redo_at(fx, origin, fx->c.id, seq);
}

struct out_view {
	int found;
	int status, attempts, result; /* result -1 when NULL */
	int64_t next_at, sent_at;
	char last_error[SEMQ_ERRLEN];
};

static struct out_view out_of(struct fx *fx, const char *origin,
			      const char *dest, uint64_t seq)
{
	sqlite3_stmt *s = prep(fx, "SELECT status, attempts, result, "
				   "next_attempt_at, sent_at, last_error "
				   "FROM tb_0031 WHERE origin = ?1 AND "
				   "dest = ?2 AND seq = ?3");
	struct out_view v;

	memset(&v, 0, sizeof v);
	sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)seq);
	if (sqlite3_step(s) == SQLITE_ROW) {
		v.found = 1;
		v.status = sqlite3_column_int(s, 0);
		v.attempts = sqlite3_column_int(s, 1);
		v.result = sqlite3_column_type(s, 2) == SQLITE_NULL
				   ? -1
				   : sqlite3_column_int(s, 2);
		v.next_at = sqlite3_column_int64(s, 3);
		v.sent_at = sqlite3_column_int64(s, 4);
		if (sqlite3_column_text(s, 5))
			snprintf(v.last_error, sizeof v.last_error, "%s",
				 (const char *)sqlite3_column_text(s, 5));
	}
	sqlite3_finalize(s);
	return v;
}

static int64_t count_rows(struct fx *fx, const char *sql)
{
	sqlite3_stmt *s = prep(fx, sql);
	int64_t n = -1;

	if (sqlite3_step(s) == SQLITE_ROW)
		n = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return n;
}

/* Queues n messages of this node to dest (outside any batch, as an
 * application would); their seqs are 1..n of a fresh stream. */
static void enqueue(struct fx *fx, const char *dest, size_t n)
{
	char err[SEMQ_ERRLEN] = "", pl[32];
	size_t i;

	for (i = 0; i < n; i++) {
		struct msg m;
		uint64_t seq = 0;

		memset(&m, 0, sizeof m);
		snprintf(m.id.dest, sizeof m.id.dest, "%s", dest);
		m.type = 7;
		m.payload_len =
			(size_t)snprintf(pl, sizeof pl, "doc %zu", i + 1);
		m.payload = (uint8_t *)pl;
		m.created_at = T0;
		if (store_enqueue(fx->st, &m, &seq, err, sizeof err) != SEMQ_OK)
			fail_msg("store_enqueue: %s", err);
		assert_int_equal(seq, i + 1);
	}
}

/* ---- receiving ---------------------------------------------------------------- */

/*
 * Data for this node: AckIndication PROCESSED after the commit that recorded
 * it; a duplicate gets DUPLICATE and no second effect; a message whose
 * predecessor is missing gets no verdict until the predecessor arrives, then
 * both verdicts go out in order. A rolled-back batch leaves nothing behind.
 */
static void test_receipt(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, "A", 0, 0};
	const struct mspec m2 = {"R1", "S1", 2, "A", 1, 0};
	const struct mspec m3 = {"R1", "S1", 3, "A", 2, 0};
	const struct mspec m4 = {"R1", "S1", 4, NULL, 0, 0};
	uint64_t seqs[16];
	int res[16], tries[16];
	struct outbox ob;
	size_t n;

	start(fx);

	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0), 1);
	assert_int_equal(fx->got[0].conn, 3);
	n = verdicts_to(fx, 3, seqs, res, 16);
	assert_int_equal(n, 1);
	assert_int_equal(seqs[0], 1);
	assert_int_equal(res[0], RES_PROCESSED);
	assert_string_equal(frame_at(fx, 3, SEMQ__FRAME__BODY_ACK_INDICATION, 0)
				    ->ack_indication->verdicts[0]
				    ->id->origin,
			    "R1");
	/* The verdict is true in the committed database. */
	assert_int_equal(recv_result(fx, "R1", 1), RES_PROCESSED);
	assert_int_equal(done_seqs(fx, seqs, tries, 16), 1);
	assert_int_equal(seqs[0], 1);
	assert_int_equal(tries[0], 0);

	/* A second copy: what it became the first time, no plugin call. */
	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0 + 1), 1);
	n = verdicts_to(fx, 3, seqs, res, 16);
	assert_int_equal(n, 1);
	assert_int_equal(seqs[0], 1);
	assert_int_equal(res[0], RES_PROCESSED);
	assert_int_equal(n_done(fx), 1);

	/* seq 3 names prev_seq 2, not received: held, no verdict, nothing
	 * recorded, on this batch and on the next tick. */
	push_data(fx, 3, "R1", &m3, 1);
	assert_int_equal(batch(fx, T0 + 2), 0);
	assert_int_equal(recv_result(fx, "R1", 3), -1);
	assert_int_equal(batch(fx, T0 + 3), 0);
	assert_int_equal(recv_result(fx, "R1", 3), -1);
	assert_int_equal(n_done(fx), 1);

	/* The predecessor arrives: both recorded, verdicts 2 then 3. */
	push_data(fx, 3, "R1", &m2, 1);
	batch(fx, T0 + 4);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_ACK_INDICATION),
			 fx->n_got);
	n = verdicts_to(fx, 3, seqs, res, 16);
	assert_int_equal(n, 2);
	assert_int_equal(seqs[0], 2);
	assert_int_equal(res[0], RES_PROCESSED);
	assert_int_equal(seqs[1], 3);
	assert_int_equal(res[1], RES_PROCESSED);
	assert_int_equal(recv_result(fx, "R1", 2), RES_PROCESSED);
	assert_int_equal(recv_result(fx, "R1", 3), RES_PROCESSED);
	assert_int_equal(done_seqs(fx, seqs, NULL, 16), 3);
	assert_int_equal(seqs[1], 2);
	assert_int_equal(seqs[2], 3);

	/* A batch that is rolled back: its verdict was queued but never
	 * leaves (the worker drops the outbox), and nothing of it is kept, so
	 * the resent copy is processed, not called a duplicate. */
	push_data(fx, 3, "R1", &m4, 1);
	outbox_init(&ob);
	assert_int_equal(store_begin(fx->st), SEMQ_OK);
	assert_int_equal(proto_job(fx->p, fx->jobs, T0 + 5, &ob), SEMQ_OK);
	assert_int_equal(ob.n, 1);
	assert_int_equal(store_rollback(fx->st), SEMQ_OK);
	proto_rolled_back(fx->p);
	outbox_clear(&ob);
	jobs_free(fx);
	assert_int_equal(recv_result(fx, "R1", 4), -1);
	assert_int_equal(n_done(fx), 3);
	push_data(fx, 3, "R1", &m4, 1);
	assert_int_equal(batch(fx, T0 + 6), 1);
	n = verdicts_to(fx, 3, seqs, res, 16);
	assert_int_equal(n, 1);
	assert_int_equal(seqs[0], 4);
	assert_int_equal(res[0], RES_PROCESSED);
	assert_int_equal(n_done(fx), 4);
}

/* ---- redo levels ------------------------------------------------------------ */

static void expect_redo(struct fx *fx, uint64_t seq, int status, int tries,
			int64_t next_at)
{
	struct redo_view v = redo_of(fx, "R1", seq);

	assert_true(v.found);
	assert_int_equal(v.status, status);
	assert_int_equal(v.tries, tries);
	if (status == RS_PENDING)
		assert_int_equal(v.next_at, next_at);
}

/*
 * RETRY: tb_0033 pending at t0+5s; not run before its time; then the levels
 * 30s and 1m; dead after max_tries (4) with the plugin's reason.
 * proto_next_due names each deadline once the tick before it has run.
 */
static void test_redo_levels(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, "A", 0, 0};
	uint64_t seqs[4];
	int res[4];
	struct redo_view v;

	start(fx);
	set_rule(fx, "A", "retry");

	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0), 1);
	assert_int_equal(verdicts_to(fx, 3, seqs, res, 4), 1);
	assert_int_equal(res[0], RES_REDO);
	assert_int_equal(recv_result(fx, "R1", 1), RES_REDO);
	v = redo_of(fx, "R1", 1);
	assert_true(v.found);
	assert_int_equal(v.status, RS_PENDING);
	assert_int_equal(v.tries, 1);
	assert_int_equal(v.next_at, T0 + 5000);
	assert_string_equal(v.last_error, "flaky: told to retry");
	assert_int_equal(proto_next_due(fx->p), T0 + 5000);

	/* Not before its time. */
	batch(fx, T0 + 4900);
	expect_redo(fx, 1, RS_PENDING, 1, T0 + 5000);
	assert_int_equal(proto_next_due(fx->p), T0 + 5000);
	batch(fx, T0 + 4999);
	expect_redo(fx, 1, RS_PENDING, 1, T0 + 5000);
	assert_int_equal(proto_next_due(fx->p), T0 + 5000);

	/* At t0+5s: second try, next level 30 s. */
	batch(fx, T0 + 5000);
	expect_redo(fx, 1, RS_PENDING, 2, T0 + 35000);
	batch(fx, T0 + 34999);
	expect_redo(fx, 1, RS_PENDING, 2, T0 + 35000);
	assert_int_equal(proto_next_due(fx->p), T0 + 35000);

	/* At t0+35s: third try, next level 1 m. */
	batch(fx, T0 + 35000);
	expect_redo(fx, 1, RS_PENDING, 3, T0 + 95000);
	batch(fx, T0 + 94999);
	expect_redo(fx, 1, RS_PENDING, 3, T0 + 95000);
	assert_int_equal(proto_next_due(fx->p), T0 + 95000);

	/* At t0+95s: the fourth try is the last. */
	batch(fx, T0 + 95000);
	v = redo_of(fx, "R1", 1);
	assert_int_equal(v.status, RS_DEAD);
	assert_int_equal(v.tries, 4);
	assert_string_equal(v.last_error, "flaky: told to retry");
	batch(fx, T0 + 95001);
	assert_int_equal(proto_next_due(fx->p), INT64_MAX);

	/* Dead stays dead: no more tries, whatever the time. */
	set_rule(fx, "A", NULL);
	batch(fx, T0 + 2 * DAY_MS);
	expect_redo(fx, 1, RS_DEAD, 4, 0);
	assert_int_equal(n_done(fx), 0);
	assert_int_equal(recv_result(fx, "R1", 1), RES_REDO);
}

/*
 * A redo entry that finished is deleted by the ticks once [redo] retention
 * has passed since it finished, not before; a dead one stays. The copy of
 * the message that arrives after that is a duplicate.
 */
static void test_redo_done_purged_after_retention(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, "A", 0, 0};
	const struct mspec m2 = {"R1", "S1", 2, "B", 0, 0};
	struct redo_view v;
	uint64_t seqs[4];
	int res[4];

	start(fx);
	set_rule(fx, "A", "retry");
	set_rule(fx, "B", "fail");
	push_data(fx, 3, "R1", &m1, 1);
	push_data(fx, 3, "R1", &m2, 1);
	batch(fx, T0);
	assert_int_equal(redo_of(fx, "R1", 2).status, RS_DEAD);
	set_rule(fx, "A", NULL);
	batch(fx, T0 + 5000); /* the retry succeeds */
	expect_redo(fx, 1, RS_DONE, 2, -1);
	assert_int_equal(n_done(fx), 1);

	batch(fx, T0 + 5000 + 2 * DAY_MS - 1000);
	assert_true(redo_of(fx, "R1", 1).found);
	batch(fx, T0 + 5000 + 2 * DAY_MS + 61000);
	v = redo_of(fx, "R1", 1);
	assert_false(v.found);
	assert_int_equal(redo_of(fx, "R1", 2).status, RS_DEAD);
	assert_int_equal(n_done(fx), 1);

	/* Its record says what became of it after the redo. */
	push_data(fx, 3, "R1", &m1, 1);
	batch(fx, T0 + 5000 + 2 * DAY_MS + 62000);
	assert_int_equal(verdicts_to(fx, 3, seqs, res, 4), 1);
	assert_int_equal(seqs[0], 1);
	assert_int_equal(res[0], RES_PROCESSED);
	assert_int_equal(n_done(fx), 1);
}

/*
 * The deadline of an entry a tick has just rescheduled is known in that very
 * batch; proto_next_due (what the worker sleeps on) should name it then, not
 * only after a later tick rescanned the table.
 */
static void test_next_due_right_after_run(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, "A", 0, 0};

	start(fx);
	set_rule(fx, "A", "retry");
	push_data(fx, 3, "R1", &m1, 1);
	batch(fx, T0);
	assert_int_equal(proto_next_due(fx->p), T0 + 5000);
	batch(fx, T0 + 5000);
	expect_redo(fx, 1, RS_PENDING, 2, T0 + 35000);
	assert_int_equal(proto_next_due(fx->p), T0 + 35000);
}

/*
 * A head that finished releases its next waiting entry, pending at once; the
 * worker must learn that work is due now (proto_next_due <= now, or
 * proto_busy), else each successor of a key waits a poll interval.
 */
static void test_released_successor_due_at_once(void **state)
{
	struct fx *fx = *state;
	const struct mspec ms[2] = {{"R1", "S1", 1, "K", 0, 0},
				    {"R1", "S1", 2, "K", 1, 0}};

	start(fx);
	set_rule(fx, "K", "retry");
	push_data(fx, 3, "R1", ms, 2);
	batch(fx, T0);
	expect_redo(fx, 2, RS_WAITING, 0, 0);
	set_rule(fx, "K", NULL);
	batch(fx, T0 + 5000);
	expect_redo(fx, 1, RS_DONE, 2, 0);
	expect_redo(fx, 2, RS_PENDING, 0, T0 + 5000);
	assert_true(proto_busy(fx->p) || proto_next_due(fx->p) <= T0 + 5000);
}

/* PERMANENT: dead at once, never run again by later ticks. */
static void test_permanent(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, "P", 0, 0};
	uint64_t seqs[4];
	int res[4];
	struct redo_view v;

	start(fx);
	set_rule(fx, "P", "permanent");
	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0), 1);
	assert_int_equal(verdicts_to(fx, 3, seqs, res, 4), 1);
	assert_int_equal(res[0], RES_DEAD); /* REDO, its entry dead */
	v = redo_of(fx, "R1", 1);
	assert_true(v.found);
	assert_int_equal(v.status, RS_DEAD);
	assert_int_equal(v.tries, 1);
	assert_string_equal(v.last_error, "flaky: told to fail permanently");
	assert_int_equal(proto_next_due(fx->p), INT64_MAX);

	/* Even with the cause gone, no tick runs it: only an operator can. */
	set_rule(fx, "P", NULL);
	batch(fx, T0 + 5000);
	batch(fx, T0 + 60000);
	batch(fx, T0 + DAY_MS);
	expect_redo(fx, 1, RS_DEAD, 1, 0);
	assert_int_equal(n_done(fx), 0);
	assert_int_equal(proto_next_due(fx->p), INT64_MAX);
}

/* ---- key order ------------------------------------------------------------------ */

/* Ticks at `now` until flaky applied `want` messages (at most max_ticks). */
static void drain(struct fx *fx, int64_t now, size_t want, int max_ticks)
{
	int i;

	for (i = 0; i < max_ticks && n_done(fx) < want; i++)
		batch(fx, now);
	assert_int_equal(n_done(fx), want);
}

/*
 * The head of key K fails (RETRY) while three successors of K arrive: they
 * are stored waiting and acknowledged REDO; key L goes through at once. When
 * the head succeeds at its due time, it and its successors run in seq order.
 */
static void test_key_order_retry(void **state)
{
	struct fx *fx = *state;
	const struct mspec first[2] = {{"R1", "S1", 1, "K", 0, 0},
				       {"R1", "S1", 2, "L", 0, 0}};
	const struct mspec more[4] = {{"R1", "S1", 3, "K", 1, 0},
				      {"R1", "S1", 4, "L", 2, 0},
				      {"R1", "S1", 5, "K", 3, 0},
				      {"R1", "S1", 6, "K", 5, 0}};
	const struct mspec late_l = {"R1", "S1", 7, "L", 4, 0};
	const uint64_t want[7] = {2, 4, 7, 1, 3, 5, 6};
	uint64_t seqs[16];
	int res[16], tries[16];
	size_t i, n;

	start(fx);
	set_rule(fx, "K", "retry");

	push_data(fx, 3, "R1", first, 2);
	batch(fx, T0);
	n = verdicts_to(fx, 3, seqs, res, 16);
	assert_int_equal(n, 2);
	assert_int_equal(seqs[0], 1);
	assert_int_equal(res[0], RES_REDO);
	assert_int_equal(seqs[1], 2);
	assert_int_equal(res[1], RES_PROCESSED);

	push_data(fx, 3, "R1", more, 4);
	batch(fx, T0 + 1000);
	n = verdicts_to(fx, 3, seqs, res, 16);
	assert_int_equal(n, 4);
	for (i = 0; i < 4; i++) {
		assert_int_equal(seqs[i], more[i].seq);
		assert_int_equal(res[i], strcmp(more[i].key, "K") == 0
						 ? RES_REDO
						 : RES_PROCESSED);
	}
	expect_redo(fx, 1, RS_PENDING, 1, T0 + 5000);
	expect_redo(fx, 3, RS_WAITING, 0, 0);
	expect_redo(fx, 5, RS_WAITING, 0, 0);
	expect_redo(fx, 6, RS_WAITING, 0, 0);
	assert_false(redo_of(fx, "R1", 2).found);
	assert_false(redo_of(fx, "R1", 4).found);
	assert_int_equal(done_seqs(fx, seqs, NULL, 16), 2);
	assert_int_equal(seqs[0], 2);
	assert_int_equal(seqs[1], 4);

	/* The cause is fixed; nothing of K moves before the head's time. */
	set_rule(fx, "K", NULL);
	batch(fx, T0 + 4999);
	assert_int_equal(n_done(fx), 2);
	expect_redo(fx, 3, RS_WAITING, 0, 0);

	/* At the head's time: L is still processed at once, and K drains in
	 * seq order over the following ticks. */
	push_data(fx, 3, "R1", &late_l, 1);
	batch(fx, T0 + 5000);
	assert_int_equal(recv_result(fx, "R1", 7), RES_PROCESSED);
	drain(fx, T0 + 5000, 7, 10);
	n = done_seqs(fx, seqs, tries, 16);
	assert_int_equal(n, 7);
	for (i = 0; i < 7; i++)
		assert_int_equal(seqs[i], want[i]);
	assert_int_equal(tries[3], 1); /* the head's second attempt */
	assert_int_equal(tries[4], 0); /* successors: first attempt */
	expect_redo(fx, 1, RS_DONE, 2, 0);
	expect_redo(fx, 3, RS_DONE, 1, 0);
	expect_redo(fx, 5, RS_DONE, 1, 0);
	expect_redo(fx, 6, RS_DONE, 1, 0);
	assert_int_equal(proto_next_due(fx->p), INT64_MAX);
}

/*
 * The head of K fails PERMANENT: its successors wait (acknowledged), ticks
 * do not move them; an operator discards the head and wakes the node: the
 * successors are released and run in seq order on the following ticks.
 */
static void test_key_order_permanent_discard(void **state)
{
	struct fx *fx = *state;
	const struct mspec ms[5] = {{"R1", "S1", 1, "K", 0, 0},
				    {"R1", "S1", 2, "L", 0, 0},
				    {"R1", "S1", 3, "K", 1, 0},
				    {"R1", "S1", 4, "K", 3, 0},
				    {"R1", "S1", 5, "K", 4, 0}};
	const uint64_t want[4] = {2, 3, 4, 5};
	uint64_t seqs[16];
	int res[16];
	size_t i, n;
	struct redo_view head;

	start(fx);
	set_rule(fx, "K", "permanent");
	push_data(fx, 3, "R1", ms, 5);
	batch(fx, T0);
	n = verdicts_to(fx, 3, seqs, res, 16);
	assert_int_equal(n, 5);
	for (i = 0; i < 5; i++) {
		assert_int_equal(seqs[i], ms[i].seq);
		/* the head dead, its successors waiting behind it */
		assert_int_equal(res[i], i == 0 ? RES_DEAD
					 : strcmp(ms[i].key, "K") == 0
						 ? RES_REDO
						 : RES_PROCESSED);
	}
	head = redo_of(fx, "R1", 1);
	assert_int_equal(head.status, RS_DEAD);
	expect_redo(fx, 3, RS_WAITING, 0, 0);
	expect_redo(fx, 4, RS_WAITING, 0, 0);
	expect_redo(fx, 5, RS_WAITING, 0, 0);

	/* Nothing moves on its own, even with the cause gone. */
	set_rule(fx, "K", NULL);
	batch(fx, T0 + 60000);
	batch(fx, T0 + DAY_MS);
	assert_int_equal(n_done(fx), 1);
	expect_redo(fx, 3, RS_WAITING, 0, 0);

	/* Bad inputs of the operator's verb are refused and change nothing. */
	assert_int_equal(store_redo_discard(fx->st, head.id, "", T0 + DAY_MS),
			 SEMQ_ERR_INVALID);
	assert_int_equal(
		store_redo_discard(fx->st, head.id + 1000, "gone", T0 + DAY_MS),
		SEMQ_ERR_NOT_FOUND);
	expect_redo(fx, 1, RS_DEAD, 1, 0);

	assert_int_equal(store_redo_discard(fx->st, head.id, "bad document",
					    T0 + DAY_MS),
			 SEMQ_OK);
	expect_redo(fx, 1, RS_DISCARDED, 1, 0);
	push_wake(fx);
	drain(fx, T0 + DAY_MS, 4, 10);
	n = done_seqs(fx, seqs, NULL, 16);
	assert_int_equal(n, 4);
	for (i = 0; i < 4; i++)
		assert_int_equal(seqs[i], want[i]);
	expect_redo(fx, 3, RS_DONE, 1, 0);
	expect_redo(fx, 4, RS_DONE, 1, 0);
	expect_redo(fx, 5, RS_DONE, 1, 0);
	/* The discarded head never took effect. */
	expect_redo(fx, 1, RS_DISCARDED, 1, 0);
}

/* ---- delayed messages --------------------------------------------------------- */

/* deliver_at in the future: SCHEDULED, applied exactly at its time, once. */
static void test_delayed(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, NULL, 0, T0 + 10000};
	uint64_t seqs[4];
	int res[4];

	start(fx);
	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0), 1);
	assert_int_equal(verdicts_to(fx, 3, seqs, res, 4), 1);
	assert_int_equal(res[0], RES_SCHEDULED);
	assert_int_equal(recv_result(fx, "R1", 1), RES_SCHEDULED);
	expect_redo(fx, 1, RS_PENDING, 0, T0 + 10000);
	assert_int_equal(n_done(fx), 0);
	assert_int_equal(proto_next_due(fx->p), T0 + 10000);

	batch(fx, T0 + 9999);
	assert_int_equal(n_done(fx), 0);
	assert_int_equal(proto_next_due(fx->p), T0 + 10000);

	batch(fx, T0 + 10000);
	assert_int_equal(n_done(fx), 1);
	expect_redo(fx, 1, RS_DONE, 1, 0);
	batch(fx, T0 + 10000);
	batch(fx, T0 + 20000);
	assert_int_equal(n_done(fx), 1);

	/* A restart after it ran does not run it again. */
	stop(fx);
	start(fx);
	batch(fx, T0 + 10000);
	batch(fx, T0 + 70000);
	assert_int_equal(n_done(fx), 1);
}

/* The schedule is durable: a fresh proto after a restart runs a delayed
 * message that came due, exactly once, and the next restart does not. */
static void test_delayed_after_restart(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, NULL, 0, T0 + 10000};
	uint64_t seqs[4];
	int tries[4];

	start(fx);
	push_data(fx, 3, "R1", &m1, 1);
	batch(fx, T0);
	assert_int_equal(recv_result(fx, "R1", 1), RES_SCHEDULED);
	assert_int_equal(n_done(fx), 0);

	stop(fx);
	start(fx);
	assert_int_equal(proto_next_due(fx->p), INT64_MAX); /* nothing yet */
	batch(fx, T0 + 10000);
	assert_int_equal(done_seqs(fx, seqs, tries, 4), 1);
	assert_int_equal(seqs[0], 1);
	assert_int_equal(tries[0], 0);
	expect_redo(fx, 1, RS_DONE, 1, 0);
	batch(fx, T0 + 10000);
	assert_int_equal(n_done(fx), 1);

	stop(fx);
	start(fx);
	batch(fx, T0 + 10000);
	batch(fx, T0 + 20000);
	assert_int_equal(n_done(fx), 1);
}

/* ---- operator retry ----------------------------------------------------------- */

/* A dead entry made pending by store_redo_retry runs on the next tick after
 * the wake-up. */
static void test_operator_retry(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, "X", 0, 0};
	uint64_t seqs[4];
	int tries[4];
	struct redo_view v;

	start(fx);
	set_rule(fx, "X", "permanent");
	push_data(fx, 3, "R1", &m1, 1);
	batch(fx, T0);
	v = redo_of(fx, "R1", 1);
	assert_int_equal(v.status, RS_DEAD);

	/* Only a dead entry can be retried; an unknown id is refused. */
	assert_int_equal(store_redo_retry(fx->st, v.id + 1000, T0 + 1000),
			 SEMQ_ERR_NOT_FOUND);
	set_rule(fx, "X", NULL);
	assert_int_equal(store_redo_retry(fx->st, v.id, T0 + 1000), SEMQ_OK);
	expect_redo(fx, 1, RS_PENDING, 1, T0 + 1000);
	assert_int_equal(store_redo_retry(fx->st, v.id, T0 + 1000),
			 SEMQ_DECLINED);

	push_wake(fx);
	batch(fx, T0 + 1000);
	assert_int_equal(done_seqs(fx, seqs, tries, 4), 1);
	assert_int_equal(seqs[0], 1);
	assert_int_equal(tries[0], 1);
	expect_redo(fx, 1, RS_DONE, 2, 0);
	batch(fx, T0 + 60000);
	assert_int_equal(n_done(fx), 1);
}

/* ---- sender side -------------------------------------------------------------- */

static void sender(struct fx *fx, unsigned window)
{
	snprintf(fx->c.id, sizeof fx->c.id, "R1");
	fx->c.window = window;
	start(fx);
}

/* Expects the Data messages to conn to be R1->dest seqs first..last. */
static void expect_data(struct fx *fx, uint64_t conn, const char *dest,
			uint64_t first, uint64_t last)
{
	const Semq__Message *msgs[16];
	char pl[32];
	size_t n = data_to(fx, conn, msgs, 16), i;

	assert_int_equal(n, last - first + 1);
	for (i = 0; i < n; i++) {
		int k = snprintf(pl, sizeof pl, "doc %" PRIu64, first + i);
		assert_string_equal(msgs[i]->origin, "R1");
		assert_string_equal(msgs[i]->dest, dest);
		assert_int_equal(msgs[i]->seq, first + i);
		assert_int_equal(msgs[i]->type, 7);
		assert_int_equal(msgs[i]->payload.len, (size_t)k);
		assert_memory_equal(msgs[i]->payload.data, pl, (size_t)k);
		assert_string_equal(msgs[i]->stored_by, "");
	}
}

/*
 * Enqueued rows go out when a route appears: one Data to that connection,
 * in seq order, marked sent (4). An 810-Indication makes them 100 with the
 * verdict and is answered with an 810-Response.
 */
static void test_sender_sends_and_confirms(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 1, 0, 0, 0};
	const uint64_t ids[5] = {1, 2, 3, 4, 5};
	const int verdicts[5] = {RES_PROCESSED, RES_PROCESSED, RES_REDO,
				 RES_PROCESSED, RES_SCHEDULED};
	const Semq__Frame *f;
	struct out_view v;
	size_t i;

	sender(fx, 1000);
	enqueue(fx, "S1", 5);

	/* No route: nothing goes, nothing changes. */
	assert_int_equal(batch(fx, T0), 0);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_UNSEND);

	push_routes(fx, &hop, 1);
	assert_int_equal(batch(fx, T0 + 10), 1);
	assert_int_equal(count_frames(fx, 7, SEMQ__FRAME__BODY_DATA), 1);
	expect_data(fx, 7, "S1", 1, 5);
	for (i = 1; i <= 5; i++) {
		v = out_of(fx, "R1", "S1", i);
		assert_int_equal(v.status, SS_SEND);
		assert_int_equal(v.attempts, 1);
		assert_int_equal(v.sent_at, T0 + 10);
		assert_int_equal(v.next_at, T0 + 10 + fx->c.query_after_ms);
	}
	/* Sent once: the next tick sends nothing. */
	assert_int_equal(batch(fx, T0 + 20), 0);

	push_indication(fx, 7, "S1", "R1", "S1", ids, verdicts, 5);
	batch(fx, T0 + 30);
	for (i = 1; i <= 5; i++) {
		v = out_of(fx, "R1", "S1", i);
		assert_int_equal(v.status, SS_ACK2);
		assert_int_equal(v.result, verdicts[i - 1]);
	}
	assert_int_equal(fx->n_got, 1);
	assert_int_equal(count_frames(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE),
			 1);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_string_equal(f->ack_response->from, "R1");
	assert_int_equal(f->ack_response->n_ids, 5);
	for (i = 0; i < 5; i++) {
		assert_string_equal(f->ack_response->ids[i]->origin, "R1");
		assert_string_equal(f->ack_response->ids[i]->dest, "S1");
		assert_int_equal(f->ack_response->ids[i]->seq, i + 1);
	}
	/* Confirmed rows are neither resent nor queried later. */
	assert_int_equal(batch(fx, T0 + 10 + fx->c.query_after_ms), 0);
}

/* A row the wire refuses (written into tb_0031 by hand: a key that is not
 * UTF-8, a prev_seq without a key) is not sent: every peer would refuse the
 * whole frame. The rest of the stream goes. */
static void test_sender_skips_key_not_utf8(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 1, 0, 0, 0};
	const Semq__Frame *f;
	sqlite3 *db;
	unsigned numbered = 0;
	int more = 0;

	sender(fx, 1000);
	db = store_plugin_tx(fx->st)->db;
	enqueue(fx, "S1", 2);
	assert_int_equal(
		sqlite3_exec(
			db,
			"INSERT INTO tb_0031(dest, type, msg_key, payload)"
			" VALUES ('S1', 1, CAST(x'4bff31' AS TEXT), x'00')",
			NULL, NULL, NULL),
		SQLITE_OK);
	assert_int_equal(
		sqlite3_exec(db,
			     "INSERT INTO tb_0031(dest, type, msg_key, payload)"
			     " VALUES ('S1', 1, 'K2', x'00');"
			     "INSERT INTO tb_0031(dest, type, payload)"
			     " VALUES ('S1', 1, x'00')",
			     NULL, NULL, NULL),
		SQLITE_OK);
	/* numbered as the node's next batch would (migration 0007), then
	 * seq 5 made to wait for the unsendable 3 */
	assert_int_equal(store_number_new(fx->st, T0, 100, 0, &numbered, &more),
			 SEMQ_OK);
	assert_int_equal(numbered, 3);
	assert_int_equal(sqlite3_exec(db,
				      "UPDATE tb_0031 SET prev_seq = 1"
				      " WHERE seq = 5;"
				      "INSERT INTO tb_0031(dest, type, payload)"
				      " VALUES ('S1', 1, x'00')",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	push_routes(fx, &hop, 1);
	assert_int_equal(batch(fx, T0 + 10), 1);
	assert_int_equal(count_frames(fx, 7, SEMQ__FRAME__BODY_DATA), 1);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_DATA, 0);
	assert_int_equal(f->data->n_messages, 4);
	assert_int_equal(f->data->messages[0]->seq, 1);
	assert_int_equal(f->data->messages[1]->seq, 2);
	assert_int_equal(f->data->messages[2]->seq, 4);
	assert_int_equal(f->data->messages[3]->seq, 6);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_UNSEND);
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_SEND);
	assert_int_equal(out_of(fx, "R1", "S1", 5).status, SS_UNSEND);
	/* ... and stay unsent on later ticks. */
	batch(fx, T0 + 20);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_UNSEND);
	assert_int_equal(out_of(fx, "R1", "S1", 5).status, SS_UNSEND);
}

/* window = 2: two unconfirmed per stream; a confirmation lets two more go. */
static void test_sender_window(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 1, 0, 0, 0};
	const uint64_t ids[2] = {1, 2};
	const int verdicts[2] = {RES_PROCESSED, RES_PROCESSED};

	sender(fx, 2);
	enqueue(fx, "S1", 5);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	expect_data(fx, 7, "S1", 1, 2);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_SEND);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_UNSEND);
	assert_int_equal(batch(fx, T0 + 1), 0); /* the window is full */

	push_indication(fx, 7, "S1", "R1", "S1", ids, verdicts, 2);
	batch(fx, T0 + 2);
	assert_int_equal(count_frames(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE),
			 1);
	expect_data(fx, 7, "S1", 3, 4);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_ACK2);
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_SEND);
	assert_int_equal(out_of(fx, "R1", "S1", 5).status, SS_UNSEND);
}

/*
 * Through a relay: RelayAck FORWARDED -> 6; UNREACHABLE -> back to 0, sent
 * again only after reconnect_min (the first backoff step), not at once.
 */
static void test_sender_relay_acks(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"P1", 5, 1, "", 1, 0, 0, 0};
	const uint64_t one = 1, two = 2;
	struct out_view v;

	snprintf(fx->routes[0].dest, sizeof fx->routes[0].dest, "default");
	snprintf(fx->routes[0].via, sizeof fx->routes[0].via, "P1");
	fx->c.n_routes = 1;
	sender(fx, 1000);
	enqueue(fx, "S9", 2);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	expect_data(fx, 5, "S9", 1, 2);

	push_relay_ack(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__FORWARDED, "R1",
		       "S9", &one, 1, "");
	push_relay_ack(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__UNREACHABLE, "R1",
		       "S9", &two, 1, "destination not connected");
	assert_int_equal(batch(fx, T0 + 100), 0);
	assert_int_equal(out_of(fx, "R1", "S9", 1).status, SS_ACK);
	v = out_of(fx, "R1", "S9", 2);
	assert_int_equal(v.status, SS_UNSEND);
	assert_int_equal(v.next_at, T0 + 100 + fx->c.reconnect_min_ms);
	assert_non_null(strstr(v.last_error, "unreachable"));

	assert_int_equal(batch(fx, T0 + 100 + fx->c.reconnect_min_ms - 1), 0);
	batch(fx, T0 + 100 + fx->c.reconnect_min_ms);
	expect_data(fx, 5, "S9", 2, 2);
	v = out_of(fx, "R1", "S9", 2);
	assert_int_equal(v.status, SS_SEND);
	assert_int_equal(v.attempts, 2);
}

/*
 * In doubt: rows in 4 past query_after are queried (never resent blindly),
 * then deferred so the next tick does not query them again. The reply
 * settles them: received -> 100 + 810-Response; not received -> resent.
 */
static void test_sender_query(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 1, 0, 0, 0};
	const uint64_t ids[3] = {1, 2, 3};
	const int received[3] = {1, 0, 1};
	const int results[3] = {RES_PROCESSED, 0, RES_REDO};
	const int64_t qa = fx->c.query_after_ms;
	const Semq__Frame *f;
	size_t i;

	sender(fx, 1000);
	enqueue(fx, "S1", 3);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	expect_data(fx, 7, "S1", 1, 3);

	assert_int_equal(batch(fx, T0 + qa - 1), 0);
	assert_int_equal(batch(fx, T0 + qa), 1);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_QUERY, 0);
	assert_int_equal(f->query->n_ids, 3);
	for (i = 0; i < 3; i++) {
		assert_string_equal(f->query->ids[i]->origin, "R1");
		assert_int_equal(f->query->ids[i]->seq, i + 1);
		assert_int_equal(out_of(fx, "R1", "S1", i + 1).status, SS_SEND);
		assert_int_equal(out_of(fx, "R1", "S1", i + 1).next_at,
				 T0 + 2 * qa);
	}
	/* Deferred: not queried again on the next ticks. */
	assert_int_equal(batch(fx, T0 + qa + 1), 0);
	assert_int_equal(batch(fx, T0 + 2 * qa - 1), 0);

	push_query_reply(fx, 7, "S1", "R1", "S1", ids, received, results, 3);
	batch(fx, T0 + qa + 2);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_ACK2);
	assert_int_equal(out_of(fx, "R1", "S1", 1).result, RES_PROCESSED);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_ACK2);
	assert_int_equal(out_of(fx, "R1", "S1", 3).result, RES_REDO);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_int_equal(f->ack_response->n_ids, 2);
	assert_int_equal(f->ack_response->ids[0]->seq, 1);
	assert_int_equal(f->ack_response->ids[1]->seq, 3);
	/* Not received: sent again, in this very batch. */
	expect_data(fx, 7, "S1", 2, 2);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_SEND);
	assert_int_equal(out_of(fx, "R1", "S1", 2).attempts, 2);
}

/* ---- relay -------------------------------------------------------------------- */

static void relay(struct fx *fx)
{
	snprintf(fx->c.id, sizeof fx->c.id, "P1");
	fx->c.relay = 1;
	fx->c.store_and_forward = 1;
	start(fx);
}

/* Data for an offline destination: a copy stored, RelayAck STORED; a resend
 * refreshes nothing; when the destination connects the copy goes to it. */
static void test_relay_stores(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, "a", 0, 0};
	const struct route_hop hops[2] = {{"R1", 3, 0, "", 1, 0, 0, 0},
					  {"S1", 9, 0, "", 1, 0, 0, 0}};
	const Semq__Message *msgs[4];
	const Semq__Frame *f;
	struct out_view v;

	relay(fx);
	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0), 1);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK, 0);
	assert_int_equal(f->relay_ack->kind, SEMQ__RELAY_ACK__KIND__STORED);
	assert_int_equal(f->relay_ack->n_ids, 1);
	assert_string_equal(f->relay_ack->ids[0]->origin, "R1");
	assert_string_equal(f->relay_ack->ids[0]->dest, "S1");
	assert_int_equal(f->relay_ack->ids[0]->seq, 1);
	v = out_of(fx, "R1", "S1", 1);
	assert_true(v.found);
	assert_int_equal(v.status, SS_UNSEND);
	/* A relay applies nothing and records no receipt. */
	assert_int_equal(n_done(fx), 0);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0030"), 0);

	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0 + 1), 1);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK, 0);
	assert_int_equal(f->relay_ack->kind, SEMQ__RELAY_ACK__KIND__STORED);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031"), 1);

	push_routes(fx, hops, 2);
	batch(fx, T0 + 1000);
	assert_int_equal(data_to(fx, 9, msgs, 4), 1);
	assert_string_equal(msgs[0]->origin, "R1");
	assert_string_equal(msgs[0]->dest, "S1");
	assert_int_equal(msgs[0]->seq, 1);
	assert_string_equal(msgs[0]->key, "a");
	assert_string_equal(msgs[0]->stored_by, "P1");
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_DATA), 0);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_SEND);
}

/* With the destination connected: forwarded to its connection, RelayAck
 * FORWARDED to the sender, no copy kept, nothing sent back to the sender. */
static void test_relay_forwards(void **state)
{
	struct fx *fx = *state;
	const struct mspec ms[2] = {{"R1", "S1", 1, "a", 0, 0},
				    {"R1", "S1", 2, "a", 1, 0}};
	const struct route_hop hops[2] = {{"R1", 3, 0, "", 1, 0, 0, 0},
					  {"S1", 9, 0, "", 1, 0, 0, 0}};
	const Semq__Message *msgs[4];
	const Semq__Frame *f;
	size_t i;

	relay(fx);
	push_routes(fx, hops, 2);
	push_data(fx, 3, "R1", ms, 2);
	assert_int_equal(batch(fx, T0), 2);
	assert_int_equal(data_to(fx, 9, msgs, 4), 2);
	for (i = 0; i < 2; i++) {
		assert_string_equal(msgs[i]->origin, "R1");
		assert_int_equal(msgs[i]->seq, i + 1);
		assert_string_equal(msgs[i]->stored_by, "");
	}
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK), 1);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_DATA), 0);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK, 0);
	assert_int_equal(f->relay_ack->kind, SEMQ__RELAY_ACK__KIND__FORWARDED);
	assert_int_equal(f->relay_ack->n_ids, 2);
	assert_int_equal(f->relay_ack->ids[0]->seq, 1);
	assert_int_equal(f->relay_ack->ids[1]->seq, 2);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031"), 0);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0030"), 0);
}

/* [relay] relay_ack = no, forward-only: a forwarded message gets no
 * RelayAck (the destination's 810-Indication answers it), a refusal still
 * does, and nothing is kept. */
static void test_relay_no_ack(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, "a", 0, 0};
	const struct mspec m2 = {"R1", "S1", 2, "a", 1, 0};
	const struct route_hop hops[2] = {{"R1", 3, 0, "", 1, 0, 0, 0},
					  {"S1", 9, 0, "", 1, 0, 0, 0}};
	const Semq__Message *msgs[4];
	const Semq__Frame *f;

	snprintf(fx->c.id, sizeof fx->c.id, "P1");
	fx->c.relay = 1;
	fx->c.relay_ack = 0;
	start(fx);
	push_routes(fx, hops, 2);
	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0), 1);
	assert_int_equal(data_to(fx, 9, msgs, 4), 1);
	assert_int_equal(msgs[0]->seq, 1);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK), 0);

	push_routes(fx, hops, 1); /* S1 gone */
	push_data(fx, 3, "R1", &m2, 1);
	batch(fx, T0 + 1);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK, 0);
	assert_int_equal(f->relay_ack->kind,
			 SEMQ__RELAY_ACK__KIND__UNREACHABLE);
	assert_int_equal(f->relay_ack->reason,
			 SEMQ__RELAY_REFUSAL__NOT_CONNECTED);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031"), 0);
}

/*
 * The only route to the destination leads back through the sender ([route]
 * default = the sending peer): the relay must not send the message back on
 * that connection — neither while handling the Data nor from the tick of
 * the same batch, which would bounce the stored copy to where it came from.
 */
static void test_relay_never_back_to_sender(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, NULL, 0, 0};
	const struct route_hop hop = {"R1", 3, 0, "", 1, 0, 0, 0};
	const Semq__Frame *f;

	snprintf(fx->routes[0].dest, sizeof fx->routes[0].dest, "default");
	snprintf(fx->routes[0].via, sizeof fx->routes[0].via, "R1");
	fx->c.n_routes = 1;
	relay(fx);
	push_routes(fx, &hop, 1);
	push_data(fx, 3, "R1", &m1, 1);
	batch(fx, T0);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK, 0);
	assert_int_equal(f->relay_ack->kind, SEMQ__RELAY_ACK__KIND__STORED);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
}

/* ---- several instances of one destination (SPEC §11) ------------------------ */

#define N_ORIGINS 12

static const char *const origins[N_ORIGINS] = {"R1", "R2",  "R3",  "R4",
					       "R5", "R6",  "R7",  "R8",
					       "R9", "R10", "R11", "R12"};

/* The conn routes_pick() gives the stream origin->S1 over hops. */
static uint64_t pick_s1(const struct route_hop *hops, size_t n,
			const char *origin)
{
	struct routes r = {(struct route_hop *)hops, n, NULL};
	const struct route_hop *h = routes_pick(&r, "S1", origin, "S1");

	assert_non_null(h);
	return h->conn_id;
}

/* Which of the n hops has conn (its index), or fails. */
static size_t hop_index(const struct route_hop *hops, size_t n, uint64_t conn)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (hops[i].conn_id == conn)
			return i;
	fail_msg("conn %" PRIu64 " is no hop", conn);
	return 0;
}

static void push_query(struct fx *fx, uint64_t conn, const char *peer,
		       const char *origin, const char *dest,
		       const uint64_t *seqs, size_t n)
{
	Semq__MsgId id[MAX_JOB_MSGS], *pid[MAX_JOB_MSGS];
	Semq__Query q = SEMQ__QUERY__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	fill_ids(id, pid, origin, dest, seqs, n);
	q.n_ids = n;
	q.ids = pid;
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	push_frame(fx, conn, peer, &f);
}

/* An 810-Response from `from` for seqs of origin->dest. */
static void push_response(struct fx *fx, uint64_t conn, const char *peer,
			  const char *from, const char *origin,
			  const char *dest, const uint64_t *seqs, size_t n)
{
	Semq__MsgId id[MAX_JOB_MSGS], *pid[MAX_JOB_MSGS];
	Semq__AckResponse ar = SEMQ__ACK_RESPONSE__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	fill_ids(id, pid, origin, dest, seqs, n);
	ar.n_ids = n;
	ar.ids = pid;
	ar.from = (char *)from;
	f.body_case = SEMQ__FRAME__BODY_ACK_RESPONSE;
	f.ack_response = &ar;
	push_frame(fx, conn, peer, &f);
}

static void push_peer_up(struct fx *fx, uint64_t conn, const char *peer)
{
	struct job *j = job_new(JOB_PEER_UP);

	assert_non_null(j);
	j->conn_id = conn;
	snprintf(j->peer, sizeof j->peer, "%s", peer);
	push(fx, j);
}

/* The ids of all Query frames to conn: origins[] index of each (seq 1). */
static size_t queried_to(const struct fx *fx, uint64_t conn, const char **orig,
			 size_t cap)
{
	size_t i, k, n = 0;

	for (i = 0; i < fx->n_got; i++) {
		const Semq__Frame *f = fx->got[i].f;
		if (fx->got[i].conn != conn ||
		    f->body_case != SEMQ__FRAME__BODY_QUERY)
			continue;
		for (k = 0; k < f->query->n_ids; k++) {
			assert_true(n < cap);
			assert_string_equal(f->query->ids[k]->dest, "S1");
			orig[n++] = f->query->ids[k]->origin;
		}
	}
	return n;
}

/*
 * routes_pick(): one stream always gets the same instance, whatever the
 * order of the hops; the streams of many origins spread over every
 * instance; the pick is the highest routes_score(); an instance leaving
 * moves only its own streams; a second connection of the same (peer,
 * instance) changes nothing (the first listed, the newest, is used); a peer
 * with one hop is reached on it for every stream.
 */
static void test_instances_pick(void **state)
{
	const struct route_hop three[4] = {{"P1", 5, 1, "", 1, 0, 0, 0},
					   {"S1", 10, 0, "a", 1, 0, 0, 0},
					   {"S1", 11, 0, "b", 1, 0, 0, 0},
					   {"S1", 12, 0, "c", 1, 0, 0, 0}};
	const struct route_hop rev[4] = {{"S1", 12, 0, "c", 1, 0, 0, 0},
					 {"S1", 11, 0, "b", 1, 0, 0, 0},
					 {"P1", 5, 1, "", 1, 0, 0, 0},
					 {"S1", 10, 0, "a", 1, 0, 0, 0}};
	const struct route_hop no_b[3] = {{"P1", 5, 1, "", 1, 0, 0, 0},
					  {"S1", 10, 0, "a", 1, 0, 0, 0},
					  {"S1", 12, 0, "c", 1, 0, 0, 0}};
	const struct route_hop twice_b[5] = {{"S1", 21, 0, "b", 1, 0, 0, 0},
					     {"P1", 5, 1, "", 1, 0, 0, 0},
					     {"S1", 10, 0, "a", 1, 0, 0, 0},
					     {"S1", 11, 0, "b", 1, 0, 0, 0},
					     {"S1", 12, 0, "c", 1, 0, 0, 0}};
	const struct route_hop two[2] = {{"S1", 10, 0, "a", 1, 0, 0, 0},
					 {"S1", 11, 0, "b", 1, 0, 0, 0}};
	struct routes r3 = {(struct route_hop *)three, 4, NULL};
	size_t per3[3] = {0}, per2[2] = {0}, i, k;
	char o[16];

	(void)state;
	/* 200 origins: every instance gets a share, none nearly all. */
	for (i = 0; i < 200; i++) {
		uint64_t c3, c2, best = 0;
		const struct route_hop *h;

		snprintf(o, sizeof o, "R%zu", i);
		c3 = pick_s1(three, 4, o);
		assert_int_equal(pick_s1(three, 4, o), c3); /* stable */
		assert_int_equal(pick_s1(rev, 4, o), c3);   /* any order */
		per3[hop_index(three, 4, c3) - 1]++;
		for (k = 1; k < 4; k++)
			if (routes_score(o, "S1", three[k].instance) > best)
				best = routes_score(o, "S1", three[k].instance);
		assert_int_equal(
			routes_score(o, "S1",
				     three[hop_index(three, 4, c3)].instance),
			best);
		/* b leaves: a's and c's streams stay, b's move to a or c. */
		if (c3 != 11)
			assert_int_equal(pick_s1(no_b, 3, o), c3);
		else
			assert_true(pick_s1(no_b, 3, o) == 10 ||
				    pick_s1(no_b, 3, o) == 12);
		/* b twice (a reconnect): the first listed, and the same
		 * streams as with one connection of b. */
		h = routes_pick(
			&(struct routes){(struct route_hop *)twice_b, 5, NULL},
			"S1", o, "S1");
		assert_int_equal(h->conn_id, c3 == 11 ? 21 : c3);
		c2 = pick_s1(two, 2, o);
		per2[hop_index(two, 2, c2)]++;
	}
	for (k = 0; k < 3; k++)
		assert_true(per3[k] >= 40 && per3[k] <= 100);
	for (k = 0; k < 2; k++)
		assert_true(per2[k] >= 70 && per2[k] <= 130);
	/* The stream is (origin, dest): the same origin to another dest is
	 * another stream, and the hash sees where the names are cut. */
	assert_true(routes_score("R1", "S1", "a") !=
		    routes_score("R1", "S2", "a"));
	assert_true(routes_score("R1", "S1", "a") !=
		    routes_score("R1S", "1", "a"));
	/* One hop of a peer: every stream; no hop: NULL. */
	assert_int_equal(routes_pick(&r3, "P1", "R7", "S9")->conn_id, 5);
	assert_null(routes_pick(&r3, "S2", "R1", "S2"));
	assert_null(routes_pick(NULL, "S1", "R1", "S1"));
}

static void relay_instances(struct fx *fx, int store_and_forward)
{
	relay(fx);
	fx->c.store_and_forward = store_and_forward;
}

/*
 * A relay with two, then three instances of S1 connected: Data of twelve
 * origins (one stream each) is forwarded to the instance routes_pick()
 * names, and the streams use every instance. Queries and 810-Responses of a
 * stream follow its Data; indications and query replies from an instance go
 * back to the origin's one connection, as before.
 */
static void test_instances_relay_spreads(void **state)
{
	struct fx *fx = *state;
	struct route_hop hops[N_ORIGINS + 3];
	size_t n_inst, i, k, used[3];
	const uint64_t one = 1;
	const int processed = RES_PROCESSED, yes = 1;

	relay_instances(fx, 0);
	for (n_inst = 2; n_inst <= 3; n_inst++) {
		size_t nh = 0;

		memset(hops, 0, sizeof hops);
		for (i = 0; i < N_ORIGINS; i++) {
			snprintf(hops[nh].peer, sizeof hops[nh].peer, "%s",
				 origins[i]);
			hops[nh++].conn_id = 100 + i;
		}
		for (k = 0; k < n_inst; k++) {
			snprintf(hops[nh].peer, sizeof hops[nh].peer, "S1");
			snprintf(hops[nh].instance, sizeof hops[nh].instance,
				 "s1-%c", (char)('a' + k));
			hops[nh++].conn_id = 10 + k;
		}
		push_routes(fx, hops, nh);
		memset(used, 0, sizeof used);
		for (i = 0; i < N_ORIGINS; i++) {
			const struct mspec m = {origins[i], "S1", n_inst - 1,
						NULL,       0,    0};
			uint64_t want = pick_s1(hops, nh, origins[i]);
			const Semq__Message *msgs[4];
			const Semq__Frame *f;

			used[want - 10]++;
			push_data(fx, 100 + i, origins[i], &m, 1);
			batch(fx, T0 + (int64_t)(n_inst * 100 + i));
			/* only the chosen instance got it */
			for (k = 0; k < n_inst; k++)
				assert_int_equal(
					count_frames(fx, 10 + k,
						     SEMQ__FRAME__BODY_DATA),
					10 + k == want);
			assert_int_equal(data_to(fx, want, msgs, 4), 1);
			assert_string_equal(msgs[0]->origin, origins[i]);
			f = frame_at(fx, 100 + i, SEMQ__FRAME__BODY_RELAY_ACK,
				     0);
			assert_int_equal(f->relay_ack->kind,
					 SEMQ__RELAY_ACK__KIND__FORWARDED);

			/* The origin's query and 810-Response: same conn. */
			push_query(fx, 100 + i, origins[i], origins[i], "S1",
				   &one, 1);
			push_response(fx, 100 + i, origins[i], origins[i],
				      origins[i], "S1", &one, 1);
			batch(fx, T0 + (int64_t)(n_inst * 100 + i) + 1);
			assert_int_equal(fx->n_got, 2);
			assert_int_equal(
				count_frames(fx, want, SEMQ__FRAME__BODY_QUERY),
				1);
			assert_int_equal(
				count_frames(fx, want,
					     SEMQ__FRAME__BODY_ACK_RESPONSE),
				1);

			/* The instance's indication and reply: to the origin
			 * (one instance: its one connection). */
			push_indication(fx, want, "S1", origins[i], "S1", &one,
					&processed, 1);
			push_query_reply(fx, want, "S1", origins[i], "S1", &one,
					 &yes, &processed, 1);
			batch(fx, T0 + (int64_t)(n_inst * 100 + i) + 2);
			assert_int_equal(
				count_frames(fx, 100 + i,
					     SEMQ__FRAME__BODY_ACK_INDICATION),
				1);
			assert_int_equal(
				count_frames(fx, 100 + i,
					     SEMQ__FRAME__BODY_QUERY_REPLY),
				1);
		}
		for (k = 0; k < n_inst; k++)
			if (!used[k])
				fail_msg("%zu instances: s1-%c got none of %d "
					 "streams",
					 n_inst, (char)('a' + k), N_ORIGINS);
	}
	/* A relay that forwards keeps nothing. */
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031"), 0);
}

/*
 * An origin connected straight to two instances of S1 fetches its stream
 * once (not once per hop) and sends Data, queries and tombstones of the
 * stream on the same instance's connection.
 */
static void test_instances_sender_one_stream(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hops[2] = {{"S1", 10, 0, "b", 1, 0, 0, 0},
					  {"S1", 11, 0, "a", 1, 0, 0, 0}};
	const int64_t qa = fx->c.query_after_ms;
	struct msgid id;
	uint64_t want;
	const Semq__Frame *f;

	sender(fx, 1000);
	want = pick_s1(hops, 2, "R1");
	enqueue(fx, "S1", 5);
	push_routes(fx, hops, 2);
	assert_int_equal(batch(fx, T0), 1);
	expect_data(fx, want, "S1", 1, 5);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 1);
	assert_int_equal(out_of(fx, "R1", "S1", 5).attempts, 1);

	/* Queried on the same instance. */
	assert_int_equal(batch(fx, T0 + qa), 1);
	f = frame_at(fx, want, SEMQ__FRAME__BODY_QUERY, 0);
	assert_int_equal(f->query->n_ids, 5);

	/* A cancelled message's tombstone too. */
	memset(&id, 0, sizeof id);
	snprintf(id.origin, sizeof id.origin, "R1");
	snprintf(id.dest, sizeof id.dest, "S1");
	id.seq = 5;
	id.life = store_life(fx->st);
	assert_int_equal(store_begin(fx->st), SEMQ_OK);
	assert_int_equal(store_cancel(fx->st, &id, T0 + qa + 1), SEMQ_OK);
	assert_int_equal(store_commit(fx->st), SEMQ_OK);
	push_wake(fx);
	assert_int_equal(batch(fx, T0 + qa + 1), 1);
	f = frame_at(fx, want, SEMQ__FRAME__BODY_DATA, 0);
	assert_int_equal(f->data->n_messages, 1);
	assert_int_equal(f->data->messages[0]->seq, 5);
	assert_true(f->data->messages[0]->tombstone);
}

/*
 * A store-and-forward relay holds copies of twelve streams for S1 while it
 * is away; S1 connects with three instances and each copy goes to its
 * stream's instance. Then one instance leaves: the copies it had (in doubt)
 * are queried at once on their stream's new instance — the others are left
 * alone — and new Data of those streams goes there. When it comes back
 * (PEER_UP), the streams it wins return to it and their rows are queried
 * on its new connection.
 */
static void test_instances_one_leaves(void **state)
{
	struct fx *fx = *state;
	const struct route_hop three[3] = {{"S1", 10, 0, "a", 1, 0, 0, 0},
					   {"S1", 11, 0, "b", 1, 0, 0, 0},
					   {"S1", 12, 0, "c", 1, 0, 0, 0}};
	const struct route_hop two[2] = {{"S1", 10, 0, "a", 1, 0, 0, 0},
					 {"S1", 12, 0, "c", 1, 0, 0, 0}};
	const struct route_hop back[3] = {{"S1", 21, 0, "b", 1, 0, 0, 0},
					  {"S1", 10, 0, "a", 1, 0, 0, 0},
					  {"S1", 12, 0, "c", 1, 0, 0, 0}};
	const int64_t qa = fx->c.query_after_ms;
	const char *q[N_ORIGINS * 2];
	size_t i, k, n, on_b = 0, asked = 0;

	relay_instances(fx, 1);
	for (i = 0; i < N_ORIGINS; i++) {
		const struct mspec m = {origins[i], "S1", 1, NULL, 0, 0};
		push_data(fx, 100 + i, origins[i], &m, 1);
	}
	batch(fx, T0);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031"),
			 N_ORIGINS);

	push_routes(fx, three, 3);
	batch(fx, T0 + 1000);
	for (i = 0; i < N_ORIGINS; i++) {
		uint64_t want = pick_s1(three, 3, origins[i]);
		const Semq__Message *msgs[N_ORIGINS];
		int found = 0;

		n = data_to(fx, want, msgs, N_ORIGINS);
		for (k = 0; k < n; k++)
			found += !strcmp(msgs[k]->origin, origins[i]);
		assert_int_equal(found, 1);
		assert_int_equal(out_of(fx, origins[i], "S1", 1).status,
				 SS_SEND);
		on_b += want == 11;
	}
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA) <= 3, 1);
	assert_true(on_b > 0 && on_b < N_ORIGINS);

	/* b leaves. */
	push_routes(fx, two, 2);
	batch(fx, T0 + 2000);
	for (k = 0; k < 2; k++) {
		n = queried_to(fx, two[k].conn_id, q, N_ORIGINS * 2);
		for (i = 0; i < n; i++) {
			/* only b's streams, each on its new instance */
			assert_int_equal(pick_s1(three, 3, q[i]), 11);
			assert_int_equal(pick_s1(two, 2, q[i]), two[k].conn_id);
		}
		asked += n;
	}
	assert_int_equal(asked, on_b);
	assert_int_equal(count_frames(fx, 11, SEMQ__FRAME__BODY_QUERY), 0);
	for (i = 0; i < N_ORIGINS; i++)
		assert_int_equal(out_of(fx, origins[i], "S1", 1).next_at,
				 pick_s1(three, 3, origins[i]) == 11
					 ? T0 + 2000 + qa
					 : T0 + 1000 + qa);
	/* A new message of a moved stream goes to its new instance. */
	for (i = 0; i < N_ORIGINS; i++) {
		const struct mspec m = {origins[i], "S1", 2, NULL, 0, 0};

		if (pick_s1(three, 3, origins[i]) != 11)
			continue;
		push_data(fx, 100 + i, origins[i], &m, 1);
		batch(fx, T0 + 3000 + (int64_t)i);
		assert_int_equal(count_frames(fx, pick_s1(two, 2, origins[i]),
					      SEMQ__FRAME__BODY_DATA),
				 1);
		assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA),
				 1);
	}

	/* b comes back on a new connection: PEER_UP queries the in-doubt
	 * rows of the streams it wins, on that connection only. */
	push_routes(fx, back, 3);
	push_peer_up(fx, 21, "S1");
	batch(fx, T0 + 5000);
	n = queried_to(fx, 21, q, N_ORIGINS * 2);
	for (i = 0; i < n; i++)
		assert_int_equal(pick_s1(back, 3, q[i]), 21);
	for (k = 0, i = 0; i < N_ORIGINS; i++)
		k += pick_s1(back, 3, origins[i]) == 21;
	/* seq 1 of each of them (seq 2 was forwarded, no copy) */
	assert_int_equal(n, k);
	assert_int_equal(k, on_b);
	assert_int_equal(count_frames(fx, 10, SEMQ__FRAME__BODY_QUERY) +
				 count_frames(fx, 12, SEMQ__FRAME__BODY_QUERY),
			 0);
}

/* ---- lives, digests, refusals (docs/PROTOCOL.md, "Lives of a node") ----- */

#define LIFE_R1 UINT64_C(0x5151515151) /* R1's life, seen from elsewhere */

/* A message of wire revision 2: its life and digests given. */
struct mspec2 {
	const char *origin, *dest;
	uint64_t seq;
	const char *key; /* NULL = none */
	uint64_t prev;
	uint64_t life, digest, prev_digest;
	const char *body; /* NULL: "doc ORIGIN/DEST/SEQ" */
};

static void push_msgs(struct fx *fx, uint64_t conn, const char *peer,
		      const struct mspec2 *ms, size_t n)
{
	Semq__Message w[MAX_JOB_MSGS], *pw[MAX_JOB_MSGS];
	char pl[MAX_JOB_MSGS][64];
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;
	size_t i;

	assert_true(n > 0 && n <= MAX_JOB_MSGS);
	for (i = 0; i < n; i++) {
		int k = ms[i].body
				? snprintf(pl[i], sizeof pl[i], "%s",
					   ms[i].body)
				: snprintf(pl[i], sizeof pl[i],
					   "doc %s/%s/%" PRIu64, ms[i].origin,
					   ms[i].dest, ms[i].seq);
		semq__message__init(&w[i]);
		w[i].origin = (char *)ms[i].origin;
		w[i].dest = (char *)ms[i].dest;
		w[i].seq = ms[i].seq;
		w[i].type = 7;
		w[i].key = (char *)(ms[i].key ? ms[i].key : "");
		w[i].prev_seq = ms[i].prev;
		w[i].created_at = T0;
		w[i].payload.data = (uint8_t *)pl[i];
		w[i].payload.len = (size_t)k;
		w[i].life = ms[i].life;
		w[i].digest = ms[i].digest;
		w[i].prev_digest = ms[i].prev_digest;
		pw[i] = &w[i];
	}
	d.n_messages = n;
	d.messages = pw;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	push_frame(fx, conn, peer, &f);
}

/* One verdict of revision 2 in an AckIndication. */
struct vspec {
	const char *origin, *dest;
	uint64_t seq, life, digest;
	int result, refusal, dead;
	uint64_t high;
};

/* The digest of R1's filler under dest/seq of life. */
static uint64_t filler_of(const char *dest, uint64_t life, uint64_t seq)
{
	struct msgid id;

	memset(&id, 0, sizeof id);
	snprintf(id.origin, sizeof id.origin, "R1");
	snprintf(id.dest, sizeof id.dest, "%s", dest);
	id.life = life;
	id.seq = seq;
	return semq_filler_digest(&id);
}

/* R1's message dest/seq (life, digest) refused: the refuser holds another
 * message under that seq and has seen the stream up to `high`. */
static void conflict_of(struct vspec *vs, const char *dest, uint64_t seq,
			uint64_t life, uint64_t digest, uint64_t high)
{
	memset(vs, 0, sizeof *vs);
	vs->origin = "R1";
	vs->dest = dest;
	vs->seq = seq;
	vs->life = life;
	vs->digest = digest;
	vs->result = SEMQ__RESULT__RESULT_DUPLICATE;
	vs->refusal = SEMQ__REFUSAL__REFUSAL_CONFLICT;
	vs->high = high;
}

static void push_verdict(struct fx *fx, uint64_t conn, const char *peer,
			 const struct vspec *vs)
{
	Semq__MsgId id = SEMQ__MSG_ID__INIT;
	Semq__Verdict v = SEMQ__VERDICT__INIT, *pv = &v;
	Semq__AckIndication ind = SEMQ__ACK_INDICATION__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	id.origin = (char *)vs->origin;
	id.dest = (char *)vs->dest;
	id.seq = vs->seq;
	id.life = vs->life;
	id.digest = vs->digest;
	v.id = &id;
	v.result = vs->result;
	v.refusal = vs->refusal;
	v.dead = vs->dead;
	v.high = vs->high;
	ind.n_verdicts = 1;
	ind.verdicts = &pv;
	f.body_case = SEMQ__FRAME__BODY_ACK_INDICATION;
	f.ack_indication = &ind;
	push_frame(fx, conn, peer, &f);
}

/* The same as the one answer of a QueryReply. */
static void push_answer(struct fx *fx, uint64_t conn, const char *peer,
			const struct vspec *vs, int received)
{
	Semq__MsgId id = SEMQ__MSG_ID__INIT;
	Semq__QueryAnswer a = SEMQ__QUERY_ANSWER__INIT, *pa = &a;
	Semq__QueryReply qr = SEMQ__QUERY_REPLY__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	id.origin = (char *)vs->origin;
	id.dest = (char *)vs->dest;
	id.seq = vs->seq;
	id.life = vs->life;
	id.digest = vs->digest;
	a.id = &id;
	a.received = received;
	a.result = vs->result;
	a.refusal = vs->refusal;
	a.dead = vs->dead;
	a.high = vs->high;
	qr.n_answers = 1;
	qr.answers = &pa;
	f.body_case = SEMQ__FRAME__BODY_QUERY_REPLY;
	f.query_reply = &qr;
	push_frame(fx, conn, peer, &f);
}

/* An 810-Response from `from` for one id with its life and digest. */
static void push_response2(struct fx *fx, uint64_t conn, const char *peer,
			   const char *from, const char *origin,
			   const char *dest, uint64_t seq, uint64_t life,
			   uint64_t digest)
{
	Semq__MsgId id = SEMQ__MSG_ID__INIT, *pid = &id;
	Semq__AckResponse ar = SEMQ__ACK_RESPONSE__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	id.origin = (char *)origin;
	id.dest = (char *)dest;
	id.seq = seq;
	id.life = life;
	id.digest = digest;
	ar.n_ids = 1;
	ar.ids = &pid;
	ar.from = (char *)from;
	f.body_case = SEMQ__FRAME__BODY_ACK_RESPONSE;
	f.ack_response = &ar;
	push_frame(fx, conn, peer, &f);
}

static void push_stream_state(struct fx *fx, uint64_t conn, const char *peer,
			      const char *origin, uint64_t life,
			      const char *reporter, const char *dest,
			      uint64_t high)
{
	Semq__StreamHigh h = SEMQ__STREAM_HIGH__INIT, *ph = &h;
	Semq__StreamState ss = SEMQ__STREAM_STATE__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	h.dest = (char *)dest;
	h.high = high;
	ss.origin = (char *)origin;
	ss.life = life;
	ss.reporter = (char *)reporter;
	ss.n_streams = 1;
	ss.streams = &ph;
	f.body_case = SEMQ__FRAME__BODY_STREAM_STATE;
	f.stream_state = &ss;
	push_frame(fx, conn, peer, &f);
}

static void push_stream_query(struct fx *fx, uint64_t conn, const char *peer,
			      const char *origin, uint64_t life,
			      const char *dest)
{
	Semq__StreamQuery q = SEMQ__STREAM_QUERY__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;
	char *d = (char *)dest;

	q.origin = (char *)origin;
	q.life = life;
	q.n_dests = dest ? 1 : 0;
	q.dests = dest ? &d : NULL;
	f.body_case = SEMQ__FRAME__BODY_STREAM_QUERY;
	f.stream_query = &q;
	push_frame(fx, conn, peer, &f);
}

/* Enqueues one message of this node with key (NULL: none) and payload
 * "doc TAG"; returns its seq. */
static uint64_t enqueue_key(struct fx *fx, const char *dest, const char *key,
			    const char *tag)
{
	char err[SEMQ_ERRLEN] = "", pl[32];
	struct msg m;
	uint64_t seq = 0;

	memset(&m, 0, sizeof m);
	snprintf(m.id.dest, sizeof m.id.dest, "%s", dest);
	m.type = 7;
	if (key) {
		m.has_key = 1;
		snprintf(m.key, sizeof m.key, "%s", key);
	}
	m.payload_len = (size_t)snprintf(pl, sizeof pl, "doc %s", tag);
	m.payload = (uint8_t *)pl;
	m.created_at = T0;
	if (store_enqueue(fx->st, &m, &seq, err, sizeof err) != SEMQ_OK)
		fail_msg("store_enqueue: %s", err);
	return seq;
}

/* The verdicts of one AckIndication to conn (the k-th). */
static const Semq__Verdict *verdict_at(const struct fx *fx, uint64_t conn,
				       size_t k, size_t i)
{
	const Semq__Frame *f =
		frame_at(fx, conn, SEMQ__FRAME__BODY_ACK_INDICATION, k);

	assert_true(i < f->ack_indication->n_verdicts);
	return f->ack_indication->verdicts[i];
}

/* semq_stream_out of this node's stream to dest: "last=N resyncs=M". */
static void stream_out_expect(struct fx *fx, const char *dest, int64_t last,
			      int64_t resyncs_min)
{
	char sql[160];

	snprintf(sql, sizeof sql,
		 "SELECT last_seq FROM semq_stream_out WHERE dest = '%s'",
		 dest);
	assert_int_equal(count_rows(fx, sql), last);
	snprintf(sql, sizeof sql,
		 "SELECT resyncs FROM semq_stream_out WHERE dest = '%s'", dest);
	if (resyncs_min == 0)
		assert_int_equal(count_rows(fx, sql), 0);
	else
		assert_true(count_rows(fx, sql) >= resyncs_min);
}

/*
 * The receiver's refusal: a Data whose seq S1 holds with another digest is
 * answered with an AckIndication {DUPLICATE, refusal CONFLICT, high = the
 * stream's highest seq}, the plugin is not called and nothing is recorded;
 * the same message again is an ordinary duplicate. After the watermark and
 * the purge took a row away, a copy with a digest is refused UNDECIDED.
 */
static void test_receiver_refuses_conflict(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"R1", 3, 0, "", 2, LIFE_R1, 0, 0};
	struct mspec2 ms[3] = {
		{"R1", "S1", 1, NULL, 0, LIFE_R1, 0x1001, 0, NULL},
		{"R1", "S1", 2, NULL, 0, LIFE_R1, 0x1002, 0, NULL},
		{"R1", "S1", 3, NULL, 0, LIFE_R1, 0x1003, 0, NULL}};
	struct mspec2 other = {"R1",   "S1", 1,
			       NULL,   0,    LIFE_R1,
			       0x9999, 0,    "another document under seq 1"};
	const Semq__Verdict *v;
	const uint64_t seqs[3] = {1, 2, 3};
	uint64_t s[8];
	int res[8];

	start(fx);
	push_routes(fx, &hop, 1);
	push_msgs(fx, 3, "R1", ms, 3);
	batch(fx, T0);
	assert_int_equal(verdicts_to(fx, 3, s, res, 8), 3);
	assert_int_equal(res[2], RES_PROCESSED);
	assert_int_equal(n_done(fx), 3);

	push_msgs(fx, 3, "R1", &other, 1);
	assert_int_equal(batch(fx, T0 + 10), 1);
	v = verdict_at(fx, 3, 0, 0);
	assert_int_equal(v->id->seq, 1);
	assert_true(v->id->life == LIFE_R1);
	assert_int_equal(v->id->digest, 0x9999);
	assert_int_equal(v->result, SEMQ__RESULT__RESULT_DUPLICATE);
	assert_int_equal(v->refusal, SEMQ__REFUSAL__REFUSAL_CONFLICT);
	assert_false(v->dead);
	assert_int_equal(v->high, 3);
	assert_int_equal(n_done(fx), 3);
	assert_int_equal(recv_result(fx, "R1", 1), RES_PROCESSED);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0030"), 3);
	assert_int_equal(count_rows(fx, "SELECT digest FROM tb_0030 WHERE"
					" seq = 1"),
			 0x1001);

	/* The same message again: a duplicate with its verdict, no refusal,
	 * no high. */
	push_msgs(fx, 3, "R1", &ms[1], 1);
	assert_int_equal(batch(fx, T0 + 20), 1);
	v = verdict_at(fx, 3, 0, 0);
	assert_int_equal(v->id->seq, 2);
	assert_int_equal(v->result, SEMQ__RESULT__RESULT_PROCESSED);
	assert_int_equal(v->refusal, SEMQ__REFUSAL__REFUSAL_NONE);
	assert_int_equal(v->high, 0);
	assert_int_equal(n_done(fx), 3);

	/* The origin confirms all three: the watermark passes them and (no
	 * receipt_retention) their rows go. A copy of seq 2 with a digest
	 * can no longer be told apart: UNDECIDED, high 3. */
	push_response(fx, 3, "R1", "R1", "R1", "S1", seqs, 3);
	batch(fx, T0 + 30);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0030"), 0);
	other.seq = 2;
	push_msgs(fx, 3, "R1", &other, 1);
	assert_int_equal(batch(fx, T0 + 40), 1);
	v = verdict_at(fx, 3, 0, 0);
	assert_int_equal(v->id->seq, 2);
	assert_int_equal(v->result, SEMQ__RESULT__RESULT_DUPLICATE);
	assert_int_equal(v->refusal, SEMQ__REFUSAL__REFUSAL_UNDECIDED);
	assert_int_equal(v->high, 3);
	assert_int_equal(n_done(fx), 3);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0030"), 0);
	/* Without a digest (revision 1): a plain duplicate, as in 0.1. */
	other.digest = 0;
	push_msgs(fx, 3, "R1", &other, 1);
	assert_int_equal(batch(fx, T0 + 50), 1);
	v = verdict_at(fx, 3, 0, 0);
	assert_int_equal(v->result, SEMQ__RESULT__RESULT_DUPLICATE);
	assert_int_equal(v->refusal, SEMQ__REFUSAL__REFUSAL_NONE);
	assert_int_equal(n_done(fx), 3);
}

/*
 * At the origin: a CONFLICT for its own row (the row's digest, high 10)
 * moves the counter past 10, renumbers the row and the unconfirmed later
 * rows of its key to 11, 12, sends them again under the new seqs, and
 * takes the old ids back with an 810-Response carrying their digests; the
 * resync is recorded. An UNDECIDED holds the row (8) and nothing more is
 * sent for it.
 */
static void test_origin_renumbers_on_conflict(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 2, 0x5e1, 0, 0};
	const uint64_t two = 2;
	const int processed = RES_PROCESSED;
	const int64_t qa = fx->c.query_after_ms;
	const Semq__Message *msgs[16];
	const Semq__Frame *f;
	uint64_t dg[5] = {0}, life;
	struct vspec vs;
	struct out_view v;
	size_t n, i;

	sender(fx, 1000);
	life = store_life(fx->st);
	assert_int_equal(enqueue_key(fx, "S1", "K", "k1"), 1);
	assert_int_equal(enqueue_key(fx, "S1", "L", "l1"), 2);
	assert_int_equal(enqueue_key(fx, "S1", "K", "k2"), 3);
	assert_int_equal(enqueue_key(fx, "S1", NULL, "n1"), 4);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	n = data_to(fx, 7, msgs, 16);
	assert_int_equal(n, 4);
	for (i = 0; i < n; i++) {
		assert_int_equal(msgs[i]->seq, i + 1);
		assert_true(msgs[i]->life == life);
		assert_true(msgs[i]->digest != 0);
		dg[i + 1] = msgs[i]->digest;
	}
	assert_int_equal(msgs[2]->prev_seq, 1);
	assert_true(msgs[2]->prev_digest == dg[1]);
	push_indication(fx, 7, "S1", "R1", "S1", &two, &processed, 1);
	batch(fx, T0 + 10);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_ACK2);

	/* S1 holds another message under seq 1 and has seen up to 10. */
	conflict_of(&vs, "S1", 1, life, dg[1], 10);
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 20);
	/* Renumbered: 1 -> 11, 3 -> 12 (key K); 2 (confirmed, key L) and 4
	 * (no key) stay. */
	assert_false(out_of(fx, "R1", "S1", 1).found);
	assert_false(out_of(fx, "R1", "S1", 3).found);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_ACK2);
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_SEND);
	for (i = 11; i <= 12; i++) {
		v = out_of(fx, "R1", "S1", i);
		assert_true(v.found);
		assert_int_equal(v.status, SS_SEND);
		assert_int_equal(v.sent_at, T0 + 20);
		assert_non_null(strstr(v.last_error, "renumbered"));
	}
	/* ... sent again under the new seqs, the same messages */
	n = data_to(fx, 7, msgs, 16);
	assert_int_equal(n, 2);
	assert_int_equal(msgs[0]->seq, 11);
	assert_string_equal(msgs[0]->key, "K");
	assert_int_equal(msgs[0]->prev_seq, 0);
	assert_true(msgs[0]->digest == dg[1]);
	assert_memory_equal(msgs[0]->payload.data, "doc k1", 6);
	assert_int_equal(msgs[1]->seq, 12);
	assert_int_equal(msgs[1]->prev_seq, 11);
	assert_true(msgs[1]->prev_digest == dg[1]);
	assert_true(msgs[1]->digest == dg[3]);
	assert_memory_equal(msgs[1]->payload.data, "doc k2", 6);
	/* ... and the old ids taken back, with their digests */
	assert_int_equal(count_frames(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE),
			 1);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_string_equal(f->ack_response->from, "R1");
	assert_int_equal(f->ack_response->n_ids, 2);
	assert_int_equal(f->ack_response->ids[0]->seq, 1);
	assert_true(f->ack_response->ids[0]->digest == dg[1]);
	assert_true(f->ack_response->ids[0]->life == life);
	assert_int_equal(f->ack_response->ids[1]->seq, 3);
	assert_true(f->ack_response->ids[1]->digest == dg[3]);
	/* ... the counter moved past what S1 has seen, the resync noted */
	stream_out_expect(fx, "S1", 12, 1);
	assert_int_equal(enqueue_key(fx, "S1", "K", "k3"), 13);
	batch(fx, T0 + 30);
	n = data_to(fx, 7, msgs, 16);
	assert_int_equal(n, 1);
	assert_int_equal(msgs[0]->seq, 13);
	assert_int_equal(msgs[0]->prev_seq, 12);
	assert_true(msgs[0]->prev_digest == dg[3]);

	/* UNDECIDED for seq 4: held, not sent, not queried, no response. */
	vs.seq = 4;
	vs.digest = dg[4];
	vs.refusal = SEMQ__REFUSAL__REFUSAL_UNDECIDED;
	vs.high = 4;
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 40);
	v = out_of(fx, "R1", "S1", 4);
	assert_int_equal(v.status, SS_HELD);
	assert_int_equal(v.result, RES_UNDECIDED);
	assert_non_null(strstr(v.last_error, "semqctl outbound"));
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_ACK_RESPONSE),
			 0);
	stream_out_expect(fx, "S1", 13, 1);
	batch(fx, T0 + 40 + 2 * qa);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_QUERY, 0);
	for (i = 0; i < f->query->n_ids; i++)
		assert_int_not_equal(f->query->ids[i]->seq, 4);
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_HELD);
}

/*
 * StreamState: a peer has seen the stream further than this database's
 * counter (it went back in time): the counter moves to its high, the next
 * message gets high + 1; a lower high, or one for another life, changes
 * nothing.
 */
static void test_stream_state_moves_counter(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 2, 0x5e1, 0, 0};
	const Semq__Message *msgs[8];
	uint64_t life;

	sender(fx, 1000);
	life = store_life(fx->st);
	enqueue(fx, "S1", 2);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	stream_out_expect(fx, "S1", 2, 0);

	push_stream_state(fx, 7, "S1", "R1", life, "S1", "S1", 50);
	batch(fx, T0 + 10);
	stream_out_expect(fx, "S1", 50, 1);
	assert_int_equal(enqueue_key(fx, "S1", NULL, "51"), 51);
	batch(fx, T0 + 20);
	assert_int_equal(data_to(fx, 7, msgs, 8), 1);
	assert_int_equal(msgs[0]->seq, 51);

	/* Seen less than the counter: nothing. */
	push_stream_state(fx, 7, "S1", "R1", life, "S1", "S1", 40);
	batch(fx, T0 + 30);
	stream_out_expect(fx, "S1", 51, 1);
	/* Another life of R1 (an earlier database): nothing of it here. */
	push_stream_state(fx, 7, "S1", "R1", life != 7 ? 7 : 8, "S1", "S1",
			  900);
	batch(fx, T0 + 40);
	stream_out_expect(fx, "S1", 51, 1);
	assert_int_equal(enqueue_key(fx, "S1", NULL, "52"), 52);
	/* A destination this database never wrote to starts after it. */
	push_stream_state(fx, 7, "S1", "R1", life, "P1", "S7", 5);
	batch(fx, T0 + 50);
	stream_out_expect(fx, "S7", 5, 1);
	assert_int_equal(enqueue_key(fx, "S7", NULL, "6"), 6);
}

/*
 * At a relay holding a copy of R1/S1/1 (digest d1): a Data for that id
 * with another digest is refused CONFLICT to the sender and not forwarded;
 * the destination's refusal of the copy holds it (8) and goes on to the
 * origin; the origin's 810-Response with the copy's digest then drops it
 * (one with another digest does not).
 */
static void test_relay_conflict_and_take_back(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hops[2] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
					  {"S1", 9, 0, "", 2, 0x51, 0, 0}};
	const uint64_t d1 = 0xd1d1, d2 = 0xd2d2;
	struct mspec2 m = {"R1", "S1", 1, "K", 0, LIFE_R1, d1, 0, "first"};
	const Semq__Message *msgs[4];
	const Semq__Verdict *v;
	const Semq__Frame *f;
	struct vspec vs;
	uint64_t high = 0;

	relay(fx);
	push_msgs(fx, 3, "R1", &m, 1);
	assert_int_equal(batch(fx, T0), 1);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK, 0);
	assert_int_equal(f->relay_ack->kind, SEMQ__RELAY_ACK__KIND__STORED);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_UNSEND);
	assert_int_equal(store_relay_high(fx->st, "R1", "S1", LIFE_R1, &high),
			 SEMQ_OK);
	assert_int_equal(high, 1);

	/* Another message under that id, S1 connected meanwhile: refused
	 * here, never forwarded around the copy (the copy goes). */
	push_routes(fx, hops, 2);
	m.digest = d2;
	m.body = "second";
	push_msgs(fx, 3, "R1", &m, 1);
	batch(fx, T0 + 10);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK), 0);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_ACK_INDICATION),
			 1);
	v = verdict_at(fx, 3, 0, 0);
	assert_int_equal(v->id->seq, 1);
	assert_true(v->id->digest == d2);
	assert_int_equal(v->result, SEMQ__RESULT__RESULT_DUPLICATE);
	assert_int_equal(v->refusal, SEMQ__REFUSAL__REFUSAL_CONFLICT);
	assert_int_equal(v->high, 1);
	assert_int_equal(data_to(fx, 9, msgs, 4), 1);
	assert_true(msgs[0]->digest == d1);
	assert_memory_equal(msgs[0]->payload.data, "first", 5);
	assert_string_equal(msgs[0]->stored_by, "P1");
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_SEND);

	/* S1 refuses the copy: held here, the refusal goes to R1, nothing
	 * is confirmed to S1. */
	conflict_of(&vs, "S1", 1, LIFE_R1, d1, 5);
	push_verdict(fx, 9, "S1", &vs);
	batch(fx, T0 + 20);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_HELD);
	assert_int_equal(out_of(fx, "R1", "S1", 1).result, RES_CONFLICT);
	v = verdict_at(fx, 3, 0, 0);
	assert_int_equal(v->refusal, SEMQ__REFUSAL__REFUSAL_CONFLICT);
	assert_int_equal(v->high, 5);
	assert_true(v->id->digest == d1);
	assert_int_equal(count_frames(fx, 9, SEMQ__FRAME__BODY_ACK_RESPONSE),
			 0);
	/* Held: not sent again, not queried; only its refusal is repeated
	 * to the origin (test_relay_repeats_refusals). */
	batch(fx, T0 + 20 + 3 * fx->c.query_after_ms);
	assert_int_equal(count_frames(fx, 9, SEMQ__FRAME__BODY_DATA), 0);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_QUERY), 0);
	assert_int_equal(fx->n_got,
			 count_frames(fx, 3, SEMQ__FRAME__BODY_ACK_INDICATION));

	/* The origin takes back another message's id: the copy stays. */
	push_response2(fx, 3, "R1", "R1", "R1", "S1", 1, LIFE_R1, d2);
	batch(fx, T0 + 30);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_HELD);
	/* ... and this one's: the copy goes; the response goes on to S1. */
	push_response2(fx, 3, "R1", "R1", "R1", "S1", 1, LIFE_R1, d1);
	batch(fx, T0 + 40);
	assert_false(out_of(fx, "R1", "S1", 1).found);
	f = frame_at(fx, 9, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_true(f->ack_response->ids[0]->digest == d1);
	assert_string_equal(f->ack_response->from, "R1");
}

/*
 * tests/model/README.md, "Endless renumbering": a CONFLICT for a row whose
 * key predecessor is unconfirmed may be about its prev_seq (the refuser
 * holds another message there), which renumbering the row alone keeps: the
 * origin asks about the predecessor first and renumbers nothing. The
 * predecessor's own CONFLICT then renumbers both; a repeated refusal of an
 * id moved that way takes its copy back again ("A relay's copy is never
 * taken back"); a refusal of an id no row has held is ignored. With the
 * predecessor confirmed, a CONFLICT renumbers the row alone.
 */
static void test_origin_asks_predecessor_first(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 2, 0x5e1, 0, 0};
	const uint64_t three = 3;
	const int processed = RES_PROCESSED;
	const Semq__Message *msgs[8];
	const Semq__Frame *f;
	uint64_t dg[4] = {0}, life;
	struct vspec vs;
	size_t n, i;

	sender(fx, 1000);
	life = store_life(fx->st);
	assert_int_equal(enqueue_key(fx, "S1", "K", "k1"), 1);
	assert_int_equal(enqueue_key(fx, "S1", "K", "k2"), 2);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	n = data_to(fx, 7, msgs, 8);
	assert_int_equal(n, 2);
	for (i = 0; i < n; i++)
		dg[i + 1] = msgs[i]->digest;

	/* S1 refuses 2 (its prev_seq 1 holds another message there). */
	conflict_of(&vs, "S1", 2, life, dg[2], 2);
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 10);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_SEND);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_SEND);
	assert_false(out_of(fx, "R1", "S1", 3).found);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_ACK_RESPONSE),
			 0);
	/* ... the predecessor is queried now, not after query_after */
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_QUERY, 0);
	assert_int_equal(f->query->n_ids, 1);
	assert_int_equal(f->query->ids[0]->seq, 1);
	assert_true(f->query->ids[0]->digest == dg[1]);

	/* The predecessor's refusal renumbers both, in order; seq 2, which
	 * S1 holds nothing under (it refused it for its predecessor), gets
	 * a filler. */
	vs.seq = 1;
	vs.digest = dg[1];
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 20);
	n = data_to(fx, 7, msgs, 8);
	assert_int_equal(n, 3);
	assert_int_equal(msgs[0]->seq, 2);
	assert_true(msgs[0]->tombstone);
	assert_true(msgs[0]->digest != dg[2]);
	assert_int_equal(msgs[1]->seq, 3);
	assert_true(msgs[1]->digest == dg[1]);
	assert_int_equal(msgs[2]->seq, 4);
	assert_int_equal(msgs[2]->prev_seq, 3);
	assert_true(msgs[2]->digest == dg[2]);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_int_equal(f->ack_response->n_ids, 2);

	/* The old id 2 refused again (a relay repeating it): taken back
	 * again, nothing renumbered. */
	vs.seq = 2;
	vs.digest = dg[2];
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 30);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
	assert_int_equal(count_frames(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE),
			 1);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_int_equal(f->ack_response->n_ids, 1);
	assert_int_equal(f->ack_response->ids[0]->seq, 2);
	assert_true(f->ack_response->ids[0]->digest == dg[2]);
	assert_true(out_of(fx, "R1", "S1", 4).found);
	assert_false(out_of(fx, "R1", "S1", 5).found);
	/* ... and an id whose message this node never had: nothing. */
	vs.digest = 0xbad;
	push_verdict(fx, 7, "S1", &vs);
	assert_int_equal(batch(fx, T0 + 40), 0);

	/* 3 confirmed: a refusal of 4 renumbers 4 alone, after 3. */
	push_indication(fx, 7, "S1", "R1", "S1", &three, &processed, 1);
	batch(fx, T0 + 50);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_ACK2);
	vs.seq = 4;
	vs.digest = dg[2];
	vs.high = 4;
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 60);
	n = data_to(fx, 7, msgs, 8);
	assert_int_equal(n, 1);
	assert_int_equal(msgs[0]->seq, 5);
	assert_int_equal(msgs[0]->prev_seq, 3);
	assert_true(msgs[0]->prev_digest == dg[1]);
	assert_true(msgs[0]->digest == dg[2]);
}

/*
 * Renumbering gives up seqs; those above how far the lost timeline reached
 * (the refused seq, a high above the counter) would never arrive at the
 * destination, whose watermark would stop below them for good. Each gets a filler, sent as a cancel of nothing (no
 * key, no predecessor, no document, semq_filler_digest()). A filler's
 * verdict settles it; a refusal of one (the refuser holds a message there)
 * settles it too and takes a relay's copy of it back, and renumbers
 * nothing.
 */
static void test_origin_fills_given_up_seqs(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 2, 0x5e1, 0, 0};
	const Semq__Message *msgs[8];
	const Semq__Frame *f;
	uint64_t dg1, life, fd2, fd3, fd4;
	const int cancelled = RES_CANCELLED;
	const uint64_t three = 3;
	struct vspec vs;
	size_t n, i;

	sender(fx, 1000);
	life = store_life(fx->st);
	for (i = 1; i <= 4; i++)
		assert_int_equal(enqueue_key(fx, "S1", "K", "k"), i);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	n = data_to(fx, 7, msgs, 8);
	assert_int_equal(n, 4);
	dg1 = msgs[0]->digest;

	/* S1 holds another message under 1 and has seen up to 2. */
	conflict_of(&vs, "S1", 1, life, dg1, 2);
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 10);
	/* 1..4 -> 5..8; no filler at 1 (S1 holds the lost timeline's
	 * message there), one at each of 2, 3 and 4 (S1's high, 2, is not
	 * above the counter: it may count R1's own messages) */
	assert_false(out_of(fx, "R1", "S1", 1).found);
	assert_true(out_of(fx, "R1", "S1", 2).found);
	fd2 = filler_of("S1", life, 2);
	fd3 = filler_of("S1", life, 3);
	fd4 = filler_of("S1", life, 4);
	n = data_to(fx, 7, msgs, 8);
	assert_int_equal(n, 7);
	for (i = 0; i < n; i++) {
		if (msgs[i]->seq <= 4) {
			assert_true(msgs[i]->tombstone);
			assert_true(msgs[i]->digest == (msgs[i]->seq == 2 ? fd2
							: msgs[i]->seq == 3
								? fd3
								: fd4));
			assert_int_equal(msgs[i]->prev_seq, 0);
			assert_true(!msgs[i]->key || !msgs[i]->key[0]);
			assert_int_equal(msgs[i]->payload.len, 0);
		} else {
			assert_true(msgs[i]->seq >= 5 && msgs[i]->seq <= 8);
			assert_false(msgs[i]->tombstone);
		}
	}

	/* S1 records the filler at 3: settled. */
	push_indication(fx, 7, "S1", "R1", "S1", &three, &cancelled, 1);
	batch(fx, T0 + 20);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_CANCELLED);
	assert_int_equal(out_of(fx, "R1", "S1", 3).result, RES_CANCELLED);
	/* S1 holds a message under 4: the filler is refused, settled, its
	 * copy taken back; nothing is renumbered. */
	vs.seq = 4;
	vs.digest = fd4;
	vs.high = 4;
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 30);
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_CANCELLED);
	assert_int_equal(out_of(fx, "R1", "S1", 4).result, RES_CANCELLED);
	assert_false(out_of(fx, "R1", "S1", 9).found);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_int_equal(f->ack_response->n_ids, 1);
	assert_int_equal(f->ack_response->ids[0]->seq, 4);
	assert_true(f->ack_response->ids[0]->digest == fd4);
}

/*
 * A relay holding copies their destination refused (held, 8) repeats each
 * refusal to the origin when it connects and every query_after, since the
 * first, or the origin's 810-Response taking the copy back, may have been
 * lost; it never sends or queries the copy itself. Once the origin takes
 * it back the copy goes and nothing is repeated.
 */
static void test_relay_repeats_refusals(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hops[2] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
					  {"S1", 9, 0, "", 2, 0x51, 0, 0}};
	const uint64_t d1 = 0xd1d1, d2 = 0xd2d2;
	struct mspec2 m[2] = {
		{"R1", "S1", 1, "K", 0, LIFE_R1, d1, 0, "first"},
		{"R1", "S1", 2, "K", 1, LIFE_R1, d2, d1, "second"}};
	const int64_t qa = fx->c.query_after_ms;
	const Semq__Verdict *v;
	struct vspec vs;
	size_t i;

	relay(fx);
	push_routes(fx, hops, 1);
	push_msgs(fx, 3, "R1", m, 2); /* S1 away: copies */
	batch(fx, T0);
	push_routes(fx, hops, 2);
	batch(fx, T0 + 1);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_SEND);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_SEND);
	memset(&vs, 0, sizeof vs);
	vs.origin = "R1";
	vs.dest = "S1";
	vs.life = LIFE_R1;
	vs.result = SEMQ__RESULT__RESULT_DUPLICATE;
	vs.refusal = SEMQ__REFUSAL__REFUSAL_CONFLICT;
	vs.high = 7;
	vs.seq = 1;
	vs.digest = d1;
	push_verdict(fx, 9, "S1", &vs);
	vs.seq = 2;
	vs.digest = d2;
	vs.refusal = SEMQ__REFUSAL__REFUSAL_UNDECIDED;
	push_verdict(fx, 9, "S1", &vs);
	batch(fx, T0 + 10);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_HELD);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_HELD);
	/* (the refusals went on to R1 as they passed) */
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_ACK_INDICATION),
			 2);

	/* Before query_after: nothing repeated. */
	assert_int_equal(batch(fx, T0 + 10 + qa / 2), 0);
	/* R1 connects again: both refusals at once, with their digests. */
	push_peer_up(fx, 3, "R1");
	batch(fx, T0 + 10 + qa / 2 + 1);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_ACK_INDICATION),
			 1);
	for (i = 0; i < 2; i++) {
		v = verdict_at(fx, 3, 0, i);
		assert_string_equal(v->id->origin, "R1");
		assert_int_equal(v->result, SEMQ__RESULT__RESULT_DUPLICATE);
		if (v->id->seq == 1) {
			assert_true(v->id->digest == d1);
			assert_int_equal(v->refusal,
					 SEMQ__REFUSAL__REFUSAL_CONFLICT);
		} else {
			assert_int_equal(v->id->seq, 2);
			assert_true(v->id->digest == d2);
			assert_int_equal(v->refusal,
					 SEMQ__REFUSAL__REFUSAL_UNDECIDED);
		}
	}
	assert_int_equal(count_frames(fx, 9, SEMQ__FRAME__BODY_DATA), 0);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_QUERY), 0);
	/* ... and again every query_after. */
	batch(fx, T0 + 10 + qa / 2 + 1 + qa);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_ACK_INDICATION),
			 1);
	assert_int_equal(frame_at(fx, 3, SEMQ__FRAME__BODY_ACK_INDICATION, 0)
				 ->ack_indication->n_verdicts,
			 2);

	/* R1 takes 1 back: only 2 is repeated from then on. */
	push_response2(fx, 3, "R1", "R1", "R1", "S1", 1, LIFE_R1, d1);
	batch(fx, T0 + 20 + 2 * qa);
	assert_false(out_of(fx, "R1", "S1", 1).found);
	batch(fx, T0 + 30 + 4 * qa);
	v = verdict_at(fx, 3, 0, 0);
	assert_int_equal(frame_at(fx, 3, SEMQ__FRAME__BODY_ACK_INDICATION, 0)
				 ->ack_indication->n_verdicts,
			 1);
	assert_int_equal(v->id->seq, 2);
}

/*
 * An AckIndication or QueryReply with life 0 (the life not given) is about
 * this node's own life; one about an earlier life of this node (another
 * non-zero life) changes nothing here but is answered with an
 * 810-Response, so that the receiver can finish its record; a refusal of
 * an earlier life is neither acted on nor answered. (A revision-2 link: a
 * stream through a revision-1 node goes without its life, below.)
 */
static void test_origin_life_zero_and_earlier(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 2, 0x5e1, 0, 0};
	const uint64_t one = 1, two = 2;
	const int processed = RES_PROCESSED, yes = 1;
	const uint64_t earlier = 0xea51;
	const Semq__Frame *f;
	struct vspec vs;
	uint64_t life;

	sender(fx, 1000);
	life = store_life(fx->st);
	assert_true(life != earlier);
	enqueue(fx, "S1", 4);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_SEND);

	/* life 0: this node's own */
	push_indication(fx, 7, "S1", "R1", "S1", &one, &processed, 1);
	batch(fx, T0 + 10);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_ACK2);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_int_equal(f->ack_response->ids[0]->seq, 1);
	assert_true(f->ack_response->ids[0]->life == life);
	push_query_reply(fx, 7, "S1", "R1", "S1", &two, &yes, &processed, 1);
	batch(fx, T0 + 20);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_ACK2);
	assert_int_equal(count_frames(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE),
			 1);

	/* An earlier life: nothing changes, an 810-Response answers it. */
	memset(&vs, 0, sizeof vs);
	vs.origin = "R1";
	vs.dest = "S1";
	vs.seq = 3;
	vs.life = earlier;
	vs.result = SEMQ__RESULT__RESULT_PROCESSED;
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 30);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_SEND);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_int_equal(f->ack_response->ids[0]->seq, 3);
	assert_true(f->ack_response->ids[0]->life == earlier);
	vs.seq = 4;
	vs.result = SEMQ__RESULT__RESULT_REDO;
	vs.dead = 1;
	push_answer(fx, 7, "S1", &vs, 1);
	batch(fx, T0 + 40);
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_SEND);
	f = frame_at(fx, 7, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_int_equal(f->ack_response->ids[0]->seq, 4);
	assert_true(f->ack_response->ids[0]->life == earlier);
	/* not received, of an earlier life: not resent */
	vs.dead = 0;
	vs.result = 0;
	push_answer(fx, 7, "S1", &vs, 0);
	batch(fx, T0 + 50);
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_SEND);
	assert_int_equal(fx->n_got, 0);

	/* A refusal of an earlier life: no renumbering, no resync, no
	 * answer. */
	vs.seq = 3;
	vs.result = SEMQ__RESULT__RESULT_DUPLICATE;
	vs.refusal = SEMQ__REFUSAL__REFUSAL_CONFLICT;
	vs.high = 100;
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 60);
	assert_int_equal(fx->n_got, 0);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_SEND);
	stream_out_expect(fx, "S1", 4, 0);
	push_answer(fx, 7, "S1", &vs, 1);
	batch(fx, T0 + 70);
	assert_int_equal(fx->n_got, 0);
	stream_out_expect(fx, "S1", 4, 0);
	/* The same refusal with life 0 is about this node's own row. */
	vs.life = 0;
	vs.digest = 0;
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 80);
	assert_false(out_of(fx, "R1", "S1", 3).found);
	stream_out_expect(fx, "S1", 101, 1);
}

/*
 * PEER_UP of a revision-2 hop: a StreamQuery naming this node, its life
 * and the destinations of its streams. A revision-1 hop is never sent one
 * (it would refuse the unknown body).
 */
static void test_peer_up_stream_query(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hops[2] = {{"P1", 5, 1, "", 2, 0x71, 0, 0},
					  {"P2", 6, 1, "", 1, 0, 0, 0}};
	const Semq__Frame *f;

	sender(fx, 1000);
	enqueue(fx, "S1", 1);
	enqueue(fx, "S2", 2);
	push_routes(fx, hops, 2);
	push_peer_up(fx, 5, "P1");
	batch(fx, T0);
	assert_int_equal(count_frames(fx, 5, SEMQ__FRAME__BODY_STREAM_QUERY),
			 1);
	f = frame_at(fx, 5, SEMQ__FRAME__BODY_STREAM_QUERY, 0);
	assert_string_equal(f->stream_query->origin, "R1");
	assert_true(f->stream_query->life == store_life(fx->st));
	assert_int_equal(f->stream_query->n_dests, 2);
	assert_string_equal(f->stream_query->dests[0], "S1");
	assert_string_equal(f->stream_query->dests[1], "S2");
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_STREAM_QUERY),
			 1);

	push_peer_up(fx, 6, "P2");
	batch(fx, T0 + 10);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_STREAM_QUERY),
			 0);
}

/*
 * StreamQuery at a receiver: answered with the highest seq it recorded of
 * (origin, life, itself); a life it has nothing of gets no StreamState.
 */
static void test_stream_query_answered(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"R1", 3, 0, "", 2, LIFE_R1, 0, 0};
	const struct mspec2 ms[2] = {
		{"R1", "S1", 1, NULL, 0, LIFE_R1, 0x11, 0, NULL},
		{"R1", "S1", 3, NULL, 0, LIFE_R1, 0x13, 0, NULL}};
	const Semq__Frame *f;

	start(fx);
	push_routes(fx, &hop, 1);
	push_msgs(fx, 3, "R1", ms, 2);
	batch(fx, T0);
	push_stream_query(fx, 3, "R1", "R1", LIFE_R1, "S1");
	assert_int_equal(batch(fx, T0 + 10), 1);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_STREAM_STATE, 0);
	assert_string_equal(f->stream_state->origin, "R1");
	assert_true(f->stream_state->life == LIFE_R1);
	assert_string_equal(f->stream_state->reporter, "S1");
	assert_int_equal(f->stream_state->n_streams, 1);
	assert_string_equal(f->stream_state->streams[0]->dest, "S1");
	assert_int_equal(f->stream_state->streams[0]->high, 3);
	push_stream_query(fx, 3, "R1", "R1", LIFE_R1 + 1, "S1");
	assert_int_equal(batch(fx, T0 + 20), 0);
}

/*
 * A relay answers a StreamQuery from its record (the highest seq it
 * stored or forwarded per destination), passes the question on to the
 * connected revision-2 destinations named, and passes their StreamState
 * back towards the origin when its link speaks revision 2.
 */
static void test_relay_stream_state(void **state)
{
	struct fx *fx = *state;
	struct route_hop hops[2] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
				    {"S1", 9, 0, "", 2, 0x51, 0, 0}};
	const struct mspec2 m = {"R1",    "S9", 7, NULL, 0,
				 LIFE_R1, 0x77, 0, NULL};
	const Semq__Frame *f;

	relay(fx);
	push_routes(fx, hops, 2);
	push_msgs(fx, 3, "R1", &m, 1); /* S9 is away: a copy */
	batch(fx, T0);
	push_stream_query(fx, 3, "R1", "R1", LIFE_R1, "S1");
	batch(fx, T0 + 10);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_STREAM_STATE, 0);
	assert_string_equal(f->stream_state->origin, "R1");
	assert_true(f->stream_state->life == LIFE_R1);
	assert_string_equal(f->stream_state->reporter, "P1");
	assert_int_equal(f->stream_state->n_streams, 1);
	assert_string_equal(f->stream_state->streams[0]->dest, "S9");
	assert_int_equal(f->stream_state->streams[0]->high, 7);
	assert_int_equal(count_frames(fx, 9, SEMQ__FRAME__BODY_STREAM_QUERY),
			 1);
	f = frame_at(fx, 9, SEMQ__FRAME__BODY_STREAM_QUERY, 0);
	assert_string_equal(f->stream_query->origin, "R1");
	assert_true(f->stream_query->life == LIFE_R1);
	assert_int_equal(f->stream_query->n_dests, 1);
	assert_string_equal(f->stream_query->dests[0], "S1");

	/* S1's answer goes back to R1, as it is. */
	push_stream_state(fx, 9, "S1", "R1", LIFE_R1, "S1", "S1", 12);
	batch(fx, T0 + 20);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_STREAM_STATE, 0);
	assert_string_equal(f->stream_state->reporter, "S1");
	assert_int_equal(f->stream_state->streams[0]->high, 12);

	/* Not to an origin of revision 1 (it would refuse the body). */
	hops[0].revision = 1;
	hops[0].life = 0;
	push_routes(fx, hops, 2);
	push_stream_state(fx, 9, "S1", "R1", LIFE_R1, "S1", "S1", 13);
	assert_int_equal(batch(fx, T0 + 30), 0);
}

/* A Query for one id with its life and digest. */
static void push_query2(struct fx *fx, uint64_t conn, const char *peer,
			const char *origin, const char *dest, uint64_t seq,
			uint64_t life, uint64_t digest)
{
	Semq__MsgId id = SEMQ__MSG_ID__INIT, *pid = &id;
	Semq__Query q = SEMQ__QUERY__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	id.origin = (char *)origin;
	id.dest = (char *)dest;
	id.seq = seq;
	id.life = life;
	id.digest = digest;
	q.n_ids = 1;
	q.ids = &pid;
	f.body_case = SEMQ__FRAME__BODY_QUERY;
	f.query = &q;
	push_frame(fx, conn, peer, &f);
}

/*
 * A relay holding a copy answers a Query for that id with another digest
 * itself (CONFLICT, its high) and does not pass it on; a Query for the
 * copy's own message goes on to the destination.
 */
static void test_relay_query_conflict(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hops[2] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
					  {"S1", 9, 0, "", 2, 0x51, 0, 0}};
	const struct mspec2 m = {"R1",    "S1", 4, NULL, 0,
				 LIFE_R1, 0xd1, 0, NULL};
	const Semq__Frame *f;

	relay(fx);
	push_msgs(fx, 3, "R1", &m, 1);
	batch(fx, T0);
	push_routes(fx, hops, 2);
	batch(fx, T0 + 10); /* the copy goes to S1 */
	assert_int_equal(out_of(fx, "R1", "S1", 4).status, SS_SEND);

	push_query2(fx, 3, "R1", "R1", "S1", 4, LIFE_R1, 0xd2);
	batch(fx, T0 + 20);
	assert_int_equal(count_frames(fx, 9, SEMQ__FRAME__BODY_QUERY), 0);
	f = frame_at(fx, 3, SEMQ__FRAME__BODY_QUERY_REPLY, 0);
	assert_int_equal(f->query_reply->n_answers, 1);
	assert_true(f->query_reply->answers[0]->received);
	assert_int_equal(f->query_reply->answers[0]->result,
			 SEMQ__RESULT__RESULT_DUPLICATE);
	assert_int_equal(f->query_reply->answers[0]->refusal,
			 SEMQ__REFUSAL__REFUSAL_CONFLICT);
	assert_int_equal(f->query_reply->answers[0]->high, 4);
	assert_int_equal(f->query_reply->answers[0]->id->digest, 0xd2);

	push_query2(fx, 3, "R1", "R1", "S1", 4, LIFE_R1, 0xd1);
	batch(fx, T0 + 30);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_QUERY_REPLY), 0);
	f = frame_at(fx, 9, SEMQ__FRAME__BODY_QUERY, 0);
	assert_int_equal(f->query->ids[0]->seq, 4);
	assert_int_equal(f->query->ids[0]->digest, 0xd1);
}

/*
 * An 810-Indication or a QueryReply about another message under one of this
 * node's seqs (its id's digest is not the row's) does not confirm the row.
 * After a restore, the destination repeats the indication of a message of
 * the lost timeline that it never got an 810-Response for (repeat_unacked,
 * at once on PEER_UP); the restored origin has handed that seq out again to
 * a new message, which that verdict must not settle: the row stays in
 * doubt, and the query about it finds the conflict.
 */
static void test_origin_foreign_verdict_not_confirmed(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 2, 0x5e1, 0, 0};
	const Semq__Message *msgs[4];
	struct vspec vs;
	uint64_t life, d1;

	sender(fx, 1000);
	life = store_life(fx->st);
	enqueue(fx, "S1", 2);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	assert_int_equal(data_to(fx, 7, msgs, 4), 2);
	d1 = msgs[0]->digest;
	assert_true(d1 != 0 && d1 != 0xbad);

	/* S1 repeats its verdict on the lost timeline's seq 1 (digest
	 * 0xbad): seq 1 here is another message. */
	memset(&vs, 0, sizeof vs);
	vs.origin = "R1";
	vs.dest = "S1";
	vs.seq = 1;
	vs.life = life;
	vs.digest = 0xbad;
	vs.result = SEMQ__RESULT__RESULT_PROCESSED;
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 10);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_SEND);
	/* the same through a QueryReply */
	vs.seq = 2;
	push_answer(fx, 7, "S1", &vs, 1);
	batch(fx, T0 + 20);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_SEND);
}

/*
 * A tombstone refused UNDECIDED (the receiver's record of that seq was
 * purged) is held for the operator like any undecided row, not sent again
 * every query_after forever.
 */
static void test_origin_tombstone_undecided_settles(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 2, 0x5e1, 0, 0};
	const int64_t qa = fx->c.query_after_ms;
	const Semq__Message *msgs[4];
	struct msgid id;
	struct vspec vs;
	uint64_t life;

	sender(fx, 1000);
	life = store_life(fx->st);
	enqueue(fx, "S1", 1);
	push_routes(fx, &hop, 1);
	batch(fx, T0);
	/* The operator cancels it while it is in doubt. */
	memset(&id, 0, sizeof id);
	snprintf(id.origin, sizeof id.origin, "R1");
	snprintf(id.dest, sizeof id.dest, "S1");
	id.seq = 1;
	id.life = life;
	assert_int_equal(store_cancel(fx->st, &id, T0 + 10), SEMQ_OK);
	push_wake(fx);
	batch(fx, T0 + 10);
	assert_int_equal(data_to(fx, 7, msgs, 4), 1);
	assert_true(msgs[0]->tombstone);
	assert_true(msgs[0]->digest != 0);

	memset(&vs, 0, sizeof vs);
	vs.origin = "R1";
	vs.dest = "S1";
	vs.seq = 1;
	vs.life = life;
	vs.digest = msgs[0]->digest;
	vs.result = SEMQ__RESULT__RESULT_DUPLICATE;
	vs.refusal = SEMQ__REFUSAL__REFUSAL_UNDECIDED;
	vs.high = 1;
	push_verdict(fx, 7, "S1", &vs);
	batch(fx, T0 + 20);
	/* Settled one way or another: not a tombstone due again. */
	batch(fx, T0 + 20 + 2 * qa);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
	batch(fx, T0 + 20 + 4 * qa);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
}

/* ---- custody (docs/PROTOCOL.md, "Custody") ------------------------------ */

/* A RelayAck of revision 2 about one id: with its reason, about_query, the
 * id's life and digest. */
static void push_relay_ack2(struct fx *fx, uint64_t conn, const char *peer,
			    int kind, int reason, int about_query,
			    const char *origin, const char *dest, uint64_t seq,
			    uint64_t life, uint64_t digest, const char *detail)
{
	Semq__MsgId id = SEMQ__MSG_ID__INIT, *pid = &id;
	Semq__RelayAck ra = SEMQ__RELAY_ACK__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	id.origin = (char *)origin;
	id.dest = (char *)dest;
	id.seq = seq;
	id.life = life;
	id.digest = digest;
	ra.n_ids = 1;
	ra.ids = &pid;
	ra.kind = kind;
	ra.reason = reason;
	ra.about_query = about_query;
	ra.detail = (char *)detail;
	f.body_case = SEMQ__FRAME__BODY_RELAY_ACK;
	f.relay_ack = &ra;
	push_frame(fx, conn, peer, &f);
}

/* A Data frame of the cancels (tombstones) of ms[0..n): no payload, the
 * life and digest of the message each cancels. */
static void push_cancels(struct fx *fx, uint64_t conn, const char *peer,
			 const struct mspec2 *ms, size_t n)
{
	Semq__Message w[MAX_JOB_MSGS], *pw[MAX_JOB_MSGS];
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;
	size_t i;

	assert_true(n > 0 && n <= MAX_JOB_MSGS);
	for (i = 0; i < n; i++) {
		semq__message__init(&w[i]);
		w[i].origin = (char *)ms[i].origin;
		w[i].dest = (char *)ms[i].dest;
		w[i].seq = ms[i].seq;
		w[i].type = 7;
		w[i].key = (char *)(ms[i].key ? ms[i].key : "");
		w[i].prev_seq = ms[i].prev;
		w[i].created_at = T0;
		w[i].life = ms[i].life;
		w[i].digest = ms[i].digest;
		w[i].tombstone = 1;
		pw[i] = &w[i];
	}
	d.n_messages = n;
	d.messages = pw;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	push_frame(fx, conn, peer, &f);
}

/* RelayAck frames to conn of kind (and, for UNREACHABLE, reason). */
static size_t n_relay_acks(const struct fx *fx, uint64_t conn, int kind,
			   int reason)
{
	size_t i, n = 0;

	for (i = 0; i < fx->n_got; i++) {
		const Semq__Frame *f = fx->got[i].f;

		if (fx->got[i].conn != conn ||
		    f->body_case != SEMQ__FRAME__BODY_RELAY_ACK ||
		    (int)f->relay_ack->kind != kind)
			continue;
		if (kind == SEMQ__RELAY_ACK__KIND__UNREACHABLE &&
		    (int)f->relay_ack->reason != reason)
			continue;
		n++;
	}
	return n;
}

/* The one RelayAck to conn of kind (and reason), or fails. */
static const Semq__RelayAck *relay_ack_of(const struct fx *fx, uint64_t conn,
					  int kind, int reason)
{
	size_t i;

	if (n_relay_acks(fx, conn, kind, reason) != 1)
		fail_msg("%zu RelayAck kind %d reason %d to conn %" PRIu64
			 ", wanted one",
			 n_relay_acks(fx, conn, kind, reason), kind, reason,
			 conn);
	for (i = 0; i < fx->n_got; i++) {
		const Semq__Frame *f = fx->got[i].f;

		if (fx->got[i].conn == conn &&
		    f->body_case == SEMQ__FRAME__BODY_RELAY_ACK &&
		    (int)f->relay_ack->kind == kind &&
		    (kind != SEMQ__RELAY_ACK__KIND__UNREACHABLE ||
		     (int)f->relay_ack->reason == reason))
			return f->relay_ack;
	}
	return NULL;
}

/* Does the RelayAck name origin/dest/seq? */
static int ack_names(const Semq__RelayAck *ra, const char *origin,
		     const char *dest, uint64_t seq)
{
	size_t i;

	for (i = 0; i < ra->n_ids; i++)
		if (!strcmp(ra->ids[i]->origin, origin) &&
		    !strcmp(ra->ids[i]->dest, dest) && ra->ids[i]->seq == seq)
			return 1;
	return 0;
}

/* tb_0031.custodian of origin/dest/seq into buf ("" when NULL). */
static const char *custodian_of(struct fx *fx, const char *origin,
				const char *dest, uint64_t seq, char *buf,
				size_t bufsz)
{
	sqlite3_stmt *s = prep(fx, "SELECT custodian FROM tb_0031 WHERE "
				   "origin = ?1 AND dest = ?2 AND seq = ?3");

	buf[0] = '\0';
	sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)seq);
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
		snprintf(buf, bufsz, "%s",
			 (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	return buf;
}

/* Length of the payload of origin/dest/seq in tb_0031 (-1: no row). */
static int64_t payload_len_of(struct fx *fx, const char *origin,
			      const char *dest, uint64_t seq)
{
	char sql[200];

	snprintf(sql, sizeof sql,
		 "SELECT length(payload) FROM tb_0031 WHERE origin = '%s'"
		 " AND dest = '%s' AND seq = %" PRIu64,
		 origin, dest, seq);
	return count_rows(fx, sql);
}

/* Messages (and bytes) semq_custody counts for origin. */
static int64_t custody_of(struct fx *fx, const char *origin, int bytes)
{
	char sql[200];

	snprintf(sql, sizeof sql,
		 "SELECT COALESCE(sum(%s), 0) FROM semq_custody"
		 " WHERE origin = '%s'",
		 bytes ? "bytes" : "messages", origin);
	return count_rows(fx, sql);
}

/* The counters proto counted since the last call. */
static struct proto_counts counts(struct fx *fx)
{
	struct proto_counts c;

	memset(&c, 0, sizeof c);
	proto_take_counts(fx->p, &c);
	return c;
}

/* An origin R1 whose [route] default goes through relay P1, on conn 5 of
 * the given wire revision. */
static void sender_via_p1(struct fx *fx, unsigned window, unsigned revision)
{
	const struct route_hop hop = {
		"P1", 5, 1, "", revision, revision >= 2 ? 0x71 : 0, 0, 0};

	snprintf(fx->routes[0].dest, sizeof fx->routes[0].dest, "default");
	snprintf(fx->routes[0].via, sizeof fx->routes[0].via, "P1");
	fx->c.n_routes = 1;
	sender(fx, window);
	push_routes(fx, &hop, 1);
}

/*
 * A relay's custody is bounded by its quotas: a copy for a destination
 * that is not connected is stored (RelayAck STORED) until one more copy
 * would go over quota_messages_per_origin, quota_bytes_per_origin (in one
 * frame: the copies of that frame count) or quota_messages (every
 * origin); then RelayAck UNREACHABLE, reason QUOTA, with a detail naming
 * the quota, and nothing is stored. Another origin still has room. A
 * cancel is never refused for a quota.
 */
static void test_relay_custody_quotas(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hops[2] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
					  {"R2", 4, 0, "", 2, 0x52, 0, 0}};
	const struct mspec2 ms[3] = {
		{"R1", "S9", 1, NULL, 0, LIFE_R1, 0x11, 0, NULL},
		{"R1", "S9", 2, NULL, 0, LIFE_R1, 0x12, 0, NULL},
		{"R1", "S9", 3, NULL, 0, LIFE_R1, 0x13, 0, NULL}};
	const struct mspec2 more[2] = {
		{"R1", "S9", 6, NULL, 0, LIFE_R1, 0x16, 0, NULL},
		{"R1", "S9", 7, NULL, 0, LIFE_R1, 0x17, 0, NULL}};
	const struct mspec2 cancels[2] = {
		{"R1", "S9", 1, NULL, 0, LIFE_R1, 0x11, 0, NULL},
		{"R1", "S9", 5, NULL, 0, LIFE_R1, 0x15, 0, NULL}};
	const struct mspec2 r2[3] = {
		{"R2", "S9", 1, NULL, 0, 0x52, 0x21, 0, NULL},
		{"R2", "S9", 2, NULL, 0, 0x52, 0x22, 0, NULL},
		{"R2", "S9", 3, NULL, 0, 0x52, 0x23, 0, NULL}};
	const struct mspec2 r2_cancel = {"R2", "S9", 9, NULL, 0,
					 0x52, 0x29, 0, NULL};
	const Semq__RelayAck *ra;

	fx->c.quota_messages_per_origin = 2;
	relay(fx);
	push_routes(fx, hops, 2);
	push_msgs(fx, 3, "R1", ms, 3);
	assert_int_equal(batch(fx, T0), 2);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0);
	assert_int_equal(ra->n_ids, 2);
	assert_true(ack_names(ra, "R1", "S9", 1) &&
		    ack_names(ra, "R1", "S9", 2));
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__QUOTA);
	assert_int_equal(ra->n_ids, 1);
	assert_int_equal(ra->ids[0]->seq, 3);
	assert_false(ra->about_query);
	assert_non_null(strstr(ra->detail, "quota_messages_per_origin 2"));
	assert_non_null(strstr(ra->detail, "R1"));
	assert_int_equal(out_of(fx, "R1", "S9", 1).status, SS_UNSEND);
	assert_false(out_of(fx, "R1", "S9", 3).found);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031"), 2);
	assert_int_equal(custody_of(fx, "R1", 0), 2);
	assert_int_equal(custody_of(fx, "R1", 1), 22);
	assert_int_equal(counts(fx).relay_refused[SEMQ__RELAY_REFUSAL__QUOTA],
			 1);

	/* Another origin has a quota of its own. */
	push_msgs(fx, 4, "R2", r2, 1);
	batch(fx, T0 + 10);
	assert_int_equal(
		relay_ack_of(fx, 4, SEMQ__RELAY_ACK__KIND__STORED, 0)->n_ids,
		1);

	/* Cancels of R1, at its quota: a held copy replaced, and one of a
	 * message never held here stored; never refused. */
	push_cancels(fx, 3, "R1", cancels, 2);
	batch(fx, T0 + 20);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0);
	assert_int_equal(ra->n_ids, 2);
	assert_int_equal(n_relay_acks(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
				      SEMQ__RELAY_REFUSAL__QUOTA),
			 0);
	assert_int_equal(out_of(fx, "R1", "S9", 1).status, SS_CANCELLED);
	assert_int_equal(out_of(fx, "R1", "S9", 5).status, SS_CANCELLED);
	assert_int_equal(custody_of(fx, "R1", 0), 3);
	assert_int_equal(custody_of(fx, "R1", 1), 11);

	/* quota_bytes_per_origin: 11 + 11 fit in 30, 11 more do not (the
	 * first copy of the frame counts for the second). */
	fx->c.quota_messages_per_origin = 100;
	fx->c.quota_bytes_per_origin = 30;
	push_msgs(fx, 3, "R1", more, 2);
	batch(fx, T0 + 30);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0);
	assert_int_equal(ra->n_ids, 1);
	assert_int_equal(ra->ids[0]->seq, 6);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__QUOTA);
	assert_int_equal(ra->n_ids, 1);
	assert_int_equal(ra->ids[0]->seq, 7);
	assert_non_null(strstr(ra->detail, "quota_bytes_per_origin 30"));
	assert_false(out_of(fx, "R1", "S9", 7).found);
	assert_int_equal(custody_of(fx, "R1", 1), 22);

	/* quota_messages, for all origins: 5 held, room for one more. */
	fx->c.quota_bytes_per_origin = (size_t)1 << 30;
	fx->c.quota_messages = 6;
	push_msgs(fx, 4, "R2", &r2[1], 2);
	batch(fx, T0 + 40);
	ra = relay_ack_of(fx, 4, SEMQ__RELAY_ACK__KIND__STORED, 0);
	assert_int_equal(ra->n_ids, 1);
	assert_int_equal(ra->ids[0]->seq, 2);
	ra = relay_ack_of(fx, 4, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__QUOTA);
	assert_int_equal(ra->n_ids, 1);
	assert_int_equal(ra->ids[0]->seq, 3);
	assert_non_null(strstr(ra->detail, "quota_messages 6"));
	assert_false(out_of(fx, "R2", "S9", 3).found);
	assert_int_equal(counts(fx).relay_refused[SEMQ__RELAY_REFUSAL__QUOTA],
			 2);
	/* ... and a cancel over it is stored all the same */
	push_cancels(fx, 4, "R2", &r2_cancel, 1);
	batch(fx, T0 + 50);
	assert_int_equal(relay_ack_of(fx, 4, SEMQ__RELAY_ACK__KIND__STORED, 0)
				 ->ids[0]
				 ->seq,
			 9);
	assert_int_equal(out_of(fx, "R2", "S9", 9).status, SS_CANCELLED);
	assert_int_equal(count_rows(fx, "SELECT sum(messages) FROM"
					" semq_custody"),
			 7);
}

/*
 * The cancel of a copy the relay holds replaces it: unsent (0), or sent
 * and not answered yet (4), the copy becomes the cancel (-2, no payload)
 * and the origin hears STORED; the next send to the destination carries
 * the cancels in the messages' place.
 */
static void test_relay_cancel_replaces_copy(void **state)
{
	struct fx *fx = *state;
	const struct route_hop r1 = {"R1", 3, 0, "", 2, LIFE_R1, 0, 0};
	const struct route_hop both[2] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
					  {"S1", 9, 0, "", 2, 0x51, 0, 0}};
	const struct mspec2 ms[2] = {
		{"R1", "S1", 1, NULL, 0, LIFE_R1, 0x11, 0, NULL},
		{"R1", "S1", 2, NULL, 0, LIFE_R1, 0x12, 0, NULL}};
	const Semq__Message *msgs[8];
	const Semq__RelayAck *ra;
	size_t i;

	relay(fx);
	push_routes(fx, &r1, 1);
	push_msgs(fx, 3, "R1", &ms[0], 1);
	batch(fx, T0);
	/* S1 comes: the copy goes (4); S1 leaves before answering */
	push_routes(fx, both, 2);
	batch(fx, T0 + 10);
	assert_int_equal(data_to(fx, 9, msgs, 8), 1);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_SEND);
	push_routes(fx, &r1, 1);
	push_msgs(fx, 3, "R1", &ms[1], 1);
	batch(fx, T0 + 20);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_UNSEND);
	assert_int_equal(custody_of(fx, "R1", 1), 22);

	push_cancels(fx, 3, "R1", ms, 2);
	batch(fx, T0 + 30);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0);
	assert_int_equal(ra->n_ids, 2);
	assert_true(ack_names(ra, "R1", "S1", 1) &&
		    ack_names(ra, "R1", "S1", 2));
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
	for (i = 1; i <= 2; i++) {
		struct out_view v = out_of(fx, "R1", "S1", i);

		assert_int_equal(v.status, SS_CANCELLED);
		assert_int_equal(v.result, -1);
		assert_int_equal(payload_len_of(fx, "R1", "S1", i), 0);
	}
	assert_int_equal(custody_of(fx, "R1", 0), 2);
	assert_int_equal(custody_of(fx, "R1", 1), 0);
	/* a second cancel: STORED again, nothing changes */
	push_cancels(fx, 3, "R1", ms, 1);
	batch(fx, T0 + 40);
	assert_int_equal(
		relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0)->n_ids,
		1);

	/* S1 is back: the cancels go in the messages' place. */
	push_routes(fx, both, 2);
	batch(fx, T0 + 50);
	assert_int_equal(data_to(fx, 9, msgs, 8), 2);
	for (i = 0; i < 2; i++) {
		assert_int_equal(msgs[i]->seq, i + 1);
		assert_true(msgs[i]->tombstone);
		assert_int_equal(msgs[i]->payload.len, 0);
		assert_true(msgs[i]->life == LIFE_R1);
		assert_int_equal(msgs[i]->digest, 0x11 + i);
		assert_string_equal(msgs[i]->stored_by, "P1");
	}
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_DATA), 0);
}

/*
 * A destination a relay has never seen: copies for it are held (STORED)
 * for unknown_dest_after from the first; after that, the periodic pass
 * holds them as undeliverable (8, result 8) and tells the origins that are
 * connected (RelayAck UNREACHABLE UNKNOWN_DEST) — an origin not connected
 * is told, and its copies held, right after it connects (PEER_UP); new
 * messages for it are refused at once. A destination named by [peer] or
 * [route], or seen connected once, is never unknown. The origin's
 * 810-Response with the digest takes its copy back.
 */
static void test_relay_unknown_dest(void **state)
{
	struct fx *fx = *state;
	struct cfg_peer peers[1];
	const struct route_hop r1 = {"R1", 3, 0, "", 2, LIFE_R1, 0, 0};
	const struct route_hop both[2] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
					  {"R2", 4, 0, "", 2, 0x52, 0, 0}};
	const struct route_hop with_s6[3] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
					     {"R2", 4, 0, "", 2, 0x52, 0, 0},
					     {"S6", 6, 0, "", 2, 0x56, 0, 0}};
	const struct mspec2 m1[2] = {
		{"R1", "S9", 1, NULL, 0, LIFE_R1, 0x11, 0, NULL},
		{"R2", "S9", 1, NULL, 0, 0x52, 0x21, 0, NULL}};
	const struct mspec2 m2 = {"R1",    "S9", 2, NULL, 0,
				  LIFE_R1, 0x12, 0, NULL};
	const struct mspec2 m3 = {"R1",    "S9", 3, NULL, 0,
				  LIFE_R1, 0x13, 0, NULL};
	const struct mspec2 named[3] = {
		{"R1", "S7", 1, NULL, 0, LIFE_R1, 0x71, 0, NULL},
		{"R1", "S8", 1, NULL, 0, LIFE_R1, 0x81, 0, NULL},
		{"R1", "S6", 1, NULL, 0, LIFE_R1, 0x61, 0, NULL}};
	const Semq__RelayAck *ra;
	struct out_view v;
	size_t i;

	memset(peers, 0, sizeof peers);
	snprintf(peers[0].name, sizeof peers[0].name, "S7");
	fx->c.peers = peers;
	fx->c.n_peers = 1;
	snprintf(fx->routes[0].dest, sizeof fx->routes[0].dest, "S8");
	snprintf(fx->routes[0].via, sizeof fx->routes[0].via, "P2");
	fx->c.n_routes = 1;
	fx->c.unknown_dest_after_ms = 1000; /* a pass every 250 ms */
	relay(fx);
	push_routes(fx, both, 2);
	push_msgs(fx, 3, "R1", &m1[0], 1);
	push_msgs(fx, 4, "R2", &m1[1], 1);
	batch(fx, T0);
	assert_int_equal(
		relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0)->n_ids,
		1);
	assert_int_equal(
		relay_ack_of(fx, 4, SEMQ__RELAY_ACK__KIND__STORED, 0)->n_ids,
		1);
	push_routes(fx, &r1, 1); /* R2 leaves */
	batch(fx, T0 + 10);
	/* within unknown_dest_after: held, stored */
	push_msgs(fx, 3, "R1", &m2, 1);
	batch(fx, T0 + 500);
	assert_int_equal(
		relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0)->n_ids,
		1);
	assert_int_equal(batch(fx, T0 + 760), 0); /* a pass: not yet */
	assert_int_equal(out_of(fx, "R1", "S9", 1).status, SS_UNSEND);

	/* The pass after unknown_dest_after: R1's copies held and R1 told;
	 * R2 is not connected: its copy waits. */
	batch(fx, T0 + 1010);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__UNKNOWN_DEST);
	assert_int_equal(ra->n_ids, 2);
	assert_true(ack_names(ra, "R1", "S9", 1) &&
		    ack_names(ra, "R1", "S9", 2));
	assert_false(ra->about_query);
	for (i = 0; i < ra->n_ids; i++) {
		assert_true(ra->ids[i]->life == LIFE_R1);
		assert_int_equal(ra->ids[i]->digest, 0x10 + ra->ids[i]->seq);
	}
	assert_int_equal(fx->n_got, 1);
	for (i = 1; i <= 2; i++) {
		v = out_of(fx, "R1", "S9", i);
		assert_int_equal(v.status, SS_HELD);
		assert_int_equal(v.result, RES_UNDELIVERABLE);
		assert_non_null(strstr(v.last_error, "unknown_dest_after"));
	}
	assert_int_equal(out_of(fx, "R2", "S9", 1).status, SS_UNSEND);
	assert_int_equal(
		counts(fx).relay_refused[SEMQ__RELAY_REFUSAL__UNKNOWN_DEST], 2);
	/* the next pass is not due yet */
	assert_int_equal(batch(fx, T0 + 1015), 0);

	/* R2 connects: told at once, its copy held. */
	push_routes(fx, both, 2);
	push_peer_up(fx, 4, "R2");
	batch(fx, T0 + 1020);
	ra = relay_ack_of(fx, 4, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__UNKNOWN_DEST);
	assert_int_equal(ra->n_ids, 1);
	assert_true(ack_names(ra, "R2", "S9", 1));
	assert_int_equal(ra->ids[0]->digest, 0x21);
	v = out_of(fx, "R2", "S9", 1);
	assert_int_equal(v.status, SS_HELD);
	assert_int_equal(v.result, RES_UNDELIVERABLE);

	/* A new message for S9: refused at once, nothing stored. */
	push_msgs(fx, 3, "R1", &m3, 1);
	batch(fx, T0 + 1030);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__UNKNOWN_DEST);
	assert_int_equal(ra->n_ids, 1);
	assert_int_equal(ra->ids[0]->seq, 3);
	assert_non_null(strstr(ra->detail, "unknown_dest_after"));
	assert_int_equal(n_relay_acks(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0),
			 0);
	assert_false(out_of(fx, "R1", "S9", 3).found);

	/* S6 connects once, then leaves. */
	push_routes(fx, with_s6, 3);
	push_peer_up(fx, 6, "S6");
	batch(fx, T0 + 1040);
	push_routes(fx, both, 2);
	batch(fx, T0 + 1050);
	/* S7 ([peer]), S8 ([route]) and S6 (seen): stored long after
	 * unknown_dest_after, and never held by a pass. */
	push_msgs(fx, 3, "R1", named, 3);
	batch(fx, T0 + 5000);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0);
	assert_int_equal(ra->n_ids, 3);
	batch(fx, T0 + 5000 + 2000);
	batch(fx, T0 + 5000 + 4000);
	assert_int_equal(out_of(fx, "R1", "S7", 1).status, SS_UNSEND);
	assert_int_equal(out_of(fx, "R1", "S8", 1).status, SS_UNSEND);
	assert_int_equal(out_of(fx, "R1", "S6", 1).status, SS_UNSEND);
	/* ... while S9's copies are told again on every pass */
	assert_true(ack_names(relay_ack_of(fx, 3,
					   SEMQ__RELAY_ACK__KIND__UNREACHABLE,
					   SEMQ__RELAY_REFUSAL__UNKNOWN_DEST),
			      "R1", "S9", 1));

	/* R1 takes its copy back (810-Response with its digest). */
	push_response2(fx, 3, "R1", "R1", "R1", "S9", 1, LIFE_R1, 0x11);
	batch(fx, T0 + 9100);
	assert_false(out_of(fx, "R1", "S9", 1).found);
	assert_int_equal(out_of(fx, "R1", "S9", 2).status, SS_HELD);
	assert_int_equal(custody_of(fx, "R1", 0), 4); /* S9/2, S6, S7, S8 */
}

/*
 * The pass over a destination nobody knows tells every connected origin,
 * however many copies origins that are not connected hold for it: a
 * backlog of 4,096 copies of an origin that is away (A2) does not keep
 * R1, connected, from hearing UNKNOWN_DEST about its copy.
 * (notify_unknown reads the copies origin by origin, only of those it can
 * tell now.)
 */
static void test_relay_unknown_dest_backlog(void **state)
{
	struct fx *fx = *state;
	const struct route_hop r1 = {"R1", 3, 0, "", 2, LIFE_R1, 0, 0};
	const struct mspec2 m = {"R1",    "S9", 1, NULL, 0,
				 LIFE_R1, 0x11, 0, NULL};
	int64_t first = 0;
	int seen = 0;
	uint64_t seq;

	fx->c.unknown_dest_after_ms = 1000;
	relay(fx);
	/* A2 (away now) left 4,096 copies for S9 here. */
	assert_int_equal(store_begin(fx->st), SEMQ_OK);
	assert_int_equal(store_dest_note(fx->st, "S9", T0, &first, &seen),
			 SEMQ_OK);
	for (seq = 1; seq <= 4096; seq++) {
		struct msg c;

		memset(&c, 0, sizeof c);
		snprintf(c.id.origin, sizeof c.id.origin, "A2");
		snprintf(c.id.dest, sizeof c.id.dest, "S9");
		c.id.seq = seq;
		c.id.life = 0xa2;
		c.type = 7;
		c.created_at = T0;
		c.payload = (uint8_t *)"x";
		c.payload_len = 1;
		assert_int_equal(store_enqueue_copy(fx->st, &c, T0), SEMQ_OK);
	}
	assert_int_equal(store_commit(fx->st), SEMQ_OK);
	push_routes(fx, &r1, 1);
	push_msgs(fx, 3, "R1", &m, 1);
	batch(fx, T0 + 10);
	assert_int_equal(
		relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0)->n_ids,
		1);

	batch(fx, T0 + 1010);
	batch(fx, T0 + 2010);
	assert_int_equal(out_of(fx, "A2", "S9", 1).status, SS_UNSEND);
	assert_int_equal(n_relay_acks(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
				      SEMQ__RELAY_REFUSAL__UNKNOWN_DEST),
			 1);
	assert_int_equal(out_of(fx, "R1", "S9", 1).status, SS_HELD);
}

/*
 * A relay answers a Query about its custody itself: a copy held unsent,
 * RelayAck STORED (about_query); a copy sent and unanswered, with the
 * destination connected, the Query goes on to it, and with the
 * destination gone, STORED; a copy held as undeliverable, or a message of
 * a destination it refuses, UNKNOWN_DEST (about_query); no copy and no
 * link onwards, UNREACHABLE NOT_CONNECTED (about_query).
 */
static void test_relay_query_custody(void **state)
{
	struct fx *fx = *state;
	const struct route_hop r1 = {"R1", 3, 0, "", 2, LIFE_R1, 0, 0};
	const struct route_hop both[2] = {{"R1", 3, 0, "", 2, LIFE_R1, 0, 0},
					  {"S1", 9, 0, "", 2, 0x51, 0, 0}};
	const struct mspec2 ms[2] = {
		{"R1", "S1", 1, NULL, 0, LIFE_R1, 0x11, 0, NULL},
		{"R1", "S9", 1, NULL, 0, LIFE_R1, 0x91, 0, NULL}};
	const Semq__RelayAck *ra;
	const Semq__Frame *f;

	fx->c.unknown_dest_after_ms = 1000;
	relay(fx);
	/* S1 has been connected here before */
	push_routes(fx, both, 2);
	push_peer_up(fx, 9, "S1");
	batch(fx, T0 - 100);
	push_routes(fx, &r1, 1);
	batch(fx, T0 - 90);
	push_msgs(fx, 3, "R1", ms, 2);
	batch(fx, T0);
	assert_int_equal(
		relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0)->n_ids,
		2);

	/* held unsent: STORED, about the query */
	push_query2(fx, 3, "R1", "R1", "S1", 1, LIFE_R1, 0x11);
	assert_int_equal(batch(fx, T0 + 10), 1);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0);
	assert_true(ra->about_query);
	assert_int_equal(ra->n_ids, 1);
	assert_int_equal(ra->ids[0]->seq, 1);
	assert_int_equal(ra->ids[0]->digest, 0x11);
	/* nothing held, nowhere to ask: NOT_CONNECTED, about the query */
	push_query2(fx, 3, "R1", "R1", "S1", 7, LIFE_R1, 0x17);
	assert_int_equal(batch(fx, T0 + 20), 1);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__NOT_CONNECTED);
	assert_true(ra->about_query);
	assert_int_equal(ra->ids[0]->seq, 7);

	/* S9's copy held as undeliverable: UNKNOWN_DEST, about the query;
	 * so is a message of S9 it does not hold. */
	batch(fx, T0 + 1100);
	assert_int_equal(out_of(fx, "R1", "S9", 1).status, SS_HELD);
	push_query2(fx, 3, "R1", "R1", "S9", 1, LIFE_R1, 0x91);
	assert_int_equal(batch(fx, T0 + 1110), 1);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__UNKNOWN_DEST);
	assert_true(ra->about_query);
	assert_int_equal(ra->ids[0]->seq, 1);
	push_query2(fx, 3, "R1", "R1", "S9", 5, LIFE_R1, 0x95);
	assert_int_equal(batch(fx, T0 + 1120), 1);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__UNKNOWN_DEST);
	assert_true(ra->about_query);
	assert_int_equal(ra->ids[0]->seq, 5);

	/* S1 connected, the copy sent and unanswered: the Query goes on. */
	push_routes(fx, both, 2);
	batch(fx, T0 + 1200);
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_SEND);
	push_query2(fx, 3, "R1", "R1", "S1", 1, LIFE_R1, 0x11);
	batch(fx, T0 + 1210);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_RELAY_ACK), 0);
	f = frame_at(fx, 9, SEMQ__FRAME__BODY_QUERY, 0);
	assert_int_equal(f->query->n_ids, 1);
	assert_int_equal(f->query->ids[0]->seq, 1);
	assert_int_equal(f->query->ids[0]->digest, 0x11);
	/* S1 gone again: the relay answers for its copy in doubt */
	push_routes(fx, &r1, 1);
	push_query2(fx, 3, "R1", "R1", "S1", 1, LIFE_R1, 0x11);
	batch(fx, T0 + 1220);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__STORED, 0);
	assert_true(ra->about_query);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_QUERY), 0);
}

/*
 * At the origin, RelayAck STORED puts a row in the relay's custody (6,
 * custodian P1), asked about only after custody_query_after; custody is
 * outside the window (window = 2: four rows stored, all four sent, and a
 * fifth). The relay's answers about a query: STORED again, asked again
 * after custody_query_after; UNREACHABLE about_query (it cannot pass the
 * question on), asked again about 2 x reconnect_min later, the row as it
 * was.
 */
static void test_origin_custody_outside_window(void **state)
{
	struct fx *fx = *state;
	const uint64_t one_two[2] = {1, 2}, three_four[2] = {3, 4};
	const int64_t cq = fx->c.custody_query_after_ms;
	const int64_t qa = fx->c.query_after_ms;
	uint64_t life, asked[8];
	char buf[SEMQ_ID_MAX + 1];
	struct out_view v;
	size_t i, k, n = 0;

	sender_via_p1(fx, 2, 2);
	life = store_life(fx->st);
	enqueue(fx, "S9", 4);
	batch(fx, T0);
	expect_data(fx, 5, "S9", 1, 2);

	push_relay_ack(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__STORED, "R1", "S9",
		       one_two, 2, "");
	batch(fx, T0 + 10);
	for (i = 1; i <= 2; i++) {
		v = out_of(fx, "R1", "S9", i);
		assert_int_equal(v.status, SS_ACK);
		assert_int_equal(v.next_at, T0 + 10 + cq);
		assert_string_equal(
			custodian_of(fx, "R1", "S9", i, buf, sizeof buf), "P1");
	}
	/* the window is free again: 3 and 4 go in the same batch */
	expect_data(fx, 5, "S9", 3, 4);
	push_relay_ack(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__STORED, "R1", "S9",
		       three_four, 2, "");
	batch(fx, T0 + 20);
	for (i = 1; i <= 4; i++)
		assert_string_equal(
			custodian_of(fx, "R1", "S9", i, buf, sizeof buf), "P1");
	enqueue_key(fx, "S9", NULL, "5");
	batch(fx, T0 + 30);
	expect_data(fx, 5, "S9", 5, 5);

	/* Not asked about before custody_query_after. */
	assert_int_equal(batch(fx, T0 + 30 + qa - 1), 0);
	batch(fx, T0 + 10 + cq);
	for (k = 0; k < count_frames(fx, 5, SEMQ__FRAME__BODY_QUERY); k++) {
		const Semq__Frame *f =
			frame_at(fx, 5, SEMQ__FRAME__BODY_QUERY, k);
		for (i = 0; i < f->query->n_ids; i++) {
			assert_true(n < 8);
			asked[n++] = f->query->ids[i]->seq;
		}
	}
	assert_int_equal(n, 3); /* 5 (in flight), 1, 2 (in custody) */
	assert_int_equal(asked[0], 5);
	assert_int_equal(asked[1], 1);
	assert_int_equal(asked[2], 2);

	/* about the query: STORED (still held) / UNREACHABLE (cannot ask) */
	push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__STORED, 0, 1, "R1",
			"S9", 1, life, 0, "held here for delivery");
	push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			SEMQ__RELAY_REFUSAL__NOT_CONNECTED, 1, "R1", "S9", 2,
			life, 0, "destination not connected");
	batch(fx, T0 + 20 + cq);
	v = out_of(fx, "R1", "S9", 1);
	assert_int_equal(v.status, SS_ACK);
	assert_int_equal(v.next_at, T0 + 20 + 2 * cq);
	/* asked again after half the time it has been in doubt, at most
	 * query_after (a row sent a moment ago: 2 x reconnect_min) */
	v = out_of(fx, "R1", "S9", 2);
	assert_int_equal(v.status, SS_ACK);
	assert_int_equal(v.next_at, T0 + 20 + cq + fx->c.query_after_ms);
	assert_int_equal(v.attempts, 1);
	assert_string_equal(custodian_of(fx, "R1", "S9", 2, buf, sizeof buf),
			    "P1");
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
}

/*
 * A RelayAck is about the message whose digest it carries. The relay's
 * STORED for messages that a refusal in the same batch renumbered (their
 * acks were on the wire already) arrives when their old seqs hold the
 * fillers that take their place: the fillers are other messages, so they
 * are not taken into custody (which would keep them from the destination
 * for custody_query_after, its watermark stuck below them) but sent at
 * once. STORED with a filler's own digest does take the filler into
 * custody.
 */
static void test_origin_relay_ack_of_renumbered(void **state)
{
	struct fx *fx = *state;
	const int64_t cq = fx->c.custody_query_after_ms;
	const int64_t qa = fx->c.query_after_ms;
	const Semq__Message *msgs[8];
	uint64_t life, dg[4], fd2;
	char buf[SEMQ_ID_MAX + 1];
	struct vspec vs;
	struct out_view v;
	size_t n, i, fillers = 0;

	sender_via_p1(fx, 1000, 2);
	life = store_life(fx->st);
	for (i = 1; i <= 4; i++)
		assert_int_equal(enqueue_key(fx, "S9", "K", "k"), i);
	batch(fx, T0);
	n = data_to(fx, 5, msgs, 8);
	assert_int_equal(n, 4);
	for (i = 0; i < 4; i++)
		dg[i] = msgs[i]->digest;

	/* P1 holds another message under 1 (and has seen up to 2); its
	 * STORED for 2, 3 and 4 follows in the same batch. */
	conflict_of(&vs, "S9", 1, life, dg[0], 2);
	push_verdict(fx, 5, "P1", &vs);
	for (i = 1; i < 4; i++)
		push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__STORED, 0,
				0, "R1", "S9", i + 1, life, dg[i], "");
	batch(fx, T0 + 10);

	/* 1..4 went to 5..8; 2, 3 and 4 hold fillers, none in custody, all
	 * sent in this batch and asked about after query_after */
	n = data_to(fx, 5, msgs, 8);
	for (i = 0; i < n; i++)
		if (msgs[i]->tombstone)
			fillers++;
	assert_int_equal(fillers, 3);
	assert_int_equal(n, 7);
	for (i = 2; i <= 4; i++) {
		v = out_of(fx, "R1", "S9", i);
		assert_int_equal(v.status, SS_CANCELLED);
		assert_int_equal(v.result, -1);
		assert_int_equal(v.next_at, T0 + 10 + qa);
		assert_string_equal(
			custodian_of(fx, "R1", "S9", i, buf, sizeof buf), "");
	}

	/* STORED with the filler's own digest: in custody */
	fd2 = filler_of("S9", life, 2);
	push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__STORED, 0, 0, "R1",
			"S9", 2, life, fd2, "");
	batch(fx, T0 + 20);
	v = out_of(fx, "R1", "S9", 2);
	assert_int_equal(v.status, SS_CANCELLED);
	assert_int_equal(v.next_at, T0 + 20 + cq);
	assert_string_equal(custodian_of(fx, "R1", "S9", 2, buf, sizeof buf),
			    "P1");
}

/*
 * RelayAck FORWARDED: 6 without a custodian, in flight — it counts in the
 * window; STORED for such a row later takes it into custody and frees its
 * place.
 */
static void test_origin_forwarded_in_window(void **state)
{
	struct fx *fx = *state;
	const uint64_t one_two[2] = {1, 2}, one = 1;
	char buf[SEMQ_ID_MAX + 1];
	struct out_view v;

	sender_via_p1(fx, 2, 2);
	enqueue(fx, "S8", 3);
	batch(fx, T0);
	expect_data(fx, 5, "S8", 1, 2);
	push_relay_ack(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__FORWARDED, "R1",
		       "S8", one_two, 2, "");
	assert_int_equal(batch(fx, T0 + 10), 0);
	v = out_of(fx, "R1", "S8", 1);
	assert_int_equal(v.status, SS_ACK);
	assert_int_equal(v.next_at, T0 + 10 + fx->c.query_after_ms);
	assert_string_equal(custodian_of(fx, "R1", "S8", 1, buf, sizeof buf),
			    "");
	assert_int_equal(out_of(fx, "R1", "S8", 3).status, SS_UNSEND);
	push_relay_ack(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__STORED, "R1", "S8",
		       &one, 1, "");
	batch(fx, T0 + 20);
	assert_string_equal(custodian_of(fx, "R1", "S8", 1, buf, sizeof buf),
			    "P1");
	expect_data(fx, 5, "S8", 3, 3);
}

/* The wire digest of R1/dest/seq as last sent in a Data frame to conn. */
static uint64_t sent_digest(const struct fx *fx, uint64_t conn, uint64_t seq)
{
	const Semq__Message *msgs[16];
	size_t n = data_to(fx, conn, msgs, 16), i;

	for (i = 0; i < n; i++)
		if (msgs[i]->seq == seq)
			return msgs[i]->digest;
	fail_msg("seq %" PRIu64 " not sent to conn %" PRIu64, seq, conn);
	return 0;
}

/*
 * A message larger than the next hop accepts in a frame (its Hello's
 * max_frame, below ours) would close the link at every try: it is not
 * sent; this node's own goes dead for the operator (held, 8, result 8,
 * a dead tb_0033 entry saying to raise max_frame), counted once, and the
 * messages around it go on.
 */
static void test_origin_too_big_for_hop(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hop = {"S1", 7, 0, "", 2, 0x5e1, 8192, 0};
	char err[SEMQ_ERRLEN] = "";
	static uint8_t big[10000];
	struct out_view v;
	struct msg m;
	uint64_t seq = 0;
	sqlite3_stmt *s;

	sender(fx, 1000);
	enqueue(fx, "S1", 1);
	memset(&m, 0, sizeof m);
	snprintf(m.id.dest, sizeof m.id.dest, "S1");
	m.type = 7;
	m.payload = big;
	m.payload_len = sizeof big;
	m.created_at = T0;
	if (store_enqueue(fx->st, &m, &seq, err, sizeof err) != SEMQ_OK)
		fail_msg("store_enqueue: %s", err);
	assert_int_equal(seq, 2);
	enqueue_key(fx, "S1", NULL, "after");
	push_routes(fx, &hop, 1);
	(void)counts(fx);
	batch(fx, T0);

	/* 1 and 3 go; 2 is dead, not sent */
	assert_int_equal(out_of(fx, "R1", "S1", 1).status, SS_SEND);
	assert_int_equal(out_of(fx, "R1", "S1", 3).status, SS_SEND);
	v = out_of(fx, "R1", "S1", 2);
	assert_int_equal(v.status, SS_HELD);
	assert_int_equal(v.result, RES_UNDELIVERABLE);
	assert_non_null(strstr(v.last_error, "larger than the next hop"));
	s = prep(fx, "SELECT status, last_error FROM tb_0033 WHERE"
		     " origin = 'R1' AND dest = 'S1' AND seq = 2");
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(s, 0), RS_DEAD);
	assert_non_null(
		strstr((const char *)sqlite3_column_text(s, 1), "max_frame"));
	sqlite3_finalize(s);
	assert_int_equal(counts(fx).undeliverable, 1);

	/* Later passes neither send it nor count it again. */
	batch(fx, T0 + 3 * fx->c.query_after_ms);
	assert_int_equal(out_of(fx, "R1", "S1", 2).status, SS_HELD);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0033"), 1);
	assert_int_equal(counts(fx).undeliverable, 0);
}

/*
 * The relay refuses custody: QUOTA puts the row back to unsent with the
 * reason in last_error, sent again after a back-off; UNKNOWN_DEST makes
 * this node's message undeliverable (8, result 8, a dead tb_0033 entry of
 * its own, counted), and the relay's copy is taken back (an 810-Response
 * with the digest towards the relay). redo retry sends it again.
 */
static void test_origin_relay_refusals(void **state)
{
	struct fx *fx = *state;
	const char *qwhy =
		"the custody quota of origin R1 is full (5 messages)";
	uint64_t life, d[4];
	struct redo_view rv;
	struct out_view v;
	struct proto_counts pc;
	const Semq__Frame *f;
	sqlite3_stmt *s;
	int64_t rid = 0;

	sender_via_p1(fx, 1000, 2);
	life = store_life(fx->st);
	enqueue(fx, "S9", 3);
	batch(fx, T0);
	d[1] = sent_digest(fx, 5, 1);
	d[2] = sent_digest(fx, 5, 2);
	(void)counts(fx);

	/* QUOTA */
	push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			SEMQ__RELAY_REFUSAL__QUOTA, 0, "R1", "S9", 1, life,
			d[1], qwhy);
	assert_int_equal(batch(fx, T0 + 10), 0);
	v = out_of(fx, "R1", "S9", 1);
	assert_int_equal(v.status, SS_UNSEND);
	assert_true(v.next_at > T0 + 10);
	assert_int_equal(v.next_at, T0 + 10 + fx->c.reconnect_min_ms);
	assert_true(strncmp(v.last_error, "relay P1: custody quota full (",
			    30) == 0);
	assert_non_null(strstr(v.last_error, qwhy));
	batch(fx, T0 + 10 + fx->c.reconnect_min_ms);
	expect_data(fx, 5, "S9", 1, 1);

	/* UNKNOWN_DEST */
	push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			SEMQ__RELAY_REFUSAL__UNKNOWN_DEST, 0, "R1", "S9", 2,
			life, d[2], "destination unknown");
	batch(fx, T0 + 1000);
	v = out_of(fx, "R1", "S9", 2);
	assert_int_equal(v.status, SS_HELD);
	assert_int_equal(v.result, RES_UNDELIVERABLE);
	assert_non_null(strstr(v.last_error, "relay P1 does not know S9"));
	s = prep(fx, "SELECT id, status, last_error FROM tb_0033 WHERE"
		     " origin = 'R1' AND dest = 'S9' AND seq = 2");
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	rid = sqlite3_column_int64(s, 0);
	assert_int_equal(sqlite3_column_int(s, 1), RS_DEAD);
	assert_non_null(strstr((const char *)sqlite3_column_text(s, 2),
			       "semqctl redo retry"));
	sqlite3_finalize(s);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0033"), 1);
	f = frame_at(fx, 5, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_string_equal(f->ack_response->from, "R1");
	assert_int_equal(f->ack_response->n_ids, 1);
	assert_int_equal(f->ack_response->ids[0]->seq, 2);
	assert_true(f->ack_response->ids[0]->digest == d[2]);
	assert_true(f->ack_response->ids[0]->life == life);
	pc = counts(fx);
	assert_int_equal(pc.undeliverable, 1);
	/* held: not sent, not queried (1 and 3 are) */
	batch(fx, T0 + 1000 + 3 * fx->c.query_after_ms);
	assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA), 0);
	f = frame_at(fx, 5, SEMQ__FRAME__BODY_QUERY, 0);
	assert_int_equal(f->query->n_ids, 2);
	assert_int_equal(f->query->ids[0]->seq + f->query->ids[1]->seq, 4);
	assert_int_equal(out_of(fx, "R1", "S9", 2).status, SS_HELD);

	/* redo retry: it goes out again */
	assert_int_equal(store_begin(fx->st), SEMQ_OK);
	assert_int_equal(store_redo_retry(fx->st, rid, T0 + 200000), SEMQ_OK);
	assert_int_equal(store_commit(fx->st), SEMQ_OK);
	rv = redo_at(fx, "R1", "S9", 2);
	assert_int_equal(rv.status, RS_DONE);
	push_wake(fx);
	batch(fx, T0 + 200000);
	expect_data(fx, 5, "S9", 2, 2);
	v = out_of(fx, "R1", "S9", 2);
	assert_int_equal(v.status, SS_SEND);
	assert_true(sent_digest(fx, 5, 2) == d[2]);
}

/*
 * A repeated UNKNOWN_DEST about a row already held, one confirmed since,
 * or one that is gone only takes the relay's copy back: no second dead
 * entry, and nothing counted as undeliverable again.
 */
static void test_origin_unknown_dest_again(void **state)
{
	struct fx *fx = *state;
	const uint64_t two = 2;
	const int processed = RES_PROCESSED;
	uint64_t life, d1, d2;
	struct proto_counts pc[3];
	const Semq__Frame *f;
	struct redo_view rv;
	int k;

	sender_via_p1(fx, 1000, 2);
	life = store_life(fx->st);
	enqueue(fx, "S9", 2);
	batch(fx, T0);
	d1 = sent_digest(fx, 5, 1);
	d2 = sent_digest(fx, 5, 2);
	push_indication(fx, 5, "P1", "R1", "S9", &two, &processed, 1);
	batch(fx, T0 + 10);
	assert_int_equal(out_of(fx, "R1", "S9", 2).status, SS_ACK2);
	push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			SEMQ__RELAY_REFUSAL__UNKNOWN_DEST, 0, "R1", "S9", 1,
			life, d1, "destination unknown");
	batch(fx, T0 + 20);
	assert_int_equal(out_of(fx, "R1", "S9", 1).status, SS_HELD);
	assert_int_equal(counts(fx).undeliverable, 1);

	/* held already; finished; gone */
	for (k = 0; k < 3; k++) {
		const uint64_t seq = k == 0 ? 1 : k == 1 ? 2 : 9;

		push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__UNREACHABLE,
				SEMQ__RELAY_REFUSAL__UNKNOWN_DEST, 0, "R1",
				"S9", seq, life,
				k == 0   ? d1
				: k == 1 ? d2
					 : 0x99,
				"destination unknown");
		batch(fx, T0 + 30 + k);
		f = frame_at(fx, 5, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
		assert_int_equal(f->ack_response->n_ids, 1);
		assert_int_equal(f->ack_response->ids[0]->seq, seq);
		assert_int_equal(count_frames(fx, 0, SEMQ__FRAME__BODY_DATA),
				 0);
		pc[k] = counts(fx);
	}
	rv = redo_at(fx, "R1", "S9", 1);
	assert_int_equal(rv.status, RS_DEAD);
	assert_int_equal(rv.tries, 0);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0033"), 1);
	assert_int_equal(out_of(fx, "R1", "S9", 2).status, SS_ACK2);
	/* A repeat makes nothing undeliverable: not counted again. */
	for (k = 0; k < 3; k++)
		assert_int_equal(pc[k].undeliverable, 0);
}

/*
 * 2,000 cancels for a destination that is not reachable (no route) hold
 * nothing up: a reachable destination's messages go in the same batches
 * (batch_max 1000). When the destination comes, its cancels go, a
 * batch_max at a time.
 */
static void test_origin_cancels_dead_dest(void **state)
{
	struct fx *fx = *state;
	const struct route_hop s1 = {"S1", 7, 0, "", 2, 0x51, 0, 0};
	const struct route_hop both[2] = {{"S1", 7, 0, "", 2, 0x51, 0, 0},
					  {"S9", 8, 0, "", 2, 0x59, 0, 0}};
	char err[SEMQ_ERRLEN] = "";
	uint64_t life;
	size_t i, k, tombs;
	int n;

	sender(fx, 1000);
	life = store_life(fx->st);
	assert_int_equal(store_begin(fx->st), SEMQ_OK);
	for (i = 0; i < 2000; i++) {
		struct msg m;
		struct msgid id;
		uint64_t seq = 0;

		memset(&m, 0, sizeof m);
		snprintf(m.id.dest, sizeof m.id.dest, "S9");
		m.type = 7;
		m.payload = (uint8_t *)"x";
		m.payload_len = 1;
		m.created_at = T0;
		if (store_enqueue(fx->st, &m, &seq, err, sizeof err) != SEMQ_OK)
			fail_msg("store_enqueue: %s", err);
		memset(&id, 0, sizeof id);
		snprintf(id.origin, sizeof id.origin, "R1");
		snprintf(id.dest, sizeof id.dest, "S9");
		id.seq = seq;
		id.life = life;
		assert_int_equal(store_cancel(fx->st, &id, T0 - 1000), SEMQ_OK);
	}
	assert_int_equal(store_commit(fx->st), SEMQ_OK);
	enqueue(fx, "S1", 5);

	push_routes(fx, &s1, 1);
	batch(fx, T0);
	expect_data(fx, 7, "S1", 1, 5);
	for (i = 6; i <= 8; i++)
		enqueue_key(fx, "S1", NULL, "more");
	batch(fx, T0 + 10);
	assert_int_equal(count_frames(fx, 7, SEMQ__FRAME__BODY_DATA), 1);
	assert_int_equal(
		frame_at(fx, 7, SEMQ__FRAME__BODY_DATA, 0)->data->n_messages,
		3);
	/* the cancels were not even read: their deadline is as it was */
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031 WHERE"
					" dest = 'S9' AND status = -2 AND"
					" next_attempt_at = 1699999999000"),
			 2000);

	/* S9 comes: its cancels go, 1000 a batch. */
	for (k = 0; k < 2; k++) {
		push_routes(fx, both, 2);
		batch(fx, T0 + 20 + (int64_t)k);
		tombs = 0;
		n = 0;
		for (i = 0; i < fx->n_got; i++) {
			const Semq__Frame *f = fx->got[i].f;
			size_t j;

			if (fx->got[i].conn != 8 ||
			    f->body_case != SEMQ__FRAME__BODY_DATA)
				continue;
			for (j = 0; j < f->data->n_messages; j++) {
				tombs += f->data->messages[j]->tombstone;
				n++;
			}
		}
		assert_int_equal(n, 1000);
		assert_int_equal(tombs, 1000);
	}
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031 WHERE"
					" dest = 'S9' AND status = -2 AND"
					" next_attempt_at = 1699999999000"),
			 0);
}

/*
 * A stream whose hop is of wire revision 1 (a SEMQ 0.1 relay, whose
 * stored copies lose the life) goes without its life from then on: Data
 * and Query frames carry life 0, also later through a revision-2 hop; an
 * indication with another life (the 0.1 relay's copy filed under the
 * legacy life) confirms this node's row.
 */
static void test_origin_life_hidden_after_rev1(void **state)
{
	struct fx *fx = *state;
	const struct route_hop rev2 = {"P1", 6, 1, "", 2, 0x71, 0, 0};
	const Semq__Message *msgs[8];
	const Semq__Frame *f;
	struct vspec vs;
	uint64_t life;
	size_t i, k;

	sender_via_p1(fx, 1000, 1);
	life = store_life(fx->st);
	enqueue(fx, "S9", 1);
	enqueue(fx, "S8", 1);
	batch(fx, T0);
	assert_int_equal(data_to(fx, 5, msgs, 8), 2);
	for (i = 0; i < 2; i++)
		assert_true(msgs[i]->life == SEMQ_LIFE_NONE);
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM semq_stream_out"
					" WHERE life_hidden = 1"),
			 2);

	/* a revision-2 hop now: still without the life */
	push_routes(fx, &rev2, 1);
	enqueue_key(fx, "S9", NULL, "2");
	batch(fx, T0 + 10);
	assert_int_equal(data_to(fx, 6, msgs, 8), 1);
	assert_int_equal(msgs[0]->seq, 2);
	assert_true(msgs[0]->life == SEMQ_LIFE_NONE);
	assert_true(msgs[0]->digest != 0);
	batch(fx, T0 + 10 + fx->c.query_after_ms);
	assert_true(count_frames(fx, 6, SEMQ__FRAME__BODY_QUERY) > 0);
	for (k = 0; k < count_frames(fx, 6, SEMQ__FRAME__BODY_QUERY); k++) {
		f = frame_at(fx, 6, SEMQ__FRAME__BODY_QUERY, k);
		for (i = 0; i < f->query->n_ids; i++)
			assert_true(f->query->ids[i]->life == SEMQ_LIFE_NONE);
	}

	/* verdicts under the legacy life, or this node's, are its own */
	memset(&vs, 0, sizeof vs);
	vs.origin = "R1";
	vs.dest = "S9";
	vs.seq = 1;
	vs.life = SEMQ_LIFE_LEGACY;
	vs.result = SEMQ__RESULT__RESULT_PROCESSED;
	push_verdict(fx, 6, "P1", &vs);
	batch(fx, T0 + 20 + fx->c.query_after_ms);
	assert_int_equal(out_of(fx, "R1", "S9", 1).status, SS_ACK2);
	assert_int_equal(out_of(fx, "R1", "S9", 1).result, RES_PROCESSED);
	f = frame_at(fx, 6, SEMQ__FRAME__BODY_ACK_RESPONSE, 0);
	assert_int_equal(f->ack_response->ids[0]->seq, 1);
	assert_true(f->ack_response->ids[0]->life == SEMQ_LIFE_NONE);
	vs.seq = 2;
	vs.life = life;
	push_verdict(fx, 6, "P1", &vs);
	batch(fx, T0 + 30 + fx->c.query_after_ms);
	assert_int_equal(out_of(fx, "R1", "S9", 2).status, SS_ACK2);
	/* the stream to S8 likewise (it went through the 0.1 hop too) */
	vs.dest = "S8";
	vs.seq = 1;
	vs.life = SEMQ_LIFE_LEGACY;
	push_verdict(fx, 6, "P1", &vs);
	batch(fx, T0 + 40 + fx->c.query_after_ms);
	assert_int_equal(out_of(fx, "R1", "S8", 1).status, SS_ACK2);
}

/* Data for S1 that has passed hops relays already, from R1 on conn 3. */
static void push_hops(struct fx *fx, uint64_t seq, unsigned hops)
{
	Semq__Message w = SEMQ__MESSAGE__INIT, *pw = &w;
	Semq__Data d = SEMQ__DATA__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	w.origin = "R1";
	w.dest = "S1";
	w.seq = seq;
	w.type = 7;
	w.key = "";
	w.created_at = T0;
	w.payload.data = (uint8_t *)"doc";
	w.payload.len = 3;
	w.hops = hops;
	d.n_messages = 1;
	d.messages = &pw;
	f.body_case = SEMQ__FRAME__BODY_DATA;
	f.data = &d;
	push_frame(fx, 3, "R1", &f);
}

/*
 * [node] max_hops: a relay passes a message on with one hop more, keeps
 * that count with a copy and sends it with the copy; a message that has
 * passed max_hops relays already is refused as a routing loop (RelayAck
 * UNREACHABLE, LOOP), counted and not stored.
 */
static void test_relay_hop_limit(void **state)
{
	struct fx *fx = *state;
	const struct route_hop r1 = {"R1", 3, 0, "", 2, 0x71, 0, 0};
	const struct route_hop both[2] = {{"R1", 3, 0, "", 2, 0x71, 0, 0},
					  {"S1", 9, 0, "", 2, 0x5e1, 0, 0}};
	const Semq__Message *msgs[4];
	const Semq__RelayAck *ra;
	struct proto_counts pc;

	fx->c.max_hops = 3;
	relay(fx);
	push_routes(fx, &r1, 1);
	push_hops(fx, 1, 1); /* stored, as passing its 2nd relay */
	push_hops(fx, 2, 3); /* a 4th relay: one too many */
	batch(fx, T0);
	ra = relay_ack_of(fx, 3, SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			  SEMQ__RELAY_REFUSAL__LOOP);
	assert_int_equal(ra->n_ids, 1);
	assert_int_equal(ra->ids[0]->seq, 2);
	assert_non_null(strstr(ra->detail, "max_hops"));
	assert_int_equal(count_rows(fx, "SELECT count(*) FROM tb_0031"), 1);
	assert_int_equal(count_rows(fx, "SELECT hops FROM tb_0031"), 2);
	memset(&pc, 0, sizeof pc);
	proto_take_counts(fx->p, &pc);
	assert_int_equal(pc.relay_refused[SEMQ__RELAY_REFUSAL__LOOP], 1);

	/* S1 comes: the copy goes with its count */
	push_routes(fx, both, 2);
	batch(fx, T0 + 10);
	assert_int_equal(data_to(fx, 9, msgs, 4), 1);
	assert_int_equal(msgs[0]->hops, 2);
	/* forwarded at once: one hop more */
	push_hops(fx, 3, 0);
	batch(fx, T0 + 20);
	assert_int_equal(data_to(fx, 9, msgs, 4), 1);
	assert_int_equal(msgs[0]->seq, 3);
	assert_int_equal(msgs[0]->hops, 1);
}

/*
 * The origin: a LOOP refusal makes the message dead for the operator,
 * as an undeliverable one; and a RelayAck is taken only from the hop its
 * stream goes to — one from another peer about R1's rows changes nothing.
 */
static void test_origin_loop_and_foreign_relay_ack(void **state)
{
	struct fx *fx = *state;
	const struct route_hop hops[2] = {{"P1", 5, 1, "", 2, 0x71, 0, 0},
					  {"X9", 6, 1, "", 2, 0x72, 0, 0}};
	uint64_t life, d1, d2;
	struct out_view v;

	sender_via_p1(fx, 1000, 2);
	push_routes(fx, hops, 2);
	life = store_life(fx->st);
	enqueue(fx, "S9", 2);
	batch(fx, T0);
	d1 = sent_digest(fx, 5, 1);
	d2 = sent_digest(fx, 5, 2);

	/* X9 (not the hop) claims custody and a loop: nothing changes */
	push_relay_ack2(fx, 6, "X9", SEMQ__RELAY_ACK__KIND__STORED, 0, 0, "R1",
			"S9", 1, life, d1, "");
	push_relay_ack2(fx, 6, "X9", SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			SEMQ__RELAY_REFUSAL__LOOP, 0, "R1", "S9", 2, life, d2,
			"loop");
	batch(fx, T0 + 10);
	v = out_of(fx, "R1", "S9", 1);
	assert_int_equal(v.status, SS_SEND);
	v = out_of(fx, "R1", "S9", 2);
	assert_int_equal(v.status, SS_SEND);

	/* P1 (the hop) says loop: dead, taken back */
	push_relay_ack2(fx, 5, "P1", SEMQ__RELAY_ACK__KIND__UNREACHABLE,
			SEMQ__RELAY_REFUSAL__LOOP, 0, "R1", "S9", 2, life, d2,
			"it has passed [node] max_hops relays: a routing loop");
	batch(fx, T0 + 20);
	v = out_of(fx, "R1", "S9", 2);
	assert_int_equal(v.status, SS_HELD);
	assert_int_equal(v.result, RES_UNDELIVERABLE);
	assert_non_null(strstr(v.last_error, "routing loop"));
	assert_int_equal(redo_at(fx, "R1", "S9", 2).status, RS_DEAD);
}

/* ---- trace (trace.c) ---------------------------------------------------------- */

/* A Trace of origin/dest/seq with `request`, having passed `hops` relays. */
static void push_trace(struct fx *fx, uint64_t conn, const char *peer,
		       uint64_t request, const char *origin, const char *dest,
		       uint64_t seq, unsigned hops)
{
	Semq__MsgId id, *pid;
	Semq__Trace t = SEMQ__TRACE__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	fill_ids(&id, &pid, origin, dest, &seq, 1);
	t.request = request;
	t.ids = &pid;
	t.n_ids = 1;
	f.body_case = SEMQ__FRAME__BODY_TRACE;
	f.trace = &t;
	f.hops = hops;
	push_frame(fx, conn, peer, &f);
}

/* The TraceReply of `node` to request, with a record of origin/dest/seq. */
static void push_trace_reply(struct fx *fx, uint64_t conn, const char *peer,
			     uint64_t request, const char *origin,
			     const char *dest, uint64_t seq)
{
	Semq__MsgId id, *pid;
	Semq__TraceRecord r = SEMQ__TRACE_RECORD__INIT, *pr = &r;
	Semq__TraceHop h = SEMQ__TRACE_HOP__INIT, *ph = &h;
	Semq__TraceReply tr = SEMQ__TRACE_REPLY__INIT;
	Semq__Frame f = SEMQ__FRAME__INIT;

	fill_ids(&id, &pid, origin, dest, &seq, 1);
	r.id = &id;
	r.result = -1;
	r.receipt = SEMQ__TRACE_RECORD__RECEIPT__RECEIVED;
	h.node = (char *)peer;
	h.records = &pr;
	h.n_records = 1;
	tr.request = request;
	tr.hops = &ph;
	tr.n_hops = 1;
	f.body_case = SEMQ__FRAME__BODY_TRACE_REPLY;
	f.trace_reply = &tr;
	push_frame(fx, conn, peer, &f);
}

/* A relay P1 answers a Trace: its own record first, then the next hop's
 * (asked, and awaited for a bounded time), or why it could not be asked;
 * bounded pending traces; max_hops. */
static void test_trace_relay(void **state)
{
	struct fx *fx = *state;
	struct route_hop hops[2] = {{"R1", 3, 0, "", 2, 0, 0, 0},
				    {"S1", 9, 0, "", 2, 0, 0, 0}};
	const Semq__TraceReply *tr;
	const Semq__Frame *f;
	struct proto_counts pc;
	uint64_t req;
	int i;

	snprintf(fx->c.id, sizeof fx->c.id, "P1");
	fx->c.relay = 1;
	fx->c.store_and_forward = 1;
	start(fx);
	push_routes(fx, hops, 2);
	batch(fx, T0);

	/* S1 is an older node: not asked, and the reply says so. */
	push_trace(fx, 3, "R1", 5, "R1", "S1", 1, 0);
	batch(fx, T0);
	assert_int_equal(count_frames(fx, 9, SEMQ__FRAME__BODY_TRACE), 0);
	tr = frame_at(fx, 3, SEMQ__FRAME__BODY_TRACE_REPLY, 0)->trace_reply;
	assert_int_equal(tr->request, 5);
	assert_int_equal(tr->n_hops, 2);
	assert_string_equal(tr->hops[0]->node, "P1");
	assert_true(tr->hops[0]->relay);
	assert_int_equal(tr->hops[0]->n_records, 1);
	assert_false(tr->hops[0]->records[0]->outbound);
	assert_string_equal(tr->hops[0]->records[0]->next_hop, "S1");
	assert_true(tr->hops[0]->records[0]->next_connected);
	assert_string_equal(tr->hops[1]->node, "S1");
	assert_string_equal(tr->hops[1]->note, "does not support trace");

	/* S1 answers traces: asked, its answer passed back. */
	hops[1].trace = 1;
	push_routes(fx, hops, 2);
	push_trace(fx, 3, "R1", 6, "R1", "S1", 1, 0);
	batch(fx, T0);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_TRACE_REPLY), 0);
	f = frame_at(fx, 9, SEMQ__FRAME__BODY_TRACE, 0);
	assert_int_equal(f->hops, 1);
	req = f->trace->request;
	push_trace_reply(fx, 9, "S1", req, "R1", "S1", 1);
	batch(fx, T0 + 10);
	tr = frame_at(fx, 3, SEMQ__FRAME__BODY_TRACE_REPLY, 0)->trace_reply;
	assert_int_equal(tr->request, 6);
	assert_int_equal(tr->n_hops, 2);
	assert_string_equal(tr->hops[1]->node, "S1");
	assert_int_equal(tr->hops[1]->records[0]->receipt,
			 SEMQ__TRACE_RECORD__RECEIPT__RECEIVED);

	/* No answer: the wait ends (one relay passed: 3 s), a late answer is
	 * dropped. */
	push_trace(fx, 3, "R1", 7, "R1", "S1", 1, 0);
	batch(fx, T0 + 100);
	req = frame_at(fx, 9, SEMQ__FRAME__BODY_TRACE, 0)->trace->request;
	assert_int_equal(proto_next_due(fx->p),
			 T0 + 100 + TRACE_WAIT_MS - TRACE_HOP_MS);
	assert_int_equal(batch(fx, T0 + 100 + TRACE_WAIT_MS - TRACE_HOP_MS - 1),
			 0);
	batch(fx, T0 + 100 + TRACE_WAIT_MS - TRACE_HOP_MS);
	tr = frame_at(fx, 3, SEMQ__FRAME__BODY_TRACE_REPLY, 0)->trace_reply;
	assert_int_equal(tr->request, 7);
	assert_string_equal(tr->hops[1]->note, "no answer within 3 s");
	push_trace_reply(fx, 9, "S1", req, "R1", "S1", 1);
	assert_int_equal(batch(fx, T0 + 5000), 0);

	/* Bounds: TRACE_PER_CONN traces of one asker wait; the next one is
	 * answered with P1's record only, "busy", and counted. */
	proto_take_counts(fx->p, &pc);
	for (i = 0; i <= TRACE_PER_CONN; i++)
		push_trace(fx, 3, "R1", 10 + (uint64_t)i, "R1", "S1", 1, 0);
	batch(fx, T0 + 6000);
	assert_int_equal(count_frames(fx, 9, SEMQ__FRAME__BODY_TRACE),
			 TRACE_PER_CONN);
	tr = frame_at(fx, 3, SEMQ__FRAME__BODY_TRACE_REPLY, 0)->trace_reply;
	assert_int_equal(tr->request, 10 + TRACE_PER_CONN);
	assert_int_equal(tr->n_hops, 1);
	assert_non_null(strstr(tr->hops[0]->note, "busy"));
	memset(&pc, 0, sizeof pc);
	proto_take_counts(fx->p, &pc);
	assert_int_equal(pc.traces_refused, 1);
	batch(fx, T0 + 6000 + TRACE_WAIT_MS);
	assert_int_equal(count_frames(fx, 3, SEMQ__FRAME__BODY_TRACE_REPLY),
			 TRACE_PER_CONN);

	/* Past max_hops: answered, not passed on. */
	push_trace(fx, 3, "R1", 20, "R1", "S1", 1, fx->c.max_hops);
	batch(fx, T0 + 20000);
	assert_int_equal(count_frames(fx, 9, SEMQ__FRAME__BODY_TRACE), 0);
	tr = frame_at(fx, 3, SEMQ__FRAME__BODY_TRACE_REPLY, 0)->trace_reply;
	assert_non_null(strstr(tr->hops[0]->note, "max_hops"));
}

/* ---- kinds without a handler: refused, never ignored ----------------------- */

/* The Error frame sent to conn, or fails. */
static const Semq__Error *error_to(const struct fx *fx, uint64_t conn)
{
	assert_int_equal(count_frames(fx, conn, SEMQ__FRAME__BODY_ERROR), 1);
	return frame_at(fx, conn, SEMQ__FRAME__BODY_ERROR, 0)->error;
}

/*
 * A frame kind the store thread has no handler for (a Ping that should have
 * stayed on the network thread; a body number nobody listed) is refused:
 * the peer gets a fatal Error(PROTOCOL) naming the kind, and the rest of
 * the batch (a Data frame beside it) goes on and commits.
 */
static void test_unknown_kind_refused(void **state)
{
	struct fx *fx = *state;
	const struct mspec m1 = {"R1", "S1", 1, NULL, 0, 0};
	Semq__Frame f = SEMQ__FRAME__INIT;
	Semq__Ping ping = SEMQ__PING__INIT;
	const Semq__Error *e;
	struct outbox ob;
	struct job *j;
	uint64_t seqs[4];
	int res[4];

	start(fx);
	ping.nonce = 7;
	f.body_case = SEMQ__FRAME__BODY_PING;
	f.ping = &ping;
	push_frame(fx, 5, "R1", &f);
	push_data(fx, 3, "R1", &m1, 1);
	assert_int_equal(batch(fx, T0), 2);
	e = error_to(fx, 5);
	assert_int_equal(e->code, SEMQ__ERROR__CODE__PROTOCOL);
	assert_true(e->fatal);
	assert_non_null(strstr(e->text, "Ping"));
	assert_int_equal(verdicts_to(fx, 3, seqs, res, 4), 1);
	assert_int_equal(res[0], RES_PROCESSED);
	assert_int_equal(recv_result(fx, "R1", 1), RES_PROCESSED);

	/* A body number semq.proto does not have: the job is run by hand
	 * so that its frame gets its real body back before it is freed. */
	push_frame(fx, 6, "R1", &f);
	j = fx->jobs;
	fx->jobs = fx->last = NULL;
	j->frame->body_case = (Semq__Frame__BodyCase)99;
	outbox_init(&ob);
	assert_int_equal(store_begin(fx->st), SEMQ_OK);
	assert_int_equal(proto_job(fx->p, j, T0 + 1, &ob), SEMQ_OK);
	assert_int_equal(store_commit(fx->st), SEMQ_OK);
	proto_committed(fx->p);
	j->frame->body_case = SEMQ__FRAME__BODY_PING;
	job_free(j);
	assert_int_equal(ob.n, 1);
	{
		char err[SEMQ_ERRLEN] = "";
		Semq__Frame *got = NULL;

		assert_int_equal(ob.head->conn_id, 6);
		if (codec_decode_body(ob.head->bytes + CODEC_HDR,
				      ob.head->len - CODEC_HDR, &got, err,
				      sizeof err) != SEMQ_OK)
			fail_msg("outbox frame does not decode: %s", err);
		assert_int_equal(got->body_case, SEMQ__FRAME__BODY_ERROR);
		assert_int_equal(got->error->code, SEMQ__ERROR__CODE__PROTOCOL);
		assert_true(got->error->fatal);
		assert_non_null(strstr(got->error->text, "unknown"));
		assert_non_null(strstr(got->error->text, "body 99"));
		codec_frame_free(got);
	}
	outbox_clear(&ob);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_receipt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_kind_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_redo_done_purged_after_retention, setup, teardown),
		cmocka_unit_test_setup_teardown(test_redo_levels, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_next_due_right_after_run,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_released_successor_due_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_permanent, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_key_order_retry, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_key_order_permanent_discard, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delayed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delayed_after_restart,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_operator_retry, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sender_sends_and_confirms,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_sender_window, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sender_skips_key_not_utf8,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_sender_relay_acks, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sender_query, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_relay_stores, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_relay_forwards, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_relay_no_ack, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_relay_never_back_to_sender,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_instances_pick, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_instances_relay_spreads,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_instances_sender_one_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_instances_one_leaves,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_receiver_refuses_conflict,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_renumbers_on_conflict, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_asks_predecessor_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_repeats_refusals,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_origin_fills_given_up_seqs,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_state_moves_counter,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_relay_conflict_and_take_back, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_life_zero_and_earlier, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_up_stream_query,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_query_answered,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_stream_state, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_relay_query_conflict,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_foreign_verdict_not_confirmed, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_tombstone_undecided_settles, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_relay_custody_quotas,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_cancel_replaces_copy,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_unknown_dest, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_relay_unknown_dest_backlog,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_query_custody, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_custody_outside_window, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_relay_ack_of_renumbered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_origin_forwarded_in_window,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_hop_limit, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_loop_and_foreign_relay_ack, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_origin_too_big_for_hop,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_origin_relay_refusals,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_origin_unknown_dest_again,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_origin_cancels_dead_dest,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_origin_life_hidden_after_rev1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_trace_relay, setup,
						teardown),
	};

	log_set_level(LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
