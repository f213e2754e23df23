package mysql

import (
	"context"
	"database/sql"

	"github.com/outbox-relay/relay/pkg/storage/driverkit"
)

// WithRetentionLock runs fn while one connection holds the table's
// retention lock (GET_LOCK, server-wide, no wait), so that one relay of a
// table prunes at a time. fn's own statements run on other connections.
func (s *Store) WithRetentionLock(ctx context.Context, fn func(context.Context) error) (bool, error) {
	// The lock belongs to the connection: the connection is held until
	// unlock, and dropping it drops the lock.
	tryLock := func() (unlock func(), err error) {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return nil, s.queryError("retention lock on", err)
		}
		var locked sql.NullInt64
		err = conn.QueryRowContext(ctx, s.queries["retention_lock"], s.retentionLock).Scan(&locked)
		switch {
		case err != nil:
			conn.Close()
			return nil, s.queryError("retention lock on", err)
		case locked.Int64 != 1:
			conn.Close()
			return nil, nil
		}
		return func() {
			// On a connection that cannot say RELEASE_LOCK the lock goes
			// with the connection, which database/sql then discards.
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), s.queries["retention_unlock"], s.retentionLock)
			conn.Close()
		}, nil
	}
	return driverkit.RunLocked(ctx, s.table.String(), tryLock, fn)
}
