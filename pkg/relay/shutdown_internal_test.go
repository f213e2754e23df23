package relay

import (
	"testing"
	"time"
)

// TestSettleReserveAsDocumented: of its ShutdownTimeout the engine keeps a
// quarter, at most 3 s, for handing back what the publishes cut off left;
// docs/architecture.md gives these examples.
func TestSettleReserveAsDocumented(t *testing.T) {
	t.Parallel()
	for timeout, reserve := range map[time.Duration]time.Duration{
		28 * time.Second:        3 * time.Second,
		1600 * time.Millisecond: 400 * time.Millisecond,
		time.Second:             250 * time.Millisecond,
	} {
		if got := settleReserve(timeout); got != reserve {
			t.Errorf("settleReserve(%s) = %s, want %s", timeout, got, reserve)
		}
	}
}
