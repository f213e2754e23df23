package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The faults of CAPTURE=wal, each on a PostgreSQL cluster of its own with
// wal_level=logical: relays SIGKILLed mid-stream with standbys, the
// database restarted mid-stream, a 30 s broker outage, and the slot
// dropped by an operator. In each every event reaches the broker (JetStream
// drops duplicates by event id, so its count is the distinct events), none
// goes DEAD, and no attempt is burned.

// walChaos is a table on a private cluster and a JetStream stream for it.
type walChaos struct {
	cluster *pgcluster.Cluster
	db      string
	tb      *pgtest.Table
	url     string // STORAGE_URL naming the table
	nats    *natstest.Server
	stream  jetstream.Stream
}

func newWALChaos(t *testing.T, name string) *walChaos {
	t.Helper()
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	tb := pgtest.NewAt(t, c.URL(db))
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{"wal.>"}, Duplicates: 10 * time.Minute})
	return &walChaos{cluster: c, db: db, tb: tb, url: storage.URLWithTable(c.URL(db), tb.Name), nats: srv, stream: st}
}

func (w *walChaos) startRelay(t *testing.T, id string, env ...string) *relayProc {
	t.Helper()
	return startRelay(t, append([]string{
		"STORAGE_URL=" + w.url, "STORAGE_AUTO_MIGRATE=true", "CAPTURE=wal", "RELAY_ID=" + id,
		"PUBLISHER_URL=" + w.nats.URL() + "?timeout=2s", "RETRY_MAX_ATTEMPTS=3",
	}, env...)...)
}

// counts reads the table's counts on a connection of its own, nil while
// the server does not answer (it may be restarting).
func (w *walChaos) counts() map[outbox.Status]int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, w.cluster.URL(w.db))
	if err != nil {
		return nil
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT status, count(*) FROM "+w.tb.Name+" GROUP BY status")
	if err != nil {
		return nil
	}
	defer rows.Close()
	out := map[outbox.Status]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil
		}
		out[outbox.Status(s)] = n
	}
	if rows.Err() != nil {
		return nil
	}
	return out
}

// requireAllDelivered waits for n DELIVERED rows and nothing else, then
// checks the broker and that no attempt was counted.
func (w *walChaos) requireAllDelivered(t *testing.T, n int, procs ...*relayProc) {
	t.Helper()
	var got map[outbox.Status]int
	eventually.True(t, 2*time.Minute, func() bool {
		got = w.counts()
		return got != nil && got[outbox.StatusDelivered] == n && len(got) == 1
	}, func() string {
		var logs strings.Builder
		for _, p := range procs {
			logs.WriteString(tail(p.Log(), 2000))
		}
		return "all delivered, counts " + fmtCounts(got) + "; logs:\n" + logs.String()
	})
	if c := natstest.Count(t, w.stream); c != uint64(n) {
		t.Fatalf("stream holds %d distinct events, want %d", c, n)
	}
	if burned := w.tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts > 0"); burned != 0 {
		t.Errorf("%d events had an attempt counted", burned)
	}
}

// streams reports whether p streams from the slot now: it logged taking
// the slot and is still running.
func streams(p *relayProc) bool {
	select {
	case <-p.exited:
		return false
	default:
	}
	l := p.Log()
	return strings.Contains(l, "streaming from the replication slot") || strings.Contains(l, "made the replication slot") ||
		strings.Contains(l, "made a new replication slot")
}

func TestWALStreamingRelaySIGKILLedThreeTimes(t *testing.T) {
	t.Parallel()
	w := newWALChaos(t, "WALKILL")
	procs := []*relayProc{w.startRelay(t, "r0"), w.startRelay(t, "r1")}
	streaming := func() *relayProc {
		for _, p := range procs {
			if streams(p) {
				return p
			}
		}
		return nil
	}
	eventually.True(t, time.Minute, func() bool { return streaming() != nil }, func() string { return "a relay to stream" })
	const perRound = 5000
	total := 0
	for round := 0; round < 3; round++ {
		w.tb.InsertN(t, perRound, "wal.event")
		total += perRound
		victim := streaming()
		eventually.True(t, 30*time.Second, func() bool {
			c := w.counts()
			return c != nil && c[outbox.StatusDelivered] > total-perRound
		}, func() string { return "this round's deliveries to begin" })
		victim.kill(t) // mid-stream: part of the round is delivered
		procs = append(procs, w.startRelay(t, fmt.Sprintf("r%d", round+2)))
		took := time.Now()
		eventually.True(t, 30*time.Second, func() bool { s := streaming(); return s != nil && s != victim },
			func() string { return "a standby to take over" })
		t.Logf("round %d: a standby streamed %s after the SIGKILL", round, time.Since(took).Round(10*time.Millisecond))
	}
	w.requireAllDelivered(t, total, procs...)
}

func TestWALPostgresRestartMidStream(t *testing.T) {
	t.Parallel()
	w := newWALChaos(t, "WALRESTART")
	p := w.startRelay(t, "r0")
	eventually.True(t, time.Minute, func() bool { return streams(p) }, func() string { return "the relay to stream; log:\n" + p.Log() })
	const n = 10_000
	w.tb.InsertN(t, n/2, "wal.event")
	eventually.True(t, 30*time.Second, func() bool { c := w.counts(); return c != nil && c[outbox.StatusDelivered] > 0 },
		func() string { return "first deliveries" })
	w.cluster.Restart(t)
	p.requireRunning(t)
	w.tb.Pool().Reset()
	eventually.True(t, 30*time.Second, func() bool { return w.counts() != nil }, func() string { return "the server back" })
	w.tb.InsertN(t, n/2, "wal.event")
	w.requireAllDelivered(t, n, p)
	p.requireRunning(t)
	p.stop(t)
}

