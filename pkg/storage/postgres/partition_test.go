package postgres_test

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// ---- Partitioned tables ------------------------------------------------------

// dbNow reads the database's clock.
func dbNow(t *testing.T, tb *pgtest.Table) time.Time {
	t.Helper()
	var now time.Time
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// partitionOf names the hour partition of tb that holds created_at at.
func partitionOf(t *testing.T, tb *pgtest.Table, by string, at time.Time) string {
	t.Helper()
	table, err := schema.ParseTable(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	p := schema.Partitionings[by]
	return p.PartitionName(table, p.Start(at))
}

// partitionNames lists tb's partitions as Partitions does.
func partitionNames(t *testing.T, tb *pgtest.Table) []string {
	t.Helper()
	parts, err := tb.Store.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}
	return names
}

// tableOf returns the partition that holds id.
func tableOf(t *testing.T, tb *pgtest.Table, id uuid.UUID) string {
	t.Helper()
	var name string
	err := tb.Store.Pool().QueryRow(ctx, "SELECT c.relname FROM "+tb.Name+" e JOIN pg_class c ON c.oid = e.tableoid WHERE event_id = $1", id).Scan(&name)
	if err != nil {
		t.Fatalf("where is %s: %v", id, err)
	}
	return name
}

// createdAt reads id's created_at.
func createdAt(t *testing.T, tb *pgtest.Table, id uuid.UUID) time.Time {
	t.Helper()
	var at time.Time
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT created_at FROM "+tb.Name+" WHERE event_id = $1", id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

func maintain(t *testing.T, tb *pgtest.Table, p storage.PartitionPolicy) storage.PartitionReport {
	t.Helper()
	rep, err := tb.Store.MaintainPartitions(ctx, p)
	if err != nil {
		t.Fatalf("MaintainPartitions: %v", err)
	}
	return rep
}

func keptNames(rep storage.PartitionReport) []string {
	var names []string
	for _, k := range rep.Kept {
		names = append(names, k.Name)
	}
	slices.Sort(names)
	return names
}

func TestMigratePartitioned(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"day", "hour"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			tb := pgtest.NewPartitioned(t, by)
			if got, err := tb.Store.Partitioning(ctx); err != nil || got != by {
				t.Fatalf("Partitioning = %q, %v; want %q", got, err, by)
			}
			now := dbNow(t, tb)
			parts, err := tb.Store.Partitions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p := schema.Partitionings[by]
			last := parts[len(parts)-1]
			if last.Name != "openoutbox_events_default" || !last.From.IsZero() {
				t.Errorf("last partition = %+v, want the default partition", last)
			}
			timed := parts[:len(parts)-1]
			// The current one (or the one before, if a period began since
			// the migration).
			if first := timed[0].From; !first.Equal(p.Start(now)) && !first.Equal(p.Start(now).Add(-p.Step)) {
				t.Errorf("first partition = %s from %s, want the current one, %s", timed[0].Name, first, partitionOf(t, tb, by, now))
			}
			for i, pt := range timed {
				if pt.To.Sub(pt.From) != p.Step || (i > 0 && !pt.From.Equal(timed[i-1].To)) {
					t.Errorf("partition %s covers %s to %s: want one %s after the previous", pt.Name, pt.From, pt.To, by)
				}
				if pt.Name != p.PartitionName(schema.Table{Name: "openoutbox_events"}, pt.From) {
					t.Errorf("partition %s starts at %s: misnamed", pt.Name, pt.From)
				}
			}
			if end := timed[len(timed)-1].To; end.Before(now.Add(p.Ahead - p.Step)) {
				t.Errorf("partitions end at %s, want at least %s ahead of %s", end, p.Ahead, now)
			}

			// Again, partitioned or not (STORAGE_AUTO_MIGRATE at a relay's start):
			// nothing to create.
			for name, migrate := range map[string]func() (storage.MigrateResult, error){
				"MigratePartitioned": func() (storage.MigrateResult, error) {
					return tb.Store.MigratePartitioned(ctx, by, storage.MigrateOptions{})
				},
				"Migrate": func() (storage.MigrateResult, error) { return tb.Store.Migrate(ctx, storage.MigrateOptions{}) },
			} {
				res, err := migrate()
				if err != nil || len(res.Created) != 0 || !slices.Contains(res.Existed, "partition openoutbox_events_default") {
					t.Errorf("%s again = %+v, %v; want nothing created, the default partition existing", name, res, err)
				}
			}
			other := map[string]string{"day": "hour", "hour": "day"}[by]
			if _, err := tb.Store.MigratePartitioned(ctx, other, storage.MigrateOptions{}); err == nil || !strings.Contains(err.Error(), "partitioned by "+by) {
				t.Errorf("MigratePartitioned(%s) on a table by %s = %v, want an error naming %s", other, by, err, by)
			}
		})
	}
}

