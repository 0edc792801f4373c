/* SPDX-License-Identifier: MIT */
/*
 * bill: the plugin that imports bills (SPEC §13). A message of type 2800
 * carries one bill as a UTF-8 JSON object (plugins/bill/README.md has the
 * whole format):
 *
 *   {"bill_no": "B-2026-0001", "shop": "R1", "currency": "EUR",
 *    "issued_at": "2026-11-22T10:00:00Z",
 *    "lines": [{"item": "SKU-1", "qty": 2, "price": "3.50"}]}
 *
 * and becomes one row of `bill` and one row of `bill_line` per line, written
 * in the host's transaction. A document that is not exactly this shape, or
 * whose shop is not the node that sent it, is refused PERMANENT with one line
 * naming the culprit, so it lands dead in tb_0033 for an operator; a
 * database error is RETRY. Options (optional):
 *
 *   max_lines = 10000        the most lines a bill may have (1 to 1000000)
 *
 * DESIGN:
 *  - Money is integer minor units, never floating point: a price is counted
 *    in hundredths of the currency unit (cents), so a price has at most two
 *    decimal places, and total_minor = sum(qty * price_minor), each product
 *    and the sum checked for 64-bit overflow.
 *  - The whole document is validated before the first write, so a refused
 *    document writes nothing even before the host rolls the SAVEPOINT back;
 *    a database error part way leaves rows that the host's rollback removes.
 *  - Unknown keys are refused (a misspelt "prcie" must not import a line
 *    without its price), and so are duplicate keys (JSON_REJECT_DUPLICATES).
 *  - A shop files its own bills only: `shop` must be the message's origin
 *    (m->origin: the node the host authenticated, or the origin a trusted
 *    relay carried), byte for byte. Else PERMANENT naming both, decided
 *    after the document is validated and before anything is read or
 *    written, so that no shop can take or probe another shop's numbers.
 *  - bill_no is unique per shop: UNIQUE (shop, bill_no), so two shops may
 *    both send B-0001 and make two bills. A (shop, bill_no) already imported
 *    by another message is a business conflict (PERMANENT, naming that
 *    message); found again from the same message id it is already done (OK,
 *    no write).
 *  - It works on both node databases, SQLite (tx->db is a `sqlite3 *`) and
 *    PostgreSQL (tx->db is a `PGconn *`): the same tables and columns, the
 *    same verdicts and the same messages.
 *  - The three statements are prepared once per connection. SQLite: when the
 *    host hands over another `sqlite3 *` the old ones are finalised and new
 *    ones prepared. PostgreSQL: prepared statements live in the server
 *    session, so the cache is keyed on the `PGconn *` AND its backend pid
 *    (PQreset keeps the pointer but opens a new session), and each new
 *    session gets statements under new names (never reused in the process),
 *    so a name cannot collide with one left in a session. The plugin never
 *    touches a connection other than the one of the current call (an old one
 *    may be closed): fini frees memory only.
 *  - Several semqd instances may share one PostgreSQL database, so two
 *    messages with one (shop, bill_no) can be imported at the same time by
 *    two transactions that both found no bill. The bill INSERT is
 *    `ON CONFLICT (shop, bill_no) DO NOTHING`: the second waits for the first
 *    and, once it committed, inserts nothing; the plugin then looks the bill
 *    up again and answers as if it had been there all along (OK when the
 *    same message id imported it, else PERMANENT naming that message). No
 *    unique violation, so the host's transaction is never aborted by it.
 *  - The plugin never begins, commits or rolls back a transaction of the
 *    host's. On PostgreSQL the tables are created in init under a
 *    transaction-scoped advisory lock, so that instances starting at once do
 *    not race on CREATE TABLE or on the migration below.
 *  - Migration: databases made before bill numbers were per shop have
 *    `bill_no TEXT UNIQUE`. init reads the catalog (never tries and fails)
 *    and, only when it finds a unique key on bill_no alone, moves it to
 *    (shop, bill_no), keeping every row and id. PostgreSQL: ALTER TABLE ...
 *    DROP CONSTRAINT, ADD CONSTRAINT, in the DO block under the advisory
 *    lock. SQLite cannot drop a UNIQUE column constraint, so both tables are
 *    rebuilt in one SAVEPOINT (nested in the host's transaction if one is
 *    open, else a transaction of its own): copy both aside, drop bill_line
 *    then bill (the host runs with foreign_keys = ON, so bill cannot go
 *    while lines point at it), create them again, copy back with their ids,
 *    re-create the indexes and triggers they had. No table is renamed, so
 *    views and other tables that name bill are not touched. The first
 *    statement of the SAVEPOINT writes, so it takes the write lock before
 *    anything is read: a second instance waits in the host's busy handler,
 *    then finds the new shape and does nothing. A bill table with a column
 *    the plugin does not know is not migrated: init fails and says which,
 *    rather than lose it.
 */
#include <semq/plugin.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include "plugcommon.h"

/* The ABI entry points (include/semq/plugin.h), looked up by name. */
int semq_plugin_abi_version(void);
int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz);
int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err,
		       size_t errsz);
void semq_plugin_fini(void *handle);

#define BILL_TYPE 2800u
#define OPTIONS_TEXT "(max_lines)"
#define MAX_LINES_DEFAULT 10000L
#define MAX_LINES_LIMIT 1000000L
#define TEXT_MAX 64 /* characters (code points) of bill_no, shop, item */
#define PRICE_DECIMALS 2
#define PRICE_MAX_MINOR INT64_C(999999999999999) /* 9999999999999.99 */
#define PRICE_MAX_TEXT "9999999999999.99"
#define SHOW_MAX 40 /* bytes of a document value quoted in a message */
#define TOP_KEYS "(bill_no, shop, currency, issued_at, lines)"
#define LINE_KEYS "(item, qty, price)"
#define DB_KINDS "(1 SQLite, 2 PostgreSQL)"

/*
 * The tables on PostgreSQL: the same columns as on SQLite, in one statement
 * that runs as one transaction (or inside the host's, if one is open). The
 * advisory lock makes instances that start at once create or migrate them one
 * after the other; the checks avoid CREATE TABLE IF NOT EXISTS, whose NOTICE
 * the host's connection would print. A unique constraint on bill_no alone
 * (the first shape) is found in pg_constraint and replaced by
 * bill_shop_bill_no_key; a table that has it already is left alone.
 * PG_UNIQUE_ON, followed by a sorted text array of column names, selects the
 * names of bill's unique constraints on exactly those columns.
 */
#define PG_UNIQUE_ON                                                           \
	"SELECT k.conname FROM pg_constraint k WHERE k.conrelid = "            \
	"'bill'::regclass AND k.contype = 'u' AND (SELECT "                    \
	"array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a "   \
	"WHERE a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey)) = "
