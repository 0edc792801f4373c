/* SPDX-License-Identifier: MIT */
/*
 * The store thread (see worker.h for the design). It sleeps on a condition
 * variable until jobs arrive or the next tick is due, then runs one batch:
 * every waiting job (up to JOBS_PER_BATCH) and one proto_tick() in a single
 * transaction, and only after the commit hands the outbox to the network
 * thread. When a batch fails, it is rolled back and its jobs are run again one
 * transaction each, so that one bad job costs only itself.
 *
 * A batch that fails because the disk is full (store_disk_full) puts the
 * worker in the disk-full state: it says so once in the log, the network
 * thread refuses Data (the senders keep it; a relay tells them why), and
 * /health answers 503 "disk full". Batches go on — what commits still
 * delivers and confirms, which frees space — but after a failed one the next
 * waits DISK_FULL_RETRY_MS. The state ends only when a probe of
 * DISK_FULL_PROBE bytes (store_probe_space), tried every DISK_FULL_RETRY_MS
 * in a transaction of its own, commits: a batch that happens to write little
 * is not taken for space regained. The probe's row is removed by the next
 * batch. Every probe is counted (worker_stats disk_probes, a metric).
 *
 * With [node] workers >= 2 the store workers (lanes 1..N, apply_run) run
 * beside it: each takes from the dispatch queue (dispatch.h) the Data frames
 * for this node and the redo runs of streams no other worker holds, runs
 * them in batches cut at SLICE_MS, puts back what it did not start and
 * releases its streams after the commit (docs/ARCHITECTURE.md, "Store
 * workers"). Their failures follow the same rules as the store thread's.
 *
 * A watchdog thread looks every WATCH_MS at the plugin call each lane is in
 * (plughost_running): one running longer than its plugin's deadline is
 * logged once with its message and stream and counted; /health says so
 * (worker_stuck: the store thread, the node waits; worker_degraded: a
 * store worker, its stream waits). The plugin hosts' crash guard is one file
 * beside the database (guard_path), a slot per lane.
 */
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec.h"
#include "dispatch.h"
#include "fault.h"
#include "log.h"
#include "plughost.h"
#include "proto.h"
#include "store.h"

#define JOBS_PER_BATCH 512
#define SLICE_MS 200  /* a store worker commits a batch after this long */
#define WATCH_MS 1000 /* the watchdog looks this often */
#define DISK_FULL_RETRY_MS 2000      /* a full disk is tried this often */
#define DISK_FULL_PROBE (256 * 1024) /* bytes a retry must be able to write */
#define BACKLOG_SCAN_MS 1000         /* the oldest unconfirmed row looked up */
/* lane_stuck()'s longest line: its words (under 64), the plugin's, the
 * origin's and this node's ids, the message, a number of ms (20 digits). */
#define STUCK_MAX                                                              \
	(64 + 3 * SEMQ_ID_MAX + sizeof(((struct plughost_call *)0)->msg) + 20)

/* Upper bounds of the histograms' buckets (worker_stats); +Inf follows. */
static const uint64_t jobs_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 512};
static const uint64_t msgs_bounds[] = {1,   2,   5,   10,   20,   50,
				       100, 200, 500, 1000, 2000, 5000};
static const uint64_t commit_us_bounds[] = {500,    1000,   2500,    5000,
					    10000,  25000,  50000,   100000,
					    250000, 500000, 1000000, 2500000};

/*
 * One thread with a database connection of its own: lanes[0] is the store
 * thread, lanes[1..] the store workers ([node] workers >= 2; dispatch.h).
 */
struct lane {
	struct worker *w;
	unsigned idx;
	struct store *st;
	struct plughost *ph;
	struct proto *p;
	pthread_t th;
	int started;
	int failed;          /* the last batch failed (while disk_full: wait) */
	unsigned routes_gen; /* store workers: the snapshot they have */
	int64_t t0;          /* mono_us when the batch began: its slice */
	int slicing;         /* cut the batch at SLICE_MS (store workers) */
	size_t held_bytes;   /* proto_held_bytes() after its last batch, mu */
	uint64_t overdue;    /* the watchdog: serial of the call it reported */
	/* Jobs of the batch that ran longer than the slice (slow) or not, for
	 * dispatch_mark_slow() under mu after the batch. */
	struct mark {
		char key[SEMQ_ID_MAX + 1];
		int slow;
	} marks[JOBS_PER_BATCH];
	size_t n_marks;
};

struct worker {
	const struct config *c;
	struct store *st; /* lanes[0]'s */
	struct plughost *ph;
	struct proto *p;
	struct lane *lanes;
	size_t n_lanes;

	worker_output_fn out;
	void *out_ctx;
	clock_fn clock;
	void *clock_ctx;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* the store thread waits on it */
	struct job *head, *tail;
	size_t queued;
	int stop;

	/* The store workers (dispatch.h), under mu. */
	struct dispatch *dq;
	pthread_cond_t acv;    /* the store workers wait on it */
	struct routes *routes; /* the newest snapshot, for them */
	unsigned routes_gen;
	int64_t *redo_flight; /* redo entries handed to them, not done */
	size_t n_redo_flight, cap_redo_flight;

	struct worker_stats stats; /* under mu */
	int disk_full;             /* under mu */
	int probe_left;            /* the probe's row is still in the table */
	int64_t backlog_scanned;   /* mono_us of the last scan (store thread) */
	int64_t backlog_at;        /* under mu: worker_backlog() */
	char backlog_dest[SEMQ_ID_MAX + 1];
	int64_t probed; /* mono_us of the last probe */

	/* [node] memory_budget (worker.h), under mu */
	size_t queued_bytes;
	struct conn_bytes {
		uint64_t conn;
		size_t bytes;
	} * held_by; /* per connection with queued jobs */
	size_t n_held_by, cap_held_by;
	int pressed; /* went over; relief() when below half */
	void (*relief)(void *ctx);
	void *relief_ctx;

	/* monotonic ms of the store thread's last turn of its loop (a wait
	 * ended or a batch was done): worker_alive() */
	_Atomic int64_t beat_ms;

