package main

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// statsFixture: PENDING 2 new (one 10 minutes old) + 1 retrying, all
// type.a; DELIVERING 2 by relay-x (one leased 90 s ago) and 1 by relay-y;
// DELIVERED 3 (10 s, 30 min and 2 h ago); DEAD 1.
func statsFixture(t *testing.T, tb *pgtest.Table) {
	t.Helper()
	a := tb.InsertN(t, 3, "type.a")
	b := tb.InsertN(t, 3, "type.b")
	done := tb.InsertN(t, 4, "done")
	tb.Set(t, a[0], "created_at = now() - interval '10 minutes'")
	tb.Set(t, a[1], "attempts = 2")
	tb.Set(t, b[0], "status = 'DELIVERING', locked_by = 'relay-x', locked_at = now() - interval '90 seconds'")
	tb.Set(t, b[1], "status = 'DELIVERING', locked_by = 'relay-x', locked_at = now()")
	tb.Set(t, b[2], "status = 'DELIVERING', locked_by = 'relay-y', locked_at = now()")
	tb.Set(t, done[0], "status = 'DELIVERED', delivered_at = now() - interval '10 seconds'")
	tb.Set(t, done[1], "status = 'DELIVERED', delivered_at = now() - interval '30 minutes'")
	tb.Set(t, done[2], "status = 'DELIVERED', delivered_at = now() - interval '2 hours'")
	tb.Set(t, done[3], "status = 'DEAD', last_error = 'gone'")
}

func TestStatsJSON(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	statsFixture(t, tb)
	setAt := time.Now()
	// Ages are those the fixture set plus the time taken since, which a
	// loaded machine stretches.
	aged := func(got, want float64) bool { return got >= want-1 && got <= want+1+time.Since(setAt).Seconds() }
	before := tb.Snapshot(t)
	r := ok(t, relayCLI(t, tb, "stats", "--json"))
	pgtest.RequireUnchanged(t, "stats", before, tb.Snapshot(t))

	// Decode into a map as well, to pin the key names consumers rely on.
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"table", "observed_at", "counts", "pending_new", "pending_retrying",
		"oldest_pending_age_seconds", "oldest_pending_created_at", "delivered_last_minute",
		"delivered_last_hour", "top_event_types", "leases"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("stats --json lacks %q:\n%s", key, r.stdout)
		}
	}

	st := decode[statsJSON](t, r)
	want := statusCounts{Pending: 3, Delivering: 3, Delivered: 3, Dead: 1}
	if st.Counts != want || st.PendingNew != 2 || st.PendingRetrying != 1 {
		t.Errorf("counts %+v new %d retrying %d; want %+v, 2 new, 1 retrying", st.Counts, st.PendingNew, st.PendingRetrying, want)
	}
	if st.DeliveredLastMinute != 1 || st.DeliveredLastHour != 2 {
		t.Errorf("delivered last minute %d, last hour %d; want 1 and 2", st.DeliveredLastMinute, st.DeliveredLastHour)
	}
	if st.OldestPendingAgeSec == nil || !aged(*st.OldestPendingAgeSec, 600) {
		t.Errorf("oldest_pending_age_seconds = %v, want about 600", st.OldestPendingAgeSec)
	}
	if len(st.TopEventTypes) != 1 || st.TopEventTypes[0].EventType != "type.a" || st.TopEventTypes[0].Pending != 3 {
		t.Errorf("top_event_types = %+v, want type.a with 3", st.TopEventTypes)
	}
	if len(st.Leases) != 2 || st.Leases[0].LockedBy != "relay-x" || st.Leases[0].Events != 2 ||
		st.Leases[1].LockedBy != "relay-y" || st.Leases[1].Events != 1 {
		t.Errorf("leases = %+v, want relay-x 2, relay-y 1", st.Leases)
	}
	if age := st.Leases[0].OldestLeaseAgeSec; !aged(age, 90) {
		t.Errorf("relay-x's oldest lease is %v s old, want about 90", age)
	}
}

