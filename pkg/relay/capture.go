package relay

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// CAPTURE=wal: events come from the database's log (capture.Source) in
// commit order, are published through the engine's publisher and recorded
// through storage.LogRecorder; the engine's claims meanwhile take only what
// the log does not deliver — events due again after a failure or a
// hand-over, scheduled ones, and, after a stream starts, the backfill of
// what was written before its log position existed.

// Capture timings.
const (
	// StandbyRetryDefault is how often a standby asks for the log while
	// another relay reads it: a relay that dies is replaced within about
	// this long after the server notices (at once for a closed
	// connection, wal_sender_timeout for a silent one).
	StandbyRetryDefault = time.Second
	// backfillCheck is how often a backfill looks whether it is done.
	backfillCheck = 250 * time.Millisecond
	// streamSteady is how long a stream must have run for its end to
	// reset the backoff before the next.
	streamSteady = time.Minute
)

// Log operations, as reported to Observer.StartSettle.
const (
	OpRecordDelivered = "record_delivered"
	OpRecordDeleted   = "record_deleted"
	OpRecordFailed    = "record_failed"
	OpDefer           = "defer"
)

// CaptureState is what the log reader is doing.
type CaptureState string

// Capture states.
const (
	CaptureStarting    CaptureState = "starting"
	CaptureStreaming   CaptureState = "streaming"
	CaptureBackfilling CaptureState = "backfilling" // streaming, and claiming what was written before the slot
	CaptureStandby     CaptureState = "standby"     // another relay reads the log
	CaptureFailing     CaptureState = "failing"     // the log cannot be opened or its stream ended; after 30 s claims poll everything
	CaptureLost        CaptureState = "lost"        // the log lost its position; claims poll everything
)

// CaptureConfig tunes a Capture. Zero fields take their XxxDefault;
// Validate names the fields that cannot work.
type CaptureConfig struct {
	// StandbyRetry is how often a standby asks for the log.
	StandbyRetry time.Duration
	// Observer is told what the Capture does beyond the engine's stages;
	// nil observes nothing.
	Observer CaptureObserver
	// Mode names the capture in its log lines (the CAPTURE value; "wal"
	// when empty), and Position what keeps its place in the log
	// ("replication slot" when empty; "binlog position").
	Mode, Position string
}

// Validate reports every field that cannot work, by its Go name. Zero
// fields are valid: they take their defaults.
func (c CaptureConfig) Validate() error {
	v := fieldcheck.Check("relay")
	v.Expect("CaptureConfig.StandbyRetry", c.StandbyRetry >= 0, "must be positive, got %s", c.StandbyRetry)
	return v.Err()
}

func (c CaptureConfig) withDefaults() CaptureConfig {
	fieldcheck.Default(&c.StandbyRetry, StandbyRetryDefault)
	fieldcheck.Default(&c.Mode, "wal")
	fieldcheck.Default(&c.Position, "replication slot")
	if c.Observer == nil {
		c.Observer = NopCaptureObserver{}
	}
	return c
}

// Capture relays events read from the database's log.
type Capture struct {
	e   *Engine
	src capture.Source
	rec storage.LogRecorder
	log *slog.Logger
	cfg CaptureConfig
	obs CaptureObserver

	mu     sync.Mutex
	state  CaptureState
	err    error
	opened bool   // a stream was open before: a new slot now is a gap filled from the table
	server string // the database server of the last stream (capture.Start.Server)
}

// NewCapture returns a Capture that publishes through e and leaves to e's
// claims only the events the log does not deliver, or cfg's errors. Run e
// as well.
func NewCapture(e *Engine, src capture.Source, rec storage.LogRecorder, cfg CaptureConfig) (*Capture, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	// The claims leave fresh events to the log while a stream holds the
	// table's log lock, and take them all while none does (a stream not
	// open yet, lost, failing, or another relay's that died): the
	// storage decides by the lock in each claim's own transaction
	// (storage.FreshEvents). A stream's backfill claims what is not in it.
	e.fresh.set(freshUnstreamed)
	return &Capture{e: e, src: src, rec: rec, log: e.log.With("capture", cfg.Mode), cfg: cfg, obs: cfg.Observer,
		state: CaptureStarting}, nil
}

