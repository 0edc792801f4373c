/* SPDX-License-Identifier: MIT */
/*
 * journal: the plugin that ships for tests, benchmarks and demos (SPEC §13).
 * It appends every message it handles to the table
 *
 *   journal(id, origin, dest, seq, type, msg_key, payload_len, handled_at)
 *
 * with NO unique constraint, so that a message applied twice shows as a second
 * row: counting rows per (origin, dest, seq) is how the tests prove exactly
 * once. Options (all optional):
 *
 *   fail_rate = 0.3          that share of calls returns RETRY (0 to 1)
 *   fail_seed = 42           seed of the failure sequence (default 1)
 *   permanent_keys = A,B     messages with these keys fail PERMANENT
 *   crash_keys = A,B         a message with one of these keys kills the
 *                            process (abort): a plugin that crashes on a
 *                            document, for the host's crash guard
 *   stall_keys = A,B         a message with one of these keys makes the
 *   stall_ms = 3000          call sleep this long first (default 0): a
 *                            hung plugin, for [node] plugin_timeout
 *   slow_keys = A,B          a message with one of these keys makes the
 *   slow_ms = 2000           call sleep this long (default 2000), then it is
 *                            recorded as usual: a slow plugin, for tests
 *                            and benchmarks of a node whose plugin takes
 *                            time (stall_keys does the same; the two are
 *                            apart so that a test says which it means)
 *
 * It works on both node databases: SQLite (tx->db is a `sqlite3 *`) and
 * PostgreSQL (tx->db is a `PGconn *`), with the same table, the same columns
 * and the same verdicts and messages.
 *
 * DESIGN:
 *  - The injected failures come from a splitmix64 generator seeded with
 *    fail_seed and drawn once per call that is not a permanent key, so the
 *    same seed and the same calls give the same verdicts on every run.
 *  - The INSERT is prepared once per connection. SQLite: when the host hands
 *    over another `sqlite3 *` the old statement is finalised and the new one
 *    prepared. PostgreSQL: a prepared statement lives in the server session,
 *    so the cache is keyed on the `PGconn *` AND its backend pid (PQreset
 *    keeps the pointer but opens a new session); a new session gets a
 *    statement under a new name (`semq_journal_<copy>_N`, N never reused in
 *    the process), so a name never collides with one left in a session. The
 *    plugin never touches a connection it is not handed in this call (the
 *    old one may be closed), so fini frees memory only.
 *  - The host may create several handles in one process, one per store
 *    worker thread (init once per worker; each handle is called from one
 *    thread only, different handles at the same time). Everything a call
 *    changes is in its handle: the generator, the statement caches. The one
 *    global, the counter of statement names, is atomic. So with several
 *    workers each handle draws its own fail_seed sequence over the messages
 *    its worker gets.
 *  - The plugin only writes inside the host's transaction; it never begins,
 *    commits or rolls back. On PostgreSQL the table is created in init under
 *    a transaction-scoped advisory lock, so that several semqd instances
 *    starting at once on one database do not race on CREATE TABLE.
 */
#include <semq/plugin.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

#define OPTIONS_TEXT                                                           \
	"(fail_rate, fail_seed, permanent_keys, crash_keys, stall_keys, "      \
	"stall_ms, slow_keys, slow_ms)"
#define SLOW_MS_DEFAULT 2000L
#define SLEEP_MS_MAX 3600000L /* stall_ms, slow_ms */
#define DB_KINDS "(1 SQLite, 2 PostgreSQL)"

/*
 * The table on PostgreSQL: the same columns as on SQLite, in one statement
 * that runs as one transaction (or inside the host's, if one is open). The
 * advisory lock makes instances that start at once create it one after the
 * other; the check avoids CREATE TABLE IF NOT EXISTS, whose NOTICE the
 * host's connection would print.
 */
