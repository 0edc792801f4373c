/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL driver of node/db.h, over libpq: connects to a
 * postgresql:// URL, carries the store's `?N` SQL as server-side prepared
 * statements, decodes binary results into the int64 / text / bytes the store
 * reads, and turns SQLSTATEs into the db_errclass the store acts on.
 *
 * DESIGN
 *  - Statements are prepared lazily, on their first step, under a name unique
 *    on the connection ("semq_<n>"). The connection carries a generation that
 *    dbpg_reconnect() bumps; a statement remembers the generation it was
 *    prepared in and prepares itself again when they differ, so a new server
 *    session never sees an EXECUTE of a statement it does not know.
 *  - One db_step() on a fresh run executes the statement and fetches its whole
 *    result (PQexecPrepared); further steps walk the rows. The connection is
 *    therefore free between steps, and the store may run other statements
 *    while it iterates one.
 *  - A bulk statement (db_prepare_bulk: one that may return many rows) is
 *    sent with PQsendQueryPrepared in single-row mode instead, and each step
 *    takes the next row off the connection: the process holds one row of it
 *    at a time, and the server produces rows only as fast as they are read.
 *    Such a statement holds the connection until its last row is read (the
 *    connection is `streaming` it). Anything else that needs the connection
 *    meanwhile — another statement's first step, db_exec, db_in_tx, a
 *    DEALLOCATE — first reads the rest of its rows ahead (read_ahead) into
 *    one result built with PQsetvalue, as compact as a whole result, and the
 *    bulk statement's later steps walk that; an error that ended its rows is
 *    kept and returned by the step that reaches it. So a callback may
 *    re-enter the store while a bulk read is under way, whatever it runs:
 *    the cost is memory for the rows that were left, no more than the
 *    whole-result fetch of a plain statement. A cursor (DECLARE … FETCH)
 *    was not taken: it needs a transaction block, and the store's listings
 *    and scans run outside one too (WITH HOLD would copy the whole result
 *    on the server at the commit). db_reset() of a statement still
 *    streaming reads and drops its remaining rows.
 *  - Parameters go in text format (integers printed into a per-parameter
 *    buffer), blobs in binary; unbound parameters are NULL. Results come in
 *    binary format and are decoded by the column's type OID. A result with a
 *    column type we cannot carry (numeric, float, json, …) fails the step with
 *    a message naming the column, so a store query that needs a cast is found
 *    on its first run rather than read as a silent 0.
 *  - Connection defaults go in before the URL's own parameters, so the URL
 *    overrides them: application_name 'semqd', client_encoding UTF8,
 *    connect_timeout 10 s (libpq's default is to wait forever). The session
 *    settings (lock_timeout, synchronous_commit) are SET after every
 *    connect, reconnect included.
 *  - A lost connection (the server gone, or one that no longer takes writes:
 *    a standby, a primary being shut down or demoted — SQLSTATE class 08,
 *    57P01-57P03, 25006) is DB_E_LOST; the store then calls
 *    dbpg_reconnect() before its next transaction. libpq tries the URL's
 *    hosts in order, and with target_session_attrs=read-write keeps only a
 *    server that takes writes, so after a failover the reconnect finds the
 *    promoted standby. While none does (between the primary's death and the
 *    promotion) attempts back off: the first at once, then RETRY_MIN_MS
 *    apart, doubling to RETRY_MAX_MS; dbpg_reconnect sleeps until its
 *    attempt is due, which paces whoever calls it, so a caller that retries
 *    in a loop neither spins nor floods the servers with connections. A
 *    connection that lived RETRY_RESET_MS since the last attempt starts
 *    again at once. The state is per connection (struct pgdb): a process
 *    may hold several.
 *  - A COMMIT that returns with PostgreSQL's WARNING that its wait for the
 *    synchronous standby was cancelled (pg_cancel_backend,
 *    statement_timeout) is committed on this server only, perhaps not on
 *    the standby a failover promotes: it fails DB_E_LOST like a COMMIT whose
 *    connection dropped (notice(), syncrep_check()), so that what the batch
 *    answered is not sent on its word. (Its rows are visible here at once,
 *    though: a transaction that only reads them commits without waiting
 *    for the standby; docs/OPERATIONS.md says what that leaves open.)
 *  - Every PGresult is cleared where it is consumed or in dbpg_reset() /
 *    dbpg_finalize(); the driver holds at most three per statement (the
 *    current rows, and for a bulk one the rows read ahead and the error that
 *    ended them).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "db_driver.h"
#include "types.h"
#include "semq/error.h"

/* Type OIDs of pg_type (catalog/pg_type_d.h, stable across versions). */
enum {
	PGOID_BOOL = 16,
	PGOID_BYTEA = 17,
	PGOID_CHAR = 18,
	PGOID_NAME = 19,
	PGOID_INT8 = 20,
	PGOID_INT2 = 21,
	PGOID_INT4 = 23,
	PGOID_TEXT = 25,
	PGOID_OID = 26,
	PGOID_FLOAT4 = 700,
	PGOID_FLOAT8 = 701,
	PGOID_UNKNOWN = 705,
	PGOID_BPCHAR = 1042,
	PGOID_VARCHAR = 1043,
	PGOID_NUMERIC = 1700,
	PGOID_VOID = 2278
};

/* The most parameters one statement may have (the protocol's limit). */
#define PG_MAXPARAMS 65535
#define DEFAULT_LOCK_TIMEOUT_MS 5000
#define DEFAULT_CONNECT_TIMEOUT_S "10"
/* Reconnect attempts while no server takes the connection (DESIGN). */
#define RETRY_MIN_MS 50
#define RETRY_MAX_MS 1000
#define RETRY_RESET_MS 10000

struct pgstmt;

struct pgdb {
	struct db base;     /* first: db.c casts */
	PGconn *conn;       /* owned */
	unsigned long gen;  /* bumped by every reconnect */
	unsigned long next; /* the number of the next statement name */
	int lock_timeout_ms;
	int synchronous;
	/* The bulk statement whose rows are still coming on the connection
	 * (borrowed), or NULL: the connection is free. */
	struct pgstmt *streaming;
	/* Reconnecting (DESIGN): when the last attempt began (monotonic ms,
	 * 0 = none yet), the wait from it to the next, and the attempts that
	 * failed in a row. */
	int64_t retry_last;
	int retry_wait_ms;
	unsigned retry_failed;
	/* The command that just ran was a COMMIT whose wait for the
	 * synchronous standby was cancelled (notice()). */
	int syncrep_cancelled;
};

/* How a column is read: decided once per result from its type OID. */
enum colkind { COL_INT, COL_TEXT, COL_BYTES, COL_VOID };

struct pgstmt {
	struct db_stmt base; /* first: db.c casts */
	char *sql;           /* owned: the text with $N */
	char name[32];       /* the server-side name */
	unsigned long gen;   /* generation it was prepared in; 0 = never */
	int nparams;         /* highest N of the text */
	const char **vals;   /* owned array; values borrowed (or ibuf) */
	int *lens;           /* owned */
	int *fmts;           /* owned: 0 text, 1 binary */
	char (*ibuf)[24];    /* owned: printed integers, one per parameter */
	int bad;             /* an out-of-range bind since the last reset */
	int bad_param;       /* its index */
	int bulk;            /* rows read one at a time (db_prepare_bulk) */
	/* FRESH: not executed; STREAM: rows come off the connection; ROWS:
	 * rows are in res (then rest); DONE: all read, or an error. */
	enum { RUN_FRESH, RUN_STREAM, RUN_ROWS, RUN_DONE } run;
	PGresult *res; /* owned: the current run's rows (STREAM: the row) */
	int row;       /* the current row of res, -1 before the first */
	int ntuples, ncols;
	enum colkind *kinds; /* owned, ncols entries */
	char (*tbuf)[24];    /* owned: integer columns printed as text */
	/* A bulk statement's rows read ahead (read_ahead): the rows after
	 * res, and what ended them besides their end. */
	PGresult *rest; /* owned; NULL when none */
	PGresult *fail; /* owned: the error result that ended them */
	enum { AHEAD_OK, AHEAD_NOMEM, AHEAD_RESET } ahead;
};

static struct pgdb *pgdb_of(struct db *d)
{
	return (struct pgdb *)d;
}

static struct pgstmt *pgstmt_of(struct db_stmt *s)
{
	return (struct pgstmt *)s;
}

/*
 * Notices (`relation … already exists, skipping`) are not errors: quiet. One
 * is noted: the WARNING of a COMMIT whose wait for the synchronous standby
 * was cancelled (pg_cancel_backend, statement_timeout). That transaction is
 * committed on this server but perhaps not on the standby a failover would
 * promote, so the call that ran it fails as if the connection had been lost
 * during the COMMIT (see syncrep_check). It is told by the routine that
 * raised it, which, unlike the message, is never translated.
 */
static void notice(void *arg, const PGresult *res)
{
	struct pgdb *pd = arg;
	const char *fn = PQresultErrorField(res, PG_DIAG_SOURCE_FUNCTION);

	if (fn && strcmp(fn, "SyncRepWaitForLSN") == 0)
		pd->syncrep_cancelled = 1;
}

/* ---- errors --------------------------------------------------------------- */

/* The class of a SQLSTATE, and of a connection that went bad. */
static enum db_errclass classify(PGconn *conn, const char *state)
{
	if (state && strlen(state) == 5) {
		if (strcmp(state, "23505") == 0)
			return DB_E_UNIQUE;
		if (strncmp(state, "23", 2) == 0 || strcmp(state, "P0001") == 0)
			return DB_E_CONSTRAINT;
		if (strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0)
			return DB_E_CONFLICT;
		if (strcmp(state, "55P03") == 0)
			return DB_E_BUSY;
		if (strcmp(state, "53100") == 0 || strcmp(state, "53200") == 0)
			return DB_E_FULL;
		/* 08P01 is a protocol error on a live connection (a bind
		 * that does not fit the statement): lost only if it is. */
		if ((strncmp(state, "08", 2) == 0 &&
		     strcmp(state, "08P01") != 0) ||
		    strcmp(state, "57P01") == 0 ||
		    strcmp(state, "57P02") == 0 || strcmp(state, "57P03") == 0)
			return DB_E_LOST;
		/* read_only_sql_transaction: the session is on a server that
		 * takes no writes (a standby; a primary demoted under us): a
		 * new connection finds the one that does. */
		if (strcmp(state, "25006") == 0)
			return DB_E_LOST;
	}
	if (!conn || PQstatus(conn) == CONNECTION_BAD)
		return DB_E_LOST;
	return DB_E_OTHER;
}

/*
 * Copies msg into buf as one line: without a severity prefix ("ERROR:  ",
 * "FATAL:  "), with every run of white space (libpq's newlines and tabs)
 * made one space, and no trailing space.
 */
static void oneline(char *buf, size_t sz, const char *msg)
{
	static const char *const prefix[] = {
		"ERROR:  ", "FATAL:  ", "PANIC:  "};
	size_t n = 0, k;
	int space = 0;

	if (sz == 0)
		return;
	if (!msg)
		msg = "";
	for (k = 0; k < sizeof(prefix) / sizeof(prefix[0]); k++)
		if (strncmp(msg, prefix[k], strlen(prefix[k])) == 0)
			msg += strlen(prefix[k]);
	for (; *msg && n + 1 < sz; msg++) {
		if (*msg == ' ' || *msg == '\t' || *msg == '\n' ||
		    *msg == '\r') {
			space = n > 0;
			continue;
		}
		if (space && n + 2 < sz)
			buf[n++] = ' ';
		space = 0;
		buf[n++] = *msg;
	}
	buf[n] = '\0';
}

/*
 * Records the error of a failed result (res may be NULL: then the
 * connection's message). The message is the server's primary message, with
 * its detail where that says which row (a unique key, a trigger's DETAIL),
 * but not the "Failing row contains (…)" of CHECK and NOT NULL, which would
 * copy a whole row, payload included, into the log. Returns SEMQ_ERR_DB.
 */
static int pg_fail(struct pgdb *pd, const PGresult *res)
{
	const char *state = NULL, *prim = NULL, *detail = NULL;
	char msg[DB_ERRMAX], det[DB_ERRMAX];
	enum db_errclass ec;

	if (res) {
		state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		prim = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	}
	ec = classify(pd->conn, state);
	if (!prim || !*prim)
		prim = pd->conn ? PQerrorMessage(pd->conn) : NULL;
	if (!prim || !*prim)
		prim = res ? PQresStatus(PQresultStatus(res)) : "no result";
	oneline(msg, sizeof(msg), prim);
	if (state &&
	    (strcmp(state, "23514") == 0 || strcmp(state, "23502") == 0))
		detail = NULL;
	if (detail && *detail) {
		oneline(det, sizeof(det), detail);
		return db_seterr(&pd->base, ec, "%s (%s)", msg, det);
	}
	if (ec == DB_E_LOST && state && strcmp(state, "25006") == 0)
		return db_seterr(&pd->base, ec,
				 "%s (a server that takes no writes, such as a "
				 "standby: to be connected again)",
				 msg);
	if (ec == DB_E_LOST && !strstr(msg, "connection"))
		return db_seterr(&pd->base, ec, "%s (connection lost)", msg);
	return db_seterr(&pd->base, ec, "%s", msg);
}

/* The row count of a completed write, from its command tag. */
static void note_changes(struct pgdb *pd, const PGresult *res)
{
	const char *tag = PQcmdStatus((PGresult *)res);
	const char *n;

	if (!tag ||
	    (strncmp(tag, "INSERT ", 7) != 0 &&
	     strncmp(tag, "UPDATE ", 7) != 0 &&
	     strncmp(tag, "DELETE ", 7) != 0 && strncmp(tag, "MERGE ", 6) != 0))
		return;
	n = PQcmdTuples((PGresult *)res);
	if (n && *n)
		pd->base.changes = strtoll(n, NULL, 10);
}

/*
 * After a command that succeeded: was it a COMMIT that the synchronous
 * standby never confirmed (notice())? Then it fails like a COMMIT whose
 * connection was lost: committed here, but perhaps not on the standby a
 * failover promotes, so nothing it did may be acknowledged on its word.
 */
static int syncrep_check(struct pgdb *pd)
{
	if (!pd->syncrep_cancelled)
		return SEMQ_OK;
	pd->syncrep_cancelled = 0;
	return db_seterr(&pd->base, DB_E_LOST,
			 "the commit's wait for the synchronous standby was "
			 "cancelled: committed here, perhaps not on the "
			 "standby; taken as not committed");
}

static void read_ahead(struct pgdb *pd);

/* ---- the connection ------------------------------------------------------- */

/* The session settings: after every connect and reconnect. */
static int session_setup(struct pgdb *pd)
{
	char sql[256];
	PGresult *res;
	int r;

	PQsetNoticeReceiver(pd->conn, notice, pd);
	snprintf(sql, sizeof(sql), "SET lock_timeout = %d%s",
		 pd->lock_timeout_ms,
		 pd->synchronous >= 0 && pd->synchronous < 2
			 ? "; SET synchronous_commit = off"
			 : "");
	res = PQexec(pd->conn, sql);
	if (res && PQresultStatus(res) == PGRES_COMMAND_OK)
		r = SEMQ_OK;
	else
		r = pg_fail(pd, res);
	PQclear(res);
	return r;
}

int dbpg_open(const struct db_open_opts *o, struct db **out, char *err,
	      size_t errsz)
{
	/* Defaults first: the URL (expanded from dbname) overrides them. */
	const char *const keys[] = {"connect_timeout", "application_name",
				    "client_encoding", "dbname", NULL};
	const char *vals[] = {DEFAULT_CONNECT_TIMEOUT_S, "semqd", "UTF8", NULL,
			      NULL};
	int r = SEMQ_ERR_INTERNAL;
	struct pgdb *pd = NULL;
	char masked[DB_NAMEMAX];

	*out = NULL;
	if (!o || !o->target || !db_is_url(o->target)) {
		snprintf(err, errsz,
			 "postgresql: the target must be a "
			 "postgresql:// or postgres:// URL");
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	semq_db_shown(o->target, masked, sizeof(masked));
	if (o->busy_timeout_ms < 0) {
		snprintf(err, errsz, "%s: busy timeout %d ms: must be >= 0",
			 masked, o->busy_timeout_ms);
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	if (o->synchronous < -1 || o->synchronous > 3) {
		snprintf(err, errsz, "%s: synchronous %d: must be -1 or 0..3",
			 masked, o->synchronous);
		r = SEMQ_ERR_INVALID;
		goto out;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		snprintf(err, errsz, "%s: out of memory", masked);
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	pd->base.kind = DB_PG;
	snprintf(pd->base.name, sizeof(pd->base.name), "%s", masked);
	pd->gen = 1;
	pd->lock_timeout_ms = o->busy_timeout_ms ? o->busy_timeout_ms
						 : DEFAULT_LOCK_TIMEOUT_MS;
	pd->synchronous = o->synchronous;
	vals[3] = o->target;
	pd->conn = PQconnectdbParams(keys, vals, 1);
	if (!pd->conn) {
		snprintf(err, errsz, "%s: out of memory", masked);
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	if (PQstatus(pd->conn) != CONNECTION_OK) {
		char why[DB_ERRMAX];

		oneline(why, sizeof(why), PQerrorMessage(pd->conn));
		snprintf(err, errsz, "%s: cannot connect: %s", masked, why);
		r = SEMQ_ERR_DB;
		goto out;
	}
	r = session_setup(pd);
	if (r != SEMQ_OK) {
		snprintf(err, errsz, "%s: setting up the session: %s", masked,
			 pd->base.errmsg);
		goto out;
	}
	*out = &pd->base;
	pd = NULL;
	r = SEMQ_OK;
out:
	if (pd) {
		PQfinish(pd->conn);
		free(pd);
	}
	return r;
}

void dbpg_close(struct db *d)
{
	struct pgdb *pd = pgdb_of(d);

	if (!pd)
		return;
	PQfinish(pd->conn);
	free(pd);
}

void *dbpg_handle(struct db *d)
{
	return pgdb_of(d)->conn;
}

int dbpg_exec(struct db *d, const char *sql)
{
	struct pgdb *pd = pgdb_of(d);
	PGresult *res;
	int r;

	db_clearerr(d);
	if (!sql)
		return db_seterr(d, DB_E_OTHER, "exec: no SQL text");
	read_ahead(pd);
	pd->syncrep_cancelled = 0;
	res = PQexec(pd->conn, sql);
	switch (res ? PQresultStatus(res) : PGRES_FATAL_ERROR) {
	case PGRES_COMMAND_OK:
	case PGRES_TUPLES_OK:
	case PGRES_EMPTY_QUERY:
		note_changes(pd, res);
		r = syncrep_check(pd);
		break;
	default: r = pg_fail(pd, res); break;
	}
	PQclear(res);
	return r;
}

int dbpg_in_tx(struct db *d)
{
	/* While a bulk statement streams the status is ACTIVE whether or not
	 * a transaction is open: ask once the connection is free. */
	read_ahead(pgdb_of(d));
	switch (PQtransactionStatus(pgdb_of(d)->conn)) {
	case PQTRANS_ACTIVE:
	case PQTRANS_INTRANS:
	case PQTRANS_INERROR: return 1;
	default: return 0;
	}
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps until the monotonic clock reads at least `until` (ms). */
static void sleep_until_ms(int64_t until)
{
	struct timespec ts = {.tv_sec = (time_t)(until / 1000),
			      .tv_nsec = (long)(until % 1000) * 1000000L};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* Waits until the next reconnect attempt is due and notes that it begins
 * (DESIGN: the backoff). */
static void retry_pace(struct pgdb *pd)
{
	int64_t now = mono_ms();

	if (pd->retry_last && now - pd->retry_last >= RETRY_RESET_MS) {
		pd->retry_wait_ms = 0; /* it lived: a new outage */
		pd->retry_failed = 0;
	}
	if (pd->retry_last && now < pd->retry_last + pd->retry_wait_ms) {
		sleep_until_ms(pd->retry_last + pd->retry_wait_ms);
		now = mono_ms();
	}
	pd->retry_last = now;
	pd->retry_wait_ms = pd->retry_wait_ms < RETRY_MIN_MS ? RETRY_MIN_MS
			    : pd->retry_wait_ms >= RETRY_MAX_MS / 2
				    ? RETRY_MAX_MS
				    : 2 * pd->retry_wait_ms;
}

int dbpg_reconnect(struct db *d)
{
	struct pgdb *pd = pgdb_of(d);
	char why[DB_ERRMAX];
	int r;

	db_clearerr(d);
	/* Whatever happens, the server session the statements knew is gone,
	 * with the rows a bulk statement had not read yet. */
	pd->gen++;
	if (pd->streaming) {
		pd->streaming->run = RUN_ROWS;
		pd->streaming->ahead = AHEAD_RESET;
		pd->streaming = NULL;
	}
	retry_pace(pd);
	PQreset(pd->conn);
	if (PQstatus(pd->conn) == CONNECTION_OK)
		r = session_setup(pd);
	else
		r = pg_fail(pd, NULL);
	if (r == SEMQ_OK) {
		pd->retry_failed = 0;
		return SEMQ_OK;
	}
	pd->retry_failed++;
	if (db_errclass(d) != DB_E_LOST)
		return r;
	/* Still lost: say how long we have been trying. */
	snprintf(why, sizeof(why), "%s", db_errmsg(d));
	return db_seterr(d, DB_E_LOST,
			 "%s (no server took the connection: attempt %u, the "
			 "next in %d ms)",
			 why, pd->retry_failed, pd->retry_wait_ms);
}

/* ---- statements ----------------------------------------------------------- */

static int isalnum_ascii(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9');
}

/* The first occurrence of the n bytes of needle in the string hay, or NULL. */
static const char *strstr_n(const char *hay, const char *needle, size_t n)
{
	for (; *hay; hay++)
		if (strncmp(hay, needle, n) == 0)
			return hay;
	return NULL;
}

/*
 * Rewrites `?N` to `$N` outside string literals ('…', E'…', "…", $tag$…$tag$)
 * and comments (-- and nested slash-star). *out is owned by the caller;
 * *nparams gets the highest N. A `?` not followed by a digit is left alone
 * (PostgreSQL has operators spelt with it).
 */
static int rewrite(struct db *d, const char *sql, char **out, int *nparams)
{
	size_t len = strlen(sql), i = 0, o = 0;
	char *buf;
	int max = 0;

	buf = malloc(len + 1);
	if (!buf) {
		db_seterr(d, DB_E_OTHER, "out of memory preparing a statement");
		return SEMQ_ERR_NOMEM;
	}
	while (i < len) {
		char c = sql[i];

		if (c == '\'' || c == '"') {
			/* E'…' takes backslash escapes; the others double. */
			int bs = c == '\'' && i > 0 &&
				 (sql[i - 1] == 'E' || sql[i - 1] == 'e') &&
				 (i < 2 || !(isalnum_ascii(sql[i - 2]) ||
					     sql[i - 2] == '_'));

			buf[o++] = sql[i++];
			while (i < len) {
				if (bs && sql[i] == '\\' && i + 1 < len) {
					buf[o++] = sql[i++];
					buf[o++] = sql[i++];
					continue;
				}
				if (sql[i] == c) {
					buf[o++] = sql[i++];
					if (i < len && sql[i] == c) {
						buf[o++] = sql[i++];
						continue;
					}
					break;
				}
				buf[o++] = sql[i++];
			}
		} else if (c == '-' && i + 1 < len && sql[i + 1] == '-') {
			while (i < len && sql[i] != '\n')
				buf[o++] = sql[i++];
		} else if (c == '/' && i + 1 < len && sql[i + 1] == '*') {
			int depth = 0;

			do {
				if (sql[i] == '/' && i + 1 < len &&
				    sql[i + 1] == '*') {
					depth++;
					buf[o++] = sql[i++];
				} else if (sql[i] == '*' && i + 1 < len &&
					   sql[i + 1] == '/') {
					depth--;
					buf[o++] = sql[i++];
				}
				buf[o++] = sql[i++];
			} while (i < len && depth > 0);
		} else if (c == '$' && !(i > 0 && (isalnum_ascii(sql[i - 1]) ||
						   sql[i - 1] == '_'))) {
			/* $tag$ … $tag$ (a `$N` of the caller is copied as is). */
			size_t t = i + 1;

			while (t < len &&
			       (isalnum_ascii(sql[t]) || sql[t] == '_') &&
			       !(t == i + 1 && sql[t] >= '0' && sql[t] <= '9'))
				t++;
			if (t < len && sql[t] == '$') {
				size_t taglen = t + 1 - i;
				const char *close =
					strstr_n(sql + t + 1, sql + i, taglen);
				size_t stop =
					close ? (size_t)(close - sql) + taglen
					      : len;

				memcpy(buf + o, sql + i, stop - i);
				o += stop - i;
				i = stop;
			} else {
				buf[o++] = sql[i++];
			}
		} else if (c == '?' && i + 1 < len && sql[i + 1] >= '0' &&
			   sql[i + 1] <= '9') {
			long n = 0;

			buf[o++] = '$';
			i++;
			while (i < len && sql[i] >= '0' && sql[i] <= '9') {
				if (n <= PG_MAXPARAMS)
					n = n * 10 + (sql[i] - '0');
				buf[o++] = sql[i++];
			}
			if (n < 1 || n > PG_MAXPARAMS) {
				free(buf);
				return db_seterr(d, DB_E_OTHER,
						 "parameter ?%ld out of range "
						 "1..%d",
						 n, PG_MAXPARAMS);
			}
			if (n > max)
				max = (int)n;
		} else {
			buf[o++] = sql[i++];
		}
	}
	buf[o] = '\0';
	*out = buf;
	*nparams = max;
	return SEMQ_OK;
}

int dbpg_prepare(struct db *d, const char *sql, struct db_stmt **out)
{
	struct pgdb *pd = pgdb_of(d);
	struct pgstmt *ps = NULL;
	int r = SEMQ_ERR_INTERNAL, n = 0;

	*out = NULL;
	db_clearerr(d);
	if (!sql) {
		r = db_seterr(d, DB_E_OTHER, "prepare: no SQL text");
		goto out;
	}
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		goto nomem;
	ps->base.d = d;
	ps->row = -1;
	r = rewrite(d, sql, &ps->sql, &n);
	if (r != SEMQ_OK)
		goto out;
	ps->nparams = n;
	if (n > 0) {
		ps->vals = calloc((size_t)n, sizeof(*ps->vals));
		ps->lens = calloc((size_t)n, sizeof(*ps->lens));
		ps->fmts = calloc((size_t)n, sizeof(*ps->fmts));
		ps->ibuf = calloc((size_t)n, sizeof(*ps->ibuf));
		if (!ps->vals || !ps->lens || !ps->fmts || !ps->ibuf)
			goto nomem;
	}
	snprintf(ps->name, sizeof(ps->name), "semq_%lu", ++pd->next);
	*out = &ps->base;
	ps = NULL;
	r = SEMQ_OK;
	goto out;
nomem:
	r = SEMQ_ERR_NOMEM;
	db_seterr(d, DB_E_OTHER, "out of memory preparing a statement");
out:
	if (ps)
		dbpg_finalize(&ps->base);
	return r;
}

int dbpg_prepare_bulk(struct db *d, const char *sql, struct db_stmt **out)
{
	int r = dbpg_prepare(d, sql, out);

	if (r == SEMQ_OK)
		pgstmt_of(*out)->bulk = 1;
	return r;
}

/* Reads the results left on the connection and throws them away. */
static void discard_pending(struct pgdb *pd)
{
	PGresult *res;

	while ((res = PQgetResult(pd->conn)) != NULL)
		PQclear(res);
}

/* Drops the current result, the rows read ahead and the decoding state. */
static void drop_result(struct pgstmt *ps)
{
	PQclear(ps->res);
	ps->res = NULL;
	PQclear(ps->rest);
	ps->rest = NULL;
	PQclear(ps->fail);
	ps->fail = NULL;
	ps->ahead = AHEAD_OK;
	free(ps->kinds);
	ps->kinds = NULL;
	free(ps->tbuf);
	ps->tbuf = NULL;
	ps->row = -1;
	ps->ntuples = 0;
	ps->ncols = 0;
}

/* A statement still streaming stops: the rows it did not read are read
 * off the connection and dropped, and the connection is free again. */
static void stop_streaming(struct pgstmt *ps)
{
	struct pgdb *pd = pgdb_of(ps->base.d);

	if (pd->streaming != ps)
		return;
	discard_pending(pd);
	pd->streaming = NULL;
}

/* Appends the rows of res to ps->rest (made with res's columns on the first
 * row). 0, or -1 when out of memory. */
static int append_rows(struct pgstmt *ps, const PGresult *res)
{
	int t, c, n = PQntuples(res), nf = PQnfields(res);

	for (t = 0; t < n; t++) {
		int at;

		if (!ps->rest) {
			ps->rest = PQcopyResult(res, PG_COPYRES_ATTRS);
			if (!ps->rest)
				return -1;
		}
		at = PQntuples(ps->rest);
		for (c = 0; c < nf; c++) {
			int null = PQgetisnull(res, t, c);

			if (!PQsetvalue(ps->rest, at, c,
					null ? NULL : PQgetvalue(res, t, c),
					null ? -1 : PQgetlength(res, t, c)))
				return -1;
		}
	}
	return 0;
}

/*
 * Frees the connection for another command: the rows of the statement
 * streaming on it that were not read yet are read into its `rest`, and what
 * ended them (an error, no memory) is kept for the step that reaches it.
 * Its current row stays where it is: values of it handed out stay valid.
 */
static void read_ahead(struct pgdb *pd)
{
	struct pgstmt *ps = pd->streaming;
	PGresult *res;

	if (!ps)
		return;
	pd->streaming = NULL;
	while ((res = PQgetResult(pd->conn)) != NULL) {
		switch (PQresultStatus(res)) {
		case PGRES_SINGLE_TUPLE:
		case PGRES_TUPLES_OK:
		case PGRES_COMMAND_OK:
			if (ps->ahead == AHEAD_OK && !ps->fail &&
			    append_rows(ps, res) != 0)
				ps->ahead = AHEAD_NOMEM;
			if (PQresultStatus(res) != PGRES_SINGLE_TUPLE)
				note_changes(pd, res);
			PQclear(res);
			break;
		default:
			if (!ps->fail)
				ps->fail = res;
			else
				PQclear(res);
			break;
		}
	}
	ps->run = RUN_ROWS;
}

void dbpg_finalize(struct db_stmt *s)
{
	struct pgstmt *ps = pgstmt_of(s);
	struct pgdb *pd;

	if (!ps)
		return;
	pd = pgdb_of(ps->base.d);
	stop_streaming(ps);
	drop_result(ps);
	/*
	 * Frees the server's copy when the session can take a command now; in
	 * an aborted transaction or on a lost connection it stays until the
	 * session ends (a reconnect or close frees it anyway).
	 */
	if (ps->gen == pd->gen && PQstatus(pd->conn) == CONNECTION_OK) {
		PGTransactionStatusType ts;

		read_ahead(pd); /* another bulk statement may be streaming */
		ts = PQtransactionStatus(pd->conn);
		if (ts == PQTRANS_IDLE || ts == PQTRANS_INTRANS) {
			char sql[64];

			snprintf(sql, sizeof(sql), "DEALLOCATE %s", ps->name);
			PQclear(PQexec(pd->conn, sql));
		}
	}
	free(ps->sql);
	free(ps->vals);
	free(ps->lens);
	free(ps->fmts);
	free(ps->ibuf);
	free(ps);
}

/* The parameter slot of i (numbered from 1), or NULL (noted for the step). */
static int slot(struct pgstmt *ps, int i)
{
	if (i < 1 || i > ps->nparams) {
		if (!ps->bad) {
			ps->bad = 1;
			ps->bad_param = i;
		}
		return -1;
	}
	return i - 1;
}

void dbpg_bind_int64(struct db_stmt *s, int i, int64_t v)
{
	struct pgstmt *ps = pgstmt_of(s);
	int k = slot(ps, i);

	if (k < 0)
		return;
	snprintf(ps->ibuf[k], sizeof(ps->ibuf[k]), "%" PRId64, v);
	ps->vals[k] = ps->ibuf[k];
	ps->lens[k] = 0;
	ps->fmts[k] = 0;
}

void dbpg_bind_text(struct db_stmt *s, int i, const char *v)
{
	struct pgstmt *ps = pgstmt_of(s);
	int k = slot(ps, i);

	if (k < 0)
		return;
	ps->vals[k] = v; /* NULL binds NULL */
	ps->lens[k] = 0;
	ps->fmts[k] = 0;
}

void dbpg_bind_blob(struct db_stmt *s, int i, const void *p, size_t n)
{
	struct pgstmt *ps = pgstmt_of(s);
	int k = slot(ps, i);

	if (k < 0)
		return;
	if (n > INT32_MAX) { /* the protocol's length is an int32 */
		ps->bad = 1;
		ps->bad_param = i;
		return;
	}
	/* An empty blob is a value, not NULL: never hand libpq a NULL. */
	ps->vals[k] = n > 0 && p ? (const char *)p : "";
	ps->lens[k] = (int)n;
	ps->fmts[k] = 1;
}

void dbpg_bind_null(struct db_stmt *s, int i)
{
	struct pgstmt *ps = pgstmt_of(s);
	int k = slot(ps, i);

	if (k < 0)
		return;
	ps->vals[k] = NULL;
	ps->lens[k] = 0;
	ps->fmts[k] = 0;
}

/* The name of a type OID for messages. */
static const char *type_name(Oid t)
{
	switch (t) {
	case PGOID_NUMERIC: return "numeric";
	case PGOID_FLOAT4: return "real";
	case PGOID_FLOAT8: return "double precision";
	default: return "a type the driver does not read";
	}
}

/* Decides how each column of a fresh result is read; refuses what we can't. */
static int classify_columns(struct pgstmt *ps)
{
	struct db *d = ps->base.d;
	int c;

	if (ps->ncols == 0)
		return SEMQ_OK;
	ps->kinds = calloc((size_t)ps->ncols, sizeof(*ps->kinds));
	ps->tbuf = calloc((size_t)ps->ncols, sizeof(*ps->tbuf));
	if (!ps->kinds || !ps->tbuf) {
		db_seterr(d, DB_E_OTHER, "out of memory reading a row");
		return SEMQ_ERR_NOMEM;
	}
	for (c = 0; c < ps->ncols; c++) {
		Oid t = PQftype(ps->res, c);

		switch (t) {
		case PGOID_BOOL:
		case PGOID_INT2:
		case PGOID_INT4:
		case PGOID_INT8:
		case PGOID_OID: ps->kinds[c] = COL_INT; break;
		case PGOID_TEXT:
		case PGOID_VARCHAR:
		case PGOID_BPCHAR:
		case PGOID_NAME:
		case PGOID_CHAR:
		case PGOID_UNKNOWN: ps->kinds[c] = COL_TEXT; break;
		case PGOID_BYTEA: ps->kinds[c] = COL_BYTES; break;
		case PGOID_VOID: ps->kinds[c] = COL_VOID; break;
		default:
			return db_seterr(d, DB_E_OTHER,
					 "column %d \"%s\" is %s (type oid "
					 "%u): cast it to bigint, text or "
					 "bytea in the SQL",
					 c, PQfname(ps->res, c), type_name(t),
					 (unsigned)t);
		}
	}
	return SEMQ_OK;
}

/* Prepares the statement on this session if it is not yet known there. */
static int ensure_prepared(struct pgstmt *ps)
{
	struct pgdb *pd = pgdb_of(ps->base.d);
	PGresult *res;
	int r;

	if (ps->gen == pd->gen)
		return SEMQ_OK;
	res = PQprepare(pd->conn, ps->name, ps->sql, ps->nparams, NULL);
	if (res && PQresultStatus(res) == PGRES_COMMAND_OK) {
		ps->gen = pd->gen;
		r = SEMQ_OK;
	} else {
		r = pg_fail(pd, res);
	}
	PQclear(res);
	return r;
}

/*
 * The first step of a run: execute and fetch every row, or (a bulk
 * statement) send it and let the steps read its rows off the connection.
 */
static int execute(struct pgstmt *ps)
{
	struct pgdb *pd = pgdb_of(ps->base.d);
	PGresult *res = NULL;
	int r = SEMQ_ERR_INTERNAL;

	if (ps->bad) {
		r = db_seterr(&pd->base, DB_E_OTHER,
			      "parameter ?%d out of range: the statement has "
			      "%d",
			      ps->bad_param, ps->nparams);
		goto out;
	}
	read_ahead(pd); /* the connection carries one command at a time */
	r = ensure_prepared(ps);
	if (r != SEMQ_OK)
		goto out;
	if (ps->bulk) {
		if (!PQsendQueryPrepared(pd->conn, ps->name, ps->nparams,
					 ps->vals, ps->lens, ps->fmts, 1)) {
			r = pg_fail(pd, NULL);
			goto out;
		}
		/* Refused (it never is right after the send), the whole
		 * result comes as one: stream_next reads it so. */
		(void)PQsetSingleRowMode(pd->conn);
		pd->streaming = ps;
		ps->run = RUN_STREAM;
		r = SEMQ_OK;
		goto out;
	}
	pd->syncrep_cancelled = 0;
	res = PQexecPrepared(pd->conn, ps->name, ps->nparams, ps->vals,
			     ps->lens, ps->fmts, 1);
	switch (res ? PQresultStatus(res) : PGRES_FATAL_ERROR) {
	case PGRES_COMMAND_OK:
	case PGRES_TUPLES_OK: break;
	default: r = pg_fail(pd, res); goto out;
	}
	note_changes(pd, res);
	r = syncrep_check(pd);
	if (r != SEMQ_OK)
		goto out;
	ps->res = res;
	res = NULL;
	ps->ntuples = PQntuples(ps->res);
	ps->ncols = PQnfields(ps->res);
	r = classify_columns(ps);
	if (r != SEMQ_OK)
		drop_result(ps);
	else
		ps->run = RUN_ROWS;
out:
	PQclear(res);
	/* The bound values have gone to the server: no longer needed. */
	return r;
}

/* A streaming statement's next row off the connection, or its end. */
static int stream_next(struct pgstmt *ps)
{
	struct pgdb *pd = pgdb_of(ps->base.d);
	PGresult *res;
	ExecStatusType rs;
	int r = DB_DONE;

	if (pd->streaming != ps) {
		r = db_seterr(&pd->base, DB_E_OTHER,
			      "internal: a bulk statement lost its rows");
		goto end;
	}
	res = PQgetResult(pd->conn);
	rs = res ? PQresultStatus(res) : PGRES_TUPLES_OK;
	if (res && (rs == PGRES_SINGLE_TUPLE ||
		    (rs == PGRES_TUPLES_OK && PQntuples(res) > 0))) {
		PQclear(ps->res);
		ps->res = res;
		ps->row = 0;
		ps->ntuples = PQntuples(res);
		if (!ps->kinds) {
			ps->ncols = PQnfields(res);
			r = classify_columns(ps);
			if (r != SEMQ_OK)
				goto end;
		}
		if (rs == PGRES_TUPLES_OK) { /* not single rows: all of them */
			note_changes(pd, res);
			stop_streaming(ps);
			ps->run = RUN_ROWS;
		}
		return DB_ROW;
	}
	if (rs == PGRES_TUPLES_OK || rs == PGRES_COMMAND_OK) {
		if (res)
			note_changes(pd, res);
	} else {
		r = pg_fail(pd, res);
	}
	PQclear(res);
end:
	stop_streaming(ps);
	ps->run = RUN_DONE;
	drop_result(ps);
	return r;
}

/* The next row of res, then of the rows read ahead, then what ended them. */
static int next_row(struct pgstmt *ps)
{
	struct pgdb *pd = pgdb_of(ps->base.d);
	int r = DB_DONE;

	if (ps->res && ps->row + 1 < ps->ntuples) {
		ps->row++;
		return DB_ROW;
	}
	if (ps->rest && PQntuples(ps->rest) > 0) {
		PQclear(ps->res);
		ps->res = ps->rest;
		ps->rest = NULL;
		ps->row = 0;
		ps->ntuples = PQntuples(ps->res);
		if (ps->kinds)
			return DB_ROW;
		ps->ncols = PQnfields(ps->res);
		r = classify_columns(ps);
		if (r == SEMQ_OK)
			return DB_ROW;
	} else if (ps->ahead == AHEAD_NOMEM) {
		r = db_seterr(&pd->base, DB_E_OTHER,
			      "out of memory reading rows ahead");
	} else if (ps->ahead == AHEAD_RESET) {
		r = db_seterr(&pd->base, DB_E_LOST,
			      "the connection was reset before the last rows "
			      "were read");
	} else if (ps->fail) {
		r = pg_fail(pd, ps->fail);
	}
	ps->run = RUN_DONE;
	drop_result(ps);
	return r;
}

int dbpg_step(struct db_stmt *s)
{
	struct pgstmt *ps = pgstmt_of(s);
	int r;

	db_clearerr(s->d);
	s->busy = 1;
	switch (ps->run) {
	case RUN_DONE: return DB_DONE; /* stepped past the end: stays done */
	case RUN_FRESH:
		r = execute(ps);
		if (r != SEMQ_OK) {
			ps->run = RUN_DONE;
			return r;
		}
		return ps->run == RUN_STREAM ? stream_next(ps) : next_row(ps);
	case RUN_STREAM: return stream_next(ps);
	case RUN_ROWS: break;
	}
	return next_row(ps);
}

void dbpg_reset(struct db_stmt *s)
{
	struct pgstmt *ps = pgstmt_of(s);
	int k;

	stop_streaming(ps);
	drop_result(ps);
	for (k = 0; k < ps->nparams; k++) {
		ps->vals[k] = NULL;
		ps->lens[k] = 0;
		ps->fmts[k] = 0;
	}
	ps->bad = 0;
	ps->bad_param = 0;
	ps->run = RUN_FRESH;
	s->busy = 0;
}

/* The raw value of column c of the current row, or NULL (SQL NULL, no row,
 * no such column). */
static const char *raw(struct pgstmt *ps, int c, int *len)
{
	*len = 0;
	if (!ps->res || ps->row < 0 || ps->row >= ps->ntuples || c < 0 ||
	    c >= ps->ncols || PQgetisnull(ps->res, ps->row, c))
		return NULL;
	*len = PQgetlength(ps->res, ps->row, c);
	return PQgetvalue(ps->res, ps->row, c);
}

/* A binary integer column as int64 (big-endian, 1, 2, 4 or 8 bytes). */
static int64_t decode_int(const char *v, int len, Oid t)
{
	const unsigned char *b = (const unsigned char *)v;
	uint64_t u = 0;
	int k;

	for (k = 0; k < len && k < 8; k++)
		u = u << 8 | b[k];
	switch (len) {
	case 1: return t == PGOID_BOOL ? (int64_t)(u != 0) : (int8_t)u;
	case 2: return (int16_t)u;
	case 4: return t == PGOID_OID ? (int64_t)(uint32_t)u : (int32_t)u;
	case 8: return (int64_t)u;
	default: return 0;
	}
}

int dbpg_col_null(struct db_stmt *s, int c)
{
	struct pgstmt *ps = pgstmt_of(s);
	int len;

	return raw(ps, c, &len) == NULL;
}

int64_t dbpg_col_int64(struct db_stmt *s, int c)
{
	struct pgstmt *ps = pgstmt_of(s);
	const char *v;
	int len;

	v = raw(ps, c, &len);
	if (!v)
		return 0;
	switch (ps->kinds[c]) {
	case COL_INT: return decode_int(v, len, PQftype(ps->res, c));
	case COL_TEXT: return strtoll(v, NULL, 10);
	default: return 0;
	}
}

const char *dbpg_col_text(struct db_stmt *s, int c)
{
	struct pgstmt *ps = pgstmt_of(s);
	const char *v;
	int len;

	v = raw(ps, c, &len);
	if (!v)
		return NULL;
	if (ps->kinds[c] == COL_INT) {
		snprintf(ps->tbuf[c], sizeof(ps->tbuf[c]), "%" PRId64,
			 decode_int(v, len, PQftype(ps->res, c)));
		return ps->tbuf[c];
	}
	return v; /* libpq ends every value, binary too, with a NUL */
}

const void *dbpg_col_blob(struct db_stmt *s, int c, size_t *n)
{
	struct pgstmt *ps = pgstmt_of(s);
	const char *v;
	int len;

	*n = 0;
	v = raw(ps, c, &len);
	if (!v || ps->kinds[c] == COL_INT)
		return NULL;
	*n = (size_t)len;
	return v;
}

const char *dbpg_col_name(struct db_stmt *s, int c)
{
	struct pgstmt *ps = pgstmt_of(s);

	if (!ps->res || c < 0 || c >= PQnfields(ps->res))
		return NULL;
	return PQfname(ps->res, c);
}
