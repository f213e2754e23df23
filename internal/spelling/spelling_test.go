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

func TestEnvSlips(t *testing.T) {
	t.Parallel()
	known := []string{"BATCH_SIZE", "STORAGE_URL", "LOG_LEVEL"}
	got := EnvSlips([]string{"PATH=/bin", "BACH_SIZE=100", "STORAGE_URL=x", "STORAGE_URLL=y", "HOME=/root", "log_level=debug", "BACH_SIZE=1"}, known)
	want := []Slip{{"BACH_SIZE", "BATCH_SIZE"}, {"STORAGE_URLL", "STORAGE_URL"}, {"log_level", "LOG_LEVEL"}}
	if len(got) != len(want) {
		t.Fatalf("EnvSlips = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("EnvSlips = %v, want %v", got, want)
		}
	}
}
