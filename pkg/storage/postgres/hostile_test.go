package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The cases a hostile user found where the claims' argument assumed what
// a row's data or the server did not give it (issue "The promise under
// hostile data and operations"). Each fails on the build before it.

// Case 5: beside the log, an ordered claim of one row split its batch as
// a plain half, 1/2 = 0 for the rows without a key: an unkeyed event due
// again (failed, released) was never claimed while a key waited. Every
// split gives each part a turn.
func TestOrderedClaimsOfOneRowBesideTheLogTakeUnkeyedEventsInTurn(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			tb := pgtest.New(t)
			ctx := context.Background()
			ids := tb.Insert(t, pgtest.Event{}, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"})
			// The log published them all and each came back to the claims.
			for _, id := range ids {
				if n, err := tb.Store.RecordFailed(ctx, storage.RecordFailParams{Failures: []storage.Failure{{ID: id, Error: "try again"}}}); err != nil || n != 1 {
					t.Fatalf("RecordFailed = %d, %v", n, err)
				}
			}
			tb.Exec(t, "UPDATE "+tb.Name+" SET available_at = created_at + interval '1 microsecond'")
			p := storage.ClaimParams{RelayID: "r", Limit: limit, Ordering: storage.OrderingPartition,
				Fresh: storage.FreshEvents{ToLog: true}, SweepInterval: time.Hour}
			unkeyed := false
			for range 4 {
				for _, id := range claimDelivered(t, tb.Store, p) {
					unkeyed = unkeyed || id == ids[0]
				}
			}
			if !unkeyed {
				t.Fatalf("four claims of %d took every keyed event but not the one without a key: %v", limit, tb.Counts(t))
			}
			if c := tb.Counts(t); c[outbox.StatusDelivered] != len(ids) {
				t.Fatalf("counts %v after four claims of %d, want all %d delivered", c, limit, len(ids))
			}
		})
	}
}
