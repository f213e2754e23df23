package retention_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
)

var ctx = context.Background()

const day = 24 * time.Hour

// onBoth runs a test on a PostgreSQL and a MariaDB table.
func onBoth(t *testing.T, test func(t *testing.T, h storagetest.Harness)) {
	for name, h := range map[string]storagetest.Harness{"postgres": pgtest.Harness{}, "mysql": mysqltest.Harness{}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, h)
		})
	}
}

// aged holds rows on each side of 7 days (DELIVERED) and 30 days (DEAD),
// and PENDING and DELIVERING rows older than both.
type aged struct {
	expired, kept []uuid.UUID
}

func newAged(t *testing.T, tb storagetest.Table) aged {
	t.Helper()
	ids, err := tb.Storage().Emit(ctx, storage.EmitParams{Type: "aged", Count: 12})
	if err != nil {
		t.Fatal(err)
	}
	old := storagetest.Ago(90 * day)
	tb.Set(t, storagetest.Change{CreatedAt: old, UpdatedAt: old, AvailableAt: old}, ids...)
	tb.Set(t, storagetest.Change{Status: outbox.StatusDelivered, DeliveredAt: storagetest.Ago(8 * day)}, ids[0:4]...)
	tb.Set(t, storagetest.Change{Status: outbox.StatusDelivered, DeliveredAt: storagetest.Ago(6 * day)}, ids[4])
	tb.Set(t, storagetest.Change{Status: outbox.StatusDead, UpdatedAt: storagetest.Ago(31 * day)}, ids[5:7]...)
	tb.Set(t, storagetest.Change{Status: outbox.StatusDead, UpdatedAt: storagetest.Ago(29 * day)}, ids[7])
	tb.Set(t, storagetest.Change{Status: outbox.StatusDelivering, LockedBy: storagetest.Ptr("r"), LockedAt: old}, ids[8])
	tb.Set(t, storagetest.Change{Attempts: storagetest.Ptr(3)}, ids[9])
	// ids[10:] stay PENDING, never attempted, 90 days old.
	return aged{
		expired: []uuid.UUID{ids[0], ids[1], ids[2], ids[3], ids[5], ids[6]},
		kept:    append([]uuid.UUID{ids[4]}, ids[7:]...),
	}
}

func remaining(t *testing.T, tb storagetest.Table) map[uuid.UUID]bool {
	t.Helper()
	m := map[uuid.UUID]bool{}
	for _, r := range tb.Rows(t) {
		m[r.ID] = true
	}
	return m
}

func requireExactly(t *testing.T, tb storagetest.Table, a aged) {
	t.Helper()
	rows := remaining(t, tb)
	for _, id := range a.expired {
		if rows[id] {
			t.Errorf("expired row %s is still there", id)
		}
	}
	for _, id := range a.kept {
		if !rows[id] {
			t.Errorf("row %s, not past its retention or not finished, was removed", id)
		}
	}
}

// counts is a retention.Observer that collects what it is told: the rows
// removed, by status, and the partition reports.
type counts struct {
	mu      sync.Mutex
	m       map[outbox.Status]int64
	reports []storage.PartitionReport
}

func (c *counts) Deleted(_ context.Context, s outbox.Status, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[outbox.Status]int64{}
	}
	c.m[s] += n
}

func (c *counts) PartitionsMaintained(_ context.Context, r storage.PartitionReport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, r)
}

func (c *counts) get() map[outbox.Status]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

func (c *counts) partitionReports() []storage.PartitionReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reports)
}

// RunOnce removes exactly what is past its age, in small batches, and
// counts it by status.
func TestRemovesExactlyWhatIsPastItsAge(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, h storagetest.Harness) {
		tb := h.New(t)
		a := newAged(t, tb)
		var c counts
		r, err := retention.New(retention.Config{Delivered: 7 * day, Dead: 30 * day, BatchSize: 2, Observer: &c}, tb.Storage())
		if err != nil {
			t.Fatal(err)
		}
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[outbox.Status]int64{outbox.StatusDelivered: 4, outbox.StatusDead: 2}
		if !maps.Equal(rep.Deleted, want) || !maps.Equal(c.get(), want) || rep.Skipped {
			t.Errorf("report %+v, counted %v; want %v", rep, c.get(), want)
		}
		requireExactly(t, tb, a)

		// Unset retentions keep rows forever.
		tb2 := h.New(t)
		a2 := newAged(t, tb2)
		r2, _ := retention.New(retention.Config{Delivered: retention.Forever, Dead: retention.Forever}, tb2.Storage())
		if rep, err := r2.RunOnce(ctx); err != nil || len(rep.Deleted) != 0 {
			t.Fatalf("keep forever removed %v (%v)", rep.Deleted, err)
		}
		if got := len(remaining(t, tb2)); got != len(a2.expired)+len(a2.kept) {
			t.Errorf("keep forever left %d rows of %d", got, len(a2.expired)+len(a2.kept))
		}
	})
}

