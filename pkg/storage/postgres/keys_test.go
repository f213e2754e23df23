package postgres_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// Ordered claims start each key at its floor (keys.go): with a snapshot
// held open, the dead entries that every delivered event of a key left in
// key_seq_idx, which the walk through the index steps over at every claim,
// are not read again.
func TestOrderedClaimsStartEachKeyAtItsFloor(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	insertKeyed := func(n int) {
		tb.Exec(t, "INSERT INTO {{table}} (event_type, payload, partition_key) "+
			"SELECT 'keyed', '\\x00', 'k' || (g % 20) FROM generate_series(1, $1) AS g", n)
	}
	insertKeyed(6000)
	p := storage.ClaimParams{RelayID: "r", Limit: 500, Ordering: storage.OrderingPartition, SweepInterval: time.Hour}.WithDefaults()
	holdSnapshot(t)
	for claimAndDeliver(t, s, p) > 0 {
	}
	insertKeyed(20) // one more for each key

	readArgs := s.KeyReadArgs("r", p.Limit)
	keys, claimArgs, err := s.FloorsClaimArgs(ctx, p)
	if err != nil || len(keys) != 20 {
		t.Fatalf("FloorsClaimArgs = %v keys, %v; want the 20 keys, each with a new event", keys, err)
	}
	fromFloors := planBlocks(t, s, s.Query("claim_keys"), readArgs...) +
		planBlocks(t, s, s.Query("claim_ordered_keys_skip"), claimArgs...)
	throughIndex := planBlocks(t, s, s.Query("claim_ordered_skip"),
		"r", p.Limit, "", int64(0), int64(p.RunLimit), int64(math.MaxInt64))
	t.Logf("blocks read: %d from the keys' floors, %d through the index", fromFloors, throughIndex)
	if fromFloors*3 > throughIndex {
		t.Errorf("the claim from the keys' floors read %d blocks, the walk through the index %d: it stepped over the delivered events", fromFloors, throughIndex)
	}
	if n := claimAndDeliver(t, s, p); n != 20 {
		t.Errorf("the next ordered claim took %d events, want the 20 new ones", n)
	}
}

// A row whose transaction took its seq before a later row of its key was
// written, and committed after that one was claimed, lies behind the
// key's floor: the relay still finds it.
func TestOrderedClaimsFindARowCommittedBehindItsKeysFloor(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	p := storage.ClaimParams{RelayID: "r", Limit: 10, Ordering: storage.OrderingPartition, SweepInterval: time.Hour}
	tb.Insert(t, pgtest.Event{Type: "first", PartitionKey: "k"})
	if n := claimAndDeliver(t, s, p); n != 1 {
		t.Fatalf("claimed %d events, want the first", n)
	}

	insertLate, commitLate := lateWriter(t, tb)
	lateID := insertLate("late")
	after := tb.Insert(t, pgtest.Event{Type: "after", PartitionKey: "k"})[0]
	b, err := s.Claim(ctx, p)
	if err != nil || len(b.Events) != 1 || b.Events[0].ID != after {
		t.Fatalf("Claim = %v, %v; want the row written after the open transaction's", b.Events, err)
	}
	deliver(t, s, b)
	commitLate()
	b, err = s.Claim(ctx, p)
	if err != nil || len(b.Events) != 1 || b.Events[0].ID != lateID {
		t.Fatalf("Claim = %v, %v; want the row committed late", b.Events, err)
	}
}

// A DEAD event retried (relay-cli retry-dead) is PENDING again on a key
// at rest (not passed to the claims): the key frontier's read before the
// next claim finds it, as it finds every row written or handed back, and
// wakes the key. Its floor never passed the DEAD event.
func TestOrderedClaimsTakeARetriedEventOfAKeyAtRest(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	p := storage.ClaimParams{RelayID: "r", Limit: 10, RunLimit: 1, Ordering: storage.OrderingPartition, SweepInterval: time.Hour}
	ids := tb.Insert(t, pgtest.Event{Type: "dies", PartitionKey: "k"}, pgtest.Event{Type: "delivered", PartitionKey: "k"})
	claimAndBury(t, s, p, ids[0])
	if n := claimAndDeliver(t, s, p); n != 1 {
		t.Fatalf("claimed %d events, want the key's second (ORDERING_ON_DEAD=skip)", n)
	}
	if n := claimAndDeliver(t, s, p); n != 0 || s.KeyWaits("r", "k") {
		t.Fatalf("claimed %d events, key waiting %v; want none, and the key at rest", n, s.KeyWaits("r", "k"))
	}
	if n, err := s.RetryDead(ctx, storage.RetryDeadParams{}); err != nil || n != 1 {
		t.Fatalf("RetryDead = %d, %v", n, err)
	}
	b, err := s.Claim(ctx, p)
	if got := eventIDs(b.Events); err != nil || !slices.Equal(got, []uuid.UUID{ids[0]}) {
		t.Fatalf("Claim = %v, %v; want the retried event", got, err)
	}
}

