# SPDX-License-Identifier: MIT
"""Exactly once between two real semqd nodes (SPEC §6).

An origin R dials a receiver S (which runs the journal plugin) over mutual
TLS on loopback; the tests then read both databases to prove that every
message took effect exactly once in S's journal, in key order, and that R
recorded the destination's verdict (status 100, result):

  1. 10,000 messages over 100 keys, all online; prints the throughput.
  2. the same while S is killed -9 and restarted five times and R twice, at
     random moments (seeded; the seed is printed and SEMQ_EO_SEED repeats
     it); prints the restarts and the duplicates R was told about.
  3. the same through faultproxy cutting the link every 0.5-2 s and, for
     certain, each time it has carried a sixth of the payload bytes: at
     least 5 cuts mid-transfer however fast the machine is.
  4. a second copy yields the verdict recorded the first time (processed)
     and no second journal row: (a) after the watermark passed the received
     row, (b) while the tb_0030 row exists behind a gap; (c) an in-doubt row
     (status 4) is resolved by a Query, not by a blind resend, both after
     the watermark and behind a gap; (d) once the received row is purged
     (receipt_retention 0), a second copy cannot be told from another
     message: S refuses it undecided and R holds it for the operator.
  5. messages of one key held at R while S is down are applied in seq order
     once S comes up.
  6. while the application commits all the time, R stamps no row sent
     before it was created (its batch clock is read once it holds the
     write lock).

Environment (besides what semqtest.py reads): SEMQ_EO_SCALE (default 1)
in (0, 1] multiplies the message counts of 1-3 (at least 1000 remain), for
slow machines; SEMQ_EO_SEED fixes the seed of the random restarts and of
the proxy.

Run by ctest as integration_exactly_once, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_exactly_once.py [NAME]
"""

import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (HarnessError, Pending, check_exactly_once,  # noqa: E402
                      connect, log_lines, run, test, wait_log, wait_until)

SCALE = float(os.environ.get("SEMQ_EO_SCALE") or "1")
if not 0 < SCALE <= 1:
    sys.exit(f"SEMQ_EO_SCALE={SCALE}: must be in (0, 1]")
N_MSGS = max(1000, int(round(10000 * SCALE)))  # messages of tests 1-3
N_KEYS = 100
PAYLOAD = bytes(range(100))  # 100 bytes
SEED = os.environ.get("SEMQ_EO_SEED")

# Fast timers: short poll, quick in-doubt queries, quick reconnects. Ping
# and idle timeouts keep their defaults (query_after < idle_timeout).
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}

# Tests 2 and 3 use a smaller in-flight window: with the default (1000)
# the 10,000 messages are through in well under a second, before a kill or
# a cut could land. With these the run lasts seconds, so the faults hit
# messages in flight, and the tests check that they did. Test 3's certain
# cuts come from the proxy's byte budget (PROXY_CUTS), not from its timer.
KILL_WINDOW = "100"
PROXY_WINDOW = "50"
PROXY_CUTS = 5  # test 3: a link carries at most 1/(PROXY_CUTS + 1) of it

# Bounds of the waits; generous, the daemon normally needs a fraction.
BULK_TIMEOUT = 150.0  # all N_MSGS confirmed
SHORT_TIMEOUT = 30.0  # a handful of messages
READY_TIMEOUT = 30.0  # a node (re)started and listening


def make_pair(t, proxy_kw=None, window=None):
    """R (origin, no plugin, dials) and S (journal plugin, listens), not
    started; with proxy_kw, R dials S through a started faultproxy; window:
    R's in-flight window (default: the daemon's)."""
    certs = t.certs(["R", "S"])
    s = t.node("S", certs, node_options=FAST)
    r = t.node("R", certs, listen=False, journal=False,
               node_options=dict(FAST, window=window) if window else FAST)
    proxy = t.proxy(s.listen_port, **proxy_kw) if proxy_kw else None
    connect(r, s, proxy=proxy)
    return r, s, proxy


