package relay

import (
	"context"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// Every component of the relay reports what it does to an observer of its
// own, declared beside it: Observer for the engine, CaptureObserver for
// CAPTURE=wal, and reaper.Observer and retention.Observer in the relay
// command's packages. Each has a no-op (NopObserver, NopCaptureObserver)
// to embed, so that an implementation written for some methods keeps
// compiling when one is added. The relay command's implementations are in
// internal/telemetry, one file per component: a metric or a span for a
// component is added there alone. Log lines are not observed: a
// component writes them where it decides, through its Logger, so that a
// program using the engine without telemetry keeps them.

// Observer is told what the engine does, so that metrics and traces live
// outside it (internal/telemetry implements one). Each Start method is called as
// a stage begins and returns the context the stage runs in (carrying a span,
// say) and a function the engine calls when the stage ends. A batch's
// publish and settles run in the context its claim returned.
type Observer interface {
	// StartClaim begins a claim; end gets the number of events claimed.
	StartClaim(ctx context.Context) (_ context.Context, end func(claimed int, err error))
	// StartPublish begins sending events to the broker; end gets one result
	// per event.
	StartPublish(ctx context.Context, events []outbox.Event) (_ context.Context, end func(results []error))
	// StartSettle begins a storage call on a batch's rows: a settle,
	// one call for all the batch's outcomes, reported as the first kind
	// it records — mark_delivered (or delete_delivered), mark_failed or
	// release for a leased or held batch; record_delivered (or
	// record_deleted), record_failed or defer for events read from the
	// database's log (Capture) — or a lease's renew; events is how many
	// rows it covers.
	StartSettle(ctx context.Context, op string, events int) (_ context.Context, end func(err error))
	// Finished reports what became of a claimed batch.
	Finished(ctx context.Context, o Outcome)
	// StateChanged reports a new engine state.
	StateChanged(s State)
}

// Outcome is what became of the events of one claimed batch.
type Outcome struct {
	// Delivered were acknowledged by the broker.
	Delivered int
	// Failed went back to PENDING to be retried after a backoff.
	Failed int
	// Dead went DEAD.
	Dead int
	// Released went back to PENDING untouched: the broker was unavailable,
	// the relay was shutting down, or an earlier event of their key failed.
	Released int
}

// Operations on leased and held rows, as reported to StartSettle: a
// settle as the first kind it records.
const (
	OpMarkDelivered = "mark_delivered"
	// OpDeleteDelivered settles delivered events by deleting their rows
	// (Config.DeleteDelivered).
	OpDeleteDelivered = "delete_delivered"
	OpMarkFailed      = "mark_failed"
	OpRelease         = "release"
	// OpRenew extends the lease of a batch still at the broker (or keeps a
	// held claim's transaction from being ended as idle).
	OpRenew = "renew"
)

// NopObserver observes nothing.
type NopObserver struct{}

func (NopObserver) StartClaim(ctx context.Context) (context.Context, func(int, error)) {
	return ctx, func(int, error) {}
}

func (NopObserver) StartPublish(ctx context.Context, _ []outbox.Event) (context.Context, func([]error)) {
	return ctx, func([]error) {}
}

func (NopObserver) StartSettle(ctx context.Context, _ string, _ int) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (NopObserver) Finished(context.Context, Outcome) {}

func (NopObserver) StateChanged(State) {}

// CaptureObserver is told what a Capture does beyond the engine's stages,
// which it reports to the engine's Observer.
type CaptureObserver interface {
	// CaptureStateChanged reports a new state, with the error behind a
	// failing or lost one.
	CaptureStateChanged(s CaptureState, err error)
	// SlotRecreated reports that the log position had to be made anew
	// after it was lost or removed.
	SlotRecreated()
}

// NopCaptureObserver observes nothing.
type NopCaptureObserver struct{}

func (NopCaptureObserver) CaptureStateChanged(CaptureState, error) {}

func (NopCaptureObserver) SlotRecreated() {}
