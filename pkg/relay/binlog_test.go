package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/mycluster"
	"github.com/outbox-relay/relay/pkg/capture/binlog"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
)

// binlogTable is an outbox table on a private MariaDB with its binary log
// on, which a test may purge or whose connections it may kill.
type binlogTable struct {
	*mysqltest.Table
	cluster *mycluster.Cluster
}

func newBinlogTable(t *testing.T) *binlogTable {
	t.Helper()
	c := mycluster.Start(t, mycluster.Options{})
	return &binlogTable{Table: mysqltest.NewAt(t, c.URL("")), cluster: c}
}

// source is a binlog reader of the table for a relay named relayID.
func (b *binlogTable) source(relayID string) binlog.Source {
	return binlog.Source{Config: binlog.Config{Conn: b.Store.ConnConfig(), Database: b.Store.Database(),
		Table: b.Store.TableName(), RelayID: relayID, SaveInterval: 50 * time.Millisecond,
		Heartbeat: 500 * time.Millisecond, Logger: testLogger()}}
}

// startBinlog runs a relay with CAPTURE=binlog on b until the test ends
// or it is stopped.
func startBinlog(t *testing.T, b *binlogTable, cfg relay.Config, pub publisher.Publisher) *walRelay {
	t.Helper()
	return startBinlogObserved(t, b, cfg, pub, nil)
}

// startBinlogObserved is startBinlog with the capture observed by obs.
func startBinlogObserved(t *testing.T, b *binlogTable, cfg relay.Config, pub publisher.Publisher, obs relay.CaptureObserver) *walRelay {
	t.Helper()
	if cfg.RelayID == "" {
		cfg.RelayID = "binlog-" + uuid.NewString()[:8]
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 24 * time.Hour // sweeps out of the argument
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	e, err := relay.New(cfg, b.Store, pub)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runCapture(e, b.source(cfg.RelayID), b.Store, binlogCaptureConfig(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.stop(t) })
	return r.walRelay
}

// binlogCaptureConfig is a Capture's configuration for a binlog reader in
// these tests, observed by obs when set.
func binlogCaptureConfig(obs relay.CaptureObserver) relay.CaptureConfig {
	return relay.CaptureConfig{StandbyRetry: 100 * time.Millisecond, Observer: obs, Mode: "binlog", Position: "binlog position"}
}

// arrivals is a publisher that notes when each event first arrived and
// how often it did.
type arrivals struct {
	mu    sync.Mutex
	first map[uuid.UUID]time.Time
	count map[uuid.UUID]int
}

func newArrivals() *arrivals {
	return &arrivals{first: map[uuid.UUID]time.Time{}, count: map[uuid.UUID]int{}}
}

func (a *arrivals) Publish(_ context.Context, batch []outbox.Event) []error {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range batch {
		if _, ok := a.first[ev.ID]; !ok {
			a.first[ev.ID] = now
		}
		a.count[ev.ID]++
	}
	return make([]error, len(batch))
}

func (a *arrivals) Ping(context.Context) error  { return nil }
func (a *arrivals) Close(context.Context) error { return nil }

func (a *arrivals) at(id uuid.UUID) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.first[id]
	return at, ok
}

// got reports whether every id arrived, and the ids that arrived more
// than once.
func (a *arrivals) got(ids []uuid.UUID) (all bool, twice []uuid.UUID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	all = true
	for _, id := range ids {
		switch a.count[id] {
		case 0:
			all = false
		case 1:
		default:
			twice = append(twice, id)
		}
	}
	return all, twice
}

// insertOpen inserts one event in a transaction it leaves open.
func insertOpen(t *testing.T, db *sql.DB) (uuid.UUID, *sql.Tx) {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	id := uuid.Must(uuid.NewV7())
	if _, err := tx.Exec("INSERT INTO openoutbox_events (event_id, event_type, payload) VALUES (?, 'late', 'x')", id[:]); err != nil {
		t.Fatal(err)
	}
	return id, tx
}

