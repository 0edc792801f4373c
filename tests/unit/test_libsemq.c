/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of libsemq (include/semq/semq.h): semq_enqueue() inside the
 * caller's own transaction (commits and rolls back with the caller's business
 * rows, refuses bad fields with a message naming the field), semq_id_valid(),
 * semq_strerror(), and the wake-up path: semq_wake_name() is a property of the
 * file, not of the spelling of its path, and semq_notify()/semq_notify_db()
 * reach a datagram socket bound on that name, or say SEMQ_DECLINED when
 * nobody listens.
 *
 * Each test gets a node database (node R1, max_payload 1024) created through
 * store_open() in its own mkdtemp directory under $TMPDIR, and an
 * application's plain sqlite3 connection to it. The node numbers committed
 * rows in its next batch (migration 0007); number() does it where a test
 * reads a seq.
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
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sqlite3.h>

#include <semq/semq.h>

#include "store.h"

#define NODE "R1"
#define MAX_PAYLOAD 1024

/* One test's world, all owned by it: temp dir, node database, the store that
 * created it, and an application connection (busy timeout 5 s). */
struct fx {
	char dir[PATH_MAX / 2];
	char path[PATH_MAX];
	struct store *st;
	sqlite3 *db;
};

static void exec_ok(sqlite3 *db, const char *sql)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		fail_msg("%s: %s", sql, msg ? msg : "?");
		sqlite3_free(msg); /* not reached: fail_msg jumps */
	}
}

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

