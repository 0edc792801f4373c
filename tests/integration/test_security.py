# SPDX-License-Identifier: MIT
"""Security and hostile-input tests of semqd (SPEC §5, §10).

A real node S (journal plugin, max_payload 64 KiB so max_frame is 128 KiB)
is attacked by a Python peer X that speaks the wire through wire.py: with
certificates it should not have (another CA, none, expired), with TLS 1.2 or
no TLS at all, with a Hello that lies about its id or version, and, once
accepted, with frames it may not send (another node's messages, 810 frames
for streams that are not its own) and frames that are not frames (oversized
headers, garbage, no body, seq 0, bad node ids).

Every case asserts three things:
  1. the hostile peer is refused — at the TLS handshake, or with the typed
     Error frame of SPEC §5 followed by the close (frames pipelined after the
     bad one are never acted on);
  2. nothing of it is stored: S's tb_0030, tb_0033 and journal hold nothing
     but the good peer's messages (checked once the good peer's messages,
     sent after the attack, are confirmed: see assert_nothing_stored, and
     again at the end);
  3. S is still alive and still serves a good peer: a real semqd node R then
     sends 20 keyed messages to S and each takes effect exactly once, in key
     order (check_exactly_once), and S exits 0 on SIGTERM (under ASan: no
     error, no leak).
One case turns it around: R dials a listener whose certificate is for
another id than its [peer] section says, and must refuse it. The last one
sets [node] allow = listed on S: a peer with a good certificate but no
[peer] section on S is refused before any frame.

good_client_is_served runs first: a well-behaved Python peer is served, which
proves wire.py speaks the same protocol as semqd, so a refusal in the other
cases is the daemon's doing and not a codec mismatch.

Run by ctest as integration_security, or by hand:
  SEMQD=build/semqd JOURNAL_SO=build/plugins/journal.so \
      python3 tests/integration/test_security.py [NAME...]
"""

import os
import re
import shutil
import socket
import ssl
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wire  # noqa: E402
from wire import (client_context, data_frame, hello_frame,  # noqa: E402
                  message)
from semqtest import (HarnessError, Pending, check_exactly_once,  # noqa: E402
                      connect, make_certs, run, test, wait_until)

MAX_PAYLOAD = 64 * 1024
MAX_FRAME = MAX_PAYLOAD + 64 * 1024  # the daemon's default: + 64 KiB
GOOD_COUNT = 20  # messages the good peer R sends after each attack
IO_TIMEOUT = 10.0  # seconds a refused peer waits for the Error or the close
GOOD_KEYS = ("k0", "k1", "k2", "k3")  # R's messages are type 1 with these


# ---- setup -------------------------------------------------------------------

def setup(t, extra_ids=()):
    """Certificates for S, R, X (+ extra_ids), and the nodes: S listening and
    started, with accept-only peer sections for R and X (neither a trusted
    relay); R configured to dial S, not started. Returns (certs, s, r)."""
    certs = t.certs(["S", "R", "X"] + list(extra_ids))
    # workers 1 (SQLite's default, said here): one store thread, which
    # assert_nothing_stored's argument needs.
    s = t.node("S", certs, node_options={"max_payload": "64KiB",
                                         "workers": "1"})
    r = t.node("R", certs, listen=None, journal=False)
    connect(r, s)
    s.add_peer("X")
    s.start()
    return certs, s, r


# Rows that are not one of the good peer R's messages (type 1, a GOOD_KEYS
# key, R -> S): what an attacker could have got stored.
NOT_GOOD = ("NOT (origin = 'R' AND dest = 'S' AND type = 1 AND msg_key IN "
            f"({', '.join(repr(k) for k in GOOD_KEYS)}))")


def counts(s):
    """(journal rows, tb_0030 rows, tb_0033 rows) of node s that are not
    R's good messages."""
    return tuple(s.sql(f"SELECT count(*) FROM {table} WHERE {NOT_GOOD}")[0][0]
                 if s.has_table(table) else 0
                 for table in ("journal", "tb_0030", "tb_0033"))


