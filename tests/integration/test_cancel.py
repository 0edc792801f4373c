# SPDX-License-Identifier: MIT
"""Cancelling a message end to end, with tombstones (SPEC §6 "Cancelling").

An origin R dials a receiver S that runs the journal plugin; the operator
cancels with `semqctl outbound cancel`, and the tests read both databases:

  1. S is down; R queues three messages with one key K and seq 2 is
     cancelled. When S comes up, seqs 1 and 3 take effect (the journal holds
     exactly those two, in order) and seq 2 never does: R's row 2 ends
     cancelled (-2) with result 4, rows 1 and 3 confirmed (100) with result
     0, and S's watermark passes the tombstone (confirmed_through 3).
  2. Cancelling a confirmed message is refused with exit 1 and changes
     nothing; cancelling a cancelled one is a no-op (exit 0).
  3. A cancel that races the delivery (queued and cancelled at once while S
     is up, many times over, at varied delays): every message ends in one
     of the two consistent outcomes, within a bounded wait — in S's journal
     (once) and confirmed at R with result 0, or absent from the journal and
     cancelled at R with result 4. Never both, never a row left unresolved.

Run by ctest as integration_cancel, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_cancel.py [NAME]
"""

import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (HarnessError, Pending, check_exactly_once,  # noqa: E402
                      connect, msg_id, run, test, wait_until)

# Fast timers: short poll, quick in-doubt queries and tombstone resends,
# quick reconnects.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "500ms"}
QUERY_AFTER_MS = 2000  # FAST's query_after
SETTLE_TIMEOUT = 30.0  # a handful of messages reach their final state
READY_TIMEOUT = 30.0
RACE_ROUNDS = 24


def make_pair(t):
    """R (origin, no plugin, dials S) and S (journal plugin, listens)."""
    certs = t.certs(["R", "S"])
    s = t.node("S", certs, node_options=FAST)
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST)
    connect(r, s)
    return r, s


def out_row(r, dest, seq):
    """R's tb_0031 row as a dict, or None."""
    cols = ("status", "result", "attempts", "acked_at", "next_attempt_at")
    rows = r.sql(f"SELECT {', '.join(cols)} FROM tb_0031 WHERE origin = ? "
                 "AND dest = ? AND seq = ?", (r.id, dest, seq))
    return dict(zip(cols, rows[0])) if rows else None


def journal_seqs(s, origin):
    """The seqs of origin's messages in S's journal, in journal order."""
    if not s.has_table("journal"):
        return []
    return [q for (q,) in s.sql("SELECT seq FROM journal WHERE origin = ? "
                                "AND dest = ? ORDER BY id", (origin, s.id))]


def watermark(s, origin):
    rows = s.sql("SELECT confirmed_through FROM semq_stream_in WHERE "
                 "origin = ? AND dest = ?", (origin, s.id))
    return rows[0][0] if rows else 0


def wait_settled(t, r, dest, seqs, timeout=SETTLE_TIMEOUT):
    """Waits until each of R's rows `seqs` to dest has a verdict (result set)
    and is no longer in flight: 100, or -2 with its tombstone answered.
    Returns {seq: row}."""
    def done():
        rows = {q: out_row(r, dest, q) for q in seqs}
        open_ = {q: (w["status"], w["result"]) for q, w in rows.items()
                 if w is None or w["result"] is None or
                 w["status"] not in (100, -2)}
        return rows if not open_ else Pending(f"unsettled {open_}")
    return wait_until(done, timeout, f"{r.id}: rows {seqs} to {dest} "
                      "settled (result set)", interval=0.1,
                      on_timeout=t.logs)


def cancel(r, dest, seq, *extra):
    """semqctl outbound cancel R/DEST/SEQ; returns (rc, out, err)."""
    return r.semqctl("outbound", "cancel", msg_id(r.id, dest, seq), *extra)


# ---- 1. cancel while the destination is down --------------------------------

