-- SPDX-License-Identifier: MIT
-- SEMQ schema version 2: the status and result CHECK constraints as
-- comparisons instead of IN lists.
--
-- SQLite evaluates an IN list of three or more constants through an
-- ephemeral b-tree it builds and frees on every evaluation, and a CHECK runs
-- on every INSERT and on every UPDATE of its column: each status change of
-- every message paid for one or two such b-trees (a third of a single-row
-- UPDATE, measured). The new constraints accept exactly the same values, so
-- the stored rows are unaffected and the tables need no rebuild: the
-- definitions are edited in place, the procedure SQLite documents for
-- changes that leave the file's content as it is
-- (https://www.sqlite.org/lang_altertable.html#otheralter). The migration
-- runner bumps schema_version afterwards so that open connections read the
-- new definitions.
--
-- Each replacement is checked: a definition that does not hold the expected
-- text (a database edited by hand) fails the migration instead of being left
-- half done.

CREATE TEMP TABLE semq_m2_check (edited INTEGER NOT NULL
    CONSTRAINT "migration 0002: a CHECK constraint is not as 0001 wrote it"
    CHECK (edited = 1));
INSERT INTO semq_m2_check
SELECT count(*) FROM sqlite_schema
 WHERE type = 'table' AND name = 'tb_0031'
   AND instr(sql, 'CHECK (status IN (0, 4, 6, 100, -2))') > 0
   AND instr(sql, 'CHECK (result IS NULL OR result IN (0, 1, 2, 3, 4))') > 0;
INSERT INTO semq_m2_check
SELECT count(*) FROM sqlite_schema
 WHERE type = 'table' AND name = 'tb_0030'
   AND instr(sql, 'CHECK (result IN (0, 1, 3, 4))') > 0;
INSERT INTO semq_m2_check
SELECT count(*) FROM sqlite_schema
 WHERE type = 'table' AND name = 'tb_0033'
   AND instr(sql, 'CHECK (status IN (0, 1, 2, -1, -2))') > 0;
DROP TABLE semq_m2_check;

PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(replace(sql,
       'CHECK (status IN (0, 4, 6, 100, -2))',
       'CHECK (status = 0 OR status = 4 OR status = 6 OR status = 100 OR status = -2)'),
       'CHECK (result IS NULL OR result IN (0, 1, 2, 3, 4))',
       'CHECK (result IS NULL OR result = 0 OR result = 1 OR result = 2 OR result = 3 OR result = 4)')
 WHERE type = 'table' AND name = 'tb_0031';
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (result IN (0, 1, 3, 4))',
       'CHECK (result = 0 OR result = 1 OR result = 3 OR result = 4)')
 WHERE type = 'table' AND name = 'tb_0030';
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (status IN (0, 1, 2, -1, -2))',
       'CHECK (status = 0 OR status = 1 OR status = 2 OR status = -1 OR status = -2)')
 WHERE type = 'table' AND name = 'tb_0033';
PRAGMA writable_schema = OFF;
