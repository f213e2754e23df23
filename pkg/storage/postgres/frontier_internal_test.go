package postgres

import (
	"testing"
	"time"
)

// The frontier's moves without a database: each rule of "The claim
// frontier" in docs/architecture.md that frontier.done keeps.

var stamp = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// claimed is a frontierRead of rows ahead (arm 2) at (writer, seq) places,
// all taken, under snap.
func claimed(snap snapshot, places ...writePlace) frontierRead {
	var r frontierRead
	r.snap = snap
	for _, p := range places {
		r.row(2, p.xid, p.seq, time.Time{}, true)
	}
	return r
}

func TestAShortReadMovesTheFrontierToXmaxAndWatchesTheRunning(t *testing.T) {
	var f frontier
	pl := f.plan(time.Hour, stamp)
	f.done(pl, 10, stamp, claimed(snapshot{xmin: 100, xmax: 120, running: []uint64{100, 110}}, writePlace{105, 1}), false)
	if f.at != (writePlace{xid: 120}) {
		t.Errorf("at = %+v, want (120, 0): the read went to the end", f.at)
	}
	for _, x := range []uint64{100, 110} {
		if _, ok := f.watch[x]; !ok {
			t.Errorf("writer %d, running when passed, is not watched", x)
		}
	}
}

func TestAFullReadMovesTheFrontierToItsLastRowOnly(t *testing.T) {
	var f frontier
	pl := f.plan(time.Hour, stamp)
	f.done(pl, 2, stamp, claimed(snapshot{xmin: 100, xmax: 120, running: []uint64{100, 115}}, writePlace{101, 1}, writePlace{105, 2}), false)
	if f.at != (writePlace{105, 2}) {
		t.Errorf("at = %+v, want the last row read, (105, 2)", f.at)
	}
	if _, ok := f.watch[115]; ok {
		t.Error("writer 115 lies after the frontier and is watched")
	}
	if _, ok := f.watch[100]; !ok {
		t.Error("writer 100, running and passed, is not watched")
	}
}

func TestAFullReadEndingFarAheadMovesTheFrontierToXmaxOnly(t *testing.T) {
	var f frontier
	pl := f.plan(time.Hour, stamp)
	f.done(pl, 2, stamp, claimed(snapshot{xmin: 100, xmax: 120, running: []uint64{110}}, writePlace{105, 1}, writePlace{1 << 62, 2}), false)
	if f.at != (writePlace{xid: 120}) {
		t.Errorf("at = %+v, want (120, 0): no writer at or above xmax had an id, so the frontier may not pass it", f.at)
	}
	if _, ok := f.watch[110]; !ok {
		t.Error("writer 110, running and passed, is not watched")
	}
	var k keyFrontier
	k.done(keyFindPlan{most: 2}, keyRead{snap: snapshot{xmin: 100, xmax: 120}, ahead: 2, last: writePlace{1 << 62, 2}})
	if k.at != (writePlace{xid: 120}) {
		t.Errorf("key frontier at = %+v, want (120, 0)", k.at)
	}
}

func TestTheFrontierStopsBeforeARowTheClaimCouldNotTake(t *testing.T) {
	var f frontier
	pl := f.plan(time.Hour, stamp)
	r := claimed(snapshot{xmin: 120, xmax: 120}, writePlace{101, 1})
	r.skipAhead = &writePlace{103, 7}
	f.done(pl, 10, stamp, r, false)
	if f.at != (writePlace{103, 6}) {
		t.Errorf("at = %+v, want just before the skipped row (103, 7)", f.at)
	}
}

func TestADueReadStopsAtItsNowOrBeforeASkippedRow(t *testing.T) {
	var f frontier
	f.done(f.plan(time.Hour, stamp), 10, stamp, frontierRead{snap: snapshot{xmin: 1, xmax: 1}}, false)
	if f.due.at != stamp {
		t.Errorf("due = %+v, want the claim's now() after a short read", f.due)
	}
	later := stamp.Add(time.Second)
	r := frontierRead{snap: snapshot{xmin: 1, xmax: 1}, skipDue: &dueKey{at: stamp.Add(time.Millisecond), seq: 9}}
	f.done(f.plan(time.Hour, later), 10, later, r, false)
	if want := (dueKey{at: stamp.Add(time.Millisecond), seq: 8}); f.due != want {
		t.Errorf("due = %+v, want %+v: just before the row a lock kept", f.due, want)
	}
}

