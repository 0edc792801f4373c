# SPDX-License-Identifier: MIT
"""Self-test of the integration harness: everything in semqtest.py and
faultproxy that works without semqd.

free_port, certificates (openssl CLI and tools/mkcerts.sh), faultproxy
(relay, backpressure, half-close, random cuts, stalls, pause/resume/cut/stats,
unreachable target, usage errors, SIGTERM), wait_until, check_exactly_once on
hand-made journals, Node.write_config, the Node process life cycle against a
stand-in daemon, and the test runner itself.

Run by ctest as integration_harness, or by hand:
  SEMQ_FAULTPROXY=build/tests/faultproxy python3 \
      tests/integration/test_harness_selftest.py [NAME...]
"""

import configparser
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (HarnessError, Node, Pending, Proxy,  # noqa: E402
                      check_exactly_once, connect, dead_port, free_port,
                      make_cert_openssl, make_certs, make_certs_openssl, run,
                      test, wait_until)

FAULTPROXY = os.environ.get("SEMQ_FAULTPROXY", "")


def expect_raises(fn, *fragments):
    """Runs fn; it must raise HarnessError whose text has every fragment.
    Returns the message."""
    try:
        fn()
    except HarnessError as e:
        msg = str(e)
        for f in fragments:
            assert f in msg, f"{f!r} not in error:\n{msg}"
        return msg
    raise AssertionError(f"no HarnessError (wanted {fragments})")


# ---- a loopback echo server -------------------------------------------------

class EchoServer:
    """Echoes every connection on 127.0.0.1:port until EOF, then closes it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stopping = False
        self.threads = []
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            th = threading.Thread(target=self._echo, args=(c,), daemon=True)
            th.start()
            self.threads.append(th)

    def _echo(self, c):
        c.settimeout(30)
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
            c.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.stopping = True
        self.t.join(5)
        self.sock.close()


def recv_exactly(s, n, timeout=10.0):
    s.settimeout(timeout)
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(min(65536, n - len(buf)))
        if not b:
            raise AssertionError(f"EOF after {len(buf)} of {n} bytes")
        buf += b
    return bytes(buf)


def closed_within(s, timeout):
    """True when the peer closes s (EOF or reset) within timeout seconds;
    bytes still arriving are discarded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def send_quietly(s, data):
    """sendall in a helper thread; the reader notices a broken link."""
    try:
        s.sendall(data)
    except OSError:
        pass


