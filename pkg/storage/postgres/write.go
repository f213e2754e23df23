package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/driverkit"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// Tx is what Write needs of the caller's transaction. A *sql.Tx (opened
// with the pgx driver, github.com/jackc/pgx/v5/stdlib) has it; wrap a
// pgx.Tx with PgxTx.
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// PgxTx adapts a pgx transaction to Tx. A *pgx.Conn or *pgxpool.Pool
// works as well, for a statement of its own.
func PgxTx(tx PgxExecer) Tx { return pgxTx{tx} }

// PgxExecer is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common.
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

type pgxTx struct{ tx PgxExecer }

func (p pgxTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, err := p.tx.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rowsAffected(tag.RowsAffected()), nil
}

type rowsAffected int64

func (r rowsAffected) LastInsertId() (int64, error) {
	return 0, errors.New("outbox: no insert ids")
}
func (r rowsAffected) RowsAffected() (int64, error) { return int64(r), nil }

// Writer writes events into one outbox table. Its Write, which prepares
// the events, is storage.Producer's.
type Writer struct {
	storage.Producer[Tx]
	table schema.Table
	query string
}

// NewWriter returns a Writer for table ("table" or "schema.table").
func NewWriter(table string) (*Writer, error) {
	return driverkit.WriterFor(table, schema.ParseTable, newWriter)
}

func newWriter(t schema.Table) *Writer {
	w := &Writer{table: t, query: schema.Expand(mustReadSQL("insert"), t)}
	w.Producer = storage.NewProducer(w.WriteColumns)
	return w
}

var defaultWriter = newWriter(schema.Table{Name: schema.DefaultTable})

// Write inserts events into the openoutbox_events table within tx, in one
// statement, so they commit or roll back with the caller's business change.
// It fills in missing ids with UUIDv7s and adds the W3C trace context of
// ctx (the traceparent header) unless an event carries its own.
func Write(ctx context.Context, tx Tx, events ...outbox.Message) error {
	return defaultWriter.Write(ctx, tx, events...)
}

// WriteColumns inserts events prepared by outbox.Prepare, or built by hand
// where a caller needs headers that are not strings (tests of hostile
// rows), in one statement.
func (w *Writer) WriteColumns(ctx context.Context, tx Tx, c outbox.Columns) error {
	if len(c.IDs) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, w.query, uuidArray(c.IDs), c.Types, c.Keys, c.Payloads, c.Headers, c.AvailableAt)
	if err != nil {
		return fmt.Errorf("outbox: insert %d events into %s: %w", len(c.IDs), w.table, err)
	}
	return nil
}
