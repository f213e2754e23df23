package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/storage"
)

// TestBacklogGaugesReadTheTable fills a real table with new, retrying,
// dead and delivered rows and checks that one poll puts each number in its
// gauge, and that a failed poll keeps the last reading.
func TestBacklogGaugesReadTheTable(t *testing.T) {
	t.Parallel()
	tel, reader, _ := setup(t, telemetry.Config{BacklogInterval: time.Hour})
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 6, "backlog.test")
	tb.Exec(t, "UPDATE {{table}} SET attempts = 2 WHERE event_id = $1", ids[0])
	tb.Exec(t, "UPDATE {{table}} SET status = 'DEAD', attempts = 25 WHERE event_id = ANY($1)", ids[1:3])
	tb.Exec(t, "UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() WHERE event_id = $1", ids[3])
	tb.Exec(t, "UPDATE {{table}} SET created_at = now() - interval '1 hour' WHERE event_id = $1", ids[4])

	p := tel.PollBacklog(tb.Store, nil)
	if _, ok, _ := p.Last(); ok {
		t.Fatal("a reading before the first poll")
	}
	if _, ok := collect(t, reader).value(telemetry.MetricPendingCount); ok {
		t.Fatal("pending gauge reported before the first poll")
	}
	if err := p.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, ok, err := p.Last()
	if !ok || err != nil {
		t.Fatalf("Last = %+v, %v, %v", r, ok, err)
	}
	if r.PendingNew != 2 || r.PendingRetrying != 1 || r.Dead != 2 || r.OldestPendingAge < time.Hour {
		t.Errorf("reading %+v, want 2 new, 1 retrying, 2 dead, oldest ≥ 1h", r.Backlog)
	}
	check := func() {
		t.Helper()
		m := collect(t, reader)
		for _, c := range []struct {
			name string
			kv   []string
			want float64
		}{
			{telemetry.MetricPendingCount, []string{"status", "new"}, 2},
			{telemetry.MetricPendingCount, []string{"status", "retrying"}, 1},
			{telemetry.MetricDeadCount, nil, 2},
		} {
			if got := m.mustValue(t, c.name, c.kv...); got != c.want {
				t.Errorf("%s%v = %g, want %g", c.name, c.kv, got, c.want)
			}
		}
		if age := m.mustValue(t, telemetry.MetricOldestAge); age < 3600 || age > 3700 {
			t.Errorf("oldest age gauge %g s, want about 3600", age)
		}
		if n, _ := m.histogram(telemetry.MetricStorageLatency, "op", "backlog"); n == 0 {
			t.Errorf("the backlog query is not timed")
		}
	}
	check()

	// The database fails: the gauges keep the last reading and the error
	// is reported.
	tb.Exec(t, "DROP TABLE {{table}}")
	if err := p.RunOnce(context.Background()); err == nil {
		t.Fatal("reading a dropped table succeeded")
	}
	if r2, ok, err := p.Last(); !ok || err == nil || r2 != r {
		t.Errorf("after a failed read Last = %+v, %v, %v; want the old reading and the error", r2, ok, err)
	}
	check()
}

