# SPDX-License-Identifier: MIT
"""oldrelease — a released SEMQ, built from the repository's own history, for
the upgrade tests (tests/integration/test_upgrade.py).

tests/compat/RELEASES names each release the current tree stays compatible
with, as `VERSION COMMIT`. build(VERSION) makes its semqd, semqctl and
journal plugin:

  1. the commit must be in the clone (`git cat-file -e`); a shallow or
     single-branch clone that lacks it is a failure that says how to fetch
     it — never a skip: an upgrade test that did not run must not pass;
  2. `git worktree add --detach` checks the commit out into
     <SEMQ_BUILD_DIR>/../compat-VERSION/src;
  3. cmake configures it in .../compat-VERSION/build (RelWithDebInfo, no
     tests, no sanitizers even when the suite running is the sanitizer one:
     it stands for the binaries a shop runs) and builds only the targets
     semqd, semqctl and journal with -j2;
  4. the worktree is removed (`git worktree remove --force`, then `git
     worktree prune`), so the repository is left as it was; the build
     outputs stay.

The build is cached beside the build directories, so the normal and the
sanitizer suite of one run (build/default, build/asan) build it once:
.../compat-VERSION/stamp holds the commit it was built from (written last,
after a successful build), and a different or missing stamp rebuilds it
from scratch. .../compat-VERSION.lock is held with fcntl.flock for the whole
check-or-build, so two test processes never build it at the same time; the
second one waits and then finds the stamp.

Python 3 standard library only. Paths come from semqtest (SEMQ_SOURCE_DIR,
SEMQ_BUILD_DIR).
"""

import fcntl
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import BUILD_DIR, SOURCE_DIR, HarnessError  # noqa: E402

__all__ = ["RELEASES", "Release", "releases", "build", "compat_dir"]

RELEASES = os.path.join(SOURCE_DIR, "tests", "compat", "RELEASES")
JOBS = 2
LOCK_TIMEOUT = 900.0  # another process building the same release
GIT_TIMEOUT = 300.0
BUILD_TIMEOUT = 1200.0


class Release:
    """One built release: its programs and how they were obtained."""

    def __init__(self, version, commit, dir, seconds, cached):
        self.version = version
        self.commit = commit
        self.dir = dir  # .../compat-VERSION
        self.build_dir = os.path.join(dir, "build")
        self.semqd = os.path.join(self.build_dir, "semqd")
        self.semqctl = os.path.join(self.build_dir, "semqctl")
        self.journal_so = os.path.join(self.build_dir, "plugins",
                                       "journal.so")
        self.seconds = seconds  # spent building now (0 when cached)
        self.cached = cached

    def programs(self):
        return [self.semqd, self.semqctl, self.journal_so]

    def complete(self):
        return all(os.path.isfile(p) for p in self.programs()) and \
            all(os.access(p, os.X_OK) for p in (self.semqd, self.semqctl))

    def __repr__(self):
        return f"Release({self.version!r}, {self.commit[:12]}, {self.dir!r})"


