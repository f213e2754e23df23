// Package relay is the engine that moves events from the outbox table to a
// broker: it claims a batch, publishes it, and settles each event's outcome,
// with up to MaxInFlightBatches batches between claim and settle at once so
// the database and the broker work in parallel.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Store is the part of the outbox table the engine uses.
type Store interface {
	Claim(ctx context.Context, p storage.ClaimParams) (storage.Batch, error)
	MarkDelivered(ctx context.Context, p storage.SettleParams) (int, error)
	MarkFailed(ctx context.Context, p storage.FailParams) (int, error)
	Release(ctx context.Context, p storage.SettleParams) (int, error)
	Renew(ctx context.Context, p storage.RenewParams) (int, error)
}

// Broker backoff: how long claiming pauses after the broker was unavailable.
const (
	brokerBackoffMin = time.Second
	brokerBackoffMax = 30 * time.Second
	// Database backoff: how long claiming waits after a failed claim.
	storageBackoffMin = 250 * time.Millisecond
	storageBackoffMax = 10 * time.Second
)

// State is what the engine is doing, as exported by the relay.state metric.
type State int

// Engine states. The values are Open Outbox's relay.state gauge values.
const (
	StateActive State = 1 // claiming and publishing
	StatePaused State = 2 // the broker is unavailable; waiting for it
	StateError  State = 3 // the database is failing
)

func (s State) String() string {
	switch s {
	case StateActive:
		return "active"
	case StatePaused:
		return "paused"
	case StateError:
		return "error"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Engine relays events from a Store to a Publisher.
type Engine struct {
	cfg   Config
	store Store
	pub   publisher.Publisher
	log   *slog.Logger
	obs   Observer

	wake  chan struct{}
	state atomic.Int32

	// cursor is the last key an ordered claim took; only the claim loop
	// touches it.
	cursor string

	notifyMu      sync.Mutex
	notifyTimer   *time.Timer
	notifyPending bool

	brokerMu      sync.Mutex
	brokerDown    bool
	brokerBackoff time.Duration
}

// New returns an engine; zero fields of cfg take their defaults.
func New(cfg Config, store Store, pub publisher.Publisher) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:           cfg,
		store:         store,
		pub:           pub,
		log:           cfg.Logger.With("relay_id", cfg.RelayID),
		obs:           cfg.Observer,
		wake:          make(chan struct{}, 1),
		brokerBackoff: brokerBackoffMin,
	}
	e.state.Store(int32(StateActive))
	return e, nil
}

// State reports what the engine is doing now.
func (e *Engine) State() State { return State(e.state.Load()) }

func (e *Engine) setState(s State) {
	if State(e.state.Swap(int32(s))) != s {
		e.obs.StateChanged(s)
	}
}

// Wake makes an idle engine claim at once instead of waiting out
// PollInterval.
func (e *Engine) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Notify is called for every notification that events were inserted. The
// first one after a quiet spell wakes the engine at once; the ones that
// follow within NotifyDebounce wake it once more when that time is up.
func (e *Engine) Notify() {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	if e.notifyTimer != nil {
		e.notifyPending = true
		return
	}
	e.Wake()
	if e.cfg.NotifyDebounce > 0 {
		e.notifyTimer = time.AfterFunc(e.cfg.NotifyDebounce, e.endDebounce)
	}
}

func (e *Engine) endDebounce() {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	if !e.notifyPending {
		e.notifyTimer = nil
		return
	}
	e.notifyPending = false
	e.Wake()
	e.notifyTimer.Reset(e.cfg.NotifyDebounce)
}

// Listener delivers insert notifications: Listen calls onNotify for each
// until ctx ends (returning nil) or its connection fails.
type Listener interface {
	Listen(ctx context.Context, onNotify func()) error
}

// Listen feeds l's notifications to Notify until ctx ends, reconnecting with
// backoff when the connection drops. Meanwhile the engine still polls every
// PollInterval, so a lost listener delays events but loses none.
func (e *Engine) Listen(ctx context.Context, l Listener) {
	wait := storageBackoffMin
	for ctx.Err() == nil {
		began := time.Now()
		err := l.Listen(ctx, e.Notify)
		if err == nil || ctx.Err() != nil {
			return
		}
		if time.Since(began) > storageBackoffMax {
			wait = storageBackoffMin // it had been working
		}
		e.log.Warn("listening for inserts failed; polling meanwhile", "error", err, "retry_in", wait)
		sleep(ctx, wait)
		wait = min(wait*2, storageBackoffMax)
	}
}

