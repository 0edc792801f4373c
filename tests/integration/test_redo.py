# SPDX-License-Identifier: MIT
"""The failure-redo queue, delayed messages and the bill plugin between two
real semqd nodes (SPEC §3, §4 tb_0033, §6 ordering, §7, §13).

An origin R dials a receiver S over mutual TLS on loopback. S runs the
journal plugin for every type and, where a test says so, the bill plugin for
type 2800 (plugins/bill/README.md); the tests read both databases and drive
the operator's side with `semqctl redo`:

  1. Bills: 20 good bill documents and one malformed one (type 2800, key =
     bill_no). The 20 are imported exactly once (bill and bill_line rows);
     the malformed one is dead in tb_0033 with a last_error naming the
     fault; `redo list --status dead --json` lists it, `redo show` prints
     the error and the payload, `redo discard --reason` moves it to
     discarded. R's rows are all 100, the dead one with result 5. The human
     output of `redo list` and `redo show` is printed between
     "---- redo list ----" and "---- end ----".
  2. A dead head holds its key: (a) a malformed bill with key K, then three
     good bills with key K (waiting) and bills of other keys (imported at
     once); discarding the head runs the three in seq order, each once.
     (b) the journal failing every call (RETRY), max_tries 2: the head of K
     and the other keys' entries die, K's successors wait; S restarted
     without failures, `redo retry --all-dead` runs the head, then its
     successors in seq order, each exactly once.
  3. kill -9 of S with 50 retries scheduled: after the restart (no more
     failures) each runs exactly once, and never before the next_attempt_at
     the database held when S died.
  4. Delayed messages (deliver_at): acknowledged at once with result 3,
     pending in tb_0033 with next_attempt_at = deliver_at, run at or after
     deliver_at and before another origin's message that falls due after
     it; and the same across a kill -9 of S right after the
     acknowledgement.

Run by ctest as integration_redo, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_redo.py [NAME]
The bill plugin is $BILL_SO, else bill.so beside $JOURNAL_SO, else
SEMQ_BUILD_DIR/plugins/bill.so.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (BUILD_DIR, HarnessError, Pending,  # noqa: E402
                      check_exactly_once, connect, msg_id, run, test,
                      wait_until)

# Fast timers: short poll, quick in-doubt queries, quick reconnects.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "500ms"}
READY_TIMEOUT = 30.0  # a node (re)started and listening
SETTLE_TIMEOUT = 30.0  # a handful of messages reach their final state
BILL_TYPE = 2800
OTHER_TYPE = 7  # journal only

# tb_0033 statuses (SPEC §4).
RS_PENDING, RS_WAITING, RS_DONE, RS_DEAD, RS_DISCARDED = 0, 1, 2, -1, -2
# Verdicts in R's tb_0031.result.
RES_PROCESSED, RES_REDO, RES_SCHEDULED, RES_DEAD = 0, 1, 3, 5


def bill_so():
    p = os.environ.get("BILL_SO")
    if p:
        return p
    j = os.environ.get("JOURNAL_SO")
    if j:
        return os.path.join(os.path.dirname(j), "bill.so")
    return os.path.join(BUILD_DIR, "plugins", "bill.so")


def now_ms():
    return int(time.time() * 1000)


def make_pair(t, bill=False, journal_options=None, redo=None):
    """R (origin, no plugin, dials) and S (journal for every type, bill for
    2800 when `bill`, listens), not started."""
    so = bill_so()
    if bill and not os.path.isfile(so):
        raise HarnessError(f"bill plugin {so} is missing (build target "
                           "'bill', or set BILL_SO)")
    certs = t.certs(["R", "S"])
    plugins = {"bill": {"path": so, "types": [BILL_TYPE]}} if bill else None
    s = t.node("S", certs, node_options=FAST, journal_options=journal_options,
               plugins=plugins, redo=redo)
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST)
    connect(r, s)
    return r, s


def bill_doc(bill_no, n_lines=2):
    """A good bill document and its expected (total_minor, lines)."""
    lines = [{"item": f"SKU-{i + 1}", "qty": i + 1,
              "price": f"{i + 1}.{(i * 7) % 100:02d}"}
             for i in range(n_lines)]
    doc = {"bill_no": bill_no, "shop": "R", "currency": "EUR",
           "issued_at": "2026-11-22T10:00:00Z", "lines": lines}
    minor = [(i + 1, (i + 1) * 100 + (i * 7) % 100) for i in range(n_lines)]
    total = sum(q * p for q, p in minor)
    return json.dumps(doc).encode(), total, minor


# A document with a misspelt key: the plugin refuses it PERMANENT.
BAD_NO = "B-BAD-0001"
BAD_DOC = json.dumps({"bill_no": BAD_NO, "shop": "R", "lines": [
    {"item": "SKU-1", "qty": 1, "prcie": "3.50"}]}).encode()
BAD_WHY = "unknown key 'prcie'"


def send(r, rows):
    """The application's side: rows of (dest, type, key, payload,
    deliver_at) in one transaction. Returns their seqs in order."""
    c = r.connect_db(readonly=False)
    try:
        with c:
            ids = [c.execute("INSERT INTO tb_0031(dest, type, msg_key, "
                             "payload, deliver_at) VALUES (?, ?, ?, ?, ?)",
                             row).lastrowid for row in rows]
        r.wait_numbered()
        return [c.execute("SELECT seq FROM tb_0031 WHERE id = ?",
                          (i,)).fetchone()[0] for i in ids]
    finally:
        c.close()


def out_rows(r, dest):
    """{seq: (status, result)} of R's rows to dest."""
    return {q: (st, res) for q, st, res in r.sql(
        "SELECT seq, status, result FROM tb_0031 WHERE origin = ? AND "
        "dest = ?", (r.id, dest))}


