# SPDX-License-Identifier: MIT
"""What an operator and systemd see of a running semqd (issue #19, area A):

  1. systemd_notify_watchdog_journal — S runs as systemd would run it:
     NOTIFY_SOCKET is a datagram socket of this test (abstract name),
     WATCHDOG_USEC is set, and JOURNAL_STREAM names S's stderr. READY=1
     comes after the start line (which names the listen and admin
     addresses), WATCHDOG=1 repeats, every line carries its syslog
     priority ("<6>" INFO, "<4>" WARN), and SIGTERM sends STOPPING=1.

Run by ctest as integration_ops_signals, or by hand:
  SEMQD=build/semqd JOURNAL_SO=build/plugins/journal.so \\
      python3 tests/integration/test_ops_signals.py [NAME...]
"""

import os
import re
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import Pending, run, test, wait_until  # noqa: E402

FAST = {"reconnect_min": "100ms", "reconnect_max": "500ms"}


def log_lines(node, pattern):
    pat = re.compile(pattern)
    return [ln for ln in node.log_text().splitlines() if pat.search(ln)]


def wait_log(node, pattern, what, n=1, timeout=10.0):
    """Waits until node's log has n lines matching pattern; returns them."""
    def enough():
        got = log_lines(node, pattern)
        return got if len(got) >= n else Pending(f"{len(got)} lines")
    return wait_until(enough, timeout, f"{node.id}'s log: {what}",
                      interval=0.05, on_timeout=node.log_tail)


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


if __name__ == "__main__":
    run()
