package interleave

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/storage"
)

// A relay can claim and settle an event between its producer's COMMIT and
// the producer's call to Committed (a busy machine preempts the producer
// there). The model must still count that claim and settle, or it reports
// the transaction's next event as taken before this one was finished: it
// did, once, for MySQL's ordered test under make test's load.
func TestClaimsBeforeTheProducerRecordsItsCommitCount(t *testing.T) {
	m := New()
	m.Ordered, m.OnDead = true, storage.DeadSkip
	first, second := uuid.New(), uuid.New()
	t0 := time.Now()
	due := map[uuid.UUID]time.Time{first: t0, second: t0}

	m.Claimed("r", t0, t0.Add(time.Millisecond), []uuid.UUID{first})
	m.Settled(storage.Outcome{Delivered: []uuid.UUID{first}}, t0.Add(2*time.Millisecond))
	m.Committed([]uuid.UUID{first, second}, due, "k", t0.Add(3*time.Millisecond))
	m.Claimed("r", t0.Add(4*time.Millisecond), t0.Add(5*time.Millisecond), []uuid.UUID{second})
	m.Settled(storage.Outcome{Delivered: []uuid.UUID{second}}, t0.Add(6*time.Millisecond))

	if problems := m.orderProblems(); len(problems) != 0 {
		t.Errorf("order problems where there are none: %v", problems)
	}
}

// The check itself: the second event claimed while the first, claimed
// before, was not finished yet.
func TestASecondEventClaimedBeforeTheFirstIsFinishedIsReported(t *testing.T) {
	m := New()
	m.Ordered, m.OnDead = true, storage.DeadSkip
	first, second := uuid.New(), uuid.New()
	t0 := time.Now()
	due := map[uuid.UUID]time.Time{first: t0, second: t0}

	m.Committed([]uuid.UUID{first, second}, due, "k", t0)
	m.Claimed("r", t0, t0.Add(time.Millisecond), []uuid.UUID{first})
	m.Claimed("s", t0, t0.Add(2*time.Millisecond), []uuid.UUID{second})
	m.Settled(storage.Outcome{Delivered: []uuid.UUID{first}}, t0.Add(3*time.Millisecond))

	if problems := m.orderProblems(); len(problems) != 1 {
		t.Errorf("order problems = %v, want the second event's claim", problems)
	}
}
