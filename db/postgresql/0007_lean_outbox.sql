-- SPDX-License-Identifier: MIT
-- SEMQ schema version 7: the lean outbox (issue #20), as db/0007 for SQLite.
--
-- The application's INSERT INTO tb_0031 no longer takes the stream's
-- counter: origin, life and seq stay NULL (prev_seq 0) until the node
-- numbers the row in its next batch (store_number_new), in id order among
-- the rows committed by then. Before, the BEFORE trigger's upsert of
-- semq_stream_out locked the stream's counter row until the application
-- committed, so the application's transactions to one destination ran one
-- after the other. tb_0031_fill gives way to tb_0031_check (the name SQLite's
-- trigger has too), which only refuses bad rows and fills the columns it can
-- without that lock (a BEFORE trigger writes NEW itself, so none of this
-- rewrites the row).
-- Applied once by the store's migration runner inside one transaction.

DROP TRIGGER IF EXISTS tb_0031_fill ON tb_0031;
DROP FUNCTION IF EXISTS tb_0031_fill();

CREATE FUNCTION tb_0031_check() RETURNS trigger LANGUAGE plpgsql AS $check$
DECLARE
    node TEXT;
    max_payload BIGINT;
BEGIN
    SELECT value INTO node FROM semq_meta WHERE key = 'node_id';
    IF node IS NULL OR NOT EXISTS (SELECT 1 FROM semq_meta WHERE key = 'life') THEN
        RAISE EXCEPTION 'tb_0031: this database has no node id; open it once with semqd or semqctl';
    END IF;
    IF NEW.origin IS NOT NULL AND NEW.origin <> node THEN
        RAISE EXCEPTION 'tb_0031.origin: leave it empty, it is filled with this node''s id';
    END IF;
    SELECT value::BIGINT INTO max_payload FROM semq_meta WHERE key = 'max_payload';
    IF octet_length(NEW.payload) > COALESCE(max_payload, 16777216) THEN
        RAISE EXCEPTION 'tb_0031.payload: larger than max_payload';
    END IF;

    NEW.origin          := NULL;
    NEW.prev_seq        := 0;
    NEW.msg_key         := NULLIF(NEW.msg_key, '');
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
$check$;
CREATE TRIGGER tb_0031_check BEFORE INSERT ON tb_0031
    FOR EACH ROW WHEN (NEW.seq IS NULL) EXECUTE FUNCTION tb_0031_check();

CREATE INDEX idx_0031_new ON tb_0031(id) WHERE seq IS NULL;

-- A new row (origin NULL until it is numbered) has no place in the stream
-- walk or in a key chain: two index entries fewer for the application's
-- insert, and two fewer to move when the node numbers it.
DROP INDEX idx_0031_unsent;
CREATE INDEX idx_0031_unsent ON tb_0031(dest, origin, life, seq)
    WHERE status = 0 AND origin IS NOT NULL;
DROP INDEX idx_0031_key;
CREATE INDEX idx_0031_key ON tb_0031(origin, dest, msg_key, seq)
    WHERE msg_key IS NOT NULL AND origin IS NOT NULL;

-- The counts (0005) follow numbered rows, as on SQLite: a new row is counted
-- when the node numbers it (store_counts lists the rows still to number from
-- idx_0031_new), so the application's insert does not write semq_counts.
DROP TRIGGER tb_0031_count ON tb_0031;
DROP TRIGGER tb_0031_count_move ON tb_0031;
CREATE TRIGGER tb_0031_count_add AFTER INSERT ON tb_0031 FOR EACH ROW
    WHEN (NEW.seq IS NOT NULL) EXECUTE FUNCTION tb_0031_count();
CREATE TRIGGER tb_0031_count_drop AFTER DELETE ON tb_0031 FOR EACH ROW
    WHEN (OLD.seq IS NOT NULL) EXECUTE FUNCTION tb_0031_count();
CREATE TRIGGER tb_0031_count_move
    AFTER UPDATE OF status, custodian, origin, dest ON tb_0031 FOR EACH ROW
    WHEN (OLD.seq IS NOT NULL
          AND (OLD.status IS DISTINCT FROM NEW.status
               OR COALESCE(OLD.custodian, '') <> COALESCE(NEW.custodian, '')
               OR COALESCE(OLD.origin, '') <> COALESCE(NEW.origin, '')
               OR OLD.dest IS DISTINCT FROM NEW.dest))
    EXECUTE FUNCTION tb_0031_count();

CREATE FUNCTION tb_0031_count_fill() RETURNS trigger LANGUAGE plpgsql AS $count$
BEGIN
    INSERT INTO semq_counts AS c (tbl, origin, dest, status, relay, shard, n)
    VALUES ('tb_0031', COALESCE(NEW.origin, ''), NEW.dest, NEW.status,
            COALESCE(NEW.custodian, ''), pg_backend_pid(), 1)
    ON CONFLICT (tbl, origin, dest, status, relay, shard)
    DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END;
$count$;
CREATE TRIGGER tb_0031_count_fill AFTER UPDATE OF seq ON tb_0031 FOR EACH ROW
    WHEN (OLD.seq IS NULL AND NEW.seq IS NOT NULL)
    EXECUTE FUNCTION tb_0031_count_fill();
