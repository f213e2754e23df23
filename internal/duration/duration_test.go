package duration

import (
	"testing"
	"time"
)

// The relay's DELIVERED_RETENTION and DEAD_RETENTION read durations here;
// relay-cli's flag tests (cmd/relay-cli/duration_test.go) cover the rest.
func TestParse(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "90s": 90 * time.Second, "7d": 7 * Day, "2w": 2 * Week, "1w3d12h": Week + 3*Day + 12*time.Hour, "1.5d": 36 * time.Hour,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-7d", "7", "7x", "soon", "100000000d"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %s, want an error", in, got)
		}
	}
}
