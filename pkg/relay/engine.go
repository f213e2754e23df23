// Package relay is the engine that moves events from the outbox table to a
// broker: it claims a batch, publishes it, and settles each event's outcome,
// with up to MaxInFlightBatches batches between claim and settle at once so
// the database and the broker work in parallel.
package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Database backoff: how long claiming waits after a failed claim.
const (
	storageBackoffMin = 250 * time.Millisecond
	storageBackoffMax = 10 * time.Second
)

// shutdownSettleMax caps the end of ShutdownTimeout kept for settles after
// the publishes are stopped: handing back what was not sent is one
// statement per batch, which a database that answers does in milliseconds;
// one that does not answer would hold it whatever the share.
const shutdownSettleMax = 3 * time.Second

// settleReserve is the end of timeout kept for settling what the publishes
// stopped left: a quarter, so that a short timeout still leaves the
// publishes most of it, and at most shutdownSettleMax.
func settleReserve(timeout time.Duration) time.Duration {
	return min(timeout/4, shutdownSettleMax)
}

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

// Engine relays events from a storage.Queue to a Publisher.
type Engine struct {
	cfg   Config
	store storage.Queue
	// held claims batches (LeaseMode); nil when they are leased by
	// status.
	held storage.HeldQueue
	pub  publisher.Publisher
	log  *slog.Logger
	obs  Observer

	wake chan struct{}
	// due tells when the next scheduled or backed-off row comes due; nil
	// when the storage cannot, and the poll finds such rows.
	due    storage.DueWatcher
	health *health
	notify debouncer
	broker *brokerGate
	// isolation is held by a batch looking for the event that makes the
	// broker drop its connection; claims wait meanwhile.
	isolation sync.RWMutex

	// claimedAt is the database's time (now()) of the last claim: the rows
	// due by then were its to find, and those due since are the idle
	// engine's to wake for (untilDue). Only the claim loop touches it.
	claimedAt time.Time
	// cursor is where the next ordered claim's walk starts, as the last
	// one returned it (Batch.After); only the claim loop touches it.
	cursor string
	// fresh is which fresh events the claims take (ClaimParams.Fresh):
	// all while the engine polls for everything; a Capture that reads the
	// database's log leaves them to it.
	fresh freshScope
}

// New returns an engine; zero fields of cfg take their defaults.
func New(cfg Config, store storage.Queue, pub publisher.Publisher) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg:   cfg,
		store: store,
		pub:   pub,
		log:   cfg.Logger.With("relay_id", cfg.RelayID),
		obs:   cfg.Observer,
		wake:  make(chan struct{}, 1),
	}
	if h, ok := store.(storage.HeldQueue); ok && cfg.LeaseMode != LeaseStatus && cfg.Ordering == storage.OrderingNone {
		e.held = h
	} else if cfg.LeaseMode == LeaseLock {
		v := fieldcheck.Check("relay")
		v.Expect("LeaseMode", false, "lock: this storage cannot hold claims (PostgreSQL can); use auto or status")
		return nil, v.Err()
	}
	e.due, _ = store.(storage.DueWatcher)
	e.notify = debouncer{wait: cfg.NotifyDebounce, wake: e.Wake}
	brokerLog := e.log
	if cfg.Broker != "" {
		brokerLog = e.log.With("broker", cfg.Broker)
	}
	e.health = newHealth(e.obs.StateChanged)
	e.broker = newBrokerGate(pub, brokerLog, e.health.setBrokerDown)
	return e, nil
}

// State reports what the engine is doing now.
func (e *Engine) State() State {
	s, _ := e.health.get()
	return s
}

// Health reports what the engine is doing now and, in StateError, why: the
// error of the claim that failed last, or else of the settle that failed
// last (each cleared when the next one succeeds). It may hold what the
// database said, and a storage URL in it is not masked; redact it before
// showing it.
func (e *Engine) Health() (State, error) { return e.health.get() }

