# SPDX-License-Identifier: MIT
"""semqtest — the harness of SEMQ's multi-node integration tests.

Integration tests start real `semqd` processes on loopback, with real TLS
certificates and real SQLite database files, put `faultproxy` between them to
cut, stall or partition links, and then read the nodes' databases to prove
that every message took effect exactly once and in key order (SPEC §6, §13).

Python 3 standard library only. Paths come from the environment that
tests/CMakeLists.txt sets for each test:

  SEMQD, SEMQCTL, JOURNAL_SO, SEMQ_FAULTPROXY   programs and the journal plugin
  SEMQ_SOURCE_DIR, SEMQ_BUILD_DIR               the tree (defaults: derived)
  TMPDIR                                        where test directories go
  SEMQ_KEEP=1                                   keep passing tests' dirs too

A test script:

    from semqtest import test, run, connect, check_exactly_once, wait_until

    @test
    def two_nodes(t):
        certs = t.certs(["A", "B"])
        b = t.node("B", certs)
        a = t.node("A", certs, journal=False)
        connect(a, b)
        b.start(); a.start()
        a.enqueue("B", type=1, key="k", count=100)
        a.wait_all_confirmed("B", 100)
        check_exactly_once(b, ["A"], 100)
        a.stop(); b.stop()

    if __name__ == "__main__":
        run()

DESIGN: every process the harness starts (Node, Proxy) registers itself in a
module list; the runner stops whatever is still running after each test, pass
or fail, so a failing test never leaves a daemon behind, and every wait is
bounded (wait_until, Node.stop, Proxy.command all take timeouts). Children
also get PR_SET_PDEATHSIG so they die with the runner if it is killed.
"""

import ctypes
import http.client
import os
import re
import selectors
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback

__all__ = [
    "HarnessError", "free_port", "make_certs", "make_certs_openssl",
    "make_cert_openssl", "Certs", "Node", "Proxy", "connect", "wait_until",
    "Pending", "log_lines", "wait_log",
    "check_exactly_once", "msg_id", "test", "run", "TestContext",
    "SOURCE_DIR", "BUILD_DIR",
]

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SEMQ_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(HERE))
BUILD_DIR = os.environ.get("SEMQ_BUILD_DIR") or os.path.join(SOURCE_DIR,
                                                             "build")


class HarnessError(AssertionError):
    """A test expectation or a harness operation failed."""


def _program(env, default):
    """The path of a program: $env, else BUILD_DIR/default."""
    return os.environ.get(env) or os.path.join(BUILD_DIR, default)


def _require_exe(path, env):
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise HarnessError(f"{env}: '{path}' is not an executable file "
                           f"(set {env} or SEMQ_BUILD_DIR)")
    return path


def msg_id(origin, dest, seq):
    """The text form of a message id: origin/dest/seq."""
    return f"{origin}/{dest}/{seq}"


# ---- processes: cleanup -----------------------------------------------------

_LIVE = []  # Nodes and Proxies started and not yet stopped


def _pdeathsig():
    """preexec_fn: the child gets SIGKILL when the test runner dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _terminate(proc, timeout):
    """SIGTERM, wait up to timeout; SIGKILL if still running. Returns
    (returncode, killed)."""
    if proc.poll() is not None:
        return proc.returncode, False
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10), True


def _tail(path, n):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(data.splitlines()[-n:])


def stop_all():
    """Stops every Node and Proxy still running (SIGKILL: the test is over)."""
    while _LIVE:
        p = _LIVE.pop()
        try:
            p.kill()
        except Exception as e:  # keep cleaning up the others
            print(f"semqtest: cleanup of {p!r} failed: {e}", file=sys.stderr)


# ---- ports and certificates -------------------------------------------------

_HANDED_OUT = set()


def free_port(host="127.0.0.1"):
    """A TCP port on host that was free just now (bound to port 0 and
    released). Never hands out the same port twice in one run."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise HarnessError("free_port: no new free port after 100 tries")


