# SPDX-License-Identifier: MIT
"""Mosquitto QoS 2 beside SEMQ, for `tools/semq-bench --compare mosquitto`.

Three networks of Debian's `mosquitto` broker, started here on free loopback
ports in the benchmark's temporary directory, each measured with the same
message count and size as SEMQ's runs by tools/mqtt-load (a libmosquitto
publisher and subscriber, QoS 2, at most 20 messages in flight):

  one                one broker: publisher -> broker -> subscriber
  bridged            publisher -> broker A -> bridge (QoS 2) -> broker B ->
                     subscriber, every setting at the broker's default
  bridged_inflight0  the same with `max_inflight_messages 0` on both
                     brokers of the bridge

The rate is messages received / seconds from the first publish to the last
message the subscriber received. Loss is counted: the client waits until
every message is received, or until nothing has moved for IDLE_S seconds;
what never arrived is lost. Brokers are stopped on every exit path (each
run's finally, and stop_all() for an interrupt between).

DESIGN
  - Persistence is off (`persistence false`, the broker's own default).
    Debian's /etc/mosquitto/mosquitto.conf turns it on, but that only saves
    a snapshot of memory every autosave_interval (1800 s) and at exit: no
    message is written before it is acknowledged either way, so a run of a
    few seconds measures the same broker; off keeps the temporary
    directory free of snapshots.
  - `max_inflight_messages 0` on both brokers of the bridge: it is a
    global option of a broker (2.0.11 has no per-bridge one) and bounds
    what a broker sends to and accepts from each client, the bridge
    included. In one run at load ~4, 0 on broker A alone lost 3,757 of
    40,000 with neither broker logging a drop, 0 on both lost none. It
    does not make the bridge lossless: at load ~9 (and in the benchmark's
    own rounds) 0 on both still lost 5,000-20,000 of 40,000, with A
    logging "Outgoing messages are being dropped for client
    local.vm.bench" (its queue for the bridge past max_queued_messages,
    1000). With the defaults A logs the same.
  - Otherwise the brokers run with their defaults (max_queued_messages
    1000, max_inflight_messages 20, Nagle on). `set_tcp_nodelay true` was
    tried: 3 interleaved rounds of 20,000 x 1 KB on one broker gave
    10.7k/15.3k/17.7k msgs/s with it and 11.8k/13.0k/15.3k without, and
    more broker CPU with it (0.46-0.81 s against 0.37-0.42 s): no
    measurable gain on a noisy machine, so the default stays. The client
    sets TCP_NODELAY on its own sockets.
  - A broker drops QoS 2 messages when a subscriber's queue passes
    max_queued_messages, one broker too (seen: 502 of 20,000 in one run
    above), so loss is counted in every variant, not only the bridged one.
"""

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))

import semqtest  # noqa: E402

INFLIGHT = 20  # the client: 20 in flight
IDLE_S = 10  # no progress for this long ends a run; the rest is lost
START_S = 10.0  # a broker listens within this
INSTALL = ("sudo bash -c '. tools/deps.sh && semq_install_mosquitto' "
           "and build again (cmake finds libmosquitto, builds mqtt-load)")
VARIANTS = (
    ("one", "Mosquitto QoS 2, one broker"),
    ("bridged", "Mosquitto QoS 2, two bridged brokers"),
    ("bridged_inflight0", "Mosquitto QoS 2 bridged, max_inflight_messages 0"),
)
CLK_TCK = os.sysconf("SC_CLK_TCK")

_LIVE = []  # Brokers started and not yet stopped


class MosquittoError(Exception):
    pass


def missing(build):
    """A usage error's text when the broker or the client is missing, with
    what to run; None when both are there."""
    if shutil.which("mosquitto") is None and \
            not os.path.isfile("/usr/sbin/mosquitto"):
        return f"--compare mosquitto: no mosquitto broker; run: {INSTALL}"
    if not os.path.isfile(client_path(build)):
        return (f"--compare mosquitto: no mqtt-load in --build {build}; "
                f"run: {INSTALL}")
    return None


def client_path(build):
    return os.path.join(build, "mqtt-load")


