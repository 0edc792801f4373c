# SPDX-License-Identifier: MIT
"""S1's PostgreSQL fails over to its synchronous standby mid-run (issue 18,
docs/OPERATIONS.md).

Real semqd processes on loopback with real TLS certificates. Each scenario
starts two PostgreSQL clusters of its own with tools/pgcluster.sh (in its
directory, or under /tmp when that path is too long for one node.ini line):
a primary A and a streaming standby B that A waits for at every commit
(synchronous_standby_names, synchronous_commit = on). S1, one semqd with the
journal plugin, reaches them through the multi-host URL
`postgresql://semq@/semq?host=A,B&port=PA,PB&target_session_attrs=read-write`
(tools/pgcluster.sh url). Four shops R1..R4 on SQLite dial S1.

  1. failover: 20,000 documents, 5,000 per shop over 50 keys each: 4,000
     per shop inserted at once; when 35 % of all of them are in the journal
     (polled, not timed) the primary is killed -9 (tools/pgcluster.sh kill:
     all of its processes at once, as when its machine dies), and the last
     1,000 per shop are inserted after the kill, so that the new primary
     has work however fast S1 went before it. Once S1 has logged a
     reconnect attempt that found no server taking writes (its store backs
     off and keeps serving), B is promoted (tools/pgcluster.sh promote).
     Then every document must be confirmed at its origin (status 100) and
     the journal on the new primary must hold each (origin, dest, seq)
     exactly once, in key order: lost 0, duplicates 0; every journal row
     that was visible on A before the kill is on B. S1 ran through it all
     as one process and stops cleanly. It prints one line:

       FAILOVER: documents=20000 killed_at=N (P%) carried_over=M
         promoted_after=Xs takeover=Ys confirmed_after=Zs lost=0
         duplicates=0 total=Ts

     killed_at = journal rows seen on A just before the kill; carried_over
     = journal rows on B written before the kill (handled_at), at least
     killed_at: a transaction waiting for the synchronous standby is not
     visible to other sessions yet, so whatever the test saw on A had
     reached B; promoted_after = kill -> tools/pgcluster.sh promote
     returned (B takes writes); takeover = kill -> the first journal row
     written on the new primary (its handled_at); confirmed_after = kill ->
     the last document at 100; total = first insert -> the last document
     at 100.
  2. standby_behind: 6,000 documents in three waves of 2,000: the first;
     at 30 % of it B is paused (SIGSTOP, tools/pgcluster.sh pause) and the
     second sent; once S1's COMMIT waits for B (pg_stat_activity: SyncRep)
     A is killed, B resumed, the third wave sent and B promoted. What S1
     committed on A after the pause was never acknowledged, so again
     nothing is lost and nothing doubled. Prints FAILOVER_BEHIND: ...
  3. async_standby_loses, the negative control: the same waves with B made
     asynchronous (synchronous_standby_names emptied), and keys left empty
     (so that a lost predecessor holds nothing up). A goes on
     acknowledging while B is paused; once the origins have confirmed 300
     documents more than A's journal held at the pause (all B can have), A
     is killed and B promoted. Those documents are confirmed at their
     origins and missing on the new primary: the test asserts that at
     least 300 were lost, i.e. that it sees the loss synchronous_commit =
     on prevents. Prints FAILOVER_ASYNC: ...

Without the PostgreSQL server programs (initdb, pg_ctl, pg_basebackup,
postgres) or psql the test says so loudly and exits 77 (skipped). It does
not use $SEMQ_TEST_PG_URL.

Run by ctest as integration_failover, or by hand:
  SEMQ_BUILD_DIR=build python3 tests/integration/test_failover.py
"""

import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pgharness import (PgCluster, PgNode, cluster_base,  # noqa: E402
                       pg_server_or_skip, pgcluster_url, Pg, stop_clusters)
from semqtest import (HarnessError, Pending, check_exactly_once,  # noqa: E402
                      connect, run, test, wait_until)

