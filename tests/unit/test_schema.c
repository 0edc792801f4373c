/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the schema (db/0001_init.sql) as the store migrates it.
 *
 * Migration: an empty file gets every table and the latest version; opening
 * again changes nothing; a file from a newer SEMQ, a file of another node and a
 * file that is not a database are refused with a message naming the file.
 *
 * The tb_0031 fill trigger (SPEC §3, §4): a bare
 * `INSERT INTO tb_0031(dest, type, msg_key, payload)` from any application gets
 * origin = this node, the next seq of its stream (gapless, never reused, also
 * under concurrent writers in threads and in processes), prev_seq = the
 * previous seq of its key, created_at = now and status 0; bad input is refused
 * with a message that names the column.
 *
 * Every test works on real files in its own mkdtemp directory under $TMPDIR:
 * the database is opened once through store_open() (node R1) so the migration
 * runs, then used over plain sqlite3 connections, as an application would.
 */
#define _GNU_SOURCE /* nftw */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store.h"

#define NODE "R1"
#define BUSY_MS 5000
#define PER_WRITER 500 /* rows each concurrent writer inserts */

/* One test's world: a temp dir, the node database in it, the store that
 * migrated it (may be closed by a test: NULL then) and an application's plain
 * connection to the same file. All owned by the fixture. */
struct fx {
	char dir[PATH_MAX / 2];
	char path[PATH_MAX];
	struct store *st;
	sqlite3 *db;
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Opens `path` as node `node` through the store; the test fails unless it
 * works. The caller frees *out with store_free(). */
static void open_store(const char *path, const char *node, size_t max_payload,
		       struct store **out)
{
	struct store_opts o = {.path = path,
			       .node_id = node,
			       .max_payload = max_payload,
			       .synchronous = -1};
	char err[SEMQ_ERRLEN] = "";
	int r = store_open(&o, out, err, sizeof err);

	if (r != SEMQ_OK)
		fail_msg("store_open %s: %d %s", path, r, err);
	assert_non_null(*out);
}

/* An application's connection to the node database (caller closes). */
static sqlite3 *app_open(const char *path)
{
	sqlite3 *db = NULL;
	int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);

	if (rc != SQLITE_OK)
		fail_msg("open %s: %s", path, db ? sqlite3_errmsg(db) : "?");
	sqlite3_busy_timeout(db, BUSY_MS);
	return db;
}

static void exec_ok(sqlite3 *db, const char *sql)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		fail_msg("%s: %s", sql, msg ? msg : "?");
		sqlite3_free(msg); /* not reached: fail_msg jumps */
	}
}

/* The first column of the first row of `sql` (no parameters) as an integer. */
static int64_t q_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int64_t v;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_finalize(st);
		fail_msg("%s: no row (%s)", sql, sqlite3_errmsg(db));
	}
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* A bare application insert of one message to `dest` with key `key` (NULL
 * binds NULL). Returns the SQLite result code; *id_out gets the row id. */
static int app_insert(sqlite3 *db, const char *dest, const char *key,
		      int64_t *id_out)
{
	static const char sql[] = "INSERT INTO tb_0031(dest, type, msg_key, "
				  "payload) VALUES (?1, 2800, ?2, x'00')";
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_text(st, 1, dest, -1, SQLITE_STATIC);
	if (key)
		sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 2);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_DONE && id_out)
		*id_out = sqlite3_last_insert_rowid(db);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* What the trigger made of one tb_0031 row. */
struct row {
	char origin[SEMQ_ID_MAX + 1];
	char dest[SEMQ_ID_MAX + 1];
	int64_t seq, type, prev_seq, deliver_at, created_at, status;
	int key_null;
	char key[SEMQ_KEY_MAX + 1];
	int64_t payload_len;
	char payload_type[8];
};

