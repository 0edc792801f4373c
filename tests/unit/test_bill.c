/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the bill plugin (plugins/bill/bill.c) on both node
 * databases. The test loads the built bill.so with dlopen, as the host does,
 * and calls its entry points directly:
 *
 *   test_bill        against a real SQLite file in a fresh directory under
 *                    $TMPDIR;
 *   test_bill --pg   against PostgreSQL: SEMQ_TEST_PG_URL names a server
 *                    database; the run creates a database of its own there
 *                    (dropped at the end) and gives every test a fresh
 *                    schema in it. Without SEMQ_TEST_PG_URL it says so and
 *                    exits 77 (ctest: skipped).
 *
 * Every handle call runs as the store runs it: in a transaction, inside
 * SAVEPOINT semq_apply, rolled back to the savepoint when the plugin does not
 * return OK, so the tables show exactly what the host would commit. Every
 * test of the plugin's behaviour runs on both back ends: the document, the
 * shop that must be the sending node, bill numbers per shop, and the
 * migration of a database of the first shape (bill_no UNIQUE across shops);
 * a few tests cover what only one back end has (PostgreSQL: sessions that
 * reconnect, two transactions importing one bill_no at once, two instances
 * migrating at once; SQLite: two connections migrating at once). The
 * plumbing of both back ends, the fixture and the checks every plugin passes
 * alike are in tests/unit/backend.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include <semq/plugin.h>

#include "backend.h"

static int64_t n_bills(struct be_conn *c)
{
	return be_query_int(c, "SELECT count(*) FROM bill");
}

static int64_t n_lines(struct be_conn *c)
{
	return be_query_int(c, "SELECT count(*) FROM bill_line");
}

/*
 * The unique keys of bill other than the primary key, as text: the columns
 * of each in alphabetical order joined by ',', the keys sorted and joined by
 * ';' ("bill_no,shop"; "bill_no" in the first shape). Into buf.
 */
static const char *unique_keys(struct be_conn *c, char *buf, size_t n)
{
	struct be_rows r;
	int i;

	be_query_rows(
		c,
		be_sql("SELECT (SELECT group_concat(name, ',') FROM (SELECT "
		       "name FROM pragma_index_info(l.name) ORDER BY name)) "
		       "AS cols FROM pragma_index_list('bill') l WHERE "
		       "l.\"unique\" = 1 AND l.origin <> 'pk' ORDER BY cols",
		       "SELECT (SELECT string_agg(a.attname, ',' ORDER BY "
		       "a.attname) FROM pg_attribute a WHERE a.attrelid = "
		       "i.indrelid AND a.attnum = ANY(i.indkey)) AS cols FROM "
		       "pg_index i WHERE i.indrelid = 'bill'::regclass AND "
		       "i.indisunique AND NOT i.indisprimary ORDER BY cols"),
		&r);
	buf[0] = '\0';
	for (i = 0; i < r.n; i++)
		snprintf(buf + strlen(buf), n - strlen(buf), "%s%s",
			 i ? ";" : "", be_cell(&r, i, 0));
	be_rows_free(&r);
	return buf;
}

/* bill.so loaded and inited on a fresh database (struct be_fx). */
static int setup(void **state)
{
	return be_fx_setup(state, "bill", BILL_SO);
}

/* Calls handle on c without a transaction or savepoint around it. */
static int call_raw(struct be_fx *f, struct be_conn *c, const char *origin,
		    const char *dest, uint64_t seq, uint32_t type,
		    const void *payload, size_t len)
{
	struct semq_plugin_tx tx = {.db_kind = c->kind,
				    .db = be_conn_handle(c)};
	struct semq_plugin_msg m;

	memset(&m, 0, sizeof m);
	m.origin = origin;
	m.dest = dest;
	m.seq = seq;
	m.type = type;
	m.created_at = be_now_ms();
	m.payload = payload;
	m.payload_len = len;
	memset(f->err, 0, sizeof f->err);
	return f->handle(f->h, &m, &tx, f->err, sizeof f->err);
}

/* Calls handle as the store does: in a transaction, inside a savepoint that
 * is rolled back when the plugin fails, then committed. */
static int call_on(struct be_fx *f, struct be_conn *c, const char *origin,
		   const char *dest, uint64_t seq, uint32_t type,
		   const void *payload, size_t len)
{
	int rc;

	be_exec_ok(c, "BEGIN");
	be_exec_ok(c, "SAVEPOINT semq_apply");
	rc = call_raw(f, c, origin, dest, seq, type, payload, len);
	if (rc != SEMQ_PLUGIN_OK)
		be_exec_ok(c, "ROLLBACK TO semq_apply");
	be_exec_ok(c, "RELEASE semq_apply");
	be_exec_ok(c, "COMMIT");
	return rc;
}

/* A bill from R1 to S1 with sequence number seq. */
static int call(struct be_fx *f, uint64_t seq, const char *json)
{
	return call_on(f, &f->c, "R1", "S1", seq, 2800, json, strlen(json));
}

/* Checks that json is refused PERMANENT with exactly `want`, writing nothing. */
static void refused(struct be_fx *f, const char *json, const char *want)
{
	int rc = call(f, 1, json);

	if (rc != SEMQ_PLUGIN_PERMANENT || strcmp(f->err, want) != 0)
		fprintf(stderr, "payload %s\n  gave %d '%s'\n  want '%s'\n",
			json, rc, f->err, want);
	assert_int_equal(rc, SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, want);
	assert_int_equal(n_bills(&f->c), 0);
	assert_int_equal(n_lines(&f->c), 0);
}

/* ---- the ABI and init ---------------------------------------------------- */

static void test_abi_version(void **state)
{
	struct be_fx *f = *state;

	assert_int_equal(f->abi(), SEMQ_PLUGIN_ABI_VERSION);
}

