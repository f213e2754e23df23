package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/storage"
)

var _ storage.DueWatcher = (*Store)(nil)

// NextDue reports how long until the next scheduled or backed-off row due
// after since comes due (next_due.sql): one probe of due_at_idx, so that a
// relay about to wait can wake for it rather than at its next poll.
func (s *Store) NextDue(ctx context.Context, since time.Time) (time.Duration, bool, error) {
	var us int64
	err := s.pool.QueryRow(ctx, s.queries["next_due"], since).Scan(&us)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		s.recycle(err)
		return 0, false, fmt.Errorf("read when the next row comes due: %w", err)
	}
	return time.Duration(us) * time.Microsecond, true, nil
}
