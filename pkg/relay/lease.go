package relay

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/storage"
)

// keepLease renews c's lease (or keeps its held transaction open) every
// third of LeaseTimeout until the returned function is called, so a broker
// that is slow to acknowledge does not let the reaper (or the database's
// idle timeout) hand the batch to another relay, which would publish it
// again while this one still waits. The function waits for the last renewal, so
// c's lease can be read safely after it returns.
func (e *Engine) keepLease(c *claimed) (stop func()) {
	ids := make([]uuid.UUID, len(c.batch.Events))
	for i, ev := range c.batch.Events {
		ids[i] = ev.ID
	}
	// New stamps continue the database's clock from the claim by this
	// process's monotonic clock, so the reaper's now() - locked_at stays
	// meaningful whatever the two wall clocks say.
	claimStamp, claimedAt := c.batch.Lease.LockedAt, c.at
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(e.cfg.LeaseTimeout / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if c.tx != nil {
				if !e.keepHeld(c) {
					return
				}
				continue
			}
			renewedAt := time.Now()
			to := claimStamp.Add(renewedAt.Sub(claimedAt)).Truncate(time.Microsecond)
			ctx, cancel := detach(c.ctx, c.settleBy)
			ctx, cancelRenew := context.WithTimeout(ctx, e.cfg.LeaseTimeout/3)
			ctx, end := e.obs.StartSettle(ctx, OpRenew, len(ids))
			n, err := e.store.Renew(ctx, storage.RenewParams{Lease: c.batch.Lease, IDs: ids, To: to})
			end(err)
			cancelRenew()
			cancel()
			switch {
			case err != nil:
				// It may have landed all the same: the rows hold the old
				// stamp or this one, and settles accept either.
				c.batch.Lease.Unconfirmed = append(c.batch.Lease.Unconfirmed, to)
				e.log.Warn("renewing a lease failed; will retry", "error", err)
			case n == 0:
				e.log.Warn("lost the lease on a batch still being published; the reaper took it back",
					"events", len(ids))
				return
			default:
				c.batch.Lease = storage.Lease{RelayID: c.batch.Lease.RelayID, LockedAt: to}
				c.at = renewedAt
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// keepHeld keeps a held claim's transaction from being ended as idle while
// its batch is at the broker, and reports whether it is still open.
func (e *Engine) keepHeld(c *claimed) bool {
	ctx, cancel := detach(c.ctx, c.settleBy)
	defer cancel()
	ctx, cancelKeep := context.WithTimeout(ctx, e.cfg.LeaseTimeout/3)
	defer cancelKeep()
	ctx, end := e.obs.StartSettle(ctx, OpRenew, len(c.batch.Events))
	err := c.tx.Keep(ctx)
	end(err)
	if err != nil {
		e.log.Warn("lost the transaction holding a batch still being published; its events are PENDING again",
			"events", len(c.batch.Events), "error", err)
		return false
	}
	return true
}

// detach returns a context with ctx's values (the batch's span, say) that
// ends when until ends rather than when ctx does.
func detach(ctx, until context.Context) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(until, cancel)
	return out, func() {
		stop()
		cancel()
	}
}
