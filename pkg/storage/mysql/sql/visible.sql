-- Whether the transactions of a binlog batch are visible: ? are the seqs
-- ({{ids}}) of one row of each, the log's names for them. The binlog is
-- written before InnoDB commits, so the reader may see a transaction a
-- moment before other sessions see its rows. A locking read of those rows
-- waits for the inserting transaction's implicit lock, so once it
-- returns, each was committed (or rolled back: then there is no row to
-- settle). Run in its own short READ COMMITTED transaction, which ends at
-- once and keeps nothing locked.
SELECT seq FROM {{table}} WHERE seq IN ({{ids}}) LOCK IN SHARE MODE
