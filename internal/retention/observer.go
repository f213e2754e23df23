package retention

import (
	"context"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Observer is told what retention does, so that metrics and traces live
// outside it (internal/telemetry implements one). Embed NopObserver to
// implement only some of it.
type Observer interface {
	// Deleted reports rows removed, by status, as each batch goes (rows of
	// dropped partitions included), so that nothing is lost when a cycle
	// fails half-way.
	Deleted(ctx context.Context, status outbox.Status, rows int64)
	// PartitionsMaintained reports what one partition maintenance did,
	// failed or not.
	PartitionsMaintained(ctx context.Context, r storage.PartitionReport)
}

// NopObserver observes nothing.
type NopObserver struct{}

func (NopObserver) Deleted(context.Context, outbox.Status, int64) {}

func (NopObserver) PartitionsMaintained(context.Context, storage.PartitionReport) {}
