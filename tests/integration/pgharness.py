# SPDX-License-Identifier: MIT
"""pgharness — the PostgreSQL side of SEMQ's integration tests (SPEC §11).

Several `semqd` instances with one node id share one PostgreSQL database
(issue #9). This module gives the integration tests what semqtest.py gives
them for SQLite nodes:

  pg_url_or_skip()      the cluster to use ($SEMQ_TEST_PG_URL), or a loud
                        message and exit 77 (ctest: skipped) when it is unset
  Pg(url)               runs SQL through `psql` (Python's standard library
                        has no PostgreSQL client): rows as tuples of text
  Pg.create_database()  a fresh, empty database per scenario (and
                        drop_database() when the scenario passed)
  PgSession             one open psql session, e.g. to hold a lock for a while
  PgNode                a semqtest.Node whose store is that database:
                        `db = postgresql://...`, `[node] instance = NAME`,
                        its journal read from PostgreSQL
  tag_journal()         makes the journal table record which instance wrote
                        each row (column handled_by), for the spread figures
  PgCluster(dir)        a cluster of the test's own (tools/pgcluster.sh):
                        a primary, or its synchronous standby; kill -9,
                        pause, promote (test_failover.py);
                        pgcluster_url() names several, pg_server_or_skip()
                        exits 77 without the server programs

SEMQ_TEST_PG_URL names a database of a running cluster (tools/test.sh starts
a throw-away one with tools/pgcluster.sh) on which the role may CREATE
DATABASE. Every database a test creates is named semqit_PID_NAME and dropped
when the test passes (kept, like the test directory, when it fails).

DESIGN: every instance's `db` URL carries application_name=ID-INSTANCE
(node/db_pg.c lets the URL's parameters override its default 'semqd'), so
its session is named after the instance in pg_stat_activity and in
current_setting('application_name'). tag_journal() adds a column whose
default is current_setting('application_name'): each journal row then says
which instance's transaction wrote it, at the cost of evaluating one default
per row; the plugin's own columns and rows are untouched, so "one journal row
per message" is still the exactly-once check. All SQL here is written by the
tests; values reach psql as psql variables (:'name'), never formatted into
the text (database names, which SQL cannot take as parameters, are checked
against [a-z_][a-z0-9_]* first).
"""

import atexit
import glob
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

from semqtest import HarnessError, Node, _addr_port, _listening, wait_until

__all__ = [
    "PG_URL_ENV", "pg_url_or_skip", "Pg", "PgSession", "PgNode",
    "tag_journal", "instance_of", "db_name_for",
]

PG_URL_ENV = "SEMQ_TEST_PG_URL"
PSQL_TIMEOUT = 60.0  # one psql call
_FS, _RS, _NULL = "\x1f", "\x1e", "\x1dNULL"  # field, record, NULL marker
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def pg_url_or_skip(what):
    """$SEMQ_TEST_PG_URL; when it is unset, says loudly that `what` did not
    run and exits 77 (ctest's SKIP_RETURN_CODE for these tests)."""
    url = os.environ.get(PG_URL_ENV, "").strip()
    if url:
        if not url.startswith(("postgresql://", "postgres://")):
            sys.exit(f"{PG_URL_ENV}={url!r}: not a postgresql:// URL")
        return url
    bar = "!" * 72
    print(f"{bar}\n!! SKIPPED: {what}\n!! {PG_URL_ENV} is not set, so no "
          f"PostgreSQL server is known.\n!! tools/test.sh starts one "
          f"(tools/pgcluster.sh start DIR) and sets it;\n!! by hand: "
          f"export {PG_URL_ENV}=$(tools/pgcluster.sh start /tmp/semq-pg)"
          f"\n{bar}", flush=True)
    sys.exit(77)


def db_name_for(tag):
    """A database name for this test process: semqit_PID_TAG."""
    name = f"semqit_{os.getpid()}_{tag}".lower()
    if not _NAME.match(name):
        raise HarnessError(f"db_name_for: {tag!r} makes the bad name "
                           f"{name!r}")
    return name


def _with_dbname(url, name):
    """url with its database (the path) replaced by name."""
    u = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + name,
                                    u.query, u.fragment))


