package postgres

import (
	"context"

	"github.com/outbox-relay/relay/pkg/storage"
)

// HandBack exposes handBack to the external tests: a claim that fails after
// its statement committed cannot be provoked from outside on demand.
func (s *Store) HandBack(ctx context.Context, lease storage.Lease, claimErr error) error {
	return s.handBack(ctx, lease, claimErr)
}

// ListQuery exposes the statement List runs, for EXPLAIN.
func (s *Store) ListQuery(p storage.ListParams) (string, []any) { return s.listQuery(p) }
