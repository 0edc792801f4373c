# SPDX-License-Identifier: MIT
"""Who may say "not delivered", and how far a message may travel (issue #17;
docs/ARCHITECTURE.md, "Limits": "Who may say 'not delivered'" and "Relays a
message may pass").

Real semqd processes on loopback with real TLS certificates and SQLite
files; the third peers and the tap below are this script, speaking the wire
protocol (wire.py, proto/semq.proto) over real TLS with certificates of the
test CA.

  1. relay_ack_unreachable_from_third_peer_ignored — R -> P (relay,
     store_and_forward) -> S, S offline: R's 20 rows sit at status 6 with P
     as their custodian. X, a CA-signed peer configured at R ([peer X], not
     a trusted relay) but not the hop R's stream goes to, connects to R and
     sends RelayAck(UNREACHABLE) about those ids with every reason its
     rights allow (none, NOT_CONNECTED, QUOTA, DISK_FULL, TOO_BIG,
     NOT_A_RELAY, and about_query); then Y, a third peer R does trust as a
     relay, sends UNREACHABLE with every reason (UNKNOWN_DEST and LOOP,
     which would put them dead, included) and the custody claims STORED and
     FORWARDED. R ignores all of it and logs that it did: each of R's rows
     stays exactly as it was (status 6, custodian P, attempts, next attempt,
     last_error), nothing goes to R's redo queue, P keeps its copies. So
     does each third peer's link coming up, before any frame of its: what
     R resynchronises then is what goes through that peer, none of these
     rows (docs/PROTOCOL.md, the handshake; R runs with query_after 30 min
     and custody_query_after 2 h, so that no query of R's own moves a row
     while the test looks). Every finding is collected and reported. The
     moment R has certainly handled a peer's frames is an answer of R's
     store thread on the same connection: a Query about a message of the
     peer's own, whose QueryReply leaves R only after the commit of the
     batch that handled every frame sent before it (a Pong would not do: R
     answers Ping on its network thread, before the store has seen the
     frames ahead of it). X's RelayAcks that would put a message dead
     (UNKNOWN_DEST, LOOP) are refused on R's network thread with
     Error(FORBIDDEN) (X is not a trusted relay). Then S starts: every
     document is applied exactly once, and R sent none of them twice.
  2. relay_loop_ends_at_hop_limit — three relays P1 -> P2 -> P3 -> P1
     (each dials the next; every [route] NOWHERE names the next relay;
     max_hops = 4 on every node); R sends one message to NOWHERE through
     P1. It passes P1, P2, P3, P1 (hops 1..4) and the relay that would let
     it pass a fifth time (P2) refuses it: RelayAck(UNREACHABLE, LOOP), its
     /metrics count semq_relay_refused_total{reason="loop"} 1 (0 on the
     others); R puts it dead ("undeliverable ... a routing loop") in its
     tb_0033 (`semqctl redo list --json`), the row held (8), sent once.
     The link P3 -> P1, which closes the ring, runs through a frame tap (a
     TLS-terminating relay of this script holding both ends' certificates)
     that decodes every frame crossing it. What is checked for "the loop
     ended": no relay holds a copy (tb_0031, semq_custody empty on P1, P2,
     P3); the Data crossed P3 -> P1 once, with hops 3; and no frame about
     that message — Data, RelayAck, AckResponse, Query, anything naming its
     id — keeps going round: after two more messages went R -> P1 -> P2 ->
     P3 -> S and back (the ring carries traffic), the frames naming it that
     crossed the tap are at most max_hops of each kind (each frame about a
     message may pass at most max_hops relays, so it crosses one link of a
     ring of three at most twice). A frame circling for ever makes
     hundreds by then. Prints FIGURES: hops, the refusing relay, the
     frames about the message that crossed the tap, by kind.

Nothing is timed: every step waits for an event (a row, a log line, a
metric, a frame) with a generous limit. Each test prints a FIGURES line.

Run by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_relay_bounds.py [NAME]
"""

import os
import random
import select
import socket
import ssl
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wire  # noqa: E402
from wire import client_context  # noqa: E402
from relaytest import (FAST, READY_TIMEOUT, SHORT_TIMEOUT,  # noqa: E402
                       duplicate_journal_rows, enqueue_bulk, link_ready,
                       make_relay, wait_confirmed, wait_held,
                       wait_relay_empty, wait_row)