static void get_row(sqlite3 *db, int64_t id, struct row *r)
{
	static const char sql[] =
		"SELECT origin, dest, seq, type, prev_seq, deliver_at,"
		" created_at, status, msg_key, length(payload),"
		" typeof(payload), typeof(origin), typeof(seq)"
		" FROM tb_0031 WHERE id = ?1";
	sqlite3_stmt *st = NULL;
	const unsigned char *s;

	memset(r, 0, sizeof *r);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s", sqlite3_errmsg(db));
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_finalize(st);
		fail_msg("tb_0031 row %lld missing", (long long)id);
	}
	/* origin and seq must be real values, not NULL left by the trigger */
	assert_string_equal(sqlite3_column_text(st, 11), "text");
	assert_string_equal(sqlite3_column_text(st, 12), "integer");
	snprintf(r->origin, sizeof r->origin, "%s", sqlite3_column_text(st, 0));
	snprintf(r->dest, sizeof r->dest, "%s", sqlite3_column_text(st, 1));
	r->seq = sqlite3_column_int64(st, 2);
	r->type = sqlite3_column_int64(st, 3);
	r->prev_seq = sqlite3_column_int64(st, 4);
	r->deliver_at = sqlite3_column_int64(st, 5);
	r->created_at = sqlite3_column_int64(st, 6);
	r->status = sqlite3_column_int64(st, 7);
	r->key_null = sqlite3_column_type(st, 8) == SQLITE_NULL;
	s = sqlite3_column_text(st, 8);
	snprintf(r->key, sizeof r->key, "%s", s ? (const char *)s : "");
	r->payload_len = sqlite3_column_int64(st, 9);
	snprintf(r->payload_type, sizeof r->payload_type, "%s",
		 sqlite3_column_text(st, 10));
	sqlite3_finalize(st);
}

/* ---- fixture -------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	return remove(p);
}

static void rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static struct fx *fx_new(size_t max_payload)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof *f);

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "%s/semq-schema-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(f->dir))
		fail_msg("mkdtemp %s: %s", f->dir, strerror(errno));
	snprintf(f->path, sizeof f->path, "%s/r1.db", f->dir);
	open_store(f->path, NODE, max_payload, &f->st);
	f->db = app_open(f->path);
	return f;
}

static int setup(void **state)
{
	*state = fx_new(0);
	return 0;
}

/* For the bad-input tests: a node whose max_payload is 1024 bytes. */
static int setup_small(void **state)
{
	*state = fx_new(1024);
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (!f)
		return 0;
	sqlite3_close(f->db);
	store_free(f->st);
	rm_tree(f->dir);
	free(f);
	return 0;
}

/* Does `s` contain the number n as a whole token (no digit on either side)? */
static int has_number(const char *s, long n)
{
	char num[32];
	size_t len = (size_t)snprintf(num, sizeof num, "%ld", n);
	const char *p = s;

	while ((p = strstr(p, num)) != NULL) {
		int before = p > s && p[-1] >= '0' && p[-1] <= '9';
		int after = p[len] >= '0' && p[len] <= '9';
		if (!before && !after)
			return 1;
		p++;
	}
	return 0;
}

/* ---- migration ------------------------------------------------------------ */

static const char *const tables[] = {
	"tb_0031",        "tb_0030",   "tb_0033",     "semq_stream_out",
	"semq_stream_in", "semq_meta", "semq_schema",
};

static int64_t table_exists(sqlite3 *db, const char *name)
{
	sqlite3_stmt *st = NULL;
	int64_t n;

	assert_int_equal(
		sqlite3_prepare_v2(db,
				   "SELECT count(*) FROM sqlite_master"
				   " WHERE type = 'table' AND name = ?1",
				   -1, &st, NULL),
		SQLITE_OK);
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static void test_migrate_empty_file(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	struct store *st = NULL;
	sqlite3 *db;
	size_t i;
	int fd;

	/* an existing zero-byte file (the fixture covered a missing one) */
	snprintf(path, sizeof path, "%s/empty.db", f->dir);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	assert_true(fd >= 0);
	close(fd);

	open_store(path, NODE, 0, &st);
	assert_true(store_schema_latest() >= 1);
	assert_int_equal(store_schema_version(st), store_schema_latest());
	db = app_open(path);
	for (i = 0; i < sizeof tables / sizeof tables[0]; i++)
		if (table_exists(db, tables[i]) != 1)
			fail_msg("table %s missing after migration", tables[i]);
	assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master"
				   " WHERE type = 'trigger'"
				   " AND name = 'tb_0031_fill'"),
			 1);
	assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master"
				   " WHERE type = 'index'"
				   " AND name = 'idx_0030_1'"),
			 1);
	assert_int_equal(q_int(db, "SELECT count(*) FROM semq_meta"
				   " WHERE key = 'node_id' AND value = 'R1'"),
			 1);
	/* the file is empty of messages */
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"), 0);
	sqlite3_close(db);
	store_free(st);

	/* and the fixture's file, which did not exist before, the same */
	assert_int_equal(store_schema_version(f->st), store_schema_latest());
	for (i = 0; i < sizeof tables / sizeof tables[0]; i++)
		assert_int_equal(table_exists(f->db, tables[i]), 1);
}

