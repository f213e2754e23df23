package postgres

import (
	"context"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
)

// HandBack exposes handBack to the external tests: a claim that fails after
// its statement committed cannot be provoked from outside on demand.
func (s *Store) HandBack(ctx context.Context, lease storage.Lease, claimErr error) error {
	return s.handBack(ctx, lease, claimErr)
}

// SetPartitionLockTimeout sets how long s's partition maintenance waits
// for a lock.
func SetPartitionLockTimeout(s *Store, d time.Duration) { s.partitionLockTimeout = d }

// SetPartitionMoveLimit sets how many rows s's partition maintenance moves
// out of the default partition for one new partition.
func SetPartitionMoveLimit(s *Store, n int64) { s.partitionMoveLimit = n }

// ListQuery exposes the statement List runs, for EXPLAIN.
func (s *Store) ListQuery(p storage.ListParams) (string, []any) { return s.listQuery(p) }

// ClaimFloor is where relayID's unordered claims of limit events start
// when they are not sweeps.
func (s *Store) ClaimFloor(relayID string, limit int) int64 {
	p := s.positions.of(relayID)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forward(limit)
}

// Query returns the statement s runs as name, expanded for its table.
func (s *Store) Query(name string) string { return s.queries[name] }

// BacklogFloor is where Backlog starts counting fresh PENDING rows.
func (s *Store) BacklogFloor() int64 { return s.positions.lowestSafe() }

// BacklogArgs are the backlog statement's arguments as Backlog passes them,
// or with fromStart those that count every PENDING row.
func (s *Store) BacklogArgs(fromStart bool) []any {
	if fromStart {
		return []any{int64(0), dueAt(dueKey{}), int64(0)}
	}
	due := s.positions.lowestDueSafe()
	return []any{s.positions.lowestSafe(), dueAt(due), due.seq}
}

// DueFloor is where relayID's unordered claims that are not sweeps read
// the due index from, as the claim's two arguments; with fromStart, the
// beginning.
func (s *Store) DueFloor(relayID string, fromStart bool) (at any, seq int64) {
	if fromStart {
		return dueAt(dueKey{}), 0
	}
	p := s.positions.of(relayID)
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.dueForward()
	return dueAt(k), k.seq
}

// FloorsClaimArgs runs what relayID's next ordered claim with p reads
// first, and returns that statement's arguments, the keys the claim would
// pass, and the arguments of its claim statement (claim_ordered_keys_*),
// to run it later, as a claim would whose read came before whatever the
// caller does in between.
func (s *Store) FloorsClaimArgs(ctx context.Context, p storage.ClaimParams) (readArgs []any, keys []string, claimArgs []any, err error) {
	p = p.WithDefaults()
	c, readArgs, err := s.findKeysFor(ctx, p)
	if err != nil || c == nil {
		return readArgs, nil, nil, err
	}
	pos := s.positions.of(p.RelayID)
	pos.mu.Lock()
	defer pos.mu.Unlock()
	pl := pos.next(p.Limit, p.SweepInterval, time.Now())
	return readArgs, c.keys, c.claimArgs(p, pl), nil
}

func (s *Store) findKeysFor(ctx context.Context, p storage.ClaimParams) (_ *floorsClaim, readArgs []any, err error) {
	pos := s.positions.of(p.RelayID)
	pos.mu.Lock()
	defer pos.mu.Unlock()
	if pos.keys != nil {
		readArgs = pos.keys.readPlan(pos.keys.find.next(p.Limit, p.SweepInterval, time.Now()), p.Limit).args()
	}
	c, err := s.findKeys(ctx, pos, p)
	return c, readArgs, err
}

// KeyPosition is where relayID's next ordered claim of limit events that is
// not a sweep reads keyed rows from (claim_keys.sql); 0 before its first.
func (s *Store) KeyPosition(relayID string, limit int) int64 {
	p := s.positions.of(relayID)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		return 0
	}
	return p.keys.find.forward(limit)
}

// WalksTheIndex says whether relayID's ordered claims walk the index for
// now, with too many keys waiting.
func (s *Store) WalksTheIndex(relayID string) bool {
	p := s.positions.of(relayID)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys != nil && time.Now().Before(p.keys.walkUntil)
}
