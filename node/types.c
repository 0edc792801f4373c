/* SPDX-License-Identifier: MIT */
/* Helpers for the plain types of types.h. */
#include "types.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

void msg_clear(struct msg *m)
{
	if (!m)
		return;
	free(m->payload);
	memset(m, 0, sizeof *m);
}

/* Appends n bytes of s to buf at *len, as far as bufsz - 1 allows. */
static void put(char *buf, size_t bufsz, size_t *len, const char *s, size_t n)
{
	if (*len + 1 >= bufsz)
		return;
	if (n > bufsz - 1 - *len)
		n = bufsz - 1 - *len;
	memcpy(buf + *len, s, n);
	*len += n;
}

/* What snprintf(buf, bufsz, "%s/%s/%llu", ...) writes, without snprintf:
 * the store formats the id of every message it handles (for its error
 * texts), and snprintf's parsing was 1,200 instructions of each. */
const char *msgid_str(const struct msgid *id, char *buf, size_t bufsz)
{
	char num[24];
	unsigned long long v = (unsigned long long)id->seq;
	size_t len = 0, d = sizeof num;

	if (!bufsz)
		return buf;
	do
		num[--d] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	put(buf, bufsz, &len, id->origin, strlen(id->origin));
	put(buf, bufsz, &len, "/", 1);
	put(buf, bufsz, &len, id->dest, strlen(id->dest));
	put(buf, bufsz, &len, "/", 1);
	put(buf, bufsz, &len, num + d, sizeof num - d);
	buf[len] = '\0';
	return buf;
}

const char *semq_life_str(uint64_t life, char *buf, size_t bufsz)
{
	snprintf(buf, bufsz, "%016llx", (unsigned long long)life);
	return buf;
}

int semq_life_parse(const char *s, uint64_t *life)
{
	uint64_t v = 0;
	size_t i;

	if (!s || !s[0] || strlen(s) > 16)
		return -1;
	for (i = 0; s[i]; i++) {
		char c = s[i];
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return -1;
		v = v << 4 | d;
	}
	if (v == SEMQ_LIFE_NONE)
		return -1;
	*life = v;
	return 0;
}

