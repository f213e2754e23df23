package postgres

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The keys' floors, without a database: what a read and a walk do to them,
// the walk order, and when a relay gives up on floors.

func TestAKeysFloorStopsBelowItsFirstEventNotDelivered(t *testing.T) {
	w := newKeyWalk()
	w.saw("k", 50)
	if w.floors["k"] != 0 {
		t.Fatalf("a key met first has floor %d, want 0: its unfinished events may lie anywhere", w.floors["k"])
	}
	w.visited("k", 40, true, true)
	if w.floors["k"] != 39 {
		t.Fatalf("after a walk found the head at 40, floor %d, want 39", w.floors["k"])
	}
	w.saw("k", 60) // a later event: the head is still 40
	if w.floors["k"] != 39 {
		t.Fatalf("a later event moved the floor to %d", w.floors["k"])
	}
	w.saw("k", 30) // committed late, below the floor
	if w.floors["k"] != 29 {
		t.Fatalf("an event at 30 left the floor at %d, want 29", w.floors["k"])
	}
	// A DEAD event at 35 before the head at 45: the floor stays below it,
	// so that, retried, it lies above the floor.
	w.visited("k", 35, true, true)
	if w.floors["k"] != 34 {
		t.Fatalf("a walk whose first event not DELIVERED is DEAD at 35 left the floor at %d, want 34", w.floors["k"])
	}
	w.visited("k", 0, false, false)
	if _, ok := w.waiting["k"]; ok {
		t.Fatal("a key with nothing unfinished still waits")
	}
	if w.floors["k"] != 34 {
		t.Fatalf("a resting key's floor moved to %d", w.floors["k"])
	}
	w.saw("k", 70)
	if _, ok := w.waiting["k"]; !ok || w.floors["k"] != 34 {
		t.Fatalf("a resting key met again: waiting %v, floor %d; want waiting from 34", ok, w.floors["k"])
	}
}

func TestTheWaitingKeysComeInWalkOrder(t *testing.T) {
	w := newKeyWalk()
	for i, k := range []string{"é", "b", "A", "a", "k "} {
		w.saw(k, int64(i+1))
	}
	cases := []struct {
		after string
		most  int
		want  []string
		all   bool
	}{
		{"", 10, []string{"A", "a", "b", "k ", "é"}, true},
		{"a", 10, []string{"b", "k ", "é", "A", "a"}, true},
		{"c", 10, []string{"k ", "é", "A", "a", "b"}, true},
		{"é", 2, []string{"A", "a"}, false},
	}
	for _, c := range cases {
		keys, floors, all := w.candidates(c.after, c.most)
		if !slices.Equal(keys, c.want) || all != c.all || len(floors) != len(keys) {
			t.Errorf("candidates(%q, %d) = %q, all %v; want %q, all %v", c.after, c.most, keys, all, c.want, c.all)
		}
	}
}

func TestAWalkThatRanOutOfKeysGoesOnAfterTheLastItWasGiven(t *testing.T) {
	c := &floorsClaim{walk: newKeyWalk(), keys: []string{"a", "b"}}
	c.visit([]byte("a"), pgtype.Int8{Int64: 5, Valid: true}, true)
	c.visit([]byte("b"), pgtype.Int8{}, false)
	if got := c.end("a", true); got != "b" {
		t.Errorf("a short batch that visited every key given, not every key waiting: next walk after %q, want \"b\"", got)
	}
	if got := c.end("a", false); got != "a" {
		t.Errorf("a full batch: next walk after %q, want the last key it took", got)
	}
	c.all = true
	if got := c.end("a", true); got != "a" {
		t.Errorf("a short batch given every waiting key: next walk after %q, want the last key it took", got)
	}
}

func TestTooManyWaitingKeysMakeTheClaimsWalkTheIndexAWhile(t *testing.T) {
	w := newKeyWalk()
	for i := range maxWaitingKeys + 1 {
		w.saw(strconv.Itoa(i), int64(i+1))
	}
	if !w.overflowing() {
		t.Fatalf("%d keys waiting: not overflowing", len(w.waiting))
	}
	now := time.Now()
	w.walkUntil = now.Add(indexWalkFor(time.Second))
	if w.usable(now) {
		t.Fatal("usable right after overflowing")
	}
	if !w.usable(now.Add(time.Minute)) || len(w.floors) != 0 || len(w.waiting) != 0 {
		t.Fatal("after the index walk the relay did not start over with no keys known")
	}
}

func TestRestingKeysAreForgottenBeyondTheBound(t *testing.T) {
	w := newKeyWalk()
	for i := range maxKnownKeys + 1 {
		k := strconv.Itoa(i)
		w.saw(k, 1)
		w.visited(k, 0, false, false)
	}
	w.saw("busy", 1)
	if w.overflowing() || len(w.floors) != 1 {
		t.Fatalf("%d keys known after forgetting the resting ones, want the waiting one", len(w.floors))
	}
}

