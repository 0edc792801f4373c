/* SPDX-License-Identifier: MIT */
/*
 * The store's private header: what the store_*.c files share behind
 * store.h — the struct, the statement ids, and the helpers every table's file
 * uses. Nothing outside node/store*.c includes it.
 *
 * The helpers are internal functions named store__NAME; the macros at the
 * end let the store's files call them by their short names (seterr, q_get,
 * tx_open, ...), as when they were one file.
 *
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
 *    dialects differ, store__q[] (store_sql.c) holds the PostgreSQL text
 *    beside SQLite's. A callback that re-enters the store while a cached
 *    statement is still stepping gets a private copy of that statement,
 *    finalised after use.
 *  - Transactions: store_begin() is BEGIN IMMEDIATE on SQLite and BEGIN
 *    (READ COMMITTED) on PostgreSQL; a mutating call made outside a batch
 *    opens and closes its own. Callers act on results (acknowledgements)
 *    only after the commit that makes them true. On PostgreSQL a failed
 *    statement aborts the whole transaction, so after one the batch can
 *    only be rolled back (store_commit refuses it).
 *  - Numbering (migration 0007): the application's INSERT leaves origin,
 *    life and seq NULL; store_number_new gives them in id order (on
 *    SQLite the order of the commits), from the stream's counter in
 *    semq_stream_out, with prev_seq the last seq of the key, in the batch
 *    after the commit (proto_tick) or at once in store_enqueue and in
 *    semqctl's verbs that change a message. A row without a seq is in no
 *    stream: idx_0031_unsent and idx_0031_key leave it out, the counts take
 *    it in when it is numbered (store_counts shows it as this node's,
 *    unsent). On PostgreSQL one instance numbers at a time (an advisory
 *    lock) and holds the counter's row.
 *  - A stream is (origin, dest, life): a life is one database of the
 *    origin (docs/PROTOCOL.md, "Lives of a node"). Every id the store is
 *    given carries its life; the node's own rows carry st->life.
 *  - Exactly once: a message is seen when its id is in tb_0030 (unique
 *    idx_0030_1; the insert is ON CONFLICT DO NOTHING, so a copy recorded
 *    by another connection meanwhile is a duplicate too, never a failed
 *    batch) or its seq is at or below the stream's watermark W
 *    (semq_stream_in.confirmed_through). Every seq <= W is AS_OK; W only
 *    moves over a contiguous run of AS_OK rows. The rows stay for the
 *    receipt retention, so that a second copy is compared by its digest:
 *    the same message is a duplicate with its recorded verdict, another
 *    one is refused as a conflict, and one whose row is gone (seq <= W) as
 *    undecided when it has a digest (store__in_seen). A message whose
 *    prev_seq row holds another digest than its prev_digest is a conflict
 *    too: a later message of a key never takes effect before an earlier
 *    one that its origin has to renumber.
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
 *  - Key order in tb_0033: per (origin, dest, life, msg_key) at most one entry is
 *    the head (pending or dead); later ones are waiting (status 1). When the
 *    head finishes (done or discarded) the lowest-seq waiting entry becomes
 *    pending, at once or at its deliver_at if that is later.
 *  - Redo levels: `level` is the index of the next backoff level to use. A
 *    failure waits levels[min(level, n-1)] and increments level; `tries`
 *    counts the attempts made, and a retryable failure is dead once
 *    tries >= max_tries. Both rules are the redo policy of types.h
 *    (semq_redo_delay, semq_redo_gives_up), which semqctl shows.
 *  - A lost PostgreSQL connection fails the call that saw it; the next
 *    transaction (store_begin, or a call outside a batch) connects again
 *    first.
 *  - The store never reads a clock: `now` is a parameter. (applied_at of a
 *    migration and a created_at left empty come from the database's clock.)
 */
#ifndef SEMQ_STORE_INT_H
#define SEMQ_STORE_INT_H

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
#define STORE_ERRMAX 1024
#define LOCKS_MAX 16 /* streams remembered as locked in one transaction */

