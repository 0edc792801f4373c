# SPDX-License-Identifier: MIT
"""Revocation of a node's certificate ([tls] crl), `semqd --check` on this
node's own certificate, and the modes of the files semqd creates (issue #17).

The certificates and CRLs are made here with the openssl CLI: one CA (the
files of semqtest.make_certs_openssl) and an `openssl ca` database next to
it, so that a test can revoke a certificate (`openssl ca -revoke`) and
publish a CRL (`openssl ca -gencrl`, written to a temporary file and renamed
over [tls] crl, as an operator should). Real semqd processes on loopback:

  1. revoked_peer_refused_by_listener — X, revoked, dials S: S refuses it at
     the handshake ("certificate revoked" in S's line, the alert in X's);
     nothing of X is stored; a good peer R still delivers.
  2. dialler_refuses_revoked_server — R's CRL revokes S: R refuses the
     server it dials; its messages stay unsent.
  3. revoked_while_running_sighup — R delivers to S; R is revoked, the new
     CRL published and S gets SIGHUP: S says it read the CRL again, and R's
     next connection is refused.
  4. revoked_while_running_file_change — the same without SIGHUP: S picks the
     new file up by itself (its poll); the test waits for S's line, then
     R's next connection is refused.
  5. stale_crl_still_refuses — the CRL's nextUpdate has passed: S starts,
     logs an ERROR saying so, still refuses the revoked X and still serves R
     (the choice documented in docs/CONFIG.md: an expired CRL must not cut
     off the whole deployment).
  6. check_refuses_bad_own_certificate — `semqd --check` exits 2 with one
     line naming the file for an expired certificate, one of another CA, a
     revoked one and a key that does not match; it only warns about one
     that expires within 30 days, and accepts a good one.
  7. files_are_owner_only — with the test's umask 022, the database, its WAL
     and SHM and the log file semqd creates are 0600, and so is a database
     semqctl creates.

Nothing is timed: every wait is for a log line or a database state, bounded
by a timeout. Test 4 depends on the network thread's poll of [tls] crl
(node/net.c, every 5 s).

Needs the openssl CLI. Run by ctest as integration_revocation, or by hand:
  SEMQD=build/semqd SEMQCTL=build/semqctl JOURNAL_SO=build/plugins/journal.so \\
      python3 tests/integration/test_revocation.py [NAME...]
"""

import datetime
import os
import re
import signal
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (Certs, HarnessError, check_exactly_once,  # noqa: E402
                      connect, log_lines, make_certs_openssl, run, test,
                      wait_log)

GOOD_COUNT = 10       # messages the good peer R sends
REFUSALS = 2          # a dialling node must be refused this often (redial)
IO_TIMEOUT = 20.0     # upper bound of a wait for a log line
POLL_TIMEOUT = 30.0   # upper bound of the wait for the 5 s CRL poll
FAST = {"reconnect_min": "100ms", "reconnect_max": "1s"}


# ---- the CA: certificates, revocations, CRLs --------------------------------