func TestAWatchedWriterIsDroppedOnlyWhenEndedReadAndNotHeld(t *testing.T) {
	var f frontier
	f.done(f.plan(time.Hour, stamp), 10, stamp, frontierRead{snap: snapshot{xmin: 50, xmax: 60, running: []uint64{50}}}, false)
	if _, ok := f.watch[50]; !ok {
		t.Fatal("the running writer is not watched")
	}
	// Still running: kept.
	f.done(f.plan(time.Hour, stamp), 10, stamp, frontierRead{snap: snapshot{xmin: 50, xmax: 70, running: []uint64{50}}}, false)
	if _, ok := f.watch[50]; !ok {
		t.Fatal("a watched writer still running was dropped")
	}
	// Ended, but a held claim leaves one of its rows: kept until released.
	left := frontierRead{snap: snapshot{xmin: 70, xmax: 70}}
	left.row(1, 50, 3, time.Time{}, false)
	release := f.done(f.plan(time.Hour, stamp), 10, stamp, left, true)
	f.done(f.plan(time.Hour, stamp), 10, stamp, frontierRead{snap: snapshot{xmin: 70, xmax: 70}}, false)
	if _, ok := f.watch[50]; !ok {
		t.Fatal("a writer whose row a held claim still holds was dropped")
	}
	release(false)
	// Ended, but a lock kept one of its rows from the read: kept.
	f.done(f.plan(time.Hour, stamp), 10, stamp, frontierRead{snap: snapshot{xmin: 70, xmax: 70}, skipWatched: map[uint64]int64{50: 3}}, false)
	if _, ok := f.watch[50]; !ok {
		t.Fatal("a writer with a row a lock kept from the read was dropped")
	}
	// Ended, read to the end, nothing held: dropped.
	f.done(f.plan(time.Hour, stamp), 10, stamp, frontierRead{snap: snapshot{xmin: 70, xmax: 70}}, false)
	if _, ok := f.watch[50]; ok {
		t.Error("an ended writer whose rows were all read is still watched")
	}
}

func TestAHeldClaimThatEndsWithoutACommitWatchesItsWritersAgain(t *testing.T) {
	var f frontier
	r := claimed(snapshot{xmin: 100, xmax: 120}, writePlace{101, 1}, writePlace{105, 2})
	release := f.done(f.plan(time.Hour, stamp), 10, stamp, r, true)
	if len(f.watch) != 0 {
		t.Fatalf("watched %v after a held claim took its rows, want none", f.watch)
	}
	release(true)
	for _, x := range []uint64{101, 105} {
		if _, ok := f.watch[x]; !ok {
			t.Errorf("writer %d of a rolled-back held claim's rows is not watched", x)
		}
	}
	r = claimed(snapshot{xmin: 130, xmax: 130}, writePlace{140, 1})
	release = f.done(f.plan(time.Hour, stamp), 10, stamp, r, true)
	release(false)
	if _, ok := f.watch[140]; ok {
		t.Error("a committed held claim's writer is watched")
	}
}

func TestASweepMovesNothing(t *testing.T) {
	var f frontier
	f.plan(time.Second, stamp)
	pl := f.plan(time.Second, stamp.Add(2*time.Second))
	if !pl.sweep {
		t.Fatal("no sweep after the interval")
	}
	f.done(pl, 10, stamp, claimed(snapshot{xmin: 900, xmax: 900}, writePlace{800, 1}), false)
	if f.at != (writePlace{}) || !f.due.at.IsZero() {
		t.Errorf("a sweep moved the frontier to %+v, due %+v", f.at, f.due)
	}
}

// watchedRows is a frontierRead of watched rows (arm 1), all taken, of
// writer x at seqs, under snap.
func watchedRows(snap snapshot, x uint64, seqs ...int64) frontierRead {
	var r frontierRead
	r.snap = snap
	for _, s := range seqs {
		r.row(1, x, s, time.Time{}, true)
	}
	return r
}