from semqtest import (HarnessError, Pending, admin_metric,  # noqa: E402
                      check_exactly_once, free_port, log_lines, run, test,
                      wait_log, wait_until)

IO_TIMEOUT = 20.0  # one step of a Python peer
U64 = (1 << 64) - 1

# RelayAck.Kind and RelayRefusal of proto/semq.proto
FORWARDED = wire.RELAY_FORWARDED
STORED = wire.RELAY_STORED
UNREACHABLE = wire.RELAY_UNREACHABLE
NONE, NOT_CONNECTED, QUOTA, DISK_FULL = 0, 1, 2, 3
UNKNOWN_DEST, TOO_BIG, NOT_A_RELAY, LOOP = 4, 5, 6, 7
REASON_NAMES = {NONE: "none", NOT_CONNECTED: "NOT_CONNECTED",
                QUOTA: "QUOTA", DISK_FULL: "DISK_FULL",
                UNKNOWN_DEST: "UNKNOWN_DEST", TOO_BIG: "TOO_BIG",
                NOT_A_RELAY: "NOT_A_RELAY", LOOP: "LOOP"}
FEATURE_RELAY = 1


def _wire_field(msg, number, field):
    """Fields of semq.proto that wire.SCHEMA may not list yet (RelayAck
    reason and about_query, Message.hops): added here for this process, the
    same numbers and types as the .proto."""
    have = wire.SCHEMA[msg].get(number)
    if have is None:
        wire.SCHEMA[msg][number] = field
    elif have != field:
        raise HarnessError(f"wire.SCHEMA[{msg!r}][{number}] is {have}, "
                           f"semq.proto says {field}")


_wire_field("RelayAck", 4, ("reason", "enum", False))
_wire_field("RelayAck", 5, ("about_query", "bool", False))
_wire_field("Message", 15, ("hops", "uint32", False))


# ---- logs and metrics -------------------------------------------------------

def loop_refusals(node):
    return admin_metric(node, "semq_relay_refused_total", reason="loop")


# ---- TLS from Python --------------------------------------------------------

