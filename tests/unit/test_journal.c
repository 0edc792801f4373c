/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the journal plugin (plugins/journal/journal.c) on both node
 * databases, loading the built journal.so with dlopen as the host does:
 *
 *   test_journal        against a real SQLite file in a fresh directory
 *                       under $TMPDIR;
 *   test_journal --pg   against PostgreSQL: SEMQ_TEST_PG_URL names a server
 *                       database; the run creates a database of its own
 *                       there (dropped at the end) and gives every test a
 *                       fresh schema in it. Without SEMQ_TEST_PG_URL it says
 *                       so and exits 77 (ctest: skipped).
 *
 * Calls run as the store runs them: in a transaction, each inside SAVEPOINT
 * semq_apply, rolled back to it when the plugin does not return OK.
 * tests/unit/test_plughost.c checks the journal through the plugin host on
 * SQLite; this file checks the plugin itself, the same way on both back ends,
 * plus what only a server has (a session that is lost and reset, two
 * instances creating the table at once). The plumbing of both back ends,
 * the fixture and the checks every plugin passes alike are in
 * tests/unit/backend.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include <semq/plugin.h>

#include "backend.h"

static int64_t n_rows(struct be_conn *c)
{
	return be_query_int(c, "SELECT count(*) FROM journal");
}

/* journal.so loaded and inited on a fresh database (struct be_fx). */
static int setup(void **state)
{
	return be_fx_setup(state, "journal", JOURNAL_SO);
}

/* Calls handle on c without a transaction or savepoint around it. */
static int call_raw(struct be_fx *f, struct be_conn *c, void *h, uint64_t seq,
		    uint32_t type, const char *key, size_t payload_len)
{
	static const uint8_t payload[64];
	struct semq_plugin_tx tx = {.db_kind = c->kind,
				    .db = be_conn_handle(c)};
	struct semq_plugin_msg m;

	assert_true(payload_len <= sizeof payload);
	memset(&m, 0, sizeof m);
	m.origin = "R1";
	m.dest = "S1";
	m.seq = seq;
	m.type = type;
	m.key = key;
	m.created_at = be_now_ms();
	m.payload = payload;
	m.payload_len = payload_len;
	memset(f->err, 0, sizeof f->err);
	return f->handle(h, &m, &tx, f->err, sizeof f->err);
}

/* Calls handle as the store does, inside SAVEPOINT semq_apply of an open
 * transaction, rolled back to it when the plugin fails. */
static int call_sp(struct be_fx *f, struct be_conn *c, void *h, uint64_t seq,
		   const char *key)
{
	int rc;

	be_exec_ok(c, "SAVEPOINT semq_apply");
	rc = call_raw(f, c, h, seq, 2800, key, 5);
	if (rc != SEMQ_PLUGIN_OK)
		be_exec_ok(c, "ROLLBACK TO semq_apply");
	be_exec_ok(c, "RELEASE semq_apply");
	return rc;
}

/* One message R1/S1/seq with key, in a transaction of its own. */
static int call(struct be_fx *f, uint64_t seq, const char *key)
{
	int rc;

	be_exec_ok(&f->c, "BEGIN");
	rc = call_sp(f, &f->c, f->h, seq, key);
	be_exec_ok(&f->c, "COMMIT");
	return rc;
}

static void test_abi_version(void **state)
{
	struct be_fx *f = *state;

	assert_int_equal(f->abi(), SEMQ_PLUGIN_ABI_VERSION);
}

