/* SPDX-License-Identifier: MIT */
/*
 * Every SQL text the store runs, indexed by enum q (store_int.h) and
 * prepared once on first use: each entry is {SQLite, PostgreSQL}, the
 * second NULL when the text is the same. PostgreSQL's differ by: no INDEXED
 * BY or unary + (its planner has statistics), BEGIN, explicit parameter
 * types where one parameter meets columns and literals of different types,
 * byte order for node ids (BYTES), the stream locks, GREATEST for max, and a
 * probe value that the server cannot compress away.
 *
 * Parameters: a message id binds as ?1 origin, ?2 dest, ?3 seq, ?4 life
 * (bind_id); an inbound stream as ?1 origin, ?2 dest, ?3 life
 * (bind_stream); what else a statement takes follows.
 *
 * A status test on a path taken per message is a range, not an IN list of
 * three or more constants: SQLite evaluates such a list through an
 * ephemeral b-tree it builds and frees on every execution (measured: a third
 * of a single-row UPDATE). Over the status domains of the CHECK constraints
 * (tb_0031: 0, 4, 6, 8, 100, -2; tb_0033: 0, 1, 2, -1, -2) the ranges are
 * the same sets: `BETWEEN -1 AND 1` is pending, waiting or dead; `<> 100` is
 * anything unconfirmed; `BETWEEN 0 AND 6` is unsent or in flight.
 *
 * The texts spell statuses by number: the numbers and their names are the
 * enums of types.h (enum out_status, enum redo_status, AS_*) and
 * semq_status_name(), the one table of names every presenter reads.
 */
#include "store_int.h"

/* SQLite: a new row the application wrote more into than the contract's
 * columns (an empty key, created_at NULL, a text payload, a column that is
 * the node's): Q_OUT_NUMBER_FIX resets it after its numbering. */
#define NEEDS_FIX                                                              \
	"(msg_key = '' OR created_at IS NULL OR status <> 0 OR attempts <> 0"  \
	" OR next_attempt_at <> 0 OR sent_at IS NOT NULL"                      \
	" OR acked_at IS NOT NULL OR result IS NOT NULL"                       \
	" OR digest IS NOT NULL OR prev_digest IS NOT NULL"                    \
	" OR custodian IS NOT NULL OR hops <> 0 OR typeof(payload) <> 'blob')"

/* A node's own rows are those whose origin is this node's id. */
#define NOT_OWN                                                                \
	" AND origin <> (SELECT value FROM semq_meta WHERE key = 'node_id')"

/*
 * A peer's word about an id (a RelayAck, a "not received" answer, a defer)
 * is about the message whose digest it carries: ?n, when given, must be the
 * row's. Another message under that id -- the filler of a seq a renumbering
 * gave up, or a message of this database's own timeline -- is left as it
 * is. A digest of 0 (bound as NULL: a revision-1 peer, or a row never sent)
 * matches any. The casts type the parameter for PostgreSQL.
 */
#define DIGEST_IS(n)                                                           \
	" AND (CAST(?" #n " AS BIGINT) IS NULL OR digest IS NULL"              \
	" OR digest = CAST(?" #n " AS BIGINT))"

/*
 * OUT_COLS and REDO_COLS with the payload's length in place of the payload,
 * for the scans and listings that never use the bytes (the wheel's refill,
 * the in-doubt scan, semqctl's and /redo's listings): store.c's col_msg
 * reads a column 7 named payload_len as the length and leaves m->payload
 * NULL. length() of a blob reads neither SQLite's overflow pages nor
 * PostgreSQL's TOAST (it is byteaoctetlen there). The static asserts keep
 * these lists the length of store_int.h's.
 */
#define MSG_COLS_LEN                                                           \
	"origin, dest, seq, type, msg_key, prev_seq, deliver_at,"              \
	" length(payload) AS payload_len"
#define OUT_TAIL                                                               \
	", created_at, status, attempts, next_attempt_at, sent_at,"            \
	" acked_at, result, last_error, id, life, digest, prev_digest,"        \
	" custodian, hops"
#define REDO_TAIL                                                              \
	", msg_created_at, status, tries, level, next_attempt_at,"             \
	" created_at, updated_at, last_error, discard_reason, id, life"
#define OUT_COLS_LEN MSG_COLS_LEN OUT_TAIL
#define REDO_COLS_LEN MSG_COLS_LEN REDO_TAIL
/*
 * The receipt purge's rows, stream by stream (schema 8 dropped
 * idx_0030_received: the walk needs no index of its own): from the
 * stream's first row (lo, one seek on idx_0030_1) up to the last row
 * before the first one received at or after the cut (young: at most the
 * limit's rows read on idx_0030_1 to find it), the watermark (w) and the
 * limit's seqs (hi); then those rows, on idx_0030_1 again. Work: one or
 * two seeks per stream plus the rows that go. SQLite: the CTEs are
 * materialised and CROSS JOIN keeps the loops in that order; PostgreSQL:
 * LATERAL with a LIMIT, so that the planner cannot flatten it into a scan
 * of the table.
 */
#define IN_PURGE_SQLITE                                                        \
	"DELETE FROM tb_0030 WHERE id IN (WITH b AS MATERIALIZED"              \
	" (SELECT s.origin, s.dest, s.life, s.confirmed_through AS w,"         \
	" (SELECT f.seq FROM tb_0030 AS f WHERE f.origin = s.origin"           \
	" AND f.dest = s.dest AND f.life = s.life ORDER BY f.seq LIMIT 1)"     \
	" AS lo FROM semq_stream_in AS s), c AS MATERIALIZED"                  \
	" (SELECT b.origin, b.dest, b.life, b.lo, min(b.w, b.lo + ?2 - 1,"     \
	" COALESCE((SELECT y.seq FROM tb_0030 AS y WHERE y.origin = b.origin"  \
	" AND y.dest = b.dest AND y.life = b.life AND y.seq >= b.lo"           \
	" AND y.seq <= b.lo + ?2 - 1 AND y.received_at >= ?1"                  \
	" ORDER BY y.seq LIMIT 1) - 1, b.w)) AS hi FROM b"                     \
	" WHERE b.lo <= b.w)"                                                  \
	" SELECT t.id FROM c CROSS JOIN tb_0030 AS t"                          \
	" WHERE t.origin = c.origin AND t.dest = c.dest AND t.life = c.life"   \
	" AND t.seq >= c.lo AND t.seq <= c.hi AND t.received_at < ?1"          \
	" AND t.ack_status = 1 LIMIT ?2)"
#define IN_PURGE_PG                                                            \
	"DELETE FROM tb_0030 WHERE id IN (SELECT t.id FROM semq_stream_in"     \
	" AS s CROSS JOIN LATERAL (SELECT f.seq AS lo FROM tb_0030 AS f"       \
	" WHERE f.origin = s.origin AND f.dest = s.dest AND f.life = s.life"   \
	" ORDER BY f.seq LIMIT 1) AS b CROSS JOIN LATERAL (SELECT"             \
	" LEAST(s.confirmed_through, b.lo + ?2::bigint - 1,"                   \
	" COALESCE((SELECT y.seq FROM tb_0030 AS y WHERE y.origin = s.origin"  \
	" AND y.dest = s.dest AND y.life = s.life AND y.seq >= b.lo"           \
	" AND y.seq <= b.lo + ?2::bigint - 1 AND y.received_at >= ?1"          \
	" ORDER BY y.seq LIMIT 1) - 1, s.confirmed_through)) AS hi) AS c"      \
	" CROSS JOIN LATERAL (SELECT t.id FROM tb_0030 AS t"                   \
	" WHERE t.origin = s.origin AND t.dest = s.dest AND t.life = s.life"   \
	" AND t.seq >= b.lo AND t.seq <= c.hi AND t.received_at < ?1"          \
	" AND t.ack_status = 1 ORDER BY t.seq LIMIT ?2) AS t LIMIT ?2)"
_Static_assert(sizeof(MSG_COLS OUT_TAIL) == sizeof(OUT_COLS),
	       "OUT_TAIL is not the rest of OUT_COLS");
_Static_assert(sizeof(MSG_COLS REDO_TAIL) == sizeof(REDO_COLS),
	       "REDO_TAIL is not the rest of REDO_COLS");

