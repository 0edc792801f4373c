/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for types.c's parsers of the listings' filters: WHEN (--since,
 * since=) and the bulk redo verbs' --where expression; msgid_str; the redo
 * policy (semq_redo_delay, semq_redo_gives_up); the tables' statuses and
 * their names (semq_statuses, semq_status_list).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "types.h"

#define NOW INT64_C(1795662000000) /* 2026-11-26T03:00:00Z */

static void test_when_durations(void **state)
{
	int64_t t = 0;

	(void)state;
	assert_int_equal(semq_when_parse("90s", NOW, 0, &t), 0);
	assert_int_equal(t, NOW - 90000);
	assert_int_equal(semq_when_parse("15m", NOW, 0, &t), 0);
	assert_int_equal(t, NOW - 15 * 60000);
	assert_int_equal(semq_when_parse("2h", NOW, 0, &t), 0);
	assert_int_equal(t, NOW - 2 * 3600000);
	assert_int_equal(semq_when_parse("3d", NOW, 0, &t), 0);
	assert_int_equal(t, NOW - 3 * 86400000);
	assert_int_equal(semq_when_parse("0s", NOW, 0, &t), 0);
	assert_int_equal(t, NOW);
}

static void test_when_times(void **state)
{
	int64_t t = 0;

	(void)state;
	assert_int_equal(semq_when_parse("2026-11-26T03:00:00Z", NOW, 0, &t),
			 0);
	assert_int_equal(t, NOW);
	assert_int_equal(semq_when_parse("2026-11-26T03:00:00.25Z", NOW, 0, &t),
			 0);
	assert_int_equal(t, NOW + 250);
	assert_int_equal(semq_when_parse("1970-01-01T00:00:01z", NOW, 0, &t),
			 0);
	assert_int_equal(t, 1000);
	/* unix ms only where asked for (HTTP) */
	assert_int_equal(semq_when_parse("1795662000000", NOW, 0, &t), -1);
	assert_int_equal(semq_when_parse("1795662000000", NOW, 1, &t), 0);
	assert_int_equal(t, NOW);
}

static void test_when_bad(void **state)
{
	static const char *const bad[] = {"",
					  "s",
					  "90",
					  "90x",
					  "-5m",
					  "1.5h",
					  "5 m",
					  "m5",
					  "2h ",
					  "99999999999999d",
					  "2026-11-26T03:00:00",
					  "2026-11-26T03:00Z",
					  "2026-11-26T03:00:00+01:00",
					  "2026-02-30T00:00:00Z",
					  "2026-13-01T00:00:00Z",
					  "2026-11-26T24:00:00Z",
					  "2026-11-26T03:00:00.Z",
					  "1969-12-31T23:59:59Z",
					  "yesterday"};
	int64_t t;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (semq_when_parse(bad[i], NOW, 0, &t) != -1)
			fail_msg("'%s' was taken as a time", bad[i]);
	assert_int_equal(semq_when_parse(NULL, NOW, 1, &t), -1);
}

static void test_where(void **state)
{
	struct semq_where w;
	char long_text[SEMQ_WHERE_MAX + 8];

	(void)state;
	assert_int_equal(semq_where_parse("error~Timeout", &w), 0);
	assert_int_equal(w.exact, 0);
	assert_string_equal(w.text, "Timeout");
	assert_int_equal(semq_where_parse("error=bad bill: no lines", &w), 0);
	assert_int_equal(w.exact, 1);
	assert_string_equal(w.text, "bad bill: no lines");
	/* the text may hold the operators itself */
	assert_int_equal(semq_where_parse("error~a=b~c", &w), 0);
	assert_string_equal(w.text, "a=b~c");
	assert_int_equal(semq_where_parse("error~", &w), -1);
	assert_int_equal(semq_where_parse("error", &w), -1);
	assert_int_equal(semq_where_parse("key~x", &w), -1);
	assert_int_equal(semq_where_parse("errors~x", &w), -1);
	assert_int_equal(semq_where_parse("Error~x", &w), -1);
	assert_int_equal(semq_where_parse(" error~x", &w), -1);
	memset(long_text, 0, sizeof long_text);
	memcpy(long_text, "error~", 6);
	memset(long_text + 6, 'x', SEMQ_WHERE_MAX);
	assert_int_equal(semq_where_parse(long_text, &w), 0);
	long_text[6 + SEMQ_WHERE_MAX] = 'x';
	assert_int_equal(semq_where_parse(long_text, &w), -1);
}

/* msgid_str writes what snprintf "%s/%s/%llu" writes, in every buffer size
 * down to 0 (cut short and terminated like it). */
