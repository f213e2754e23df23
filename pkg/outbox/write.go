package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"

	schema "github.com/outbox-relay/relay/schema/postgres"
)

// Message is an event an application writes into the outbox.
type Message struct {
	// ID is the event id; zero gets a new UUIDv7, which sorts by time.
	// Consumers deduplicate by it.
	ID uuid.UUID
	// Type routes the event: the NATS subject, Kafka topic or AMQP routing
	// key (after the driver's prefix). Required.
	Type string
	// Key is the partition key: events with the same key keep their order.
	// Empty means none.
	Key string
	// Payload is the message body, sent as is.
	Payload []byte
	// Headers become broker message headers.
	Headers map[string]string
	// AvailableAt delays delivery until then; zero means at once.
	AvailableAt time.Time
}

// Tx is what Write needs of the caller's transaction. A *sql.Tx (opened
// with the pgx driver, github.com/jackc/pgx/v5/stdlib) has it; wrap a
// pgx.Tx with PgxTx.
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// PgxTx adapts a pgx transaction to Tx.
func PgxTx(tx pgx.Tx) Tx { return pgxTx{tx} }

type pgxTx struct{ tx pgx.Tx }

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

// Writer writes events into one outbox table.
type Writer struct {
	table schema.Table
	query string
}

// NewWriter returns a Writer for table ("table" or "schema.table").
func NewWriter(table string) (*Writer, error) {
	t, err := schema.ParseTable(table)
	if err != nil {
		return nil, err
	}
	return &Writer{table: t, query: fmt.Sprintf(insertSQL, t.Quoted())}, nil
}

// insertSQL writes any number of events with one statement, in the order
// given, so that seq keeps their order. created_at is clock_timestamp(), the
// time of the insert, rather than now(), the start of the transaction: a
// writer that locks its aggregate first then stamps its events after the
// previous writer's commit, so per-key order by created_at is commit order
// (see docs/architecture.md). It is read once for the statement, so a clock
// stepping back mid-statement cannot reorder the events.
const insertSQL = `WITH stamp AS (SELECT clock_timestamp() AS at)
INSERT INTO %s (event_id, event_type, partition_key, payload, headers, available_at, created_at)
SELECT e.id, e.type, nullif(e.key, ''), e.payload, e.headers, coalesce(e.available_at, now()), stamp.at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::timestamptz[])
     WITH ORDINALITY AS e(id, type, key, payload, headers, available_at, n), stamp
ORDER BY e.n`

var defaultWriter, _ = NewWriter(schema.DefaultTable)

// Write inserts events into the openoutbox_events table within tx, in one
// statement, so they commit or roll back with the caller's business change.
// It fills in missing ids and adds the W3C trace context of ctx (the
// traceparent header) unless an event carries its own.
func Write(ctx context.Context, tx Tx, events ...Message) error {
	return defaultWriter.Write(ctx, tx, events...)
}

// Write inserts events into w's table within tx; see the package function.
func (w *Writer) Write(ctx context.Context, tx Tx, events ...Message) error {
	if len(events) == 0 {
		return nil
	}
	n := len(events)
	ids := make([]uuid.UUID, n)
	types := make([]string, n)
	keys := make([]string, n)
	payloads := make([][]byte, n)
	headers := make([]string, n)
	available := make([]*time.Time, n)

	trace := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, trace)
	for i, e := range events {
		if e.Type == "" {
			return fmt.Errorf("outbox: event %d has no Type", i)
		}
		ids[i] = e.ID
		if ids[i] == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("outbox: new event id: %w", err)
			}
			ids[i] = id
		}
		types[i], keys[i], payloads[i] = e.Type, e.Key, e.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
		h, err := headerJSON(e.Headers, trace)
		if err != nil {
			return fmt.Errorf("outbox: event %d: %w", i, err)
		}
		headers[i] = h
		if !e.AvailableAt.IsZero() {
			at := e.AvailableAt
			available[i] = &at
		}
	}
	if _, err := tx.ExecContext(ctx, w.query, ids, types, keys, payloads, headers, available); err != nil {
		return fmt.Errorf("outbox: insert %d events into %s: %w", n, w.table, err)
	}
	return nil
}

// headerJSON merges the trace context under the event's own headers.
func headerJSON(h map[string]string, trace propagation.MapCarrier) (string, error) {
	merged := make(map[string]string, len(h)+len(trace))
	for k, v := range trace {
		merged[k] = v
	}
	for k, v := range h {
		merged[k] = v
	}
	b, err := json.Marshal(merged)
	return string(b), err
}
