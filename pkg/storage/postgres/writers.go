package postgres

import "slices"

// writerFrontier is the rule both claim frontiers rest on (docs/
// architecture.md, "The writer frontier"): the claim frontier of
// frontier.go, which adds the due rows and the claims' locks, and the key
// frontier of keys.go, which reads the keyed rows. In one sentence: at
// moves only over what a read saw in one snapshot, never past its xmax;
// the writers it passes that the snapshot lists as running are watched;
// a watched writer's rows are read from its place, which moves only over
// rows read in a snapshot in which the writer had ended, and the writer
// leaves the watch only when such a read returned the last of its rows.
type writerFrontier struct {
	// at is the place in (writer, seq) order that the reads ahead go
	// on from.
	at writePlace
	// watch are the writers passed while they were running, and any the
	// claim frontier watches again (rows a claim left or abandoned), each
	// with its place.
	watch map[uint64]watchPlace
}

// watchPlace is where a watched writer's rows are read from, and how many
// held claims still hold rows of it that they left. The writer's rows
// below from are behind the frontier, as if it were not watched: the other
// reads have them. from only moves forward over rows read in a snapshot in
// which the writer had ended, and, in the claim frontier, back to the
// lowest row a claim left or, ending without a commit, had locked:
// rereading from the writer's first row at every claim stepped over the
// dead index entries of every row of it already delivered (issue 42).
type watchPlace struct {
	holds int
	from  int64
}

// writePlace is a place in writer order: writer, then seq.
type writePlace struct {
	xid uint64
	seq int64
}

func (a writePlace) before(b writePlace) bool {
	return a.xid < b.xid || a.xid == b.xid && a.seq < b.seq
}

// reached is how far a read of the rows ahead, in writer order, in snapshot
// snap, saw every row it may pass: up to the last row it returned when it
// stopped at its limit (full), up to (xmax, 0) when it read to the end.
// Never past (xmax, 0): every writer below it that had ended had all its
// rows visible, and a writer with no id yet will get one at or above it.
// A row beyond names a writer that had no id when the snapshot was taken,
// which only a row whose writer no trigger set can (triggers disabled by
// hand or by a restore); passing it would put every later transaction
// behind the frontier, and read again it is taken like any other row ahead.
func reached(snap snapshot, last writePlace, full bool) writePlace {
	end := writePlace{xid: snap.xmax}
	if !full || end.before(last) {
		return end
	}
	return last
}

// pass moves at forward to to, a place a read in snap reached, and
// watches every writer it passes that snap lists as running; every other
// writer it passes had ended, and the read saw all its rows.
func (w *writerFrontier) pass(to writePlace, snap snapshot) {
	if !w.at.before(to) {
		return
	}
	for _, x := range snap.running {
		if x >= w.at.xid && x < to.xid {
			if _, ok := w.watch[x]; !ok {
				w.watchFrom(x, 0)
			}
		}
	}
	w.at = to
}

// watchFrom watches writer x from seq at most: a writer not watched from
// there, a place set back to it.
func (w *writerFrontier) watchFrom(x uint64, seq int64) {
	if w.watch == nil {
		w.watch = map[uint64]watchPlace{}
	}
	p, ok := w.watch[x]
	if !ok || seq < p.from {
		p.from = seq
	}
	w.watch[x] = p
}

// readOn records a read, in snapshot snap, of watched writer x's rows
// from its place. Only a read in which x had ended counts: then all of
// x's rows were visible to it. The place moves forward to to (just after
// the last row the read returned, never past one it could not take); when
// the read returned the last of x's rows (last) and no held claim holds
// any, x leaves the watch.
func (w *writerFrontier) readOn(x uint64, snap snapshot, to int64, last bool) {
	p, ok := w.watch[x]
	if !ok || !snap.ended(x) {
		return
	}
	if last && p.holds == 0 {
		delete(w.watch, x)
		return
	}
	if to > p.from {
		p.from = to
		w.watch[x] = p
	}
}

// watched are the watched writers in id order and each one's place.
func (w *writerFrontier) watched() (writers []uint64, from []int64) {
	writers = make([]uint64, 0, len(w.watch))
	for x := range w.watch {
		writers = append(writers, x)
	}
	slices.Sort(writers)
	from = make([]int64, len(writers))
	for i, x := range writers {
		from[i] = w.watch[x].from
	}
	return writers, from
}
