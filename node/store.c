/* SPDX-License-Identifier: MIT */
/*
 * The store on SQLite: the node's persistent state behind node/store.h —
 * opening and migrating the database file, the outbound queue tb_0031, the
 * received record tb_0030 with its per-stream watermarks in semq_stream_in,
 * and the redo queue tb_0033 (schema: db/0001_init.sql).
 *
 * DESIGN
 *  - One connection, one thread (SQLITE_OPEN_NOMUTEX), WAL, busy_timeout.
 *    Every statement is prepared once, on first use, and reused
 *    (sqlite3_reset + sqlite3_clear_bindings right after each use, so no
 *    statement keeps a read transaction open). A callback that re-enters the
 *    store while a cached statement is still stepping gets a private copy of
 *    that statement, finalised after use.
 *  - Transactions: store_begin() is BEGIN IMMEDIATE; a mutating call made
 *    outside a batch opens and closes its own. Callers act on results
 *    (acknowledgements) only after the commit that makes them true.
 *  - Exactly once: a message is a duplicate when its seq is at or below the
 *    stream's watermark W (semq_stream_in.confirmed_through) or its id is in
 *    tb_0030 (unique idx_0030_1). Every seq <= W is AS_OK and its tb_0030 row
 *    is gone; W only moves over a contiguous run of AS_OK rows, and the rows
 *    it passes are deleted in the same transaction.
 *  - A plugin runs inside SAVEPOINT semq_apply, after the tb_0030 row is
 *    written: a failure rolls back only the plugin's writes, and the message
 *    goes to tb_0033 (pending or dead) in the same transaction.
 *  - Key order in tb_0033: per (origin, dest, msg_key) at most one entry is
 *    the head (pending or dead); later ones are waiting (status 1). When the
 *    head finishes (done or discarded) the lowest-seq waiting entry becomes
 *    pending, at once or at its deliver_at if that is later.
 *  - Redo levels: `level` is the index of the next backoff level to use. A
 *    failure waits levels[min(level, n-1)] and increments level; `tries`
 *    counts the attempts made, and a retryable failure is dead once
 *    tries >= max_tries.
 *  - The store never reads a clock: `now` is a parameter. (applied_at of a
 *    migration and a created_at left empty come from SQLite's clock.)
 */
#include "store.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "migrations.h"

#define DEFAULT_MAX_PAYLOAD ((size_t)16 * 1024 * 1024)
#define DEFAULT_BUSY_MS 5000
#define DEFAULT_MAX_TRIES 9
#define STORE_ERRMAX 1024

/* SPEC §7: 5s, 30s, 1m, 10m, 30m, 1h, 6h, 1d, 2d. */
static const int64_t default_levels[] = {
	5000,    30000,    60000,    600000,    1800000,
	3600000, 21600000, 86400000, 172800000,
};

/* The columns every message read starts with (indexes 0..8). */
#define MSG_COLS                                                               \
	"origin, dest, seq, type, msg_key, prev_seq, deliver_at, payload"
#define OUT_COLS                                                               \
	MSG_COLS ", created_at, status, attempts, next_attempt_at, sent_at,"   \
		 " acked_at, result, last_error, id"
#define REDO_COLS                                                              \
	MSG_COLS ", msg_created_at, status, tries, level, next_attempt_at,"    \
		 " created_at, updated_at, last_error, discard_reason, id"
#define IN_COLS                                                                \
	"origin, dest, seq, type, msg_key, prev_seq, received_at, via,"        \
	" result, ack_status, confirm_need, confirm_got, id"
#define REDO_INSERT_SQL                                                        \
	"INSERT INTO tb_0033(origin, dest, seq, type, msg_key, prev_seq,"      \
	" deliver_at, msg_created_at, payload, status, tries, level,"          \
	" next_attempt_at, last_error, created_at, updated_at)"                \
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"     \
	" ?14, ?15, ?15)"

/* Every statement the store runs, prepared once on first use. */
enum q {
	Q_BEGIN,
	Q_COMMIT,
	Q_ROLLBACK,
	Q_SP,
	Q_SP_UNDO,
	Q_SP_RELEASE,
	/* watermarks */
	Q_W_GET,
	Q_W_CREATE,
	Q_W_SET,
	Q_W_LIST,
	/* tb_0030 */
	Q_IN_GET,
	Q_IN_INSERT,
	Q_IN_SET_RESULT,
	Q_IN_ACK,
	Q_IN_UNACKED,
	Q_IN_RUN,
	Q_IN_COMPACT,
	Q_IN_LIST_ALL,
	Q_IN_LIST,
	/* tb_0033 */
	Q_REDO_INSERT,
	Q_REDO_KEY_BUSY,
	Q_REDO_KEY_HEAD,
	Q_REDO_KEY_NEXT,
	Q_REDO_RELEASE,
	Q_REDO_GET,
	Q_REDO_DUE,
	Q_REDO_NEXT_DUE,
	Q_REDO_LIST_ALL,
	Q_REDO_LIST,
	Q_REDO_UPDATE,
	Q_REDO_RETRY,
	Q_REDO_RETRY_ALL,
	Q_REDO_DISCARD,
	/* tb_0031 */
	Q_OUT_INSERT,
	Q_OUT_SEQ,
	Q_OUT_COPY,
	Q_OUT_NEXT_STREAM,
	Q_OUT_NEXT_STREAM_DEST,
	Q_OUT_INFLIGHT,
	Q_OUT_SENDABLE,
	Q_OUT_STATUS,
	Q_OUT_MARK_SENT,
	Q_OUT_MARK_RELAY,
	Q_OUT_MARK_UNSENT,
	Q_OUT_MARK_CONFIRMED,
	Q_OUT_CANCEL,
	Q_OUT_IN_DOUBT,
	Q_OUT_DEFER,
	Q_OUT_DROP_COPY,
	Q_OUT_TOMBSTONES,
	Q_OUT_PURGE,
	Q_OUT_GET,
	Q_OUT_LIST_ALL,
	Q_OUT_LIST,
	/* status */
	Q_STAT_OUT,
	Q_STAT_IN,
	Q_STAT_REDO,
	/* disk space */
	Q_PROBE_SET,
	Q_PROBE_DEL,
	Q__N
};

