# SPDX-License-Identifier: MIT
"""The "das" platform end to end (issue 18; the design notes' das 1.0).

Shops (R1..R5, SQLite) send through a forward-only platform P1 (SQLite,
`relay = yes`, `store_and_forward = no`, `[relay] relay_ack = no`,
`require_connected = S1`) to the server S1, which runs as up to three peer
instances (a, b, c) on one PostgreSQL database; S1 applies every document
with a plugin and exports documents into a second, external PostgreSQL
database (the notes' "data platform") with plugins/export. Real semqd
processes on loopback with real TLS certificates; both databases are made
on $SEMQ_TEST_PG_URL's cluster for each test and dropped when it passes.

Which plugin sees which document, and what "exactly once" means in each
database: semqd hands a message to ONE plugin (the first that lists its
type, else the first with `types = *`; node/plughost.c), so the documents
are split by type. Type 1 goes to the journal plugin, in S1's own database
and transaction, whose table has no unique constraint: a document applied
twice would show as a second row, so the journal proves exactly once for
the type-1 half. Type 2 goes to the export plugin, which commits into the
external database on its own connection, before and independently of S1's
transaction (no XA, as the notes say); its table's primary key (origin,
dest, seq) with ON CONFLICT DO NOTHING is what keeps a re-run from adding a
row, so the export database cannot show a second application as a second
row. For the type-2 half the test checks that the export table holds
exactly the documents sent — every one, with its type, key and payload,
and nothing else — and that S1 recorded each once (watermarks, tb_0030),
which is what the das notes ask of the data platform ("a unique constraint
in the data platform's tables"). The two halves share keys, so key order
runs across both plugins.

  1. refused_until_an_instance_is_up: P1 runs, no S1 instance does. R1
     dials P1 and is refused right after its Hello: its log has one WARN
     line `refused by P1 for now (DEST_UNAVAILABLE): no instance of S1 is
     connected to P1 ...`, saying the messages wait and P1 is dialled
     again with back-off; its link never becomes ready and its rows stay
     unsent while it keeps dialling (P1 counts every refusal in
     semq_connections_refused_total{reason="dest_unavailable"} and logs
     fewer lines than refusals). A Python peer with a shop's certificate
     gets Error code 9 (DEST_UNAVAILABLE) naming S1, and the link closes.
     Instance a starts: R1 connects and delivers every document once (in
     the journal or the export table, never twice). Then the decision that
     links already up stay up: a is killed -9, R1 sends more while no
     instance is up — its link to P1 is not closed and it is not refused
     again (its messages are answered UNREACHABLE and wait) — and once a
     is back every document is delivered once. No shop row is ever in
     status 6 (relay_ack = no) and P1 never holds a copy.
  2. five_shops_three_instances_one_killed: R1..R5 send 5,000 documents
     (1,000 each over 25 keys, types 1 and 2 alternating) to S1 with three
     instances up before the shops connect (P1 refuses nobody). When 40 %
     of the documents have taken effect, the instance with the most work
     left on its streams is killed -9, and the last fifth of each shop's
     documents is inserted (so that its streams have work left however fast
     the instances went); once another instance has applied a document of
     one of its streams, it is started again. At the end: every
     type-1 document exactly once in the journal, in key order per stream;
     every type-2 document in the export table, exactly the ones sent; no
     shop row ever seen in status 6 (sampled all along), every one at 100;
     P1's tb_0031 empty all along; S1's redo queue holds nothing but done
     entries, every tb_0030 row acknowledged and every watermark at the
     stream's count. Prints DAS: documents, seconds, and the kill.

Without $SEMQ_TEST_PG_URL the test says so loudly and exits 77 (skipped).
The export plugin is $EXPORT_SO, else SEMQ_BUILD_DIR/plugins/export.so.

Run by ctest as integration_das, or by hand:
  SEMQ_TEST_PG_URL=$(tools/pgcluster.sh start /tmp/pg) SEMQ_BUILD_DIR=build \\
      python3 tests/integration/test_das.py [NAME...]
"""

import os
import re
import socket
import ssl
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wire  # noqa: E402
from pgharness import (Pg, PgNode, db_name_for, pg_url_or_skip,  # noqa: E402
                       tag_journal)
