/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the bill plugin (plugins/bill/bill.c, compiled into
 * this target so that its code is instrumented): the input is the payload of
 * a type 2800 message, handed to semq_plugin_handle on an in-memory SQLite
 * database inside a SAVEPOINT, the way the host calls it, and rolled back
 * after each input. Every input comes from R1/S1/1, so only a document with
 * "shop": "R1" gets past the sender check. One bill of R1 ("B-TAKEN", from
 * R1/S1/9) is committed at the start so that a document reusing its number
 * meets the conflict path; the plugin runs with max_lines = 8 so that the
 * limit is within reach.
 *
 * DESIGN (what is checked beyond "no crash, no leak, no UB")
 *  - The verdict is OK or PERMANENT (never RETRY: nothing here makes the
 *    database fail), and a refusal says why in err and writes nothing.
 *  - An accepted bill is one `bill` row and 1..max_lines `bill_line` rows,
 *    and its total_minor is the sum of qty * price_minor of its lines.
 *  - Idempotence: the same message again is OK and writes nothing; another
 *    message with the same document is a PERMANENT conflict and writes
 *    nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <semq/plugin.h>
#include <sqlite3.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINES 8

static sqlite3 *db;  /* the in-memory database, for the whole run */
static void *plugin; /* the plugin's handle */
static struct semq_plugin_tx tx;

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_bill: invariant broken: %s%s%s\n", what,
		detail ? ": " : "", detail ? detail : "");
	abort();
}

static void exec(const char *sql)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		fprintf(stderr, "fuzz_bill: %s: %s\n", sql, msg ? msg : "?");
		abort();
	}
}

/* The first column of the first row of sql, an integer. */
static int64_t query_int(const char *sql)
{
	sqlite3_stmt *s = NULL;
	int64_t v;

	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK ||
	    sqlite3_step(s) != SQLITE_ROW) {
		fprintf(stderr, "fuzz_bill: %s: %s\n", sql, sqlite3_errmsg(db));
		abort();
	}
	v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return v;
}

static void cleanup(void)
{
	semq_plugin_fini(plugin);
	sqlite3_close(db);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const struct semq_plugin_option opt = {"max_lines", "8",
						      "fuzz:1"};
	struct semq_plugin_init_args a = {0};
	struct semq_plugin_msg m = {0};
	static const char taken[] =
		"{\"bill_no\": \"B-TAKEN\", \"shop\": \"R1\", \"lines\": "
		"[{\"item\": \"X\", \"qty\": 1, \"price\": \"1.00\"}]}";
	char err[256] = "";

	(void)argc;
	(void)argv;
	if (sqlite3_open(":memory:", &db) != SQLITE_OK) {
		fprintf(stderr, "fuzz_bill: cannot open an in-memory db\n");
		exit(1);
	}
	tx.db_kind = SEMQ_DB_SQLITE;
	tx.db = db;
	a.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a.name = "bill";
	a.node_id = "S1";
	a.options = &opt;
	a.n_options = 1;
	a.tx = &tx;
	if (semq_plugin_abi_version() != SEMQ_PLUGIN_ABI_VERSION ||
	    semq_plugin_init(&a, &plugin, err, sizeof err) != SEMQ_PLUGIN_OK) {
		fprintf(stderr, "fuzz_bill: init: %s\n", err);
		exit(1);
	}
	m.origin = "R1";
	m.dest = "S1";
	m.seq = 9;
	m.type = 2800;
	m.payload = (const uint8_t *)taken;
	m.payload_len = sizeof taken - 1;
	if (semq_plugin_handle(plugin, &m, &tx, err, sizeof err) !=
	    SEMQ_PLUGIN_OK) {
		fprintf(stderr, "fuzz_bill: the first bill: %s\n", err);
		exit(1);
	}
	atexit(cleanup);
	return 0;
}

static int64_t rows(void)
{
	return query_int("SELECT (SELECT count(*) FROM bill) * 1000000 + "
			 "(SELECT count(*) FROM bill_line)");
}

/* One call; err must be set exactly when the verdict is not OK. */
static int handle(const struct semq_plugin_msg *m)
{
	char err[256];
	int r;

	memset(err, 'x', sizeof err);
	err[0] = '\0';
	r = semq_plugin_handle(plugin, m, &tx, err, sizeof err);
	if (!memchr(err, '\0', sizeof err))
		die("err is not terminated", NULL);
	if (r != SEMQ_PLUGIN_OK && r != SEMQ_PLUGIN_PERMANENT)
		die("a verdict other than OK or PERMANENT", err);
	if (r != SEMQ_PLUGIN_OK && !err[0])
		die("a refusal without a reason", NULL);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct semq_plugin_msg m = {0};
	int64_t before, after, lines;
	int r;

	m.origin = "R1";
	m.dest = "S1";
	m.seq = 1;
	m.type = 2800;
	m.payload = data;
	m.payload_len = size;

	exec("SAVEPOINT fuzz");
	before = rows();
	r = handle(&m);
	after = rows();
	if (r != SEMQ_PLUGIN_OK) {
		if (after != before)
			die("a refused document wrote rows", NULL);
	} else {
		if (after / 1000000 != before / 1000000 + 1)
			die("an accepted bill is not one bill row", NULL);
		lines = after % 1000000 - before % 1000000;
		if (lines < 1 || lines > MAX_LINES)
			die("an accepted bill has 0 or too many lines", NULL);
		if (query_int(
			    "SELECT count(*) FROM bill b WHERE b.origin = 'R1' "
			    "AND b.seq = 1 AND b.total_minor = "
			    "(SELECT sum(l.qty * l.price_minor) FROM bill_line "
			    "l WHERE l.bill_id = b.id)") != 1)
			die("total_minor is not the sum of the lines", NULL);
		if (handle(&m) != SEMQ_PLUGIN_OK || rows() != after)
			die("the same message again is not a no-op", NULL);
		m.seq = 2;
		if (handle(&m) != SEMQ_PLUGIN_PERMANENT || rows() != after)
			die("another message with the same bill_no is not a "
			    "conflict",
			    NULL);
	}
	exec("ROLLBACK TO fuzz; RELEASE fuzz");
	return 0;
}
