# SPDX-License-Identifier: MIT
"""The platform relay end to end: R -> P -> S (SPEC §2, §6 case 2, §9, §10).

Real semqd nodes on loopback: origins (R, R1, R2) dial the platform P, which
runs with `relay = yes` (and `store_and_forward = yes` unless a test says
otherwise); servers (S, S1, S2, journal plugin) dial P too. Origins and
servers name P a `trusted_relay` and route everything through it
(`[route] default = P`). The tests read every node's database to prove that
each message took effect exactly once, in key order, and that every node
ends in the state SPEC §4/§6 describe:

  1. S offline: two origins send 2,500 messages each (50 keys each). P holds
     them (origins at status 6, 5,000 copies in P's tb_0031). S starts: all
     take effect exactly once, in key order; P's tb_0031 ends empty, the
     origins' rows at 100, S's watermark at 2,500 per stream with every
     received row acknowledged. Prints FIGURES: stored, seconds to drain, msgs/s.
  2. P is killed -9 twice while it holds stored copies and a faultproxy
     cuts the R->P link every 0.5-2 s during the sending (and once for
     certain right after the first restart); every row R knows
     P stored is in P's tb_0031; then S starts: nothing lost, no duplicate.
  3. R resends a message P still holds: P keeps one copy. S then starts
     while R is away: S's row (via P, confirm_need 3) has the relay's
     confirmation only, P's copy is gone, and the row is AS_OK (under the
     watermark) only after R's 810-Response arrives, not after another
     origin's message settles. One effect.
  4. Forward-only (store_and_forward = no) to two servers S1, S2: forwarded,
     exactly once each; with S2 stopped, R's rows for S2 go back to status 0
     with last_error "unreachable", backing off (R's own sent_at and
     next_attempt_at: reconnect_min doubling to reconnect_max between
     sends), nothing stored at P; they are delivered once S2 is back.
  5. An in-doubt row (status 6, due now) is resolved by Query/QueryReply
     through P: while S is down P does not answer for it (twice; each time
     a row to S2 in doubt too, asked in the same query, is resolved: P's
     word on S's row came first); once S is up the row ends at 100
     without a resend; one journal row.
  6. Trust: a shop R2 with a valid certificate sending Data of origin R1
     through P gets Error FORBIDDEN and nothing is stored at P or S; a
     server without trusted_relay for P refuses Data carried by P.
  7. drain_rate = 200: P's 1,000 copies reach S paced, as S's own clock
     says (its journal's handled_at against its first log line: the k-th
     effect no earlier than (k - 200) / 200 s after S started), and all take
     effect exactly once; with query_after shorter than the drain, the
     origin's queries do not make it resend past P's pace.

Environment (besides what semqtest.py reads): SEMQ_RELAY_SCALE (default 1)
multiplies the message counts of 1, 2 and 7, e.g. 0.2 for a sanitizer build;
SEMQ_RELAY_SEED fixes the fault proxy's seed.

Run by ctest as integration_relay, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_relay.py [NAME]
"""

import calendar
import os
import random
import re
import socket
import ssl
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wire  # noqa: E402
from wire import client_context, recv_frame  # noqa: E402
from relaytest import (BULK_TIMEOUT, FAST, PAYLOAD,  # noqa: E402
                       READY_TIMEOUT, SHORT_TIMEOUT, copies, duplicate_journal_rows,
                       enqueue_bulk, link_gone, link_ready, make_relay,
                       out_counts, out_row, reset_row, result_counts,
                       wait_confirmed, wait_held, wait_relay_empty, wait_row,
                       wait_settled, watermark)
from semqtest import (HarnessError, Pending, check_exactly_once,  # noqa: E402
                      run, test, wait_until)

SCALE = float(os.environ.get("SEMQ_RELAY_SCALE") or "1")
if not 0 < SCALE <= 1:
    sys.exit(f"SEMQ_RELAY_SCALE={SCALE}: must be in (0, 1]")
SEED = os.environ.get("SEMQ_RELAY_SEED")


