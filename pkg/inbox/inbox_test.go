package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/inbox"
)

var ctx = context.Background()

// Consumers racing on the same events apply each exactly once: one of
// them applies it, every other gets a duplicate and no error.
func TestRacingConsumersApplyEachEventOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		const events, racers = 25, 8
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		applied := map[string]int{}
		var errs []error
		for i := range events {
			id := fmt.Sprintf("event-%d", i)
			for range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ok, err := e.box.Process(ctx, e.db, "billing", id, e.apply(id))
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
					}
					if ok {
						applied[id]++
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d racers failed, first: %v", len(errs), errs[0])
		}
		counts := e.effectCounts(t)
		for i := range events {
			id := fmt.Sprintf("event-%d", i)
			if applied[id] != 1 || counts[id] != 1 {
				t.Errorf("%s: %d racers applied it, effect stored %d times; want 1 and 1", id, applied[id], counts[id])
			}
		}
		if n := len(e.records(t)); n != events {
			t.Errorf("inbox holds %d records, want %d", n, events)
		}
	})
}

var errBoom = errors.New("boom")

// A handler's error rolls the record back with the effect, so the next
// delivery applies the event; after that, deliveries are duplicates.
func TestHandlerErrorRollsBackTheRecord(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		failing := func(tx *sql.Tx) error {
			if err := e.apply("e1")(tx); err != nil {
				return err
			}
			return fmt.Errorf("charge card: %w", errBoom)
		}
		applied, err := e.box.Process(ctx, e.db, "billing", "e1", failing)
		if !errors.Is(err, errBoom) || applied {
			t.Fatalf("Process with a failing handler = (%v, %v), want (false, the handler's error)", applied, err)
		}
		if got := e.effectCounts(t); len(got) != 0 {
			t.Fatalf("the failed handler's effect was kept: %v", got)
		}
		if got := e.records(t); len(got) != 0 {
			t.Fatalf("the failed event's record was kept: %v", got)
		}

		applied, err = e.box.Process(ctx, e.db, "billing", "e1", e.apply("e1"))
		if err != nil || !applied {
			t.Fatalf("redelivery after the failure = (%v, %v), want (true, nil)", applied, err)
		}
		for range 3 {
			applied, err = e.box.Process(ctx, e.db, "billing", "e1", func(*sql.Tx) error {
				t.Error("the handler ran for a duplicate")
				return nil
			})
			if err != nil || applied {
				t.Fatalf("duplicate = (%v, %v), want (false, nil)", applied, err)
			}
		}
		if got := e.effectCounts(t); got["e1"] != 1 {
			t.Fatalf("effect stored %d times, want 1", got["e1"])
		}
	})
}

// A panicking handler leaves nothing behind either.
func TestHandlerPanicRollsBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not reach the caller")
				}
			}()
			_, _ = e.box.Process(ctx, e.db, "billing", "p1", func(tx *sql.Tx) error {
				_ = e.apply("p1")(tx)
				panic("handler bug")
			})
		}()
		if got := e.records(t); len(got) != 0 {
			t.Fatalf("record kept after a panic: %v", got)
		}
		if applied, err := e.box.Process(ctx, e.db, "billing", "p1", e.apply("p1")); !applied || err != nil {
			t.Fatalf("after the panic = (%v, %v), want (true, nil)", applied, err)
		}
	})
}

// A second delivery that arrives while the first is still being applied
// waits for it rather than calling itself a duplicate: were it acked and
// the first then failed, the event would be lost. When the first fails,
// the second applies the event; when it commits, the second is a
// duplicate.
func TestDuplicateWaitsForTheTransactionInFlight(t *testing.T) {
	t.Parallel()
	for _, firstFails := range []bool{true, false} {
		name := "first commits"
		if firstFails {
			name = "first fails"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, e *env) {
				recorded, release := make(chan struct{}), make(chan struct{})
				// A failing test must not leave the first transaction
				// open: dropping the test's database would wait for it.
				releaseOnce := sync.OnceFunc(func() { close(release) })
				defer releaseOnce()
				firstDone := make(chan error, 1)
				go func() {
					_, err := e.box.Process(ctx, e.db, "billing", "e1", func(tx *sql.Tx) error {
						if err := e.apply("e1")(tx); err != nil {
							return err
						}
						close(recorded)
						<-release
						if firstFails {
							return errBoom
						}
						return nil
					})
					firstDone <- err
				}()
				<-recorded
				type result struct {
					applied bool
					err     error
				}
				second := make(chan result, 1)
				go func() {
					applied, err := e.box.Process(ctx, e.db, "billing", "e1", e.apply("e1"))
					second <- result{applied, err}
				}()
				eventually.True(t, 30*time.Second, func() bool { return e.waitingForLocks(t) > 0 },
					func() string { return "the second delivery waiting on the first's record" })
				select {
				case r := <-second:
					t.Fatalf("the second delivery returned (%v, %v) while the first was in flight", r.applied, r.err)
				default:
				}
				releaseOnce()
				if err := <-firstDone; firstFails != (err != nil) {
					t.Fatalf("first delivery: %v", err)
				}
				r := <-second
				if r.err != nil || r.applied != firstFails {
					t.Fatalf("second delivery = (%v, %v), want (%v, nil)", r.applied, r.err, firstFails)
				}
				if got := e.effectCounts(t)["e1"]; got != 1 {
					t.Fatalf("effect stored %d times, want 1", got)
				}
			})
		})
	}
}

