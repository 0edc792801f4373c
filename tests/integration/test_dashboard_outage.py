# SPDX-License-Identifier: MIT
"""The web dashboard during an incident (issue #19), in headless Chromium:
what an operator paged at night sees on the pages of three nodes.

R -> P (relay, store-and-forward) -> S, every node with its admin HTTP. S's
journal plugin fails every document (fail_rate = 1, one try: dead at once)
and one key for good (permanent_keys), so S's redo queue holds dead letters
under two distinct errors, and one delayed document pending behind them.
Then S stops and R sends more: P takes custody of them.

  1. S's page (S up): the dead letters grouped by error (count, error,
     destination) equal to `semqctl redo list --group-by error`; the redo
     queue shows dead entries first and a page at a time (Next page shows
     the rest, the count says how many in all); a group's Retry asks, shows
     how many it would touch (the dry run), and retries exactly those.
  2. R's page (S down): health degraded with the reason backlog_old naming
     S; the outbound stream R -> S marked stuck and its documents "waiting
     at P"; the peer P ready.
  3. P's page: the peer S down since the stop, with its last error; the
     custody held here for S.
Screenshots of each page go to the test directory (and $SEMQ_SCREENSHOT_DIR);
the checks read the pages' text, never pixels.

Run by ctest as integration_dashboard_outage, or by hand with SEMQ_BUILD_DIR
set.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import HarnessError, Pending, run, test, wait_until  # noqa: E402
from relaytest import make_relay, with_admin  # noqa: E402
from browser import Chromium, screenshot  # noqa: E402

SETTLE = 30.0
HELD = 5  # documents R sends while S is down
FAILED = 60  # documents S fails (fail_rate 1): dead at their one try
BAD = "bad-key"  # one more, failed for good (its own error)
PAGE = 50  # redo entries a page (web/app.js)
PAGE_STATE = r"""(() => {
  const rows = (id) => [...document.querySelectorAll('#' + id + ' tr')]
    .map((tr) => [...tr.cells].map((td) => td.textContent));
  return {
    node: document.getElementById('node-id').textContent,
    health: document.getElementById('health').textContent,
    problems: [...document.querySelectorAll('#problems-list li')].map(
      (li) => ({reason: li.dataset.reason, text: li.textContent})),
    problemsVisible: !document.getElementById('problems').hidden,
    peers: rows('peers-body'),
    streams: rows('streams-body'),
    custody: rows('custody-body'),
    groups: rows('groups-body'),
    redo: [...document.querySelectorAll('#redo-body tr[data-id]')].map(
      (tr) => ({id: Number(tr.dataset.id), status: tr.dataset.status})),
    count: document.getElementById('redo-count').textContent,
    message: document.getElementById('message').textContent,
    refreshError: document.getElementById('refresh-error').textContent,
  };
})()"""


def open_page(chromium, dt, node):
    """A new tab on node's dashboard; returns its DevTools session."""
    target = dt.call("Target.createTarget", {"url": "about:blank"})
    dt.session = dt.call("Target.attachToTarget",
                         {"targetId": target["targetId"], "flatten": True},
                         browser=True)["sessionId"]
    for domain in ("Page", "Runtime"):
        dt.call(f"{domain}.enable")
    dt.call("Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 900, "deviceScaleFactor": 1,
             "mobile": False})
    nav = dt.call("Page.navigate", {"url": f"http://{node.admin}/"})
    if nav.get("errorText"):
        raise HarnessError(f"{node.id}: page not loaded: {nav}")
    dt.wait_event("Page.loadEventFired", 30)


def answer(dt, kind, accept, text=None, *words):
    """Waits for the page's confirm() or prompt(), checks it names every
    word, answers it. Returns its message."""
    d = dt.wait_event("Page.javascriptDialogOpening", 20)
    if d["type"] != kind:
        raise HarnessError(f"page: a {d['type']} dialog, not a {kind}: {d}")
    for w in words:
        if w not in d["message"]:
            raise HarnessError(f"page: the {kind} {d['message']!r} does "
                               f"not name {w!r}")
    params = {"accept": accept}
    if text is not None:
        params["promptText"] = text
    dt.call("Page.handleJavaScriptDialog", params)
    return d["message"]


def click(dt, selector):
    """Clicks from a timer, so that Runtime.evaluate returns before a
    dialog the click opens blocks the page."""
    ok = dt.evaluate(
        f"(() => {{ const b = document.querySelector({json.dumps(selector)});"
        f" if (!b || b.disabled) return false; "
        f"setTimeout(() => b.click(), 0); return true; }})()")
    if not ok:
        raise HarnessError(f"page: no enabled button {selector}")


def dead_entries(s):
    return dict(s.sql("SELECT id, tries FROM tb_0033 WHERE status = -1"))


def shows(t, dt, pred, what):
    def check():
        st = dt.evaluate(PAGE_STATE)
        return st if pred(st) else Pending(st)
    return wait_until(check, 20, f"page: {what}", interval=0.2,
                      on_timeout=t.logs)


