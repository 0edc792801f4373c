# SPDX-License-Identifier: MIT
"""Several receiver instances for one destination on PostgreSQL (issue #9,
SPEC §11).

Real semqd processes on loopback with real TLS certificates. The shops and
the platform keep their SQLite files; the server S1 runs as one, two or three
instances (`[node] instance = a|b|c`) on one PostgreSQL database (`db =
postgresql://...`, a fresh database per scenario, made on $SEMQ_TEST_PG_URL),
each with the journal plugin writing into that database. P1 spreads the
streams to S1 over the connected instances.

  1-3. spread_N_...: six shops R1..R6 send 20,000 messages over 200 keys
     (about 3,333 messages and 33 keys each) through P1 (relay,
     store-and-forward) to S1 with 1, 2 and 3 instances, all connected
     before the first message. In the 2-instance run the instance with the
     most work left on its streams is killed -9 at 40 % of the journal and
     stays down (its unfinished streams must move to the survivor); in the
     3-instance run the same kill is followed by a restart 3 s later. In
     both, a fifth of each shop's messages is inserted after the kill, so
     that its streams have work left however fast the instances went. Each
     run checks: every message took effect exactly once (one journal row per
     (origin, dest, seq)), in key order per stream; every shop row at 100;
     P1's tb_0031 empty; no tb_0033 entry other than done; every tb_0030 row
     acknowledged and every inbound watermark at the stream's count; until
     the kill every stream ran on one instance; after it, the killed
     instance's unfinished streams went on on another instance and the dead
     one wrote nothing more. It prints one line:

       PG_SPREAD: instances=N messages=M keys=K streams=6 effect=Ss (R/s)
         confirmed=Ss (R/s) [before_kill=R/s killed=INST@ROWSrows,
         session_gone=Ss,stayed_down|restarted_after=3s] share=INST:ROWS,...
         streams=R1:INST=ROWS+...;... hash_as_documented=yes|no

     effect = first enqueue -> last journal row, confirmed = first enqueue ->
     last shop row at 100, before_kill = journal rows per second until the
     kill, session_gone = kill -> the database ended the dead instance's
     session, share = journal rows per instance (the instance recorded in
     each row, see pgharness.tag_journal), streams = which instances worked
     on each stream, with row counts, hash_as_documented = every stream ran
     (until the kill) on the instance node/job.h's rendezvous hash names.
  4. same_copy_at_two_instances: a Python peer holding P1's certificate (P1
     is S1's trusted relay) connects to instances a and b and sends the same
     Data frame to both at the same moment, 300 times with new seqs (and
     keys with prev_seq chains). Every message has exactly one journal row,
     committed before an answer arrives (checked on five rounds in fifty);
     each instance answers PROCESSED (the second copy is answered with the
     verdict recorded for the first; SEMQ 0.1 answered DUPLICATE, which is
     still allowed from an instance that did not read the committed row);
     when one says PROCESSED and the other DUPLICATE the journal row is the
     first one's. An instance may also repeat the other's committed row with
     its recorded PROCESSED (its resynchronisation when P1 connects, or the
     periodic repeat) before its own answer to its copy; a late DUPLICATE
     is allowed once per message, only when the other instance wrote the
     journal row. Then the origin's 810-Responses
     (through the relay) make every row AS_OK and the watermark reach 300.
     Prints PG_RACE: ...
  4b. repeat_then_duplicate: the order test 4 must allow, made to happen:
     instance a records R1/S1/1; P1 then connects to b, which resends a's
     verdict (PROCESSED) as its resynchronisation, and answers its own copy
     of the message with the recorded verdict, PROCESSED too; one journal
     row, a's.
  5. kill_inside_batch: R1, R2 -> P1 -> S1 {a, b}. A psql session locks the
     journal table; the first instance whose plugin INSERT then waits on it
     (pg_stat_activity) is inside a batch, with its tb_0030 rows written and
     uncommitted (pg_locks) — it is killed -9 there and the lock released.
     The database ends its session, rolling the batch back, and the other
     instance takes the streams over: exactly once, nothing lost, every row
     confirmed. Prints PG_KILL_IN_BATCH: ... with the takeover time.

Without $SEMQ_TEST_PG_URL the test says so loudly and exits 77 (skipped).
SEMQ_PG_SCALE (0 < x <= 1, default 1) multiplies the message counts, for a
quicker run by hand.

Run by ctest as integration_pg_instances, or by hand:
  SEMQ_TEST_PG_URL=$(tools/pgcluster.sh start /tmp/pg) SEMQ_BUILD_DIR=build \\
      python3 tests/integration/test_pg_instances.py [NAME...]
"""