func TestMigratePartitionedNeverConvertsATable(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 3, "e")
	before := tb.Snapshot(t)
	if _, err := tb.Store.MigratePartitioned(ctx, "day", storage.MigrateOptions{}); err == nil || !strings.Contains(err.Error(), "not partitioned") ||
		!strings.Contains(err.Error(), "docs/operations.md") {
		t.Errorf("MigratePartitioned on a plain table = %v, want it refused with a pointer to the docs", err)
	}
	// The DDL itself refuses too, for teams that apply --print's output.
	if _, err := tb.Store.Pool().Exec(ctx, tb.Store.PartitionedSchemaSQL("day")); err == nil || !strings.Contains(err.Error(), "not partitioned") {
		t.Errorf("the partitioned DDL on a plain table = %v, want it refused", err)
	}
	pgtest.RequireUnchanged(t, "MigratePartitioned on a plain table", before, tb.Snapshot(t))
	if got, err := tb.Store.Partitioning(ctx); err != nil || got != "" {
		t.Errorf("Partitioning of a plain table = %q, %v; want \"\"", got, err)
	}
	if rep, err := tb.Store.MaintainPartitions(ctx, storage.PartitionPolicy{Ahead: time.Hour}); err != nil ||
		len(rep.Created)+len(rep.Dropped)+len(rep.Kept) != 0 {
		t.Errorf("MaintainPartitions on a plain table = %+v, %v; want nothing done", rep, err)
	}
	if len(tb.Counts(t)) != 1 || tb.Counts(t)[outbox.StatusPending] != len(ids) {
		t.Errorf("rows after = %v", tb.Counts(t))
	}
	if tb.Store.PartitionedSchemaSQL("week") != "" {
		t.Error("PartitionedSchemaSQL(week) is not empty")
	}
	if _, err := tb.Store.MigratePartitioned(ctx, "week", storage.MigrateOptions{}); err == nil {
		t.Error("MigratePartitioned(week) succeeded")
	}

	missing := pgtest.Harness{}.Unmigrated(t).(*postgres.Store)
	if _, err := missing.Partitioning(ctx); !errors.Is(err, storage.ErrTableMissing) {
		t.Errorf("Partitioning of a missing table = %v, want ErrTableMissing", err)
	}
}

