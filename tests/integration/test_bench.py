# SPDX-License-Identifier: MIT
"""tools/semq-bench, small: the benchmark is a tool people run, so its two
ways of working are run here on real nodes (never timed: only what it
reports and checks is asserted).

  1. It starts its own R -> S network, measures a peak run of a few hundred
     messages and reports them delivered exactly once, with each node's CPU,
     memory and batch counters.
  2. --use measures a network it did not start (ids other than R and S, so
     nothing depends on the names): it writes into the origin's database,
     reads the destination's journal, finds each semqd by its -c argument,
     and leaves both nodes running.
  3. --use refuses what it cannot measure with exit 2 and a message naming
     the culprit: one config, --backlog, a node that is not running, a
     destination without the journal plugin.
  4. --compare takes only mosquitto, and only with peak runs of payloads
     of 8 bytes or more; --rounds 1..100 (exit 2). The comparison itself
     needs Mosquitto, which the test machines do not install: it is run
     by hand (docs/PERFORMANCE.md).
  5. --db postgresql starts a PostgreSQL cluster of its own, measures the
     pgbench ceiling (both variants), runs R1, R2 -> S with S as one and as
     two instances on one database (each instance works on a stream of its
     own: the relay hash puts R1's and R2's streams on different ones),
     reports the server's CPU and WAL and each run's ratio to the ceiling,
     and leaves no cluster behind; its options' usage errors exit 2.

Run by ctest as integration_bench, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_bench.py [NAME]
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import HarnessError, connect, run, test  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BENCH = os.path.join(SOURCE_DIR, "tools", "semq-bench")
MESSAGES = 300
BENCH_TIMEOUT = 300  # a few hundred messages, on a slow sanitizer build too


def build_dir():
    """The build directory semqd comes from (what --build names)."""
    return os.path.dirname(os.environ.get("SEMQD") or os.path.join(
        os.environ.get("SEMQ_BUILD_DIR", "build"), "semqd"))


def pg_python():
    """An interpreter for semq-bench --db postgresql: this one when it has
    psycopg2, else Debian's /usr/bin/python3 when it has (tools/deps.sh
    installs python3-psycopg2 for it; another python3, e.g. pyenv's, may
    come first in PATH); else this one, and semq-bench says what is
    missing."""
    for py in (sys.executable, "/usr/bin/python3"):
        if os.access(py, os.X_OK) and subprocess.run(
                [py, "-c", "import psycopg2"],
                capture_output=True).returncode == 0:
            return py
    return sys.executable


def bench(t, *args):
    """Runs semq-bench; returns (exit code, stdout, stderr)."""
    py = pg_python() if "postgresql" in args else sys.executable
    p = subprocess.run([py, BENCH, *args], cwd=t.dir,
                       stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=BENCH_TIMEOUT)
    return p.returncode, p.stdout, p.stderr


def bench_json(t, *args):
    rc, out, err = bench(t, *args, "--json", "--dir", t.dir)
    if rc != 0:
        raise HarnessError(f"semq-bench {' '.join(args)} exited {rc}:\n"
                           f"{err[-3000:]}\n{t.logs()}")
    return json.loads(out)


def check_peak(res, ids):
    """One topology with one peak run of MESSAGES, exactly once, with the
    usage of every node in ids."""
    if len(res["topologies"]) != 1:
        raise HarnessError(f"{len(res['topologies'])} topologies measured")
    runs = res["topologies"][0]["runs"]
    if [r["kind"] for r in runs] != ["peak"]:
        raise HarnessError(f"runs {[r['kind'] for r in runs]}, not [peak]")
    r = runs[0]
    if r["messages"] != MESSAGES or r["exactly_once"] != "ok":
        raise HarnessError(f"run reports {r['messages']} messages, "
                           f"exactly_once {r['exactly_once']!r}")
    if not r["rate_effect"] or r["rate_effect"] <= 0:
        raise HarnessError(f"rate_effect {r['rate_effect']!r}")
    if r["latency_commit_ms"]["n"] != MESSAGES:
        raise HarnessError(f"latency of {r['latency_commit_ms']['n']} "
                           f"messages, not {MESSAGES}")
    nodes = r["usage"]["nodes"]
    if sorted(nodes) != sorted(ids):
        raise HarnessError(f"usage of nodes {sorted(nodes)}, not "
                           f"{sorted(ids)}")
    for nid, v in nodes.items():
        if v["peak_rss_mb"] <= 0 or v["cpu_s"] < 0:
            raise HarnessError(f"{nid}: usage {v}")
        if v.get("batches", {}).get("transactions", 0) <= 0:
            raise HarnessError(f"{nid}: no batch counters from /metrics: "
                               f"{v}")
    return r


@test(timeout=400)
def bench_starts_its_own_network(t):
    res = bench_json(t, "--build", build_dir(), "--topology", "rs",
                     "--messages", str(MESSAGES), "--skip-latency",
                     "--no-ceiling")
    check_peak(res, ["R", "S"])
    if res["topologies"][0].get("running_nodes"):
        raise HarnessError("a network of its own reported as running nodes")


def running_pair(t):
    """shop7 (origin, dials) and hq (journal plugin), both with admin HTTP,
    started."""
    certs = t.certs(["shop7", "hq"])
    hq = t.node("hq", certs, admin=True)
    shop = t.node("shop7", certs, listen=False, journal=False, admin=True)
    connect(shop, hq)
    hq.start()
    shop.start()
    return shop, hq


@test(timeout=400)
def bench_measures_running_nodes(t):
    shop, hq = running_pair(t)
    res = bench_json(t, "--use", f"{shop.ini},{hq.ini}", "--messages",
                     str(MESSAGES), "--skip-latency", "--no-ceiling")
    check_peak(res, ["shop7", "hq"])
    topo = res["topologies"][0]
    if topo["topology"] != "rs":
        raise HarnessError(f"topology {topo['topology']}, not rs")
    used = topo.get("running_nodes", {})
    if {k: v["pid"] for k, v in used.items()} != {"shop7": shop.pid,
                                                    "hq": hq.pid}:
        raise HarnessError(f"running nodes {used}, not shop7 pid "
                           f"{shop.pid} and hq pid {hq.pid}")
    # The warm-up message and the run's, each once, in hq's journal.
    rows = hq.sql("SELECT count(*), count(DISTINCT seq) FROM journal "
                  "WHERE origin = 'shop7' AND dest = 'hq'")[0]
    if rows != (MESSAGES + 1, MESSAGES + 1):
        raise HarnessError(f"hq's journal: {rows[0]} rows, {rows[1]} "
                           f"seqs; expected {MESSAGES + 1} of each")
    for n in (shop, hq):
        if not n.alive():
            raise HarnessError(f"{n.id} is not running after the "
                               f"benchmark:\n{n.log_tail()}")
    # A second run on the same nodes continues the stream.
    res = bench_json(t, "--use", f"{shop.ini},{hq.ini}", "--messages",
                     str(MESSAGES), "--skip-latency", "--no-ceiling")
    check_peak(res, ["shop7", "hq"])


def refused(t, args, want):
    rc, out, err = bench(t, *args)
    if rc != 2 or want not in err:
        raise HarnessError(f"semq-bench {' '.join(args)}: exit {rc}, "
                           f"stderr {err!r}; expected exit 2 and "
                           f"{want!r}")


@test(timeout=300)
def bench_use_refuses_what_it_cannot_measure(t):
    shop, hq = running_pair(t)
    bare = t.node("bare", t.certs(["bare"]), journal=False)
    bare.start()
    pair = f"{shop.ini},{hq.ini}"
    refused(t, ["--use", shop.ini], "name two configs")
    refused(t, ["--use", pair, "--backlog"], "cannot be combined with "
            "--backlog")
    refused(t, ["--use", pair, "--topology", "rps"],
            "--use names a rs network")
    refused(t, ["--use", f"{shop.ini},{bare.ini}"], f"--use {bare.ini}: "
            "bare's database has no journal table")
    shop.stop()
    refused(t, ["--use", pair], f"--use {shop.ini}: no single running "
            "semqd")
    refused(t, ["--use", f"{shop.ini},{t.path('nope.ini')}"],
            f"--use {t.path('nope.ini')}: No such file")


@test(timeout=60)
def bench_compare_refuses_what_it_cannot_compare(t):
    # Refused before Mosquitto is looked for: the same with or without it.
    refused(t, ["--compare", "rabbitmq"], "--compare rabbitmq: the one "
            "broker to compare with is 'mosquitto'")
    refused(t, ["--compare", "mosquitto", "--backlog"], "cannot be "
            "combined with --backlog, --rate or --ceiling-only")
    refused(t, ["--compare", "mosquitto", "--size", "7"], "--size 7: "
            "--compare mosquitto needs 8 bytes or more")
    refused(t, ["--rounds", "0"], "--rounds 0: use 1..100")


@test(timeout=400)
def bench_postgresql_instances(t):
    refused(t, ["--instances", "1,2"], "--instances: only with --db "
            "postgresql")
    refused(t, ["--db", "postgresql", "--instances", "1,0"],
            "--instances '1,0': use distinct counts 1..8")
    refused(t, ["--db", "postgresql", "--instances", "2", "--backlog"],
            "--instances '2': --backlog starts one S instance")
    refused(t, ["--db", "postgresql", "--pg-seconds", "0"],
            "--pg-seconds 0: use 1..3600")
    refused(t, ["--origins", "0"], "--origins 0: use 1..16")
    # --txn: transactions of 50, so that each origin gets three of them
    # (one of 1000 would all go to R1, the first in turn).
    res = bench_json(t, "--build", build_dir(), "--db", "postgresql",
                     "--topology", "rs", "--origins", "2", "--instances",
                     "1,2", "--messages", str(MESSAGES), "--txn", "50",
                     "--skip-latency", "--pg-seconds", "1")
    if "ceiling" in res:
        raise HarnessError("--db postgresql measured the SQLite ceiling")
    for k in ("one_insert", "statements"):
        c = res["pg_ceiling"][k]
        if c["rows"] <= 0 or c["rows"] % 100 or c["rows_per_s"] <= 0 or \
                c["clients"] != 4 or c["server"]["cpu_s"] <= 0 or \
                c["server"]["wal_bytes_per_msg"] < 1024:
            raise HarnessError(f"pgbench ceiling {k}: {c}")
    topos = res["topologies"]
    got = [(x["topology"], x.get("instances")) for x in topos]
    if got != [("rs", 1), ("rs", 2)]:
        raise HarnessError(f"topologies and instances {got}")
    for x, ids in zip(topos, (["R1", "R2", "S-a"],
                              ["R1", "R2", "S-a", "S-b"])):
        r = check_peak(dict(res, topologies=[x]), ids)
        if not r.get("ratio_to_pg_ceiling"):
            raise HarnessError(f"no ratio to the PostgreSQL ceiling: {r}")
        srv = r["usage"].get("postgres", {})
        if srv.get("cpu_s", 0) <= 0 or srv.get("wal_bytes_per_msg", 0) <= 0 \
                or srv.get("xids_per_10k", 0) <= 0:
            raise HarnessError(f"PostgreSQL server usage {srv}")
        for nid in ids:
            b = r["usage"]["nodes"][nid]["batches"]
            if b["batches_with_messages"] <= 0:
                raise HarnessError(f"{nid} carried no messages: {b}")
    pgdir = res["postgresql"]["dir"]
    if os.path.exists(pgdir):
        raise HarnessError(f"the benchmark's cluster {pgdir} is still there")
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pgdir in cmd:
            raise HarnessError(f"pid {pid} still runs in {pgdir}: {cmd}")


if __name__ == "__main__":
    run()
