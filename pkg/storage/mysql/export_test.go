package mysql

import (
	"context"

	"github.com/outbox-relay/relay/pkg/storage"
)

// HandBack exposes handBack to the external tests: a claim that fails after
// its UPDATE committed cannot be provoked from outside on demand.
func (s *Store) HandBack(ctx context.Context, lease storage.Lease, claimErr error) error {
	return s.handBack(ctx, lease, claimErr)
}