/* The columns every message read starts with (indexes 0..8). */
#define MSG_COLS                                                               \
	"origin, dest, seq, type, msg_key, prev_seq, deliver_at, payload"
#define OUT_COLS                                                               \
	MSG_COLS                                                               \
	", created_at, status, attempts, next_attempt_at, sent_at,"            \
	" acked_at, result, last_error, id, life, digest, prev_digest,"        \
	" custodian, hops"
#define REDO_COLS                                                              \
	MSG_COLS ", msg_created_at, status, tries, level, next_attempt_at,"    \
		 " created_at, updated_at, last_error, discard_reason, id, "   \
		 "life"
#define IN_COLS                                                                \
	"origin, dest, seq, type, msg_key, prev_seq, received_at, via,"        \
	" result, ack_status, confirm_need, confirm_got, id, life, digest"
#define REDO_INSERT_SQL                                                        \
	"INSERT INTO tb_0033(origin, dest, seq, life, type, msg_key, "         \
	"prev_seq,"                                                            \
	" deliver_at, msg_created_at, payload, status, tries, level,"          \
	" next_attempt_at, last_error, created_at, updated_at)"                \
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"     \
	" ?14, ?15, ?16, ?16)"
/* PostgreSQL sorts text by the database's collation; node ids are compared
 * byte by byte (as SQLite and strcmp do), whatever the cluster's locale. */
#define BYTES " COLLATE \"C\""

/* Every statement the store runs, prepared once on first use; the texts
 * are in store_sql.c. */
