package postgres_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/interleave"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// TestClaimsUnderRandomInterleavings checks the claim frontier's promise
// (docs/architecture.md, "The claim frontier") against a model, on a quiet
// private cluster, with sweeps off. Producers write in every way a row is
// written (one row, many rows, INSERT … SELECT, COPY), in transactions
// held open for 0–3 s, some rolled back, some with a slow commit, with
// created_at behind and ahead of the clock and scheduled available_at.
// Relays claim leased and held, deliver, release, fail (retryable and
// permanent), and are killed and started again; retry-dead and the reaper
// run meanwhile. At the end it checks:
//   - every committed event was delivered, and no rolled-back one claimed;
//   - no event was claimed before it was due (its available_at against
//     the claim's own now());
//   - no event was delivered twice unless a relay that claimed it was killed;
//   - every event was first claimed within interleaveBound of when it was
//     both committed and due.
//
// INTERLEAVE_SEED picks the schedule (each goroutine draws its choices from
// its own generator seeded from it; the server decides the interleaving),
// INTERLEAVE_DURATION how long producers write: `make fuzz DURATION=10m
// SEED=…` sets both. The seed is printed first.
func TestClaimsUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	runInterleavings(t, false)
}

// TestOrderedClaimsUnderRandomInterleavings is the same under
// ORDERING=partition (docs/architecture.md, "Ordered claims"): producers
// write most transactions' events under one partition key each, relays
// claim ordered and leased, with ORDERING_ON_DEAD skip or block as the
// seed draws. It also checks that no event was claimed while an event
// its transaction wrote before it under the same key was not yet
// delivered (or, under skip, dead): with the relay's claim and the
// settle timed from outside, only a claim that ended before any such
// settle began counts. The time bound applies to events without a key
// alone: a keyed one waits, rightly, behind its key's earlier events.
func TestOrderedClaimsUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	runInterleavings(t, true)
}

func runInterleavings(t *testing.T, ordered bool) {
	seed := interleave.Seed(t)
	duration := interleave.Duration(t, "INTERLEAVE_DURATION", 4*time.Second)
	m := interleave.New()
	if ordered {
		m.Ordered = true
		m.OnDead = []storage.DeadPolicy{storage.DeadSkip, storage.DeadBlock}[rand.New(rand.NewPCG(seed, 1)).IntN(2)]
		t.Logf("ORDERING=partition, ORDERING_ON_DEAD=%s", m.OnDead)
	}

	c := pgcluster.Start(t, pgcluster.Options{Settings: []string{"max_prepared_transactions = 10"}})
	tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
	slowCommits(t, tb, "INSERT", 0.3)

	stop := make(chan struct{})
	var producers, relays sync.WaitGroup
	// One relay sometimes: others' claims and restarts, which read from
	// the beginning, would hide a row one relay's frontier passed.
	const producerCount = 3
	relayCount := 1 + rand.New(rand.NewPCG(seed, 0)).IntN(3)
	t.Logf("%d relays", relayCount)
	for i := range producerCount {
		producers.Add(1)
		go func() {
			defer producers.Done()
			produce(t, tb, m, rand.New(rand.NewPCG(seed, uint64(i))), stop)
		}()
	}
	// A steady writer: one-row transactions back to back in busy spells,
	// nothing in quiet ones, so that the transactions above are held both
	// while the database is busy and while it is quiet.
	producers.Add(1)
	go func() {
		defer producers.Done()
		steady(t, tb, m, rand.New(rand.NewPCG(seed, 99)), stop)
	}()
	relaysStop := make(chan struct{})
	for i := range relayCount {
		relays.Add(1)
		go func() {
			defer relays.Done()
			runRelays(t, tb, m, i, rand.New(rand.NewPCG(seed, uint64(100+i))), relaysStop)
		}()
	}
	relays.Add(1)
	go func() {
		defer relays.Done()
		runMaintenance(t, tb, relaysStop)
	}()

	time.Sleep(duration)
	close(stop)
	producers.Wait()
	// Everything committed must be delivered: the relays go on until it
	// is, or the deadline.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && undelivered(t, tb, m) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	close(relaysStop)
	relays.Wait()
	m.Check(t, undelivered(t, tb, m), interleaveBound)
}

