/* SPDX-License-Identifier: MIT */
/*
 * node/db.h on SQLite: the embedded default, one database file.
 *
 * DESIGN
 *  - One connection, one thread (SQLITE_OPEN_NOMUTEX), extended result
 *    codes, WAL, the synchronous level asked for (FULL unless told), foreign
 *    keys on.
 *  - The busy handler tries again every BUSY_STEP_US up to busy_timeout_ms.
 *    SQLite's own handler sleeps 1, 2, 5 ... 100 ms between tries and is
 *    never woken when the lock frees: with an application that commits every
 *    few ms, the store thread lost tens of ms per batch (measured: 12 sleeps
 *    of 100 ms in 6 s of a 500 msgs/s run).
 *  - Statements bind with SQLITE_STATIC: the caller keeps the values alive
 *    until the first step (db.h). db_reset also clears the bindings, so no
 *    statement keeps a read transaction open between uses.
 *  - SQLite numbers ?N parameters itself: the SQL is passed as written.
 */
#include "db_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include <semq/error.h>

#define DEFAULT_BUSY_MS 5000
#define BUSY_STEP_US 250

struct lite {
	struct db base;
	sqlite3 *db; /* owned */
	int busy_ms;
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
	const struct lite *l = arg;
	struct timespec ts = {0, BUSY_STEP_US * 1000L};

	if ((int64_t)tries * BUSY_STEP_US >= (int64_t)l->busy_ms * 1000)
		return 0;
	nanosleep(&ts, NULL);
	return 1;
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
			     SQLITE_OPEN_CREATE | SQLITE_OPEN_READWRITE |
				     SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		if (!l->db) {
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
	if (rc != SQLITE_OK) {
		snprintf(err, errsz, "%s: setting pragmas: %s", o->target,
			 sqlite3_errmsg(l->db));
		r = SEMQ_ERR_DB;
		goto out;
	}
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

int dblite_in_tx(struct db *d)
{
	return !sqlite3_get_autocommit(L(d)->db);
}