static void test_reopen_is_noop(void **state)
{
	struct fx *f = *state;
	int64_t id, objs, schema_rows;
	struct row r;
	int v;

	assert_int_equal(app_insert(f->db, "S1", "K1", &id), SQLITE_OK);
	objs = q_int(f->db, "SELECT count(*) FROM sqlite_master");
	schema_rows = q_int(f->db, "SELECT count(*) FROM semq_schema");
	v = store_schema_version(f->st);
	store_free(f->st);
	f->st = NULL;

	open_store(f->path, NODE, 0, &f->st);
	assert_int_equal(store_schema_version(f->st), v);
	assert_int_equal(store_schema_version(f->st), store_schema_latest());
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM sqlite_master"),
			 objs);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM semq_schema"),
			 schema_rows);
	/* data kept, the stream counter too */
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 1);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 1);
	assert_string_equal(r.key, "K1");
	assert_int_equal(app_insert(f->db, "S1", "K1", &id), SQLITE_OK);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.prev_seq, 1);
}

static void test_newer_version_refused(void **state)
{
	struct fx *f = *state;
	struct store_opts o = {
		.path = f->path, .node_id = NODE, .synchronous = -1};
	struct store *st = NULL;
	char err[SEMQ_ERRLEN] = "", rest[SEMQ_ERRLEN];
	char *p;
	int latest = store_schema_latest(), r;

	store_free(f->st);
	f->st = NULL;
	/* a newer SEMQ migrated this file to version 999 */
	exec_ok(f->db,
		"UPDATE semq_schema SET version = 999"
		" WHERE version = (SELECT max(version) FROM semq_schema)");

	r = store_open(&o, &st, err, sizeof err);
	assert_int_equal(r, SEMQ_ERR_VERSION);
	assert_null(st);
	if (!strstr(err, f->path))
		fail_msg("message does not name the file: %s", err);
	/* both versions named: look outside the path (it may hold digits) */
	snprintf(rest, sizeof rest, "%s", err);
	p = strstr(rest, f->path);
	memset(p, ' ', strlen(f->path));
	if (!has_number(rest, 999) || !has_number(rest, latest))
		fail_msg("message does not name versions 999 and %d: %s",
			 latest, err);
	/* and the file was left alone */
	assert_int_equal(q_int(f->db, "SELECT max(version) FROM semq_schema"),
			 999);
}

static void test_other_node_refused(void **state)
{
	struct fx *f = *state;
	struct store_opts o = {
		.path = f->path, .node_id = "R2", .synchronous = -1};
	struct store *st = NULL;
	char err[SEMQ_ERRLEN] = "";
	int64_t id;
	struct row r;

	store_free(f->st);
	f->st = NULL;
	assert_int_equal(store_open(&o, &st, err, sizeof err),
			 SEMQ_ERR_INVALID);
	assert_null(st);
	if (!strstr(err, f->path) || !strstr(err, "R1") || !strstr(err, "R2"))
		fail_msg("message does not name file and both ids: %s", err);
	/* the recorded id is unchanged: inserts still get origin R1 */
	assert_int_equal(app_insert(f->db, "S1", NULL, &id), SQLITE_OK);
	get_row(f->db, id, &r);
	assert_string_equal(r.origin, "R1");
}