// interleaveBound is how long after an event is both committed and due
// its first claim may come: relays claim every few milliseconds, so it is
// the claim, a publish and a busy machine's stalls, far below a sweep.
const interleaveBound = 3 * time.Second

// produce writes transactions until stop.
func produce(t *testing.T, tb *pgtest.Table, m *interleave.Model, r *rand.Rand, stop <-chan struct{}) {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if err := produceOne(ctx, tb, m, r); err != nil {
			t.Errorf("producer: %v", err)
			return
		}
		if r.IntN(4) == 0 {
			// A quiet spell: nothing else commits meanwhile.
			time.Sleep(time.Duration(r.IntN(400)) * time.Millisecond)
		}
	}
}

// steady writes one-row transactions without pause for busy spells of up
// to a second, with quiet spells between.
func steady(t *testing.T, tb *pgtest.Table, m *interleave.Model, r *rand.Rand, stop <-chan struct{}) {
	ctx := context.Background()
	for {
		busyUntil := time.Now().Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		for time.Now().Before(busyUntil) {
			select {
			case <-stop:
				return
			default:
			}
			var id uuid.UUID
			var due time.Time
			if err := tb.Store.Pool().QueryRow(ctx, "INSERT INTO "+tb.Name+" (event_type, payload) VALUES ('steady', 'x') RETURNING event_id, available_at").
				Scan(&id, &due); err != nil {
				t.Errorf("steady producer: %v", err)
				return
			}
			m.Committed([]uuid.UUID{id}, map[uuid.UUID]time.Time{id: due}, "", time.Now())
			m.Produced("steady")
			// At most about 500 a second: the bound checks when events
			// are claimed, not how fast the smallest batches drain.
			time.Sleep(2 * time.Millisecond)
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(r.IntN(1000)) * time.Millisecond):
		}
	}
}