// TestPartitionNamesFitTheIdentifierLimit: the longest table name a
// schema.table may have still gives partition names PostgreSQL keeps whole.
func TestPartitionNamesFitTheIdentifierLimit(t *testing.T) {
	t.Parallel()
	name := pgtest.NewSchema(t) + "." + strings.Repeat("e", 45)
	s, err := postgres.Open(ctx, storage.URLWithTable(pgtest.URL(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, err := s.MigratePartitioned(ctx, "hour", storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.MaintainPartitions(ctx, storage.PartitionPolicy{Ahead: 24 * time.Hour})
	if err != nil || len(rep.Created) == 0 {
		t.Fatalf("MaintainPartitions = %+v, %v; want partitions created", rep, err)
	}
	parts, err := s.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if len(p.Name) > 63 || !strings.HasPrefix(p.Name, strings.Repeat("e", 45)+"_") {
			t.Errorf("partition %q: want <table>_… within 63 bytes", p.Name)
		}
	}
	// A shorter horizon than the first call's, so that an hour beginning
	// between the two calls needs no new partition either.
	if again, err := s.MaintainPartitions(ctx, storage.PartitionPolicy{Ahead: 12 * time.Hour}); err != nil || len(again.Created) != 0 {
		t.Errorf("MaintainPartitions again = %+v, %v; want nothing created (names must match what exists)", again, err)
	}
}

func TestMaintainPartitionsCreatesAhead(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	before := partitionNames(t, tb)
	rep := maintain(t, tb, storage.PartitionPolicy{Ahead: 30 * time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour})
	if len(rep.Created) == 0 || len(rep.Dropped) != 0 || len(rep.Kept) != 0 {
		t.Fatalf("report = %+v, want partitions created and nothing else", rep)
	}
	for _, name := range rep.Created {
		if slices.Contains(before, name) {
			t.Errorf("created %s, which existed", name)
		}
	}
	now := dbNow(t, tb)
	parts, err := tb.Store.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	timed := parts[:len(parts)-1]
	for i := 1; i < len(timed); i++ {
		if !timed[i].From.Equal(timed[i-1].To) {
			t.Errorf("gap between %s and %s", timed[i-1].Name, timed[i].Name)
		}
	}
	if end := timed[len(timed)-1].To; end.Before(now.Add(30 * time.Hour)) {
		t.Errorf("partitions end at %s, want 30 hours ahead of %s", end, now)
	}
	// An event written now lands in a time partition, not the default.
	id := tb.InsertN(t, 1, "e")[0]
	if got, want := tableOf(t, tb, id), partitionOf(t, tb, "hour", dbNow(t, tb)); got != want {
		t.Errorf("a new event is in %s, want %s", got, want)
	}
	if again := maintain(t, tb, storage.PartitionPolicy{Ahead: 28 * time.Hour}); len(again.Created)+len(again.Dropped) != 0 {
		t.Errorf("again = %+v, want nothing to do", again)
	}
	if _, err := tb.Store.MaintainPartitions(ctx, storage.PartitionPolicy{Ahead: 2000 * time.Hour}); err == nil || !strings.Contains(err.Error(), "at most 1000") {
		t.Errorf("2000 hours ahead by the hour = %v, want it refused", err)
	}
}

// TestMaintainPartitionsDropsOnlyWhatIsDone: an expired partition goes
// when every row in it is DELIVERED or DEAD past retention, and stays while
// any row is PENDING, DELIVERING, or not past retention. The default
// partition and the current one are never dropped.
func TestMaintainPartitionsDropsOnlyWhatIsDone(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	at := func(h int) string { return fmt.Sprintf("created_at = now() - interval '%d hours'", h) }
	// hoursAgo names the partition of the rows set h hours back, from a
	// row's own created_at, so that an hour beginning meanwhile changes
	// nothing.
	sample := map[int]uuid.UUID{}
	hoursAgo := func(h int) string { return partitionOf(t, tb, "hour", createdAt(t, tb, sample[h])) }

	ids := tb.InsertN(t, 11, "e")
	pending, delivering, freshDelivered, freshDead, oldDelivered, oldDead, undated, infinite, current, laterPending, laterDead :=
		ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6], ids[7], ids[8], ids[9], ids[10]
	tb.Set(t, pending, at(3))
	tb.Set(t, delivering, at(4)+", status = 'DELIVERING', locked_by = 'r', locked_at = now()")
	tb.Set(t, freshDelivered, at(5)+", status = 'DELIVERED', delivered_at = now() - interval '1 hour'")
	tb.Set(t, freshDead, at(6)+", status = 'DEAD', updated_at = now() - interval '1 hour'")
	tb.Set(t, oldDelivered, at(7)+", status = 'DELIVERED', delivered_at = now() - interval '30 hours'")
	tb.Set(t, oldDead, at(7)+", status = 'DEAD', updated_at = now() - interval '72 hours'")
	tb.Set(t, undated, at(8)+", status = 'DELIVERED', delivered_at = NULL")
	tb.Set(t, infinite, "created_at = '-infinity', status = 'DELIVERED', delivered_at = now() - interval '30 hours'")
	tb.Set(t, current, "status = 'DELIVERED', delivered_at = now() - interval '30 hours'")
	tb.Set(t, laterPending, at(9))
	tb.Set(t, laterDead, at(9)+", status = 'DEAD', updated_at = now() - interval '72 hours'")
	for h, id := range map[int]uuid.UUID{3: pending, 4: delivering, 5: freshDelivered, 6: freshDead, 7: oldDelivered, 8: undated, 9: laterPending} {
		sample[h] = id
	}
	hourNames := map[int]string{}
	for h := range sample {
		hourNames[h] = hoursAgo(h)
	}
	hoursAgo = func(h int) string { return hourNames[h] } // the rows of 7 hours ago go
	currentPartition := tableOf(t, tb, current)

	// Partitions are looked at once their range ended two hours (the
	// shorter retention) ago: all but the current one here.
	policy := storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: 2 * time.Hour, DeadRetention: 150 * time.Minute}
	rep := maintain(t, tb, policy)
	// The past hours' rows waited in the default partition; their
	// partitions are created and the rows moved in.
	for _, h := range []int{3, 4, 5, 6, 7, 8, 9} {
		if !slices.Contains(rep.Created, hoursAgo(h)) {
			t.Errorf("created %v, want %s among them", rep.Created, hoursAgo(h))
		}
	}
	if !slices.Equal(rep.Dropped, []string{hoursAgo(7)}) {
		t.Errorf("dropped %v, want only %s", rep.Dropped, hoursAgo(7))
	}
	if rep.DroppedRows["DELIVERED"] != 1 || rep.DroppedRows["DEAD"] != 1 || len(rep.DroppedRows) != 2 {
		t.Errorf("dropped rows %v, want 1 DELIVERED and 1 DEAD", rep.DroppedRows)
	}
	want := []string{hoursAgo(3), hoursAgo(4), hoursAgo(5), hoursAgo(6), hoursAgo(8), hoursAgo(9)}
	slices.Sort(want)
	if got := keptNames(rep); !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	reasons := map[string]string{}
	for _, k := range rep.Kept {
		reasons[k.Name] = k.Reason
	}
	for h, status := range map[int]string{3: "1 PENDING", 4: "1 DELIVERING", 5: "1 DELIVERED", 6: "1 DEAD", 8: "1 DELIVERED", 9: "1 PENDING"} {
		if !strings.Contains(reasons[hoursAgo(h)], status) {
			t.Errorf("kept %s because %q, want it to say %s", hoursAgo(h), reasons[hoursAgo(h)], status)
		}
	}
	if strings.Contains(reasons[hoursAgo(9)], "DEAD") {
		t.Errorf("kept %s because %q: its DEAD row is past retention", hoursAgo(9), reasons[hoursAgo(9)])
	}
	rows := tb.Snapshot(t)
	for _, id := range ids {
		if _, ok := rows[id]; ok == (id == oldDelivered || id == oldDead) {
			t.Errorf("row %s: present %v after the drop", id, ok)
		}
	}
	names := partitionNames(t, tb)
	if !slices.Contains(names, "openoutbox_events_default") || !slices.Contains(names, currentPartition) {
		t.Errorf("partitions %v: want the default and the current one kept", names)
	}
	if got := tableOf(t, tb, infinite); got != "openoutbox_events_default" {
		t.Errorf("the -infinity row is in %s, want the default partition", got)
	}

	// Finish the rest, past retention: they go. A negative retention keeps
	// its status forever.
	tb.Exec(t, `UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() - interval '30 hours', locked_by = NULL, locked_at = NULL
		WHERE event_id = ANY($1)`, []uuid.UUID{pending, delivering, freshDelivered, undated, laterPending})
	tb.Set(t, freshDead, "updated_at = now() - interval '72 hours'")
	keepDelivered := policy
	keepDelivered.DeliveredRetention = -1
	rep = maintain(t, tb, keepDelivered)
	if !slices.Equal(rep.Dropped, []string{hoursAgo(6)}) {
		t.Errorf("with DELIVERED kept forever, dropped %v, want only %s (DEAD only)", rep.Dropped, hoursAgo(6))
	}
	rep = maintain(t, tb, policy)
	want = []string{hoursAgo(9), hoursAgo(8), hoursAgo(5), hoursAgo(4), hoursAgo(3)}
	if !slices.Equal(rep.Dropped, want) || len(rep.Kept) != 0 {
		t.Errorf("dropped %v, kept %+v; want %v oldest first, nothing kept", rep.Dropped, rep.Kept, want)
	}
	left := tb.Snapshot(t)
	if _, ok := left[infinite]; !ok || len(left) != 2 {
		t.Errorf("%d rows left, want the -infinity one in the default partition and the current one", len(left))
	}
}

// TestMaintainPartitionsKeepsARowThatArrivesDuringTheDrop: a row written
// into a partition after it was found droppable, and committed while the
// drop waits for its lock, keeps the partition: the check is made again
// under the lock.
func TestMaintainPartitionsKeepsARowThatArrivesDuringTheDrop(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	postgres.SetPartitionLockTimeout(tb.Store, time.Minute)
	done := tb.InsertN(t, 1, "done")[0]
	tb.Set(t, done, "created_at = now() - interval '3 hours'")
	policy := storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour}
	maintain(t, tb, policy) // creates the partition; the PENDING row keeps it
	part := tableOf(t, tb, done)
	tb.Set(t, done, "status = 'DELIVERED', delivered_at = now() - interval '2 hours'")

	// A producer's transaction writes into the partition and has not
	// committed when maintenance looks.
	tx, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	late := uuid.New()
	if _, err := tx.Exec(ctx, "INSERT INTO "+tb.Name+" (event_id, event_type, payload, created_at) VALUES ($1, 'late', '\\x00', $2)", late, createdAt(t, tb, done)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep storage.PartitionReport
		err error
	}
	res := make(chan result, 1)
	go func() {
		rep, err := tb.Store.MaintainPartitions(ctx, policy)
		res <- result{rep, err}
	}()
	eventually.True(t, 30*time.Second, func() bool {
		var waiting bool
		err := tb.Store.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'LOCK TABLE ONLY%')`).Scan(&waiting)
		return err == nil && waiting
	}, func() string { return "maintenance never waited for the table's lock" })
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.rep.Dropped) != 0 || len(r.rep.Kept) != 1 || r.rep.Kept[0].Name != part {
		t.Fatalf("report = %+v, want %s kept", r.rep, part)
	}
	if got := tb.Get(t, late); got.Status != outbox.StatusPending {
		t.Errorf("the late row is %s, want PENDING", got.Status)
	}
	if b := claim(t, tb.Store, "r", 10); !slices.Equal(eventIDs(b.Events), []uuid.UUID{late}) {
		t.Errorf("claimed %v, want the late row", eventIDs(b.Events))
	}
}

// TestMaintainPartitionsGivesWayToABusyTable: a drop whose lock is not
// granted in time keeps the partition for the next cycle and holds up no
// one for longer than that.
func TestMaintainPartitionsGivesWayToABusyTable(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	postgres.SetPartitionLockTimeout(tb.Store, 100*time.Millisecond)
	id := tb.InsertN(t, 1, "e")[0]
	tb.Set(t, id, "created_at = now() - interval '3 hours'")
	policy := storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour}
	maintain(t, tb, policy)
	part := tableOf(t, tb, id)
	tb.Set(t, id, "status = 'DELIVERED', delivered_at = now() - interval '2 hours'")

	tx, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM "+tb.Name); err != nil { // a long report
		t.Fatal(err)
	}
	rep := maintain(t, tb, policy)
	if len(rep.Dropped) != 0 || len(rep.Kept) != 1 || rep.Kept[0].Name != part || !strings.Contains(rep.Kept[0].Reason, "lock not granted") {
		t.Fatalf("report = %+v, want %s kept for its lock", rep, part)
	}
	_ = tx.Rollback(ctx)
	if rep := maintain(t, tb, policy); !slices.Equal(rep.Dropped, []string{part}) {
		t.Errorf("once the table is free: %+v, want %s dropped", rep, part)
	}
}

// TestClaimsAcrossPartitions: claims take the oldest events first whatever
// partition holds them, and ordered claims keep a key's events in order
// across partitions and the default one.
func TestClaimsAcrossPartitions(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	evs := make([]pgtest.Event, 4)
	for i := range evs {
		evs[i] = pgtest.Event{PartitionKey: "k"}
	}
	ids := tb.Insert(t, evs...) // one statement: one available_at
	first, second, third, fourth := ids[0], ids[1], ids[2], ids[3]
	tb.Set(t, first, "created_at = now() - interval '3 hours'")
	tb.Set(t, second, "created_at = now() - interval '2 hours'")
	tb.Set(t, third, "created_at = now() - interval '1 hour'")
	// fourth stays in the current partition.
	maintain(t, tb, storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour})
	where := map[string]bool{}
	for _, id := range ids {
		where[tableOf(t, tb, id)] = true
	}
	if len(where) != 4 {
		t.Fatalf("the events are in %v, want four partitions", where)
	}

	ordered := func(limit int) storage.Batch {
		t.Helper()
		b, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: limit, Ordering: storage.OrderingPartition, OnDead: storage.DeadSkip})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := ordered(1)
	if !slices.Equal(eventIDs(b.Events), []uuid.UUID{first}) {
		t.Fatalf("first ordered claim = %v, want the oldest event", eventIDs(b.Events))
	}
	if b := ordered(10); len(b.Events) != 0 {
		t.Fatalf("ordered claim while the first is in flight = %v, want nothing", eventIDs(b.Events))
	}
	if n, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil || n.Delivered != 1 {
		t.Fatalf("Settle = %d, %v", n.Delivered, err)
	}
	if b := ordered(10); !slices.Equal(eventIDs(b.Events), []uuid.UUID{second, third, fourth}) {
		t.Errorf("ordered claim after the first = %v, want the rest in order", eventIDs(b.Events))
	}

	// Unordered: oldest first across partitions, the default one included.
	tb2 := pgtest.NewPartitioned(t, "hour")
	ids = tb2.InsertN(t, 4, "e")
	tb2.Set(t, ids[0], "created_at = '-infinity'")
	tb2.Set(t, ids[1], "created_at = now() - interval '2 hours'")
	tb2.Set(t, ids[3], "created_at = 'infinity'")
	maintain(t, tb2, storage.PartitionPolicy{Ahead: time.Hour})
	if got := claim(t, tb2.Store, "r", 10); !slices.Equal(eventIDs(got.Events), ids) {
		t.Errorf("claimed %v, want %v", eventIDs(got.Events), ids)
	}
}

// TestNoEventLostWhileMaintenanceRuns: producers write events whose
// created_at falls anywhere from hours ago to hours ahead, into time
// partitions and the default one, while a relay claims and delivers them
// and maintenance creates partitions (moving waiting rows) and drops
// delivered ones over and over. Every event is claimed, exactly once.
func TestNoEventLostWhileMaintenanceRuns(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	const batches, perBatch = 40, 25
	policy := storage.PartitionPolicy{Ahead: 2 * time.Hour, DeliveredRetention: 0, DeadRetention: 0}

	var wg sync.WaitGroup
	written := make(chan []uuid.UUID, batches)
	wg.Go(func() {
		defer close(written)
		for i := range batches {
			ids := tb.InsertN(t, perBatch, "e")
			// Spread them: some into hours with no partition yet, some far
			// ahead, in one statement so the rows move partitions at once.
			tb.Exec(t, `UPDATE {{table}} SET created_at = now() + ((($2::int + n) % 13) - 6) * interval '1 hour'
				FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, n) WHERE event_id = u.id`, ids, i)
			written <- ids
		}
	})
	stop := make(chan struct{})
	maintained := make(chan int, 1)
	wg.Go(func() {
		n := 0
		defer func() { maintained <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := tb.Store.MaintainPartitions(ctx, policy); err != nil && !strings.Contains(err.Error(), "lock not granted") {
				t.Errorf("MaintainPartitions: %v", err)
				return
			}
			n++
		}
	})

	want := map[uuid.UUID]bool{}
	for ids := range written {
		for _, id := range ids {
			want[id] = true
		}
	}
	claimed := map[uuid.UUID]int{}
	eventually.True(t, 60*time.Second, func() bool {
		b := claim(t, tb.Store, "r", 100)
		for _, e := range b.Events {
			claimed[e.ID]++
		}
		if len(b.Events) > 0 {
			// Every settle finds its rows, wherever maintenance moved them.
			if n, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil || n.Delivered != len(b.Events) {
				t.Fatalf("Settle of %d events = %d, %v", len(b.Events), n.Delivered, err)
			}
		}
		return len(claimed) >= len(want)
	}, func() string { return fmt.Sprintf("claimed %d of %d events", len(claimed), len(want)) })
	close(stop)
	wg.Wait()
	if n := <-maintained; n < 2 {
		t.Errorf("maintenance ran %d times, want it to overlap the writes", n)
	}
	for id := range want {
		if claimed[id] != 1 {
			t.Errorf("event %s claimed %d times, want once", id, claimed[id])
		}
	}
	if len(claimed) != len(want) {
		t.Errorf("claimed %d distinct events, want %d", len(claimed), len(want))
	}
	// Delivered history goes with its partitions; the rest stays.
	rep := maintain(t, tb, policy)
	if len(rep.Kept) != 0 {
		t.Errorf("after delivering everything, kept %+v", rep.Kept)
	}
}

// TestPartitionsListsRowsByStatus: Partitions gives each partition's rows
// by status and its size, oldest first, the default partition last.
func TestPartitionsListsRowsByStatus(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	ids := tb.InsertN(t, 4, "e")
	tb.Set(t, ids[0], "created_at = now() - interval '2 hours', status = 'DEAD'")
	tb.Set(t, ids[1], "created_at = now() - interval '2 hours'")
	tb.Set(t, ids[2], "status = 'DELIVERED', delivered_at = now()")
	tb.Set(t, ids[3], "created_at = 'infinity'")
	parts, err := tb.Store.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]storage.PartitionInfo{}
	for _, p := range parts {
		byName[p.Name] = p
		if p.Bytes <= 0 || p.Rows == nil {
			t.Errorf("partition %+v: want its size and a rows map", p)
		}
	}
	def := byName["openoutbox_events_default"]
	if parts[len(parts)-1].Name != def.Name || def.Rows["PENDING"] != 2 || def.Rows["DEAD"] != 1 {
		t.Errorf("default partition %+v, want it last with 2 PENDING, 1 DEAD", def)
	}
	if cur := byName[tableOf(t, tb, ids[2])]; cur.Rows["DELIVERED"] != 1 || len(cur.Rows) != 1 {
		t.Errorf("current partition %+v, want 1 DELIVERED", cur)
	}
	maintain(t, tb, storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour})
	parts, err = tb.Store.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := parts[0]; p.Name != tableOf(t, tb, ids[0]) || p.Rows["PENDING"] != 1 || p.Rows["DEAD"] != 1 {
		t.Errorf("oldest partition %+v, want two hours ago's with 1 PENDING and 1 DEAD moved in", p)
	}
}

// TestMovingATableOverAsDocumented runs the SQL of "Moving an existing
// table over" in docs/operations.md on a plain table with rows in every
// state: the unfinished rows carry over, keep their order and stay
// claimable, and the new table is partitioned and maintained.
func TestMovingATableOverAsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\\*\\*Moving an existing table over\\.\\*\\*.*?```sql\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operations.md has no SQL under **Moving an existing table over.**")
	}
	ddl, err := schema.RenderPartitioned(schema.Table{Name: schema.DefaultTable}, "day")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m[1]), `\i partitioned.sql`) {
		t.Fatal(`the documented SQL no longer includes partitioned.sql; update this test`)
	}
	move := strings.Replace(string(m[1]), `\i partitioned.sql`, ddl, 1)

	tb := pgtest.New(t)
	evs := make([]pgtest.Event, 6)
	for i := range evs {
		evs[i] = pgtest.Event{PartitionKey: "k"}
	}
	ids := tb.Insert(t, evs...)
	tb.Exec(t, "UPDATE {{table}} SET created_at = now() - interval '3 days' WHERE event_id = ANY($1)", ids[:3])
	tb.Set(t, ids[0], "status = 'DELIVERED', delivered_at = now()")
	tb.Set(t, ids[1], "status = 'DEAD'")
	tb.Set(t, ids[2], "status = 'DELIVERING', locked_by = 'r', locked_at = now()")
	before := tb.Snapshot(t)

	conn, err := tb.Store.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	schemaName, _, _ := strings.Cut(tb.Name, ".")
	if _, err := conn.Exec(ctx, "SET search_path TO "+schemaName); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, move, pgx.QueryExecModeSimpleProtocol)
	if _, rerr := conn.Exec(ctx, "RESET search_path"); rerr != nil {
		t.Fatal(rerr)
	}
	conn.Release()
	if err != nil {
		t.Fatalf("the documented move failed: %v", err)
	}

	if by, err := tb.Store.Partitioning(ctx); err != nil || by != "day" {
		t.Fatalf("after the move Partitioning = %q, %v; want day", by, err)
	}
	if err := tb.Store.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := tb.Store.MigratePartitioned(ctx, "day", storage.MigrateOptions{}); err != nil || len(res.Created) != 0 {
		t.Errorf("migrate --partition-by day after the move = %+v, %v; want everything in place", res, err)
	}
	after := tb.Snapshot(t)
	if _, ok := after[ids[0]]; ok || len(after) != 5 {
		t.Fatalf("%d rows moved, want the 5 unfinished ones without the DELIVERED one", len(after))
	}
	// The move makes itself the writer of the rows claims may take
	// (docs/architecture.md, "The claim frontier"): nothing else changes.
	writer := regexp.MustCompile(`,"writer_xid":"[0-9]*"`)
	for id, row := range after {
		if writer.ReplaceAllString(before[id], "") != writer.ReplaceAllString(row, "") {
			t.Errorf("row %s changed in the move:\nbefore %s\nafter  %s", id, before[id], row)
		}
	}
	rep := maintain(t, tb, storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour})
	if len(rep.Created) != 1 || tableOf(t, tb, ids[1]) != rep.Created[0] {
		t.Errorf("maintenance after the move = %+v; want the rows of 3 days ago moved into a partition of their own", rep)
	}
	// Order carries on: a new event sorts after the moved ones, and the
	// key's events are claimed in order once the DELIVERING one finishes.
	next := tb.Insert(t, pgtest.Event{PartitionKey: "k"})[0]
	tb.Set(t, ids[2], "status = 'DELIVERED', delivered_at = now(), locked_by = NULL, locked_at = NULL")
	b, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 10, Ordering: storage.OrderingPartition, OnDead: storage.DeadSkip})
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(ids[3:]), next); !slices.Equal(eventIDs(b.Events), want) {
		t.Errorf("claimed %v after the move, want %v", eventIDs(b.Events), want)
	}
	// The new table has every index the schema creates, under its own names.
	for _, ix := range schema.Indexes(schema.Table{Name: schema.DefaultTable}) {
		var ok bool
		if err := tb.Store.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = $1::regclass AND c.relname = $2)`, tb.Name, ix.Name).Scan(&ok); err != nil || !ok {
			t.Errorf("after the move the table lacks index %s (%v)", ix.Name, err)
		}
	}
	// Inserts wake the relays on the new table.
	var triggers int
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'openoutbox_events_notify'",
		tb.Name).Scan(&triggers); err != nil || triggers != 1 {
		t.Errorf("the new table has %d notify triggers (%v), want 1", triggers, err)
	}
}

// TestMaintainPartitionsNeedsTheOwner: under the shipped least-privilege
// roles the relay's role may claim and settle on a partitioned table but
// not create or drop partitions; maintenance says so at once, takes no
// lock and changes nothing.
func TestMaintainPartitionsNeedsTheOwner(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	table, err := schema.ParseTable(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Store.ApplyGrants(ctx); err != nil {
		t.Fatal(err)
	}
	id := tb.InsertN(t, 1, "e")[0]
	tb.Set(t, id, "created_at = now() - interval '3 hours', status = 'DELIVERED', delivered_at = now() - interval '2 days'")
	before := partitionNames(t, tb)

	name := "outbox_relay_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	tb.Exec(t, "CREATE ROLE "+name+" LOGIN IN ROLE outbox_relay")
	t.Cleanup(func() { tb.Exec(t, "DROP ROLE "+name) })
	t.Cleanup(func() { tb.Exec(t, "DROP OWNED BY "+name) }) // its connection's leftovers, if the test fails
	u, err := url.Parse(tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	relay, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()

	if by, err := relay.Partitioning(ctx); err != nil || by != "hour" {
		t.Fatalf("Partitioning as outbox_relay = %q, %v", by, err)
	}
	if b := claim(t, relay, "r", 10); len(b.Events) != 0 {
		t.Fatalf("claimed %d events", len(b.Events))
	}
	_, err = relay.MaintainPartitions(ctx, storage.PartitionPolicy{Ahead: 48 * time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "does not own") || !strings.Contains(err.Error(), table.String()) {
		t.Fatalf("MaintainPartitions as outbox_relay = %v, want it refused for want of ownership", err)
	}
	if after := partitionNames(t, tb); !slices.Equal(before, after) {
		t.Errorf("partitions changed: %v, then %v", before, after)
	}
	// The owner role's members may.
	tb.Exec(t, "GRANT "+pgOwner(t, tb)+" TO "+name)
	t.Cleanup(func() { tb.Exec(t, "REVOKE "+pgOwner(t, tb)+" FROM "+name) })
	rep, err := relay.MaintainPartitions(ctx, storage.PartitionPolicy{Ahead: 48 * time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour})
	if err != nil || len(rep.Created) == 0 || len(rep.Dropped) != 1 {
		t.Fatalf("MaintainPartitions as a member of the owner role = %+v, %v; want partitions created and the delivered one dropped", rep, err)
	}
	// What it created belongs to the table's owner, so any other member
	// (another relay's login) may drop it later.
	var foreign int
	if err := tb.Store.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relowner <> (SELECT relowner FROM pg_class WHERE oid = $1::regclass)`, tb.Name).Scan(&foreign); err != nil || foreign != 0 {
		t.Errorf("%d partitions (%v) are not the table owner's", foreign, err)
	}
}

