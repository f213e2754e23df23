package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// ---- helpers ---------------------------------------------------------------

func remaining(t *testing.T, tb *pgtest.Table) []uuid.UUID {
	t.Helper()
	rows, err := tb.Store.Pool().Query(ctx, "SELECT event_id FROM "+tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// sameSet is defined in postgres_test.go.

// ---- Backlog -----------------------------------------------------------------

func TestBacklogOfAnEmptyTable(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	b, err := tb.Store.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b != (storage.Backlog{}) {
		t.Fatalf("Backlog of an empty table = %+v, want zeros", b)
	}
}

func TestBacklogCountsPendingAndDead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 9, "e")
	// Pending: ids[0..2] new (ids[0] the oldest, an hour old), ids[3..4]
	// retrying. ids[5] DELIVERING, ids[6] DELIVERED, ids[7..8] DEAD.
	tb.Set(t, ids[0], "created_at = now() - interval '1 hour'")
	tb.Set(t, ids[3], "attempts = 1")
	tb.Set(t, ids[4], "attempts = 7, available_at = now() + interval '1 hour'")
	tb.Set(t, ids[5], "status = 'DELIVERING', locked_by = 'r', locked_at = now(), created_at = now() - interval '2 hours'")
	tb.Set(t, ids[6], "status = 'DELIVERED', delivered_at = now(), created_at = now() - interval '3 hours'")
	tb.Set(t, ids[7], "status = 'DEAD', attempts = 25")
	tb.Set(t, ids[8], "status = 'DEAD', attempts = 0")

	b, err := tb.Store.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.PendingNew != 3 || b.PendingRetrying != 2 || b.Pending() != 5 || b.Dead != 2 {
		t.Errorf("Backlog = new %d retrying %d dead %d, want 3, 2, 2", b.PendingNew, b.PendingRetrying, b.Dead)
	}
	var oldest time.Time
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT created_at FROM "+tb.Name+" WHERE event_id = $1", ids[0]).Scan(&oldest); err != nil {
		t.Fatal(err)
	}
	if !b.OldestPendingAt.Equal(oldest) {
		t.Errorf("OldestPendingAt = %s, want the oldest PENDING row's %s (older DELIVERING and DELIVERED rows do not count)",
			b.OldestPendingAt, oldest)
	}
	if b.OldestPendingAge < time.Hour || b.OldestPendingAge > time.Hour+clockSlack {
		t.Errorf("OldestPendingAge = %s, want about 1h", b.OldestPendingAge)
	}
}

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

// ---- Stats -------------------------------------------------------------------

