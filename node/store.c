/* SPDX-License-Identifier: MIT */
/*
 * The store: the node's persistent state behind node/store.h — opening and
 * migrating the database, the outbound queue tb_0031, the received record
 * tb_0030 with its per-stream watermarks in semq_stream_in, and the redo
 * queue tb_0033 (schema: db/0001_init.sql, and db/postgresql/ for
 * PostgreSQL). It runs on the SQL driver of node/db.h: a SQLite file (the
 * default) or a PostgreSQL database (a postgresql:// URL) that several
 * instances of one node may share.
 *
 * DESIGN
 *  - One connection, one thread. Every statement is written once, with ?N
 *    parameters, prepared once on first use and reused (db_reset right after
 *    each use, so no statement keeps a read transaction open). Where the
 *    dialects differ, q_pg[] holds the PostgreSQL text (NULL: the same as
 *    q_sql[]). A callback that re-enters the store while a cached statement
 *    is still stepping gets a private copy of that statement, finalised
 *    after use.
 *  - Transactions: store_begin() is BEGIN IMMEDIATE on SQLite and BEGIN
 *    (READ COMMITTED) on PostgreSQL; a mutating call made outside a batch
 *    opens and closes its own. Callers act on results (acknowledgements)
 *    only after the commit that makes them true. On PostgreSQL a failed
 *    statement aborts the whole transaction, so after one the batch can
 *    only be rolled back (store_commit refuses it).
 *  - Exactly once: a message is a duplicate when its seq is at or below the
 *    stream's watermark W (semq_stream_in.confirmed_through) or its id is in
 *    tb_0030 (unique idx_0030_1; the insert is ON CONFLICT DO NOTHING, so a
 *    copy recorded by another connection meanwhile is a duplicate too, never
 *    a failed batch). Every seq <= W is AS_OK and its tb_0030 row is gone; W
 *    only moves over a contiguous run of AS_OK rows, and the rows it passes
 *    are deleted in the same transaction.
 *  - Several instances on one PostgreSQL database: store_receive(),
 *    store_redo_run() and store_redo_discard() first lock their stream's row
 *    in semq_stream_in (created if missing, then SELECT ... FOR UPDATE) and
 *    hold it to the end of the transaction, so one stream is worked on by
 *    one instance at a time: duplicate checks, key order, prev_seq checks and
 *    redo heads see everything the other instances committed. A redo entry's
 *    status is read again under that lock (another instance may have run
 *    it). store_advance_watermarks() takes a stream's row FOR UPDATE SKIP
 *    LOCKED and leaves a busy stream for later: it never waits. The outbound
 *    transitions are conditional UPDATEs (... AND status = 0) and need no
 *    lock. On SQLite all of this is a no-op: one writer at a time already.
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
 *  - A lost PostgreSQL connection fails the call that saw it; the next
 *    transaction (store_begin, or a call outside a batch) connects again
 *    first.
 *  - The store never reads a clock: `now` is a parameter. (applied_at of a
 *    migration and a created_at left empty come from the database's clock.)
 */
#include "store.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "db.h"
#include "migrations.h"

#define DEFAULT_MAX_PAYLOAD ((size_t)16 * 1024 * 1024)
#define DEFAULT_MAX_TRIES 9
#define STORE_ERRMAX 1024
#define LOCKS_MAX 16 /* streams remembered as locked in one transaction */
/* pg_advisory_xact_lock key of migrations and the node id check ('SEMQ'). */
#define MIGRATE_LOCK "1397050705"

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
/* PostgreSQL sorts text by the database's collation; node ids are compared
 * byte by byte (as SQLite and strcmp do), whatever the cluster's locale. */
#define BYTES " COLLATE \"C\""

/*
 * Every statement the store runs, prepared once on first use.
 *
 * A status test on a path taken per message is a range, not an IN list of
 * three or more constants: SQLite evaluates such a list through an
 * ephemeral b-tree it builds and frees on every execution (measured: a third
 * of a single-row UPDATE). Over the status domains of the CHECK constraints
 * (tb_0031: 0, 4, 6, 100, -2; tb_0033: 0, 1, 2, -1, -2) the ranges are the
 * same sets: `BETWEEN -1 AND 1` is pending, waiting or dead; `<> 100` is
 * anything unconfirmed; `BETWEEN 0 AND 6` is unsent or in flight.
 */
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
	Q_W_LOCK,      /* PostgreSQL only */
	Q_W_LOCK_SKIP, /* PostgreSQL only */
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
	Q_REDO_PURGE,
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
	/* A copy recorded meanwhile by another connection (an instance that
	 * does not hold the stream's lock) is a duplicate, not an error that
	 * would abort the batch. */
	[Q_IN_INSERT] =
		"INSERT INTO tb_0030(origin, dest, seq, type, msg_key,"
		" prev_seq, received_at, via, result, ack_status,"
		" confirm_need, confirm_got)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10, 0)"
		" ON CONFLICT (origin, dest, seq) DO NOTHING",
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
			    " AND status BETWEEN -1 AND 1 LIMIT 1",
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
	/* A discarded entry will not run: its next_attempt_at is no later
	 * than the discard, so that the purge's range finds it. */
	[Q_REDO_DISCARD] = "UPDATE tb_0033 SET status = -2,"
			   " discard_reason = ?2, updated_at = ?3,"
			   " next_attempt_at = CASE WHEN next_attempt_at > ?3"
			   " THEN ?3 ELSE next_attempt_at END"
			   " WHERE id = ?1 AND status BETWEEN -1 AND 1",
	/* Done and discarded entries finished before ?1: next_attempt_at is
	 * at or before the finish (a run is never early), so the range on
	 * idx_0033_due bounds the scan. */
	[Q_REDO_PURGE] =
		"DELETE FROM tb_0033 WHERE id IN (SELECT id FROM tb_0033"
		" WHERE (status = 2 OR status = -2) AND next_attempt_at < ?1"
		" AND updated_at < ?1 LIMIT ?2)",

	/* The trigger fills seq after the insert (SQLite: an AFTER trigger,
	 * which RETURNING does not see): read it back by id. */
	[Q_OUT_INSERT] = "INSERT INTO tb_0031(dest, type, msg_key, payload,"
			 " deliver_at, created_at)"
			 " VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
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
				 " AND status <> 100",
	[Q_OUT_CANCEL] = "UPDATE tb_0031 SET status = -2, next_attempt_at = ?4"
			 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			 " AND status BETWEEN 0 AND 6",
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

/*
 * The PostgreSQL texts of the statements that differ (NULL: as q_sql[]): no
 * INDEXED BY or unary + (its planner has statistics), BEGIN, explicit
 * parameter types where one parameter meets columns and literals of
 * different types, byte order for node ids, the stream locks, and a probe
 * value that the server cannot compress away.
 */
static const char *const q_pg[Q__N] = {
	[Q_BEGIN] = "BEGIN ISOLATION LEVEL READ COMMITTED",
	[Q_W_LIST] = "SELECT origin, dest, confirmed_through FROM"
		     " semq_stream_in ORDER BY origin" BYTES ", dest" BYTES,
	[Q_W_LOCK] = "SELECT confirmed_through FROM semq_stream_in"
		     " WHERE origin = ?1 AND dest = ?2 FOR UPDATE",
	[Q_W_LOCK_SKIP] = "SELECT confirmed_through FROM semq_stream_in"
			  " WHERE origin = ?1 AND dest = ?2"
			  " FOR UPDATE SKIP LOCKED",
	[Q_IN_ACK] = "UPDATE tb_0030 SET confirm_got = confirm_got"
		     " | ?4::bigint, ack_status = CASE WHEN ((confirm_got"
		     " | ?4::bigint) & confirm_need) = confirm_need THEN 1"
		     " ELSE ack_status END"
		     " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		     " RETURNING ack_status",
	[Q_OUT_NEXT_STREAM] =
		"SELECT dest, origin FROM (SELECT * FROM (SELECT dest, origin"
		" FROM tb_0031 WHERE status = 0 AND dest = ?1"
		" AND origin" BYTES " > ?2 ORDER BY origin" BYTES
		" LIMIT 1) a UNION ALL SELECT * FROM (SELECT dest, origin"
		" FROM tb_0031 WHERE status = 0 AND dest" BYTES " > ?1"
		" ORDER BY dest" BYTES ", origin" BYTES " LIMIT 1) b) u"
		" ORDER BY dest" BYTES ", origin" BYTES " LIMIT 1",
	[Q_OUT_NEXT_STREAM_DEST] = "SELECT dest, origin FROM tb_0031"
				   " WHERE status = 0 AND dest = ?1"
				   " AND origin" BYTES " > ?2"
				   " ORDER BY origin" BYTES " LIMIT 1",
	[Q_OUT_INFLIGHT] = "SELECT count(*) FROM tb_0031 WHERE status IN (4, 6)"
			   " AND origin = ?1 AND dest = ?2",
	[Q_OUT_SENDABLE] = "SELECT " OUT_COLS " FROM tb_0031"
			   " WHERE status = 0 AND dest = ?1 AND origin = ?2"
			   " AND next_attempt_at <= ?3 ORDER BY seq LIMIT ?4",
	[Q_OUT_MARK_CONFIRMED] = "UPDATE tb_0031 SET status = CASE WHEN"
				 " status = -2 AND ?4::bigint = 4 THEN -2"
				 " ELSE 100 END, result = ?4::bigint,"
				 " acked_at = ?5, next_attempt_at = ?5"
				 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
				 " AND status <> 100",
	[Q_STAT_OUT] = "SELECT COALESCE(origin, ''), dest, status, count(*),"
		       " min(created_at) FROM tb_0031"
		       " GROUP BY origin, dest, status"
		       " ORDER BY COALESCE(origin, '')" BYTES ", dest" BYTES
		       ", status",
	[Q_STAT_IN] = "SELECT origin, dest, ack_status, count(*),"
		      " min(received_at) FROM tb_0030"
		      " GROUP BY origin, dest, ack_status"
		      " ORDER BY origin" BYTES ", dest" BYTES ", ack_status",
	[Q_STAT_REDO] = "SELECT origin, dest, status, count(*),"
			" min(created_at) FROM tb_0033"
			" GROUP BY origin, dest, status"
			" ORDER BY origin" BYTES ", dest" BYTES ", status",
	/* md5 hex: text that TOAST compression cannot shrink, so writing it
	 * needs the room. */
	[Q_PROBE_SET] =
		"INSERT INTO semq_meta(key, value) VALUES ('disk_probe',"
		" (SELECT left(string_agg(md5(g::text), ''), ?1::int)"
		" FROM generate_series(0, ?1::int / 32) g))"
		" ON CONFLICT (key) DO UPDATE SET value = excluded.value",
};

