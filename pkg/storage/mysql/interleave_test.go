package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/interleave"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

// TestClaimsUnderRandomInterleavings checks MySQL's claims against a model
// (docs/architecture.md, "Storage drivers", the cursor's invariant), as
// PostgreSQL's test of the same name does for its claim frontier.
// Producers write one row, many rows and INSERT … SELECT, in transactions
// held open for 0–3 s, some rolled back, with created_at behind and ahead
// of the clock and scheduled available_at. Relays claim, deliver, release,
// fail (retryable and permanent) and are killed and started again;
// retry-dead and the reaper run meanwhile. At the end it checks:
//   - every committed event was delivered, and no rolled-back one claimed;
//   - no event was claimed before it was due (against the lease stamp);
//   - no event was delivered twice unless a relay that claimed it was killed;
//   - every event was first claimed within the cursor's bound of when it
//     was both committed and due: its sweep interval plus
//     interleaveSlack.
//
// Unlike PostgreSQL's, MySQL's cursor is timed: a row whose transaction
// commits more than four claims after its INSERT lies behind the cursor
// until a sweep, so this test runs with sweeps every interleaveSweep
// (INTERLEAVE_SWEEP overrides it; 24h turns them off, which the held
// transactions then fail). It runs on the shared server, in a database of
// its own: MariaDB has no private instance here.
//
// INTERLEAVE_SEED and INTERLEAVE_DURATION are as for PostgreSQL's test;
// `make fuzz STORAGE=mysql` runs it longer.
func TestClaimsUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	runInterleavings(t, false)
}

// TestOrderedClaimsUnderRandomInterleavings is the same under
// ORDERING=partition, ORDERING_ON_DEAD skip or block as the seed draws.
// It also checks that no event was claimed while an event its transaction
// wrote before it under the same key was not finished (delivered, or dead
// under skip): only a claim that ended before any settle that finished the
// earlier event began counts.
func TestOrderedClaimsUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	runInterleavings(t, true)
}

// interleaveSweep is the sweep interval of the relays: the cursor's guard
// for rows committed long after their INSERT.
const interleaveSweep = time.Second

// interleaveSlack is how long after its bound (committed and due, plus a
// sweep interval) an event's first claim may come on a busy machine.
const interleaveSlack = 3 * time.Second

func runInterleavings(t *testing.T, ordered bool) {
	seed := interleave.Seed(t)
	duration := interleave.Duration(t, "INTERLEAVE_DURATION", 4*time.Second)
	sweep := interleave.Duration(t, "INTERLEAVE_SWEEP", interleaveSweep)
	t.Logf("sweeps every %s", sweep)
	m := interleave.New()
	if ordered {
		m.Ordered = true
		m.OnDead = []storage.DeadPolicy{storage.DeadSkip, storage.DeadBlock}[rand.New(rand.NewPCG(seed, 1)).IntN(2)]
		t.Logf("ORDERING=partition, ORDERING_ON_DEAD=%s", m.OnDead)
	}
	tb := mysqltest.New(t)

	stop, relaysStop := make(chan struct{}), make(chan struct{})
	var producers, relays sync.WaitGroup
	for i := range 3 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			produce(t, tb, m, rand.New(rand.NewPCG(seed, uint64(i))), stop)
		}()
	}
	producers.Add(1)
	go func() {
		defer producers.Done()
		steady(t, tb, m, rand.New(rand.NewPCG(seed, 99)), stop)
	}()
	relayCount := 1 + rand.New(rand.NewPCG(seed, 0)).IntN(3)
	t.Logf("%d relays", relayCount)
	for i := range relayCount {
		relays.Add(1)
		go func() {
			defer relays.Done()
			runRelays(t, tb, m, i, sweep, rand.New(rand.NewPCG(seed, uint64(100+i))), relaysStop)
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
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && undelivered(t, tb, m) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	close(relaysStop)
	relays.Wait()
	m.Check(t, undelivered(t, tb, m), sweep+interleaveSlack)
}

// produce writes transactions until stop.
func produce(t *testing.T, tb *mysqltest.Table, m *interleave.Model, r *rand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if err := produceOne(context.Background(), tb, m, r); err != nil {
			t.Errorf("producer: %v", err)
			return
		}
		if r.IntN(4) == 0 {
			time.Sleep(time.Duration(r.IntN(400)) * time.Millisecond)
		}
	}
}

