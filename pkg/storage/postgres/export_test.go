package postgres

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// Query returns the statement s runs as name, expanded for its table.
func (s *Store) Query(name string) string { return s.queries[name] }

// FrontierArgs are the arguments of the claim statement (claim.sql, or
// claim_unkeyed for the rows without a key of an ordered claim) of
// relayID's next claim of limit events that is not a sweep; with
// fromStart, of one that reads the fresh rows and the due index from the
// beginning instead of from the frontier.
func (s *Store) FrontierArgs(relayID string, limit int, fromStart bool) []any {
	st := s.states.of(relayID)
	st.mu.Lock()
	defer st.mu.Unlock()
	pl := st.frontier.plan(time.Hour, time.Now())
	if fromStart {
		pl.start, pl.due = writePlace{}, dueKey{}
	}
	return append([]any{relayID, limit, int64(0)}, pl.args(math.MaxInt64)...)
}

// FloorsClaimArgs runs what relayID's next ordered claim with p reads
// first, and returns the keys the claim would pass and the arguments of
// its claim statement (claim_ordered_keys_*), to run it later, as a claim
// would whose read came before whatever the caller does in between.
func (s *Store) FloorsClaimArgs(ctx context.Context, p storage.ClaimParams) (keys []string, claimArgs []any, err error) {
	p = p.WithDefaults()
	st := s.states.of(p.RelayID)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.keys == nil {
		st.keys = newKeyWalk()
	}
	c, err := s.findKeys(ctx, st.keys, p)
	if err != nil || c == nil {
		return nil, nil, err
	}
	return c.keys, c.claimArgs(p), nil
}

// KeyReadArgs are the arguments of relayID's next read of keyed rows
// (claim_keys.sql) before an ordered claim of limit events.
func (s *Store) KeyReadArgs(relayID string, limit int) []any {
	st := s.states.of(relayID)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.keys == nil {
		return keyFindPlan{most: keyReadMost(limit)}.args()
	}
	return st.keys.find.plan(time.Hour, time.Now(), keyReadMost(limit)).args()
}

// KeyWaits says whether relayID's ordered claims pass key to their walks.
func (s *Store) KeyWaits(relayID, key string) bool {
	st := s.states.of(relayID)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.keys == nil {
		return false
	}
	_, ok := st.keys.waiting[key]
	return ok
}

// WalksTheIndex says whether relayID's ordered claims walk the index for
// now, with too many keys waiting.
func (s *Store) WalksTheIndex(relayID string) bool {
	st := s.states.of(relayID)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.keys != nil && time.Now().Before(st.keys.walkUntil)
}

// Pool exposes the connection pool to this package's tests.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }
