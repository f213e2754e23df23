-- Whether a fresh PENDING row (never handed back) with seq up to ? is
-- left: the claims' backfill of rows written before the log reader's
-- stream is done when none is. It walks the PENDING range of
-- state_seq_idx, which holds seq; available_at is the row's.
SELECT EXISTS (
    SELECT 1 FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`)
    WHERE status = 'PENDING' AND seq <= ? AND available_at <= created_at
)