/* Appends v big-endian in n bytes. */
static void put_be(uint8_t *p, uint64_t v, int n)
{
	int i;

	for (i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

uint64_t semq_msg_digest(const struct msg *m)
{
	static const char tag[] = "semq-digest-1";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	uint8_t head[4 + 2 + 8 + 8 + 8];
	size_t klen = m->has_key ? strlen(m->key) : 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint64_t d = 0;
	int ok;

	/* Fixed-width fields, then the two variable parts with their lengths
	 * in front: no two contents encode alike. */
	put_be(head, m->type, 4);
	put_be(head + 4, klen, 2);
	put_be(head + 6, (uint64_t)m->deliver_at, 8);
	put_be(head + 14, (uint64_t)m->created_at, 8);
	put_be(head + 22, m->payload ? m->payload_len : 0, 8);
	ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
	     EVP_DigestUpdate(ctx, tag, sizeof tag - 1) == 1 &&
	     EVP_DigestUpdate(ctx, head, sizeof head) == 1 &&
	     EVP_DigestUpdate(ctx, m->key, klen) == 1 &&
	     (!m->payload || !m->payload_len ||
	      EVP_DigestUpdate(ctx, m->payload, m->payload_len) == 1) &&
	     EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen >= 8;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return 0; /* unknown: no digest check, as for an old peer */
	for (int i = 0; i < 8; i++)
		d = d << 8 | md[i];
	return d ? d : 1;
}

uint64_t semq_filler_digest(const struct msgid *id)
{
	static const char tag[] = "semq-filler-1";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	uint8_t nums[16];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint64_t d = 0;
	int ok;

	put_be(nums, id->life, 8);
	put_be(nums + 8, id->seq, 8);
	/* Both names with their terminating NUL: no two ids encode alike. */
	ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
	     EVP_DigestUpdate(ctx, tag, sizeof tag - 1) == 1 &&
	     EVP_DigestUpdate(ctx, id->origin, strlen(id->origin) + 1) == 1 &&
	     EVP_DigestUpdate(ctx, id->dest, strlen(id->dest) + 1) == 1 &&
	     EVP_DigestUpdate(ctx, nums, sizeof nums) == 1 &&
	     EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen >= 8;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return 0;
	for (int i = 0; i < 8; i++)
		d = d << 8 | md[i];
	return d ? d : 1;
}

char *base64_encode(const uint8_t *p, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				  "abcdefghijklmnopqrstuvwxyz0123456789+/";
	char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
	uint32_t v;
	size_t i;

	if (!s)
		return NULL;
	for (i = 0; i + 2 < n; i += 3) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = tab[(v >> 6) & 63];
		*o++ = tab[v & 63];
	}
	if (i < n) {
		v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return s;
}

/*
 * Copies url into out with any password replaced by "***": the one of the
 * authority (`user:PASSWORD@host`) and a `password=` query parameter. A file
 * path has neither and is copied as it is.
 */
void semq_db_shown(const char *url, char *out, size_t outsz)
{
	const char *p = url, *auth, *at, *colon, *end, *slash;
	size_t n = 0;

#define PUT(str, len)                                                          \
	do {                                                                   \
		size_t l_ = (len);                                             \
		if (n + l_ >= outsz)                                           \
			l_ = n + 1 < outsz ? outsz - n - 1 : 0;                \
		memcpy(out + n, (str), l_);                                    \
		n += l_;                                                       \
	} while (0)

	if (outsz == 0)
		return;
	auth = strstr(p, "://");
	auth = auth ? auth + 3 : p;
	slash = auth + strcspn(auth, "/?");
	at = memchr(auth, '@', (size_t)(slash - auth));
	/* The userinfo may itself hold an '@' (encoded or not): take the last. */
	if (at) {
		const char *q;

		for (q = at + 1; q < slash; q++)
			if (*q == '@')
				at = q;
	}
	colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (colon) {
		PUT(p, (size_t)(colon + 1 - p));
		PUT("***", 3);
		p = at;
	}
	/* The rest, with password=VALUE parameters masked. */
	while (*p) {
		const char *hit = strstr(p, "password=");

		if (!hit || (hit != p && hit[-1] != '?' && hit[-1] != '&')) {
			if (!hit) {
				PUT(p, strlen(p));
				break;
			}
			PUT(p, (size_t)(hit + 9 - p));
			p = hit + 9;
			continue;
		}
		PUT(p, (size_t)(hit + 9 - p));
		PUT("***", 3);
		end = hit + 9 + strcspn(hit + 9, "&");
		p = end;
	}
	out[n] = '\0';
#undef PUT
}

size_t semq_utf8_char(const uint8_t *p, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (!n)
		return 0;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		len = 2;
		cp = p[0] & 0x1f;
	} else if ((p[0] & 0xf0) == 0xe0) {
		len = 3;
		cp = p[0] & 0x0f;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		len = 4;
		cp = p[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

int semq_utf8_valid(const uint8_t *p, size_t n)
{
	size_t k;

	while (n) {
		k = semq_utf8_char(p, n);
		if (!k)
			return 0;
		p += k;
		n -= k;
	}
	return 1;
}

__attribute__((format(printf, 3, 0))) static void verrf(char *err, size_t errsz,
							const char *fmt,
							va_list ap)
{
	if (err && errsz)
		vsnprintf(err, errsz, fmt, ap);
}

void semq_errf(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verrf(err, errsz, fmt, ap);
	va_end(ap);
}

int semq_fail(char *err, size_t errsz, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verrf(err, errsz, fmt, ap);
	va_end(ap);
	return code;
}

const int semq_out_statuses[SEMQ_N_OUT_STATUS] = {
	SS_UNSEND, SS_SEND, SS_ACK, SS_HELD, SS_ACK2, SS_CANCELLED};
const int semq_in_statuses[SEMQ_N_IN_STATUS] = {AS_INIT, AS_OK};
const int semq_redo_statuses[SEMQ_N_REDO_STATUS] = {
	RS_PENDING, RS_WAITING, RS_DONE, RS_DEAD, RS_DISCARDED};

/* SPEC §7: 5s, 30s, 1m, 10m, 30m, 1h, 6h, 1d, 2d (SEMQ_REDO_LEVELS_TEXT). */
const int64_t semq_redo_levels[SEMQ_REDO_N_LEVELS] = {
	5000,    30000,    60000,    600000,    1800000,
	3600000, 21600000, 86400000, 172800000,
};

int64_t semq_redo_delay(const int64_t *levels, size_t n, int level)
{
	size_t i = level < 0 ? 0 : (size_t)level;

	return levels[i < n ? i : n - 1];
}

int semq_redo_gives_up(unsigned tries, unsigned max_tries)
{
	return tries >= max_tries;
}

const char *semq_result_name(int result)
{
	switch (result) {
	case RES_PROCESSED: return "processed";
	case RES_REDO: return "redo";
	case RES_DUPLICATE: return "duplicate";
	case RES_SCHEDULED: return "scheduled";
	case RES_CANCELLED: return "cancelled";
	case RES_DEAD: return "dead";
	case RES_CONFLICT: return "conflict";
	case RES_UNDECIDED: return "undecided";
	case RES_UNDELIVERABLE: return "undeliverable";
	}
	return result < 0 ? "-" : "unknown";
}

const char *semq_table_title(const char *table)
{
	if (!strcmp(table, "tb_0031"))
		return "outbound";
	if (!strcmp(table, "tb_0030"))
		return "received";
	if (!strcmp(table, "tb_0033"))
		return "redo";
	return table;
}

const char *semq_status_name(const char *table, int status)
{
	if (!strcmp(table, "tb_0031")) {
		switch (status) {
		case SS_UNSEND: return "unsent";
		case SS_SEND: return "sent";
		case SS_ACK: return "relay-acked";
		case SS_HELD: return "held";
		case SS_ACK2: return "confirmed";
		case SS_CANCELLED: return "cancelled";
		}
	} else if (!strcmp(table, "tb_0030")) {
		switch (status) {
		case AS_INIT: return "unacked";
		case AS_OK: return "acked";
		}
	} else if (!strcmp(table, "tb_0033")) {
		switch (status) {
		case RS_PENDING: return "pending";
		case RS_WAITING: return "waiting";
		case RS_DONE: return "done";
		case RS_DEAD: return "dead";
		case RS_DISCARDED: return "discarded";
		}
	}
	return "unknown";
}

size_t semq_statuses(const char *table, const int **v)
{
	if (!strcmp(table, "tb_0031")) {
		*v = semq_out_statuses;
		return SEMQ_N_OUT_STATUS;
	}
	if (!strcmp(table, "tb_0030")) {
		*v = semq_in_statuses;
		return SEMQ_N_IN_STATUS;
	}
	if (!strcmp(table, "tb_0033")) {
		*v = semq_redo_statuses;
		return SEMQ_N_REDO_STATUS;
	}
	*v = NULL;
	return 0;
}

const char *semq_status_list(const char *table, int numbers, char *buf,
			     size_t bufsz)
{
	const int *v;
	size_t i, n = semq_statuses(table, &v), at = 0;
	int k;

	if (bufsz)
		buf[0] = '\0';
	for (i = 0; i < n && at < bufsz; i++) {
		if (numbers)
			k = snprintf(buf + at, bufsz - at, "%s%d",
				     i ? ", " : "", v[i]);
		else
			k = snprintf(buf + at, bufsz - at, "%s%s",
				     i ? ", " : "",
				     semq_status_name(table, v[i]));
		if (k < 0)
			break;
		at += (size_t)k;
	}
	return buf;
}

/* Digits of s[0..n) as a number in *v; 0 when they are not all digits or
 * overflow 10^15. */
static int digits(const char *s, size_t n, int64_t *v)
{
	size_t i;

	*v = 0;
	if (n == 0 || n > 15)
		return 0;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		*v = *v * 10 + (s[i] - '0');
	}
	return 1;
}

/* "YYYY-MM-DDTHH:MM:SS[.fff]Z" (a space or t for T, z for Z) as unix ms. */
static int rfc3339_utc(const char *s, int64_t *out)
{
	int64_t y, mo, d, h, mi, sec, frac = 0, scale = 1;
	struct tm tm, back;
	size_t n = strlen(s), i;
	time_t t;

	if (n < 20 || s[4] != '-' || s[7] != '-' ||
	    (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' ||
	    s[16] != ':' || !digits(s, 4, &y) || !digits(s + 5, 2, &mo) ||
	    !digits(s + 8, 2, &d) || !digits(s + 11, 2, &h) ||
	    !digits(s + 14, 2, &mi) || !digits(s + 17, 2, &sec))
		return -1;
	i = 19;
	if (s[i] == '.') {
		for (i++; s[i] >= '0' && s[i] <= '9'; i++)
			if (scale < 1000) {
				frac = frac * 10 + (s[i] - '0');
				scale *= 10;
			}
		if (i == 20)
			return -1;
	}
	if ((s[i] != 'Z' && s[i] != 'z') || s[i + 1])
		return -1;
	if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 ||
	    mi > 59 || sec > 59)
		return -1;
	memset(&tm, 0, sizeof tm);
	tm.tm_year = (int)y - 1900;
	tm.tm_mon = (int)mo - 1;
	tm.tm_mday = (int)d;
	tm.tm_hour = (int)h;
	tm.tm_min = (int)mi;
	tm.tm_sec = (int)sec;
	t = timegm(&tm);
	/* 2026-02-30 normalises to March: not a date. */
	if (t == (time_t)-1 || !gmtime_r(&t, &back) || back.tm_mday != (int)d ||
	    back.tm_mon != (int)mo - 1)
		return -1;
	while (scale < 1000) {
		frac *= 10;
		scale *= 10;
	}
	*out = (int64_t)t * 1000 + frac;
	return 0;
}

int semq_when_parse(const char *s, int64_t now, int unix_ms, int64_t *out)
{
	static const struct {
		char unit;
		int64_t ms;
	} units[] = {{'s', 1000},
		     {'m', 60 * 1000},
		     {'h', 3600 * 1000},
		     {'d', 24 * 3600 * 1000}};
	size_t n, k;
	int64_t v;

	if (!s || !out)
		return -1;
	n = strlen(s);
	if (n >= 2 && digits(s, n - 1, &v)) {
		for (k = 0; k < sizeof units / sizeof units[0]; k++)
			if (s[n - 1] == units[k].unit) {
				if (v > now / units[k].ms)
					return -1; /* before 1970 */
				*out = now - v * units[k].ms;
				return 0;
			}
	}
	if (unix_ms && digits(s, n, &v)) {
		*out = v;
		return 0;
	}
	return rfc3339_utc(s, out);
}

int semq_where_parse(const char *s, struct semq_where *w)
{
	size_t n;

	if (!s || !w || strncmp(s, "error", 5) != 0 ||
	    (s[5] != '~' && s[5] != '='))
		return -1;
	n = strlen(s + 6);
	if (n == 0 || n > SEMQ_WHERE_MAX)
		return -1;
	w->exact = s[5] == '=';
	memcpy(w->text, s + 6, n + 1);
	return 0;
}
