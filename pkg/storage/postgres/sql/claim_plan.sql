-- Sent before every claim in the same pipeline (one implicit transaction,
-- which the settings end with). Statistics that lag a burst of
-- inserts (a table never analysed, or analysed while empty) make the
-- planner believe few rows are pending, and it then reads every pending
-- row after the claim frontier (a sequential or bitmap scan) and sorts
-- them to take the first few hundred. With only index scans allowed, the
-- cheapest plan in any estimate walks the pending index in seq order and
-- stops at the batch's size: no sort to do, and no more rows than the LIMIT.
-- (Sorts are not priced out instead: the batch's own small sort would then
-- carry the penalty cost, which is past jit_above_cost, and compiling the
-- claim takes a second. jit is off for the same reason.)
--
-- $1 is plan_cache_mode for the claim that follows. An unordered claim
-- passes force_generic_plan: planned afresh at every call, its arms cost
-- the server 2 ms a claim (4 µs an event at 500) for the same plan, since
-- with the scans above off every arm can only walk its own index in its
-- own order. So do the key reads of ordered claims (claim_keys.sql);
-- their keyed claims pass auto.
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('jit', 'off', true), set_config('plan_cache_mode', $1::text, true)