static const char *const q_sql[Q__N] = {
	[Q_BEGIN] = "BEGIN IMMEDIATE",
	[Q_COMMIT] = "COMMIT",
	[Q_ROLLBACK] = "ROLLBACK",
	[Q_SP] = "SAVEPOINT semq_apply",
	[Q_SP_UNDO] = "ROLLBACK TO semq_apply",
	[Q_SP_RELEASE] = "RELEASE semq_apply",

	[Q_W_GET] = "SELECT confirmed_through FROM semq_stream_in"
		    " WHERE origin = ?1 AND dest = ?2",
	[Q_W_CREATE] = "INSERT INTO semq_stream_in(origin, dest,"
		       " confirmed_through) VALUES (?1, ?2, 0)"
		       " ON CONFLICT (origin, dest) DO NOTHING",
	[Q_W_SET] = "UPDATE semq_stream_in SET confirmed_through = ?3"
		    " WHERE origin = ?1 AND dest = ?2",
	[Q_W_LIST] =
		"SELECT origin, dest, confirmed_through FROM semq_stream_in"
		" ORDER BY origin, dest",

	[Q_IN_GET] = "SELECT result FROM tb_0030"
		     " WHERE origin = ?1 AND dest = ?2 AND seq = ?3",
	[Q_IN_INSERT] =
		"INSERT INTO tb_0030(origin, dest, seq, type, msg_key,"
		" prev_seq, received_at, via, result, ack_status,"
		" confirm_need, confirm_got)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10, 0)",
	[Q_IN_SET_RESULT] = "UPDATE tb_0030 SET result = ?4"
			    " WHERE origin = ?1 AND dest = ?2 AND seq = ?3",
	[Q_IN_ACK] =
		"UPDATE tb_0030 SET confirm_got = confirm_got | ?4,"
		" ack_status = CASE WHEN ((confirm_got | ?4) & confirm_need)"
		" = confirm_need THEN 1 ELSE ack_status END"
		" WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		" RETURNING ack_status",
	[Q_IN_UNACKED] = "SELECT origin, dest, seq, result, confirm_need,"
			 " confirm_got, via FROM tb_0030"
			 " WHERE ack_status = 0 AND received_at < ?1"
			 " ORDER BY received_at, id LIMIT ?2",
	[Q_IN_RUN] = "SELECT seq, ack_status FROM tb_0030"
		     " WHERE origin = ?1 AND dest = ?2 AND seq > ?3"
		     " ORDER BY seq",
	[Q_IN_COMPACT] = "DELETE FROM tb_0030 WHERE origin = ?1 AND dest = ?2"
			 " AND seq > ?3 AND seq <= ?4",
	[Q_IN_LIST_ALL] = "SELECT " IN_COLS " FROM tb_0030"
			  " ORDER BY id DESC LIMIT ?1",
	[Q_IN_LIST] = "SELECT " IN_COLS " FROM tb_0030 WHERE origin = ?1"
		      " ORDER BY id DESC LIMIT ?2",

	[Q_REDO_INSERT] = REDO_INSERT_SQL,
	[Q_REDO_KEY_BUSY] = "SELECT 1 FROM tb_0033 WHERE origin = ?1"
			    " AND dest = ?2 AND msg_key = ?3"
			    " AND status IN (0, 1, -1) LIMIT 1",
	[Q_REDO_KEY_HEAD] = "SELECT 1 FROM tb_0033 WHERE origin = ?1"
			    " AND dest = ?2 AND msg_key = ?3"
			    " AND status IN (0, -1) LIMIT 1",
	[Q_REDO_KEY_NEXT] = "SELECT id, deliver_at FROM tb_0033"
			    " WHERE origin = ?1 AND dest = ?2 AND msg_key = ?3"
			    " AND status = 1 ORDER BY seq LIMIT 1",
	[Q_REDO_RELEASE] = "UPDATE tb_0033 SET status = 0,"
			   " next_attempt_at = ?2, updated_at = ?3"
			   " WHERE id = ?1 AND status = 1",
	[Q_REDO_GET] = "SELECT " REDO_COLS " FROM tb_0033 WHERE id = ?1",
	[Q_REDO_DUE] = "SELECT " REDO_COLS " FROM tb_0033"
		       " WHERE status = 0 AND next_attempt_at <= ?1"
		       " ORDER BY next_attempt_at, id LIMIT ?2",
	[Q_REDO_NEXT_DUE] = "SELECT min(next_attempt_at) FROM tb_0033"
			    " WHERE status = 0",
	[Q_REDO_LIST_ALL] = "SELECT " REDO_COLS " FROM tb_0033"
			    " ORDER BY id LIMIT ?1",
	[Q_REDO_LIST] = "SELECT " REDO_COLS " FROM tb_0033 WHERE status = ?1"
			" ORDER BY id LIMIT ?2",
	[Q_REDO_UPDATE] = "UPDATE tb_0033 SET status = ?2, tries = ?3,"
			  " level = ?4, next_attempt_at = ?5, last_error = ?6,"
			  " updated_at = ?7 WHERE id = ?1",
	[Q_REDO_RETRY] = "UPDATE tb_0033 SET status = 0, level = 0,"
			 " next_attempt_at = ?2, updated_at = ?2"
			 " WHERE id = ?1 AND status = -1",
	[Q_REDO_RETRY_ALL] = "UPDATE tb_0033 SET status = 0, level = 0,"
			     " next_attempt_at = ?1, updated_at = ?1"
			     " WHERE status = -1",
	[Q_REDO_DISCARD] = "UPDATE tb_0033 SET status = -2,"
			   " discard_reason = ?2, updated_at = ?3"
			   " WHERE id = ?1 AND status IN (0, 1, -1)",

	[Q_OUT_INSERT] = "INSERT INTO tb_0031(dest, type, msg_key, payload,"
			 " deliver_at, created_at)"
			 " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	[Q_OUT_SEQ] = "SELECT seq FROM tb_0031 WHERE id = ?1",
	[Q_OUT_COPY] = "INSERT INTO tb_0031(origin, dest, seq, type, msg_key,"
		       " prev_seq, deliver_at, payload, created_at, status,"
		       " next_attempt_at)"
		       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
		       " ON CONFLICT (origin, dest, seq) DO NOTHING",
	/* Skip-scan over the partial index idx_0031_unsent (dest, origin,
	 * seq): one seek per stream. Without statistics the planner would
	 * take idx_0031_due and sort every unsent row, hence INDEXED BY. */
	/* Two seeks, not a row-value comparison: (dest, origin) > (?1, ?2)
	 * steps over every unsent row of the current stream (measured:
	 * 60 ms per call with 400,000 unsent rows, half of a relay-routed
	 * origin's CPU while draining a backlog). */
	[Q_OUT_NEXT_STREAM] =
		"SELECT dest, origin FROM (SELECT dest, origin FROM tb_0031"
		" INDEXED BY idx_0031_unsent WHERE status = 0 AND dest = ?1"
		" AND origin > ?2 ORDER BY origin LIMIT 1) UNION ALL"
		" SELECT dest, origin FROM (SELECT dest, origin FROM tb_0031"
		" INDEXED BY idx_0031_unsent WHERE status = 0 AND dest > ?1"
		" ORDER BY dest, origin LIMIT 1) ORDER BY 1, 2 LIMIT 1",
	[Q_OUT_NEXT_STREAM_DEST] = "SELECT dest, origin FROM tb_0031"
				   " INDEXED BY idx_0031_unsent"
				   " WHERE status = 0 AND dest = ?1"
				   " AND origin > ?2 ORDER BY origin LIMIT 1",
	/* Over idx_0031_due: only the rows in flight, not the stream's
	 * confirmed history (the unary + keeps idx_0031_1 out). */
	[Q_OUT_INFLIGHT] = "SELECT count(*) FROM tb_0031 WHERE status IN (4, 6)"
			   " AND +origin = ?1 AND +dest = ?2",
	[Q_OUT_SENDABLE] = "SELECT " OUT_COLS " FROM tb_0031"
			   " INDEXED BY idx_0031_unsent WHERE status = 0 AND "
			   "dest = ?1 AND origin = ?2"
			   " AND next_attempt_at <= ?3 ORDER BY seq LIMIT ?4",
	[Q_OUT_STATUS] = "SELECT status FROM tb_0031"
			 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3",
	[Q_OUT_MARK_SENT] = "UPDATE tb_0031 SET status = 4,"
			    " attempts = attempts + 1, sent_at = ?4,"
			    " next_attempt_at = ?5"
			    " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			    " AND status = 0",
	[Q_OUT_MARK_RELAY] = "UPDATE tb_0031 SET status = 6,"
			     " next_attempt_at = ?4"
			     " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			     " AND status = 4",
	[Q_OUT_MARK_UNSENT] = "UPDATE tb_0031 SET status = 0,"
			      " next_attempt_at = ?4, last_error = ?5"
			      " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			      " AND status IN (4, 6)",
	/* next_attempt_at of a confirmed row is its acked_at: the purge
	 * deadline runs over idx_0031_due like every other. */
	/* A cancelled row whose tombstone was recorded stays cancelled; one
	 * that took effect before the cancel arrived becomes confirmed. */
	[Q_OUT_MARK_CONFIRMED] = "UPDATE tb_0031 SET status = CASE WHEN"
				 " status = -2 AND ?4 = 4 THEN -2 ELSE 100 END,"
				 " result = ?4, acked_at = ?5,"
				 " next_attempt_at = ?5"
				 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
				 " AND status IN (0, 4, 6, -2)",
	[Q_OUT_CANCEL] = "UPDATE tb_0031 SET status = -2, next_attempt_at = ?4"
			 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			 " AND status IN (0, 4, 6)",
	[Q_OUT_IN_DOUBT] = "SELECT " OUT_COLS " FROM tb_0031"
			   " WHERE status IN (4, 6) AND next_attempt_at <= ?1"
			   " ORDER BY next_attempt_at, id LIMIT ?2",
	[Q_OUT_DEFER] = "UPDATE tb_0031 SET next_attempt_at = ?4"
			" WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			" AND (status IN (4, 6) OR"
			" (status = -2 AND result IS NULL))",
	/* A relay's copy (never a row of this node's own) is gone once the
	 * destination confirmed it. */
	[Q_OUT_DROP_COPY] = "DELETE FROM tb_0031"
			    " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			    " AND origin <> (SELECT value FROM semq_meta"
			    " WHERE key = 'node_id')",
	[Q_OUT_TOMBSTONES] = "SELECT " OUT_COLS " FROM tb_0031"
			     " WHERE status = -2 AND next_attempt_at <= ?1"
			     " AND result IS NULL"
			     " ORDER BY next_attempt_at, id LIMIT ?2",
	[Q_OUT_PURGE] =
		"DELETE FROM tb_0031 WHERE id IN (SELECT id FROM tb_0031"
		" WHERE (status = 100 OR (status = -2 AND result IS NOT NULL))"
		" AND next_attempt_at < ?1"
		" AND acked_at < ?1 ORDER BY next_attempt_at LIMIT ?2)",
	[Q_OUT_GET] = "SELECT " OUT_COLS " FROM tb_0031"
		      " WHERE origin = ?1 AND dest = ?2 AND seq = ?3",
	[Q_OUT_LIST_ALL] = "SELECT " OUT_COLS " FROM tb_0031"
			   " ORDER BY id DESC LIMIT ?1",
	[Q_OUT_LIST] = "SELECT " OUT_COLS " FROM tb_0031 WHERE status = ?1"
		       " ORDER BY id DESC LIMIT ?2",

	[Q_STAT_OUT] = "SELECT COALESCE(origin, ''), dest, status, count(*),"
		       " min(created_at) FROM tb_0031"
		       " GROUP BY origin, dest, status ORDER BY 1, 2, 3",
	[Q_STAT_IN] = "SELECT origin, dest, ack_status, count(*),"
		      " min(received_at) FROM tb_0030"
		      " GROUP BY origin, dest, ack_status ORDER BY 1, 2, 3",
	[Q_STAT_REDO] = "SELECT origin, dest, status, count(*),"
			" min(created_at) FROM tb_0033"
			" GROUP BY origin, dest, status ORDER BY 1, 2, 3",

	[Q_PROBE_SET] =
		"INSERT INTO semq_meta(key, value)"
		" VALUES ('disk_probe', zeroblob(?1))"
		" ON CONFLICT (key) DO UPDATE SET value = excluded.value",
	[Q_PROBE_DEL] = "DELETE FROM semq_meta WHERE key = 'disk_probe'",
};

struct store {
	sqlite3 *db; /* owned */
	char *path;  /* owned: the file, for messages */
	char node_id[SEMQ_ID_MAX + 1];
	size_t max_payload;
	int64_t *levels; /* owned: redo backoff levels, ms */
	size_t n_levels;
	unsigned max_tries;
	int schema_version;
	int in_batch;
	sqlite3_stmt *q[Q__N];    /* owned: cached statements */
	unsigned char busy[Q__N]; /* q[i] is stepping right now */
	int busy_ms;              /* how long a writer waits for the lock */
	struct semq_plugin_tx tx; /* {SEMQ_DB_SQLITE, db} */
	char *row_str[2];         /* owned: strings of the last *_get row */
	char rr_dest[SEMQ_ID_MAX + 1];   /* fetch_sendable starts after */
	char rr_origin[SEMQ_ID_MAX + 1]; /* this stream (round robin) */
	char errmsg[STORE_ERRMAX];
	int full; /* errmsg is SQLite's SQLITE_FULL or SQLITE_IOERR */
};

/* ---- errors --------------------------------------------------------------- */

static int seterr(struct store *st, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int seterr(struct store *st, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->errmsg, sizeof st->errmsg, fmt, ap);
	va_end(ap);
	st->full = 0;
	return code;
}

/* Is a SQLite result code a full disk (or database size limit) or a failed
 * write? */
static int rc_full(int rc)
{
	return (rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR;
}

/* A failed SQLite call: "FILE: what: sqlite message". */
static int dberr(struct store *st, const char *what)
{
	int full = rc_full(sqlite3_extended_errcode(st->db));

	seterr(st, SEMQ_ERR_DB, "%s: %s: %s", st->path, what,
	       sqlite3_errmsg(st->db));
	st->full = full;
	return SEMQ_ERR_DB;
}

static void copy_err(const struct store *st, char *err, size_t errsz)
{
	if (err && errsz)
		snprintf(err, errsz, "%s", st->errmsg);
}

/* ---- statements ----------------------------------------------------------- */

/* The statement for `i`, reset and unbound; NULL (errmsg set) on failure.
 * Give it back with q_put(). */
static sqlite3_stmt *q_get(struct store *st, enum q i)
{
	sqlite3_stmt *s = NULL;

	if (!st->busy[i]) {
		if (!st->q[i] &&
		    sqlite3_prepare_v3(st->db, q_sql[i], -1,
				       SQLITE_PREPARE_PERSISTENT, &st->q[i],
				       NULL) != SQLITE_OK) {
			st->q[i] = NULL;
			dberr(st, "preparing a statement");
			return NULL;
		}
		st->busy[i] = 1;
		return st->q[i];
	}
	/* Re-entered from a callback while q[i] is stepping: a private one. */
	if (sqlite3_prepare_v2(st->db, q_sql[i], -1, &s, NULL) != SQLITE_OK) {
		sqlite3_finalize(s);
		dberr(st, "preparing a statement");
		return NULL;
	}
	return s;
}

static void q_put(struct store *st, enum q i, sqlite3_stmt *s)
{
	if (!s)
		return;
	if (s == st->q[i]) {
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
		st->busy[i] = 0;
	} else {
		sqlite3_finalize(s);
	}
}

/* Runs a statement without parameters or rows (BEGIN, SAVEPOINT, ...). */
static int q_exec(struct store *st, enum q i, const char *what)
{
	sqlite3_stmt *s = q_get(st, i);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	rc = sqlite3_step(s);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
		dberr(st, what);
		q_put(st, i, s);
		return SEMQ_ERR_DB;
	}
	q_put(st, i, s);
	return SEMQ_OK;
}

/* ROLLBACK that keeps errmsg: used on paths that already failed. */
static void rollback_quiet(struct store *st)
{
	sqlite3_stmt *s;

	if (sqlite3_get_autocommit(st->db))
		return;
	s = q_get(st, Q_ROLLBACK);
	if (s) {
		sqlite3_step(s);
		q_put(st, Q_ROLLBACK, s);
	} else {
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	}
}

static void bind_text(sqlite3_stmt *s, int i, const char *t)
{
	if (t)
		sqlite3_bind_text(s, i, t, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

static void bind_id(sqlite3_stmt *s, const struct msgid *id)
{
	sqlite3_bind_text(s, 1, id->origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, id->dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)id->seq);
}

static void bind_key(sqlite3_stmt *s, int i, const struct msg *m)
{
	bind_text(s, i, m->has_key && m->key[0] ? m->key : NULL);
}

static void bind_payload(sqlite3_stmt *s, int i, const struct msg *m)
{
	/* Never NULL: the payload columns are NOT NULL, x'' when empty. */
	sqlite3_bind_blob(s, i, m->payload_len ? (const void *)m->payload : "",
			  (int)m->payload_len, SQLITE_STATIC);
}

static const char *key_of(const struct msg *m)
{
	return m->has_key && m->key[0] ? m->key : NULL;
}

/* ---- transactions --------------------------------------------------------- */

/* Makes sure a transaction is open; *own = 1 when this call opened it. */
static int tx_open(struct store *st, int *own)
{
	*own = 0;
	if (st->in_batch) {
		if (sqlite3_get_autocommit(st->db))
			return seterr(st, SEMQ_ERR_DB,
				      "%s: the open batch was already rolled "
				      "back by an earlier error; roll it back",
				      st->path);
		return SEMQ_OK;
	}
	if (q_exec(st, Q_BEGIN, "begin") != SEMQ_OK)
		return SEMQ_ERR_DB;
	*own = 1;
	return SEMQ_OK;
}

/* Ends a transaction tx_open() opened: commit when r is not an error. */
static int tx_close(struct store *st, int own, int r)
{
	if (!own)
		return r;
	if (r >= 0) {
		if (q_exec(st, Q_COMMIT, "commit") == SEMQ_OK)
			return r;
		r = SEMQ_ERR_DB;
	}
	rollback_quiet(st);
	return r;
}

/* ---- validation ----------------------------------------------------------- */

static int check_node(struct store *st, const char *what, const char *id,
		      size_t cap)
{
	if (!id)
		return seterr(st, SEMQ_ERR_INVALID, "%s: missing", what);
	if (!memchr(id, '\0', cap) || !semq_id_valid(id))
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s '%.64s': not a node id (1-64 of "
			      "A-Za-z0-9._-)",
			      what, id);
	return SEMQ_OK;
}

static int check_msgid(struct store *st, const struct msgid *id)
{
	int r;

	if (!id)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "message id: missing");
	r = check_node(st, "origin", id->origin, sizeof id->origin);
	if (r)
		return r;
	r = check_node(st, "dest", id->dest, sizeof id->dest);
	if (r)
		return r;
	if (id->seq == 0 || id->seq > INT64_MAX)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s/%s: seq %" PRIu64 " out of range 1..2^63-1",
			      id->origin, id->dest, id->seq);
	return SEMQ_OK;
}

/* The fields of a message besides its id; `what` names it in messages. */
static int check_body(struct store *st, const char *what, const struct msg *m)
{
	if (m->has_key && !memchr(m->key, '\0', sizeof m->key))
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: key longer than %d bytes", what,
			      SEMQ_KEY_MAX);
	if (!m->payload && m->payload_len)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: payload NULL with length %zu", what,
			      m->payload_len);
	if (m->payload_len > (size_t)INT_MAX)
		return seterr(st, SEMQ_ERR_TOO_BIG,
			      "%s: payload of %zu bytes is larger than "
			      "max_payload",
			      what, m->payload_len);
	if (m->deliver_at < 0)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: deliver_at %" PRId64 " is negative", what,
			      m->deliver_at);
	if (m->prev_seq > INT64_MAX)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: prev_seq %" PRIu64 " out of range", what,
			      m->prev_seq);
	return SEMQ_OK;
}