def wait_confirmed(t, r, dest, n, timeout=SETTLE_TIMEOUT):
    def done():
        c = r.outbound_status_counts(dest)
        return (set(c) <= {100} and sum(c.values()) == n) or Pending(
            f"status counts {c}")
    wait_until(done, timeout, f"{r.id}: all {n} rows to {dest} at status "
               "100", interval=0.1, on_timeout=t.logs)


def redo_rows(s):
    """{seq: dict} of S's tb_0033 entries of R's messages (R2's markers,
    see redo_pass, are not the test's)."""
    cols = ("id", "origin", "seq", "msg_key", "status", "tries", "level",
            "next_attempt_at", "deliver_at", "last_error", "discard_reason",
            "updated_at")
    return {row[2]: dict(zip(cols, row)) for row in s.sql(
        f"SELECT {', '.join(cols)} FROM tb_0033 WHERE origin = 'R' "
        "ORDER BY seq")}


def redo_statuses(s):
    return {q: e["status"] for q, e in redo_rows(s).items()}


def wait_redo(t, s, want, what, timeout=SETTLE_TIMEOUT):
    """Waits until S's tb_0033 is exactly {seq: status} = want."""
    def done():
        got = redo_statuses(s)
        return got == want or Pending(f"tb_0033 seq: status {got}")
    return wait_until(done, timeout, f"S: tb_0033 {what}", interval=0.1,
                      on_timeout=t.logs)


def bills(s):
    """{bill_no: dict} of S's bill table; {} before the plugin made it."""
    if not s.has_table("bill"):
        return {}
    cols = ("id", "bill_no", "shop", "currency", "total_minor", "origin",
            "dest", "seq", "imported_at")
    return {row[1]: dict(zip(cols, row)) for row in s.sql(
        f"SELECT {', '.join(cols)} FROM bill")}


def bill_lines(s, bill_id):
    return s.sql("SELECT line_no, item, qty, price_minor FROM bill_line "
                 "WHERE bill_id = ? ORDER BY line_no", (bill_id,))


def check_bill(s, got, bill_no, seq, total, minor):
    """One imported bill: its row names the message that brought it, its
    total and lines are the document's."""
    b = got.get(bill_no)
    assert b is not None, f"bill {bill_no} (seq {seq}) not imported"
    assert (b["origin"], b["dest"], b["seq"]) == ("R", "S", seq), b
    assert b["total_minor"] == total, (b, total)
    lines = bill_lines(s, b["id"])
    assert lines == [(i + 1, f"SKU-{i + 1}", q, p)
                     for i, (q, p) in enumerate(minor)], (bill_no, lines)


def marker_origin(t, s):
    """A second origin R2 dialling S (before S starts, so S knows it): its
    messages mark S's redo passes (redo_pass) on a stream of their own."""
    r2 = t.node("R2", t.certs(["R2"]), listen=False, journal=False,
                node_options=FAST)
    connect(r2, s)
    return r2


