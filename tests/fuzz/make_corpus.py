#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make_corpus — writes the seed corpora of the fuzz targets.

    tests/fuzz/make_corpus.py [OUTDIR]     (default: tests/fuzz/corpus)

One directory per target, each with a handful of small valid inputs in the
format that target reads (see the comment at the top of each fuzz_*.c):

  frame   a settings byte, then length-prefixed frames as on the wire
  config  node.ini files
  bill    bill documents (the payload of a type 2800 message)
  proto   a flags byte, then records: control byte, 2-byte big-endian
          length, frame body

Frames are built with tests/integration/wire.py, so they follow
proto/semq.proto. The output is deterministic: running it again rewrites the
same files.
"""

import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import wire  # noqa: E402


def msg(origin, dest, seq, **kw):
    m = {"origin": origin, "dest": dest, "seq": seq, "type": kw.pop("type", 7)}
    m.update(kw)
    return m


def mid(origin, dest, seq):
    return {"origin": origin, "dest": dest, "seq": seq}


FRAMES = {
    "hello": {"hello": {"node_id": "R1", "protocol_version": 1,
                        "role": wire.ROLE_EDGE, "features": 0,
                        "max_frame": 1 << 20}},
    "data": {"data": {"messages": [
        msg("R1", "S1", 1, key="order-1", payload=b"hello",
            created_at=1700000000000),
        msg("R1", "S1", 2, key="order-1", prev_seq=1, payload=b"again",
            created_at=1700000000001)]}},
    "data_delayed": {"data": {"messages": [
        msg("R1", "S1", 3, key="k", deliver_at=1700000060000,
            payload=b"later")]}},
    "data_tombstone": {"data": {"messages": [
        msg("R1", "S1", 4, tombstone=True)]}},
    "data_relay": {"data": {"messages": [
        msg("R1", "Q1", 1, key="x", payload=b"via", stored_by="P1")]}},
    "relay_ack": {"relay_ack": {"ids": [mid("S1", "R1", 1)],
                                "kind": wire.RELAY_STORED,
                                "detail": "stored"}},
    "indication": {"ack_indication": {"verdicts": [
        {"id": mid("S1", "R1", 1), "result": wire.RESULT_PROCESSED},
        {"id": mid("S1", "R1", 2), "result": wire.RESULT_REDO}]}},
    "response": {"ack_response": {"ids": [mid("R1", "S1", 1),
                                          mid("R1", "S1", 2)],
                                  "from": "R1"}},
    "query": {"query": {"ids": [mid("R1", "S1", 1), mid("R1", "S1", 9)]}},
    "query_reply": {"query_reply": {"answers": [
        {"id": mid("S1", "R1", 1), "received": True, "result": 0},
        {"id": mid("S1", "R1", 2), "received": False}]}},
    "ping": {"ping": {"nonce": 7, "sent_at": 1700000000000}},
    "pong": {"pong": {"nonce": 7, "sent_at": 1700000000000}},
    "error": {"error": {"code": wire.ERR_FORBIDDEN, "text": "no",
                        "fatal": True}},
}


def enc(frame):
    return wire.encode_frame(frame)


def body(name):
    return enc(FRAMES[name])


def frame_seeds():
    seeds = {}
    for name in FRAMES:
        seeds[name] = b"\x00" + wire.frame(body(name))
    seeds["stream"] = b"\x01" + b"".join(
        wire.frame(body(n)) for n in ("hello", "data", "indication",
                                      "ping"))
    seeds["small_max"] = b"\x80" + wire.frame(body("data")) + \
        wire.frame(body("ping"))
    seeds["partial"] = b"\x02" + wire.frame(body("query"))[:-3]
    return seeds


CONFIGS = {
    "server": """\
[node]
id = S1
db = s1.db
listen = 127.0.0.1:7103
admin = 127.0.0.1:9103
poll_interval = 50ms
max_payload = 1MiB

[tls]
cert = S1.crt
key = S1.key
ca = ca.crt

[peer P1]
connect = 127.0.0.1:7102
trusted_relay = yes

[route]
default = P1

[plugin journal]
path = journal.so
types = *
fail_rate = 0.1

[redo]
levels = 5s,30s,1m,10m
max_tries = 5
""",
    "relay": """\
[node]
id = P1
db = /tmp/p1.db
listen = [::1]:7102
relay = yes
store_and_forward = yes
window = 100
drain_rate = 50

[peer R1]
[peer S1]
connect = localhost:7103

[route]
S2 = S1
""",
    "edge": """\
