package storagetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// What operators run: backlog, stats, list, get, prune, retry-dead, emit.

const day = 24 * time.Hour

func testBacklogCountsPendingAndDead(t *testing.T, h Harness) {
	tb := h.New(t)
	ids := insertN(t, tb, 10, "e")
	// Pending: ids[0..2] new (ids[0] the oldest due, an hour old), ids[3..4]
	// retrying, ids[9] new but not due (and older still). ids[5]
	// DELIVERING, ids[6] DELIVERED, ids[7..8] DEAD, all older than ids[0].
	tb.Set(t, Change{CreatedAt: Ago(time.Hour)}, ids[0])
	tb.Set(t, Change{Attempts: Ptr(1)}, ids[3])
	tb.Set(t, Change{Attempts: Ptr(7), AvailableAt: Ago(-time.Hour)}, ids[4])
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("r"), LockedAt: Ago(0), CreatedAt: Ago(2 * time.Hour)}, ids[5])
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(0), CreatedAt: Ago(3 * time.Hour)}, ids[6])
	tb.Set(t, Change{Status: outbox.StatusDead, Attempts: Ptr(25), CreatedAt: Ago(4 * time.Hour)}, ids[7])
	tb.Set(t, Change{Status: outbox.StatusDead, CreatedAt: Ago(5 * time.Hour)}, ids[8])
	tb.Set(t, Change{CreatedAt: Ago(6 * time.Hour), AvailableAt: Ago(-30 * day)}, ids[9])

	b, err := tb.Storage().Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.PendingNew != 4 || b.PendingRetrying != 2 || b.Pending() != 6 || b.Dead != 2 {
		t.Errorf("Backlog = new %d retrying %d dead %d, want 4, 2, 2", b.PendingNew, b.PendingRetrying, b.Dead)
	}
	oldest := rowOf(t, tb, ids[0]).CreatedAt
	if !b.OldestPendingAt.Equal(oldest) {
		t.Errorf("OldestPendingAt = %s, want the oldest due PENDING row's %s (rows not due, DELIVERING, DELIVERED or DEAD do not count)",
			b.OldestPendingAt, oldest)
	}
	if b.OldestPendingAge < time.Hour || b.OldestPendingAge > time.Hour+clockSlack {
		t.Errorf("OldestPendingAge = %s, want about 1h", b.OldestPendingAge)
	}

	// Nothing due: pending, but not late.
	tb.Set(t, Change{AvailableAt: Ago(-time.Hour)}, ids[:4]...)
	if b, err := tb.Storage().Backlog(ctx); err != nil || b.Pending() != 6 || !b.OldestPendingAt.IsZero() || b.OldestPendingAge != 0 {
		t.Errorf("Backlog with nothing due = %+v, %v; want 6 pending and no oldest", b, err)
	}
}

