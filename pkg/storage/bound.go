package storage

import "time"

// ClaimBounder is offered by a storage that can say how late a committed
// event may be found by the claims. It is optional: the relay finds it at
// start with a type assertion, warns when the bound is a timing one, and
// reports it on /readyz; relay-cli stats shows it. A storage without it
// reports nothing.
type ClaimBounder interface {
	// ClaimBound is the bound of claims run with sweepInterval as their
	// ClaimParams.SweepInterval (SweepIntervalDefault when 0 or less).
	ClaimBound(sweepInterval time.Duration) ClaimBound
}

// ClaimBound is how late a claim may find an event that committed.
type ClaimBound struct {
	// Exact is true when a claim that starts after an event's transaction
	// committed finds the event (or finds it behind a full batch, so that
	// the next claims do), however long the transaction took: the bound
	// rests on what the database guarantees, not on a clock.
	Exact bool
	// LateCommitWait is, when the bound is not exact, how long an event of
	// a transaction that commits late waits at worst for its claim: the
	// sweep interval, plus one claim. Zero when Exact.
	LateCommitWait time.Duration
	// Why says, when the bound is not exact, which events wait and why.
	Why string
	// Fix says, when the bound is not exact, what makes it exact.
	Fix string
}

// BesideLog is the bound of claims beside a log reader (CAPTURE=wal,
// CAPTURE=binlog): while a reader streams the table, every new event
// comes from the log at its commit, in commit order, and the claims take
// only what the log leaves them — events handed back, which land ahead
// of them, and the backfill, which reads from the start — so the bound is
// exact whatever the storage's own. While none streams, the claims take
// every event, and b holds.
func (b ClaimBound) BesideLog(streaming bool) ClaimBound {
	if streaming {
		return ClaimBound{Exact: true}
	}
	return b
}