// Status is what the log reader is doing now and, when failing or lost,
// why.
func (c *Capture) Status() (CaptureState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.err
}

func (c *Capture) setState(s CaptureState, err error) {
	c.mu.Lock()
	changed := s != c.state
	c.state, c.err = s, err
	c.mu.Unlock()
	if changed {
		c.obs.CaptureStateChanged(s, err)
	}
}

// Run reads the log until ctx ends. It returns nil then, or a
// *capture.SetupError when the database cannot serve the log as
// configured. Other failures never end it: a standby waits for the log, a
// lost log position is made anew, and a log that cannot be opened is
// opened again; while no stream reads the log, the claims take every
// event.
func (c *Capture) Run(ctx context.Context) error {
	retry := c.cfg.StandbyRetry
	backoff := storageBackoffMin
	for ctx.Err() == nil {
		// Opening can wait (a new slot waits for the transactions running
		// then to end); this relay does not hold the log lock meanwhile,
		// so, unless another relay streams, the claims take every event.
		stream, start, err := c.src.Open(ctx)
		var setup *capture.SetupError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &setup) && c.opened:
			// The setup changed under a running relay (the publication
			// dropped): exiting would stop the claims too. Every event is
			// claimed from the table until an operator applies the fix;
			// the next open then makes a new slot.
			c.e.Wake()
			c.setState(CaptureFailing, err)
			c.log.Error("the log cannot be read until an operator acts; claiming every event from the table meanwhile",
				"error", err, "retry_in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, storageBackoffMax)
			continue
		case errors.As(err, &setup):
			c.setState(CaptureFailing, err)
			return err
		case errors.Is(err, capture.ErrBusy):
			if st, _ := c.Status(); st != CaptureStandby {
				c.log.Info("another relay reads the log; claiming only events due again")
			}
			c.setState(CaptureStandby, nil)
			sleep(ctx, retry)
			continue
		case errors.Is(err, capture.ErrLost):
			c.lost(ctx, err, &backoff)
			continue
		default:
			c.e.Wake()
			c.setState(CaptureFailing, err)
			c.log.Warn("opening the log failed; claiming every event from the table until it opens; retrying", "error", err, "retry_in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, storageBackoffMax)
			continue
		}
		if c.server != "" && start.Server != c.server {
			c.log.Warn("the database server is not the one of the last stream: a failover or a restore; "+
				"a slot there starts afresh and events written in between are claimed from the table",
				"was", c.server, "now", start.Server)
		}
		c.server = start.Server
		switch {
		case start.Created && c.opened:
			c.log.Warn("made a new "+c.cfg.Position+": the old one was lost or dropped; events written in between are claimed from the table",
				"position", start.Position)
			c.obs.SlotRecreated()
		case start.Created:
			c.log.Info("made the "+c.cfg.Position+"; events written before it are claimed from the table", "position", start.Position)
		default:
			c.log.Info("streaming from the "+c.cfg.Position, "position", start.Position)
		}
		c.opened = true
		began := time.Now()
		// The table's log lock, from before the stream's first batch
		// until its last is recorded, even after the stream's connection
		// ended: meanwhile no claim takes a fresh event past the
		// backfill, and once it is granted every claim that did has
		// ended (docs/architecture.md, "Capture from the WAL").
		unlock, err := c.rec.LockLog(ctx)
		if err == nil {
			err = c.stream(ctx, stream)
			unlock()
		}
		// Every batch of the stream is recorded: the claims may take what
		// no other stream reads.
		c.e.fresh.set(freshUnstreamed)
		c.e.Wake()
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = stream.Close(closeCtx)
		cancel()
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, capture.ErrLost) {
			// The publication changed under the stream: the slot cannot
			// serve what follows, a new one can.
			c.lost(ctx, err, &backoff)
			continue
		}
		c.setState(CaptureFailing, err)
		if errors.As(err, &setup) {
			// The table or the server changed under the stream (a
			// column the reader cannot read): an operator's to fix.
			return err
		}
		// A stream that ends soon after it opened would otherwise be
		// opened again at once, over and over.
		if time.Since(began) > streamSteady {
			backoff = storageBackoffMin
		}
		c.log.Warn("the log stream ended; opening it again", "error", err, "retry_in", backoff)
		sleep(ctx, backoff)
		backoff = min(backoff*2, storageBackoffMax)
	}
	return nil
}

