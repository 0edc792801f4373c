# SPDX-License-Identifier: MIT
"""wire — SEMQ's wire frames (proto/semq.proto) in pure Python.

A minimal protobuf encoder and decoder for the messages of semq.proto, so
that integration tests can talk to semqd as a peer — a well-behaved one or a
hostile one — without the protobuf package (Python 3 standard library only).

Messages are plain dicts keyed by field name. A Frame is a dict with exactly
one body key, e.g. {"hello": {"node_id": "X", "protocol_version": 1}}.

    body = encode_frame({"data": {"messages": [{"origin": "X", "dest": "S",
                                                "seq": 1, "type": 7}]}})
    sock.sendall(frame(body))                  # 4-byte length + body
    kind, msg = decode_frame(read_frame(sock)) # ("ack_indication", {...})

Encoding follows proto3: a scalar equal to its default (0, "", b"", False)
is not written, repeated fields are written one entry per tag, enums are
numbers. Strings are encoded as UTF-8, or written as given when they are
bytes, so a test can put a NUL or invalid UTF-8 into a node id on purpose.

Decoding returns every field of the schema (defaults for absent ones,
[] for repeated ones); unknown fields are skipped (as the proto's
compatibility rule says) and listed under "_unknown" as field numbers.
Strings decode as str when they are UTF-8, else as bytes. A body that does
not parse raises WireError.

DESIGN: one table, SCHEMA, describes every message: field number -> (name,
type, repeated). Both directions walk it; there is no generated code, so the
table must follow proto/semq.proto when that file changes (a field only
added there is decoded as unknown here until it is added to SCHEMA).
"""

import random
import socket
import ssl
import struct
import time

__all__ = [
    "WireError", "SCHEMA", "BODIES", "PROTOCOL_VERSION",
    "ROLE_EDGE", "ROLE_RELAY", "ROLE_SERVER",
    "ERR_PROTOCOL", "ERR_FRAME_TOO_BIG", "ERR_VERSION", "ERR_IDENTITY",
    "ERR_FORBIDDEN", "ERR_UNREACHABLE", "ERR_INTERNAL", "ERR_SHUTDOWN",
    "ERROR_NAMES",
    "RESULT_PROCESSED", "RESULT_REDO", "RESULT_DUPLICATE",
    "RESULT_SCHEDULED", "RESULT_CANCELLED",
    "REFUSAL_NONE", "REFUSAL_CONFLICT", "REFUSAL_UNDECIDED", "LIFE_LEGACY",
    "RELAY_FORWARDED", "RELAY_STORED", "RELAY_UNREACHABLE",
    "encode_varint", "decode_varint", "encode_tag", "encode_message",
    "decode_message", "encode_frame", "decode_frame", "frame",
    "read_frame", "recv_exactly", "hello_frame", "message", "data_frame",
]

PROTOCOL_VERSION = 1
# The wire revision this release speaks (Hello.wire_revision).
WIRE_REVISION = 2
# The life a node of wire revision 2 gives the streams of a 0.1 peer.
LIFE_LEGACY = 1

ROLE_EDGE, ROLE_RELAY, ROLE_SERVER = 1, 2, 3

# Error.Code
ERR_PROTOCOL = 1
ERR_FRAME_TOO_BIG = 2
ERR_VERSION = 3
ERR_IDENTITY = 4
ERR_FORBIDDEN = 5
ERR_UNREACHABLE = 6
ERR_INTERNAL = 7
ERR_SHUTDOWN = 8
ERROR_NAMES = {0: "CODE_UNSPECIFIED", 1: "PROTOCOL", 2: "FRAME_TOO_BIG",
               3: "VERSION", 4: "IDENTITY", 5: "FORBIDDEN",
               6: "UNREACHABLE", 7: "INTERNAL", 8: "SHUTDOWN",
               9: "DEST_UNAVAILABLE"}

# Result
RESULT_PROCESSED, RESULT_REDO, RESULT_DUPLICATE = 0, 1, 2
RESULT_SCHEDULED, RESULT_CANCELLED = 3, 4

# Refusal (Verdict.refusal, QueryAnswer.refusal), wire revision 2
REFUSAL_NONE, REFUSAL_CONFLICT, REFUSAL_UNDECIDED = 0, 1, 2

# RelayAck.Kind
RELAY_FORWARDED, RELAY_STORED, RELAY_UNREACHABLE = 1, 2, 3


class WireError(ValueError):
    """Bytes that are not a valid encoding of the expected message."""


# Field types. Varint types carry how they are read back; fixed64 is wire
# type 1 (8 bytes, little-endian), read back as an unsigned integer.
_VARINT = {"uint32", "uint64", "int64", "enum", "bool"}
_FIXED64 = {"fixed64"}
_LEN = {"string", "bytes"}

