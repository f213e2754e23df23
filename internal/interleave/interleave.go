// Package interleave is the model the randomized interleaving tests of the
// storage drivers check their claims against (PostgreSQL's and MySQL's
// TestClaimsUnderRandomInterleavings): what the producers committed and
// rolled back, what the relays claimed, settled and lost to kills, and the
// checks run at the end. The drivers' tests write and claim; this package
// only records and judges, so both databases are held to one model.
package interleave

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/storage"
)

// Seed is INTERLEAVE_SEED, or a new seed; it is logged so that a run can
// be repeated.
func Seed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("INTERLEAVE_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("INTERLEAVE_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d: INTERLEAVE_SEED=%d reproduces the choices", seed, seed)
	return seed
}

// Duration is the environment variable name's duration, or def when it is
// unset (INTERLEAVE_DURATION: how long producers write).
func Duration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// Model is what a run did. Its methods may be called from any goroutine.
type Model struct {
	// Ordered runs claim under ORDERING=partition with OnDead.
	Ordered bool
	OnDead  storage.DeadPolicy

	mu         sync.Mutex
	committed  map[uuid.UUID]written
	rolledBack map[uuid.UUID]bool
	first      map[uuid.UUID]claimed
	delivered  map[uuid.UUID]int
	killed     map[uuid.UUID]bool
	producers  map[string]int
	// Ordered runs: each keyed event's transaction and place in it; and
	// for every event, when each claim of it ended, and when each settle
	// that finished it (DELIVERED; DEAD under skip) began. Claims and
	// settles are kept for every event because they may come before the
	// producer, back from its COMMIT, has recorded the event's place.
	txns, batches int
	place         map[uuid.UUID]txnPlace
	claims        map[uuid.UUID][]eventClaim
	finished      map[uuid.UUID][]time.Time
}

type written struct{ committedAt, due time.Time }

type claimed struct {
	at, stamp time.Time
	relay     string
}

// txnPlace is a keyed event's place among its transaction's events.
type txnPlace struct {
	txn, nth int
	key      string
}

// eventClaim is a claim of an event: when it ended, and its batch.
type eventClaim struct {
	end   time.Time
	batch int
}

// New returns an empty model.
func New() *Model {
	return &Model{
		committed: map[uuid.UUID]written{}, rolledBack: map[uuid.UUID]bool{},
		first: map[uuid.UUID]claimed{}, delivered: map[uuid.UUID]int{}, killed: map[uuid.UUID]bool{},
		producers: map[string]int{},
		place:     map[uuid.UUID]txnPlace{}, claims: map[uuid.UUID][]eventClaim{}, finished: map[uuid.UUID][]time.Time{},
	}
}

// Produced counts a transaction of kind.
func (m *Model) Produced(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.producers[kind]++
}

// Committed records a transaction's events, in the order written, as
// committed at at; due holds each one's available_at as the transaction
// wrote it. key is their partition key ("" for none).
func (m *Model) Committed(ids []uuid.UUID, due map[uuid.UUID]time.Time, key string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range ids {
		m.committed[id] = written{committedAt: at, due: due[id]}
		if key != "" {
			m.place[id] = txnPlace{txn: m.txns, nth: i, key: key}
		}
	}
	m.txns++
}

// RolledBack records the events of a transaction that rolled back.
func (m *Model) RolledBack(ids []uuid.UUID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		m.rolledBack[id] = true
	}
}

// Claimed records a claim of relay that ended at end, stamped stamp.
func (m *Model) Claimed(relay string, stamp, end time.Time, ids []uuid.UUID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches++
	for _, id := range ids {
		if _, ok := m.first[id]; !ok {
			m.first[id] = claimed{at: end, stamp: stamp, relay: relay}
		}
		// Every event's, keyed or not: a relay may claim (and settle) an
		// event between its producer's COMMIT and Committed.
		m.claims[id] = append(m.claims[id], eventClaim{end: end, batch: m.batches})
	}
}

// Killed records the events a relay held when it was killed.
func (m *Model) Killed(ids []uuid.UUID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		m.killed[id] = true
	}
}

