package storage

import (
	"context"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// Producer is the part of a driver's producer writer (postgres.Writer,
// mysql.Writer) that every driver shares: it prepares messages with
// outbox.Prepare — ids, trace context, the header rules — and hands their
// columns to the driver's insert, within the caller's transaction tx.
type Producer[Tx any] struct {
	insert func(ctx context.Context, tx Tx, c outbox.Columns) error
}

// NewProducer returns a Producer that writes through insert.
func NewProducer[Tx any](insert func(ctx context.Context, tx Tx, c outbox.Columns) error) Producer[Tx] {
	return Producer[Tx]{insert: insert}
}

// Write inserts events within tx, so that they commit or roll back with the
// caller's business change. It fills in missing ids with UUIDv7s and adds
// the W3C trace context of ctx (the traceparent header) unless an event
// carries its own. No events: no statement.
func (p Producer[Tx]) Write(ctx context.Context, tx Tx, events ...outbox.Message) error {
	if len(events) == 0 {
		return nil
	}
	c, err := outbox.Prepare(ctx, events)
	if err != nil {
		return err
	}
	return p.insert(ctx, tx, c)
}