#define PG_CREATE                                                              \
	"DO $semq$ BEGIN "                                                     \
	"PERFORM pg_advisory_xact_lock(1936026993, 1); " /* 'semq', 1 */       \
	"IF to_regclass('journal') IS NULL THEN "                              \
	"CREATE TABLE journal("                                                \
	"id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "             \
	"origin TEXT, dest TEXT, seq BIGINT, type BIGINT, msg_key TEXT, "      \
	"payload_len BIGINT, handled_at BIGINT); "                             \
	"END IF; END $semq$"

/* A list of message keys (an option). */
struct keys {
	char **v; /* owned, n strings */
	size_t n;
};

struct journal {
	double fail_rate; /* 0..1 */
	uint64_t rng;     /* splitmix64 state */
	struct keys perm, crash, stall, slow;
	long stall_ms;
	long slow_ms;
	sqlite3 *db;       /* the connection `ins` was prepared on (borrowed) */
	sqlite3_stmt *ins; /* owned; NULL until the first handle */
	struct plug_pg_session pg; /* where `pg_ins` was prepared */
	char pg_ins[64];           /* the name of the prepared INSERT on pg */
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* A uniform double in [0, 1). */
static double next_unit(struct journal *j)
{
	return (double)(splitmix64(&j->rng) >> 11) * 0x1.0p-53;
}

static void keys_free(struct keys *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

static void journal_free(struct journal *j)
{
	if (!j)
		return;
	sqlite3_finalize(j->ins);
	keys_free(&j->perm);
	keys_free(&j->crash);
	keys_free(&j->stall);
	keys_free(&j->slow);
	free(j);
}

static int parse_fail_rate(const char *where, const char *v, double *out,
			   char *err, size_t errsz)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (!v[0] || end == v || *end || errno == ERANGE) {
		plug_errf(
			err, errsz,
			"journal: %s: fail_rate '%s' is not a number between 0 "
			"and 1",
			where, v);
		return -1;
	}
	if (!(x >= 0.0 && x <= 1.0)) { /* NaN fails too */
		plug_errf(err, errsz,
			  "journal: %s: fail_rate '%s' is not between 0 and 1",
			  where, v);
		return -1;
	}
	*out = x;
	return 0;
}

static int parse_seed(const char *where, const char *v, uint64_t *out,
		      char *err, size_t errsz)
{
	unsigned long long x;
	char *end;

	errno = 0;
	x = (v[0] >= '0' && v[0] <= '9') ? strtoull(v, &end, 10) : 0;
	if (!(v[0] >= '0' && v[0] <= '9') || *end || errno == ERANGE) {
		plug_errf(
			err, errsz,
			"journal: %s: fail_seed '%s' is not an unsigned 64-bit "
			"integer",
			where, v);
		return -1;
	}
	*out = (uint64_t)x;
	return 0;
}

/* A number of ms 0..SLEEP_MS_MAX (stall_ms, slow_ms); `name` is the
 * option's, for messages. */
static int parse_ms(const char *name, const char *where, const char *v,
		    long *out, char *err, size_t errsz)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(v, &end, 10);
	if (!v[0] || *end || errno || x < 0 || x > SLEEP_MS_MAX) {
		plug_errf(err, errsz,
			  "journal: %s: %s '%s' is not a number of ms 0..%ld",
			  where, name, v, SLEEP_MS_MAX);
		return -1;
	}
	*out = x;
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Splits "A, B,C" into l; blanks around a key are dropped. `name` is the
 * option's, for messages. */
static int parse_keys(struct keys *l, const char *name, const char *where,
		      const char *v, char *err, size_t errsz)
{
	const char *s = v;

	if (!v[0])
		return 0; /* an empty list: no key fails */
	for (;;) {
		const char *e = strchr(s, ',');
		const char *b = s;
		size_t len;
		char **nk;

		if (!e)
			e = s + strlen(s);
		while (b < e && (*b == ' ' || *b == '\t'))
			b++;
		len = (size_t)(e - b);
		while (len > 0 && (b[len - 1] == ' ' || b[len - 1] == '\t'))
			len--;
		if (len == 0) {
			plug_errf(err, errsz,
				  "journal: %s: %s '%s' has an empty key",
				  where, name, v);
			return -1;
		}
		nk = realloc(l->v, (l->n + 1) * sizeof *nk);
		if (!nk)
			goto nomem;
		l->v = nk;
		l->v[l->n] = strndup(b, len);
		if (!l->v[l->n])
			goto nomem;
		l->n++;
		if (!*e)
			return 0;
		s = e + 1;
	}
nomem:
	plug_errf(err, errsz, "journal: %s: out of memory", where);
	return -1;
}

int semq_plugin_abi_version(void)
{
	return SEMQ_PLUGIN_ABI_VERSION;
}

int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_PERMANENT;
	struct journal *j = NULL;
	int seen_rate = 0, seen_seed = 0, seen_keys = 0, seen_crash = 0;
	int seen_stall = 0, seen_ms = 0, seen_slow = 0, seen_slow_ms = 0;
	char *msg = NULL;     /* sqlite3_free */
	PGresult *res = NULL; /* PQclear */
	size_t i;