// lost handles a log position that cannot serve any more (a slot
// invalidated, a publication changed under it): every event is claimed
// from the table, the slot is dropped, and the next open makes a new one,
// whose backfill then leaves fresh events to it again.
func (c *Capture) lost(ctx context.Context, err error, backoff *time.Duration) {
	c.log.Error("the log lost its position; claiming every event from the table while the "+c.cfg.Position+" is made anew, so none is skipped",
		"error", err)
	c.e.Wake()
	c.setState(CaptureLost, err)
	if err := c.src.Reset(ctx); err != nil && ctx.Err() == nil {
		c.log.Error("could not drop the lost "+c.cfg.Position+"; retrying", "error", err)
		sleep(ctx, *backoff)
		*backoff = min(*backoff*2, storageBackoffMax)
	}
	c.opened = true // the new slot starts after a gap
}

// stream relays one open stream until it ends or ctx does.
func (c *Capture) stream(parent context.Context, s capture.Stream) error {
	// The backfill's watcher ends with the stream.
	ctx, endStream := context.WithCancel(parent)
	defer endStream()
	// The stream and the claims split the fresh events by seq, the
	// highest handed out now that this relay holds the table's log lock
	// (so every claim that took fresh events past a backfill has ended,
	// and none takes any more) and the stream's position is fixed: the claims
	// deliver those up to it that are not delivered yet — all of them
	// when the slot is new, what a previous stream left otherwise — and
	// the stream hands them every such event it meets instead of
	// publishing it (a transaction open now commits into the stream
	// later; a replay sends again what was not acknowledged); the events
	// after it are the stream's alone, since their transactions commit
	// after its position. Disjoint sets, so no event goes twice, however
	// the stream and the claims interleave (docs/architecture.md,
	// "Capture from the WAL").
	upTo, err := c.lastSeq(ctx)
	if err != nil {
		return err
	}
	if upTo > 0 {
		c.e.fresh.set(freshBackfill(upTo))
		c.e.Wake()
		c.setState(CaptureBackfilling, nil)
		go c.watchBackfill(ctx, upTo)
	} else {
		c.e.fresh.set(freshStreamed)
		c.setState(CaptureStreaming, nil)
	}

	publishing, settling, finished := c.e.shutdownContexts(ctx)
	defer finished()
	inFlight := c.e.cfg.MaxInFlightBatches
	if c.e.cfg.Ordering == storage.OrderingPartition {
		// A key's next batch must see the outcome of its last.
		inFlight = 1
	}
	slots := make(chan struct{}, inFlight)
	var records chan logOutcome
	if c.e.cfg.Ordering != storage.OrderingPartition {
		records = make(chan logOutcome, inFlight)
		recorded := make(chan struct{})
		go c.recordLoop(publishing, settling, records, recorded)
		defer func() {
			close(records)
			<-recorded
		}()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// A record that fails (the server shutting down, a lost connection)
	// ends the stream: its transactions are not acknowledged, so the next
	// stream sends them again, and meanwhile the server is not kept
	// waiting — a clean shutdown waits for every WAL sender's client to
	// confirm all it was sent, which this stream cannot while it cannot
	// record. The batches in flight still record once the database
	// answers, before stream returns.
	var stopStreamOnce sync.Once
	stopStream := func() {
		stopStreamOnce.Do(func() {
			c.log.Warn("recording failed: ending the log stream until the database answers; it starts again where it was acknowledged")
			go func() {
				closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = s.Close(closeCtx)
			}()
		})
	}
	txns := s.Txns()
	// queue holds what was received and not yet batched: transactions,
	// or the parts of one too large for a batch.
	var queue []capture.Txn
	closed := false
	receive := func(t capture.Txn, ok bool) {
		if !ok {
			closed = true
			return
		}
		queue = append(queue, c.split(t)...)
	}
	for {
		if len(queue) == 0 {
			select {
			case t, ok := <-txns:
				receive(t, ok)
			case <-ctx.Done():
				return nil
			}
		}
		b := logBatch{stopStream: stopStream, claimsTo: upTo}
		var size int64
		for {
			// What is queued first, then what has arrived meanwhile,
			// without waiting: a batch takes whole parts while they fit.
			for len(queue) > 0 {
				part := queue[0]
				n, bytes := len(part.Events), eventBytes(part.Events)
				if b.n > 0 && (b.n+n > c.e.cfg.BatchSize || size+bytes > c.e.cfg.MaxBatchBytes) {
					break
				}
				b.txns, b.n, size = append(b.txns, part), b.n+n, size+bytes
				queue = queue[1:]
			}
			if len(queue) > 0 || closed || b.n >= c.e.cfg.BatchSize {
				break
			}
			select {
			case t, ok := <-txns:
				receive(t, ok)
				continue
			default:
			}
			break
		}
		if b.n > 0 {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				c.process(publishing, settling, b, records)
			}()
		}
		if closed && len(queue) == 0 {
			wg.Wait()
			return s.Err()
		}
	}
}

