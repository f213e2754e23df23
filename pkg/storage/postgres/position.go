package postgres

import (
	"sync"
	"time"
)

// Ordered claims (ORDERING=partition) go forward by the claim position
// below and its timing allowances; unordered claims by the claim frontier
// (frontier.go), which needs none, and which ordered claims should move to.
//
// A claim position lets claims go forward instead of walking the pending
// index from its start. Every claimed row leaves a dead version in that
// index, which vacuum may not remove while any snapshot is older than the
// claim (a long query, an idle transaction, a replica's
// hot_standby_feedback); a claim that started from the beginning would step
// over every one of them, and slow down with every event ever claimed.
//
// The position is a seq value: claims take rows written after it. Rows
// may become visible behind it later, when their transaction took its seq
// value early and committed after rows written later were claimed. The
// position therefore moves only as far as is known to be safe: a claim
// records the highest seq claimed before it (a mark) together with a
// transaction id the database assigned after the claim's snapshot was
// taken (the mark's bound); once the oldest running transaction has
// reached that id, every transaction that could have written a row at or
// below that seq has ended, and the position may move there.
//
// The bound is the id of a transaction of the relay's own, never the
// snapshot's xmax: a snapshot lists only running transactions below its
// xmax, which is one past the newest transaction that has ended, not the
// next id to be assigned. A producer's transaction whose id is above
// every ended one — on a quiet database, any that stays open while
// nothing else commits — is running but in no snapshot's list, and a mark
// bounded by xmax would let the position pass its row. A claim that
// locks or changes rows has an id of its own; one that does not asks for
// one (pg_current_xact_id()) only when its mark would move the position,
// so that polls of a quiet database write nothing. A mark made without
// an id waits for the next claim's (needsBound). A
// transaction that stays open (the long-writer case) would hold the
// position back without end and make claims walk everything claimed since
// it began; so the position never lags the highest claimed seq by more
// than lagLimit claims' worth of rows, and a periodic sweep looks behind it
// instead.
//
// Rows that become PENDING again (released, retried, reaped, retried from
// DEAD) and scheduled ones are found through the due index, wherever their
// seq lies (see claim.sql). Its dead entries pile up behind a long snapshot
// as the pending index's do, and every fresh event lands there too when
// producers set created_at before the insert's now() (an application's
// clock, an ORM's timestamps): so claims read it from a due position as
// well, a place (available_at, seq) in its order that moves by the same
// marks, lag limit and sweeps as the seq position (dueKey).

// lagLimit bounds, in batches of the claim's size, how far behind the
// highest claimed seq a claim starts: the dead versions a claim may step
// over while a writer holds the position back.
const lagLimit = 8

// fullSweepEvery makes every n-th sweep start from the beginning of the
// table, for the row whose transaction took its seq before it had a
// transaction id and then stayed open across a sweep (see sweepFrom).
const fullSweepEvery = 30

// observed is the sequence's last value as a claim read it.
type observed struct {
	at time.Time
	v  int64
}

// issuedSettle is how old a reading of the sequence's last value must be
// before the position may move to it. A producer's INSERT takes its seq
// before it writes the row, and only writing gives its transaction an id:
// in between, no snapshot shows it running, and a mark made from a value
// read then would be confirmed while the row is still on its way (the
// relay then found it only with the periodic sweep). A second is far more
// than the two steps of one statement take.
const issuedSettle = time.Second

// mark is a claim's evidence for moving the position: every row with a seq
// up to claimed, and every due row before due, is visible once every
// transaction below bound has ended. bound is 0 until a claim of the
// relay's with a transaction id of its own, made no earlier than the
// mark's, gives it one.
type mark struct {
	bound   uint64
	claimed int64
	due     dueKey
}

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

// dueSettle is how far behind its own clock a claim that read every due
// row says it got: a statement that hands rows back takes its moment
// (statement_timestamp()) before its transaction has an id, and until then
// no snapshot shows it running (as issuedSettle for the sequence).
const dueSettle = 100 * time.Millisecond