def good_round_trip(s, r):
    """R (started now) sends GOOD_COUNT keyed messages to S and waits until
    S has confirmed them all; once per test. Returns {(origin, seq): key}
    of them."""
    if getattr(r, "good_keys", None) is None:
        assert s.alive(), f"S died after the attack:\n{s.log_tail()}"
        r.start()
        keys = {}
        for i in range(GOOD_COUNT):
            k = GOOD_KEYS[i % len(GOOD_KEYS)]
            ((origin, _, seq),) = r.enqueue("S", type=1, key=k,
                                            payload=b"good %d" % i)
            keys[(origin, seq)] = k
        r.wait_all_confirmed("S", GOOD_COUNT, timeout=60)
        r.good_keys = keys
    return r.good_keys


def assert_nothing_stored(s, r, what):
    """Nothing of the attack was stored by S: once the good peer R's
    messages, sent after it, are confirmed, S's journal, tb_0030 and tb_0033
    hold nothing but them.

    Why R's confirmation is proof that S has processed whatever the attack
    got queued (instead of waiting a while): every attacker's link is over
    before R starts — S sent its Error frame and closed it, or refused its
    TLS handshake (no frame is read before the handshake and the Hello), or
    the attacker's process exited. S's network thread is one thread that
    hands each frame to the store thread as it reads it, and stops reading
    a link before it sends the Error (conn_close), so anything of the
    attacker's was queued for the store thread before R's link existed.
    With one store thread (workers 1, see setup) jobs run in the order they
    were queued, in batches that commit before their answers go out: R's
    last confirmation means the batch holding it committed, and with it
    everything queued before. A row of the attacker's would be there now."""
    good_round_trip(s, r)
    c = counts(s)
    if c != (0, 0, 0):
        rows = s.sql("SELECT origin, dest, seq, type, msg_key, via FROM "
                     "tb_0030")
        raise HarnessError(
            f"{what}: S stored something: journal/tb_0030/tb_0033 = {c} "
            f"rows besides R's; journal: {s.journal_rows()}; tb_0030: "
            f"{rows}\n{s.log_tail()}")


def still_serves(s, r, extra_origins=()):
    """S is alive and serves the good peer R: R sends GOOD_COUNT keyed
    messages (good_round_trip, unless assert_nothing_stored had them sent),
    all confirmed, each in S's journal exactly once and in key order; S has
    received from nobody but R (and extra_origins). Then both stop cleanly
    (exit 0; under ASan also no report)."""
    keys = good_round_trip(s, r)
    check_exactly_once(s, ["R"], GOOD_COUNT, keys=keys)
    allowed = {"R"} | set(extra_origins)
    origins = {row["origin"] for row in s.journal_rows()}
    assert origins <= allowed, f"journal has origins {origins}"
    got = {o for (o,) in s.sql("SELECT DISTINCT origin FROM tb_0030")}
    assert got <= allowed, f"tb_0030 has origins {got}"
    redo = s.sql("SELECT origin, dest, seq, status FROM tb_0033")
    assert not redo, f"tb_0033: {redo}"
    assert s.alive(), f"S died:\n{s.log_tail()}"
    r.stop()
    s.stop()


# ---- a Python peer -------------------------------------------------------------

def uri_sans(cert):
    return [v for k, v in cert.get("subjectAltName", ()) if k == "URI"]