static void test_msgid_str(void **state)
{
	static const uint64_t seqs[] = {0, 1, 9, 10, 4711, UINT64_MAX};
	char want[MSGID_STRLEN], got[MSGID_STRLEN + 1];
	struct msgid id;
	size_t i, sz, full, runs = 0;

	(void)state;
	memset(&id, 0, sizeof id);
	memset(id.origin, 'o', SEMQ_ID_MAX);
	strcpy(id.dest, "S1");
	for (i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
		id.seq = seqs[i];
		snprintf(want, sizeof want, "%s/%s/%llu", id.origin, id.dest,
			 (unsigned long long)id.seq);
		assert_ptr_equal(msgid_str(&id, got, sizeof got), got);
		assert_string_equal(got, want);
		for (sz = 0, full = strlen(want); sz <= full + 1; sz++) {
			memset(got, '#', sizeof got);
			snprintf(want, sz ? sz : 1, "%s/%s/%llu", id.origin,
				 id.dest, (unsigned long long)id.seq);
			msgid_str(&id, got, sz);
			if (sz)
				assert_string_equal(got, want);
			else
				assert_int_equal(got[0], '#');
			assert_int_equal(got[sz], '#'); /* nothing beyond */
			runs++;
		}
	}
	assert_true(runs > 6 * (SEMQ_ID_MAX + 5));
	strcpy(id.origin, "R1");
	id.seq = 42;
	assert_string_equal(msgid_str(&id, got, sizeof got), "R1/S1/42");
}

/* The delay of each level, the last one beyond them, a negative level as
 * 0; dead when the attempts reach max_tries. */
static void test_redo_policy(void **state)
{
	static const int64_t three[] = {1000, 20000, 300000};

	(void)state;
	assert_int_equal(semq_redo_delay(three, 3, 0), 1000);
	assert_int_equal(semq_redo_delay(three, 3, 1), 20000);
	assert_int_equal(semq_redo_delay(three, 3, 2), 300000);
	assert_int_equal(semq_redo_delay(three, 3, 3), 300000);
	assert_int_equal(semq_redo_delay(three, 3, 1000), 300000);
	assert_int_equal(semq_redo_delay(three, 3, -1), 1000);
	assert_int_equal(semq_redo_delay(three, 1, 5), 1000);
	/* SPEC §7's defaults: 5s first, 2d from the 9th failure on. */
	assert_int_equal(
		semq_redo_delay(semq_redo_levels, SEMQ_REDO_N_LEVELS, 0), 5000);
	assert_int_equal(
		semq_redo_delay(semq_redo_levels, SEMQ_REDO_N_LEVELS, 8),
		2LL * 86400 * 1000);
	assert_int_equal(
		semq_redo_delay(semq_redo_levels, SEMQ_REDO_N_LEVELS, 40),
		2LL * 86400 * 1000);
	assert_int_equal(SEMQ_REDO_MAX_TRIES, 9);
	assert_false(semq_redo_gives_up(1, 9));
	assert_false(semq_redo_gives_up(8, 9));
	assert_true(semq_redo_gives_up(9, 9));
	assert_true(semq_redo_gives_up(10, 9));
	assert_true(semq_redo_gives_up(1, 1));
}

/* Every status of each table has a name of its own; the lists that messages
 * show follow the table. */
static void test_status_lists(void **state)
{
	static const char *const tables[] = {"tb_0031", "tb_0030", "tb_0033"};
	char buf[128];
	const int *v;
	size_t t, i, j, n;

	(void)state;
	for (t = 0; t < 3; t++) {
		n = semq_statuses(tables[t], &v);
		assert_true(n > 0);
		for (i = 0; i < n; i++) {
			assert_string_not_equal(
				semq_status_name(tables[t], v[i]), "unknown");
			for (j = 0; j < i; j++)
				assert_string_not_equal(
					semq_status_name(tables[t], v[i]),
					semq_status_name(tables[t], v[j]));
		}
	}
	assert_int_equal(semq_statuses("tb_0031", &v), SEMQ_N_OUT_STATUS);
	assert_ptr_equal(v, semq_out_statuses);
	assert_int_equal(semq_statuses("tb_0030", &v), SEMQ_N_IN_STATUS);
	assert_ptr_equal(v, semq_in_statuses);
	assert_int_equal(semq_statuses("tb_0033", &v), SEMQ_N_REDO_STATUS);
	assert_ptr_equal(v, semq_redo_statuses);
	assert_int_equal(semq_statuses("tb_0032", &v), 0);
	assert_null(v);

	assert_string_equal(semq_status_list("tb_0031", 0, buf, sizeof buf),
			    "unsent, sent, relay-acked, held, confirmed, "
			    "cancelled");
	assert_string_equal(semq_status_list("tb_0031", 1, buf, sizeof buf),
			    "0, 4, 6, 8, 100, -2");
	assert_string_equal(semq_status_list("tb_0030", 0, buf, sizeof buf),
			    "unacked, acked");
	assert_string_equal(semq_status_list("tb_0033", 0, buf, sizeof buf),
			    "pending, waiting, done, dead, discarded");
	assert_string_equal(semq_status_list("tb_0033", 1, buf, sizeof buf),
			    "0, 1, 2, -1, -2");
	assert_string_equal(semq_status_list("nope", 0, buf, sizeof buf), "");
	/* Cut short like snprintf, always terminated. */
	assert_string_equal(semq_status_list("tb_0033", 0, buf, 12),
			    "pending, wa");
	assert_string_equal(semq_status_list("tb_0033", 0, buf, 8), "pending");
	assert_string_equal(semq_status_list("tb_0033", 0, buf, 9), "pending,");
	buf[0] = '#';
	semq_status_list("tb_0033", 0, buf, 0);
	assert_int_equal(buf[0], '#');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_when_durations),
		cmocka_unit_test(test_when_times),
		cmocka_unit_test(test_when_bad),
		cmocka_unit_test(test_where),
		cmocka_unit_test(test_msgid_str),
		cmocka_unit_test(test_redo_policy),
		cmocka_unit_test(test_status_lists),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
