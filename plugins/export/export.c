/* SPDX-License-Identifier: MIT */
/*
 * export: the plugin that copies every document it handles into a table of
 * an EXTERNAL PostgreSQL database — the data platform of the design notes
 * ("export every received document to the data platform"), not the node's
 * own database. Each message becomes one row of
 *
 *   semq_export(origin text, dest text, seq bigint, type bigint,
 *               msg_key text, created_at bigint, payload bytea,
 *               exported_at timestamptz default now(),
 *               PRIMARY KEY (origin, dest, seq))
 *
 * (the table's name is an option), written on the plugin's own libpq
 * connection in autocommit with INSERT ... ON CONFLICT (origin, dest, seq)
 * DO NOTHING. It never touches tx->db, so the node's own database may be
 * SQLite or PostgreSQL. Options:
 *
 *   conninfo = postgresql://...  the external database (required): a libpq
 *                                URL or key=value connection string
 *   table = semq_export          the table (default semq_export): a plain
 *                                SQL name [a-z_][a-z0-9_]*, at most 63
 *                                characters; created if missing
 *
 * EXACTLY ONCE, although two commits: the row commits in the external
 * database when the INSERT returns, before the node's transaction that
 * records the message as received commits, and independently of it. What
 * makes the pair exactly once is that (origin, dest, seq) — the message id,
 * which the node never reuses for another document it applies — is the
 * table's primary key:
 *  - both commit: one row;
 *  - the export commits and the node's transaction does not (a later
 *    message of the batch fails and the batch is rolled back, the node is
 *    killed before its COMMIT, the disk is full): the message is not
 *    recorded, so the host runs it again (one transaction per message) or the
 *    sender sends it again; the second INSERT meets the row, inserts nothing
 *    and the call returns OK. Still one row;
 *  - the INSERT's answer is lost (the connection drops after the server
 *    committed, or before): the call returns RETRY, the host records the
 *    message in its redo queue, and the re-run either inserts the row or
 *    meets it. One row;
 *  - the export fails: RETRY, the host rolls its savepoint back and runs
 *    the message again from the redo queue later.
 * A crash anywhere in between is one of these cases. The one thing the two
 * commits cannot give: a message whose INSERT committed and whose node
 * transaction did not, and which the node then never applies (its origin
 * cancels it before it is run again, or an operator discards it from the
 * redo queue after an attempt whose answer was lost), keeps its row. The
 * table holds every document the node applied exactly once, and in those
 * rare cases one more; join with the node's tb_0030 to reconcile.
 *
 * DESIGN:
 *  - A row already there for the same (origin, dest, seq) is never
 *    overwritten, whatever its payload, and the call is OK: the first export
 *    stays. Under one message id the node applies one document only (a
 *    restored origin that hands out a seq again is refused by the receiver
 *    as a CONFLICT and renumbers its message, docs/PROTOCOL.md "Lives of a
 *    node"), so the row is that document and the same payload is the
 *    normal case: a re-run. A different payload means the table has a row
 *    from another timeline; keeping the first is the only choice that never
 *    rewrites what the data platform may have read already. Known limit:
 *    a RE-IMAGED origin (a new life) counts its seqs from 1 again, and ABI 1
 *    does not hand the life to a plugin, so its documents whose seqs the old
 *    life used are NOT exported (they are applied at the node; here they
 *    meet the old life's rows).
 *  - Any error on the connection (it is lost, the server refuses, the table
 *    was dropped) returns RETRY with one line, and the connection is closed;
 *    the next call connects again, creates the table if it is missing and
 *    prepares the INSERT. After a failed connection attempt the calls of the
 *    next RECONNECT_HOLD_MS return RETRY with the same reason without
 *    trying: a batch of many messages then waits for one connect timeout,
 *    not one per message. The host's redo queue is the retry loop.
 *  - The store worker waits for every call, so the connection gets bounded
 *    defaults that conninfo may override: connect_timeout 5 s, TCP keepalives
 *    after 10 s idle (3 probes 5 s apart), tcp_user_timeout 10 s and
 *    statement_timeout 20 s (`options`), so a vanished server or a lock held
 *    by someone else fails the call within about half a minute, near
 *    [node] plugin_timeout (30 s). Also client_encoding UTF8 (msg_key is
 *    UTF-8) and application_name "semq-export NODE".
 *  - type is BIGINT, not INTEGER: a message type is 0..4294967295, and
 *    PostgreSQL's INTEGER stops at 2147483647.
 *  - init checks the options, then tries to connect and create the table. A
 *    server that cannot be reached, or fails in a way that may pass (a lock
 *    timeout, a shutdown), is not an init failure: the documents wait in the
 *    redo queue until it works, and semqd starts. A server that refuses the
 *    table or the INSERT for good (SQLSTATE class 42: no grant, a table of
 *    that name with other columns or without the primary key) is: init fails
 *    naming it, so `semqd --check` reports it.
 *  - The table is created under a transaction-scoped advisory lock in one DO
 *    block, so several handles or nodes starting at once do not race on
 *    CREATE TABLE IF NOT EXISTS; its NOTICE ("already exists, skipping") is
 *    dropped by the connection's notice processor, since the connection is
 *    the plugin's own.
 *  - The host may create several handles of this plugin, one per store
 *    worker thread (init once per worker, each handle used by one thread
 *    only). All state is in the handle, each with its own PGconn; there is
 *    no mutable global, and a prepared statement's fixed name is per
 *    connection.
 */
