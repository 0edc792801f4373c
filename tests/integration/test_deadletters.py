# SPDX-License-Identifier: MIT
"""Dead letters at incident scale, and the listings' filters
(docs/OPERATIONS.md, "Dead letters"), between two real semqd nodes.

R dials S. S's journal fails every call (fail_rate 1) with [redo]
max_tries 1, so each of R's 210 keyed documents goes dead at once with one
error; two more keys fail PERMANENT (permanent_keys), each with its own
error: 212 dead entries, three distinct errors. Then:

  - `redo list --group-by error` (text and --json) counts 210, 1, 1;
  - S logs a WARN line "dead: redo entry N" per dead document;
  - R: `outbound list --key` finds one document, "dead at S" (result 5);
    `status` counts R's 212 documents dead at S;
  - HTTP at R: /outbound?key=, paging, /streams?dest=;
  - HTTP at S: /redo?group_by=error, /redo?key=, paging (offset, total),
    POST /redo/retry with dry_run, 400 naming a bad since=/where=;
  - bad --since/--where: exit 2 naming the option;
  - `redo retry --where error~INJECTED --dest S --since 1h --dry-run`
    lists the 209 left after one was discarded over HTTP (its line in
    S's log names the client); the real run retries exactly those ids,
    with "retried 209/209" on stderr and the operator's line; the same for
    `redo discard --where error~permanent_keys` (2 entries).

Run by ctest as integration_deadletters, or by hand:
  SEMQ_BUILD_DIR=build python3 tests/integration/test_deadletters.py
"""

import http.client
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import Pending, connect, run, test, wait_until  # noqa: E402

FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "500ms"}
N = 210
SETTLE = 60.0


def post(node, path, body):
    host, port = node.admin.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        c.request("POST", path, body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read().decode())
    finally:
        c.close()


def get(node, path):
    st, text = node.admin_get(path)
    return st, json.loads(text)


def ctl_json(node, *args):
    rc, out, err = node.semqctl("--json", *args)
    assert rc == 0, (args, rc, err)
    return json.loads(out), err