// split returns t, or, when it holds more events or bytes than a batch
// takes, its parts in order: each is acknowledged on its own, and t once every
// part is.
func (c *Capture) split(t capture.Txn) []capture.Txn {
	if len(t.Events) <= c.e.cfg.BatchSize && eventBytes(t.Events) <= c.e.cfg.MaxBatchBytes {
		return []capture.Txn{t}
	}
	var parts []capture.Txn
	for start := 0; start < len(t.Events); {
		end, bytes := start, int64(0)
		for end < len(t.Events) && end-start < c.e.cfg.BatchSize {
			n := int64(len(t.Events[end].Payload) + len(t.Events[end].Headers))
			if end > start && bytes+n > c.e.cfg.MaxBatchBytes {
				break
			}
			bytes += n
			end++
		}
		parts = append(parts, capture.Txn{Events: t.Events[start:end], Seqs: t.Seqs[start:end], ID: t.ID})
		start = end
	}
	var left atomic.Int64
	left.Store(int64(len(parts)))
	for i := range parts {
		parts[i].Ack = func() {
			if left.Add(-1) == 0 {
				t.Ack()
			}
		}
	}
	return parts
}

// eventBytes is the events' payload and header bytes, the measure of
// MaxBatchBytes.
func eventBytes(events []outbox.Event) int64 {
	var n int64
	for i := range events {
		n += int64(len(events[i].Payload) + len(events[i].Headers))
	}
	return n
}

// lastSeq reads where the backfill ends, retrying while the database fails.
func (c *Capture) lastSeq(ctx context.Context) (int64, error) {
	wait := storageBackoffMin
	for {
		seq, err := c.rec.LastSeq(ctx)
		if err == nil || ctx.Err() != nil {
			return seq, err
		}
		c.log.Warn("reading the last seq failed; retrying", "error", err, "retry_in", wait)
		sleep(ctx, wait)
		wait = min(wait*2, storageBackoffMax)
	}
}

// watchBackfill ends the backfill once no fresh event up to upTo is left
// PENDING: from then on the claims leave fresh events to the log. It
// returns then, at the end of ctx, or when a new stream or a fallback
// changed what the claims take.
func (c *Capture) watchBackfill(ctx context.Context, upTo int64) {
	t := time.NewTicker(backfillCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.e.fresh.get() != freshBackfill(upTo) {
			return // a new stream or a fallback took over
		}
		left, err := c.rec.FreshLeft(ctx, upTo)
		if err != nil || left {
			continue
		}
		if c.e.fresh.replace(freshBackfill(upTo), freshStreamed) {
			c.log.Info("backfill done: every event written before the stream's position is claimed or settled", "up_to_seq", upTo)
			c.setState(CaptureStreaming, nil)
		}
		return
	}
}