/* ---- reading rows --------------------------------------------------------- */

static void col_text(char *dst, size_t cap, sqlite3_stmt *s, int col)
{
	const unsigned char *t = sqlite3_column_text(s, col);
	size_t n = t ? (size_t)sqlite3_column_bytes(s, col) : 0;

	if (n >= cap)
		n = cap - 1;
	if (n)
		memcpy(dst, t, n);
	dst[n] = '\0';
}

/* A copy of a text column (NULL stays NULL); -1 when out of memory. */
static int col_dup(sqlite3_stmt *s, int col, char **out)
{
	const unsigned char *t = sqlite3_column_text(s, col);

	*out = NULL;
	if (!t)
		return 0;
	*out = strdup((const char *)t);
	return *out ? 0 : -1;
}

/* MSG_COLS (0..7) and created_at (8) into m; m->payload is malloc'd. */
static int col_msg(struct store *st, sqlite3_stmt *s, struct msg *m)
{
	const void *p;
	int n;

	memset(m, 0, sizeof *m);
	col_text(m->id.origin, sizeof m->id.origin, s, 0);
	col_text(m->id.dest, sizeof m->id.dest, s, 1);
	m->id.seq = (uint64_t)sqlite3_column_int64(s, 2);
	m->type = (uint32_t)sqlite3_column_int64(s, 3);
	if (sqlite3_column_type(s, 4) != SQLITE_NULL) {
		m->has_key = 1;
		col_text(m->key, sizeof m->key, s, 4);
	}
	m->prev_seq = (uint64_t)sqlite3_column_int64(s, 5);
	m->deliver_at = sqlite3_column_int64(s, 6);
	p = sqlite3_column_blob(s, 7);
	n = sqlite3_column_bytes(s, 7);
	if (n > 0) {
		m->payload = malloc((size_t)n);
		if (!m->payload)
			return seterr(st, SEMQ_ERR_NOMEM,
				      "reading a message: out of memory");
		memcpy(m->payload, p, (size_t)n);
		m->payload_len = (size_t)n;
	}
	m->created_at = sqlite3_column_int64(s, 8);
	return SEMQ_OK;
}

/* A row of OUT_COLS; *le gets a malloc'd copy of last_error. */
static int col_out(struct store *st, sqlite3_stmt *s, struct msg *m,
		   struct out_row *row, char **le)
{
	int r = col_msg(st, s, m);

	*le = NULL;
	if (r)
		return r;
	memset(row, 0, sizeof *row);
	row->status = sqlite3_column_int(s, 9);
	row->attempts = sqlite3_column_int(s, 10);
	row->next_attempt_at = sqlite3_column_int64(s, 11);
	row->sent_at = sqlite3_column_int64(s, 12);
	row->acked_at = sqlite3_column_int64(s, 13);
	row->result = sqlite3_column_type(s, 14) == SQLITE_NULL
			      ? -1
			      : sqlite3_column_int(s, 14);
	if (col_dup(s, 15, le))
		return seterr(st, SEMQ_ERR_NOMEM,
			      "reading a row: out of memory");
	row->last_error = *le;
	row->rowid = sqlite3_column_int64(s, 16);
	/* A cancelled outbound row stands for its tombstone. */
	m->tombstone = row->status == SS_CANCELLED;
	return SEMQ_OK;
}

/* A row of REDO_COLS; strs[0], strs[1] get last_error, discard_reason. */
static int col_redo(struct store *st, sqlite3_stmt *s, struct msg *m,
		    struct redo_row *row, char **strs)
{
	int r = col_msg(st, s, m);

	strs[0] = strs[1] = NULL;
	if (r)
		return r;
	memset(row, 0, sizeof *row);
	row->status = sqlite3_column_int(s, 9);
	row->tries = sqlite3_column_int(s, 10);
	row->level = sqlite3_column_int(s, 11);
	row->next_attempt_at = sqlite3_column_int64(s, 12);
	row->created_at = sqlite3_column_int64(s, 13);
	row->updated_at = sqlite3_column_int64(s, 14);
	if (col_dup(s, 15, &strs[0]) || col_dup(s, 16, &strs[1]))
		return seterr(st, SEMQ_ERR_NOMEM,
			      "reading a row: out of memory");
	row->last_error = strs[0];
	row->discard_reason = strs[1];
	row->id = sqlite3_column_int64(s, 17);
	return SEMQ_OK;
}

/*
 * Steps `s` (OUT_COLS) and hands each row to cb. Every row is copied before
 * the call, so the callback may use the store. *n counts the rows handed;
 * *stopped = 1 when cb asked to stop.
 */
static int each_out(struct store *st, sqlite3_stmt *s, store_out_cb cb,
		    void *ctx, unsigned *n, int *stopped)
{
	int rc, r;

	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct msg m;
		struct out_row row;
		char *le = NULL;
		int stop;

		r = col_out(st, s, &m, &row, &le);
		if (r) {
			msg_clear(&m);
			free(le);
			return r;
		}
		stop = cb(ctx, &m, &row);
		msg_clear(&m);
		free(le);
		if (n)
			(*n)++;
		if (stop) {
			if (stopped)
				*stopped = 1;
			return SEMQ_OK;
		}
	}
	if (rc != SQLITE_DONE)
		return dberr(st, "reading tb_0031");
	return SEMQ_OK;
}

static int each_redo(struct store *st, sqlite3_stmt *s, store_redo_cb cb,
		     void *ctx)
{
	int rc, r;

	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct msg m;
		struct redo_row row;
		char *strs[2];
		int stop = 0;

		r = col_redo(st, s, &m, &row, strs);
		if (!r)
			stop = cb(ctx, &m, &row);
		msg_clear(&m);
		free(strs[0]);
		free(strs[1]);
		if (r)
			return r;
		if (stop)
			return SEMQ_OK;
	}
	if (rc != SQLITE_DONE)
		return dberr(st, "reading tb_0033");
	return SEMQ_OK;
}

/* ---- open, migrate, close ------------------------------------------------- */

int store_schema_latest(void)
{
	int v = 0;
	size_t i;

	for (i = 0; i < semq_n_migrations; i++)
		if (semq_migrations[i].version > v)
			v = semq_migrations[i].version;
	return v;
}

int store_schema_version(struct store *st)
{
	return st ? st->schema_version : 0;
}

/* One integer from a one-off query (0 when NULL or no row). */
static int query_int(struct store *st, const char *sql, int64_t *v)
{
	sqlite3_stmt *s = NULL;
	int rc;

	*v = 0;
	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW)
			*v = sqlite3_column_int64(s, 0);
		if (rc == SQLITE_ROW || rc == SQLITE_DONE)
			rc = SQLITE_OK;
	}
	sqlite3_finalize(s);
	return rc;
}

/* The version the file is at: max(semq_schema.version), 0 when new. */
static int schema_current(struct store *st, int *v)
{
	int64_t n = 0;
	int rc;

	*v = 0;
	rc = query_int(st,
		       "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
		       " AND name = 'semq_schema'",
		       &n);
	if (rc != SQLITE_OK || n == 0)
		return rc;
	rc = query_int(st, "SELECT COALESCE(max(version), 0) FROM semq_schema",
		       &n);
	*v = n > INT_MAX ? INT_MAX : (int)n;
	return rc;
}

static int too_new(struct store *st, int v)
{
	return seterr(st, SEMQ_ERR_VERSION,
		      "%s: schema version %d is newer than this SEMQ (knows up "
		      "to %d); use a newer semqd",
		      st->path, v, store_schema_latest());
}

/* A SQLite failure while opening: the file is unreadable or not ours. */
static int open_err(struct store *st, int rc, const char *what)
{
	int code = SEMQ_ERR_DB;

	if ((rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_IOERR ||
	    (rc & 0xff) == SQLITE_PERM || (rc & 0xff) == SQLITE_READONLY)
		code = SEMQ_ERR_IO;
	if ((rc & 0xff) == SQLITE_NOTADB)
		return seterr(st, SEMQ_ERR_DB, "%s: not a SEMQ database (%s)",
			      st->path, sqlite3_errmsg(st->db));
	return seterr(st, code, "%s: %s: %s", st->path, what,
		      sqlite3_errmsg(st->db));
}

/*
 * Applies every embedded migration above the file's version, each in one
 * BEGIN IMMEDIATE transaction with its semq_schema row. The version is read
 * again inside the transaction, so of two processes opening a new file at
 * once only the first migrates.
 */
static int migrate(struct store *st)
{
	static const char create_schema[] =
		"CREATE TABLE IF NOT EXISTS semq_schema ("
		" version INTEGER PRIMARY KEY, name TEXT, applied_at INTEGER)";
	static const char insert_schema[] =
		"INSERT INTO semq_schema(version, name, applied_at)"
		" VALUES (?1, ?2, CAST((julianday('now') - 2440587.5)"
		" * 86400000.0 AS INTEGER))";
	const int latest = store_schema_latest();
	sqlite3_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, cur = 0;
	size_t i;

	rc = schema_current(st, &cur);
	if (rc != SQLITE_OK) {
		r = open_err(st, rc, "reading the schema version");
		goto out;
	}
	if (cur > latest) {
		r = too_new(st, cur);
		goto out;
	}
	for (i = 0; i < semq_n_migrations; i++) {
		const struct migration *mg = &semq_migrations[i];

		if (mg->version <= cur)
			continue;
		rc = sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			r = open_err(st, rc, "beginning a migration");
			goto out;
		}
		rc = sqlite3_exec(st->db, create_schema, NULL, NULL, NULL);
		if (rc == SQLITE_OK)
			rc = schema_current(st, &cur);
		if (rc != SQLITE_OK) {
			r = open_err(st, rc, "reading the schema version");
			goto out;
		}
		if (cur > latest) {
			r = too_new(st, cur);
			goto out;
		}
		if (cur >= mg->version) { /* another process was first */
			rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
			if (rc != SQLITE_OK) {
				r = open_err(st, rc, "commit");
				goto out;
			}
			continue;
		}
		rc = sqlite3_exec(st->db, mg->sql, NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			r = seterr(st, SEMQ_ERR_DB,
				   "%s: migration %s failed: %s", st->path,
				   mg->name, sqlite3_errmsg(st->db));
			goto out;
		}
		rc = sqlite3_prepare_v2(st->db, insert_schema, -1, &s, NULL);
		if (rc == SQLITE_OK) {
			sqlite3_bind_int(s, 1, mg->version);
			sqlite3_bind_text(s, 2, mg->name, -1, SQLITE_STATIC);
			rc = sqlite3_step(s);
			if (rc == SQLITE_DONE)
				rc = SQLITE_OK;
		}
		sqlite3_finalize(s);
		s = NULL;
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			r = seterr(st, SEMQ_ERR_DB,
				   "%s: recording migration %s: %s", st->path,
				   mg->name, sqlite3_errmsg(st->db));
			goto out;
		}
		cur = mg->version;
	}
	st->schema_version = cur;
	r = SEMQ_OK;
out:
	sqlite3_finalize(s);
	if (r != SEMQ_OK && !sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return r;
}