#define PG_CREATE                                                              \
	"DO $semq$ DECLARE u record; old boolean := false; BEGIN "             \
	"PERFORM pg_advisory_xact_lock(1936026993, 2); " /* 'semq', 2 */       \
	"IF to_regclass('bill') IS NULL THEN "                                 \
	"CREATE TABLE bill("                                                   \
	"id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "             \
	"bill_no TEXT NOT NULL, shop TEXT NOT NULL, "                          \
	"currency TEXT, issued_at TEXT, total_minor BIGINT NOT NULL, "         \
	"origin TEXT, dest TEXT, seq BIGINT, imported_at BIGINT NOT NULL, "    \
	"CONSTRAINT bill_shop_bill_no_key UNIQUE (shop, bill_no)); "           \
	"END IF; "                                                             \
	"FOR u IN " PG_UNIQUE_ON "ARRAY['bill_no'] LOOP "                      \
	"EXECUTE format('ALTER TABLE bill DROP CONSTRAINT %I', u.conname); "   \
	"old := true; "                                                        \
	"END LOOP; "                                                           \
	"IF old AND NOT EXISTS (" PG_UNIQUE_ON "ARRAY['bill_no', 'shop']) "    \
	"THEN ALTER TABLE bill ADD CONSTRAINT bill_shop_bill_no_key "          \
	"UNIQUE (shop, bill_no); "                                             \
	"END IF; "                                                             \
	"IF to_regclass('bill_line') IS NULL THEN "                            \
	"CREATE TABLE bill_line("                                              \
	"bill_id BIGINT NOT NULL REFERENCES bill(id), "                        \
	"line_no BIGINT NOT NULL, item TEXT NOT NULL, "                        \
	"qty BIGINT NOT NULL, price_minor BIGINT NOT NULL, "                   \
	"PRIMARY KEY(bill_id, line_no)); "                                     \
	"END IF; END $semq$"

/* The bill table on SQLite (after CREATE TABLE [IF NOT EXISTS]), its columns
 * and bill_line. */
#define LITE_BILL                                                              \
	"bill(id INTEGER PRIMARY KEY, "                                        \
	"bill_no TEXT NOT NULL, shop TEXT NOT NULL, "                          \
	"currency TEXT, issued_at TEXT, total_minor INTEGER NOT NULL, "        \
	"origin TEXT, dest TEXT, seq INTEGER, imported_at INTEGER NOT NULL, "  \
	"UNIQUE (shop, bill_no))"
#define BILL_COLS                                                              \
	"id, bill_no, shop, currency, issued_at, total_minor, origin, dest, "  \
	"seq, imported_at"
#define BILL_COLS_QUOTED                                                       \
	"'id', 'bill_no', 'shop', 'currency', 'issued_at', 'total_minor', "    \
	"'origin', 'dest', 'seq', 'imported_at'"
#define LITE_BILL_LINE                                                         \
	"bill_line(bill_id INTEGER NOT NULL REFERENCES bill(id), "             \
	"line_no INTEGER NOT NULL, item TEXT NOT NULL, "                       \
	"qty INTEGER NOT NULL, price_minor INTEGER NOT NULL, "                 \
	"PRIMARY KEY(bill_id, line_no))"
/* How many unique keys of the first shape, on bill_no alone, bill has: 0
 * or 1. Only those of a UNIQUE constraint (origin 'u'): a unique index an
 * operator made is theirs. */
#define LITE_OLD_SHAPE                                                         \
	"SELECT count(*) FROM pragma_index_list('bill') l WHERE "              \
	"l.origin = 'u' AND "                                                  \
	"(SELECT count(*) FROM pragma_index_info(l.name)) = 1 AND "            \
	"(SELECT name FROM pragma_index_info(l.name)) = 'bill_no'"

struct bill {
	long max_lines;
	sqlite3 *db;               /* the connection the statements are on
				 * (borrowed); NULL when none are prepared */
	sqlite3_stmt *find;        /* owned: the bill of a shop and bill_no */
	sqlite3_stmt *ins_bill;    /* owned */
	sqlite3_stmt *ins_line;    /* owned */
	struct plug_pg_session pg; /* where the pg_* statements are */
	char pg_find[64], pg_ins_bill[64], pg_ins_line[64]; /* their names */
};

/* One line of a validated document. */
struct line {
	const char *item; /* borrowed from the JSON tree */
	size_t item_len;
	int64_t qty;   /* > 0 */
	int64_t price; /* minor units, 0..PRICE_MAX_MINOR */
};

/* A validated document. The strings are borrowed from the JSON tree and live
 * as long as it does; `lines` is owned (doc_clear frees it). */
struct doc {
	const char *bill_no, *shop, *currency, *issued_at; /* last two: NULL
							    * when absent */
	struct line *lines;
	size_t n_lines;
	int64_t total; /* minor units */
};

/* The length of the valid UTF-8 sequence at s[0..n), or 0 if there is none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len, i;
	uint32_t cp;

	if (n == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

/*
 * Copies at most `max` bytes of s[0..n) into buf for a message, never cutting
 * a UTF-8 character and ending with "..." when something was left out; bytes
 * that are not UTF-8 become '?'. buf needs max + 4 bytes.
 */
static void clip(const char *s, size_t n, size_t max, char *buf)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, o = 0;

	while (i < n) {
		size_t len = utf8_seq(u + i, n - i);

		if (o + (len ? len : 1) > max) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (len == 0) {
			buf[o++] = '?';
			i++;
			continue;
		}
		memcpy(buf + o, s + i, len);
		o += len;
		i += len;
	}
	buf[o] = '\0';
}

/* A document value as compact JSON for a message, clipped to SHOW_MAX. */
static void show(const json_t *v, char buf[SHOW_MAX + 4])
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT |
					JSON_REAL_PRECISION(15));

	if (!s) {
		snprintf(buf, SHOW_MAX + 4, "(a value)");
		return;
	}
	clip(s, strlen(s), SHOW_MAX, buf);
	free(s);
}

static void bill_unprepare(struct bill *b)
{
	sqlite3_finalize(b->find);
	sqlite3_finalize(b->ins_bill);
	sqlite3_finalize(b->ins_line);
	b->find = b->ins_bill = b->ins_line = NULL;
	b->db = NULL;
	plug_pg_session_set(&b->pg, NULL); /* the names stay in that session,
					    * unused */
}

static void bill_free(struct bill *b)
{
	if (!b)
		return;
	bill_unprepare(b);
	free(b);
}