static void test_init_creates_table(void **state)
{
	struct be_fx *f = *state;
	struct be_conn *c = &f->c;
	void *h2 = NULL;

	assert_int_equal(be_n_columns(c, "journal",
				      "'id', 'origin', 'dest', 'seq', 'type', "
				      "'msg_key', 'payload_len', 'handled_at'"),
			 8);
	assert_int_equal(be_n_columns(c, "journal", NULL), 8);
	/* No unique constraint: a message applied twice shows as two rows. */
	assert_int_equal(be_n_indexes(c, "journal", 0), 0);
	if (be_pg()) {
		assert_int_equal(
			be_pg_n_typed(c, "bigint",
				      "table_name = 'journal' AND column_name "
				      "IN ('id', 'seq', 'type', 'payload_len', "
				      "'handled_at')"),
			5);
		assert_int_equal(
			be_pg_n_typed(c, "text", "table_name = 'journal'"), 3);
	}
	/* A restart: init again on the same database finds the table. */
	assert_int_equal(be_init_on(f, c, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	assert_non_null(h2);
	f->fini(h2);
	/* No NOTICE from either init (libpq prints them on stderr). */
	assert_int_equal(c->notices, 0);
}

/* Every call appends a row, the same message twice gives two. */
static void test_rows(void **state)
{
	struct be_fx *f = *state;
	int64_t t0 = be_now_ms(), t1;
	struct be_rows r;

	assert_int_equal(call(f, 7, "BILL-7"), SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 7, "BILL-7"), SEMQ_PLUGIN_OK);
	be_exec_ok(&f->c, "BEGIN");
	assert_int_equal(call_raw(f, &f->c, f->h, 8, 17, NULL, 0),
			 SEMQ_PLUGIN_OK);
	be_exec_ok(&f->c, "COMMIT");
	assert_int_equal(call(f, UINT64_C(9007199254740993), "big"),
			 SEMQ_PLUGIN_OK);
	t1 = be_now_ms();

	assert_int_equal(n_rows(&f->c), 4);
	be_query_rows(&f->c,
		      "SELECT origin, dest, seq, type, msg_key, payload_len, "
		      "handled_at, id FROM journal ORDER BY id",
		      &r);
	assert_int_equal(r.n, 4);
	assert_string_equal(be_cell(&r, 0, 0), "R1");
	assert_string_equal(be_cell(&r, 0, 1), "S1");
	assert_int_equal(be_cell_int(&r, 0, 2), 7);
	assert_int_equal(be_cell_int(&r, 0, 3), 2800);
	assert_string_equal(be_cell(&r, 0, 4), "BILL-7");
	assert_int_equal(be_cell_int(&r, 0, 5), 5);
	assert_in_range(be_cell_int(&r, 0, 6), t0, t1);
	assert_true(be_cell_int(&r, 1, 7) > be_cell_int(&r, 0, 7));
	assert_int_equal(be_cell_int(&r, 1, 2), 7);
	assert_int_equal(be_cell_int(&r, 2, 2), 8);
	assert_int_equal(be_cell_int(&r, 2, 3), 17);
	assert_null(be_cell(&r, 2, 4));
	assert_int_equal(be_cell_int(&r, 2, 5), 0);
	assert_int_equal(be_cell_int(&r, 3, 2), INT64_C(9007199254740993));
	assert_in_range(be_cell_int(&r, 3, 6), t0, t1);
	be_rows_free(&r);
}

/* Runs n calls through a new handle with opts in one transaction; the
 * verdicts go to v. Returns the RETRYs; exactly the OKs left rows. */
static int run(struct be_fx *f, const struct semq_plugin_option *opts,
	       size_t n_opts, int n, char *v, char *last, size_t lastsz)
{
	void *h = NULL;
	int i, retries = 0, oks = 0;

	assert_int_equal(be_init_on(f, &f->c, opts, n_opts, &h),
			 SEMQ_PLUGIN_OK);
	be_exec_ok(&f->c, "DELETE FROM journal");
	be_exec_ok(&f->c, "BEGIN");
	for (i = 0; i < n; i++) {
		int rc = call_sp(f, &f->c, h, (uint64_t)i + 1, "K");

		assert_true(rc == SEMQ_PLUGIN_OK || rc == SEMQ_PLUGIN_RETRY);
		v[i] = (char)rc;
		if (rc == SEMQ_PLUGIN_RETRY) {
			retries++;
			snprintf(last, lastsz, "%s", f->err);
		} else {
			oks++;
		}
	}
	be_exec_ok(&f->c, "COMMIT");
	assert_int_equal(n_rows(&f->c), oks);
	f->fini(h);
	return retries;
}

static void test_fail_rate(void **state)
{
	enum { N = 300 };
	struct be_fx *f = *state;
	struct semq_plugin_option s42[] = {{"fail_rate", "0.5", "n:1"},
					   {"fail_seed", "42", "n:2"}};
	struct semq_plugin_option s43[] = {{"fail_rate", "0.5", "n:1"},
					   {"fail_seed", "43", "n:2"}};
	struct semq_plugin_option one[] = {{"fail_rate", "1", "n:1"}};
	struct semq_plugin_option zero[] = {{"fail_rate", "0", "n:1"}};
	static char a[N], b[N], c[N];
	char last[BE_ERRSZ] = "";
	int r;

	r = run(f, s42, 2, N, a, last, sizeof last);
	assert_in_range(r, N / 2 - 40, N / 2 + 40);
	assert_string_equal(last, "journal: injected failure (fail_rate 0.5)");
	/* The same seed gives the same verdicts; another seed others. */
	assert_int_equal(run(f, s42, 2, N, b, last, sizeof last), r);
	assert_memory_equal(a, b, N);
	run(f, s43, 2, N, c, last, sizeof last);
	assert_memory_not_equal(a, c, N);
	assert_int_equal(run(f, one, 1, N, a, last, sizeof last), N);
	assert_string_equal(last, "journal: injected failure (fail_rate 1)");
	assert_int_equal(run(f, zero, 1, N, a, last, sizeof last), 0);
}

static void test_permanent_keys(void **state)
{
	struct be_fx *f = *state;
	struct semq_plugin_option keys[] = {
		{"permanent_keys", "A, B ,C", "node.ini:7"}};
	struct semq_plugin_option always[] = {
		{"fail_rate", "1", "node.ini:8"},
		{"permanent_keys", "X", "node.ini:9"}};
	void *h = NULL;

	assert_int_equal(be_init_on(f, &f->c, keys, 1, &h), SEMQ_PLUGIN_OK);
	f->fini(f->h);
	f->h = h;
	assert_int_equal(call(f, 1, "B"), SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err,
			    "journal: key B is listed in permanent_keys");
	assert_int_equal(call(f, 2, "C"), SEMQ_PLUGIN_PERMANENT);
	assert_int_equal(call(f, 3, "D"), SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 4, " B"), SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 5, NULL), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&f->c), 3);
	assert_int_equal(be_query_int(&f->c, "SELECT count(*) FROM journal "
					     "WHERE msg_key IN ('B', 'C')"),
			 0);

	/* A permanent key is PERMANENT even when every call would fail. */
	h = NULL;
	assert_int_equal(be_init_on(f, &f->c, always, 2, &h), SEMQ_PLUGIN_OK);
	f->fini(f->h);
	f->h = h;
	assert_int_equal(call(f, 6, "X"), SEMQ_PLUGIN_PERMANENT);
	assert_int_equal(call(f, 7, "Y"), SEMQ_PLUGIN_RETRY);
	assert_int_equal(n_rows(&f->c), 3);
}

