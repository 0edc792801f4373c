/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the node.ini value parsers (node/config_value.c), without a
 * file: for each type the values it takes, every refusal with its exact
 * message, the edges of the bounds and of the integer types (overflow), and
 * that nothing is written on a refusal (but an address, which is cleared).
 * Paths are checked against a fresh mkdtemp directory under $TMPDIR.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <semq/error.h>

#include "config_value.h"

static char why[2048];

/* The call refuses its value with exactly `msg`. */
#define REFUSED(call, msg)                                                     \
	do {                                                                   \
		why[0] = '\0';                                                 \
		assert_int_equal((call), SEMQ_ERR_INVALID);                    \
		assert_string_equal(why, (msg));                               \
	} while (0)

#define W why, sizeof(why)

/* ---- durations ------------------------------------------------------------ */

static void test_duration(void **state)
{
	static const char *const bad[] = {
		"",    "s",     "ms",   "-5s",  "+5s", "5 s",
		" 5s", "5s ",   "1.5s", "5S",   "5M",  "5sec",
		"5w",  "1h30m", "5ss",  "0x10", "1e3", "5,000",
	};
	int64_t ms = -1;

	(void)state;
	assert_int_equal(cv_duration("250ms", &ms), SEMQ_OK);
	assert_int_equal(ms, 250);
	assert_int_equal(cv_duration("5s", &ms), SEMQ_OK);
	assert_int_equal(ms, 5000);
	assert_int_equal(cv_duration("30", &ms), SEMQ_OK); /* seconds */
	assert_int_equal(ms, 30000);
	assert_int_equal(cv_duration("1m", &ms), SEMQ_OK);
	assert_int_equal(ms, 60000);
	assert_int_equal(cv_duration("6h", &ms), SEMQ_OK);
	assert_int_equal(ms, 6LL * 3600000);
	assert_int_equal(cv_duration("2d", &ms), SEMQ_OK);
	assert_int_equal(ms, 2LL * 86400000);
	assert_int_equal(cv_duration("0ms", &ms), SEMQ_OK);
	assert_int_equal(ms, 0);
	assert_int_equal(cv_duration("007s", &ms), SEMQ_OK);
	assert_int_equal(ms, 7000);

	/* The edges of int64_t milliseconds, per unit. */
	assert_int_equal(cv_duration("9223372036854775807ms", &ms), SEMQ_OK);
	assert_int_equal(ms, INT64_MAX);
	assert_int_equal(cv_duration("9223372036854775s", &ms), SEMQ_OK);
	assert_int_equal(ms, 9223372036854775LL * 1000);
	assert_int_equal(cv_duration("153722867280912m", &ms), SEMQ_OK);
	assert_int_equal(cv_duration("2562047788015h", &ms), SEMQ_OK);
	assert_int_equal(cv_duration("106751991167d", &ms), SEMQ_OK);
	assert_int_equal(ms, 106751991167LL * 86400000);

	ms = 42;
	assert_int_equal(cv_duration("9223372036854775808ms", &ms),
			 SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_duration("9223372036854776s", &ms),
			 SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_duration("153722867280913m", &ms),
			 SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_duration("2562047788016h", &ms), SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_duration("106751991168d", &ms), SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_duration("18446744073709551616", &ms),
			 SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_duration("99999999999999999999999ms", &ms),
			 SEMQ_ERR_TOO_BIG);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(cv_duration(bad[i], &ms), SEMQ_ERR_INVALID);
	assert_int_equal(cv_duration(NULL, &ms), SEMQ_ERR_INVALID);
	assert_int_equal(ms, 42); /* untouched on error */
}

