/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store_stat.c: the rows per table, stream and status
 * (store_stats, the streams), and the counts that /metrics, /streams and
 * `semqctl status` read without scans (semq_counts, schema 5): that they
 * follow every change, that the migration to schema 5 makes them, and
 * (SQLite) that their reads do not grow with the rows.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store_fixture.h"

/* ---- stats --------------------------------------------------------------- */

/* What the node's next batch does with the application's new rows. */
static void number(struct store *st)
{
	unsigned n = 0;
	int more = 1;

	while (more)
		assert_int_equal(
			store_number_new(st, NOW, 100000, 1, &n, &more),
			SEMQ_OK);
}

struct stats_seen {
	int n;
	struct {
		char table[8], origin[SEMQ_ID_MAX + 1], dest[SEMQ_ID_MAX + 1];
		int status;
		int64_t count, oldest;
	} r[32];
	int streams;
	char stream[8][2 * SEMQ_ID_MAX + 32];
};

static int stats_collect(void *ctx, const struct stat_row *r)
{
	struct stats_seen *c = ctx;

	assert_true(c->n < 32);
	snprintf(c->r[c->n].table, sizeof c->r[c->n].table, "%s", r->table);
	snprintf(c->r[c->n].origin, sizeof c->r[c->n].origin, "%s", r->origin);
	snprintf(c->r[c->n].dest, sizeof c->r[c->n].dest, "%s", r->dest);
	c->r[c->n].status = r->status;
	c->r[c->n].count = r->count;
	c->r[c->n].oldest = r->oldest;
	c->n++;
	return 0;
}

static int stream_collect(void *ctx, const char *origin, const char *dest,
			  uint64_t life, uint64_t w)
{
	struct stats_seen *c = ctx;

	assert_int_equal(life, SEMQ_LIFE_LEGACY);
	assert_true(c->streams < 8);
	snprintf(c->stream[c->streams], sizeof c->stream[c->streams],
		 "%s>%s@%llu", origin, dest, (unsigned long long)w);
	c->streams++;
	return 0;
}

/* The count of one stats line (-1 when there is no such line). */
static int64_t stat_of(const struct stats_seen *c, const char *table,
		       const char *origin, const char *dest, int status,
		       int64_t *oldest)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (!strcmp(c->r[i].table, table) &&
		    !strcmp(c->r[i].origin, origin) &&
		    !strcmp(c->r[i].dest, dest) && c->r[i].status == status) {
			if (oldest)
				*oldest = c->r[i].oldest;
			return c->r[i].count;
		}
	return -1;
}

static void test_stats_and_streams(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct stats_seen c;
	struct msg m;
	struct msgid id;
	int64_t oldest = 0;
	unsigned n;

	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW + 7, SEMQ_OK, RES_PROCESSED);
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R2", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW + 3, SEMQ_OK, RES_REDO);
	enqueue(st, "R1", NULL);
	enqueue(st, "R1", NULL);
	mkid(&id, "S1", "R1", 1);
	assert_int_equal(store_mark_sent(st, &id, NOW, NOW), SEMQ_OK);
	ack(st, 1, CONFIRM_ORIGIN, 1);

	memset(&c, 0, sizeof c);
	assert_int_equal(store_stats(st, stats_collect, &c), SEMQ_OK);
	assert_int_equal(c.n, 6);
	assert_int_equal(stat_of(&c, "tb_0031", "S1", "R1", SS_UNSEND, NULL),
			 1);
	assert_int_equal(stat_of(&c, "tb_0031", "S1", "R1", SS_SEND, NULL), 1);
	assert_int_equal(stat_of(&c, "tb_0030", "R1", "S1", AS_OK, &oldest), 1);
	assert_int_equal(oldest, NOW);
	assert_int_equal(stat_of(&c, "tb_0030", "R1", "S1", AS_INIT, &oldest),
			 1);
	assert_int_equal(oldest, NOW + 7);
	assert_int_equal(stat_of(&c, "tb_0030", "R2", "S1", AS_INIT, &oldest),
			 1);
	assert_int_equal(oldest, NOW + 3);
	assert_int_equal(
		stat_of(&c, "tb_0033", "R2", "S1", RS_PENDING, &oldest), 1);
	assert_int_equal(oldest, NOW + 3);

	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(store_streams_in(st, stream_collect, &c), SEMQ_OK);
	assert_int_equal(c.streams, 2);
	assert_string_equal(c.stream[0], "R1>S1@1");
	assert_string_equal(c.stream[1], "R2>S1@0");
	assert_int_equal(store_stats(st, NULL, &c), SEMQ_ERR_INVALID);
}

