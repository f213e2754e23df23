package relay

import "sync"

// health owns the engine's State. Three things decide it — whether the
// broker answers (the broker gate), whether the last claim failed (the
// claim loop) and whether the last settle failed (the batches) — and each
// only reports its own fact here; the state is derived from all in one
// place, so none can overwrite another's (a broker coming back while the
// database fails stays StateError).
type health struct {
	mu         sync.Mutex
	brokerDown bool
	claimErr   error
	// settleErr is why the last settle statement failed, nil once one
	// succeeded: with every batch in flight retrying its settle, no claim
	// runs to fail, and the engine is still stuck.
	settleErr error
	state     State
	changed   func(State)
}

func newHealth(changed func(State)) *health {
	return &health{state: StateActive, changed: changed}
}

// setBrokerDown records whether the broker is unavailable.
func (h *health) setBrokerDown(down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.brokerDown = down
	h.update()
}

// setClaimErr records why the last claim failed, nil when it succeeded.
func (h *health) setClaimErr(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.claimErr = err
	h.update()
}

// setSettleErr records why the last settle failed, nil when it succeeded.
func (h *health) setSettleErr(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settleErr = err
	h.update()
}

// update derives the state and reports a change. Claims do not run while
// the broker is down, so a paused broker comes first; the claim or settle
// error then shows again until a claim or settle succeeds.
func (h *health) update() {
	s := StateActive
	switch {
	case h.brokerDown:
		s = StatePaused
	case h.claimErr != nil || h.settleErr != nil:
		s = StateError
	}
	if s != h.state {
		h.state = s
		h.changed(s)
	}
}

// get returns the state and, in StateError, the claim's error, or else
// the settle's.
func (h *health) get() (State, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == StateError {
		if h.claimErr != nil {
			return h.state, h.claimErr
		}
		return h.state, h.settleErr
	}
	return h.state, nil
}
