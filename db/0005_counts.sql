-- SPDX-License-Identifier: MIT
-- SEMQ schema version 5: row counts per table, stream and status, kept by
-- triggers, so that /metrics, /streams and `semqctl status` read a few rows
-- per stream instead of counting the queues (docs/ARCHITECTURE.md, "Counts").
--
--  * semq_counts: how many rows of tb_0031 (by status, and by custodian for
--    the rows a relay holds in custody), tb_0030 (by ack_status) and
--    tb_0033 (by status) each stream has. It starts from the rows already
--    there (one pass over the three tables, here) and follows every insert,
--    delete and change of a counted column, whoever makes it: semqd, an
--    application, another semqd instance, an operator's SQL. The triggers are
--    part of the statement that changes the row, so a rollback takes back the
--    count with the row.
--  * A trigger fires only when a counted column changes (WHEN ... IS NOT
--    ...): most updates of the hot path (next_attempt_at, attempts,
--    confirm_got) cost a comparison, a transition two counts in one upsert.
--  * tb_0031: an application's row is inserted without origin and seq and
--    gets them, with status 0, from tb_0031_fill's UPDATE right after the
--    insert; a row is counted once it has a seq, so that row counts from
--    that UPDATE on (one upsert), a relay's copy (inserted with its seq)
--    from its insert.
--  * Counts that fall to zero stay as rows of 0 (bounded by streams x
--    statuses); readers skip them.
--  * idx_0031_held: the rows a relay holds in custody, per stream and relay,
--    by hand-over time, so that the oldest of them is one seek (there is no
--    other index on them: they are outside the window).
-- Applied once by the store's migration runner inside one transaction.

CREATE TABLE semq_counts (
    tbl    TEXT NOT NULL,             -- 'tb_0031', 'tb_0030' or 'tb_0033'
    origin TEXT NOT NULL,             -- '' for a row without one
    dest   TEXT NOT NULL,
    status INTEGER NOT NULL,          -- tb_0030: ack_status
    relay  TEXT NOT NULL DEFAULT '',  -- tb_0031: the custodian, '' if none
    n      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tbl, origin, dest, status, relay)
) WITHOUT ROWID;

INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
SELECT 'tb_0031', COALESCE(origin, ''), dest, status, COALESCE(custodian, ''),
       count(*)
  FROM tb_0031 WHERE seq IS NOT NULL
 GROUP BY COALESCE(origin, ''), dest, status, COALESCE(custodian, '');
INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
SELECT 'tb_0030', origin, dest, ack_status, '', count(*)
  FROM tb_0030 GROUP BY origin, dest, ack_status;
INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
SELECT 'tb_0033', origin, dest, status, '', count(*)
  FROM tb_0033 GROUP BY origin, dest, status;

CREATE INDEX idx_0031_held ON tb_0031(origin, dest, custodian, sent_at)
    WHERE custodian IS NOT NULL;

-- ---- tb_0031 ----

CREATE TRIGGER tb_0031_count_add AFTER INSERT ON tb_0031
WHEN NEW.seq IS NOT NULL
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0031', COALESCE(NEW.origin, ''), NEW.dest, NEW.status,
            COALESCE(NEW.custodian, ''), 1)
    ON CONFLICT (tbl, origin, dest, status, relay) DO UPDATE SET n = n + 1;
END;

-- tb_0031_fill gave an application's row its seq.
CREATE TRIGGER tb_0031_count_fill AFTER UPDATE OF seq ON tb_0031
WHEN OLD.seq IS NULL AND NEW.seq IS NOT NULL
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0031', COALESCE(NEW.origin, ''), NEW.dest, NEW.status,
            COALESCE(NEW.custodian, ''), 1)
    ON CONFLICT (tbl, origin, dest, status, relay) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER tb_0031_count_move
AFTER UPDATE OF status, custodian, origin, dest, seq ON tb_0031
WHEN OLD.seq IS NOT NULL
 AND (OLD.status IS NOT NEW.status OR OLD.custodian IS NOT NEW.custodian
      OR OLD.origin IS NOT NEW.origin OR OLD.dest IS NOT NEW.dest
      OR NEW.seq IS NULL)
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0031', COALESCE(OLD.origin, ''), OLD.dest, OLD.status,
            COALESCE(OLD.custodian, ''), -1),
           ('tb_0031', COALESCE(NEW.origin, ''), NEW.dest, NEW.status,
            COALESCE(NEW.custodian, ''), NEW.seq IS NOT NULL)
    ON CONFLICT (tbl, origin, dest, status, relay)
    DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER tb_0031_count_drop AFTER DELETE ON tb_0031
WHEN OLD.seq IS NOT NULL
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0031', COALESCE(OLD.origin, ''), OLD.dest, OLD.status,
            COALESCE(OLD.custodian, ''), -1)
    ON CONFLICT (tbl, origin, dest, status, relay) DO UPDATE SET n = n - 1;
END;

-- ---- tb_0030 ----

CREATE TRIGGER tb_0030_count_add AFTER INSERT ON tb_0030
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0030', NEW.origin, NEW.dest, NEW.ack_status, '', 1)
    ON CONFLICT (tbl, origin, dest, status, relay) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER tb_0030_count_move
AFTER UPDATE OF ack_status, origin, dest ON tb_0030
WHEN OLD.ack_status IS NOT NEW.ack_status OR OLD.origin IS NOT NEW.origin
  OR OLD.dest IS NOT NEW.dest
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0030', OLD.origin, OLD.dest, OLD.ack_status, '', -1),
           ('tb_0030', NEW.origin, NEW.dest, NEW.ack_status, '', 1)
    ON CONFLICT (tbl, origin, dest, status, relay)
    DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER tb_0030_count_drop AFTER DELETE ON tb_0030
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0030', OLD.origin, OLD.dest, OLD.ack_status, '', -1)
    ON CONFLICT (tbl, origin, dest, status, relay) DO UPDATE SET n = n - 1;
END;

-- ---- tb_0033 ----

CREATE TRIGGER tb_0033_count_add AFTER INSERT ON tb_0033
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0033', NEW.origin, NEW.dest, NEW.status, '', 1)
    ON CONFLICT (tbl, origin, dest, status, relay) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER tb_0033_count_move
AFTER UPDATE OF status, origin, dest ON tb_0033
WHEN OLD.status IS NOT NEW.status OR OLD.origin IS NOT NEW.origin
  OR OLD.dest IS NOT NEW.dest
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0033', OLD.origin, OLD.dest, OLD.status, '', -1),
           ('tb_0033', NEW.origin, NEW.dest, NEW.status, '', 1)
    ON CONFLICT (tbl, origin, dest, status, relay)
    DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER tb_0033_count_drop AFTER DELETE ON tb_0033
BEGIN
    INSERT INTO semq_counts(tbl, origin, dest, status, relay, n)
    VALUES ('tb_0033', OLD.origin, OLD.dest, OLD.status, '', -1)
    ON CONFLICT (tbl, origin, dest, status, relay) DO UPDATE SET n = n - 1;
END;
