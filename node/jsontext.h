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

struct msg;
struct redo_row;

/* A JSON string of s (new reference): null for NULL; bytes that are not
 * UTF-8 become '?', since JSON text is UTF-8. NULL when out of memory. */
json_t *json_text(const char *s);

/* Sets key: v in o (v stolen, also when o is NULL). A NULL o or v means
 * out of memory: *failed = 1. */
void jset(json_t *o, const char *key, json_t *v, int *failed);

/* One tb_0033 entry with every field `semqctl redo list --json` and the
 * admin's /redo show (new reference; NULL when out of memory); the payload
 * only by its length. */
json_t *redo_json(const struct msg *m, const struct redo_row *row);

#endif
