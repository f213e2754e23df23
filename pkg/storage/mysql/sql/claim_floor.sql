-- The part of claim.sql that starts the scan after a position: ? are its
-- state_at (twice) and seq. MariaDB's range optimizer turns this OR into
-- one range of state_seq_idx starting at (PENDING, state_at, seq); it does
-- not for the row constructor (state_at, seq) > (?, ?), which it reads
-- from the start of the state_at range (EXPLAIN: key parts status,
-- state_at only).
AND (state_at > ? OR (state_at = ? AND seq > ?))
