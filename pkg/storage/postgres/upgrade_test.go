package postgres_test

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/producers"
	"github.com/outbox-relay/relay/internal/syncbuf"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// previousSchema is schema.sql as an earlier release (2048ed7) made the
// table: eleven indexes, several of which this release replaces, built
// in one transaction.
//
//go:embed testdata/schema_2048ed7.sql
var previousSchema string

// previousTable creates, in a database of its own (CREATE INDEX
// CONCURRENTLY waits for every older transaction in its database), the
// outbox table as the earlier release made it, with rows events in it (a
// few unfinished, the rest delivered, a quarter with a key), and opens a
// store on it.
func previousTable(t testing.TB, rows int) (*postgres.Store, string) {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	name := "openoutbox_events"
	tbl, err := schema.ParseTable(name)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schema.Expand(previousSchema, tbl), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("the earlier release's schema: %v", err)
	}
	for done := 0; done < rows; done += 500_000 {
		n := min(500_000, rows-done)
		if _, err := pool.Exec(ctx, schema.Expand(`INSERT INTO {{table}}
			(event_type, payload, partition_key, status, delivered_at, created_at, updated_at)
			SELECT 'order.created', convert_to(repeat('x', 200), 'UTF8'),
			       CASE WHEN g % 4 = 0 THEN 'k' || (g % 1000) END,
			       CASE WHEN g % 100 = 0 THEN 'PENDING' ELSE 'DELIVERED' END,
			       CASE WHEN g % 100 = 0 THEN NULL ELSE now() END,
			       now() - interval '1 day' + g * interval '1 ms', now()
			FROM generate_series($1::bigint, $2::bigint) AS g`, tbl), done+1, done+n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+tbl.Quoted()); err != nil {
		t.Fatal(err)
	}
	store, err := postgres.Open(ctx, storage.URLWithTable(dbURL, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store, dbURL
}

// waitForReport waits until a session other than this test's reads table
// (pg_stat_activity), holding its lock.
func waitForReport(t testing.TB, store *postgres.Store) {
	t.Helper()
	eventually.True(t, 10*time.Second, func() bool {
		var n int
		if err := store.Pool().QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%pg_sleep(3)%' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}, func() string { return "the report never started" })
}

// startProducers starts n producers, each on a connection of its own
// with lock_timeout set, inserting one event per transaction into the
// outbox table of the database at dbURL.
func startProducers(t testing.TB, dbURL string, n int, lockTimeout time.Duration) *producers.Run {
	t.Helper()
	ctx := context.Background()
	inserts := make([]func() error, n)
	for i := range inserts {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(ctx) })
		if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", lockTimeout.Milliseconds())); err != nil {
			t.Fatal(err)
		}
		inserts[i] = func() error {
			_, err := conn.Exec(ctx, "INSERT INTO openoutbox_events (event_type, payload, partition_key) VALUES ('order.created', '\\x00', 'k1')")
			return err
		}
	}
	return producers.Start(inserts...)
}

// A migration of a table of the earlier release, which builds indexes and
// drops those of the earlier release (--cleanup), while producers insert
// with a lock_timeout of 2 s, as an application that must not hang would,
// and a report reads the table for 3 s: no insert fails. Before, migrate
// ran in one transaction: its CREATE INDEX held a SHARE lock until it
// committed, and its DROP INDEX waited behind the report for an ACCESS
// EXCLUSIVE one, with every insert queued behind it.
func TestMigrateOfABusyTableBlocksNoWriter(t *testing.T) {
	t.Parallel()
	store, dbURL := previousTable(t, 300_000)
	p := startProducers(t, dbURL, 2, 2*time.Second)
	report := make(chan error, 1)
	go func() {
		_, err := store.Pool().Exec(context.Background(), "SELECT count(*), pg_sleep(3) FROM (SELECT 1 FROM openoutbox_events LIMIT 1) AS one")
		report <- err
	}()
	waitForReport(t, store)
	var progress syncbuf.Buffer
	res, err := store.Migrate(context.Background(), storage.MigrateOptions{Cleanup: true,
		Progress: func(msg string) { fmt.Fprintln(&progress, msg) }})
	during := p.Inserted()
	_, longest, errs := p.Halt()
	if err := <-report; err != nil {
		t.Fatalf("the report: %v", err)
	}
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, progress.String())
	}
	t.Logf("migrate created %d and dropped %d objects; producers inserted %d rows meanwhile, the longest insert took %s",
		len(res.Created), len(res.Dropped), during, longest)
	if len(errs) > 0 {
		t.Fatalf("%d inserts failed while migrate ran, the first: %v", len(errs), errs[0])
	}
	if len(res.Created) < 8 || len(res.Dropped) < 6 {
		t.Fatalf("migrate created %v and dropped %v: the test needs it to build and drop indexes", res.Created, res.Dropped)
	}
	if during == 0 {
		t.Fatal("no insert went through while migrate ran")
	}
	for _, want := range []string{"building index", "built index"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("migrate's progress never said %q:\n%s", want, progress.String())
		}
	}
}

