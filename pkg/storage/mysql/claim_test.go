package mysql_test

import (
	"database/sql"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

// Claims in write order and claims whose cost does not grow with a long
// transaction: what the conformance suite checks on every driver, seen
// here on MariaDB's own terms (its transactions, its ANALYZE).

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
		if _, err := tb.Store.Settle(ctx, batch.Lease, storage.Outcome{Released: eventIDs(batch.Events)}); err != nil {
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

// pagesAccessed runs query under ANALYZE in a transaction it rolls back and
// returns the InnoDB pages the scan of the outbox table touched
// (MariaDB 10.9 or later: r_engine_stats), which counts the index entries
// the scan steps over, the ones purge may not remove as well. The rows
// that a claim returns do not show the work: those it skips are not rows.
func pagesAccessed(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	plan := analyze(t, db, query, args...)
	var doc struct {
		QueryBlock struct {
			NestedLoop []struct {
				Table struct {
					Key          string   `json:"key"`
					UsedKeyParts []string `json:"used_key_parts"`
					EngineStats  *struct {
						PagesAccessed int `json:"pages_accessed"`
					} `json:"r_engine_stats"`
				} `json:"table"`
			} `json:"nested_loop"`
		} `json:"query_block"`
	}
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc.QueryBlock.NestedLoop) != 1 {
		t.Fatalf("ANALYZE answered %s (%v)", plan, err)
	}
	table := doc.QueryBlock.NestedLoop[0].Table
	if table.EngineStats == nil {
		t.Skipf("the server's ANALYZE has no r_engine_stats (MariaDB 10.9 or later): %s", plan)
	}
	t.Logf("%d pages, index %s on %v", table.EngineStats.PagesAccessed, table.Key, table.UsedKeyParts)
	return table.EngineStats.PagesAccessed
}

// analyze runs query under ANALYZE FORMAT=JSON in a transaction it rolls
// back, and returns the plan.
func analyze(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	return analyzeIn(t, db, nil, query, args...)
}

// analyzeIn is analyze in a transaction with opts.
func analyzeIn(t *testing.T, db *sql.DB, opts *sql.TxOptions, query string, args ...any) string {
	t.Helper()
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var plan string
	if err := tx.QueryRowContext(ctx, "ANALYZE FORMAT=JSON "+query, args...).Scan(&plan); err != nil {
		t.Fatalf("ANALYZE: %v", err)
	}
	return plan
}

// totalPagesAccessed runs query under ANALYZE in a transaction it rolls
// back and returns the InnoDB pages every table access in its plan touched
// (MariaDB 10.9 or later), for statements that read more than one table.
//
// It reads without a snapshot (READ UNCOMMITTED), so that the pages count
// the index entries read alone: under a snapshot, every entry on a page
// that a transaction still running (another test's) may have changed
// costs a visit to its row, to judge what the snapshot sees, and those
// visits, as many as the entries written since that transaction began,
// would swamp what is compared.
func totalPagesAccessed(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	plan := analyzeIn(t, db, &sql.TxOptions{Isolation: sql.LevelReadUncommitted}, query, args...)
	var doc any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		t.Fatalf("ANALYZE answered %s (%v)", plan, err)
	}
	total, found := 0, false
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if n, ok := v["pages_accessed"].(float64); ok {
				total += int(n)
				found = true
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	if !found {
		t.Skipf("the server's ANALYZE has no r_engine_stats (MariaDB 10.9 or later): %s", plan)
	}
	return total
}

// While a snapshot older than every claim is open, InnoDB keeps the index
// entries that claims and settles leave behind in the PENDING range. A
// claim that starts at the beginning of the range steps over all of them,
// so each claim costs more than the one before; the claim starts where the
// relay's claims got to instead, and what it reads stays a few batches
// whatever the history.
func TestClaimUnderALongSnapshotReadsABoundedRange(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	snapshot, err := tb.Store.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer snapshot.Close()
	if _, err := snapshot.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = snapshot.ExecContext(ctx, "ROLLBACK") }()

	const (
		history = 4000
		limit   = 100
	)
	for range history / 1000 {
		tb.InsertN(t, 1000, "old")
	}
	p := storage.ClaimParams{RelayID: "relay-1", Limit: limit, SweepInterval: time.Hour}
	for claimed := 0; claimed < history; {
		b, err := tb.Store.Claim(ctx, p)
		if err != nil || len(b.Events) == 0 {
			t.Fatalf("Claim after %d events = %d events, %v", claimed, len(b.Events), err)
		}
		if _, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
			t.Fatal(err)
		}
		claimed += len(b.Events)
	}
	// The backlog, which a relay reads every few seconds, counts from the
	// relay's claim floor too; relay-cli's, with no claims behind it, from
	// the start of the range. Its reads are compared while nothing is
	// pending, and without a snapshot (totalPagesAccessed): both cost
	// visits to clustered records whenever other tests' transactions are
	// running, far more than the entries behind the floor cost an
	// index-only read.
	cli, err := mysql.Open(ctx, tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	query, args := tb.Store.BacklogQuery()
	fromFloor := totalPagesAccessed(t, tb.Store.DB(), query, args...)
	query, args = cli.BacklogQuery()
	fromStart := totalPagesAccessed(t, tb.Store.DB(), query, args...)
	t.Logf("the backlog read %d pages from the claim floor, %d from the start", fromFloor, fromStart)
	if fromFloor*2 > fromStart {
		t.Errorf("the backlog read %d pages from the claim floor and %d from the start: it stepped over the claimed rows", fromFloor, fromStart)
	}
	fresh := tb.InsertN(t, limit, "new")
	if b, err := tb.Store.Backlog(ctx); err != nil || b.PendingNew != limit {
		t.Fatalf("Backlog = %+v, %v; want the %d new rows", b, err, limit)
	}
	if b, err := cli.Backlog(ctx); err != nil || b.PendingNew != limit {
		t.Fatalf("Backlog of a store that claimed nothing = %+v, %v; want the %d new rows", b, err, limit)
	}

	// A claim from the start of the range (what a sweep does, and what
	// every claim did before): it steps over every claimed row's entry.
	query, args = tb.Store.ClaimStatement(storage.ClaimParams{RelayID: "a-new-relay", Limit: limit})
	sweep := pagesAccessed(t, tb.Store.DB(), query, args...)
	query, args = tb.Store.ClaimStatement(p)
	next := pagesAccessed(t, tb.Store.DB(), query, args...)
	if sweep < history {
		t.Fatalf("a claim from the start read %d pages for %d claimed rows behind it: purge was not held back, the test shows nothing", sweep, history)
	}
	// The claim's own rows cost a few pages each (the index, then the row
	// it locks); the entries behind the position, at most 4 claims' worth,
	// about two each. Nothing grows with the 4,000 rows of history.
	if bound := 3*limit + 2*4*limit + 100; next > bound {
		t.Errorf("the relay's next claim read %d pages, want at most %d (a claim from the start read %d)", next, bound, sweep)
	}

	b, err := tb.Store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, fresh) {
		t.Errorf("the next claim took %d events, want the %d new ones in order", len(got), len(fresh))
	}

	// A relay whose claims find nothing (another relay took it all) moves
	// on too: each reached the end of the due rows, which is its clock
	// less a lag of 100 ms.
	time.Sleep(150 * time.Millisecond)
	idle := storage.ClaimParams{RelayID: "relay-2", Limit: limit, SweepInterval: time.Hour}
	for range 4 {
		if b, err := tb.Store.Claim(ctx, idle); err != nil || len(b.Events) != 0 {
			t.Fatalf("Claim of relay-2 = %v, %v; want nothing", eventIDs(b.Events), err)
		}
	}
	query, args = tb.Store.ClaimStatement(idle)
	if pages := pagesAccessed(t, tb.Store.DB(), query, args...); pages > 100 {
		t.Errorf("the next claim of a relay whose claims found nothing read %d pages, want a few", pages)
	}
}

