# SPDX-License-Identifier: MIT
"""Fixtures of the relay tests (test_relay.py, test_custody.py): a platform P
with origins and servers around it, bulk enqueueing, and waits on what the
databases of R, P and S say.

P runs `relay = yes` (and `store_and_forward = yes` unless told otherwise);
origins and servers dial P, name it a `trusted_relay` and route everything
through it (`[route] default = P`); servers run the journal plugin.
"""

from semqtest import HarnessError, Pending, connect, free_port, wait_until

PAYLOAD = bytes(range(100))

# Fast timers: short poll, quick in-doubt queries and indication repeats,
# quick reconnects.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}

BULK_TIMEOUT = 150.0  # a bulk run confirmed
SHORT_TIMEOUT = 30.0  # a handful of messages
READY_TIMEOUT = 30.0  # a node (re)started and listening


def make_relay(t, origins, servers, *, saf=True, p_options=None,
               origin_options=None, server_options=None, server_trusts=True,
               proxy_kw=None, extra_certs=(), p_pg=None):
    """P (relay, listening, no plugin), the origins (no plugin, dial P, trust
    it, route default = P) and the servers (journal plugin, dial P, trust it
    unless server_trusts is False, route default = P); nothing started.
    With proxy_kw the origins dial P through one started faultproxy. With
    p_pg (a pgharness.Pg database) P stores in that PostgreSQL database (a
    pgharness.PgNode: its sql() runs through psql); the others stay on
    SQLite. Returns (p, [origin nodes], [server nodes], proxy or None)."""
    certs = t.certs(["P"] + list(origins) + list(servers) +
                    list(extra_certs))
    p_kw = dict(relay=True, store_and_forward=saf, journal=False,
                node_options=dict(FAST, **(p_options or {})))
    if p_pg is None:
        p = t.node("P", certs, **p_kw)
    else:
        from pgharness import PgNode
        p = PgNode("P", None, t.dir, certs, p_pg, **p_kw)
        t.nodes.append(p)
    proxy = t.proxy(p.listen_port, **proxy_kw) if proxy_kw else None
    rs = []
    for o in origins:
        r = t.node(o, certs, listen=False, journal=False,
                   node_options=dict(FAST, **(origin_options or {})),
                   routes={"default": "P"})
        connect(r, p, proxy=proxy, dialer_trusts=True)
        rs.append(r)
    ss = []
    for sid in servers:
        s = t.node(sid, certs, listen=False,
                   node_options=dict(FAST, **(server_options or {})),
                   routes={"default": "P"})
        connect(s, p, dialer_trusts=server_trusts)
        ss.append(s)
    return p, rs, ss, proxy


def enqueue_bulk(r, dest, n, nkeys, payload=PAYLOAD):
    """The application's side: n messages to dest, key i % nkeys, in one
    sqlite transaction. Returns {(origin, seq): key} as stored."""
    rows = [(dest, 1, f"{r.id}-key{i % nkeys:03d}", payload)
            for i in range(n)]
    c = r.connect_db(readonly=False)
    try:
        with c:
            c.executemany("INSERT INTO tb_0031(dest, type, msg_key, payload)"
                          " VALUES (?, ?, ?, ?)", rows)
        r.wait_numbered()
        sent = c.execute("SELECT seq, msg_key FROM tb_0031 WHERE origin = ? "
                         "AND dest = ? ORDER BY seq", (r.id, dest)).fetchall()
    finally:
        c.close()
    if len(sent) != n or sent[-1][0] != n:
        raise HarnessError(f"{r.id}: the schema numbered {len(sent)} rows "
                           f"{sent[:2]}...{sent[-2:]}, not 1..{n}")
    return {(r.id, s): k for s, k in sent}


def out_counts(node, origin, dest):
    """{status: rows} of node's tb_0031 for the stream origin -> dest."""
    return dict(node.sql("SELECT status, count(*) FROM tb_0031 WHERE "
                         "origin = ? AND dest = ? GROUP BY status",
                         (origin, dest)))


def out_row(r, dest, seq):
    """R's own row (status, result, attempts, last_error) or None."""
    rows = r.sql("SELECT status, result, attempts, last_error FROM tb_0031 "
                 "WHERE origin = ? AND dest = ? AND seq = ?",
                 (r.id, dest, seq))
    return rows[0] if rows else None


def copies(p, origin=None):
    """How many rows P's tb_0031 holds (all of origin, when given)."""
    if origin is None:
        return p.sql("SELECT count(*) FROM tb_0031")[0][0]
    return p.sql("SELECT count(*) FROM tb_0031 WHERE origin = ?",
                 (origin,))[0][0]


