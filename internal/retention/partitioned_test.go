package retention_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// The loop on a real partitioned table (PostgreSQL's Partitioner, not a
// stand-in): a cycle creates partitions ahead, drops the partition whose
// rows are all delivered and past retention, counts its rows as deleted,
// and keeps and reports the one with a PENDING row.
func TestRetentionMaintainsARealPartitionedTable(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	ids := tb.InsertN(t, 3, "e")
	tb.Set(t, ids[0], "created_at = now() - interval '5 hours', status = 'DELIVERED', delivered_at = now() - interval '2 days'")
	tb.Set(t, ids[1], "created_at = now() - interval '5 hours', status = 'DELIVERED', delivered_at = now() - interval '3 days'")
	tb.Set(t, ids[2], "created_at = now() - interval '4 hours'")

	var c counts
	r, err := retention.New(retention.Config{Delivered: time.Hour, Dead: time.Hour, PartitionAhead: 6 * time.Hour,
		Observer: &c}, tb.Store)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reports := c.partitionReports()
	if rep.Partitioning != "hour" || len(reports) != 1 {
		t.Fatalf("report %+v, %d partition reports", rep, len(reports))
	}
	pr := reports[0]
	if len(pr.Created) < 2 || len(pr.Dropped) != 1 || len(pr.Kept) != 1 || !strings.Contains(pr.Kept[0].Reason, "1 PENDING") {
		t.Errorf("partition report %+v: want the past hours' partitions created, one dropped, the PENDING one kept", pr)
	}
	if got := c.get(); got[outbox.StatusDelivered] != 2 {
		t.Errorf("deleted %v, want the 2 DELIVERED rows of the dropped partition", got)
	}
	left := tb.Snapshot(t)
	if _, ok := left[ids[2]]; !ok || len(left) != 1 {
		t.Errorf("%d rows left, want only the PENDING one", len(left))
	}
	parts, err := tb.Store.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}
	if slices.Contains(names, pr.Dropped[0]) || !slices.Contains(names, pr.Kept[0].Name) {
		t.Errorf("partitions %v after the cycle", names)
	}
	if last := parts[len(parts)-2]; last.To.Before(time.Now().Add(5 * time.Hour)) {
		t.Errorf("partitions end at %s, want six hours ahead", last.To)
	}
}
