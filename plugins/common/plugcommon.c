/* SPDX-License-Identifier: MIT */
/* What the shipped plugins share (see plugcommon.h for the design). */
#include "plugcommon.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void plug_errf(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (!err || errsz == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t plug_now_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}

int64_t plug_mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

void plug_pg_why(const PGresult *res, PGconn *pg, char *buf, size_t n)
{
	const char *s =
		res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	if ((!s || !s[0]) && pg)
		s = PQerrorMessage(pg);
	if (!s || !s[0])
		s = "unknown error";
	snprintf(buf, n, "%.*s", (int)strcspn(s, "\n"), s);
}

void plug_pg_stmt_name(char *buf, size_t n, const char *plugin, const char *tag)
{
	static unsigned long counter;
	unsigned long id = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);

	snprintf(buf, n, "semq_%s_%lx_%lu%s%s", plugin,
		 (unsigned long)(uintptr_t)&counter, id, tag ? "_" : "",
		 tag ? tag : "");
}

int plug_pg_session_same(const struct plug_pg_session *s, PGconn *pg)
{
	return s->pg && s->pg == pg && s->pid == PQbackendPID(pg);
}

void plug_pg_session_set(struct plug_pg_session *s, PGconn *pg)
{
	s->pg = pg;
	s->pid = pg ? PQbackendPID(pg) : 0;
}
