package storagetest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Settling a lease: delivered, failed (retry or dead), released, renewed.

func testSettleDelivered(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insertN(t, tb, 4, "e")
	b := claim(t, s, "relay-1", 3)
	claimed := eventIDs(b.Events)
	unclaimed := ids[3]

	before := tb.Now(t)
	n, err := s.Settle(ctx, b.Lease, storage.Outcome{
		// Two of the lease's rows, a row outside the lease and an unknown id.
		Delivered: []uuid.UUID{claimed[0], claimed[1], unclaimed, uuid.New()},
	})
	if err != nil {
		t.Fatal(err)
	}
	after := tb.Now(t)
	if n != (storage.Settled{Delivered: 2}) {
		t.Fatalf("Settle of delivered rows changed %+v, want 2 delivered", n)
	}
	rows := byID(t, tb)
	for _, id := range claimed[:2] {
		row := rows[id]
		if row.Status != outbox.StatusDelivered || row.LockedBy != nil || row.LockedAt != nil {
			t.Errorf("delivered row = %s, want DELIVERED and unlocked", describe(row))
		}
		if row.DeliveredAt == nil || row.DeliveredAt.Before(before) || row.DeliveredAt.After(after) {
			t.Errorf("delivered_at = %v, want the database's now (between %s and %s)", row.DeliveredAt, before, after)
		}
		if row.UpdatedAt.Before(before) || row.UpdatedAt.After(after) {
			t.Errorf("updated_at = %s, want the database's now", row.UpdatedAt)
		}
		if row.Attempts != 0 {
			t.Errorf("delivery counted an attempt: %s", describe(row))
		}
	}
	if row := rows[claimed[2]]; row.Status != outbox.StatusDelivering || str(row.LockedBy) != "relay-1" || row.DeliveredAt != nil {
		t.Errorf("the lease's row not named was changed: %s", describe(row))
	}
	if row := rows[unclaimed]; row.Status != outbox.StatusPending || row.DeliveredAt != nil {
		t.Errorf("a PENDING row named in a Settle was changed: %s", describe(row))
	}
	// Settling twice changes nothing.
	if n, err := s.Settle(ctx, b.Lease, storage.Outcome{Delivered: claimed[:2]}); err != nil || n.Delivered != 0 {
		t.Fatalf("second Settle = %d, %v; want 0", n.Delivered, err)
	}
}

// testDeleteDelivered: DELIVERED_RETENTION=0 deletes exactly the lease's
// named rows and nothing else.
func testDeleteDelivered(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insertN(t, tb, 4, "e")
	b := claim(t, s, "relay-1", 3)
	claimed := eventIDs(b.Events)
	unclaimed := ids[3]

	n, err := s.Settle(ctx, b.Lease, storage.Outcome{
		// Two of the lease's rows, a row outside the lease and an unknown id.
		Delivered: []uuid.UUID{claimed[0], claimed[1], unclaimed, uuid.New()},
		Delete:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != (storage.Settled{Delivered: 2}) {
		t.Fatalf("Settle with Delete deleted %+v, want 2 delivered", n)
	}
	rows := byID(t, tb)
	if len(rows) != 2 {
		t.Fatalf("%d rows left, want 2", len(rows))
	}
	for _, id := range claimed[:2] {
		if row, ok := rows[id]; ok {
			t.Errorf("delivered row still there: %s", describe(row))
		}
	}
	if row := rows[claimed[2]]; row.Status != outbox.StatusDelivering || str(row.LockedBy) != "relay-1" {
		t.Errorf("the lease's row not named was changed: %s", describe(row))
	}
	if row := rows[unclaimed]; row.Status != outbox.StatusPending {
		t.Errorf("a PENDING row named in a Settle was changed: %s", describe(row))
	}
	if n, err := s.Settle(ctx, b.Lease, storage.Outcome{Delivered: claimed[:2], Delete: true}); err != nil || n.Delivered != 0 {
		t.Fatalf("second Settle with Delete = %d, %v; want 0", n.Delivered, err)
	}
}

// testDeleteDeliveredKeepsToItsLease: a relay whose lease was reaped and
// claimed again deletes nothing: not the new lease's rows, not rows of
// another relay, not rows that finished otherwise.
func testDeleteDeliveredKeepsToItsLease(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insertN(t, tb, 3, "e")
	stale := claim(t, s, "relay-1", 3)
	// The lease expires; another relay claims the first row again, the
	// second went DEAD, the third is PENDING again.
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("relay-2"), LockedAt: Ago(0)}, ids[0])
	tb.Set(t, Change{Status: outbox.StatusDead, LockedBy: Ptr(""), UpdatedAt: Ago(0)}, ids[1])
	tb.Set(t, Change{Status: outbox.StatusPending, LockedBy: Ptr(""), AvailableAt: Ago(0)}, ids[2])
	if n, err := s.Settle(ctx, stale.Lease, storage.Outcome{Delivered: ids, Delete: true}); err != nil || n.Delivered != 0 {
		t.Fatalf("Settle with Delete under a stale lease = %d, %v; want 0", n.Delivered, err)
	}
	// The same relay's new lease on the row: the old stamp is not it.
	tb.Set(t, Change{LockedBy: Ptr("relay-1"), LockedAt: Ago(-time.Second)}, ids[0])
	if n, err := s.Settle(ctx, stale.Lease, storage.Outcome{Delivered: ids, Delete: true}); err != nil || n.Delivered != 0 {
		t.Fatalf("Settle with Delete with an old stamp = %d, %v; want 0", n.Delivered, err)
	}
	if got := len(tb.Rows(t)); got != 3 {
		t.Fatalf("%d rows left, want all 3", got)
	}
}