def dead_port(host="127.0.0.1"):
    """A port nothing answers on while the returned socket stays open: it is
    bound without listen(), so a dial is refused, no other process (a test
    running beside this one) can listen there, and the kernel never picks
    it as the local port of a dial, which on loopback can connect a socket
    to itself. Returns (socket, port); keep the socket as long as needed."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((host, 0))
    return s, s.getsockname()[1]


class Certs:
    """The files of one deployment's certificates in dir: ca.crt, ID.crt,
    ID.key (the layout of tools/mkcerts.sh)."""

    def __init__(self, dir, ca="ca.crt"):
        self.dir = os.path.abspath(dir)
        self.ca = os.path.join(self.dir, ca)

    def crt(self, node_id):
        return os.path.join(self.dir, f"{node_id}.crt")

    def key(self, node_id):
        return os.path.join(self.dir, f"{node_id}.key")

    def __repr__(self):
        return f"Certs({self.dir!r})"


def make_certs(dir, ids, ca_name=None, expired=False):
    """Runs tools/mkcerts.sh DIR ID...: DIR/ca.crt (made once, then reused)
    and DIR/ID.crt, DIR/ID.key per id. ca_name: a second CA
    DIR/NAME-ca.crt signs instead (for wrong-CA tests). Returns Certs."""
    script = os.path.join(SOURCE_DIR, "tools", "mkcerts.sh")
    if not os.path.isfile(script):
        raise HarnessError(f"make_certs: {script} is missing "
                           "(make_certs_openssl() makes the same files)")
    cmd = ["bash", script]
    if ca_name:
        cmd += ["--ca-name", ca_name]
    if expired:
        cmd += ["--expired"]
    cmd += [dir] + list(ids)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise HarnessError(f"make_certs: {' '.join(cmd)} exited "
                           f"{r.returncode}: {r.stderr.strip()}")
    return Certs(dir, f"{ca_name}-ca.crt" if ca_name else "ca.crt")


def _openssl(args, what):
    r = subprocess.run(["openssl"] + args, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise HarnessError(f"openssl {what}: exited {r.returncode}: "
                           f"{r.stderr.strip()}")


def make_cert_openssl(dir, name, cn=None, uri=None, ca="ca"):
    """Signs DIR/NAME.crt + DIR/NAME.key with the CA DIR/CA.crt + .key, using
    the openssl CLI directly. cn defaults to name; uri (e.g. "semq://X")
    adds a URI SAN; pass cn/uri different from name to make a certificate
    whose id does not match the node that presents it."""
    dir = os.path.abspath(dir)
    cn = name if cn is None else cn
    key, crt = os.path.join(dir, f"{name}.key"), os.path.join(dir,
                                                              f"{name}.crt")
    csr, ext = os.path.join(dir, f"{name}.csr"), os.path.join(dir,
                                                              f"{name}.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
        if uri:
            f.write(f"subjectAltName=URI:{uri}\n")
    _openssl(["req", "-new", "-newkey", "ec", "-pkeyopt",
              "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
              "-subj", f"/CN={cn}", "-out", csr], f"{name} key")
    _openssl(["x509", "-req", "-in", csr, "-CA",
              os.path.join(dir, f"{ca}.crt"), "-CAkey",
              os.path.join(dir, f"{ca}.key"), "-set_serial",
              str(int.from_bytes(os.urandom(8), "big") | 1), "-days", "825",
              "-sha256", "-extfile", ext, "-out", crt], f"{name} cert")
    os.unlink(csr)
    os.unlink(ext)
    return crt, key


def make_certs_openssl(dir, ids, ca="ca"):
    """The same files as make_certs(), made with the openssl CLI here (no
    tools/mkcerts.sh needed): DIR/CA.crt (CA created unless it exists) and
    per id DIR/ID.crt (CN=ID, URI SAN semq://ID) and DIR/ID.key."""
    os.makedirs(dir, exist_ok=True)
    ca_crt = os.path.join(dir, f"{ca}.crt")
    ca_key = os.path.join(dir, f"{ca}.key")
    if not (os.path.isfile(ca_crt) and os.path.isfile(ca_key)):
        _openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:P-256", "-nodes", "-keyout", ca_key,
                  "-subj", f"/CN=SEMQ test {ca}", "-days", "3650", "-sha256",
                  "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                  "-out", ca_crt], "CA")
    for i in ids:
        make_cert_openssl(dir, i, uri=f"semq://{i}", ca=ca)
    return Certs(dir, f"{ca}.crt")


# ---- waiting ----------------------------------------------------------------

class Pending:
    """A falsy value for wait_until predicates that still says what was
    observed: `return n >= 10 or Pending(f"{n} rows")`."""

    def __init__(self, observed):
        self.observed = observed

    def __bool__(self):
        return False

    def __repr__(self):
        return str(self.observed)


def wait_until(predicate, timeout=10.0, what="condition", interval=0.05,
               on_timeout=None, progress=False):
    """Polls predicate() until it returns a truthy value, which is returned.
    An exception from predicate counts as "not yet" (and is reported as the
    last observed value). After `timeout` seconds raises HarnessError naming
    `what` and the last value observed; on_timeout() (if given) adds context,
    e.g. a node's log tail. With progress=True the timeout counts from the
    last change of what predicate observed (a Pending count going down):
    work that moves on is waited for however slow the machine, work that
    stopped fails after `timeout` (the test's own limit bounds the rest)."""
    deadline = time.monotonic() + timeout
    last = "(never evaluated)"
    while True:
        try:
            v = predicate()
            if v:
                return v
            seen = repr(v)
        except Exception as e:  # e.g. a table not created yet
            seen = f"{type(e).__name__}: {e}"
        if progress and seen != last:
            deadline = time.monotonic() + timeout
        last = seen
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    msg = (f"timed out after {timeout:g} s "
           f"{'without progress ' if progress else ''}waiting for {what}; "
           "last observed: ")
    msg += last
    if on_timeout:
        try:
            msg += "\n" + str(on_timeout())
        except Exception as e:
            msg += f"\n(on_timeout failed: {e})"
    raise HarnessError(msg)



def log_lines(node, pattern):
    """The lines of node's log (every start) matching regex pattern."""
    pat = re.compile(pattern)
    return [ln for ln in node.log_text().splitlines() if pat.search(ln)]


def wait_log(node, pattern, what, n=1, timeout=30.0, on_timeout=None):
    """Waits until node's log has n lines matching pattern; returns them.
    on_timeout: as for wait_until (default: node's log tail)."""
    def enough():
        got = log_lines(node, pattern)
        return got if len(got) >= n else Pending(f"{len(got)} lines")
    return wait_until(enough, timeout, f"{node.id}'s log: {what}",
                      interval=0.05, on_timeout=on_timeout or node.log_tail)


# ---- nodes ------------------------------------------------------------------

def _yesno(v):
    return "yes" if v else "no"


def _listening(port):
    """True when some socket on this host listens on TCP port (read from
    /proc/net/tcp*, so the daemon sees no probe connection)."""
    want = f":{port:04X}"
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[1].endswith(want) and parts[3] == "0A":
                        return True
        except OSError:
            continue
    return False


def _addr_port(addr):
    return int(addr.rsplit(":", 1)[1])


class Node:
    """One semqd node in its own directory BASE/ID: node.ini, ID.db and
    semqd.log (its stdout and stderr).

    listen: True = 127.0.0.1 on a free port, a "host:port" string, or None.
    admin: False, True (a free port) or "host:port".
    peers: {name: {"connect": "host:port" or None, "trusted_relay": bool}}
    routes: {dest or "default": peer name}
    journal: True loads the journal plugin for types "*" with
    journal_options (e.g. {"fail_rate": 0.3, "fail_seed": 7}); plugins: more
    {name: {"path": ..., "types": "*" or [2800], option: value...}}.
    redo: {"levels": "1s,2s", "max_tries": 3}. node_options: other [node]
    keys ({"poll_interval": "20ms", "query_after": "2s"}).
    semqd, semqctl: paths of other programs to run for this node, e.g. an
    older release's (tests/integration/oldrelease.py); None (the default)
    runs $SEMQD and $SEMQCTL as before. They are kept as the attributes
    semqd_program and semqctl_program, which a test may change between
    stop() and start() (an upgrade in place). The journal plugin stays
    $JOURNAL_SO: for another build's, pass journal=False and plugins=
    {"journal": {"path": ..., "types": "*"}}.
    """

    def __init__(self, id, base_dir, certs=None, *, listen=True, admin=False,
                 relay=False, store_and_forward=False, peers=None,
                 routes=None, journal=True, journal_options=None,
                 plugins=None, redo=None, node_options=None, env=None,
                 semqd=None, semqctl=None):
        self.id = id
        self.dir = os.path.abspath(os.path.join(base_dir, id))
        os.makedirs(self.dir, exist_ok=True)
        self.ini = os.path.join(self.dir, "node.ini")
        self.db = os.path.join(self.dir, f"{id}.db")
        self.log = os.path.join(self.dir, "semqd.log")
        self.certs = certs
        if listen is True:
            listen = f"127.0.0.1:{free_port()}"
        self.listen = listen or None
        if admin is True:
            admin = f"127.0.0.1:{free_port()}"
        self.admin = admin or None
        self.relay = relay
        self.store_and_forward = store_and_forward
        self.peers = {}
        for name, p in (peers or {}).items():
            self.add_peer(name, **p)
        self.routes = dict(routes or {})
        self.journal = journal
        self.journal_options = dict(journal_options or {})
        self.plugins = dict(plugins or {})
        self.redo = dict(redo or {})
        self.node_options = dict(node_options or {})
        self.env = dict(env or {})
        self.semqd_program = semqd
        self.semqctl_program = semqctl
        self.proc = None
        self._logf = None
        self.starts = 0

    def __repr__(self):
        state = "running" if self.alive() else "stopped"
        return f"Node({self.id!r}, {state}, {self.dir!r})"

    # -- configuration --

    @property
    def listen_port(self):
        return _addr_port(self.listen) if self.listen else None

    def add_peer(self, name, connect=None, trusted_relay=False):
        """A [peer NAME] section; connect = "host:port" to dial out."""
        self.peers[name] = {"connect": connect,
                            "trusted_relay": trusted_relay}

    def add_route(self, dest, via):
        """[route] dest = via (dest "default" for everything else)."""
        self.routes[dest] = via

    def config_text(self):
        """The node.ini text for the current settings."""
        out = ["; written by tests/integration/semqtest.py", "[node]",
               f"id = {self.id}", f"db = {self.db}"]
        if self.listen:
            out.append(f"listen = {self.listen}")
        if self.admin:
            out.append(f"admin = {self.admin}")
        out.append(f"relay = {_yesno(self.relay)}")
        out.append(f"store_and_forward = {_yesno(self.store_and_forward)}")
        for k, v in self.node_options.items():
            out.append(f"{k} = {_ini_value(v)}")
        if self.certs is not None:
            out += ["", "[tls]", f"cert = {self.certs.crt(self.id)}",
                    f"key = {self.certs.key(self.id)}",
                    f"ca = {self.certs.ca}"]
        for name, p in self.peers.items():
            out += ["", f"[peer {name}]"]
            if p["connect"]:
                out.append(f"connect = {p['connect']}")
            out.append(f"trusted_relay = {_yesno(p['trusted_relay'])}")
        if self.routes:
            out += ["", "[route]"]
            out += [f"{d} = {v}" for d, v in self.routes.items()]
        plugins = {}
        if self.journal:
            plugins["journal"] = dict(
                {"path": _program("JOURNAL_SO",
                                  os.path.join("plugins", "journal.so")),
                 "types": "*"}, **self.journal_options)
        plugins.update(self.plugins)
        for name, opts in plugins.items():
            out += ["", f"[plugin {name}]"]
            for k, v in opts.items():
                if k == "types" and isinstance(v, (list, tuple)):
                    v = ",".join(str(x) for x in v)
                out.append(f"{k} = {_ini_value(v)}")
        if self.redo:
            out += ["", "[redo]"]
            out += [f"{k} = {_ini_value(v)}" for k, v in self.redo.items()]
        return "\n".join(out) + "\n"

    def write_config(self):
        """Writes node.ini; returns its path."""
        text = self.config_text()
        with open(self.ini, "w") as f:
            f.write(text)
        return self.ini

    # -- process --

    def start(self, wait=True, timeout=15.0):
        """Writes node.ini and runs `$SEMQD -c node.ini` in the node's
        directory, appending stdout and stderr to semqd.log. With wait,
        returns once the process runs, its database has tb_0031 and its
        listen and admin sockets (if any) are listening and it has logged its
        start line; raises with the log tail if it exits first."""
        if self.alive():
            raise HarnessError(f"{self.id}: start() while running")
        semqd = _require_exe(self.semqd_program or
                             _program("SEMQD", "semqd"), "SEMQD")
        self.write_config()
        self._logf = open(self.log, "ab")
        self._logf.write(f"---- semqtest: start #{self.starts + 1} ----\n"
                         .encode())
        self._logf.flush()
        # where this start's lines begin (in [node] log_file when set)
        where = os.path.join(self.dir, self.node_options.get("log_file") or
                             self.log)
        try:
            self._start_mark = (where, os.path.getsize(where))
        except OSError:
            self._start_mark = (where, 0)
        env = dict(os.environ, **self.env)
        self.proc = subprocess.Popen(
            [semqd, "-c", self.ini], cwd=self.dir, stdin=subprocess.DEVNULL,
            stdout=self._logf, stderr=subprocess.STDOUT, env=env,
            preexec_fn=_pdeathsig)
        self.starts += 1
        _LIVE.append(self)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=15.0):
        def ready():
            if not self.alive():
                raise HarnessError(
                    f"{self.id}: semqd exited with {self.proc.returncode} "
                    f"during start; log:\n{self.log_tail()}")
            if not os.path.exists(self.db):
                return False
            try:  # migrated: the application may insert now
                if not self.has_table("tb_0031"):
                    return False
            except sqlite3.Error:
                return False
            for a in (self.listen, self.admin):
                if a and not _listening(_addr_port(a)):
                    return False
            return self.started_line()
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"{self.id}: not ready within {timeout:g} s (db "
                    f"{self.db}, listen {self.listen}, admin {self.admin});"
                    f" log:\n{self.log_tail()}")
            time.sleep(0.05)

    def started_line(self):
        """True once this start's start line is in the log: semqd writes it
        after the store is open and its plugins initialised (their tables
        made), which an existing database's tables cannot tell."""
        where, at = self._start_mark
        try:
            with open(where, "rb") as f:
                f.seek(at)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return False
        return re.search(r" semqd \S+: node ", text) is not None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def _reap(self):
        if self in _LIVE:
            _LIVE.remove(self)
        if self._logf:
            self._logf.close()
            self._logf = None

    def stop(self, timeout=15.0, check=True):
        """SIGTERM and wait up to timeout (SPEC §8: finish the batch, close
        cleanly). With check, raises unless it exited 0 in time (an
        AddressSanitizer build also fails here on a leak). Returns the exit
        code."""
        if self.proc is None:
            return None
        rc, killed = _terminate(self.proc, timeout)
        self._reap()
        if check and killed:
            raise HarnessError(f"{self.id}: did not exit within {timeout:g}"
                               f" s of SIGTERM (killed); log:\n"
                               f"{self.log_tail()}")
        if check and rc != 0:
            raise HarnessError(f"{self.id}: exited {rc} after SIGTERM; log:"
                               f"\n{self.log_tail()}")
        return rc

    def kill(self):
        """SIGKILL: a crash at an arbitrary point. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        rc = self.proc.wait(timeout=10)
        self._reap()
        return rc

    def restart(self, kill=False, wait=True):
        """stop() (or kill()) then start(); the config is written anew, so
        settings changed in between take effect."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start(wait=wait)

    def log_tail(self, n=40):
        return f"[{self.id} {self.log}]\n" + _tail(self.log, n)

    def log_text(self):
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # -- the database --

    def connect_db(self, readonly=True):
        """A sqlite3 connection to the node's database with a 5 s busy
        timeout (caller closes). The daemon uses WAL, so readers never wait
        for it; readonly opens with mode=ro."""
        if readonly:
            if not os.path.exists(self.db):
                raise HarnessError(f"{self.id}: no database {self.db} yet")
            c = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True,
                                timeout=5.0)
        else:
            c = sqlite3.connect(self.db, timeout=5.0)
        c.execute("PRAGMA busy_timeout = 5000")
        return c

    def sql(self, query, params=()):
        """Runs one read query; returns all rows as tuples."""
        c = self.connect_db()
        try:
            return c.execute(query, params).fetchall()
        finally:
            c.close()

    def sql_write(self, query, params=()):
        """Runs one statement in its own transaction (the application's
        side); returns lastrowid."""
        c = self.connect_db(readonly=False)
        try:
            with c:
                cur = c.execute(query, params)
            return cur.lastrowid
        finally:
            c.close()

    def has_table(self, name):
        return bool(self.sql("SELECT 1 FROM sqlite_master WHERE type = "
                             "'table' AND name = ?", (name,)))

    def enqueue(self, dest, type=1, key=None, payload=b"", deliver_at=None,
                count=1):
        """The application contract (SPEC §4): INSERT INTO tb_0031 in one
        transaction; `count` rows at once. Returns their (origin, dest, seq)
        in order once the running daemon has numbered them (its next batch:
        migration 0007); with the daemon stopped, (None, dest, None) each.
        The daemon must have initialised the database (started once) so
        that the schema knows the node id."""
        c = self.connect_db(readonly=False)
        ids = []
        try:
            with c:
                for _ in range(count):
                    cur = c.execute(
                        "INSERT INTO tb_0031(dest, type, msg_key, payload, "
                        "deliver_at) VALUES (?, ?, ?, ?, ?)",
                        (dest, type, key, payload, deliver_at))
                    ids.append(cur.lastrowid)
        finally:
            c.close()
        return self.numbered(ids)

    def wait_numbered(self, timeout=30.0):
        """Waits for the running semqd to number every new row of tb_0031
        (it does in its next batch after the commit: migration 0007). A
        daemon that stops after numbering them (a crash point just after
        that commit) is no error; one that stops before is."""
        def none_left():
            n = self.sql("SELECT count(*) FROM tb_0031 WHERE seq IS NULL")
            if n[0][0] and not self.alive():
                raise HarnessError(f"{self.id}: semqd is not running, so "
                                   f"its {n[0][0]} new rows stay unnumbered")
            return n[0][0] == 0 or Pending(f"{n[0][0]} rows unnumbered")
        wait_until(none_left, timeout,
                   f"{self.id}: semqd numbering its new rows", progress=True)

    def numbered(self, ids, timeout=30.0):
        """(origin, dest, seq) of tb_0031 rows `ids`, waiting for the
        running daemon to number them; (None, dest, None) while it is
        stopped."""
        q = ("SELECT id, origin, dest, seq FROM tb_0031 WHERE id IN (%s)"
             % ",".join("?" * len(ids)))
        rows = {}

        def done():
            rows.clear()
            rows.update((r[0], r[1:]) for r in self.sql(q, tuple(ids)))
            left = sum(1 for r in rows.values() if r[2] is None)
            if left and waiting and not self.alive():
                raise HarnessError(f"{self.id}: semqd stopped with {left} "
                                   "of the rows unnumbered")
            return left == 0 or Pending(f"{left} rows unnumbered")
        waiting = bool(ids) and self.alive()
        if waiting:
            wait_until(done, timeout,
                       f"{self.id}: semqd numbering its new rows",
                       progress=True)
        else:
            done()
        return [tuple(rows[i]) for i in ids]

    def journal_rows(self):
        """The journal table (SPEC §13) as dicts ordered by id; [] before
        the plugin created it."""
        if not os.path.exists(self.db) or not self.has_table("journal"):
            return []
        cols = ("id", "origin", "dest", "seq", "type", "msg_key",
                "payload_len", "handled_at")
        rows = self.sql(f"SELECT {', '.join(cols)} FROM journal ORDER BY id")
        return [dict(zip(cols, r)) for r in rows]

    def journal_count(self):
        if not os.path.exists(self.db) or not self.has_table("journal"):
            return 0
        return self.sql("SELECT count(*) FROM journal")[0][0]

    def _status_counts(self, table, where="", params=()):
        return dict(self.sql(f"SELECT status, count(*) FROM {table} {where} "
                             "GROUP BY status", params))

    def outbound_status_counts(self, dest=None):
        """{status: rows} of tb_0031 (0 unsent, 4 sent, 6 relay holds it,
        100 confirmed, -2 cancelled), optionally for one dest."""
        if dest is None:
            return self._status_counts("tb_0031")
        return self._status_counts("tb_0031", "WHERE dest = ?", (dest,))

    def redo_status_counts(self):
        """{status: rows} of tb_0033 (0 pending, 1 waiting, 2 done, -1 dead,
        -2 discarded)."""
        return self._status_counts("tb_0033")

    def received_count(self):
        return self.sql("SELECT count(*) FROM tb_0030")[0][0]

    def watermark(self, origin, dest=None):
        """confirmed_through of origin's stream to dest (default: this node)
        in its current life here (the one that began last); 0 when none."""
        rows = self.sql("SELECT confirmed_through FROM semq_stream_in WHERE "
                        "origin = ? AND dest = ? ORDER BY started_at DESC, "
                        "life DESC LIMIT 1", (origin, dest or self.id))
        return rows[0][0] if rows else 0

    def unsettled(self, origin, dest=None):
        """tb_0030 rows of origin's stream to dest (default: this node) that
        the watermark has not passed: above it, or not acknowledged. Rows it
        passed stay for [node] receipt_retention (their digests answer a
        second copy), so a settled stream has none of these."""
        dest = dest or self.id
        w = self.watermark(origin, dest)
        return self.sql("SELECT count(*) FROM tb_0030 WHERE origin = ? AND "
                        "dest = ? AND (seq > ? OR ack_status <> 1)",
                        (origin, dest, w))[0][0]

    def settled(self, origin, n, dest=None):
        """origin's stream to dest stands at watermark n with every row at or
        below it acknowledged; else a Pending that says how far it is."""
        w, left = self.watermark(origin, dest), self.unsettled(origin, dest)
        return (w == n and left == 0) or Pending(
            f"confirmed_through {w}, {left} tb_0030 rows not settled")

    def all_confirmed(self, dest=None, total=None):
        """True when every tb_0031 row (to dest) is SS_ACK2 (100), and there
        are `total` of them when given."""
        c = self.outbound_status_counts(dest)
        n = sum(c.values())
        return set(c) <= {100} and (total is None or n == total)

    def wait_journal_count(self, n, timeout=30.0):
        """Waits until the journal has at least n rows; returns the count."""
        def enough():
            c = self.journal_count()
            return c if c >= n else Pending(f"{c} rows")
        return wait_until(enough, timeout, f"{self.id}: {n} journal rows",
                          on_timeout=self.log_tail)

    def wait_all_confirmed(self, dest=None, total=None, timeout=30.0):
        """Waits until all_confirmed(dest, total)."""
        def done():
            return self.all_confirmed(dest, total) or Pending(
                f"status counts {self.outbound_status_counts(dest)}")
        wait_until(done, timeout,
                   f"{self.id}: every outbound row"
                   f"{' to ' + dest if dest else ''} in status 100"
                   f"{f' ({total} rows)' if total is not None else ''}",
                   on_timeout=self.log_tail)

    # -- tools --

    def semqctl(self, *args, timeout=30.0, input=None):
        """Runs `$SEMQCTL -c node.ini ARGS...`; returns (rc, stdout,
        stderr) as text."""
        semqctl = _require_exe(self.semqctl_program or
                               _program("SEMQCTL", "semqctl"), "SEMQCTL")
        if not os.path.exists(self.ini):
            self.write_config()
        # Before the node's first start its database may not exist yet:
        # semqctl refuses to create it unless asked (--create), which a
        # test queueing documents first (as an application would) means.
        # An older release's semqctl (semqctl_program) has no --create.
        create = ["--create"] if (self.starts == 0 and
                                  self.semqctl_program is None) else []
        r = subprocess.run([semqctl, "-c", self.ini] + create +
                           [str(a) for a in args],
                           capture_output=True, timeout=timeout,
                           input=input, cwd=self.dir,
                           text=not isinstance(input, bytes))
        out, err = r.stdout, r.stderr
        if isinstance(out, bytes):
            out = out.decode("utf-8", "replace")
            err = err.decode("utf-8", "replace")
        return r.returncode, out, err

    def semqctl_json(self, *args, timeout=30.0):
        """semqctl --json ARGS...; raises unless it exits 0; returns the
        parsed JSON."""
        import json
        rc, out, err = self.semqctl("--json", *args, timeout=timeout)
        if rc != 0:
            raise HarnessError(f"{self.id}: semqctl --json "
                               f"{' '.join(map(str, args))} exited {rc}: "
                               f"{err.strip()}")
        return json.loads(out)

    def admin_get(self, path, timeout=5.0):
        """GET http://ADMIN/path; returns (status, body text)."""
        if not self.admin:
            raise HarnessError(f"{self.id}: no admin address configured")
        host, port = self.admin.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()


