package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// A sequence restarted under running relays (TRUNCATE … RESTART IDENTITY)
// gives new rows seq values behind every seq the relay claimed: the
// frontier goes by writers, whose ids never go back, and takes them.
func TestARestartedSequenceLosesNoEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := pgtest.New(t)
	p := storage.ClaimParams{RelayID: "relay", Limit: 10, SweepInterval: time.Hour}
	tb.InsertN(t, 100, "before")
	for {
		b, err := tb.Store.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) == 0 {
			break
		}
		if _, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
			t.Fatal(err)
		}
	}
	tb.Exec(t, "TRUNCATE {{table}} RESTART IDENTITY")
	ids := tb.InsertN(t, 3, "after")
	var got []uuid.UUID
	for range 2 {
		b, err := tb.Store.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, eventIDs(b.Events)...)
	}
	if len(got) != len(ids) {
		t.Fatalf("claimed %v after the sequence restarted, want %v", got, ids)
	}
}

// A producer's transaction that stays open while many batches are claimed
// after its row falls behind the lag limit; once it ends, the relay sees
// the position move and looks behind it at once, without waiting for the
// periodic sweep (an hour here).
func TestALongTransactionsEventIsClaimedOnceItEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := pgtest.New(t)
	tx, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var late uuid.UUID
	if err := tx.QueryRow(ctx, "INSERT INTO "+tb.Name+" (event_type, payload) VALUES ('late', 'x') RETURNING event_id").Scan(&late); err != nil {
		t.Fatal(err)
	}
	tb.InsertN(t, 300, "after")
	p := storage.ClaimParams{RelayID: "relay", Limit: 2, SweepInterval: time.Hour}
	claim := func() []uuid.UUID { return claimDelivered(t, tb.Store, p) }
	for len(claim()) > 0 {
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The position moves once every transaction older than the late one's
	// commit has ended — in a shared cluster, other tests' too — so wait
	// for that, but far less than the hour the sweep would take.
	start := time.Now()
	eventually.True(t, 30*time.Second, func() bool { return slices.Contains(claim(), late) },
		func() string { return "the late event claimed" })
	t.Logf("claimed %s after its commit", time.Since(start))
}

// A producer's INSERT takes its seq before it writes its row, and only the
// write gives its transaction an id: a claim that reads the sequence in
// between must not let the position pass that row. Claims run back to back
// while events are written one transaction at a time (the work inside each
// a few random milliseconds long); each event must be claimed well within
// the periodic sweep's interval (an hour here).
func TestAnEventWrittenWhileClaimsRunIsClaimedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for round := range 20 {
		tb := pgtest.New(t)
		claimed := make(chan uuid.UUID, 1)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 500, SweepInterval: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				for _, e := range b.Events {
					claimed <- e.ID
				}
			}
		}()
		tx, err := tb.Store.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var id uuid.UUID
		if err := tx.QueryRow(ctx, "INSERT INTO "+tb.Name+" (event_type, payload) VALUES ('x', 'y') RETURNING event_id").Scan(&id); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // the rest of the producer's transaction
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-claimed:
			if got != id {
				t.Fatalf("round %d: claimed %s, want %s", round, got, id)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("round %d: the event was not claimed within 5 s of its commit", round)
		}
		close(stop)
		<-done
	}
}

// holdSnapshot opens a REPEATABLE READ transaction that holds a snapshot
// until the test ends: an analytics query, or a replica's
// hot_standby_feedback. Vacuum may then remove no row version made after
// it, so every claimed row leaves dead index entries behind.
func holdSnapshot(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	reader, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Close(ctx) })
	for _, q := range []string{"BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT count(*) FROM pg_class"} { // the query takes the snapshot
		if _, err := reader.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// claimAndDeliver claims a batch with p and marks it delivered, and returns
// its size.
func claimAndDeliver(t *testing.T, s *postgres.Store, p storage.ClaimParams) int {
	t.Helper()
	return len(claimDelivered(t, s, p))
}

// claimDelivered claims a batch with p and marks it delivered, and returns
// its events' ids.
func claimDelivered(t *testing.T, s *postgres.Store, p storage.ClaimParams) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	b, err := s.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) > 0 {
		if _, err := s.Settle(ctx, b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
			t.Fatal(err)
		}
	}
	return eventIDs(b.Events)
}

