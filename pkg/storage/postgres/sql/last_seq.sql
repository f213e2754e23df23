-- The highest seq handed out so far (0 when none): the backfill of rows
-- written before the log reader's slot stops there.
SELECT coalesce(pg_sequence_last_value('{{schema}}"{{name}}_seq"'), 0)
