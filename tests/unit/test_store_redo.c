/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node/store_redo.c, the redo queue tb_0033: scheduled
 * messages (deliver_at), key order (waiting entries and the order they are
 * released in), levels of backoff and dead entries, the operator's filters
 * and bulk verbs, the purge by retention, the head a waiting entry waits
 * for, and what a second copy of a message in the queue is answered.
 */
#include <stdio.h>
#include <string.h>

#include "store_fixture.h"

static void test_deliver_at_scheduled(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct redo_seen c = {0};
	struct msg m;
	int64_t at = 0, id;
	int status = -9;

	assert_int_equal(store_redo_next_due(st, &at), SEMQ_DECLINED);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	m.deliver_at = NOW + 60000;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	assert_int_equal(a.calls, 0);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030"), RES_SCHEDULED);
	id = redo_id_of(st, 1);
	redo_expect(st, id, RS_PENDING, 0, 0, NOW + 60000, NULL);
	assert_int_equal(store_redo_next_due(st, &at), SEMQ_OK);
	assert_int_equal(at, NOW + 60000);
	assert_int_equal(store_redo_due(st, NOW + 59999, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 0);
	assert_int_equal(store_redo_due(st, NOW + 60000, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.id[0], id);

	/* Same key while it is scheduled: behind it. */
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW + 10, SEMQ_OK, RES_REDO);
	redo_expect(st, redo_id_of(st, 2), RS_WAITING, 0, 0, -1, NULL);

	assert_int_equal(
		store_redo_run(st, id, NOW + 60000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.tries[0], 0);
	redo_expect(st, id, RS_DONE, 1, 0, -1, NULL);
	redo_expect(st, redo_id_of(st, 2), RS_PENDING, 0, 0, NOW + 60000, NULL);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 1);
	assert_int_equal(
		store_redo_run(st, id, NOW + 60000, apply_cb, &a, &status),
		SEMQ_DECLINED);
	assert_int_equal(store_redo_run(st, 4242, NOW, apply_cb, &a, &status),
			 SEMQ_ERR_NOT_FOUND);
}

/* A scheduled message of a key that is waiting behind a failed head is
 * not released before its deliver_at. */
static void test_scheduled_behind_failed_head(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct msg m;
	int status;

	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	m.deliver_at = NOW + 100000;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	redo_expect(st, redo_id_of(st, 2), RS_WAITING, 0, 0, -1, NULL);
	assert_int_equal(store_redo_run(st, redo_id_of(st, 1), NOW + 5000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	redo_expect(st, redo_id_of(st, 2), RS_PENDING, 0, 0, NOW + 100000,
		    NULL);
	/* Released, but not due: it does not run a millisecond early, whoever
	 * asks (the table, not the caller's memory, decides). */
	a.calls = 0;
	assert_int_equal(store_redo_run(st, redo_id_of(st, 2), NOW + 99999,
					apply_cb, &a, &status),
			 SEMQ_DECLINED);
	assert_non_null(strstr(store_errmsg(st), "not due"));
	assert_int_equal(a.calls, 0);
	redo_expect(st, redo_id_of(st, 2), RS_PENDING, 0, 0, NOW + 100000,
		    NULL);
	assert_int_equal(store_redo_run(st, redo_id_of(st, 2), NOW + 100000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(a.calls, 1);
}

static void test_key_waiting_and_release_order(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "backend busy"};
	struct redo_seen c = {0};
	struct msg m;
	char buf[64];
	int64_t id1, id2, id4;
	int status;

	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 3, "L", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 4, "K", 2);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 5, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	/* Same key, other stream: not held up either. */
	mkmsg(&m, "R2", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
	assert_int_equal(a.calls, 4); /* 2 and 4 never reached the plugin */
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0030 WHERE"
				" origin = 'R1' AND result = 1"),
			 3);

	id1 = redo_id_of(st, 1);
	id2 = redo_id_of(st, 2);
	id4 = redo_id_of(st, 4);
	redo_expect(st, id1, RS_PENDING, 1, 1, NOW + 5000, "backend busy");
	redo_expect(st, id2, RS_WAITING, 0, 0, -1, NULL);
	redo_expect(st, id4, RS_WAITING, 0, 0, -1, NULL);
	/* A waiting entry is not run. */
	assert_int_equal(store_redo_run(st, id2, NOW, apply_cb, &a, &status),
			 SEMQ_DECLINED);
	assert_int_equal(store_redo_due(st, NOW + 5000, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.id[0], id1);

	assert_int_equal(
		store_redo_run(st, id1, NOW + 5000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	assert_int_equal(a.tries[4], 1);
	redo_expect(st, id1, RS_DONE, 2, 1, -1, NULL);
	redo_expect(st, id2, RS_PENDING, 0, 0, NOW + 5000, NULL);
	redo_expect(st, id4, RS_WAITING, 0, 0, -1, NULL);

	assert_int_equal(
		store_redo_run(st, id2, NOW + 6000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	redo_expect(st, id4, RS_PENDING, 0, 0, NOW + 6000, NULL);
	assert_int_equal(
		store_redo_run(st, id4, NOW + 6000, apply_cb, &a, &status),
		SEMQ_OK);
	/* K took effect in seq order. */
	assert_string_equal(q1s(st,
				SEQS("effect", "WHERE origin = 'R1' AND seq IN"
					       " (1, 2, 4)"),
				buf, sizeof buf),
			    "1,2,4");
	/* Nothing unfinished for K now: the next one runs at once. */
	mkmsg(&m, "R1", "S1", 6, "K", 4);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_PROCESSED);
}

static void test_redo_discard_releases(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "bad document"};
	struct msg m, got;
	struct redo_row row;
	int64_t id1, id2, id3;
	int status;

	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 2, "K", 1);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 3, "K", 2);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	id1 = redo_id_of(st, 1);
	id2 = redo_id_of(st, 2);
	id3 = redo_id_of(st, 3);
	redo_expect(st, id1, RS_DEAD, 1, 0, -1, "bad document");

	assert_int_equal(store_redo_discard(st, id1, "", NOW),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_redo_discard(st, id1, NULL, NOW),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_redo_discard(st, 4242, "x", NOW),
			 SEMQ_ERR_NOT_FOUND);

	/* Discarding a waiting entry behind the dead head releases nothing. */
	assert_int_equal(store_redo_discard(st, id2, "superseded", NOW + 1),
			 SEMQ_OK);
	assert_int_equal(store_redo_get(st, id2, &got, &row), SEMQ_OK);
	assert_int_equal(row.status, RS_DISCARDED);
	assert_string_equal(row.discard_reason, "superseded");
	assert_int_equal(row.updated_at, NOW + 1);
	msg_clear(&got);
	redo_expect(st, id3, RS_WAITING, 0, 0, -1, NULL);

	/* Discarding the head releases the next one. */
	assert_int_equal(store_redo_discard(st, id1, "operator", NOW + 2),
			 SEMQ_OK);
	redo_expect(st, id3, RS_PENDING, 0, 0, NOW + 2, NULL);
	assert_int_equal(store_redo_discard(st, id1, "again", NOW + 3),
			 SEMQ_DECLINED);
	assert_int_equal(
		store_redo_run(st, id3, NOW + 3, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	assert_int_equal(store_redo_discard(st, id3, "late", NOW + 4),
			 SEMQ_DECLINED);
	/* The operator's discard left no effect behind, and a second copy
	 * of each is answered with what became of it. */
	assert_int_equal(q1(st, SEQS("effect", "")), 3);
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	recv_expect(st, &m, &a, NOW + 5, SEMQ_DUPLICATE, RES_CANCELLED);
	mkmsg(&m, "R1", "S1", 3, "K", 2);
	recv_expect(st, &m, &a, NOW + 5, SEMQ_DUPLICATE, RES_PROCESSED);
}

/* The ids store_redo_select / store_redo_bulk hand over, in order. */
struct idseen {
	int64_t id[16];
	int n;
};

static int idseen_cb(void *ctx, const struct msg *m, const struct redo_row *row)
{
	struct idseen *c = ctx;

	(void)m;
	if (c->n < 16)
		c->id[c->n++] = row->id;
	return 0;
}

struct groups_seen {
	char text[512];
};

static int groups_cb(void *ctx, const struct redo_group *g)
{
	struct groups_seen *c = ctx;
	size_t n = strlen(c->text);

	snprintf(c->text + n, sizeof c->text - n, "%s%lld:%s:%s", n ? "|" : "",
		 (long long)g->count, g->error ? g->error : "-", g->dests);
	return 0;
}

static int recv_count_cb(void *ctx, const struct recv_row *r)
{
	(void)r;
	(*(int *)ctx)++;
	return 0;
}

/* The operator's filters (key, dest, since, last_error; order, paging),
 * groups by error and the bulk verbs, on both databases: a dry run lists
 * what the real run changes; a bulk retry of a dead head releases nothing,
 * a bulk discard of it releases the next entry of its key. */
static void test_redo_filters_and_bulk(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {0};
	struct store_filter f = {.status = -100};
	struct semq_where w;
	struct groups_seen g = {""};
	struct idseen c = {{0}, 0};
	struct msg m;
	int64_t id[7], n = 0;
	unsigned done = 0;
	int i, got = 0;

	verdicts(&a, 5, SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_PERMANENT,
		 SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_OK, SEMQ_PLUGIN_PERMANENT);
	a.why = "Timeout at db";
	mkmsg(&m, "R1", "S1", 1, "A", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 2, "A", 1); /* waits behind 1 */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	a.why = "bad document";
	mkmsg(&m, "R1", "S1", 3, "B", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	a.why = "timeout at DB";
	mkmsg(&m, "R1", "S1", 4, "C", 0);
	recv_expect(st, &m, &a, NOW + 10, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 5, "D", 0);
	recv_expect(st, &m, &a, NOW + 10, SEMQ_OK, RES_PROCESSED);
	a.why = "bad document";
	mkmsg(&m, "R1", "S1", 6, "E", 0);
	recv_expect(st, &m, &a, NOW + 10, SEMQ_OK, RES_DEAD);
	for (i = 1; i <= 6; i++)
		id[i] = i == 5 ? 0 : redo_id_of(st, (uint64_t)i);

	/* error~TIMEOUT: any case; dead only. */
	assert_int_equal(semq_where_parse("error~TIMEOUT", &w), 0);
	f.where = &w;
	f.status = RS_DEAD;
	assert_int_equal(store_redo_select(st, &f, idseen_cb, &c), SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.id[0], id[1]);
	assert_int_equal(c.id[1], id[4]);
	/* error=: exactly */
	assert_int_equal(semq_where_parse("error=timeout at DB", &w), 0);
	assert_int_equal(store_redo_count(st, &f, &n), SEMQ_OK);
	assert_int_equal(n, 1);
	/* key, dest, since */
	memset(&f, 0, sizeof f);
	f.status = -100;
	f.key = "A";
	assert_int_equal(store_redo_count(st, &f, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	f.key = NULL;
	f.dest = "S9";
	assert_int_equal(store_redo_count(st, &f, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	f.dest = "S1";
	f.since = NOW + 10;
	assert_int_equal(store_redo_count(st, &f, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	/* dead first, then waiting; paging counts in that order */
	memset(&f, 0, sizeof f);
	f.status = -100;
	f.dead_first = 1;
	c.n = 0;
	assert_int_equal(store_redo_select(st, &f, idseen_cb, &c), SEMQ_OK);
	assert_int_equal(c.n, 5);
	assert_int_equal(c.id[4], id[2]);
	f.limit = 2;
	f.offset = 3;
	c.n = 0;
	assert_int_equal(store_redo_select(st, &f, idseen_cb, &c), SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.id[0], id[6]);
	assert_int_equal(c.id[1], id[2]);
	/* groups: the largest first; the waiting entry has no error */
	f.limit = f.offset = 0;
	f.status = RS_DEAD;
	assert_int_equal(store_redo_groups(st, &f, groups_cb, &g), SEMQ_OK);
	assert_string_equal(g.text, "2:bad document:S1|1:Timeout at db:S1|"
				    "1:timeout at DB:S1");
	/* received rows by key */
	memset(&f, 0, sizeof f);
	f.key = "C";
	assert_int_equal(
		store_received_select(st, NULL, &f, recv_count_cb, &got),
		SEMQ_OK);
	assert_int_equal(got, 1);

	/* Bulk retry: dead only; the dry run changes nothing. */
	memset(&f, 0, sizeof f);
	f.status = RS_PENDING;
	assert_int_equal(semq_where_parse("error~timeout", &w), 0);
	f.where = &w;
	assert_int_equal(store_redo_bulk(st, STORE_REDO_RETRY, &f, NULL, NOW, 0,
					 0, NULL, NULL, NULL, &done),
			 SEMQ_ERR_INVALID);
	f.status = -100;
	c.n = 0;
	assert_int_equal(store_redo_bulk(st, STORE_REDO_RETRY, &f, NULL,
					 NOW + 20, 1, 1, idseen_cb, NULL, &c,
					 &done),
			 SEMQ_OK);
	assert_int_equal(done, 2);
	assert_int_equal(c.n, 2);
	redo_expect(st, id[1], RS_DEAD, 1, 0, -1, "Timeout at db");
	c.n = 0;
	assert_int_equal(store_redo_bulk(st, STORE_REDO_RETRY, &f, NULL,
					 NOW + 20, 0, 1, idseen_cb, NULL, &c,
					 &done),
			 SEMQ_OK);
	assert_int_equal(done, 2);
	assert_int_equal(c.id[0], id[1]);
	assert_int_equal(c.id[1], id[4]);
	redo_expect(st, id[1], RS_PENDING, 1, 0, NOW + 20, "Timeout at db");
	redo_expect(st, id[4], RS_PENDING, 1, 0, NOW + 20, "timeout at DB");
	/* a retried head releases nothing until it succeeds */
	redo_expect(st, id[2], RS_WAITING, 0, 0, -1, NULL);

	/* Bulk discard: a reason; dead by default; the head of A (pending
	 * now) by --status pending, which releases 2. */
	assert_int_equal(semq_where_parse("error=bad document", &w), 0);
	assert_int_equal(store_redo_bulk(st, STORE_REDO_DISCARD, &f, NULL,
					 NOW + 30, 0, 0, NULL, NULL, NULL,
					 &done),
			 SEMQ_ERR_INVALID);
	assert_int_equal(store_redo_bulk(st, STORE_REDO_DISCARD, &f, "bad",
					 NOW + 30, 0, 0, NULL, NULL, NULL,
					 &done),
			 SEMQ_OK);
	assert_int_equal(done, 2);
	redo_expect(st, id[3], RS_DISCARDED, 1, 0, -1, "bad document");
	redo_expect(st, id[6], RS_DISCARDED, 1, 0, -1, "bad document");
	assert_int_equal(semq_where_parse("error~TIMEOUT", &w), 0);
	f.status = RS_PENDING;
	f.key = "A";
	assert_int_equal(store_redo_bulk(st, STORE_REDO_DISCARD, &f, "old",
					 NOW + 40, 0, 0, NULL, NULL, NULL,
					 &done),
			 SEMQ_OK);
	assert_int_equal(done, 1);
	redo_expect(st, id[1], RS_DISCARDED, 1, 0, -1, "Timeout at db");
	redo_expect(st, id[2], RS_PENDING, 0, 0, NOW + 40, NULL);
	redo_expect(st, id[4], RS_PENDING, 1, 0, NOW + 20, "timeout at DB");
}

/* Done and discarded entries go after the retention, counted from when
 * they finished; dead, pending and waiting ones stay; a copy of a purged
 * message is still a duplicate (tb_0030 decides that, not tb_0033). */
static void test_redo_purge_by_retention(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct msg m;
	char buf[64];
	int64_t id2, id3;
	unsigned n = 99;
	int status = -9;

	verdicts(&a, 3, SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_RETRY,
		 SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, NULL, 0); /* dead at once */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m, "R1", "S1", 2, NULL, 0); /* done at NOW + 5000 */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m, "R1", "S1", 3, NULL, 0); /* discarded at NOW + 10 */
	m.deliver_at = NOW + 999999;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	mkmsg(&m, "R1", "S1", 4, NULL, 0); /* stays pending */
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	id2 = redo_id_of(st, 2);
	id3 = redo_id_of(st, 3);
	assert_int_equal(store_redo_discard(st, id3, "not wanted", NOW + 10),
			 SEMQ_OK);
	verdicts(&a, 1, SEMQ_PLUGIN_OK);
	assert_int_equal(
		store_redo_run(st, id2, NOW + 5000, apply_cb, &a, &status),
		SEMQ_OK);
	assert_int_equal(status, RS_DONE);

	/* The discard finished long before the cutoff, the run after it. */
	assert_int_equal(store_redo_purge(st, NOW + 5500, 1000, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(q1(st, "SELECT count(*) FROM tb_0033 WHERE seq = 3"),
			 0);
	assert_int_equal(store_redo_purge(st, NOW + 99999, 1000, 0, &n),
			 SEMQ_OK);
	assert_int_equal(n, 0);
	assert_int_equal(store_redo_purge(st, NOW + 7000, 1000, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 1);
	/* Dead and pending stay, however old. */
	assert_int_equal(store_redo_purge(st, NOW + 9999999, 1000, 100, &n),
			 SEMQ_OK);
	assert_int_equal(n, 0);
	assert_string_equal(q1s(st, SEQS("tb_0033", ""), buf, sizeof buf),
			    "1,4");
	/* A copy of the purged, done message is a duplicate: processed (its
	 * record says so), and of the dead one: dead. */
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, NOW + 8000, SEMQ_DUPLICATE, RES_PROCESSED);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW + 8000, SEMQ_DUPLICATE, RES_DEAD);
	assert_int_equal(store_redo_purge(st, NOW, -1, 100, &n),
			 SEMQ_ERR_INVALID);
}

static void test_redo_levels_and_dead(void **state)
{
	struct fx *fx = *state;
	const int64_t levels[] = {100, 200, 300};
	struct store_opts o = {.synchronous = -1,
			       .redo_levels_ms = levels,
			       .n_redo_levels = 3,
			       .max_tries = 5};
	struct store *st = open_ok(fx, "S1", &o);
	struct applier a = {.why = "still down"};
	struct redo_seen c = {0};
	struct msg m;
	int64_t id, t = NOW;
	unsigned n = 0;
	int status = -9;

	verdicts(&a, 5, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY,
		 SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, t, SEMQ_OK, RES_REDO);
	id = redo_id_of(st, 1);
	redo_expect(st, id, RS_PENDING, 1, 1, t + 100, "still down");

	t += 100;
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_PENDING);
	redo_expect(st, id, RS_PENDING, 2, 2, t + 200, "still down");
	t += 200;
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_OK);
	redo_expect(st, id, RS_PENDING, 3, 3, t + 300, "still down");
	t += 300;
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_OK);
	/* Past the last level: the last one repeats. */
	redo_expect(st, id, RS_PENDING, 4, 4, t + 300, "still down");
	t += 300;
	a.why = "gave up";
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DEAD);
	redo_expect(st, id, RS_DEAD, 5, 4, -1, "gave up");
	assert_int_equal(a.calls, 5);
	assert_int_equal(a.tries[1], 1);
	assert_int_equal(a.tries[4], 4);
	assert_int_equal(q1(st, "SELECT count(*) FROM effect"), 0);
	assert_int_equal(store_redo_run(st, id, t, apply_cb, &a, &status),
			 SEMQ_DECLINED);

	/* Operator retry: pending now, tries kept, level reset. */
	assert_int_equal(store_redo_retry(st, id, t + 1), SEMQ_OK);
	redo_expect(st, id, RS_PENDING, 5, 0, t + 1, "gave up");
	assert_int_equal(store_redo_retry(st, id, t + 1), SEMQ_DECLINED);
	assert_int_equal(store_redo_retry(st, 4242, t + 1), SEMQ_ERR_NOT_FOUND);
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	assert_int_equal(store_redo_run(st, id, t + 1, apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DEAD);

	/* Retry every dead entry. */
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 2, NULL, 0);
	recv_expect(st, &m, &a, t, SEMQ_OK, RES_DEAD);
	assert_int_equal(store_redo_list(st, RS_DEAD, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(store_redo_retry_all_dead(st, t + 5, &n), SEMQ_OK);
	assert_int_equal(n, 2);
	c.n = 0;
	assert_int_equal(store_redo_due(st, t + 5, 10, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(store_redo_retry_all_dead(st, t + 5, &n), SEMQ_OK);
	assert_int_equal(n, 0);
	/* Listings are by id and respect limit; a bad status is refused. */
	c.n = 0;
	assert_int_equal(store_redo_list(st, -100, 1, redo_collect, &c),
			 SEMQ_OK);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.id[0], id);
	assert_int_equal(store_redo_list(st, 7, 10, redo_collect, &c),
			 SEMQ_ERR_INVALID);
}

static void test_max_tries_one_is_dead_at_once(void **state)
{
	struct fx *fx = *state;
	struct store_opts o = {.synchronous = -1, .max_tries = 1};
	struct store *st = open_ok(fx, "S1", &o);
	struct applier a = {.why = "nope"};
	struct msg m;

	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 1, NULL, 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	redo_expect(st, redo_id_of(st, 1), RS_DEAD, 1, 0, -1, "nope");
}

/*
 * What became of a message in the redo queue is what a second copy of it
 * is answered: done -> processed, discarded -> cancelled, dead -> dead (a
 * receipt that died at once, or a redo entry that died later); a
 * scheduled message that ran -> processed.
 */
static void test_redo_write_back(void **state)
{
	struct fx *fx = *state;
	struct store *st = open_ok(fx, "S1", NULL);
	struct applier a = {.why = "down"};
	struct msg m1, m2, m3, m4, m5;
	int status = -9;

	verdicts(&a, 4, SEMQ_PLUGIN_RETRY, SEMQ_PLUGIN_RETRY,
		 SEMQ_PLUGIN_PERMANENT, SEMQ_PLUGIN_RETRY);
	mkmsg(&m1, "R1", "S1", 1, "K1", 0);
	m1.id.digest = semq_msg_digest(&m1);
	recv_expect(st, &m1, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m2, "R1", "S1", 2, "K2", 0);
	m2.id.digest = semq_msg_digest(&m2);
	recv_expect(st, &m2, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m3, "R1", "S1", 3, "K3", 0);
	m3.id.digest = semq_msg_digest(&m3);
	recv_expect(st, &m3, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&m4, "R1", "S1", 4, "K4", 0);
	recv_expect(st, &m4, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&m5, "R1", "S1", 5, "K5", 0);
	m5.deliver_at = NOW + 60000;
	recv_expect(st, &m5, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	recv_expect(st, &m5, &a, NOW, SEMQ_DUPLICATE, RES_SCHEDULED);

	/* done */
	assert_int_equal(store_redo_run(st, redo_id_of(st, 1), NOW + 5000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	recv_expect(st, &m1, &a, NOW + 6000, SEMQ_DUPLICATE, RES_PROCESSED);
	lookup_expect(st, &m1.id, 1, RES_PROCESSED);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030 WHERE seq = 1"),
			 RES_PROCESSED);
	/* discarded */
	assert_int_equal(
		store_redo_discard(st, redo_id_of(st, 2), "operator", NOW + 1),
		SEMQ_OK);
	recv_expect(st, &m2, &a, NOW + 6000, SEMQ_DUPLICATE, RES_CANCELLED);
	lookup_expect(st, &m2.id, 1, RES_CANCELLED);
	/* dead at once: recorded as redo, answered dead */
	recv_expect(st, &m3, &a, NOW + 6000, SEMQ_DUPLICATE, RES_DEAD);
	lookup_expect(st, &m3.id, 1, RES_DEAD);
	assert_int_equal(q1(st, "SELECT result FROM tb_0030 WHERE seq = 3"),
			 RES_REDO);
	/* dead later (PERMANENT on its run) */
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	assert_int_equal(store_redo_run(st, redo_id_of(st, 4), NOW + 5000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DEAD);
	recv_expect(st, &m4, &a, NOW + 6000, SEMQ_DUPLICATE, RES_DEAD);
	lookup_expect(st, &m4.id, 1, RES_DEAD);
	/* ... and retried by the operator: redo again until it runs */
	assert_int_equal(store_redo_retry(st, redo_id_of(st, 4), NOW + 7000),
			 SEMQ_OK);
	lookup_expect(st, &m4.id, 1, RES_REDO);
	assert_int_equal(store_redo_run(st, redo_id_of(st, 4), NOW + 7000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	lookup_expect(st, &m4.id, 1, RES_PROCESSED);
	/* scheduled, then run at its time */
	assert_int_equal(store_redo_run(st, redo_id_of(st, 5), NOW + 60000,
					apply_cb, &a, &status),
			 SEMQ_OK);
	assert_int_equal(status, RS_DONE);
	recv_expect(st, &m5, &a, NOW + 60001, SEMQ_DUPLICATE, RES_PROCESSED);
	{
		char buf[32];

		assert_string_equal(
			q1s(st, SEQS("effect", ""), buf, sizeof buf), "1,4,5");
	}
}

/*
 * store_redo_head: what a waiting entry waits for — the head of its key:
 * a dead entry, a pending one retrying, or a delayed message (pending
 * until its deliver_at, delayed = 1 while that is still to come).
 */
static void test_redo_head(void **state)
{
	struct fx *fx = *state;
	const int64_t levels[] = {5000, 30000};
	struct store_opts o = {.synchronous = -1,
			       .redo_levels_ms = levels,
			       .n_redo_levels = 2};
	struct store *st = open_ok(fx, "S1", &o);
	struct applier a = {.why = "down"};
	struct redo_head h;
	struct msg m, w;

	/* K: delayed head */
	mkmsg(&m, "R1", "S1", 1, "K", 0);
	m.deliver_at = NOW + 60000;
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_SCHEDULED);
	mkmsg(&w, "R1", "S1", 2, "K", 1);
	recv_expect(st, &w, &a, NOW + 1, SEMQ_OK, RES_REDO);
	redo_expect(st, redo_id_of(st, 2), RS_WAITING, 0, 0, -1, NULL);
	assert_int_equal(store_redo_head(st, &w, NOW + 2, &h), SEMQ_OK);
	assert_int_equal(h.id, redo_id_of(st, 1));
	assert_int_equal(h.seq, 1);
	assert_int_equal(h.status, RS_PENDING);
	assert_int_equal(h.delayed, 1);
	assert_int_equal(h.next_attempt_at, NOW + 60000);
	/* its time has come: no longer "delayed" */
	assert_int_equal(store_redo_head(st, &w, NOW + 60000, &h), SEMQ_OK);
	assert_int_equal(h.delayed, 0);

	/* L: dead head */
	verdicts(&a, 1, SEMQ_PLUGIN_PERMANENT);
	mkmsg(&m, "R1", "S1", 3, "L", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_DEAD);
	mkmsg(&w, "R1", "S1", 4, "L", 3);
	recv_expect(st, &w, &a, NOW + 1, SEMQ_OK, RES_REDO);
	assert_int_equal(store_redo_head(st, &w, NOW + 2, &h), SEMQ_OK);
	assert_int_equal(h.id, redo_id_of(st, 3));
	assert_int_equal(h.seq, 3);
	assert_int_equal(h.status, RS_DEAD);
	assert_int_equal(h.delayed, 0);

	/* M: a head retrying, pending at its next level */
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	mkmsg(&m, "R1", "S1", 5, "M", 0);
	recv_expect(st, &m, &a, NOW, SEMQ_OK, RES_REDO);
	mkmsg(&w, "R1", "S1", 6, "M", 5);
	recv_expect(st, &w, &a, NOW + 1, SEMQ_OK, RES_REDO);
	assert_int_equal(store_redo_head(st, &w, NOW + 2, &h), SEMQ_OK);
	assert_int_equal(h.id, redo_id_of(st, 5));
	assert_int_equal(h.status, RS_PENDING);
	assert_int_equal(h.delayed, 0);
	assert_int_equal(h.next_attempt_at, NOW + 5000);

	/* a delayed message retried after its time: not delayed */
	verdicts(&a, 1, SEMQ_PLUGIN_RETRY);
	{
		int status = -9;

		assert_int_equal(store_redo_run(st, redo_id_of(st, 1),
						NOW + 60000, apply_cb, &a,
						&status),
				 SEMQ_OK);
		assert_int_equal(status, RS_PENDING);
	}
	mkmsg(&w, "R1", "S1", 2, "K", 1);
	assert_int_equal(store_redo_head(st, &w, NOW + 60001, &h), SEMQ_OK);
	assert_int_equal(h.seq, 1);
	assert_int_equal(h.delayed, 0);
	assert_true(h.next_attempt_at > NOW + 60000);

	/* no key, or a key with nothing unfinished: none */
	mkmsg(&w, "R1", "S1", 7, NULL, 0);
	assert_int_equal(store_redo_head(st, &w, NOW, &h), SEMQ_ERR_NOT_FOUND);
	mkmsg(&w, "R1", "S1", 7, "N", 0);
	assert_int_equal(store_redo_head(st, &w, NOW, &h), SEMQ_ERR_NOT_FOUND);
	/* another stream's key of the same name is not its head */
	mkmsg(&w, "R2", "S1", 1, "L", 0);
	assert_int_equal(store_redo_head(st, &w, NOW, &h), SEMQ_ERR_NOT_FOUND);
}

const struct CMUnitTest store_redo_tests[] = {
	STORE_TEST(test_deliver_at_scheduled),
	STORE_TEST(test_scheduled_behind_failed_head),
	STORE_TEST(test_key_waiting_and_release_order),
	STORE_TEST(test_redo_discard_releases),
	STORE_TEST(test_redo_filters_and_bulk),
	STORE_TEST(test_redo_purge_by_retention),
	STORE_TEST(test_redo_levels_and_dead),
	STORE_TEST(test_max_tries_one_is_dead_at_once),
	STORE_TEST(test_redo_write_back),
	STORE_TEST(test_redo_head),
};
const size_t store_redo_ntests = BE_N(store_redo_tests);
