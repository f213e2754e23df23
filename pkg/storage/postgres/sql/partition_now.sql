-- The database's clock, which decides what "ahead" and "expired" mean.
SELECT now()