// lockedStore is a storage whose Prune calls a hook first; it is still the
// driver's storage.RetentionLocker.
type lockedStore struct {
	storage.Storage
	beforePrune func()
}

func (s lockedStore) Prune(ctx context.Context, p storage.PruneParams) (storage.PruneResult, error) {
	if s.beforePrune != nil {
		s.beforePrune()
	}
	return s.Storage.Prune(ctx, p)
}

func (s lockedStore) WithRetentionLock(ctx context.Context, fn func(context.Context) error) (bool, error) {
	return s.Storage.(storage.RetentionLocker).WithRetentionLock(ctx, fn)
}

// Two relays of a table: while one prunes, the other's cycle is skipped,
// and deletes nothing.
func TestOnlyOneRelayPrunesATable(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, h storagetest.Harness) {
		tb := h.New(t)
		a := newAged(t, tb)
		second, err := storage.Open(ctx, tb.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		var secondDeleted counts
		other, _ := retention.New(retention.Config{Delivered: 7 * day, Dead: 30 * day, Observer: &secondDeleted},
			lockedStore{Storage: second})

		var during retention.Report
		var duringErr error
		var once sync.Once
		first, _ := retention.New(retention.Config{Delivered: 7 * day, Dead: 30 * day},
			lockedStore{Storage: tb.Storage(), beforePrune: func() {
				once.Do(func() { during, duringErr = other.RunOnce(ctx) })
			}})
		rep, err := first.RunOnce(ctx)
		if err != nil || rep.Skipped {
			t.Fatalf("first relay's cycle = %+v, %v", rep, err)
		}
		if duringErr != nil || !during.Skipped || len(secondDeleted.get()) != 0 {
			t.Errorf("second relay's cycle while the first pruned = %+v, %v, deleted %v; want it skipped",
				during, duringErr, secondDeleted.get())
		}
		requireExactly(t, tb, a)
		// Once the first is done, the second gets its turn.
		if rep, err := other.RunOnce(ctx); err != nil || rep.Skipped {
			t.Errorf("second relay's cycle afterwards = %+v, %v", rep, err)
		}
	})
}

