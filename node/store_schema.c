/* SPDX-License-Identifier: MIT */
/*
 * The schema: the migrations embedded from db/ and db/postgresql/ (one
 * runner for both back ends), the copy of an older database kept before it
 * is migrated, and the node's rows in semq_meta (its id, its life,
 * max_payload).
 */
#include "store_int.h"

#include <unistd.h>

#include <openssl/rand.h>

/* pg_advisory_xact_lock key of migrations and the node id check ('SEMQ'). */
#define MIGRATE_LOCK "1397050705"

/* ---- open, migrate, close ------------------------------------------------- */

static int latest_of(const struct migration *v, size_t n)
{
	int latest = 0;
	size_t i;

	for (i = 0; i < n; i++)
		if (v[i].version > latest)
			latest = v[i].version;
	return latest;
}

/* The migrations of this database's kind (one runner for both). */
static const struct migration *migrations_of(const struct store *st, size_t *n)
{
	*n = st->pg ? semq_pg_n_migrations : semq_n_migrations;
	return st->pg ? semq_pg_migrations : semq_migrations;
}

int store_schema_latest(void)
{
	return latest_of(semq_migrations, semq_n_migrations);
}

int store_migrated_from(const struct store *st)
{
	return st ? st->migrated_from : 0;
}

const char *store_backup(const struct store *st)
{
	return st ? st->backup : "";
}

uint64_t store_life(const struct store *st)
{
	return st ? st->life : SEMQ_LIFE_NONE;
}

int store_schema_version(struct store *st)
{
	return st ? st->schema_version : 0;
}

/* One integer from a one-off query (0 when NULL or no row); SEMQ_OK or a
 * failure described by db_errmsg(). */
static int query_int(struct store *st, const char *sql, int64_t *v)
{
	struct db_stmt *s = NULL;
	int r, rc;

	*v = 0;
	r = db_prepare(st->db, sql, &s);
	if (r)
		return r;
	rc = db_step(s);
	if (rc == DB_ROW)
		*v = db_col_int64(s, 0);
	r = rc < 0 ? rc : SEMQ_OK;
	db_finalize(s);
	return r;
}

/* Runs a one-off statement that may return rows and ignores them. */
static int query_run(struct store *st, const char *sql)
{
	struct db_stmt *s = NULL;
	int r, rc;

	r = db_prepare(st->db, sql, &s);
	if (r)
		return r;
	while ((rc = db_step(s)) == DB_ROW)
		;
	db_finalize(s);
	return rc < 0 ? rc : SEMQ_OK;
}

/* The version the database is at: max(semq_schema.version), 0 when new. */
static int schema_current(struct store *st, int *v)
{
	static const char lite_sql[] =
		"SELECT count(*) FROM sqlite_master WHERE type = 'table'"
		" AND name = 'semq_schema'";
	static const char pg_sql[] = "SELECT count(*) FROM pg_catalog.pg_tables"
				     " WHERE schemaname = current_schema()"
				     " AND tablename = 'semq_schema'";
	int64_t n = 0;
	int r;

	*v = 0;
	r = query_int(st, st->pg ? pg_sql : lite_sql, &n);
	if (r || n == 0)
		return r;
	r = query_int(st, "SELECT COALESCE(max(version), 0) FROM semq_schema",
		      &n);
	*v = n > INT_MAX ? INT_MAX : (int)n;
	return r;
}

static int too_new(struct store *st, int v, int latest)
{
	return seterr(st, SEMQ_ERR_VERSION,
		      "%s: schema version %d is newer than this SEMQ (knows up "
		      "to %d); use a newer semqd",
		      st->name, v, latest);
}

/* A failure while opening: the file is unreadable, the server is gone, or
 * the database is not ours. */
static int open_err(struct store *st, const char *what)
{
	enum db_errclass ec = db_errclass(st->db);
	const char *msg = db_errmsg(st->db);
	int code =
		ec == DB_E_FULL || ec == DB_E_LOST ? SEMQ_ERR_IO : SEMQ_ERR_DB;

	if (ec == DB_E_LOST)
		st->lost = 1;
	if (strstr(msg, "file is not a database"))
		return seterr(st, SEMQ_ERR_DB, "%s: not a SEMQ database (%s)",
			      st->name, msg);
	return seterr(st, code, "%s: %s: %s", st->name, what, msg);
}

/*
 * Begins a transaction of store_open(): BEGIN IMMEDIATE on SQLite; on
 * PostgreSQL BEGIN and a transaction-level advisory lock, so that of several
 * instances opening the database at the same moment one at a time migrates
 * or records the node id.
 */
static int open_begin(struct store *st)
{
	if (!st->pg)
		return db_exec(st->db, "BEGIN IMMEDIATE");
	if (db_exec(st->db, "BEGIN ISOLATION LEVEL READ COMMITTED"))
		return SEMQ_ERR_DB;
	return query_run(st, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK ")");
}