import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wire  # noqa: E402
from wire import client_context  # noqa: E402
from pgharness import (Pg, PgNode, PgSession, db_name_for,  # noqa: E402
                       instance_of, pg_url_or_skip, tag_journal)
from semqtest import (HarnessError, Pending, check_exactly_once,  # noqa: E402
                      connect, run, stream_instance, test, wait_until)

PG_URL = pg_url_or_skip("integration_pg_instances (several S1 instances on "
                        "one PostgreSQL database)")

SCALE = float(os.environ.get("SEMQ_PG_SCALE") or "1")
if not 0 < SCALE <= 1:
    sys.exit(f"SEMQ_PG_SCALE={SCALE}: must be in (0, 1]")


def scaled(n, floor):
    return max(floor, int(round(n * SCALE)))


def split(n, parts):
    """n as len(parts) near-equal shares: {part: share}."""
    q, r = divmod(n, len(parts))
    return {p: q + (1 if i < r else 0) for i, p in enumerate(parts)}


# Six shops: the relay's rendezvous hash puts their six streams 4:2 on two
# instances and 2:2:2 on three (four shops would be 3:1 and 2:1:1).
ORIGINS = ("R1", "R2", "R3", "R4", "R5", "R6")
N_MESSAGES = scaled(20000, 2000)  # runs 1-3, over all origins
N_KEYS = 200  # runs 1-3, over all origins
KILL_AT = 0.4  # share of the journal written when an instance is killed
RESTART_AFTER = 3.0  # seconds the killed instance of run 3 stays down
N_RACE = scaled(300, 100)  # test 4: rounds
RACE_KEYS = 8  # test 4: keys of the racing stream
N_BATCH_KILL = scaled(1500, 500)  # test 5: per origin
PAYLOAD = bytes(range(100))

# Fast timers, as in test_relay.py: short poll, quick in-doubt queries and
# reconnects, so a killed instance's messages are asked about within seconds.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}

RUN_TIMEOUT = 180.0  # a run's messages all at 100
STUCK_AFTER = 60.0  # no progress this long: the run hangs
IO_TIMEOUT = 15.0  # the Python peer waits for an answer
SETTLE_TIMEOUT = 60.0  # acks, watermarks, relay copies after the run

_base = Pg(PG_URL)


# ---- setup ------------------------------------------------------------------

