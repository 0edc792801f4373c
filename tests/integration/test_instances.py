# SPDX-License-Identifier: MIT
"""Several semqd instances of one destination behind a relay (SPEC §11).

R1, R2 -> P1 -> {S1 instance A, S1 instance B}: two semqd processes serve
the node id S1 over one database (here a SQLite file in WAL mode, which
serialises their writers; across hosts it would be PostgreSQL), each with
its own `[node] instance`, listen and admin port, both dialling P1. P1 keeps
one connection per (peer, instance) and spreads the streams (origin, dest)
to S1 over the connected instances by a rendezvous hash of the stream and
the instance names (node/job.c routes_pick, mirrored by semqtest's
stream_instance), so every frame of one stream goes to one instance.

The instance names are chosen so that the two streams (R1, S1) and (R2, S1)
hash to different instances; the tests then know which instance must apply
which stream.

  1. spread: 1,000 messages from each of R1 and R2 over 50 keys each: every
     message takes effect exactly once (the journal in the shared database),
     key order kept, every origin row at 100, P1 holds no copy; each
     instance recorded exactly the 1,000 messages of the stream the hash
     gives it (semq_messages_received_total of its /metrics) and nothing of
     the other. A third process claiming instance A of the same database is
     refused at start ("... as instance 'A'").
  2. kill: the same load, sent at a bounded rate; the instance carrying
     R1's stream is killed -9 mid-run: its stream moves to the other
     instance, and still every message takes effect exactly once, in key
     order, every origin row ends at 100, nothing is lost; the survivor
     recorded its own stream and the rest of R1's, and the two instances'
     counts never add up to more than the messages sent. The killed instance
     restarts: R1's stream returns to it (200 more messages each: it records
     exactly R1's 200), still exactly once.

Prints FIGURES lines (messages, seconds, per-instance counts).

Run by ctest as integration_instances, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_instances.py [NAME]
"""

import itertools
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (HarnessError, InstanceNode, Pending,  # noqa: E402
                      admin_metric, check_exactly_once, connect,
                      instance_node, run, stream_instance, test, wait_until)

N_PER_ORIGIN = 1000
N_MORE = 200  # test 2, after the killed instance restarted
N_KEYS = 50
PAYLOAD = bytes(range(64))
ORIGINS = ("R1", "R2")

# Fast timers: short poll, quick in-doubt queries, quick reconnects.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}
# Test 2: each origin sends no faster than this (a token bucket), so the
# sending lasts ~2.5 s and the kill lands while messages are in flight.
KILL_RATE = 400

BULK_TIMEOUT = 180.0
READY_TIMEOUT = 30.0


def pick_names():
    """Two instance names under which the streams of R1 and R2 to S1 go to
    different instances (as P1 will hash them), R1's first."""
    cands = [f"s1-{c}" for c in "abcdefghijklmnop"]
    for x, y in itertools.combinations(cands, 2):
        a = stream_instance("R1", "S1", [x, y])
        b = stream_instance("R2", "S1", [x, y])
        if a != b:
            return a, b
    raise HarnessError("no pair of instance names splits the two streams")


def topology(t):
    """P1 (relay, store and forward, admin), R1 and R2 (dial P1, trust it,
    route default = P1, no plugin), and the S1 instances A (the one R1's
    stream hashes to) and B (R2's), each with its own listen and admin
    port, dialling P1, sharing S1's database; nothing started."""
    name_a, name_b = pick_names()
    certs = t.certs(["P1", "R1", "R2", "S1"])
    p1 = t.node("P1", certs, relay=True, store_and_forward=True,
                journal=False, admin=True, node_options=dict(FAST))
    rs = []
    for o in ORIGINS:
        r = t.node(o, certs, listen=False, journal=False,
                   node_options=dict(FAST), routes={"default": "P1"})
        connect(r, p1, dialer_trusts=True)
        rs.append(r)
    insts = []
    for name in (name_a, name_b):
        s = instance_node(t, "S1", name, certs, listen=True, admin=True,
                          node_options=dict(FAST), routes={"default": "P1"})
        connect(s, p1, dialer_trusts=True)
        insts.append(s)
    if insts[0].db != insts[1].db:
        raise HarnessError("the two S1 instances do not share a database")
    return p1, rs, insts


