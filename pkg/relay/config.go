package relay

import (
	"log/slog"
	"math"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
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
	LeaseTimeoutDefault       = storage.LeaseTimeoutDefault
	ShutdownTimeoutDefault    = 30 * time.Second
	RetryMaxAttemptsDefault   = storage.MaxAttemptsDefault
	RetryBaseDelayDefault     = time.Second
	RetryMaxDelayDefault      = 24 * time.Hour
	RetryJitterDefault        = 0.15
	NotifyDebounceDefault     = 5 * time.Millisecond
	OrderingDefault           = storage.OrderingNone
	OnDeadDefault             = storage.DeadSkip
	LeaseModeDefault          = LeaseAuto
	// HeldMaxDefault: a held claim's transaction holds vacuum's horizon
	// back, so a batch the broker takes longer over becomes a lease.
	HeldMaxDefault = time.Second
	// LeaseTimeoutMin is the shortest LeaseTimeout, the reaper's too.
	LeaseTimeoutMin = storage.LeaseTimeoutMin
)

// Values that turn a setting off, for the settings where off is a choice
// and zero is their default.
const (
	// NoJitter as RetryPolicy.Jitter spreads no wait.
	NoJitter = -1
	// NoDebounce as Config.NotifyDebounce wakes the engine for every
	// notification.
	NoDebounce time.Duration = -1
)

// Config tunes an Engine. Zero fields take their XxxDefault (RelayID,
// which has none, is required); Validate names the fields that cannot work.
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
	// SweepInterval is how often a claim also reads again behind where
	// the relay's claims have reached: MySQL's cursor floor, PostgreSQL's
	// claim frontier (storage.ClaimParams.SweepInterval says where that
	// bounds a wait and where it is only a defence in depth).
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
	// HeldMax is how long a held claim keeps its transaction open while its
	// batch is at the broker (at most a third of LeaseTimeout); a batch
	// still there then becomes a lease, renewed as any other.
	HeldMax time.Duration
	// DeleteDelivered deletes a delivered event's row in the settle
	// statement instead of marking it DELIVERED (DELIVERED_RETENTION=0).
	// The Observer still counts it as delivered.
	DeleteDelivered bool
	// NotifyDebounce is the least time between two wakeups by insert
	// notifications, so a burst of inserts makes a few full claims instead
	// of many tiny ones. NoDebounce wakes the engine for every
	// notification.
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
	// Jitter spreads each wait by up to ±Jitter of itself (0 to 1);
	// NoJitter spreads none.
	Jitter float64
}

// Delay returns the wait before retrying an event that has now failed
// attempts times; r in [0,1) picks the point in the jitter range.
func (p RetryPolicy) Delay(attempts int, r float64) time.Duration {
	exp := math.Min(float64(max(attempts-1, 0)), 62)
	jitter := max(p.Jitter, 0) // NoJitter
	d := float64(p.BaseDelay) * math.Pow(2, exp) * (1 + jitter*(2*r-1))
	// The cap applies after the jitter: RETRY_MAX_DELAY is a promise.
	return time.Duration(max(math.Min(d, float64(p.MaxDelay)), 0))
}