static int rm_entry(const char *p, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	return remove(p);
}

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof *f);
	struct store_opts o = {
		.node_id = NODE, .max_payload = MAX_PAYLOAD, .synchronous = -1};
	char err[SEMQ_ERRLEN] = "";
	int r;

	assert_non_null(f);
	*state = f;
	snprintf(f->dir, sizeof f->dir, "%s/semq-libsemq-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(f->dir))
		fail_msg("mkdtemp %s: %s", f->dir, strerror(errno));
	snprintf(f->path, sizeof f->path, "%s/r1.db", f->dir);
	o.path = f->path;
	r = store_open(&o, &f->st, err, sizeof err);
	if (r != SEMQ_OK)
		fail_msg("store_open %s: %d %s", f->path, r, err);
	if (sqlite3_open_v2(f->path, &f->db, SQLITE_OPEN_READWRITE, NULL) !=
	    SQLITE_OK)
		fail_msg("open %s: %s", f->path, sqlite3_errmsg(f->db));
	sqlite3_busy_timeout(f->db, 5000);
	exec_ok(f->db, "CREATE TABLE my_bills (bill_no TEXT PRIMARY KEY,"
		       " amount INTEGER NOT NULL)");
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (!f)
		return 0;
	sqlite3_close(f->db);
	store_free(f->st);
	nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* ---- semq_enqueue in the caller's transaction ------------------------------ */

/* What the node's next batch does: number the committed new rows. */
static void number(struct fx *f)
{
	unsigned n = 0;
	int more = 1;

	while (more)
		assert_int_equal(store_number_new(f->st, 1, 1000, 1, &n, &more),
				 SEMQ_OK);
}

static void test_enqueue_commits_with_business_row(void **state)
{
	struct fx *f = *state;
	static const char doc[] = "{\"bill\":\"B-7\",\"amount\":1250}";
	struct semq_msg m = {.dest = "S1",
			     .type = 2800,
			     .key = "B-7",
			     .payload = doc,
			     .payload_len = sizeof doc - 1};
	char err[SEMQ_ERRLEN] = "";
	sqlite3_stmt *st = NULL;
	int64_t id = -1;

	exec_ok(f->db, "BEGIN");
	exec_ok(f->db, "INSERT INTO my_bills VALUES ('B-7', 1250)");
	assert_int_equal(semq_enqueue(f->db, &m, &id, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(id, 1);
	exec_ok(f->db, "COMMIT");

	assert_int_equal(q_int(f->db, "SELECT count(*) FROM my_bills"), 1);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 1);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"
				      " WHERE id = 1 AND seq IS NULL"),
			 1);
	/* the row is the message: the node numbers it and fills the rest */
	number(f);
	assert_int_equal(sqlite3_prepare_v2(f->db,
					    "SELECT origin, dest, seq, type,"
					    " msg_key, prev_seq, deliver_at,"
					    " status, payload FROM tb_0031",
					    -1, &st, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal(sqlite3_column_text(st, 0), NODE);
	assert_string_equal(sqlite3_column_text(st, 1), "S1");
	assert_int_equal(sqlite3_column_int64(st, 2), 1);
	assert_int_equal(sqlite3_column_int64(st, 3), 2800);
	assert_string_equal(sqlite3_column_text(st, 4), "B-7");
	assert_int_equal(sqlite3_column_int64(st, 5), 0);
	assert_int_equal(sqlite3_column_int64(st, 6), 0);
	assert_int_equal(sqlite3_column_int64(st, 7), 0);
	assert_int_equal(sqlite3_column_bytes(st, 8), sizeof doc - 1);
	assert_memory_equal(sqlite3_column_blob(st, 8), doc, sizeof doc - 1);
	sqlite3_finalize(st);

	/* a second one of the same bill, outside any transaction, no id_out */
	m.deliver_at = 1700000000000LL;
	assert_int_equal(semq_enqueue(f->db, &m, NULL, NULL, 0), SEMQ_OK);
	number(f);
	assert_int_equal(q_int(f->db, "SELECT prev_seq FROM tb_0031"
				      " WHERE seq = 2"),
			 1);
	assert_int_equal(q_int(f->db, "SELECT deliver_at FROM tb_0031"
				      " WHERE seq = 2"),
			 1700000000000LL);
}

static void test_enqueue_rolls_back_with_business_row(void **state)
{
	struct fx *f = *state;
	struct semq_msg m = {.dest = "S1",
			     .type = 2800,
			     .key = "B-8",
			     .payload = "x",
			     .payload_len = 1};
	char err[SEMQ_ERRLEN] = "";
	int64_t id = -1;

	assert_int_equal(semq_enqueue(f->db, &m, &id, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(id, 1);
	number(f);

	exec_ok(f->db, "BEGIN");
	exec_ok(f->db, "INSERT INTO my_bills VALUES ('B-8', 99)");
	assert_int_equal(semq_enqueue(f->db, &m, &id, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(id, 2);
	exec_ok(f->db, "ROLLBACK");

	assert_int_equal(q_int(f->db, "SELECT count(*) FROM my_bills"), 0);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 1);
	assert_int_equal(q_int(f->db, "SELECT max(seq) FROM tb_0031"), 1);

	/* the lost row was never numbered: the next message takes seq 2, and
	 * its key chain points at the committed message, not the lost one */
	assert_int_equal(semq_enqueue(f->db, &m, &id, err, sizeof err),
			 SEMQ_OK);
	number(f);
	assert_int_equal(q_int(f->db, "SELECT prev_seq FROM tb_0031"
				      " WHERE seq = 2"),
			 1);
}

static void test_enqueue_refusal_keeps_caller_tx(void **state)
{
	struct fx *f = *state;
	static char big[MAX_PAYLOAD + 1];
	struct semq_msg m = {.dest = "S1", .type = 1, .payload = big};
	char err[SEMQ_ERRLEN] = "";
	int64_t id = -1;

	/* a message refused by the schema aborts only itself: the caller's
	 * transaction, with its business row, is still open and whole */
	exec_ok(f->db, "BEGIN");
	exec_ok(f->db, "INSERT INTO my_bills VALUES ('B-9', 5)");
	m.payload_len = sizeof big;
	assert_int_equal(semq_enqueue(f->db, &m, &id, err, sizeof err),
			 SEMQ_ERR_TOO_BIG);
	assert_int_equal(sqlite3_get_autocommit(f->db), 0);
	m.payload_len = 10;
	assert_int_equal(semq_enqueue(f->db, &m, &id, err, sizeof err),
			 SEMQ_OK);
	assert_int_equal(id, 1);
	exec_ok(f->db, "COMMIT");
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM my_bills"), 1);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 1);
}

static void test_enqueue_empty_key_and_payload(void **state)
{
	struct fx *f = *state;
	struct semq_msg m = {.dest = "S1", .type = 7, .key = ""};
	int64_t id = -1;

	/* "" key = no key; NULL payload with length 0 = empty payload */
	assert_int_equal(semq_enqueue(f->db, &m, &id, NULL, 0), SEMQ_OK);
	m.key = NULL;
	assert_int_equal(semq_enqueue(f->db, &m, &id, NULL, 0), SEMQ_OK);
	assert_int_equal(id, 2);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"
				      " WHERE msg_key IS NULL AND prev_seq = 0"
				      " AND typeof(payload) = 'blob'"
				      " AND length(payload) = 0"),
			 2);
}

/* semq_enqueue must return `code` for `m` and say `needle` in err. */
static void expect_enqueue_fails(struct fx *f, const struct semq_msg *m,
				 int code, const char *needle)
{
	char err[SEMQ_ERRLEN] = "";
	int64_t id = -7;
	int r;

	r = semq_enqueue(f->db, m, &id, err, sizeof err);
	if (r != code)
		fail_msg("semq_enqueue: %d (%s), want %d", r, err, code);
	if (!strstr(err, needle))
		fail_msg("err '%s' does not name '%s'", err, needle);
	assert_int_equal(id, -7); /* untouched */
	/* and the same without an err buffer */
	assert_int_equal(semq_enqueue(f->db, m, NULL, NULL, 0), code);
}

static void test_enqueue_validation(void **state)
{
	struct fx *f = *state;
	static char big[MAX_PAYLOAD + 1];
	char long_id[SEMQ_ID_MAX + 2], long_key[257];
	struct semq_msg ok = {
		.dest = "S1", .type = 1, .payload = "p", .payload_len = 1};
	struct semq_msg m;
	int64_t id = 0;

	memset(long_id, 'd', SEMQ_ID_MAX + 1);
	long_id[SEMQ_ID_MAX + 1] = '\0';
	memset(long_key, 'k', 256);
	long_key[256] = '\0';

	m = ok;
	m.dest = NULL;
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "dest");
	m.dest = "";
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "dest");
	m.dest = "S 1";
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "dest");
	m.dest = long_id;
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "dest");
	m.dest = "S\xc3\xa9";
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "dest");

	m = ok;
	m.key = long_key;
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "key");

	m = ok;
	m.payload = NULL;
	m.payload_len = 5;
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "payload");

	m = ok;
	m.deliver_at = -1;
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "deliver_at");

	m = ok;
	m.reserved[3] = &m;
	expect_enqueue_fails(f, &m, SEMQ_ERR_INVALID, "reserved");

	m = ok;
	m.payload = big;
	m.payload_len = sizeof big;
	expect_enqueue_fails(f, &m, SEMQ_ERR_TOO_BIG, "payload");
	expect_enqueue_fails(f, &m, SEMQ_ERR_TOO_BIG, "max_payload");

	assert_int_equal(semq_enqueue(NULL, &ok, NULL, NULL, 0),
			 SEMQ_ERR_INVALID);
	assert_int_equal(semq_enqueue(f->db, NULL, NULL, NULL, 0),
			 SEMQ_ERR_INVALID);

	/* nothing of that reached the table or the counter */
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM tb_0031"), 0);
	assert_int_equal(q_int(f->db, "SELECT count(*) FROM semq_stream_out"),
			 0);

	/* the limits themselves are fine */
	m = ok;
	m.dest = long_id + 1; /* 64 chars */
	m.key = long_key + 1; /* 255 bytes */
	m.payload = big;
	m.payload_len = MAX_PAYLOAD;
	m.type = UINT32_MAX;
	assert_int_equal(semq_enqueue(f->db, &m, &id, NULL, 0), SEMQ_OK);
	assert_int_equal(id, 1);
	assert_int_equal(q_int(f->db, "SELECT type FROM tb_0031"), UINT32_MAX);
}