class Peer:
    """One TLS connection of a Python peer to a node (handshake done; the
    server's certificate verified and checked to name the node)."""

    def __init__(self, node, ctx):
        raw = socket.create_connection(("127.0.0.1", node.listen_port),
                                       timeout=IO_TIMEOUT)
        try:
            self.sock = ctx.wrap_socket(raw)
        except BaseException:
            raw.close()
            raise
        self.node = node
        sans = uri_sans(self.sock.getpeercert())
        assert sans == [f"semq://{node.id}"], \
            f"server certificate names {sans}, not {node.id}"
        self.server_hello = None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, *bodies):
        """Sends frames in one write: each a body dict, or raw bytes sent
        as they are (header included)."""
        out = b"".join(b if isinstance(b, (bytes, bytearray))
                       else wire.frame(b) for b in bodies)
        self.sock.sendall(out)

    def recv(self):
        """The next frame as (kind, body); a Ping is answered and skipped."""
        while True:
            kind, body = wire.decode_frame(wire.read_frame(self.sock))
            if kind != "ping":
                return kind, body
            self.send({"pong": {"nonce": body["nonce"],
                                "sent_at": body["sent_at"]}})

    def expect(self, kind):
        k, body = self.recv()
        assert k == kind, f"expected {kind}, got {k}: {body}"
        return body

    def hello(self, node_id, version=wire.PROTOCOL_VERSION):
        """Sends our Hello and reads the node's: it must name the node and
        speak version 1."""
        self.send(hello_frame(node_id, version))
        h = self.expect("hello")
        assert h["node_id"] == self.node.id, h
        assert h["protocol_version"] == wire.PROTOCOL_VERSION, h
        self.server_hello = h
        return h

    def expect_error(self, code, what):
        """The next frame is Error(code) and then the node closes the link
        without sending anything else. Returns the Error's text."""
        try:
            k, body = self.recv()
        except (EOFError, socket.timeout) as e:
            raise HarnessError(f"{what}: no Error {wire.ERROR_NAMES[code]} "
                               f"frame: {type(e).__name__}: {e}\n"
                               f"{self.node.log_tail()}")
        assert k == "error", \
            f"{what}: expected Error {wire.ERROR_NAMES[code]}, got {k}: " \
            f"{body}\n{self.node.log_tail()}"
        assert body["code"] == code, \
            f"{what}: Error code {wire.ERROR_NAMES.get(body['code'])} " \
            f"({body['text']!r}), expected {wire.ERROR_NAMES[code]}"
        assert body["text"], f"{what}: Error without a text"
        self.expect_closed(what)
        return body["text"]

    def expect_closed(self, what):
        """The node closes the link within IO_TIMEOUT and sends nothing."""
        self.sock.settimeout(IO_TIMEOUT)
        try:
            while True:
                b = self.sock.recv(65536)
                if not b:
                    return
                raise HarnessError(f"{what}: the node sent {len(b)} more "
                                   f"bytes instead of closing: "
                                   f"{b[:64].hex()}")
        except socket.timeout:
            raise HarnessError(f"{what}: the link was not closed within "
                               f"{IO_TIMEOUT:g} s")
        except (ssl.SSLError, ConnectionError):
            return  # an unclean close is a close


def ready_peer(s, certs, node_id="X"):
    """A Peer as node_id whose Hello exchange is done."""
    p = Peer(s, client_context(certs, node_id))
    try:
        p.hello(node_id)
    except BaseException:
        p.close()
        raise
    return p


# ---- refused at the TLS handshake ------------------------------------------------

def refused_by_tls(s, ctx, what):
    """Connects with ctx and offers a Hello and a valid Data for S. The node
    must refuse the TLS handshake: the handshake fails, or (TLS 1.3: the
    client's side completes before the server has checked the client's
    certificate) the link ends without a single byte of application data.
    Returns how it ended, for the record."""
    raw = socket.create_connection(("127.0.0.1", s.listen_port),
                                   timeout=IO_TIMEOUT)
    try:
        try:
            tls = ctx.wrap_socket(raw)
        except (ssl.SSLError, ConnectionError) as e:
            return f"handshake failed: {e}"
        try:
            tls.sendall(wire.frame(hello_frame("X")) +
                        wire.frame(data_frame()))
        except (ssl.SSLError, OSError) as e:
            return f"write failed: {e}"
        tls.settimeout(IO_TIMEOUT)
        try:
            b = tls.recv(65536)
        except socket.timeout:
            raise HarnessError(f"{what}: the node neither answered nor "
                               f"closed within {IO_TIMEOUT:g} s")
        except (ssl.SSLError, ConnectionError) as e:
            return f"read failed: {e}"
        if b:
            raise HarnessError(f"{what}: the node sent application data to "
                               f"a client it must refuse: {b[:64].hex()} "
                               f"({wire.decode_frame(b[4:])[0]!r} frame?)")
        return "closed"
    finally:
        raw.close()


def ready_lines(s, peer_id):
    """S's log lines of links of peer_id that got past the Hello exchange
    (log.c writes "peer=ID ready (...)" then)."""
    pat = re.compile(rf"\bpeer={re.escape(peer_id)} .*\bready\b")
    return [ln for ln in s.log_text().splitlines() if pat.search(ln)]


def assert_never_ready(s, peer_id, what):
    """No link of peer_id got past the TLS handshake on S."""
    ready = ready_lines(s, peer_id)
    assert not ready, f"{what}: S accepted {peer_id}: {ready}"