def redo_pass(t, r2, s, not_before=0):
    """Waits for a pass of S's redo runner at or after not_before (S's clock,
    ms) and after now: R2 sends S a message delayed until then and this
    returns once S ran it from its redo queue, which runs entries in the
    order they fall due; whatever was due before, or must never run, has
    had its turn. A marker that reached S after its deliver_at was applied
    at once, not by the runner (result 0, not 3): then another, delayed
    twice as long. Returns the marker's handled_at (S's clock)."""
    delay = 500
    while True:
        at = max(now_ms() + delay, not_before + 1)
        (q,) = send(r2, [("S", OTHER_TYPE, None, b"redo pass", at)])

        def acked():
            row = r2.sql("SELECT status, result FROM tb_0031 WHERE seq = ? "
                         "AND dest = 'S'", (q,))
            return (row and row[0][0] == 100 and row[0]) or Pending(row)
        _, result = wait_until(acked, SETTLE_TIMEOUT, f"R2: marker {q} "
                               "confirmed", interval=0.02,
                               on_timeout=t.logs)
        if result == RES_SCHEDULED:
            break
        assert result == RES_PROCESSED, (q, result)
        delay *= 2

    def ran():
        rows = [h for x, h in journal_of(s, "R2") if x == q]
        return rows or Pending("not yet")
    (h,) = wait_until(ran, SETTLE_TIMEOUT + (at - now_ms()) / 1000.0,
                      f"S: R2's marker {q} run from the redo queue",
                      interval=0.05, on_timeout=t.logs)
    assert h >= at, f"R2's marker {q} ran {at - h} ms before its deliver_at"
    return h


def ctl(node, *args):
    """semqctl ARGS on node; raises unless it exits 0; returns stdout."""
    rc, out, err = node.semqctl(*args)
    if rc != 0:
        raise HarnessError(f"{node.id}: semqctl {' '.join(args)} exited "
                           f"{rc}: {err.strip()}")
    return out


def journal_of(s, origin="R"):
    """[(seq, handled_at)] of S's journal rows from origin, by id."""
    return [(q, h) for q, h in s.sql(
        "SELECT seq, handled_at FROM journal WHERE origin = ? AND dest = ? "
        "ORDER BY id", (origin, s.id))] if s.has_table("journal") else []


# ---- 1. bills: 20 imported once, a malformed one dead -----------------------

