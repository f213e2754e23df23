-- Sent before a held claim's settling statements (held_*.sql), in its
-- transaction, where claim_plan.sql already turned sequential and bitmap
-- scans off. Each row is found by its address (a TID scan): with index scans
-- off too, nothing else is left to the planner. Statistics that lag the
-- inserts (a table never analysed) would otherwise make it read the rows of
-- the batch's created_at range — often the whole backlog, written by one
-- transaction — once for every row of the batch.
SELECT set_config('enable_indexscan', 'off', true), set_config('enable_indexonlyscan', 'off', true)
