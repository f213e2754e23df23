// Package retention removes the outbox rows nobody needs any more, in the
// relay's background: DELIVERED rows past DELIVERED_RETENTION and DEAD rows
// past DEAD_RETENTION, a small batch at a time with a pause between
// batches, so that claims never wait behind it. On a time-partitioned table
// (a storage.Partitioner whose table is partitioned) the driver instead
// creates partitions ahead and drops whole expired ones, which is why the
// loop runs on such a table even when nothing is to be deleted.
//
// One relay of a table does the work at a time: each cycle runs under the
// table's retention lock (storage.RetentionLocker) and is skipped by relays that
// do not get it. It never touches PENDING or DELIVERING rows: pruning
// refuses them, and partition maintenance keeps every partition that holds
// one.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Defaults for Config.
const (
	IntervalDefault = time.Minute
	// BatchSizeDefault rows per DELETE: a short transaction, a few
	// milliseconds of locks on rows nobody else wants.
	BatchSizeDefault = 1000
	// PauseDefault between two batches leaves the database to the claims.
	PauseDefault = 20 * time.Millisecond
	// FirstDelayDefault is how soon after start the first cycle runs.
	FirstDelayDefault = 2 * time.Second
	// PartitionAheadDayDefault and PartitionAheadHourDefault are how far
	// ahead a table partitioned by day or by hour gets its partitions.
	PartitionAheadDayDefault  = 3 * 24 * time.Hour
	PartitionAheadHourDefault = 12 * time.Hour
)

// repeatLogEvery bounds how often one failure repeated cycle after cycle
// is logged as an error.
const repeatLogEvery = time.Hour

// Forever is a retention that keeps rows forever (the variable unset).
const Forever time.Duration = -1

// Config says what to remove and how often. Zero fields take their
// XxxDefault; Validate names the fields that cannot work. The retentions
// are what to remove, not a tuning with a default: zero is an age like
// any other (remove at once), and Forever keeps the rows.
type Config struct {
	// Delivered and Dead are how long DELIVERED rows (by delivered_at)
	// and DEAD rows (by updated_at, when they died) are kept; negative
	// (Forever) keeps them.
	Delivered time.Duration
	Dead      time.Duration
	// Interval is the time between two cycles.
	Interval time.Duration
	// FirstDelay is the time from Run's start to the first cycle.
	FirstDelay time.Duration
	// BatchSize bounds the rows one DELETE removes; Pause is waited
	// between two.
	BatchSize int
	Pause     time.Duration
	// PartitionAhead is how far ahead partitions must exist on a
	// partitioned table; zero: PartitionAheadDayDefault or
	// PartitionAheadHourDefault, as the table is partitioned.
	PartitionAhead time.Duration
	Logger         *slog.Logger
	// Observer is told of every row removed and every partition
	// maintenance; nil observes nothing.
	Observer Observer
}

// Enabled reports whether any rows are to be removed.
func (c Config) Enabled() bool { return c.Delivered >= 0 || c.Dead >= 0 }

func (c Config) withDefaults() Config {
	fieldcheck.Default(&c.Interval, IntervalDefault)
	fieldcheck.Default(&c.FirstDelay, FirstDelayDefault)
	fieldcheck.Default(&c.BatchSize, BatchSizeDefault)
	fieldcheck.Default(&c.Pause, PauseDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	return c
}

// Validate reports every field that cannot work, by its Go name. Zero
// fields are valid: they take their defaults.
func (c Config) Validate() error {
	v := fieldcheck.Check("retention")
	v.Expect("Interval", c.Interval >= 0, "must be positive, got %s", c.Interval)
	v.Expect("FirstDelay", c.FirstDelay >= 0, "must be positive, got %s", c.FirstDelay)
	v.Expect("BatchSize", c.BatchSize >= 0, "must be positive, got %d", c.BatchSize)
	v.Expect("Pause", c.Pause >= 0, "must be positive, got %s", c.Pause)
	v.Expect("PartitionAhead", c.PartitionAhead >= 0, "must be positive, got %s", c.PartitionAhead)
	return v.Err()
}

// Store is what retention needs of the table; a storage that is also a
// storage.RetentionLocker or storage.Partitioner is used as one.
type Store interface {
	Prune(ctx context.Context, p storage.PruneParams) (storage.PruneResult, error)
}

// Runner runs the retention cycles of one table.
type Runner struct {
	cfg   Config
	store Store
	log   *slog.Logger
	obs   Observer
}

// New returns a Runner for store.
func New(cfg Config, store Store) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Runner{cfg: cfg, store: store, log: cfg.Logger, obs: cfg.Observer}, nil
}

// Needed reports whether a Runner has anything to do on store: rows to
// remove, or a storage that may hold a partitioned table.
func Needed(cfg Config, store Store) bool {
	_, partitions := store.(storage.Partitioner)
	return cfg.Enabled() || partitions
}

// Report is what one cycle did.
type Report struct {
	// Skipped: another relay held the table's retention lock.
	Skipped bool
	// Partitioning is the table's ("day", "hour"), or "" when it is not
	// partitioned; Partitions is then what maintenance did.
	Partitioning string
	Partitions   storage.PartitionReport
	// Deleted counts the rows removed, by status, whichever way.
	Deleted map[outbox.Status]int64
}

