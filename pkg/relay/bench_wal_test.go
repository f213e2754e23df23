package relay_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// `make bench MODE=wal` runs BenchmarkWAL: CAPTURE=poll against
// CAPTURE=wal on one private PostgreSQL cluster.

var (
	walTxn = flag.Int("wal.txn", 100,
		"events per producer transaction in BenchmarkWAL's cost and held phases")
	walDuration = flag.Duration("wal.duration", 60*time.Second,
		"how long BenchmarkWAL's sustained phase produces (10s under -short unless given)")
	walLatencyEvents = flag.Int("wal.latency.events", 10_000,
		"events BenchmarkWAL's latency phase commits (2,000 under -short unless given)")
	walLatencyRate = flag.Int("wal.latency.rate", 1000,
		"single-event transactions per second in BenchmarkWAL's latency phase")
)

const (
	// walBenchSlot is the replication slot of every CAPTURE=wal run. It
	// exists only while one runs: it is dropped after each, and every run
	// checks that no slot is left, so that the poll runs have none.
	walBenchSlot = "outbox_relay_bench"
	// sustainedProducers is how many connections insert at once in the
	// sustained phase.
	sustainedProducers = 8
	// latencyProducers share the latency phase's schedule, so that one
	// slow commit does not hold the next ones back.
	latencyProducers = 4
	// heldRounds is how many backlogs the held phase relays on one table.
	heldRounds = 3
	// drainTimeout bounds every wait for the relay to settle what was
	// produced.
	drainTimeout = 10 * time.Minute
)

// relayMode is one way of running the relay.
type relayMode struct {
	name   string
	wal    bool // CAPTURE=wal; otherwise CAPTURE=poll
	delete bool // DELIVERED_RETENTION=0 (Config.DeleteDelivered)
	// noRelay runs no relay at all (producerOnly).
	noRelay bool
}

var (
	pollMark   = relayMode{name: "poll-mark"}
	pollDelete = relayMode{name: "poll-delete", delete: true}
	walMark    = relayMode{name: "wal-mark", wal: true}
	walDelete  = relayMode{name: "wal-delete", wal: true, delete: true}
	// producerOnly runs a phase's producers with no relay, for the
	// database's CPU that the inserts alone cost.
	producerOnly = relayMode{name: "producer-only", noRelay: true}
)

// BenchmarkWAL compares CAPTURE=poll (the engine claiming rows, woken by the
// insert trigger's notifications as the relay is by default on PostgreSQL)
// with CAPTURE=wal (the log reader beside the engine) on one private
// cluster with wal_level=logical for both, so that the only difference is
// the relay's: the replication slot exists during the wal runs only.
// Every phase uses a fresh outbox table and a publisher that discards what
// it is sent (null://), so that only the storage side is measured:
//
//   - cost: the database server's CPU per event that relaying costs, and
//     this process's (the relay's) CPU per event, for poll and wal, each
//     marking delivered rows and deleting them (see costRun for what is
//     measured and what is subtracted);
//   - sustained: 8 connections inserting one event per transaction as
//     fast as they can for -wal.duration, the relay running: produced/s,
//     delivered/s and the backlog at each quarter of the run;
//   - latency: one event per transaction at -wal.latency.rate, commit →
//     publish p50 and p99;
//   - held: CAPTURE=wal relaying three backlogs in a row with and without
//     a REPEATABLE READ transaction held open for the whole run.
//
// After every run the table is checked against what the relay counted:
// rows its settle statements were given but did not change, and that are
// still PENDING, are reported as left-pending (see rowCounter); any other
// difference fails the benchmark.
//
// It prints a table of all of it at the end. Run it with -benchtime 1x:
// each phase reports its last iteration only. The cluster runs with
// fsync=off and autovacuum=off (pgcluster's settings), for both modes.
func BenchmarkWAL(b *testing.B) {
	if *benchStorage != "postgres" {
		b.Skipf("CAPTURE=wal reads PostgreSQL's log; -storage %s has none", *benchStorage)
	}
	c := pgcluster.Start(b, pgcluster.Options{})
	w := &walBench{
		cluster:   c,
		db:        c.CreateDatabase(b),
		n:         *benchEvents,
		per:       *walTxn,
		cost:      map[string]costRun{},
		sustained: map[string]sustainedRun{},
		latency:   map[string]latencyRun{},
		held:      map[string][]heldRound{},
		heldLeft:  map[string]int{},
		relayCPU:  map[string]time.Duration{},
	}
	if w.n <= 0 || w.per <= 0 {
		b.Fatalf("-events %d and -wal.txn %d must be positive", w.n, w.per)
	}
	b.Run("cost", func(b *testing.B) {
		b.Run("producer-only", func(b *testing.B) {
			var r costRun
			for range b.N {
				r = w.runProducerOnly(b)
			}
			w.producer = &r
			b.ReportMetric(r.rate(), "events/s")
			b.ReportMetric(perEvent(r.db, r.events), "db-µs/event")
			b.ReportMetric(0, "ns/op")
		})
		for _, m := range []relayMode{pollMark, pollDelete, walMark, walDelete} {
			b.Run(m.name, func(b *testing.B) {
				var r costRun
				for range b.N {
					r = w.runCost(b, m)
				}
				w.cost[m.name] = r
				b.ReportMetric(r.rate(), "events/s")
				b.ReportMetric(perEvent(r.db, r.events), "db-µs/event")
				if d, ok := w.relayingDB(m, r); ok {
					b.ReportMetric(d, "relaying-db-µs/event")
				}
				if d, ok := w.relayingSelf(m, r); ok {
					b.ReportMetric(d, "relay-µs/event")
				}
				b.ReportMetric(float64(r.left), "left-pending")
				b.ReportMetric(0, "ns/op")
			})
		}
	})
	b.Run("relay-cpu", func(b *testing.B) {
		for _, m := range []relayMode{pollMark, walMark} {
			b.Run(m.name, func(b *testing.B) {
				var d time.Duration
				for range b.N {
					d = w.runRelayCPU(b, m)
				}
				w.relayCPU[m.name] = d
				b.ReportMetric(perEvent(d, w.n), "relay-µs/event")
				b.ReportMetric(0, "ns/op")
			})
		}
	})
	b.Run("sustained", func(b *testing.B) {
		for _, m := range []relayMode{pollMark, walMark} {
			b.Run(m.name, func(b *testing.B) {
				var r sustainedRun
				for range b.N {
					r = w.runSustained(b, m)
				}
				w.sustained[m.name] = r
				b.ReportMetric(r.producedRate(), "produced/s")
				b.ReportMetric(r.deliveredRate(), "delivered/s")
				for q, n := range r.backlog {
					b.ReportMetric(float64(n), fmt.Sprintf("backlog-%d%%", 25*(q+1)))
				}
				b.ReportMetric(float64(r.left), "left-pending")
				b.ReportMetric(0, "ns/op")
			})
		}
	})
	b.Run("latency", func(b *testing.B) {
		for _, m := range []relayMode{producerOnly, pollMark, walMark} {
			b.Run(m.name, func(b *testing.B) {
				var r latencyRun
				for range b.N {
					r = w.runLatency(b, m)
				}
				w.latency[m.name] = r
				b.ReportMetric(r.rate, "commits/s")
				b.ReportMetric(ms(r.p50), "p50-ms")
				b.ReportMetric(ms(r.p99), "p99-ms")
				b.ReportMetric(float64(r.left), "left-pending")
				b.ReportMetric(0, "ns/op")
			})
		}
	})
	b.Run("held", func(b *testing.B) {
		for _, held := range []bool{false, true} {
			name := "unheld"
			if held {
				name = "held"
			}
			b.Run(name, func(b *testing.B) {
				var rounds []heldRound
				var left int
				for range b.N {
					rounds, left = w.runHeld(b, held)
				}
				w.held[name], w.heldLeft[name] = rounds, left
				b.ReportMetric(slowest(rounds).rate, "slowest-round-events/s")
				b.ReportMetric(float64(left), "left-pending")
				b.ReportMetric(0, "ns/op")
			})
		}
	})
	w.print(os.Stdout)
}

