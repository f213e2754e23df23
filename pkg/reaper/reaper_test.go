package reaper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/storage"
)

// abandon claims every pending row as a relay that then "crashes", and
// ages the leases past any timeout.
func abandon(t *testing.T, tb *pgtest.Table, relayID string) {
	t.Helper()
	for {
		b, err := tb.Store.Claim(context.Background(), storage.ClaimParams{RelayID: relayID, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) == 0 {
			break
		}
	}
	tb.Exec(t, "UPDATE {{table}} SET locked_at = now() - interval '1 hour' WHERE status = 'DELIVERING'")
}

func newReaper(t *testing.T, tb *pgtest.Table, cfg reaper.Config) *reaper.Reaper {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = time.Hour
	}
	if cfg.LeaseTimeout == 0 {
		cfg.LeaseTimeout = time.Minute
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 100
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 25
	}
	r, err := reaper.New(cfg, tb.Store)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReapRequeuesAbandonedLeasesWithAnAttemptCounted(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 250, "reap.me")
	abandon(t, tb, "crashed-relay")
	fresh := tb.InsertN(t, 3, "fresh")
	if _, err := tb.Store.Claim(context.Background(), storage.ClaimParams{RelayID: "alive", Limit: 10}); err != nil {
		t.Fatal(err)
	}

	obs := &reapCounter{}
	r := newReaper(t, tb, reaper.Config{BatchSize: 100, Observer: obs})
	got, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Requeued != len(ids) || got.Dead != 0 {
		t.Fatalf("RunOnce = %+v, want %d requeued in batches of 100", got, len(ids))
	}
	// 250 rows in batches of 100: three full or partial statements.
	if obs.total != got || obs.statements != 3 {
		t.Errorf("the observer saw %+v in %d statements, RunOnce returned %+v in 3", obs.total, obs.statements, got)
	}
	for _, id := range ids {
		row := tb.Get(t, id)
		if row.Status != outbox.StatusPending || row.Attempts != 1 || row.LastError != "lease expired (relay crashed-relay)" || row.LockedBy != "" {
			t.Fatalf("reaped row = %+v", row)
		}
	}
	for _, id := range fresh {
		if row := tb.Get(t, id); row.Status != outbox.StatusDelivering || row.LockedBy != "alive" {
			t.Fatalf("a live lease was reaped: %+v", row)
		}
	}
}

// reapCounter is a reaper.Observer that adds up what each statement took
// back.
type reapCounter struct {
	reaper.NopObserver
	statements int
	total      storage.ReapResult
}

func (c *reapCounter) StartReap(ctx context.Context) (context.Context, func(storage.ReapResult, error)) {
	return ctx, func(res storage.ReapResult, err error) {
		if err == nil {
			c.statements++
			c.total.Requeued += res.Requeued
			c.total.Dead += res.Dead
		}
	}
}

func TestReapBuriesRowsThatReachTheAttemptLimit(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 2, "crashy")
	tb.Exec(t, "UPDATE {{table}} SET attempts = 2 WHERE event_id = $1", ids[0])
	abandon(t, tb, "r1")

	got, err := newReaper(t, tb, reaper.Config{MaxAttempts: 3}).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Dead != 1 || got.Requeued != 1 {
		t.Fatalf("RunOnce = %+v, want 1 dead and 1 requeued", got)
	}
	if row := tb.Get(t, ids[0]); row.Status != outbox.StatusDead || row.Attempts != 3 {
		t.Fatalf("row at the limit = %+v, want DEAD with 3 attempts", row)
	}
}

func TestReapersRunningTogetherReapEachRowOnce(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	const n = 3000
	tb.InsertN(t, n, "contended")
	abandon(t, tb, "gone")

	var wg sync.WaitGroup
	totals := make([]storage.ReapResult, 4)
	for i := range totals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := newReaper(t, tb, reaper.Config{BatchSize: 50}).RunOnce(context.Background())
			if err != nil {
				t.Error(err)
			}
			totals[i] = res
		}()
	}
	wg.Wait()
	sum := 0
	for _, r := range totals {
		sum += r.Requeued
	}
	if sum != n {
		t.Fatalf("reapers requeued %d rows in all, want %d", sum, n)
	}
	if twice := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts <> 1"); twice != 0 {
		t.Fatalf("%d rows were reaped more than once", twice)
	}
}

func TestRunReapsOnItsInterval(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 10, "later")
	r := newReaper(t, tb, reaper.Config{Interval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Whichever pass finds the abandoned leases, Run must requeue them.
	abandon(t, tb, "late")
	eventually.True(t, 10*time.Second, func() bool { return tb.Counts(t)[outbox.StatusPending] == 10 },
		func() string { return "rows requeued by a later pass" })
}