def _ini_value(v):
    if isinstance(v, bool):
        return _yesno(v)
    s = str(v)
    if "\n" in s:
        raise HarnessError(f"ini value {s!r} has a newline")
    return s


def connect(dialer, listener, proxy=None, dialer_trusts=False,
            listener_trusts=False):
    """Configures `dialer` to dial `listener` (through proxy when given: the
    proxy must relay to listener's port) and `listener` to accept it. The
    *_trusts flags set trusted_relay on the respective peer section."""
    if not listener.listen:
        raise HarnessError(f"connect: {listener.id} has no listen address")
    addr = proxy.addr if proxy else listener.listen
    dialer.add_peer(listener.id, connect=addr, trusted_relay=dialer_trusts)
    listener.add_peer(dialer.id, connect=None, trusted_relay=listener_trusts)


# ---- the fault proxy --------------------------------------------------------

_PROXY_LINE = re.compile(r"^faultproxy: listen (\S+) to (\S+) control (\S+) "
                         r"seed (\d+)$")


class Proxy:
    """A faultproxy process relaying 127.0.0.1:port to 127.0.0.1:to_port.

    cut_min=0 (the default here) relays without faults; cut_min/cut_max set
    the interval of fault events, stall_prob the share of links stalled
    rather than cut, rst_prob the share of cuts sent as RST; cut_bytes cuts
    each link once it has carried that many bytes from the dialling node
    (faults fixed by what is sent, not by the machine's speed: a transfer of
    B bytes meets at least ceil(B / cut_bytes) - 1 cuts). listen_port:
    None picks a free port now (so configs can be written before start), 0
    lets the proxy choose (read back by start). The control port is chosen
    by the proxy."""

    def __init__(self, base_dir, to_port, *, listen_port=None, cut_min=0.0,
                 cut_max=None, stall_prob=0.0, rst_prob=None, seed=None,
                 cut_bytes=None, name=None):
        self.to_port = int(to_port)
        self.port = free_port() if listen_port is None else int(listen_port)
        self.cut_min, self.cut_max = cut_min, cut_max
        self.stall_prob, self.rst_prob, self.seed = stall_prob, rst_prob, seed
        self.cut_bytes = cut_bytes
        self.name = name or f"proxy-{self.port}-{self.to_port}"
        self.dir = os.path.abspath(base_dir)
        os.makedirs(self.dir, exist_ok=True)
        self.log = os.path.join(self.dir, f"{self.name}.log")
        self.control_port = None
        self.proc = None
        self._logf = None

    def __repr__(self):
        return f"Proxy({self.name!r}, :{self.port} -> :{self.to_port})"

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def args(self):
        a = ["--listen", self.addr, "--to", f"127.0.0.1:{self.to_port}",
             "--cut-min", str(self.cut_min), "--control", "0"]
        if self.cut_max is not None:
            a += ["--cut-max", str(self.cut_max)]
        if self.stall_prob:
            a += ["--stall-prob", str(self.stall_prob)]
        if self.rst_prob is not None:
            a += ["--rst-prob", str(self.rst_prob)]
        if self.cut_bytes:
            a += ["--cut-bytes", str(int(self.cut_bytes))]
        if self.seed is not None:
            a += ["--seed", str(self.seed)]
        return a

    def start(self, timeout=10.0):
        """Starts faultproxy and waits for its ready line (ports, seed)."""
        if self.proc is not None and self.proc.poll() is None:
            raise HarnessError(f"{self.name}: start() while running")
        exe = _require_exe(os.environ.get("SEMQ_FAULTPROXY") or
                           os.path.join(BUILD_DIR, "tests", "faultproxy"),
                           "SEMQ_FAULTPROXY")
        self._logf = open(self.log, "ab")
        self.proc = subprocess.Popen([exe] + self.args(),
                                     stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=self._logf,
                                     preexec_fn=_pdeathsig)
        _LIVE.append(self)
        line = self._read_line(timeout)
        m = _PROXY_LINE.match(line)
        if not m:
            self.kill()
            raise HarnessError(f"{self.name}: unexpected first line "
                               f"{line!r}; log:\n{_tail(self.log, 20)}")
        self.port = _addr_port(m.group(1))
        self.control_port = _addr_port(m.group(3))
        self.seed = int(m.group(4))
        return self

    def _read_line(self, timeout):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        buf = b""
        deadline = time.monotonic() + timeout
        try:
            while not buf.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.kill()
                    raise HarnessError(f"{self.name}: no ready line within "
                                       f"{timeout:g} s; log:\n"
                                       f"{_tail(self.log, 20)}")
                b = os.read(self.proc.stdout.fileno(), 1)
                if not b:
                    rc = self.proc.wait(timeout=10)
                    self._reap()
                    raise HarnessError(f"{self.name}: exited {rc} at start;"
                                       f" log:\n{_tail(self.log, 20)}")
                buf += b
        finally:
            sel.close()
        return buf.decode("utf-8", "replace").strip()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _reap(self):
        if self in _LIVE:
            _LIVE.remove(self)
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()
        if self._logf:
            self._logf.close()
            self._logf = None

    def command(self, cmd, timeout=5.0):
        """Sends one control command; returns the reply line."""
        if not self.alive():
            raise HarnessError(f"{self.name}: not running")
        with socket.create_connection(("127.0.0.1", self.control_port),
                                      timeout=timeout) as s:
            s.sendall(cmd.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                b = s.recv(4096)
                if not b:
                    break
                buf += b
        reply = buf.decode("utf-8", "replace").strip()
        if reply.startswith("error") or not reply:
            raise HarnessError(f"{self.name}: {cmd!r} -> {reply!r}")
        return reply

    def pause(self):
        """Partition: cut every link and refuse new ones until resume()."""
        self.command("pause")

    def resume(self):
        self.command("resume")

    def cut(self):
        """Cut every open link now."""
        self.command("cut")

    def hold(self):
        """Relay nothing until release(); links stay open: what a node
        sends now is on the way, for certain."""
        self.command("hold")

    def release(self):
        self.command("release")

    def stats(self):
        """{"conns": relayed since start, "cuts": links cut, "bytes":
        relayed}."""
        line = self.command("stats")
        try:
            return {k: int(v) for k, v in
                    (f.split("=", 1) for f in line.split())}
        except ValueError:
            raise HarnessError(f"{self.name}: bad stats line {line!r}")

    def open_links(self):
        line = self.command("open")
        if not line.startswith("open="):
            raise HarnessError(f"{self.name}: bad open line {line!r}")
        return int(line[5:])

    def stop(self, timeout=10.0, check=True):
        """SIGTERM; with check, raises unless it exited 0 in time."""
        if self.proc is None:
            return None
        rc, killed = _terminate(self.proc, timeout)
        self._reap()
        if check and (killed or rc != 0):
            raise HarnessError(f"{self.name}: {'killed' if killed else rc} "
                               f"after SIGTERM; log:\n{_tail(self.log, 20)}")
        return rc

    def kill(self):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        rc = self.proc.wait(timeout=10)
        self._reap()
        return rc

    def log_tail(self, n=40):
        return f"[{self.name} {self.log}]\n" + _tail(self.log, n)


# ---- exactly once -----------------------------------------------------------

def _journal_of(receiver):
    """(rows, label) for a Node or a database path."""
    cols = ("id", "origin", "dest", "seq", "msg_key")
    if isinstance(receiver, Node):
        rows = [tuple(r[c] for c in cols) for r in receiver.journal_rows()]
        return rows, receiver.id
    c = sqlite3.connect(f"file:{receiver}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = c.execute("SELECT id, origin, dest, seq, msg_key FROM journal "
                         "ORDER BY id").fetchall()
    finally:
        c.close()
    return rows, str(receiver)


def _fmt_list(items, limit=20):
    items = list(items)
    s = ", ".join(items[:limit])
    if len(items) > limit:
        s += f", ... ({len(items) - limit} more)"
    return s


def check_exactly_once(receiver, origins, expected_count, keys=None,
                       dest=None, cancelled=()):
    """Asserts on the receiver's journal (SPEC §13) that every message
    (origin, dest, seq) for seq 1..N of each origin's stream to dest appears
    exactly once, nothing else of those streams appears, and, per stream and
    key, journal order (by id) is increasing seq.

    receiver: a Node (dest defaults to its id) or a database path (then dest
    is required). origins: origin ids. expected_count: N for every origin,
    or {origin: N}. keys: optional {(origin, seq): key} of what was sent;
    the recorded msg_key must match it and the order check uses it; without
    it the order check uses the recorded keys (NULL keys are not ordered).
    cancelled: (origin, seq) pairs that must not appear at all.

    Returns {"total": rows checked, "per_origin": {origin: rows},
    "keys": distinct keys}. Raises HarnessError listing the missing,
    duplicated, unexpected, mislabelled and out-of-order message ids."""
    rows, label = _journal_of(receiver)
    if dest is None:
        if not isinstance(receiver, Node):
            raise HarnessError("check_exactly_once: dest is required when "
                               "the receiver is a database path")
        dest = receiver.id
    origins = list(origins)
    if isinstance(expected_count, dict):
        want = {o: int(expected_count.get(o, 0)) for o in origins}
    else:
        want = {o: int(expected_count) for o in origins}
    cancelled = set((o, int(s)) for o, s in cancelled)

    seen = {}  # (origin, seq) -> [journal ids]
    recorded_key = {}
    for jid, o, d, seq, k in rows:
        if d != dest or o not in want:
            continue
        seen.setdefault((o, seq), []).append(jid)
        recorded_key.setdefault((o, seq), k)

    missing, dups, unexpected, wrong_key, order = [], [], [], [], []
    for o in origins:
        for s in range(1, want[o] + 1):
            if (o, s) in cancelled:
                continue
            if (o, s) not in seen:
                missing.append(msg_id(o, dest, s))
    def by_id(item):
        (o, s), _ = item
        return (o, s if isinstance(s, int) else -1)

    for (o, s), jids in sorted(seen.items(), key=by_id):
        in_range = isinstance(s, int) and 1 <= s <= want[o]
        if not in_range or (o, s) in cancelled:
            why = "cancelled" if (o, s) in cancelled else "not sent"
            unexpected.append(f"{msg_id(o, dest, s)} ({why}; journal ids "
                              f"{', '.join(map(str, jids))})")
        elif len(jids) > 1:
            dups.append(f"{msg_id(o, dest, s)} x{len(jids)} (journal ids "
                        f"{', '.join(map(str, jids))})")
        if keys is not None and in_range and (o, s) in keys and \
                recorded_key[(o, s)] != keys[(o, s)]:
            wrong_key.append(f"{msg_id(o, dest, s)} recorded key "
                             f"{recorded_key[(o, s)]!r}, sent "
                             f"{keys[(o, s)]!r}")

    # Order: walk the journal by id; per (origin, key) the seq must grow.
    # A second copy of a message is reported as a duplicate above, not here.
    last = {}  # (origin, key) -> (seq, journal id)
    distinct_keys = set()
    walked = set()
    for jid, o, d, seq, k in rows:
        if d != dest or o not in want or (o, seq) in walked:
            continue
        walked.add((o, seq))
        key = keys.get((o, seq)) if keys is not None else k
        if key is None:
            continue
        distinct_keys.add((o, key))
        prev = last.get((o, key))
        if prev is not None and not (isinstance(seq, int) and
                                     seq > prev[0]):
            order.append(f"key {key!r} of {o}->{dest}: seq {seq} (journal "
                         f"id {jid}) after seq {prev[0]} (journal id "
                         f"{prev[1]})")
        if prev is None or (isinstance(seq, int) and seq > prev[0]):
            last[(o, key)] = (seq, jid)

    problems = []
    if missing:
        problems.append(f"missing ({len(missing)}): {_fmt_list(missing)}")
    if dups:
        problems.append(f"duplicated ({len(dups)}): {_fmt_list(dups)}")
    if unexpected:
        problems.append(f"unexpected ({len(unexpected)}): "
                        f"{_fmt_list(unexpected)}")
    if wrong_key:
        problems.append(f"wrong key ({len(wrong_key)}): "
                        f"{_fmt_list(wrong_key)}")
    if order:
        problems.append(f"order violations ({len(order)}): "
                        f"{_fmt_list(order)}")
    if problems:
        raise HarnessError(f"exactly-once check on {label} (dest {dest}) "
                           "failed:\n  " + "\n  ".join(problems))
    per_origin = {o: sum(len(j) for (oo, _), j in seen.items() if oo == o)
                  for o in origins}
    return {"total": sum(per_origin.values()), "per_origin": per_origin,
            "keys": len(distinct_keys)}


# ---- the test runner --------------------------------------------------------

_TESTS = []


class TestContext:
    """What a test function receives: its own directory and factories whose
    processes are stopped when the test ends."""

    def __init__(self, name, dir):
        self.name = name
        self.dir = dir
        self.nodes = []
        self.proxies = []

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def certs(self, ids, **kw):
        """make_certs(t.dir/certs, ids)."""
        return make_certs(self.path("certs"), ids, **kw)

    def node(self, id, certs=None, **kw):
        """A Node in the test directory (not started)."""
        n = Node(id, self.dir, certs, **kw)
        self.nodes.append(n)
        return n

    def proxy(self, to_port, start=True, **kw):
        """A Proxy in the test directory relaying to to_port (started)."""
        p = Proxy(self.path("proxies"), to_port, **kw)
        self.proxies.append(p)
        return p.start() if start else p

    def logs(self, n=30):
        """The log tails of every node and proxy, for failure messages."""
        return "\n".join(x.log_tail(n) for x in self.nodes + self.proxies)


class _TestTimeout(BaseException):
    pass


def test(fn=None, *, timeout=180):
    """Registers a test function fn(t: TestContext); tests run in the order
    they are defined. @test or @test(timeout=SECONDS)."""
    def register(f):
        _TESTS.append((f.__name__, f, timeout))
        return f
    return register(fn) if fn is not None else register


def _on_alarm(signum, frame):
    raise _TestTimeout()


def run(argv=None):
    """Runs the registered tests (those whose name contains one of the
    arguments, if any), each in a fresh directory under $TMPDIR; prints
    "N passed, M failed" last and exits non-zero if any failed. A failing
    test's directory is kept and printed, with its processes' log tails."""
    argv = sys.argv[1:] if argv is None else argv
    selected = [t for t in _TESTS
                if not argv or any(a in t[0] for a in argv)]
    passed = failed = 0
    keep = os.environ.get("SEMQ_KEEP") == "1"
    old = signal.signal(signal.SIGALRM, _on_alarm)
    for name, fn, timeout in selected:
        d = tempfile.mkdtemp(prefix=f"semq-{name}-")
        t = TestContext(name, d)
        print(f"---- {name}", flush=True)
        t0 = time.monotonic()
        err = None
        try:
            signal.alarm(int(timeout))
            try:
                fn(t)
            finally:
                signal.alarm(0)
        except _TestTimeout:
            err = f"test exceeded its {timeout} s limit, at:\n"
            err += traceback.format_exc()
        except Exception:
            err = traceback.format_exc()
        try:
            stop_all()
        except Exception:
            err = (err or "") + traceback.format_exc()
        dt = time.monotonic() - t0
        if err is None:
            passed += 1
            print(f"ok   {name} ({dt:.1f} s)", flush=True)
            if keep:
                print(f"     kept {d}")
            else:
                shutil.rmtree(d, ignore_errors=True)
        else:
            failed += 1
            print(f"FAIL {name} ({dt:.1f} s)\n{err.rstrip()}")
            if t.nodes or t.proxies:
                print(t.logs())
            print(f"     kept {d}", flush=True)
    signal.signal(signal.SIGALRM, old)
    if not selected:
        print(f"no test matches {' '.join(argv)}")
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed or not selected else 0)


