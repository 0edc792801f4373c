# SPDX-License-Identifier: MIT
"""chaos — SEMQ's chaos driver: R -> P -> S under kill -9 and link faults.

Real semqd nodes on loopback, set up as in test_relay.py: a platform P
(`relay = yes`, `store_and_forward = yes`, no plugin), a server S (journal
plugin) and one or more origins R1, R2, ... Every origin and S dial P, each
through its own faultproxy (which cuts and stalls its links at random
intervals by itself, and takes `cut`, `pause` and `resume` from the driver);
they trust P as a relay and route everything through it.

While the applications at the origins enqueue the messages in batches over
the first 80 % of the fault period (INSERT INTO tb_0031 in their own
transactions, as SPEC §4 says an application sends; each origin's stream
uses --keys keys, drawn at random), the driver injects faults at random
bounded intervals of 0.5-3 s:
kill -9 of any node (an origin, P or S) restarted after a random short
pause, a cut of every link of one proxy, a partition (a proxy paused, or
all of them to isolate P, then resumed). The proxies add their own cuts and
stalls. Every choice comes from one seeded PRNG, printed first, so `--seed N`
replays the same fault schedule, the same keys and batches (not the same
thread interleaving: the nodes run in real time).

After the deadline for faults every node is up, every proxy is replaced by
a fault-free one on the same port, and the system settles: a wait bounded by
--settle, ended early as a hang when nothing progressed (rows confirmed,
journal rows, watermarks, relay copies dropped) for 90 s. Then it checks,
reading every node's database:

  - every message took effect exactly once at S, in key order
    (semqtest.check_exactly_once with the keys sent);
  - every origin row is at status 100;
  - no relay copy is left in P's tb_0031;
  - S's tb_0033 holds nothing (the journal has no fail_rate here, so no
    entry, pending or other, has a reason to exist);
  - S's inbound watermark (semq_stream_in.confirmed_through) of every
    stream equals the number of messages sent on it, and every tb_0030 row
    is at or below it, acknowledged (the rows stay for receipt_retention);
  - no node crashed (exited without being killed) and each stops cleanly on
    SIGTERM at the end.

The last line is

  CHAOS: seed=N seconds=S messages=M kills=R:n P:n S:n cuts=N stalls=N
         partitions=N lost=N duplicated=N

(one line), where cuts counts the links the proxies cut (their own fault
events, the driver's cut commands and pauses), stalls the links the proxies
stalled, partitions the driver's pauses, lost the messages without a journal
row at S at the end, duplicated the journal rows beyond one per message.
Any violation exits 1 after a report naming the lost and duplicated message
ids with their rows on every node and their log lines (and, for copies left
at P, which of them S never saw); the run directory is kept (also with
--keep) and holds faults.log (the timeline of injected faults), report.txt
and every node's log and database. Bad arguments exit 2.

    python3 tests/integration/chaos.py [--messages 50000] [--keys 500]
        [--origins 2] [--seconds 120] [--seed N] [--keep]
        [--settle 300] [--build-dir DIR] [--dir DIR]
        [--faults kill,cut,partition,isolate_p] [--kill R,P,S] [--links R,S]

--faults, --kill and --links narrow the chaos down (to find which fault
breaks what): the driver's fault kinds, whose nodes may be killed, and
whose links to P carry faults (a link left out gets a fault-free proxy).

Programs come from the environment semqtest.py reads (SEMQD, SEMQCTL,
JOURNAL_SO, SEMQ_FAULTPROXY) or from --build-dir (default: $SEMQ_BUILD_DIR,
else build/). Importable: run_chaos(...) returns a ChaosResult; the CI
version is test_chaos.py.

DESIGN: one thread per run enqueues (the applications); the main thread
injects faults from a schedule of timed events (restarts and resumes are
events too, so faults overlap: a node may be killed while another is down or
a link partitioned). Every wait is bounded: node starts and stops, proxy
commands, the enqueuer's SQLite busy waits (and its retries), the settle
wait, and the join of the enqueuer. Whatever happens, every process started
is stopped before run_chaos returns.
"""

import argparse
import heapq
import os
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _use_build_dir(build_dir):
    """Points the programs semqtest.py looks for at build_dir (before the
    import, which reads SEMQ_BUILD_DIR), unless they are set already."""
    if not build_dir:
        return
    b = os.path.abspath(build_dir)
    os.environ["SEMQ_BUILD_DIR"] = b
    for env, rel in (("SEMQD", "semqd"), ("SEMQCTL", "semqctl"),
                     ("JOURNAL_SO", os.path.join("plugins", "journal.so")),
                     ("SEMQ_FAULTPROXY", os.path.join("tests",
                                                      "faultproxy"))):
        os.environ.setdefault(env, os.path.join(b, rel))


