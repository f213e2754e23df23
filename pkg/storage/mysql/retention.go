package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outbox-relay/relay/pkg/storage"
)

var _ storage.RetentionLocker = (*Store)(nil)

// WithRetentionLock runs fn while one connection holds the table's
// retention lock (GET_LOCK, server-wide, no wait), so that one relay of a
// table prunes at a time. fn's own statements run on other connections.
func (s *Store) WithRetentionLock(ctx context.Context, fn func(context.Context) error) (bool, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, s.queryError("retention lock on", err)
	}
	defer conn.Close()
	var locked sql.NullInt64
	if err := conn.QueryRowContext(ctx, s.queries["retention_lock"], s.retentionLock).Scan(&locked); err != nil {
		return false, s.queryError("retention lock on", err)
	}
	if locked.Int64 != 1 {
		return false, nil
	}
	defer func() {
		// On a connection that cannot say RELEASE_LOCK the lock goes with
		// the connection, which database/sql then discards.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), s.queries["retention_unlock"], s.retentionLock)
	}()
	if err := fn(ctx); err != nil {
		return true, fmt.Errorf("retention on %s: %w", s.table, err)
	}
	return true, nil
}