static int parse_max_lines(const char *where, const char *v, long *out,
			   char *err, size_t errsz)
{
	char *end;
	long x;

	errno = 0;
	x = (v[0] >= '0' && v[0] <= '9') ? strtol(v, &end, 10) : 0;
	if (!(v[0] >= '0' && v[0] <= '9') || *end || errno == ERANGE || x < 1 ||
	    x > MAX_LINES_LIMIT) {
		plug_errf(
			err, errsz,
			"bill: %s: max_lines '%s' is not a whole number from 1 "
			"to %ld",
			where, v, MAX_LINES_LIMIT);
		return -1;
	}
	*out = x;
	return 0;
}

/* ---- the tables ----------------------------------------------------------- */

#define MIGRATE_WHAT "cannot migrate table bill to UNIQUE (shop, bill_no)"

/* Runs sql (one or more statements) on db; 0, or -1 with err saying what
 * failed ("bill: <what>: <SQLite's message>"). */
static int lite_exec(sqlite3 *db, const char *sql, const char *what, char *err,
		     size_t errsz)
{
	char *msg = NULL; /* sqlite3_free */

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK)
		return 0;
	plug_errf(err, errsz, "bill: %s: %s", what,
		  msg ? msg : sqlite3_errmsg(db));
	sqlite3_free(msg);
	return -1;
}

/*
 * The first column of the first row of sql into *out (a copy, caller frees
 * with sqlite3_free), or NULL when there is no row or it is NULL. 0, or -1
 * with err. The statement is finalised before returning, so no read
 * transaction is left open.
 */
static int lite_text(sqlite3 *db, const char *sql, char **out, const char *what,
		     char *err, size_t errsz)
{
	sqlite3_stmt *st = NULL;
	int r = -1, rc;

	*out = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		plug_errf(err, errsz, "bill: %s: %s", what, sqlite3_errmsg(db));
		goto out;
	}
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		plug_errf(err, errsz, "bill: %s: %s", what, sqlite3_errmsg(db));
		goto out;
	}
	if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
		*out = sqlite3_mprintf("%s", sqlite3_column_text(st, 0));
		if (!*out) {
			plug_errf(err, errsz, "bill: %s: out of memory", what);
			goto out;
		}
	}
	r = 0;
out:
	sqlite3_finalize(st);
	return r;
}

/* Whether bill has the first shape, a UNIQUE constraint on bill_no alone:
 * *old 1 or 0. 0, or -1 with err. */
static int lite_old_shape(sqlite3 *db, int *old, char *err, size_t errsz)
{
	char *n = NULL; /* sqlite3_free */

	if (lite_text(db, LITE_OLD_SHAPE, &n, "cannot read the shape of bill",
		      err, errsz))
		return -1;
	*old = n && strcmp(n, "0") != 0;
	sqlite3_free(n);
	return 0;
}

/* A list of SQL texts (owned, each freed with sqlite3_free). */
struct sqls {
	char **v;
	size_t n;
};

static void sqls_free(struct sqls *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		sqlite3_free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

/* Appends the first column of every row of sql to l. 0, or -1 with err. */
static int sqls_load(sqlite3 *db, const char *sql, struct sqls *l, char *err,
		     size_t errsz)
{
	sqlite3_stmt *st = NULL;
	int rc, r = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		plug_errf(err, errsz, "bill: " MIGRATE_WHAT ": %s",
			  sqlite3_errmsg(db));
		return -1;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		char **v = realloc(l->v, (l->n + 1) * sizeof *v);

		if (!v)
			goto nomem;
		l->v = v;
		l->v[l->n] = sqlite3_mprintf("%s", sqlite3_column_text(st, 0));
		if (!l->v[l->n])
			goto nomem;
		l->n++;
	}
	if (rc != SQLITE_DONE) {
		plug_errf(err, errsz, "bill: " MIGRATE_WHAT ": %s",
			  sqlite3_errmsg(db));
		goto out;
	}
	r = 0;
	goto out;
nomem:
	plug_errf(err, errsz, "bill: " MIGRATE_WHAT ": out of memory");
out:
	sqlite3_finalize(st);
	return r;
}

/*
 * Rebuilds bill with UNIQUE (shop, bill_no) in place of UNIQUE (bill_no),
 * and bill_line with it (DESIGN, "Migration"), in SAVEPOINT
 * semq_bill_migrate. Nothing changes when another instance did it first.
 * 0, or -1 with err and nothing changed.
 */
static int lite_migrate(sqlite3 *db, char *err, size_t errsz)
{
	int r = -1, open = 0, done = 0, old;
	struct sqls ddl = {0};
	char *extra = NULL;    /* sqlite3_free */
	char *line_sql = NULL; /* sqlite3_free */
	size_t i;

	if (lite_exec(db, "SAVEPOINT semq_bill_migrate", MIGRATE_WHAT, err,
		      errsz))
		goto out;
	open = 1;
	/* Writes first: the write lock, then a fresh look (DESIGN). */
	if (lite_exec(db, "CREATE TABLE semq_bill_keep AS SELECT * FROM bill",
		      MIGRATE_WHAT, err, errsz))
		goto out;
	if (lite_old_shape(db, &old, err, errsz))
		goto out;
	if (!old) {
		r = 0; /* another instance migrated it meanwhile */
		goto out;
	}
	if (lite_text(db,
		      "SELECT name FROM pragma_table_info('bill') WHERE name "
		      "NOT IN (" BILL_COLS_QUOTED ") ORDER BY cid LIMIT 1",
		      &extra, MIGRATE_WHAT, err, errsz))
		goto out;
	if (extra) {
		char shown[SHOW_MAX + 4];

		clip(extra, strlen(extra), SHOW_MAX, shown);
		plug_errf(err, errsz,
			  "bill: " MIGRATE_WHAT
			  ": it has a column '%s' that the "
			  "plugin does not know; move it elsewhere first",
			  shown);
		goto out;
	}
	if (lite_text(db,
		      "SELECT sql FROM sqlite_schema WHERE type = 'table' AND "
		      "name = 'bill_line'",
		      &line_sql, MIGRATE_WHAT, err, errsz))
		goto out;
	if (!line_sql) {
		plug_errf(err, errsz,
			  "bill: " MIGRATE_WHAT ": bill_line is gone");
		goto out;
	}
	/* Their indexes (not those of constraints, whose sql is NULL) and
	 * triggers go with the tables and are made again afterwards. */
	if (sqls_load(
		    db,
		    "SELECT sql FROM sqlite_schema WHERE type IN ('index', "
		    "'trigger') AND tbl_name IN ('bill', 'bill_line') AND sql "
		    "IS NOT NULL ORDER BY type, rowid",
		    &ddl, err, errsz))
		goto out;
	if (lite_exec(db,
		      "CREATE TABLE semq_bill_line_keep AS "
		      "SELECT * FROM bill_line; "
		      "DROP TABLE bill_line; "
		      "DROP TABLE bill; "
		      "CREATE TABLE " LITE_BILL ";",
		      MIGRATE_WHAT, err, errsz) ||
	    lite_exec(db, line_sql, MIGRATE_WHAT, err, errsz) ||
	    lite_exec(db,
		      "INSERT INTO bill(" BILL_COLS ") SELECT " BILL_COLS
		      " FROM semq_bill_keep; "
		      "INSERT INTO bill_line SELECT * FROM semq_bill_line_keep",
		      MIGRATE_WHAT, err, errsz))
		goto out;
	for (i = 0; i < ddl.n; i++)
		if (lite_exec(db, ddl.v[i], MIGRATE_WHAT, err, errsz))
			goto out;
	if (lite_exec(db,
		      "DROP TABLE semq_bill_keep; "
		      "DROP TABLE semq_bill_line_keep",
		      MIGRATE_WHAT, err, errsz))
		goto out;
	done = 1;
	r = 0;
out:
	if (open) {
		/* A failed release leaves the work undone: say so, unless
		 * something failed before and err says that already. */
		if (!done)
			sqlite3_exec(db, "ROLLBACK TO semq_bill_migrate", NULL,
				     NULL, NULL);
		if (sqlite3_exec(db, "RELEASE semq_bill_migrate", NULL, NULL,
				 NULL) != SQLITE_OK &&
		    r == 0) {
			plug_errf(err, errsz, "bill: " MIGRATE_WHAT ": %s",
				  sqlite3_errmsg(db));
			r = -1;
		}
	}
	sqlite3_free(extra);
	sqlite3_free(line_sql);
	sqls_free(&ddl);
	return r;
}