#include <semq/plugin.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "plugcommon.h"

/* The ABI entry points (include/semq/plugin.h), looked up by name. */
int semq_plugin_abi_version(void);
int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz);
int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err,
		       size_t errsz);
void semq_plugin_fini(void *handle);

#define OPTIONS_TEXT "(conninfo, table)"
#define TABLE_DEFAULT "semq_export"
#define TABLE_MAX 63 /* NAMEDATALEN - 1 */
#define RECONNECT_HOLD_MS 1000
#define WHY_MAX 200
#define INS_NAME "semq_export_ins" /* on the plugin's own connection */

/* One handle: made by init for one store worker, used by its thread only. */
struct exporter {
	char *conninfo; /* owned: the option, never shown (password) */
	char table[TABLE_MAX + 1];
	char appname[96];        /* application_name */
	PGconn *pg;              /* owned; NULL when not connected */
	int64_t failed_at;       /* monotonic ms of the last failed connection
				 * attempt, 0 when the last one worked */
	char why[WHY_MAX + 120]; /* why that attempt failed */
};

/* The notices of CREATE TABLE IF NOT EXISTS are not worth a line on semqd's
 * stderr. */
static void quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

static void export_free(struct exporter *x)
{
	if (!x)
		return;
	PQfinish(x->pg);
	free(x->conninfo);
	free(x);
}

/* table: [a-z_][a-z0-9_]*, 1..TABLE_MAX characters. */
static int table_ok(const char *v)
{
	size_t i, n = strlen(v);

	if (n == 0 || n > TABLE_MAX ||
	    !((v[0] >= 'a' && v[0] <= 'z') || v[0] == '_'))
		return 0;
	for (i = 1; i < n; i++)
		if (!((v[i] >= 'a' && v[i] <= 'z') ||
		      (v[i] >= '0' && v[i] <= '9') || v[i] == '_'))
			return 0;
	return 1;
}

/* Checks that v is a connection string or URL libpq can parse. */
static int parse_conninfo(const char *where, const char *v, char *err,
			  size_t errsz)
{
	char *msg = NULL; /* PQfreemem */
	PQconninfoOption *opts;

	if (!v[0]) {
		plug_errf(err, errsz,
			  "export: %s: conninfo is empty (a postgresql:// URL "
			  "or a "
			  "libpq connection string of the external database)",
			  where);
		return -1;
	}
	opts = PQconninfoParse(v, &msg);
	if (!opts) {
		plug_errf(
			err, errsz,
			"export: %s: conninfo is not a libpq connection string "
			"or URL: %.*s",
			where, msg ? (int)strcspn(msg, "\n") : 13,
			msg ? msg : "out of memory");
		PQfreemem(msg);
		return -1;
	}
	PQconninfoFree(opts);
	return 0;
}

/*
 * -2 when res is the server saying no for good (SQLSTATE class 42: no grant,
 * no such column, no unique key for ON CONFLICT, ...), else -1 (a timeout, a
 * lock, a shutdown, the connection: it may pass).
 */
static int refusal(const PGresult *res)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return state && strncmp(state, "42", 2) == 0 ? -2 : -1;
}

/*
 * Connected: creates the table if it is missing and prepares the INSERT on
 * x->pg. 0, or with x->why -2 when the server refused it for good (refusal),
 * else -1.
 */