static void test_duration_in(void **state)
{
	int64_t ms = 42;

	(void)state;
	assert_int_equal(cv_duration_in("1ms", 1, 3600000, &ms, W), SEMQ_OK);
	assert_int_equal(ms, 1);
	assert_int_equal(cv_duration_in("1h", 1, 3600000, &ms, W), SEMQ_OK);
	assert_int_equal(ms, 3600000);
	assert_int_equal(cv_duration_in("3600s", 1, 3600000, &ms, W), SEMQ_OK);
	assert_int_equal(cv_duration_in("0", 0, 0, &ms, W), SEMQ_OK);
	assert_int_equal(ms, 0);

	ms = 42;
	REFUSED(cv_duration_in("0ms", 1, 3600000, &ms, W),
		"'0ms' is not between 1ms and 1h");
	REFUSED(cv_duration_in("3600001ms", 1, 3600000, &ms, W),
		"'3600001ms' is not between 1ms and 1h");
	REFUSED(cv_duration_in("31d", 1, 30 * CV_DAY, &ms, W),
		"'31d' is not between 1ms and 30d");
	REFUSED(cv_duration_in("1s", 0, 500, &ms, W),
		"'1s' is not between 0s and 500ms");
	/* Beyond int64_t: out of bounds, not malformed. */
	REFUSED(cv_duration_in("99999999999999999999d", 1, 30 * CV_DAY, &ms, W),
		"'99999999999999999999d' is not between 1ms and 30d");
	REFUSED(cv_duration_in("9223372036854775808ms", 0, INT64_MAX, &ms, W),
		"'9223372036854775808ms' is not between 0s and "
		"9223372036854775807ms");
	REFUSED(cv_duration_in("5x", 1, 10, &ms, W),
		"'5x' is not a duration (250ms, 5s, 1m, 6h, 2d, or seconds)");
	REFUSED(cv_duration_in("-5s", 1, 10, &ms, W),
		"'-5s' is not a duration (250ms, 5s, 1m, 6h, 2d, or seconds)");
	REFUSED(cv_duration_in("", 1, 10, &ms, W),
		"'' is not a duration (250ms, 5s, 1m, 6h, 2d, or seconds)");
	REFUSED(cv_duration_in(NULL, 1, 10, &ms, W),
		"'' is not a duration (250ms, 5s, 1m, 6h, 2d, or seconds)");
	assert_int_equal(ms, 42);
}

static void test_fmt(void **state)
{
	char b[32];

	(void)state;
	assert_string_equal(cv_fmt_duration(0, b, sizeof(b)), "0s");
	assert_string_equal(cv_fmt_duration(1, b, sizeof(b)), "1ms");
	assert_string_equal(cv_fmt_duration(1500, b, sizeof(b)), "1500ms");
	assert_string_equal(cv_fmt_duration(90000, b, sizeof(b)), "90s");
	assert_string_equal(cv_fmt_duration(CV_MIN, b, sizeof(b)), "1m");
	assert_string_equal(cv_fmt_duration(CV_HOUR, b, sizeof(b)), "1h");
	assert_string_equal(cv_fmt_duration(36 * CV_HOUR, b, sizeof(b)), "36h");
	assert_string_equal(cv_fmt_duration(3650 * CV_DAY, b, sizeof(b)),
			    "3650d");
	assert_string_equal(cv_fmt_size(0, b, sizeof(b)), "0");
	assert_string_equal(cv_fmt_size(1, b, sizeof(b)), "1");
	assert_string_equal(cv_fmt_size(1000, b, sizeof(b)), "1000");
	assert_string_equal(cv_fmt_size(CV_KIB, b, sizeof(b)), "1KiB");
	assert_string_equal(cv_fmt_size(CV_MIB + CV_KIB, b, sizeof(b)),
			    "1025KiB");
	assert_string_equal(cv_fmt_size(256 * CV_MIB, b, sizeof(b)), "256MiB");
	assert_string_equal(cv_fmt_size(1024 * CV_TIB, b, sizeof(b)),
			    "1048576GiB");
	assert_string_equal(cv_fmt_size(UINT32_MAX, b, sizeof(b)),
			    "4294967295");
}

/* ---- sizes ---------------------------------------------------------------- */

