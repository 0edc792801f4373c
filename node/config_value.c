/* SPDX-License-Identifier: MIT */
/*
 * The value parsers of node.ini (config_value.h): one per type, each from a
 * string to a typed value or to a line saying what is wrong with the value.
 * No sections, no keys, no file: config.c calls these from its setters.
 */
#define _GNU_SOURCE /* strndup */
#include "config_value.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <semq/error.h>

#define ITEM_MAX 128 /* one item of a comma list, with its NUL */

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* The leading decimal digits of s (no sign, no blanks) into *v. Returns
 * the number of digits. When the number exceeds UINT64_MAX, *over is set
 * and *v is UINT64_MAX, which every range check of ours refuses too. */
static size_t digits_u64(const char *s, uint64_t *v, int *over)
{
	uint64_t x = 0;
	size_t n = 0;

	*over = 0;
	for (; is_digit(s[n]); n++) {
		unsigned d = (unsigned)(s[n] - '0');
		if (x > (UINT64_MAX - d) / 10)
			*over = 1;
		x = *over ? UINT64_MAX : x * 10 + d;
	}
	*v = x;
	return n;
}

/* ---- durations and sizes -------------------------------------------------- */

int cv_duration(const char *s, int64_t *ms_out)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"", CV_SEC},  {"ms", 1},      {"s", CV_SEC},
		     {"m", CV_MIN}, {"h", CV_HOUR}, {"d", CV_DAY}};
	uint64_t v;
	size_t n;
	int over;

	if (!s)
		return SEMQ_ERR_INVALID;
	n = digits_u64(s, &v, &over);
	if (n == 0)
		return SEMQ_ERR_INVALID;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s + n, units[i].unit) != 0)
			continue;
		if (over || v > (uint64_t)(INT64_MAX / units[i].ms))
			return SEMQ_ERR_TOO_BIG;
		*ms_out = (int64_t)v * units[i].ms;
		return SEMQ_OK;
	}
	return SEMQ_ERR_INVALID;
}

int cv_duration_in(const char *s, int64_t min, int64_t max, int64_t *ms_out,
		   char *why, size_t whysz)
{
	char a[32], b[32];
	int64_t ms;
	int r = cv_duration(s, &ms);

	if (r == SEMQ_ERR_INVALID) {
		snprintf(why, whysz,
			 "'%s' is not a duration (250ms, 5s, 1m, 6h, 2d, or "
			 "seconds)",
			 s ? s : "");
		return SEMQ_ERR_INVALID;
	}
	if (r != SEMQ_OK || ms < min || ms > max) {
		snprintf(why, whysz, "'%s' is not between %s and %s", s,
			 cv_fmt_duration(min, a, sizeof(a)),
			 cv_fmt_duration(max, b, sizeof(b)));
		return SEMQ_ERR_INVALID;
	}
	*ms_out = ms;
	return SEMQ_OK;
}

int cv_size(const char *s, size_t *out)
{
	static const struct {
		const char *unit;
		uint64_t mult;
	} units[] = {{"", 1},        {"B", 1},         {"K", 1024},
		     {"k", 1024},    {"KiB", 1024},    {"M", 1 << 20},
		     {"m", 1 << 20}, {"MiB", 1 << 20}, {"G", 1 << 30},
		     {"g", 1 << 30}, {"GiB", 1 << 30}};
	uint64_t v;
	size_t n;
	int over;

	if (!s)
		return SEMQ_ERR_INVALID;
	n = digits_u64(s, &v, &over);
	if (n == 0)
		return SEMQ_ERR_INVALID;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s + n, units[i].unit) != 0)
			continue;
		if (over || v > SIZE_MAX / units[i].mult)
			return SEMQ_ERR_TOO_BIG;
		*out = (size_t)(v * units[i].mult);
		return SEMQ_OK;
	}
	return SEMQ_ERR_INVALID;
}

int cv_size_in(const char *s, uint64_t min, uint64_t max, size_t *out,
	       char *why, size_t whysz)
{
	char a[32], b[32];
	size_t sz;
	int r = cv_size(s, &sz);

	if (r == SEMQ_ERR_INVALID) {
		snprintf(why, whysz,
			 "'%s' is not a size (1000, 64KiB, 16MiB, 1GiB)",
			 s ? s : "");
		return SEMQ_ERR_INVALID;
	}
	if (r != SEMQ_OK || (uint64_t)sz < min || (uint64_t)sz > max) {
		snprintf(why, whysz, "'%s' is not between %s and %s", s,
			 cv_fmt_size((int64_t)min, a, sizeof(a)),
			 cv_fmt_size((int64_t)max, b, sizeof(b)));
		return SEMQ_ERR_INVALID;
	}
	*out = sz;
	return SEMQ_OK;
}