def scaled(n, floor):
    return max(floor, int(round(n * SCALE)))


N_PER_ORIGIN = scaled(2500, 250)  # test 1, per origin
N_KEYS = 50  # keys per origin in tests 1 and 2
N_KILL = scaled(2000, 300)  # test 2
N_DRAIN = scaled(1000, 1000)  # test 7: the lower bound needs all 1,000
DRAIN_RATE = 200  # test 7, messages a second

# An origin's window (default 1000) bounds the rows in flight on its link,
# not those P holds in custody: P takes a whole backlog with the defaults
# (docs/PROTOCOL.md, "Custody"; test_custody.py checks it at 60,000).

# Test 2: R sends no faster than this, so the sending lasts about 5 s at any
# scale and the kills and cuts land while messages are in flight.
KILL_SEND_RATE = max(20, N_KILL // 5)

IO_TIMEOUT = 10.0  # a Python peer waits for an answer or the close

# Test 4: R's backoff for a row a relay refused, with relaytest.FAST's
# reconnect_min 100 ms and reconnect_max 1 s (proto_confirm.c).
BACKOFF_ATTEMPTS = 5  # 100, 200, 400, 800 ms, then 1 s


def backoff_ms(attempts):
    """The least wait after a row's attempts-th refused send."""
    assert (FAST["reconnect_min"], FAST["reconnect_max"]) == ("100ms", "1s")
    return min(100 * 2 ** (attempts - 1), 1000)


def seed_of(what):
    seed = int(SEED) if SEED else random.SystemRandom().randrange(1, 2**31)
    print(f"{what}: seed {seed} (SEMQ_RELAY_SEED={seed} repeats it)",
          flush=True)
    return seed


# ---- 1. destination offline: the relay stores, then drains ------------------

@test(timeout=300)
def offline_server_gets_stored_messages_of_two_origins(t):
    n = N_PER_ORIGIN
    p, (r1, r2), (s,), _ = make_relay(
        t, ["R1", "R2"], ["S"])
    p.start(timeout=READY_TIMEOUT)
    r1.start(timeout=READY_TIMEOUT)
    r2.start(timeout=READY_TIMEOUT)
    keys = enqueue_bulk(r1, "S", n, N_KEYS)
    keys.update(enqueue_bulk(r2, "S", n, N_KEYS))
    wait_held(t, p, [r1, r2], "S", n)
    assert copies(p) == 2 * n, copies(p)
    # The copies are the messages, numbered as their origins numbered them.
    held = p.sql("SELECT origin, dest, min(seq), max(seq), count(*), "
                 "count(DISTINCT msg_key) FROM tb_0031 GROUP BY origin "
                 "ORDER BY origin")
    assert held == [("R1", "S", 1, n, n, N_KEYS),
                    ("R2", "S", 1, n, n, N_KEYS)], held
    assert not os.path.exists(s.db), "S ran before its start"

    t0 = time.time()
    s.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r1, "S", n)
    wait_confirmed(t, r2, "S", n)
    last = max(r.sql("SELECT max(acked_at) FROM tb_0031")[0][0]
               for r in (r1, r2))
    secs = last / 1000.0 - t0
    got = check_exactly_once(s, ["R1", "R2"], n, keys=keys)
    assert got["total"] == 2 * n and got["keys"] == 2 * N_KEYS, got
    assert duplicate_journal_rows(s) == 0
    wait_relay_empty(t, p)
    for r in (r1, r2):
        wait_settled(t, s, r.id, n)
    redo = s.redo_status_counts()
    assert redo == {}, f"S's tb_0033: {redo}"
    results = {r.id: result_counts(r, "S") for r in (r1, r2)}
    # Rows an origin sent again (its query answered "not received" while
    # the copy still waited at P): harmless, but traffic past P's queue.
    resent = sum(r.sql("SELECT count(*) FROM tb_0031 WHERE attempts > 1")[0][0]
                 for r in (r1, r2))
    print(f"FIGURES: relay store-and-forward origins=2 "
          f"messages_stored={2 * n} keys={2 * N_KEYS} "
          f"payload={len(PAYLOAD)}B drain_seconds={secs:.2f} "
          f"msgs_per_s={2 * n / max(secs, 1e-3):.0f} results={results} "
          f"resent_by_origins={resent}", flush=True)
    for x in (r1, r2, s, p):
        x.stop()


