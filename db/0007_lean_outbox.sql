-- SPDX-License-Identifier: MIT
-- SEMQ schema version 7: the lean outbox (issue #20).
--
-- The application's INSERT INTO tb_0031(dest, type, msg_key, payload) now
-- writes its row once: origin, life, seq and prev_seq stay NULL (0 for
-- prev_seq) until the node numbers the row, which it does in its next batch
-- (proto_tick -> store_number_new), in id order — on SQLite the order of the
-- commits, one writer at a time. Before, an AFTER trigger bumped the stream's
-- counter and rewrote the row it had just inserted (SQLite cannot change NEW
-- in a BEFORE trigger): about two thirds of the application's CPU per insert
-- (docs/PERFORMANCE.md, "The lean outbox").
--
--  * tb_0031_fill goes; tb_0031_check keeps its refusals (no node id, a
--    foreign origin, a payload over max_payload or of another type) as a
--    BEFORE trigger that writes nothing.
--  * created_at gets its default from the column, so that a row keeps the
--    time of its insert however late it is numbered (the text of the table
--    is edited as 0002 and 0003 did; the edit is checked first).
--  * idx_0031_new: the rows still to number, in id order; idx_0031_unsent
--    and idx_0031_key leave them out until then.
-- Applied once by the store's migration runner inside one transaction.

DROP TRIGGER IF EXISTS tb_0031_fill;

CREATE TRIGGER tb_0031_check BEFORE INSERT ON tb_0031 WHEN NEW.seq IS NULL
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
END;

CREATE INDEX idx_0031_new ON tb_0031(id) WHERE seq IS NULL;

-- A new row (origin NULL until it is numbered) has no place in the stream
-- walk or in a key chain: two b-tree entries fewer for the application's
-- insert, and two fewer to move when the node numbers it. Every query on
-- them names origin (=, >, IS NOT NULL), which implies the condition.
DROP INDEX idx_0031_unsent;
CREATE INDEX idx_0031_unsent ON tb_0031(dest, origin, life, seq)
    WHERE status = 0 AND origin IS NOT NULL;
DROP INDEX idx_0031_key;
CREATE INDEX idx_0031_key ON tb_0031(origin, dest, msg_key, seq)
    WHERE msg_key IS NOT NULL AND origin IS NOT NULL;

CREATE TEMP TABLE semq_m7_check (edited INTEGER NOT NULL
    CONSTRAINT "migration 0007: tb_0031.created_at is not as 0001 (or 0007) wrote it"
    CHECK (edited = 1));
INSERT INTO semq_m7_check
SELECT count(*) FROM sqlite_schema
 WHERE type = 'table' AND name = 'tb_0031'
   AND (instr(sql, '    created_at      INTEGER,') > 0
        OR instr(sql, '    created_at      INTEGER DEFAULT (') > 0);
DROP TABLE semq_m7_check;

PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql, '    created_at      INTEGER,',
       '    created_at      INTEGER DEFAULT (CAST((julianday(''now'') - 2440587.5) * 86400000.0 AS INTEGER)),')
 WHERE type = 'table' AND name = 'tb_0031';
PRAGMA writable_schema = OFF;