const char *cv_fmt_duration(int64_t ms, char *buf, size_t sz)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {
		{"d", CV_DAY}, {"h", CV_HOUR}, {"m", CV_MIN}, {"s", CV_SEC}};

	if (ms == 0) {
		snprintf(buf, sz, "%s", "0s");
		return buf;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ms % units[i].ms == 0) {
			snprintf(buf, sz, "%lld%s",
				 (long long)(ms / units[i].ms), units[i].unit);
			return buf;
		}
	}
	snprintf(buf, sz, "%lldms", (long long)ms);
	return buf;
}

const char *cv_fmt_size(int64_t b, char *buf, size_t sz)
{
	if (b > 0 && b % CV_GIB == 0)
		snprintf(buf, sz, "%lldGiB", (long long)(b / CV_GIB));
	else if (b > 0 && b % CV_MIB == 0)
		snprintf(buf, sz, "%lldMiB", (long long)(b / CV_MIB));
	else if (b > 0 && b % CV_KIB == 0)
		snprintf(buf, sz, "%lldKiB", (long long)(b / CV_KIB));
	else
		snprintf(buf, sz, "%lld", (long long)b);
	return buf;
}

/* ---- numbers, words, names ------------------------------------------------ */

int cv_uint_in(const char *s, unsigned min, unsigned max, unsigned *out,
	       char *why, size_t whysz)
{
	uint64_t u;
	size_t nd;
	int over;

	nd = s ? digits_u64(s, &u, &over) : 0;
	if (nd == 0 || s[nd] != '\0') {
		snprintf(why, whysz, "'%s' is not a whole number", s ? s : "");
		return SEMQ_ERR_INVALID;
	}
	if (u < min || u > max) {
		snprintf(why, whysz, "'%s' is not between %u and %u", s, min,
			 max);
		return SEMQ_ERR_INVALID;
	}
	*out = (unsigned)u;
	return SEMQ_OK;
}

int cv_bool(const char *s, int *out, char *why, size_t whysz)
{
	if (!s)
		s = "";
	if (!strcasecmp(s, "yes") || !strcasecmp(s, "true") ||
	    !strcasecmp(s, "on") || !strcmp(s, "1")) {
		*out = 1;
		return SEMQ_OK;
	}
	if (!strcasecmp(s, "no") || !strcasecmp(s, "false") ||
	    !strcasecmp(s, "off") || !strcmp(s, "0")) {
		*out = 0;
		return SEMQ_OK;
	}
	snprintf(why, whysz,
		 "'%s' is not yes/no (yes, no, true, false, on, off, 1, 0)", s);
	return SEMQ_ERR_INVALID;
}

int cv_enum(const char *s, const char *const *names, int *out, char *why,
	    size_t whysz)
{
	if (!s)
		s = "";
	for (int i = 0; names[i]; i++) {
		if (!strcasecmp(s, names[i])) {
			*out = i;
			return SEMQ_OK;
		}
	}
	snprintf(why, whysz, "'%s' is not one of", s);
	for (int i = 0; names[i]; i++) {
		size_t l = strlen(why);
		snprintf(why + l, whysz - l, "%s%s", i ? ", " : " ", names[i]);
	}
	return SEMQ_ERR_INVALID;
}

int cv_id(const char *s, char *out, char *why, size_t whysz)
{
	if (!s || !semq_id_valid(s)) {
		snprintf(why, whysz,
			 "'%s' is not a node id (1-64 of A-Za-z0-9._-)",
			 s ? s : "");
		return SEMQ_ERR_INVALID;
	}
	snprintf(out, SEMQ_ID_MAX + 1, "%s", s);
	return SEMQ_OK;
}

int cv_instance(const char *s, char *out, char *why, size_t whysz)
{
	if (!s || !*s || !config_instance_valid(s)) {
		snprintf(why, whysz,
			 "'%s' is not an instance name (1-64 of "
			 "A-Za-z0-9._:-)",
			 s ? s : "");
		return SEMQ_ERR_INVALID;
	}
	snprintf(out, SEMQ_INSTANCE_MAX + 1, "%s", s);
	return SEMQ_OK;
}