static void test_bad_options(void **state)
{
	static const struct {
		const char *key, *value, *want;
	} bad[] = {
		{"fail_rat", "0.5",
		 "journal: n:3: unknown option 'fail_rat' (fail_rate, "
		 "fail_seed, permanent_keys, crash_keys, stall_keys, "
		 "stall_ms, slow_keys, slow_ms)"},
		{"fail_rate", "1.5",
		 "journal: n:3: fail_rate '1.5' is not between 0 and 1"},
		{"fail_rate", "half",
		 "journal: n:3: fail_rate 'half' is not a number between 0 "
		 "and 1"},
		{"fail_seed", "-1",
		 "journal: n:3: fail_seed '-1' is not an unsigned 64-bit "
		 "integer"},
		{"permanent_keys", "A,,B",
		 "journal: n:3: permanent_keys 'A,,B' has an empty key"},
	};
	struct be_fx *f = *state;
	struct semq_plugin_option twice[] = {{"fail_seed", "1", "n:2"},
					     {"fail_seed", "2", "n:3"}};
	size_t i;

	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct semq_plugin_option o = {bad[i].key, bad[i].value, "n:3"};

		be_check_init_refused(f, &o, 1, bad[i].want);
	}
	be_check_init_refused(f, twice, 2,
			      "journal: n:3: fail_seed given twice");
}

