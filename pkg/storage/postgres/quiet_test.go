package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/storage"
)

// On a quiet database no other transaction ends while a producer's stays
// open, so no snapshot lists the producer's transaction as running: its id
// is above every ended one's, where a snapshot's list stops. The claims
// must not take such snapshots as evidence that every row up to the
// sequence's last value is visible. Once the transaction commits, its
// event is claimed at once, with no periodic sweep (an hour here). The
// test has a cluster of its own: on the shared server, other tests'
// transactions end all the time and would hide the mistake.
func TestAnOpenTransactionOnAQuietDatabaseHoldsThePositionBack(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	for _, mode := range []struct {
		name string
		held bool
		// ordering and key: ORDERING=partition claims events without a
		// key from the relay's position and keyed ones from what it reads
		// of the keys (keys.go), which moves by the same rules.
		ordering storage.Ordering
		key      string
	}{
		{name: "leased"},
		{name: "held", held: true},
		{name: "ordered, no key", ordering: storage.OrderingPartition},
		{name: "ordered, keyed", ordering: storage.OrderingPartition, key: "k"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
			p := storage.ClaimParams{RelayID: "r", Limit: 10, SweepInterval: time.Hour, Ordering: mode.ordering}
			claim := func() []uuid.UUID {
				if mode.held {
					b, err := tb.Store.ClaimHeld(ctx, p, time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					if len(b.Events) > 0 {
						if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
							t.Fatal(err)
						}
					}
					return eventIDs(b.Events)
				}
				return claimDelivered(t, tb.Store, p)
			}
			tx, err := tb.Store.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var late uuid.UUID
			if err := tx.QueryRow(ctx, "INSERT INTO "+tb.Name+" (event_type, payload, partition_key) VALUES ('late', 'x', nullif($1, '')) RETURNING event_id",
				mode.key).Scan(&late); err != nil {
				t.Fatal(err)
			}
			// The relay polls while the transaction stays open, for longer
			// than its readings of the sequence take to count (a second).
			claims, began := 0, time.Now()
			eventually.True(t, 10*time.Second, func() bool {
				if got := claim(); len(got) > 0 {
					t.Fatalf("claimed %v while the only event's transaction was open", got)
				}
				claims++
				return claims > 20 && time.Since(began) > 2500*time.Millisecond
			}, func() string { return "claims while the transaction is open" })
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var got []uuid.UUID
			eventually.True(t, 5*time.Second, func() bool {
				got = append(got, claim()...)
				return slices.Contains(got, late)
			}, func() string { return "the event claimed after its transaction committed" })
		})
	}
}