@test(timeout=120)
def bills_imported_malformed_dead_then_discarded(t):
    r, s = make_pair(t, bill=True, redo={"levels": "1s,2s", "max_tries": 3})
    r2 = marker_origin(t, s)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    good = {}  # bill_no -> (payload, total, lines)
    seq_of = {}  # bill_no -> seq
    rows = []
    bad_seq = 11
    for q in range(1, 22):
        no = BAD_NO if q == bad_seq else f"B-2026-{q:04d}"
        seq_of[no] = q
        if q != bad_seq:
            good[no] = bill_doc(no, 1 + q % 4)
        rows.append(("S", BILL_TYPE, no,
                     BAD_DOC if q == bad_seq else good[no][0], None))
    seqs = send(r, rows)
    assert seqs == list(range(1, 22)), seqs
    wait_confirmed(t, r, "S", 21)

    # R: every row confirmed; the malformed one dead in S's redo queue.
    want = {q: (100, RES_PROCESSED) for q in seqs}
    want[bad_seq] = (100, RES_DEAD)
    assert out_rows(r, "S") == want, out_rows(r, "S")

    # S: the 20 imported once each, with their lines; the bad one not.
    got = bills(s)
    assert sorted(got) == sorted(good), sorted(got)
    for no, (_, total, minor) in good.items():
        check_bill(s, got, no, seq_of[no], total, minor)
    n_lines = sum(len(m) for _, _, m in good.values())
    assert s.sql("SELECT count(*) FROM bill_line")[0][0] == n_lines
    assert s.sql("SELECT count(*) FROM bill WHERE bill_no = ?",
                 (BAD_NO,))[0][0] == 0
    assert s.journal_count() == 0, "the bill plugin, not the journal, " \
        f"takes type {BILL_TYPE}: {s.journal_rows()}"
    received = dict(s.sql("SELECT seq, result FROM tb_0030 WHERE origin = "
                          "'R'"))
    assert all(received.get(q, RES_PROCESSED) == RES_PROCESSED
               for q in seqs if q != bad_seq), received

    # tb_0033: only the malformed one, dead at once (PERMANENT), with a
    # last_error that names the fault.
    ent = redo_rows(s)
    assert list(ent) == [bad_seq], ent
    e = ent[bad_seq]
    assert e["status"] == RS_DEAD and e["tries"] == 1, e
    assert e["msg_key"] == BAD_NO, e
    assert e["last_error"] and "bill:" in e["last_error"] and \
        BAD_WHY in e["last_error"], e["last_error"]

    # The operator's view.
    dead = s.semqctl_json("redo", "list", "--status", "dead")
    assert [(x["id"], x["message"], x["status"], x["status_name"],
             x["key"], x["type"], x["last_error"]) for x in dead] == \
        [(e["id"], msg_id("R", "S", bad_seq), RS_DEAD, "dead", BAD_NO,
          BILL_TYPE, e["last_error"])], dead
    assert dead[0]["payload_len"] == len(BAD_DOC), dead
    rc, out, err = s.semqctl("redo", "list", "--status", "dead", "--json")
    assert rc == 0 and json.loads(out) == dead, (rc, out, err)
    assert s.semqctl_json("redo", "list", "--status", "pending") == []
    listing = ctl(s, "redo", "list")
    shown = ctl(s, "redo", "show", e["id"])
    assert msg_id("R", "S", bad_seq) in listing and "dead" in listing, \
        listing
    assert e["last_error"] in shown, shown
    assert BAD_DOC.decode() in shown, shown
    one = s.semqctl_json("redo", "show", e["id"])
    assert one["payload_text"] == BAD_DOC.decode(), one
    assert one["last_error"] == e["last_error"], one

    discarded = ctl(s, "redo", "discard", e["id"], "--reason",
                    "bad document")
    print("---- redo list ----")
    print(f"$ semqctl -c node.ini redo list\n{listing.rstrip()}")
    print(f"$ semqctl -c node.ini redo show {e['id']}\n{shown.rstrip()}")
    print(f"$ semqctl -c node.ini redo discard {e['id']} --reason "
          f"\"bad document\"\n{discarded.rstrip()}")
    print("---- end ----", flush=True)

    after = redo_rows(s)[bad_seq]
    assert after["status"] == RS_DISCARDED and \
        after["discard_reason"] == "bad document", after
    assert [x["id"] for x in s.semqctl_json(
        "redo", "list", "--status", "discarded")] == [e["id"]]
    assert s.semqctl_json("redo", "list", "--status", "dead") == []
    # Discarding a discarded entry is refused and changes nothing.
    rc, out, err = s.semqctl("redo", "discard", e["id"], "--reason", "again")
    assert rc == 1 and err.strip(), (rc, out, err)
    assert redo_rows(s)[bad_seq]["discard_reason"] == "bad document"
    # Nothing runs the discarded entry: a redo pass after the discard.
    r2.start(timeout=READY_TIMEOUT)
    redo_pass(t, r2, s)
    assert len(bills(s)) == 20 and BAD_NO not in bills(s)
    assert redo_rows(s)[bad_seq]["status"] == RS_DISCARDED
    assert out_rows(r, "S") == want
    r.stop()
    r2.stop()
    s.stop()


# ---- 2. a dead head holds its key; the others flow --------------------------

def key_chain_rows(make_head, make_doc):
    """The sending plan of test 2: seq 1 the head of key K, K's successors
    at seqs 3, 5, 7 and one message per other key (O-NN) at 2, 4, 6, 8, 9.
    make_head() and make_doc(name) give (type, payload). Returns (rows for
    send(), {(origin, seq): key}, K's successor seqs, the other seqs)."""
    rows, keys = [], {}
    k_seqs, o_seqs = [3, 5, 7], [2, 4, 6, 8, 9]
    for q in range(1, 10):
        if q == 1:
            key, (typ, payload) = "K", make_head()
        elif q in k_seqs:
            key, (typ, payload) = "K", make_doc(f"B-K-{q:02d}")
        else:
            key = f"O-{q:02d}"
            typ, payload = make_doc(key)
        keys[("R", q)] = key
        rows.append(("S", typ, key, payload, None))
    return rows, keys, k_seqs, o_seqs