def releases(path=RELEASES):
    """{version: commit} of tests/compat/RELEASES (# starts a comment)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise HarnessError(f"{path}: cannot read the list of releases: {e}")
    out = {}
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[1]) != 40 or \
                any(c not in "0123456789abcdef" for c in parts[1].lower()):
            raise HarnessError(f"{path}:{n}: '{line}' is not 'VERSION "
                               "COMMIT' (a full 40-digit commit id)")
        out[parts[0]] = parts[1].lower()
    return out


def compat_dir(version):
    """Where the build of `version` is cached: beside the build directory
    of the suite running now."""
    return os.path.abspath(os.path.join(BUILD_DIR, os.pardir,
                                        f"compat-{version}"))


def _run(cmd, what, log=None, cwd=None, timeout=GIT_TIMEOUT, env=None):
    """Runs cmd; raises HarnessError with its output's tail unless it
    exits 0. With log (an open file) the output goes there."""
    try:
        if log is not None:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            r = subprocess.run(cmd, cwd=cwd, stdout=log,
                               stderr=subprocess.STDOUT, timeout=timeout,
                               env=env)
            out = ""
        else:
            r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                               timeout=timeout, env=env)
            out = (r.stdout + r.stderr).strip()
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{what}: '{' '.join(cmd)}' took more than "
                           f"{timeout:g} s")
    except OSError as e:
        raise HarnessError(f"{what}: cannot run '{cmd[0]}': {e}")
    if r.returncode != 0:
        if log is not None:
            log.flush()
            with open(log.name, "rb") as f:
                out = f.read()[-6000:].decode("utf-8", "replace")
        raise HarnessError(f"{what}: '{' '.join(cmd)}' exited "
                           f"{r.returncode}:\n{out}")
    return out


def _git(*args, what, check=True):
    cmd = ["git", "-C", SOURCE_DIR] + list(args)
    if check:
        return _run(cmd, what)
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=GIT_TIMEOUT)


def _check_commit(version, commit):
    """The commit must be in the clone; else a failure that says how to
    get it."""
    r = _git("rev-parse", "--git-dir", what="git", check=False)
    if r.returncode != 0:
        raise HarnessError(
            f"SEMQ {version} is built from commit {commit} "
            f"(tests/compat/RELEASES), but {SOURCE_DIR} is not a git "
            f"clone ({(r.stdout + r.stderr).strip()}): the upgrade tests "
            "need the repository with its full history. Run them from a "
            "git clone (git clone, not an exported tarball).")
    r = _git("cat-file", "-e", f"{commit}^{{commit}}", what="git",
             check=False)
    if r.returncode == 0:
        return
    shallow = _git("rev-parse", "--is-shallow-repository", what="git",
                   check=False).stdout.strip() == "true"
    how = (f"git -C {SOURCE_DIR} fetch --unshallow" if shallow else
           f"git -C {SOURCE_DIR} fetch origin {commit}")
    raise HarnessError(
        f"SEMQ {version} is commit {commit} (tests/compat/RELEASES), which "
        f"is not in the clone at {SOURCE_DIR}"
        f"{' (a shallow clone)' if shallow else ''}. The upgrade tests "
        "build that release from the repository's history, so the clone "
        f"needs it: fetch the full history ({how}; in CI, check out with "
        "the whole history, e.g. actions/checkout with fetch-depth: 0), "
        "then run the tests again.")


def _lock(path):
    """An exclusive flock on path, waiting at most LOCK_TIMEOUT; returns
    the open file (closing it releases the lock)."""
    f = open(path, "a")
    deadline = time.monotonic() + LOCK_TIMEOUT
    said = False
    while True:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            if not said:
                print(f"oldrelease: {path} is held by another process "
                      "(building the same release); waiting", flush=True)
                said = True
            if time.monotonic() > deadline:
                f.close()
                raise HarnessError(f"{path}: still locked after "
                                   f"{LOCK_TIMEOUT:g} s by another build")
            time.sleep(0.5)


def _build_env():
    """The environment of the old build: the caller's, without compiler
    flags that would add a sanitizer (the release is built plain)."""
    env = dict(os.environ)
    for k in ("CFLAGS", "CPPFLAGS", "LDFLAGS"):
        if "sanitize" in env.get(k, ""):
            del env[k]
    return env


def _remove_worktree(src):
    """Drops the worktree at src and its registration in the repository
    (both also after a failed or interrupted build)."""
    if os.path.isdir(src):
        _git("worktree", "remove", "--force", src, what="git worktree",
             check=False)
    shutil.rmtree(src, ignore_errors=True)
    _git("worktree", "prune", what="git worktree", check=False)


def build(version, jobs=JOBS):
    """The Release `version` of tests/compat/RELEASES, built (or found
    built) as the module docstring says. Prints what it did and how long
    the build took."""
    all_releases = releases()
    if version not in all_releases:
        raise HarnessError(f"{RELEASES}: no release {version} (has "
                           f"{', '.join(sorted(all_releases)) or 'none'})")
    commit = all_releases[version]
    _check_commit(version, commit)
    dir = compat_dir(version)
    os.makedirs(dir, exist_ok=True)
    stamp = os.path.join(dir, "stamp")
    lock = _lock(dir + ".lock")
    try:
        rel = Release(version, commit, dir, 0.0, True)
        try:
            with open(stamp) as f:
                have = f.read().strip()
        except OSError:
            have = None
        if have == commit and rel.complete():
            print(f"oldrelease: SEMQ {version} (commit {commit[:12]}) is "
                  f"built already in {dir} (stamp matches); build took "
                  "0.0 s now", flush=True)
            return rel

        print(f"oldrelease: building SEMQ {version} from commit "
              f"{commit[:12]} in {dir} (stamp {have or 'none'})",
              flush=True)
        t0 = time.monotonic()
        if os.path.exists(stamp):
            os.unlink(stamp)
        src = os.path.join(dir, "src")
        _remove_worktree(src)  # a previous, interrupted build
        shutil.rmtree(rel.build_dir, ignore_errors=True)
        with open(os.path.join(dir, "build.log"), "wb") as log:
            try:
                _run(["git", "-C", SOURCE_DIR, "worktree", "add", "--detach",
                      src, commit], f"SEMQ {version}: git worktree add",
                     log=log)
                env = _build_env()
                _run(["cmake", "-S", src, "-B", rel.build_dir,
                      "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                      "-DSEMQ_TESTS=OFF", "-DSEMQ_SANITIZE=OFF",
                      "-DSEMQ_FUZZ=OFF"],
                     f"SEMQ {version}: cmake configure", log=log,
                     timeout=BUILD_TIMEOUT, env=env)
                _run(["cmake", "--build", rel.build_dir, "-j", str(jobs),
                      "--target", "semqd", "semqctl", "journal"],
                     f"SEMQ {version}: cmake --build", log=log,
                     timeout=BUILD_TIMEOUT, env=env)
            finally:
                _remove_worktree(src)
        if not rel.complete():
            raise HarnessError(f"SEMQ {version}: the build in "
                               f"{rel.build_dir} has not made "
                               f"{', '.join(rel.programs())}")
        with open(stamp + ".new", "w") as f:
            f.write(commit + "\n")
        os.replace(stamp + ".new", stamp)
        rel.seconds = time.monotonic() - t0
        rel.cached = False
        print(f"oldrelease: SEMQ {version} built in {rel.seconds:.1f} s "
              f"(worktree, cmake configure, semqd + semqctl + journal with "
              f"-j{jobs}); worktree removed, outputs kept in "
              f"{rel.build_dir}", flush=True)
        return rel
    finally:
        lock.close()


if __name__ == "__main__":
    # By hand: python3 tests/integration/oldrelease.py [VERSION]
    r = build(sys.argv[1] if len(sys.argv) > 1 else "0.1.0")
    print("\n".join(r.programs()))
