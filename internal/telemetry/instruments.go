package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outbox-relay/relay/pkg/relay"
)

// Instrument names. The first eight are Open Outbox Relay's, with its units,
// so that its dashboards and alerts work unchanged; docs/metrics.md lists
// the names Prometheus sees.
const (
	MetricEventsTotal      = "openoutbox.events.total"
	MetricE2ELatency       = "openoutbox.events.e2e_latency"
	MetricBatchSize        = "openoutbox.events.batch_size"
	MetricStorageLatency   = "openoutbox.storage.latency"
	MetricPublisherLatency = "openoutbox.publisher.latency"
	MetricPendingCount     = "openoutbox.backlog.pending_count"
	MetricOldestAge        = "openoutbox.backlog.oldest_age_seconds"
	MetricRelayState       = "openoutbox.relay.state"
	MetricDeadCount        = "openoutbox.backlog.dead_count"
	MetricReaperReclaimed  = "openoutbox.reaper.reclaimed"
	// Retention (DELIVERED_RETENTION, DEAD_RETENTION, partitions).
	MetricRetentionDeleted        = "openoutbox.retention.deleted"
	MetricRetentionPartitions     = "openoutbox.retention.partitions"
	MetricRetentionPartitionsKept = "openoutbox.retention.partitions_kept"
)

// Units, attribute keys and their values. Every attribute has a handful of
// values: no event ids or types, which would make a series per event.
const (
	unitEvents  = "{event}"
	unitSeconds = "s"

	attrStatus  = "status"
	attrOp      = "op"
	attrOutcome = "outcome"
	attrAction  = "action"

	statusSuccess  = "success"
	statusFailed   = "failed"
	statusDead     = "dead"
	statusError    = "error"
	statusNew      = "new"
	statusRetrying = "retrying"

	outcomeRequeued = "requeued"
	outcomeDead     = "dead"

	// Storage operations beyond the engine's settle ops (relay.OpXxx).
	opClaim   = "claim"
	opReap    = "reap"
	opBacklog = "backlog"
)

// Histogram buckets. The SDK's defaults (0 to 10000) suit milliseconds; our
// latencies are in seconds, and a PostgreSQL statement or a JetStream
// acknowledgement takes about a millisecond.
var (
	latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// An event may wait hours for retries, so end-to-end goes further.
	e2eBuckets   = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400}
	batchBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
)

type instruments struct {
	events           metric.Int64Counter
	e2eLatency       metric.Float64Histogram
	batchSize        metric.Int64Histogram
	storageLatency   metric.Float64Histogram
	publisherLatency metric.Float64Histogram
	reclaimed        metric.Int64Counter
	retentionDeleted metric.Int64Counter
	partitions       metric.Int64Counter
	partitionsKept   metric.Int64Gauge
}

// Attribute sets built once, so recording does not allocate them per call.
var (
	setSuccess   = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusSuccess)))
	setFailed    = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusFailed)))
	setDead      = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusDead)))
	setNew       = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusNew)))
	setRetrying  = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusRetrying)))
	setRequeued  = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrOutcome, outcomeRequeued)))
	setReapDead  = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrOutcome, outcomeDead)))
	setDelivered = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, "delivered")))
	setCreated   = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrAction, "created")))
	setDropped   = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrAction, "dropped")))
)

// storageSet is the attribute set of one storage.latency recording.
func storageSet(op string, err error) metric.MeasurementOption {
	status := statusSuccess
	if err != nil {
		status = statusError
	}
	return metric.WithAttributes(attribute.String(attrOp, op), attribute.String(attrStatus, status))
}