func testSettleFailed(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insertN(t, tb, 7, "e")
	// Earlier failures must be added to, not replaced.
	tb.Set(t, Change{Attempts: Ptr(2), LastError: Ptr("earlier")}, ids[1])
	b := claim(t, s, "relay-1", 6)
	retryLong, dead, untouched, retryShort, retryNow, retryMicro, unclaimed := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	deadAvailableAt := rowOf(t, tb, dead).AvailableAt
	delays := map[uuid.UUID]time.Duration{
		retryLong:  10 * time.Minute,
		retryShort: 1500 * time.Millisecond,
		retryNow:   0,
		retryMicro: 2*time.Second + 345678*time.Microsecond,
	}

	before := tb.Now(t)
	n, err := s.Settle(ctx, b.Lease, storage.Outcome{Failed: []storage.Failure{
		{ID: retryLong, Error: "broker said no", Delay: delays[retryLong]},
		{ID: dead, Error: "message too large", Dead: true, Delay: time.Hour},
		{ID: retryShort, Error: "short", Delay: delays[retryShort]},
		{ID: retryNow, Error: "now", Delay: delays[retryNow]},
		{ID: retryMicro, Error: "micro", Delay: delays[retryMicro]},
		{ID: unclaimed, Error: "not leased", Dead: true},
		{ID: uuid.New(), Error: "unknown"},
	}})
	after := tb.Now(t)
	if err != nil {
		t.Fatal(err)
	}
	if n != (storage.Settled{Failed: 5}) {
		t.Fatalf("Settle of failures changed %+v, want 5 failed", n)
	}

	rows := byID(t, tb)
	for id, delay := range delays {
		row := rows[id]
		if row.Status != outbox.StatusPending || row.Attempts != 1 || row.LockedBy != nil || row.LockedAt != nil {
			t.Errorf("retried row = %s, want PENDING, 1 attempt, unlocked", describe(row))
		}
		// Backing off as asked, by the database's clock: a driver that
		// rounds the delay to seconds, or ignores it, fails here.
		const slack = 50 * time.Millisecond
		if row.AvailableAt.Before(before.Add(delay-slack)) || row.AvailableAt.After(after.Add(delay+slack)) {
			t.Errorf("row retried after %s: available_at - now = %s..%s, want %s",
				delay, row.AvailableAt.Sub(after), row.AvailableAt.Sub(before), delay)
		}
	}
	if got := str(rows[retryLong].LastError); got != "broker said no" {
		t.Errorf("retried row last_error = %q", got)
	}
	// Of the retried rows only the one due now comes back at once, with
	// its attempt counted.
	again := claim(t, s, "relay-1", 10)
	if got := eventIDs(again.Events); !sameSet(got, []uuid.UUID{retryNow, unclaimed}) {
		t.Errorf("claim after a Settle of failures took %v, want the row retried without delay %s and the unclaimed %s", got, retryNow, unclaimed)
	}
	for _, e := range again.Events {
		if e.ID == retryNow && e.Attempts != 1 {
			t.Errorf("the retried row came back with %d attempts, want 1", e.Attempts)
		}
	}

	row := rows[dead]
	if row.Status != outbox.StatusDead || row.Attempts != 3 || str(row.LastError) != "message too large" || row.LockedBy != nil {
		t.Errorf("dead row = %s, want DEAD, 3 attempts, the error, unlocked", describe(row))
	}
	if !row.AvailableAt.Equal(deadAvailableAt) {
		t.Errorf("dead row available_at moved from %s to %s", deadAvailableAt, row.AvailableAt)
	}
	if row.UpdatedAt.Before(before) || row.UpdatedAt.After(after) {
		t.Errorf("dead row updated_at = %s, want the moment it died (prune and retry-dead age DEAD rows by it)", row.UpdatedAt)
	}
	if row := rows[untouched]; row.Status != outbox.StatusDelivering || row.Attempts != 0 || row.LastError != nil {
		t.Errorf("the lease's row not named was changed: %s", describe(row))
	}
	if row := rows[unclaimed]; row.Status != outbox.StatusPending || row.Attempts != 0 || row.LastError != nil {
		t.Errorf("a row outside the lease was marked failed: %s", describe(row))
	}
}

