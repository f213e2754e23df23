package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Issue 20: created_at is the start of the inserting transaction, so a
// transaction that began earlier can write its event after one that began
// later has committed. These tests write events the way an application
// does, with the database stamping created_at at transaction start, and
// check that every key reaches the broker in the order the events were
// written: the order of their inserts, which the application controls, not
// the order in which their transactions happened to begin.
//
// The scenarios are written once against writeOrderDB and run on
// PostgreSQL here and on MySQL/MariaDB in mysql_writeorder_test.go.

// writeOrderDB is an outbox table and what the scenarios need of its
// database beyond the relay's storage.
type writeOrderDB interface {
	counter
	queue() storage.Queue
	// begin starts an application transaction and fixes the moment it
	// stamps into created_at: now, before anything else happens in it.
	begin(t *testing.T) appTx
	// createAccounts creates the application's table accounts(id, v) with
	// a row for each key, v = -1.
	createAccounts(t *testing.T, keys []string)
	// transfer is one application transaction on key: it stamps its start,
	// does some work (pause), waits for the key's account row lock, adds 1
	// to v and writes an event numbered with the new v, then commits.
	transfer(ctx context.Context, key string, pause func()) error
	// written reads every event in the table.
	written(t *testing.T) []writtenEvent
}

// appTx is an application transaction that writes outbox events.
type appTx interface {
	// insert writes an event for key numbered n, created_at the
	// transaction's start.
	insert(t *testing.T, key string, n int)
	commit(t *testing.T)
}

// writtenEvent is one outbox row as the checks need it.
type writtenEvent struct {
	keyedEvent
	CreatedAt time.Time
}

func keyedPayload(key string, n int) []byte {
	b, _ := json.Marshal(keyedEvent{Key: key, N: n})
	return b
}

// startOrderEventType is the event type (and stream subject) of the
// transaction-start scenario.
const startOrderEventType = "startorder.event"

// writeOrderNotStartOrder is the two-transaction case of issue 20: B begins
// first and waits, A begins, writes its event on key k and commits, then B
// writes its event on k and commits. A was written first and must reach the
// broker first although B's created_at is earlier.
//
// With running, the relay runs through both commits. A relay that sees A
// commit alone delivers it before B exists, whatever it orders by, so here
// the relay holds an earlier event of k at the broker (its first publish
// waits) while A and B commit: the key is busy, as it is whenever events
// come faster than the broker acknowledges them, and A and B then become
// claimable together. Without running, the relay starts after both commits.
func writeOrderNotStartOrder(t *testing.T, db writeOrderDB, running bool) {
	const key = "k"
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "STARTORDER", Subjects: []string{"startorder.>"}})

	var held *holdFirstPublish
	first := 0 // A's number
	if running {
		tx := db.begin(t)
		tx.insert(t, key, 0)
		tx.commit(t)
		first = 1
		held = newHoldFirstPublish(openNATS(t, srv, ""))
		start(t, partitionConfig("relay"), db.queue(), held)
		held.waitHeld(t, 20*time.Second)
	}

	b := db.begin(t)
	a := db.begin(t)
	a.insert(t, key, first)
	a.commit(t)
	b.insert(t, key, first+1)
	b.commit(t)

	// Without this the test would prove nothing: B must be the later
	// write with the earlier created_at.
	at := map[int]time.Time{}
	for _, e := range db.written(t) {
		at[e.N] = e.CreatedAt
	}
	if !at[first+1].Before(at[first]) {
		t.Fatalf("B's created_at %s is not before A's %s: the case is not exercised",
			at[first+1].Format(time.RFC3339Nano), at[first].Format(time.RFC3339Nano))
	}

	if running {
		held.release()
	} else {
		start(t, partitionConfig("relay"), db.queue(), openNATS(t, srv, ""))
	}
	waitCounts(t, db, 20*time.Second, map[outbox.Status]int{outbox.StatusDelivered: first + 2})
	requireKeyOrder(t, st, first+2)
}

// rowLockEventType is the event type of the row-lock scenario.
const rowLockEventType = "rowlock.event"

// writeOrderFollowsRowLock has producers run transactions that serialise
// per key on the key's account row, as an application keeping a per-key
// counter does, while three ordered relays drain the table. Each event is
// numbered by the counter, so per key its number is the lock order, which
// is the write order. Transactions stamp their start before doing some
// work and waiting for the lock, so a transaction that began earlier often
// gets the lock later: its event is written later with an earlier
// created_at. Every key must reach the broker in counter order.
func writeOrderFollowsRowLock(t *testing.T, db writeOrderDB) {
	const (
		keys        = 12
		producers   = 8
		perProducer = 120
	)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ROWLOCK", Subjects: []string{"rowlock.>"}, Duplicates: 10 * time.Minute})

	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("key-%03d", i)
	}
	db.createAccounts(t, names)
	for i := range 3 {
		start(t, partitionConfig(fmt.Sprintf("relay-%d", i)), db.queue(), openNATS(t, srv, ""))
	}

	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(p), 20))
			// The pause models the application's work between starting
			// its transaction and taking the lock; its spread is what lets
			// a later transaction overtake an earlier one to the lock.
			pause := func() { time.Sleep(time.Duration(rnd.Int64N(int64(2 * time.Millisecond)))) }
			for range perProducer {
				if err := db.transfer(ctx, names[rnd.IntN(keys)], pause); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	n := producers * perProducer
	// Order is what this test checks, not pace: in a full make test on 2
	// cores, three ordered relays with 2 s leases once had 168 of 960
	// events left at 20 s (6 s when the test runs alone).
	waitCounts(t, db, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})
	if inv := createdAtInversions(db.written(t)); inv == 0 {
		t.Fatal("no key has a later event with an earlier created_at: the test proves nothing")
	} else {
		t.Logf("%d events were written after an event of their key with a later created_at", inv)
	}
	requireKeyOrder(t, st, n)
}