// deliver marks b's events delivered.
func deliver(t *testing.T, s *postgres.Store, b storage.Batch) {
	t.Helper()
	if _, err := s.Settle(context.Background(), b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
		t.Fatal(err)
	}
}

// claimAndBury claims with p, which must take the event id alone, and
// sends it to DEAD.
func claimAndBury(t *testing.T, s *postgres.Store, p storage.ClaimParams, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	b, err := s.Claim(ctx, p)
	if err != nil || len(b.Events) != 1 || b.Events[0].ID != id {
		t.Fatalf("Claim = %v, %v; want %s alone", eventIDs(b.Events), err, id)
	}
	if _, err := s.Settle(ctx, b.Lease, storage.Outcome{Failed: []storage.Failure{{ID: id, Error: "no", Dead: true}}}); err != nil {
		t.Fatal(err)
	}
}

// More keys waiting than a relay passes to its claims (10,000): it walks
// the index for a while instead, and the keys that can go still go.
func TestOrderedClaimsWithTooManyKeysWalkTheIndex(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	// 10,500 keys held behind a scheduled first event, met 500 a claim.
	tb.Exec(t, "INSERT INTO {{table}} (event_type, payload, partition_key, available_at) "+
		"SELECT 'held', '\\x00', 'held-' || g, now() + interval '1 hour' FROM generate_series(1, 10500) AS g")
	tb.Exec(t, "INSERT INTO {{table}} (event_type, payload, partition_key) "+
		"SELECT 'held', '\\x00', 'held-' || g FROM generate_series(1, 10500) AS g")
	p := storage.ClaimParams{RelayID: "r", Limit: 500, Ordering: storage.OrderingPartition, SweepInterval: time.Hour}.WithDefaults()
	free := 0
	walking := false
	for round := 0; round < 40 && !walking; round++ {
		free += len(tb.Insert(t, pgtest.Event{Type: "free", PartitionKey: fmt.Sprintf("free-%d", round)}))
		b, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.Events {
			if e.Type != "free" {
				t.Fatalf("claimed %s of key %s, held behind its scheduled first event", e.Type, e.PartitionKey)
			}
		}
		deliver(t, s, b)
		p.After = b.After
		walking = s.WalksTheIndex("r")
	}
	if !walking {
		t.Fatal("with 10,500 keys waiting the relay still passes them to its claims")
	}
	tb.Insert(t, pgtest.Event{Type: "free", PartitionKey: "free-last"})
	free++
	for claimAndDeliver(t, s, p) > 0 {
	}
	if got := tb.Counts(t)[outbox.StatusDelivered]; got != free {
		t.Errorf("%d events delivered, want the %d free ones", got, free)
	}
}

// An event retried from DEAD between the relay's read before a claim and
// the claim itself, unseen by that read: under ORDERING_ON_DEAD=block it
// held its key's later events, and the claim must not let them go first.
// The key's floor stays below a DEAD event, so the claim's walk, in its
// own snapshot, meets it first (the claim leaves it, and so the held
// one, to the next claim: its read has not returned the retried row).
func TestAnOrderedClaimSeesAnEventRetriedAfterItsRead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	p := storage.ClaimParams{RelayID: "r", Limit: 10, RunLimit: 1, Ordering: storage.OrderingPartition,
		OnDead: storage.DeadBlock, SweepInterval: time.Hour}
	ids := tb.Insert(t, pgtest.Event{Type: "dies", PartitionKey: "k"}, pgtest.Event{Type: "held", PartitionKey: "k"})
	claimAndBury(t, s, p, ids[0])
	if n := claimAndDeliver(t, s, p); n != 0 {
		t.Fatalf("claimed %d events behind a DEAD one", n)
	}

	keys, claimArgs, err := s.FloorsClaimArgs(ctx, p)
	if err != nil || !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("FloorsClaimArgs: keys %q, %v; want the held key", keys, err)
	}
	if n, err := s.RetryDead(ctx, storage.RetryDeadParams{}); err != nil || n != 1 {
		t.Fatalf("RetryDead = %d, %v", n, err)
	}
	claimed := runClaimStatement(t, s, s.Query("claim_ordered_keys_block"), claimArgs...)
	if slices.Contains(claimed, uuid.UUID(ids[1])) {
		t.Fatalf("the claim took %v: the held event %s before the retried one %s", claimed, ids[1], ids[0])
	}
	var order []uuid.UUID
	for range 4 {
		order = append(order, claimDelivered(t, s, p)...)
	}
	if want := []uuid.UUID{ids[0], ids[1]}; !slices.Equal(order, want) {
		t.Fatalf("delivered %v, want %v: the retried event, then the held one", order, want)
	}
}