static void test_size(void **state)
{
	static const struct {
		const char *s;
		size_t v;
	} ok[] = {
		{"0", 0},
		{"1000", 1000},
		{"512B", 512},
		{"64K", 65536},
		{"64k", 65536},
		{"64KiB", 65536},
		{"16M", 16 << 20},
		{"16m", 16 << 20},
		{"16MiB", 16 << 20},
		{"2G", (size_t)2 << 30},
		{"2g", (size_t)2 << 30},
		{"1GiB", (size_t)1 << 30},
		{"007K", 7 * 1024},
		{"18446744073709551615", SIZE_MAX},
		{"17179869183G", (size_t)17179869183 << 30},
	};
	static const char *const bad[] = {
		"",     "B",  "KiB",  "-1",    "+1",    "16MB", "16 MiB",
		"1.5M", "1T", "1TiB", "16Kib", "16mib", "16 ",  " 16",
	};
	size_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 1;
		assert_int_equal(cv_size(ok[i].s, &v), SEMQ_OK);
		assert_true(v == ok[i].v);
	}
	v = 7;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(cv_size(bad[i], &v), SEMQ_ERR_INVALID);
	assert_int_equal(cv_size(NULL, &v), SEMQ_ERR_INVALID);
	assert_int_equal(cv_size("18446744073709551616", &v), SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_size("17179869184G", &v), SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_size("17592186044416M", &v), SEMQ_ERR_TOO_BIG);
	assert_int_equal(cv_size("18014398509481984K", &v), SEMQ_ERR_TOO_BIG);
	assert_int_equal(v, 7);
}

static void test_size_in(void **state)
{
	size_t v = 7;

	(void)state;
	assert_int_equal(cv_size_in("1", 1, CV_GIB, &v, W), SEMQ_OK);
	assert_int_equal(v, 1);
	assert_int_equal(cv_size_in("1GiB", 1, CV_GIB, &v, W), SEMQ_OK);
	assert_int_equal(v, CV_GIB);
	assert_int_equal(cv_size_in("1M", CV_MIB, CV_MIB, &v, W), SEMQ_OK);

	v = 7;
	REFUSED(cv_size_in("0", 1, CV_GIB, &v, W),
		"'0' is not between 1 and 1GiB");
	REFUSED(cv_size_in("2GiB", 1, CV_GIB, &v, W),
		"'2GiB' is not between 1 and 1GiB");
	REFUSED(cv_size_in("1073741825", 1, CV_GIB, &v, W),
		"'1073741825' is not between 1 and 1GiB");
	REFUSED(cv_size_in("1023K", CV_MIB, 1024 * CV_GIB, &v, W),
		"'1023K' is not between 1MiB and 1024GiB");
	REFUSED(cv_size_in("4294967296", 1, UINT32_MAX, &v, W),
		"'4294967296' is not between 1 and 4294967295");
	REFUSED(cv_size_in("18446744073709551616", 1, CV_GIB, &v, W),
		"'18446744073709551616' is not between 1 and 1GiB");
	REFUSED(cv_size_in("16MB", 1, CV_GIB, &v, W),
		"'16MB' is not a size (1000, 64KiB, 16MiB, 1GiB)");
	REFUSED(cv_size_in("", 1, CV_GIB, &v, W),
		"'' is not a size (1000, 64KiB, 16MiB, 1GiB)");
	assert_int_equal(v, 7);
}

/* ---- whole numbers, yes/no, enums ----------------------------------------- */

static void test_uint(void **state)
{
	unsigned u = 7;

	(void)state;
	assert_int_equal(cv_uint_in("1", 1, 1000000, &u, W), SEMQ_OK);
	assert_int_equal(u, 1);
	assert_int_equal(cv_uint_in("1000000", 1, 1000000, &u, W), SEMQ_OK);
	assert_int_equal(u, 1000000);
	assert_int_equal(cv_uint_in("0", 0, 64, &u, W), SEMQ_OK);
	assert_int_equal(u, 0);
	assert_int_equal(cv_uint_in("007", 0, 64, &u, W), SEMQ_OK);
	assert_int_equal(u, 7);
	assert_int_equal(cv_uint_in("4294967295", 0, UINT_MAX, &u, W), SEMQ_OK);
	assert_true(u == UINT_MAX);

	u = 7;
	REFUSED(cv_uint_in("0", 1, 1000000, &u, W),
		"'0' is not between 1 and 1000000");
	REFUSED(cv_uint_in("1000001", 1, 1000000, &u, W),
		"'1000001' is not between 1 and 1000000");
	REFUSED(cv_uint_in("4000000001", 1, 4000000000u, &u, W),
		"'4000000001' is not between 1 and 4000000000");
	/* Beyond unsigned and beyond uint64_t: out of bounds, never wrapped. */
	REFUSED(cv_uint_in("4294967296", 0, UINT_MAX, &u, W),
		"'4294967296' is not between 0 and 4294967295");
	REFUSED(cv_uint_in("99999999999999999999999", 1, 1000000, &u, W),
		"'99999999999999999999999' is not between 1 and 1000000");
	REFUSED(cv_uint_in("-5", 1, 10, &u, W), "'-5' is not a whole number");
	REFUSED(cv_uint_in("+5", 1, 10, &u, W), "'+5' is not a whole number");
	REFUSED(cv_uint_in("12abc", 1, 10, &u, W),
		"'12abc' is not a whole number");
	REFUSED(cv_uint_in("1.0", 1, 10, &u, W), "'1.0' is not a whole number");
	REFUSED(cv_uint_in(" 1", 1, 10, &u, W), "' 1' is not a whole number");
	REFUSED(cv_uint_in("", 1, 10, &u, W), "'' is not a whole number");
	REFUSED(cv_uint_in(NULL, 1, 10, &u, W), "'' is not a whole number");
	assert_int_equal(u, 7);
}