@test
def good_client_is_served(t):
    """A well-behaved Python peer: valid certificate, good Hello, a Data of
    its own origin for S -> AckIndication(PROCESSED) after the commit, the
    journal has the row; a second copy is answered with what it became
    (PROCESSED) without effect; its 810-Response makes the row AS_OK; Ping
    is answered with Pong. The peer speaks wire revision 1 (no Hello
    revision): its stream is the legacy life, no digest."""
    certs, s, r = setup(t)
    with ready_peer(s, certs) as p:
        h = p.server_hello
        # what the refusal tests look for in the log is there when it is so
        wait_until(lambda: ready_lines(s, "X"), 5, "S logging X ready",
                   on_timeout=s.log_tail)
        assert h["role"] == wire.ROLE_SERVER, h
        assert h["max_frame"] == MAX_FRAME, h
        p.send({"ping": {"nonce": 77, "sent_at": 1234}})
        pong = p.expect("pong")
        assert pong == {"nonce": 77, "sent_at": 1234}, pong

        m = message(key="order-1", payload=b"hello S")
        p.send(data_frame(m))
        ind = p.expect("ack_indication")
        assert ind["verdicts"] == [
            {"id": {"origin": "X", "dest": "S", "seq": 1,
                    "life": wire.LIFE_LEGACY, "digest": 0},
             "result": wire.RESULT_PROCESSED,
             "refusal": wire.REFUSAL_NONE, "dead": False, "high": 0}], ind
        # the indication comes after the commit: the row is there now
        rows = s.journal_rows()
        assert [(j["origin"], j["dest"], j["seq"], j["type"], j["msg_key"],
                 j["payload_len"]) for j in rows] == \
            [("X", "S", 1, 7, "order-1", 7)], rows
        got = s.sql("SELECT origin, dest, seq, type, msg_key, via, result "
                    "FROM tb_0030")
        assert got == [("X", "S", 1, 7, "order-1", None, 0)], got

        p.send(data_frame(m))  # the same message again
        ind = p.expect("ack_indication")
        assert ind["verdicts"] == [
            {"id": {"origin": "X", "dest": "S", "seq": 1,
                    "life": wire.LIFE_LEGACY, "digest": 0},
             "result": wire.RESULT_PROCESSED,
             "refusal": wire.REFUSAL_NONE, "dead": False, "high": 0}], ind
        assert s.journal_count() == 1, s.journal_rows()

        p.send({"ack_response": {"ids": [{"origin": "X", "dest": "S",
                                          "seq": 1}], "from": "X"}})

        def acked():
            st = s.sql("SELECT ack_status FROM tb_0030 WHERE origin = 'X'")
            w = s.sql("SELECT confirmed_through FROM semq_stream_in "
                      "WHERE origin = 'X' AND dest = 'S'")
            # AS_OK, or already compacted below the watermark
            return st == [(1,)] or (not st and w == [(1,)]) or \
                Pending(f"tb_0030 {st}, watermark {w}")
        wait_until(acked, 10, "X/S/1 AS_OK after the 810-Response",
                   on_timeout=s.log_tail)
    check_exactly_once(s, ["X"], 1)
    still_serves(s, r, extra_origins=["X"])


@test
def client_cert_from_another_ca_is_refused(t):
    certs, s, r = setup(t)
    evil = make_certs(t.path("evil"), ["X"], ca_name="evil")
    how = refused_by_tls(s, client_context(certs, cert=evil.crt("X"),
                                           key=evil.key("X")),
                         "a certificate of another CA")
    print(f"     refused: {how}")
    assert_nothing_stored(s, r, "another CA")
    assert_never_ready(s, "X", "another CA")
    still_serves(s, r)


@test
def client_without_certificate_is_refused(t):
    certs, s, r = setup(t)
    how = refused_by_tls(s, client_context(certs), "no client certificate")
    print(f"     refused: {how}")
    assert_nothing_stored(s, r, "no certificate")
    assert_never_ready(s, "X", "no certificate")
    still_serves(s, r)