static void test_enqueue_not_a_node_db(void **state)
{
	struct semq_msg m = {.dest = "S1", .type = 1};
	char err[SEMQ_ERRLEN] = "";
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
	assert_int_equal(semq_enqueue(db, &m, NULL, err, sizeof err),
			 SEMQ_ERR_DB);
	if (!strstr(err, "tb_0031"))
		fail_msg("err '%s' does not say what is missing", err);
	sqlite3_close(db);
}

/* ---- ids and error strings ------------------------------------------------- */

static void test_id_valid(void **state)
{
	char id[SEMQ_ID_MAX + 2];

	memset(id, 'a', SEMQ_ID_MAX + 1);
	id[SEMQ_ID_MAX + 1] = '\0';
	assert_false(semq_id_valid(id)); /* 65 */
	id[SEMQ_ID_MAX] = '\0';
	assert_true(semq_id_valid(id)); /* 64 */
	assert_true(semq_id_valid("a"));
	assert_true(semq_id_valid("R1"));
	assert_true(semq_id_valid("shop-0042.north_1"));
	assert_true(semq_id_valid("AZaz09._-"));
	assert_false(semq_id_valid(""));
	assert_false(semq_id_valid(NULL));
	assert_false(semq_id_valid("S 1"));
	assert_false(semq_id_valid("S/1"));
	assert_false(semq_id_valid("S1\n"));
	assert_false(semq_id_valid("S:1"));
	assert_false(semq_id_valid("S\xc3\xa9"));    /* é in UTF-8 */
	assert_false(semq_id_valid("\xe5\xba\x97")); /* 店 */
	assert_false(semq_id_valid("S\xff"));
}