func TestWALThirtySecondBrokerOutage(t *testing.T) {
	t.Parallel()
	w := newWALChaos(t, "WALOUTAGE")
	p := w.startRelay(t, "r0")
	eventually.True(t, time.Minute, func() bool { return streams(p) }, func() string { return "the relay to stream; log:\n" + p.Log() })
	const n = 6000
	w.tb.InsertN(t, n/3, "wal.event")
	eventually.True(t, 30*time.Second, func() bool { c := w.counts(); return c != nil && c[outbox.StatusDelivered] > 0 },
		func() string { return "first deliveries" })
	w.nats.Stop()
	w.tb.InsertN(t, n/3, "wal.event")
	// The outage lasts a fixed time: that is the fault being injected.
	<-time.After(30 * time.Second)
	w.tb.InsertN(t, n/3, "wal.event")
	w.nats.Restart()
	w.requireAllDelivered(t, n, p)
	p.requireRunning(t)
	if !strings.Contains(p.Log(), "broker unavailable") {
		t.Errorf("the relay never logged the outage:\n%s", tail(p.Log(), 2000))
	}
}

func TestWALSlotDroppedByAnOperatorMidStream(t *testing.T) {
	t.Parallel()
	w := newWALChaos(t, "WALDROP")
	p := w.startRelay(t, "r0")
	eventually.True(t, time.Minute, func() bool { return streams(p) }, func() string { return "the relay to stream; log:\n" + p.Log() })
	const n = 6000
	w.tb.InsertN(t, n/2, "wal.event")
	// An operator ends the stream and drops the slot in one go, before the
	// relay can take it again; what is written next is in no slot.
	slot := w.tb.WAL(pgwal.Config{}).SlotName()
	w.cluster.Exec(t, w.db, strings.ReplaceAll(`DO $$
		DECLARE pid int;
		BEGIN
			LOOP
				SELECT active_pid INTO pid FROM pg_replication_slots WHERE slot_name = '{{slot}}';
				IF pid IS NOT NULL THEN PERFORM pg_terminate_backend(pid); END IF;
				BEGIN
					PERFORM pg_drop_replication_slot('{{slot}}');
					EXIT;
				EXCEPTION WHEN object_in_use THEN PERFORM pg_sleep(0.01);
				END;
			END LOOP;
		END $$`, "{{slot}}", slot))
	w.tb.InsertN(t, n/2, "wal.event")
	w.requireAllDelivered(t, n, p)
	if !strings.Contains(p.Log(), "made a new replication slot") {
		t.Errorf("the relay did not say it made the slot anew:\n%s", tail(p.Log(), 3000))
	}
}

// The database fails over to a physical standby, which (before PostgreSQL
// 17) has no copy of the slot. The relay, following the primary through a
// multi-host URL with target_session_attrs=read-write, says the server
// changed, makes the slot anew on the promoted standby and delivers what
// the old slot never sent from the table: nothing is lost.
func TestWALDatabaseFailoverToAStandby(t *testing.T) {
	t.Parallel()
	primary := pgcluster.Start(t, pgcluster.Options{})
	db := primary.CreateDatabase(t)
	tb := pgtest.NewAt(t, primary.URL(db))
	standby := primary.StartStandby(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "WALFAILOVER", Subjects: []string{"wal.>"}, Duplicates: 10 * time.Minute})
	both := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		primary.Port(), standby.Port(), db)
	p := startRelay(t, "STORAGE_URL="+storage.URLWithTable(both, tb.Name), "STORAGE_AUTO_MIGRATE=true", "CAPTURE=wal",
		"PUBLISHER_URL="+srv.URL()+"?timeout=2s")
	eventually.True(t, time.Minute, func() bool { return streams(p) }, func() string { return "the relay to stream; log:\n" + p.Log() })

	count := func(c *pgcluster.Cluster, status outbox.Status) int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.URL(db))
		if err != nil {
			return -1
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tb.Name+" WHERE status = $1", string(status)).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	tb.InsertN(t, 2000, "wal.event")
	eventually.True(t, time.Minute, func() bool { return count(primary, outbox.StatusDelivered) == 2000 },
		func() string { return "the first events delivered" })
	// Written on the primary and never streamed: the relay's stream waits
	// on a broker that is down, then the primary goes.
	srv.Stop()
	tb.InsertN(t, 500, "wal.event")
	eventually.True(t, time.Minute, func() bool { return count(standby, outbox.StatusPending) == 500 },
		func() string { return "the standby to have the last events" })
	primary.Crash(t)
	standby.Promote(t)
	srv.Restart()
	standby.Exec(t, db, "INSERT INTO "+tb.Name+" (event_id, event_type, payload) SELECT gen_random_uuid(), 'wal.event', '\\x00' FROM generate_series(1, 500)")
	eventually.True(t, 2*time.Minute, func() bool { return count(standby, outbox.StatusDelivered) == 3000 },
		func() string {
			return "every event delivered by way of the promoted standby; log:\n" + tail(p.Log(), 4000)
		})
	if got := natstest.Count(t, st); got != 3000 {
		t.Fatalf("stream holds %d distinct events, want 3000", got)
	}
	for _, line := range []string{"the database server is not the one of the last stream", "made a new replication slot"} {
		if !strings.Contains(p.Log(), line) {
			t.Errorf("the relay did not log %q:\n%s", line, tail(p.Log(), 4000))
		}
	}
}
