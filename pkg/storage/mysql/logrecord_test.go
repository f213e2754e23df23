package mysql_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The log reader's side of the store (storage.LogRecorder) and the claims
// beside it (ClaimParams.Fresh), as pkg/storage/postgres/logrecord_test.go
// checks them on PostgreSQL.

// seqOf returns the seq of each of ids.
func seqOf(t *testing.T, tb *mysqltest.Table, ids ...uuid.UUID) []int64 {
	t.Helper()
	seqs := make([]int64, len(ids))
	for i, id := range ids {
		if err := tb.Store.DB().QueryRowContext(ctx, "SELECT seq FROM "+tb.Name+" WHERE event_id = ?", id[:]).Scan(&seqs[i]); err != nil {
			t.Fatalf("seq of %s: %v", id, err)
		}
	}
	return seqs
}

// rowState is what the record tests look at in a row.
type rowState struct {
	status                          string
	attempts                        int
	lastError                       string
	dueAgain                        bool
	availableAt, updatedAt, created time.Time
}

func stateOf(t *testing.T, tb *mysqltest.Table, id uuid.UUID) (rowState, bool) {
	t.Helper()
	var r rowState
	var lastError []byte
	err := tb.Store.DB().QueryRowContext(ctx, "SELECT status, attempts, COALESCE(last_error, ''), available_at > created_at, available_at, updated_at, created_at FROM "+
		tb.Name+" WHERE event_id = ?", id[:]).Scan(&r.status, &r.attempts, &lastError, &r.dueAgain, &r.availableAt, &r.updatedAt, &r.created)
	if err != nil {
		if strings.Contains(err.Error(), "no rows") {
			return r, false
		}
		t.Fatal(err)
	}
	r.lastError = string(lastError)
	return r, true
}

// Every record changes only rows still PENDING and fresh: a row a claim
// took, or one handed to the claims, is the claims'.
func TestRecordsChangeOnlyFreshPendingRows(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	ids := tb.Insert(t, make([]mysqltest.Event, 8)...)
	claimed, dueAgain := ids[6], ids[7]
	tb.Exec(t, "UPDATE {{table}} SET status = 'DELIVERING', locked_by = 'a claim', locked_at = UTC_TIMESTAMP(6) WHERE event_id = ?", claimed[:])
	tb.Exec(t, "UPDATE {{table}} SET available_at = created_at + INTERVAL 1 MICROSECOND WHERE event_id = ?", dueAgain[:])
	others := []uuid.UUID{claimed, dueAgain}

	if n, err := tb.Store.Record(ctx, storage.Outcome{Delivered: append([]uuid.UUID{ids[0]}, others...)}); err != nil || n.Delivered != 1 {
		t.Fatalf("Record = %d, %v; want 1 (the others are the claims')", n.Delivered, err)
	}
	if r, _ := stateOf(t, tb, ids[0]); r.status != "DELIVERED" {
		t.Errorf("recorded row is %s, want DELIVERED", r.status)
	}
	if n, err := tb.Store.Record(ctx, storage.Outcome{Delivered: append([]uuid.UUID{ids[1]}, others...), Delete: true}); err != nil || n.Delivered != 1 {
		t.Fatalf("Record with Delete = %d, %v; want 1", n.Delivered, err)
	}
	if _, found := stateOf(t, tb, ids[1]); found {
		t.Errorf("row recorded with Delete is still there")
	}
	n, err := tb.Store.Record(ctx, storage.Outcome{Failed: []storage.Failure{
		{ID: ids[2], Error: "later", Delay: time.Hour},
		{ID: ids[3], Error: "at once"},
		{ID: ids[4], Error: "bad", Dead: true},
		{ID: claimed, Error: "x"}, {ID: dueAgain, Error: "x"},
	}})
	if err != nil || n != (storage.Settled{Failed: 3}) {
		t.Fatalf("Record of failures = %+v, %v; want 3 failed", n, err)
	}
	now := conformanceNow(t, tb)
	if r, _ := stateOf(t, tb, ids[2]); r.status != "PENDING" || r.attempts != 1 || r.lastError != "later" || !r.dueAgain ||
		r.availableAt.Sub(now) < 59*time.Minute {
		t.Errorf("failed row with a delay = %+v, want PENDING, 1 attempt, due again in an hour", r)
	}
	if r, _ := stateOf(t, tb, ids[3]); r.status != "PENDING" || r.attempts != 1 || !r.dueAgain || r.availableAt.After(now) {
		t.Errorf("failed row without a delay = %+v, want PENDING and due again now", r)
	}
	if r, _ := stateOf(t, tb, ids[4]); r.status != "DEAD" || r.attempts != 1 || r.lastError != "bad" {
		t.Errorf("dead row = %+v, want DEAD", r)
	}
	before, _ := stateOf(t, tb, ids[5])
	time.Sleep(2 * time.Millisecond)
	if n, err := tb.Store.Record(ctx, storage.Outcome{Released: append([]uuid.UUID{ids[5], ids[2]}, others...)}); err != nil || n.Released != 1 {
		t.Fatalf("Record = %d, %v; want 1", n.Released, err)
	}
	if r, _ := stateOf(t, tb, ids[5]); r.status != "PENDING" || r.attempts != 0 || !r.dueAgain || !r.updatedAt.After(before.updatedAt) ||
		r.availableAt.After(conformanceNow(t, tb)) {
		t.Errorf("deferred row = %+v, want PENDING, due again now, updated_at moved", r)
	}
	if r, _ := stateOf(t, tb, claimed); r.status != "DELIVERING" || r.attempts != 0 {
		t.Errorf("the claimed row changed: %+v", r)
	}
	if r, _ := stateOf(t, tb, dueAgain); r.status != "PENDING" || r.attempts != 0 {
		t.Errorf("the row due again changed: %+v", r)
	}
}

