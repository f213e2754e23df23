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

func TestAKeysFloorOnlyGoesDownWhenAnEventTurnsUpBelowIt(t *testing.T) {
	w := newKeyWalk()
	w.saw("k", 50)
	if w.floors["k"] != 0 {
		t.Fatalf("a key met first has floor %d, want 0: its unfinished events may lie anywhere", w.floors["k"])
	}
	w.visited("k", 40, true)
	if w.floors["k"] != 39 {
		t.Fatalf("after a walk found the head at 40, floor %d, want 39", w.floors["k"])
	}
	w.saw("k", 60) // a later event: the head is still 40
	if w.floors["k"] != 39 {
		t.Fatalf("a later event moved the floor to %d", w.floors["k"])
	}
	w.saw("k", 30) // committed late, or handed back, below the floor
	if w.floors["k"] != 29 {
		t.Fatalf("an event at 30 left the floor at %d, want 29", w.floors["k"])
	}
	w.visited("k", 0, false)
	if _, ok := w.waiting["k"]; ok {
		t.Fatal("a key with nothing unfinished still waits")
	}
	if w.floors["k"] != 29 {
		t.Fatalf("a resting key's floor moved to %d", w.floors["k"])
	}
	w.saw("k", 70)
	if _, ok := w.waiting["k"]; !ok || w.floors["k"] != 29 {
		t.Fatalf("a resting key met again: waiting %v, floor %d; want waiting from 29", ok, w.floors["k"])
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
	c.visit([]byte("a"), pgtype.Int8{Int64: 5, Valid: true})
	c.visit([]byte("b"), pgtype.Int8{})
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
		w.visited(k, 0, false)
	}
	w.saw("busy", 1)
	if w.overflowing() || len(w.floors) != 1 {
		t.Fatalf("%d keys known after forgetting the resting ones, want the waiting one", len(w.floors))
	}
}