const struct q_text store__q[Q__N] = {
	[Q_BEGIN] = {"BEGIN IMMEDIATE", "BEGIN ISOLATION LEVEL READ COMMITTED"},
	[Q_COMMIT] = {"COMMIT", NULL},
	[Q_ROLLBACK] = {"ROLLBACK", NULL},
	[Q_SP] = {"SAVEPOINT semq_apply", NULL},
	[Q_SP_UNDO] = {"ROLLBACK TO semq_apply", NULL},
	[Q_SP_RELEASE] = {"RELEASE semq_apply", NULL},

	/* ---- inbound streams ---- */
	[Q_W_GET] = {"SELECT confirmed_through FROM semq_stream_in"
		     " WHERE origin = ?1 AND dest = ?2 AND life = ?3",
		     NULL},
	/* ?4: now, when the stream starts here (its life's first message) */
	[Q_W_CREATE] = {"INSERT INTO semq_stream_in(origin, dest, life,"
			" confirmed_through, started_at) VALUES (?1, ?2, ?3,"
			" 0, ?4) ON CONFLICT (origin, dest, life) DO NOTHING",
			NULL},
	[Q_W_SET] = {"UPDATE semq_stream_in SET confirmed_through = ?4"
		     " WHERE origin = ?1 AND dest = ?2 AND life = ?3",
		     NULL},
	/* per (origin, dest) the current life last */
	[Q_W_LIST] = {"SELECT origin, dest, life, confirmed_through"
		      " FROM semq_stream_in"
		      " ORDER BY origin, dest, started_at, life",
		      "SELECT origin, dest, life, confirmed_through FROM"
		      " semq_stream_in ORDER BY origin" BYTES ", dest" BYTES
		      ", started_at, life"},
	/* The life of (?1, ?2) that began here last: its current life. */
	[Q_W_CURRENT] = {"SELECT life FROM semq_stream_in"
			 " WHERE origin = ?1 AND dest = ?2"
			 " ORDER BY started_at DESC, life DESC LIMIT 1",
			 NULL},
	/* The life of origin ?1 whose stream began here last, as receiver or
	 * relay. */
	[Q_ORIGIN_LIFE] = {"SELECT life FROM (SELECT life, started_at FROM"
			   " semq_stream_in WHERE origin = ?1 UNION ALL"
			   " SELECT life, started_at FROM semq_stream_relay"
			   " WHERE origin = ?1) ORDER BY started_at DESC,"
			   " life DESC LIMIT 1",
			   "SELECT life FROM (SELECT life, started_at FROM"
			   " semq_stream_in WHERE origin = ?1 UNION ALL"
			   " SELECT life, started_at FROM semq_stream_relay"
			   " WHERE origin = ?1) u ORDER BY started_at DESC,"
			   " life DESC LIMIT 1"},
	/* The highest seq recorded of a stream (its watermark aside). */
	[Q_W_HIGH] = {"SELECT max(seq) FROM tb_0030"
		      " WHERE origin = ?1 AND dest = ?2 AND life = ?3",
		      NULL},
	[Q_W_LOCK] = {NULL, "SELECT confirmed_through FROM semq_stream_in"
			    " WHERE origin = ?1 AND dest = ?2 AND life = ?3"
			    " FOR UPDATE"},
	[Q_W_LOCK_SKIP] = {NULL,
			   "SELECT confirmed_through FROM semq_stream_in"
			   " WHERE origin = ?1 AND dest = ?2 AND life = ?3"
			   " FOR UPDATE SKIP LOCKED"},

	/* ---- tb_0030 ---- */
	[Q_IN_GET] = {"SELECT result, digest FROM tb_0030 WHERE origin = ?1"
		      " AND dest = ?2 AND seq = ?3 AND life = ?4",
		      NULL},
	/* A copy recorded meanwhile by another connection (an instance that
	 * does not hold the stream's lock) is a duplicate, not an error that
	 * would abort the batch. */
	[Q_IN_INSERT] = {"INSERT INTO tb_0030(origin, dest, seq, life, type,"
			 " msg_key, prev_seq, received_at, via, result,"
			 " ack_status, confirm_need, confirm_got, digest)"
			 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 0,"
			 " ?11, 0, ?12)"
			 " ON CONFLICT (origin, dest, life, seq) DO NOTHING",
			 NULL},
	[Q_IN_SET_RESULT] = {"UPDATE tb_0030 SET result = ?5 WHERE origin = ?1"
			     " AND dest = ?2 AND seq = ?3 AND life = ?4",
			     NULL},
	/* SQLite: without RETURNING, which gathers its rows in an ephemeral
	 * table opened and freed on every run (13,000 of the 143,000 SQLite
	 * instructions of a received message, callgrind); Q_IN_ACK_STATUS
	 * reads the row after it. PostgreSQL: one round trip. */
	[Q_IN_ACK] = {"UPDATE tb_0030 SET confirm_got = confirm_got | ?5,"
		      " ack_status = CASE WHEN ((confirm_got | ?5)"
		      " & confirm_need) = confirm_need THEN 1 ELSE ack_status"
		      " END WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		      " AND life = ?4",
		      "UPDATE tb_0030 SET confirm_got = confirm_got"
		      " | ?5::bigint, ack_status = CASE WHEN ((confirm_got"
		      " | ?5::bigint) & confirm_need) = confirm_need THEN 1"
		      " ELSE ack_status END WHERE origin = ?1 AND dest = ?2"
		      " AND seq = ?3 AND life = ?4 RETURNING ack_status"},
	[Q_IN_ACK_STATUS] = {"SELECT ack_status FROM tb_0030 WHERE origin = ?1"
			     " AND dest = ?2 AND seq = ?3 AND life = ?4",
			     NULL},
	[Q_IN_UNACKED] = {"SELECT origin, dest, seq, result, confirm_need,"
			  " confirm_got, via, life, digest FROM tb_0030"
			  " WHERE ack_status = 0 AND received_at < ?1"
			  " ORDER BY received_at, id LIMIT ?2",
			  NULL},
	[Q_IN_RUN] = {"SELECT seq, ack_status FROM tb_0030 WHERE origin = ?1"
		      " AND dest = ?2 AND life = ?3 AND seq > ?4"
		      " ORDER BY seq",
		      NULL},
	/* Rows the watermark passed, received before ?1, at most ?2, from
	 * the bottom of each stream up to its first row received at or after
	 * ?1 (IN_PURGE_SQLITE): a row received late holds back the rows
	 * above it until it is old too (seq order is receipt order but for a
	 * message that came late: rare, and for at most the retention). */
	[Q_IN_PURGE] = {IN_PURGE_SQLITE, IN_PURGE_PG},
	[Q_IN_LIST_ALL] = {"SELECT " IN_COLS " FROM tb_0030"
			   " ORDER BY id DESC LIMIT ?1",
			   NULL},
	[Q_IN_LIST] = {"SELECT " IN_COLS " FROM tb_0030 WHERE origin = ?1"
		       " ORDER BY id DESC LIMIT ?2",
		       NULL},

	/* ---- tb_0033 (a key of a stream: ?1 origin, ?2 dest, ?3 life,
	 * ?4 msg_key) ---- */
	[Q_REDO_INSERT] = {REDO_INSERT_SQL, NULL},
	[Q_REDO_KEY_BUSY] = {"SELECT 1 FROM tb_0033 WHERE origin = ?1"
			     " AND dest = ?2 AND life = ?3 AND msg_key = ?4"
			     " AND status BETWEEN -1 AND 1 LIMIT 1",
			     NULL},
	[Q_REDO_KEY_HEAD] = {"SELECT 1 FROM tb_0033 WHERE origin = ?1"
			     " AND dest = ?2 AND life = ?3 AND msg_key = ?4"
			     " AND status IN (0, -1) LIMIT 1",
			     NULL},
	[Q_REDO_KEY_NEXT] = {"SELECT id, deliver_at FROM tb_0033"
			     " WHERE origin = ?1 AND dest = ?2 AND life = ?3"
			     " AND msg_key = ?4 AND status = 1"
			     " ORDER BY seq LIMIT 1",
			     NULL},
	[Q_REDO_KEY_WAITING] = {"SELECT count(*) FROM tb_0033"
				" WHERE origin = ?1 AND dest = ?2 AND life = ?3"
				" AND msg_key = ?4 AND status = 1",
				NULL},
	[Q_REDO_RELEASE] = {"UPDATE tb_0033 SET status = 0,"
			    " next_attempt_at = ?2, updated_at = ?3"
			    " WHERE id = ?1 AND status = 1",
			    NULL},
	[Q_REDO_GET] = {"SELECT " REDO_COLS " FROM tb_0033 WHERE id = ?1",
			NULL},
	[Q_REDO_ORIGIN] = {"SELECT origin FROM tb_0033 WHERE id = ?1", NULL},
	[Q_REDO_STATUS_OF] = {"SELECT status FROM tb_0033 WHERE origin = ?1"
			      " AND dest = ?2 AND seq = ?3 AND life = ?4",
			      NULL},
	[Q_REDO_ID_OF] = {"SELECT id FROM tb_0033 WHERE origin = ?1"
			  " AND dest = ?2 AND seq = ?3 AND life = ?4",
			  NULL},
	[Q_REDO_DUE] = {"SELECT " REDO_COLS_LEN " FROM tb_0033"
			" WHERE status = 0 AND next_attempt_at <= ?1"
			" ORDER BY next_attempt_at, id LIMIT ?2",
			NULL},
	[Q_REDO_NEXT_DUE] = {"SELECT min(next_attempt_at) FROM tb_0033"
			     " WHERE status = 0",
			     NULL},
	[Q_REDO_LIST_ALL] = {"SELECT " REDO_COLS_LEN " FROM tb_0033"
			     " ORDER BY id LIMIT ?1",
			     NULL},
	[Q_REDO_LIST] = {"SELECT " REDO_COLS_LEN
			 " FROM tb_0033 WHERE status = ?1"
			 " ORDER BY id LIMIT ?2",
			 NULL},
	[Q_REDO_UPDATE] = {"UPDATE tb_0033 SET status = ?2, tries = ?3,"
			   " level = ?4, next_attempt_at = ?5,"
			   " last_error = ?6, updated_at = ?7 WHERE id = ?1",
			   NULL},
	[Q_REDO_RETRY] = {"UPDATE tb_0033 SET status = 0, level = 0,"
			  " next_attempt_at = ?2, updated_at = ?2"
			  " WHERE id = ?1 AND status = -1",
			  NULL},
	/* A discarded entry will not run: its next_attempt_at is no later
	 * than the discard, so that the purge's range finds it. */
	[Q_REDO_DISCARD] = {"UPDATE tb_0033 SET status = -2,"
			    " discard_reason = ?2, updated_at = ?3,"
			    " next_attempt_at = CASE WHEN next_attempt_at > ?3"
			    " THEN ?3 ELSE next_attempt_at END"
			    " WHERE id = ?1 AND status BETWEEN -1 AND 1",
			    NULL},
	/* The head of a key (?1..?3 its stream, ?4 the key): what a waiting
	 * entry waits for. */
	[Q_REDO_HEAD_OF] = {"SELECT id, seq, status, next_attempt_at,"
			    " deliver_at FROM tb_0033 WHERE origin = ?1"
			    " AND dest = ?2 AND life = ?3 AND msg_key = ?4"
			    " AND status IN (0, -1) ORDER BY seq LIMIT 1",
			    NULL},
	/* Done and discarded entries finished before ?1: next_attempt_at is
	 * at or before the finish (a run is never early), so the range on
	 * idx_0033_due bounds the scan. */
	[Q_REDO_PURGE] = {"DELETE FROM tb_0033 WHERE id IN (SELECT id"
			  " FROM tb_0033 WHERE (status = 2 OR status = -2)"
			  " AND next_attempt_at < ?1 AND updated_at < ?1"
			  " LIMIT ?2)",
			  NULL},

	/* ---- tb_0031 ---- */
	/* The application's insert: the row is numbered by store_number_new
	 * (store_enqueue does it at once, then reads the seq by id). */
	[Q_OUT_INSERT] = {"INSERT INTO tb_0031(dest, type, msg_key, payload,"
			  " deliver_at, created_at)"
			  " VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
			  NULL},
	[Q_OUT_SEQ] = {"SELECT seq FROM tb_0031 WHERE id = ?1", NULL},
	/* The counter of stream (?1 origin, ?2 dest) as numbering reads it:
	 * on PostgreSQL locked to the end of the batch, so that a renumbering
	 * by semqctl meanwhile hands out no seq that this batch does. */
	[Q_OUT_LAST_SEQ_LOCK] = {"SELECT last_seq FROM semq_stream_out"
				 " WHERE origin = ?1 AND dest = ?2",
				 "SELECT last_seq FROM semq_stream_out"
				 " WHERE origin = ?1 AND dest = ?2 FOR UPDATE"},
	/* The rows still to number (migration 0007), oldest first. */
	[Q_OUT_NEW] = {"SELECT id, dest, NULLIF(msg_key, ''), " NEEDS_FIX
		       " FROM tb_0031 INDEXED BY idx_0031_new WHERE seq IS NULL"
		       " ORDER BY id LIMIT ?1",
		       "SELECT id, dest, NULLIF(msg_key, ''), 0 FROM tb_0031"
		       " WHERE seq IS NULL ORDER BY id LIMIT ?1"},
	/* Of several instances on one PostgreSQL database, one numbers at a
	 * time; the others leave it to that one ('SEMQ' + 1). */
	[Q_OUT_NUMBER_LOCK] =
		{"SELECT 1",
		 "SELECT pg_try_advisory_xact_lock(1397050706)::int"},
	[Q_OUT_NUMBER_WAIT] =
		{"SELECT 1", "SELECT 1 FROM pg_advisory_xact_lock(1397050706)"},
	/* prev_seq of a new row: the last numbered row of its key (?1 origin,
	 * ?2 dest, ?3 key), as the fill trigger of 0001-0006 looked it up. */
	[Q_OUT_KEY_LAST] = {"SELECT max(seq) FROM tb_0031 WHERE origin = ?1"
			    " AND dest = ?2 AND msg_key = ?3"
			    " AND seq IS NOT NULL",
			    NULL},
	/* Numbers row ?1: ?2 origin, ?3 life, ?4 seq, ?5 prev_seq — only the
	 * columns numbering gives, so that SQLite rewrites the four index
	 * entries that hold them and no other (every column in SET moves
	 * the entries of each index that has it). */
	[Q_OUT_NUMBER] = {"UPDATE tb_0031 SET origin = ?2, life = ?3, seq = ?4,"
			  " prev_seq = ?5 WHERE id = ?1 AND seq IS NULL",
			  NULL},
	/* Row ?1 after its numbering, if Q_OUT_NEW found that the
	 * application wrote into a column that is the node's (NEEDS_FIX; ?2
	 * now): reset as the fill trigger of 0001-0006 did. A deliver_at left
	 * NULL reads as 0 and stays. SQLite only: on PostgreSQL tb_0031_check
	 * did all this before the insert, and Q_OUT_NEW never asks for it. */
	[Q_OUT_NUMBER_FIX] =
		{"UPDATE tb_0031 SET msg_key = NULLIF(msg_key, ''),"
		 " created_at = COALESCE(created_at, ?2), status = 0,"
		 " attempts = 0, next_attempt_at = 0, sent_at = NULL,"
		 " acked_at = NULL, result = NULL, digest = NULL,"
		 " prev_digest = NULL, custodian = NULL, hops = 0,"
		 " payload = CAST(payload AS BLOB) WHERE id = ?1",
		 NULL},
	/* The counter of stream (?1, ?2) after a numbering: ?3, never lower. */
	[Q_OUT_SET_LAST] =
		{"INSERT INTO semq_stream_out(origin, dest, last_seq)"
		 " VALUES (?1, ?2, ?3) ON CONFLICT (origin, dest)"
		 " DO UPDATE SET last_seq = max(last_seq,"
		 " excluded.last_seq)",
		 "INSERT INTO semq_stream_out AS s (origin, dest,"
		 " last_seq) VALUES (?1, ?2, ?3)"
		 " ON CONFLICT (origin, dest) DO UPDATE SET"
		 " last_seq = GREATEST(s.last_seq, excluded.last_seq)"},
	[Q_OUT_COPY] = {"INSERT INTO tb_0031(origin, dest, seq, life, type,"
			" msg_key, prev_seq, deliver_at, payload, created_at,"
			" status, next_attempt_at, digest, prev_digest, hops)"
			" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
			" ?11, ?12, ?13, ?14, ?15)"
			" ON CONFLICT (origin, dest, life, seq) DO NOTHING",
			NULL},
	/* Skip-scan over the partial index idx_0031_unsent (dest, origin,
	 * seq): one seek per stream. Without statistics the planner would
	 * take idx_0031_due and sort every unsent row, hence INDEXED BY.
	 * Two seeks, not a row-value comparison: (dest, origin) > (?1, ?2)
	 * steps over every unsent row of the current stream (measured:
	 * 60 ms per call with 400,000 unsent rows, half of a relay-routed
	 * origin's CPU while draining a backlog). */
	[Q_OUT_NEXT_STREAM] =
		{"SELECT dest, origin FROM (SELECT dest, origin FROM tb_0031"
		 " INDEXED BY idx_0031_unsent WHERE status = 0 AND dest = ?1"
		 " AND origin > ?2 ORDER BY origin LIMIT 1) UNION ALL"
		 " SELECT dest, origin FROM (SELECT dest, origin FROM tb_0031"
		 " INDEXED BY idx_0031_unsent WHERE status = 0 AND dest > ?1"
		 " AND origin IS NOT NULL"
		 " ORDER BY dest, origin LIMIT 1) ORDER BY 1, 2 LIMIT 1",
		 "SELECT dest, origin FROM (SELECT * FROM (SELECT dest, origin"
		 " FROM tb_0031 WHERE status = 0 AND dest = ?1"
		 " AND origin" BYTES " > ?2 ORDER BY origin" BYTES
		 " LIMIT 1) a UNION ALL SELECT * FROM (SELECT dest, origin"
		 " FROM tb_0031 WHERE status = 0 AND dest" BYTES " > ?1"
		 " AND origin IS NOT NULL"
		 " ORDER BY dest" BYTES ", origin" BYTES " LIMIT 1) b) u"
		 " ORDER BY dest" BYTES ", origin" BYTES " LIMIT 1"},
	[Q_OUT_NEXT_STREAM_DEST] = {"SELECT dest, origin FROM tb_0031"
				    " INDEXED BY idx_0031_unsent"
				    " WHERE status = 0 AND dest = ?1"
				    " AND origin > ?2 ORDER BY origin LIMIT 1",
				    "SELECT dest, origin FROM tb_0031"
				    " WHERE status = 0 AND dest = ?1"
				    " AND origin" BYTES " > ?2"
				    " ORDER BY origin" BYTES " LIMIT 1"},
	/* What `window` bounds: rows sent and unanswered on the link (4),
	 * and those a relay passed on (6 without a custodian) — never those
	 * a relay holds in custody. Over the partial idx_0031_flight, whose
	 * condition the query repeats word for word. */
	[Q_OUT_INFLIGHT] = {"SELECT count(*) FROM tb_0031"
			    " INDEXED BY idx_0031_flight"
			    " WHERE (status = 4 OR (status = 6 AND custodian"
			    " IS NULL)) AND origin = ?1 AND dest = ?2",
			    "SELECT count(*) FROM tb_0031"
			    " WHERE (status = 4 OR (status = 6 AND custodian"
			    " IS NULL)) AND origin = ?1 AND dest = ?2"},
	/* ?5: the life (sendable_life) */
	[Q_OUT_SENDABLE] = {"SELECT " OUT_COLS " FROM tb_0031"
			    " INDEXED BY idx_0031_unsent WHERE status = 0"
			    " AND dest = ?1 AND origin = ?2 AND life = ?5"
			    " AND next_attempt_at <= ?3 ORDER BY seq LIMIT ?4",
			    "SELECT " OUT_COLS " FROM tb_0031"
			    " WHERE status = 0 AND dest = ?1 AND origin = ?2"
			    " AND life = ?5 AND next_attempt_at <= ?3"
			    " ORDER BY seq LIMIT ?4"},
	/* The next life above ?3 with unsent rows of stream (?1 dest, ?2
	 * origin), and when it began at this relay (NULL: unknown). */
	[Q_OUT_NEXT_LIFE] = {"SELECT u.life, (SELECT r.started_at FROM"
			     " semq_stream_relay r WHERE r.origin = ?2 AND"
			     " r.dest = ?1 AND r.life = u.life) FROM (SELECT"
			     " life FROM tb_0031 INDEXED BY idx_0031_unsent"
			     " WHERE status = 0 AND dest = ?1 AND origin = ?2"
			     " AND life > ?3 ORDER BY life LIMIT 1) u",
			     "SELECT u.life, (SELECT r.started_at FROM"
			     " semq_stream_relay r WHERE r.origin = ?2 AND"
			     " r.dest = ?1 AND r.life = u.life) FROM (SELECT"
			     " life FROM tb_0031 WHERE status = 0 AND"
			     " dest = ?1 AND origin = ?2 AND life > ?3::bigint"
			     " ORDER BY life LIMIT 1) u"},
	[Q_OUT_STATUS] = {"SELECT status FROM tb_0031 WHERE origin = ?1"
			  " AND dest = ?2 AND seq = ?3 AND life = ?4",
			  NULL},
	/* ?7: the digest, fixed the first time the row is sent (NULL: keep) */
	[Q_OUT_MARK_SENT] = {"UPDATE tb_0031 SET status = 4,"
			     " attempts = attempts + 1, sent_at = ?5,"
			     " next_attempt_at = ?6,"
			     " digest = COALESCE(digest, ?7)"
			     " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			     " AND life = ?4 AND status = 0",
			     NULL},
	[Q_OUT_MARK_RELAY] = {"UPDATE tb_0031 SET status = 6,"
			      " next_attempt_at = ?5, custodian = NULL"
			      " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			      " AND life = ?4 AND status = 4" DIGEST_IS(6),
			      NULL},
	[Q_OUT_MARK_UNSENT] = {"UPDATE tb_0031 SET status = 0,"
			       " next_attempt_at = ?5, last_error = ?6,"
			       " custodian = NULL"
			       " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			       " AND life = ?4"
			       " AND status IN (4, 6)" DIGEST_IS(7),
			       NULL},
	/* next_attempt_at of a confirmed row is its acked_at: the purge
	 * deadline runs over idx_0031_due like every other. A cancelled row
	 * whose tombstone was recorded stays cancelled; one that took effect
	 * before the cancel arrived becomes confirmed. A verdict about
	 * another message under the id (?7, its digest, is not the row's: a
	 * timeline this database lost) confirms nothing. */
	[Q_OUT_MARK_CONFIRMED] =
		{"UPDATE tb_0031 SET status = CASE WHEN status = -2"
		 " AND ?5 = 4 THEN -2 ELSE 100 END, result = ?5,"
		 " acked_at = ?6, next_attempt_at = ?6, custodian = NULL"
		 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3 AND life = ?4"
		 " AND status <> 100"
		 " AND (?7 IS NULL OR digest IS NULL OR digest = ?7)",
		 "UPDATE tb_0031 SET status = CASE WHEN status = -2"
		 " AND ?5::bigint = 4 THEN -2 ELSE 100 END,"
		 " result = ?5::bigint, acked_at = ?6, next_attempt_at = ?6,"
		 " custodian = NULL"
		 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3 AND life = ?4"
		 " AND status <> 100"
		 " AND (?7::bigint IS NULL OR digest IS NULL"
		 " OR digest = ?7::bigint)"},
	/* A held row has no tombstone to send: its destination could not
	 * tell what it has under that seq. It ends cancelled at once. */
	[Q_OUT_CANCEL] =
		{"UPDATE tb_0031 SET status = -2, next_attempt_at = ?5,"
		 " result = CASE WHEN status = 8 THEN 4 ELSE NULL END,"
		 " acked_at = CASE WHEN status = 8 THEN ?5 END"
		 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		 " AND life = ?4 AND status BETWEEN 0 AND 8",
		 "UPDATE tb_0031 SET status = -2,"
		 " next_attempt_at = ?5::bigint,"
		 " result = CASE WHEN status = 8 THEN 4 ELSE NULL END,"
		 " acked_at = CASE WHEN status = 8 THEN ?5::bigint END"
		 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		 " AND life = ?4 AND status BETWEEN 0 AND 8"},
	/* ?5 result (RES_UNDECIDED ...), ?6 why, ?7 now; an unanswered
	 * cancel too (its destination cannot tell what it would cancel). */
	[Q_OUT_HOLD] = {"UPDATE tb_0031 SET status = 8, result = ?5,"
			" last_error = ?6, next_attempt_at = ?7,"
			" custodian = NULL"
			" WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			" AND life = ?4 AND (status BETWEEN 0 AND 6"
			" OR (status = -2 AND result IS NULL))",
			NULL},
	[Q_OUT_IN_DOUBT] = {"SELECT " OUT_COLS_LEN " FROM tb_0031"
			    " WHERE status IN (4, 6) AND next_attempt_at <= ?1"
			    " ORDER BY next_attempt_at, id LIMIT ?2",
			    NULL},
	[Q_OUT_DEFER] = {"UPDATE tb_0031 SET next_attempt_at = ?5"
			 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			 " AND life = ?4 AND (status IN (4, 6) OR"
			 " (status = -2 AND result IS NULL))" DIGEST_IS(6),
			 NULL},
	/* A relay's copy (never a row of this node's own) is gone once the
	 * destination confirmed it; ?5, when given, must be its digest (an
	 * answer about another message with that id leaves it). */
	[Q_OUT_DROP_COPY] = {"DELETE FROM tb_0031 WHERE origin = ?1"
			     " AND dest = ?2 AND seq = ?3 AND life = ?4"
			     " AND (?5 IS NULL OR digest IS NULL"
			     " OR digest = ?5)" NOT_OWN,
			     "DELETE FROM tb_0031 WHERE origin = ?1"
			     " AND dest = ?2 AND seq = ?3 AND life = ?4"
			     " AND (?5::bigint IS NULL OR digest IS NULL"
			     " OR digest = ?5::bigint)" NOT_OWN},
	[Q_OUT_TOMBSTONES] = {"SELECT " OUT_COLS " FROM tb_0031"
			      " WHERE status = -2 AND next_attempt_at <= ?1"
			      " AND result IS NULL"
			      " ORDER BY next_attempt_at, id LIMIT ?2",
			      NULL},
	[Q_OUT_PURGE] = {"DELETE FROM tb_0031 WHERE id IN (SELECT id"
			 " FROM tb_0031 WHERE (status = 100 OR (status = -2"
			 " AND result IS NOT NULL)) AND next_attempt_at < ?1"
			 " AND acked_at < ?1 ORDER BY next_attempt_at"
			 " LIMIT ?2)",
			 NULL},
	[Q_OUT_GET] = {"SELECT " OUT_COLS " FROM tb_0031 WHERE origin = ?1"
		       " AND dest = ?2 AND seq = ?3 AND life = ?4",
		       NULL},
	[Q_OUT_DIGEST] = {"SELECT digest, status FROM tb_0031 WHERE origin = ?1"
			  " AND dest = ?2 AND seq = ?3 AND life = ?4",
			  NULL},
	/* The key predecessor of row ?1..?4 (its prev_seq in the same
	 * stream and life): seq, digest, and whether it is still open
	 * (unconfirmed, or a cancel not answered yet). */
	[Q_OUT_PRED] = {"SELECT p.seq, p.digest, CASE WHEN p.status <> 100"
			" AND (p.status <> -2 OR p.result IS NULL) THEN 1"
			" ELSE 0 END FROM tb_0031 r"
			" JOIN tb_0031 p ON p.origin = r.origin"
			" AND p.dest = r.dest AND p.life = r.life"
			" AND p.seq = r.prev_seq WHERE r.origin = ?1"
			" AND r.dest = ?2 AND r.seq = ?3 AND r.life = ?4"
			" AND r.prev_seq > 0",
			NULL},
	/* The row that holds digest ?5 under a later seq than ?3 of its
	 * stream: where a renumbering moved the message. */
	[Q_OUT_MOVED] = {"SELECT seq FROM tb_0031 WHERE origin = ?1"
			 " AND dest = ?2 AND life = ?4 AND seq > ?3"
			 " AND digest = ?5 LIMIT 1",
			 NULL},
	[Q_OUT_LIST_ALL] = {"SELECT " OUT_COLS_LEN " FROM tb_0031"
			    " ORDER BY id DESC LIMIT ?1",
			    NULL},
	[Q_OUT_LIST] = {"SELECT " OUT_COLS_LEN " FROM tb_0031 WHERE status = ?1"
			" ORDER BY id DESC LIMIT ?2",
			NULL},

	/* ---- renumbering and stream counters ---- */
	/* The row ?4 of stream (?1, ?2, life ?3) and the later unconfirmed
	 * rows of its key ?5 (none when it has no key), in seq order. */
	[Q_OUT_CHAIN] = {"SELECT seq, digest FROM tb_0031 WHERE origin = ?1"
			 " AND dest = ?2 AND life = ?3 AND seq >= ?4"
			 " AND (seq = ?4 OR msg_key = ?5)"
			 " AND (status BETWEEN 0 AND 8"
			 " OR (status = -2 AND result IS NULL))"
			 " ORDER BY seq",
			 NULL},
	[Q_OUT_NEXT_SEQ] = {"UPDATE semq_stream_out SET last_seq = last_seq + 1"
			    " WHERE origin = ?1 AND dest = ?2"
			    " RETURNING last_seq",
			    NULL},
	/* ?5 new seq, ?6 its prev_seq, ?7 now, ?8 why. A cancelled row keeps
	 * its status (its tombstone goes out under the new seq). */
	[Q_OUT_RENUMBER] = {"UPDATE tb_0031 SET seq = ?5, prev_seq = ?6,"
			    " status = CASE WHEN status = -2 THEN -2 ELSE 0"
			    " END, next_attempt_at = ?7, last_error = ?8,"
			    " result = NULL, custodian = NULL"
			    " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			    " AND life = ?4",
			    NULL},
	[Q_OUT_LAST_SEQ] = {"SELECT last_seq FROM semq_stream_out"
			    " WHERE origin = ?1 AND dest = ?2",
			    NULL},
	/* The counter of (?1, ?2) moves up to ?3 (never down): ?4 now,
	 * ?5 what happened, for semqctl status. */
	[Q_OUT_RESYNC] =
		{"INSERT INTO semq_stream_out(origin, dest, last_seq,"
		 " resyncs, resync_at, resync_note)"
		 " VALUES (?1, ?2, ?3, 1, ?4, ?5)"
		 " ON CONFLICT (origin, dest) DO UPDATE SET"
		 " last_seq = max(last_seq, excluded.last_seq),"
		 " resyncs = resyncs + 1, resync_at = excluded.resync_at,"
		 " resync_note = excluded.resync_note",
		 "INSERT INTO semq_stream_out AS s (origin, dest,"
		 " last_seq, resyncs, resync_at, resync_note)"
		 " VALUES (?1, ?2, ?3, 1, ?4, ?5)"
		 " ON CONFLICT (origin, dest) DO UPDATE SET"
		 " last_seq = GREATEST(s.last_seq, excluded.last_seq),"
		 " resyncs = s.resyncs + 1,"
		 " resync_at = excluded.resync_at,"
		 " resync_note = excluded.resync_note"},
	/* A peer has seen stream (?1, ?2) up to ?3. */
	[Q_OUT_SEEN] = {"UPDATE semq_stream_out SET seen_high ="
			" max(seen_high, ?3) WHERE origin = ?1 AND dest = ?2",
			"UPDATE semq_stream_out SET seen_high ="
			" GREATEST(seen_high, ?3::bigint) WHERE origin = ?1"
			" AND dest = ?2"},
	[Q_OUT_SEEN_GET] = {"SELECT seen_high FROM semq_stream_out"
			    " WHERE origin = ?1 AND dest = ?2",
			    NULL},
	/* A filler under seq ?3 that a renumbering gave up: a cancel of
	 * nothing (no key, no predecessor, no document), digest ?6, sent
	 * from ?5 on; ?7 says why. */
	[Q_OUT_FILLER] =
		{"INSERT INTO tb_0031(origin, dest, seq, life, type, msg_key,"
		 " prev_seq, deliver_at, payload, created_at, status,"
		 " next_attempt_at, digest, last_error) VALUES (?1, ?2, ?3,"
		 " ?4, 0, NULL, 0, 0, x'', ?5, -2, ?5, ?6, ?7)"
		 " ON CONFLICT (origin, dest, life, seq) DO NOTHING",
		 "INSERT INTO tb_0031(origin, dest, seq, life, type, msg_key,"
		 " prev_seq, deliver_at, payload, created_at, status,"
		 " next_attempt_at, digest, last_error) VALUES (?1, ?2, ?3,"
		 " ?4, 0, NULL, 0, 0, ''::bytea, ?5, -2, ?5, ?6, ?7)"
		 " ON CONFLICT (origin, dest, life, seq) DO NOTHING"},
	[Q_OUT_STREAMS] = {"SELECT dest, last_seq, resyncs, resync_at,"
			   " resync_note, life_hidden FROM semq_stream_out"
			   " WHERE origin = ?1 ORDER BY dest",
			   "SELECT dest, last_seq, resyncs, resync_at,"
			   " resync_note, life_hidden FROM semq_stream_out"
			   " WHERE origin = ?1 ORDER BY dest" BYTES},
	/* The stream to ?2 went through a revision-1 node: its ids go
	 * without their life from now on. */
	[Q_OUT_HIDE_LIFE] = {"UPDATE semq_stream_out SET life_hidden = 1"
			     " WHERE origin = ?1 AND dest = ?2"
			     " AND life_hidden = 0",
			     NULL},

	/* ---- a relay's record of the streams it relayed ---- */
	/* ?4 the seq relayed, ?5 now */
	[Q_RELAY_NOTE] = {"INSERT INTO semq_stream_relay(origin, dest, life,"
			  " high_seq, started_at, updated_at)"
			  " VALUES (?1, ?2, ?3, ?4, ?5, ?5)"
			  " ON CONFLICT (origin, dest, life) DO UPDATE SET"
			  " high_seq = max(high_seq, excluded.high_seq),"
			  " updated_at = excluded.updated_at",
			  "INSERT INTO semq_stream_relay AS r (origin, dest,"
			  " life, high_seq, started_at, updated_at)"
			  " VALUES (?1, ?2, ?3, ?4, ?5, ?5)"
			  " ON CONFLICT (origin, dest, life) DO UPDATE SET"
			  " high_seq = GREATEST(r.high_seq, excluded.high_seq),"
			  " updated_at = excluded.updated_at"},
	[Q_RELAY_LIST] = {"SELECT dest, high_seq FROM semq_stream_relay"
			  " WHERE origin = ?1 AND life = ?2 ORDER BY dest",
			  "SELECT dest, high_seq FROM semq_stream_relay"
			  " WHERE origin = ?1 AND life = ?2"
			  " ORDER BY dest" BYTES},
	[Q_RELAY_HIGH] = {"SELECT high_seq FROM semq_stream_relay"
			  " WHERE origin = ?1 AND dest = ?2 AND life = ?3",
			  NULL},
	[Q_RELAY_CURRENT] = {"SELECT life FROM semq_stream_relay"
			     " WHERE origin = ?1 AND dest = ?2"
			     " ORDER BY started_at DESC, life DESC LIMIT 1",
			     NULL},

	/* ---- custody (store_custody.c) ---- */
	/* RelayAck STORED: ?5 the relay, ?6 when to ask it again. A row in
	 * flight or passed on becomes 6 in its custody; an unanswered cancel
	 * stays a cancel, held there. */
	[Q_OUT_MARK_CUSTODY] =
		{"UPDATE tb_0031 SET status = CASE WHEN"
		 " status = -2 THEN -2 ELSE 6 END,"
		 " custodian = ?5, next_attempt_at = ?6"
		 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		 " AND life = ?4 AND (status IN (4, 6)"
		 " OR (status = -2 AND result IS NULL))" DIGEST_IS(7),
		 NULL},
	/* Cancels due for destination ?3, over idx_0031_tomb. */
	[Q_OUT_TOMBSTONES_TO] = {"SELECT " OUT_COLS " FROM tb_0031"
				 " INDEXED BY idx_0031_tomb"
				 " WHERE status = -2 AND result IS NULL"
				 " AND dest = ?3 AND next_attempt_at <= ?1"
				 " ORDER BY next_attempt_at, id LIMIT ?2",
				 "SELECT " OUT_COLS " FROM tb_0031"
				 " WHERE status = -2 AND result IS NULL"
				 " AND dest = ?3 AND next_attempt_at <= ?1"
				 " ORDER BY next_attempt_at, id LIMIT ?2"},
	/* This node's rows in a relay's custody, per destination and relay,
	 * with the earliest hand-over. */
	/* This node's confirmed rows whose destination's entry was dead
	 * (result 5, idx_0031_dead), per destination, with the first such
	 * confirmation: (dest, "", n, since) as Q_OUT_WAITING. */
	[Q_OUT_DEAD_AT] =
		{"SELECT dest, '', count(*), min(acked_at)"
		 " FROM tb_0031 WHERE result = 5 AND status = 100"
		 " AND origin = ?1 GROUP BY dest ORDER BY dest",
		 "SELECT dest, '', count(*), min(acked_at)"
		 " FROM tb_0031 WHERE result = 5 AND status = 100"
		 " AND origin = ?1 GROUP BY dest ORDER BY dest" BYTES},
	[Q_OUT_WAITING] = {"SELECT dest, custodian, count(*), min(sent_at)"
			   " FROM tb_0031 WHERE status IN (6, -2)"
			   " AND custodian IS NOT NULL AND origin = ?1"
			   " GROUP BY dest, custodian ORDER BY dest, custodian",
			   "SELECT dest, custodian, count(*), min(sent_at)"
			   " FROM tb_0031 WHERE status IN (6, -2)"
			   " AND custodian IS NOT NULL AND origin = ?1"
			   " GROUP BY dest, custodian"
			   " ORDER BY dest" BYTES ", custodian" BYTES},
	/* A relay's copy becomes its origin's cancel (?5 now, ?6 the
	 * cancel's digest: it must be the copy's message). */
	[Q_COPY_CANCEL] =
		{"UPDATE tb_0031 SET status = -2, payload = x'',"
		 " result = NULL, next_attempt_at = ?5,"
		 " last_error = NULL"
		 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		 " AND life = ?4 AND status IN (0, 4, 6)"
		 " AND (?6 IS NULL OR digest IS NULL OR digest = ?6)" NOT_OWN,
		 "UPDATE tb_0031 SET status = -2,"
		 " payload = ''::bytea,"
		 " result = NULL, next_attempt_at = ?5::bigint,"
		 " last_error = NULL"
		 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		 " AND life = ?4 AND status IN (0, 4, 6)"
		 " AND (?6::bigint IS NULL OR digest IS NULL"
		 " OR digest = ?6::bigint)" NOT_OWN},
	/* A copy held as undeliverable (8, result 8) goes out again. */
	[Q_COPY_UNHOLD] =
		{"UPDATE tb_0031 SET status = 0, result = NULL,"
		 " next_attempt_at = ?5, last_error = NULL"
		 " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
		 " AND life = ?4 AND status = 8 AND result = 8" NOT_OWN,
		 NULL},
	/* A relay's copies for destination ?1 that are waiting (unsent,
	 * unanswered cancels, held as undeliverable): ids only, at most
	 * ?2, each part over its own index. */
	[Q_COPIES_FOR] =
		{"SELECT origin, dest, seq, life, digest, status,"
		 " length(payload) FROM (SELECT * FROM tb_0031"
		 " INDEXED BY idx_0031_unsent WHERE status = 0"
		 " AND dest = ?1 AND (?3 IS NULL OR origin = ?3)" NOT_OWN
		 " LIMIT ?2)"
		 " UNION ALL SELECT origin, dest, seq, life, digest,"
		 " status, length(payload) FROM (SELECT * FROM tb_0031"
		 " INDEXED BY idx_0031_tomb WHERE status = -2"
		 " AND result IS NULL AND dest = ?1"
		 " AND (?3 IS NULL OR origin = ?3)" NOT_OWN " LIMIT ?2)"
		 " UNION ALL SELECT origin, dest, seq, life, digest,"
		 " status, length(payload) FROM (SELECT * FROM tb_0031"
		 " WHERE status = 8 AND result = 8 AND +dest = ?1"
		 " AND (?3 IS NULL OR +origin = ?3)" NOT_OWN
		 " LIMIT ?2) LIMIT ?2",
		 "SELECT origin, dest, seq, life, digest, status,"
		 " octet_length(payload) FROM tb_0031 WHERE dest = ?1"
		 " AND (?3::text IS NULL OR origin = ?3)"
		 " AND (status = 0 OR (status = -2 AND result IS NULL)"
		 " OR (status = 8 AND result = 8))" NOT_OWN " LIMIT ?2"},
	/* A relay's copies of origin ?1 that their destination refused
	 * (held, result CONFLICT or UNDECIDED), at most ?2. */
	[Q_COPIES_REFUSED] = {"SELECT origin, dest, seq, life, digest, result"
			      " FROM tb_0031 WHERE status = 8"
			      " AND result IN (6, 7) AND origin = ?1"
			      " LIMIT ?2",
			      NULL},
	/* When row ?1..?4 was last sent. */
	[Q_OUT_SENT_AT] = {"SELECT sent_at FROM tb_0031 WHERE origin = ?1"
			   " AND dest = ?2 AND seq = ?3 AND life = ?4",
			   NULL},
	/* Custody of origin ?1, and of all origins. */
	[Q_CUSTODY_USE] =
		{"SELECT (SELECT COALESCE(sum(messages), 0)"
		 " FROM semq_custody WHERE origin = ?1),"
		 " (SELECT COALESCE(sum(bytes), 0) FROM semq_custody"
		 " WHERE origin = ?1),"
		 " (SELECT COALESCE(sum(messages), 0)"
		 " FROM semq_custody),"
		 " (SELECT COALESCE(sum(bytes), 0) FROM semq_custody)",
		 "SELECT (SELECT COALESCE(sum(messages), 0)::bigint"
		 " FROM semq_custody WHERE origin = ?1),"
		 " (SELECT COALESCE(sum(bytes), 0)::bigint FROM semq_custody"
		 " WHERE origin = ?1),"
		 " (SELECT COALESCE(sum(messages), 0)::bigint"
		 " FROM semq_custody),"
		 " (SELECT COALESCE(sum(bytes), 0)::bigint FROM semq_custody)"},
	/* Per (origin, dest): messages, bytes, the oldest copy's creation. */
	[Q_CUSTODY_LIST] = {"SELECT c.origin, c.dest, c.messages, c.bytes,"
			    " (SELECT min(t.created_at) FROM tb_0031 t"
			    " WHERE t.origin = c.origin AND t.dest = c.dest)"
			    " FROM semq_custody c WHERE c.messages > 0"
			    " ORDER BY c.origin, c.dest",
			    "SELECT c.origin, c.dest, c.messages, c.bytes,"
			    " (SELECT min(t.created_at) FROM tb_0031 t"
			    " WHERE t.origin = c.origin AND t.dest = c.dest)"
			    " FROM semq_custody c WHERE c.messages > 0"
			    " ORDER BY c.origin" BYTES ", c.dest" BYTES},
	/* ?1 was connected at ?2. */
	[Q_DEST_SEEN] = {"INSERT INTO semq_dest(dest, seen_at) VALUES (?1, ?2)"
			 " ON CONFLICT (dest) DO UPDATE"
			 " SET seen_at = excluded.seen_at",
			 NULL},
	/* Custody for ?1 at ?2: since when it has been held for while never
	 * seen (set once), and whether it ever was. */
	[Q_DEST_NOTE] = {"INSERT INTO semq_dest(dest, first_at) VALUES (?1, ?2)"
			 " ON CONFLICT (dest) DO UPDATE SET first_at ="
			 " COALESCE(semq_dest.first_at, excluded.first_at)"
			 " RETURNING first_at, seen_at",
			 NULL},
	[Q_DEST_GET] = {"SELECT first_at, seen_at FROM semq_dest"
			" WHERE dest = ?1",
			NULL},
	/* Destinations never seen, held for since before ?1. */
	[Q_DEST_UNKNOWN] = {"SELECT dest, first_at FROM semq_dest"
			    " WHERE seen_at IS NULL AND first_at <= ?1"
			    " ORDER BY dest",
			    "SELECT dest, first_at FROM semq_dest"
			    " WHERE seen_at IS NULL AND first_at <= ?1"
			    " ORDER BY dest" BYTES},
	/* This node's own message is undeliverable: its dead entry (bound
	 * as by Q_REDO_INSERT), dead again if it was retried. */
	[Q_REDO_OWN_DEAD] = {REDO_INSERT_SQL
			     " ON CONFLICT (origin, dest, life, seq) DO UPDATE"
			     " SET status = -1, tries = tb_0033.tries + 1,"
			     " last_error = excluded.last_error,"
			     " discard_reason = NULL,"
			     " updated_at = excluded.updated_at",
			     NULL},
	/* Its entry settles (?5 status 2 done or -2 discarded, ?6 reason,
	 * ?7 now). */
	[Q_REDO_OWN_SETTLE] = {"UPDATE tb_0033 SET status = ?5,"
			       " discard_reason = ?6, updated_at = ?7,"
			       " next_attempt_at = ?7"
			       " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			       " AND life = ?4 AND status = -1",
			       NULL},
	/* redo retry of this node's own undeliverable message ?1..?4: it
	 * goes out again at ?5. */
	[Q_OUT_OWN_RESEND] = {"UPDATE tb_0031 SET status = 0, result = NULL,"
			      " next_attempt_at = ?5,"
			      " last_error = 'retried by the operator'"
			      " WHERE origin = ?1 AND dest = ?2 AND seq = ?3"
			      " AND life = ?4 AND status = 8 AND result = 8",
			      NULL},

	/* ---- lives ---- */
	/* Every (origin, life) this node knows, as a receiver ('in': the
	 * watermark, rows kept) or a relay ('relay': the highest seq). */
	[Q_LIVES] = {"SELECT origin, life, 'in', dest, confirmed_through,"
		     " started_at, (SELECT count(*) FROM tb_0030 t"
		     " WHERE t.origin = s.origin AND t.dest = s.dest"
		     " AND t.life = s.life) FROM semq_stream_in s"
		     " UNION ALL SELECT origin, life, 'relay', dest, high_seq,"
		     " started_at, 0 FROM semq_stream_relay"
		     " ORDER BY 1, 6, 2, 3, 4",
		     "SELECT * FROM (SELECT origin, life, 'in' AS kind, dest,"
		     " confirmed_through AS mark, started_at, (SELECT count(*)"
		     " FROM tb_0030 t WHERE t.origin = s.origin"
		     " AND t.dest = s.dest AND t.life = s.life) AS n"
		     " FROM semq_stream_in s UNION ALL SELECT origin, life,"
		     " 'relay', dest, high_seq, started_at, 0"
		     " FROM semq_stream_relay) u ORDER BY origin" BYTES
		     ", started_at, life, kind, dest" BYTES},
	/* What of (?1 origin, ?2 life) is not finished: redo entries and
	 * relay copies. */
	[Q_LIFE_BUSY] = {"SELECT (SELECT count(*) FROM tb_0033 WHERE"
			 " origin = ?1 AND life = ?2 AND status BETWEEN -1"
			 " AND 1), (SELECT count(*) FROM tb_0031 WHERE"
			 " origin = ?1 AND life = ?2 AND status <> 100"
			 " AND NOT (status = -2 AND result IS NOT NULL)" NOT_OWN
			 ")",
			 NULL},
	[Q_LIFE_DROP_IN] = {"DELETE FROM semq_stream_in"
			    " WHERE origin = ?1 AND life = ?2",
			    NULL},
	[Q_LIFE_DROP_RECV] = {"DELETE FROM tb_0030"
			      " WHERE origin = ?1 AND life = ?2",
			      NULL},
	[Q_LIFE_DROP_RELAY] = {"DELETE FROM semq_stream_relay"
			       " WHERE origin = ?1 AND life = ?2",
			       NULL},

	/* ---- status ---- */
	/* ?1: this node (an unnumbered row is this node's: migration 0007) */
	[Q_STAT_OUT] = {"SELECT COALESCE(origin, ?1), dest, status, count(*),"
			" min(created_at) FROM tb_0031"
			" GROUP BY COALESCE(origin, ?1), dest, status"
			" ORDER BY 1, 2, 3",
			"SELECT COALESCE(origin, ?1), dest, status, count(*),"
			" min(created_at) FROM tb_0031"
			" GROUP BY COALESCE(origin, ?1), dest, status"
			" ORDER BY COALESCE(origin, ?1)" BYTES ", dest" BYTES
			", status"},
	[Q_STAT_IN] = {"SELECT origin, dest, ack_status, count(*),"
		       " min(received_at) FROM tb_0030"
		       " GROUP BY origin, dest, ack_status ORDER BY 1, 2, 3",
		       "SELECT origin, dest, ack_status, count(*),"
		       " min(received_at) FROM tb_0030"
		       " GROUP BY origin, dest, ack_status"
		       " ORDER BY origin" BYTES ", dest" BYTES ", ack_status"},
	[Q_STAT_REDO] = {"SELECT origin, dest, status, count(*),"
			 " min(created_at) FROM tb_0033"
			 " GROUP BY origin, dest, status ORDER BY 1, 2, 3",
			 "SELECT origin, dest, status, count(*),"
			 " min(created_at) FROM tb_0033"
			 " GROUP BY origin, dest, status"
			 " ORDER BY origin" BYTES ", dest" BYTES ", status"},

	/* ---- trace (store_trace.c) ---- */
	/* This node's own messages of key ?1 (to ?2, or any when ''),
	 * created at or after ?3, newest first. */
	[Q_TRACE_OWN] = {"SELECT " OUT_COLS_LEN " FROM tb_0031"
			 " WHERE origin = ?4 AND msg_key = ?1"
			 " AND (?2 = '' OR dest = ?2) AND created_at >= ?3"
			 " ORDER BY id DESC LIMIT ?5",
			 NULL},
	[Q_TRACE_IN] = {"SELECT result, ack_status, received_at, via"
			" FROM tb_0030 WHERE origin = ?1 AND dest = ?2"
			" AND seq = ?3 AND life = ?4",
			NULL},
	[Q_TRACE_REDO] = {"SELECT id, status, tries, next_attempt_at,"
			  " last_error FROM tb_0033 WHERE origin = ?1"
			  " AND dest = ?2 AND seq = ?3 AND life = ?4",
			  NULL},

	/* ---- disk space ---- */
	/* md5 hex on PostgreSQL: text that TOAST compression cannot shrink,
	 * so writing it needs the room. */
	[Q_PROBE_SET] =
		{"INSERT INTO semq_meta(key, value)"
		 " VALUES ('disk_probe', zeroblob(?1))"
		 " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
		 "INSERT INTO semq_meta(key, value) VALUES"
		 " ('disk_probe', (SELECT left(string_agg(md5(g::text),"
		 " ''), ?1::int) FROM generate_series(0, ?1::int / 32)"
		 " g)) ON CONFLICT (key) DO UPDATE"
		 " SET value = excluded.value"},
	[Q_PROBE_DEL] = {"DELETE FROM semq_meta WHERE key = 'disk_probe'",
			 NULL},

	/* ---- counts without scans (store_stat.c) ---- */
	/* Every statement below reads O(streams) rows: semq_counts (kept by
	 * the triggers of schema 5), the stream tables, and for each count
	 * of unconfirmed rows one seek for the first of them. test_store's
	 * test_count_plans checks their plans and that their work does not
	 * grow with the rows. */
	/* PostgreSQL: the counts of other connections that no transaction
	 * holds now go into this connection's shard (db/postgresql/
	 * 0005_counts.sql). */
	[Q_CNT_FOLD] =
		{NULL,
		 "WITH moved AS (DELETE FROM semq_counts WHERE ctid = ANY"
		 " (ARRAY(SELECT ctid FROM semq_counts"
		 " WHERE shard <> pg_backend_pid() FOR UPDATE SKIP LOCKED))"
		 " RETURNING tbl, origin, dest, status, relay, n)"
		 " INSERT INTO semq_counts AS c (tbl, origin, dest, status,"
		 " relay, shard, n) SELECT tbl, origin, dest, status, relay,"
		 " pg_backend_pid(), sum(n) FROM moved"
		 " GROUP BY tbl, origin, dest, status, relay HAVING sum(n) <> 0"
		 " ON CONFLICT (tbl, origin, dest, status, relay, shard)"
		 " DO UPDATE SET n = c.n + excluded.n"},
	/* Per table, stream and status: the rows, and the created_at
	 * (received_at) of the first of them where an index finds it in one
	 * seek: tb_0031 unsent (idx_0031_unsent, stream order), in flight
	 * (idx_0031_flight, oldest row first), in a relay's custody
	 * (idx_0031_held, first handed over); tb_0030 unacknowledged (the
	 * first above the watermark of each life, over idx_0030_1); NULL for
	 * the others. */
	/* The application's rows still to number (migration 0007), which
	 * the counts take in when they are numbered: store_counts adds them
	 * to this node's unsent rows of their destination. */
	[Q_CNT_NEW] = {"SELECT dest, count(*), min(created_at) FROM tb_0031"
		       " INDEXED BY idx_0031_new WHERE seq IS NULL"
		       " GROUP BY dest ORDER BY dest",
		       "SELECT dest, count(*), min(created_at) FROM tb_0031"
		       " WHERE seq IS NULL GROUP BY dest ORDER BY dest" BYTES},
	[Q_CNT_LIST] =
		{"SELECT tbl, origin, dest, status, sum(n), min(CASE"
		 " WHEN tbl = 'tb_0031' AND status = 0 THEN (SELECT created_at"
		 " FROM tb_0031 INDEXED BY idx_0031_unsent"
		 " WHERE tb_0031.status = 0"
		 " AND tb_0031.dest = semq_counts.dest"
		 " AND tb_0031.origin = semq_counts.origin"
		 " ORDER BY tb_0031.life, tb_0031.seq LIMIT 1)"
		 " WHEN tbl = 'tb_0031' AND relay = ''"
		 " AND (status = 4 OR status = 6) THEN (SELECT created_at"
		 " FROM tb_0031 INDEXED BY idx_0031_flight"
		 " WHERE (tb_0031.status = 4 OR (tb_0031.status = 6"
		 " AND tb_0031.custodian IS NULL))"
		 " AND tb_0031.origin = semq_counts.origin"
		 " AND tb_0031.dest = semq_counts.dest"
		 " AND tb_0031.status = semq_counts.status"
		 " ORDER BY tb_0031.id LIMIT 1)"
		 " WHEN tbl = 'tb_0031' AND relay <> '' THEN (SELECT created_at"
		 " FROM tb_0031 INDEXED BY idx_0031_held"
		 " WHERE tb_0031.origin = semq_counts.origin"
		 " AND tb_0031.dest = semq_counts.dest"
		 " AND tb_0031.custodian = semq_counts.relay"
		 " AND tb_0031.status = semq_counts.status"
		 " ORDER BY tb_0031.sent_at LIMIT 1)"
		 " WHEN tbl = 'tb_0030' AND status = 0 THEN (SELECT"
		 " min((SELECT received_at FROM tb_0030"
		 " WHERE tb_0030.origin = semq_stream_in.origin"
		 " AND tb_0030.dest = semq_stream_in.dest"
		 " AND tb_0030.life = semq_stream_in.life"
		 " AND tb_0030.seq > semq_stream_in.confirmed_through"
		 " AND tb_0030.ack_status = 0 ORDER BY tb_0030.seq LIMIT 1))"
		 " FROM semq_stream_in"
		 " WHERE semq_stream_in.origin = semq_counts.origin"
		 " AND semq_stream_in.dest = semq_counts.dest)"
		 " END) FROM semq_counts WHERE n <> 0"
		 " GROUP BY tbl, origin, dest, status HAVING sum(n) <> 0"
		 " ORDER BY tbl, origin, dest, status",
		 "SELECT tbl, origin, dest, status, sum(n)::bigint, min(CASE"
		 " WHEN tbl = 'tb_0031' AND status = 0 THEN (SELECT created_at"
		 " FROM tb_0031 WHERE tb_0031.status = 0"
		 " AND tb_0031.dest = c.dest AND tb_0031.origin = c.origin"
		 " ORDER BY tb_0031.life, tb_0031.seq LIMIT 1)"
		 " WHEN tbl = 'tb_0031' AND relay = ''"
		 " AND (status = 4 OR status = 6) THEN (SELECT created_at"
		 " FROM tb_0031 WHERE (tb_0031.status = 4"
		 " OR (tb_0031.status = 6 AND tb_0031.custodian IS NULL))"
		 " AND tb_0031.origin = c.origin AND tb_0031.dest = c.dest"
		 " AND tb_0031.status = c.status ORDER BY tb_0031.id LIMIT 1)"
		 " WHEN tbl = 'tb_0031' AND relay <> '' THEN (SELECT created_at"
		 " FROM tb_0031 WHERE tb_0031.origin = c.origin"
		 " AND tb_0031.dest = c.dest AND tb_0031.custodian = c.relay"
		 " AND tb_0031.status = c.status"
		 " ORDER BY tb_0031.sent_at LIMIT 1)"
		 " WHEN tbl = 'tb_0030' AND status = 0 THEN (SELECT"
		 " min((SELECT received_at FROM tb_0030"
		 " WHERE tb_0030.origin = w.origin AND tb_0030.dest = w.dest"
		 " AND tb_0030.life = w.life"
		 " AND tb_0030.seq > w.confirmed_through"
		 " AND tb_0030.ack_status = 0 ORDER BY tb_0030.seq LIMIT 1))"
		 " FROM semq_stream_in w"
		 " WHERE w.origin = c.origin AND w.dest = c.dest)"
		 " END) FROM (SELECT tbl, origin, dest, status, relay,"
		 " sum(n) AS n FROM semq_counts"
		 " GROUP BY tbl, origin, dest, status, relay"
		 " HAVING sum(n) <> 0) c"
		 " GROUP BY tbl, origin, dest, status"
		 " ORDER BY tbl, origin, dest, status"},
	/* This node's (?1) rows in a relay's custody, per destination and
	 * relay, with the earliest hand-over. */
	[Q_CNT_WAITING] =
		{"SELECT dest, relay, sum(n), (SELECT min(sent_at)"
		 " FROM tb_0031 INDEXED BY idx_0031_held"
		 " WHERE tb_0031.origin = ?1"
		 " AND tb_0031.dest = semq_counts.dest"
		 " AND tb_0031.custodian = semq_counts.relay)"
		 " FROM semq_counts WHERE tbl = 'tb_0031' AND origin = ?1"
		 " AND relay <> '' AND (status = 6 OR status = -2) AND n <> 0"
		 " GROUP BY dest, relay HAVING sum(n) > 0"
		 " ORDER BY dest, relay",
		 "SELECT dest, relay, sum(n)::bigint, (SELECT min(sent_at)"
		 " FROM tb_0031 WHERE tb_0031.origin = ?1"
		 " AND tb_0031.dest = c.dest AND tb_0031.custodian = c.relay)"
		 " FROM semq_counts c WHERE tbl = 'tb_0031' AND origin = ?1"
		 " AND relay <> '' AND (status = 6 OR status = -2)"
		 " GROUP BY dest, relay HAVING sum(n) > 0"
		 " ORDER BY dest, relay"},
	/* A relay's custody per (origin, dest) and its oldest copy: the
	 * first of each life the relay knows of the stream, and the first of
	 * the stream (a life it has no record of). */
	[Q_CNT_CUSTODY] =
		{"SELECT origin, dest, messages, bytes, (SELECT min(at) FROM"
		 " (SELECT (SELECT created_at FROM tb_0031"
		 " WHERE tb_0031.origin = semq_custody.origin"
		 " AND tb_0031.dest = semq_custody.dest"
		 " ORDER BY tb_0031.life, tb_0031.seq LIMIT 1) AS at"
		 " UNION ALL SELECT (SELECT created_at FROM tb_0031"
		 " WHERE tb_0031.origin = semq_stream_relay.origin"
		 " AND tb_0031.dest = semq_stream_relay.dest"
		 " AND tb_0031.life = semq_stream_relay.life"
		 " ORDER BY tb_0031.seq LIMIT 1) FROM semq_stream_relay"
		 " WHERE semq_stream_relay.origin = semq_custody.origin"
		 " AND semq_stream_relay.dest = semq_custody.dest))"
		 " FROM semq_custody WHERE messages > 0 ORDER BY origin, dest",
		 "SELECT origin, dest, messages, bytes, (SELECT min(at) FROM"
		 " (SELECT (SELECT created_at FROM tb_0031"
		 " WHERE tb_0031.origin = k.origin AND tb_0031.dest = k.dest"
		 " ORDER BY tb_0031.life, tb_0031.seq LIMIT 1) AS at"
		 " UNION ALL SELECT (SELECT created_at FROM tb_0031"
		 " WHERE tb_0031.origin = r.origin AND tb_0031.dest = r.dest"
		 " AND tb_0031.life = r.life ORDER BY tb_0031.seq LIMIT 1)"
		 " FROM semq_stream_relay r WHERE r.origin = k.origin"
		 " AND r.dest = k.dest) u)"
		 " FROM semq_custody k WHERE messages > 0"
		 " ORDER BY origin" BYTES ", dest" BYTES},
};

/* ---- the listings' filters ------------------------------------------------ */

const char *const store__redo_select_sql =
	"SELECT " REDO_COLS_LEN " FROM tb_0033";
const char *const store__out_select_sql =
	"SELECT " OUT_COLS_LEN " FROM tb_0031";

/* The text of a filter over table t: fixed fragments, one ?N per value. */
int store__filter_stmt(struct store *st, enum filter_table t,
		       const struct store_filter *f, const char *origin,
		       const char *head, const char *tail, int paged,
		       struct db_stmt **out)
{
	struct {
		int text;
		int64_t v;
		const char *s;
	} b[8];
	char sql[4096];
	size_t n = 0;
	int np = 0, k, rc;
	const char *and = " WHERE ";

#define ADD(...)                                                               \
	do {                                                                   \
		int w_ = snprintf(sql + n, sizeof sql - n, __VA_ARGS__);       \
		if (w_ < 0 || (size_t)w_ >= sizeof sql - n)                    \
			return seterr(st, SEMQ_ERR_INTERNAL, "%s",             \
				      "filter: statement too long");           \
		n += (size_t)w_;                                               \
	} while (0)
#define COND(fmt)                                                              \
	do {                                                                   \
		ADD("%s" fmt, and, np);                                        \
		and = " AND ";                                                 \
	} while (0)

	*out = NULL;
	ADD("%s", head);
	if (t != FT_IN && f->status >= -99) {
		b[np].text = 0, b[np++].v = f->status;
		COND("status = ?%d");
	}
	if (t == FT_IN && origin) {
		b[np].text = 1, b[np++].s = origin;
		COND("origin = ?%d");
	}
	if (f->dest) {
		b[np].text = 1, b[np++].s = f->dest;
		COND("dest = ?%d");
	}
	if (f->key) {
		b[np].text = 1, b[np++].s = f->key;
		COND("msg_key = ?%d");
	}
	if (f->since > 0) {
		b[np].text = 0, b[np++].v = f->since;
		if (t == FT_IN)
			COND("received_at >= ?%d");
		else
			COND("created_at >= ?%d");
	}
	if (t == FT_REDO && f->where) {
		b[np].text = 1, b[np++].s = f->where->text;
		if (f->where->exact)
			COND("last_error = ?%d");
		else if (st->pg)
			COND("strpos(lower(last_error),"
			     " lower(CAST(?%d AS text))) > 0");
		else
			COND("instr(lower(last_error), lower(?%d)) > 0");
	}
	ADD("%s", tail);
	if (paged && f->limit) {
		b[np].text = 0, b[np++].v = f->limit;
		ADD(" LIMIT ?%d", np);
	}
	if (paged && f->offset) {
		if (!f->limit)
			ADD("%s", st->pg ? " LIMIT ALL" : " LIMIT -1");
		b[np].text = 0, b[np++].v = f->offset;
		ADD(" OFFSET ?%d", np);
	}
#undef COND
#undef ADD
	rc = db_prepare_bulk(st->db, sql, out);
	if (rc != SEMQ_OK) {
		*out = NULL;
		return dberr(st, "preparing a filtered listing");
	}
	for (k = 0; k < np; k++)
		if (b[k].text)
			db_bind_text(*out, k + 1, b[k].s);
		else
			db_bind_int64(*out, k + 1, b[k].v);
	return SEMQ_OK;
}
