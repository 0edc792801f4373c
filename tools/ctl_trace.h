/* SPDX-License-Identifier: MIT */
/*
 * `semqctl trace`: where is a message? (tools/ctl_trace.c). semqctl.c runs
 * the command (its table entry, the admin HTTP request); this module holds
 * its help, checks its arguments into the GET /trace request, and prints
 * the daemon's answer for a person.
 */
#ifndef SEMQ_CTL_TRACE_H
#define SEMQ_CTL_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#define CTL_TRACE_USAGE                                                        \
	"(--key K [--dest D] [--since DURATION] [--limit N] | --id "           \
	"ORIGIN/DEST/SEQ)"
#define CTL_TRACE_SUMMARY                                                      \
	"where is a message: its record at every hop (asks the daemon)"
extern const char ctl_trace_help[];

/*
 * The path and query of GET /trace for the arguments (NULL when not
 * given) into path[0..sz). 0, or -1 with err naming the argument at fault
 * (a usage error). now: unix ms, for --since.
 */
int ctl_trace_path(const char *key, const char *id, const char *dest,
		   const char *since, const char *limit, int64_t now,
		   char *path, size_t sz, char *err, size_t errsz);

/* Prints the answer of GET /trace (doc borrowed) for a person. now: unix
 * ms, for the ages. */
void ctl_trace_print(FILE *out, const json_t *doc, int64_t now);

#endif