@test(timeout=180)
def cancel_while_destination_down(t):
    r, s = make_pair(t)
    r.start(timeout=READY_TIMEOUT)  # S is not running: nothing can leave R
    ids = r.enqueue("S", type=2800, key="K", payload=b"doc", count=3)
    assert ids == [("R", "S", 1), ("R", "S", 2), ("R", "S", 3)], ids
    assert r.outbound_status_counts("S") == {0: 3}, \
        r.outbound_status_counts("S")

    rc, out, err = cancel(r, "S", 2)
    assert rc == 0 and out == "cancelled R/S/2; a tombstone will be sent\n" \
        and err == "", (rc, out, err)
    assert out_row(r, "S", 2)["status"] == -2, out_row(r, "S", 2)
    listed = r.semqctl_json("outbound", "list", "--status", "cancelled")
    assert [(x["id"], x["status"], x["result"]) for x in listed] == \
        [("R/S/2", -2, None)], listed

    s.start(timeout=READY_TIMEOUT)
    rows = wait_settled(t, r, "S", [1, 2, 3])
    assert rows[1]["status"] == 100 and rows[1]["result"] == 0, rows
    assert rows[3]["status"] == 100 and rows[3]["result"] == 0, rows
    assert rows[2]["status"] == -2 and rows[2]["result"] == 4, rows
    assert journal_seqs(s, "R") == [1, 3], journal_seqs(s, "R")
    check_exactly_once(s, ["R"], 3, keys={("R", 1): "K", ("R", 3): "K"},
                       cancelled=[("R", 2)])
    # The tombstone let the watermark pass seq 2.
    wait_until(lambda: watermark(s, "R") == 3 or
               Pending(f"confirmed_through {watermark(s, 'R')}"),
               SETTLE_TIMEOUT, "S: confirmed_through 3 for R",
               on_timeout=t.logs)
    shown = r.semqctl_json("outbound", "show", "2", "--dest", "S")
    assert shown["status_name"] == "cancelled" and \
        shown["result_name"] == "cancelled", shown
    # Nothing more happens later: a second look after a resend period, by
    # R's own clock. Seq 4 may not leave R before a resend of seq 2 would
    # be due (deliver_at past row 2's next attempt and a query_after past
    # its verdict); on the one stream, seq 4 taking effect at S means that
    # any such resend went first and reached S too.
    row2 = out_row(r, "S", 2)
    after = max(row2["next_attempt_at"] or 0,
                (row2["acked_at"] or 0) + QUERY_AFTER_MS) + 1
    r.enqueue("S", type=2800, key="L", payload=b"later", deliver_at=after)
    wait_until(lambda: journal_seqs(s, "R") == [1, 3, 4] or
               Pending(f"journal seqs {journal_seqs(s, 'R')}"),
               SETTLE_TIMEOUT, "S: seq 4, held until a resend period past "
               "seq 2's verdict, took effect", on_timeout=t.logs)
    assert out_row(r, "S", 2)["status"] == -2
    r.stop()
    s.stop()


# ---- 2. a confirmed message cannot be cancelled -----------------------------

@test(timeout=180)
def cancel_confirmed_is_refused(t):
    r, s = make_pair(t)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    r.enqueue("S", type=1, key="A", payload=b"one", count=1)
    rows = wait_settled(t, r, "S", [1])
    assert rows[1]["status"] == 100 and rows[1]["result"] == 0, rows
    before = out_row(r, "S", 1)

    rc, out, err = cancel(r, "S", 1)
    assert rc == 1 and out == "" and err == (
        "semqctl: R/S/1 is already confirmed (result processed); it cannot"
        " be cancelled\n"), (rc, out, err)
    rc, out, err = r.semqctl("--json", "outbound", "cancel", "1", "--dest",
                             "S")
    assert rc == 1 and json.loads(out) == {
        "id": "R/S/1", "cancelled": False, "status": 100,
        "already_cancelled": False, "woke_daemon": False}, (rc, out, err)
    assert out_row(r, "S", 1) == before, (out_row(r, "S", 1), before)
    assert journal_seqs(s, "R") == [1]

    # A cancelled message: cancelling again changes nothing.
    r.enqueue("S", type=1, key="B", payload=b"two", deliver_at=None)
    rc, out, err = cancel(r, "S", 2)
    if rc == 0:
        wait_settled(t, r, "S", [2])
        settled = out_row(r, "S", 2)
        rc2, out2, err2 = cancel(r, "S", 2)
        if settled["status"] == -2:
            assert rc2 == 0 and out2 == "R/S/2 was already cancelled\n", \
                (rc2, out2, err2)
        else:  # it took effect before the tombstone arrived
            assert rc2 == 1 and "already confirmed" in err2, (rc2, err2)
        assert out_row(r, "S", 2) == settled, (out_row(r, "S", 2), settled)
    else:  # confirmed before the cancel ran
        assert rc == 1 and "already confirmed" in err, (rc, out, err)

    rc, out, err = cancel(r, "S", 99)
    assert rc == 1 and err == ("semqctl: no outbound message R/S/99 in "
                               f"{r.db}\n"), (rc, out, err)
    rc, out, err = r.semqctl("outbound", "cancel", "R/S/zero")
    assert rc == 2 and "seq 'zero'" in err, (rc, out, err)
    r.stop()
    s.stop()