// A transaction that wrote a key's events on both sides of another
// transaction's event, which was claimed and delivered first, and that
// committed after the relay's read before a claim but before the claim
// (the hole `make fuzz` found): the claim's walk sees the later of its
// events above the key's floor, and the earlier one below. The walk takes
// only rows the key frontier has read, so the claim waits for the read
// that lowers the floor, and the transaction's events go in their order.
func TestAnOrderedClaimKeepsTheOrderOfATransactionThatCommitsDuringIt(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	p := storage.ClaimParams{RelayID: "r", Limit: 10, Ordering: storage.OrderingPartition, SweepInterval: time.Hour}
	insertLate, commitLate := lateWriter(t, tb)
	first := insertLate("late-1")
	tb.Insert(t, pgtest.Event{Type: "between", PartitionKey: "k"})
	if n := claimAndDeliver(t, s, p); n != 1 {
		t.Fatalf("claimed %d events, want the one committed between the open transaction's", n)
	}
	if n := claimAndDeliver(t, s, p); n != 0 {
		t.Fatalf("claimed %d events, want none", n)
	}
	second := insertLate("late-2")
	after := tb.Insert(t, pgtest.Event{Type: "after", PartitionKey: "k"})[0]

	keys, claimArgs, err := s.FloorsClaimArgs(ctx, p)
	if err != nil || !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("FloorsClaimArgs: keys %q, %v; want the key of the event after", keys, err)
	}
	commitLate()
	claimed := runClaimStatement(t, s, s.Query("claim_ordered_keys_skip"), claimArgs...)
	if slices.Contains(claimed, uuid.UUID(second)) {
		t.Fatalf("the claim took %v: the transaction's second event (%s) before its first (%s)", claimed, second, first)
	}
	var order []uuid.UUID
	for range 5 {
		order = append(order, claimDelivered(t, s, p)...)
	}
	if want := []uuid.UUID{first, second, after}; !slices.Equal(order, want) {
		t.Fatalf("delivered %v, want %v: the transaction's events in their order, then the one after", order, want)
	}
}

// The same transaction with two relays: relay b claims the transaction's
// earlier event alone (its run cut by RunLimit) before relay a's key
// frontier reads the transaction, while a's floor stands above that
// event. a's key read meets the event DELIVERING and lowers the floor
// below it, so a's walk waits for it instead of taking the later one.
func TestAnOrderedClaimWaitsForAnEventOfItsTransactionAnotherRelayHolds(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	a := storage.ClaimParams{RelayID: "a", Limit: 10, Ordering: storage.OrderingPartition, SweepInterval: time.Hour}
	insertLate, commitLate := lateWriter(t, tb)
	first := insertLate("late-1")
	tb.Insert(t, pgtest.Event{Type: "between", PartitionKey: "k"})
	if n := claimAndDeliver(t, s, a); n != 1 {
		t.Fatalf("relay a claimed %d events, want the one committed between the open transaction's", n)
	}
	if n := claimAndDeliver(t, s, a); n != 0 {
		t.Fatalf("relay a claimed %d events, want none", n)
	}
	second := insertLate("late-2")
	commitLate()
	b := a
	b.RelayID, b.RunLimit = "b", 1
	held, err := s.Claim(ctx, b)
	if err != nil || !slices.Equal(eventIDs(held.Events), []uuid.UUID{first}) {
		t.Fatalf("relay b claimed %v, %v; want the transaction's first event alone", eventIDs(held.Events), err)
	}
	got, err := s.Claim(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(eventIDs(got.Events), second) {
		t.Fatalf("relay a claimed %v: the transaction's second event while relay b holds its first", eventIDs(got.Events))
	}
	deliver(t, s, held)
	if ids := claimDelivered(t, s, a); !slices.Equal(ids, []uuid.UUID{second}) {
		t.Fatalf("once the first was delivered relay a claimed %v, want the second", ids)
	}
}

// lateWriter begins a transaction that inserts events of key k, one at a
// time, and stays open until commit: a producer whose transaction runs
// across other transactions' commits and the relay's claims.
func lateWriter(t *testing.T, tb *pgtest.Table) (insert func(typ string) uuid.UUID, commit func()) {
	t.Helper()
	ctx := context.Background()
	late, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = late.Rollback(ctx) })
	insert = func(typ string) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		if err := late.QueryRow(ctx, "INSERT INTO "+tb.Name+" (event_type, payload, partition_key) VALUES ($1, '\\x00', 'k') RETURNING event_id", typ).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	commit = func() {
		t.Helper()
		if err := late.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return insert, commit
}

// runClaimStatement runs a claim statement with args, as a claim whose
// arguments were worked out earlier, in a transaction it commits, and
// returns the ids it claimed.
func runClaimStatement(t *testing.T, s *postgres.Store, query string, args ...any) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	var claimed []uuid.UUID
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := vals[0].([16]byte); ok {
			claimed = append(claimed, id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return claimed
}
