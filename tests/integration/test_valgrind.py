# SPDX-License-Identifier: MIT
"""Two real semqd nodes under valgrind memcheck (hostile-input campaign).

An origin R dials a receiver S (journal plugin) over mutual TLS on loopback,
both daemons running under valgrind's memcheck. The run walks the daemon's
main paths so that memcheck sees them:

  - 500 keyed messages R -> S (the send window, group commits, 810 frames,
    the watermark's compaction);
  - injected RETRY failures (journal fail_rate, fixed seed) so that messages
    go to tb_0033, wait behind their key and are retried from the timing
    wheel, and one message whose key is in permanent_keys, dead at once;
  - an in-doubt row: R is stopped, one confirmed row is put back to status 4
    (sent, answer unknown), R starts again and resolves it with a Query;
  - SIGTERM of both nodes (the clean shutdown path, plugin fini, frees).

It then asserts that every daemon exited 0 (valgrind's --error-exitcode
would make it 99) and that every valgrind log of both nodes says
"ERROR SUMMARY: 0 errors" with nothing definitely, indirectly or possibly
lost; on a failure the message carries the log's error records and stacks.

Valgrind runs the daemon through a small wrapper script that this test
writes and puts in $SEMQD, so the harness (semqtest.py) stays as it is: the
wrapper execs `valgrind OPTIONS --log-file=NODE_DIR/valgrind.%p.log semqd`.
No suppression is needed today (the logs are clean without one). Should a
documented false positive of a system library (OpenSSL, libevent, dlopen)
ever need one, it goes, with a comment saying why, in
tests/integration/valgrind.supp, which the wrapper passes when the file
exists; nothing in SEMQ's own code is ever suppressed.

Needs valgrind (tools/deps.sh installs it). Not run in a SEMQ_SANITIZE build
(valgrind and ASan do not mix); tests/CMakeLists.txt registers it as
integration_valgrind only without sanitizers. By hand:
  SEMQ_BUILD_DIR=build python3 tests/integration/test_valgrind.py
"""

import glob
import os
import re
import shlex
import shutil
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (BUILD_DIR, HarnessError, Pending,  # noqa: E402
                      check_exactly_once, connect, run, test, wait_until)

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPRESSIONS = os.path.join(HERE, "valgrind.supp")

N_MSGS = 500
N_KEYS = 20
POISON_KEY = "poison"  # in S's permanent_keys: the message goes dead
PAYLOAD = bytes(range(64))

# Under valgrind everything is 20-50x slower: generous bounds, fast timers.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "1s"}
READY_TIMEOUT = 60.0  # valgrind start-up + migration
BULK_TIMEOUT = 90.0   # all messages confirmed, redo finished
STOP_TIMEOUT = 60.0   # SIGTERM -> exit, including the leak check

VALGRIND_OPTS = [
    "--error-exitcode=99", "--leak-check=full",
    "--show-leak-kinds=definite,indirect,possible",
    "--errors-for-leak-kinds=definite,indirect,possible",
    "--track-fds=no", "--num-callers=30",
]

# A log is clean when it says both of these, or that nothing was left.
_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) errors? from (\d+) contexts?")
_LOST = re.compile(r"(definitely|indirectly|possibly) lost: ([\d,]+) bytes "
                   r"in ([\d,]+) blocks")