static void test_init_creates_tables(void **state)
{
	struct be_fx *f = *state;
	struct be_conn *c = &f->c;
	char keys[200];
	void *h2 = NULL;

	assert_int_equal(be_n_columns(c, "bill",
				      "'id', 'bill_no', 'shop', 'currency', "
				      "'issued_at', 'total_minor', 'origin', "
				      "'dest', 'seq', 'imported_at'"),
			 10);
	assert_int_equal(be_n_columns(c, "bill", NULL), 10);
	assert_int_equal(be_n_columns(c, "bill_line",
				      "'bill_id', 'line_no', 'item', 'qty', "
				      "'price_minor'"),
			 5);
	assert_int_equal(be_n_columns(c, "bill_line", NULL), 5);
	/* (shop, bill_no) is unique, and it is the only unique key besides
	 * the primary key: bill_no alone is not. */
	assert_string_equal(unique_keys(c, keys, sizeof keys), "bill_no,shop");
	assert_int_equal(be_n_indexes(c, "bill", 1), 1);
	if (be_pg()) {
		/* Integers are BIGINT, text is TEXT. */
		assert_int_equal(
			be_pg_n_typed(c, "bigint",
				      "(table_name = 'bill' AND column_name IN "
				      "('id', 'total_minor', 'seq', "
				      "'imported_at')) OR (table_name = "
				      "'bill_line' AND column_name IN "
				      "('bill_id', 'line_no', 'qty', "
				      "'price_minor'))"),
			8);
		assert_int_equal(
			be_pg_n_typed(c, "text",
				      "table_name IN ('bill', 'bill_line')"),
			7);
	}
	/* A second init on the same database (a restart) finds them. */
	assert_int_equal(be_init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	assert_non_null(h2);
	f->fini(h2);
	/* Neither init made the server send a NOTICE (libpq would print it on
	 * the node's stderr). */
	assert_int_equal(c->notices, 0);
}

static void test_unknown_option_refused(void **state)
{
	struct be_fx *f = *state;
	struct semq_plugin_option o = {"max_line", "5", "node.ini:7"};

	be_check_init_refused(f, &o, 1,
			      "bill: node.ini:7: unknown option 'max_line' "
			      "(max_lines)");
}

static void test_bad_max_lines_refused(void **state)
{
	static const char *const bad[] = {
		"0", "-1", "abc", "10x", "", "1000001", "99999999999999999999"};
	struct be_fx *f = *state;
	struct semq_plugin_option two[2] = {{"max_lines", "5", "node.ini:3"},
					    {"max_lines", "6", "node.ini:4"}};
	char want[BE_ERRSZ];
	size_t i;

	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct semq_plugin_option o = {"max_lines", bad[i],
					       "node.ini:9"};

		snprintf(want, sizeof want,
			 "bill: node.ini:9: max_lines '%s' is not a whole "
			 "number from 1 to 1000000",
			 bad[i]);
		be_check_init_refused(f, &o, 1, want);
	}
	be_check_init_refused(f, two, 2,
			      "bill: node.ini:4: max_lines given twice");
}

static void test_max_lines_option(void **state)
{
	struct be_fx *f = *state;
	struct semq_plugin_option o = {"max_lines", "2", "node.ini:5"};
	void *h2 = NULL;

	assert_int_equal(be_init_on(f, &f->c, &o, 1, &h2), SEMQ_PLUGIN_OK);
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
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 2);
}

