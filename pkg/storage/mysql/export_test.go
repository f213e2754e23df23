package mysql

import (
	"context"
	"math"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
)

// HandBack exposes handBack to the external tests: a claim that fails after
// its UPDATE committed cannot be provoked from outside on demand.
func (s *Store) HandBack(ctx context.Context, lease storage.Lease, claimErr error) error {
	return s.handBack(ctx, lease, claimErr)
}

// ClaimStatement is the SELECT, with its arguments, that relayID's next
// unordered claim would run, so that a test can ask the server what it
// costs (ANALYZE): a claim's transaction cannot be observed from outside.
func (s *Store) ClaimStatement(p storage.ClaimParams) (string, []any) {
	p = p.WithDefaults()
	return s.claimQuery(s.cursors.plan(p.RelayID, p.SweepInterval, time.Now(), false), p.Limit, math.MaxInt64)
}

// BacklogQuery exposes the statement Backlog runs, for ANALYZE.
func (s *Store) BacklogQuery() (string, []any) { return s.backlogQuery(nil) }
