package postgres_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
)

// A fresh PENDING event holds its key only while the claims backfill it:
// otherwise the log delivers it, in order, itself.
func TestHeldKeysCountsFreshEventsOnlyDuringABackfill(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	tb.Insert(t, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "j"})
	last, err := tb.Store.LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, err := tb.Store.HeldKeys(ctx, storage.HeldKeysParams{Keys: []string{"k", "j"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 0 {
		t.Fatalf("fresh events held keys outside a backfill: %v", held)
	}
	held, err = tb.Store.HeldKeys(ctx, storage.HeldKeysParams{Keys: []string{"k", "j", "none"}, Backfill: last})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 2 || held["k"] != last-2 || held["j"] != last {
		t.Fatalf("during a backfill up to %d: held %v, want k at %d and j at %d", last, held, last-2, last)
	}
	left, err := tb.Store.FreshLeft(ctx, last)
	if err != nil || !left {
		t.Fatalf("FreshLeft(%d) = %v, %v; want true", last, left, err)
	}
	if left, err := tb.Store.FreshLeft(ctx, last-3); err != nil || left {
		t.Fatalf("FreshLeft below every row = %v, %v; want false", left, err)
	}
}
