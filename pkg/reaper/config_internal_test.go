package reaper

import (
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// A zero Config is valid and takes the defaults, which reap by the
// engine's lease and attempt limit.
func TestZeroConfigTakesTheDefaults(t *testing.T) {
	t.Parallel()
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Validate of a zero Config: %v", err)
	}
	r, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := r.cfg
	got.Logger = nil
	want := Config{Interval: IntervalDefault, LeaseTimeout: LeaseTimeoutDefault, BatchSize: BatchSizeDefault, MaxAttempts: MaxAttemptsDefault}
	if got.Interval != want.Interval || got.LeaseTimeout != want.LeaseTimeout || got.BatchSize != want.BatchSize || got.MaxAttempts != want.MaxAttempts {
		t.Errorf("Config{} with defaults = %+v, want %+v", got, want)
	}
	if LeaseTimeoutDefault != relay.LeaseTimeoutDefault || MaxAttemptsDefault != relay.RetryMaxAttemptsDefault {
		t.Error("the reaper's lease timeout or attempt limit is not the engine's")
	}
}

// A field that cannot work is an error naming the field as Go spells it.
func TestInvalidFieldsAreNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Interval: -time.Second}, "reaper: Interval must be positive, got -1s"},
		{Config{LeaseTimeout: time.Millisecond}, "reaper: LeaseTimeout must be at least 500ms, got 1ms"},
		{Config{BatchSize: -1}, "reaper: BatchSize must be positive, got -1"},
		{Config{MaxAttempts: -2}, "reaper: MaxAttempts must be positive, got -2"},
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
	if storage.LeaseTimeoutMin != relay.LeaseTimeoutMin {
		t.Error("the reaper's shortest lease is not the engine's")
	}
}