static void test_bool(void **state)
{
	static const char *const yes[] = {"yes",  "YES", "Yes", "true",
					  "TRUE", "on",  "On",  "1"};
	static const char *const no[] = {"no",  "NO",  "false", "False",
					 "off", "OFF", "0"};
	static const char *const bad[] = {"maybe", "y", "n",  "2",     "01",
					  "yes ",  "",  "ja", "enable"};
	char msg[128];
	int b;

	(void)state;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		b = 0;
		assert_int_equal(cv_bool(yes[i], &b, W), SEMQ_OK);
		assert_int_equal(b, 1);
	}
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		b = 1;
		assert_int_equal(cv_bool(no[i], &b, W), SEMQ_OK);
		assert_int_equal(b, 0);
	}
	b = 7;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(msg, sizeof(msg),
			 "'%s' is not yes/no (yes, no, true, false, on, off, "
			 "1, 0)",
			 bad[i]);
		REFUSED(cv_bool(bad[i], &b, W), msg);
	}
	assert_int_equal(b, 7);
}

static void test_enum(void **state)
{
	static const char *const names[] = {"off", "normal", "full", "extra",
					    NULL};
	static const char *const one[] = {"only", NULL};
	int v = 9;

	(void)state;
	assert_int_equal(cv_enum("off", names, &v, W), SEMQ_OK);
	assert_int_equal(v, 0);
	assert_int_equal(cv_enum("extra", names, &v, W), SEMQ_OK);
	assert_int_equal(v, 3);
	assert_int_equal(cv_enum("FULL", names, &v, W), SEMQ_OK);
	assert_int_equal(v, 2);
	assert_int_equal(cv_enum("Only", one, &v, W), SEMQ_OK);
	assert_int_equal(v, 0);

	v = 9;
	REFUSED(cv_enum("fast", names, &v, W),
		"'fast' is not one of off, normal, full, extra");
	REFUSED(cv_enum("ful", names, &v, W),
		"'ful' is not one of off, normal, full, extra");
	REFUSED(cv_enum("full ", names, &v, W),
		"'full ' is not one of off, normal, full, extra");
	REFUSED(cv_enum("", one, &v, W), "'' is not one of only");
	assert_int_equal(v, 9);
}

/* ---- names ---------------------------------------------------------------- */