struct stream_id {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
};

struct store {
	struct db *db;    /* owned */
	const char *name; /* db_name(db): the file or URL, for messages */
	int pg;           /* db_kind(db) == DB_PG */
	char node_id[SEMQ_ID_MAX + 1];
	size_t max_payload;
	int64_t *levels; /* owned: redo backoff levels, ms */
	size_t n_levels;
	unsigned max_tries;
	int schema_version;
	int in_batch;
	struct db_stmt *q[Q__N];  /* owned: cached statements */
	unsigned char busy[Q__N]; /* q[i] is handed out right now */
	struct semq_plugin_tx tx; /* {db_kind, db_handle} */
	char *row_str[2];         /* owned: strings of the last *_get row */
	char rr_dest[SEMQ_ID_MAX + 1];   /* fetch_sendable starts after */
	char rr_origin[SEMQ_ID_MAX + 1]; /* this stream (round robin) */
	/* PostgreSQL: the streams whose semq_stream_in row this transaction
	 * holds FOR UPDATE (a lock is held to the end of the transaction). */
	struct stream_id locked[LOCKS_MAX];
	unsigned n_locked;
	int tx_failed; /* a statement failed in the open transaction */
	int lost;      /* PostgreSQL: the connection is gone; reconnect */
	char errmsg[STORE_ERRMAX];
	int full; /* errmsg is a full disk or a failed write */
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

/* A failed database call: "TARGET: what: driver message". */
static int dberr(struct store *st, const char *what)
{
	enum db_errclass ec = db_errclass(st->db);

	seterr(st, SEMQ_ERR_DB, "%s: %s: %s", st->name, what,
	       db_errmsg(st->db));
	st->full = ec == DB_E_FULL;
	if (ec == DB_E_LOST)
		st->lost = 1;
	st->tx_failed = 1;
	return SEMQ_ERR_DB;
}

static void copy_err(const struct store *st, char *err, size_t errsz)
{
	if (err && errsz)
		snprintf(err, errsz, "%s", st->errmsg);
}

/* ---- statements ----------------------------------------------------------- */

static const char *q_text(const struct store *st, enum q i)
{
	return st->pg && q_pg[i] ? q_pg[i] : q_sql[i];
}

/* The statement for `i`, reset and unbound; NULL (errmsg set) on failure.
 * Give it back with q_put(). */
static struct db_stmt *q_get(struct store *st, enum q i)
{
	struct db_stmt *s = NULL;
	const char *sql = q_text(st, i);