def enqueue_bulk(r, dest, n, nkeys):
    """The application's side: n messages, key i % nkeys, in one sqlite
    transaction (executemany). Returns (unix time of the commit,
    {(origin, seq): key} as stored)."""
    rows = [(dest, 1, f"key{i % nkeys:03d}", PAYLOAD) for i in range(n)]
    c = r.connect_db(readonly=False)
    try:
        with c:
            c.executemany("INSERT INTO tb_0031(dest, type, msg_key, payload)"
                          " VALUES (?, ?, ?, ?)", rows)
        committed = time.time()
        r.wait_numbered()
        sent = c.execute("SELECT seq, msg_key FROM tb_0031 WHERE origin = ? "
                         "AND dest = ? ORDER BY seq", (r.id, dest)).fetchall()
    finally:
        c.close()
    if [s for s, _ in sent] != list(range(1, n + 1)):
        raise HarnessError(f"{r.id}: the schema numbered the {n} rows "
                           f"{sent[:3]}...{sent[-3:]}, not 1..{n}")
    return committed, {(r.id, s): k for s, k in sent}


def confirmed_count(r, dest):
    return r.sql("SELECT count(*) FROM tb_0031 WHERE dest = ? AND "
                 "status = 100", (dest,))[0][0]


def wait_confirmed(t, r, dest, n, timeout):
    """Waits until every one of the n rows of r to dest is at status 100."""
    def done():
        c = r.outbound_status_counts(dest)
        if set(c) <= {100} and sum(c.values()) == n:
            return True
        return Pending(f"status counts {c}")
    wait_until(done, timeout, f"{r.id}: all {n} rows to {dest} at status "
               "100", interval=0.2, on_timeout=t.logs)


def watermark(s, origin):
    """S's confirmed_through for the stream origin -> S (0 when unknown)."""
    rows = s.sql("SELECT confirmed_through FROM semq_stream_in WHERE "
                 "origin = ? AND dest = ?", (origin, s.id))
    return rows[0][0] if rows else 0


def received_seqs(s, origin):
    """{seq: (ack_status, result)} of S's tb_0030 rows from origin."""
    return {q: (a, res) for q, a, res in s.sql(
        "SELECT seq, ack_status, result FROM tb_0030 WHERE origin = ? AND "
        "dest = ?", (origin, s.id))}


def settled(s, origin, n):
    """S's watermark of origin's stream is n and every tb_0030 row of the
    stream is at or below it, acknowledged (the rows stay for
    receipt_retention: their digests answer a second copy)."""
    w = watermark(s, origin)
    open_rows = [q for q, (a, _) in received_seqs(s, origin).items()
                 if q > w or a != 1]
    return w == n and not open_rows


def wait_settled(t, s, origin, n, timeout=SHORT_TIMEOUT):
    """Waits until settled(s, origin, n) (SPEC §4)."""
    def done():
        w, rows = watermark(s, origin), received_seqs(s, origin)
        return settled(s, origin, n) or Pending(
            f"confirmed_through {w}, tb_0030 rows {len(rows)}, not "
            f"acknowledged {sum(1 for a, _ in rows.values() if a != 1)}")
    wait_until(done, timeout, f"{s.id}: confirmed_through {n} for {origin}"
               " and every row of it acknowledged", interval=0.2,
               on_timeout=t.logs)


def out_row(r, dest, seq):
    """R's tb_0031 row (status, result, attempts, last_error) or None."""
    rows = r.sql("SELECT status, result, attempts, last_error FROM tb_0031 "
                 "WHERE origin = ? AND dest = ? AND seq = ?",
                 (r.id, dest, seq))
    return rows[0] if rows else None


def journal_copies(s, origin, seq):
    return s.sql("SELECT count(*) FROM journal WHERE origin = ? AND dest = ?"
                 " AND seq = ?", (origin, s.id, seq))[0][0]


def journal_of(s, origin):
    """S's journal rows of origin's messages."""
    return s.sql("SELECT count(*) FROM journal WHERE origin = ?",
                 (origin,))[0][0]


