-- Reads nothing; fails when the table lacks a column the inbox uses.
SELECT consumer, event_id, processed_at FROM {{table}} WHERE false
