/* SPDX-License-Identifier: MIT */
/*
 * The SQL driver under the store: one small interface — connect, prepare,
 * bind, step, read columns, classify errors — with two implementations,
 * node/db_sqlite.c (the embedded default, a database file) and node/db_pg.c
 * (PostgreSQL over libpq, selected by a `postgresql://` or `postgres://` URL).
 * node/store.c holds all the logic and all the SQL; this layer only carries
 * it. Nothing outside the store includes this header.
 *
 * DESIGN
 *  - SQL text is written once, with numbered parameters `?1`, `?2`, … (each
 *    may appear more than once). The PostgreSQL driver rewrites them to `$1`,
 *    `$2`, … when it prepares the statement (outside string literals). Where
 *    the two dialects differ, the store keeps two texts and picks by
 *    db_kind().
 *  - A statement is prepared once and reused: bind, step until DB_DONE (or
 *    stop early), db_reset(). Bindings are borrowed (like SQLITE_STATIC): the
 *    pointers must stay valid until the first db_step() after binding.
 *    db_reset() drops the bindings and any unread rows.
 *  - Column values are borrowed until the next db_step() or db_reset() of the
 *    same statement.
 *  - One `struct db` is used by one thread. db_stmt_busy() tells whether a
 *    statement is between its first step and its reset (rows may remain), so
 *    the store can give a re-entering callback a private copy.
 *  - A statement that may return many rows is prepared with
 *    db_prepare_bulk(): its rows are read as it is stepped, never the whole
 *    result at once (SQLite always works so; PostgreSQL reads them one at a
 *    time off the connection). Other statements may still run between two
 *    steps of it, on either driver: on PostgreSQL the rows not read yet are
 *    then read ahead into memory first (the connection carries one command
 *    at a time), so a loop that runs nothing else while it steps holds one
 *    row, and one that does holds what was left of the result. Only the
 *    native handle (db_handle) bypasses this: use it only after a call of
 *    this interface that runs SQL (the store runs SAVEPOINT before a
 *    plugin).
 *  - Errors: a failing call returns a negative SEMQ_ERR_* (include/semq/error.h)
 *    and leaves db_errmsg() / db_errclass() describing it until the next call.
 *  - Transactions are plain SQL run through statements or db_exec(); the
 *    driver only reports whether one is open (db_in_tx).
 */
#ifndef SEMQ_DB_H
#define SEMQ_DB_H

#include <stddef.h>
#include <stdint.h>

struct db;
struct db_stmt;

enum db_kind {
	DB_SQLITE = 1, /* same value as SEMQ_DB_SQLITE in <semq/plugin.h> */
	DB_PG = 2      /* same value as SEMQ_DB_PG */
};

/* What db_step returns besides an error. */
enum { DB_DONE = 0, DB_ROW = 1 };

/* What kind of failure the last error was. */
enum db_errclass {
	DB_E_NONE = 0,
	DB_E_OTHER,  /* anything below */
	DB_E_BUSY,   /* locked by another connection past the timeout */
	DB_E_FULL,   /* disk full, size limit, failed write: wait for room */
	DB_E_UNIQUE, /* a unique index refused the row */
	DB_E_CONSTRAINT, /* another constraint (CHECK, NOT NULL, a trigger's
			    RAISE) refused the row; db_errmsg names it */
	DB_E_CONFLICT,   /* deadlock or serialization failure: the transaction
			    was aborted; run it again */
	DB_E_LOST        /* the connection to the server is gone: the open
			    transaction is lost; the next db_exec/step after
			    db_reconnect() may work */
};

struct db_open_opts {
	const char *target;  /* file path, or a postgresql:// URL */
	int synchronous;     /* SQLite: 0 OFF .. 3 EXTRA; -1 = FULL.
				PostgreSQL: <2 sets synchronous_commit off for
				this session, else the server's setting */
	int busy_timeout_ms; /* SQLite: lock wait; PostgreSQL: lock_timeout
				(0 = 5000) */
	int no_create;       /* SQLite: a missing file is SEMQ_ERR_NOT_FOUND,
				not created */
};

/* Is this target a PostgreSQL URL (postgresql:// or postgres://)? */
int db_is_url(const char *target);

/*
 * Connects (SQLite: opens or creates the file, WAL, foreign pragmas; the
 * caller's SQL does the rest). On success *out owns the connection. On
 * failure err gets one line naming the target (a URL with its password
 * replaced by "***") and the reason; returns SEMQ_ERR_DB or SEMQ_ERR_IO.
 */
int db_open(const struct db_open_opts *o, struct db **out, char *err,
	    size_t errsz);
void db_close(struct db *d); /* accepts NULL; finalises nothing: finalise
				statements first */

enum db_kind db_kind(const struct db *d);
/* The target for messages (a URL without its password). Borrowed. */
const char *db_name(const struct db *d);
/* The native handle for plugins: `sqlite3 *` or `PGconn *`. Borrowed. */
void *db_handle(struct db *d);

/* Runs SQL text that may hold several statements and returns no rows
 * (migrations, BEGIN/COMMIT, SET). SEMQ_OK or an error. */
int db_exec(struct db *d, const char *sql);

/* Prepares one statement. *out owned by the caller (db_finalize). */
int db_prepare(struct db *d, const char *sql, struct db_stmt **out);
/* The same for a statement that may return many rows: they are read one at
 * a time as it is stepped (see DESIGN), never all at once. */
int db_prepare_bulk(struct db *d, const char *sql, struct db_stmt **out);
void db_finalize(struct db_stmt *s); /* accepts NULL */

/* Parameters are numbered from 1. A NULL text binds NULL. */
void db_bind_int64(struct db_stmt *s, int i, int64_t v);
void db_bind_text(struct db_stmt *s, int i, const char *v);
void db_bind_blob(struct db_stmt *s, int i, const void *p, size_t n);
void db_bind_null(struct db_stmt *s, int i);

/* DB_ROW (a row can be read), DB_DONE, or a negative SEMQ_ERR_*. */
int db_step(struct db_stmt *s);
/* Ready for new bindings and a new run; unread rows are dropped. */
void db_reset(struct db_stmt *s);
/* Between the first db_step and db_reset? */
int db_stmt_busy(const struct db_stmt *s);

/* Columns are numbered from 0. NULL reads as 0 / NULL / empty. */
int db_col_null(struct db_stmt *s, int c);
int64_t db_col_int64(struct db_stmt *s, int c);
const char *db_col_text(struct db_stmt *s, int c);
const void *db_col_blob(struct db_stmt *s, int c, size_t *n);
/* The name of column c of the current row (its AS alias), or NULL.
 * Borrowed like a value. */
const char *db_col_name(struct db_stmt *s, int c);

/* Rows written by the last INSERT/UPDATE/DELETE statement that completed. */
int64_t db_changes(struct db *d);
/* Is a transaction open on this connection? */
int db_in_tx(struct db *d);

/* The last error: a message (borrowed until the next call) and its class. */
const char *db_errmsg(const struct db *d);
enum db_errclass db_errclass(const struct db *d);

/* PostgreSQL: connects again after DB_E_LOST (statements are prepared again
 * on their next use). SQLite: nothing to do, SEMQ_OK. */
int db_reconnect(struct db *d);

#endif