def server_context(certs, cert_id):
    """TLS 1.3 server presenting cert_id's certificate, requiring a client
    certificate of the test CA (as semqd does)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(certs.ca)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(certs.crt(cert_id), certs.key(cert_id))
    ctx.num_tickets = 0  # semqd never resumes a session
    return ctx


def random_life():
    """A life as a database gets one: random 64 bits, never 0 or 1."""
    while True:
        life = random.getrandbits(64)
        if life > 1:
            return life


class WirePeer:
    """A CA-signed peer of node, written in Python: TLS as peer_id, its
    Hello (wire revision 2, a relay) exchanged. It answers Pings; frames it
    does not wait for are kept in .seen."""

    def __init__(self, node, certs, peer_id):
        self.id = peer_id
        self.node_id = node.id
        self.life = random_life()
        self.next_query = 1
        self.seen = []
        raw = socket.create_connection(("127.0.0.1", node.listen_port),
                                       timeout=IO_TIMEOUT)
        try:
            self.sock = client_context(certs, peer_id).wrap_socket(raw)
        except BaseException:
            raw.close()
            raise
        self.send({"hello": {"node_id": peer_id,
                             "protocol_version": wire.PROTOCOL_VERSION,
                             "role": wire.ROLE_RELAY,
                             "features": FEATURE_RELAY,
                             "max_frame": 1 << 20, "life": self.life,
                             "wire_revision": wire.WIRE_REVISION,
                             "software": "test_relay_bounds"}})
        kind, body = self.recv()
        if kind != "hello" or body["node_id"] != node.id:
            raise HarnessError(f"{peer_id}: expected {node.id}'s Hello, got "
                               f"{kind} {body}")

    def send(self, body):
        self.sock.sendall(wire.frame(body))

    def recv(self):
        kind, body = wire.decode_frame(wire.read_frame(self.sock))
        if kind == "ping":
            self.send({"pong": {"nonce": body["nonce"],
                                "sent_at": body["sent_at"]}})
        return kind, body

    def barrier(self):
        """Asks the node about a message of this peer's own (a Query its
        store thread answers) and returns once the QueryReply arrived. The
        frames of one connection reach the store thread in order and an
        answer leaves only after the commit of its batch: every frame this
        peer sent before has been handled and its effect committed."""
        seq = self.next_query
        self.next_query += 1
        self.send({"query": {"ids": [{"origin": self.id,
                                      "dest": self.node_id, "seq": seq,
                                      "life": self.life}]}})
        while True:
            kind, body = self.recv()
            if kind == "query_reply" and any(
                    a["id"]["origin"] == self.id and a["id"]["seq"] == seq
                    for a in body["answers"]):
                return body
            if kind == "error":
                raise HarnessError(f"{self.id}: {self.node_id} sent Error "
                                   f"{wire.ERROR_NAMES.get(body['code'])}: "
                                   f"{body['text']}")
            self.seen.append((kind, body))

    def error(self):
        """Reads until the node's Error frame; returns (code, text). Raises
        when the link closes without one."""
        while True:
            try:
                kind, body = self.recv()
            except EOFError as e:
                raise HarnessError(f"{self.id}: {self.node_id} closed the "
                                   f"link without an Error: {e}")
            if kind == "error":
                return body["code"], body["text"]
            self.seen.append((kind, body))

    def closed(self):
        """True once the node closed the link (reads and drops the rest)."""
        try:
            while True:
                self.recv()
        except (EOFError, OSError, wire.WireError):
            return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---- a frame tap between two semqd ------------------------------------------

def frame_ids(kind, body):
    """The message ids (origin, dest, seq) a frame names."""
    if kind == "data":
        return [(m["origin"], m["dest"], m["seq"]) for m in body["messages"]]
    if kind in ("relay_ack", "ack_response", "query"):
        return [(i["origin"], i["dest"], i["seq"]) for i in body["ids"]]
    if kind == "ack_indication":
        return [(v["id"]["origin"], v["id"]["dest"], v["id"]["seq"])
                for v in body["verdicts"] if v["id"]]
    if kind == "query_reply":
        return [(a["id"]["origin"], a["id"]["dest"], a["id"]["seq"])
                for a in body["answers"] if a["id"]]
    return []


class FrameTap:
    """The link dialler -> listener through this script: it accepts the
    dialler's TLS as the listener (it holds the listener's certificate),
    dials the listener's semqd as the dialler (its certificate), and passes
    every frame on unchanged in both directions after decoding it. Each
    frame is recorded as (direction "A->B", kind, body). Both nodes see each
    other's real Hello; nothing is added, dropped or reordered."""

    def __init__(self, certs, dialler_id, listener_id, listener_port):
        self.names = (dialler_id, listener_id)
        self.to_port = listener_port
        self.srv_ctx = server_context(certs, listener_id)
        self.cli_ctx = client_context(certs, dialler_id)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.frames = []
        self.links = 0
        self.errors = []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        self.threads[0].start()
        return self

    def stop(self):
        self.stop_ev.set()
        for th in list(self.threads):
            th.join(10)
        self.lsock.close()

    def about(self, msg_id):
        """[(direction, kind, body)] of the frames naming msg_id."""
        with self.lock:
            return [f for f in self.frames if msg_id in frame_ids(f[1], f[2])]

    def _accept(self):
        while not self.stop_ev.is_set():
            try:
                raw, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            th = threading.Thread(target=self._serve, args=(raw,),
                                  daemon=True)
            self.threads.append(th)
            th.start()

    def _serve(self, raw):
        a = b = None
        try:
            raw.settimeout(IO_TIMEOUT)
            a = self.srv_ctx.wrap_socket(raw, server_side=True)
            up = socket.create_connection(("127.0.0.1", self.to_port),
                                          timeout=IO_TIMEOUT)
            b = self.cli_ctx.wrap_socket(up)
            with self.lock:
                self.links += 1
            self._pump(a, b)
        except (OSError, ssl.SSLError, EOFError, wire.WireError) as e:
            with self.lock:
                self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            for s in (a, b, raw):
                try:
                    if s is not None:
                        s.close()
                except OSError:
                    pass

    def _pump(self, a, b):
        d, li = self.names
        other = {a: b, b: a}
        direction = {a: f"{d}->{li}", b: f"{li}->{d}"}
        buf = {a: b"", b: b""}
        while not self.stop_ev.is_set():
            ready = [s for s in (a, b) if s.pending()]
            if not ready:
                ready, _, _ = select.select([a, b], [], [], 0.2)
            for s in ready:
                # A record that carries no data (a TLS 1.3 ticket) must
                # not block the other direction: read without waiting.
                s.settimeout(0.0)
                try:
                    data = s.recv(65536)
                except ssl.SSLWantReadError:
                    continue
                finally:
                    s.settimeout(IO_TIMEOUT)
                if not data:
                    return
                buf[s] += data
                while len(buf[s]) >= 4:
                    n = int.from_bytes(buf[s][:4], "big")
                    if len(buf[s]) < 4 + n:
                        break
                    body, buf[s] = buf[s][4:4 + n], buf[s][4 + n:]
                    kind, msg = wire.decode_frame(body)
                    with self.lock:
                        self.frames.append((direction[s], kind, msg))
                    other[s].sendall(len(body).to_bytes(4, "big") + body)


