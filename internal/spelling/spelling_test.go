package spelling

import "testing"

func TestClosest(t *testing.T) {
	t.Parallel()
	known := []string{"BATCH_SIZE", "POLL_INTERVAL", "nats", "amqp", "kafka", "x"}
	for _, c := range []struct{ name, want string }{
		{"BACH_SIZE", "BATCH_SIZE"},
		{"batch_size", "BATCH_SIZE"},
		{"BTACH_SIZE", "BATCH_SIZE"},
		{"POL_INTERVALL", "POLL_INTERVAL"},
		{"nat", "nats"},
		{"kafak", "kafka"},
		{"BATCH_SIZE", ""}, // itself is no slip
		{"HOME", ""},
		{"y", ""}, // one-letter candidates are never offered
		{"amq", "amqp"},
		{"rabbitmq", ""}, // too far: aliases are the registries' business
	} {
		if got := Closest(c.name, known); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if d := Distance("ab", "ba"); d != 1 {
		t.Errorf("a swap counts once, got %d", d)
	}
}