# ---- 3. a cancel racing the delivery ----------------------------------------

@test(timeout=300)
def cancel_racing_delivery_is_consistent(t):
    r, s = make_pair(t)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    rng = random.Random(int(os.environ.get("SEMQ_CANCEL_SEED") or 0) or
                        random.SystemRandom().randrange(1, 2**31))
    keys, refused = {}, []
    for i in range(RACE_ROUNDS):
        key = f"K{i % 3}"  # same-key chains run through the cancelled ones
        (_, _, seq), = r.enqueue("S", type=1, key=key, payload=b"race")
        keys[("R", seq)] = key
        time.sleep(rng.choice([0, 0, 0.005, 0.02, 0.05, 0.1]))
        rc, out, err = cancel(r, "S", seq)
        if rc == 1:
            assert f"R/S/{seq} is already confirmed" in err, (rc, err)
            refused.append(seq)
        else:
            assert rc == 0 and out.startswith(f"cancelled R/S/{seq};"), \
                (rc, out, err)
    seqs = sorted(q for _, q in keys)
    rows = wait_settled(t, r, "S", seqs)
    # Late copies of what R sent before the verdicts are on the link ahead
    # of a message sent now (one stream, frames in order): once that one
    # took effect, they have too.
    (_, _, last), = r.enqueue("S", type=1, key="after", payload=b"after")
    keys[("R", last)] = "after"
    wait_until(lambda: last in journal_seqs(s, "R") or
               Pending(f"journal seqs {journal_seqs(s, 'R')[-3:]}"),
               SETTLE_TIMEOUT, f"S: seq {last}, sent after every verdict, "
               "took effect", on_timeout=t.logs)
    journal = journal_seqs(s, "R")
    took, dropped, bad = [], [], []
    for q in seqs:
        w, n = rows[q], journal.count(q)
        if w["status"] == 100 and w["result"] == 0 and n == 1:
            took.append(q)
        elif w["status"] == -2 and w["result"] == 4 and n == 0:
            dropped.append(q)
        else:
            bad.append(f"seq {q}: status {w['status']} result "
                       f"{w['result']}, {n} journal rows")
    assert not bad, "inconsistent outcomes:\n  " + "\n  ".join(bad)
    assert all(q in took for q in refused), (refused, took)
    check_exactly_once(s, ["R"], last, keys=keys,
                       cancelled=[("R", q) for q in dropped])
    wait_until(lambda: watermark(s, "R") == last or
               Pending(f"confirmed_through {watermark(s, 'R')}"),
               SETTLE_TIMEOUT, f"S: confirmed_through {last} for R",
               on_timeout=t.logs)
    left = r.sql("SELECT count(*) FROM tb_0031 WHERE status IN (0, 4, 6) "
                 "OR (status = -2 AND result IS NULL)")[0][0]
    if left:
        raise HarnessError(f"R: {left} rows still unresolved")
    print(f"race: {len(seqs)} rounds: {len(took)} took effect ("
          f"{len(refused)} confirmed before the cancel), {len(dropped)} "
          "cancelled", flush=True)
    r.stop()
    s.stop()


if __name__ == "__main__":
    run()