// logBatch is whole transactions from the log, published together.
type logBatch struct {
	txns []capture.Txn
	n    int
	// claimsTo is the highest seq of the fresh events that are the
	// claims' during this stream (see stream): the batch hands them over.
	claimsTo int64
	// stopStream ends the batch's stream early (see stream): a record that
	// fails must not leave the server waiting on the stream.
	stopStream func()
}

// createdAt is the created_at of the batch's events, by id.
func (b logBatch) createdAt() map[uuid.UUID]time.Time {
	m := make(map[uuid.UUID]time.Time, b.n)
	for _, t := range b.txns {
		for i := range t.Events {
			m[t.Events[i].ID] = t.Events[i].CreatedAt
		}
	}
	return m
}

// logOutcome is what became of one published batch, waiting to be
// recorded.
type logOutcome struct {
	b         logBatch
	delivered []uuid.UUID
	failed    []storage.Failure
	deferred  []uuid.UUID
	dead      int
	firstErr  error
	// stopped is set when a shutdown stopped the publishes: what went is
	// recorded, and the transactions are not acknowledged, so that the next
	// reader gets them again.
	stopped bool
}

// process sends a batch of the log's events through the engine's pipeline
// (logSource settles it). The events that are the claims' (b.claimsTo),
// and under ordering those whose key an earlier event blocks, are left
// out of the publish and handed to the claims.
func (c *Capture) process(publishing, settling context.Context, b logBatch, records chan<- logOutcome) {
	events := make([]outbox.Event, 0, b.n)
	seqs := make([]int64, 0, b.n)
	for _, t := range b.txns {
		events = append(events, t.Events...)
		seqs = append(seqs, t.Seqs...)
	}
	events, seqs, handOver := claimsOwn(events, seqs, b.claimsTo)
	if c.e.cfg.Ordering == storage.OrderingPartition {
		var blocked []outbox.Event
		var ok bool
		events, blocked, ok = c.deferBlocked(publishing, b, events, seqs)
		if !ok {
			return
		}
		handOver = append(handOver, blocked...)
	}
	src := &logSource{c: c, b: b, handOver: handOver, records: records, ctx: publishing, settleBy: settling}
	c.e.process(&batch{events: events, ctx: publishing, settleBy: settling, source: src})
}

// claimsOwn splits events, in their order, and their seqs into those the
// stream sends and those up to claimsTo, which are the claims' (see
// stream).
func claimsOwn(events []outbox.Event, seqs []int64, claimsTo int64) (send []outbox.Event, sendSeqs []int64, hand []outbox.Event) {
	// Past the first transactions of a stream no event is the claims':
	// the batch goes as it is.
	if claimsTo <= 0 || !slices.ContainsFunc(seqs, func(seq int64) bool { return seq <= claimsTo }) {
		return events, seqs, nil
	}
	for i := range events {
		if seqs[i] <= claimsTo {
			hand = append(hand, events[i])
		} else {
			send, sendSeqs = append(send, events[i]), append(sendSeqs, seqs[i])
		}
	}
	return send, sendSeqs, hand
}

// logSource is a batch of the log's events as a source of the pipeline.
// Nothing holds its rows while it is at the broker: the log sends it again
// until it is acknowledged. Its outcome goes to the recorder, which gathers
// outcomes into fewer statements, or — under ordering, where the next
// batch's blocked keys must see this one's failures — is recorded at once.
type logSource struct {
	c        *Capture
	b        logBatch
	handOver []outbox.Event // deferred to the claims before the publish
	records  chan<- logOutcome
	ctx      context.Context
	settleBy context.Context
}

func (s *logSource) keep() (stop func()) { return func() {} }