// planBlocks runs query under EXPLAIN (ANALYZE, BUFFERS) in a transaction it
// rolls back, without sequential scans, and returns the blocks it read.
func planBlocks(t *testing.T, s *postgres.Store, query string, args ...any) int {
	t.Helper()
	return planNodeBlocks(t, s, "", query, args...)
}

// planNodeBlocks is planBlocks for the plan's node named node (its
// "Subplan Name", such as "CTE again"), the whole plan for "".
func planNodeBlocks(t *testing.T, s *postgres.Store, node, query string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+query, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var parsed []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &parsed); err != nil || len(parsed) != 1 {
		t.Fatalf("EXPLAIN: %v\n%s", err, plan)
	}
	found := parsed[0].Plan.find(node)
	if found == nil {
		t.Fatalf("EXPLAIN has no node %q:\n%s", node, plan)
	}
	return found.Hit + found.Read
}

// planNode is a node of EXPLAIN's JSON output.
type planNode struct {
	Name  string     `json:"Subplan Name"`
	Hit   int        `json:"Shared Hit Blocks"`
	Read  int        `json:"Shared Read Blocks"`
	Plans []planNode `json:"Plans"`
}

// find returns the node named name in n's tree, n itself for "".
func (n *planNode) find(name string) *planNode {
	if name == "" || n.Name == name {
		return n
	}
	for i := range n.Plans {
		if f := n.Plans[i].find(name); f != nil {
			return f
		}
	}
	return nil
}

// Claims go forward from the relay's frontier (frontier.go), unordered
// ones and the part of ordered ones that takes the rows without a key
// (claim_unkeyed): with a snapshot held open, neither steps over the dead
// entries every claimed row left in frontier_idx, as a read from the
// beginning would.
func TestClaimsGoForwardFromTheFrontier(t *testing.T) {
	t.Parallel()
	claimsReadFromTheFrontier(t, "CTE ahead", func(t *testing.T, tb *pgtest.Table, n int) { tb.InsertN(t, n, "fresh") })
}

// The same for the rows due again, which claims read from the frontier's
// due place: rows whose created_at the producer set behind the clock are
// all there.
func TestClaimsReadTheDueIndexFromTheFrontier(t *testing.T) {
	t.Parallel()
	claimsReadFromTheFrontier(t, "CTE again", func(t *testing.T, tb *pgtest.Table, n int) {
		tb.Exec(t, "INSERT INTO {{table}} (event_type, payload, created_at) "+
			"SELECT 'app', '\\x00', now() - interval '1 second' FROM generate_series(1, $1)", n)
	})
}

// claimsReadFromTheFrontier drains 6,000 events that insert writes while
// a snapshot is held, in both orderings, then compares the blocks the
// claim's read node (its own CTE: the update of the rows it takes costs
// the same either way) takes from the frontier and from the beginning.
func claimsReadFromTheFrontier(t *testing.T, node string, insert func(t *testing.T, tb *pgtest.Table, n int)) {
	for _, ordering := range []storage.Ordering{storage.OrderingNone, storage.OrderingPartition} {
		t.Run(string(ordering), func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			s := tb.Store
			p := storage.ClaimParams{RelayID: "r", Limit: 500, Ordering: ordering, SweepInterval: time.Hour}
			insert(t, tb, 6000)
			holdSnapshot(t)
			for claimAndDeliver(t, s, p) > 0 {
			}
			insert(t, tb, 10)
			query := s.Query("claim")
			if ordering == storage.OrderingPartition {
				query = s.Query("claim_unkeyed")
			}
			from := planNodeBlocks(t, s, node, query, s.FrontierArgs("r", p.Limit, false)...)
			all := planNodeBlocks(t, s, node, query, s.FrontierArgs("r", p.Limit, true)...)
			t.Logf("%s took %d blocks from the frontier, %d from the beginning", node, from, all)
			if from*3 > all {
				t.Errorf("%s took %d blocks from the frontier, %d from the beginning: it stepped over the claimed rows", node, from, all)
			}
			if n := claimAndDeliver(t, s, p); n != 10 {
				t.Errorf("the next claim took %d events, want the 10 waiting", n)
			}
		})
	}
}