// pgOwner names the role that owns tb.
func pgOwner(t *testing.T, tb *pgtest.Table) string {
	t.Helper()
	var owner string
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT relowner::regrole::text FROM pg_class WHERE oid = $1::regclass", tb.Name).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	return owner
}

// TestMaintainPartitionsMovesNoMoreThanItsLimit: a period with more rows
// waiting in the default partition than the move limit gets no partition
// (the move would hold the table's lock too long); its rows stay in the
// default partition, claimable, and the report says so. Within the limit
// they move.
func TestMaintainPartitionsMovesNoMoreThanItsLimit(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	postgres.SetPartitionMoveLimit(tb.Store, 2)
	ids := tb.InsertN(t, 3, "e")
	tb.Exec(t, "UPDATE {{table}} SET created_at = now() - interval '5 hours' WHERE event_id = ANY($1)", ids)
	part := partitionOf(t, tb, "hour", createdAt(t, tb, ids[0]))
	policy := storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: time.Hour, DeadRetention: time.Hour}

	rep := maintain(t, tb, policy)
	if slices.Contains(rep.Created, part) || len(rep.Kept) != 1 || rep.Kept[0].Name != "openoutbox_events_default" ||
		!strings.Contains(rep.Kept[0].Reason, "more than 2 rows") || !strings.Contains(rep.Kept[0].Reason, part) {
		t.Fatalf("report = %+v; want %s not created and the default partition reported", rep, part)
	}
	for _, id := range ids {
		if got := tableOf(t, tb, id); got != "openoutbox_events_default" {
			t.Errorf("row %s moved to %s", id, got)
		}
	}
	postgres.SetPartitionMoveLimit(tb.Store, 3)
	if rep := maintain(t, tb, policy); !slices.Contains(rep.Created, part) || len(rep.Kept) != 1 || rep.Kept[0].Name != part {
		t.Fatalf("with room to move: %+v; want %s created, and kept for its PENDING rows", rep, part)
	}
	if b := claim(t, tb.Store, "r", 10); !slices.Equal(eventIDs(b.Events), ids) {
		t.Errorf("claimed %v, want %v", eventIDs(b.Events), ids)
	}
}

