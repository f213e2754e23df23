-- Sent after BEGIN by a held claim (LEASE_MODE=lock), whose transaction
-- stays open, idle, while its batch is at the broker. $1 milliseconds: the
-- server ends the transaction (its rows PENDING as they were) when the relay
-- leaves it idle for longer — the held claim's lease timeout, whatever
-- idle_in_transaction_session_timeout the role or the database sets.
SELECT set_config('idle_in_transaction_session_timeout', $1::bigint::text, true)