# ---- 2. the relay killed -9 while holding, the R->P link cut ----------------

@test(timeout=300)
def relay_killed_and_link_cut_while_holding(t):
    n = N_KILL
    seed = seed_of("fault proxy R->P")
    p, (r,), (s,), proxy = make_relay(
        t, ["R"], ["S"],
        origin_options={"drain_rate": str(KILL_SEND_RATE)},
        proxy_kw={"cut_min": 0.5, "cut_max": 2.0, "seed": seed})
    p.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    t0 = time.time()
    keys = enqueue_bulk(r, "S", n, N_KEYS)
    kills = []
    for share in (0.3, 0.6):
        want = int(share * n)

        def progressed():
            c = copies(p)
            return c >= want or Pending(f"P holds {c}")
        wait_until(progressed, BULK_TIMEOUT, f"P holding {want} copies "
                   "before the kill", interval=0.02, on_timeout=t.logs)
        held = copies(p)
        rc = p.kill()
        assert rc == -9, f"P had exited ({rc}) before the kill"
        assert held < n, f"P held all {n} before kill {len(kills) + 1}: " \
            "the kill tested nothing"
        kills.append(held)
        print(f"killed -9 P holding {held}/{n} copies", flush=True)
        # R notices: its link through the proxy ends (or its dial fails)
        # before P is back.
        wait_until(lambda: link_gone(r, "P") or Pending("link up"),
                   SHORT_TIMEOUT, "R's link to P gone with P",
                   interval=0.02, on_timeout=t.logs)
        p.start(timeout=READY_TIMEOUT)
        if len(kills) == 1:
            # One cut for certain while P holds copies and R sends: the
            # random ones can all fall while no link is open (P down).
            wait_until(lambda: proxy.open_links() >= 1 or
                       Pending("no link open"), BULK_TIMEOUT,
                       "R's link through the proxy open again",
                       interval=0.02, on_timeout=t.logs)
            assert proxy.command("cut") == "ok"

    # Every row leaves R at least once; rows whose answer was lost with a
    # kill or a cut stay in doubt (4) until S can answer a query.
    def all_sent():
        c = out_counts(r, "R", "S")
        return (0 not in c) or Pending(f"R's status counts {c}")
    wait_until(all_sent, BULK_TIMEOUT, "R: every row sent at least once",
               interval=0.1, on_timeout=t.logs)
    stats = proxy.stats()
    at6 = {q for (q,) in r.sql("SELECT seq FROM tb_0031 WHERE dest = 'S' "
                               "AND status = 6")}
    held = {q for (q,) in p.sql("SELECT seq FROM tb_0031 WHERE origin = 'R'"
                                " AND dest = 'S'")}
    # A STORED RelayAck goes out only after P's commit: a kill never loses
    # a message R was told P holds.
    lost = sorted(at6 - held)
    assert not lost, f"R has {len(lost)} rows at status 6 that P does not " \
        f"hold: {lost[:20]}"
    before_s = out_counts(r, "R", "S")
    print(f"before S starts: R {before_s}, P holds {len(held)}", flush=True)

    s.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r, "S", n)
    secs = time.time() - t0
    got = check_exactly_once(s, ["R"], n, keys=keys)
    assert got["total"] == n and got["keys"] == N_KEYS, got
    dups = duplicate_journal_rows(s)
    assert dups == 0, f"{dups} duplicate journal rows"
    wait_relay_empty(t, p)
    wait_settled(t, s, "R", n)
    print(f"FIGURES: relay kill9+faultproxy messages={n} kills_at={kills} "
          f"seed={proxy.seed} links={stats['conns']} cuts={stats['cuts']} "
          f"before_S={before_s} results={result_counts(r, 'S')} "
          f"seconds={secs:.1f}", flush=True)
    assert stats["cuts"] >= 1, \
        f"no cut on the R->P link during the sending: {stats}"
    for x in (r, s, p):
        x.stop()
    proxy.stop()