func testSettleFailedStoresErrorsSafely(t *testing.T, h Harness) {
	tests := []struct {
		name string
		msg  string
		// want is the stored last_error; empty means check the truncation
		// rules instead.
		want string
	}{
		{name: "short", msg: "boom", want: "boom"},
		{name: "exactly the limit", msg: strings.Repeat("a", storage.LastErrorMax), want: strings.Repeat("a", storage.LastErrorMax)},
		{name: "one byte over", msg: strings.Repeat("a", storage.LastErrorMax+1), want: strings.Repeat("a", storage.LastErrorMax) + "…"},
		{name: "long ASCII", msg: strings.Repeat("broker error ", 1000)},
		// "x" shifts every two-byte rune so that the limit falls inside one.
		{name: "long, cut inside a rune", msg: "x" + strings.Repeat("é", 1500)},
		{name: "long, four-byte runes", msg: strings.Repeat("🙂", 1000)},
		{name: "quotes and backslashes", msg: `it's a "quoted" \ error; --`, want: `it's a "quoted" \ error; --`},
		// Broker errors can quote binary data; text columns reject text
		// that is not UTF-8 or holds NUL, which would fail the whole settle.
		{name: "invalid UTF-8", msg: "bad \xff\xfe bytes", want: "bad \ufffd bytes"},
		{name: "NUL byte", msg: "nul\x00here", want: "nul\ufffdhere"},
		{name: "long, invalid UTF-8", msg: strings.Repeat("a\xff", 1500)},
	}
	tb := h.New(t)
	ids := insert(t, tb, make([]event, len(tests))...)
	b := claim(t, tb.Storage(), "relay-1", len(ids))
	failures := make([]storage.Failure, len(tests))
	for i, tt := range tests {
		failures[i] = storage.Failure{ID: ids[i], Error: tt.msg, Dead: true}
	}
	n, err := tb.Storage().Settle(ctx, b.Lease, storage.Outcome{Failed: failures})
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if n.Failed != len(tests) {
		t.Fatalf("Settle of failures changed %+v, want %d failed", n, len(tests))
	}
	rows := byID(t, tb)
	for i, tt := range tests {
		got := str(rows[ids[i]].LastError)
		if !utf8.ValidString(got) {
			t.Errorf("%s: stored error is not valid UTF-8: %q", tt.name, got)
			continue
		}
		if tt.want != "" {
			if got != tt.want {
				t.Errorf("%s: stored error = %.80q… (%d bytes), want %.80q… (%d bytes)", tt.name, got, len(got), tt.want, len(tt.want))
			}
			continue
		}
		kept, ok := strings.CutSuffix(got, "…")
		if !ok {
			t.Errorf("%s: truncated error does not end with …: %.80q", tt.name, got[max(0, len(got)-80):])
			continue
		}
		if len(kept) > storage.LastErrorMax || len(kept) < storage.LastErrorMax-4 {
			t.Errorf("%s: truncated error keeps %d bytes, want %d-%d", tt.name, len(kept), storage.LastErrorMax-4, storage.LastErrorMax)
		}
		if utf8.ValidString(tt.msg) && !strings.HasPrefix(tt.msg, kept) {
			t.Errorf("%s: truncated error is not a prefix of the original", tt.name)
		}
	}
}