/* A call without what it needs is RETRY (a host fault, not the message's);
 * a database kind the plugin does not know is refused at init and
 * PERMANENT in handle; the connection handed over is not touched. */
static void test_bad_call_and_unknown_kind(void **state)
{
	struct be_fx *f = *state;
	struct semq_plugin_tx none = {0};
	struct semq_plugin_tx odd = {.db_kind = 7, .db = f->tx.db};
	struct semq_plugin_msg m;
	void *h = NULL;

	memset(&m, 0, sizeof m);
	m.origin = "R1";
	m.dest = "S1";
	m.seq = 1;
	m.type = 2800;
	assert_int_equal(f->handle(NULL, &m, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err,
			    "journal: called without handle or message");
	assert_int_equal(f->handle(f->h, NULL, &f->tx, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_int_equal(f->handle(f->h, &m, &none, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "journal: called without a transaction");
	assert_int_equal(f->handle(f->h, &m, NULL, f->err, sizeof f->err),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "journal: called without a transaction");
	assert_int_equal(f->handle(f->h, &m, &odd, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "journal: unknown database kind 7 (1 "
				    "SQLite, 2 PostgreSQL)");
	assert_int_equal(n_rows(&f->c), 0);

	be_check_init_needs_db(f);
	assert_int_equal(f->init(NULL, &h, f->err, sizeof f->err),
			 SEMQ_PLUGIN_PERMANENT);
	assert_string_equal(f->err, "journal: init called without arguments");
}

/* Database errors are RETRY with the database's reason, and the host's
 * rollback leaves nothing behind. */
static void test_db_errors_are_retry(void **state)
{
	struct be_fx *f = *state;

	be_exec_ok(&f->c,
		   be_sql("CREATE TRIGGER nope BEFORE INSERT ON journal "
			  "WHEN NEW.msg_key = 'NOPE' BEGIN "
			  "SELECT RAISE(ABORT, 'no NOPE here'); END",
			  "CREATE FUNCTION nope() RETURNS trigger LANGUAGE "
			  "plpgsql AS "
			  "$$ BEGIN IF NEW.msg_key = 'NOPE' THEN "
			  "RAISE EXCEPTION 'no NOPE here'; END IF; RETURN NEW; "
			  "END $$;"
			  " CREATE TRIGGER nope BEFORE INSERT ON journal "
			  "FOR EACH ROW EXECUTE FUNCTION nope()"));
	assert_int_equal(call(f, 1, "OK"), SEMQ_PLUGIN_OK);
	assert_int_equal(call(f, 2, "NOPE"), SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "journal: insert failed: no NOPE here");
	assert_int_equal(call(f, 3, "OK"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&f->c), 2);

	/* A table that is gone: the prepare fails (a fresh handle). */
	be_exec_ok(&f->c, "DROP TABLE journal");
	f->fini(f->h);
	f->h = NULL;
	assert_int_equal(be_init_on(f, &f->c, NULL, 0, &f->h), SEMQ_PLUGIN_OK);
	be_exec_ok(&f->c, "DROP TABLE journal");
	assert_int_equal(call(f, 4, "OK"), SEMQ_PLUGIN_RETRY);
	assert_string_equal(
		f->err, be_sql("journal: cannot prepare the insert: no such "
			       "table: journal",
			       "journal: cannot prepare the insert: relation "
			       "\"journal\" does not exist"));
}

/* The statement follows the connection it is handed, there and back. */
static void test_other_connection(void **state)
{
	struct be_fx *f = *state;
	struct be_conn other;
	void *h2 = NULL;

	assert_int_equal(be_open_other(f, &other), 0);
	assert_int_equal(be_init_on(f, &other, NULL, 0, &h2), SEMQ_PLUGIN_OK);
	f->fini(h2);
	be_exec_ok(&other, "BEGIN");
	assert_int_equal(call_sp(f, &other, f->h, 1, "A"), SEMQ_PLUGIN_OK);
	be_exec_ok(&other, "COMMIT");
	assert_int_equal(call(f, 2, "B"), SEMQ_PLUGIN_OK);
	be_exec_ok(&other, "BEGIN");
	assert_int_equal(call_sp(f, &other, f->h, 3, "C"), SEMQ_PLUGIN_OK);
	be_exec_ok(&other, "COMMIT");
	assert_int_equal(call(f, 4, "D"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&other), 2);
	assert_int_equal(n_rows(&f->c), 2);
	/* SQLite: BUSY if a statement were still open on it. */
	assert_int_equal(be_conn_close(&other), 0);
}

static void test_fini(void **state)
{
	struct be_fx *f = *state;

	assert_int_equal(call(f, 1, "A"), SEMQ_PLUGIN_OK);
	be_check_fini(f);
}

/* ---- PostgreSQL only ----------------------------------------------------- */

/* The server ends the session: RETRY with a one-line reason, again on the
 * dead connection, and after PQreset (the host's reconnect: same PGconn *,
 * new session) the statement is prepared again. */
static void test_pg_session_lost_then_reset(void **state)
{
	struct be_fx *f = *state;
	int pid;

	assert_int_equal(call(f, 1, "A"), SEMQ_PLUGIN_OK);
	pid = be_pg_end_session(f);

	assert_int_equal(call_raw(f, &f->c, f->h, 2, 2800, "B", 1),
			 SEMQ_PLUGIN_RETRY);
	be_check_reason(f->err, "journal: insert failed: ");
	assert_int_equal(PQstatus(f->c.pg), CONNECTION_BAD);
	assert_int_equal(call_raw(f, &f->c, f->h, 2, 2800, "B", 1),
			 SEMQ_PLUGIN_RETRY);
	assert_string_equal(f->err, "journal: cannot prepare the insert: no "
				    "connection to the server");

	be_pg_reset(f, pid);
	assert_int_equal(call(f, 2, "B"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&f->c), 2);
}

/*
 * Two instances start at once on a database without the table: the second
 * init waits for the first one's creation to commit (the advisory lock),
 * then finds the table instead of failing on a duplicate CREATE.
 */
static void test_pg_init_waits_for_a_concurrent_create(void **state)
{
	struct be_fx *f = *state;
	struct be_conn *b = &f->more[0];

	be_exec_ok(&f->c, "DROP TABLE journal");
	assert_int_equal(be_second_open(f), 0);
	/* Instance A is creating the table, as init does, not committed. */
	be_exec_ok(&f->c, "BEGIN");
	be_exec_ok(&f->c, "SELECT pg_advisory_xact_lock(1936026993, 1)");
	be_exec_ok(&f->c, "CREATE TABLE journal(id BIGINT GENERATED BY DEFAULT "
			  "AS IDENTITY PRIMARY KEY, origin TEXT, dest TEXT, "
			  "seq BIGINT, type BIGINT, msg_key TEXT, "
			  "payload_len BIGINT, handled_at BIGINT)");
	be_race(f, be_race_init, NULL);
	assert_int_equal(be_race_waits(f), 1);
	be_exec_ok(&f->c, "COMMIT");
	be_race_join(f);
	if (f->race_rc != SEMQ_PLUGIN_OK)
		fprintf(stderr, "B's init: %s\n", f->race_err);
	assert_int_equal(f->race_rc, SEMQ_PLUGIN_OK);
	assert_int_equal(b->notices, 0);

	/* Both instances write into the one table. */
	be_exec_ok(b, "BEGIN");
	assert_int_equal(call_sp(f, b, f->h2, 1, "B"), SEMQ_PLUGIN_OK);
	be_exec_ok(b, "COMMIT");
	assert_int_equal(call(f, 2, "A"), SEMQ_PLUGIN_OK);
	assert_int_equal(n_rows(&f->c), 2);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, be_fx_teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(test_abi_version),
		T(test_init_creates_table),
		T(test_rows),
		T(test_fail_rate),
		T(test_permanent_keys),
		T(test_bad_options),
		T(test_bad_call_and_unknown_kind),
		T(test_db_errors_are_retry),
		T(test_other_connection),
		T(test_fini),
	};
	const struct CMUnitTest pg_only[] = {
		T(test_pg_session_lost_then_reset),
		T(test_pg_init_waits_for_a_concurrent_create),
	};

	return be_conn_main(argc, argv, "journal", tests, BE_N(tests), pg_only,
			    BE_N(pg_only));
}
