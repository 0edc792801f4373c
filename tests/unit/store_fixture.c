/* SPDX-License-Identifier: MIT */
/*
 * The shared fixture of the store's unit tests (store_fixture.h): a fresh
 * database per test on either back end, opening the store on it, reading
 * its tables, the plugin stand-in, and the helpers more than one file of
 * tests uses: making messages and ids, collecting listings, moving rows,
 * and checking the counts of semq_counts against the rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_fixture.h"

char own_node[SEMQ_ID_MAX + 1];

uint64_t own_life;

void admin_run(const char *sql)
{
	char msg[512];

	if (be_pg_run(be_admin(), sql, msg, sizeof msg))
		fail_msg("%s: %s", sql, msg);
}

int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *fx = calloc(1, sizeof *fx);
	char why[600];

	if (!fx)
		return -1;
	*state = fx;
	if (be_pg()) {
		if (be_schema_new(fx->schema, sizeof fx->schema, fx->path,
				  sizeof fx->path, why, sizeof why)) {
			fprintf(stderr, "%s", why);
			free(fx);
			return -1;
		}
		return 0;
	}
	snprintf(fx->dir, sizeof fx->dir, "%s/store-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(fx->dir)) {
		free(fx);
		return -1;
	}
	snprintf(fx->path, sizeof fx->path, "%s/node.db", fx->dir);
	return 0;
}

int teardown(void **state)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	struct fx *fx = *state;
	char p[PATH_MAX + 32];
	size_t i;

	store_free(fx->st);
	store_free(fx->st2);
	if (be_pg()) {
		be_schema_drop(fx->schema);
		free(fx);
		return 0;
	}
	for (i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
		snprintf(p, sizeof p, "%s%s", fx->path, sfx[i]);
		unlink(p);
	}
	rmdir(fx->dir);
	free(fx);
	return 0;
}

void *dbof(struct store *st)
{
	const struct semq_plugin_tx *tx = store_plugin_tx(st);

	assert_non_null(tx);
	assert_int_equal(tx->db_kind, be_pg() ? SEMQ_DB_PG : SEMQ_DB_SQLITE);
	assert_non_null(tx->db);
	return tx->db;
}

void exec(struct store *st, const char *sql)
{
	char *e = NULL, msg[512];

	if (be_pg()) {
		if (be_pg_run(dbof(st), sql, msg, sizeof msg))
			fail_msg("%s: %s", sql, msg);
		return;
	}
	if (sqlite3_exec(dbof(st), sql, NULL, NULL, &e) != SQLITE_OK)
		fail_msg("%s: %s", sql, e ? e : "?");
}

/* The first column of the first row of sql as text into buf (NULL when
 * there is none: no row, or NULL). */
static const char *q1_text(struct store *st, const char *sql, char *buf,
			   size_t bufsz)
{
	sqlite3_stmt *s = NULL;
	const char *v = NULL;

	buf[0] = '\0';
	if (be_pg()) {
		PGresult *res = PQexec(dbof(st), sql);

		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			snprintf(buf, bufsz, "%s", PQerrorMessage(dbof(st)));
			PQclear(res);
			fail_msg("%s: %s", sql, buf);
		}
		if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0)) {
			snprintf(buf, bufsz, "%s", PQgetvalue(res, 0, 0));
			v = buf;
		}
		PQclear(res);
		return v;
	}
	if (sqlite3_prepare_v2(dbof(st), sql, -1, &s, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(dbof(st)));
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) {
		snprintf(buf, bufsz, "%s",
			 (const char *)sqlite3_column_text(s, 0));
		v = buf;
	}
	sqlite3_finalize(s);
	return v;
}

int64_t q1(struct store *st, const char *sql)
{
	char buf[64];

	return q1_text(st, sql, buf, sizeof buf) ? strtoll(buf, NULL, 10)
						 : -999;
}

