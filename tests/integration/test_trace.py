# SPDX-License-Identifier: MIT
"""`semqctl trace`: where is a document, asked from the shop's node over the
protocol (Trace / TraceReply frames, docs/PROTOCOL.md "Trace").

Real semqd nodes on loopback: R -> P (relay, store_and_forward) -> S1
(journal plugin with permanent_keys = bad). One run:

  1. a document delivered: R's row confirmed, P forwarding (no custody
     copy), S1 received it via P, processed; human output and --json;
  2. a document dead at S1: S1's redo entry, dead, with the plugin's error;
  3. S1 stopped, a document held at P: R relay-acked (held by P), P's
     custody copy unsent with S1 not connected, and S1 "not connected";
     --id finds the same document;
  4. rights: a shop R2 tracing R's document at P gets Error FORBIDDEN; a
     Trace of its own (unknown) document gets P's TraceReply;
  5. P stopped: the trace still shows R's own row, and P "not connected".

Run by ctest as integration_trace, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_trace.py [NAME]
"""

import os
import re
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wire  # noqa: E402
from wire import client_context, recv_frame  # noqa: E402
from relaytest import (READY_TIMEOUT, SHORT_TIMEOUT, link_ready,  # noqa: E402
                       make_relay, with_admin)
from semqtest import Pending, run, test, wait_until  # noqa: E402

IO_TIMEOUT = 10.0  # a Python peer waits for an answer


def send(r, key):
    """semqctl send to S1 with key; returns the seq."""
    rc, out, err = r.semqctl("send", "--to", "S1", "--type", "1", "--key",
                             key, "--data", f"bill {key}")
    assert rc == 0, (rc, out, err)
    return int(out.strip().rsplit("/", 1)[1])


def trace(r, *args):
    return r.semqctl_json("trace", *args)


def hop(doc, node):
    hs = [h for h in doc["hops"] if h["node"] == node]
    assert len(hs) == 1, (node, doc)
    return hs[0]


def rec(doc, node, mid):
    rs = [x for x in hop(doc, node)["records"] if x["id"] == mid]
    assert len(rs) == 1, (node, mid, doc)
    return rs[0]


def wait_status(t, r, seq, status):
    def done():
        row = r.sql("SELECT status, result FROM tb_0031 WHERE origin = 'R' "
                    "AND dest = 'S1' AND seq = ?", (seq,))
        return (row and row[0][0] == status and row[0]) or Pending(str(row))
    return wait_until(done, SHORT_TIMEOUT, f"R's row {seq} at {status}",
                      on_timeout=t.logs)


