package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
)

// Defaults for Config.
const (
	BatchSizeDefault = 500
	// MaxBatchBytesDefault keeps what the relay holds at once near
	// MaxInFlightBatches × 8 MiB of events, whatever their sizes.
	MaxBatchBytesDefault      = 8 << 20
	PollIntervalDefault       = 500 * time.Millisecond
	SweepIntervalDefault      = storage.SweepIntervalDefault
	MaxInFlightBatchesDefault = 4
	LeaseTimeoutDefault       = time.Minute
	ShutdownTimeoutDefault    = 30 * time.Second
	RetryMaxAttemptsDefault   = 25
	RetryBaseDelayDefault     = time.Second
	RetryMaxDelayDefault      = 24 * time.Hour
	RetryJitterDefault        = 0.15
	NotifyDebounceDefault     = 5 * time.Millisecond
	OrderingDefault           = storage.OrderingNone
	OnDeadDefault             = storage.DeadSkip
	LeaseModeDefault          = LeaseAuto
	// LeaseTimeoutMin leaves room for a claim, a publish and the renewals
	// every third of the lease; shorter leases expire under a working relay.
	LeaseTimeoutMin = 500 * time.Millisecond
)

// Config tunes an Engine. Zero fields take their XxxDefault, except
// Retry.Jitter and NotifyDebounce, for which zero means none.
type Config struct {
	// RelayID names this relay in locked_by. Required, and unique among the
	// relays sharing a table.
	RelayID string
	// BatchSize is the most events one claim takes.
	BatchSize int
	// MaxBatchBytes is the most payload and header bytes one claim takes;
	// a single larger event still goes, alone.
	MaxBatchBytes int64
	// PollInterval is how long the engine waits for new events when a claim
	// came back short and nothing woke it.
	PollInterval time.Duration
	// SweepInterval bounds how long an event whose transaction committed
	// behind the relay's claim position waits: at least this often a
	// claim also looks behind it (storage.ClaimParams.SweepInterval).
	SweepInterval time.Duration
	// MaxInFlightBatches bounds the batches claimed and not yet settled.
	MaxInFlightBatches int
	// LeaseTimeout is how long a claim stays valid; settling stops retrying
	// once it has passed, because the reaper will then take the rows back.
	LeaseTimeout time.Duration
	// ShutdownTimeout bounds how long Run takes to return after its context
	// ends: in-flight batches may publish until a quarter of it (at most
	// 3 s) is left, and their unpublished events are released in that
	// rest.
	ShutdownTimeout time.Duration
	// Retry decides when a failed event is tried again or buried.
	Retry RetryPolicy
	// Ordering partition keeps every partition key's events in order at the
	// broker; none (the default) publishes as fast as possible.
	Ordering storage.Ordering
	// OnDead says whether a DEAD event holds back the later events of its
	// key under partition ordering.
	OnDead storage.DeadPolicy
	// LeaseMode says how a claimed batch is kept from other relays while
	// it is published: under the row locks of the claim's open transaction
	// (lock), or as DELIVERING rows under a lease stamp (status); auto, the
	// default, holds claims wherever the storage can (storage.HeldQueue)
	// and Ordering is none.
	LeaseMode LeaseMode
	// DeleteDelivered deletes a delivered event's row in the settle
	// statement instead of marking it DELIVERED (DELIVERED_RETENTION=0).
	// The Observer still counts it as delivered.
	DeleteDelivered bool
	// NotifyDebounce is the least time between two wakeups by insert
	// notifications, so a burst of inserts makes a few full claims instead
	// of many tiny ones. Zero wakes the engine for every notification.
	NotifyDebounce time.Duration
	// Broker names the broker in the logs about its availability (its URL
	// without secrets); empty leaves it out.
	Broker string
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// Observer is told what the engine does; nil observes nothing.
	Observer Observer
}

// LeaseMode is Config.LeaseMode.
type LeaseMode string

// Lease modes.
const (
	// LeaseAuto holds claims where it can, and leases them by status
	// elsewhere.
	LeaseAuto LeaseMode = "auto"
	// LeaseLock holds every claim (storage.HeldQueue): its rows stay
	// PENDING, locked by the claim's transaction, which records the
	// outcome and commits. One row version per delivered event instead of
	// two; a relay that dies leaves nothing for the reaper.
	LeaseLock LeaseMode = "lock"
	// LeaseStatus moves claimed rows to DELIVERING under a lease stamp,
	// renewed while the batch is at the broker; the reaper takes back the
	// leases of relays that died.
	LeaseStatus LeaseMode = "status"
)

