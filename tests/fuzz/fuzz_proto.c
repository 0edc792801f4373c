/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the store-side protocol (node/proto.c on node/store.c
 * with the journal plugin): arbitrary sequences of frames from peers, run in
 * batches the way the store thread (node/worker.c) runs them, on a real
 * database file. The node is S1, a relay with store-and-forward; its peers
 * R1 (conn 1), P1 (conn 2, the default route) and R2 (conn 3, the route to
 * Q1) are connected, X1 (conn 4) sends without being routable. Every peer
 * counts as a trusted_relay, so no frame is refused for its origin: the
 * network thread's rights check (net.c) only ever removes frames, and
 * exactly-once must hold whoever sends what. The journal plugin fails a
 * quarter of its calls (RETRY) and messages with the key "dead" for good.
 *
 * Input: a flags byte (bit 0: first enqueue three messages of S1's own, to
 * R1, R1 and Q1; bit 1: start with P1 disconnected), then records of a
 * control byte, a 2-byte big-endian length and that many bytes:
 *
 *   control bits 0-1  the peer: R1, P1, R2, X1
 *                2-3  time step before the job: 0, 1 s, 31 s, 10 min
 *                4    end the batch after this job (tick, then commit)
 *                5    ... and roll it back instead of committing
 *                6-7  the job: 0 a frame (the bytes are its body, decoded
 *                     with codec_decode_body; a body that does not decode
 *                     is dropped as the peer's connection would be), 1
 *                     PEER_UP, 2 ROUTES (bits 0-2 of the first byte: R1,
 *                     P1, R2 up), 3 WAKE
 *
 * After the last record the open batch ends, and two more ticks run 31 s
 * and 10 min later, so that held messages, queries and redo entries move.
 *
 * DESIGN (what is checked after each input, beyond "no crash, no leak, no
 * UB"; the tables are emptied before the next one)
 *  - Every frame an outbox holds after a commit decodes (the node never
 *    sends what a peer would refuse) and goes to a known connection.
 *  - Exactly once: no journal row twice for one (origin, dest, seq); no
 *    tb_0030 row twice; every journal row is for S1 and has its receipt
 *    (a tb_0030 row, or a seq at or below the stream's watermark); a
 *    processed receipt has exactly one journal row, a redo entry that is
 *    done has exactly one, an unfinished, dead or cancelled one has none.
 *  - Order: a recorded message whose prev_seq is set has its predecessor
 *    recorded too, and when both took effect with the same key, the
 *    predecessor took effect first.
 *  - Every tb_0033 entry belongs to a recorded message, and one that is done
 *    ran no earlier than its deliver_at.
 *  The job errors proto_job / proto_tick return are counted, not fatal (the
 *  worker rolls such a batch back); FUZZ_PROTO_STRICT=1 makes them fatal, to
 *  look at them one by one.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <semq/error.h>
#include <sqlite3.h>

#include "codec.h"
#include "config.h"
#include "job.h"
#include "log.h"
#include "plughost.h"
#include "proto.h"
#include "store.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define T0 INT64_C(1700000000000)

static const char *const peers[4] = {"R1", "P1", "R2", "X1"};

static char tmpdir[4096];
static char ini[4200];
static struct config *cfg;     /* owned for the run */
static struct store *st;       /* owned for the run */
static sqlite3 *db;            /* borrowed from st */
static void *journal_keep;     /* keeps journal.so mapped between inputs */
static int strict;             /* FUZZ_PROTO_STRICT */
static unsigned long n_errors; /* job / tick errors seen */

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_proto: invariant broken: %s%s%s\n", what,
		detail ? ": " : "", detail ? detail : "");
	abort();
}

/*
 * The statements of the reset and the checks, prepared on first use and kept
 * for the run (they are the same few strings every time), looked up by the
 * address of their text.
 */
#define STMT_MAX 32
static struct {
	const char *sql;
	sqlite3_stmt *s; /* owned */
} stmts[STMT_MAX];

static sqlite3_stmt *stmt(const char *sql)
{
	size_t i;

	for (i = 0; i < STMT_MAX && stmts[i].sql; i++)
		if (stmts[i].sql == sql)
			return stmts[i].s;
	if (i == STMT_MAX)
		die("too many statements", sql);
	if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT,
			       &stmts[i].s, NULL) != SQLITE_OK) {
		fprintf(stderr, "fuzz_proto: %s: %s\n", sql,
			sqlite3_errmsg(db));
		abort();
	}
	stmts[i].sql = sql;
	return stmts[i].s;
}