def roundtrip(port, data=b"hello", timeout=5.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return recv_exactly(s, len(data), timeout)


# ---- ports and certificates -------------------------------------------------

@test
def free_port_gives_distinct_bindable_ports(t):
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20, f"repeated ports: {ports}"
    for p in ports:
        assert 1024 <= p <= 65535, p
    with socket.socket() as s:  # really free: bindable now
        s.bind(("127.0.0.1", ports[0]))


def openssl(*args):
    r = subprocess.run(["openssl"] + list(args), capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def check_node_cert(certs, node_id):
    rc, out = openssl("verify", "-CAfile", certs.ca, certs.crt(node_id))
    assert rc == 0 and "OK" in out, out
    rc, out = openssl("x509", "-in", certs.crt(node_id), "-noout",
                      "-subject", "-ext", "subjectAltName,extendedKeyUsage")
    assert rc == 0, out
    assert f"CN = {node_id}" in out or f"CN={node_id}" in out, out
    assert f"URI:semq://{node_id}" in out, out
    assert "TLS Web Client Authentication" in out, out
    assert "TLS Web Server Authentication" in out, out
    # the key belongs to the certificate
    _, pub_crt = openssl("x509", "-in", certs.crt(node_id), "-noout",
                         "-pubkey")
    _, pub_key = openssl("pkey", "-in", certs.key(node_id), "-pubout")
    assert pub_crt.strip() == pub_key.strip(), "key does not match cert"


@test
def certs_with_openssl_cli(t):
    certs = make_certs_openssl(t.path("certs"), ["A", "P1", "s-2.x"])
    for i in ("A", "P1", "s-2.x"):
        check_node_cert(certs, i)
    # the CA is reused: a node added later verifies against the same ca.crt
    ca_before = open(certs.ca).read()
    certs2 = make_certs_openssl(t.path("certs"), ["B"])
    assert open(certs2.ca).read() == ca_before
    check_node_cert(certs2, "B")
    # a mismatched certificate: CN and URI name another node
    crt, _ = make_cert_openssl(t.path("certs"), "liar", cn="A",
                               uri="semq://A")
    rc, out = openssl("x509", "-in", crt, "-noout", "-subject")
    assert "A" in out and "liar" not in out, out
    # a certificate of another CA does not verify against ours
    other = make_certs_openssl(t.path("other"), ["A"])
    rc, out = openssl("verify", "-CAfile", certs.ca, other.crt("A"))
    assert rc != 0, out


@test
def certs_with_mkcerts_script(t):
    certs = make_certs(t.path("certs"), ["A", "B"])
    for i in ("A", "B"):
        check_node_cert(certs, i)
    rogue = make_certs(t.path("certs"), ["R"], ca_name="rogue")
    assert rogue.ca.endswith("rogue-ca.crt"), rogue.ca
    rc, out = openssl("verify", "-CAfile", certs.ca, rogue.crt("R"))
    assert rc != 0, out
    expect_raises(lambda: make_certs(t.path("certs"), ["bad/id"]),
                  "make_certs", "exited 2")


# ---- faultproxy -------------------------------------------------------------

@test
def proxy_relays_bytes_both_ways(t):
    echo = EchoServer()
    try:
        p = t.proxy(echo.port)
        assert p.control_port and p.port and p.seed is not None
        assert roundtrip(p.port, b"ping") == b"ping"
        # 8 MiB through a slow reader exercises the watermarks: the proxy
        # holds a bounded amount and still delivers every byte in order
        data = os.urandom(8 << 20)
        with socket.create_connection(("127.0.0.1", p.port)) as s:
            err = []

            def send():
                try:
                    s.sendall(data)
                except OSError as e:
                    err.append(e)
            th = threading.Thread(target=send, daemon=True)
            th.start()
            got = bytearray()
            s.settimeout(30)
            while len(got) < len(data):
                time.sleep(0.001 if len(got) > len(data) // 2 else 0.02)
                b = s.recv(65536)
                if not b:
                    break
                got += b
            th.join(30)
            assert not err, err
            assert bytes(got) == data, f"{len(got)} bytes, content differs"
        st = p.stats()
        assert st["conns"] == 2 and st["cuts"] == 0, st
        assert st["bytes"] == 2 * (len(data) + 4), st
        wait_until(lambda: p.open_links() == 0, 5, "links closed")
        assert p.stop() == 0
    finally:
        echo.close()


@test
def proxy_listens_on_a_port_it_reports(t):
    echo = EchoServer()
    try:
        p = t.proxy(echo.port, listen_port=0)  # the kernel picks the port
        assert p.port > 0, p.port
        assert roundtrip(p.port, b"zero") == b"zero"
        p.stop()
    finally:
        echo.close()


@test
def proxy_relays_half_close(t):
    echo = EchoServer()
    try:
        p = t.proxy(echo.port)
        with socket.create_connection(("127.0.0.1", p.port)) as s:
            s.sendall(b"x" * 100000)
            s.shutdown(socket.SHUT_WR)  # our EOF reaches the echo server
            got = recv_exactly(s, 100000)
            assert got == b"x" * 100000
            # the server's close comes back as EOF, not as a reset
            s.settimeout(5)
            assert s.recv(10) == b""
        wait_until(lambda: p.open_links() == 0, 5, "link ended cleanly")
        assert p.stats()["cuts"] == 0
        p.stop()
    finally:
        echo.close()


@test
def proxy_cuts_links_at_random(t):
    echo = EchoServer()
    try:
        p = t.proxy(echo.port, cut_min=0.2, cut_max=0.4, seed=12345)
        assert p.seed == 12345
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", p.port)) as s:
            s.sendall(b"a")
            assert recv_exactly(s, 1) == b"a"
            assert closed_within(s, 3.0), "not cut within 3 s"
        assert time.monotonic() - t0 < 3.5
        st = wait_until(lambda: p.stats()["cuts"] >= 1 and p.stats(), 5,
                        "cut counted")
        assert st["conns"] == 1, st
        # new connections are relayed again after a cut (a round trip may
        # itself meet the next cut, hence the retries)
        wait_until(lambda: roundtrip(p.port, b"again") == b"again", 5,
                   "a round trip after the cut")
        assert "seed 12345" in open(p.log).read()
        p.stop()
    finally:
        echo.close()


@test
def proxy_cuts_links_after_bytes(t):
    """--cut-bytes: each link relays exactly N bytes up, then is cut; the
    number of cuts is fixed by what is sent."""
    echo = EchoServer()
    try:
        p = t.proxy(echo.port, cut_bytes=1000)
        for i in range(3):
            with socket.create_connection(("127.0.0.1", p.port)) as s:
                send_quietly(s, b"%d" % i * 2500)
                got = bytearray()
                s.settimeout(10)
                while True:
                    try:
                        b = s.recv(65536)
                    except ConnectionResetError:
                        break
                    if not b:
                        break
                    got += b
                assert len(got) <= 1000, len(got)
                assert bytes(got) == (b"%d" % i * 2500)[:len(got)]
        st = wait_until(lambda: p.stats()["cuts"] == 3 and p.stats(), 5,
                        "three cuts counted")
        assert st["conns"] == 3 and 3 * 1000 <= st["bytes"] <= 3 * 2000, st
        assert "(bytes," in open(p.log).read()
        # what stays under the budget is relayed untouched
        assert roundtrip(p.port, b"x" * 999) == b"x" * 999
        assert p.stats()["cuts"] == 3
        p.stop()
    finally:
        echo.close()


@test
def proxy_stalls_without_cutting(t):
    echo = EchoServer()
    try:
        p = t.proxy(echo.port, cut_min=0.2, cut_max=0.3, stall_prob=1.0,
                    seed=7)
        with socket.create_connection(("127.0.0.1", p.port)) as s:
            deadline = time.monotonic() + 2.0
            n = 0
            while time.monotonic() < deadline:
                s.sendall(b"%06d" % n)
                assert recv_exactly(s, 6, 5.0) == b"%06d" % n
                n += 1
                time.sleep(0.02)
        st = p.stats()
        assert st["cuts"] == 0, st
        log = open(p.log).read()
        assert "stall" in log, log[-2000:]
        p.stop()
    finally:
        echo.close()


@test
def proxy_survives_churn(t):
    """Many clients, random sizes, half-closes and aborts, under frequent
    cuts (FIN and RST) and stalls: whatever gets through is intact, and the
    proxy ends cleanly (under ASan: no error, no leak)."""
    echo = EchoServer()
    try:
        p = t.proxy(echo.port, cut_min=0.05, cut_max=0.15, stall_prob=0.3,
                    rst_prob=0.5, seed=99)
        stop_at = time.monotonic() + 3.0
        results = {"ok": 0, "cut": 0, "bad": []}
        lock = threading.Lock()

        def client(n):
            import random
            rnd = random.Random(n)
            while time.monotonic() < stop_at:
                data = os.urandom(rnd.choice([1, 100, 5000, 300000]))
                try:
                    with socket.create_connection(("127.0.0.1", p.port),
                                                  timeout=5) as s:
                        if rnd.random() < 0.1:  # abort mid-stream
                            s.sendall(data[:len(data) // 2])
                            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                         b"\x01\0\0\0\0\0\0\0")
                            continue
                        th = threading.Thread(target=send_quietly,
                                              args=(s, data), daemon=True)
                        th.start()
                        got = recv_exactly(s, len(data), 5)
                        th.join(5)
                        if rnd.random() < 0.5:
                            s.shutdown(socket.SHUT_WR)
                            s.recv(1)
                    with lock:
                        if got == data:
                            results["ok"] += 1
                        else:
                            results["bad"].append(len(data))
                except (OSError, AssertionError):
                    with lock:
                        results["cut"] += 1
        threads = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(12)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(20)
        assert not any(th.is_alive() for th in threads), "client hung"
        assert not results["bad"], results
        assert results["ok"] > 0 and results["cut"] > 0, results
        st = p.stats()
        assert st["cuts"] > 0 and st["conns"] > 12, st
        assert p.alive()
        assert p.stop() == 0
    finally:
        echo.close()


@test
def proxy_control_pause_resume_cut(t):
    echo = EchoServer()
    try:
        p = t.proxy(echo.port)
        s = socket.create_connection(("127.0.0.1", p.port))
        s.sendall(b"1")
        assert recv_exactly(s, 1) == b"1"
        assert p.open_links() == 1
        p.pause()  # partition: the open link dies ...
        assert closed_within(s, 3.0), "pause did not cut the link"
        s.close()
        # ... and new connections are refused until resume
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", p.port)) as s2:
                assert closed_within(s2, 3.0), "paused proxy relayed"
        assert p.open_links() == 0
        p.resume()
        assert roundtrip(p.port, b"back") == b"back"
        s = socket.create_connection(("127.0.0.1", p.port))
        s.sendall(b"2")
        assert recv_exactly(s, 1) == b"2"
        wait_until(lambda: p.open_links() == 1, 5, "only the new link open")
        p.cut()
        assert closed_within(s, 3.0), "cut did not cut the link"
        s.close()
        st = p.stats()
        assert st == {"conns": 3, "cuts": 2, "bytes": 2 * (1 + 4 + 1)}, st
        expect_raises(lambda: p.command("explode"), "unknown command")
        p.stop()
    finally:
        echo.close()


@test
def proxy_to_nothing_closes_client(t):
    holder, dead = dead_port()  # nothing listens there
    p = t.proxy(dead)
    with socket.create_connection(("127.0.0.1", p.port)) as s:
        assert closed_within(s, 3.0)
    wait_until(lambda: p.open_links() == 0, 5, "failed link freed")
    assert "connect failed" in open(p.log).read()
    p.stop()
    holder.close()


@test
def proxy_usage_errors(t):
    if not FAULTPROXY:
        raise HarnessError("SEMQ_FAULTPROXY is not set")
    cases = [
        ([], "--listen"),
        (["--listen", "127.0.0.1:1"], "--to"),
        (["--listen", "nope", "--to", "127.0.0.1:1"], "--listen 'nope'"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:0"],
         "--to '127.0.0.1:0' needs a port"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:99999"],
         "--to '127.0.0.1:99999'"),
        (["--listen", "127.0.0.1:0", "--to", "localhost:80"],
         "--to 'localhost:80' is not a numeric"),
        (["--listen", "127.0.0.1:", "--to", "127.0.0.1:1"],
         "--listen '127.0.0.1:'"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--cut-min",
          "abc"], "--cut-min 'abc'"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--cut-min",
          "2", "--cut-max", "1"], "--cut-max"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1",
          "--stall-prob", "1.5"], "--stall-prob '1.5'"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--cut-min",
          "0", "--stall-prob", "0.5"], "--stall-prob"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--seed",
          "-1"], "--seed '-1'"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--cut-bytes",
          "1k"], "--cut-bytes '1k'"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--control",
          "70000"], "--control '70000'"),
        (["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--frob", "1"],
         "'--frob'"),
        (["--listen"], "--listen needs a value"),
    ]
    for args, frag in cases:
        r = subprocess.run([FAULTPROXY] + args, capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and frag in lines[0], (args, r.stderr)
    r = subprocess.run([FAULTPROXY, "--help"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0 and "usage" in r.stdout


@test
def proxy_exits_cleanly_on_sigterm_with_open_links(t):
    echo = EchoServer()
    try:
        p = t.proxy(echo.port, cut_min=5, cut_max=10)
        socks = [socket.create_connection(("127.0.0.1", p.port))
                 for _ in range(5)]
        for i, s in enumerate(socks):
            s.sendall(b"%d" % i)
            assert recv_exactly(s, 1) == b"%d" % i
        assert p.open_links() == 5
        assert p.stop() == 0  # exit 0: under ASan also leak-free
        for s in socks:
            assert closed_within(s, 3.0)
            s.close()
    finally:
        echo.close()


# ---- wait_until -------------------------------------------------------------

@test
def wait_until_returns_value_or_names_what_timed_out(t):
    box = {"n": 0}

    def grows():
        box["n"] += 1
        return box["n"] if box["n"] >= 3 else 0
    assert wait_until(grows, 5, "n to reach 3", interval=0.01) == 3

    t0 = time.monotonic()
    msg = expect_raises(
        lambda: wait_until(lambda: {"status": 4}["status"] == 100, 0.3,
                           "status 100 on A/B/1"),
        "timed out after 0.3 s", "status 100 on A/B/1",
        "last observed: False")
    assert time.monotonic() - t0 < 1.5, "wait was not bounded"

    def boom():
        raise sqlite3.OperationalError("no such table: journal")
    expect_raises(lambda: wait_until(boom, 0.2, "journal rows",
                                     on_timeout=lambda: "LOG TAIL"),
                  "journal rows", "OperationalError: no such table",
                  "LOG TAIL")
    assert msg.count("\n") == 0
    expect_raises(lambda: wait_until(lambda: 2 >= 5 or Pending("2 rows"),
                                     0.1, "5 rows"),
                  "waiting for 5 rows; last observed: 2 rows")


@test
def wait_until_progress_waits_while_work_moves(t):
    # 40 polls at least 10 ms apart take longer than the 0.2 s limit: only
    # progress=True, which counts from the last change, sees the count down
    left = {"n": 40}

    def count_down():
        left["n"] -= 1
        return left["n"] == 0 or Pending(f"{left['n']} left")
    expect_raises(lambda: wait_until(count_down, 0.2, "the count down",
                                     interval=0.01),
                  "timed out after 0.2 s waiting for the count down")
    left["n"] = 40
    assert wait_until(count_down, 0.2, "the count down", interval=0.01,
                      progress=True)
    # stopped: fails after the limit, saying so
    expect_raises(lambda: wait_until(lambda: Pending("3 left"), 0.2,
                                     "the count down", interval=0.01,
                                     progress=True),
                  "timed out after 0.2 s without progress waiting for the "
                  "count down; last observed: 3 left")


# ---- check_exactly_once -----------------------------------------------------

def make_journal(path, rows):
    """rows: (origin, dest, seq, key) in journal order."""
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE journal(id INTEGER PRIMARY KEY, origin TEXT, "
              "dest TEXT, seq INTEGER, type INTEGER, msg_key TEXT, "
              "payload_len INTEGER, handled_at INTEGER)")
    for o, d, s, k in rows:
        c.execute("INSERT INTO journal(origin, dest, seq, type, msg_key, "
                  "payload_len, handled_at) VALUES (?, ?, ?, 1, ?, 3, 0)",
                  (o, d, s, k))
    c.commit()
    c.close()
    return path


@test
def exactly_once_accepts_a_good_journal(t):
    # two origins interleaved, keys k1/k2 each in seq order; another
    # destination's rows and a stream of an unlisted origin are ignored
    rows = [("A", "S", 1, "k1"), ("B", "S", 1, "k1"), ("A", "S", 2, "k2"),
            ("A", "S", 3, "k1"), ("B", "S", 2, None), ("X", "S", 9, "k1"),
            ("A", "T", 1, "k1"), ("B", "S", 3, "k1"), ("A", "S", 4, "k2")]
    db = make_journal(t.path("j.db"), rows)
    r = check_exactly_once(db, ["A", "B"], {"A": 4, "B": 3}, dest="S")
    assert r == {"total": 7, "per_origin": {"A": 4, "B": 3}, "keys": 3}, r
    keys = {("A", 1): "k1", ("A", 2): "k2", ("A", 3): "k1", ("A", 4): "k2"}
    r = check_exactly_once(db, ["A"], 4, keys=keys, dest="S")
    assert r["total"] == 4 and r["keys"] == 2, r
    # different keys may run in any relative order: seq 2 (k2) before 1 (k1)
    db2 = make_journal(t.path("j2.db"), [("A", "S", 2, "k2"),
                                         ("A", "S", 1, "k1")])
    check_exactly_once(db2, ["A"], 2, dest="S")
    expect_raises(lambda: check_exactly_once(db, ["A"], 4), "dest")


@test
def exactly_once_detects_duplicate(t):
    db = make_journal(t.path("j.db"), [("A", "S", 1, "k"), ("A", "S", 2, "k"),
                                       ("A", "S", 2, "k"), ("A", "S", 3, "k")])
    msg = expect_raises(lambda: check_exactly_once(db, ["A"], 3, dest="S"),
                        "duplicated (1)", "A/S/2 x2 (journal ids 2, 3)")
    assert "missing" not in msg and "order" not in msg, msg


@test
def exactly_once_detects_missing(t):
    db = make_journal(t.path("j.db"), [("A", "S", 1, None),
                                       ("A", "S", 3, None),
                                       ("B", "S", 1, None)])
    msg = expect_raises(
        lambda: check_exactly_once(db, ["A", "B"], 3, dest="S"),
        "missing (3)", "A/S/2", "B/S/2", "B/S/3")
    assert "A/S/1" not in msg and "duplicated" not in msg, msg
    # a message beyond what was sent, or a cancelled one, is unexpected
    expect_raises(lambda: check_exactly_once(db, ["A"], 1, dest="S"),
                  "unexpected (1)", "A/S/3 (not sent")
    expect_raises(lambda: check_exactly_once(db, ["A"], 3, dest="S",
                                             cancelled=[("A", 3)]),
                  "A/S/3 (cancelled", "missing (1): A/S/2")
    # an empty journal misses everything
    empty = make_journal(t.path("e.db"), [])
    expect_raises(lambda: check_exactly_once(empty, ["A"], 25, dest="S"),
                  "missing (25)", "(5 more)")


@test
def exactly_once_detects_order_violation(t):
    db = make_journal(t.path("j.db"), [("A", "S", 1, "k1"),
                                       ("A", "S", 3, "k1"),
                                       ("A", "S", 2, "k1"),
                                       ("A", "S", 4, "k2")])
    msg = expect_raises(
        lambda: check_exactly_once(db, ["A"], 4, dest="S"),
        "order violations (1)",
        "key 'k1' of A->S: seq 2 (journal id 3) after seq 3 (journal id 2)")
    assert "missing" not in msg and "duplicated" not in msg, msg
    # with the keys as sent, a key recorded wrongly is reported too
    keys = {("A", 1): "k1", ("A", 2): "k2", ("A", 3): "k1", ("A", 4): "k2"}
    expect_raises(lambda: check_exactly_once(db, ["A"], 4, keys=keys,
                                             dest="S"),
                  "wrong key (1)", "A/S/2 recorded key 'k1', sent 'k2'")


# ---- Node -------------------------------------------------------------------

@test
def node_writes_the_config_it_is_given(t):
    certs = make_certs_openssl(t.path("certs"), ["R1", "P1", "S1"])
    s1 = t.node("S1", certs, admin=True,
                journal_options={"fail_rate": 0.25, "fail_seed": 9,
                                 "permanent_keys": "bad1,bad2"},
                plugins={"bill": {"path": "/x/bill.so", "types": [2800]}},
                redo={"levels": "1s,2s,5s", "max_tries": 3},
                node_options={"poll_interval": "20ms", "query_after": "2s"})
    p1 = t.node("P1", certs, relay=True, store_and_forward=True,
                journal=False)
    r1 = t.node("R1", certs, listen=None, routes={"default": "P1"})
    proxy = Proxy(t.path("proxies"), p1.listen_port)  # not started
    connect(r1, p1, proxy=proxy)
    connect(s1, p1, dialer_trusts=True, listener_trusts=False)

    def parse(node):
        cp = configparser.ConfigParser(inline_comment_prefixes=None)
        cp.optionxform = str
        with open(node.write_config()) as f:
            cp.read_file(f)
        return cp

    cp = parse(s1)
    assert cp.sections() == ["node", "tls", "peer P1", "plugin journal",
                             "plugin bill", "redo"], cp.sections()
    n = cp["node"]
    assert n["id"] == "S1" and n["db"] == s1.db
    assert os.path.isabs(n["db"]) and n["db"].endswith("S1/S1.db")
    assert n["listen"] == s1.listen and n["listen"].startswith("127.0.0.1:")
    assert n["admin"] == s1.admin and n["admin"] != n["listen"]
    assert n["relay"] == "no" and n["store_and_forward"] == "no"
    assert n["poll_interval"] == "20ms" and n["query_after"] == "2s"
    assert dict(cp["tls"]) == {"cert": certs.crt("S1"),
                               "key": certs.key("S1"), "ca": certs.ca}
    assert dict(cp["peer P1"]) == {"connect": p1.listen,
                                   "trusted_relay": "yes"}
    j = cp["plugin journal"]
    assert j["path"].endswith("journal.so") and j["types"] == "*"
    assert j["fail_rate"] == "0.25" and j["fail_seed"] == "9"
    assert j["permanent_keys"] == "bad1,bad2"
    assert dict(cp["plugin bill"]) == {"path": "/x/bill.so",
                                       "types": "2800"}
    assert dict(cp["redo"]) == {"levels": "1s,2s,5s", "max_tries": "3"}

    cp = parse(p1)
    assert cp.sections() == ["node", "tls", "peer R1", "peer S1"]
    assert cp["node"]["relay"] == "yes"
    assert cp["node"]["store_and_forward"] == "yes"
    assert dict(cp["peer R1"]) == {"trusted_relay": "no"}  # accept only
    assert dict(cp["peer S1"]) == {"trusted_relay": "no"}

    cp = parse(r1)
    assert "listen" not in cp["node"] and "admin" not in cp["node"]
    assert dict(cp["peer P1"]) == {"connect": proxy.addr,
                                   "trusted_relay": "no"}
    assert dict(cp["route"]) == {"default": "P1"}
    # values with a newline would corrupt the file
    r1.node_options["log_file"] = "a\nb"
    expect_raises(r1.write_config, "newline")


FAKE_SEMQD = r'''
import configparser, os, signal, socket, sqlite3, sys, time
ini = sys.argv[2]
cp = configparser.ConfigParser(); cp.read(ini)
db = sqlite3.connect(cp["node"]["db"])
db.executescript("""
CREATE TABLE IF NOT EXISTS tb_0031(id INTEGER PRIMARY KEY, origin, dest,
  seq, type, msg_key, payload, deliver_at, status INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS journal(id INTEGER PRIMARY KEY, origin, dest,
  seq, type, msg_key, payload_len, handled_at);
""")
db.execute("PRAGMA journal_mode=WAL")
db.execute("INSERT INTO tb_0031(origin, dest, seq, status) "
           "VALUES ('F', 'S', 1, 100), ('F', 'S', 2, 100), ('F', 'S', 3, 4)")
db.execute("INSERT INTO journal(origin, dest, seq, type, msg_key, "
           "payload_len, handled_at) VALUES ('A', 'F', 1, 1, 'k', 2, 0)")
db.commit()
if os.environ.get("FAKE_CRASH"):
    print("fake semqd: bad config", file=sys.stderr); sys.exit(2)
host, port = cp["node"]["listen"].rsplit(":", 1)
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, int(port))); ls.listen(4)
print("fake semqd %s up" % cp["node"]["id"], file=sys.stderr, flush=True)
print("INFO  main   semqd 0.0.0-fake: node %s (the start line wait_ready "
      "waits for)" % cp["node"]["id"], file=sys.stderr, flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
if os.environ.get("FAKE_STUBBORN"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
while not stop:
    time.sleep(0.02)
print("fake semqd: SIGTERM, bye", file=sys.stderr, flush=True)
'''

FAKE_SEMQCTL = r'''
import sys
print("args:" + " ".join(sys.argv[1:]))
print("to stderr", file=sys.stderr)
sys.exit(3)
'''


def fake_program(t, name, body):
    path = t.path(name)
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n" + body)
    os.chmod(path, 0o755)
    return path


@test
def node_process_life_cycle_with_a_stand_in_daemon(t):
    old = {k: os.environ.get(k) for k in ("SEMQD", "SEMQCTL")}
    os.environ["SEMQD"] = fake_program(t, "fake-semqd", FAKE_SEMQD)
    os.environ["SEMQCTL"] = fake_program(t, "fake-semqctl", FAKE_SEMQCTL)
    try:
        n = t.node("F", None, journal=False)
        n.start(timeout=10)
        assert n.alive() and n.pid
        assert n.outbound_status_counts() == {100: 2, 4: 1}
        assert n.outbound_status_counts(dest="nobody") == {}
        assert not n.all_confirmed() and n.all_confirmed(dest="nobody")
        assert n.journal_count() == 1
        assert n.wait_journal_count(1, timeout=2) == 1
        expect_raises(lambda: n.wait_journal_count(2, timeout=0.2),
                      "F: 2 journal rows", "last observed: 1 rows",
                      "fake semqd")
        n.wait_all_confirmed(dest="nobody", timeout=1)
        expect_raises(lambda: n.wait_all_confirmed(timeout=0.2),
                      "in status 100", "100: 2", "4: 1")
        assert n.journal_rows() == [{"id": 1, "origin": "A", "dest": "F",
                                     "seq": 1, "type": 1, "msg_key": "k",
                                     "payload_len": 2, "handled_at": 0}]
        r = check_exactly_once(n, ["A"], 1)
        assert r["total"] == 1
        assert n.sql("SELECT count(*) FROM tb_0031 WHERE seq > ?", (1,)) \
            == [(2,)]
        wait_until(lambda: "F up" in n.log_text(), 5, "start logged")
        rc, out, err = n.semqctl("status", "--json")
        assert rc == 3 and out == f"args:-c {n.ini} status --json\n", out
        assert err == "to stderr\n"
        assert n.stop() == 0 and not n.alive()
        assert "SIGTERM, bye" in n.log_tail()
        n.start()
        assert n.starts == 2
        n.restart(kill=True)
        assert n.alive() and n.starts == 3
        assert n.kill() == -9 and not n.alive()
        assert n.log_text().count("start #") == 3
        # a daemon that ignores SIGTERM is reported and killed, bounded
        n.env["FAKE_STUBBORN"] = "1"
        n.start()
        wait_until(lambda: n.log_text().count(" up") == 4, 5, "4th start")
        t0 = time.monotonic()
        expect_raises(lambda: n.stop(timeout=0.5), "did not exit within")
        assert time.monotonic() - t0 < 5 and not n.alive()
        # a daemon that exits during start is reported with its log
        n.env = {"FAKE_CRASH": "1"}
        expect_raises(lambda: n.start(timeout=5), "exited with 2",
                      "bad config")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---- the runner -------------------------------------------------------------

RUNNER_SCRIPT = r'''
import os, sys, time
sys.path.insert(0, sys.argv[1])
from semqtest import test, run
@test
def passes(t):
    open(os.path.join(t.dir, "x"), "w").write(t.dir)
    print("DIR " + t.dir)
@test
def fails(t):
    print("DIR " + t.dir)
    assert 1 == 2, "one is not two"
@test(timeout=1)
def hangs(t):
    time.sleep(30)
run(sys.argv[2:])
'''


@test
def runner_reports_counts_and_keeps_failures(t):
    here = os.path.dirname(os.path.abspath(__file__))
    script = t.path("runner_case.py")
    with open(script, "w") as f:
        f.write(RUNNER_SCRIPT)
    env = dict(os.environ, TMPDIR=t.dir)
    env.pop("SEMQ_KEEP", None)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, script, here], capture_output=True,
                       text=True, timeout=60, env=env)
    assert time.monotonic() - t0 < 20
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 1, r.stdout
    assert lines[-1] == "1 passed, 2 failed", r.stdout
    assert "one is not two" in r.stdout
    assert "exceeded its 1 s limit" in r.stdout
    dirs = [ln[4:] for ln in lines if ln.startswith("DIR ")]
    assert len(dirs) == 2
    assert not os.path.exists(dirs[0]), "passing test's dir not removed"
    assert os.path.isdir(dirs[1]), "failing test's dir not kept"
    assert f"kept {dirs[1]}" in r.stdout
    r = subprocess.run([sys.executable, script, here, "passes"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith(
        "1 passed, 0 failed"), r.stdout


if __name__ == "__main__":
    run()