	if (!a || !handle_out) {
		plug_errf(err, errsz, "journal: init called without arguments");
		goto out;
	}
	if (!a->tx || !a->tx->db) {
		plug_errf(err, errsz,
			  "journal: init called without a database");
		goto out;
	}
	if (a->tx->db_kind != SEMQ_DB_SQLITE && a->tx->db_kind != SEMQ_DB_PG) {
		plug_errf(err, errsz,
			  "journal: unknown database kind %d " DB_KINDS,
			  a->tx->db_kind);
		goto out;
	}
	j = calloc(1, sizeof *j);
	if (!j) {
		plug_errf(err, errsz, "journal: out of memory");
		goto out;
	}
	j->rng = 1;
	j->slow_ms = SLOW_MS_DEFAULT;
	if (a->n_options > 0 && !a->options) {
		plug_errf(err, errsz, "journal: %zu options but no list",
			  a->n_options);
		goto out;
	}
	for (i = 0; i < a->n_options; i++) {
		const struct semq_plugin_option *o = &a->options[i];
		const char *where = o->where ? o->where : "options";
		const char *k = o->key ? o->key : "";
		const char *v = o->value ? o->value : "";
		int *seen;

		if (strcmp(k, "fail_rate") == 0)
			seen = &seen_rate;
		else if (strcmp(k, "fail_seed") == 0)
			seen = &seen_seed;
		else if (strcmp(k, "permanent_keys") == 0)
			seen = &seen_keys;
		else if (strcmp(k, "crash_keys") == 0)
			seen = &seen_crash;
		else if (strcmp(k, "stall_keys") == 0)
			seen = &seen_stall;
		else if (strcmp(k, "stall_ms") == 0)
			seen = &seen_ms;
		else if (strcmp(k, "slow_keys") == 0)
			seen = &seen_slow;
		else if (strcmp(k, "slow_ms") == 0)
			seen = &seen_slow_ms;
		else {
			plug_errf(err, errsz,
				  "journal: %s: unknown option "
				  "'%s' " OPTIONS_TEXT,
				  where, k);
			goto out;
		}
		if (*seen) {
			plug_errf(err, errsz, "journal: %s: %s given twice",
				  where, k);
			goto out;
		}
		*seen = 1;
		if (seen == &seen_rate &&
		    parse_fail_rate(where, v, &j->fail_rate, err, errsz))
			goto out;
		if (seen == &seen_seed &&
		    parse_seed(where, v, &j->rng, err, errsz))
			goto out;
		if (seen == &seen_keys &&
		    parse_keys(&j->perm, k, where, v, err, errsz))
			goto out;
		if (seen == &seen_crash &&
		    parse_keys(&j->crash, k, where, v, err, errsz))
			goto out;
		if (seen == &seen_stall &&
		    parse_keys(&j->stall, k, where, v, err, errsz))
			goto out;
		if (seen == &seen_slow &&
		    parse_keys(&j->slow, k, where, v, err, errsz))
			goto out;
		if (seen == &seen_ms &&
		    parse_ms(k, where, v, &j->stall_ms, err, errsz))
			goto out;
		if (seen == &seen_slow_ms &&
		    parse_ms(k, where, v, &j->slow_ms, err, errsz))
			goto out;
	}

