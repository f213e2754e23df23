-- End an ordered claim: let the next relay's claim go on.
SELECT RELEASE_LOCK(?)
