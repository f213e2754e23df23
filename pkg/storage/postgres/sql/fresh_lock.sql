-- Beside a log reader (CAPTURE=wal), the highest seq of a fresh row the
-- claim statements that follow in the pipeline may take (they read it
-- through fresh_to): every fresh row while no stream holds the table's log
-- lock, which this transaction then holds shared until it ends, so that a
-- stream that starts waits for it; while one does, those up to the
-- stream's backfill ($1, FreshEvents.BackfillTo). docs/architecture.md,
-- "Capture from the WAL".
SELECT set_config('outbox_relay.fresh_to',
    CASE WHEN pg_try_advisory_xact_lock_shared({{log_lock}}) THEN '9223372036854775807' ELSE $1::bigint::text END,
    true)
