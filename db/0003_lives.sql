-- SPDX-License-Identifier: MIT
-- SEMQ schema version 3: lives of a node, message digests, stream state
-- (docs/PROTOCOL.md, "Lives of a node: re-images and restores").
--
--  * A database is one life of its node: semq_meta 'life' (a random 64-bit
--    id, set by the store in this migration's transaction when this file
--    did not set it). A database that has sent messages under 0.1.0 keeps
--    its streams going under the legacy life 1, which is what every receiver
--    files them under.
--  * A stream is (origin, dest, life): tb_0031, tb_0030, tb_0033 and the
--    watermarks get a `life` column (the rows already there: 1) and their
--    unique indexes include it.
--  * Digests (the first 64 bits of SHA-256 of a message's content; NULL =
--    unknown): tb_0031.digest (fixed when the origin first sends a row, or
--    the one a relay's copy came with), tb_0031.prev_digest (a relay's
--    copy: its key predecessor's, as the origin sent it) and
--    tb_0030.digest.
--  * tb_0030 rows stay after the watermark passes them, for
--    receipt_retention; idx_0030_received finds the old ones.
--  * semq_stream_relay: how far a relay has relayed each stream.
--  * semq_stream_out: the resynchronisations of each stream, and seen_high,
--    the highest seq of the lost timeline any peer has reported seeing (a
--    report above the counter; a seq above it that renumbering gives up
--    gets a filler, docs/PROTOCOL.md).
--  * tb_0031.status 8 (held for the operator), tb_0031.result 5 (dead at
--    the destination), 6 (conflict), 7 (undecided) and 8 (undeliverable:
--    a relay does not know the destination; schema 4 uses it).
-- Applied once by the store's migration runner inside one transaction; the
-- store keeps a copy of an older database before it migrates it.

INSERT INTO semq_meta(key, value)
SELECT 'life', '1' WHERE EXISTS (SELECT 1 FROM semq_stream_out)
ON CONFLICT (key) DO NOTHING;

ALTER TABLE semq_stream_out ADD COLUMN resyncs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE semq_stream_out ADD COLUMN resync_at INTEGER;
ALTER TABLE semq_stream_out ADD COLUMN resync_note TEXT;
ALTER TABLE semq_stream_out ADD COLUMN seen_high INTEGER NOT NULL DEFAULT 0;

-- Inbound streams per life; started_at: when this node first recorded a
-- message of it (the newest is an origin's current life here).
CREATE TABLE semq_stream_in_3 (
    origin            TEXT NOT NULL,
    dest              TEXT NOT NULL,
    life              INTEGER NOT NULL DEFAULT 1,
    confirmed_through INTEGER NOT NULL DEFAULT 0,
    started_at        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (origin, dest, life)
) WITHOUT ROWID;
INSERT INTO semq_stream_in_3(origin, dest, life, confirmed_through, started_at)
SELECT origin, dest, 1, confirmed_through, 0 FROM semq_stream_in;
DROP TABLE semq_stream_in;
ALTER TABLE semq_stream_in_3 RENAME TO semq_stream_in;

-- A relay's record of the streams it forwarded or stored: the highest seq
-- of each (origin, dest, life), reported to a restored origin.
CREATE TABLE semq_stream_relay (
    origin     TEXT NOT NULL,
    dest       TEXT NOT NULL,
    life       INTEGER NOT NULL,
    high_seq   INTEGER NOT NULL DEFAULT 0,
    started_at INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (origin, dest, life)
) WITHOUT ROWID;

ALTER TABLE tb_0031 ADD COLUMN life INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tb_0031 ADD COLUMN digest INTEGER;
ALTER TABLE tb_0031 ADD COLUMN prev_digest INTEGER;
DROP INDEX idx_0031_1;
CREATE UNIQUE INDEX idx_0031_1 ON tb_0031(origin, dest, life, seq);
-- Unsent rows of a stream, life by life, in seq order.
DROP INDEX idx_0031_unsent;
CREATE INDEX idx_0031_unsent ON tb_0031(dest, origin, life, seq) WHERE status = 0;

ALTER TABLE tb_0030 ADD COLUMN life INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tb_0030 ADD COLUMN digest INTEGER;
DROP INDEX idx_0030_1;
CREATE UNIQUE INDEX idx_0030_1 ON tb_0030(origin, dest, life, seq);
CREATE INDEX idx_0030_received ON tb_0030(received_at);

ALTER TABLE tb_0033 ADD COLUMN life INTEGER NOT NULL DEFAULT 1;
DROP INDEX idx_0033_1;
CREATE UNIQUE INDEX idx_0033_1 ON tb_0033(origin, dest, life, seq);
DROP INDEX idx_0033_key;
CREATE INDEX idx_0033_key ON tb_0033(origin, dest, life, msg_key, seq)
    WHERE msg_key IS NOT NULL;

-- The fill trigger of 0001, and the life of this database on every row of
-- its own (a relay's copies carry their origin's life).
DROP TRIGGER tb_0031_fill;
CREATE TRIGGER tb_0031_fill AFTER INSERT ON tb_0031 WHEN NEW.seq IS NULL
BEGIN
    SELECT RAISE(ABORT, 'tb_0031: this database has no node id; open it once with semqd or semqctl')
     WHERE NOT EXISTS (SELECT 1 FROM semq_meta WHERE key = 'node_id')
        OR NOT EXISTS (SELECT 1 FROM semq_meta WHERE key = 'life');
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
           life            = CAST((SELECT value FROM semq_meta WHERE key = 'life') AS INTEGER),
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
           result          = NULL,
           digest          = NULL,
           prev_digest     = NULL
     WHERE id = NEW.id;
END;

-- The status and result constraints of tb_0031, edited in place as 0002
-- did (the stored rows are unaffected: every value they hold stays valid),
-- each replacement checked first.
CREATE TEMP TABLE semq_m3_check (edited INTEGER NOT NULL
    CONSTRAINT "migration 0003: a CHECK constraint is not as 0002 wrote it"
    CHECK (edited = 1));
INSERT INTO semq_m3_check
SELECT count(*) FROM sqlite_schema
 WHERE type = 'table' AND name = 'tb_0031'
   AND instr(sql, 'CHECK (status = 0 OR status = 4 OR status = 6 OR status = 100 OR status = -2)') > 0
   AND instr(sql, 'CHECK (result IS NULL OR result = 0 OR result = 1 OR result = 2 OR result = 3 OR result = 4)') > 0;
DROP TABLE semq_m3_check;

PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(replace(sql,
       'CHECK (status = 0 OR status = 4 OR status = 6 OR status = 100 OR status = -2)',
       'CHECK (status = 0 OR status = 4 OR status = 6 OR status = 8 OR status = 100 OR status = -2)'),
       'CHECK (result IS NULL OR result = 0 OR result = 1 OR result = 2 OR result = 3 OR result = 4)',
       'CHECK (result IS NULL OR result BETWEEN 0 AND 8)')
 WHERE type = 'table' AND name = 'tb_0031';
PRAGMA writable_schema = OFF;
