-- Sent before every claim in the same pipeline (one implicit transaction,
-- which the settings end with). Statistics that lag a burst of
-- inserts (a table never analysed, or analysed while empty) make the
-- planner believe few rows are pending, and it then reads every pending
-- row after the claim position (a sequential or bitmap scan) and sorts
-- them to take the first few hundred. With only index scans allowed, the
-- cheapest plan in any estimate walks the pending index in seq order and
-- stops at the batch's size: no sort to do, and no more rows than the LIMIT.
-- (Sorts are not priced out instead: the batch's own small sort would then
-- carry the penalty cost, which is past jit_above_cost, and compiling the
-- claim takes a second. jit is off for the same reason.)
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('jit', 'off', true)
