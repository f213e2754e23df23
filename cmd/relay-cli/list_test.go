package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// listRows: two transactions a minute apart. The older one holds a DEAD
// "a" event with a long error and a PENDING "b"; the newer one two PENDING
// "a" events, the first with a partition key.
func listRows(t *testing.T, tb *pgtest.Table) (older, newer []uuid.UUID, longError string) {
	t.Helper()
	older = tb.Insert(t, pgtest.Event{Type: "a"}, pgtest.Event{Type: "b"})
	newer = tb.Insert(t, pgtest.Event{Type: "a", PartitionKey: "customer-7"}, pgtest.Event{Type: "a"})
	tb.Exec(t, "UPDATE {{table}} SET created_at = created_at - interval '1 minute' WHERE event_id = ANY($1)", older)
	longError = "nats: no response from stream: " + strings.Repeat("x", 100) + " THE END"
	tb.Set(t, older[0], "status = 'DEAD', attempts = 25, last_error = '"+longError+"'")
	return older, newer, longError
}

func TestListNewestFirstWithFilters(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	older, newer, _ := listRows(t, tb)
	listed := func(args ...string) []uuid.UUID {
		t.Helper()
		rows := decode[[]listJSON](t, ok(t, relayCLI(t, tb, append([]string{"list", "--json"}, args...)...)))
		out := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			out[i] = r.EventID
		}
		return out
	}
	cases := []struct {
		args []string
		want []uuid.UUID
	}{
		{nil, []uuid.UUID{newer[1], newer[0], older[1], older[0]}},
		{[]string{"--limit", "2"}, []uuid.UUID{newer[1], newer[0]}},
		{[]string{"--status", "dead"}, []uuid.UUID{older[0]}},
		{[]string{"--status", "PENDING"}, []uuid.UUID{newer[1], newer[0], older[1]}},
		{[]string{"--event-type", "a"}, []uuid.UUID{newer[1], newer[0], older[0]}},
		{[]string{"--event-type", "a", "--status", "pending", "--limit", "1"}, []uuid.UUID{newer[1]}},
		{[]string{"--status", "delivered"}, []uuid.UUID{}},
		{[]string{"--oldest"}, []uuid.UUID{older[0], older[1], newer[0], newer[1]}},
		{[]string{"--oldest", "--limit", "1", "--event-type", "a"}, []uuid.UUID{older[0]}},
		{[]string{"--error-contains", "the end"}, []uuid.UUID{older[0]}},
		{[]string{"--key", "customer-7"}, []uuid.UUID{newer[0]}},
		{[]string{"--key", "no-such-key"}, []uuid.UUID{}},
	}
	for _, c := range cases {
		if got := listed(c.args...); !slices.Equal(got, c.want) {
			t.Errorf("list %v = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestListShortensErrorsInTheTableOnly(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	older, newer, longError := listRows(t, tb)

	r := ok(t, relayCLI(t, tb, "list"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "EVENT ID") {
		t.Fatalf("list printed %d lines, want a header and 4 rows:\n%s", len(lines), r.stdout)
	}
	for i, id := range []uuid.UUID{newer[1], newer[0], older[1], older[0]} {
		if !strings.HasPrefix(lines[i+1], id.String()) {
			t.Errorf("line %d is not event %s:\n%s", i+1, id, r.stdout)
		}
	}
	if !strings.Contains(lines[2], "customer-7") || !strings.Contains(lines[1], " - ") {
		t.Errorf("keys not shown (- for none):\n%s", r.stdout)
	}
	dead := lines[4]
	for _, want := range []string{"DEAD", "25", "1m0", "nats: no response from stream", "…"} {
		if !strings.Contains(dead, want) {
			t.Errorf("DEAD row does not show %q:\n%s", want, dead)
		}
	}
	if strings.Contains(dead, "THE END") {
		t.Errorf("the table shows the whole error:\n%s", dead)
	}

	rows := decode[[]listJSON](t, ok(t, relayCLI(t, tb, "list", "--json", "--status", "dead")))
	if len(rows) != 1 || rows[0].LastError == nil || *rows[0].LastError != longError || rows[0].Attempts != 25 ||
		rows[0].EventType != "a" || rows[0].PartitionKey != nil || rows[0].AgeSeconds < 60 {
		t.Errorf("list --json = %+v, want the whole error", rows)
	}
}

func TestListOfNothing(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	r := ok(t, relayCLI(t, tb, "list"))
	if r.stdout != "" || !strings.Contains(r.stderr, "no events match") {
		t.Errorf("list of an empty table:\n%s", r)
	}
	r = ok(t, relayCLI(t, tb, "list", "--json"))
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list --json of an empty table = %q, want []", r.stdout)
	}
}
