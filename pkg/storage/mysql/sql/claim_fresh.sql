-- Beside a log reader (FreshEvents.ToLog), the part of claim.sql and
-- claim_unkeyed.sql that leaves the log its fresh rows ({{fresh}}): a row
-- that is due again (available_at after created_at) or fresh with a seq
-- up to ?, the highest the claims may take (the relay's backfill).
AND (available_at > created_at OR seq <= ?)