def broker_program():
    return shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def broker_version():
    """'2.0.11' from `mosquitto -h`'s first line ('?' when unreadable)."""
    try:
        p = subprocess.run([broker_program(), "-h"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "?"
    first = (p.stdout or p.stderr).splitlines()[:1]
    words = first[0].split() if first else []
    return words[-1] if words else "?"


def _cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Broker:
    """One `mosquitto -c NAME.conf` on a free loopback port, in dir."""

    def __init__(self, name, dir, extra=()):
        self.name = name
        self.dir = dir
        self.port = semqtest.free_port()
        self.conf = os.path.join(dir, f"{name}.conf")
        self.log = os.path.join(dir, f"{name}.log")
        self.proc = None
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous true",
                 "persistence false"]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines + list(extra)) + "\n")

    def start(self):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [broker_program(), "-c", self.conf], cwd=self.dir,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                preexec_fn=semqtest._pdeathsig)
        _LIVE.append(self)
        deadline = time.monotonic() + START_S
        while not semqtest._listening(self.port):
            if self.proc.poll() is not None:
                raise MosquittoError(f"broker {self.name} exited with "
                                     f"{self.proc.returncode}:\n"
                                     f"{self.tail()}")
            if time.monotonic() > deadline:
                raise MosquittoError(f"broker {self.name} does not listen "
                                     f"on port {self.port} after "
                                     f"{START_S:g} s:\n{self.tail()}")
            time.sleep(0.05)
        return self

    def cpu_s(self):
        return _cpu_s(self.proc.pid) if self.proc else None

    def tail(self, n=15):
        return f"--- {self.log}\n" + semqtest._tail(self.log, n)

    def stop(self):
        if self in _LIVE:
            _LIVE.remove(self)
        if self.proc is not None and self.proc.poll() is None:
            semqtest._terminate(self.proc, 10)


def stop_all():
    """Stops every broker still running (interrupts, failures)."""
    while _LIVE:
        b = _LIVE.pop()
        try:
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGKILL)
                b.proc.wait(timeout=10)
        except (OSError, subprocess.SubprocessError) as e:
            print(f"semq-bench: cleanup of broker {b.name} failed: {e}",
                  file=sys.stderr)


def brokers(variant, dir):
    """(publisher's broker, subscriber's broker, all brokers with the
    subscriber's first, the order they start in) of variant, not started."""
    if variant == "one":
        one = Broker("one", dir)
        return one, one, [one]
    zero = (["max_inflight_messages 0"] if variant == "bridged_inflight0"
            else [])
    b = Broker("b", dir, zero)
    # The bridge: A's clients' messages on semq-bench/# go to B at QoS 2.
    extra = zero + ["connection bench-bridge", f"address 127.0.0.1:{b.port}",
                    "topic semq-bench/# out 2"]
    a = Broker("a", dir, extra)
    return a, b, [b, a]


def run_variant(variant, label, dir, build, n, size, progress):
    """One measured run of variant: brokers started, mqtt-load run,
    brokers stopped. Returns the client's JSON with the brokers' CPU."""
    os.makedirs(dir, exist_ok=True)
    pub, sub, all_ = brokers(variant, dir)
    try:
        for b in all_:
            b.start()
        cpu0 = {b.name: b.cpu_s() for b in all_}
        t0 = time.monotonic()
        cmd = [client_path(build), "--pub", f"127.0.0.1:{pub.port}",
               "--sub", f"127.0.0.1:{sub.port}", "--messages", str(n),
               "--size", str(size), "--inflight", str(INFLIGHT),
               "--idle", str(IDLE_S), "--progress"]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=semqtest._pdeathsig)
        errors = []
        try:
            for line in proc.stderr:
                f = line.split()
                if len(f) == 4 and f[0] == "progress":
                    progress.update(label, int(f[2]), n,
                                    time.monotonic() - t0,
                                    f"  (completed {int(f[1]):,})")
                else:
                    errors.append(line.rstrip("\n"))
            out = proc.stdout.read()
            rc = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            progress.done()
        cpu = {b.name: round(b.cpu_s() - cpu0[b.name], 3) for b in all_}
        if rc != 0:
            raise MosquittoError(
                f"{label}: mqtt-load exited {rc}: {' '.join(errors)}\n" +
                "\n".join(b.tail() for b in all_))
        try:
            res = json.loads(out)
        except ValueError:
            raise MosquittoError(f"{label}: mqtt-load printed {out!r}")
    finally:
        for b in all_:
            b.stop()
    res["variant"] = variant
    res["broker_cpu_s"] = cpu
    per_10k = 1e4 / max(1, res["received"])
    res["broker_cpu_s_per_10k"] = {k: round(v * per_10k, 3)
                                   for k, v in cpu.items()}
    res["client_cpu_s_per_10k"] = round(res["cpu_s"] * per_10k, 3)
    return res


def run_all(work, build, n, size, progress, round_no):
    """The three variants, in order, for one round."""
    out = {}
    for variant, label in VARIANTS:
        d = os.path.join(work, f"mosquitto-{round_no}-{variant}")
        out[variant] = run_variant(variant, label, d, build, n, size,
                                   progress)
    return out


def _semq_peak(rnd, topo):
    """The peak run of topo in a round (None without one)."""
    for t in rnd.get("topologies", []):
        if t["topology"] == topo:
            for r in t["runs"]:
                if r["kind"] == "peak":
                    return r
    return None