# ---- 3. a resend while the relay holds the copy -----------------------------

@test(timeout=120)
def resend_while_relay_holds_copy(t):
    p, (r, r2), (s,), _ = make_relay(t, ["R", "R2"], ["S"])
    p.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    r.enqueue("S", type=2800, key="bill-1", payload=PAYLOAD)
    before = wait_row(t, r, "S", 1, "at status 6", lambda x: x[0] == 6)
    copy = "SELECT id, origin, dest, seq, msg_key, status FROM tb_0031"
    held = p.sql(copy)
    assert len(held) == 1 and held[0][1:] == ("R", "S", 1, "bill-1", 0), \
        held

    r.stop()
    reset_row(r, "S", 1, 0)
    r.start(timeout=READY_TIMEOUT)
    after = wait_row(t, r, "S", 1, "sent again and at status 6",
                     lambda x: x[0] == 6 and x[2] > before[2])
    # The STORED answer to the resend came after P's commit: what P holds
    # now is final. One copy, the same row.
    assert p.sql(copy) == held, f"P's copies {p.sql(copy)}, was {held}"
    print(f"resent: R row {before} -> {after}; P holds {held}", flush=True)

    # S comes while R is away: P delivers its copy; S's row needs both
    # confirmations and has only the relay's.
    r.stop()
    s.start(timeout=READY_TIMEOUT)
    s.wait_journal_count(1, timeout=SHORT_TIMEOUT)
    wait_relay_empty(t, p)
    want = [("R", "S", 1, "P", 3, 2, 0)]
    q = ("SELECT origin, dest, seq, via, confirm_need, confirm_got, "
         "ack_status FROM tb_0030 WHERE origin = 'R'")

    def relay_confirmed():
        got = s.sql(q)
        return got == want or Pending(f"tb_0030 {got}")
    wait_until(relay_confirmed, SHORT_TIMEOUT, "S: R/S/1 via P, needing "
               "both confirmations, with P's", on_timeout=t.logs)
    # Without R's 810-Response nothing moves: a second origin R2's message
    # through P settling at S (its watermark at 1) is a pass over every
    # stream, R's too, after R's row stood as it does.
    r2.start(timeout=READY_TIMEOUT)
    r2.enqueue("S", type=2800, key="other-1", payload=PAYLOAD)
    wait_settled(t, s, "R2", 1)
    r2.stop()
    assert s.sql(q) == want, s.sql(q)
    assert watermark(s, "R") == 0

    r.start(timeout=READY_TIMEOUT)
    wait_row(t, r, "S", 1, "at 100 with result 0",
             lambda x: x[0] == 100 and x[1] == 0)
    wait_settled(t, s, "R", 1)
    assert s.journal_count() == 2, s.journal_rows()
    check_exactly_once(s, ["R", "R2"], 1,
                       keys={("R", 1): "bill-1", ("R2", 1): "other-1"})
    assert copies(p) == 0
    for x in (r, s, p):
        x.stop()


# ---- 4. forward-only relay --------------------------------------------------

