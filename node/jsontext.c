/* SPDX-License-Identifier: MIT */
/*
 * JSON building helpers (see jsontext.h).
 */
#include "jsontext.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

json_t *redo_json_at(struct store *st, const struct msg *m,
		     const struct redo_row *row, int64_t now)
{
	struct redo_head h;
	int r = SEMQ_ERR_NOT_FOUND;

	if (row->status == RS_WAITING)
		r = store_redo_head(st, m, now, &h);
	if (r != SEMQ_OK && r != SEMQ_ERR_NOT_FOUND)
		return NULL;
	return redo_json(m, row, r == SEMQ_OK ? &h : NULL);
}

const char *redo_behind_text(const struct msg *m, const struct redo_head *h,
			     char *buf, size_t sz)
{
	char when[32] = "?", idb[MSGID_STRLEN];
	struct msgid hid = m->id;
	time_t t = (time_t)(h->next_attempt_at / 1000);
	struct tm tm;

	hid.seq = h->seq;
	msgid_str(&hid, idb, sizeof idb);
	if (gmtime_r(&t, &tm))
		strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (h->status == RS_DEAD)
		snprintf(buf, sz,
			 "waiting behind dead #%lld (%s): retry or discard "
			 "it first",
			 (long long)h->id, idb);
	else if (h->delayed)
		snprintf(buf, sz,
			 "waiting behind delayed message #%lld (%s) until %s",
			 (long long)h->id, idb, when);
	else
		snprintf(buf, sz, "waiting behind #%lld (%s), next tried %s",
			 (long long)h->id, idb, when);
	return buf;
}

json_t *redo_json(const struct msg *m, const struct redo_row *row,
		  const struct redo_head *behind)
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
	if (behind) {
		json_t *b = json_object();
		char text[2 * MSGID_STRLEN + 96];

		jset(b, "id", json_integer(behind->id), &failed);
		jset(b, "seq", json_integer((json_int_t)behind->seq), &failed);
		jset(b, "status_name",
		     json_string(semq_status_name("tb_0033", behind->status)),
		     &failed);
		jset(b, "delayed", json_boolean(behind->delayed), &failed);
		jset(b, "until", json_integer(behind->next_attempt_at),
		     &failed);
		jset(b, "text",
		     json_string(
			     redo_behind_text(m, behind, text, sizeof text)),
		     &failed);
		jset(o, "behind", b, &failed);
	}
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *out_json(const struct msg *m, const struct out_row *row)
{
	json_t *o = json_object();
	char idb[MSGID_STRLEN];
	int failed = !o;

	jset(o, "id", json_string(msgid_str(&m->id, idb, sizeof idb)), &failed);
	jset(o, "origin", json_string(m->id.origin), &failed);
	jset(o, "dest", json_string(m->id.dest), &failed);
	jset(o, "seq", json_integer((json_int_t)m->id.seq), &failed);
	jset(o, "rowid", json_integer(row->rowid), &failed);
	jset(o, "type", json_integer(m->type), &failed);
	jset(o, "key", json_text(m->has_key ? m->key : NULL), &failed);
	jset(o, "prev_seq", json_integer((json_int_t)m->prev_seq), &failed);
	jset(o, "deliver_at", json_integer(m->deliver_at), &failed);
	jset(o, "created_at", json_integer(m->created_at), &failed);
	jset(o, "status", json_integer(row->status), &failed);
	jset(o, "status_name",
	     json_string(semq_status_name("tb_0031", row->status)), &failed);
	jset(o, "result",
	     row->result < 0 ? json_null() : json_integer(row->result),
	     &failed);
	jset(o, "result_name",
	     row->result < 0 ? json_null()
			     : json_string(semq_result_name(row->result)),
	     &failed);
	jset(o, "attempts", json_integer(row->attempts), &failed);
	jset(o, "next_attempt_at", json_integer(row->next_attempt_at), &failed);
	jset(o, "sent_at", json_integer(row->sent_at), &failed);
	jset(o, "acked_at", json_integer(row->acked_at), &failed);
	jset(o, "last_error", json_text(row->last_error), &failed);
	jset(o, "custodian",
	     row->custodian[0] ? json_string(row->custodian) : json_null(),
	     &failed);
	jset(o, "payload_len", json_integer((json_int_t)m->payload_len),
	     &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}
