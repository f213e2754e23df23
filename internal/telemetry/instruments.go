package telemetry

import (
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outbox-relay/relay/pkg/relay"
)

// Each component's instruments are named, created and recorded in the file
// of its observer: engine.go, capture.go, reaper.go, retention.go and
// backlog.go (the backlog gauges). What they share is here. Open Outbox
// Relay's instruments keep its names and units, so that its dashboards and
// alerts work unchanged; docs/metrics.md lists the names Prometheus sees.

// MetricStorageLatency times the statements of the engine, the reaper and
// the backlog poller (Open Outbox Relay's).
const MetricStorageLatency = "openoutbox.storage.latency"

// storageOps are the op values storage.latency records: the claim, the
// engine's settles and lease renewals, the reaper's and the backlog's
// statements, and CAPTURE=wal's statements on events read from the log.
// Its help lists them, so that it names what is recorded.
var storageOps = []string{
	opClaim, relay.OpMarkDelivered, relay.OpDeleteDelivered, relay.OpMarkFailed, relay.OpRelease, relay.OpRenew,
	opReap, opBacklog,
	relay.OpRecordDelivered, relay.OpRecordDeleted, relay.OpRecordFailed, relay.OpDefer,
}

// storageLatencyHelp is storage.latency's description.
var storageLatencyHelp = "Duration of outbox table statements, by op (" + strings.Join(storageOps, ", ") +
	") and status (success or error); a settle's retries count in its time."

// Units, attribute keys and their values. Every attribute has a handful of
// values: no event ids or types, which would make a series per event.
const (
	unitEvents  = "{event}"
	unitSeconds = "s"

	attrStatus = "status"
	attrOp     = "op"

	statusSuccess = "success"
	statusFailed  = "failed"
	statusDead    = "dead"
	statusError   = "error"
)

// latencyBuckets are the histogram buckets of statements and publishes.
// The SDK's defaults (0 to 10000) suit milliseconds; our latencies are in
// seconds, and a PostgreSQL statement or a JetStream acknowledgement takes
// about a millisecond.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Attribute sets built once, so recording does not allocate them per call.
var (
	setSuccess = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusSuccess)))
	setFailed  = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusFailed)))
	setDead    = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusDead)))
)

// storageSet is the attribute set of one storage.latency recording.
func storageSet(op string, err error) metric.MeasurementOption {
	status := statusSuccess
	if err != nil {
		status = statusError
	}
	return metric.WithAttributes(attribute.String(attrOp, op), attribute.String(attrStatus, status))
}

// createInstruments creates the shared instruments and then each
// component's. CAPTURE=wal's are created by CaptureObserver, so that a
// relay that polls exports none.
func (t *Telemetry) createInstruments() error {
	var err error
	t.storageLatency, err = t.meter.Float64Histogram(MetricStorageLatency, metric.WithUnit(unitSeconds),
		metric.WithDescription(storageLatencyHelp),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	if err != nil {
		return err
	}
	return errors.Join(
		t.createEngineInstruments(),
		t.createBacklogInstruments(),
		t.createReaperInstruments(),
		t.createRetentionInstruments())
}
