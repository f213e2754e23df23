package mysqltest

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
)

// Harness runs the storagetest suite on MySQL or MariaDB: every table in a
// database of its own.
type Harness struct{}

var _ storagetest.Harness = Harness{}

// New creates a migrated table in a new database (see New).
func (Harness) New(t testing.TB) storagetest.Table {
	t.Helper()
	return Conformance(New(t))
}

// Unmigrated opens a store on a table in a new, empty database.
func (Harness) Unmigrated(t testing.TB) storage.Storage {
	t.Helper()
	s, err := mysql.Open(context.Background(), storage.URLWithTable(DatabaseURL(NewDatabase(t)), "openoutbox_events"))
	if err != nil {
		t.Fatalf("mysqltest: open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Conformance returns tb as the storagetest suite sees a table.
func Conformance(tb *Table) storagetest.Table { return conformance{tb} }

type conformance struct{ tb *Table }

func (c conformance) Storage() storage.Storage { return c.tb.Store }

func (c conformance) URL() string { return c.tb.URL }

func (c conformance) Insert(t testing.TB, cols outbox.Columns) {
	t.Helper()
	c.tb.insertColumns(t, cols)
}

func (c conformance) Set(t testing.TB, ch storagetest.Change, ids ...uuid.UUID) {
	t.Helper()
	var sets []string
	var args []any
	add := func(column string, value any) {
		args = append(args, value)
		sets = append(sets, column+" = ?")
	}
	nullable := func(column string, v *string) {
		if v != nil {
			var value any
			if *v != "" {
				value = *v
			}
			add(column, value)
		}
	}
	moment := func(column string, ago *time.Duration) {
		if ago != nil {
			args = append(args, ago.Microseconds())
			sets = append(sets, column+" = UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND")
		}
	}
	if ch.Status != "" {
		add("status", string(ch.Status))
	}
	if ch.Attempts != nil {
		add("attempts", *ch.Attempts)
	}
	nullable("last_error", ch.LastError)
	nullable("locked_by", ch.LockedBy)
	moment("locked_at", ch.LockedAt)
	moment("delivered_at", ch.DeliveredAt)
	moment("created_at", ch.CreatedAt)
	moment("updated_at", ch.UpdatedAt)
	moment("available_at", ch.AvailableAt)
	if len(sets) == 0 {
		t.Fatal("mysqltest: Set with an empty Change")
	}
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		args = append(args, id[:])
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	n := c.tb.Exec(t, "UPDATE {{table}} SET "+strings.Join(sets, ", ")+" WHERE event_id IN ("+in+")", args...)
	if int(n) != len(ids) {
		t.Fatalf("mysqltest: set %v: matched %d rows, want %d", ids, n, len(ids))
	}
}

func (c conformance) Rows(t testing.TB) []storage.Row {
	t.Helper()
	rows, err := c.tb.Store.DB().QueryContext(context.Background(), `SELECT event_id, event_type, partition_key,
		payload, headers, status, attempts, last_error, available_at, locked_by, locked_at, delivered_at,
		created_at, updated_at, seq FROM `+c.tb.Name+` ORDER BY created_at, seq, event_id`)
	if err != nil {
		t.Fatalf("mysqltest: read rows: %v", err)
	}
	defer rows.Close()
	var out []storage.Row
	for rows.Next() {
		var (
			row                 storage.Row
			id, key, headers    []byte
			lastError, lockedBy sql.NullString
			lockedAt, delivered sql.NullTime
			seq                 int64
		)
		err := rows.Scan(&id, &row.Type, &key, &row.Payload, &headers, &row.Status, &row.Attempts,
			&lastError, &row.AvailableAt, &lockedBy, &lockedAt, &delivered, &row.CreatedAt, &row.UpdatedAt, &seq)
		if err != nil {
			t.Fatalf("mysqltest: read rows: %v", err)
		}
		if row.ID, err = uuid.FromBytes(id); err != nil {
			t.Fatalf("mysqltest: read rows: event_id: %v", err)
		}
		if key != nil {
			k := string(key)
			row.PartitionKey = &k
		}
		row.Headers = headers
		if row.Payload == nil {
			row.Payload = []byte{}
		}
		if lastError.Valid {
			row.LastError = &lastError.String
		}
		if lockedBy.Valid {
			row.LockedBy = &lockedBy.String
		}
		if lockedAt.Valid {
			row.LockedAt = &lockedAt.Time
		}
		if delivered.Valid {
			row.DeliveredAt = &delivered.Time
		}
		row.Seq = &seq
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("mysqltest: read rows: %v", err)
	}
	return out
}

func (c conformance) Now(t testing.TB) time.Time {
	t.Helper()
	var now time.Time
	if err := c.tb.Store.DB().QueryRowContext(context.Background(), "SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
		t.Fatalf("mysqltest: read the clock: %v", err)
	}
	return now
}

func (c conformance) Lock(t testing.TB, id uuid.UUID) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := c.tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("mysqltest: lock %s: %v", id, err)
	}
	var once sync.Once
	unlock := func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(unlock)
	var one int
	err = tx.QueryRowContext(ctx, "SELECT 1 FROM "+c.tb.Name+" WHERE event_id = ? FOR UPDATE", id[:]).Scan(&one)
	if err != nil {
		unlock()
		t.Fatalf("mysqltest: lock %s: %v", id, err)
	}
	return unlock
}

func (c conformance) InsertUncommitted(t testing.TB, cols outbox.Columns) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := c.tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("mysqltest: begin: %v", err)
	}
	var once sync.Once
	end := func(commit bool) {
		once.Do(func() {
			if commit {
				if err := tx.Commit(); err != nil {
					t.Errorf("mysqltest: commit: %v", err)
				}
				return
			}
			_ = tx.Rollback()
		})
	}
	t.Cleanup(func() { end(false) })
	w, err := mysql.NewWriter(c.tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteColumns(ctx, tx, cols); err != nil {
		end(false)
		t.Fatalf("mysqltest: insert %d events: %v", len(cols.IDs), err)
	}
	return func() { end(true) }
}
