# SPDX-License-Identifier: MIT
"""Rolling upgrade from SEMQ 0.1.0 to this tree (docs/PROTOCOL.md,
"Versioning" and "What holds in a mixed fleet").

SEMQ 0.1.0 (wire revision 1, schema version 2) is built from the
repository's history: its commit is in tests/compat/RELEASES, and
oldrelease.py checks it out with `git worktree`, builds its semqd, semqctl
and journal plugin beside the build directories (once per CI run, cached
under a stamp and a lock) and removes the worktree again. A clone without
that commit fails here with how to fetch it; nothing is skipped.

Real processes only, as in the other integration tests: an origin R, a
platform P (relay = yes, store_and_forward = yes) and a server S (journal
plugin) on loopback; R and S dial P and trust it. Each node runs the
release the test gives it, with that release's journal plugin.

  0. release_0_1_0_builds: the build (or the cached one), and how long it
     took.
  1. old_origin_new_relay_new_server: R 0.1.0 -> P -> S (both this tree).
     300 messages over 12 keys in three batches; S is stopped after the
     first has begun to arrive (P stores), P is killed -9 while it holds
     copies and R is sending, the third batch is enqueued while S is still
     away, then S starts. Every document exactly once at S and in key
     order, R's rows all at 100, P's store empty, S's stream settled
     under the legacy life (R's messages carry none); P logs the WARNING
     that names R as a 0.1 node ("runs SEMQ 0.1 (wire revision 1)"), and
     nobody warns about a peer of this tree.
  2. new_origin_old_relay_old_server: R (this tree) -> P 0.1.0 -> S 0.1.0,
     the same run; R logs the WARNING that names P.
  3. new_origin_old_relay_new_server: R (this tree) -> P 0.1.0 -> S (this
     tree), the order in which a 0.1 relay's copies (without the origin's
     life) and its forwarded frames (with it) could land at S under two
     lives. 228 messages over 8 keys, every step waiting on an event:
     S has never run while P stores R's first batch (R's rows at 6, P the
     custodian), so S meets R's stream through P's copies; with S up P
     forwards the second; S away, P stores the third, is frozen (SIGSTOP)
     while R sends 12 more into it (sent, 4) and is killed -9 holding the
     copies; P (0.1.0) and then S come back. S away again, P stores a
     fourth batch, stops and is upgraded in place (this tree's semqd
     migrates its database: the WARN line), stores a fifth (R's ids still
     without the life: P's copies are all under the legacy life), S comes
     back, and the new P forwards a sixth. Each batch arrived at S as
     planned (tb_0030.confirm_need 3 from a store, 1 forwarded); every
     document exactly once at S and in key order, R's rows all at 100, and
     only the 12 P never read sent twice, each once more after S's "not
     received"; S (and P) know R under one life, the legacy one (R's
     stream went without its life from its first message); R logged once
     that its stream to S goes through P ("goes through P, which runs SEMQ
     0.1 ... upgrade P", semq_stream_out.life_hidden) and named P as a 0.1
     peer no more after the upgrade; P's store is empty.
  4. migration_from_0_1_0_keeps_every_state: real 0.1.0 nodes make a
     database with a message in every state —
       R's tb_0031: confirmed (100), sent and unanswered (4: P frozen with
         SIGSTOP while they were sent, then killed -9, S away so nobody
         answers R's queries), relay-acked (6: held by P, and delivered to
         S while R was away), cancelled (-2: `semqctl outbound cancel`),
         unsent (0: enqueued while R is stopped);
       S's tb_0030: acknowledged rows kept above a gap (the sent rows
         never arrived, so the watermark cannot pass them) and
         unacknowledged ones (delivered by P while R was away), the
         watermark;
       S's tb_0033: dead (the journal's permanent_keys), waiting (behind
         the dead one, and behind pending ones), discarded (`semqctl redo
         discard`), done (a delayed message that ran) and pending (the
         journal with fail_rate = 1 retries them every second);
       P's tb_0031: copies it holds for S.
     No state is made with SQL. Then every node starts this tree's semqd
     alone on its database (no peer up: nothing can move): it logs "migrated
     from schema 2 to 3; the database as it was is kept in FILE" (3, or
     this tree's schema version: the highest of db/), FILE is a schema-2
     database with the row counts the 0.1.0 database had, and after the
     migration every row of every table is there with its status; R's
     life is the legacy life 0000000000000001 (it had sent), P's and S's
     are new ones. Then the network runs on this tree with a
     journal that succeeds, `semqctl redo retry --all-dead` at S, and more
     messages on the old keys: every message takes effect exactly once and
     in key order, the cancelled and the discarded ones never, under the
     old stream (S knows R under the legacy life only).

Each of 1-4 prints a FIGURES line (messages, kills, duplicates 0, ...).
Nothing waits a fixed time to see that something did not happen: every wait
is for an event (semqtest.wait_until).

Run by ctest as integration_upgrade (normal and sanitizer suites; only this
tree's side is sanitized), or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build/default python3 tests/integration/test_upgrade.py [NAME]
"""

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import oldrelease  # noqa: E402
from semqtest import (BUILD_DIR, SOURCE_DIR, HarnessError,  # noqa: E402
                      Pending, check_exactly_once, connect, run, test,
                      wait_until)

OLD_VERSION = "0.1.0"
NEW = "new"  # this tree: $SEMQD, $SEMQCTL, $JOURNAL_SO
OLD = "old"  # the release built by oldrelease
LEGACY_LIFE = "0000000000000001"

# Keys every release knows (0.1.0's docs/CONFIG.md): fast polls, quick
# queries and reconnects.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s",
        "window": "100000"}
TIMEOUT = 120.0  # a run confirmed
SHORT = 30.0  # a handful of messages, a link
READY = 30.0  # a node (re)started

N_MIXED = 300  # tests 1 and 2: three batches
N_MIXED_KEYS = 12
SEND_RATE = 150  # R's drain_rate in tests 1 and 2: the sending lasts ~2 s

