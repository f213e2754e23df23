package postgres

import "sync"

// claimState is what one relay's claims on the table remember between
// claims: the claim frontier its claims of rows without an order go
// forward from (frontier.go), what its ordered claims know of the keys
// (keys.go), and the cap on its held claims' rows. None of it is needed
// for correctness at start: a relay that starts over reads from the
// beginning.
type claimState struct {
	mu sync.Mutex
	// frontier is the claim frontier of the unordered claims, and of the unkeyed
	// part of ordered claims.
	frontier frontier
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