if __name__ == "__main__":  # --build-dir must act before semqtest's import
    for i, a in enumerate(sys.argv):
        if a == "--build-dir" and i + 1 < len(sys.argv):
            _use_build_dir(sys.argv[i + 1])
        elif a.startswith("--build-dir="):
            _use_build_dir(a.split("=", 1)[1])

import semqtest  # noqa: E402
from semqtest import (HarnessError, Node, Proxy, connect,  # noqa: E402
                      check_exactly_once, make_certs, msg_id)

# Fast timers (as in test_relay.py): short poll, quick in-doubt queries,
# quick reconnects, so the system recovers from each fault in about a
# second and the faults keep landing on messages in flight.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}

DEST = "S"
PAYLOAD_LEN = 100
READY_TIMEOUT = 30.0  # a node (re)started and listening
STOP_TIMEOUT = 30.0  # a node's clean stop at the end
BUSY_MS = 30000  # the applications' SQLite busy timeout
ENQUEUE_GIVE_UP = 120.0  # one batch retried at most this long
ENQUEUE_SHARE = 0.8  # the sending spans this share of the fault period

# Faults: the driver's interval between two, and what each does.
FAULT_GAP = (0.5, 3.0)  # seconds between injected faults
KILL_PAUSE = (0.05, 2.0)  # a killed node is down this long
PARTITION_LEN = (0.5, 5.0)  # a paused proxy stays paused this long
FAULT_WEIGHTS = (("kill", 5), ("cut", 3), ("partition", 2),
                 ("isolate_p", 1))
FAULT_KINDS = tuple(k for k, _ in FAULT_WEIGHTS)
ROLES = ("R", "P", "S")  # whose nodes may be killed
LINK_ROLES = ("R", "S")  # whose links to P carry faults
STUCK_AFTER = 90.0  # settling: no progress for this long is a hang
# (more than any timer of a settled system: idle_timeout 60 s is the longest)
# The proxies' own fault events (a cut, or a stall of 0.1-1 s).
PROXY_CUT = (2.0, 8.0)
PROXY_STALL_PROB = 0.5

_STALL_LINE = re.compile(r"link \d+: stall \d")


class ChaosError(Exception):
    """The run could not be carried out (not a SEMQ violation)."""


class ChaosResult:
    """What a run found: the counters of the CHAOS line, the violations
    (empty when every check passed), the run directory and the report."""

    def __init__(self):
        self.seed = None
        self.seconds = 0
        self.messages = 0
        self.kills = {"R": 0, "P": 0, "S": 0}
        self.cuts = 0
        self.stalls = 0
        self.partitions = 0
        self.lost = None  # None: the run ended before the checks
        self.duplicated = None
        self.violations = []
        self.report = ""
        self.dir = None
        self.settle_seconds = None
        self.wall_seconds = 0.0
        self.send_end = None  # s into the run: the last batch committed
        self.last_confirm = None  # s into the run: the last row at 100

    @property
    def ok(self):
        return not self.violations

    @property
    def line(self):
        k = self.kills
        return (f"CHAOS: seed={self.seed} seconds={self.seconds} "
                f"messages={self.messages} kills=R:{k['R']} P:{k['P']} "
                f"S:{k['S']} cuts={self.cuts} stalls={self.stalls} "
                f"partitions={self.partitions} lost={_n(self.lost)} "
                f"duplicated={_n(self.duplicated)}")


def _n(v, digits=None):
    if v is None:
        return "?"
    return f"{v:.{digits}f}" if digits is not None else str(v)


# ---- the applications -------------------------------------------------------

