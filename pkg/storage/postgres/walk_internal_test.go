package postgres

import (
	"testing"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// The claim returns its rows in write order, not walk order: walkEnd must
// find the walk's end from the keys alone, wrapping included.
func TestWalkEndFollowsTheWalkOverKeys(t *testing.T) {
	events := func(keys ...string) []outbox.Event {
		out := make([]outbox.Event, len(keys))
		for i, k := range keys {
			out[i] = outbox.Event{PartitionKey: k}
		}
		return out
	}
	cases := []struct {
		name, after string
		keys        []string
		want        string
	}{
		{"first claim", "", []string{"b", "a", "c"}, "c"},
		{"past the cursor", "b", []string{"d", "c"}, "d"},
		{"wrapped around", "m", []string{"x", "y", "a", "c"}, "c"},
		{"only unkeyed events", "m", []string{"", ""}, "m"},
		{"nothing claimed", "m", nil, "m"},
		{"the cursor key itself after wrapping", "m", []string{"z", "m"}, "m"},
	}
	for _, c := range cases {
		if got := walkEnd(c.after, events(c.keys...)); got != c.want {
			t.Errorf("%s: walkEnd(%q, %v) = %q, want %q", c.name, c.after, c.keys, got, c.want)
		}
	}
}