static int prepare(struct exporter *x)
{
	char sql[640];
	PGresult *res;
	int r;

	snprintf(
		sql, sizeof sql,
		"DO $semq$ BEGIN "
		"PERFORM pg_advisory_xact_lock(1936026993, 3); " /* 'semq', 3 */
		"CREATE TABLE IF NOT EXISTS \"%s\"("
		"origin TEXT, dest TEXT, seq BIGINT, type BIGINT, "
		"msg_key TEXT, created_at BIGINT, payload BYTEA, "
		"exported_at TIMESTAMPTZ DEFAULT now(), "
		"PRIMARY KEY (origin, dest, seq)); END $semq$",
		x->table);
	res = PQexec(x->pg, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		char why[WHY_MAX];

		plug_pg_why(res, x->pg, why, sizeof why);
		snprintf(x->why, sizeof x->why, "cannot create table %s: %s",
			 x->table, why);
		r = refusal(res);
		PQclear(res);
		return r;
	}
	PQclear(res);
	snprintf(sql, sizeof sql,
		 "INSERT INTO \"%s\"(origin, dest, seq, type, msg_key, "
		 "created_at, payload) VALUES ($1, $2, $3, $4, $5, $6, $7) "
		 "ON CONFLICT (origin, dest, seq) DO NOTHING",
		 x->table);
	res = PQprepare(x->pg, INS_NAME, sql, 7, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		char why[WHY_MAX];

		plug_pg_why(res, x->pg, why, sizeof why);
		snprintf(x->why, sizeof x->why,
			 "cannot prepare the insert into %s: %s", x->table,
			 why);
		r = refusal(res);
		PQclear(res);
		return r;
	}
	PQclear(res);
	/* Planned only when run: the plan finds ON CONFLICT's unique key (a
	 * table without one fails here, not at every message). */
	res = PQexec(x->pg, "EXPLAIN EXECUTE " INS_NAME
			    "(NULL, NULL, NULL, NULL, NULL, NULL, NULL)");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		char why[WHY_MAX];

		plug_pg_why(res, x->pg, why, sizeof why);
		snprintf(x->why, sizeof x->why,
			 "cannot plan the insert into %s: %s", x->table, why);
		r = refusal(res);
		PQclear(res);
		return r;
	}
	PQclear(res);
	return 0;
}

/*
 * Opens x->pg and prepares it. 0 when ready; -1 with x->why when the server
 * could not be reached, did not let us in or failed in a way that may pass;
 * -2 with x->why when it refused the table or the statement for good. x->pg
 * is NULL after a failure.
 */
static int connect_export(struct exporter *x)
{
	/* The defaults, then dbname, whose expansion (the conninfo) overrides
	 * them: libpq keeps the last value of a keyword. */
	static const char *const defaults[][2] = {
		{"connect_timeout", "5"},
		{"keepalives_idle", "10"},
		{"keepalives_interval", "5"},
		{"keepalives_count", "3"},
		{"tcp_user_timeout", "10000"},
		{"options", "-c statement_timeout=20000"},
		{"client_encoding", "UTF8"},
	};
	enum { N_DEFAULTS = sizeof defaults / sizeof defaults[0] };
	const char *keys[N_DEFAULTS + 3], *vals[N_DEFAULTS + 3];
	size_t i;
	int r;

	for (i = 0; i < N_DEFAULTS; i++) {
		keys[i] = defaults[i][0];
		vals[i] = defaults[i][1];
	}
	keys[i] = "application_name";
	vals[i++] = x->appname;
	keys[i] = "dbname";
	vals[i++] = x->conninfo;
	keys[i] = NULL;
	vals[i] = NULL;
	x->pg = PQconnectdbParams(keys, vals, 1);
	if (!x->pg) {
		snprintf(x->why, sizeof x->why, "out of memory");
		r = -1;
		goto fail;
	}
	if (PQstatus(x->pg) != CONNECTION_OK) {
		char why[WHY_MAX];

		plug_pg_why(NULL, x->pg, why, sizeof why);
		snprintf(x->why, sizeof x->why,
			 "cannot connect to the external database: %s", why);
		r = -1;
		goto fail;
	}
	PQsetNoticeProcessor(x->pg, quiet, NULL);
	r = prepare(x);
	if (r != 0)
		goto fail;
	x->failed_at = 0;
	x->why[0] = '\0';
	return 0;
fail:
	PQfinish(x->pg);
	x->pg = NULL;
	x->failed_at = plug_mono_ms();
	if (x->failed_at == 0)
		x->failed_at = 1;
	return r;
}

int semq_plugin_abi_version(void)
{
	return SEMQ_PLUGIN_ABI_VERSION;
}

