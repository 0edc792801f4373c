# SPDX-License-Identifier: MIT
"""The export plugin (plugins/export/export.c): every document a node
receives, exactly once in a table of an EXTERNAL PostgreSQL database, while
the node's own database is SQLite (docs/PLUGINS.md, "A plugin for an
external system").

Real semqd nodes on loopback with real TLS: R1 (SQLite, no plugin) dials S
(SQLite, the export plugin for every type, `conninfo` a fresh database of
the cluster in $SEMQ_TEST_PG_URL). The test reads the export table with
psql and compares every row with R1's outbound row of the same seq.

  1. kill9_exactly_once: R1 sends 500 documents (10 keys and some without
     a key, payloads with NUL and 0xff bytes, one type 4294967295). A psql
     session holds an uncommitted row R1/S/250 in the export table, so S's
     INSERT of seq 250 waits on it inside S's batch — after the batch's
     earlier documents were exported and committed in the external
     database, before S's own COMMIT. S is killed -9 there (its batch rolls
     back: those documents are exported but not received) and the row is
     rolled back; the killed S's session, still waiting in the server, then
     inserts 250 and commits with nobody to answer (an INSERT whose answer
     is lost). S restarts — every document exported but not received runs
     again and meets its row — and is killed -9 once more as soon as 380
     rows are there (wherever S is then; often done already). Then: R1's
     500 rows all confirmed, S's redo queue has no entry that is not done,
     and the export table has exactly one row per R1/S/1..500 with R1's
     type, key, created_at and payload, nothing else.
     Prints EXPORT_KILL9: ... with how many documents were in the external
     database but not received by S after the first kill.
  2. unreachable_then_reachable: S's conninfo names a database that does
     not exist yet. S starts (init does not need the external database),
     R1 sends 40 documents: S answers each (R1's rows confirmed) and keeps
     them in its redo queue with "export: cannot connect to the external
     database: ...". The database is created: every document arrives, once.
     Then the plugin's session is terminated by the server
     (pg_terminate_backend) and 40 more documents are sent: the first INSERT
     fails ("export: insert into semq_export failed: ..."), is retried from
     the redo queue on a new connection, and all 80 are there once.

Without $SEMQ_TEST_PG_URL the test says so loudly and exits 77 (skipped).
The plugin is $EXPORT_SO, else export.so beside $JOURNAL_SO, else
SEMQ_BUILD_DIR/plugins/export.so.

Run by ctest as integration_export, or by hand (NAME selects tests):
  SEMQ_TEST_PG_URL=$(tools/pgcluster.sh start /tmp/pg) SEMQ_BUILD_DIR=build \\
      python3 tests/integration/test_export.py [NAME]
"""

import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pgharness import (Pg, PgSession, db_name_for,  # noqa: E402
                       pg_url_or_skip)
from semqtest import (BUILD_DIR, HarnessError, Pending, connect,  # noqa: E402
                      msg_id, run, test, wait_until)

PG_URL = pg_url_or_skip("integration_export (the export plugin writes into "
                        "a PostgreSQL database)")

# Fast timers: short poll, quick in-doubt queries, quick reconnects; quick
# redo levels and enough tries that nothing goes dead while the external
# database is away for a few seconds.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "500ms"}
REDO = {"levels": "200ms,500ms,1s", "max_tries": 200}
READY_TIMEOUT = 30.0
SETTLE_TIMEOUT = 45.0
TABLE = "semq_export"
APP = "semq-export S"  # the plugin's application_name on node S
N_KILL = 500
BLOCK_SEQ = 250
N_LATE = 40
RS_DONE = 2  # tb_0033 status

_base = Pg(PG_URL)


def export_so():
    p = os.environ.get("EXPORT_SO")
    if p:
        return p
    j = os.environ.get("JOURNAL_SO")
    if j:
        return os.path.join(os.path.dirname(j), "export.so")
    return os.path.join(BUILD_DIR, "plugins", "export.so")


def make_pair(t, conninfo):
    """S (export plugin into conninfo, listens) and R1 (dials S), not
    started."""
    so = export_so()
    if not os.path.isfile(so):
        raise HarnessError(f"export plugin {so} is missing (build target "
                           "'export', or set EXPORT_SO)")
    certs = t.certs(["R1", "S"])
    s = t.node("S", certs, journal=False, node_options=FAST, redo=REDO,
               plugins={"export": {"path": so, "types": "*",
                                   "conninfo": conninfo}})
    r = t.node("R1", certs, listen=False, journal=False, node_options=FAST)
    connect(r, s)
    return r, s