static void test_id_instance(void **state)
{
	char id[SEMQ_ID_MAX + 1] = "keep", inst[SEMQ_INSTANCE_MAX + 1] = "keep";
	char long64[65], long65[66], msg[160];

	(void)state;
	memset(long64, 'a', 64);
	long64[64] = '\0';
	memset(long65, 'a', 65);
	long65[65] = '\0';

	assert_int_equal(cv_id("S1", id, W), SEMQ_OK);
	assert_string_equal(id, "S1");
	assert_int_equal(cv_id("a.b-c_D9", id, W), SEMQ_OK);
	assert_int_equal(cv_id(long64, id, W), SEMQ_OK);
	assert_string_equal(id, long64);
	snprintf(id, sizeof(id), "keep");
	REFUSED(cv_id("bad id", id, W),
		"'bad id' is not a node id (1-64 of A-Za-z0-9._-)");
	REFUSED(cv_id("a:b", id, W),
		"'a:b' is not a node id (1-64 of A-Za-z0-9._-)");
	REFUSED(cv_id("", id, W), "'' is not a node id (1-64 of A-Za-z0-9._-)");
	snprintf(msg, sizeof(msg),
		 "'%s' is not a node id (1-64 of A-Za-z0-9._-)", long65);
	REFUSED(cv_id(long65, id, W), msg);
	assert_string_equal(id, "keep");

	assert_int_equal(cv_instance("host-1:7000", inst, W), SEMQ_OK);
	assert_string_equal(inst, "host-1:7000");
	assert_int_equal(cv_instance(long64, inst, W), SEMQ_OK);
	snprintf(inst, sizeof(inst), "keep");
	REFUSED(cv_instance("a b", inst, W),
		"'a b' is not an instance name (1-64 of A-Za-z0-9._:-)");
	REFUSED(cv_instance("a/b", inst, W),
		"'a/b' is not an instance name (1-64 of A-Za-z0-9._:-)");
	REFUSED(cv_instance("", inst, W),
		"'' is not an instance name (1-64 of A-Za-z0-9._:-)");
	snprintf(msg, sizeof(msg),
		 "'%s' is not an instance name (1-64 of A-Za-z0-9._:-)",
		 long65);
	REFUSED(cv_instance(long65, inst, W), msg);
	assert_string_equal(inst, "keep");
	/* The codec's check: empty is the node's only instance. */
	assert_true(config_instance_valid(""));
	assert_false(config_instance_valid(NULL));
	assert_false(config_instance_valid(long65));
}

/* ---- addresses ------------------------------------------------------------ */

static void test_addr(void **state)
{
	struct cfg_addr a;
	char big[300];

	(void)state;
	assert_int_equal(cv_addr("127.0.0.1:7103", &a, W), SEMQ_OK);
	assert_int_equal(a.set, 1);
	assert_string_equal(a.host, "127.0.0.1");
	assert_int_equal(a.port, 7103);
	assert_int_equal(cv_addr("[::1]:7000", &a, W), SEMQ_OK);
	assert_string_equal(a.host, "::1");
	assert_int_equal(cv_addr("[fe80::1:2]:1", &a, W), SEMQ_OK);
	assert_string_equal(a.host, "fe80::1:2");
	assert_int_equal(a.port, 1);
	assert_int_equal(cv_addr("platform.example.com:65535", &a, W), SEMQ_OK);
	assert_int_equal(a.port, 65535);
	assert_int_equal(cv_addr("my_host-1:007", &a, W), SEMQ_OK);
	assert_string_equal(a.host, "my_host-1");
	assert_int_equal(a.port, 7);

	REFUSED(cv_addr("", &a, W), "empty address");
	REFUSED(cv_addr(NULL, &a, W), "empty address");
	REFUSED(cv_addr("127.0.0.1", &a, W), "'127.0.0.1': missing ':port'");
	REFUSED(cv_addr(":7000", &a, W), "':7000': missing host");
	REFUSED(cv_addr("::1:7000", &a, W),
		"'::1:7000': write an IPv6 address in brackets, as in "
		"[::1]:7000");
	REFUSED(cv_addr("ho st:80", &a, W),
		"'ho st:80': bad character ' ' in host");
	REFUSED(cv_addr("a/b:80", &a, W),
		"'a/b:80': bad character '/' in host");
	REFUSED(cv_addr("host:http", &a, W),
		"'host:http': port 'http' is not a number");
	REFUSED(cv_addr("host:", &a, W), "'host:': port '' is not a number");
	REFUSED(cv_addr("host:-1", &a, W),
		"'host:-1': port '-1' is not a number");
	REFUSED(cv_addr("host:80x", &a, W),
		"'host:80x': port '80x' is not a number");
	REFUSED(cv_addr("host:0", &a, W),
		"'host:0': port 0 is not between 1 and 65535");
	REFUSED(cv_addr("host:65536", &a, W),
		"'host:65536': port 65536 is not between 1 and 65535");
	REFUSED(cv_addr("host:99999999999999999999999", &a, W),
		"'host:99999999999999999999999': port 99999999999999999999999 "
		"is not between 1 and 65535");
	REFUSED(cv_addr("[::1]", &a, W),
		"'[::1]' is not host:port or [v6]:port");
	REFUSED(cv_addr("[::1]80", &a, W),
		"'[::1]80' is not host:port or [v6]:port");
	REFUSED(cv_addr("[::1:80", &a, W),
		"'[::1:80' is not host:port or [v6]:port");
	REFUSED(cv_addr("[]:80", &a, W), "'[]:80': not an IPv6 address");
	REFUSED(cv_addr("[zz::1]:7000", &a, W),
		"'[zz::1]:7000': 'zz::1' is not an IPv6 address");
	REFUSED(cv_addr("[1.2.3.4]:80", &a, W),
		"'[1.2.3.4]:80': '1.2.3.4' is not an IPv6 address");
	REFUSED(cv_addr("[::1]:0", &a, W),
		"'[::1]:0': port 0 is not between 1 and 65535");

	/* A host of 255 characters fits, 256 do not. */
	memset(big, 'a', 255);
	snprintf(big + 255, sizeof(big) - 255, ":8");
	assert_int_equal(cv_addr(big, &a, W), SEMQ_OK);
	assert_int_equal(strlen(a.host), 255);
	memset(big, 'a', 256);
	snprintf(big + 256, sizeof(big) - 256, ":8");
	assert_int_equal(cv_addr(big, &a, W), SEMQ_ERR_INVALID);
	assert_non_null(strstr(why, "': host longer than 255 characters"));

	/* Cleared on an error: the address is left unset. */
	memset(&a, 0x5a, sizeof(a));
	assert_int_equal(cv_addr("host:0", &a, W), SEMQ_ERR_INVALID);
	assert_int_equal(a.set, 0);
}

