-- The two-phase transactions prepared in this database, by id, and whether
-- the server can prepare any (max_prepared_transactions above 0): the
-- listener watches them, since a transaction that will PREPARE cannot
-- notify (preparedWatch, prepared.go). It reads the function behind the
-- pg_prepared_xacts view, without the view's joins to the role catalogue.
SELECT coalesce((SELECT array_agg(transaction::text ORDER BY transaction::text)
                 FROM pg_catalog.pg_prepared_xact()
                 WHERE dbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())), '{}') AS prepared,
       current_setting('max_prepared_transactions')::int > 0 AS can_prepare