	if (!sql) {
		seterr(st, SEMQ_ERR_INTERNAL,
		       "%s: statement %d has no text for this database",
		       st->name, (int)i);
		return NULL;
	}
	if (!st->busy[i]) {
		if (!st->q[i] &&
		    db_prepare(st->db, sql, &st->q[i]) != SEMQ_OK) {
			st->q[i] = NULL;
			dberr(st, "preparing a statement");
			return NULL;
		}
		st->busy[i] = 1;
		return st->q[i];
	}
	/* Re-entered from a callback while q[i] is stepping: a private one. */
	if (db_prepare(st->db, sql, &s) != SEMQ_OK) {
		dberr(st, "preparing a statement");
		return NULL;
	}
	return s;
}

static void q_put(struct store *st, enum q i, struct db_stmt *s)
{
	if (!s)
		return;
	if (s == st->q[i]) {
		db_reset(s);
		st->busy[i] = 0;
	} else {
		db_finalize(s);
	}
}

/* Runs a statement without parameters or rows (BEGIN, SAVEPOINT, ...). */
static int q_exec(struct store *st, enum q i, const char *what)
{
	struct db_stmt *s = q_get(st, i);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	rc = db_step(s);
	if (rc < 0) {
		dberr(st, what);
		q_put(st, i, s);
		return SEMQ_ERR_DB;
	}
	q_put(st, i, s);
	return SEMQ_OK;
}

/* A transaction ended (or begins): nothing is locked or failed in it. */
static void tx_reset(struct store *st)
{
	st->n_locked = 0;
	st->tx_failed = 0;
}

/* ROLLBACK that keeps errmsg: used on paths that already failed. */
static void rollback_quiet(struct store *st)
{
	struct db_stmt *s;

	tx_reset(st);
	if (!db_in_tx(st->db))
		return;
	s = q_get(st, Q_ROLLBACK);
	if (s) {
		db_step(s);
		q_put(st, Q_ROLLBACK, s);
	} else {
		db_exec(st->db, "ROLLBACK");
	}
}

/* PostgreSQL: connects again after the connection was lost, before a new
 * transaction (never inside one: what it did is gone with the old one). */
static int revive(struct store *st)
{
	if (!st->lost)
		return SEMQ_OK;
	if (db_reconnect(st->db) != SEMQ_OK)
		return dberr(st, "connecting again");
	st->lost = 0;
	st->tx.db = db_handle(st->db);
	return SEMQ_OK;
}

/* BEGIN (IMMEDIATE on SQLite, READ COMMITTED on PostgreSQL). */
static int tx_begin(struct store *st)
{
	int r = revive(st);

	if (r)
		return r;
	tx_reset(st);
	return q_exec(st, Q_BEGIN, "begin");
}

static void bind_id(struct db_stmt *s, const struct msgid *id)
{
	db_bind_text(s, 1, id->origin);
	db_bind_text(s, 2, id->dest);
	db_bind_int64(s, 3, (int64_t)id->seq);
}

static const char *key_of(const struct msg *m)
{
	return m->has_key && m->key[0] ? m->key : NULL;
}

static void bind_key(struct db_stmt *s, int i, const struct msg *m)
{
	db_bind_text(s, i, key_of(m));
}

static void bind_payload(struct db_stmt *s, int i, const struct msg *m)
{
	/* Never NULL: the payload columns are NOT NULL, x'' when empty. */
	db_bind_blob(s, i, m->payload_len ? (const void *)m->payload : "",
		     m->payload_len);
}

/* ---- transactions --------------------------------------------------------- */

/* Makes sure a transaction is open; *own = 1 when this call opened it. */
static int tx_open(struct store *st, int *own)
{
	*own = 0;
	if (st->in_batch) {
		if (!db_in_tx(st->db))
			return seterr(st, SEMQ_ERR_DB,
				      "%s: the open batch was already rolled "
				      "back by an earlier error; roll it back",
				      st->name);
		if (st->pg && st->tx_failed)
			return seterr(st, SEMQ_ERR_DB,
				      "%s: a statement of the open batch "
				      "failed, which aborted it; roll it back",
				      st->name);
		return SEMQ_OK;
	}
	if (tx_begin(st) != SEMQ_OK)
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
		if (q_exec(st, Q_COMMIT, "commit") == SEMQ_OK) {
			tx_reset(st);
			return r;
		}
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
	if (m->has_key &&
	    !semq_utf8_valid((const uint8_t *)m->key, strlen(m->key)))
		return seterr(st, SEMQ_ERR_INVALID, "%s: key is not UTF-8 text",
			      what);
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

static void col_text(char *dst, size_t cap, struct db_stmt *s, int col)
{
	const char *t = db_col_text(s, col);
	size_t n = t ? strlen(t) : 0;

	if (n >= cap)
		n = cap - 1;
	if (n)
		memcpy(dst, t, n);
	dst[n] = '\0';
}

/* A copy of a text column (NULL stays NULL); -1 when out of memory. */
static int col_dup(struct db_stmt *s, int col, char **out)
{
	const char *t = db_col_null(s, col) ? NULL : db_col_text(s, col);

	*out = NULL;
	if (!t)
		return 0;
	*out = strdup(t);
	return *out ? 0 : -1;
}

static int col_int(struct db_stmt *s, int col)
{
	return (int)db_col_int64(s, col);
}

/* MSG_COLS (0..7) and created_at (8) into m; m->payload is malloc'd. */
static int col_msg(struct store *st, struct db_stmt *s, struct msg *m)
{
	const void *p;
	size_t n = 0;

	memset(m, 0, sizeof *m);
	col_text(m->id.origin, sizeof m->id.origin, s, 0);
	col_text(m->id.dest, sizeof m->id.dest, s, 1);
	m->id.seq = (uint64_t)db_col_int64(s, 2);
	m->type = (uint32_t)db_col_int64(s, 3);
	if (!db_col_null(s, 4)) {
		m->has_key = 1;
		col_text(m->key, sizeof m->key, s, 4);
	}
	m->prev_seq = (uint64_t)db_col_int64(s, 5);
	m->deliver_at = db_col_int64(s, 6);
	p = db_col_blob(s, 7, &n);
	if (n > 0) {
		m->payload = malloc(n);
		if (!m->payload)
			return seterr(st, SEMQ_ERR_NOMEM,
				      "reading a message: out of memory");
		memcpy(m->payload, p, n);
		m->payload_len = n;
	}
	m->created_at = db_col_int64(s, 8);
	return SEMQ_OK;
}

/* A row of OUT_COLS; *le gets a malloc'd copy of last_error. */
static int col_out(struct store *st, struct db_stmt *s, struct msg *m,
		   struct out_row *row, char **le)
{
	int r = col_msg(st, s, m);

	*le = NULL;
	if (r)
		return r;
	memset(row, 0, sizeof *row);
	row->status = col_int(s, 9);
	row->attempts = col_int(s, 10);
	row->next_attempt_at = db_col_int64(s, 11);
	row->sent_at = db_col_int64(s, 12);
	row->acked_at = db_col_int64(s, 13);
	row->result = db_col_null(s, 14) ? -1 : col_int(s, 14);
	if (col_dup(s, 15, le))
		return seterr(st, SEMQ_ERR_NOMEM,
			      "reading a row: out of memory");
	row->last_error = *le;
	row->rowid = db_col_int64(s, 16);
	/* A cancelled outbound row stands for its tombstone. */
	m->tombstone = row->status == SS_CANCELLED;
	return SEMQ_OK;
}

/* A row of REDO_COLS; strs[0], strs[1] get last_error, discard_reason. */
static int col_redo(struct store *st, struct db_stmt *s, struct msg *m,
		    struct redo_row *row, char **strs)
{
	int r = col_msg(st, s, m);

	strs[0] = strs[1] = NULL;
	if (r)
		return r;
	memset(row, 0, sizeof *row);
	row->status = col_int(s, 9);
	row->tries = col_int(s, 10);
	row->level = col_int(s, 11);
	row->next_attempt_at = db_col_int64(s, 12);
	row->created_at = db_col_int64(s, 13);
	row->updated_at = db_col_int64(s, 14);
	if (col_dup(s, 15, &strs[0]) || col_dup(s, 16, &strs[1]))
		return seterr(st, SEMQ_ERR_NOMEM,
			      "reading a row: out of memory");
	row->last_error = strs[0];
	row->discard_reason = strs[1];
	row->id = db_col_int64(s, 17);
	return SEMQ_OK;
}

/*
 * Steps `s` (OUT_COLS) and hands each row to cb. Every row is copied before
 * the call, so the callback may use the store. *n counts the rows handed;
 * *stopped = 1 when cb asked to stop.
 */
static int each_out(struct store *st, struct db_stmt *s, store_out_cb cb,
		    void *ctx, unsigned *n, int *stopped)
{
	int rc, r;

	while ((rc = db_step(s)) == DB_ROW) {
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
	if (rc < 0)
		return dberr(st, "reading tb_0031");
	return SEMQ_OK;
}

static int each_redo(struct store *st, struct db_stmt *s, store_redo_cb cb,
		     void *ctx)
{
	int rc, r;

	while ((rc = db_step(s)) == DB_ROW) {
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
	if (rc < 0)
		return dberr(st, "reading tb_0033");
	return SEMQ_OK;
}

/* ---- open, migrate, close ------------------------------------------------- */

static int latest_of(const struct migration *v, size_t n)
{
	int latest = 0;
	size_t i;

	for (i = 0; i < n; i++)
		if (v[i].version > latest)
			latest = v[i].version;
	return latest;
}

/* The migrations of this database's kind (one runner for both). */
static const struct migration *migrations_of(const struct store *st, size_t *n)
{
	*n = st->pg ? semq_pg_n_migrations : semq_n_migrations;
	return st->pg ? semq_pg_migrations : semq_migrations;
}

int store_schema_latest(void)
{
	return latest_of(semq_migrations, semq_n_migrations);
}

int store_schema_version(struct store *st)
{
	return st ? st->schema_version : 0;
}

/* One integer from a one-off query (0 when NULL or no row); SEMQ_OK or a
 * failure described by db_errmsg(). */
static int query_int(struct store *st, const char *sql, int64_t *v)
{
	struct db_stmt *s = NULL;
	int r, rc;

	*v = 0;
	r = db_prepare(st->db, sql, &s);
	if (r)
		return r;
	rc = db_step(s);
	if (rc == DB_ROW)
		*v = db_col_int64(s, 0);
	r = rc < 0 ? rc : SEMQ_OK;
	db_finalize(s);
	return r;
}

/* Runs a one-off statement that may return rows and ignores them. */
static int query_run(struct store *st, const char *sql)
{
	struct db_stmt *s = NULL;
	int r, rc;

	r = db_prepare(st->db, sql, &s);
	if (r)
		return r;
	while ((rc = db_step(s)) == DB_ROW)
		;
	db_finalize(s);
	return rc < 0 ? rc : SEMQ_OK;
}

/* The version the database is at: max(semq_schema.version), 0 when new. */
static int schema_current(struct store *st, int *v)
{
	static const char lite_sql[] =
		"SELECT count(*) FROM sqlite_master WHERE type = 'table'"
		" AND name = 'semq_schema'";
	static const char pg_sql[] = "SELECT count(*) FROM pg_catalog.pg_tables"
				     " WHERE schemaname = current_schema()"
				     " AND tablename = 'semq_schema'";
	int64_t n = 0;
	int r;

	*v = 0;
	r = query_int(st, st->pg ? pg_sql : lite_sql, &n);
	if (r || n == 0)
		return r;
	r = query_int(st, "SELECT COALESCE(max(version), 0) FROM semq_schema",
		      &n);
	*v = n > INT_MAX ? INT_MAX : (int)n;
	return r;
}

static int too_new(struct store *st, int v, int latest)
{
	return seterr(st, SEMQ_ERR_VERSION,
		      "%s: schema version %d is newer than this SEMQ (knows up "
		      "to %d); use a newer semqd",
		      st->name, v, latest);
}

/* A failure while opening: the file is unreadable, the server is gone, or
 * the database is not ours. */
static int open_err(struct store *st, const char *what)
{
	enum db_errclass ec = db_errclass(st->db);
	const char *msg = db_errmsg(st->db);
	int code =
		ec == DB_E_FULL || ec == DB_E_LOST ? SEMQ_ERR_IO : SEMQ_ERR_DB;

	if (ec == DB_E_LOST)
		st->lost = 1;
	if (strstr(msg, "file is not a database"))
		return seterr(st, SEMQ_ERR_DB, "%s: not a SEMQ database (%s)",
			      st->name, msg);
	return seterr(st, code, "%s: %s: %s", st->name, what, msg);
}

/*
 * Begins a transaction of store_open(): BEGIN IMMEDIATE on SQLite; on
 * PostgreSQL BEGIN and a transaction-level advisory lock, so that of several
 * instances opening the database at the same moment one at a time migrates
 * or records the node id.
 */
static int open_begin(struct store *st)
{
	if (!st->pg)
		return db_exec(st->db, "BEGIN IMMEDIATE");
	if (db_exec(st->db, "BEGIN ISOLATION LEVEL READ COMMITTED"))
		return SEMQ_ERR_DB;
	return query_run(st, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK ")");
}

/*
 * Applies every embedded migration of this database's kind above its
 * version, each in one transaction (open_begin) with its semq_schema row. The
 * version is read again inside the transaction, so of two processes opening
 * a new database at once only the first migrates.
 */
/*
 * With the tables of version 1, in the same transaction, this node's id and
 * max_payload: an application that sees tb_0031 may insert at once (the
 * fill trigger needs the id). meta_sync() checks and updates them later.
 */
static int first_meta(struct store *st)
{
	static const char sql[] = "INSERT INTO semq_meta(key, value)"
				  " VALUES ('node_id', ?1), ('max_payload', ?2)"
				  " ON CONFLICT (key) DO NOTHING";
	struct db_stmt *s = NULL;
	char mp[32];
	int rc = db_prepare(st->db, sql, &s);

	if (rc == SEMQ_OK) {
		snprintf(mp, sizeof mp, "%zu", st->max_payload);
		db_bind_text(s, 1, st->node_id);
		db_bind_text(s, 2, mp);
		rc = db_step(s);
		rc = rc < 0 ? rc : SEMQ_OK;
	}
	db_finalize(s);
	return rc;
}

/*
 * SQLite: after a migration, schema_version + 1. DDL bumps it by itself; a
 * definition edited in place (PRAGMA writable_schema, as 0002 does) does not,
 * and every open connection would go on using the definition it parsed.
 */
static int bump_schema_cookie(struct store *st)
{
	struct db_stmt *s = NULL;
	char sql[64];
	int64_t v = -1;
	int rc = db_prepare(st->db, "PRAGMA schema_version", &s);

	if (rc == SEMQ_OK && (rc = db_step(s)) == DB_ROW) {
		v = db_col_int64(s, 0);
		rc = SEMQ_OK;
	}
	db_finalize(s);
	if (rc != SEMQ_OK || v < 0 || v >= INT32_MAX)
		return rc != SEMQ_OK ? rc : SEMQ_ERR_DB;
	snprintf(sql, sizeof sql, "PRAGMA schema_version = %" PRId64, v + 1);
	return db_exec(st->db, sql);
}

static int migrate(struct store *st)
{
	static const char create_lite[] =
		"CREATE TABLE IF NOT EXISTS semq_schema ("
		" version INTEGER PRIMARY KEY, name TEXT, applied_at INTEGER)";
	static const char create_pg[] =
		"CREATE TABLE IF NOT EXISTS semq_schema ("
		" version INTEGER PRIMARY KEY, name TEXT, applied_at BIGINT)";
	static const char insert_lite[] =
		"INSERT INTO semq_schema(version, name, applied_at)"
		" VALUES (?1, ?2, CAST((julianday('now') - 2440587.5)"
		" * 86400000.0 AS INTEGER))";
	static const char insert_pg[] =
		"INSERT INTO semq_schema(version, name, applied_at)"
		" VALUES (?1, ?2, (extract(epoch FROM clock_timestamp())"
		" * 1000)::bigint)";
	size_t n_mig;
	const struct migration *mig = migrations_of(st, &n_mig);
	const int latest = latest_of(mig, n_mig);
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, cur = 0;
	size_t i;

	if (schema_current(st, &cur)) {
		r = open_err(st, "reading the schema version");
		goto out;
	}
	if (cur > latest) {
		r = too_new(st, cur, latest);
		goto out;
	}
	for (i = 0; i < n_mig; i++) {
		const struct migration *mg = &mig[i];

		if (mg->version <= cur)
			continue;
		if (open_begin(st)) {
			r = open_err(st, "beginning a migration");
			goto out;
		}
		if (db_exec(st->db, st->pg ? create_pg : create_lite) ||
		    schema_current(st, &cur)) {
			r = open_err(st, "reading the schema version");
			goto out;
		}
		if (cur > latest) {
			r = too_new(st, cur, latest);
			goto out;
		}
		if (cur >= mg->version) { /* another process was first */
			if (db_exec(st->db, "COMMIT")) {
				r = open_err(st, "commit");
				goto out;
			}
			continue;
		}
		if (db_exec(st->db, mg->sql) ||
		    (mg->version == 1 && first_meta(st)) ||
		    (!st->pg && bump_schema_cookie(st))) {
			r = seterr(st, SEMQ_ERR_DB,
				   "%s: migration %s failed: %s", st->name,
				   mg->name, db_errmsg(st->db));
			goto out;
		}
		rc = db_prepare(st->db, st->pg ? insert_pg : insert_lite, &s);
		if (rc == SEMQ_OK) {
			db_bind_int64(s, 1, mg->version);
			db_bind_text(s, 2, mg->name);
			rc = db_step(s);
			rc = rc < 0 ? rc : SEMQ_OK;
		}
		db_finalize(s);
		s = NULL;
		if (rc == SEMQ_OK)
			rc = db_exec(st->db, "COMMIT");
		if (rc != SEMQ_OK) {
			r = seterr(st, SEMQ_ERR_DB,
				   "%s: recording migration %s: %s", st->name,
				   mg->name, db_errmsg(st->db));
			goto out;
		}
		cur = mg->version;
	}
	st->schema_version = cur;
	r = SEMQ_OK;
out:
	db_finalize(s);
	if (r != SEMQ_OK && db_in_tx(st->db))
		db_exec(st->db, "ROLLBACK");
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
	struct db_stmt *s = NULL;
	char have[SEMQ_ID_MAX + 1] = "", mp[32];
	int r = SEMQ_ERR_INTERNAL, rc, found = 0;

	if (open_begin(st)) {
		r = open_err(st, "begin");
		goto out;
	}
	rc = db_prepare(st->db, get_sql, &s);
	if (rc == SEMQ_OK) {
		rc = db_step(s);
		if (rc == DB_ROW) {
			found = 1;
			col_text(have, sizeof have, s, 0);
		}
		rc = rc < 0 ? rc : SEMQ_OK;
	}
	db_finalize(s);
	s = NULL;
	if (rc != SEMQ_OK) {
		r = open_err(st, "reading semq_meta");
		goto out;
	}
	if (found && strcmp(have, st->node_id) != 0) {
		r = seterr(st, SEMQ_ERR_INVALID,
			   "%s: belongs to node '%s', not to node '%s'",
			   st->name, have, st->node_id);
		goto out;
	}
	rc = db_prepare(st->db, put_sql, &s);
	if (rc == SEMQ_OK && !found) {
		db_bind_text(s, 1, "node_id");
		db_bind_text(s, 2, st->node_id);
		rc = db_step(s);
		rc = rc < 0 ? rc : SEMQ_OK;
		db_reset(s);
	}
	if (rc == SEMQ_OK) {
		/* as text: the column is TEXT on both databases */
		snprintf(mp, sizeof mp, "%zu", st->max_payload);
		db_bind_text(s, 1, "max_payload");
		db_bind_text(s, 2, mp);
		rc = db_step(s);
		rc = rc < 0 ? rc : SEMQ_OK;
	}
	db_finalize(s);
	s = NULL;
	if (rc == SEMQ_OK)
		rc = db_exec(st->db, "COMMIT");
	if (rc != SEMQ_OK) {
		r = open_err(st, "writing semq_meta");
		goto out;
	}
	r = SEMQ_OK;
out:
	db_finalize(s);
	if (r != SEMQ_OK && db_in_tx(st->db))
		db_exec(st->db, "ROLLBACK");
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
	struct db_open_opts dbo;
	struct store *st = NULL;
	const int64_t *lv;
	char derr[STORE_ERRMAX] = "";
	int r = SEMQ_ERR_INTERNAL;

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
	if (!st) {
		if (err && errsz)
			snprintf(err, errsz, "store_open: out of memory");
		r = SEMQ_ERR_NOMEM;
		goto out;
	}
	st->name = "(not open)";
	snprintf(st->node_id, sizeof st->node_id, "%s", o->node_id);
	st->max_payload = o->max_payload ? o->max_payload : DEFAULT_MAX_PAYLOAD;
	st->max_tries = o->max_tries ? o->max_tries : DEFAULT_MAX_TRIES;
	lv = o->redo_levels_ms ? o->redo_levels_ms : default_levels;
	st->n_levels = o->redo_levels_ms ? o->n_redo_levels
					 : sizeof default_levels /
						   sizeof default_levels[0];
	st->levels = calloc(st->n_levels, sizeof *st->levels);
	if (!st->levels) {
		r = seterr(st, SEMQ_ERR_NOMEM, "store_open: out of memory");
		goto out;
	}
	memcpy(st->levels, lv, st->n_levels * sizeof *st->levels);

	/* The driver sets up the connection (SQLite: WAL, synchronous,
	 * busy handler, foreign keys; PostgreSQL: lock_timeout,
	 * synchronous_commit); it names the target in its messages, a URL
	 * without its password. */
	memset(&dbo, 0, sizeof dbo);
	dbo.target = o->path;
	dbo.synchronous = o->synchronous;
	dbo.busy_timeout_ms = o->busy_timeout_ms;
	r = db_open(&dbo, &st->db, derr, sizeof derr);
	if (r) {
		st->db = NULL;
		if (!db_is_url(o->path) && r == SEMQ_ERR_DB &&
		    strstr(derr, "file is not a database"))
			seterr(st, SEMQ_ERR_DB,
			       "%s: not a SEMQ database (file is not a "
			       "database)",
			       o->path);
		else
			seterr(st, r, "%s", derr[0] ? derr : "cannot open");
		goto out;
	}
	st->name = db_name(st->db);
	st->pg = db_kind(st->db) == DB_PG;

	r = migrate(st);
	if (r)
		goto out;
	r = meta_sync(st);
	if (r)
		goto out;

	st->tx.db_kind = (int)db_kind(st->db);
	st->tx.db = db_handle(st->db);
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
		db_finalize(st->q[i]);
	db_close(st->db);
	free(st->row_str[0]);
	free(st->row_str[1]);
	free(st->levels);
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
	struct db_stmt *s = NULL;
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
		db_bind_int64(s, 1, (int64_t)bytes);
	if (db_step(s) != DB_DONE) {
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
	if (tx_begin(st) != SEMQ_OK)
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
	if (!db_in_tx(st->db)) {
		tx_reset(st);
		return seterr(st, SEMQ_ERR_DB,
			      "%s: commit: the batch was already rolled back "
			      "by an earlier error",
			      st->name);
	}
	/* PostgreSQL answers COMMIT of an aborted transaction by rolling it
	 * back without an error: never report that as committed. */
	if (st->pg && st->tx_failed) {
		rollback_quiet(st);
		return seterr(st, SEMQ_ERR_DB,
			      "%s: commit: a statement of the batch failed, "
			      "which aborted it; rolled back",
			      st->name);
	}
	r = q_exec(st, Q_COMMIT, "commit");
	if (r)
		rollback_quiet(st);
	tx_reset(st);
	return r;
}

/* Rolling back with no batch open is harmless (after a failed commit). */
int store_rollback(struct store *st)
{
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	st->in_batch = 0;
	tx_reset(st);
	if (!db_in_tx(st->db))
		return SEMQ_OK;
	r = q_exec(st, Q_ROLLBACK, "rollback");
	tx_reset(st);
	return r;
}

int store_in_batch(const struct store *st)
{
	return st ? st->in_batch : 0;
}

/* ---- origin side: tb_0031 ------------------------------------------------- */

int store_enqueue(struct store *st, const struct msg *m, uint64_t *seq_out,
		  char *err, size_t errsz)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, own = 0;
	int64_t rowid = 0;

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
	db_bind_text(s, 1, m->id.dest);
	db_bind_int64(s, 2, m->type);
	bind_key(s, 3, m);
	bind_payload(s, 4, m);
	db_bind_int64(s, 5, m->deliver_at);
	if (m->created_at > 0)
		db_bind_int64(s, 6, m->created_at);
	else
		db_bind_null(s, 6);
	rc = db_step(s);
	if (rc == DB_ROW) {
		rowid = db_col_int64(s, 0);
		rc = db_step(s); /* to the end: the insert is complete */
	}
	if (rc < 0) {
		const char *msg = db_errmsg(st->db);
		enum db_errclass ec = db_errclass(st->db);

		if (strstr(msg, "larger than max_payload"))
			r = seterr(st, SEMQ_ERR_TOO_BIG, "enqueue to %s: %s",
				   m->id.dest, msg);
		else if (ec == DB_E_CONSTRAINT || ec == DB_E_UNIQUE)
			r = seterr(st, SEMQ_ERR_INVALID, "enqueue to %s: %s",
				   m->id.dest, msg);
		else
			r = dberr(st, "enqueue");
		st->tx_failed = 1;
		goto out;
	}
	q_put(st, Q_OUT_INSERT, s);
	s = NULL;
	if (!rowid) {
		r = seterr(st, SEMQ_ERR_INTERNAL, "%s",
			   "enqueue: the insert returned no row id");
		goto out;
	}
	s = q_get(st, Q_OUT_SEQ);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_int64(s, 1, rowid);
	rc = db_step(s);
	if (rc != DB_ROW) {
		r = rc == DB_DONE ? seterr(st, SEMQ_ERR_INTERNAL, "%s",
					   "enqueue: inserted row vanished")
				  : dberr(st, "enqueue: reading seq");
		q_put(st, Q_OUT_SEQ, s);
		s = NULL;
		goto out;
	}
	if (seq_out)
		*seq_out = (uint64_t)db_col_int64(s, 0);
	q_put(st, Q_OUT_SEQ, s);
	s = NULL;
	r = SEMQ_OK;
out:
	q_put(st, Q_OUT_INSERT, s);
	r = tx_close(st, own, r);
	if (r < 0)
		copy_err(st, err, errsz);
	return r;
}

int store_enqueue_copy(struct store *st, const struct msg *m, int64_t now)
{
	struct db_stmt *s = NULL;
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
	db_bind_int64(s, 4, m->type);
	bind_key(s, 5, m);
	db_bind_int64(s, 6, (int64_t)m->prev_seq);
	db_bind_int64(s, 7, m->deliver_at);
	bind_payload(s, 8, m);
	db_bind_int64(s, 9, m->created_at);
	/* A tombstone is kept as what it is: a cancelled row to deliver. */
	db_bind_int64(s, 10, m->tombstone ? SS_CANCELLED : SS_UNSEND);
	db_bind_int64(s, 11, now);
	rc = db_step(s);
	if (rc < 0) {
		enum db_errclass ec = db_errclass(st->db);

		if (ec == DB_E_CONSTRAINT || ec == DB_E_UNIQUE) {
			r = seterr(st, SEMQ_ERR_INVALID, "%s: %s", idb,
				   db_errmsg(st->db));
			st->tx_failed = 1;
		} else {
			r = dberr(st, idb);
		}
		goto out;
	}
	if (db_changes(st->db) == 0) {
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
	struct db_stmt *s = q_get(st, i);
	char nd[SEMQ_ID_MAX + 1], no[SEMQ_ID_MAX + 1];
	int rc, r = SEMQ_OK;

	*found = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, dest ? dest : sd);
	db_bind_text(s, 2, so);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*found = 1;
		col_text(nd, sizeof nd, s, 0);
		col_text(no, sizeof no, s, 1);
	} else if (rc < 0) {
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
	struct db_stmt *s = NULL;
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
		db_bind_text(s, 1, so);
		db_bind_text(s, 2, sd);
		rc = db_step(s);
		if (rc != DB_ROW) {
			r = dberr(st, "fetch_sendable: counting in flight");
			goto out;
		}
		inflight = db_col_int64(s, 0);
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
		db_bind_text(s, 1, sd);
		db_bind_text(s, 2, so);
		db_bind_int64(s, 3, now);
		db_bind_int64(s, 4, room);
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
	struct db_stmt *s = q_get(st, Q_OUT_STATUS);
	char idb[MSGID_STRLEN];
	int rc, r;

	*status = INT_MIN;
	msgid_str(id, idb, sizeof idb);
	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*status = col_int(s, 0);
		r = seterr(st, SEMQ_DECLINED, "%s: %s: in status %d, not %s",
			   idb, what, *status, wanted);
	} else if (rc == DB_DONE) {
		r = seterr(st, SEMQ_DECLINED, "%s: %s: no such message", idb,
			   what);
	} else {
		r = dberr(st, idb);
	}
	q_put(st, Q_OUT_STATUS, s);
	return r;
}

/*
 * Runs one of the outbound transitions: `i` binds the id as ?1..?3 and, as
 * far as its statement has `nargs` parameters, a4/a5 (a5_text when
 * `a5_is_text`) as ?4/?5. SEMQ_DECLINED (errmsg says why, *declined_status
 * the status found or INT_MIN when there is no row) when no row was in a
 * status the transition applies to.
 */
static int out_transition(struct store *st, enum q i, const struct msgid *id,
			  int nargs, int64_t a4, int64_t a5,
			  const char *a5_text, int a5_is_text, const char *what,
			  const char *wanted, int *declined_status)
{
	struct db_stmt *s = NULL;
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
	if (nargs >= 4)
		db_bind_int64(s, 4, a4);
	if (nargs >= 5 && a5_is_text)
		db_bind_text(s, 5, a5_text);
	else if (nargs >= 5)
		db_bind_int64(s, 5, a5);
	rc = db_step(s);
	q_put(st, i, s);
	s = NULL;
	if (rc < 0) {
		r = dberr(st, msgid_str(id, idb, sizeof idb));
		goto out;
	}
	if (db_changes(st->db) == 0) {
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
	return out_transition(st, Q_OUT_MARK_SENT, id, 5, now, query_at, NULL,
			      0, "mark sent", "0", NULL);
}

int store_mark_relay_acked(struct store *st, const struct msgid *id,
			   int64_t now, int64_t query_at)
{
	return out_transition(st, Q_OUT_MARK_RELAY, id, 4, query_at, 0, NULL, 0,
			      "mark relay-acked", "4", NULL);
}

int store_mark_unsent(struct store *st, const struct msgid *id,
		      int64_t retry_at, const char *error)
{
	return out_transition(st, Q_OUT_MARK_UNSENT, id, 5, retry_at, 0, error,
			      1, "mark unsent", "4 or 6", NULL);
}

int store_mark_confirmed(struct store *st, const struct msgid *id, int result,
			 int64_t now)
{
	if (!st)
		return SEMQ_ERR_INVALID;
	if (result < RES_PROCESSED || result > RES_CANCELLED)
		return seterr(st, SEMQ_ERR_INVALID,
			      "mark confirmed: result %d is not 0..4", result);
	return out_transition(st, Q_OUT_MARK_CONFIRMED, id, 5, result, now,
			      NULL, 0, "mark confirmed", "0, 4, 6 or -2", NULL);
}

int store_cancel(struct store *st, const struct msgid *id, int64_t now)
{
	int r, status;

	r = out_transition(st, Q_OUT_CANCEL, id, 4, now, 0, NULL, 0, "cancel",
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
	struct db_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s: callback is missing",
			      what);
	s = q_get(st, i);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, now);
	db_bind_int64(s, 2, limit);
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
	return out_transition(st, Q_OUT_DEFER, id, 4, next_at, 0, NULL, 0,
			      "defer", "4, 6 or unanswered -2", NULL);
}

int store_drop_copy(struct store *st, const struct msgid *id)
{
	return out_transition(st, Q_OUT_DROP_COPY, id, 3, 0, 0, NULL, 0,
			      "drop copy", "a relay copy", NULL);
}

int store_fetch_tombstones(struct store *st, int64_t now, unsigned limit,
			   store_out_cb cb, void *ctx)
{
	return fetch_due(st, Q_OUT_TOMBSTONES, "fetch_tombstones", now, limit,
			 cb, ctx);
}

/* Runs the purge statement q (?1 the cutoff, ?2 the limit). */
static int purge_before(struct store *st, int q, const char *what, int64_t now,
			int64_t retention_ms, unsigned limit, unsigned *n_out)
{
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, own = 0;

	if (n_out)
		*n_out = 0;
	if (!st)
		return SEMQ_ERR_INVALID;
	if (retention_ms < 0)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s: retention %" PRId64 " ms is negative", what,
			      retention_ms);
	r = tx_open(st, &own);
	if (r)
		goto out;
	s = q_get(st, q);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_int64(s, 1, now - retention_ms);
	db_bind_int64(s, 2, limit);
	if (db_step(s) < 0) {
		r = dberr(st, what);
		goto out;
	}
	if (n_out)
		*n_out = (unsigned)db_changes(st->db);
	r = SEMQ_OK;
out:
	q_put(st, q, s);
	return tx_close(st, own, r);
}

int store_purge(struct store *st, int64_t now, int64_t retention_ms,
		unsigned limit, unsigned *n_out)
{
	return purge_before(st, Q_OUT_PURGE, "purge", now, retention_ms, limit,
			    n_out);
}

int store_redo_purge(struct store *st, int64_t now, int64_t retention_ms,
		     unsigned limit, unsigned *n_out)
{
	return purge_before(st, Q_REDO_PURGE, "redo purge", now, retention_ms,
			    limit, n_out);
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
	struct db_stmt *s = NULL;
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
	rc = db_step(s);
	if (rc == DB_DONE) {
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "%s: no such outbound message", idb);
		goto out;
	}
	if (rc != DB_ROW) {
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
	struct db_stmt *s;
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
		db_bind_int64(s, 1, limit);
	} else {
		db_bind_int64(s, 1, status);
		db_bind_int64(s, 2, limit);
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
	struct db_stmt *s = q_get(st, Q_W_GET);
	int rc, r = SEMQ_OK;

	*w = 0;
	if (known)
		*known = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*w = (uint64_t)db_col_int64(s, 0);
		if (known)
			*known = 1;
	} else if (rc < 0) {
		r = dberr(st, "reading a watermark");
	}
	q_put(st, Q_W_GET, s);
	return r;
}

/* Does this transaction hold the stream's lock already? */
static int stream_held(const struct store *st, const char *origin,
		       const char *dest)
{
	unsigned i;

	for (i = 0; i < st->n_locked; i++)
		if (!strcmp(st->locked[i].origin, origin) &&
		    !strcmp(st->locked[i].dest, dest))
			return 1;
	return 0;
}

static void stream_remember(struct store *st, const char *origin,
			    const char *dest)
{
	if (st->n_locked >= LOCKS_MAX)
		return; /* locking it again later is cheap and harmless */
	snprintf(st->locked[st->n_locked].origin,
		 sizeof st->locked[st->n_locked].origin, "%s", origin);
	snprintf(st->locked[st->n_locked].dest,
		 sizeof st->locked[st->n_locked].dest, "%s", dest);
	st->n_locked++;
}

/*
 * PostgreSQL: locks the stream's row in semq_stream_in (creating it first)
 * until the end of the transaction, waiting for an instance that holds it;
 * *w gets the watermark as that instance left it. SQLite (one writer at a
 * time already): only reads the watermark. *known = 0 when the stream has no
 * row (SQLite only: on PostgreSQL the lock made one).
 */
static int stream_lock(struct store *st, const char *origin, const char *dest,
		       uint64_t *w, int *known)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	if (!st->pg || stream_held(st, origin, dest))
		return stream_w(st, origin, dest, w, known);
	*w = 0;
	*known = 1;
	s = q_get(st, Q_W_CREATE);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	q_put(st, Q_W_CREATE, s);
	if (rc < 0)
		return dberr(st, "creating a stream's row");
	s = q_get(st, Q_W_LOCK);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	rc = db_step(s);
	if (rc == DB_ROW)
		*w = (uint64_t)db_col_int64(s, 0);
	else if (rc == DB_DONE)
		r = seterr(st, SEMQ_ERR_INTERNAL,
			   "%s: stream %s/%s: its row vanished while locking",
			   st->name, origin, dest);
	else
		r = dberr(st, "locking a stream");
	q_put(st, Q_W_LOCK, s);
	if (!r)
		stream_remember(st, origin, dest);
	return r;
}

