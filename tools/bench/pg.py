# SPDX-License-Identifier: MIT
"""tools/bench/pg.py — the PostgreSQL side of tools/semq-bench (--db
postgresql): a throw-away cluster, the pgbench ceiling, the networks whose
S (and with --pg-nodes all, R and P too) keep their store in it, and the
server's CPU.

  Cluster(work_dir)     tools/pgcluster.sh start in the benchmark's temporary
                        directory; createdb(name) gives a fresh database per
                        node and network; stop() on every exit path (the
                        caller's finally; pgharness stops it at exit too)
  ceiling()             pgbench on that cluster: 4 clients, transactions of
                        100 rows of --size bytes into a table like the
                        SQLite ceiling's, as one INSERT of 100 rows (the
                        ceiling the ratios use) and as 100 single-row
                        INSERTs between BEGIN and COMMIT (one round trip per
                        row, as the issue measured it)
  PgNetwork             R -> S or R -> P -> S with S as one or several
                        instances (`[node] instance = a, b, ...`) on one
                        database; the instances dial (R in rs, P in rps
                        listens), because a [peer] has one connect address
                        and a sender spreads its streams over the instances
                        that connected to it (docs/CONFIG.md, instance)
  BenchPgNode           a pgharness.PgNode whose sql() and enqueue() go over
                        one kept psycopg2 connection

DESIGN
  - The benchmark polls S's journal every 50 ms while it waits and samples
    it every 0.5 s for the progress line; a psql process per poll would cost
    milliseconds of CPU each on the machine being measured, so the journal
    is read (and, with R on PostgreSQL, tb_0031 written) over one psycopg2
    connection per node, kept for the network's life. psycopg2 is Debian's
    python3-psycopg2 (tools/deps.sh); the SQLite benchmark does not
    import this module.
  - The pgbench ceiling is one INSERT of 100 rows per transaction, every
    row's payload a bind parameter (-M prepared, -D p=...), so 100 payloads
    cross the socket per transaction as they do into S: that is what the
    server must do per committed row (parse, WAL, one fsync per commit),
    without the one round trip per statement that SEMQ's store is free to
    avoid (pipeline mode, multi-row statements). The 100-statement variant
    is printed beside it for comparison with the issue's 32,346 rows/s.
  - The server's CPU is the utime + stime of the postmaster and all its
    children (backends, WAL writer, checkpointer) between two points: the
    backends of the nodes' sessions live for the whole run.
"""

import os
import re
import subprocess
import time

import pgharness
from pgharness import Pg, PgCluster, PgNode, cluster_base, pgcluster
import semqtest

CEILING_CLIENTS = 4
CEILING_ROWS = 100  # rows per transaction
NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

try:
    import psycopg2
except ImportError:  # reported by need_psycopg2() as a usage error
    psycopg2 = None


def need_psycopg2():
    """None when psycopg2 imports, else the reason (for a usage error)."""
    if psycopg2 is not None:
        return None
    return ("needs psycopg2 (tools/deps.sh installs Debian's "
            "python3-psycopg2; if another python3 comes first in PATH, run "
            "the benchmark with /usr/bin/python3)")


def server_programs():
    """None when tools/pgcluster.sh finds the server programs, else why."""
    if pgharness._pg_bindir() is None:
        return ("needs the PostgreSQL server programs (initdb, pg_ctl, "
                "postgres): apt-get install postgresql")
    return None


# ---- the cluster ------------------------------------------------------------