@test(timeout=180)
def forward_only_relay_to_two_servers(t):
    n, later = 100, 20
    p, (r,), (s1, s2), _ = make_relay(t, ["R"], ["S1", "S2"], saf=False)
    p.start(timeout=READY_TIMEOUT)
    s1.start(timeout=READY_TIMEOUT)
    s2.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    keys = {"S1": enqueue_bulk(r, "S1", n, 5),
            "S2": enqueue_bulk(r, "S2", n, 5)}
    for s in (s1, s2):
        wait_confirmed(t, r, s.id, n, SHORT_TIMEOUT)
        check_exactly_once(s, ["R"], n, keys=keys[s.id])
        assert result_counts(r, s.id) == {0: n}, result_counts(r, s.id)
        wait_settled(t, s, "R", n)
    assert copies(p) == 0, "a forward-only relay stored copies"
    assert not p.has_table("journal")

    s2.stop()
    wait_until(lambda: link_gone(p, "S2"), SHORT_TIMEOUT,
               "P noticing that S2 left", on_timeout=t.logs)
    # More for both: S1's go through, S2's are refused as unreachable and
    # wait at R, backing off.
    for dest in ("S1", "S2"):
        for i in range(later):
            ((_, _, q),) = r.enqueue(dest, type=1, key=f"late{i % 3}",
                                     payload=b"late")
            keys[dest][("R", q)] = f"late{i % 3}"
    wait_confirmed(t, r, "S1", n + later, SHORT_TIMEOUT)

    def bounced():
        rows = r.sql("SELECT status, attempts, last_error FROM tb_0031 "
                     "WHERE dest = 'S2' AND seq > ?", (n,))
        ok = len(rows) == later and all(
            st == 0 and a >= 1 and e and "unreachable" in e
            for st, a, e in rows)
        return ok or Pending(f"(status, attempts, last_error) "
                             f"{sorted(set(rows))[:5]}")
    wait_until(bounced, SHORT_TIMEOUT, "R: S2's rows back at status 0 with "
               "last_error 'unreachable'", interval=0.05, on_timeout=t.logs)
    why = r.sql("SELECT DISTINCT last_error FROM tb_0031 WHERE dest = 'S2' "
                "AND seq > ?", (n,))
    print(f"bounced: {why}", flush=True)
    # Backoff, by R's own clock: after its k-th refused attempt a row waits
    # min(reconnect_min * 2^(k-1), reconnect_max) before the next one, so
    # the next send (sent_at) comes at least that long after the last.
    # Waits until every row has been refused BACKOFF_ATTEMPTS times (the
    # delay reached reconnect_max), checking each refused row as it stands
    # and the sends seen between polls.
    seen = {}  # seq -> (attempts, sent_at) last seen
    early = []  # what broke the backoff (wait_until retries on exceptions)

    def backed_off():
        rows = r.sql("SELECT seq, status, attempts, sent_at, "
                     "next_attempt_at FROM tb_0031 WHERE dest = 'S2' AND "
                     "seq > ?", (n,))
        for q, st, a, sent, due in rows:
            if st == 0 and due - sent < backoff_ms(a):
                early.append(f"R/S2/{q}: next attempt {due - sent} ms "
                             f"after its send number {a}, less than "
                             f"{backoff_ms(a)} ms")
            if q in seen and a > seen[q][0]:
                a0, sent0 = seen[q]
                least = sum(backoff_ms(k) for k in range(a0, a))
                if sent - sent0 < least:
                    early.append(f"R/S2/{q}: sends {a0} -> {a} within "
                                 f"{sent - sent0} ms, backing off needs "
                                 f"{least} ms")
            seen[q] = (a, sent)
        least = min(a for _, _, a, _, _ in rows)
        return bool(early) or least >= BACKOFF_ATTEMPTS or Pending(
            f"fewest attempts {least}")
    wait_until(backed_off, SHORT_TIMEOUT, f"R: every row to S2 refused "
               f"{BACKOFF_ATTEMPTS} times, backing off", interval=0.05,
               on_timeout=t.logs)
    assert not early, "R did not back off: " + "; ".join(early[:5])
    assert copies(p) == 0, "a forward-only relay stored copies"
    assert s2.journal_count() == n

    s2.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r, "S2", n + later, SHORT_TIMEOUT)
    for s in (s1, s2):
        check_exactly_once(s, ["R"], n + later, keys=keys[s.id])
        assert duplicate_journal_rows(s) == 0
        wait_settled(t, s, "R", n + later)
    assert copies(p) == 0
    for x in (r, s1, s2, p):
        x.stop()


# ---- 5. an in-doubt row resolved through the relay --------------------------

