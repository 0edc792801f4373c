# SPDX-License-Identifier: MIT
"""The TLS hardening checklist of semqd (SPEC §5, §10), one test per item.

A real node S (journal plugin) listens; the attackers are the openssl CLI
(`openssl s_client`, which can do what Python's ssl module cannot: send a
TLS 1.3 KeyUpdate, ask for a TLS 1.2 renegotiation) and real semqd nodes
configured with certificates they should not have:

  1. tls13_key_update_keeps_link_healthy — a TLS 1.3 client sends KeyUpdate
     messages, plain ('k') and update_requested ('K'), between SEMQ frames:
     the node answers each requested update with its own KeyUpdate, keeps
     the link and keeps processing Data on it.
  2. tls12_renegotiation_is_refused_at_handshake — a client that wants to
     renegotiate ('R') must speak TLS 1.2 to do it; the node refuses TLS 1.2
     at the handshake, so there is no session to renegotiate.
  3. expired_certificate_is_refused — a semqd node with an expired
     certificate of the deployment's CA dials S.
  4. certificate_from_another_ca_is_refused — a semqd node whose
     certificate another CA signed dials S (it trusts S's CA, so the refusal
     is S's).
  5. certificate_id_differs_from_peer_config_is_refused — R's [peer Tgt]
     dials a real semqd whose valid certificate is for 'Impostor'.
  6. tls12_client_is_refused — s_client -tls1_2 with a valid certificate.
  7. plaintext_is_refused — SEMQ frames and an HTTP request without TLS.

Each refusal is checked with the exact reason in the logs: the refusing
node's "TLS handshake failed: <OpenSSL reason>" or "refused: ..." line, and
for a refused semqd also the TLS alert it got, which names the reason the
refusing side's line does not (see the note in expired_certificate...).
Nothing of a refused peer is stored, and every test ends by proving a good
peer still gets messages through: R sends 20 keyed messages to S, each in
S's journal exactly once and in key order, and both exit 0 on SIGTERM
(under ASan: without a report). These overlap test_security.py on purpose:
this file is the issue's checklist, item by item.

Needs the openssl CLI (Debian's openssl package; tools/deps.sh has it).
Run by ctest as integration_tls_hardening, or by hand:
  SEMQD=build/semqd JOURNAL_SO=build/plugins/journal.so \\
      python3 tests/integration/test_tls_hardening.py [NAME...]
"""

import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wire  # noqa: E402
from semqtest import (Certs, HarnessError, Pending,  # noqa: E402
                      check_exactly_once, connect, log_lines, make_certs,
                      run, test, wait_log, wait_until)

GOOD_COUNT = 20       # messages the good peer R sends at the end
IO_TIMEOUT = 15.0     # a step of an attacker: handshake, answer, close
REFUSALS = 2          # a dialling node must be refused this often (redial)
KEY_UPDATE_ROUNDS = 10
GOOD_KEYS = ("k0", "k1", "k2", "k3")  # R's messages are type 1 with these
FAST = {"reconnect_min": "100ms", "reconnect_max": "1s"}


# ---- setup and the good peer ------------------------------------------------

def setup(t, extra_ids=()):
    """Certificates of S, R, X (+ extra_ids) from one CA; S listening with
    accept-only peer sections for R and X, started; R configured to dial S,
    not started. Returns (certs, s, r)."""
    certs = t.certs(["S", "R", "X"] + list(extra_ids))
    # workers 1 (SQLite's default, said here): one store thread, which
    # assert_nothing_stored's argument needs.
    s = t.node("S", certs, node_options=dict(FAST, workers="1"))
    r = t.node("R", certs, listen=None, journal=False, node_options=FAST)
    connect(r, s)
    s.add_peer("X")
    s.start()
    return certs, s, r


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


def still_serves(s, r, extra_origins=()):
    """S is alive and serves the good peer R: GOOD_COUNT keyed messages
    (good_round_trip, unless assert_nothing_stored had them sent), all
    confirmed, each in S's journal exactly once and in key order; S holds
    nothing of another origin than R (and extra_origins). Then both stop
    with SIGTERM and must exit 0."""
    keys = good_round_trip(s, r)
    check_exactly_once(s, ["R"], GOOD_COUNT, keys=keys)
    allowed = {"R"} | set(extra_origins)
    origins = {row["origin"] for row in s.journal_rows()}
    assert origins <= allowed, f"journal has origins {origins}"
    got = {o for (o,) in s.sql("SELECT DISTINCT origin FROM tb_0030")}
    assert got <= allowed, f"tb_0030 has origins {got}"
    assert s.alive(), f"S died:\n{s.log_tail()}"
    r.stop()
    s.stop()