@test(timeout=300)
def dashboard_during_an_outage(t):
    p, (r,), (s,), _ = make_relay(
        t, ["R"], ["S"],
        origin_options={"backlog_age_warn": "1s"},
        server_options={"peer_down_after": "1s"})
    for n in (p, r, s):
        with_admin(n)
    s.journal_options.update(fail_rate="1", permanent_keys=BAD)
    s.redo.update(max_tries=1)
    p.start()
    s.start()
    r.start()
    for i in range(FAILED):
        r.enqueue("S", type=1, key=f"k{i:03d}", payload=b"failing")
    r.enqueue("S", type=1, key=BAD, payload=b"bad")
    # one delayed document: pending in S's redo queue, after the dead ones
    r.enqueue("S", type=1, key="later", payload=b"later",
              deliver_at=int(time.time() * 1000) + 3600_000)
    sent = FAILED + 2
    r.wait_all_confirmed("S", sent, timeout=SETTLE)
    wait_until(lambda: (lambda n: n == FAILED + 1 or Pending(n))(
        len(dead_entries(s))), SETTLE, "S: the dead letters",
        on_timeout=t.logs)

    chromium = Chromium(t.dir)
    try:
        dt = chromium.start()

        # 1. S's page: the dead letters by error, dead first, paged.
        groups = s.semqctl_json("redo", "list", "--status", "dead",
                                "--group-by", "error")["groups"]
        want = sorted([str(g["count"]), g["error"], ",".join(g["dests"])]
                      for g in groups)
        assert sorted(g["count"] for g in groups) == [1, FAILED], groups
        open_page(chromium, dt, s)
        st = shows(t, dt, lambda x: len(x["groups"]) == 2 and
                   len(x["redo"]) == PAGE, "S: two groups, a full page")
        assert sorted([g[0], g[1], g[2].replace(", ", ",")]
                      for g in st["groups"]) == want, (st["groups"], want)
        assert st["groups"][0][0] == str(FAILED), st["groups"]
        assert "injected failure" in st["groups"][0][1], st["groups"]
        assert all(e["status"] == "dead" for e in st["redo"]), st["redo"]
        assert st["count"] == f"entries 1–{PAGE} of {FAILED + 2}, " \
            "dead first", st["count"]
        first_page = {e["id"] for e in st["redo"]}
        screenshot(dt, t, "deadletters-S.png")
        click(dt, "#redo-next")
        st = shows(t, dt, lambda x: len(x["redo"]) == FAILED + 2 - PAGE,
                   "S: the second page")
        assert [e["status"] for e in st["redo"]][-1] == "pending", st
        assert not first_page & {e["id"] for e in st["redo"]}, st
        assert st["count"] == f"entries {PAGE + 1}–{FAILED + 2} of " \
            f"{FAILED + 2}, dead first", st["count"]

        # the large group's Retry: the dry run's count asked, then exactly
        # those entries run again (and fail again: tries + 1)
        before = dead_entries(s)
        click(dt, '#groups-body button[data-group-action="retry"]'
                  '[data-group="0"]')
        msg = answer(dt, "confirm", True, None, f"Retry {FAILED} dead "
                     "entries", "injected failure")
        listed = {int(x) for x in msg.split("(ids ")[1].split(")")[0]
                  .replace("…", "").split(",") if x.strip()}
        bad_id, = [i for i, in s.sql("SELECT id FROM tb_0033 WHERE "
                                     "msg_key = ?", (BAD,))]
        assert len(listed) == 20 and bad_id not in listed, msg
        wait_until(lambda: (lambda now: all(
            now.get(i, 0) == before[i] + 1 for i in before if i != bad_id)
            or Pending(now))(dead_entries(s)), SETTLE,
            "S: the group's entries ran again", on_timeout=t.logs)
        assert dead_entries(s)[bad_id] == before[bad_id]
        st = shows(t, dt, lambda x: f"{FAILED} dead entries retried" in
                   x["message"], "S: the retry's message")

        # 2. S stops; R sends: P takes custody.
        s.stop()
        for i in range(HELD):
            r.enqueue("S", type=1, key=f"held{i}", payload=b"held")
        wait_until(lambda: (lambda n: n == HELD or Pending(n))(
            r.sql("SELECT count(*) FROM tb_0031 WHERE dest = 'S' AND "
                  "status = 6")[0][0]), SETTLE,
            f"R: {HELD} rows held by P", on_timeout=t.logs)

        open_page(chromium, dt, r)
        st = shows(t, dt, lambda x: any(
            pr["reason"] == "backlog_old" for pr in x["problems"]) and any(
            row[0] == "outbound" and row[2] == "S" and
            "waiting at P: 5" in row[6] and "stuck" in row[6]
            for row in x["streams"]),
            "R: S stuck, its documents waiting at P")
        assert st["health"] == "degraded" and st["problemsVisible"], st
        pr, = [x for x in st["problems"] if x["reason"] == "backlog_old"]
        assert "to S" in pr["text"], pr
        peer, = [row for row in st["peers"] if row[0] == "P"]
        assert peer[1] == "ready", peer
        assert not st["refreshError"], st
        screenshot(dt, t, "outage-R.png")

        open_page(chromium, dt, p)
        st = shows(t, dt, lambda x: any(
            row[0] == "S" and row[1].startswith("down ")
            for row in x["peers"]), "P: peer S down")
        peer, = [row for row in st["peers"] if row[0] == "S"]
        assert peer[4].endswith(" ago") and peer[5] not in ("", "—"), peer
        stream, = [row for row in st["streams"] if row[0] == "outbound"]
        assert stream[1:4] == ["R", "S", str(HELD)] and \
            stream[6] == f"{HELD} held here for R", stream
        held, = [row for row in st["custody"] if row[0] == "held here"]
        assert held[1:3] == ["R", "S"] and held[4] == str(HELD), held
        screenshot(dt, t, "outage-P.png")
    finally:
        chromium.stop()

    s.start()
    r.wait_all_confirmed("S", sent + HELD, timeout=SETTLE)
    print(f"     screenshots in {t.dir}")


if __name__ == "__main__":
    run()
