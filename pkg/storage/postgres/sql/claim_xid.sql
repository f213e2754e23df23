-- The claim's own transaction id, last in its pipeline: the bound of the
-- claim's mark (position.go) and, for a held claim, the transaction the
-- relay's next claims leave out of the oldest running one. A claim that
-- locked or changed rows has one already; one that did not gets one only
-- when $1 asks (the mark would move the claim position), so that the
-- polls of a quiet database write nothing. NULL otherwise.
SELECT (CASE WHEN $1::boolean THEN pg_current_xact_id() ELSE pg_current_xact_id_if_assigned() END)::text::bigint
