// Package eventually waits in tests for a condition to hold, with a
// deadline, instead of sleeping for a guessed time.
package eventually

import (
	"testing"
	"time"
)

// tick is how often the condition is checked.
const tick = 20 * time.Millisecond

// True checks cond until it holds, and fails the test with describe's text
// if it still does not hold after timeout.
func True(t testing.TB, timeout time.Duration, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for: %s", timeout, describe())
		case <-ticker.C:
		}
	}
}
