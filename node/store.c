/* SPDX-License-Identifier: MIT */
/*
 * The store's room of its own: opening and closing (store_open, store_free),
 * errors, the statement cache, transactions and batches, the checks of what
 * callers pass in, and reading rows into struct msg. The tables live in
 * store_out.c (tb_0031), store_in.c (tb_0030 and the watermarks),
 * store_apply.c (the exactly-once receipt), store_redo.c (tb_0033) and
 * store_stat.c; the schema and migrations in store_schema.c; every SQL text
 * in store_sql.c. What they share is in store_int.h, whose DESIGN block
 * states the invariants.
 */
#include "store_int.h"

int store__seterr(struct store *st, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->errmsg, sizeof st->errmsg, fmt, ap);
	va_end(ap);
	st->full = 0;
	st->lock_timed_out = 0;
	return code;
}

/* A failed database call: "TARGET: what: driver message". */
int store__dberr(struct store *st, const char *what)
{
	enum db_errclass ec = db_errclass(st->db);

	seterr(st, SEMQ_ERR_DB, "%s: %s: %s", st->name, what,
	       db_errmsg(st->db));
	st->full = ec == DB_E_FULL;
	st->lock_timed_out = ec == DB_E_BUSY;
	if (ec == DB_E_LOST)
		st->lost = 1;
	st->tx_failed = 1;
	return SEMQ_ERR_DB;
}

void store__copy_err(const struct store *st, char *err, size_t errsz)
{
	if (err && errsz)
		snprintf(err, errsz, "%s", st->errmsg);
}

/* ---- statements ----------------------------------------------------------- */

/*
 * The statements that may return many rows (scans, listings, the wheel's
 * refill): prepared with db_prepare_bulk, so that PostgreSQL hands their
 * rows over one at a time instead of holding the whole result in memory
 * (node/db.h). Their callbacks may still call the store: the driver reads
 * the rows left ahead when another statement needs the connection. A new
 * statement of that kind belongs here.
 */
static const unsigned char bulk[Q__N] = {
	/* inbound streams and tb_0030 */
	[Q_W_LIST] = 1,
	[Q_IN_UNACKED] = 1,
	[Q_IN_RUN] = 1,
	[Q_IN_LIST_ALL] = 1,
	[Q_IN_LIST] = 1,
	/* tb_0033 */
	[Q_REDO_DUE] = 1,
	[Q_REDO_LIST_ALL] = 1,
	[Q_REDO_LIST] = 1,
	/* tb_0031 and its streams */
	[Q_OUT_SENDABLE] = 1,
	[Q_OUT_IN_DOUBT] = 1,
	[Q_OUT_TOMBSTONES] = 1,
	[Q_OUT_LIST_ALL] = 1,
	[Q_OUT_LIST] = 1,
	[Q_OUT_CHAIN] = 1,
	[Q_OUT_STREAMS] = 1,
	[Q_RELAY_LIST] = 1,
	/* custody */
	[Q_OUT_TOMBSTONES_TO] = 1,
	[Q_OUT_WAITING] = 1,
	[Q_COPIES_FOR] = 1,
	[Q_CUSTODY_LIST] = 1,
	[Q_DEST_UNKNOWN] = 1,
	/* lives, status */
	[Q_LIVES] = 1,
	[Q_STAT_OUT] = 1,
	[Q_STAT_IN] = 1,
	[Q_STAT_REDO] = 1,
};

static const char *q_text(const struct store *st, enum q i)
{
	return st->pg && store__q[i].pg ? store__q[i].pg : store__q[i].lite;
}

static int q_prepare(struct store *st, enum q i, const char *sql,
		     struct db_stmt **out)
{
	return bulk[i] ? db_prepare_bulk(st->db, sql, out)
		       : db_prepare(st->db, sql, out);
}

/* The statement for `i`, reset and unbound; NULL (errmsg set) on failure.
 * Give it back with q_put(). */
struct db_stmt *store__q_get(struct store *st, enum q i)
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
		if (!st->q[i] && q_prepare(st, i, sql, &st->q[i]) != SEMQ_OK) {
			st->q[i] = NULL;
			dberr(st, "preparing a statement");
			return NULL;
		}
		st->busy[i] = 1;
		return st->q[i];
	}
	/* Re-entered from a callback while q[i] is stepping: a private one. */
	if (q_prepare(st, i, sql, &s) != SEMQ_OK) {
		dberr(st, "preparing a statement");
		return NULL;
	}
	return s;
}

void store__q_put(struct store *st, enum q i, struct db_stmt *s)
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
int store__q_exec(struct store *st, enum q i, const char *what)
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

void store__bind_id(struct db_stmt *s, const struct msgid *id)
{
	db_bind_text(s, 1, id->origin);
	db_bind_text(s, 2, id->dest);
	db_bind_int64(s, 3, (int64_t)id->seq);
	db_bind_int64(s, 4, (int64_t)id->life);
}

void store__bind_stream(struct db_stmt *s, const char *origin, const char *dest,
			uint64_t life)
{
	db_bind_text(s, 1, origin);
	db_bind_text(s, 2, dest);
	db_bind_int64(s, 3, (int64_t)life);
}

void store__bind_digest(struct db_stmt *s, int i, uint64_t digest)
{
	if (digest)
		db_bind_int64(s, i, (int64_t)digest);
	else
		db_bind_null(s, i);
}

