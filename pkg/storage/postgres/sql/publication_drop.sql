-- CAPTURE=poll again: the publication goes; the slot is dropped separately
-- (it may be streaming).
DROP PUBLICATION IF EXISTS {{publication}}