// steady writes one-row transactions without pause in busy spells of up
// to a second, with quiet spells between.
func steady(t *testing.T, tb *mysqltest.Table, m *interleave.Model, r *rand.Rand, stop <-chan struct{}) {
	ctx := context.Background()
	for {
		busyUntil := time.Now().Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		for time.Now().Before(busyUntil) {
			select {
			case <-stop:
				return
			default:
			}
			id, due, err := insertSteady(ctx, tb)
			if err != nil {
				t.Errorf("steady producer: %v", err)
				return
			}
			m.Committed([]uuid.UUID{id}, map[uuid.UUID]time.Time{id: due}, "", time.Now())
			m.Produced("steady")
			time.Sleep(2 * time.Millisecond)
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(r.IntN(1000)) * time.Millisecond):
		}
	}
}

// insertSteady writes one event in a transaction of its own and returns
// it with its available_at, read before the commit: once committed, a
// relay may claim it and fail it, which moves available_at.
func insertSteady(ctx context.Context, tb *mysqltest.Table) (uuid.UUID, time.Time, error) {
	id := uuid.Must(uuid.NewV7())
	tx, err := tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		return id, time.Time{}, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+tb.Name+" (event_id, event_type, payload) VALUES (?, 'steady', 'x')", id[:]); err != nil {
		return id, time.Time{}, err
	}
	due, err := availableAt(ctx, tx, tb, []uuid.UUID{id})
	if err != nil {
		return id, time.Time{}, err
	}
	return id, due[id], tx.Commit()
}

func produceOne(ctx context.Context, tb *mysqltest.Table, m *interleave.Model, r *rand.Rand) error {
	clientClock := time.Now().UTC()
	tx, err := tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	n := 1 + r.IntN(4)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	created := []string{"UTC_TIMESTAMP(6)", "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND", "?", "UTC_TIMESTAMP(6) + INTERVAL 1 SECOND"}[r.IntN(4)]
	available := "UTC_TIMESTAMP(6)"
	if r.IntN(5) == 0 {
		available = fmt.Sprintf("UTC_TIMESTAMP(6) + INTERVAL %d MICROSECOND", (100+r.IntN(700))*1000)
	}
	hold := time.Duration(0)
	if r.IntN(3) == 0 {
		hold = time.Duration(r.IntN(3000)) * time.Millisecond
	}
	kind := []string{"insert", "values", "select"}[r.IntN(3)]
	key := ""
	if m.Ordered && r.IntN(4) != 0 {
		key = fmt.Sprintf("k%d", r.IntN(6))
	}
	m.Produced(kind)
	cols := "(event_id, event_type, payload, created_at, available_at, partition_key)"
	row := func(i int) (string, []any) {
		args := []any{ids[i][:]}
		if created == "?" {
			args = append(args, clientClock)
		}
		return "(?, 'e', 'x', " + created + ", " + available + ", '" + key + "')", args
	}
	switch kind {
	case "insert":
		for i := range ids {
			if i > 0 && hold > 0 {
				time.Sleep(hold / time.Duration(n))
			}
			values, args := row(i)
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+tb.Name+" "+cols+" VALUES "+values, args...); err != nil {
				return err
			}
		}
	case "values":
		var rows []string
		var args []any
		for i := range ids {
			values, a := row(i)
			rows, args = append(rows, values), append(args, a...)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+tb.Name+" "+cols+" VALUES "+strings.Join(rows, ", "), args...); err != nil {
			return err
		}
	case "select":
		var picks []string
		var args []any
		if created == "?" {
			// Its placeholder comes first in the statement.
			args = append(args, clientClock)
		}
		for i, id := range ids {
			picks = append(picks, "SELECT ? AS id, "+strconv.Itoa(i)+" AS n")
			args = append(args, id[:])
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+tb.Name+" "+cols+
			" SELECT u.id, 'e', 'x', "+created+", "+available+", '"+key+"' FROM ("+strings.Join(picks, " UNION ALL ")+") AS u ORDER BY u.n",
			args...); err != nil {
			return err
		}
	}
	due, err := availableAt(ctx, tx, tb, ids)
	if err != nil {
		return err
	}
	if kind != "insert" && hold > 0 {
		time.Sleep(hold)
	}
	if r.IntN(10) == 0 {
		if err := tx.Rollback(); err != nil {
			return err
		}
		m.RolledBack(ids)
		return nil
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	m.Committed(ids, due, key, time.Now())
	return nil
}

