-- SPDX-License-Identifier: MIT
-- SEMQ schema version 5 on PostgreSQL: row counts per table, stream and
-- status, kept by triggers; the same as db/0005_counts.sql (SQLite), which
-- says why, except:
--
--  * tb_0031_fill is a BEFORE trigger here: every row has its origin and
--    seq when the AFTER triggers below count it.
--  * Several transactions write at once here (applications, semqd
--    instances, an operator), and a count that all of them updated would be
--    one hot row: each transaction would hold it to its commit and make the
--    others wait, and semqd's batch would wait for an application's open
--    transaction that inserted into the same stream (and two of them could
--    deadlock). So each connection counts in rows of its own (`shard` =
--    its backend pid), which no other transaction writes: a count is the sum
--    of its shards, and a reader folds the shards of other connections that
--    nobody holds (FOR UPDATE SKIP LOCKED) into its own, so that a count has
--    about one row per connection writing at the moment.
--  * TRUNCATE fires no row trigger: a statement trigger forgets the
--    truncated table's counts.

CREATE TABLE semq_counts (
    tbl    TEXT NOT NULL,                        -- 'tb_0031', ..., 'tb_0033'
    origin TEXT COLLATE "C" NOT NULL,            -- '' for a row without one
    dest   TEXT COLLATE "C" NOT NULL,
    status BIGINT NOT NULL,                      -- tb_0030: ack_status
    relay  TEXT COLLATE "C" NOT NULL DEFAULT '', -- tb_0031: the custodian
    shard  INTEGER NOT NULL DEFAULT 0,           -- the writer's backend pid
    n      BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tbl, origin, dest, status, relay, shard)
);

INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
SELECT 'tb_0031', COALESCE(origin, ''), dest, status, COALESCE(custodian, ''),
       count(*)
  FROM tb_0031
 GROUP BY COALESCE(origin, ''), dest, status, COALESCE(custodian, '');
INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
SELECT 'tb_0030', origin, dest, ack_status, '', count(*)
  FROM tb_0030 GROUP BY origin, dest, ack_status;
INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
SELECT 'tb_0033', origin, dest, status, '', count(*)
  FROM tb_0033 GROUP BY origin, dest, status;

CREATE INDEX idx_0031_held ON tb_0031(origin, dest, custodian, sent_at)
    WHERE custodian IS NOT NULL;

CREATE FUNCTION tb_0031_count() RETURNS trigger LANGUAGE plpgsql AS $count$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO semq_counts AS c
            (tbl, origin, dest, status, relay, shard, n)
        VALUES ('tb_0031', COALESCE(OLD.origin, ''), OLD.dest, OLD.status,
                COALESCE(OLD.custodian, ''), pg_backend_pid(), -1)
        ON CONFLICT (tbl, origin, dest, status, relay, shard)
        DO UPDATE SET n = c.n + excluded.n;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO semq_counts AS c
            (tbl, origin, dest, status, relay, shard, n)
        VALUES ('tb_0031', COALESCE(NEW.origin, ''), NEW.dest, NEW.status,
                COALESCE(NEW.custodian, ''), pg_backend_pid(), 1)
        ON CONFLICT (tbl, origin, dest, status, relay, shard)
        DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END;
$count$;
CREATE TRIGGER tb_0031_count AFTER INSERT OR DELETE ON tb_0031
    FOR EACH ROW EXECUTE FUNCTION tb_0031_count();
CREATE TRIGGER tb_0031_count_move
    AFTER UPDATE OF status, custodian, origin, dest ON tb_0031 FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          OR COALESCE(OLD.custodian, '') <> COALESCE(NEW.custodian, '')
          OR COALESCE(OLD.origin, '') <> COALESCE(NEW.origin, '')
          OR OLD.dest IS DISTINCT FROM NEW.dest)
    EXECUTE FUNCTION tb_0031_count();

CREATE FUNCTION tb_0030_count() RETURNS trigger LANGUAGE plpgsql AS $count$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO semq_counts AS c
            (tbl, origin, dest, status, relay, shard, n)
        VALUES ('tb_0030', OLD.origin, OLD.dest,
                OLD.ack_status, '', pg_backend_pid(), -1)
        ON CONFLICT (tbl, origin, dest, status, relay, shard)
        DO UPDATE SET n = c.n + excluded.n;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO semq_counts AS c
            (tbl, origin, dest, status, relay, shard, n)
        VALUES ('tb_0030', NEW.origin, NEW.dest,
                NEW.ack_status, '', pg_backend_pid(), 1)
        ON CONFLICT (tbl, origin, dest, status, relay, shard)
        DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END;
$count$;
CREATE TRIGGER tb_0030_count AFTER INSERT OR DELETE ON tb_0030
    FOR EACH ROW EXECUTE FUNCTION tb_0030_count();
CREATE TRIGGER tb_0030_count_move
    AFTER UPDATE OF ack_status, origin, dest ON tb_0030 FOR EACH ROW
    WHEN (OLD.ack_status IS DISTINCT FROM NEW.ack_status
          OR OLD.origin IS DISTINCT FROM NEW.origin
          OR OLD.dest IS DISTINCT FROM NEW.dest)
    EXECUTE FUNCTION tb_0030_count();

CREATE FUNCTION tb_0033_count() RETURNS trigger LANGUAGE plpgsql AS $count$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO semq_counts AS c
            (tbl, origin, dest, status, relay, shard, n)
        VALUES ('tb_0033', OLD.origin, OLD.dest,
                OLD.status, '', pg_backend_pid(), -1)
        ON CONFLICT (tbl, origin, dest, status, relay, shard)
        DO UPDATE SET n = c.n + excluded.n;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO semq_counts AS c
            (tbl, origin, dest, status, relay, shard, n)
        VALUES ('tb_0033', NEW.origin, NEW.dest,
                NEW.status, '', pg_backend_pid(), 1)
        ON CONFLICT (tbl, origin, dest, status, relay, shard)
        DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END;
$count$;
CREATE TRIGGER tb_0033_count AFTER INSERT OR DELETE ON tb_0033
    FOR EACH ROW EXECUTE FUNCTION tb_0033_count();
CREATE TRIGGER tb_0033_count_move
    AFTER UPDATE OF status, origin, dest ON tb_0033 FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          OR OLD.origin IS DISTINCT FROM NEW.origin
          OR OLD.dest IS DISTINCT FROM NEW.dest)
    EXECUTE FUNCTION tb_0033_count();

CREATE FUNCTION semq_count_truncate() RETURNS trigger LANGUAGE plpgsql AS $t$
BEGIN
    DELETE FROM semq_counts WHERE tbl = TG_TABLE_NAME;
    RETURN NULL;
END;
$t$;
CREATE TRIGGER tb_0031_count_truncate AFTER TRUNCATE ON tb_0031
    FOR EACH STATEMENT EXECUTE FUNCTION semq_count_truncate();
CREATE TRIGGER tb_0030_count_truncate AFTER TRUNCATE ON tb_0030
    FOR EACH STATEMENT EXECUTE FUNCTION semq_count_truncate();
CREATE TRIGGER tb_0033_count_truncate AFTER TRUNCATE ON tb_0033
    FOR EACH STATEMENT EXECUTE FUNCTION semq_count_truncate();
