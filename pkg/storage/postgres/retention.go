package postgres

import (
	"context"
	"fmt"

	"github.com/outbox-relay/relay/pkg/storage"
)

var _ storage.RetentionLocker = (*Store)(nil)

// WithRetentionLock runs fn while one pooled connection holds the table's
// retention lock (a session-level advisory lock), so that one relay of a
// table prunes at a time. fn's own statements run on other connections.
func (s *Store) WithRetentionLock(ctx context.Context, fn func(context.Context) error) (bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, s.queryError("retention lock on", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, s.queries["retention_lock"]).Scan(&locked); err != nil {
		return false, s.queryError("retention lock on", err)
	}
	if !locked {
		return false, nil
	}
	defer func() {
		// A connection that cannot say unlock must not go back to the
		// pool holding the lock: closing it releases the lock.
		bg := context.WithoutCancel(ctx)
		if _, err := conn.Exec(bg, s.queries["retention_unlock"]); err != nil {
			_ = conn.Conn().Close(bg)
		}
	}()
	if err := fn(ctx); err != nil {
		return true, fmt.Errorf("retention on %s: %w", s.table, err)
	}
	return true, nil
}
