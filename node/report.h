/* SPDX-License-Identifier: MIT */
/*
 * The admin HTTP endpoints that need the tables (SPEC §8), answered on the
 * store thread: admin.c copies such a request into a JOB_ADMIN, proto_job()
 * hands it here inside the open batch, and the answer (an HTTP status and a
 * JSON or Prometheus text body) goes back in the outbox as a struct out with
 * the request's id — so an action is never reported done before the commit
 * that makes it true.
 *
 *   GET  /streams                  outbound and inbound streams
 *   GET  /redo?status=S&limit=N    tb_0033 entries (default: all, 100)
 *   GET  /redo/ID                  one entry, its payload in base64
 *   POST /redo/ID/retry            dead -> pending now
 *   POST /redo/ID/discard          {"reason": "..."}: give up on it
 *   POST /redo/retry-all-dead      every dead entry -> pending now
 *   GET  /metrics                  the tables' part of the metrics
 *
 * Only store.h is used: no SQL here. Routing (404, 405) and authorisation
 * (401) are admin.c's, done before a job is made; this module checks what it
 * reads from the request (ids, query, body) and answers 400 naming the
 * culprit.
 */
#ifndef SEMQ_REPORT_H
#define SEMQ_REPORT_H

#include <stdint.h>

#include <jansson.h>

#include "config.h"
#include "job.h"
#include "proto.h"
#include "store.h"

/*
 * Answers the JOB_ADMIN j (borrowed) by appending one struct out with
 * j->admin->req_id to ob. *changed = 1 when it changed the redo queue (the
 * caller rescans its schedule). Returns SEMQ_OK when an answer was queued,
 * also for refusals and for a read that failed (500); an error when a change
 * failed in the database (the batch must roll back; admin.c answers the
 * request 503 when it times out).
 */
int report_handle(struct store *st, const struct config *c, const struct job *j,
		  int64_t now, struct outbox *ob, int *changed);

/* The answer to an admin request (ob, req_id) from other store-thread
 * modules (trace.c): doc (stolen) as JSON with `status`; or {"error":
 * "..."}. SEMQ_OK or SEMQ_ERR_NOMEM. */
int report_answer_json(struct outbox *ob, uint64_t req_id, int status,
		       json_t *doc);
int report_answer_error(struct outbox *ob, uint64_t req_id, int status,
			const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