func (t *Telemetry) createInstruments() error {
	m := t.meter
	var errs [15]error
	var i instruments
	i.events, errs[0] = m.Int64Counter(MetricEventsTotal, metric.WithUnit(unitEvents),
		metric.WithDescription("Events the relay finished with, by outcome: success (the broker acknowledged it), failed (it will be retried), dead (it went DEAD)."))
	i.e2eLatency, errs[1] = m.Float64Histogram(MetricE2ELatency, metric.WithUnit(unitSeconds),
		metric.WithDescription("Time from an event's created_at to the broker's acknowledgement."),
		metric.WithExplicitBucketBoundaries(e2eBuckets...))
	i.batchSize, errs[2] = m.Int64Histogram(MetricBatchSize, metric.WithUnit(unitEvents),
		metric.WithDescription("Events per claim, counting only claims that found events."),
		metric.WithExplicitBucketBoundaries(batchBuckets...))
	i.storageLatency, errs[3] = m.Float64Histogram(MetricStorageLatency, metric.WithUnit(unitSeconds),
		metric.WithDescription("Duration of outbox table operations (claim, mark_delivered, delete_delivered, mark_failed, release, renew, reap, backlog); a settle's retries count in its time."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	i.publisherLatency, errs[4] = m.Float64Histogram(MetricPublisherLatency, metric.WithUnit(unitSeconds),
		metric.WithDescription("Time to publish a batch and receive the broker's acknowledgements."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	i.reclaimed, errs[5] = m.Int64Counter(MetricReaperReclaimed, metric.WithUnit(unitEvents),
		metric.WithDescription("Expired leases the reaper took back: requeued to PENDING, or dead at the attempt limit."))
	i.retentionDeleted, errs[12] = m.Int64Counter(MetricRetentionDeleted, metric.WithUnit(unitEvents),
		metric.WithDescription("Rows retention removed (DELIVERED_RETENTION, DEAD_RETENTION), by status: delivered or dead; rows of dropped partitions included."))
	i.partitions, errs[13] = m.Int64Counter(MetricRetentionPartitions, metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions the retention loop created ahead or dropped, by action: created or dropped."))
	i.partitionsKept, errs[14] = m.Int64Gauge(MetricRetentionPartitionsKept, metric.WithUnit("{partition}"),
		metric.WithDescription("Expired partitions the last retention cycle had to keep (they hold PENDING or DELIVERING rows, or rows not yet past their retention)."))

	var pending, dead, state metric.Int64ObservableGauge
	var oldest metric.Float64ObservableGauge
	pending, errs[6] = m.Int64ObservableGauge(MetricPendingCount, metric.WithUnit(unitEvents),
		metric.WithDescription("PENDING events in the table: new (never attempted) or retrying. Read every BACKLOG_INTERVAL."))
	oldest, errs[7] = m.Float64ObservableGauge(MetricOldestAge, metric.WithUnit(unitSeconds),
		metric.WithDescription("Age of the oldest PENDING event, 0 when none is pending. Read every BACKLOG_INTERVAL."))
	dead, errs[8] = m.Int64ObservableGauge(MetricDeadCount, metric.WithUnit(unitEvents),
		metric.WithDescription("DEAD events in the table. Read every BACKLOG_INTERVAL."))
	state, errs[9] = m.Int64ObservableGauge(MetricRelayState,
		metric.WithDescription("Engine state: 1 active, 2 paused (the broker is unavailable), 3 error (the database is failing)."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	_, errs[10] = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(state, int64(t.state.Load()))
		p := t.backlog.Load()
		if p == nil {
			return nil
		}
		// Until the first reading there is nothing to report: a zero
		// would claim an empty backlog.
		r, ok, _ := p.Last()
		if !ok {
			return nil
		}
		o.ObserveInt64(pending, r.PendingNew, setNew)
		o.ObserveInt64(pending, r.PendingRetrying, setRetrying)
		o.ObserveFloat64(oldest, r.OldestPendingAge.Seconds())
		o.ObserveInt64(dead, r.Dead)
		return nil
	}, pending, oldest, dead, state)
	if errs[10] != nil {
		return errs[10]
	}

	// Series that exist from the start, at zero: Prometheus computes no
	// increase for a series whose first sample is already 1, so an alert on
	// the first DEAD event would never fire.
	ctx := context.Background()
	for _, s := range []metric.AddOption{setSuccess, setFailed, setDead} {
		i.events.Add(ctx, 0, s)
	}
	i.reclaimed.Add(ctx, 0, setRequeued)
	i.reclaimed.Add(ctx, 0, setReapDead)
	i.retentionDeleted.Add(ctx, 0, setDelivered)
	i.retentionDeleted.Add(ctx, 0, setDead)
	t.inst = i
	return nil
}

// Observer returns the relay.Observer that records the engine's work.
func (t *Telemetry) Observer() relay.Observer { return observer{t} }
