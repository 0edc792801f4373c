# SPDX-License-Identifier: MIT
"""A shop's database restored from an older copy, or wiped (docs/PROTOCOL.md,
"Lives of a node: re-images and restores").

Real semqd nodes on loopback. An origin R sends documents to a server S
(journal plugin), directly or through a store-and-forward platform P. Every
document is a message whose `type` is its document number (unique in the
test) and whose key is one of a few business objects, so the journal tells
each document apart and key order can be checked across renumbering.

Each scenario:

  1. phase 1: N documents take effect;
  2. the event's copy of R's database is taken (see below);
  3. phase 2: N more documents are sent — the timeline the event loses.
     Directly they take effect at S; through P, S is offline from here on,
     and P holds them;
  4. the event, while R is stopped: its database is put back from the copy
     (restore), or deleted (wipe: a re-imaged PC, same id and certificate);
  5. N/2 documents are enqueued into the restored database before semqd
     starts (their seqs collide with the lost timeline's), R starts, and is
     killed -9 once in the middle of its resynchronisation — through P, P
     is killed -9 too — and N/2 more are enqueued after it is back;
  6. through P, S comes back.

Every document must take effect exactly once — those of the lost timeline
too (they did, or P delivers them), none twice — with the documents of each
key in the order they were enqueued. A restore must be seen by the operator:
R logs an ERROR naming the stream, `semqctl status` shows a RESYNC line and
/metrics counts semq_resyncs_total; a wipe is a new life: S (or P) logs the
new database and `semqctl lives` lists both lives of R.

Events: `stopped` (copy of the stopped database), `inflight` (copy taken
with the online backup API while R runs with messages in flight: status 4
directly — S's database write lock held so nothing is answered — or status
6 through P), `wipe`. Topologies: direct; through a store-and-forward P
(S offline during the event); through a forward-only P (S online). Stores:
SQLite everywhere, or S (or P) on PostgreSQL ($SEMQ_TEST_PG_URL; those
scenarios exit 77, skipped with a loud message, without it). Each prints
one FIGURES line: documents enqueued after the event, documents of them
that took effect, duplicates, and the lost timeline's documents.

Environment (besides what semqtest.py reads): SEMQ_RESTORE_SCALE (default
1) in (0, 1] multiplies N (120; at least 30 remain).

Run by ctest as integration_restore, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_restore.py [NAME]
"""

import os
import re
import shutil
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (HarnessError, Pending, admin_metric,  # noqa: E402
                      connect, run, test, wait_until)
from pgharness import Pg, PgNode, db_name_for  # noqa: E402

SCALE = float(os.environ.get("SEMQ_RESTORE_SCALE", "1"))
if not 0 < SCALE <= 1:
    sys.exit(f"SEMQ_RESTORE_SCALE={SCALE}: must be in (0, 1]")
N = max(30, int(round(120 * SCALE)))
N_KEYS = 7
FAST = {"poll_interval": "20ms", "query_after": "1s",
        "reconnect_min": "100ms", "reconnect_max": "500ms",
        "window": "100000"}
TIMEOUT = 90.0
READY_TIMEOUT = 30.0


# ---- documents --------------------------------------------------------------

def docs(first, count):
    """[(number, key)] of documents first .. first + count - 1."""
    return [(n, f"obj-{n % N_KEYS}") for n in range(first, first + count)]


def enqueue(node, dest, batch):
    """The application's INSERT, one transaction for the batch (works with
    semqd running or stopped: the database's triggers number the rows)."""
    c = node.connect_db(readonly=False)
    try:
        with c:
            for n, key in batch:
                c.execute("INSERT INTO tb_0031(dest, type, msg_key, payload) "
                          "VALUES (?, ?, ?, ?)",
                          (dest, n, key, f"document {n}".encode()))
    finally:
        c.close()


def journal(s, origin="R"):
    """[(journal id, document number, key)] of origin's documents at S."""
    if not isinstance(s, PgNode) and not os.path.exists(s.db):
        return []
    if not s.has_table("journal"):
        return []
    return s.sql("SELECT id, type, msg_key FROM journal WHERE origin = ? "
                 "ORDER BY id", (origin,))


def took_effect(s, want):
    """How many of the documents `want` are in S's journal."""
    have = {n for _, n, _ in journal(s)}
    return sum(1 for n, _ in want if n in have)