// waitsOutOutages is true: an event the broker did not take is sent again
// once it is back, not handed to the claims.
func (s *logSource) waitsOutOutages() bool { return true }

func (s *logSource) settle(o outcome) {
	lo := logOutcome{b: s.b, delivered: o.delivered, failed: o.failed, dead: o.dead, firstErr: o.firstErr}
	handOver := s.handOver
	if s.ctx.Err() != nil && o.unavailable {
		// The shutdown stopped the publishes: what went is recorded,
		// and the transactions are not acknowledged, so that the next
		// reader gets them again.
		lo.failed, lo.dead, lo.stopped = nil, 0, true
	} else {
		for _, id := range o.released {
			// Held back behind an event of their key that failed.
			handOver = append(handOver, outbox.Event{ID: id})
		}
	}
	for i := range handOver {
		lo.deferred = append(lo.deferred, handOver[i].ID)
	}
	if s.records == nil || lo.stopped {
		s.c.finish(s.ctx, s.settleBy, []logOutcome{lo})
		return
	}
	select {
	case s.records <- lo:
	case <-s.settleBy.Done():
	}
}

// recordWindow is how long the recorder gathers outcomes before it writes
// them, and recordMax how many events it gathers at most: at a steady rate
// of small transactions each would otherwise cost its own statement (at
// 1,000 a second, 50 ms took relaying's database CPU per event from about
// polling's to 0.6 of it). The broker has the events already; only the
// table's word and the slot's acknowledgement wait.
const (
	recordWindow = 50 * time.Millisecond
	recordMax    = 4 * BatchSizeDefault
)

// recordLoop records the outcomes it receives, those that arrive within
// recordWindow of each other in one go, until records is closed.
func (c *Capture) recordLoop(ctx, settling context.Context, records <-chan logOutcome, done chan<- struct{}) {
	defer close(done)
	for first := range records {
		group, n := []logOutcome{first}, first.b.n
		window := time.NewTimer(recordWindow)
	gather:
		for n < recordMax {
			select {
			case o, ok := <-records:
				if !ok {
					break gather
				}
				group, n = append(group, o), n+o.b.n
			case <-window.C:
				break gather
			}
		}
		window.Stop()
		c.finish(ctx, settling, group)
	}
}

// finish records a group of outcomes — one record call for all — and,
// once it landed, acknowledges their transactions.
func (c *Capture) finish(ctx, settling context.Context, group []logOutcome) {
	var all logOutcome
	all.b.stopStream = group[0].b.stopStream
	for _, o := range group {
		all.b.txns = append(all.b.txns, o.b.txns...)
		all.b.n += o.b.n
		all.delivered = append(all.delivered, o.delivered...)
		all.failed = append(all.failed, o.failed...)
		all.deferred = append(all.deferred, o.deferred...)
	}
	if !c.record(ctx, settling, all.b, all.delivered, all.failed, all.deferred) {
		return
	}
	wake := false
	for _, o := range group {
		if o.stopped {
			continue
		}
		for _, t := range o.b.txns {
			t.Ack()
		}
		c.e.finished(ctx, Outcome{Delivered: len(o.delivered), Failed: len(o.failed) - o.dead, Dead: o.dead, Released: len(o.deferred)}, o.firstErr)
		wake = wake || len(o.failed) > 0 || len(o.deferred) > 0
	}
	if wake {
		// The claims take them from here; under ordering they also
		// deliver the deferred events after the failed ones.
		c.e.Wake()
	}
}