// position is one relay's claim position on a table.
type position struct {
	mu sync.Mutex
	// claimed is the highest seq this relay has claimed.
	claimed int64
	// frontier is claimed, or the sequence's last value where that is
	// higher (others claim what this relay does not): the lag limit counts
	// from it, so that an idle relay's claims do not step over every row
	// the others claimed since its own last one.
	frontier int64
	// seen are the sequence's last values read by short claims, with when:
	// a value becomes a mark's only once it is issuedSettle old (see
	// issued).
	seen []observed
	// safe is the highest seq below which every row is visible: the
	// position when no writer holds it back.
	safe  int64
	marks []mark
	// sweptAt is when the last sweep ended, and sweepFrom where the next
	// begins: the safe position as of the previous sweep. Rows at or below
	// it were visible then and seen by that sweep.
	sweptAt   time.Time
	sweepFrom int64
	sweeps    int
	// skippedFrom is set while claims start above the safe position (a
	// transaction holds it back and the lag limit applies): rows after it
	// may become visible behind the claims. When the safe position moves
	// again — the transaction ended — the next claim sweeps from here at
	// once (sweepNow) instead of after SweepInterval.
	skippedFrom int64
	skipping    bool
	sweepNow    bool
	// heldLimit caps the rows the relay's held claims lock once one was
	// cut by its byte limit.
	heldLimit heldLimit
	// dueSafe is the due position every claim may start from: every due
	// row before it was visible to a claim that read past it. dueRecent
	// are the latest claims' evidence, a ring (dueNext is the slot for the
	// next): the claims start no further back than the oldest of them
	// while a transaction holds dueSafe back, as lagLimit does for seq.
	// dueSweepFrom is where the next sweep reads the due index from.
	dueSafe      dueKey
	dueRecent    [lagLimit]dueKey
	dueNext      int
	dueSweepFrom dueKey
	// dueSkippedFrom is set while claims read the due index from after
	// dueSafe (dueSkipping): as skippedFrom for seq.
	dueSkippedFrom dueKey
	dueSkipping    bool
	// ordered is set once the relay claims under ORDERING=partition: its
	// positions are those of its events without a key, and say nothing of
	// the keyed ones, which wait behind their keys wherever they lie.
	// keys is what its ordered claims know of those (keys.go).
	ordered bool
	keys    *keyWalk
	// fresh is the frontier the relay's unordered claims go forward from
	// (frontier.go); the fields above serve its ordered claims.
	fresh frontier
}

// positions keeps a position per relay id: one store may serve several
// relays in one process (tests do), each of which claims in turn. Entries
// are only ever added, so a sync.Map (relay id → *position) fits.
type positions struct{ by sync.Map }

// lowestSafe is the lowest safe position of the relays claiming through
// this store, 0 when none has claimed or one claims ordered: every row at
// or below it was visible to the claims that passed it.
func (ps *positions) lowestSafe() int64 {
	lowest := int64(-1)
	ps.by.Range(func(_, v any) bool {
		p := v.(*position)
		p.mu.Lock()
		safe := p.safe
		if p.ordered {
			safe = 0
		}
		p.mu.Unlock()
		if lowest < 0 || safe < lowest {
			lowest = safe
		}
		return true
	})
	return max(lowest, 0)
}

// lowestDueSafe is the lowest safe due position of the relays claiming
// through this store, the beginning when none has claimed or one claims
// ordered.
func (ps *positions) lowestDueSafe() dueKey {
	var lowest dueKey
	first := true
	ps.by.Range(func(_, v any) bool {
		p := v.(*position)
		p.mu.Lock()
		safe := p.dueSafe
		if p.ordered {
			safe = dueKey{}
		}
		p.mu.Unlock()
		if first || safe.before(lowest) {
			lowest, first = safe, false
		}
		return true
	})
	return lowest
}

func (ps *positions) of(relayID string) *position {
	if p, ok := ps.by.Load(relayID); ok {
		return p.(*position)
	}
	p, _ := ps.by.LoadOrStore(relayID, &position{sweptAt: time.Now()})
	return p.(*position)
}

// plan is what one claim does: start after floor; sweep says whether it is
// a sweep, which moves no position.
type plan struct {
	floor int64
	sweep bool
	// prompted marks a sweep the end of a held-back transaction asked for,
	// not the interval: it does not count towards the full sweeps.
	prompted bool
	// claimedBefore is what this claim's mark records: markValue at plan.
	claimedBefore int64
	// dueFrom is where the claim reads the due index from; dueForward is
	// where a claim that is not a sweep would have read it from, which a
	// sweep's due read must reach to have seen every row behind it.
	dueFrom, dueForward dueKey
}

