package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The cases a hostile user found where the claims' argument assumed what
// a row's data or the server did not give it (issue "The promise under
// hostile data and operations"). Each fails on the build before it.

// Case 5: beside the log, an ordered claim of one row split its batch as
// a plain half, 1/2 = 0 for the rows without a key: an unkeyed event due
// again (failed, released) was never claimed while a key waited. Every
// split gives each part a turn.
func TestOrderedClaimsOfOneRowBesideTheLogTakeUnkeyedEventsInTurn(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			tb := pgtest.New(t)
			ctx := context.Background()
			ids := tb.Insert(t, pgtest.Event{}, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"})
			// The log published them all and each came back to the claims.
			for _, id := range ids {
				if n, err := tb.Store.Record(ctx, storage.Outcome{Failed: []storage.Failure{{ID: id, Error: "try again"}}}); err != nil || n.Failed != 1 {
					t.Fatalf("Record = %d, %v", n.Failed, err)
				}
			}
			tb.Exec(t, "UPDATE "+tb.Name+" SET available_at = created_at + interval '1 microsecond'")
			p := storage.ClaimParams{RelayID: "r", Limit: limit, Ordering: storage.OrderingPartition,
				Fresh: storage.FreshEvents{ToLog: true}, SweepInterval: time.Hour}
			unkeyed := false
			for range 4 {
				for _, id := range claimDelivered(t, tb.Store, p) {
					unkeyed = unkeyed || id == ids[0]
				}
			}
			if !unkeyed {
				t.Fatalf("four claims of %d took every keyed event but not the one without a key: %v", limit, tb.Counts(t))
			}
			if c := tb.Counts(t); c[outbox.StatusDelivered] != len(ids) {
				t.Fatalf("counts %v after four claims of %d, want all %d delivered", c, limit, len(ids))
			}
		})
	}
}

// farAhead is a writer id no transaction of a test cluster reaches: 2^62,
// as an UPDATE or a replica from a busier cluster may leave in the column.
const farAhead = "4611686018427387904"