@test
def dead_letters_grouped_filtered_and_bulk_with_dry_run(t):
    certs = t.certs(["R", "S"])
    s = t.node("S", certs, admin=True, node_options=FAST,
               journal_options={"fail_rate": "1",
                                "permanent_keys": "BAD-A,BAD-B"},
               redo={"max_tries": 1})
    r = t.node("R", certs, listen=False, journal=False, admin=True,
               node_options=FAST)
    connect(r, s)
    s.start()
    r.start()
    # The permanent ones first: their dead lines come before the storm's
    # rate limit (20 lines a second).
    r.enqueue("S", type=1, key="BAD-A", payload=b"a")
    r.enqueue("S", type=1, key="BAD-B", payload=b"b")
    for i in range(N):
        r.enqueue("S", type=1, key=f"k{i}", payload=b"doc")
    r.wait_all_confirmed("S", N + 2, timeout=SETTLE)

    def dead():
        n = s.sql("SELECT count(*) FROM tb_0033 WHERE status = -1")[0][0]
        return n == N + 2 or Pending(f"{n} dead")
    wait_until(dead, SETTLE, "every document dead at S")

    # Grouped by error.
    doc, _ = ctl_json(s, "redo", "list", "--status", "dead",
                      "--group-by", "error")
    counts = sorted(g["count"] for g in doc["groups"])
    assert counts == [1, 1, N], doc
    big = [g for g in doc["groups"] if g["count"] == N][0]
    assert "injected failure" in big["error"] and big["dests"] == ["S"], big
    rc, out, _ = s.semqctl("redo", "list", "--group-by", "error")
    assert rc == 0 and out.splitlines()[0].split()[:4] == [
        "COUNT", "OLDEST", "NEWEST", "DESTS"], out
    assert out.splitlines()[1].split()[0] == str(N), out

    # The dead line, with the redo id.
    (rid,), = s.sql("SELECT id FROM tb_0033 WHERE msg_key = 'BAD-A'")
    wait_until(lambda: f"dead: redo entry {rid} " in s.log_text() or
               Pending("no dead line"), 10, "the dead line in S's log")

    # Where is bill k5? At the origin: dead at S.
    rows, _ = ctl_json(r, "outbound", "list", "--key", "k5")
    assert len(rows) == 1 and rows[0]["result_name"] == "dead", rows
    rc, out, _ = r.semqctl("outbound", "list", "--key", "k5")
    assert rc == 0 and "dead at S" in out and "confirmed" in out, out
    rc, out, _ = r.semqctl("outbound", "show", rows[0]["id"])
    assert rc == 0 and "5 dead at S (its redo entry there was dead when it " \
        "confirmed" in out, out
    doc, _ = ctl_json(r, "status")
    assert [(d["dest"], d["messages"]) for d in doc["dead_at_dest"]] == \
        [("S", N + 2)], doc["dead_at_dest"]
    rc, out, _ = r.semqctl("status")
    assert rc == 0 and "dead at the destination" in out and \
        "tb_0031" not in out, out

    # The same at R's admin HTTP, for the dashboard.
    st, doc = get(r, "/outbound?key=k5")
    assert st == 200 and doc["total"] == 1 and \
        doc["rows"][0]["result_name"] == "dead", doc
    st, doc = get(r, "/outbound?status=confirmed&dest=S&limit=10&offset=205")
    assert st == 200 and doc["total"] == N + 2 and doc["count"] == 7, doc
    st, doc = get(r, "/outbound?since=2026-02-30T00:00:00Z")
    assert st == 400 and "since '2026-02-30T00:00:00Z'" in doc["error"], doc
    st, doc = get(r, "/streams?dest=S")
    assert st == 200 and [x["dest"] for x in doc["outbound"]] == ["S"], doc
    st, doc = get(r, "/streams?dest=X")
    assert st == 200 and doc["outbound"] == [], doc
    st, doc = get(r, "/streams?key=k5")
    assert st == 400 and "key=" in doc["error"], doc

    # HTTP: grouping, key, paging, bad values.
    st, doc = get(s, "/redo?group_by=error&status=dead")
    assert st == 200 and sorted(g["count"] for g in doc["groups"]) == \
        [1, 1, N], doc
    st, doc = get(s, "/redo?key=k7")
    assert st == 200 and doc["total"] == 1 and \
        doc["entries"][0]["key"] == "k7", doc
    st, doc = get(s, "/redo?status=dead&limit=50&offset=200&since=1h")
    assert st == 200 and doc["total"] == N + 2 and doc["count"] == 12, doc
    st, doc = get(s, "/redo?since=yesterday")
    assert st == 400 and "since 'yesterday'" in doc["error"], doc
    st, doc = get(s, "/redo?where=key~x")
    assert st == 400 and "where 'key~x'" in doc["error"], doc
    st, doc = post(s, "/redo/retry", {"where": "error~PERMANENT_KEYS",
                                      "dry_run": True})
    assert st == 200 and doc["count"] == 2 and doc["dry_run"], doc
    st, doc = post(s, "/redo/retry", {"where": "error~x", "since": "soon"})
    assert st == 400 and "since 'soon'" in doc["error"], doc
    # A real one over HTTP: one line in S's log naming the client.
    st, doc = post(s, "/redo/discard", {"where": "error~injected",
                                        "key": "k9", "reason": "dup bill"})
    assert st == 200 and doc["count"] == 1 and not doc["dry_run"] and \
        doc["entries"][0]["key"] == "k9", doc
    wait_until(lambda: "discarded 1 redo entry where error~injected, key "
               "k9: dup bill" in s.log_text() or Pending("no line"), 10,
               "the operator's line in S's log")
    assert "(admin HTTP from 127.0.0.1:" in s.log_text()

    # Bad filters on the command line: exit 2 naming the option.
    for args, culprit in ((("redo", "list", "--since", "yesterday"),
                           "--since 'yesterday'"),
                          (("redo", "retry", "--where", "error", "--dry-run"),
                           "--where 'error'"),
                          (("outbound", "list", "--since", "5x"),
                           "--since '5x'")):
        rc, _, err = s.semqctl(*args)
        assert rc == 2 and culprit in err, (args, rc, err)

    # Bulk retry: the dry run lists exactly what the real run retries.
    flt = ("--where", "error~INJECTED", "--dest", "S", "--since", "1h")
    dry, _ = ctl_json(s, "redo", "retry", *flt, "--dry-run")
    ids = sorted(e["id"] for e in dry["entries"])
    assert dry["dry_run"] and dry["count"] == N - 1 and len(ids) == N - 1, dry
    assert s.sql("SELECT count(*) FROM tb_0033 WHERE status = -1")[0][0] \
        == N + 1, "the dry run changed something"
    real, err = ctl_json(s, "redo", "retry", *flt)
    assert sorted(e["id"] for e in real["entries"]) == ids, real
    assert f"retried {N - 1}/{N - 1}" in err and \
        f"semqctl: operator" in err and f"retried {N - 1} redo entries " \
        "(--where error~INJECTED --dest S --since 1h)" in err, err

    # Bulk discard of the two permanent failures.
    dry, _ = ctl_json(s, "redo", "discard", "--where", "error~permanent_keys",
                      "--reason", "bad documents", "--dry-run")
    ids = sorted(e["id"] for e in dry["entries"])
    assert len(ids) == 2, dry
    real, err = ctl_json(s, "redo", "discard", "--where",
                         "error~permanent_keys", "--reason", "bad documents")
    assert sorted(e["id"] for e in real["entries"]) == ids, real
    got = s.sql("SELECT id, status, discard_reason FROM tb_0033 WHERE "
                "status = -2 AND msg_key <> 'k9' ORDER BY id")
    assert [g[0] for g in got] == ids and \
        all(g[2] == "bad documents" for g in got), got


if __name__ == "__main__":
    run()
