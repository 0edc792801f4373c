-- SPDX-License-Identifier: MIT
-- SEMQ schema version 8: a leaner received record (docs/PERFORMANCE.md,
-- "The lean receipt").
--
--  * idx_0030_received goes: one b-tree entry written with every received
--    message and deleted with it again, for the receipt purge alone. The
--    purge now starts at the bottom of each stream's rows on idx_0030_1
--    (seq order is receipt order) and reads at most its limit of them, so
--    its work stays O(streams + limit) without it.
-- Applied once by the store's migration runner inside one transaction.

DROP INDEX idx_0030_received;