@test
def expired_client_cert_is_refused(t):
    certs, s, r = setup(t)
    # X's certificate, signed by the deployment's own CA, but expired
    d = t.path("expired")
    os.makedirs(d)
    shutil.copy(certs.ca, d)
    shutil.copy(os.path.join(certs.dir, "ca.key"), d)
    old = make_certs(d, ["X"], expired=True)
    with open(old.ca) as a, open(certs.ca) as b:
        assert a.read() == b.read(), "mkcerts made a new CA"
    how = refused_by_tls(s, client_context(certs, cert=old.crt("X"),
                                           key=old.key("X")),
                         "an expired certificate")
    print(f"     refused: {how}")
    assert_nothing_stored(s, r, "expired certificate")
    assert_never_ready(s, "X", "expired certificate")
    still_serves(s, r)


@test
def tls12_client_is_refused(t):
    certs, s, r = setup(t)
    ctx = client_context(certs, "X", min_version=ssl.TLSVersion.TLSv1_2,
                         max_version=ssl.TLSVersion.TLSv1_2)
    raw = socket.create_connection(("127.0.0.1", s.listen_port),
                                   timeout=IO_TIMEOUT)
    try:
        try:
            tls = ctx.wrap_socket(raw)
        except (ssl.SSLError, ConnectionError) as e:
            print(f"     refused: {e}")
        else:
            v = tls.version()
            tls.close()
            raise HarnessError(f"a TLS 1.2-only client completed a "
                               f"handshake ({v})")
    finally:
        raw.close()
    assert_nothing_stored(s, r, "TLS 1.2")
    assert_never_ready(s, "X", "TLS 1.2")
    still_serves(s, r)


@test
def plaintext_client_is_refused(t):
    """Frames (and an HTTP request) without TLS: the node never answers
    with SEMQ, at most with a TLS alert record, and closes."""
    certs, s, r = setup(t)
    attempts = [
        wire.frame(hello_frame("X")) + wire.frame(data_frame()),
        b"GET / HTTP/1.0\r\n\r\n",
    ]
    for i, out in enumerate(attempts):
        with socket.create_connection(("127.0.0.1", s.listen_port),
                                      timeout=IO_TIMEOUT) as c:
            c.sendall(out)
            got = b""
            try:
                while True:
                    b = c.recv(65536)
                    if not b:
                        break
                    got += b
            except socket.timeout:
                raise HarnessError(f"plaintext #{i}: not closed within "
                                   f"{IO_TIMEOUT:g} s (got {got[:32]!r})")
            except ConnectionError:
                pass
        # 0x15: a TLS alert record; anything else would be SEMQ talking
        assert not got or got[0] == 0x15, \
            f"plaintext #{i}: the node answered {got[:64].hex()}"
        print(f"     plaintext #{i}: closed, answer {got[:16].hex() or '-'}")
    assert_nothing_stored(s, r, "plaintext")
    assert_never_ready(s, "X", "plaintext")
    still_serves(s, r)


# ---- refused at the Hello -------------------------------------------------------

@test
def hello_with_another_id_is_refused(t):
    """Valid certificate for X, Hello says another id (a real node R, and
    an unknown Y): Error IDENTITY, close, the pipelined Data is not
    stored."""
    certs, s, r = setup(t)
    for claimed in ("R", "Y"):
        with Peer(s, client_context(certs, "X")) as p:
            p.send(hello_frame(claimed),
                   data_frame(message(origin=claimed, key="forged")))
            text = p.expect_error(wire.ERR_IDENTITY, f"Hello as {claimed}")
            print(f"     Hello as {claimed}: {text}")
    assert_nothing_stored(s, r, "Hello with another id")
    still_serves(s, r)


@test
def hello_with_another_version_is_refused(t):
    certs, s, r = setup(t)
    for version in (2, 1000):
        with Peer(s, client_context(certs, "X")) as p:
            p.send(hello_frame("X", version), data_frame())
            text = p.expect_error(wire.ERR_VERSION, f"version {version}")
            print(f"     version {version}: {text}")
    assert_nothing_stored(s, r, "Hello with version 2")
    still_serves(s, r)


