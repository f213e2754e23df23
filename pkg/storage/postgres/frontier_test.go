package postgres_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The cases a hostile test found waiting for a sweep under the claim
// positions that went by seq and by time (issue "Every event claimed by
// rule, not by timing"). Each runs on a private, quiet cluster, with
// sweeps off (an hour), leased and held: every committed row must be taken
// by the claims that drain what is visible once it committed, with no
// sweep and no waiting on a clock (docs/architecture.md, "The claim
// frontier").

// frontierModes are the unordered claims the frontier serves.
var frontierModes = []struct {
	name string
	held bool
}{{name: "leased"}, {name: "held", held: true}}

// inEachMode runs test in every frontier mode, each on a table of its own
// in one private cluster, with a drainer claiming limit at a time.
func inEachMode(t *testing.T, limit int, test func(t *testing.T, tb *pgtest.Table, d *drainer)) {
	c := pgcluster.Start(t, pgcluster.Options{})
	for _, mode := range frontierModes {
		t.Run(mode.name, func(t *testing.T) {
			tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
			test(t, tb, newDrainer(t, tb, mode.held, limit))
		})
	}
}

// slowCommits makes every transaction that writes an event of type slow
// with statement (INSERT or UPDATE) sleep for seconds at COMMIT, as
// synchronous replication or a slow fsync would: a deferred trigger.
func slowCommits(t *testing.T, tb *pgtest.Table, statement string, seconds float64) {
	ctx := context.Background()
	for _, q := range []string{
		fmt.Sprintf(`CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN PERFORM pg_sleep(%g); RETURN NULL; END $$`, seconds),
		`CREATE CONSTRAINT TRIGGER slow_commit AFTER ` + statement + ` ON ` + tb.Name + `
		 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.event_type = 'slow')
		 EXECUTE FUNCTION slow_commit()`,
	} {
		if _, err := tb.Store.Pool().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// drainer claims batches of limit and settles them delivered, as one relay.
type drainer struct {
	t    *testing.T
	tb   *pgtest.Table
	held bool
	p    storage.ClaimParams
	got  []uuid.UUID
}

func newDrainer(t *testing.T, tb *pgtest.Table, held bool, limit int) *drainer {
	return &drainer{t: t, tb: tb, held: held, p: storage.ClaimParams{RelayID: "r", Limit: limit, SweepInterval: time.Hour}}
}

// claim makes one claim and returns how many events it took.
func (d *drainer) claim() int {
	ctx := context.Background()
	if d.held {
		b, err := d.tb.Store.ClaimHeld(ctx, d.p, time.Minute)
		if err != nil {
			d.t.Fatal(err)
		}
		if len(b.Events) > 0 {
			if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
				d.t.Fatal(err)
			}
		}
		d.got = append(d.got, eventIDs(b.Events)...)
		return len(b.Events)
	}
	ids := claimDelivered(d.t, d.tb.Store, d.p)
	d.got = append(d.got, ids...)
	return len(ids)
}

// drain claims until a claim takes nothing: what the claims can see then
// is all taken.
func (d *drainer) drain() {
	for d.claim() > 0 {
	}
}

// requireTaken fails unless every id was taken exactly once.
func (d *drainer) requireTaken(what string, ids ...uuid.UUID) {
	d.t.Helper()
	for _, id := range ids {
		if n := countOf(d.got, id); n != 1 {
			d.t.Errorf("%s: event %s taken %d times by the claims after its commit, want once", what, id, n)
		}
	}
}

func countOf(ids []uuid.UUID, id uuid.UUID) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// Case 1: an event whose created_at the producer set behind the
// database's clock (an ORM's timestamps, or a clock read before BEGIN),
// written by a transaction that stays open while other events are
// written and claimed. The old due position passed it at the claim's
// now() less 100 ms.
func TestAnEventStampedBehindTheClockByALongTransactionIsClaimedAtOnce(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	for _, mode := range frontierModes {
		for _, stamp := range []struct{ name, created, available string }{
			{"created_at a second back", "now() - interval '1 second'", "now()"},
			{"created_at from the client clock before BEGIN", "$1::timestamptz", "now()"},
			{"available_at 300 ms after BEGIN, written later", "now()", "now() + interval '300 milliseconds'"},
		} {
			t.Run(mode.name+"/"+stamp.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
				d := newDrainer(t, tb, mode.held, 10)
				clientClock := time.Now()
				tx, err := tb.Store.Pool().Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback(ctx) }()
				if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
					t.Fatal(err)
				}
				// Others write and are claimed while it is open, for
				// longer than any allowance the old positions made.
				began := time.Now()
				var others []uuid.UUID
				for time.Since(began) < 1500*time.Millisecond {
					others = append(others, tb.InsertN(t, 1, "other")...)
					d.drain()
				}
				q := fmt.Sprintf("INSERT INTO %s (event_type, payload, created_at, available_at) VALUES ('late', 'x', %s, %s) RETURNING event_id",
					tb.Name, stamp.created, stamp.available)
				var args []any
				if stamp.created == "$1::timestamptz" {
					args = append(args, clientClock)
				}
				var late uuid.UUID
				if err := tx.QueryRow(ctx, q, args...).Scan(&late); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				// Scheduled 300 ms after BEGIN, it is due by now.
				d.drain()
				d.requireTaken("the late writer's event", late)
				d.requireTaken("the others", others...)
			})
		}
	}
}

