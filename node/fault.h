/* SPDX-License-Identifier: MIT */
/*
 * Crash points: a simulated power loss between the steps of the handshake
 * (SPEC §6), for the integration tests (tests/integration/
 * test_crash_points.py). They are compiled only when CMake's SEMQ_FAULTS
 * says so: by default in Debug and RelWithDebInfo builds (the tests'), not
 * in Release or MinSizeRel (a packager's; -DSEMQ_FAULTS=ON|OFF decides
 * otherwise). Without them fault_point() is an empty inline function,
 * nothing of this module is in the binary, and the crash tests are not
 * registered.
 *
 * SEMQ_CRASH_AT=NAME[:N] in the environment when the process starts arms the
 * point NAME: the N-th time (default 1) any thread reaches
 * fault_point("NAME"), the process writes "fault: crash at NAME (#N)" to
 * stderr and ends at once with _exit(99) — no flush, no cleanup, no goodbye
 * to the peers: what survives is what was committed, as after a power loss.
 * A name that is not one of the points below, or a bad N, stops the process
 * at start with exit code 2 and a line naming the culprit. With the variable
 * unset a point costs one load and one branch.
 *
 * The points, where they are, and what is true when the process dies there:
 *
 *   after_commit             worker.c deliver(): a batch committed; its
 *                            outputs (Data, 810 frames, answers) are not yet
 *                            handed to the network thread. On a receiver the
 *                            first such batch is the one that recorded the
 *                            first receipts; on an origin the one that marked
 *                            the first rows sent (0 -> 4).
 *   before_send              net.c out_cb(): a committed batch's frame has
 *                            reached the network thread; it is not yet
 *                            written to its connection.
 *   origin_before_commit     proto.c on_indication(): the origin ran
 *                            store_mark_confirmed() for an 810-Indication's
 *                            verdicts (-> 100) in the open batch; no commit.
 *   origin_after_commit      proto.c proto_committed(): a batch that
 *                            confirmed outbound rows (100) committed; its
 *                            810-Responses have not left.
 *   ack_before_commit        proto.c on_response(): the receiver marked rows
 *                            AS_OK for 810-Responses (store_ack_response) in
 *                            the open batch; no commit.
 *   compaction_before_commit proto.c proto_tick(): store_advance_watermarks()
 *                            moved a watermark (and, without a receipt
 *                            retention, purged the rows it passed) in the
 *                            open batch; no commit.
 *   relay_store_before_commit proto.c relay_one(): a relay stored a
 *                            store-and-forward copy (store_enqueue_copy) in
 *                            the open batch; no commit, no RelayAck.
 *   relay_store_after_commit proto.c proto_committed(): a batch that stored
 *                            copies committed; its RelayAck(stored) has not
 *                            left.
 */
#ifndef SEMQ_FAULT_H
#define SEMQ_FAULT_H

#ifdef SEMQ_FAULTS

/* Non-zero when SEMQ_CRASH_AT armed a point; set once, before main(). */
extern int fault_armed;

/* Counts a hit of `name` (borrowed) and dies on the armed one's N-th. */
void fault_crash(const char *name);

static inline void fault_point(const char *name)
{
	if (__builtin_expect(fault_armed, 0))
		fault_crash(name);
}

#else

static inline void fault_point(const char *name)
{
	(void)name;
}

#endif

#endif