def document(i):
    """(type, key, payload) of the i-th document R1 sends."""
    typ = 4294967295 if i == 7 else 3000 + i % 3
    key = None if i % 9 == 0 else f"K{i % 10}"
    payload = f"doc {i} ".encode() + bytes([0, 255, i % 256]) * (i % 7 + 1)
    return typ, key, payload


def send(r, first, n):
    """R1 sends documents first..first+n-1 in one transaction (so that they
    leave together and S takes many into one batch); on a fresh stream they
    get seqs first..first+n-1."""
    c = r.connect_db(readonly=False)
    try:
        with c:
            for i in range(first, first + n):
                typ, key, payload = document(i)
                c.execute("INSERT INTO tb_0031(dest, type, msg_key, "
                          "payload) VALUES ('S', ?, ?, ?)",
                          (typ, key, payload))
        r.wait_numbered()
        seqs = [q for q, in c.execute("SELECT seq FROM tb_0031 WHERE "
                                      "seq >= ? ORDER BY seq", (first,))]
    finally:
        c.close()
    assert seqs == list(range(first, first + n)), seqs[:5]


def export_count(pg):
    return pg.int(f"SELECT count(*) FROM {TABLE}") \
        if pg.has_table(TABLE) else 0


def wait_exported(pg, n, s, timeout=SETTLE_TIMEOUT):
    def enough():
        c = export_count(pg)
        return c >= n or Pending(f"{c} rows; S's redo "
                                 f"{s.redo_status_counts()}")
    wait_until(enough, timeout, f"{n} rows in {pg.name}.{TABLE}",
               on_timeout=s.log_tail)


def check_export(pg, r, s, n):
    """Exactly one row per R1/S/1..n in the export table, each with R1's
    type, key, created_at and payload; nothing else. S's redo queue: only
    done entries."""
    rows = pg.query(f"SELECT origin, dest, seq, type, msg_key, created_at, "
                    f"encode(payload, 'hex') FROM {TABLE} ORDER BY origin, "
                    f"dest, seq")
    sent = {seq: (typ, key, created, bytes(payload)) for seq, typ, key,
            created, payload in r.sql(
                "SELECT seq, type, msg_key, created_at, payload FROM "
                "tb_0031 WHERE dest = 'S'")}
    assert sorted(sent) == list(range(1, n + 1)), sorted(sent)[-5:]
    got, problems = {}, []
    for o, d, seq, typ, key, created, hexpay in rows:
        seq = int(seq)
        if (o, d) != ("R1", "S") or seq not in sent:
            problems.append(f"unexpected row {msg_id(o, d, seq)}")
            continue
        if seq in got:
            problems.append(f"{msg_id(o, d, seq)} twice")
        got[seq] = (int(typ), key, int(created), bytes.fromhex(hexpay))
        if got[seq] != sent[seq]:
            problems.append(f"{msg_id(o, d, seq)}: exported {got[seq]!r}, "
                            f"sent {sent[seq]!r}")
    missing = sorted(set(sent) - set(got))
    if missing:
        problems.append(f"missing {len(missing)}: "
                        f"{[msg_id('R1', 'S', q) for q in missing[:20]]}")
    assert not problems, "\n  ".join(problems)
    assert len(rows) == n, len(rows)
    redo = s.redo_status_counts()
    assert set(redo) <= {RS_DONE}, redo


def plugin_backends(pg):
    return [b for b in pg.backends() if b[1] == APP]


# ---- 1. kill -9 between the export's commit and the node's ------------------