// Settled records a settle that began at began and succeeded.
func (m *Model) Settled(st storage.Outcome, began time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	finishing := slices.Clone(st.Delivered)
	if m.OnDead == storage.DeadSkip {
		for _, f := range st.Failed {
			if f.Dead {
				finishing = append(finishing, f.ID)
			}
		}
	}
	for _, id := range finishing {
		m.finished[id] = append(m.finished[id], began)
	}
	for _, id := range st.Delivered {
		m.delivered[id]++
	}
}

// CommittedIDs lists every committed event.
func (m *Model) CommittedIDs() []uuid.UUID {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]uuid.UUID, 0, len(m.committed))
	for id := range m.committed {
		ids = append(ids, id)
	}
	return ids
}

// Check fails t for every broken promise: undelivered is how many
// committed events are not DELIVERED; bound is how long after an event was
// both committed and due its first claim may come (events without a key
// alone under ORDERING=partition: a keyed one waits, rightly, behind its
// key's earlier events).
func (m *Model) Check(t *testing.T, undelivered int, bound time.Duration) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Logf("%d events committed, %d rolled back; transactions by kind %v; %d first claims, %d killed",
		len(m.committed), len(m.rolledBack), m.producers, len(m.first), len(m.killed))
	var problems []string
	if undelivered > 0 {
		problems = append(problems, fmt.Sprintf("%d committed events not delivered", undelivered))
	}
	var slowest time.Duration
	for id, c := range m.first {
		w, ok := m.committed[id]
		switch {
		case m.rolledBack[id]:
			problems = append(problems, fmt.Sprintf("event %s of a rolled-back transaction claimed by %s", id, c.relay))
			continue
		case !ok:
			problems = append(problems, fmt.Sprintf("event %s claimed by %s was never committed", id, c.relay))
			continue
		}
		if c.stamp.Before(w.due) {
			problems = append(problems, fmt.Sprintf("event %s claimed at %s, before it was due at %s", id, c.stamp, w.due))
		}
		if _, keyed := m.place[id]; keyed {
			continue
		}
		visible := w.committedAt
		if w.due.After(visible) {
			visible = w.due
		}
		late := c.at.Sub(visible)
		slowest = max(slowest, late)
		if late > bound {
			problems = append(problems, fmt.Sprintf("event %s first claimed %s after it was committed and due", id, late))
		}
	}
	problems = append(problems, m.orderProblems()...)
	for id, n := range m.delivered {
		if n > 1 && !m.killed[id] {
			problems = append(problems, fmt.Sprintf("event %s delivered %d times with no relay killed holding it", id, n))
		}
	}
	t.Logf("slowest first claim after commit and due (events without a key under ORDERING=partition): %s", slowest)
	slices.Sort(problems)
	if len(problems) > 10 {
		problems = append(problems[:10], fmt.Sprintf("… and %d more", len(problems)-10))
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// orderProblems lists the keyed events claimed while an event their
// transaction wrote before them under the same key was certainly not
// finished: the claim ended before any settle that finished it began, and
// did not take it too (a run goes out in order). The caller holds m.mu.
func (m *Model) orderProblems() []string {
	byTxn := map[int][]uuid.UUID{}
	for id, pl := range m.place {
		byTxn[pl.txn] = append(byTxn[pl.txn], id)
	}
	var problems []string
	for _, ids := range byTxn {
		for _, b := range ids {
			for _, a := range ids {
				if m.place[a].nth >= m.place[b].nth {
					continue
				}
				for _, c := range m.claims[b] {
					if !slices.ContainsFunc(m.finished[a], func(at time.Time) bool { return at.Before(c.end) }) &&
						!slices.ContainsFunc(m.claims[a], func(ac eventClaim) bool { return ac.batch == c.batch }) {
						problems = append(problems, fmt.Sprintf("event %s (key %s, #%d of its transaction) claimed in batch %d at %s before #%d, %s, was finished: its claims %s, its finishing settles began %s",
							b, m.place[b].key, m.place[b].nth, c.batch, c.end.Format(time.StampMicro), m.place[a].nth, a,
							describeClaims(m.claims[a]), describeTimes(m.finished[a])))
					}
				}
			}
		}
	}
	return problems
}

func describeClaims(cs []eventClaim) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("batch %d at %s", c.batch, c.end.Format(time.StampMicro)))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func describeTimes(ts []time.Time) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, t.Format(time.StampMicro))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
