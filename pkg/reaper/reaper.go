// Package reaper takes back leases that relays abandoned: rows left
// DELIVERING by a relay that crashed, hung or lost its database connection
// go back to PENDING with one more attempt counted, or DEAD once that
// reaches the attempt limit. Any number of reapers can share a table.
//
// A program that embeds the relay (pkg/relay) with status leases
// (relay.LeaseStatus, or LeaseAuto where a claim cannot be held) runs a
// Reaper beside the engine, on the same storage and with the engine's
// LeaseTimeout and attempt limit (Config says how); the relay command
// does the same. Held claims (relay.LeaseLock) leave nothing to reap.
// examples/embedded shows both together.
package reaper

import (
	"context"
	"log/slog"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Defaults for Config. The lease timeout and the attempt limit are the
// engine's (storage decides them for both), so that a zero Config reaps
// by the rules a zero relay.Config keeps.
const (
	IntervalDefault     = 10 * time.Second
	BatchSizeDefault    = 1000
	LeaseTimeoutDefault = storage.LeaseTimeoutDefault
	MaxAttemptsDefault  = storage.MaxAttemptsDefault
)

// Config tunes a Reaper. Zero fields take their XxxDefault; Validate names
// the fields that cannot work. LeaseTimeout and MaxAttempts must be the
// engine's.
type Config struct {
	// Interval is the time between passes.
	Interval time.Duration
	// LeaseTimeout is the age at which a lease counts as abandoned; at
	// least storage.LeaseTimeoutMin.
	LeaseTimeout time.Duration
	// BatchSize bounds the rows one statement changes.
	BatchSize int
	// MaxAttempts is the attempt count that sends a row DEAD.
	MaxAttempts int
	// Logger receives the reaper's logs; nil discards them.
	Logger *slog.Logger
	// Observer is told of every reap statement; nil observes nothing.
	Observer Observer
}

func (c Config) withDefaults() Config {
	fieldcheck.Default(&c.Interval, IntervalDefault)
	fieldcheck.Default(&c.LeaseTimeout, LeaseTimeoutDefault)
	fieldcheck.Default(&c.BatchSize, BatchSizeDefault)
	fieldcheck.Default(&c.MaxAttempts, MaxAttemptsDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	return c
}

// ConfigError is a Config field that cannot work; New and Validate
// return one for each such field (joined), which errors.As finds.
type ConfigError = fieldcheck.FieldError

// Validate reports every field that cannot work, by its Go name, as
// *ConfigError. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	d := c.withDefaults()
	v := fieldcheck.Check("reaper")
	v.Expect("Interval", d.Interval > 0, "must be positive, got %s", c.Interval)
	v.Expect("LeaseTimeout", d.LeaseTimeout >= storage.LeaseTimeoutMin, "must be at least %s, got %s", storage.LeaseTimeoutMin, c.LeaseTimeout)
	v.Expect("BatchSize", d.BatchSize > 0, "must be positive, got %d", c.BatchSize)
	v.Expect("MaxAttempts", d.MaxAttempts > 0, "must be positive, got %d", c.MaxAttempts)
	return v.Err()
}

// Reaper periodically takes back expired leases.
type Reaper struct {
	cfg   Config
	store storage.Reaper
	log   *slog.Logger
	obs   Observer
}

// New returns a Reaper, or the configuration's errors.
func New(cfg Config, store storage.Reaper) (*Reaper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Reaper{cfg: cfg, store: store, log: cfg.Logger, obs: cfg.Observer}, nil
}

// Run reaps every Interval until ctx ends.
func (r *Reaper) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("reaping expired leases failed; will retry", "error", err, "retry_in", r.cfg.Interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce takes back every lease that has expired, a batch at a time, and
// returns the totals.
func (r *Reaper) RunOnce(ctx context.Context) (storage.ReapResult, error) {
	var total storage.ReapResult
	for {
		reapCtx, end := r.obs.StartReap(ctx)
		res, err := r.store.Reap(reapCtx, storage.ReapParams{
			LeaseTimeout: r.cfg.LeaseTimeout,
			Limit:        r.cfg.BatchSize,
			MaxAttempts:  r.cfg.MaxAttempts,
		})
		end(res, err)
		total.Requeued += res.Requeued
		total.Dead += res.Dead
		if err != nil {
			return total, err
		}
		if n := res.Requeued + res.Dead; n > 0 {
			r.log.Warn("took back expired leases", "requeued", res.Requeued, "dead", res.Dead,
				"lease_timeout", r.cfg.LeaseTimeout)
		}
		if res.Requeued+res.Dead < r.cfg.BatchSize {
			return total, nil
		}
	}
}
