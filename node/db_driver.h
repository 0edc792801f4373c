/* SPDX-License-Identifier: MIT */
/*
 * Inside node/db.h: what each driver implements and node/db.c dispatches to.
 * Only db.c, db_sqlite.c and db_pg.c include this.
 *
 * DESIGN
 *  - Every driver's connection struct starts with `struct db` and every
 *    statement struct with `struct db_stmt`, so db.c casts between them and
 *    calls the driver chosen by `kind` — one branch per call, no tables of
 *    function pointers to keep in step.
 *  - The common part keeps the last error (message and class) and the row
 *    count of the last write, so db_errmsg/db_errclass/db_changes need no
 *    driver code. Drivers set them through db_seterr()/db_clearerr().
 *  - Each driver function has the meaning of the db.h function of the same
 *    name without its prefix (dblite_step = db_step on SQLite, dbpg_step on
 *    PostgreSQL).
 */
#ifndef SEMQ_DB_DRIVER_H
#define SEMQ_DB_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "db.h"

#define DB_ERRMAX 1024
#define DB_NAMEMAX 512

/* The first member of every driver's connection. */
struct db {
	enum db_kind kind;
	char name[DB_NAMEMAX]; /* the file, or the URL without a password */
	char errmsg[DB_ERRMAX];
	enum db_errclass errclass;
	int64_t changes; /* rows written by the last completed write */
};

/* The first member of every driver's statement. */
struct db_stmt {
	struct db *d; /* borrowed: the connection it was prepared on */
	int busy;     /* between the first step and the reset */
};

/* Sets the last error (a printf format) and returns SEMQ_ERR_DB. */
int db_seterr(struct db *d, enum db_errclass ec, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void db_clearerr(struct db *d);

/* ---- SQLite (node/db_sqlite.c) ------------------------------------------- */
int dblite_open(const struct db_open_opts *o, struct db **out, char *err,
		size_t errsz);
void dblite_close(struct db *d);
void *dblite_handle(struct db *d);
int dblite_exec(struct db *d, const char *sql);
int dblite_prepare(struct db *d, const char *sql, struct db_stmt **out);
void dblite_finalize(struct db_stmt *s);
void dblite_bind_int64(struct db_stmt *s, int i, int64_t v);
void dblite_bind_text(struct db_stmt *s, int i, const char *v);
void dblite_bind_blob(struct db_stmt *s, int i, const void *p, size_t n);
void dblite_bind_null(struct db_stmt *s, int i);
int dblite_step(struct db_stmt *s);
void dblite_reset(struct db_stmt *s);
int dblite_col_null(struct db_stmt *s, int c);
int64_t dblite_col_int64(struct db_stmt *s, int c);
const char *dblite_col_text(struct db_stmt *s, int c);
const void *dblite_col_blob(struct db_stmt *s, int c, size_t *n);
const char *dblite_col_name(struct db_stmt *s, int c);
int dblite_in_tx(struct db *d);

/* ---- PostgreSQL (node/db_pg.c) ------------------------------------------- */
int dbpg_open(const struct db_open_opts *o, struct db **out, char *err,
	      size_t errsz);
void dbpg_close(struct db *d);
void *dbpg_handle(struct db *d);
int dbpg_exec(struct db *d, const char *sql);
int dbpg_prepare(struct db *d, const char *sql, struct db_stmt **out);
int dbpg_prepare_bulk(struct db *d, const char *sql, struct db_stmt **out);
void dbpg_finalize(struct db_stmt *s);
void dbpg_bind_int64(struct db_stmt *s, int i, int64_t v);
void dbpg_bind_text(struct db_stmt *s, int i, const char *v);
void dbpg_bind_blob(struct db_stmt *s, int i, const void *p, size_t n);
void dbpg_bind_null(struct db_stmt *s, int i);
int dbpg_step(struct db_stmt *s);
void dbpg_reset(struct db_stmt *s);
int dbpg_col_null(struct db_stmt *s, int c);
int64_t dbpg_col_int64(struct db_stmt *s, int c);
const char *dbpg_col_text(struct db_stmt *s, int c);
const void *dbpg_col_blob(struct db_stmt *s, int c, size_t *n);
const char *dbpg_col_name(struct db_stmt *s, int c);
int dbpg_in_tx(struct db *d);
int dbpg_reconnect(struct db *d);

#endif