// RetryPolicy is exponential backoff with jitter and an attempt limit.
type RetryPolicy struct {
	// MaxAttempts is the attempt count at which an event goes DEAD.
	MaxAttempts int
	// BaseDelay is the wait after the first failure; each further failure
	// doubles it.
	BaseDelay time.Duration
	// MaxDelay caps the wait.
	MaxDelay time.Duration
	// Jitter spreads each wait by up to ±Jitter of itself (0 to 1).
	Jitter float64
}

// Delay returns the wait before retrying an event that has now failed
// attempts times; r in [0,1) picks the point in the jitter range.
func (p RetryPolicy) Delay(attempts int, r float64) time.Duration {
	exp := math.Min(float64(max(attempts-1, 0)), 62)
	d := float64(p.BaseDelay) * math.Pow(2, exp) * (1 + p.Jitter*(2*r-1))
	// The cap applies after the jitter: RETRY_MAX_DELAY is a promise.
	return time.Duration(max(math.Min(d, float64(p.MaxDelay)), 0))
}

func (c Config) withDefaults() Config {
	setDefault(&c.BatchSize, BatchSizeDefault)
	setDefault(&c.MaxBatchBytes, MaxBatchBytesDefault)
	setDefault(&c.PollInterval, PollIntervalDefault)
	setDefault(&c.SweepInterval, SweepIntervalDefault)
	setDefault(&c.MaxInFlightBatches, MaxInFlightBatchesDefault)
	setDefault(&c.LeaseTimeout, LeaseTimeoutDefault)
	setDefault(&c.ShutdownTimeout, ShutdownTimeoutDefault)
	setDefault(&c.Retry.MaxAttempts, RetryMaxAttemptsDefault)
	setDefault(&c.Retry.BaseDelay, RetryBaseDelayDefault)
	setDefault(&c.Retry.MaxDelay, RetryMaxDelayDefault)
	if c.Ordering == "" {
		c.Ordering = OrderingDefault
	}
	if c.OnDead == "" {
		c.OnDead = OnDeadDefault
	}
	if c.LeaseMode == "" {
		c.LeaseMode = LeaseModeDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	return c
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate reports every setting that cannot work, naming each by its
// environment variable. It checks the values as given: a zero is an error
// here, while New first replaces zeros with defaults.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.RelayID != "", "RELAY_ID must not be empty")
	check(c.BatchSize > 0, "BATCH_SIZE must be positive, got %d", c.BatchSize)
	check(c.MaxBatchBytes > 0, "MAX_BATCH_BYTES must be positive, got %d", c.MaxBatchBytes)
	check(c.PollInterval > 0, "POLL_INTERVAL must be positive, got %s", c.PollInterval)
	check(c.SweepInterval > 0, "SWEEP_INTERVAL must be positive, got %s", c.SweepInterval)
	check(c.MaxInFlightBatches > 0, "MAX_IN_FLIGHT_BATCHES must be positive, got %d", c.MaxInFlightBatches)
	check(c.LeaseTimeout >= LeaseTimeoutMin, "LEASE_TIMEOUT must be at least %s, got %s", LeaseTimeoutMin, c.LeaseTimeout)
	check(c.ShutdownTimeout > 0, "SHUTDOWN_TIMEOUT must be positive, got %s", c.ShutdownTimeout)
	check(c.Retry.MaxAttempts > 0, "RETRY_MAX_ATTEMPTS must be positive, got %d", c.Retry.MaxAttempts)
	check(c.Retry.BaseDelay > 0, "RETRY_BASE_DELAY must be positive, got %s", c.Retry.BaseDelay)
	check(c.Retry.MaxDelay >= c.Retry.BaseDelay, "RETRY_MAX_DELAY (%s) must not be below RETRY_BASE_DELAY (%s)", c.Retry.MaxDelay, c.Retry.BaseDelay)
	check(c.Retry.Jitter >= 0 && c.Retry.Jitter <= 1, "RETRY_JITTER must be between 0 and 1, got %g", c.Retry.Jitter)
	check(c.Ordering == storage.OrderingNone || c.Ordering == storage.OrderingPartition,
		"ORDERING must be none or partition, got %q", c.Ordering)
	check(c.OnDead == storage.DeadSkip || c.OnDead == storage.DeadBlock,
		"ORDERING_ON_DEAD must be skip or block, got %q", c.OnDead)
	check(c.LeaseMode == LeaseAuto || c.LeaseMode == LeaseLock || c.LeaseMode == LeaseStatus,
		"LEASE_MODE must be auto, lock or status, got %q", c.LeaseMode)
	check(c.LeaseMode != LeaseLock || c.Ordering == storage.OrderingNone,
		"LEASE_MODE=lock needs ORDERING=none: an ordered claim must see which keys are at the broker, which only DELIVERING rows show (use auto or status)")
	check(c.NotifyDebounce >= 0, "NOTIFY_DEBOUNCE must not be negative, got %s", c.NotifyDebounce)
	return errors.Join(errs...)
}
