package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// NextDue finds the earliest row not due yet through due_at_idx, on a plain
// and on a partitioned table, and never a row already due.
func TestNextDueIsTheEarliestRowNotDueYet(t *testing.T) {
	t.Parallel()
	for name, tb := range map[string]*pgtest.Table{"plain": pgtest.New(t), "partitioned": pgtest.NewPartitioned(t, "day")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if _, ok, err := tb.Store.NextDue(ctx); err != nil || ok {
				t.Fatalf("empty table: NextDue ok=%v err=%v, want nothing", ok, err)
			}
			tb.InsertN(t, 1, "due.now")
			if _, ok, err := tb.Store.NextDue(ctx); err != nil || ok {
				t.Fatalf("only a row due now: NextDue ok=%v err=%v, want nothing", ok, err)
			}
			tb.Insert(t, pgtest.Event{AvailableIn: time.Hour}, pgtest.Event{AvailableIn: time.Minute})
			wait, ok, err := tb.Store.NextDue(ctx)
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
			if wait, _, _ := tb.Store.NextDue(ctx); wait < 50*time.Second {
				t.Fatalf("NextDue = %s: it found a row outside due_at_idx", wait)
			}
		})
	}
}