static void test_not_a_database_refused(void **state)
{
	struct fx *f = *state;
	static const char junk[] =
		"this is a text file, not a SQLite database; it must not be "
		"overwritten by a node that was pointed at it by mistake.\n";
	char path[PATH_MAX], back[sizeof junk * 40];
	char err[SEMQ_ERRLEN] = "";
	struct store_opts o = {.node_id = NODE, .synchronous = -1};
	struct store *st = NULL;
	FILE *fp;
	size_t n;
	int i, r;

	snprintf(path, sizeof path, "%s/notes.txt", f->dir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	for (i = 0; i < 32; i++) /* well past a SQLite header's 100 bytes */
		fputs(junk, fp);
	fclose(fp);

	o.path = path;
	r = store_open(&o, &st, err, sizeof err);
	if (r != SEMQ_ERR_DB && r != SEMQ_ERR_IO)
		fail_msg("store_open of a text file: %d (%s)", r, err);
	assert_null(st);
	if (!strstr(err, path))
		fail_msg("message does not name the file: %s", err);
	if (!strstr(err, "not a") || !strstr(err, "database"))
		fail_msg("message does not say what is wrong: %s", err);

	fp = fopen(path, "r");
	assert_non_null(fp);
	n = fread(back, 1, sizeof back, fp);
	fclose(fp);
	assert_int_equal(n, 32 * (sizeof junk - 1));
	assert_memory_equal(back, junk, sizeof junk - 1);
}

/* ---- the fill trigger ------------------------------------------------------ */

static void test_bare_insert_filled(void **state)
{
	struct fx *f = *state;
	int64_t before, after, id;
	struct row r;

	before = now_ms();
	exec_ok(f->db, "INSERT INTO tb_0031(dest,type,msg_key,payload)"
		       " VALUES('S1',2800,'K1',x'00')");
	after = now_ms();
	id = sqlite3_last_insert_rowid(f->db);
	get_row(f->db, id, &r);
	assert_string_equal(r.origin, NODE);
	assert_string_equal(r.dest, "S1");
	assert_int_equal(r.seq, 1);
	assert_int_equal(r.prev_seq, 0);
	assert_int_equal(r.type, 2800);
	assert_false(r.key_null);
	assert_string_equal(r.key, "K1");
	assert_int_equal(r.status, 0);
	assert_int_equal(r.deliver_at, 0);
	assert_int_equal(r.payload_len, 1);
	assert_string_equal(r.payload_type, "blob");
	if (r.created_at < before - 1000 || r.created_at > after + 1000)
		fail_msg("created_at %lld not within a second of [%lld, %lld]",
			 (long long)r.created_at, (long long)before,
			 (long long)after);
	assert_int_equal(
		q_int(f->db, "SELECT attempts + next_attempt_at"
			     " + (sent_at IS NOT NULL) + (acked_at IS NOT NULL)"
			     " + (result IS NOT NULL) FROM tb_0031"),
		0);

	/* the next with the same key points back at it */
	exec_ok(f->db, "INSERT INTO tb_0031(dest,type,msg_key,payload)"
		       " VALUES('S1',2800,'K1',x'00')");
	get_row(f->db, sqlite3_last_insert_rowid(f->db), &r);
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.prev_seq, 1);
	assert_int_equal(q_int(f->db, "SELECT last_seq FROM semq_stream_out"
				      " WHERE origin = 'R1' AND dest = 'S1'"),
			 2);
}

static void test_prev_seq_interleaved_keys(void **state)
{
	struct fx *f = *state;
	static const char *const keys[] = {"K1", "K2", "K1", "K3", "K2"};
	static const int64_t want_prev[] = {0, 0, 1, 0, 2};
	int64_t id;
	struct row r;
	size_t i;

	for (i = 0; i < 5; i++) {
		assert_int_equal(app_insert(f->db, "S1", keys[i], &id),
				 SQLITE_OK);
		get_row(f->db, id, &r);
		assert_int_equal(r.seq, (int64_t)i + 1);
		assert_string_equal(r.key, keys[i]);
		if (r.prev_seq != want_prev[i])
			fail_msg("message %zu (key %s): prev_seq %lld, want "
				 "%lld",
				 i + 1, keys[i], (long long)r.prev_seq,
				 (long long)want_prev[i]);
	}
}