/*
 * Applies every embedded migration of this database's kind above its
 * version, each in one transaction (open_begin) with its semq_schema row. The
 * version is read again inside the transaction, so of two processes opening
 * a new database at once only the first migrates.
 */
/*
 * With the tables of version 1, in the same transaction, this node's id and
 * max_payload: an application that sees tb_0031 may insert at once (the
 * fill trigger needs the id). meta_sync() checks and updates them later.
 */
static int first_meta(struct store *st)
{
	static const char sql[] = "INSERT INTO semq_meta(key, value)"
				  " VALUES ('node_id', ?1), ('max_payload', ?2)"
				  " ON CONFLICT (key) DO NOTHING";
	struct db_stmt *s = NULL;
	char mp[32];
	int rc = db_prepare(st->db, sql, &s);

	if (rc == SEMQ_OK) {
		snprintf(mp, sizeof mp, "%zu", st->max_payload);
		db_bind_text(s, 1, st->node_id);
		db_bind_text(s, 2, mp);
		rc = db_step(s);
		rc = rc < 0 ? rc : SEMQ_OK;
	}
	db_finalize(s);
	return rc;
}

/*
 * SQLite: after a migration, schema_version + 1. DDL bumps it by itself; a
 * definition edited in place (PRAGMA writable_schema, as 0002 does) does not,
 * and every open connection would go on using the definition it parsed.
 */
static int bump_schema_cookie(struct store *st)
{
	struct db_stmt *s = NULL;
	char sql[64];
	int64_t v = -1;
	int rc = db_prepare(st->db, "PRAGMA schema_version", &s);

	if (rc == SEMQ_OK && (rc = db_step(s)) == DB_ROW) {
		v = db_col_int64(s, 0);
		rc = SEMQ_OK;
	}
	db_finalize(s);
	if (rc != SEMQ_OK || v < 0 || v >= INT32_MAX)
		return rc != SEMQ_OK ? rc : SEMQ_ERR_DB;
	snprintf(sql, sizeof sql, "PRAGMA schema_version = %" PRId64, v + 1);
	return db_exec(st->db, sql);
}

/*
 * The life of a new database (docs/PROTOCOL.md, "Lives of a node"): random,
 * never 0 (not given) or 1 (the legacy life), set in the transaction of
 * migration 3 unless that migration kept the legacy life of a database
 * that had sent messages. An application that sees tb_0031 may insert at
 * once: the fill trigger needs it.
 */
static int life_meta(struct store *st)
{
	static const char sql[] = "INSERT INTO semq_meta(key, value)"
				  " VALUES ('life', ?1)"
				  " ON CONFLICT (key) DO NOTHING";
	struct db_stmt *s = NULL;
	uint64_t life = 0;
	char v[32];
	int rc;

	while (life == SEMQ_LIFE_NONE || life == SEMQ_LIFE_LEGACY ||
	       life > (uint64_t)INT64_MAX)
		if (RAND_bytes((unsigned char *)&life, sizeof life) != 1)
			return seterr(st, SEMQ_ERR_INTERNAL,
				      "%s: no random bytes for the database's "
				      "life id",
				      st->name);
	/* Kept as signed 64-bit text: the column is TEXT, the tables'
	 * life columns are 64-bit integers; positive, so both read alike. */
	snprintf(v, sizeof v, "%" PRId64, (int64_t)life);
	rc = db_prepare(st->db, sql, &s);
	if (rc == SEMQ_OK) {
		db_bind_text(s, 1, v);
		rc = db_step(s);
		rc = rc < 0 ? rc : SEMQ_OK;
	}
	db_finalize(s);
	return rc;
}

/*
 * Before an existing database at schema version `from` is migrated, a copy
 * of it as it is: SQLite, a file beside it (DB.schemaN.bak, or .bak.1,
 * .bak.2 ... when that exists); PostgreSQL, a schema beside the current one
 * (CURRENT_schemaN_bak, or ..._bakK) holding a copy of every SEMQ table.
 * st->backup names it for the log.
 */
