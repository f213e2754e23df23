package postgres

import (
	"context"
	"slices"
	"time"
)

// preparedTick is how often the listener looks at the database's prepared
// transactions while the server can prepare any: a transaction that will
// PREPARE cannot NOTIFY, so its events would otherwise wait for the poll
// after its COMMIT PREPARED. One read of the server's shared memory per
// tick (docs/architecture.md, "Wakeups").
const preparedTick = 5 * time.Millisecond

// preparedWatch is what the listener knows of the prepared transactions:
// those its last look saw.
type preparedWatch struct {
	seen []string
}

// look reads the database's prepared transactions and says whether one
// the look before saw has ended (committed or rolled back: its events, if
// any, are visible now, and no notification says so), and whether the
// server can prepare any (max_prepared_transactions > 0, not PostgreSQL's
// default).
func (w *preparedWatch) look(ctx context.Context, s *Store) (ended, canPrepare bool, err error) {
	var now []string
	if err := s.pool.QueryRow(ctx, s.queries["prepared"]).Scan(&now, &canPrepare); err != nil {
		return false, true, err
	}
	for _, x := range w.seen {
		if !slices.Contains(now, x) {
			ended = true
			break
		}
	}
	w.seen = now
	return ended, canPrepare, nil
}

// watch looks every preparedTick and calls onEnd when a prepared
// transaction has ended, until ctx ends. A look that fails is tried
// again at the next tick; the poll covers the meantime.
func (w *preparedWatch) watch(ctx context.Context, s *Store, onEnd func()) {
	tick := time.NewTicker(preparedTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ended, _, err := w.look(ctx, s); err == nil && ended {
			onEnd()
		}
	}
}
