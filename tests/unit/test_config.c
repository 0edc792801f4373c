/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of node.ini parsing (node/config.c): a full valid file with
 * every section yields exactly the values written; absent keys take the SPEC
 * defaults; every kind of problem is reported as "FILE:LINE: message" naming
 * the key or section, all of them in one pass; relative paths are resolved
 * against the directory of the file; the value parsers (duration, size,
 * address) accept and refuse the edge cases; config_check_daemon() asks for
 * what semqd needs; config_describe() documents every key; [node] instance
 * takes only instance names and defaults by the kind of db (a postgresql://
 * URL is kept as written).
 *
 * Each test writes its files into a fresh mkdtemp directory under $TMPDIR and
 * removes it at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <semq/error.h>

#include "config.h"
#include "types.h"

/* ---- helpers ------------------------------------------------------------- */

struct fx {
	char dir[1024];     /* the test's temporary directory */
	char ini[PATH_MAX]; /* dir/node.ini */
	struct config *c;   /* result of the last load; freed in teardown */
	char *errs;         /* problems of the last load; freed in teardown */
};

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "%s/test_config.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	snprintf(f->ini, sizeof(f->ini), "%s/node.ini", f->dir);
	*state = f;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int teardown(void **state)
{
	struct fx *f = *state;

	config_free(f->c);
	free(f->errs);
	nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* Writes `text` to dir/rel, creating the directories on the way. */
static void put(struct fx *f, const char *rel, const char *text)
{
	char path[PATH_MAX];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", f->dir, rel);
	for (char *p = path + strlen(f->dir) + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) != 0)
			assert_int_equal(errno, EEXIST);
		*p = '/';
	}
	fp = fopen(path, "w");
	assert_non_null(fp);
	assert_int_equal(fputs(text, fp) >= 0, 1);
	assert_int_equal(fclose(fp), 0);
}

/* Writes `len` bytes to node.ini and loads it; returns config_load's
 * result. */
static int load_raw(struct fx *f, const char *data, size_t len)
{
	FILE *fp;

	config_free(f->c);
	free(f->errs);
	f->c = NULL;
	f->errs = NULL;
	fp = fopen(f->ini, "w");
	assert_non_null(fp);
	assert_int_equal(fwrite(data, 1, len, fp), len);
	assert_int_equal(fclose(fp), 0);
	return config_load(f->ini, &f->c, &f->errs);
}

static int load(struct fx *f, const char *text)
{
	return load_raw(f, text, strlen(text));
}

/* 1-based line of the first line of `text` that contains `needle`. */
static int line_of(const char *text, const char *needle)
{
	const char *p = strstr(text, needle);
	int line = 1;

	assert_non_null(p);
	for (const char *q = text; q < p; q++)
		line += *q == '\n';
	return line;
}

static size_t count_lines(const char *s)
{
	size_t n = 0;

	for (; s && *s; s++)
		n += *s == '\n';
	return n;
}

/* Asserts that `errs` has the whole line "FILE:LINE: msg" (line > 0) or
 * "FILE: msg" (line 0), where FILE is the fixture's node.ini. */
static void expect(const struct fx *f, const char *errs, int line,
		   const char *msg)
{
	char want[2 * PATH_MAX];
	const char *p;
	size_t wl;

	if (line > 0)
		snprintf(want, sizeof(want), "%s:%d: %s\n", f->ini, line, msg);
	else
		snprintf(want, sizeof(want), "%s: %s\n", f->ini, msg);
	wl = strlen(want);
	assert_non_null(errs);
	for (p = errs; (p = strstr(p, want)); p += wl)
		if (p == errs || p[-1] == '\n')
			return;
	fail_msg("missing line: %s--- got:\n%s", want, errs);
}

/* Loads `text`, expects SEMQ_ERR_CONFIG with exactly one problem, at `line`
 * with `msg`. */
static void expect_one(struct fx *f, const char *text, int line,
		       const char *msg)
{
	assert_int_equal(load(f, text), SEMQ_ERR_CONFIG);
	assert_null(f->c);
	expect(f, f->errs, line, msg);
	if (count_lines(f->errs) != 1)
		fail_msg("expected one problem, got:\n%s", f->errs);
}

/* ---- valid files ---------------------------------------------------------- */

static const char full_ini[] = "; a node.ini with every section\n"
			       "# hash comments too\n"
			       "[node]\n"
			       "id = S1\n"
			       "db = s1.db                  ; SQLite file\n"
			       "listen = 127.0.0.1:7103\n"
			       "admin = [::1]:9103\n"
			       "admin_token = s3cret\n"
			       "relay = yes\n"
			       "store_and_forward = on\n"
			       "synchronous = normal\n"
			       "poll_interval = 250ms\n"
			       "query_after = 45s\n"
			       "outbound_retention = 2d\n"
			       "ping_interval = 5s\n"
			       "idle_timeout = 1m\n"
			       "reconnect_min = 1s\n"
			       "reconnect_max = 6h\n"
			       "window = 500\n"
			       "drain_rate = 200\n"
			       "batch_max = 64\n"
			       "max_payload = 1MiB\n"
			       "max_frame = 2M\n"
			       "log_level = debug\n"
			       "log_file = logs/semqd.log\n"
			       "\n"
			       "[tls]\n"
			       "cert = certs/S1.crt\n"
			       "key = certs/S1.key\n"
			       "ca = certs/ca.crt\n"
			       "\n"
			       "[peer P1]\n"
			       "connect = 127.0.0.1:7102\n"
			       "trusted_relay = true\n"
			       "\n"
			       "[peer S2]\n"
			       "connect = [::1]:7000\n"
			       "\n"
			       "[peer R1]\n"
			       "\n"
			       "[route]\n"
			       "default = P1\n"
			       "S3 = S2\n"
			       "\n"
			       "[plugin journal]\n"
			       "path = plugins/journal.so\n"
			       "types = *\n"
			       "\n"
			       "[plugin bill]\n"
			       "path = plugins/bill.so\n"
			       "types = 2800, 2801,4294967295\n"
			       "table = bills\n"
			       "mode = strict mode ; an inline comment\n"
			       "\n"
			       "[redo]\n"
			       "levels = 1s, 10s,1m,2d\n"
			       "max_tries = 5\n";

static void put_support_files(struct fx *f)
{
	put(f, "certs/S1.crt", "cert\n");
	put(f, "certs/S1.key", "key\n");
	put(f, "certs/ca.crt", "ca\n");
	put(f, "plugins/journal.so", "so\n");
	put(f, "plugins/bill.so", "so\n");
	put(f, "logs/.keep", "");
}

