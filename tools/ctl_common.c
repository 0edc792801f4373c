/* SPDX-License-Identifier: MIT */
/*
 * What the command groups of semqctl share (see ctl.h): the messages and
 * the operator's record, the options, the node's configuration and
 * database, the listing filters, table cells and times, and the payload
 * printers of `outbound show` and `redo show`.
 */
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <semq/error.h>
#include <semq/semq.h>

#include "config.h"
#include "jsontext.h"
#include "store.h"
#include "types.h"

/* ---- messages ------------------------------------------------------------ */

/* A usage error: one line naming the culprit, one pointing at --help. */
int usage_err(const struct ctl *c, const char *fmt, ...)
{
	va_list ap;

	fputs("semqctl: ", stderr);
	if (c->cmd)
		fprintf(stderr, "%s: ", c->cmd->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (c->cmd)
		fprintf(stderr, "\nTry 'semqctl %s --help'.\n", c->cmd->name);
	else
		fputs("\nTry 'semqctl --help'.\n", stderr);
	return EXIT_USAGE;
}

/* A runtime failure: one line. */
int fail(const char *fmt, ...)
{
	va_list ap;

	fputs("semqctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_FAIL;
}

/* Who ran semqctl, for the operator's lines. */
static const char *who(void)
{
	const char *u = getenv("SUDO_USER");

	if (!u || !*u)
		u = getenv("USER");
	return u && *u ? u : "?";
}

/*
 * The record of an operator's change: one line on semqctl's stderr,
 * "semqctl: operator USER (pid N) on DB: WHAT". semqctl changes the
 * database directly, not through the daemon, so the daemon's log cannot
 * have it; the terminal or the script that ran semqctl keeps it, and the
 * entries keep their discard_reason and updated_at.
 */
void operator_said(const struct ctl *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "semqctl: operator %s (pid %ld) on %s: ", who(),
		(long)getpid(), c->db);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The value of option `name` of the current command, NULL when not given. */
const char *opt(const struct ctl *c, const char *name)
{
	const struct ctl_opt *o;
	int k;

	for (k = 0, o = c->cmd->opts; o && o->name && k < CTL_MAX_OPTS;
	     k++, o++)
		if (!strcmp(o->name, name))
			return c->val[k];
	return NULL;
}

/* A decimal number 0..max, digits only. SEMQ_OK or SEMQ_ERR_INVALID. */
int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return SEMQ_ERR_INVALID;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return SEMQ_ERR_INVALID;
		if (v > (max - (uint64_t)(*s - '0')) / 10)
			return SEMQ_ERR_INVALID;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return SEMQ_OK;
}

int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the node: configuration and database -------------------------------- */

/* Loads c->config_path into c->cfg. EXIT_OK, or EXIT_USAGE after printing
 * that the file is not there (and how it was chosen) or every problem
 * config_load() found. */
int ctl_load_config(struct ctl *c)
{
	char *errs = NULL, err[SEMQ_ERRLEN + PATH_MAX];
	size_t n;
	int r;

	if (config_file_exists(c->config_path, c->config_how, err,
			       sizeof err) != SEMQ_OK) {
		fprintf(stderr, "semqctl: %s\n", err);
		return EXIT_USAGE;
	}
	r = config_load(c->config_path, &c->cfg, &errs);
	if (r == SEMQ_OK) {
		semq_db_shown(c->cfg->db, c->db, sizeof c->db);
		return EXIT_OK;
	}
	if (errs && *errs) {
		n = strlen(errs);
		fputs(errs, stderr);
		if (errs[n - 1] != '\n')
			fputc('\n', stderr);
	} else {
		fprintf(stderr, "semqctl: %s: %s\n", c->config_path,
			semq_strerror(r));
	}
	free(errs);
	return r == SEMQ_ERR_NOMEM || r == SEMQ_ERR_INTERNAL ? EXIT_FAIL
							     : EXIT_USAGE;
}

/* Opens the node's database (migrating it; creating it only with --create)
 * into c->st. A database that is not there is exit 1, saying how to make
 * it. */
int ctl_open_store(struct ctl *c)
{
	struct store_opts o = {
		.path = c->cfg->db,
		.node_id = c->cfg->id,
		.max_payload = c->cfg->max_payload,
		.synchronous = c->cfg->synchronous,
		.redo_levels_ms = c->cfg->redo_levels_ms,
		.n_redo_levels = c->cfg->n_redo_levels,
		.max_tries = c->cfg->max_tries,
		.no_create = !c->create,
	};
	char err[SEMQ_ERRLEN] = "";
	int r;

	r = store_open(&o, &c->st, err, sizeof err);
	if (r == SEMQ_ERR_NOT_FOUND)
		return fail("%s (the node creates it on first start; "
			    "semqctl --create to create it now)",
			    err);
	if (r != SEMQ_OK)
		return fail("%s", err[0] ? err : "cannot open the database");
	return EXIT_OK;
}

/* Prints a JSON document (stolen) on stdout. */
int print_json(json_t *doc)
{
	int r;

	if (!doc)
		return fail("out of memory");
	r = json_dumpf(doc, stdout, JSON_INDENT(2));
	json_decref(doc);
	if (r)
		return fail("writing JSON to stdout failed");
	fputc('\n', stdout);
	return EXIT_OK;
}

void *grow(void *v, size_t n, size_t *cap, size_t size)
{
	size_t want;

	if (n < *cap)
		return v;
	want = *cap ? *cap * 2 : 16;
	if (want > SIZE_MAX / size)
		return NULL;
	v = realloc(v, want * size);
	if (v)
		*cap = want;
	return v;
}

char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

int strcmp_null(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "");
}