func testStats(t *testing.T, h Harness) {
	tb := h.New(t)
	a := insertN(t, tb, 3, "type.a")
	b := insertN(t, tb, 2, "type.b")
	c := insertN(t, tb, 1, "type.c")
	done := insertN(t, tb, 7, "done")
	tb.Set(t, Change{CreatedAt: Ago(10 * time.Minute)}, a[0])
	tb.Set(t, Change{Attempts: Ptr(2)}, a[1])
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("relay-x"), LockedAt: Ago(90 * time.Second)}, b[0])
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("relay-y"), LockedAt: Ago(0)}, b[1])
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("relay-x"), LockedAt: Ago(0)}, c[0])
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(10 * time.Second)}, done[0])
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(30 * time.Minute)}, done[1])
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(2 * time.Hour)}, done[2])
	tb.Set(t, Change{Status: outbox.StatusDead}, done[3])
	// Delivered long after they were created (a backlog, retries): they
	// count by when they were delivered. The last one was delivered 48s
	// after it was created, just over an hour ago.
	tb.Set(t, Change{Status: outbox.StatusDelivered, CreatedAt: Ago(3 * time.Hour), DeliveredAt: Ago(20 * time.Second)}, done[4])
	tb.Set(t, Change{Status: outbox.StatusDelivered, CreatedAt: Ago(2 * time.Hour), DeliveredAt: Ago(50 * time.Minute)}, done[5])
	tb.Set(t, Change{Status: outbox.StatusDelivered, CreatedAt: Ago(time.Hour + 30*time.Second), DeliveredAt: Ago(time.Hour - 18*time.Second)}, done[6])

	st, err := tb.Storage().Stats(ctx, storage.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if st.PendingNew != 2 || st.PendingRetrying != 1 || st.Delivering != 3 || st.Delivered != 6 || st.Dead != 1 {
		t.Errorf("counts: new %d retrying %d delivering %d delivered %d dead %d, want 2 1 3 6 1",
			st.PendingNew, st.PendingRetrying, st.Delivering, st.Delivered, st.Dead)
	}
	if st.DeliveredLastMinute != 2 || st.DeliveredLastHour != 5 {
		t.Errorf("delivered last minute %d, last hour %d; want 2 and 5", st.DeliveredLastMinute, st.DeliveredLastHour)
	}
	if st.OldestPendingAge < 10*time.Minute || st.OldestPendingAge > 10*time.Minute+clockSlack {
		t.Errorf("OldestPendingAge = %s, want about 10m", st.OldestPendingAge)
	}
	if len(st.TopTypes) != 1 || st.TopTypes[0].EventType != "type.a" || st.TopTypes[0].Pending != 3 ||
		st.TopTypes[0].OldestPendingAge < 10*time.Minute || st.TopTypes[0].OldestPendingAge > 10*time.Minute+clockSlack {
		t.Errorf("TopTypes = %+v, want only type.a with 3, the oldest 10m old (type.b and type.c are all DELIVERING)", st.TopTypes)
	}
	var gotLeases []string
	for _, l := range st.Leases {
		gotLeases = append(gotLeases, fmt.Sprintf("%s:%d", l.RelayID, l.Events))
	}
	if want := []string{"relay-x:2", "relay-y:1"}; !slices.Equal(gotLeases, want) {
		t.Fatalf("Leases = %v, want %v, most rows first", gotLeases, want)
	}
	if l := st.Leases[0]; l.OldestLeaseAge < 90*time.Second || l.OldestLeaseAge > 90*time.Second+clockSlack ||
		!l.OldestLockedAt.Equal(lockedAt(rowOf(t, tb, b[0]))) {
		t.Errorf("relay-x's oldest lease: %s, %s old; want b[0]'s locked_at, about 90s old", l.OldestLockedAt, l.OldestLeaseAge)
	}
	if len(st.BlockedKeys) != 0 {
		t.Errorf("BlockedKeys = %+v, want none: no key has a DEAD head", st.BlockedKeys)
	}
	if now := tb.Now(t); st.ObservedAt.After(now) || st.ObservedAt.Before(now.Add(-clockSlack)) {
		t.Errorf("ObservedAt = %s, want the database's clock (%s)", st.ObservedAt, now)
	}

	// TopTypes: largest backlog first, as many as asked for.
	insertN(t, tb, 5, "type.d")
	insertN(t, tb, 1, "type.e")
	st, err = tb.Storage().Stats(ctx, storage.StatsParams{TopTypes: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tt := range st.TopTypes {
		got = append(got, fmt.Sprintf("%s:%d", tt.EventType, tt.Pending))
	}
	if want := []string{"type.d:5", "type.a:3"}; !slices.Equal(got, want) {
		t.Errorf("TopTypes(2) = %v, want %v", got, want)
	}
	if _, err := tb.Storage().Stats(ctx, storage.StatsParams{TopTypes: -1}); err == nil {
		t.Error("Stats accepted a negative TopTypes")
	}
}

func testList(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	first := insert(t, tb, event{Type: "a"}, event{Type: "b"})
	second := insert(t, tb, event{Type: "a", PartitionKey: "k"}, event{Type: "a"})
	tb.Set(t, Change{CreatedAt: Ago(time.Minute)}, first...)
	tb.Set(t, Change{Status: outbox.StatusDead, LastError: Ptr("boom")}, first[0])

	list := func(p storage.ListParams) []uuid.UUID { t.Helper(); return listIDs(t, s, p) }
	// Newest first; within one statement, the later insert first.
	if got, want := list(storage.ListParams{}), []uuid.UUID{second[1], second[0], first[1], first[0]}; !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	if got, want := list(storage.ListParams{Limit: 2}), []uuid.UUID{second[1], second[0]}; !slices.Equal(got, want) {
		t.Errorf("List limit 2 = %v, want %v", got, want)
	}
	if got, want := list(storage.ListParams{EventType: "a"}), []uuid.UUID{second[1], second[0], first[0]}; !slices.Equal(got, want) {
		t.Errorf("List type a = %v, want %v", got, want)
	}
	if got, want := list(storage.ListParams{Status: outbox.StatusDead}), []uuid.UUID{first[0]}; !slices.Equal(got, want) {
		t.Errorf("List DEAD = %v, want %v", got, want)
	}
	if got := list(storage.ListParams{Status: outbox.StatusPending, EventType: "b"}); !slices.Equal(got, first[1:2]) {
		t.Errorf("List PENDING b = %v, want %v", got, first[1])
	}
	if got := list(storage.ListParams{Status: outbox.StatusDelivered}); len(got) != 0 {
		t.Errorf("List DELIVERED = %v, want nothing", got)
	}
	if _, err := s.List(ctx, storage.ListParams{Status: "SLEEPING"}); err == nil {
		t.Error("List accepted an unknown status")
	}

	rows, err := s.List(ctx, storage.ListParams{Status: outbox.StatusDead})
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if r.Type != "a" || r.PartitionKey != nil || str(r.LastError) != "boom" || r.Age < time.Minute || r.Age > time.Minute+clockSlack {
		t.Errorf("listed row = %+v, want type a, no key, last_error boom, about a minute old", r)
	}
	if len(r.Payload) != 0 || len(r.Headers) != 0 {
		t.Errorf("List returned payload %q and headers %s; it leaves them out", r.Payload, r.Headers)
	}
	// Every other column is the row's.
	want := rowOf(t, tb, first[0])
	want.Payload, want.Headers = nil, nil
	r.Age = 0
	if describe(r) != describe(want) {
		t.Errorf("listed row differs from the table:\nlisted %s\ntable  %s", describe(r), describe(want))
	}
}

func testGet(t *testing.T, h Harness) {
	tb := h.New(t)
	payload := []byte{0, 1, 2, 0xff}
	ids := insert(t, tb, event{Type: "t", PartitionKey: "k", Payload: payload, Headers: `{"h": "v", "n": 1}`}, event{})
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("relay-1"), LockedAt: Ago(time.Second),
		Attempts: Ptr(2), LastError: Ptr("x"), CreatedAt: Ago(time.Minute)}, ids[0])

	r, err := tb.Storage().Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Age < time.Minute || r.Age > time.Minute+clockSlack {
		t.Errorf("Age = %s, want about a minute", r.Age)
	}
	hdr, err := outbox.ParseHeaders(r.Headers)
	if err != nil || !maps.Equal(hdr, map[string]string{"h": "v", "n": "1"}) {
		t.Errorf("headers = %s (%v, %v), want h=v n=1", r.Headers, hdr, err)
	}
	want := rowOf(t, tb, ids[0])
	r.Age = 0
	if describe(r) != describe(want) {
		t.Errorf("Get differs from the table:\nGet   %s\ntable %s", describe(r), describe(want))
	}
	if string(r.Payload) != string(payload) || str(r.PartitionKey) != "k" || str(r.LockedBy) != "relay-1" || r.LockedAt == nil {
		t.Errorf("Get = %s", describe(r))
	}

	missing := uuid.New()
	_, err = tb.Storage().Get(ctx, missing)
	if !errors.Is(err, storage.ErrEventNotFound) {
		t.Fatalf("Get of an unknown id: %v, want ErrEventNotFound", err)
	}
}