// Wake makes an idle engine claim at once instead of waiting out
// PollInterval.
func (e *Engine) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx ends, then stops claiming and returns within
// ShutdownTimeout, provided the storage returns when its context ends. The
// batches in flight may publish until a quarter of ShutdownTimeout (at most
// 3 s) is left; publishes still waiting then are stopped and their events
// handed back in what is left. Whatever cannot be settled by the end (a
// hung database) stays DELIVERING for the reaper, or, held, PENDING as it
// was when its transaction ends. Failures of the database
// or the broker never end Run: it backs off and tries again. A broker that
// does not answer at start pauses claiming until it does.
func (e *Engine) Run(ctx context.Context) {
	publishing, settling, finished := e.shutdownContexts(ctx)
	defer finished()

	if err := e.broker.check(ctx); err != nil && ctx.Err() == nil {
		e.broker.close(err)
	}

	var wg sync.WaitGroup
	slots := make(chan struct{}, e.cfg.MaxInFlightBatches)
	storageBackoff := storageBackoffMin
	for ctx.Err() == nil {
		if e.broker.isDown() {
			e.broker.wait(ctx)
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		e.isolation.RLock()
		c, err := e.claim(publishing, settling)
		e.isolation.RUnlock()
		if err != nil {
			<-slots
			e.health.setClaimErr(err)
			if ctx.Err() == nil {
				e.log.Warn("claim failed; retrying", "error", err, "retry_in", storageBackoff)
			}
			sleep(ctx, storageBackoff)
			storageBackoff = min(storageBackoff*2, storageBackoffMax)
			continue
		}
		storageBackoff = storageBackoffMin
		e.health.setClaimErr(nil)
		if len(c.batch.Events) == 0 {
			<-slots
			e.idle(ctx)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			e.process(&batch{events: c.batch.Events, ctx: c.ctx, settleBy: c.settleBy, source: c})
		}()
		// A batch cut short by its byte limit leaves events waiting too;
		// the database measures headers a little differently, hence half,
		// where the driver does not say (Batch.Full).
		if !c.batch.Full && len(c.batch.Events) < e.cfg.BatchSize && c.batch.Bytes() < e.cfg.MaxBatchBytes/2 {
			e.idle(ctx)
		}
	}
	wg.Wait()
}

// shutdownContexts returns the contexts batches in flight publish and
// settle in. They outlive ctx so that a shutdown lets the batches finish:
// publishing ends ShutdownTimeout minus the settle reserve after ctx does,
// settling at the end of ShutdownTimeout. Call finished when every batch
// is done.
func (e *Engine) shutdownContexts(ctx context.Context) (publishing, settling context.Context, finished func()) {
	publishing, stopPublishing := context.WithCancel(context.WithoutCancel(ctx))
	settling, stopSettling := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		reserve := settleReserve(e.cfg.ShutdownTimeout)
		budget := time.NewTimer(e.cfg.ShutdownTimeout - reserve)
		defer budget.Stop()
		select {
		case <-budget.C:
			e.log.Warn("shutdown: time for publishing spent; releasing unpublished events",
				"published_for", e.cfg.ShutdownTimeout-reserve, "left_for_release", reserve)
			stopPublishing()
		case <-done:
			return
		}
		grace := time.NewTimer(reserve)
		defer grace.Stop()
		select {
		case <-grace.C:
			stopSettling()
		case <-done:
		}
	}()
	return publishing, settling, func() {
		close(done)
		stopPublishing()
		stopSettling()
	}
}

// claimed is a batch the engine claimed, as a source of the pipeline: its
// lease or held transaction, kept while it is at the broker and settled
// by the engine's statements.
type claimed struct {
	e     *Engine
	batch storage.Batch
	// at is when the lease was stamped (claimed or last renewed), by this
	// process's clock: settling gives up LeaseTimeout after it.
	at time.Time
	// ctx is the batch's context, for claiming and publishing: not
	// cancelled by a shutdown until its publishing time runs out, and
	// carrying what the Observer put in it.
	ctx context.Context
	// settleBy ends when settling must stop, a little after ctx.
	settleBy context.Context
	// tx holds the batch's rows when the claim was held; nil for a lease.
	tx storage.HeldTx
}

