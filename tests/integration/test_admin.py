# SPDX-License-Identifier: MIT
"""The admin HTTP endpoint of semqd and `semqctl peers` (SPEC §8).

An origin R dials a receiver S over mutual TLS on loopback; both serve the
admin HTTP on a loopback port ([node] admin), S with an admin_token. The
tests talk HTTP to the real daemons and check every answer against the
nodes' databases:

  1. /health and /peers: nothing answers before start; after start /health
     is 200 {"status": "ready", "node", "uptime_s"}; /peers lists the
     connection (peer, state ready, direction, address, since, bytes
     pending) on both sides, and a configured peer that cannot be reached
     as disconnected with its next dial. `semqctl peers` prints the same as
     a table and as --json; it fails with one line (exit 1) when the daemon
     is not running and when [node] admin is not set. An admin port in use
     stops semqd at start (exit 1), a host name instead of an address or
     an empty admin_token too (exit 2), each with a line naming the key.
  2. /metrics parses as Prometheus text (a parser here checks HELP/TYPE,
     names, labels and histogram buckets), and its numbers match the
     tables: semq_queue_depth equals COUNT(*) per table, stream and status
     in sqlite, the redo gauges the tb_0033 counts, the watermark
     semq_stream_in, the oldest unconfirmed age the oldest row; the
     counters equal the messages moved (R sent and confirmed 42, S
     received 42 with 2 into tb_0033, no duplicates), and the commit
     histograms add up to them. /streams says the same in JSON.
  3. The redo queue over HTTP: GET /redo?status=dead and /redo/ID match
     tb_0033 row by row (payload in base64); POST retry and discard are
     refused with 401 without the token, with a wrong one and with another
     scheme, and nothing changes in the database; with the token they work
     (the entry runs again, or is discarded with the reason), and
     retry-all-dead retries every dead entry. 400 for bad ids, queries and
     bodies (naming the culprit), 404 for unknown paths and entries, 405
     (with Allow) for wrong methods, 409 for an entry in the wrong status;
     without admin_token, actions from loopback are allowed.
  4. While another process holds the database's write lock, the store
     thread cannot answer: /health and /peers still answer while it is
     provably stuck on the lock (the network thread never touches the
     database) and a request for the tables gets 503 after 10 s; after the
     lock is gone it is served again.
  5. With admin_token every read needs the token too: /metrics, /streams,
     /redo, /redo/ID and /peers answer 401 (a JSON error naming the
     header, WWW-Authenticate: Bearer) without it, with a wrong one and
     with another scheme, and are served with it; /health and the
     dashboard's files are served without it. A burst of wrong tokens is
     one line in the log. Without admin_token reads are open, and a
     redo entry comes without its payload ("payload_withheld" says why).
  6. The counts /metrics, /streams and `semqctl status` report come from
     semq_counts (kept by triggers) and are what a GROUP BY over the tables
     says, after every step of a workload through a store-and-forward
     relay: an origin's messages held in custody, the relay's copies,
     cancels, delayed messages and dead ones at the destination, redo
     actions, and the purges of all three tables at restart.

Run by ctest as integration_admin, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_admin.py [NAME]
"""

import base64
import http.client
import json
import math
import os
import re
import socket
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (HarnessError, Pending, connect,  # noqa: E402
                      dead_port, log_lines, run, test, wait_log,
                      wait_until)

FAST = {"poll_interval": "20ms", "query_after": "10s",
        "reconnect_min": "100ms", "reconnect_max": "500ms"}
TOKEN = "s3cret-token-for-tests"
SETTLE_TIMEOUT = 30.0

OUT_NAMES = {0: "unsent", 4: "sent", 6: "relay-acked", 8: "held",
             100: "confirmed", -2: "cancelled"}
IN_NAMES = {0: "unacked", 1: "acked"}
REDO_NAMES = {0: "pending", 1: "waiting", 2: "done", -1: "dead",
              -2: "discarded"}
RS_PENDING, RS_DEAD, RS_DISCARDED = 0, -1, -2


def now_ms():
    return int(time.time() * 1000)


# ---- HTTP ---------------------------------------------------------------

def token_of(node):
    """node's [node] admin_token, or None."""
    return node.node_options.get("admin_token")


def auth(node, token=True):
    """The Authorization header for node: its own token (True), none
    (None) or the given one."""
    if token is True:
        token = token_of(node)
    return {"Authorization": f"Bearer {token}"} if token else {}


def call(node, method, path, body=None, headers=None, timeout=10.0):
    """One request to node's admin address; (status, headers, text)."""
    host, port = node.admin.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return (r.status, {k.lower(): v for k, v in r.getheaders()},
                r.read().decode("utf-8"))
    finally:
        c.close()


def http_json(node, method, path, expect, **kw):
    """A request whose answer must be `expect` with a JSON body; the body."""
    status, hdrs, text = call(node, method, path, **kw)
    if status != expect:
        raise HarnessError(f"{node.id}: {method} {path} -> {status}, "
                           f"expected {expect}: {text}")
    if not hdrs.get("content-type", "").startswith("application/json"):
        raise HarnessError(f"{method} {path}: content-type "
                           f"{hdrs.get('content-type')!r}, not JSON")
    return json.loads(text)


def get(node, path, expect=200, token=True, **kw):
    """A read, with node's admin token (token=True), none (None) or the
    given one."""
    kw["headers"] = dict(auth(node, token), **kw.get("headers", {}))
    return http_json(node, "GET", path, expect, **kw)


def post(node, path, expect, token=None, scheme="Bearer", body=None):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"{scheme} {token}"
    return http_json(node, "POST", path, expect, headers=headers, body=body)


def error_of(doc, *words):
    """The "error" text of an error answer, which must name every word."""
    if "error" not in doc:
        raise HarnessError(f"not an error answer: {doc}")
    for w in words:
        if w not in doc["error"]:
            raise HarnessError(f"error {doc['error']!r} does not name "
                               f"{w!r}")
    return doc["error"]


# ---- Prometheus text format ----------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
                    r"(,|$)")
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def _unescape(v):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n"
                  else m.group(1), v)


