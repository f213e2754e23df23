-- One event of insert.sql: id, type, key (empty: NULL), payload, headers,
-- and available_at (NULL: now). created_at is the statement's start by the
-- database's clock, in UTC whatever the session's time_zone, and the same
-- for every row of the statement: a writer that locks its aggregate first
-- then stamps its events after the previous writer's commit, so per-key
-- order by created_at is commit order (see docs/architecture.md).
(?, ?, NULLIF(?, ''), ?, ?, COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6))