static void test_full_valid(void **state)
{
	struct fx *f = *state;
	const struct config *c;
	const struct cfg_plugin *pl;
	char want[2 * PATH_MAX];

	put_support_files(f);
	assert_int_equal(load(f, full_ini), SEMQ_OK);
	assert_null(f->errs);
	c = f->c;
	assert_non_null(c);
	assert_string_equal(c->file, f->ini);

	assert_string_equal(c->id, "S1");
	snprintf(want, sizeof(want), "%s/s1.db", f->dir);
	assert_string_equal(c->db, want);
	assert_int_equal(c->listen.set, 1);
	assert_string_equal(c->listen.host, "127.0.0.1");
	assert_int_equal(c->listen.port, 7103);
	assert_int_equal(c->admin.set, 1);
	assert_string_equal(c->admin.host, "::1");
	assert_int_equal(c->admin.port, 9103);
	assert_string_equal(c->admin_token, "s3cret");
	assert_int_equal(c->relay, 1);
	assert_int_equal(c->store_and_forward, 1);
	assert_int_equal(c->synchronous, 1);
	assert_int_equal(c->poll_interval_ms, 250);
	assert_int_equal(c->query_after_ms, 45000);
	assert_int_equal(c->outbound_retention_ms, 2LL * 86400 * 1000);
	assert_int_equal(c->ping_interval_ms, 5000);
	assert_int_equal(c->idle_timeout_ms, 60000);
	assert_int_equal(c->reconnect_min_ms, 1000);
	assert_int_equal(c->reconnect_max_ms, 6LL * 3600 * 1000);
	assert_int_equal(c->window, 500);
	assert_int_equal(c->drain_rate, 200);
	assert_int_equal(c->batch_max, 64);
	assert_int_equal(c->max_payload, 1024 * 1024);
	assert_int_equal(c->max_frame, 2 * 1024 * 1024);
	assert_int_equal(c->log_level, CFG_LOG_DEBUG);
	snprintf(want, sizeof(want), "%s/logs/semqd.log", f->dir);
	assert_string_equal(c->log_file, want);

	snprintf(want, sizeof(want), "%s/certs/S1.crt", f->dir);
	assert_string_equal(c->tls_cert, want);
	snprintf(want, sizeof(want), "%s/certs/S1.key", f->dir);
	assert_string_equal(c->tls_key, want);
	snprintf(want, sizeof(want), "%s/certs/ca.crt", f->dir);
	assert_string_equal(c->tls_ca, want);

	assert_int_equal(c->n_peers, 3);
	assert_string_equal(c->peers[0].name, "P1");
	assert_int_equal(c->peers[0].connect.set, 1);
	assert_string_equal(c->peers[0].connect.host, "127.0.0.1");
	assert_int_equal(c->peers[0].connect.port, 7102);
	assert_int_equal(c->peers[0].trusted_relay, 1);
	assert_int_equal(c->peers[0].line, line_of(full_ini, "[peer P1]"));
	assert_string_equal(c->peers[1].name, "S2");
	assert_string_equal(c->peers[1].connect.host, "::1");
	assert_int_equal(c->peers[1].connect.port, 7000);
	assert_int_equal(c->peers[1].trusted_relay, 0);
	assert_string_equal(c->peers[2].name, "R1");
	assert_int_equal(c->peers[2].connect.set, 0);
	assert_int_equal(c->peers[2].trusted_relay, 0);

	assert_ptr_equal(config_peer(c, "S2"), &c->peers[1]);
	assert_ptr_equal(config_peer(c, "R1"), &c->peers[2]);
	assert_null(config_peer(c, "S9"));
	assert_null(config_peer(c, NULL));
	assert_null(config_peer(NULL, "P1"));

	assert_int_equal(c->n_routes, 2);
	assert_string_equal(c->routes[0].dest, "default");
	assert_string_equal(c->routes[0].via, "P1");
	assert_int_equal(c->routes[0].line, line_of(full_ini, "default = P1"));
	assert_string_equal(c->routes[1].dest, "S3");
	assert_string_equal(c->routes[1].via, "S2");

	assert_int_equal(c->n_plugins, 2);
	pl = &c->plugins[0];
	assert_string_equal(pl->name, "journal");
	snprintf(want, sizeof(want), "%s/plugins/journal.so", f->dir);
	assert_string_equal(pl->path, want);
	assert_int_equal(pl->all_types, 1);
	assert_int_equal(pl->n_types, 0);
	assert_int_equal(pl->n_options, 0);
	assert_int_equal(pl->line, line_of(full_ini, "[plugin journal]"));
	pl = &c->plugins[1];
	assert_string_equal(pl->name, "bill");
	assert_int_equal(pl->all_types, 0);
	assert_int_equal(pl->n_types, 3);
	assert_int_equal(pl->types[0], 2800);
	assert_int_equal(pl->types[1], 2801);
	assert_int_equal(pl->types[2], UINT32_MAX);
	assert_int_equal(pl->n_options, 2);
	assert_string_equal(pl->options[0].key, "table");
	assert_string_equal(pl->options[0].value, "bills");
	snprintf(want, sizeof(want), "%s:%d", f->ini,
		 line_of(full_ini, "table = bills"));
	assert_string_equal(pl->options[0].where, want);
	assert_string_equal(pl->options[1].key, "mode");
	assert_string_equal(pl->options[1].value, "strict mode");
	snprintf(want, sizeof(want), "%s:%d", f->ini,
		 line_of(full_ini, "mode = strict"));
	assert_string_equal(pl->options[1].where, want);

	assert_int_equal(c->n_redo_levels, 4);
	assert_int_equal(c->redo_levels_ms[0], 1000);
	assert_int_equal(c->redo_levels_ms[1], 10000);
	assert_int_equal(c->redo_levels_ms[2], 60000);
	assert_int_equal(c->redo_levels_ms[3], 2LL * 86400 * 1000);
	assert_int_equal(c->max_tries, 5);

	assert_int_equal(c->node_line, line_of(full_ini, "[node]"));
	assert_int_equal(c->tls_line, line_of(full_ini, "[tls]"));
	assert_int_equal(c->route_line, line_of(full_ini, "[route]"));
	assert_int_equal(c->redo_line, line_of(full_ini, "[redo]"));

	/* Everything semqd needs is there. */
	assert_int_equal(config_check_daemon(c, &f->errs), SEMQ_OK);
	assert_null(f->errs);
}

static void test_defaults(void **state)
{
	struct fx *f = *state;
	const struct config *c;
	static const int64_t levels[] = {5000,     30000,    60000,
					 600000,   1800000,  3600000,
					 21600000, 86400000, 172800000};

	assert_int_equal(load(f, "[node]\nid = R1\ndb = r1.db\n"), SEMQ_OK);
	c = f->c;
	assert_string_equal(c->id, "R1");
	assert_int_equal(c->listen.set, 0);
	assert_int_equal(c->admin.set, 0);
	assert_null(c->admin_token);
	assert_int_equal(c->relay, 0);
	assert_int_equal(c->store_and_forward, 0);
	assert_int_equal(c->synchronous, 2);
	assert_int_equal(c->poll_interval_ms, 50);
	assert_int_equal(c->query_after_ms, 30000);
	assert_int_equal(c->outbound_retention_ms, 86400000);
	assert_int_equal(c->ping_interval_ms, 10000);
	assert_int_equal(c->idle_timeout_ms, 60000);
	assert_int_equal(c->reconnect_min_ms, 500);
	assert_int_equal(c->reconnect_max_ms, 30000);
	assert_int_equal(c->window, 1000);
	assert_int_equal(c->drain_rate, 0);
	assert_int_equal(c->batch_max, 1000);
	assert_int_equal(c->max_payload, 16 * 1024 * 1024);
	assert_int_equal(c->max_frame, 16 * 1024 * 1024 + 64 * 1024);
	assert_int_equal(c->log_level, CFG_LOG_INFO);
	assert_null(c->log_file);
	assert_null(c->tls_cert);
	assert_null(c->tls_key);
	assert_null(c->tls_ca);
	assert_int_equal(c->n_peers, 0);
	assert_int_equal(c->n_routes, 0);
	assert_int_equal(c->n_plugins, 0);
	assert_int_equal(c->n_redo_levels, 9);
	for (size_t i = 0; i < 9; i++)
		assert_int_equal(c->redo_levels_ms[i], levels[i]);
	assert_int_equal(c->max_tries, 9);
	/* The key table's defaults are the redo policy's: the store opened
	 * without levels (its tests) runs what a node.ini without [redo]
	 * runs. */
	assert_int_equal(c->n_redo_levels, SEMQ_REDO_N_LEVELS);
	assert_memory_equal(c->redo_levels_ms, semq_redo_levels,
			    sizeof semq_redo_levels);
	assert_int_equal(c->max_tries, SEMQ_REDO_MAX_TRIES);
	assert_int_equal(c->node_line, 1);
	assert_int_equal(c->tls_line, 0);
	assert_int_equal(c->redo_line, 0);

	/* max_frame follows a max_payload that is set. */
	assert_int_equal(load(f, "[node]\nid = R1\ndb = r1.db\n"
				 "max_payload = 64K\n"),
			 SEMQ_OK);
	assert_int_equal(f->c->max_payload, 65536);
	assert_int_equal(f->c->max_frame, 2 * 65536);
}

/* Indented keys are keys (not continuations); comments are dropped. */
static void test_layout(void **state)
{
	struct fx *f = *state;

	assert_int_equal(load(f, "\xEF\xBB\xBF; BOM, then a comment\n"
				 "  [node]  ; the node\n"
				 "\tid = S1\n"
				 "    db = s1.db ; the file\n"
				 "# window = 5\n"
				 "  window = 7\n"
				 "  admin_token = a;b#c\n"
				 "  listen: 10.0.0.1:7000\n"),
			 SEMQ_OK);
	assert_string_equal(f->c->id, "S1");
	assert_int_equal(f->c->window, 7);
	assert_string_equal(f->c->admin_token, "a;b#c");
	assert_string_equal(f->c->listen.host, "10.0.0.1");
	assert_int_equal(f->c->node_line, 2);

	/* An indented line without '=' is not glued to the key above it
	 * (inih's multi-line values): it is a syntax error of its own. */
	expect_one(
		f,
		"[node]\nid = S1\ndb = s1.db\n[redo]\nlevels = 5s\n"
		"   30s\n",
		6,
		"syntax error: expected [section], key = value or a comment");
}

