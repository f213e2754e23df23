package postgres_test

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

var (
	benchRows       = flag.Int("partition.rows", 100000, "rows BenchmarkRetention removes, and BenchmarkPartitionedClaim drains")
	benchPartitions = flag.Int("partition.past", 30, "past day partitions BenchmarkPartitionedClaim adds to the partitioned table")
)

// walBytes is how much WAL the server has written so far.
func walBytes(b *testing.B, tb *pgtest.Table) int64 {
	b.Helper()
	var n int64
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// fillDelivered writes n DELIVERED rows created and delivered two days ago.
func fillDelivered(b *testing.B, tb *pgtest.Table, n int) {
	b.Helper()
	tb.Exec(b, `INSERT INTO {{table}} (event_id, event_type, payload, status, created_at, delivered_at, updated_at)
		SELECT gen_random_uuid(), 'bench', convert_to(repeat('x', 200), 'UTF8'), 'DELIVERED',
		       now() - interval '2 days', now() - interval '2 days', now() - interval '2 days'
		FROM generate_series(1, $1)`, n)
	tb.Exec(b, "ANALYZE {{table}}")
}

// addPastDays gives a table partitioned by day the partitions of the last
// days days.
func addPastDays(b *testing.B, tb *pgtest.Table, days int) {
	b.Helper()
	table, err := schema.ParseTable(tb.Name)
	if err != nil {
		b.Fatal(err)
	}
	p := schema.Partitionings["day"]
	today := p.Start(time.Now())
	for d := 1; d <= days; d++ {
		from := today.Add(-time.Duration(d) * p.Step)
		tb.Exec(b, fmt.Sprintf("CREATE TABLE %s PARTITION OF {{table}} FOR VALUES FROM ('%s') TO ('%s')",
			table.Object(p.PartitionName(table, from)[len(table.Name)+1:]),
			from.Format(time.RFC3339), from.Add(p.Step).Format(time.RFC3339)))
	}
}

// claimAlongside has a relay claim 10 events (and hand them back) over and
// over until stop is called, which returns the longest a claim took: how
// long claims wait while rows or partitions go.
func claimAlongside(b *testing.B, tb *pgtest.Table) (stop func() time.Duration) {
	b.Helper()
	tb.InsertN(b, 100, "live")
	done, waited := make(chan struct{}), make(chan time.Duration)
	go func() {
		var longest time.Duration
		defer func() { waited <- longest }()
		for {
			select {
			case <-done:
				return
			default:
			}
			c0 := time.Now()
			batch, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "bench", Limit: 10})
			longest = max(longest, time.Since(c0))
			if err != nil {
				b.Error(err)
				return
			}
			ids := make([]uuid.UUID, len(batch.Events))
			for i, e := range batch.Events {
				ids[i] = e.ID
			}
			if _, err := tb.Store.Settle(ctx, batch.Lease, storage.Outcome{Released: ids}); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	return func() time.Duration {
		close(done)
		return <-waited
	}
}

// BenchmarkRetention removes -partition.rows delivered rows two days old:
// prune deletes them in batches from a plain table; MaintainPartitions drops
// the day partition that holds them. It reports the time taken and the WAL
// written per row removed, and the longest a relay's claim took meanwhile.
func BenchmarkRetention(b *testing.B) {
	b.Run("prune", func(b *testing.B) {
		var took, claimWait time.Duration
		var wal int64
		for range b.N {
			tb := pgtest.New(b)
			fillDelivered(b, tb, *benchRows)
			stop := claimAlongside(b, tb)
			w0, t0 := walBytes(b, tb), time.Now()
			res, err := tb.Store.Prune(ctx, storage.PruneParams{Status: "DELIVERED", OlderThan: 24 * time.Hour, BatchSize: storage.PruneBatchSizeDefault})
			took += time.Since(t0)
			wal += walBytes(b, tb) - w0
			claimWait = max(claimWait, stop())
			if err != nil || res.Deleted != int64(*benchRows) {
				b.Fatalf("prune = %+v, %v", res, err)
			}
		}
		report(b, took, wal)
		b.ReportMetric(float64(claimWait.Microseconds())/1000, "longest-claim-ms")
	})
	b.Run("drop-partition", func(b *testing.B) {
		var took, claimWait time.Duration
		var wal int64
		for range b.N {
			tb := pgtest.NewPartitioned(b, "day")
			addPastDays(b, tb, 2) // as a table partitioned for days has them
			fillDelivered(b, tb, *benchRows)
			policy := storage.PartitionPolicy{Ahead: 24 * time.Hour, DeliveredRetention: 24 * time.Hour, DeadRetention: 24 * time.Hour}
			stop := claimAlongside(b, tb)
			w0, t0 := walBytes(b, tb), time.Now()
			rep, err := tb.Store.MaintainPartitions(ctx, policy)
			took += time.Since(t0)
			wal += walBytes(b, tb) - w0
			claimWait = max(claimWait, stop())
			if err != nil || rep.DroppedRows["DELIVERED"] != int64(*benchRows) {
				b.Fatalf("maintain = %+v, %v", rep, err)
			}
		}
		report(b, took, wal)
		b.ReportMetric(float64(claimWait.Microseconds())/1000, "longest-claim-ms")
	})
}

func report(b *testing.B, took time.Duration, wal int64) {
	rows := float64(*benchRows) * float64(b.N)
	b.ReportMetric(float64(took.Nanoseconds())/rows, "ns/row")
	b.ReportMetric(float64(wal)/rows, "WAL-B/row")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPartitionedClaim drains -partition.rows events with one claimer
// (claim 500, mark delivered) from a plain table and from a table
// partitioned by day with -partition.past past partitions besides the
// current, the ahead and the default ones: every claim visits each
// partition's indexes.
func BenchmarkPartitionedClaim(b *testing.B) {
	for _, partitioned := range []bool{false, true} {
		name := "plain"
		if partitioned {
			name = fmt.Sprintf("day-%d-past-partitions", *benchPartitions)
		}
		b.Run(name, func(b *testing.B) {
			var took time.Duration
			for range b.N {
				var tb *pgtest.Table
				if partitioned {
					tb = pgtest.NewPartitioned(b, "day")
					addPastDays(b, tb, *benchPartitions)
				} else {
					tb = pgtest.New(b)
				}
				for i := 0; i < *benchRows; i += 5000 {
					tb.InsertN(b, min(5000, *benchRows-i), "bench")
				}
				tb.Exec(b, "ANALYZE {{table}}")
				t0 := time.Now()
				n := 0
				for {
					batch, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "bench", Limit: 500})
					if err != nil {
						b.Fatal(err)
					}
					if len(batch.Events) == 0 {
						break
					}
					ids := make([]uuid.UUID, len(batch.Events))
					for i, e := range batch.Events {
						ids[i] = e.ID
					}
					if _, err := tb.Store.Settle(ctx, batch.Lease, storage.Outcome{Delivered: ids}); err != nil {
						b.Fatal(err)
					}
					n += len(ids)
				}
				took += time.Since(t0)
				if n != *benchRows {
					b.Fatalf("drained %d of %d", n, *benchRows)
				}
			}
			b.ReportMetric(float64(*benchRows)*float64(b.N)/took.Seconds(), "events/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
