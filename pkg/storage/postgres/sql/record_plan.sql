-- Sent before the log reader's statements of one Record in the same pipeline
-- (one implicit transaction, which the settings end with). The statement
-- joins the batch's ids with the table, and a row per id must be found by
-- its primary key: with statistics that lag (a table never analysed, a
-- burst of inserts, a backlog of dead versions), the planner can judge a
-- hash join over a scan of the whole table cheaper for a batch of 2,000
-- ids, and then every statement reads the table. With sequential and
-- bitmap scans and the hash and merge joins off, the only plan is a probe
-- per id. jit is off for the reason claim_plan.sql gives.
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
       set_config('jit', 'off', true)