// The key frontier's moves (keyFrontier.done): as the claim frontier's,
// with each watched writer read on from where its last read stopped.

func TestTheKeyFrontierWatchesTheWritersItPassedRunning(t *testing.T) {
	var f keyFrontier
	pl := f.plan(time.Hour, time.Now(), 10)
	f.done(pl, keyRead{snap: snapshot{xmin: 100, xmax: 120, running: []uint64{100, 110}}, ahead: 3, last: writePlace{105, 3}})
	if f.at != (writePlace{xid: 120}) {
		t.Errorf("at = %+v after a short read, want (120, 0)", f.at)
	}
	if _, ok := f.watch[100]; !ok {
		t.Error("writer 100, running when passed, is not watched")
	}
	if _, ok := f.watch[110]; !ok {
		t.Error("writer 110, running when passed, is not watched")
	}

	// 110 ended with more rows than one read returns: read on from the
	// last; 100 still runs.
	pl = f.plan(time.Hour, time.Now(), 10)
	f.done(pl, keyRead{snap: snapshot{xmin: 100, xmax: 130, running: []uint64{100}},
		watched: map[uint64]writePlace{110: {xid: 10, seq: 77}}, ahead: 0})
	if got, ok := f.watch[110]; !ok || got.from != 78 {
		t.Errorf("writer 110 after a full read of its rows: watched %v from %d, want from 78, after the last read", ok, got.from)
	}
	if _, ok := f.watch[100]; !ok {
		t.Error("writer 100, still running, was dropped")
	}
	pl = f.plan(time.Hour, time.Now(), 10)
	if i := slices.Index(pl.watch, 110); i < 0 || pl.after[i] != 77 {
		t.Fatalf("the next read of writer 110 starts after %v, want 77", pl.after)
	}
	f.done(pl, keyRead{snap: snapshot{xmin: 130, xmax: 130},
		watched: map[uint64]writePlace{110: {xid: 4, seq: 90}}})
	if len(f.watch) != 0 {
		t.Errorf("watched %v after reads that returned the last rows of ended writers, want none", f.watch)
	}
}

func TestTheKeyFrontierStopsAtTheLastRowOfAFullRead(t *testing.T) {
	var f keyFrontier
	pl := f.plan(time.Hour, time.Now(), 2)
	f.done(pl, keyRead{snap: snapshot{xmin: 100, xmax: 120, running: []uint64{100, 115}}, ahead: 2, last: writePlace{105, 2}})
	if f.at != (writePlace{105, 2}) {
		t.Errorf("at = %+v, want the last row read, (105, 2)", f.at)
	}
	if _, ok := f.watch[115]; ok {
		t.Error("writer 115 lies after the frontier and is watched")
	}
}

// A sweep reads again beside the reads from the frontier, which it does
// not move: from where the frontier was at the sweep before, a read at a
// time, until it reaches the frontier.
func TestAKeySweepReadsAgainFromTheSweepBefore(t *testing.T) {
	var f keyFrontier
	start := time.Now()
	f.plan(time.Second, start, 10)
	f.at = writePlace{200, 1}
	pl := f.plan(time.Second, start.Add(2*time.Second), 10) // sweep: from the beginning of what it has not swept
	if f.at != (writePlace{200, 1}) || pl.sweep == nil || *pl.sweep != (writePlace{}) || pl.start != f.at {
		t.Fatalf("the first sweep: at %+v, plan %+v; want at where it was, and a sweep from (0, 0)", f.at, pl)
	}
	// A full sweep read goes on where it ended; a short one ends the sweep.
	f.done(pl, keyRead{ahead: 0, swept: 10, sweptTo: writePlace{50, 3}, snap: snapshot{xmin: 200, xmax: 200}})
	if f.sweep == nil || *f.sweep != (writePlace{50, 3}) {
		t.Fatalf("after a full sweep read the sweep is at %v, want (50, 3)", f.sweep)
	}
	pl = f.plan(time.Second, start.Add(3*time.Second), 10)
	f.done(pl, keyRead{swept: 4, sweptTo: writePlace{120, 1}, snap: snapshot{xmin: 200, xmax: 200}})
	if f.sweep != nil {
		t.Fatalf("after a short sweep read the sweep is at %v, want over", f.sweep)
	}
	f.at = writePlace{300, 1}
	pl = f.plan(time.Second, start.Add(4*time.Second), 10)
	if pl.sweep == nil || *pl.sweep != (writePlace{200, 1}) {
		t.Fatalf("the second sweep reads from %v, want where the first found the frontier, (200, 1)", pl.sweep)
	}
}