@test(timeout=120)
def in_doubt_row_is_queried_through_relay(t):
    n, doubt = 10, 5
    p, (r,), (s, s2), _ = make_relay(t, ["R"], ["S", "S2"])
    p.start(timeout=READY_TIMEOUT)
    s.start(timeout=READY_TIMEOUT)
    s2.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    keys = enqueue_bulk(r, "S", n, 3)
    enqueue_bulk(r, "S2", 2, 1)
    wait_confirmed(t, r, "S", n, SHORT_TIMEOUT)
    wait_confirmed(t, r, "S2", 2, SHORT_TIMEOUT)
    wait_settled(t, s, "R", n)
    before = out_row(r, "S", doubt)
    assert before[:3] == (100, 0, 1), before

    # S is down: R's query reaches P, which must not answer for S. A row to
    # S2 (up) is in doubt too, in the same query on connect: P refuses the
    # question about S's row at once and passes S2's on, so S2's answer
    # comes back after P's word on S's row, and R takes frames in order.
    # Twice (two starts of R, one question each about S's row).
    s.stop()
    for k in (1, 2):
        r.stop()
        reset_row(r, "S", doubt, 6)
        reset_row(r, "S2", k, 6)
        r.start(timeout=READY_TIMEOUT)
        wait_row(t, r, "S2", k, "resolved by S2's answer through P",
                 lambda x: x[0] == 100)
        assert out_row(r, "S", doubt)[:3] == (6, 0, 1), \
            f"resolved while S was down: {out_row(r, 'S', doubt)}"
        assert copies(p) == 0, "P stored a copy of a queried row"

    s.start(timeout=READY_TIMEOUT)
    after = wait_row(t, r, "S", doubt, "at status 100",
                     lambda x: x[0] == 100)
    # A resend would have counted an attempt (and said "resent").
    assert after[2] == before[2], \
        f"R sent the in-doubt row again: {before} -> {after}"
    assert after[3] is None or "resent" not in after[3], after
    assert after[1] in (0, 2), f"query answer recorded as {after[1]}"
    assert s.sql("SELECT count(*) FROM journal WHERE origin = 'R' AND "
                 "seq = ?", (doubt,))[0][0] == 1
    check_exactly_once(s, ["R"], n, keys=keys)
    assert s.journal_count() == n
    assert s.settled("R", n)
    assert copies(p) == 0
    print(f"in-doubt row through P: {before} -> {after}", flush=True)
    for x in (r, s, p):
        x.stop()


# ---- 6. trust ---------------------------------------------------------------

def forge_through_relay(p, certs, as_id, origin, dest, seq):
    """Connects to P as as_id (its own valid certificate), exchanges Hellos
    and sends Data of `origin`. Returns (Error code, text): P must answer
    Error and close."""
    raw = socket.create_connection(("127.0.0.1", p.listen_port),
                                   timeout=IO_TIMEOUT)
    try:
        sock = client_context(certs, as_id).wrap_socket(raw)
        sock.sendall(wire.frame(wire.hello_frame(as_id)))
        kind, h = recv_frame(sock)
        assert kind == "hello" and h["node_id"] == "P", (kind, h)
        msg = {"origin": origin, "dest": dest, "seq": seq, "type": 2800,
               "key": "forged", "payload": b"forged bill",
               "created_at": int(time.time() * 1000)}
        sock.sendall(wire.frame({"data": {"messages": [msg]}}))
        try:
            kind, body = recv_frame(sock)
        except (EOFError, socket.timeout) as e:
            raise HarnessError(f"{as_id} forging {origin}: no Error frame "
                               f"({type(e).__name__}: {e})\n{p.log_tail()}")
        assert kind == "error", f"expected Error, got {kind}: {body}"
        sock.settimeout(IO_TIMEOUT)
        try:
            rest = sock.recv(65536)
        except (ssl.SSLError, ConnectionError):
            rest = b""
        except socket.timeout:
            raise HarnessError("P did not close the link after its Error")
        assert not rest, f"P sent more after its Error: {rest[:64].hex()}"
        return body["code"], body["text"]
    finally:
        raw.close()


def nothing_received(s):
    """(journal, tb_0030, tb_0033) rows of a server (0s before its DB)."""
    if not os.path.exists(s.db):
        return (0, 0, 0)
    return (s.journal_count(), s.received_count(),
            s.sql("SELECT count(*) FROM tb_0033")[0][0])