/* Is (origin, dest, seq) in tb_0030? *result gets its result. */
static int in_get(struct store *st, const char *origin, const char *dest,
		  uint64_t seq, int *found, int *result)
{
	struct db_stmt *s = q_get(st, Q_IN_GET);
	int rc, r = SEMQ_OK;

	*found = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	db_bind_int64(s, 3, (int64_t)seq);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*found = 1;
		if (result)
			*result = col_int(s, 0);
	} else if (rc < 0) {
		r = dberr(st, "reading tb_0030");
	}
	q_put(st, Q_IN_GET, s);
	return r;
}

/* Inserts the tb_0030 row; SEMQ_DUPLICATE when the unique index has it
 * (recorded by another connection after our check). */
static int in_insert(struct store *st, const struct msg *m, const char *via,
		     unsigned need, int64_t now, int result, const char *idb)
{
	struct db_stmt *s = q_get(st, Q_IN_INSERT);
	int rc, r = SEMQ_OK;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, &m->id);
	db_bind_int64(s, 4, m->type);
	bind_key(s, 5, m);
	db_bind_int64(s, 6, (int64_t)m->prev_seq);
	db_bind_int64(s, 7, now);
	db_bind_text(s, 8, via);
	db_bind_int64(s, 9, result);
	db_bind_int64(s, 10, need);
	rc = db_step(s);
	if (rc < 0)
		r = dberr(st, idb);
	else if (db_changes(st->db) == 0)
		r = seterr(st, SEMQ_DUPLICATE, "%s: already received", idb);
	q_put(st, Q_IN_INSERT, s);
	return r;
}