// An index a CREATE INDEX CONCURRENTLY cut short left INVALID is built
// again by the next migrate, which says so.
func TestMigrateRebuildsAnInvalidIndex(t *testing.T) {
	t.Parallel()
	store, _ := previousTable(t, 0)
	ctx := context.Background()
	if _, err := store.Migrate(ctx, storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What an interrupted build leaves: the index exists, marked invalid.
	if _, err := store.Pool().Exec(ctx, "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'openoutbox_events_frontier_idx'::regclass"); err != nil {
		t.Fatal(err)
	}
	res, err := store.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Rebuilt, []string{"index openoutbox_events_frontier_idx"}) {
		t.Fatalf("Rebuilt = %v, want the invalid index", res.Rebuilt)
	}
	var valid bool
	if err := store.Pool().QueryRow(ctx, "SELECT indisvalid FROM pg_index WHERE indexrelid = 'openoutbox_events_frontier_idx'::regclass").Scan(&valid); err != nil || !valid {
		t.Fatalf("after migrate the index is valid: %v, %v", valid, err)
	}
}

// --plan changes nothing and says, for each statement, whether it blocks
// writers; the indexes of the earlier release stay without --cleanup.
func TestMigratePlanChangesNothing(t *testing.T) {
	t.Parallel()
	store, _ := previousTable(t, 1000)
	ctx := context.Background()
	res, err := store.Migrate(ctx, storage.MigrateOptions{Plan: true, Cleanup: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.TableBytes <= 0 || len(res.Plan) == 0 {
		t.Fatalf("plan = %+v, want the table's size and steps", res)
	}
	for _, st := range res.Plan {
		if st.Blocks != "no" && st.Blocks != "briefly" {
			t.Errorf("step %q blocks writers %q", st.SQL, st.Blocks)
		}
		if strings.HasPrefix(st.SQL, "CREATE INDEX") && !strings.Contains(st.SQL, "CONCURRENTLY") {
			t.Errorf("step %q builds an index that blocks writers", st.SQL)
		}
	}
	again, err := store.Migrate(ctx, storage.MigrateOptions{Plan: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Plan) != len(res.Plan)-len(again.Kept) || len(again.Kept) == 0 {
		t.Fatalf("a second plan (without --cleanup) has %d steps and keeps %v; the first had %d: the plan changed something",
			len(again.Plan), again.Kept, len(res.Plan))
	}
	done, err := store.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(done.Dropped) != 0 || !slices.Equal(done.Kept, again.Kept) {
		t.Fatalf("migrate without --cleanup dropped %v and kept %v, want nothing dropped and %v kept", done.Dropped, done.Kept, again.Kept)
	}
}

var upgradeRows = flag.Int("upgrade.rows", 3_000_000, "rows in the table BenchmarkUpgrade migrates")

// BenchmarkUpgrade (make bench MODE=upgrade ROWS=…) measures the longest
// producer insert while migrate upgrades a table of the earlier release,
// with four producers inserting one event per transaction throughout.
func BenchmarkUpgrade(b *testing.B) {
	for range b.N {
		store, dbURL := previousTable(b, *upgradeRows)
		var size int64
		_ = store.Pool().QueryRow(context.Background(), "SELECT pg_total_relation_size('openoutbox_events')").Scan(&size)
		p := startProducers(b, dbURL, 4, time.Minute)
		start := time.Now()
		res, err := store.Migrate(context.Background(), storage.MigrateOptions{Cleanup: true,
			Progress: func(msg string) { b.Logf("%s %s", time.Since(start).Round(time.Millisecond), msg) }})
		took := time.Since(start)
		inserted, longest, errs := p.Halt()
		if err != nil {
			b.Fatal(err)
		}
		if len(errs) > 0 {
			b.Fatalf("%d inserts failed: %v", len(errs), errors.Join(errs...))
		}
		b.Logf("%d rows (%d MB): migrate took %s (%d created, %d dropped); %d inserts meanwhile, the longest %s",
			*upgradeRows, size>>20, took.Round(time.Millisecond), len(res.Created), len(res.Dropped), inserted, longest)
		b.ReportMetric(longest.Seconds(), "longest-insert-s")
		b.ReportMetric(took.Seconds(), "migrate-s")
	}
}

// An index missing from a partitioned table with rows is built without
// blocking writers: ON ONLY the parent, then CONCURRENTLY on each
// partition, each attached; the parent's index is valid at the end.
func TestMigrateBuildsAPartitionedTablesIndexPartitionByPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := postgres.Open(ctx, storage.URLWithTable(pgtest.NewDatabase(t), "openoutbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	if _, err := store.MigratePartitioned(ctx, "day", storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Pool().Exec(ctx, "INSERT INTO openoutbox_events (event_type, payload, status, delivered_at) "+
		"SELECT 'e', '\\x00', 'DEAD', now() FROM generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Pool().Exec(ctx, "DROP INDEX openoutbox_events_dead_idx"); err != nil {
		t.Fatal(err)
	}
	plan, err := store.MigratePartitioned(ctx, "day", storage.MigrateOptions{Plan: true})
	if err != nil {
		t.Fatal(err)
	}
	var sqls []string
	for _, st := range plan.Plan {
		sqls = append(sqls, st.SQL)
	}
	all := strings.Join(sqls, "\n")
	for _, want := range []string{`ON ONLY "openoutbox_events"`, "CREATE INDEX CONCURRENTLY", "ATTACH PARTITION"} {
		if !strings.Contains(all, want) {
			t.Errorf("the plan lacks %q:\n%s", want, all)
		}
	}
	res, err := store.MigratePartitioned(ctx, "day", storage.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Created, "index openoutbox_events_dead_idx") {
		t.Fatalf("created %v, want the dead index", res.Created)
	}
	var valid bool
	var partitions, attached int
	if err := store.Pool().QueryRow(ctx, `SELECT x.indisvalid,
			(SELECT count(*) FROM pg_inherits WHERE inhparent = 'openoutbox_events'::regclass),
			(SELECT count(*) FROM pg_inherits WHERE inhparent = 'openoutbox_events_dead_idx'::regclass)
		FROM pg_index x WHERE x.indexrelid = 'openoutbox_events_dead_idx'::regclass`).Scan(&valid, &partitions, &attached); err != nil {
		t.Fatal(err)
	}
	if !valid || attached != partitions || partitions < 2 {
		t.Fatalf("the partitioned index is valid %v with %d of %d partitions' indexes attached", valid, attached, partitions)
	}
	again, err := store.MigratePartitioned(ctx, "day", storage.MigrateOptions{Plan: true})
	if err != nil || len(again.Plan) != 1 {
		t.Fatalf("a plan after the build = %+v, %v; want the base step alone", again.Plan, err)
	}
}