def _openssl(args, what):
    r = subprocess.run(["openssl"] + args, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise HarnessError(f"openssl {what}: exited {r.returncode}: "
                           f"{r.stderr.strip()}")
    return r.stdout


def _asn1(dt):
    return dt.strftime("%Y%m%d%H%M%SZ")


def _utc(days=0):
    return datetime.datetime.now(datetime.timezone.utc) + \
        datetime.timedelta(days=days)


class Pki:
    """A CA in DIR (ca.crt, ca.key: make_certs_openssl) with an `openssl ca`
    database, the certificates of `ids`, and verbs to issue, revoke and
    publish CRLs."""

    def __init__(self, dir, ids, ca="ca"):
        self.dir = os.path.abspath(dir)
        self.certs = make_certs_openssl(self.dir, ids, ca=ca)
        self.ca = ca
        self.db = os.path.join(self.dir, f"{ca}-index.txt")
        if not os.path.exists(self.db):
            open(self.db, "w").close()
            with open(os.path.join(self.dir, f"{ca}-crlnumber"), "w") as f:
                f.write("1000\n")
        self.cnf = os.path.join(self.dir, f"{ca}-ca.cnf")
        with open(self.cnf, "w") as f:
            f.write(f"""[ca]
default_ca = semq
[semq]
database = {self.db}
crlnumber = {self.dir}/{ca}-crlnumber
serial = {self.dir}/{ca}-serial
new_certs_dir = {self.dir}
certificate = {self.dir}/{ca}.crt
private_key = {self.dir}/{ca}.key
default_md = sha256
default_crl_days = 30
policy = policy_any
unique_subject = no
copy_extensions = none
[policy_any]
commonName = supplied
""")

    def crt(self, node_id):
        return self.certs.crt(node_id)

    def key(self, node_id):
        return self.certs.key(node_id)

    def issue(self, node_id, start, end):
        """DIR/ID.crt + .key valid from start to end (datetimes): `openssl
        ca` takes explicit dates, which expired certificates need."""
        key, crt = self.key(node_id), self.crt(node_id)
        csr = os.path.join(self.dir, f"{node_id}.csr")
        ext = os.path.join(self.dir, f"{node_id}.ext")
        with open(ext, "w") as f:
            f.write("[leaf]\nbasicConstraints=critical,CA:FALSE\n"
                    "keyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=serverAuth,clientAuth\n"
                    f"subjectAltName=URI:semq://{node_id}\n")
        _openssl(["req", "-new", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                  "-subj", f"/CN={node_id}", "-out", csr], f"{node_id} key")
        serial = os.path.join(self.dir, f"{self.ca}-serial")
        with open(serial, "w") as f:
            f.write("01" + os.urandom(15).hex() + "\n")
        _openssl(["ca", "-batch", "-notext", "-config", self.cnf,
                  "-extfile", ext, "-extensions", "leaf",
                  "-startdate", _asn1(start), "-enddate", _asn1(end),
                  "-in", csr, "-out", crt], f"{node_id} cert")
        os.unlink(csr)
        os.unlink(ext)
        return crt

    def revoke(self, node_id):
        _openssl(["ca", "-config", self.cnf, "-revoke", self.crt(node_id)],
                 f"revoke {node_id}")

    def publish(self, path, last=None, next=None):
        """Writes the CRL of every revocation so far to path (a temporary
        file renamed over it). last/next: its lastUpdate/nextUpdate
        (default: now, in 30 days)."""
        tmp = path + ".new"
        args = ["ca", "-config", self.cnf, "-gencrl", "-out", tmp]
        if last:
            args += ["-crl_lastupdate", _asn1(last)]
        if next:
            args += ["-crl_nextupdate", _asn1(next)]
        _openssl(args, f"gencrl {path}")
        os.replace(tmp, path)
        return path


def with_crl(node, crl):
    """node's node.ini gets [tls] crl = crl."""
    base = node.config_text

    def text():
        ca = f"ca = {node.certs.ca}\n"
        return base().replace(ca, ca + f"crl = {crl}\n", 1)
    node.config_text = text
    return node


# ---- logs and the good peer -------------------------------------------------

# The refusing node's line for a failed handshake (node/peer.c).
def refused_line(peer=r"conn#\d+"):
    return (rf"WARN +peer +peer={peer} .*TLS handshake failed: .*"
            r"\(certificate: certificate revoked\)")


# What the refused side hears: OpenSSL's text of the alert.
ALERT_REVOKED = r"alert certificate revoked"


def deliver(r, s, count=GOOD_COUNT, first=0):
    """R sends count more keyed messages to S (first sent before); all
    confirmed, each in S's journal exactly once and in key order."""
    for i in range(count):
        r.enqueue("S", type=1, key=f"k{i % 3}",
                  payload=b"good %d" % (first + i))
    r.wait_all_confirmed("S", first + count, timeout=60)
    check_exactly_once(s, ["R"], first + count)


def assert_nothing_from(s, origin):
    got = s.sql("SELECT count(*) FROM tb_0030 WHERE origin = ?", (origin,))
    assert got[0][0] == 0, f"S stored {got[0][0]} messages of {origin}"
    assert not log_lines(s, rf"\bpeer={re.escape(origin)} .*\bready\b"), \
        f"a link of {origin} got ready on S"


def setup(t, revoked=(), stale=False, s_crl=True):
    """The CA with S, R, X; the CRL t.dir/pki/crl.pem revoking `revoked`
    (stale: its nextUpdate passed yesterday); S listening, with it unless
    not s_crl; R and X configured to dial S (not started). Returns (pki,
    crl, s, r, x)."""
    pki = Pki(t.path("pki"), ["S", "R", "X"])
    for i in revoked:
        pki.revoke(i)
    crl = os.path.join(pki.dir, "crl.pem")
    if stale:
        pki.publish(crl, last=_utc(-10), next=_utc(-1))
    else:
        pki.publish(crl)
    s = t.node("S", pki.certs, node_options=FAST)
    if s_crl:
        with_crl(s, crl)
    r = t.node("R", pki.certs, listen=None, journal=False,
               node_options=FAST)
    x = t.node("X", pki.certs, listen=None, journal=False,
               node_options=FAST)
    connect(r, s)
    connect(x, s)
    return pki, crl, s, r, x


# ---- 1-2. refused at the handshake ------------------------------------------

@test
def revoked_peer_refused_by_listener(t):
    """S's CRL revokes X: X's dials fail at the handshake, S's line says
    "certificate revoked", X hears the alert; R is served."""
    pki, crl, s, r, x = setup(t, revoked=["X"])
    s.start()
    wait_log(s, r"INFO +tls .*CRL loaded: 1 CRL\(s\), 1 revoked", "CRL read")
    x.start()
    x.enqueue("S", type=5, key="x", payload=b"must not arrive", count=3)
    lines = wait_log(s, refused_line(), "X refused as revoked", n=REFUSALS)
    heard = wait_log(x, rf"WARN +peer +peer=S .*{ALERT_REVOKED}",
                     "X hears why", n=REFUSALS)
    print(f"     S: {lines[0]}\n     X: {heard[0]}")
    assert x.outbound_status_counts("S") == {0: 3}, \
        x.outbound_status_counts("S")
    x.stop()
    r.start()
    deliver(r, s)
    assert_nothing_from(s, "X")
    r.stop()
    s.stop()


@test
def dialler_refuses_revoked_server(t):
    """R's CRL revokes S: R refuses the certificate of the server it dials
    (its line says "certificate revoked"); nothing is sent."""
    pki, crl, s, r, x = setup(t, revoked=["S"], s_crl=False)
    with_crl(r, crl)
    s.start()
    r.start()
    r.enqueue("S", type=1, key="k", payload=b"must not arrive", count=3)
    lines = wait_log(r, refused_line("S"), "R refuses S as revoked",
                     n=REFUSALS)
    print(f"     R: {lines[0]}")
    assert r.outbound_status_counts("S") == {0: 3}, \
        r.outbound_status_counts("S")
    assert s.received_count() == 0
    r.stop()
    s.stop()


# ---- 3-4. revoked while running ---------------------------------------------

def revoke_while_running(t, sighup):
    pki, crl, s, r, x = setup(t)
    s.start()
    r.start()
    deliver(r, s)
    pki.revoke("R")
    pki.publish(crl)
    if sighup:
        os.kill(s.pid, signal.SIGHUP)
        line = wait_log(s, r"crl read again \(SIGHUP\).*1 revoked "
                        r"certificate", "the CRL read again on SIGHUP")
    else:
        line = wait_log(s, r"crl read again \(the file changed\).*1 "
                        r"revoked certificate", "the new CRL picked up",
                        timeout=POLL_TIMEOUT)
    print(f"     S: {line[0]}")
    # R's next connection (a restart dials anew) is refused.
    before = len(log_lines(s, refused_line()))
    r.stop()
    r.start()
    r.enqueue("S", type=1, key="late", payload=b"after revocation", count=2)
    lines = wait_log(s, refused_line(), "R refused after the revocation",
                     n=before + REFUSALS)
    print(f"     S: {lines[-1]}")
    wait_log(r, rf"WARN +peer +peer=S .*{ALERT_REVOKED}", "R hears why")
    assert r.outbound_status_counts("S") == {100: GOOD_COUNT, 0: 2}, \
        r.outbound_status_counts("S")
    check_exactly_once(s, ["R"], GOOD_COUNT)
    r.stop()
    s.stop()


@test
def revoked_while_running_sighup(t):
    revoke_while_running(t, sighup=True)


@test
def revoked_while_running_file_change(t):
    revoke_while_running(t, sighup=False)


# ---- 5. a stale CRL ---------------------------------------------------------

@test
def stale_crl_still_refuses(t):
    """The CRL was due yesterday: S logs an ERROR at start, keeps refusing
    the certificate it revokes and serves the others."""
    pki, crl, s, r, x = setup(t, revoked=["X"], stale=True)
    s.start()
    line = wait_log(s, r"ERROR +tls .*stale CRL \(next update was due ",
                    "the stale CRL is an ERROR")
    print(f"     S: {line[0]}")
    x.start()
    wait_log(s, refused_line(), "X refused as revoked", n=REFUSALS)
    x.stop()
    r.start()
    deliver(r, s)
    assert_nothing_from(s, "X")
    r.stop()
    s.stop()


# ---- 6. semqd --check --------------------------------------------------------

def semqd_check(node, key=None):
    """semqd -c node.ini --check (key: another [tls] key); (rc, output)."""
    text = node.config_text()
    if key:
        text = text.replace(f"key = {node.certs.key(node.id)}\n",
                            f"key = {key}\n", 1)
    with open(node.ini, "w") as f:
        f.write(text)
    semqd = os.environ.get("SEMQD") or os.path.join(
        os.environ.get("SEMQ_BUILD_DIR", "build"), "semqd")
    p = subprocess.run([semqd, "-c", node.ini, "--check"],
                       capture_output=True, text=True, timeout=60,
                       cwd=node.dir)
    return p.returncode, p.stdout + p.stderr


def check_refused(node, what, want, key=None):
    rc, out = semqd_check(node, key=key)
    lines = [ln for ln in out.splitlines() if re.search(want, ln)]
    if rc != 2 or len(lines) != 1:
        raise HarnessError(f"--check with {what}: exit {rc} (want 2), want "
                           f"one line matching {want!r}; output:\n{out}")
    print(f"     {what}: exit {rc}: {lines[0]}")


@test
def check_refuses_bad_own_certificate(t):
    pki = Pki(t.path("pki"), ["S", "B", "V"])
    other = Pki(t.path("pki"), ["M"], ca="other")
    crl = pki.publish(os.path.join(pki.dir, "crl.pem"))

    good = with_crl(t.node("S", pki.certs), crl)
    rc, out = semqd_check(good)
    assert rc == 0 and "are fine" in out, f"good: exit {rc}:\n{out}"
    assert "WARN" not in out and "ERROR" not in out, out

    # Expired yesterday, from the deployment's CA.
    pki.issue("E", _utc(-60), _utc(-1))
    e = with_crl(t.node("E", pki.certs), crl)
    check_refused(e, "an expired certificate",
                  rf"{re.escape(pki.crt('E'))}: certificate expired on "
                  r".* make a new certificate")

    # Signed by another CA, presented with the deployment's CA as [tls] ca.
    m = t.node("M", Certs(other.dir, pki.certs.ca))  # M.crt, our ca.crt
    check_refused(m, "a certificate of another CA",
                  rf"{re.escape(other.crt('M'))}: certificate is not "
                  rf"signed by the CA in {re.escape(pki.certs.ca)}")

    # Revoked by [tls] crl.
    pki.revoke("B")
    pki.publish(crl)
    b = with_crl(t.node("B", pki.certs), crl)
    check_refused(b, "a revoked certificate",
                  rf"{re.escape(pki.crt('B'))}: certificate is revoked by "
                  rf"{re.escape(crl)}")

    # The key of another certificate.
    v = with_crl(t.node("V", pki.certs), crl)
    check_refused(v, "a key that does not match",
                  rf"{re.escape(pki.key('S'))}: private key does not match "
                  rf"the certificate {re.escape(pki.crt('V'))}",
                  key=pki.key("S"))

    # A CRL file that is not one.
    junk = os.path.join(pki.dir, "junk.pem")
    with open(junk, "w") as f:
        f.write("not a CRL\n")
    j = with_crl(t.node("J", pki.certs), junk)
    pki.issue("J", _utc(-1), _utc(100))
    check_refused(j, "a broken CRL", rf"{re.escape(junk)}: no CRL in it")

    # Expires in 10 days: passes, with a warning.
    pki.issue("W", _utc(-1), _utc(10))
    w = with_crl(t.node("W", pki.certs), crl)
    rc, out = semqd_check(w)
    warn = [ln for ln in out.splitlines()
            if re.search(rf"WARN .*{re.escape(pki.crt('W'))}: certificate "
                         r"expires on .*, in (9|10) day\(s\)", ln)]
    assert rc == 0 and len(warn) == 1 and "are fine" in out, \
        f"expiring soon: exit {rc}:\n{out}"
    print(f"     expiring in 10 days: exit 0: {warn[0]}")


# ---- 7. file modes ------------------------------------------------------------

def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@test
def files_are_owner_only(t):
    old = os.umask(0o022)
    try:
        pki = Pki(t.path("pki"), ["S", "R"])
        log = t.path("S-file.log")
        s = t.node("S", pki.certs, node_options={"log_file": log})
        r = t.node("R", pki.certs, listen=None, journal=False,
                   node_options=FAST)
        connect(r, s)
        s.start()
        r.start()
        deliver(r, s, count=3)
        files = [s.db, s.db + "-wal", s.db + "-shm", log]
        got = {p: oct(mode(p)) for p in files}
        print(f"     {got}")
        assert all(mode(p) == 0o600 for p in files), got
        r.stop()
        s.stop()

        # semqctl creates (and migrates) a database it does not find.
        c = t.node("C", None, listen=None)  # no [tls]: semqctl needs none
        rc, out, err = c.semqctl("status")
        assert os.path.exists(c.db), f"semqctl status: {rc} {out} {err}"
        assert mode(c.db) == 0o600, oct(mode(c.db))
        print(f"     semqctl's {os.path.basename(c.db)}: {oct(mode(c.db))}")
    finally:
        os.umask(old)


if __name__ == "__main__":
    run()
