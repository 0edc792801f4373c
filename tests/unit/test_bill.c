/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the bill plugin (plugins/bill/bill.c). The test loads the
 * built bill.so with dlopen, as the host does, and calls its entry points
 * directly against a real SQLite file in a fresh directory under $TMPDIR.
 * Every handle call runs inside a SAVEPOINT that is rolled back when the
 * plugin does not return OK, which is what the store does around a plugin,
 * so the tables show exactly what the host would commit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include <semq/plugin.h>

#define ERRSZ 256 /* the size of the err buffer the host passes */

/* Per test: a fresh directory holding node.db, bill.so loaded and inited. */
struct fx {
	char dir[1024];
	char dbpath[1100];
	sqlite3 *db; /* owned; NULL once a test closed it */
	struct semq_plugin_tx tx;
	void *dl; /* dlopen handle of bill.so */
	semq_plugin_abi_version_fn abi;
	semq_plugin_init_fn init;
	semq_plugin_handle_fn handle;
	semq_plugin_fini_fn fini;
	void *h; /* the plugin handle; NULL once a test finalised it */
	char err[ERRSZ];
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static sqlite3 *open_db(const char *path)
{
	sqlite3 *db = NULL;

	if (sqlite3_open_v2(path, &db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
			    NULL) != SQLITE_OK) {
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

/* Runs init on db with the given options; the handle goes to *out. */
static int init_on(struct fx *f, sqlite3 *db,
		   const struct semq_plugin_option *opts, size_t n, void **out)
{
	struct semq_plugin_tx tx = {.db_kind = SEMQ_DB_SQLITE, .db = db};
	struct semq_plugin_init_args a;

	memset(&a, 0, sizeof a);
	a.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a.name = "bill";
	a.node_id = "S1";
	a.options = opts;
	a.n_options = n;
	a.tx = &tx;
	memset(f->err, 0, sizeof f->err);
	return f->init(&a, out, f->err, sizeof f->err);
}

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof *f);

	if (!f)
		return -1;
	*state = f;
	snprintf(f->dir, sizeof f->dir, "%s/bill-XXXXXX",
		 tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->dbpath, sizeof f->dbpath, "%s/node.db", f->dir);
	f->db = open_db(f->dbpath);
	if (!f->db)
		return -1;
	f->tx.db_kind = SEMQ_DB_SQLITE;
	f->tx.db = f->db;
	f->dl = dlopen(BILL_SO, RTLD_NOW | RTLD_LOCAL);
	if (!f->dl) {
		fprintf(stderr, "dlopen %s: %s\n", BILL_SO, dlerror());
		return -1;
	}
	f->abi = (semq_plugin_abi_version_fn)dlsym(f->dl,
						   "semq_plugin_abi_version");
	f->init = (semq_plugin_init_fn)dlsym(f->dl, "semq_plugin_init");
	f->handle = (semq_plugin_handle_fn)dlsym(f->dl, "semq_plugin_handle");
	f->fini = (semq_plugin_fini_fn)dlsym(f->dl, "semq_plugin_fini");
	if (!f->abi || !f->init || !f->handle || !f->fini)
		return -1;
	if (init_on(f, f->db, NULL, 0, &f->h) != SEMQ_PLUGIN_OK) {
		fprintf(stderr, "init: %s\n", f->err);
		return -1;
	}
	return 0;
}

static void rm(const char *dir, const char *name)
{
	char p[1200];

	snprintf(p, sizeof p, "%s/%s", dir, name);
	unlink(p);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int r = 0;

	if (f->h)
		f->fini(f->h);
	/* fini finalised every statement, or this close would be BUSY. */
	if (f->db && sqlite3_close(f->db) != SQLITE_OK)
		r = -1;
	if (f->dl)
		dlclose(f->dl);
	rm(f->dir, "node.db");
	rm(f->dir, "node.db-journal");
	rm(f->dir, "other.db");
	rm(f->dir, "other.db-journal");
	rmdir(f->dir);
	free(f);
	return r;
}

static void exec_ok(sqlite3 *db, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK)
		fprintf(stderr, "%s: %s\n", sql, msg ? msg : "?");
	sqlite3_free(msg);
	assert_int_equal(rc, SQLITE_OK);
}

static int64_t query_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *s = NULL;
	int64_t v;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return v;
}

static int64_t n_bills(sqlite3 *db)
{
	return query_int(db, "SELECT count(*) FROM bill");
}

