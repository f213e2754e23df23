-- Serialise ordered claims on a table, server-wide: ? is the lock's name
-- (derived from the database and table) and the seconds to wait for it.
-- The lock belongs to the connection, so a relay that dies drops it. Also
-- the claim's stamp: the lease's locked_at, and the instant by which
-- "due" is judged.
SELECT GET_LOCK(?, ?), UTC_TIMESTAMP(6)
