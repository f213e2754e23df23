-- Serialise migrations and grants server-wide (several relays may start
-- with STORAGE_AUTO_MIGRATE at once). The first argument is the lock's
-- name, the second the seconds to wait.
SELECT GET_LOCK(?, ?)