def check_documents(s, want):
    """Every document of `want` ([(number, key)]) took effect exactly once
    at S, nothing else of R's did, and per key in the order of its number
    (the order they were enqueued). Returns the count of duplicates (0)."""
    rows = journal(s)
    seen = {}
    for jid, n, key in rows:
        seen.setdefault(n, []).append((jid, key))
    wanted = dict(want)
    missing = sorted(n for n in wanted if n not in seen)
    dups = sorted(n for n, v in seen.items() if len(v) > 1)
    extra = sorted(n for n in seen if n not in wanted)
    wrong_key = sorted(n for n, v in seen.items()
                       if n in wanted and v[0][1] != wanted[n])
    last, order = {}, []
    for jid, n, key in rows:
        if key in last and n < last[key][0]:
            order.append(f"document {n} (journal id {jid}) after {last[key]}"
                         f" of key {key}")
        if key not in last or n > last[key][0]:
            last[key] = (n, jid)
    problems = []
    if missing:
        problems.append(f"missing {len(missing)}: {missing[:20]}")
    if dups:
        problems.append(f"applied twice {len(dups)}: {dups[:20]}")
    if extra:
        problems.append(f"not sent {len(extra)}: {extra[:20]}")
    if wrong_key:
        problems.append(f"wrong key: {wrong_key[:20]}")
    if order:
        problems.append(f"key order: {order[:10]}")
    if problems:
        raise HarnessError("documents at S: " + "; ".join(problems))
    return len(dups)


# ---- databases ----------------------------------------------------------------

def copy_db(node, dst):
    """A consistent copy of node's database, with SQLite's online backup
    (the node may be running: its WAL is included)."""
    src = sqlite3.connect(node.db, timeout=10.0)
    out = sqlite3.connect(dst)
    try:
        src.backup(out)
    finally:
        out.close()
        src.close()


def remove_db(node):
    for sfx in ("", "-wal", "-shm"):
        try:
            os.unlink(node.db + sfx)
        except FileNotFoundError:
            pass


def put_back(node, copy):
    assert not node.alive()
    remove_db(node)
    shutil.copyfile(copy, node.db)


def out_counts(r, dest="S"):
    return dict(r.sql("SELECT status, count(*) FROM tb_0031 WHERE "
                      "origin = ? AND dest = ? GROUP BY status",
                      (r.id, dest)))


def wait_all_confirmed(t, r, total, what):
    """Every row of R's to S confirmed: `total` of them (None: however many
    the database holds, but for the fillers S has answered: a filler is a
    cancel of nothing and stays cancelled, -2)."""
    def done():
        c = dict(r.sql("SELECT status, count(*) FROM tb_0031 WHERE "
                       "origin = ? AND dest = ? AND NOT (status = -2 AND "
                       "result >= 0 AND last_error LIKE 'filler:%') "
                       "GROUP BY status", (r.id, "S")))
        return (set(c) <= {100} and
                (total is None or sum(c.values()) == total)) or \
            Pending(f"R status counts {c}")
    wait_until(done, TIMEOUT, f"R: {what}", interval=0.1, on_timeout=t.logs)


def wait_journal(t, s, want, what):
    def done():
        n = took_effect(s, want)
        return n == len(want) or Pending(f"{n} of {len(want)}")
    wait_until(done, TIMEOUT, f"S: {what}", interval=0.1, on_timeout=t.logs)


# ---- topologies ---------------------------------------------------------------

_PG = {"db": None}


def pg_database(t, tag):
    """A fresh PostgreSQL database for this scenario (dropped when the
    process ends); exits 77 with a loud message without a cluster."""
    url = os.environ.get("SEMQ_TEST_PG_URL", "").strip()
    if not url:
        bar = "!" * 72
        print(f"{bar}\n!! SKIPPED: {t.name}: SEMQ_TEST_PG_URL is not set "
              f"(tools/test.sh starts a cluster)\n{bar}", flush=True)
        sys.exit(77)
    base = Pg(url)
    return base.create_database(db_name_for(tag))


def server_node(t, certs, pg, **kw):
    if pg is None:
        return t.node("S", certs, **kw)
    n = PgNode("S", None, t.dir, certs, pg, **kw)
    t.nodes.append(n)
    return n


def make_direct(t, pg=None):
    certs = t.certs(["R", "S"])
    s = server_node(t, certs, pg, node_options=FAST)
    r = t.node("R", certs, listen=False, journal=False, admin=True,
               node_options=FAST)
    connect(r, s)
    return r, s, None


def make_relay(t, saf=True, pg=None):
    """R -> P -> S; P on PostgreSQL when pg is given."""
    certs = t.certs(["P", "R", "S"])
    if pg is None:
        p = t.node("P", certs, relay=True, store_and_forward=saf,
                   journal=False, admin=True, node_options=FAST)
    else:
        p = PgNode("P", None, t.dir, certs, pg, relay=True,
                   store_and_forward=saf, journal=False, admin=True,
                   node_options=FAST)
        t.nodes.append(p)
    r = t.node("R", certs, listen=False, journal=False, admin=True,
               node_options=FAST, routes={"default": "P"})
    s = t.node("S", certs, listen=False, node_options=FAST,
               routes={"default": "P"})
    connect(r, p, dialer_trusts=True)
    connect(s, p, dialer_trusts=True)
    return r, s, p


