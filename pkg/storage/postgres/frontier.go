package postgres

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The claim frontier of one relay's unordered claims: where they go
// forward from, by what the database guarantees rather than by time. The
// invariant and its argument, case by case, are in docs/architecture.md
// ("The claim frontier"); this file keeps the state, and claim_arms.sql
// reads by it.
//
// Every row carries its writer (writer_xid): the transaction that last
// made it claimable, which has its id before the row exists. A claim's
// snapshot says of every id whether that transaction had ended (below
// xmin, or below xmax and not in the running list). So a claim that read
// the fresh rows up to a place in writer order has seen every row of every
// writer it passed that had ended, and knows which it passed were running:
// those it watches, and looks up by id (one index probe) until a claim sees
// them ended. A writer the frontier has not reached gets no id below it.
type frontier struct {
	// at is the place in (writer, seq) order that fresh rows are read
	// after; due the place in the due index's (available_at, seq) order
	// that rows the fresh reads passed before they were due are read after.
	at  writePlace
	due dueKey
	// watch are the writers passed while they were running, or whose rows
	// a claim locked but left (past its byte limit), with how many held
	// claims still hold such rows: a watched writer is dropped only once a
	// claim saw it ended, read all its due rows and no claim holds any.
	watch map[uint64]int
	// sweeps: every SweepInterval a claim reads the fresh rows again from
	// where the frontier was at the sweep before, and every
	// fullSweepEvery-th from the beginning, as defence in depth. Nothing
	// in the argument needs it; reading from the beginning every time
	// cost the latency of the claims beside it (their p99), as it steps
	// over every dead entry a held-back vacuum left.
	sweeps sweepSchedule
}

// sweepSchedule says when a frontier sweeps and from where: every
// interval, from where the frontier was at the sweep before, and every
// fullSweepEvery-th time from the beginning.
type sweepSchedule struct {
	sweptAt time.Time
	from    writePlace
	n       int
}

// due says whether a read planned at now, with the frontier at at, is a
// sweep, and from where it reads.
func (s *sweepSchedule) due(interval time.Duration, now time.Time, at writePlace) (from writePlace, sweep bool) {
	if s.sweptAt.IsZero() {
		s.sweptAt = now
	}
	if now.Sub(s.sweptAt) < interval {
		return writePlace{}, false
	}
	from = s.from
	if s.n%fullSweepEvery == fullSweepEvery-1 {
		from = writePlace{}
	}
	s.sweptAt, s.from, s.n = now, at, s.n+1
	return from, true
}

// writePlace is a place in the fresh rows' order: writer, then seq.
type writePlace struct {
	xid uint64
	seq int64
}

func (a writePlace) before(b writePlace) bool {
	return a.xid < b.xid || a.xid == b.xid && a.seq < b.seq
}

// frontierPlan is what one claim reads: fresh rows after start, due rows
// after due of writers at or before dueBound, and watch's rows.
type frontierPlan struct {
	start, dueBound writePlace
	due             dueKey
	watch           []uint64
	sweep           bool
}

// plan decides the next claim. A sweep reads the fresh rows, the due
// index's included, from an earlier place, and moves nothing.
func (f *frontier) plan(sweepInterval time.Duration, now time.Time) frontierPlan {
	if from, sweep := f.sweeps.due(sweepInterval, now, f.at); sweep {
		return frontierPlan{start: from, sweep: true}
	}
	w := make([]uint64, 0, len(f.watch))
	for x := range f.watch {
		w = append(w, x)
	}
	slices.Sort(w)
	return frontierPlan{start: f.at, dueBound: f.at, due: f.due, watch: w}
}

// everything is the plan of a claim beside the database's log, which
// reads from the beginning and moves nothing: every due row of the due
// index, and the fresh rows up to its seq bound.
func everything() frontierPlan {
	return frontierPlan{dueBound: writePlace{xid: math.MaxUint64, seq: math.MaxInt64}}
}

// args are the plan's parameters $4, $5 and $7 to $11 of claim_arms.sql,
// around the highest seq of a fresh row it may take ($6, FreshEvents.UpTo).
func (pl frontierPlan) args(freshUpTo int64) []any {
	watch := make([]string, len(pl.watch))
	for i, x := range pl.watch {
		watch[i] = strconv.FormatUint(x, 10)
	}
	return []any{strconv.FormatUint(pl.start.xid, 10), pl.start.seq, freshUpTo, dueAt(pl.due), pl.due.seq,
		watch, strconv.FormatUint(pl.dueBound.xid, 10), pl.dueBound.seq}
}

// snapshot is a claim statement's snapshot (pg_current_snapshot()).
type snapshot struct {
	xmin, xmax uint64
	running    []uint64
}

func parseSnapshot(s string) (snapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return snapshot{}, fmt.Errorf("read snapshot %q", s)
	}
	var snap snapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("read snapshot %q: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("read snapshot %q: %w", s, err)
	}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("read snapshot %q: %w", s, err)
			}
			snap.running = append(snap.running, v)
		}
	}
	return snap, nil
}

// ended says whether the transaction xid had ended when the snapshot was
// taken: committed or rolled back, its rows all visible or gone.
func (s snapshot) ended(xid uint64) bool {
	return xid < s.xmin || xid < s.xmax && !slices.Contains(s.running, xid)
}

// armRead is what a claim's rows say of one arm: how many it returned
// (taken or left) and the last it returned in the arm's order.
type armRead struct {
	n         int
	lastFresh writePlace
	lastDue   dueKey
}