class Cluster:
    """A cluster of tools/pgcluster.sh under work_dir (or /tmp when that path
    is too long for the socket), started by start(), removed by stop()."""

    def __init__(self, work_dir):
        self.base = cluster_base(work_dir)
        self.c = PgCluster(os.path.join(self.base, "cluster"))
        self.url = None

    def start(self):
        self.c.start()
        self.url = self.c.url
        self.su = self.superuser(self.c.pg)
        return self

    def createdb(self, name):
        if not NAME.match(name):
            raise ValueError(f"createdb: bad database name {name!r}")
        return Pg(pgcluster("createdb", self.c.dir, name))

    def superuser(self, pg):
        """pg as the superuser postgres (pgcluster.sh maps the system user
        who started the cluster to it), for CHECKPOINT and the WAL
        position."""
        return Pg(pg.url.replace("://semq@", "://postgres@", 1))

    def version(self):
        return self.c.pg.value("SHOW server_version")

    def settings(self):
        return dict(self.c.pg.query(
            "SELECT name, current_setting(name) FROM pg_settings WHERE "
            "name IN "
            "('fsync', 'synchronous_commit', 'shared_buffers', "
            "'wal_level', 'max_connections', 'full_page_writes') "
            "ORDER BY name"))

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.c.dir, "data", "postmaster.pid")) \
                    as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def cpu_s(self):
        """utime + stime, seconds, of the postmaster and its children now
        (the children it reaped, pgbench's backends, in its cutime and
        cstime), and how many processes that was."""
        pm = self.postmaster_pid()
        if pm is None:
            return 0.0, 0
        tck = os.sysconf("SC_CLK_TCK")
        total, n = 0.0, 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            f = s[s.rindex(")") + 2:].split()
            if int(pid) == pm or int(f[1]) == pm:
                total += (int(f[11]) + int(f[12])) / tck
                if int(pid) == pm:
                    total += (int(f[13]) + int(f[14])) / tck
                n += 1
        return total, n

    def stop(self):
        try:
            self.c.stop()
        finally:
            if os.path.isdir(self.base) and not os.listdir(self.base):
                os.rmdir(self.base)


    def wal_and_xids(self):
        """(WAL position in bytes, next transaction id): their differences
        are the WAL bytes written and the transaction ids assigned in
        between, exactly (the statistics views lag by up to seconds): one
        per writing transaction and one per writing subtransaction
        (SAVEPOINT). Reading them assigns none."""
        lsn, xmax = self.su.query(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, "
            "pg_snapshot_xmax(pg_current_snapshot())")[0]
        return int(lsn), int(xmax)

    def tuples(self):
        """[inserted, updated, deleted, commits] over all databases, from
        pg_stat_database: a session reports them at most once a second
        while busy, so the last second of a run may be missing."""
        return [int(v or 0) for v in self.su.query(
            "SELECT sum(tup_inserted), sum(tup_updated), sum(tup_deleted), "
            "sum(xact_commit) FROM pg_stat_database")[0]]


