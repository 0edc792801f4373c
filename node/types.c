/* SPDX-License-Identifier: MIT */
/* Helpers for the plain types of types.h. */
#include "types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void msg_clear(struct msg *m)
{
	if (!m)
		return;
	free(m->payload);
	memset(m, 0, sizeof *m);
}

const char *msgid_str(const struct msgid *id, char *buf, size_t bufsz)
{
	snprintf(buf, bufsz, "%s/%s/%llu", id->origin, id->dest,
		 (unsigned long long)id->seq);
	return buf;
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

const char *semq_status_name(const char *table, int status)
{
	if (!strcmp(table, "tb_0031")) {
		switch (status) {
		case SS_UNSEND: return "unsent";
		case SS_SEND: return "sent";
		case SS_ACK: return "relay-acked";
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