/* The tables on SQLite: made when missing, migrated when of the first
 * shape. 0, or -1 with err. */
static int lite_tables(sqlite3 *db, char *err, size_t errsz)
{
	int old;

	if (lite_exec(db,
		      "CREATE TABLE IF NOT EXISTS " LITE_BILL ";"
		      "CREATE TABLE IF NOT EXISTS " LITE_BILL_LINE,
		      "cannot create the bill tables", err, errsz))
		return -1;
	if (lite_old_shape(db, &old, err, errsz))
		return -1;
	return old ? lite_migrate(db, err, errsz) : 0;
}

int semq_plugin_abi_version(void)
{
	return SEMQ_PLUGIN_ABI_VERSION;
}

int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_PERMANENT;
	struct bill *b = NULL;
	int seen_max = 0;
	PGresult *res = NULL; /* PQclear */
	size_t i;

	if (!a || !handle_out) {
		plug_errf(err, errsz, "bill: init called without arguments");
		goto out;
	}
	if (!a->tx || !a->tx->db) {
		plug_errf(err, errsz, "bill: init called without a database");
		goto out;
	}
	if (a->tx->db_kind != SEMQ_DB_SQLITE && a->tx->db_kind != SEMQ_DB_PG) {
		plug_errf(err, errsz,
			  "bill: unknown database kind %d " DB_KINDS,
			  a->tx->db_kind);
		goto out;
	}
	b = calloc(1, sizeof *b);
	if (!b) {
		plug_errf(err, errsz, "bill: out of memory");
		goto out;
	}
	b->max_lines = MAX_LINES_DEFAULT;
	if (a->n_options > 0 && !a->options) {
		plug_errf(err, errsz, "bill: %zu options but no list",
			  a->n_options);
		goto out;
	}
	for (i = 0; i < a->n_options; i++) {
		const struct semq_plugin_option *o = &a->options[i];
		const char *where = o->where ? o->where : "options";
		const char *k = o->key ? o->key : "";
		const char *v = o->value ? o->value : "";

		if (strcmp(k, "max_lines") != 0) {
			plug_errf(err, errsz,
				  "bill: %s: unknown option '%s' " OPTIONS_TEXT,
				  where, k);
			goto out;
		}
		if (seen_max) {
			plug_errf(err, errsz, "bill: %s: %s given twice", where,
				  k);
			goto out;
		}
		seen_max = 1;
		if (parse_max_lines(where, v, &b->max_lines, err, errsz))
			goto out;
	}

	if (a->tx->db_kind == SEMQ_DB_PG) {
		char why[200];

		res = PQexec(a->tx->db, PG_CREATE);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			plug_pg_why(res, a->tx->db, why, sizeof why);
			plug_errf(err, errsz,
				  "bill: cannot create or migrate the bill "
				  "tables: "
				  "%s",
				  why);
			goto out;
		}
	} else if (lite_tables(a->tx->db, err, errsz)) {
		goto out;
	}
	*handle_out = b;
	b = NULL;
	r = SEMQ_PLUGIN_OK;
out:
	PQclear(res);
	bill_free(b);
	return r;
}

/* ---- validating the document --------------------------------------------- */

/*
 * The text at `key` of `obj` into *out (borrowed from the tree) and its byte
 * length into *lenp: a non-empty string of at most TEXT_MAX characters with
 * no control character. An optional key may be absent or null (*out = NULL).
 * `blanks_ok` allows leading and trailing blanks. Returns 0 or -1 with err.
 */
static int get_text(const json_t *obj, const char *key, const char *label,
		    int required, int blanks_ok, const char **out, size_t *lenp,
		    char *err, size_t errsz)
{
	const json_t *v = json_object_get(obj, key);
	char shown[SHOW_MAX + 4];
	const char *s;
	size_t len, i, chars = 0;

	*out = NULL;
	if (!v || (!required && json_is_null(v))) {
		if (required) {
			plug_errf(err, errsz, "bill: %s is missing", label);
			return -1;
		}
		return 0;
	}
	if (!json_is_string(v)) {
		show(v, shown);
		plug_errf(err, errsz, "bill: %s: %s is not a string", label,
			  shown);
		return -1;
	}
	s = json_string_value(v);
	len = json_string_length(v);
	if (len == 0) {
		plug_errf(err, errsz, "bill: %s is empty", label);
		return -1;
	}
	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch < 0x20 || ch == 0x7f) {
			plug_errf(err, errsz,
				  "bill: %s contains a control character",
				  label);
			return -1;
		}
		if ((ch & 0xc0) != 0x80) /* jansson has checked the UTF-8 */
			chars++;
	}
	if (chars > TEXT_MAX) {
		plug_errf(err, errsz,
			  "bill: %s is longer than %d characters (%zu)", label,
			  TEXT_MAX, chars);
		return -1;
	}
	if (!blanks_ok && (s[0] == ' ' || s[len - 1] == ' ')) {
		clip(s, len, SHOW_MAX, shown);
		plug_errf(err, errsz,
			  "bill: %s '%s' has leading or trailing blanks", label,
			  shown);
		return -1;
	}
	*out = s;
	if (lenp)
		*lenp = len;
	return 0;
}

