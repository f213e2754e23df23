package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
)

// A held claim's settle finds each row by its address, whatever the
// statistics say. On a table never analysed, with the backlog written by one
// transaction (one created_at), the planner took the batch's created_at
// range for a single row and read the whole backlog once per row of the
// batch: seconds per settle (found by the chaos tests).
func TestHeldSettleFindsRowsByAddressWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 3000, "e") // one statement: one created_at
	var (
		addrs   []pgtype.TID
		ids     [][16]byte
		created time.Time
	)
	err := tb.Store.Pool().QueryRow(ctx, "SELECT array_agg(ctid), array_agg(event_id), min(created_at) FROM (SELECT ctid, event_id, created_at FROM "+tb.Name+" ORDER BY seq LIMIT 200) AS b").
		Scan(&addrs, &ids, &created)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	err = pgx.BeginFunc(ctx, tb.Store.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, tb.Store.Query("claim_plan"), "force_generic_plan"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, tb.Store.Query("held_plan")); err != nil {
			return err
		}
		// A custom plan, as the first executions of a prepared statement get.
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+tb.Store.Query("held_delivered"),
			addrs, ids, created, created)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plan.WriteString(strings.Join(lines, "\n"))
		if err != nil {
			return err
		}
		return tx.Rollback(ctx)
	})
	if err != nil && err != pgx.ErrTxClosed {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "Tid Scan") || strings.Contains(plan.String(), "created_idx") {
		t.Fatalf("the settle does not find its rows by address:\n%s", plan.String())
	}
}