@test(timeout=120)
def dead_head_discarded_releases_successors_in_order(t):
    r, s = make_pair(t, bill=True, redo={"levels": "1s,2s", "max_tries": 3})
    r2 = marker_origin(t, s)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    docs = {}

    def doc(no):
        docs[no] = bill_doc(no)
        return (BILL_TYPE, docs[no][0])
    rows, keys, k_seqs, o_seqs = key_chain_rows(
        lambda: (BILL_TYPE, BAD_DOC), doc)
    assert send(r, rows) == list(range(1, 10))
    wait_confirmed(t, r, "S", 9)

    # The head is dead, its successors wait; the other keys took effect.
    want = {1: RS_DEAD, 3: RS_WAITING, 5: RS_WAITING, 7: RS_WAITING}
    wait_redo(t, s, want, "K's head dead, its 3 successors waiting")
    got = bills(s)
    assert sorted(got) == sorted(f"O-{q:02d}" for q in o_seqs), sorted(got)
    for q in o_seqs:
        no = f"O-{q:02d}"
        check_bill(s, got, no, q, docs[no][1], docs[no][2])
    # R: the head dead there, its successors waiting in the redo queue
    res = {q: (100, RES_REDO) for q in k_seqs}
    res[1] = (100, RES_DEAD)
    res.update({q: (100, RES_PROCESSED) for q in o_seqs})
    assert out_rows(r, "S") == res, out_rows(r, "S")
    # Past both redo levels (1 s, 2 s) since the head died, by S's clock,
    # a redo pass: a dead head stays dead, its successors wait.
    r2.start(timeout=READY_TIMEOUT)
    redo_pass(t, r2, s, redo_rows(s)[1]["updated_at"] + 3000)
    assert redo_statuses(s) == want, redo_rows(s)
    assert not any(b.startswith("B-K-") for b in bills(s)), bills(s)

    head = redo_rows(s)[1]
    out = s.semqctl_json("redo", "discard", head["id"], "--reason",
                         "bad document")
    assert out["discarded"] is True and out["status"] == RS_DISCARDED, out
    assert [x["message"] for x in out["released"]] == \
        [msg_id("R", "S", 3)], out
    assert out["still_waiting"] == 2, out

    want = {1: RS_DISCARDED, 3: RS_DONE, 5: RS_DONE, 7: RS_DONE}
    wait_redo(t, s, want, "K's successors done after the discard")
    got = bills(s)
    assert len(got) == 8, sorted(got)
    kb = [got[f"B-K-{q:02d}"] for q in k_seqs]
    for q in k_seqs:
        no = f"B-K-{q:02d}"
        check_bill(s, got, no, q, docs[no][1], docs[no][2])
    # In seq order: imported one after another, never before their head
    # was discarded.
    by_import = sorted(kb, key=lambda b: (b["imported_at"], b["id"]))
    assert [b["seq"] for b in by_import] == k_seqs, by_import
    assert [b["seq"] for b in sorted(kb, key=lambda b: b["id"])] == k_seqs
    discarded_at = redo_rows(s)[1]["updated_at"]
    assert all(b["imported_at"] >= discarded_at for b in kb), \
        (discarded_at, kb)
    assert s.sql("SELECT count(*) FROM bill")[0][0] == 8
    assert out_rows(r, "S") == res
    r.stop()
    r2.stop()
    s.stop()