@test
def frames_before_hello_are_refused(t):
    """Data (or an 810-Indication) as the first frame: Error PROTOCOL,
    close, nothing stored — also not the Hello and Data sent after it."""
    certs, s, r = setup(t)
    firsts = {
        "Data": data_frame(),
        "AckIndication": {"ack_indication": {"verdicts": [
            {"id": {"origin": "S", "dest": "X", "seq": 1}, "result": 0}]}},
    }
    for name, first in firsts.items():
        with Peer(s, client_context(certs, "X")) as p:
            p.send(first, hello_frame("X"), data_frame())
            text = p.expect_error(wire.ERR_PROTOCOL, f"{name} before Hello")
            print(f"     {name} before Hello: {text}")
    assert_nothing_stored(s, r, "frames before Hello")
    still_serves(s, r)


# ---- after a good Hello --------------------------------------------------------

@test
def data_of_another_origin_is_forbidden(t):
    """X (not a trusted_relay) sends R's messages: Error FORBIDDEN, close,
    nothing of the frame is stored — not the message of its own origin in
    the same frame, not the Data pipelined after it. Later R's own seq 1
    must still take effect (with R's key, not the forged one)."""
    certs, s, r = setup(t)
    cases = {
        "only R's message": [data_frame(message(origin="R",
                                                key="forged")),
                             data_frame(message(seq=2))],
        "X's then R's in one frame": [data_frame(
            message(seq=1), message(origin="R", key="forged"))],
    }
    for name, frames in cases.items():
        with ready_peer(s, certs) as p:
            p.send(*frames)
            text = p.expect_error(wire.ERR_FORBIDDEN, name)
            print(f"     {name}: {text}")
    assert_nothing_stored(s, r, "Data of another origin")
    still_serves(s, r)


@test
def oversized_frame_header_is_refused(t):
    """A header over max_frame, and no body at all: the node answers
    FRAME_TOO_BIG without waiting for the body, and closes."""
    certs, s, r = setup(t)
    for n in (MAX_FRAME + 1, 0xFFFFFFFF):
        with ready_peer(s, certs) as p:
            assert p.server_hello["max_frame"] == MAX_FRAME
            p.send(struct.pack(">I", n))
            text = p.expect_error(wire.ERR_FRAME_TOO_BIG, f"length {n}")
            print(f"     length {n}: {text}")
    # a frame of exactly max_frame is not "oversized": the node reads it
    # (this one does not decode: PROTOCOL, not FRAME_TOO_BIG)
    with ready_peer(s, certs) as p:
        p.send(struct.pack(">I", MAX_FRAME) + b"\xff" * MAX_FRAME)
        p.expect_error(wire.ERR_PROTOCOL, "length max_frame")
    assert_nothing_stored(s, r, "oversized frame")
    still_serves(s, r)


@test
def garbage_frame_body_is_refused(t):
    certs, s, r = setup(t)
    garbage = {
        "0xff bytes": b"\xff" * 16,
        "field longer than the frame": b"\x12\xff\xff\xff\xff\x0f\x0a",
        "truncated message": b"\x12\x08\x0a\x06\x0a\x01X",
        "wire type 7": b"\x0f\x00",
        "field number 0": b"\x02\x00",
        "Data as varint": b"\x10\x01",
    }
    for name, body in garbage.items():
        with ready_peer(s, certs) as p:
            p.send(struct.pack(">I", len(body)) + body, data_frame())
            text = p.expect_error(wire.ERR_PROTOCOL, name)
            print(f"     {name}: {text}")
    assert_nothing_stored(s, r, "garbage frame body")
    still_serves(s, r)


@test
def frame_without_body_is_refused(t):
    certs, s, r = setup(t)
    empty = {
        "length 0": b"\x00\x00\x00\x00",
        "only an unknown field": wire.frame(wire.encode_tag(15, 0) + b"\x01"),
        "Data with no messages": wire.frame({"data": {"messages": []}}),
    }
    # the encoder writes an empty Data as a present, empty body
    assert empty["Data with no messages"] == b"\x00\x00\x00\x02\x12\x00"
    for name, raw in empty.items():
        with ready_peer(s, certs) as p:
            p.send(raw, data_frame())
            text = p.expect_error(wire.ERR_PROTOCOL, name)
            print(f"     {name}: {text}")
    assert_nothing_stored(s, r, "frame without body")
    still_serves(s, r)


