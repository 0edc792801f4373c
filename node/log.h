/* SPDX-License-Identifier: MIT */
/*
 * One log function for the whole node. A line is
 *
 *   2026-11-22T13:52:20.123Z INFO  store  peer=S1 msg=R1/S1/42 committed 12
 *
 * time (UTC, ms), level, subsystem, then the peer and message id when the
 * caller has them, then the text. Log a problem where it is detected, once.
 * Thread-safe: a line is written with one write(2).
 *
 * Under systemd, when stderr is the journal (JOURNAL_STREAM names stderr's
 * device and inode, see systemd.exec(5)) and no log file is set, each line
 * starts with its syslog priority, "<3>" ERROR, "<4>" WARN, "<5>" NOTICE,
 * "<6>" INFO, "<7>" DEBUG, which journald strips and records.
 */
#ifndef SEMQ_LOG_H
#define SEMQ_LOG_H

#include <stdarg.h>

#include "types.h"

enum log_level {
	LOG_ERROR = 0,
	LOG_WARN = 1,
	LOG_INFO = 2,
	LOG_DEBUG = 3,
	/* Kept like INFO, printed NOTICE, journal priority 5: what an
	 * operator did or changed (a reload), worth finding among INFO. */
	LOG_NOTICE = 4
};

/* Lines above `level` are dropped. Default LOG_INFO. */
void log_set_level(int level);
int log_get_level(void);

/* Sends lines to `path` (opened for append), or to stderr when NULL.
 * SEMQ_ERR_IO when it cannot be opened (the previous target stays). */
int log_open(const char *path);
/* Reopens the current file (SIGHUP after logrotate). */
int log_reopen(void);

/* Whether lines to stderr carry journald "<N>" prefixes: 1 when
 * JOURNAL_STREAM matches stderr (checked once, at the first line or
 * log_open), else 0. */
int log_journal(void);

/* peer and id may be NULL. */
void log_msg(int level, const char *subsys, const char *peer,
	     const struct msgid *id, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void log_vmsg(int level, const char *subsys, const char *peer,
	      const struct msgid *id, const char *fmt, va_list ap)
	__attribute__((format(printf, 5, 0)));

#define log_error(sub, ...) log_msg(LOG_ERROR, sub, NULL, NULL, __VA_ARGS__)
#define log_warn(sub, ...) log_msg(LOG_WARN, sub, NULL, NULL, __VA_ARGS__)
#define log_info(sub, ...) log_msg(LOG_INFO, sub, NULL, NULL, __VA_ARGS__)
#define log_debug(sub, ...)                                                    \
	do {                                                                   \
		if (log_get_level() >= LOG_DEBUG)                              \
			log_msg(LOG_DEBUG, sub, NULL, NULL, __VA_ARGS__);      \
	} while (0)

#endif
