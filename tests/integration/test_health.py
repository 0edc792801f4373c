# SPDX-License-Identifier: MIT
"""Health, peers' down time, the metrics an operator alerts on, and the
monitoring files in contrib/ (docs/OPERATIONS.md, "Health", "Metrics" and
"Alerting").

One network R -> P (relay) -> S1 on loopback, every node with its admin
HTTP; R dials P with [node] peer_down_after = 1s and backlog_age_warn = 1s,
S1 runs the journal plugin (a fifth of its calls RETRY, key K-perm fails
PERMANENT, redo retries at once):

  1. R sends 20 documents to S1 through P. P's semq_relay_forwarded_total
     plus semq_relay_stored_total equals the 20 it relayed; S1's
     semq_delivery_latency_seconds counted each of the 20 received
     (= semq_messages_received_total), and semq_plugin_calls_total of the
     journal plugin says ok = its journal rows (19), permanent = 1 and some
     retries. semq_build_info names the version and sqlite; the
     certificates' expiry is the test certificate's and CA's notAfter.
     `promtool check metrics` finds nothing wrong in any node's /metrics.
     R's /health is "ready" with no reasons once everything is confirmed.
  2. P stops: R's /peers says since when P is down and why (down_since,
     last_error), `semqctl peers` shows how long; after peer_down_after
     R's /health is 200 "degraded" with the reason peer_down, and with a
     document waiting longer than backlog_age_warn also backlog_old;
     /health/live stays 200 "alive" throughout. semq_peer_down_seconds
     says P is down.
  3. P starts again: R's /health goes back to "ready" (the waiting document
     confirmed), /peers says P is up (down_since null).
  4. contrib/: `promtool check rules` and `promtool test rules` pass on the
     alert rules; every expression of the Grafana dashboard names only
     metrics the nodes above exported, and its datasource is a variable.

Run by ctest as integration_health, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_health.py [NAME]
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import Pending, run, test, wait_until  # noqa: E402
from relaytest import (enqueue_bulk, make_relay,  # noqa: E402
                       wait_confirmed, with_admin)

SRC = os.environ.get("SEMQ_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(SRC, "contrib", "prometheus", "semq-alerts.yml")
RULES_TEST = os.path.join(SRC, "contrib", "prometheus",
                          "semq-alerts.test.yml")
DASHBOARD = os.path.join(SRC, "contrib", "grafana", "semq-dashboard.json")
TIMEOUT = 30.0
N = 20


def http(node, path):
    """(status, body text) of GET path on node's admin address."""
    try:
        with urllib.request.urlopen(f"http://{node.admin}{path}",
                                    timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_json(node, path, expect=200):
    status, body = http(node, path)
    assert status == expect, (node.id, path, status, body)
    return json.loads(body)


def metrics(node):
    """{name{labels}: value} of node's /metrics, and the text."""
    status, text = http(node, "/metrics")
    assert status == 200, (node.id, status, text)
    out = {}
    for ln in text.splitlines():
        if ln and not ln.startswith("#"):
            k, v = ln.rsplit(" ", 1)
            out[k] = float(v)
    return out, text


def exported_names(text):
    """The metric families a /metrics text declares (# TYPE), with the
    series names a histogram adds."""
    names = set()
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names.add(m.group(1))
        if m.group(2) == "histogram":
            names |= {m.group(1) + s for s in ("_bucket", "_sum", "_count")}
    return names


def promtool():
    p = shutil.which("promtool")
    assert p, ("promtool is not installed: tools/deps.sh "
               "(semq_install_promtool) installs it")
    return p


def not_after(pem):
    """A certificate's notAfter, unix seconds (openssl x509)."""
    out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-dateopt",
                          "iso_8601", "-in", pem], check=True,
                         capture_output=True, text=True).stdout
    stamp = out.strip().split("=", 1)[1]
    return int(time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%SZ"))
               - time.timezone)


def peer(doc, name):
    e = [p for p in doc["peers"] if p["peer"] == name]
    assert e, doc
    return e[0]


def health_of(node):
    """/health's (HTTP status, document)."""
    status, body = http(node, "/health")
    return status, json.loads(body)