static void test_strerror(void **state)
{
	static const int codes[] = {
		SEMQ_OK,          SEMQ_AGAIN,       SEMQ_DECLINED,
		SEMQ_DUPLICATE,   SEMQ_ERR_INVALID, SEMQ_ERR_NOMEM,
		SEMQ_ERR_IO,      SEMQ_ERR_DB,      SEMQ_ERR_PROTO,
		SEMQ_ERR_TOO_BIG, SEMQ_ERR_VERSION, SEMQ_ERR_NOT_FOUND,
		SEMQ_ERR_CONFIG,  SEMQ_ERR_PLUGIN,  SEMQ_ERR_INTERNAL,
	};
	const size_t n = sizeof codes / sizeof codes[0];
	size_t i, j;

	for (i = 0; i < n; i++) {
		const char *s = semq_strerror(codes[i]);
		assert_non_null(s);
		assert_true(s[0] != '\0');
		if (strcmp(s, "unknown error") == 0)
			fail_msg("code %d has no text", codes[i]);
		for (j = 0; j < i; j++)
			if (strcmp(s, semq_strerror(codes[j])) == 0)
				fail_msg("codes %d and %d share '%s'", codes[i],
					 codes[j], s);
	}
	assert_string_equal(semq_strerror(42), "unknown error");
	assert_string_equal(semq_strerror(-12), "unknown error");
}

/* ---- waking the daemon ----------------------------------------------------- */

static void wake_name(const char *path, char *name, size_t *len)
{
	int r = semq_wake_name(path, name, 64, len);

	if (r != SEMQ_OK)
		fail_msg("semq_wake_name %s: %d", path, r);
}

static void test_wake_name(void **state)
{
	struct fx *f = *state;
	char a[64], b[64], p[2 * PATH_MAX], base[PATH_MAX];
	size_t la, lb, i;
	int cwd, fd, r;
	const char *slash = strrchr(f->dir, '/');

	wake_name(f->path, a, &la);
	assert_true(la > 1 && la <= 64);
	assert_int_equal(a[0], '\0'); /* abstract namespace */
	for (i = 1; i < la; i++)
		assert_true(a[i] > ' ' && a[i] < 127);
	assert_true(la < sizeof((struct sockaddr_un *)0)->sun_path);

	/* the same file through a symlink */
	snprintf(p, sizeof p, "%s/link.db", f->dir);
	assert_int_equal(symlink(f->path, p), 0);
	wake_name(p, b, &lb);
	assert_int_equal(lb, la);
	assert_memory_equal(a, b, la);

	/* through . and .. */
	snprintf(base, sizeof base, "%s", slash + 1);
	snprintf(p, sizeof p, "%s/./../%s/r1.db", f->dir, base);
	wake_name(p, b, &lb);
	assert_int_equal(lb, la);
	assert_memory_equal(a, b, la);

	/* relative to the working directory */
	cwd = open(".", O_RDONLY | O_DIRECTORY);
	assert_true(cwd >= 0);
	assert_int_equal(chdir(f->dir), 0);
	memset(b, 'x', sizeof b);
	r = semq_wake_name("r1.db", b, sizeof b, &lb);
	assert_int_equal(fchdir(cwd), 0);
	close(cwd);
	assert_int_equal(r, SEMQ_OK);
	assert_int_equal(lb, la);
	assert_memory_equal(a, b, la);

	/* another file differs */
	snprintf(p, sizeof p, "%s/r2.db", f->dir);
	fd = open(p, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	wake_name(p, b, &lb);
	assert_int_equal(b[0], '\0');
	assert_false(lb == la && memcmp(a, b, la) == 0);

	/* refusals */
	assert_int_equal(semq_wake_name(f->path, b, 31, &lb), SEMQ_ERR_INVALID);
	assert_int_equal(semq_wake_name(NULL, b, sizeof b, &lb),
			 SEMQ_ERR_INVALID);
	snprintf(p, sizeof p, "%s/no-such-dir/r1.db", f->dir);
	assert_true(semq_wake_name(p, b, sizeof b, &lb) < 0);

	/* a file not created yet (the daemon binds before it creates the
	 * database) has the name it will have once it exists */
	{
		char c1[64], c2[64];
		size_t l1, l2;

		snprintf(p, sizeof p, "%s/later.db", f->dir);
		wake_name(p, c1, &l1);
		fd = open(p, O_CREAT | O_WRONLY, 0600);
		assert_true(fd >= 0);
		close(fd);
		wake_name(p, c2, &l2);
		assert_int_equal(l1, l2);
		assert_memory_equal(c1, c2, l1);
	}
}

/* A datagram socket bound on the wake name of `path`, as the daemon binds it
 * (caller closes the fd). */
static int bind_wake(const char *path)
{
	struct sockaddr_un sa;
	char name[64];
	size_t len;
	int fd;

	wake_name(path, name, &len);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, name, len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	if (bind(fd, (struct sockaddr *)&sa,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)))
		fail_msg("bind wake name of %s: %s", path, strerror(errno));
	return fd;
}