class ServerUsage:
    """The cluster's CPU, WAL bytes and write transactions between
    construction and result(count), per `count` rows or messages."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.wal0, self.xid0 = cluster.wal_and_xids()
        self.tup0 = cluster.tuples()
        self.cpu0, _ = cluster.cpu_s()

    def result(self, count):
        cpu1, n = self.cluster.cpu_s()
        wal1, xid1 = self.cluster.wal_and_xids()
        tup = [b - a for a, b in zip(self.tup0, self.cluster.tuples())]
        d = max(0.0, cpu1 - self.cpu0)
        return {"cpu_s": round(d, 3),
                "cpu_s_per_10k": round(d * 10000 / count, 3),
                "wal_bytes_per_msg": round((wal1 - self.wal0) / count, 1),
                "xids_per_10k": round((xid1 - self.xid0) * 10000 / count,
                                      1),
                "approx_per_msg": {
                    k: round(v / count, 2) for k, v in zip(
                        ("inserted", "updated", "deleted", "commits"), tup)},
                "processes": n}


# ---- the pgbench ceiling ----------------------------------------------------

def _pgbench_script(path, one_statement):
    vals = ", ".join(["(0, :p)"] * CEILING_ROWS)
    with open(path, "w") as f:
        f.write("-- semq-bench: the PostgreSQL ceiling, one transaction of "
                f"{CEILING_ROWS} rows\n")
        if one_statement:
            f.write(f"INSERT INTO t (created_at, payload) VALUES {vals};\n")
        else:
            f.write("BEGIN;\n")
            for _ in range(CEILING_ROWS):
                f.write("INSERT INTO t (created_at, payload) VALUES "
                        "(0, :p);\n")
            f.write("COMMIT;\n")


def _tps(out):
    m = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)",
                  out, re.M)
    n = re.search(r"^number of transactions actually processed: (\d+)",
                  out, re.M)
    if not m or not n:
        raise RuntimeError("pgbench printed no tps line:\n" + out[-2000:])
    return float(m.group(1)), int(n.group(1))


def ceiling(cluster, work_dir, size, seconds, progress):
    """{"one_insert": {...}, "statements": {...}}: rows/s of pgbench with 4
    clients in transactions of 100 rows of size bytes (see DESIGN)."""
    pg = cluster.createdb("ceiling")
    su = cluster.superuser(pg)
    payload = "\\x" + os.urandom(size).hex()
    out = {}
    for key, one in (("one_insert", True), ("statements", False)):
        pg.query("DROP TABLE IF EXISTS t; CREATE TABLE t (id BIGINT "
                 "GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, created_at "
                 "BIGINT NOT NULL, payload BYTEA NOT NULL)")
        su.query("CHECKPOINT")  # each variant starts from a clean WAL
        script = os.path.join(work_dir, f"pgbench-{key}.sql")
        _pgbench_script(script, one)
        label = ("ceiling pgbench, one INSERT of 100 rows" if one else
                 "ceiling pgbench, 100 INSERTs per transaction")
        progress.update(label, 0, int(seconds), 0.0, unit="s")
        cmd = ["pgbench", "-n", "-M", "prepared", "-c",
               str(CEILING_CLIENTS), "-j", "2", "-T", str(int(seconds)),
               "-D", f"p={payload}", "-f", script, pg.url]
        server = ServerUsage(cluster)
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=seconds + 120,
                           env=dict(os.environ, PGAPPNAME="semq-bench"))
        dt = time.monotonic() - t0
        if r.returncode != 0:
            raise RuntimeError(f"pgbench exited {r.returncode}: "
                               f"{r.stderr.strip()[-1000:]}")
        tps, txns = _tps(r.stdout)
        rows = int(pg.value("SELECT count(*) FROM t"))
        if rows != txns * CEILING_ROWS:
            raise RuntimeError(f"pgbench: {txns} transactions but {rows} "
                               f"rows in t (expected {txns * CEILING_ROWS})")
        out[key] = {"rows": rows, "seconds": round(dt, 3),
                    "server": server.result(max(1, rows)),
                    "rows_per_s": round(tps * CEILING_ROWS, 1),
                    "commits_per_s": round(tps, 1),
                    "clients": CEILING_CLIENTS,
                    "rows_per_transaction": CEILING_ROWS,
                    "command": " ".join(cmd[:-5] + ["-D", "p=<1 KB hex>",
                                                    "-f", script, "URL"])}
    pg.query("DROP TABLE t")
    progress.done()
    return out


# ---- nodes and networks -----------------------------------------------------

def _pyformat(query):
    """A query with SQLite's ? placeholders for psycopg2 (%s)."""
    if "%" in query:
        raise ValueError(f"query with %: {query!r}")
    return query.replace("?", "%s")