/* ---- addresses ------------------------------------------------------------ */

static int host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       is_digit(c) || c == '.' || c == '-' || c == '_';
}

int cv_addr(const char *s, struct cfg_addr *out, char *why, size_t whysz)
{
	const char *host, *port, *colon;
	size_t hlen;
	uint64_t p;
	size_t n;
	int over;

	memset(out, 0, sizeof(*out));
	if (!s || !*s) {
		snprintf(why, whysz, "%s", "empty address");
		return SEMQ_ERR_INVALID;
	}
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');
		char v6[INET6_ADDRSTRLEN + 1];
		struct in6_addr a6;

		if (!rb || rb[1] != ':') {
			snprintf(why, whysz,
				 "'%s' is not host:port or [v6]:port", s);
			return SEMQ_ERR_INVALID;
		}
		host = s + 1;
		hlen = (size_t)(rb - host);
		port = rb + 2;
		if (hlen == 0 || hlen >= sizeof(v6)) {
			snprintf(why, whysz, "'%s': not an IPv6 address", s);
			return SEMQ_ERR_INVALID;
		}
		memcpy(v6, host, hlen);
		v6[hlen] = '\0';
		if (inet_pton(AF_INET6, v6, &a6) != 1) {
			snprintf(why, whysz,
				 "'%s': '%s' is not an IPv6 address", s, v6);
			return SEMQ_ERR_INVALID;
		}
	} else {
		colon = strrchr(s, ':');
		if (!colon) {
			snprintf(why, whysz, "'%s': missing ':port'", s);
			return SEMQ_ERR_INVALID;
		}
		host = s;
		hlen = (size_t)(colon - s);
		port = colon + 1;
		if (memchr(host, ':', hlen)) {
			snprintf(why, whysz,
				 "'%s': write an IPv6 address in brackets, "
				 "as in [::1]:7000",
				 s);
			return SEMQ_ERR_INVALID;
		}
		if (hlen == 0) {
			snprintf(why, whysz, "'%s': missing host", s);
			return SEMQ_ERR_INVALID;
		}
		for (size_t i = 0; i < hlen; i++) {
			if (!host_char(host[i])) {
				snprintf(why, whysz,
					 "'%s': bad character '%c' in host", s,
					 host[i]);
				return SEMQ_ERR_INVALID;
			}
		}
	}
	if (hlen >= sizeof(out->host)) {
		snprintf(why, whysz, "'%s': host longer than %zu characters", s,
			 sizeof(out->host) - 1);
		return SEMQ_ERR_INVALID;
	}
	n = digits_u64(port, &p, &over);
	if (n == 0 || port[n] != '\0') {
		snprintf(why, whysz, "'%s': port '%s' is not a number", s,
			 port);
		return SEMQ_ERR_INVALID;
	}
	if (p < 1 || p > 65535) {
		snprintf(why, whysz, "'%s': port %s is not between 1 and 65535",
			 s, port);
		return SEMQ_ERR_INVALID;
	}
	memcpy(out->host, host, hlen);
	out->host[hlen] = '\0';
	out->port = (uint16_t)p;
	out->set = 1;
	return SEMQ_OK;
}

/* ---- databases and paths -------------------------------------------------- */

size_t cv_db_url_prefix(const char *s)
{
	static const char *const schemes[] = {"postgresql://", "postgres://"};

	for (size_t i = 0; s && i < 2; i++)
		if (strncmp(s, schemes[i], strlen(schemes[i])) == 0)
			return strlen(schemes[i]);
	return 0;
}

int cv_db_url(const char *s, char *why, size_t whysz)
{
	size_t p = cv_db_url_prefix(s);

	if (!p) {
		snprintf(why, whysz, "%s",
			 "not a postgresql:// or postgres:// URL");
		return SEMQ_ERR_INVALID;
	}
	if (!s[p]) {
		snprintf(why, whysz, "%.*s: nothing after the scheme", (int)p,
			 s);
		return SEMQ_ERR_INVALID;
	}
	for (size_t i = p; s[i]; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch <= ' ' || ch == 0x7f) {
			snprintf(why, whysz,
				 "%.*s URL: a blank or control character at "
				 "offset %zu; percent-encode it (%%20)",
				 (int)p - 3, s, i);
			return SEMQ_ERR_INVALID;
		}
	}
	return SEMQ_OK;
}