// A producer's transaction that commits after a few of the relay's claims
// went past its row is found by the next claim, without waiting for a
// sweep: the claims start a few claims back.
func TestClaimFindsALateCommitAFewClaimsBack(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	s := tb.Store
	p := storage.ClaimParams{RelayID: "relay-1", Limit: 1, SweepInterval: time.Hour}
	before := tb.InsertN(t, 8, "before")
	for _, id := range before {
		b, err := s.Claim(ctx, p)
		if err != nil || len(b.Events) != 1 || b.Events[0].ID != id {
			t.Fatalf("Claim = %v, %v; want %s", eventIDs(b.Events), err, id)
		}
	}

	w, err := mysql.NewWriter(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Rollback() }()
	late := uuid.Must(uuid.NewV7())
	if err := w.Write(ctx, producer, outbox.Message{ID: late, Type: "late"}); err != nil {
		t.Fatal(err)
	}
	after := tb.InsertN(t, 2, "after")
	for _, id := range after {
		b, err := s.Claim(ctx, p)
		if err != nil || len(b.Events) != 1 || b.Events[0].ID != id {
			t.Fatalf("Claim = %v, %v; want %s (the late row is not committed)", eventIDs(b.Events), err, id)
		}
	}
	if err := producer.Commit(); err != nil {
		t.Fatal(err)
	}
	b, err := s.Claim(ctx, p)
	if err != nil || len(b.Events) != 1 || b.Events[0].ID != late {
		t.Fatalf("the claim after the commit took %v, %v; want the late event %s", eventIDs(b.Events), err, late)
	}
}

// A sweep that comes back full of rows behind the floor does not wait for
// the next interval to take the rest: the next claim goes on from where it
// stopped.
func TestASweepThatComesBackFullGoesOn(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	s := tb.Store
	w, err := mysql.NewWriter(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Rollback() }()
	late := make([]outbox.Message, 5)
	for i := range late {
		late[i] = outbox.Message{ID: uuid.Must(uuid.NewV7()), Type: "late"}
	}
	if err := w.Write(ctx, producer, late...); err != nil {
		t.Fatal(err)
	}
	committed := tb.InsertN(t, 20, "committed")
	const sweep = time.Second
	p := storage.ClaimParams{RelayID: "relay-1", Limit: 2, SweepInterval: sweep}
	var got []uuid.UUID
	for len(got) < len(committed) {
		b, err := s.Claim(ctx, p)
		if err != nil || len(b.Events) == 0 {
			t.Fatalf("Claim after %d events = %v, %v", len(got), eventIDs(b.Events), err)
		}
		got = append(got, eventIDs(b.Events)...)
	}
	if err := producer.Commit(); err != nil {
		t.Fatal(err)
	}

	// Poll until a sweep takes the first two late events; the claims right
	// after it take the rest, well within the interval.
	deadline := time.Now().Add(5 * sweep)
	var b storage.Batch
	for len(b.Events) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no sweep within %s", 5*sweep)
		}
		time.Sleep(10 * time.Millisecond)
		if b, err = s.Claim(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	swept := time.Now()
	got = eventIDs(b.Events)
	for len(got) < len(late) && time.Since(swept) < sweep/2 {
		b, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) == 0 {
			break
		}
		got = append(got, eventIDs(b.Events)...)
	}
	want := make([]uuid.UUID, len(late))
	for i, m := range late {
		want[i] = m.ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the sweep and the claims right after it took %v, want every late event %v", got, want)
	}
}
