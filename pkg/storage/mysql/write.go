package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/driverkit"
	schema "github.com/outbox-relay/relay/schema/mysql"
)

// Tx is what Write needs of the caller's transaction: a *sql.Tx opened with
// go-sql-driver/mysql has it (so do *sql.Conn and *sql.DB, for a statement
// of its own).
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Writer writes events into one outbox table. Its Write, which prepares
// the events, is storage.Producer's.
type Writer struct {
	storage.Producer[Tx]
	table  schema.Table
	insert string // insert.sql, {{rows}} still to fill in
	row    string
}

// NewWriter returns a Writer for table ("table" or "database.table").
func NewWriter(table string) (*Writer, error) {
	return driverkit.WriterFor(table, schema.ParseTable, newWriter)
}

func newWriter(t schema.Table) *Writer {
	w := &Writer{
		table:  t,
		insert: schema.Expand(withoutComments(mustReadSQL("insert")), t),
		row:    withoutComments(mustReadSQL("insert_row")),
	}
	w.Producer = storage.NewProducer(w.WriteColumns)
	return w
}

var defaultWriter = newWriter(schema.Table{Name: schema.DefaultTable})

// Write inserts events into the openoutbox_events table of tx's database
// within tx, so they commit or roll back with the caller's business change.
// It fills in missing ids with UUIDv7s and adds the W3C trace context of
// ctx (the traceparent header) unless an event carries its own. Up to
// WriteChunkEvents events (and WriteChunkBytes of payload and headers) are
// one INSERT statement; more take one statement per chunk, in order, in the
// same transaction.
func Write(ctx context.Context, tx Tx, events ...outbox.Message) error {
	return defaultWriter.Write(ctx, tx, events...)
}

// WriteChunkEvents bounds the events of one INSERT statement: a server
// that prepares the statement (a connection without interpolateParams)
// accepts at most 65,535 placeholders, six per event.
const WriteChunkEvents = 4096

// WriteChunkBytes bounds the payload and header bytes of one INSERT
// statement, well below max_allowed_packet's defaults (16 MiB on MariaDB,
// 64 MiB on MySQL).
const WriteChunkBytes = 4 << 20

// WriteColumns inserts events prepared by outbox.Prepare, or built by hand
// where a caller needs headers that are not strings (tests of hostile
// rows).
func (w *Writer) WriteColumns(ctx context.Context, tx Tx, c outbox.Columns) error {
	for start := 0; start < len(c.IDs); {
		end, size := start, 0
		for end < len(c.IDs) && end-start < WriteChunkEvents && (end == start || size+len(c.Payloads[end])+len(c.Headers[end]) <= WriteChunkBytes) {
			size += len(c.Payloads[end]) + len(c.Headers[end])
			end++
		}
		if err := w.insertRows(ctx, tx, c, start, end); err != nil {
			return fmt.Errorf("outbox: insert %d events into %s: %w", len(c.IDs), w.table, err)
		}
		start = end
	}
	return nil
}

func (w *Writer) insertRows(ctx context.Context, tx Tx, c outbox.Columns, start, end int) error {
	n := end - start
	rows := strings.TrimSuffix(strings.Repeat(w.row+", ", n), ", ")
	args := make([]any, 0, 6*n)
	for i := start; i < end; i++ {
		var availableAt any
		if c.AvailableAt[i] != nil {
			availableAt = stamp(*c.AvailableAt[i])
		}
		// The key goes as bytes so that the connection's character set
		// cannot change it; an empty one becomes NULL.
		args = append(args, c.IDs[i][:], c.Types[i], []byte(c.Keys[i]), c.Payloads[i], c.Headers[i], availableAt)
	}
	_, err := tx.ExecContext(ctx, strings.Replace(w.insert, "{{rows}}", rows, 1), args...)
	return err
}