# message name -> {field number: (field name, type, repeated)}; a type that
# is not a scalar names another message of the table.
SCHEMA = {
    "MsgId": {1: ("origin", "string", False), 2: ("dest", "string", False),
              3: ("seq", "uint64", False), 4: ("life", "fixed64", False),
              5: ("digest", "fixed64", False)},
    "Hello": {1: ("node_id", "string", False),
              2: ("protocol_version", "uint32", False),
              3: ("role", "enum", False), 4: ("features", "uint32", False),
              5: ("max_frame", "uint32", False),
              6: ("instance", "string", False),
              7: ("life", "fixed64", False),
              8: ("wire_revision", "uint32", False),
              9: ("software", "string", False)},
    "Message": {1: ("origin", "string", False), 2: ("dest", "string", False),
                3: ("seq", "uint64", False), 4: ("type", "uint32", False),
                5: ("key", "string", False),
                6: ("prev_seq", "uint64", False),
                7: ("deliver_at", "int64", False),
                8: ("payload", "bytes", False),
                9: ("created_at", "int64", False),
                10: ("tombstone", "bool", False),
                11: ("stored_by", "string", False),
                12: ("life", "fixed64", False),
                13: ("digest", "fixed64", False),
                14: ("prev_digest", "fixed64", False),
                15: ("hops", "uint32", False)},
    "Data": {1: ("messages", "Message", True)},
    "RelayAck": {1: ("ids", "MsgId", True), 2: ("kind", "enum", False),
                 3: ("detail", "string", False),
                 4: ("reason", "enum", False),
                 5: ("about_query", "bool", False)},
    "Verdict": {1: ("id", "MsgId", False), 2: ("result", "enum", False),
                3: ("refusal", "enum", False), 4: ("dead", "bool", False),
                5: ("high", "uint64", False)},
    "AckIndication": {1: ("verdicts", "Verdict", True)},
    "AckResponse": {1: ("ids", "MsgId", True), 2: ("from", "string", False)},
    "Query": {1: ("ids", "MsgId", True)},
    "QueryAnswer": {1: ("id", "MsgId", False),
                    2: ("received", "bool", False),
                    3: ("result", "enum", False),
                    4: ("refusal", "enum", False),
                    5: ("dead", "bool", False),
                    6: ("high", "uint64", False)},
    "QueryReply": {1: ("answers", "QueryAnswer", True)},
    "Ping": {1: ("nonce", "uint64", False), 2: ("sent_at", "int64", False)},
    "Pong": {1: ("nonce", "uint64", False), 2: ("sent_at", "int64", False)},
    "Error": {1: ("code", "enum", False), 2: ("text", "string", False),
              3: ("fatal", "bool", False)},
    "StreamQuery": {1: ("origin", "string", False),
                    2: ("life", "fixed64", False),
                    3: ("dests", "string", True)},
    "StreamHigh": {1: ("dest", "string", False), 2: ("high", "uint64", False)},
    "StreamState": {1: ("origin", "string", False),
                    2: ("life", "fixed64", False),
                    3: ("reporter", "string", False),
                    4: ("streams", "StreamHigh", True)},
    # Trace (semqctl trace); TraceHop's records (field 6) are left to the
    # daemon's own decoder: they come back under "_unknown" here.
    "Trace": {1: ("request", "uint64", False), 2: ("ids", "MsgId", True)},
    "TraceHop": {1: ("node", "string", False),
                 2: ("instance", "string", False),
                 3: ("relay", "bool", False),
                 4: ("store_and_forward", "bool", False),
                 5: ("note", "string", False)},
    "TraceReply": {1: ("request", "uint64", False),
                   2: ("hops", "TraceHop", True)},
    "Frame": {1: ("hello", "Hello", False), 2: ("data", "Data", False),
              3: ("relay_ack", "RelayAck", False),
              4: ("ack_indication", "AckIndication", False),
              5: ("ack_response", "AckResponse", False),
              6: ("query", "Query", False),
              7: ("query_reply", "QueryReply", False),
              8: ("ping", "Ping", False), 9: ("pong", "Pong", False),
              10: ("error", "Error", False),
              11: ("stream_query", "StreamQuery", False),
              12: ("stream_state", "StreamState", False),
              13: ("hops", "uint32", False),
              14: ("trace", "Trace", False),
              15: ("trace_reply", "TraceReply", False)},
}

# Frame body name -> its message type (the oneof `body`).
BODIES = {name: typ for name, typ, _ in SCHEMA["Frame"].values()
          if typ[0].isupper()}

_U64 = (1 << 64) - 1


# ---- varints and tags ---------------------------------------------------------