def _value(s):
    if s in ("+Inf", "-Inf", "NaN"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    return float(s)


def parse_prometheus(text):
    """Parses the text exposition format into {family: {"type", "help",
    "samples": [(name, {label: value}, float)]}}. Raises HarnessError on
    anything a Prometheus server would refuse or that breaks the
    conventions: a sample before its family's TYPE, a family declared twice,
    a counter not named *_total, a histogram sample that is not _bucket (with
    le), _sum or _count, buckets that are not cumulative or whose +Inf bucket
    differs from _count, a repeated series."""
    fams, seen_series = {}, set()
    if not text.endswith("\n"):
        raise HarnessError("metrics: the text does not end with a newline")
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"metrics line {n} {line!r}"
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, rest = line[2:6], line[7:]
            name, _, arg = rest.partition(" ")
            if not re.fullmatch(_NAME, name) or not arg:
                raise HarnessError(f"{where}: malformed {kind}")
            f = fams.setdefault(name, {"type": None, "help": None,
                                       "samples": []})
            key = "help" if kind == "HELP" else "type"
            if f[key] is not None:
                raise HarnessError(f"{where}: second {kind} for {name}")
            if f["samples"]:
                raise HarnessError(f"{where}: {kind} after samples")
            if key == "type" and arg not in _TYPES:
                raise HarnessError(f"{where}: unknown type {arg!r}")
            f[key] = arg
            continue
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise HarnessError(f"{where}: not a sample")
        name, labels_text, value = m.group(1), m.group(2) or "", m.group(3)
        labels, pos = {}, 0
        while pos < len(labels_text):
            lm = _LABEL.match(labels_text, pos)
            if not lm:
                raise HarnessError(f"{where}: bad labels")
            if lm.group(1) in labels:
                raise HarnessError(f"{where}: label {lm.group(1)} twice")
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[:-len(suffix)]
            if name.endswith(suffix) and base in fams and \
                    fams[base]["type"] == "histogram":
                family = base
        f = fams.get(family)
        if not f or f["type"] is None:
            raise HarnessError(f"{where}: sample before the TYPE of "
                               f"{family}")
        if f["type"] == "counter" and not name.endswith("_total"):
            raise HarnessError(f"{where}: counter not named *_total")
        if f["type"] == "histogram":
            if name == family or (name.endswith("_bucket") and
                                  "le" not in labels):
                raise HarnessError(f"{where}: histogram sample without "
                                   "_bucket{le}, _sum or _count")
        series = (name, tuple(sorted(labels.items())))
        if series in seen_series:
            raise HarnessError(f"{where}: series repeated")
        seen_series.add(series)
        try:
            v = _value(value)
        except ValueError:
            raise HarnessError(f"{where}: value {value!r} is not a number")
        f["samples"].append((name, labels, v))
    for family, f in fams.items():
        if f["type"] is None or f["help"] is None:
            raise HarnessError(f"metrics: {family} lacks HELP or TYPE")
        if f["type"] == "histogram":
            buckets = [(float(l["le"].replace("+Inf", "inf")), v)
                       for n, l, v in f["samples"]
                       if n == family + "_bucket"]
            count = [v for n, _, v in f["samples"]
                     if n == family + "_count"]
            if not buckets or buckets[-1][0] != math.inf or len(count) != 1:
                raise HarnessError(f"metrics: histogram {family} needs "
                                   "buckets up to +Inf and one _count")
            for (a, va), (b, vb) in zip(buckets, buckets[1:]):
                if not (a < b and va <= vb):
                    raise HarnessError(f"metrics: {family} buckets are not "
                                       f"ascending and cumulative: "
                                       f"{buckets}")
            if buckets[-1][1] != count[0]:
                raise HarnessError(f"metrics: {family} +Inf bucket "
                                   f"{buckets[-1][1]} != _count {count[0]}")
    return fams


def metrics(node):
    status, hdrs, text = call(node, "GET", "/metrics", headers=auth(node))
    if status != 200:
        raise HarnessError(f"{node.id}: GET /metrics -> {status}: {text}")
    ctype = hdrs.get("content-type", "")
    if not ctype.startswith("text/plain") or "version=0.0.4" not in ctype:
        raise HarnessError(f"/metrics content-type {ctype!r}")
    return parse_prometheus(text)


def sample(fams, name, **labels):
    """The value of the one sample `name` with exactly these labels."""
    family = name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[:-len(suffix)] in fams:
            family = name[:-len(suffix)]
    hits = [v for n, l, v in fams.get(family, {"samples": []})["samples"]
            if n == name and l == labels]
    if len(hits) != 1:
        raise HarnessError(f"metrics: {len(hits)} samples {name}{labels}")
    return hits[0]


# ---- the nodes ------------------------------------------------------------

def make_pair(t, s_journal=None, extra_r_peer=False, r_admin=True,
              s_token=TOKEN):
    """R (origin, dials S, admin without token) and S (journal plugin,
    admin with s_token); not started."""
    certs = t.certs(["R", "S"])
    s = t.node("S", certs, admin=True,
               node_options=dict(FAST, **({"admin_token": s_token}
                                          if s_token else {})),
               journal_options=s_journal)
    r = t.node("R", certs, listen=False, journal=False, admin=r_admin,
               node_options=FAST)
    connect(r, s)
    if extra_r_peer:
        # A peer nobody listens for: dialled again and again (its port is
        # held for as long as R lives; a free_port() number once answered).
        r.x_port_holder, port = dead_port()
        r.add_peer("X", connect=f"127.0.0.1:{port}")
    return r, s


def refused(node, path="/health"):
    """True when nothing accepts connections on node's admin address."""
    try:
        call(node, "GET", path, timeout=2.0)
    except ConnectionRefusedError:
        return True
    return False


def peer_entry(doc, peer):
    hits = [p for p in doc["peers"] if p["peer"] == peer]
    if len(hits) != 1:
        raise HarnessError(f"/peers: {len(hits)} entries for {peer}: {doc}")
    return hits[0]


@test(timeout=180)
def health_and_peers(t):
    r, s = make_pair(t, extra_r_peer=True)
    assert refused(s), "something answers on S's admin port before start"
    r.write_config()
    rc, out, err = r.semqctl("peers")
    assert rc == 1 and out == "", (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and \
        "cannot reach semqd's admin HTTP" in err and \
        "is semqd running" in err, err

    s.start()
    r.start()
    for n in (s, r):
        h = get(n, "/health")
        assert h["status"] == "ready" and h["node"] == n.id and \
            isinstance(h["uptime_s"], int) and h["uptime_s"] >= 0, h

    def ready(n, peer):
        doc = get(n, "/peers")
        e = [p for p in doc["peers"] if p["peer"] == peer]
        return (doc if e and e[0]["state"] == "ready"
                else Pending(doc["peers"]))
    t0 = now_ms()
    doc_s = wait_until(lambda: ready(s, "R"), SETTLE_TIMEOUT,
                       "S: /peers shows R ready", on_timeout=t.logs)
    doc_r = wait_until(lambda: ready(r, "S"), SETTLE_TIMEOUT,
                       "R: /peers shows S ready", on_timeout=t.logs)
    assert doc_s["node"] == "S" and doc_r["node"] == "R"
    e = peer_entry(doc_s, "R")
    assert e["direction"] == "accepted", e
    assert e["instance"] is None, e  # R is its node's only instance
    assert re.fullmatch(r"127\.0\.0\.1:\d+", e["address"]), e
    assert isinstance(e["conn_id"], int) and e["conn_id"] > 0, e
    assert e["since"] <= e["ready_at"] <= doc_s["now"], e
    assert doc_s["now"] - e["since"] < 60000, e
    assert isinstance(e["pending_bytes"], int) and e["pending_bytes"] >= 0
    e = peer_entry(doc_r, "S")
    assert e["direction"] == "dialled" and e["address"] == s.listen, e
    # The unreachable peer: not connected, dialled again soon.
    x = wait_until(lambda: (lambda p: p if p["state"] == "disconnected"
                            and p["attempts"] >= 1 else Pending(p))(
                                peer_entry(get(r, "/peers"), "X")),
                   SETTLE_TIMEOUT, "R: /peers shows X disconnected")
    assert x["direction"] == "dialled" and x["conn_id"] is None, x
    assert x["address"] == r.peers["X"]["connect"], x
    assert x["next_dial_at"] and x["next_dial_at"] >= t0, x
    assert 0 <= x["next_dial_in_ms"] <= 60000, x

    # semqctl peers: a table with the same peers, and the same as JSON.
    # X is dialled again and again; a dial in flight shows "tls" until its
    # refusal is read, so take a table written between two dials.
    def table():
        rc, out, err = r.semqctl("peers")
        assert rc == 0 and err == "", (rc, err)
        x_row = [ln.split() for ln in out.splitlines() if ln.startswith("X ")]
        return out if x_row and x_row[0][1] == "disconnected" else \
            Pending(out)
    out = wait_until(table, SETTLE_TIMEOUT, "semqctl peers: X disconnected")
    lines = out.splitlines()
    assert lines[0].split() == ["PEER", "STATE", "DIRECTION", "ADDRESS",
                                "SINCE", "PENDING", "NEXT_DIAL", "DOWN",
                                "LAST_ERROR"], out
    rows = {ln.split()[0]: ln.split() for ln in lines[1:]}
    assert rows["S"][1:4] == ["ready", "dialled", s.listen], out
    assert rows["X"][1:4] == ["disconnected", "dialled",
                              r.peers["X"]["connect"]], out
    x_line = next(ln for ln in lines[1:] if ln.split()[0] == "X")
    assert re.search(r" (due|in \d+[smhd]) +\d+[smhd] ", x_line), out
    print("---- semqctl peers ----\n" + out + "---- end ----")
    doc = r.semqctl_json("peers")
    assert doc["node"] == "R" and \
        {p["peer"] for p in doc["peers"]} == {"S", "X"}, doc
    assert peer_entry(doc, "S")["state"] == "ready", doc
    rc, out, err = s.semqctl("peers")
    assert rc == 0 and out.splitlines()[1].split()[:3] == \
        ["R", "ready", "accepted"], out

    # A node without [node] admin: semqctl peers cannot ask it.
    n = t.node("N", None, listen=False, journal=False)
    n.write_config()
    rc, out, err = n.semqctl("peers")
    assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1, \
        (rc, out, err)
    assert f"{n.ini}: [node] admin is not set; semqctl peers asks the " \
        "running daemon over it" in err, err

    r.stop()
    s.stop()
    assert refused(s) and refused(r), "admin still answers after stop"
    rc, out, err = r.semqctl("peers", "--json")
    assert rc == 1 and out == "" and "is semqd running" in err, (rc, err)

    # The admin port is bound at start: in use is a start-up error (exit
    # 1), a name instead of a numeric address a configuration error (2).
    certs = t.certs(["B"])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        for admin, opts, want_rc, want in (
                (f"127.0.0.1:{port}", {}, 1,
                 f"[node] admin 127.0.0.1:{port}: Address already in use"),
                ("localhost:9", {}, 2,
                 "[node] admin: 'localhost:9' is not a numeric address"),
                (True, {"admin_token": ""}, 2,    # no empty password
                 "[node] admin_token: empty value")):
            b = t.node("B", certs, admin=admin, listen=False,
                       peers={"S": {"connect": s.listen}},
                       node_options=opts)
            b.start(wait=False)
            rc = b.proc.wait(timeout=30)
            b.stop(check=False)
            assert rc == want_rc and want in b.log_text(), \
                (rc, b.log_tail())


def db_depths(node):
    """{(table, origin, dest, status name): COUNT(*)} from sqlite."""
    got = {}
    for table, col, names in (("tb_0031", "status", OUT_NAMES),
                              ("tb_0030", "ack_status", IN_NAMES),
                              ("tb_0033", "status", REDO_NAMES)):
        for o, d, st, n in node.sql(
                f"SELECT COALESCE(origin, ''), dest, {col}, COUNT(*) "
                f"FROM {table} GROUP BY 1, 2, 3"):
            got[(table, o, d, names[st])] = n
    return got


def metric_depths(fams):
    """The nonzero semq_queue_depth samples, keyed as db_depths()."""
    return {(l["table"], l["origin"], l["dest"], l["status"]): int(v)
            for _, l, v in fams["semq_queue_depth"]["samples"] if v}


@test(timeout=240)
def metrics_match_tables(t):
    r, s = make_pair(t, s_journal={"permanent_keys": "bad"})
    s.start()
    r.start()
    later = now_ms() + 3600 * 1000
    c = r.connect_db(readonly=False)
    with c:
        for i in range(40):
            c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload) "
                      "VALUES ('S', 1, ?, ?)", (f"k{i % 4}",
                                                f"doc {i}".encode()))
        c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload) "
                  "VALUES ('S', 1, 'bad', x'00ff')")
        c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload, "
                  "deliver_at) VALUES ('S', 1, 'later', x'01', ?)", (later,))
        # No route to Z: it stays unsent, the oldest unconfirmed row.
        c.execute("INSERT INTO tb_0031(dest, type, payload) "
                  "VALUES ('Z', 1, x'02')")
    c.close()
    r.wait_all_confirmed("S", 42, timeout=SETTLE_TIMEOUT)
    wait_until(lambda: s.redo_status_counts() == {RS_PENDING: 1, RS_DEAD: 1}
               or Pending(s.redo_status_counts()), SETTLE_TIMEOUT,
               "S: one dead and one delayed entry", on_timeout=t.logs)

    # S's stream from R settled: watermark 42, every receipt acknowledged
    # (R's last acknowledgements may still be on the way when R is done).
    wait_until(lambda: s.settled("R", 42, "S"), SETTLE_TIMEOUT,
               "S: R's stream settled at 42", on_timeout=t.logs)
    # Queue depths: equal to the tables once the nodes are idle (acks and
    # compaction run on their own schedule, so compare until they agree).
    for n in (r, s):
        def same(n=n):
            m, d = metric_depths(metrics(n)), db_depths(n)
            return m == d or Pending(f"metrics {m} != tables {d}")
        wait_until(same, SETTLE_TIMEOUT, f"{n.id}: semq_queue_depth equals "
                   "COUNT(*) per table, stream and status",
                   on_timeout=t.logs)

    fr, fs = metrics(r), metrics(s)
    # Every stream lists every status of its table, zeros included.
    for _, l, _v in fr["semq_queue_depth"]["samples"]:
        assert l["table"] == "tb_0031" and l["origin"] == "R", l
    assert {l["status"] for _, l, _v in fr["semq_queue_depth"]["samples"]
            if l["dest"] == "Z"} == set(OUT_NAMES.values())
    assert sample(fr, "semq_queue_depth", table="tb_0031", origin="R",
                  dest="S", status="confirmed") == 42
    assert sample(fr, "semq_queue_depth", table="tb_0031", origin="R",
                  dest="Z", status="unsent") == 1
    # Counters: the messages moved.
    assert sample(fr, "semq_messages_sent_total") == 42
    assert sample(fr, "semq_messages_confirmed_total") == 42
    assert sample(fr, "semq_messages_received_total") == 0
    assert sample(fs, "semq_messages_received_total") == 42
    assert sample(fs, "semq_messages_duplicate_total") == 0
    assert sample(fs, "semq_redo_created_total") == 2
    assert sample(fs, "semq_messages_sent_total") == 0
    assert s.journal_count() + sum(s.redo_status_counts().values()) == 42
    assert r.outbound_status_counts("S") == {100: 42}
    # The commit histograms add up to the counters.
    assert sample(fr, "semq_commit_batch_messages_sum") == 42
    assert sample(fs, "semq_commit_batch_messages_sum") == 42
    for f in (fr, fs):
        n = sample(f, "semq_commit_batch_jobs_count")
        assert n >= 1 and sample(f, "semq_commit_duration_seconds_count") \
            == n == sample(f, "semq_commit_batch_messages_count")
        assert sample(f, "semq_commit_duration_seconds_sum") > 0
        assert sample(f, "semq_commit_batches_total") >= n
        assert sample(f, "semq_connections", state="ready") == 1
        assert sample(f, "semq_connections", state="tls") == 0
        assert abs(sample(f, "semq_start_time_seconds") - time.time()) < 600
    assert sample(fs, "semq_peer_ready", peer="R") == 1
    # Redo gauges.
    for st, name in REDO_NAMES.items():
        want = s.redo_status_counts().get(st, 0)
        assert sample(fs, "semq_redo_entries", status=name) == want, name
        assert sample(fs, "semq_queue_depth", table="tb_0033", origin="R",
                      dest="S", status=name) == want, name
    # The watermark, and the oldest unconfirmed row.
    (wm,), = s.sql("SELECT confirmed_through FROM semq_stream_in WHERE "
                   "origin = 'R' AND dest = 'S'")
    assert sample(fs, "semq_confirmed_through", origin="R", dest="S") == wm
    (z_created,), = r.sql("SELECT created_at FROM tb_0031 WHERE dest = 'Z'")
    age = sample(fr, "semq_oldest_unconfirmed_age_seconds", direction="out",
                 origin="R", dest="Z")
    assert abs(age - (now_ms() - z_created) / 1000) < 5, (age, z_created)
    assert sample(fr, "semq_stream_unconfirmed", direction="out",
                  origin="R", dest="Z") == 1
    assert sample(fr, "semq_stream_unconfirmed", direction="out",
                  origin="R", dest="S") == 0

    # /streams: the same in JSON.
    st = get(r, "/streams")
    out = {(x["origin"], x["dest"]): x for x in st["outbound"]}
    assert st["node"] == "R" and st["inbound"] == [], st
    assert out[("R", "S")]["counts"]["confirmed"] == 42
    assert out[("R", "S")]["depth"] == 0
    assert out[("R", "S")]["oldest_unconfirmed_at"] is None
    assert out[("R", "Z")]["counts"]["unsent"] == 1
    assert out[("R", "Z")]["depth"] == 1
    assert out[("R", "Z")]["oldest_unconfirmed_at"] == z_created
    assert out[("R", "Z")]["oldest_unconfirmed_age_ms"] >= 0
    st = get(s, "/streams")
    (x,) = st["inbound"]
    assert (x["origin"], x["dest"]) == ("R", "S") and st["outbound"] == []
    assert x["confirmed_through"] == wm, (x, wm)
    assert x["redo"] == {"pending": 1, "waiting": 0, "done": 0, "dead": 1,
                         "discarded": 0}, x
    acked = dict(s.sql("SELECT ack_status, COUNT(*) FROM tb_0030 "
                       "GROUP BY ack_status"))
    assert x["counts"] == {"unacked": acked.get(0, 0),
                           "acked": acked.get(1, 0)}, (x, acked)
    assert x["depth"] == acked.get(0, 0)
    r.stop()
    s.stop()