@test(timeout=120)
def trace_through_relay(t):
    p, (r,), (s,), _ = make_relay(
        t, ["R"], ["S1"], extra_certs=["R2"],
        server_options={"receipt_retention": "1h"})
    with_admin(r)
    s.journal_options["permanent_keys"] = "bad"
    p.add_peer("R2")  # a shop P knows, not a trusted relay
    for x in (p, s, r):
        x.start(timeout=READY_TIMEOUT)

    # 1. delivered
    ok = send(r, "bill-ok")
    wait_status(t, r, ok, 100)
    ok_id = f"R/S1/{ok}"
    doc = trace(r, "--key", "bill-ok")
    assert doc["messages"] == [ok_id], doc
    assert [h["node"] for h in doc["hops"]] == ["R", "P", "S1"], doc
    o = rec(doc, "R", ok_id)["outbound"]
    assert o["status_name"] == "confirmed" and o["result_name"] == \
        "processed", o
    pr = rec(doc, "P", ok_id)
    assert "outbound" not in pr and pr["next_hop"] == "S1" and \
        pr["next_connected"] is True, pr
    assert hop(doc, "P")["relay"] is True
    sr = rec(doc, "S1", ok_id)["receipt"]
    assert sr["state"] == "received" and sr["via"] == "P" and \
        sr["result_name"] == "processed", sr
    rc, human, err = r.semqctl("trace", "--key", "bill-ok")
    assert rc == 0, (rc, human, err)
    print(human, flush=True)
    assert "path: R -> P -> S1" in human, human
    assert "outbound: confirmed, result processed" in human, human
    assert "received " in human and "via P, result processed" in human, \
        human

    # 2. dead at S1
    bad = send(r, "bad")
    bad_id = f"R/S1/{bad}"
    wait_until(lambda: s.sql("SELECT status FROM tb_0033 WHERE seq = ?",
                             (bad,)) == [(-1,)],
               SHORT_TIMEOUT, "S1's redo entry dead", on_timeout=t.logs)
    doc = trace(r, "--key", "bad", "--dest", "S1")
    rd = rec(doc, "S1", bad_id)["redo"]
    assert rd["status_name"] == "dead" and "permanent" in \
        (rd["last_error"] or ""), rd
    rc, human, _ = r.semqctl("trace", "--id", bad_id)
    print(human, flush=True)
    assert rc == 0 and "redo entry #" in human and " dead" in human, human

    # 3. held at P while S1 is away
    s.stop()
    wait_until(lambda: not link_ready(p, "S1"), SHORT_TIMEOUT,
               "P saw S1 go", on_timeout=t.logs)
    held = send(r, "bill-held")
    held_id = f"R/S1/{held}"
    wait_status(t, r, held, 6)
    doc = trace(r, "--id", held_id)
    o = rec(doc, "R", held_id)["outbound"]
    assert o["status_name"] == "relay-acked" and o["custodian"] == "P", o
    pr = rec(doc, "P", held_id)
    assert pr["outbound"]["status_name"] == "unsent", pr
    assert pr["next_hop"] == "S1" and pr["next_connected"] is False, pr
    assert hop(doc, "S1")["note"] == "not connected", doc
    rc, human, _ = r.semqctl("trace", "--key", "bill-held")
    print(human, flush=True)
    assert "(held by P)" in human and "custody copy: unsent" in human and \
        "next hop S1 not connected" in human, human
    # several documents of one key: newest first, bounded
    again = send(r, "bill-held")
    doc = trace(r, "--key", "bill-held", "--limit", "2")
    assert doc["messages"] == [f"R/S1/{again}", held_id], doc
    # one line for S1, with both ids (P groups what it could not ask)
    assert len(hop(doc, "S1")["records"]) == 2, doc

    # 4. rights: R2 may not trace R's documents
    code, kind, body = raw_trace(p, p.certs, "R2", "R", "S1", held)
    assert kind == "error" and code == wire.ERR_FORBIDDEN, (kind, body)
    code, kind, body = raw_trace(p, p.certs, "R2", "R2", "S1", 1)
    assert kind == "trace_reply" and body["request"] == 7, (kind, body)
    assert [h["node"] for h in body["hops"]] == ["P", "S1"], body
    assert body["hops"][1]["note"] == "not connected", body

    # 5. P away: R's own row, and P not connected
    p.stop()
    wait_until(lambda: not link_ready(r, "P"), SHORT_TIMEOUT,
               "R saw P go", on_timeout=t.logs)
    doc = trace(r, "--id", held_id)
    assert rec(doc, "R", held_id)["outbound"]["status_name"] == \
        "relay-acked", doc
    assert hop(doc, "P")["note"] == "not connected", doc
    rc, human, _ = r.semqctl("trace", "--id", held_id)
    print(human, flush=True)
    assert rc == 0 and re.search(r"^  P +not connected$", human, re.M), \
        human
    # --since, the HTTP endpoint's checks, usage errors (exit 2), an
    # unknown key (exit 1), the command's help
    doc = trace(r, "--key", "bill-ok", "--since", "1h")
    assert doc["messages"] == [ok_id] and doc["asked"]["since"] > 0, doc
    for q in ("key=a&foo=1", "id=R/S1/0", "key=a&id=R/S1/1", "",
              "key=a&limit=65", "key=a&dest=S%201", "key=a&since=x"):
        status, body = r.admin_get("/trace?" + q)
        assert status == 400 and "error" in body, (q, status, body)
    assert r.semqctl("trace")[0] == 2
    assert r.semqctl("trace", "--id", "R/S1/x")[0] == 2
    assert r.semqctl("trace", "--key", "nope")[0] == 1
    rc, out, _ = r.semqctl("trace", "--help")
    assert rc == 0 and "--key K" in out and "--id O/D/SEQ" in out, out
    r.stop()


