package relay

import "sync"

// health owns the engine's State. Two things decide it — whether the
// broker answers (the broker gate) and whether the last claim failed (the
// claim loop) — and each only reports its own fact here; the state is
// derived from both in one place, so neither can overwrite the other's
// (a broker coming back while the database fails stays StateError).
type health struct {
	mu         sync.Mutex
	brokerDown bool
	claimErr   error
	state      State
	changed    func(State)
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

// update derives the state and reports a change. Claims do not run while
// the broker is down, so a paused broker comes first; the claim error then
// shows again until a claim succeeds.
func (h *health) update() {
	s := StateActive
	switch {
	case h.brokerDown:
		s = StatePaused
	case h.claimErr != nil:
		s = StateError
	}
	if s != h.state {
		h.state = s
		h.changed(s)
	}
}

// get returns the state and, in StateError, the claim's error.
func (h *health) get() (State, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == StateError {
		return h.state, h.claimErr
	}
	return h.state, nil
}
