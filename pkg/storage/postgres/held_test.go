package postgres_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage"
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
		table   uint32
		created time.Time
	)
	err := tb.Store.Pool().QueryRow(ctx, "SELECT array_agg(ctid), min(tableoid::bigint), min(created_at) FROM (SELECT ctid, tableoid, created_at FROM "+tb.Name+" ORDER BY seq LIMIT 200) AS b").
		Scan(&addrs, &table, &created)
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
			addrs, table, created, created)
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

// A held settle finds its rows by address within each row's own table. On
// a partitioned table every partition numbers its rows from (0,1), so a
// batch spread over two partitions names addresses that, in the other
// partition, hold rows of no batch: here a scheduled event the claim did
// not take, which must stay PENDING.
func TestHeldSettleTakesEachAddressInItsOwnPartition(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	old := tb.InsertN(t, 1, "e")[0]
	tb.Set(t, old, "created_at = now() - interval '1 hour'")
	maintain(t, tb, storage.PartitionPolicy{Ahead: time.Hour})
	// Scheduled events in the current hour's partition, until one lies at
	// old's address in its own.
	var scheduled []uuid.UUID
	for len(scheduled) == 0 || addressOf(t, tb, scheduled[len(scheduled)-1]) != addressOf(t, tb, old) {
		if len(scheduled) == 10 {
			t.Fatalf("no scheduled event at old's address %s", addressOf(t, tb, old))
		}
		scheduled = append(scheduled, tb.Insert(t, pgtest.Event{Type: "e", AvailableIn: time.Hour})[0])
	}
	now := tb.InsertN(t, 1, "e")[0]
	if tableOf(t, tb, old) == tableOf(t, tb, now) || tableOf(t, tb, now) != tableOf(t, tb, scheduled[0]) {
		t.Fatalf("the setup needs old apart from the others: %s, %s, %s",
			tableOf(t, tb, old), tableOf(t, tb, now), tableOf(t, tb, scheduled[0]))
	}

	hb, err := tb.Store.ClaimHeld(ctx, storage.ClaimParams{RelayID: "r", Limit: 10}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(hb.Events); !slices.Equal(got, []uuid.UUID{old, now}) {
		hb.Tx.Abort()
		t.Fatalf("held claim = %v, want %v", got, []uuid.UUID{old, now})
	}
	if err := hb.Tx.Settle(ctx, storage.Outcome{Delivered: []uuid.UUID{old, now}}); err != nil {
		t.Fatal(err)
	}
	want := map[uuid.UUID]string{old: "DELIVERED", now: "DELIVERED"}
	for _, id := range scheduled {
		want[id] = "PENDING"
	}
	for id, w := range want {
		if got := tb.Get(t, id).Status; string(got) != w {
			t.Errorf("%s is %s, want %s", id, got, w)
		}
	}
}

// addressOf reads id's ctid.
func addressOf(t *testing.T, tb *pgtest.Table, id uuid.UUID) string {
	t.Helper()
	var addr string
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT ctid::text FROM "+tb.Name+" WHERE event_id = $1", id).Scan(&addr); err != nil {
		t.Fatal(err)
	}
	return addr
}