	if (a->tx->db_kind == SEMQ_DB_PG) {
		char why[200];

		res = PQexec(a->tx->db, PG_CREATE);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			plug_pg_why(res, a->tx->db, why, sizeof why);
			plug_errf(err, errsz,
				  "journal: cannot create table journal: %s",
				  why);
			goto out;
		}
	} else if (sqlite3_exec(
			   a->tx->db,
			   "CREATE TABLE IF NOT EXISTS journal("
			   "id INTEGER PRIMARY KEY, origin TEXT, dest TEXT, "
			   "seq INTEGER, type INTEGER, msg_key TEXT, "
			   "payload_len INTEGER, handled_at INTEGER)",
			   NULL, NULL, &msg) != SQLITE_OK) {
		plug_errf(err, errsz,
			  "journal: cannot create table journal: %s",
			  msg ? msg : sqlite3_errmsg(a->tx->db));
		goto out;
	}
	*handle_out = j;
	j = NULL;
	r = SEMQ_PLUGIN_OK;
out:
	PQclear(res);
	sqlite3_free(msg);
	journal_free(j);
	return r;
}

static int has_key(const struct keys *l, const char *key)
{
	size_t i;

	for (i = 0; key && i < l->n; i++)
		if (strcmp(l->v[i], key) == 0)
			return 1;
	return 0;
}