func conformanceNow(t *testing.T, tb *mysqltest.Table) time.Time {
	t.Helper()
	return mysqltest.Conformance(tb).Now(t)
}

// Beside the log, a claim takes fresh rows only up to the backfill, and
// every row that is due again; without ToLog, all of them.
func TestClaimsBesideTheLogLeaveItsFreshRows(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	ids := tb.Insert(t, make([]mysqltest.Event, 4)...)
	if n, err := tb.Store.Record(ctx, storage.Outcome{Failed: []storage.Failure{{ID: ids[3], Error: "again"}}}); err != nil || n.Failed != 1 {
		t.Fatalf("Record = %d, %v", n.Failed, err)
	}
	backfill := seqOf(t, tb, ids[0])[0]
	for _, ordering := range []storage.Ordering{storage.OrderingNone, storage.OrderingPartition} {
		p := storage.ClaimParams{RelayID: "r", Limit: 10, Ordering: ordering, Fresh: storage.FreshEvents{ToLog: true, BackfillTo: backfill}}
		b, err := tb.Store.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := eventIDs(b.Events), []uuid.UUID{ids[0], ids[3]}; !slices.Equal(got, want) {
			t.Fatalf("ordering %s: a claim beside the log took %v, want the backfill's and the retry %v", ordering, got, want)
		}
		if _, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Released: eventIDs(b.Events)}); err != nil {
			t.Fatal(err)
		}
		// Released, the backfill's row is due again: no backfill needed.
		p.Fresh.BackfillTo = 0
		if b, err = tb.Store.Claim(ctx, p); err != nil {
			t.Fatal(err)
		}
		if got, want := eventIDs(b.Events), []uuid.UUID{ids[0], ids[3]}; !slices.Equal(got, want) {
			t.Fatalf("ordering %s: after a release the claim took %v, want the released %v", ordering, got, want)
		}
		if _, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Released: eventIDs(b.Events)}); err != nil {
			t.Fatal(err)
		}
		// Restore ids[0] as fresh for the next ordering.
		tb.Exec(t, "UPDATE {{table}} SET available_at = created_at WHERE event_id = ?", ids[0][:])
	}
	b, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "poll", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids) {
		t.Fatalf("a claim without a log reader took %v, want all %v", got, ids)
	}
}

// Under ordering, Fresh applies to a key's head and to its run: a key
// whose head is the log's is skipped; a head that came back is claimed
// with its run as far as the run is the claims' (postgres'
// TestOrderedClaimsLeaveTheLogsEventsInARun).
func TestOrderedClaimsLeaveTheLogsEventsInARun(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	k := mysqltest.Event{PartitionKey: "k"}
	ids := tb.Insert(t, k, k, k, k, mysqltest.Event{PartitionKey: "j"})
	if n, err := tb.Store.Record(ctx, storage.Outcome{Failed: []storage.Failure{{ID: ids[0], Error: "try again"}}}); err != nil || n.Failed != 1 {
		t.Fatalf("Record = %d, %v", n.Failed, err)
	}
	if n, err := tb.Store.Record(ctx, storage.Outcome{Released: ids[1:2]}); err != nil || n.Released != 1 {
		t.Fatalf("Record = %d, %v", n.Released, err)
	}
	p := storage.ClaimParams{RelayID: "r", Limit: 10, Ordering: storage.OrderingPartition, Fresh: storage.FreshEvents{ToLog: true}}
	b, err := tb.Store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[:2]) {
		t.Fatalf("the claim took %v, want the 2 of key k the log handed back %v (the rest are the log's)", got, ids[:2])
	}
	if _, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Delivered: ids[:2]}); err != nil {
		t.Fatal(err)
	}
	p.Fresh.BackfillTo = seqOf(t, tb, ids[2])[0]
	if b, err = tb.Store.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[2:3]) {
		t.Fatalf("a backfill up to the third event took %v, want the third alone %v", got, ids[2:3])
	}
}