	pthread_t watch_th; /* the plugin watchdog */
	int watching;
	int watch_stop;          /* under mu */
	pthread_cond_t watch_cv; /* with mu */
};

int64_t clock_real_ms(void *ctx)
{
	struct timespec ts;

	(void)ctx;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void hist_init(struct worker_hist *h, const uint64_t *bounds, size_t n)
{
	memset(h, 0, sizeof *h);
	memcpy(h->bound, bounds, n * sizeof *bounds);
	h->n = n + 1; /* and +Inf */
}

/* proto's latency bounds as a histogram's (the same values, unsigned). */
static const uint64_t *latency_bounds(void)
{
	static uint64_t b[PROTO_LATENCY_N - 1];
	size_t i;

	for (i = 0; i < PROTO_LATENCY_N - 1; i++)
		b[i] = (uint64_t)proto_latency_bounds_ms[i];
	return b;
}

static void hist_observe(struct worker_hist *h, uint64_t v)
{
	size_t i = 0;

	while (i + 1 < h->n && v > h->bound[i])
		i++;
	h->count[i]++;
	h->sum += v;
	h->total++;
}

static int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * The plugin host's crash guard file: beside a SQLite database
 * ("DB-guard"); for a PostgreSQL database, which has no directory here,
 * in $STATE_DIRECTORY (systemd's StateDirectory=) or /var/tmp, named after
 * the node and its instance.
 */
static void guard_path(const struct config *c, char *buf, size_t sz)
{
	const char *dir = getenv("STATE_DIRECTORY");

	if (!c->db_url)
		snprintf(buf, sz, "%s-guard", c->db);
	else
		snprintf(buf, sz, "%s/semq-%s%s%s.guard",
			 dir && dir[0] ? dir : "/var/tmp", c->id,
			 c->instance[0] ? "-" : "", c->instance);
}

/* Opens a lane's store and plugins and makes its proto. */
static int lane_open(struct worker *w, struct lane *l, char *err, size_t errsz)
{
	const struct config *c = w->c;
	struct store_opts so = {0};
	int r;

	so.path = c->db;
	so.node_id = c->id;
	so.max_payload = c->max_payload;
	so.synchronous = c->synchronous;
	so.redo_levels_ms = c->redo_levels_ms;
	so.n_redo_levels = c->n_redo_levels;
	so.max_tries = c->max_tries;
	r = store_open(&so, &l->st, err, errsz);
	if (r != SEMQ_OK)
		return r;
	if (l->idx == 0 && store_migrated_from(l->st) >= 1 &&
	    store_migrated_from(l->st) < store_schema_version(l->st)) {
		char shown[512];

		semq_db_shown(c->db, shown, sizeof shown);
		log_msg(LOG_WARN, "store", NULL, NULL,
			"%s: migrated from schema %d to %d; the database as it "
			"was is kept in %s",
			shown, store_migrated_from(l->st),
			store_schema_version(l->st), store_backup(l->st));
	}
	r = plughost_new(c, store_plugin_tx(l->st), &l->ph, err, errsz);
	if (r != SEMQ_OK) {
		/* missing file or symbol, wrong ABI, refused options: all
		 * fixed in node.ini or by rebuilding the plugin */
		return SEMQ_ERR_PLUGIN;
	}
	if (c->n_plugins && l->idx == 0) {
		char gpath[4096], gerr[SEMQ_ERRLEN];

		guard_path(c, gpath, sizeof gpath);
		if (plughost_guard_open(l->ph, gpath, gerr, sizeof gerr) !=
		    SEMQ_OK)
			log_msg(LOG_WARN, "plughost", NULL, NULL,
				"no crash guard (%s): a document that crashes "
				"the node will be handed to its plugin again "
				"at every start",
				gerr);
	} else if (c->n_plugins) {
		(void)plughost_guard_share(l->ph, w->lanes[0].ph, l->idx);
	}
	l->p = proto_new(l->st, l->ph, c);
	if (!l->p) {
		snprintf(err, errsz, "out of memory");
		return SEMQ_ERR_NOMEM;
	}
	return SEMQ_OK;
}

static int over_slice(void *ctx);
static int redo_out(void *ctx, int64_t id, const char *origin);

int worker_new(const struct config *c, worker_output_fn out, void *out_ctx,
	       clock_fn clock, void *clock_ctx, struct worker **wout, char *err,
	       size_t errsz)
{
	pthread_condattr_t ca;
	struct worker *w;
	unsigned workers = config_workers(c);
	size_t i;
	int r = SEMQ_ERR_NOMEM;

	*wout = NULL;
	w = calloc(1, sizeof *w);
	if (!w) {
		snprintf(err, errsz, "out of memory");
		return SEMQ_ERR_NOMEM;
	}
	w->c = c;
	w->out = out;
	w->out_ctx = out_ctx;
	w->clock = clock ? clock : clock_real_ms;
	w->clock_ctx = clock_ctx;
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_cond_init(&w->acv, &ca);
	pthread_cond_init(&w->watch_cv, &ca);
	pthread_condattr_destroy(&ca);
	hist_init(&w->stats.batch_jobs, jobs_bounds,
		  sizeof jobs_bounds / sizeof jobs_bounds[0]);
	hist_init(&w->stats.batch_messages, msgs_bounds,
		  sizeof msgs_bounds / sizeof msgs_bounds[0]);
	hist_init(&w->stats.commit_us, commit_us_bounds,
		  sizeof commit_us_bounds / sizeof commit_us_bounds[0]);
	hist_init(&w->stats.latency_ms, (const uint64_t *)latency_bounds(),
		  PROTO_LATENCY_N - 1);

	/* One worker: the store thread applies, as it does everything
	 * else. N >= 2: N store workers beside it. */
	w->n_lanes = workers >= 2 ? 1 + (size_t)workers : 1;
	w->lanes = calloc(w->n_lanes, sizeof *w->lanes);
	if (!w->lanes || (w->n_lanes > 1 && !(w->dq = dispatch_new()))) {
		snprintf(err, errsz, "out of memory");
		goto out;
	}
	for (i = 0; i < w->n_lanes; i++) {
		w->lanes[i].w = w;
		w->lanes[i].idx = (unsigned)i;
		r = lane_open(w, &w->lanes[i], err, errsz);
		if (r != SEMQ_OK)
			goto out;
		if (i > 0) {
			proto_set_apply_only(w->lanes[i].p, over_slice,
					     &w->lanes[i]);
			w->lanes[i].slicing = 1;
		}
	}
	w->st = w->lanes[0].st;
	w->ph = w->lanes[0].ph;
	w->p = w->lanes[0].p;
	if (w->n_lanes > 1)
		proto_set_redo_out(w->p, redo_out, w);
	*wout = w;
	w = NULL;
	r = SEMQ_OK;
out:
	worker_free(w);
	return r;
}

/* Counts bytes of conn in (+) or out (-), under mu. */
static void count_bytes(struct worker *w, uint64_t conn, size_t bytes, int in)
{
	size_t i;

	if (!bytes)
		return;
	if (in)
		w->queued_bytes += bytes;
	else
		w->queued_bytes -=
			bytes < w->queued_bytes ? bytes : w->queued_bytes;
	for (i = 0; i < w->n_held_by && w->held_by[i].conn != conn; i++)
		;
	if (i == w->n_held_by) {
		if (!in)
			return;
		if (w->n_held_by == w->cap_held_by) {
			size_t cap = w->cap_held_by ? 2 * w->cap_held_by : 16;
			void *v = realloc(w->held_by, cap * sizeof *w->held_by);
			if (!v)
				return; /* counted in all, not per connection */
			w->held_by = v;
			w->cap_held_by = cap;
		}
		w->held_by[i].conn = conn;
		w->held_by[i].bytes = 0;
		w->n_held_by++;
	}
	if (in) {
		w->held_by[i].bytes += bytes;
		return;
	}
	w->held_by[i].bytes -=
		bytes < w->held_by[i].bytes ? bytes : w->held_by[i].bytes;
	if (!w->held_by[i].bytes)
		w->held_by[i] = w->held_by[--w->n_held_by];
}

/* Messages held for a missing predecessor, over the lanes; under mu. */
static size_t held_bytes(const struct worker *w)
{
	size_t i, b = 0;

	for (i = 0; i < w->n_lanes; i++)
		b += w->lanes[i].held_bytes;
	return b;
}

/* Hands an outbox that is now true to the network thread. */
static void deliver(struct worker *w, struct outbox *ob)
{
	if (ob->head)
		fault_point("after_commit");
	if (ob->head && w->out)
		w->out(w->out_ctx, ob->head);
	else
		out_free_list(ob->head);
	outbox_init(ob);
}

/* ---- the store workers' side ---------------------------------------------- */

/* Is the lane's slice spent? (proto asks between the messages of a frame.) */
static int over_slice(void *ctx)
{
	struct lane *l = ctx;

	return l->slicing && mono_us() - l->t0 >= (int64_t)SLICE_MS * 1000;
}

/* Is a redo entry already handed to a store worker? Under mu. */
static size_t redo_flight_find(const struct worker *w, int64_t id)
{
	size_t i;

	for (i = 0; i < w->n_redo_flight && w->redo_flight[i] != id; i++)
		;
	return i;
}

/* proto_set_redo_out: a due redo entry becomes a JOB_REDO for the store
 * workers, under its stream's key, once (until it is done). */
static int redo_out(void *ctx, int64_t id, const char *origin)
{
	struct worker *w = ctx;
	struct job *j;
	int r = SEMQ_OK;

	pthread_mutex_lock(&w->mu);
	if (redo_flight_find(w, id) < w->n_redo_flight)
		goto out; /* queued or running */
	if (w->n_redo_flight == w->cap_redo_flight) {
		size_t cap = w->cap_redo_flight ? 2 * w->cap_redo_flight : 64;
		int64_t *v = realloc(w->redo_flight, cap * sizeof *v);
		if (!v) {
			r = SEMQ_ERR_NOMEM;
			goto out;
		}
		w->redo_flight = v;
		w->cap_redo_flight = cap;
	}
	j = job_new(JOB_REDO);
	if (!j) {
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	j->redo_id = id;
	snprintf(j->key, sizeof j->key, "%s", origin);
	w->redo_flight[w->n_redo_flight++] = id;
	dispatch_push(w->dq, j);
	pthread_cond_signal(&w->acv);
out:
	pthread_mutex_unlock(&w->mu);
	return r;
}

/*
 * Is j a job for the store workers? Data whose every message is for this
 * node, of one origin (the stream's key, set in j->key). A frame of several
 * origins (a relay's) is split into one job per origin by split_origins()
 * first; a frame with messages for other nodes stays on the store thread.
 */
static int for_workers(const struct worker *w, struct job *j)
{
	const Semq__Data *d;
	size_t i;

	if (j->kind != JOB_FRAME || !j->frame ||
	    j->frame->body_case != SEMQ__FRAME__BODY_DATA)
		return 0;
	d = j->frame->data;
	if (!d->n_messages)
		return 0;
	for (i = 0; i < d->n_messages; i++) {
		const Semq__Message *m = d->messages[i];

		if (!m->origin || strcmp(m->dest, w->c->id) != 0 ||
		    strcmp(m->origin, d->messages[0]->origin) != 0)
			return 0;
	}
	snprintf(j->key, sizeof j->key, "%s", d->messages[0]->origin);
	return 1;
}

/* A relay's frame of several origins, all for this node: one job per origin
 * (the frame encoded anew with that origin's messages, in their order).
 * NULL when it is not such a frame or on failure: the store thread then
 * takes it whole, which is correct (the database orders it), only not
 * parallel. */
static struct job *split_origins(const struct worker *w, const struct job *j)
{
	const Semq__Data *d;
	struct job *head = NULL, **tail = &head;
	Semq__Message **sub;
	size_t i, k, n = 0;

	if (j->kind != JOB_FRAME || !j->frame ||
	    j->frame->body_case != SEMQ__FRAME__BODY_DATA)
		return NULL;
	d = j->frame->data;
	for (i = 0; i < d->n_messages; i++)
		if (!d->messages[i]->dest ||
		    strcmp(d->messages[i]->dest, w->c->id) != 0)
			return NULL;
	sub = malloc(d->n_messages * sizeof *sub);
	if (!sub)
		return NULL;
	for (i = 0; i < d->n_messages; i++) {
		const char *origin = d->messages[i]->origin;
		Semq__Frame f = *j->frame;
		Semq__Data dd = *d;
		uint8_t *bytes = NULL;
		size_t len = 0;
		struct job *nj;
		char why[SEMQ_ERRLEN];

		for (k = 0; k < i; k++) /* done with an earlier message */
			if (!strcmp(d->messages[k]->origin, origin))
				break;
		if (k < i)
			continue;
		n = 0;
		for (k = i; k < d->n_messages; k++)
			if (!strcmp(d->messages[k]->origin, origin))
				sub[n++] = d->messages[k];
		dd.messages = sub;
		dd.n_messages = n;
		f.data = &dd;
		nj = job_new(JOB_FRAME);
		if (!nj ||
		    codec_encode(&f, SIZE_MAX, &bytes, &len) != SEMQ_OK ||
		    codec_decode_body(bytes + CODEC_HDR, len - CODEC_HDR,
				      &nj->frame, why, sizeof why) != SEMQ_OK) {
			free(bytes);
			job_free(nj);
			goto fail;
		}
		free(bytes);
		nj->conn_id = j->conn_id;
		snprintf(nj->peer, sizeof nj->peer, "%s", j->peer);
		nj->trusted_relay = j->trusted_relay;
		nj->enqueued_at = j->enqueued_at;
		nj->bytes = j->bytes * n / d->n_messages;
		snprintf(nj->key, sizeof nj->key, "%s", origin);
		*tail = nj;
		tail = &nj->next;
	}
	free(sub);
	return head;
fail:
	free(sub);
	while (head) {
		struct job *x = head->next;
		job_free(head);
		head = x;
	}
	return NULL;
}

/* ---- batches ---------------------------------------------------------------- */

struct backlog {
	const char *node;
	int64_t at;
	char dest[SEMQ_ID_MAX + 1];
};

static int backlog_cb(void *ctx, const struct stat_row *r)
{
	struct backlog *b = ctx;

	if (strcmp(r->table, "tb_0031") != 0 || strcmp(r->origin, b->node) ||
	    (r->status != SS_UNSEND && r->status != SS_SEND &&
	     r->status != SS_ACK) ||
	    r->oldest <= 0 || (b->at && r->oldest >= b->at))
		return 0;
	b->at = r->oldest;
	snprintf(b->dest, sizeof b->dest, "%s", r->dest);
	return 0;
}

/* The oldest unconfirmed message of this node's own, for /health
 * (worker_backlog): from the counts, one index seek per stream. */
static int scan_backlog(struct worker *w, struct store *st)
{
	struct backlog b = {w->c->id, 0, ""};
	int r;

	w->backlog_scanned = mono_us();
	r = store_counts(st, backlog_cb, &b);
	if (r != SEMQ_OK)
		return r;
	pthread_mutex_lock(&w->mu);
	w->backlog_at = b.at;
	snprintf(w->backlog_dest, sizeof w->backlog_dest, "%s", b.dest);
	pthread_mutex_unlock(&w->mu);
	return SEMQ_OK;
}

/*
 * Runs jobs [head, stop) and, if tick, proto_tick in one transaction; adds
 * what it did to *cnt once it committed. A store worker's batch may stop at
 * its slice: *rest is then the first job not run to its end (its `done`
 * says how far it got once committed), else NULL. *slow gets the key of a
 * job that alone ran longer than the slice.
 */
static int run_batch(struct lane *l, struct job *head, struct job *stop,
		     int tick, struct outbox *ob, struct proto_counts *cnt,
		     struct job **rest)
{
	struct worker *w = l->w;
	struct job *j, *cut_job = NULL;
	size_t cut_at = 0;
	int64_t now = 0;
	int r;

	*rest = NULL;
	l->t0 = mono_us();
	r = store_begin(l->st);
	/* The batch's clock is read once its write lock is held: BEGIN can
	 * wait for an application's commit, and rows that application
	 * committed meanwhile must not be stamped sent before they were
	 * created. */
	if (r == SEMQ_OK)
		now = w->clock(w->clock_ctx);
	for (j = head; j != stop && r == SEMQ_OK; j = j->next) {
		int64_t tj = mono_us();

		if (j != head && over_slice(l)) {
			*rest = j;
			break;
		}
		r = proto_job(l->p, j, now, ob);
		if (r != SEMQ_OK || !l->slicing)
			continue;
		cut_at = proto_cut(l->p);
		if (j->key[0] && l->n_marks < JOBS_PER_BATCH) {
			struct mark *mk = &l->marks[l->n_marks++];

			snprintf(mk->key, sizeof mk->key, "%s", j->key);
			mk->slow = cut_at ||
				   mono_us() - tj >= (int64_t)SLICE_MS * 1000;
		}
		if (cut_at) {
			cut_job = *rest = j;
			break;
		}
	}
	if (r == SEMQ_OK && tick)
		r = proto_tick(l->p, now, ob);
	if (r == SEMQ_OK && tick && l->idx == 0 && w->probe_left)
		r = store_probe_space(l->st, 0);
	if (r == SEMQ_OK && tick && l->idx == 0 &&
	    mono_us() - w->backlog_scanned >= BACKLOG_SCAN_MS * 1000)
		r = scan_backlog(w, l->st);
	if (r == SEMQ_OK)
		r = store_commit(l->st);
	if (r != SEMQ_OK) {
		if (store_in_batch(l->st))
			store_rollback(l->st);
		proto_rolled_back(l->p);
		outbox_clear(ob);
		*rest = NULL;
	} else {
		if (cut_job)
			cut_job->done = cut_at;
		proto_committed(l->p);
		proto_take_counts(l->p, cnt);
	}
	return r;
}

/* Enters (full, with the store's message) or leaves the disk-full state,
 * saying so once each way. */
static void set_disk_full(struct worker *w, int full, const char *why)
{
	int was;

	pthread_mutex_lock(&w->mu);
	was = w->disk_full;
	w->disk_full = full;
	pthread_mutex_unlock(&w->mu);
	if (full == was)
		return;
	if (full)
		log_msg(LOG_ERROR, "store", NULL, NULL,
			"disk full (%s); not accepting new messages until "
			"space is freed",
			why);
	else
		log_msg(LOG_INFO, "store", NULL, NULL,
			"disk has space again; resuming");
}

/* While the disk is full: can DISK_FULL_PROBE bytes be committed again?
 * Counted either way (a failed probe leaves no other trace). */
static void probe(struct worker *w)
{
	int ok;

	w->probed = mono_us();
	ok = store_probe_space(w->st, DISK_FULL_PROBE) == SEMQ_OK;
	pthread_mutex_lock(&w->mu);
	w->stats.disk_probes[ok]++;
	pthread_mutex_unlock(&w->mu);
	if (!ok)
		return;
	w->probe_left = 1;
	set_disk_full(w, 0, NULL);
}

/*
 * Another connection holds the database's lock past the busy timeout (an
 * application's long transaction): the batch is tried again whole until it
 * gets the lock or the worker stops, instead of one job at a time, each
 * waiting the timeout again and dropped (a flood of jobs would take the
 * store thread for minutes and make every peer resend). Its jobs stay
 * counted in memory_budget, so reading stays paused meanwhile. One line
 * when it starts, one every LOCK_LOG_MS, one when it got the lock.
 */
#define LOCK_LOG_MS 60000

static int stop_asked(struct worker *w)
{
	int stop;

	pthread_mutex_lock(&w->mu);
	stop = w->stop;
	pthread_mutex_unlock(&w->mu);
	return stop;
}

static int wait_for_lock(struct lane *l, struct job *jobs, size_t n, int64_t t0,
			 struct outbox *ob, struct proto_counts *cnt,
			 struct job **rest)
{
	struct worker *w = l->w;
	int64_t logged = mono_us();
	unsigned tries = 1;
	int r = SEMQ_ERR_DB;

	if (stop_asked(w))
		return r;
	log_msg(LOG_WARN, "store", NULL, NULL,
		"batch of %zu jobs waits for the database (%s); trying it "
		"again until another connection lets go of the lock",
		n, store_errmsg(l->st));
	while (!stop_asked(w)) {
		r = run_batch(l, jobs, NULL, 1, ob, cnt, rest);
		tries++;
		if (r == SEMQ_OK || !store_locked_out(l->st))
			break;
		if (mono_us() - logged >= (int64_t)LOCK_LOG_MS * 1000) {
			logged = mono_us();
			log_msg(LOG_WARN, "store", NULL, NULL,
				"still waiting for the database lock after "
				"%lld s (%u tries): %s",
				(long long)((logged - t0) / 1000000), tries,
				store_errmsg(l->st));
		}
	}
	if (r == SEMQ_OK)
		log_msg(LOG_INFO, "store", NULL, NULL,
			"got the database lock after %lld ms (%u tries)",
			(long long)((mono_us() - t0) / 1000), tries);
	return r;
}

/* Adds a batch's counts to the stats; under mu. */
static void add_stats(struct worker *w, const struct proto_counts *cnt,
		      size_t n, uint64_t us)
{
	uint64_t msgs = cnt->received + cnt->duplicates + cnt->sent;

	w->stats.batches++;
	w->stats.jobs += n;
	w->stats.commit_us_total += us;
	w->stats.received += cnt->received;
	w->stats.duplicates += cnt->duplicates;
	w->stats.sent += cnt->sent;
	w->stats.confirmed += cnt->confirmed;
	w->stats.redo_created += cnt->redo_created;
	w->stats.refused += cnt->refused;
	w->stats.resyncs += cnt->resyncs;
	w->stats.renumbered += cnt->renumbered;
	w->stats.held += cnt->held;
	for (size_t k = 0; k < 8; k++)
		w->stats.relay_refused[k] += cnt->relay_refused[k];
	w->stats.undeliverable += cnt->undeliverable;
	w->stats.looped += cnt->looped;
	w->stats.relay_forwarded += cnt->relay_forwarded;
	w->stats.relay_stored += cnt->relay_stored;
	for (size_t k = 0; k < PROTO_LATENCY_N; k++) {
		w->stats.latency_ms.count[k] += cnt->latency[k];
		w->stats.latency_ms.total += cnt->latency[k];
	}
	w->stats.latency_ms.sum += cnt->latency_sum_ms;
	w->stats.traces_refused += cnt->traces_refused;
	if (n || msgs || cnt->confirmed) {
		hist_observe(&w->stats.batch_jobs, n);
		hist_observe(&w->stats.batch_messages, msgs);
		hist_observe(&w->stats.commit_us, us);
	}
}

/* dispatch_release's keep(): the lane still holds messages of the stream. */
static int lane_holds(void *ctx, const char *key)
{
	return proto_holds(((struct lane *)ctx)->p, key);
}

/*
 * One batch of a lane: jobs (n of them) in one transaction, else one by one.
 * A store worker's jobs not run (its slice) go back to the head of the
 * queue; the keys it held are released after the commit.
 */
static void batch(struct lane *l, struct job *jobs, size_t n)
{
	struct worker *w = l->w;
	struct proto_counts cnt = {0};
	struct outbox ob;
	struct job *rest = NULL, *j;
	void (*relief)(void *ctx);
	void *relief_ctx;
	int64_t t0 = mono_us();
	int r, wake = 0, disk_full;

	outbox_init(&ob);
	l->n_marks = 0;
	r = run_batch(l, jobs, NULL, 1, &ob, &cnt, &rest);
	if (r != SEMQ_OK && store_locked_out(l->st))
		r = wait_for_lock(l, jobs, n, t0, &ob, &cnt, &rest);
	pthread_mutex_lock(&w->mu);
	disk_full = w->disk_full;
	pthread_mutex_unlock(&w->mu);
	if (r != SEMQ_OK && store_disk_full(l->st) && !disk_full) {
		set_disk_full(w, 1, store_errmsg(l->st));
		disk_full = 1;
		w->probed = mono_us();
	}
	if (r != SEMQ_OK && store_locked_out(l->st)) {
		/* Stopping while another connection holds the lock: one
		 * job at a time would wait the timeout each. Nothing of
		 * them was committed or answered; their peers resend. */
		log_msg(LOG_WARN, "store", NULL, NULL,
			"stopping: %zu jobs dropped, the database still "
			"locked (%s); their peers will resend or query",
			n, store_errmsg(l->st));
	} else if (r != SEMQ_OK) {
		/* While the disk is full only the first failure is news. */
		int level = disk_full ? LOG_DEBUG : LOG_WARN;
		int slicing = l->slicing;

		log_msg(level, "store", NULL, NULL,
			"batch of %zu jobs failed (%s: %s); retrying them one "
			"by one",
			n, semq_strerror(r), store_errmsg(l->st));
		l->slicing = 0; /* a job alone runs to its end */
		for (j = jobs; j; j = j->next) {
			struct job *none;

			r = run_batch(l, j, j->next, 0, &ob, &cnt, &none);
			if (r != SEMQ_OK)
				log_msg(disk_full && store_disk_full(l->st)
						? LOG_DEBUG
						: LOG_ERROR,
					"store", j->peer[0] ? j->peer : NULL,
					NULL, "%s dropped (%s: %s)%s",
					j->kind == JOB_ADMIN  ? "admin request"
					: j->kind == JOB_REDO ? "redo run"
							      : "job",
					semq_strerror(r), store_errmsg(l->st),
					j->kind == JOB_ADMIN ? ""
					: j->kind == JOB_REDO
						? "; it runs again when due"
						: "; the peer will resend or "
						  "query");
			else
				deliver(w, &ob);
		}
		l->slicing = slicing;
	} else {
		if (l->idx == 0)
			w->probe_left = 0; /* the batch removed it */
		deliver(w, &ob);
	}
	l->failed = r != SEMQ_OK;
	if (l->idx == 0 && disk_full &&
	    mono_us() - w->probed >= DISK_FULL_RETRY_MS * 1000)
		probe(w);
	if (l->idx)
		wake = proto_take_schedule_changed(l->p);

	pthread_mutex_lock(&w->mu);
	add_stats(w, &cnt, n, (uint64_t)(mono_us() - t0));
	for (j = jobs; j != rest; j = j->next) {
		count_bytes(w, j->conn_id, j->bytes, 0);
		if (j->kind == JOB_REDO) {
			size_t i = redo_flight_find(w, j->redo_id);
			if (i < w->n_redo_flight)
				w->redo_flight[i] =
					w->redo_flight[--w->n_redo_flight];
			wake = 1;
		}
	}
	if (l->idx) {
		struct job *last = NULL;

		for (j = jobs; j && j != rest; j = j->next)
			last = j;
		if (last)
			last->next = NULL; /* jobs: the ones done */
		else
			jobs = NULL;
		for (size_t i = 0; i < l->n_marks; i++)
			dispatch_mark_slow(w->dq, l->marks[i].key,
					   l->marks[i].slow);
		dispatch_unshift(w->dq, rest);
		dispatch_release(w->dq, l->idx, lane_holds, l);
		pthread_cond_broadcast(&w->acv);
	}
	l->held_bytes = proto_held_bytes(l->p);
	relief = w->pressed && w->queued_bytes + held_bytes(w) <
					 w->c->memory_budget / 2
			 ? w->relief
			 : NULL;
	if (relief)
		w->pressed = 0;
	relief_ctx = w->relief_ctx;
	pthread_mutex_unlock(&w->mu);
	if (relief)
		relief(relief_ctx);
	while (jobs) {
		j = jobs->next;
		job_free(jobs);
		jobs = j;
	}
	if (wake) { /* the store thread scans the redo schedule again */
		struct job *wj = job_new(JOB_WAKE);
		if (wj)
			worker_submit(w, wj);
	}
}

/* Sleeps on cv until `due` (unix ms, INT64_MAX: none) or wait_ms; mu held. */
static void wait_until(struct worker *w, pthread_cond_t *cv, int64_t wait_ms,
		       int64_t due)
{
	struct timespec ts;

	if (due != INT64_MAX) {
		int64_t until = due - w->clock(w->clock_ctx);
		if (until < wait_ms)
			wait_ms = until > 0 ? until : 0;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += wait_ms / 1000;
	ts.tv_nsec += (wait_ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	(void)pthread_cond_timedwait(cv, &w->mu, &ts);
}

/* The store thread. */
static void *run(void *arg)
{
	struct lane *l = arg;
	struct worker *w = l->w;

	for (;;) {
		struct job *jobs = NULL, *last = NULL;
		size_t n = 0;
		int stopping, busy, full;

		pthread_mutex_lock(&w->mu);
		busy = proto_busy(w->p);
		full = w->disk_full && l->failed;
		if ((full || (!w->head && !busy)) && !w->stop) {
			int64_t wait_ms = full ? DISK_FULL_RETRY_MS
					       : w->c->poll_interval_ms;
			int64_t due = full ? INT64_MAX : proto_next_due(w->p);
			struct timespec t0, t1;

			/* Until a job, the deadline, or the stop. */
			clock_gettime(CLOCK_MONOTONIC, &t0);
			while ((full || !w->head) && !w->stop) {
				int64_t spent;

				wait_until(w, &w->cv, wait_ms, due);
				clock_gettime(CLOCK_MONOTONIC, &t1);
				spent = (int64_t)(t1.tv_sec - t0.tv_sec) *
						1000 +
					(t1.tv_nsec - t0.tv_nsec) / 1000000;
				if (spent >= wait_ms ||
				    (due != INT64_MAX &&
				     w->clock(w->clock_ctx) >= due))
					break;
			}
		}
		jobs = w->head;
		for (last = jobs; last && n < JOBS_PER_BATCH - 1;
		     last = last->next)
			n++;
		if (last) {
			n++;
			w->head = last->next;
			last->next = NULL;
			if (!w->head)
				w->tail = NULL;
		} else {
			w->head = w->tail = NULL;
		}
		w->queued -= n;
		stopping = w->stop && !w->head;
		pthread_mutex_unlock(&w->mu);

		batch(l, jobs, n);
		atomic_store(&w->beat_ms, mono_us() / 1000);
		if (stopping)
			break;
	}
	return NULL;
}

/* A store worker: takes what dispatch_take() gives it, runs it, releases
 * its keys. Held messages are retried every poll_interval. */
static void *apply_run(void *arg)
{
	struct lane *l = arg;
	struct worker *w = l->w;

	for (;;) {
		struct job *jobs = NULL, *rj = NULL;
		size_t n = 0;
		int64_t idle_from = mono_us();

		pthread_mutex_lock(&w->mu);
		for (;;) {
			if (w->stop)
				break;
			jobs = dispatch_take(w->dq, l->idx, JOBS_PER_BATCH, &n);
			if (jobs)
				break;
			if (l->held_bytes &&
			    mono_us() - idle_from >=
				    w->c->poll_interval_ms * 1000)
				break; /* retry the held messages */
			wait_until(w, &w->acv, w->c->poll_interval_ms,
				   INT64_MAX);
		}
		if (w->stop && !jobs) {
			pthread_mutex_unlock(&w->mu);
			break;
		}
		if (l->routes_gen != w->routes_gen && w->routes) {
			rj = job_new(JOB_ROUTES);
			if (rj && !(rj->routes = routes_copy(w->routes))) {
				job_free(rj);
				rj = NULL;
			}
			if (rj)
				l->routes_gen = w->routes_gen;
		}
		pthread_mutex_unlock(&w->mu);
		if (rj) {
			rj->next = jobs;
			jobs = rj;
			n++;
		}
		batch(l, jobs, n);
	}
	return NULL;
}

/* "[plugin NAME] deadline", or "plugin_timeout" when it has none. */
static const char *deadline_name(const struct config *c, const char *plugin)
{
	static __thread char buf[SEMQ_ID_MAX + 32];
	size_t i;

	for (i = 0; i < c->n_plugins; i++)
		if (!strcmp(c->plugins[i].name, plugin) &&
		    c->plugins[i].deadline_ms) {
			snprintf(buf, sizeof buf, "[plugin %s] deadline",
				 plugin);
			return buf;
		}
	return "plugin_timeout";
}

/* The plugin watchdog: every WATCH_MS, every lane's running call against
 * its plugin's deadline (see DESIGN). */
static void *watch(void *arg)
{
	struct worker *w = arg;

	pthread_mutex_lock(&w->mu);
	while (!w->watch_stop) {
		size_t i;

		wait_until(w, &w->watch_cv, WATCH_MS, INT64_MAX);
		if (w->watch_stop)
			break;
		pthread_mutex_unlock(&w->mu);
		for (i = 0; i < w->n_lanes; i++) {
			struct lane *l = &w->lanes[i];
			struct plughost_call c;
			int64_t now = clock_real_ms(NULL), limit;
			int busy = plughost_running(l->ph, &c);

			limit = c.deadline_ms ? c.deadline_ms
					      : w->c->plugin_timeout_ms;
			if (busy && now - c.started > limit &&
			    l->overdue != c.serial) {
				l->overdue = c.serial;
				pthread_mutex_lock(&w->mu);
				w->stats.plugin_overdue++;
				pthread_mutex_unlock(&w->mu);
				log_msg(LOG_ERROR, "plughost", c.origin, NULL,
					"plugin '%s' has been handling %s "
					"(stream %s -> %s) for %" PRId64
					" ms, longer than %s (%" PRId64
					" ms): %s",
					c.plugin, c.msg, c.origin, w->c->id,
					now - c.started,
					deadline_name(w->c, c.plugin), limit,
					i == 0 ? "the store thread waits for "
						 "it; /health says unhealthy "
						 "until it returns"
					       : "that stream waits for it; "
						 "/health says degraded until "
						 "it returns");
			} else if (l->overdue &&
				   (!busy || c.serial != l->overdue)) {
				l->overdue = 0;
				log_msg(LOG_WARN, "plughost", NULL, NULL,
					"the plugin call that overran its "
					"deadline returned; %s",
					i == 0 ? "healthy again"
					       : "its stream goes on");
			}
		}
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int worker_start(struct worker *w)
{
	size_t i;

	atomic_store(&w->beat_ms, mono_us() / 1000);
	for (i = 0; i < w->n_lanes; i++) {
		if (pthread_create(&w->lanes[i].th, NULL,
				   i == 0 ? run : apply_run,
				   &w->lanes[i]) != 0) {
			worker_stop(w);
			return SEMQ_ERR_INTERNAL;
		}
		w->lanes[i].started = 1;
	}
	if (w->c->n_plugins &&
	    pthread_create(&w->watch_th, NULL, watch, w) == 0)
		w->watching = 1;
	return SEMQ_OK;
}

/* Is a call of lane l over its deadline? Then `what` (whatsz bytes; none
 * when 0) says which. */
static int lane_stuck(struct worker *w, struct lane *l, char *what,
		      size_t whatsz)
{
	struct plughost_call c;
	int64_t now = clock_real_ms(NULL), limit;

	if (!plughost_running(l->ph, &c))
		return 0;
	limit = c.deadline_ms ? c.deadline_ms : w->c->plugin_timeout_ms;
	if (now - c.started <= limit)
		return 0;
	if (whatsz)
		snprintf(what, whatsz,
			 "plugin '%s' has been handling %s (stream %s -> %s) "
			 "for %" PRId64 " ms",
			 c.plugin, c.msg, c.origin, w->c->id, now - c.started);
	return 1;
}

int64_t worker_backlog(struct worker *w, char *dest, size_t destsz)
{
	int64_t at;

	pthread_mutex_lock(&w->mu);
	at = w->backlog_at;
	if (destsz)
		snprintf(dest, destsz, "%s", w->backlog_dest);
	pthread_mutex_unlock(&w->mu);
	return at;
}

void worker_plugin_outcomes(struct worker *w, worker_plugin_cb cb, void *ctx)
{
	size_t i, k, n = plughost_count(w->lanes[0].ph);

	for (i = 0; i < n; i++) {
		uint64_t v[PLUGHOST_OUTCOMES] = {0};

		for (k = 0; k < w->n_lanes; k++)
			plughost_outcomes(w->lanes[k].ph, i, v);
		cb(ctx, plughost_name(w->lanes[0].ph, i), v);
	}
}

int worker_alive(struct worker *w, int64_t within_ms, int64_t *age_ms)
{
	struct plughost_call c;
	int64_t age = mono_us() / 1000 - atomic_load(&w->beat_ms);

	if (age_ms)
		*age_ms = age;
	if (age <= within_ms)
		return 1;
	/* in a plugin call not past its deadline: busy, not hung */
	return plughost_running(w->lanes[0].ph, &c) &&
	       !lane_stuck(w, &w->lanes[0], NULL, 0);
}

int worker_stuck(struct worker *w, char *what, size_t whatsz)
{
	return lane_stuck(w, &w->lanes[0], what, whatsz);
}

int worker_degraded(struct worker *w, char *what, size_t whatsz)
{
	size_t i, len = 0, n = 0;

	if (whatsz)
		what[0] = '\0';
	for (i = 1; i < w->n_lanes; i++) {
		char one[STUCK_MAX];

		if (!lane_stuck(w, &w->lanes[i], one, sizeof one))
			continue;
		n++;
		if (len < whatsz)
			len += (size_t)snprintf(what + len, whatsz - len,
						"%s%s", len ? "; " : "", one);
	}
	return n > 0;
}

int worker_heavy(struct worker *w, uint64_t conn)
{
	size_t i, share, mine = 0;
	int heavy = 0;

	pthread_mutex_lock(&w->mu);
	if (w->queued_bytes + held_bytes(w) > w->c->memory_budget) {
		w->pressed = 1;
		share = w->c->memory_budget /
			(2 * (w->n_held_by ? w->n_held_by : 1));
		for (i = 0; i < w->n_held_by; i++)
			if (w->held_by[i].conn == conn)
				mine = w->held_by[i].bytes;
		heavy = mine >= share;
	}
	pthread_mutex_unlock(&w->mu);
	return heavy;
}

void worker_set_relief(struct worker *w, void (*relief)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&w->mu);
	w->relief = relief;
	w->relief_ctx = ctx;
	pthread_mutex_unlock(&w->mu);
}

size_t worker_queued_bytes(struct worker *w, int *over)
{
	size_t b;

	pthread_mutex_lock(&w->mu);
	b = w->queued_bytes + held_bytes(w);
	if (over)
		*over = b > w->c->memory_budget;
	pthread_mutex_unlock(&w->mu);
	return b;
}

/* Queues j for the store thread; under mu. */
static void to_store_thread(struct worker *w, struct job *j)
{
	j->next = NULL;
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	w->queued++;
	pthread_cond_signal(&w->cv);
}

void worker_submit(struct worker *w, struct job *j)
{
	struct job *split = NULL;

	j->next = NULL;
	if (w->n_lanes > 1 && !for_workers(w, j))
		split = split_origins(w, j);
	pthread_mutex_lock(&w->mu);
	count_bytes(w, j->conn_id, j->bytes, 1);
	if (w->n_lanes > 1 && j->kind == JOB_ROUTES && j->routes) {
		struct routes *r = routes_copy(j->routes);
		if (r) { /* else the workers keep the older snapshot */
			routes_free(w->routes);
			w->routes = r;
			w->routes_gen++;
		}
	}
	if (split) {
		/* counted whole above; the parts carry their share */
		count_bytes(w, j->conn_id, j->bytes, 0);
		while (split) {
			struct job *x = split->next;
			count_bytes(w, split->conn_id, split->bytes, 1);
			dispatch_push(w->dq, split);
			split = x;
		}
		pthread_cond_broadcast(&w->acv);
		pthread_mutex_unlock(&w->mu);
		job_free(j);
		return;
	}
	if (w->n_lanes > 1 && j->key[0] && j->kind == JOB_FRAME) {
		dispatch_push(w->dq, j);
		pthread_cond_signal(&w->acv);
	} else {
		to_store_thread(w, j);
	}
	pthread_mutex_unlock(&w->mu);
}

void worker_stop(struct worker *w)
{
	size_t i;

	if (w && w->watching) {
		pthread_mutex_lock(&w->mu);
		w->watch_stop = 1;
		pthread_cond_signal(&w->watch_cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->watch_th, NULL);
		w->watching = 0;
	}
	if (!w || !w->lanes)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	pthread_cond_broadcast(&w->acv);
	pthread_mutex_unlock(&w->mu);
	/* The store workers first: the store thread's last batch then sends
	 * what they committed meanwhile. */
	for (i = w->n_lanes; i-- > 0;) {
		if (!w->lanes[i].started)
			continue;
		pthread_join(w->lanes[i].th, NULL);
		w->lanes[i].started = 0;
	}
}

void worker_free(struct worker *w)
{
	size_t i;

	if (!w)
		return;
	worker_stop(w);
	while (w->head) {
		struct job *j = w->head;
		w->head = j->next;
		job_free(j);
	}
	dispatch_free(w->dq);
	for (i = w->n_lanes; w->lanes && i-- > 0;) {
		proto_free(w->lanes[i].p);
		plughost_free(w->lanes[i].ph);
		store_free(w->lanes[i].st);
	}
	free(w->lanes);
	routes_free(w->routes);
	free(w->redo_flight);
	pthread_cond_destroy(&w->cv);
	pthread_cond_destroy(&w->acv);
	pthread_cond_destroy(&w->watch_cv);
	free(w->held_by);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

uint64_t worker_life(const struct worker *w)
{
	return store_life(w->st);
}

int worker_disk_full(struct worker *w)
{
	int full;

	pthread_mutex_lock(&w->mu);
	full = w->disk_full;
	pthread_mutex_unlock(&w->mu);
	return full;
}

size_t worker_workers(const struct worker *w)
{
	return w->n_lanes > 1 ? w->n_lanes - 1 : 1;
}

void worker_get_stats(struct worker *w, struct worker_stats *s)
{
	pthread_mutex_lock(&w->mu);
	*s = w->stats;
	s->apply_queued = w->dq ? dispatch_queued(w->dq) : 0;
	s->slow_streams = w->dq ? dispatch_slow_keys(w->dq) : 0;
	pthread_mutex_unlock(&w->mu);
}