def _with_param(url, key, value):
    """url with the query parameter key=value added."""
    u = urllib.parse.urlsplit(url)
    q = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
    q = [(k, v) for k, v in q if k != key] + [(key, value)]
    query = urllib.parse.urlencode(q, safe="/",
                                   quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, query,
                                    u.fragment))


def _dbname_of(url):
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))


def _redact(url):
    """url without a password (for messages)."""
    u = urllib.parse.urlsplit(url)
    if u.password is None:
        return url
    netloc = u.netloc.replace(":" + u.password + "@", ":***@", 1)
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query,
                                    u.fragment))


def _psql_env():
    env = dict(os.environ)
    env.setdefault("PGCONNECT_TIMEOUT", "10")
    env["PGAPPNAME"] = "semqtest"
    env.pop("PGOPTIONS", None)
    return env


class Pg:
    """One database, reached with `psql URL`. Each call is its own session
    (autocommit), so it sees what other sessions committed."""

    def __init__(self, url):
        self.url = url
        self.name = _dbname_of(url)

    def __repr__(self):
        return f"Pg({_redact(self.url)!r})"

    def query(self, sql, **params):
        """Runs sql (one or more statements; params as psql variables:
        :'name' is the quoted literal) and returns the rows of the last
        one as tuples of str (None for NULL)."""
        args = ["psql", "-X", "-q", "-A", "-t", "-F", _FS, "-R", _RS,
                "-P", f"null={_NULL}", "-v", "ON_ERROR_STOP=1"]
        for k, v in params.items():
            if not re.match(r"^[a-z_][a-z0-9_]*$", k):
                raise HarnessError(f"Pg.query: bad variable name {k!r}")
            args += ["-v", f"{k}={'' if v is None else v}"]
        args += [self.url, "-f", "-"]
        try:
            r = subprocess.run(args, input=sql.rstrip().rstrip(";") + ";\n",
                               capture_output=True, text=True,
                               timeout=PSQL_TIMEOUT, env=_psql_env())
        except subprocess.TimeoutExpired:
            raise HarnessError(f"{self}: psql did not finish within "
                               f"{PSQL_TIMEOUT:g} s: {sql.strip()[:200]}")
        if r.returncode != 0:
            raise HarnessError(f"{self}: psql exited {r.returncode}: "
                               f"{r.stderr.strip()}\n  SQL: "
                               f"{sql.strip()[:400]}")
        out = r.stdout
        if out == "":
            return []
        if out.endswith("\n"):
            out = out[:-1]
        return [tuple(None if f == _NULL else f for f in rec.split(_FS))
                for rec in out.split(_RS)]

    def value(self, sql, **params):
        """The first column of the first row (None when there is none)."""
        rows = self.query(sql, **params)
        return rows[0][0] if rows else None

    def int(self, sql, **params):
        v = self.value(sql, **params)
        return 0 if v is None else int(v)

    def has_table(self, name):
        return self.value("SELECT to_regclass(:'t') IS NOT NULL",
                          t=name) == "t"

    def create_database(self, name):
        """CREATE DATABASE name on this server (dropped first if a run
        that died left it); returns a Pg for it."""
        if not _NAME.match(name):
            raise HarnessError(f"create_database: bad name {name!r}")
        self.query(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.query(f"CREATE DATABASE {name}")
        return Pg(_with_dbname(self.url, name))

    def drop_database(self, name):
        if not _NAME.match(name):
            raise HarnessError(f"drop_database: bad name {name!r}")
        # WITH (FORCE) cannot end an autovacuum worker in that database
        # (it is not semq's process): wait until it has finished, at most
        # 30 s, instead of failing the test over its cleanup.
        deadline = time.monotonic() + 30
        while True:
            try:
                self.query(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                return
            except HarnessError as e:
                if "pg_signal_backend" not in str(e) or \
                        time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def backends(self):
        """[(pid, application_name, state, wait_event_type, xact open,
        query)] of the other sessions on this database."""
        rows = self.query(
            "SELECT pid, application_name, state, wait_event_type, "
            "xact_start IS NOT NULL, left(query, 200) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> "
            "pg_backend_pid() AND backend_type = 'client backend'")
        return [(int(p), a, s, w, x == "t", q) for p, a, s, w, x, q in rows]


class PgSession:
    """One psql session kept open (stdin a pipe), for what must span
    several steps: BEGIN; LOCK ...; (the test does things) ROLLBACK.
    run() sends SQL and waits until psql has executed it."""

    def __init__(self, pg):
        self.pg = pg
        self.proc = subprocess.Popen(
            ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             pg.url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env=_psql_env())
        self._n = 0

    def run(self, sql, timeout=30.0):
        """Executes sql in the session; returns psql's output lines."""
        if self.proc.poll() is not None:
            raise HarnessError(f"PgSession: psql exited "
                               f"{self.proc.returncode}")
        self._n += 1
        mark = f"semqtest-done-{self._n}"
        self.proc.stdin.write(sql.rstrip().rstrip(";") + ";\n"
                              f"\\echo {mark}\n")
        self.proc.stdin.flush()
        lines = []
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise HarnessError(f"PgSession: {sql.strip()[:200]!r} "
                                       f"not done within {timeout:g} s; "
                                       f"output {lines}")
                line = self.proc.stdout.readline()
                if not line:
                    raise HarnessError(f"PgSession: psql ended during "
                                       f"{sql.strip()[:200]!r}: {lines}")
                line = line.rstrip("\n")
                if line == mark:
                    break
                lines.append(line)
        finally:
            sel.close()
        errors = [ln for ln in lines if "ERROR" in ln or "FATAL" in ln]
        if errors:
            raise HarnessError(f"PgSession: {sql.strip()[:200]!r}: "
                               f"{errors}")
        return lines

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("\\q\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stdout:
            self.proc.stdout.close()


class PgNode(Node):
    """A semqd instance whose store is the PostgreSQL database `pg`
    (node.ini `db = URL&application_name=ID-INSTANCE`), named `instance`
    (node.ini `[node] instance =`; None: no instance key, the node's only
    one). Its files (node.ini, semqd.log) are in BASE/ID-INSTANCE/ID. The
    SQLite accessors of Node that read the node's database read PostgreSQL
    here; enqueue() is not offered (a receiver instance does not
    originate)."""

    def __init__(self, id, instance, base_dir, certs, pg, **kw):
        opts = dict(kw.pop("node_options", None) or {})
        if instance is not None:
            opts["instance"] = instance
        self.instance = instance
        self.app_name = f"{id}-{instance}" if instance else id
        super().__init__(id, os.path.join(base_dir, self.app_name), certs,
                         node_options=opts, **kw)
        self.pg = pg
        self.db = _with_param(pg.url, "application_name", self.app_name)

    def __repr__(self):
        state = "running" if self.alive() else "stopped"
        return f"PgNode({self.app_name!r}, {state}, {self.dir!r})"

    def log_tail(self, n=40):
        return f"[{self.app_name} {self.log}]\n" + \
            super().log_tail(n).split("\n", 1)[-1]

    def wait_ready(self, timeout=30.0):
        """Running, migrated (tb_0031 exists), the journal plugin's table
        created (when it is loaded), listening where configured, its start
        line written."""
        def ready():
            if not self.alive():
                raise HarnessError(
                    f"{self.app_name}: semqd exited with "
                    f"{self.proc.returncode} during start; log:\n"
                    f"{self.log_tail()}")
            for a in (self.listen, self.admin):
                if a and not _listening(_addr_port(a)):
                    return False
            if not self.pg.has_table("tb_0031"):
                return False
            if self.journal and not self.pg.has_table("journal"):
                return False
            return self.started_line()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except HarnessError as e:
                if not self.alive():
                    raise
                last = e
            else:
                last = None
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"{self.app_name}: not ready within {timeout:g} s "
                    f"({self.pg}, listen {self.listen}, admin "
                    f"{self.admin}){'; ' + str(last) if last else ''}; "
                    f"log:\n{self.log_tail()}")
            time.sleep(0.1)

    def connect_db(self, readonly=True):
        raise HarnessError(f"{self.app_name}: its store is PostgreSQL "
                           f"({self.pg}); use .pg or .sql()")

    def sql(self, query, params=()):
        """One read query with SQLite-style ? parameters; rows as tuples of
        ints where a value is an integer, else text."""
        params = list(params)
        n = query.count("?")
        if n != len(params):
            raise HarnessError(f"PgNode.sql: {n} ? for {len(params)} "
                               f"parameters")
        parts = query.split("?")
        text = parts[0]
        for i, p in enumerate(parts[1:]):
            text += f":'p{i + 1}'" + p
        rows = self.pg.query(text, **{f"p{i + 1}": v
                                      for i, v in enumerate(params)})
        return [tuple(_num(v) for v in r) for r in rows]

    def sql_write(self, query, params=()):
        raise HarnessError(f"{self.app_name}: sql_write on PostgreSQL is "
                           f"not offered; use .pg.query")

    def has_table(self, name):
        return self.pg.has_table(name)

    def enqueue(self, *a, **kw):
        raise HarnessError(f"{self.app_name}: a receiver instance here "
                           f"does not originate")

    def journal_rows(self):
        if not self.pg.has_table("journal"):
            return []
        cols = ("id", "origin", "dest", "seq", "type", "msg_key",
                "payload_len", "handled_at")
        rows = self.pg.query(f"SELECT {', '.join(cols)} FROM journal "
                             "ORDER BY id")
        out = []
        for r in rows:
            d = dict(zip(cols, r))
            for c in ("id", "seq", "type", "payload_len", "handled_at"):
                d[c] = None if d[c] is None else int(d[c])
            out.append(d)
        return out

    def journal_count(self):
        if not self.pg.has_table("journal"):
            return 0
        return self.pg.int("SELECT count(*) FROM journal")


def _num(v):
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        return v


def tag_journal(pg):
    """Adds journal.handled_by (default: the writing session's
    application_name, i.e. the instance; see DESIGN) once the plugin has
    created the table. Call before any message flows."""
    wait_until(lambda: pg.has_table("journal"), 30,
               f"the journal table in {pg}")
    pg.query("ALTER TABLE journal ADD COLUMN IF NOT EXISTS handled_by TEXT "
             "DEFAULT current_setting('application_name')")


def instance_of(app_names, handled_by):
    """The instance label for a handled_by value: itself when it is one of
    app_names, else '?VALUE' (a session that was not an instance)."""
    return handled_by if handled_by in app_names else f"?{handled_by}"


# ---- clusters of the test's own: a primary and its synchronous standby ------
#
# test_failover.py (issue 18) needs more than $SEMQ_TEST_PG_URL: two servers
# it may kill and promote. It starts them itself with tools/pgcluster.sh
# (start, standby, url, kill, promote, stop) in its own directory.

PGCLUSTER = os.path.join(os.environ.get("SEMQ_SOURCE_DIR") or
                         os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))),
                         "tools", "pgcluster.sh")