def ready_conns(node, peer):
    """How many connections of `peer` node's /peers shows ready."""
    status, body = node.admin_get("/peers")
    if status != 200:
        raise HarnessError(f"{node.id}: /peers answered {status}")
    return sum(1 for p in json.loads(body)["peers"]
               if p.get("peer") == peer and p.get("state") == "ready")


def wait_instances_up(t, p1, n):
    wait_until(lambda: ready_conns(p1, "S1") == n or
               Pending(f"{ready_conns(p1, 'S1')} ready"), READY_TIMEOUT,
               f"P1: {n} ready connections of S1", interval=0.1,
               on_timeout=t.logs)


def start_all(t, p1, rs, insts):
    """P1, then the instances one after the other (the first migrates the
    shared database), then the origins once P1 has both instances ready."""
    p1.start()
    for s in insts:
        s.start(timeout=READY_TIMEOUT)
    wait_instances_up(t, p1, len(insts))
    for r in rs:
        r.start(timeout=READY_TIMEOUT)
    for r in rs:
        wait_until(lambda r=r: ready_conns(p1, r.id) == 1, READY_TIMEOUT,
                   f"P1: {r.id} ready", interval=0.1, on_timeout=t.logs)


def enqueue(r, n, first=0):
    """The application's side: n messages to S1, key i % N_KEYS, in one
    transaction. Returns {(origin, seq): key}."""
    rows = [("S1", 1, f"{r.id}-key{i % N_KEYS:02d}", PAYLOAD)
            for i in range(first, first + n)]
    c = r.connect_db(readonly=False)
    try:
        with c:
            c.executemany("INSERT INTO tb_0031(dest, type, msg_key, payload)"
                          " VALUES (?, ?, ?, ?)", rows)
        r.wait_numbered()
        sent = c.execute("SELECT seq, msg_key FROM tb_0031 WHERE origin = ? "
                         "AND dest = 'S1' ORDER BY seq", (r.id,)).fetchall()
    finally:
        c.close()
    if len(sent) != first + n or sent[-1][0] != first + n:
        raise HarnessError(f"{r.id}: rows numbered {sent[:2]}...{sent[-2:]}"
                           f", not 1..{first + n}")
    return {(r.id, s): k for s, k in sent}


def wait_confirmed(t, r, n):
    def done():
        c = r.outbound_status_counts("S1")
        return c == {100: n} or Pending(f"status counts {c}")
    wait_until(done, BULK_TIMEOUT, f"{r.id}: all {n} rows to S1 at 100",
               interval=0.2, on_timeout=t.logs)


def received(s):
    return int(admin_metric(s, "semq_messages_received_total"))


def relay_copies(p1):
    return p1.sql("SELECT count(*) FROM tb_0031")[0][0]


def check_settled(t, p1, s, rs, n):
    """Exactly once and key order over the shared journal; every origin row
    at 100 (waited for by the caller); no copy at P1; nothing in redo."""
    keys = {}
    for r in rs:
        rows = r.sql("SELECT seq, msg_key FROM tb_0031 WHERE origin = ? AND "
                     "dest = 'S1'", (r.id,))
        keys.update({(r.id, seq): k for seq, k in rows})
    res = check_exactly_once(s, ORIGINS, n, keys=keys)
    if res["total"] != n * len(ORIGINS):
        raise HarnessError(f"journal: {res}")
    wait_until(lambda: relay_copies(p1) == 0 or
               Pending(f"{relay_copies(p1)} rows"), 30.0,
               "P1: no store-and-forward copy left", on_timeout=t.logs)
    redo = s.redo_status_counts()
    if redo:
        raise HarnessError(f"S1: tb_0033 should be empty, has {redo}")
    return res


