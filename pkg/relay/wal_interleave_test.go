package relay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/interleave"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// TestWALClaimsUnderRandomInterleavings checks CAPTURE=wal's promise
// (docs/architecture.md, "Log-based capture") on a quiet private cluster
// with logical WAL, sweeps off, while an operator changes the publication
// under the relays. Producers write transactions of one row to a few
// hundred (more than a batch), held open a while, some rolled back, some
// scheduled, some applied as a replica applies them, some whose writer id
// an UPDATE rewrites, some committed in two phases. Relays, one or two on
// one slot, deliver, fail (retryable and permanent) and are stopped and
// started again; a relay whose capture cannot start (its publication gone)
// exits, as the process does, and is started again. Meanwhile the
// operator drops the table from the publication and adds it back, drops
// the publication and makes it again as `relay-cli migrate --capture wal`
// does, alters what it publishes and back, and ends the walsender. At the
// end it checks:
//   - every committed event was delivered, and no rolled-back one sent;
//   - an event that fails for good is DEAD, and only those are;
//   - no event was delivered twice (every stop is a clean one);
//   - under ORDERING=partition, each transaction's events under its key
//     were delivered in the order written;
//   - every event without a key was first sent within walInterleaveBound
//     of when it was both committed and due, however the publication
//     stood (a keyed one waits, rightly, behind its key's earlier events).
//
// INTERLEAVE_SEED and INTERLEAVE_DURATION are as for the storage drivers'
// test: `make fuzz CAPTURE=wal DURATION=10m SEED=…`.
func TestWALClaimsUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	var w *walTable
	runInterleaving(t, interleaving{
		leaseModes: []relay.LeaseMode{relay.LeaseAuto, relay.LeaseLock, relay.LeaseStatus},
		setUp:      func() deadReader { w = newWALTable(t, "max_prepared_transactions = 10"); return w },
		produce: func(m *walModel, r *rand.Rand) error {
			return walProduceOne(context.Background(), w, m, r)
		},
		operate: func(m *walModel, r *rand.Rand, stop <-chan struct{}) { operate(t, w, m, r, stop) },
		cycle: func(cfg relay.Config, pub publisher.Publisher, r *rand.Rand, stop <-chan struct{}) {
			cycleRelays(t, w, cfg, pub, r, stop)
		},
	})
}

// interleaving is what a randomized capture test runs: its table, and
// how producers write, how an operator disturbs the log, and how relays
// run on it.
type interleaving struct {
	// leaseModes the relays may be given (lock is unordered only).
	leaseModes []relay.LeaseMode
	setUp      func() deadReader
	// produce writes one transaction; an error ends the producer.
	produce func(m *walModel, r *rand.Rand) error
	operate func(m *walModel, r *rand.Rand, stop <-chan struct{})
	cycle   func(cfg relay.Config, pub publisher.Publisher, r *rand.Rand, stop <-chan struct{})
}