# ---- 1. a third peer says "not delivered" -----------------------------------

OWN_COLS = ("seq", "status", "custodian", "attempts", "next_attempt_at",
            "sent_at", "acked_at", "result", "last_error")


def rows_state(r, p):
    """What a RelayAck could change: R's own rows (every column that says
    where a message is and when it goes next), R's redo queue, P's copies."""
    own = r.sql(f"SELECT {', '.join(OWN_COLS)} FROM tb_0031 WHERE "
                "origin = 'R' ORDER BY seq")
    redo = r.sql("SELECT origin, dest, seq, status, last_error FROM tb_0033 "
                 "ORDER BY id")
    held = p.sql("SELECT origin, dest, seq, status, attempts, hops FROM "
                 "tb_0031 ORDER BY origin, dest, seq")
    return {"R tb_0031": own, "R tb_0033": redo, "P tb_0031": held}


def diff_state(before, after):
    """What changed between two rows_state()s, column by column for R's
    rows (with one example and, for next_attempt_at, its distance from
    sent_at before and after)."""
    out = []
    b_own = {row[0]: row for row in before["R tb_0031"]}
    a_own = {row[0]: row for row in after["R tb_0031"]}
    changed = {}
    for seq in sorted(set(b_own) | set(a_own)):
        b, a = b_own.get(seq), a_own.get(seq)
        if b is None or a is None:
            changed.setdefault("row", []).append((seq, b, a))
            continue
        for i, col in enumerate(OWN_COLS):
            if b[i] != a[i]:
                changed.setdefault(col, []).append((seq, b, a))
    for col, rows in changed.items():
        seq, b, a = rows[0]
        if col == "row":
            out.append(f"R tb_0031: {len(rows)} row(s) appeared or went, "
                       f"e.g. seq {seq}: {b} -> {a}")
            continue
        i = OWN_COLS.index(col)
        what = f"{b[i]!r} -> {a[i]!r}"
        if col == "next_attempt_at" and b[5] and a[5]:
            what += (f" (sent_at + {(b[i] - b[5]) / 1000:.1f} s -> sent_at "
                     f"+ {(a[i] - a[5]) / 1000:.1f} s)")
        out.append(f"R tb_0031.{col} of {len(rows)} row(s), e.g. seq {seq}: "
                   f"{what}")
    for k in ("R tb_0033", "P tb_0031"):
        if before[k] != after[k]:
            b, a = set(before[k]), set(after[k])
            out.append(f"{k}: gone {sorted(b - a, key=repr)[:3]}, new "
                       f"{sorted(a - b, key=repr)[:3]}")
    return "; ".join(out)


def relay_ack(ids, kind, reason=NONE, about_query=False, detail=""):
    return {"relay_ack": {"ids": ids, "kind": kind, "reason": reason,
                          "about_query": about_query, "detail": detail}}


