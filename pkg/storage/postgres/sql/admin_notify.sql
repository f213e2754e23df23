-- Wake the relays listening on the table's channel ($1), as the insert
-- trigger does, after rows became PENDING without an insert.
SELECT pg_notify($1, '')
