# SPDX-License-Identifier: MIT
"""The bill plugin checks who sends (plugins/bill/README.md, "The shop is the
sender", "Bill numbers seen twice", "Upgrading"), between real semqd nodes.

Two shops R1 and R2 dial S directly over mutual TLS on loopback; S runs the
bill plugin for type 2800 and the journal plugin for every other type. The
tests wait for R's rows to be confirmed (status 100: S has committed its
verdict) and then read S's database and `semqctl redo list --json` on S:

  1. two_shops_one_bill_no: R1 and R2 each send bill B-0001 (shop = the
     sender): S has two bills, one per shop, each with its own lines. R1
     sending B-0001 again from another message is dead in S's tb_0033 as a
     conflict naming R1/S/1; nothing more in `bill`.
  2. shop_not_sender_dead: R1 sends a bill whose shop is "R2": it is dead at
     once in S's tb_0033 with "bill: shop 'R2' is not the sending node 'R1'"
     (R1's row confirmed with result 5, dead), and nothing of it is in
     `bill` or `bill_line`; R1's own bill sent after it is imported.
  3. old_database_migrated: S's database has the tables of the earlier
     plugin (bill_no unique across shops) with a bill of R1; S starts with
     this plugin: the unique key is (shop, bill_no), the bill and its lines
     are kept with their ids, R2's B-0001 is imported beside it, and R1's
     B-0001 from a new message is dead as a conflict.

Run by ctest as integration_bill, or by hand (NAME selects tests):
  SEMQ_BUILD_DIR=build python3 tests/integration/test_bill.py [NAME]
The bill plugin is $BILL_SO, else bill.so beside $JOURNAL_SO, else
SEMQ_BUILD_DIR/plugins/bill.so.
"""

import json
import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from semqtest import (BUILD_DIR, HarnessError, connect, msg_id,  # noqa: E402
                      run, test)

# Fast timers: short poll, quick in-doubt queries, quick reconnects.
FAST = {"poll_interval": "20ms", "query_after": "2s",
        "reconnect_min": "100ms", "reconnect_max": "500ms"}
READY_TIMEOUT = 30.0  # a node (re)started and listening
SETTLE_TIMEOUT = 30.0  # a handful of messages reach their final state
BILL_TYPE = 2800
RS_DEAD = -1  # tb_0033 status
RES_PROCESSED, RES_DEAD = 0, 5  # R's tb_0031.result


def bill_so():
    p = os.environ.get("BILL_SO")
    if p:
        return p
    j = os.environ.get("JOURNAL_SO")
    if j:
        return os.path.join(os.path.dirname(j), "bill.so")
    return os.path.join(BUILD_DIR, "plugins", "bill.so")


def make_nodes(t):
    """S (bill for 2800, journal for the rest, listens) and the shops R1, R2
    (no plugin, dial S), not started."""
    so = bill_so()
    if not os.path.isfile(so):
        raise HarnessError(f"bill plugin {so} is missing (build target "
                           "'bill', or set BILL_SO)")
    certs = t.certs(["R1", "R2", "S"])
    s = t.node("S", certs, node_options=FAST,
               plugins={"bill": {"path": so, "types": [BILL_TYPE]}})
    shops = [t.node(n, certs, listen=False, journal=False, node_options=FAST)
             for n in ("R1", "R2")]
    for r in shops:
        connect(r, s)
    return s, shops


def start(s, shops):
    s.start(timeout=READY_TIMEOUT)
    for r in shops:
        r.start(timeout=READY_TIMEOUT)


def doc(bill_no, shop, items):
    """A bill document: items is [(item, qty, price)]."""
    return json.dumps({"bill_no": bill_no, "shop": shop, "currency": "EUR",
                       "lines": [{"item": i, "qty": q, "price": p}
                                 for i, q, p in items]}).encode()


def send(r, payload, key):
    """R sends one bill to S; returns its seq."""
    (_, _, seq), = r.enqueue("S", type=BILL_TYPE, key=key, payload=payload)
    return seq