enum q {
	Q_BEGIN,
	Q_COMMIT,
	Q_ROLLBACK,
	Q_SP,
	Q_SP_UNDO,
	Q_SP_RELEASE,
	/* inbound streams and their watermarks (a stream: ?1 origin, ?2 dest,
	 * ?3 life) */
	Q_W_GET,
	Q_W_CREATE,
	Q_W_SET,
	Q_W_LIST,
	Q_W_CURRENT,
	Q_ORIGIN_LIFE,
	Q_W_HIGH,
	Q_W_LOCK,      /* PostgreSQL only */
	Q_W_LOCK_SKIP, /* PostgreSQL only */
	/* tb_0030 (an id: ?1 origin, ?2 dest, ?3 seq, ?4 life) */
	Q_IN_GET,
	Q_IN_INSERT,
	Q_IN_SET_RESULT,
	Q_IN_ACK,
	Q_IN_ACK_STATUS,
	Q_IN_UNACKED,
	Q_IN_RUN,
	Q_IN_PURGE,
	Q_IN_LIST_ALL,
	Q_IN_LIST,
	/* tb_0033 */
	Q_REDO_INSERT,
	Q_REDO_KEY_BUSY,
	Q_REDO_KEY_HEAD,
	Q_REDO_KEY_NEXT,
	Q_REDO_KEY_WAITING,
	Q_REDO_RELEASE,
	Q_REDO_GET,
	Q_REDO_ORIGIN,
	Q_REDO_STATUS_OF,
	Q_REDO_ID_OF,
	Q_REDO_DUE,
	Q_REDO_NEXT_DUE,
	Q_REDO_LIST_ALL,
	Q_REDO_LIST,
	Q_REDO_UPDATE,
	Q_REDO_RETRY,
	Q_REDO_DISCARD,
	Q_REDO_HEAD_OF,
	/* tb_0031 */
	Q_OUT_INSERT,
	Q_OUT_SEQ,
	Q_OUT_LAST_SEQ_LOCK,
	Q_OUT_NEW,
	Q_OUT_NUMBER_LOCK,
	Q_OUT_NUMBER_WAIT,
	Q_OUT_KEY_LAST,
	Q_OUT_NUMBER,
	Q_OUT_NUMBER_FIX,
	Q_OUT_SET_LAST,
	Q_OUT_COPY,
	Q_OUT_NEXT_STREAM,
	Q_OUT_NEXT_STREAM_DEST,
	Q_OUT_INFLIGHT,
	Q_OUT_SENDABLE,
	Q_OUT_NEXT_LIFE,
	Q_OUT_STATUS,
	Q_OUT_MARK_SENT,
	Q_OUT_MARK_RELAY,
	Q_OUT_MARK_UNSENT,
	Q_OUT_MARK_CONFIRMED,
	Q_OUT_CANCEL,
	Q_OUT_HOLD,
	Q_OUT_IN_DOUBT,
	Q_OUT_DEFER,
	Q_OUT_DROP_COPY,
	Q_OUT_TOMBSTONES,
	Q_OUT_PURGE,
	Q_REDO_PURGE,
	Q_OUT_GET,
	Q_OUT_DIGEST,
	Q_OUT_PRED,
	Q_OUT_MOVED,
	Q_OUT_LIST_ALL,
	Q_OUT_LIST,
	/* renumbering and the stream counters (semq_stream_out) */
	Q_OUT_CHAIN,
	Q_OUT_NEXT_SEQ,
	Q_OUT_RENUMBER,
	Q_OUT_LAST_SEQ,
	Q_OUT_RESYNC,
	Q_OUT_SEEN,
	Q_OUT_SEEN_GET,
	Q_OUT_FILLER,
	Q_OUT_STREAMS,
	Q_OUT_HIDE_LIFE,
	/* a relay's record of the streams it relayed */
	Q_RELAY_NOTE,
	Q_RELAY_LIST,
	Q_RELAY_HIGH,
	Q_RELAY_CURRENT,
	/* custody (store_custody.c) */
	Q_OUT_MARK_CUSTODY,
	Q_OUT_TOMBSTONES_TO,
	Q_OUT_WAITING,
	Q_OUT_DEAD_AT,
	Q_COPY_CANCEL,
	Q_COPY_UNHOLD,
	Q_COPIES_FOR,
	Q_COPIES_REFUSED,
	Q_OUT_SENT_AT,
	Q_CUSTODY_USE,
	Q_CUSTODY_LIST,
	Q_DEST_SEEN,
	Q_DEST_NOTE,
	Q_DEST_GET,
	Q_DEST_UNKNOWN,
	Q_REDO_OWN_DEAD,
	Q_REDO_OWN_SETTLE,
	Q_OUT_OWN_RESEND,
	/* lives */
	Q_LIVES,
	Q_LIFE_BUSY,
	Q_LIFE_DROP_IN,
	Q_LIFE_DROP_RECV,
	Q_LIFE_DROP_RELAY,
	/* status */
	Q_STAT_OUT,
	Q_STAT_IN,
	Q_STAT_REDO,
	/* trace (store_trace.c) */
	Q_TRACE_OWN,
	Q_TRACE_IN,
	Q_TRACE_REDO,
	/* disk space */
	Q_PROBE_SET,
	Q_PROBE_DEL,
	/* counts without scans (store_stat.c, semq_counts of schema 5) */
	Q_CNT_FOLD, /* PostgreSQL only */
	Q_CNT_LIST,
	Q_CNT_NEW,
	Q_CNT_WAITING,
	Q_CNT_CUSTODY,
	Q__N
};

struct stream_id {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
	uint64_t life;
};

struct store {
	struct db *db;    /* owned */
	const char *name; /* db_name(db): the file or URL, for messages */
	int pg;           /* db_kind(db) == DB_PG */
	char node_id[SEMQ_ID_MAX + 1];
	uint64_t life;             /* this database's life (semq_meta) */
	int migrated_from;         /* schema version before open */
	char backup[STORE_ERRMAX]; /* the copy kept before it */
	size_t max_payload;
	int64_t *levels; /* owned: redo backoff levels, ms */
	size_t n_levels;
	unsigned max_tries;
	/* store__redo_log's rate limit: lines in the current second */
	int64_t log_second;
	unsigned log_lines, log_dropped;
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
	int full;           /* errmsg is a full disk or a failed write */
	int lock_timed_out; /* errmsg: another connection kept the lock */
	int no_create;      /* store_opts.no_create: refuse a new database */
};

