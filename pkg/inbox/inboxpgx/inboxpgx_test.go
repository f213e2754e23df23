package inboxpgx_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/inbox"
	"github.com/outbox-relay/relay/pkg/inbox/inboxpgx"
)

var ctx = context.Background()

// newPool gives the test a schema of its own, first on the pool's
// search_path, holding the default inbox table and an effects table.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	space := strings.Split(pgtest.New(t).Name, ".")[0]
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = space
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The table's upkeep goes through database/sql, over the same pool.
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := inbox.Default().CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE effects (event_id text PRIMARY KEY, n int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return pool
}

func apply(id string) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, 1) ON CONFLICT (event_id) DO UPDATE SET n = effects.n + 1", id)
		return err
	}
}

func effects(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, _ := pool.Query(ctx, "SELECT event_id, n FROM effects")
	out := map[string]int{}
	var id string
	var n int
	_, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProcessAppliesOnceAndRollsBackOnError(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	errBoom := errors.New("boom")
	applied, err := inboxpgx.Process(ctx, nil, pool, "billing", "e1", func(tx pgx.Tx) error {
		_ = apply("e1")(tx)
		return errBoom
	})
	if applied || !errors.Is(err, errBoom) {
		t.Fatalf("failing handler = (%v, %v), want (false, its error)", applied, err)
	}
	for i, want := range []bool{true, false, false} {
		applied, err := inboxpgx.Process(ctx, nil, pool, "billing", "e1", apply("e1"))
		if err != nil || applied != want {
			t.Fatalf("delivery %d = (%v, %v), want (%v, nil)", i+1, applied, err, want)
		}
	}
	if got := effects(t, pool); got["e1"] != 1 {
		t.Fatalf("effect stored %d times, want 1", got["e1"])
	}
}

func TestRacingConsumersApplyOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const events, racers = 20, 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := map[string]int{}
	start := make(chan struct{})
	for i := range events * racers {
		id := fmt.Sprintf("e%d", i%events)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ok, err := inboxpgx.Process(ctx, nil, pool, "billing", id, apply(id))
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				applied[id]++
			}
		}()
	}
	close(start)
	wg.Wait()
	got := effects(t, pool)
	for i := range events {
		id := fmt.Sprintf("e%d", i)
		if applied[id] != 1 || got[id] != 1 {
			t.Errorf("%s applied by %d racers, stored %d times; want 1 and 1", id, applied[id], got[id])
		}
	}
}

// Given a pgx.Tx, Process works in a savepoint: the handler's error undoes
// its own work and record only, and the caller's transaction goes on.
func TestProcessJoinsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := apply("outer")(tx); err != nil {
			return err
		}
		if _, err := inboxpgx.Process(ctx, nil, tx, "billing", "bad", func(tx pgx.Tx) error {
			_ = apply("bad")(tx)
			return errors.New("refused")
		}); err == nil {
			t.Error("the failing handler's error was lost")
		}
		for i, want := range []bool{true, false} {
			applied, err := inboxpgx.Process(ctx, nil, tx, "billing", "good", apply("good"))
			if err != nil || applied != want {
				t.Errorf("delivery %d in the transaction = (%v, %v), want (%v, nil)", i+1, applied, err, want)
			}
		}
		fresh, err := inboxpgx.Record(ctx, nil, tx, "billing", "good")
		if err != nil || fresh {
			t.Errorf("Record of an event applied in this transaction = (%v, %v), want (false, nil)", fresh, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := effects(t, pool)
	if len(got) != 2 || got["outer"] != 1 || got["good"] != 1 {
		t.Fatalf("effects %v, want outer and good once", got)
	}
	// "bad" was rolled back with its savepoint: it is new.
	if applied, err := inboxpgx.Process(ctx, nil, pool, "billing", "bad", apply("bad")); !applied || err != nil {
		t.Fatalf("the failed event = (%v, %v), want applied now", applied, err)
	}
}

func TestProcessNeedsAPostgresInbox(t *testing.T) {
	t.Parallel()
	box, err := inbox.New(inbox.Config{Dialect: inbox.MySQL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inboxpgx.Process(ctx, box, nil, "c", "e", nil); err == nil || !strings.Contains(err.Error(), "Postgres") {
		t.Fatalf("a MySQL inbox: %v", err)
	}
}