def settle(r, n):
    """Waits until R's n rows to S are confirmed: S committed its verdict on
    each. Returns {seq: result}."""
    r.wait_all_confirmed("S", total=n, timeout=SETTLE_TIMEOUT)
    return dict(r.sql("SELECT seq, result FROM tb_0031 WHERE dest = 'S'"))


def bills(s):
    """[(id, shop, bill_no, origin, seq, total_minor)] of S, by id."""
    return s.sql("SELECT id, shop, bill_no, origin, seq, total_minor FROM "
                 "bill ORDER BY id")


def lines(s):
    """[(shop, bill_no, line_no, item)] of S."""
    return s.sql("SELECT b.shop, b.bill_no, l.line_no, l.item FROM bill_line "
                 "l JOIN bill b ON b.id = l.bill_id ORDER BY b.shop, "
                 "b.bill_no, l.line_no")


def dead(s):
    """{message id: last_error} of S's dead redo entries, as the operator
    sees them (semqctl redo list --status dead --json)."""
    got = s.semqctl_json("redo", "list", "--status", "dead")
    for x in got:
        assert x["status"] == RS_DEAD and x["type"] == BILL_TYPE, x
    return {x["message"]: x["last_error"] for x in got}


# ---- 1. two shops, one bill number -------------------------------------------

@test(timeout=120)
def two_shops_one_bill_no(t):
    s, (r1, r2) = make_nodes(t)
    start(s, (r1, r2))
    assert send(r1, doc("B-0001", "R1", [("SKU-1", 2, "3.50")]),
                "B-0001") == 1
    assert send(r2, doc("B-0001", "R2", [("SKU-7", 1, "9.99"),
                                         ("SKU-8", 3, "1.00")]),
                "B-0001") == 1
    assert settle(r1, 1) == {1: RES_PROCESSED}
    assert settle(r2, 1) == {1: RES_PROCESSED}

    got = bills(s)
    assert sorted(b[1:] for b in got) == [("R1", "B-0001", "R1", 1, 700),
                                          ("R2", "B-0001", "R2", 1, 1299)], \
        got
    assert lines(s) == [("R1", "B-0001", 1, "SKU-1"),
                        ("R2", "B-0001", 1, "SKU-7"),
                        ("R2", "B-0001", 2, "SKU-8")], lines(s)
    assert dead(s) == {}

    # R1's number again, from another message: a conflict, dead.
    assert send(r1, doc("B-0001", "R1", [("SKU-9", 1, "1")]),
                "B-0001-again") == 2
    assert settle(r1, 2) == {1: RES_PROCESSED, 2: RES_DEAD}
    assert dead(s) == {msg_id("R1", "S", 2): "bill: bill_no 'B-0001' was "
                       "already imported from R1/S/1"}, dead(s)
    assert bills(s) == got
    assert s.sql("SELECT count(*) FROM bill_line")[0][0] == 3
    for r in (r1, r2):
        r.stop()
    s.stop()


# ---- 2. a bill under another shop's name ---------------------------------------

@test(timeout=120)
def shop_not_sender_dead(t):
    s, (r1, r2) = make_nodes(t)
    start(s, (r1, r2))
    forged = doc("B-0002", "R2", [("SKU-1", 1, "5.00")])
    assert send(r1, forged, "B-0002") == 1
    assert settle(r1, 1) == {1: RES_DEAD}

    why = "bill: shop 'R2' is not the sending node 'R1'"
    assert dead(s) == {msg_id("R1", "S", 1): why}, dead(s)
    assert s.sql("SELECT msg_key, status, tries, last_error FROM tb_0033 "
                 "WHERE origin = 'R1' AND seq = 1") == \
        [("B-0002", RS_DEAD, 1, why)]
    rc, out, err = s.semqctl("redo", "list", "--status", "dead")
    assert rc == 0 and msg_id("R1", "S", 1) in out, (rc, out, err)
    assert s.sql("SELECT count(*) FROM bill")[0][0] == 0
    assert s.sql("SELECT count(*) FROM bill_line")[0][0] == 0
    assert s.journal_count() == 0

    # R2's number is still free for R2, and R1's own bill goes in.
    assert send(r2, doc("B-0002", "R2", [("SKU-2", 1, "5.00")]),
                "B-0002") == 1
    assert send(r1, doc("B-0003", "R1", [("SKU-3", 1, "1.00")]),
                "B-0003") == 2
    assert settle(r2, 1) == {1: RES_PROCESSED}
    assert settle(r1, 2) == {1: RES_DEAD, 2: RES_PROCESSED}
    assert sorted(b[1:5] for b in bills(s)) == [
        ("R1", "B-0003", "R1", 2), ("R2", "B-0002", "R2", 1)], bills(s)
    assert list(dead(s)) == [msg_id("R1", "S", 1)]
    for r in (r1, r2):
        r.stop()
    s.stop()