static int64_t n_lines(sqlite3 *db)
{
	return query_int(db, "SELECT count(*) FROM bill_line");
}

/* Calls handle on db without a savepoint around it. */
static int call_raw(struct fx *f, sqlite3 *db, const char *origin,
		    const char *dest, uint64_t seq, uint32_t type,
		    const void *payload, size_t len)
{
	struct semq_plugin_tx tx = {.db_kind = SEMQ_DB_SQLITE, .db = db};
	struct semq_plugin_msg m;

	memset(&m, 0, sizeof m);
	m.origin = origin;
	m.dest = dest;
	m.seq = seq;
	m.type = type;
	m.created_at = now_ms();
	m.payload = payload;
	m.payload_len = len;
	memset(f->err, 0, sizeof f->err);
	return f->handle(f->h, &m, &tx, f->err, sizeof f->err);
}

/* Calls handle as the host does: inside a savepoint, undone on failure. */
static int call_on(struct fx *f, sqlite3 *db, const char *origin,
		   const char *dest, uint64_t seq, uint32_t type,
		   const void *payload, size_t len)
{
	int rc;

	exec_ok(db, "SAVEPOINT semq_apply");
	rc = call_raw(f, db, origin, dest, seq, type, payload, len);
	if (rc != SEMQ_PLUGIN_OK)
		exec_ok(db, "ROLLBACK TO semq_apply");
	exec_ok(db, "RELEASE semq_apply");
	return rc;
}

/* A bill from R1 to S1 with sequence number seq. */
static int call(struct fx *f, uint64_t seq, const char *json)
{
	return call_on(f, f->db, "R1", "S1", seq, 2800, json, strlen(json));
}

/* Checks that json is refused PERMANENT with exactly `want`, writing nothing. */
static void refused(struct fx *f, const char *json, const char *want)
{
	int rc = call(f, 1, json);

	if (rc != SEMQ_PLUGIN_PERMANENT || strcmp(f->err, want) != 0)
		fprintf(stderr, "payload %s\n  gave %d '%s'\n  want '%s'\n",
			json, rc, f->err, want);
	assert_int_equal(rc, SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, want);
	assert_int_equal(n_bills(f->db), 0);
	assert_int_equal(n_lines(f->db), 0);
}

/* ---- the ABI and init ---------------------------------------------------- */

static void test_abi_version(void **state)
{
	struct fx *f = *state;

	assert_int_equal(f->abi(), SEMQ_PLUGIN_ABI_VERSION);
}

