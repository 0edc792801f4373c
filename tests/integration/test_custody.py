# SPDX-License-Identifier: MIT
"""The platform takes custody of a whole backlog (docs/PROTOCOL.md, "Custody").

Real semqd nodes on loopback around a relay P (relay_test.py's fixtures):
origins dial P and route everything through it; servers dial P and run the
journal plugin. The tests read every node's database:

  1. custody_of_a_day: S offline, three origins enqueue 20,000 documents
     each — far more than `window` (default 1,000). P takes custody of all
     60,000 (every origin row at 6 with P as its custodian, nothing left
     unsent), the origins stop; S starts: every document takes effect
     exactly once in key order and P's custody (semq_custody, tb_0031)
     returns to 0. Prints FIGURES: stored, seconds to store and to drain,
     duplicates, P's peak RSS.
  2. quota_refuses_then_flows: P's quotas (per origin 300, in all 500), two
     origins with 1,000 each and S offline: P holds exactly 500, no origin
     more than 300; the rest stays unsent at the origins with the reason in
     last_error; P logs the refusal and counts it in /metrics. S starts:
     everything flows, exactly once, nothing lost.
  3. cancel_through_relay_offline / _online / _racing: a cancel reaches the
     copy P holds (it becomes the cancel) — S offline, S online with a
     delayed message waiting at S, and a cancel racing the delivery (P's
     link to S paused by a proxy while the copy is in flight, then either
     resumed: the message took effect first; or cut: the cancel wins).
     The destination never applies a cancelled document; origin and
     destination agree.
  4. unknown_destination: P (unknown_dest_after = 2s) refuses messages for
     S9, which never connected: R puts them dead in its tb_0033 with P's
     reason (semqctl redo list), logs and counts them; P's copies go. redo
     discard cancels one; redo retry of another while S9 is still unknown
     makes it dead again; once S9 has connected, redo retry delivers it.
  5. cancels_to_a_dead_destination: 2,000 cancels for S2 (offline) wait at
     R, which has no default route, while 5,000 messages for S1 flow; then
     S2 comes and the cancels settle without effect.
  6. hundred_origins_relay_killed: 100 origins x 100 documents through P to
     S, P killed -9 mid-run; query_after is an hour, so only the
     resynchronisation at reconnect can confirm the rest: every document is
     confirmed, the time from P's restart is printed.
  7. custody_of_a_day_postgresql, quota_refuses_then_flows_postgresql,
     cancel_through_relay_offline_postgresql,
     unknown_destination_postgresql: tests 1 (3 origins x 3,000), 2, 3
     (offline) and 4 with P on PostgreSQL (a fresh database of the cluster
     $SEMQ_TEST_PG_URL; origins and servers stay on SQLite): the same
     bodies, the same assertions, P's tables read through psql (PgNode.sql)
     and P's custody also through its own `semqctl --json status`. Without
     SEMQ_TEST_PG_URL the first of them exits 77 with a loud message, as
     test_restore.py's PostgreSQL scenarios do; they run last.

Environment: SEMQ_CUSTODY_ORIGINS (default 100, 20 in a sanitizer build)
for test 6; SEMQ_CUSTODY_PER_ORIGIN (default 20000) for test 1 and
SEMQ_CUSTODY_PG_PER_ORIGIN (default 3000) for its PostgreSQL variant;
SEMQ_TEST_PG_URL for 7.

Run by ctest as integration_custody, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_custody.py [NAME]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relaytest import (FAST, PAYLOAD, READY_TIMEOUT,  # noqa: E402
                       SHORT_TIMEOUT, copies, duplicate_journal_rows,
                       enqueue_bulk, link_ready, make_relay, out_counts,
                       out_row, relay_section, wait_confirmed,
                       wait_relay_empty, wait_row, with_admin)
from semqtest import (HarnessError, Pending, admin_metric,  # noqa: E402
                      check_exactly_once, connect, run, test, wait_until)
from pgharness import Pg, db_name_for  # noqa: E402

SANITIZED = os.environ.get("SEMQ_SANITIZED") == "1"
PER_ORIGIN = int(os.environ.get("SEMQ_CUSTODY_PER_ORIGIN") or "20000")
PG_PER_ORIGIN = int(os.environ.get("SEMQ_CUSTODY_PG_PER_ORIGIN") or "3000")
N_ORIGINS = int(os.environ.get("SEMQ_CUSTODY_ORIGINS") or
                ("20" if SANITIZED else "100"))
DAY_TIMEOUT = 600.0  # the 60,000-document run, stored or drained


def custody(p):
    """P's semq_custody: (messages, bytes) of every origin together (the
    same SQL on SQLite and, through psql, on PostgreSQL)."""
    return tuple(p.sql("SELECT coalesce(sum(messages), 0), "
                       "coalesce(sum(bytes), 0) FROM semq_custody")[0])


def custody_ctl(p):
    """P's custody as its own `semqctl --json status` reports it (either
    back end): (messages, bytes) of custody.held together."""
    held = p.semqctl_json("status")["custody"]["held"]
    return (sum(h["messages"] for h in held), sum(h["bytes"] for h in held))


# ---- P's store -------------------------------------------------------------------

def pg_database(t, tag):
    """A fresh PostgreSQL database for this scenario (dropped when the
    scenario passed); exits 77 with a loud message without a cluster (the
    convention of test_restore.py)."""
    url = os.environ.get("SEMQ_TEST_PG_URL", "").strip()
    if not url:
        bar = "!" * 72
        print(f"{bar}\n!! SKIPPED: {t.name}: SEMQ_TEST_PG_URL is not set "
              f"(tools/test.sh starts a cluster)\n{bar}", flush=True)
        sys.exit(77)
    base = Pg(url)
    return base.create_database(db_name_for(tag))


def p_store(t, store):
    """P's database for `store`: None (SQLite, P's own file) or a fresh
    PostgreSQL database (make_relay's p_pg)."""
    if store == "sqlite":
        return None
    if store != "postgresql":
        raise HarnessError(f"store {store!r}: sqlite or postgresql")
    return pg_database(t, t.name[:40])


def done_with(p, pg):
    """The scenario passed: P stops cleanly (exit 0 after SIGTERM) and its
    PostgreSQL database, if any, is dropped."""
    p.stop()
    if pg is not None:
        Pg(os.environ["SEMQ_TEST_PG_URL"]).drop_database(pg.name)


def peak_rss_kib(node):
    """The peak resident set (VmHWM) of node's semqd, in KiB."""
    with open(f"/proc/{node.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise HarnessError(f"{node.id}: no VmHWM in /proc/{node.pid}/status")


def all_in_custody(t, p, origins, dest, n, timeout):
    """Every origin row to dest at 6 with P as its custodian, and P holding
    them all unsent."""
    def done():
        got = {}
        for r in origins:
            rows = dict(((st, cu), k) for st, cu, k in r.sql(
                "SELECT status, custodian, count(*) FROM tb_0031 "
                "WHERE dest = ? GROUP BY 1, 2", (dest,)))
            got[r.id] = (rows, out_counts(p, r.id, dest))
        ok = all(o == {(6, "P"): n} and c == {0: n}
                 for o, c in got.values())
        return ok or Pending(f"(origin rows by status and custodian, P's "
                             f"copies by status): {got}")
    wait_until(done, timeout, f"P holding all {n} of each of "
               f"{[r.id for r in origins]}", interval=0.5,
               on_timeout=t.logs)


# ---- 1. a day's backlog in custody -------------------------------------------

def custody_run(t, n, store):
    """Test 1 with n documents per origin, P on `store`."""
    nkeys = 200
    names = ["R1", "R2", "R3"]
    pg = p_store(t, store)
    p, rs, (s,), _ = make_relay(t, names, ["S"], p_pg=pg)
    with_admin(rs[0])
    p.start(timeout=READY_TIMEOUT)
    for r in rs:
        r.start(timeout=READY_TIMEOUT)
    t0 = time.monotonic()
    keys = {}
    for r in rs:
        keys.update(enqueue_bulk(r, "S", n, nkeys, payload=PAYLOAD * 2))
    all_in_custody(t, p, rs, "S", n, DAY_TIMEOUT)
    store_s = time.monotonic() - t0
    held = custody(p)
    assert held == (3 * n, 3 * n * 2 * len(PAYLOAD)), held
    assert custody_ctl(p) == held, (custody_ctl(p), held)
    assert copies(p) == 3 * n
    # Each origin sees where its messages wait: semqctl status, /metrics.
    for r in rs:
        waiting = r.semqctl_json("status")["custody"]["waiting"]
        assert [(w["dest"], w["relay"], w["messages"]) for w in waiting] \
            == [("S", "P", n)], waiting
    metric = admin_metric(rs[0], "semq_outbound_in_custody",
                          dest="S", relay="P")
    assert metric == n, metric
    for r in rs:
        r.stop()

    t1 = time.monotonic()
    s.start(timeout=READY_TIMEOUT)
    s.wait_journal_count(3 * n, timeout=DAY_TIMEOUT)
    drain_s = time.monotonic() - t1
    got = check_exactly_once(s, names, n, keys=keys)
    assert got["total"] == 3 * n, got
    dups = duplicate_journal_rows(s)
    assert dups == 0
    wait_relay_empty(t, p, timeout=120)
    assert custody(p) == (0, 0), custody(p)
    assert custody_ctl(p) == (0, 0), custody_ctl(p)
    rss = peak_rss_kib(p)
    # The origins learn the outcome when they come back.
    for r in rs:
        r.start(timeout=READY_TIMEOUT)
    for r in rs:
        wait_confirmed(t, r, "S", n, timeout=DAY_TIMEOUT)
    print(f"FIGURES: custody store={store} origins=3 per_origin={n} "
          f"stored={3 * n} window=1000 payload={2 * len(PAYLOAD)}B "
          f"store_seconds={store_s:.1f} drain_seconds={drain_s:.1f} "
          f"drain_msgs_per_s={3 * n / max(drain_s, 1e-3):.0f} "
          f"duplicates={dups} p_peak_rss_mib={rss / 1024:.1f}",
          flush=True)
    for x in rs + [s]:
        x.stop()
    done_with(p, pg)


@test(timeout=900)
def custody_of_a_day(t):
    custody_run(t, PER_ORIGIN, "sqlite")


# ---- 2. quotas ------------------------------------------------------------------

def quota_run(t, store):
    n = 1000
    pg = p_store(t, store)
    p, (r1, r2), (s,), _ = make_relay(
        t, ["R1", "R2"], ["S"], origin_options={"reconnect_max": "500ms"},
        p_pg=pg)
    relay_section(with_admin(p), quota_messages_per_origin=300,
                  quota_messages=500)
    p.start(timeout=READY_TIMEOUT)
    r1.start(timeout=READY_TIMEOUT)
    r2.start(timeout=READY_TIMEOUT)
    keys = enqueue_bulk(r1, "S", n, 20)
    keys.update(enqueue_bulk(r2, "S", n, 20))

    def full():
        per = dict(p.sql("SELECT origin, messages FROM semq_custody"))
        refused = [r.sql("SELECT count(*) FROM tb_0031 WHERE status IN "
                         "(0, 4) AND last_error LIKE '%custody quota%'")
                   [0][0]
                   for r in (r1, r2)]
        ok = sum(per.values()) == 500 and all(refused)
        return ok or Pending(f"P holds {per}, rows refused at the "
                             f"origins {refused}")
    wait_until(full, SHORT_TIMEOUT, "P full at 500 and both origins told",
               interval=0.2, on_timeout=t.logs)
    per = dict(p.sql("SELECT origin, messages FROM semq_custody"))
    assert max(per.values()) <= 300, per
    # (unsent, or sent again meanwhile: last_error stays until the next
    # answer)
    err = r1.sql("SELECT last_error FROM tb_0031 WHERE status IN (0, 4) "
                 "AND last_error IS NOT NULL LIMIT 1")[0][0]
    assert "relay P: custody quota full" in err, err
    assert "custody of" in p.log_text() and "refused" in p.log_text()
    refused = admin_metric(p, "semq_relay_refused_total", reason="quota")
    assert refused and refused > 0, refused
    # The rest waits at the origins (unsent, or sent and about to be
    # refused again): nothing is lost, nothing piles up at P.
    by = [out_counts(r, r.id, "S") for r in (r1, r2)]
    held = sum(c.get(6, 0) for c in by)
    waiting = sum(c.get(0, 0) + c.get(4, 0) for c in by)
    assert (held, waiting) == (500, 2 * n - 500), by

    s.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r1, "S", n, timeout=120)
    wait_confirmed(t, r2, "S", n, timeout=120)
    got = check_exactly_once(s, ["R1", "R2"], n, keys=keys)
    assert got["total"] == 2 * n, got
    wait_relay_empty(t, p)
    print(f"FIGURES: quota store={store} per_origin=300 total=500 "
          f"sent={2 * n} refused_at_relay={refused:.0f} "
          f"held_at_peak={sum(per.values())}", flush=True)
    for x in (r1, r2, s):
        x.stop()
    done_with(p, pg)


@test(timeout=300)
def quota_refuses_then_flows(t):
    quota_run(t, "sqlite")


# ---- 3. cancel through the relay ------------------------------------------------

def cancel(r, dest, seq):
    rc, _, err = r.semqctl("outbound", "cancel", f"{r.id}/{dest}/{seq}")
    assert rc == 0, err


def copy_row(p, origin, dest, seq):
    rows = p.sql("SELECT status, length(payload) FROM tb_0031 WHERE "
                 "origin = ? AND dest = ? AND seq = ?", (origin, dest, seq))
    return rows[0] if rows else None


def cancel_offline_run(t, store):
    pg = p_store(t, store)
    p, (r,), (s,), _ = make_relay(t, ["R"], ["S"], p_pg=pg)
    p.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    for i in range(5):
        r.enqueue("S", key="K", payload=b"doc %d" % (i + 1))
    wait_until(lambda: out_counts(r, "R", "S") == {6: 5} or Pending(
        out_counts(r, "R", "S")), SHORT_TIMEOUT, "P holding 5",
        on_timeout=t.logs)
    cancel(r, "S", 3)
    wait_until(lambda: copy_row(p, "R", "S", 3) == (-2, 0) or Pending(
        copy_row(p, "R", "S", 3)), SHORT_TIMEOUT,
        "P's copy of R/S/3 replaced by the cancel", on_timeout=t.logs)
    s.start(timeout=READY_TIMEOUT)
    wait_row(t, r, "S", 3, "cancelled with result 4",
             lambda row: row[0] == -2 and row[1] == 4)
    for seq in (1, 2, 4, 5):
        wait_row(t, r, "S", seq, "confirmed, processed",
                 lambda row: row[0] == 100 and row[1] == 0)
    check_exactly_once(s, ["R"], 5, cancelled=[("R", 3)])
    got = s.sql("SELECT result FROM tb_0030 WHERE origin = 'R' AND seq = 3")
    assert got == [(4,)], f"S's record of R/S/3: {got}"
    wait_relay_empty(t, p)
    done_with(p, pg)


@test(timeout=180)
def cancel_through_relay_offline(t):
    cancel_offline_run(t, "sqlite")


@test(timeout=180)
def cancel_through_relay_online(t):
    """S online: a cancel made before the message left R goes through P to
    S, which records it without effect; the key's next message follows."""
    p, (r,), (s,), _ = make_relay(t, ["R"], ["S"])
    r.start(timeout=READY_TIMEOUT)  # creates R's database
    r.stop()
    r.enqueue("S", key="K", payload=b"cancelled before it left")
    r.enqueue("S", key="K", payload=b"the next of K")
    cancel(r, "S", 1)
    for x in (p, s, r):
        x.start(timeout=READY_TIMEOUT)
    wait_row(t, r, "S", 1, "cancelled with result 4",
             lambda row: row[0] == -2 and row[1] == 4)
    wait_row(t, r, "S", 2, "confirmed, processed",
             lambda row: row[0] == 100 and row[1] == 0)
    got = s.sql("SELECT seq, result FROM tb_0030 WHERE origin = 'R' "
                "ORDER BY seq")
    assert got == [(1, 4), (2, 0)], f"S's records of R: {got}"
    check_exactly_once(s, ["R"], 2, cancelled=[("R", 1)])
    wait_relay_empty(t, p)


@test(timeout=180)
def cancel_racing_delivery(t):
    """P's link to S runs through a proxy. While it holds, P passes R's
    document on into it (R hears FORWARDED), then the operator cancels.
    Released: S gets the document before the cancel (same link, in order):
    it took effect, and R says so. Cut: the document is lost on the way;
    the cancel gets through later: it never takes effect. Each outcome is
    certain, not left to timing."""
    certs = t.certs(["P", "R", "S"])
    p = t.node("P", certs, relay=True, store_and_forward=True,
               journal=False, node_options=FAST)
    s = t.node("S", certs, node_options=FAST, routes={"default": "P"})
    proxy = t.proxy(s.listen_port)
    p.add_peer("S", connect=proxy.addr, trusted_relay=True)
    s.add_peer("P", trusted_relay=True)
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST,
               routes={"default": "P"})
    connect(r, p, dialer_trusts=True)
    for x in (p, s, r):
        x.start(timeout=READY_TIMEOUT)
    outcomes = {}
    for seq, end in ((1, "release"), (2, "cut")):
        # P's link to S up (past the handshake), so that P passes R's
        # document on instead of keeping it
        wait_until(lambda: link_ready(p, "S") or Pending("not ready"),
                   SHORT_TIMEOUT, "P's link to S ready", on_timeout=t.logs)
        proxy.hold()
        r.enqueue("S", key=f"race{seq}", payload=b"racing %d" % seq)
        wait_row(t, r, "S", seq, "passed on by P (FORWARDED)",
                 lambda row: row[0] == 6)
        assert r.sql("SELECT custodian FROM tb_0031 WHERE seq = ?",
                     (seq,)) == [(None,)], "P kept it instead"
        cancel(r, "S", seq)
        if end == "cut":
            proxy.cut()
        proxy.release()
        row = wait_row(t, r, "S", seq, "settled",
                       lambda row: row[1] is not None and row[0] in (100, -2))
        applied = [x for x in s.journal_rows() if x["seq"] == seq]
        recorded = s.sql("SELECT result FROM tb_0030 WHERE origin = 'R' "
                         "AND seq = ?", (seq,))
        outcomes[end] = (row[0], row[1], len(applied), recorded)
    assert outcomes["release"] == (100, 0, 1, [(0,)]), outcomes
    assert outcomes["cut"] == (-2, 4, 0, [(4,)]), outcomes
    wait_relay_empty(t, p)
    print(f"FIGURES: cancel racing delivery outcomes (status, result, "
          f"journal rows, S's record)={outcomes}", flush=True)