/* semq_meta: the node id (set once, then checked) and max_payload. */
static int meta_sync(struct store *st)
{
	static const char get_sql[] =
		"SELECT value FROM semq_meta WHERE key = 'node_id'";
	static const char put_sql[] =
		"INSERT INTO semq_meta(key, value) VALUES (?1, ?2)"
		" ON CONFLICT (key) DO UPDATE SET value = excluded.value";
	sqlite3_stmt *s = NULL;
	char have[SEMQ_ID_MAX + 1] = "";
	int r = SEMQ_ERR_INTERNAL, rc, found = 0;

	rc = sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		r = open_err(st, rc, "begin");
		goto out;
	}
	rc = sqlite3_prepare_v2(st->db, get_sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			found = 1;
			col_text(have, sizeof have, s, 0);
			rc = SQLITE_OK;
		} else if (rc == SQLITE_DONE) {
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(s);
	s = NULL;
	if (rc != SQLITE_OK) {
		r = open_err(st, rc, "reading semq_meta");
		goto out;
	}
	if (found && strcmp(have, st->node_id) != 0) {
		r = seterr(st, SEMQ_ERR_INVALID,
			   "%s: belongs to node '%s', not to node '%s'",
			   st->path, have, st->node_id);
		goto out;
	}
	rc = sqlite3_prepare_v2(st->db, put_sql, -1, &s, NULL);
	if (rc == SQLITE_OK && !found) {
		sqlite3_bind_text(s, 1, "node_id", -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, st->node_id, -1, SQLITE_STATIC);
		rc = sqlite3_step(s);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
	}
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(s, 1, "max_payload", -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, (sqlite3_int64)st->max_payload);
		rc = sqlite3_step(s);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	sqlite3_finalize(s);
	s = NULL;
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		r = open_err(st, rc, "writing semq_meta");
		goto out;
	}
	r = SEMQ_OK;
out:
	sqlite3_finalize(s);
	if (r != SEMQ_OK && !sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return r;
}

/*
 * PRAGMA journal_mode = WAL: the first statement that reads the file, so a
 * foreign file fails here ("file is not a database"). While another process
 * converts a new file, SQLite answers SQLITE_BUSY at once instead of calling
 * the busy handler: retry for the busy budget (counted in sleeps, not read
 * from a clock).
 */
/*
 * The busy handler: while another writer (the application inserting into
 * tb_0031, semqctl) holds the lock, try again every BUSY_STEP_US, up to
 * busy_ms. SQLite's own handler sleeps 1, 2, 5 ... 100 ms between tries and
 * is never woken when the lock frees: with an application that commits every
 * few ms, the store thread lost tens of ms per batch (measured: 12 sleeps of
 * 100 ms in 6 s of a 500 msgs/s run).
 */
#define BUSY_STEP_US 250

static int busy_wait(void *arg, int tries)
{
	const struct store *st = arg;
	struct timespec ts = {0, BUSY_STEP_US * 1000L};

	if ((int64_t)tries * BUSY_STEP_US >= (int64_t)st->busy_ms * 1000)
		return 0;
	nanosleep(&ts, NULL);
	return 1;
}

static int set_wal(struct store *st, int budget_ms)
{
	const char *mode;
	sqlite3_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, slept = 0;

	for (;;) {
		rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1,
					&s, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_step(s);
		if ((rc & 0xff) != SQLITE_BUSY || slept >= budget_ms)
			break;
		sqlite3_finalize(s);
		s = NULL;
		slept += sqlite3_sleep(10);
	}
	if (rc != SQLITE_ROW) {
		r = open_err(st, rc, "setting WAL journal mode");
		goto out;
	}
	mode = (const char *)sqlite3_column_text(s, 0);
	if (!mode || strcmp(mode, "wal") != 0) {
		r = seterr(st, SEMQ_ERR_DB,
			   "%s: cannot use WAL journal mode (got '%s')",
			   st->path, mode ? mode : "");
		goto out;
	}
	r = SEMQ_OK;
out:
	sqlite3_finalize(s);
	return r;
}

static int check_opts(const struct store_opts *o, char *err, size_t errsz)
{
	const char *msg = NULL;
	size_t i;

	if (!o)
		msg = "store_open: options are required";
	else if (!o->path || !o->path[0])
		msg = "store_open: the database path is empty";
	else if (!semq_id_valid(o->node_id))
		msg = "store_open: node id is not a node id (1-64 of "
		      "A-Za-z0-9._-)";
	else if (o->synchronous < -1 || o->synchronous > 3)
		msg = "store_open: synchronous must be -1 or 0..3";
	else if (o->busy_timeout_ms < 0)
		msg = "store_open: busy_timeout_ms is negative";
	else if (o->max_payload > (size_t)INT_MAX)
		msg = "store_open: max_payload is larger than 2 GiB";
	else if (o->redo_levels_ms && !o->n_redo_levels)
		msg = "store_open: redo levels given but n_redo_levels is 0";
	if (!msg && o->redo_levels_ms)
		for (i = 0; i < o->n_redo_levels; i++)
			if (o->redo_levels_ms[i] < 0)
				msg = "store_open: a redo level is negative";
	if (!msg)
		return SEMQ_OK;
	if (err && errsz)
		snprintf(err, errsz, "%s", msg);
	return SEMQ_ERR_INVALID;
}

int store_open(const struct store_opts *o, struct store **out, char *err,
	       size_t errsz)
{
	static const char *const sync_sql[] = {
		"PRAGMA synchronous = OFF", "PRAGMA synchronous = NORMAL",
		"PRAGMA synchronous = FULL", "PRAGMA synchronous = EXTRA"};
	struct store *st = NULL;
	const int64_t *lv;
	int r = SEMQ_ERR_INTERNAL, rc;

	if (out)
		*out = NULL;
	if (!out) {
		if (err && errsz)
			snprintf(err, errsz, "%s", "store_open: out is NULL");
		return SEMQ_ERR_INVALID;
	}
	r = check_opts(o, err, errsz);
	if (r)
		return r;

	st = calloc(1, sizeof *st);
	if (!st || !(st->path = strdup(o->path))) {
		if (err && errsz)
			snprintf(err, errsz, "%s: out of memory", o->path);
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	snprintf(st->node_id, sizeof st->node_id, "%s", o->node_id);
	st->max_payload = o->max_payload ? o->max_payload : DEFAULT_MAX_PAYLOAD;
	st->max_tries = o->max_tries ? o->max_tries : DEFAULT_MAX_TRIES;
	lv = o->redo_levels_ms ? o->redo_levels_ms : default_levels;
	st->n_levels = o->redo_levels_ms ? o->n_redo_levels
					 : sizeof default_levels /
						   sizeof default_levels[0];
	st->levels = calloc(st->n_levels, sizeof *st->levels);
	if (!st->levels) {
		r = seterr(st, SEMQ_ERR_NOMEM, "%s: out of memory", st->path);
		goto out;
	}
	memcpy(st->levels, lv, st->n_levels * sizeof *st->levels);

	rc = sqlite3_open_v2(st->path, &st->db,
			     SQLITE_OPEN_CREATE | SQLITE_OPEN_READWRITE |
				     SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		r = st->db ? open_err(st, rc, "cannot open")
			   : seterr(st, SEMQ_ERR_NOMEM, "%s: out of memory",
				    st->path);
		goto out;
	}
	sqlite3_extended_result_codes(st->db, 1);
	st->busy_ms = o->busy_timeout_ms ? o->busy_timeout_ms : DEFAULT_BUSY_MS;
	sqlite3_busy_handler(st->db, busy_wait, st);

	r = set_wal(st,
		    o->busy_timeout_ms ? o->busy_timeout_ms : DEFAULT_BUSY_MS);
	if (r)
		goto out;
	rc = sqlite3_exec(st->db,
			  sync_sql[o->synchronous < 0 ? 2 : o->synchronous],
			  NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(st->db, "PRAGMA foreign_keys = ON", NULL,
				  NULL, NULL);
	if (rc != SQLITE_OK) {
		r = open_err(st, rc, "setting pragmas");
		goto out;
	}

	r = migrate(st);
	if (r)
		goto out;
	r = meta_sync(st);
	if (r)
		goto out;

	st->tx.db_kind = SEMQ_DB_SQLITE;
	st->tx.db = st->db;
	*out = st;
	st = NULL;
	r = SEMQ_OK;
out:
	if (st && r != SEMQ_OK && st->errmsg[0])
		copy_err(st, err, errsz);
	store_free(st);
	return r;
}

void store_free(struct store *st)
{
	size_t i;

	if (!st)
		return;
	if (st->db && st->in_batch)
		rollback_quiet(st);
	for (i = 0; i < Q__N; i++)
		sqlite3_finalize(st->q[i]);
	if (st->db)
		sqlite3_close(st->db);
	free(st->row_str[0]);
	free(st->row_str[1]);
	free(st->levels);
	free(st->path);
	free(st);
}

const char *store_errmsg(const struct store *st)
{
	if (!st)
		return "no store";
	return st->errmsg;
}

int store_disk_full(const struct store *st)
{
	return st ? st->full : 0;
}

const struct semq_plugin_tx *store_plugin_tx(struct store *st)
{
	return st ? &st->tx : NULL;
}

int store_probe_space(struct store *st, size_t bytes)
{
	sqlite3_stmt *s = NULL;
	enum q i = bytes ? Q_PROBE_SET : Q_PROBE_DEL;
	int r = SEMQ_ERR_INTERNAL, own = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (bytes > (size_t)INT_MAX)
		return seterr(st, SEMQ_ERR_INVALID,
			      "probe_space: %zu bytes is over 2 GiB", bytes);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, i);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	if (bytes)
		sqlite3_bind_int(s, 1, (int)bytes);
	if (sqlite3_step(s) != SQLITE_DONE) {
		r = dberr(st, bytes ? "writing the disk probe"
				    : "removing the disk probe");
		goto out;
	}
	r = SEMQ_OK;
out:
	q_put(st, i, s);
	return tx_close(st, own, r);
}

/* ---- batches -------------------------------------------------------------- */

int store_begin(struct store *st)
{
	if (!st)
		return SEMQ_ERR_INVALID;
	if (st->in_batch)
		return seterr(st, SEMQ_ERR_INTERNAL, "%s",
			      "store_begin: a batch is already open");
	if (q_exec(st, Q_BEGIN, "begin") != SEMQ_OK)
		return SEMQ_ERR_DB;
	st->in_batch = 1;
	return SEMQ_OK;
}

int store_commit(struct store *st)
{
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!st->in_batch)
		return seterr(st, SEMQ_ERR_INTERNAL, "%s",
			      "store_commit: no batch is open");
	st->in_batch = 0;
	if (sqlite3_get_autocommit(st->db))
		return seterr(st, SEMQ_ERR_DB,
			      "%s: commit: the batch was already rolled back "
			      "by an earlier error",
			      st->path);
	r = q_exec(st, Q_COMMIT, "commit");
	if (r)
		rollback_quiet(st);
	return r;
}

/* Rolling back with no batch open is harmless (after a failed commit). */
int store_rollback(struct store *st)
{
	if (!st)
		return SEMQ_ERR_INVALID;
	st->in_batch = 0;
	if (sqlite3_get_autocommit(st->db))
		return SEMQ_OK;
	return q_exec(st, Q_ROLLBACK, "rollback");
}

int store_in_batch(const struct store *st)
{
	return st ? st->in_batch : 0;
}

/* ---- origin side: tb_0031 ------------------------------------------------- */