@test
def data_with_seq_0_is_refused(t):
    certs, s, r = setup(t)
    with ready_peer(s, certs) as p:
        # proto3 does not write a 0: the message simply has no seq
        p.send(data_frame(message(seq=0)), data_frame(message(seq=1)))
        text = p.expect_error(wire.ERR_PROTOCOL, "seq 0")
        print(f"     seq 0: {text}")
    with ready_peer(s, certs) as p:
        # a 0 written out explicitly is the same 0
        body = wire.encode_message("Message", message(seq=0))
        body += wire.encode_tag(3, 0) + wire.encode_varint(0)
        data = wire.encode_tag(1, 2) + wire.encode_varint(len(body)) + body
        raw = wire.encode_tag(2, 2) + wire.encode_varint(len(data)) + data
        assert wire.decode_frame(raw)[1]["messages"][0]["seq"] == 0
        p.send(wire.frame(raw), data_frame(message(seq=1)))
        text = p.expect_error(wire.ERR_PROTOCOL, "explicit seq 0")
    assert_nothing_stored(s, r, "seq 0")
    still_serves(s, r)


@test
def data_with_invalid_ids_is_refused(t):
    certs, s, r = setup(t)
    bad = {
        "dest with a space": message(dest="S S"),
        "empty dest": message(dest=""),
        "dest too long": message(dest="S" * 65),
        "dest with a slash": message(dest="../S"),
        "dest not ASCII": message(dest="S\u00e9"),
        "dest not UTF-8": message(dest=b"S\xff"),
        "dest with a NUL": message(dest=b"S\x00"),
        # "X\0R" would read as "X" in C: X's own id, smuggling R's
        "origin with a NUL": message(origin=b"X\x00R"),
        "empty origin": message(origin=""),
        "stored_by not an id": message(stored_by="a b"),
    }
    for name, m in bad.items():
        with ready_peer(s, certs) as p:
            p.send(data_frame(m), data_frame(message(seq=1)))
            text = p.expect_error(wire.ERR_PROTOCOL, name)
            print(f"     {name}: {text}")
    assert_nothing_stored(s, r, "invalid ids")
    still_serves(s, r)


@test
def ack_indication_from_non_destination_is_forbidden(t):
    """S has a message for Z waiting (no route: status 0). X, who is not
    Z, claims Z processed it: Error FORBIDDEN, close, and S's row is
    untouched (still unsent, no result)."""
    certs, s, r = setup(t)
    ((_, _, seq),) = s.enqueue("Z", type=3, key="z", payload=b"for Z")
    forged = {"ack_indication": {"verdicts": [
        {"id": {"origin": "S", "dest": "Z", "seq": seq},
         "result": wire.RESULT_PROCESSED}]}}
    with ready_peer(s, certs) as p:
        p.send(forged)
        text = p.expect_error(wire.ERR_FORBIDDEN, "810-Indication for S->Z")
        print(f"     810 for S->Z from X: {text}")
    # the forged 810, had it been queued, was processed before R's messages
    assert_nothing_stored(s, r, "810 from a non-destination")
    row = s.sql("SELECT status, result, acked_at FROM tb_0031 WHERE "
                "origin = 'S' AND dest = 'Z' AND seq = ?", (seq,))
    assert row == [(0, None, None)], f"S's row for Z is now {row}"
    still_serves(s, r)
    row = s.sql("SELECT status, result FROM tb_0031 WHERE dest = 'Z'")
    assert row == [(0, None)], f"S's row for Z is now {row}"


# ---- the dialling side ------------------------------------------------------------

class ImpostorListener:
    """A TLS 1.3 listener on loopback with a valid certificate of the
    deployment for the wrong id. Records, per accepted link, whether the
    handshake completed and how many bytes of application data arrived."""

    def __init__(self, certs, cert_id):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.load_verify_locations(certs.ca)
        self.ctx.load_cert_chain(certs.crt(cert_id), certs.key(cert_id))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.links = []  # dicts: handshake, client, bytes, end
        self.lock = threading.Lock()
        self.stopping = False
        self.threads = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            th = threading.Thread(target=self._serve, args=(c,),
                                  daemon=True)
            th.start()
            self.threads.append(th)

    def _serve(self, c):
        link = {"handshake": False, "client": None, "bytes": 0, "end": ""}
        with self.lock:
            self.links.append(link)
        c.settimeout(5)
        try:
            tls = self.ctx.wrap_socket(c, server_side=True)
            link["handshake"] = True
            link["client"] = uri_sans(tls.getpeercert())
            while True:
                b = tls.recv(65536)
                if not b:
                    link["end"] = "closed"
                    break
                with self.lock:
                    link["bytes"] += len(b)
        except socket.timeout:
            link["end"] = "still open after 5 s"
        except (ssl.SSLError, OSError) as e:
            link["end"] = f"{type(e).__name__}: {e}"
        finally:
            c.close()

    def snapshot(self):
        with self.lock:
            return [dict(x) for x in self.links]

    def close(self):
        self.stopping = True
        self.thread.join(5)
        self.sock.close()
        for th in self.threads:
            th.join(6)