// Run's first cycle comes soon after start, and then every Interval.
func TestRunPrunesInTheBackground(t *testing.T) {
	t.Parallel()
	tb := pgtest.Harness{}.New(t)
	a := newAged(t, tb)
	var c counts
	r, _ := retention.New(retention.Config{Delivered: 7 * day, Dead: 30 * day, FirstDelay: 10 * time.Millisecond,
		Interval: 50 * time.Millisecond, Observer: &c}, tb.Storage())
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	eventually.True(t, 10*time.Second, func() bool { return c.get()[outbox.StatusDelivered] == 4 },
		func() string { return fmt.Sprintf("deleted %v", c.get()) })
	// A row that expires later goes at a later cycle.
	ids, err := tb.Storage().Emit(ctx, storage.EmitParams{Type: "later", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	tb.Set(t, storagetest.Change{Status: outbox.StatusDelivered, DeliveredAt: storagetest.Ago(8 * day)}, ids...)
	eventually.True(t, 10*time.Second, func() bool { return c.get()[outbox.StatusDelivered] == 5 },
		func() string { return fmt.Sprintf("deleted %v", c.get()) })
	requireExactly(t, tb, a)
}

// partitioned reports a partitioned table over a real one and records the
// maintenance asked of it: the driver's own Partitioner is tested with the
// driver; this checks what the loop asks and does with the answer.
type partitioned struct {
	storage.Storage
	kind     string
	report   storage.PartitionReport
	policies []storage.PartitionPolicy
}

func (p *partitioned) Partitioning(context.Context) (string, error) { return p.kind, nil }

func (p *partitioned) MaintainPartitions(_ context.Context, pol storage.PartitionPolicy) (storage.PartitionReport, error) {
	p.policies = append(p.policies, pol)
	return p.report, nil
}

func (p *partitioned) Partitions(context.Context) ([]storage.PartitionInfo, error) { return nil, nil }

// On a partitioned table the loop maintains partitions, even with no
// retention set (partitions must exist ahead), and deletes no rows itself;
// on an unpartitioned one with no retention it does nothing.
func TestPartitionedTablesAreMaintainedNotPruned(t *testing.T) {
	t.Parallel()
	tb := pgtest.Harness{}.New(t)
	a := newAged(t, tb)
	p := &partitioned{Storage: tb.Storage(), kind: "hour", report: storage.PartitionReport{
		Created: []string{"p_2026112306"}, Dropped: []string{"p_2026110100"},
		DroppedRows: map[string]int64{"DELIVERED": 40, "DEAD": 2},
		Kept:        []storage.KeptPartition{{Name: "p_2026110101", Reason: "holds 3 PENDING rows"}},
	}}
	if !retention.Needed(retention.Config{Delivered: retention.Forever, Dead: retention.Forever}, p) {
		t.Error("a storage that may be partitioned needs no retention loop")
	}
	var c counts
	r, _ := retention.New(retention.Config{Delivered: retention.Forever, Dead: retention.Forever, Observer: &c}, p)
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []storage.PartitionPolicy{{Ahead: 12 * time.Hour, DeliveredRetention: retention.Forever, DeadRetention: retention.Forever}}
	if fmt.Sprint(p.policies) != fmt.Sprint(want) {
		t.Errorf("maintenance asked with %v, want %v", p.policies, want)
	}
	if rep.Partitioning != "hour" || len(rep.Partitions.Kept) != 1 {
		t.Errorf("report %+v", rep)
	}
	if got := c.get(); got[outbox.StatusDelivered] != 40 || got[outbox.StatusDead] != 2 {
		t.Errorf("rows of dropped partitions counted %v", got)
	}

	// With retention, the policy carries it, and rows are still left to
	// the partitions.
	p.policies = nil
	r, _ = retention.New(retention.Config{Delivered: 7 * day, Dead: 30 * day}, p)
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(p.policies) != 1 || p.policies[0].DeliveredRetention != 7*day || p.policies[0].DeadRetention != 30*day {
		t.Errorf("maintenance asked with %v", p.policies)
	}
	if got := len(remaining(t, tb)); got != len(a.expired)+len(a.kept) {
		t.Errorf("rows were pruned on a partitioned table: %d of %d left", got, len(a.expired)+len(a.kept))
	}

	// Not partitioned, nothing to remove: nothing happens.
	p.kind, p.policies = "", nil
	r, _ = retention.New(retention.Config{Delivered: retention.Forever, Dead: retention.Forever}, p)
	if _, err := r.RunOnce(ctx); err != nil || len(p.policies) != 0 {
		t.Errorf("an unpartitioned table without retention got maintenance %v (%v)", p.policies, err)
	}
	if retention.Needed(retention.Config{Delivered: retention.Forever, Dead: retention.Forever}, struct{ retention.Store }{tb.Storage()}) {
		t.Error("a storage that cannot be partitioned, with no retention, needs a loop")
	}
}

// On a real partitioned table (PostgreSQL, by day) the loop has the driver
// create the partitions rows wait for and drop an expired one, counts the rows it
// held, and keeps the partition of a PENDING row; it prunes no row itself.
func TestMaintainsARealPartitionedTable(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "day")
	ids := tb.InsertN(t, 4, "e")
	tb.Set(t, ids[0], "created_at = now() - interval '10 days', status = 'DELIVERED', delivered_at = now() - interval '9 days'")
	tb.Set(t, ids[1], "created_at = now() - interval '10 days', status = 'DEAD', updated_at = now() - interval '9 days'")
	tb.Set(t, ids[2], "created_at = now() - interval '12 days'") // PENDING
	// ids[3]: PENDING, now.
	var c counts
	r, err := retention.New(retention.Config{Delivered: 7 * day, Dead: 7 * day, Observer: &c}, tb.Store)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Partitioning != "day" || len(rep.Partitions.Created) != 2 || len(rep.Partitions.Dropped) != 1 || len(c.partitionReports()) != 1 {
		t.Errorf("report %+v", rep)
	}
	if got := c.get(); got[outbox.StatusDelivered] != 1 || got[outbox.StatusDead] != 1 {
		t.Errorf("counted %v, want the dropped partition's 1 DELIVERED and 1 DEAD", got)
	}
	if got := tb.Counts(t); fmt.Sprint(got) != fmt.Sprint(map[outbox.Status]int{outbox.StatusPending: 2}) {
		t.Errorf("rows left %v, want the 2 PENDING", got)
	}
	kept := false
	for _, k := range rep.Partitions.Kept {
		kept = kept || k.Reason != ""
	}
	if !kept {
		t.Errorf("the partition of the old PENDING row is not reported kept: %+v", rep.Partitions.Kept)
	}
}

// A cycle that fails the same way again and again is logged as an error
// once, then at debug, not every RETENTION_INTERVAL.
func TestARepeatedFailureIsLoggedOnce(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.Exec(t, "DROP TABLE {{table}}")
	logs := &levelCounter{}
	r, _ := retention.New(retention.Config{Delivered: day, Dead: retention.Forever, FirstDelay: time.Millisecond,
		Interval: 5 * time.Millisecond, Logger: slog.New(logs)}, tb.Store)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(rctx); close(done) }()
	eventually.True(t, 10*time.Second, func() bool { return logs.count(slog.LevelDebug) >= 3 },
		func() string { return fmt.Sprintf("%d debug records", logs.count(slog.LevelDebug)) })
	cancel()
	<-done
	if n := logs.count(slog.LevelError); n != 1 {
		t.Errorf("%d error records for one failure repeated, want 1", n)
	}
}

// levelCounter is a slog.Handler that counts records by level.
type levelCounter struct {
	mu sync.Mutex
	n  map[slog.Level]int
}

func (h *levelCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h *levelCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[slog.Level]int{}
	}
	h.n[r.Level]++
	return nil
}

func (h *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelCounter) WithGroup(string) slog.Handler      { return h }

func (h *levelCounter) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[l]
}