; an edge node
[node]
id = R1
db = r1.db
synchronous = normal
log_level = debug

[peer P1]
connect = 10.0.0.1:7102

[plugin bill]
path = bill.so
types = 2800, 2801
max_lines = 100
""",
    "bad": """\
[node]
id = bad id!
lissen = 1.2.3.4:99999
[peer]
[route]
default = nobody
[redo]
levels = 5x
""",
}


BILLS = {
    "one_line": {"bill_no": "B-2026-0001", "shop": "R1", "currency": "EUR",
                 "issued_at": "2026-11-22T10:00:00Z",
                 "lines": [{"item": "SKU-1", "qty": 2, "price": "3.50"}]},
    "two_lines": {"bill_no": "B-2", "shop": "R1",
                  "lines": [{"item": "A", "qty": 1, "price": "0.99"},
                            {"item": "B", "qty": 3.0, "price": 19.99}]},
    "nulls": {"bill_no": "B-3", "shop": "R1", "currency": None,
              "issued_at": "2026-11-22T11:00:00.5+01:00",
              "lines": [{"item": "Ä", "qty": 1, "price": 3}]},
    "big": {"bill_no": "B-4", "shop": "R1",
            "lines": [{"item": "X", "qty": 9223372036854775807,
                       "price": "9999999999999.99"}]},
    "bad_price": {"bill_no": "B-5", "shop": "R1",
                  "lines": [{"item": "X", "qty": 1, "price": "1.234"}]},
}


def rec(ctl, b):
    return bytes([ctl]) + struct.pack(">H", len(b)) + b


def proto_seeds():
    # control byte: bits 0-1 peer, 2-3 time step, 4 end the batch here,
    # 5 roll the batch back, 6-7 job kind (see fuzz_proto.c)
    END = 0x10
    return {
        "receive": b"\x00" + rec(0x00 | END, body("data")),
        "receive_ack": b"\x00" + rec(0x00 | END, body("data")) +
        rec(0x04 | END, body("response")),
        "delayed": b"\x00" + rec(0x00 | END, body("data_delayed")) +
        rec(0x0c | END, body("ping")),
        "tombstone": b"\x00" + rec(0x00, body("data_tombstone")) +
        rec(0x00 | END, body("data")),
        "relay": b"\x00" + rec(0x00 | END, body("data_relay")) +
        rec(0x41 | END, b""),
        "send": b"\x01" + rec(0x01 | END, body("relay_ack")) +
        rec(0x01 | END, body("indication")),
        "query": b"\x01" + rec(0x00 | END, body("query")) +
        rec(0x08 | END, body("query_reply")),
        "rollback": b"\x00" + rec(0x20 | END, body("data")) +
        rec(0x00 | END, body("data")),
        # P1 down: a copy for Q2 is stored, sent when P1 comes back, and
        # dropped when Q2's verdict comes through P1
        "store_forward": b"\x02" + rec(0x00 | END, enc(
            {"data": {"messages": [msg("R1", "Q2", 1, payload=b"sf")]}})) +
        rec(0x80 | END, b"\x07") + rec(0x05 | END, enc(
            {"ack_indication": {"verdicts": [
                {"id": mid("R1", "Q2", 1), "result": 0}]}})),
        # a dead head of key "dead" holds its successor back
        "redo_chain": b"\x00" + rec(0x00 | END, enc(
            {"data": {"messages": [
                msg("R1", "S1", 1, key="dead", payload=b"1"),
                msg("R1", "S1", 2, key="dead", prev_seq=1, payload=b"2"),
                msg("R1", "S1", 3, key="k", payload=b"3")]}})) +
        rec(0x0c | END, body("ping")),
        # S1's own messages go out; R1 confirms two, Q1 never got its one
        "own_cycle": b"\x01" + rec(0xc0 | END, b"") + rec(0x00 | END, enc(
            {"ack_indication": {"verdicts": [
                {"id": mid("S1", "R1", 1), "result": 0},
                {"id": mid("S1", "R1", 2), "result": 2}]}})) +
        rec(0x0a | END, enc({"query_reply": {"answers": [
            {"id": mid("S1", "Q1", 1), "received": False}]}})),
    }


def write(outdir, target, seeds):
    d = os.path.join(outdir, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE,
                                                                "corpus")
    write(outdir, "frame", frame_seeds())
    write(outdir, "config", CONFIGS)
    write(outdir, "bill", {k: json.dumps(v, ensure_ascii=False)
                           for k, v in BILLS.items()})
    write(outdir, "proto", proto_seeds())
    return 0


if __name__ == "__main__":
    sys.exit(main())