class Deployment:
    """P1 (relay, store-and-forward, SQLite), shops (SQLite, dial P1, trust
    it, route default = P1) and S1 instances a, b, c... (PostgreSQL
    database `pg`, journal plugin, dial P1, trust it) in test t; nothing
    started."""

    def __init__(self, t, tag, origins, n_instances):
        self.t = t
        self.pg = _base.create_database(db_name_for(tag))
        certs = t.certs(["P1", "S1"] + list(origins))
        self.p1 = t.node("P1", certs, relay=True, store_and_forward=True,
                         journal=False, node_options=FAST)
        self.rs = []
        for o in origins:
            r = t.node(o, certs, listen=False, journal=False,
                       node_options=FAST, routes={"default": "P1"})
            connect(r, self.p1, dialer_trusts=True)
            self.rs.append(r)
        self.origins = [r.id for r in self.rs]
        self.insts = []
        for i in range(n_instances):
            s = PgNode("S1", "abc"[i], t.dir, certs, self.pg, listen=False,
                       node_options=FAST, routes={"default": "P1"})
            connect(s, self.p1, dialer_trusts=True)
            t.nodes.append(s)
            self.insts.append(s)
        self.apps = [s.app_name for s in self.insts]

    def start(self):
        """P1, the instances one by one (the journal tagged after the
        first), then the shops; returns once P1 has a ready link from every
        instance and every shop, so that the streams are spread over all
        instances from the first message on."""
        self.p1.start()
        for i, s in enumerate(self.insts):
            mark = ready_count(self.p1, "S1", s.instance)
            s.start(timeout=30)
            self.wait_linked(s, mark)
            if i == 0:
                tag_journal(self.pg)
        for r in self.rs:
            r.start()
        for r in self.rs:
            wait_until(lambda: ready_count(self.p1, r.id) > 0, 20,
                       f"P1 ready link from {r.id}", on_timeout=self.logs)

    def wait_linked(self, s, mark):
        """P1 logs a ready link from instance s beyond the first `mark`."""
        wait_until(lambda: ready_count(self.p1, "S1", s.instance) > mark,
                   20, f"P1 ready link from S1 instance {s.instance}",
                   on_timeout=self.logs)

    def logs(self):
        return self.t.logs(30)

    def enqueue(self, counts, nkeys, start=0):
        """The applications: counts[origin] messages on each shop in one
        transaction each, the i-th (from start, or start[origin]) with key
        i % nkeys[origin]. Returns {(origin, seq): key} of every message
        sent to S1 so far."""
        keys = {}
        for r in self.rs:
            first = start[r.id] if isinstance(start, dict) else start
            rows = [("S1", 1, f"{r.id}-k{i % nkeys[r.id]:03d}", PAYLOAD)
                    for i in range(first, first + counts[r.id])]
            c = r.connect_db(readonly=False)
            try:
                with c:
                    c.executemany("INSERT INTO tb_0031(dest, type, msg_key, "
                                  "payload) VALUES (?, ?, ?, ?)", rows)
                r.wait_numbered()
                for seq, k in c.execute("SELECT seq, msg_key FROM tb_0031 "
                                        "WHERE origin = ? AND dest = 'S1'",
                                        (r.id,)):
                    keys[(r.id, seq)] = k
            finally:
                c.close()
        return keys

    def confirmed(self):
        """Shop rows to S1 at status 100, over all shops."""
        return sum(r.sql("SELECT count(*) FROM tb_0031 WHERE dest = 'S1' "
                         "AND status = 100")[0][0] for r in self.rs)

    def rows_by_instance(self):
        """{(instance label, origin): journal rows}."""
        out = {}
        for by, o, n in self.pg.query("SELECT handled_by, origin, count(*) "
                                      "FROM journal GROUP BY 1, 2"):
            out[(instance_of(self.apps, by), o)] = int(n)
        return out

    def check_end_state(self, counts, keys):
        """The checks every scenario ends with (see the module text);
        counts: {origin: messages sent}."""
        res = check_exactly_once(self.insts[0], self.origins, counts,
                                 keys=keys)
        for r in self.rs:
            assert r.all_confirmed("S1", counts[r.id]), \
                f"{r.id}: {r.outbound_status_counts('S1')}"
        wait_until(lambda: self.p1.sql("SELECT count(*) FROM tb_0031")[0][0]
                   == 0 or Pending(self.p1.outbound_status_counts()),
                   SETTLE_TIMEOUT, "P1's tb_0031 empty", on_timeout=self.logs)
        redo = self.pg.query("SELECT status, count(*) FROM tb_0033 GROUP BY "
                             "status")
        bad = [(s, n) for s, n in redo if int(s) != 2]
        assert not bad, \
            f"tb_0033 entries pending/waiting/dead/discarded: {bad}; " + \
            str(self.pg.query("SELECT origin, seq, status, tries, "
                              "last_error FROM tb_0033 WHERE status <> 2 "
                              "LIMIT 20"))

        def settled():
            unacked = self.pg.int("SELECT count(*) FROM tb_0030 WHERE "
                                  "ack_status = 0")
            marks = dict(self.pg.query(
                "SELECT origin, confirmed_through FROM semq_stream_in WHERE "
                "dest = 'S1'"))
            ok = unacked == 0 and all(int(marks.get(o) or 0) == counts[o]
                                      for o in self.origins)
            return ok or Pending(f"tb_0030 unacked {unacked}, watermarks "
                                 f"{marks}")
        wait_until(settled, SETTLE_TIMEOUT, "every tb_0030 row acknowledged "
                   "and every watermark at the stream's count",
                   on_timeout=self.logs)
        res["redo_done"] = sum(int(n) for s, n in redo if int(s) == 2)
        return res

    def stop_all(self):
        """Every node still running stops cleanly (exit 0; ASan: no leak)."""
        for n in self.rs + self.insts + [self.p1]:
            if n.alive():
                n.stop(timeout=30)

    def drop(self):
        _base.drop_database(self.pg.name)


def ready_count(p1, peer, instance=None):
    """How many ready links of peer (of that instance) P1 has logged:
    peer.c logs "peer=ID ready (accepted, ADDR[, instance NAME], SOFTWARE,
    wire revision N)"."""
    if instance is None:
        pat = re.compile(rf"\bpeer={re.escape(peer)} .*\bready \(")
    else:
        pat = re.compile(rf"\bpeer={re.escape(peer)} .*\bready \([^)]*, "
                         rf"instance {re.escape(instance)}[,)]")
    return sum(1 for ln in p1.log_text().splitlines() if pat.search(ln))


def fmt_after(ms, t):
    """ms (unix ms, 0 = none) as seconds after t (unix s)."""
    return f"{(ms - t * 1000) / 1000:.2f}s" if ms else "none"


def max_acked_at(rs):
    return max(r.sql("SELECT max(acked_at) FROM tb_0031 WHERE dest = 'S1'")
               [0][0] or 0 for r in rs)


