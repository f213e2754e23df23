package inbox_test

import (
	"database/sql"
	"fmt"
	"testing"
)

// BenchmarkProcess measures what the inbox adds to applying an event: one
// transaction with the effect alone ("bare") against the same transaction
// through Process, which also inserts the record. One consumer, one event
// per transaction, on the local server.
//
//	go test -run '^$' -bench Process -benchtime 3000x ./pkg/inbox
func BenchmarkProcess(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			e := be.open(b)
			b.Run("bare", func(b *testing.B) {
				for i := range b.N {
					tx, err := e.db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if err := e.apply(fmt.Sprintf("bare-%d", i))(tx); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("inbox", func(b *testing.B) {
				for i := range b.N {
					id := fmt.Sprintf("inbox-%d", i)
					if _, err := e.box.Process(ctx, e.db, "bench", id, e.apply(id)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("duplicate", func(b *testing.B) {
				for range b.N {
					if _, err := e.box.Process(ctx, e.db, "bench", "inbox-0", func(*sql.Tx) error { return nil }); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
