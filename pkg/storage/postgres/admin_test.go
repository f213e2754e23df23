package postgres_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// The admin operations' behaviour is storagetest's; what is left here is
// PostgreSQL's own: query plans and the NOTIFY channel.

// explain returns the plan of one of the embedded queries for tb, with
// sequential scans priced out: a "Seq Scan" left in the plan means no index
// can answer the query.
func explain(t *testing.T, tb *pgtest.Table, file string, args ...any) string {
	t.Helper()
	text, err := os.ReadFile("sql/" + file)
	if err != nil {
		t.Fatal(err)
	}
	table, err := schema.ParseTable(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	err = pgx.BeginFunc(ctx, tb.Store.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+schema.Expand(string(text), table), args...)
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
		{"admin_backlog.sql", nil, []string{"_pending", "_dead_idx"}},
		{"admin_stats_counts.sql", nil, []string{"_delivering_idx", "_delivered_idx"}},
		{"admin_stats_types.sql", []any{10}, []string{"_pending"}},
		{"admin_stats_leases.sql", nil, []string{"_delivering_idx"}},
		{"admin_prune_delivered.sql", []any{int64(1), 10}, []string{"_delivered_idx"}},
		{"admin_prune_delivered_count.sql", []any{int64(1)}, []string{"_delivered_idx"}},
		{"admin_prune_dead.sql", []any{int64(1), 10}, []string{"_dead_idx"}},
		{"admin_prune_dead_count.sql", []any{int64(1)}, []string{"_dead_idx"}},
		{"admin_retry_dead.sql", []any{nil, "e", nil, nil, nil}, []string{"_dead_idx"}},
		{"admin_retry_dead_count.sql", []any{nil, nil, time.Now(), nil, nil}, []string{"_dead_idx"}},
		{"admin_delivery_rate.sql", nil, []string{"_delivered_idx"}},
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
