# SPDX-License-Identifier: MIT
"""The web dashboard of semqd's admin HTTP (SPEC §8), driven in a real
browser: headless Chromium, controlled over the Chrome DevTools Protocol
(browser.py).

An origin R dials a receiver S over mutual TLS; S serves the admin HTTP
with an admin_token, and its journal plugin fails two keys for good
(permanent_keys), so two of R's messages go dead in S's redo queue
(tb_0033). One of those keys is HTML markup, to prove the page shows data
as text. The test then:

  1. checks what the admin HTTP serves for the page: GET / is the embedded
     web/index.html and /ui/NAME the other web files, byte for byte, with
     their Content-Type and a Content-Security-Policy of default-src
     'self'; other methods are 405, unknown files 404;
  2. loads http://ADMIN/ in Chromium and waits (bounded) until the page
     shows the dead entries; checks the header (node S, ready, uptime), the
     Peers table (R, ready, accepted, its address, since), the Streams
     table (inbound R -> S, its confirmed_through equal to semq_stream_in)
     and the Redo queue rows (id, message, key, status, tries, last error)
     against tb_0033; the markup key is shown as text (no element made of
     it, no request for its image, no dialog from its handler); saves a
     screenshot to the test directory and to $SEMQ_SCREENSHOT_DIR if set;
  3. clicks Retry on the dead entry (the page asked for the token once with
     prompt() when it loaded, since the node shows its state only with it;
     answered through Page.handleJavaScriptDialog): the entry runs again
     and, its key being a permanent failure, is dead again with its tries
     up by one in tb_0033 and on the page;
  4. clicks Discard on it: the page asks for a reason (and not for the
     token again: it kept it in sessionStorage); tb_0033 has status -2 and
     the reason, and the entry leaves the page's dead list;
  5. with a wrong token the refresh asks for the token (Cancel), and a
     Retry is refused: the API's error is shown in the page's visible
     message area and tb_0033 does not change;
  6. every request the page made went to the admin origin (no external
     resource), no script error was thrown and no Content-Security-Policy
     violation was reported.

Needs /usr/bin/chromium (Debian's chromium package, installed by
tools/deps.sh) or $SEMQ_CHROMIUM. Run by ctest as integration_dashboard, or
by hand: SEMQ_BUILD_DIR=build python3 tests/integration/test_dashboard.py
"""

import http.client
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (SOURCE_DIR, HarnessError, Pending, connect,  # noqa: E402
                      run, test, wait_until)
from browser import Chromium, screenshot  # noqa: E402

FAST = {"poll_interval": "20ms", "query_after": "10s",
        "reconnect_min": "100ms", "reconnect_max": "500ms"}
TOKEN = "dashboard-test-token"
BAD = "BAD"
# A key that is markup: shown as text by an escaping page, an image (and a
# request for /x-injected, and a dialog) by one that is not.
EVIL = "<img src=/x-injected onerror=alert(1)>"
REASON = "operator test: bad key, reissued as a new bill"
SETTLE = 30.0
RS_DEAD, RS_DISCARDED = -1, -2


# ---- the nodes and the tables ---------------------------------------------

def redo_row(s, id):
    rows = s.sql("SELECT status, tries, discard_reason, last_error FROM "
                 "tb_0033 WHERE id = ?", (id,))
    if len(rows) != 1:
        raise HarnessError(f"tb_0033: no entry {id}")
    return dict(zip(("status", "tries", "discard_reason", "last_error"),
                    rows[0]))