REDO_COLS = ("id", "origin", "dest", "seq", "type", "msg_key", "prev_seq",
             "deliver_at", "msg_created_at", "status", "tries", "level",
             "next_attempt_at", "last_error", "discard_reason", "created_at",
             "updated_at", "payload")


def redo_rows(s, where="1", params=()):
    rows = s.sql(f"SELECT {', '.join(REDO_COLS)} FROM tb_0033 WHERE {where} "
                 "ORDER BY id", params)
    return [dict(zip(REDO_COLS, r)) for r in rows]


def check_entry(e, row, with_payload=False):
    """An entry of the HTTP redo JSON against its tb_0033 row."""
    same = {"id": "id", "origin": "origin", "dest": "dest", "seq": "seq",
            "type": "type", "key": "msg_key", "prev_seq": "prev_seq",
            "deliver_at": "deliver_at", "msg_created_at": "msg_created_at",
            "status": "status", "tries": "tries", "level": "level",
            "next_attempt_at": "next_attempt_at", "last_error": "last_error",
            "discard_reason": "discard_reason", "created_at": "created_at",
            "updated_at": "updated_at"}
    for k, col in same.items():
        assert e[k] == row[col], (k, e[k], row[col])
    assert e["message"] == f"{row['origin']}/{row['dest']}/{row['seq']}"
    assert e["status_name"] == REDO_NAMES[row["status"]], e
    assert e["payload_len"] == len(row["payload"]), e
    if with_payload:
        assert base64.b64decode(e["payload"]) == row["payload"], e
        try:
            text = row["payload"].decode("utf-8")
            assert e["payload_text"] == text, e
        except UnicodeDecodeError:
            assert "payload_text" not in e, e


