package postgres

import (
	"fmt"
	"testing"
	"time"
)

// String makes the tests' messages readable.
func (k dueKey) String() string { return fmt.Sprintf("(%s, %d)", k.at.Format(time.StampMicro), k.seq) }

// The due position's rules, without a database: what a claim's rows say of
// how far it read the due index, and where the next claims read it from.

func TestAClaimReachesWhatItReadOfTheDueIndex(t *testing.T) {
	stamp := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	last := dueKey{at: stamp.Add(-time.Minute), seq: 7}
	cases := []struct {
		name string
		read claimRead
		want dueKey
	}{
		{"read every due row", claimRead{dueLast: last, dueTaken: 3, dueLocked: 3}, dueKey{at: stamp.Add(-dueSettle)}},
		{"nothing due", claimRead{}, dueKey{at: stamp.Add(-dueSettle)}},
		{"stopped at the limit", claimRead{dueLast: last, dueTaken: 10, dueLocked: 10}, last},
		// Rows it locked and left (the byte limit) lie after the last
		// it took: the next claim must read them.
		{"left some it locked", claimRead{dueLast: last, dueTaken: 2, dueLocked: 3}, last},
	}
	for _, c := range cases {
		if got := c.read.dueReached(stamp, 10); got != c.want {
			t.Errorf("%s: reached %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTheDuePositionMovesWithTheMarks(t *testing.T) {
	now := time.Now()
	p := &position{sweptAt: now}
	at := func(s int) dueKey { return dueKey{at: now.Add(time.Duration(s) * time.Second)} }

	// A writer that runs across the claims (xid 100) holds the marks
	// back: the claims read from lagLimit claims back, not from the
	// beginning, and not from where the latest ended.
	for i := 1; i <= lagLimit+2; i++ {
		pl := p.next(500, time.Hour, now)
		p.done(pl, 100, uint64(101+i), 0, 0, at(i), now)
	}
	if got, want := p.next(500, time.Hour, now).dueFrom, at(3); got != want {
		t.Errorf("with a writer holding the marks back, claims read from %v, want %v (%d claims back)", got, want, lagLimit)
	}
	if p.dueSafe != (dueKey{}) {
		t.Errorf("the safe due position moved to %v while the writer ran", p.dueSafe)
	}

	// Once it has ended, every mark below the oldest running transaction
	// holds, and what the claims skipped while it ran (its rows, behind
	// where they read from) is swept at once.
	pl := p.next(500, time.Hour, now)
	p.done(pl, 200, 201, 0, 0, at(20), now)
	pl = p.next(500, time.Hour, now)
	if !pl.sweep || !pl.prompted || pl.dueFrom != (dueKey{}) {
		t.Errorf("after the writer ended the claim is %+v, want a sweep from where the claims began skipping", pl)
	}
	p.done(pl, 250, 251, 0, 0, at(21), now)
	if p.dueSafe != at(20) {
		t.Errorf("the safe due position is %v after the writer ended, want %v", p.dueSafe, at(20))
	}
	if got := p.next(500, time.Hour, now).dueFrom; got != at(20) {
		t.Errorf("claims read from %v, want the safe position %v", got, at(20))
	}

	// A sweep reads from where the last complete one left off, the safe
	// position then, and is complete only once its due read reached where
	// claims read from.
	later := now.Add(2 * time.Hour)
	sweep := p.next(500, time.Hour, later)
	if !sweep.sweep || sweep.dueFrom != at(20) {
		t.Fatalf("after the interval the claim is %+v, want a sweep from %v", sweep, at(20))
	}
	p.done(sweep, 300, 301, 0, 0, at(5), later)
	if again := p.next(500, time.Hour, later); !again.sweep {
		t.Errorf("a sweep that stopped at %v, before %v, counted as complete", at(5), at(20))
	}
	sweep = p.next(500, time.Hour, later)
	p.done(sweep, 300, 301, 0, 0, at(30), later)
	if next := p.next(500, time.Hour, later); next.sweep || p.dueSweepFrom != at(21) {
		t.Errorf("after a complete sweep: next claim %+v, sweeps from %v; want a claim and %v", next, p.dueSweepFrom, at(21))
	}
}
