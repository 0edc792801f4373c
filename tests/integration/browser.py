# SPDX-License-Identifier: MIT
"""Headless Chromium for the dashboard tests (test_dashboard.py,
test_dashboard_outage.py): started with a fresh profile, driven over the
Chrome DevTools Protocol by the small WebSocket client below (Python
standard library only), and screenshots of its page.

Needs /usr/bin/chromium (Debian's chromium package, installed by
tools/deps.sh) or $SEMQ_CHROMIUM.
"""

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

from semqtest import HarnessError, wait_until


# ---- a WebSocket client (RFC 6455), just enough for the DevTools ---------

class WebSocket:
    """A client connection: text messages out (masked), text messages in
    (fragmented or not); pings answered, a close frame raises."""

    GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, host, port, path, timeout=30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise HarnessError(f"websocket {path}: closed during the "
                                   f"upgrade: {head!r}")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        if not lines[0].startswith("HTTP/1.1 101"):
            raise HarnessError(f"websocket {path}: upgrade refused: "
                               f"{lines[0]!r}")
        hdrs = {k.strip().lower(): v.strip() for k, v in
                (x.split(":", 1) for x in lines[1:] if ":" in x)}
        want = base64.b64encode(hashlib.sha1(
            (key + self.GUID).encode()).digest()).decode()
        if hdrs.get("sec-websocket-accept") != want:
            raise HarnessError(f"websocket {path}: bad Sec-WebSocket-Accept "
                               f"{hdrs.get('sec-websocket-accept')!r}")

    def _send(self, opcode, data):
        n = len(data)
        hdr = bytes([0x80 | opcode])
        if n < 126:
            hdr += bytes([0x80 | n])
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        keys = (mask * (n // 4 + 1))[:n]
        masked = (int.from_bytes(data, "big") ^
                  int.from_bytes(keys, "big")).to_bytes(n, "big")
        self.sock.sendall(hdr + mask + masked)

    def send_text(self, text):
        self._send(0x1, text.encode())

    def _exact(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("websocket: no message in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(max(65536, n - len(self.buf)))
            except socket.timeout:
                raise TimeoutError("websocket: no message in time")
            if not chunk:
                raise HarnessError("websocket: connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_text(self, deadline):
        """The next text message; TimeoutError after deadline (monotonic)."""
        parts = []
        while True:
            b0, b1 = self._exact(2, deadline)
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n, = struct.unpack("!H", self._exact(2, deadline))
            elif n == 127:
                n, = struct.unpack("!Q", self._exact(8, deadline))
            mask = self._exact(4, deadline) if b1 & 0x80 else None
            data = self._exact(n, deadline)
            if mask:
                data = bytes(c ^ mask[i & 3] for i, c in enumerate(data))
            if op == 0x8:
                raise HarnessError(f"websocket: closed by the peer {data!r}")
            if op == 0x9:
                self._send(0xA, data)
                continue
            if op == 0xA:
                continue
            parts.append(data)
            if b0 & 0x80:
                return b"".join(parts).decode("utf-8")

    def close(self):
        try:
            self._send(0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        self.sock.close()


class DevTools:
    """The DevTools Protocol over one browser WebSocket, with one page
    attached (flat sessions). Every event is kept in self.log; wait_event
    takes them in order."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0
        self.pending = []  # events not yet taken by wait_event
        self.log = []      # every event, in order
        self.session = None

    def _read(self, deadline):
        m = json.loads(self.ws.recv_text(deadline))
        if "method" in m:
            self.pending.append(m)
            self.log.append(m)
        return m

    def call(self, method, params=None, timeout=30.0, browser=False):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        self.ws.send_text(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            try:
                m = self._read(deadline)
            except TimeoutError:
                raise HarnessError(f"DevTools {method}: no answer within "
                                   f"{timeout:g} s")
            if m.get("id") == mid:
                if "error" in m:
                    raise HarnessError(f"DevTools {method}: {m['error']}")
                return m.get("result", {})

    def wait_event(self, method, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            for i, m in enumerate(self.pending):
                if m["method"] == method:
                    return self.pending.pop(i)["params"]
            try:
                self._read(deadline)
            except TimeoutError:
                raise HarnessError(f"DevTools: no {method} within "
                                   f"{timeout:g} s")

    def drain(self, seconds=0.0):
        """Reads the events that arrive within `seconds`."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                self._read(deadline)
            except TimeoutError:
                return

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page (JSON-able)."""
        r = self.call("Runtime.evaluate", {"expression": expression,
                                           "returnByValue": True})
        if "exceptionDetails" in r:
            raise HarnessError(f"page: {expression[:80]!r} threw: "
                               f"{r['exceptionDetails']}")
        return r["result"].get("value")

    def events(self, method):
        return [m["params"] for m in self.log if m["method"] == method]


class Chromium:
    """Headless Chromium with a fresh profile in dir; its DevTools
    WebSocket on a port it picks (read from DevToolsActivePort)."""

    def __init__(self, dir):
        self.exe = os.environ.get("SEMQ_CHROMIUM") or "/usr/bin/chromium"
        if not os.access(self.exe, os.X_OK):
            raise HarnessError(f"{self.exe}: no Chromium to drive (install "
                               "Debian's chromium package: tools/deps.sh, "
                               "or set SEMQ_CHROMIUM)")
        self.profile = tempfile.mkdtemp(prefix="chromium-", dir=dir)
        self.log = os.path.join(dir, "chromium.log")
        self.proc = None
        self.ws = None

    def start(self, timeout=60.0):
        args = [self.exe, "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-quic", "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}", "about:blank"]

        def child():
            os.setsid()  # its own process group: stop() ends every helper
            try:
                import ctypes
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PDEATHSIG
            except (OSError, AttributeError):
                pass
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=logf, stderr=logf,
                                         preexec_fn=child)
        port_file = os.path.join(self.profile, "DevToolsActivePort")

        def ready():
            if self.proc.poll() is not None:
                raise HarnessError(f"chromium exited {self.proc.returncode}"
                                   f" at start; log {self.log}")
            try:
                with open(port_file) as f:
                    lines = f.read().split("\n")
            except OSError:
                return False
            return (int(lines[0]), lines[1]) if len(lines) > 1 and \
                lines[1].startswith("/devtools/") else False
        port, path = wait_until(ready, timeout, "chromium's "
                                "DevToolsActivePort")
        self.ws = WebSocket("127.0.0.1", port, path)
        return DevTools(self.ws)

    def stop(self):
        if self.ws:
            self.ws.close()
            self.ws = None
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


def screenshot(dt, t, name):
    """Saves a PNG of the page to the test directory (and to
    $SEMQ_SCREENSHOT_DIR when set); returns its path."""
    png = base64.b64decode(dt.call("Page.captureScreenshot",
                                   {"format": "png"})["data"])
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise HarnessError("Page.captureScreenshot: not a PNG")
    width, height = struct.unpack("!II", png[16:24])
    assert (width, height) == (1280, 900), (width, height)
    path = t.path(name)
    with open(path, "wb") as f:
        f.write(png)
    out = os.environ.get("SEMQ_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        shutil.copy(path, os.path.join(out, name))
        print(f"     screenshot {os.path.join(out, name)}")
    return path