static void test_streams_count_separately(void **state)
{
	struct fx *f = *state;
	static const char *const dests[] = {"S1", "S2", "S1", "S2", "S2"};
	static const int64_t want_seq[] = {1, 1, 2, 2, 3};
	static const int64_t want_prev[] = {0, 0, 1, 1, 2};
	int64_t id;
	struct row r;
	size_t i;

	/* the same key in both streams: chains do not cross streams */
	for (i = 0; i < 5; i++) {
		assert_int_equal(app_insert(f->db, dests[i], "K1", &id),
				 SQLITE_OK);
		get_row(f->db, id, &r);
		assert_string_equal(r.dest, dests[i]);
		assert_int_equal(r.seq, want_seq[i]);
		assert_int_equal(r.prev_seq, want_prev[i]);
	}
	assert_int_equal(q_int(f->db, "SELECT last_seq FROM semq_stream_out"
				      " WHERE origin = 'R1' AND dest = 'S1'"),
			 2);
	assert_int_equal(q_int(f->db, "SELECT last_seq FROM semq_stream_out"
				      " WHERE origin = 'R1' AND dest = 'S2'"),
			 3);
}

static void test_empty_key_is_null(void **state)
{
	struct fx *f = *state;
	static const char *const keys[] = {NULL, "", NULL, ""};
	int64_t id;
	struct row r;
	size_t i;

	for (i = 0; i < 4; i++) {
		assert_int_equal(app_insert(f->db, "S1", keys[i], &id),
				 SQLITE_OK);
		get_row(f->db, id, &r);
		assert_int_equal(r.seq, (int64_t)i + 1);
		assert_true(r.key_null);
		assert_int_equal(r.prev_seq, 0);
	}
	/* a keyed message after them starts its own chain */
	assert_int_equal(app_insert(f->db, "S1", "K1", &id), SQLITE_OK);
	get_row(f->db, id, &r);
	assert_int_equal(r.prev_seq, 0);
}

static void test_seq_not_reused_after_purge(void **state)
{
	struct fx *f = *state;
	int64_t id;
	struct row r;
	int i;

	for (i = 0; i < 3; i++)
		assert_int_equal(app_insert(f->db, "S1", NULL, &id), SQLITE_OK);
	exec_ok(f->db, "DELETE FROM tb_0031");
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 0);
	assert_int_equal(app_insert(f->db, "S1", NULL, &id), SQLITE_OK);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 4);
}

static void test_rollback_leaves_no_gap(void **state)
{
	struct fx *f = *state;
	int64_t id;
	struct row r;

	assert_int_equal(app_insert(f->db, "S1", "K1", &id), SQLITE_OK);
	exec_ok(f->db, "BEGIN");
	assert_int_equal(app_insert(f->db, "S1", "K1", &id), SQLITE_OK);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 2); /* seen inside the transaction */
	exec_ok(f->db, "ROLLBACK");
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 1);
	assert_int_equal(q_int(f->db, "SELECT last_seq FROM semq_stream_out"
				      " WHERE dest = 'S1'"),
			 1);

	assert_int_equal(app_insert(f->db, "S1", "K1", &id), SQLITE_OK);
	get_row(f->db, id, &r);
	assert_int_equal(r.seq, 2);
	assert_int_equal(r.prev_seq, 1);
}

/* ---- concurrent writers ---------------------------------------------------- */

/*
 * One writer: its own connection to `path`, PER_WRITER inserts into stream
 * R1->S1, type 100 + w, keys K0..K4 shared with the other writer (so key chains
 * interleave across connections). batch 1 = each insert in its own (autocommit)
 * transaction; batch n = BEGIN IMMEDIATE, n inserts, COMMIT. Returns 0, or -1
 * with a message in err. Used by threads and by forked children alike.
 */
