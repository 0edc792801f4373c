/* SPDX-License-Identifier: MIT */
/*
 * JSON building helpers (see jsontext.h).
 */
#include "jsontext.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
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

json_t *redo_json(const struct msg *m, const struct redo_row *row)
{
	json_t *o = json_object();
	char idb[MSGID_STRLEN];
	int failed = !o;

	jset(o, "id", json_integer(row->id), &failed);
	jset(o, "message", json_string(msgid_str(&m->id, idb, sizeof idb)),
	     &failed);
	jset(o, "origin", json_string(m->id.origin), &failed);
	jset(o, "dest", json_string(m->id.dest), &failed);
	jset(o, "seq", json_integer((json_int_t)m->id.seq), &failed);
	jset(o, "type", json_integer(m->type), &failed);
	jset(o, "key", json_text(m->has_key ? m->key : NULL), &failed);
	jset(o, "prev_seq", json_integer((json_int_t)m->prev_seq), &failed);
	jset(o, "deliver_at", json_integer(m->deliver_at), &failed);
	jset(o, "msg_created_at", json_integer(m->created_at), &failed);
	jset(o, "status", json_integer(row->status), &failed);
	jset(o, "status_name",
	     json_string(semq_status_name("tb_0033", row->status)), &failed);
	jset(o, "tries", json_integer(row->tries), &failed);
	jset(o, "level", json_integer(row->level), &failed);
	jset(o, "next_attempt_at", json_integer(row->next_attempt_at), &failed);
	jset(o, "created_at", json_integer(row->created_at), &failed);
	jset(o, "updated_at", json_integer(row->updated_at), &failed);
	jset(o, "last_error", json_text(row->last_error), &failed);
	jset(o, "discard_reason", json_text(row->discard_reason), &failed);
	jset(o, "payload_len", json_integer((json_int_t)m->payload_len),
	     &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}