def reasons(doc):
    return {r["reason"] for r in doc["reasons"]}


@test(timeout=120)
def health_metrics_and_rules(t):
    p, (r,), (s,), _ = make_relay(
        t, ["R"], ["S1"], saf=True,
        origin_options={"peer_down_after": "1s", "backlog_age_warn": "1s"},
        server_options={})
    for n in (p, r, s):
        with_admin(n)
    s.journal_options = {"fail_rate": 0.2, "fail_seed": 3,
                         "permanent_keys": "K-perm"}
    s.redo = {"levels": "50ms", "max_tries": 50}
    p.start()
    s.start()
    r.start()

    # 1. Counters after 20 documents through P.
    enqueue_bulk(r, "S1", N - 1, 5)
    c = r.connect_db(readonly=False)
    with c:
        c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload) "
                  "VALUES ('S1', 1, 'K-perm', x'00')")
    c.close()
    wait_confirmed(t, r, "S1", N, timeout=TIMEOUT)

    def journal_done():
        rows = s.sql("SELECT count(*) FROM journal")[0][0]
        busy = s.sql("SELECT count(*) FROM tb_0033 WHERE status IN "
                     "(0, 1)")[0][0]
        return (rows == N - 1 and busy == 0) or Pending((rows, busy))
    wait_until(journal_done, TIMEOUT, "S1: 19 applied, nothing pending",
               on_timeout=t.logs)

    pm, ptext = metrics(p)
    relayed = (pm["semq_relay_forwarded_total"] +
               pm["semq_relay_stored_total"])
    assert relayed == N, (pm["semq_relay_forwarded_total"],
                          pm["semq_relay_stored_total"])
    sm, stext = metrics(s)
    assert sm["semq_messages_received_total"] == N, sm
    assert sm["semq_delivery_latency_seconds_count"] == N, stext
    assert sm['semq_delivery_latency_seconds_bucket{le="+Inf"}'] == N
    assert 0 <= sm["semq_delivery_latency_seconds_sum"] < N * TIMEOUT
    calls = {o: sm[f'semq_plugin_calls_total{{plugin="journal",'
                   f'outcome="{o}"}}']
             for o in ("ok", "retry", "permanent", "crash", "deadline")}
    assert calls["ok"] == N - 1 and calls["permanent"] == 1, calls
    assert calls["retry"] >= 1 and calls["crash"] == 0, calls
    assert calls["deadline"] == 0, calls
    build = [k for k in sm if k.startswith("semq_build_info{")]
    assert len(build) == 1 and 'db="sqlite"' in build[0] and \
        re.search(r'version="\d+\.\d+\.\d+', build[0]), build
    assert sm[build[0]] == 1
    crt = s.certs.crt("S1")
    assert sm['semq_tls_cert_expiry_timestamp_seconds{cert="node"}'] == \
        not_after(crt), stext
    assert sm['semq_tls_cert_expiry_timestamp_seconds{cert="ca"}'] == \
        not_after(s.certs.ca), stext
    rm, rtext = metrics(r)
    assert rm['semq_peer_down_seconds{peer="P"}'] == 0, rtext
    for n, text in ((p, ptext), (s, stext), (r, rtext)):
        chk = subprocess.run([promtool(), "check", "metrics"], input=text,
                             capture_output=True, text=True)
        assert chk.returncode == 0 and not chk.stdout.strip() and \
            not chk.stderr.strip(), (n.id, chk.stdout, chk.stderr)
    names = (exported_names(ptext) | exported_names(stext) |
             exported_names(rtext))

    def ready(n):
        status, doc = health_of(n)
        return (status, doc) if doc["status"] == "ready" else Pending(doc)
    status, doc = wait_until(lambda: ready(r), TIMEOUT, "R: /health ready",
                             on_timeout=t.logs)
    assert status == 200 and doc["reasons"] == [], doc
    assert peer(get_json(r, "/peers"), "P")["down_since"] is None

    # 2. P stops: R says P is down, then degraded, and stays live.
    t0 = int(time.time() * 1000)
    p.stop()

    # R dials P again and again; an attempt in flight shows state "tls"
    # until its refusal is read, so wait for a snapshot between attempts.
    def p_down():
        e = peer(get_json(r, "/peers"), "P")
        return (e if e["down_since"] and e["state"] == "disconnected"
                else Pending(e))
    e = wait_until(p_down, TIMEOUT, "R: /peers says P is down")
    assert t0 - 1000 <= e["down_since"] <= int(time.time() * 1000), e
    assert e["configured"] is True and e["conn_id"] is None, e
    c = r.connect_db(readonly=False)
    with c:
        c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload) "
                  "VALUES ('S1', 1, 'K-late', x'01')")
    c.close()

    def degraded():
        status, doc = health_of(r)
        live, ldoc = http(r, "/health/live")
        assert live == 200 and json.loads(ldoc)["status"] == "alive", ldoc
        return ((status, doc) if {"peer_down", "backlog_old"} <=
                reasons(doc) else Pending(doc))
    status, doc = wait_until(degraded, TIMEOUT,
                             "R: /health degraded: P down, old backlog",
                             on_timeout=t.logs)
    assert status == 200 and doc["status"] == "degraded", doc
    pd = [x for x in doc["reasons"] if x["reason"] == "peer_down"][0]
    assert pd["peer"] == "P" and pd["down_since"] == e["down_since"], pd
    assert "peer P down for" in pd["text"], pd
    bo = [x for x in doc["reasons"] if x["reason"] == "backlog_old"][0]
    assert bo["dest"] == "S1" and "S1" in bo["text"], bo
    e = peer(get_json(r, "/peers"), "P")
    assert e["last_error"], e
    assert e["down_for_ms"] >= 1000, e
    rc, out, err = r.semqctl("peers")
    assert rc == 0, (rc, err)
    head = out.splitlines()[0].split()
    row = [ln.split() for ln in out.splitlines()[1:]
           if ln.split()[0] == "P"][0]
    assert re.fullmatch(r"\d+[smhd]", row[head.index("DOWN")]), out
    print("---- semqctl peers (P stopped) ----\n" + out + "---- end ----")
    rm, rtext = metrics(r)
    assert rm['semq_peer_down_seconds{peer="P"}'] >= 1, rtext
    assert rm['semq_peer_ready{peer="P"}'] == 0, rtext

    # 3. P is back: ready again, the waiting document confirmed.
    p.start()
    status, doc = wait_until(lambda: ready(r), TIMEOUT,
                             "R: /health ready again", on_timeout=t.logs)
    assert status == 200 and doc["reasons"] == [], doc
    assert peer(get_json(r, "/peers"), "P")["down_since"] is None

    # 4. The monitoring files.
    check_rules()
    check_dashboard(names)