// testReleaseBurnsNoAttempt: a broker that is down is not the event's
// failure.
func testReleaseBurnsNoAttempt(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	// The first row is set up before the others are written: a change of
	// its schedule may make it claimable anew, after rows written before
	// the change (PostgreSQL's writer trigger).
	ids := insertN(t, tb, 1, "e")
	tb.Set(t, Change{Attempts: Ptr(1), LastError: Ptr("earlier"), AvailableAt: Ago(time.Minute)}, ids[0])
	ids = append(ids, insertN(t, tb, 2, "e")...)
	availableAt := rowOf(t, tb, ids[0]).AvailableAt
	b := claim(t, s, "relay-1", 2)
	claimed := eventIDs(b.Events)

	n, err := s.Settle(ctx, b.Lease, storage.Outcome{Released: []uuid.UUID{claimed[0], ids[2]}})
	if err != nil {
		t.Fatal(err)
	}
	if n != (storage.Settled{Released: 1}) {
		t.Fatalf("Settle of released rows changed %+v, want 1 released", n)
	}
	rows := byID(t, tb)
	row := rows[claimed[0]]
	if row.Status != outbox.StatusPending || row.Attempts != 1 || str(row.LastError) != "earlier" || row.LockedBy != nil || row.LockedAt != nil {
		t.Errorf("released row = %s, want PENDING with attempts and last_error unchanged, unlocked", describe(row))
	}
	// Due at once: available_at kept, or moved to the database's now (the
	// PostgreSQL driver's release puts the row in the due index, written by
	// the releasing transaction, so that its claim frontier meets it
	// again), never into the future.
	if now := tb.Now(t); !row.AvailableAt.Equal(availableAt) && !within(row.AvailableAt, now, clockSlack) || row.AvailableAt.After(now) {
		t.Errorf("release moved available_at from %s to %s, want it kept or the database's now (%s)", availableAt, row.AvailableAt, now)
	}
	if row := rows[claimed[1]]; row.Status != outbox.StatusDelivering {
		t.Errorf("the lease's row not named was released: %s", describe(row))
	}

	// Released rows are due at once.
	again := claim(t, s, "relay-2", 10)
	if got := eventIDs(again.Events); !sameSet(got, []uuid.UUID{claimed[0], ids[2]}) {
		t.Fatalf("claim after release took %v, want %v and %v", got, claimed[0], ids[2])
	}
}

// everyKind is an outcome of each kind for ids[:4]: ids[0] delivered
// (deleted with del), ids[1] failed and retried in an hour, ids[2] failed
// DEAD, ids[3] released.
func everyKind(ids []uuid.UUID, del bool) storage.Outcome {
	return storage.Outcome{
		Delivered: ids[:1],
		Delete:    del,
		Failed: []storage.Failure{
			{ID: ids[1], Error: "broker said later", Delay: time.Hour},
			{ID: ids[2], Error: "broker said never", Dead: true},
		},
		Released: ids[3:4],
	}
}

// testSettleEveryKindOnce: one Settle records every kind of outcome, and
// counts each kind's rows; run again, as a relay retries a Settle whose
// answer was lost, it changes nothing, and a failure's attempt is counted
// once.
func testSettleEveryKindOnce(t *testing.T, h Harness) {
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete=%v", del), func(t *testing.T) {
			t.Parallel()
			tb := h.New(t)
			s := tb.Storage()
			insertN(t, tb, 5, "e")
			b := claim(t, s, "relay-1", 5)
			ids := eventIDs(b.Events)
			o := everyKind(ids, del)
			want := storage.Settled{Delivered: 1, Failed: 2, Released: 1}
			if n, err := s.Settle(ctx, b.Lease, o); err != nil || n != want {
				t.Fatalf("Settle = %+v, %v; want %+v", n, err, want)
			}
			before := snapshot(t, tb)
			if n, err := s.Settle(ctx, b.Lease, o); err != nil || n != (storage.Settled{}) {
				t.Fatalf("Settle again = %+v, %v; want nothing", n, err)
			}
			requireUnchanged(t, "settling again", before, snapshot(t, tb))
			rows := byID(t, tb)
			if row, ok := rows[ids[0]]; ok == del || ok && row.Status != outbox.StatusDelivered {
				t.Errorf("delivered row = %s (there: %v), want DELIVERED, or deleted with Delete", describe(row), ok)
			}
			if row := rows[ids[1]]; row.Status != outbox.StatusPending || row.Attempts != 1 {
				t.Errorf("retried row = %s, want PENDING with 1 attempt", describe(row))
			}
			if row := rows[ids[2]]; row.Status != outbox.StatusDead || row.Attempts != 1 {
				t.Errorf("dead row = %s, want DEAD with 1 attempt", describe(row))
			}
			if row := rows[ids[3]]; row.Status != outbox.StatusPending || row.Attempts != 0 {
				t.Errorf("released row = %s, want PENDING with no attempt", describe(row))
			}
			if row := rows[ids[4]]; row.Status != outbox.StatusDelivering {
				t.Errorf("the lease's row not named = %s, want DELIVERING", describe(row))
			}
		})
	}
}

