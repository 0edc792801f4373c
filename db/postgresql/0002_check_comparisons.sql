-- SPDX-License-Identifier: MIT
-- SEMQ schema version 2 on PostgreSQL: nothing to change.
--
-- On SQLite this version rewrites the status and result CHECK constraints
-- as comparisons (db/0002_check_comparisons.sql), because SQLite evaluates
-- an IN list of three or more constants through an ephemeral b-tree on
-- every row written. PostgreSQL evaluates `x IN (...)` as `x = ANY (array)`
-- without such a cost, so its constraints stay as 0001 made them; the
-- version exists so that both back ends count the same schema versions.
SELECT 1;