def duplicate_journal_rows(s):
    """Journal rows beyond the first of their message id."""
    return s.sql("SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n "
                 "FROM journal GROUP BY origin, dest, seq)")[0][0]


def resent_count(r, dest):
    """R's rows sent more than once (a fault made R resend them)."""
    return r.sql("SELECT count(*) FROM tb_0031 WHERE dest = ? AND "
                 "attempts > 1", (dest,))[0][0]


def result_counts(r, dest):
    return dict(r.sql("SELECT coalesce(result, -1), count(*) FROM tb_0031 "
                      "WHERE dest = ? GROUP BY result", (dest,)))


def seed_of(what):
    """The seed for `what`: SEMQ_EO_SEED, else a fresh one; printed."""
    seed = int(SEED) if SEED else random.SystemRandom().randrange(1, 2**31)
    print(f"{what}: seed {seed} (SEMQ_EO_SEED={seed} repeats it)",
          flush=True)
    return seed


def check_bulk_outcome(t, r, s, keys):
    """The end state every bulk run must reach: all confirmed at R, each
    message exactly once in S's journal in key order, S's watermark at the
    end of the stream."""
    n = len(keys)
    wait_confirmed(t, r, "S", n, BULK_TIMEOUT)
    got = check_exactly_once(s, ["R"], n, keys=keys)
    assert got["total"] == n and got["keys"] == N_KEYS, got
    wait_settled(t, s, "R", n)
    return got


# ---- 1. all online --------------------------------------------------------

@test(timeout=300)
def bulk_exactly_once_in_key_order(t):
    r, s, _ = make_pair(t)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    committed, keys = enqueue_bulk(r, "S", N_MSGS, N_KEYS)
    wait_confirmed(t, r, "S", N_MSGS, BULK_TIMEOUT)
    last_ack = r.sql("SELECT max(acked_at) FROM tb_0031 WHERE dest = 'S'")
    secs = (last_ack[0][0] - committed * 1000.0) / 1000.0
    check_bulk_outcome(t, r, s, keys)
    assert duplicate_journal_rows(s) == 0
    print(f"FIGURES: all-online messages={N_MSGS} keys={N_KEYS} "
          f"payload={len(PAYLOAD)}B seconds={secs:.2f} "
          f"msgs_per_s={N_MSGS / max(secs, 1e-3):.0f} "
          f"results={result_counts(r, 'S')}", flush=True)
    r.stop()
    s.stop()


# ---- 2. kill -9 and restart both ends -------------------------------------

@test(timeout=400)
def bulk_exactly_once_through_kill9_restarts(t):
    rng = random.Random(seed_of("kill -9 schedule"))
    victims = ["S"] * 5 + ["R"] * 2
    rng.shuffle(victims)
    # The random moments: each kill fires once R has a random share of the
    # stream confirmed (so it lands mid-transfer however fast the nodes
    # are), after a random few milliseconds; the node stays down a moment.
    shares = sorted(rng.uniform(0.02, 0.8) for _ in victims)
    delays = [rng.uniform(0.0, 0.05) for _ in victims]
    downs = [rng.uniform(0.0, 0.5) for _ in victims]

    r, s, _ = make_pair(t, window=KILL_WINDOW)
    nodes = {"R": r, "S": s}
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    committed, keys = enqueue_bulk(r, "S", N_MSGS, N_KEYS)
    events = []
    for who, share, delay, down in zip(victims, shares, delays, downs):
        want = int(share * N_MSGS)

        def progressed():
            c = confirmed_count(r, "S")
            return c >= want or Pending(f"{c} confirmed")
        wait_until(progressed, BULK_TIMEOUT, f"R: {want} rows confirmed "
                   f"before killing {who}", interval=0.01, on_timeout=t.logs)
        time.sleep(delay)
        at = confirmed_count(r, "S")
        rc = nodes[who].kill()
        assert rc == -9, f"{who} had exited ({rc}) before the kill"
        time.sleep(down)
        nodes[who].start(timeout=READY_TIMEOUT)
        events.append(f"{who}@{at}")
        print(f"killed -9 {who} with {at}/{N_MSGS} confirmed, down "
              f"{down:.2f} s", flush=True)
    wait_confirmed(t, r, "S", N_MSGS, BULK_TIMEOUT)
    secs = time.time() - committed
    check_bulk_outcome(t, r, s, keys)
    dup_rows = duplicate_journal_rows(s)
    suppressed = r.sql("SELECT count(*) FROM tb_0031 WHERE dest = 'S' AND "
                       "result = 2")[0][0]
    print(f"FIGURES: kill9 messages={N_MSGS} window={KILL_WINDOW} "
          f"restarts S={victims.count('S')} R={victims.count('R')} "
          f"at=[{' '.join(events)}] resent_rows={resent_count(r, 'S')} "
          f"result2_rows={suppressed} "
          f"duplicate_journal_rows={dup_rows} seconds={secs:.1f} "
          f"results={result_counts(r, 'S')}", flush=True)
    assert dup_rows == 0, f"{dup_rows} duplicate journal rows"
    late = [e for e in events if e.endswith(f"@{N_MSGS}")]
    assert not late, f"kills after the transfer ended test nothing: {late}"
    r.stop()
    s.stop()


