/* SPDX-License-Identifier: MIT */
/*
 * Every SQL text the store runs, indexed by enum q (store_int.h), prepared
 * once on first use: store__q_sql[] for SQLite, and store__q_pg[] for the
 * statements whose PostgreSQL text differs (NULL: the same text).
 *
 * A status test on a path taken per message is a range, not an IN list of
 * three or more constants: SQLite evaluates such a list through an
 * ephemeral b-tree it builds and frees on every execution (measured: a third
 * of a single-row UPDATE). Over the status domains of the CHECK constraints
 * (tb_0031: 0, 4, 6, 100, -2; tb_0033: 0, 1, 2, -1, -2) the ranges are the
 * same sets: `BETWEEN -1 AND 1` is pending, waiting or dead; `<> 100` is
 * anything unconfirmed; `BETWEEN 0 AND 6` is unsent or in flight.
 */
#include "store_int.h"

const char *const store__q_sql[Q__N] = {
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
const char *const store__q_pg[Q__N] = {
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