class Enqueuer(threading.Thread):
    """The origins' applications: each origin's share of the messages,
    inserted in transactions of random size, paced to spread over `span`
    seconds. Records {(origin, seq): key} as numbered by the schema; an
    exception ends the thread and is kept in .error."""

    def __init__(self, origins, counts, nkeys, span, rng):
        super().__init__(name="chaos-enqueuer", daemon=True)
        self.origins = origins  # Nodes (borrowed)
        self.counts = counts  # {origin id: messages}
        self.nkeys = nkeys
        self.span = span
        self.rng = rng  # owned by this thread
        self.keys = {}
        self.done = {o.id: 0 for o in origins}
        self.batches = 0
        self.retries = 0
        self.error = None
        self.end = None  # monotonic time of the last commit
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        try:
            self._run()
        except Exception:
            self.error = traceback.format_exc()

    def _run(self):
        t0 = time.monotonic()
        while not self.stop_flag.is_set():
            frac = min(1.0, (time.monotonic() - t0) / max(self.span, 1e-3))
            left = False
            for o in self.origins:
                n = self.counts[o.id]
                target = n if frac >= 1.0 else int(n * frac)
                while self.done[o.id] < target:
                    size = min(target - self.done[o.id],
                               self.rng.randint(1, 400))
                    self._batch(o, size)
                left = left or self.done[o.id] < n
            if not left:
                self.end = time.monotonic()
                return
            self.stop_flag.wait(self.rng.uniform(0.05, 0.4))

    def _batch(self, o, size):
        """One application transaction of `size` messages to S, retried
        (bounded) while the database is busy."""
        keys = [f"key{self.rng.randrange(self.nkeys):04d}"
                for _ in range(size)]
        first = self.done[o.id] + 1
        payloads = [(f"{o.id}/{DEST}/{first + i} ".encode() * 8)
                    [:PAYLOAD_LEN] for i in range(size)]
        deadline = time.monotonic() + ENQUEUE_GIVE_UP
        while True:
            try:
                got = self._insert(o, keys, payloads)
                break
            except sqlite3.OperationalError as e:
                if time.monotonic() > deadline:
                    raise ChaosError(f"{o.id}: could not enqueue a batch "
                                     f"of {size} for {ENQUEUE_GIVE_UP:g} s:"
                                     f" {e}")
                self.retries += 1
                time.sleep(0.1)
        # The node numbers them later; check() finds each (origin, seq)
        # with its key in S's journal (check_exactly_once, keys=).
        with self.lock:
            for s, k in got:
                self.keys[(o.id, s)] = k
            self.done[o.id] += size
            self.batches += 1

    def _insert(self, o, keys, payloads):
        """INSERT the rows in one transaction; returns their (seq, key).
        The node numbers them after the commit (migration 0007), in id
        order and without gaps, and this is the stream's only writer: the
        rows get the seqs after the last batch's. Raises
        sqlite3.OperationalError when nothing was committed."""
        c = sqlite3.connect(o.db, timeout=BUSY_MS / 1000.0,
                            isolation_level=None)
        try:
            c.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            last = self.done[o.id]
            c.execute("BEGIN IMMEDIATE")
            try:
                c.executemany("INSERT INTO tb_0031(dest, type, msg_key, "
                              "payload) VALUES (?, 1, ?, ?)",
                              [(DEST, k, p) for k, p in zip(keys, payloads)])
                top = c.execute("SELECT max(id) FROM tb_0031").fetchone()[0]
                c.execute("COMMIT")
            except sqlite3.Error:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                    raise
                # COMMIT failed and SQLite rolled back by itself, or it
                # committed: the batch's last row says which.
                if not c.execute("SELECT count(*) FROM tb_0031 WHERE id = ?",
                                 (top,)).fetchone()[0]:
                    raise
            return [(last + 1 + i, k) for i, k in enumerate(keys)]
        finally:
            c.close()


# ---- the run ----------------------------------------------------------------

