package telemetry

import (
	"context"
	"time"

	"github.com/outbox-relay/relay/internal/reaper"
	"github.com/outbox-relay/relay/pkg/storage"
)

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
		t.inst.storageLatency.Record(ctx, time.Since(began).Seconds(), storageSet(opReap, err))
		if err != nil || res.Requeued+res.Dead == 0 {
			return
		}
		t.inst.reclaimed.Add(ctx, int64(res.Requeued), setRequeued)
		t.inst.reclaimed.Add(ctx, int64(res.Dead), setReapDead)
	}
}