const char *q1s(struct store *st, const char *sql, char *buf, size_t bufsz)
{
	q1_text(st, sql, buf, bufsz);
	return buf;
}

int open_opts(struct fx *fx, const char *node, const struct store_opts *extra,
	      struct store **out, char *err)
{
	struct store_opts o = {.synchronous = -1};

	if (extra)
		o = *extra;
	o.path = fx->path;
	o.node_id = node;
	err[0] = '\0';
	return store_open(&o, out, err, SEMQ_ERRLEN);
}

struct store *open_ok(struct fx *fx, const char *node,
		      const struct store_opts *extra)
{
	char err[SEMQ_ERRLEN];
	int r = open_opts(fx, node, extra, &fx->st, err);

	if (r != SEMQ_OK)
		fail_msg("store_open: %d %s", r, err);
	snprintf(own_node, sizeof own_node, "%s", node);
	own_life = store_life(fx->st);
	exec(fx->st, be_sql("CREATE TABLE IF NOT EXISTS effect(id INTEGER"
			    " PRIMARY KEY, origin TEXT, dest TEXT, seq INTEGER,"
			    " tries INTEGER)",
			    "CREATE TABLE IF NOT EXISTS effect(id BIGSERIAL"
			    " PRIMARY KEY, origin TEXT, dest TEXT, seq BIGINT,"
			    " tries BIGINT)"));
	return fx->st;
}

void reopen(struct fx *fx, const char *node, const struct store_opts *extra)
{
	store_free(fx->st);
	fx->st = NULL;
	open_ok(fx, node, extra);
}

/* ---- the plugin stand-in ------------------------------------------------ */

/* The plugin's write: a row in `effect` through the open transaction;
 * 0, or -1 with why in msg. */
static int effect_insert(const struct semq_plugin_tx *tx, const struct msg *m,
			 unsigned tries, char *msg, size_t msgsz)
{
	char seq[24], tr[24];
	int r = -1;

	snprintf(seq, sizeof seq, "%llu", (unsigned long long)m->id.seq);
	snprintf(tr, sizeof tr, "%u", tries);
	if (tx->db_kind == SEMQ_DB_PG) {
		const char *v[4] = {m->id.origin, m->id.dest, seq, tr};
		PGresult *res = PQexecParams(
			tx->db,
			"INSERT INTO effect(origin, dest, seq, tries)"
			" VALUES ($1, $2, $3, $4)",
			4, NULL, v, NULL, NULL, 0);

		if (PQresultStatus(res) == PGRES_COMMAND_OK)
			r = 0;
		else
			snprintf(msg, msgsz, "%s", PQerrorMessage(tx->db));
		PQclear(res);
	} else {
		sqlite3_stmt *s = NULL;

		if (sqlite3_prepare_v2(tx->db,
				       "INSERT INTO effect(origin, dest, seq,"
				       " tries) VALUES (?1, ?2, ?3, ?4)",
				       -1, &s, NULL) == SQLITE_OK) {
			sqlite3_bind_text(s, 1, m->id.origin, -1,
					  SQLITE_STATIC);
			sqlite3_bind_text(s, 2, m->id.dest, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, 3, (sqlite3_int64)m->id.seq);
			sqlite3_bind_int(s, 4, (int)tries);
			if (sqlite3_step(s) == SQLITE_DONE)
				r = 0;
		}
		if (r)
			snprintf(msg, msgsz, "%s", sqlite3_errmsg(tx->db));
		sqlite3_finalize(s);
	}
	return r;
}

/* Runs SQL through the plugin's connection, ignoring the outcome. */
static void plugin_sql(const struct semq_plugin_tx *tx, const char *sql)
{
	if (tx->db_kind == SEMQ_DB_PG)
		PQclear(PQexec(tx->db, sql));
	else
		sqlite3_exec(tx->db, sql, NULL, NULL, NULL);
}