int store_enqueue(struct store *st, const struct msg *m, uint64_t *seq_out,
		  char *err, size_t errsz)
{
	sqlite3_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;
	int64_t rowid;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!m) {
		r = seterr(st, SEMQ_ERR_INVALID, "%s",
			   "enqueue: message is missing");
		goto out;
	}
	r = check_node(st, "dest", m->id.dest, sizeof m->id.dest);
	if (!r)
		r = check_body(st, "enqueue", m);
	if (r)
		goto out;
	if (m->payload_len > st->max_payload) {
		r = seterr(st, SEMQ_ERR_TOO_BIG,
			   "enqueue to %s: payload of %zu bytes is larger than "
			   "max_payload (%zu)",
			   m->id.dest, m->payload_len, st->max_payload);
		goto out;
	}
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_OUT_INSERT);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	sqlite3_bind_text(s, 1, m->id.dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, m->type);
	bind_key(s, 3, m);
	bind_payload(s, 4, m);
	sqlite3_bind_int64(s, 5, m->deliver_at);
	if (m->created_at > 0)
		sqlite3_bind_int64(s, 6, m->created_at);
	else
		sqlite3_bind_null(s, 6);
	rc = sqlite3_step(s);
	q_put(st, Q_OUT_INSERT, s);
	s = NULL;
	if (rc != SQLITE_DONE) {
		const char *msg = sqlite3_errmsg(st->db);

		if (strstr(msg, "larger than max_payload"))
			r = seterr(st, SEMQ_ERR_TOO_BIG, "enqueue to %s: %s",
				   m->id.dest, msg);
		else if ((rc & 0xff) == SQLITE_CONSTRAINT)
			r = seterr(st, SEMQ_ERR_INVALID, "enqueue to %s: %s",
				   m->id.dest, msg);
		else
			r = dberr(st, "enqueue");
		goto out;
	}
	rowid = sqlite3_last_insert_rowid(st->db);
	s = q_get(st, Q_OUT_SEQ);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	sqlite3_bind_int64(s, 1, rowid);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		r = rc == SQLITE_DONE ? seterr(st, SEMQ_ERR_INTERNAL, "%s",
					       "enqueue: inserted row vanished")
				      : dberr(st, "enqueue: reading seq");
		goto out;
	}
	if (seq_out)
		*seq_out = (uint64_t)sqlite3_column_int64(s, 0);
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_SEQ, s);
	r = tx_close(st, own, r);
	if (r < 0)
		copy_err(st, err, errsz);
	return r;
}

int store_enqueue_copy(struct store *st, const struct msg *m, int64_t now)
{
	sqlite3_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;
	char idb[MSGID_STRLEN];

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!m)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "enqueue_copy: message is missing");
	r = check_msgid(st, &m->id);
	if (r)
		return r;
	msgid_str(&m->id, idb, sizeof idb);
	r = check_body(st, idb, m);
	if (r)
		return r;
	if (m->payload_len > st->max_payload)
		return seterr(st, SEMQ_ERR_TOO_BIG,
			      "%s: payload of %zu bytes is larger than "
			      "max_payload (%zu)",
			      idb, m->payload_len, st->max_payload);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_OUT_COPY);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	bind_id(s, &m->id);
	sqlite3_bind_int64(s, 4, m->type);
	bind_key(s, 5, m);
	sqlite3_bind_int64(s, 6, (sqlite3_int64)m->prev_seq);
	sqlite3_bind_int64(s, 7, m->deliver_at);
	bind_payload(s, 8, m);
	sqlite3_bind_int64(s, 9, m->created_at);
	/* A tombstone is kept as what it is: a cancelled row to deliver. */
	sqlite3_bind_int(s, 10, m->tombstone ? SS_CANCELLED : SS_UNSEND);
	sqlite3_bind_int64(s, 11, now);
	rc = sqlite3_step(s);
	if (rc != SQLITE_DONE) {
		if ((rc & 0xff) == SQLITE_CONSTRAINT)
			r = seterr(st, SEMQ_ERR_INVALID, "%s: %s", idb,
				   sqlite3_errmsg(st->db));
		else
			r = dberr(st, idb);
		goto out;
	}
	if (sqlite3_changes(st->db) == 0) {
		r = seterr(st, SEMQ_DUPLICATE, "%s: already stored", idb);
		goto out;
	}
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_COPY, s);
	return tx_close(st, own, r);
}

/* Next stream with unsent rows after (sd, so); *found = 0 at the end. */
static int next_stream(struct store *st, const char *dest, char *sd, char *so,
		       int *found)
{
	enum q i = dest ? Q_OUT_NEXT_STREAM_DEST : Q_OUT_NEXT_STREAM;
	sqlite3_stmt *s = q_get(st, i);
	char nd[SEMQ_ID_MAX + 1], no[SEMQ_ID_MAX + 1];
	int rc, r = SEMQ_OK;

	*found = 0;
	if (!s)
		return SEMQ_ERR_DB;
	if (dest) {
		sqlite3_bind_text(s, 1, dest, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, so, -1, SQLITE_STATIC);
	} else {
		sqlite3_bind_text(s, 1, sd, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, so, -1, SQLITE_STATIC);
	}
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*found = 1;
		col_text(nd, sizeof nd, s, 0);
		col_text(no, sizeof no, s, 1);
	} else if (rc != SQLITE_DONE) {
		r = dberr(st, "fetch_sendable: listing streams");
	}
	q_put(st, i, s); /* sd and so are bound: overwrite them after */
	if (*found) {
		memcpy(sd, nd, sizeof nd);
		memcpy(so, no, sizeof no);
	}
	return r;
}

static int stream_cmp(const char *d1, const char *o1, const char *d2,
		      const char *o2)
{
	int c = strcmp(d1, d2);

	return c ? c : strcmp(o1, o2);
}

int store_fetch_sendable(struct store *st, const char *dest, int64_t now,
			 unsigned window, unsigned limit, store_out_cb cb,
			 void *ctx)
{
	char cd[SEMQ_ID_MAX + 1] = "", co[SEMQ_ID_MAX + 1] = ""; /* cursor */
	char sd[SEMQ_ID_MAX + 1] = "", so[SEMQ_ID_MAX + 1] = ""; /* stream */
	char ld[SEMQ_ID_MAX + 1] = "", lo[SEMQ_ID_MAX + 1] = ""; /* served */
	sqlite3_stmt *s = NULL;
	unsigned left = limit, n;
	int r = SEMQ_ERR_INTERNAL, found, wrapped = 0, stopped = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "fetch_sendable: callback is missing");
	if (dest) {
		r = check_node(st, "fetch_sendable: dest", dest,
			       SEMQ_ID_MAX + 1);
		if (r)
			return r;
	}
	/* Round robin: begin after the stream served last time. */
	if (!dest || strcmp(dest, st->rr_dest) == 0) {
		memcpy(cd, st->rr_dest, sizeof cd);
		memcpy(co, st->rr_origin, sizeof co);
	}
	memcpy(sd, cd, sizeof sd);
	memcpy(so, co, sizeof so);
	while (left > 0 && !stopped) {
		int64_t inflight;
		unsigned room;
		int rc;

		r = next_stream(st, dest, sd, so, &found);
		if (r)
			goto out;
		if (!found) {
			if (wrapped || (!cd[0] && !co[0]))
				break;
			wrapped = 1;
			sd[0] = so[0] = '\0';
			continue;
		}
		if (wrapped && stream_cmp(sd, so, cd, co) > 0)
			break;

		s = q_get(st, Q_OUT_INFLIGHT);
		if (!s) {
			r = SEMQ_ERR_DB;
			goto out;
		}
		sqlite3_bind_text(s, 1, so, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, sd, -1, SQLITE_STATIC);
		rc = sqlite3_step(s);
		if (rc != SQLITE_ROW) {
			r = dberr(st, "fetch_sendable: counting in flight");
			goto out;
		}
		inflight = sqlite3_column_int64(s, 0);
		q_put(st, Q_OUT_INFLIGHT, s);
		s = NULL;
		room = (int64_t)window > inflight
			       ? (unsigned)((int64_t)window - inflight)
			       : 0;
		if (room > left)
			room = left;
		if (!room)
			continue;

		s = q_get(st, Q_OUT_SENDABLE);
		if (!s) {
			r = SEMQ_ERR_DB;
			goto out;
		}
		sqlite3_bind_text(s, 1, sd, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, so, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 3, now);
		sqlite3_bind_int64(s, 4, room);
		n = 0;
		r = each_out(st, s, cb, ctx, &n, &stopped);
		q_put(st, Q_OUT_SENDABLE, s);
		s = NULL;
		if (r)
			goto out;
		if (n) {
			memcpy(ld, sd, sizeof ld);
			memcpy(lo, so, sizeof lo);
		}
		left -= n < left ? n : left;
	}
	if (ld[0]) {
		memcpy(st->rr_dest, ld, sizeof ld);
		memcpy(st->rr_origin, lo, sizeof lo);
	}
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_INFLIGHT, s);
	return r;
}

/*
 * Why an outbound transition did not apply: no row, or its status.
 * *status gets the row's status (INT_MIN when there is no row).
 */
static int out_declined(struct store *st, const struct msgid *id,
			const char *what, const char *wanted, int *status)
{
	sqlite3_stmt *s = q_get(st, Q_OUT_STATUS);
	char idb[MSGID_STRLEN];
	int rc, r;

	*status = INT_MIN;
	msgid_str(id, idb, sizeof idb);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*status = sqlite3_column_int(s, 0);
		r = seterr(st, SEMQ_DECLINED, "%s: %s: in status %d, not %s",
			   idb, what, *status, wanted);
	} else if (rc == SQLITE_DONE) {
		r = seterr(st, SEMQ_DECLINED, "%s: %s: no such message", idb,
			   what);
	} else {
		r = dberr(st, idb);
	}
	q_put(st, Q_OUT_STATUS, s);
	return r;
}

/*
 * Runs one of the outbound transitions: `i` binds the id as ?1..?3 and
 * a4/a5 (a5_text when `a5_is_text`) as ?4/?5. SEMQ_DECLINED (errmsg says
 * why, *declined_status the status found or INT_MIN when there is no row)
 * when no row was in a status the transition applies to.
 */
static int out_transition(struct store *st, enum q i, const struct msgid *id,
			  int64_t a4, int64_t a5, const char *a5_text,
			  int a5_is_text, const char *what, const char *wanted,
			  int *declined_status)
{
	sqlite3_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0, ds;
	char idb[MSGID_STRLEN];

	if (!declined_status)
		declined_status = &ds;
	*declined_status = INT_MIN;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, i);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	bind_id(s, id);
	sqlite3_bind_int64(s, 4, a4);
	if (a5_is_text)
		bind_text(s, 5, a5_text);
	else
		sqlite3_bind_int64(s, 5, a5);
	rc = sqlite3_step(s);
	q_put(st, i, s);
	s = NULL;
	if (rc != SQLITE_DONE) {
		r = dberr(st, msgid_str(id, idb, sizeof idb));
		goto out;
	}
	if (sqlite3_changes(st->db) == 0) {
		r = out_declined(st, id, what, wanted, declined_status);
		goto out;
	}
	r = SEMQ_OK;
out:
	return tx_close(st, own, r);
}

int store_mark_sent(struct store *st, const struct msgid *id, int64_t now,
		    int64_t query_at)
{
	return out_transition(st, Q_OUT_MARK_SENT, id, now, query_at, NULL, 0,
			      "mark sent", "0", NULL);
}

int store_mark_relay_acked(struct store *st, const struct msgid *id,
			   int64_t now, int64_t query_at)
{
	return out_transition(st, Q_OUT_MARK_RELAY, id, query_at, 0, NULL, 0,
			      "mark relay-acked", "4", NULL);
}

int store_mark_unsent(struct store *st, const struct msgid *id,
		      int64_t retry_at, const char *error)
{
	return out_transition(st, Q_OUT_MARK_UNSENT, id, retry_at, 0, error, 1,
			      "mark unsent", "4 or 6", NULL);
}

int store_mark_confirmed(struct store *st, const struct msgid *id, int result,
			 int64_t now)
{
	if (!st)
		return SEMQ_ERR_INVALID;
	if (result < RES_PROCESSED || result > RES_CANCELLED)
		return seterr(st, SEMQ_ERR_INVALID,
			      "mark confirmed: result %d is not 0..4", result);
	return out_transition(st, Q_OUT_MARK_CONFIRMED, id, result, now, NULL,
			      0, "mark confirmed", "0, 4, 6 or -2", NULL);
}

int store_cancel(struct store *st, const struct msgid *id, int64_t now)
{
	int r, status;

	r = out_transition(st, Q_OUT_CANCEL, id, now, 0, NULL, 0, "cancel",
			   "0, 4 or 6", &status);
	if (r != SEMQ_DECLINED)
		return r;
	if (status == INT_MIN) /* errmsg: no such message */
		return SEMQ_ERR_NOT_FOUND;
	if (status == SS_CANCELLED) /* already cancelled: nothing to do */
		return SEMQ_OK;
	return SEMQ_DECLINED;
}

/* Rows of query i due at `now` (bound as ?1), at most `limit` (?2). */
static int fetch_due(struct store *st, enum q i, const char *what, int64_t now,
		     unsigned limit, store_out_cb cb, void *ctx)
{
	sqlite3_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s: callback is missing",
			      what);
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_int64(s, 1, now);
	sqlite3_bind_int64(s, 2, limit);
	r = each_out(st, s, cb, ctx, NULL, NULL);
	q_put(st, i, s);
	return r;
}