/* ---- counts without scans (semq_counts, schema 5) ------------------------ */

/*
 * semq_counts follows every change of the three tables, whoever makes it —
 * the store's calls, an application's INSERT, an operator's UPDATE and
 * DELETE, a relay's copies, the purges — and a rolled-back batch takes its
 * counts back with its rows. After each step the counts are what a GROUP BY
 * over the tables says, and the custody views what the scanning ones say.
 */
static void test_counts_follow_changes(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct applier a = {.why = "down"};
	struct msgid id;
	struct msg m;
	int64_t oldest;
	unsigned n;
	int i;

	counts_agree(st, "empty");
	/* Own messages, from the store and from an application's INSERT. */
	for (i = 0; i < 6; i++)
		enqueue(st, "S1", NULL);
	exec(st, be_sql("INSERT INTO tb_0031(dest, type, payload, created_at)"
			" VALUES ('S2', 1, x'00', 1700000000005)",
			"INSERT INTO tb_0031(dest, type, payload, created_at)"
			" VALUES ('S2', 1, '\\x00'::bytea, 1700000000005)"));
	counts_agree(st, "inserted"); /* the new row: P1's, unsent */
	assert_int_equal(
		count_of(st, "tb_0031", "P1", "S2", SS_UNSEND, &oldest), 1);
	assert_int_equal(oldest, NOW + 5);
	number(st); /* what the node's next batch does */
	counts_agree(st, "enqueued");
	assert_int_equal(
		count_of(st, "tb_0031", "P1", "S1", SS_UNSEND, &oldest), 6);
	assert_int_equal(oldest, NOW - 1000);
	assert_int_equal(
		count_of(st, "tb_0031", "P1", "S2", SS_UNSEND, &oldest), 1);
	assert_int_equal(oldest, NOW + 5);

	/* Every transition of tb_0031. */
	mark(st, "S1", 1, SS_SEND, NULL, NOW);
	mark(st, "S1", 2, SS_SEND, NULL, NOW);
	mark(st, "S1", 2, SS_ACK, NULL, NOW);
	mark(st, "S1", 3, SS_SEND, NULL, NOW + 1);
	mark(st, "S1", 3, SS_ACK, "Q1", NOW + 1);
	mark(st, "S1", 4, SS_SEND, NULL, NOW + 2);
	mark(st, "S1", 4, SS_ACK, "Q2", NOW + 2);
	mark(st, "S1", 4, SS_CANCELLED, NULL, NOW + 3); /* held by Q2 */
	mark(st, "S1", 5, SS_SEND, NULL, NOW + 3);
	mark(st, "S1", 5, SS_ACK2, NULL, NOW + 4);
	mkid(&id, "P1", "S1", 6);
	assert_int_equal(store_hold(st, &id, RES_UNDECIDED, "test", NOW),
			 SEMQ_OK);
	counts_agree(st, "transitions");
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_ACK, NULL), 2);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_SEND, NULL), 1);

	/* A relay's copies: stored, refreshed, dropped. */
	for (i = 1; i <= 3; i++) {
		mkmsg(&m, "R1", "S1", (uint64_t)i, NULL, 0);
		assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	}
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_DUPLICATE);
	assert_int_equal(
		store_relay_note(st, "R1", "S1", SEMQ_LIFE_LEGACY, 3, NOW),
		SEMQ_OK);
	mkid(&id, "R1", "S1", 1);
	assert_int_equal(store_drop_copy(st, &id), SEMQ_OK);
	mkid(&id, "R1", "S1", 2);
	assert_int_equal(store_copy_cancel(st, &id, NOW), SEMQ_OK);
	counts_agree(st, "copies");
	assert_int_equal(count_of(st, "tb_0031", "R1", "S1", SS_UNSEND, NULL),
			 1);

	/* Received messages and the redo queue. */
	for (i = 1; i <= 4; i++) {
		mkmsg(&m, "R1", "P1", (uint64_t)i, NULL, 0);
		recv_expect(st, &m, &a, NOW + i, SEMQ_OK, RES_PROCESSED);
	}
	verdicts(&a, 2, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R2", "P1", 1, "k", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R2", "P1", 2, "k2", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R2", "P1", 3, "k", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO); /* waiting */
	mkid(&id, "R1", "P1", 1);
	assert_int_equal(store_ack_response(st, &id, CONFIRM_ORIGIN, &i),
			 SEMQ_OK);
	mkid(&id, "R1", "P1", 2);
	assert_int_equal(store_ack_response(st, &id, CONFIRM_ORIGIN, &i),
			 SEMQ_OK);
	counts_agree(st, "received");
	assert_int_equal(count_of(st, "tb_0030", "R1", "P1", AS_INIT, &oldest),
			 2);
	assert_int_equal(oldest, NOW + 3);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	assert_int_equal(count_of(st, "tb_0030", "R1", "P1", AS_INIT, &oldest),
			 2);
	assert_int_equal(oldest, NOW + 3); /* the first above the watermark */
	assert_int_equal(store_redo_retry_all_dead(st, NOW, &n), SEMQ_OK);
	assert_int_equal(store_redo_discard(st, redo_id_of(st, 2), "test", NOW),
			 SEMQ_OK);
	counts_agree(st, "redo");

	/* A rolled-back batch leaves the counts as they were. */
	assert_int_equal(store_begin(st), SEMQ_OK);
	enqueue(st, "S1", NULL);
	enqueue(st, "S3", NULL);
	mark(st, "S1", 1, SS_ACK2, NULL, NOW + 9);
	mkmsg(&m, "R1", "P1", 9, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R3", "P1", 1, NULL, 0);
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	assert_int_equal(store_rollback(st), SEMQ_OK);
	counts_agree(st, "rolled back");
	assert_int_equal(count_of(st, "tb_0031", "P1", "S3", SS_UNSEND, NULL),
			 0);

	/* The purges. */
	assert_int_equal(store_purge(st, NOW + 100000, 0, 100, &n), SEMQ_OK);
	assert_true(n >= 1);
	assert_int_equal(store_receipt_purge(st, NOW + 100000, 0, 100, &n),
			 SEMQ_OK);
	assert_true(n >= 1);
	assert_int_equal(store_redo_purge(st, NOW + 100000, 0, 100, &n),
			 SEMQ_OK);
	assert_true(n >= 1);
	counts_agree(st, "purged");

	/* An operator's SQL. */
	exec(st, "UPDATE tb_0031 SET status = 0, custodian = NULL"
		 " WHERE status = 6 AND custodian = 'Q1'");
	exec(st, "UPDATE tb_0030 SET origin = 'R7' WHERE seq = 4");
	exec(st, "UPDATE tb_0033 SET status = -1 WHERE status = 0");
	exec(st, "DELETE FROM tb_0031 WHERE dest = 'S2'");
	exec(st, "DELETE FROM tb_0030 WHERE seq = 3");
	counts_agree(st, "manual SQL");
	if (be_pg()) {
		exec(st, "TRUNCATE tb_0033");
		counts_agree(st, "TRUNCATE");
	}
	exec(st, "DELETE FROM tb_0031");
	exec(st, "DELETE FROM tb_0030");
	exec(st, "DELETE FROM tb_0033");
	counts_agree(st, "all deleted");
}

/*
 * A database of schema 4 with rows in it gets its counts at the migration
 * to schema 5: one pass over the tables, in the migration's transaction.
 */
/* What schema 6 added (0006_filters.sql). */
#define DROP_0006                                                              \
	" DROP INDEX idx_0031_msg_key; DROP INDEX idx_0033_msg_key;"           \
	" DROP INDEX idx_0031_dead; DROP INDEX idx_0031_new"
/* What schema 8 took away (0008_lean_receipt.sql). */
#define UNDO_0008 " CREATE INDEX idx_0030_received ON tb_0030(received_at)"

static void test_counts_from_migration(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "P1", NULL);
	struct applier a = {0};
	struct msg m;
	int i;

	for (i = 0; i < 3; i++)
		enqueue(st, "S1", NULL);
	mark(st, "S1", 1, SS_SEND, NULL, NOW);
	mark(st, "S1", 1, SS_ACK, "Q1", NOW);
	mkmsg(&m, "R1", "S1", 4, NULL, 0);
	assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	mkmsg(&m, "R1", "P1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	/* Back to schema 4, as a database written before this one. */
	exec(st, "DROP TABLE semq_counts");
	exec(st, "DELETE FROM semq_schema WHERE version >= 5");
	if (be_pg())
		exec(st, "DROP FUNCTION tb_0031_count() CASCADE;"
			 " DROP FUNCTION tb_0031_count_fill() CASCADE;"
			 " DROP FUNCTION tb_0031_check() CASCADE;"
			 " DROP FUNCTION tb_0030_count() CASCADE;"
			 " DROP FUNCTION tb_0033_count() CASCADE;"
			 " DROP FUNCTION semq_count_truncate() CASCADE;"
			 " DROP INDEX idx_0031_held;" DROP_0006 ";" UNDO_0008);
	else
		exec(st, "DROP TRIGGER tb_0031_count_add;"
			 " DROP TRIGGER tb_0031_check;"
			 " DROP TRIGGER tb_0031_count_fill;"
			 " DROP TRIGGER tb_0031_count_move;"
			 " DROP TRIGGER tb_0031_count_drop;"
			 " DROP TRIGGER tb_0030_count_add;"
			 " DROP TRIGGER tb_0030_count_move;"
			 " DROP TRIGGER tb_0030_count_drop;"
			 " DROP TRIGGER tb_0033_count_add;"
			 " DROP TRIGGER tb_0033_count_move;"
			 " DROP TRIGGER tb_0033_count_drop;"
			 " DROP INDEX idx_0031_held;" DROP_0006 ";" UNDO_0008);
	reopen(fx, "P1", NULL);
	st = fx->st;
	assert_int_equal(store_migrated_from(st), 4);
	if (!be_pg()) /* the copy kept before migrating: not the test's */
		unlink(store_backup(st));
	assert_int_equal(store_schema_version(st), store_schema_latest());
	counts_agree(st, "migrated");
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_UNSEND, NULL),
			 2);
	assert_int_equal(count_of(st, "tb_0031", "P1", "S1", SS_ACK, NULL), 1);
	assert_int_equal(count_of(st, "tb_0031", "R1", "S1", SS_UNSEND, NULL),
			 1);
	assert_int_equal(count_of(st, "tb_0030", "R1", "P1", AS_INIT, NULL), 1);
	enqueue(st, "S1", NULL);
	counts_agree(st, "after the migration");
}

