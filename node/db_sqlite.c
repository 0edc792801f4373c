/* SPDX-License-Identifier: MIT */
/*
 * node/db.h on SQLite: the embedded default, one database file.
 *
 * DESIGN
 *  - One connection, one thread (SQLITE_OPEN_NOMUTEX), extended result
 *    codes, WAL, the synchronous level asked for (FULL unless told), foreign
 *    keys on.
 *  - The busy handler tries again every BUSY_FAST_US for the first
 *    BUSY_FAST_MS of a wait, then every BUSY_STEP_US, up to busy_timeout_ms
 *    (by the clock). Nothing wakes it when the lock frees, and an
 *    application that commits in a loop takes the lock again within tens of
 *    µs of its COMMIT: polled every 250 µs, the store thread missed that gap
 *    behind several short application transactions in a row (p99 commit ->
 *    effect 18-23 ms at 10,000 msgs/s; 9-12 ms polling every 20 µs for up to
 *    20 ms; docs/PERFORMANCE.md, fix 8). Behind a long transaction (a bulk
 *    insert) the slower step keeps the polling from taking the CPU the
 *    application needs. SQLite's own handler sleeps 1, 2, 5 ... 100 ms and
 *    lost tens of ms per batch (12 sleeps of 100 ms in 6 s at 500 msgs/s).
 *  - Statements bind with SQLITE_STATIC: the caller keeps the values alive
 *    until the first step (db.h). db_reset also clears the bindings, so no
 *    statement keeps a read transaction open between uses.
 *  - SQLite numbers ?N parameters itself: the SQL is passed as written.
 *  - The WAL is checkpointed on a thread of its own, with a connection of
 *    its own (struct ckpt), not inside the store thread's commits: SQLite's
 *    automatic checkpoint runs in the commit that takes the WAL past 1000
 *    pages and copies those pages into the database file and syncs it
 *    there, while the batch's messages wait for it. The store connection's
 *    WAL hook (it replaces the automatic checkpoint) wakes the checkpointer
 *    once the WAL holds CKPT_PAGES; the checkpointer runs a PASSIVE
 *    checkpoint, which never blocks a writer or reader and is made durable
 *    at the same synchronous level. If the thread cannot start, SQLite's
 *    automatic checkpoint stays on. A file whose checkpoints fail (a full
 *    disk) is logged once, and again when they succeed.
 */
#include "db_driver.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sqlite3.h>

#include <semq/error.h>

#include "log.h"

#define CACHE_KIB "16384" /* the page cache of a connection: 16 MiB */
#define DEFAULT_BUSY_MS 5000
#define BUSY_STEP_US 250
#define BUSY_FAST_US 20
#define BUSY_FAST_MS 20
/* WAL pages that wake the checkpointer: below the 1000 at which an
 * application's own connection would checkpoint in its commit. */
#define CKPT_PAGES 500

/* The checkpointer of one database file (see DESIGN). */
struct ckpt {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sqlite3 *db; /* owned; used by the thread only */
	int wanted;  /* under mu: the WAL reached CKPT_PAGES */
	int stop;    /* under mu */
	int failing; /* the thread's: the last checkpoint failed */
	char name[512];
};

struct lite {
	struct db base;
	sqlite3 *db;       /* owned */
	struct ckpt *ckpt; /* owned; NULL: SQLite's automatic checkpoint */
	int busy_ms;
	struct timespec busy_since; /* the first try of the current wait */
};

struct lite_stmt {
	struct db_stmt base;
	sqlite3_stmt *s; /* owned */
};

static struct lite *L(struct db *d)
{
	return (struct lite *)d;
}

static sqlite3_stmt *S(struct db_stmt *s)
{
	return ((struct lite_stmt *)s)->s;
}

static enum db_errclass classify(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED: return DB_E_BUSY;
	case SQLITE_FULL:
	case SQLITE_IOERR: return DB_E_FULL;
	case SQLITE_CONSTRAINT:
		if (rc == SQLITE_CONSTRAINT_UNIQUE ||
		    rc == SQLITE_CONSTRAINT_PRIMARYKEY)
			return DB_E_UNIQUE;
		return DB_E_CONSTRAINT;
	default: return DB_E_OTHER;
	}
}

/* Records SQLite's last error on d; returns SEMQ_ERR_DB. */
static int liteerr(struct lite *l, int rc)
{
	return db_seterr(&l->base, classify(rc), "%s", sqlite3_errmsg(l->db));
}

