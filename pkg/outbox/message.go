package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
)

// Message is an event an application writes into the outbox with its
// storage driver's producer helper (postgres.Write, mysql.Write).
type Message struct {
	// ID is the event id; zero gets a new UUIDv7, which sorts by time.
	// Consumers deduplicate by it.
	ID uuid.UUID
	// Type routes the event: the NATS subject, Kafka topic, AMQP routing
	// key, ... (after the driver's prefix). Required.
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

// Columns are messages made ready for one insert statement, column by
// column, the same way for every database: ids filled in, headers as a JSON
// object that carries the caller's trace context.
type Columns struct {
	IDs      []uuid.UUID
	Types    []string
	Keys     []string // "" for none: the driver stores NULL
	Payloads [][]byte // never nil: payload is NOT NULL
	Headers  []string // JSON objects
	// AvailableAt is nil where the message is due at once (the database's
	// now()).
	AvailableAt []*time.Time
}

// Prepare checks msgs and turns them into Columns: a missing ID becomes a
// new UUIDv7 and the W3C trace context of ctx (the traceparent header) is
// added to every message that does not carry its own.
func Prepare(ctx context.Context, msgs []Message) (Columns, error) {
	n := len(msgs)
	c := Columns{
		IDs:         make([]uuid.UUID, n),
		Types:       make([]string, n),
		Keys:        make([]string, n),
		Payloads:    make([][]byte, n),
		Headers:     make([]string, n),
		AvailableAt: make([]*time.Time, n),
	}
	trace := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, trace)
	for i, m := range msgs {
		if m.Type == "" {
			return c, fmt.Errorf("outbox: event %d has no Type", i)
		}
		c.IDs[i] = m.ID
		if c.IDs[i] == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return c, fmt.Errorf("outbox: new event id: %w", err)
			}
			c.IDs[i] = id
		}
		c.Types[i], c.Keys[i], c.Payloads[i] = m.Type, m.Key, m.Payload
		if c.Payloads[i] == nil {
			c.Payloads[i] = []byte{}
		}
		h, err := headerJSON(m.Headers, trace)
		if err != nil {
			return c, fmt.Errorf("outbox: event %d: %w", i, err)
		}
		c.Headers[i] = h
		if !m.AvailableAt.IsZero() {
			at := m.AvailableAt
			c.AvailableAt[i] = &at
		}
	}
	return c, nil
}

// headerJSON merges the trace context under the message's own headers.
func headerJSON(h map[string]string, trace propagation.MapCarrier) (string, error) {
	if len(h) == 0 && len(trace) == 0 {
		return "{}", nil
	}
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
