package inbox_test

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/relay/pkg/inbox"
)

// CreateTable is idempotent and reports what it made; several at once
// neither fail nor make two of anything.
func TestCreateTableIsIdempotent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		box := newInbox(t, inbox.Config{Dialect: e.box.Dialect(), Table: e.space + ".second_inbox"})
		var wg sync.WaitGroup
		results := make([]inbox.CreateResult, 4)
		errs := make([]error, 4)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = box.CreateTable(ctx, e.db)
			}()
		}
		wg.Wait()
		created := 0
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent CreateTable: %v", err)
			}
			created += len(results[i].Created)
		}
		want := []string{"table second_inbox", "index second_inbox_processed_at_idx"}
		// PostgreSQL runs them one after the other under the migration
		// lock; MySQL, without one, may report an object created by two
		// runs that both missed it before.
		if created != 2 && e.box.Dialect() == inbox.Postgres {
			t.Errorf("concurrent runs created %d objects in all, want 2: %+v", created, results)
		}
		res, err := box.CreateTable(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Created) != 0 || !slices.Equal(res.Existed, want) {
			t.Fatalf("second run: %+v, want everything existing: %v", res, want)
		}
		if err := box.Check(ctx, e.db); err != nil {
			t.Fatal(err)
		}
		if applied, err := box.Process(ctx, e.db, "c", "e", func(*sql.Tx) error { return nil }); !applied || err != nil {
			t.Fatalf("Process on the new table = (%v, %v)", applied, err)
		}
	})
}

// A table of the inbox's name that is something else is reported, not
// taken for an inbox; a missing one is ErrTableMissing with the fix.
func TestForeignAndMissingTables(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		mustExec(t, e.db, "CREATE TABLE "+e.space+".messages (id INT PRIMARY KEY, body TEXT)")
		box := newInbox(t, inbox.Config{Dialect: e.box.Dialect(), Table: e.space + ".messages"})
		if _, err := box.CreateTable(ctx, e.db); err == nil || !strings.Contains(err.Error(), "is not an inbox table") {
			t.Errorf("CreateTable over a foreign table: %v, want 'is not an inbox table'", err)
		}
		if err := box.Check(ctx, e.db); err == nil || !strings.Contains(err.Error(), "is not an inbox table") {
			t.Errorf("Check of a foreign table: %v", err)
		}
		missing := newInbox(t, inbox.Config{Dialect: e.box.Dialect(), Table: e.space + ".nothing_here"})
		err := missing.Check(ctx, e.db)
		if !errors.Is(err, inbox.ErrTableMissing) || !strings.Contains(err.Error(), "relay-cli migrate --inbox") {
			t.Errorf("Check of a missing table: %v, want ErrTableMissing and the fix", err)
		}
		if _, err := missing.Prune(ctx, e.db, inbox.PruneParams{OlderThan: time.Hour}); !errors.Is(err, inbox.ErrTableMissing) {
			t.Errorf("Prune of a missing table: %v, want ErrTableMissing", err)
		}
	})
}

// SchemaSQL is what CreateTable applies, for the dialect and table name.
func TestSchemaSQL(t *testing.T) {
	t.Parallel()
	pg := newInbox(t, inbox.Config{Table: "app.billing_inbox"}).SchemaSQL()
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "app"."billing_inbox"`, "PRIMARY KEY (consumer, event_id)",
		`CREATE INDEX IF NOT EXISTS "billing_inbox_processed_at_idx" ON "app"."billing_inbox" (processed_at)`} {
		if !strings.Contains(pg, want) {
			t.Errorf("PostgreSQL schema lacks %q:\n%s", want, pg)
		}
	}
	my := newInbox(t, inbox.Config{Dialect: inbox.MySQL}).SchemaSQL()
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS `inbox`", "VARBINARY(255)", "KEY `inbox_processed_at_idx` (processed_at)"} {
		if !strings.Contains(my, want) {
			t.Errorf("MySQL schema lacks %q:\n%s", want, my)
		}
	}
}

// Prune deletes records older than the window, in batches, of one
// consumer or all, and a dry run only counts.
func TestPrune(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		record := func(consumer string, n int, hoursAgo int) {
			for i := range n {
				id := fmt.Sprintf("%dh-%d", hoursAgo, i)
				if _, err := e.box.Process(ctx, e.db, consumer, id, func(*sql.Tx) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if hoursAgo > 0 {
				mustExec(t, e.db, fmt.Sprintf("UPDATE %s.inbox SET processed_at = %s WHERE consumer = '%s' AND event_id LIKE '%dh-%%'",
					e.space, fmt.Sprintf(e.ago, hoursAgo), consumer, hoursAgo))
			}
		}
		record("billing", 7, 48)
		record("billing", 3, 0)
		record("shipping", 5, 48)
		record("shipping", 2, 1)

		prune := func(p inbox.PruneParams) inbox.PruneResult {
			t.Helper()
			res, err := e.box.Prune(ctx, e.db, p)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		if res := prune(inbox.PruneParams{OlderThan: 24 * time.Hour, DryRun: true}); res.Deleted != 12 {
			t.Fatalf("dry run counted %d, want 12", res.Deleted)
		}
		if res := prune(inbox.PruneParams{OlderThan: 24 * time.Hour, Consumer: "billing", DryRun: true}); res.Deleted != 7 {
			t.Fatalf("dry run for billing counted %d, want 7", res.Deleted)
		}
		if n := len(e.records(t)); n != 17 {
			t.Fatalf("a dry run deleted: %d records left, want 17", n)
		}

		var progress []int64
		res := prune(inbox.PruneParams{OlderThan: 24 * time.Hour, Consumer: "billing", BatchSize: 3,
			Progress: func(n int64) { progress = append(progress, n) }})
		if res.Deleted != 7 || res.Batches != 3 || fmt.Sprint(progress) != "[3 6 7]" {
			t.Fatalf("prune billing = %+v with progress %v, want 7 in 3 batches, [3 6 7]", res, progress)
		}
		left := e.records(t)
		if len(left) != 10 || !left["shipping/48h-0"] || !left["billing/0h-2"] {
			t.Fatalf("after pruning billing: %d records %v, want the 3 new billing and 7 shipping", len(left), left)
		}

		if res := prune(inbox.PruneParams{OlderThan: 24 * time.Hour}); res.Deleted != 5 || res.Batches != 1 {
			t.Fatalf("prune all = %+v, want 5 in 1 batch", res)
		}
		if res := prune(inbox.PruneParams{OlderThan: 30 * time.Minute}); res.Deleted != 2 {
			t.Fatalf("prune older than 30m = %+v, want the 2 shipping records of an hour ago", res)
		}
		left = e.records(t)
		if len(left) != 3 {
			t.Fatalf("left %v, want the 3 new billing records", left)
		}
		// A pruned event is new again: why the window must exceed every
		// redelivery.
		if applied, err := e.box.Process(ctx, e.db, "billing", "48h-0", func(*sql.Tx) error { return nil }); !applied || err != nil {
			t.Fatalf("pruned event = (%v, %v), want applied again", applied, err)
		}

		for name, p := range map[string]inbox.PruneParams{
			"negative age":   {OlderThan: -time.Hour},
			"negative batch": {OlderThan: time.Hour, BatchSize: -1},
			"bad consumer":   {OlderThan: time.Hour, Consumer: strings.Repeat("c", 300)},
		} {
			if _, err := e.box.Prune(ctx, e.db, p); err == nil {
				t.Errorf("%s: Prune accepted %+v", name, p)
			}
		}
	})
}
