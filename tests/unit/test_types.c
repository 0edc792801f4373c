/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for types.c's parsers of the listings' filters: WHEN (--since,
 * since=) and the bulk redo verbs' --where expression.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_when_durations),
		cmocka_unit_test(test_when_times),
		cmocka_unit_test(test_when_bad),
		cmocka_unit_test(test_where),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
