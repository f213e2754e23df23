package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/storage"
)

// outcome is what happens to each event of a batch after its publish.
type outcome struct {
	delivered []uuid.UUID
	failed    []storage.Failure
	released  []uuid.UUID
	dead      int
	firstErr  error // first retryable or permanent error, for the log
	// brokerErr is set when the broker, not the events, failed.
	brokerErr error
	// unavailable: the broker was unavailable for some event.
	unavailable bool
}

// summary is what the Observer is told of the outcome.
func (o outcome) summary() Outcome {
	return Outcome{
		Delivered: len(o.delivered),
		Failed:    len(o.failed) - o.dead,
		Dead:      o.dead,
		Released:  len(o.released),
	}
}

// classify decides each event's fate from its publish result: delivered,
// released untouched (the broker was unavailable, the relay is shutting
// down, or an earlier event of its key did not go), retried after a backoff,
// or DEAD (a permanent error, or the attempt limit reached).
func (e *Engine) classify(ctx context.Context, events []outbox.Event, results []error) outcome {
	o := outcome{delivered: make([]uuid.UUID, 0, len(events))}
	for i, err := range results {
		ev := &events[i]
		switch {
		case err == nil:
			o.delivered = append(o.delivered, ev.ID)
		case errors.Is(err, errKeyBlocked):
			o.released = append(o.released, ev.ID)
		case publisher.IsUnavailable(err) || ctx.Err() != nil:
			// The broker could not take it, or the shutdown stopped it: the
			// event did nothing wrong and keeps its attempts.
			o.released = append(o.released, ev.ID)
			o.unavailable = o.unavailable || publisher.IsUnavailable(err)
			if o.brokerErr == nil {
				o.brokerErr = err
			}
		default:
			attempts := ev.Attempts + 1
			f := storage.Failure{ID: ev.ID, Error: err.Error()}
			if publisher.IsPermanent(err) || attempts >= e.cfg.Retry.MaxAttempts {
				f.Dead = true
				o.dead++
				e.log.Warn("event is DEAD", "event_id", ev.ID, "event_type", publisher.Clip(ev.Type),
					"attempts", attempts, "permanent", publisher.IsPermanent(err), "error", err)
			} else {
				f.Delay = e.cfg.Retry.Delay(attempts, rand.Float64())
				// The broker's Retry-After may lengthen the wait, never
				// past RETRY_MAX_DELAY.
				if d, ok := publisher.RetryDelay(err); ok {
					f.Delay = max(f.Delay, min(d, e.cfg.Retry.MaxDelay))
				}
			}
			o.failed = append(o.failed, f)
			if o.firstErr == nil {
				o.firstErr = err
			}
		}
	}
	return o
}

// keep renews the batch's lease while it is at the broker (keepLease).
func (c *claimed) keep() (stop func()) { return c.e.keepLease(c) }

// waitsOutOutages is false: a claimed batch's events go back to the table
// when the broker is out, and the engine pauses its claims.
func (c *claimed) waitsOutOutages() bool { return false }

// settle records the batch's outcome and reports it.
func (c *claimed) settle(o outcome) {
	c.settleRows(o)
	e := c.e
	e.finished(c.ctx, o.summary(), o.firstErr)
	if e.cfg.Ordering == storage.OrderingPartition || c.batch.Full {
		// Settling frees keys that the last claim had to pass over, and
		// ends the transaction of a held claim cut by its byte limit,
		// which held the rows past that limit locked until now.
		e.Wake()
	}
	if e.due != nil && len(o.failed) > o.dead {
		// A retry comes due after its back-off, which the engine, idle
		// since, would otherwise wait a poll for: the claim it wakes finds
		// nothing due and asks the storage when the retry is (idle).
		e.Wake()
	}
}

// settleRows writes the outcome in one settle call, retried until it lands
// (settleUntil): the engine knows the outcome, so it must not leave rows
// DELIVERING for the reaper to find minutes later.
func (c *claimed) settleRows(o outcome) {
	e := c.e
	so := storage.Outcome{Delivered: o.delivered, Delete: e.cfg.DeleteDelivered, Failed: o.failed, Released: o.released}
	if c.tx != nil {
		c.settleHeld(so)
		return
	}
	if so.Len() == 0 {
		return
	}
	c.settleUntil(leasedOps.of(so), so.Len(), func(ctx context.Context) (storage.Settled, error) {
		return e.store.Settle(ctx, c.batch.Lease, so)
	})
}