// TestMaintainPartitionsWaitsOutTheShorterRetention: a partition is looked
// at only once its range ended longer ago than the shorter retention, so
// partitions whose rows cannot all have expired are neither read nor
// reported; with no retention at all nothing is dropped.
func TestMaintainPartitionsWaitsOutTheShorterRetention(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	id := tb.InsertN(t, 1, "e")[0]
	tb.Set(t, id, "created_at = now() - interval '3 hours'")
	maintain(t, tb, storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: -1, DeadRetention: -1}) // moves it into its partition
	part := tableOf(t, tb, id)
	tb.Set(t, id, "status = 'DELIVERED', delivered_at = now() - interval '2 days'")

	for _, p := range []storage.PartitionPolicy{
		{Ahead: time.Hour, DeliveredRetention: 10 * time.Hour, DeadRetention: 10 * time.Hour},
		{Ahead: time.Hour, DeliveredRetention: -1, DeadRetention: -1},
		{Ahead: time.Hour, DeliveredRetention: -1, DeadRetention: 10 * time.Hour},
	} {
		if rep := maintain(t, tb, p); len(rep.Dropped)+len(rep.Kept) != 0 {
			t.Errorf("with %+v: %+v, want %s neither dropped nor reported", p, rep, part)
		}
	}
	rep := maintain(t, tb, storage.PartitionPolicy{Ahead: time.Hour, DeliveredRetention: time.Hour, DeadRetention: -1})
	if !slices.Equal(rep.Dropped, []string{part}) {
		t.Errorf("with an hour's retention: %+v, want %s dropped", rep, part)
	}
}