_RELEASE = None


def old_release():
    """The 0.1.0 build (made once per process, cached across processes by
    oldrelease)."""
    global _RELEASE
    if _RELEASE is None:
        _RELEASE = oldrelease.build(OLD_VERSION)
    return _RELEASE


def journal_so(release):
    if release == OLD:
        return old_release().journal_so
    return os.environ.get("JOURNAL_SO") or os.path.join(
        BUILD_DIR, "plugins", "journal.so")


# ---- nodes of either release ------------------------------------------------

def use_release(node, release, journal_options=None):
    """Makes node run `release` at its next start: that release's semqd and
    semqctl and, if it has the journal plugin, that release's journal.so
    (with journal_options when given). An upgrade in place is this between
    stop() and start()."""
    if release == OLD:
        rel = old_release()
        node.semqd_program, node.semqctl_program = rel.semqd, rel.semqctl
    else:
        node.semqd_program = node.semqctl_program = None
    if "journal" in node.plugins:
        opts = node.plugins["journal"] if journal_options is None else \
            dict(journal_options)
        opts = {k: v for k, v in opts.items() if k not in ("path", "types")}
        node.plugins["journal"] = dict(
            {"path": journal_so(release), "types": "*"}, **opts)


def make_node(t, id, certs, release, *, journal=True, journal_options=None,
              **kw):
    """A Node of `release` (OLD or NEW); journal: the journal plugin of
    that release for every type."""
    plugins = {"journal": {}} if journal else {}
    n = t.node(id, certs, journal=False, plugins=plugins, **kw)
    use_release(n, release, journal_options or {})
    return n


def make_fleet(t, r_rel, p_rel, s_rel, *, r_options=None, s_options=None,
               s_journal=None, s_redo=None):
    """P (relay, store and forward, no plugin), R (dials P, no plugin) and
    S (dials P, journal plugin); R and S trust P and route through it.
    Nothing started."""
    certs = t.certs(["R", "P", "S"])
    p = make_node(t, "P", certs, p_rel, journal=False, relay=True,
                  store_and_forward=True, node_options=dict(FAST))
    r = make_node(t, "R", certs, r_rel, journal=False, listen=False,
                  routes={"default": "P"},
                  node_options=dict(FAST, **(r_options or {})))
    s = make_node(t, "S", certs, s_rel, journal_options=s_journal,
                  listen=False, routes={"default": "P"}, redo=s_redo,
                  node_options=dict(FAST, **(s_options or {})))
    connect(r, p, dialer_trusts=True)
    connect(s, p, dialer_trusts=True)
    return r, p, s


# ---- links, from the logs ---------------------------------------------------

def link_up(node, peer):
    """True when node's log says its last link with peer is ready: the
    last "peer=ID ready (" line (peer.c on_hello) comes after the last line
    that closed a link with it: "peer=ID STATE: why" (the connection
    ended) or "peer=ID peer reports error" (the peer closed it with an
    Error frame, e.g. when it stops)."""
    up = re.compile(rf" peer={re.escape(peer)} ready \(")
    down = re.compile(rf" peer={re.escape(peer)} ((tls|hello|ready|closing)"
                      r": |peer reports error )")
    state = False
    for line in node.log_text().splitlines():
        if up.search(line):
            state = True
        elif down.search(line):
            state = False
    return state


def wait_link(t, node, peer, up=True, timeout=SHORT):
    wait_until(lambda: link_up(node, peer) == up or
               Pending(f"link {'down' if up else 'up'}"), timeout,
               f"{node.id}: link with {peer} {'up' if up else 'gone'}",
               interval=0.05, on_timeout=t.logs)


def old_peer_warnings(node, peer=None):
    """node's WARN lines about a peer of wire revision 1 (peer.c on_hello:
    "runs SEMQ 0.1 (wire revision 1)"), of `peer` when given."""
    out = []
    for line in node.log_text().splitlines():
        if " WARN " in line and "runs SEMQ 0.1 (wire revision 1)" in line:
            if peer is None or f" peer={peer} " in line:
                out.append(line)
    return out


# ---- the application's side and the databases -------------------------------

def enqueue(node, dest, rows):
    """rows: [(key, payload, deliver_at or None)], inserted in one
    transaction. Returns [(seq, key)] in order: an old release's schema
    numbers them as they are inserted, this one's daemon in its next batch
    (waited for while it runs; seq None while it is stopped)."""
    c = node.connect_db(readonly=False)
    try:
        with c:
            ids = [c.execute("INSERT INTO tb_0031(dest, type, msg_key, "
                             "payload, deliver_at) VALUES (?, 1, ?, ?, ?)",
                             (dest, k, p, d)).lastrowid
                   for k, p, d in rows]
    finally:
        c.close()
    return [(q, k) for (_, _, q), (k, _, _) in zip(node.numbered(ids), rows)]


def docs(prefix, first, count, nkeys):
    """count documents numbered first.. with keys prefix-0..nkeys-1."""
    return [(f"{prefix}-{i % nkeys}", f"document {i}".encode(), None)
            for i in range(first, first + count)]


def out_counts(node, dest="S", seqs=None):
    """{status: rows} of node's tb_0031 to dest (of these seqs)."""
    rows = node.sql("SELECT seq, status FROM tb_0031 WHERE dest = ?",
                    (dest,))
    out = {}
    for seq, st in rows:
        if seqs is None or seq in seqs:
            out[st] = out.get(st, 0) + 1
    return out


def wait_out(t, node, want, what, seqs=None, timeout=TIMEOUT):
    """Waits until out_counts(node, "S", seqs) == want."""
    def done():
        c = out_counts(node, "S", seqs)
        return c == want or Pending(f"status counts {c}")
    wait_until(done, timeout, f"{node.id}: {what} (want {want})",
               interval=0.05, on_timeout=t.logs)


def copies(p):
    return p.sql("SELECT count(*) FROM tb_0031")[0][0]