// next decides the claim's floor. The caller holds p.mu, and passes the
// claim's SweepInterval with its default filled in.
func (p *position) next(limit int, sweepInterval time.Duration, now time.Time) plan {
	forward := p.dueForward()
	if p.sweepNow {
		return plan{floor: p.sweepFrom, sweep: true, prompted: true, claimedBefore: p.markValue(now), dueFrom: p.dueSweepFrom, dueForward: forward}
	}
	if now.Sub(p.sweptAt) >= sweepInterval {
		from, dueFrom := p.sweepFrom, p.dueSweepFrom
		if p.sweeps%fullSweepEvery == fullSweepEvery-1 {
			from, dueFrom = 0, dueKey{}
		}
		return plan{floor: from, sweep: true, claimedBefore: p.markValue(now), dueFrom: dueFrom, dueForward: forward}
	}
	return plan{floor: p.forward(limit), claimedBefore: p.markValue(now), dueFrom: forward, dueForward: forward}
}

// dueForward is where a claim that is not a sweep reads the due index
// from: the safe due position, or the evidence of the lagLimit-th latest
// claim when a transaction holds that further back.
func (p *position) dueForward() dueKey {
	return laterDue(p.dueSafe, p.dueRecent[p.dueNext])
}

// markValue is what a claim made now may record in its mark: the highest
// seq claimed, or a reading of the sequence old enough to trust (issued).
func (p *position) markValue(now time.Time) int64 {
	v := p.claimed
	for _, o := range p.seen {
		if now.Sub(o.at) >= issuedSettle {
			v = max(v, o.v)
		}
	}
	return v
}

// issued records the sequence's last value as a short claim read it. The
// caller holds p.mu.
func (p *position) issued(v int64, now time.Time) {
	p.frontier = max(p.frontier, v)
	// Keep the newest reading that is already settled and those younger:
	// older ones can no longer raise markValue.
	keep := 0
	for i, o := range p.seen {
		if now.Sub(o.at) >= issuedSettle {
			keep = i
		}
	}
	p.seen = p.seen[keep:]
	if n := len(p.seen); n == 0 || p.seen[n-1].v < v {
		p.seen = append(p.seen, observed{at: now, v: v})
	}
}

// forward is where a claim that is not a sweep starts: the safe position,
// or lagLimit batches behind the highest claimed seq when a transaction
// holds the safe position further back.
func (p *position) forward(limit int) int64 {
	return max(p.safe, max(p.claimed, p.frontier)-int64(lagLimit*limit))
}

// needsBound says whether the claim planned as pl must have a
// transaction id of its own, even if it locks nothing: its mark would
// move the position, and no mark with a bound has got that far. The
// caller holds p.mu.
func (p *position) needsBound(pl plan) bool {
	bounded := p.safe
	for _, m := range p.marks {
		if m.bound != 0 {
			bounded = max(bounded, m.claimed)
		}
	}
	return pl.claimedBefore > bounded
}