char *cv_path_resolve(const char *dir, const char *v)
{
	char *out = NULL;
	size_t dl = strlen(dir);

	if (v[0] == '/' || dl == 0)
		return strdup(v);
	if (asprintf(&out, "%s%s%s", dir, dir[dl - 1] == '/' ? "" : "/", v) < 0)
		return NULL;
	return out;
}

int cv_path_check(const char *v, const char *path, unsigned flags, char *why,
		  size_t whysz)
{
	struct stat st;

	if (flags & CV_PATH_EXISTS) {
		if (stat(path, &st) != 0 || access(path, R_OK) != 0) {
			snprintf(why, whysz, "cannot read '%s': %s", v,
				 strerror(errno));
			return SEMQ_ERR_INVALID;
		}
		if (S_ISDIR(st.st_mode)) {
			snprintf(why, whysz, "cannot read '%s': %s", v,
				 strerror(EISDIR));
			return SEMQ_ERR_INVALID;
		}
	}
	if (flags & CV_PATH_DIR) {
		const char *slash = strrchr(path, '/');
		char *dir;
		int bad = 0;

		if (!slash)
			return SEMQ_OK; /* the working directory */
		dir = strndup(path, slash == path ? 1 : (size_t)(slash - path));
		if (!dir)
			return SEMQ_ERR_NOMEM;
		if (stat(dir, &st) != 0) {
			snprintf(why, whysz, "'%s': directory '%s': %s", v, dir,
				 strerror(errno));
			bad = 1;
		} else if (!S_ISDIR(st.st_mode)) {
			snprintf(why, whysz, "'%s': '%s' is not a directory", v,
				 dir);
			bad = 1;
		}
		free(dir);
		if (bad)
			return SEMQ_ERR_INVALID;
	}
	return SEMQ_OK;
}

/* ---- comma lists ---------------------------------------------------------- */

/* Splits a comma list into trimmed items, calling fn for each. Stops at the
 * first item fn refuses and returns what fn returned. */
static int list_items(const char *v, char *why, size_t whysz,
		      int (*fn)(void *ctx, size_t i, const char *item,
				char *why, size_t whysz),
		      void *ctx)
{
	const char *p = v;
	char item[ITEM_MAX];
	size_t i = 0;
	int r;

	if (!p)
		p = "";
	for (;;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		while (n && (*p == ' ' || *p == '\t'))
			p++, n--;
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		i++;
		if (n == 0) {
			snprintf(why, whysz, "item %zu is empty", i);
			return SEMQ_ERR_INVALID;
		}
		if (n >= sizeof(item)) {
			snprintf(why, whysz, "item %zu is too long", i);
			return SEMQ_ERR_INVALID;
		}
		memcpy(item, p, n);
		item[n] = '\0';
		r = fn(ctx, i, item, why, whysz);
		if (r != SEMQ_OK)
			return r;
		if (!e)
			return SEMQ_OK;
		p = e + 1;
	}
}

/* Appends one item of `size` bytes to *v (n items so far). */
static int grow(void **v, size_t n, size_t size)
{
	void *nv = realloc(*v, (n + 1) * size);

	if (!nv)
		return SEMQ_ERR_NOMEM;
	*v = nv;
	return SEMQ_OK;
}

struct dlist {
	int64_t min, max;
	size_t max_items;
	int64_t *v;
	size_t n;
};

static int dlist_item(void *ctx, size_t i, const char *item, char *why,
		      size_t whysz)
{
	struct dlist *d = ctx;
	char a[32], b[32];
	int64_t ms;

	if (d->n == d->max_items) {
		snprintf(why, whysz, "more than %zu items", d->max_items);
		return SEMQ_ERR_INVALID;
	}
	if (cv_duration(item, &ms) != SEMQ_OK) {
		snprintf(why, whysz, "item %zu '%s' is not a duration", i,
			 item);
		return SEMQ_ERR_INVALID;
	}
	if (ms < d->min || ms > d->max) {
		snprintf(why, whysz, "item %zu '%s' is not between %s and %s",
			 i, item, cv_fmt_duration(d->min, a, sizeof(a)),
			 cv_fmt_duration(d->max, b, sizeof(b)));
		return SEMQ_ERR_INVALID;
	}
	if (grow((void **)&d->v, d->n, sizeof(*d->v)) != SEMQ_OK)
		return SEMQ_ERR_NOMEM;
	d->v[d->n++] = ms;
	return SEMQ_OK;
}