@test(timeout=180)
def relay_ack_unreachable_from_third_peer_ignored(t):
    n = 20
    # R asks about a row in P's custody after custody_query_after (2 h
    # here) and about other rows in doubt after query_after (30 min): no
    # query of R's changes a row while the test looks at them.
    p, (r,), (s,), _ = make_relay(
        t, ["R"], ["S"], extra_certs=["X", "Y"],
        origin_options={"query_after": "30m", "custody_query_after": "2h"})
    certs = p.certs
    r.listen = f"127.0.0.1:{free_port()}"  # X and Y connect to R
    r.add_peer("X")                        # may connect; not trusted
    r.add_peer("Y", trusted_relay=True)    # may connect; a trusted relay
    p.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    keys = enqueue_bulk(r, "S", n, 4)
    wait_held(t, p, [r], "S", n, timeout=SHORT_TIMEOUT)
    custodians = r.sql("SELECT DISTINCT custodian FROM tb_0031")
    assert custodians == [("P",)], custodians
    problems = []  # collected, so that every finding is reported
    before = rows_state(r, p)

    ids = [{"origin": "R", "dest": "S", "seq": seq, "life": life & U64,
            "digest": (digest or 0) & U64}
           for seq, life, digest in r.sql(
               "SELECT seq, life, digest FROM tb_0031 WHERE origin = 'R' "
               "ORDER BY seq")]
    bare = [{"origin": "R", "dest": "S", "seq": i["seq"]} for i in ids]

    def connected(peer_id, base):
        """peer_id connects to R; R's PEER_UP is handled (the barrier).
        Its link coming up concerns only what is routed through it, none
        of R's rows: they must not change (they are checked, and the
        state from then on is the base of the next check)."""
        peer = WirePeer(r, certs, peer_id)
        peer.barrier()
        now = rows_state(r, p)
        if now != base:
            problems.append(f"{peer_id}'s link coming up (before any "
                            f"RelayAck) changed R's rows, which go through "
                            f"P: {diff_state(base, now)}")
        return peer, now

    # X: every UNREACHABLE its rights let through, about R's ids.
    x_frames = [
        ("NOT_CONNECTED", relay_ack(ids, UNREACHABLE, NOT_CONNECTED,
                                    detail="destination not connected")),
        ("no reason, ids without life or digest (revision 1)",
         relay_ack(bare, UNREACHABLE, detail="destination not connected")),
        ("QUOTA", relay_ack(ids, UNREACHABLE, QUOTA,
                            detail="custody quota full")),
        ("DISK_FULL", relay_ack(ids, UNREACHABLE, DISK_FULL)),
        ("TOO_BIG", relay_ack(ids, UNREACHABLE, TOO_BIG)),
        ("NOT_A_RELAY", relay_ack(ids, UNREACHABLE, NOT_A_RELAY)),
        ("NOT_CONNECTED about a query",
         relay_ack(ids, UNREACHABLE, NOT_CONNECTED, about_query=True)),
    ]
    x, base = connected("X", before)
    for _, f in x_frames:
        x.send(f)
    x.barrier()
    after_x = rows_state(r, p)
    if after_x != base:
        problems.append(f"X's RelayAcks changed R: "
                        f"{diff_state(base, after_x)}")
    x_lines = wait_log(r, r" peer=X .*ignored a RelayAck about "
                       rf"{n} message\(s\) not sent through X",
                       "X's RelayAcks ignored",
                       on_timeout=t.logs)

    # X may not say what puts a message dead: refused before R's store.
    forbidden = []
    for reason in (UNKNOWN_DEST, LOOP):
        x.send(relay_ack(ids, UNREACHABLE, reason))
        code, text = x.error()
        assert code == wire.ERR_FORBIDDEN, (wire.ERROR_NAMES.get(code), text)
        assert x.closed()
        x.close()
        forbidden.append(f"{REASON_NAMES[reason]}: {text}")
        x, after_x = connected("X", after_x)
    x.close()

    # Y, a trusted relay of R's but not the hop of R's stream to S: every
    # reason (UNKNOWN_DEST and LOOP would put the messages dead), and the
    # custody claims.
    y_frames = [(REASON_NAMES[k], relay_ack(ids, UNREACHABLE, k,
                                            detail="not from the hop"))
                for k in sorted(REASON_NAMES)]
    y_frames += [("STORED", relay_ack(ids, STORED)),
                 ("FORWARDED", relay_ack(ids, FORWARDED))]
    y, base = connected("Y", after_x)
    for _, f in y_frames:
        y.send(f)
    y.barrier()
    after_y = rows_state(r, p)
    if after_y != base:
        problems.append(f"Y's RelayAcks changed R: "
                        f"{diff_state(base, after_y)}")
    y_lines = wait_log(r, r" peer=Y .*ignored a RelayAck about "
                       rf"{n} message\(s\) not sent through Y",
                       "Y's RelayAcks ignored",
                       on_timeout=t.logs)
    y.close()
    statuses = sorted(set((row[1], row[2]) for row in after_y["R tb_0031"]))
    assert statuses == [(6, "P")], \
        f"R's rows (status, custodian) after X and Y: {statuses}; " + \
        "; ".join(problems)
    assert not after_y["R tb_0033"], after_y["R tb_0033"]
    dead = log_lines(r, r" proto .*undeliverable")
    assert not dead, dead

    # S comes: every document once, none sent twice by R.
    s.start(timeout=READY_TIMEOUT)
    wait_confirmed(t, r, "S", n, timeout=60)
    got = check_exactly_once(s, ["R"], n, keys=keys)
    dups = duplicate_journal_rows(s)
    assert dups == 0, dups
    attempts = dict(r.sql("SELECT seq, attempts FROM tb_0031"))
    was = {row[0]: row[3] for row in before["R tb_0031"]}
    assert attempts == was, (attempts, was)
    assert r.sql("SELECT count(*) FROM tb_0033")[0][0] == 0
    wait_relay_empty(t, p)
    print(f"FIGURES relay_ack_unreachable_from_third_peer_ignored: {n} rows "
          f"at status 6 in P's custody; X (not trusted) sent "
          f"{len(x_frames)} RelayAck(UNREACHABLE) x {n} ids "
          f"({', '.join(w for w, _ in x_frames)}), Y (trusted relay) "
          f"{len(y_frames)} ({', '.join(w for w, _ in y_frames)}); R "
          f"logged {len(x_lines)} + {len(y_lines)} 'ignored' lines; X's "
          f"UNKNOWN_DEST and LOOP refused with Error FORBIDDEN; rows at "
          f"(status, custodian) {statuses}; then S applied {got['total']} "
          f"exactly once, {dups} duplicates, each row sent "
          f"{sorted(set(attempts.values()))} time(s); problems found: "
          f"{len(problems)}", flush=True)
    print(f"     {x_lines[0]}")
    print(f"     {forbidden[0]}")
    if problems:
        raise HarnessError("R's rows changed where nothing may change them:"
                           "\n  " + "\n  ".join(problems))
    r.stop()
    s.stop()
    p.stop()