/* ---- errors ---------------------------------------------------------------- */

static void test_unknown_key(void **state)
{
	struct fx *f = *state;

	expect_one(f, "[node]\nid = S1\ndb = s1.db\nlissen = 1.2.3.4:5\n", 4,
		   "unknown key 'lissen' in [node]");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[peer P1]\nconect = a:1\n",
		   5, "unknown key 'conect' in [peer P1]");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[redo]\nlevel = 5s\n", 5,
		   "unknown key 'level' in [redo]");
	expect_one(f, "stray = 1\n[node]\nid = S1\ndb = s1.db\n", 1,
		   "key 'stray' outside any section");
}

static void test_unknown_section(void **state)
{
	struct fx *f = *state;

	/* Its keys are not reported again. */
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[nodes]\nx = 1\n", 4,
		   "unknown section [nodes]");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[peers P1]\n", 4,
		   "unknown section [peers P1]");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[tls x]\n", 4,
		   "[tls] takes no name, not 'x'");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[peer]\n", 4,
		   "[peer] needs a name: [peer NAME]");
}

static void test_bad_values(void **state)
{
	struct fx *f = *state;
	const char *base = "[node]\nid = S1\ndb = s1.db\n";
	char ini[512];

#define BAD(line_text, msg)                                                    \
	do {                                                                   \
		snprintf(ini, sizeof(ini), "%s%s\n", base, line_text);         \
		expect_one(f, ini, 4, msg);                                    \
	} while (0)

	BAD("window = 0", "[node] window: '0' is not between 1 and 1000000");
	BAD("window = 1000001",
	    "[node] window: '1000001' is not between 1 and 1000000");
	BAD("window = -5", "[node] window: '-5' is not a whole number");
	BAD("window = 12abc", "[node] window: '12abc' is not a whole number");
	BAD("batch_max = 99999999999999999999999",
	    "[node] batch_max: '99999999999999999999999' is not between 1 and "
	    "1000000");
	BAD("poll_interval = 5x",
	    "[node] poll_interval: '5x' is not a duration (250ms, 5s, 1m, 6h, "
	    "2d, or seconds)");
	BAD("poll_interval = -5s",
	    "[node] poll_interval: '-5s' is not a duration (250ms, 5s, 1m, "
	    "6h, 2d, or seconds)");
	BAD("poll_interval = 0ms",
	    "[node] poll_interval: '0ms' is not between 1ms and 1h");
	BAD("query_after = 99999999999999999999d",
	    "[node] query_after: '99999999999999999999d' is not between 1ms "
	    "and 30d");
	BAD("max_payload = 16MB",
	    "[node] max_payload: '16MB' is not a size (1000, 64KiB, 16MiB, "
	    "1GiB)");
	BAD("max_payload = 2GiB",
	    "[node] max_payload: '2GiB' is not between 1 and 1GiB");
	BAD("max_payload = 0", "[node] max_payload: '0' is not between 1 and "
			       "1GiB");
	BAD("listen = 127.0.0.1",
	    "[node] listen: '127.0.0.1': missing ':port'");
	BAD("listen = 127.0.0.1:0",
	    "[node] listen: '127.0.0.1:0': port 0 is not between 1 and 65535");
	BAD("listen = 127.0.0.1:70000",
	    "[node] listen: '127.0.0.1:70000': port 70000 is not between 1 "
	    "and 65535");
	BAD("listen = host:http",
	    "[node] listen: 'host:http': port 'http' is not a number");
	BAD("listen = ::1:7000",
	    "[node] listen: '::1:7000': write an IPv6 address in brackets, as "
	    "in [::1]:7000");
	BAD("admin = [zz::1]:7000",
	    "[node] admin: '[zz::1]:7000': 'zz::1' is not an IPv6 address");
	BAD("admin = :7000", "[node] admin: ':7000': missing host");
	BAD("relay = maybe",
	    "[node] relay: 'maybe' is not yes/no (yes, no, true, false, on, "
	    "off, 1, 0)");
	BAD("synchronous = fast",
	    "[node] synchronous: 'fast' is not one of off, normal, full, "
	    "extra");
	BAD("log_level = verbose",
	    "[node] log_level: 'verbose' is not one of error, warn, info, "
	    "debug");
	BAD("allow = some", "[node] allow: 'some' is not one of any, listed");
	BAD("admin_token =", "[node] admin_token: empty value");
	BAD("listen =", "[node] listen: empty value");
#undef BAD
}

/* The directories of db and log_file must exist; the message names the
 * resolved one. */
static void test_bad_dir(void **state)
{
	struct fx *f = *state;
	char msg[2 * PATH_MAX];

	snprintf(msg, sizeof(msg),
		 "[node] db: 'nodir/s1.db': directory '%s/nodir': No such file "
		 "or directory",
		 f->dir);
	expect_one(f, "[node]\nid = S1\ndb = nodir/s1.db\n", 3, msg);
	put(f, "afile", "x\n");
	snprintf(msg, sizeof(msg),
		 "[node] log_file: 'afile/semqd.log': '%s/afile' is not a "
		 "directory",
		 f->dir);
	expect_one(f,
		   "[node]\nid = S1\ndb = s1.db\nlog_file = afile/semqd.log\n",
		   4, msg);
}

static void test_bad_id(void **state)
{
	struct fx *f = *state;
	char id[70], ini[256], msg[256];

	expect_one(f, "[node]\nid = S 1\ndb = s1.db\n", 2,
		   "[node] id: 'S 1' is not a node id (1-64 of A-Za-z0-9._-)");
	/* 64 characters are fine, 65 are not. */
	memset(id, 'x', 65);
	id[64] = '\0';
	snprintf(ini, sizeof(ini), "[node]\nid = %s\ndb = s1.db\n", id);
	assert_int_equal(load(f, ini), SEMQ_OK);
	assert_string_equal(f->c->id, id);
	id[64] = 'x';
	id[65] = '\0';
	snprintf(ini, sizeof(ini), "[node]\nid = %s\ndb = s1.db\n", id);
	snprintf(msg, sizeof(msg),
		 "[node] id: '%s' is not a node id (1-64 of A-Za-z0-9._-)", id);
	expect_one(f, ini, 2, msg);
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[peer P/1]\n", 4,
		   "[peer P/1]: 'P/1' is not a valid name (1-64 of "
		   "A-Za-z0-9._-)");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[route]\nx y = P1\n", 5,
		   "[route] 'x y': not 'default' or a node id (1-64 of "
		   "A-Za-z0-9._-)");
}

static void test_missing_required(void **state)
{
	struct fx *f = *state;

	/* Reported at the section header. */
	expect_one(f, "; c\n[node]\ndb = s1.db\n", 2, "[node] id is required");
	/* No [node] at all: no line. */
	assert_int_equal(load(f, "[redo]\nmax_tries = 3\n"), SEMQ_ERR_CONFIG);
	expect(f, f->errs, 0, "[node] id is required");
	expect(f, f->errs, 0, "[node] db is required");
	assert_int_equal(count_lines(f->errs), 2);
	/* An empty value is not a value. */
	expect_one(f, "[node]\nid =\ndb = s1.db\n", 2,
		   "[node] id: empty value");
	/* A plugin needs path and types. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n\n"
				 "[plugin p]\nopt = 1\n"),
			 SEMQ_ERR_CONFIG);
	expect(f, f->errs, 5, "[plugin p] path is required");
	expect(f, f->errs, 5, "[plugin p] types is required");
	assert_int_equal(count_lines(f->errs), 2);
}

static void test_missing_files(void **state)
{
	struct fx *f = *state;

	put(f, "certs/S1.key", "key\n");
	put(f, "certs/ca.crt", "ca\n");
	put(f, "certs/dir.crt/x", "x\n");
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n"
				 "[tls]\n"
				 "cert = certs/x.crt\n"
				 "key = certs/S1.key\n"
				 "ca = certs/dir.crt\n"
				 "[plugin bill]\n"
				 "path = plugins/nope.so\n"
				 "types = 2800\n"),
			 SEMQ_ERR_CONFIG);
	expect(f, f->errs, 5,
	       "[tls] cert: cannot read 'certs/x.crt': No such file or "
	       "directory");
	expect(f, f->errs, 7,
	       "[tls] ca: cannot read 'certs/dir.crt': Is a "
	       "directory");
	expect(f, f->errs, 9,
	       "[plugin bill] path: cannot read 'plugins/nope.so': No such "
	       "file or directory");
	/* A bad path is not also reported as missing. */
	assert_int_equal(count_lines(f->errs), 3);
}

