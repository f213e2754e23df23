package spelling

import "testing"

func TestNearest(t *testing.T) {
	t.Parallel()
	names := []string{"timeout", "topic", "topic_prefix", "max_pending", "db"}
	for name, want := range map[string]string{
		"timout":      "timeout",      // a letter left out
		"tiemout":     "timeout",      // two letters swapped: one slip
		"topic_prefx": "topic_prefix", // within two of a long name
		"max_pend":    "max_pending",  // the only name it begins
		"topi":        "topic",
		"colour":      "",   // far from everything
		"d":           "db", // one letter: one slip away
		"xyz":         "",
	} {
		if got := Nearest(name, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", name, got, want)
		}
	}
}