def check_rules():
    for args in (["check", "rules", RULES], ["test", "rules", RULES_TEST]):
        chk = subprocess.run([promtool()] + args, capture_output=True,
                             text=True)
        assert chk.returncode == 0, (args, chk.stdout, chk.stderr)
    text = open(RULES).read()
    # every alert tells what to do, with a link into OPERATIONS.md
    alerts = re.findall(r"^\s*- alert: (\S+)", text, re.M)
    assert len(alerts) >= 7, alerts
    assert text.count("OPERATIONS.md#") >= len(alerts), text


def check_dashboard(names):
    with open(DASHBOARD) as f:
        dash = json.load(f)
    tmpl = [v for v in dash["templating"]["list"] if v["type"] == "datasource"]
    assert tmpl and tmpl[0]["query"] == "prometheus", tmpl
    ds = "${" + tmpl[0]["name"] + "}"
    panels = []
    for pnl in dash["panels"]:
        panels += pnl.get("panels", []) + [pnl]
    exprs = []
    for pnl in panels:
        if pnl["type"] == "row":
            continue
        assert pnl["datasource"]["uid"] == ds, pnl["title"]
        assert pnl.get("targets"), pnl["title"]
        for tg in pnl["targets"]:
            exprs.append((pnl["title"], tg["expr"]))
    assert len(exprs) >= 9, exprs
    for title, expr in exprs:
        used = set(re.findall(r"\b(semq_[a-z0-9_]+)", expr))
        assert used, (title, expr)
        missing = used - names
        assert not missing, (title, expr, missing)


if __name__ == "__main__":
    run()