static void test_duplicates(void **state)
{
	struct fx *f = *state;

	expect_one(f, "[node]\nid = S1\ndb = s1.db\nid = S2\n", 4,
		   "duplicate key 'id' in [node] (first at line 2)");
	expect_one(f,
		   "[node]\nid = S1\ndb = s1.db\n[plugin p]\npath = /dev/null\n"
		   "types = *\nopt = 1\nopt = 2\n",
		   8, "duplicate key 'opt' in [plugin p] (first at line 7)");
	expect_one(f,
		   "[node]\nid = S1\ndb = s1.db\n[route]\ndefault = P1\n"
		   "default = P2\n[peer P1]\n[peer P2]\n",
		   6, "duplicate key 'default' in [route] (first at line 5)");
	/* The keys of a duplicate section are not reported again. */
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[node]\nid = S2\n", 4,
		   "duplicate section [node] (first at line 1)");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[peer P1]\n[peer P1]\n", 5,
		   "duplicate section [peer P1] (first at line 4)");
	expect_one(f,
		   "[node]\nid = S1\ndb = s1.db\n[plugin p]\npath = /dev/null\n"
		   "types = 1\n[plugin p]\n",
		   7, "duplicate section [plugin p] (first at line 4)");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[redo]\n[tls]\n[redo]\n", 6,
		   "duplicate section [redo] (first at line 4)");
	/* A peer and a plugin may share a name; two peers may not. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n[peer x]\n"
				 "[plugin x]\npath = /dev/null\ntypes = 1\n"),
			 SEMQ_OK);
	/* Keys are per section instance. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n[peer A]\n"
				 "connect = a:1\n[peer B]\nconnect = b:2\n"),
			 SEMQ_OK);
	assert_string_equal(f->c->peers[1].connect.host, "b");
}

static void test_routes_and_peers(void **state)
{
	struct fx *f = *state;

	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[route]\ndefault = P9\n", 5,
		   "[route] default: no [peer P9] to route through");
	/* The peer may come after the route. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n[route]\n"
				 "R2 = P1\n[peer P1]\n"),
			 SEMQ_OK);
	assert_string_equal(f->c->routes[0].dest, "R2");
	/* A peer named like the node, wherever [node] is. */
	expect_one(f, "[peer S1]\n[node]\nid = S1\ndb = s1.db\n", 1,
		   "[peer S1]: a peer cannot have this node's own id");
	expect_one(f,
		   "[node]\nid = S1\ndb = s1.db\n[peer P1]\n[route]\n"
		   "S1 = P1\n",
		   6, "[route] S1: a route to this node itself");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[route]\nS2 = no way\n", 5,
		   "[route] S2: 'no way' is not a peer name (1-64 of "
		   "A-Za-z0-9._-)");
}

static void test_cross_checks(void **state)
{
	struct fx *f = *state;

	expect_one(f,
		   "[node]\nid = S1\ndb = s1.db\nmax_payload = 1MiB\n"
		   "max_frame = 1027K\n",
		   5,
		   "[node] max_frame: 1051648 is less than max_payload + 4KiB "
		   "(1052672)");
	/* Exactly max_payload + 4KiB is enough. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n"
				 "max_payload = 1MiB\nmax_frame = 1052672\n"),
			 SEMQ_OK);
	assert_int_equal(f->c->max_frame, 1052672);
	expect_one(f, "[node]\nid = S1\ndb = s1.db\nmax_frame = 64KiB\n", 4,
		   "[node] max_frame: 65536 is less than max_payload + 4KiB "
		   "(16781312)");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\nreconnect_max = 100ms\n", 4,
		   "[node] reconnect_max: 100ms is less than reconnect_min "
		   "(500ms)");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\nidle_timeout = 10s\n", 4,
		   "[node] idle_timeout: 10000ms must be more than "
		   "ping_interval (10000ms)");
}

static void test_lists(void **state)
{
	struct fx *f = *state;
	const char *base = "[node]\nid = S1\ndb = s1.db\n";
	char ini[1024];

#define BAD(text, line, msg)                                                   \
	do {                                                                   \
		snprintf(ini, sizeof(ini), "%s%s", base, text);                \
		expect_one(f, ini, line, msg);                                 \
	} while (0)

	BAD("[redo]\nlevels =\n", 5, "[redo] levels: empty value");
	BAD("[redo]\nlevels = 5s,,1m\n", 5, "[redo] levels: item 2 is empty");
	BAD("[redo]\nlevels = 5s,0s\n", 5,
	    "[redo] levels: item 2 '0s' is not between 1ms and 365d");
	BAD("[redo]\nlevels = 5s,soon\n", 5,
	    "[redo] levels: item 2 'soon' is not a duration");
	BAD("[redo]\nlevels = 1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,"
	    "1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s\n",
	    5, "[redo] levels: more than 32 items");
	BAD("[redo]\nmax_tries = 0\n", 5,
	    "[redo] max_tries: '0' is not between 1 and 1000");
	BAD("[plugin p]\npath = /dev/null\ntypes = 1,x\n", 6,
	    "[plugin p] types: item 2 'x' is not a type number");
	BAD("[plugin p]\npath = /dev/null\ntypes = 1,*\n", 6,
	    "[plugin p] types: '*' must stand alone: all types, or a list of "
	    "numbers");
	BAD("[plugin p]\npath = /dev/null\ntypes = 4294967296\n", 6,
	    "[plugin p] types: item 1 '4294967296' is not between 0 and "
	    "4294967295");
	BAD("[plugin p]\npath = /dev/null\ntypes = 7,8,7\n", 6,
	    "[plugin p] types: type 7 is listed twice");
	BAD("[plugin p]\npath = /dev/null\ntypes = 1,\n", 6,
	    "[plugin p] types: item 2 is empty");
	BAD("[plugin p]\npath = /dev/null\ntypes =\n", 6,
	    "[plugin p] types: empty value");
#undef BAD

	/* 32 levels, not ascending, are fine. */
	snprintf(ini, sizeof(ini),
		 "%s[redo]\nlevels = 2d,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,"
		 "1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1ms\n",
		 base);
	assert_int_equal(load(f, ini), SEMQ_OK);
	assert_int_equal(f->c->n_redo_levels, 32);
	assert_int_equal(f->c->redo_levels_ms[0], 172800000);
	assert_int_equal(f->c->redo_levels_ms[31], 1);
}

static void test_syntax_errors(void **state)
{
	struct fx *f = *state;
	static const char nul[] = "[node]\nid = S1\ndb = s1.db\nx = a\0b\n";
	char ini[1024];

	/* Every bad line is reported, not only the first. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n"
				 "listen 127.0.0.1\n"
				 "[peer P1\n"
				 "window = 5\n"
				 "[node] junk\n"),
			 SEMQ_ERR_CONFIG);
	expect(f, f->errs, 4,
	       "syntax error: expected [section], key = value or a comment");
	expect(f, f->errs, 5,
	       "syntax error: no ']' to close the section header");
	expect(f, f->errs, 7, "syntax error: text after ']': 'junk'");
	/* Keys after a bad header belong to no section: not reported. */
	assert_int_equal(count_lines(f->errs), 3);

	/* A line too long for inih's buffer. */
	snprintf(ini, sizeof(ini),
		 "[node]\nid = S1\ndb = s1.db\n"
		 "[plugin p]\npath = /dev/null\ntypes = *\n"
		 "opt = %0300d\n",
		 0);
	expect_one(f, ini, 7, "line longer than 197 characters (inih's limit)");

	/* A NUL byte. */
	assert_int_equal(load_raw(f, nul, sizeof(nul) - 1), SEMQ_ERR_CONFIG);
	expect(f, f->errs, 4, "NUL byte in line");
	assert_int_equal(count_lines(f->errs), 1);
}