@test
def dialler_refuses_listener_with_another_id(t):
    """R's [peer Tgt] dials a listener whose certificate (valid, from the
    deployment's CA) is for Impostor: R refuses it and says so in its log,
    sends it no byte of SEMQ, keeps its messages for Tgt unsent, and still
    serves its good peer S."""
    certs, s, r = setup(t, ["Impostor"])
    imp = ImpostorListener(certs, "Impostor")
    try:
        r.add_peer("Tgt", connect=f"127.0.0.1:{imp.port}")
        r.start()
        r.enqueue("Tgt", type=5, key="t", payload=b"for Tgt", count=3)

        def refused():
            lines = [ln for ln in r.log_text().splitlines()
                     if "Tgt" in ln and "Impostor" in ln]
            return lines or Pending("no log line naming Tgt and Impostor")
        lines = wait_until(refused, 15, "R refusing Tgt's certificate",
                           on_timeout=r.log_tail)
        print(f"     R: {lines[0]}")
        # a second attempt too (reconnect): refused the same way
        wait_until(lambda: len(imp.snapshot()) >= 2 or Pending(
            imp.snapshot()), 15, "R dialling the impostor again")
        links = imp.snapshot()
        assert all(x["bytes"] == 0 for x in links), \
            f"R sent SEMQ bytes to the impostor: {links}"
        for x in links:
            if x["handshake"]:
                assert x["client"] == ["semq://R"], links
        print(f"     impostor saw: {links}")
        st = r.outbound_status_counts("Tgt")
        assert st == {0: 3}, f"R's rows for Tgt: {st}"
        assert r.alive(), r.log_tail()
        # R still serves its good peer S
        keys = {}
        for i in range(GOOD_COUNT):
            k = f"k{i % 4}"
            ((o, _, sq),) = r.enqueue("S", type=1, key=k)
            keys[(o, sq)] = k
        r.wait_all_confirmed("S", GOOD_COUNT, timeout=60)
        check_exactly_once(s, ["R"], GOOD_COUNT, keys=keys)
        assert r.outbound_status_counts("Tgt") == {0: 3}
        assert all(x["bytes"] == 0 for x in imp.snapshot()), imp.snapshot()
        r.stop()
        s.stop()
    finally:
        imp.close()


# ---- [node] allow = listed ------------------------------------------------------

@test
def unlisted_peer_is_refused_when_allow_listed(t):
    """S allows only listed peers: Y, whose certificate is from the
    deployment's CA but which has no [peer Y] section on S, is refused right
    after the TLS handshake with no frame read or sent, and S says why; X,
    listed by an empty [peer X] section, gets through the Hello exchange;
    R is served as always."""
    certs = t.certs(["S", "R", "X", "Y"])
    s = t.node("S", certs, node_options={"max_payload": "64KiB",
                                         "allow": "listed", "workers": "1"})
    r = t.node("R", certs, listen=None, journal=False)
    connect(r, s)
    s.add_peer("X")
    s.start()
    how = refused_by_tls(s, client_context(certs, "Y"),
                         "a CA-signed peer that is not listed")
    print(f"     refused: {how}")
    wait_until(lambda: "refused: 'Y' has no [peer Y] section" in s.log_text()
               or Pending(s.log_tail(5)), 10, "S logging why it refused Y")
    assert_nothing_stored(s, r, "unlisted peer")
    assert_never_ready(s, "Y", "unlisted peer")
    p = ready_peer(s, certs, "X")  # listed: its Hello is answered
    p.close()
    assert ready_lines(s, "X"), f"S did not serve the listed X:\n" \
        f"{s.log_tail()}"
    still_serves(s, r)


if __name__ == "__main__":
    run()
