-- Insert events in one statement, in the order given, so that seq
-- (AUTO_INCREMENT) keeps their order. {{rows}} is insert_row.sql once per
-- event, joined by commas.
INSERT INTO {{table}} (event_id, event_type, partition_key, payload, headers, available_at, created_at)
VALUES {{rows}}