# ---- 4. a destination nobody has ---------------------------------------------

def unknown_destination_run(t, store):
    pg = p_store(t, store)
    p, (r,), _, _ = make_relay(t, ["R"], [], extra_certs=["S9"], p_pg=pg)
    with_admin(r)
    relay_section(p, unknown_dest_after="2s")
    p.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    for i in range(3):
        r.enqueue("S9", key=f"k{i}", payload=b"for nobody %d" % i)

    def dead():
        rows = r.sql("SELECT seq, status, last_error FROM tb_0033 WHERE "
                     "origin = 'R' AND dest = 'S9' ORDER BY seq")
        return (len(rows) == 3 and all(x[1] == -1 for x in rows) and
                rows) or Pending(f"R's tb_0033: {rows}")
    rows = wait_until(dead, SHORT_TIMEOUT, "R: three dead entries for S9",
                      on_timeout=t.logs)
    assert all("does not know S9" in x[2] for x in rows), rows
    held = r.sql("SELECT status, result FROM tb_0031 WHERE dest = 'S9'")
    assert held == [(8, 8)] * 3, held
    listed = r.semqctl_json("redo", "list", "--status", "dead")
    assert len(listed) == 3 and all(e["dest"] == "S9" for e in listed), \
        listed
    assert "undeliverable" in r.log_text()
    assert "held as undeliverable" in p.log_text() or \
        "refused as undeliverable" in p.log_text()
    assert admin_metric(r, "semq_messages_undeliverable_total") == 3
    wait_relay_empty(t, p)  # R took them back: P holds nothing

    # discard: cancelled, for good
    ids = {x[0]: e["id"] for x in rows for e in listed
           if e["seq"] == x[0]}
    rc, _, err = r.semqctl("redo", "discard", str(ids[1]), "--reason",
                           "typo")
    assert rc == 0, err
    assert out_row(r, "S9", 1)[:2] == (-2, 4), out_row(r, "S9", 1)
    # retry while S9 is still unknown: dead again
    rc, _, err = r.semqctl("redo", "retry", str(ids[2]))
    assert rc == 0, err
    wait_until(lambda: r.sql("SELECT status, tries FROM tb_0033 WHERE "
                             "id = ?", (ids[2],)) == [(-1, 1)] or Pending(
        r.sql("SELECT status, tries FROM tb_0033 WHERE id = ?", (ids[2],))),
        SHORT_TIMEOUT, "R/S9/2 dead again", on_timeout=t.logs)

    # S9 turns up: a retry delivers
    certs = p.certs
    s9 = t.node("S9", certs, listen=False, routes={"default": "P"})
    connect(s9, p, dialer_trusts=True)
    s9.start(timeout=READY_TIMEOUT)
    wait_until(lambda: p.sql("SELECT count(*) FROM semq_dest WHERE dest = "
                             "'S9' AND seen_at IS NOT NULL")[0][0] == 1,
               SHORT_TIMEOUT, "P: S9 known", on_timeout=t.logs)
    rc, _, err = r.semqctl("redo", "retry", str(ids[3]))
    assert rc == 0, err
    wait_row(t, r, "S9", 3, "delivered", lambda row: row[0] == 100)
    assert [x["seq"] for x in s9.journal_rows()] == [3]
    done_with(p, pg)