# ---- 3. a link that keeps breaking ----------------------------------------

@test(timeout=400)
def bulk_exactly_once_through_fault_proxy(t):
    seed = seed_of("fault proxy")
    # R must carry at least N_MSGS * len(PAYLOAD) bytes to S, a link at
    # most cut_bytes of them: PROXY_CUTS + 1 links at least, so at least
    # PROXY_CUTS cuts while messages remain, on any machine. The timer's
    # cuts come on top, at random moments.
    cut_bytes = N_MSGS * len(PAYLOAD) // (PROXY_CUTS + 1)
    r, s, proxy = make_pair(t, {"cut_min": 0.5, "cut_max": 2.0,
                                "cut_bytes": cut_bytes, "seed": seed},
                            window=PROXY_WINDOW)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    committed, keys = enqueue_bulk(r, "S", N_MSGS, N_KEYS)
    wait_confirmed(t, r, "S", N_MSGS, BULK_TIMEOUT)
    secs = time.time() - committed
    stats = proxy.stats()  # what the transfer went through
    check_bulk_outcome(t, r, s, keys)
    dup_rows = duplicate_journal_rows(s)
    print(f"FIGURES: faultproxy messages={N_MSGS} window={PROXY_WINDOW} "
          f"seed={proxy.seed} links={stats['conns']} cuts={stats['cuts']} "
          f"resent_rows={resent_count(r, 'S')} "
          f"result2_rows={result_counts(r, 'S').get(2, 0)} "
          f"duplicate_journal_rows={dup_rows} seconds={secs:.1f}",
          flush=True)
    assert dup_rows == 0, f"{dup_rows} duplicate journal rows"
    assert stats["cuts"] >= PROXY_CUTS, \
        f"{stats['cuts']} cuts where the byte budget ({cut_bytes} B a " \
        f"link) makes at least {PROXY_CUTS}: a link ended otherwise"
    r.stop()
    s.stop()
    proxy.stop()


# ---- 4. second copies -------------------------------------------------------

def reset_row(r, seq, status):
    """While R is stopped: puts R's row seq (to S) back to `status`, due
    now, as if the daemon had died before recording the answer."""
    assert not r.alive()
    c = r.connect_db(readonly=False)
    try:
        with c:
            n = c.execute("UPDATE tb_0031 SET status = ?, next_attempt_at = 0"
                          " WHERE origin = ? AND dest = 'S' AND seq = ?",
                          (status, r.id, seq)).rowcount
    finally:
        c.close()
    assert n == 1, f"R: no row seq {seq} to reset"


