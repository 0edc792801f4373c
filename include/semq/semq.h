/* SPDX-License-Identifier: MIT */
/*
 * libsemq — send through SEMQ from C, inside your own transaction.
 *
 * Entering the node's outbound table tb_0031 *is* sending (transactional
 * outbox). Write your business rows and call semq_enqueue() on the same
 * `sqlite3 *` inside the same transaction; when you COMMIT, both are durable
 * together, or neither is. After the commit, semq_notify() wakes the daemon so
 * it sends at once; without it the daemon still finds the row within its
 * poll_interval.
 *
 *     sqlite3_exec(db, "BEGIN", 0, 0, 0);
 *     ... INSERT INTO my_bills ...
 *     struct semq_msg m = { .dest = "S1", .type = 2800, .key = "BILL-7",
 *                           .payload = doc, .payload_len = len };
 *     int64_t id;
 *     if (semq_enqueue(db, &m, &id, err, sizeof err) != SEMQ_OK) rollback...
 *     sqlite3_exec(db, "COMMIT", 0, 0, 0);
 *     semq_notify_db(db);
 *
 * The row is written once, with status 0 and created_at = now; the daemon
 * numbers it in its next batch after the commit (origin, seq, prev_seq: NULL
 * until then; seq in commit order per destination, prev_seq the previous seq
 * of the same key), whether or not the destination is reachable. A bare
 * `INSERT INTO tb_0031(dest, type, msg_key, payload) VALUES (...)` from any
 * language does the same as semq_enqueue().
 */
#ifndef SEMQ_SEMQ_H
#define SEMQ_SEMQ_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include <semq/error.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SEMQ_ID_MAX 64 /* node ids: 1..64 chars of [A-Za-z0-9._-] */

/* One message to send. All pointers are borrowed for the duration of the call. */
struct semq_msg {
	const char *dest; /* destination node id; required */
	uint32_t type;    /* application message type, e.g. 2800 */
	const char *key;  /* business object id for ordering; NULL = none */
	const void
		*payload; /* opaque bytes; may be NULL when payload_len is 0 */
	size_t payload_len;
	int64_t deliver_at; /* unix ms at which the receiver runs it; 0 = now */
	void *reserved[4];  /* must be zero */
};

/*
 * Inserts `m` into tb_0031 on `db` (a connection to the node's database file,
 * borrowed). Runs inside the caller's open transaction if there is one, else
 * in its own. On SEMQ_OK the row's tb_0031.id is stored in *id_out (if not
 * NULL): the message's seq is NULL until the daemon numbers it (see above),
 * `SELECT seq, status FROM tb_0031 WHERE id = ?` then shows it. On error, `err` (if not NULL) receives one
 * line naming the culprit: SEMQ_ERR_INVALID for a bad field,
 * SEMQ_ERR_TOO_BIG for a payload over the node's max_payload, SEMQ_ERR_DB
 * when SQLite fails (for example the file is not a SEMQ node database).
 */
int semq_enqueue(sqlite3 *db, const struct semq_msg *m, int64_t *id_out,
		 char *err, size_t errsz);

/*
 * Wakes the daemon serving the database file `db_path` so it sends at once.
 * Best effort and non-blocking: SEMQ_OK when a datagram was delivered,
 * SEMQ_DECLINED when no daemon is listening (the message is still safe in
 * tb_0031 and will be sent when one runs).
 */
int semq_notify(const char *db_path);

/* The same for the main database file of an open connection (borrowed). */
int semq_notify_db(sqlite3 *db);

/*
 * Writes the wake address of `db_path` into `out` (at least 32 bytes): a Linux
 * abstract unix socket name, starting with a NUL byte, derived from the
 * canonical path of the file (a file not created yet has the name it will
 * have; its directory must exist). *len_out receives its length. The daemon binds
 * this name; semq_notify() sends to it.
 */
int semq_wake_name(const char *db_path, char *out, size_t outsz,
		   size_t *len_out);

/* Is `id` a valid node id (1..64 chars of [A-Za-z0-9._-])? */
int semq_id_valid(const char *id);

#ifdef __cplusplus
}
#endif

#endif
