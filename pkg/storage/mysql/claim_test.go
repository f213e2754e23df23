package mysql_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql/mysqltest"
)

// Claims in write order: what the conformance suite checks on every
// driver, seen here on MariaDB's own terms (its transactions).

// The case: transaction B begins first and stamps its event with
// its start (as an application that takes "now" when its work begins
// does), then waits; A writes an event of the same key and commits; then B
// writes and commits. A was written first, so an ordered claim publishes A
// before B, whatever created_at says.
func TestOrderedClaimKeepsWriteOrderWhenTheEarlierTransactionWritesLater(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	b, err := tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Rollback() }()
	var bStart time.Time
	if err := b.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&bStart); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // A's created_at is later than B's, by the server's clock

	a := tb.Insert(t, mysqltest.Event{PartitionKey: "order-7", Type: "a"})[0] // its own transaction, committed

	bID := uuid.Must(uuid.NewV7())
	if _, err := b.ExecContext(ctx, "INSERT INTO "+tb.Name+" (event_id, event_type, partition_key, payload, created_at) VALUES (?, 'b', 'order-7', 'x', ?)",
		bID[:], bStart.Format("2006-01-02 15:04:05.000000")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	var aCreated, bCreated time.Time
	if err := tb.Store.DB().QueryRowContext(ctx, "SELECT (SELECT created_at FROM "+tb.Name+" WHERE event_id = ?), (SELECT created_at FROM "+tb.Name+" WHERE event_id = ?)",
		a[:], bID[:]).Scan(&aCreated, &bCreated); err != nil {
		t.Fatal(err)
	}
	if !bCreated.Before(aCreated) {
		t.Fatalf("created_at of B %s is not before A's %s: the case is not set up", bCreated, aCreated)
	}

	for _, p := range []storage.ClaimParams{
		{RelayID: "ordered", Limit: 10, Ordering: storage.OrderingPartition},
		{RelayID: "unordered", Limit: 10},
	} {
		batch, err := tb.Store.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := eventIDs(batch.Events), []uuid.UUID{a, bID}; !slices.Equal(got, want) {
			t.Errorf("ordering %q claimed %v, want A then B %v", p.Ordering, got, want)
		}
		if _, err := tb.Store.Release(ctx, storage.SettleParams{Lease: batch.Lease, IDs: eventIDs(batch.Events)}); err != nil {
			t.Fatal(err)
		}
	}

	// B's event alone is not claimable while A's is at the broker.
	first, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "ordered", Limit: 1, Ordering: storage.OrderingPartition})
	if err != nil || len(first.Events) != 1 || first.Events[0].ID != a {
		t.Fatalf("ordered claim of one = %v, %v; want A", eventIDs(first.Events), err)
	}
	if next, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "ordered", Limit: 10, Ordering: storage.OrderingPartition}); err != nil || len(next.Events) != 0 {
		t.Fatalf("ordered claim while A is DELIVERING = %v, %v; want nothing", eventIDs(next.Events), err)
	}
}