# ---- one scenario -------------------------------------------------------------

def scenario(t, topo, event, store="sqlite"):
    """topo: direct, relay (store-and-forward; S offline during the event)
    or forward (a forward-only relay; S online). store: sqlite, or
    postgresql for S (direct) or P (through a relay)."""
    pg = pg_database(t, t.name[:40]) if store == "postgresql" else None
    relay = topo == "relay"
    if topo == "direct":
        r, s, p = make_direct(t, pg)
    else:
        r, s, p = make_relay(t, saf=relay, pg=pg)
    for n in (p, s, r):
        if n:
            n.start(timeout=READY_TIMEOUT)
    copy = t.path("R-copy.db")

    # 1. documents that take effect before anything happens
    phase1 = docs(1, N)
    enqueue(r, "S", phase1)
    wait_all_confirmed(t, r, N, f"the first {N} documents confirmed")
    wait_journal(t, s, phase1, "the first documents")

    if event == "stopped":
        r.stop()
        copy_db(r, copy)
        r.start(timeout=READY_TIMEOUT)
    if relay:
        s.stop()  # offline from here to the end of the event

    # 2. the timeline the event loses (with `inflight`, its first half is
    # in the copy, in flight: sent, not yet confirmed)
    phase2 = docs(N + 1, N)
    if event == "inflight":
        first, rest = phase2[:N // 2], phase2[N // 2:]
        in_flight = 6 if relay else 4
        lock = None
        if not relay:
            # S takes nothing while its write lock is held: R's rows
            # stay sent (4)
            assert store == "sqlite", "inflight holds S's SQLite lock"
            lock = sqlite3.connect(s.db, timeout=10.0,
                                   isolation_level=None)
            lock.execute("BEGIN IMMEDIATE")
        enqueue(r, "S", first)

        def sent():
            c = out_counts(r)
            return c.get(in_flight, 0) == len(first) or Pending(f"{c}")
        wait_until(sent, TIMEOUT, f"R: rows in flight (status {in_flight})",
                   interval=0.05, on_timeout=t.logs)
        copy_db(r, copy)
        print(f"     copy taken with R at {out_counts(r)}", flush=True)
        if lock is not None:
            lock.execute("ROLLBACK")
            lock.close()
        enqueue(r, "S", rest)
    else:
        enqueue(r, "S", phase2)
    if relay:
        wait_until(lambda: out_counts(r) == {100: N, 6: N} or
                   Pending(f"{out_counts(r)}"), TIMEOUT,
                   "R: the second documents held at P (6)", interval=0.1,
                   on_timeout=t.logs)
    else:
        wait_all_confirmed(t, r, 2 * N, "the second documents confirmed")
        wait_journal(t, s, phase2, "the second documents")
    r.stop()

    # 3. the event
    if event == "wipe":
        remove_db(r)
    else:
        put_back(r, copy)

    # 4. new documents: some enqueued before semqd runs (a restored
    # database only: a wiped one does not exist until semqd makes it)
    after_a = docs(2 * N + 1, N // 2)
    after_b = docs(2 * N + 1 + N // 2, N - N // 2)
    if event != "wipe":
        enqueue(r, "S", after_a)
    r.start(timeout=READY_TIMEOUT)
    if event == "wipe":
        enqueue(r, "S", after_a)

    # killed -9 in the middle of the resynchronisation
    if event == "wipe":
        def moving():
            c = out_counts(r)
            return sum(v for k, v in c.items() if k != 0) > 0 or \
                Pending(f"{c}")
        wait_until(moving, TIMEOUT, "R: new documents on their way",
                   interval=0.02, on_timeout=t.logs)
    else:
        wait_until(lambda: "went back in time" in r.log_text() or
                   Pending("no resync logged yet"), TIMEOUT,
                   "R: the resynchronisation began (ERROR logged)",
                   interval=0.02, on_timeout=t.logs)
    r.kill()
    if relay:
        p.kill()
        p.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)
    enqueue(r, "S", after_b)
    if relay:
        s.start(timeout=READY_TIMEOUT)

    # every document exactly once, the lost timeline's included
    after = after_a + after_b
    everything = phase1 + phase2 + after
    wait_journal(t, s, everything, "every document")
    wait_all_confirmed(t, r, None, "every row of R's database confirmed")
    dups = check_documents(s, everything)
    # no seq of R's current life is left empty at S (renumbering gives up
    # seqs; fillers take their place): S's watermark reaches R's last seq,
    # so the stream's received rows can be compacted
    life = int(r.sql("SELECT value FROM semq_meta WHERE key = 'life'")[0][0])
    last = r.sql("SELECT last_seq FROM semq_stream_out WHERE origin = ? "
                 "AND dest = ?", (r.id, "S"))[0][0]

    def watermark():
        w = s.sql("SELECT confirmed_through FROM semq_stream_in WHERE "
                  "origin = ? AND dest = ? AND life = ?", (r.id, "S", life))
        w = w[0][0] if w else 0
        return w == last or Pending(f"S's watermark of R's life {life} at "
                                    f"{w}, R's last seq {last}")
    wait_until(watermark, TIMEOUT, "S: the watermark passes every seq",
               interval=0.1, on_timeout=t.logs)
    if relay:
        wait_until(lambda: p.sql("SELECT count(*) FROM tb_0031")[0][0] == 0
                   or Pending(p.sql("SELECT status, count(*) FROM tb_0031 "
                                    "GROUP BY 1")), TIMEOUT,
                   "P: every copy delivered and dropped", interval=0.1,
                   on_timeout=t.logs)

    # the operator sees it
    rc, status, err = r.semqctl("status")
    assert rc == 0, err
    if event == "wipe":
        witness = p if p else s
        assert "has another database than before" in witness.log_text(), \
            witness.log_tail()
        lives = s.semqctl_json("lives")["lives"]
        r_lives = {x["life"] for x in lives if x["origin"] == "R"}
        assert len(r_lives) == 2, lives
        assert "RESYNC" not in status, status
        resyncs = admin_metric(r, "semq_stream_resyncs_total",
                               absent=None, origin="R", dest="S")
        assert resyncs == 0, resyncs
    else:
        errors = [ln for ln in r.log_text().splitlines()
                  if " ERROR " in ln and "went back in time" in ln]
        assert errors and "R->S" in errors[0], errors
        assert re.search(r"^RESYNC R->S: ", status, re.M), status
        # kept in the database: the kill -9 does not reset it
        resyncs = admin_metric(r, "semq_stream_resyncs_total",
                               absent=None, origin="R", dest="S")
        assert resyncs and resyncs >= 1, resyncs
        print(f"     {errors[0].split(' proto ', 1)[-1][:220]}", flush=True)
    renumbered = r.sql("SELECT count(*) FROM tb_0031 WHERE last_error LIKE "
                       "'%renumbered%' AND last_error NOT LIKE 'filler:%'"
                       )[0][0]
    fillers = r.sql("SELECT count(*) FROM tb_0031 WHERE last_error LIKE "
                    "'filler:%'")[0][0]
    print(f"FIGURES: event={event} topology={topo} store={store} "
          f"enqueued_after={len(after)} "
          f"took_effect_after={took_effect(s, after)} duplicates={dups} "
          f"lost_timeline={len(phase2)} "
          f"lost_timeline_took_effect={took_effect(s, phase2)} "
          f"renumbered={renumbered} fillers={fillers} resyncs={resyncs:g} "
          f"watermark={last}",
          flush=True)
    for n in (r, s, p):
        if n:
            n.stop()
    if pg is not None:
        Pg(os.environ["SEMQ_TEST_PG_URL"]).drop_database(pg.name)


@test(timeout=300)
def restore_stopped_copy_direct(t):
    scenario(t, "direct", "stopped")


@test(timeout=300)
def restore_inflight_copy_direct(t):
    scenario(t, "direct", "inflight")


@test(timeout=300)
def wipe_direct(t):
    scenario(t, "direct", "wipe")


@test(timeout=300)
def restore_stopped_copy_through_relay(t):
    scenario(t, "relay", "stopped")


@test(timeout=300)
def restore_inflight_copy_through_relay(t):
    scenario(t, "relay", "inflight")


@test(timeout=300)
def wipe_through_relay(t):
    scenario(t, "relay", "wipe")


@test(timeout=300)
def restore_stopped_copy_through_forwarding_relay(t):
    scenario(t, "forward", "stopped")


@test(timeout=300)
def wipe_through_forwarding_relay(t):
    scenario(t, "forward", "wipe")


@test(timeout=300)
def restore_stopped_copy_direct_postgresql(t):
    scenario(t, "direct", "stopped", "postgresql")


@test(timeout=300)
def wipe_direct_postgresql(t):
    scenario(t, "direct", "wipe", "postgresql")


@test(timeout=300)
def restore_inflight_copy_through_relay_postgresql(t):
    scenario(t, "relay", "inflight", "postgresql")


if __name__ == "__main__":
    run()
