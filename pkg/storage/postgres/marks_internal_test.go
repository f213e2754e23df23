package postgres

import (
	"testing"
	"time"
)

// A mark moves the position only once it has a bound, an id the database
// gave one of the relay's transactions after the mark's snapshot, and
// every transaction below that id has ended; a snapshot's xmax is no such
// id (a running transaction above every ended one is in no snapshot's
// list). A claim without an id of its own leaves its mark waiting, and
// the next claim's id bounds it.
func TestAMarkWaitsForABound(t *testing.T) {
	now := time.Now()
	p := &position{sweptAt: now, claimed: 100, frontier: 100}
	claim := func(xmin, bound uint64) plan {
		pl := p.next(10, time.Hour, now)
		p.done(pl, xmin, bound, 0, 0, dueKey{}, now)
		return pl
	}
	if pl := p.next(10, time.Hour, now); !p.needsBound(pl) {
		t.Fatalf("a claim whose mark would move the position to %d needs no id of its own", pl.claimedBefore)
	}
	claim(1000, 0)
	claim(1000, 0)
	if p.safe != 0 || len(p.marks) != 1 {
		t.Fatalf("without a bound: safe %d, marks %+v; want 0 and one mark waiting", p.safe, p.marks)
	}
	claim(60, 70) // bounds the waiting mark; transaction 60 still runs
	if p.safe != 0 {
		t.Fatalf("safe moved to %d while a transaction below the bound runs", p.safe)
	}
	if pl := p.next(10, time.Hour, now); p.needsBound(pl) {
		t.Errorf("a claim needs an id of its own although a bounded mark covers seq %d", pl.claimedBefore)
	}
	claim(70, 0)
	if p.safe != 100 {
		t.Errorf("safe is %d once every transaction below the bound ended, want 100", p.safe)
	}
}