def wait_row(t, r, seq, what, pred):
    def done():
        row = out_row(r, "S", seq)
        return (row is not None and pred(row)) or Pending(
            f"(status, result, attempts, last_error) = {row}")
    return wait_until(done, SHORT_TIMEOUT, f"R: row seq {seq} {what}",
                      interval=0.1, on_timeout=t.logs)


@test(timeout=120)
def resend_after_the_watermark_is_answered_from_the_record(t):
    r, s, _ = make_pair(t)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    r.enqueue("S", type=7, key=None, payload=PAYLOAD, count=3)
    wait_confirmed(t, r, "S", 3, SHORT_TIMEOUT)
    wait_settled(t, s, "R", 3)
    before = out_row(r, "S", 2)
    assert before[0] == 100 and before[1] == 0, before
    r.stop()
    reset_row(r, 2, 0)
    r.start(timeout=READY_TIMEOUT)
    # The same message again (the same digest): S answers what it became
    # the first time, processed, without a second effect.
    wait_row(t, r, 2, "at status 100 with result 0 (processed)",
             lambda x: x[0] == 100 and x[1] == 0 and x[2] > before[2])
    after = out_row(r, "S", 2)
    assert after[2] > before[2], \
        f"R did not send seq 2 again: {before} -> {after}"
    assert journal_copies(s, "R", 2) == 1
    check_exactly_once(s, ["R"], 3)
    assert settled(s, "R", 3)
    assert s.redo_status_counts() == {}, s.redo_status_counts()
    r.stop()
    s.stop()


@test(timeout=120)
def resend_after_purge_is_held_undecided(t):
    """S keeps no received row past the watermark (receipt_retention 0): a
    second copy of seq 2 could be the same message or another one under
    the same seq (a restored sender), so S refuses it undecided and R
    holds the row for the operator, who ends it with outbound cancel."""
    r, s, _ = make_pair(t)
    s.node_options["receipt_retention"] = "0"
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    r.enqueue("S", type=7, key=None, payload=PAYLOAD, count=3)
    wait_confirmed(t, r, "S", 3, SHORT_TIMEOUT)

    def purged():
        rows = received_seqs(s, "R")
        return (watermark(s, "R") == 3 and not rows) or Pending(
            f"W {watermark(s, 'R')}, rows {sorted(rows)}")
    wait_until(purged, SHORT_TIMEOUT, "S: rows purged past W 3",
               interval=0.1, on_timeout=t.logs)
    r.stop()
    reset_row(r, 2, 0)
    r.start(timeout=READY_TIMEOUT)
    row = wait_row(t, r, 2, "held (status 8) with result 7 (undecided)",
                   lambda x: x[0] == 8 and x[1] == 7)
    assert "cannot tell" in (out_row(r, "S", 2)[3] or ""), out_row(r, "S", 2)
    assert "held:" in r.log_text() and "cannot tell" in r.log_text()
    assert journal_copies(s, "R", 2) == 1
    rc, out, err = r.semqctl("outbound", "list", "--status", "held")
    assert rc == 0 and "R/S/2" in out, (rc, out, err)
    rc, out, err = r.semqctl("outbound", "cancel", "R/S/2")
    assert rc == 0, (rc, out, err)
    assert out_row(r, "S", 2)[:2] == (-2, 4), out_row(r, "S", 2)
    check_exactly_once(s, ["R"], 3)
    print(f"held row: {row}", flush=True)
    r.stop()
    s.stop()


