package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// NextDue finds the earliest row due after the last claim through
// due_at_idx, on a plain and on a partitioned table: not a row due by the
// claim, and a row that came due since with a wait of 0.
func TestNextDueIsTheEarliestRowDueAfterTheLastClaim(t *testing.T) {
	t.Parallel()
	for name, tb := range map[string]*pgtest.Table{"plain": pgtest.New(t), "partitioned": pgtest.NewPartitioned(t, "day")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var claimedAt time.Time
			if err := tb.Store.Pool().QueryRow(ctx, "SELECT now()").Scan(&claimedAt); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := tb.Store.NextDue(ctx, claimedAt); err != nil || ok {
				t.Fatalf("empty table: NextDue ok=%v err=%v, want nothing", ok, err)
			}
			tb.InsertN(t, 1, "due.now")
			if _, ok, err := tb.Store.NextDue(ctx, claimedAt); err != nil || ok {
				t.Fatalf("only a row due now: NextDue ok=%v err=%v, want nothing", ok, err)
			}
			tb.Insert(t, pgtest.Event{AvailableIn: time.Hour}, pgtest.Event{AvailableIn: time.Minute})
			wait, ok, err := tb.Store.NextDue(ctx, claimedAt)
			if err != nil || !ok {
				t.Fatalf("NextDue ok=%v err=%v, want the row a minute ahead", ok, err)
			}
			// The relay's clock wrote available_at, the database's measures
			// the wait; they are one machine's here.
			if wait <= 50*time.Second || wait > time.Minute+time.Second {
				t.Fatalf("NextDue = %s, want about a minute", wait)
			}
			// A row whose created_at is as far ahead as its available_at is
			// outside due_at_idx: the poll finds it, NextDue does not.
			id := tb.Insert(t, pgtest.Event{})[0]
			tb.Set(t, id, "available_at = now() + interval '1 second', created_at = now() + interval '1 second'")
			if wait, _, _ := tb.Store.NextDue(ctx, claimedAt); wait < 50*time.Second {
				t.Fatalf("NextDue = %s: it found a row outside due_at_idx", wait)
			}
			// A row that came due after the claim, before the question: the
			// claim never saw it due, so it is due at once. Asked after
			// now() alone, it waited for the poll: the 30–50 ms tail of
			// make bench MODE=scheduled.
			late := tb.Insert(t, pgtest.Event{})[0]
			tb.Set(t, late, "available_at = created_at + interval '1 microsecond'")
			var cameDue time.Time
			if err := tb.Store.Pool().QueryRow(ctx, "SELECT available_at FROM "+tb.Name+" WHERE event_id = $1", late).Scan(&cameDue); err != nil {
				t.Fatal(err)
			}
			if wait, ok, err := tb.Store.NextDue(ctx, cameDue.Add(-time.Microsecond)); err != nil || !ok || wait != 0 {
				t.Fatalf("a row due since the claim: NextDue = %s, %v, %v; want 0, true", wait, ok, err)
			}
			if wait, _, _ := tb.Store.NextDue(ctx, cameDue); wait < 50*time.Second {
				t.Fatalf("NextDue after a claim that saw the row due = %s, want the row a minute ahead", wait)
			}
		})
	}
}