/* ---- the plans of the counts' reads (SQLite) ----------------------------- */

static int read_ignore(void *ctx, const void *r)
{
	(void)ctx;
	(void)r;
	return 0;
}

static int stat_ignore(void *ctx, const struct stat_row *r)
{
	return read_ignore(ctx, r);
}

static int waiting_ignore(void *ctx, const char *dest, const char *relay,
			  int64_t n, int64_t since)
{
	(void)dest;
	(void)relay;
	(void)n;
	(void)since;
	return read_ignore(ctx, NULL);
}

static int custody_ignore(void *ctx, const char *origin, const char *dest,
			  int64_t messages, int64_t bytes, int64_t oldest)
{
	(void)origin;
	(void)dest;
	(void)messages;
	(void)bytes;
	(void)oldest;
	return read_ignore(ctx, NULL);
}

static int in_ignore(void *ctx, const char *origin, const char *dest,
		     uint64_t life, uint64_t w)
{
	(void)origin;
	(void)dest;
	(void)life;
	(void)w;
	return read_ignore(ctx, NULL);
}

static int out_ignore(void *ctx, const struct out_stream *os)
{
	return read_ignore(ctx, os);
}

/* Runs every read of /metrics and /streams (report.c streams_read) and of
 * `semqctl status`, traced into t. */