int store_fetch_in_doubt(struct store *st, int64_t now, unsigned limit,
			 store_out_cb cb, void *ctx)
{
	return fetch_due(st, Q_OUT_IN_DOUBT, "fetch_in_doubt", now, limit, cb,
			 ctx);
}

int store_defer(struct store *st, const struct msgid *id, int64_t next_at)
{
	return out_transition(st, Q_OUT_DEFER, id, next_at, 0, NULL, 0, "defer",
			      "4, 6 or unanswered -2", NULL);
}

int store_drop_copy(struct store *st, const struct msgid *id)
{
	return out_transition(st, Q_OUT_DROP_COPY, id, 0, 0, NULL, 0,
			      "drop copy", "a relay copy", NULL);
}

int store_fetch_tombstones(struct store *st, int64_t now, unsigned limit,
			   store_out_cb cb, void *ctx)
{
	return fetch_due(st, Q_OUT_TOMBSTONES, "fetch_tombstones", now, limit,
			 cb, ctx);
}

int store_purge(struct store *st, int64_t now, int64_t retention_ms,
		unsigned limit, unsigned *n_out)
{
	sqlite3_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;

	if (n_out)
		*n_out = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	if (retention_ms < 0)
		return seterr(st, SEMQ_ERR_INVALID,
			      "purge: retention %" PRId64 " ms is negative",
			      retention_ms);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_OUT_PURGE);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	sqlite3_bind_int64(s, 1, now - retention_ms);
	sqlite3_bind_int64(s, 2, limit);
	rc = sqlite3_step(s);
	if (rc != SQLITE_DONE) {
		r = dberr(st, "purge");
		goto out;
	}
	if (n_out)
		*n_out = (unsigned)sqlite3_changes(st->db);
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_PURGE, s);
	return tx_close(st, own, r);
}

/* Keeps `a` and `b` as the row strings of the last *_get (freeing old). */
static void keep_row_strs(struct store *st, char *a, char *b)
{
	free(st->row_str[0]);
	free(st->row_str[1]);
	st->row_str[0] = a;
	st->row_str[1] = b;
}

int store_outbound_get(struct store *st, const struct msgid *id, struct msg *m,
		       struct out_row *row)
{
	sqlite3_stmt *s = NULL;
	char idb[MSGID_STRLEN];
	char *le = NULL;
	int r = SEMQ_ERR_INTERNAL, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!m || !row)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "outbound_get: m and row are required");
	memset(m, 0, sizeof *m);
	r = check_msgid(st, id);
	if (r)
		return r;
	msgid_str(id, idb, sizeof idb);
	s = q_get(st, Q_OUT_GET);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_DONE) {
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "%s: no such outbound message", idb);
		goto out;
	}
	if (rc != SQLITE_ROW) {
		r = dberr(st, idb);
		goto out;
	}
	r = col_out(st, s, m, row, &le);
	if (r) {
		msg_clear(m);
		free(le);
		goto out;
	}
	keep_row_strs(st, le, NULL);
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_GET, s);
	return r;
}

static int check_out_status(struct store *st, int status)
{
	if (status < -99 || status == SS_UNSEND || status == SS_SEND ||
	    status == SS_ACK || status == SS_ACK2 || status == SS_CANCELLED)
		return SEMQ_OK;
	return seterr(st, SEMQ_ERR_INVALID,
		      "tb_0031: status %d is not 0, 4, 6, 100 or -2", status);
}

int store_outbound_list(struct store *st, int status, unsigned limit,
			store_out_cb cb, void *ctx)
{
	enum q i = status < -99 ? Q_OUT_LIST_ALL : Q_OUT_LIST;
	sqlite3_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "outbound_list: callback is missing");
	r = check_out_status(st, status);
	if (r)
		return r;
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	if (i == Q_OUT_LIST_ALL) {
		sqlite3_bind_int64(s, 1, limit);
	} else {
		sqlite3_bind_int(s, 1, status);
		sqlite3_bind_int64(s, 2, limit);
	}
	r = each_out(st, s, cb, ctx, NULL, NULL);
	q_put(st, i, s);
	return r;
}

/* ---- receiver side: tb_0030, watermarks ----------------------------------- */

/* The stream's watermark; *known = 0 when it has no semq_stream_in row. */
static int stream_w(struct store *st, const char *origin, const char *dest,
		    uint64_t *w, int *known)
{
	sqlite3_stmt *s = q_get(st, Q_W_GET);
	int rc, r = SEMQ_OK;

	*w = 0;
	if (known)
		*known = 0;
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, dest, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*w = (uint64_t)sqlite3_column_int64(s, 0);
		if (known)
			*known = 1;
	} else if (rc != SQLITE_DONE) {
		r = dberr(st, "reading a watermark");
	}
	q_put(st, Q_W_GET, s);
	return r;
}

/* Is (origin, dest, seq) in tb_0030? *result gets its result. */
static int in_get(struct store *st, const char *origin, const char *dest,
		  uint64_t seq, int *found, int *result)
{
	sqlite3_stmt *s = q_get(st, Q_IN_GET);
	int rc, r = SEMQ_OK;

	*found = 0;
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)seq);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*found = 1;
		if (result)
			*result = sqlite3_column_int(s, 0);
	} else if (rc != SQLITE_DONE) {
		r = dberr(st, "reading tb_0030");
	}
	q_put(st, Q_IN_GET, s);
	return r;
}

/* Inserts the tb_0030 row; SEMQ_DUPLICATE when the unique index has it. */
static int in_insert(struct store *st, const struct msg *m, const char *via,
		     unsigned need, int64_t now, int result, const char *idb)
{
	sqlite3_stmt *s = q_get(st, Q_IN_INSERT);
	int rc, r = SEMQ_OK;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, &m->id);
	sqlite3_bind_int64(s, 4, m->type);
	bind_key(s, 5, m);
	sqlite3_bind_int64(s, 6, (sqlite3_int64)m->prev_seq);
	sqlite3_bind_int64(s, 7, now);
	bind_text(s, 8, via);
	sqlite3_bind_int(s, 9, result);
	sqlite3_bind_int(s, 10, (int)need);
	rc = sqlite3_step(s);
	if (rc == SQLITE_CONSTRAINT_UNIQUE ||
	    rc == SQLITE_CONSTRAINT_PRIMARYKEY)
		r = seterr(st, SEMQ_DUPLICATE, "%s: already received", idb);
	else if (rc != SQLITE_DONE)
		r = dberr(st, idb);
	q_put(st, Q_IN_INSERT, s);
	return r;
}

static int in_set_result(struct store *st, const struct msgid *id, int result,
			 const char *idb)
{
	sqlite3_stmt *s = q_get(st, Q_IN_SET_RESULT);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	sqlite3_bind_int(s, 4, result);
	rc = sqlite3_step(s);
	q_put(st, Q_IN_SET_RESULT, s);
	return rc == SQLITE_DONE ? SEMQ_OK : dberr(st, idb);
}

/* A new tb_0033 entry for m. */
static int redo_insert(struct store *st, const struct msg *m, int status,
		       int tries, int level, int64_t next_at,
		       const char *last_error, int64_t now, const char *idb)
{
	sqlite3_stmt *s = q_get(st, Q_REDO_INSERT);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, &m->id);
	sqlite3_bind_int64(s, 4, m->type);
	bind_key(s, 5, m);
	sqlite3_bind_int64(s, 6, (sqlite3_int64)m->prev_seq);
	sqlite3_bind_int64(s, 7, m->deliver_at);
	sqlite3_bind_int64(s, 8, m->created_at);
	bind_payload(s, 9, m);
	sqlite3_bind_int(s, 10, status);
	sqlite3_bind_int(s, 11, tries);
	sqlite3_bind_int(s, 12, level);
	sqlite3_bind_int64(s, 13, next_at);
	bind_text(s, 14, last_error);
	sqlite3_bind_int64(s, 15, now);
	rc = sqlite3_step(s);
	q_put(st, Q_REDO_INSERT, s);
	return rc == SQLITE_DONE ? SEMQ_OK : dberr(st, idb);
}

/* Does the key have an entry with one of the statuses of query `i`? */
static int redo_key_has(struct store *st, enum q i, const char *origin,
			const char *dest, const char *key, int *yes)
{
	sqlite3_stmt *s = q_get(st, i);
	int rc, r = SEMQ_OK;

	*yes = 0;
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, dest, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*yes = 1;
	else if (rc != SQLITE_DONE)
		r = dberr(st, "reading tb_0033 by key");
	q_put(st, i, s);
	return r;
}

/* After a head finished: the lowest waiting entry of the key becomes
 * pending (at its deliver_at when that is later), unless a head remains. */
static int redo_release_next(struct store *st, const char *origin,
			     const char *dest, const char *key, int64_t now)
{
	sqlite3_stmt *s = NULL;
	int64_t id = 0, at = now;
	int r = SEMQ_ERR_INTERNAL, rc, head;

	r = redo_key_has(st, Q_REDO_KEY_HEAD, origin, dest, key, &head);
	if (r || head)
		return r;
	s = q_get(st, Q_REDO_KEY_NEXT);
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, dest, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		id = sqlite3_column_int64(s, 0);
		if (sqlite3_column_int64(s, 1) > at)
			at = sqlite3_column_int64(s, 1);
	} else if (rc != SQLITE_DONE) {
		r = dberr(st, "reading tb_0033 by key");
		goto out;
	}
	q_put(st, Q_REDO_KEY_NEXT, s);
	s = NULL;
	if (!id) {
		r = SEMQ_OK;
		goto out;
	}
	s = q_get(st, Q_REDO_RELEASE);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, at);
	sqlite3_bind_int64(s, 3, now);
	rc = sqlite3_step(s);
	q_put(st, Q_REDO_RELEASE, s);
	s = NULL;
	r = rc == SQLITE_DONE ? SEMQ_OK
			      : dberr(st, "releasing a waiting entry");
out:
	q_put(st, Q_REDO_KEY_NEXT, s);
	return r;
}

/*
 * apply() inside SAVEPOINT semq_apply. *verdict gets OK, RETRY or PERMANENT
 * (anything else counts as PERMANENT); on a failure the plugin's writes are
 * rolled back and perr holds its reason (never empty).
 */
static int apply_sp(struct store *st, const struct msg *m, unsigned tries,
		    store_apply_fn apply, void *ctx, char *perr, size_t perrsz,
		    int *verdict, const char *idb)
{
	int v;

	if (q_exec(st, Q_SP, "savepoint") != SEMQ_OK)
		return SEMQ_ERR_DB;
	perr[0] = '\0';
	v = apply(ctx, m, tries, &st->tx, perr, perrsz);
	perr[perrsz - 1] = '\0';
	if (sqlite3_get_autocommit(st->db) &&
	    rc_full(sqlite3_extended_errcode(st->db)))
		return dberr(st, idb); /* SQLite ended it: the disk is full */
	if (sqlite3_get_autocommit(st->db))
		return seterr(st, SEMQ_ERR_PLUGIN,
			      "%s: the transaction ended inside the plugin (a "
			      "plugin must not BEGIN, COMMIT or ROLLBACK)",
			      idb);
	if (v == SEMQ_PLUGIN_OK) {
		*verdict = v;
		return q_exec(st, Q_SP_RELEASE, "release savepoint");
	}
	if (v != SEMQ_PLUGIN_RETRY)
		v = SEMQ_PLUGIN_PERMANENT;
	if (!perr[0])
		snprintf(perr, perrsz,
			 "the plugin returned %s without a reason",
			 v == SEMQ_PLUGIN_RETRY ? "RETRY" : "PERMANENT");
	*verdict = v;
	if (q_exec(st, Q_SP_UNDO, "rollback to savepoint") != SEMQ_OK)
		return SEMQ_ERR_DB;
	return q_exec(st, Q_SP_RELEASE, "release savepoint");
}

static int64_t level_ms(const struct store *st, int level)
{
	size_t i = level < 0 ? 0 : (size_t)level;

	return st->levels[i < st->n_levels ? i : st->n_levels - 1];
}

static int check_receive(struct store *st, const struct msg *m, const char *via,
			 unsigned need, store_apply_fn apply)
{
	char idb[MSGID_STRLEN];
	int r;

	if (!m)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "receive: message is missing");
	r = check_msgid(st, &m->id);
	if (r)
		return r;
	msgid_str(&m->id, idb, sizeof idb);
	r = check_body(st, idb, m);
	if (r)
		return r;
	if (m->prev_seq >= m->id.seq)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: prev_seq %" PRIu64 " is not below its seq",
			      idb, m->prev_seq);
	if (via && !semq_id_valid(via))
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: via '%.64s' is not a node id", idb, via);
	if (!(need & CONFIRM_ORIGIN) || (need & ~3u))
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: confirm_need %u is not 1 or 3", idb, need);
	if (!apply)
		return seterr(st, SEMQ_ERR_INVALID, "%s: apply is missing",
			      idb);
	return SEMQ_OK;
}