/* ---- databases and paths -------------------------------------------------- */

static void test_db_url(void **state)
{
	(void)state;
	assert_int_equal(cv_db_url_prefix("postgresql://h/db"), 13);
	assert_int_equal(cv_db_url_prefix("postgres://h/db"), 11);
	assert_int_equal(cv_db_url_prefix("postgresq://h/db"), 0);
	assert_int_equal(cv_db_url_prefix("s1.db"), 0);
	assert_int_equal(cv_db_url_prefix(NULL), 0);

	assert_int_equal(cv_db_url("postgresql://u:p@h:5432/db?x=y", W),
			 SEMQ_OK);
	assert_int_equal(cv_db_url("postgres://h/d%20b", W), SEMQ_OK);
	REFUSED(cv_db_url("postgresql://", W),
		"postgresql://: nothing after the scheme");
	REFUSED(cv_db_url("postgres://", W),
		"postgres://: nothing after the scheme");
	/* The message never shows the URL (a password may be in it). */
	REFUSED(cv_db_url("postgresql://u:secret@h/d b", W),
		"postgresql URL: a blank or control character at offset 25; "
		"percent-encode it (%20)");
	REFUSED(cv_db_url("postgres://h/\x01", W),
		"postgres URL: a blank or control character at offset 13; "
		"percent-encode it (%20)");
	REFUSED(cv_db_url("postgres://h/\x7f", W),
		"postgres URL: a blank or control character at offset 13; "
		"percent-encode it (%20)");
	REFUSED(cv_db_url("s1.db", W),
		"not a postgresql:// or postgres:// URL");
}