// runInterleaving draws the run's choices from its seed, runs three
// producers, the operator and one or two cycled relays for the run's
// duration, waits up to 90 s for every committed event to be delivered,
// and checks the model.
func runInterleaving(t *testing.T, in interleaving) {
	seed := interleave.Seed(t)
	duration := interleave.Duration(t, "INTERLEAVE_DURATION", 6*time.Second)
	choose := rand.New(rand.NewPCG(seed, 0))
	m := &walModel{committed: map[uuid.UUID]walWritten{}, rolledBack: map[uuid.UUID]bool{}, poison: map[uuid.UUID]bool{}, kinds: map[string]int{}}
	m.ordered = choose.IntN(2) == 0
	relayCount := 1 + choose.IntN(2)
	mode := in.leaseModes[choose.IntN(len(in.leaseModes))]
	if m.ordered && mode == relay.LeaseLock {
		mode = relay.LeaseStatus // lock is unordered only
	}
	batch := []int{1, 2, 7, 100}[choose.IntN(4)]
	t.Logf("%d relays, ordered %v, lease mode %s, batch %d", relayCount, m.ordered, mode, batch)

	dead := in.setUp()
	pub := newFuzzPublisher(rand.New(rand.NewPCG(seed, 1)))
	cfg := relay.Config{
		BatchSize:     batch,
		LeaseMode:     mode,
		SweepInterval: 24 * time.Hour,
		Retry:         relay.RetryPolicy{MaxAttempts: 25, BaseDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: relay.NoJitter},
	}
	if m.ordered {
		cfg.Ordering = storage.OrderingPartition
	}

	stop := make(chan struct{})
	var producers, rest sync.WaitGroup
	for i := range 3 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			r := rand.New(rand.NewPCG(seed, uint64(10+i)))
			for !stopped(stop) {
				if err := in.produce(m, r); err != nil {
					t.Errorf("producer %d: %v", i, err)
					return
				}
				pause(r, stop, 30*time.Millisecond)
			}
		}()
	}
	producers.Add(1)
	go func() {
		defer producers.Done()
		in.operate(m, rand.New(rand.NewPCG(seed, 2)), stop)
	}()
	relaysStop := make(chan struct{})
	for i := range relayCount {
		rest.Add(1)
		go func() {
			defer rest.Done()
			in.cycle(cfg, pub, rand.New(rand.NewPCG(seed, uint64(20+i))), relaysStop)
		}()
	}

	time.Sleep(duration)
	close(stop)
	producers.Wait()
	// The operator has put the log back: everything committed must be
	// delivered while the relays go on.
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && len(m.undelivered(dead, pub)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	close(relaysStop)
	rest.Wait()
	m.check(t, dead, pub)
}

// walInterleaveBound is how long after an event is both committed and due
// its first send may come: the publication check (500 ms here), making
// the slot anew, a relay's restart after its capture exits, and a busy
// machine's stalls; far below a sweep (off here).
const walInterleaveBound = 10 * time.Second

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// pause waits up to most, or until stop.
func pause(r *rand.Rand, stop <-chan struct{}, most time.Duration) {
	select {
	case <-stop:
	case <-time.After(time.Duration(r.Int64N(int64(most) + 1))):
	}
}

// walModel is what the producers committed and rolled back.
type walModel struct {
	ordered bool

	mu         sync.Mutex
	committed  map[uuid.UUID]walWritten
	rolledBack map[uuid.UUID]bool
	poison     map[uuid.UUID]bool // fails for good: must end DEAD
	kinds      map[string]int
	actions    []string
	txns       int
}

type walWritten struct {
	ready      time.Time // committed and due
	how        string    // how its transaction wrote it
	key        string
	txn, place int
}

func (m *walModel) kind(k string) {
	m.mu.Lock()
	m.kinds[k]++
	m.mu.Unlock()
}

func (m *walModel) action(a string) {
	m.mu.Lock()
	m.actions = append(m.actions, a)
	m.mu.Unlock()
}