def write_wrapper(t):
    """Writes t.dir/semqd-valgrind, which execs semqd under valgrind with
    its log in the node's directory (the cwd Node.start gives it). Returns
    its path."""
    valgrind = shutil.which("valgrind")
    if not valgrind:
        raise HarnessError("valgrind is not installed (tools/deps.sh "
                           "installs it)")
    real = os.path.abspath(os.environ.get("SEMQD") or
                           os.path.join(BUILD_DIR, "semqd"))
    if not os.access(real, os.X_OK):
        raise HarnessError(f"SEMQD: '{real}' is not an executable file")
    opts = list(VALGRIND_OPTS)
    if os.path.isfile(SUPPRESSIONS):
        opts.append(f"--suppressions={SUPPRESSIONS}")
    path = t.path("semqd-valgrind")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n# semqd under memcheck; written by "
                "test_valgrind.py\n")
        # valgrind's own temporary files go to $TMPDIR, which must be an
        # absolute path: the test's directory is one.
        f.write(f"TMPDIR={shlex.quote(os.path.abspath(t.dir))} "
                f"exec {shlex.quote(valgrind)} "
                f"{' '.join(shlex.quote(o) for o in opts)} "
                '--log-file="$(pwd -P)/valgrind.%p.log" '
                f'{shlex.quote(real)} "$@"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def valgrind_logs(node):
    return sorted(glob.glob(os.path.join(node.dir, "valgrind.*.log")))


def check_valgrind_log(path):
    """Raises unless the finished log reports 0 errors and 0 bytes
    definitely, indirectly or possibly lost. Returns its summary lines."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    summary = [ln.split("== ", 1)[-1].strip() for ln in text.splitlines()
               if "ERROR SUMMARY" in ln or " lost: " in ln or
               "All heap blocks were freed" in ln or
               "in use at exit" in ln]
    problems = []
    if "Memcheck, a memory error detector" not in text:
        problems.append("not a memcheck log")
    m = _ERRORS.findall(text)
    if not m:
        problems.append("no ERROR SUMMARY line (valgrind did not finish?)")
    elif m[-1] != ("0", "0"):
        problems.append(f"ERROR SUMMARY: {m[-1][0]} errors from "
                        f"{m[-1][1]} contexts")
    lost = {kind: int(b.replace(",", "")) for kind, b, _ in
            _LOST.findall(text)}
    if not lost and "All heap blocks were freed" not in text:
        problems.append("no LEAK SUMMARY")
    for kind, nbytes in sorted(lost.items()):
        if nbytes:
            problems.append(f"{kind} lost: {nbytes} bytes")
    if problems:
        # The records themselves: every line after the header, up to a
        # bound, so the stacks are in the failure message.
        body = [ln for ln in text.splitlines() if ln.startswith("==")]
        raise HarnessError(f"{path}: " + "; ".join(problems) + "\n" +
                           "\n".join(body[:400]))
    return summary


def stop_checked(node):
    """SIGTERM; the daemon (i.e. valgrind) must exit 0 in time: 99 means
    memcheck found an error or a leak."""
    rc = node.stop(timeout=STOP_TIMEOUT, check=False)
    if rc != 0:
        logs = "\n".join(f"---- {p}\n{open(p, errors='replace').read()}"
                         for p in valgrind_logs(node))
        raise HarnessError(f"{node.id}: exited {rc} after SIGTERM "
                           f"(99: valgrind found errors)\n"
                           f"{node.log_tail()}\n{logs[-20000:]}")


def out_row(r, seq):
    """R's row seq to S: (status, result, attempts, last_error)."""
    rows = r.sql("SELECT status, result, attempts, last_error FROM tb_0031 "
                 "WHERE origin = 'R' AND dest = 'S' AND seq = ?", (seq,))
    return rows[0] if rows else None


@test(timeout=300)
def two_nodes_under_memcheck(t):
    wrapper = write_wrapper(t)
    saved = os.environ.get("SEMQD")
    os.environ["SEMQD"] = wrapper  # read by Node.start
    try:
        run_pair(t)
    finally:
        if saved is None:
            os.environ.pop("SEMQD", None)
        else:
            os.environ["SEMQD"] = saved


def run_pair(t):
    certs = t.certs(["R", "S"])
    s = t.node("S", certs, node_options=FAST,
               journal_options={"fail_rate": 0.04, "fail_seed": 11,
                                "permanent_keys": POISON_KEY},
               redo={"levels": "1s,1s", "max_tries": 6})
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST)
    connect(r, s)
    s.start(timeout=READY_TIMEOUT)
    r.start(timeout=READY_TIMEOUT)

    # The application's side: N_MSGS keyed messages in one transaction, one
    # of them with the poison key.
    poison_at = N_MSGS // 2
    rows = [("S", 1, POISON_KEY if i == poison_at else f"key{i % N_KEYS:02d}",
             PAYLOAD) for i in range(N_MSGS)]
    c = r.connect_db(readonly=False)
    try:
        with c:
            c.executemany("INSERT INTO tb_0031(dest, type, msg_key, payload)"
                          " VALUES (?, ?, ?, ?)", rows)
        r.wait_numbered(timeout=120)  # under memcheck: slow
        sent = c.execute("SELECT seq, msg_key FROM tb_0031 WHERE dest = 'S'"
                         " ORDER BY seq").fetchall()
    finally:
        c.close()
    assert [q for q, _ in sent] == list(range(1, N_MSGS + 1)), sent[:5]
    keys = {("R", q): k for q, k in sent}
    poison_seq = poison_at + 1

    r.wait_all_confirmed("S", N_MSGS, timeout=BULK_TIMEOUT)

    def redo_settled():
        st = s.redo_status_counts()
        return (set(st) <= {2, -1} and st.get(-1) == 1) or Pending(
            f"tb_0033 status counts {st}")
    wait_until(redo_settled, BULK_TIMEOUT, "S: the redo queue settled "
               "(done, and the poison message dead)", interval=0.2,
               on_timeout=t.logs)
    redo = s.redo_status_counts()
    assert redo.get(2, 0) > 0, f"no message went through redo: {redo}"
    dead = s.sql("SELECT seq, msg_key, last_error FROM tb_0033 WHERE "
                 "status = -1")
    assert [(q, k) for q, k, _ in dead] == [(poison_seq, POISON_KEY)], dead
    assert "permanent_keys" in (dead[0][2] or ""), dead
    got = check_exactly_once(s, ["R"], N_MSGS, keys=keys,
                             cancelled=[("R", poison_seq)])
    assert got["total"] == N_MSGS - 1, got

    # An in-doubt row: sent, answer unknown; R must ask, not resend.
    q = 7
    before = out_row(r, q)
    assert before[0] == 100, before
    stop_checked(r)
    n = r.sql_write("UPDATE tb_0031 SET status = 4, next_attempt_at = 0 "
                    "WHERE origin = 'R' AND dest = 'S' AND seq = ?", (q,))
    assert out_row(r, q)[0] == 4, n
    r.start(timeout=READY_TIMEOUT)

    def resolved():
        row = out_row(r, q)
        return (row and row[0] == 100) or Pending(f"row {row}")
    wait_until(resolved, BULK_TIMEOUT, f"R: in-doubt row {q} back at 100",
               interval=0.2, on_timeout=t.logs)
    after = out_row(r, q)
    assert after[2] == before[2], f"R resent the in-doubt row: {before} ->" \
        f" {after}"
    check_exactly_once(s, ["R"], N_MSGS, keys=keys,
                       cancelled=[("R", poison_seq)])

    stop_checked(r)
    stop_checked(s)
    for node, starts in ((r, 2), (s, 1)):
        logs = valgrind_logs(node)
        assert len(logs) == starts, \
            f"{node.id}: {len(logs)} valgrind logs for {starts} starts: " \
            f"{logs}"
        for p in logs:
            summary = check_valgrind_log(p)
            print(f"     {node.id} {os.path.basename(p)}:")
            for ln in summary:
                print(f"       {ln}")
    print(f"FIGURES: valgrind messages={N_MSGS} redo={redo} "
          f"query_row={before} -> {after}", flush=True)


if __name__ == "__main__":
    run()