from semqtest import (BUILD_DIR, HarnessError, Node, Pending,  # noqa: E402
                      admin_metric, connect, run, stream_instance, test,
                      wait_until)

PG_URL = pg_url_or_skip("integration_das (the das platform: a forward-only "
                        "relay in front of S1 instances on PostgreSQL)")

EXPORT_SO = os.environ.get("EXPORT_SO") or os.path.join(BUILD_DIR, "plugins",
                                                        "export.so")
JOURNAL_SO = os.environ.get("JOURNAL_SO") or os.path.join(BUILD_DIR,
                                                          "plugins",
                                                          "journal.so")
TYPE_JOURNAL, TYPE_EXPORT = 1, 2
ERR_DEST_UNAVAILABLE = 9  # Error.Code of proto/semq.proto

ORIGINS = ("R1", "R2", "R3", "R4", "R5")
N_DOCS = 5000  # test 2, over all shops
N_KEYS = 25  # test 2, per shop
KILL_AT = 0.4  # share of the documents applied when an instance is killed

# Fast timers: a message in flight on a killed instance is asked about
# within seconds, a refused shop dials again within a second.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}

RUN_TIMEOUT = 90.0  # test 2: every shop row at 100
STUCK_AFTER = 30.0  # no progress this long: the run hangs
SETTLE_TIMEOUT = 30.0
REFUSAL_LINE = re.compile(
    r" WARN +peer +peer=P1 refused by P1 for now \(DEST_UNAVAILABLE\): no "
    r"instance of S1 is connected to P1, a forward-only relay: .*; the "
    r"messages routed through it wait here, and it is dialled again with "
    r"back-off")

_base = Pg(PG_URL)


class Platform(Node):
    """A Node with a [relay] section (semqtest.Node writes none)."""

    def __init__(self, *a, relay_options=None, **kw):
        super().__init__(*a, **kw)
        self.relay_options = dict(relay_options or {})

    def config_text(self):
        text = super().config_text()
        if self.relay_options:
            text += "\n[relay]\n" + "".join(
                f"{k} = {v}\n" for k, v in self.relay_options.items())
        return text