func (m *walModel) commit(ids []uuid.UUID, due map[uuid.UUID]time.Time, how, key string, poison bool) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.txns++
	for i, id := range ids {
		m.committed[id] = walWritten{ready: later(now, due[id]), how: how, key: key, txn: m.txns, place: i}
		if poison {
			m.poison[id] = true
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// undelivered are the committed events not yet in their final state:
// delivered, or DEAD for a poison one.
func (m *walModel) undelivered(w deadReader, pub *fuzzPublisher) []uuid.UUID {
	m.mu.Lock()
	defer m.mu.Unlock()
	var dead map[uuid.UUID]bool
	if len(m.poison) > 0 {
		dead = w.deadIDs()
	}
	var left []uuid.UUID
	for id := range m.committed {
		if m.poison[id] && !dead[id] || !m.poison[id] && pub.sends(id) == 0 {
			left = append(left, id)
		}
	}
	return left
}

// deadReader reads which events of the table are DEAD.
type deadReader interface{ deadIDs() map[uuid.UUID]bool }

func (m *walModel) check(t *testing.T, w deadReader, pub *fuzzPublisher) {
	t.Helper()
	m.mu.Lock()
	t.Logf("%d events in %d transactions committed, %d rolled back, %d poison; writes %v; operator %s",
		len(m.committed), m.txns, len(m.rolledBack), len(m.poison), m.kinds, strings.Join(m.actions, ", "))
	m.mu.Unlock()
	var problems []string
	if left := m.undelivered(w, pub); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("%d committed events never delivered, e.g. %v", len(left), left[:min(3, len(left))]))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dead := w.deadIDs()
	var worst, worstKeyed time.Duration
	byTxn := map[int][]uuid.UUID{}
	for id, wr := range m.committed {
		if n := pub.sends(id); n > 1 {
			problems = append(problems, fmt.Sprintf("event %s (%s) delivered %d times", id, wr.how, n))
		}
		if dead[id] != m.poison[id] {
			problems = append(problems, fmt.Sprintf("event %s: DEAD %v, poison %v", id, dead[id], m.poison[id]))
		}
		if first, ok := pub.firstTry(id); ok && wr.key != "" {
			worstKeyed = max(worstKeyed, first.Sub(wr.ready))
		} else if ok {
			worst = max(worst, first.Sub(wr.ready))
			if late := first.Sub(wr.ready); late > walInterleaveBound {
				problems = append(problems, fmt.Sprintf("event %s (%s) first sent %s after it was committed and due", id, wr.how, late.Round(time.Millisecond)))
			}
		}
		if wr.key != "" {
			byTxn[wr.txn] = append(byTxn[wr.txn], id)
		}
	}
	for id := range m.rolledBack {
		if pub.tries(id) > 0 {
			problems = append(problems, fmt.Sprintf("rolled-back event %s was sent", id))
		}
	}
	for _, ids := range byTxn {
		slices.SortFunc(ids, func(a, b uuid.UUID) int { return m.committed[a].place - m.committed[b].place })
		for i := 1; i < len(ids); i++ {
			if pub.order(ids[i]) < pub.order(ids[i-1]) {
				problems = append(problems, fmt.Sprintf("key %s: event %d of its transaction delivered before event %d",
					m.committed[ids[i]].key, m.committed[ids[i]].place, m.committed[ids[i-1]].place))
				break
			}
		}
	}
	t.Logf("latest first send: %s after committed and due; of a keyed event, which waits behind its key, %s",
		worst.Round(time.Millisecond), worstKeyed.Round(time.Millisecond))
	if len(problems) > 0 {
		t.Errorf("%d problems:\n%s", len(problems), strings.Join(problems[:min(20, len(problems))], "\n"))
	}
}

// deadIDs are the table's DEAD events.
func (w *walTable) deadIDs() map[uuid.UUID]bool {
	rows, err := w.Pool().Query(context.Background(), "SELECT event_id FROM "+w.Name+" WHERE status = 'DEAD'")
	if err != nil {
		return nil
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil
	}
	dead := map[uuid.UUID]bool{}
	for _, id := range ids {
		dead[id] = true
	}
	return dead
}

// walProduceOne writes one transaction.
func walProduceOne(ctx context.Context, w *walTable, m *walModel, r *rand.Rand) error {
	conn, err := w.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	n := 1 + r.IntN(5)
	if r.IntN(20) == 0 {
		n = 50 + r.IntN(250)
	}
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	key := ""
	if m.ordered && r.IntN(4) != 0 {
		key = fmt.Sprintf("k%d", r.IntN(5))
	}
	// A poison event fails at the broker for good; under ordering it
	// would block or skip its key, so only unkeyed ones are.
	poison := key == "" && r.IntN(25) == 0
	typ := "e"
	if poison {
		typ = "poison"
	}
	available := "now()"
	if r.IntN(8) == 0 {
		available = fmt.Sprintf("now() + interval '%d milliseconds'", 100+r.IntN(1500))
	}
	hold := time.Duration(0)
	if r.IntN(3) == 0 {
		hold = time.Duration(r.IntN(1500)) * time.Millisecond
	}
	writer := pgtest.Writers[r.IntN(len(pgtest.Writers))]
	how := string(writer) + "write"
	m.kind(how)
	if err := writer.Begin(ctx, tx); err != nil {
		return err
	}
	foreign := pgtest.Foreign[r.IntN(len(pgtest.Foreign))]
	writerCol, writerVal := "", ""
	if writer == pgtest.WriterReplica {
		writerCol, writerVal = ", writer_xid", ", "+foreign+"::xid8"
	}
	if r.IntN(2) == 0 {
		how += " in one statement"
		// One statement for all rows.
		if _, err := tx.Exec(ctx, "INSERT INTO "+w.Name+" (event_id, event_type, payload, available_at, partition_key"+writerCol+
			") SELECT id, '"+typ+"', 'x', "+available+", '"+key+"'"+writerVal+
			" FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, n) ORDER BY n", ids); err != nil {
			return err
		}
	} else {
		for i, id := range ids {
			if i > 0 && hold > 0 && n < 10 {
				time.Sleep(hold / time.Duration(n))
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+w.Name+" (event_id, event_type, payload, available_at, partition_key"+writerCol+
				") VALUES ($1, '"+typ+"', 'x', "+available+", '"+key+"'"+writerVal+")", id); err != nil {
				return err
			}
		}
	}
	due, err := pgtest.DueTimes(ctx, tx, w.Name, ids)
	if err != nil {
		return err
	}
	if err := writer.Rewrite(ctx, tx, w.Name, ids, foreign); err != nil {
		return err
	}
	rollBack := r.IntN(10) == 0
	if err := writer.End(ctx, conn, tx, "p"+ids[0].String(), hold, rollBack); err != nil {
		return err
	}
	if rollBack {
		m.mu.Lock()
		for _, id := range ids {
			m.rolledBack[id] = true
		}
		m.mu.Unlock()
		return nil
	}
	m.commit(ids, due, fmt.Sprintf("%s, %d rows, key %q, due %s, held %s", how, n, key, available, hold), key, poison)
	return nil
}

// operate changes the publication under the relays until stop, and puts
// it back as it was before returning.
func operate(t *testing.T, w *walTable, m *walModel, r *rand.Rand, stop <-chan struct{}) {
	ctx := context.Background()
	pubCfg := w.WAL(pgwal.Config{Publication: "outbox_relay_events"})
	exec := func(sql string) {
		if _, err := w.Pool().Exec(ctx, sql); err != nil {
			t.Errorf("operator: %s: %v", sql, err)
		}
	}
	for !stopped(stop) {
		pause(r, stop, 2500*time.Millisecond)
		out := time.Duration(r.IntN(2000)) * time.Millisecond
		switch r.IntN(5) {
		case 0:
			m.action(fmt.Sprintf("table out %s", out))
			exec("ALTER PUBLICATION outbox_relay_events DROP TABLE " + w.Name)
			time.Sleep(out)
			exec("ALTER PUBLICATION outbox_relay_events ADD TABLE " + w.Name)
		case 1:
			m.action(fmt.Sprintf("publication dropped %s", out))
			exec("DROP PUBLICATION outbox_relay_events")
			time.Sleep(out)
			if err := pgwal.CreatePublication(ctx, pubCfg); err != nil {
				t.Errorf("operator: make the publication again: %v", err)
			}
		case 2:
			m.action(fmt.Sprintf("inserts unpublished %s", out))
			exec("ALTER PUBLICATION outbox_relay_events SET (publish = 'update')")
			time.Sleep(out)
			exec("ALTER PUBLICATION outbox_relay_events SET (publish = 'insert')")
		case 3:
			m.action("altered to the same")
			exec("ALTER PUBLICATION outbox_relay_events SET (publish = 'insert', publish_via_partition_root = true)")
		case 4:
			// Streaming, or making the slot: the claims take the
			// events meanwhile, as no stream holds the log lock.
			m.action("walsender ended")
			exec("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '" + w.slot + "' AND active_pid IS NOT NULL")
		}
	}
}

// cycleRelays runs one relay at a time in its slot until stop, each
// stopped cleanly after a while and started again, as a rolling restart
// does. A relay whose capture ends (the publication gone when it starts)
// stops, as the process exits, and starts again.
func cycleRelays(t *testing.T, w *walTable, cfg relay.Config, pub publisher.Publisher, r *rand.Rand, stop <-chan struct{}) {
	for !stopped(stop) {
		rl, err := startCycled(w, cfg, pub)
		if err != nil {
			t.Errorf("start a relay: %v", err)
			return
		}
		life := time.Duration(500+r.IntN(4500)) * time.Millisecond
		select {
		case <-stop:
		case <-rl.captureDone:
		case <-time.After(life):
		}
		if err := rl.stop(t); err != nil {
			var setup *pgwal.SetupError
			if !errors.As(err, &setup) {
				t.Errorf("relay ended with %v", err)
			}
		}
		pause(r, stop, 300*time.Millisecond)
	}
}

// cycledRelay is a walRelay whose capture's end is seen.
type cycledRelay struct {
	*walRelay
	captureDone chan struct{}
}

func startCycled(w *walTable, cfg relay.Config, pub publisher.Publisher) (cycledRelay, error) {
	cfg.RelayID = "wal-" + uuid.NewString()[:8]
	cfg.PollInterval = 50 * time.Millisecond
	cfg.Logger = testLogger()
	e, err := relay.New(cfg, w.Store, pub)
	if err != nil {
		return cycledRelay{}, err
	}
	src := pgwal.Source{Config: w.WAL(pgwal.Config{Slot: w.slot, Publication: "outbox_relay_events",
		StatusInterval: 100 * time.Millisecond, Heartbeat: 200 * time.Millisecond,
		PublicationCheck: 500 * time.Millisecond, Logger: cfg.Logger})}
	return runCapture(e, src, w.Store, relay.CaptureConfig{StandbyRetry: 100 * time.Millisecond})
}

// fuzzPublisher records every try and delivery of every event, in order,
// and fails some: a poison event always, for good; any other now and then,
// retryably, and more rarely as a broker away.
type fuzzPublisher struct {
	mu        sync.Mutex
	r         *rand.Rand
	first     map[uuid.UUID]time.Time
	attempts  map[uuid.UUID]int
	delivered map[uuid.UUID]int
	seq       map[uuid.UUID]int // place of the first delivery
	n         int
}

func newFuzzPublisher(r *rand.Rand) *fuzzPublisher {
	return &fuzzPublisher{r: r, first: map[uuid.UUID]time.Time{}, attempts: map[uuid.UUID]int{},
		delivered: map[uuid.UUID]int{}, seq: map[uuid.UUID]int{}}
}

func (p *fuzzPublisher) Publish(_ context.Context, batch []outbox.Event) []error {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(batch))
	for i, ev := range batch {
		if _, ok := p.first[ev.ID]; !ok {
			p.first[ev.ID] = now
		}
		p.attempts[ev.ID]++
		switch {
		case ev.Type == "poison":
			errs[i] = publisher.Permanent(errors.New("poison"))
		case p.r.IntN(30) == 0:
			errs[i] = errors.New("try again")
		case p.r.IntN(200) == 0:
			errs[i] = publisher.Unavailable(errors.New("broker away a moment"))
		default:
			if p.delivered[ev.ID] == 0 {
				p.n++
				p.seq[ev.ID] = p.n
			}
			p.delivered[ev.ID]++
		}
	}
	return errs
}

func (p *fuzzPublisher) Ping(context.Context) error  { return nil }
func (p *fuzzPublisher) Close(context.Context) error { return nil }

func (p *fuzzPublisher) sends(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delivered[id]
}

func (p *fuzzPublisher) tries(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts[id]
}

func (p *fuzzPublisher) firstTry(id uuid.UUID) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.first[id]
	return at, ok
}

func (p *fuzzPublisher) order(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq[id]
}
