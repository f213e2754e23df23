-- Whether a fresh PENDING row (never handed back) with seq up to $1 is
-- left: the claims' backfill of rows written before the log reader's slot
-- is done when none is.
SELECT EXISTS (
    SELECT 1 FROM {{table}}
    WHERE status = 'PENDING' AND seq <= $1::bigint AND available_at <= created_at
)