@test(timeout=120)
def kill9_exactly_once(t):
    pg = _base.create_database(db_name_for("export_kill9"))
    r, s = make_pair(t, pg.url)
    s.start(timeout=READY_TIMEOUT)
    # semqd listens and has migrated before its plugins' init returns (the
    # harness's "ready"): the table is waited for, not assumed.
    wait_until(lambda: pg.has_table(TABLE), READY_TIMEOUT,
               "the export table, made by the plugin's init",
               on_timeout=t.logs)
    r.start(timeout=READY_TIMEOUT)

    blocker = PgSession(pg)
    try:
        blocker.run(f"BEGIN; INSERT INTO {TABLE}(origin, dest, seq) "
                    f"VALUES ('R1', 'S', {BLOCK_SEQ})")
        t0 = time.monotonic()
        send(r, 1, N_KILL)

        # S's INSERT of seq 250 waits for the blocker's row lock.
        def stuck():
            w = [b for b in plugin_backends(pg) if b[3] == "Lock"]
            return bool(w) or Pending(f"plugin sessions "
                                      f"{plugin_backends(pg)}, "
                                      f"{export_count(pg)} rows")
        wait_until(stuck, SETTLE_TIMEOUT, "S's export waiting on R1/S/250",
                   on_timeout=s.log_tail)
        s.kill()
        received = {q for q, in s.sql(
            "SELECT seq FROM tb_0030 WHERE origin = 'R1'")}
        blocker.run("ROLLBACK")
    finally:
        blocker.close()
    # The dead node's session still waited in the server: it inserts 250
    # and commits, and its answer goes nowhere.
    wait_until(lambda: pg.int(f"SELECT count(*) FROM {TABLE} WHERE seq = "
                              f"{BLOCK_SEQ}") == 1, 15,
               "R1/S/250 inserted by the killed node's session")
    exported = {int(q) for q, in pg.query(
        f"SELECT seq FROM {TABLE} WHERE origin = 'R1'")}
    ahead = sorted(exported - received)
    assert received <= exported, sorted(received - exported)[:10]
    assert BLOCK_SEQ in ahead and BLOCK_SEQ not in received, ahead[-5:]

    s.start(timeout=READY_TIMEOUT)
    wait_exported(pg, 380, s)
    s.kill()
    at_second = export_count(pg)
    s.start(timeout=READY_TIMEOUT)
    wait_exported(pg, N_KILL, s)
    r.wait_all_confirmed("S", total=N_KILL, timeout=SETTLE_TIMEOUT)
    wait_until(lambda: set(s.redo_status_counts()) <= {RS_DONE} or
               Pending(str(s.redo_status_counts())), SETTLE_TIMEOUT,
               "S's redo queue done", on_timeout=s.log_tail)
    check_export(pg, r, s, N_KILL)
    dt = time.monotonic() - t0
    print(f"EXPORT_KILL9: documents={N_KILL} kills=2 "
          f"exported_after_first_kill={len(exported)} "
          f"received_at_first_kill={len(received)} "
          f"exported_not_received={len(ahead)} "
          f"rows_at_second_kill={at_second} rows={N_KILL} "
          f"time={dt:.1f}s", flush=True)
    r.stop()
    s.stop()
    _base.drop_database(pg.name)


# ---- 2. the external database away, then there, then its session lost -------

@test(timeout=120)
def unreachable_then_reachable(t):
    name = db_name_for("export_late")
    _base.drop_database(name)
    u = urllib.parse.urlsplit(_base.url)
    late = Pg(urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + name,
                                       u.query, u.fragment)))
    r, s = make_pair(t, late.url)
    s.start(timeout=READY_TIMEOUT)  # init does not need the database
    r.start(timeout=READY_TIMEOUT)
    send(r, 1, N_LATE)
    # S answered every document (its verdict: redo) and keeps them.
    r.wait_all_confirmed("S", total=N_LATE, timeout=SETTLE_TIMEOUT)
    errs = [e for e, in s.sql("SELECT last_error FROM tb_0033 WHERE "
                              "status <> ?", (RS_DONE,))]
    assert errs and all(e and e.startswith(
        "export: cannot connect to the external database:") for e in errs if
        e), errs[:3]
    assert any(f'"{name}" does not exist' in e for e in errs if e), errs[:3]

    pg = _base.create_database(name)
    wait_exported(pg, N_LATE, s)
    wait_until(lambda: set(s.redo_status_counts()) <= {RS_DONE} or
               Pending(str(s.redo_status_counts())), SETTLE_TIMEOUT,
               "S's redo queue done", on_timeout=s.log_tail)
    check_export(pg, r, s, N_LATE)

    # The plugin's session ends under it: RETRY, then a new connection.
    killed = pg.query(f"SELECT pg_terminate_backend(pid) FROM "
                      f"pg_stat_activity WHERE application_name = '{APP}'")
    assert killed, "no plugin session to terminate"
    wait_until(lambda: not plugin_backends(pg), 10, "the session gone")
    send(r, N_LATE + 1, N_LATE)
    wait_exported(pg, 2 * N_LATE, s)
    r.wait_all_confirmed("S", total=2 * N_LATE, timeout=SETTLE_TIMEOUT)
    wait_until(lambda: set(s.redo_status_counts()) <= {RS_DONE} or
               Pending(str(s.redo_status_counts())), SETTLE_TIMEOUT,
               "S's redo queue done", on_timeout=s.log_tail)
    # The first document after the loss went through the redo queue (a
    # done entry keeps no error: S's log has it).
    assert s.sql("SELECT count(*) FROM tb_0033 WHERE seq > ?",
                 (N_LATE,))[0][0] >= 1
    assert any(f"msg=R1/S/{N_LATE + 1} retry " in ln and
               f": export: insert into {TABLE} failed: " in ln
               for ln in s.log_text().splitlines()), s.log_tail()
    check_export(pg, r, s, 2 * N_LATE)
    r.stop()
    s.stop()
    _base.drop_database(name)


if __name__ == "__main__":
    run()
