package postgres

import (
	"sync"
	"time"
)

// claimState is what one relay's claims on the table remember between
// claims: the claim frontier its claims of rows without an order go
// forward from (frontier.go), what its ordered claims know of the keys
// (keys.go), and the cap on its held claims' rows. None of it is needed
// for correctness at start: a relay that starts over reads from the
// beginning.
type claimState struct {
	mu sync.Mutex
	// fresh is the frontier of the unordered claims, and of the unkeyed
	// part of ordered claims.
	fresh frontier
	// keys is what ordered claims know of the keys; nil until the first.
	keys *keyWalk
	// unkeyedOdd alternates the odd row of a batch between the rows with
	// and without a key (unkeyedLimit).
	unkeyedOdd bool
	// heldLimit caps the rows the relay's held claims lock once one was
	// cut by its byte limit.
	heldLimit heldLimit
}

// claimStates keeps a claim state per relay id: one store may serve
// several relays in one process (tests do), each of which claims in turn.
// Entries are only ever added, so a sync.Map (relay id → *claimState)
// fits.
type claimStates struct{ by sync.Map }

func (cs *claimStates) of(relayID string) *claimState {
	if st, ok := cs.by.Load(relayID); ok {
		return st.(*claimState)
	}
	st, _ := cs.by.LoadOrStore(relayID, &claimState{})
	return st.(*claimState)
}

// unkeyedLimit is how many rows without a key an ordered claim of limit
// events may take: all of them when no key waits, else half, the odd one
// every other claim, so that neither kind crowds out the other. The keyed
// walk fills what they leave. The caller holds st.mu.
func (st *claimState) unkeyedLimit(limit int, keysWait bool) int {
	if !keysWait {
		return limit
	}
	n := limit / 2
	if limit%2 == 1 && st.unkeyedOdd {
		n++
	}
	st.unkeyedOdd = !st.unkeyedOdd
	return n
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