pg_server_or_skip("integration_failover (S1 on a PostgreSQL primary and its "
                  "synchronous standby, the primary killed)")

ORIGINS = ("R1", "R2", "R3", "R4")
KEYS_PER_ORIGIN = 50
KILL_AT = 0.35  # share of the journal written when the primary is killed
BEHIND_AT = 0.3  # 2, 3: share of the journal when the standby is paused
BEHIND_LOSS = 300  # 3: documents confirmed beyond what the standby holds
PAYLOAD = bytes(range(64))

# Fast timers, as in test_pg_instances.py: short poll, quick in-doubt
# queries and reconnects, so what the failover rolled back is asked about
# within seconds.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}

RUN_TIMEOUT = 150.0  # every document at 100
STUCK_AFTER = 45.0  # no progress this long: the run hangs
# db_pg.c's message when a reconnect found no server taking writes
NO_SERVER = re.compile(r"no server took the connection: attempt \d+")


def enqueue(rs, n, keyed, start=0):
    """The applications: n more documents per shop in one transaction, the
    i-th (from start) with key i % KEYS_PER_ORIGIN (keyed) or none. Returns
    {(origin, seq): key} of every document sent to S1 so far."""
    keys = {}
    for r in rs:
        rows = [("S1", 1, f"{r.id}-k{i % KEYS_PER_ORIGIN:02d}" if keyed
                 else None, PAYLOAD) for i in range(start, start + n)]
        c = r.connect_db(readonly=False)
        try:
            with c:
                c.executemany("INSERT INTO tb_0031(dest, type, msg_key, "
                              "payload) VALUES (?, ?, ?, ?)", rows)
            r.wait_numbered()
            for seq, k in c.execute("SELECT seq, msg_key FROM tb_0031 WHERE "
                                    "dest = 'S1'"):
                keys[(r.id, seq)] = k
        finally:
            c.close()
    return keys


def confirmed(rs):
    """Documents to S1 at status 100, over all shops."""
    return sum(r.sql("SELECT count(*) FROM tb_0031 WHERE dest = 'S1' AND "
                     "status = 100")[0][0] for r in rs)


def since(t, mark):
    """Seconds from monotonic mark to t."""
    return f"{t - mark:.2f}s"