static int digits(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

static int num(const char *s, size_t n)
{
	int x = 0;
	size_t i;

	for (i = 0; i < n; i++)
		x = x * 10 + (s[i] - '0');
	return x;
}

/* Whether s is an RFC 3339 date-time: 2026-11-22T10:00:00(.frac)(Z|+hh:mm). */
static int is_rfc3339(const char *s)
{
	static const int mdays[12] = {31, 28, 31, 30, 31, 30,
				      31, 31, 30, 31, 30, 31};
	size_t n = strlen(s), i = 19;
	int y, mo, d;

	if (n < 20 || !digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) ||
	    s[7] != '-' || !digits(s + 8, 2) ||
	    (s[10] != 'T' && s[10] != 't') || !digits(s + 11, 2) ||
	    s[13] != ':' || !digits(s + 14, 2) || s[16] != ':' ||
	    !digits(s + 17, 2))
		return 0;
	y = num(s, 4);
	mo = num(s + 5, 2);
	d = num(s + 8, 2);
	if (mo < 1 || mo > 12 || d < 1)
		return 0;
	if (d > mdays[mo - 1] + (mo == 2 && y % 4 == 0 &&
				 (y % 100 != 0 || y % 400 == 0)))
		return 0;
	if (num(s + 11, 2) > 23 || num(s + 14, 2) > 59 || num(s + 17, 2) > 60)
		return 0;
	if (s[i] == '.') {
		size_t f = ++i;

		while (s[i] >= '0' && s[i] <= '9')
			i++;
		if (i == f)
			return 0;
	}
	if ((s[i] == 'Z' || s[i] == 'z') && s[i + 1] == '\0')
		return 1;
	return (s[i] == '+' || s[i] == '-') && n - i == 6 &&
	       digits(s + i + 1, 2) && s[i + 3] == ':' &&
	       digits(s + i + 4, 2) && num(s + i + 1, 2) <= 23 &&
	       num(s + i + 4, 2) <= 59;
}

/* qty: a JSON integer > 0, or a JSON real with no fraction. */
static int get_qty(const json_t *line, const char *label, int64_t *out,
		   char *err, size_t errsz)
{
	const json_t *v = json_object_get(line, "qty");
	char shown[SHOW_MAX + 4];

	if (!v) {
		plug_errf(err, errsz, "bill: %s is missing", label);
		return -1;
	}
	if (json_is_integer(v) && json_integer_value(v) > 0) {
		*out = json_integer_value(v);
		return 0;
	}
	if (json_is_real(v)) {
		double x = json_real_value(v);

		if (x >= 1.0 && x == floor(x) && x <= 0x1p53) {
			*out = (int64_t)x;
			return 0;
		}
		if (x > 0x1p53) {
			show(v, shown);
			plug_errf(err, errsz, "bill: %s: %s is too large",
				  label, shown);
			return -1;
		}
	}
	show(v, shown);
	plug_errf(err, errsz, "bill: %s: %s is not a positive integer", label,
		  shown);
	return -1;
}

/*
 * price: a decimal string "3.50" ("3", "3.5"; at most PRICE_DECIMALS decimal
 * places), a JSON integer, or a JSON real that is a whole number of cents
 * within rounding. Zero is allowed, negative is not. *out in minor units.
 */
static int get_price(const json_t *line, const char *label, int64_t *out,
		     char *err, size_t errsz)
{
	const json_t *v = json_object_get(line, "price");
	char shown[SHOW_MAX + 4];
	int64_t x = 0;

	if (!v) {
		plug_errf(err, errsz, "bill: %s is missing", label);
		return -1;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		size_t n = json_string_length(v), i = 0, ip, fp = 0, k;
		int neg = 0;

		if (n > 0 && s[0] == '-') {
			neg = 1;
			i = 1;
		}
		ip = i;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
		ip = i - ip;
		if (ip > 0 && i < n && s[i] == '.') {
			size_t f = ++i;

			while (i < n && s[i] >= '0' && s[i] <= '9')
				i++;
			fp = i - f;
			if (fp == 0)
				ip = 0; /* "3." is not an amount */
		}
		if (ip == 0 || i != n)
			goto not_amount;
		if (neg)
			goto negative;
		if (fp > PRICE_DECIMALS) {
			show(v, shown);
			plug_errf(
				err, errsz,
				"bill: %s: %s has more than %d decimal places",
				label, shown, PRICE_DECIMALS);
			return -1;
		}
		for (i = 0; i < n; i++) {
			if (s[i] == '.')
				continue;
			x = x * 10 + (s[i] - '0');
			if (x > PRICE_MAX_MINOR)
				goto too_large;
		}
		for (k = fp; k < PRICE_DECIMALS; k++)
			x *= 10;
		if (x > PRICE_MAX_MINOR)
			goto too_large;
		*out = x;
		return 0;
	}
	if (json_is_integer(v)) {
		json_int_t y = json_integer_value(v);

		if (y < 0)
			goto negative;
		if (y > PRICE_MAX_MINOR / 100)
			goto too_large;
		*out = (int64_t)y * 100;
		return 0;
	}
	if (json_is_real(v)) {
		double y = json_real_value(v), c, tol;

		if (y < 0.0)
			goto negative;
		c = y * 100.0;
		if (!(c <= (double)PRICE_MAX_MINOR))
			goto too_large;
		/* A price of two decimals, as the nearest double, times 100
		 * lands within a few ulps of a whole number. */
		tol = fmax(1e-6, c * 8 * DBL_EPSILON);
		if (fabs(c - nearbyint(c)) > tol) {
			show(v, shown);
			plug_errf(
				err, errsz,
				"bill: %s: %s has more than %d decimal places",
				label, shown, PRICE_DECIMALS);
			return -1;
		}
		*out = (int64_t)nearbyint(c);
		return 0;
	}
not_amount:
	show(v, shown);
	plug_errf(err, errsz, "bill: %s: %s is not an amount like \"3.50\"",
		  label, shown);
	return -1;
negative:
	show(v, shown);
	plug_errf(err, errsz, "bill: %s: %s is negative", label, shown);
	return -1;
too_large:
	show(v, shown);
	plug_errf(err, errsz, "bill: %s: %s is larger than " PRICE_MAX_TEXT,
		  label, shown);
	return -1;
}

/* Refuses any key of obj not in the NULL-terminated list `known`. */
static int only_keys(const json_t *obj, const char *const *known,
		     const char *where, const char *list, char *err,
		     size_t errsz)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)obj, key, v)
	{
		const char *const *k;
		char shown[SHOW_MAX + 4];

		for (k = known; *k; k++)
			if (strcmp(*k, key) == 0)
				break;
		if (*k)
			continue;
		clip(key, strlen(key), SHOW_MAX, shown);
		plug_errf(err, errsz, "bill: %sunknown key '%s' %s", where,
			  shown, list);
		return -1;
	}
	return 0;
}

