package relay

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/storage"
)

// keepLease renews c's lease every third of LeaseTimeout until the returned
// function is called, so a broker that is slow to acknowledge does not let
// the reaper hand the batch to another relay, which would publish it again
// while this one still waits. A held batch still at the broker after
// HeldMax (or a third of LeaseTimeout, if shorter) becomes a lease first.
// The function waits for the last renewal, so c's lease (and c.tx) can be
// read safely after it returns.
func (e *Engine) keepLease(c *claimed) (stop func()) {
	ids := make([]uuid.UUID, len(c.batch.Events))
	for i, ev := range c.batch.Events {
		ids[i] = ev.ID
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if c.tx != nil && !e.leaseHeld(c, done) {
			return
		}
		// New stamps continue the database's clock from the claim by this
		// process's monotonic clock, so the reaper's now() - locked_at
		// stays meaningful whatever the two wall clocks say.
		claimStamp, claimedAt := c.batch.Lease.LockedAt, c.at
		t := time.NewTicker(e.cfg.LeaseTimeout / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
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
				// The created_at bounds stay: settles on a partitioned
				// table look in those partitions only.
				c.batch.Lease = storage.Lease{RelayID: c.batch.Lease.RelayID, LockedAt: to,
					CreatedFrom: c.batch.Lease.CreatedFrom, CreatedTo: c.batch.Lease.CreatedTo}
				c.at = renewedAt
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// leaseHeld waits until c's held batch has been at the broker for HeldMax
// (or a third of LeaseTimeout, if shorter), then makes it a lease. It
// reports whether c now has a lease to renew: false when done closed first
// (c stays held) or the transaction ended without the lease (the settle
// then records the outcome anew).
func (e *Engine) leaseHeld(c *claimed, done <-chan struct{}) bool {
	wait := time.NewTimer(min(e.cfg.HeldMax, e.cfg.LeaseTimeout/3))
	defer wait.Stop()
	select {
	case <-done:
		return false
	case <-wait.C:
	}
	ctx, cancel := detach(c.ctx, c.settleBy)
	defer cancel()
	ctx, cancelLease := context.WithTimeout(ctx, e.cfg.LeaseTimeout/3)
	defer cancelLease()
	ctx, end := e.obs.StartSettle(ctx, OpRenew, len(c.batch.Events))
	at := time.Now()
	lease, err := c.tx.Lease(ctx, e.cfg.RelayID)
	end(err)
	if err != nil {
		e.log.Warn("turning a held batch still at the broker into a lease failed; its events are PENDING again",
			"events", len(c.batch.Events), "error", err)
		return false
	}
	c.batch.Lease, c.tx, c.at = lease, nil, at
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
