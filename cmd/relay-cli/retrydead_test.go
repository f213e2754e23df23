package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
)

func TestRetryDeadFiltersSelectExactlyWhatTheySay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args func(f pgtest.DeadRows) []string
		want []string
	}{
		{"ids, of which one is not DEAD", func(f pgtest.DeadRows) []string {
			return []string{"--id", f.IDs["users-timeout-old"].String(), "--id", f.IDs["orders-pending"].String(),
				"--id", f.IDs["orders-nostream-old"].String(), "--id", uuid.NewString()}
		}, []string{"users-timeout-old", "orders-nostream-old"}},
		{"event type", func(pgtest.DeadRows) []string { return []string{"--event-type", "orders"} },
			[]string{"orders-timeout-recent", "orders-nostream-old"}},
		{"since a duration", func(pgtest.DeadRows) []string { return []string{"--since", "36h"} },
			[]string{"orders-timeout-recent", "users-toolarge-recent"}},
		{"since an RFC3339 time", func(pgtest.DeadRows) []string {
			return []string{"--since", time.Now().Add(-4 * 24 * time.Hour).Format(time.RFC3339)}
		}, []string{"orders-timeout-recent", "users-toolarge-recent", "orders-nostream-old", "users-no-error"}},
		{"error contains, any case", func(pgtest.DeadRows) []string { return []string{"--error-contains", "timeout"} },
			[]string{"orders-timeout-recent", "users-timeout-old"}},
		{"every filter at once", func(pgtest.DeadRows) []string {
			return []string{"--event-type", "users", "--error-contains", "TimeOut", "--since", "6d"}
		}, []string{"users-timeout-old"}},
		{"limit, oldest deaths first", func(pgtest.DeadRows) []string { return []string{"--event-type", "users", "--limit", "2"} },
			[]string{"users-timeout-old", "users-no-error"}},
		{"no filter with --yes", func(pgtest.DeadRows) []string { return []string{"--yes"} }, pgtest.AllDead},
		{"alias replay-dead", func(pgtest.DeadRows) []string { return []string{"--error-contains", "large"} },
			[]string{"users-toolarge-recent"}},
		{"a key no event has", func(pgtest.DeadRows) []string { return []string{"--key", "customer-0"} }, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			f := pgtest.NewDeadRows(t, tb)
			command := "retry-dead"
			if strings.HasPrefix(c.name, "alias") {
				command = "replay-dead"
			}
			args := append([]string{command}, c.args(f)...)
			before := tb.Snapshot(t)

			dry := ok(t, relayCLI(t, tb, append(args, "--dry-run")...))
			want := fmt.Sprintf("would move %d DEAD events back to PENDING", len(c.want))
			if len(c.want) == 1 {
				want = "would move 1 DEAD event back to PENDING"
			}
			if !strings.Contains(dry.stdout, want) {
				t.Errorf("dry run does not say %q:\n%s", want, dry)
			}
			pgtest.RequireUnchanged(t, "retry-dead --dry-run", before, tb.Snapshot(t))

			js := decode[struct {
				DryRun bool  `json:"dry_run"`
				Events int64 `json:"events"`
			}](t, ok(t, relayCLI(t, tb, append(args, "--json")...)))
			if js.DryRun || js.Events != int64(len(c.want)) {
				t.Errorf("retry-dead --json = %+v, want %d events moved", js, len(c.want))
			}
			after := tb.Snapshot(t)
			for _, name := range pgtest.DeadRowNames {
				id := f.IDs[name]
				if !slices.Contains(c.want, name) {
					if before[id] != after[id] {
						t.Errorf("%s was not selected but changed:\nbefore %s\nafter  %s", name, before[id], after[id])
					}
					continue
				}
				row := tb.Get(t, id)
				if row.Status != outbox.StatusPending || row.Attempts != 0 || time.Since(row.AvailableAt).Abs() > 5*time.Second {
					t.Errorf("%s = %+v, want PENDING, attempts 0, due now", name, row)
				}
				if wasErr := strings.Contains(before[id], `"last_error":null`); !wasErr && row.LastError == "" {
					t.Errorf("%s lost its last_error", name)
				}
			}
		})
	}
}

