package mysql

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
)

// Where the unordered claims of each relay have got to.
//
// InnoDB keeps the index entries that a claim's UPDATE leaves behind
// (delete-marked) until purge removes them, and purge may remove none while
// any snapshot older than them is open: a long transaction, a backup, a
// replica's read view. A claim that walks state_seq_idx from the start of
// the PENDING range then steps over the entries of every row claimed since
// that snapshot began, and each claim is slower than the one before. So a
// claim starts where the relay's previous claims ended instead.
//
// A PENDING row's place in the index is (state_at, seq), state_at being the
// moment it could first be claimed: a new row is placed at its insert, a
// row that comes back (released, failed, reaped, retried from DEAD) at
// that moment, a scheduled one at its available_at. All of those land at
// or ahead of the claims. What can land behind them is the row of a
// transaction that commits after later rows were claimed: its state_at and
// seq were taken at its INSERT. Two things find those:
//   - the floor the claim starts from is not the end of the latest claim
//     but of the claimLag-th latest one, so a row that commits a few claims
//     late (concurrent producers, a slow COMMIT) is still in range; each
//     claim then steps over at most claimLag batches of left-behind entries,
//     whatever the history. A claim that reached the end of the due rows
//     ended at its own clock, less claimLagTime: without that, the claims
//     of a relay that finds nothing (another relay took it all) would not
//     move, and its scans would grow with the other relay's claims;
//   - at least every ClaimParams.SweepInterval a claim sweeps: it starts at
//     the beginning of the PENDING range, which finds every row committed
//     before it began, at the cost of stepping over every left-behind
//     entry. A sweep that comes back full of rows behind the floor goes on
//     from its last row with the next claim, until it reaches the floor.

// claimLag is how many claims back the floor of a claim lies.
const claimLag = 4

// claimLagTime is how far behind its own clock a claim that reached the
// end of the due rows says it ended: a row committed that late after its
// INSERT is found without a sweep even by a relay that claims often.
const claimLagTime = 100 * time.Millisecond

// ClaimBound is storage.ClaimBounder's: a timing bound. A row whose
// transaction commits more than claimLag claims and claimLagTime after its
// INSERT lands behind the cursor's floor and waits for the next sweep.
func (s *Store) ClaimBound(sweepInterval time.Duration) storage.ClaimBound {
	sweepInterval = storage.ClaimParams{SweepInterval: sweepInterval}.WithDefaults().SweepInterval
	return storage.ClaimBound{
		LateCommitWait: sweepInterval,
		Why: fmt.Sprintf("the claims go forward by a cursor of time and seq, and an event whose transaction commits more than %d claims and %s after its INSERT lands behind it: the next sweep finds it, every %s",
			claimLag, claimLagTime, sweepInterval),
		Fix: "set CAPTURE=binlog, with the server's binary log on (see docs/operations.md)",
	}
}

// position is a place in the PENDING range of state_seq_idx.
type position struct {
	at  time.Time
	seq int64
}

func (p position) compare(q position) int {
	if c := p.at.Compare(q.at); c != 0 {
		return c
	}
	return cmp.Compare(p.seq, q.seq)
}

// claimCursor is one relay's progress. Positions only move forward: a sweep
// that claims rows behind them leaves them where they are.
type claimCursor struct {
	// ends are the end positions of the latest claims that took rows, a
	// ring: next is the slot for the next one, n how many are filled.
	ends [claimLag]position
	next int
	n    int
	// lastSweep is when the latest finished sweep began: rows committed
	// before then have been looked for.
	lastSweep time.Time
	// sweepFrom, when set, is where the sweep in progress goes on.
	sweepFrom *position
	// withheld says a claim left fresh rows to a log reader
	// (FreshEvents.ToLog) since the last sweep that took every row: they
	// may lie behind the position, so the next claim that may take them
	// sweeps.
	withheld bool
}