int cv_durations(const char *s, int64_t min, int64_t max, size_t max_items,
		 int64_t **out, size_t *n_out, char *why, size_t whysz)
{
	struct dlist d = {.min = min, .max = max, .max_items = max_items};
	int r = list_items(s, why, whysz, dlist_item, &d);

	if (r != SEMQ_OK) {
		free(d.v);
		return r;
	}
	*out = d.v;
	*n_out = d.n;
	return SEMQ_OK;
}

struct tlist {
	uint32_t *v;
	size_t n;
};

static int tlist_item(void *ctx, size_t i, const char *item, char *why,
		      size_t whysz)
{
	struct tlist *t = ctx;
	uint64_t x;
	int over;
	size_t n = digits_u64(item, &x, &over);

	if (strcmp(item, "*") == 0) {
		snprintf(why, whysz, "%s",
			 "'*' must stand alone: all types, or a list of "
			 "numbers");
		return SEMQ_ERR_INVALID;
	}
	if (n == 0 || item[n] != '\0') {
		snprintf(why, whysz, "item %zu '%s' is not a type number", i,
			 item);
		return SEMQ_ERR_INVALID;
	}
	if (x > UINT32_MAX) {
		snprintf(why, whysz, "item %zu '%s' is not between 0 and %u", i,
			 item, UINT32_MAX);
		return SEMQ_ERR_INVALID;
	}
	for (size_t j = 0; j < t->n; j++) {
		if (t->v[j] == (uint32_t)x) {
			snprintf(why, whysz, "type %s is listed twice", item);
			return SEMQ_ERR_INVALID;
		}
	}
	if (grow((void **)&t->v, t->n, sizeof(*t->v)) != SEMQ_OK) {
		snprintf(why, whysz, "%s", "out of memory");
		return SEMQ_ERR_NOMEM;
	}
	t->v[t->n++] = (uint32_t)x;
	return SEMQ_OK;
}

int cv_types(const char *s, int *all, uint32_t **out, size_t *n_out, char *why,
	     size_t whysz)
{
	struct tlist t = {0};
	int r;

	if (s && strcmp(s, "*") == 0) {
		*all = 1;
		*out = NULL;
		*n_out = 0;
		return SEMQ_OK;
	}
	r = list_items(s, why, whysz, tlist_item, &t);
	if (r != SEMQ_OK) {
		free(t.v);
		return r;
	}
	*all = 0;
	*out = t.v;
	*n_out = t.n;
	return SEMQ_OK;
}

/* A list of node ids. */
struct ilist {
	char (*v)[SEMQ_ID_MAX + 1];
	size_t n;
};

static int ilist_item(void *ctx, size_t i, const char *item, char *why,
		      size_t whysz)
{
	struct ilist *l = ctx;

	if (!semq_id_valid(item)) {
		snprintf(why, whysz,
			 "item %zu '%s' is not a node id (1-64 of "
			 "A-Za-z0-9._-)",
			 i, item);
		return SEMQ_ERR_INVALID;
	}
	for (size_t j = 0; j < l->n; j++)
		if (strcmp(l->v[j], item) == 0) {
			snprintf(why, whysz, "'%s' is listed twice", item);
			return SEMQ_ERR_INVALID;
		}
	if (grow((void **)&l->v, l->n, sizeof(*l->v)) != SEMQ_OK)
		return SEMQ_ERR_NOMEM;
	memset(l->v[l->n], 0, sizeof(l->v[0])); /* no stray bytes after it */
	/* semq_id_valid() bounds it; a longer one would be refused, never cut */
	if ((size_t)snprintf(l->v[l->n], sizeof(l->v[0]), "%s", item) >=
	    sizeof(l->v[0])) {
		snprintf(why, whysz, "item %zu is longer than %d characters", i,
			 SEMQ_ID_MAX);
		return SEMQ_ERR_INVALID;
	}
	l->n++;
	return SEMQ_OK;
}

int cv_ids(const char *s, char (**out)[SEMQ_ID_MAX + 1], size_t *n_out,
	   char *why, size_t whysz)
{
	struct ilist l = {0};
	int r = list_items(s, why, whysz, ilist_item, &l);

	if (r != SEMQ_OK) {
		free(l.v);
		return r;
	}
	*out = l.v;
	*n_out = l.n;
	return SEMQ_OK;
}
