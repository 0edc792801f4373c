/* SPDX-License-Identifier: MIT */
/*
 * JSON building helpers shared by the admin reports (node/report.c) and
 * semqctl: text from the database or the wire made safe for JSON, object
 * assembly that remembers an allocation failure instead of checking every
 * call, and the JSON of a row both show.
 */
#ifndef SEMQ_JSONTEXT_H
#define SEMQ_JSONTEXT_H

#include <jansson.h>

#include <stddef.h>
#include <stdint.h>

struct msg;
struct redo_row;
struct redo_head;
struct out_row;

/* A JSON string of s (new reference): null for NULL; bytes that are not
 * UTF-8 become '?', since JSON text is UTF-8. NULL when out of memory. */
json_t *json_text(const char *s);

/* Sets key: v in o (v stolen, also when o is NULL). A NULL o or v means
 * out of memory: *failed = 1. */
void jset(json_t *o, const char *key, json_t *v, int *failed);

/* One tb_0033 entry with every field `semqctl redo list --json` and the
 * admin's /redo show (new reference; NULL when out of memory); the payload
 * only by its length. `behind`: for a waiting entry, the head of its key
 * (store_redo_head), shown as "behind": {...}; NULL when none. */
json_t *redo_json(const struct msg *m, const struct redo_row *row,
		  const struct redo_head *behind);

/* redo_json() with, for a waiting entry, what it waits for, read from st
 * (NULL when out of memory or the read failed). */
struct store;
json_t *redo_json_at(struct store *st, const struct msg *m,
		     const struct redo_row *row, int64_t now);

/* One tb_0031 row with every field of `semqctl outbound list --json` and
 * the admin's GET /outbound (new reference; NULL when out of memory); the
 * payload only by its length; "custodian": the relay holding it (status
 * 6), null when none. */
json_t *out_json(const struct msg *m, const struct out_row *row);

/* What a waiting entry of m waits for, in one line: "waiting behind
 * delayed message #12 (R1/S1/5) until 2026-11-25T12:00:00Z", ... */
const char *redo_behind_text(const struct msg *m, const struct redo_head *h,
			     char *buf, size_t sz);

#endif