func TestStatsText(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	statsFixture(t, tb)
	r := ok(t, relayCLI(t, tb, "stats"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^PENDING +3 +new 2, retrying 1, oldest pending 10m[0-5]\ds$`),
		regexp.MustCompile(`(?m)^DELIVERING +3 +2 relay\(s\) holding leases$`),
		regexp.MustCompile(`(?m)^DELIVERED +3 +last minute 1, last hour 2$`),
		regexp.MustCompile(`(?m)^DEAD +1\b`),
		regexp.MustCompile(`(?m)^type\.a +3 +10m[0-5]\ds$`),
		regexp.MustCompile(`(?m)^relay-x +2 +1m[3-5]\ds$`),
		regexp.MustCompile(`(?m)^relay-y +1 +(\d|[1-5]\d)s$`),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("stats output does not match %s:\n%s", want, r.stdout)
		}
	}
}

// The oldest pending age means one thing everywhere: the age of the oldest
// PENDING event that is due. An event scheduled for later is pending but not
// late, in the headline and per event type alike.
func TestStatsOldestPendingCountsOnlyDueEvents(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	a := tb.InsertN(t, 2, "type.a")
	b := tb.InsertN(t, 1, "type.b")
	tb.Set(t, a[0], "created_at = now() - interval '5 minutes'")
	tb.Set(t, a[1], "created_at = now() - interval '20 minutes', available_at = now() + interval '1 hour'")
	tb.Set(t, b[0], "created_at = now() - interval '30 minutes', available_at = now() + interval '1 hour'")

	st := decode[statsJSON](t, ok(t, relayCLI(t, tb, "stats", "--json")))
	about5m := func(age *float64) bool { return age != nil && *age >= 300 && *age < 310 }
	if !about5m(st.OldestPendingAgeSec) {
		t.Errorf("oldest_pending_age_seconds = %v, want about 300 (the due type.a event)", deref(st.OldestPendingAgeSec))
	}
	types := map[string]typeJSON{}
	for _, ty := range st.TopEventTypes {
		types[ty.EventType] = ty
	}
	if ty := types["type.a"]; ty.Pending != 2 || !about5m(ty.OldestPendingAgeSec) {
		t.Errorf("type.a: %d pending, oldest %v; want 2 pending (the scheduled one too), oldest about 300 (not its scheduled 1200)",
			ty.Pending, deref(ty.OldestPendingAgeSec))
	}
	if ty := types["type.b"]; ty.Pending != 1 || ty.OldestPendingAgeSec != nil {
		t.Errorf("type.b: %d pending, oldest %v; want 1 pending and null: nothing of it is due", ty.Pending, deref(ty.OldestPendingAgeSec))
	}

	r := ok(t, relayCLI(t, tb, "stats"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^PENDING +3 +new 3, retrying 0, oldest pending 5m0\ds$`),
		regexp.MustCompile(`(?m)^EVENT TYPE +PENDING +OLDEST PENDING$`),
		regexp.MustCompile(`(?m)^type\.a +2 +5m0\ds$`),
		regexp.MustCompile(`(?m)^type\.b +1 +none due$`),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("stats output does not match %s:\n%s", want, r.stdout)
		}
	}

	// With nothing due at all, the headline says so too.
	tb.Set(t, a[0], "available_at = now() + interval '1 hour'")
	r = ok(t, relayCLI(t, tb, "stats"))
	if want := regexp.MustCompile(`(?m)^PENDING +3 +new 3, retrying 0, oldest pending none due$`); !want.MatchString(r.stdout) {
		t.Errorf("stats output does not match %s:\n%s", want, r.stdout)
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func TestStatsOfAnEmptyTable(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	st := decode[statsJSON](t, ok(t, relayCLI(t, tb, "stats", "--json")))
	if st.Counts != (statusCounts{}) || st.OldestPendingAgeSec != nil || st.OldestPendingCreatedAt != nil ||
		st.TopEventTypes == nil || st.Leases == nil {
		t.Errorf("stats of an empty table = %+v, want zeros, null ages and empty lists", st)
	}
	r := ok(t, relayCLI(t, tb, "stats"))
	if !strings.Contains(r.stdout, "(nothing pending)") || !strings.Contains(r.stdout, "(no relay holds a lease)") {
		t.Errorf("stats of an empty table:\n%s", r.stdout)
	}
}

// --watch redraws with fresh numbers until interrupted, and an interrupt is
// how it ends: exit code 0.
func TestStatsWatchRedrawsUntilInterrupted(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	x, cancel := cmd{args: onTable(tb, "stats", "--watch", "100ms", "--json")}.start(t)
	defer cancel()
	stdout, err := x.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	x.Stderr = &stderr
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	snapshots := make(chan statsJSON)
	go func() {
		defer close(snapshots)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			var st statsJSON
			if err := json.Unmarshal(lines.Bytes(), &st); err != nil {
				t.Errorf("--watch --json wrote a line that is not one JSON object: %q", lines.Text())
				return
			}
			snapshots <- st
		}
	}()
	next := func() statsJSON {
		t.Helper()
		select {
		case st, open := <-snapshots:
			if !open {
				t.Fatalf("stats --watch stopped on its own; stderr:\n%s", stderr.String())
			}
			return st
		case <-time.After(30 * time.Second):
			t.Fatal("stats --watch did not redraw within 30s")
		}
		return statsJSON{}
	}

	if st := next(); st.Counts.Pending != 0 {
		t.Fatalf("first snapshot counts %d pending, want 0", st.Counts.Pending)
	}
	tb.InsertN(t, 2, "watched")
	for st := next(); st.Counts.Pending != 2; st = next() {
		if st.Counts.Pending != 0 {
			t.Fatalf("snapshot counts %d pending, want 0 or 2", st.Counts.Pending)
		}
	}

	if err := x.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for range snapshots {
		// Drain what was drawn before the signal arrived.
	}
	if code := exitCode(t, x.Wait()); code != 0 {
		t.Fatalf("stats --watch exited %d after an interrupt, want 0; stderr:\n%s", code, stderr.String())
	}
}

