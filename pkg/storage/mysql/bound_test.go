package mysql_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

// The claims' bound is a timing one: a late commit's event waits up to the
// sweep interval asked for (the default when none is), and the bound says
// why and what removes it.
func TestClaimBoundIsTheSweepInterval(t *testing.T) {
	t.Parallel()
	var s mysql.Store
	for in, want := range map[time.Duration]time.Duration{0: storage.SweepIntervalDefault, 3 * time.Second: 3 * time.Second} {
		b := s.ClaimBound(in)
		if b.Exact || b.LateCommitWait != want || !strings.Contains(b.Why, "sweep") || !strings.Contains(b.Fix, "CAPTURE=binlog") {
			t.Errorf("ClaimBound(%s) = %+v, want a wait of %s", in, b, want)
		}
	}
}