# ---- 2. a routing loop ------------------------------------------------------

@test(timeout=180)
def relay_loop_ends_at_hop_limit(t):
    max_hops = 4
    opts = dict(FAST, max_hops=max_hops)
    certs = t.certs(["R", "P1", "P2", "P3", "S"])
    ring = [t.node(pid, certs, relay=True, store_and_forward=True,
                   journal=False, admin=True, node_options=dict(opts))
            for pid in ("P1", "P2", "P3")]
    p1, p2, p3 = ring
    # P1 -> P2 -> P3 dial each other directly; P3 -> P1 through the tap.
    tap = FrameTap(certs, "P3", "P1", p1.listen_port).start()
    for a, b in ((p1, p2), (p2, p3), (p3, p1)):
        a.add_peer(b.id, connect=tap.addr if b is p1 else b.listen,
                   trusted_relay=True)
        b.add_peer(a.id, trusted_relay=True)
        a.add_route("NOWHERE", b.id)   # nobody serves NOWHERE: a loop
    # A real destination behind the ring: R -> P1 -> P2 -> P3 -> S, and
    # back the same way.
    p1.add_route("S", "P2")
    p2.add_route("S", "P3")
    p2.add_route("R", "P1")
    p3.add_route("R", "P2")
    s = t.node("S", certs, listen=False, node_options=dict(opts),
               routes={"default": "P3"})
    s.add_peer("P3", connect=p3.listen, trusted_relay=True)
    p3.add_peer("S", trusted_relay=True)
    r = t.node("R", certs, listen=False, journal=False, admin=True,
               node_options=dict(opts), routes={"default": "P1"})
    r.add_peer("P1", connect=p1.listen, trusted_relay=True)
    p1.add_peer("R", trusted_relay=True)
    try:
        for x in ring + [s, r]:
            x.start(timeout=READY_TIMEOUT)
        for a, b in ((p1, "P2"), (p2, "P3"), (p3, "P1"), (r, "P1"),
                     (s, "P3"), (p1, "R"), (p3, "S")):
            wait_until(lambda: link_ready(a, b) or Pending("not ready"),
                       SHORT_TIMEOUT, f"{a.id}'s link to {b} ready",
                       on_timeout=t.logs)
        loop_body(t, ring, r, s, tap, max_hops)
    finally:
        tap.stop()