static void test_path(void **state)
{
	const char *tmp = getenv("TMPDIR");
	char dir[1024], file[1200], sub[1400], msg[4096];
	char *p;
	FILE *f;

	(void)state;
	p = cv_path_resolve("/etc/semq", "node.db");
	assert_string_equal(p, "/etc/semq/node.db");
	free(p);
	p = cv_path_resolve("/etc/semq/", "node.db");
	assert_string_equal(p, "/etc/semq/node.db");
	free(p);
	p = cv_path_resolve("/etc/semq", "/var/lib/x.db");
	assert_string_equal(p, "/var/lib/x.db");
	free(p);
	p = cv_path_resolve("", "x.db");
	assert_string_equal(p, "x.db");
	free(p);
	p = cv_path_resolve(".", "sub/x.so");
	assert_string_equal(p, "./sub/x.so");
	free(p);

	snprintf(dir, sizeof(dir), "%s/test_config_value.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/f.pem", dir);
	snprintf(sub, sizeof(sub), "%s/none/x.db", dir);
	f = fopen(file, "w");
	assert_non_null(f);
	fclose(f);

	assert_int_equal(cv_path_check("f.pem", file, CV_PATH_EXISTS, W),
			 SEMQ_OK);
	assert_int_equal(cv_path_check("x.db", "x.db", CV_PATH_DIR, W),
			 SEMQ_OK); /* the working directory */
	assert_int_equal(cv_path_check("/x", "/x", CV_PATH_DIR, W), SEMQ_OK);
	assert_int_equal(cv_path_check("any", "/no/such", 0, W), SEMQ_OK);
	REFUSED(cv_path_check("g.pem", "/nonexistent/g.pem", CV_PATH_EXISTS, W),
		"cannot read 'g.pem': No such file or directory");
	REFUSED(cv_path_check("d", dir, CV_PATH_EXISTS, W),
		"cannot read 'd': Is a directory");
	snprintf(msg, sizeof(msg),
		 "'none/x.db': directory '%s/none': No such file or directory",
		 dir);
	REFUSED(cv_path_check("none/x.db", sub, CV_PATH_DIR, W), msg);
	snprintf(sub, sizeof(sub), "%s/x.db", file);
	snprintf(msg, sizeof(msg), "'f.pem/x.db': '%s' is not a directory",
		 file);
	REFUSED(cv_path_check("f.pem/x.db", sub, CV_PATH_DIR, W), msg);

	unlink(file);
	rmdir(dir);
}

/* ---- lists ---------------------------------------------------------------- */

static void test_durations(void **state)
{
	int64_t *v = NULL;
	size_t n = 99;
	char list[512], msg[512];

	(void)state;
	assert_int_equal(cv_durations("5s", 1, 365 * CV_DAY, 32, &v, &n, W),
			 SEMQ_OK);
	assert_int_equal(n, 1);
	assert_int_equal(v[0], 5000);
	free(v);
	assert_int_equal(
		cv_durations(" 5s ,\t1m,2d\t", 1, 365 * CV_DAY, 32, &v, &n, W),
		SEMQ_OK);
	assert_int_equal(n, 3);
	assert_int_equal(v[0], 5000);
	assert_int_equal(v[1], 60000);
	assert_int_equal(v[2], 2 * CV_DAY);
	free(v);

	/* max_items exactly, then one more. */
	list[0] = '\0';
	for (int i = 0; i < 32; i++)
		strcat(list, i ? ",1s" : "1s");
	assert_int_equal(cv_durations(list, 1, 365 * CV_DAY, 32, &v, &n, W),
			 SEMQ_OK);
	assert_int_equal(n, 32);
	free(v);
	strcat(list, ",1s");
	v = NULL;
	n = 99;
	REFUSED(cv_durations(list, 1, 365 * CV_DAY, 32, &v, &n, W),
		"more than 32 items");
	strcat(list, ",soon"); /* the count is what is refused first */
	REFUSED(cv_durations(list, 1, 365 * CV_DAY, 32, &v, &n, W),
		"more than 32 items");

	REFUSED(cv_durations("5s,,1m", 1, 10 * CV_SEC, 32, &v, &n, W),
		"item 2 is empty");
	REFUSED(cv_durations("5s, ,1m", 1, 10 * CV_SEC, 32, &v, &n, W),
		"item 2 is empty");
	REFUSED(cv_durations(",5s", 1, 10 * CV_SEC, 32, &v, &n, W),
		"item 1 is empty");
	REFUSED(cv_durations("5s,", 1, 10 * CV_SEC, 32, &v, &n, W),
		"item 2 is empty");
	REFUSED(cv_durations("", 1, 10 * CV_SEC, 32, &v, &n, W),
		"item 1 is empty");
	REFUSED(cv_durations("5s,soon", 1, 10 * CV_SEC, 32, &v, &n, W),
		"item 2 'soon' is not a duration");
	/* Beyond int64_t in a list: not a duration (as ever). */
	REFUSED(cv_durations("99999999999999999999d", 1, 10 * CV_SEC, 32, &v,
			     &n, W),
		"item 1 '99999999999999999999d' is not a duration");
	REFUSED(cv_durations("5s,0s", 1, 365 * CV_DAY, 32, &v, &n, W),
		"item 2 '0s' is not between 1ms and 365d");
	REFUSED(cv_durations("366d", 1, 365 * CV_DAY, 32, &v, &n, W),
		"item 1 '366d' is not between 1ms and 365d");
	/* An item of 127 characters is read, one of 128 is not. */
	memset(list, '9', 128);
	list[127] = '\0';
	snprintf(msg, sizeof(msg), "item 1 '%s' is not a duration", list);
	REFUSED(cv_durations(list, 1, 10 * CV_SEC, 32, &v, &n, W), msg);
	list[127] = '9';
	list[128] = '\0';
	REFUSED(cv_durations(list, 1, 10 * CV_SEC, 32, &v, &n, W),
		"item 1 is too long");
	assert_null(v);
	assert_int_equal(n, 99);
}