class BenchPgNode(PgNode):
    """A PgNode (pgharness) read and written over one kept psycopg2
    connection (autocommit: every read sees what others committed)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._conn = None

    def conn(self):
        if self._conn is None or self._conn.closed:
            self._conn = psycopg2.connect(
                self.pg.url, application_name="semq-bench")
            self._conn.autocommit = True
        return self._conn

    def close_conn(self):
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None

    def sql(self, query, params=()):
        with self.conn().cursor() as cur:
            cur.execute(_pyformat(query), tuple(params))
            return cur.fetchall()

    def journal_max_id(self):
        """max(journal.id), 0 before the plugin made the table."""
        if not self.pg_has_table("journal"):
            return 0
        return self.sql("SELECT max(id) FROM journal")[0][0] or 0

    def pg_has_table(self, name):
        return self.sql("SELECT to_regclass(?) IS NOT NULL",
                        (name,))[0][0]

    def enqueue(self, dest, type=1, key=None, payload=b"", deliver_at=None,
                count=1):
        """The application contract on PostgreSQL: INSERT INTO tb_0031 in
        one transaction (the warm-up's message)."""
        c = psycopg2.connect(self.pg.url, application_name="semq-bench")
        try:
            with c, c.cursor() as cur:
                for _ in range(count):
                    cur.execute("INSERT INTO tb_0031 (dest, type, msg_key, "
                                "payload, deliver_at) VALUES (%s, %s, %s, "
                                "%s, %s)", (dest, type, key,
                                            psycopg2.Binary(payload),
                                            deliver_at))
        finally:
            c.close()

    def stop(self, *a, **kw):
        self.close_conn()
        return super().stop(*a, **kw)


class App:
    """The application writing R's tb_0031 in PostgreSQL: one connection,
    one transaction per call of insert(rows), the rows in one multi-row
    INSERT (psycopg2's execute_values, 1000 rows per statement)."""

    INS = ("INSERT INTO tb_0031 (dest, type, msg_key, payload, created_at) "
           "VALUES %s")

    def __init__(self, node):
        from psycopg2 import extras
        self.extras = extras
        self.c = psycopg2.connect(node.pg.url, application_name="semq-bench")

    def insert(self, rows):
        with self.c, self.c.cursor() as cur:
            self.extras.execute_values(
                cur, self.INS,
                [(d, t, k, psycopg2.Binary(p), c) for d, t, k, p, c in rows],
                page_size=1000)

    def close(self):
        self.c.close()


class PgNetwork:
    """R -> S or R -> P -> S in base_dir (not started) with S as `instances`
    semqd instances a, b, ... on one fresh database of the cluster, and with
    pg_all R and P on databases of their own too. The attributes are those
    of semq-bench's Network: topo, r, p, s (instance a: S's id, its journal)
    and nodes (every process, each instance)."""

    def __init__(self, topo, tag, base_dir, certs, node_options, cluster,
                 origin_ids=("R",), instances=1, pg_all=False):
        self.topo = topo
        self.cluster = cluster
        opts = dict({"synchronous": "full"}, **node_options)

        def db(node):
            return cluster.createdb(f"{topo}_{tag}_i{instances}_{node}"
                                    .lower())

        def origin_or_relay(nid, **kw):
            if pg_all:
                return BenchPgNode(nid, None, base_dir, certs, db(nid),
                                   journal=False, admin=True,
                                   node_options=opts, **kw)
            return semqtest.Node(nid, base_dir, certs, journal=False,
                                 admin=True, node_options=opts, **kw)
        s_pg = db("s")
        self.p = None
        if topo == "rs":
            self.origins = [origin_or_relay(rid) for rid in origin_ids]
            hubs = self.origins
        else:
            self.origins = [origin_or_relay(rid, listen=False)
                            for rid in origin_ids]
            self.p = origin_or_relay("P", relay=True, store_and_forward=True)
            for r in self.origins:
                r.add_route("default", "P")
                semqtest.connect(r, self.p, dialer_trusts=True)
            hubs = [self.p]
        self.r = self.origins[0]
        self.hubs = hubs
        self.instances = []
        for i in range(instances):
            s = BenchPgNode("S", "abcdefgh"[i], base_dir, certs, s_pg,
                            listen=False, admin=True, node_options=opts,
                            routes={"default": "P"}
                            if topo == "rps" else None)
            for hub in hubs:
                semqtest.connect(s, hub, dialer_trusts=topo == "rps")
            self.instances.append(s)
        self.s = self.instances[0]

    @property
    def nodes(self):
        return [n for n in self.origins + [self.p] + self.instances
                if n is not None]

    def start(self, with_s=True):
        for n in [self.p] + self.origins:
            if n is not None:
                n.start(timeout=30)
        if with_s:
            for s in self.instances:
                s.start(timeout=30)
            self.wait_linked()

    def wait_linked(self):
        """Every instance has a ready link to every hub (each origin in
        rs, P in rps) before the first message, so that the streams are
        spread over all of them from the start."""
        for hub in self.hubs:
            for s in self.instances:
                semqtest.wait_until(
                    lambda: _ready_links(hub, s.instance) > 0, 30,
                    f"{hub.id}: a ready link from S instance {s.instance}",
                    on_timeout=self.log_tails)

    def stop(self):
        rcs = {}
        for n in self.nodes:
            if isinstance(n, BenchPgNode):
                n.close_conn()
            if n.proc is not None:
                rcs[getattr(n, "app_name", n.id)] = n.stop(timeout=60,
                                                          check=False)
        return rcs

    def log_tails(self):
        return "\n".join(n.log_tail(15) for n in self.nodes)


def _ready_links(hub, instance):
    """Ready links from S instance `instance` that hub logged (peer.c: "peer=ID
    ready (accepted, ADDR[, instance NAME], SOFTWARE, wire revision N)", as
    tests/integration/test_pg_instances.py counts them)."""
    pat = re.compile(r"\bpeer=S .*\bready \([^)]*, instance "
                     rf"{re.escape(instance)}[,)]")
    return sum(1 for ln in hub.log_text().splitlines() if pat.search(ln))