int store_receive(struct store *st, const struct msg *m, const char *via,
		  unsigned confirm_need, int64_t now, store_apply_fn apply,
		  void *ctx, int *result_out, char *err, size_t errsz)
{
	char idb[MSGID_STRLEN] = "";
	char perr[SEMQ_ERRLEN];
	const char *key;
	uint64_t w = 0;
	int r = SEMQ_ERR_INTERNAL, own = 0, res = -1, known, found, busy = 0;
	int v = SEMQ_PLUGIN_OK;

	if (result_out)
		*result_out = -1;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_receive(st, m, via, confirm_need, apply);
	if (r)
		goto out;
	msgid_str(&m->id, idb, sizeof idb);
	key = key_of(m);
	r = tx_open(st, &own);
	if (r)
		goto out;

	/* Seen before: at or below the watermark, or in tb_0030. */
	r = stream_w(st, m->id.origin, m->id.dest, &w, &known);
	if (r)
		goto out;
	found = m->id.seq <= w;
	if (!found) {
		r = in_get(st, m->id.origin, m->id.dest, m->id.seq, &found,
			   NULL);
		if (r)
			goto out;
	}
	if (found) {
		res = RES_DUPLICATE;
		r = seterr(st, SEMQ_DUPLICATE, "%s: already received", idb);
		goto out;
	}
	/* The predecessor with the same key must have been recorded. */
	if (m->prev_seq > 0 && m->prev_seq > w) {
		r = in_get(st, m->id.origin, m->id.dest, m->prev_seq, &found,
			   NULL);
		if (r)
			goto out;
		if (!found) {
			r = seterr(st, SEMQ_AGAIN,
				   "%s: predecessor seq %" PRIu64
				   " not received yet",
				   idb, m->prev_seq);
			goto out;
		}
	}
	if (!m->tombstone && key) {
		r = redo_key_has(st, Q_REDO_KEY_BUSY, m->id.origin, m->id.dest,
				 key, &busy);
		if (r)
			goto out;
	}

	if (m->tombstone)
		res = RES_CANCELLED;
	else if (m->deliver_at > now)
		res = RES_SCHEDULED;
	else if (busy)
		res = RES_REDO;
	else
		res = RES_PROCESSED;
	r = in_insert(st, m, via, confirm_need, now, res, idb);
	if (r) {
		if (r == SEMQ_DUPLICATE)
			res = RES_DUPLICATE;
		goto out;
	}
	if (!known) {
		sqlite3_stmt *s = q_get(st, Q_W_CREATE);
		int rc;

		if (!s) {
			r = SEMQ_ERR_DB;
			goto out;
		}
		sqlite3_bind_text(s, 1, m->id.origin, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, m->id.dest, -1, SQLITE_STATIC);
		rc = sqlite3_step(s);
		q_put(st, Q_W_CREATE, s);
		if (rc != SQLITE_DONE) {
			r = dberr(st, idb);
			goto out;
		}
	}

	switch (res) {
	case RES_CANCELLED: r = SEMQ_OK; goto out;
	case RES_SCHEDULED:
		/* Due at deliver_at; behind an unfinished entry of its key it
		 * waits first (released no earlier than deliver_at). */
		r = redo_insert(st, m, busy ? RS_WAITING : RS_PENDING, 0, 0,
				m->deliver_at, NULL, now, idb);
		goto out;
	case RES_REDO:
		r = redo_insert(st, m, RS_WAITING, 0, 0, m->deliver_at, NULL,
				now, idb);
		goto out;
	default: break;
	}

	r = apply_sp(st, m, 0, apply, ctx, perr, sizeof perr, &v, idb);
	if (r)
		goto out;
	if (v == SEMQ_PLUGIN_OK)
		goto out;
	res = RES_REDO;
	r = in_set_result(st, &m->id, RES_REDO, idb);
	if (r)
		goto out;
	if (v == SEMQ_PLUGIN_RETRY && 1 < st->max_tries)
		r = redo_insert(st, m, RS_PENDING, 1, 1, now + level_ms(st, 0),
				perr, now, idb);
	else
		r = redo_insert(st, m, RS_DEAD, 1, 0, now, perr, now, idb);
	if (!r)
		seterr(st, SEMQ_OK, "%s: %s", idb, perr);
out:
	r = tx_close(st, own, r);
	if (r < 0)
		res = -1;
	if (result_out)
		*result_out = res;
	/* On an error, and on a plugin failure (why it went to redo). */
	if (r < 0 || (r == SEMQ_OK && v != SEMQ_PLUGIN_OK))
		copy_err(st, err, errsz);
	return r;
}

int store_lookup_received(struct store *st, const struct msgid *id,
			  int *received, int *result)
{
	uint64_t w;
	int r, found = 0, res = -1;

	if (received)
		*received = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	r = in_get(st, id->origin, id->dest, id->seq, &found, &res);
	if (r)
		return r;
	if (!found) {
		r = stream_w(st, id->origin, id->dest, &w, NULL);
		if (r)
			return r;
		if (id->seq <= w) {
			found = 1;
			res = RES_DUPLICATE;
		}
	}
	if (received)
		*received = found;
	if (found && result)
		*result = res;
	return SEMQ_OK;
}

int store_ack_response(struct store *st, const struct msgid *id, unsigned bit,
		       int *now_ok)
{
	sqlite3_stmt *s = NULL;
	char idb[MSGID_STRLEN];
	int r = SEMQ_ERR_INTERNAL, rc, own = 0, ok = -1;

	if (now_ok)
		*now_ok = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = check_msgid(st, id);
	if (r)
		return r;
	msgid_str(id, idb, sizeof idb);
	if (bit != CONFIRM_ORIGIN && bit != CONFIRM_RELAY)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: confirm bit %u is not 1 or 2", idb, bit);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_IN_ACK);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	bind_id(s, id);
	sqlite3_bind_int(s, 4, (int)bit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW)
		ok = sqlite3_column_int(s, 0);
	if (rc != SQLITE_DONE) {
		r = dberr(st, idb);
		goto out;
	}
	if (ok < 0) {
		r = seterr(st, SEMQ_DECLINED,
			   "%s: no received row (compacted or never received)",
			   idb);
		goto out;
	}
	if (now_ok)
		*now_ok = ok == AS_OK;
	r = SEMQ_OK;
out:
	q_put(st, Q_IN_ACK, s);
	return tx_close(st, own, r);
}

int store_fetch_unacked(struct store *st, int64_t before, unsigned limit,
			store_unacked_cb cb, void *ctx)
{
	sqlite3_stmt *s;
	int r = SEMQ_OK, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "fetch_unacked: callback is missing");
	s = q_get(st, Q_IN_UNACKED);
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_int64(s, 1, before);
	sqlite3_bind_int64(s, 2, limit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct msgid id;
		char via[SEMQ_ID_MAX + 1];
		int has_via = sqlite3_column_type(s, 6) != SQLITE_NULL;

		memset(&id, 0, sizeof id);
		col_text(id.origin, sizeof id.origin, s, 0);
		col_text(id.dest, sizeof id.dest, s, 1);
		id.seq = (uint64_t)sqlite3_column_int64(s, 2);
		col_text(via, sizeof via, s, 6);
		if (cb(ctx, &id, sqlite3_column_int(s, 3),
		       (unsigned)sqlite3_column_int(s, 4),
		       (unsigned)sqlite3_column_int(s, 5),
		       has_via ? via : NULL))
			break;
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = dberr(st, "fetch_unacked");
	q_put(st, Q_IN_UNACKED, s);
	return r;
}

int store_received_list(struct store *st, const char *origin, unsigned limit,
			store_recv_cb cb, void *ctx)
{
	enum q i = origin ? Q_IN_LIST : Q_IN_LIST_ALL;
	sqlite3_stmt *s;
	int r = SEMQ_OK, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "received_list: callback is missing");
	if (origin) {
		r = check_node(st, "origin", origin, SEMQ_ID_MAX + 1);
		if (r)
			return r;
	}
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	if (origin) {
		sqlite3_bind_text(s, 1, origin, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, limit);
	} else {
		sqlite3_bind_int64(s, 1, limit);
	}
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		/* Copied out first: the callback may use the store. */
		char key[SEMQ_KEY_MAX + 1], via[SEMQ_ID_MAX + 1];
		struct recv_row row;

		memset(&row, 0, sizeof row);
		col_text(row.id.origin, sizeof row.id.origin, s, 0);
		col_text(row.id.dest, sizeof row.id.dest, s, 1);
		row.id.seq = (uint64_t)sqlite3_column_int64(s, 2);
		row.type = (uint32_t)sqlite3_column_int64(s, 3);
		col_text(key, sizeof key, s, 4);
		row.key = sqlite3_column_type(s, 4) == SQLITE_NULL ? NULL : key;
		row.prev_seq = (uint64_t)sqlite3_column_int64(s, 5);
		row.received_at = sqlite3_column_int64(s, 6);
		col_text(via, sizeof via, s, 7);
		row.via = sqlite3_column_type(s, 7) == SQLITE_NULL ? NULL : via;
		row.result = sqlite3_column_int(s, 8);
		row.ack_status = sqlite3_column_int(s, 9);
		row.confirm_need = (unsigned)sqlite3_column_int(s, 10);
		row.confirm_got = (unsigned)sqlite3_column_int(s, 11);
		row.rowid = sqlite3_column_int64(s, 12);
		if (cb(ctx, &row))
			break;
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = dberr(st, "reading tb_0030");
	q_put(st, i, s);
	return r;
}

struct stream_w {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
	uint64_t w;
};

/* Every inbound stream and its watermark: *out (caller frees), *n. */
static int streams_load(struct store *st, struct stream_w **out, size_t *n)
{
	struct stream_w *v = NULL, *nv;
	size_t cap = 0, len = 0;
	sqlite3_stmt *s = q_get(st, Q_W_LIST);
	int rc, r = SEMQ_OK;

	*out = NULL;
	*n = 0;
	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (len == cap) {
			cap = cap ? 2 * cap : 16;
			nv = realloc(v, cap * sizeof *v);
			if (!nv) {
				r = seterr(st, SEMQ_ERR_NOMEM, "%s",
					   "listing streams: out of memory");
				goto out;
			}
			v = nv;
		}
		col_text(v[len].origin, sizeof v[len].origin, s, 0);
		col_text(v[len].dest, sizeof v[len].dest, s, 1);
		v[len].w = (uint64_t)sqlite3_column_int64(s, 2);
		len++;
	}
	if (rc != SQLITE_DONE)
		r = dberr(st, "listing streams");
out:
	q_put(st, Q_W_LIST, s);
	if (r) {
		free(v);
		return r;
	}
	*out = v;
	*n = len;
	return SEMQ_OK;
}

/* Moves one stream's watermark over its run of AS_OK rows, compacting. */
static int advance_one(struct store *st, const struct stream_w *sw,
		       unsigned *compacted)
{
	sqlite3_stmt *s = q_get(st, Q_IN_RUN);
	uint64_t nw = sw->w;
	int rc, r = SEMQ_OK;

	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_text(s, 1, sw->origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, sw->dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)sw->w);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((uint64_t)sqlite3_column_int64(s, 0) != nw + 1 ||
		    sqlite3_column_int(s, 1) != AS_OK)
			break;
		nw++;
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = dberr(st, "advancing a watermark");
	q_put(st, Q_IN_RUN, s);
	if (r || nw == sw->w)
		return r;

	s = q_get(st, Q_W_SET);
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_text(s, 1, sw->origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, sw->dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)nw);
	rc = sqlite3_step(s);
	q_put(st, Q_W_SET, s);
	if (rc != SQLITE_DONE)
		return dberr(st, "advancing a watermark");

	s = q_get(st, Q_IN_COMPACT);
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_text(s, 1, sw->origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, sw->dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)sw->w);
	sqlite3_bind_int64(s, 4, (sqlite3_int64)nw);
	rc = sqlite3_step(s);
	q_put(st, Q_IN_COMPACT, s);
	if (rc != SQLITE_DONE)
		return dberr(st, "compacting tb_0030");
	*compacted += (unsigned)sqlite3_changes(st->db);
	return SEMQ_OK;
}