// done records a claim's outcome: the oldest running transaction its
// snapshot saw (xmin), its own transaction's id (bound; 0 if it had
// none), the lowest and highest seq it claimed (0 for none), and how far
// it read the due index (due; complete when it read every due row after
// pl.dueFrom). The caller holds p.mu.
func (p *position) done(pl plan, xmin, bound uint64, lowest, highest int64, due dueKey, now time.Time) {
	m := mark{bound: bound, claimed: pl.claimedBefore, due: due}
	switch n := len(p.marks); {
	case n > 0 && p.marks[n-1].bound == 0:
		// The last mark still waits for a bound. This claim's evidence is
		// newer, and whatever id this claim or a later one brings was
		// assigned after both: one mark holds both.
		last := &p.marks[n-1]
		last.bound, last.claimed, last.due = bound, max(last.claimed, m.claimed), laterDue(last.due, m.due)
	case n == 0 || p.marks[n-1].claimed < m.claimed || p.marks[n-1].due.before(m.due):
		p.marks = append(p.marks, m)
	}
	p.dueRecent[p.dueNext] = laterDue(due, p.dueRecent[(p.dueNext+lagLimit-1)%lagLimit])
	p.dueNext = (p.dueNext + 1) % lagLimit
	p.claimed = max(p.claimed, highest)
	p.frontier = max(p.frontier, p.claimed)
	if !pl.sweep && pl.floor > p.safe && !p.skipping {
		p.skipping, p.skippedFrom = true, p.safe
	}
	if !pl.sweep && p.dueSafe.before(pl.dueFrom) && !p.dueSkipping {
		p.dueSkipping, p.dueSkippedFrom = true, p.dueSafe
	}
	safeBefore, dueSafeBefore := p.safe, p.dueSafe
	drop := 0
	for drop < len(p.marks) && p.marks[drop].bound != 0 && p.marks[drop].bound <= xmin {
		p.safe = max(p.safe, p.marks[drop].claimed)
		p.dueSafe = laterDue(p.dueSafe, p.marks[drop].due)
		drop++
	}
	if p.skipping && p.safe > safeBefore {
		// What held the position back has ended: its rows, if any, lie
		// after skippedFrom, where claims did not look.
		p.sweepNow = true
		p.sweepFrom = min(p.sweepFrom, p.skippedFrom)
		p.skipping = false
	}
	if p.dueSkipping && dueSafeBefore.before(p.dueSafe) {
		p.sweepNow = true
		if p.dueSkippedFrom.before(p.dueSweepFrom) {
			p.dueSweepFrom = p.dueSkippedFrom
		}
		p.dueSkipping = false
	}
	p.marks = p.marks[drop:]
	if len(p.marks) > maxMarks {
		// Dropping the oldest marks only keeps the position back longer:
		// a later mark, once its transactions end, covers theirs too.
		p.marks = p.marks[len(p.marks)-maxMarks:]
	}
	if pl.sweep && (lowest == 0 || lowest > pl.claimedBefore) && !due.before(pl.dueForward) {
		// A sweep that found nothing behind the position has seen every
		// row there (it reads in seq order), and one whose due read got
		// past where claims read the due index from has seen every due
		// row behind that. One that did not may have stopped at the
		// batch's size or bytes: the next claim sweeps again from the same
		// place.
		if !pl.prompted {
			p.sweptAt = now
			p.sweeps++
		}
		p.sweepFrom = p.safe
		p.dueSweepFrom = p.dueSafe
		p.sweepNow = false
	}
}

// reset starts the position over from the table's beginning. The caller
// holds p.mu.
func (p *position) reset() {
	p.claimed, p.frontier, p.safe, p.sweepFrom, p.marks, p.seen = 0, 0, 0, 0, nil, nil
	p.skipping, p.sweepNow = false, false
	p.dueSafe, p.dueRecent, p.dueNext, p.dueSweepFrom = dueKey{}, [lagLimit]dueKey{}, 0, dueKey{}
	p.dueSkipping = false
	p.keys = nil
}

// maxMarks bounds the marks kept while a transaction holds the position
// back; older marks only matter if it ends, and then the sweep finds its rows.
const maxMarks = 4096

// heldLimit is how many rows a relay's held claims lock (LEASE_MODE=lock).
// A held claim locks its rows before it knows their sizes, and those past
// its byte limit it locks in vain: a row lock each (a WAL record), while
// the relay's claims step over them until it ends (cut). With payloads large
// enough that a few fill MAX_BATCH_BYTES, locking BATCH_SIZE rows a claim
// would lock dozens in vain per event it takes. Once a claim is cut, the
// next lock twice what fit: the batches still fill their byte limit, and
// the rows locked in vain stay about as many as those taken. The cap
// doubles again with every batch that fills its count without a cut.
type heldLimit struct {
	cap int // 0: none
}

// rows is the next held claim's row limit, at most limit (BATCH_SIZE).
func (h *heldLimit) rows(limit int) int {
	if h.cap > 0 && h.cap < limit {
		return h.cap
	}
	return limit
}

// claimed records a held claim that could lock limit rows, took taken and
// locked cut more past its byte limit.
func (h *heldLimit) claimed(limit, taken, cut int) {
	switch {
	case cut > 0:
		h.cap = max(1, 2*taken)
	case taken >= limit && h.cap > 0:
		h.cap = 2 * limit
	}
}
