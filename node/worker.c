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
 * batch.
 *
 * A watchdog thread looks every WATCH_MS at the plugin call running on the
 * store thread (plughost_stuck): one running longer than [node]
 * plugin_timeout is logged once (and /health says so, worker_stuck), its
 * return logged again. The plugin host's crash guard lives in a file
 * beside the database (guard_path).
 */
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fault.h"
#include "log.h"
#include "plughost.h"
#include "proto.h"
#include "store.h"

#define JOBS_PER_BATCH 512
#define WATCH_MS 1000                /* the watchdog looks this often */
#define DISK_FULL_RETRY_MS 2000      /* a full disk is tried this often */
#define DISK_FULL_PROBE (256 * 1024) /* bytes a retry must be able to write */

/* Upper bounds of the histograms' buckets (worker_stats); +Inf follows. */
static const uint64_t jobs_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 512};
static const uint64_t msgs_bounds[] = {1,   2,   5,   10,   20,   50,
				       100, 200, 500, 1000, 2000, 5000};
static const uint64_t commit_us_bounds[] = {500,    1000,   2500,    5000,
					    10000,  25000,  50000,   100000,
					    250000, 500000, 1000000, 2500000};

struct worker {
	const struct config *c;
	struct store *st;
	struct plughost *ph;
	struct proto *p;

	worker_output_fn out;
	void *out_ctx;
	clock_fn clock;
	void *clock_ctx;

	pthread_t th;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *head, *tail;
	size_t queued;
	int stop;

	struct worker_stats stats; /* under mu */
	int disk_full;  /* under mu; written only on the store thread */
	int probe_left; /* the probe's row is still in the table */
	int failed;     /* the last batch failed (while disk_full: wait) */
	int64_t probed; /* mono_us of the last probe */

