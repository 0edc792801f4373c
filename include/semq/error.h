/* SPDX-License-Identifier: MIT */
/*
 * The one error enum of SEMQ, shared by the daemon, libsemq and semqctl.
 *
 * 0 is success. Small positive codes are outcomes that are not faults: try
 * again later (SEMQ_AGAIN), the request does not apply (SEMQ_DECLINED), the
 * message was seen before (SEMQ_DUPLICATE). Negative codes are errors.
 * Functions that can say more take a `char *err, size_t errsz` buffer and write
 * one line naming the culprit into it.
 */
#ifndef SEMQ_ERROR_H
#define SEMQ_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum semq_err {
	SEMQ_OK = 0,
	SEMQ_AGAIN = 1,     /* not now: more input needed, busy, not due */
	SEMQ_DECLINED = 2,  /* not applicable or refused; not a fault */
	SEMQ_DUPLICATE = 3, /* already seen: harmless, nothing was done */

	SEMQ_ERR_INVALID = -1,   /* bad input (argument, frame, config value) */
	SEMQ_ERR_NOMEM = -2,     /* out of memory */
	SEMQ_ERR_IO = -3,        /* file or socket I/O failed */
	SEMQ_ERR_DB = -4,        /* the database said no */
	SEMQ_ERR_PROTO = -5,     /* peer broke the wire protocol */
	SEMQ_ERR_TOO_BIG = -6,   /* over max_frame / max_payload */
	SEMQ_ERR_VERSION = -7,   /* schema, ABI or protocol version mismatch */
	SEMQ_ERR_NOT_FOUND = -8, /* no such row, file or symbol */
	SEMQ_ERR_CONFIG = -9,    /* configuration error */
	SEMQ_ERR_PLUGIN = -10,   /* a plugin failed to load or misbehaved */
	SEMQ_ERR_INTERNAL = -11  /* a bug: an invariant did not hold */
} semq_err;

/* Static string naming the code ("ok", "invalid argument", ...). Never NULL. */
const char *semq_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