static int check_line(const json_t *jl, size_t i, struct line *l, char *err,
		      size_t errsz)
{
	static const char *const keys[] = {"item", "qty", "price", NULL};
	char label[48], shown[SHOW_MAX + 4];

	snprintf(label, sizeof label, "lines[%zu]: ", i);
	if (!json_is_object(jl)) {
		show(jl, shown);
		plug_errf(err, errsz, "bill: lines[%zu]: %s is not an object",
			  i, shown);
		return -1;
	}
	if (only_keys(jl, keys, label, LINE_KEYS, err, errsz))
		return -1;
	snprintf(label, sizeof label, "lines[%zu].item", i);
	if (get_text(jl, "item", label, 1, 0, &l->item, &l->item_len, err,
		     errsz))
		return -1;
	snprintf(label, sizeof label, "lines[%zu].qty", i);
	if (get_qty(jl, label, &l->qty, err, errsz))
		return -1;
	snprintf(label, sizeof label, "lines[%zu].price", i);
	return get_price(jl, label, &l->price, err, errsz);
}

static void doc_clear(struct doc *d)
{
	free(d->lines);
	memset(d, 0, sizeof *d);
}

/* Fills d from the document root, or returns -1 with err. */
static int check_doc(const struct bill *b, const json_t *root, struct doc *d,
		     char *err, size_t errsz)
{
	static const char *const keys[] = {"bill_no",   "shop",  "currency",
					   "issued_at", "lines", NULL};
	char shown[SHOW_MAX + 4];
	const json_t *lines;
	size_t i, n;

	if (!json_is_object(root)) {
		show(root, shown);
		plug_errf(err, errsz, "bill: payload is not a JSON object: %s",
			  shown);
		return -1;
	}
	if (only_keys(root, keys, "", TOP_KEYS, err, errsz))
		return -1;
	if (get_text(root, "bill_no", "bill_no", 1, 0, &d->bill_no, NULL, err,
		     errsz) ||
	    get_text(root, "shop", "shop", 1, 0, &d->shop, NULL, err, errsz) ||
	    get_text(root, "currency", "currency", 0, 0, &d->currency, NULL,
		     err, errsz) ||
	    get_text(root, "issued_at", "issued_at", 0, 0, &d->issued_at, NULL,
		     err, errsz))
		return -1;
	if (d->currency && !(strlen(d->currency) == 3 &&
			     d->currency[0] >= 'A' && d->currency[0] <= 'Z' &&
			     d->currency[1] >= 'A' && d->currency[1] <= 'Z' &&
			     d->currency[2] >= 'A' && d->currency[2] <= 'Z')) {
		clip(d->currency, strlen(d->currency), SHOW_MAX, shown);
		plug_errf(err, errsz,
			  "bill: currency '%s' is not a three-letter code like "
			  "'EUR'",
			  shown);
		return -1;
	}
	if (d->issued_at && !is_rfc3339(d->issued_at)) {
		clip(d->issued_at, strlen(d->issued_at), SHOW_MAX, shown);
		plug_errf(err, errsz,
			  "bill: issued_at '%s' is not an RFC 3339 time like "
			  "'2026-11-22T10:00:00Z'",
			  shown);
		return -1;
	}

	lines = json_object_get(root, "lines");
	if (!lines) {
		plug_errf(err, errsz, "bill: lines is missing");
		return -1;
	}
	if (!json_is_array(lines)) {
		show(lines, shown);
		plug_errf(err, errsz, "bill: lines: %s is not an array", shown);
		return -1;
	}
	n = json_array_size(lines);
	if (n == 0) {
		plug_errf(err, errsz, "bill: lines is empty");
		return -1;
	}
	if (n > (size_t)b->max_lines) {
		plug_errf(err, errsz,
			  "bill: lines has %zu entries, more than "
			  "max_lines %ld",
			  n, b->max_lines);
		return -1;
	}
	d->lines = calloc(n, sizeof *d->lines);
	if (!d->lines) {
		plug_errf(err, errsz, "bill: out of memory for %zu lines", n);
		return -1;
	}
	d->n_lines = n;
	d->total = 0;
	for (i = 0; i < n; i++) {
		struct line *l = &d->lines[i];
		int64_t amount;

		if (check_line(json_array_get(lines, i), i, l, err, errsz))
			return -1;
		if (__builtin_mul_overflow(l->qty, l->price, &amount)) {
			plug_errf(err, errsz,
				  "bill: lines[%zu]: qty %lld times price %lld "
				  "overflows a 64-bit amount",
				  i, (long long)l->qty, (long long)l->price);
			return -1;
		}
		if (__builtin_add_overflow(d->total, amount, &d->total)) {
			plug_errf(
				err, errsz,
				"bill: the total overflows a 64-bit amount at "
				"lines[%zu]",
				i);
			return -1;
		}
	}
	return 0;
}

/* ---- writing ------------------------------------------------------------- */

