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
 *
 * DESIGN: the injected failures come from a splitmix64 generator seeded with
 * fail_seed and drawn once per call that is not a permanent key, so the same
 * seed and the same calls give the same verdicts on every run. The INSERT is
 * prepared once per connection: when the host hands over another `sqlite3 *`
 * the old statement is finalised and the new one prepared. The plugin only
 * writes inside the host's transaction; it never begins or commits.
 */
#include <semq/plugin.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

/* The ABI entry points (include/semq/plugin.h), looked up by name. */
int semq_plugin_abi_version(void);
int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz);
int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err,
		       size_t errsz);
void semq_plugin_fini(void *handle);

#define OPTIONS_TEXT "(fail_rate, fail_seed, permanent_keys)"

struct journal {
	double fail_rate; /* 0..1 */
	uint64_t rng;     /* splitmix64 state */
	char **perm_keys; /* owned, n_perm strings */
	size_t n_perm;
	sqlite3 *db;       /* the connection `ins` was prepared on (borrowed) */
	sqlite3_stmt *ins; /* owned; NULL until the first handle */
};

__attribute__((format(printf, 3, 4))) static void errf(char *err, size_t errsz,
						       const char *fmt, ...)
{
	va_list ap;

	if (!err || errsz == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

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

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void journal_free(struct journal *j)
{
	size_t i;

	if (!j)
		return;
	sqlite3_finalize(j->ins);
	for (i = 0; i < j->n_perm; i++)
		free(j->perm_keys[i]);
	free(j->perm_keys);
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
		errf(err, errsz,
		     "journal: %s: fail_rate '%s' is not a number between 0 "
		     "and 1",
		     where, v);
		return -1;
	}
	if (!(x >= 0.0 && x <= 1.0)) { /* NaN fails too */
		errf(err, errsz,
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
		errf(err, errsz,
		     "journal: %s: fail_seed '%s' is not an unsigned 64-bit "
		     "integer",
		     where, v);
		return -1;
	}
	*out = (uint64_t)x;
	return 0;
}

/* Splits "A, B,C" into j->perm_keys; blanks around a key are dropped. */
static int parse_keys(struct journal *j, const char *where, const char *v,
		      char *err, size_t errsz)
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
			errf(err, errsz,
			     "journal: %s: permanent_keys '%s' has an empty "
			     "key",
			     where, v);
			return -1;
		}
		nk = realloc(j->perm_keys, (j->n_perm + 1) * sizeof *nk);
		if (!nk)
			goto nomem;
		j->perm_keys = nk;
		j->perm_keys[j->n_perm] = strndup(b, len);
		if (!j->perm_keys[j->n_perm])
			goto nomem;
		j->n_perm++;
		if (!*e)
			return 0;
		s = e + 1;
	}
nomem:
	errf(err, errsz, "journal: %s: out of memory", where);
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
	int seen_rate = 0, seen_seed = 0, seen_keys = 0;
	char *msg = NULL;
	size_t i;

	if (!a || !handle_out) {
		errf(err, errsz, "journal: init called without arguments");
		goto out;
	}
	if (!a->tx || a->tx->db_kind != SEMQ_DB_SQLITE || !a->tx->db) {
		errf(err, errsz,
		     "journal: needs a SQLite database (db_kind %d)",
		     a->tx ? a->tx->db_kind : 0);
		goto out;
	}
	j = calloc(1, sizeof *j);
	if (!j) {
		errf(err, errsz, "journal: out of memory");
		goto out;
	}
	j->rng = 1;
	if (a->n_options > 0 && !a->options) {
		errf(err, errsz, "journal: %zu options but no list",
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
		else {
			errf(err, errsz,
			     "journal: %s: unknown option '%s' " OPTIONS_TEXT,
			     where, k);
			goto out;
		}
		if (*seen) {
			errf(err, errsz, "journal: %s: %s given twice", where,
			     k);
			goto out;
		}
		*seen = 1;
		if (seen == &seen_rate &&
		    parse_fail_rate(where, v, &j->fail_rate, err, errsz))
			goto out;
		if (seen == &seen_seed &&
		    parse_seed(where, v, &j->rng, err, errsz))
			goto out;
		if (seen == &seen_keys && parse_keys(j, where, v, err, errsz))
			goto out;
	}

	if (sqlite3_exec(a->tx->db,
			 "CREATE TABLE IF NOT EXISTS journal("
			 "id INTEGER PRIMARY KEY, origin TEXT, dest TEXT, "
			 "seq INTEGER, type INTEGER, msg_key TEXT, "
			 "payload_len INTEGER, handled_at INTEGER)",
			 NULL, NULL, &msg) != SQLITE_OK) {
		errf(err, errsz, "journal: cannot create table journal: %s",
		     msg ? msg : sqlite3_errmsg(a->tx->db));
		goto out;
	}
	*handle_out = j;
	j = NULL;
	r = SEMQ_PLUGIN_OK;
out:
	sqlite3_free(msg);
	journal_free(j);
	return r;
}

static int is_permanent_key(const struct journal *j, const char *key)
{
	size_t i;

	for (i = 0; i < j->n_perm; i++)
		if (strcmp(j->perm_keys[i], key) == 0)
			return 1;
	return 0;
}

int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	struct journal *j = handle;
	sqlite3 *db;
	int rc;

	if (!j || !m) {
		errf(err, errsz, "journal: called without handle or message");
		return SEMQ_PLUGIN_RETRY;
	}
	if (!tx || tx->db_kind != SEMQ_DB_SQLITE || !tx->db) {
		errf(err, errsz, "journal: needs a SQLite transaction");
		return SEMQ_PLUGIN_RETRY;
	}
	if (m->key && is_permanent_key(j, m->key)) {
		errf(err, errsz, "journal: key %s is listed in permanent_keys",
		     m->key);
		return SEMQ_PLUGIN_PERMANENT;
	}
	if (j->fail_rate > 0.0 && next_unit(j) < j->fail_rate) {
		errf(err, errsz, "journal: injected failure (fail_rate %g)",
		     j->fail_rate);
		return SEMQ_PLUGIN_RETRY;
	}

	db = tx->db;
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
			errf(err, errsz,
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
	sqlite3_bind_int64(j->ins, 7, now_ms());
	rc = sqlite3_step(j->ins);
	if (rc != SQLITE_DONE)
		errf(err, errsz, "journal: insert failed: %s",
		     sqlite3_errmsg(db));
	sqlite3_reset(j->ins);
	sqlite3_clear_bindings(j->ins);
	return rc == SQLITE_DONE ? SEMQ_PLUGIN_OK : SEMQ_PLUGIN_RETRY;
}

void semq_plugin_fini(void *handle)
{
	journal_free(handle);
}