func TestBacklogPollerRunsOnItsInterval(t *testing.T) {
	t.Parallel()
	tel, _, _ := setup(t, telemetry.Config{BacklogInterval: 20 * time.Millisecond})
	tb := pgtest.New(t)
	p := tel.PollBacklog(tb.Store, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	eventually.True(t, 10*time.Second, func() bool { _, ok, _ := p.Last(); return ok }, func() string { return "a first reading" })
	tb.InsertN(t, 3, "later")
	eventually.True(t, 10*time.Second, func() bool { r, _, _ := p.Last(); return r.PendingNew == 3 },
		func() string { return "a reading with the 3 new events" })
	cancel()
	<-done
}

// TestReaperReclaimedAndTimed runs the real reaper over abandoned leases
// with the observer cmd/relay gives it.
func TestReaperReclaimedAndTimed(t *testing.T) {
	t.Parallel()
	tel, reader, _ := setup(t, telemetry.Config{})
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 3, "crashy")
	tb.Exec(t, "UPDATE {{table}} SET attempts = 4 WHERE event_id = $1", ids[0])
	if _, err := tb.Store.Claim(context.Background(), storage.ClaimParams{RelayID: "crashed", Limit: 10}); err != nil {
		t.Fatal(err)
	}
	tb.Exec(t, "UPDATE {{table}} SET locked_at = now() - interval '1 hour' WHERE status = 'DELIVERING'")

	m := collect(t, reader)
	for _, outcome := range []string{"requeued", "dead"} {
		if got := m.mustValue(t, telemetry.MetricReaperReclaimed, "outcome", outcome); got != 0 {
			t.Errorf("reclaimed{outcome=%s} starts at %g", outcome, got)
		}
	}
	rp, err := reaper.New(reaper.Config{
		Interval: time.Hour, LeaseTimeout: time.Minute, BatchSize: 100, MaxAttempts: 5,
		Observer: tel.ReaperObserver(),
	}, tb.Store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rp.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	m = collect(t, reader)
	if got := m.mustValue(t, telemetry.MetricReaperReclaimed, "outcome", "requeued"); got != 2 {
		t.Errorf("reclaimed{outcome=requeued} = %g, want 2", got)
	}
	if got := m.mustValue(t, telemetry.MetricReaperReclaimed, "outcome", "dead"); got != 1 {
		t.Errorf("reclaimed{outcome=dead} = %g, want 1", got)
	}
	if n, _ := m.histogram(telemetry.MetricStorageLatency, "op", "reap", "status", "success"); n == 0 {
		t.Errorf("reap statements are not timed")
	}
}

// TestRetentionCounted runs the real retention loop, with the observer
// cmd/relay gives it, over a plain table and a partitioned one: rows it
// removes are counted by status, partitions by action.
func TestRetentionCounted(t *testing.T) {
	t.Parallel()
	tel, reader, _ := setup(t, telemetry.Config{})
	m := collect(t, reader)
	for _, status := range []string{"delivered", "dead"} {
		if got := m.mustValue(t, telemetry.MetricRetentionDeleted, "status", status); got != 0 {
			t.Errorf("retention.deleted{status=%s} starts at %g", status, got)
		}
	}

	// A plain table: one DELIVERED and one DEAD row past retention are
	// pruned, the PENDING row stays.
	plain := pgtest.New(t)
	ids := plain.InsertN(t, 3, "retention.test")
	plain.Set(t, ids[0], "status = 'DELIVERED', delivered_at = now() - interval '2 days'")
	plain.Set(t, ids[1], "status = 'DEAD', updated_at = now() - interval '2 days'")
	// A table partitioned by hour: the partition of two DELIVERED rows is
	// dropped (its rows counted), the one of a PENDING row kept.
	parted := pgtest.NewPartitioned(t, "hour")
	pids := parted.InsertN(t, 3, "retention.test")
	parted.Set(t, pids[0], "created_at = now() - interval '5 hours', status = 'DELIVERED', delivered_at = now() - interval '2 days'")
	parted.Set(t, pids[1], "created_at = now() - interval '5 hours', status = 'DELIVERED', delivered_at = now() - interval '2 days'")
	parted.Set(t, pids[2], "created_at = now() - interval '4 hours'")

	var created float64
	for _, store := range []retention.Store{plain.Store, parted.Store} {
		r, err := retention.New(retention.Config{Delivered: time.Hour, Dead: time.Hour, PartitionAhead: 6 * time.Hour,
			Observer: tel.RetentionObserver()}, store)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		created += float64(len(rep.Partitions.Created))
	}
	if created < 2 {
		t.Fatalf("the partitioned table's cycle created %g partitions, want the hours ahead", created)
	}
	m = collect(t, reader)
	for _, c := range []struct {
		name, key, value string
		want             float64
	}{
		{telemetry.MetricRetentionDeleted, "status", "delivered", 3},
		{telemetry.MetricRetentionDeleted, "status", "dead", 1},
		{telemetry.MetricRetentionPartitions, "action", "created", created},
		{telemetry.MetricRetentionPartitions, "action", "dropped", 1},
	} {
		if got := m.mustValue(t, c.name, c.key, c.value); got != c.want {
			t.Errorf("%s{%s=%s} = %g, want %g", c.name, c.key, c.value, got, c.want)
		}
	}
	if got := m.mustValue(t, telemetry.MetricRetentionPartitionsKept); got != 1 {
		t.Errorf("partitions_kept = %g, want 1", got)
	}
}
