package relay

import (
	"context"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// One pipeline carries every batch, whatever its source, from the broker
// to its settle: publish, classify each event's outcome, settle it. The
// sources differ only in what batchSource says: the engine's claims,
// leased or held (claimed), and the database's log (Capture's logSource).

// batch is events on their way through the pipeline.
type batch struct {
	events []outbox.Event
	// ctx is the batch's context for publishing, carrying what the
	// Observer put in it; a shutdown ends it once its publishing time is
	// spent.
	ctx context.Context
	// settleBy ends when settling must stop, a little after ctx.
	settleBy context.Context
	// source is where the batch came from, and how its outcome is
	// recorded.
	source batchSource
}

// batchSource is what differs between the sources of batches.
type batchSource interface {
	// keep keeps the batch's claim from other relays while it is at the
	// broker (a lease renewed, a held claim turned into a lease), until
	// the returned function is called, which waits for it to stop.
	keep() (stop func())
	// waitsOutOutages says that a broker outage is waited out and the
	// events sent again, rather than the events handed back.
	waitsOutOutages() bool
	// settle records the outcome the source's way, then reports the batch
	// finished (Engine.finished).
	settle(o outcome)
}

// process carries b through the pipeline: it publishes b's events, decides
// each one's outcome, and has b's source settle it.
func (e *Engine) process(b *batch) {
	var results []error
	if len(b.events) > 0 {
		pubCtx, endPublish := e.obs.StartPublish(b.ctx, b.events)
		stop := b.source.keep()
		if b.source.waitsOutOutages() {
			results = e.publishUntilTaken(pubCtx, b.events)
		} else {
			results = e.publishBatch(pubCtx, b.events)
		}
		stop()
		endPublish(results)
	}
	o := e.classify(b.ctx, b.events, results)
	b.source.settle(o)
	switch {
	case o.brokerErr != nil && b.ctx.Err() == nil:
		e.broker.close(o.brokerErr)
	case len(o.delivered) > 0:
		e.broker.worked()
	}
}

// finished reports a settled batch's outcome to the Observer and the log.
func (e *Engine) finished(ctx context.Context, o Outcome, firstErr error) {
	e.obs.Finished(ctx, o)
	if failed := o.Failed + o.Dead; failed > 0 {
		e.log.Warn("events failed", "failed", failed, "dead", o.Dead, "first_error", firstErr)
	}
}