@test(timeout=120)
def dead_head_retried_after_fix_runs_chain_in_order(t):
    r, s = make_pair(t, journal_options={"fail_rate": 1.0, "fail_seed": 7},
                     redo={"levels": "1s", "max_tries": 2})
    r2 = marker_origin(t, s)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)

    def doc(no):
        return (OTHER_TYPE, no.encode())
    rows, keys, k_seqs, o_seqs = key_chain_rows(
        lambda: (OTHER_TYPE, b"head"), doc)
    assert send(r, rows) == list(range(1, 10))
    wait_confirmed(t, r, "S", 9)

    # Every call fails RETRY: after the second try (1 s later) the heads
    # are dead; K's successors never ran, they wait behind K's head.
    want = {q: RS_DEAD for q in [1] + o_seqs}
    want.update({q: RS_WAITING for q in k_seqs})
    wait_redo(t, s, want, "heads dead after 2 tries, K's successors "
              "waiting", timeout=20.0)
    ent = redo_rows(s)
    for q in [1] + o_seqs:
        assert ent[q]["tries"] == 2 and "injected failure" in \
            (ent[q]["last_error"] or ""), ent[q]
    for q in k_seqs:
        assert ent[q]["tries"] == 0, ent[q]
    assert s.journal_count() == 0, s.journal_rows()
    assert out_rows(r, "S") == {q: (100, RES_REDO) for q in range(1, 10)}

    # The operator fixes the cause (here: the failures stop) and restarts
    # S: dead entries stay dead until retried.
    s.stop()
    s.journal_options = {}
    s.start(timeout=READY_TIMEOUT)
    # A redo pass of the restarted S, past the 1 s level since the heads
    # died (S's clock): they stay dead, the successors wait.
    r2.start(timeout=READY_TIMEOUT)
    died = max(e["updated_at"] for e in redo_rows(s).values())
    redo_pass(t, r2, s, died + 1000)
    assert redo_statuses(s) == want, redo_rows(s)
    assert journal_of(s) == [], s.journal_rows()

    out = s.semqctl_json("redo", "retry", "--all-dead")
    assert out["count"] == 1 + len(o_seqs) and sorted(
        x["message"] for x in out["retried"]) == sorted(
        msg_id("R", "S", q) for q in [1] + o_seqs), out
    wait_redo(t, s, {q: RS_DONE for q in range(1, 10)},
              "every entry done after retry --all-dead")
    # Each exactly once, K in seq order (head first).
    check_exactly_once(s, ["R"], 9, keys=keys)
    k_order = [q for q, _ in journal_of(s) if keys[("R", q)] == "K"]
    assert k_order == [1] + k_seqs, k_order
    rc, out, err = s.semqctl("redo", "retry", "--all-dead")
    assert rc == 0 and "nothing to retry" in out, (rc, out, err)
    redo_pass(t, r2, s)  # nothing runs a second time
    check_exactly_once(s, ["R"], 9, keys=keys)
    r.stop()
    r2.stop()
    s.stop()


# ---- 3. kill -9 with retries scheduled --------------------------------------

@test(timeout=120)
def scheduled_retries_survive_kill9(t):
    n = 50
    r, s = make_pair(t, journal_options={"fail_rate": 1.0, "fail_seed": 3},
                     redo={"levels": "2s,2s,2s", "max_tries": 10})
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    seqs = send(r, [("S", OTHER_TYPE, None, b"x" * 10, None)] * n)
    assert seqs == list(range(1, n + 1)), seqs
    wait_redo(t, s, {q: RS_PENDING for q in seqs}, f"all {n} pending")
    wait_confirmed(t, r, "S", n)

    rc = s.kill()
    assert rc == -9, f"S had exited ({rc}) before the kill"
    killed_at = now_ms()
    # The durable schedule at the moment of the crash.
    ent = redo_rows(s)
    assert {e["status"] for e in ent.values()} == {RS_PENDING}, ent
    due = {q: e["next_attempt_at"] for q, e in ent.items()}
    assert s.journal_count() == 0, s.journal_rows()
    ahead = sum(1 for a in due.values() if a > killed_at)
    print(f"killed S with {n} entries pending, {ahead} not yet due, "
          f"tries {sorted({e['tries'] for e in ent.values()})}", flush=True)
    assert ahead > 0, f"every entry was due at the kill: {due}"

    s.journal_options = {}
    s.start(timeout=READY_TIMEOUT)
    wait_redo(t, s, {q: RS_DONE for q in seqs},
              f"all {n} done after the restart")
    check_exactly_once(s, ["R"], n)
    early = [(q, h, due[q]) for q, h in journal_of(s) if h < due[q]]
    assert not early, f"run before next_attempt_at (seq, handled_at, " \
        f"next_attempt_at): {early}"
    assert out_rows(r, "S") == {q: (100, RES_REDO) for q in seqs}
    r.stop()
    s.stop()


# ---- 4. delayed messages ----------------------------------------------------

def wait_acked(t, r, seq, timeout=SETTLE_TIMEOUT):
    """Waits until R's row seq to S is confirmed; returns (status, result,
    acked_at)."""
    def done():
        row = r.sql("SELECT status, result, acked_at FROM tb_0031 WHERE "
                    "origin = 'R' AND dest = 'S' AND seq = ?", (seq,))
        return (row and row[0][0] == 100 and row[0]) or Pending(row)
    return wait_until(done, timeout, f"R: row {seq} confirmed",
                      interval=0.02, on_timeout=t.logs)