@test(timeout=120)
def forged_origin_through_relay_is_forbidden(t):
    p, (r1,), (s,), _ = make_relay(t, ["R1"], ["S"], extra_certs=["R2"])
    p.add_peer("R2")  # a known shop, not a trusted relay
    certs = p.certs
    p.start(timeout=READY_TIMEOUT)
    # S away: an accepted forgery would be stored at P.
    code, text = forge_through_relay(p, certs, "R2", "R1", "S", 1)
    assert code == wire.ERR_FORBIDDEN, (wire.ERROR_NAMES.get(code), text)
    print(f"     S away: {text}", flush=True)
    # P refuses on its network thread and frees the frame before any store
    # job: with the Error in hand, nothing of it can still be stored.
    assert copies(p) == 0, p.sql("SELECT origin, dest, seq FROM tb_0031")
    # S connected: an accepted forgery would be forwarded to S.
    s.start(timeout=READY_TIMEOUT)
    wait_until(lambda: link_ready(s, "P"), SHORT_TIMEOUT,
               "S connected to P", on_timeout=t.logs)
    code, text = forge_through_relay(p, certs, "R2", "R1", "S", 1)
    assert code == wire.ERR_FORBIDDEN, (wire.ERROR_NAMES.get(code), text)
    assert copies(p) == 0
    assert nothing_received(s) == (0, 0, 0), nothing_received(s)
    refused = [ln for ln in p.log_text().splitlines() if "refused" in ln
               and "R2" in ln]
    assert len(refused) >= 2, f"P logged no refusal of R2: {refused}"

    # The real R1 is served; S has nothing but R1's own messages.
    r1.start(timeout=READY_TIMEOUT)
    keys = enqueue_bulk(r1, "S", 10, 2)
    wait_confirmed(t, r1, "S", 10, SHORT_TIMEOUT)
    check_exactly_once(s, ["R1"], 10, keys=keys)
    assert s.journal_count() == 10
    assert {k for (k,) in s.sql("SELECT DISTINCT msg_key FROM journal")} \
        .isdisjoint({"forged"})
    for x in (r1, s, p):
        x.stop()


@test(timeout=120)
def server_without_trust_refuses_relayed_data(t):
    p, (r,), (s,), _ = make_relay(t, ["R"], ["S"], server_trusts=False)
    p.start(timeout=READY_TIMEOUT)
    s.start(timeout=READY_TIMEOUT)
    wait_until(lambda: link_ready(s, "P"), SHORT_TIMEOUT,
               "S connected to P", on_timeout=t.logs)
    r.start(timeout=READY_TIMEOUT)
    r.enqueue("S", type=2800, key="bill-1", payload=PAYLOAD)

    # S refuses on its network thread, before any store job; P carries the
    # message again after the close, and S refuses it again: past both,
    # nothing may have been taken.
    def refused():
        lines = [ln for ln in s.log_text().splitlines()
                 if "refused" in ln and "origin 'R'" in ln]
        return len(lines) >= 2 and lines or Pending(
            f"{len(lines)} refusals in S's log")
    lines = wait_until(refused, SHORT_TIMEOUT, "S refusing Data of origin "
                       "R carried by P, twice", on_timeout=t.logs)
    print(f"     S: {lines[0]}", flush=True)
    assert nothing_received(s) == (0, 0, 0), \
        f"S took relayed Data without trusting P: {nothing_received(s)}"
    assert out_row(r, "S", 1)[0] != 100, out_row(r, "S", 1)
    assert s.alive() and p.alive()
    for x in (r, s, p):
        x.stop()


# ---- 7. drain_rate ----------------------------------------------------------

