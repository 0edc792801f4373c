-- SPDX-License-Identifier: MIT
-- SEMQ schema version 1: the three queues of SPEC §4 and what fills them.
--
-- Applied once by the store's migration runner inside one transaction; the
-- runner records the version in semq_schema. Never edit a released file: add
-- 0002_….sql instead.
--
-- Invariants the triggers keep:
--  * a bare INSERT INTO tb_0031(dest, type, msg_key, payload) gets origin = this
--    node, seq = next number of the stream (origin, dest), prev_seq = the seq of
--    the previous message with the same key in the stream, created_at = now,
--    status = 0. The counter lives in semq_stream_out and only ever grows, so a
--    seq is never reused, even after purge; a rolled back insert rolls back
--    its increment too, so there is no gap.
--  * bad input is refused where it enters, with a message naming the column.

CREATE TABLE semq_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- Outbound stream counters: last seq handed out per (origin, dest).
CREATE TABLE semq_stream_out (
    origin   TEXT NOT NULL,
    dest     TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (origin, dest)
) WITHOUT ROWID;

-- Inbound stream watermarks: every seq <= confirmed_through is AS_OK and its
-- tb_0030 row may be compacted away; a copy with seq <= it is a duplicate.
CREATE TABLE semq_stream_in (
    origin            TEXT NOT NULL,
    dest              TEXT NOT NULL,
    confirmed_through INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (origin, dest)
) WITHOUT ROWID;

