package storagetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Retention: the pieces the relay's retention loop is made of.

// testPrunePausesBetweenBatches: a prune's pause comes between batches and
// ends with ctx, and what was deleted before is reported.
func testPrunePausesBetweenBatches(t *testing.T, h Harness) {
	tb := h.New(t)
	newPruneRows(t, tb, 7)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := tb.Storage().Prune(pctx, storage.PruneParams{Status: outbox.StatusDead, Pause: -1}); err == nil {
		t.Error("Prune accepted a negative pause")
	}
	res, err := tb.Storage().Prune(pctx, storage.PruneParams{
		Status: outbox.StatusDelivered, OlderThan: 7 * day, BatchSize: 3,
		// An hour's pause: only the cancellation can end it.
		Pause:    time.Hour,
		Progress: func(int64) { cancel() },
	})
	if !errors.Is(err, context.Canceled) || res.Deleted != 3 || res.Batches != 1 {
		t.Fatalf("Prune cancelled in its pause = %+v, %v; want the first batch's 3 rows and context.Canceled", res, err)
	}
	// A batch that comes back short ends the prune without a pause.
	res = prune(t, tb, storage.PruneParams{Status: outbox.StatusDead, OlderThan: 7 * day, Pause: time.Hour})
	if res.Deleted != 3 {
		t.Errorf("Prune DEAD = %+v, want 3 rows", res)
	}
}

// testRetentionLockIsExclusive: one session of a table holds the retention
// lock at a time; another table's lock is its own.
func testRetentionLockIsExclusive(t *testing.T, h Harness) {
	tb := h.New(t)
	first, ok := tb.Storage().(storage.RetentionLocker)
	if !ok {
		t.Skip("the driver offers no storage.RetentionLocker")
	}
	second := openSecond(t, tb).(storage.RetentionLocker)
	other := h.New(t).Storage().(storage.RetentionLocker)

	var inner, elsewhere bool
	ran, err := first.WithRetentionLock(ctx, func(ctx context.Context) error {
		var err error
		if inner, err = second.WithRetentionLock(ctx, func(context.Context) error {
			t.Error("a second session ran while the first held the lock")
			return nil
		}); err != nil {
			return err
		}
		elsewhere, err = other.WithRetentionLock(ctx, func(context.Context) error { return nil })
		return err
	})
	if err != nil || !ran {
		t.Fatalf("first WithRetentionLock = %v, %v; want it to run", ran, err)
	}
	if inner {
		t.Error("the second session took the lock the first held")
	}
	if !elsewhere {
		t.Error("another table's retention lock was taken too")
	}
	// Released: the second session gets it now, and fn's error comes back.
	boom := errors.New("boom")
	ran, err = second.WithRetentionLock(ctx, func(context.Context) error { return boom })
	if !ran || !errors.Is(err, boom) {
		t.Errorf("second WithRetentionLock after release = %v, %v; want it to run and return fn's error", ran, err)
	}
	ran, err = first.WithRetentionLock(ctx, func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Errorf("the lock was not released after fn's error: %v, %v", ran, err)
	}
}