def loop_body(t, ring, r, s, tap, max_hops):
    ((_, _, seq),) = r.enqueue("NOWHERE", type=1, key="loop",
                               payload=b"for nobody")
    msg = ("R", "NOWHERE", seq)

    def dead():
        rows = r.semqctl_json("redo", "list", "--status", "dead")
        return (len(rows) == 1 and rows) or Pending(f"R's dead: {rows}")
    (entry,) = wait_until(dead, SHORT_TIMEOUT, "R: the message dead",
                          interval=0.1, on_timeout=t.logs)
    assert (entry["origin"], entry["dest"], entry["seq"]) == msg, entry
    assert "undeliverable" in entry["last_error"] and \
        "a routing loop" in entry["last_error"], entry["last_error"]
    row = wait_row(t, r, "NOWHERE", seq, "held as undeliverable",
                   lambda row: row[0] == 8 and row[1] == 8)
    assert row[2] == 1, f"R sent it {row[2]} times"
    assert admin_metric(r, "semq_messages_undeliverable_total") == 1

    # The relay that would have let it pass a (max_hops + 1)-th relay
    # refused it: R -> P1 (hop 1) -> P2 -> P3 -> P1 -> ...
    want = ring[max_hops % len(ring)]
    wait_until(lambda: loop_refusals(want) >= 1 or Pending("not yet"),
               SHORT_TIMEOUT, f"{want.id} counting a loop refusal",
               on_timeout=t.logs)
    refused = {p.id: loop_refusals(p) for p in ring}
    assert refused == {p.id: (1 if p is want else 0) for p in ring}, refused
    line = wait_log(want, rf"msg=R/NOWHERE/{seq} 1 message\(s\) "
                    rf"refused: they have passed \[node\] max_hops "
                    rf"\({max_hops}\) relays", "the loop refusal",
                    on_timeout=t.logs)[0]

    # Traffic through the ring, after it: two messages R -> S, one at a
    # time, confirmed back through P3, P2, P1.
    for i in range(2):
        ((_, _, bseq),) = r.enqueue("S", type=1, key="after",
                                    payload=b"after the loop %d" % i)
        wait_row(t, r, "S", bseq, "confirmed", lambda row: row[0] == 100)
    check_exactly_once(s, ["R"], 2)

    # The loop ended: no copy anywhere, nothing about it still going round.
    for p in ring:
        left = p.sql("SELECT origin, dest, seq, status, hops FROM tb_0031")
        assert left == [], f"{p.id} holds {left}"
        custody = p.sql("SELECT coalesce(sum(messages), 0) FROM "
                        "semq_custody")[0][0]
        assert custody == 0, f"{p.id}: semq_custody {custody}"
    assert {p.id: loop_refusals(p) for p in ring} == refused
    # R's 810-Response taking the message back went round too, until a
    # relay did not pass it on past max_hops
    looped = {p.id: admin_metric(p, "semq_frames_looped_total")
              for p in ring}
    assert sum(looped.values()) >= 1, looped
    frames = tap.about(msg)
    kinds = {}
    for direction, kind, _ in frames:
        kinds[(direction, kind)] = kinds.get((direction, kind), 0) + 1
    data = [(d, b) for d, k, b in frames if k == "data"]
    hops = [m.get("hops") for _, b in data for m in b["messages"]
            if (m["origin"], m["dest"], m["seq"]) == msg]
    print(f"FIGURES relay_loop_ends_at_hop_limit: max_hops={max_hops}; "
          f"R -> P1 -> P2 -> P3 -> P1 (hops 1..{max_hops}, the Data across "
          f"P3->P1 carried hops {hops}), refused by {want.id} "
          f"(semq_relay_refused_total{{reason=\"loop\"}} {refused}); R: dead"
          f" in tb_0033, row held (8, 8), sent {row[2]} time(s); no copy on "
          f"any relay; frames about it across P3<->P1 after two messages "
          f"through the ring: {kinds}; frames not passed on past max_hops "
          f"(semq_frames_looped_total) {looped}", flush=True)
    print(f"     {line}")
    print(f"     R: {entry['last_error']}")
    over = {k: c for k, c in kinds.items() if c > max_hops}
    assert not over, (f"frames about R/NOWHERE/{seq} still going round the "
                      f"ring after it was refused, dead at R and two "
                      f"messages later: {kinds} (at most {max_hops} of each "
                      f"kind; the last: {frames[-1]})")
    assert tap.links == 1 and not tap.errors, (tap.links, tap.errors)
    assert [d for d, _ in data] == ["P3->P1"] and hops == [3], \
        f"the Data of R/NOWHERE/{seq} across P3->P1: {data}"


if __name__ == "__main__":
    run()
