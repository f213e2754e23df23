// Package capturetest is the conformance suite for capture.Source
// implementations: what the relay relies on of every log it reads. A new
// source (MySQL's binlog, say) passes Run with a Harness of its own.
package capturetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/capture"
)

// Harness makes what one test needs: an empty outbox table and a Source
// reading it, neither shared with another test.
type Harness interface {
	New(t *testing.T) Setup
}

// Setup is one test's table and its log.
type Setup struct {
	Source capture.Source
	// Insert writes n events in one transaction and returns their ids in
	// the order written.
	Insert func(t testing.TB, n int) []uuid.UUID
}

// wait bounds every wait of the suite.
const wait = 30 * time.Second

// Run runs the suite against h.
func Run(t *testing.T, h Harness) {
	t.Run("CommitOrder", func(t *testing.T) { t.Parallel(); testCommitOrder(t, h.New(t)) })
	t.Run("ReplaysWhatWasNotAcknowledged", func(t *testing.T) { t.Parallel(); testReplay(t, h.New(t)) })
	t.Run("OneReaderAtATime", func(t *testing.T) { t.Parallel(); testOneReader(t, h.New(t)) })
	t.Run("ResetStartsANewPosition", func(t *testing.T) { t.Parallel(); testReset(t, h.New(t)) })
}

// Open opens s, retrying while the previous reader is being let go, and
// closes the stream when the test ends.
func Open(t *testing.T, s capture.Source) (capture.Stream, capture.Start) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		st, start, err := s.Open(context.Background())
		if err == nil {
			t.Cleanup(func() { _ = st.Close(context.Background()) })
			return st, start
		}
		if !errors.Is(err, capture.ErrBusy) || time.Now().After(deadline) {
			t.Fatalf("open the log: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Next receives the next transaction, failing the test when the stream
// ends or none arrives in time.
func Next(t *testing.T, st capture.Stream) capture.Txn {
	t.Helper()
	select {
	case txn, ok := <-st.Txns():
		if !ok {
			t.Fatalf("stream ended: %v", st.Err())
		}
		return txn
	case <-time.After(wait):
		t.Fatal("no transaction arrived")
	}
	return capture.Txn{}
}

// none fails if a transaction arrives within a short while.
func none(t *testing.T, st capture.Stream) {
	t.Helper()
	select {
	case txn, ok := <-st.Txns():
		if ok {
			t.Fatalf("unexpected transaction of %d events", len(txn.Events))
		}
	case <-time.After(500 * time.Millisecond):
	}
}

func requireIDs(t *testing.T, txn capture.Txn, want []uuid.UUID) {
	t.Helper()
	if len(txn.Events) != len(want) || len(txn.Seqs) != len(want) {
		t.Fatalf("transaction has %d events (%d seqs), want %d", len(txn.Events), len(txn.Seqs), len(want))
	}
	for i := range want {
		if txn.Events[i].ID != want[i] {
			t.Fatalf("event %d is %s, want %s: not in the order written", i, txn.Events[i].ID, want[i])
		}
	}
}

// Transactions arrive in commit order, each whole, its events in the order
// written.
func testCommitOrder(t *testing.T, s Setup) {
	st, start := Open(t, s.Source)
	if !start.Created {
		t.Error("the first Open did not report a new position")
	}
	a := s.Insert(t, 3)
	b := s.Insert(t, 1)
	requireIDs(t, Next(t, st), a)
	requireIDs(t, Next(t, st), b)
}

// A new stream sends again every transaction not acknowledged in the last one,
// and none that was.
func testReplay(t *testing.T, s Setup) {
	st, _ := Open(t, s.Source)
	a := s.Insert(t, 2)
	b := s.Insert(t, 2)
	ta := Next(t, st)
	requireIDs(t, ta, a)
	requireIDs(t, Next(t, st), b)
	ta.Ack()
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st2, start := Open(t, s.Source)
	if start.Created {
		t.Error("reopening reported a new position")
	}
	requireIDs(t, Next(t, st2), b)
	none(t, st2)
}

// While one stream is open, another Open says ErrBusy.
func testOneReader(t *testing.T, s Setup) {
	Open(t, s.Source)
	_, _, err := s.Source.Open(context.Background())
	if !errors.Is(err, capture.ErrBusy) {
		t.Fatalf("second Open: %v, want ErrBusy", err)
	}
}

// Reset discards the position: the next stream is new and holds nothing
// written before it.
func testReset(t *testing.T, s Setup) {
	st, _ := Open(t, s.Source)
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Insert(t, 1)
	deadline := time.Now().Add(wait)
	for {
		err := s.Source.Reset(context.Background())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reset: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st2, start := Open(t, s.Source)
	if !start.Created {
		t.Error("Open after Reset did not report a new position")
	}
	none(t, st2)
	after := s.Insert(t, 1)
	requireIDs(t, Next(t, st2), after)
}
