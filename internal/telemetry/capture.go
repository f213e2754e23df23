package telemetry

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/outbox-relay/relay/pkg/relay"
)

// CAPTURE=wal's metrics.
const (
	MetricWALRetained      = "openoutbox.wal.retained_bytes"
	MetricWALStreaming     = "openoutbox.wal.streaming"
	MetricWALSlotRecreated = "openoutbox.wal.slot_recreated"
)

// SlotReader reads how many bytes of WAL the relay's slot keeps; ok is
// false when the slot does not exist.
type SlotReader func(ctx context.Context) (retained int64, ok bool, err error)

// slotReadTimeout bounds the query a scrape makes for the retained bytes.
const slotReadTimeout = 2 * time.Second

// CaptureObserver returns the relay.CaptureObserver that records CAPTURE=wal:
// whether this relay streams, slots made anew, and (read at each
// collection through slot) the WAL the slot keeps.
func (t *Telemetry) CaptureObserver(slot SlotReader, log *slog.Logger) (relay.CaptureObserver, error) {
	m := t.meter
	o := &captureObserver{}
	var err error
	if o.recreated, err = m.Int64Counter(MetricWALSlotRecreated, metric.WithUnit("{slot}"),
		metric.WithDescription("Replication slots the relay had to make anew after the old one was lost (invalidated) or dropped; the events written in between were claimed from the table.")); err != nil {
		return nil, err
	}
	o.recreated.Add(context.Background(), 0)
	retained, err := m.Int64ObservableGauge(MetricWALRetained, metric.WithUnit("By"),
		metric.WithDescription("Bytes of WAL the relay's replication slot keeps from removal (current WAL position minus the slot's restart_lsn)."))
	if err != nil {
		return nil, err
	}
	streaming, err := m.Int64ObservableGauge(MetricWALStreaming,
		metric.WithDescription("1 on the relay that streams from the replication slot, 0 on standbys and while the stream is down."))
	if err != nil {
		return nil, err
	}
	warned := false
	_, err = m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		obs.ObserveInt64(streaming, o.streaming.Load())
		ctx, cancel := context.WithTimeout(ctx, slotReadTimeout)
		defer cancel()
		n, ok, err := slot(ctx)
		switch {
		case err != nil && !warned:
			log.Warn("reading the replication slot's retained WAL failed", "error", err)
			warned = true
		case err == nil && ok:
			warned = false
			obs.ObserveInt64(retained, n)
		}
		return nil
	}, retained, streaming)
	if err != nil {
		return nil, err
	}
	return o, nil
}

type captureObserver struct {
	recreated metric.Int64Counter
	streaming atomic.Int64
}

func (o *captureObserver) CaptureStateChanged(s relay.CaptureState, _ error) {
	v := int64(0)
	if s == relay.CaptureStreaming || s == relay.CaptureBackfilling {
		v = 1
	}
	o.streaming.Store(v)
}

func (o *captureObserver) SlotRecreated() { o.recreated.Add(context.Background(), 1) }