class Das:
    """P1 (forward-only, relay_ack = no, require_connected = S1), shops
    dialling it, S1 instances a, b, c... dialling it, S1's database and the
    export database; nothing started."""

    def __init__(self, t, tag, origins, n_instances):
        if not os.path.exists(EXPORT_SO):
            raise HarnessError(f"the export plugin {EXPORT_SO} is not built "
                               f"(cmake --build: target export)")
        self.t = t
        self.pg = _base.create_database(db_name_for(tag))
        self.xpg = _base.create_database(db_name_for(tag + "_export"))
        self.certs = t.certs(["P1", "S1", "R9"] + list(origins))
        self.p1 = Platform("P1", t.dir, self.certs, relay=True,
                           store_and_forward=False, journal=False,
                           admin=True, node_options=FAST,
                           relay_options={"relay_ack": "no",
                                          "require_connected": "S1"})
        t.nodes.append(self.p1)
        self.rs = []
        for o in origins:
            r = t.node(o, self.certs, listen=False, journal=False,
                       node_options=FAST, routes={"default": "P1"})
            connect(r, self.p1, dialer_trusts=True)
            self.rs.append(r)
        self.insts = []
        for i in range(n_instances):
            s = PgNode("S1", "abc"[i], t.dir, self.certs, self.pg,
                       listen=False, journal=False, node_options=FAST,
                       routes={"default": "P1"}, plugins={
                           "journal": {"path": JOURNAL_SO,
                                       "types": [TYPE_JOURNAL]},
                           "export": {"path": EXPORT_SO,
                                      "types": [TYPE_EXPORT],
                                      "conninfo": self.xpg.url}})
            connect(s, self.p1, dialer_trusts=True)
            t.nodes.append(s)
            self.insts.append(s)
        self.apps = [s.app_name for s in self.insts]
        self.sent = {}  # (origin, seq) -> (type, key, payload)
        self.tagged = False

    def logs(self):
        return self.t.logs(30)

    def start_instance(self, s):
        """Starts s and waits until P1 has a ready link from it; the first
        time, tags the journal with the writing instance."""
        mark = ready_count(self.p1, "S1", s.instance)
        s.start(timeout=30)
        wait_until(lambda: ready_count(self.p1, "S1", s.instance) > mark,
                   20, f"P1 ready link from S1 instance {s.instance}",
                   on_timeout=self.logs)
        if not self.tagged:
            tag_journal(self.pg)
            wait_until(lambda: self.xpg.has_table("semq_export"), 20,
                       "the export plugin's table semq_export",
                       on_timeout=self.logs)
            self.tagged = True

    def enqueue(self, r, n, nkeys):
        """n documents on shop r in one transaction (the application's),
        the i-th of its stream with key i % nkeys, type 1 and 2
        alternating; remembered in self.sent."""
        first = sum(1 for (o, _) in self.sent if o == r.id)
        rows = []
        for i in range(first, first + n):
            typ = TYPE_JOURNAL if i % 2 == 0 else TYPE_EXPORT
            rows.append(("S1", typ, f"{r.id}-k{i % nkeys:02d}",
                         f"doc {r.id} #{i}".encode()))
        c = r.connect_db(readonly=False)
        try:
            with c:
                c.executemany("INSERT INTO tb_0031(dest, type, msg_key, "
                              "payload) VALUES (?, ?, ?, ?)", rows)
            r.wait_numbered()
            for seq, typ, k, p in c.execute(
                    "SELECT seq, type, msg_key, payload FROM tb_0031 WHERE "
                    "origin = ? AND dest = 'S1'", (r.id,)):
                self.sent[(r.id, seq)] = (typ, k, bytes(p))
        finally:
            c.close()

    def counts(self):
        return {r.id: sum(1 for (o, _) in self.sent if o == r.id)
                for r in self.rs}

    def applied(self):
        """Journal rows + export rows."""
        n = self.pg.int("SELECT count(*) FROM journal")
        return n + self.xpg.int("SELECT count(*) FROM semq_export")

    def confirmed(self):
        return sum(r.sql("SELECT count(*) FROM tb_0031 WHERE dest = 'S1' "
                         "AND status = 100")[0][0] for r in self.rs)

    def no_relay_ack(self):
        """relay_ack = no: no shop row is ever in status 6, and P1, which
        does not store, holds no copy. Raises otherwise."""
        for r in self.rs:
            n = r.sql("SELECT count(*) FROM tb_0031 WHERE status = 6")[0][0]
            if n:
                raise HarnessError(f"{r.id}: {n} rows in status 6 (relay "
                                   f"acknowledged) with relay_ack = no: "
                                   f"{r.outbound_status_counts()}")
        n = self.p1.sql("SELECT count(*) FROM tb_0031")[0][0]
        if n:
            raise HarnessError(f"P1 (forward-only) holds {n} rows in "
                               f"tb_0031")

    def check_documents(self):
        """Type 1: each exactly once in the journal, nothing else, in key
        order per stream. Type 2: the export table holds exactly them, with
        their type, key and payload. Returns (journal rows, export rows)."""
        want_j = {k: v for k, v in self.sent.items() if v[0] == TYPE_JOURNAL}
        want_x = {k: v for k, v in self.sent.items() if v[0] == TYPE_EXPORT}
        problems = []
        seen = {}
        last = {}
        for jid, o, d, seq, typ, k in self.pg.query(
                "SELECT id, origin, dest, seq, type, msg_key FROM journal "
                "ORDER BY id"):
            mid = (o, int(seq))
            seen.setdefault(mid, []).append(jid)
            w = want_j.get(mid)
            if d != "S1" or w is None or int(typ) != TYPE_JOURNAL or \
                    k != w[1]:
                problems.append(f"journal row {jid} {o}/{d}/{seq} type "
                                f"{typ} key {k}: not a type-1 document "
                                f"sent (sent: {w})")
                continue
            if len(seen[mid]) == 1:
                p = last.get((o, k))
                if p is not None and p > int(seq):
                    problems.append(f"key {k}: {o}/S1/{seq} applied after "
                                    f"seq {p}")
                last[(o, k)] = int(seq)
        dups = {m: j for m, j in seen.items() if len(j) > 1}
        missing = sorted(set(want_j) - set(seen))
        if dups:
            problems.append(f"{len(dups)} documents applied more than once "
                            f"in the journal: "
                            f"{sorted(dups.items())[:10]}")
        if missing:
            problems.append(f"{len(missing)} type-1 documents missing from "
                            f"the journal: {missing[:10]}")
        xrows = self.xpg.query("SELECT origin, dest, seq, type, msg_key, "
                               "encode(payload, 'hex') FROM semq_export")
        got_x = {}
        for o, d, seq, typ, k, hexp in xrows:
            mid = (o, int(seq))
            got_x[mid] = (d, int(typ), k, bytes.fromhex(hexp or ""))
        for mid, (typ, k, p) in want_x.items():
            g = got_x.get(mid)
            if g is None:
                problems.append(f"export: {mid[0]}/S1/{mid[1]} missing")
            elif g != ("S1", typ, k, p):
                problems.append(f"export: {mid[0]}/S1/{mid[1]} is {g}, "
                                f"sent {(typ, k, p)}")
        extra = sorted(set(got_x) - set(want_x))
        if extra:
            problems.append(f"export: {len(extra)} rows not of a type-2 "
                            f"document sent: {extra[:10]}")
        if problems:
            raise HarnessError("documents:\n  " + "\n  ".join(
                problems[:30]) + f"\n{self.logs()}")
        return len(seen), len(xrows)

    def check_settled(self):
        """Every shop row at 100, S1's redo queue only done entries, every
        tb_0030 row acknowledged, every watermark at the stream's count."""
        counts = self.counts()
        for r in self.rs:
            assert r.all_confirmed("S1", counts[r.id]), \
                f"{r.id}: {r.outbound_status_counts('S1')}"
        bad = self.pg.query("SELECT origin, seq, status, tries, last_error "
                            "FROM tb_0033 WHERE status <> 2 LIMIT 20")
        assert not bad, f"S1's tb_0033 entries not done: {bad}"

        def settled():
            unacked = self.pg.int("SELECT count(*) FROM tb_0030 WHERE "
                                  "ack_status = 0")
            marks = dict(self.pg.query(
                "SELECT origin, confirmed_through FROM semq_stream_in WHERE "
                "dest = 'S1'"))
            ok = unacked == 0 and all(int(marks.get(o) or 0) == counts[o]
                                      for o in counts)
            return ok or Pending(f"tb_0030 unacked {unacked}, watermarks "
                                 f"{marks}, sent {counts}")
        wait_until(settled, SETTLE_TIMEOUT, "every tb_0030 row acknowledged "
                   "and every watermark at the stream's count",
                   on_timeout=self.logs)

    def stop_all(self):
        for n in self.rs + self.insts + [self.p1]:
            if n.alive():
                n.stop(timeout=30)

    def drop(self):
        _base.drop_database(self.pg.name)
        _base.drop_database(self.xpg.name)