// Without a filter, retry-dead would move every DEAD row; off a terminal
// (cron, a pipe) it refuses unless --yes is given. A dry run needs no
// confirmation.
func TestRetryDeadWithoutFilterRefusesOffATerminal(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	pgtest.NewDeadRows(t, tb)
	before := tb.Snapshot(t)
	for _, args := range [][]string{{"retry-dead"}, {"replay-dead", "--limit", "1"}} {
		r := relayCLI(t, tb, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "--yes") {
			t.Errorf("%v off a terminal, want exit 2 naming --yes:\n%s", args, r)
		}
		// Every filter is offered, --key included.
		if !strings.Contains(r.stderr, "narrow it with --id, --event-type, --since, --error-contains or --key") {
			t.Errorf("%v off a terminal does not list every filter:\n%s", args, r)
		}
	}
	// From a pipe whose writer says yes: still not a terminal.
	r := cmd{args: onTable(tb, "retry-dead"), stdin: strings.NewReader("y\n")}.run(t)
	if r.code != 2 {
		t.Errorf("retry-dead with y on a pipe, want exit 2:\n%s", r)
	}
	r = ok(t, relayCLI(t, tb, "retry-dead", "--dry-run"))
	if !strings.Contains(r.stdout, "would move 5 DEAD events") {
		t.Errorf("retry-dead --dry-run without a filter:\n%s", r)
	}
	pgtest.RequireUnchanged(t, "a refused retry-dead", before, tb.Snapshot(t))
}

// On a terminal, retry-dead without a filter says how many events it would
// move and goes ahead only on y.
func TestRetryDeadWithoutFilterAsksOnATerminal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		answer string
		moved  bool
	}{{"n\n", false}, {"\n", false}, {"yes please\n", false}, {"y\n", true}, {"YES\n", true}} {
		t.Run(strings.TrimSpace(c.answer), func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			pgtest.NewDeadRows(t, tb)
			before := tb.Snapshot(t)
			terminal := openPTY(t)
			if _, err := terminal.master.WriteString(c.answer); err != nil {
				t.Fatal(err)
			}
			r := cmd{args: onTable(tb, "retry-dead"), stdin: terminal.slave}.run(t)
			if !strings.Contains(r.stderr, "move 5 DEAD events") || !strings.Contains(r.stderr, "[y/N]") {
				t.Errorf("no confirmation prompt on stderr:\n%s", r)
			}
			if !c.moved {
				if r.code != 1 || !strings.Contains(r.stderr, "nothing changed") {
					t.Errorf("answer %q, want exit 1 and nothing changed:\n%s", c.answer, r)
				}
				pgtest.RequireUnchanged(t, "a declined retry-dead", before, tb.Snapshot(t))
				return
			}
			if r.code != 0 || !strings.Contains(r.stdout, "moved 5 DEAD events back to PENDING") {
				t.Errorf("answer %q, want 5 events moved:\n%s", c.answer, r)
			}
			if counts := tb.Counts(t); counts[outbox.StatusDead] != 0 {
				t.Errorf("after a confirmed retry-dead: %v", counts)
			}
		})
	}
}

func TestRetryDeadWakesRelays(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := pgtest.NewDeadRows(t, tb)
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	channel := tb.Name
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	ok(t, relayCLI(t, tb, "retry-dead", "--id", f.IDs["users-timeout-old"].String()))
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no notification on %q after retry-dead: %v", channel, err)
	}
	if n.Channel != channel {
		t.Errorf("notified %q, want %q", n.Channel, channel)
	}
}

// Every flag of retry-dead that narrows it ("only …", but not --dry-run's
// "only count") is a filter, so that
// the refusal without a filter names it.
func TestRetryDeadFilterFlagsAreEveryFilter(t *testing.T) {
	t.Parallel()
	var filters []string
	for _, f := range retryDeadCommand().Flags {
		if d, ok := f.(interface{ GetUsage() string }); ok && strings.HasPrefix(d.GetUsage(), "only ") && !strings.HasPrefix(d.GetUsage(), "only count") {
			filters = append(filters, f.Names()[0])
		}
	}
	if !slices.Equal(filters, deadFilterFlags) {
		t.Errorf("filter flags %v, deadFilterFlags %v", filters, deadFilterFlags)
	}
}