-- tb_0031 — outbound queue (origins; a relay's store-and-forward copies too).
CREATE TABLE tb_0031 (
    id              INTEGER PRIMARY KEY,
    origin          TEXT,
    dest            TEXT NOT NULL
                    CONSTRAINT "tb_0031.dest must be a node id (1-64 of A-Za-z0-9._-)"
                    CHECK (length(dest) BETWEEN 1 AND 64
                           AND dest NOT GLOB '*[^A-Za-z0-9._-]*'),
    seq             INTEGER CHECK (seq IS NULL OR seq > 0),
    type            INTEGER NOT NULL DEFAULT 0
                    CONSTRAINT "tb_0031.type must be an integer 0..4294967295"
                    CHECK (typeof(type) = 'integer' AND type BETWEEN 0 AND 4294967295),
    msg_key         TEXT CONSTRAINT "tb_0031.msg_key must be text of at most 255 bytes"
                    CHECK (msg_key IS NULL OR (typeof(msg_key) = 'text' AND length(CAST(msg_key AS BLOB)) <= 255)),
    prev_seq        INTEGER NOT NULL DEFAULT 0,
    deliver_at      INTEGER CONSTRAINT "tb_0031.deliver_at must be unix ms >= 0" CHECK (deliver_at IS NULL OR (typeof(deliver_at) = 'integer' AND deliver_at >= 0)),
    payload         BLOB NOT NULL DEFAULT x'',
    created_at      INTEGER,
    status          INTEGER NOT NULL DEFAULT 0 CHECK (status IN (0, 4, 6, 100, -2)),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,
    sent_at         INTEGER,
    acked_at        INTEGER,
    result          INTEGER CHECK (result IS NULL OR result IN (0, 1, 2, 3, 4)),
    last_error      TEXT
);
CREATE UNIQUE INDEX idx_0031_1 ON tb_0031(origin, dest, seq);
-- Every deadline (retry, in-doubt query, purge) is next_attempt_at per status.
CREATE INDEX idx_0031_due ON tb_0031(status, next_attempt_at);
-- Unsent rows of a stream in seq order.
CREATE INDEX idx_0031_unsent ON tb_0031(dest, origin, seq) WHERE status = 0;
-- Key chains: the previous message with the same key in the stream.
CREATE INDEX idx_0031_key ON tb_0031(origin, dest, msg_key, seq) WHERE msg_key IS NOT NULL;

CREATE TRIGGER tb_0031_fill AFTER INSERT ON tb_0031 WHEN NEW.seq IS NULL
BEGIN
    SELECT RAISE(ABORT, 'tb_0031: this database has no node id; open it once with semqd or semqctl')
     WHERE NOT EXISTS (SELECT 1 FROM semq_meta WHERE key = 'node_id');
    SELECT RAISE(ABORT, 'tb_0031.origin: leave it empty, it is filled with this node''s id')
     WHERE NEW.origin IS NOT NULL
       AND NEW.origin <> (SELECT value FROM semq_meta WHERE key = 'node_id');
    SELECT RAISE(ABORT, 'tb_0031.payload: larger than max_payload')
     WHERE length(CAST(NEW.payload AS BLOB)) >
           CAST(COALESCE((SELECT value FROM semq_meta WHERE key = 'max_payload'), 16777216) AS INTEGER);
    SELECT RAISE(ABORT, 'tb_0031.payload: must be a blob or text')
     WHERE typeof(NEW.payload) NOT IN ('blob', 'text');

    INSERT INTO semq_stream_out(origin, dest, last_seq)
    VALUES ((SELECT value FROM semq_meta WHERE key = 'node_id'), NEW.dest, 1)
    ON CONFLICT (origin, dest) DO UPDATE SET last_seq = last_seq + 1;

    UPDATE tb_0031
       SET origin          = (SELECT value FROM semq_meta WHERE key = 'node_id'),
           seq             = (SELECT s.last_seq FROM semq_stream_out s
                               WHERE s.origin = (SELECT value FROM semq_meta WHERE key = 'node_id')
                                 AND s.dest = NEW.dest),
           msg_key         = NULLIF(NEW.msg_key, ''),
           prev_seq        = COALESCE((SELECT max(p.seq) FROM tb_0031 p
                                        WHERE p.origin = (SELECT value FROM semq_meta WHERE key = 'node_id')
                                          AND p.dest = NEW.dest
                                          AND p.msg_key = NULLIF(NEW.msg_key, '')
                                          AND p.seq IS NOT NULL), 0),
           deliver_at      = COALESCE(NEW.deliver_at, 0),
           payload         = CAST(NEW.payload AS BLOB),
           created_at      = COALESCE(NEW.created_at,
                                      CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
           status          = 0,
           attempts        = 0,
           next_attempt_at = 0,
           sent_at         = NULL,
           acked_at        = NULL,
           result          = NULL
     WHERE id = NEW.id;
END;

-- tb_0030 — pending-ack / received record (receivers).
CREATE TABLE tb_0030 (
    id           INTEGER PRIMARY KEY,
    origin       TEXT NOT NULL,
    dest         TEXT NOT NULL,
    seq          INTEGER NOT NULL CHECK (seq > 0),
    type         INTEGER NOT NULL,
    msg_key      TEXT,
    prev_seq     INTEGER NOT NULL DEFAULT 0,
    received_at  INTEGER NOT NULL,
    via          TEXT,
    result       INTEGER NOT NULL CHECK (result IN (0, 1, 3, 4)),
    ack_status   INTEGER NOT NULL DEFAULT 0 CHECK (ack_status IN (0, 1)),
    confirm_need INTEGER NOT NULL DEFAULT 1,
    confirm_got  INTEGER NOT NULL DEFAULT 0
);
-- The exactly-once guard.
CREATE UNIQUE INDEX idx_0030_1 ON tb_0030(origin, dest, seq);
-- Rows still waiting for their 810-Response (indications to repeat).
CREATE INDEX idx_0030_unacked ON tb_0030(ack_status, received_at) WHERE ack_status = 0;

-- tb_0033 — failure-redo queue and delayed messages (receivers).
CREATE TABLE tb_0033 (
    id              INTEGER PRIMARY KEY,
    origin          TEXT NOT NULL,
    dest            TEXT NOT NULL,
    seq             INTEGER NOT NULL CHECK (seq > 0),
    type            INTEGER NOT NULL,
    msg_key         TEXT,
    prev_seq        INTEGER NOT NULL DEFAULT 0,
    deliver_at      INTEGER NOT NULL DEFAULT 0,
    msg_created_at  INTEGER NOT NULL DEFAULT 0,
    payload         BLOB NOT NULL,
    status          INTEGER NOT NULL CHECK (status IN (0, 1, 2, -1, -2)),
    tries           INTEGER NOT NULL DEFAULT 0,
    level           INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    discard_reason  TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE UNIQUE INDEX idx_0033_1 ON tb_0033(origin, dest, seq);
CREATE INDEX idx_0033_due ON tb_0033(status, next_attempt_at);
CREATE INDEX idx_0033_key ON tb_0033(origin, dest, msg_key, seq) WHERE msg_key IS NOT NULL;