@test(timeout=240)
def redo_endpoints(t):
    r, s = make_pair(t, s_journal={"permanent_keys": "bad1,bad2,bad3"})
    s.start()
    r.start()
    c = r.connect_db(readonly=False)
    with c:
        for i in (1, 2, 3):
            c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload) "
                      "VALUES ('S', 2800, ?, ?)",
                      (f"bad{i}", b"bill \xff" if i == 2 else
                       f"bill {i}".encode()))
        c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload, "
                  "deliver_at) VALUES ('S', 1, 'later', x'01', ?)",
                  (now_ms() + 3600 * 1000,))
        c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload) "
                  "VALUES ('S', 1, 'good', x'03')")
    c.close()
    r.wait_all_confirmed("S", 5, timeout=SETTLE_TIMEOUT)
    wait_until(lambda: s.redo_status_counts() == {RS_DEAD: 3, RS_PENDING: 1}
               or Pending(s.redo_status_counts()), SETTLE_TIMEOUT,
               "S: three dead entries and one delayed", on_timeout=t.logs)

    # Listings and one entry, against tb_0033.
    dead = redo_rows(s, "status = -1")
    doc = get(s, "/redo?status=dead&limit=100")
    assert doc["status"] == "dead" and doc["limit"] == 100 and \
        doc["count"] == 3 == len(doc["entries"]), doc
    for e, row in zip(doc["entries"], dead):
        check_entry(e, row)
        assert "permanent_keys" in e["last_error"], e
    doc = get(s, "/redo")
    assert doc["status"] == "all" and doc["count"] == 4, doc
    for e, row in zip(doc["entries"], redo_rows(s)):
        check_entry(e, row)
    assert get(s, "/redo?limit=1")["count"] == 1
    assert get(s, "/redo?status=pending")["entries"][0]["key"] == "later"
    assert get(s, "/redo?status=done")["entries"] == []
    for row in redo_rows(s):
        check_entry(get(s, f"/redo/{row['id']}"), row, with_payload=True)
    # Bad requests name their culprit; unknown entries are 404.
    error_of(get(s, "/redo/abc", 400), "'abc'")
    error_of(get(s, "/redo/0", 400), "'0'")
    error_of(get(s, "/redo/99999", 404), "99999")
    error_of(get(s, "/redo?status=zombie", 400), "zombie")
    error_of(get(s, "/redo?limit=0", 400), "limit", "'0'")
    error_of(get(s, "/redo?limit=x&status=dead", 400), "'x'")
    error_of(get(s, "/redo?bogus=1", 400), "'bogus'")
    error_of(get(s, "/redo?limit=5&limit=6", 400), "'limit'", "twice")
    # 404 and 405.
    for p in ("/nope", "/redo/1/frobnicate", "/health/x", "/peers/",
              "/metrics/x"):
        error_of(get(s, p, 404), p.split("?")[0])
    for method, p, allow in (("POST", "/health", "GET"),
                             ("DELETE", "/redo/1", "GET"),
                             ("PUT", "/metrics", "GET"),
                             ("GET", "/redo/1/retry", "POST"),
                             ("GET", "/redo/retry-all-dead", "POST"),
                             ("POST", "/redo", "GET")):
        status, hdrs, text = call(s, method, p)
        assert status == 405 and hdrs.get("allow") == allow, \
            (method, p, status, hdrs, text)
        error_of(json.loads(text), method, p)

    # Another site cannot act through a local browser: a cross-site
    # request has no JSON content type (or names a foreign Origin), and a
    # DNS-rebound one names another Host; reads are refused on Host too.
    dead_before = redo_rows(s)
    rid = dead_before[0]["id"]
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    status, _, text = call(s, "POST", f"/redo/{rid}/retry",
                           headers=dict(bearer, **{"Content-Type":
                                                   "text/plain"}))
    assert status == 415, (status, text)
    error_of(json.loads(text), "application/json")
    status, _, text = call(s, "POST", f"/redo/{rid}/retry", headers=bearer)
    assert status == 415, (status, text)
    status, _, text = call(s, "POST", f"/redo/{rid}/retry",
                           headers=dict(bearer, **{
                               "Content-Type": "application/json",
                               "Origin": "http://evil.example"}))
    assert status == 403, (status, text)
    error_of(json.loads(text), "evil.example")
    for path in ("/streams", "/redo", "/"):
        status, _, text = call(s, "GET", path,
                               headers={"Host": "evil.example:80"})
        assert status == 403, (path, status, text)
    status, _, text = call(s, "GET", "/streams", headers=dict(auth(s), **{
        "Host": f"localhost:{s.admin.rsplit(':', 1)[1]}"}))
    assert status == 200, (status, text)
    assert redo_rows(s) == dead_before, "a refused action changed tb_0033"

    # Actions: refused without the token, with a wrong one, with another
    # scheme; nothing changes.
    target = dead[0]
    path = f"/redo/{target['id']}/retry"
    before = redo_rows(s)
    error_of(post(s, path, 401), "Authorization", "missing")
    error_of(post(s, path, 401, token="wrong"), "does not match")
    error_of(post(s, path, 401, token=TOKEN[:-1]), "does not match")
    error_of(post(s, path, 401, token=TOKEN + "x"), "does not match")
    error_of(post(s, path, 401, token=TOKEN, scheme="Basic"), "Bearer")
    error_of(post(s, f"/redo/{target['id']}/discard", 401,
                  body={"reason": "no token"}), "Authorization")
    error_of(post(s, "/redo/retry-all-dead", 401, token="nope"),
             "does not match")
    # A read answered by the store thread after them: an action that had
    # slipped through would have run before it (admin jobs run in order).
    get(s, "/redo")
    assert redo_rows(s) == before, "a refused action changed tb_0033"

    # retry with the token: the entry runs again (and dies again: its key
    # is a permanent failure), its tries go up.
    doc = post(s, path, 200, token=TOKEN)
    assert doc["id"] == target["id"] and doc["retried"] is True and \
        doc["message"] == f"R/S/{target['seq']}", doc
    wait_until(lambda: (lambda x: x["tries"] == target["tries"] + 1 and
                        x["status"] == RS_DEAD or Pending(x))(
                            redo_rows(s, "id = ?", (target["id"],))[0]),
               SETTLE_TIMEOUT, "the retried entry ran again",
               on_timeout=t.logs)
    # Only dead entries can be retried.
    pending = redo_rows(s, "status = 0")[0]
    doc = post(s, f"/redo/{pending['id']}/retry", 409, token=TOKEN)
    assert doc["status"] == RS_PENDING and "pending" in doc["error"], doc
    error_of(post(s, "/redo/99999/retry", 404, token=TOKEN), "99999")
    error_of(post(s, "/redo/x1/retry", 400, token=TOKEN), "'x1'")

    # discard: the body must be {"reason": "..."}.
    victim = dead[1]
    dpath = f"/redo/{victim['id']}/discard"
    error_of(post(s, dpath, 400, token=TOKEN), "reason")
    error_of(post(s, dpath, 400, token=TOKEN, body="{"), "not JSON")
    error_of(post(s, dpath, 400, token=TOKEN, body=[1]), "object")
    error_of(post(s, dpath, 400, token=TOKEN, body={"reason": ""}),
             "reason")
    error_of(post(s, dpath, 400, token=TOKEN, body={"reason": 7}),
             "reason", "string")
    error_of(post(s, dpath, 400, token=TOKEN,
                  body={"reason": "x", "extra": 1}), "'extra'")
    assert redo_rows(s, "id = ?", (victim["id"],))[0]["status"] == RS_DEAD
    doc = post(s, dpath, 200, token=TOKEN,
               body={"reason": "malformed bill, reissued as B-2"})
    assert doc["discarded"] is True and doc["status"] == RS_DISCARDED and \
        doc["discard_reason"] == "malformed bill, reissued as B-2", doc
    row = redo_rows(s, "id = ?", (victim["id"],))[0]
    assert row["status"] == RS_DISCARDED and \
        row["discard_reason"] == "malformed bill, reissued as B-2", row
    check_entry(get(s, f"/redo/{victim['id']}"), row, with_payload=True)
    doc = post(s, dpath, 409, token=TOKEN, body={"reason": "again"})
    assert doc["status"] == RS_DISCARDED, doc

    # retry-all-dead: every dead entry once more.
    dead_now = redo_rows(s, "status = -1")
    assert len(dead_now) == 2
    doc = post(s, "/redo/retry-all-dead", 200, token=TOKEN)
    assert doc == {"retried": 2}, doc
    for d in dead_now:
        wait_until(lambda d=d: (lambda x: x["tries"] == d["tries"] + 1 and
                                x["status"] == RS_DEAD or Pending(x))(
                                    redo_rows(s, "id = ?", (d["id"],))[0]),
                   SETTLE_TIMEOUT, f"entry {d['id']} ran again",
                   on_timeout=t.logs)

    # R has no admin_token: actions are allowed, from loopback.
    assert post(r, "/redo/retry-all-dead", 200) == {"retried": 0}
    error_of(post(r, "/redo/1/retry", 404), "1")
    r.stop()
    s.stop()