_SERVER_PROGRAMS = ("initdb", "pg_ctl", "pg_basebackup", "postgres")
_LIVE_CLUSTERS = []


def _pg_bindir():
    """Where tools/pgcluster.sh finds the server programs: $SEMQ_PG_BINDIR,
    else the newest /usr/lib/postgresql/*/bin, else PATH; None when they
    are not all there."""
    cands = []
    if os.environ.get("SEMQ_PG_BINDIR"):
        cands.append(os.environ["SEMQ_PG_BINDIR"])
    else:
        def version(d):
            v = d.split("/")[-2]
            return int(v) if v.isdigit() else 0
        cands += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version,
                        reverse=True)[:1]
        initdb = shutil.which("initdb")
        if initdb:
            cands.append(os.path.dirname(initdb))
    for d in cands:
        if all(os.access(os.path.join(d, p), os.X_OK)
               for p in _SERVER_PROGRAMS):
            return d
    return None


def pg_server_or_skip(what):
    """Returns when the PostgreSQL server programs tools/pgcluster.sh needs
    (initdb, pg_ctl, pg_basebackup, postgres) and psql are installed; else
    says loudly that `what` did not run and exits 77 (ctest: skipped)."""
    d = _pg_bindir()
    if d and (shutil.which("psql") or
              os.access(os.path.join(d, "psql"), os.X_OK)):
        return d
    bar = "!" * 72
    print(f"{bar}\n!! SKIPPED: {what}\n!! the PostgreSQL server programs "
          f"({', '.join(_SERVER_PROGRAMS)}) or psql\n!! are not installed "
          f"(looked in $SEMQ_PG_BINDIR, /usr/lib/postgresql/*/bin, PATH):"
          f"\n!! apt-get install postgresql\n{bar}", flush=True)
    sys.exit(77)