// A transaction that commits 10 s after its INSERT, while 100 events a
// second commit beside it, arrives within a second of its COMMIT, with
// sweeps off: the log holds it at its commit. (Polling's cursor had
// passed it: it waited for a sweep.)
func TestBinlogDeliversALateCommitAtItsCommit(t *testing.T) {
	t.Parallel()
	b := newBinlogTable(t)
	pub := newArrivals()
	r := startBinlog(t, b, relay.Config{}, pub)
	waitFor(t, "the stream to start", 30*time.Second, func() bool { st, _ := r.capture.Status(); return st == relay.CaptureStreaming })
	late, tx := insertOpen(t, b.Store.DB())
	stop := make(chan struct{})
	var beside []uuid.UUID
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				beside = append(beside, b.Insert(t, mysqltest.Event{})...)
			}
		}
	}()
	time.Sleep(10 * time.Second) // the transaction stays open: the point of the test
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	close(stop)
	wg.Wait()
	waitFor(t, "the late event", 30*time.Second, func() bool { _, ok := pub.at(late); return ok })
	at, _ := pub.at(late)
	if d := at.Sub(committed); d > time.Second {
		t.Fatalf("the late event arrived %s after its commit, want within 1s", d.Round(time.Millisecond))
	}
	waitFor(t, "the events beside it", 30*time.Second, func() bool { all, _ := pub.got(beside); return all })
	if _, twice := pub.got(append(beside, late)); len(twice) > 0 {
		t.Fatalf("%d events arrived twice", len(twice))
	}
}

// Events written while no relay ran are each delivered once by the next,
// and none delivered before comes again.
func TestBinlogRestartAfterWritesWhileDownSendsNothingTwice(t *testing.T) {
	t.Parallel()
	b := newBinlogTable(t)
	pub := newArrivals()
	r := startBinlog(t, b, relay.Config{}, pub)
	waitFor(t, "the stream to start", 30*time.Second, func() bool { st, _ := r.capture.Status(); return st == relay.CaptureStreaming })
	before := b.InsertN(t, 50, "before")
	waitFor(t, "the first events", 30*time.Second, func() bool { all, _ := pub.got(before); return all })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	var down []uuid.UUID
	for range 20 {
		down = append(down, b.InsertN(t, 3, "down")...)
	}
	startBinlog(t, b, relay.Config{}, pub)
	waitFor(t, "the events written while down", 30*time.Second, func() bool { all, _ := pub.got(down); return all })
	if _, twice := pub.got(append(before, down...)); len(twice) > 0 {
		t.Fatalf("%d events arrived twice, e.g. %s", len(twice), twice[0])
	}
	// The rows are marked after the broker has the events (the record
	// window gathers outcomes for 50 ms).
	waitFor(t, "every row DELIVERED", 30*time.Second, func() bool {
		return b.Counts(t)[outbox.StatusDelivered] == len(before)+len(down)
	})
}

// A saved position the server has purged is said (the capture's state
// is lost), and the events written meanwhile come from the table, once.
func TestBinlogPurgedPositionFallsBackToTheTable(t *testing.T) {
	t.Parallel()
	b := newBinlogTable(t)
	pub := newArrivals()
	events := &slotEvents{}
	cfg := relay.Config{RelayID: "purged"}
	r := startBinlog(t, b, cfg, pub)
	waitFor(t, "the stream to start", 30*time.Second, func() bool { st, _ := r.capture.Status(); return st == relay.CaptureStreaming })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	meanwhile := b.InsertN(t, 30, "meanwhile")
	purgeAll(t, b.Store.DB())
	startBinlogObserved(t, b, relay.Config{RelayID: "purged2"}, pub, events)
	waitFor(t, "the events written before the purge", 30*time.Second, func() bool { all, _ := pub.got(meanwhile); return all })
	// The table's claims may deliver them before the stream, which starts
	// once the stopped reader's session has ended, finds its position gone.
	waitFor(t, "the capture to say its position was lost", 30*time.Second, func() bool { return events.lost.Load() > 0 })
	after := b.InsertN(t, 10, "after")
	waitFor(t, "the events after", 30*time.Second, func() bool { all, _ := pub.got(after); return all })
	if _, twice := pub.got(append(meanwhile, after...)); len(twice) > 0 {
		t.Fatalf("%d events arrived twice", len(twice))
	}
}