/* The SQL text of each statement (store_sql.c): SQLite's, and
 * PostgreSQL's where it differs (NULL: the same; lite NULL: PostgreSQL
 * only). */
struct q_text {
	const char *lite, *pg;
};
extern const struct q_text store__q[Q__N];

int store__seterr(struct store *st, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int store__dberr(struct store *st, const char *what);
int store__waiting_rows(struct store *st, enum q q, const char *what,
			store_waiting_cb cb, void *ctx);
void store__copy_err(const struct store *st, char *err, size_t errsz);
/* A filtered listing (store_sql.c): head (SELECT ... FROM table) + the
 * filter's WHERE + tail (ORDER BY, GROUP BY) + LIMIT/OFFSET when paged,
 * prepared for stepping row by row, bound. *out: caller db_finalize()s. */
enum filter_table { FT_OUT, FT_IN, FT_REDO };
/* Logs what became of message m's redo entry (store_redo.c): dead (WARN),
 * a retry scheduled at next_at (INFO), with its id, tries and reason. At
 * most 20 such lines a second; the rest are counted and said once. */
void store__redo_log(struct store *st, const struct msgid *id, int status,
		     int tries, int64_t next_at, const char *reason,
		     int64_t now);
extern const char *const store__redo_select_sql;
extern const char *const store__out_select_sql;
int store__filter_stmt(struct store *st, enum filter_table t,
		       const struct store_filter *f, const char *origin,
		       const char *head, const char *tail, int paged,
		       struct db_stmt **out);
struct db_stmt *store__q_get(struct store *st, enum q i);
void store__q_put(struct store *st, enum q i, struct db_stmt *s);
int store__q_exec(struct store *st, enum q i, const char *what);
void store__bind_id(struct db_stmt *s, const struct msgid *id);
/* ?1 origin, ?2 dest, ?3 life: an inbound stream. */
void store__bind_stream(struct db_stmt *s, const char *origin, const char *dest,
			uint64_t life);
/* A digest as ?i: NULL when unknown (0). */
void store__bind_digest(struct db_stmt *s, int i, uint64_t digest);
const char *store__key_of(const struct msg *m);
void store__bind_key(struct db_stmt *s, int i, const struct msg *m);
void store__bind_payload(struct db_stmt *s, int i, const struct msg *m);

/* Makes sure a transaction is open; *own = 1 when this call opened it. */
int store__tx_open(struct store *st, int *own);
int store__tx_close(struct store *st, int own, int r);

int store__check_node(struct store *st, const char *what, const char *id,
		      size_t cap);
int store__check_msgid(struct store *st, const struct msgid *id);
int store__check_body(struct store *st, const char *what, const struct msg *m);

void store__col_text(char *dst, size_t cap, struct db_stmt *s, int col);
int store__col_int(struct db_stmt *s, int col);
/* A copy of a text column (NULL stays NULL); -1 when out of memory. */
int store__col_dup(struct db_stmt *s, int col, char **out);
int store__col_out(struct store *st, struct db_stmt *s, struct msg *m,
		   struct out_row *row, char **le);
int store__col_redo(struct store *st, struct db_stmt *s, struct msg *m,
		    struct redo_row *row, char **strs);
int store__each_out(struct store *st, struct db_stmt *s, store_out_cb cb,
		    void *ctx, unsigned *n, int *stopped);
int store__each_redo(struct store *st, struct db_stmt *s, store_redo_cb cb,
		     void *ctx);
int store__purge_before(struct store *st, int q, const char *what, int64_t now,
			int64_t retention_ms, unsigned limit, unsigned *n_out);
void store__keep_row_strs(struct store *st, char *a, char *b);
int store__migrate(struct store *st);
int store__meta_sync(struct store *st);
int store__stream_held(const struct store *st, const char *origin,
		       const char *dest, uint64_t life);
int store__stream_lock(struct store *st, const char *origin, const char *dest,
		       uint64_t life, int64_t now, uint64_t *w, int *known);
int store__stream_create(struct store *st, const char *origin, const char *dest,
			 uint64_t life, int64_t now);
int store__in_get(struct store *st, const struct msgid *id, int *found,
		  int *result, uint64_t *digest);
int store__in_seen(struct store *st, const struct msgid *id, uint64_t w,
		   int *seen, int *result);
int store__in_insert(struct store *st, const struct msg *m, const char *via,
		     unsigned need, int64_t now, int result, const char *idb);
int store__in_set_result(struct store *st, const struct msgid *id, int result,
			 const char *idb);
int store__apply_sp(struct store *st, const struct msg *m, unsigned tries,
		    store_apply_fn apply, void *ctx, char *perr, size_t perrsz,
		    int *verdict, const char *idb);
/* A parameter of an outbound transition, bound from ?5 on. */
struct targ {
	enum { TA_INT, TA_TEXT, TA_DIGEST } kind;
	int64_t v;
	const char *t;
};
#define TI(x)                                                                  \
	{                                                                      \
		TA_INT, (int64_t)(x), NULL                                     \
	}
#define TT(x)                                                                  \
	{                                                                      \
		TA_TEXT, 0, (x)                                                \
	}
#define TD(x)                                                                  \
	{                                                                      \
		TA_DIGEST, (int64_t)(x), NULL                                  \
	}

/*
 * Runs one of the outbound transitions: `i` binds the id as ?1..?4 and
 * args[0..n) as ?5 on. SEMQ_DECLINED (errmsg says why, *declined_status the
 * status found or INT_MIN when there is no row) when no row was in a status
 * the transition applies to.
 */
int store__out_transition(struct store *st, enum q i, const struct msgid *id,
			  const struct targ *args, int n, const char *what,
			  const char *wanted, int *declined_status);
int store__redo_insert_q(struct store *st, enum q i, const struct msg *m,
			 int status, int tries, int level, int64_t next_at,
			 const char *last_error, int64_t now, const char *idb);
int store__redo_key_has(struct store *st, enum q i, const struct msgid *sid,
			const char *key, int *yes);
/* How many entries of `key` wait (status 1) in the stream of sid. */
int store__redo_key_waiting(struct store *st, const struct msgid *sid,
			    const char *key, int64_t *n);
/* store_redo_discard, and *released (may be NULL) gets the id of the entry
 * of its key it released, 0 when none (store_verbs.c reports it). */
int store__redo_discard(struct store *st, int64_t id, const char *reason,
			int64_t now, int64_t *released);
int64_t store__level_ms(const struct store *st, int level);

#define apply_sp store__apply_sp
#define bind_id store__bind_id
#define bind_stream store__bind_stream
#define bind_digest store__bind_digest
#define bind_key store__bind_key
#define bind_payload store__bind_payload
#define check_body store__check_body
#define check_msgid store__check_msgid
#define check_node store__check_node
#define col_int store__col_int
#define col_dup store__col_dup
#define col_out store__col_out
#define col_redo store__col_redo
#define col_text store__col_text
#define copy_err store__copy_err
#define dberr store__dberr
#define each_out store__each_out
#define each_redo store__each_redo
#define in_get store__in_get
#define in_seen store__in_seen
#define in_insert store__in_insert
#define in_set_result store__in_set_result
#define keep_row_strs store__keep_row_strs
#define key_of store__key_of
#define level_ms store__level_ms
#define meta_sync store__meta_sync
#define migrate store__migrate
#define purge_before store__purge_before
#define out_transition store__out_transition
#define q_exec store__q_exec
#define q_get store__q_get
#define q_put store__q_put
#define redo_insert(st_, ...)                                                  \
	store__redo_insert_q(st_, Q_REDO_INSERT, __VA_ARGS__)
#define redo_key_has store__redo_key_has
#define seterr store__seterr
#define stream_held store__stream_held
#define stream_lock store__stream_lock
#define stream_create store__stream_create
#define tx_close store__tx_close
#define tx_open store__tx_open

#endif