func TestStats(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	a := tb.InsertN(t, 3, "type.a")
	b := tb.InsertN(t, 2, "type.b")
	c := tb.InsertN(t, 1, "type.c")
	done := tb.InsertN(t, 4, "done")
	tb.Set(t, a[0], "created_at = now() - interval '10 minutes'")
	tb.Set(t, a[1], "attempts = 2")
	tb.Set(t, b[0], "status = 'DELIVERING', locked_by = 'relay-x', locked_at = now() - interval '90 seconds'")
	tb.Set(t, b[1], "status = 'DELIVERING', locked_by = 'relay-y', locked_at = now()")
	tb.Set(t, c[0], "status = 'DELIVERING', locked_by = 'relay-x', locked_at = now()")
	tb.Set(t, done[0], "status = 'DELIVERED', delivered_at = now() - interval '10 seconds'")
	tb.Set(t, done[1], "status = 'DELIVERED', delivered_at = now() - interval '30 minutes'")
	tb.Set(t, done[2], "status = 'DELIVERED', delivered_at = now() - interval '2 hours'")
	tb.Set(t, done[3], "status = 'DEAD'")

	st, err := tb.Store.Stats(ctx, storage.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if st.PendingNew != 2 || st.PendingRetrying != 1 || st.Delivering != 3 || st.Delivered != 3 || st.Dead != 1 {
		t.Errorf("counts: new %d retrying %d delivering %d delivered %d dead %d, want 2 1 3 3 1",
			st.PendingNew, st.PendingRetrying, st.Delivering, st.Delivered, st.Dead)
	}
	if st.DeliveredLastMinute != 1 || st.DeliveredLastHour != 2 {
		t.Errorf("delivered last minute %d, last hour %d; want 1 and 2", st.DeliveredLastMinute, st.DeliveredLastHour)
	}
	if st.OldestPendingAge < 10*time.Minute || st.OldestPendingAge > 10*time.Minute+clockSlack {
		t.Errorf("OldestPendingAge = %s, want about 10m", st.OldestPendingAge)
	}
	if len(st.TopTypes) != 1 || st.TopTypes[0].EventType != "type.a" || st.TopTypes[0].Pending != 3 {
		t.Errorf("TopTypes = %+v, want only type.a with 3 (type.b and type.c are all DELIVERING)", st.TopTypes)
	}
	wantLeases := []string{"relay-x:2", "relay-y:1"}
	var gotLeases []string
	for _, l := range st.Leases {
		gotLeases = append(gotLeases, l.RelayID+":"+itoa(l.Events))
	}
	if !slices.Equal(gotLeases, wantLeases) {
		t.Errorf("Leases = %v, want %v", gotLeases, wantLeases)
	}
	if l := st.Leases[0]; l.OldestLeaseAge < 90*time.Second || l.OldestLeaseAge > 90*time.Second+clockSlack {
		t.Errorf("relay-x's oldest lease is %s old, want about 90s", l.OldestLeaseAge)
	}
	if !within(st.ObservedAt, time.Now(), clockSlack) {
		t.Errorf("ObservedAt = %s, want about now", st.ObservedAt)
	}
}

func TestStatsTopTypesLimitsAndOrders(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 1, "one")
	tb.InsertN(t, 3, "three")
	tb.InsertN(t, 2, "two")
	st, err := tb.Store.Stats(ctx, storage.StatsParams{TopTypes: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tt := range st.TopTypes {
		got = append(got, tt.EventType+":"+itoa(tt.Pending))
	}
	if want := []string{"three:3", "two:2"}; !slices.Equal(got, want) {
		t.Fatalf("TopTypes = %v, want %v", got, want)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// ---- Prune -------------------------------------------------------------------

func prune(t *testing.T, tb *pgtest.Table, p storage.PruneParams) storage.PruneResult {
	t.Helper()
	res, err := tb.Store.Prune(ctx, p)
	if err != nil {
		t.Fatalf("Prune(%+v): %v", p, err)
	}
	return res
}

func TestPruneDryRunCountsAndChangesNothing(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	pgtest.NewPruneRows(t, tb, 5)
	before := tb.Snapshot(t)
	for _, c := range []struct {
		status outbox.Status
		want   int64
	}{{outbox.StatusDelivered, 5}, {outbox.StatusDead, 3}} {
		res := prune(t, tb, storage.PruneParams{Status: c.status, OlderThan: 7 * 24 * time.Hour, DryRun: true,
			Progress: func(int64) { t.Errorf("dry run reported progress") }})
		if res.Deleted != c.want || res.Batches != 0 {
			t.Errorf("dry run of %s = %+v, want %d rows and no batches", c.status, res, c.want)
		}
	}
	pgtest.RequireUnchanged(t, "a dry run", before, tb.Snapshot(t))
}

func TestPruneDeletesOnlyOldDeliveredRowsInBatches(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := pgtest.NewPruneRows(t, tb, 7)
	var progress []int64
	res := prune(t, tb, storage.PruneParams{
		Status: outbox.StatusDelivered, OlderThan: 7 * 24 * time.Hour, BatchSize: 3,
		Progress: func(n int64) { progress = append(progress, n) },
	})
	if res.Deleted != 7 || res.Batches != 3 {
		t.Errorf("Prune = %+v, want 7 rows in 3 batches of at most 3", res)
	}
	if want := []int64{3, 6, 7}; !slices.Equal(progress, want) {
		t.Errorf("progress reports %v, want %v", progress, want)
	}
	want := slices.Concat(f.NewDelivered, f.OldDead, f.NewDead, f.Live)
	if got := remaining(t, tb); !sameSet(got, want) {
		t.Fatalf("after pruning DELIVERED rows %d rows remain, want %d: every row but the old DELIVERED ones", len(got), len(want))
	}
}

func TestPruneDeletesOnlyOldDeadRows(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := pgtest.NewPruneRows(t, tb, 2)
	res := prune(t, tb, storage.PruneParams{Status: outbox.StatusDead, OlderThan: 7 * 24 * time.Hour})
	if res.Deleted != 3 || res.Batches != 1 {
		t.Errorf("Prune = %+v, want 3 rows in 1 batch", res)
	}
	want := slices.Concat(f.OldDelivered, f.NewDelivered, f.NewDead, f.Live)
	if got := remaining(t, tb); !sameSet(got, want) {
		t.Fatalf("after pruning DEAD rows %d rows remain, want %d: every row but the old DEAD ones", len(got), len(want))
	}
}

func TestPruneWithAgeZeroStillSparesLiveRows(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := pgtest.NewPruneRows(t, tb, 2)
	for _, st := range []outbox.Status{outbox.StatusDelivered, outbox.StatusDead} {
		prune(t, tb, storage.PruneParams{Status: st})
	}
	if got := remaining(t, tb); !sameSet(got, f.Live) {
		t.Fatalf("after pruning everything finished, rows %v remain, want exactly the PENDING and DELIVERING rows %v", got, f.Live)
	}
}

func TestPruneRefusesLiveStatuses(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	pgtest.NewPruneRows(t, tb, 1)
	before := tb.Snapshot(t)
	for _, st := range []outbox.Status{outbox.StatusPending, outbox.StatusDelivering, "", "delivered"} {
		if _, err := tb.Store.Prune(ctx, storage.PruneParams{Status: st}); err == nil {
			t.Errorf("Prune of status %q succeeded", st)
		}
	}
	pgtest.RequireUnchanged(t, "a refused prune", before, tb.Snapshot(t))
}

// ---- RetryDead ---------------------------------------------------------------

func TestRetryDeadFiltersSelectExactlyWhatTheySay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		params storage.RetryDeadParams
		want   []string
	}{
		{"no filter", storage.RetryDeadParams{},
			[]string{"orders-timeout-recent", "orders-nostream-old", "users-timeout-old", "users-toolarge-recent", "users-no-error"}},
		{"event type", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{EventType: "orders"}},
			[]string{"orders-timeout-recent", "orders-nostream-old"}},
		{"since", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{Since: time.Now().Add(-36 * time.Hour)}},
			[]string{"orders-timeout-recent", "users-toolarge-recent"}},
		{"error contains, any case", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{ErrorContains: "timeout"}},
			[]string{"orders-timeout-recent", "users-timeout-old"}},
		{"error contains is not a pattern", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{ErrorContains: "%"}},
			nil},
		{"every filter at once", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{
			EventType: "users", ErrorContains: "Timeout", Since: time.Now().Add(-6 * 24 * time.Hour)}},
			[]string{"users-timeout-old"}},
		{"limit takes the oldest deaths", storage.RetryDeadParams{Limit: 2},
			[]string{"users-timeout-old", "orders-nostream-old"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			f := pgtest.NewDeadRows(t, tb)
			want := f.Pick(c.want...)
			before := tb.Snapshot(t)

			dry := c.params
			dry.DryRun = true
			n, err := tb.Store.RetryDead(ctx, dry)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(want)) {
				t.Errorf("dry run counts %d rows, want %d", n, len(want))
			}
			pgtest.RequireUnchanged(t, "a dry run", before, tb.Snapshot(t))

			n, err = tb.Store.RetryDead(ctx, c.params)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(want)) {
				t.Errorf("RetryDead moved %d rows, want %d", n, len(want))
			}
			after := tb.Snapshot(t)
			for _, name := range pgtest.DeadRowNames {
				id := f.IDs[name]
				row := tb.Get(t, id)
				if slices.Contains(want, id) {
					if row.Status != outbox.StatusPending || row.Attempts != 0 || !within(row.AvailableAt, time.Now(), clockSlack) {
						t.Errorf("%s = %+v, want PENDING, attempts 0, due now", name, row)
					}
					if before[id] == after[id] {
						t.Errorf("%s did not change", name)
					}
					continue
				}
				if before[id] != after[id] {
					t.Errorf("%s was not selected but changed:\nbefore %s\nafter  %s", name, before[id], after[id])
				}
			}
		})
	}
}

