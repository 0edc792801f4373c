-- SPDX-License-Identifier: MIT
-- SEMQ schema version 6: indexes for the operator's filters ("where is bill
-- X?", docs/OPERATIONS.md, "Finding a document"; "Dead letters").
--
--  * idx_0031_msg_key, idx_0033_msg_key: `--key K` / key= on the outbound
--    queue and the redo queue without knowing the stream (the existing key
--    indexes start with origin and dest). Partial: rows without a key cost
--    nothing; one more b-tree entry per keyed insert.
--  * idx_0031_dead: the confirmed rows whose destination's redo entry was
--    dead when it answered (result 5), per destination, for `semqctl status`
--    ("dead at S1"); tiny, as dead documents are rare.
-- The received record tb_0030 gets no key index: its rows are compacted
-- away behind the watermark after receipt_retention, so it stays short, and
-- every received message would pay for it on the hot path.
-- Applied once by the store's migration runner inside one transaction.

CREATE INDEX idx_0031_msg_key ON tb_0031(msg_key) WHERE msg_key IS NOT NULL;
CREATE INDEX idx_0033_msg_key ON tb_0033(msg_key) WHERE msg_key IS NOT NULL;
CREATE INDEX idx_0031_dead ON tb_0031(origin, dest) WHERE result = 5;