def redo_counts(s):
    return dict(s.sql("SELECT status, count(*) FROM tb_0033 GROUP BY 1"))


def wait_redo(t, s, want, what, timeout=SHORT):
    def done():
        c = redo_counts(s)
        return c == want or Pending(f"tb_0033 status counts {c}")
    wait_until(done, timeout, f"S: {what} (want {want})", interval=0.05,
               on_timeout=t.logs)


def duplicates(s):
    if not s.has_table("journal"):
        return 0
    return s.sql("SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS "
                 "n FROM journal GROUP BY origin, dest, seq)")[0][0]


def has_column(node, table, column):
    return any(r[1] == column for r in node.sql(f"PRAGMA table_info({table})"))


def settled(s, origin, n):
    """S's stream from origin stands at watermark n with no received row
    above it or unacknowledged: on this tree semqtest's Node.settled (rows
    under the watermark stay for receipt_retention), on 0.1.0 (one
    watermark per stream, rows under it compacted away) its own check."""
    if has_column(s, "semq_stream_in", "life"):
        return s.settled(origin, n)
    w = s.sql("SELECT confirmed_through FROM semq_stream_in WHERE origin = ?"
              " AND dest = ?", (origin, s.id))
    w = w[0][0] if w else 0
    left = s.sql("SELECT count(*) FROM tb_0030 WHERE origin = ? AND dest = ?",
                 (origin, s.id))[0][0]
    return (w == n and left == 0) or Pending(
        f"confirmed_through {w}, {left} tb_0030 rows left")


def wait_settled(t, s, origin, n, timeout=SHORT):
    wait_until(lambda: settled(s, origin, n), timeout,
               f"{s.id}: {origin}'s stream settled at {n}", interval=0.1,
               on_timeout=t.logs)


def wait_relay_empty(t, p, timeout=SHORT):
    wait_until(lambda: copies(p) == 0 or Pending(
        p.sql("SELECT origin, dest, status, count(*) FROM tb_0031 GROUP BY "
              "1, 2, 3")), timeout, "P: every copy delivered and dropped",
               interval=0.1, on_timeout=t.logs)


# ---- 0. the release ---------------------------------------------------------