@test(timeout=60)
def trace_forward_only(t):
    """P forwards only (store_and_forward = no) and S1 keeps no received rows
    once confirmed (receipt_retention = 0): the trace shows P "forwarding
    only" and S1's "received and confirmed" from its watermark; with S1
    away, R's row goes back to unsent and P says S1 is not connected."""
    p, (r,), (s,), _ = make_relay(t, ["R"], ["S1"], saf=False,
                                  server_options={"receipt_retention": "0"})
    with_admin(r)
    for x in (p, s, r):
        x.start(timeout=READY_TIMEOUT)
    seq = send(r, "bill-1")
    mid = f"R/S1/{seq}"
    wait_status(t, r, seq, 100)
    wait_until(lambda: s.sql("SELECT count(*) FROM tb_0030")[0][0] == 0,
               SHORT_TIMEOUT, "S1's row compacted", on_timeout=t.logs)
    doc = trace(r, "--id", mid)
    assert hop(doc, "P")["store_and_forward"] is False, doc
    assert "outbound" not in rec(doc, "P", mid), doc
    sr = rec(doc, "S1", mid)["receipt"]
    assert sr["state"] == "confirmed" and sr["confirmed_through"] >= seq, sr
    rc, human, _ = r.semqctl("trace", "--id", mid)
    print(human, flush=True)
    assert "forwarding only (no custody copy); next hop S1 connected" in \
        human and "received and confirmed" in human, human

    s.stop()
    wait_until(lambda: not link_ready(p, "S1"), SHORT_TIMEOUT,
               "P saw S1 go", on_timeout=t.logs)
    seq = send(r, "bill-2")
    mid = f"R/S1/{seq}"
    wait_until(lambda: r.sql("SELECT attempts > 0 AND status = 0 FROM "
                             "tb_0031 WHERE seq = ?", (seq,)) == [(1,)],
               SHORT_TIMEOUT, "R's row back to unsent", on_timeout=t.logs)
    doc = trace(r, "--key", "bill-2")
    # refused by P (not connected), it waits to be sent again (a resend
    # may be under way at this moment)
    o = rec(doc, "R", mid)["outbound"]
    assert o["status_name"] in ("unsent", "sent") and o["attempts"] >= 1, o
    pr = rec(doc, "P", mid)
    assert pr["next_hop"] == "S1" and pr["next_connected"] is False, pr
    assert hop(doc, "S1")["note"] == "not connected", doc
    for x in (r, p):
        x.stop()


def raw_trace(p, certs, as_id, origin, dest, seq):
    """As as_id (its own certificate) asks P where origin/dest/seq is, with
    request 7. Returns (Error code or None, frame kind, body)."""
    raw = socket.create_connection(("127.0.0.1", p.listen_port),
                                   timeout=IO_TIMEOUT)
    try:
        sock = client_context(certs, as_id).wrap_socket(raw)
        sock.sendall(wire.frame(wire.hello_frame(as_id)))
        kind, h = recv_frame(sock)
        assert kind == "hello" and h["node_id"] == "P", (kind, h)
        assert h["features"] & 4, h  # FEATURE_TRACE
        sock.sendall(wire.frame({"trace": {"request": 7, "ids": [
            {"origin": origin, "dest": dest, "seq": seq}]}}))
        while True:
            kind, body = recv_frame(sock)
            if kind in ("error", "trace_reply"):
                return body.get("code"), kind, body
    finally:
        raw.close()


if __name__ == "__main__":
    run()