const char *store__key_of(const struct msg *m)
{
	return m->has_key && m->key[0] ? m->key : NULL;
}

void store__bind_key(struct db_stmt *s, int i, const struct msg *m)
{
	db_bind_text(s, i, key_of(m));
}

void store__bind_payload(struct db_stmt *s, int i, const struct msg *m)
{
	/* Never NULL: the payload columns are NOT NULL, x'' when empty. */
	db_bind_blob(s, i, m->payload_len ? (const void *)m->payload : "",
		     m->payload_len);
}

/* ---- transactions --------------------------------------------------------- */

/* Makes sure a transaction is open; *own = 1 when this call opened it. */
int store__tx_open(struct store *st, int *own)
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
	/* Inside a transaction an outer call of the store opened for itself
	 * (a call made of others): that one commits or rolls back. */
	if (db_in_tx(st->db))
		return SEMQ_OK;
	if (tx_begin(st) != SEMQ_OK)
		return SEMQ_ERR_DB;
	*own = 1;
	return SEMQ_OK;
}

/* Ends a transaction tx_open() opened: commit when r is not an error. */
int store__tx_close(struct store *st, int own, int r)
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

int store__check_node(struct store *st, const char *what, const char *id,
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

int store__check_msgid(struct store *st, const struct msgid *id)
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
	/* A life of 0 (not given by a revision-1 peer) is resolved before
	 * anything reaches the store (proto.c resolve_life). */
	if (id->life == SEMQ_LIFE_NONE)
		return seterr(st, SEMQ_ERR_INVALID,
			      "%s/%s/%" PRIu64 ": no life given", id->origin,
			      id->dest, id->seq);
	return SEMQ_OK;
}

/* The fields of a message besides its id; `what` names it in messages. */
int store__check_body(struct store *st, const char *what, const struct msg *m)
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

void store__col_text(char *dst, size_t cap, struct db_stmt *s, int col)
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
int store__col_dup(struct db_stmt *s, int col, char **out)
{
	const char *t = db_col_null(s, col) ? NULL : db_col_text(s, col);

	*out = NULL;
	if (!t)
		return 0;
	*out = strdup(t);
	return *out ? 0 : -1;
}

int store__col_int(struct db_stmt *s, int col)
{
	return (int)db_col_int64(s, col);
}

/* Column 7 of a message read: the payload, or (`length(payload) AS
 * payload_len`, store_sql.c's listings) only its length. */
static int col_is_payload_len(struct db_stmt *s)
{
	const char *name = db_col_name(s, 7);

	return name && strcmp(name, "payload_len") == 0;
}

/* MSG_COLS (0..7) and created_at (8) into m; m->payload is malloc'd, or
 * NULL with payload_len set when the statement read only the length. */
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
	if (col_is_payload_len(s)) {
		int64_t len = db_col_int64(s, 7);

		m->payload_len = len > 0 ? (size_t)len : 0;
		m->created_at = db_col_int64(s, 8);
		return SEMQ_OK;
	}
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
int store__col_out(struct store *st, struct db_stmt *s, struct msg *m,
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
	m->id.life = (uint64_t)db_col_int64(s, 17);
	m->id.digest = db_col_null(s, 18) ? 0 : (uint64_t)db_col_int64(s, 18);
	m->prev_digest = db_col_null(s, 19) ? 0 : (uint64_t)db_col_int64(s, 19);
	col_text(row->custodian, sizeof row->custodian, s, 20);
	m->hops = (unsigned)col_int(s, 21);
	/* A cancelled outbound row stands for its tombstone. */
	m->tombstone = row->status == SS_CANCELLED;
	return SEMQ_OK;
}

/* A row of REDO_COLS; strs[0], strs[1] get last_error, discard_reason. */
int store__col_redo(struct store *st, struct db_stmt *s, struct msg *m,
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
	m->id.life = (uint64_t)db_col_int64(s, 18);
	return SEMQ_OK;
}

/*
 * Steps `s` (OUT_COLS) and hands each row to cb. Every row is copied before
 * the call, so the callback may use the store. *n counts the rows handed;
 * *stopped = 1 when cb asked to stop.
 */
int store__each_out(struct store *st, struct db_stmt *s, store_out_cb cb,
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

int store__each_redo(struct store *st, struct db_stmt *s, store_redo_cb cb,
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
	st->max_tries = o->max_tries ? o->max_tries : SEMQ_REDO_MAX_TRIES;
	lv = o->redo_levels_ms ? o->redo_levels_ms : semq_redo_levels;
	st->n_levels =
		o->redo_levels_ms ? o->n_redo_levels : SEMQ_REDO_N_LEVELS;
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
	dbo.no_create = o->no_create;
	st->no_create = o->no_create;
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

int store_locked_out(const struct store *st)
{
	return st ? st->lock_timed_out : 0;
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

/* Runs the purge statement q (?1 the cutoff, ?2 the limit). */
int store__purge_before(struct store *st, int q, const char *what, int64_t now,
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

/* Keeps `a` and `b` as the row strings of the last *_get (freeing old). */
void store__keep_row_strs(struct store *st, char *a, char *b)
{
	free(st->row_str[0]);
	free(st->row_str[1]);
	st->row_str[0] = a;
	st->row_str[1] = b;
}
