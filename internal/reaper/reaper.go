// Package reaper takes back leases that relays abandoned: rows left
// DELIVERING by a relay that crashed, hung or lost its database connection
// go back to PENDING with one more attempt counted, or DEAD once that
// reaches the attempt limit. Any number of reapers can share a table.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
)

// Defaults for Config.
const (
	IntervalDefault  = 10 * time.Second
	BatchSizeDefault = 1000
)

// Config tunes a Reaper.
type Config struct {
	// Interval is the time between passes (REAPER_INTERVAL).
	Interval time.Duration
	// LeaseTimeout is the age at which a lease counts as abandoned
	// (LEASE_TIMEOUT).
	LeaseTimeout time.Duration
	// BatchSize bounds the rows one statement changes (REAP_BATCH_SIZE).
	BatchSize int
	// MaxAttempts is the attempt count that sends a row DEAD
	// (RETRY_MAX_ATTEMPTS).
	MaxAttempts int
	// Logger receives the reaper's logs; nil discards them.
	Logger *slog.Logger
	// Observer is told of every reap statement; nil observes nothing.
	Observer Observer
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("REAPER_INTERVAL must be positive, got %s", c.Interval))
	}
	if c.LeaseTimeout <= 0 {
		errs = append(errs, fmt.Errorf("LEASE_TIMEOUT must be positive, got %s", c.LeaseTimeout))
	}
	if c.BatchSize <= 0 {
		errs = append(errs, fmt.Errorf("REAP_BATCH_SIZE must be positive, got %d", c.BatchSize))
	}
	if c.MaxAttempts <= 0 {
		errs = append(errs, fmt.Errorf("RETRY_MAX_ATTEMPTS must be positive, got %d", c.MaxAttempts))
	}
	return errors.Join(errs...)
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
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
