-- The server's version string: MariaDB's says so. Some syntax differs
-- (fresh_lock.sql), and so does how information_schema reads the
-- AUTO_INCREMENT counter (last_seq.sql).
SELECT VERSION()