/* One datagram arrives on fd within a second. */
static void expect_wake(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	char buf[16];

	assert_int_equal(poll(&pfd, 1, 1000), 1);
	assert_true(recv(fd, buf, sizeof buf, MSG_DONTWAIT) >= 1);
}

/* Nothing (more) is waiting on fd. */
static void expect_quiet(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	assert_int_equal(poll(&pfd, 1, 0), 0);
}

static void test_notify_nobody_listening(void **state)
{
	struct fx *f = *state;
	sqlite3 *mem = NULL;

	assert_int_equal(semq_notify(f->path), SEMQ_DECLINED);
	assert_int_equal(semq_notify_db(f->db), SEMQ_DECLINED);
	/* a connection without a file has no daemon either */
	assert_int_equal(sqlite3_open(":memory:", &mem), SQLITE_OK);
	assert_int_equal(semq_notify_db(mem), SEMQ_DECLINED);
	sqlite3_close(mem);
	assert_int_equal(semq_notify_db(NULL), SEMQ_DECLINED);
}

static void test_notify_delivered(void **state)
{
	struct fx *f = *state;
	char link[PATH_MAX + 16];
	int fd = bind_wake(f->path), i, r;

	assert_int_equal(semq_notify(f->path), SEMQ_OK);
	expect_wake(fd);
	expect_quiet(fd);

	/* the connection's file, and the file through a symlink, the same */
	assert_int_equal(semq_notify_db(f->db), SEMQ_OK);
	expect_wake(fd);
	snprintf(link, sizeof link, "%s/link.db", f->dir);
	assert_int_equal(symlink(f->path, link), 0);
	assert_int_equal(semq_notify(link), SEMQ_OK);
	expect_wake(fd);
	expect_quiet(fd);

	/* a daemon slow to read: the queue fills, notify neither blocks nor
	 * fails — a wake is already pending */
	for (i = 0; i < 200; i++) {
		r = semq_notify(f->path);
		if (r != SEMQ_OK)
			fail_msg("notify %d with a full queue: %d", i, r);
	}
	expect_wake(fd);

	/* daemon gone: declined again */
	close(fd);
	assert_int_equal(semq_notify(f->path), SEMQ_DECLINED);
	assert_int_equal(semq_notify_db(f->db), SEMQ_DECLINED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_enqueue_commits_with_business_row, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_enqueue_rolls_back_with_business_row, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_enqueue_refusal_keeps_caller_tx, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_enqueue_empty_key_and_payload, setup, teardown),
		cmocka_unit_test_setup_teardown(test_enqueue_validation, setup,
						teardown),
		cmocka_unit_test(test_enqueue_not_a_node_db),
		cmocka_unit_test(test_id_valid),
		cmocka_unit_test(test_strerror),
		cmocka_unit_test_setup_teardown(test_wake_name, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_notify_nobody_listening,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_delivered, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