int apply_cb(void *ctx, const struct msg *m, unsigned tries,
	     const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	struct applier *a = ctx;
	char msg[256] = "";
	int v = a->next < a->n_verdicts ? a->verdicts[a->next++]
					: SEMQ_PLUGIN_OK;
	int want = be_pg() ? SEMQ_DB_PG : SEMQ_DB_SQLITE;

	if (a->calls < 16)
		a->tries[a->calls] = tries;
	a->calls++;
	if (tx->db_kind != want || !tx->db)
		snprintf(msg, sizeof msg, "tx: kind %d, db %p; want kind %d",
			 tx->db_kind, tx->db, want);
	/* The effect is written first in every case: a failure must roll it
	 * back. */
	else
		effect_insert(tx, m, tries, msg, sizeof msg);
	if (msg[0]) {
		if (!a->in_thread)
			fail_msg("apply %s/%s/%llu: %s", m->id.origin,
				 m->id.dest, (unsigned long long)m->id.seq,
				 msg);
		snprintf(a->fault, sizeof a->fault, "%s", msg);
	}
	if (a->bad_sql)
		plugin_sql(tx, "SELECT * FROM no_such_table");
	if (a->end_tx)
		plugin_sql(tx, "COMMIT");
	if (v != SEMQ_PLUGIN_OK && a->why)
		snprintf(err, errsz, "%s", a->why);
	return v;
}

void verdicts(struct applier *a, int n, ...)
{
	va_list ap;
	int i;

	va_start(ap, n);
	for (i = 0; i < n; i++)
		a->verdicts[a->n_verdicts++] = va_arg(ap, int);
	va_end(ap);
}

static uint64_t life_of(const char *origin)
{
	return strcmp(origin, own_node) == 0 ? own_life : SEMQ_LIFE_LEGACY;
}

void mkmsg(struct msg *m, const char *origin, const char *dest, uint64_t seq,
	   const char *key, uint64_t prev_seq)
{
	static uint8_t body[] = "document";

	memset(m, 0, sizeof *m);
	snprintf(m->id.origin, sizeof m->id.origin, "%s", origin);
	snprintf(m->id.dest, sizeof m->id.dest, "%s", dest);
	m->id.seq = seq;
	m->id.life = life_of(origin);
	m->type = 2800;
	if (key) {
		m->has_key = 1;
		snprintf(m->key, sizeof m->key, "%s", key);
	}
	m->prev_seq = prev_seq;
	m->created_at = NOW - 1000;
	m->payload = body;
	m->payload_len = sizeof body - 1;
}

void mkid(struct msgid *id, const char *origin, const char *dest, uint64_t seq)
{
	memset(id, 0, sizeof *id);
	snprintf(id->origin, sizeof id->origin, "%s", origin);
	snprintf(id->dest, sizeof id->dest, "%s", dest);
	id->seq = seq;
	id->life = life_of(origin);
}

void recv_expect(struct store *st, const struct msg *m, struct applier *a,
		 int64_t now, int want_r, int want_res)
{
	char err[SEMQ_ERRLEN] = "";
	int res = -7;
	int r = store_receive(st, m, NULL, CONFIRM_ORIGIN, now, apply_cb, a,
			      &res, err, sizeof err);

	if (r != want_r)
		fail_msg("receive seq %llu: %d (%s), wanted %d",
			 (unsigned long long)m->id.seq, r, err, want_r);
	assert_int_equal(res, want_res);
}

static uint8_t other_body[] = "another document";

void other_content(struct msg *m)
{
	m->payload = other_body;
	m->payload_len = sizeof other_body - 1;
}

void lookup_expect(struct store *st, const struct msgid *id, int want_received,
		   int want_res)
{
	int rec = -1, res = -7;

	assert_int_equal(store_lookup_received(st, id, &rec, &res), SEMQ_OK);
	assert_int_equal(rec, want_received);
	if (want_received)
		assert_int_equal(res, want_res);
}

/* ---- collecting listings ---------------------------------------------- */