static int writer_run(const char *path, int w, int batch, char *err,
		      size_t errsz)
{
	static const char sql[] = "INSERT INTO tb_0031(dest, type, msg_key, "
				  "payload) VALUES ('S1', ?1, ?2, x'0102')";
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	char key[8];
	int i, rc, r = -1;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) !=
	    SQLITE_OK) {
		snprintf(err, errsz, "writer %d: open: %s", w,
			 db ? sqlite3_errmsg(db) : "?");
		goto out;
	}
	sqlite3_busy_timeout(db, BUSY_MS);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		snprintf(err, errsz, "writer %d: prepare: %s", w,
			 sqlite3_errmsg(db));
		goto out;
	}
	for (i = 0; i < PER_WRITER; i++) {
		if (batch > 1 && i % batch == 0 &&
		    sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) !=
			    SQLITE_OK) {
			snprintf(err, errsz, "writer %d: BEGIN at %d: %s", w, i,
				 sqlite3_errmsg(db));
			goto out;
		}
		snprintf(key, sizeof key, "K%d", i % 5);
		sqlite3_bind_int(st, 1, 100 + w);
		sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		if (rc != SQLITE_DONE) {
			snprintf(err, errsz, "writer %d: insert %d: %s", w, i,
				 sqlite3_errmsg(db));
			goto out;
		}
		if (batch > 1 &&
		    (i % batch == batch - 1 || i == PER_WRITER - 1) &&
		    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
			snprintf(err, errsz, "writer %d: COMMIT at %d: %s", w,
				 i, sqlite3_errmsg(db));
			goto out;
		}
	}
	r = 0;
out:
	sqlite3_finalize(st);
	sqlite3_close(db);
	return r;
}

/* Checks stream R1->S1 after two writers: seqs exactly 1..2*PER_WRITER. */
static void check_gapless(sqlite3 *db)
{
	const int64_t n = 2 * PER_WRITER;

	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"), n);
	assert_int_equal(q_int(db, "SELECT count(DISTINCT seq) FROM tb_0031"),
			 n);
	assert_int_equal(q_int(db, "SELECT min(seq) FROM tb_0031"), 1);
	assert_int_equal(q_int(db, "SELECT max(seq) FROM tb_0031"), n);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"
				   " WHERE origin IS NOT 'R1' OR dest <> 'S1'"),
			 0);
	/* seqs follow commit order exactly: in rowid order each is one more */
	assert_int_equal(q_int(db, "SELECT count(*) FROM (SELECT seq,"
				   " lag(seq) OVER (ORDER BY id) AS p"
				   " FROM tb_0031) WHERE p IS NOT NULL"
				   " AND seq <> p + 1"),
			 0);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"
				   " WHERE type = 100"),
			 PER_WRITER);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"
				   " WHERE type = 101"),
			 PER_WRITER);
	/* key chains stayed right although both writers used the same keys */
	assert_int_equal(q_int(db, "SELECT count(*) FROM (SELECT prev_seq,"
				   " lag(seq, 1, 0) OVER (PARTITION BY msg_key"
				   " ORDER BY seq) AS p FROM tb_0031)"
				   " WHERE prev_seq <> p"),
			 0);
	assert_int_equal(q_int(db, "SELECT last_seq FROM semq_stream_out"
				   " WHERE origin = 'R1' AND dest = 'S1'"),
			 n);
}

struct writer {
	const char *path;
	int w, batch;
	pthread_barrier_t *start;
	int r;
	char err[256];
};

static void *writer_thread(void *arg)
{
	struct writer *wr = arg;

	pthread_barrier_wait(wr->start);
	wr->r = writer_run(wr->path, wr->w, wr->batch, wr->err, sizeof wr->err);
	return NULL;
}

static void run_threads(struct fx *f, int batch)
{
	pthread_barrier_t start;
	pthread_t th[2];
	struct writer wr[2];
	int i;

	assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
	for (i = 0; i < 2; i++) {
		memset(&wr[i], 0, sizeof wr[i]);
		wr[i].path = f->path;
		wr[i].w = i;
		wr[i].batch = batch;
		wr[i].start = &start;
		assert_int_equal(
			pthread_create(&th[i], NULL, writer_thread, &wr[i]), 0);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start);
	for (i = 0; i < 2; i++)
		if (wr[i].r != 0)
			fail_msg("%s", wr[i].err);
	check_gapless(f->db);
}

static void test_concurrent_threads(void **state)
{
	run_threads(*state, 1);
}