/* Makes sure the statements are prepared on db. Returns 0 or -1 with err. */
static int bill_prepare_lite(struct bill *b, sqlite3 *db, char *err,
			     size_t errsz)
{
	static const struct {
		const char *what, *sql;
	} q[3] = {
		{"the bill lookup", "SELECT origin, dest, seq FROM bill "
				    "WHERE shop = ? AND bill_no = ?"},
		{"the bill insert",
		 "INSERT INTO bill(bill_no, shop, currency, issued_at, "
		 "total_minor, origin, dest, seq, imported_at) "
		 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"},
		{"the bill_line insert",
		 "INSERT INTO bill_line(bill_id, line_no, item, qty, "
		 "price_minor) VALUES (?, ?, ?, ?, ?)"},
	};
	sqlite3_stmt **st[3] = {&b->find, &b->ins_bill, &b->ins_line};
	size_t i;

	if (b->db == db && b->find)
		return 0;
	bill_unprepare(b);
	for (i = 0; i < 3; i++) {
		if (sqlite3_prepare_v3(db, q[i].sql, -1,
				       SQLITE_PREPARE_PERSISTENT, st[i],
				       NULL) != SQLITE_OK) {
			plug_errf(err, errsz, "bill: cannot prepare %s: %s",
				  q[i].what, sqlite3_errmsg(db));
			bill_unprepare(b);
			return -1;
		}
	}
	b->db = db;
	return 0;
}

static int same_text(const char *a, const char *b)
{
	if (!a || !b)
		return !a && !b;
	return strcmp(a, b) == 0;
}

/*
 * The answer when d->bill_no of d->shop is already in `bill`, imported by the
 * message
 * origin/dest/seq (seq_is_int: the stored seq is an integer at all): OK when
 * that is m itself (already done), else PERMANENT naming that message.
 */
static int seen_before(const struct doc *d, const struct semq_plugin_msg *m,
		       const char *o, const char *t, int seq_is_int,
		       uint64_t seq, char *err, size_t errsz)
{
	char shown[SHOW_MAX + 4];

	if (same_text(o, m->origin) && same_text(t, m->dest) && seq_is_int &&
	    seq == m->seq)
		return SEMQ_PLUGIN_OK; /* this message imported it */
	clip(d->bill_no, strlen(d->bill_no), SHOW_MAX, shown);
	plug_errf(err, errsz,
		  "bill: bill_no '%s' was already imported from %s/%s/%llu",
		  shown, o ? o : "?", t ? t : "?", (unsigned long long)seq);
	return SEMQ_PLUGIN_PERMANENT;
}

static void bind_opt(sqlite3_stmt *s, int i, const char *v)
{
	if (v)
		sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

/*
 * Writes the validated d for message m. Returns OK (written, or written
 * before by this very message), PERMANENT (the shop's bill_no imported by
 * another message) or RETRY (a database error), with err on failure.
 */
static int bill_write_lite(struct bill *b, sqlite3 *db,
			   const struct semq_plugin_msg *m, const struct doc *d,
			   char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_RETRY;
	sqlite3_int64 id;
	size_t i;
	int rc;

	if (bill_prepare_lite(b, db, err, errsz))
		return SEMQ_PLUGIN_RETRY;

	sqlite3_bind_text(b->find, 1, d->shop, -1, SQLITE_STATIC);
	sqlite3_bind_text(b->find, 2, d->bill_no, -1, SQLITE_STATIC);
	rc = sqlite3_step(b->find);
	if (rc == SQLITE_ROW) {
		/* The type is read before any conversion can change it. */
		int seq_is_int =
			sqlite3_column_type(b->find, 2) == SQLITE_INTEGER;
		const char *o = (const char *)sqlite3_column_text(b->find, 0);
		const char *t = (const char *)sqlite3_column_text(b->find, 1);
		uint64_t seq = (uint64_t)sqlite3_column_int64(b->find, 2);

		r = seen_before(d, m, o, t, seq_is_int, seq, err, errsz);
		goto out;
	}
	if (rc != SQLITE_DONE) {
		plug_errf(err, errsz, "bill: cannot look up bill_no: %s",
			  sqlite3_errmsg(db));
		goto out;
	}

	sqlite3_bind_text(b->ins_bill, 1, d->bill_no, -1, SQLITE_STATIC);
	sqlite3_bind_text(b->ins_bill, 2, d->shop, -1, SQLITE_STATIC);
	bind_opt(b->ins_bill, 3, d->currency);
	bind_opt(b->ins_bill, 4, d->issued_at);
	sqlite3_bind_int64(b->ins_bill, 5, d->total);
	bind_opt(b->ins_bill, 6, m->origin);
	bind_opt(b->ins_bill, 7, m->dest);
	sqlite3_bind_int64(b->ins_bill, 8, (sqlite3_int64)m->seq);
	sqlite3_bind_int64(b->ins_bill, 9, plug_now_ms());
	if (sqlite3_step(b->ins_bill) != SQLITE_DONE) {
		plug_errf(err, errsz, "bill: insert into bill failed: %s",
			  sqlite3_errmsg(db));
		goto out;
	}
	id = sqlite3_last_insert_rowid(db);

	for (i = 0; i < d->n_lines; i++) {
		const struct line *l = &d->lines[i];

		sqlite3_reset(b->ins_line);
		sqlite3_bind_int64(b->ins_line, 1, id);
		sqlite3_bind_int64(b->ins_line, 2, (sqlite3_int64)i + 1);
		sqlite3_bind_text(b->ins_line, 3, l->item, (int)l->item_len,
				  SQLITE_STATIC);
		sqlite3_bind_int64(b->ins_line, 4, l->qty);
		sqlite3_bind_int64(b->ins_line, 5, l->price);
		if (sqlite3_step(b->ins_line) != SQLITE_DONE) {
			plug_errf(err, errsz,
				  "bill: insert into bill_line failed at "
				  "lines[%zu]: %s",
				  i, sqlite3_errmsg(db));
			goto out;
		}
	}
	r = SEMQ_PLUGIN_OK;
out:
	/* No statement keeps a binding into the JSON tree or a lock. */
	sqlite3_reset(b->find);
	sqlite3_clear_bindings(b->find);
	sqlite3_reset(b->ins_bill);
	sqlite3_clear_bindings(b->ins_bill);
	sqlite3_reset(b->ins_line);
	sqlite3_clear_bindings(b->ins_line);
	return r;
}

/* Makes sure the statements are prepared in pg's current session. Returns 0
 * or -1 with err. */
static int bill_prepare_pg(struct bill *b, PGconn *pg, char *err, size_t errsz)
{
	static const struct {
		const char *what, *tag, *sql;
		int n;
	} q[3] = {
		{"the bill lookup", "find",
		 "SELECT origin, dest, seq FROM bill "
		 "WHERE shop = $1 AND bill_no = $2",
		 2},
		{"the bill insert", "ins_bill",
		 "INSERT INTO bill(bill_no, shop, currency, issued_at, "
		 "total_minor, origin, dest, seq, imported_at) "
		 "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
		 "ON CONFLICT (shop, bill_no) DO NOTHING RETURNING id",
		 9},
		{"the bill_line insert", "ins_line",
		 "INSERT INTO bill_line(bill_id, line_no, item, qty, "
		 "price_minor) VALUES ($1, $2, $3, $4, $5)",
		 5},
	};
	char *names[3] = {b->pg_find, b->pg_ins_bill, b->pg_ins_line};
	char why[200];
	size_t i;

	if (plug_pg_session_same(&b->pg, pg))
		return 0;
	plug_pg_session_set(&b->pg, NULL);
	for (i = 0; i < 3; i++) {
		PGresult *res;
		int ok;

		plug_pg_stmt_name(names[i], sizeof b->pg_find, "bill",
				  q[i].tag);
		res = PQprepare(pg, names[i], q[i].sql, q[i].n, NULL);
		ok = PQresultStatus(res) == PGRES_COMMAND_OK;
		if (!ok) {
			plug_pg_why(res, pg, why, sizeof why);
			plug_errf(err, errsz, "bill: cannot prepare %s: %s",
				  q[i].what, why);
		}
		PQclear(res);
		if (!ok)
			return -1;
	}
	plug_pg_session_set(&b->pg, pg);
	return 0;
}

/* What bill_write_lite does, on PostgreSQL (same results, same messages). */
static int bill_write_pg(struct bill *b, PGconn *pg,
			 const struct semq_plugin_msg *m, const struct doc *d,
			 char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_RETRY;
	PGresult *res = NULL; /* PQclear */
	char why[200], shown[SHOW_MAX + 4], id[24], total[24], seq[24], at[24],
		no[24], qty[24], price[24];
	const char *v[9];
	int pass;
	size_t i;

	if (bill_prepare_pg(b, pg, err, errsz))
		return SEMQ_PLUGIN_RETRY;

	/* Pass 0 looks the bill up and inserts it. When the insert finds the
	 * shop's bill_no taken after all (another transaction committed it since the
	 * lookup), pass 1 looks it up again: it is there now. */
	for (pass = 0;; pass++) {
		v[0] = d->shop;
		v[1] = d->bill_no;
		res = PQexecPrepared(pg, b->pg_find, 2, v, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			plug_pg_why(res, pg, why, sizeof why);
			plug_errf(err, errsz,
				  "bill: cannot look up bill_no: %s", why);
			goto out;
		}
		if (PQntuples(res) > 0) {
			int seq_is_int = !PQgetisnull(res, 0, 2);
			const char *o = PQgetisnull(res, 0, 0)
						? NULL
						: PQgetvalue(res, 0, 0);
			const char *t = PQgetisnull(res, 0, 1)
						? NULL
						: PQgetvalue(res, 0, 1);
			uint64_t s = 0;

			if (seq_is_int)
				s = (uint64_t)strtoll(PQgetvalue(res, 0, 2),
						      NULL, 10);
			r = seen_before(d, m, o, t, seq_is_int, s, err, errsz);
			goto out;
		}
		PQclear(res);
		res = NULL;
		if (pass == 1) {
			/* Taken, then gone again: someone deleted it. */
			clip(d->bill_no, strlen(d->bill_no), SHOW_MAX, shown);
			plug_errf(err, errsz,
				  "bill: bill_no '%s' was imported and removed "
				  "again meanwhile",
				  shown);
			goto out;
		}

		snprintf(total, sizeof total, "%lld", (long long)d->total);
		snprintf(seq, sizeof seq, "%lld", (long long)(int64_t)m->seq);
		snprintf(at, sizeof at, "%lld", (long long)plug_now_ms());
		v[0] = d->bill_no;
		v[1] = d->shop;
		v[2] = d->currency;  /* NULL: SQL NULL */
		v[3] = d->issued_at; /* NULL: SQL NULL */
		v[4] = total;
		v[5] = m->origin;
		v[6] = m->dest;
		v[7] = seq;
		v[8] = at;
		res = PQexecPrepared(pg, b->pg_ins_bill, 9, v, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			plug_pg_why(res, pg, why, sizeof why);
			plug_errf(err, errsz,
				  "bill: insert into bill failed: %s", why);
			goto out;
		}
		if (PQntuples(res) == 1)
			break;
		PQclear(res);
		res = NULL;
	}
	snprintf(id, sizeof id, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	res = NULL;

	for (i = 0; i < d->n_lines; i++) {
		const struct line *l = &d->lines[i];

		snprintf(no, sizeof no, "%zu", i + 1);
		snprintf(qty, sizeof qty, "%lld", (long long)l->qty);
		snprintf(price, sizeof price, "%lld", (long long)l->price);
		v[0] = id;
		v[1] = no;
		v[2] = l->item; /* NUL-free: get_text refused control bytes */
		v[3] = qty;
		v[4] = price;
		res = PQexecPrepared(pg, b->pg_ins_line, 5, v, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			plug_pg_why(res, pg, why, sizeof why);
			plug_errf(err, errsz,
				  "bill: insert into bill_line failed at "
				  "lines[%zu]: %s",
				  i, why);
			goto out;
		}
		PQclear(res);
		res = NULL;
	}
	r = SEMQ_PLUGIN_OK;
out:
	PQclear(res);
	return r;
}

int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_RETRY; /* until the call itself is checked */
	struct bill *b = handle;
	struct doc d = {0};
	json_t *root = NULL; /* owned */
	json_error_t je;

	if (!b || !m) {
		plug_errf(err, errsz, "bill: called without handle or message");
		goto out;
	}
	if (!tx || !tx->db) {
		plug_errf(err, errsz, "bill: called without a transaction");
		goto out;
	}
	if (tx->db_kind != SEMQ_DB_SQLITE && tx->db_kind != SEMQ_DB_PG) {
		plug_errf(err, errsz,
			  "bill: unknown database kind %d " DB_KINDS,
			  tx->db_kind);
		r = SEMQ_PLUGIN_PERMANENT;
		goto out;
	}
	if (m->payload_len > 0 && !m->payload) {
		plug_errf(err, errsz,
			  "bill: called with %zu payload bytes but no "
			  "payload",
			  m->payload_len);
		goto out;
	}
	if (!m->origin) {
		plug_errf(err, errsz,
			  "bill: called without the message's origin");
		goto out;
	}
	r = SEMQ_PLUGIN_PERMANENT; /* from here on, the document is at fault */
	if (m->type != BILL_TYPE) {
		plug_errf(err, errsz, "bill: type %u is not a bill (%u)",
			  (unsigned)m->type, BILL_TYPE);
		goto out;
	}
	if (m->payload_len == 0) {
		plug_errf(err, errsz, "bill: payload is empty");
		goto out;
	}
	root = json_loadb((const char *)m->payload, m->payload_len,
			  JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (!root) {
		char text[sizeof je.text + 4];

		clip(je.text, strnlen(je.text, sizeof je.text), sizeof je.text,
		     text);
		plug_errf(err, errsz,
			  "bill: payload is not JSON: %s at line %d column %d",
			  text, je.line, je.column);
		goto out;
	}
	if (check_doc(b, root, &d, err, errsz))
		goto out;
	if (strcmp(d.shop, m->origin) != 0) {
		char shop[SHOW_MAX + 4], origin[SHOW_MAX + 4];

		clip(d.shop, strlen(d.shop), SHOW_MAX, shop);
		clip(m->origin, strlen(m->origin), SHOW_MAX, origin);
		plug_errf(err, errsz,
			  "bill: shop '%s' is not the sending node '%s'", shop,
			  origin);
		goto out;
	}
	if (tx->db_kind == SEMQ_DB_PG)
		r = bill_write_pg(b, tx->db, m, &d, err, errsz);
	else
		r = bill_write_lite(b, tx->db, m, &d, err, errsz);
out:
	doc_clear(&d);
	json_decref(root);
	return r;
}

void semq_plugin_fini(void *handle)
{
	bill_free(handle);
}
