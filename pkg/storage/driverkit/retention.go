package driverkit

import (
	"context"
	"fmt"
)

// RunLocked is WithRetentionLock for every driver. lock tries the table's
// retention lock without waiting and returns how to let go of it, or nil
// when another session holds it; fn then runs while the lock is held, and
// its error says it was the retention of table that failed.
func RunLocked(ctx context.Context, table string, lock func() (unlock func(), err error),
	fn func(context.Context) error) (ran bool, err error) {
	unlock, err := lock()
	if err != nil || unlock == nil {
		return false, err
	}
	defer unlock()
	if err := fn(ctx); err != nil {
		return true, fmt.Errorf("retention on %s: %w", table, err)
	}
	return true, nil
}