type retentionStatsJSON struct {
	DeleteMode         bool     `json:"delete_mode"`
	DeliveredRetention *float64 `json:"delivered_retention_seconds"`
	DeadRetention      *float64 `json:"dead_retention_seconds"`
}

// relay-cli stats reads DELIVERED_RETENTION and DEAD_RETENTION from its
// environment, as the relay does: with 0 it says the table runs in delete
// mode, so that no DELIVERED rows is not alarming.
func TestStatsSaysDeleteMode(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 2, "x")
	r := ok(t, cmd{args: onTable(tb, "stats"), env: []string{"DELIVERED_RETENTION=0", "DEAD_RETENTION=30d"}}.run(t))
	if !strings.Contains(r.stdout, "delete mode (DELIVERED_RETENTION=0)") || !strings.Contains(r.stdout, "removed after 30d00h (DEAD_RETENTION)") {
		t.Errorf("stats in delete mode:\n%s", r)
	}
	js := decode[retentionStatsJSON](t, ok(t, cmd{args: onTable(tb, "stats", "--json"), env: []string{"DELIVERED_RETENTION=0"}}.run(t)))
	if !js.DeleteMode || js.DeliveredRetention == nil || *js.DeliveredRetention != 0 || js.DeadRetention != nil {
		t.Errorf("stats --json in delete mode: %+v", js)
	}

	// Unset: no word of it; a duration: how long rows stay.
	r = ok(t, cmd{args: onTable(tb, "stats")}.run(t))
	if strings.Contains(r.stdout, "delete mode") || strings.Contains(r.stdout, "RETENTION") {
		t.Errorf("stats without retention:\n%s", r)
	}
	r = ok(t, cmd{args: onTable(tb, "stats", "--delivered-retention", "7d")}.run(t))
	if strings.Contains(r.stdout, "delete mode") || !strings.Contains(r.stdout, "removed after 7d00h (DELIVERED_RETENTION)") {
		t.Errorf("stats --delivered-retention 7d:\n%s", r)
	}
	if r := (cmd{args: onTable(tb, "stats"), env: []string{"DELIVERED_RETENTION=-1d"}}).run(t); r.code != 2 || !strings.Contains(r.stderr, "DELIVERED_RETENTION") {
		t.Errorf("a bad DELIVERED_RETENTION: %s", r)
	}
}

// stats shows the storage's claim bound, as the relay's /readyz does: on
// MySQL a late commit's event waits up to the relays' SWEEP_INTERVAL (read
// from the environment, or --sweep-interval) plus a claim; PostgreSQL's
// claims are exact.
func TestStatsShowsTheClaimBound(t *testing.T) {
	t.Parallel()
	my := mysqltest.New(t)
	onMySQL := func(args ...string) []string {
		return append(args, "--storage-url", mysqltest.DatabaseURL(my.Database), "--table", my.Name)
	}
	r := ok(t, cmd{args: onMySQL("stats", "--json"), env: []string{"SWEEP_INTERVAL=3s"}}.run(t))
	st := decode[statsJSON](t, r)
	if b := st.ClaimBound; b == nil || b.Exact || b.LateCommitWaitSeconds == nil || *b.LateCommitWaitSeconds != 3 ||
		!strings.Contains(b.Why, "sweep") || !strings.Contains(b.Fix, "CAPTURE=binlog") {
		t.Errorf("stats --json on MySQL with SWEEP_INTERVAL=3s: claim_bound %+v\n%s", b, r.stdout)
	}
	r = ok(t, cmd{args: onMySQL("stats")}.run(t))
	if want := "claims: not exact: an event of a transaction that commits late waits up to 10s (SWEEP_INTERVAL) plus one claim"; !strings.Contains(r.stdout, want) ||
		!strings.Contains(r.stdout, "CAPTURE=binlog") {
		t.Errorf("stats on MySQL does not say %q and the fix:\n%s", want, r.stdout)
	}
	r = ok(t, cmd{args: onMySQL("stats", "--sweep-interval", "2m")}.run(t))
	if !strings.Contains(r.stdout, "waits up to 2m0s (SWEEP_INTERVAL)") {
		t.Errorf("stats --sweep-interval 2m on MySQL:\n%s", r.stdout)
	}
	if r := (cmd{args: onMySQL("stats", "--sweep-interval", "0s")}.run(t)); r.code != 2 || !strings.Contains(r.stderr, "--sweep-interval") {
		t.Errorf("stats --sweep-interval 0s: want exit 2 naming the flag:\n%s", r)
	}

	tb := pgtest.New(t)
	st = decode[statsJSON](t, ok(t, relayCLI(t, tb, "stats", "--json")))
	if b := st.ClaimBound; b == nil || !b.Exact || b.LateCommitWaitSeconds != nil || b.Why != "" || b.Fix != "" {
		t.Errorf("stats --json on PostgreSQL: claim_bound %+v, want exact alone", b)
	}
	if r := ok(t, relayCLI(t, tb, "stats")); !strings.Contains(r.stdout, "claims: exact") {
		t.Errorf("stats on PostgreSQL does not say the claims are exact:\n%s", r.stdout)
	}
}
