# SPDX-License-Identifier: MIT
"""What an operator and systemd see of a running semqd (issue #19, area A):

  1. systemd_notify_watchdog_journal — S runs as systemd would run it:
     NOTIFY_SOCKET is a datagram socket of this test (abstract name),
     WATCHDOG_USEC is set, and JOURNAL_STREAM names S's stderr. READY=1
     comes after the start line (which names the listen and admin
     addresses), WATCHDOG=1 repeats, every line carries its syslog
     priority ("<6>" INFO, "<4>" WARN), and SIGTERM sends STOPPING=1.
  2. sighup_adds_peer_and_failures_by_reason — S runs with allow = listed
     and no [peer R2]: R2 is refused (S's line names R2's address and
     certificate; semq_connections_refused_total{reason="not_listed"}),
     R2's dial of a dead port says "cannot connect" with reason=refused
     (semq_connections_failed_total{direction="dialled",reason="refused"}),
     and X, whose certificate another CA signed, fails S's handshake
     (reason=unknown_ca, address and cert=X; the accepted counter). Then on
     S, all with the same process: SIGHUP with node.ini unchanged logs "no
     change"; SIGHUP with a syntax error logs file:line and keeps the
     running configuration; SIGHUP with [peer R2] (and a [route] through
     it) added logs each change, and R2's message is delivered exactly
     once.

Run by ctest as integration_ops_signals, or by hand:
  SEMQD=build/semqd JOURNAL_SO=build/plugins/journal.so \\
      python3 tests/integration/test_ops_signals.py [NAME...]
"""

import json
import os
import re
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (Certs, Pending, admin_metric,  # noqa: E402
                      check_exactly_once, dead_port, log_lines, make_certs,
                      run, test, wait_log, wait_until)

FAST = {"reconnect_min": "100ms", "reconnect_max": "500ms"}


class Notify:
    """systemd's side of sd_notify: an AF_UNIX datagram socket in the
    abstract namespace; every datagram received is kept."""

    def __init__(self, name):
        self.addr = "@" + name
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + name)
        self.sock.setblocking(False)
        self.got = []  # (monotonic time, text)

    def poll(self):
        while True:
            try:
                self.got.append((time.monotonic(),
                                 self.sock.recv(4096).decode()))
            except BlockingIOError:
                return self.got

    def count(self, line):
        return sum(1 for _, m in self.poll() if line in m.split("\n"))

    def wait(self, line, n=1, timeout=10.0):
        return wait_until(
            lambda: self.count(line) >= n or Pending(
                f"{self.count(line)} of {n}: {[m for _, m in self.got]}"),
            timeout, f"{n} x {line} on NOTIFY_SOCKET")

    def close(self):
        self.sock.close()