@test(timeout=1200)
def release_0_1_0_builds(t):
    t0 = time.monotonic()
    rel = old_release()
    out = subprocess.run([rel.semqd, "--version"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0 and f"semqd {OLD_VERSION}" in out.stdout + \
        out.stderr, f"{rel.semqd} --version: {out.stdout}{out.stderr}"
    print(f"FIGURES: release={OLD_VERSION} commit={rel.commit[:12]} "
          f"cached={'yes' if rel.cached else 'no'} "
          f"build_seconds={rel.seconds:.1f} "
          f"seconds={time.monotonic() - t0:.1f} dir={rel.dir}", flush=True)


# ---- 1, 2. mixed fleets -----------------------------------------------------

def mixed_run(t, r_rel, p_rel, s_rel):
    n, b = N_MIXED, N_MIXED // 3
    r, p, s = make_fleet(t, r_rel, p_rel, s_rel,
                         r_options={"drain_rate": str(SEND_RATE)})
    t0 = time.monotonic()
    p.start(timeout=READY)
    s.start(timeout=READY)
    r.start(timeout=READY)
    wait_link(t, p, "S")
    wait_link(t, p, "R")
    sent = []

    # batch 1 while everything runs; S leaves once it has begun to arrive
    sent += enqueue(r, "S", docs("doc", 0, b, N_MIXED_KEYS))
    s.wait_journal_count(b // 5, timeout=TIMEOUT)
    s.stop()
    wait_link(t, p, "S", up=False)

    # batch 2 with S away: P stores; P is killed -9 holding copies while
    # R still sends (drain_rate)
    sent += enqueue(r, "S", docs("doc", b, b, N_MIXED_KEYS))

    def holding():
        c = copies(p)
        return c >= 10 or Pending(f"P holds {c}")
    wait_until(holding, TIMEOUT, "P holding copies", interval=0.02,
               on_timeout=t.logs)
    held = copies(p)
    rc = p.kill()
    assert rc == -9, f"P had exited ({rc}) before the kill"
    print(f"     killed -9 P holding {held} copies; R at {out_counts(r)}",
          flush=True)
    p.start(timeout=READY)

    # batch 3 while S is still away, then S comes back
    sent += enqueue(r, "S", docs("doc", 2 * b, n - 2 * b, N_MIXED_KEYS))
    wait_link(t, r, "P")
    s.start(timeout=READY)

    wait_out(t, r, {100: n}, f"all {n} rows confirmed")
    seconds = time.monotonic() - t0
    assert [q for q, _ in sent] == list(range(1, n + 1)), sent[:3]
    keys = {("R", q): k for q, k in sent}
    got = check_exactly_once(s, ["R"], n, keys=keys)
    dups = duplicates(s)
    assert got["total"] == n and got["keys"] == N_MIXED_KEYS and dups == 0, \
        (got, dups)
    wait_relay_empty(t, p)
    wait_settled(t, s, "R", n)
    results = dict(r.sql("SELECT coalesce(result, -1), count(*) FROM tb_0031"
                         " GROUP BY 1"))
    return r, p, s, {"messages": n, "keys": got["keys"], "kills": 1,
                     "held_at_kill": held, "duplicates": dups,
                     "results": results, "seconds": seconds}


def figures(what, f, extra=""):
    print(f"FIGURES: {what} messages={f['messages']} keys={f['keys']} "
          f"kills={f['kills']} (P -9 holding {f['held_at_kill']}) "
          f"s_restarts=1 duplicates={f['duplicates']} "
          f"results={f['results']} seconds={f['seconds']:.1f}{extra}",
          flush=True)


@test(timeout=300)
def old_origin_new_relay_new_server(t):
    r, p, s, f = mixed_run(t, OLD, NEW, NEW)
    # P (this tree) names R, a 0.1 node, each time its link came up, and
    # only R: S runs this tree too.
    warned = old_peer_warnings(p, "R")
    assert warned, "P logged no WARNING naming R as a 0.1 node:\n" + \
        p.log_tail(60)
    for line in warned:
        assert "upgrade R" in line, line
    others = [ln for ln in old_peer_warnings(p) if " peer=R " not in ln]
    others += old_peer_warnings(s)
    assert not others, "a WARNING names a node of this tree as 0.1:\n" + \
        "\n".join(others)
    print(f"     P: {warned[0].split(' peer ', 1)[-1].strip()}", flush=True)
    # A 0.1.0 origin's messages carry no life: S files its stream under
    # the legacy life ("What holds in a mixed fleet").
    lives = {(x["origin"], x["life"])
             for x in s.semqctl_json("lives")["lives"]}
    assert lives == {("R", LEGACY_LIFE)}, f"S's lives: {lives}"
    figures("mixed R=0.1.0 P=new S=new", f,
            f" p_warnings_about_R={len(warned)} s_lives_of_R={LEGACY_LIFE}")
    for x in (r, s, p):
        x.stop()


@test(timeout=300)
def new_origin_old_relay_old_server(t):
    r, p, s, f = mixed_run(t, NEW, OLD, OLD)
    warned = old_peer_warnings(r, "P")
    assert warned, "R logged no WARNING naming P as a 0.1 node:\n" + \
        r.log_tail(60)
    assert all("upgrade P" in ln for ln in warned), warned
    print(f"     R: {warned[0].split(' peer ', 1)[-1].strip()}", flush=True)
    figures("mixed R=new P=0.1.0 S=0.1.0", f,
            f" r_warnings_about_P={len(warned)}")
    for x in (r, s, p):
        x.stop()


# ---- 3. a 0.1.0 relay between two nodes of this tree ------------------------

N_SPLIT_KEYS = 8


def hidden_life_warnings(node, dest, via):
    """node's WARN lines saying that its stream to dest goes through `via`,
    a 0.1 node, and so goes without its life from then on (proto.c
    hide_life)."""
    want = f"stream {node.id}->{dest} goes through {via}, which runs SEMQ 0.1"
    return [ln for ln in node.log_text().splitlines()
            if " WARN " in ln and want in ln]


def confirm_need(s, seqs):
    """{confirm_need: rows} of S's tb_0030 rows of R's stream with these
    seqs: 3 (origin and relay) for a copy a relay delivered from its store
    (Message.stored_by), 1 for a message a relay forwarded."""
    out = {}
    for seq, need in s.sql("SELECT seq, confirm_need FROM tb_0030 WHERE "
                           "origin = 'R' AND dest = 'S'"):
        if seq in seqs:
            out[need] = out.get(need, 0) + 1
    return out


def wait_migrated(t, node):
    """Waits for the WARN line of this tree's semqd that migrated node's
    0.1.0 database; returns the line."""
    def logged():
        for line in node.log_text().splitlines():
            if MIGRATED.search(line):
                return line
        return Pending("no migration line yet")
    return wait_until(logged, SHORT, f"{node.id}: the migration's WARN line",
                      on_timeout=t.logs)


@test(timeout=300)
def new_origin_old_relay_new_server(t):
    r, p, s = make_fleet(t, NEW, OLD, NEW)
    t0 = time.monotonic()
    sent, batch, need = [], {}, {}

    def send(name, count, how):
        """Batch `name` of count documents; how: "stored" (S gets it from
        P's store) or "forwarded" (P passes it on to S)."""
        rows = enqueue(r, "S", docs("doc", len(sent), count, N_SPLIT_KEYS))
        sent.extend(rows)
        batch[name] = {q for q, _ in rows}
        need[name] = 3 if how == "stored" else 1
        return batch[name]

    def custody_at_r(seqs):
        return {c for q, c in r.sql("SELECT seq, custodian FROM tb_0031 "
                                    "WHERE status = 6") if q in seqs}

    # 1. S has never run. R's first batch is stored by P (0.1.0: its copies
    # lose the life); then S starts and meets R's stream through them.
    p.start(timeout=READY)
    r.start(timeout=READY)
    wait_link(t, p, "R")
    b1 = send("1", 48, "stored")
    wait_out(t, r, {6: len(b1)}, "batch 1 in P's custody", seqs=b1,
             timeout=SHORT)
    assert custody_at_r(b1) == {"P"}, custody_at_r(b1)
    assert copies(p) == len(b1), copies(p)
    assert not os.path.exists(s.db), "S has run before its first contact"
    s.start(timeout=READY)
    wait_out(t, r, {100: len(sent)}, "batch 1 delivered from P's store")
    wait_relay_empty(t, p)

    # 2. S up: P forwards the second batch. (A 0.1 relay passes on the
    # fields it does not know, R's life among them; R has sent every id of
    # the stream without it since its first message through P.)
    wait_link(t, p, "S")
    b2 = send("2", 48, "forwarded")
    wait_out(t, r, {100: len(sent)}, "batch 2 forwarded and confirmed")
    assert confirm_need(s, b1) == {3: len(b1)}, \
        f"batch 1 did not all come from P's store: {confirm_need(s, b1)}"
    assert confirm_need(s, b2) == {1: len(b2)}, \
        f"batch 2 was not all forwarded by P: {confirm_need(s, b2)}"

    # 3. S away again: P stores the third batch, is frozen (SIGSTOP) while
    # R sends batch 3' into it (in flight: sent, never read), and is killed
    # -9 holding the stored copies; it comes back, then S. S answers "not
    # received" about 3' (P holds no copy of it): R sends it again, and P
    # forwards it.
    s.stop()
    wait_link(t, p, "S", up=False)
    b3 = send("3", 48, "stored")
    wait_out(t, r, {6: len(b3)}, "batch 3 in P's custody", seqs=b3,
             timeout=SHORT)
    os.kill(p.pid, signal.SIGSTOP)
    b3f = send("3'", 12, "forwarded")
    wait_out(t, r, {4: len(b3f)}, "batch 3' sent into the frozen P",
             seqs=b3f, timeout=SHORT)
    held = copies(p)
    rc = p.kill()
    assert rc == -9, f"P had exited ({rc}) before the kill"
    print(f"     killed -9 P (frozen) holding {held} copies, "
          f"{len(b3f)} messages in flight to it", flush=True)
    p.start(timeout=READY)
    wait_link(t, r, "P")
    assert copies(p) == held, f"P lost copies in the kill: {copies(p)}"
    s.start(timeout=READY)
    wait_out(t, r, {100: len(sent)}, "batches 3 and 3' confirmed")
    wait_relay_empty(t, p)

    # 4. P upgraded in place while it holds copies: S away, P (0.1.0)
    # stores batch 4a, stops; this tree's semqd migrates its database; it
    # stores batch 4b (R's ids still without the life: P files them under
    # the legacy life, as the migrated ones), S comes back, and batch 4c is
    # forwarded by the new P.
    warned_rev1 = len(old_peer_warnings(r, "P"))
    s.stop()
    wait_link(t, p, "S", up=False)
    b4a = send("4a", 24, "stored")
    wait_out(t, r, {6: len(b4a)}, "batch 4a in P's custody", seqs=b4a,
             timeout=SHORT)
    p.stop()
    use_release(p, NEW)
    p.start(timeout=READY)
    print(f"     P: {wait_migrated(t, p).split(' WARN ', 1)[-1].strip()}",
          flush=True)
    wait_link(t, r, "P")
    b4b = send("4b", 24, "stored")
    wait_out(t, r, {6: len(b4b)}, "batch 4b in P's custody", seqs=b4b,
             timeout=SHORT)
    assert custody_at_r(b4a | b4b) == {"P"}, custody_at_r(b4a | b4b)
    p_lives = {f"{lf:016x}" for (lf,) in p.sql(
        "SELECT DISTINCT life FROM tb_0031 WHERE origin = 'R'")}
    assert copies(p) == len(b4a) + len(b4b) and p_lives == {LEGACY_LIFE}, \
        f"P holds {copies(p)} copies under lives {p_lives}, R's life is " \
        f"{life(r)}"
    s.start(timeout=READY)
    wait_out(t, r, {100: len(sent)}, "batches 4a and 4b confirmed")
    wait_relay_empty(t, p)
    wait_link(t, p, "S")
    send("4c", 24, "forwarded")
    n = len(sent)
    wait_out(t, r, {100: n}, f"all {n} rows confirmed")
    seconds = time.monotonic() - t0

    # 5. Every document once, in key order, under one stream at S.
    assert [q for q, _ in sent] == list(range(1, n + 1)), sent[:3]
    keys = {("R", q): k for q, k in sent}
    got = check_exactly_once(s, ["R"], n, keys=keys)
    dups = duplicates(s)
    assert got["total"] == n and got["keys"] == N_SPLIT_KEYS and \
        dups == 0, (got, dups)
    for name, seqs in batch.items():
        c = confirm_need(s, seqs)
        assert c == {need[name]: len(seqs)}, \
            f"batch {name}: S's confirm_need {c}, want all {need[name]}"
    wait_relay_empty(t, p)
    wait_settled(t, s, "R", n)
    lives = [x for x in s.semqctl_json("lives")["lives"]
             if x["origin"] == "R"]
    assert [x["life"] for x in lives] == [LEGACY_LIFE], \
        f"S knows R under {lives}, want the legacy life only"
    in_lives = s.sql("SELECT DISTINCT life FROM tb_0030 WHERE origin = 'R' "
                     "UNION SELECT life FROM semq_stream_in WHERE origin = "
                     "'R'")
    assert in_lives == [(1,)], f"S's rows of R under lives {in_lives}"
    p_lives = [x for x in p.semqctl_json("lives")["lives"]
               if x["origin"] == "R"]
    assert {x["life"] for x in p_lives} == {LEGACY_LIFE}, \
        f"P knows R under {p_lives}, want the legacy life only"

    # R: only the messages P never read were resent, once, after S's "not
    # received"; every other row was sent once.
    again = {q: (a, e) for q, a, e in r.sql(
        "SELECT seq, attempts, last_error FROM tb_0031 WHERE attempts <> 1 "
        "OR last_error LIKE '%not received%'")}
    assert set(again) == b3f, \
        f"rows sent more than once or told not received: {again}"
    for q, (a, e) in again.items():
        assert a == 2 and e == "S: not received; resent (answer via P)", \
            f"R/S/{q}: attempts {a}, last_error {e!r}"
    (hidden,), = r.sql("SELECT life_hidden FROM semq_stream_out WHERE "
                       "origin = 'R' AND dest = 'S'")
    assert hidden == 1, f"R's stream to S has life_hidden {hidden}"
    warned = hidden_life_warnings(r, "S", "P")
    assert len(warned) == 1 and "upgrade P" in warned[0], \
        f"R's WARNINGs that its stream goes through P: {warned}"
    assert len(old_peer_warnings(r, "P")) == warned_rev1, \
        "R warned about P as a 0.1 node after P's upgrade:\n" + \
        "\n".join(old_peer_warnings(r, "P"))
    print(f"     R: {warned[0].split(' WARN ', 1)[-1].strip()}", flush=True)
    results = dict(r.sql("SELECT coalesce(result, -1), count(*) FROM tb_0031"
                         " GROUP BY 1"))
    print(f"FIGURES: mixed R=new P=0.1.0->new S=new messages={n} "
          f"keys={got['keys']} batches="
          f"{'/'.join(str(len(v)) for v in batch.values())} kills=1 "
          f"(P -9 holding {held}, {len(b3f)} in flight) p_upgrades=1 "
          f"s_restarts=2 resent={len(again)} duplicates={dups} "
          f"lives_at_S={len(lives)} ({lives[0]['life']}) "
          f"r_hidden_life_warnings={len(warned)} results={results} "
          f"seconds={seconds:.1f}", flush=True)
    for x in (r, s, p):
        x.stop()


# ---- 4. migration -----------------------------------------------------------

STATUS_COLS = {"tb_0031": "status", "tb_0033": "status",
               "tb_0030": "ack_status, result"}
ID_COLS = {"tb_0031": "origin, dest, seq, status",
           "tb_0030": "origin, dest, seq, ack_status, result",
           "tb_0033": "origin, dest, seq, status",
           "semq_stream_in": "origin, dest, confirmed_through",
           "semq_stream_out": "origin, dest, last_seq",
           "journal": "origin, dest, seq"}


def census(path):
    """{table: {"rows": n, "by_status": {...}, "ids": [...]}} of every table
    of the SQLite database at path: row counts, counts per status (tb_0031,
    tb_0033; tb_0030 per (ack_status, result)) and each row's identity and
    status."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        out = {}
        for (tb,) in c.execute("SELECT name FROM sqlite_master WHERE type = "
                               "'table' AND name NOT LIKE 'sqlite_%' ORDER "
                               "BY name").fetchall():
            e = {"rows": c.execute(f'SELECT count(*) FROM "{tb}"')
                 .fetchone()[0]}
            if tb in STATUS_COLS:
                e["by_status"] = {
                    (r[:-1] if len(r) > 2 else r[0]): r[-1]
                    for r in c.execute(f"SELECT {STATUS_COLS[tb]}, count(*) "
                                       f"FROM {tb} GROUP BY "
                                       f"{STATUS_COLS[tb]}")}
            if tb in ID_COLS:
                e["ids"] = sorted(c.execute(f"SELECT {ID_COLS[tb]} FROM "
                                            f"{tb}").fetchall())
            if tb == "semq_meta":
                e["ids"] = dict(c.execute("SELECT key, value FROM "
                                          "semq_meta").fetchall())
            if tb == "semq_schema":
                e["ids"] = sorted(v for (v,) in c.execute(
                    "SELECT version FROM semq_schema"))
            out[tb] = e
        return out
    finally:
        c.close()


def compare_census(before, after, who):
    """Every table of `before` is in `after` with the same rows and the
    same status of each; semq_meta and semq_schema may only have gained
    rows (the life, version 3)."""
    problems = []
    for tb, b in sorted(before.items()):
        a = after.get(tb)
        if a is None:
            problems.append(f"table {tb} is gone")
            continue
        if tb == "semq_meta":
            lost = {k: v for k, v in b["ids"].items()
                    if a["ids"].get(k) != v}
            if lost:
                problems.append(f"semq_meta lost or changed {lost}: now "
                                f"{a['ids']}")
            continue
        if tb == "semq_schema":
            if not set(b["ids"]) <= set(a["ids"]):
                problems.append(f"semq_schema versions {b['ids']} -> "
                                f"{a['ids']}")
            continue
        for k in ("rows", "by_status"):
            if b.get(k) != a.get(k):
                problems.append(f"{tb}: {k} {b.get(k)} -> {a.get(k)}")
        if b.get("ids") != a.get("ids"):
            gone = sorted(set(b["ids"]) - set(a["ids"]))
            new = sorted(set(a["ids"]) - set(b["ids"]))
            problems.append(f"{tb}: rows gone or changed {gone[:10]}, "
                            f"rows new or changed {new[:10]}")
    if problems:
        raise HarnessError(f"{who}: the migrated database is not the 0.1.0 "
                           "one:\n  " + "\n  ".join(problems))


def show(c):
    """The interesting part of a census, for the output."""
    parts = []
    for tb in ("tb_0031", "tb_0030", "tb_0033"):
        if tb in c and c[tb]["rows"]:
            parts.append(f"{tb} {c[tb]['by_status']}")
    if c.get("semq_stream_in", {}).get("ids"):
        parts.append(f"watermarks {c['semq_stream_in']['ids']}")
    return "; ".join(parts) or "(empty)"


MIGRATED = re.compile(r" WARN .*: migrated from schema 2 to (\d+); the "
                      r"database as it was is kept in (\S.*?)\s*$")


def tree_schema():
    """The schema version of this tree: the highest NNNN of db/NNNN_*.sql
    (3 for 0.2.0; a later tree migrates a 0.1.0 database further, in the
    same start)."""
    versions = [int(f[:4]) for f in os.listdir(os.path.join(SOURCE_DIR,
                                                            "db"))
                if re.match(r"^\d{4}_.*\.sql$", f)]
    assert versions and max(versions) >= 3, versions
    return max(versions)


def migrate_alone(t, node, journal_options=None):
    """Starts this tree's semqd on the 0.1.0 database of node (stopped,
    like every node it would talk to: nothing can move), waits for the
    migration's WARN line and stops it again. Checks the copy the line
    names (schema 2, the row counts of the 0.1.0 database) and that the
    migrated database has every row of every table with its status.
    Returns (census before, census after, copy path)."""
    assert not node.alive()
    before = census(node.db)
    assert before["semq_schema"]["ids"][-1] == 2, before["semq_schema"]
    use_release(node, NEW, journal_options)
    node.start(timeout=READY)

    def logged():
        for line in node.log_text().splitlines():
            m = MIGRATED.search(line)
            if m:
                return m
        return Pending("no migration line yet")
    m = wait_until(logged, SHORT, f"{node.id}: the migration's WARN line",
                   on_timeout=node.log_tail)
    to, kept = int(m.group(1)), m.group(2)
    assert to == tree_schema(), f"{node.id}: migrated to schema {to}, this " \
        f"tree is at {tree_schema()}: {m.group(0)}"
    print(f"     {node.id}: {m.group(0).strip()}", flush=True)
    node.stop()
    if not os.path.isabs(kept):
        kept = os.path.join(node.dir, kept)
    assert os.path.isfile(kept), f"{node.id}: the copy {kept} named in " \
        "the log does not exist"
    copy = census(kept)
    assert copy["semq_schema"]["ids"][-1] == 2, \
        f"{kept}: schema versions {copy['semq_schema']['ids']}, not 2"
    rows = {tb: e["rows"] for tb, e in before.items()}
    copy_rows = {tb: e["rows"] for tb, e in copy.items()}
    assert copy_rows == rows, f"{kept}: row counts {copy_rows}, the " \
        f"0.1.0 database had {rows}"
    after = census(node.db)
    assert after["semq_schema"]["ids"][-1] == to, after["semq_schema"]
    compare_census(before, after, node.id)
    return before, after, kept


def life(node):
    return node.semqctl_json("lives")["life"]


@test(timeout=480)
def migration_from_0_1_0_keeps_every_state(t):
    # S's journal: "dead" and "discard" fail PERMANENT (dead at once); in
    # stage D every other call fails too (RETRY: pending, every second).
    journal_a = {"permanent_keys": "dead,discard"}
    journal_d = {"permanent_keys": "dead,discard", "fail_rate": 1}
    # R asks about unanswered rows only when its link to P comes up (every
    # release does that) and then hourly: so the rows sent into the frozen
    # P stay sent (4) while S is away.
    r, p, s = make_fleet(t, OLD, OLD, OLD, r_options={"query_after": "1h"},
                         s_journal=journal_a,
                         s_redo={"levels": "1s", "max_tries": 1000})
    t0 = time.monotonic()
    p.start(timeout=READY)
    s.start(timeout=READY)
    r.start(timeout=READY)
    wait_link(t, p, "S")
    wait_link(t, p, "R")
    sent = {}  # group -> [(seq, key)]

    # A: everything up. 40 documents on 4 keys take effect; two of key
    # "dead" (the first dead, the second waiting behind it), one of key
    # "discard" (dead, then discarded by the operator) and one delayed by
    # 1.5 s (pending, then done).
    sent["ok"] = enqueue(r, "S", docs("ok", 0, 40, 4))
    sent["dead"] = enqueue(r, "S", [("dead", b"dead 1", None),
                                    ("dead", b"dead 2", None)])
    sent["discard"] = enqueue(r, "S", [("discard", b"discard me", None)])
    due = int(time.time() * 1000) + 1500
    sent["delay"] = enqueue(r, "S", [("delay", b"delayed", due)])
    n_a = sum(len(v) for v in sent.values())
    wait_out(t, r, {100: n_a}, "stage A confirmed")
    wait_redo(t, s, {-1: 2, 1: 1, 2: 1}, "dead, dead, waiting, done")
    (disc_seq, _), = sent["discard"]
    (disc_id,), = s.sql("SELECT id FROM tb_0033 WHERE seq = ?", (disc_seq,))
    rc, out, err = s.semqctl("redo", "discard", disc_id, "--reason",
                             "test_upgrade: the operator gave up on it")
    assert rc == 0, f"0.1.0 semqctl redo discard: {rc} {out} {err}"
    wait_redo(t, s, {-1: 1, 1: 1, 2: 1, -2: 1}, "one discarded")
    wait_settled(t, s, "R", n_a)

    # B: S away. P is frozen (SIGSTOP) while R sends 10 rows: they stay
    # sent (4); P is killed -9 and comes back; R's queries about them find
    # no S. Then 10 rows on other keys are stored by P (6).
    s.stop()
    wait_link(t, p, "S", up=False)
    os.kill(p.pid, signal.SIGSTOP)
    sent["sent"] = enqueue(r, "S", docs("sent", 0, 10, 2))
    seqs_sent = {q for q, _ in sent["sent"]}
    wait_out(t, r, {4: 10}, "rows sent into the frozen P", seqs=seqs_sent,
             timeout=SHORT)
    assert p.kill() == -9
    p.start(timeout=READY)
    wait_link(t, r, "P")
    sent["late"] = enqueue(r, "S", docs("late", 0, 10, 2))
    seqs_late = {q for q, _ in sent["late"]}
    wait_out(t, r, {6: 10}, "rows held by P", seqs=seqs_late, timeout=SHORT)

    # C: S back. P delivers the held rows: they take effect and are
    # acknowledged, and stay in S's tb_0030 above the gap the sent rows
    # leave (the watermark cannot pass a seq S never got).
    s.start(timeout=READY)
    wait_out(t, r, {100: 10}, "the held rows confirmed", seqs=seqs_late,
             timeout=SHORT)

    def acked_above_gap():
        n = s.sql("SELECT count(*) FROM tb_0030 WHERE ack_status = 1 AND "
                  "seq IN (%s)" % ",".join(map(str, seqs_late)))[0][0]
        return n == 10 or Pending(f"{n} acknowledged rows")
    wait_until(acked_above_gap, SHORT, "S: the held rows acknowledged",
               on_timeout=t.logs)

    # D: S away again; P stores 20 rows of 4 keys for it; R stops; S comes
    # back with a journal that fails every call: P delivers, S keeps them
    # in redo (4 pending, 16 waiting behind them) and their tb_0030 rows
    # wait for R's confirmation (unacknowledged); R's rows stay 6.
    s.stop()
    wait_link(t, p, "S", up=False)
    sent["held"] = enqueue(r, "S", docs("held", 0, 20, 4))
    seqs_held = {q for q, _ in sent["held"]}
    wait_out(t, r, {6: 20}, "rows held by P", seqs=seqs_held, timeout=SHORT)
    r.stop()
    use_release(s, OLD, journal_d)
    s.start(timeout=READY)
    wait_redo(t, s, {-1: 1, 1: 1 + 16, 2: 1, -2: 1, 0: 4},
              "the delivered rows in redo: 4 pending, 16 waiting")

    def unacked():
        rows = s.sql("SELECT ack_status, confirm_need, confirm_got, "
                     "count(*) FROM tb_0030 WHERE seq IN (%s) GROUP BY 1, 2,"
                     " 3" % ",".join(map(str, seqs_held)))
        return rows == [(0, 3, 2, 20)] or Pending(
            f"(ack_status, confirm_need, confirm_got, rows) {rows}")
    wait_until(unacked, SHORT, "S: 20 rows confirmed by P only",
               on_timeout=t.logs)
    wait_relay_empty(t, p)
    # Then S leaves, R comes back and P stores 10 more for S (6 at R).
    s.stop()
    wait_link(t, p, "S", up=False)
    r.start(timeout=READY)
    sent["relay"] = enqueue(r, "S", docs("relay", 0, 10, 2))
    seqs_relay = {q for q, _ in sent["relay"]}
    wait_out(t, r, {6: 10}, "rows held by P", seqs=seqs_relay,
             timeout=SHORT)
    r.stop()

    # E: R stopped: one row cancelled by the operator (0.1.0 semqctl) and
    # 10 rows the daemon never saw (0).
    sent["cancel"] = enqueue(r, "S", [("cancel", b"never", None)])
    (cancel_seq, _), = sent["cancel"]
    rc, out, err = r.semqctl("outbound", "cancel", f"R/S/{cancel_seq}")
    assert rc == 0, f"0.1.0 semqctl outbound cancel: {rc} {out} {err}"
    sent["unsent"] = enqueue(r, "S", docs("new", 0, 10, 2))
    p.stop()
    built = time.monotonic() - t0

    # Every state is there, made by 0.1.0 nodes.
    states = {x.id: census(x.db) for x in (r, p, s)}
    for x in (r, p, s):
        print(f"     0.1.0 {x.id}: {show(states[x.id])}", flush=True)
    r_st = states["R"]["tb_0031"]["by_status"]
    for st, what in ((0, "unsent"), (4, "sent"), (6, "relay-acked"),
                     (100, "confirmed"), (-2, "cancelled")):
        assert r_st.get(st), f"R has no {what} ({st}) row: {r_st}"
    s_in = states["S"]["tb_0030"]["by_status"]
    assert any(k[0] == 1 for k in s_in) and any(k[0] == 0 for k in s_in), \
        f"S's tb_0030 has not both acked and unacked rows: {s_in}"
    s_redo = states["S"]["tb_0033"]["by_status"]
    for st, what in ((0, "pending"), (1, "waiting"), (-1, "dead"),
                     (2, "done"), (-2, "discarded")):
        assert s_redo.get(st), f"S has no {what} ({st}) redo entry: {s_redo}"
    assert states["S"]["semq_stream_in"]["ids"] == [("R", "S", n_a)], \
        states["S"]["semq_stream_in"]
    assert states["P"]["tb_0031"]["by_status"] == {0: 10}, \
        states["P"]["tb_0031"]

    # Upgrade: this tree's semqd on each database, alone (S first, while
    # P is down, with the journal still failing: nothing can change state).
    kept = {}
    for x, opts in ((s, journal_d), (p, None), (r, None)):
        _, _, kept[x.id] = migrate_alone(t, x, opts)
    lives = {x.id: life(x) for x in (r, p, s)}
    assert lives["R"] == LEGACY_LIFE, \
        f"R had sent under 0.1.0 but its life is {lives['R']}"
    for x in ("P", "S"):
        assert lives[x] not in (LEGACY_LIFE, "0000000000000000"), \
            f"{x} never sent but has life {lives[x]}"
    print(f"     lives after the migration: {lives}", flush=True)

    # The network on this tree: the journal succeeds now; the operator
    # retries the dead entry; the application sends more on the old keys.
    use_release(s, NEW, {})
    r.node_options["query_after"] = FAST["query_after"]
    p.start(timeout=READY)
    s.start(timeout=READY)
    wait_link(t, p, "S")
    r.start(timeout=READY)
    sent["after"] = enqueue(r, "S", docs("ok", 40, 12, 4))
    wait_until(lambda: s.sql("SELECT count(*) FROM tb_0033 WHERE status = 1 "
                             "AND msg_key LIKE 'held-%'")[0][0] == 0 or
               Pending("entries still waiting"), SHORT,
               "S: the pending entries run and release their keys",
               on_timeout=t.logs)
    res = s.semqctl_json("redo", "retry", "--all-dead")
    assert res["count"] == 1, res
    (dead1, _), (dead2, _) = sent["dead"]
    total = sum(len(v) for v in sent.values())
    want = {100: total - 1, -2: 1}
    wait_out(t, r, want, "every row confirmed, the cancelled one -2")
    wait_redo(t, s, {2: 1 + 20 + 2, -2: 1},
              "every redo entry done but the discarded one")
    keys = {("R", q): k for v in sent.values() for q, k in v}
    assert sorted(q for _, q in keys) == list(range(1, total + 1)), keys
    got = check_exactly_once(s, ["R"], total, keys=keys,
                             cancelled=[("R", cancel_seq), ("R", disc_seq)])
    dups = duplicates(s)
    assert got["total"] == total - 2 and dups == 0, (got, dups)
    wait_relay_empty(t, p)
    wait_settled(t, s, "R", total)
    (cres,), = r.sql("SELECT result FROM tb_0031 WHERE seq = ?",
                     (cancel_seq,))
    assert cres == 4, f"the cancelled row's result is {cres}, not 4"
    s_lives = {x["life"] for x in s.semqctl_json("lives")["lives"]
               if x["origin"] == "R"}
    assert s_lives == {LEGACY_LIFE}, f"S knows R under {s_lives}"
    results = dict(r.sql("SELECT coalesce(result, -1), count(*) FROM tb_0031"
                         " GROUP BY 1"))
    print(f"FIGURES: migration 0.1.0->new messages={total} "
          f"states_R={states['R']['tb_0031']['by_status']} "
          f"states_S_redo={s_redo} took_effect={got['total']} "
          f"cancelled=1 discarded=1 dead_retried=1 kills=1 (P -9, frozen) "
          f"duplicates={dups} r_life={lives['R']} results={results} "
          f"seconds={time.monotonic() - t0:.1f} (0.1.0 part {built:.1f})",
          flush=True)
    for x in (r, s, p):
        x.stop()


if __name__ == "__main__":
    run()