static int in_set_result(struct store *st, const struct msgid *id, int result,
			 const char *idb)
{
	struct db_stmt *s = q_get(st, Q_IN_SET_RESULT);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, id);
	db_bind_int64(s, 4, result);
	rc = db_step(s);
	q_put(st, Q_IN_SET_RESULT, s);
	return rc < 0 ? dberr(st, idb) : SEMQ_OK;
}

/* A new tb_0033 entry for m. */
static int redo_insert(struct store *st, const struct msg *m, int status,
		       int tries, int level, int64_t next_at,
		       const char *last_error, int64_t now, const char *idb)
{
	struct db_stmt *s = q_get(st, Q_REDO_INSERT);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	bind_id(s, &m->id);
	db_bind_int64(s, 4, m->type);
	bind_key(s, 5, m);
	db_bind_int64(s, 6, (int64_t)m->prev_seq);
	db_bind_int64(s, 7, m->deliver_at);
	db_bind_int64(s, 8, m->created_at);
	bind_payload(s, 9, m);
	db_bind_int64(s, 10, status);
	db_bind_int64(s, 11, tries);
	db_bind_int64(s, 12, level);
	db_bind_int64(s, 13, next_at);
	db_bind_text(s, 14, last_error);
	db_bind_int64(s, 15, now);
	rc = db_step(s);
	q_put(st, Q_REDO_INSERT, s);
	return rc < 0 ? dberr(st, idb) : SEMQ_OK;
}

