package postgres

import (
	"context"

	"github.com/outbox-relay/relay/pkg/storage/driverkit"
)

// WithRetentionLock runs fn while one pooled connection holds the table's
// retention lock (a session-level advisory lock), so that one relay of a
// table prunes at a time. fn's own statements run on other connections.
func (s *Store) WithRetentionLock(ctx context.Context, fn func(context.Context) error) (bool, error) {
	return driverkit.RunLocked(ctx, s.table.String(), func() (func(), error) {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, s.queryError("retention lock on", err)
		}
		var locked bool
		if err := conn.QueryRow(ctx, s.queries["retention_lock"]).Scan(&locked); err != nil || !locked {
			conn.Release()
			if err != nil {
				return nil, s.queryError("retention lock on", err)
			}
			return nil, nil
		}
		return func() {
			// A connection that cannot say unlock must not go back to the
			// pool holding the lock: closing it releases the lock.
			bg := context.WithoutCancel(ctx)
			if _, err := conn.Exec(bg, s.queries["retention_unlock"]); err != nil {
				_ = conn.Conn().Close(bg)
			}
			conn.Release()
		}, nil
	}, fn)
}