static void test_types(void **state)
{
	uint32_t *v = NULL;
	size_t n = 99;
	int all = 7;

	(void)state;
	assert_int_equal(cv_types("*", &all, &v, &n, W), SEMQ_OK);
	assert_int_equal(all, 1);
	assert_null(v);
	assert_int_equal(n, 0);
	assert_int_equal(cv_types("0, 4294967295,7", &all, &v, &n, W), SEMQ_OK);
	assert_int_equal(all, 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0], 0);
	assert_int_equal(v[1], UINT32_MAX);
	assert_int_equal(v[2], 7);
	free(v);

	v = NULL;
	n = 99;
	all = 7;
	REFUSED(cv_types("1,x", &all, &v, &n, W),
		"item 2 'x' is not a type number");
	REFUSED(cv_types("-1", &all, &v, &n, W),
		"item 1 '-1' is not a type number");
	REFUSED(cv_types("1,*", &all, &v, &n, W),
		"'*' must stand alone: all types, or a list of numbers");
	REFUSED(cv_types("4294967296", &all, &v, &n, W),
		"item 1 '4294967296' is not between 0 and 4294967295");
	REFUSED(cv_types("99999999999999999999999", &all, &v, &n, W),
		"item 1 '99999999999999999999999' is not between 0 and "
		"4294967295");
	REFUSED(cv_types("7,8,7", &all, &v, &n, W), "type 7 is listed twice");
	REFUSED(cv_types("1,", &all, &v, &n, W), "item 2 is empty");
	REFUSED(cv_types("", &all, &v, &n, W), "item 1 is empty");
	assert_null(v);
	assert_int_equal(n, 99);
	assert_int_equal(all, 7);
}

static void test_ids(void **state)
{
	char(*v)[SEMQ_ID_MAX + 1] = NULL;
	size_t n = 99;

	(void)state;
	assert_int_equal(cv_ids("A, B.1 ,c_2", &v, &n, W), SEMQ_OK);
	assert_int_equal(n, 3);
	assert_string_equal(v[0], "A");
	assert_string_equal(v[1], "B.1");
	assert_string_equal(v[2], "c_2");
	free(v);

	v = NULL;
	n = 99;
	REFUSED(cv_ids("A,bad id", &v, &n, W),
		"item 2 'bad id' is not a node id (1-64 of A-Za-z0-9._-)");
	REFUSED(cv_ids("A,a:b", &v, &n, W),
		"item 2 'a:b' is not a node id (1-64 of A-Za-z0-9._-)");
	REFUSED(cv_ids("A,B,A", &v, &n, W), "'A' is listed twice");
	REFUSED(cv_ids("A,,B", &v, &n, W), "item 2 is empty");
	assert_null(v);
	assert_int_equal(n, 99);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_duration),
		cmocka_unit_test(test_duration_in),
		cmocka_unit_test(test_fmt),
		cmocka_unit_test(test_size),
		cmocka_unit_test(test_size_in),
		cmocka_unit_test(test_uint),
		cmocka_unit_test(test_bool),
		cmocka_unit_test(test_enum),
		cmocka_unit_test(test_id_instance),
		cmocka_unit_test(test_addr),
		cmocka_unit_test(test_db_url),
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_types),
		cmocka_unit_test(test_ids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