def encode_varint(v):
    """Base-128 varint of an integer; a negative one is written as its
    64-bit two's complement (10 bytes), as protobuf does for int64/enum."""
    if v < 0:
        v += 1 << 64
    if not 0 <= v <= _U64:
        raise WireError(f"varint {v} does not fit in 64 bits")
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decode_varint(buf, pos):
    """(value, new pos) of the varint at buf[pos]; raises WireError when it
    is truncated or longer than 10 bytes."""
    v = shift = 0
    for i in range(10):
        if pos + i >= len(buf):
            raise WireError(f"truncated varint at byte {pos}")
        b = buf[pos + i]
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v & _U64, pos + i + 1
    raise WireError(f"varint longer than 10 bytes at byte {pos}")


def encode_tag(number, wire_type):
    return encode_varint(number << 3 | wire_type)


def _len_field(number, payload):
    return encode_tag(number, 2) + encode_varint(len(payload)) + payload


# ---- messages -----------------------------------------------------------------

def _encode_scalar(number, typ, v):
    if typ in _VARINT:
        return encode_tag(number, 0) + encode_varint(int(v))
    if typ in _FIXED64:
        return encode_tag(number, 1) + (int(v) & _U64).to_bytes(8, "little")
    if isinstance(v, str):
        v = v.encode("utf-8")
    return _len_field(number, bytes(v))


def _is_default(typ, v):
    if typ in _VARINT or typ in _FIXED64:
        return not v
    return len(v) == 0


def encode_message(name, fields):
    """The protobuf bytes of message `name` from dict `fields`. Unknown keys
    are an error (a typo would otherwise send something else than meant);
    None values are skipped."""
    schema = SCHEMA[name]
    by_name = {f[0]: (num, f[1], f[2]) for num, f in schema.items()}
    for k in fields:
        if k not in by_name:
            raise WireError(f"{name} has no field {k!r}")
    out = bytearray()
    for num in sorted(schema):
        fname, typ, repeated = schema[num]
        v = fields.get(fname)
        if v is None:
            continue
        values = list(v) if repeated else [v]
        for one in values:
            if typ in SCHEMA:
                out += _len_field(num, encode_message(typ, one))
            elif repeated or not _is_default(typ, one):
                out += _encode_scalar(num, typ, one)
    return bytes(out)


def _default(typ, repeated):
    if repeated:
        return []
    if typ in SCHEMA:
        return None
    if typ == "bool":
        return False
    if typ in _VARINT or typ in _FIXED64:
        return 0
    return "" if typ == "string" else b""


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_message(name, buf):
    """The dict of message `name` from its protobuf bytes."""
    schema = SCHEMA[name]
    out = {f[0]: _default(f[1], f[2]) for f in schema.values()}
    unknown = []
    sub_raw = {}  # raw bytes of each singular sub-message seen so far
    buf = bytes(buf)
    pos = 0
    while pos < len(buf):
        tag, pos = decode_varint(buf, pos)
        num, wt = tag >> 3, tag & 7
        if num == 0:
            raise WireError(f"{name}: field number 0")
        if wt == 0:
            raw, pos = decode_varint(buf, pos)
        elif wt == 1:
            if pos + 8 > len(buf):
                raise WireError(f"{name}: truncated fixed64")
            raw, pos = buf[pos:pos + 8], pos + 8
        elif wt == 5:
            if pos + 4 > len(buf):
                raise WireError(f"{name}: truncated fixed32")
            raw, pos = buf[pos:pos + 4], pos + 4
        elif wt == 2:
            n, pos = decode_varint(buf, pos)
            if n > len(buf) - pos:
                raise WireError(f"{name}: field {num} claims {n} bytes, "
                                f"{len(buf) - pos} left")
            raw, pos = buf[pos:pos + n], pos + n
        else:
            raise WireError(f"{name}: wire type {wt} of field {num}")
        if num not in schema:
            unknown.append(num)
            continue
        fname, typ, repeated = schema[num]
        want = 0 if typ in _VARINT else 1 if typ in _FIXED64 else 2
        if wt != want:
            raise WireError(f"{name}.{fname}: wire type {wt}, expected "
                            f"{want}")
        if typ in SCHEMA:
            v = decode_message(typ, raw) if repeated else None
        elif typ == "bool":
            v = bool(raw)
        elif typ == "int64" or typ == "enum":
            v = _signed64(raw)
        elif typ == "uint32":
            v = raw & 0xFFFFFFFF
        elif typ == "uint64":
            v = raw
        elif typ == "fixed64":
            v = int.from_bytes(raw, "little")
        elif typ == "string":
            try:
                v = raw.decode("utf-8")
            except UnicodeDecodeError:
                v = raw
        else:
            v = raw
        if repeated:
            out[fname].append(v)
        elif typ in SCHEMA:
            # a sub-message seen twice is merged: protobuf's rule, the same
            # as parsing its pieces concatenated
            sub_raw[fname] = sub_raw.get(fname, b"") + raw
            out[fname] = decode_message(typ, sub_raw[fname])
        else:
            out[fname] = v
    if unknown:
        out["_unknown"] = unknown
    return out