/* Appends m on SQLite. OK, or RETRY with err. */
static int journal_lite(struct journal *j, sqlite3 *db,
			const struct semq_plugin_msg *m, char *err,
			size_t errsz)
{
	int rc;

	if (j->db != db || !j->ins) {
		sqlite3_finalize(j->ins);
		j->ins = NULL;
		j->db = NULL;
		if (sqlite3_prepare_v3(db,
				       "INSERT INTO journal(origin, dest, seq, "
				       "type, msg_key, payload_len, handled_at)"
				       " VALUES (?, ?, ?, ?, ?, ?, ?)",
				       -1, SQLITE_PREPARE_PERSISTENT, &j->ins,
				       NULL) != SQLITE_OK) {
			plug_errf(err, errsz,
				  "journal: cannot prepare the insert: %s",
				  sqlite3_errmsg(db));
			sqlite3_finalize(j->ins);
			j->ins = NULL;
			return SEMQ_PLUGIN_RETRY;
		}
		j->db = db;
	}
	sqlite3_bind_text(j->ins, 1, m->origin, -1, SQLITE_STATIC);
	sqlite3_bind_text(j->ins, 2, m->dest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(j->ins, 3, (sqlite3_int64)m->seq);
	sqlite3_bind_int64(j->ins, 4, (sqlite3_int64)m->type);
	if (m->key)
		sqlite3_bind_text(j->ins, 5, m->key, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(j->ins, 5);
	sqlite3_bind_int64(j->ins, 6, (sqlite3_int64)m->payload_len);
	sqlite3_bind_int64(j->ins, 7, plug_now_ms());
	rc = sqlite3_step(j->ins);
	if (rc != SQLITE_DONE)
		plug_errf(err, errsz, "journal: insert failed: %s",
			  sqlite3_errmsg(db));
	sqlite3_reset(j->ins);
	sqlite3_clear_bindings(j->ins);
	return rc == SQLITE_DONE ? SEMQ_PLUGIN_OK : SEMQ_PLUGIN_RETRY;
}

/* Appends m on PostgreSQL. OK, or RETRY with err. */
static int journal_pg(struct journal *j, PGconn *pg,
		      const struct semq_plugin_msg *m, char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_RETRY;
	PGresult *res = NULL; /* PQclear */
	char seq[24], type[24], len[24], at[24], why[200];
	const char *v[7];

	if (!plug_pg_session_same(&j->pg, pg)) {
		plug_pg_session_set(&j->pg, NULL);
		plug_pg_stmt_name(j->pg_ins, sizeof j->pg_ins, "journal", NULL);
		res = PQprepare(pg, j->pg_ins,
				"INSERT INTO journal(origin, dest, seq, type, "
				"msg_key, payload_len, handled_at) "
				"VALUES ($1, $2, $3, $4, $5, $6, $7)",
				7, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			plug_pg_why(res, pg, why, sizeof why);
			plug_errf(err, errsz,
				  "journal: cannot prepare the insert: %s",
				  why);
			goto out;
		}
		PQclear(res);
		res = NULL;
		plug_pg_session_set(&j->pg, pg);
	}
	/* Integers go as text, as SQLite stores them: seq as a signed 64-bit
	 * value. */
	snprintf(seq, sizeof seq, "%lld", (long long)(int64_t)m->seq);
	snprintf(type, sizeof type, "%lu", (unsigned long)m->type);
	snprintf(len, sizeof len, "%lld", (long long)(int64_t)m->payload_len);
	snprintf(at, sizeof at, "%lld", (long long)plug_now_ms());
	v[0] = m->origin;
	v[1] = m->dest;
	v[2] = seq;
	v[3] = type;
	v[4] = m->key; /* NULL: SQL NULL */
	v[5] = len;
	v[6] = at;
	res = PQexecPrepared(pg, j->pg_ins, 7, v, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		plug_pg_why(res, pg, why, sizeof why);
		plug_errf(err, errsz, "journal: insert failed: %s", why);
		goto out;
	}
	r = SEMQ_PLUGIN_OK;
out:
	PQclear(res);
	return r;
}

int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	struct journal *j = handle;

	if (!j || !m) {
		plug_errf(err, errsz,
			  "journal: called without handle or message");
		return SEMQ_PLUGIN_RETRY;
	}
	if (!tx || !tx->db) {
		plug_errf(err, errsz, "journal: called without a transaction");
		return SEMQ_PLUGIN_RETRY;
	}
	if (tx->db_kind != SEMQ_DB_SQLITE && tx->db_kind != SEMQ_DB_PG) {
		plug_errf(err, errsz,
			  "journal: unknown database kind %d " DB_KINDS,
			  tx->db_kind);
		return SEMQ_PLUGIN_PERMANENT;
	}
	if (has_key(&j->crash, m->key))
		abort(); /* as a plugin that crashes on a document */
	if (has_key(&j->stall, m->key))
		sleep_ms(j->stall_ms);
	if (has_key(&j->slow, m->key))
		sleep_ms(j->slow_ms);
	if (has_key(&j->perm, m->key)) {
		plug_errf(err, errsz,
			  "journal: key %s is listed in permanent_keys",
			  m->key);
		return SEMQ_PLUGIN_PERMANENT;
	}
	if (j->fail_rate > 0.0 && next_unit(j) < j->fail_rate) {
		plug_errf(err, errsz,
			  "journal: injected failure (fail_rate %g)",
			  j->fail_rate);
		return SEMQ_PLUGIN_RETRY;
	}
	if (tx->db_kind == SEMQ_DB_PG)
		return journal_pg(j, tx->db, m, err, errsz);
	return journal_lite(j, tx->db, m, err, errsz);
}

void semq_plugin_fini(void *handle)
{
	journal_free(handle);
}
