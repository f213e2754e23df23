package postgres

import "testing"

// The writer frontier's rule without a database (docs/architecture.md,
// "The writer frontier"): the one both the claim frontier and the key
// frontier keep.

func TestAReadReachesItsLastRowOrXmaxNeverPastXmax(t *testing.T) {
	snap := snapshot{xmin: 100, xmax: 120, running: []uint64{110}}
	for _, c := range []struct {
		name string
		last writePlace
		full bool
		want writePlace
	}{
		{"a short read saw every ended writer below xmax", writePlace{105, 3}, false, writePlace{xid: 120}},
		{"a full read saw up to its last row", writePlace{105, 3}, true, writePlace{105, 3}},
		{"a full read ending past xmax stops at xmax", writePlace{1 << 62, 1}, true, writePlace{xid: 120}},
		{"a short read that returned nothing reached xmax", writePlace{}, false, writePlace{xid: 120}},
	} {
		if got := reached(snap, c.last, c.full); got != c.want {
			t.Errorf("%s: reached %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestPassingWatchesTheRunningWritersPassedOnly(t *testing.T) {
	w := writerFrontier{at: writePlace{105, 1}}
	snap := snapshot{xmin: 100, xmax: 130, running: []uint64{100, 105, 110, 120, 125}}
	w.pass(writePlace{120, 0}, snap)
	if w.at != (writePlace{120, 0}) {
		t.Fatalf("at = %+v, want (120, 0)", w.at)
	}
	for x, want := range map[uint64]bool{
		100: false, // behind at before the move: not passed now
		105: true,  // at's own writer: its rows after at were passed
		110: true,
		120: false, // at the new place, whose rows after seq 0 are ahead
		125: false,
	} {
		if _, got := w.watch[x]; got != want {
			t.Errorf("writer %d watched %v, want %v", x, got, want)
		}
	}
	if p := w.watch[110]; p.from != 0 {
		t.Errorf("a writer watched when passed is read from %d, want from its first row (0)", p.from)
	}

	// No move backwards, and no watch from a move that does not happen.
	w.pass(writePlace{110, 5}, snapshot{xmin: 100, xmax: 130, running: []uint64{107}})
	if w.at != (writePlace{120, 0}) {
		t.Errorf("at moved back to %+v", w.at)
	}
	if _, ok := w.watch[107]; ok {
		t.Error("a move that did not happen watched writer 107")
	}
}

func TestAWatchedWriterMovesAndLeavesOnlyOnReadsInWhichItHadEnded(t *testing.T) {
	running := snapshot{xmin: 50, xmax: 60, running: []uint64{50}}
	ended := snapshot{xmin: 60, xmax: 60}
	var w writerFrontier
	w.watchFrom(50, 0)

	w.readOn(50, running, 10, true)
	if p, ok := w.watch[50]; !ok || p.from != 0 {
		t.Fatalf("a read in which writer 50 still ran moved it: watched %v from %d", ok, p.from)
	}
	w.readOn(50, ended, 10, false)
	if p := w.watch[50]; p.from != 10 {
		t.Fatalf("after a read that returned up to seq 9: from %d, want 10", p.from)
	}
	w.readOn(50, ended, 4, false)
	if p := w.watch[50]; p.from != 10 {
		t.Fatalf("a read moved the place back to %d", p.from)
	}
	w.watchFrom(50, 7)
	if p := w.watch[50]; p.from != 7 {
		t.Fatalf("watchFrom(7) left the place at %d, want 7", p.from)
	}
	w.watchFrom(50, 9)
	if p := w.watch[50]; p.from != 7 {
		t.Fatalf("watchFrom(9) moved the place forward to %d", p.from)
	}

	// Held rows pin it: the last of its rows read, it stays.
	p := w.watch[50]
	p.holds = 1
	w.watch[50] = p
	w.readOn(50, ended, 12, true)
	if p, ok := w.watch[50]; !ok || p.from != 12 {
		t.Fatalf("a held writer: watched %v from %d, want still watched, from 12", ok, p.from)
	}
	p = w.watch[50]
	p.holds = 0
	w.watch[50] = p
	w.readOn(50, ended, 12, true)
	if _, ok := w.watch[50]; ok {
		t.Fatal("an ended writer whose last row a read returned is still watched")
	}
}