// Beside the log, the claims take the fresh rows past the backfill only
// while no stream holds the table's log lock, and a claim's transaction
// holds the lock's row shared: a stream that starts waits for it.
func TestClaimsBesideTheLogTakeFreshRowsWhileNoStreamHoldsTheLogLock(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	for _, ordering := range []storage.Ordering{storage.OrderingNone, storage.OrderingPartition} {
		t.Run(string(ordering), func(t *testing.T) {
			ids := tb.Insert(t, mysqltest.Event{PartitionKey: "a" + string(ordering)}, mysqltest.Event{PartitionKey: "b" + string(ordering)},
				mysqltest.Event{PartitionKey: "c" + string(ordering)})
			p := storage.ClaimParams{RelayID: "r" + string(ordering), Limit: 10, Ordering: ordering,
				Fresh: storage.FreshEvents{ToLog: true, BackfillTo: seqOf(t, tb, ids[0])[0], WhenUnlocked: true}}
			unlock, err := tb.Store.LockLog(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b, err := tb.Store.Claim(ctx, p)
			if err != nil {
				unlock()
				t.Fatal(err)
			}
			if got := eventIDs(b.Events); !slices.Equal(got, ids[:1]) {
				unlock()
				t.Fatalf("while a stream holds the log lock the claim took %v, want the backfill's %v", got, ids[:1])
			}
			unlock()
			unlock() // twice is once
			if b, err = tb.Store.Claim(ctx, p); err != nil {
				t.Fatal(err)
			}
			if got := eventIDs(b.Events); !slices.Equal(got, ids[1:]) {
				t.Fatalf("with no stream the claim took %v, want the other 2 %v", got, ids[1:])
			}
		})
	}
}

// The log lock outlives the context it was taken with: a relay's
// shutdown cancels it while the stream's last batches are still at the
// broker, and the lock must hold until they are recorded (unlock).
// (database/sql rolled the lock's transaction back at the cancel, and the
// randomized test saw another relay claim events the stopping one had
// published.)
func TestLockLogOutlivesItsContext(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	ids := tb.Insert(t, mysqltest.Event{})
	lockCtx, cancel := context.WithCancel(ctx)
	unlock, err := tb.Store.LockLog(lockCtx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cancel()
	p := storage.ClaimParams{RelayID: "r", Limit: 10, Fresh: storage.FreshEvents{ToLog: true, WhenUnlocked: true}}
	b, err := tb.Store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) > 0 {
		t.Fatalf("with the lock's context ended the claim took %v: the lock was gone", eventIDs(b.Events))
	}
	unlock()
	if b, err = tb.Store.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids) {
		t.Fatalf("after unlock the claim took %v, want %v", got, ids)
	}
}

// LockLog waits for a claim that holds the log lock's row shared, and a
// claim that tries the row while a stream waits for it takes no fresh row
// past its backfill: a try never jumps a waiting stream.
func TestLockLogWaitsForAClaimHoldingItShared(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	// A claim's transaction, held open after its fresh_lock.sql.
	claimTx, err := tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = claimTx.Rollback() }()
	var id int
	if err := claimTx.QueryRowContext(ctx, "SELECT id FROM "+tb.Name+"_log_lock WHERE id = 1 LOCK IN SHARE MODE SKIP LOCKED").Scan(&id); err != nil {
		t.Fatalf("the claim's try of the log lock: %v", err)
	}
	locked := make(chan func(), 1)
	lockCtx, cancel := context.WithCancel(ctx)
	go func() {
		unlock, err := tb.Store.LockLog(lockCtx)
		if err != nil {
			if lockCtx.Err() == nil {
				t.Errorf("LockLog: %v", err)
			}
			unlock = func() {}
		}
		locked <- unlock
	}()
	var lockHeld func()
	t.Cleanup(func() {
		// Whatever failed, the lock goes before the database is dropped.
		cancel()
		_ = claimTx.Rollback()
		if lockHeld == nil {
			lockHeld = <-locked
		}
		lockHeld()
	})
	select {
	case lockHeld = <-locked:
		t.Fatal("LockLog took the lock beside a claim holding it shared")
	case <-time.After(500 * time.Millisecond):
	}
	// The stream waits: a new claim's try skips the row.
	ids := tb.Insert(t, mysqltest.Event{}, mysqltest.Event{})
	p := storage.ClaimParams{RelayID: "r", Limit: 10, Fresh: storage.FreshEvents{ToLog: true, BackfillTo: seqOf(t, tb, ids[0])[0], WhenUnlocked: true}}
	b, err := tb.Store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[:1]) {
		t.Fatalf("beside a stream waiting for the log lock a claim took %v, want the backfill's %v", got, ids[:1])
	}
	if err := claimTx.Rollback(); err != nil {
		t.Fatal(err)
	}
	select {
	case lockHeld = <-locked:
	case <-time.After(10 * time.Second):
		t.Fatal("LockLog still waits after the claim ended")
	}
}