// Case 2: a COPY takes each row's seq as the row arrives, but when no
// column default is volatile (the producer names event_id) it buffers rows
// and takes no transaction id until it writes them. Under the old
// positions its first row, sent a while before the rest, was passed once
// the sequence's reading was a second old. No other traffic is needed.
func TestACopyThatStreamsForLongIsClaimedWhole(t *testing.T) {
	t.Parallel()
	inEachMode(t, 10, func(t *testing.T, tb *pgtest.Table, d *drainer) {
		ctx := context.Background()
		conn, err := tb.Store.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		r, w := io.Pipe()
		copied := make(chan error, 1)
		go func() {
			_, err := conn.Conn().PgConn().CopyFrom(ctx, r, "COPY "+tb.Name+" (event_id, event_type, payload) FROM STDIN")
			copied <- err
		}()
		if _, err := io.WriteString(w, uuid.Must(uuid.NewV7()).String()+"\tfirst\t\\\\x01\n"); err != nil {
			t.Fatal(err)
		}
		// The first row is on its way: for two seconds, longer than any
		// allowance the old positions made, another producer writes and
		// the claims take its events.
		var others []uuid.UUID
		for began := time.Now(); time.Since(began) < 2*time.Second; {
			others = append(others, tb.InsertN(t, 1, "other")...)
			d.drain()
		}
		if _, err := io.WriteString(w, uuid.Must(uuid.NewV7()).String()+"\tsecond\t\\\\x02\n"); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		if err := <-copied; err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		d.drain()
		d.requireTaken("the others", others...)
		if len(d.got) != len(others)+2 {
			t.Fatalf("the claims took %d events, want the %d others and both rows of the COPY", len(d.got), len(others))
		}
	})
}

