-- SPDX-License-Identifier: MIT
-- SEMQ schema version 4 on PostgreSQL: custody at a relay; the same as
-- db/0004_custody.sql (SQLite), which says why.

ALTER TABLE tb_0031 ADD COLUMN custodian TEXT COLLATE "C";
ALTER TABLE semq_stream_out ADD COLUMN life_hidden INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tb_0031 ADD COLUMN hops INTEGER NOT NULL DEFAULT 0;

CREATE INDEX idx_0031_flight ON tb_0031(origin, dest)
    WHERE status = 4 OR (status = 6 AND custodian IS NULL);
CREATE INDEX idx_0031_tomb ON tb_0031(dest, next_attempt_at)
    WHERE status = -2 AND result IS NULL;

CREATE TABLE semq_custody (
    origin   TEXT COLLATE "C" NOT NULL,
    dest     TEXT COLLATE "C" NOT NULL,
    messages BIGINT NOT NULL DEFAULT 0,
    bytes    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (origin, dest)
);
INSERT INTO semq_custody(origin, dest, messages, bytes)
SELECT origin, dest, count(*), COALESCE(sum(octet_length(payload)), 0)
  FROM tb_0031
 WHERE origin <> (SELECT value FROM semq_meta WHERE key = 'node_id')
 GROUP BY origin, dest;

-- A copy is a row of another origin (tb_0031_fill gave this node's own rows
-- their origin before the insert).
CREATE FUNCTION tb_0031_custody() RETURNS trigger LANGUAGE plpgsql AS $custody$
DECLARE
    node TEXT;
BEGIN
    SELECT value INTO node FROM semq_meta WHERE key = 'node_id';
    IF TG_OP = 'INSERT' THEN
        IF NEW.origin <> node THEN
            INSERT INTO semq_custody AS c (origin, dest, messages, bytes)
            VALUES (NEW.origin, NEW.dest, 1, octet_length(NEW.payload))
            ON CONFLICT (origin, dest) DO UPDATE SET
                messages = c.messages + 1, bytes = c.bytes + excluded.bytes;
        END IF;
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF OLD.origin <> node THEN
            UPDATE semq_custody
               SET messages = messages - 1,
                   bytes = bytes - octet_length(OLD.payload)
             WHERE origin = OLD.origin AND dest = OLD.dest;
        END IF;
        RETURN NULL;
    END IF;
    IF OLD.origin <> node THEN
        UPDATE semq_custody
           SET bytes = bytes - octet_length(OLD.payload)
                             + octet_length(NEW.payload)
         WHERE origin = OLD.origin AND dest = OLD.dest;
    END IF;
    RETURN NULL;
END;
$custody$;
CREATE TRIGGER tb_0031_custody AFTER INSERT OR DELETE OR UPDATE OF payload
    ON tb_0031 FOR EACH ROW EXECUTE FUNCTION tb_0031_custody();

CREATE TABLE semq_dest (
    dest     TEXT COLLATE "C" PRIMARY KEY,
    first_at BIGINT,
    seen_at  BIGINT
);