// Visible waits for the transaction of a seq the binlog named to commit.
func TestVisibleWaitsForTheTransactionToCommit(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	committed := seqOf(t, tb, tb.Insert(t, mysqltest.Event{})...)[0]
	tx, err := tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+tb.Name+" (event_type, payload) VALUES ('open', 'x')"); err != nil {
		t.Fatal(err)
	}
	var open int64
	if err := tx.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&open); err != nil {
		t.Fatal(err)
	}
	// LastSeq counts the open transaction's seq too: MAX(seq) would not.
	if last, err := tb.Store.LastSeq(ctx); err != nil || last < open {
		t.Fatalf("LastSeq = %d, %v; want at least the open transaction's seq %d", last, err, open)
	}
	type answer struct {
		visible bool
		err     error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := tb.Store.Visible(ctx, []string{strconv.FormatInt(committed, 10), strconv.FormatInt(open, 10)})
		done <- answer{v, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("Visible answered %v, %v before the transaction committed", a.visible, a.err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		if !a.visible || a.err != nil {
			t.Fatalf("Visible after the commit = %v, %v; want true", a.visible, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Visible still waits after the commit")
	}
	if _, err := tb.Store.Visible(ctx, []string{"12", "x7"}); err == nil || !strings.Contains(err.Error(), `"x7"`) {
		t.Fatalf("Visible of a bad id: %v, want an error naming it", err)
	}
	if v, err := tb.Store.Visible(ctx, nil); err != nil || !v {
		t.Fatalf("Visible of nothing = %v, %v", v, err)
	}
}

// LastSeq is the highest seq handed out, 0 on an empty table.
func TestLastSeq(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	if last, err := tb.Store.LastSeq(ctx); err != nil || last != 0 {
		t.Fatalf("LastSeq of an empty table = %d, %v; want 0", last, err)
	}
	seqs := seqOf(t, tb, tb.Insert(t, mysqltest.Event{}, mysqltest.Event{}, mysqltest.Event{})...)
	if last, err := tb.Store.LastSeq(ctx); err != nil || last != seqs[2] {
		t.Fatalf("LastSeq = %d, %v; want %d", last, err, seqs[2])
	}
}

// A fresh PENDING event blocks its key only while the claims backfill
// it; an event due again, DELIVERING, or DEAD under block always does.
func TestBlockedKeys(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	ev := func(k string) mysqltest.Event { return mysqltest.Event{PartitionKey: k} }
	ids := tb.Insert(t, ev("k"), ev("k"), ev("j"), ev("busy"), ev("busy"), ev("retry"), ev("dead"), ev("dead"), ev("a "), ev("a"))
	seqs := seqOf(t, tb, ids...)
	last, err := tb.Store.LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tb.Exec(t, "UPDATE {{table}} SET status = 'DELIVERING', locked_by = 'r', locked_at = UTC_TIMESTAMP(6) WHERE event_id = ?", ids[4][:])
	if _, err := tb.Store.Record(ctx, storage.Outcome{Failed: []storage.Failure{{ID: ids[5], Error: "e"}, {ID: ids[6], Dead: true}}}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"k", "j", "busy", "retry", "dead", "a", "none"}
	held, err := tb.Store.BlockedKeys(ctx, storage.BlockedKeysParams{Keys: keys, OnDead: storage.DeadSkip})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"busy": seqs[4], "retry": seqs[5]}; !mapsEqual(held, want) {
		t.Fatalf("outside a backfill: held %v, want %v", held, want)
	}
	held, err = tb.Store.BlockedKeys(ctx, storage.BlockedKeysParams{Keys: keys, OnDead: storage.DeadBlock})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"busy": seqs[4], "retry": seqs[5], "dead": seqs[6]}; !mapsEqual(held, want) {
		t.Fatalf("under block: held %v, want %v", held, want)
	}
	held, err = tb.Store.BlockedKeys(ctx, storage.BlockedKeysParams{Keys: keys, OnDead: storage.DeadSkip, Backfill: last})
	if err != nil {
		t.Fatal(err)
	}
	// "a " and "a" are two keys, compared bytewise.
	want := map[string]int64{"k": seqs[0], "j": seqs[2], "busy": seqs[3], "retry": seqs[5], "dead": seqs[7], "a": seqs[9]}
	if !mapsEqual(held, want) {
		t.Fatalf("during a backfill up to %d: held %v, want %v", last, held, want)
	}
	if held, err := tb.Store.BlockedKeys(ctx, storage.BlockedKeysParams{}); err != nil || len(held) != 0 {
		t.Fatalf("BlockedKeys of no keys = %v, %v", held, err)
	}

	left, err := tb.Store.FreshLeft(ctx, last)
	if err != nil || !left {
		t.Fatalf("FreshLeft(%d) = %v, %v; want true", last, left, err)
	}
	if left, err := tb.Store.FreshLeft(ctx, seqs[0]-1); err != nil || left {
		t.Fatalf("FreshLeft below every row = %v, %v; want false", left, err)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A backfill's rows may lie behind the claims' position (claims beside a
// stream that left them to it moved on): a claim with a backfill sweeps,
// and so does the first claim that may take every fresh row after claims
// that left some, though the next sweep is an hour away.
func TestClaimsBesideTheLogFindFreshRowsBehindTheirPosition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fresh storage.FreshEvents
	}{
		{"a backfill", storage.FreshEvents{ToLog: true}},
		{"no stream", storage.FreshEvents{ToLog: true, WhenUnlocked: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := mysqltest.New(t)
			ids := tb.Insert(t, mysqltest.Event{})
			unlock, err := tb.Store.LockLog(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer unlock()
			p := storage.ClaimParams{RelayID: "r", Limit: 10, SweepInterval: time.Hour, Fresh: storage.FreshEvents{ToLog: true, WhenUnlocked: true}}
			// Claims beside the stream take nothing and end at their clock.
			for range 6 {
				if b, err := tb.Store.Claim(ctx, p); err != nil || len(b.Events) != 0 {
					t.Fatalf("beside the stream a claim took %v, %v", eventIDs(b.Events), err)
				}
				time.Sleep(60 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			unlock()
			p.Fresh = tc.fresh
			if tc.name == "a backfill" {
				p.Fresh.BackfillTo = seqOf(t, tb, ids[0])[0]
			}
			b, err := tb.Store.Claim(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := eventIDs(b.Events); !slices.Equal(got, ids) {
				t.Fatalf("the claim took %v, want the fresh row behind its position %v", got, ids)
			}
		})
	}
}

// Migrate adds the log lock's table and row to a table that lacks them.
func TestMigrateAddsTheLogLock(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	tb.Exec(t, "DROP TABLE "+tb.Name+"_log_lock")
	if _, err := tb.Store.LockLog(ctx); err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("LockLog without the table: %v, want an error saying to migrate", err)
	}
	res, err := tb.Store.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"row openoutbox_events_log_lock", "table openoutbox_events_log_lock"}; !slices.Equal(res.Created, want) {
		t.Fatalf("Migrate created %v, want %v", res.Created, want)
	}
	tb.Exec(t, "DELETE FROM "+tb.Name+"_log_lock")
	if res, err = tb.Store.Migrate(ctx, storage.MigrateOptions{}); err != nil || !slices.Equal(res.Created, []string{"row openoutbox_events_log_lock"}) {
		t.Fatalf("Migrate of a table without the row created %v, %v", res.Created, err)
	}
	unlock, err := tb.Store.LockLog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if c := tb.Counts(t); c[outbox.StatusPending] != 0 {
		t.Fatalf("counts %v", c)
	}
}

// Without a log reader the claim's statement is today's: no condition on
// fresh rows.
func TestClaimsWithoutALogReaderLeaveTheStatementAlone(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	query, args := tb.Store.ClaimStatement(storage.ClaimParams{RelayID: "r", Limit: 5})
	if strings.Contains(query, "created_at OR seq") || strings.Contains(query, "{{") || len(args) != 1 {
		t.Fatalf("claim statement without Fresh: %s %v", query, args)
	}
}
