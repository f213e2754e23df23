package telemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/relay"
)

// The engine's instruments, Open Outbox Relay's names with its units; the
// engine's statements are also timed in storage.latency.
const (
	MetricEventsTotal      = "openoutbox.events.total"
	MetricE2ELatency       = "openoutbox.events.e2e_latency"
	MetricBatchSize        = "openoutbox.events.batch_size"
	MetricPublisherLatency = "openoutbox.publisher.latency"
	MetricRelayState       = "openoutbox.relay.state"
)

// opClaim is a claim in storage.latency; settles use their relay.OpXxx.
const opClaim = "claim"

var (
	// An event may wait hours for retries, so end-to-end goes further than
	// latencyBuckets.
	e2eBuckets   = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400}
	batchBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
)

type engineInstruments struct {
	events           metric.Int64Counter
	e2eLatency       metric.Float64Histogram
	batchSize        metric.Int64Histogram
	publisherLatency metric.Float64Histogram
	// state is the engine state the relay.state gauge reports.
	state atomic.Int32
}

func (t *Telemetry) createEngineInstruments() error {
	m, i := t.meter, &t.engineInst
	var errs [5]error
	i.events, errs[0] = m.Int64Counter(MetricEventsTotal, metric.WithUnit(unitEvents),
		metric.WithDescription("Events the relay finished with, by outcome: success (the broker acknowledged it), failed (it will be retried), dead (it went DEAD)."))
	i.e2eLatency, errs[1] = m.Float64Histogram(MetricE2ELatency, metric.WithUnit(unitSeconds),
		metric.WithDescription("Time from an event's created_at to the broker's acknowledgement."),
		metric.WithExplicitBucketBoundaries(e2eBuckets...))
	i.batchSize, errs[2] = m.Int64Histogram(MetricBatchSize, metric.WithUnit(unitEvents),
		metric.WithDescription("Events per claim, counting only claims that found events."),
		metric.WithExplicitBucketBoundaries(batchBuckets...))
	i.publisherLatency, errs[3] = m.Float64Histogram(MetricPublisherLatency, metric.WithUnit(unitSeconds),
		metric.WithDescription("Time to publish a batch and receive the broker's acknowledgements, by status: success, or failed when any event was not acknowledged."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	var state metric.Int64ObservableGauge
	state, errs[4] = m.Int64ObservableGauge(MetricRelayState,
		metric.WithDescription("Engine state: 1 active, 2 paused (the broker is unavailable), 3 error (the database is failing)."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	i.state.Store(int32(relay.StateActive))
	if _, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(state, int64(i.state.Load()))
		return nil
	}, state); err != nil {
		return err
	}
	// Series that exist from the start, at zero: Prometheus computes no
	// increase for a series whose first sample is already 1, so an alert on
	// the first DEAD event would never fire.
	for _, s := range []metric.AddOption{setSuccess, setFailed, setDead} {
		i.events.Add(context.Background(), 0, s)
	}
	return nil
}

// EngineObserver returns the relay.Observer that records the engine's
// work: metrics, and a trace per batch.
func (t *Telemetry) EngineObserver() relay.Observer { return engineObserver{t} }

// Span names. A batch is one trace: outbox.batch from the start of its
// claim to the end of its last settle, with outbox.claim, outbox.publish
// and one outbox.settle per settle call (all the batch's outcomes) under
// it.
const (
	SpanBatch   = "outbox.batch"
	SpanClaim   = "outbox.claim"
	SpanPublish = "outbox.publish"
	SpanSettle  = "outbox.settle"
)

// Span attribute keys.
const (
	attrBatchEvents = "outbox.batch.events"
	attrDelivered   = "outbox.events.delivered"
	attrFailed      = "outbox.events.failed"
	attrDeadEvents  = "outbox.events.dead"
	attrReleased    = "outbox.events.released"
	attrSettleOp    = "outbox.settle.op"
	attrMsgCount    = "messaging.batch.message_count"
	attrMsgOp       = "messaging.operation.type"
)

// engineObserver implements relay.Observer.
type engineObserver struct{ t *Telemetry }

// batchKey finds a batch's trace state in the context its claim returned.
type batchKey struct{}

// batch is what the stages of one claimed batch share. The claim fills it
// in when it ends; the publish and settles read it later in the batch's
// goroutine, which the engine starts after the claim returned.
type batch struct {
	began time.Time
	// root is the outbox.batch span; nil when the claim found nothing or
	// failed.
	root trace.Span
}

// StartClaim records the claim after the fact, when its result is known:
// an idle relay claims every POLL_INTERVAL and finds nothing, and those
// empty claims would bury the real batches in spans.
func (o engineObserver) StartClaim(ctx context.Context) (context.Context, func(int, error)) {
	b := &batch{began: time.Now()}
	return context.WithValue(ctx, batchKey{}, b), func(claimed int, err error) {
		ended := time.Now()
		t := o.t
		t.storageLatency.Record(ctx, ended.Sub(b.began).Seconds(), storageSet(opClaim, err))
		switch {
		case err != nil:
			_, span := t.tracer.Start(ctx, SpanClaim, trace.WithTimestamp(b.began))
			failSpan(span, err)
			span.End(trace.WithTimestamp(ended))
		case claimed > 0:
			t.engineInst.batchSize.Record(ctx, int64(claimed))
			var rootCtx context.Context
			rootCtx, b.root = t.tracer.Start(ctx, SpanBatch, trace.WithTimestamp(b.began),
				trace.WithAttributes(attribute.Int(attrBatchEvents, claimed)))
			_, span := t.tracer.Start(rootCtx, SpanClaim, trace.WithTimestamp(b.began),
				trace.WithAttributes(attribute.Int(attrBatchEvents, claimed)))
			span.End(trace.WithTimestamp(ended))
		}
	}
}

// inBatch returns ctx with the batch's root span as the current span, so
// that stage spans become its children.
func inBatch(ctx context.Context) (context.Context, *batch) {
	b, _ := ctx.Value(batchKey{}).(*batch)
	if b != nil && b.root != nil {
		ctx = trace.ContextWithSpan(ctx, b.root)
	}
	return ctx, b
}

// StartPublish opens the publish span and links it to every producer trace
// named by a traceparent header in the batch. The headers themselves are
// not touched: each event's traceparent reaches the broker as the producer
// wrote it, so consumers continue the producer's trace, not ours.
func (o engineObserver) StartPublish(ctx context.Context, events []outbox.Event) (context.Context, func([]error)) {
	t := o.t
	began := time.Now()
	ctx, _ = inBatch(ctx)
	ctx, span := t.tracer.Start(ctx, SpanPublish, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.Int(attrMsgCount, len(events)), attribute.String(attrMsgOp, "send")))
	if span.IsRecording() {
		for _, l := range producerLinks(events) {
			span.AddLink(l)
		}
	}
	return ctx, func(results []error) {
		acked := time.Now()
		var delivered, failed int
		var firstErr error
		for i, err := range results {
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			delivered++
			if i < len(events) {
				// created_at is the database's clock; a little skew must
				// not make a negative latency.
				t.engineInst.e2eLatency.Record(ctx, max(acked.Sub(events[i].CreatedAt).Seconds(), 0))
			}
		}
		status := setSuccess
		if failed > 0 {
			status = setFailed
		}
		t.engineInst.publisherLatency.Record(ctx, acked.Sub(began).Seconds(), status)
		span.SetAttributes(attribute.Int(attrDelivered, delivered), attribute.Int(attrFailed, failed))
		if firstErr != nil {
			failSpan(span, fmt.Errorf("%d of %d events not acknowledged, first: %w", failed, len(results), firstErr))
		}
		span.End(trace.WithTimestamp(acked))
	}
}

// producerLinks returns a link to each distinct producer span named by a
// traceparent (and tracestate) header in the events. The span keeps at most
// OTEL_SPAN_LINK_COUNT_LIMIT links (128 by default).
func producerLinks(events []outbox.Event) []trace.Link {
	type spanID struct {
		trace trace.TraceID
		span  trace.SpanID
	}
	var links []trace.Link
	seen := map[spanID]bool{}
	for _, ev := range events {
		// Cheap test before parsing JSON; "raceparent" matches the key
		// whatever the case of its first letter.
		if !bytes.Contains(ev.Headers, []byte("raceparent")) {
			continue
		}
		headers, err := outbox.ParseHeaders(ev.Headers)
		if err != nil {
			continue // the publish reports the malformed headers
		}
		carrier := propagation.MapCarrier{}
		for k, v := range headers {
			switch strings.ToLower(k) {
			case outbox.HeaderTraceparent, "tracestate":
				carrier[strings.ToLower(k)] = v
			}
		}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
		id := spanID{sc.TraceID(), sc.SpanID()}
		if !sc.IsValid() || seen[id] {
			continue
		}
		seen[id] = true
		links = append(links, trace.Link{SpanContext: sc})
	}
	return links
}

// StartSettle times one settle call, retries included, as
// storage.latency with op = the settle op (release too).
func (o engineObserver) StartSettle(ctx context.Context, op string, events int) (context.Context, func(error)) {
	t := o.t
	began := time.Now()
	ctx, _ = inBatch(ctx)
	ctx, span := t.tracer.Start(ctx, SpanSettle,
		trace.WithAttributes(attribute.String(attrSettleOp, op), attribute.Int(attrBatchEvents, events)))
	return ctx, func(err error) {
		ended := time.Now()
		t.storageLatency.Record(ctx, ended.Sub(began).Seconds(), storageSet(op, err))
		if err != nil {
			failSpan(span, err)
		}
		span.End(trace.WithTimestamp(ended))
	}
}

// Finished counts the batch's events by outcome and ends its trace.
// Released events are not counted: they were not attempted, and will be
// counted when they are.
func (o engineObserver) Finished(ctx context.Context, out relay.Outcome) {
	t := o.t
	t.engineInst.events.Add(ctx, int64(out.Delivered), setSuccess)
	t.engineInst.events.Add(ctx, int64(out.Failed), setFailed)
	t.engineInst.events.Add(ctx, int64(out.Dead), setDead)
	if _, b := inBatch(ctx); b != nil && b.root != nil {
		b.root.SetAttributes(
			attribute.Int(attrDelivered, out.Delivered),
			attribute.Int(attrFailed, out.Failed),
			attribute.Int(attrDeadEvents, out.Dead),
			attribute.Int(attrReleased, out.Released))
		b.root.End()
	}
}

// StateChanged keeps the state the relay.state gauge reports.
func (o engineObserver) StateChanged(s relay.State) { o.t.engineInst.state.Store(int32(s)) }

func failSpan(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