// ---- Prune -------------------------------------------------------------------

// pruneRows are rows of every status, old and recent. The PENDING and
// DELIVERING rows (live) carry old created_at, updated_at and delivered_at
// values, and the recent DELIVERED and DEAD rows old values in the columns
// prune must not look at, so only the right column and status decide what
// goes.
type pruneRows struct {
	// oldDelivered were delivered 8 days ago, the first half of them 30s
	// after they were created, the rest after they were created (a
	// producer that sets created_at); newDelivered 6 days ago, long
	// after they were created.
	oldDelivered, newDelivered []uuid.UUID
	// oldDead died 8 days ago, newDead 1 day ago.
	oldDead, newDead []uuid.UUID
	// live: PENDING, PENDING retrying, DELIVERING with an old lease,
	// DELIVERING with a fresh one.
	live []uuid.UUID
}

func newPruneRows(t *testing.T, tb Table, oldDelivered int) pruneRows {
	t.Helper()
	f := pruneRows{
		oldDelivered: insertN(t, tb, oldDelivered, "old.delivered"),
		newDelivered: insertN(t, tb, 2, "new.delivered"),
		oldDead:      insertN(t, tb, 3, "old.dead"),
		newDead:      insertN(t, tb, 1, "new.dead"),
		live:         insertN(t, tb, 4, "live"),
	}
	old := Ago(30 * day)
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(8 * day), UpdatedAt: Ago(8 * day)}, f.oldDelivered...)
	tb.Set(t, Change{CreatedAt: Ago(8*day + 30*time.Second)}, f.oldDelivered[:oldDelivered/2]...)
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(6 * day), UpdatedAt: old, CreatedAt: old}, f.newDelivered...)
	tb.Set(t, Change{Status: outbox.StatusDead, UpdatedAt: Ago(8 * day)}, f.oldDead...)
	tb.Set(t, Change{Status: outbox.StatusDead, UpdatedAt: Ago(day), CreatedAt: old, DeliveredAt: old}, f.newDead...)
	aged := Change{CreatedAt: old, UpdatedAt: old, DeliveredAt: old}
	tb.Set(t, aged, f.live...)
	tb.Set(t, Change{Attempts: Ptr(3)}, f.live[1])
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("r"), LockedAt: old}, f.live[2])
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("r"), LockedAt: Ago(0)}, f.live[3])
	return f
}

func prune(t *testing.T, tb Table, p storage.PruneParams) storage.PruneResult {
	t.Helper()
	res, err := tb.Storage().Prune(ctx, p)
	if err != nil {
		t.Fatalf("Prune(%+v): %v", p, err)
	}
	return res
}

