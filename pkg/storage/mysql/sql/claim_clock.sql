-- The database's clock, for a claim that found nothing due: its scan
-- reached the end of the due rows by then, which is where the relay's
-- next claims start (less a lag; see cursor.go).
SELECT UTC_TIMESTAMP(6)