// Case 3: rows of the due index (created_at set behind the clock) taken
// first carried the old seq position past the fresh rows written before
// them in the same statement.
func TestDueRowsTakenFirstDoNotCarryTheFrontierPastFreshOnes(t *testing.T) {
	t.Parallel()
	inEachMode(t, 5, func(t *testing.T, tb *pgtest.Table, d *drainer) {
		ctx := context.Background()
		rows, err := tb.Store.Pool().Query(ctx, "INSERT INTO "+tb.Name+` (event_type, payload, created_at)
				SELECT 'e', 'x', CASE WHEN i <= 14 THEN now() ELSE now() - interval '1 second' END
				FROM generate_series(1, 20) AS i RETURNING event_id`)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uuid.UUID
		for rows.Next() {
			var id uuid.UUID
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		d.drain()
		d.requireTaken("one statement's rows", ids...)
		if len(d.got) != len(ids) {
			t.Errorf("took %d events, want %d", len(d.got), len(ids))
		}
	})
}

// Case 4: a held batch handed back (the broker was down) whose COMMIT is
// slow, as synchronous replication or a slow fsync makes it. The old due
// position passed the release's statement_timestamp() within its 100 ms
// allowance while the commit was still on its way, and the relay's own
// claims found the row only with the full sweep.
func TestAHeldBatchReleasedWithASlowCommitIsClaimedOnceItCommits(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	ctx := context.Background()
	tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
	slowCommits(t, tb, "UPDATE", 0.4)
	slow := tb.InsertN(t, 1, "slow")[0]
	d := newDrainer(t, tb, true, 10)
	b, err := tb.Store.ClaimHeld(ctx, d.p, time.Minute)
	if err != nil || len(b.Events) != 1 {
		t.Fatalf("held claim: %d events, %v; want the slow one", len(b.Events), err)
	}
	released := make(chan error, 1)
	began := time.Now()
	go func() { released <- b.Tx.Settle(ctx, storage.Outcome{Released: []uuid.UUID{slow}}) }()
	// The relay goes on claiming other events while the release commits.
	var others []uuid.UUID
	for time.Since(began) < time.Second {
		others = append(others, tb.InsertN(t, 1, "other")...)
		d.drain()
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 400*time.Millisecond {
		t.Fatalf("the release committed in %s: the trigger did not slow it", took)
	}
	d.drain()
	d.requireTaken("the released event", slow)
	d.requireTaken("the others", others...)
}

// A held claim whose transaction ends without a commit — the relay rolls
// it back, or the database ends it (a failover, pg_terminate_backend, an
// idle timeout) — leaves its rows PENDING as they were, behind the
// relay's own frontier, which had passed them as taken. The relay watches
// their writers again, so its next claim takes them; before, only its
// sweep (or another relay) found them.
func TestAHeldBatchRolledBackIsClaimedAgainAtOnce(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	ctx := context.Background()
	tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
	ids := tb.InsertN(t, 3, "held")
	d := newDrainer(t, tb, true, 10)
	b, err := tb.Store.ClaimHeld(ctx, d.p, time.Minute)
	if err != nil || len(b.Events) != 3 {
		t.Fatalf("held claim: %d events, %v; want the 3", len(b.Events), err)
	}
	b.Tx.Abort()
	d.drain()
	d.requireTaken("the rolled-back batch's events", ids...)
}

// A producer that names the writer itself: an INSERT that sets writer_xid,
// and one that copies rows already delivered (INSERT … SELECT with their
// columns, as a replay from an archive does). Before the schema's writer
// trigger their rows kept the old writers and lay behind the frontier,
// where only a sweep found them.
func TestRowsThatNameTheirWriterAreClaimedAtOnce(t *testing.T) {
	t.Parallel()
	inEachMode(t, 10, func(t *testing.T, tb *pgtest.Table, d *drainer) {
		ctx := context.Background()
		first := tb.InsertN(t, 3, "first")
		d.drain()
		// More transactions, so that the first one's id is well behind.
		tb.InsertN(t, 1, "later")
		tb.InsertN(t, 1, "later")
		d.drain()
		var named, copied []uuid.UUID
		for _, q := range []struct {
			sql  string
			into *[]uuid.UUID
		}{
			{"INSERT INTO " + tb.Name + " (event_type, payload, writer_xid) VALUES ('named', 'x', '1') RETURNING event_id", &named},
			{"INSERT INTO " + tb.Name + ` (event_id, event_type, payload, writer_xid)
			  SELECT gen_random_uuid(), 'copied', payload, writer_xid FROM ` + tb.Name + `
			  WHERE event_type = 'first' RETURNING event_id`, &copied},
		} {
			rows, err := tb.Store.Pool().Query(ctx, q.sql)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id uuid.UUID
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				*q.into = append(*q.into, id)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
		}
		if len(copied) != len(first) {
			t.Fatalf("copied %d rows, want %d", len(copied), len(first))
		}
		d.drain()
		d.requireTaken("the row that set writer_xid", named...)
		d.requireTaken("the rows copied with their writers", copied...)
	})
}