# ---- 3. a database of the earlier plugin ------------------------------------------

OLD_TABLES = """
DROP TABLE bill_line;
DROP TABLE bill;
CREATE TABLE bill(id INTEGER PRIMARY KEY, bill_no TEXT UNIQUE NOT NULL,
  shop TEXT NOT NULL, currency TEXT, issued_at TEXT,
  total_minor INTEGER NOT NULL, origin TEXT, dest TEXT, seq INTEGER,
  imported_at INTEGER NOT NULL);
CREATE TABLE bill_line(bill_id INTEGER NOT NULL REFERENCES bill(id),
  line_no INTEGER NOT NULL, item TEXT NOT NULL, qty INTEGER NOT NULL,
  price_minor INTEGER NOT NULL, PRIMARY KEY(bill_id, line_no));
INSERT INTO bill VALUES (41, 'B-0001', 'R1', 'EUR', NULL, 700, 'R1', 'S', 99,
  1700000000000);
INSERT INTO bill_line VALUES (41, 1, 'SKU-1', 2, 350), (41, 2, 'SKU-2', 1, 0);
"""


def unique_keys(s):
    """The columns of each unique key of S's bill, sorted."""
    return sorted(",".join(sorted(c for (c,) in s.sql(
        "SELECT name FROM pragma_index_info(?)", (name,))))
        for (name,) in s.sql("SELECT name FROM pragma_index_list('bill') "
                             "WHERE \"unique\" = 1"))


@test(timeout=120)
def old_database_migrated(t):
    s, (r1, r2) = make_nodes(t)
    s.start(timeout=READY_TIMEOUT)  # makes the database and the tables
    s.stop()
    c = sqlite3.connect(s.db)
    try:
        c.executescript(OLD_TABLES)
    finally:
        c.close()
    assert unique_keys(s) == ["bill_no"], unique_keys(s)

    start(s, (r1, r2))
    assert unique_keys(s) == ["bill_no,shop"], unique_keys(s)
    assert bills(s) == [(41, "R1", "B-0001", "R1", 99, 700)], bills(s)
    assert lines(s) == [("R1", "B-0001", 1, "SKU-1"),
                        ("R1", "B-0001", 2, "SKU-2")], lines(s)
    assert s.sql("PRAGMA foreign_key_check") == []
    assert s.sql("SELECT count(*) FROM sqlite_master WHERE name LIKE "
                 "'semq_bill%'") == [(0,)]

    assert send(r2, doc("B-0001", "R2", [("SKU-5", 1, "2.00")]),
                "B-0001") == 1
    assert send(r1, doc("B-0001", "R1", [("SKU-6", 1, "2.00")]),
                "B-0001") == 1
    assert settle(r2, 1) == {1: RES_PROCESSED}
    assert settle(r1, 1) == {1: RES_DEAD}
    assert bills(s) == [(41, "R1", "B-0001", "R1", 99, 700),
                        (42, "R2", "B-0001", "R2", 1, 200)], bills(s)
    assert dead(s) == {msg_id("R1", "S", 1): "bill: bill_no 'B-0001' was "
                       "already imported from R1/S/99"}, dead(s)

    # Once is enough: a restart finds the new shape and leaves it.
    schema = s.sql("SELECT type, name, sql FROM sqlite_master ORDER BY name")
    s.restart()
    assert s.sql("SELECT type, name, sql FROM sqlite_master ORDER BY "
                 "name") == schema
    assert len(bills(s)) == 2
    for r in (r1, r2):
        r.stop()
    s.stop()


if __name__ == "__main__":
    run()
