/* SPDX-License-Identifier: MIT */
/*
 * plugcommon: what the shipped plugins (journal, bill, export) share, as one
 * small static library linked into each (CMake target semq_plugin_common):
 * the error text of a plugin call, the clocks, and the libpq session code —
 * why a libpq call failed, a name for a prepared statement, and whether the
 * statements prepared earlier are still in the session the host hands over.
 *
 * DESIGN:
 *  - A plugin is a module the host loads with dlopen; the library is linked
 *    into each module (position independent), so every loaded plugin has its
 *    own copy of the statement-name counter, whose address tells the copies
 *    apart in the names.
 *  - A prepared statement lives in the server session, not in the `PGconn *`:
 *    PQreset keeps the pointer and opens a new session. plug_pg_session
 *    remembers both, so a new session gets its statements again, under new
 *    names (a name is never reused in the process, so it never collides with
 *    one left in a session).
 *  - examples/minimal_plugin stays standalone on purpose: it is the file a
 *    plugin author copies out of the tree.
 */
#ifndef SEMQ_PLUGCOMMON_H
#define SEMQ_PLUGCOMMON_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

/* Formats the error text of a plugin call into err[errsz] (no-op when err
 * is NULL or errsz 0). */
void plug_errf(char *err, size_t errsz, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

int64_t plug_now_ms(void);  /* wall clock, unix ms */
int64_t plug_mono_ms(void); /* monotonic ms */

/* One line saying why a libpq call failed: the server's primary message of
 * res, else pg's message (pg may be NULL), up to its first line break. */
void plug_pg_why(const PGresult *res, PGconn *pg, char *buf, size_t n);

/* A name for a statement to prepare, "semq_<plugin>_<copy>_<n>[_<tag>]",
 * never the same twice in this process (tag may be NULL). */
void plug_pg_stmt_name(char *buf, size_t n, const char *plugin,
		       const char *tag);

/* The session a plugin's statements were prepared in. */
struct plug_pg_session {
	PGconn *pg; /* borrowed; NULL: nothing prepared */
	int pid;    /* its backend (PQbackendPID) then */
};

/* 1 if the statements prepared in s are in pg's current session. */
int plug_pg_session_same(const struct plug_pg_session *s, PGconn *pg);
/* After preparing them on pg. */
void plug_pg_session_set(struct plug_pg_session *s, PGconn *pg);

#endif