func TestAnAbandonedHeldClaimWatchesItsWriterFromItsLowestRow(t *testing.T) {
	var f frontier
	ended := snapshot{xmin: 200, xmax: 200}
	// The ahead arm goes through writer 100's rows, two claims of two.
	f.done(f.plan(time.Hour, stamp), 2, stamp, claimed(ended, writePlace{100, 1}, writePlace{100, 2}), true)(false)
	release := f.done(f.plan(time.Hour, stamp), 2, stamp, claimed(ended, writePlace{100, 3}, writePlace{100, 4}), true)
	release(true)
	if w, ok := f.watch[100]; !ok || w.from != 3 {
		t.Fatalf("watch[100] = %+v, %v; want from 3, the lowest row the abandoned claim locked", w, ok)
	}
	pl := f.plan(time.Hour, stamp)
	if len(pl.watch) != 1 || pl.watchFrom[0] != 3 {
		t.Fatalf("planned watch %v from %v, want 100 from 3", pl.watch, pl.watchFrom)
	}
	// The watched arm takes them again, up to its limit: the place moves
	// on behind them.
	f.done(pl, 2, stamp, watchedRows(ended, 100, 3, 4), true)(false)
	if w := f.watch[100]; w.from != 5 {
		t.Errorf("from = %d after the watched arm took 3 and 4, want 5", w.from)
	}
	// Abandoned again, that claim's rows go back, and never forward.
	release = f.done(f.plan(time.Hour, stamp), 2, stamp, watchedRows(ended, 100, 5, 6), true)
	if w := f.watch[100]; w.from != 7 {
		t.Errorf("from = %d after the watched arm took 5 and 6, want 7", w.from)
	}
	release(true)
	if w := f.watch[100]; w.from != 5 {
		t.Errorf("from = %d after the claim of 5 and 6 was abandoned, want 5", w.from)
	}
	// Read to the end, nothing held, ended: dropped.
	f.done(f.plan(time.Hour, stamp), 10, stamp, watchedRows(ended, 100, 5, 6), false)
	if _, ok := f.watch[100]; ok {
		t.Error("a writer whose rows were all read from its place is still watched")
	}
}

func TestAWatchedWritersPlaceStopsAtARowALockKeptFromTheArm(t *testing.T) {
	var f frontier
	ended := snapshot{xmin: 200, xmax: 200}
	f.watch = map[uint64]watchPlace{100: {}, 110: {}}
	// At its limit: rows of 100 and 110 returned, the first row a lock
	// kept from the arm is 100's 4. 110's place cannot move: rows of it
	// may have been skipped too, past what the second read saw.
	r := watchedRows(ended, 100, 1, 2, 3, 5)
	r.row(1, 110, 20, time.Time{}, true)
	r.skipWatched = map[uint64]int64{100: 4}
	f.done(f.plan(time.Hour, stamp), 5, stamp, r, false)
	if w := f.watch[100]; w.from != 4 {
		t.Errorf("100 from %d, want 4: the row a lock kept", w.from)
	}
	if w := f.watch[110]; w.from != 0 {
		t.Errorf("110 from %d, want 0: after the first skipped row nothing is known", w.from)
	}
	// Read to the end: every skipped row is known, each writer moves.
	r = watchedRows(ended, 100, 5)
	r.row(1, 110, 20, time.Time{}, true)
	r.row(1, 110, 21, time.Time{}, true)
	r.skipWatched = map[uint64]int64{100: 4}
	f.done(f.plan(time.Hour, stamp), 10, stamp, r, false)
	if w := f.watch[100]; w.from != 4 {
		t.Errorf("100 from %d, want 4 still", w.from)
	}
	if w, ok := f.watch[110]; ok {
		t.Errorf("110 still watched from %d, its rows all read", w.from)
	}
	// A running writer's place does not move (its rows are not visible).
	f.watch[120] = watchPlace{}
	f.done(f.plan(time.Hour, stamp), 10, stamp, watchedRows(snapshot{xmin: 120, xmax: 130, running: []uint64{120}}, 120, 1), false)
	if w := f.watch[120]; w.from != 0 {
		t.Errorf("running 120 from %d, want 0", w.from)
	}
}

func TestRowsAHeldClaimLeftAreReadAgainFromTheLowest(t *testing.T) {
	var f frontier
	ended := snapshot{xmin: 200, xmax: 200}
	f.watch = map[uint64]watchPlace{100: {from: 1}}
	r := watchedRows(ended, 100, 1, 2)
	r.row(1, 100, 3, time.Time{}, false)
	r.row(1, 100, 4, time.Time{}, false)
	release := f.done(f.plan(time.Hour, stamp), 10, stamp, r, true)
	if w := f.watch[100]; w.from != 3 || w.holds != 1 {
		t.Errorf("watch[100] = %+v, want from 3, held once: the rows left", w)
	}
	// Another claim reads past them (its own lock keeps them from it, and
	// a bug could move on): the release sets the place back.
	f.watch[100] = watchPlace{from: 9, holds: 1}
	release(false)
	if w := f.watch[100]; w.from != 3 || w.holds != 0 {
		t.Errorf("watch[100] = %+v after the release, want from 3, not held", w)
	}
}
