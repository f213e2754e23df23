package pgtest

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

// Set puts one row into a state with SQL assignments such as
// "status = 'DEAD', updated_at = now() - interval '8 days'".
func (tb *Table) Set(t testing.TB, id uuid.UUID, assignments string) {
	t.Helper()
	if n := tb.Exec(t, "UPDATE {{table}} SET "+assignments+" WHERE event_id = $1", id); n != 1 {
		t.Fatalf("pgtest: set %s: changed %d rows", id, n)
	}
}

// Snapshot is every row's full state, as JSON by event id.
type Snapshot map[uuid.UUID]string

// Snapshot reads every row's full state, to prove that an operation changed
// nothing (or exactly what it should).
func (tb *Table) Snapshot(t testing.TB) Snapshot {
	t.Helper()
	rows, err := tb.Pool().Query(context.Background(), "SELECT event_id, row_to_json(t)::text FROM "+tb.Name+" AS t")
	if err != nil {
		t.Fatalf("pgtest: snapshot: %v", err)
	}
	defer rows.Close()
	out := Snapshot{}
	for rows.Next() {
		var id uuid.UUID
		var js string
		if err := rows.Scan(&id, &js); err != nil {
			t.Fatalf("pgtest: snapshot: %v", err)
		}
		out[id] = js
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("pgtest: snapshot: %v", err)
	}
	return out
}

// RequireUnchanged fails the test when after differs from before in any
// row; what names the operation in between.
func RequireUnchanged(t testing.TB, what string, before, after Snapshot) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%s: %d rows before, %d after", what, len(before), len(after))
	}
	for id, b := range before {
		if after[id] != b {
			t.Fatalf("%s changed row %s:\nbefore %s\nafter  %s", what, id, b, after[id])
		}
	}
}

// PruneRows are rows of every status, old and recent, for prune tests. The
// PENDING and DELIVERING rows (Live) carry old created_at, updated_at and
// delivered_at values, and the recent DELIVERED and DEAD rows old values in
// the columns prune must not look at, so only the right column and status
// decide what goes.
type PruneRows struct {
	// OldDelivered were delivered 8 days ago, NewDelivered 6 days ago.
	OldDelivered, NewDelivered []uuid.UUID
	// OldDead died 8 days ago, NewDead 1 day ago.
	OldDead, NewDead []uuid.UUID
	// Live: PENDING, PENDING retrying, DELIVERING with an old lease,
	// DELIVERING with a fresh one.
	Live []uuid.UUID
}

// NewPruneRows inserts PruneRows with oldDelivered old DELIVERED rows.
func NewPruneRows(t testing.TB, tb *Table, oldDelivered int) PruneRows {
	t.Helper()
	const old = "now() - interval '30 days'"
	f := PruneRows{
		OldDelivered: tb.InsertN(t, oldDelivered, "old.delivered"),
		NewDelivered: tb.InsertN(t, 2, "new.delivered"),
		OldDead:      tb.InsertN(t, 3, "old.dead"),
		NewDead:      tb.InsertN(t, 1, "new.dead"),
		Live:         tb.InsertN(t, 4, "live"),
	}
	tb.Exec(t, `UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() - interval '8 days',
		updated_at = now() - interval '8 days' WHERE event_id = ANY($1)`, f.OldDelivered)
	tb.Exec(t, `UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() - interval '6 days',
		updated_at = `+old+`, created_at = `+old+` WHERE event_id = ANY($1)`, f.NewDelivered)
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', updated_at = now() - interval '8 days' WHERE event_id = ANY($1)`, f.OldDead)
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', updated_at = now() - interval '1 day',
		created_at = `+old+`, delivered_at = `+old+` WHERE event_id = ANY($1)`, f.NewDead)
	aged := "created_at = " + old + ", updated_at = " + old + ", delivered_at = " + old
	tb.Set(t, f.Live[0], aged)
	tb.Set(t, f.Live[1], aged+", attempts = 3")
	tb.Set(t, f.Live[2], aged+", status = 'DELIVERING', locked_by = 'r', locked_at = "+old)
	tb.Set(t, f.Live[3], aged+", status = 'DELIVERING', locked_by = 'r', locked_at = now()")
	return f
}

// DeadRows are DEAD rows with different types, errors and times of death,
// and rows in other states that match every retry-dead filter but are not
// DEAD. IDs maps each row's name (see DeadRowNames) to its event id.
type DeadRows struct {
	IDs map[string]uuid.UUID
}

// DeadRowNames names the rows of DeadRows: their type, error and age.
var DeadRowNames = []string{
	"orders-timeout-recent", "orders-nostream-old", "users-timeout-old", "users-toolarge-recent", "users-no-error",
	"orders-pending", "orders-delivered", "orders-delivering",
}

// AllDead names the rows of DeadRows that are DEAD.
var AllDead = DeadRowNames[:5:5]

// NewDeadRows inserts DeadRows.
func NewDeadRows(t testing.TB, tb *Table) DeadRows {
	t.Helper()
	rows := []struct{ typ, status, lastError, diedAgo string }{
		{"orders", "DEAD", "publish: Timeout waiting for ack", "1 hour"},
		{"orders", "DEAD", "no stream for subject orders", "3 days"},
		{"users", "DEAD", "TIMEOUT", "5 days"},
		{"users", "DEAD", "message too large", "10 minutes"},
		{"users", "DEAD", "", "2 days"},
		{"orders", "PENDING", "timeout", "5 minutes"},
		{"orders", "DELIVERED", "timeout", "5 minutes"},
		{"orders", "DELIVERING", "timeout", "5 minutes"},
	}
	f := DeadRows{IDs: map[string]uuid.UUID{}}
	for i, r := range rows {
		id := tb.Insert(t, Event{Type: r.typ})[0]
		var lastErr any
		if r.lastError != "" {
			lastErr = r.lastError
		}
		tb.Exec(t, `UPDATE {{table}} SET status = $2, last_error = $3, attempts = 25,
			updated_at = now() - $4::interval, available_at = now() - interval '7 days',
			locked_by = CASE WHEN $2 = 'DELIVERING' THEN 'r' END,
			locked_at = CASE WHEN $2 = 'DELIVERING' THEN now() END,
			delivered_at = CASE WHEN $2 = 'DELIVERED' THEN now() END
			WHERE event_id = $1`, id, r.status, lastErr, r.diedAgo)
		f.IDs[DeadRowNames[i]] = id
	}
	return f
}

// Pick returns the event ids of the named rows.
func (f DeadRows) Pick(names ...string) []uuid.UUID {
	ids := make([]uuid.UUID, len(names))
	for i, n := range names {
		ids[i] = f.IDs[n]
	}
	return ids
}