// purgeAll purges every binary log but the one being written, once no
// reader holds the older ones.
func purgeAll(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old binary logs to be purged", 30*time.Second, func() bool {
		rows, err := db.Query("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for rows.Next() {
			var name string
			var size any
			if err := rows.Scan(&name, &size); err != nil {
				t.Fatal(err)
			}
			files = append(files, name)
		}
		rows.Close()
		if len(files) <= 1 {
			return true
		}
		_, _ = db.Exec(fmt.Sprintf("PURGE BINARY LOGS TO '%s'", files[len(files)-1]))
		return false
	})
}

// When the streaming relay's connections are killed (its host gone, the
// server ending them), a relay streams again within seconds — the standby
// or the first, whichever takes the reader lock — and every event
// arrives.
func TestBinlogStandbyTakesOverFromAKilledReader(t *testing.T) {
	t.Parallel()
	b := newBinlogTable(t)
	pub := newArrivals()
	first := startBinlog(t, b, relay.Config{RelayID: "first"}, pub)
	waitFor(t, "the first relay to stream", 30*time.Second, func() bool { st, _ := first.capture.Status(); return st == relay.CaptureStreaming })
	standby := startBinlog(t, b, relay.Config{RelayID: "standby"}, pub)
	waitFor(t, "the second relay to stand by", 30*time.Second, func() bool { st, _ := standby.capture.Status(); return st == relay.CaptureStandby })
	ids := b.InsertN(t, 20, "before")
	var holder sql.NullInt64
	if err := b.Store.DB().QueryRow("SELECT IS_USED_LOCK(CONCAT('outbox_relay.binlog.', DATABASE(), '.openoutbox_events'))").Scan(&holder); err != nil || !holder.Valid {
		t.Fatalf("no reader holds the lock: %v", err)
	}
	rows, err := b.Store.DB().Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%' OR ID = ?", holder.Int64)
	if err != nil {
		t.Fatal(err)
	}
	var kill []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		kill = append(kill, id)
	}
	rows.Close()
	for _, id := range kill {
		_, _ = b.Store.DB().Exec(fmt.Sprintf("KILL %d", id))
	}
	killed := time.Now()
	streaming := func(r *walRelay) bool {
		st, _ := r.capture.Status()
		return st == relay.CaptureStreaming || st == relay.CaptureBackfilling
	}
	waitFor(t, "the first relay to notice", 30*time.Second, func() bool { return !streaming(first) || !lockHeldBy(b, holder.Int64) })
	waitFor(t, "a relay to stream again", 30*time.Second, func() bool { return lockHeld(b) && (streaming(first) || streaming(standby)) })
	if d := time.Since(killed); d > 5*time.Second {
		t.Errorf("streaming began again %s after the kill", d.Round(time.Millisecond))
	}
	ids = append(ids, b.InsertN(t, 20, "after")...)
	waitFor(t, "every event", 30*time.Second, func() bool { all, _ := pub.got(ids); return all })
}

// lockHeld reports whether a reader holds the table's reader lock, and
// lockHeldBy whether connection id does.
func lockHeld(b *binlogTable) bool { return lockHolder(b).Valid }

func lockHeldBy(b *binlogTable, id int64) bool { h := lockHolder(b); return h.Valid && h.Int64 == id }

func lockHolder(b *binlogTable) sql.NullInt64 {
	var holder sql.NullInt64
	_ = b.Store.DB().QueryRow("SELECT IS_USED_LOCK(CONCAT('outbox_relay.binlog.', DATABASE(), '.openoutbox_events'))").Scan(&holder)
	return holder
}