# Rows that are not one of the good peer R's messages (type 1, a GOOD_KEYS
# key, R -> S): what an attacker could have got stored.
NOT_GOOD = ("NOT (origin = 'R' AND dest = 'S' AND type = 1 AND msg_key IN "
            f"({', '.join(repr(k) for k in GOOD_KEYS)}))")


def assert_nothing_stored(s, r, what):
    """S stored nothing of the attack: once the good peer R's messages,
    sent after it, are confirmed, S's journal, tb_0030 and tb_0033 hold
    nothing but them.

    R's confirmation proves S processed whatever the attack got queued:
    every attacker's link is over before R starts (its TLS handshake
    refused, S's log says so, or S closed it, or the attacking process
    exited), and no frame is read before the handshake; S's one network
    thread queues a link's frames for the store thread as it reads them, so
    they are ahead of R's; the one store thread (workers 1, see setup) runs
    its queue in order and commits a batch before answering. So when R's
    last message is confirmed, a row of the attacker's would be there.
    (test_security.py's assert_nothing_stored says the same at length.)"""
    good_round_trip(s, r)
    c = tuple(s.sql(f"SELECT count(*) FROM {table} WHERE {NOT_GOOD}")[0][0]
              if s.has_table(table) else 0
              for table in ("journal", "tb_0030", "tb_0033"))
    if c != (0, 0, 0):
        raise HarnessError(f"{what}: S stored something: journal/tb_0030/"
                           f"tb_0033 = {c} rows besides R's\n"
                           f"{s.log_tail()}")


def assert_never_ready(s, peer_id, what):
    """No link of peer_id got past the Hello exchange on S."""
    ready = log_lines(s, rf"\bpeer={re.escape(peer_id)} .*\bready\b")
    assert not ready, f"{what}: S accepted {peer_id}: {ready}"


# The refusing node's line for a failed handshake (peer.c): the link has
# no peer id yet, so it is named by its connection number.
def handshake_failed(reason):
    return rf"WARN +peer +peer=conn#\d+ tls: TLS handshake failed: .*{reason}"


# ---- openssl s_client ------------------------------------------------------

