/* SPDX-License-Identifier: MIT */
/*
 * JSON building helpers (see jsontext.h).
 */
#include "jsontext.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "types.h"

json_t *json_text(const char *s)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t n, k, o = 0;
	json_t *j;
	char *c;

	if (!s)
		return json_null();
	n = strlen(s);
	if (semq_utf8_valid(p, n))
		return json_string(s);
	c = malloc(n + 1);
	if (!c)
		return NULL;
	while (n) {
		k = semq_utf8_char(p, n);
		if (!k) {
			c[o++] = '?';
			k = 1;
		} else {
			memcpy(c + o, p, k);
			o += k;
		}
		p += k;
		n -= k;
	}
	c[o] = '\0';
	j = json_string(c);
	free(c);
	return j;
}

void jset(json_t *o, const char *key, json_t *v, int *failed)
{
	if (!o) {
		json_decref(v);
		*failed = 1;
	} else if (!v || json_object_set_new(o, key, v)) {
		*failed = 1;
	}
}