// testPrune: a dry run counts and changes nothing; live statuses are
// refused; each status goes by its own column, in batches; and even an
// age of zero never deletes a PENDING or DELIVERING row.
func testPrune(t *testing.T, h Harness) {
	tb := h.New(t)
	f := newPruneRows(t, tb, 7)
	const week = 7 * day

	before := snapshot(t, tb)
	for _, c := range []struct {
		status outbox.Status
		want   int64
	}{{outbox.StatusDelivered, 7}, {outbox.StatusDead, 3}} {
		res := prune(t, tb, storage.PruneParams{Status: c.status, OlderThan: week, DryRun: true,
			Progress: func(int64) { t.Errorf("a dry run reported progress") }})
		if res.Deleted != c.want || res.Batches != 0 {
			t.Errorf("dry run of %s = %+v, want %d rows and no batches", c.status, res, c.want)
		}
	}
	for _, st := range []outbox.Status{outbox.StatusPending, outbox.StatusDelivering, "", "delivered"} {
		for _, dry := range []bool{true, false} {
			if _, err := tb.Storage().Prune(ctx, storage.PruneParams{Status: st, DryRun: dry}); err == nil {
				t.Errorf("Prune of status %q (dry run %v) succeeded", st, dry)
			}
		}
	}
	if _, err := tb.Storage().Prune(ctx, storage.PruneParams{Status: outbox.StatusDead, OlderThan: -time.Hour}); err == nil {
		t.Error("Prune accepted a negative age")
	}
	requireUnchanged(t, "dry runs and refused prunes", before, snapshot(t, tb))

	var progress []int64
	res := prune(t, tb, storage.PruneParams{
		Status: outbox.StatusDelivered, OlderThan: week, BatchSize: 3,
		Progress: func(n int64) { progress = append(progress, n) },
	})
	if res.Deleted != 7 || res.Batches != 3 {
		t.Errorf("Prune = %+v, want 7 rows in 3 batches of at most 3", res)
	}
	if want := []int64{3, 6, 7}; !slices.Equal(progress, want) {
		t.Errorf("progress reports %v, want %v", progress, want)
	}
	want := slices.Concat(f.newDelivered, f.oldDead, f.newDead, f.live)
	if got := rowIDs(tb.Rows(t)); !sameSet(got, want) {
		t.Fatalf("after pruning DELIVERED rows %d rows remain, want %d: every row but the old DELIVERED ones", len(got), len(want))
	}

	if res := prune(t, tb, storage.PruneParams{Status: outbox.StatusDead, OlderThan: week}); res.Deleted != 3 || res.Batches != 1 {
		t.Errorf("Prune DEAD = %+v, want 3 rows in 1 batch", res)
	}
	want = slices.Concat(f.newDelivered, f.newDead, f.live)
	if got := rowIDs(tb.Rows(t)); !sameSet(got, want) {
		t.Fatalf("after pruning DEAD rows %d rows remain, want %d: every row but the old DEAD ones", len(got), len(want))
	}

	for _, st := range []outbox.Status{outbox.StatusDelivered, outbox.StatusDead} {
		prune(t, tb, storage.PruneParams{Status: st})
	}
	if got := rowIDs(tb.Rows(t)); !sameSet(got, f.live) {
		t.Fatalf("after pruning everything finished, rows %v remain, want exactly the PENDING and DELIVERING rows %v", got, f.live)
	}
}

// ---- RetryDead ---------------------------------------------------------------

// deadRows are DEAD rows with different types, errors and times of death,
// and rows in other states that match every filter but are not DEAD.
type deadRows map[string]uuid.UUID

type deadRow struct {
	name, typ string
	key       string
	status    outbox.Status
	lastError string
	diedAgo   time.Duration
}

var deadRowSpecs = []deadRow{
	{"orders-timeout-recent", "orders", "", outbox.StatusDead, "publish: Timeout waiting for ack", time.Hour},
	{"orders-nostream-old", "orders", "k", outbox.StatusDead, "no stream for subject orders", 3 * day},
	{"users-timeout-old", "users", "", outbox.StatusDead, "TIMEOUT", 5 * day},
	{"users-toolarge-recent", "users", "", outbox.StatusDead, "message too large: 100% over", 10 * time.Minute},
	{"users-no-error", "users", "", outbox.StatusDead, "", 2 * day},
	{"orders-pending", "orders", "k", outbox.StatusPending, "timeout", 5 * time.Minute},
	{"orders-delivered", "orders", "", outbox.StatusDelivered, "timeout", 5 * time.Minute},
	{"orders-delivering", "orders", "", outbox.StatusDelivering, "timeout", 5 * time.Minute},
}

func newDeadRows(t *testing.T, tb Table) deadRows {
	t.Helper()
	f := deadRows{}
	for _, r := range deadRowSpecs {
		f[r.name] = insert(t, tb, event{Type: r.typ, PartitionKey: r.key})[0]
	}
	f.reset(t, tb)
	return f
}

