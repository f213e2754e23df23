package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Issue 42, case 4: a held claim whose connection the database ends
// (pg_terminate_backend; a failover and an idle timeout end it the same
// way) in the middle of one large writer's rows. Its writer is watched
// again, and the claims after it read that writer's rows from the place of
// the lowest row the claim had locked, not from its first row: before,
// every claim after it stepped over the dead index entries of all the
// writer's rows delivered already, and a 200k-event drain with a few such
// kills took 3-4 times as long. Measured by the buffers the next claim's
// statement reads (EXPLAIN (ANALYZE, BUFFERS), rolled back), against those
// of a claim before the kill: no timing.
func TestAHeldClaimTerminatedCostsOneClaimNotAReadOfItsWriter(t *testing.T) {
	t.Parallel()
	const rows, limit, delivered = 20000, 100, 10000
	c := pgcluster.Start(t, pgcluster.Options{})
	for _, end := range []struct {
		name string
		end  func(t *testing.T, tb *pgtest.Table, b storage.HeldBatch)
	}{
		{"pg_terminate_backend", func(t *testing.T, tb *pgtest.Table, b storage.HeldBatch) {
			terminateHeld(t, tb)
			if err := b.Tx.Settle(context.Background(), storage.Outcome{Delivered: eventIDs(b.Events)}); err == nil {
				t.Fatal("the settle of a terminated held claim committed")
			}
		}},
		{"rolled back", func(t *testing.T, tb *pgtest.Table, b storage.HeldBatch) { b.Tx.Abort() }},
	} {
		t.Run(end.name, func(t *testing.T) {
			ctx := context.Background()
			tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
			ids := insertOneWriter(t, tb, rows)
			d := newDrainer(t, tb, true, limit)
			for len(d.got) < delivered {
				if d.claim() == 0 {
					t.Fatalf("a claim took nothing after %d of %d events", len(d.got), rows)
				}
			}
			before := claimBuffers(t, tb, d.p.RelayID, limit)
			b, err := tb.Store.ClaimHeld(ctx, d.p, time.Minute)
			if err != nil || len(b.Events) != limit {
				t.Fatalf("held claim: %d events, %v; want %d", len(b.Events), err, limit)
			}
			end.end(t, tb, b)
			after := claimBuffers(t, tb, d.p.RelayID, limit)
			t.Logf("frontier_idx buffers of the next claim: %d before the held claim, %d after it ended", before, after)
			// The claim after it reads the ended claim's rows, as many as
			// the claim before it read. Before the fix it read the entries
			// of the 10,000 rows delivered as well: 918 buffers against 13.
			if after > 3*before {
				t.Errorf("the claim after the held claim ended read %d buffers of frontier_idx, %d before it: it rereads the writer's delivered rows", after, before)
			}
			d.drain()
			d.requireTaken("the writer's events", ids...)
			if len(d.got) != rows {
				t.Errorf("took %d events, want %d", len(d.got), rows)
			}
		})
	}
}

// insertOneWriter inserts n events in one statement, one writer.
func insertOneWriter(t *testing.T, tb *pgtest.Table, n int) []uuid.UUID {
	t.Helper()
	r, err := tb.Store.Pool().Query(context.Background(), "INSERT INTO "+tb.Name+
		" (event_type, payload) SELECT 'bulk', convert_to(repeat('x', 200), 'UTF8') FROM generate_series(1, $1) RETURNING event_id", n)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for r.Next() {
		var id uuid.UUID
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// terminateHeld ends the one held claim's backend, the only session of the
// table's database idle in a transaction, and waits until it is gone.
func terminateHeld(t *testing.T, tb *pgtest.Table) {
	t.Helper()
	ctx := context.Background()
	var pids []int
	eventually.True(t, 10*time.Second, func() bool {
		pids = pids[:0]
		r, err := tb.Store.Pool().Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle in transaction' AND backend_xid IS NOT NULL`)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var pid int
			if err := r.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		return len(pids) == 1
	}, func() string { return fmt.Sprintf("one held claim's session, found %v", pids) })
	pid := pids[0]
	if _, err := tb.Store.Pool().Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, func() bool {
		var n int
		if err := tb.Store.Pool().QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, func() string { return fmt.Sprintf("backend %d to end", pid) })
}

// claimBuffers returns the shared buffers (hit or read) that relayID's next
// claim of limit reads through the frontier's index, frontier_idx, where the
// fresh and watched arms and their second reads go: its statement
// (claim.sql, as the frontier plans it), run under EXPLAIN (ANALYZE,
// BUFFERS) in a transaction rolled back. (The lease's updates, which a held
// claim does not make, would hide them.)
func claimBuffers(t *testing.T, tb *pgtest.Table, relayID string, limit int) int {
	t.Helper()
	ctx := context.Background()
	tx, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+tb.Store.Query("claim"),
		tb.Store.FrontierArgs(relayID, limit, false)...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []struct{ Plan bufferNode }
	if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("read the plan: %v (%s)", err, out)
	}
	return plan[0].Plan.buffersOf("_frontier_idx")
}

// bufferNode is a node of EXPLAIN's JSON, what claimBuffers reads of it.
type bufferNode struct {
	Index string       `json:"Index Name"`
	Hit   int          `json:"Shared Hit Blocks"`
	Read  int          `json:"Shared Read Blocks"`
	Plans []bufferNode `json:"Plans"`
}

// buffersOf sums the buffers of the scans under n of the index whose name
// ends with index.
func (n bufferNode) buffersOf(index string) int {
	sum := 0
	if strings.HasSuffix(n.Index, index) {
		sum += n.Hit + n.Read
	}
	for _, c := range n.Plans {
		sum += c.buffersOf(index)
	}
	return sum
}