/* "3s", "5m", "2h" for ages under a day, else the UTC time. */
const char *fmt_oldest(int64_t oldest, int64_t now, char *buf, size_t sz)
{
	int64_t age = now - oldest;
	time_t t = (time_t)(oldest / 1000);
	struct tm tm;

	if (oldest <= 0)
		snprintf(buf, sz, "-");
	else if (age >= 0 && age < 60 * 1000)
		snprintf(buf, sz, "%llds", (long long)(age / 1000));
	else if (age >= 0 && age < 3600 * 1000)
		snprintf(buf, sz, "%lldm", (long long)(age / 60000));
	else if (age >= 0 && age < 86400 * 1000)
		snprintf(buf, sz, "%lldh", (long long)(age / 3600000));
	else if (gmtime_r(&t, &tm))
		strftime(buf, sz, "%Y-%m-%dT%H:%M:%SZ", &tm);
	else
		snprintf(buf, sz, "%lld", (long long)oldest);
	return buf;
}

/* ---- listings: filters, cells, tables, times ----------------------------- */

/* --status: one of the statuses of `table` (semq_statuses), by its
 * semq_status_name() or its number. */
int parse_status(const char *table, const char *s, int *out)
{
	const int *v;
	size_t n = semq_statuses(table, &v), i;
	char num[16];

	for (i = 0; i < n; i++) {
		snprintf(num, sizeof num, "%d", v[i]);
		if (!strcmp(s, semq_status_name(table, v[i])) ||
		    !strcmp(s, num)) {
			*out = v[i];
			return SEMQ_OK;
		}
	}
	return SEMQ_ERR_INVALID;
}

/* The listing filters --dest, --key, --since, --where of the command (those
 * it has) into f; the strings point into argv. 0 or a usage error. */
int parse_filter(struct ctl *c, struct store_filter *f, struct semq_where *w)
{
	const char *dest = opt(c, "--dest"), *key = opt(c, "--key");
	const char *since = opt(c, "--since"), *where = opt(c, "--where");

	if (dest && !semq_id_valid(dest))
		return usage_err(c,
				 "--dest '%s' is not a node id (1-64 of "
				 "A-Za-z0-9._-)",
				 dest);
	if (key && (!*key || strlen(key) > SEMQ_KEY_MAX))
		return usage_err(c, "--key '%s' is not a key of 1..%d bytes",
				 key, SEMQ_KEY_MAX);
	if (since && semq_when_parse(since, now_ms(), 0, &f->since))
		return usage_err(c, "--since '%s' is not %s", since,
				 SEMQ_WHEN_FORMS);
	if (where && semq_where_parse(where, w))
		return usage_err(c, "--where '%s' is not %s", where,
				 SEMQ_WHERE_FORMS);
	f->dest = dest;
	f->key = key;
	f->where = where ? w : NULL;
	return EXIT_OK;
}