// queryIDs runs sql, each of whose rows is an event id, on tb's pool
// ({{table}} is its name; statements ending a line with ; run before it,
// in one transaction).
func queryIDs(t *testing.T, tb *pgtest.Table, sql string) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var ids []uuid.UUID
	err := pgx.BeginFunc(ctx, tb.Pool(), func(tx pgx.Tx) error {
		stmts := strings.Split(strings.ReplaceAll(sql, "{{table}}", tb.Name), ";\n")
		for _, stmt := range stmts[:len(stmts)-1] {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, stmts[len(stmts)-1])
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return ids
}

// Case 1: a PENDING row whose writer_xid an UPDATE set at or above every
// claim snapshot's xmax ended a full fresh read; the frontier moved to
// it, and every transaction after lay behind it, where only a sweep found
// its rows. The writer trigger now fires on UPDATE too, so the column
// holds the updating transaction; with the trigger disabled (by hand, or
// by a restore with --disable-triggers) the frontier still stops at xmax
// and takes the row like any fresh one.
func TestAWriterUpdatedFarAheadDoesNotStallLaterEvents(t *testing.T) {
	t.Parallel()
	for _, trigger := range []string{"writer trigger", "writer trigger disabled"} {
		t.Run(trigger, func(t *testing.T) {
			inEachMode(t, 10, func(t *testing.T, tb *pgtest.Table, d *drainer) {
				if trigger == "writer trigger disabled" {
					tb.Exec(t, "ALTER TABLE {{table}} DISABLE TRIGGER USER")
				}
				first := tb.InsertN(t, 9, "first")
				ahead := tb.InsertN(t, 1, "ahead")
				tb.Exec(t, "UPDATE {{table}} SET writer_xid = '"+farAhead+"' WHERE event_id = $1", ahead[0])
				d.drain()
				d.requireTaken("the first rows", first...)
				d.requireTaken("the row updated far ahead", ahead...)
				for i := range 3 {
					later := tb.InsertN(t, 1, "later")
					d.drain()
					d.requireTaken(fmt.Sprintf("event %d after the row far ahead", i), later...)
				}
			})
		})
	}
}

// Case 1, the other ways a row's writer is written after its insert. Each
// row below lies behind the frontier (its writer passed, or 0) or far
// ahead of it, as the statement or the replica left it; each was claimed
// only by a sweep, or stalled the claims after it. The writer trigger
// fires on UPDATE and ALWAYS, under a logical replica's apply as well, so
// the column holds the transaction that made the row PENDING.
func TestRowsAnUpdateOrAReplicaWroteAreClaimedAtOnce(t *testing.T) {
	t.Parallel()
	inEachMode(t, 10, func(t *testing.T, tb *pgtest.Table, d *drainer) {
		scheduled := tb.Insert(t, pgtest.Event{AvailableIn: time.Hour})
		delivered := tb.InsertN(t, 1, "delivered")
		d.drain()
		d.requireTaken("the row to be retried by hand", delivered...)
		// More transactions, so that the frontier is well past the rows'
		// writers.
		for range 3 {
			tb.InsertN(t, 1, "between")
			d.drain()
		}
		zeroed := queryIDs(t, tb, `INSERT INTO {{table}} (event_type, payload) VALUES ('zeroed', 'x');
			UPDATE {{table}} SET writer_xid = '0' WHERE event_type = 'zeroed' RETURNING event_id`)
		retried := queryIDs(t, tb, `UPDATE {{table}} SET status = 'PENDING', delivered_at = NULL
			WHERE event_type = 'delivered' RETURNING event_id`)
		// Moved earlier than the claims' due place, which had passed it.
		moved := queryIDs(t, tb, `UPDATE {{table}} SET available_at = created_at + interval '1 microsecond'
			WHERE event_id = '`+scheduled[0].String()+`' RETURNING event_id`)
		replicated := queryIDs(t, tb, `SET LOCAL session_replication_role = replica;
			INSERT INTO {{table}} (event_type, payload, writer_xid)
			VALUES ('replicated', 'behind', '5'), ('replicated', 'ahead', '`+farAhead+`') RETURNING event_id`)
		d.drain()
		d.requireTaken("the row updated to writer 0 by its own transaction", zeroed...)
		for _, id := range retried {
			if n := countOf(d.got, id); n != 2 {
				t.Errorf("the DELIVERED row set back to PENDING by hand: taken %d times, want twice", n)
			}
		}
		d.requireTaken("the scheduled row moved earlier", moved...)
		d.requireTaken("the rows applied as a replica applies them", replicated...)
		later := tb.InsertN(t, 3, "later")
		d.drain()
		d.requireTaken("the events after them", later...)
	})
}

// Case 2: a transaction that has executed NOTIFY cannot PREPARE
// TRANSACTION, and the notify trigger made every transaction that wrote
// an event one: two-phase producers (XA, JTA) could not write any. With
// outbox.notify off they can; no notification wakes the relay then, so
// the listener watches the prepared transactions and wakes it when one
// ends, and the claim that follows takes its events.
func TestATwoPhaseProducersEventWakesTheRelayAtCommitPrepared(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{Settings: []string{"max_prepared_transactions = 5"}})
	tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
	ctx := context.Background()
	var id uuid.UUID
	conn, err := tb.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"BEGIN", "SET LOCAL outbox.notify = off",
		"INSERT INTO " + tb.Name + " (event_type, payload) VALUES ('xa', 'x') RETURNING event_id", "PREPARE TRANSACTION 'xa-1'"} {
		if strings.HasPrefix(q, "INSERT") {
			err = conn.QueryRow(ctx, q).Scan(&id)
		} else {
			_, err = conn.Exec(ctx, q)
		}
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Release()
	t.Cleanup(func() { _, _ = tb.Pool().Exec(context.Background(), "ROLLBACK PREPARED 'xa-1'") })

	woken := make(chan struct{}, 16)
	listening, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- tb.Store.Listen(listening, func() {
			select {
			case woken <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() { stop(); <-done })
	wake := func(what string) {
		t.Helper()
		select {
		case <-woken:
		case err := <-done:
			t.Fatalf("%s: Listen ended: %v", what, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no wakeup in 30 s", what)
		}
	}
	wake("listening")
	d := newDrainer(t, tb, false, 10)
	d.drain()
	if len(d.got) != 0 {
		t.Fatalf("claimed %d events of a transaction still prepared", len(d.got))
	}
	if _, err := tb.Pool().Exec(ctx, "COMMIT PREPARED 'xa-1'"); err != nil {
		t.Fatal(err)
	}
	wake("after COMMIT PREPARED")
	d.drain()
	d.requireTaken("the prepared transaction's event", id)
}
