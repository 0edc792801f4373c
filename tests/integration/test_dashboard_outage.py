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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import HarnessError, Pending, run, test, wait_until  # noqa: E402
from relaytest import make_relay, with_admin  # noqa: E402
from browser import Chromium, screenshot  # noqa: E402

SETTLE = 30.0
HELD = 5  # documents R sends while S is down
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
    p.start()
    s.start()
    r.start()
    r.enqueue("S", type=1, key="warmup", payload=b"first")
    r.wait_all_confirmed("S", 1, timeout=SETTLE)

    # 2. S stops; R sends: P takes custody.
    s.stop()
    for i in range(HELD):
        r.enqueue("S", type=1, key=f"held{i}", payload=b"held")
    wait_until(lambda: (lambda n: n == HELD or Pending(n))(
        r.sql("SELECT count(*) FROM tb_0031 WHERE dest = 'S' AND "
              "status = 6")[0][0]), SETTLE,
        f"R: {HELD} rows held by P", on_timeout=t.logs)

    chromium = Chromium(t.dir)
    try:
        dt = chromium.start()
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
        held, = [row for row in st["custody"] if row[0] == "held here"]
        assert held[1:3] == ["R", "S"] and held[4] == str(HELD), held
        screenshot(dt, t, "outage-P.png")
    finally:
        chromium.stop()

    s.start()
    r.wait_all_confirmed("S", 1 + HELD, timeout=SETTLE)
    print(f"     screenshots in {t.dir}")
    print(json.dumps({"held": HELD}))


if __name__ == "__main__":
    run()
