# SPDX-License-Identifier: MIT
"""A plugin that crashes on a document, or hangs (issue #17: poison
documents; docs/PLUGINS.md, "Return values").

Real semqd nodes on loopback: R sends to S, whose journal plugin crashes
the process (abort) on documents with key BOOM (`crash_keys`) or sleeps on
documents with key SLOW (`stall_keys`, `stall_ms`). The test plays the
service manager: when S dies, it starts it again.

  1. crash_quarantined: R sends ten documents, one of them BOOM. S dies
     while handling it, twice (each time the batch it was in is rolled
     back); the third S finds BOOM in its crash guard counted twice and
     puts it dead ("crashed the node 2 times") without handing it to the
     plugin: every other document takes effect exactly once, R's row of
     BOOM ends confirmed with result 5 (dead at the destination), and S
     keeps serving.
  2. stuck_plugin_unhealthy: a SLOW document keeps the plugin busy longer
     than plugin_timeout: S logs an ERROR naming the plugin and the
     message, /health answers 503 "plugin stuck" while it runs, and 200
     again once the call returned; the document took effect once.

Run by ctest as integration_poison, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_poison.py [NAME]
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (Pending, check_exactly_once, connect,  # noqa: E402
                      run, test, wait_until)

FAST = {"poll_interval": "20ms", "query_after": "1s",
        "reconnect_min": "100ms", "reconnect_max": "500ms"}
TIMEOUT = 60.0


def pair(t, journal_options, s_options=None, admin=False):
    certs = t.certs(["R", "S"])
    s = t.node("S", certs, node_options=dict(FAST, **(s_options or {})),
               journal_options=journal_options, admin=admin)
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST)
    connect(r, s)
    return r, s


def row(r, seq):
    rows = r.sql("SELECT status, result FROM tb_0031 WHERE seq = ?", (seq,))
    return rows[0] if rows else None


@test(timeout=240)
def crash_quarantined(t):
    r, s = pair(t, {"crash_keys": "BOOM"})
    s.start()
    r.start()
    keys = {}
    for i in range(1, 11):
        key = "BOOM" if i == 5 else f"K{i}"
        r.enqueue("S", key=key, payload=b"doc %d" % i)
        keys[("R", i)] = key
    crashes = []
    # The service manager: S dies on BOOM; start it again, twice.
    for k in range(2):
        wait_until(lambda: not s.alive() or Pending("S still running"),
                   TIMEOUT, f"S dies on BOOM (crash {k + 1})",
                   on_timeout=t.logs)
        crashes.append(s.proc.returncode)
        s._reap()
        s.start(wait=False)  # it may die again before it is ready
    s.wait_ready()
    wait_until(lambda: row(r, 5) == (100, 5) or Pending(row(r, 5)),
               TIMEOUT, "R/S/5 confirmed as dead at S", on_timeout=t.logs)
    for i in range(1, 11):
        if i != 5:
            wait_until(lambda: row(r, i) == (100, 0) or Pending(row(r, i)),
                       TIMEOUT, f"R/S/{i} processed", on_timeout=t.logs)
    assert s.alive(), "S died a third time"
    assert all(rc < 0 for rc in crashes), crashes  # killed by a signal
    dead = s.sql("SELECT seq, status, last_error FROM tb_0033")
    assert [(x[0], x[1]) for x in dead] == [(5, -1)], dead
    assert "crashed the node 2 times" in dead[0][2], dead
    assert "journal" in dead[0][2], dead
    got = check_exactly_once(s, ["R"], 10, cancelled=[("R", 5)])
    assert got["total"] == 9, got
    log = s.log_text()
    assert "semqd stopped while plugin 'journal' was handling R/S/5" in log
    assert "crash 2 of 2" in log
    print(f"FIGURES: poison document crashes={len(crashes)} "
          f"exit_codes={crashes} quarantined=R/S/5 others_applied="
          f"{got['total']} node_serving=yes", flush=True)
    r.stop()
    s.stop()


@test(timeout=120)
def stuck_plugin_unhealthy(t):
    r, s = pair(t, {"stall_keys": "SLOW", "stall_ms": 4000},
                s_options={"plugin_timeout": "1s"}, admin=True)
    s.start()
    r.start()

    def health():
        code, body = s.admin_get("/health")
        return code, json.loads(body)

    assert health()[0] == 200
    r.enqueue("S", key="SLOW", payload=b"takes its time")

    def stuck():
        code, doc = health()
        return (code == 503 and doc["status"] == "plugin stuck" and
                doc) or Pending((code, doc))
    doc = wait_until(stuck, TIMEOUT, "/health 503 plugin stuck",
                     on_timeout=t.logs)
    assert "plugin 'journal'" in doc["detail"], doc
    assert "R/S/1" in doc["detail"], doc
    wait_until(lambda: row(r, 1) == (100, 0) or Pending(row(r, 1)),
               TIMEOUT, "R/S/1 processed", on_timeout=t.logs)
    wait_until(lambda: health()[0] == 200 or Pending(health()), TIMEOUT,
               "/health 200 again", on_timeout=t.logs)
    wait_until(lambda: "healthy again" in s.log_text() or Pending("no"),
               TIMEOUT, "S logs that the plugin returned", on_timeout=t.logs)
    assert "longer than plugin_timeout" in s.log_text()
    check_exactly_once(s, ["R"], 1)
    print(f"FIGURES: stuck plugin stall_ms=4000 plugin_timeout=1s "
          f"health_503_detail={doc['detail']!r}", flush=True)
    r.stop()
    s.stop()


if __name__ == "__main__":
    run()