class Chaos:
    """One chaos run in base_dir (see the module text)."""

    def __init__(self, base_dir, *, messages, keys, origins, seconds, seed,
                 settle, faults=FAULT_KINDS, kill=ROLES, links=LINK_ROLES,
                 out=print):
        if messages < origins:
            raise ChaosError(f"--messages {messages}: at least one per "
                             f"origin ({origins})")
        if keys < 1 or origins < 1 or seconds < 1 or settle < 1:
            raise ChaosError("--keys, --origins, --seconds and --settle "
                             "must be at least 1")
        for what, got, known in (("--faults", faults, FAULT_KINDS),
                                 ("--kill", kill, ROLES),
                                 ("--links", links, LINK_ROLES)):
            bad = [x for x in got if x not in known]
            if bad:
                raise ChaosError(f"{what}: unknown {', '.join(bad)} (known:"
                                 f" {','.join(known)})")
        self.faults = tuple(faults)
        self.kill_roles = tuple(kill)
        self.link_roles = tuple(links)
        self.dir = base_dir
        self.messages = messages
        self.nkeys = keys
        self.norigins = origins
        self.seconds = seconds
        self.seed = seed
        self.settle = settle
        self.out = out
        self.rng = random.Random(seed)
        self.res = ChaosResult()
        self.res.seed, self.res.seconds = seed, seconds
        self.res.messages, self.res.dir = messages, base_dir
        self.nodes = []
        self.proxies = {}  # node id -> its proxy to P
        self.down = {}  # node id -> Node killed, not yet restarted
        self.paused = set()  # node ids whose proxy is paused
        self.events = []  # heap of (time, n, what, fn)
        self.nevents = 0
        self.t0 = None
        self.timeline = open(os.path.join(base_dir, "faults.log"), "a")
        self.cut_cmds = 0
        self.link_cuts = 0  # of proxies already replaced
        self.link_stalls = 0

    # -- output --

    def now(self):
        return time.monotonic() - self.t0 if self.t0 else 0.0

    def note(self, text, echo=True):
        line = f"[{self.now():7.2f}] {text}"
        self.timeline.write(line + "\n")
        self.timeline.flush()
        if echo:
            self.out(line)

    def violation(self, text):
        self.res.violations.append(text)
        self.note(f"VIOLATION: {text.splitlines()[0]}")

    # -- setup --

    def setup(self):
        ids = [f"R{i + 1}" for i in range(self.norigins)]
        certs = make_certs(os.path.join(self.dir, "certs"),
                           ["P", DEST] + ids)
        self.p = Node("P", self.dir, certs, relay=True,
                      store_and_forward=True, journal=False,
                      node_options=dict(FAST))
        self.s = Node(DEST, self.dir, certs, listen=False,
                      node_options=dict(FAST), routes={"default": "P"})
        self.rs = [Node(i, self.dir, certs, listen=False, journal=False,
                        node_options=dict(FAST), routes={"default": "P"})
                   for i in ids]
        self.nodes = [self.p, self.s] + self.rs
        for k, n in enumerate(self.rs + [self.s]):
            faulty = self.role(n) in self.link_roles
            px = Proxy(os.path.join(self.dir, "proxies"), self.p.listen_port,
                       cut_min=PROXY_CUT[0] if faulty else 0,
                       cut_max=PROXY_CUT[1] if faulty else None,
                       stall_prob=PROXY_STALL_PROB if faulty else 0,
                       seed=(self.seed * 16 + k) % (2**63), name=f"{n.id}-P")
            connect(n, self.p, proxy=px, dialer_trusts=True)
            self.proxies[n.id] = px
        base, extra = divmod(self.messages, self.norigins)
        self.counts = {r.id: base + (1 if k < extra else 0)
                       for k, r in enumerate(self.rs)}

    def start(self):
        for px in self.proxies.values():
            px.start()
        self.p.start(timeout=READY_TIMEOUT)
        self.s.start(timeout=READY_TIMEOUT)
        for r in self.rs:
            r.start(timeout=READY_TIMEOUT)

    def role(self, node):
        return "R" if node in self.rs else node.id

    # -- events --

    def schedule(self, delay, what, fn):
        self.nevents += 1
        heapq.heappush(self.events, (self.now() + delay, self.nevents, what,
                                     fn))

    def run_due(self, all_now=False):
        while self.events and (all_now or self.events[0][0] <= self.now()):
            _, _, what, fn = heapq.heappop(self.events)
            fn()

    def restart(self, node):
        self.down.pop(node.id, None)
        t = time.monotonic()
        try:
            node.start(timeout=READY_TIMEOUT)
        except HarnessError as e:
            raise ChaosError(f"{node.id} did not come back after kill -9: "
                             f"{e}")
        self.note(f"restart {node.id} (ready in "
                  f"{time.monotonic() - t:.2f} s)")

    def resume(self, nid):
        self.paused.discard(nid)
        self.proxies[nid].resume()
        self.note(f"resume link {nid}-P")

    def check_alive(self):
        """A node that exited without being killed crashed: a violation;
        it is restarted so the run can go on and show the rest."""
        for n in self.nodes:
            if n.id in self.down or n.proc is None or n.alive():
                continue
            rc = n.proc.returncode
            self.violation(f"{n.id} exited by itself with {rc}; log:\n"
                           f"{n.log_tail(30)}")
            n.kill()  # reaps it
            self.restart(n)

    # -- faults --

    def inject(self):
        if not self.faults:
            return
        kinds = [k for k, _ in FAULT_WEIGHTS]
        kind = self.rng.choices(kinds, [w if k in self.faults else 0
                                        for k, w in FAULT_WEIGHTS])[0]
        # Drawn whatever the state, so the draws stay in step on replay.
        pick = self.rng.random()
        length = self.rng.uniform(*(KILL_PAUSE if kind == "kill"
                                    else PARTITION_LEN))
        if kind == "kill":
            up = [n for n in self.nodes if n.id not in self.down and
                  self.role(n) in self.kill_roles]
            if not up:
                self.note("kill: every node is down already; skipped")
                return
            n = up[int(pick * len(up))]
            rc = n.kill()
            if rc != -9:
                self.violation(f"{n.id} had exited with {rc} before its "
                               f"kill -9; log:\n{n.log_tail(30)}")
            self.down[n.id] = n
            self.res.kills[self.role(n)] += 1
            self.note(f"kill -9 {n.id}, restart in {length:.2f} s")
            self.schedule(length, f"restart {n.id}",
                          lambda n=n: self.restart(n))
        elif kind == "cut":
            ids = self.faulty_links()
            if not ids:
                self.note("cut: no link carries faults; skipped")
                return
            nid = ids[int(pick * len(ids))]
            self.proxies[nid].cut()
            self.cut_cmds += 1
            self.note(f"cut links {nid}-P")
        elif kind == "partition":
            free = [i for i in self.faulty_links() if i not in self.paused]
            if not free:
                self.note("partition: every link is paused already; "
                          "skipped")
                return
            nid = free[int(pick * len(free))]
            self.proxies[nid].pause()
            self.paused.add(nid)
            self.res.partitions += 1
            self.note(f"partition {nid} from P for {length:.2f} s")
            self.schedule(length, f"resume {nid}",
                          lambda nid=nid: self.resume(nid))
        else:  # isolate_p: every link of P (that carries faults) paused
            free = [i for i in self.faulty_links() if i not in self.paused]
            if not free:
                self.note("isolate P: every link is paused already; "
                          "skipped")
                return
            for nid in free:
                self.proxies[nid].pause()
                self.paused.add(nid)
                self.schedule(length, f"resume {nid}",
                              lambda nid=nid: self.resume(nid))
            self.res.partitions += 1
            self.note(f"partition P from {', '.join(free)} for "
                      f"{length:.2f} s")

    def faulty_links(self):
        return [n.id for n in self.rs + [self.s]
                if self.role(n) in self.link_roles]

    def fault_phase(self, enq):
        deadline = self.seconds
        next_fault = self.rng.uniform(*FAULT_GAP)
        while self.now() < deadline:
            self.run_due()
            self.check_alive()
            if enq.error:
                raise ChaosError(f"the applications failed:\n{enq.error}")
            if self.now() >= next_fault:
                self.inject()
                next_fault = self.now() + self.rng.uniform(*FAULT_GAP)
            wake = min([next_fault, deadline] +
                       [e[0] for e in self.events[:1]])
            time.sleep(max(0.0, min(0.05, wake - self.now())))
        self.note("fault deadline: restarting what is down, resuming what "
                  "is paused")
        self.run_due(all_now=True)
        self.check_alive()

    def calm_proxies(self):
        """Counts the proxies' cuts and stalls, then replaces each with a
        fault-free proxy on the same port (the settle phase has no
        faults)."""
        for nid, px in list(self.proxies.items()):
            self.link_cuts += px.stats()["cuts"]
            px.stop()
            with open(px.log, errors="replace") as f:
                self.link_stalls += sum(1 for ln in f
                                        if _STALL_LINE.search(ln))
            calm = Proxy(os.path.join(self.dir, "proxies"), px.to_port,
                         listen_port=px.port, name=px.name)
            calm.start()
            self.proxies[nid] = calm
        self.res.cuts, self.res.stalls = self.link_cuts, self.link_stalls
        self.note(f"proxies replaced by fault-free ones (links cut "
                  f"{self.link_cuts}, of them {self.cut_cmds} cut commands; "
                  f"links stalled {self.link_stalls})")

    # -- settling and checking --

    def state(self):
        """Where every check stands: (done, text, progress). progress is
        what only grows (or shrinks) towards the end: confirmed origin
        rows, journal rows, watermarks, and P's copies (negated); a status
        moving back and forth (a resend loop) is no progress."""
        parts, done, prog = [], True, []
        for r in self.rs:
            st = dict(r.sql("SELECT status, count(*) FROM tb_0031 WHERE "
                            "dest = ? GROUP BY status", (DEST,)))
            ok = st == {100: self.counts[r.id]}
            done = done and ok
            parts.append(f"{r.id} {st}")
            prog.append(st.get(100, 0))
        held = self.p.sql("SELECT count(*) FROM tb_0031")[0][0]
        done = done and held == 0
        parts.append(f"P copies {held}")
        prog.append(-held)
        wm = dict(self.s.sql("SELECT origin, confirmed_through FROM "
                             "semq_stream_in WHERE dest = ?", (DEST,)))
        # rows the watermark has not passed (those it passed stay for
        # receipt_retention)
        left = dict(self.s.sql(
            "SELECT t.origin, count(*) FROM tb_0030 t JOIN semq_stream_in w"
            " ON w.origin = t.origin AND w.dest = t.dest AND w.life = t.life"
            " WHERE t.dest = ? AND (t.seq > w.confirmed_through OR"
            " t.ack_status <> 1) GROUP BY t.origin", (DEST,)))
        redo = dict(self.s.sql("SELECT status, count(*) FROM tb_0033 "
                               "GROUP BY status"))
        for r in self.rs:
            done = done and wm.get(r.id, 0) == self.counts[r.id] and \
                left.get(r.id, 0) == 0
        done = done and not redo
        parts.append(f"S watermarks {wm} tb_0030 unsettled {left} tb_0033 "
                     f"{redo}")
        journal = self.s.journal_count()
        parts.append(f"journal {journal}")
        prog += [journal, sum(wm.values()), -sum(left.values())]
        return done, "; ".join(parts), tuple(prog)

    def settle_phase(self):
        t = time.monotonic()
        deadline = t + self.settle
        last_print = t
        last_prog, changed = None, t
        while True:
            self.check_alive()
            try:
                done, text, prog = self.state()
            except (sqlite3.Error, HarnessError) as e:
                done, text, prog = (False, f"({type(e).__name__}: {e})",
                                    last_prog)
            if done:
                self.res.settle_seconds = time.monotonic() - t
                self.note(f"settled in {self.res.settle_seconds:.1f} s: "
                          f"{text}")
                return True
            if prog != last_prog:
                last_prog, changed = prog, time.monotonic()
            if time.monotonic() >= deadline:
                self.violation(f"not settled within {self.settle} s after "
                               f"the faults: {text}")
                return False
            if time.monotonic() - changed >= STUCK_AFTER:
                self.violation(f"not settled: no progress for "
                               f"{STUCK_AFTER:g} s (at "
                               f"{time.monotonic() - t:.0f} s of the settle "
                               f"wait): {text}")
                return False
            if time.monotonic() - last_print >= 10:
                last_print = time.monotonic()
                self.note(f"settling: {text}")
            time.sleep(0.25)

    def check(self, keys):
        """The checks of the module text; fills lost/duplicated and the
        violations, with evidence for each lost or duplicated id."""
        origins = [r.id for r in self.rs]
        rows = self.s.sql("SELECT origin, seq, count(*) FROM journal WHERE "
                          "dest = ? GROUP BY origin, seq", (DEST,)) \
            if self.s.has_table("journal") else []
        seen = {(o, s): n for o, s, n in rows}
        lost = [(o, s) for o in origins for s in range(1, self.counts[o] + 1)
                if (o, s) not in seen]
        dups = sorted(((o, s), n) for (o, s), n in seen.items() if n > 1)
        self.res.lost = len(lost)
        self.res.duplicated = sum(n - 1 for _, n in dups)
        try:
            got = check_exactly_once(self.s, origins, self.counts, keys=keys)
            self.note(f"exactly once: {got['total']} journal rows, "
                      f"{got['keys']} (origin, key) pairs, key order kept")
        except HarnessError as e:
            self.violation(str(e))
        if lost:
            self.violation(f"{len(lost)} message(s) lost: "
                           f"{_ids(lost)}\n" + self.evidence(lost[:10]))
        if dups:
            self.violation(f"{self.res.duplicated} duplicate effect(s): " +
                           ", ".join(f"{msg_id(o, DEST, s)} x{n}"
                                     for (o, s), n in dups[:50]) + "\n" +
                           self.evidence([i for i, _ in dups[:10]]))
        for r in self.rs:
            st = dict(r.sql("SELECT status, count(*) FROM tb_0031 WHERE "
                            "dest = ? GROUP BY status", (DEST,)))
            if st != {100: self.counts[r.id]}:
                bad = r.sql("SELECT seq FROM tb_0031 WHERE dest = ? AND "
                            "status <> 100 ORDER BY seq LIMIT 20", (DEST,))
                self.violation(f"{r.id}: rows by status {st}, want all "
                               f"{self.counts[r.id]} at 100; first not at "
                               f"100: {[q for (q,) in bad]}")
            last = r.sql("SELECT max(acked_at) FROM tb_0031 WHERE dest = ?",
                         (DEST,))[0][0]
            if last is not None:
                at = last / 1000.0 - self.wall0
                self.res.last_confirm = max(self.res.last_confirm or at, at)
            res = dict(r.sql("SELECT coalesce(result, -1), count(*) FROM "
                             "tb_0031 WHERE dest = ? GROUP BY 1", (DEST,)))
            self.note(f"{r.id}: results {res} (0 processed, 2 duplicate)")
        held = self.p.sql("SELECT origin, dest, seq, status FROM tb_0031 "
                          "ORDER BY origin, seq LIMIT 20")
        if held:
            now = int(time.time() * 1000)
            by = self.p.sql(
                "SELECT origin, status, count(*), min(seq), max(seq), "
                "max(attempts), ? - max(sent_at), min(next_attempt_at) - ? "
                "FROM tb_0031 GROUP BY origin, status", (now, now))
            n = self.p.sql("SELECT count(*) FROM tb_0031")[0][0]
            # Copies P marked sent (4) of which S has no trace: sent,
            # lost on the way (a cut, S killed before its commit), and
            # not sent again.
            wm = dict(self.s.sql("SELECT origin, confirmed_through FROM "
                                 "semq_stream_in WHERE dest = ?", (DEST,)))
            rec = set(self.s.sql("SELECT origin, seq FROM tb_0030 WHERE "
                                 "dest = ?", (DEST,)))
            sent = self.p.sql("SELECT origin, seq FROM tb_0031 WHERE "
                              "dest = ? AND status = 4", (DEST,))
            unknown = [(o, q) for o, q in sent if (o, q) not in rec and
                       (o, q) not in seen and q > wm.get(o, 0)]
            self.violation(
                f"P still holds {n} relay copies; by (origin, status, "
                f"rows, min seq, max seq, max attempts, ms since the last "
                f"sent_at, ms to the first next_attempt_at): {by}; "
                f"{len(unknown)} of its {len(sent)} copies at status 4 "
                f"(sent) are unknown to S (no journal or tb_0030 row, "
                f"above the watermark): {_ids(unknown, 10)}; first "
                f"copies: {held}")
        redo = self.s.sql("SELECT origin, seq, status, tries, last_error "
                          "FROM tb_0033 ORDER BY id LIMIT 20")
        if redo:
            by = dict(self.s.sql("SELECT status, count(*) FROM tb_0033 "
                                 "GROUP BY status"))
            self.violation(f"S's tb_0033 is not empty {by} (no fail_rate: "
                           f"nothing should be pending); first: {redo}")
        wm = dict(self.s.sql("SELECT origin, confirmed_through FROM "
                             "semq_stream_in WHERE dest = ?", (DEST,)))
        for r in self.rs:
            if wm.get(r.id, 0) != self.counts[r.id]:
                self.violation(f"S's watermark of {r.id}->{DEST} is "
                               f"{wm.get(r.id, 0)}, want {self.counts[r.id]}")
        left = [(r.id, self.s.unsettled(r.id)) for r in self.rs]
        left = [x for x in left if x[1]]
        if left:
            self.violation(f"S's tb_0030 has rows above the watermark or "
                           f"not acknowledged: (origin, rows) {left}")

    def evidence(self, ids):
        """Each id's rows on every node and its log lines."""
        out = []
        logs = {n.id: n.log_text().splitlines() for n in self.nodes}
        for o, s in ids:
            mid = msg_id(o, DEST, s)
            r = next(x for x in self.rs if x.id == o)
            out.append(f"  -- {mid}")
            out.append("     origin tb_0031 (status, result, attempts, "
                       "last_error, sent_at, acked_at): " + repr(r.sql(
                           "SELECT status, result, attempts, last_error, "
                           "sent_at, acked_at FROM tb_0031 WHERE origin = ? "
                           "AND dest = ? AND seq = ?", (o, DEST, s))))
            out.append("     P tb_0031 (status, attempts, last_error): " +
                       repr(self.p.sql("SELECT status, attempts, last_error "
                                       "FROM tb_0031 WHERE origin = ? AND "
                                       "dest = ? AND seq = ?", (o, DEST, s))))
            for table, cols in (("tb_0030", "result, ack_status, via, "
                                 "confirm_need, confirm_got, received_at"),
                                ("tb_0033", "status, tries, last_error"),
                                ("journal", "id, msg_key, handled_at")):
                try:
                    got = self.s.sql(f"SELECT {cols} FROM {table} WHERE "
                                     "origin = ? AND dest = ? AND seq = ?",
                                     (o, DEST, s))
                except sqlite3.Error as e:
                    got = f"({e})"
                out.append(f"     S {table} ({cols}): {got!r}")
            pat = re.compile(re.escape(mid) + r"(?!\d)")
            for nid, lines in logs.items():
                hits = [ln for ln in lines if pat.search(ln)]
                for ln in hits[:8]:
                    out.append(f"     {nid} log: {ln}")
                if len(hits) > 8:
                    out.append(f"     {nid} log: ... {len(hits) - 8} more")
        return "\n".join(out)

    # -- the whole run --

    def run(self):
        self.out(f"CHAOS seed {self.seed} (replay with --seed {self.seed} "
                 f"or SEMQ_CHAOS_SEED={self.seed}); dir {self.dir}")
        self.setup()
        self.start()
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.note(f"started P, {DEST}, {', '.join(r.id for r in self.rs)}; "
                  f"{self.messages} messages over {self.nkeys} keys per "
                  f"origin {self.counts}, sent over the first "
                  f"{ENQUEUE_SHARE * self.seconds:.0f} s, faults for "
                  f"{self.seconds} s")
        enq = Enqueuer(self.rs, self.counts, self.nkeys,
                       ENQUEUE_SHARE * self.seconds,
                       random.Random(self.seed ^ 0x5EED))
        enq.start()
        try:
            self.fault_phase(enq)
            self.calm_proxies()
            enq.join(timeout=ENQUEUE_GIVE_UP + 60)
            if enq.is_alive():
                raise ChaosError(f"the applications did not finish "
                                 f"enqueuing: {enq.done} of {self.counts}")
            if enq.error:
                raise ChaosError(f"the applications failed:\n{enq.error}")
            self.res.send_end = enq.end - self.t0 if enq.end else None
            self.note(f"enqueued {sum(enq.done.values())} in "
                      f"{enq.batches} transactions ({enq.retries} busy "
                      f"retries), the last at {_n(self.res.send_end, 1)} s")
            self.settle_phase()
            self.check(enq.keys)
            for n in self.nodes:
                try:
                    n.stop(timeout=STOP_TIMEOUT)
                except HarnessError as e:
                    self.violation(f"{n.id} did not stop cleanly: {e}")
            for px in self.proxies.values():
                px.stop()
        finally:
            enq.stop_flag.set()
            enq.join(timeout=ENQUEUE_GIVE_UP + 60)
            semqtest.stop_all()
        return self.res