// reset puts every row back into its state, its time of death counted
// from now.
func (f deadRows) reset(t *testing.T, tb Table) {
	t.Helper()
	for _, r := range deadRowSpecs {
		c := Change{Status: r.status, LastError: Ptr(r.lastError), Attempts: Ptr(25),
			UpdatedAt: Ago(r.diedAgo), AvailableAt: Ago(7 * day), LockedBy: Ptr(""), LockedAt: nil}
		switch r.status {
		case outbox.StatusDelivering:
			c.LockedBy, c.LockedAt = Ptr("r"), Ago(0)
		case outbox.StatusDelivered:
			c.DeliveredAt = Ago(0)
		}
		tb.Set(t, c, f[r.name])
	}
}

func (f deadRows) pick(names ...string) []uuid.UUID {
	ids := make([]uuid.UUID, len(names))
	for i, n := range names {
		ids[i] = f[n]
	}
	return ids
}

// testRetryDead: every filter selects exactly what it says, a dry run
// counts the same rows and changes nothing, the limit takes the oldest
// deaths, and a retried row starts afresh but keeps its last error, marked
// as from before the retry.
func testRetryDead(t *testing.T, h Harness) {
	cases := []struct {
		name   string
		params storage.RetryDeadParams
		want   []string
	}{
		{"no filter", storage.RetryDeadParams{},
			[]string{"orders-timeout-recent", "orders-nostream-old", "users-timeout-old", "users-toolarge-recent", "users-no-error"}},
		{"event type", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{EventType: "orders"}},
			[]string{"orders-timeout-recent", "orders-nostream-old"}},
		{"since", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{Since: time.Now().Add(-36 * time.Hour)}},
			[]string{"orders-timeout-recent", "users-toolarge-recent"}},
		{"error contains, any case", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{ErrorContains: "timeout"}},
			[]string{"orders-timeout-recent", "users-timeout-old"}},
		{"error contains is not a pattern", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{ErrorContains: "_"}},
			nil},
		{"error contains a percent sign", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{ErrorContains: "100%"}},
			[]string{"users-toolarge-recent"}},
		{"ids, of any status", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{IDs: nil}},
			[]string{"orders-nostream-old", "users-toolarge-recent"}},
		{"every filter at once", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{
			EventType: "users", ErrorContains: "Timeout", Since: time.Now().Add(-6 * day)}},
			[]string{"users-timeout-old"}},
		{"partition key", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{PartitionKey: "k"}},
			[]string{"orders-nostream-old"}},
		{"created before", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{CreatedBefore: time.Now().Add(time.Hour)}},
			[]string{"orders-timeout-recent", "orders-nostream-old", "users-timeout-old", "users-toolarge-recent", "users-no-error"}},
		{"created from", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{CreatedFrom: time.Now().Add(time.Hour)}},
			nil},
		{"created in a range", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{EventType: "users",
			CreatedFrom: time.Now().Add(-time.Hour), CreatedBefore: time.Now().Add(time.Hour)}},
			[]string{"users-timeout-old", "users-toolarge-recent", "users-no-error"}},
		{"limit takes the oldest deaths", storage.RetryDeadParams{Limit: 2},
			[]string{"users-timeout-old", "orders-nostream-old"}},
		{"nothing matches", storage.RetryDeadParams{DeadFilter: storage.DeadFilter{EventType: "none"}},
			nil},
	}
	tb := h.New(t)
	s := tb.Storage()
	f := newDeadRows(t, tb)
	for i, c := range cases {
		if c.name == "ids, of any status" {
			c.params.IDs = append(f.pick("orders-nostream-old", "users-toolarge-recent", "orders-pending", "orders-delivered", "orders-delivering"), uuid.New())
		}
		if i > 0 {
			f.reset(t, tb)
		}
		want := f.pick(c.want...)
		before := snapshot(t, tb)

		dry := c.params
		dry.DryRun = true
		n, err := s.RetryDead(ctx, dry)
		if err != nil {
			t.Fatalf("%s: dry run: %v", c.name, err)
		}
		if n != int64(len(want)) {
			t.Errorf("%s: dry run counts %d rows, want %d", c.name, n, len(want))
		}
		requireUnchanged(t, c.name+": a dry run", before, snapshot(t, tb))

		start := tb.Now(t)
		n, err = s.RetryDead(ctx, c.params)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		end := tb.Now(t)
		if n != int64(len(want)) {
			t.Errorf("%s: RetryDead moved %d rows, want %d", c.name, n, len(want))
		}
		after := byID(t, tb)
		for _, spec := range deadRowSpecs {
			id := f[spec.name]
			row := after[id]
			if !slices.Contains(want, id) {
				if before[id] != describe(row) {
					t.Errorf("%s: %s was not selected but changed:\nbefore %s\nafter  %s", c.name, spec.name, before[id], describe(row))
				}
				continue
			}
			if row.Status != outbox.StatusPending || row.Attempts != 0 || row.AvailableAt.Before(start) || row.AvailableAt.After(end) ||
				row.LockedBy != nil || row.LockedAt != nil {
				t.Errorf("%s: %s = %s, want PENDING, attempts 0, due now, unlocked", c.name, spec.name, describe(row))
			}
			// The error stays, marked as from before the retry with the
			// attempts it took, so a retried event that is then delivered
			// does not look failed.
			wantErr := spec.lastError
			if wantErr != "" {
				wantErr = "before retry-dead (attempts: 25): " + wantErr
			}
			if str(row.LastError) != wantErr {
				t.Errorf("%s: %s last_error = %q, want %q kept until the next attempt", c.name, spec.name, str(row.LastError), wantErr)
			}
		}
	}
	if _, err := s.RetryDead(ctx, storage.RetryDeadParams{Limit: -1}); err == nil {
		t.Error("RetryDead accepted a negative limit")
	}
}