def run_started_ms(node):
    """When node's current run started, by its own clock: the time stamp
    (ms since the epoch) of the first line it logged after its last start."""
    text = node.log_text()
    run = text[text.rindex("---- semqtest: start #"):]
    for ln in run.splitlines():
        m = re.match(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)"
                     r"\.(\d{3})Z ", ln)
        if m:
            y, mo, d, h, mi, sec, ms = map(int, m.groups())
            return calendar.timegm((y, mo, d, h, mi, sec)) * 1000 + ms
    raise HarnessError(f"{node.id}: no time-stamped line since its start\n"
                       f"{node.log_tail()}")


def check_paced(s, rate):
    """The drain limiter as S's own clock shows it. P's token bucket holds
    at most one second's worth (rate) and earns rate a second, and P cannot
    send S anything before S runs: by S's clock, the k-th effect at S (its
    journal's handled_at, never before P sent it) comes no earlier than
    (k - rate) / rate s after S's first log line. A slow machine only makes
    the effects later. Returns (seconds from S's start to its last effect,
    to its first)."""
    s0 = run_started_ms(s)
    at = [h for (h,) in s.sql("SELECT handled_at FROM journal ORDER BY "
                              "handled_at")]
    for k, h in enumerate(at, 1):
        # k <= rate + rate * (h - s0) / 1000, in integers.
        assert 1000 * k <= rate * (1000 + h - s0), \
            f"S took {k} messages within {h - s0} ms of its start at " \
            f"drain_rate {rate} (at most {rate * (1000 + h - s0) // 1000})"
    return (at[-1] - s0) / 1000.0, (at[0] - s0) / 1000.0


@test(timeout=180)
def relay_drains_no_faster_than_drain_rate(t):
    n = N_DRAIN
    # query_after stays long: an origin's query answered "not received"
    # would make it resend past P's queue, which is not what is measured.
    slow_query = {"query_after": "60s"}
    p, (r,), (s,), _ = make_relay(
        t, ["R"], ["S"],
        p_options=dict(slow_query, drain_rate=str(DRAIN_RATE)),
        origin_options=slow_query,
        server_options=slow_query)
    p.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    keys = enqueue_bulk(r, "S", n, 10)
    wait_held(t, p, [r], "S", n)
    s.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r, "S", n, BULK_TIMEOUT)
    check_exactly_once(s, ["R"], n, keys=keys)
    secs, first = check_paced(s, DRAIN_RATE)
    wait_relay_empty(t, p)
    wait_settled(t, s, "R", n)
    print(f"FIGURES: relay drain_rate={DRAIN_RATE}/s messages={n} "
          f"seconds={secs:.2f} (S's clock from its start; first effect "
          f"{first:.2f} s) msgs_per_s={n / max(secs, 1e-3):.0f} "
          f"least={(n - DRAIN_RATE) / DRAIN_RATE:.1f}s", flush=True)
    for x in (r, s, p):
        x.stop()


@test(timeout=180)
def origin_queries_do_not_overtake_drain_rate(t):
    """With query_after shorter than the drain, the origin queries its rows
    at status 6; S truthfully says "not received" for copies still queued at
    P, and P answers with its custody (RelayAck STORED) instead of passing
    that on, so the origin does not resend past P's drain_rate."""
    n = N_DRAIN
    quick = {"query_after": "1s"}
    p, (r,), (s,), _ = make_relay(
        t, ["R"], ["S"],
        p_options=dict(quick, drain_rate=str(DRAIN_RATE)),
        origin_options=quick,
        server_options=quick)
    p.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    keys = enqueue_bulk(r, "S", n, 10)
    wait_held(t, p, [r], "S", n)
    s.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r, "S", n, BULK_TIMEOUT)
    check_exactly_once(s, ["R"], n, keys=keys)
    resent = r.sql("SELECT count(*) FROM tb_0031 WHERE attempts > 1")[0][0]
    secs, _ = check_paced(s, DRAIN_RATE)
    print(f"FIGURES: relay drain_rate={DRAIN_RATE}/s query_after=1s "
          f"messages={n} seconds={secs:.2f} resent_by_origin={resent}",
          flush=True)
    assert resent == 0, f"the origin resent {resent} rows P still held"
    wait_relay_empty(t, p)
    for x in (r, s, p):
        x.stop()


if __name__ == "__main__":
    run()