def compare(rounds):
    """Medians over rounds of SEMQ's peak rates, the ceiling and each
    variant, each round's figure, and SEMQ's ratio to each variant."""
    def med(xs, digits=1):
        xs = [x for x in xs if x is not None]
        return round(statistics.median(xs), digits) if xs else None

    rows = {}
    ceil = [r.get("ceiling", {}).get("1000", {}).get("rows_per_s")
            for r in rounds]
    if any(ceil):
        rows["ceiling"] = {"rounds": ceil, "median": med(ceil)}
    for topo in ("rs", "rps"):
        runs = [_semq_peak(r, topo) for r in rounds]
        if not any(runs):
            continue
        rows[topo] = {
            "rounds": [x and x["rate_effect"] for x in runs],
            "median": med([x and x["rate_effect"] for x in runs]),
            "nodes_cpu_s_per_10k": med([x and sum(
                v["cpu_s_per_10k"] for v in x["usage"]["nodes"].values())
                for x in runs], 3),
            "app_cpu_s_per_10k": med([x and x["usage"]["app_cpu_s_per_10k"]
                                      for x in runs], 3)}
    for variant, _ in VARIANTS:
        rr = [r["mosquitto"][variant] for r in rounds]
        rows[variant] = {
            "rounds": [x["rate"] for x in rr], "median":
            med([x["rate"] for x in rr]),
            "lost": [x["lost"] for x in rr],
            "duplicates": [x["duplicates"] for x in rr],
            "out_of_order": [x["out_of_order"] for x in rr],
            "broker_cpu_s_per_10k": med([sum(
                x["broker_cpu_s_per_10k"].values()) for x in rr], 3),
            "client_cpu_s_per_10k": med([x["client_cpu_s_per_10k"]
                                         for x in rr], 3)}
    ratios = {}
    for topo in ("rs", "rps"):
        if topo not in rows:
            continue
        ratios[topo] = {v: round(rows[topo]["median"] / rows[v]["median"], 2)
                        if rows[v]["median"] else None for v, _ in VARIANTS}
    first = rounds[0]["mosquitto"]["one"]
    return {"broker": f"mosquitto {broker_version()}",
            "messages": first["messages"], "size": first["size"],
            "inflight": first["inflight"], "idle_s": first["idle_s"],
            "rounds": len(rounds), "rows": rows, "ratios": ratios}


def targets(cmp):
    """The issue's two ratio targets, on the medians."""
    out = []
    for topo, variant, want in (("rs", "one", 4.0),
                                ("rps", "bridged_inflight0", 3.0)):
        v = cmp["ratios"].get(topo, {}).get(variant)
        if v is not None:
            name = dict(VARIANTS)[variant].replace("Mosquitto QoS 2", "")
            out.append({"target": f"{topo}: rate >= {want:g} x Mosquitto "
                        f"QoS 2{name.rstrip()} (median)",
                        "measured": v, "met": v >= want})
    return out


def _lost(xs):
    lo, hi = min(xs), max(xs)
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


def print_text(cmp):
    n = len(cmp["rows"].get("one", {}).get("rounds", []))
    print(f"comparison with {cmp['broker']} ({cmp['messages']:,} x "
          f"{cmp['size']:,} B, QoS 2, {cmp['inflight']} in flight; median "
          f"of {n} round{'s' if n != 1 else ''}, each round in brackets):")
    names = {"ceiling": "SQLite ceiling, batch 1000",
             "rs": "SEMQ R -> S, peak to effect",
             "rps": "SEMQ R -> P -> S, peak to effect"}
    names.update({v: label for v, label in VARIANTS})
    for key in ("ceiling", "rs", "rps") + tuple(v for v, _ in VARIANTS):
        row = cmp["rows"].get(key)
        if row is None:
            continue
        each = ", ".join("-" if x is None else f"{x:,.0f}"
                         for x in row["rounds"])
        line = (f"  {names[key]:<50} {row['median'] or 0:>9,.0f} msgs/s  "
                f"[{each}]")
        if "nodes_cpu_s_per_10k" in row:
            line += (f"  CPU s/10k: nodes {row['nodes_cpu_s_per_10k']:.2f}, "
                     f"application {row['app_cpu_s_per_10k']:.2f}")
        if "lost" in row:
            line += f"  lost {_lost(row['lost'])} of {cmp['messages']:,}"
            dup, ooo = sum(row["duplicates"]), sum(row["out_of_order"])
            if dup or ooo:
                line += f", {dup:,} duplicates, {ooo:,} out of order"
            line += (f"; CPU s/10k: brokers "
                     f"{row['broker_cpu_s_per_10k']:.2f}, client "
                     f"{row['client_cpu_s_per_10k']:.2f}")
        print(line)
    for topo in ("rs", "rps"):
        r = cmp["ratios"].get(topo)
        if r is None:
            continue
        print(f"  SEMQ {names[topo][5:].split(',')[0]} / Mosquitto: " +
              ", ".join(("-" if r[v] is None else f"{r[v]:.2f}") +
                        f"x {v}" for v, _ in VARIANTS))
