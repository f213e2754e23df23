package storage_test

import (
	"testing"

	"github.com/outbox-relay/relay/pkg/storage"
)

// The reap rule lives in ReapParams alone; the drivers' statements only
// compare with DeadFrom, so this is where its boundary is pinned down.
func TestReapRuleCountsTheExpiredLease(t *testing.T) {
	for _, c := range []struct {
		max, attempts int
		dead          bool
	}{
		{max: 5, attempts: 3, dead: false},
		{max: 5, attempts: 4, dead: true}, // the expired lease is the fifth attempt
		{max: 5, attempts: 7, dead: true},
		{max: 1, attempts: 0, dead: true},
	} {
		p := storage.ReapParams{MaxAttempts: c.max}
		if got := p.Dead(c.attempts); got != c.dead {
			t.Errorf("MaxAttempts %d, attempts %d: Dead = %v, want %v", c.max, c.attempts, got, c.dead)
		}
		if got := c.attempts >= p.DeadFrom(); got != c.dead {
			t.Errorf("MaxAttempts %d, attempts %d: attempts >= DeadFrom() = %v, want %v", c.max, c.attempts, got, c.dead)
		}
	}
}