/* Text a terminal shows as it is: UTF-8 with no control characters but
 * tab, newline and carriage return. */
static int printable(const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n' &&
		     p[i] != '\r') ||
		    p[i] == 0x7f)
			return 0;
	return semq_utf8_valid(p, n);
}

/*
 * A table cell from s (NULL -> "-"): control characters become spaces, bytes
 * that are not UTF-8 become '?', and after max_chars characters (0 = no
 * limit) the rest becomes "…". Returns buf (CELL_MAX bytes at least).
 */
const char *cell(const char *s, size_t max_chars, char *buf, size_t bufsz)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t n, k, o = 0, chars = 0;

	if (!s)
		return "-";
	n = strlen(s);
	while (n && o + 8 < bufsz) {
		if (max_chars && chars == max_chars) {
			memcpy(buf + o, "\xe2\x80\xa6", 3); /* … */
			o += 3;
			break;
		}
		k = semq_utf8_char(p, n);
		if (!k) {
			buf[o++] = '?';
			k = 1;
		} else if (k == 1 && (*p < 0x20 || *p == 0x7f)) {
			buf[o++] = ' ';
		} else {
			memcpy(buf + o, p, k);
			o += k;
		}
		p += k;
		n -= k;
		chars++;
	}
	buf[o] = '\0';
	return buf;
}

/* Columns a cell takes on a terminal: its UTF-8 characters. */
static int cols(const char *s)
{
	int n = 0;

	for (; *s; s++)
		if (((uint8_t)*s & 0xc0) != 0x80)
			n++;
	return n;
}

/* Prints s left-aligned in a column of w, then two spaces. */
static void put_cell(const char *s, int w)
{
	int pad = w - cols(s);

	printf("%s%*s  ", s, pad > 0 ? pad : 0, "");
}

/* An aligned table: the heading, then n rows of n_cols (<= TABLE_MAX_COLS)
 * columns; every column as wide as its widest cell, the last not padded. */
void print_table(const void *ctx, size_t n, int n_cols, table_cell_fn fn)
{
	int w[TABLE_MAX_COLS], col, k;
	char buf[CELL_MAX];
	int64_t now = now_ms();
	size_t i;

	for (col = 0; col < n_cols; col++)
		w[col] = cols(fn(ctx, TABLE_HEAD, col, now, buf, sizeof buf));
	for (i = 0; i < n; i++)
		for (col = 0; col < n_cols; col++) {
			k = cols(fn(ctx, i, col, now, buf, sizeof buf));
			if (k > w[col])
				w[col] = k;
		}
	for (i = 0; i <= n; i++) {
		size_t row = i ? i - 1 : TABLE_HEAD;
		for (col = 0; col < n_cols - 1; col++)
			put_cell(fn(ctx, row, col, now, buf, sizeof buf),
				 w[col]);
		printf("%s\n", fn(ctx, row, n_cols - 1, now, buf, sizeof buf));
	}
}

/* "3s", "5m", "2h", "4d": how long ago `at` was. */
const char *fmt_age(int64_t at, int64_t now, char *buf, size_t sz)
{
	int64_t age = now - at;

	if (at <= 0)
		snprintf(buf, sz, "-");
	else if (age < 60 * 1000)
		snprintf(buf, sz, "%llds",
			 (long long)(age > 0 ? age / 1000 : 0));
	else if (age < 3600 * 1000)
		snprintf(buf, sz, "%lldm", (long long)(age / 60000));
	else if (age < 86400 * 1000)
		snprintf(buf, sz, "%lldh", (long long)(age / 3600000));
	else
		snprintf(buf, sz, "%lldd", (long long)(age / 86400000));
	return buf;
}