def make_gap(t):
    """R and S running, S holding seqs 2 and 3 of R's stream as AS_OK rows
    of tb_0030 that the watermark cannot pass: R's row of seq 1 was deleted
    before it was ever sent, so S never gets it. A second origin R2 (also
    running) has one message to S, sent once the gap stands: the
    watermark pass that moves R2's stream to 1 went over R's stream too."""
    r, s, _ = make_pair(t)
    r2 = t.node("R2", t.certs(["R2"]), listen=False,
                journal=False, node_options=FAST)
    connect(r2, s)
    r.start(timeout=READY_TIMEOUT)  # creates R's database, numbers the rows
    r.enqueue("S", type=7, key=None, payload=PAYLOAD, count=3)
    r.stop()
    r.sql_write("DELETE FROM tb_0031 WHERE origin = 'R' AND dest = 'S' AND "
                "seq = 1")
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r, "S", 2, SHORT_TIMEOUT)

    def acked():  # both 810-Responses arrived at S
        got = received_seqs(s, "R")
        return got == {2: (1, 0), 3: (1, 0)} or Pending(
            f"tb_0030 seq: (ack_status, result) {got}")
    wait_until(acked, SHORT_TIMEOUT, "S: tb_0030 rows 2 and 3 AS_OK",
               interval=0.1, on_timeout=t.logs)
    # A watermark pass after the rows were AS_OK must leave R's put: R2's
    # stream moving to 1 shows that one ran (a pass goes over every stream).
    r2.start(timeout=READY_TIMEOUT)
    r2.enqueue("S", type=7, key=None, payload=PAYLOAD, count=1)
    wait_settled(t, s, "R2", 1)
    assert watermark(s, "R") == 0, watermark(s, "R")
    assert set(received_seqs(s, "R")) == {2, 3}
    r2.stop()
    return r, s


@test(timeout=120)
def resend_while_received_row_exists_is_a_duplicate(t):
    r, s = make_gap(t)
    before = out_row(r, "S", 2)
    r.stop()
    reset_row(r, 2, 0)
    r.start(timeout=READY_TIMEOUT)
    wait_row(t, r, 2, "at status 100 with result 0 (as recorded)",
             lambda x: x[0] == 100 and x[1] == 0 and x[2] > before[2])
    after = out_row(r, "S", 2)
    assert after[2] > before[2], \
        f"R did not send seq 2 again: {before} -> {after}"
    assert journal_copies(s, "R", 2) == 1
    assert journal_copies(s, "R", 1) == 0
    assert journal_copies(s, "R", 3) == 1
    assert journal_of(s, "R") == 2 and journal_of(s, "R2") == 1, \
        s.journal_rows()
    assert watermark(s, "R") == 0
    assert set(received_seqs(s, "R")) == {2, 3}
    assert out_row(r, "S", 3)[:2] == (100, 0), out_row(r, "S", 3)
    r.stop()
    s.stop()


@test(timeout=120)
def in_doubt_row_is_queried_not_resent(t):
    r, s, _ = make_pair(t)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    r.enqueue("S", type=7, key="bill-1", payload=PAYLOAD, count=1)
    wait_confirmed(t, r, "S", 1, SHORT_TIMEOUT)
    wait_settled(t, s, "R", 1)
    before = out_row(r, "S", 1)
    assert before[:3] == (100, 0, 1), before
    r.stop()
    reset_row(r, 1, 4)  # sent, answer unknown
    r.start(timeout=READY_TIMEOUT)
    wait_row(t, r, 1, "at status 100", lambda x: x[0] == 100)
    after = out_row(r, "S", 1)
    # A resend would have gone 4 -> 0 -> 4 (attempts + 1, last_error
    # "not received; resent"); a query answered "received" keeps both.
    assert after[2] == before[2], \
        f"R sent the in-doubt row again: {before} -> {after}"
    assert after[3] is None or "resent" not in after[3], after
    # S answered from its record: received, processed.
    assert after[1] == 0, f"query answer recorded as result {after[1]}"
    assert journal_copies(s, "R", 1) == 1
    assert s.journal_count() == 1
    assert settled(s, "R", 1)
    assert s.redo_status_counts() == {}, s.redo_status_counts()
    print(f"in-doubt row: {before} -> {after}", flush=True)
    r.stop()
    s.stop()


