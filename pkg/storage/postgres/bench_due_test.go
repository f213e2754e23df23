package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// BenchmarkNextDueIdle is the cost of the relay's question "when does the
// next row come due" on an idle table: 100,000 DELIVERED rows, none
// PENDING. ns/op is the round trip; db-us/op the server's execution time
// of next_due.sql (EXPLAIN ANALYZE, timing off), for a plain table and one
// partitioned by day.
func BenchmarkNextDueIdle(b *testing.B) {
	for name, tb := range map[string]*pgtest.Table{"plain": pgtest.New(b), "partitioned": pgtest.NewPartitioned(b, "day")} {
		b.Run(name, func(b *testing.B) {
			tb.Exec(b, "INSERT INTO {{table}} (event_type, payload, status, delivered_at) "+
				"SELECT 'idle', '{}', 'DELIVERED', now() FROM generate_series(1, 100000)")
			tb.Exec(b, "VACUUM ANALYZE {{table}}")
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if _, ok, err := tb.Store.NextDue(ctx, time.Time{}); err != nil || ok {
					b.Fatalf("NextDue: ok=%v err=%v", ok, err)
				}
			}
			b.StopTimer()
			explain := "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + tb.Store.Query("next_due")
			var total time.Duration
			const runs = 200
			for range runs {
				var plan []struct {
					ExecutionTime float64 `json:"Execution Time"`
				}
				var raw []byte
				if err := tb.Pool().QueryRow(ctx, explain).Scan(&raw); err != nil {
					b.Fatal(err)
				}
				if err := json.Unmarshal(raw, &plan); err != nil {
					b.Fatal(err)
				}
				total += time.Duration(plan[0].ExecutionTime * float64(time.Millisecond))
			}
			b.ReportMetric(float64(total/runs)/float64(time.Microsecond), "db-us/op")
		})
	}
}
