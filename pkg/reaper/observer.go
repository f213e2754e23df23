package reaper

import (
	"context"

	"github.com/outbox-relay/relay/pkg/storage"
)

// Observer is told what the reaper does, so that metrics and traces live
// outside it (internal/telemetry implements one). Embed NopObserver to
// implement only some of it.
type Observer interface {
	// StartReap begins one reap statement and returns the context it runs
	// in; end gets what the statement took back, or its error.
	StartReap(ctx context.Context) (_ context.Context, end func(res storage.ReapResult, err error))
}

// NopObserver observes nothing.
type NopObserver struct{}

func (NopObserver) StartReap(ctx context.Context) (context.Context, func(storage.ReapResult, error)) {
	return ctx, func(storage.ReapResult, error) {}
}
