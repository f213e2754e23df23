-- The retry-dead filter. A NULL argument matches everything: the event
-- type (twice), died (updated_at, a DEAD row's state_at) at or after
-- (twice), text last_error contains in any case (twice), the partition
-- key (twice), created at or after (twice) and before (twice). {{ids}} is the id
-- list; {{any_id}} is TRUE when none was given.
  AND ({{any_id}} OR event_id IN ({{ids}}))
  AND (? IS NULL OR event_type = ?)
  AND (? IS NULL OR state_at >= CAST(? AS DATETIME(6)))
  AND (? IS NULL OR LOCATE(LOWER(?), LOWER(COALESCE(last_error, ''))) > 0)
  AND (? IS NULL OR partition_key = ?)
  AND (? IS NULL OR created_at >= CAST(? AS DATETIME(6)))
  AND (? IS NULL OR created_at < CAST(? AS DATETIME(6)))
