package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The admin operations' behaviour is storagetest's; what is left here is
// PostgreSQL's own: query plans and the NOTIFY channel.

// explain returns the plan of one of the embedded queries for tb, with
// sequential scans priced out: a "Seq Scan" left in the plan means no index
// can answer the query.
func explain(t *testing.T, tb *pgtest.Table, file string, args ...any) string {
	t.Helper()
	text := tb.Store.Query(strings.TrimSuffix(file, ".sql"))
	if text == "" {
		t.Fatalf("no statement %s", file)
	}
	var plan strings.Builder
	err := pgx.BeginFunc(ctx, tb.Store.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+text, args...)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plan.WriteString(strings.Join(lines, "\n"))
		return err
	})
	if err != nil {
		t.Fatalf("explain %s: %v", file, err)
	}
	return plan.String()
}

func TestAdminQueriesCanUseThePartialIndexes(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 10, "e")
	cases := []struct {
		file  string
		args  []any
		index []string // each must appear in the plan
	}{
		{"admin_backlog.sql", nil, []string{"_dead_idx"}},
		// The exact count of DELIVERED rows ($1 true) reads them all, in the
		// table or an index: the console asks for an estimate.
		{"admin_stats_counts.sql", []any{false}, []string{"_delivering_idx", "_late_idx", "_created_idx"}},
		{"admin_stats_types.sql", []any{10}, []string{"_frontier_idx"}},
		{"admin_stats_leases.sql", nil, []string{"_delivering_idx"}},
		{"admin_prune_delivered.sql", []any{int64(1), 10}, []string{"_late_idx", "_created_idx"}},
		{"admin_prune_delivered_count.sql", []any{int64(1)}, []string{"_late_idx", "_created_idx"}},
		{"admin_prune_dead.sql", []any{int64(1), 10}, []string{"_dead_idx"}},
		{"admin_prune_dead_count.sql", []any{int64(1)}, []string{"_dead_idx"}},
		{"admin_retry_dead.sql", []any{nil, "e", nil, nil, nil, nil, nil, nil}, []string{"_dead_idx"}},
		{"admin_retry_dead_count.sql", []any{nil, nil, time.Now(), nil, nil, nil, nil, nil}, []string{"_dead_idx"}},
		{"admin_delivery_rate.sql", nil, []string{"_late_idx", "_created_idx"}},
	}
	for _, c := range cases {
		plan := explain(t, tb, c.file, c.args...)
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s needs a sequential scan of the table:\n%s", c.file, plan)
		}
		for _, idx := range c.index {
			if !strings.Contains(plan, idx) {
				t.Errorf("%s does not use an index matching %q:\n%s", c.file, idx, plan)
			}
		}
	}
}

func TestRetryDeadNotifiesRelays(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := pgtest.NewDeadRows(t, tb)
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{tb.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	// A dry run and a retry that matches nothing must stay quiet.
	if _, err := tb.Store.RetryDead(ctx, storage.RetryDeadParams{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Store.RetryDead(ctx, storage.RetryDeadParams{DeadFilter: storage.DeadFilter{EventType: "none"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Store.RetryDead(ctx, storage.RetryDeadParams{DeadFilter: storage.DeadFilter{IDs: f.Pick("orders-nostream-old")}}); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no notification on %q after retry-dead: %v", tb.Name, err)
	}
	if n.Channel != tb.Name {
		t.Errorf("notified channel %q, want %q", n.Channel, tb.Name)
	}
	// Only the retry that moved rows notified: nothing else is queued.
	quiet, cancelQuiet := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelQuiet()
	if extra, err := conn.WaitForNotification(quiet); err == nil {
		t.Errorf("a second notification arrived: %+v", extra)
	}
}

// explainOrdered is explain for a statement built in Go, with sequential
// scans, bitmap scans and sorts priced out: a "Seq Scan" or "Sort" left in
// the plan means no index can return the rows in the statement's order.
// (On a test-sized table the planner would rightly prefer to sort a few
// rows; on millions it must not have to.)
func explainOrdered(t *testing.T, tb *pgtest.Table, query string, args ...any) string {
	t.Helper()
	var plan strings.Builder
	err := pgx.BeginFunc(ctx, tb.Store.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+query, args...)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plan.WriteString(strings.Join(lines, "\n"))
		return err
	})
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	return plan.String()
}

// Every page of the console's list is an index range: the newest (or
// oldest) rows, or those after a cursor, come off created_idx or
// key_written_idx in order, with no sort of the whole selection.
func TestListCanUseTheIndexes(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 10, "e")
	rows, err := tb.Store.List(ctx, storage.ListParams{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	cursor := storage.CursorOf(rows[4])
	cases := []struct {
		name  string
		p     storage.ListParams
		index string
	}{
		{"newest", storage.ListParams{Limit: 50}, "_created_idx"},
		{"oldest", storage.ListParams{Limit: 50, OldestFirst: true}, "_created_idx"},
		{"after a cursor", storage.ListParams{Limit: 50, After: &cursor}, "_created_idx"},
		{"oldest after a cursor", storage.ListParams{Limit: 50, After: &cursor, OldestFirst: true}, "_created_idx"},
		{"time range", storage.ListParams{Limit: 50, CreatedFrom: time.Now().Add(-time.Hour), CreatedBefore: time.Now()}, "_created_idx"},
		{"type", storage.ListParams{Limit: 50, EventType: "e"}, "_created_idx"},
		{"key", storage.ListParams{Limit: 50, PartitionKey: "k"}, "_key_written_idx"},
		{"key after a cursor", storage.ListParams{Limit: 50, PartitionKey: "k", After: &cursor}, "_key_written_idx"},
		{"key oldest after a cursor", storage.ListParams{Limit: 50, PartitionKey: "k", After: &cursor, OldestFirst: true}, "_key_written_idx"},
		{"DELIVERED", storage.ListParams{Limit: 50, Status: "DELIVERED"}, "_created_idx"},
	}
	for _, c := range cases {
		query, args := tb.Store.ListQuery(c.p)
		plan := explainOrdered(t, tb, query, args...)
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, c.index) {
			t.Errorf("List %s does not read %s:\n%s", c.name, c.index, plan)
		}
		if strings.Contains(plan, "Sort") {
			t.Errorf("List %s sorts its selection:\n%s", c.name, plan)
		}
	}
}

// After ANALYZE the planner's statistics give the table's size, and the
// DELIVERED estimate is exact on a table nobody writes to meanwhile.
func TestStatsEstimatesDeliveredFromStatistics(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 10, "e")
	for _, id := range ids[:7] {
		tb.Set(t, id, "status = 'DELIVERED', delivered_at = now()")
	}
	tb.Set(t, ids[7], "status = 'DEAD'")
	tb.Exec(t, "ANALYZE {{table}}")
	st, err := tb.Store.Stats(ctx, storage.StatsParams{EstimateDelivered: true})
	if err != nil {
		t.Fatal(err)
	}
	if !st.DeliveredEstimated || st.Delivered != 7 || st.Pending() != 2 || st.Dead != 1 {
		t.Errorf("Stats = delivered %d (estimated %v), pending %d, dead %d; want an estimate of 7, 2, 1",
			st.Delivered, st.DeliveredEstimated, st.Pending(), st.Dead)
	}
}
