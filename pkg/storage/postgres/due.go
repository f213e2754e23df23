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

// NextDue reports how long until the next scheduled or backed-off row comes
// due (next_due.sql): one probe of due_at_idx, so that a relay about to
// wait can wake for it rather than at its next poll.
func (s *Store) NextDue(ctx context.Context) (time.Duration, bool, error) {
	var us int64
	err := s.pool.QueryRow(ctx, s.queries["next_due"]).Scan(&us)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		s.recycle(err)
		return 0, false, fmt.Errorf("read when the next row comes due: %w", err)
	}
	// ceil and available_at > now() make it at least 1 µs; keep it so if
	// the clock's resolution ever rounds it to nothing.
	return max(time.Duration(us)*time.Microsecond, time.Microsecond), true, nil
}
