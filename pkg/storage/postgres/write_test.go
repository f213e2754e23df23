package postgres_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

type row struct {
	id          uuid.UUID
	typ         string
	key         *string
	payload     []byte
	headers     map[string]string
	availableAt time.Time
	createdAt   time.Time
	status      string
}

func readRows(t *testing.T, tb *pgtest.Table) []row {
	t.Helper()
	rows, err := tb.Store.Pool().Query(context.Background(),
		"SELECT event_id, event_type, partition_key, payload, headers, available_at, created_at, status FROM "+tb.Name+" ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		var h []byte
		if err := rows.Scan(&r.id, &r.typ, &r.key, &r.payload, &h, &r.availableAt, &r.createdAt, &r.status); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(h, &r.headers); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func newWriter(t *testing.T, tb *pgtest.Table) *postgres.Writer {
	t.Helper()
	w, err := postgres.NewWriter(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWriteWithPgxInsertsEventsInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	w := newWriter(t, tb)
	ctx := context.Background()
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	given := uuid.MustParse("0190b7a2-0000-7000-8000-000000000001")

	err := pgx.BeginFunc(ctx, tb.Store.Pool(), func(tx pgx.Tx) error {
		return w.Write(ctx, postgres.PgxTx(tx),
			outbox.Message{Type: "orders.paid", Key: "order-1", Payload: []byte(`{"a":1}`), Headers: map[string]string{"tenant": "acme"}},
			outbox.Message{ID: given, Type: "orders.shipped", AvailableAt: later},
		)
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := readRows(t, tb)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	first, second := rows[0], rows[1]
	if first.id.Version() != 7 {
		t.Errorf("generated id %s is not a UUIDv7", first.id)
	}
	if first.typ != "orders.paid" || first.key == nil || *first.key != "order-1" || string(first.payload) != `{"a":1}` ||
		first.headers["tenant"] != "acme" || first.status != "PENDING" {
		t.Errorf("first row = %+v", first)
	}
	if first.availableAt.After(time.Now()) {
		t.Errorf("available_at %s is in the future without AvailableAt", first.availableAt)
	}
	if second.id != given || second.key != nil || !second.availableAt.Equal(later) || second.payload == nil {
		t.Errorf("second row = %+v (key must be NULL, id and available_at as given)", second)
	}
	if !second.createdAt.Equal(first.createdAt) {
		t.Errorf("created_at %s then %s: want one insert time for the statement (seq orders them)", first.createdAt, second.createdAt)
	}
}

func TestWriteWithDatabaseSQL(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	w := newWriter(t, tb)
	cfg, err := pgx.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer func() { _ = db.Close() }()
	ctx := context.Background()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for range 500 {
		msgs = append(msgs, outbox.Message{Type: "bulk", Key: "k", Payload: []byte("x")})
	}
	if err := w.Write(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := len(readRows(t, tb)); got != 500 {
		t.Fatalf("%d rows, want 500", got)
	}
	var _ postgres.Tx = (*sql.Tx)(nil)
}

func TestWriteRolledBackLeavesNoEvent(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	w := newWriter(t, tb)
	ctx := context.Background()
	tx, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, postgres.PgxTx(tx), outbox.Message{Type: "orders.paid"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(readRows(t, tb)); got != 0 {
		t.Fatalf("%d rows after rollback, want 0", got)
	}
}

func TestWriteCarriesTheTraceContext(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	w := newWriter(t, tb)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	own := "00-11111111111111111111111111111111-2222222222222222-01"
	err := pgx.BeginFunc(ctx, tb.Store.Pool(), func(tx pgx.Tx) error {
		return w.Write(ctx, postgres.PgxTx(tx),
			outbox.Message{Type: "traced"},
			outbox.Message{Type: "traced", Headers: map[string]string{"traceparent": own}},
		)
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := readRows(t, tb)
	if got, want := rows[0].headers["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
		t.Errorf("traceparent = %q, want %q from ctx", got, want)
	}
	if got := rows[1].headers["traceparent"]; got != own {
		t.Errorf("an event's own traceparent was replaced: %q", got)
	}
}

func TestWriteRejectsBadInput(t *testing.T) {
	t.Parallel()
	if _, err := postgres.NewWriter("events; drop table x"); err == nil {
		t.Error("NewWriter accepted an injection attempt")
	}
	tb := pgtest.New(t)
	w := newWriter(t, tb)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, tb.Store.Pool(), func(tx pgx.Tx) error {
		return w.Write(ctx, postgres.PgxTx(tx), outbox.Message{Type: "ok"}, outbox.Message{})
	})
	if err == nil || !strings.Contains(err.Error(), "event 1 has no Type") {
		t.Fatalf("Write of an event without a type: %v", err)
	}
	if got := len(readRows(t, tb)); got != 0 {
		t.Fatalf("%d rows written by a failed Write, want 0", got)
	}
}
