package relay

import (
	"errors"
	"testing"
)

// The engine's state has one owner: the broker gate and the claim loop
// each report their own fact, and neither overwrites the other's.
func TestHealthDerivesTheStateFromBothInputs(t *testing.T) {
	var reported []State
	h := newHealth(func(s State) { reported = append(reported, s) })
	dbDown := errors.New("database refused the claim")

	h.setClaimErr(dbDown)
	h.setBrokerDown(true)
	h.setBrokerDown(false) // the broker is back, the database still fails
	if s, err := h.get(); s != StateError || err != dbDown {
		t.Fatalf("broker back while claims fail: %s, %v; want error with the claim's reason", s, err)
	}
	h.setClaimErr(nil)
	h.setBrokerDown(true)
	h.setClaimErr(nil) // a claim succeeding does not hide a broker that is down
	if s, _ := h.get(); s != StatePaused {
		t.Fatalf("claims succeed while the broker is down: %s, want paused", s)
	}
	h.setBrokerDown(false)
	want := []State{StateError, StatePaused, StateError, StateActive, StatePaused, StateActive}
	if len(reported) != len(want) {
		t.Fatalf("reported %v, want %v", reported, want)
	}
	for i := range want {
		if reported[i] != want[i] {
			t.Fatalf("reported %v, want %v", reported, want)
		}
	}
}

// A settle that keeps failing leaves the engine stuck with no claim to
// fail: the state says so, with the settle's reason, until one succeeds.
func TestHealthReportsFailingSettles(t *testing.T) {
	h := newHealth(func(State) {})
	timeout := errors.New("settle (mark_delivered): canceling statement due to statement timeout")
	h.setClaimErr(nil)
	h.setSettleErr(timeout)
	if s, err := h.get(); s != StateError || err != timeout {
		t.Fatalf("settles failing: %s, %v; want error with the settle's reason", s, err)
	}
	claim := errors.New("claim batch: refused")
	h.setClaimErr(claim)
	if _, err := h.get(); err != claim {
		t.Fatalf("claims and settles failing: %v; want the claim's reason first", err)
	}
	h.setClaimErr(nil)
	h.setSettleErr(nil)
	if s, _ := h.get(); s != StateActive {
		t.Fatalf("a settle succeeded: %s, want active", s)
	}
}