static int busy_wait(void *arg, int tries)
{
	struct lite *l = arg;
	struct timespec now, ts = {0, BUSY_STEP_US * 1000L};
	int64_t waited_us;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (tries == 0)
		l->busy_since = now;
	waited_us = (int64_t)(now.tv_sec - l->busy_since.tv_sec) * 1000000 +
		    (now.tv_nsec - l->busy_since.tv_nsec) / 1000;
	if (waited_us >= (int64_t)l->busy_ms * 1000)
		return 0;
	if (waited_us < BUSY_FAST_MS * 1000)
		ts.tv_nsec = BUSY_FAST_US * 1000L;
	nanosleep(&ts, NULL);
	return 1;
}

static void *ckpt_run(void *arg)
{
	struct ckpt *k = arg;
	int rc, log_frames, done_frames;

	pthread_mutex_lock(&k->mu);
	for (;;) {
		while (!k->wanted && !k->stop)
			pthread_cond_wait(&k->cv, &k->mu);
		if (k->stop)
			break;
		k->wanted = 0;
		pthread_mutex_unlock(&k->mu);
		rc = sqlite3_wal_checkpoint_v2(k->db, NULL,
					       SQLITE_CHECKPOINT_PASSIVE,
					       &log_frames, &done_frames);
		if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY &&
		    !k->failing) {
			k->failing = 1;
			log_warn("store",
				 "%s: WAL checkpoint failed: %s; the WAL file "
				 "grows until one succeeds (is the disk full?)",
				 k->name, sqlite3_errmsg(k->db));
		} else if (rc == SQLITE_OK && k->failing) {
			k->failing = 0;
			log_info("store", "%s: WAL checkpoints succeed again",
				 k->name);
		}
		pthread_mutex_lock(&k->mu);
	}
	pthread_mutex_unlock(&k->mu);
	return NULL;
}

/* The store connection's WAL hook: after each of its commits. */
static int ckpt_hook(void *arg, sqlite3 *db, const char *schema, int pages)
{
	struct ckpt *k = arg;

	(void)db;
	(void)schema;
	if (pages >= CKPT_PAGES) {
		pthread_mutex_lock(&k->mu);
		k->wanted = 1;
		pthread_cond_signal(&k->cv);
		pthread_mutex_unlock(&k->mu);
	}
	return SQLITE_OK;
}

static void ckpt_stop(struct ckpt *k)
{
	pthread_mutex_lock(&k->mu);
	k->stop = 1;
	pthread_cond_signal(&k->cv);
	pthread_mutex_unlock(&k->mu);
	pthread_join(k->thread, NULL);
	sqlite3_close(k->db);
	pthread_cond_destroy(&k->cv);
	pthread_mutex_destroy(&k->mu);
	free(k);
}

/*
 * Starts the checkpointer of l's file, connected at the synchronous level
 * sync_sql, and hands the WAL over to it. A database without a file (in
 * memory, temporary) has no WAL to checkpoint; on any failure SQLite's
 * automatic checkpoint stays on and the store works as before.
 */
static void ckpt_start(struct lite *l, const char *sync_sql)
{
	const char *file = sqlite3_db_filename(l->db, "main");
	struct ckpt *k;

	if (!file || !*file)
		return;
	k = calloc(1, sizeof *k);
	if (!k)
		return;
	snprintf(k->name, sizeof k->name, "%s", l->base.name);
	if (sqlite3_open_v2(file, &k->db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
			    NULL) != SQLITE_OK ||
	    sqlite3_exec(k->db, sync_sql, NULL, NULL, NULL) != SQLITE_OK) {
		sqlite3_close(k->db);
		free(k);
		return;
	}
	pthread_mutex_init(&k->mu, NULL);
	pthread_cond_init(&k->cv, NULL);
	if (pthread_create(&k->thread, NULL, ckpt_run, k) != 0) {
		sqlite3_close(k->db);
		pthread_cond_destroy(&k->cv);
		pthread_mutex_destroy(&k->mu);
		free(k);
		return;
	}
	l->ckpt = k;
	sqlite3_wal_hook(l->db, ckpt_hook, k);
}

/*
 * PRAGMA journal_mode = WAL: the first statement that reads the file, so a
 * foreign file fails here ("file is not a database"). While another process
 * converts a new file, SQLite answers SQLITE_BUSY at once instead of calling
 * the busy handler: retry for the busy budget (counted in sleeps, not read
 * from a clock).
 */
