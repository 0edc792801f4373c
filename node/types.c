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