// Run runs a cycle FirstDelay after it starts and then every Interval,
// until ctx ends. A failed cycle is logged and the next one tries again.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTimer(r.cfg.FirstDelay)
	defer t.Stop()
	// The same failure every cycle (a role that may not maintain
	// partitions, say) is logged as an error once an hour, at debug in
	// between.
	var lastErr string
	var lastLogged time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep, err := r.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			level := slog.LevelError
			if err.Error() == lastErr && time.Since(lastLogged) < repeatLogEvery {
				level = slog.LevelDebug
			} else {
				lastErr, lastLogged = err.Error(), time.Now()
			}
			r.log.Log(ctx, level, "retention cycle failed; trying again at the next (the same error is logged again at most hourly)",
				"error", err, "deleted_delivered", rep.Deleted[outbox.StatusDelivered],
				"deleted_dead", rep.Deleted[outbox.StatusDead], "next_in", r.cfg.Interval)
		default:
			lastErr = ""
		}
		t.Reset(r.cfg.Interval)
	}
}

// RunOnce runs one cycle and logs what it removed.
func (r *Runner) RunOnce(ctx context.Context) (Report, error) {
	rep := Report{Deleted: map[outbox.Status]int64{}}
	p, _ := r.store.(storage.Partitioner)
	if p != nil {
		var err error
		if rep.Partitioning, err = p.Partitioning(ctx); err != nil {
			return rep, fmt.Errorf("retention: %w", err)
		}
	}
	if rep.Partitioning == "" && !r.cfg.Enabled() {
		return rep, nil
	}
	began := time.Now()
	cycle := func(ctx context.Context) error {
		if rep.Partitioning != "" {
			return r.maintainPartitions(ctx, p, &rep)
		}
		return r.prune(ctx, &rep)
	}
	var err error
	if lock, ok := r.store.(storage.RetentionLocker); ok {
		var ran bool
		ran, err = lock.WithRetentionLock(ctx, cycle)
		rep.Skipped = !ran && err == nil
	} else {
		err = cycle(ctx)
	}
	if rep.Skipped {
		r.log.Debug("retention: another relay holds the table's retention lock; skipping this cycle")
		return rep, nil
	}
	if err == nil {
		r.logCycle(rep, time.Since(began))
	}
	return rep, err
}

// prune deletes expired DELIVERED and DEAD rows in batches.
func (r *Runner) prune(ctx context.Context, rep *Report) error {
	for _, c := range []struct {
		status outbox.Status
		keep   time.Duration
	}{{outbox.StatusDelivered, r.cfg.Delivered}, {outbox.StatusDead, r.cfg.Dead}} {
		if c.keep < 0 {
			continue
		}
		var counted int64
		res, err := r.store.Prune(ctx, storage.PruneParams{
			Status: c.status, OlderThan: c.keep, BatchSize: r.cfg.BatchSize, Pause: r.cfg.Pause,
			Progress: func(deleted int64) {
				// Counted batch by batch, so the metric moves during a
				// long first cycle and nothing is lost when one fails.
				r.deleted(ctx, rep, c.status, deleted-counted)
				counted = deleted
			},
		})
		r.deleted(ctx, rep, c.status, res.Deleted-counted)
		if err != nil {
			return fmt.Errorf("retention of %s rows: %w", c.status, err)
		}
	}
	return nil
}

func (r *Runner) deleted(ctx context.Context, rep *Report, status outbox.Status, n int64) {
	if n <= 0 {
		return
	}
	rep.Deleted[status] += n
	r.obs.Deleted(ctx, status, n)
}

// maintainPartitions has the driver create partitions ahead and drop
// expired ones.
func (r *Runner) maintainPartitions(ctx context.Context, p storage.Partitioner, rep *Report) error {
	ahead := r.cfg.PartitionAhead
	if ahead == 0 {
		ahead = PartitionAheadDayDefault
		if rep.Partitioning == "hour" {
			ahead = PartitionAheadHourDefault
		}
	}
	pr, err := p.MaintainPartitions(ctx, storage.PartitionPolicy{
		Ahead: ahead, DeliveredRetention: r.cfg.Delivered, DeadRetention: r.cfg.Dead,
	})
	rep.Partitions = pr
	for status, n := range pr.DroppedRows {
		r.deleted(ctx, rep, outbox.Status(status), n)
	}
	r.obs.PartitionsMaintained(ctx, pr)
	if err != nil {
		return fmt.Errorf("retention: partition maintenance: %w", err)
	}
	return nil
}

// logCycle says what a cycle removed: at info when it changed something,
// at debug when not, and a warning for every expired partition kept.
func (r *Runner) logCycle(rep Report, took time.Duration) {
	attrs := []any{
		"deleted_delivered", rep.Deleted[outbox.StatusDelivered],
		"deleted_dead", rep.Deleted[outbox.StatusDead],
		"took", took.Round(time.Millisecond).String(),
	}
	changed := rep.Deleted[outbox.StatusDelivered]+rep.Deleted[outbox.StatusDead] > 0
	if rep.Partitioning != "" {
		attrs = append(attrs, "partitioning", rep.Partitioning,
			"partitions_created", rep.Partitions.Created, "partitions_dropped", rep.Partitions.Dropped)
		changed = changed || len(rep.Partitions.Created)+len(rep.Partitions.Dropped) > 0
		for _, k := range rep.Partitions.Kept {
			r.log.Warn("retention: an expired partition is kept", "partition", k.Name, "reason", k.Reason)
		}
	}
	if changed {
		r.log.Info("retention cycle", attrs...)
	} else {
		r.log.Debug("retention cycle: nothing to remove", attrs...)
	}
}