// A held claim that locks rows past the byte limit leaves them as they
// are, locked until the batch is settled. The relay's claims go on
// meanwhile and skip them; the frontier stops before them (their writers
// stay watched), so once the held claim ends the next claims take them,
// with no periodic sweep.
func TestRowsAHeldClaimLeftOverAreClaimedOnceItEnds(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	big := func(n int) pgtest.Event { return pgtest.Event{Payload: []byte(strings.Repeat("p", n))} }
	ids := tb.Insert(t, big(400_000), big(400_000), big(100_000), big(400_000), big(10))
	p := storage.ClaimParams{RelayID: "r", Limit: 100, MaxBytes: 1_000_000, SweepInterval: time.Hour}
	held, err := s.ClaimHeld(ctx, p, time.Minute)
	if err != nil || len(held.Events) != 3 {
		t.Fatalf("ClaimHeld = %d events, %v; want the first 3 (900 KB of 1 MB)", len(held.Events), err)
	}
	// The relay claims on while the batch is at the broker, held claims
	// as its engine's: more claims than its lag limit, for longer than the
	// sequence readings take to settle, none taking the rows left over.
	claimHeld := func() []uuid.UUID {
		b, err := s.ClaimHeld(ctx, p, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) == 0 {
			return nil
		}
		if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
			t.Fatal(err)
		}
		return eventIDs(b.Events)
	}
	claims, began := 0, time.Now()
	eventually.True(t, 10*time.Second, func() bool {
		if got := claimHeld(); len(got) > 0 {
			t.Fatalf("a claim took %v while the held claim had them locked", got)
		}
		claims++
		return claims > 2*8 && time.Since(began) > 1500*time.Millisecond
	}, func() string { return fmt.Sprintf("%d claims", claims) })
	if err := held.Tx.Settle(ctx, storage.Outcome{Delivered: ids[:3]}); err != nil {
		t.Fatal(err)
	}

	p.MaxBytes = 0
	var got []uuid.UUID
	eventually.True(t, 5*time.Second, func() bool {
		got = append(got, claimHeld()...)
		return len(got) >= 2
	}, func() string { return fmt.Sprintf("claimed %v of the left-over rows %v", got, ids[3:]) })
	if !slices.Equal(got, ids[3:]) {
		t.Errorf("claimed %v, want the left-over rows %v", got, ids[3:])
	}
}

