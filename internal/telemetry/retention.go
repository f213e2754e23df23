package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Retention's instruments (DELIVERED_RETENTION, DEAD_RETENTION,
// partitions).
const (
	MetricRetentionDeleted        = "openoutbox.retention.deleted"
	MetricRetentionPartitions     = "openoutbox.retention.partitions"
	MetricRetentionPartitionsKept = "openoutbox.retention.partitions_kept"
)

const attrAction = "action"

var (
	setDelivered = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, "delivered")))
	setCreated   = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrAction, "created")))
	setDropped   = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrAction, "dropped")))
)

type retentionInstruments struct {
	deleted        metric.Int64Counter
	partitions     metric.Int64Counter
	partitionsKept metric.Int64Gauge
}

func (t *Telemetry) createRetentionInstruments() error {
	m, i := t.meter, &t.retentionInst
	var err error
	if i.deleted, err = m.Int64Counter(MetricRetentionDeleted, metric.WithUnit(unitEvents),
		metric.WithDescription("Rows retention removed (DELIVERED_RETENTION, DEAD_RETENTION), by status: delivered or dead; rows of dropped partitions included.")); err != nil {
		return err
	}
	if i.partitions, err = m.Int64Counter(MetricRetentionPartitions, metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions the retention loop created ahead or dropped, by action: created or dropped.")); err != nil {
		return err
	}
	if i.partitionsKept, err = m.Int64Gauge(MetricRetentionPartitionsKept, metric.WithUnit("{partition}"),
		metric.WithDescription("Expired partitions the last retention cycle had to keep (they hold PENDING or DELIVERING rows, or rows not yet past their retention).")); err != nil {
		return err
	}
	// At zero from the start, so that an alert on the first increase fires.
	i.deleted.Add(context.Background(), 0, setDelivered)
	i.deleted.Add(context.Background(), 0, setDead)
	return nil
}

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
	o.t.retentionInst.deleted.Add(ctx, rows, set)
}

// PartitionsMaintained counts the partitions a maintenance created and
// dropped and records how many expired ones it kept.
func (o retentionObserver) PartitionsMaintained(ctx context.Context, r storage.PartitionReport) {
	i := &o.t.retentionInst
	i.partitions.Add(ctx, int64(len(r.Created)), setCreated)
	i.partitions.Add(ctx, int64(len(r.Dropped)), setDropped)
	i.partitionsKept.Record(ctx, int64(len(r.Kept)))
}