// ---- Emit --------------------------------------------------------------------

func testEmit(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	before := tb.Now(t)
	ids, err := s.Emit(ctx, storage.EmitParams{
		Type: "demo", PartitionKey: "k", Payload: []byte(`{"a":1}`), Headers: map[string]string{"x": "y"},
		Count: 5, AvailableIn: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 5 {
		t.Fatalf("Emit returned %d ids", len(ids))
	}
	unkeyed, err := s.Emit(ctx, storage.EmitParams{Type: "bare", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	rows := tb.Rows(t)
	if got := rowIDs(rows); !slices.Equal(got, append(slices.Clone(ids), unkeyed...)) {
		t.Fatalf("rows in insertion order %v, want the returned order %v then %v", got, ids, unkeyed)
	}
	for _, r := range rows[:5] {
		hdr, err := outbox.ParseHeaders(r.Headers)
		if r.Type != "demo" || str(r.PartitionKey) != "k" || string(r.Payload) != `{"a":1}` || err != nil || hdr["x"] != "y" ||
			r.Status != outbox.StatusPending || r.ID.Version() != 7 {
			t.Errorf("emitted row = %s", describe(r))
		}
		// The delay counts from Emit's call: the row is written a moment
		// later.
		if d := r.AvailableAt.Sub(before); d < time.Hour-clockSlack || d > time.Hour+clockSlack {
			t.Errorf("row %s is due %s after Emit was called, want 1h", r.ID, d)
		}
		if !r.CreatedAt.Equal(rows[0].CreatedAt) {
			t.Errorf("created_at values differ (%s, %s): not one statement", r.CreatedAt, rows[0].CreatedAt)
		}
	}
	if r := rows[5]; r.PartitionKey != nil || len(r.Payload) != 0 || r.AvailableAt.After(tb.Now(t)) {
		t.Errorf("emitted row without key, payload or delay = %s, want no key, empty payload, due now", describe(r))
	}

	for _, p := range []storage.EmitParams{
		{Count: 1},
		{Type: "t"},
		{Type: "t", Count: -1},
		{Type: "t", Count: storage.EmitCountMax + 1},
		{Type: "t", Count: 1, AvailableIn: -time.Second},
	} {
		if _, err := s.Emit(ctx, p); err == nil {
			t.Errorf("Emit(%+v) succeeded", p)
		}
	}
	if n := len(tb.Rows(t)); n != 6 {
		t.Errorf("refused emits wrote %d rows", n-6)
	}
}

// testListFiltersAndPages checks every ListParams filter, both orders, and
// that pages read after cursors add up to the whole listing.
// testListsAKeyInWriteOrder: a key's events are listed in the order they
// were written, the order the relay delivers them in, also page by page in
// both directions. b was written after a, by a transaction that began
// first (an earlier created_at); a listing of every key keeps to the time
// events were created.
func testListsAKeyInWriteOrder(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	a := insert(t, tb, event{Type: "t", PartitionKey: "k"})[0]
	b := insert(t, tb, event{Type: "t", PartitionKey: "k"})[0]
	c := insert(t, tb, event{Type: "t", PartitionKey: "k"})[0]
	other := insert(t, tb, event{Type: "t", PartitionKey: "other"})[0]
	tb.Set(t, Change{CreatedAt: Ago(time.Minute)}, b)

	list := func(p storage.ListParams) []uuid.UUID { t.Helper(); return listIDs(t, s, p) }
	pages := func(p storage.ListParams) []uuid.UUID {
		t.Helper()
		var got []uuid.UUID
		p.Limit = 1
		for range 10 {
			rows, err := s.List(ctx, p)
			if err != nil {
				t.Fatalf("List(%+v): %v", p, err)
			}
			if len(rows) == 0 {
				return got
			}
			got = append(got, rows[0].ID)
			cursor := storage.CursorOf(rows[0])
			p.After = &cursor
		}
		t.Fatalf("List(%+v) did not end", p)
		return nil
	}
	written := []uuid.UUID{a, b, c}
	if got := list(storage.ListParams{PartitionKey: "k", OldestFirst: true}); !slices.Equal(got, written) {
		t.Errorf("key k oldest first = %v, want write order %v", got, written)
	}
	if got := pages(storage.ListParams{PartitionKey: "k", OldestFirst: true}); !slices.Equal(got, written) {
		t.Errorf("key k oldest first, page by page = %v, want %v", got, written)
	}
	newest := []uuid.UUID{c, b, a}
	if got := list(storage.ListParams{PartitionKey: "k"}); !slices.Equal(got, newest) {
		t.Errorf("key k newest first = %v, want %v", got, newest)
	}
	if got := pages(storage.ListParams{PartitionKey: "k"}); !slices.Equal(got, newest) {
		t.Errorf("key k newest first, page by page = %v, want %v", got, newest)
	}
	if got, want := list(storage.ListParams{OldestFirst: true}), []uuid.UUID{b, a, c, other}; !slices.Equal(got, want) {
		t.Errorf("every key oldest first = %v, want by created_at %v", got, want)
	}
}

func testListFiltersAndPages(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	old := insert(t, tb, event{Type: "a", PartitionKey: "k1"}, event{Type: "a", PartitionKey: "k2"},
		event{Type: "b", PartitionKey: "k1"}, event{Type: "b"}, event{Type: "a", PartitionKey: "k1"})
	tb.Set(t, Change{CreatedAt: Ago(2 * time.Hour)}, old...)
	recent := insert(t, tb, event{Type: "a", PartitionKey: "k1"}, event{Type: "c", PartitionKey: "k3"}, event{Type: "a"})
	tb.Set(t, Change{Status: outbox.StatusDead, LastError: Ptr("broker said NO to this")}, old[2])
	tb.Set(t, Change{Status: outbox.StatusDead, LastError: Ptr("timeout")}, recent[1])
	newest := append(slices.Clone(recent), old...)
	slices.Reverse(newest[:len(recent)])
	slices.Reverse(newest[len(recent):])

	list := func(p storage.ListParams) []uuid.UUID { t.Helper(); return listIDs(t, s, p) }
	if got := list(storage.ListParams{Limit: 100}); !slices.Equal(got, newest) {
		t.Errorf("List = %v, want %v", got, newest)
	}
	oldest := slices.Clone(newest)
	slices.Reverse(oldest)
	if got := list(storage.ListParams{Limit: 100, OldestFirst: true}); !slices.Equal(got, oldest) {
		t.Errorf("List oldest first = %v, want %v", got, oldest)
	}
	for _, oldestFirst := range []bool{false, true} {
		var got []uuid.UUID
		p := storage.ListParams{Limit: 3, OldestFirst: oldestFirst}
		for range 10 {
			rows, err := s.List(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, rowIDs(rows)...)
			if len(rows) < p.Limit {
				break
			}
			c := storage.CursorOf(rows[len(rows)-1])
			back, err := storage.ParseListCursor(c.String())
			if err != nil || !back.CreatedAt.Equal(c.CreatedAt) || back.Seq != c.Seq || back.ID != c.ID {
				t.Fatalf("ParseListCursor(%q) = %+v, %v; want %+v", c.String(), back, err, c)
			}
			p.After = &back
		}
		want := newest
		if oldestFirst {
			want = oldest
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of 3 (oldest first %v) = %v, want %v", oldestFirst, got, want)
		}
	}

	at := tb.Now(t)
	cases := []struct {
		name string
		p    storage.ListParams
		want []uuid.UUID
	}{
		{"key k1", storage.ListParams{PartitionKey: "k1"}, []uuid.UUID{recent[0], old[4], old[2], old[0]}},
		{"key k1 type b", storage.ListParams{PartitionKey: "k1", EventType: "b"}, []uuid.UUID{old[2]}},
		{"id", storage.ListParams{EventID: old[3]}, []uuid.UUID{old[3]}},
		{"unknown id", storage.ListParams{EventID: uuid.New()}, nil},
		{"created before", storage.ListParams{CreatedBefore: at.Add(-time.Hour)}, newest[len(recent):]},
		{"created from", storage.ListParams{CreatedFrom: at.Add(-time.Hour)}, newest[:len(recent)]},
		{"created from and before", storage.ListParams{CreatedFrom: at.Add(-3 * time.Hour), CreatedBefore: at.Add(-time.Hour), EventType: "b"},
			[]uuid.UUID{old[3], old[2]}},
		{"error text in any case", storage.ListParams{ErrorContains: "said no"}, []uuid.UUID{old[2]}},
		{"DEAD", storage.ListParams{Status: outbox.StatusDead}, []uuid.UUID{recent[1], old[2]}},
		{"DEAD oldest first", storage.ListParams{Status: outbox.StatusDead, OldestFirst: true}, []uuid.UUID{old[2], recent[1]}},
		{"DEAD after a cursor", storage.ListParams{Status: outbox.StatusDead, After: cursorOf(t, tb, recent[1])}, []uuid.UUID{old[2]}},
	}
	for _, c := range cases {
		if got := list(c.p); !slices.Equal(got, c.want) {
			t.Errorf("%s: List = %v, want %v", c.name, got, c.want)
		}
	}
}

func cursorOf(t *testing.T, tb Table, id uuid.UUID) *storage.ListCursor {
	t.Helper()
	c := storage.CursorOf(rowOf(t, tb, id))
	return &c
}

// testDeliveryRate checks that deliveries land in the minute of their
// delivered_at and that older ones and other statuses do not count.
func testDeliveryRate(t *testing.T, h Harness) {
	tb := h.New(t)
	ids := insertN(t, tb, 8, "t")
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(20 * time.Second)}, ids[0], ids[1])
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(5*time.Minute + 30*time.Second)}, ids[2])
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(2 * time.Hour)}, ids[3])
	tb.Set(t, Change{Status: outbox.StatusDead, DeliveredAt: Ago(20 * time.Second)}, ids[4])
	// Delivered long after it was created, and one delivered 45s after it
	// was created an hour ago: each counts in the minute it was delivered.
	tb.Set(t, Change{Status: outbox.StatusDelivered, CreatedAt: Ago(5 * time.Hour), DeliveredAt: Ago(5*time.Minute + 10*time.Second)}, ids[6])
	tb.Set(t, Change{Status: outbox.StatusDelivered, CreatedAt: Ago(60*time.Minute + 30*time.Second), DeliveredAt: Ago(59*time.Minute + 45*time.Second)}, ids[7])

	r, err := tb.Storage().DeliveryRate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.PerMinute) != storage.DeliveryRateMinutes {
		t.Fatalf("%d minutes, want %d", len(r.PerMinute), storage.DeliveryRateMinutes)
	}
	want := make([]int64, storage.DeliveryRateMinutes)
	want[storage.DeliveryRateMinutes-1] = 2
	want[storage.DeliveryRateMinutes-6] = 2
	want[0] = 1
	if !slices.Equal(r.PerMinute, want) {
		t.Errorf("PerMinute = %v, want %v", r.PerMinute, want)
	}
	if now := tb.Now(t); r.Until.Before(now.Add(-clockSlack)) || r.Until.After(now.Add(clockSlack)) {
		t.Errorf("Until = %s, want about %s", r.Until, now)
	}

	empty := h.New(t)
	r, err = empty.Storage().DeliveryRate(ctx)
	if err != nil || len(r.PerMinute) != storage.DeliveryRateMinutes || r.Until.IsZero() {
		t.Errorf("DeliveryRate of an empty table = %+v, %v; want 60 zeros and a time", r, err)
	}
}