// A held claim locks its rows before it knows their sizes; those past its
// byte limit it leaves as they are, locked until its transaction ends. The
// relay's next held claims go on after them meanwhile; once it ends, the
// claims take them, in write order and with no sweep. Once a claim is
// cut, the next lock about twice what fits instead of BATCH_SIZE, and say
// that they stopped at their own limit (Batch.Full).
func TestHeldClaimsLockAboutWhatFitsTheirByteLimit(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	s := tb.Store
	ctx := context.Background()
	events := make([]pgtest.Event, 60)
	for i := range events {
		events[i] = pgtest.Event{Payload: []byte(strings.Repeat("p", 1000))}
	}
	ids := tb.Insert(t, events...)
	p := storage.ClaimParams{RelayID: "r", Limit: 50, MaxBytes: 4500, SweepInterval: time.Hour}
	// hold takes a held batch and counts the rows the relay's open held
	// claims lock (PENDING rows another session cannot lock).
	hold := func() (b storage.HeldBatch, locked int) {
		b, err := s.ClaimHeld(ctx, p, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) > 0 {
			t.Cleanup(b.Tx.Abort) // a no-op once settled
		}
		if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM `+tb.Name+` WHERE status = 'PENDING')
			- (SELECT count(*) FROM (SELECT 1 FROM `+tb.Name+` WHERE status = 'PENDING' FOR UPDATE SKIP LOCKED) AS free)`).Scan(&locked); err != nil {
			t.Fatal(err)
		}
		return b, locked
	}
	var got []uuid.UUID
	settle := func(b storage.HeldBatch) {
		if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
			t.Fatal(err)
		}
		got = append(got, eventIDs(b.Events)...)
	}
	first, locked := hold()
	if len(first.Events) != 4 || locked != 50 || !first.Full {
		t.Fatalf("first claim took %d, locked %d, full %v; want 4 (of 4,500 bytes) of the 50 it may lock, full", len(first.Events), locked, first.Full)
	}
	second, locked := hold()
	if !slices.Equal(eventIDs(second.Events), ids[50:54]) || locked != 50+8 || !second.Full {
		t.Fatalf("second claim, the first open, took %d events, %d rows locked, full %v; want the 4 after the first's 50, 8 more locked (twice what fit), full",
			len(second.Events), locked, second.Full)
	}
	settle(first)
	settle(second)
	for range 20 {
		b, _ := hold()
		if len(b.Events) == 0 {
			break
		}
		settle(b)
	}
	want := slices.Concat(ids[:4], ids[50:54], ids[4:50], ids[54:])
	if !slices.Equal(got, want) {
		t.Fatalf("claimed %d events %v, want all %d: the first batches, then the rows they left in write order", len(got), got, len(want))
	}
	// Locking wrote nothing: every row was written once more, by its
	// settle, and no row went through the due index.
	var due int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+tb.Name+" WHERE available_at > created_at").Scan(&due); err != nil || due != 0 {
		t.Fatalf("%d rows made due again, %v; want none", due, err)
	}
}

// A batch its byte limit cut left rows that a short claim would have taken:
// it must not count as one (one that took every row due), whose reading of
// the sequence moves the relay's claims up to it, past the rows it left. A
// small event followed by one larger than the limit makes a batch of one
// among 32 rows; while a transaction holds the position back (as on any
// busy database), the claims that follow must take the 31 others in write
// order, with no periodic sweep — leased, held and ordered.
func TestABatchCutByItsByteLimitLeavesItsRowsToTheNextClaims(t *testing.T) {
	t.Parallel()
	claims := map[string]func(s *postgres.Store, p storage.ClaimParams) ([]uuid.UUID, bool){
		"leased": func(s *postgres.Store, p storage.ClaimParams) ([]uuid.UUID, bool) {
			b, err := s.Claim(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Settle(context.Background(), b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
				t.Fatal(err)
			}
			return eventIDs(b.Events), b.Full
		},
		"held": func(s *postgres.Store, p storage.ClaimParams) ([]uuid.UUID, bool) {
			b, err := s.ClaimHeld(context.Background(), p, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if b.Tx != nil {
				if err := b.Tx.Settle(context.Background(), storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
					t.Fatal(err)
				}
			}
			return eventIDs(b.Events), b.Full
		},
	}
	claims["ordered"] = func(s *postgres.Store, p storage.ClaimParams) ([]uuid.UUID, bool) {
		p.Ordering = storage.OrderingPartition
		return claims["leased"](s, p)
	}
	for name, claim := range claims {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			events := []pgtest.Event{{Payload: []byte(`"small"`)}, {Payload: []byte(`"` + strings.Repeat("p", 6000) + `"`)}}
			for range 30 {
				events = append(events, pgtest.Event{Payload: []byte(`"small"`)})
			}
			ids := tb.Insert(t, events...)
			tb.HoldWriter(t)

			p := storage.ClaimParams{RelayID: "r", Limit: 100, MaxBytes: 5000, SweepInterval: time.Hour}
			got, full := claim(tb.Store, p)
			if !slices.Equal(got, ids[:1]) || !full {
				t.Fatalf("the first claim took %d events, full %v; want the first alone, full (cut by its byte limit)", len(got), full)
			}
			p.Limit, p.MaxBytes = 2, 0
			for range 40 {
				next, _ := claim(tb.Store, p)
				if len(next) == 0 {
					break
				}
				got = append(got, next...)
			}
			if !slices.Equal(got, ids) {
				t.Errorf("claimed %d of the %d events (%d left to a sweep); want all in write order", len(got), len(ids), len(ids)-len(got))
			}
		})
	}
}