func produceOne(ctx context.Context, tb *pgtest.Table, m *interleave.Model, r *rand.Rand) error {
	conn, err := tb.Store.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	clientClock := time.Now()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	n := 1 + r.IntN(4)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	typ := "e"
	if r.IntN(10) == 0 {
		typ = "slow"
	}
	created := []string{"now()", "now() - interval '1 second'", "$1::timestamptz", "now() + interval '1 second'"}[r.IntN(4)]
	available := "now()"
	if r.IntN(5) == 0 {
		available = fmt.Sprintf("now() + interval '%d milliseconds'", 100+r.IntN(700))
	}
	hold := time.Duration(0)
	if r.IntN(3) == 0 {
		hold = time.Duration(r.IntN(3000)) * time.Millisecond
	}
	kind := []string{"insert", "values", "select", "copy"}[r.IntN(4)]
	// How the transaction ends, and what it does to its rows' writer
	// besides inserting them: nothing mostly; an UPDATE of writer_xid to
	// a value of no transaction of this cluster's, far behind or far
	// ahead; rows applied as a logical replica applies them (its triggers
	// off but the ALWAYS ones, the publisher's ids in the column); or a
	// two-phase commit, which sends no notification.
	writer := pgtest.Writers[r.IntN(len(pgtest.Writers))]
	if writer != pgtest.WriterPlain {
		m.Produced(string(writer))
	}
	if err := writer.Begin(ctx, tx); err != nil {
		return err
	}
	// Under ORDERING=partition most transactions write under one key, of
	// a few: their events must go out in the order written.
	key := ""
	if m.Ordered && r.IntN(4) != 0 {
		key = fmt.Sprintf("k%d", r.IntN(6))
	}
	// The writer a replica's row carries: another cluster's id.
	foreign := pgtest.Foreign[r.IntN(len(pgtest.Foreign))]
	row := func(i int) string {
		if writer == pgtest.WriterReplica {
			return fmt.Sprintf("('%s'::uuid, '%s', 'x', %s, %s, '%s', %s::xid8)", ids[i], typ, created, available, key, foreign)
		}
		return fmt.Sprintf("('%s'::uuid, '%s', 'x', %s, %s, '%s')", ids[i], typ, created, available, key)
	}
	cols := "(event_id, event_type, payload, created_at, available_at, partition_key)"
	if writer == pgtest.WriterReplica {
		kind = "values"
		cols = "(event_id, event_type, payload, created_at, available_at, partition_key, writer_xid)"
	}
	m.Produced(kind)
	// $1 is the client's clock before BEGIN, as an ORM stamps created_at.
	args := []any{clientClock}
	switch kind {
	case "insert":
		for i := range ids {
			if i > 0 && hold > 0 {
				time.Sleep(hold / time.Duration(n))
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+tb.Name+" "+cols+" VALUES "+row(i)+" RETURNING $1::timestamptz", args...); err != nil {
				return err
			}
		}
	case "values":
		var rows []string
		for i := range ids {
			rows = append(rows, row(i))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+tb.Name+" "+cols+" VALUES "+strings.Join(rows, ", ")+" RETURNING $1::timestamptz", args...); err != nil {
			return err
		}
	case "select":
		if _, err := tx.Exec(ctx, "INSERT INTO "+tb.Name+" "+cols+
			" SELECT id, '"+typ+"', 'x', "+created+", "+available+", '"+key+"' FROM unnest($2::uuid[]) WITH ORDINALITY AS u(id, n) ORDER BY n RETURNING $1::timestamptz",
			clientClock, ids); err != nil {
			return err
		}
	case "copy":
		// COPY takes each row as it arrives; the rows come a while apart.
		var createdAt, availableAt time.Time
		if err := tx.QueryRow(ctx, "SELECT "+created+", "+available+" FROM (SELECT $1::timestamptz) AS a", args...).Scan(&createdAt, &availableAt); err != nil {
			return err
		}
		pr, pw := io.Pipe()
		copied := make(chan error, 1)
		go func() {
			_, err := conn.Conn().PgConn().CopyFrom(ctx, pr,
				"COPY "+tb.Name+" (event_id, event_type, payload, created_at, available_at, partition_key) FROM STDIN")
			pr.CloseWithError(err)
			copied <- err
		}()
		for i, id := range ids {
			if i > 0 && hold > 0 {
				time.Sleep(hold / time.Duration(n))
			}
			line := fmt.Sprintf("%s\t%s\t\\\\x78\t%s\t%s\t%s\n", id, typ,
				createdAt.Format(time.RFC3339Nano), availableAt.Format(time.RFC3339Nano), key)
			if _, err := io.WriteString(pw, line); err != nil {
				break
			}
		}
		_ = pw.Close()
		if err := <-copied; err != nil {
			return err
		}
	}
	due, err := pgtest.DueTimes(ctx, tx, tb.Name, ids)
	if err != nil {
		return err
	}
	if err := writer.Rewrite(ctx, tx, tb.Name, ids, foreign); err != nil {
		return err
	}
	// The inserts spread a plain INSERT's hold; the others hold at the end.
	end := time.Duration(0)
	if kind != "insert" || writer == pgtest.WriterPrepared {
		end = hold
	}
	rollBack := r.IntN(10) == 0
	if err := writer.End(ctx, conn, tx, "p"+ids[0].String(), end, rollBack); err != nil {
		return err
	}
	if rollBack {
		m.RolledBack(ids)
		return nil
	}
	m.Committed(ids, due, key, time.Now())
	return nil
}

// runRelays runs relay slot i until stop: one relay at a time, each a
// store of its own (a process), started again after it is killed.
func runRelays(t *testing.T, tb *pgtest.Table, m *interleave.Model, slot int, r *rand.Rand, stop <-chan struct{}) {
	ctx := context.Background()
	for incarnation := 0; ; incarnation++ {
		store, err := postgres.Open(ctx, tb.URL)
		if err != nil {
			t.Errorf("relay %d: %v", slot, err)
			return
		}
		// Ordered claims are never held.
		held := !m.Ordered && (slot == 1 || slot == 2 && incarnation%2 == 1)
		relayID := fmt.Sprintf("r%d.%d", slot, incarnation)
		killed := runRelay(t, store, m, relayID, slot, held, r, stop)
		store.Close()
		if !killed {
			return
		}
	}
}