def pgcluster(*args, timeout=120.0):
    """Runs tools/pgcluster.sh ARGS; returns what it printed (stripped)."""
    cmd = ["bash", PGCLUSTER] + [str(a) for a in args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{' '.join(cmd)}: not done within {timeout:g} s")
    if r.returncode != 0:
        raise HarnessError(f"{' '.join(cmd)} exited {r.returncode}: "
                           f"{r.stderr.strip()}")
    return r.stdout.strip()


def cluster_base(test_dir, max_len=80):
    """A directory for the test's clusters: TEST_DIR/pg when its path has at
    most max_len characters (the socket path must fit, and a URL naming
    two clusters must fit on one node.ini line: inih takes 197 characters)
    and the server may reach it (as root it runs as `postgres`: TEST_DIR is
    then opened to others for traversal only, 0711), else a new directory
    under /tmp, which the caller removes. Created; returns its path."""
    base = os.path.join(os.path.abspath(test_dir), "pg")
    if len(base) <= max_len and re.match(r"^[A-Za-z0-9/._+-]+$", base):
        if os.geteuid() == 0:
            os.chmod(test_dir, 0o711)
        os.makedirs(base, exist_ok=True)
        os.chmod(base, 0o711)
        if os.geteuid() != 0 or subprocess.run(
                ["runuser", "-u", "postgres", "--", "test", "-x", base],
                capture_output=True).returncode == 0:
            return base
    base = tempfile.mkdtemp(prefix="semq-pg-", dir="/tmp")
    os.chmod(base, 0o711)
    return base


class PgCluster:
    """One throw-away cluster of tools/pgcluster.sh in `dir`: start() a
    primary, or start_standby(primary) its synchronous standby; kill(),
    promote(), pause(), resume(), stop(). .url is its own URL (database
    semq) and .pg a Pg for it. stop() removes the directory;
    stop_clusters() stops every cluster still there (the test's finally,
    and at exit)."""

    def __init__(self, dir):
        self.dir = os.path.abspath(dir)
        self.url = None
        self.pg = None

    def __repr__(self):
        return f"PgCluster({self.dir!r})"

    def _started(self, url):
        self.url = url
        self.pg = Pg(url)
        _LIVE_CLUSTERS.append(self)
        return self

    def start(self):
        return self._started(pgcluster("start", self.dir))

    def start_standby(self, primary):
        """A streaming standby of primary, which then waits for it at every
        commit (synchronous_standby_names, synchronous_commit = on)."""
        return self._started(pgcluster("standby", self.dir, primary.dir))

    def kill(self):
        """kill -9 of every process of the server at once."""
        pgcluster("kill", self.dir)

    def promote(self):
        """The standby becomes a primary; returns once it takes writes."""
        pgcluster("promote", self.dir)

    def pause(self):
        """SIGSTOP of every process of the server (a standby falls
        behind; its primary's commits wait for it if it is synchronous)."""
        pgcluster("pause", self.dir)

    def resume(self):
        pgcluster("resume", self.dir)

    def caught_up(self):
        """A standby has replayed all the WAL it received (so it shows every
        commit its primary was told of)."""
        return self.pg.value("SELECT pg_last_wal_receive_lsn() = "
                             "pg_last_wal_replay_lsn()") == "t"

    def log_tail(self, n=30):
        return f"[postgres {self.dir}]\n" + \
            _tail_file(os.path.join(self.dir, "server.log"), n)

    def stop(self):
        if self in _LIVE_CLUSTERS:
            _LIVE_CLUSTERS.remove(self)
        if os.path.isdir(self.dir):
            pgcluster("stop", self.dir)


def pgcluster_url(*clusters):
    """The URL of database semq on whichever of the clusters takes writes
    (tools/pgcluster.sh url: host=DIR1,DIR2&port=...&
    target_session_attrs=read-write)."""
    return pgcluster("url", *[c.dir for c in clusters])


def stop_clusters():
    """Stops every cluster started here and not stopped yet (errors are
    printed, not raised: this runs when a test already failed)."""
    for c in list(_LIVE_CLUSTERS):
        try:
            c.stop()
        except Exception as e:  # noqa: BLE001 - cleaning up
            print(f"pgharness: stopping {c}: {e}", file=sys.stderr)


def _tail_file(path, n):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"({e})"


atexit.register(stop_clusters)

__all__ += ["PGCLUSTER", "pg_server_or_skip", "pgcluster", "cluster_base",
            "PgCluster", "pgcluster_url", "stop_clusters"]