static void test_bad_call_is_retry(void **state)
{
	struct be_fx *f = *state;
	struct semq_plugin_msg m;
	struct semq_plugin_tx none = {0};

	memset(&m, 0, sizeof m);
	m.type = 2800;
	assert_int_equal(f->handle(NULL, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without handle or message");
	assert_int_equal(f->handle(f->h, NULL, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without handle or message");
	assert_int_equal(f->handle(f->h, &m, NULL, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without a transaction");
	assert_int_equal(f->handle(f->h, &m, &none, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: called without a transaction");
	m.payload_len = 3;
	assert_int_equal(f->handle(f->h, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err,
			    "bill: called with 3 payload bytes but no payload");
	/* A host bug, not the document's: the shop cannot be checked. */
	m.payload = (const uint8_t *)"{}";
	m.payload_len = 2;
	assert_int_equal(f->handle(f->h, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err,
			    "bill: called without the message's origin");
}

/* A database kind the plugin does not know is refused at init and, should a
 * host still call, PERMANENT: retrying cannot help. The connection handed
 * over is not touched. */
static void test_unknown_db_kind_refused(void **state)
{
	struct be_fx *f = *state;
	struct semq_plugin_tx odd = {.db_kind = 7, .db = f->tx.db};
	struct semq_plugin_msg m;
	const char *json = "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
			   "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}";

	be_check_init_needs_db(f);

	memset(&m, 0, sizeof m);
	m.origin = "R1";
	m.dest = "S1";
	m.seq = 1;
	m.type = 2800;
	m.payload = (const uint8_t *)json;
	m.payload_len = strlen(json);
	assert_int_equal(f->handle(f->h, &m, &odd, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: unknown database kind 7 (1 SQLite, "
				    "2 PostgreSQL)");
	assert_int_equal(n_bills(&f->c), 0);
	/* The same message on the right kind is imported. */
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 1);
}

/* ---- good bills ---------------------------------------------------------- */

static void test_good_bill_imported(void **state)
{
	struct be_fx *f = *state;
	const char *json = "{\"bill_no\":\"B-2026-0001\",\"shop\":\"R1\","
			   "\"currency\":\"EUR\","
			   "\"issued_at\":\"2026-11-22T10:00:00Z\","
			   "\"lines\":[{\"item\":\"SKU-1\",\"qty\":2,"
			   "\"price\":\"3.50\"}]}";
	int64_t before = be_now_ms(), after;
	struct be_rows r;

	assert_int_equal(
		call_on(f, &f->c, "R1", "S1", 7, 2800, json, strlen(json)),
		SEMQ_PLUGIN_OK);
	after = be_now_ms();
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 1);
	be_query_rows(&f->c,
		      "SELECT bill_no, shop, currency, issued_at, total_minor, "
		      "origin, dest, seq, imported_at, id FROM bill",
		      &r);
	assert_int_equal(r.n, 1);
	assert_string_equal(be_cell(&r, 0, 0), "B-2026-0001");
	assert_string_equal(be_cell(&r, 0, 1), "R1");
	assert_string_equal(be_cell(&r, 0, 2), "EUR");
	assert_string_equal(be_cell(&r, 0, 3), "2026-11-22T10:00:00Z");
	assert_int_equal(be_cell_int(&r, 0, 4), 700);
	assert_string_equal(be_cell(&r, 0, 5), "R1");
	assert_string_equal(be_cell(&r, 0, 6), "S1");
	assert_int_equal(be_cell_int(&r, 0, 7), 7);
	assert_in_range(be_cell_int(&r, 0, 8), before, after);
	assert_non_null(be_cell(&r, 0, 9));
	be_rows_free(&r);

	be_query_rows(&f->c,
		      "SELECT l.line_no, l.item, l.qty, l.price_minor "
		      "FROM bill_line l JOIN bill b ON b.id = l.bill_id",
		      &r);
	assert_int_equal(r.n, 1);
	assert_int_equal(be_cell_int(&r, 0, 0), 1);
	assert_string_equal(be_cell(&r, 0, 1), "SKU-1");
	assert_int_equal(be_cell_int(&r, 0, 2), 2);
	assert_int_equal(be_cell_int(&r, 0, 3), 350);
	be_rows_free(&r);
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
	struct be_fx *f = *state;
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
		"\"shop\":\"R1\",\"bill_no\":\"B-9\",\"currency\":\"EUR\"}";
	struct be_rows r;
	int64_t total = 0;
	size_t i;

	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 9);
	be_query_rows(&f->c,
		      "SELECT line_no, item, qty, price_minor FROM bill_line "
		      "ORDER BY line_no",
		      &r);
	assert_int_equal(r.n, sizeof want / sizeof *want);
	for (i = 0; i < sizeof want / sizeof *want; i++) {
		assert_int_equal(be_cell_int(&r, (int)i, 0), (int64_t)i + 1);
		assert_string_equal(be_cell(&r, (int)i, 1), want[i].item);
		assert_int_equal(be_cell_int(&r, (int)i, 2), want[i].qty);
		assert_int_equal(be_cell_int(&r, (int)i, 3), want[i].price);
		total += want[i].qty * want[i].price;
	}
	be_rows_free(&r);
	assert_int_equal(total,
			 700 + 350 + 900 + 200 + 500 + 70 + 0 + 50 + 1999);
	assert_int_equal(be_query_int(&f->c, "SELECT total_minor FROM bill"),
			 total);
}

static void test_optional_fields_absent_or_null(void **state)
{
	struct be_fx *f = *state;

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
	assert_int_equal(be_query_int(&f->c,
				      "SELECT count(*) FROM bill WHERE "
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
	struct be_fx *f = *state;
	char json[512], want[BE_ERRSZ];
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
		be_query_int(&f->c,
			     "SELECT count(*) FROM bill WHERE issued_at = "
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
	assert_int_equal(n_bills(&f->c), sizeof good / sizeof *good);
}

static void test_text_length_boundary(void **state)
{
	struct be_fx *f = *state;
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
	assert_int_equal(
		be_query_int(&f->c, "SELECT length(bill_no) FROM bill"), 64);
	strcat(no, "e");
	snprintf(json, sizeof json,
		 "{\"bill_no\":\"%s\",\"shop\":\"R1\",\"lines\":"
		 "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}",
		 no);
	assert_int_equal(call(f, 2, json), SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no is longer than 64 characters (65)");
	assert_int_equal(n_bills(&f->c), 1);
}

static void test_price_limit(void **state)
{
	struct be_fx *f = *state;

	assert_int_equal(call(f, 1,
			      "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
			      "[{\"item\":\"A\",\"qty\":1,"
			      "\"price\":\"9999999999999.99\"}]}"),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(
		be_query_int(&f->c, "SELECT price_minor FROM bill_line"),
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
	struct be_fx *f = *state;
	size_t i;

	for (i = 0; i < sizeof malformed / sizeof *malformed; i++)
		refused(f, malformed[i].json, malformed[i].err);
}

static void test_wrong_type_refused(void **state)
{
	struct be_fx *f = *state;
	const char *json = HEAD L1 "}";

	assert_int_equal(
		call_on(f, &f->c, "R1", "S1", 1, 2801, json, strlen(json)),
		SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: type 2801 is not a bill (2800)");
	assert_int_equal(n_bills(&f->c), 0);
}

static void test_empty_payload_refused(void **state)
{
	struct be_fx *f = *state;

	assert_int_equal(call_on(f, &f->c, "R1", "S1", 1, 2800, NULL, 0),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: payload is empty");
	assert_int_equal(n_bills(&f->c), 0);
}

/* Bytes that are not UTF-8 are refused, and the message itself stays UTF-8. */
static void test_not_utf8_refused(void **state)
{
	struct be_fx *f = *state;
	static const char json[] = "{\"bill_no\":\"B\xff-1\",\"shop\":\"R1\"}";

	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: payload is not JSON: unable to "
				    "decode byte 0xff near '\"B' at line 1 "
				    "column 13");
	assert_int_equal(n_bills(&f->c), 0);
}

/* ---- the shop is the sending node --------------------------------------- */

/* A document whose shop is not the message's origin is refused PERMANENT,
 * naming both, and writes nothing. */
static void test_shop_not_origin_refused(void **state)
{
	struct be_fx *f = *state;
	const char *origin50 =
		"N0123456789012345678901234567890123456789012345678";
	const char *from_r1 = HEAD L1 "}";
	char json[512];

	refused(f, "{\"bill_no\":\"B-1\",\"shop\":\"R2\",\"lines\":" L1 "}",
		"bill: shop 'R2' is not the sending node 'R1'");
	/* Byte for byte: no case folding, no trimming. */
	refused(f, "{\"bill_no\":\"B-1\",\"shop\":\"r1\",\"lines\":" L1 "}",
		"bill: shop 'r1' is not the sending node 'R1'");
	refused(f, "{\"bill_no\":\"B-1\",\"shop\":\"R1.\",\"lines\":" L1 "}",
		"bill: shop 'R1.' is not the sending node 'R1'");
	/* Long values are clipped to 40 bytes, as elsewhere. */
	snprintf(json, sizeof json,
		 "{\"bill_no\":\"B-1\",\"shop\":\"%.64s\",\"lines\":" L1 "}",
		 S65);
	refused(f, json,
		"bill: shop 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA...' is "
		"not "
		"the sending node 'R1'");
	assert_int_equal(call_on(f, &f->c, origin50, "S1", 1, 2800, from_r1,
				 strlen(from_r1)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: shop 'R1' is not the sending node "
				    "'N012345678901234567890123456789012345678"
				    "...'");
	/* The document is checked first: a bad one from the wrong shop is
	 * refused for what is wrong in it. */
	refused(f, "{\"bill_no\":\"B-1\",\"shop\":\"R2\",\"lines\":[]}",
		"bill: lines is empty");
	assert_int_equal(n_bills(&f->c), 0);
	assert_int_equal(n_lines(&f->c), 0);
}

/* The shop is checked before the bill is looked up: R1 cannot find out
 * whether R2 has a bill_no by sending it as R2's, and an R1 bill_no sent
 * under R2's name is not R1's conflict either. */
static void test_shop_checked_before_lookup(void **state)
{
	struct be_fx *f = *state;
	const char *r1 = HEAD L1 "}";
	const char *as_r2 =
		"{\"bill_no\":\"B-1\",\"shop\":\"R2\",\"lines\":" L1 "}";

	assert_int_equal(
		call_on(f, &f->c, "R2", "S1", 1, 2800, as_r2, strlen(as_r2)),
		SEMQ_PLUGIN_OK);
	assert_int_equal(
		call_on(f, &f->c, "R1", "S1", 1, 2800, as_r2, strlen(as_r2)),
		SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: shop 'R2' is not the sending node 'R1'");
	assert_int_equal(call_on(f, &f->c, "R1", "S1", 2, 2800, r1, strlen(r1)),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call_on(f, &f->c, "R2", "S1", 2, 2800, r1, strlen(r1)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: shop 'R1' is not the sending node 'R2'");
	assert_int_equal(n_bills(&f->c), 2);
	assert_int_equal(be_query_int(&f->c, "SELECT count(*) FROM bill WHERE "
					     "shop = origin"),
			 2);
}

/* ---- one bill number, several messages ----------------------------------- */

/* Bill numbers are per shop: two shops each sending B-0001 make two bills,
 * each with its own lines. */
static void test_same_bill_no_two_shops(void **state)
{
	struct be_fx *f = *state;
	const char *a = "{\"bill_no\":\"B-0001\",\"shop\":\"R1\",\"lines\":"
			"[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"}]}";
	const char *b = "{\"bill_no\":\"B-0001\",\"shop\":\"R2\",\"lines\":"
			"[{\"item\":\"Z\",\"qty\":9,\"price\":\"9\"},"
			"{\"item\":\"Y\",\"qty\":1,\"price\":\"1\"}]}";
	struct be_rows r;

	assert_int_equal(call_on(f, &f->c, "R1", "S1", 1, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call_on(f, &f->c, "R2", "S1", 1, 2800, b, strlen(b)),
			 SEMQ_PLUGIN_OK);
	assert_string_equal(f->err, "");
	assert_int_equal(n_bills(&f->c), 2);
	assert_int_equal(n_lines(&f->c), 3);
	be_query_rows(&f->c,
		      "SELECT b.shop, b.bill_no, b.origin, b.total_minor, "
		      "l.line_no, l.item FROM bill b JOIN bill_line l ON "
		      "l.bill_id = b.id ORDER BY b.shop, l.line_no",
		      &r);
	assert_int_equal(r.n, 3);
	assert_string_equal(be_cell(&r, 0, 0), "R1");
	assert_string_equal(be_cell(&r, 0, 1), "B-0001");
	assert_string_equal(be_cell(&r, 0, 2), "R1");
	assert_int_equal(be_cell_int(&r, 0, 3), 100);
	assert_string_equal(be_cell(&r, 0, 5), "A");
	assert_string_equal(be_cell(&r, 1, 0), "R2");
	assert_string_equal(be_cell(&r, 1, 1), "B-0001");
	assert_string_equal(be_cell(&r, 1, 2), "R2");
	assert_int_equal(be_cell_int(&r, 1, 3), 8200);
	assert_string_equal(be_cell(&r, 1, 5), "Z");
	assert_string_equal(be_cell(&r, 2, 5), "Y");
	be_rows_free(&r);

	/* Each shop's number is still taken for that shop. */
	assert_int_equal(call_on(f, &f->c, "R2", "S1", 2, 2800, b, strlen(b)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no 'B-0001' was already imported from "
			    "R2/S1/1");
	assert_int_equal(call_on(f, &f->c, "R1", "S1", 1, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 2);
	assert_int_equal(n_lines(&f->c), 3);
}

static void test_bill_no_from_another_message(void **state)
{
	struct be_fx *f = *state;
	const char *a = HEAD L1 "}";
	const char *b = "{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
			"[{\"item\":\"Z\",\"qty\":9,\"price\":\"9\"}]}";

	assert_int_equal(call_on(f, &f->c, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	/* Another sequence number of the same stream. */
	assert_int_equal(call_on(f, &f->c, "R1", "S1", 4, 2800, b, strlen(b)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no 'B-1' was already imported from "
			    "R1/S1/3");
	/* Another stream of the shop with the same sequence number. */
	assert_int_equal(call_on(f, &f->c, "R1", "S2", 3, 2800, b, strlen(b)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "bill: bill_no 'B-1' was already imported from "
			    "R1/S1/3");
	/* The first import is untouched. */
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 1);
	assert_int_equal(be_query_int(&f->c,
				      "SELECT count(*) FROM bill WHERE "
				      "shop = 'R1' AND total_minor = 100 "
				      "AND seq = 3"),
			 1);
}

static void test_same_message_again_is_ok(void **state)
{
	struct be_fx *f = *state;
	const char *a = HEAD L1 "}";

	assert_int_equal(call_on(f, &f->c, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call_on(f, &f->c, "R1", "S1", 3, 2800, a, strlen(a)),
			 SEMQ_PLUGIN_OK);
	assert_string_equal(f->err, "");
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 1);
}

/* ---- database errors ----------------------------------------------------- */

/* A write that fails part way is RETRY, and the host's rollback of the
 * savepoint leaves no row of the bill behind. */
static void test_db_error_partial_rolled_back(void **state)
{
	struct be_fx *f = *state;
	const char *json = HEAD "[{\"item\":\"A\",\"qty\":1,\"price\":\"1\"},"
				"{\"item\":\"BOOM\",\"qty\":1,\"price\":\"1\"},"
				"{\"item\":\"C\",\"qty\":1,\"price\":\"1\"}]}";
	int rc;

	be_exec_ok(&f->c,
		   be_sql("CREATE TRIGGER boom BEFORE INSERT ON bill_line "
			  "WHEN NEW.item = 'BOOM' BEGIN "
			  "SELECT RAISE(ABORT, 'no BOOM here'); END",
			  "CREATE FUNCTION boom() RETURNS trigger LANGUAGE "
			  "plpgsql AS "
			  "$$ BEGIN IF NEW.item = 'BOOM' THEN "
			  "RAISE EXCEPTION 'no BOOM here'; END IF; RETURN NEW; "
			  "END $$; "
			  "CREATE TRIGGER boom BEFORE INSERT ON bill_line "
			  "FOR EACH ROW EXECUTE FUNCTION boom()"));
	be_exec_ok(&f->c, "BEGIN");
	be_exec_ok(&f->c, "SAVEPOINT semq_apply");
	rc = call_raw(f, &f->c, "R1", "S1", 1, 2800, json, strlen(json));
	assert_int_equal(rc, SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: insert into bill_line failed at "
				    "lines[1]: no BOOM here");
	if (be_pg()) {
		/* PostgreSQL aborted the transaction at the failed INSERT:
		 * nothing can be read in it until the host rolls back. */
		assert_int_equal(PQtransactionStatus(f->c.pg), PQTRANS_INERROR);
	} else {
		/* The plugin had written the bill and its first line... */
		assert_int_equal(n_bills(&f->c), 1);
		assert_int_equal(n_lines(&f->c), 1);
	}
	be_exec_ok(&f->c, "ROLLBACK TO semq_apply");
	be_exec_ok(&f->c, "RELEASE semq_apply");
	/* ...and the host's rollback took them away. */
	assert_int_equal(n_bills(&f->c), 0);
	assert_int_equal(n_lines(&f->c), 0);
	be_exec_ok(&f->c, "COMMIT");

	/* Redone once the cause is gone, it imports the whole bill. */
	be_exec_ok(&f->c, be_sql("DROP TRIGGER boom",
				 "DROP TRIGGER boom ON bill_line"));
	assert_int_equal(call(f, 1, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 1);
	assert_int_equal(n_lines(&f->c), 3);
}

/* A table locked by another connection past the lock wait is RETRY. */
static void test_busy_is_retry(void **state)
{
	struct be_fx *f = *state;
	struct be_conn other;
	const char *first =
		"{\"bill_no\":\"B-0\",\"shop\":\"R1\",\"lines\":" L1 "}";
	const char *json = HEAD L1 "}";

	/* A first bill, so that the statements are prepared: the wait below
	 * is the INSERT's. */
	assert_int_equal(call(f, 1, first), SEMQ_PLUGIN_OK);
	assert_int_equal(be_open_again(f, &other), 0);
	if (be_pg()) {
		be_exec_ok(&f->c, "SET lock_timeout = '200ms'");
		be_exec_ok(&other, "BEGIN; LOCK TABLE bill IN EXCLUSIVE MODE");
	} else {
		be_exec_ok(&other, "BEGIN IMMEDIATE");
	}
	assert_int_equal(call(f, 2, json), SEMQ_PLUGIN_RETRY);
	assert_string_equal(
		f->err,
		be_sql("bill: insert into bill failed: database is locked",
		       "bill: insert into bill failed: canceling statement "
		       "due to lock timeout"));
	be_exec_ok(&other, "ROLLBACK");
	assert_int_equal(be_conn_close(&other), 0);
	assert_int_equal(call(f, 2, json), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 2);
}

static void test_missing_table_is_retry(void **state)
{
	struct be_fx *f = *state;

	be_exec_ok(&f->c, "DROP TABLE bill_line");
	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_RETRY);
	assert_string_equal(
		f->err, be_sql("bill: cannot prepare the bill_line insert: no "
			       "such table: bill_line",
			       "bill: cannot prepare the bill_line insert: "
			       "relation \"bill_line\" does not exist"));
	assert_int_equal(n_bills(&f->c), 0);
}

/* Statements follow the connection: moving to another one finalises those
 * on the first (SQLite: else closing it would be BUSY; PostgreSQL: the other
 * session has statements of its own), and fini finalises the rest (checked
 * by the close in teardown). Going back to the first works too. */
static void test_other_connection(void **state)
{
	struct be_fx *f = *state;
	const char *b2 =
		"{\"bill_no\":\"B-2\",\"shop\":\"R1\",\"lines\":" L1 "}";
	struct be_conn other;
	void *h2 = NULL;

	assert_int_equal(be_open_other(f, &other), 0);
	assert_int_equal(be_init_on(f, &other, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);

	assert_int_equal(call_on(f, &other, "R1", "S1", 1, 2800, HEAD L1 "}",
				 strlen(HEAD L1 "}")),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_OK);
	assert_int_equal(
		call_on(f, &other, "R1", "S1", 2, 2800, b2, strlen(b2)),
		SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 2, b2), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&other), 2);
	assert_int_equal(n_bills(&f->c), 2);
	assert_int_equal(be_conn_close(&other), 0);
}

static void test_fini_finalises(void **state)
{
	struct be_fx *f = *state;

	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_OK);
	be_check_fini(f);
}

/* ---- migration from the first shape, bill_no unique across shops -------- */

/* The tables as the first plugin made them (bill_no TEXT UNIQUE), with
 * `extra` columns after imported_at ("" for none). */
static void old_tables(struct be_conn *c, const char *extra)
{
	char sql[1200];

	be_exec_ok(c, "DROP TABLE bill_line; DROP TABLE bill");
	snprintf(sql, sizeof sql, "%s%s%s",
		 be_sql("CREATE TABLE bill(id INTEGER PRIMARY KEY, "
			"bill_no TEXT UNIQUE NOT NULL, shop TEXT NOT NULL, "
			"currency TEXT, issued_at TEXT, "
			"total_minor INTEGER NOT NULL, "
			"origin TEXT, dest TEXT, seq INTEGER, "
			"imported_at INTEGER NOT NULL",
			"CREATE TABLE bill("
			"id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY "
			"KEY, "
			"bill_no TEXT UNIQUE NOT NULL, shop TEXT NOT NULL, "
			"currency TEXT, issued_at TEXT, "
			"total_minor BIGINT NOT NULL, "
			"origin TEXT, dest TEXT, seq BIGINT, "
			"imported_at BIGINT NOT NULL"),
		 extra,
		 be_sql("); CREATE TABLE bill_line("
			"bill_id INTEGER NOT NULL REFERENCES bill(id), "
			"line_no INTEGER NOT NULL, item TEXT NOT NULL, "
			"qty INTEGER NOT NULL, price_minor INTEGER NOT NULL, "
			"PRIMARY KEY(bill_id, line_no))",
			"); CREATE TABLE bill_line("
			"bill_id BIGINT NOT NULL REFERENCES bill(id), "
			"line_no BIGINT NOT NULL, item TEXT NOT NULL, "
			"qty BIGINT NOT NULL, price_minor BIGINT NOT NULL, "
			"PRIMARY KEY(bill_id, line_no))"));
	be_exec_ok(c, sql);
	/* Three bills with ids that are not 1, 2, 3; the third from before
	 * the shop had to be the sender, kept as it is. */
	be_exec_ok(c,
		   "INSERT INTO bill(id, bill_no, shop, currency, issued_at, "
		   "total_minor, origin, dest, seq, imported_at) VALUES "
		   "(3, 'B-0001', 'R1', 'EUR', '2026-11-22T10:00:00Z', 700, "
		   "'R1', 'S1', 1, 1000), "
		   "(8, 'B-0002', 'R2', NULL, NULL, 99, 'R2', 'S1', 1, 2000), "
		   "(9, 'B-0003', 'X9', NULL, NULL, 5, 'R1', 'S1', 2, 3000); "
		   "INSERT INTO bill_line VALUES (3, 1, 'SKU-1', 2, 350), "
		   "(8, 1, 'A', 1, 99), (9, 1, 'B', 1, 2), (9, 2, 'C', 1, 3)");
	if (be_pg())
		be_exec_ok(c, "SELECT setval(pg_get_serial_sequence('bill', "
			      "'id'), 9)");
	/* What an operator may have added: an index, a view and a trigger
	 * that logs lines. */
	be_exec_ok(
		c,
		be_sql("CREATE INDEX bill_by_issued ON bill(issued_at); "
		       "CREATE VIEW bill_total AS SELECT b.shop, b.bill_no, "
		       "sum(l.qty * l.price_minor) AS total FROM bill b JOIN "
		       "bill_line l ON l.bill_id = b.id GROUP BY b.shop, "
		       "b.bill_no; "
		       "CREATE TABLE line_log(bill_id INTEGER); "
		       "CREATE TRIGGER bill_line_log AFTER INSERT ON bill_line "
		       "BEGIN INSERT INTO line_log VALUES (NEW.bill_id); END",
		       "CREATE INDEX bill_by_issued ON bill(issued_at); "
		       "CREATE VIEW bill_total AS SELECT b.shop, b.bill_no, "
		       "sum(l.qty * l.price_minor) AS total FROM bill b JOIN "
		       "bill_line l ON l.bill_id = b.id GROUP BY b.shop, "
		       "b.bill_no; "
		       "CREATE TABLE line_log(bill_id BIGINT); "
		       "CREATE FUNCTION log_line() RETURNS trigger LANGUAGE "
		       "plpgsql AS $$ BEGIN INSERT INTO line_log VALUES "
		       "(NEW.bill_id); RETURN NEW; END $$; "
		       "CREATE TRIGGER bill_line_log AFTER INSERT ON bill_line "
		       "FOR EACH ROW EXECUTE FUNCTION log_line()"));
	/* The host's connection enforces foreign keys. */
	if (!be_pg())
		be_exec_ok(c, "PRAGMA foreign_keys = ON");
}

/* All of bill and bill_line as one text, to compare before and after. */
static void tables_text(struct be_conn *c, char *buf, size_t n)
{
	static const char *const q[] = {
		"SELECT id, bill_no, shop, currency, issued_at, total_minor, "
		"origin, dest, seq, imported_at FROM bill ORDER BY id",
		"SELECT bill_id, line_no, item, qty, price_minor FROM "
		"bill_line ORDER BY bill_id, line_no"};
	struct be_rows r;
	size_t i;
	int row, col;

	buf[0] = '\0';
	for (i = 0; i < BE_N(q); i++) {
		be_query_rows(c, q[i], &r);
		for (row = 0; row < r.n; row++) {
			for (col = 0; col < r.ncol; col++) {
				const char *v = be_cell(&r, row, col);

				snprintf(buf + strlen(buf), n - strlen(buf),
					 "%s%s", col ? "|" : "",
					 v ? v : "NULL");
			}
			snprintf(buf + strlen(buf), n - strlen(buf), "\n");
		}
		be_rows_free(&r);
	}
}

#define OLD_ROWS                                                               \
	"3|B-0001|R1|EUR|2026-11-22T10:00:00Z|700|R1|S1|1|1000\n"              \
	"8|B-0002|R2|NULL|NULL|99|R2|S1|1|2000\n"                              \
	"9|B-0003|X9|NULL|NULL|5|R1|S1|2|3000\n"                               \
	"3|1|SKU-1|2|350\n8|1|A|1|99\n9|1|B|1|2\n9|2|C|1|3\n"

/* The database has the new shape, the rows of old_tables and what the
 * operator added, and nothing left of the migration. */
static void check_migrated(struct be_conn *c)
{
	char keys[200], rows[2048];

	assert_string_equal(unique_keys(c, keys, sizeof keys), "bill_no,shop");
	tables_text(c, rows, sizeof rows);
	assert_string_equal(rows, OLD_ROWS);
	/* bill_line still points at bill, and every line has its bill. */
	assert_int_equal(
		be_query_int(c,
			     be_sql("SELECT count(*) FROM "
				    "pragma_foreign_key_list('bill_line') "
				    "WHERE \"table\" = 'bill' AND \"from\" = "
				    "'bill_id' AND \"to\" = 'id'",
				    "SELECT count(*) FROM pg_constraint WHERE "
				    "conrelid = 'bill_line'::regclass AND "
				    "contype = 'f' AND confrelid = "
				    "'bill'::regclass")),
		1);
	assert_int_equal(be_query_int(c, "SELECT count(*) FROM bill_line l "
					 "WHERE NOT EXISTS (SELECT 1 FROM "
					 "bill b WHERE b.id = l.bill_id)"),
			 0);
	if (be_pg()) {
		assert_int_equal(
			be_query_int(c, "SELECT count(*) FROM pg_constraint "
					"WHERE conrelid = 'bill'::regclass "
					"AND contype = 'u' AND conname = "
					"'bill_shop_bill_no_key'"),
			1);
	} else {
		assert_int_equal(be_query_int(c, "SELECT count(*) FROM "
						 "pragma_foreign_key_check"),
				 0);
		assert_int_equal(be_query_int(c, "SELECT count(*) FROM "
						 "sqlite_schema WHERE name "
						 "LIKE 'semq%'"),
				 0);
	}
	/* The operator's index, view and trigger are there; the trigger did
	 * not fire for the lines the migration copied. */
	assert_int_equal(
		be_query_int(c, be_sql("SELECT count(*) FROM "
				       "sqlite_schema WHERE name IN "
				       "('bill_by_issued', "
				       "'bill_line_log')",
				       "SELECT (to_regclass("
				       "'bill_by_issued') IS NOT "
				       "NULL)::int + (SELECT count(*) "
				       "FROM pg_trigger WHERE tgname = "
				       "'bill_line_log')")),
		2);
	assert_int_equal(be_query_int(c, "SELECT count(*) FROM bill_total"), 3);
	assert_int_equal(be_query_int(c, "SELECT count(*) FROM line_log"), 0);
}

/*
 * init on a database of the first shape moves the unique key to
 * (shop, bill_no) and keeps every row, id, line and the operator's index,
 * view and trigger; a second init changes nothing; the plugin then imports
 * another shop's B-0001 and still refuses R1's B-0001 from another message.
 */
static void test_migrate_old_shape(void **state)
{
	struct be_fx *f = *state;
	struct be_conn *c = &f->c;
	const char *r2 = "{\"bill_no\":\"B-0001\",\"shop\":\"R2\",\"lines\":"
			 "[{\"item\":\"Z\",\"qty\":1,\"price\":\"1\"}]}";
	const char *r1 = "{\"bill_no\":\"B-0001\",\"shop\":\"R1\",\"lines\":"
			 "[{\"item\":\"Z\",\"qty\":1,\"price\":\"1\"}]}";
	char keys[200], schema[8192], again[8192];
	const char *schema_sql =
		be_sql("SELECT group_concat(type || ' ' || name || ': ' || "
		       "coalesce(sql, ''), '\n') FROM (SELECT * FROM "
		       "sqlite_schema ORDER BY name)",
		       "SELECT string_agg(conname || ' ' || "
		       "pg_get_constraintdef(oid), E'\\n' ORDER BY conname) "
		       "FROM pg_constraint WHERE conrelid IN "
		       "('bill'::regclass, 'bill_line'::regclass)");
	struct be_rows r;
	void *h2 = NULL;

	old_tables(c, "");
	assert_string_equal(unique_keys(c, keys, sizeof keys), "bill_no");
	assert_int_equal(be_init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	assert_string_equal(f->err, "");
	assert_non_null(h2);
	f->fini(f->h);
	f->h = h2;
	check_migrated(c);
	assert_int_equal(c->notices, 0);

	/* Once is enough: init again finds the new shape and leaves it. */
	be_query_rows(c, schema_sql, &r);
	snprintf(schema, sizeof schema, "%s", be_cell(&r, 0, 0));
	be_rows_free(&r);
	h2 = NULL;
	assert_int_equal(be_init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);
	check_migrated(c);
	be_query_rows(c, schema_sql, &r);
	snprintf(again, sizeof again, "%s", be_cell(&r, 0, 0));
	be_rows_free(&r);
	assert_string_equal(again, schema);
	assert_int_equal(c->notices, 0);

	/* Bill numbers are per shop now; ids go on after the highest. */
	assert_int_equal(call_on(f, c, "R2", "S1", 2, 2800, r2, strlen(r2)),
			 SEMQ_PLUGIN_OK);
	assert_int_equal(be_query_int(c, "SELECT id FROM bill WHERE shop = "
					 "'R2' AND bill_no = 'B-0001'"),
			 10);
	assert_int_equal(call_on(f, c, "R1", "S1", 5, 2800, r1, strlen(r1)),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "bill: bill_no 'B-0001' was already "
				    "imported from R1/S1/1");
	assert_int_equal(n_bills(c), 4);
	assert_int_equal(n_lines(c), 5);
	/* The trigger the migration made again logs the new line. */
	assert_int_equal(be_query_int(c, "SELECT count(*) FROM line_log WHERE "
					 "bill_id = 10"),
			 1);
}

/* The migration runs inside the host's transaction when one is open (a
 * SAVEPOINT of its own on SQLite, the DO block on PostgreSQL): rolled back
 * with it, nothing of it stays; the next init does it again. */
static void test_migrate_in_host_transaction(void **state)
{
	struct be_fx *f = *state;
	struct be_conn *c = &f->c;
	char keys[200], rows[2048];
	void *h2 = NULL;

	old_tables(c, "");
	be_exec_ok(c, "BEGIN");
	assert_int_equal(be_init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);
	assert_string_equal(unique_keys(c, keys, sizeof keys), "bill_no,shop");
	be_exec_ok(c, "ROLLBACK");
	assert_string_equal(unique_keys(c, keys, sizeof keys), "bill_no");
	tables_text(c, rows, sizeof rows);
	assert_string_equal(rows, OLD_ROWS);

	h2 = NULL;
	assert_int_equal(be_init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);
	check_migrated(c);
}

/* A column the plugin does not know: SQLite would lose it in the rebuild, so
 * init refuses and changes nothing; PostgreSQL keeps it (ALTER TABLE). */
static void test_migrate_unknown_column(void **state)
{
	struct be_fx *f = *state;
	struct be_conn *c = &f->c;
	char keys[200], rows[2048];
	void *h2 = NULL;

	old_tables(c, ", note TEXT");
	be_exec_ok(c, "UPDATE bill SET note = 'checked' WHERE id = 8");
	if (be_pg()) {
		assert_int_equal(be_init_on(f, c, NULL, 0, &h2),
				 SEMQ_PLUGIN_OK);
		f->fini(h2);
		check_migrated(c);
		assert_int_equal(be_query_int(c, "SELECT id FROM bill WHERE "
						 "note = 'checked'"),
				 8);
		return;
	}
	assert_int_equal(be_init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_PERMANENT);
	assert_null(h2);
	assert_string_equal(f->err,
			    "bill: cannot migrate table bill to UNIQUE (shop, "
			    "bill_no): it has a column 'note' that the plugin "
			    "does not know; move it elsewhere first");
	assert_string_equal(unique_keys(c, keys, sizeof keys), "bill_no");
	tables_text(c, rows, sizeof rows);
	assert_string_equal(rows, OLD_ROWS);
	assert_int_equal(be_query_int(c, "SELECT count(*) FROM sqlite_schema "
					 "WHERE name LIKE 'semq%'"),
			 0);
	/* Not left in a transaction either. */
	assert_int_equal(sqlite3_get_autocommit(c->lite), 1);
}

/* ---- SQLite only (skipped on PostgreSQL) --------------------------------- */

/* The second instance of test_lite_migrate_at_once, on its own thread. */
struct lite_second {
	struct be_fx *f;
	struct be_conn c;
	void *h;
	int rc;
	char err[BE_ERRSZ];
	int busy; /* set (atomically) once SQLite made it wait */
};

/* Its busy handler: says it waits, then waits (up to 30 s). */
static int lite_second_busy(void *arg, int n)
{
	struct lite_second *s = arg;

	__atomic_store_n(&s->busy, 1, __ATOMIC_RELEASE);
	usleep(1000);
	return n < 30000;
}

static void *lite_second_init(void *arg)
{
	struct lite_second *s = arg;
	struct semq_plugin_tx tx = {.db_kind = SEMQ_DB_SQLITE, .db = s->c.lite};
	struct semq_plugin_init_args a;

	memset(&a, 0, sizeof a);
	a.abi_version = SEMQ_PLUGIN_ABI_VERSION;
	a.name = "bill";
	a.node_id = "S1";
	a.tx = &tx;
	s->rc = s->f->init(&a, &s->h, s->err, sizeof s->err);
	return NULL;
}

/*
 * Two instances on one SQLite file (WAL, as the node runs it) start at once
 * on a database of the first shape: A migrates in a transaction it has not
 * committed; B saw the old shape, and its migration waits for the write lock
 * in its busy handler. Once A commits, B finds the new shape and does
 * nothing: OK, the rows once.
 */
static void test_lite_migrate_at_once(void **state)
{
	struct be_fx *f = *state;
	struct lite_second s;
	pthread_t thread;
	void *h2 = NULL;
	int i;

	if (be_pg()) {
		skip(); /* test_pg_migrate_at_once is its twin */
		return;
	}
	memset(&s, 0, sizeof s);
	s.f = f;
	be_exec_ok(&f->c, "PRAGMA journal_mode = WAL");
	old_tables(&f->c, "");
	assert_int_equal(be_open_again(f, &s.c), 0);
	be_exec_ok(&s.c, "PRAGMA foreign_keys = ON");
	sqlite3_busy_handler(s.c.lite, lite_second_busy, &s);

	be_exec_ok(&f->c, "BEGIN");
	assert_int_equal(be_init_on(f, &f->c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);
	assert_int_equal(pthread_create(&thread, NULL, lite_second_init, &s),
			 0);
	for (i = 0; i < 30000 && !__atomic_load_n(&s.busy, __ATOMIC_ACQUIRE);
	     i++)
		usleep(1000);
	be_exec_ok(&f->c, "COMMIT");
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_true(s.busy);
	if (s.rc != SEMQ_PLUGIN_OK)
		fprintf(stderr, "B gave %d '%s'\n", s.rc, s.err);
	assert_int_equal(s.rc, SEMQ_PLUGIN_OK);
	f->fini(s.h);
	assert_int_equal(be_conn_close(&s.c), 0);
	check_migrated(&f->c);
}

/* ---- PostgreSQL only ----------------------------------------------------- */

/*
 * The server ends the session (a restart, a failover): the call is RETRY with
 * a one-line reason, and so is the next one on the dead connection. After
 * PQreset (what the host's reconnect does: same PGconn *, new session) the
 * plugin prepares its statements again and imports.
 */
static void test_pg_session_lost_then_reset(void **state)
{
	struct be_fx *f = *state;
	const char *b2 =
		"{\"bill_no\":\"B-2\",\"shop\":\"R1\",\"lines\":" L1 "}";
	int pid;

	assert_int_equal(call(f, 1, HEAD L1 "}"), SEMQ_PLUGIN_OK);
	pid = be_pg_end_session(f);

	assert_int_equal(
		call_raw(f, &f->c, "R1", "S1", 2, 2800, b2, strlen(b2)),
		SEMQ_PLUGIN_RETRY);
	be_check_reason(f->err, "bill: cannot look up bill_no: ");
	assert_int_equal(PQstatus(f->c.pg), CONNECTION_BAD);
	assert_int_equal(
		call_raw(f, &f->c, "R1", "S1", 2, 2800, b2, strlen(b2)),
		SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "bill: cannot prepare the bill lookup: "
				    "no connection to the server");

	be_pg_reset(f, pid);
	assert_int_equal(call(f, 2, b2), SEMQ_PLUGIN_OK);
	assert_int_equal(n_bills(&f->c), 2);
	assert_int_equal(n_lines(&f->c), 2);
}

/* What instance B imports in race(): message origin/S1/seq with json. */
struct racer {
	const char *origin;
	uint64_t seq;
	const char *json;
};

/* A's bill is R1's B-1 from R1/S1/1. */
#define A_JSON HEAD L1 "}"
static const struct racer same_message = {"R1", 1, A_JSON};
static const struct racer other_message = {
	"R1", 2,
	"{\"bill_no\":\"B-1\",\"shop\":\"R1\",\"lines\":"
	"[{\"item\":\"Z\",\"qty\":9,\"price\":\"9\"}]}"};
static const struct racer other_shop = {
	"R2", 1,
	"{\"bill_no\":\"B-1\",\"shop\":\"R2\",\"lines\":"
	"[{\"item\":\"Z\",\"qty\":9,\"price\":\"9\"}]}"};

/* Instance B's call (a be_race_fn): arg is the struct racer. */
static int race_call(struct be_fx *f, const void *arg)
{
	const struct racer *x = arg;
	struct semq_plugin_tx tx = {.db_kind = SEMQ_DB_PG, .db = f->more[0].pg};
	struct semq_plugin_msg m;

	memset(&m, 0, sizeof m);
	m.origin = x->origin;
	m.dest = "S1";
	m.seq = x->seq;
	m.type = 2800;
	m.created_at = be_now_ms();
	m.payload = (const uint8_t *)x->json;
	m.payload_len = strlen(x->json);
	return f->handle(f->h2, &m, &tx, f->race_err, sizeof f->race_err);
}

/*
 * Two instances import at the same time: instance A (the fixture's
 * connection) has written R1's bill B-1 and not committed; instance B
 * imports x. When x is R1's B-1 too (`waits`), B found no bill and must wait
 * on A's row; once A commits, B answers as it would have had the bill been
 * there: want_rc with want_err. Another shop's B-1 is not A's key: B does
 * not wait for A at all. Either way A's bill is left, and want_bills bills.
 */
static void race(struct be_fx *f, const struct racer *x, int waits, int want_rc,
		 const char *want_err, int want_bills)
{
	const char *a_json = A_JSON;
	struct be_conn *b = &f->more[0];

	assert_int_equal(be_second_open(f), 0);
	assert_int_equal(be_init_on(f, b, NULL, 0, &f->h2), SEMQ_PLUGIN_OK);

	be_exec_ok(&f->c, "BEGIN");
	be_exec_ok(&f->c, "SAVEPOINT semq_apply");
	assert_int_equal(
		call_raw(f, &f->c, "R1", "S1", 1, 2800, a_json, strlen(a_json)),
		SEMQ_PLUGIN_OK);
	be_exec_ok(b, "BEGIN");
	be_exec_ok(b, "SAVEPOINT semq_apply");
	be_race(f, race_call, x);
	if (waits) {
		/* B must get stuck on A's uncommitted bill, not pass it. */
		assert_int_equal(be_race_waits(f), 1);
		assert_false(be_race_done(f));
	} else {
		/* B returns while A's transaction is still open. */
		assert_int_equal(be_race_waits(f), 0);
		assert_true(be_race_done(f));
	}
	be_exec_ok(&f->c, "RELEASE semq_apply");
	be_exec_ok(&f->c, "COMMIT");
	be_race_join(f);

	if (f->race_rc != want_rc || strcmp(f->race_err, want_err) != 0)
		fprintf(stderr, "B gave %d '%s'\n", f->race_rc, f->race_err);
	assert_int_equal(f->race_rc, want_rc);
	assert_string_equal(f->race_err, want_err);
	/* B's transaction is usable: no unique violation aborted it. */
	assert_int_equal(PQtransactionStatus(b->pg), PQTRANS_INTRANS);
	if (f->race_rc != SEMQ_PLUGIN_OK)
		be_exec_ok(b, "ROLLBACK TO semq_apply");
	be_exec_ok(b, "RELEASE semq_apply");
	be_exec_ok(b, "COMMIT");

	assert_int_equal(n_bills(&f->c), want_bills);
	assert_int_equal(n_lines(&f->c), want_bills);
	assert_int_equal(be_query_int(&f->c,
				      "SELECT count(*) FROM bill WHERE "
				      "origin = 'R1' AND seq = 1 AND "
				      "shop = 'R1' AND total_minor = 100"),
			 1);
}

static void test_pg_same_bill_no_at_once(void **state)
{
	race(*state, &other_message, 1, SEMQ_PLUGIN_PERMANENT,
	     "bill: bill_no 'B-1' was already imported from R1/S1/1", 1);
}

static void test_pg_same_message_at_once(void **state)
{
	race(*state, &same_message, 1, SEMQ_PLUGIN_OK, "", 1);
}

static void test_pg_other_shop_at_once(void **state)
{
	race(*state, &other_shop, 0, SEMQ_PLUGIN_OK, "", 2);
}

/*
 * Two instances start at once on a database of the first shape: A migrates
 * in a transaction it has not committed, holding the advisory lock; B's init
 * waits for it, then finds the new shape and leaves it.
 */
static void test_pg_migrate_at_once(void **state)
{
	struct be_fx *f = *state;
	void *h2 = NULL;

	old_tables(&f->c, "");
	assert_int_equal(be_second_open(f), 0);
	be_exec_ok(&f->c, "BEGIN");
	assert_int_equal(be_init_on(f, &f->c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);
	be_race(f, be_race_init, NULL);
	assert_int_equal(be_race_waits(f), 1);
	assert_false(be_race_done(f));
	be_exec_ok(&f->c, "COMMIT");
	be_race_join(f);
	if (f->race_rc != SEMQ_PLUGIN_OK)
		fprintf(stderr, "B gave %d '%s'\n", f->race_rc, f->race_err);
	assert_int_equal(f->race_rc, SEMQ_PLUGIN_OK);
	assert_int_equal(f->more[0].notices, 0);
	check_migrated(&f->c);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, be_fx_teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(test_abi_version),
		T(test_init_creates_tables),
		T(test_unknown_option_refused),
		T(test_bad_max_lines_refused),
		T(test_max_lines_option),
		T(test_bad_call_is_retry),
		T(test_unknown_db_kind_refused),
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
		T(test_shop_not_origin_refused),
		T(test_shop_checked_before_lookup),
		T(test_same_bill_no_two_shops),
		T(test_bill_no_from_another_message),
		T(test_same_message_again_is_ok),
		T(test_migrate_old_shape),
		T(test_migrate_in_host_transaction),
		T(test_migrate_unknown_column),
		T(test_lite_migrate_at_once),
		T(test_db_error_partial_rolled_back),
		T(test_busy_is_retry),
		T(test_missing_table_is_retry),
		T(test_other_connection),
		T(test_fini_finalises),
	};
	const struct CMUnitTest pg_only[] = {
		T(test_pg_session_lost_then_reset),
		T(test_pg_same_bill_no_at_once),
		T(test_pg_same_message_at_once),
		T(test_pg_other_shop_at_once),
		T(test_pg_migrate_at_once),
	};

	return be_conn_main(argc, argv, "bill", tests, BE_N(tests), pg_only,
			    BE_N(pg_only));
}
