package telemetry

import (
	"context"

	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// retentionObserver implements retention.Observer.
type retentionObserver struct{ t *Telemetry }

// RetentionObserver returns the retention.Observer that records what the
// retention loop removes and what its partition maintenance does.
func (t *Telemetry) RetentionObserver() retention.Observer { return retentionObserver{t} }

// Deleted counts rows retention removed, by status.
func (o retentionObserver) Deleted(ctx context.Context, status outbox.Status, rows int64) {
	set := setDelivered
	if status == outbox.StatusDead {
		set = setDead
	}
	o.t.inst.retentionDeleted.Add(ctx, rows, set)
}

// PartitionsMaintained counts the partitions a maintenance created and
// dropped and records how many expired ones it kept.
func (o retentionObserver) PartitionsMaintained(ctx context.Context, r storage.PartitionReport) {
	t := o.t
	t.inst.partitions.Add(ctx, int64(len(r.Created)), setCreated)
	t.inst.partitions.Add(ctx, int64(len(r.Dropped)), setDropped)
	t.inst.partitionsKept.Record(ctx, int64(len(r.Kept)))
}