static void report_reads(struct store *st, struct read_trace *t)
{
	sqlite3 *db = dbof(st);
	sqlite3_stmt *s = NULL;

	/* Counters of earlier runs are not this one's. */
	while ((s = sqlite3_next_stmt(db, s)))
		sqlite3_stmt_status(s, SQLITE_STMTSTATUS_VM_STEP, 1);
	memset(t, 0, sizeof *t);
	sqlite3_trace_v2(db, SQLITE_TRACE_PROFILE, read_trace_cb, t);
	assert_int_equal(store_counts(st, stat_ignore, NULL), SEMQ_OK);
	assert_int_equal(store_streams_in(st, in_ignore, NULL), SEMQ_OK);
	assert_int_equal(store_streams_out(st, out_ignore, NULL), SEMQ_OK);
	assert_int_equal(store_counts_custody(st, custody_ignore, NULL),
			 SEMQ_OK);
	assert_int_equal(store_counts_waiting(st, waiting_ignore, NULL),
			 SEMQ_OK);
	sqlite3_trace_v2(db, 0, NULL, NULL);
}

/* The tables whose size is the number of streams (or less): a read may
 * go through all of them. */
static int small_table(const char *name)
{
	static const char *const small[] = {
		"semq_counts",  "semq_stream_in",    "semq_stream_out",
		"semq_custody", "semq_stream_relay", "semq_meta"};
	size_t i, n;

	for (i = 0; i < sizeof small / sizeof small[0]; i++) {
		n = strlen(small[i]);
		if (!strncmp(name, small[i], n) &&
		    (name[n] == '\0' || name[n] == ' '))
			return 1;
	}
	return 0;
}