def check_scheduled(s, seq, deliver_at):
    e = redo_rows(s).get(seq)
    assert e is not None, f"S: no tb_0033 entry for seq {seq}"
    assert e["status"] == RS_PENDING and e["next_attempt_at"] == \
        deliver_at and e["deliver_at"] == deliver_at and e["tries"] == 0, e
    # The received record says "scheduled", unless the watermark has
    # passed it already (then the row is compacted away, SPEC §4).
    rec = s.sql("SELECT result FROM tb_0030 WHERE origin = 'R' AND seq = ?",
                (seq,))
    w = s.sql("SELECT confirmed_through FROM semq_stream_in WHERE origin = "
              "'R' AND dest = ?", (s.id,))
    assert rec == [(RES_SCHEDULED,)] or (not rec and w and w[0][0] >= seq), \
        (rec, w)


def wait_handled(t, s, r2, seq, deliver_at):
    """Asserts R's seq, pending in S's redo queue until deliver_at, ran
    once, at or after deliver_at, and when due: before a marker of R2's
    (redo_pass) that falls due after it, sent while seq may still be
    pending. The runner takes entries in the order they fall due, so a seq
    left behind (not run when due) would run after the marker. Returns
    seq's handled_at."""
    redo_pass(t, r2, s, not_before=deliver_at)
    rows = s.sql("SELECT id, origin, seq, handled_at FROM journal WHERE "
                 "dest = ? AND (origin = 'R' AND seq = ? OR origin = 'R2') "
                 "ORDER BY id", (s.id, seq))
    mine = [(i, h) for i, o, _, h in rows if o == "R"]
    assert len(mine) == 1, f"seq {seq}: journal rows {rows}"
    ((i, h),) = mine
    marker = max(i for i, o, _, _ in rows if o == "R2")
    assert i < marker, f"seq {seq} ran after R2's marker, which fell due " \
        f"after it: {rows}"
    assert h >= deliver_at, f"seq {seq} ran {deliver_at - h} ms before " \
        "its deliver_at"
    assert redo_rows(s)[seq]["status"] == RS_DONE
    return h


@test(timeout=120)
def delayed_messages_run_when_due_even_across_kill9(t):
    r, s = make_pair(t)
    r2 = marker_origin(t, s)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    r2.start(timeout=READY_TIMEOUT)

    # The delays must outlast the send and its acknowledgement (and, below,
    # the kill) on a loaded, sanitized build: several seconds of margin.
    deliver_at = now_ms() + 8000
    assert send(r, [("S", OTHER_TYPE, "late-1", b"close order 1",
                     deliver_at)]) == [1]
    status, result, acked_at = wait_acked(t, r, 1)
    assert result == RES_SCHEDULED and acked_at < deliver_at, \
        (status, result, acked_at, deliver_at)
    check_scheduled(s, 1, deliver_at)
    assert s.journal_count() == 0, s.journal_rows()
    h = wait_handled(t, s, r2, 1, deliver_at)
    print(f"delayed: deliver_at {deliver_at}, acked {deliver_at - acked_at}"
          f" ms before, ran {h - deliver_at} ms after", flush=True)

    # Across a crash: S dies right after acknowledging.
    deliver_at = now_ms() + 10000
    assert send(r, [("S", OTHER_TYPE, "late-2", b"close order 2",
                     deliver_at)]) == [2]
    status, result, acked_at = wait_acked(t, r, 2)
    assert s.kill() == -9
    killed_at = now_ms()
    assert result == RES_SCHEDULED, (status, result)
    assert killed_at < deliver_at - 500, \
        f"S was killed only {deliver_at - killed_at} ms before deliver_at"
    check_scheduled(s, 2, deliver_at)
    assert [q for q, _ in journal_of(s)] == [1]
    s.start(timeout=READY_TIMEOUT)
    h = wait_handled(t, s, r2, 2, deliver_at)
    print(f"delayed across kill -9: killed {deliver_at - killed_at} ms "
          f"before deliver_at, ran {h - deliver_at} ms after", flush=True)
    redo_pass(t, r2, s)  # nothing runs a second time
    check_exactly_once(s, ["R"], 2,
                       keys={("R", 1): "late-1", ("R", 2): "late-2"})
    assert out_rows(r, "S") == {1: (100, RES_SCHEDULED),
                                2: (100, RES_SCHEDULED)}
    r.stop()
    r2.stop()
    s.stop()


if __name__ == "__main__":
    run()
