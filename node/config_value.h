/* SPDX-License-Identifier: MIT */
/*
 * The values of node.ini, one parser per type: a string in, a typed value
 * out, or SEMQ_ERR_INVALID with one line in `why` naming the value and what
 * is wrong with it ("'5x' is not a duration (250ms, 5s, 1m, 6h, 2d, or
 * seconds)"). Nothing here knows sections or keys: config.c's setters (one
 * per type, named by the key table) put "FILE:LINE: [node] key: " before
 * `why`. Also the formatting of durations and sizes that the messages and
 * the reference share.
 *
 * Conventions: `why` gets at most whysz bytes and is only written on an
 * error. Outputs are only written on success, except cv_addr (see there).
 * A parser that allocates returns SEMQ_ERR_NOMEM when out of memory, with
 * its outputs untouched.
 */
#ifndef SEMQ_CONFIG_VALUE_H
#define SEMQ_CONFIG_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include <semq/semq.h>

/* Units of durations (milliseconds) and sizes (bytes). */
#define CV_SEC ((int64_t)1000)
#define CV_MIN (60 * CV_SEC)
#define CV_HOUR (60 * CV_MIN)
#define CV_DAY (24 * CV_HOUR)
#define CV_KIB ((int64_t)1024)
#define CV_MIB (1024 * CV_KIB)
#define CV_GIB (1024 * CV_MIB)
#define CV_TIB (1024 * CV_GIB)

/* An instance name ([node] instance, Hello.instance): which semqd of several
 * serving one node id over a shared database this is. */
#define SEMQ_INSTANCE_MAX 64

/* Is `s` a valid instance name: 0..SEMQ_INSTANCE_MAX chars of
 * [A-Za-z0-9._:-] (empty = the node's only instance)? Used by the config
 * parser and the wire codec alike, hence inline here (the codec does not
 * link the config module). */
static inline int config_instance_valid(const char *s)
{
	size_t n;

	if (!s)
		return 0;
	for (n = 0; s[n]; n++) {
		char ch = s[n];
		if (n >= SEMQ_INSTANCE_MAX ||
		    !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
		      ch == ':' || ch == '-'))
			return 0;
	}
	return 1;
}

/* host:port; host is a numeric address or a name, [v6] in brackets. */
struct cfg_addr {
	int set;
	char host[256];
	uint16_t port;
};

/*
 * Durations: "250ms", "5s", "1m", "6h", "2d", a bare number = seconds; no
 * sign, blank or fraction. cv_duration: SEMQ_OK, SEMQ_ERR_INVALID when
 * malformed, SEMQ_ERR_TOO_BIG when it does not fit int64_t milliseconds (no
 * message). cv_duration_in also refuses what is outside min..max (ms), and
 * says why.
 */
int cv_duration(const char *s, int64_t *ms_out);
int cv_duration_in(const char *s, int64_t min, int64_t max, int64_t *ms_out,
		   char *why, size_t whysz);

/*
 * Sizes in bytes: "1000", "512B", "64K" (k, KiB), "16M" (m, MiB), "1G" (g,
 * GiB). cv_size: SEMQ_OK, SEMQ_ERR_INVALID when malformed, SEMQ_ERR_TOO_BIG
 * when it does not fit size_t (no message). cv_size_in also refuses what is
 * outside min..max, and says why.
 */
int cv_size(const char *s, size_t *out);
int cv_size_in(const char *s, uint64_t min, uint64_t max, size_t *out,
	       char *why, size_t whysz);

/* A whole number in min..max: decimal digits only. */
int cv_uint_in(const char *s, unsigned min, unsigned max, unsigned *out,
	       char *why, size_t whysz);

/* yes, true, on, 1 -> 1; no, false, off, 0 -> 0 (words in any case). */
int cv_bool(const char *s, int *out, char *why, size_t whysz);

/* The index of `s` in the NULL-terminated `names` (any case). */
int cv_enum(const char *s, const char *const *names, int *out, char *why,
	    size_t whysz);

/*
 * host:port or [v6]:port (host stored without brackets), port 1..65535,
 * host 1..255 characters of A-Za-z0-9._- or an IPv6 address in brackets.
 * *out is cleared first, so on an error it is left unset (set = 0).
 */
int cv_addr(const char *s, struct cfg_addr *out, char *why, size_t whysz);

/* A node id (semq_id_valid) into out[SEMQ_ID_MAX + 1]. */
int cv_id(const char *s, char *out, char *why, size_t whysz);
/* An instance name of 1-64 characters (config_instance_valid) into
 * out[SEMQ_INSTANCE_MAX + 1]. */
int cv_instance(const char *s, char *out, char *why, size_t whysz);

/* Length of the postgresql:// or postgres:// prefix of s, or 0. */
size_t cv_db_url_prefix(const char *s);
/* A database URL: something after the scheme, no blanks or control
 * characters (libpq parses the rest). `why` never shows the URL, which may
 * hold a password. */
int cv_db_url(const char *s, char *why, size_t whysz);

/* `v` made relative to the directory `dir` ("" for none) unless absolute.
 * Caller frees; NULL when out of memory. */
char *cv_path_resolve(const char *dir, const char *v);

enum {
	CV_PATH_EXISTS = 1, /* must name a readable file, not a directory */
	CV_PATH_DIR = 2     /* its directory must exist */
};
/* Checks the file `path` (resolved from `v`, which the message names) as
 * flags (CV_PATH_*) ask. */
int cv_path_check(const char *v, const char *path, unsigned flags, char *why,
		  size_t whysz);

/*
 * Comma lists: items trimmed of blanks and tabs, none empty, each under 128
 * characters. Each parser builds a new array (caller frees) and its count.
 *  - cv_durations: at most max_items durations, each in min..max ms.
 *  - cv_types: "*" alone (*all = 1, no array) or type numbers of 32 bits,
 *    none twice.
 *  - cv_ids: node ids, none twice.
 */
int cv_durations(const char *s, int64_t min, int64_t max, size_t max_items,
		 int64_t **out, size_t *n_out, char *why, size_t whysz);
int cv_types(const char *s, int *all, uint32_t **out, size_t *n_out, char *why,
	     size_t whysz);
int cv_ids(const char *s, char (**out)[SEMQ_ID_MAX + 1], size_t *n_out,
	   char *why, size_t whysz);

/* A duration as the largest whole unit: "2d", "90s", "250ms", "0s". Returns
 * buf. */
const char *cv_fmt_duration(int64_t ms, char *buf, size_t sz);
/* A size as the largest whole unit: "16MiB", "1000". Returns buf. */
const char *cv_fmt_size(int64_t b, char *buf, size_t sz);

#endif