# ---- frames -------------------------------------------------------------------

def encode_frame(body):
    """The bytes of a Frame (without the length header) from a dict with one
    body key, e.g. {"ping": {"nonce": 1}}. An empty dict encodes a Frame
    with no body (zero bytes)."""
    if len(body) > 1:
        raise WireError(f"a Frame has one body, got {sorted(body)}")
    return encode_message("Frame", body)


def decode_frame(buf):
    """(body name, body dict) of a Frame's bytes; (None, None) for a Frame
    with no (known) body. Raises WireError when it does not parse."""
    f = decode_message("Frame", buf)
    bodies = [(k, f[k]) for k in BODIES if f[k] is not None]
    if not bodies:
        return None, None
    # oneof: the last one on the wire wins; our encoder writes only one
    return bodies[-1]


def frame(body):
    """Length header (4 bytes, big-endian) + body bytes. `body` is bytes or
    a dict for encode_frame."""
    if isinstance(body, dict):
        body = encode_frame(body)
    return struct.pack(">I", len(body)) + bytes(body)


def recv_exactly(sock, n):
    """n bytes from sock; raises EOFError when the peer closes first (a TLS
    alert, reset or unclean close counts as closing). The socket's timeout
    applies to each recv (socket.timeout propagates)."""
    buf = bytearray()
    while len(buf) < n:
        try:
            b = sock.recv(n - len(buf))
        except socket.timeout:
            raise
        except (ssl.SSLError, ConnectionError) as e:
            raise EOFError(f"closed after {len(buf)} of {n} bytes: "
                           f"{type(e).__name__}: {e}") from e
        if not b:
            raise EOFError(f"closed after {len(buf)} of {n} bytes")
        buf += b
    return bytes(buf)


def read_frame(sock, max_frame=64 << 20):
    """The body bytes of the next frame on sock (see recv_exactly for the
    errors). A length over max_frame raises WireError."""
    (n,) = struct.unpack(">I", recv_exactly(sock, 4))
    if n > max_frame:
        raise WireError(f"frame length {n} over {max_frame}")
    return recv_exactly(sock, n)


# ---- bodies a test peer sends ---------------------------------------------

def hello_frame(node_id, version=PROTOCOL_VERSION, *, software=None):
    """The body dict of an edge peer's Hello (wrap it with frame()):
    node_id, protocol `version`, no features, max_frame 1 MiB, and no life
    or wire revision. With `software`, the Hello of a current node, so that
    the node has nothing to warn about but what a test provokes: wire
    revision WIRE_REVISION, a life of its own (random, with the bit of
    value 2 set: never 0 nor LIFE_LEGACY) and that software name."""
    hello = {"node_id": node_id, "protocol_version": version,
             "role": ROLE_EDGE, "features": 0, "max_frame": 1 << 20}
    if software is not None:
        hello.update(life=random.getrandbits(63) | 2,
                     wire_revision=WIRE_REVISION, software=software)
    return {"hello": hello}


def message(origin="X", dest="S", seq=1, key="k", payload=b"hostile",
            **fields):
    """A Message dict of type 7 created now; `fields` add or override
    fields (e.g. stored_by)."""
    m = {"origin": origin, "dest": dest, "seq": seq, "type": 7, "key": key,
         "payload": payload, "created_at": int(time.time() * 1000)}
    m.update(fields)
    return m


def data_frame(*messages):
    """The body dict of a Data frame of these message dicts (wrap it with
    frame()); with none, of one message() with its defaults."""
    return {"data": {"messages": list(messages) or [message()]}}


# ---- a peer's side of a connection, for tests that speak as a node ---------

def client_context(certs, node_id=None, *, cert=None, key=None,
                   min_version=ssl.TLSVersion.TLSv1_3,
                   max_version=ssl.TLSVersion.TLSv1_3):
    """A TLS client context (TLS 1.3 unless min_version/max_version say
    otherwise) verifying the peer against the test CA (a semqtest.Certs)
    and presenting node_id's certificate, or cert/key, or none when both
    are None."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # node certificates name ids, not hosts
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(certs.ca)
    ctx.minimum_version = min_version
    ctx.maximum_version = max_version
    if node_id is not None:
        cert, key = certs.crt(node_id), certs.key(node_id)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def recv_frame(sock):
    """The next frame that is not a Ping (Pings are answered)."""
    while True:
        kind, body = decode_frame(read_frame(sock))
        if kind != "ping":
            return kind, body
        sock.sendall(frame({"pong": {"nonce": body["nonce"],
                                     "sent_at": body["sent_at"]}}))
