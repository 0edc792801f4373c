/* SPDX-License-Identifier: MIT */
/*
 * node/db.h's entry points: each picks the driver by the connection's kind
 * (see db_driver.h), and keeps the parts both drivers share — the last error
 * and the changed-row count.
 */
#include "db_driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <semq/error.h>

#define IS_PG(d) ((d)->kind == DB_PG)

int db_is_url(const char *target)
{
	return target && (strncmp(target, "postgresql://", 13) == 0 ||
			  strncmp(target, "postgres://", 11) == 0);
}

/* ---- errors --------------------------------------------------------------- */

int db_seterr(struct db *d, enum db_errclass ec, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(d->errmsg, sizeof d->errmsg, fmt, ap);
	va_end(ap);
	d->errclass = ec;
	return SEMQ_ERR_DB;
}

void db_clearerr(struct db *d)
{
	d->errmsg[0] = '\0';
	d->errclass = DB_E_NONE;
}

int db_open(const struct db_open_opts *o, struct db **out, char *err,
	    size_t errsz)
{
	*out = NULL;
	if (!o || !o->target || !o->target[0]) {
		if (err && errsz)
			snprintf(err, errsz, "db_open: no database given");
		return SEMQ_ERR_INVALID;
	}
	if (db_is_url(o->target))
		return dbpg_open(o, out, err, errsz);
	return dblite_open(o, out, err, errsz);
}

void db_close(struct db *d)
{
	if (!d)
		return;
	if (IS_PG(d))
		dbpg_close(d);
	else
		dblite_close(d);
}

enum db_kind db_kind(const struct db *d)
{
	return d->kind;
}

const char *db_name(const struct db *d)
{
	return d->name;
}

void *db_handle(struct db *d)
{
	return IS_PG(d) ? dbpg_handle(d) : dblite_handle(d);
}

int db_exec(struct db *d, const char *sql)
{
	db_clearerr(d);
	return IS_PG(d) ? dbpg_exec(d, sql) : dblite_exec(d, sql);
}

int db_prepare(struct db *d, const char *sql, struct db_stmt **out)
{
	*out = NULL;
	db_clearerr(d);
	return IS_PG(d) ? dbpg_prepare(d, sql, out)
			: dblite_prepare(d, sql, out);
}

int db_prepare_bulk(struct db *d, const char *sql, struct db_stmt **out)
{
	*out = NULL;
	db_clearerr(d);
	/* SQLite steps every statement row by row already. */
	return IS_PG(d) ? dbpg_prepare_bulk(d, sql, out)
			: dblite_prepare(d, sql, out);
}

void db_finalize(struct db_stmt *s)
{
	if (!s)
		return;
	if (IS_PG(s->d))
		dbpg_finalize(s);
	else
		dblite_finalize(s);
}

void db_bind_int64(struct db_stmt *s, int i, int64_t v)
{
	if (IS_PG(s->d))
		dbpg_bind_int64(s, i, v);
	else
		dblite_bind_int64(s, i, v);
}

void db_bind_text(struct db_stmt *s, int i, const char *v)
{
	if (IS_PG(s->d))
		dbpg_bind_text(s, i, v);
	else
		dblite_bind_text(s, i, v);
}

void db_bind_blob(struct db_stmt *s, int i, const void *p, size_t n)
{
	if (IS_PG(s->d))
		dbpg_bind_blob(s, i, p, n);
	else
		dblite_bind_blob(s, i, p, n);
}

void db_bind_null(struct db_stmt *s, int i)
{
	if (IS_PG(s->d))
		dbpg_bind_null(s, i);
	else
		dblite_bind_null(s, i);
}

int db_step(struct db_stmt *s)
{
	db_clearerr(s->d);
	s->busy = 1;
	return IS_PG(s->d) ? dbpg_step(s) : dblite_step(s);
}

void db_reset(struct db_stmt *s)
{
	if (IS_PG(s->d))
		dbpg_reset(s);
	else
		dblite_reset(s);
	s->busy = 0;
}

int db_stmt_busy(const struct db_stmt *s)
{
	return s->busy;
}

int db_col_null(struct db_stmt *s, int c)
{
	return IS_PG(s->d) ? dbpg_col_null(s, c) : dblite_col_null(s, c);
}

int64_t db_col_int64(struct db_stmt *s, int c)
{
	return IS_PG(s->d) ? dbpg_col_int64(s, c) : dblite_col_int64(s, c);
}

const char *db_col_text(struct db_stmt *s, int c)
{
	return IS_PG(s->d) ? dbpg_col_text(s, c) : dblite_col_text(s, c);
}

const void *db_col_blob(struct db_stmt *s, int c, size_t *n)
{
	return IS_PG(s->d) ? dbpg_col_blob(s, c, n) : dblite_col_blob(s, c, n);
}

const char *db_col_name(struct db_stmt *s, int c)
{
	return IS_PG(s->d) ? dbpg_col_name(s, c) : dblite_col_name(s, c);
}

int64_t db_changes(struct db *d)
{
	return d->changes;
}

int db_in_tx(struct db *d)
{
	return IS_PG(d) ? dbpg_in_tx(d) : dblite_in_tx(d);
}

const char *db_errmsg(const struct db *d)
{
	return d->errmsg;
}

enum db_errclass db_errclass(const struct db *d)
{
	return d->errclass;
}

int db_reconnect(struct db *d)
{
	db_clearerr(d);
	return IS_PG(d) ? dbpg_reconnect(d) : SEMQ_OK;
}