/* Does the key have an entry with one of the statuses of query `i`? */
static int redo_key_has(struct store *st, enum q i, const char *origin,
			const char *dest, const char *key, int *yes)
{
	struct db_stmt *s = q_get(st, i);
	int rc, r = SEMQ_OK;

	*yes = 0;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	db_bind_text(s, 3, key);
	rc = db_step(s);
	if (rc == DB_ROW)
		*yes = 1;
	else if (rc < 0)
		r = dberr(st, "reading tb_0033 by key");
	q_put(st, i, s);
	return r;
}

/* After a head finished: the lowest waiting entry of the key becomes
 * pending (at its deliver_at when that is later), unless a head remains. */
static int redo_release_next(struct store *st, const char *origin,
			     const char *dest, const char *key, int64_t now)
{
	struct db_stmt *s = NULL;
	int64_t id = 0, at = now;
	int r = SEMQ_ERR_INTERNAL, rc, head;

	r = redo_key_has(st, Q_REDO_KEY_HEAD, origin, dest, key, &head);
	if (r || head)
		return r;
	s = q_get(st, Q_REDO_KEY_NEXT);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	db_bind_text(s, 3, key);
	rc = db_step(s);
	if (rc == DB_ROW) {
		id = db_col_int64(s, 0);
		if (db_col_int64(s, 1) > at)
			at = db_col_int64(s, 1);
	} else if (rc < 0) {
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
	db_bind_int64(s, 1, id);
	db_bind_int64(s, 2, at);
	db_bind_int64(s, 3, now);
	rc = db_step(s);
	q_put(st, Q_REDO_RELEASE, s);
	s = NULL;
	r = rc < 0 ? dberr(st, "releasing a waiting entry") : SEMQ_OK;
out:
	q_put(st, Q_REDO_KEY_NEXT, s);
	return r;
}

/*
 * SQLite rolled the transaction back during the plugin's call: was it because
 * the disk is full or a write failed (then errmsg says so and store_disk_full
 * is set)? The plugin writes through the `sqlite3 *` itself, past node/db.h,
 * so only SQLite's own last error knows.
 */
static int plugin_hit_full(struct store *st, const char *idb)
{
	sqlite3 *h;
	int rc;

	if (st->pg)
		return 0;
	h = db_handle(st->db);
	rc = sqlite3_extended_errcode(h) & 0xff;
	if (rc != SQLITE_FULL && rc != SQLITE_IOERR)
		return 0;
	seterr(st, SEMQ_ERR_DB, "%s: %s: %s", st->name, idb, sqlite3_errmsg(h));
	st->full = 1;
	st->tx_failed = 1;
	return 1;
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
	if (!db_in_tx(st->db)) {
		/* SQLite ends the transaction itself when the disk is full;
		 * anything else that ended it was the plugin. */
		if (plugin_hit_full(st, idb))
			return SEMQ_ERR_DB;
		st->tx_failed = 1;
		return seterr(st, SEMQ_ERR_PLUGIN,
			      "%s: the transaction ended inside the plugin (a "
			      "plugin must not BEGIN, COMMIT or ROLLBACK)",
			      idb);
	}
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

	/* Seen before: at or below the watermark, or in tb_0030 — as the
	 * other instances left the stream (PostgreSQL: we hold its lock). */
	r = stream_lock(st, m->id.origin, m->id.dest, &w, &known);
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
		struct db_stmt *s = q_get(st, Q_W_CREATE);
		int rc;

		if (!s) {
			r = SEMQ_ERR_DB;
			goto out;
		}
		db_bind_text(s, 1, m->id.origin);
		db_bind_text(s, 2, m->id.dest);
		rc = db_step(s);
		q_put(st, Q_W_CREATE, s);
		if (rc < 0) {
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
	struct db_stmt *s = NULL;
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
	db_bind_int64(s, 4, bit);
	while ((rc = db_step(s)) == DB_ROW)
		ok = col_int(s, 0);
	if (rc < 0) {
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
	struct db_stmt *s;
	int r = SEMQ_OK, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "fetch_unacked: callback is missing");
	s = q_get(st, Q_IN_UNACKED);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, before);
	db_bind_int64(s, 2, limit);
	while ((rc = db_step(s)) == DB_ROW) {
		struct msgid id;
		char via[SEMQ_ID_MAX + 1];
		int has_via = !db_col_null(s, 6);

		memset(&id, 0, sizeof id);
		col_text(id.origin, sizeof id.origin, s, 0);
		col_text(id.dest, sizeof id.dest, s, 1);
		id.seq = (uint64_t)db_col_int64(s, 2);
		col_text(via, sizeof via, s, 6);
		if (cb(ctx, &id, col_int(s, 3), (unsigned)col_int(s, 4),
		       (unsigned)col_int(s, 5), has_via ? via : NULL))
			break;
	}
	if (rc < 0)
		r = dberr(st, "fetch_unacked");
	q_put(st, Q_IN_UNACKED, s);
	return r;
}

int store_received_list(struct store *st, const char *origin, unsigned limit,
			store_recv_cb cb, void *ctx)
{
	enum q i = origin ? Q_IN_LIST : Q_IN_LIST_ALL;
	struct db_stmt *s;
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
		db_bind_text(s, 1, origin);
		db_bind_int64(s, 2, limit);
	} else {
		db_bind_int64(s, 1, limit);
	}
	while ((rc = db_step(s)) == DB_ROW) {
		/* Copied out first: the callback may use the store. */
		char key[SEMQ_KEY_MAX + 1], via[SEMQ_ID_MAX + 1];
		struct recv_row row;

		memset(&row, 0, sizeof row);
		col_text(row.id.origin, sizeof row.id.origin, s, 0);
		col_text(row.id.dest, sizeof row.id.dest, s, 1);
		row.id.seq = (uint64_t)db_col_int64(s, 2);
		row.type = (uint32_t)db_col_int64(s, 3);
		col_text(key, sizeof key, s, 4);
		row.key = db_col_null(s, 4) ? NULL : key;
		row.prev_seq = (uint64_t)db_col_int64(s, 5);
		row.received_at = db_col_int64(s, 6);
		col_text(via, sizeof via, s, 7);
		row.via = db_col_null(s, 7) ? NULL : via;
		row.result = col_int(s, 8);
		row.ack_status = col_int(s, 9);
		row.confirm_need = (unsigned)col_int(s, 10);
		row.confirm_got = (unsigned)col_int(s, 11);
		row.rowid = db_col_int64(s, 12);
		if (cb(ctx, &row))
			break;
	}
	if (rc < 0)
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
	struct db_stmt *s = q_get(st, Q_W_LIST);
	int rc, r = SEMQ_OK;

	*out = NULL;
	*n = 0;
	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = db_step(s)) == DB_ROW) {
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
		v[len].w = (uint64_t)db_col_int64(s, 2);
		len++;
	}
	if (rc < 0)
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

