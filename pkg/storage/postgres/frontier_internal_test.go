package postgres

import (
	"testing"
	"time"
)

// The frontier's moves without a database: each rule of "The claim
// frontier" in docs/architecture.md that frontier.done keeps.

var stamp = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// claimed is a frontierRead of fresh rows (arm 2) at (writer, seq) places,
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
	k.done(keyFindPlan{most: 2}, keyRead{snap: snapshot{xmin: 100, xmax: 120}, fresh: 2, last: writePlace{1 << 62, 2}})
	if k.at != (writePlace{xid: 120}) {
		t.Errorf("key frontier at = %+v, want (120, 0)", k.at)
	}
}

func TestTheFrontierStopsBeforeARowTheClaimCouldNotTake(t *testing.T) {
	var f frontier
	pl := f.plan(time.Hour, stamp)
	r := claimed(snapshot{xmin: 120, xmax: 120}, writePlace{101, 1})
	r.skipFresh = &writePlace{103, 7}
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
	f.done(f.plan(time.Hour, stamp), 10, stamp, frontierRead{snap: snapshot{xmin: 70, xmax: 70}, skipWatched: map[uint64]bool{50: true}}, false)
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
