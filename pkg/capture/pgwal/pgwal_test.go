package pgwal_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/capture/capturetest"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
)

// harness gives each test a database of its own on one private cluster
// with wal_level=logical.
type harness struct{ cluster *pgcluster.Cluster }

func (h harness) New(t *testing.T) capturetest.Setup {
	db := h.cluster.CreateDatabase(t)
	tb := pgtest.NewAt(t, h.cluster.URL(db))
	if err := tb.Store.CreatePublication(context.Background(), "outbox_relay_events"); err != nil {
		t.Fatal(err)
	}
	src := tb.Store.WALSource(pgwal.Config{Slot: "s_" + db, Publication: "outbox_relay_events",
		StatusInterval: 50 * time.Millisecond, Heartbeat: -1})
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
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	tb := pgtest.NewAt(t, c.URL(db))
	if err := tb.Store.CreatePublication(context.Background(), "outbox_relay_events"); err != nil {
		t.Fatal(err)
	}
	r, err := pgwal.Open(context.Background(), pgwal.Config{ConnString: tb.Store.ConnString(), Schema: tb.Store.TableName().Schema,
		Table: tb.Store.TableName().Name, Slot: "moves", Publication: "outbox_relay_events", Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	c.Exec(t, db, "SELECT pg_logical_emit_message(true, '"+pgwal.MovePrefix+"', ''); "+
		"INSERT INTO "+tb.Name+" (event_id, event_type, payload) VALUES (gen_random_uuid(), 'moved', '')")
	want := tb.Insert(t, pgtest.Event{})
	select {
	case txn := <-r.Txns():
		if len(txn.Events) != 1 || txn.Events[0].ID != want[0] {
			t.Fatalf("got %d events (first %v), want only the new event", len(txn.Events), txn.Events[0].Type)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no transaction arrived")
	}
}