/* Runs sql (a string constant) and returns the first column of its first
 * row, or 0 when it returns no row. */
static int64_t query_int(const char *sql)
{
	sqlite3_stmt *s = stmt(sql);
	int64_t v = 0;
	int rc;

	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		v = sqlite3_column_int64(s, 0);
	else if (rc != SQLITE_DONE) {
		fprintf(stderr, "fuzz_proto: %s: %s\n", sql,
			sqlite3_errmsg(db));
		abort();
	}
	sqlite3_reset(s);
	return v;
}

static void cleanup(void)
{
	char path[4300];

	size_t i;

	if (n_errors)
		fprintf(stderr, "fuzz_proto: %lu job or tick errors\n",
			n_errors);
	for (i = 0; i < STMT_MAX; i++)
		sqlite3_finalize(stmts[i].s);
	store_free(st);
	config_free(cfg);
	if (journal_keep)
		dlclose(journal_keep);
	snprintf(path, sizeof path, "%s/s1.db", tmpdir);
	unlink(path);
	snprintf(path, sizeof path, "%s/s1.db-wal", tmpdir);
	unlink(path);
	snprintf(path, sizeof path, "%s/s1.db-shm", tmpdir);
	unlink(path);
	unlink(ini);
	rmdir(tmpdir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct store_opts so = {0};
	const char *t = getenv("TMPDIR");
	char err[SEMQ_ERRLEN], *errs = NULL;
	struct plughost *ph = NULL;
	FILE *f;

	(void)argc;
	(void)argv;
	strict = getenv("FUZZ_PROTO_STRICT") &&
		 strcmp(getenv("FUZZ_PROTO_STRICT"), "1") == 0;
	log_set_level(LOG_ERROR);
	snprintf(tmpdir, sizeof tmpdir, "%s/semq-fuzz-proto-XXXXXX",
		 t && *t ? t : "/tmp");
	if (!mkdtemp(tmpdir)) {
		perror("fuzz_proto: mkdtemp");
		exit(1);
	}
	snprintf(ini, sizeof ini, "%s/node.ini", tmpdir);
	atexit(cleanup);
	f = fopen(ini, "w");
	if (!f) {
		perror("fuzz_proto: node.ini");
		exit(1);
	}
	fprintf(f,
		"[node]\nid = S1\ndb = s1.db\nrelay = yes\n"
		"store_and_forward = yes\nsynchronous = off\n"
		"query_after = 30s\nwindow = 4\nbatch_max = 16\n"
		"max_payload = 64KiB\nlog_level = error\n"
		"[peer R1]\ntrusted_relay = yes\n"
		"[peer P1]\ntrusted_relay = yes\n"
		"[peer R2]\ntrusted_relay = yes\n"
		"[peer X1]\ntrusted_relay = yes\n"
		"[route]\ndefault = P1\nQ1 = R2\n"
		"[plugin journal]\npath = %s\ntypes = *\nfail_rate = 0.25\n"
		"fail_seed = 7\npermanent_keys = dead\n"
		"[redo]\nlevels = 5s,30s,1m\nmax_tries = 3\n",
		JOURNAL_SO);
	if (fclose(f) != 0 || config_load(ini, &cfg, &errs) != SEMQ_OK) {
		fprintf(stderr, "fuzz_proto: node.ini: %s\n",
			errs ? errs : "cannot write");
		exit(1);
	}
	so.path = cfg->db;
	so.node_id = cfg->id;
	so.max_payload = cfg->max_payload;
	so.synchronous = cfg->synchronous;
	so.redo_levels_ms = cfg->redo_levels_ms;
	so.n_redo_levels = cfg->n_redo_levels;
	so.max_tries = cfg->max_tries;
	if (store_open(&so, &st, err, sizeof err) != SEMQ_OK) {
		fprintf(stderr, "fuzz_proto: store_open: %s\n", err);
		exit(1);
	}
	db = store_plugin_tx(st)->db;
	journal_keep = dlopen(JOURNAL_SO, RTLD_NOW | RTLD_LOCAL);
	if (!journal_keep) {
		fprintf(stderr, "fuzz_proto: %s\n", dlerror());
		exit(1);
	}
	/* the journal table exists from the first init on */
	if (plughost_new(cfg, store_plugin_tx(st), &ph, err, sizeof err) !=
	    SEMQ_OK) {
		fprintf(stderr, "fuzz_proto: plughost_new: %s\n", err);
		exit(1);
	}
	plughost_free(ph);
	return 0;
}

/* ---- one run ------------------------------------------------------------- */

struct run {
	struct proto *p;
	struct plughost *ph;
	struct outbox ob;
	int64_t now;
	int open;   /* a batch is open */
	int failed; /* a job of the open batch failed */
};

static void note_error(const char *what, int r)
{
	n_errors++;
	if (strict) {
		fprintf(stderr, "fuzz_proto: %s: %s (%s)\n", what,
			semq_strerror(r), store_errmsg(st));
		abort();
	}
}

/* Every queued frame decodes and goes to a known connection. */
static void check_outbox(const struct outbox *ob)
{
	const struct out *o;
	char err[SEMQ_ERRLEN];

	for (o = ob->head; o; o = o->next) {
		Semq__Frame *f = NULL;
		size_t len = 0;

		if (o->conn_id < 1 || o->conn_id > 4)
			die("a frame for an unknown connection", NULL);
		if (o->len < CODEC_HDR ||
		    codec_frame_len(o->bytes, cfg->max_frame, &len, err,
				    sizeof err) != SEMQ_OK ||
		    len != o->len - CODEC_HDR)
			die("an outgoing frame has a bad header", NULL);
		if (codec_decode_body(o->bytes + CODEC_HDR, len, &f, err,
				      sizeof err) != SEMQ_OK)
			die("an outgoing frame does not decode", err);
		codec_frame_free(f);
	}
}

static void batch_job(struct run *x, struct job *j)
{
	int r;

	if (!x->open) {
		r = store_begin(st);
		if (r != SEMQ_OK)
			die("store_begin failed", store_errmsg(st));
		x->open = 1;
		x->failed = 0;
	}
	if (!x->failed) {
		r = proto_job(x->p, j, x->now, &x->ob);
		if (r != SEMQ_OK) {
			note_error("proto_job", r);
			x->failed = 1;
		}
	}
	job_free(j);
}

static void batch_end(struct run *x, int rollback)
{
	int r = SEMQ_OK;

	if (!x->open) {
		r = store_begin(st);
		if (r != SEMQ_OK)
			die("store_begin failed", store_errmsg(st));
		x->failed = 0;
	}
	x->open = 0;
	if (!x->failed) {
		r = proto_tick(x->p, x->now, &x->ob);
		if (r != SEMQ_OK)
			note_error("proto_tick", r);
	}
	if (r == SEMQ_OK && !x->failed && !rollback) {
		r = store_commit(st);
		if (r != SEMQ_OK)
			note_error("store_commit", r);
	}
	if (r != SEMQ_OK || x->failed || rollback) {
		if (store_in_batch(st))
			store_rollback(st);
		proto_rolled_back(x->p);
		outbox_clear(&x->ob);
		return;
	}
	proto_committed(x->p);
	check_outbox(&x->ob);
	outbox_clear(&x->ob);
}

static struct job *routes_job(unsigned up)
{
	struct job *j = job_new(JOB_ROUTES);
	struct routes *rt = calloc(1, sizeof *rt);
	size_t i;

	if (!j || !rt || !(rt->hops = calloc(3, sizeof *rt->hops)))
		die("out of memory", NULL);
	for (i = 0; i < 3; i++) {
		if (!(up & (1u << i)))
			continue;
		snprintf(rt->hops[rt->n_hops].peer,
			 sizeof rt->hops[rt->n_hops].peer, "%s", peers[i]);
		rt->hops[rt->n_hops].conn_id = i + 1;
		rt->hops[rt->n_hops].relay = i == 1;
		rt->n_hops++;
	}
	j->routes = rt;
	return j;
}

static void enqueue_own(void)
{
	static const struct {
		const char *dest, *key;
	} own[3] = {{"R1", "a"}, {"R1", "a"}, {"Q1", NULL}};
	size_t i;

	for (i = 0; i < 3; i++) {
		struct msg m = {0};
		char err[SEMQ_ERRLEN];
		uint64_t seq = 0;

		snprintf(m.id.dest, sizeof m.id.dest, "%s", own[i].dest);
		m.type = 7;
		if (own[i].key) {
			m.has_key = 1;
			snprintf(m.key, sizeof m.key, "%s", own[i].key);
		}
		m.payload = (uint8_t *)"own";
		m.payload_len = 3;
		if (store_enqueue(st, &m, &seq, err, sizeof err) != SEMQ_OK)
			die("store_enqueue failed", err);
	}
}

/* ---- the invariants -------------------------------------------------------- */

/* `sql` counts violations; it must count none. */
static void expect_none(const char *what, const char *sql)
{
	if (query_int(sql) != 0)
		die(what, sql);
}

#define RECEIPT(t)                                                             \
	"(EXISTS (SELECT 1 FROM tb_0030 r WHERE r.origin = " t ".origin AND "  \
	"r.dest = " t ".dest AND r.seq = " t ".seq) OR EXISTS (SELECT 1 FROM " \
	"semq_stream_in w WHERE w.origin = " t ".origin AND w.dest = " t       \
	".dest AND " t ".seq <= w.confirmed_through))"
#define EFFECTS(t)                                                             \
	"(SELECT count(*) FROM journal j WHERE j.origin = " t ".origin AND "   \
	"j.dest = " t ".dest AND j.seq = " t ".seq)"

static void check_tables(void)
{
	if (store_begin(st) != SEMQ_OK)
		die("store_begin failed", store_errmsg(st));
	expect_none("a journal row twice for one message",
		    "SELECT count(*) FROM (SELECT 1 FROM journal GROUP BY "
		    "origin, dest, seq HAVING count(*) > 1)");
	expect_none("a tb_0030 row twice for one message",
		    "SELECT count(*) FROM (SELECT 1 FROM tb_0030 GROUP BY "
		    "origin, dest, seq HAVING count(*) > 1)");
	expect_none("a journal row for another node",
		    "SELECT count(*) FROM journal WHERE dest <> 'S1'");
	expect_none("a journal row without its receipt",
		    "SELECT count(*) FROM journal x WHERE NOT " RECEIPT("x"));
	expect_none(
		"a processed receipt without exactly one effect",
		"SELECT count(*) FROM tb_0030 x WHERE x.result = 0 AND "
		"NOT EXISTS (SELECT 1 FROM tb_0033 q WHERE q.origin = "
		"x.origin AND q.dest = x.dest AND q.seq = x.seq) AND " EFFECTS(
			"x") " <> 1");
	expect_none("a cancelled receipt with an effect",
		    "SELECT count(*) FROM tb_0030 x WHERE x.result = 4 "
		    "AND " EFFECTS("x") " <> 0");
	expect_none("a done redo entry without exactly one effect",
		    "SELECT count(*) FROM tb_0033 x WHERE x.status = 2 "
		    "AND " EFFECTS("x") " <> 1");
	expect_none("an unfinished, dead or discarded redo entry with an "
		    "effect",
		    "SELECT count(*) FROM tb_0033 x WHERE x.status <> 2 "
		    "AND " EFFECTS("x") " <> 0");
	expect_none("a delayed message ran before its deliver_at",
		    "SELECT count(*) FROM tb_0033 WHERE status = 2 AND "
		    "deliver_at > updated_at");
	expect_none("a redo entry without its receipt",
		    "SELECT count(*) FROM tb_0033 x WHERE NOT " RECEIPT("x"));
	expect_none("a recorded message whose predecessor is not recorded",
		    "SELECT count(*) FROM tb_0030 x WHERE x.prev_seq > 0 AND "
		    "NOT (EXISTS (SELECT 1 FROM tb_0030 r WHERE r.origin = "
		    "x.origin AND r.dest = x.dest AND r.seq = x.prev_seq) OR "
		    "EXISTS (SELECT 1 FROM semq_stream_in w WHERE w.origin = "
		    "x.origin AND w.dest = x.dest AND x.prev_seq <= "
		    "w.confirmed_through))");
	expect_none("a message took effect before its predecessor of the "
		    "same key",
		    "SELECT count(*) FROM tb_0030 x JOIN journal a ON a.origin "
		    "= x.origin AND a.dest = x.dest AND a.seq = x.seq JOIN "
		    "journal b ON b.origin = x.origin AND b.dest = x.dest AND "
		    "b.seq = x.prev_seq WHERE x.prev_seq > 0 AND a.msg_key IS "
		    "b.msg_key AND a.id < b.id");
	if (store_rollback(st) != SEMQ_OK)
		die("store_rollback failed", store_errmsg(st));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run x = {0};
	char err[SEMQ_ERRLEN];
	size_t off = 1;
	uint8_t flags;

	if (size < 1)
		return 0;
	flags = data[0];
	if (store_begin(st) != SEMQ_OK)
		die("store_begin failed", store_errmsg(st));
	query_int("DELETE FROM tb_0030");
	query_int("DELETE FROM tb_0031");
	query_int("DELETE FROM tb_0033");
	query_int("DELETE FROM semq_stream_in");
	query_int("DELETE FROM semq_stream_out");
	query_int("DELETE FROM journal");
	if (store_commit(st) != SEMQ_OK)
		die("store_commit failed", store_errmsg(st));
	if (plughost_new(cfg, store_plugin_tx(st), &x.ph, err, sizeof err) !=
	    SEMQ_OK)
		die("plughost_new failed", err);
	x.p = proto_new(st, x.ph, cfg);
	if (!x.p)
		die("out of memory", NULL);
	outbox_init(&x.ob);
	x.now = T0;
	if (flags & 1)
		enqueue_own();
	batch_job(&x, routes_job((flags & 2) ? 5 : 7));

	while (off + 3 <= size) {
		static const int64_t step[4] = {0, 1000, 31000, 600000};
		uint8_t ctl = data[off];
		size_t len = (size_t)data[off + 1] << 8 | data[off + 2];
		const uint8_t *b = data + off + 3;
		struct job *j = NULL;
		int peer = ctl & 3;

		off += 3;
		if (len > size - off)
			len = size - off;
		off += len;
		x.now += step[(ctl >> 2) & 3];
		switch (ctl >> 6) {
		case 0: {
			Semq__Frame *f = NULL;
			if (codec_decode_body(b, len, &f, err, sizeof err) !=
			    SEMQ_OK)
				break;
			j = job_new(JOB_FRAME);
			if (!j)
				die("out of memory", NULL);
			j->frame = f;
			break;
		}
		case 1: j = job_new(JOB_PEER_UP); break;
		case 2: j = routes_job(len ? b[0] & 7 : 0); break;
		default: j = job_new(JOB_WAKE); break;
		}
		if (j) {
			j->conn_id = (uint64_t)peer + 1;
			snprintf(j->peer, sizeof j->peer, "%s", peers[peer]);
			j->trusted_relay = 1;
			j->enqueued_at = x.now;
			batch_job(&x, j);
		}
		if (ctl & 0x10)
			batch_end(&x, ctl & 0x20);
	}
	batch_end(&x, 0);
	x.now += 31000;
	batch_end(&x, 0);
	x.now += 600000;
	batch_end(&x, 0);

	check_tables();
	proto_free(x.p);
	plughost_free(x.ph);
	return 0;
}