static int set_wal(struct lite *l, char *err, size_t errsz)
{
	const char *mode;
	sqlite3_stmt *s = NULL;
	int r = SEMQ_ERR_DB, rc, slept = 0;

	for (;;) {
		rc = sqlite3_prepare_v2(l->db, "PRAGMA journal_mode = WAL", -1,
					&s, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_step(s);
		if ((rc & 0xff) != SQLITE_BUSY || slept >= l->busy_ms)
			break;
		sqlite3_finalize(s);
		s = NULL;
		slept += sqlite3_sleep(10);
	}
	if (rc != SQLITE_ROW) {
		r = (rc & 0xff) == SQLITE_IOERR ||
				    (rc & 0xff) == SQLITE_CANTOPEN
			    ? SEMQ_ERR_IO
			    : SEMQ_ERR_DB;
		snprintf(err, errsz, "%s: setting WAL journal mode: %s",
			 l->base.name, sqlite3_errmsg(l->db));
		goto out;
	}
	mode = (const char *)sqlite3_column_text(s, 0);
	if (!mode || strcmp(mode, "wal") != 0) {
		snprintf(err, errsz,
			 "%s: cannot use WAL journal mode (got '%s')",
			 l->base.name, mode ? mode : "");
		goto out;
	}
	r = SEMQ_OK;
out:
	sqlite3_finalize(s);
	return r;
}

int dblite_open(const struct db_open_opts *o, struct db **out, char *err,
		size_t errsz)
{
	static const char *const sync_sql[] = {
		"PRAGMA synchronous = OFF", "PRAGMA synchronous = NORMAL",
		"PRAGMA synchronous = FULL", "PRAGMA synchronous = EXTRA"};
	struct lite *l;
	int r = SEMQ_ERR_DB, rc;

	if (o->synchronous < -1 || o->synchronous > 3) {
		snprintf(err, errsz, "%s: synchronous must be -1 or 0..3",
			 o->target);
		return SEMQ_ERR_INVALID;
	}
	l = calloc(1, sizeof *l);
	if (!l) {
		snprintf(err, errsz, "%s: out of memory", o->target);
		return SEMQ_ERR_NOMEM;
	}
	l->base.kind = DB_SQLITE;
	snprintf(l->base.name, sizeof l->base.name, "%s", o->target);
	l->busy_ms =
		o->busy_timeout_ms > 0 ? o->busy_timeout_ms : DEFAULT_BUSY_MS;

	rc = sqlite3_open_v2(o->target, &l->db,
			     (o->no_create ? 0 : SQLITE_OPEN_CREATE) |
				     SQLITE_OPEN_READWRITE |
				     SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		struct stat st;

		if (o->no_create && l->db && stat(o->target, &st) != 0 &&
		    errno == ENOENT) {
			snprintf(err, errsz, "database %s does not exist",
				 o->target);
			r = SEMQ_ERR_NOT_FOUND;
		} else if (!l->db) {
			snprintf(err, errsz, "%s: out of memory", o->target);
			r = SEMQ_ERR_NOMEM;
		} else {
			snprintf(err, errsz, "%s: cannot open: %s", o->target,
				 sqlite3_errmsg(l->db));
			r = SEMQ_ERR_IO;
		}
		goto out;
	}
	sqlite3_extended_result_codes(l->db, 1);
	sqlite3_busy_handler(l->db, busy_wait, l);
	r = set_wal(l, err, errsz);
	if (r)
		goto out;
	rc = sqlite3_exec(l->db,
			  sync_sql[o->synchronous < 0 ? 2 : o->synchronous],
			  NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(l->db, "PRAGMA foreign_keys = ON", NULL, NULL,
				  NULL);
	/* A batch that numbers, sends and confirms thousands of 1 KB rows
	 * dirties more pages than SQLite's default 2 MiB cache holds: it
	 * would write them to the WAL in the middle of the transaction and
	 * read them back (docs/PERFORMANCE.md, "The lean outbox"). */
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(l->db, "PRAGMA cache_size = -" CACHE_KIB,
				  NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(l->db, "PRAGMA temp_store = MEMORY", NULL,
				  NULL, NULL);
	if (rc != SQLITE_OK) {
		snprintf(err, errsz, "%s: setting pragmas: %s", o->target,
			 sqlite3_errmsg(l->db));
		r = SEMQ_ERR_DB;
		goto out;
	}
	ckpt_start(l, sync_sql[o->synchronous < 0 ? 2 : o->synchronous]);
	*out = &l->base;
	l = NULL;
	r = SEMQ_OK;
out:
	if (l) {
		sqlite3_close(l->db);
		free(l);
	}
	return r;
}

void dblite_close(struct db *d)
{
	struct lite *l = L(d);

	/* The checkpointer's connection first: the store's, closing last,
	 * checkpoints what is left and removes the WAL. */
	if (l->ckpt) {
		sqlite3_wal_hook(l->db, NULL, NULL);
		ckpt_stop(l->ckpt);
	}
	sqlite3_close(l->db);
	free(l);
}

void *dblite_handle(struct db *d)
{
	return L(d)->db;
}

int dblite_exec(struct db *d, const char *sql)
{
	struct lite *l = L(d);
	char *msg = NULL;
	int rc = sqlite3_exec(l->db, sql, NULL, NULL, &msg);

	if (rc == SQLITE_OK)
		return SEMQ_OK;
	db_seterr(d, classify(sqlite3_extended_errcode(l->db)), "%s",
		  msg ? msg : sqlite3_errmsg(l->db));
	sqlite3_free(msg);
	return SEMQ_ERR_DB;
}

int dblite_prepare(struct db *d, const char *sql, struct db_stmt **out)
{
	struct lite *l = L(d);
	struct lite_stmt *s = calloc(1, sizeof *s);
	int rc;

	if (!s)
		return db_seterr(d, DB_E_OTHER, "out of memory");
	rc = sqlite3_prepare_v3(l->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
				&s->s, NULL);
	if (rc != SQLITE_OK) {
		liteerr(l, rc);
		sqlite3_finalize(s->s);
		free(s);
		return SEMQ_ERR_DB;
	}
	s->base.d = d;
	*out = &s->base;
	return SEMQ_OK;
}

void dblite_finalize(struct db_stmt *s)
{
	sqlite3_finalize(S(s));
	free(s);
}

void dblite_bind_int64(struct db_stmt *s, int i, int64_t v)
{
	sqlite3_bind_int64(S(s), i, (sqlite3_int64)v);
}

void dblite_bind_text(struct db_stmt *s, int i, const char *v)
{
	if (v)
		sqlite3_bind_text(S(s), i, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(S(s), i);
}

void dblite_bind_blob(struct db_stmt *s, int i, const void *p, size_t n)
{
	/* A zero-length blob, never NULL: SQLite binds NULL for a NULL
	 * pointer. */
	sqlite3_bind_blob64(S(s), i, n ? p : "", n, SQLITE_STATIC);
}

void dblite_bind_null(struct db_stmt *s, int i)
{
	sqlite3_bind_null(S(s), i);
}

int dblite_step(struct db_stmt *s)
{
	struct lite *l = L(s->d);
	int rc = sqlite3_step(S(s));

	if (rc == SQLITE_ROW)
		return DB_ROW;
	if (rc == SQLITE_DONE) {
		if (!sqlite3_stmt_readonly(S(s)))
			s->d->changes = sqlite3_changes64(l->db);
		return DB_DONE;
	}
	return liteerr(l, sqlite3_extended_errcode(l->db));
}

void dblite_reset(struct db_stmt *s)
{
	sqlite3_reset(S(s));
	sqlite3_clear_bindings(S(s));
}

int dblite_col_null(struct db_stmt *s, int c)
{
	return sqlite3_column_type(S(s), c) == SQLITE_NULL;
}

int64_t dblite_col_int64(struct db_stmt *s, int c)
{
	return sqlite3_column_int64(S(s), c);
}

const char *dblite_col_text(struct db_stmt *s, int c)
{
	return (const char *)sqlite3_column_text(S(s), c);
}

const void *dblite_col_blob(struct db_stmt *s, int c, size_t *n)
{
	const void *p = sqlite3_column_blob(S(s), c);

	*n = (size_t)sqlite3_column_bytes(S(s), c);
	return p;
}

const char *dblite_col_name(struct db_stmt *s, int c)
{
	if (c < 0 || c >= sqlite3_column_count(S(s)))
		return NULL;
	return sqlite3_column_name(S(s), c);
}

int dblite_in_tx(struct db *d)
{
	return !sqlite3_get_autocommit(L(d)->db);
}
