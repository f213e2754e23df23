package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/storage"
)

// MetricReaperReclaimed counts what the reaper took back; its statements
// are timed in storage.latency with op = reap.
const MetricReaperReclaimed = "openoutbox.reaper.reclaimed"

const (
	opReap = "reap"

	attrOutcome     = "outcome"
	outcomeRequeued = "requeued"
	outcomeDead     = "dead"
)

var (
	setRequeued = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrOutcome, outcomeRequeued)))
	setReapDead = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrOutcome, outcomeDead)))
)

type reaperInstruments struct {
	reclaimed metric.Int64Counter
}

func (t *Telemetry) createReaperInstruments() error {
	i := &t.reaperInst
	var err error
	i.reclaimed, err = t.meter.Int64Counter(MetricReaperReclaimed, metric.WithUnit(unitEvents),
		metric.WithDescription("Expired leases the reaper took back: requeued to PENDING, or dead at the attempt limit."))
	if err != nil {
		return err
	}
	// At zero from the start, so that an alert on the first increase fires.
	i.reclaimed.Add(context.Background(), 0, setRequeued)
	i.reclaimed.Add(context.Background(), 0, setReapDead)
	return nil
}

// reaperObserver implements reaper.Observer.
type reaperObserver struct{ t *Telemetry }

// ReaperObserver returns the reaper.Observer that records the reaper's
// work: every reap statement timed as storage.latency with op = reap, and
// what it took back counted in reaper.reclaimed.
func (t *Telemetry) ReaperObserver() reaper.Observer { return reaperObserver{t} }

func (o reaperObserver) StartReap(ctx context.Context) (context.Context, func(storage.ReapResult, error)) {
	began := time.Now()
	return ctx, func(res storage.ReapResult, err error) {
		t := o.t
		t.storageLatency.Record(ctx, time.Since(began).Seconds(), storageSet(opReap, err))
		if err != nil || res.Requeued+res.Dead == 0 {
			return
		}
		t.reaperInst.reclaimed.Add(ctx, int64(res.Requeued), setRequeued)
		t.reaperInst.reclaimed.Add(ctx, int64(res.Dead), setReapDead)
	}
}
