package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/relay"
)

// Span names. A batch is one trace: outbox.batch from the start of its
// claim to the end of its last settle, with outbox.claim, outbox.publish
// and one outbox.settle per statement under it.
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

// observer implements relay.Observer.
type observer struct{ t *Telemetry }

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
func (o observer) StartClaim(ctx context.Context) (context.Context, func(int, error)) {
	b := &batch{began: time.Now()}
	return context.WithValue(ctx, batchKey{}, b), func(claimed int, err error) {
		ended := time.Now()
		t := o.t
		t.inst.storageLatency.Record(ctx, ended.Sub(b.began).Seconds(), storageSet(opClaim, err))
		switch {
		case err != nil:
			_, span := t.tracer.Start(ctx, SpanClaim, trace.WithTimestamp(b.began))
			failSpan(span, err)
			span.End(trace.WithTimestamp(ended))
		case claimed > 0:
			t.inst.batchSize.Record(ctx, int64(claimed))
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
func (o observer) StartPublish(ctx context.Context, events []outbox.Event) (context.Context, func([]error)) {
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
				t.inst.e2eLatency.Record(ctx, max(acked.Sub(events[i].CreatedAt).Seconds(), 0))
			}
		}
		status := setSuccess
		if failed > 0 {
			status = setFailed
		}
		t.inst.publisherLatency.Record(ctx, acked.Sub(began).Seconds(), status)
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

// StartSettle times one settle statement, retries included, as
// storage.latency with op = the settle op (release too).
func (o observer) StartSettle(ctx context.Context, op string, events int) (context.Context, func(error)) {
	t := o.t
	began := time.Now()
	ctx, _ = inBatch(ctx)
	ctx, span := t.tracer.Start(ctx, SpanSettle,
		trace.WithAttributes(attribute.String(attrSettleOp, op), attribute.Int(attrBatchEvents, events)))
	return ctx, func(err error) {
		ended := time.Now()
		t.inst.storageLatency.Record(ctx, ended.Sub(began).Seconds(), storageSet(op, err))
		if err != nil {
			failSpan(span, err)
		}
		span.End(trace.WithTimestamp(ended))
	}
}

// Finished counts the batch's events by outcome and ends its trace.
// Released events are not counted: they were not attempted, and will be
// counted when they are.
func (o observer) Finished(ctx context.Context, out relay.Outcome) {
	t := o.t
	t.inst.events.Add(ctx, int64(out.Delivered), setSuccess)
	t.inst.events.Add(ctx, int64(out.Failed), setFailed)
	t.inst.events.Add(ctx, int64(out.Dead), setDead)
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
func (o observer) StateChanged(s relay.State) { o.t.state.Store(int32(s)) }

func failSpan(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
