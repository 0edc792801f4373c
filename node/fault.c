/* SPDX-License-Identifier: MIT */
/*
 * Crash points for tests (see fault.h): reads SEMQ_CRASH_AT once, before
 * main(), and kills the process with _exit(99) when the armed point is
 * reached for the N-th time. Built only when SEMQ_FAULTS says so (fault.h).
 *
 * DESIGN
 *  - The variable is read in a constructor, so every thread sees the same
 *    settled state and nothing is parsed on a hot path: fault_armed and the
 *    armed name never change after start.
 *  - Only the hit counter is shared between threads (points sit on the
 *    store thread and on the network thread): it is an atomic, so exactly
 *    one hit is the N-th.
 *  - Dying writes one line with write(2) and calls _exit(): no stdio flush,
 *    no atexit handlers, no SQLite close, no TLS goodbye.
 */
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAULT_EXIT 99 /* the exit code of a crash at a point */
#define FAULT_NAME_MAX 64

/* Every point placed in the code; fault.h says where each one is. */
static const char *const points[] = {
	"after_commit",
	"before_send",
	"origin_before_commit",
	"origin_after_commit",
	"ack_before_commit",
	"compaction_before_commit",
	"relay_store_before_commit",
	"relay_store_after_commit",
};
#define N_POINTS (sizeof points / sizeof points[0])

int fault_armed;
static char armed_name[FAULT_NAME_MAX + 1];
static unsigned long armed_nth; /* die on this hit, 1-based */
static unsigned long hits;      /* of armed_name so far (atomic) */

static void refuse(const char *spec, const char *why)
{
	size_t i;

	fprintf(stderr, "fault: SEMQ_CRASH_AT='%.100s': %s", spec, why);
	if (strcmp(why, "unknown crash point") == 0) {
		fputs(" (known:", stderr);
		for (i = 0; i < N_POINTS; i++)
			fprintf(stderr, " %s", points[i]);
		fputc(')', stderr);
	}
	fputc('\n', stderr);
	exit(2);
}

/* Parses SEMQ_CRASH_AT=NAME[:N]; a bad value stops the process (exit 2). */
__attribute__((constructor)) static void fault_init(void)
{
	const char *spec = getenv("SEMQ_CRASH_AT");
	const char *colon;
	size_t len, i;

	if (!spec || !spec[0])
		return;
	colon = strchr(spec, ':');
	len = colon ? (size_t)(colon - spec) : strlen(spec);
	if (len == 0 || len > FAULT_NAME_MAX)
		refuse(spec, "the point name is empty or too long");
	memcpy(armed_name, spec, len);
	armed_name[len] = '\0';
	for (i = 0; i < N_POINTS && strcmp(points[i], armed_name); i++)
		;
	if (i == N_POINTS)
		refuse(spec, "unknown crash point");
	armed_nth = 1;
	if (colon) {
		char *end = NULL;

		errno = 0;
		if (colon[1] < '0' || colon[1] > '9')
			refuse(spec, "N after ':' must be a number from 1");
		armed_nth = strtoul(colon + 1, &end, 10);
		if (errno || *end || armed_nth == 0)
			refuse(spec, "N after ':' must be a number from 1");
	}
	fault_armed = 1;
}

void fault_crash(const char *name)
{
	char line[160];
	unsigned long n;
	int len;

	if (!fault_armed || strcmp(name, armed_name) != 0)
		return;
	n = __atomic_add_fetch(&hits, 1, __ATOMIC_SEQ_CST);
	if (n != armed_nth)
		return;
	len = snprintf(line, sizeof line, "fault: crash at %s (#%lu)\n", name,
		       n);
	if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0) {
		/* nowhere left to say it: die all the same */
	}
	_exit(FAULT_EXIT);
}
