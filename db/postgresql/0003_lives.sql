-- SPDX-License-Identifier: MIT
-- SEMQ schema version 3 on PostgreSQL: lives of a node, message digests,
-- stream state; the same as db/0003_lives.sql (SQLite), which says why.

INSERT INTO semq_meta(key, value)
SELECT 'life', '1' WHERE EXISTS (SELECT 1 FROM semq_stream_out)
ON CONFLICT (key) DO NOTHING;

ALTER TABLE semq_stream_out
    ADD COLUMN resyncs BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN resync_at BIGINT,
    ADD COLUMN resync_note TEXT,
    ADD COLUMN seen_high BIGINT NOT NULL DEFAULT 0;

ALTER TABLE semq_stream_in
    ADD COLUMN life BIGINT NOT NULL DEFAULT 1,
    ADD COLUMN started_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE semq_stream_in DROP CONSTRAINT semq_stream_in_pkey,
    ADD PRIMARY KEY (origin, dest, life);

CREATE TABLE semq_stream_relay (
    origin     TEXT COLLATE "C" NOT NULL,
    dest       TEXT COLLATE "C" NOT NULL,
    life       BIGINT NOT NULL,
    high_seq   BIGINT NOT NULL DEFAULT 0,
    started_at BIGINT NOT NULL DEFAULT 0,
    updated_at BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (origin, dest, life)
);

ALTER TABLE tb_0031
    ADD COLUMN life BIGINT NOT NULL DEFAULT 1,
    ADD COLUMN digest BIGINT,
    ADD COLUMN prev_digest BIGINT,
    DROP CONSTRAINT tb_0031_status_check,
    ADD CONSTRAINT tb_0031_status_check CHECK (status IN (0, 4, 6, 8, 100, -2)),
    DROP CONSTRAINT tb_0031_result_check,
    ADD CONSTRAINT tb_0031_result_check CHECK (result IS NULL OR result BETWEEN 0 AND 8);
DROP INDEX idx_0031_1;
CREATE UNIQUE INDEX idx_0031_1 ON tb_0031(origin, dest, life, seq);
-- Unsent rows of a stream, life by life, in seq order.
DROP INDEX idx_0031_unsent;
CREATE INDEX idx_0031_unsent ON tb_0031(dest, origin, life, seq) WHERE status = 0;

ALTER TABLE tb_0030
    ADD COLUMN life BIGINT NOT NULL DEFAULT 1,
    ADD COLUMN digest BIGINT;
DROP INDEX idx_0030_1;
CREATE UNIQUE INDEX idx_0030_1 ON tb_0030(origin, dest, life, seq);
CREATE INDEX idx_0030_received ON tb_0030(received_at);

ALTER TABLE tb_0033 ADD COLUMN life BIGINT NOT NULL DEFAULT 1;
DROP INDEX idx_0033_1;
CREATE UNIQUE INDEX idx_0033_1 ON tb_0033(origin, dest, life, seq);
DROP INDEX idx_0033_key;
CREATE INDEX idx_0033_key ON tb_0033(origin, dest, life, msg_key, seq)
    WHERE msg_key IS NOT NULL;

CREATE OR REPLACE FUNCTION tb_0031_fill() RETURNS trigger LANGUAGE plpgsql AS $fill$
DECLARE
    node TEXT;
    node_life BIGINT;
    max_payload BIGINT;
BEGIN
    SELECT value INTO node FROM semq_meta WHERE key = 'node_id';
    SELECT value::BIGINT INTO node_life FROM semq_meta WHERE key = 'life';
    IF node IS NULL OR node_life IS NULL THEN
        RAISE EXCEPTION 'tb_0031: this database has no node id; open it once with semqd or semqctl';
    END IF;
    IF NEW.origin IS NOT NULL AND NEW.origin <> node THEN
        RAISE EXCEPTION 'tb_0031.origin: leave it empty, it is filled with this node''s id';
    END IF;
    SELECT value::BIGINT INTO max_payload FROM semq_meta WHERE key = 'max_payload';
    IF octet_length(NEW.payload) > COALESCE(max_payload, 16777216) THEN
        RAISE EXCEPTION 'tb_0031.payload: larger than max_payload';
    END IF;

    INSERT INTO semq_stream_out AS s (origin, dest, last_seq)
    VALUES (node, NEW.dest, 1)
    ON CONFLICT (origin, dest) DO UPDATE SET last_seq = s.last_seq + 1
    RETURNING s.last_seq INTO NEW.seq;

    NEW.origin          := node;
    NEW.life            := node_life;
    NEW.msg_key         := NULLIF(NEW.msg_key, '');
    NEW.prev_seq        := COALESCE((SELECT max(p.seq) FROM tb_0031 p
                                      WHERE p.origin = node
                                        AND p.dest = NEW.dest
                                        AND p.msg_key = NULLIF(NEW.msg_key, '')
                                        AND p.seq IS NOT NULL), 0);
    NEW.deliver_at      := COALESCE(NEW.deliver_at, 0);
    NEW.created_at      := COALESCE(NEW.created_at,
                                    floor(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT);
    NEW.status          := 0;
    NEW.attempts        := 0;
    NEW.next_attempt_at := 0;
    NEW.sent_at         := NULL;
    NEW.acked_at        := NULL;
    NEW.result          := NULL;
    NEW.digest          := NULL;
    NEW.prev_digest     := NULL;
    RETURN NEW;
END;
$fill$;