/*
 * The plan of sql: no SCAN of a table but the small ones, and no temporary
 * b-tree (a sort) beside a search of a queue — a search that sorts what it
 * found reads all of it. Fails naming the statement and the plan.
 */
static void plan_check(sqlite3 *db, const char *sql)
{
	struct {
		int id, parent;
		char detail[256];
	} p[64];
	char q[4200], plan[4096] = "";
	sqlite3_stmt *s = NULL;
	int n = 0, i, k, bad = 0;

	snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", sql);
	if (sqlite3_prepare_v2(db, q, -1, &s, NULL) != SQLITE_OK)
		fail_msg("%s: %s", q, sqlite3_errmsg(db));
	while (sqlite3_step(s) == SQLITE_ROW && n < 64) {
		p[n].id = sqlite3_column_int(s, 0);
		p[n].parent = sqlite3_column_int(s, 1);
		snprintf(p[n].detail, sizeof p[n].detail, "%s",
			 (const char *)sqlite3_column_text(s, 3));
		snprintf(plan + strlen(plan), sizeof plan - strlen(plan),
			 "\n  %s", p[n].detail);
		n++;
	}
	sqlite3_finalize(s);
	for (i = 0; i < n; i++) {
		/* idx_0031_new holds the rows committed since the node's
		 * last batch, which numbers them (migration 0007). */
		if (!strncmp(p[i].detail, "SCAN ", 5) &&
		    !small_table(p[i].detail + 5) &&
		    strcmp(p[i].detail + 5,
			   "tb_0031 USING INDEX idx_0031_new") &&
		    strncmp(p[i].detail + 5, "CONSTANT ROW", 12) &&
		    p[i].detail[5] != '(')
			bad = 1;
		if (strncmp(p[i].detail, "USE TEMP B-TREE", 15))
			continue;
		for (k = 0; k < n; k++)
			if (p[k].parent == p[i].parent &&
			    !strncmp(p[k].detail, "SEARCH tb_00", 12))
				bad = 1;
	}
	if (bad)
		fail_msg("a read of the reports scans a queue:\n%s\nplan:%s",
			 sql, plan);
}

/*
 * Every read of /metrics, /streams and `semqctl status` is O(streams), not
 * O(rows): its plan scans no queue (tb_0031, tb_0030, tb_0033) and sorts
 * nothing it found in one, and the work it does (SQLite's virtual machine
 * steps) is the same with ten times the rows in the same streams and
 * statuses. SQLite only: PostgreSQL plans by the statistics of the moment.
 */