// createdAtInversions counts the events whose created_at is earlier than
// that of the event before them in their key's write order.
func createdAtInversions(events []writtenEvent) int {
	byKey := map[string][]writtenEvent{}
	for _, e := range events {
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	inversions := 0
	for _, es := range byKey {
		slices.SortFunc(es, func(a, b writtenEvent) int { return a.N - b.N })
		for i := 1; i < len(es); i++ {
			if es[i].CreatedAt.Before(es[i-1].CreatedAt) {
				inversions++
			}
		}
	}
	return inversions
}

// holdFirstPublish keeps the relay's first publish waiting until released,
// so that the events it carries stay DELIVERING and their keys busy.
type holdFirstPublish struct {
	publisher.Publisher
	once     sync.Once
	held     chan struct{}
	released chan struct{}
	unhold   sync.Once
}

func newHoldFirstPublish(p publisher.Publisher) *holdFirstPublish {
	return &holdFirstPublish{Publisher: p, held: make(chan struct{}), released: make(chan struct{})}
}

func (h *holdFirstPublish) Publish(ctx context.Context, batch []outbox.Event) []error {
	first := false
	h.once.Do(func() { first = true; close(h.held) })
	if first {
		select {
		case <-h.released:
		case <-ctx.Done():
			return publisher.Fill(len(batch), publisher.Unavailable(ctx.Err()))
		}
	}
	return h.Publisher.Publish(ctx, batch)
}

func (h *holdFirstPublish) waitHeld(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(timeout):
		t.Fatalf("the relay did not publish within %s", timeout)
	}
}

func (h *holdFirstPublish) release() { h.unhold.Do(func() { close(h.released) }) }

func TestPartitionOrderIsWriteOrderNotTransactionStart(t *testing.T) {
	t.Parallel()
	for name, running := range map[string]bool{"relay stopped": false, "relay running": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			writeOrderNotStartOrder(t, newPGWriteOrder(t), running)
		})
	}
}

func TestPartitionOrderFollowsTheApplicationsRowLock(t *testing.T) {
	t.Parallel()
	writeOrderFollowsRowLock(t, newPGWriteOrder(t))
}

// pgWriteOrder is writeOrderDB on PostgreSQL. Events are inserted with
// plain SQL and the table's default created_at, now(): the start of the
// transaction, as an application's own INSERT stamps it (postgres.Write
// stamps clock_timestamp() instead).
type pgWriteOrder struct {
	*pgtest.Table
	// app is the application's pool, apart from the relays' so that
	// producers waiting for locks cannot starve them of connections.
	app      *pgxpool.Pool
	accounts string
}

func newPGWriteOrder(t *testing.T) *pgWriteOrder {
	t.Helper()
	tb := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 10
	app, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	schema, _, _ := strings.Cut(tb.Name, ".")
	return &pgWriteOrder{Table: tb, app: app, accounts: schema + ".accounts"}
}

func (db *pgWriteOrder) queue() storage.Queue { return db.Store }

func (db *pgWriteOrder) insertSQL() string {
	return "INSERT INTO " + db.Name + " (event_type, partition_key, payload) VALUES ($1, $2, $3)"
}

type pgAppTx struct {
	db *pgWriteOrder
	tx pgx.Tx
}

func (db *pgWriteOrder) begin(t *testing.T) appTx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	// now() is fixed by the time this returns: the transaction has begun.
	if _, err := tx.Exec(ctx, "SELECT now()"); err != nil {
		t.Fatal(err)
	}
	return pgAppTx{db, tx}
}

func (a pgAppTx) insert(t *testing.T, key string, n int) {
	t.Helper()
	if _, err := a.tx.Exec(context.Background(), a.db.insertSQL(), startOrderEventType, key, keyedPayload(key, n)); err != nil {
		t.Fatalf("insert event %d: %v", n, err)
	}
}

func (a pgAppTx) commit(t *testing.T) {
	t.Helper()
	if err := a.tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (db *pgWriteOrder) createAccounts(t *testing.T, keys []string) {
	t.Helper()
	db.Exec(t, "CREATE TABLE "+db.accounts+" (id text PRIMARY KEY, v int NOT NULL)")
	db.Exec(t, "INSERT INTO "+db.accounts+" (id, v) SELECT unnest($1::text[]), -1", keys)
}

func (db *pgWriteOrder) transfer(ctx context.Context, key string, pause func()) error {
	tx, err := db.app.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT now()"); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	pause()
	if _, err := tx.Exec(ctx, "SELECT v FROM "+db.accounts+" WHERE id = $1 FOR UPDATE", key); err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}
	var v int
	if err := tx.QueryRow(ctx, "UPDATE "+db.accounts+" SET v = v + 1 WHERE id = $1 RETURNING v", key).Scan(&v); err != nil {
		return fmt.Errorf("count %s: %w", key, err)
	}
	if _, err := tx.Exec(ctx, db.insertSQL(), rowLockEventType, key, keyedPayload(key, v)); err != nil {
		return fmt.Errorf("insert %s %d: %w", key, v, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (db *pgWriteOrder) written(t *testing.T) []writtenEvent {
	t.Helper()
	rows, err := db.Pool().Query(context.Background(), "SELECT payload, created_at FROM "+db.Name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (writtenEvent, error) {
		var e writtenEvent
		var payload []byte
		if err := r.Scan(&payload, &e.CreatedAt); err != nil {
			return e, err
		}
		return e, json.Unmarshal(payload, &e.keyedEvent)
	})
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	return out
}
