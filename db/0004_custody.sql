-- SPDX-License-Identifier: MIT
-- SEMQ schema version 4: custody at a relay (docs/PROTOCOL.md, "Custody").
--
--  * tb_0031.custodian (an origin's row at status 6): the relay that holds
--    the message in custody (RelayAck STORED), or NULL when the relay passed
--    it on (FORWARDED). `window` bounds the rows in flight on a link — status
--    4, and 6 without a custodian — never what a relay holds.
--  * semq_custody: a relay's copies (the rows of tb_0031 of other origins),
--    counted per (origin, dest) by the triggers below, so that quotas are
--    read without counting rows; `messages` and `bytes` follow every insert,
--    delete and payload change of a copy, whoever makes it.
--  * semq_dest: the destinations a relay knows — each node that has been
--    connected to it (seen_at), and since when it has held messages for one
--    it has never seen (first_at), for [relay] unknown_dest_after.
--  * idx_0031_tomb: tombstones to send, per destination, so that cancels
--    for an unreachable destination are never read just to be skipped.
--  * semq_stream_out.life_hidden: this node's stream to dest went through a
--    node of wire revision 1 (SEMQ 0.1), whose store-and-forward copies lose
--    the life; from then on its ids go without their life, so that the
--    destination files them all under one stream (docs/PROTOCOL.md, "What
--    holds in a mixed fleet").
-- Applied once by the store's migration runner inside one transaction.

ALTER TABLE tb_0031 ADD COLUMN custodian TEXT;
ALTER TABLE semq_stream_out ADD COLUMN life_hidden INTEGER NOT NULL DEFAULT 0;
-- A relay's copy: how many relays the message has passed, this one
-- included ([node] max_hops).
ALTER TABLE tb_0031 ADD COLUMN hops INTEGER NOT NULL DEFAULT 0;

-- Rows in flight on a link, per stream: what `window` bounds.
CREATE INDEX idx_0031_flight ON tb_0031(origin, dest)
    WHERE status = 4 OR (status = 6 AND custodian IS NULL);
-- Tombstones still to be delivered, per destination.
CREATE INDEX idx_0031_tomb ON tb_0031(dest, next_attempt_at)
    WHERE status = -2 AND result IS NULL;

CREATE TABLE semq_custody (
    origin   TEXT NOT NULL,
    dest     TEXT NOT NULL,
    messages INTEGER NOT NULL DEFAULT 0,
    bytes    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (origin, dest)
) WITHOUT ROWID;
INSERT INTO semq_custody(origin, dest, messages, bytes)
SELECT origin, dest, count(*), sum(length(payload)) FROM tb_0031
 WHERE origin <> (SELECT value FROM semq_meta WHERE key = 'node_id')
 GROUP BY origin, dest;

-- A copy is a row of another origin; this node's own rows get their origin
-- from tb_0031_fill after the insert (NEW.origin is NULL here).
CREATE TRIGGER tb_0031_custody_add AFTER INSERT ON tb_0031
WHEN NEW.origin <> (SELECT value FROM semq_meta WHERE key = 'node_id')
BEGIN
    INSERT INTO semq_custody(origin, dest, messages, bytes)
    VALUES (NEW.origin, NEW.dest, 1, length(NEW.payload))
    ON CONFLICT (origin, dest) DO UPDATE SET
        messages = messages + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER tb_0031_custody_drop AFTER DELETE ON tb_0031
WHEN OLD.origin <> (SELECT value FROM semq_meta WHERE key = 'node_id')
BEGIN
    UPDATE semq_custody
       SET messages = messages - 1, bytes = bytes - length(OLD.payload)
     WHERE origin = OLD.origin AND dest = OLD.dest;
END;

-- A tombstone replacing a held copy empties its payload.
CREATE TRIGGER tb_0031_custody_change AFTER UPDATE OF payload ON tb_0031
WHEN OLD.origin <> (SELECT value FROM semq_meta WHERE key = 'node_id')
BEGIN
    UPDATE semq_custody
       SET bytes = bytes - length(OLD.payload) + length(NEW.payload)
     WHERE origin = OLD.origin AND dest = OLD.dest;
END;

CREATE TABLE semq_dest (
    dest     TEXT PRIMARY KEY,
    first_at INTEGER,  -- first message held for it while never seen
    seen_at  INTEGER   -- last time it was connected here (NULL: never)
) WITHOUT ROWID;