static void test_init_creates_tables(void **state)
{
	struct fx *f = *state;
	void *h2 = NULL;

	assert_int_equal(
		query_int(f->db,
			  "SELECT count(*) FROM pragma_table_info('bill')"
			  " WHERE name IN ('id', 'bill_no', 'shop', "
			  "'currency', 'issued_at', 'total_minor', "
			  "'origin', 'dest', 'seq', 'imported_at')"),
		10);
	assert_int_equal(query_int(f->db, "SELECT count(*) FROM "
					  "pragma_table_info('bill')"),
			 10);
	assert_int_equal(
		query_int(f->db,
			  "SELECT count(*) FROM pragma_table_info('bill_line')"
			  " WHERE name IN ('bill_id', 'line_no', 'item', "
			  "'qty', 'price_minor')"),
		5);
	assert_int_equal(query_int(f->db, "SELECT count(*) FROM "
					  "pragma_table_info('bill_line')"),
			 5);
	/* bill_no is unique. */
	assert_int_equal(query_int(f->db, "SELECT count(*) FROM "
					  "pragma_index_list('bill') WHERE "
					  "\"unique\" = 1"),
			 1);
	/* A second init on the same database (a restart) finds them. */
	assert_int_equal(init_on(f, f->db, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	assert_non_null(h2);
	f->fini(h2);
}

static void test_unknown_option_refused(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_option o = {"max_line", "5", "node.ini:7"};
	void *h2 = NULL;

	assert_int_equal(init_on(f, f->db, &o, 1, &h2), SEMQ_PLUGIN_PERMANENT);
	assert_null(h2);
	assert_string_equal(f->err, "bill: node.ini:7: unknown option "
				    "'max_line' (max_lines)");
}

static void test_bad_max_lines_refused(void **state)
{
	static const char *const bad[] = {
		"0", "-1", "abc", "10x", "", "1000001", "99999999999999999999"};
	struct fx *f = *state;
	struct semq_plugin_option two[2] = {{"max_lines", "5", "node.ini:3"},
					    {"max_lines", "6", "node.ini:4"}};
	char want[ERRSZ];
	size_t i;

	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct semq_plugin_option o = {"max_lines", bad[i],
					       "node.ini:9"};
		void *h2 = NULL;

		assert_int_equal(init_on(f, f->db, &o, 1, &h2),
				 SEMQ_PLUGIN_PERMANENT);
		assert_null(h2);
		snprintf(want, sizeof want,
			 "bill: node.ini:9: max_lines '%s' is not a whole "
			 "number from 1 to 1000000",
			 bad[i]);
		assert_string_equal(f->err, want);
	}
	{
		void *h2 = NULL;

		assert_int_equal(init_on(f, f->db, two, 2, &h2),
				 SEMQ_PLUGIN_PERMANENT);
		assert_null(h2);
		assert_string_equal(f->err,
				    "bill: node.ini:4: max_lines given twice");
	}
}

static void test_max_lines_option(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_option o = {"max_lines", "2", "node.ini:5"};
	void *h2 = NULL;

	assert_int_equal(init_on(f, f->db, &o, 1, &h2), SEMQ_PLUGIN_OK);
	f->fini(f->h);
	f->h = h2;
	assert_int_equal(call(f, 1,
			      "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
			      "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
			      "{\"item\":\"B\",\"qty\":1,\"price\":\"1\"}]}"),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 2,
			      "{\"bill_no\":\"B-2\",\"shop\":\"R1\",\"lines\":"
			      "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
			      "{\"item\":\"B\",\"qty\":1,\"price\":\"1\"},"
			      "{\"item\":\"C\",\"qty\":1,\"price\":\"1\"}]}"),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: lines has 3 entries, more than max_lines 2");
	assert_int_equal(n_bills(f->db), 1);
	assert_int_equal(n_lines(f->db), 2);
}

static void test_bad_call_is_retry(void **state)
{
	struct fx *f = *state;
	struct semq_plugin_msg m;
	struct semq_plugin_tx none = {0};

	memset(&m, 0, sizeof m);
	m.type = 2800;
	assert_int_equal(f->handle(NULL, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without handle or message");
	assert_int_equal(f->handle(f->h, &m, &none, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: needs a SQLite transaction");
	m.payload_len = 3;
	assert_int_equal(f->handle(f->h, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err,
			    "bill: called with 3 payload bytes but no payload");
}

/* ---- good bills ---------------------------------------------------------- */

static void test_good_bill_imported(void **state)
{
	struct fx *f = *state;
	const char *json = "{\"bill_no\":\"B-2026-0001\",\"shop\":\"R1\","
			   "\"currency\":\"EUR\","
			   "\"issued_at\":\"2026-11-22T10:00:00Z\","
			   "\"lines\":[{\"item\":\"SKU-1\",\"qty\":2,"
			   "\"price\":\"3.50\"}]}";
	int64_t before = now_ms(), after;
	sqlite3_stmt *s = NULL;

	assert_int_equal(
		call_on(f, f->db, "R1", "S1", 7, 2800, json, strlen(json)),
		SEMQ_PLUGIN_OK);
	after = now_ms();
	assert_int_equal(n_bills(f->db), 1);
	assert_int_equal(n_lines(f->db), 1);
	assert_int_equal(
		sqlite3_prepare_v2(f->db,
				   "SELECT bill_no, shop, currency, issued_at, "
				   "total_minor, origin, dest, seq, "
				   "imported_at, id FROM bill",
				   -1, &s, NULL),
		SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(s, 0),
			    "B-2026-0001");
	assert_string_equal((const char *)sqlite3_column_text(s, 1), "R1");
	assert_string_equal((const char *)sqlite3_column_text(s, 2), "EUR");
	assert_string_equal((const char *)sqlite3_column_text(s, 3),
			    "2026-11-22T10:00:00Z");
	assert_int_equal(sqlite3_column_int64(s, 4), 700);
	assert_string_equal((const char *)sqlite3_column_text(s, 5), "R1");
	assert_string_equal((const char *)sqlite3_column_text(s, 6), "S1");
	assert_int_equal(sqlite3_column_int64(s, 7), 7);
	assert_in_range(sqlite3_column_int64(s, 8), before, after);
	sqlite3_finalize(s);

	assert_int_equal(sqlite3_prepare_v2(f->db,
					    "SELECT l.line_no, l.item, l.qty, "
					    "l.price_minor FROM bill_line l "
					    "JOIN bill b ON b.id = l.bill_id",
					    -1, &s, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int64(s, 0), 1);
	assert_string_equal((const char *)sqlite3_column_text(s, 1), "SKU-1");
	assert_int_equal(sqlite3_column_int64(s, 2), 2);
	assert_int_equal(sqlite3_column_int64(s, 3), 350);
	assert_int_equal(sqlite3_step(s), SQLITE_DONE);
	sqlite3_finalize(s);
}

static void test_several_lines(void **state)
{
	static const struct {
		const char *item;
		int64_t qty, price;
	} want[] = {
		{"SKU-1", 2, 350},    {"SKU-2", 1, 350}, {"SKU-3", 3, 300},
		{"SKU-4", 1, 200},    {"SKU-5", 4, 125}, {"SKU-6", 10, 7},
		{"Käse 🧀", 1, 0}, {"SKU-8", 5, 10},  {"SKU-9", 1, 1999},
	};
	struct fx *f = *state;
	const char *json =
		"{\"lines\":["
		"{\"item\":\"SKU-1\",\"qty\":2,\"price\":\"3.50\"},"
		"{\"item\":\"SKU-2\",\"qty\":1,\"price\":\"3.5\"},"
		"{\"item\":\"SKU-3\",\"qty\":3.0,\"price\":\"3\"},"
		"{\"price\":2,\"item\":\"SKU-4\",\"qty\":1},"
		"{\"item\":\"SKU-5\",\"qty\":4,\"price\":1.25},"
		"{\"item\":\"SKU-6\",\"qty\":10,\"price\":\"0.07\"},"
		"{\"item\":\"K\\u00e4se \xf0\x9f\xa7\x80\",\"qty\":1,"
		"\"price\":\"0\"},"
		"{\"item\":\"SKU-8\",\"qty\":5,\"price\":0.1},"
		"{\"item\":\"SKU-9\",\"qty\":1,\"price\":19.99}],"
		"\"shop\":\"R2\",\"bill_no\":\"B-9\",\"currency\":\"EUR\"}";
	sqlite3_stmt *s = NULL;
	int64_t total = 0;
	size_t i;

	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(f->db), 1);
	assert_int_equal(n_lines(f->db), 9);
	assert_int_equal(sqlite3_prepare_v2(f->db,
					    "SELECT line_no, item, qty, "
					    "price_minor FROM bill_line "
					    "ORDER BY line_no",
					    -1, &s, NULL),
			 SQLITE_OK);
	for (i = 0; i < sizeof want / sizeof *want; i++) {
		assert_int_equal(sqlite3_step(s), SQLITE_ROW);
		assert_int_equal(sqlite3_column_int64(s, 0), (int64_t)i + 1);
		assert_string_equal((const char *)sqlite3_column_text(s, 1),
				    want[i].item);
		assert_int_equal(sqlite3_column_int64(s, 2), want[i].qty);
		assert_int_equal(sqlite3_column_int64(s, 3), want[i].price);
		total += want[i].qty * want[i].price;
	}
	assert_int_equal(sqlite3_step(s), SQLITE_DONE);
	sqlite3_finalize(s);
	assert_int_equal(total,
			 700 + 350 + 900 + 200 + 500 + 70 + 0 + 50 + 1999);
	assert_int_equal(query_int(f->db, "SELECT total_minor FROM bill"),
			 total);
}

static void test_optional_fields_absent_or_null(void **state)
{
	struct fx *f = *state;

	assert_int_equal(
		call(f, 1,
		     "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
		     "[{\"item\":\"A\",\"qty\":1,\"price\":\"1.00\"}]}"),
		SEMQ_PLUGIN_OK);
	assert_int_equal(
		call(f, 2,
		     "{\"bill_no\":\"B-2\",\"shop\":\"R1\","
		     "\"currency\":null,\"issued_at\":null,\"lines\":"
		     "[{\"item\":\"A\",\"qty\":1,\"price\":\"1.00\"}]}"),
		SEMQ_PLUGIN_OK);
	assert_int_equal(query_int(f->db, "SELECT count(*) FROM bill WHERE "
					  "currency IS NULL AND issued_at IS "
					  "NULL AND total_minor = 100"),
			 2);
}

/* issued_at: RFC 3339 with fractions, offsets, leap days and leap seconds
 * is taken as given; anything else is refused. */
static void test_issued_at_forms(void **state)
{
	static const char *const good[] = {
		"2026-11-22T10:00:00Z", "2024-02-29T23:59:60.123+01:00",
		"2026-11-22t10:00:00z", "2000-02-29T00:00:00-12:30"};
	static const char *const bad[] = {
		"2026-11-22 10:00:00Z",     "2026-13-01T00:00:00Z",
		"2026-11-22T10:00:00+1:00", "2100-02-29T00:00:00Z",
		"2026-11-22T24:00:00Z",     "2026-11-22T10:00:00",
		"2026-11-22T10:00:00.Z",    "2026-11-22T10:00:00Zx"};
	struct fx *f = *state;
	char json[512], want[ERRSZ];
	size_t i;

	for (i = 0; i < sizeof good / sizeof *good; i++) {
		snprintf(json, sizeof json,
			 "{\"bill_no\":\"B-%zu\",\"shop\":\"R1\","
			 "\"issued_at\":\"%s\",\"lines\":"
			 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
			 i, good[i]);
		assert_int_equal(call(f, i + 1, json), SEMQ_PLUGIN_OK);
	}
	assert_int_equal(
		query_int(f->db, "SELECT count(*) FROM bill WHERE issued_at = "
				 "'2024-02-29T23:59:60.123+01:00'"),
		1);
	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		snprintf(json, sizeof json,
			 "{\"bill_no\":\"X-%zu\",\"shop\":\"R1\","
			 "\"issued_at\":\"%s\",\"lines\":"
			 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
			 i, bad[i]);
		snprintf(want, sizeof want,
			 "bill: issued_at '%s' is not an RFC 3339 time like "
			 "'2026-11-22T10:00:00Z'",
			 bad[i]);
		assert_int_equal(call(f, 100 + i, json), SEMQ_PLUGIN_PERMANENT);
		assert_string_equal(f->err, want);
	}
	assert_int_equal(n_bills(f->db), sizeof good / sizeof *good);
}

static void test_text_length_boundary(void **state)
{
	struct fx *f = *state;
	char json[1024], no[300];
	size_t i;

	/* 64 two-byte characters are 64 characters, not 128. */
	no[0] = '\0';
	for (i = 0; i < 64; i++)
		strcat(no, "\xc3\xa9");
	snprintf(json, sizeof json,
		 "{\"bill_no\":\"%s\",\"shop\":\"R1\",\"lines\":"
		 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
		 no);
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(query_int(f->db, "SELECT length(bill_no) FROM bill"),
			 64);
	strcat(no, "e");
	snprintf(json, sizeof json,
		 "{\"bill_no\":\"%s\",\"shop\":\"R1\",\"lines\":"
		 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
		 no);
	assert_int_equal(call(f, 2, json), SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no is longer than 64 characters (65)");
	assert_int_equal(n_bills(f->db), 1);
}

static void test_price_limit(void **state)
{
	struct fx *f = *state;

	assert_int_equal(call(f, 1,
			      "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
			      "[{\"item\":\"A\",\"qty\":1,"
			      "\"price\":\"9999999999999.99\"}]}"),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(query_int(f->db, "SELECT price_minor FROM bill_line"),
			 INT64_C(999999999999999));
}

/* ---- refused documents --------------------------------------------------- */

#define L1 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]"
#define HEAD "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
/* A bill whose only line is {ITEM_QTY_PRICE}. */
#define LINE(x) HEAD "[{" x "}]}"
#define S65 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

static const struct {
	const char *json, *err;
} malformed[] = {
	/* not JSON at all, or not an object */
	{"{bill", "bill: payload is not JSON: string or '}' expected near "
		  "'bill' at line 1 column 5"},
	{"not json", "bill: payload is not JSON: invalid token near 'not' at "
		     "line 1 column 3"},
	{HEAD L1 "} trailing", "bill: payload is not JSON: end of file "
			       "expected near 'trailing' at line 1 column "
			       "81"},
	{"{\"bill_no\":\"A\",\"bill_no\":\"B\"}",
	 "bill: payload is not JSON: duplicate object key near '\"bill_no\"' "
	 "at line 1 column 24"},
	{"[1,2]", "bill: payload is not a JSON object: [1,2]"},
	{"\"B-1\"", "bill: payload is not a JSON object: \"B-1\""},
	{"42", "bill: payload is not a JSON object: 42"},
	{"null", "bill: payload is not a JSON object: null"},
	/* the bill's own fields */
	{"{\"shop\":\"R1\",\"lines\":" L1 "}", "bill: bill_no is missing"},
	{"{\"bill_no\":\"B-1\",\"lines\":" L1 "}", "bill: shop is missing"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\"}", "bill: lines is missing"},
	{"{\"bill_no\":\"\",\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no is empty"},
	{"{\"bill_no\":12,\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no: 12 is not a string"},
	{"{\"bill_no\":null,\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no: null is not a string"},
	{"{\"bill_no\":\"B-1\",\"shop\":[\"R1\"],\"lines\":" L1 "}",
	 "bill: shop: [\"R1\"] is not a string"},
	{"{\"bill_no\":\"" S65 "\",\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no is longer than 64 characters (65)"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"" S65 "\",\"lines\":" L1 "}",
	 "bill: shop is longer than 64 characters (65)"},
	{"{\"bill_no\":\"B-1 \",\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no 'B-1 ' has leading or trailing blanks"},
	{"{\"bill_no\":\"B\\n1\",\"shop\":\"R1\",\"lines\":" L1 "}",
	 "bill: bill_no contains a control character"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"totl\":5,\"lines\":" L1 "}",
	 "bill: unknown key 'totl' (bill_no, shop, currency, issued_at, "
	 "lines)"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"currency\":\"euro\","
	 "\"lines\":" L1 "}",
	 "bill: currency 'euro' is not a three-letter code like 'EUR'"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"currency\":978,"
	 "\"lines\":" L1 "}",
	 "bill: currency: 978 is not a string"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"issued_at\":\"2026-02-29T10:"
	 "00:00Z\",\"lines\":" L1 "}",
	 "bill: issued_at '2026-02-29T10:00:00Z' is not an RFC 3339 time like "
	 "'2026-11-22T10:00:00Z'"},
	{"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"issued_at\":\"yesterday\","
	 "\"lines\":" L1 "}",
	 "bill: issued_at 'yesterday' is not an RFC 3339 time like "
	 "'2026-11-22T10:00:00Z'"},
	/* lines */
	{HEAD "[]}", "bill: lines is empty"},
	{HEAD "{\"item\":\"A\"}}",
	 "bill: lines: {\"item\":\"A\"} is not an array"},
	{HEAD "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},7]}",
	 "bill: lines[1]: 7 is not an object"},
	{LINE("\"qty\":1,\"price\":\"1\""), "bill: lines[0].item is missing"},
	{LINE("\"item\":\"A\",\"price\":\"1\""),
	 "bill: lines[0].qty is missing"},
	{LINE("\"item\":\"A\",\"qty\":1"), "bill: lines[0].price is missing"},
	{LINE("\"item\":\"A\",\"qty\":1,\"prcie\":\"1\""),
	 "bill: lines[0]: unknown key 'prcie' (item, qty, price)"},
	{LINE("\"item\":\"" S65 "\",\"qty\":1,\"price\":\"1\""),
	 "bill: lines[0].item is longer than 64 characters (65)"},
	{LINE("\"item\":5,\"qty\":1,\"price\":\"1\""),
	 "bill: lines[0].item: 5 is not a string"},
	{HEAD "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
	      "{\"item\":\"B\",\"qty\":1,\"price\":\"1\"},"
	      "{\"item\":\"C\",\"qty\":-1,\"price\":\"1\"}]}",
	 "bill: lines[2].qty: -1 is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":0,\"price\":\"1\""),
	 "bill: lines[0].qty: 0 is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":1.5,\"price\":\"1\""),
	 "bill: lines[0].qty: 1.5 is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":\"2\",\"price\":\"1\""),
	 "bill: lines[0].qty: \"2\" is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":null,\"price\":\"1\""),
	 "bill: lines[0].qty: null is not a positive integer"},
	{LINE("\"item\":\"A\",\"qty\":1e300,\"price\":\"1\""),
	 "bill: lines[0].qty: 1e300 is too large"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"abc\""),
	 "bill: lines[0].price: \"abc\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"\""),
	 "bill: lines[0].price: \"\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"3.\""),
	 "bill: lines[0].price: \"3.\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\".5\""),
	 "bill: lines[0].price: \".5\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"1e2\""),
	 "bill: lines[0].price: \"1e2\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\" 1\""),
	 "bill: lines[0].price: \" 1\" is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":true"),
	 "bill: lines[0].price: true is not an amount like \"3.50\""},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"1.234567\""),
	 "bill: lines[0].price: \"1.234567\" has more than 2 decimal places"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":1.234"),
	 "bill: lines[0].price: 1.234 has more than 2 decimal places"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"-1.00\""),
	 "bill: lines[0].price: \"-1.00\" is negative"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":-1"),
	 "bill: lines[0].price: -1 is negative"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":-0.5"),
	 "bill: lines[0].price: -0.5 is negative"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":\"10000000000000\""),
	 "bill: lines[0].price: \"10000000000000\" is larger than "
	 "9999999999999.99"},
	{LINE("\"item\":\"A\",\"qty\":1,\"price\":10000000000000"),
	 "bill: lines[0].price: 10000000000000 is larger than "
	 "9999999999999.99"},
	/* amounts that do not fit */
	{LINE("\"item\":\"A\",\"qty\":9223372036854775807,\"price\":\"2\""),
	 "bill: lines[0]: qty 9223372036854775807 times price 200 overflows "
	 "a 64-bit amount"},
	{HEAD "[{\"item\":\"A\",\"qty\":4611686018427387904,"
	      "\"price\":\"0.01\"},"
	      "{\"item\":\"B\",\"qty\":4611686018427387904,"
	      "\"price\":\"0.01\"}]}",
	 "bill: the total overflows a 64-bit amount at lines[1]"},
};