// claimPlan is where one claim starts.
type claimPlan struct {
	// floor is the position to start after; nil for the start of the
	// range.
	floor *position
	// sweep says the claim looks behind the floor (floor is then nil or
	// where a sweep goes on).
	sweep bool
	// lagFloor is the floor a claim that does not sweep would have used.
	lagFloor *position
	began    time.Time
	// withheld is claimCursor.withheld when the plan was made.
	withheld bool
}

// fromStart is p changed to sweep from the start of the range.
func (p claimPlan) fromStart() claimPlan {
	p.floor, p.sweep = nil, true
	return p
}

// cursors keeps a claimCursor per RelayID. A relay has one ID for its
// life, so the map holds one entry per relay that claimed through this
// Store.
type cursors struct {
	mu      sync.Mutex
	byRelay map[string]*claimCursor
}

// plan says where relayID's next claim starts. sweepInterval is the
// claim's, with its default filled in; sweep makes the claim sweep from
// the start of the range (a backfill beside a log reader, whose rows may
// lie behind the position).
func (cs *cursors) plan(relayID string, sweepInterval time.Duration, now time.Time, sweep bool) claimPlan {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.byRelay == nil {
		cs.byRelay = map[string]*claimCursor{}
	}
	c := cs.byRelay[relayID]
	if c == nil {
		c = &claimCursor{}
		cs.byRelay[relayID] = c
	}
	p := claimPlan{began: now}
	if c.n < claimLag {
		// Too few claims to lag behind: every claim looks at the whole
		// range, as a sweep does.
		p.sweep = true
		return p
	}
	floor := c.ends[c.next] // the oldest of the ring
	p.lagFloor = &floor
	p.withheld = c.withheld
	switch {
	case sweep:
		p.sweep = true
	case c.sweepFrom != nil:
		from := *c.sweepFrom
		p.floor, p.sweep = &from, true
	case now.Sub(c.lastSweep) >= sweepInterval:
		p.sweep = true
	default:
		p.floor = &floor
	}
	return p
}

// lowestFloor is the lowest floor a claim of any relay would start from
// now, nil when one of them has claimed too little to lag behind or is in
// the middle of a sweep (rows behind its floor filled a batch): then every
// PENDING row may be waiting.
func (cs *cursors) lowestFloor() *position {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var lowest *position
	for _, c := range cs.byRelay {
		if c.n < claimLag || c.sweepFrom != nil {
			return nil
		}
		if f := c.ends[c.next]; lowest == nil || f.compare(*lowest) < 0 {
			lowest = &f
		}
	}
	return lowest
}

// record notes where a claim planned by p ended: last is the position of
// the last row it took (nil: it took none); end, when set, is the claim's
// clock, given when it reached the end of the due rows rather than its
// limit; withheld says it left fresh rows to a log reader.
func (cs *cursors) record(relayID string, p claimPlan, last *position, end *time.Time, withheld bool) {
	full := end == nil
	if end != nil {
		reached := position{at: end.Add(-claimLagTime), seq: math.MaxInt64}
		if last == nil || last.compare(reached) < 0 {
			last = &reached
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.byRelay[relayID]
	if c == nil {
		return
	}
	if p.sweep {
		if full && last != nil && p.lagFloor != nil && last.compare(*p.lagFloor) < 0 {
			// Rows behind the floor filled the batch: there may be more.
			from := *last
			c.sweepFrom = &from
		} else {
			c.sweepFrom = nil
			c.lastSweep = p.began
			if !withheld {
				// Every row behind the position was looked at.
				c.withheld = false
			}
		}
	}
	if withheld {
		c.withheld = true
	}
	if last == nil {
		return
	}
	at := *last
	if c.n > 0 {
		if newest := c.ends[(c.next+claimLag-1)%claimLag]; newest.compare(at) > 0 {
			at = newest
		}
	}
	c.ends[c.next] = at
	c.next = (c.next + 1) % claimLag
	c.n = min(c.n+1, claimLag)
}