// testStatsEstimatingDelivered checks that an estimate of the DELIVERED
// rows changes no other number, and that without one (or with statistics
// missing) the count is exact.
func testStatsEstimatingDelivered(t *testing.T, h Harness) {
	tb := h.New(t)
	ids := insertN(t, tb, 6, "t")
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(time.Second)}, ids[:3]...)
	tb.Set(t, Change{Status: outbox.StatusDead}, ids[3])
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("r"), LockedAt: Ago(0)}, ids[4])

	exact, err := tb.Storage().Stats(ctx, storage.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if exact.Delivered != 3 || exact.DeliveredEstimated {
		t.Fatalf("exact Stats: Delivered %d (estimated %v), want 3 counted", exact.Delivered, exact.DeliveredEstimated)
	}
	est, err := tb.Storage().Stats(ctx, storage.StatsParams{EstimateDelivered: true})
	if err != nil {
		t.Fatal(err)
	}
	if est.Pending() != 1 || est.Dead != 1 || est.Delivering != 1 || est.DeliveredLastMinute != 3 {
		t.Errorf("estimating Stats: pending %d, dead %d, delivering %d, delivered last minute %d; want 1, 1, 1, 3 counted",
			est.Pending(), est.Dead, est.Delivering, est.DeliveredLastMinute)
	}
	if est.Delivered < 0 || (!est.DeliveredEstimated && est.Delivered != 3) {
		t.Errorf("estimating Stats: Delivered %d (estimated %v), want an estimate or 3", est.Delivered, est.DeliveredEstimated)
	}
}

// listIDs lists with p and returns the rows' ids in the order listed.
func listIDs(t *testing.T, s storage.Storage, p storage.ListParams) []uuid.UUID {
	t.Helper()
	rows, err := s.List(ctx, p)
	if err != nil {
		t.Fatalf("List(%+v): %v", p, err)
	}
	return rowIDs(rows)
}