static void test_count_plans(void **state)
{
	enum { MORE = 300 };
	struct fx *fx = *state;
	struct store *st;
	struct applier a = {0};
	struct read_trace t1, t2;
	struct msgid id;
	struct msg m;
	char sql[1024];
	unsigned n;
	int i;

	if (be_pg())
		skip();
	st = open_ok(fx, "P1", NULL);
	/* Every kind of count the reads look into. */
	for (i = 0; i < 8; i++)
		enqueue(st, "S1", NULL);
	mark(st, "S1", 1, SS_SEND, NULL, NOW);
	mark(st, "S1", 2, SS_SEND, NULL, NOW);
	mark(st, "S1", 2, SS_ACK, NULL, NOW);
	mark(st, "S1", 3, SS_SEND, NULL, NOW);
	mark(st, "S1", 3, SS_ACK, "Q1", NOW);
	mark(st, "S1", 4, SS_SEND, NULL, NOW);
	mark(st, "S1", 4, SS_ACK2, NULL, NOW);
	mark(st, "S1", 5, SS_CANCELLED, NULL, NOW);
	for (i = 1; i <= 2; i++) {
		mkmsg(&m, "R1", "S1", (uint64_t)i, NULL, 0);
		assert_int_equal(store_enqueue_copy(st, &m, NOW), SEMQ_OK);
	}
	assert_int_equal(
		store_relay_note(st, "R1", "S1", SEMQ_LIFE_LEGACY, 2, NOW),
		SEMQ_OK);
	for (i = 1; i <= 3; i++) {
		mkmsg(&m, "R1", "P1", (uint64_t)i, NULL, 0);
		recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	}
	mkid(&id, "R1", "P1", 1);
	assert_int_equal(store_ack_response(st, &id, CONFIRM_ORIGIN, &i),
			 SEMQ_OK);
	assert_int_equal(store_advance_watermarks(st, &n), SEMQ_OK);
	verdicts(&a, 2, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R2", "P1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R2", "P1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	report_reads(st, &t1);

	/* Ten times the rows, in the same streams and statuses, each behind
	 * the first of its kind. */
#define MORE_ROWS(status, extra_cols, extra_vals, base)                        \
	snprintf(sql, sizeof sql,                                              \
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"     \
		 " FROM g WHERE i < %d) INSERT INTO tb_0031(origin, dest,"     \
		 " seq, life, type, payload, created_at, status" extra_cols    \
		 ") SELECT 'P1', 'S1', %d + i, %" PRId64 ", 1, x'00',"         \
		 " %" PRId64 " + i, %d" extra_vals " FROM g",                  \
		 MORE, base, (int64_t)own_life, NOW, status);                  \
	exec(st, sql)
	MORE_ROWS(SS_ACK2, "", "", 1000);
	MORE_ROWS(SS_UNSEND, "", "", 2000);
	MORE_ROWS(SS_SEND, ", sent_at", ", 1700000000000 + i", 3000);
	MORE_ROWS(SS_ACK, ", sent_at", ", 1700000000000 + i", 4000);
	MORE_ROWS(SS_ACK, ", sent_at, custodian", ", 1700000000000 + i, 'Q1'",
		  5000);
	MORE_ROWS(SS_CANCELLED, "", "", 6000);
#undef MORE_ROWS
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0031(origin, dest,"
		 " seq, life, type, payload, created_at) SELECT 'R1', 'S1',"
		 " 100 + i, 1, 1, x'00', %" PRId64 " + i FROM g",
		 MORE, NOW);
	exec(st, sql);
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0030(origin, dest,"
		 " seq, life, type, received_at, result, ack_status)"
		 " SELECT 'R1', 'P1', 100 + i, 1, 1, %" PRId64 " + i, 0, %d"
		 " FROM g",
		 MORE, NOW, AS_OK);
	exec(st, sql);
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0030(origin, dest,"
		 " seq, life, type, received_at, result, ack_status)"
		 " SELECT 'R1', 'P1', 1000 + i, 1, 1, %" PRId64 " + i, 0, %d"
		 " FROM g",
		 MORE, NOW, AS_INIT);
	exec(st, sql);
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1"
		 " FROM g WHERE i < %d) INSERT INTO tb_0033(origin, dest,"
		 " seq, life, type, payload, status, created_at, updated_at)"
		 " SELECT 'R2', 'P1', s.b + i, 1, 1, x'00', s.v, 1, 1"
		 " FROM g, (SELECT 0 AS v, 100 AS b UNION ALL"
		 " SELECT -1, 1000) s",
		 MORE);
	exec(st, sql);
	assert_true(q1(st, "SELECT count(*) FROM tb_0031") > 7 * MORE);
	report_reads(st, &t2);

	assert_true(t1.n >= 5);
	assert_int_equal(t1.n, t2.n);
	for (i = 0; i < t2.n; i++)
		plan_check(dbof(st), t2.sql[i]);
	if (t2.steps != t1.steps)
		fail_msg("the reads took %lld steps, %lld with %d times the "
			 "rows: they grow with the rows",
			 (long long)t1.steps, (long long)t2.steps, MORE);
	counts_agree(st, "plans");
}

const struct CMUnitTest store_stat_tests[] = {
	STORE_TEST(test_stats_and_streams),
	STORE_TEST(test_counts_follow_changes),
	STORE_TEST(test_counts_from_migration),
	STORE_TEST(test_count_plans),
};
const size_t store_stat_ntests = BE_N(store_stat_tests);