int redo_collect(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct redo_seen *c = ctx;

	assert_true(c->n < 32);
	c->id[c->n] = row->id;
	c->seq[c->n] = m->id.seq;
	c->status[c->n] = row->status;
	c->n++;
	return 0;
}

int64_t redo_id_of(struct store *st, uint64_t seq)
{
	struct redo_seen c = {0};
	int i;

	assert_int_equal(store_redo_list(st, -100, 100, redo_collect, &c),
			 SEMQ_OK);
	for (i = 0; i < c.n; i++)
		if (c.seq[i] == seq)
			return c.id[i];
	fail_msg("no redo entry for seq %llu", (unsigned long long)seq);
	return -1;
}

void redo_expect(struct store *st, int64_t id, int status, int tries, int level,
		 int64_t next_at, const char *last_error)
{
	struct msg m;
	struct redo_row row;

	assert_int_equal(store_redo_get(st, id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, status);
	assert_int_equal(row.tries, tries);
	assert_int_equal(row.level, level);
	if (next_at >= 0)
		assert_int_equal(row.next_attempt_at, next_at);
	if (last_error) {
		assert_non_null(row.last_error);
		assert_string_equal(row.last_error, last_error);
	} else {
		assert_null(row.last_error);
	}
	msg_clear(&m);
}

static int out_count(void *ctx, const struct msg *m, const struct out_row *row)
{
	(void)m;
	(void)row;
	((struct out_seen *)ctx)->nested_n++;
	return 0;
}

int out_collect(void *ctx, const struct msg *m, const struct out_row *row)
{
	struct out_seen *c = ctx;

	assert_true(c->n < 64);
	snprintf(c->dest[c->n], sizeof c->dest[c->n], "%s", m->id.dest);
	c->seq[c->n] = m->id.seq;
	c->status[c->n] = row->status;
	c->n++;
	if (c->st && c->mark_sent)
		assert_int_equal(store_mark_sent(c->st, &m->id, NOW, NOW + 1),
				 SEMQ_OK);
	if (c->st && c->nested_listing)
		assert_int_equal(
			store_outbound_list(c->st, -100, 100, out_count, c),
			SEMQ_OK);
	return c->stop_after && c->n >= c->stop_after;
}

/* ---- the outbound queue -------------------------------------------------- */

uint64_t enqueue(struct store *st, const char *dest, const char *key)
{
	struct msg m;
	char err[SEMQ_ERRLEN] = "";
	uint64_t seq = 0;

	mkmsg(&m, "", dest, 0, key, 0);
	if (store_enqueue(st, &m, &seq, err, sizeof err) != SEMQ_OK)
		fail_msg("enqueue: %s", err);
	return seq;
}

void out_expect_status(struct store *st, const char *origin, const char *dest,
		       uint64_t seq, int status)
{
	struct msgid id;
	struct msg m;
	struct out_row row;

	mkid(&id, origin, dest, seq);
	assert_int_equal(store_outbound_get(st, &id, &m, &row), SEMQ_OK);
	assert_int_equal(row.status, status);
	msg_clear(&m);
}

struct msgid own_id(const char *dest, uint64_t seq, uint64_t digest)
{
	struct msgid id;

	mkid(&id, own_node, dest, seq);
	id.digest = digest;
	return id;
}

int out_line(struct store *st, const char *origin, const char *dest,
	     uint64_t seq, struct out_line *l)
{
	struct msgid id;
	struct msg m;
	struct out_row row;
	int r;

	mkid(&id, origin, dest, seq);
	memset(l, 0, sizeof *l);
	r = store_outbound_get(st, &id, &m, &row);
	if (r != SEMQ_OK)
		return r;
	l->status = row.status;
	l->result = row.result;
	l->type = m.type;
	l->prev_seq = m.prev_seq;
	l->digest = m.id.digest;
	l->next_at = row.next_attempt_at;
	snprintf(l->last_error, sizeof l->last_error, "%s",
		 row.last_error ? row.last_error : "");
	msg_clear(&m);
	return SEMQ_OK;
}

void mark(struct store *st, const char *dest, uint64_t seq, int what,
	  const char *relay, int64_t at)
{
	struct msgid id;

	mkid(&id, own_node, dest, seq);
	switch (what) {
	case SS_SEND:
		assert_int_equal(store_mark_sent(st, &id, at, at + 30000),
				 SEMQ_OK);
		break;
	case SS_ACK:
		if (relay)
			assert_int_equal(
				store_mark_custody(st, &id, relay, at + 30000),
				SEMQ_OK);
		else
			assert_int_equal(
				store_mark_relay_acked(st, &id, at, at + 30000),
				SEMQ_OK);
		break;
	case SS_ACK2:
		assert_int_equal(
			store_mark_confirmed(st, &id, RES_PROCESSED, at),
			SEMQ_OK);
		break;
	case SS_CANCELLED:
		assert_int_equal(store_cancel(st, &id, at), SEMQ_OK);
		break;
	default: fail_msg("mark: %d", what);
	}
}

/* ---- watermarks ---------------------------------------------------------- */

void ack(struct store *st, uint64_t seq, unsigned bit, int want_ok)
{
	struct msgid id;
	int ok = -1;

	mkid(&id, "R1", "S1", seq);
	assert_int_equal(store_ack_response(st, &id, bit, &ok), SEMQ_OK);
	assert_int_equal(ok, want_ok);
}

/* ---- counts without scans (semq_counts, schema 5) ------------------------ */

/* A copy of what a counts listing said, to compare two of them. */
struct cnt_seen {
	int n;
	struct {
		char table[8], a[SEMQ_ID_MAX + 1], b[SEMQ_ID_MAX + 1];
		int status;
		int64_t count, bytes, oldest;
	} r[48];
};

static int cnt_stat(void *ctx, const struct stat_row *r)
{
	struct cnt_seen *c = ctx;

	assert_true(c->n < 48);
	snprintf(c->r[c->n].table, sizeof c->r[c->n].table, "%s", r->table);
	snprintf(c->r[c->n].a, sizeof c->r[c->n].a, "%s", r->origin);
	snprintf(c->r[c->n].b, sizeof c->r[c->n].b, "%s", r->dest);
	c->r[c->n].status = r->status;
	c->r[c->n].count = r->count;
	c->r[c->n].oldest = r->oldest;
	c->n++;
	return 0;
}

static int cnt_waiting(void *ctx, const char *dest, const char *relay,
		       int64_t n, int64_t since)
{
	struct cnt_seen *c = ctx;

	assert_true(c->n < 48);
	snprintf(c->r[c->n].a, sizeof c->r[c->n].a, "%s", dest);
	snprintf(c->r[c->n].b, sizeof c->r[c->n].b, "%s", relay);
	c->r[c->n].count = n;
	c->r[c->n].oldest = since;
	c->n++;
	return 0;
}

static int cnt_custody(void *ctx, const char *origin, const char *dest,
		       int64_t messages, int64_t bytes, int64_t oldest)
{
	struct cnt_seen *c = ctx;

	assert_true(c->n < 48);
	snprintf(c->r[c->n].a, sizeof c->r[c->n].a, "%s", origin);
	snprintf(c->r[c->n].b, sizeof c->r[c->n].b, "%s", dest);
	c->r[c->n].count = messages;
	c->r[c->n].bytes = bytes;
	c->r[c->n].oldest = oldest;
	c->n++;
	return 0;
}

/* Does `c` hold the line of x (table, a, b, status, count; with_oldest:
 * and oldest; bytes too)? */
static int cnt_has(const struct cnt_seen *c, const struct cnt_seen *x, int i,
		   int with_oldest)
{
	int k;

	for (k = 0; k < c->n; k++)
		if (!strcmp(c->r[k].table, x->r[i].table) &&
		    !strcmp(c->r[k].a, x->r[i].a) &&
		    !strcmp(c->r[k].b, x->r[i].b) &&
		    c->r[k].status == x->r[i].status &&
		    c->r[k].count == x->r[i].count &&
		    c->r[k].bytes == x->r[i].bytes &&
		    (!with_oldest || c->r[k].oldest == x->r[i].oldest))
			return 1;
	return 0;
}

/* Two listings say the same, line for line (in any order). */
static void cnt_same(const char *what, const struct cnt_seen *want,
		     const struct cnt_seen *got, int with_oldest)
{
	int i;

	for (i = 0; i < want->n; i++)
		if (!cnt_has(got, want, i, with_oldest))
			fail_msg("%s: %s %s>%s status %d: %lld rows (oldest "
				 "%lld) not in the counts",
				 what, want->r[i].table, want->r[i].a,
				 want->r[i].b, want->r[i].status,
				 (long long)want->r[i].count,
				 (long long)want->r[i].oldest);
	if (got->n != want->n)
		fail_msg("%s: %d counts, %d lines counted from the rows", what,
			 got->n, want->n);
}

void counts_agree(struct store *st, const char *when)
{
	struct cnt_seen want, got;
	char what[128];

	memset(&want, 0, sizeof want);
	memset(&got, 0, sizeof got);
	assert_int_equal(store_stats(st, cnt_stat, &want), SEMQ_OK);
	assert_int_equal(store_counts(st, cnt_stat, &got), SEMQ_OK);
	snprintf(what, sizeof what, "%s: counts", when);
	cnt_same(what, &want, &got, 0);
	memset(&want, 0, sizeof want);
	memset(&got, 0, sizeof got);
	assert_int_equal(store_custody_waiting(st, cnt_waiting, &want),
			 SEMQ_OK);
	assert_int_equal(store_counts_waiting(st, cnt_waiting, &got), SEMQ_OK);
	snprintf(what, sizeof what, "%s: waiting", when);
	cnt_same(what, &want, &got, 1);
	memset(&want, 0, sizeof want);
	memset(&got, 0, sizeof got);
	assert_int_equal(store_custody_list(st, cnt_custody, &want), SEMQ_OK);
	assert_int_equal(store_counts_custody(st, cnt_custody, &got), SEMQ_OK);
	snprintf(what, sizeof what, "%s: custody", when);
	cnt_same(what, &want, &got, 1);
}

int64_t count_of(struct store *st, const char *table, const char *origin,
		 const char *dest, int status, int64_t *oldest)
{
	struct cnt_seen c;
	int i;

	memset(&c, 0, sizeof c);
	assert_int_equal(store_counts(st, cnt_stat, &c), SEMQ_OK);
	for (i = 0; i < c.n; i++)
		if (!strcmp(c.r[i].table, table) && !strcmp(c.r[i].a, origin) &&
		    !strcmp(c.r[i].b, dest) && c.r[i].status == status) {
			if (oldest)
				*oldest = c.r[i].oldest;
			return c.r[i].count;
		}
	if (oldest)
		*oldest = 0;
	return 0;
}

/* ---- the plans of the counts' reads (SQLite) ---- */

int read_trace_cb(unsigned type, void *ctx, void *p, void *x)
{
	struct read_trace *t = ctx;
	sqlite3_stmt *s = p;
	const char *sql = sqlite3_sql(s);
	int i;

	(void)x;
	if (type != SQLITE_TRACE_PROFILE || !sql)
		return 0;
	t->steps += sqlite3_stmt_status(s, SQLITE_STMTSTATUS_VM_STEP, 1);
	for (i = 0; i < t->n; i++)
		if (!strcmp(t->sql[i], sql))
			return 0;
	if (t->n < 24)
		snprintf(t->sql[t->n++], sizeof t->sql[0], "%s", sql);
	return 0;
}
