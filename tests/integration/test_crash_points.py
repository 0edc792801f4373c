# SPDX-License-Identifier: MIT
"""A power loss between every pair of handshake steps (SPEC §6).

semqd built with SEMQ_FAULTS (node/fault.h) dies with _exit(99) — no flush,
no cleanup — the first time it reaches the crash point named in
SEMQ_CRASH_AT. For every point, real nodes on loopback (R -> S direct, or
R -> P -> S through a store-and-forward relay for the relay points) carry
N messages over several keys; the node holding the point dies there, the
test checks that it died at that very step (what the databases show right
after the crash), restarts it without the variable, and then checks the
invariants:

  - every message took effect exactly once in S's journal, in key order;
  - every one of R's rows reached status 100 with a verdict;
  - S's watermark (confirmed_through) equals N and every tb_0030 row is
    at or below it, acknowledged;
  - no relay copy is left in P's tb_0031;
  - every node then stops cleanly (exit 0).

One summary line per point is printed. The points, where they sit in the
code and what has happened when the process dies there are listed in
node/fault.h.

Run by ctest as integration_crash_points, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_crash_points.py [NAME]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (HarnessError, Pending, check_exactly_once,  # noqa: E402
                      connect, run, test, wait_until)

N_MSGS = 200
N_KEYS = 10
PAYLOAD = b"crash-point test payload " * 4
CRASH_EXIT = 99

# Fast timers: short poll, quick in-doubt queries and indication repeats,
# quick reconnects.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}

CRASH_TIMEOUT = 30.0  # the armed node reaches its point and dies
SETTLE_TIMEOUT = 90.0  # every invariant holds after the restart


# ---- setup ------------------------------------------------------------------

def make_direct(t, crash_on, point):
    """R (origin, dials) and S (journal, listens); SEMQ_CRASH_AT=point on
    the node named crash_on. Returns {id: node}."""
    certs = t.certs(["R", "S"])
    env = {"SEMQ_CRASH_AT": point}
    s = t.node("S", certs, node_options=FAST,
               env=env if crash_on == "S" else None)
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST,
               env=env if crash_on == "R" else None)
    connect(r, s)
    return {"R": r, "S": s}


def make_relay(t, crash_on, point):
    """R -> P -> S: P relays with store_and_forward, R and S dial P, trust
    it and route everything through it; SEMQ_CRASH_AT=point on crash_on."""
    certs = t.certs(["P", "R", "S"])
    env = {"SEMQ_CRASH_AT": point}
    p = t.node("P", certs, relay=True, store_and_forward=True, journal=False,
               node_options=FAST, env=env if crash_on == "P" else None)
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST,
               routes={"default": "P"}, env=env if crash_on == "R" else None)
    s = t.node("S", certs, listen=False, node_options=FAST,
               routes={"default": "P"}, env=env if crash_on == "S" else None)
    connect(r, p, dialer_trusts=True)
    connect(s, p, dialer_trusts=True)
    return {"P": p, "R": r, "S": s}


def enqueue_bulk(r, dest, n, nkeys):
    """n messages to dest, key i % nkeys, in one application transaction.
    Returns {(origin, seq): key}."""
    rows = [(dest, 1, f"key{i % nkeys:02d}", PAYLOAD) for i in range(n)]
    c = r.connect_db(readonly=False)
    try:
        with c:
            c.executemany("INSERT INTO tb_0031(dest, type, msg_key, payload)"
                          " VALUES (?, ?, ?, ?)", rows)
        r.wait_numbered()
        sent = c.execute("SELECT seq, msg_key FROM tb_0031 WHERE origin = ? "
                         "AND dest = ? ORDER BY seq", (r.id, dest)).fetchall()
    finally:
        c.close()
    if [s for s, _ in sent] != list(range(1, n + 1)):
        raise HarnessError(f"{r.id}: rows numbered {sent[:3]}..., not "
                           f"1..{n}")
    return {(r.id, s): k for s, k in sent}


# ---- what the databases say -------------------------------------------------

def status_count(r, status):
    return r.sql("SELECT count(*) FROM tb_0031 WHERE status = ?",
                 (status,))[0][0]


def watermark(s, origin):
    rows = s.sql("SELECT confirmed_through FROM semq_stream_in WHERE "
                 "origin = ? AND dest = ?", (origin, s.id))
    return rows[0][0] if rows else 0


def as_ok_count(s):
    return s.sql("SELECT count(*) FROM tb_0030 WHERE ack_status = 1")[0][0]


def copies(p):
    """Store-and-forward copies a relay still holds (rows of other
    origins in its tb_0031)."""
    return p.sql("SELECT count(*) FROM tb_0031 WHERE origin <> ?",
                 (p.id,))[0][0]


def expect(cond, what, t):
    if not cond:
        raise HarnessError(f"right after the crash: {what}\n{t.logs()}")


# What must be true the moment the node died at each point: proof that it
# died between those two steps and not elsewhere. nodes: {id: Node}.
def after_crash_checks(point, crash_on, nodes, t):
    r, s, p = nodes["R"], nodes["S"], nodes.get("P")
    if point in ("after_commit", "before_send") and crash_on == "S":
        j = s.journal_count()
        expect(j >= 1, f"S recorded {j} messages (its receipt batch "
               "committed)", t)
        expect(status_count(r, 100) == 0, "R has rows at 100: an "
               "810-Indication left S before the crash", t)
    elif point in ("after_commit", "before_send") and crash_on == "R":
        expect(status_count(r, 4) >= 1, "R marked no row sent (0 -> 4)", t)
        expect(s.journal_count() == 0, "S recorded messages: Data left R "
               "before the crash", t)
    elif point == "origin_before_commit":
        expect(s.journal_count() >= 1, "S recorded nothing", t)
        expect(status_count(r, 100) == 0, "R committed a confirmation", t)
    elif point == "origin_after_commit":
        expect(status_count(r, 100) >= 1, "R committed no confirmation", t)
        expect(as_ok_count(s) == 0 and watermark(s, "R") == 0,
               "S got an 810-Response from R", t)
    elif point == "ack_before_commit":
        expect(status_count(r, 100) >= 1, "R confirmed nothing", t)
        expect(as_ok_count(s) == 0 and watermark(s, "R") == 0,
               "S committed an AS_OK row", t)
    elif point == "compaction_before_commit":
        expect(s.journal_count() >= 1, "S recorded nothing", t)
        expect(watermark(s, "R") == 0, "S committed a watermark move", t)
    elif point == "relay_store_before_commit":
        expect(copies(p) == 0, "P committed a copy", t)
        expect(status_count(r, 6) == 0, "R has rows at 6: a RelayAck left "
               "P", t)
    elif point == "relay_store_after_commit":
        expect(copies(p) >= 1, "P committed no copy", t)
        expect(status_count(r, 6) == 0, "R has rows at 6: a RelayAck left "
               "P", t)
    else:
        raise HarnessError(f"no after-crash check for {point} on "
                           f"{crash_on}")


# ---- one point --------------------------------------------------------------

def crash_at(t, point, crash_on, relay=False, nth=1):
    """Arms point:nth on crash_on, sends, waits for the death at the nth
    hit, checks the moment, restarts, checks the invariants."""
    t0 = time.monotonic()
    spec = point if nth == 1 else f"{point}:{nth}"
    nodes = (make_relay if relay else make_direct)(t, crash_on, spec)
    r, s, p = nodes["R"], nodes["S"], nodes.get("P")
    victim = nodes[crash_on]

    # S stays offline in the relay runs until P has crashed and restarted,
    # so that P has to store what R sends.
    first = [p, r] if relay else [s, r]
    for n in first:
        n.start()
    keys = enqueue_bulk(r, "S", N_MSGS, N_KEYS)

    wait_until(lambda: not victim.alive() or Pending("running"),
               CRASH_TIMEOUT, f"{crash_on} to die at {point}",
               on_timeout=t.logs)
    rc = victim.kill()  # reaps the process that died on its own
    if rc != CRASH_EXIT:
        raise HarnessError(f"{crash_on} exited {rc}, not {CRASH_EXIT}, "
                           f"waiting for {point}:\n{victim.log_tail()}")
    line = f"fault: crash at {point} (#{nth})"
    if line not in victim.log_text():
        raise HarnessError(f"{crash_on}: no '{line}' in its log:\n"
                           f"{victim.log_tail()}")
    for other in nodes.values():
        if other is not victim and other.proc and not other.alive():
            raise HarnessError(f"{other.id} died too:\n{other.log_tail()}")
    after_crash_checks(point, crash_on, nodes, t)

    del victim.env["SEMQ_CRASH_AT"]
    victim.start()
    if relay:
        s.start()

    def settled():
        c = r.outbound_status_counts("S")
        j = s.journal_count()
        w = watermark(s, "R")
        left = s.unsettled("R")  # rows above W or not acknowledged
        held = copies(p) if p else 0
        done = (set(c) <= {100} and sum(c.values()) == N_MSGS and
                j >= N_MSGS and w == N_MSGS and left == 0 and held == 0)
        return done or Pending(f"R status {c}, S journal {j}, W {w}, "
                               f"tb_0030 unsettled {left}, relay copies {held}")
    wait_until(settled, SETTLE_TIMEOUT, f"every invariant after {point}",
               interval=0.2, on_timeout=t.logs)

    check_exactly_once(s, ["R"], N_MSGS, keys=keys)
    bad = r.sql("SELECT seq, result FROM tb_0031 WHERE result IS NULL OR "
                "result NOT IN (0, 2)")
    if bad:
        raise HarnessError(f"R: rows without a processed/duplicate verdict:"
                           f" {bad[:5]}")
    w = watermark(s, "R")
    held = copies(p) if p else 0
    for n in ([r, s, p] if relay else [r, s]):
        n.stop()
    print(f"crash point {point:<26} on {crash_on}: exit {rc} at #{nth}, "
          f"restarted; {N_MSGS}/{N_MSGS} applied once, {N_MSGS} rows at "
          f"100, W={w}, relay copies {held} "
          f"({time.monotonic() - t0:.1f} s)", flush=True)


# ---- the points -------------------------------------------------------------

@test
def after_commit_receiver(t):
    crash_at(t, "after_commit", "S")


@test
def after_commit_origin(t):
    crash_at(t, "after_commit", "R")


@test
def before_send_receiver(t):
    crash_at(t, "before_send", "S")


@test
def before_send_origin(t):
    crash_at(t, "before_send", "R")


@test
def origin_before_commit(t):
    crash_at(t, "origin_before_commit", "R")


@test
def origin_after_commit(t):
    crash_at(t, "origin_after_commit", "R")


@test
def ack_before_commit(t):
    crash_at(t, "ack_before_commit", "S")


@test
def compaction_before_commit(t):
    crash_at(t, "compaction_before_commit", "S")


@test
def relay_store_before_commit(t):
    crash_at(t, "relay_store_before_commit", "P", relay=True)


@test
def relay_store_before_commit_fifth(t):
    # SEMQ_CRASH_AT=NAME:N: the fifth copy, in the same batch as the first
    # four, none of which may survive.
    crash_at(t, "relay_store_before_commit", "P", relay=True, nth=5)


@test
def relay_store_after_commit(t):
    crash_at(t, "relay_store_after_commit", "P", relay=True)


if __name__ == "__main__":
    run()