def _ids(ids, limit=50):
    s = ", ".join(msg_id(o, DEST, q) for o, q in ids[:limit])
    return s + (f", ... ({len(ids) - limit} more)" if len(ids) > limit
                else "")


def run_chaos(base_dir, *, messages=50000, keys=500, origins=2, seconds=120,
              seed=None, settle=300, faults=FAULT_KINDS, kill=ROLES,
              links=LINK_ROLES, out=print):
    """One chaos run in base_dir (created if needed, never removed here).
    Returns a ChaosResult; .violations lists what went wrong, .report is
    the text to print (also in base_dir/report.txt). Raises ChaosError
    when the run itself could not be carried out, HarnessError when a
    harness operation failed (a node not starting: also a violation)."""
    if seed is None:
        seed = random.SystemRandom().randrange(1, 2**31)
    os.makedirs(base_dir, exist_ok=True)
    t = time.monotonic()
    c = Chaos(base_dir, messages=messages, keys=keys, origins=origins,
              seconds=seconds, seed=seed, settle=settle, faults=faults,
              kill=kill, links=links, out=out)
    try:
        res = c.run()
    except (ChaosError, HarnessError) as e:
        # A node that would not restart, the applications failing: the
        # run stops there; what it found so far is reported.
        res = c.res
        c.violation(f"run aborted: {type(e).__name__}: {e}")
    finally:
        c.timeline.close()
    res.wall_seconds = time.monotonic() - t
    lines = []
    if res.violations:
        lines.append(f"CHAOS FAILED: {len(res.violations)} violation(s); "
                     f"replay with --seed {seed}; faults in "
                     f"{os.path.join(base_dir, 'faults.log')}")
        for v in res.violations:
            lines.append("  * " + v.replace("\n", "\n    "))
        lines.append("log tails:")
        for n in c.nodes:
            lines.append(n.log_tail(25))
    else:
        lines.append(f"CHAOS OK in {res.wall_seconds:.0f} s: the last "
                     f"message was enqueued at {_n(res.send_end, 1)} s and "
                     f"confirmed at {_n(res.last_confirm, 1)} s; faults "
                     f"ended at {res.seconds} s; settled "
                     f"{res.settle_seconds:.1f} s after them")
    lines.append(res.line)
    res.report = "\n".join(lines)
    with open(os.path.join(base_dir, "report.txt"), "w") as f:
        f.write(res.report + "\n")
    return res