// availableAt reads the rows' available_at in tx.
func availableAt(ctx context.Context, tx *sql.Tx, tb *mysqltest.Table, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id[:]
	}
	rows, err := tx.QueryContext(ctx, "SELECT event_id, available_at FROM "+tb.Name+
		" WHERE event_id IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")+")", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	due := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var raw []byte
		var at time.Time
		if err := rows.Scan(&raw, &at); err != nil {
			return nil, err
		}
		id, err := uuid.FromBytes(raw)
		if err != nil {
			return nil, err
		}
		due[id] = at
	}
	return due, rows.Err()
}

// runRelays runs relay slot i until stop, each incarnation a store of its
// own (a process), started again after it is killed.
func runRelays(t *testing.T, tb *mysqltest.Table, m *interleave.Model, slot int, sweep time.Duration, r *rand.Rand, stop <-chan struct{}) {
	ctx := context.Background()
	for incarnation := 0; ; incarnation++ {
		store, err := mysql.Open(ctx, tb.URL)
		if err != nil {
			t.Errorf("relay %d: %v", slot, err)
			return
		}
		killed := runRelay(t, store, m, fmt.Sprintf("r%d.%d", slot, incarnation), slot, sweep, r, stop)
		store.Close()
		if !killed {
			return
		}
	}
}

// runRelay claims until stop or until it is killed (true).
func runRelay(t *testing.T, s *mysql.Store, m *interleave.Model, relayID string, slot int, sweep time.Duration, r *rand.Rand, stop <-chan struct{}) bool {
	ctx := context.Background()
	// Batches of one and two too, as PostgreSQL's test draws them.
	limit := 5 + r.IntN(16)
	if slot > 0 && r.IntN(3) == 0 {
		limit = 1 + r.IntN(2)
	}
	p := storage.ClaimParams{RelayID: relayID, Limit: limit, SweepInterval: sweep}
	if m.Ordered {
		p.Ordering, p.OnDead, p.RunLimit = storage.OrderingPartition, m.OnDead, 1+r.IntN(4)
	}
	for {
		select {
		case <-stop:
			return false
		default:
		}
		b, err := s.Claim(ctx, p)
		if err != nil {
			t.Errorf("relay %s: claim: %v", relayID, err)
			return false
		}
		ids := eventIDs(b.Events)
		p.After = b.After
		m.Claimed(relayID, b.Lease.LockedAt, time.Now(), ids)
		if len(ids) == 0 {
			time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
			continue
		}
		var st storage.Outcome
		switch x := r.IntN(1000); {
		case x < 2:
			// The process dies; its lease waits for the reaper.
			m.Killed(ids)
			return true
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
		settling := time.Now()
		if _, err := s.Settle(ctx, b.Lease, st); err != nil {
			t.Errorf("relay %s: settle: %v", relayID, err)
			return false
		}
		m.Settled(st, settling)
	}
}

// runMaintenance runs the reaper and retry-dead, as an operator's cron would.
func runMaintenance(t *testing.T, tb *mysqltest.Table, stop <-chan struct{}) {
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
func undelivered(t *testing.T, tb *mysqltest.Table, m *interleave.Model) int {
	rows, err := tb.Store.DB().QueryContext(context.Background(), "SELECT event_id FROM "+tb.Name+" WHERE status <> 'DELIVERED'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	open := map[uuid.UUID]bool{}
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		open[uuid.UUID(raw)] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, id := range m.CommittedIDs() {
		if open[id] {
			n++
		}
	}
	return n
}