// Each consumer applies an event once for itself: the record is per
// consumer name.
func TestConsumersAreIndependent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		for _, c := range []string{"billing", "shipping", "billing", "shipping"} {
			if _, err := e.box.Process(ctx, e.db, c, "e1", func(*sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		want := map[string]bool{"billing/e1": true, "shipping/e1": true}
		if got := e.records(t); len(got) != 2 || !got["billing/e1"] || !got["shipping/e1"] {
			t.Fatalf("records %v, want %v", got, want)
		}
	})
}

// Ids are compared byte for byte: no case folding, no trailing-space
// padding (a MySQL VARCHAR's default collation would do both).
func TestIDsAreExact(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		for _, id := range []string{"abc", "ABC", "abc ", "äbc", strings.Repeat("x", inbox.MaxIDLen)} {
			applied, err := e.box.Process(ctx, e.db, "billing", id, func(*sql.Tx) error { return nil })
			if err != nil || !applied {
				t.Errorf("Process(%q) = (%v, %v), want a new event", id, applied, err)
			}
		}
	})
}

// Ids the table cannot hold exactly are refused before the database sees
// them, with ErrInvalidID.
func TestInvalidIDsAreRefused(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		cases := map[string][2]string{
			"empty event id":    {"billing", ""},
			"empty consumer":    {"", "e1"},
			"event id too long": {"billing", strings.Repeat("x", inbox.MaxIDLen+1)},
			"consumer too long": {strings.Repeat("c", inbox.MaxIDLen+1), "e1"},
			"NUL in event id":   {"billing", "e\x001"},
			"not UTF-8":         {"billing", "e\xff"},
		}
		for name, c := range cases {
			_, err := e.box.Process(ctx, e.db, c[0], c[1], func(*sql.Tx) error {
				t.Errorf("%s: the handler ran", name)
				return nil
			})
			if !errors.Is(err, inbox.ErrInvalidID) {
				t.Errorf("%s: %v, want ErrInvalidID", name, err)
			}
		}
		if got := e.records(t); len(got) != 0 {
			t.Fatalf("records %v, want none", got)
		}
	})
}

// Record joins a transaction of the caller's: several events in one
// transaction, all rolled back or all committed with the caller's work.
func TestRecordJoinsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		batch := func(commit bool) []bool {
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var fresh []bool
			for _, id := range []string{"a", "b", "a"} {
				ok, err := e.box.Record(ctx, tx, "billing", id)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					if err := e.apply(id)(tx); err != nil {
						t.Fatal(err)
					}
				}
				fresh = append(fresh, ok)
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			return fresh
		}
		if got := batch(false); fmt.Sprint(got) != "[true true false]" {
			t.Fatalf("first batch fresh = %v, want [true true false] (a repeats within it)", got)
		}
		if got := e.records(t); len(got) != 0 {
			t.Fatalf("rolled-back batch left records %v", got)
		}
		if got := batch(true); fmt.Sprint(got) != "[true true false]" {
			t.Fatalf("batch after the rollback fresh = %v, want [true true false]", got)
		}
		if got := batch(true); fmt.Sprint(got) != "[false false false]" {
			t.Fatalf("repeated batch fresh = %v, want all duplicates", got)
		}
		if got := e.effectCounts(t); got["a"] != 1 || got["b"] != 1 {
			t.Fatalf("effects %v, want a and b once", got)
		}
	})
}

// The package-level functions use the table "inbox" on PostgreSQL.
func TestPackageFunctionsUseTheDefaultInbox(t *testing.T) {
	t.Parallel()
	e := openPostgres(t)
	// The default table is unqualified: this connection finds the test's
	// schema first.
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET search_path TO "+e.space); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		applied, err := inbox.Process(ctx, conn, "billing", "d1", e.apply("d1"))
		if err != nil || applied != want {
			t.Fatalf("delivery %d = (%v, %v), want (%v, nil)", i+1, applied, err, want)
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if fresh, err := inbox.Record(ctx, tx, "billing", "d1"); fresh || err != nil {
		t.Fatalf("Record of an applied event = (%v, %v), want (false, nil)", fresh, err)
	}
	if inbox.Default().Table() != inbox.TableDefault || inbox.Default().Dialect() != inbox.Postgres {
		t.Fatalf("default inbox is %s on %s", inbox.Default().Table(), inbox.Default().Dialect())
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	bad := map[string]inbox.Config{
		"SQL in the table name": {Table: "inbox; DROP TABLE users"},
		"upper case":            {Table: "Inbox"},
		"three parts":           {Table: "a.b.c"},
		"unknown dialect":       {Dialect: inbox.Dialect(7)},
	}
	for name, cfg := range bad {
		if _, err := inbox.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	for _, cfg := range []inbox.Config{{}, {Table: "app.billing_inbox"}, {Dialect: inbox.MySQL, Table: "shop.inbox"}} {
		if _, err := inbox.New(cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

// go-sql-driver/mysql's DSN options that change what a statement reports
// or how it is sent leave duplicates recognised: clientFoundRows (rows
// matched rather than changed) and interpolateParams (arguments put into
// the text client-side).
func TestMySQLDriverOptions(t *testing.T) {
	t.Parallel()
	e := openMySQL(t)
	db, err := sql.Open("mysql", mysqlDSN()+e.space+"?clientFoundRows=true&interpolateParams=true")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, want := range []bool{true, false, false} {
		applied, err := e.box.Process(ctx, db, "billing", "o1", e.apply("o1"))
		if err != nil || applied != want {
			t.Fatalf("delivery %d = (%v, %v), want (%v, nil)", i+1, applied, err, want)
		}
	}
	if _, err := e.box.Prune(ctx, db, inbox.PruneParams{OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
}