def _list(text):
    return tuple(x.strip() for x in text.split(",") if x.strip())


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="SEMQ chaos driver: R -> P -> S under kill -9 and link "
        "faults; checks exactly once and key order at the end.")
    ap.add_argument("--messages", type=int, default=50000,
                    help="messages in all, shared by the origins")
    ap.add_argument("--keys", type=int, default=500,
                    help="keys in each origin's stream")
    ap.add_argument("--origins", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=120,
                    help="how long faults are injected")
    ap.add_argument("--settle", type=int, default=300,
                    help="bound of the wait for the system to settle")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--faults", default=",".join(FAULT_KINDS),
                    help="the driver's faults to inject (default: all of "
                    f"{','.join(FAULT_KINDS)})")
    ap.add_argument("--kill", default=",".join(ROLES),
                    help="whose nodes may be killed (default R,P,S)")
    ap.add_argument("--links", default=",".join(LINK_ROLES),
                    help="whose links to P carry faults, the proxies' own "
                    "and the driver's (default R,S)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the run directory after a clean run too")
    ap.add_argument("--dir", default=None,
                    help="parent of the run directory (default $TMPDIR)")
    ap.add_argument("--build-dir", default=None,
                    help="where semqd, semqctl, plugins/journal.so and "
                    "tests/faultproxy are (default $SEMQ_BUILD_DIR or "
                    "build/)")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else \
        random.SystemRandom().randrange(1, 2**31)
    d = tempfile.mkdtemp(prefix="semq-chaos-", dir=a.dir)
    try:
        res = run_chaos(d, messages=a.messages, keys=a.keys,
                        origins=a.origins, seconds=a.seconds, seed=seed,
                        settle=a.settle, faults=_list(a.faults),
                        kill=_list(a.kill), links=_list(a.links))
    except (ChaosError, HarnessError) as e:
        print(f"CHAOS ABORTED (seed {seed}): {e}\nkept {d}", flush=True)
        return 2
    print(res.report, flush=True)
    if res.violations or a.keep:
        print(f"kept {d}", flush=True)
    else:
        shutil.rmtree(d, ignore_errors=True)
    return 1 if res.violations else 0


if __name__ == "__main__":
    sys.exit(main())