func testRenewMovesRowsToANewLease(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insertN(t, tb, 3, "renew")
	b := claim(t, s, "r", 3)
	old := b.Lease
	to := old.LockedAt.Add(20 * time.Second)

	n, err := s.Renew(ctx, storage.RenewParams{Lease: old, IDs: ids[:2], To: to})
	if err != nil || n != 2 {
		t.Fatalf("Renew = %d, %v; want 2 rows", n, err)
	}
	// A renewal whose answer was lost is repeated with both stamps.
	unsure := old
	unsure.Unconfirmed = []time.Time{to}
	if n, err := s.Renew(ctx, storage.RenewParams{Lease: unsure, IDs: ids[:2], To: to}); err != nil || n != 2 {
		t.Fatalf("repeating the renewal = %d, %v; want the same 2 rows", n, err)
	}
	rows := byID(t, tb)
	for _, id := range ids[:2] {
		if r := rows[id]; !lockedAt(r).Equal(to) || r.Status != outbox.StatusDelivering || str(r.LockedBy) != "r" {
			t.Errorf("renewed row = %s, want locked_at %s", describe(r), to)
		}
	}
	renewed := storage.Lease{RelayID: "r", LockedAt: to}
	if n, _ := s.Settle(ctx, old, storage.Outcome{Delivered: ids}); n.Delivered != 1 {
		t.Fatalf("the old lease settled %d rows, want only the one not renewed", n.Delivered)
	}
	if n, _ := s.Settle(ctx, renewed, storage.Outcome{Delivered: ids}); n.Delivered != 2 {
		t.Fatalf("the new lease settled %d rows, want 2", n.Delivered)
	}
	if n, err := s.Renew(ctx, storage.RenewParams{Lease: renewed, IDs: ids, To: to.Add(time.Second)}); err != nil || n != 0 {
		t.Fatalf("renewing settled rows = %d, %v; want 0", n, err)
	}
}

func testSettleAcceptsAnyStampARenewalMayHaveSet(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insertN(t, tb, 1, "unsure")
	b := claim(t, s, "r", 1)
	to := b.Lease.LockedAt.Add(time.Minute)
	// The renewal lands, but its answer is lost.
	if _, err := s.Renew(ctx, storage.RenewParams{Lease: b.Lease, IDs: ids, To: to}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Settle(ctx, b.Lease, storage.Outcome{Delivered: ids}); n.Delivered != 0 {
		t.Fatalf("the stale lease alone settled %d rows", n.Delivered)
	}
	unsure := b.Lease
	unsure.Unconfirmed = []time.Time{to.Add(time.Second), to}
	if n, err := s.Settle(ctx, unsure, storage.Outcome{Delivered: ids}); err != nil || n.Delivered != 1 {
		t.Fatalf("settling with every stamp the row may hold = %d, %v; want 1", n.Delivered, err)
	}
}

// testLeaseStampsKeepMicroseconds: a lease stamp the relay passes back must
// match what the row holds exactly. A column or a parameter that keeps
// only milliseconds (or rounds instead of keeping the microseconds) would
// make every renewed lease unsettlable.
func testLeaseStampsKeepMicroseconds(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insertN(t, tb, 3, "micro")
	b := claim(t, s, "r", 3)
	if l := b.Lease.LockedAt; !l.Equal(l.Truncate(time.Microsecond)) {
		t.Errorf("Claim's lease stamp %s has a finer precision than microseconds", l.Format(time.RFC3339Nano))
	}
	// Stamps whose last microsecond digits would be lost by milliseconds,
	// by rounding (…999 995 rounds up a second) or by a float.
	stamps := []time.Time{
		b.Lease.LockedAt.Truncate(time.Second).Add(time.Second + 123457*time.Microsecond),
		b.Lease.LockedAt.Truncate(time.Second).Add(2*time.Second + 999995*time.Microsecond),
		b.Lease.LockedAt.Truncate(time.Second).Add(4*time.Second + 1*time.Microsecond),
	}
	for i, to := range stamps {
		if n, err := s.Renew(ctx, storage.RenewParams{Lease: b.Lease, IDs: ids[i : i+1], To: to}); err != nil || n != 1 {
			t.Fatalf("Renew to %s = %d, %v; want 1", to.Format(time.RFC3339Nano), n, err)
		}
	}
	rows := byID(t, tb)
	for i, to := range stamps {
		if got := lockedAt(rows[ids[i]]); !got.Equal(to) {
			t.Errorf("renewed to %s, the row holds %s", to.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano))
		}
		lease := storage.Lease{RelayID: "r", LockedAt: to}
		if n, err := s.Settle(ctx, lease, storage.Outcome{Delivered: ids[i : i+1]}); err != nil || n.Delivered != 1 {
			t.Errorf("Settle with the renewed stamp %s = %d, %v; want 1", to.Format(time.RFC3339Nano), n.Delivered, err)
		}
	}
}

