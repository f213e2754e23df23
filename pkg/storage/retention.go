package storage

import "context"

// RetentionLocker is offered by a storage that can keep the deletion of expired
// rows (the relay's DELIVERED_RETENTION and DEAD_RETENTION) to one process
// at a time per table, with a lock the database holds for a session: a
// PostgreSQL advisory lock, a MySQL named lock (GET_LOCK). It is optional:
// without it every relay of a table prunes, which is safe (pruning skips
// rows another statement holds and never deletes a row that changed) but
// does the same work several times.
type RetentionLocker interface {
	// WithRetentionLock runs fn while holding the table's retention lock
	// and returns true. When another session holds the lock it returns
	// false at once, without running fn: retention is that session's job
	// for now. The lock is released when fn returns, or by the database
	// when the session's connection is lost.
	WithRetentionLock(ctx context.Context, fn func(context.Context) error) (ran bool, err error)
}