@test(timeout=180)
def unknown_destination(t):
    unknown_destination_run(t, "sqlite")


# ---- 5. cancels for a dead destination hold nothing up ---------------------

@test(timeout=300)
def cancels_to_a_dead_destination(t):
    certs = t.certs(["R", "S1", "S2"])
    s1 = t.node("S1", certs, node_options=FAST)
    s2 = t.node("S2", certs, node_options=FAST)
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST)
    connect(r, s1)
    connect(r, s2)
    s1.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    enqueue_bulk(r, "S2", 2000, 50)
    c = r.connect_db(readonly=False)
    with c:
        c.execute("UPDATE tb_0031 SET status = -2, next_attempt_at = 0 "
                  "WHERE dest = 'S2'")
    c.close()
    t0 = time.monotonic()
    keys = enqueue_bulk(r, "S1", 5000, 50)
    wait_confirmed(t, r, "S1", 5000, timeout=120)
    secs = time.monotonic() - t0
    check_exactly_once(s1, ["R"], 5000, keys=keys)
    left = out_counts(r, "R", "S2")
    assert left == {-2: 2000}, left
    s2.start(timeout=READY_TIMEOUT)
    wait_until(lambda: r.sql("SELECT count(*) FROM tb_0031 WHERE dest = "
                             "'S2' AND result = 4")[0][0] == 2000,
               120, "R: the 2000 cancels recorded at S2", on_timeout=t.logs)
    assert s2.journal_count() == 0
    print(f"FIGURES: cancels_pending=2000 to a dead destination; S1 got "
          f"5000 in {secs:.1f} s ({5000 / max(secs, 1e-3):.0f} msgs/s)",
          flush=True)