def session_gone(d, victim):
    """Waits until the database has ended the killed victim's session (a
    COMMIT it sent just before dying may still complete; nothing after
    this can). Returns the seconds it took."""
    t = time.monotonic()
    wait_until(lambda: not [b for b in d.pg.backends()
                            if b[1] == victim.app_name] or
               Pending(d.pg.backends()), 30,
               f"the database session of the killed {victim.app_name} gone",
               on_timeout=d.logs)
    return time.monotonic() - t


def stream_affinity(d, until_ms=None):
    """{origin: [instances]} that wrote rows of each stream (before
    until_ms, unix ms, when given)."""
    rows = d.pg.query("SELECT origin, handled_by FROM journal WHERE "
                      "handled_at < :'u' GROUP BY 1, 2 ORDER BY 1, 2",
                      u=until_ms if until_ms is not None else 1 << 62)
    out = {}
    for o, by in rows:
        out.setdefault(o, []).append(instance_of(d.apps, by))
    return out


def check_streams_moved(d, victim, t_kill, snap, counts):
    """The victim (killed at t_kill, down for good) had unfinished streams
    when its session ended (snap: rows_by_instance then); each went on on
    another instance after the kill, and the victim wrote nothing more.
    Returns those streams."""
    final = d.rows_by_instance()
    mine = sorted({o for (i, o) in snap if i == victim.app_name})
    unfinished = [o for o in mine if sum(
        v for (_, oo), v in snap.items() if oo == o) < counts[o]]
    assert unfinished, \
        f"the killed {victim.app_name} had no unfinished stream, so none " \
        f"had to move: at the kill {snap}"
    for o in unfinished:
        done = sum(v for (_, oo), v in snap.items() if oo == o)
        n = d.pg.int("SELECT count(*) FROM journal WHERE origin = :'o' AND "
                     "handled_by <> :'v' AND handled_at >= :'t'", o=o,
                     v=victim.app_name, t=int(t_kill * 1000))
        assert n > 0, \
            f"stream {o}->S1 of the killed {victim.app_name} ({done} of " \
            f"{counts[o]} done) was not continued by another instance: " \
            f"at the kill {snap}, at the end {final}"
    v_snap = sum(v for (i, _), v in snap.items() if i == victim.app_name)
    v_end = sum(v for (i, _), v in final.items() if i == victim.app_name)
    assert v_end == v_snap, \
        f"{victim.app_name} was dead but its rows went from {v_snap} to " \
        f"{v_end}"
    return unfinished


# ---- 1-3: spreading, throughput, a killed instance --------------------------