@test(timeout=300)
def spread(t):
    p1, rs, (a, b) = topology(t)
    start_all(t, p1, rs, (a, b))
    t0 = time.monotonic()
    for r in rs:
        enqueue(r, N_PER_ORIGIN)
    for r in rs:
        wait_confirmed(t, r, N_PER_ORIGIN)
    dt = time.monotonic() - t0
    res = check_settled(t, p1, a, rs, N_PER_ORIGIN)
    # Each instance applied exactly its stream: R1's on A, R2's on B.
    got = {a.instance: received(a), b.instance: received(b)}
    want = {a.instance: N_PER_ORIGIN, b.instance: N_PER_ORIGIN}
    if got != want:
        raise HarnessError(f"received per instance {got}, want {want} "
                           f"(R1 -> {a.instance}, R2 -> {b.instance})")
    print(f"FIGURES spread: {res['total']} messages, {res['keys']} keys, "
          f"{dt:.1f} s; per instance {got}", flush=True)

    # A second process as instance A on the same database is refused.
    dup = InstanceNode("S1", a.instance, t.path("dup"), a.certs, db=a.db,
                       listen=True, node_options=dict(FAST),
                       routes={"default": "P1"})
    dup.add_peer("P1", connect=p1.listen, trusted_relay=True)
    t.nodes.append(dup)
    dup.start(wait=False)
    wait_until(lambda: not dup.alive(), 30.0, "the duplicate instance exits",
               on_timeout=dup.log_tail)
    rc = dup.stop(check=False)
    want = (f"another semqd is already serving this database as instance "
            f"'{a.instance}'")
    if rc != 1 or want not in dup.log_text():
        raise HarnessError(f"a duplicate instance exited {rc}; log:\n"
                           f"{dup.log_tail()}")
    for n in rs + [a, b, p1]:
        n.stop()


@test(timeout=400)
def kill(t):
    p1, rs, (a, b) = topology(t)
    for r in rs:
        r.node_options["drain_rate"] = KILL_RATE
    start_all(t, p1, rs, (a, b))
    t0 = time.monotonic()
    for r in rs:
        enqueue(r, N_PER_ORIGIN)
    # Kill A (R1's instance) while its stream is half done.
    wait_until(lambda: (received(a) >= N_PER_ORIGIN // 4) or
               Pending(f"A received {received(a)}"), 60.0,
               "A has a quarter of R1's stream", interval=0.02,
               on_timeout=t.logs)
    a_before = received(a)
    a.kill()
    t_kill = time.monotonic() - t0
    r1_done = rs[0].outbound_status_counts("S1").get(100, 0)
    if r1_done >= N_PER_ORIGIN:
        raise HarnessError("R1's stream finished before the kill: the run "
                           "proves nothing")
    wait_instances_up(t, p1, 1)
    for r in rs:
        wait_confirmed(t, r, N_PER_ORIGIN)
    dt = time.monotonic() - t0
    res = check_settled(t, p1, b, rs, N_PER_ORIGIN)
    b_got = received(b)
    # B applied its own stream and took over the rest of R1's; A's
    # committed receipts and B's never add up to more than was sent.
    if not N_PER_ORIGIN < b_got or b_got + a_before > 2 * N_PER_ORIGIN:
        raise HarnessError(f"B received {b_got}, A {a_before} before the "
                           f"kill: not a take-over of R1's stream")
    print(f"FIGURES kill: {res['total']} messages exactly once, A killed "
          f"at {t_kill:.1f} s with {a_before} recorded (R1 had {r1_done} "
          f"confirmed), B recorded {b_got}, all confirmed after {dt:.1f} s",
          flush=True)

    # A restarts: R1's stream returns to it.
    a.start(timeout=READY_TIMEOUT)
    wait_instances_up(t, p1, 2)
    b_base = received(b)
    for r in rs:
        enqueue(r, N_MORE, first=N_PER_ORIGIN)
    for r in rs:
        wait_confirmed(t, r, N_PER_ORIGIN + N_MORE)
    check_settled(t, p1, a, rs, N_PER_ORIGIN + N_MORE)
    got = {"A": received(a), "B": received(b) - b_base}
    if got != {"A": N_MORE, "B": N_MORE}:
        raise HarnessError(f"after A's restart received {got}, want "
                           f"{N_MORE} each (R1 -> A, R2 -> B)")
    print(f"FIGURES restart: {N_MORE} more per origin, per instance {got}",
          flush=True)
    for n in rs + [a, b, p1]:
        n.stop()


if __name__ == "__main__":
    run()