// ---- Lease guards ----------------------------------------------------------

// settleKind is one way of changing a leased row.
type settleKind struct {
	name   string
	settle func(s storage.Queue, l storage.Lease, id uuid.UUID) (int, error)
}

// rowsSettled is how many rows a Settle changed.
func rowsSettled(n storage.Settled, err error) (int, error) { return n.Len(), err }

var settleKinds = []settleKind{
	{"Settle delivered", func(s storage.Queue, l storage.Lease, id uuid.UUID) (int, error) {
		return rowsSettled(s.Settle(ctx, l, storage.Outcome{Delivered: []uuid.UUID{id}}))
	}},
	{"Settle deleted", func(s storage.Queue, l storage.Lease, id uuid.UUID) (int, error) {
		return rowsSettled(s.Settle(ctx, l, storage.Outcome{Delivered: []uuid.UUID{id}, Delete: true}))
	}},
	{"Settle failed retry", func(s storage.Queue, l storage.Lease, id uuid.UUID) (int, error) {
		return rowsSettled(s.Settle(ctx, l, storage.Outcome{Failed: []storage.Failure{{ID: id, Error: "late", Delay: time.Hour}}}))
	}},
	{"Settle failed dead", func(s storage.Queue, l storage.Lease, id uuid.UUID) (int, error) {
		return rowsSettled(s.Settle(ctx, l, storage.Outcome{Failed: []storage.Failure{{ID: id, Error: "late", Dead: true}}}))
	}},
	{"Settle released", func(s storage.Queue, l storage.Lease, id uuid.UUID) (int, error) {
		return rowsSettled(s.Settle(ctx, l, storage.Outcome{Released: []uuid.UUID{id}}))
	}},
	{"Renew", func(s storage.Queue, l storage.Lease, id uuid.UUID) (int, error) {
		return s.Renew(ctx, storage.RenewParams{Lease: l, IDs: []uuid.UUID{id}, To: l.LockedAt.Add(time.Minute)})
	}},
}

// takeover leases rows to one relay and hands them to another lease; stale
// is the lease that no longer holds them and current the one that does.
type takeover func(t *testing.T, tb Table, ids []uuid.UUID) (stale, current storage.Lease)