// runRelay claims until stop or until it is killed (true).
func runRelay(t *testing.T, s *postgres.Store, m *interleave.Model, relayID string, slot int, held bool, r *rand.Rand, stop <-chan struct{}) bool {
	ctx := context.Background()
	// Batches of one and two too, where a split of the batch must give
	// each part its turn; never on slot 0, so that the run's producers
	// are not left behind a single relay's smallest batches.
	limit := 5 + r.IntN(16)
	if slot > 0 && r.IntN(3) == 0 {
		limit = 1 + r.IntN(2)
	}
	p := storage.ClaimParams{RelayID: relayID, Limit: limit, SweepInterval: 24 * time.Hour}
	if m.Ordered {
		p.Ordering, p.OnDead, p.RunLimit = storage.OrderingPartition, m.OnDead, 1+r.IntN(4)
	}
	for {
		select {
		case <-stop:
			return false
		default:
		}
		var (
			b  storage.Batch
			tx storage.HeldTx
		)
		if held {
			hb, err := s.ClaimHeld(ctx, p, time.Minute)
			if err != nil {
				t.Errorf("relay %s: held claim: %v", relayID, err)
				return false
			}
			b, tx = hb.Batch, hb.Tx
		} else {
			var err error
			if b, err = s.Claim(ctx, p); err != nil {
				t.Errorf("relay %s: claim: %v", relayID, err)
				return false
			}
		}
		ids := eventIDs(b.Events)
		p.After = b.After
		m.Claimed(relayID, b.Lease.LockedAt, time.Now(), ids)
		if len(ids) == 0 {
			time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
			continue
		}
		var st storage.Outcome
		kill := false
		// Kills are rare: a relay started again reads from the beginning,
		// and would hide for a while a row its frontier had passed.
		switch x := r.IntN(1000); {
		case x < 2:
			kill = true
		case x < 120:
			st.Released = ids
		case x < 220:
			for _, id := range ids {
				st.Failed = append(st.Failed, storage.Failure{ID: id, Error: "retry", Delay: time.Duration(50+r.IntN(300)) * time.Millisecond})
			}
		case x < 250:
			for _, id := range ids {
				st.Failed = append(st.Failed, storage.Failure{ID: id, Error: "permanent", Dead: true})
			}
		default:
			st.Delivered = ids
		}
		if kill {
			// The process dies: a held claim's transaction ends with its
			// connection, a lease waits for the reaper.
			m.Killed(ids)
			if tx != nil {
				tx.Abort()
			}
			return true
		}
		settling := time.Now()
		if err := settleBatch(ctx, s, b, tx, st); err != nil {
			t.Errorf("relay %s: settle: %v", relayID, err)
			return false
		}
		m.Settled(st, settling)
	}
}

func settleBatch(ctx context.Context, s *postgres.Store, b storage.Batch, tx storage.HeldTx, st storage.Outcome) error {
	if tx != nil {
		return tx.Settle(ctx, st)
	}
	_, err := s.Settle(ctx, b.Lease, st)
	return err
}

// runMaintenance runs the reaper and retry-dead, as an operator's cron would.
func runMaintenance(t *testing.T, tb *pgtest.Table, stop <-chan struct{}) {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := tb.Store.Reap(ctx, storage.ReapParams{LeaseTimeout: 5 * time.Second, Limit: 1000, MaxAttempts: 1000}); err != nil {
			t.Errorf("reap: %v", err)
			return
		}
		if _, err := tb.Store.RetryDead(ctx, storage.RetryDeadParams{}); err != nil {
			t.Errorf("retry dead: %v", err)
			return
		}
	}
}

// undelivered counts the committed events not DELIVERED yet.
func undelivered(t *testing.T, tb *pgtest.Table, m *interleave.Model) int {
	var n int
	if err := tb.Store.Pool().QueryRow(context.Background(),
		"SELECT count(*) FROM "+tb.Name+" WHERE event_id = ANY($1) AND status <> 'DELIVERED'", m.CommittedIDs()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
