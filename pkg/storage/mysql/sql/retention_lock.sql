-- Take the table's retention lock if no other session holds it, without
-- waiting: the first argument is the lock's name. 1 when taken.
SELECT GET_LOCK(?, 0)