static int keep_copy(struct store *st, int from)
{
	char path[STORE_ERRMAX], sql[2048];
	struct db_stmt *s = NULL;
	int rc, k;

	if (!st->pg) {
		for (k = 0; k < 1000; k++) {
			if (k)
				snprintf(path, sizeof path,
					 "%s.schema%d.bak.%d", st->name, from,
					 k);
			else
				snprintf(path, sizeof path, "%s.schema%d.bak",
					 st->name, from);
			if (access(path, F_OK) != 0)
				break;
		}
		rc = db_prepare(st->db, "VACUUM INTO ?1", &s);
		if (rc == SEMQ_OK) {
			db_bind_text(s, 1, path);
			rc = db_step(s);
			rc = rc < 0 ? rc : SEMQ_OK;
		}
		db_finalize(s);
		if (rc != SEMQ_OK)
			return seterr(st, SEMQ_ERR_IO,
				      "%s: cannot keep a copy before migrating "
				      "it from schema %d (%s): %s; free some "
				      "space or copy it yourself and retry",
				      st->name, from, path, db_errmsg(st->db));
		snprintf(st->backup, sizeof st->backup, "%s", path);
		return SEMQ_OK;
	}
	snprintf(
		sql, sizeof sql,
		"DO $copy$ DECLARE src text := current_schema();"
		" dst text := current_schema() || '_schema%d_bak';"
		" n int := 0; t text; BEGIN"
		" WHILE EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = dst)"
		" LOOP n := n + 1; dst := src || '_schema%d_bak' || n;"
		" END LOOP;"
		" EXECUTE format('CREATE SCHEMA %%I', dst);"
		" FOREACH t IN ARRAY ARRAY['semq_schema', 'semq_meta',"
		" 'semq_stream_out', 'semq_stream_in', 'tb_0031', 'tb_0030',"
		" 'tb_0033'] LOOP EXECUTE format('CREATE TABLE %%I.%%I AS"
		" TABLE %%I.%%I', dst, t, src, t); END LOOP;"
		" PERFORM set_config('semq.backup', dst, true); END $copy$",
		from, from);
	rc = open_begin(st);
	if (rc == SEMQ_OK)
		rc = db_exec(st->db, sql);
	if (rc == SEMQ_OK)
		rc = db_prepare(st->db,
				"SELECT current_setting('semq.backup', true)",
				&s);
	if (rc == SEMQ_OK && (rc = db_step(s)) == DB_ROW) {
		snprintf(st->backup, sizeof st->backup, "schema %s of %s",
			 db_col_text(s, 0) ? db_col_text(s, 0) : "?", st->name);
		rc = SEMQ_OK;
	}
	db_finalize(s);
	if (rc == SEMQ_OK)
		rc = db_exec(st->db, "COMMIT");
	if (rc != SEMQ_OK) {
		int r = seterr(st, SEMQ_ERR_DB,
			       "%s: cannot keep a copy before migrating it "
			       "from schema %d: %s",
			       st->name, from, db_errmsg(st->db));
		if (db_in_tx(st->db))
			db_exec(st->db, "ROLLBACK");
		return r;
	}
	return SEMQ_OK;
}

int store__migrate(struct store *st)
{
	static const char create_lite[] =
		"CREATE TABLE IF NOT EXISTS semq_schema ("
		" version INTEGER PRIMARY KEY, name TEXT, applied_at INTEGER)";
	static const char create_pg[] =
		"CREATE TABLE IF NOT EXISTS semq_schema ("
		" version INTEGER PRIMARY KEY, name TEXT, applied_at BIGINT)";
	static const char insert_lite[] =
		"INSERT INTO semq_schema(version, name, applied_at)"
		" VALUES (?1, ?2, CAST((julianday('now') - 2440587.5)"
		" * 86400000.0 AS INTEGER))";
	static const char insert_pg[] =
		"INSERT INTO semq_schema(version, name, applied_at)"
		" VALUES (?1, ?2, (extract(epoch FROM clock_timestamp())"
		" * 1000)::bigint)";
	size_t n_mig;
	const struct migration *mig = migrations_of(st, &n_mig);
	const int latest = latest_of(mig, n_mig);
	struct db_stmt *s = NULL;
	int r = SEMQ_ERR_INTERNAL, rc, cur = 0;
	size_t i;

	if (schema_current(st, &cur)) {
		r = open_err(st, "reading the schema version");
		goto out;
	}
	if (cur > latest) {
		r = too_new(st, cur, latest);
		goto out;
	}
	if (cur == 0 && st->no_create) {
		r = seterr(st, SEMQ_ERR_NOT_FOUND,
			   "database %s has no SEMQ schema", st->name);
		goto out;
	}
	st->migrated_from = cur;
	if (cur >= 1 && cur < latest) {
		r = keep_copy(st, cur);
		if (r)
			goto out;
	}
	for (i = 0; i < n_mig; i++) {
		const struct migration *mg = &mig[i];

		if (mg->version <= cur)
			continue;
		if (open_begin(st)) {
			r = open_err(st, "beginning a migration");
			goto out;
		}
		if (db_exec(st->db, st->pg ? create_pg : create_lite) ||
		    schema_current(st, &cur)) {
			r = open_err(st, "reading the schema version");
			goto out;
		}
		if (cur > latest) {
			r = too_new(st, cur, latest);
			goto out;
		}
		if (cur >= mg->version) { /* another process was first */
			if (db_exec(st->db, "COMMIT")) {
				r = open_err(st, "commit");
				goto out;
			}
			continue;
		}
		if (db_exec(st->db, mg->sql) ||
		    (mg->version == 1 && first_meta(st)) ||
		    (mg->version == 3 && life_meta(st)) ||
		    (!st->pg && bump_schema_cookie(st))) {
			r = seterr(st, SEMQ_ERR_DB,
				   "%s: migration %s failed: %s", st->name,
				   mg->name, db_errmsg(st->db));
			goto out;
		}
		rc = db_prepare(st->db, st->pg ? insert_pg : insert_lite, &s);
		if (rc == SEMQ_OK) {
			db_bind_int64(s, 1, mg->version);
			db_bind_text(s, 2, mg->name);
			rc = db_step(s);
			rc = rc < 0 ? rc : SEMQ_OK;
		}
		db_finalize(s);
		s = NULL;
		if (rc == SEMQ_OK)
			rc = db_exec(st->db, "COMMIT");
		if (rc != SEMQ_OK) {
			r = seterr(st, SEMQ_ERR_DB,
				   "%s: recording migration %s: %s", st->name,
				   mg->name, db_errmsg(st->db));
			goto out;
		}
		cur = mg->version;
	}
	st->schema_version = cur;
	r = SEMQ_OK;
out:
	db_finalize(s);
	if (r != SEMQ_OK && db_in_tx(st->db))
		db_exec(st->db, "ROLLBACK");
	return r;
}