def watermark(s, origin):
    rows = s.sql("SELECT confirmed_through FROM semq_stream_in WHERE "
                 "origin = ? AND dest = ?", (origin, s.id))
    return rows[0][0] if rows else 0


def result_counts(r, dest):
    return dict(r.sql("SELECT coalesce(result, -1), count(*) FROM tb_0031 "
                      "WHERE origin = ? AND dest = ? GROUP BY result",
                      (r.id, dest)))


def duplicate_journal_rows(s):
    return s.sql("SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n "
                 "FROM journal GROUP BY origin, dest, seq)")[0][0]


def wait_counts(t, node, origin, dest, want, timeout, what):
    """Waits until out_counts(node, origin, dest) == want."""
    def done():
        c = out_counts(node, origin, dest)
        return c == want or Pending(f"status counts {c}")
    wait_until(done, timeout, f"{node.id}: {what} (want {want})",
               interval=0.1, on_timeout=t.logs)


def wait_confirmed(t, r, dest, n, timeout=BULK_TIMEOUT):
    wait_counts(t, r, r.id, dest, {100: n}, timeout,
                f"all {n} rows to {dest} at status 100")


def wait_relay_empty(t, p, timeout=SHORT_TIMEOUT):
    def done():
        n = copies(p)
        by = p.sql("SELECT origin, dest, status, count(*) FROM tb_0031 "
                   "GROUP BY 1, 2, 3")
        return n == 0 or Pending(f"{n} rows in P's tb_0031: {by}")
    wait_until(done, timeout, "P: tb_0031 empty (every copy dropped)",
               interval=0.1, on_timeout=t.logs)


def wait_settled(t, s, origin, n, timeout=SHORT_TIMEOUT):
    """S's watermark of origin's stream reaches n and every tb_0030 row of
    the stream is at or below it, acknowledged (SPEC §4; the rows stay for
    receipt_retention)."""
    wait_until(lambda: s.settled(origin, n), timeout,
               f"{s.id}: confirmed_through {n} for {origin} and every row "
               "of it acknowledged", interval=0.2, on_timeout=t.logs)


def reset_row(r, dest, seq, status):
    """While r is stopped: its row seq to dest goes back to `status`, due
    now (as if the daemon had died before recording what it learned)."""
    assert not r.alive()
    c = r.connect_db(readonly=False)
    try:
        with c:
            n = c.execute("UPDATE tb_0031 SET status = ?, next_attempt_at = 0"
                          " WHERE origin = ? AND dest = ? AND seq = ?",
                          (status, r.id, dest, seq)).rowcount
    finally:
        c.close()
    assert n == 1, f"{r.id}: no row {r.id}/{dest}/{seq} to reset"


def wait_row(t, r, dest, seq, what, pred, timeout=SHORT_TIMEOUT):
    def done():
        row = out_row(r, dest, seq)
        return (row is not None and pred(row) and row) or Pending(
            f"(status, result, attempts, last_error) = {row}")
    return wait_until(done, timeout, f"{r.id}: row {r.id}/{dest}/{seq} "
                      f"{what}", interval=0.05, on_timeout=t.logs)


def wait_held(t, p, origins, dest, n, timeout=BULK_TIMEOUT):
    """Waits until P holds all n messages of each origin to dest (copies at
    status 0: not sent, the destination is away) and every origin row is at
    status 6 (a relay holds it)."""
    def done():
        got = {r.id: (out_counts(r, r.id, dest),
                      out_counts(p, r.id, dest)) for r in origins}
        ok = all(o == {6: n} and c == {0: n} for o, c in got.values())
        return ok or Pending(f"(origin rows, P's copies) by status: {got}")
    wait_until(done, timeout, f"P holding {n} copies of each of "
               f"{[r.id for r in origins]} and the origins at status 6",
               interval=0.2, on_timeout=t.logs)


def link_ready(node, peer_id):
    """node's log says its last link with peer_id got ready and has not
    ended since (log.c: "peer=ID ready (...)", then a line about the
    close)."""
    lines = [ln for ln in node.log_text().splitlines()
             if f" peer={peer_id} " in ln]
    return bool(lines) and " ready (" in lines[-1]


def link_gone(node, peer_id):
    lines = [ln for ln in node.log_text().splitlines()
             if f" peer={peer_id} " in ln]
    return bool(lines) and " ready (" not in lines[-1]


def with_admin(node):
    """Gives node an admin HTTP address (before it starts)."""
    node.admin = f"127.0.0.1:{free_port()}"
    return node


def relay_section(node, **options):
    """Writes options as node's [relay] section (quota_messages = 500,
    unknown_dest_after = "2s", ...) from its next start on."""
    base = node.config_text

    def text():
        return base() + "\n[relay]\n" + "".join(
            f"{k} = {v}\n" for k, v in options.items())
    node.config_text = text
    return node
