package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/storage"
)

// A zero field takes its XxxDefault and is valid; only RelayID, which has
// no default, is required.
func TestZeroConfigTakesTheDefaults(t *testing.T) {
	t.Parallel()
	if err := (Config{RelayID: "r"}).Validate(); err != nil {
		t.Errorf("Validate of a zero Config: %v", err)
	}
	got := Config{}.withDefaults()
	want := Config{
		BatchSize:          BatchSizeDefault,
		MaxBatchBytes:      MaxBatchBytesDefault,
		PollInterval:       PollIntervalDefault,
		SweepInterval:      SweepIntervalDefault,
		MaxInFlightBatches: MaxInFlightBatchesDefault,
		LeaseTimeout:       LeaseTimeoutDefault,
		ShutdownTimeout:    ShutdownTimeoutDefault,
		Retry: RetryPolicy{
			MaxAttempts: RetryMaxAttemptsDefault,
			BaseDelay:   RetryBaseDelayDefault,
			MaxDelay:    RetryMaxDelayDefault,
			Jitter:      RetryJitterDefault,
		},
		NotifyDebounce: NotifyDebounceDefault,
		Ordering:       OrderingDefault,
		OnDead:         OnDeadDefault,
		LeaseMode:      LeaseModeDefault,
		HeldMax:        HeldMaxDefault,
	}
	got.Logger, got.Observer = nil, nil
	if got != want {
		t.Errorf("Config{} with defaults =\n%+v\nwant\n%+v", got, want)
	}
	err := Config{}.Validate()
	var fe *fieldcheck.FieldError
	if !errors.As(err, &fe) || fe.Field != "RelayID" || err.Error() != "relay: RelayID must not be empty" {
		t.Errorf("Validate without RelayID = %v, want it to name RelayID alone", err)
	}
}

// A field that cannot work is an error naming the field as Go spells it,
// never an environment variable.
func TestInvalidFieldsAreNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{BatchSize: -5}, "relay: BatchSize must be positive, got -5"},
		{Config{MaxBatchBytes: -1}, "relay: MaxBatchBytes must be positive, got -1"},
		{Config{PollInterval: -time.Second}, "relay: PollInterval must be positive, got -1s"},
		{Config{SweepInterval: -time.Second}, "relay: SweepInterval must be positive, got -1s"},
		{Config{MaxInFlightBatches: -1}, "relay: MaxInFlightBatches must be positive, got -1"},
		{Config{LeaseTimeout: 100 * time.Millisecond}, "relay: LeaseTimeout must be at least 500ms, got 100ms"},
		{Config{ShutdownTimeout: -time.Second}, "relay: ShutdownTimeout must be positive, got -1s"},
		{Config{Retry: RetryPolicy{MaxAttempts: -2}}, "relay: Retry.MaxAttempts must be positive, got -2"},
		{Config{Retry: RetryPolicy{BaseDelay: -time.Second}}, "relay: Retry.BaseDelay must be positive, got -1s"},
		{Config{Retry: RetryPolicy{MaxDelay: time.Millisecond}}, "relay: Retry.MaxDelay (1ms) must not be below Retry.BaseDelay (1s)"},
		{Config{Retry: RetryPolicy{Jitter: 2}}, "relay: Retry.Jitter must be between 0 and 1, got 2"},
		{Config{Retry: RetryPolicy{Jitter: -0.5}}, "relay: Retry.Jitter must be between 0 and 1, got -0.5"},
		{Config{Ordering: "total"}, `relay: Ordering must be none or partition, got "total"`},
		{Config{OnDead: "wait"}, `relay: OnDead must be skip or block, got "wait"`},
		{Config{NotifyDebounce: -time.Millisecond}, "relay: NotifyDebounce must not be negative, got -1ms"},
	} {
		c.cfg.RelayID = "r"
		err := c.cfg.Validate()
		if err == nil || err.Error() != c.want {
			t.Errorf("%+v: Validate = %v, want %s", c.cfg, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "_") {
			t.Errorf("%v names an environment variable", err)
		}
	}
	// Off is a value of its own where off is a choice.
	off := Config{RelayID: "r", Retry: RetryPolicy{Jitter: NoJitter}, NotifyDebounce: NoDebounce}
	if err := off.Validate(); err != nil {
		t.Errorf("NoJitter and NoDebounce: %v", err)
	}
	if d := off.withDefaults().Retry.Delay(1, 0); d != RetryBaseDelayDefault {
		t.Errorf("NoJitter: the first wait is %s, want %s", d, RetryBaseDelayDefault)
	}
	if (Config{RelayID: "r", Ordering: storage.OrderingPartition, OnDead: storage.DeadBlock}).Validate() != nil {
		t.Error("partition ordering with block refused")
	}
}

// CaptureConfig keeps the same rule.
func TestCaptureConfigTakesDefaultsAndNamesFields(t *testing.T) {
	t.Parallel()
	if err := (CaptureConfig{}).Validate(); err != nil {
		t.Errorf("Validate of a zero CaptureConfig: %v", err)
	}
	if d := (CaptureConfig{}).withDefaults(); d.StandbyRetry != StandbyRetryDefault || d.Observer == nil {
		t.Errorf("CaptureConfig{} with defaults = %+v", d)
	}
	err := CaptureConfig{StandbyRetry: -time.Second}.Validate()
	if want := "relay: CaptureConfig.StandbyRetry must be positive, got -1s"; err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %s", err, want)
	}
	e, err := New(Config{RelayID: "r"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCapture(e, nil, nil, CaptureConfig{StandbyRetry: -time.Second}); err == nil {
		t.Error("NewCapture accepted a negative StandbyRetry")
	}
}
