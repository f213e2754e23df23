package postgres

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
)

var _ storage.ClaimBounder = (*Store)(nil)

// ClaimBound is storage.ClaimBounder's: exact. The frontier goes forward
// by writers' transaction ids and snapshots, not by a clock, so an event
// of a transaction that commits late is found by the next claim all the
// same; sweeps are defence in depth, not part of the bound.
func (s *Store) ClaimBound(time.Duration) storage.ClaimBound {
	return storage.ClaimBound{Exact: true}
}

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
// the rows ahead up to a place in writer order has seen every row of every
// writer it passed that had ended, and knows which it passed were running:
// those it watches, and looks up by id (one index probe) until a claim sees
// them ended. A writer the frontier has not reached gets no id below it.
type frontier struct {
	// writerFrontier is at, the place in (writer, seq) order that the ahead
	// arm reads after, and watch: the writers passed while they were
	// running, whose rows a claim locked but left (past its byte limit),
	// or whose rows a held claim that ended without a commit had locked.
	// A watched writer is dropped only once a claim saw it ended, read
	// all its due rows from its place and no claim holds any.
	writerFrontier
	// due is the place in the due index's (available_at, seq) order that
	// rows the ahead arm passed before they were due are read after.
	due dueKey
	// sweeps: every SweepInterval a claim reads the rows ahead again from
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

// sweepNow says whether a read planned at now, with the frontier at at, is a
// sweep, and from where it reads.
func (s *sweepSchedule) sweepNow(interval time.Duration, now time.Time, at writePlace) (from writePlace, sweep bool) {
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

// frontierPlan is what one claim reads: the rows ahead, after start, due rows
// after due of writers at or before dueBound, and watch's rows.
type frontierPlan struct {
	start, dueBound writePlace
	due             dueKey
	watch           []uint64
	watchFrom       []int64
	sweep           bool
}

// plan decides the next claim. A sweep reads the rows ahead, the due
// index's included, from an earlier place, and moves nothing.
func (f *frontier) plan(sweepInterval time.Duration, now time.Time) frontierPlan {
	if from, sweep := f.sweeps.sweepNow(sweepInterval, now, f.at); sweep {
		return frontierPlan{start: from, sweep: true}
	}
	w, from := f.watched()
	return frontierPlan{start: f.at, dueBound: f.at, due: f.due, watch: w, watchFrom: from}
}

// everything is the plan of a claim beside the database's log, which
// reads from the beginning and moves nothing: every due row of the due
// index, and the fresh rows up to its seq bound.
func everything() frontierPlan {
	return frontierPlan{dueBound: writePlace{xid: math.MaxUint64, seq: math.MaxInt64}}
}

// args are the plan's parameters $4, $5 and $7 to $12 of claim_arms.sql,
// around the highest seq of a fresh row it may take ($6, FreshEvents.UpTo).
func (pl frontierPlan) args(freshUpTo int64) []any {
	watch := make([]string, len(pl.watch))
	for i, x := range pl.watch {
		watch[i] = strconv.FormatUint(x, 10)
	}
	from := pl.watchFrom
	if from == nil {
		from = []int64{}
	}
	return []any{strconv.FormatUint(pl.start.xid, 10), pl.start.seq, freshUpTo, dueAt(pl.due), pl.due.seq,
		watch, strconv.FormatUint(pl.dueBound.xid, 10), pl.dueBound.seq, from}
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
	lastAhead writePlace
	lastDue   dueKey
}

// frontierRead is what a claim's rows say of how far it read.
type frontierRead struct {
	snap snapshot
	// arms by arm number: 0 again, 1 watched, 2 ahead.
	arms [3]armRead
	// left are the writers of rows the claim locked but did not take,
	// locked those of every row it locked, each with the lowest seq of
	// such a row; watchedLast the watched arm's writers, each with the
	// highest seq of a row of it the arm returned.
	left, locked, watchedLast map[uint64]int64
	// skipAhead and skipDue are the first rows within what the ahead and
	// again arms read that another transaction's lock kept from them;
	// skipWatched the watched writers with such rows, each with the lowest
	// seq of one (claim_arms.sql).
	skipAhead   *writePlace
	skipDue     *dueKey
	skipWatched map[uint64]int64
}

// lower records seq for x in m, keeping the lowest.
func lower(m *map[uint64]int64, x uint64, seq int64) {
	if *m == nil {
		*m = map[uint64]int64{}
	}
	if v, ok := (*m)[x]; !ok || seq < v {
		(*m)[x] = seq
	}
}

// fact records a row of the claim's that is no event: its snapshot, or
// what other transactions' locks kept from it.
func (r *frontierRead) fact(fact string, writer uint64, seq int64, dueAt time.Time) error {
	switch {
	case strings.HasPrefix(fact, "snapshot "):
		var err error
		r.snap, err = parseSnapshot(strings.TrimPrefix(fact, "snapshot "))
		return err
	case fact == "skip ahead":
		r.skipAhead = &writePlace{xid: writer, seq: seq}
	case fact == "skip again":
		r.skipDue = &dueKey{at: dueAt, seq: seq}
	case fact == "skip watched":
		lower(&r.skipWatched, writer, seq)
	default:
		return fmt.Errorf("claim: unknown row %q", fact)
	}
	return nil
}

// row records one returned row of arm arm.
func (r *frontierRead) row(arm int, writer uint64, seq int64, dueAt time.Time, taken bool) {
	a := &r.arms[arm]
	a.n++
	lower(&r.locked, writer, seq)
	switch arm {
	case 0:
		a.lastDue = laterDue(a.lastDue, dueKey{at: dueAt, seq: seq})
	case 1:
		if r.watchedLast == nil {
			r.watchedLast = map[uint64]int64{}
		}
		if v, ok := r.watchedLast[writer]; !ok || seq > v {
			r.watchedLast[writer] = seq
		}
	case 2:
		if p := (writePlace{writer, seq}); a.lastAhead.before(p) {
			a.lastAhead = p
		}
	}
	if !taken {
		lower(&r.left, writer, seq)
	}
}

// done moves the frontier by a claim planned as pl with limit rows, made
// at stamp (its transaction's now()), that read r. held says the claim
// keeps its locks: the writers of rows it left stay watched until the
// returned function is called, when its transaction has ended. If it
// ended without a commit (abandoned), every row it locked is PENDING as
// it was, behind the frontier: their writers are watched again from the
// lowest row of each it had locked, and the next claim takes them.
func (f *frontier) done(pl frontierPlan, limit int, stamp time.Time, r frontierRead, held bool) (unpin func(abandoned bool)) {
	unpin = func(bool) {}
	if !pl.sweep {
		f.watchedRead(pl, limit, r)
	}
	// Rows left (past the byte limit) are read again from the lowest of
	// each writer: at once, or, while a held claim holds them, pinned
	// until it ends.
	for x, seq := range r.left {
		f.watchFrom(x, seq)
	}
	if held {
		for x := range r.left {
			w := f.watch[x]
			w.holds++
			f.watch[x] = w
		}
		left, locked := r.left, r.locked
		unpin = func(abandoned bool) {
			for x, seq := range left {
				// Pinned, so still watched; its place may have moved on
				// past the rows the claim held, which are as they were.
				if w, ok := f.watch[x]; ok && w.holds > 0 {
					w.holds--
					f.watch[x] = w
				}
				f.watchFrom(x, seq)
			}
			if abandoned {
				for x, seq := range locked {
					f.watchFrom(x, seq)
				}
			}
		}
	}
	if pl.sweep {
		return unpin
	}
	again, watched, ahead := r.arms[0], r.arms[1], r.arms[2]
	// Due rows: a read that stopped short of its limit saw every due row
	// it was to read up to the statement's now(); rows the ahead arm
	// passes from now on are due after it.
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
	// The rows ahead: the writer frontier's rule (reached, pass), and never
	// past a row another transaction's lock kept from the read.
	to := reached(r.snap, ahead.lastAhead, ahead.n >= limit-again.n-watched.n)
	if p := r.skipAhead; p != nil && !to.before(*p) {
		to = writePlace{xid: p.xid, seq: p.seq - 1}
	}
	f.pass(to, r.snap)
	return unpin
}

// watchedRead records what the watched arm read of each watched writer
// (writerFrontier.readOn): its place moves to just after the last row of
// it the arm returned, and never past a row of it that a lock kept from
// the arm, or that was not due and is outside the due index. The arm
// reads in (writer, seq) order, each writer from its place; when it
// stopped at its limit, the second read (skip watched) saw only the first
// such row in that order, so writers after its writer keep their places.
// A writer leaves the watch once the arm read to the end and returned the
// last of its due rows: none left past the byte limit, none skipped. Rows
// it returned and took are the claim's (an abandoned held claim sets the
// place back), those it left are read again (done).
func (f *frontier) watchedRead(pl frontierPlan, limit int, r frontierRead) {
	toEnd := r.arms[1].n < limit-r.arms[0].n
	var firstSkip uint64
	skipped := false
	if !toEnd {
		for x := range r.skipWatched {
			if !skipped || x < firstSkip {
				firstSkip, skipped = x, true
			}
		}
	}
	for _, x := range pl.watch {
		to := int64(math.MinInt64) // the place stays
		if last, read := r.watchedLast[x]; read && !(skipped && x > firstSkip) {
			to = last + 1
		}
		s, skip := r.skipWatched[x]
		if skip && s < to {
			to = s
		}
		_, left := r.left[x]
		f.readOn(x, r.snap, to, toEnd && !left && !skip)
	}
}

// fullSweepEvery makes every n-th sweep read from the beginning of the
// table, as defence in depth (frontier.go, keys.go).
const fullSweepEvery = 30

// dueKey is a place in the due index's order, (available_at, seq): the
// claims read the due rows from one on. The zero key is the beginning.
type dueKey struct {
	at  time.Time
	seq int64
}

func (k dueKey) before(o dueKey) bool {
	return k.at.Before(o.at) || k.at.Equal(o.at) && k.seq < o.seq
}

func laterDue(a, b dueKey) dueKey {
	if a.before(b) {
		return b
	}
	return a
}