// frontierRead is what a claim's rows say of how far it read.
type frontierRead struct {
	snap snapshot
	// arms by arm number: 0 again, 1 watched, 2 fresh.
	arms [3]armRead
	// left are the writers of rows the claim locked but did not take;
	// writers those of every row it locked.
	left    map[uint64]bool
	writers []uint64
	// skipFresh and skipDue are the first rows within what the fresh and
	// again arms read that another transaction's lock kept from them;
	// skipWatched the watched writers with such rows (claim_arms.sql).
	skipFresh   *writePlace
	skipDue     *dueKey
	skipWatched map[uint64]bool
}

// fact records a row of the claim's that is no event: its snapshot, or
// what other transactions' locks kept from it.
func (r *frontierRead) fact(fact string, writer uint64, seq int64, dueAt time.Time) error {
	switch {
	case strings.HasPrefix(fact, "snapshot "):
		var err error
		r.snap, err = parseSnapshot(strings.TrimPrefix(fact, "snapshot "))
		return err
	case fact == "skip fresh":
		r.skipFresh = &writePlace{xid: writer, seq: seq}
	case fact == "skip again":
		r.skipDue = &dueKey{at: dueAt, seq: seq}
	case fact == "skip watched":
		if r.skipWatched == nil {
			r.skipWatched = map[uint64]bool{}
		}
		r.skipWatched[writer] = true
	default:
		return fmt.Errorf("claim: unknown row %q", fact)
	}
	return nil
}

// row records one returned row of arm arm.
func (r *frontierRead) row(arm int, writer uint64, seq int64, dueAt time.Time, taken bool) {
	a := &r.arms[arm]
	a.n++
	r.writers = append(r.writers, writer)
	switch arm {
	case 0:
		a.lastDue = laterDue(a.lastDue, dueKey{at: dueAt, seq: seq})
	case 2:
		if p := (writePlace{writer, seq}); a.lastFresh.before(p) {
			a.lastFresh = p
		}
	}
	if !taken {
		if r.left == nil {
			r.left = map[uint64]bool{}
		}
		r.left[writer] = true
	}
}

// done moves the frontier by a claim planned as pl with limit rows, made
// at stamp (its transaction's now()), that read r. held says the claim
// keeps its locks: the writers of rows it left stay watched until the
// returned function is called, when its transaction has ended. If it
// ended without a commit (abandoned), every row it locked is PENDING as
// it was, behind the frontier: their writers are watched again, and the
// next claim takes them.
func (f *frontier) done(pl frontierPlan, limit int, stamp time.Time, r frontierRead, held bool) (release func(abandoned bool)) {
	if f.watch == nil {
		f.watch = map[uint64]int{}
	}
	release = func(bool) {}
	if held {
		for x := range r.left {
			f.watch[x]++
		}
		left, writers := r.left, r.writers
		release = func(abandoned bool) {
			for x := range left {
				if f.watch[x] > 0 {
					f.watch[x]--
				}
			}
			if abandoned {
				for _, x := range writers {
					if _, ok := f.watch[x]; !ok {
						f.watch[x] = 0
					}
				}
			}
		}
	} else {
		for x := range r.left {
			if _, ok := f.watch[x]; !ok {
				f.watch[x] = 0
			}
		}
	}
	if pl.sweep {
		return release
	}
	again, watched, fresh := r.arms[0], r.arms[1], r.arms[2]
	// Due rows: a read that stopped short of its limit saw every due row
	// it was to read up to the statement's now(); rows the fresh reads
	// pass from now on are due after it.
	// A row another transaction's lock kept from the read stays after
	// the position.
	due := again.lastDue
	if again.n < limit {
		due = dueKey{at: stamp, seq: math.MaxInt64}
	}
	if k := r.skipDue; k != nil && !due.before(*k) {
		due = dueKey{at: k.at, seq: k.seq - 1}
	}
	f.due = laterDue(f.due, due)
	// Watched writers: dropped once ended and every due row of theirs
	// was read (the read stopped short) and none is held or was left.
	if watched.n < limit-again.n {
		for _, x := range pl.watch {
			if r.snap.ended(x) && f.watch[x] == 0 && !r.left[x] && !r.skipWatched[x] {
				delete(f.watch, x)
			}
		}
	}
	// Fresh rows: a read that stopped short saw every row of every writer
	// below the snapshot's xmax that had ended; one that stopped at its
	// limit, every row up to the last it returned. The running writers
	// it passed are watched.
	to := fresh.lastFresh
	if fresh.n < limit-again.n-watched.n {
		to = writePlace{xid: r.snap.xmax}
	}
	// Never past xmax: a row there names a writer that had no id when the
	// snapshot was taken, which only a row whose writer no trigger set can
	// (triggers disabled by hand or by a restore). Passing it would put
	// every later transaction behind the frontier; read again, it is taken
	// like any fresh row.
	if limit := (writePlace{xid: r.snap.xmax}); limit.before(to) {
		to = limit
	}
	if p := r.skipFresh; p != nil && !to.before(*p) {
		to = writePlace{xid: p.xid, seq: p.seq - 1}
	}
	if !f.at.before(to) {
		return release
	}
	for _, x := range r.snap.running {
		if x >= f.at.xid && x < to.xid {
			if _, ok := f.watch[x]; !ok {
				f.watch[x] = 0
			}
		}
	}
	f.at = to
	return release
}