def ready_count(p1, peer, instance=None):
    """Ready links of peer (of that instance) P1 has logged (peer.c: "peer=ID
    ready (accepted, ADDR[, instance NAME], ...)")."""
    if instance is None:
        pat = re.compile(rf"\bpeer={re.escape(peer)} .*\bready \(")
    else:
        pat = re.compile(rf"\bpeer={re.escape(peer)} .*\bready \([^)]*, "
                         rf"instance {re.escape(instance)}[,)]")
    return sum(1 for ln in p1.log_text().splitlines() if pat.search(ln))


def refused_metric(p1):
    return admin_metric(p1, "semq_connections_refused_total",
                        reason="dest_unavailable")


def probe_refused(d, cert_id="R9"):
    """A Python peer with a shop's certificate says Hello to P1: the answer
    must be Error DEST_UNAVAILABLE naming S1, fatal, then the end of the
    link (no Hello of P1's). Returns the Error's text."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # node certificates name ids, not hosts
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(d.certs.ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(d.certs.crt(cert_id), d.certs.key(cert_id))
    raw = socket.create_connection(("127.0.0.1", d.p1.listen_port),
                                   timeout=10)
    sock = ctx.wrap_socket(raw)
    try:
        sock.sendall(wire.frame({"hello": {
            "node_id": cert_id, "protocol_version": wire.PROTOCOL_VERSION,
            "role": wire.ROLE_EDGE, "max_frame": 1 << 20}}))
        kind, body = wire.decode_frame(wire.read_frame(sock))
        assert kind == "error", f"P1 answered the Hello with {kind}: {body}"
        assert body["code"] == ERR_DEST_UNAVAILABLE and body["fatal"], \
            f"P1's Error: {body}"
        assert "no instance of S1 is connected to P1" in body["text"], body
        try:
            more = wire.read_frame(sock)
        except (EOFError, ConnectionError, ssl.SSLError):
            more = None
        assert more is None, f"P1 sent more after its Error: {more!r}"
        return body["text"]
    finally:
        sock.close()


def lines(node, pat):
    return [ln for ln in node.log_text().splitlines() if pat.search(ln)]


# ---- 1: refused while no instance is up ------------------------------------

@test(timeout=120)
def refused_until_an_instance_is_up(t):
    d = Das(t, "das_refuse", ("R1",), 1)
    r1, a = d.rs[0], d.insts[0]
    d.p1.start()
    t0 = time.monotonic()
    r1.start()
    d.enqueue(r1, 20, 4)

    # R1 is refused, says so once, keeps its rows and keeps dialling.
    wait_until(lambda: lines(r1, REFUSAL_LINE), 20,
               "R1's WARN line: refused by P1 (DEST_UNAVAILABLE)",
               on_timeout=d.logs)
    wait_until(lambda: refused_metric(d.p1) >= 4 or Pending(
        refused_metric(d.p1)), 20, "P1 refused R1 four times (R1 dials "
        "again with back-off)", on_timeout=d.logs)
    text = probe_refused(d)
    n_refused = refused_metric(d.p1)
    phase = time.monotonic() - t0
    r_lines = lines(r1, re.compile(r"DEST_UNAVAILABLE"))
    assert len(r_lines) <= 1 + int(phase / 10), \
        f"R1 logged {len(r_lines)} refusal lines in {phase:.1f} s (one per " \
        f"10 s at most): {r_lines}"
    p_lines = lines(d.p1, re.compile(r"refused '(R1|R9)' after its Hello"))
    assert 1 <= len(p_lines) < n_refused, \
        f"P1: {len(p_lines)} refusal lines for {n_refused:g} refusals " \
        f"(rate-limited: fewer lines than refusals): {p_lines}"
    assert ready_count(r1, "P1") == 0, "R1's link to P1 became ready"
    assert r1.outbound_status_counts("S1") == {0: 20}, \
        f"R1 sent while refused: {r1.outbound_status_counts('S1')}"
    print(f"DAS_REFUSED: {n_refused:g} refusals in {phase:.1f} s, R1 logged "
          f"{len(r_lines)} line(s), P1 {len(p_lines)}; Error text: {text}",
          flush=True)

    # An instance starts: R1 gets in and delivers each document once.
    d.start_instance(a)
    r1.wait_all_confirmed("S1", 20, timeout=30)
    d.no_relay_ack()
    d.check_documents()
    d.check_settled()
    refused_before = refused_metric(d.p1)

    # The last instance goes: links already up stay up, nobody is refused
    # anew; what R1 sends meanwhile waits and is delivered once a is back.
    r1_ready = ready_count(d.p1, "R1")
    gone = re.compile(r"\bpeer=S1 ready: ")  # peer.c: a ready link closed
    n_gone = len(lines(d.p1, gone))
    a.kill()
    wait_until(lambda: len(lines(d.p1, gone)) > n_gone, 10,
               "P1 noticed that S1 instance a is gone", on_timeout=d.logs)
    d.enqueue(r1, 10, 4)
    wait_until(lambda: r1.sql("SELECT count(*) FROM tb_0031 WHERE status = "
                              "0 AND attempts > 0 AND last_error IS NOT "
                              "NULL")[0][0] > 0 or
               Pending(r1.outbound_status_counts("S1")), 15,
               "R1's new messages answered UNREACHABLE by P1 (no instance)",
               on_timeout=d.logs)
    d.no_relay_ack()
    assert ready_count(d.p1, "R1") == r1_ready and \
        refused_metric(d.p1) == refused_before, \
        "R1's link was closed or R1 refused while no instance was up"
    d.start_instance(a)
    r1.wait_all_confirmed("S1", 30, timeout=30)
    d.no_relay_ack()
    nj, nx = d.check_documents()
    d.check_settled()
    assert (nj, nx) == (15, 15), (nj, nx)
    d.stop_all()
    d.drop()


# ---- 2: five shops, three instances, one killed -9 --------------------------

@test(timeout=180)
def five_shops_three_instances_one_killed(t):
    d = Das(t, "das_kill", ORIGINS, 3)
    d.p1.start()
    for s in d.insts:
        d.start_instance(s)
    for r in d.rs:
        r.start()
    for r in d.rs:
        wait_until(lambda: ready_count(d.p1, r.id) > 0, 20,
                   f"P1 ready link from {r.id}", on_timeout=d.logs)
    t0 = time.time()
    # a fifth of each shop's documents waits for the kill: the victim's
    # streams have work left then, however fast the instances went
    per_shop = N_DOCS // len(ORIGINS)
    tail = per_shop // 5
    for r in d.rs:
        d.enqueue(r, per_shop - tail, N_KEYS)
    counts = {o: per_shop for o in ORIGINS}
    names = [s.instance for s in d.insts]
    owner = {o: stream_instance(o, "S1", names) for o in ORIGINS}

    victim = t_kill = at_kill = restarted = taken_over = None
    last, last_change = None, time.monotonic()
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        d.no_relay_ack()
        got, conf = d.applied(), d.confirmed()
        now = time.monotonic()
        if (got, conf) != last:
            last, last_change = (got, conf), now
        if victim is None and got >= KILL_AT * N_DOCS:
            # the instance with the most work left on its streams
            done = dict((o, int(n)) for o, n in d.pg.query(
                "SELECT origin, count(*) FROM journal GROUP BY 1"))
            left = {s: sum(counts[o] - 2 * done.get(o, 0) for o in ORIGINS
                           if owner[o] == s.instance) for s in d.insts}
            victim = max(d.insts, key=lambda s: left[s])
            victim.kill()
            t_kill, at_kill = time.time(), got
            assert got < N_DOCS, "the run was over before the kill"
            for r in d.rs:
                d.enqueue(r, tail, N_KEYS)
        if victim is not None and restarted is None:
            # another instance took one of the victim's streams over
            mine = [o for o in ORIGINS if owner[o] == victim.instance]
            n = d.pg.int("SELECT count(*) FROM journal WHERE handled_by <> "
                         ":'v' AND handled_at >= :'t' AND origin = ANY("
                         ":'o'::text[])", v=victim.app_name,
                         t=int(t_kill * 1000),
                         o="{" + ",".join(mine) + "}") if mine else 0
            if n or conf >= N_DOCS:
                taken_over = n
                d.start_instance(victim)
                restarted = time.time()
        if conf >= N_DOCS and got >= N_DOCS and restarted:
            break
        if now > deadline or now - last_change > STUCK_AFTER:
            why = "deadline" if now > deadline else "no progress"
            raise HarnessError(f"{got} of {N_DOCS} applied, {conf} "
                               f"confirmed ({why})\n{d.logs()}")
        time.sleep(0.1)
    t_done = time.time() - t0
    d.no_relay_ack()
    nj, nx = d.check_documents()
    assert nj + nx == N_DOCS, (nj, nx)
    d.check_settled()
    assert refused_metric(d.p1) == 0, \
        "P1 refused a peer although S1 instances were up"
    mine = [o for o in ORIGINS if owner[o] == victim.instance]
    assert not mine or taken_over, \
        f"no other instance went on with {victim.app_name}'s streams {mine}"
    print(f"DAS: shops={len(ORIGINS)} instances=3 documents={N_DOCS} "
          f"(journal {nj}, export {nx}) all_confirmed={t_done:.1f}s "
          f"killed={victim.app_name}@{at_kill} "
          f"({t_kill - t0:.1f}s, streams {','.join(mine) or 'none'}) "
          f"restarted_after={restarted - t_kill:.1f}s", flush=True)
    d.stop_all()
    d.drop()


if __name__ == "__main__":
    run()