static void test_malformed_refused(void **state)
{
	struct fx *f = *state;
	size_t i;

	for (i = 0; i < sizeof malformed / sizeof *malformed; i++)
		refused(f, malformed[i].json, malformed[i].err);
}

static void test_wrong_type_refused(void **state)
{
	struct fx *f = *state;
	const char *json = HEAD L1 "}";

	assert_int_equal(
		call_on(f, f->db, "R1", "S1", 1, 2801, json, strlen(json)),
		SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: type 2801 is not a bill (2800)");
	assert_int_equal(n_bills(f->db), 0);
}

static void test_empty_payload_refused(void **state)
{
	struct fx *f = *state;

	assert_int_equal(call_on(f, f->db, "R1", "S1", 1, 2800, NULL, 0),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: payload is empty");
	assert_int_equal(n_bills(f->db), 0);
}

/* Bytes that are not UTF-8 are refused, and the message itself stays UTF-8. */
static void test_not_utf8_refused(void **state)
{
	struct fx *f = *state;
	static const char json[] = "{\"bill_no\":\"B\xff-1\",\"shop\":\"R1\"}";

	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: payload is not JSON: unable to "
				    "decode byte 0xff near '\"B' at line 1 "
				    "column 13");
	assert_int_equal(n_bills(f->db), 0);
}

/* ---- one bill number, several messages ----------------------------------- */

static void test_bill_no_from_another_message(void **state)
{
	struct fx *f = *state;
	const char *a = HEAD L1 "}";
	const char *b = "{\"bill_no\":\"B-1\",\"shop\":\"R2\",\"lines\":"
			"[{\"item\":\"Z\",\"qty\":9,\"price\":\"9\"}]}";

	assert_int_equal(call_on(f, f->db, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	/* Another sequence number of the same stream. */
	assert_int_equal(call_on(f, f->db, "R1", "S1", 4, 2800, b, strlen(b)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no 'B-1' was already imported from "
			    "R1/S1/3");
	/* Another stream with the same sequence number. */
	assert_int_equal(call_on(f, f->db, "R2", "S1", 3, 2800, b, strlen(b)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no 'B-1' was already imported from "
			    "R1/S1/3");
	/* The first import is untouched. */
	assert_int_equal(n_bills(f->db), 1);
	assert_int_equal(n_lines(f->db), 1);
	assert_int_equal(query_int(f->db, "SELECT count(*) FROM bill WHERE "
					  "shop = 'R1' AND total_minor = 100 "
					  "AND seq = 3"),
			 1);
}

static void test_same_message_again_is_ok(void **state)
{
	struct fx *f = *state;
	const char *a = HEAD L1 "}";

	assert_int_equal(call_on(f, f->db, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call_on(f, f->db, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	assert_string_equal(f->err, "");
	assert_int_equal(n_bills(f->db), 1);
	assert_int_equal(n_lines(f->db), 1);
}

/* ---- database errors ----------------------------------------------------- */

/* A write that fails part way is RETRY, and the host's rollback of the
 * savepoint leaves no row of the bill behind. */
static void test_db_error_partial_rolled_back(void **state)
{
	struct fx *f = *state;
	const char *json = HEAD "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
				"{\"item\":\"BOOM\",\"qty\":1,\"price\":\"1\"},"
				"{\"item\":\"C\",\"qty\":1,\"price\":\"1\"}]}";
	int rc;

	exec_ok(f->db, "CREATE TRIGGER boom BEFORE INSERT ON bill_line "
		       "WHEN NEW.item = 'BOOM' BEGIN "
		       "SELECT RAISE(ABORT, 'no BOOM here'); END");
	exec_ok(f->db, "SAVEPOINT semq_apply");
	rc = call_raw(f, f->db, "R1", "S1", 1, 2800, json, strlen(json));
	assert_int_equal(rc, SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: insert into bill_line failed at "
				    "lines[1]: no BOOM here");
	/* The plugin had written the bill and its first line... */
	assert_int_equal(n_bills(f->db), 1);
	assert_int_equal(n_lines(f->db), 1);
	exec_ok(f->db, "ROLLBACK TO semq_apply");
	exec_ok(f->db, "RELEASE semq_apply");
	/* ...and the host's rollback took them away. */
	assert_int_equal(n_bills(f->db), 0);
	assert_int_equal(n_lines(f->db), 0);

	/* Redone once the cause is gone, it imports the whole bill. */
	exec_ok(f->db, "DROP TRIGGER boom");
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(f->db), 1);
	assert_int_equal(n_lines(f->db), 3);
}

static void test_busy_is_retry(void **state)
{
	struct fx *f = *state;
	sqlite3 *other = open_db(f->dbpath);
	const char *json = HEAD L1 "}";

	assert_non_null(other);
	exec_ok(other, "BEGIN IMMEDIATE");
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_RETRY);
	assert_string_equal(
		f->err, "bill: insert into bill failed: database is locked");
	exec_ok(other, "ROLLBACK");
	assert_int_equal(sqlite3_close(other), SQLITE_OK);
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(f->db), 1);
}

static void test_missing_table_is_retry(void **state)
{
	struct fx *f = *state;

	exec_ok(f->db, "DROP TABLE bill_line");
	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: cannot prepare the bill_line "
				    "insert: no such table: bill_line");
	assert_int_equal(n_bills(f->db), 0);
}

/* Statements follow the connection: moving to another one finalises those
 * on the first (else closing it would be BUSY), and fini finalises the rest
 * (checked by the close in teardown). */
static void test_other_connection(void **state)
{
	struct fx *f = *state;
	char path[1200];
	sqlite3 *other;
	void *h2 = NULL;

	snprintf(path, sizeof path, "%s/other.db", f->dir);
	other = open_db(path);
	assert_non_null(other);
	assert_int_equal(init_on(f, other, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);

	assert_int_equal(call_on(f, other, "R1", "S1", 1, 2800, HEAD L1 "}",
				 strlen(HEAD L1 "}")),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(other), 1);
	assert_int_equal(n_bills(f->db), 1);
	assert_int_equal(sqlite3_close(other), SQLITE_OK);
}

static void test_fini_finalises(void **state)
{
	struct fx *f = *state;

	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_OK);
	f->fini(f->h);
	f->h = NULL;
	assert_int_equal(sqlite3_close(f->db), SQLITE_OK);
	f->db = NULL;
	f->fini(NULL); /* accepted and does nothing */
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_abi_version),
		T(test_init_creates_tables),
		T(test_unknown_option_refused),
		T(test_bad_max_lines_refused),
		T(test_max_lines_option),
		T(test_bad_call_is_retry),
		T(test_good_bill_imported),
		T(test_several_lines),
		T(test_optional_fields_absent_or_null),
		T(test_issued_at_forms),
		T(test_text_length_boundary),
		T(test_price_limit),
		T(test_malformed_refused),
		T(test_wrong_type_refused),
		T(test_empty_payload_refused),
		T(test_not_utf8_refused),
		T(test_bill_no_from_another_message),
		T(test_same_message_again_is_ok),
		T(test_db_error_partial_rolled_back),
		T(test_busy_is_retry),
		T(test_missing_table_is_retry),
		T(test_other_connection),
		T(test_fini_finalises),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