static void test_many_errors(void **state)
{
	struct fx *f = *state;
	static const char ini[] = "[node]\n"               /* 1 */
				  "id = S1\n"              /* 2 */
				  "lissen = 1.2.3.4:7\n"   /* 3 */
				  "window = 0\n"           /* 4 */
				  "relay = perhaps\n"      /* 5 */
				  "[tls]\n"                /* 6 */
				  "cert = certs/x.crt\n"   /* 7 */
				  "[bogus]\n"              /* 8 */
				  "[route]\n"              /* 9 */
				  "default = P9\n"         /* 10 */
				  "no equals sign here\n"; /* 11 */
	char *p;

	assert_int_equal(load(f, ini), SEMQ_ERR_CONFIG);
	expect(f, f->errs, 1, "[node] db is required");
	expect(f, f->errs, 3, "unknown key 'lissen' in [node]");
	expect(f, f->errs, 4,
	       "[node] window: '0' is not between 1 and 1000000");
	expect(f, f->errs, 5,
	       "[node] relay: 'perhaps' is not yes/no (yes, no, true, false, "
	       "on, off, 1, 0)");
	expect(f, f->errs, 7,
	       "[tls] cert: cannot read 'certs/x.crt': No such file or "
	       "directory");
	expect(f, f->errs, 8, "unknown section [bogus]");
	expect(f, f->errs, 10,
	       "[route] default: no [peer P9] to route through");
	expect(f, f->errs, 11,
	       "syntax error: expected [section], key = value or a comment");
	assert_int_equal(count_lines(f->errs), 8);
	/* In line order. */
	p = strstr(f->errs, ":1: ");
	assert_non_null(p);
	assert_true(p < strstr(f->errs, ":3: "));
	assert_true(strstr(f->errs, ":3: ") < strstr(f->errs, ":4: "));
	assert_true(strstr(f->errs, ":10: ") < strstr(f->errs, ":11: "));
}

static void test_relative_paths(void **state)
{
	struct fx *f = *state;
	char cwd[PATH_MAX], parent[sizeof(f->dir)], rel[PATH_MAX];
	char want[2 * PATH_MAX];
	struct config *c = NULL;
	char *errs = NULL;
	char *slash;

	put(f, "etc/semq/certs/a.crt", "a\n");
	put(f, "etc/semq/certs/a.key", "k\n");
	put(f, "etc/semq/ca.crt", "ca\n");
	put(f, "lib/j.so", "so\n");
	put(f, "etc/semq/node.ini",
	    "[node]\nid = S1\ndb = ../../var/s1.db\n"
	    "[tls]\ncert = certs/a.crt\nkey = ./certs/a.key\nca = ca.crt\n"
	    "[plugin j]\npath = ../../lib/j.so\ntypes = *\n");
	put(f, "var/.keep", "");

	/* Absolute config path: paths are under its directory. */
	snprintf(rel, sizeof(rel), "%s/etc/semq/node.ini", f->dir);
	assert_int_equal(config_load(rel, &c, &errs), SEMQ_OK);
	snprintf(want, sizeof(want), "%s/etc/semq/../../var/s1.db", f->dir);
	assert_string_equal(c->db, want);
	snprintf(want, sizeof(want), "%s/etc/semq/certs/a.crt", f->dir);
	assert_string_equal(c->tls_cert, want);
	snprintf(want, sizeof(want), "%s/etc/semq/./certs/a.key", f->dir);
	assert_string_equal(c->tls_key, want);
	snprintf(want, sizeof(want), "%s/etc/semq/../../lib/j.so", f->dir);
	assert_string_equal(c->plugins[0].path, want);
	config_free(c);
	c = NULL;

	/* Relative config path, from the fixture's parent directory: the
	 * result is relative too, and the files are still found. */
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	snprintf(parent, sizeof(parent), "%s", f->dir);
	slash = strrchr(parent, '/');
	assert_non_null(slash);
	*slash = '\0';
	assert_int_equal(chdir(parent[0] ? parent : "/"), 0);
	snprintf(rel, sizeof(rel), "%s/etc/semq/node.ini", slash + 1);
	assert_int_equal(config_load(rel, &c, &errs), SEMQ_OK);
	snprintf(want, sizeof(want), "%s/etc/semq/ca.crt", slash + 1);
	assert_string_equal(c->tls_ca, want);
	config_free(c);
	c = NULL;

	/* Config in the working directory, named without a slash: paths are
	 * under "." (as with ./node.ini), so that a plugin path is a file to
	 * dlopen(), not a name to look up in the library path. */
	snprintf(rel, sizeof(rel), "%s/etc/semq", f->dir);
	assert_int_equal(chdir(rel), 0);
	assert_int_equal(config_load("node.ini", &c, &errs), SEMQ_OK);
	assert_string_equal(c->tls_ca, "./ca.crt");
	assert_string_equal(c->db, "./../../var/s1.db");
	assert_string_equal(c->plugins[0].path, "./../../lib/j.so");
	config_free(c);
	c = NULL;
	assert_int_equal(config_load("./node.ini", &c, &errs), SEMQ_OK);
	assert_string_equal(c->plugins[0].path, "./../../lib/j.so");
	/* An absolute path stays as it is. */
	config_free(c);
	c = NULL;
	put(f, "etc/semq/node.ini", "[node]\nid = S1\ndb = /tmp/x.db\n");
	assert_int_equal(config_load("node.ini", &c, &errs), SEMQ_OK);
	assert_string_equal(c->db, "/tmp/x.db");
	config_free(c);
	assert_int_equal(chdir(cwd), 0);
	assert_null(errs);
}

static void test_cannot_open(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX + 16], want[2 * PATH_MAX];
	static struct config sentinel;
	struct config *c = &sentinel;
	char *errs = NULL;

	snprintf(path, sizeof(path), "%s/none.ini", f->dir);
	assert_int_equal(config_load(path, &c, &errs), SEMQ_ERR_IO);
	assert_null(c);
	snprintf(want, sizeof(want),
		 "%s: cannot open: No such file or directory\n", path);
	assert_string_equal(errs, want);
	free(errs);

	assert_int_equal(config_load(NULL, &c, &errs), SEMQ_ERR_INVALID);
	assert_int_equal(config_load(path, NULL, &errs), SEMQ_ERR_INVALID);
	config_free(NULL);
}