int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz)
{
	int r = SEMQ_PLUGIN_PERMANENT;
	struct exporter *x = NULL;
	int seen_table = 0;
	size_t i;

	if (!a || !handle_out) {
		plug_errf(err, errsz, "export: init called without arguments");
		goto out;
	}
	if (a->n_options > 0 && !a->options) {
		plug_errf(err, errsz, "export: %zu options but no list",
			  a->n_options);
		goto out;
	}
	x = calloc(1, sizeof *x);
	if (!x) {
		plug_errf(err, errsz, "export: out of memory");
		goto out;
	}
	snprintf(x->table, sizeof x->table, "%s", TABLE_DEFAULT);
	snprintf(x->appname, sizeof x->appname, "semq-export %.64s",
		 a->node_id ? a->node_id : "");
	for (i = 0; i < a->n_options; i++) {
		const struct semq_plugin_option *o = &a->options[i];
		const char *where = o->where ? o->where : "options";
		const char *k = o->key ? o->key : "";
		const char *v = o->value ? o->value : "";

		if (strcmp(k, "conninfo") == 0) {
			if (x->conninfo) {
				plug_errf(err, errsz,
					  "export: %s: conninfo given twice",
					  where);
				goto out;
			}
			if (parse_conninfo(where, v, err, errsz))
				goto out;
			x->conninfo = strdup(v);
			if (!x->conninfo) {
				plug_errf(err, errsz, "export: out of memory");
				goto out;
			}
		} else if (strcmp(k, "table") == 0) {
			if (seen_table) {
				plug_errf(err, errsz,
					  "export: %s: table given twice",
					  where);
				goto out;
			}
			seen_table = 1;
			if (!table_ok(v)) {
				plug_errf(err, errsz,
					  "export: %s: table '%.80s' is not a "
					  "name "
					  "of 1 to 63 of a-z, 0-9 and _ that "
					  "does "
					  "not start with a digit",
					  where, v);
				goto out;
			}
			snprintf(x->table, sizeof x->table, "%s", v);
		} else {
			plug_errf(
				err, errsz,
				"export: %s: unknown option '%s' " OPTIONS_TEXT,
				where, k);
			goto out;
		}
	}
	if (!x->conninfo) {
		plug_errf(
			err, errsz,
			"export: [plugin %s]: option conninfo is missing (the "
			"external database: conninfo = postgresql://...)",
			a->name ? a->name : "export");
		goto out;
	}
	/* Unreachable is fine (the first calls say so and RETRY); a server
	 * that refuses the table is a configuration to fix. A server that is
	 * only slow to answer (a start-up, a busy machine) gets two more
	 * tries, a second apart, so that the table exists once semqd is up
	 * whenever the server is; what failed is said on stderr (semqd's
	 * log), since init has no other voice for a failure it survives. */
	for (i = 0; i < 3; i++) {
		int c = connect_export(x);

		if (c == -2) {
			plug_errf(err, errsz, "export: %s", x->why);
			goto out;
		}
		if (c == 0)
			break;
		fprintf(stderr, "export: [plugin %s]: %s%s\n",
			a->name ? a->name : "export", x->why,
			i < 2 ? "; trying again in 1 s"
			      : "; the documents wait in the redo queue "
				"until it answers");
		if (i < 2)
			sleep(1);
	}
	*handle_out = x;
	x = NULL;
	r = SEMQ_PLUGIN_OK;
out:
	export_free(x);
	return r;
}

int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	struct exporter *x = handle;
	char seq[24], type[24], created[24], why[WHY_MAX];
	const char *v[7];
	int len[7] = {0}, fmt[7] = {0};
	PGresult *res;

	(void)tx; /* the node's database is not the export's */
	if (!x || !m) {
		plug_errf(err, errsz,
			  "export: called without handle or message");
		return SEMQ_PLUGIN_RETRY;
	}
	if (m->payload_len > INT32_MAX) {
		plug_errf(err, errsz,
			  "export: payload of %zu bytes is too large",
			  m->payload_len);
		return SEMQ_PLUGIN_PERMANENT;
	}
	if (!x->pg) {
		if (x->failed_at &&
		    plug_mono_ms() - x->failed_at < RECONNECT_HOLD_MS) {
			plug_errf(err, errsz, "export: %s", x->why);
			return SEMQ_PLUGIN_RETRY;
		}
		if (connect_export(x) != 0) {
			plug_errf(err, errsz, "export: %s", x->why);
			return SEMQ_PLUGIN_RETRY;
		}
	}
	snprintf(seq, sizeof seq, "%lld", (long long)(int64_t)m->seq);
	snprintf(type, sizeof type, "%lu", (unsigned long)m->type);
	snprintf(created, sizeof created, "%lld", (long long)m->created_at);
	v[0] = m->origin;
	v[1] = m->dest;
	v[2] = seq;
	v[3] = type;
	v[4] = m->key; /* NULL: SQL NULL */
	v[5] = created;
	/* bytea in binary: the bytes as they are; "" (not NULL) when empty */
	v[6] = m->payload ? (const char *)m->payload : "";
	len[6] = (int)m->payload_len;
	fmt[6] = 1;
	res = PQexecPrepared(x->pg, INS_NAME, 7, v, len, fmt, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		plug_pg_why(res, x->pg, why, sizeof why);
		plug_errf(err, errsz, "export: insert into %s failed: %s",
			  x->table, why);
		PQclear(res);
		/* Lost, or in a state we do not know: start afresh next call
		 * (without the hold-off: the server was there). */
		PQfinish(x->pg);
		x->pg = NULL;
		return SEMQ_PLUGIN_RETRY;
	}
	PQclear(res);
	return SEMQ_PLUGIN_OK;
}

void semq_plugin_fini(void *handle)
{
	export_free(handle);
}
