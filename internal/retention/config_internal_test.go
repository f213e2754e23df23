package retention

import (
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
)

// A zero Config is valid and its tuning takes the defaults; the
// retentions, which say what to remove, have none.
func TestZeroConfigTakesTheDefaults(t *testing.T) {
	t.Parallel()
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Validate of a zero Config: %v", err)
	}
	r, err := New(Config{Delivered: Forever, Dead: Forever}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := r.cfg
	if got.Interval != IntervalDefault || got.FirstDelay != FirstDelayDefault || got.BatchSize != BatchSizeDefault ||
		got.Pause != PauseDefault || got.PartitionAhead != 0 || got.Logger == nil {
		t.Errorf("Config{} with defaults = %+v", got)
	}
}

// A field that cannot work is an error naming the field as Go spells it.
func TestInvalidFieldsAreNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Interval: -time.Second}, "retention: Interval must be positive, got -1s"},
		{Config{FirstDelay: -time.Second}, "retention: FirstDelay must be positive, got -1s"},
		{Config{BatchSize: -1}, "retention: BatchSize must be positive, got -1"},
		{Config{Pause: -time.Millisecond}, "retention: Pause must be positive, got -1ms"},
		{Config{PartitionAhead: -time.Hour}, "retention: PartitionAhead must be positive, got -1h0m0s"},
	} {
		err := c.cfg.Validate()
		if err == nil || err.Error() != c.want {
			t.Errorf("%+v: Validate = %v, want %s", c.cfg, err, c.want)
		}
		var fe *fieldcheck.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%v is not a FieldError", err)
		}
		if _, err := New(c.cfg, nil); err == nil {
			t.Errorf("New accepted %+v", c.cfg)
		}
	}
}
