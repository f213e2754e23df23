package pgwal_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/internal/syncbuf"
	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/capture/capturetest"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
)

// harness gives each test a database of its own on one private cluster
// with wal_level=logical.
type harness struct{ cluster *pgcluster.Cluster }

func (h harness) New(t *testing.T) capturetest.Setup {
	db := h.cluster.CreateDatabase(t)
	tb := pgtest.NewAt(t, h.cluster.URL(db))
	tb.CreatePublication(t, "outbox_relay_events")
	src := pgwal.Source{Config: tb.WAL(pgwal.Config{Slot: "s_" + db, Publication: "outbox_relay_events",
		StatusInterval: 50 * time.Millisecond, Heartbeat: -1})}
	return capturetest.Setup{
		Source: src,
		Insert: func(t testing.TB, n int) []uuid.UUID {
			events := make([]pgtest.Event, n)
			return tb.Insert(t, events...)
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	capturetest.Run(t, harness{pgcluster.Start(t, pgcluster.Options{})})
}

// A transaction marked as a partition move (the relay's retention moving
// rows out of the default partition) carries no new events.
func TestReaderSkipsPartitionMoves(t *testing.T) {
	t.Parallel()
	onlyTheNextEventArrives(t, "moves", "SELECT pg_logical_emit_message(true, '"+pgwal.MovePrefix+"', ''); "+
		"INSERT INTO {{table}} (event_id, event_type, payload) VALUES (gen_random_uuid(), 'moved', '')")
}

// An event whose producer set created_at before its transaction's now()
// has an available_at after its created_at, which is how the claims know a
// row due again or scheduled: the log leaves it to them, and the reader
// says so, naming the fix, rather than let the mode lose its point
// silently.
func TestReaderSaysWhenEventsAreLeftToTheClaims(t *testing.T) {
	t.Parallel()
	logs := onlyTheNextEventArrives(t, "left",
		"INSERT INTO {{table}} (event_type, payload, created_at) VALUES ('app', '', now() - interval '1 second')")
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "events=1") || !strings.Contains(logs, "leave created_at to its default") {
		t.Errorf("the reader logged %q, want a warning that one event was left to the claims, with the fix", logs)
	}
}

// onlyTheNextEventArrives opens a reader on slot, for a table of its own on
// a private cluster, runs sql there ({{table}} for the table's name), then
// inserts an event as producers do, and checks that the first transaction
// the reader hands out holds that event alone. It returns what the reader
// logged.
func onlyTheNextEventArrives(t *testing.T, slot, sql string) string {
	t.Helper()
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	tb := pgtest.NewAt(t, c.URL(db))
	tb.CreatePublication(t, "outbox_relay_events")
	var logs syncbuf.Buffer
	r, err := pgwal.Open(context.Background(), pgwal.Config{ConnString: tb.Store.ConnString(), Schema: tb.Store.TableName().Schema,
		Table: tb.Store.TableName().Name, Slot: slot, Publication: "outbox_relay_events", Heartbeat: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(context.Background()) }()
	c.Exec(t, db, strings.ReplaceAll(sql, "{{table}}", tb.Name))
	want := tb.Insert(t, pgtest.Event{})
	select {
	case txn := <-r.Txns():
		if len(txn.Events) != 1 || txn.Events[0].ID != want[0] {
			t.Fatalf("got %d events (first %v), want only the new event", len(txn.Events), txn.Events[0].Type)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no transaction arrived")
	}
	return logs.String()
}

// A publication that does not publish this table — another table's of the
// same name in another schema, say — is a setup error, not an empty stream.
func TestCheckRefusesAPublicationOfAnotherTable(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	a := pgtest.NewAt(t, c.URL(db))
	b := pgtest.NewAt(t, c.URL(db))
	a.CreatePublication(t, "shared_name")
	err := pgwal.Check(context.Background(), pgwal.Config{ConnString: b.Store.ConnString(), Schema: b.Store.TableName().Schema,
		Table: b.Store.TableName().Name, Slot: "s", Publication: "shared_name"})
	var setup *capture.SetupError
	if !errors.As(err, &setup) || !strings.Contains(err.Error(), "does not publish table") {
		t.Fatalf("Check with another table's publication: %v, want a SetupError saying so", err)
	}
}

// A column the reader cannot read (created_at without a time zone) ends
// the stream with a setup error rather than failing it at every insert.
func TestStreamRefusesColumnsItCannotRead(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	c.Exec(t, db, `CREATE TABLE odd (event_id uuid PRIMARY KEY, event_type text, status text DEFAULT 'PENDING',
		available_at timestamptz DEFAULT now(), created_at timestamp DEFAULT now(), seq bigserial)`)
	c.Exec(t, db, "CREATE PUBLICATION odd_pub FOR TABLE odd WITH (publish = 'insert', publish_via_partition_root = true)")
	r, err := pgwal.Open(context.Background(), pgwal.Config{ConnString: c.URL(db), Table: "odd", Slot: "odd", Publication: "odd_pub", Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(context.Background()) }()
	c.Exec(t, db, "INSERT INTO odd (event_id, event_type) VALUES (gen_random_uuid(), 'x')")
	select {
	case _, ok := <-r.Txns():
		var setup *capture.SetupError
		if ok || !errors.As(r.Err(), &setup) || !strings.Contains(r.Err().Error(), "created_at") {
			t.Fatalf("stream: ok %v, err %v; want it ended with a SetupError naming created_at", ok, r.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream neither failed nor delivered")
	}
}