# ---- several instances of one node id (SPEC §11) ------------------------------

_MASK64 = (1 << 64) - 1


def _fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * 1099511628211) & _MASK64
    return h


def instance_score(origin, dest, instance):
    """routes_score() of node/job.c: the rendezvous score of `instance` for
    the stream (origin, dest) — FNV-1a 64 over origin NUL dest NUL instance,
    then splitmix64's finaliser."""
    h = 14695981039346656037
    h = _fnv1a(h, origin.encode() + b"\0" + dest.encode() + b"\0" +
               instance.encode())
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & _MASK64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & _MASK64
    h ^= h >> 31
    return h


def stream_instance(origin, dest, instances):
    """The instance a relay (or a sender) picks for the stream (origin, dest)
    among the connected `instances` of dest's next hop, as routes_pick()
    does: the highest instance_score(), ties to the smaller name."""
    instances = list(instances)
    if not instances:
        raise HarnessError("stream_instance: no instances")
    return min(instances,
               key=lambda i: (-instance_score(origin, dest, i), i.encode()))


class InstanceNode(Node):
    """One of several semqd instances serving the node id `id`: [node]
    instance = INSTANCE, its own directory BASE/ID-INSTANCE (node.ini,
    semqd.log) and its own listen and admin ports (as Node gives them), and
    by default the database of the node id's plain Node directory,
    BASE/ID/ID.db, shared by every instance (db= another path to override).
    Certificates are the node id's: every instance presents the same id."""

    def __init__(self, id, instance, base_dir, certs=None, *, db=None, **kw):
        opts = dict(kw.pop("node_options", None) or {})
        opts["instance"] = instance
        super().__init__(id, base_dir, certs, node_options=opts, **kw)
        self.instance = instance
        self.dir = os.path.abspath(os.path.join(base_dir,
                                                f"{id}-{instance}"))
        os.makedirs(self.dir, exist_ok=True)
        self.ini = os.path.join(self.dir, "node.ini")
        self.log = os.path.join(self.dir, "semqd.log")
        if db is not None:
            self.db = os.path.abspath(db)

    def __repr__(self):
        state = "running" if self.alive() else "stopped"
        return f"InstanceNode({self.id!r}, {self.instance!r}, {state})"


def instance_node(t, id, instance, certs=None, **kw):
    """An InstanceNode in the test directory of TestContext t (not started;
    stopped with the test's other processes)."""
    n = InstanceNode(id, instance, t.dir, certs, **kw)
    t.nodes.append(n)
    return n


_RAISE = object()


def admin_metric(node, name, *, absent=_RAISE, **labels):
    """The value (a float) of the sample `name` with exactly these labels,
    in this order (as semqd writes them), e.g. admin_metric(r,
    "semq_stream_resyncs_total", origin="R", dest="S"), from the node's
    admin /metrics. When the node has no such sample: `absent` when given
    (e.g. None, or 0.0 for a counter not yet written), else HarnessError."""
    status, body = node.admin_get("/metrics")
    if status != 200:
        raise HarnessError(f"{node.id}: /metrics answered {status}")
    want = name
    if labels:
        want += "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    for line in body.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    if absent is not _RAISE:
        return absent
    raise HarnessError(f"{node.id}: /metrics has no {want}")


__all__ += ["instance_score", "stream_instance", "InstanceNode",
            "instance_node", "admin_metric"]