// testStaleLeasesChangeNothing: a late answer from a relay whose lease was
// taken over — by another relay, by another relay in the same microsecond,
// or by the same relay claiming the row again — changes nothing, whichever
// way it settles; the current lease still settles.
func testStaleLeasesChangeNothing(t *testing.T, h Harness) {
	takeovers := []struct {
		name string
		take takeover
	}{
		{"reaped and claimed by another relay", func(t *testing.T, tb Table, ids []uuid.UUID) (storage.Lease, storage.Lease) {
			a := claim(t, tb.Storage(), "relay-a", len(ids))
			reapAll(t, tb, ids)
			return a.Lease, claimAll(t, tb, "relay-b", ids).Lease
		}},
		{"held by another relay since the same instant", func(t *testing.T, tb Table, ids []uuid.UUID) (storage.Lease, storage.Lease) {
			a := claim(t, tb.Storage(), "relay-a", len(ids))
			// Only locked_by tells the two leases apart.
			tb.Set(t, Change{LockedBy: Ptr("relay-b")}, ids...)
			return a.Lease, storage.Lease{RelayID: "relay-b", LockedAt: a.Lease.LockedAt}
		}},
		{"reaped and claimed again by the same relay", func(t *testing.T, tb Table, ids []uuid.UUID) (storage.Lease, storage.Lease) {
			old := claim(t, tb.Storage(), "relay-a", len(ids))
			reapAll(t, tb, ids)
			current := claimAll(t, tb, "relay-a", ids)
			if current.Lease.LockedAt.Equal(old.Lease.LockedAt) {
				t.Fatalf("the new claim got the old lease %v", old.Lease)
			}
			return old.Lease, current.Lease
		}},
	}
	for _, to := range takeovers {
		t.Run(to.name, func(t *testing.T) {
			t.Parallel()
			tb := h.New(t)
			s := tb.Storage()
			ids := insertN(t, tb, len(settleKinds), "e")
			stale, current := to.take(t, tb, ids)

			before := snapshot(t, tb)
			for i, k := range settleKinds {
				if n, err := k.settle(s, stale, ids[i]); err != nil || n != 0 {
					t.Errorf("%s with the stale lease = %d, %v; want 0", k.name, n, err)
				}
			}
			requireUnchanged(t, "settling with a stale lease", before, snapshot(t, tb))
			for i, k := range settleKinds {
				if n, err := k.settle(s, current, ids[i]); err != nil || n != 1 {
					t.Errorf("%s with the current lease = %d, %v; want 1", k.name, n, err)
				}
			}
		})
	}
}

// reapAll expires the leases on ids and reaps them back to PENDING.
func reapAll(t *testing.T, tb Table, ids []uuid.UUID) {
	t.Helper()
	tb.Set(t, Change{LockedAt: Ago(time.Hour)}, ids...)
	res, err := tb.Storage().Reap(ctx, storage.ReapParams{LeaseTimeout: time.Minute, Limit: 100, MaxAttempts: 100})
	if err != nil || res != (storage.ReapResult{Requeued: len(ids)}) {
		t.Fatalf("Reap = %+v, %v; want %d requeued", res, err, len(ids))
	}
}

// claimAll claims exactly ids.
func claimAll(t *testing.T, tb Table, relayID string, ids []uuid.UUID) storage.Batch {
	t.Helper()
	b := claim(t, tb.Storage(), relayID, len(ids)+1)
	if !sameSet(eventIDs(b.Events), ids) {
		t.Fatalf("%s claimed %v, want %v", relayID, eventIDs(b.Events), ids)
	}
	return b
}

// snapshot is every row's full state, by event id.
func snapshot(t testing.TB, tb Table) map[uuid.UUID]string {
	t.Helper()
	out := map[uuid.UUID]string{}
	for _, r := range tb.Rows(t) {
		out[r.ID] = describe(r)
	}
	return out
}

// requireUnchanged fails t when after differs from before in any row;
// what names the operation in between.
func requireUnchanged(t testing.TB, what string, before, after map[uuid.UUID]string) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%s: %d rows before, %d after", what, len(before), len(after))
	}
	for id, b := range before {
		if after[id] != b {
			t.Fatalf("%s changed row %s:\nbefore %s\nafter  %s", what, id, b, after[id])
		}
	}
}

// describe writes every column of r, times in UTC to the microsecond.
func describe(r storage.Row) string {
	at := func(t *time.Time) string {
		if t == nil {
			return "NULL"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	text := func(s *string) string {
		if s == nil {
			return "NULL"
		}
		return fmt.Sprintf("%q", *s)
	}
	seq := "NULL"
	if r.Seq != nil {
		seq = fmt.Sprint(*r.Seq)
	}
	return fmt.Sprintf("{id %s type %q key %s payload %q headers %s status %s attempts %d last_error %s available_at %s locked_by %s locked_at %s delivered_at %s created_at %s updated_at %s seq %s}",
		r.ID, r.Type, text(r.PartitionKey), r.Payload, r.Headers, r.Status, r.Attempts, text(r.LastError),
		at(&r.AvailableAt), text(r.LockedBy), at(r.LockedAt), at(r.DeliveredAt), at(&r.CreatedAt), at(&r.UpdatedAt), seq)
}