def failover_run(t, label, per_origin, behind=None):
    """R1..R4 -> S1 on the pair A (primary) and B (standby), per_origin
    documents per shop; A killed -9, B promoted (see the module text).
    behind: None (1), "sync" (2) or "async" (3). Prints LABEL: figures;
    returns {"lost": ..., "duplicates": ...}."""
    total = per_origin * len(ORIGINS)
    # Short: the URL naming both socket directories goes on one node.ini
    # line (inih's limit: 197 characters).
    base = cluster_base(t.dir, max_len=32)
    a = PgCluster(os.path.join(base, "a"))
    b = PgCluster(os.path.join(base, "b"))
    ok = False
    try:
        a.start()
        b.start_standby(a)
        su = Pg(a.url.replace("semq@", "postgres@", 1))  # A's superuser
        if behind == "async":
            su.query("ALTER SYSTEM SET synchronous_standby_names = ''")
            su.query("SELECT pg_reload_conf()")
            wait_until(lambda: su.value(
                "SELECT sync_state FROM pg_stat_replication") == "async",
                30, "the standby asynchronous")
        multi = Pg(pgcluster_url(a, b))

        certs = t.certs(["S1"] + list(ORIGINS))
        s1 = PgNode("S1", None, t.dir, certs, multi, node_options=FAST)
        t.nodes.append(s1)
        rs = []
        for o in ORIGINS:
            r = t.node(o, certs, listen=False, journal=False,
                       node_options=FAST)
            connect(r, s1)
            rs.append(r)
        s1.start(timeout=30)
        for r in rs:
            r.start()

        def logs():
            return t.logs(30) + "\n" + a.log_tail() + "\n" + b.log_tail()

        def journal_at_least(pg, n):
            def enough():
                got = pg.int("SELECT count(*) FROM journal")
                return got if got >= n else Pending(f"{got} rows")
            return wait_until(enough, RUN_TIMEOUT, f"{n} journal rows on "
                              f"{pg}", interval=0.02, on_timeout=logs)

        t0 = time.monotonic()
        keyed = behind != "async"
        # (2, 3) in three waves: before the pause, after it (so that S1 has
        # work while the standby is paused), after the kill (so that there
        # is work for the new primary whatever the speed); (1) in two, the
        # second after the kill, for the same reason.
        wave = per_origin - per_origin // 5 if not behind \
            else per_origin // 3
        keys = enqueue(rs, wave, keyed)
        sent = wave

        # -- a good part applied; (2, 3) the standby stops taking WAL ----
        if behind:
            journal_at_least(a.pg, BEHIND_AT * wave * len(ORIGINS))
            b.pause()
            paused_at = a.pg.int("SELECT count(*) FROM journal")
            keys = enqueue(rs, wave, keyed, sent)
            sent += wave
            if behind == "sync":
                # S1's COMMIT waits for the standby: nothing acknowledged.
                wait_until(lambda: su.int(
                    "SELECT count(*) FROM pg_stat_activity WHERE "
                    "application_name = 'S1' AND wait_event = 'SyncRep'")
                    > 0, 30, "S1 waiting for the paused standby",
                    on_timeout=logs)
            else:
                # A acknowledges on its own: origins confirm documents the
                # standby (at most paused_at journal rows) never got.
                def confirmed_beyond():
                    n = confirmed(rs)
                    return n >= paused_at + BEHIND_LOSS or Pending(
                        f"{n} confirmed, {paused_at} rows at the pause")
                wait_until(confirmed_beyond, RUN_TIMEOUT,
                           f"{BEHIND_LOSS} documents confirmed beyond the "
                           "paused standby", on_timeout=logs)
            killed_at = a.pg.int("SELECT count(*) FROM journal")
        else:
            killed_at = journal_at_least(a.pg, KILL_AT * total)

        # -- the primary dies ----------------------------------------------
        log_mark = len(s1.log_text())
        t_kill = time.monotonic()
        kill_ms = int(time.time() * 1000)
        a.kill()
        # Every process of A is gone now: a row handled (the plugin's
        # handled_at, unix ms) from here on was written on the new primary.
        killed_ms = int(time.time() * 1000) + 1
        if behind:
            b.resume()
        keys = enqueue(rs, per_origin - sent, keyed, sent)

        # No primary: S1 keeps running, tries, backs off.
        def no_primary_seen():
            if not s1.alive():
                return Pending(f"S1 exited {s1.proc.returncode}")
            return NO_SERVER.search(s1.log_text()[log_mark:]) or \
                Pending("no such line yet")
        wait_until(no_primary_seen, 30,
                   "S1 logging a reconnect that found no primary",
                   on_timeout=logs)
        if not s1.alive():
            _exited(s1)
        b.promote()
        t_promoted = time.monotonic()

        def first_new():
            v = b.pg.value("SELECT min(handled_at) FROM journal WHERE "
                           "handled_at >= :'t'", t=killed_ms)
            return int(v) if v else Pending("no row yet")
        first_ms = wait_until(first_new, 60,
                              "a journal row written on the new primary",
                              interval=0.02, on_timeout=logs)

        # -- every document confirmed at its origin ------------------------
        last_seen, last_progress = None, time.monotonic()
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            conf = confirmed(rs)
            now = time.monotonic()
            if not s1.alive():
                _exited(s1)
            if conf >= total:
                break
            if conf != last_seen:
                last_seen, last_progress = conf, now
            if now > deadline or now - last_progress > STUCK_AFTER:
                raise HarnessError(
                    f"{conf} of {total} documents confirmed "
                    f"({'deadline' if now > deadline else 'no progress'}); "
                    f"journal {b.pg.int('SELECT count(*) FROM journal')}"
                    f"\n{logs()}")
            time.sleep(0.1)
        t_done = time.monotonic()
        carried = b.pg.int("SELECT count(*) FROM journal WHERE handled_at < "
                           ":'t'", t=killed_ms)

        # -- what the new primary holds ------------------------------------
        # Every document is at 100 at its origin, so S1 committed each on
        # the primary of the time; each must be in the journal once (a lost
        # commit would be missing, a second application a second row: the
        # journal has no unique key).
        rows, distinct = (int(v) for v in b.pg.query(
            "SELECT count(*), count(DISTINCT (origin, dest, seq)) FROM "
            "journal")[0])
        ours = b.pg.int(
            "SELECT count(DISTINCT (origin, seq)) FROM journal WHERE dest = "
            "'S1' AND origin IN ('R1', 'R2', 'R3', 'R4') AND seq BETWEEN 1 "
            "AND :'n'", n=per_origin)
        lost = total - ours
        duplicates = rows - distinct
        print(f"{label}: documents={total} killed_at={killed_at} "
              f"({killed_at / total:.0%}) carried_over={carried} "
              f"promoted_after={since(t_promoted, t_kill)} "
              f"takeover={(first_ms - kill_ms) / 1000:.2f}s "
              f"confirmed_after={since(t_done, t_kill)} lost={lost} "
              f"duplicates={duplicates} total={since(t_done, t0)}",
              flush=True)
        assert duplicates == 0, \
            f"journal rows {rows}, distinct {distinct}: {duplicates} " \
            "documents took effect twice"
        if behind != "async":
            assert lost == 0 and rows == total, \
                f"journal rows {rows}, distinct {distinct}, lost {lost}"
            assert carried >= killed_at, \
                f"{killed_at} journal rows were visible on the primary " \
                f"before the kill, only {carried} of them reached the " \
                "standby"
            check_exactly_once(s1, ORIGINS, per_origin, keys=keys)
        for r in rs:
            assert r.all_confirmed("S1", per_origin), \
                f"{r.id}: {r.outbound_status_counts('S1')}"
        bad = b.pg.query("SELECT status, count(*) FROM tb_0033 WHERE status "
                         "<> 2 GROUP BY status")
        assert not bad, f"redo entries not done: {bad}"
        assert s1.starts == 1, "S1 was started again"

        for n in rs + [s1]:
            n.stop(timeout=30)
        ok = True
        return {"lost": lost, "duplicates": duplicates}
    finally:
        if not ok:
            print(a.log_tail() + "\n" + b.log_tail(), flush=True)
        stop_clusters()
        if not base.startswith(t.dir + os.sep):
            shutil.rmtree(base, ignore_errors=True)


@test(timeout=240)
def failover(t):
    """1: 20,000 documents, the primary killed at 35 %."""
    failover_run(t, "FAILOVER", 5000)


@test(timeout=180)
def standby_behind(t):
    """2: the synchronous standby paused first: nothing is acknowledged
    that it lacks, so nothing is lost."""
    failover_run(t, "FAILOVER_BEHIND", 1500, behind="sync")


@test(timeout=180)
def async_standby_loses(t):
    """3: the negative control: an asynchronous standby, paused; the
    primary acknowledges what it never gets: documents lost."""
    res = failover_run(t, "FAILOVER_ASYNC", 1500, behind="async")
    assert res["lost"] >= BEHIND_LOSS, \
        f"an asynchronous standby paused behind {BEHIND_LOSS} confirmed " \
        f"documents, yet only {res['lost']} were lost: the test does not " \
        "see what it is meant to"


def _exited(node):
    raise HarnessError(f"{node.id} exited with {node.proc.returncode}; "
                       f"log:\n{node.log_tail()}")


if __name__ == "__main__":
    run()