	/* [node] memory_budget (worker.h), under mu */
	size_t queued_bytes;
	size_t held_bytes; /* proto_held_bytes() after the last batch */
	struct conn_bytes {
		uint64_t conn;
		size_t bytes;
	} * held_by; /* per connection with queued jobs */
	size_t n_held_by, cap_held_by;
	int pressed; /* went over; relief() when below half */
	void (*relief)(void *ctx);
	void *relief_ctx;

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

int worker_new(const struct config *c, worker_output_fn out, void *out_ctx,
	       clock_fn clock, void *clock_ctx, struct worker **wout, char *err,
	       size_t errsz)
{
	struct store_opts so = {0};
	pthread_condattr_t ca;
	struct worker *w;
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
	pthread_cond_init(&w->watch_cv, &ca);
	pthread_condattr_destroy(&ca);
	hist_init(&w->stats.batch_jobs, jobs_bounds,
		  sizeof jobs_bounds / sizeof jobs_bounds[0]);
	hist_init(&w->stats.batch_messages, msgs_bounds,
		  sizeof msgs_bounds / sizeof msgs_bounds[0]);
	hist_init(&w->stats.commit_us, commit_us_bounds,
		  sizeof commit_us_bounds / sizeof commit_us_bounds[0]);

	so.path = c->db;
	so.node_id = c->id;
	so.max_payload = c->max_payload;
	so.synchronous = c->synchronous;
	so.redo_levels_ms = c->redo_levels_ms;
	so.n_redo_levels = c->n_redo_levels;
	so.max_tries = c->max_tries;
	r = store_open(&so, &w->st, err, errsz);
	if (r != SEMQ_OK)
		goto out;
	if (store_migrated_from(w->st) >= 1 &&
	    store_migrated_from(w->st) < store_schema_version(w->st)) {
		char shown[512];

		semq_db_shown(c->db, shown, sizeof shown);
		log_msg(LOG_WARN, "store", NULL, NULL,
			"%s: migrated from schema %d to %d; the database as it "
			"was is kept in %s",
			shown, store_migrated_from(w->st),
			store_schema_version(w->st), store_backup(w->st));
	}
	r = plughost_new(c, store_plugin_tx(w->st), &w->ph, err, errsz);
	if (r != SEMQ_OK) {
		/* missing file or symbol, wrong ABI, refused options: all
		 * fixed in node.ini or by rebuilding the plugin */
		r = SEMQ_ERR_PLUGIN;
		goto out;
	}
	if (c->n_plugins) {
		char gpath[4096], gerr[SEMQ_ERRLEN];

		guard_path(c, gpath, sizeof gpath);
		if (plughost_guard_open(w->ph, gpath, gerr, sizeof gerr) !=
		    SEMQ_OK)
			log_msg(LOG_WARN, "plughost", NULL, NULL,
				"no crash guard (%s): a document that crashes "
				"the node will be handed to its plugin again "
				"at every start",
				gerr);
	}
	w->p = proto_new(w->st, w->ph, c);
	if (!w->p) {
		snprintf(err, errsz, "out of memory");
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
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

/* Runs jobs [head, stop) and, if tick, proto_tick in one transaction; adds
 * what it did to *cnt once it committed. */
static int run_batch(struct worker *w, struct job *head, struct job *stop,
		     int tick, struct outbox *ob, struct proto_counts *cnt)
{
	struct job *j;
	int64_t now = 0;
	int r;

	r = store_begin(w->st);
	/* The batch's clock is read once its write lock is held: BEGIN can
	 * wait for an application's commit, and rows that application
	 * committed meanwhile must not be stamped sent before they were
	 * created. */
	if (r == SEMQ_OK)
		now = w->clock(w->clock_ctx);
	for (j = head; j != stop && r == SEMQ_OK; j = j->next)
		r = proto_job(w->p, j, now, ob);
	if (r == SEMQ_OK && tick)
		r = proto_tick(w->p, now, ob);
	if (r == SEMQ_OK && tick && w->probe_left)
		r = store_probe_space(w->st, 0);
	if (r == SEMQ_OK)
		r = store_commit(w->st);
	if (r != SEMQ_OK) {
		if (store_in_batch(w->st))
			store_rollback(w->st);
		proto_rolled_back(w->p);
		outbox_clear(ob);
	} else {
		proto_committed(w->p);
		proto_take_counts(w->p, cnt);
	}
	return r;
}

/* Enters (full, with the store's message) or leaves the disk-full state,
 * saying so once each way. */
static void set_disk_full(struct worker *w, int full, const char *why)
{
	if (full == w->disk_full)
		return;
	if (full)
		log_msg(LOG_ERROR, "store", NULL, NULL,
			"disk full (%s); not accepting new messages until "
			"space is freed",
			why);
	else
		log_msg(LOG_INFO, "store", NULL, NULL,
			"disk has space again; resuming");
	pthread_mutex_lock(&w->mu);
	w->disk_full = full;
	pthread_mutex_unlock(&w->mu);
}

/* While the disk is full: can DISK_FULL_PROBE bytes be committed again? */
static void probe(struct worker *w)
{
	w->probed = mono_us();
	if (store_probe_space(w->st, DISK_FULL_PROBE) != SEMQ_OK)
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

static int wait_for_lock(struct worker *w, struct job *jobs, size_t n,
			 int64_t t0, struct outbox *ob,
			 struct proto_counts *cnt)
{
	int64_t logged = mono_us();
	unsigned tries = 1;
	int r = SEMQ_ERR_DB;

	if (stop_asked(w))
		return r;
	log_msg(LOG_WARN, "store", NULL, NULL,
		"batch of %zu jobs waits for the database (%s); trying it "
		"again until another connection lets go of the lock",
		n, store_errmsg(w->st));
	while (!stop_asked(w)) {
		r = run_batch(w, jobs, NULL, 1, ob, cnt);
		tries++;
		if (r == SEMQ_OK || !store_locked_out(w->st))
			break;
		if (mono_us() - logged >= (int64_t)LOCK_LOG_MS * 1000) {
			logged = mono_us();
			log_msg(LOG_WARN, "store", NULL, NULL,
				"still waiting for the database lock after "
				"%lld s (%u tries): %s",
				(long long)((logged - t0) / 1000000), tries,
				store_errmsg(w->st));
		}
	}
	if (r == SEMQ_OK)
		log_msg(LOG_INFO, "store", NULL, NULL,
			"got the database lock after %lld ms (%u tries)",
			(long long)((mono_us() - t0) / 1000), tries);
	return r;
}

static void batch(struct worker *w, struct job *jobs, size_t n)
{
	struct proto_counts cnt = {0};
	struct outbox ob;
	void (*relief)(void *ctx);
	void *relief_ctx;
	int64_t t0 = mono_us();
	uint64_t us, msgs;
	struct job *j;
	int r;

	outbox_init(&ob);
	r = run_batch(w, jobs, NULL, 1, &ob, &cnt);
	if (r != SEMQ_OK && store_locked_out(w->st))
		r = wait_for_lock(w, jobs, n, t0, &ob, &cnt);
	if (r != SEMQ_OK && store_disk_full(w->st) && !w->disk_full) {
		set_disk_full(w, 1, store_errmsg(w->st));
		w->probed = mono_us();
	}
	if (r != SEMQ_OK && store_locked_out(w->st)) {
		/* Stopping while another connection holds the lock: one
		 * job at a time would wait the timeout each. Nothing of
		 * them was committed or answered; their peers resend. */
		log_msg(LOG_WARN, "store", NULL, NULL,
			"stopping: %zu jobs dropped, the database still "
			"locked (%s); their peers will resend or query",
			n, store_errmsg(w->st));
	} else if (r != SEMQ_OK) {
		/* While the disk is full only the first failure is news. */
		int level = w->disk_full ? LOG_DEBUG : LOG_WARN;

		log_msg(level, "store", NULL, NULL,
			"batch of %zu jobs failed (%s: %s); retrying them one "
			"by one",
			n, semq_strerror(r), store_errmsg(w->st));
		for (j = jobs; j; j = j->next) {
			r = run_batch(w, j, j->next, 0, &ob, &cnt);
			if (r != SEMQ_OK)
				log_msg(w->disk_full && store_disk_full(w->st)
						? LOG_DEBUG
						: LOG_ERROR,
					"store", j->peer[0] ? j->peer : NULL,
					NULL, "%s dropped (%s: %s)%s",
					j->kind == JOB_ADMIN ? "admin request"
							     : "job",
					semq_strerror(r), store_errmsg(w->st),
					j->kind == JOB_ADMIN
						? ""
						: "; the peer will resend or "
						  "query");
			else
				deliver(w, &ob);
		}
	} else {
		w->probe_left = 0; /* the batch removed it */
		deliver(w, &ob);
	}
	w->failed = r != SEMQ_OK;
	if (w->disk_full && mono_us() - w->probed >= DISK_FULL_RETRY_MS * 1000)
		probe(w);
	us = (uint64_t)(mono_us() - t0);
	msgs = cnt.received + cnt.duplicates + cnt.sent;
	pthread_mutex_lock(&w->mu);
	w->stats.batches++;
	w->stats.jobs += n;
	w->stats.commit_us_total += us;
	w->stats.received += cnt.received;
	w->stats.duplicates += cnt.duplicates;
	w->stats.sent += cnt.sent;
	w->stats.confirmed += cnt.confirmed;
	w->stats.redo_created += cnt.redo_created;
	w->stats.refused += cnt.refused;
	w->stats.resyncs += cnt.resyncs;
	w->stats.renumbered += cnt.renumbered;
	w->stats.held += cnt.held;
	for (size_t k = 0; k < 8; k++)
		w->stats.relay_refused[k] += cnt.relay_refused[k];
	w->stats.undeliverable += cnt.undeliverable;
	w->stats.looped += cnt.looped;
	if (n || msgs || cnt.confirmed) {
		hist_observe(&w->stats.batch_jobs, n);
		hist_observe(&w->stats.batch_messages, msgs);
		hist_observe(&w->stats.commit_us, us);
	}
	for (j = jobs; j; j = j->next)
		count_bytes(w, j->conn_id, j->bytes, 0);
	w->held_bytes = proto_held_bytes(w->p);
	relief = w->pressed && w->queued_bytes + w->held_bytes <
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
}

static void *run(void *arg)
{
	struct worker *w = arg;

	for (;;) {
		struct job *jobs = NULL, *last = NULL;
		size_t n = 0;
		int stopping, busy, full;

		pthread_mutex_lock(&w->mu);
		busy = proto_busy(w->p);
		full = w->disk_full && w->failed;
		if ((full || (!w->head && !busy)) && !w->stop) {
			struct timespec ts;
			int64_t wait_ms = full ? DISK_FULL_RETRY_MS
					       : w->c->poll_interval_ms;
			int64_t due = full ? INT64_MAX : proto_next_due(w->p);
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
			while ((full || !w->head) && !w->stop &&
			       pthread_cond_timedwait(&w->cv, &w->mu, &ts) !=
				       ETIMEDOUT)
				;
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

		batch(w, jobs, n);
		if (stopping)
			break;
	}
	return NULL;
}

/* The plugin watchdog (see DESIGN). */
static void *watch(void *arg)
{
	struct worker *w = arg;
	char what[256] = "";
	int was = 0;

	pthread_mutex_lock(&w->mu);
	while (!w->watch_stop) {
		struct timespec ts;
		int now_stuck;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += WATCH_MS / 1000;
		ts.tv_nsec += (WATCH_MS % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&w->watch_cv, &w->mu, &ts);
		if (w->watch_stop)
			break;
		pthread_mutex_unlock(&w->mu);
		now_stuck = plughost_stuck(w->ph, clock_real_ms(NULL),
					   w->c->plugin_timeout_ms, what,
					   sizeof what);
		if (now_stuck && !was)
			log_msg(LOG_ERROR, "plughost", NULL, NULL,
				"%s, longer than plugin_timeout (%" PRId64
				" ms): the store thread waits for it; /health "
				"says unhealthy until it returns",
				what, w->c->plugin_timeout_ms);
		else if (!now_stuck && was)
			log_msg(LOG_WARN, "plughost", NULL, NULL,
				"the plugin call that was stuck returned; "
				"healthy again");
		was = now_stuck;
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int worker_start(struct worker *w)
{
	if (pthread_create(&w->th, NULL, run, w) != 0)
		return SEMQ_ERR_INTERNAL;
	w->started = 1;
	if (w->c->n_plugins &&
	    pthread_create(&w->watch_th, NULL, watch, w) == 0)
		w->watching = 1;
	return SEMQ_OK;
}

int worker_stuck(struct worker *w, char *what, size_t whatsz)
{
	return plughost_stuck(w->ph, clock_real_ms(NULL),
			      w->c->plugin_timeout_ms, what, whatsz);
}

int worker_heavy(struct worker *w, uint64_t conn)
{
	size_t i, share, mine = 0;
	int heavy = 0;

	pthread_mutex_lock(&w->mu);
	if (w->queued_bytes + w->held_bytes > w->c->memory_budget) {
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
	b = w->queued_bytes + w->held_bytes;
	if (over)
		*over = b > w->c->memory_budget;
	pthread_mutex_unlock(&w->mu);
	return b;
}

void worker_submit(struct worker *w, struct job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&w->mu);
	count_bytes(w, j->conn_id, j->bytes, 1);
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	w->queued++;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void worker_stop(struct worker *w)
{
	if (w && w->watching) {
		pthread_mutex_lock(&w->mu);
		w->watch_stop = 1;
		pthread_cond_signal(&w->watch_cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->watch_th, NULL);
		w->watching = 0;
	}
	if (!w || !w->started)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->th, NULL);
	w->started = 0;
}

void worker_free(struct worker *w)
{
	if (!w)
		return;
	worker_stop(w);
	while (w->head) {
		struct job *j = w->head;
		w->head = j->next;
		job_free(j);
	}
	proto_free(w->p);
	plughost_free(w->ph);
	store_free(w->st);
	pthread_cond_destroy(&w->cv);
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

void worker_get_stats(struct worker *w, struct worker_stats *s)
{
	pthread_mutex_lock(&w->mu);
	*s = w->stats;
	pthread_mutex_unlock(&w->mu);
}