/* The end of the run of AS_OK rows right above w: *nw (w when none). */
static int run_end(struct store *st, const struct stream_w *sw, uint64_t w,
		   uint64_t *nw)
{
	struct db_stmt *s = q_get(st, Q_IN_RUN);
	int rc, r = SEMQ_OK;

	*nw = w;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, sw->origin);
	db_bind_text(s, 2, sw->dest);
	db_bind_int64(s, 3, (int64_t)w);
	while ((rc = db_step(s)) == DB_ROW) {
		if ((uint64_t)db_col_int64(s, 0) != *nw + 1 ||
		    col_int(s, 1) != AS_OK)
			break;
		(*nw)++;
	}
	if (rc < 0)
		r = dberr(st, "advancing a watermark");
	q_put(st, Q_IN_RUN, s);
	return r;
}

/* PostgreSQL: takes the stream's row unless another instance holds it
 * (*got = 0 then: leave it to the next pass); *w gets its watermark. */
static int stream_try_lock(struct store *st, const struct stream_w *sw,
			   uint64_t *w, int *got)
{
	struct db_stmt *s;
	int rc, r = SEMQ_OK;

	*got = 0;
	if (stream_held(st, sw->origin, sw->dest)) {
		*got = 1;
		return stream_w(st, sw->origin, sw->dest, w, NULL);
	}
	s = q_get(st, Q_W_LOCK_SKIP);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, sw->origin);
	db_bind_text(s, 2, sw->dest);
	rc = db_step(s);
	if (rc == DB_ROW) {
		*got = 1;
		*w = (uint64_t)db_col_int64(s, 0);
	} else if (rc < 0) {
		r = dberr(st, "locking a stream");
	}
	q_put(st, Q_W_LOCK_SKIP, s);
	if (!r && *got)
		stream_remember(st, sw->origin, sw->dest);
	return r;
}