// deferBlocked keeps the events whose key is blocked by an earlier event
// (one due again after a failure, one a claim holds, a fresh one that is
// the claims' (b.claimsTo), or a DEAD one under ORDERING_ON_DEAD=block)
// from the publish: they are handed to the ordered claims, which deliver a
// key's events in order. ok is false when shutdown came first.
//
// It asks only once b's transactions are visible to other sessions: the
// stream may deliver a commit before they are, and a read of blocked keys
// then misses the batch's own events that are the claims' (an event
// stamped behind the clock is due again, not the log's), and publishes the
// key's later events before them.
func (c *Capture) deferBlocked(ctx context.Context, b logBatch, events []outbox.Event, seqs []int64) (send, hand []outbox.Event, ok bool) {
	seen := map[string]bool{}
	var keys []string
	for i := range events {
		if k := events[i].PartitionKey; k != "" && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return events, nil, true
	}
	var blocked map[string]int64
	wait := storageBackoffMin
	for {
		err := c.waitVisible(ctx, b)
		if err == nil {
			blocked, err = c.rec.BlockedKeys(ctx, storage.BlockedKeysParams{
				Keys: keys, OnDead: c.e.cfg.OnDead, Backfill: b.claimsTo})
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, nil, false
		}
		c.log.Warn("finding blocked keys failed; retrying", "error", err, "retry_in", wait)
		sleep(ctx, wait)
		wait = min(wait*2, storageBackoffMax)
	}
	send = events[:0:0]
	for i := range events {
		if s, ok := blocked[events[i].PartitionKey]; ok && s < seqs[i] {
			hand = append(hand, events[i])
		} else {
			send = append(send, events[i])
		}
	}
	return send, hand, true
}

// record writes the batch's outcome in one record call, retried until it
// lands or settling must stop; ok is true when it landed.
func (c *Capture) record(ctx, settling context.Context, b logBatch, delivered []uuid.UUID, failed []storage.Failure, deferred []uuid.UUID) (ok bool) {
	o := storage.Outcome{Delivered: delivered, Delete: c.e.cfg.DeleteDelivered, Failed: failed, Released: deferred}
	if o.Len() == 0 {
		return true
	}
	o.CreatedAt = b.createdAt()
	return c.recordUntil(ctx, settling, b, logOps.of(o), o.Len(), func(ctx context.Context) (storage.Settled, error) {
		return c.rec.Record(ctx, o)
	})
}

// recordUntil runs one record call until it succeeds or settling ends.
// Unlike a lease's settle it has no deadline of its own: nothing takes the
// log's rows back, and the stream is not acknowledged past them until it
// lands.
//
// A call that changed fewer rows than it was given (counted over its
// tries, as settleUntil counts) met rows of a transaction the log sent
// before other sessions could see it, or rows a claim took (the
// backfill): it waits until the batch's transactions are visible and runs
// once more, which changes what is still the log's.
func (c *Capture) recordUntil(ctx, settling context.Context, b logBatch, op string, n int, fn func(context.Context) (storage.Settled, error)) bool {
	rctx, cancel := detach(ctx, settling)
	defer cancel()
	rctx, end := c.e.obs.StartSettle(rctx, op, n)
	wait := storageBackoffMin
	waited := false
	var changed storage.Settled
	for {
		got, err := fn(rctx)
		changed = changed.Add(got)
		if err == nil && changed.Len() < n && !waited {
			if err = c.waitVisible(rctx, b); err == nil {
				waited = true
				continue
			}
		}
		if err == nil {
			end(nil)
			return true
		}
		if rctx.Err() != nil {
			c.log.Warn("shutdown: giving up recording; the log sends these events again", "op", op, "events", n, "error", err)
			end(err)
			return false
		}
		if b.stopStream != nil {
			b.stopStream()
		}
		c.log.Warn("recording failed; retrying", "op", op, "error", err, "retry_in", wait)
		sleep(rctx, wait)
		wait = min(wait*2, storageBackoffMax)
	}
}

// waitVisible waits until every transaction of b is visible to new
// snapshots.
func (c *Capture) waitVisible(ctx context.Context, b logBatch) error {
	ids := make([]string, len(b.txns))
	for i, t := range b.txns {
		ids[i] = t.ID
	}
	pause := time.Millisecond
	for {
		visible, err := c.rec.Visible(ctx, ids)
		if err != nil || visible {
			return err
		}
		sleep(ctx, pause)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pause = min(pause*2, 100*time.Millisecond)
	}
}
