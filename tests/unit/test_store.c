/* SPDX-License-Identifier: MIT */
/*
 * test_store: the unit tests of the store (node/store.h) on real databases,
 * one file of tests per file of the store, each with the cases of its
 * concern (tests/unit/test_store_<concern>.c):
 *
 *   test_store_open.c      store.c, store_schema.c: opening, migrating,
 *                          batches, reads that re-enter the store
 *   test_store_apply.c     store_apply.c: the exactly-once receive path
 *   test_store_in.c        store_in.c: acknowledgements, watermarks, lives
 *   test_store_redo.c      store_redo.c: the redo queue
 *   test_store_verbs.c     store_verbs.c: the operator's verbs
 *   test_store_out.c       store_out.c: the outbound state machine
 *   test_store_custody.c   store_custody.c: custody at a relay and origin
 *   test_store_stat.c      store_stat.c: stats and counts without scans
 *   test_store_trace.c     store_trace.c: what semqctl trace reads
 *   test_store_pg_instances.c  PostgreSQL only: several instances on one
 *                          database, a lost connection
 *
 * and the fixture they share (store_fixture.h). This is the main: every
 * group but the last runs as one cmocka group on the back end of the run,
 * SQLite, or PostgreSQL with --pg (or SEMQ_TEST_BACKEND=pg), and the last
 * after them on PostgreSQL only; without SEMQ_TEST_PG_URL a PostgreSQL run
 * says so loudly and exits 77 (skipped). That is tests/unit/backend.c's
 * be_url_main.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_fixture.h"

/* The groups of both back ends, in the order they run. */
static const struct {
	const struct CMUnitTest *tests;
	const size_t *n;
} groups[] = {
	{store_open_tests, &store_open_ntests},
	{store_apply_tests, &store_apply_ntests},
	{store_in_tests, &store_in_ntests},
	{store_redo_tests, &store_redo_ntests},
	{store_verbs_tests, &store_verbs_ntests},
	{store_out_tests, &store_out_ntests},
	{store_custody_tests, &store_custody_ntests},
	{store_stat_tests, &store_stat_ntests},
	{store_trace_tests, &store_trace_ntests},
};

int main(int argc, char **argv)
{
	struct CMUnitTest *tests;
	size_t i, n = 0;
	int r;

	for (i = 0; i < BE_N(groups); i++)
		n += *groups[i].n;
	tests = calloc(n, sizeof *tests);
	if (!tests) {
		fprintf(stderr, "test_store: out of memory\n");
		return 1;
	}
	for (n = 0, i = 0; i < BE_N(groups); i++) {
		memcpy(tests + n, groups[i].tests,
		       *groups[i].n * sizeof *tests);
		n += *groups[i].n;
	}
	r = be_url_main(argc, argv, "store", tests, n, store_pg_instances_tests,
			store_pg_instances_ntests);
	free(tests);
	return r;
}