/* Moves one stream's watermark over its run of AS_OK rows, compacting. On
 * PostgreSQL only a stream with something to do is locked, and one that
 * another instance holds is skipped. */
static int advance_one(struct store *st, const struct stream_w *sw,
		       unsigned *compacted)
{
	struct db_stmt *s;
	uint64_t w = sw->w, nw;
	int rc, r, got;

	r = run_end(st, sw, w, &nw);
	if (r || nw == w)
		return r;
	if (st->pg) {
		r = stream_try_lock(st, sw, &w, &got);
		if (r || !got)
			return r;
		r = run_end(st, sw, w, &nw); /* as of the lock */
		if (r || nw == w)
			return r;
	}

	s = q_get(st, Q_W_SET);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, sw->origin);
	db_bind_text(s, 2, sw->dest);
	db_bind_int64(s, 3, (int64_t)nw);
	rc = db_step(s);
	q_put(st, Q_W_SET, s);
	if (rc < 0)
		return dberr(st, "advancing a watermark");

	s = q_get(st, Q_IN_COMPACT);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_text(s, 1, sw->origin);
	db_bind_text(s, 2, sw->dest);
	db_bind_int64(s, 3, (int64_t)w);
	db_bind_int64(s, 4, (int64_t)nw);
	rc = db_step(s);
	q_put(st, Q_IN_COMPACT, s);
	if (rc < 0)
		return dberr(st, "compacting tb_0030");
	*compacted += (unsigned)db_changes(st->db);
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
	struct db_stmt *s = q_get(st, Q_REDO_GET);
	int rc, r;

	memset(m, 0, sizeof *m);
	strs[0] = strs[1] = NULL;
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, id);
	rc = db_step(s);
	if (rc == DB_ROW)
		r = col_redo(st, s, m, row, strs);
	else if (rc == DB_DONE)
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "redo %" PRId64 ": no such entry", id);
	else
		r = dberr(st, "reading tb_0033");
	q_put(st, Q_REDO_GET, s);
	return r;
}

/*
 * Loads entry `id` for a change that may release or run entries of its key:
 * on PostgreSQL the entry's stream is locked first (see stream_lock) and the
 * entry read again under the lock, as the instance that held it left it.
 */
static int redo_load_locked(struct store *st, int64_t id, struct msg *m,
			    struct redo_row *row, char **strs)
{
	uint64_t w;
	int r, known;

	r = redo_load(st, id, m, row, strs);
	if (r || !st->pg || stream_held(st, m->id.origin, m->id.dest))
		return r;
	r = stream_lock(st, m->id.origin, m->id.dest, &w, &known);
	msg_clear(m);
	free(strs[0]);
	free(strs[1]);
	strs[0] = strs[1] = NULL;
	if (r)
		return r;
	return redo_load(st, id, m, row, strs);
}

int store_redo_due(struct store *st, int64_t now, unsigned limit,
		   store_redo_cb cb, void *ctx)
{
	struct db_stmt *s;
	int r;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!cb)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_due: callback is missing");
	s = q_get(st, Q_REDO_DUE);
	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, now);
	db_bind_int64(s, 2, limit);
	r = each_redo(st, s, cb, ctx);
	q_put(st, Q_REDO_DUE, s);
	return r;
}

int store_redo_next_due(struct store *st, int64_t *at)
{
	struct db_stmt *s;
	int r, rc;

	if (!st)
		return SEMQ_ERR_INVALID;
	if (!at)
		return seterr(st, SEMQ_ERR_INVALID, "%s",
			      "redo_next_due: at is NULL");
	s = q_get(st, Q_REDO_NEXT_DUE);
	if (!s)
		return SEMQ_ERR_DB;
	rc = db_step(s);
	if (rc != DB_ROW)
		r = rc < 0 ? dberr(st, "redo_next_due")
			   : seterr(st, SEMQ_ERR_INTERNAL, "%s",
				    "redo_next_due: no row");
	else if (db_col_null(s, 0))
		r = seterr(st, SEMQ_DECLINED, "%s", "no pending redo entry");
	else {
		*at = db_col_int64(s, 0);
		r = SEMQ_OK;
	}
	q_put(st, Q_REDO_NEXT_DUE, s);
	return r;
}

static int redo_update(struct store *st, int64_t id, int status, int tries,
		       int level, int64_t next_at, const char *last_error,
		       int64_t now)
{
	struct db_stmt *s = q_get(st, Q_REDO_UPDATE);
	int rc;

	if (!s)
		return SEMQ_ERR_DB;
	db_bind_int64(s, 1, id);
	db_bind_int64(s, 2, status);
	db_bind_int64(s, 3, tries);
	db_bind_int64(s, 4, level);
	db_bind_int64(s, 5, next_at);
	db_bind_text(s, 6, last_error);
	db_bind_int64(s, 7, now);
	rc = db_step(s);
	q_put(st, Q_REDO_UPDATE, s);
	return rc < 0 ? dberr(st, "updating tb_0033") : SEMQ_OK;
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
	/* Under the stream's lock: another instance may have run it. */
	r = redo_load_locked(st, id, &m, &row, strs);
	if (r)
		goto out;
	if (row.status != RS_PENDING) {
		r = seterr(st, SEMQ_DECLINED,
			   "redo %" PRId64 ": %s, not pending", id,
			   semq_status_name("tb_0033", row.status));
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
	struct db_stmt *s;
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
		db_bind_int64(s, 1, limit);
	} else {
		db_bind_int64(s, 1, status);
		db_bind_int64(s, 2, limit);
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
	struct db_stmt *s = NULL;
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
	db_bind_int64(s, 1, id);
	db_bind_int64(s, 2, now);
	rc = db_step(s);
	q_put(st, Q_REDO_RETRY, s);
	if (rc < 0) {
		r = dberr(st, "redo retry");
		goto out;
	}
	if (db_changes(st->db) == 0) {
		r = redo_load(st, id, &m, &row, strs);
		if (!r)
			r = seterr(st, SEMQ_DECLINED,
				   "redo %" PRId64 ": %s, not dead", id,
				   semq_status_name("tb_0033", row.status));
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
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, own = 0;

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
	db_bind_int64(s, 1, now);
	if (db_step(s) < 0) {
		r = dberr(st, "redo retry all dead");
		goto out;
	}
	if (n_out)
		*n_out = (unsigned)db_changes(st->db);
	r = SEMQ_OK;
out:
	q_put(st, Q_REDO_RETRY_ALL, s);
	return tx_close(st, own, r);
}

int store_redo_discard(struct store *st, int64_t id, const char *reason,
		       int64_t now)
{
	struct db_stmt *s = NULL;
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
	r = redo_load_locked(st, id, &m, &row, strs);
	if (r)
		goto out;
	if (row.status != RS_PENDING && row.status != RS_WAITING &&
	    row.status != RS_DEAD) {
		r = seterr(st, SEMQ_DECLINED,
			   "redo %" PRId64 ": %s, cannot be discarded", id,
			   semq_status_name("tb_0033", row.status));
		goto out;
	}
	s = q_get(st, Q_REDO_DISCARD);
	if (!s) {
		r = SEMQ_ERR_DB;
		goto out;
	}
	db_bind_int64(s, 1, id);
	db_bind_text(s, 2, reason);
	db_bind_int64(s, 3, now);
	rc = db_step(s);
	q_put(st, Q_REDO_DISCARD, s);
	s = NULL;
	if (rc < 0) {
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
	struct db_stmt *s = q_get(st, i);
	int rc, r = SEMQ_OK;

	if (!s)
		return SEMQ_ERR_DB;
	while ((rc = db_step(s)) == DB_ROW) {
		char origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];
		struct stat_row sr;

		col_text(origin, sizeof origin, s, 0);
		col_text(dest, sizeof dest, s, 1);
		sr.table = table;
		sr.origin = origin;
		sr.dest = dest;
		sr.status = col_int(s, 2);
		sr.count = db_col_int64(s, 3);
		sr.oldest = db_col_int64(s, 4);
		if (cb(ctx, &sr)) {
			*stopped = 1;
			break;
		}
	}
	if (rc < 0)
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
