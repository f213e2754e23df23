package inbox_test

import (
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// BenchmarkProcess measures what the inbox adds to applying an event: a
// transaction with the effect alone (bare-ns/op) against the same
// transaction through Process, which also inserts the record
// (inbox-ns/op). The two alternate event by event, so that a server busy
// with other work slows both alike. "duplicate" is a delivery of an event
// already applied. One consumer, one event per transaction.
//
//	go test -run '^$' -bench Process -benchtime 2000x ./pkg/inbox
func BenchmarkProcess(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			e := be.open(b)
			bare := func(id string) {
				tx, err := e.db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := e.apply(id)(tx); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			process := func(id string) {
				if _, err := e.box.Process(ctx, e.db, "bench", id, e.apply(id)); err != nil {
					b.Fatal(err)
				}
			}
			// Warm the pool and the server's caches.
			for i := range 200 {
				bare(fmt.Sprintf("warm-bare-%d", i))
				process(fmt.Sprintf("warm-%d", i))
			}
			b.Run("new", func(b *testing.B) {
				var inBare, inInbox time.Duration
				for i := range b.N {
					start := time.Now()
					bare(fmt.Sprintf("bare-%d-%d", b.N, i))
					inBare += time.Since(start)
					start = time.Now()
					process(fmt.Sprintf("inbox-%d-%d", b.N, i))
					inInbox += time.Since(start)
				}
				b.ReportMetric(float64(inBare.Nanoseconds())/float64(b.N), "bare-ns/op")
				b.ReportMetric(float64(inInbox.Nanoseconds())/float64(b.N), "inbox-ns/op")
			})
			b.Run("duplicate", func(b *testing.B) {
				for range b.N {
					if _, err := e.box.Process(ctx, e.db, "bench", "warm-0", func(*sql.Tx) error { return nil }); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