// Run relays until ctx ends, then stops claiming, gives in-flight batches
// ShutdownTimeout to finish, releases what was not published, and returns.
// Failures of the database or the broker never end it: it backs off and
// tries again.
func (e *Engine) Run(ctx context.Context) {
	// Batches in flight outlive ctx so that a shutdown lets them finish;
	// stopInFlight ends them when ShutdownTimeout runs out.
	inFlightCtx, stopInFlight := context.WithCancel(context.WithoutCancel(ctx))
	defer stopInFlight()

	var wg sync.WaitGroup
	slots := make(chan struct{}, e.cfg.MaxInFlightBatches)
	storageBackoff := storageBackoffMin

	for ctx.Err() == nil {
		if e.isBrokerDown() {
			e.waitForBroker(ctx)
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		c, err := e.claim(inFlightCtx)
		if err != nil {
			<-slots
			e.setState(StateError)
			e.log.Warn("claim failed; retrying", "error", err, "retry_in", storageBackoff)
			sleep(ctx, storageBackoff)
			storageBackoff = min(storageBackoff*2, storageBackoffMax)
			continue
		}
		storageBackoff = storageBackoffMin
		if e.State() == StateError {
			e.setState(StateActive)
		}
		if len(c.batch.Events) == 0 {
			<-slots
			e.idle(ctx)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			e.process(c)
		}()
		if len(c.batch.Events) < e.cfg.BatchSize {
			e.idle(ctx)
		}
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(e.cfg.ShutdownTimeout):
		e.log.Warn("shutdown timeout reached; releasing unpublished events", "timeout", e.cfg.ShutdownTimeout)
		stopInFlight()
		<-done
	}
}

// claimed is a batch on its way from claim to settle.
type claimed struct {
	batch storage.Batch
	// at is when the lease was stamped (claimed or last renewed), by this
	// process's clock: settling gives up LeaseTimeout after it.
	at time.Time
	// ctx is the batch's context: not cancelled by a shutdown until
	// ShutdownTimeout runs out, and carrying what the Observer put in it.
	ctx context.Context
}

// claim takes the next batch. ctx is the in-flight context, which a shutdown
// does not cancel: a claim cancelled after PostgreSQL committed it would
// leave rows DELIVERING until the reaper finds them.
func (e *Engine) claim(ctx context.Context) (claimed, error) {
	c := claimed{at: time.Now()}
	var end func(int, error)
	c.ctx, end = e.obs.StartClaim(ctx)
	claimCtx, cancel := context.WithTimeout(c.ctx, e.cfg.LeaseTimeout/2)
	defer cancel()
	var err error
	c.batch, err = e.store.Claim(claimCtx, storage.ClaimParams{
		RelayID:  e.cfg.RelayID,
		Limit:    e.cfg.BatchSize,
		Ordering: e.cfg.Ordering,
		OnDead:   e.cfg.OnDead,
		After:    e.cursor,
	})
	end(len(c.batch.Events), err)
	if err == nil && e.cfg.Ordering == storage.OrderingPartition {
		e.cursor = nextCursor(e.cursor, c.batch.Events)
	}
	return c, err
}

// nextCursor is where the next ordered claim starts its walk over keys: past
// the last key this claim took. The walk went through the keys after the
// old cursor in order, then wrapped around to the start.
func nextCursor(old string, events []outbox.Event) string {
	var afterOld, wrapped string
	for _, ev := range events {
		k := ev.PartitionKey
		switch {
		case k == "":
		case k > old:
			afterOld = max(afterOld, k)
		default:
			wrapped = max(wrapped, k)
		}
	}
	switch {
	case wrapped != "":
		return wrapped
	case afterOld != "":
		return afterOld
	}
	return old
}

// idle waits for a wakeup, the poll interval, or the end of ctx.
func (e *Engine) idle(ctx context.Context) {
	t := time.NewTimer(e.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-e.wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

// outcome sorts a batch's publish results by what happens to each event.
type outcome struct {
	delivered []uuid.UUID
	failed    []storage.Failure
	released  []uuid.UUID
	dead      int
	firstErr  error // first retryable or permanent error, for the log
	// brokerErr is set when the broker, not the events, failed.
	brokerErr error
}

// process publishes one claimed batch and settles every event in it.
func (e *Engine) process(c claimed) {
	ctx, events := c.ctx, c.batch.Events
	pubCtx, endPublish := e.obs.StartPublish(ctx, events)
	stopRenewing := e.keepLease(&c)
	var results []error
	if e.cfg.Ordering == storage.OrderingPartition {
		results = e.publishInKeyOrder(pubCtx, events)
	} else {
		results = e.publish(pubCtx, events)
	}
	stopRenewing()
	endPublish(results)
	o := e.sort(ctx, events, results)
	e.settle(ctx, c.batch.Lease, c.at, o)
	e.obs.Finished(ctx, o.summary())
	if e.cfg.Ordering == storage.OrderingPartition {
		// Settling frees keys that the last claim had to pass over.
		e.Wake()
	}

	switch {
	case o.brokerErr != nil && ctx.Err() == nil:
		e.brokerFailed(o.brokerErr)
	case len(o.delivered) > 0:
		e.brokerWorked()
	}
	if len(o.failed) > 0 {
		e.log.Warn("events failed", "failed", len(o.failed), "dead", o.dead, "first_error", o.firstErr)
	}
}

// keepLease renews c's lease every third of LeaseTimeout until the returned
// function is called, so a broker that is slow to acknowledge does not let
// the reaper hand the batch to another relay, which would publish it again
// while this one still waits. The function waits for the last renewal, so
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
			renewedAt := time.Now()
			to := claimStamp.Add(renewedAt.Sub(claimedAt)).Truncate(time.Microsecond)
			ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), e.cfg.LeaseTimeout/3)
			ctx, end := e.obs.StartSettle(ctx, OpRenew, len(ids))
			n, err := e.store.Renew(ctx, storage.RenewParams{Lease: c.batch.Lease, IDs: ids, To: to})
			end(err)
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

// errNoType is the fate of an event without an event_type: every broker
// routes by it, and some would take an empty one silently (a Kafka topic
// prefix alone, RabbitMQ's empty routing key).
var errNoType = publisher.Permanent(errors.New("event_type is empty: nothing to route the event by"))

// publish sends events in one call and checks the driver kept its contract.
// Events without a type never reach the driver.
func (e *Engine) publish(ctx context.Context, events []outbox.Event) []error {
	send, idx := events, []int(nil)
	for i := range events {
		if events[i].Type == "" {
			send, idx = routable(events)
			break
		}
	}
	sent := e.pub.Publish(ctx, send)
	if len(sent) != len(send) {
		// A driver bug must not lose events: release the lot.
		err := fmt.Errorf("publisher returned %d results for %d events", len(sent), len(send))
		e.log.Error("publisher broke its contract; releasing batch", "error", err)
		sent = publisher.Fill(len(send), publisher.Unavailable(err))
	}
	if idx == nil {
		return sent
	}
	results := publisher.Fill(len(events), errNoType)
	for j, i := range idx {
		results[i] = sent[j]
	}
	return results
}

// routable returns the events that have a type and their positions.
func routable(events []outbox.Event) ([]outbox.Event, []int) {
	var send []outbox.Event
	idx := []int{}
	for i := range events {
		if events[i].Type != "" {
			send = append(send, events[i])
			idx = append(idx, i)
		}
	}
	return send, idx
}

// errHeldBack marks an event that was not sent because an earlier event
// with its key was not delivered; it is released untouched.
var errHeldBack = errors.New("held back behind an undelivered event with the same partition key")

// publishInKeyOrder sends a batch so that no event leaves before the
// earlier events of its key are acknowledged: round r sends the r-th event
// of every key (and, in the first round, every event without a key), all
// pipelined in one call. A key whose event fails sends nothing more; the
// rest of its run is held back for a later claim.
func (e *Engine) publishInKeyOrder(ctx context.Context, events []outbox.Event) []error {
	results := make([]error, len(events))
	var unkeyed []int
	runs := map[string][]int{}
	var keys []string
	for i, ev := range events {
		if ev.PartitionKey == "" {
			unkeyed = append(unkeyed, i)
			continue
		}
		if _, seen := runs[ev.PartitionKey]; !seen {
			keys = append(keys, ev.PartitionKey)
		}
		runs[ev.PartitionKey] = append(runs[ev.PartitionKey], i)
		results[i] = errHeldBack
	}
	stopped := map[string]bool{}
	for round := 0; ; round++ {
		var idx []int
		if round == 0 {
			idx = append(idx, unkeyed...)
		}
		for _, k := range keys {
			if run := runs[k]; round < len(run) && !stopped[k] {
				idx = append(idx, run[round])
			}
		}
		if len(idx) == 0 {
			return results
		}
		sub := make([]outbox.Event, len(idx))
		for j, i := range idx {
			sub[j] = events[i]
		}
		for j, err := range e.publish(ctx, sub) {
			i := idx[j]
			results[i] = err
			if err != nil && events[i].PartitionKey != "" {
				stopped[events[i].PartitionKey] = true
			}
		}
	}
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

func (e *Engine) sort(ctx context.Context, events []outbox.Event, results []error) outcome {
	o := outcome{delivered: make([]uuid.UUID, 0, len(events))}
	for i, err := range results {
		ev := &events[i]
		switch {
		case err == nil:
			o.delivered = append(o.delivered, ev.ID)
		case errors.Is(err, errHeldBack):
			o.released = append(o.released, ev.ID)
		case publisher.IsUnavailable(err) || ctx.Err() != nil:
			// The broker could not take it, or shutdown cut it off: the
			// event did nothing wrong and keeps its attempts.
			o.released = append(o.released, ev.ID)
			if o.brokerErr == nil {
				o.brokerErr = err
			}
		default:
			attempts := ev.Attempts + 1
			f := storage.Failure{ID: ev.ID, Error: err.Error()}
			if publisher.IsPermanent(err) || attempts >= e.cfg.Retry.MaxAttempts {
				f.Dead = true
				o.dead++
				e.log.Warn("event is DEAD", "event_id", ev.ID, "event_type", ev.Type,
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

// settle records a batch's outcome, one statement per kind. Each statement
// is retried until it succeeds or the lease runs out: the engine knows the
// outcome, so it must not leave rows DELIVERING for the reaper to find
// minutes later.
func (e *Engine) settle(ctx context.Context, lease storage.Lease, claimedAt time.Time, o outcome) {
	deadline := claimedAt.Add(e.cfg.LeaseTimeout)
	if len(o.delivered) > 0 {
		e.retry(ctx, deadline, OpMarkDelivered, len(o.delivered), func(ctx context.Context) (int, error) {
			return e.store.MarkDelivered(ctx, storage.SettleParams{Lease: lease, IDs: o.delivered})
		})
	}
	if len(o.failed) > 0 {
		e.retry(ctx, deadline, OpMarkFailed, len(o.failed), func(ctx context.Context) (int, error) {
			return e.store.MarkFailed(ctx, storage.FailParams{Lease: lease, Failures: o.failed})
		})
	}
	if len(o.released) > 0 {
		e.retry(ctx, deadline, OpRelease, len(o.released), func(ctx context.Context) (int, error) {
			return e.store.Release(ctx, storage.SettleParams{Lease: lease, IDs: o.released})
		})
	}
}

// settleGrace is the least time a settle gets, even when the lease has run
// out: the reaper may not have taken the rows back yet, and the lease guard
// makes a late settle safe.
const settleGrace = 5 * time.Second

// retry runs one settle statement until it succeeds or the lease deadline
// passes. Its context is not the batch's: a shutdown must not stop a settle.
func (e *Engine) retry(parent context.Context, deadline time.Time, what string, n int, fn func(context.Context) (int, error)) {
	deadline = later(deadline, time.Now().Add(settleGrace))
	ctx, cancel := context.WithDeadline(context.WithoutCancel(parent), deadline)
	defer cancel()
	ctx, end := e.obs.StartSettle(ctx, what, n)
	wait := storageBackoffMin
	for {
		settled, err := fn(ctx)
		if err == nil {
			end(nil)
			if settled < n {
				e.log.Warn("some rows had changed hands before they were settled; their lease expired and another claim owns them",
					"op", what, "events", n, "settled", settled)
			}
			return
		}
		if ctx.Err() != nil {
			e.log.Error("giving up settling; the reaper will take the rows back when their lease expires",
				"op", what, "error", err)
			end(err)
			return
		}
		e.log.Warn("settle failed; retrying", "op", what, "error", err, "retry_in", wait)
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

func (e *Engine) isBrokerDown() bool {
	e.brokerMu.Lock()
	defer e.brokerMu.Unlock()
	return e.brokerDown
}

// brokerFailed pauses claiming until waitForBroker sees the broker answer
// again. The pause between checks doubles with each failed check, from 1 s
// up to 30 s, and starts over after a batch is delivered.
func (e *Engine) brokerFailed(err error) {
	e.brokerMu.Lock()
	defer e.brokerMu.Unlock()
	if !e.brokerDown {
		e.log.Warn("broker unavailable; pausing claims and releasing events", "error", err)
	}
	e.brokerDown = true
	e.setState(StatePaused)
}

func (e *Engine) brokerWorked() {
	e.brokerMu.Lock()
	defer e.brokerMu.Unlock()
	e.brokerBackoff = brokerBackoffMin
}

// waitForBroker sleeps out the current backoff, then asks the broker whether
// it is back; claiming resumes only when it answers.
func (e *Engine) waitForBroker(ctx context.Context) {
	e.brokerMu.Lock()
	wait := e.brokerBackoff
	e.brokerBackoff = min(e.brokerBackoff*2, brokerBackoffMax)
	e.brokerMu.Unlock()

	sleep(ctx, wait)
	if ctx.Err() != nil {
		return
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := e.pub.Ping(pingCtx)
	cancel()
	if err != nil {
		e.log.Warn("broker still unavailable", "error", err, "next_check_in", min(wait*2, brokerBackoffMax))
		return
	}
	e.brokerMu.Lock()
	e.brokerDown = false
	// Under the lock, so that a batch failing at this moment cannot have
	// its "paused" overwritten.
	e.setState(StateActive)
	e.brokerMu.Unlock()
	e.log.Info("broker available again; resuming")
}

// sleep waits for d or the end of ctx.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