// claim takes the next batch. Its context is not cancelled by a shutdown
// until the publishing time runs out: a claim stopped after the database
// committed it would have to hand its rows back.
func (e *Engine) claim(publishing, settling context.Context) (*claimed, error) {
	c := &claimed{e: e, at: time.Now(), settleBy: settling}
	var end func(int, error)
	c.ctx, end = e.obs.StartClaim(publishing)
	claimCtx, cancel := context.WithTimeout(c.ctx, e.cfg.LeaseTimeout/2)
	defer cancel()
	p := storage.ClaimParams{
		RelayID:  e.cfg.RelayID,
		Limit:    e.cfg.BatchSize,
		MaxBytes: e.cfg.MaxBatchBytes,
		Ordering: e.cfg.Ordering,
		OnDead:   e.cfg.OnDead,
		After:    e.cursor,

		SweepInterval: e.cfg.SweepInterval,
		Fresh:         e.fresh.get(),
	}
	var err error
	if e.held != nil && !p.Fresh.ToLog {
		// While a Capture reads the log, claims take only what it does
		// not deliver, and lease it by status.
		var hb storage.HeldBatch
		hb, err = e.held.ClaimHeld(claimCtx, p, e.cfg.LeaseTimeout)
		c.batch, c.tx = hb.Batch, hb.Tx
	} else {
		c.batch, err = e.store.Claim(claimCtx, p)
	}
	end(len(c.batch.Events), err)
	if err == nil && !c.batch.Lease.LockedAt.IsZero() {
		e.claimedAt = c.batch.Lease.LockedAt
	}
	if err == nil && e.cfg.Ordering == storage.OrderingPartition {
		// The driver knows where its walk over keys ended.
		e.cursor = c.batch.After
	}
	return c, err
}

// idle waits for a wakeup, the next row to come due, the poll interval, or
// the end of ctx.
func (e *Engine) idle(ctx context.Context) {
	t := time.NewTimer(e.untilDue(ctx))
	defer t.Stop()
	select {
	case <-e.wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

// untilDue is how long an idle engine waits before it claims again: until
// the next scheduled or backed-off row comes due, where the storage says
// (DueWatcher), and at most PollInterval, which still covers what it does
// not say and a lookup that fails. The storage measures the wait on the
// database's clock, the claim's, and the timer runs on this process's
// monotonic one, so a skew between the clocks neither delays the claim nor
// makes the engine spin on a row it thinks is overdue.
func (e *Engine) untilDue(ctx context.Context) time.Duration {
	wait := e.cfg.PollInterval
	if e.due == nil {
		return wait
	}
	// A database that does not answer holds the engine no longer than a
	// poll would have.
	lookup, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	d, ok, err := e.due.NextDue(lookup, e.claimedAt)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			e.log.Debug("next due time unknown; polling", "error", err)
		}
	case ok:
		wait = min(wait, d)
	}
	return wait
}

// freshScope is the engine's storage.FreshEvents, which a Capture sets.
type freshScope struct {
	mu sync.Mutex
	f  storage.FreshEvents
}

// Which fresh events the claims take beside a log reader
// (storage.FreshEvents). Without one, all of them (the zero value).
var (
	// freshUnstreamed: while this relay's stream does not run, those no
	// stream reads (the storage decides by the table's log lock).
	freshUnstreamed = storage.FreshEvents{ToLog: true, WhenUnlocked: true}
	// freshStreamed: while it runs, none; freshBackfill, those up to
	// its backfill's seq.
	freshStreamed = storage.FreshEvents{ToLog: true}
)

func freshBackfill(upTo int64) storage.FreshEvents {
	return storage.FreshEvents{ToLog: true, BackfillTo: upTo}
}

func (s *freshScope) get() storage.FreshEvents {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f
}

// set makes the claims take f, and returns what they took before.
func (s *freshScope) set(f storage.FreshEvents) (was storage.FreshEvents) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was, s.f = s.f, f
	return was
}

// replace makes the claims take f if they take old, and says whether.
func (s *freshScope) replace(old, f storage.FreshEvents) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != old {
		return false
	}
	s.f = f
	return true
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