STUCK_LINE = r"batch of \d+ jobs waits for the database"
GOT_LOCK_LINE = r"got the database lock after"


@test(timeout=180)
def store_busy_timeout(t):
    r, s = make_pair(t)
    s.start()
    r.start()
    get(s, "/streams")
    lock = sqlite3.connect(s.db, timeout=5.0, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")  # the daemon cannot write now
        # The store thread is stuck from the line saying a batch waits for
        # the database until the lock goes (worker.c wait_for_lock tries
        # that batch again until then), and the test holds the lock: /health
        # and /peers answered now are answered without the store thread,
        # however long they take (were they its jobs, they would wait for
        # the lock, and get 503 after 10 s).
        wait_log(s, STUCK_LINE, "the store thread stuck on the lock",
                 on_timeout=t.logs)
        h = get(s, "/health")
        p = get(s, "/peers")
        assert h["status"] == "ready", h
        assert p["node"] == "S", p
        assert not log_lines(s, GOT_LOCK_LINE), \
            f"the store thread got the lock the test holds:\n{s.log_tail()}"
        status, _, text = call(s, "GET", "/streams", timeout=30.0,
                               headers=auth(s))
        assert status == 503 and "10 s" in json.loads(text)["error"], \
            (status, text)
        # The node's 10 s timer answered: its WARN line says so, with how
        # long the node itself waited by its own clock, which is never less
        # than the timer's 10 s (a slow machine only makes it later; no
        # upper bound but the request's own timeout).
        line = wait_log(s, r"request \d+: no answer from the store thread "
                        r"within 10 s \(waited \d+ ms\)",
                        "the admin timer's 503", on_timeout=t.logs)[-1]
        waited_ms = int(re.search(r"waited (\d+) ms", line).group(1))
        assert waited_ms >= 10000, f"the node answered 503 after " \
            f"{waited_ms} ms by its own clock, before its 10 s timer: {line}"
        # The answer's slot is gone: whatever the store thread does with
        # the request once the lock goes is dropped; the node keeps
        # serving.
        assert get(s, "/health")["status"] == "ready"
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    doc = wait_until(lambda: (lambda st: json.loads(st[2]) if st[0] == 200
                              else Pending(st))(call(s, "GET", "/streams",
                                                     timeout=30.0,
                                                     headers=auth(s))),
                     SETTLE_TIMEOUT, "S: /streams answered again")
    assert doc["node"] == "S"
    r.stop()
    s.stop()



# ---- the token guards reads too ----------------------------------------------

READS = ("/metrics", "/streams", "/redo", "/redo?status=dead", "/peers")


def refused_401(node, path, token, *words):
    """GET path with `token` (None: no header; (scheme, token): another
    scheme) is 401 with a JSON error naming every word, and says which
    scheme it wants."""
    if isinstance(token, tuple):
        headers = {"Authorization": f"{token[0]} {token[1]}"}
    else:
        headers = auth(node, token)
    status, hdrs, text = call(node, "GET", path, headers=headers)
    assert status == 401, (path, token, status, text)
    assert hdrs.get("www-authenticate", "").startswith("Bearer"), hdrs
    assert hdrs.get("content-type", "").startswith("application/json"), hdrs
    error_of(json.loads(text), *words)
    assert "payload" not in text, text


@test(timeout=180)
def reads_need_the_token(t):
    r, s = make_pair(t, s_journal={"permanent_keys": "bad"})
    s.start()
    r.start()
    (_, _, seq), = r.enqueue("S", type=1, key="bad", payload=b"secret bill")
    r.wait_all_confirmed("S", 1, timeout=SETTLE_TIMEOUT)
    wait_until(lambda: s.redo_status_counts() == {RS_DEAD: 1} or
               Pending(s.redo_status_counts()), SETTLE_TIMEOUT,
               "S: a dead entry", on_timeout=t.logs)
    (rid,), = s.sql("SELECT id FROM tb_0033 WHERE seq = ?", (seq,))

    # Without the token, with a wrong one, with another scheme: 401, and
    # nothing of the tables in the answer.
    for path in READS + (f"/redo/{rid}",):
        refused_401(s, path, None, "Authorization", "missing")
        refused_401(s, path, "wrong", "does not match")
        refused_401(s, path, TOKEN + "x", "does not match")
        refused_401(s, path, ("Basic", TOKEN), "Bearer")
    # /health and the dashboard's own files need no token.
    assert get(s, "/health", token=None)["status"] == "ready"
    for path in ("/", "/ui/app.js", "/ui/style.css"):
        status, _, _ = call(s, "GET", path)
        assert status == 200, (path, status)
    # With the token every read is served; the entry has its payload.
    for path in READS:
        status, _, text = call(s, "GET", path, headers=auth(s))
        assert status == 200, (path, status, text)
    e = get(s, f"/redo/{rid}")
    assert base64.b64decode(e["payload"]) == b"secret bill" and \
        e["payload_text"] == "secret bill" and \
        "payload_withheld" not in e, e
    # semqctl peers reads /peers with the token of node.ini.
    rc, out, err = s.semqctl("peers")
    assert rc == 0 and out.splitlines()[1].split()[:2] == ["R", "ready"], \
        (rc, out, err)
    # Guessing does not flood the log: one line for the burst above.
    lines = [ln for ln in s.log_text().splitlines()
             if "refused: wrong bearer token" in ln]
    assert len(lines) == 1, lines
    # A node without admin_token serves its reads to anyone (loopback
    # here), as before.
    for path in ("/metrics", "/streams", "/redo", "/peers"):
        status, _, text = call(r, "GET", path)
        assert status == 200, (path, status, text)
    r.stop()
    s.stop()


@test(timeout=180)
def payload_withheld_without_token(t):
    r, s = make_pair(t, s_journal={"permanent_keys": "bad"}, s_token=None)
    s.start()
    r.start()
    (_, _, seq), = r.enqueue("S", type=1, key="bad", payload=b"secret bill")
    r.wait_all_confirmed("S", 1, timeout=SETTLE_TIMEOUT)
    wait_until(lambda: s.redo_status_counts() == {RS_DEAD: 1} or
               Pending(s.redo_status_counts()), SETTLE_TIMEOUT,
               "S: a dead entry", on_timeout=t.logs)
    row, = redo_rows(s, "seq = ?", (seq,))
    status, _, text = call(s, "GET", f"/redo/{row['id']}")
    assert status == 200, (status, text)
    e = json.loads(text)
    check_entry(e, row)
    assert "payload" not in e and "payload_text" not in e, e
    assert "secret" not in text, text
    assert "admin_token is not set" in e["payload_withheld"], e
    assert e["payload_len"] == len(b"secret bill"), e
    # The operator reads it from the database.
    rc, out, err = s.semqctl("redo", "show", row["id"])
    assert rc == 0 and "secret bill" in out, (rc, out, err)
    r.stop()
    s.stop()


# ---- the counts are the tables' ------------------------------------------------

def group_by(node):
    """{(table, origin, dest, status name): COUNT(*)}, as db_depths, and
    {(dest, relay): COUNT(*)} of the node's rows in a relay's custody."""
    held = {(d, c): n for d, c, n in node.sql(
        "SELECT dest, custodian, COUNT(*) FROM tb_0031 WHERE origin = ? "
        "AND custodian IS NOT NULL AND status IN (6, -2) GROUP BY 1, 2",
        (node.id,))}
    return db_depths(node), held


def semq_counts_exact(node):
    """semq_counts against a GROUP BY over the three tables, read in one
    transaction (one snapshot): equal to the row."""
    c = sqlite3.connect(node.db, timeout=10.0, isolation_level=None)
    try:
        c.execute("BEGIN")
        kept = {tuple(k): n for *k, n in c.execute(
            "SELECT tbl, origin, dest, status, relay, n FROM semq_counts "
            "WHERE n <> 0")}
        rows = {}
        for table, col, relay in (("tb_0031", "status",
                                   "COALESCE(custodian, '')"),
                                  ("tb_0030", "ack_status", "''"),
                                  ("tb_0033", "status", "''")):
            for *k, n in c.execute(
                    f"SELECT '{table}', COALESCE(origin, ''), dest, {col},"
                    f" {relay}, COUNT(*) FROM {table} GROUP BY 2, 3, 4, 5"):
                rows[tuple(k)] = n
        c.execute("COMMIT")
    finally:
        c.close()
    assert kept == rows, f"{node.id}: semq_counts {kept} != rows {rows}"
    return rows


def reported(node):
    """What node reports, the same shapes as group_by(): /metrics'
    semq_queue_depth, and the custody of its own rows in /streams; and
    checks that /streams and `semqctl status` say the same as /metrics."""
    fams = metrics(node)
    depths = metric_depths(fams)
    st = get(node, "/streams")
    names = {"tb_0031": OUT_NAMES, "tb_0030": IN_NAMES,
             "tb_0033": REDO_NAMES}
    from_streams = {}
    for x in st["outbound"]:
        for name, n in x["counts"].items():
            if n:
                from_streams[("tb_0031", x["origin"], x["dest"], name)] = n
    for x in st["inbound"]:
        for table, key in (("tb_0030", "counts"), ("tb_0033", "redo")):
            for name, n in x[key].items():
                if n:
                    from_streams[(table, x["origin"], x["dest"], name)] = n
    held = {(w["dest"], w["relay"]): w["messages"]
            for w in st["custody"]["waiting"]}
    ctl = {(q["table"], q["origin"] or "", q["dest"],
            names[q["table"]][q["status"]]): q["count"]
           for q in node.semqctl_json("status")["queues"]}
    return depths, held, from_streams, ctl


def counts_agree(t, node, what):
    """node's reports equal the tables (once the node is idle: compared
    until they agree), and semq_counts equals the rows exactly."""
    def same():
        d, h = group_by(node)
        m, mh, js, ctl = reported(node)
        if (m, mh) == (d, h) and js == d and ctl == d:
            return (d,)  # truthy when empty too
        return Pending(f"tables {d} {h}; /metrics {m} {mh}; "
                       f"/streams {js}; semqctl {ctl}")
    got, = wait_until(same, SETTLE_TIMEOUT, f"{node.id} {what}: the counts "
                      "reported equal a GROUP BY over the tables",
                      on_timeout=t.logs)
    semq_counts_exact(node)
    print(f"     {node.id} {what}: {sum(got.values())} rows in "
          f"{len(got)} counts")
    return got


def settled(t, r, n):
    """R's n messages to S are all confirmed or cancelled."""
    def done():
        c = r.outbound_status_counts("S")
        return (c.get(100, 0) + c.get(-2, 0) == n == sum(c.values()) and
                c) or Pending(c)
    wait_until(done, SETTLE_TIMEOUT, f"R: {n} messages settled",
               on_timeout=t.logs)


@test(timeout=300)
def counts_equal_group_by(t):
    from relaytest import make_relay, with_admin
    p, (r,), (s,), _ = make_relay(t, ["R"], ["S"])
    s.journal_options = {"permanent_keys": "bad"}
    for n in (p, r, s):
        with_admin(n)
    p.start()
    r.start()
    # S is away: P takes custody of R's messages (copies at P, R's rows
    # at 6 with P as custodian); two of them cancelled meanwhile.
    later = now_ms() + 3600 * 1000
    ids = []
    for i in range(24):
        ids += r.enqueue("S", type=1, key=f"k{i % 3}", payload=b"doc %d" % i)
    ids += r.enqueue("S", type=1, key="bad", payload=b"bad")
    ids += r.enqueue("S", type=1, key="later", payload=b"x",
                     deliver_at=later)
    wait_until(lambda: (lambda c: c if c.get(6, 0) == len(ids) else
                        Pending(c))(r.outbound_status_counts("S")),
               SETTLE_TIMEOUT, "R: every message in P's custody",
               on_timeout=t.logs)
    for _, _, seq in ids[:2]:
        rc, out, err = r.semqctl("outbound", "cancel", f"R/S/{seq}")
        assert rc == 0, (rc, out, err)
    counts_agree(t, r, "in custody")
    counts_agree(t, p, "holding copies")
    # S comes: everything is delivered, the cancels settle, one message
    # goes dead and one waits for its time at S.
    s.start()
    settled(t, r, len(ids))
    wait_until(lambda: s.redo_status_counts() == {RS_PENDING: 1,
                                                  RS_DEAD: 1} or
               Pending(s.redo_status_counts()), SETTLE_TIMEOUT,
               "S: one dead and one delayed entry", on_timeout=t.logs)
    for n, what in ((r, "settled"), (p, "drained"), (s, "received")):
        counts_agree(t, n, what)
    # With S there, P passes messages on (R's rows relay-acked, not in
    # custody, until S confirms them).
    more = r.enqueue("S", type=1, key="k1", payload=b"online", count=12)
    settled(t, r, len(ids) + len(more))
    for n, what in ((r, "forwarded"), (p, "forwarded"), (s, "forwarded")):
        counts_agree(t, n, what)
    # Redo actions at S.
    dead, = redo_rows(s, "status = -1")
    rc, out, err = s.semqctl("redo", "discard", dead["id"], "--reason",
                             "counts test")
    assert rc == 0, (rc, out, err)
    counts_agree(t, s, "after a discard")
    # The purges of all three tables (retention 0: at the first tick).
    for n in (r, p, s):
        n.stop()
        n.node_options.update(outbound_retention="0s",
                              receipt_retention="0s")
    s.redo = {"retention": "0s"}
    for n in (s, p, r):
        n.start()
    wait_until(lambda: r.outbound_status_counts("S") == {} or
               Pending(r.outbound_status_counts("S")), SETTLE_TIMEOUT,
               "R: confirmed and cancelled rows purged", on_timeout=t.logs)
    wait_until(lambda: s.redo_status_counts() == {RS_PENDING: 1} or
               Pending(s.redo_status_counts()), SETTLE_TIMEOUT,
               "S: the discarded entry purged", on_timeout=t.logs)
    for n, what in ((r, "purged"), (p, "purged"), (s, "purged")):
        counts_agree(t, n, what)
    for n in (r, p, s):
        n.stop()


if __name__ == "__main__":
    run()