@test(timeout=60)
def systemd_notify_watchdog_journal(t):
    certs = t.certs(["S"])
    s = t.node("S", certs, admin=True, node_options=FAST)
    os.makedirs(s.dir, exist_ok=True)
    open(s.log, "ab").close()
    st = os.stat(s.log)  # S's stderr is this file: "the journal"
    notify = Notify(f"semq-test-{os.getpid()}-{id(t)}")
    s.env.update({"NOTIFY_SOCKET": notify.addr, "WATCHDOG_USEC": "400000",
                  "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
    try:
        s.start()
        notify.wait("READY=1")
        ready = [m for _, m in notify.got if "READY=1" in m][0]
        start = log_lines(s, r"INFO +main +semqd .*: node S, role server, "
                          r"db sqlite ")
        assert len(start) == 1, s.log_tail()
        assert f"listen {s.listen}, admin {s.admin}" in start[0], start[0]
        assert start[0].startswith("<6>"), start[0]
        assert f"STATUS=node S (server) listening on {s.listen}" in ready, \
            ready
        # a stranger that closes before TLS: a WARN line, "<4>"
        with socket.create_connection(("127.0.0.1", s.listen_port)):
            pass
        warn = wait_log(s, r"WARN +peer ", "a WARN line")
        assert warn[0].startswith("<4>"), warn[0]
        for ln in s.log_text().splitlines():
            if ln.startswith("----"):
                continue  # the harness's own marker
            m = re.match(r"<(\d)>\S+ (\w+) ", ln)
            assert m, f"no priority prefix: {ln!r}"
            want = {"ERROR": "3", "WARN": "4", "NOTICE": "5", "INFO": "6",
                    "DEBUG": "7"}[m.group(2)]
            assert m.group(1) == want, ln
        # the watchdog: every 200 ms while both threads run
        notify.wait("WATCHDOG=1", n=4, timeout=10)
        assert notify.count("STOPPING=1") == 0
        s.proc.send_signal(signal.SIGTERM)
        notify.wait("STOPPING=1")
        assert s.proc.wait(15) == 0, s.log_tail()
        print(f"     S: {start[0]}")
        print(f"     notify: {[m for _, m in notify.got][:3]} ...")
    finally:
        notify.close()


def wait_metric(node, name, at_least=1, **labels):
    """Waits until node's sample name{labels} is at least at_least (0
    while it is absent)."""
    def value():
        return admin_metric(node, name, absent=0.0, **labels)
    return wait_until(
        lambda: value() >= at_least or Pending(f"{value()}"),
        10, f"{node.id}: {name}{labels} >= {at_least}",
        on_timeout=node.log_tail)


def sighup(node, pattern, what):
    """SIGHUP to node; waits for a new line matching pattern."""
    before = len(log_lines(node, pattern))
    node.proc.send_signal(signal.SIGHUP)
    return wait_log(node, pattern, what, n=before + 1)[-1]


@test(timeout=90)
def sighup_adds_peer_and_failures_by_reason(t):
    certs = t.certs(["S", "R2"])
    s = t.node("S", certs, admin=True,
               node_options=dict(FAST, allow="listed"))
    s.add_peer("R1")  # allow = listed needs one
    s.start()
    pid = s.proc.pid
    dead, dead_at = dead_port()
    r2 = t.node("R2", certs, listen=None, admin=True, journal=False,
                node_options=FAST)
    r2.add_peer("S", connect=s.listen)
    r2.add_peer("Z", connect=f"127.0.0.1:{dead_at}")
    r2.start()
    r2.enqueue("S", type=7, key="k", payload=b"after the reload")

    # refused by S: named by address and certificate, counted by reason
    line = wait_log(s, r"WARN +peer +peer=R2 refused: 'R2' has no \[peer "
                    r"R2\] section.* addr=127\.0\.0\.1:\d+ cert=R2$",
                    "R2 refused")[0]
    print(f"     S: {line}")
    wait_metric(s, "semq_connections_refused_total", reason="not_listed")
    # R2's dial of a port where nothing listens
    line = wait_log(r2, r"WARN +peer +peer=Z tls: cannot connect: .* "
                    rf"reason=refused addr=127\.0\.0\.1:{dead_at} cert=\?$",
                    "Z refused the dial")[0]
    print(f"     R2: {line}")
    wait_metric(r2, "semq_connections_failed_total", direction="dialled",
                reason="refused")
    dead.close()

    # a certificate of another CA: S names where it came from and whose
    evil = make_certs(t.path("evil"), ["X"], ca_name="evil")
    bundle = t.path("evil", "both-ca.crt")
    with open(bundle, "w") as out:
        for p in (evil.ca, certs.ca):
            with open(p) as f:
                out.write(f.read())
    x = t.node("X", Certs(evil.dir, "both-ca.crt"), listen=None,
               journal=False, node_options=FAST)
    x.add_peer("S", connect=s.listen)
    x.start()
    line = wait_log(s, r"WARN +peer +peer=conn#\d+ tls: TLS handshake "
                    r"failed: .* reason=unknown_ca "
                    r"addr=127\.0\.0\.1:\d+ cert=X$", "X refused")[0]
    print(f"     S: {line}")
    wait_metric(s, "semq_connections_failed_total", direction="accepted",
                reason="unknown_ca")
    x.stop()

    # SIGHUP, nothing changed
    sighup(s, r"NOTICE +main +reload: no change$", "no change")
    # SIGHUP, a syntax error: logged with file:line, nothing changes
    text = s.config_text()
    with open(s.ini, "w") as f:
        f.write(text + "[peer R2\n")
    bad = text.count("\n") + 1
    s.peers["R2"] = {"connect": None, "trusted_relay": False}
    line = sighup(s, rf"ERROR +main +reload: {re.escape(s.ini)}:{bad}: ",
                  "the bad line")
    print(f"     S: {line}")
    wait_log(s, r"reload refused: the running configuration stays",
             "kept")
    assert not log_lines(s, r"\bpeer=R2 ready\b"), s.log_tail()
    assert r2.outbound_status_counts("S").get(100, 0) == 0

    # SIGHUP with [peer R2] (and a route through it): R2 gets in, its
    # message is delivered once
    s.add_route("R9", "R2")
    s.write_config()
    line = sighup(s, r"NOTICE +main +peer=R2 reload: \[peer R2\] added "
                  r"\(connect none, trusted_relay no\)", "R2 added")
    print(f"     S: {line}")
    wait_log(s, r"NOTICE +main +reload: \[route\] R9 = R2 added$",
             "the route")
    wait_log(s, r"INFO +peer +peer=R2 ready \(accepted, .* "
             r"addr=127\.0\.0\.1:\d+ cert=R2$", "R2 ready")
    r2.wait_all_confirmed("S", 1, timeout=20)
    check_exactly_once(s, ["R2"], 1)
    assert s.alive() and s.proc.pid == pid, "S was restarted"
    assert s.starts == 1
    # /peers knows the added peer as configured: up now, down once it goes
    def r2_entry():
        status, body = s.admin_get("/peers")
        assert status == 200, (status, body)
        return [p for p in json.loads(body)["peers"] if p["peer"] == "R2"]
    p, = r2_entry()
    assert p["configured"] and p["down_since"] is None, p
    r2.stop()
    wait_until(lambda: (lambda e: (e and e[0]["configured"] and
                                   e[0]["down_since"] is not None) or
                        Pending(e))(r2_entry()), 20,
               "S's /peers: R2 down since it stopped", on_timeout=t.logs)
    s.stop()


if __name__ == "__main__":
    run()