func TestRetryDeadByIDKeepsLastError(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := pgtest.NewDeadRows(t, tb)
	ids := f.Pick("orders-nostream-old", "users-toolarge-recent", "orders-pending")
	n, err := tb.Store.RetryDead(ctx, storage.RetryDeadParams{DeadFilter: storage.DeadFilter{IDs: append(ids, uuid.New())}})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("RetryDead by id moved %d rows, want the 2 DEAD ones", n)
	}
	if row := tb.Get(t, ids[0]); row.Status != outbox.StatusPending || row.LastError != "no stream for subject orders" {
		t.Errorf("re-queued row = %+v, want PENDING with its last_error kept", row)
	}
	if row := tb.Get(t, ids[2]); row.Attempts != 25 {
		t.Errorf("a PENDING row named by id was reset: %+v", row)
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

// ---- List and Get ----------------------------------------------------------

func TestListNewestFirstWithFilters(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	first := tb.Insert(t, pgtest.Event{Type: "a"}, pgtest.Event{Type: "b"})
	second := tb.Insert(t, pgtest.Event{Type: "a", PartitionKey: "k"}, pgtest.Event{Type: "a"})
	tb.Exec(t, "UPDATE {{table}} SET created_at = created_at - interval '1 minute' WHERE event_id = ANY($1)", first)
	tb.Set(t, first[0], "status = 'DEAD', last_error = 'boom'")

	list := func(p storage.ListParams) []uuid.UUID {
		t.Helper()
		rows, err := tb.Store.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		return ids
	}
	// Newest transaction first; within one, the later insert first.
	if got, want := list(storage.ListParams{}), []uuid.UUID{second[1], second[0], first[1], first[0]}; !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	if got, want := list(storage.ListParams{Limit: 2}), []uuid.UUID{second[1], second[0]}; !slices.Equal(got, want) {
		t.Errorf("List limit 2 = %v, want %v", got, want)
	}
	if got, want := list(storage.ListParams{EventType: "a"}), []uuid.UUID{second[1], second[0], first[0]}; !slices.Equal(got, want) {
		t.Errorf("List type a = %v, want %v", got, want)
	}
	if got, want := list(storage.ListParams{Status: outbox.StatusDead}), []uuid.UUID{first[0]}; !slices.Equal(got, want) {
		t.Errorf("List DEAD = %v, want %v", got, want)
	}
	if got := list(storage.ListParams{Status: outbox.StatusPending, EventType: "b"}); !slices.Equal(got, first[1:2]) {
		t.Errorf("List PENDING b = %v, want %v", got, first[1])
	}
	if _, err := tb.Store.List(ctx, storage.ListParams{Status: "SLEEPING"}); err == nil {
		t.Error("List accepted an unknown status")
	}

	rows, err := tb.Store.List(ctx, storage.ListParams{Status: outbox.StatusDead})
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; r.Type != "a" || r.PartitionKey != nil || r.LastError == nil || *r.LastError != "boom" ||
		r.Age < time.Minute || r.Age > time.Minute+clockSlack {
		t.Errorf("listed row = %+v, want type a, no key, last_error boom, about a minute old", r)
	}
}

func TestGetReturnsEveryColumn(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	payload := []byte{0, 1, 2, 0xff}
	id := tb.Insert(t, pgtest.Event{Type: "t", PartitionKey: "k", Payload: payload, Headers: `{"h": "v"}`})[0]
	tb.Set(t, id, "status = 'DELIVERING', locked_by = 'relay-1', locked_at = now(), attempts = 2, last_error = 'x'")

	r, err := tb.Store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != id || r.Type != "t" || r.PartitionKey == nil || *r.PartitionKey != "k" || string(r.Payload) != string(payload) ||
		r.Status != outbox.StatusDelivering || r.Attempts != 2 || r.LastError == nil || *r.LastError != "x" ||
		r.LockedBy == nil || *r.LockedBy != "relay-1" || r.LockedAt == nil || r.DeliveredAt != nil || r.Seq == nil {
		t.Errorf("Get = %+v", r)
	}
	if string(r.Headers) != `{"h": "v"}` {
		t.Errorf("headers = %s", r.Headers)
	}
	if _, err := tb.Store.Get(ctx, uuid.New()); !errors.Is(err, storage.ErrEventNotFound) {
		t.Errorf("Get of an unknown id: %v, want ErrEventNotFound", err)
	}
}

// ---- Emit --------------------------------------------------------------------

func TestEmitInsertsInOneTransactionInOrder(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids, err := tb.Store.Emit(ctx, storage.EmitParams{
		Type: "demo", PartitionKey: "k", Payload: []byte(`{"a":1}`), Headers: map[string]string{"x": "y"},
		Count: 5, AvailableIn: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 5 {
		t.Fatalf("Emit returned %d ids", len(ids))
	}
	rows, err := tb.Store.Pool().Query(ctx, `SELECT event_id, event_type, partition_key, payload, headers::text,
		created_at, available_at - created_at FROM `+tb.Name+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var (
		got       []uuid.UUID
		createdAt []time.Time
	)
	for rows.Next() {
		var (
			id               uuid.UUID
			typ, key, hdr    string
			payload          []byte
			created          time.Time
			availableInDelay time.Duration
		)
		if err := rows.Scan(&id, &typ, &key, &payload, &hdr, &created, &availableInDelay); err != nil {
			t.Fatal(err)
		}
		if typ != "demo" || key != "k" || string(payload) != `{"a":1}` || hdr != `{"x": "y"}` {
			t.Errorf("row %s: %s %s %s %s", id, typ, key, payload, hdr)
		}
		// The delay counts from Emit's call, by its clock: the row is
		// written a moment later.
		if availableInDelay < time.Hour-clockSlack || availableInDelay > time.Hour+clockSlack {
			t.Errorf("row %s is due %s after it was written, want 1h", id, availableInDelay)
		}
		got = append(got, id)
		createdAt = append(createdAt, created)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ids) {
		t.Errorf("rows in insertion order %v, want the returned order %v", got, ids)
	}
	for _, c := range createdAt {
		if !c.Equal(createdAt[0]) {
			t.Errorf("created_at values differ (%s, %s): not one transaction", c, createdAt[0])
		}
	}
}

func TestEmitRefusesBadParams(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	for _, p := range []storage.EmitParams{
		{Count: 1},
		{Type: "t"},
		{Type: "t", Count: storage.EmitCountMax + 1},
		{Type: "t", Count: 1, AvailableIn: -time.Second},
	} {
		if _, err := tb.Store.Emit(ctx, p); err == nil {
			t.Errorf("Emit(%+v) succeeded", p)
		}
	}
	if n := len(remaining(t, tb)); n != 0 {
		t.Errorf("refused emits wrote %d rows", n)
	}
}

// ---- Errors ------------------------------------------------------------------

func TestAdminQueriesOnAMissingTableSayToMigrate(t *testing.T) {
	t.Parallel()
	s, err := postgres.Open(ctx, storage.URLWithTable(pgtest.URL(), "no_such_schema_x.no_such_table"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	calls := map[string]func() error{
		"Backlog": func() error { _, err := s.Backlog(ctx); return err },
		"Stats":   func() error { _, err := s.Stats(ctx, storage.StatsParams{}); return err },
		"Prune": func() error {
			_, err := s.Prune(ctx, storage.PruneParams{Status: outbox.StatusDelivered})
			return err
		},
		"RetryDead": func() error { _, err := s.RetryDead(ctx, storage.RetryDeadParams{}); return err },
		"List":      func() error { _, err := s.List(ctx, storage.ListParams{}); return err },
		"Get":       func() error { _, err := s.Get(ctx, uuid.New()); return err },
		"Emit":      func() error { _, err := s.Emit(ctx, storage.EmitParams{Type: "t", Count: 1}); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, storage.ErrTableMissing) || !strings.Contains(err.Error(), "relay-cli migrate") {
			t.Errorf("%s on a missing table: %v, want ErrTableMissing and a hint to migrate", name, err)
		}
	}
}

func TestStatsListsKeysHeldByADeadEvent(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	ids := tb.Insert(t,
		pgtest.Event{Type: "a", PartitionKey: "held"},      // will be DEAD, first of its key
		pgtest.Event{Type: "a", PartitionKey: "held"},      // waits behind it
		pgtest.Event{Type: "a", PartitionKey: "held"},      // waits behind it
		pgtest.Event{Type: "a", PartitionKey: "free"},      // DELIVERED
		pgtest.Event{Type: "a", PartitionKey: "free"},      // waits behind nothing
		pgtest.Event{Type: "a", PartitionKey: "dead-only"}, // DEAD, nothing behind
	)
	tb.Exec(t, "UPDATE {{table}} SET status = 'DEAD' WHERE event_id = ANY($1)", []uuid.UUID{ids[0], ids[5]})
	tb.Exec(t, "UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() WHERE event_id = $1", ids[3])

	st, err := tb.Store.Stats(ctx, storage.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	want := []storage.BlockedKey{{Key: "held", DeadEventID: ids[0], DeadEventType: "a", Waiting: 2}}
	if fmt.Sprint(st.BlockedKeys) != fmt.Sprint(want) {
		t.Fatalf("BlockedKeys = %+v, want %+v", st.BlockedKeys, want)
	}
}

func TestBacklogOldestAgeIgnoresEventsNotYetDue(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.Insert(t, pgtest.Event{Type: "later", AvailableIn: 30 * 24 * time.Hour})
	tb.Exec(t, "UPDATE {{table}} SET created_at = now() - interval '1 hour'")
	b, err := tb.Store.Backlog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b.PendingNew != 1 || !b.OldestPendingAt.IsZero() || b.OldestPendingAge != 0 {
		t.Fatalf("backlog %+v: an event due next month is pending but not late", b)
	}
}
