package chaos

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// counter is a test table of any storage that counts its rows by status.
type counter interface {
	Counts(t testing.TB) map[outbox.Status]int
}

// chaosTable is a test table of some storage, with what the storage-neutral
// chaos tests need of it.
type chaosTable struct {
	counter
	insertN func(t testing.TB, n int, eventType string) []uuid.UUID
	// env is STORAGE_URL and STORAGE_TABLE_NAME for a relay on the table.
	env func() []string
	// retried counts rows with an attempt counted.
	retried func(t *testing.T) int64
}

func (c chaosTable) InsertN(t testing.TB, n int, eventType string) []uuid.UUID {
	return c.insertN(t, n, eventType)
}

// chaosStorages are the databases the storage-neutral tests run against.
var chaosStorages = []struct {
	name string
	new  func(t *testing.T) chaosTable
}{
	{"PostgreSQL", func(t *testing.T) chaosTable {
		tb := pgtest.New(t)
		return chaosTable{
			counter: tb, insertN: tb.InsertN,
			env: func() []string { return []string{"STORAGE_URL=" + pgtest.URL(), "STORAGE_TABLE_NAME=" + tb.Name} },
			retried: func(t *testing.T) int64 {
				return tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts > 0")
			},
		}
	}},
	{"MySQL", func(t *testing.T) chaosTable {
		tb := mysqltest.New(t)
		return chaosTable{
			counter: tb, insertN: tb.InsertN,
			env: func() []string { return []string{"STORAGE_URL=" + tb.URL} },
			retried: func(t *testing.T) int64 {
				var n int64
				if err := tb.Store.DB().QueryRowContext(context.Background(),
					"SELECT COUNT(*) FROM "+tb.Name+" WHERE attempts > 0").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			},
		}
	}},
}
