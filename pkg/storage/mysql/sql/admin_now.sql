-- The database's clock, read first in a Stats snapshot: every part of the
-- snapshot is judged by this one instant.
SELECT UTC_TIMESTAMP(6)