static void test_concurrent_threads_batched(void **state)
{
	run_threads(*state, 10);
}

/*
 * Two processes. No connection may cross fork(), so the fixture closes its own
 * before forking and opens a fresh one afterwards; the children wait on a pipe
 * so that both start together.
 */
static void run_processes(struct fx *f, int batch)
{
	int gate[2], i, status;
	pid_t pid[2];
	char c;

	sqlite3_close(f->db);
	f->db = NULL;
	store_free(f->st);
	f->st = NULL;
	assert_int_equal(pipe(gate), 0);
	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			char err[256];
			close(gate[1]);
			if (read(gate[0], &c, 1) < 0) /* EOF when released */
				_exit(3);
			if (writer_run(f->path, i, batch, err, sizeof err)) {
				fprintf(stderr, "%s\n", err);
				_exit(1);
			}
			_exit(0);
		}
	}
	close(gate[0]);
	close(gate[1]); /* go */
	for (i = 0; i < 2; i++) {
		assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("writer process %d failed (status 0x%x)", i,
				 status);
	}
	f->db = app_open(f->path);
	check_gapless(f->db);
}

static void test_concurrent_processes(void **state)
{
	run_processes(*state, 1);
}

static void test_concurrent_processes_batched(void **state)
{
	run_processes(*state, 10);
}

/* ---- bad input ------------------------------------------------------------- */

/*
 * `sql` (with ?1 bound to param when not NULL) must fail as a constraint
 * violation whose message contains `needle`, and leave no trace: no row and no
 * stream counter moved.
 */
static void expect_refused(sqlite3 *db, const char *sql, const char *param,
			   const char *needle)
{
	sqlite3_stmt *st = NULL;
	int64_t rows = q_int(db, "SELECT count(*) FROM tb_0031");
	int64_t ctr = q_int(db, "SELECT coalesce(sum(last_seq), 0)"
				" FROM semq_stream_out");
	int rc;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	if (param)
		sqlite3_bind_text(st, 1, param, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_DONE)
		fail_msg("accepted: %s [%s]", sql, param ? param : "");
	if ((rc & 0xff) != SQLITE_CONSTRAINT)
		fail_msg("%s: rc %d, want a constraint error (%s)", sql, rc,
			 sqlite3_errmsg(db));
	if (!strstr(sqlite3_errmsg(db), needle))
		fail_msg("%s: message '%s' does not name '%s'", sql,
			 sqlite3_errmsg(db), needle);
	assert_int_equal(q_int(db, "SELECT count(*) FROM tb_0031"), rows);
	assert_int_equal(q_int(db, "SELECT coalesce(sum(last_seq), 0)"
				   " FROM semq_stream_out"),
			 ctr);
}

/* The same statement is accepted. */
static void expect_accepted(sqlite3 *db, const char *sql, const char *param)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	if (param)
		sqlite3_bind_text(st, 1, param, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		fail_msg("refused: %s [%s]: %s", sql, param ? param : "",
			 sqlite3_errmsg(db));
}

#define INS_DEST "INSERT INTO tb_0031(dest, type, payload) VALUES (?1, 1, x'')"
#define INS_KEY                                                                \
	"INSERT INTO tb_0031(dest, type, msg_key, payload)"                    \
	" VALUES ('S1', 1, ?1, x'')"