def http_get(node, method, path, token=None):
    host, port = node.admin.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        c.request(method, path, headers={"Authorization": f"Bearer {token}"}
                  if token else {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


# What the page shows, read in the page: the header, the message areas and
# the rows of each table as the text of their cells.
PAGE_STATE = r"""(() => {
  const rows = (id) => [...document.querySelectorAll('#' + id + ' tr')]
    .map((tr) => [...tr.cells].map((td) => td.textContent));
  const vis = (el) => !el.hidden && el.offsetParent !== null;
  const msg = document.getElementById('message');
  return {
    node: document.getElementById('node-id').textContent,
    health: document.getElementById('health').textContent,
    uptime: document.getElementById('uptime').textContent,
    peers: rows('peers-body'),
    streams: rows('streams-body'),
    redo: [...document.querySelectorAll('#redo-body tr[data-id]')].map(
      (tr) => ({id: Number(tr.dataset.id), status: tr.dataset.status,
                cells: [...tr.cells].map((td) => td.textContent),
                buttons: [...tr.querySelectorAll('button')].map(
                  (b) => b.textContent)})),
    filter: document.getElementById('redo-status').value,
    message: msg.textContent, messageVisible: vis(msg),
    messageClass: msg.className,
    refreshError: document.getElementById('refresh-error').textContent,
    images: document.querySelectorAll('img').length,
    title: document.title,
  };
})()"""

REDO_COLS = ("id", "message", "key", "status", "tries", "next", "error",
             "actions")


def page_entry(state, id):
    hits = [e for e in state["redo"] if e["id"] == id]
    if not hits:
        return None
    return dict(zip(REDO_COLS, hits[0]["cells"]), buttons=hits[0]["buttons"])


def click(dt, action, id):
    """Clicks a row's button from a timer, so that Runtime.evaluate returns
    before the prompt() it opens blocks the page."""
    ok = dt.evaluate(
        f"(() => {{ const b = document.querySelector('#redo-body "
        f"button[data-action=\"{action}\"][data-id=\"{id}\"]'); "
        f"if (!b || b.disabled) return false; "
        f"setTimeout(() => b.click(), 0); return true; }})()")
    if not ok:
        raise HarnessError(f"page: no enabled {action} button for redo "
                           f"entry {id}")


def answer_dialog(dt, text, *words):
    """Waits for the page's prompt(), checks it names every word, answers
    it with text (None: Cancel). Returns its message."""
    d = dt.wait_event("Page.javascriptDialogOpening", 20)
    if d["type"] != "prompt":
        raise HarnessError(f"page: a {d['type']} dialog, not a prompt: {d}")
    for w in words:
        if w not in d["message"]:
            raise HarnessError(f"page: the prompt {d['message']!r} does not "
                               f"name {w!r}")
    if text is None:
        dt.call("Page.handleJavaScriptDialog", {"accept": False})
    else:
        dt.call("Page.handleJavaScriptDialog", {"accept": True,
                                                "promptText": text})
    return d["message"]


# ---- the test ----------------------------------------------------------------

@test(timeout=300)
def dashboard_in_chromium(t):
    certs = t.certs(["R", "S"])
    s = t.node("S", certs, admin=True,
               node_options=dict(FAST, admin_token=TOKEN),
               journal_options={"permanent_keys": f"{BAD},{EVIL}"})
    r = t.node("R", certs, listen=False, journal=False, node_options=FAST)
    connect(r, s)
    s.start()
    r.start()
    good = 3
    for i in range(good):
        r.enqueue("S", type=1, key=f"k{i}", payload=f"bill {i}".encode())
    (_, _, bad_seq), = r.enqueue("S", type=1, key=BAD, payload=b"bad bill")
    (_, _, evil_seq), = r.enqueue("S", type=1, key=EVIL, payload=b"evil")
    r.wait_all_confirmed("S", good + 2, timeout=SETTLE)
    wait_until(lambda: s.redo_status_counts() == {RS_DEAD: 2} or
               Pending(s.redo_status_counts()), SETTLE,
               "S: two dead entries", on_timeout=t.logs)
    assert s.journal_count() == good
    (bad_id,), = s.sql("SELECT id FROM tb_0033 WHERE seq = ?", (bad_seq,))
    (evil_id,), = s.sql("SELECT id FROM tb_0033 WHERE seq = ?", (evil_seq,))
    before = redo_row(s, bad_id)
    assert before["tries"] == 1 and "permanent_keys" in \
        before["last_error"], before

    # 1. The files, as the admin HTTP serves them.
    web = os.path.join(SOURCE_DIR, "web")
    for path, name, ctype in (("/", "index.html", "text/html"),
                              ("/ui/index.html", "index.html", "text/html"),
                              ("/ui/app.js", "app.js", "text/javascript"),
                              ("/ui/style.css", "style.css", "text/css")):
        status, hdrs, body = http_get(s, "GET", path)
        with open(os.path.join(web, name), "rb") as f:
            assert status == 200 and body == f.read(), (path, status)
        assert hdrs["content-type"] == f"{ctype}; charset=utf-8", hdrs
        assert hdrs["content-security-policy"].startswith(
            "default-src 'self'"), hdrs
        assert hdrs["x-content-type-options"] == "nosniff", hdrs
    for path in ("/ui/", "/ui/nope.js", "/ui/../node.ini", "/ui/x/app.js",
                 "/index.html", "/app.js"):
        status, _, body = http_get(s, "GET", path)
        assert status == 404 and b"error" in body, (path, status, body)
    status, hdrs, _ = http_get(s, "POST", "/")
    assert status == 405 and hdrs.get("allow") == "GET", (status, hdrs)

    # 2. The page, in Chromium.
    chromium = Chromium(t.dir)
    try:
        dt = chromium.start()
        target = dt.call("Target.createTarget", {"url": "about:blank"})
        dt.session = dt.call("Target.attachToTarget",
                             {"targetId": target["targetId"],
                              "flatten": True}, browser=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            dt.call(f"{domain}.enable")
        dt.call("Emulation.setDeviceMetricsOverride",
                {"width": 1280, "height": 900, "deviceScaleFactor": 1,
                 "mobile": False})
        origin = f"http://{s.admin}"
        nav = dt.call("Page.navigate", {"url": origin + "/"})
        assert not nav.get("errorText"), nav
        dt.wait_event("Page.loadEventFired", 30)
        # The node shows its state only with the token: asked for once.
        answer_dialog(dt, TOKEN, "Admin token", "shows its state only")

        def state():
            return dt.evaluate(PAGE_STATE)

        def shows(pred, what):
            def check():
                st = state()
                return st if pred(st) else Pending(st)
            return wait_until(check, 20, f"page: {what}",
                              interval=0.2, on_timeout=t.logs)

        (wm,), = s.sql("SELECT confirmed_through FROM semq_stream_in "
                       "WHERE origin = 'R' AND dest = 'S'")
        st = shows(lambda x: page_entry(x, bad_id) and
                   page_entry(x, evil_id) and x["health"] == "ready" and
                   any(row[:4] == ["inbound", "R", "S", "0"] and
                       row[5] == str(wm) for row in x["streams"]),
                   "both dead entries, ready, the inbound stream")
        assert st["node"] == "S" and st["title"] == "semqd S — ready", st
        assert st["uptime"].endswith(" s") or "min" in st["uptime"], st
        assert st["filter"] == "all" and not st["refreshError"], st
        peer, = [p for p in st["peers"] if p[0] == "R"]
        assert peer[1] == "ready" and peer[2] == "accepted" and \
            peer[3].startswith("127.0.0.1:") and peer[4].endswith(" ago"), \
            peer
        inbound, = [x for x in st["streams"] if x[0] == "inbound"]
        assert inbound[1:4] == ["R", "S", "0"], inbound
        e = page_entry(st, bad_id)
        assert e["message"] == f"R/S/{bad_seq}" and e["key"] == BAD and \
            e["status"] == "dead" and e["tries"] == "1" and \
            e["next"] == "—" and e["error"] == before["last_error"] and \
            e["buttons"] == ["Retry", "Discard"], e
        # The markup key is text: in its cell, in the error, nowhere else.
        e = page_entry(st, evil_id)
        assert e["key"] == EVIL and EVIL in e["error"], e
        assert st["images"] == 0, st
        shot = screenshot(dt, t, "dashboard.png")

        # 3. Retry: the token kept since the page asked for it; the
        # entry runs again.
        click(dt, "retry", bad_id)
        wait_until(lambda: (lambda x: x["tries"] == before["tries"] + 1 and
                            x["status"] == RS_DEAD or Pending(x))(
                                redo_row(s, bad_id)), SETTLE,
                   "tb_0033: the retried entry ran again and is dead",
                   on_timeout=t.logs)
        st = shows(lambda x: (page_entry(x, bad_id) or {}).get("tries") ==
                   "2" and page_entry(x, bad_id)["status"] == "dead",
                   "the retried entry dead again with tries 2")
        assert "retried" in st["message"] and st["messageVisible"] and \
            "message-ok" in st["messageClass"], st
        assert dt.evaluate("sessionStorage.getItem('semq.admin_token')") \
            == TOKEN

        # 4. Discard with a reason; the token is not asked for again.
        click(dt, "discard", bad_id)
        answer_dialog(dt, REASON, "Discard redo entry", f"R/S/{bad_seq}")
        wait_until(lambda: (lambda x: x["status"] == RS_DISCARDED or
                            Pending(x))(redo_row(s, bad_id)), SETTLE,
                   "tb_0033: the entry discarded", on_timeout=t.logs)
        assert redo_row(s, bad_id)["discard_reason"] == REASON
        st = shows(lambda x: (page_entry(x, bad_id) or {}).get("status") ==
                   "discarded", "the entry discarded")
        e = page_entry(st, bad_id)
        assert e["buttons"] == [] and REASON in e["error"], e
        assert "discarded" in st["message"] and st["messageVisible"], st
        dt.evaluate("(() => { const f = document.getElementById("
                    "'redo-status'); f.value = 'dead'; f.dispatchEvent("
                    "new Event('change')); })()")
        st = shows(lambda x: x["filter"] == "dead" and
                   [e["id"] for e in x["redo"]] == [evil_id],
                   "the dead list without the discarded entry")

        # 5. A refused action: the API's error in the message area. With
        # a wrong token the next refresh is refused and asks for the
        # token (Cancel: not asked again); the action then asks once.
        dt.evaluate(f"sessionStorage.setItem('semq.admin_token', "
                    f"'{TOKEN}-wrong')")
        answer_dialog(dt, None, "Admin token", "does not match")
        evil_before = redo_row(s, evil_id)
        click(dt, "retry", evil_id)
        answer_dialog(dt, "still-wrong", "Admin token", "refused the action")
        st = shows(lambda x: "failed" in x["message"],
                   "the refused retry's error")
        assert st["messageVisible"] and "message-error" in \
            st["messageClass"] and "does not match" in st["message"] and \
            f"entry {evil_id}" in st["message"], st
        assert dt.evaluate("sessionStorage.getItem('semq.admin_token')") \
            is None
        # A read the store thread answers after the refusal: had the
        # retry slipped through, it would have run first (admin jobs run in
        # order).
        status, _, body = http_get(s, "GET", "/redo", token=TOKEN)
        assert status == 200, (status, body[:200])
        assert redo_row(s, evil_id) == evil_before
        screenshot(dt, t, "dashboard-after.png")

        # 6. Only the admin origin, no script error, no CSP violation.
        dt.drain(0.5)
        urls = [e["request"]["url"] for e in
                dt.events("Network.requestWillBeSent")]
        foreign = [u for u in urls if not u.startswith(origin + "/")]
        assert not foreign, f"requests off the admin origin: {foreign}"
        paths = {u[len(origin):] for u in urls}
        for p in ("/", "/ui/app.js", "/ui/style.css", "/health", "/peers",
                  "/streams",
                  "/redo?status=all&order=dead_first&limit=50&offset=0",
                  "/redo?status=dead&order=dead_first&limit=50&offset=0",
                  "/redo?status=dead&group_by=error",
                  f"/redo/{bad_id}/retry", f"/redo/{bad_id}/discard"):
            assert p in paths, (p, sorted(paths))
        assert not any("x-injected" in u for u in urls), urls
        assert not dt.events("Runtime.exceptionThrown"), \
            dt.events("Runtime.exceptionThrown")
        security = [e for e in dt.events("Log.entryAdded")
                    if e["entry"]["source"] == "security"]
        assert not security, security
        dialogs = dt.events("Page.javascriptDialogOpening")
        assert [d["type"] for d in dialogs] == ["prompt"] * 4, dialogs
    finally:
        chromium.stop()
    print(f"     screenshot {shot}")
    r.stop()
    s.stop()


if __name__ == "__main__":
    run()