class SClient:
    """`openssl s_client` connected to a node, as peer `cert_id` of certs,
    with stdin to type into and stdout / stderr collected as they come.
    -msgfile takes the protocol trace (-msg) out of stdout, so stdout is the
    session summary and then the raw application data."""

    def __init__(self, t, node, certs, cert_id, args):
        self.msgfile = t.path(f"s_client-{time.monotonic_ns()}.msg")
        cmd = ["openssl", "s_client", "-connect",
               f"127.0.0.1:{node.listen_port}", "-noservername",
               "-cert", certs.crt(cert_id), "-key", certs.key(cert_id),
               "-CAfile", certs.ca, "-msg", "-msgfile", self.msgfile] + args
        if not shutil.which("openssl"):
            raise HarnessError("the openssl CLI is not installed")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.out, self.err = bytearray(), bytearray()
        self.lock = threading.Lock()
        self.readers = [threading.Thread(target=self._pump, args=(f, b),
                                         daemon=True)
                        for f, b in ((self.proc.stdout, self.out),
                                     (self.proc.stderr, self.err))]
        for th in self.readers:
            th.start()

    def _pump(self, f, buf):
        while True:
            b = os.read(f.fileno(), 65536)
            if not b:
                return
            with self.lock:
                buf += b

    def stdout(self):
        with self.lock:
            return bytes(self.out)

    def stderr(self):
        with self.lock:
            return bytes(self.err)

    def trace(self):
        try:
            with open(self.msgfile, encoding="ascii", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def write(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def wait_for(self, pred, what, timeout=IO_TIMEOUT):
        return wait_until(pred, timeout, f"s_client: {what}", interval=0.05,
                          on_timeout=self.describe)

    def wait_exit(self, timeout=IO_TIMEOUT):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"s_client still running after {timeout:g} "
                               f"s\n{self.describe()}")
        for th in self.readers:
            th.join(5)
        return rc

    def frames(self):
        """The SEMQ frames in the application data on stdout, decoded:
        [(kind, body)]. The summary text before them never parses as a
        frame of a known kind that this test looks for."""
        buf, found, i = self.stdout(), [], 0
        while i + 4 <= len(buf):
            (n,) = struct.unpack(">I", buf[i:i + 4])
            if 2 <= n <= 65536 and i + 4 + n <= len(buf):
                try:
                    kind, body = wire.decode_frame(buf[i + 4:i + 4 + n])
                except (wire.WireError, ValueError, IndexError,
                        UnicodeDecodeError):
                    kind = None
                if kind is not None:
                    found.append((kind, body))
                    i += 4 + n
                    continue
            i += 1
        return found

    def describe(self):
        return (f"s_client rc={self.proc.poll()}\nstdout (tail): "
                f"{self.stdout()[-600:]!r}\nstderr: {self.stderr()!r}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


def hello_bytes(node_id):
    """The framed Hello of a current node (wire.hello_frame with a
    software name), so that S has nothing to warn about but what a test
    provokes."""
    return wire.frame(wire.hello_frame(node_id,
                                       software="tls-hardening-test"))


def data_bytes(origin, seq, key):
    """A framed Data of one message origin/S/seq."""
    return wire.frame(wire.data_frame(wire.message(
        origin, seq=seq, key=key, payload=b"after key update %d" % seq)))


def acked(frames, origin, seq):
    """True when frames hold the 810-Indication PROCESSED of origin/S/seq."""
    return any(k == "ack_indication" and any(
        (v["id"]["origin"], v["id"]["dest"], v["id"]["seq"], v["result"],
         v["refusal"]) == (origin, "S", seq, wire.RESULT_PROCESSED,
                           wire.REFUSAL_NONE)
        for v in b["verdicts"]) for k, b in frames)


# ---- 1. TLS 1.3 KeyUpdate ---------------------------------------------------

# s_client's -msg trace of a KeyUpdate: its type (0x18), length 1, then
# request_update: 00 update_not_requested, 01 update_requested.
KU_SENT_PLAIN = ">>> TLS 1.3, Handshake [length 0005], KeyUpdate\n" \
                "    18 00 00 01 00"
KU_SENT_REQ = ">>> TLS 1.3, Handshake [length 0005], KeyUpdate\n" \
              "    18 00 00 01 01"
KU_RECEIVED = "<<< TLS 1.3, Handshake [length 0005], KeyUpdate"


@test
def tls13_key_update_keeps_link_healthy(t):
    """X, a valid peer, speaks SEMQ through s_client -tls1_3 and, between
    its frames, updates its keys: once without and then KEY_UPDATE_ROUNDS
    times with update_requested. The node must answer every requested
    update with a KeyUpdate of its own, keep the link, and process each
    Data sent under the new keys (810-Indication PROCESSED back, under its
    own new keys); the journal has every message exactly once."""
    certs, s, r = setup(t)
    c = SClient(t, s, certs, "X", ["-tls1_3"])
    try:
        c.wait_for(lambda: b"New, TLSv1.3, Cipher" in c.stdout(),
                   "TLS 1.3 handshake")
        c.write(hello_bytes("X"))
        c.wait_for(lambda: any(k == "hello" for k, _ in c.frames()),
                   "the node's Hello")
        wait_log(s, r"\bpeer=X ready \(accepted", "X ready")

        def key_update(cmd, n_sent):
            c.write(cmd)  # one line alone: s_client's command letter
            c.wait_for(lambda: c.stderr().count(b"KEYUPDATE") >= n_sent,
                       f"KEYUPDATE #{n_sent} ({cmd!r})")

        keys = {}
        key_update(b"k\n", 1)
        key_update(b"K\n", 2)
        for i in range(1, KEY_UPDATE_ROUNDS + 1):
            if i > 1:
                key_update(b"K\n", i + 1)
            keys[("X", i)] = f"x{i % 3}"
            c.write(data_bytes("X", i, keys[("X", i)]))
            c.wait_for(lambda: acked(c.frames(), "X", i) or Pending(
                [k for k, _ in c.frames()]),
                f"810-Indication of X/S/{i} after key update {i + 1}")
            # the node answered the requested update with its own
            c.wait_for(lambda: c.trace().count(KU_RECEIVED) >= i or
                       Pending(f"{c.trace().count(KU_RECEIVED)} received"),
                       f"the node's KeyUpdate #{i}")
        tr = c.trace()
        assert tr.count(KU_SENT_PLAIN) == 1, tr[-2000:]
        assert tr.count(KU_SENT_REQ) == KEY_UPDATE_ROUNDS, tr[-2000:]
        # each answer is update_not_requested (no ping-pong of updates)
        got = tr.count(KU_RECEIVED + "\n    18 00 00 01 00")
        assert got == tr.count(KU_RECEIVED) == KEY_UPDATE_ROUNDS, \
            f"{got} / {tr.count(KU_RECEIVED)} KeyUpdates from the node"
        assert c.proc.poll() is None, c.describe()
        errors = [k for k, _ in c.frames() if k == "error"]
        assert not errors, f"the node sent Error frames: {c.frames()}"
        # the link is still the one it was, not refused or re-opened
        warn = log_lines(s, r"WARN +(peer|net) ")
        assert not warn, f"S logged warnings: {warn}"
        assert len(log_lines(s, r"\bpeer=X ready \(")) == 1
        print(f"     {KEY_UPDATE_ROUNDS + 1} key updates sent, "
              f"{tr.count(KU_RECEIVED)} answered, "
              f"{KEY_UPDATE_ROUNDS} Data acked on the same link")
        c.write(b"Q\n")  # s_client: close_notify and exit
        rc = c.wait_exit()
        assert rc == 0, c.describe()
        wait_log(s, r"\bpeer=X ready: closed by peer", "X's link closed")
    finally:
        c.close()
    check_exactly_once(s, ["X"], KEY_UPDATE_ROUNDS, keys=keys)
    assert s.journal_count() == KEY_UPDATE_ROUNDS, s.journal_rows()
    still_serves(s, r, extra_origins=["X"])


# ---- 2. TLS 1.2 renegotiation -----------------------------------------------

@test
def tls12_renegotiation_is_refused_at_handshake(t):
    """s_client -tls1_2 with X's valid certificate, 'R' (renegotiate)
    typed: the node refuses TLS 1.2 at the handshake (alert
    protocol_version), so no session exists and s_client never gets to
    renegotiate. S logs the reason; nothing is stored."""
    certs, s, r = setup(t)
    c = SClient(t, s, certs, "X", ["-tls1_2"])
    try:
        # waiting in the pipe: s_client reads it only once connected
        try:
            c.write(b"R\n")
        except BrokenPipeError:
            pass  # already gone: refused before it could read a line
        rc = c.wait_exit()
        err = c.stderr().decode("utf-8", "replace")
        out = c.stdout().decode("utf-8", "replace")
        assert rc != 0, f"s_client -tls1_2 exited 0\n{c.describe()}"
        assert "alert protocol version" in err, c.describe()
        assert "RENEGOTIATING" not in err, c.describe()
        assert "New, (NONE), Cipher is (NONE)" in out, c.describe()
        assert not c.frames(), c.frames()
        print(f"     s_client: {err.strip().splitlines()[-1]}")
    finally:
        c.close()
    lines = wait_log(s, handshake_failed("unsupported protocol"),
                     "TLS 1.2 refused")
    print(f"     S: {lines[0]}")
    assert_nothing_stored(s, r, "TLS 1.2 renegotiation")
    assert_never_ready(s, "X", "TLS 1.2 renegotiation")
    still_serves(s, r)


# ---- 3-5. semqd nodes with the wrong certificate ----------------------------

def dialling_node(t, certs, node_id, s):
    """A semqd node node_id with `certs` that dials S, started, with three
    messages for S in its queue."""
    x = t.node(node_id, certs, listen=None, journal=False, node_options=FAST)
    x.add_peer("S", connect=s.listen)
    x.start()
    x.enqueue("S", type=5, key="x", payload=b"must not arrive", count=3)
    return x


def refused_dialler(s, r, x, s_reason, x_reason, what):
    """S refuses x REFUSALS times with s_reason in its log, x logs the
    alert x_reason; x's messages stay unsent and x exits 0; then nothing of
    x is stored once R's messages went through."""
    s_lines = wait_log(s, handshake_failed(s_reason), f"{what} refused",
                       n=REFUSALS)
    x_lines = wait_log(x, rf"WARN +peer +peer=S .*{x_reason}",
                       f"{what}: the alert", n=REFUSALS)
    print(f"     S: {s_lines[0]}\n     {x.id}: {x_lines[0]}")
    assert x.outbound_status_counts("S") == {0: 3}, \
        x.outbound_status_counts("S")
    x.stop()
    assert_nothing_stored(s, r, what)
    assert_never_ready(s, x.id, what)


@test
def expired_certificate_is_refused(t):
    """X's certificate, from the deployment's own CA, expired yesterday.
    S's line names the exact reason (the X509 verify result), and so does
    the alert X receives, certificate_expired."""
    certs, s, r = setup(t)
    d = t.path("expired")
    os.makedirs(d)
    shutil.copy(certs.ca, d)
    shutil.copy(os.path.join(certs.dir, "ca.key"), d)
    old = make_certs(d, ["X"], expired=True)
    with open(old.ca) as a, open(certs.ca) as b:
        assert a.read() == b.read(), "mkcerts made a new CA"
    x = dialling_node(t, old, "X", s)
    refused_dialler(s, r, x, "(certificate: certificate has expired)",
                    "alert certificate expired", "expired certificate")
    still_serves(s, r)


@test
def certificate_from_another_ca_is_refused(t):
    """X's certificate is signed by another CA. X trusts both CAs, so it
    accepts S's certificate and the refusal is S's: the alert X receives is
    unknown_ca."""
    certs, s, r = setup(t)
    evil = make_certs(t.path("evil"), ["X"], ca_name="evil")
    bundle = t.path("evil", "both-ca.crt")
    with open(bundle, "w") as out:
        for p in (evil.ca, certs.ca):
            with open(p) as f:
                out.write(f.read())
    x = dialling_node(t, Certs(evil.dir, "both-ca.crt"), "X", s)
    refused_dialler(s, r, x,
                    # X presents its chain up to the other CA's root,
                    # which S does not trust
                    "(certificate: self-signed certificate in certificate "
                    "chain)",
                    "alert unknown ca", "another CA")
    still_serves(s, r)


@test
def certificate_id_differs_from_peer_config_is_refused(t):
    """R's [peer Tgt] dials a real semqd node whose certificate (valid, the
    deployment's CA) is for 'Impostor': R refuses it after the handshake,
    before any frame, says so in its log, and keeps its messages for Tgt
    unsent; the impostor stores nothing. R still serves S."""
    certs, s, r = setup(t, ["Impostor"])
    imp = t.node("Impostor", certs, node_options=FAST)
    imp.start()
    r.add_peer("Tgt", connect=imp.listen)
    r.start()
    r.enqueue("Tgt", type=5, key="t", payload=b"for Tgt", count=3)
    lines = wait_log(r, r"WARN +peer +peer=Tgt refused: dialled 'Tgt' but "
                     r"its certificate is for 'Impostor'",
                     "Tgt's certificate refused", n=REFUSALS)
    print(f"     R: {lines[0]}")
    assert r.outbound_status_counts("Tgt") == {0: 3}, \
        r.outbound_status_counts("Tgt")
    assert imp.received_count() == 0 and imp.journal_count() == 0
    assert not log_lines(imp, r"\bready\b"), imp.log_tail()
    r.stop()
    imp.stop()
    still_serves(s, r)
    assert r.outbound_status_counts("Tgt") == {0: 3}


# ---- 6-7. no TLS 1.3 --------------------------------------------------------

@test
def tls12_client_is_refused(t):
    """s_client -tls1_2 with a valid certificate: alert protocol_version,
    no session; S logs "unsupported protocol"."""
    certs, s, r = setup(t)
    c = SClient(t, s, certs, "X", ["-tls1_2"])
    try:
        rc = c.wait_exit()
        err = c.stderr().decode("utf-8", "replace")
        assert rc != 0 and "alert protocol version" in err, c.describe()
        assert b"New, (NONE), Cipher is (NONE)" in c.stdout(), c.describe()
        print(f"     s_client: {err.strip().splitlines()[-1]}")
    finally:
        c.close()
    lines = wait_log(s, handshake_failed("unsupported protocol"),
                     "TLS 1.2 refused")
    print(f"     S: {lines[0]}")
    assert_nothing_stored(s, r, "TLS 1.2")
    assert_never_ready(s, "X", "TLS 1.2")
    still_serves(s, r)


@test
def plaintext_is_refused(t):
    """No TLS at all: SEMQ frames, then an HTTP request. The node answers
    at most a TLS alert record, closes, and logs OpenSSL's reason for
    each."""
    certs, s, r = setup(t)
    attempts = [
        ("SEMQ frames", hello_bytes("X") + data_bytes("X", 1, "k"),
         "wrong version number"),
        ("HTTP request", b"GET / HTTP/1.0\r\n\r\n", "http request"),
    ]
    for name, out, reason in attempts:
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
                raise HarnessError(f"{name}: not closed within "
                                   f"{IO_TIMEOUT:g} s (got {got[:32]!r})")
            except ConnectionError:
                pass  # a reset is a close
        # 0x15: a TLS alert record; anything else would be SEMQ talking
        assert not got or got[0] == 0x15, \
            f"{name}: the node answered {got[:64].hex()}"
        lines = wait_log(s, handshake_failed(reason), f"{name} refused")
        print(f"     {name}: answer {got[:16].hex() or '-'}; S: "
              f"{lines[-1]}")
    assert_nothing_stored(s, r, "plaintext")
    assert_never_ready(s, "X", "plaintext")
    still_serves(s, r)


if __name__ == "__main__":
    run()