@test(timeout=120)
def in_doubt_row_behind_a_gap_is_queried_not_resent(t):
    r, s = make_gap(t)
    before = out_row(r, "S", 3)
    assert before[:3] == (100, 0, 1), before
    received_at = s.sql("SELECT received_at FROM tb_0030 WHERE origin = 'R'"
                        " AND seq = 3")
    r.stop()
    reset_row(r, 3, 4)  # sent, answer unknown; S still has its row
    r.start(timeout=READY_TIMEOUT)
    wait_row(t, r, 3, "at status 100", lambda x: x[0] == 100)
    after = out_row(r, "S", 3)
    assert after[2] == before[2], \
        f"R sent the in-doubt row again: {before} -> {after}"
    # S answered from its tb_0030 row: received, processed.
    assert after[1] == 0, f"query answer recorded as result {after[1]}"
    assert journal_copies(s, "R", 3) == 1
    assert journal_of(s, "R") == 2 and journal_of(s, "R2") == 1, \
        s.journal_rows()
    assert s.sql("SELECT received_at FROM tb_0030 WHERE origin = 'R' AND "
                 "seq = 3") == received_at
    assert set(received_seqs(s, "R")) == {2, 3}
    r.stop()
    s.stop()


# ---- 5. one key, destination down ------------------------------------------

@test(timeout=120)
def held_key_applied_in_seq_order_when_dest_returns(t):
    n = 50
    r, s, _ = make_pair(t)
    r.start(timeout=READY_TIMEOUT)
    ids = r.enqueue("S", type=9, key="order-42", payload=PAYLOAD, count=n)
    assert [q for _, _, q in ids] == list(range(1, n + 1)), ids
    prev = r.sql("SELECT seq, prev_seq FROM tb_0031 ORDER BY seq")
    assert prev == [(q, q - 1) for q in range(1, n + 1)], prev[:5]
    # R dials S's closed port again (twice) with the rows numbered: it has
    # had them to send and nowhere to send them.
    dials = r" peer=S .*cannot connect"
    seen = len(log_lines(r, dials))
    wait_log(r, dials, "two more failed dials of S", n=seen + 2,
             on_timeout=t.logs)
    counts = r.outbound_status_counts("S")
    assert counts == {0: n}, f"S is down, yet R's rows are {counts}"
    s.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r, "S", n, SHORT_TIMEOUT)
    keys = {("R", q): "order-42" for q in range(1, n + 1)}
    check_exactly_once(s, ["R"], n, keys=keys)
    order = [j["seq"] for j in s.journal_rows()]
    assert order == list(range(1, n + 1)), f"journal order {order}"
    assert result_counts(r, "S") == {0: n}, result_counts(r, "S")
    r.stop()
    s.stop()


# ---- 6. timestamps while the application holds the write lock --------------

@test(timeout=120)
def sent_at_never_precedes_created_at(t):
    """The application commits small transactions back to back, so R's
    batches keep waiting for the write lock; every row R sends must carry a
    sent_at at or after its created_at (both are unix ms of the wall clock;
    created_at comes from SQLite's 'now' in the application's insert)."""
    n, per_txn = 3000, 5
    r, s, _ = make_pair(t)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    c = r.connect_db(readonly=False)
    try:
        for i in range(0, n, per_txn):
            with c:
                c.executemany("INSERT INTO tb_0031(dest, type, msg_key, "
                              "payload) VALUES ('S', 1, ?, ?)",
                              [(f"key{(i + j) % N_KEYS:03d}", PAYLOAD)
                               for j in range(per_txn)])
    finally:
        c.close()
    wait_confirmed(t, r, "S", n, BULK_TIMEOUT)
    early, worst = r.sql("SELECT count(*), min(sent_at - created_at) "
                         "FROM tb_0031 WHERE dest = 'S'")[0]
    print(f"FIGURES: lock-contended messages={n} per_txn={per_txn} "
          f"min(sent_at - created_at)={worst} ms", flush=True)
    bad = r.sql("SELECT count(*) FROM tb_0031 WHERE sent_at < created_at")
    assert bad[0][0] == 0, (
        f"{bad[0][0]} of {early} rows were stamped sent before they were "
        f"created (by up to {-worst} ms)")
    r.stop()
    s.stop()


if __name__ == "__main__":
    run()