def spread_run(t, n, kill=None):
    """One run of R1..R6 -> P1 -> S1 x n. kill: None, "stay_down" or
    "restart": at KILL_AT of the journal, the instance with the most work
    left on its streams is killed -9 (and, for "restart", started again
    RESTART_AFTER seconds later)."""
    d = Deployment(t, f"spread{n}", ORIGINS, n)
    d.start()
    counts = split(N_MESSAGES, ORIGINS)
    total = N_MESSAGES
    t0 = time.time()
    nkeys = split(N_KEYS, ORIGINS)
    # with a kill, a fifth of each shop's messages waits for it: the
    # streams have work left then, however fast the instances went
    tail = {o: counts[o] // 5 if kill else 0 for o in ORIGINS}
    keys = d.enqueue({o: counts[o] - tail[o] for o in ORIGINS}, nkeys)

    # (victim, t_kill, seconds to its session's end, journal rows just
    # before the kill, rows_by_instance once its session had ended)
    killed = None
    restarted = False
    last_progress, last_seen = time.monotonic(), None
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        got = d.pg.int("SELECT count(*) FROM journal")
        conf = d.confirmed()
        now = time.monotonic()
        if (got, conf) != last_seen:
            last_seen, last_progress = (got, conf), now
        if kill and killed is None and got >= KILL_AT * total:
            # the instance with the most work left on the streams it has
            by = d.rows_by_instance()
            done = {}
            for (_, o), v in by.items():
                done[o] = done.get(o, 0) + v
            victim = max(d.insts, key=lambda s: sum(
                counts[o] - done[o] for (i, o) in by if i == s.app_name))
            # stamped before the signal: the victim's sockets close before
            # kill() has reaped it, and the other instances may take its
            # streams over at once
            t_kill = time.time()
            victim.kill()
            gone = session_gone(d, victim)
            killed = (victim, t_kill, gone, got, d.rows_by_instance())
            keys = d.enqueue(tail, nkeys, start={
                o: counts[o] - tail[o] for o in ORIGINS})
        if killed and kill == "restart" and not restarted and \
                time.time() >= killed[1] + RESTART_AFTER:
            mark = ready_count(d.p1, "S1", killed[0].instance)
            killed[0].start(timeout=30)
            d.wait_linked(killed[0], mark)
            restarted = True
        if got >= total and conf >= total and \
                (kill != "restart" or restarted):
            break
        if now > deadline or now - last_progress > STUCK_AFTER:
            why = "deadline" if now > deadline else \
                f"no progress for {now - last_progress:.0f} s"
            raise HarnessError(f"run with {n} instances: {got} of {total} "
                               f"journal rows, {conf} confirmed ({why})\n"
                               f"{d.logs()}")
        time.sleep(0.05)

    t_effect = (d.pg.int("SELECT max(handled_at) FROM journal") -
                t0 * 1000) / 1000
    t_confirm = (max_acked_at(d.rs) - t0 * 1000) / 1000
    res = d.check_end_state(counts, keys)

    # Until the kill (or to the end), every stream ran on one instance;
    # whether it is the one node/job.h's rendezvous hash names is printed.
    aff = stream_affinity(d, int(killed[1] * 1000) if killed else None)
    split_streams = {o: i for o, i in aff.items() if len(i) != 1}
    assert not split_streams, \
        f"streams worked on by several instances while none changed: " \
        f"{split_streams}"
    names = [s.instance for s in d.insts]
    predicted = {o: f"S1-{stream_instance(o, 'S1', names)}" for o in ORIGINS}
    as_predicted = all(aff[o] == [predicted[o]] for o in aff)

    by = d.rows_by_instance()
    line = (f"PG_SPREAD: instances={n} messages={total} keys={N_KEYS} "
            f"streams={len(ORIGINS)} effect={t_effect:.1f}s "
            f"({total / t_effect:.0f}/s) confirmed={t_confirm:.1f}s "
            f"({total / t_confirm:.0f}/s)")
    if killed:
        victim, t_kill, gone, at, snap = killed
        line += (f" before_kill={at / (t_kill - t0):.0f}/s "
                 f"killed={victim.app_name}@{at}rows,"
                 f"session_gone={gone:.2f}s,")
        line += (f"restarted_after={RESTART_AFTER:g}s" if kill == "restart"
                 else "stayed_down")
        if kill == "stay_down":
            check_streams_moved(d, victim, t_kill, snap, counts)
    share = {}
    for (i, _), v in by.items():
        share[i] = share.get(i, 0) + v
    line += " share=" + ",".join(f"{i}:{v}" for i, v in sorted(share.items()))
    line += " streams=" + ";".join(
        f"{o}:" + "+".join(f"{i}={v}" for (i, oo), v in sorted(by.items())
                           if oo == o) for o in ORIGINS)
    line += f" hash_as_documented={'yes' if as_predicted else 'no'}"
    if res["redo_done"]:
        line += f" redo_done={res['redo_done']}"
    print(line, flush=True)
    d.stop_all()
    d.drop()


@test(timeout=300)
def spread_1_instance(t):
    spread_run(t, 1)


@test(timeout=300)
def spread_2_instances_one_killed(t):
    spread_run(t, 2, kill="stay_down")


@test(timeout=300)
def spread_3_instances_one_killed_and_restarted(t):
    spread_run(t, 3, kill="restart")


# ---- 4: the same copy at two instances at once ------------------------------

class RelayPeer:
    """A TLS link to one instance, as the relay P1 (its certificate and a
    relay Hello)."""

    def __init__(self, node, ctx):
        raw = socket.create_connection(("127.0.0.1", node.listen_port),
                                       timeout=IO_TIMEOUT)
        try:
            self.sock = ctx.wrap_socket(raw)
        except BaseException:
            raw.close()
            raise
        self.node = node
        self.repeats = 0  # verdicts repeated for earlier messages
        self.first = {}  # seq -> the first verdict on it
        # seqs whose DUPLICATE (this instance's answer to its own copy)
        # came after a repeat of the other instance's PROCESSED row
        self.late_duplicates = []
        self.sock.sendall(wire.frame({"hello": {
            "node_id": "P1", "protocol_version": wire.PROTOCOL_VERSION,
            "role": wire.ROLE_RELAY, "features": 3, "max_frame": 1 << 20}}))
        kind, h = self.recv()
        if kind != "hello" or h["node_id"] != "S1":
            raise HarnessError(f"{node.app_name}: expected S1's Hello, got "
                               f"{kind}: {h}")

    def recv(self):
        """The next frame (kind, body); Pings are answered and skipped."""
        while True:
            kind, body = wire.decode_frame(wire.read_frame(self.sock))
            if kind != "ping":
                return kind, body
            self.sock.sendall(wire.frame({"pong": {
                "nonce": body["nonce"], "sent_at": body["sent_at"]}}))

    def verdict(self, seq):
        """The result of R1/S1/seq from the next AckIndication(s). Verdicts
        on earlier seqs are repeats (an 810-Indication is sent again while
        the 810-Response is missing): they are kept in self.repeats and must
        carry the recorded result, PROCESSED. The one exception: when the
        first verdict on a seq was such a repeat of the other instance's
        row, this instance's own answer to its copy, DUPLICATE, follows
        once (kept in self.late_duplicates, checked against the journal
        by the caller)."""
        got = None
        while got is None:
            try:
                kind, body = self.recv()
            except (EOFError, socket.timeout) as e:
                raise HarnessError(f"{self.node.app_name}: no verdict for "
                                   f"R1/S1/{seq}: {type(e).__name__}: {e}"
                                   f"\n{self.node.log_tail()}")
            if kind == "error":
                raise HarnessError(f"{self.node.app_name}: Error "
                                   f"{wire.ERROR_NAMES.get(body['code'])}: "
                                   f"{body['text']}")
            if kind != "ack_indication":
                raise HarnessError(f"{self.node.app_name}: unexpected "
                                   f"{kind}: {body}")
            for v in body["verdicts"]:
                i = v["id"]
                if (i["origin"], i["dest"]) != ("R1", "S1") or \
                        not 1 <= i["seq"] <= seq:
                    raise HarnessError(f"{self.node.app_name}: a verdict "
                                       f"on {i} while R1/S1/{seq} is the "
                                       f"last message sent: {body}")
                if i["seq"] == seq and got is None:
                    got = v["result"]
                    self.first[seq] = got
                elif v["result"] == wire.RESULT_PROCESSED:
                    self.repeats += 1
                elif v["result"] == wire.RESULT_DUPLICATE and \
                        self.first.get(i["seq"]) == wire.RESULT_PROCESSED \
                        and i["seq"] not in self.late_duplicates:
                    self.late_duplicates.append(i["seq"])
                else:
                    raise HarnessError(f"{self.node.app_name}: repeated "
                                       f"verdict {v['result']} on {i}, not "
                                       f"the recorded PROCESSED")
        return got

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def two_instances(t, pg):
    """S1 instances a and b on pg, P1 their trusted relay, started (the
    journal tagged with the writing instance); returns (certs, [a, b])."""
    certs = t.certs(["P1", "S1", "R1"])
    insts = []
    for name in ("a", "b"):
        s = PgNode("S1", name, t.dir, certs, pg, node_options=FAST)
        s.add_peer("P1", trusted_relay=True)
        t.nodes.append(s)
        insts.append(s)
    for i, s in enumerate(insts):
        s.start(timeout=30)
        if i == 0:
            tag_journal(pg)
    return certs, insts


@test(timeout=240)
def same_copy_at_two_instances(t):
    pg = _base.create_database(db_name_for("race"))
    certs, insts = two_instances(t, pg)
    apps = [s.app_name for s in insts]

    keys, frames = {}, {}
    now = int(time.time() * 1000)
    for seq in range(1, N_RACE + 1):
        k = f"race-k{seq % RACE_KEYS}"
        keys[("R1", seq)] = k
        frames[seq] = wire.frame({"data": {"messages": [{
            "origin": "R1", "dest": "S1", "seq": seq, "type": 7, "key": k,
            "prev_seq": seq - RACE_KEYS if seq > RACE_KEYS else 0,
            "payload": b"race %d" % seq, "created_at": now}]}})

    peers = [RelayPeer(s, client_context(certs, "P1")) for s in insts]
    verdicts = [{}, {}]
    errors = []
    barrier = threading.Barrier(2)

    def side(i):
        try:
            for seq in range(1, N_RACE + 1):
                barrier.wait(timeout=IO_TIMEOUT * 2)
                peers[i].sock.sendall(frames[seq])
                verdicts[i][seq] = peers[i].verdict(seq)
                # Every tenth round: the answer (processed, or duplicate of
                # the other's copy) came after the commit that made it true.
                if seq % 10 == i * 5 and pg.int(
                        "SELECT count(*) FROM journal WHERE origin = 'R1' "
                        "AND seq = :'s'", s=seq) != 1:
                    raise HarnessError(f"R1/S1/{seq}: answered "
                                       f"{verdicts[i][seq]} before a "
                                       f"journal row was committed")
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(f"{apps[i]}: {type(e).__name__}: {e}")
            barrier.abort()

    t0 = time.monotonic()
    threads = [threading.Thread(target=side, args=(i,)) for i in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=N_RACE * IO_TIMEOUT)
    seconds = time.monotonic() - t0
    if any(th.is_alive() for th in threads) or errors:
        for p in peers:
            p.close()
        raise HarnessError(f"race rounds failed: {errors}\n{t.logs(30)}")

    res = check_exactly_once(insts[0], ["R1"], N_RACE, keys=keys)
    writer = {int(s): by for s, by in pg.query(
        "SELECT seq, handled_by FROM journal WHERE origin = 'R1'")}
    allowed = {wire.RESULT_PROCESSED, wire.RESULT_DUPLICATE}
    pairs = {"processed+duplicate": 0, "processed+processed": 0}
    wins = {a: 0 for a in apps}
    bad = []
    for seq in range(1, N_RACE + 1):
        v = (verdicts[0][seq], verdicts[1][seq])
        if not set(v) <= allowed or wire.RESULT_PROCESSED not in v:
            bad.append(f"R1/S1/{seq}: {apps[0]} {v[0]}, {apps[1]} {v[1]}")
            continue
        if v[0] == v[1]:
            pairs["processed+processed"] += 1
            if writer[seq] not in apps:
                bad.append(f"R1/S1/{seq}: journal row by {writer[seq]!r}")
            continue
        pairs["processed+duplicate"] += 1
        won = apps[v.index(wire.RESULT_PROCESSED)]
        wins[won] += 1
        if writer[seq] != won:
            bad.append(f"R1/S1/{seq}: {won} answered PROCESSED, but the "
                       f"journal row was written by {writer[seq]!r}")
    for i, p in enumerate(peers):
        for seq in p.late_duplicates:
            if writer[seq] != apps[1 - i]:
                bad.append(f"R1/S1/{seq}: {apps[i]} answered PROCESSED, "
                           "then DUPLICATE, but the journal row was "
                           f"written by {writer[seq]!r}, not {apps[1 - i]}")
    assert not bad, "verdicts SPEC §6 does not allow:\n  " + \
        "\n  ".join(bad[:20])

    # The origin's 810-Responses, carried by the relay, to instance a only:
    # rows b recorded are acknowledged through a as well (one database).
    ids = [{"origin": "R1", "dest": "S1", "seq": s}
           for s in range(1, N_RACE + 1)]
    for i in range(0, len(ids), 100):
        peers[0].sock.sendall(wire.frame({"ack_response": {
            "ids": ids[i:i + 100], "from": "R1"}}))

    def settled():
        unacked = pg.int("SELECT count(*) FROM tb_0030 WHERE ack_status = 0")
        mark = pg.int("SELECT confirmed_through FROM semq_stream_in WHERE "
                      "origin = 'R1' AND dest = 'S1'")
        return (unacked == 0 and mark == N_RACE) or \
            Pending(f"unacked {unacked}, watermark {mark}")
    wait_until(settled, SETTLE_TIMEOUT, "every race row AS_OK, watermark at "
               f"{N_RACE}", on_timeout=lambda: t.logs(30))
    redo = pg.int("SELECT count(*) FROM tb_0033")
    assert redo == 0, pg.query("SELECT * FROM tb_0033 LIMIT 10")
    for p in peers:
        p.close()
    print(f"PG_RACE: rounds={N_RACE} journal_rows={res['total']} "
          f"processed+duplicate={pairs['processed+duplicate']} "
          f"processed+processed={pairs['processed+processed']} "
          f"won=" + ",".join(f"{a}:{w}" for a, w in wins.items()) +
          f" repeated_verdicts={sum(p.repeats for p in peers)}"
          f" late_duplicates={sum(len(p.late_duplicates) for p in peers)}"
          f" seconds={seconds:.1f}", flush=True)
    for s in insts:
        s.stop(timeout=30)
    _base.drop_database(pg.name)


@test(timeout=120)
def repeat_then_duplicate(t):
    pg = _base.create_database(db_name_for("resync"))
    certs, insts = two_instances(t, pg)
    frame = wire.frame({"data": {"messages": [{
        "origin": "R1", "dest": "S1", "seq": 1, "type": 7, "key": "k",
        "prev_seq": 0, "payload": b"resync", "created_at": 1}]}})
    a = RelayPeer(insts[0], client_context(certs, "P1"))
    a.sock.sendall(frame)
    got = a.verdict(1)
    assert got == wire.RESULT_PROCESSED, f"a answered {got}"
    b = RelayPeer(insts[1], client_context(certs, "P1"))
    b.sock.sendall(frame)
    got = b.verdict(1)
    assert got == wire.RESULT_PROCESSED, \
        f"b's first verdict {got}, not the resent PROCESSED of a's row"
    # Its answer to its own copy follows, and says what a's row recorded:
    # PROCESSED, as the repeat did (a second copy is answered with the
    # verdict recorded the first time, never a bare DUPLICATE; periodic
    # repeats may come in between). The socket's timeout bounds the wait.
    answers = 1
    while answers < 2:
        kind, body = b.recv()
        assert kind == "ack_indication", (kind, body)
        for v in body["verdicts"]:
            assert v["id"]["seq"] == 1 and \
                v["result"] == wire.RESULT_PROCESSED and \
                v["refusal"] == wire.REFUSAL_NONE, body
            answers += 1
    rows = pg.query("SELECT seq, handled_by FROM journal")
    assert [(int(r[0]), r[1]) for r in rows] == [(1, insts[0].app_name)], \
        rows
    for p in (a, b):
        p.close()
    for s in insts:
        s.stop(timeout=30)
    _base.drop_database(pg.name)


# ---- 5: kill -9 inside a batch ----------------------------------------------

@test(timeout=240)
def kill_inside_batch(t):
    d = Deployment(t, "batchkill", ("R1", "R2"), 2)
    d.start()
    half = N_BATCH_KILL // 2
    counts = {o: N_BATCH_KILL for o in d.origins}
    nkeys = {o: 20 for o in d.origins}
    total = sum(counts.values())
    # The first half takes effect; the second arrives while the journal is
    # locked, so the batch that receives it blocks in the plugin.
    d.enqueue({o: half for o in d.origins}, nkeys)
    wait_until(lambda: d.insts[0].journal_count() >= half * 2 or
               Pending(d.insts[0].journal_count()), RUN_TIMEOUT,
               "the first half in the journal", on_timeout=d.logs)

    lock = PgSession(d.pg)
    try:
        lock.run("BEGIN; LOCK TABLE journal IN EXCLUSIVE MODE")
        keys = d.enqueue({o: N_BATCH_KILL - half for o in d.origins}, nkeys,
                         start=half)

        def waiting_instance():
            for pid, app, state, wait, in_tx, q in d.pg.backends():
                if app in d.apps and wait == "Lock" and in_tx and \
                        "journal" in (q or "").lower():
                    return (pid, app)
            return Pending(d.pg.backends())
        pid, app = wait_until(waiting_instance, 20, "an instance's journal "
                              "INSERT waiting on the lock",
                              on_timeout=d.logs)
        # inside its batch: the received records it wrote are uncommitted
        held = d.pg.int("SELECT count(*) FROM pg_locks l JOIN pg_class c ON "
                        "c.oid = l.relation WHERE l.pid = :'pid' AND "
                        "c.relname = 'tb_0030' AND l.mode = "
                        "'RowExclusiveLock' AND l.granted", pid=pid)
        assert held, f"{app} (pid {pid}) waits on the journal without a " \
            f"write lock on tb_0030: not inside a receive batch?"
        victim = next(s for s in d.insts if s.app_name == app)
        victim.kill()
        t_kill = time.time()
        lock.run("ROLLBACK")
    finally:
        lock.close()

    # The server ends the dead client's session: its batch is rolled back.
    gone = session_gone(d, victim)
    at = d.insts[0].journal_count()
    snap = d.rows_by_instance()
    wait_until(lambda: d.insts[0].journal_count() >= total and
               d.confirmed() >= total or
               Pending(f"{d.insts[0].journal_count()} rows, "
                       f"{d.confirmed()} confirmed"), RUN_TIMEOUT,
               f"all {total} messages in effect and confirmed",
               on_timeout=d.logs)
    res = d.check_end_state(counts, keys)
    mine = check_streams_moved(d, victim, t_kill, snap, counts)
    survivor = next(s for s in d.insts if s is not victim)
    takeover = d.pg.int(
        "SELECT min(handled_at) FROM journal WHERE handled_by = :'s' AND "
        "handled_at >= :'t' AND origin = ANY (string_to_array(:'o', ','))",
        s=survivor.app_name, t=int(t_kill * 1000), o=",".join(mine))
    print(f"PG_KILL_IN_BATCH: messages={total} killed={app}@{at}rows "
          f"session_gone={gone:.2f}s streams_moved={'+'.join(mine)} "
          f"takeover={fmt_after(takeover, t_kill)} "
          f"journal_rows={res['total']} redo_done={res['redo_done']}",
          flush=True)
    d.stop_all()
    d.drop()


if __name__ == "__main__":
    run()