// settleHeld records a held batch's outcome and commits its transaction.
// When that fails, the transaction has ended without it and the rows are
// PENDING as they were: the outcome is recorded anew, on the rows no claim
// took meanwhile, so that delivered events are not delivered again.
func (c *claimed) settleHeld(so storage.Outcome) {
	e := c.e
	op := leasedOps.of(so)
	ctx, cancel := detach(c.ctx, c.settleBy)
	defer cancel()
	sctx, end := e.obs.StartSettle(ctx, op, so.Len())
	err := c.tx.Settle(sctx, so)
	end(err)
	if err == nil {
		return
	}
	if c.settleBy.Err() != nil {
		e.log.Warn("shutdown: giving up settling; the batch's events are PENDING again and will be published again",
			"events", so.Len(), "error", err)
		return
	}
	e.log.Warn("settling a held batch in its transaction failed; recording its outcome anew",
		"events", so.Len(), "error", err)
	c.settleUntil(op, so.Len(), func(ctx context.Context) (storage.Settled, error) {
		return e.held.SettleHeld(ctx, c.batch.Lease, so)
	})
}

// settleOps names the ops of one source's statements, one per kind of
// outcome.
type settleOps struct{ delivered, deleted, failed, released string }

// The ops of a leased or held batch, and of events read from the log.
var (
	leasedOps = settleOps{OpMarkDelivered, OpDeleteDelivered, OpMarkFailed, OpRelease}
	logOps    = settleOps{OpRecordDelivered, OpRecordDeleted, OpRecordFailed, OpDefer}
)

// of is the op a settle call of o is reported as: the first kind of
// statement it runs, so that dashboards of the settle ops (Open Outbox's
// mark_delivered above all) go on showing what they showed when each kind
// was a call of its own.
func (ops settleOps) of(o storage.Outcome) string {
	switch {
	case len(o.Delivered) > 0 && o.Delete:
		return ops.deleted
	case len(o.Delivered) > 0:
		return ops.delivered
	case len(o.Failed) > 0:
		return ops.failed
	}
	return ops.released
}

// settleGrace is the least time a settle gets, even when the lease has run
// out: the reaper may not have taken the rows back yet, and the lease guard
// makes a late settle safe.
const settleGrace = 5 * time.Second

// settleUntil runs one settle call until it succeeds, the lease runs out
// (the reaper then takes the rows back) or the shutdown budget is spent.
// Its context is not the batch's: a shutdown must not stop a settle that
// can still land in time. The rows settled are counted over the tries: a
// try that failed part-way reports what it did settle, which the next
// try, under the lease guard, does not settle again.
func (c *claimed) settleUntil(op string, n int, fn func(context.Context) (storage.Settled, error)) {
	e := c.e
	ctx, cancel := detach(c.ctx, c.settleBy)
	defer cancel()
	deadline := later(c.at.Add(e.cfg.LeaseTimeout), time.Now().Add(settleGrace))
	ctx, cancelDeadline := context.WithDeadline(ctx, deadline)
	defer cancelDeadline()
	ctx, end := e.obs.StartSettle(ctx, op, n)
	wait := storageBackoffMin
	var settled storage.Settled
	for {
		got, err := fn(ctx)
		settled = settled.Add(got)
		if err == nil {
			e.health.setSettleErr(nil)
			end(nil)
			if settled.Len() < n {
				e.log.Warn("some rows had changed hands before they were settled; their lease expired and another claim owns them",
					"op", op, "events", n, "settled", settled.Len(),
					"delivered", settled.Delivered, "failed", settled.Failed, "released", settled.Released)
			}
			return
		}
		if ctx.Err() != nil {
			if c.settleBy.Err() != nil {
				// The shutdown's budget ran out, not the database: a
				// statement cut off by it is expected, not the relay's
				// error.
				e.log.Warn("shutdown: giving up settling; the reaper will take the rows back when their lease expires",
					"op", op, "events", n, "error", err)
			} else {
				e.log.Error("giving up settling; the reaper will take the rows back when their lease expires",
					"op", op, "error", err)
			}
			end(err)
			return
		}
		e.health.setSettleErr(fmt.Errorf("settle (%s): %w", op, err))
		e.log.Warn("settle failed; retrying", "op", op, "error", err, "retry_in", wait)
		sleep(ctx, wait)
		wait = min(wait*2, storageBackoffMax)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