# ---- 6. a hundred shops, the platform killed -----------------------------------

@test(timeout=900)
def hundred_origins_relay_killed(t):
    k, n = N_ORIGINS, 100
    names = [f"R{i:03d}" for i in range(k)]
    slow_timers = {"query_after": "1h"}
    # Each origin sends its 100 over about 4 s, so that P dies with
    # documents of every origin on the way.
    p, rs, (s,), _ = make_relay(t, names, ["S"], p_options=slow_timers,
                                origin_options=dict(slow_timers,
                                                    drain_rate=25),
                                server_options=slow_timers)
    p.start(timeout=READY_TIMEOUT)
    s.start(timeout=READY_TIMEOUT)
    for r in rs:
        r.start(wait=False)
    for r in rs:
        r.wait_ready(timeout=120)
    for r in rs:
        enqueue_bulk(r, "S", n, 10)

    def some_delivered():
        got = s.journal_count()
        return got >= k * n // 4 or Pending(f"{got} applied")
    wait_until(some_delivered, 300, "a quarter applied", interval=0.2,
               on_timeout=t.logs)
    p.kill()
    at_kill = s.journal_count()
    in_flight = sum(r.sql("SELECT count(*) FROM tb_0031 WHERE status IN "
                          "(4, 6)")[0][0] for r in rs)
    p.start(timeout=READY_TIMEOUT)
    t0 = time.monotonic()

    def all_confirmed():
        left = sum(r.sql("SELECT count(*) FROM tb_0031 WHERE status <> "
                         "100")[0][0] for r in rs)
        return left == 0 or Pending(f"{left} unconfirmed")
    wait_until(all_confirmed, 600, "every document confirmed", interval=0.5,
               on_timeout=t.logs)
    secs = time.monotonic() - t0
    got = check_exactly_once(s, names, n)
    assert got["total"] == k * n
    print(f"FIGURES: origins={k} per_origin={n} applied_at_kill={at_kill} "
          f"unconfirmed_in_flight_at_kill={in_flight} "
          f"confirmed_all_seconds_after_restart={secs:.1f} "
          f"query_after=1h", flush=True)


# ---- 7. P on PostgreSQL (last: without a cluster they exit 77) ---------------

@test(timeout=900)
def custody_of_a_day_postgresql(t):
    custody_run(t, PG_PER_ORIGIN, "postgresql")


@test(timeout=300)
def quota_refuses_then_flows_postgresql(t):
    quota_run(t, "postgresql")


@test(timeout=180)
def cancel_through_relay_offline_postgresql(t):
    cancel_offline_run(t, "postgresql")


@test(timeout=180)
def unknown_destination_postgresql(t):
    unknown_destination_run(t, "postgresql")


if __name__ == "__main__":
    run()