/* "1717243200123 (2024-06-01T12:00:00.123Z)", or "-" for 0. */
const char *fmt_time(int64_t ms, char *buf, size_t sz)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	char iso[32];

	if (ms <= 0)
		snprintf(buf, sz, "-");
	else if (gmtime_r(&t, &tm) &&
		 strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%S", &tm))
		snprintf(buf, sz, "%lld (%s.%03dZ)", (long long)ms, iso,
			 (int)(ms % 1000));
	else
		snprintf(buf, sz, "%lld", (long long)ms);
	return buf;
}

/* A classic hex dump of p[0..n): offset, 16 bytes in hex, the ASCII. */
static void hexdump(const uint8_t *p, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i += 16) {
		printf("%08zx  ", i);
		for (j = i; j < i + 16; j++) {
			if (j < n)
				printf("%02x ", p[j]);
			else
				fputs("   ", stdout);
			if (j == i + 7)
				fputc(' ', stdout);
		}
		fputs(" |", stdout);
		for (j = i; j < i + 16 && j < n; j++)
			fputc(p[j] >= 0x20 && p[j] < 0x7f ? p[j] : '.', stdout);
		fputs("|\n", stdout);
	}
}

/* The payload: as text when a terminal can show it, else as a hex dump;
 * at most SHOW_PAYLOAD_MAX bytes, then how many more there are. */
void show_payload(const struct msg *m)
{
	size_t n = m->payload_len, shown = n;
	const uint8_t *p = m->payload;
	int text = printable(p, n);

	printf("%-16s %zu bytes%s\n", "payload", n,
	       !n     ? ""
	       : text ? ", text:"
		      : ", binary (hex):");
	if (!n)
		return;
	if (shown > SHOW_PAYLOAD_MAX) {
		shown = SHOW_PAYLOAD_MAX;
		/* Never cut a UTF-8 character in two. */
		while (text && shown > 0 && (p[shown] & 0xc0) == 0x80)
			shown--;
	}
	if (text) {
		fwrite(p, 1, shown, stdout);
		if (p[shown - 1] != '\n')
			fputc('\n', stdout);
	} else {
		hexdump(p, shown);
	}
	if (shown < n)
		printf("\xe2\x80\xa6 %zu more bytes\n", n - shown);
}

/* "label  text" for a text of any length (cleaned as a cell, not cut). */
void show_long_text(const char *label, const char *s)
{
	size_t sz = s ? strlen(s) + 16 : 0; /* cell() never grows the text */
	char *buf = sz ? malloc(sz) : NULL;

	if (s && !buf) /* out of memory: the raw text is better than none */
		printf("%-16s %s\n", label, s);
	else
		printf("%-16s %s\n", label, cell(s, 0, buf, sz));
	free(buf);
}

/* Adds "payload" (base64) and, when it is UTF-8, "payload_text" to o
 * (borrowed; *failed = 1 when out of memory). */
void payload_json(json_t *o, const struct msg *m, int *failed)
{
	char *b64 = base64_encode(m->payload, m->payload_len);

	jset(o, "payload", b64 ? json_string(b64) : NULL, failed);
	if (semq_utf8_valid(m->payload, m->payload_len))
		jset(o, "payload_text",
		     m->payload_len ? json_stringn((const char *)m->payload,
						   m->payload_len)
				    : json_string(""),
		     failed);
	free(b64);
}

/* "in 25s", "in 5m", "in 2h", "in 3d" until `at`, or "due" when it has
 * come. Seconds are rounded up, so a deadline still ahead is never "in 0s". */
const char *fmt_until(int64_t at, int64_t now, char *buf, size_t sz)
{
	int64_t d = at - now;

	if (d <= 0)
		snprintf(buf, sz, "due");
	else if (d <= 60 * 1000)
		snprintf(buf, sz, "in %llds", (long long)((d + 999) / 1000));
	else if (d < 3600 * 1000)
		snprintf(buf, sz, "in %lldm", (long long)(d / 60000));
	else if (d < 86400 * 1000)
		snprintf(buf, sz, "in %lldh", (long long)(d / 3600000));
	else
		snprintf(buf, sz, "in %lldd", (long long)(d / 86400000));
	return buf;
}