/* semq_meta: the node id (set once, then checked), the life (read) and
 * max_payload. */
int store__meta_sync(struct store *st)
{
	static const char get_sql[] =
		"SELECT value FROM semq_meta WHERE key = 'node_id'";
	static const char life_sql[] = "SELECT CAST(value AS BIGINT) FROM "
				       "semq_meta WHERE key = 'life'";
	static const char put_sql[] =
		"INSERT INTO semq_meta(key, value) VALUES (?1, ?2)"
		" ON CONFLICT (key) DO UPDATE SET value = excluded.value";
	struct db_stmt *s = NULL;
	char have[SEMQ_ID_MAX + 1] = "", mp[32];
	int r = SEMQ_ERR_INTERNAL, rc, found = 0;
	int64_t life = 0;

	if (open_begin(st)) {
		r = open_err(st, "begin");
		goto out;
	}
	rc = db_prepare(st->db, get_sql, &s);
	if (rc == SEMQ_OK) {
		rc = db_step(s);
		if (rc == DB_ROW) {
			found = 1;
			col_text(have, sizeof have, s, 0);
		}
		rc = rc < 0 ? rc : SEMQ_OK;
	}
	db_finalize(s);
	s = NULL;
	if (rc != SEMQ_OK) {
		r = open_err(st, "reading semq_meta");
		goto out;
	}
	if (found && strcmp(have, st->node_id) != 0) {
		r = seterr(st, SEMQ_ERR_INVALID,
			   "%s: belongs to node '%s', not to node '%s'",
			   st->name, have, st->node_id);
		goto out;
	}
	rc = db_prepare(st->db, life_sql, &s);
	if (rc == SEMQ_OK) {
		rc = db_step(s);
		if (rc == DB_ROW)
			life = db_col_int64(s, 0);
		rc = rc < 0 ? rc : SEMQ_OK;
	}
	db_finalize(s);
	s = NULL;
	if (rc != SEMQ_OK) {
		r = open_err(st, "reading semq_meta");
		goto out;
	}
	if (life <= 0) {
		r = seterr(st, SEMQ_ERR_DB,
			   "%s: semq_meta has no valid life (%" PRId64
			   "); the database was edited by hand",
			   st->name, life);
		goto out;
	}
	st->life = (uint64_t)life;
	rc = db_prepare(st->db, put_sql, &s);
	if (rc == SEMQ_OK && !found) {
		db_bind_text(s, 1, "node_id");
		db_bind_text(s, 2, st->node_id);
		rc = db_step(s);
		rc = rc < 0 ? rc : SEMQ_OK;
		db_reset(s);
	}
	if (rc == SEMQ_OK) {
		/* as text: the column is TEXT on both databases */
		snprintf(mp, sizeof mp, "%zu", st->max_payload);
		db_bind_text(s, 1, "max_payload");
		db_bind_text(s, 2, mp);
		rc = db_step(s);
		rc = rc < 0 ? rc : SEMQ_OK;
	}
	db_finalize(s);
	s = NULL;
	if (rc == SEMQ_OK)
		rc = db_exec(st->db, "COMMIT");
	if (rc != SEMQ_OK) {
		r = open_err(st, "writing semq_meta");
		goto out;
	}
	r = SEMQ_OK;
out:
	db_finalize(s);
	if (r != SEMQ_OK && db_in_tx(st->db))
		db_exec(st->db, "ROLLBACK");
	return r;
}
