package binlog

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The settled position moves only over transactions all of whose
// predecessors are settled, and settled ones in a row keep one entry.
func TestSettledPositionWaitsForEarlierTransactions(t *testing.T) {
	var a acks
	p := func(n uint32) position { return position{File: "b.1", Pos: n} }
	first := a.add(p(1), false)
	a.add(p(2), true) // an unrelated transaction
	second := a.add(p(3), false)
	a.add(p(4), true)
	a.add(p(5), true)
	if len(a.queue) != 4 {
		t.Fatalf("queue holds %d entries, want 4 (settled ones in a row share one)", len(a.queue))
	}
	if _, moved := a.peek(); moved {
		t.Fatal("the position moved with the first transaction unsettled")
	}
	a.ack(second)
	if _, moved := a.peek(); moved {
		t.Fatal("the position moved past an unsettled transaction")
	}
	a.ack(first)
	pos, moved := a.take()
	if !moved || pos != p(5) {
		t.Fatalf("settled %v (moved %v), want %v", pos, moved, p(5))
	}
	if _, moved := a.take(); moved {
		t.Fatal("take reported a move twice")
	}
	a.untake(pos)
	if _, moved := a.peek(); !moved {
		t.Fatal("a failed save is not saved again")
	}
}

func TestLayoutReadsAFreshRow(t *testing.T) {
	names := []string{"event_id", "event_type", "partition_key", "payload", "headers", "status", "attempts",
		"last_error", "available_at", "locked_by", "locked_at", "delivered_at", "created_at", "updated_at", "seq", "state_at"}
	l, err := layoutOf(names)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	row := []any{string(id[:]), "order.created", []byte("k1"), []byte(`{"a":1}`), []byte(`{"h":"v"}`), "PENDING", int32(2),
		nil, "2026-12-06 10:00:00.5", nil, nil, nil, "2026-12-06 10:00:00.5", "2026-12-06 10:00:00.5", int64(42), "2026-12-06 10:00:00.5"}
	ev, seq, fresh, err := l.event(row)
	if err != nil || !fresh {
		t.Fatalf("event: fresh %v, err %v", fresh, err)
	}
	if ev.ID != id || ev.Type != "order.created" || ev.PartitionKey != "k1" || string(ev.Payload) != `{"a":1}` ||
		string(ev.Headers) != `{"h":"v"}` || ev.Attempts != 2 || seq != 42 ||
		!ev.CreatedAt.Equal(time.Date(2026, 12, 6, 10, 0, 0, 5e8, time.UTC)) {
		t.Fatalf("event %+v seq %d", ev, seq)
	}
	// Scheduled (available_at after created_at) and not PENDING: the
	// claims'.
	scheduled := append([]any(nil), row...)
	scheduled[8] = "2026-12-06 11:00:00"
	if _, _, fresh, err := l.event(scheduled); fresh || err != nil {
		t.Fatalf("a scheduled row: fresh %v, err %v", fresh, err)
	}
	dead := append([]any(nil), row...)
	dead[5] = "DEAD"
	if _, _, fresh, err := l.event(dead); fresh || err != nil {
		t.Fatalf("a DEAD row: fresh %v, err %v", fresh, err)
	}
	// A BINARY(16) id that ends in zero bytes comes without them.
	padded := append([]any(nil), row...)
	var zeroEnd uuid.UUID
	copy(zeroEnd[:], id[:14])
	padded[0] = string(zeroEnd[:14])
	if ev, _, _, err := l.event(padded); err != nil || ev.ID != zeroEnd {
		t.Fatalf("an id ending in zero bytes: %v, %v", ev.ID, err)
	}
	// A zero date (a permissive sql_mode) is no error: a zero
	// available_at is due, a zero created_at makes the row the claims'
	// (available_at after it), as they read it.
	zero := append([]any(nil), row...)
	zero[8] = "0000-00-00 00:00:00"
	if _, _, fresh, err := l.event(zero); err != nil || !fresh {
		t.Fatalf("a zero available_at: fresh %v, err %v", fresh, err)
	}
	zero[8], zero[12] = row[8], "0000-00-00 00:00:00.000000"
	if _, _, fresh, err := l.event(zero); err != nil || fresh {
		t.Fatalf("a zero created_at: fresh %v, err %v", fresh, err)
	}
	if _, _, _, err := l.event(row[:10]); err == nil {
		t.Fatal("a row of another width was read")
	}
	if _, err := layoutOf(names[1:]); err == nil || !strings.Contains(err.Error(), "event_id") {
		t.Fatalf("a table without event_id: %v", err)
	}
}

func TestServerIDsAreHighAndDistinct(t *testing.T) {
	a, b := ServerIDFor("relay-a"), ServerIDFor("relay-b")
	if a == b || a < 1<<31 || b < 1<<31 {
		t.Fatalf("ServerIDFor: %d and %d", a, b)
	}
	long := Config{Database: strings.Repeat("d", 64), Table: strings.Repeat("t", 64)}
	if n := len(long.lockName()); n > 64 {
		t.Fatalf("lock name of %d characters; MySQL takes 64", n)
	}
}
