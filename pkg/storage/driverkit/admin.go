package driverkit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// RunRetryDead is the part of RetryDead every driver shares: it checks p,
// then returns count() in a dry run and move() otherwise. Each callback
// runs the driver's statement for p's filter and limit.
func RunRetryDead(p storage.RetryDeadParams, count, move func() (int64, error)) (int64, error) {
	if err := p.Check(); err != nil {
		return 0, err
	}
	if p.DryRun {
		return count()
	}
	return move()
}

// AdminError is how every driver's Admin methods explain err, what being
// what they were doing: an interruption as one (ctx's error, whatever the
// driver saw), a missing table (missing(err), asked only then) as an error
// wrapping storage.ErrTableMissing that says to migrate, and anything else
// as the driver's explain says.
func AdminError(ctx context.Context, what, table, where string, err error,
	missing func(error) bool, explain func(what string, err error) error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	if missing(err) {
		return TableMissing(what, table, where)
	}
	return explain(what, err)
}

// TableMissing is the error for a table that is not in the database, with
// where it was looked for (Server.Location) and how to create it there:
// a STORAGE_URL left unset or misspelt points at the default database, and
// "run relay-cli migrate" without saying where would create the table in
// the wrong one. what, when set, says what was being done.
func TableMissing(what, table, where string) error {
	if what != "" {
		what += ": "
	}
	return fmt.Errorf("%stable %s in %s: %w; run `relay-cli migrate` with STORAGE_URL naming this database, or start the relay with STORAGE_AUTO_MIGRATE=true",
		what, table, where, storage.ErrTableMissing)
}

// AdminStatements runs a driver's own statements, by name, for the Admin
// code drivers share (PruneWith). Each call runs one statement and returns
// a number: the count the statement reads (Count) or the rows it changes
// (Exec). Errors come back explained as the driver's Admin methods explain
// theirs, saying what was being done.
type AdminStatements interface {
	Count(ctx context.Context, what, name string, args ...any) (int64, error)
	Exec(ctx context.Context, what, name string, args ...any) (int64, error)
}

// PruneWith is all of Prune for a driver with four statements:
// admin_prune_delivered and admin_prune_dead delete at most a batch (their
// arguments: the age in microseconds, the batch size), and
// admin_prune_delivered_count and admin_prune_dead_count count what they
// would delete (the age). Which statement runs when, and how a prune is
// batched, is RunPrune's.
func PruneWith(ctx context.Context, st AdminStatements, p storage.PruneParams) (storage.PruneResult, error) {
	// RunPrune refuses other statuses before either callback runs.
	name := "admin_prune_" + strings.ToLower(string(p.Status))
	what := "prune " + string(p.Status) + " rows"
	age := p.OlderThan.Microseconds()
	return RunPrune(ctx, p, func() (int64, error) {
		return st.Count(ctx, what, name+"_count", age)
	}, func(batchSize int) (int64, error) {
		return st.Exec(ctx, what, name, age, batchSize)
	})
}

// RunStats is the part of Stats every driver shares: it checks p and fills
// its defaults, then read takes the snapshot.
func RunStats(p storage.StatsParams, read func(p storage.StatsParams) (storage.Stats, error)) (storage.Stats, error) {
	p, err := p.WithDefaults()
	if err != nil {
		return storage.Stats{}, err
	}
	return read(p)
}

// RunPrune is the part of Prune every driver shares. It checks p (DELIVERED
// or DEAD only, nothing negative) and fills BatchSize's default; then, in a
// dry run, it returns count(); otherwise it calls deleteBatch(BatchSize)
// until a batch deletes fewer rows than that, reporting progress after each
// and waiting p.Pause between two. When ctx ends during a pause, the result
// counts what was deleted before. Each callback runs one statement.
func RunPrune(ctx context.Context, p storage.PruneParams, count func() (int64, error),
	deleteBatch func(batchSize int) (int64, error)) (storage.PruneResult, error) {
	var res storage.PruneResult
	switch {
	case p.Status != outbox.StatusDelivered && p.Status != outbox.StatusDead:
		return res, fmt.Errorf("prune: only DELIVERED and DEAD rows can be pruned, not %q", p.Status)
	case p.OlderThan < 0:
		return res, fmt.Errorf("prune: OlderThan must not be negative, got %s", p.OlderThan)
	case p.BatchSize < 0:
		return res, fmt.Errorf("prune: BatchSize must not be negative, got %d", p.BatchSize)
	case p.Pause < 0:
		return res, fmt.Errorf("prune: Pause must not be negative, got %s", p.Pause)
	}
	if p.BatchSize == 0 {
		p.BatchSize = storage.PruneBatchSizeDefault
	}
	if p.DryRun {
		n, err := count()
		res.Deleted = n
		return res, err
	}
	for {
		n, err := deleteBatch(p.BatchSize)
		if err != nil {
			return res, err
		}
		res.Batches++
		res.Deleted += n
		if p.Progress != nil {
			p.Progress(res.Deleted)
		}
		if n < int64(p.BatchSize) {
			return res, nil
		}
		if err := pause(ctx, p.Pause); err != nil {
			return res, err
		}
	}
}

// pause waits d, or returns ctx's error when ctx ends first.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