// walBench is the state BenchmarkWAL's phases share: the cluster, and
// each phase's figures for the table printed at the end.
type walBench struct {
	cluster *pgcluster.Cluster
	db      string
	n       int // events per cost run and per held round
	per     int // events per producer transaction in those

	producer  *costRun // the producer-only run, once measured
	cost      map[string]costRun
	sustained map[string]sustainedRun
	latency   map[string]latencyRun
	held      map[string][]heldRound
	heldLeft  map[string]int // rows left PENDING (see rowCounter)
	relayCPU  map[string]time.Duration
}

func (w *walBench) url() string { return w.cluster.URL(w.db) }

// table creates a fresh outbox table, with its publication when the relay
// will read the log. Both are dropped when b ends.
func (w *walBench) table(b *testing.B, publication bool) (*pgtest.Table, string) {
	b.Helper()
	tb := pgtest.NewAt(b, w.url())
	schema, _, _ := strings.Cut(tb.Name, ".")
	pub := ""
	if publication {
		pub = "pub_" + schema
		tb.CreatePublication(b, pub)
	}
	// Registered after the store's Close, so it runs before it.
	b.Cleanup(func() {
		if pub != "" {
			w.cluster.Exec(b, w.db, "DROP PUBLICATION IF EXISTS "+pub)
		}
		w.cluster.Exec(b, w.db, "DROP SCHEMA "+schema+" CASCADE")
	})
	return tb, pub
}

// quiesce checks that no replication slot exists and runs a checkpoint,
// so that each measurement starts from a server in the same state: no
// slot, no dirty buffers left by what came before.
func (w *walBench) quiesce(b *testing.B, tb *pgtest.Table) {
	b.Helper()
	var slots int
	if err := tb.Pool().QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil {
		b.Fatal(err)
	}
	if slots != 0 {
		b.Fatalf("%d replication slots exist before a run; there should be none", slots)
	}
	tb.Exec(b, "CHECKPOINT")
}

