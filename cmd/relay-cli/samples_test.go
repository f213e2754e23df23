package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// sample is a block of command output quoted in the docs: a "$ relay-cli …"
// line and what it printed.
type sample struct {
	file    string
	command string
	lines   []string
}

var sampleBlock = regexp.MustCompile("(?s)```\n\\$ (relay-cli [^\n]*)\n(.*?)```")

// docSamples finds every sample of relay-cli output in the docs.
func docSamples(t *testing.T) []sample {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for _, f := range append(files, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range sampleBlock.FindAllStringSubmatch(string(b), -1) {
			out = append(out, sample{filepath.Base(f), m[1], strings.Split(strings.TrimRight(m[2], "\n"), "\n")})
		}
	}
	return out
}

// Output shapes: what differs from run to run, or from the docs' made-up
// data, is replaced by a placeholder, so that a sample line and a line the
// command printed compare by their wording and layout.
var (
	shapeUUID     = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	shapeTime     = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?`)
	shapeSize     = regexp.MustCompile(`\d+(\.\d+)? (B|KiB|MiB|GiB)\b`)
	shapeDuration = regexp.MustCompile(`\b(\d+(ms|w|d|h|m|s))+\b`)
	shapeNumber   = regexp.MustCompile(`\d+`)
	shapeSpace    = regexp.MustCompile(`\s+`)
	shapePlural   = strings.NewReplacer("batches", "batch", "rows", "row", "partitions", "partition",
		"records", "record", "messages", "message", "events", "event")
)

func shape(line string, exact bool) string {
	if !exact {
		line = shapeUUID.ReplaceAllString(line, "<id>")
		line = shapeTime.ReplaceAllString(line, "<time>")
		line = shapeSize.ReplaceAllString(line, "<size>")
		line = shapeDuration.ReplaceAllString(line, "<dur>")
		line = shapeNumber.ReplaceAllString(line, "<n>")
		line = shapePlural.Replace(line)
	}
	return strings.TrimSpace(shapeSpace.ReplaceAllString(line, " "))
}

// TestDocsSamplesAreWhatCommandsPrint runs every command whose output the
// docs quote, on a table holding the sample's kind of data, and checks
// that each quoted line is one the command printed: word for word for
// migrate and setup-broker, whose output does not depend on the data, and
// by its shape (numbers, ids, times, durations and sizes left open) for the
// others. "…" in a sample leaves lines out. A sample of a command the test
// does not know fails, so that a new one is checked too.
func TestDocsSamplesAreWhatCommandsPrint(t *testing.T) {
	t.Parallel()
	samples := docSamples(t)
	if len(samples) < 8 {
		t.Fatalf("found %d samples of relay-cli output in the docs, want at least 8: did the pattern stop matching?", len(samples))
	}
	for _, s := range samples {
		t.Run(s.command, func(t *testing.T) {
			t.Parallel()
			out, table, exact := runSample(t, s.command)
			got := map[string]bool{}
			for _, line := range strings.Split(out, "\n") {
				// The test's table lives in a schema of its own; the docs
				// name the default table.
				line = strings.ReplaceAll(line, table, "openoutbox_events")
				got[shape(line, exact)] = true
			}
			for _, line := range s.lines {
				if l := strings.TrimSpace(line); l == "…" || l == "..." || l == "" {
					continue
				}
				if !got[shape(line, exact)] {
					t.Errorf("%s quotes this line of `%s`, which it does not print:\n  %s\n--- it printed:\n%s",
						s.file, s.command, line, out)
				}
			}
		})
	}
}

// sampleEvent is the event the docs show: the show sample's id.
var sampleEvent = uuid.MustParse("0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d")

// runSample runs command on data like the sample's and returns its stdout,
// the table's name as the output writes it, and whether the sample must
// match word for word.
func runSample(t *testing.T, command string) (stdout, table string, exact bool) {
	t.Helper()
	args := splitCommand(t, command)
	switch args[0] {
	case "migrate":
		name := pgtest.NewSchema(t) + ".openoutbox_events"
		r := ok(t, cmd{args: append(args, "--storage-url", pgtest.URL(), "--table", name)}.run(t))
		return r.stdout, name, true
	case "setup-broker":
		srv := natstest.Start(t)
		r := ok(t, cmd{args: args, env: []string{"PUBLISHER_URL=" + srv.URL()}}.run(t))
		return r.stdout, "openoutbox_events", true
	case "inbox":
		d := newInboxDB(t, true)
		d.record(t, "billing", 3, 24*40)
		r := ok(t, inboxCLI(t, d, args...))
		return r.stdout, d.table, false
	case "partitions":
		tb := pgtest.NewPartitioned(t, "day")
		tb.InsertN(t, 5, "orders.paid")
		r := ok(t, relayCLI(t, tb, args...))
		return r.stdout, tb.Name, false
	case "stats", "prune", "list", "show":
		tb := pgtest.New(t)
		sampleRows(t, tb)
		r := ok(t, relayCLI(t, tb, args...))
		return r.stdout, tb.Name, false
	}
	t.Fatalf("the docs quote `%s`, which this test does not know how to run: add it to runSample", command)
	return "", "", false
}

// sampleRows fills tb with the kinds of rows the samples of stats, prune,
// list and show show: due and scheduled PENDING events of three types, two
// relays' leases, DELIVERED rows old and recent, and the DEAD event of the
// show sample.
func sampleRows(t *testing.T, tb *pgtest.Table) {
	t.Helper()
	tb.Insert(t, pgtest.Event{ID: sampleEvent, Type: "orders.paid", PartitionKey: "order-42",
		Payload: []byte(`{"order_id": 42, "amount_cents": 1999}`), Headers: `{"content-type": "application/json"}`})
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', attempts = 1, updated_at = now() - interval '2 hours',
		last_error = 'no JetStream stream captures subject "orders.paid"; create one (relay-cli setup-broker --event-type "orders.paid") or fix the event type or subject_prefix'
		WHERE event_id = $1`, sampleEvent)
	tb.InsertN(t, 3, "orders.paid")
	retrying := tb.InsertN(t, 1, "orders.paid")
	tb.Exec(t, `UPDATE {{table}} SET attempts = 2, created_at = now() - interval '3 minutes' WHERE event_id = ANY($1)`, retrying)
	tb.InsertN(t, 2, "users.created")
	tb.Insert(t, pgtest.Event{Type: "mails.reminder", AvailableIn: 24 * 60 * 60 * 1e9})
	for _, relay := range []string{"relay-7f9c-a1b2", "relay-7f9c-c3d4"} {
		leased := tb.InsertN(t, 2, "orders.paid")
		tb.Exec(t, `UPDATE {{table}} SET status = 'DELIVERING', locked_by = $2, locked_at = now() - interval '2 seconds' WHERE event_id = ANY($1)`, leased, relay)
	}
	delivered := tb.InsertN(t, 3, "orders.paid")
	tb.Exec(t, `UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() - interval '30 seconds' WHERE event_id = ANY($1)`, delivered)
	old := tb.InsertN(t, 2, "orders.paid")
	tb.Exec(t, `UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() - interval '8 days' WHERE event_id = ANY($1)`, old)
	oldDead := tb.InsertN(t, 1, "orders.paid")
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', updated_at = now() - interval '8 days' WHERE event_id = ANY($1)`, oldDead)
}

// splitCommand splits the sample's command line as a shell would, for the
// simple quoting the docs use.
func splitCommand(t *testing.T, command string) []string {
	t.Helper()
	var args []string
	for _, f := range regexp.MustCompile(`'[^']*'|"[^"]*"|\S+`).FindAllString(strings.TrimPrefix(command, "relay-cli "), -1) {
		args = append(args, strings.Trim(f, `'"`))
	}
	return args
}