int store_advance_watermarks(struct store *st, unsigned *compacted)
{
	struct stream_w *v = NULL;
	unsigned n = 0;
	size_t len = 0, i;
	int r = SEMQ_ERR_INTERNAL, own = 0;

	if (compacted)
		*compacted = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		goto out;
	r = streams_load(st, &v, &len);
	for (i = 0; !r && i < len; i++)
		r = advance_one(st, &v[i], &n);
	if (!r && compacted)
		*compacted = n;
out:
	free(v);
	return tx_close(st, own, r);
}

int store_watermark(struct store *st, const char *origin, const char *dest,
		    uint64_t *w)
{
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!w)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "watermark: w is NULL");
	*w = 0;
	r = check_node(st, "origin", origin, SEMQ_ID_MAX + 1);
	if (!r)
		r = check_node(st, "dest", dest, SEMQ_ID_MAX + 1);
	if (r)
		return r;
	return stream_w(st, origin, dest, w, NULL);
}

int store_streams_in(struct store *st, store_stream_cb cb, void *ctx)
{
	struct stream_w *v = NULL;
	size_t len = 0, i;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "streams_in: callback is missing");
	r = streams_load(st, &v, &len);
	for (i = 0; !r && i < len; i++)
		if (cb(ctx, v[i].origin, v[i].dest, v[i].w))
			break;
	free(v);
	return r;
}

/* ---- redo queue: tb_0033 -------------------------------------------------- */

/* Loads entry `id`; strs get its last_error and discard_reason (caller
 * frees both and msg_clear()s m). SEMQ_ERR_NOT_FOUND when there is none. */
static int redo_load(struct store *st, int64_t id, struct msg *m,
		     struct redo_row *row, char **strs)
{
	sqlite3_stmt *s = q_get(st, Q_REDO_GET);
	int rc, r;

	memset(m, 0, sizeof *m);
	strs[0] = strs[1] = NULL;
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		r = col_redo(st, s, m, row, strs);
	else if (rc == SQLITE_DONE)
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "redo %" PRId64 ": no such entry", id);
	else
		r = dberr(st, "reading tb_0033");
	q_put(st, Q_REDO_GET, s);
	return r;
}

static const char *redo_status_name(int status)
{
	switch (status) {
	case RS_PENDING: return "pending";
	case RS_WAITING: return "waiting";
	case RS_DONE: return "done";
	case RS_DEAD: return "dead";
	case RS_DISCARDED: return "discarded";
	}
	return "unknown";
}

int store_redo_due(struct store *st, int64_t now, unsigned limit,
		   store_redo_cb cb, void *ctx)
{
	sqlite3_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_due: callback is missing");
	s = q_get(st, Q_REDO_DUE);
	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_int64(s, 1, now);
	sqlite3_bind_int64(s, 2, limit);
	r = each_redo(st, s, cb, ctx);
	q_put(st, Q_REDO_DUE, s);
	return r;
}

int store_redo_next_due(struct store *st, int64_t *at)
{
	sqlite3_stmt *s;
	int r, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!at)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_next_due: at is NULL");
	s = q_get(st, Q_REDO_NEXT_DUE);
	if (!s)
		return SEMQ_ERR_DB;
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW)
		r = dberr(st, "redo_next_due");
	else if (sqlite3_column_type(s, 0) == SQLITE_NULL)
		r = seterr(st, SEMQ_DECLINED, "%s", "no pending redo entry");
	else {
		*at = sqlite3_column_int64(s, 0);
		r = SEMQ_OK;
	}
	q_put(st, Q_REDO_NEXT_DUE, s);
	return r;
}

static int redo_update(struct store *st, int64_t id, int status, int tries,
		       int level, int64_t next_at, const char *last_error,
		       int64_t now)
{
	sqlite3_stmt *s = q_get(st, Q_REDO_UPDATE);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int(s, 2, status);
	sqlite3_bind_int(s, 3, tries);
	sqlite3_bind_int(s, 4, level);
	sqlite3_bind_int64(s, 5, next_at);
	bind_text(s, 6, last_error);
	sqlite3_bind_int64(s, 7, now);
	rc = sqlite3_step(s);
	q_put(st, Q_REDO_UPDATE, s);
	return rc == SQLITE_DONE ? SEMQ_OK : dberr(st, "updating tb_0033");
}

int store_redo_run(struct store *st, int64_t id, int64_t now,
		   store_apply_fn apply, void *ctx, int *status_out)
{
	struct msg m;
	struct redo_row row;
	char *strs[2] = {NULL, NULL};
	char idb[MSGID_STRLEN], perr[SEMQ_ERRLEN];
	int r = SEMQ_ERR_INTERNAL, own = 0, v, tries, status, level;
	int64_t next_at;

	memset(&m, 0, sizeof m);
	if (!st)
		return SEMQ_ERR_INVALID;
	if (!apply)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_run: apply is missing");
	r = tx_open(st, &own);
	if (r)
		goto out;
	r = redo_load(st, id, &m, &row, strs);
	if (r)
		goto out;
	if (row.status != RS_PENDING) {
		r = seterr(st, SEMQ_DECLINED,
			   "redo %" PRId64 ": %s, not pending", id,
			   redo_status_name(row.status));
		goto out;
	}
	/* The table, not the caller's memory, says when an entry is due: a
	 * delayed message never runs before its deliver_at. */
	if (row.next_attempt_at > now) {
		r = seterr(st, SEMQ_DECLINED,
			   "redo %" PRId64 ": not due until %" PRId64, id,
			   row.next_attempt_at);
		goto out;
	}
	msgid_str(&m.id, idb, sizeof idb);
	r = apply_sp(st, &m, (unsigned)row.tries, apply, ctx, perr, sizeof perr,
		     &v, idb);
	if (r)
		goto out;
	tries = row.tries + 1;
	level = row.level;
	next_at = row.next_attempt_at;
	if (v == SEMQ_PLUGIN_OK) {
		status = RS_DONE;
	} else if (v == SEMQ_PLUGIN_RETRY && (unsigned)tries < st->max_tries) {
		status = RS_PENDING;
		next_at = now + level_ms(st, level);
		level++;
	} else {
		status = RS_DEAD;
	}
	r = redo_update(st, id, status, tries, level, next_at,
			status == RS_DONE ? NULL : perr, now);
	if (!r && status == RS_DONE && key_of(&m))
		r = redo_release_next(st, m.id.origin, m.id.dest, m.key, now);
	if (r)
		goto out;
	if (status_out)
		*status_out = status;
	r = SEMQ_OK;
out:
	msg_clear(&m);
	free(strs[0]);
	free(strs[1]);
	return tx_close(st, own, r);
}

static int check_redo_status(struct store *st, int status)
{
	if (status < -99 || status == RS_PENDING || status == RS_WAITING ||
	    status == RS_DONE || status == RS_DEAD || status == RS_DISCARDED)
		return SEMQ_OK;
	return seterr(st, SEMQ_ERR_INVALID,
		      "tb_0033: status %d is not 0, 1, 2, -1 or -2", status);
}

int store_redo_list(struct store *st, int status, unsigned limit,
		    store_redo_cb cb, void *ctx)
{
	enum q i = status < -99 ? Q_REDO_LIST_ALL : Q_REDO_LIST;
	sqlite3_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_list: callback is missing");
	r = check_redo_status(st, status);
	if (r)
		return r;
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	if (i == Q_REDO_LIST_ALL) {
		sqlite3_bind_int64(s, 1, limit);
	} else {
		sqlite3_bind_int(s, 1, status);
		sqlite3_bind_int64(s, 2, limit);
	}
	r = each_redo(st, s, cb, ctx);
	q_put(st, i, s);
	return r;
}

int store_redo_get(struct store *st, int64_t id, struct msg *m,
		   struct redo_row *row)
{
	char *strs[2];
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!m || !row)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_get: m and row are required");
	r = redo_load(st, id, m, row, strs);
	if (r) {
		msg_clear(m);
		free(strs[0]);
		free(strs[1]);
		return r;
	}
	keep_row_strs(st, strs[0], strs[1]);
	return SEMQ_OK;
}

int store_redo_retry(struct store *st, int64_t id, int64_t now)
{
	sqlite3_stmt *s = NULL;
	struct msg m;
	struct redo_row row;
	char *strs[2] = {NULL, NULL};
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;

	memset(&m, 0, sizeof m);
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_REDO_RETRY);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, now);
	rc = sqlite3_step(s);
	q_put(st, Q_REDO_RETRY, s);
	if (rc != SQLITE_DONE) {
		r = dberr(st, "redo retry");
		goto out;
	}
	if (sqlite3_changes(st->db) == 0) {
		r = redo_load(st, id, &m, &row, strs);
		if (!r)
			r = seterr(st, SEMQ_DECLINED,
				   "redo %" PRId64 ": %s, not dead", id,
				   redo_status_name(row.status));
		goto out;
	}
	r = SEMQ_OK;
out:
	msg_clear(&m);
	free(strs[0]);
	free(strs[1]);
	return tx_close(st, own, r);
}

int store_redo_retry_all_dead(struct store *st, int64_t now, unsigned *n_out)
{
	sqlite3_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;

	if (n_out)
		*n_out = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, Q_REDO_RETRY_ALL);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	sqlite3_bind_int64(s, 1, now);
	rc = sqlite3_step(s);
	if (rc != SQLITE_DONE) {
		r = dberr(st, "redo retry all dead");
		goto out;
	}
	if (n_out)
		*n_out = (unsigned)sqlite3_changes(st->db);
	r = SEMQ_OK;
out:
	q_put(st, Q_REDO_RETRY_ALL, s);
	return tx_close(st, own, r);
}

int store_redo_discard(struct store *st, int64_t id, const char *reason,
		       int64_t now)
{
	sqlite3_stmt *s = NULL;
	struct msg m;
	struct redo_row row;
	char *strs[2] = {NULL, NULL};
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;

	memset(&m, 0, sizeof m);
	if (!st)
		return SEMQ_ERR_INVALID;
	if (!reason || !reason[0])
		return seterr(st, SEMQ_ERR_INVALID,
			      "redo %" PRId64 ": discard needs a reason", id);
	r = tx_open(st, &own);
	if (r)
		goto out;
	r = redo_load(st, id, &m, &row, strs);
	if (r)
		goto out;
	if (row.status != RS_PENDING && row.status != RS_WAITING &&
	    row.status != RS_DEAD) {
		r = seterr(st, SEMQ_DECLINED,
			   "redo %" PRId64 ": %s, cannot be discarded", id,
			   redo_status_name(row.status));
		goto out;
	}
	s = q_get(st, Q_REDO_DISCARD);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_text(s, 2, reason, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, now);
	rc = sqlite3_step(s);
	q_put(st, Q_REDO_DISCARD, s);
	s = NULL;
	if (rc != SQLITE_DONE) {
		r = dberr(st, "redo discard");
		goto out;
	}
	r = key_of(&m)
		    ? redo_release_next(st, m.id.origin, m.id.dest, m.key, now)
		    : SEMQ_OK;
out:
	msg_clear(&m);
	free(strs[0]);
	free(strs[1]);
	return tx_close(st, own, r);
}

/* ---- status --------------------------------------------------------------- */

static int stats_of(struct store *st, enum q i, const char *table,
		    store_stat_cb cb, void *ctx, int *stopped)
{
	sqlite3_stmt *s = q_get(st, i);
	int rc, r = SEMQ_OK;

	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		char origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];
		struct stat_row sr;

		col_text(origin, sizeof origin, s, 0);
		col_text(dest, sizeof dest, s, 1);
		sr.table = table;
		sr.origin = origin;
		sr.dest = dest;
		sr.status = sqlite3_column_int(s, 2);
		sr.count = sqlite3_column_int64(s, 3);
		sr.oldest = sqlite3_column_int64(s, 4);
		if (cb(ctx, &sr)) {
			*stopped = 1;
			break;
		}
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = dberr(st, table);
	q_put(st, i, s);
	return r;
}

int store_stats(struct store *st, store_stat_cb cb, void *ctx)
{
	int r, stopped = 0;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "stats: callback is missing");
	r = stats_of(st, Q_STAT_OUT, "tb_0031", cb, ctx, &stopped);
	if (!r && !stopped)
		r = stats_of(st, Q_STAT_IN, "tb_0030", cb, ctx, &stopped);
	if (!r && !stopped)
		r = stats_of(st, Q_STAT_REDO, "tb_0033", cb, ctx, &stopped);
	return r;
}