// walCaughtUp waits until the slot's walsender has read the log up to the
// server's current position: until then it may still be decoding what
// the run wrote, and the run's CPU would leave that out.
func (w *walBench) walCaughtUp(b *testing.B, tb *pgtest.Table) {
	b.Helper()
	ctx := context.Background()
	var target string
	if err := tb.Pool().QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&target); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var done bool
		err := tb.Pool().QueryRow(ctx, `SELECT coalesce(bool_and(r.sent_lsn >= $1::pg_lsn), false)
			FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
			WHERE s.slot_name = $2`, target, walBenchSlot).Scan(&done)
		if err != nil {
			b.Fatal(err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the walsender did not read the log up to %s within 2 minutes", target)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// vacuum is the server's CPU for a VACUUM of the table: the dead row
// versions the run left behind are work for the database too, which
// autovacuum would do later.
func (w *walBench) vacuum(b *testing.B, tb *pgtest.Table) time.Duration {
	b.Helper()
	db0 := w.cluster.ServerCPU()
	tb.Exec(b, "VACUUM {{table}}")
	return w.cluster.ServerCPU() - db0
}

// benchProducer inserts events through the producer's insert
// (postgres.Writer) on a connection of its own, as an application would.
type benchProducer struct {
	conn *pgx.Conn
	w    *postgres.Writer
}

func (w *walBench) newProducer(b *testing.B, tb *pgtest.Table) *benchProducer {
	b.Helper()
	conn, err := pgx.Connect(context.Background(), w.url())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	wr, err := postgres.NewWriter(tb.Name)
	if err != nil {
		b.Fatal(err)
	}
	return &benchProducer{conn: conn, w: wr}
}

// write inserts the prepared transactions, one statement (and so one
// transaction) each.
func (p *benchProducer) write(b *testing.B, txns []outbox.Columns) {
	b.Helper()
	for _, c := range txns {
		if err := p.w.WriteColumns(context.Background(), postgres.PgxTx(p.conn), c); err != nil {
			b.Fatal(err)
		}
	}
}

// insert writes one message in a transaction of its own.
func (p *benchProducer) insert(m outbox.Message) error {
	return p.w.Write(context.Background(), postgres.PgxTx(p.conn), m)
}

// prepareTxns builds n 200-byte events in transactions of per, before any
// measurement starts, so that the producer's share of this process's CPU
// in a run is little more than sending them.
func prepareTxns(b *testing.B, n, per int) []outbox.Columns {
	b.Helper()
	var txns []outbox.Columns
	for done := 0; done < n; done += per {
		msgs := make([]outbox.Message, min(per, n-done))
		for i := range msgs {
			msgs[i] = outbox.Message{Type: "bench.wal", Payload: pgtest.Payload(done+i, 200)}
		}
		c, err := outbox.Prepare(context.Background(), msgs)
		if err != nil {
			b.Fatal(err)
		}
		txns = append(txns, c)
	}
	return txns
}

// settledCounter is an Observer counting the events the relay delivered
// and settled (marked or deleted), by the engine's claims or the log
// reader: a drain is over when all are, which asks the table nothing.
type settledCounter struct {
	relay.NopObserver
	mu        sync.Mutex
	n         int64
	target    int64
	reachedAt time.Time // when n reached target
	firstAt   time.Time // when the first event was settled delivered
}

func (s *settledCounter) Finished(_ context.Context, o relay.Outcome) {
	if o.Delivered == 0 {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		s.firstAt = now
	}
	s.n += int64(o.Delivered)
	if s.target > 0 && s.n >= s.target && s.reachedAt.IsZero() {
		s.reachedAt = now
	}
}

// first is when the first event was settled delivered.
func (s *settledCounter) first() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstAt
}

func (s *settledCounter) count() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// await waits until n events are settled and returns when the count got
// there.
func (s *settledCounter) await(b *testing.B, n int64) time.Time {
	b.Helper()
	s.mu.Lock()
	s.target, s.reachedAt = n, time.Time{}
	if s.n >= n {
		s.reachedAt = time.Now()
	}
	s.mu.Unlock()
	deadline := time.Now().Add(drainTimeout)
	for {
		s.mu.Lock()
		at, got := s.reachedAt, s.n
		s.mu.Unlock()
		if !at.IsZero() {
			return at
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d events settled after %s", got, n, drainTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rowCounter is the relay's storage, counting the rows its settle
// statements were given and did not change: after a run, the table must be
// as the relay's own figures say, and a row left PENDING is one of those.
//
// Under CAPTURE=wal some are: the walsender can send a transaction as soon
// as its commit record is in the log, a moment before the transaction is
// visible to other sessions, and a settle statement that starts in that
// moment finds none of its rows. The benchmark reports them (left-pending)
// rather than failing: they are the log reader's to fix, and each such
// statement is a little cheaper than one that finds its rows.
type rowCounter struct {
	*postgres.Store
	missed atomic.Int64
}

func (s *rowCounter) count(n storage.Settled, given []uuid.UUID, err error) (storage.Settled, error) {
	if err == nil {
		s.missed.Add(int64(len(given) - n.Delivered))
	}
	return n, err
}

func (s *rowCounter) Settle(ctx context.Context, lease storage.Lease, o storage.Outcome) (storage.Settled, error) {
	n, err := s.Store.Settle(ctx, lease, o)
	return s.count(n, o.Delivered, err)
}

func (s *rowCounter) Record(ctx context.Context, o storage.Outcome) (storage.Settled, error) {
	n, err := s.Store.Record(ctx, o)
	return s.count(n, o.Delivered, err)
}

// sink is a publisher that discards events (null://) and, when asked,
// stamps when each first arrived.
type sink struct {
	publisher.Publisher
	mu       sync.Mutex
	arrivals map[uuid.UUID]time.Time // nil: no stamps
}

func newSink(b *testing.B, stamp bool) *sink {
	b.Helper()
	pub, err := publisher.Open(context.Background(), "null://")
	if err != nil {
		b.Fatal(err)
	}
	s := &sink{Publisher: pub}
	if stamp {
		s.arrivals = map[uuid.UUID]time.Time{}
	}
	return s
}

func (s *sink) Publish(ctx context.Context, batch []outbox.Event) []error {
	if s.arrivals != nil {
		now := time.Now()
		s.mu.Lock()
		for i := range batch {
			if _, ok := s.arrivals[batch[i].ID]; !ok {
				s.arrivals[batch[i].ID] = now
			}
		}
		s.mu.Unlock()
	}
	return s.Publisher.Publish(ctx, batch)
}

func (s *sink) arrival(id uuid.UUID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.arrivals[id]
	return at, ok
}

// benchRelay is a relay running on one table until stopped: the engine,
// listening for the insert trigger's notifications under CAPTURE=poll (as
// the relay does by default on PostgreSQL), and the log reader beside it
// under CAPTURE=wal.
type benchRelay struct {
	settled *settledCounter
	rows    *rowCounter
	wal     bool
	url     string // the database's, for dropping the slot
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// startRelay starts a relay in mode on tb with the relay's defaults but
// for -batch and -inflight. Under CAPTURE=wal it returns once the log
// reader streams (it made the slot and had nothing to backfill).
func (w *walBench) startRelay(b *testing.B, tb *pgtest.Table, pub string, mode relayMode, p publisher.Publisher) *benchRelay {
	b.Helper()
	r := &benchRelay{settled: &settledCounter{}, rows: &rowCounter{Store: tb.Store}, wal: mode.wal, url: w.url(), done: make(chan error, 1)}
	e, err := relay.New(relay.Config{
		RelayID:            "bench",
		BatchSize:          *benchBatch,
		MaxInFlightBatches: *benchInFlight,
		NotifyDebounce:     relay.NotifyDebounceDefault,
		DeleteDelivered:    mode.delete,
		Logger:             testLogger(),
		Observer:           r.settled,
	}, r.rows, p)
	if err != nil {
		b.Fatal(err)
	}
	var c *relay.Capture
	if mode.wal {
		// Before the engine runs: it leaves fresh events to the log from
		// its first claim on.
		c, err = relay.NewCapture(e, pgwal.Source{Config: tb.WAL(pgwal.Config{Slot: walBenchSlot, Publication: pub, Logger: testLogger()})}, r.rows, relay.CaptureConfig{})
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	var wg sync.WaitGroup
	var runErr error
	wg.Add(2)
	go func() { defer wg.Done(); e.Run(ctx) }()
	if c != nil {
		go func() { defer wg.Done(); runErr = c.Run(ctx) }()
	} else {
		go func() { defer wg.Done(); e.Listen(ctx, tb.Store) }()
	}
	go func() { wg.Wait(); r.done <- runErr }()
	b.Cleanup(func() { r.stop(b) })
	if c != nil {
		deadline := time.Now().Add(time.Minute)
		for {
			st, err := c.Status()
			if st == relay.CaptureStreaming {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the log reader did not stream within a minute: %s (%v)", st, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return r
}

// stop stops the relay and, under CAPTURE=wal, drops the slot: the next
// run, poll or wal, starts without one.
func (r *benchRelay) stop(b *testing.B) {
	b.Helper()
	if r.stopped {
		return
	}
	r.stopped = true
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			b.Errorf("the log reader ended with: %v", err)
		}
	case <-time.After(2 * time.Minute):
		b.Fatal("the relay did not stop within 2 minutes")
	}
	if r.wal {
		dropSlot(b, r.url)
	}
}

// dropSlot drops walBenchSlot, waiting for the walsender of the stream
// just closed to end (an active slot cannot be dropped).
func dropSlot(b *testing.B, url string) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(time.Minute)
	for {
		err := pgwal.DropSlot(ctx, url, walBenchSlot)
		var left int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", walBenchSlot).Scan(&left); err != nil {
			b.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("could not drop slot %s within a minute: %v", walBenchSlot, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// costRun is what one run of the cost phase measured in its window: from
// just before the first event is written (CAPTURE=wal, producer-only) or
// the relay starts (CAPTURE=poll) to the moment every event is settled.
//
// What each figure holds, and what is subtracted:
//
//   - producer-only inserts -events events in transactions of -wal.txn,
//     with no relay and no slot: db is what the inserts cost the server
//     (the insert trigger's notification and the WAL included), self what
//     sending them cost this process (the events are built before the
//     window opens).
//   - A poll run inserts the same events before its window opens and
//     analyses the table (as autovacuum would have by then; reading the
//     rows, ANALYZE also sets their hint bits, a small piece of work the
//     wal runs' settles do inside their windows); the window covers
//     starting the relay and draining them. Everything in it is relaying:
//     nothing is subtracted.
//   - A wal run cannot drain a backlog written before it: the reader
//     leaves what precedes its stream to the claims, which would make it a
//     poll run. So its window opens with the relay already streaming (the
//     slot made and the table empty) and covers inserting the same events,
//     in the same transactions, while it relays them, until all are
//     settled and the walsender has read the log up to the server's
//     position: the walsender decodes every record written, the relay's
//     own updates or deletes included, and its CPU is in db. Its relaying
//     cost is the window's figure minus producer-only's, for db and self
//     alike. That takes the inserts to cost the same beside the relay as
//     alone: whatever the two do to each other (lock and buffer
//     contention; the garbage collector for this process) is counted as
//     relaying, and producer-only's noise, a single measurement, goes into
//     the difference as well.
//   - Neither counts what wal_level=logical itself costs over replica (a
//     little more WAL for every write of the database, the outbox's or
//     not): both run with it, and only CAPTURE=wal needs it.
//   - vacuum, outside the window, is the server's CPU for a VACUUM of the
//     table after the run (the relay stopped): the dead row versions a run
//     leaves (poll: the claim's update and the settle's update or delete;
//     wal: the settle's alone) are autovacuum's work later. The table shows
//     it beside producer-only's, whose table has no dead rows: what VACUUM
//     costs there (reading every page, setting the visibility map) is the
//     floor.
type costRun struct {
	events int
	took   time.Duration
	// tail (wal runs) is from the last insert's return to the last
	// settle: how far behind the producer the relay ended.
	tail   time.Duration
	db     time.Duration // the server's CPU (pgcluster's ServerCPU)
	self   time.Duration // this process's CPU
	vacuum time.Duration // the server's CPU for VACUUM after the run
	left   int           // rows left PENDING (see rowCounter)
}

func (r costRun) rate() float64 { return float64(r.events) / r.took.Seconds() }

// serverInserts writes n 200-byte events in transactions of per from
// inside the server (one DO statement), so that this process spends next
// to nothing producing them and its CPU is the relay's alone.
func (w *walBench) serverInserts(b *testing.B, tb *pgtest.Table, n int) {
	b.Helper()
	conn, err := pgx.Connect(context.Background(), w.url())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	q := fmt.Sprintf(`DO $$
BEGIN
    FOR i IN 1..%d LOOP
        INSERT INTO %s (event_id, event_type, payload)
        SELECT gen_random_uuid(), 'bench.wal', convert_to(repeat('x', 200), 'UTF8')
        FROM generate_series(1, %d);
        COMMIT;
    END LOOP;
END $$`, (n+w.per-1)/w.per, tb.Name, w.per)
	if _, err := conn.Exec(context.Background(), q); err != nil {
		b.Fatal(err)
	}
}

// runRelayCPU measures this process's CPU while the relay in mode relays n
// events the server itself inserts: for poll a backlog inserted before,
// for wal inserted while streaming.
func (w *walBench) runRelayCPU(b *testing.B, mode relayMode) time.Duration {
	b.Helper()
	tb, pub := w.table(b, mode.wal)
	sink := newSink(b, false)
	var rel *benchRelay
	if !mode.wal {
		w.serverInserts(b, tb, w.n)
		tb.Exec(b, "ANALYZE {{table}}")
	}
	w.quiesce(b, tb)
	if mode.wal {
		rel = w.startRelay(b, tb, pub, mode, sink)
	}
	self0 := selfCPU()
	if mode.wal {
		w.serverInserts(b, tb, w.n)
	} else {
		rel = w.startRelay(b, tb, pub, mode, sink)
	}
	rel.settled.await(b, int64(w.n))
	d := selfCPU() - self0
	rel.stop(b)
	checkSettled(b, tb, rel, mode, w.n)
	return d
}

// runProducerOnly measures inserting the events with no relay.
func (w *walBench) runProducerOnly(b *testing.B) costRun {
	b.Helper()
	tb, _ := w.table(b, false)
	txns := prepareTxns(b, w.n, w.per)
	p := w.newProducer(b, tb)
	w.quiesce(b, tb)
	began := time.Now()
	db0, self0 := w.cluster.ServerCPU(), selfCPU()
	p.write(b, txns)
	r := costRun{events: w.n, took: time.Since(began), db: w.cluster.ServerCPU() - db0, self: selfCPU() - self0}
	r.vacuum = w.vacuum(b, tb)
	if got := total(tb.Counts(b)); got != w.n {
		b.Fatalf("%d rows, want %d", got, w.n)
	}
	return r
}

// runCost measures relaying the events in mode (see costRun).
func (w *walBench) runCost(b *testing.B, mode relayMode) costRun {
	b.Helper()
	if mode.wal && w.producer == nil {
		// Run alone: its relaying cost needs producer-only's figures.
		r := w.runProducerOnly(b)
		w.producer = &r
	}
	tb, pub := w.table(b, mode.wal)
	txns := prepareTxns(b, w.n, w.per)
	p := w.newProducer(b, tb)
	sink := newSink(b, false)
	var rel *benchRelay
	if !mode.wal {
		p.write(b, txns)
		tb.Exec(b, "ANALYZE {{table}}")
	}
	w.quiesce(b, tb)
	if mode.wal {
		rel = w.startRelay(b, tb, pub, mode, sink)
	}
	began := time.Now()
	kinds0 := w.cluster.ServerCPUByKind()
	db0, self0 := w.cluster.ServerCPU(), selfCPU()
	var written time.Time
	if mode.wal {
		p.write(b, txns)
		written = time.Now()
	} else {
		rel = w.startRelay(b, tb, pub, mode, sink)
	}
	at := rel.settled.await(b, int64(w.n))
	if mode.wal {
		w.walCaughtUp(b, tb)
	}
	r := costRun{events: w.n, took: at.Sub(began), db: w.cluster.ServerCPU() - db0, self: selfCPU() - self0}
	// Where the server's time went, by kind of process.
	for kind, d := range w.cluster.ServerCPUByKind() {
		if d -= kinds0[kind]; d > 0 {
			b.Logf("%s: %s %.1f µs/event", mode.name, kind, float64(d.Microseconds())/float64(w.n))
		}
	}
	if mode.wal {
		r.tail = max(at.Sub(written), 0)
	}
	rel.stop(b)
	r.left = checkSettled(b, tb, rel, mode, w.n)
	r.vacuum = w.vacuum(b, tb)
	return r
}

// checkSettled fails b unless all n events are DELIVERED (or, deleting,
// gone) but for rows left PENDING by settle statements that changed fewer
// rows than they were given (see rowCounter), and returns how many were
// left so.
func checkSettled(b *testing.B, tb *pgtest.Table, rel *benchRelay, mode relayMode, n int) int {
	b.Helper()
	counts := tb.Counts(b)
	left := counts[outbox.StatusPending]
	ok := total(counts) == n && counts[outbox.StatusDelivered]+left == n
	if mode.delete {
		ok = total(counts) == left
	}
	if !ok || int64(left) > rel.rows.missed.Load() {
		b.Fatalf("rows by status %v after %d events (delete %t), %d given to settle statements that did not change them",
			counts, n, mode.delete, rel.rows.missed.Load())
	}
	if left > 0 {
		b.Logf("%d events were delivered and settled by the relay's count, but their rows are still PENDING: "+
			"the settle statement did not find them (see rowCounter)", left)
	}
	return left
}

// relayingDB is what relaying cost the server per event in run r of mode:
// all of it for poll, less producer-only's for wal (see costRun). ok is
// false when producer-only is not there to subtract.
func (w *walBench) relayingDB(mode relayMode, r costRun) (float64, bool) {
	return w.relaying(mode, r, func(r costRun) time.Duration { return r.db })
}

// relayingSelf is relayingDB for this process's CPU.
func (w *walBench) relayingSelf(mode relayMode, r costRun) (float64, bool) {
	return w.relaying(mode, r, func(r costRun) time.Duration { return r.self })
}

func (w *walBench) relaying(mode relayMode, r costRun, cpu func(costRun) time.Duration) (float64, bool) {
	if !mode.wal {
		return perEvent(cpu(r), r.events), true
	}
	if w.producer == nil || w.producer.events != r.events {
		return 0, false
	}
	return perEvent(cpu(r), r.events) - perEvent(cpu(*w.producer), w.producer.events), true
}

// sustainedRun is what the sustained phase measured in one mode.
type sustainedRun struct {
	elapsed             time.Duration // the production window, as measured
	produced, delivered int64         // committed and settled by its end
	// backlog is produced − settled at 25, 50, 75 and 100 % of the
	// window: flat when the relay keeps up.
	backlog [4]int64
	// drained is from the end of production to the last event settled.
	drained time.Duration
	left    int // rows left PENDING (see rowCounter)
	// db is the server's CPU from the start of production until the last
	// event settled: the inserts' share and the relaying's, per event the
	// same for both modes' inserts.
	db    time.Duration
	total int64 // events produced in all
}

func (r sustainedRun) producedRate() float64  { return float64(r.produced) / r.elapsed.Seconds() }
func (r sustainedRun) deliveredRate() float64 { return float64(r.delivered) / r.elapsed.Seconds() }

// sustainedDuration is -wal.duration, or 10s under -short when it is not
// given.
func sustainedDuration() time.Duration {
	if testing.Short() && !flagGiven("wal.duration") {
		return 10 * time.Second
	}
	return *walDuration
}

// latencyCount is -wal.latency.events, or 2,000 under -short when it is
// not given.
func latencyCount() int {
	if testing.Short() && !flagGiven("wal.latency.events") {
		return 2000
	}
	return *walLatencyEvents
}

func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// runSustained has sustainedProducers connections insert one event per
// transaction as fast as they can while the relay runs in mode.
func (w *walBench) runSustained(b *testing.B, mode relayMode) sustainedRun {
	b.Helper()
	tb, pub := w.table(b, mode.wal)
	producers := make([]*benchProducer, sustainedProducers)
	for i := range producers {
		producers[i] = w.newProducer(b, tb)
	}
	w.quiesce(b, tb)
	rel := w.startRelay(b, tb, pub, mode, newSink(b, false))
	d := sustainedDuration()
	payload := pgtest.Payload(0, 200)
	var produced atomic.Int64
	errs := make(chan error, len(producers))
	var wg sync.WaitGroup
	kinds0 := w.cluster.ServerCPUByKind()
	db0 := w.cluster.ServerCPU()
	began := time.Now()
	end := began.Add(d)
	for _, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The deadline is checked between inserts: one cut off by a
			// cancellation might commit uncounted.
			for time.Now().Before(end) {
				if err := p.insert(outbox.Message{Type: "bench.wal", Payload: payload}); err != nil {
					errs <- err
					return
				}
				produced.Add(1)
			}
		}()
	}
	var r sustainedRun
	for q := range r.backlog {
		time.Sleep(time.Until(began.Add(d * time.Duration(q+1) / time.Duration(len(r.backlog)))))
		p, s := produced.Load(), rel.settled.count()
		r.backlog[q] = p - s
		r.elapsed, r.produced, r.delivered = time.Since(began), p, s
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	all := produced.Load()
	r.drained = max(rel.settled.await(b, all).Sub(end), 0)
	r.db, r.total = w.cluster.ServerCPU()-db0, all
	for kind, cpu := range w.cluster.ServerCPUByKind() {
		if cpu -= kinds0[kind]; cpu > 0 {
			b.Logf("%s: %s %.0f%% of a core", mode.name, kind, 100*cpu.Seconds()/time.Since(began).Seconds())
		}
	}
	rel.stop(b)
	r.left = checkSettled(b, tb, rel, mode, int(all))
	return r
}

// latencyRun is what the latency phase measured in one mode.
type latencyRun struct {
	events int
	left   int     // rows left PENDING (see rowCounter)
	rate   float64 // commits per second, first to last
	// behind is the furthest a commit started behind its schedule.
	behind        time.Duration
	p50, p99, max time.Duration
	// db is the server's CPU over the run, inserts included.
	db time.Duration
}

// runLatency commits one event per transaction at -wal.latency.rate while
// the relay runs in mode, and measures each event's latency from the
// moment its COMMIT returned to the producer to its arrival at the
// publisher. An event can arrive before its producer hears of the commit
// (the log may be read meanwhile): such a latency is negative.
func (w *walBench) runLatency(b *testing.B, mode relayMode) latencyRun {
	b.Helper()
	tb, pub := w.table(b, mode.wal)
	producers := make([]*benchProducer, latencyProducers)
	for i := range producers {
		producers[i] = w.newProducer(b, tb)
	}
	w.quiesce(b, tb)
	s := newSink(b, true)
	var rel *benchRelay
	if !mode.noRelay {
		rel = w.startRelay(b, tb, pub, mode, s)
	}
	n := latencyCount()
	interval := time.Second / time.Duration(*walLatencyRate)
	payload := pgtest.Payload(0, 200)
	var mu sync.Mutex
	commits := make(map[uuid.UUID]time.Time, n)
	var first, last time.Time
	var behind time.Duration
	errs := make(chan error, len(producers))
	var wg sync.WaitGroup
	kinds0 := w.cluster.ServerCPUByKind()
	db0 := w.cluster.ServerCPU()
	start := time.Now().Add(100 * time.Millisecond)
	defer func() {
		for kind, cpu := range w.cluster.ServerCPUByKind() {
			if cpu -= kinds0[kind]; cpu > 0 {
				b.Logf("%s: %s %.1f µs/event", mode.name, kind, float64(cpu.Microseconds())/float64(n))
			}
		}
	}()
	for k, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Producer k commits events k, k+len(producers), ... each
			// at its time on the one schedule.
			for i := k; i < n; i += len(producers) {
				due := start.Add(time.Duration(i) * interval)
				time.Sleep(time.Until(due))
				late := time.Since(due)
				id := uuid.Must(uuid.NewV7())
				if err := p.insert(outbox.Message{ID: id, Type: "bench.wal", Payload: payload}); err != nil {
					errs <- err
					return
				}
				committed := time.Now()
				mu.Lock()
				commits[id] = committed
				if first.IsZero() || committed.Before(first) {
					first = committed
				}
				if committed.After(last) {
					last = committed
				}
				behind = max(behind, late)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if mode.noRelay {
		r := latencyRun{events: n, behind: behind, db: w.cluster.ServerCPU() - db0}
		if n > 1 {
			r.rate = float64(n-1) / last.Sub(first).Seconds()
		}
		return r
	}
	rel.settled.await(b, int64(n))
	db := w.cluster.ServerCPU() - db0
	rel.stop(b)
	left := checkSettled(b, tb, rel, mode, n)
	lat := make([]time.Duration, 0, n)
	for id, committed := range commits {
		arrived, ok := s.arrival(id)
		if !ok {
			b.Fatalf("event %s settled but never published", id)
		}
		lat = append(lat, arrived.Sub(committed))
	}
	slices.Sort(lat)
	r := latencyRun{events: n, left: left, behind: behind, p50: pct(lat, 0.50), p99: pct(lat, 0.99), max: lat[len(lat)-1], db: db}
	if n > 1 {
		r.rate = float64(n-1) / last.Sub(first).Seconds()
	}
	return r
}

// pct is the p-th quantile of sorted s (nearest rank).
func pct(s []time.Duration, p float64) time.Duration {
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// heldRound is one backlog of the held phase.
type heldRound struct {
	// rate is events per second from the first insert to the last
	// settle.
	rate float64
	// tail is from the last insert's return to the last settle.
	tail time.Duration
	// db is the server's CPU per event, the inserts included.
	db float64
}

func slowest(rounds []heldRound) heldRound {
	var s heldRound
	for i, r := range rounds {
		if i == 0 || r.rate < s.rate {
			s = r
		}
	}
	return s
}

// runHeld relays heldRounds backlogs of -events with CAPTURE=wal on one
// table, each inserted (in transactions of -wal.txn) while the relay
// streams, with a VACUUM between rounds as autovacuum would run one (the
// cluster runs without it). With held, a REPEATABLE READ transaction holds
// its snapshot for the whole run, so that no row version the relay made
// dead can be removed or pruned: what it costs the claims is in
// BenchmarkHorizon; here the question is whether the log reader, whose
// settles find rows by their key, slows down round after round.
func (w *walBench) runHeld(b *testing.B, held bool) (rounds []heldRound, left int) {
	b.Helper()
	ctx := context.Background()
	tb, pub := w.table(b, true)
	p := w.newProducer(b, tb)
	w.quiesce(b, tb)
	rel := w.startRelay(b, tb, pub, walMark, newSink(b, false))
	if held {
		conn, err := pgx.Connect(ctx, w.url())
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
			b.Fatal(err)
		}
		// The snapshot is taken by the first query, not by BEGIN.
		if _, err := conn.Exec(ctx, "SELECT count(*) FROM "+tb.Name); err != nil {
			b.Fatal(err)
		}
	}
	for round := range heldRounds {
		txns := prepareTxns(b, w.n, w.per)
		began := time.Now()
		db0 := w.cluster.ServerCPU()
		p.write(b, txns)
		written := time.Now()
		at := rel.settled.await(b, int64((round+1)*w.n))
		w.walCaughtUp(b, tb)
		r := heldRound{rate: float64(w.n) / at.Sub(began).Seconds(), tail: max(at.Sub(written), 0),
			db: perEvent(w.cluster.ServerCPU()-db0, w.n)}
		rounds = append(rounds, r)
		b.Logf("round %d: %.0f events/s, last settle %s after the last insert, database %.1f µs/event (inserts included)",
			round+1, r.rate, r.tail.Round(time.Millisecond), r.db)
		tb.Exec(b, "VACUUM {{table}}")
		w.walCaughtUp(b, tb)
	}
	rel.stop(b)
	return rounds, checkSettled(b, tb, rel, walMark, heldRounds*w.n)
}

// print writes the table of every phase that ran.
func (w *walBench) print(out *os.File) {
	var sb strings.Builder
	f := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	anyLeft := false
	f("\nBenchmarkWAL: CAPTURE=poll vs CAPTURE=wal on one private cluster (wal_level=logical for both), null publisher\n")
	f("batch %d, %d in flight; CPU of the whole database server (all its processes) and of this process\n", *benchBatch, *benchInFlight)
	if w.producer != nil || len(w.cost) > 0 {
		f("\n1. Cost: %d events, %d per producer transaction, µs per event (see costRun for what is subtracted)\n", w.n, w.per)
		f("  %-14s %9s %8s %9s %11s %10s %7s %5s\n", "run", "events/s", "tail", "db-window", "db-relaying", "relay-self", "vacuum", "left")
		if p := w.producer; p != nil {
			f("  %-14s %9.0f %8s %9.1f %11s %10.1f %7.1f %5s  inserts alone, no relay (self: sending them)\n",
				"producer-only", p.rate(), "-", perEvent(p.db, p.events), "-", perEvent(p.self, p.events), perEvent(p.vacuum, p.events), "-")
		}
		for _, m := range []relayMode{pollMark, pollDelete, walMark, walDelete} {
			r, ok := w.cost[m.name]
			if !ok {
				continue
			}
			relDB, self := "n/a", "n/a"
			if d, ok := w.relayingDB(m, r); ok {
				relDB = fmt.Sprintf("%.1f", d)
			}
			if d, ok := w.relayingSelf(m, r); ok {
				self = fmt.Sprintf("%.1f", d)
			}
			tail, note := "-", "drains a backlog inserted before"
			if m.wal {
				tail = r.tail.Round(time.Millisecond).String()
				note = "inserted while streaming; relaying = window − producer-only"
			}
			anyLeft = anyLeft || r.left > 0
			f("  %-14s %9.0f %8s %9.1f %11s %10s %7.1f %5d  %s\n",
				m.name, r.rate(), tail, perEvent(r.db, r.events), relDB, self, perEvent(r.vacuum, r.events), r.left, note)
		}
		for _, settle := range []string{"mark", "delete"} {
			poll, okP := w.cost["poll-"+settle]
			wal, okW := w.cost["wal-"+settle]
			if !okP || !okW {
				continue
			}
			pd, _ := w.relayingDB(relayMode{}, poll)
			wd, ok := w.relayingDB(relayMode{wal: true}, wal)
			if !ok || pd <= 0 {
				continue
			}
			ps, _ := w.relayingSelf(relayMode{}, poll)
			ws, _ := w.relayingSelf(relayMode{wal: true}, wal)
			f("  %-6s relaying db cost wal/poll = %.2f (%.1f / %.1f µs/event); relay CPU wal/poll = %.2f (%.1f / %.1f µs/event)\n",
				settle+":", wd/pd, wd, pd, ws/max(ps, 1e-9), ws, ps)
		}
	}
	if len(w.cost) > 0 {
		f("\n2. Relay CPU per event into null:// (this process, getrusage, over the cost runs' windows)\n")
		for _, m := range []relayMode{pollMark, pollDelete, walMark, walDelete} {
			r, ok := w.cost[m.name]
			if !ok {
				continue
			}
			if d, ok := w.relayingSelf(m, r); ok {
				how := "the drain"
				if m.wal {
					how = fmt.Sprintf("window %.1f − producer-only %.1f", perEvent(r.self, r.events), perEvent(w.producer.self, w.producer.events))
				}
				f("  %-12s %6.1f µs/event  (%s)\n", m.name, d, how)
			}
		}
	}
	if len(w.relayCPU) > 0 {
		f("\n2b. Relay CPU per event into null://, the events inserted by the server itself (no producer in this process)\n")
		for _, m := range []relayMode{pollMark, walMark} {
			if d, ok := w.relayCPU[m.name]; ok {
				f("  %-12s %5.1f µs/event\n", m.name, perEvent(d, w.n))
			}
		}
	}
	if len(w.sustained) > 0 {
		f("\n3. Sustained: %d producers, one event per transaction, as fast as they can for %s\n", sustainedProducers, sustainedDuration())
		f("  %-10s %10s %11s %11s %9s %9s %9s %9s %5s %9s\n", "mode", "produced/s", "delivered/s", "backlog@25%", "@50%", "@75%", "@100%", "drained", "left", "db-µs/ev")
		for _, m := range []relayMode{pollMark, walMark} {
			if r, ok := w.sustained[m.name]; ok {
				anyLeft = anyLeft || r.left > 0
				f("  %-10s %10.0f %11.0f %11d %9d %9d %9d %9s %5d %9.1f\n", m.name, r.producedRate(), r.deliveredRate(),
					r.backlog[0], r.backlog[1], r.backlog[2], r.backlog[3], r.drained.Round(time.Millisecond), r.left,
					float64(r.db.Microseconds())/float64(max(r.total, 1)))
			}
		}
		f("  backlog = committed − settled (flat: the relay keeps up); drained = last settle after production ended;\n")
		f("  db-µs/ev = the server's CPU per event, inserts included (the same for both modes), while producing and draining\n")
	}
	if len(w.latency) > 0 {
		f("\n4. Latency: one event per transaction at %d/s, COMMIT returned → arrival at the publisher\n", *walLatencyRate)
		f("  %-13s %7s %9s %9s %9s %9s %8s %5s %9s %11s\n", "mode", "events", "commits/s", "p50", "p99", "max", "behind", "left", "db-µs/ev", "relaying")
		prod, hasProd := w.latency[producerOnly.name]
		perEv := func(r latencyRun) float64 { return float64(r.db.Microseconds()) / float64(max(r.events, 1)) }
		if hasProd {
			f("  %-13s %7d %9.0f %9s %9s %9s %8s %5s %9.1f %11s\n", producerOnly.name, prod.events, prod.rate,
				"-", "-", "-", prod.behind.Round(time.Millisecond), "-", perEv(prod), "-")
		}
		relaying := map[string]float64{}
		for _, m := range []relayMode{pollMark, walMark} {
			if r, ok := w.latency[m.name]; ok {
				anyLeft = anyLeft || r.left > 0
				rel := "-"
				if hasProd {
					relaying[m.name] = perEv(r) - perEv(prod)
					rel = fmt.Sprintf("%.1f", relaying[m.name])
				}
				f("  %-13s %7d %9.0f %9s %9s %9s %8s %5d %9.1f %11s\n", m.name, r.events, r.rate,
					r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.max.Round(10*time.Microsecond),
					r.behind.Round(time.Millisecond), r.left, perEv(r), rel)
			}
		}
		if p, ok := relaying[pollMark.name]; ok && p > 0 {
			if wl, ok := relaying[walMark.name]; ok {
				f("  relaying db cost at this rate wal/poll = %.2f (%.1f / %.1f µs/event)\n", wl/p, wl, p)
			}
		}
		f("  behind = the furthest a commit started behind its schedule (large: the producers missed the rate);\n")
		f("  db-µs/ev = the server's CPU per event over the run, inserts included; relaying = that − producer-only's\n")
	}
	if len(w.held) > 0 {
		f("\n5. Held snapshot, CAPTURE=wal: %d rounds of %d events inserted while streaming, VACUUM between rounds\n", heldRounds, w.n)
		for _, name := range []string{"unheld", "held"} {
			rounds, ok := w.held[name]
			if !ok {
				continue
			}
			f("  %-7s", name)
			for i, r := range rounds {
				f("  round %d: %6.0f events/s, tail %5s, db %5.1f µs/ev;", i+1, r.rate, r.tail.Round(time.Millisecond), r.db)
			}
			anyLeft = anyLeft || w.heldLeft[name] > 0
			f("  left %d\n", w.heldLeft[name])
		}
		if u, ok := w.held["unheld"]; ok {
			if h, ok := w.held["held"]; ok {
				f("  slowest round held/unheld = %.2f (db µs/event include the inserts)\n", slowest(h).rate/slowest(u).rate)
			}
		}
	}
	if anyLeft {
		f("\nleft = rows still PENDING after the run although the relay published them and counted them settled:\n" +
			"its settle statement found none of them (see rowCounter); the relay did not notice.\n")
	}
	fmt.Fprint(out, sb.String())
}