static void test_parse_duration(void **state)
{
	int64_t ms = -1;

	(void)state;
	assert_int_equal(config_parse_duration("250ms", &ms), SEMQ_OK);
	assert_int_equal(ms, 250);
	assert_int_equal(config_parse_duration("5s", &ms), SEMQ_OK);
	assert_int_equal(ms, 5000);
	assert_int_equal(config_parse_duration("30", &ms), SEMQ_OK);
	assert_int_equal(ms, 30000);
	assert_int_equal(config_parse_duration("1m", &ms), SEMQ_OK);
	assert_int_equal(ms, 60000);
	assert_int_equal(config_parse_duration("6h", &ms), SEMQ_OK);
	assert_int_equal(ms, 6LL * 3600000);
	assert_int_equal(config_parse_duration("2d", &ms), SEMQ_OK);
	assert_int_equal(ms, 2LL * 86400000);
	assert_int_equal(config_parse_duration("0", &ms), SEMQ_OK);
	assert_int_equal(ms, 0);
	assert_int_equal(config_parse_duration("007s", &ms), SEMQ_OK);
	assert_int_equal(ms, 7000);
	assert_int_equal(config_parse_duration("9223372036854775807ms", &ms),
			 SEMQ_OK);
	assert_int_equal(ms, INT64_MAX);

	ms = 42;
	assert_int_equal(config_parse_duration("106751991167d", &ms), SEMQ_OK);
	assert_int_equal(ms, 106751991167LL * 86400000);

	ms = 42;
	assert_int_equal(config_parse_duration("9223372036854775808ms", &ms),
			 SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("9223372036854776s", &ms),
			 SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("106751991168d", &ms),
			 SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("99999999999999999999", &ms),
			 SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("-5s", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("+5s", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("s", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("5 s", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration(" 5s", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("1.5s", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("5S", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("5sec", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("1h30m", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("5w", &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration(NULL, &ms), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_duration("5s", NULL), SEMQ_ERR_INVALID);
	assert_int_equal(ms, 42); /* untouched on error */
}

static void test_parse_size(void **state)
{
	size_t v = 1;

	(void)state;
	assert_int_equal(config_parse_size("1000", &v), SEMQ_OK);
	assert_int_equal(v, 1000);
	assert_int_equal(config_parse_size("0", &v), SEMQ_OK);
	assert_int_equal(v, 0);
	assert_int_equal(config_parse_size("512B", &v), SEMQ_OK);
	assert_int_equal(v, 512);
	assert_int_equal(config_parse_size("64KiB", &v), SEMQ_OK);
	assert_int_equal(v, 65536);
	assert_int_equal(config_parse_size("64K", &v), SEMQ_OK);
	assert_int_equal(v, 65536);
	assert_int_equal(config_parse_size("64k", &v), SEMQ_OK);
	assert_int_equal(v, 65536);
	assert_int_equal(config_parse_size("16MiB", &v), SEMQ_OK);
	assert_int_equal(v, 16 * 1048576);
	assert_int_equal(config_parse_size("16M", &v), SEMQ_OK);
	assert_int_equal(v, 16 * 1048576);
	assert_int_equal(config_parse_size("1GiB", &v), SEMQ_OK);
	assert_int_equal(v, 1073741824);
	assert_int_equal(config_parse_size("2G", &v), SEMQ_OK);
	assert_int_equal(v, 2147483648u);
	assert_int_equal(config_parse_size("18446744073709551615", &v),
			 SEMQ_OK);
	assert_true(v == SIZE_MAX);

	v = 7;
	assert_int_equal(config_parse_size("18446744073709551616", &v),
			 SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("17179869184G", &v),
			 SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("-1", &v), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("", &v), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("KiB", &v), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("16MB", &v), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("16 MiB", &v), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("1.5M", &v), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("1T", &v), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size(NULL, &v), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_size("1", NULL), SEMQ_ERR_INVALID);
	assert_int_equal(v, 7);
}

static void test_parse_addr(void **state)
{
	struct cfg_addr a;

	(void)state;
	assert_int_equal(config_parse_addr("127.0.0.1:7103", &a), SEMQ_OK);
	assert_int_equal(a.set, 1);
	assert_string_equal(a.host, "127.0.0.1");
	assert_int_equal(a.port, 7103);
	assert_int_equal(config_parse_addr("[::1]:7000", &a), SEMQ_OK);
	assert_string_equal(a.host, "::1");
	assert_int_equal(a.port, 7000);
	assert_int_equal(config_parse_addr("[fe80::1:2]:1", &a), SEMQ_OK);
	assert_string_equal(a.host, "fe80::1:2");
	assert_int_equal(a.port, 1);
	assert_int_equal(config_parse_addr("platform.example.com:65535", &a),
			 SEMQ_OK);
	assert_string_equal(a.host, "platform.example.com");
	assert_int_equal(a.port, 65535);
	assert_int_equal(config_parse_addr("localhost:007", &a), SEMQ_OK);
	assert_int_equal(a.port, 7);

	memset(&a, 0x5a, sizeof(a));
	assert_int_equal(config_parse_addr("host:0", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("host:65536", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("host:70000", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("host:99999999999999999999999", &a),
			 SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("host:", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("host:-1", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("host:80x", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("host", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr(":80", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("::1:80", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("[::1]", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("[::1]80", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("[]:80", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("[1.2.3.4]:80", &a),
			 SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("[::1:80", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("ho st:80", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("a/b:80", &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr(NULL, &a), SEMQ_ERR_INVALID);
	assert_int_equal(config_parse_addr("h:1", NULL), SEMQ_ERR_INVALID);
	{
		char big[300];

		memset(big, 'a', 256);
		snprintf(big + 256, sizeof(big) - 256, ":80");
		assert_int_equal(config_parse_addr(big, &a), SEMQ_ERR_INVALID);
		big[255] = ':';
		big[256] = '8';
		big[257] = '\0';
		assert_int_equal(config_parse_addr(big, &a), SEMQ_OK);
		assert_int_equal(strlen(a.host), 255);
		assert_int_equal(a.port, 8);
	}
	/* Untouched on error. */
	memset(&a, 0x5a, sizeof(a));
	assert_int_equal(config_parse_addr("host:0", &a), SEMQ_ERR_INVALID);
	assert_int_equal(a.set, 0x5a5a5a5a);
}

static void test_check_daemon(void **state)
{
	struct fx *f = *state;

	put(f, "c.crt", "c\n");
	put(f, "c.key", "k\n");
	put(f, "ca.crt", "ca\n");
	put(f, "j.so", "so\n");

	/* listen without [tls]: no line, all three named. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n"
				 "listen = 127.0.0.1:7000\n"),
			 SEMQ_OK);
	assert_int_equal(config_check_daemon(f->c, &f->errs), SEMQ_ERR_CONFIG);
	expect(f, f->errs, 0, "[tls] cert is required: [node] listen is set");
	expect(f, f->errs, 0, "[tls] key is required: [node] listen is set");
	expect(f, f->errs, 0, "[tls] ca is required: [node] listen is set");
	assert_int_equal(count_lines(f->errs), 3);

	/* A peer with an incomplete [tls]: at the [tls] line; appended. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n[tls]\n"
				 "cert = c.crt\nkey = c.key\n[peer P1]\n"),
			 SEMQ_OK);
	f->errs = strdup("earlier problem\n");
	assert_non_null(f->errs);
	assert_int_equal(config_check_daemon(f->c, &f->errs), SEMQ_ERR_CONFIG);
	assert_true(strncmp(f->errs, "earlier problem\n", 16) == 0);
	expect(f, f->errs, 4,
	       "[tls] ca is required: there are [peer] sections");
	assert_int_equal(count_lines(f->errs), 2);
	free(f->errs);
	f->errs = NULL;

	/* Nothing to do at all. */
	assert_int_equal(load(f, "\n[node]\nid = S1\ndb = s1.db\n"), SEMQ_OK);
	assert_int_equal(config_check_daemon(f->c, &f->errs), SEMQ_ERR_CONFIG);
	expect(f, f->errs, 2,
	       "[node] has no listen, no [peer] and no [plugin]: semqd would "
	       "have nothing to do");
	assert_int_equal(count_lines(f->errs), 1);
	free(f->errs);
	f->errs = NULL;

	/* A plugin alone needs no TLS. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n[plugin j]\n"
				 "path = j.so\ntypes = *\n"),
			 SEMQ_OK);
	assert_int_equal(config_check_daemon(f->c, &f->errs), SEMQ_OK);
	assert_null(f->errs);

	/* Complete. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n"
				 "listen = [::1]:7000\n[tls]\ncert = c.crt\n"
				 "key = c.key\nca = ca.crt\n"),
			 SEMQ_OK);
	assert_int_equal(config_check_daemon(f->c, &f->errs), SEMQ_OK);
	assert_null(f->errs);
	assert_false(f->c->allow_listed);
	assert_int_equal(config_check_daemon(NULL, &f->errs), SEMQ_ERR_INVALID);

	/* allow = listed while listening with no [peer]: nobody could
	 * connect. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n"
				 "listen = [::1]:7000\nallow = listed\n[tls]\n"
				 "cert = c.crt\nkey = c.key\nca = ca.crt\n"),
			 SEMQ_OK);
	assert_true(f->c->allow_listed);
	assert_int_equal(config_check_daemon(f->c, &f->errs), SEMQ_ERR_CONFIG);
	expect(f, f->errs, 1,
	       "[node] allow = listed, listen is set and there is no [peer] "
	       "section: every peer that connects would be refused; list "
	       "them ([peer ID]) or set allow = any");
	assert_int_equal(count_lines(f->errs), 1);
	free(f->errs);
	f->errs = NULL;
	/* ... and with one, an empty section, it is fine. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n"
				 "listen = [::1]:7000\nallow = listed\n[tls]\n"
				 "cert = c.crt\nkey = c.key\nca = ca.crt\n"
				 "[peer R9]\n"),
			 SEMQ_OK);
	assert_int_equal(config_check_daemon(f->c, &f->errs), SEMQ_OK);
	assert_non_null(config_peer(f->c, "R9"));
	assert_null(f->errs);
}

/* [node] instance: the name set, 1..64 characters, the default by db. */
static void test_instance(void **state)
{
	struct fx *f = *state;
	char name[70], ini[256], msg[256];

	/* A SQLite file: no instance unless one is set. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = s1.db\n"), SEMQ_OK);
	assert_string_equal(f->c->instance, "");
	assert_int_equal(f->c->db_url, 0);
	assert_int_equal(
		load(f, "[node]\nid = S1\ndb = s1.db\ninstance = a-1.b_2:x\n"),
		SEMQ_OK);
	assert_string_equal(f->c->instance, "a-1.b_2:x");

	/* 64 characters are fine, 65 are not. */
	memset(name, 'i', 65);
	name[64] = '\0';
	snprintf(ini, sizeof(ini),
		 "[node]\nid = S1\ndb = s1.db\ninstance = %s\n", name);
	assert_int_equal(load(f, ini), SEMQ_OK);
	assert_string_equal(f->c->instance, name);
	name[64] = 'i';
	name[65] = '\0';
	snprintf(ini, sizeof(ini),
		 "[node]\nid = S1\ndb = s1.db\ninstance = %s\n", name);
	snprintf(msg, sizeof(msg),
		 "[node] instance: '%s' is not an instance name (1-64 of "
		 "A-Za-z0-9._:-)",
		 name);
	expect_one(f, ini, 4, msg);

	/* Characters outside the set, an empty value, a second one. */
	expect_one(f, "[node]\nid = S1\ninstance = a b\ndb = s1.db\n", 3,
		   "[node] instance: 'a b' is not an instance name (1-64 of "
		   "A-Za-z0-9._:-)");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\ninstance = a/b\n", 4,
		   "[node] instance: 'a/b' is not an instance name (1-64 of "
		   "A-Za-z0-9._:-)");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\ninstance = S1@x\n", 4,
		   "[node] instance: 'S1@x' is not an instance name (1-64 of "
		   "A-Za-z0-9._:-)");
	expect_one(f, "[node]\nid = S1\ndb = s1.db\ninstance =\n", 4,
		   "[node] instance: empty value");
	expect_one(f,
		   "[node]\nid = S1\ndb = s1.db\ninstance = a\ninstance = b\n",
		   5, "duplicate key 'instance' in [node] (first at line 4)");
	/* Not a key of other sections. */
	expect_one(f, "[node]\nid = S1\ndb = s1.db\n[peer P1]\ninstance = a\n",
		   5, "unknown key 'instance' in [peer P1]");
}

/* [node] db: a postgresql:// URL is kept as written (no path resolution, no
 * directory check) and makes the default instance HOST-PID. */
static void test_db_url(void **state)
{
	struct fx *f = *state;
	const char *url = "postgresql://semq:pw@localhost:5432/semq?host=/tmp";
	char ini[512], host[256] = "", want[128], path[PATH_MAX + 16];
	size_t hl;

	snprintf(ini, sizeof(ini), "[node]\nid = S1\ndb = %s\n", url);
	assert_int_equal(load(f, ini), SEMQ_OK);
	assert_string_equal(f->c->db, url);
	assert_int_equal(f->c->db_url, 1);
	/* HOST-PID: this process's pid after the (sanitised) host name. */
	snprintf(want, sizeof(want), "-%ld", (long)getpid());
	hl = strlen(f->c->instance);
	assert_true(hl > strlen(want) && hl <= 64);
	assert_string_equal(f->c->instance + hl - strlen(want), want);
	assert_int_equal(gethostname(host, sizeof(host) - 1), 0);
	for (size_t i = 0; i < hl - strlen(want); i++) {
		char one[2] = {host[i], '\0'};
		assert_int_equal(f->c->instance[i],
				 config_instance_valid(one) ? host[i] : '-');
	}
	assert_true(config_instance_valid(f->c->instance));

	/* An explicit instance wins; postgres:// is the same scheme. */
	assert_int_equal(load(f, "[node]\nid = S1\ninstance = b\n"
				 "db = postgres://h/db\n"),
			 SEMQ_OK);
	assert_string_equal(f->c->db, "postgres://h/db");
	assert_int_equal(f->c->db_url, 1);
	assert_string_equal(f->c->instance, "b");

	/* A URL must have something after the scheme and no blanks; the
	 * message does not repeat the URL (it may hold a password). */
	expect_one(f, "[node]\nid = S1\ndb = postgresql://\n", 3,
		   "[node] db: postgresql://: nothing after the scheme");
	expect_one(f, "[node]\nid = S1\ndb = postgres://u:pw@h/d b\n", 3,
		   "[node] db: postgres URL: a blank or control character at "
		   "offset 19; percent-encode it (%20)");
	/* Anything else is a path, resolved and checked as before. */
	assert_int_equal(load(f, "[node]\nid = S1\ndb = pg.db\n"), SEMQ_OK);
	assert_int_equal(f->c->db_url, 0);
	snprintf(path, sizeof(path), "%s/pg.db", f->dir);
	assert_string_equal(f->c->db, path);
}

static void test_describe(void **state)
{
	static const char *const want[] = {
		"[node]",
		"[tls]",
		"[peer NAME]",
		"[route]",
		"[plugin NAME]",
		"[redo]",
		"  id = ",
		"  db = ",
		"  listen = ",
		"  admin = ",
		"  admin_token = ",
		"  relay = ",
		"  store_and_forward = ",
		"  synchronous = ",
		"  poll_interval = ",
		"  query_after = ",
		"  outbound_retention = ",
		"  ping_interval = ",
		"  idle_timeout = ",
		"  reconnect_min = ",
		"  reconnect_max = ",
		"  window = ",
		"  drain_rate = ",
		"  batch_max = ",
		"  max_payload = ",
		"  max_frame = ",
		"  log_level = ",
		"  log_file = ",
		"  cert = ",
		"  key = ",
		"  ca = ",
		"  connect = ",
		"  trusted_relay = ",
		"  default = ",
		"  DEST = ",
		"  path = ",
		"  types = ",
		"  KEY = ",
		"  levels = ",
		"  max_tries = ",
		"(default 50ms)",
		"(default 16MiB)",
		"(default 5s,30s,1m,10m,30m,1h,6h,1d,2d)",
		"(default full)",
		"(default max_payload + 64KiB)",
		"off|normal|full|extra",
		"error|warn|info|debug",
		"integer 1..1000000",
		"duration 1ms..1h",
	};
	char *buf = NULL;
	size_t len = 0;
	FILE *mf = open_memstream(&buf, &len);

	(void)state;
	assert_non_null(mf);
	config_describe(mf);
	assert_int_equal(fclose(mf), 0);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!strstr(buf, want[i]))
			fail_msg("describe lacks '%s':\n%s", want[i], buf);
	/* id and db are marked required. */
	assert_non_null(strstr(buf, "  id = <node id>  (required)"));
	assert_non_null(
		strstr(buf, "  db = <path or postgresql:// URL>  (required)"));
	/* instance is optional, with a default that depends on db. */
	assert_non_null(strstr(buf, "  instance = <instance name>  (default "
				    "none, or HOST-PID with a URL db)"));
	free(buf);
}

/* [relay] relay_ack and require_connected: defaults, a forward-only relay
 * (several ids), and what they need of [node], each at its own line. */
static void test_relay_keys(void **state)
{
	struct fx *f = *state;

	assert_int_equal(load(f, "[node]\nid = R1\ndb = r1.db\n"), SEMQ_OK);
	assert_int_equal(f->c->relay_ack, 1);
	assert_int_equal(f->c->n_relay_require, 0);

	assert_int_equal(load(f, "[node]\nid = P1\ndb = p1.db\nrelay = yes\n"
				 "[relay]\nrelay_ack = no\n"
				 "require_connected = S1, S2\n"),
			 SEMQ_OK);
	assert_int_equal(f->c->relay_ack, 0);
	assert_int_equal(f->c->n_relay_require, 2);
	assert_string_equal(f->c->relay_require[0], "S1");
	assert_string_equal(f->c->relay_require[1], "S2");
	assert_int_equal(f->c->relay_line, 5);

	expect_one(f,
		   "[node]\nid = P1\ndb = p1.db\nrelay = yes\n"
		   "store_and_forward = yes\n[relay]\nrequire_connected = S1\n",
		   7,
		   "[relay] require_connected: only for a forward-only relay "
		   "(relay = yes, store_and_forward = no); a relay that stores "
		   "keeps the messages of an absent destination instead of "
		   "refusing its peers");
	expect_one(f,
		   "[node]\nid = R1\ndb = r1.db\n[relay]\n"
		   "require_connected = S1\n",
		   5,
		   "[relay] require_connected: only for a forward-only relay "
		   "(relay = yes, store_and_forward = no); a relay that stores "
		   "keeps the messages of an absent destination instead of "
		   "refusing its peers");
	expect_one(f,
		   "[node]\nid = P1\ndb = p1.db\nrelay = yes\n[relay]\n"
		   "require_connected = S1,P1\n",
		   6, "[relay] require_connected: 'P1' is this node itself");
	expect_one(f,
		   "[node]\nid = P1\ndb = p1.db\nrelay = yes\n[relay]\n"
		   "require_connected = S1,S 2\n",
		   6,
		   "[relay] require_connected: item 2 'S 2' is not a node id "
		   "(1-64 of A-Za-z0-9._-)");
	expect_one(f,
		   "[node]\nid = P1\ndb = p1.db\nrelay = yes\n[relay]\n"
		   "require_connected = S1,S1\n",
		   6, "[relay] require_connected: 'S1' is listed twice");
	expect_one(f, "[node]\nid = R1\ndb = r1.db\n[relay]\nrelay_ack = no\n",
		   5,
		   "[relay] relay_ack: only a relay (relay = yes) sends "
		   "RelayAck");
	expect_one(f,
		   "[node]\nid = P1\ndb = p1.db\nrelay = yes\n[relay]\n"
		   "relay_ack = maybe\n",
		   6,
		   "[relay] relay_ack: 'maybe' is not yes/no (yes, no, true, "
		   "false, on, off, 1, 0)");
	/* yes on a node that does not relay changes nothing: accepted */
	assert_int_equal(load(f, "[node]\nid = R1\ndb = r1.db\n[relay]\n"
				 "relay_ack = yes\n"),
			 SEMQ_OK);
}

/* What config_diff() reported: "sect/key" or "plugin/NAME/what", each
 * followed by a space. */
struct diffs {
	char s[2048];
};

static void on_diff(void *ctx, const char *sect, const char *name,
		    const char *key)
{
	struct diffs *d = ctx;
	size_t l = strlen(d->s);

	snprintf(d->s + l, sizeof(d->s) - l, "%s/%s%s%s ", sect,
		 name ? name : "", name ? "/" : "", key);
}

/* config_diff() (a reload) names exactly the key whose value changed, for
 * every key of every type of [node], [tls], [redo] and [relay], and the
 * [plugin] sections added, removed and changed; nothing for the same file.
 */
static void test_diff(void **state)
{
	static const char base_fmt[] = "[node]\n%s\n%s\n"
				       "[tls]\n%s\n[redo]\n%s\n[relay]\n%s\n"
				       "[plugin p]\npath = /dev/null\n%s\n";
	static const struct {
		const char *sect, *line, *want;
	} cases[] = {
		{"head", "id = S2\ndb = s1.db\nrelay = yes", "node/id "},
		{"head", "id = S1\ndb = other.db\nrelay = yes", "node/db "},
		{"head", "id = S1\ndb = postgresql://h/db\nrelay = yes",
		 "node/db node/instance "},
		{"node", "instance = i1", "node/instance "},
		{"node", "listen = 127.0.0.1:7000", "node/listen "},
		{"node", "admin = [::1]:7001", "node/admin "},
		{"node", "admin_token = t", "node/admin_token "},
		{"node", "allow = listed", "node/allow "},
		{"head", "id = S1\ndb = s1.db\nrelay = no", "node/relay "},
		{"node", "store_and_forward = yes", "node/store_and_forward "},
		{"node", "synchronous = off", "node/synchronous "},
		{"node", "poll_interval = 1s", "node/poll_interval "},
		{"node", "receipt_retention = 0", "node/receipt_retention "},
		{"node", "max_connections = 10", "node/max_connections "},
		{"node", "workers = 2", "node/workers "},
		{"node", "memory_budget = 2MiB", "node/memory_budget "},
		{"node", "max_payload = 1MiB",
		 "node/max_payload node/max_frame "},
		{"node", "max_frame = 32MiB", "node/max_frame "},
		{"node", "log_level = debug", "node/log_level "},
		{"node", "log_file = x.log", "node/log_file "},
		{"tls", "deny = A,B\ncert = f.pem", "tls/cert "},
		{"tls", "deny = A,B\ncrl = f.pem", "tls/crl "},
		{"tls", "deny = A,C", "tls/deny "},
		{"tls", "deny = A", "tls/deny "},
		{"redo", "levels = 1s,2s", "redo/levels "},
		{"redo", "levels = 5s,30s,1m,10m,30m,1h,6h,1d,3d",
		 "redo/levels "},
		{"redo", "max_tries = 3", "redo/max_tries "},
		{"redo", "retention = 1d", "redo/retention "},
		{"relay", "quota_bytes = 1MiB", "relay/quota_bytes "},
		{"relay", "quota_messages_per_origin = 5",
		 "relay/quota_messages_per_origin "},
		{"relay", "unknown_dest_after = 1h",
		 "relay/unknown_dest_after "},
		{"relay", "relay_ack = no", "relay/relay_ack "},
		{"relay", "require_connected = S9", "relay/require_connected "},
		{"plugin", "types = 1,3", "plugin/p/changed "},
		{"plugin", "types = *", "plugin/p/changed "},
		{"plugin", "types = 1,2\ndeadline = 1s", "plugin/p/changed "},
		{"plugin", "types = 1,2\nopt = x", "plugin/p/changed "},
		{"plugin",
		 "types = 1,2\n[plugin q]\npath = /dev/null\ntypes = *",
		 "plugin/q/added "},
	};
	static const char head[] = "id = S1\ndb = s1.db\nrelay = yes";
	static const char deny[] = "deny = A,B";
	static const char types[] = "types = 1,2";
	struct fx *f = *state;
	struct config *base;
	struct diffs d;
	char ini[1024];

	put(f, "f.pem", "x\n");
	snprintf(ini, sizeof(ini), base_fmt, head, "", deny, "", "", types);
	assert_int_equal(load(f, ini), SEMQ_OK);
	base = f->c;
	f->c = NULL;
	memset(&d, 0, sizeof(d));
	config_diff(base, base, on_diff, &d);
	assert_string_equal(d.s, "");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *x = cases[i].sect, *v = cases[i].line;

		snprintf(ini, sizeof(ini), base_fmt,
			 !strcmp(x, "head") ? v : head,
			 !strcmp(x, "node") ? v : "",
			 !strcmp(x, "tls") ? v : deny,
			 !strcmp(x, "redo") ? v : "",
			 !strcmp(x, "relay") ? v : "",
			 !strcmp(x, "plugin") ? v : types);
		if (load(f, ini) != SEMQ_OK)
			fail_msg("%s: %s", v, f->errs);
		memset(&d, 0, sizeof(d));
		config_diff(base, f->c, on_diff, &d);
		if (strcmp(d.s, cases[i].want) != 0)
			fail_msg("%s: reported '%s', not '%s'", v, d.s,
				 cases[i].want);
		/* The other way round: the same keys, a plugin removed. */
		memset(&d, 0, sizeof(d));
		config_diff(f->c, base, on_diff, &d);
		if (!strcmp(cases[i].want, "plugin/q/added "))
			assert_string_equal(d.s, "plugin/q/removed ");
		else
			assert_string_equal(d.s, cases[i].want);
	}
	config_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_full_valid),
		T(test_defaults),
		T(test_layout),
		T(test_unknown_key),
		T(test_unknown_section),
		T(test_bad_values),
		T(test_bad_dir),
		T(test_bad_id),
		T(test_missing_required),
		T(test_missing_files),
		T(test_duplicates),
		T(test_routes_and_peers),
		T(test_cross_checks),
		T(test_lists),
		T(test_syntax_errors),
		T(test_many_errors),
		T(test_relative_paths),
		T(test_cannot_open),
		T(test_parse_duration),
		T(test_parse_size),
		T(test_parse_addr),
		T(test_check_daemon),
		T(test_describe),
		T(test_instance),
		T(test_db_url),
		T(test_relay_keys),
		T(test_diff),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