static void test_bad_input_refused(void **state)
{
	struct fx *f = *state;
	char s[300];
	struct row r;

	/* dest: space, too long, empty, missing */
	expect_refused(f->db, INS_DEST, "S 1", "tb_0031.dest");
	memset(s, 'd', 65);
	s[65] = '\0';
	expect_refused(f->db, INS_DEST, s, "tb_0031.dest");
	s[64] = '\0';
	expect_accepted(f->db, INS_DEST, s); /* 64 is the limit */
	expect_refused(f->db, INS_DEST, "", "tb_0031.dest");
	expect_refused(f->db, INS_DEST, "S\xc3\xa9", "tb_0031.dest");
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES (NULL, 1, x'')",
		       NULL, "tb_0031.dest");
	expect_accepted(f->db, INS_DEST, "S-1.a_b");

	/* type: text, negative, above uint32 */
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES ('S1', 'abc', x'')",
		       NULL, "tb_0031.type");
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES ('S1', -1, x'')",
		       NULL, "tb_0031.type");
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES ('S1', 4294967296, x'')",
		       NULL, "tb_0031.type");
	expect_accepted(f->db,
			"INSERT INTO tb_0031(dest, type, payload)"
			" VALUES ('S1', 4294967295, x'')",
			NULL);

	/* key: 255 bytes is the limit, counted in bytes */
	memset(s, 'k', 256);
	s[256] = '\0';
	expect_refused(f->db, INS_KEY, s, "tb_0031.msg_key");
	s[255] = '\0';
	expect_accepted(f->db, INS_KEY, s);
	for (int i = 0; i < 128; i++) /* 128 x U+00E9 = 256 bytes */
		memcpy(s + 2 * i, "\xc3\xa9", 2);
	s[256] = '\0';
	expect_refused(f->db, INS_KEY, s, "tb_0031.msg_key");

	/* origin: another node's id is refused, our own is fine */
	expect_refused(f->db,
		       "INSERT INTO tb_0031(origin, dest, type, payload)"
		       " VALUES ('R2', 'S1', 1, x'')",
		       NULL, "tb_0031.origin");
	expect_accepted(f->db,
			"INSERT INTO tb_0031(origin, dest, type, payload)"
			" VALUES ('R1', 'S1', 1, x'')",
			NULL);

	/* payload: over max_payload (1024 here), or missing */
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES ('S1', 1, zeroblob(1025))",
		       NULL, "tb_0031.payload");
	expect_accepted(f->db,
			"INSERT INTO tb_0031(dest, type, payload)"
			" VALUES ('S1', 1, zeroblob(1024))",
			NULL);
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES ('S1', 1, NULL)",
		       NULL, "tb_0031.payload");

	/* deliver_at: negative */
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload, deliver_at)"
		       " VALUES ('S1', 1, x'', -1)",
		       NULL, "tb_0031.deliver_at");
	expect_accepted(f->db,
			"INSERT INTO tb_0031(dest, type, payload, deliver_at)"
			" VALUES ('S1', 1, x'', 1700000000000)",
			NULL);
	get_row(f->db, sqlite3_last_insert_rowid(f->db), &r);
	assert_int_equal(r.deliver_at, 1700000000000LL);

	/* the refusals consumed no seq: S1 has had 5 accepted messages */
	assert_int_equal(app_insert(f->db, "S1", NULL, NULL), SQLITE_OK);
	get_row(f->db, sqlite3_last_insert_rowid(f->db), &r);
	assert_int_equal(r.seq, 6);
}

/*
 * Values of the wrong storage class: SQLite's affinity lets text into an
 * INTEGER column, and a text payload's length() counts characters, not bytes.
 * The schema must still refuse what the daemon could not read back.
 */
static void test_mistyped_values_refused(void **state)
{
	struct fx *f = *state;
	char s[1400];
	int i;

	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload, deliver_at)"
		       " VALUES ('S1', 1, x'', 'abc')",
		       NULL, "tb_0031.deliver_at");
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload, deliver_at)"
		       " VALUES ('S1', 1, x'', 1.5)",
		       NULL, "tb_0031.deliver_at");
	/* 600 x U+00E9: 600 characters but 1200 bytes > max_payload 1024 */
	for (i = 0; i < 600; i++)
		memcpy(s + 2 * i, "\xc3\xa9", 2);
	s[1200] = '\0';
	expect_refused(f->db,
		       "INSERT INTO tb_0031(dest, type, payload)"
		       " VALUES ('S1', 1, ?1)",
		       s, "tb_0031.payload");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_migrate_empty_file, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reopen_is_noop, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_newer_version_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_node_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_not_a_database_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_bare_insert_filled, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_prev_seq_interleaved_keys,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_streams_count_separately,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_key_is_null, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_seq_not_reused_after_purge,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_rollback_leaves_no_gap,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_threads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_threads_batched,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_processes,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_concurrent_processes_batched, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input_refused,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_mistyped_values_refused,
						setup_small, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