func (c Config) withDefaults() Config {
	fieldcheck.Default(&c.BatchSize, BatchSizeDefault)
	fieldcheck.Default(&c.MaxBatchBytes, MaxBatchBytesDefault)
	fieldcheck.Default(&c.PollInterval, PollIntervalDefault)
	fieldcheck.Default(&c.SweepInterval, SweepIntervalDefault)
	fieldcheck.Default(&c.MaxInFlightBatches, MaxInFlightBatchesDefault)
	fieldcheck.Default(&c.LeaseTimeout, LeaseTimeoutDefault)
	fieldcheck.Default(&c.ShutdownTimeout, ShutdownTimeoutDefault)
	fieldcheck.Default(&c.Retry.MaxAttempts, RetryMaxAttemptsDefault)
	fieldcheck.Default(&c.Retry.BaseDelay, RetryBaseDelayDefault)
	fieldcheck.Default(&c.Retry.MaxDelay, RetryMaxDelayDefault)
	fieldcheck.Default(&c.Retry.Jitter, RetryJitterDefault)
	fieldcheck.Default(&c.NotifyDebounce, NotifyDebounceDefault)
	fieldcheck.Default(&c.Ordering, OrderingDefault)
	fieldcheck.Default(&c.OnDead, OnDeadDefault)
	fieldcheck.Default(&c.LeaseMode, LeaseModeDefault)
	fieldcheck.Default(&c.HeldMax, HeldMaxDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	return c
}

// ConfigError is a Config (or CaptureConfig) field that cannot work; New,
// NewCapture and Validate return one for each such field (joined), which
// errors.As finds.
type ConfigError = fieldcheck.FieldError

// Validate reports every field that cannot work, by its Go name, as
// *ConfigError. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	d := c.withDefaults()
	v := fieldcheck.Check("relay")
	v.Expect("RelayID", c.RelayID != "", "must not be empty")
	v.Expect("BatchSize", d.BatchSize > 0, "must be positive, got %d", c.BatchSize)
	v.Expect("MaxBatchBytes", d.MaxBatchBytes > 0, "must be positive, got %d", c.MaxBatchBytes)
	v.Expect("PollInterval", d.PollInterval > 0, "must be positive, got %s", c.PollInterval)
	v.Expect("SweepInterval", d.SweepInterval > 0, "must be positive, got %s", c.SweepInterval)
	v.Expect("MaxInFlightBatches", d.MaxInFlightBatches > 0, "must be positive, got %d", c.MaxInFlightBatches)
	v.Expect("LeaseTimeout", d.LeaseTimeout >= LeaseTimeoutMin, "must be at least %s, got %s", LeaseTimeoutMin, c.LeaseTimeout)
	v.Expect("ShutdownTimeout", d.ShutdownTimeout > 0, "must be positive, got %s", c.ShutdownTimeout)
	v.Expect("Retry.MaxAttempts", d.Retry.MaxAttempts > 0, "must be positive, got %d", c.Retry.MaxAttempts)
	v.Expect("Retry.BaseDelay", d.Retry.BaseDelay > 0, "must be positive, got %s", c.Retry.BaseDelay)
	v.Expect("Retry.MaxDelay", d.Retry.MaxDelay >= d.Retry.BaseDelay, "(%s) must not be below %s (%s)",
		d.Retry.MaxDelay, fieldcheck.Field("Retry.BaseDelay"), d.Retry.BaseDelay)
	v.Expect("Retry.Jitter", d.Retry.Jitter == NoJitter || d.Retry.Jitter >= 0 && d.Retry.Jitter <= 1,
		"must be between 0 and 1, got %g", c.Retry.Jitter)
	v.Expect("Ordering", d.Ordering == storage.OrderingNone || d.Ordering == storage.OrderingPartition,
		"must be none or partition, got %q", c.Ordering)
	v.Expect("OnDead", d.OnDead == storage.DeadSkip || d.OnDead == storage.DeadBlock,
		"must be skip or block, got %q", c.OnDead)
	v.Expect("LeaseMode", d.LeaseMode == LeaseAuto || d.LeaseMode == LeaseLock || d.LeaseMode == LeaseStatus,
		"must be auto, lock or status, got %q", c.LeaseMode)
	v.Expect("LeaseMode", d.LeaseMode != LeaseLock || d.Ordering == storage.OrderingNone,
		"lock needs %s none: an ordered claim must see which keys are at the broker, which only DELIVERING rows show (use auto or status)",
		fieldcheck.Field("Ordering"))
	v.Expect("HeldMax", d.HeldMax > 0, "must be positive, got %s", c.HeldMax)
	v.Expect("NotifyDebounce", d.NotifyDebounce == NoDebounce || d.NotifyDebounce >= 0,
		"must not be negative, got %s", c.NotifyDebounce)
	return v.Err()
}
