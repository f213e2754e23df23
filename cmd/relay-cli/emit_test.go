package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

type emittedRow struct {
	id                   uuid.UUID
	typ                  string
	key                  *string
	payload              []byte
	headers              string
	createdAt, available time.Time
}

// emitted reads the table in insertion order.
func emitted(t *testing.T, tb *pgtest.Table) []emittedRow {
	t.Helper()
	rows, err := tb.Pool().Query(ctx, `SELECT event_id, event_type, partition_key, payload, headers::text,
		created_at, available_at FROM `+tb.Name+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var out []emittedRow
	for rows.Next() {
		var r emittedRow
		if err := rows.Scan(&r.id, &r.typ, &r.key, &r.payload, &r.headers, &r.createdAt, &r.available); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEmitInsertsEventsInOneTransaction(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	r := ok(t, relayCLI(t, tb, "emit", "--type", "orders.paid", "--key", "order-42", "--count", "3",
		"--payload", `{"amount_cents": 1999}`, "--header", "content-type=application/json",
		"--header", "note=a,b=c", "--available-in", "1h"))
	lines := strings.Fields(r.stdout)
	if len(lines) != 3 || !strings.Contains(r.stderr, "emitted 3 events of type orders.paid into "+tb.Name) {
		t.Fatalf("emit output:\n%s", r)
	}
	rows := emitted(t, tb)
	if len(rows) != 3 {
		t.Fatalf("%d rows in the table, want 3", len(rows))
	}
	for i, row := range rows {
		if row.id.String() != lines[i] {
			t.Errorf("row %d is %s, but emit printed %s there: ids must be in insertion order", i, row.id, lines[i])
		}
		if row.typ != "orders.paid" || row.key == nil || *row.key != "order-42" || string(row.payload) != `{"amount_cents": 1999}` ||
			row.headers != `{"note": "a,b=c", "content-type": "application/json"}` {
			t.Errorf("row %d = %s %v %s %s", i, row.typ, row.key, row.payload, row.headers)
		}
		// The delay counts from the command's call, by its clock: the rows
		// are written a moment later.
		if d := row.available.Sub(row.createdAt); d < time.Hour-time.Second || d > time.Hour+time.Second {
			t.Errorf("row %d is due %s after it was written, want 1h", i, d)
		}
		if !row.createdAt.Equal(rows[0].createdAt) {
			t.Errorf("rows have different created_at (%s, %s): not one transaction", row.createdAt, rows[0].createdAt)
		}
	}
}

func TestEmitDefaultsAndJSON(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	js := decode[struct {
		Table     string      `json:"table"`
		EventType string      `json:"event_type"`
		Count     int         `json:"count"`
		EventIDs  []uuid.UUID `json:"event_ids"`
	}](t, ok(t, relayCLI(t, tb, "emit", "--type", "demo", "--json")))
	rows := emitted(t, tb)
	if js.Table != tb.Name || js.EventType != "demo" || js.Count != 1 || len(js.EventIDs) != 1 || len(rows) != 1 || rows[0].id != js.EventIDs[0] {
		t.Fatalf("emit --json = %+v, table %+v", js, rows)
	}
	if row := rows[0]; row.key != nil || string(row.payload) != "{}" || row.headers != "{}" || row.available.After(row.createdAt) {
		t.Errorf("defaults: key %v payload %s headers %s due %s after creation; want none, {}, {}, at once",
			row.key, row.payload, row.headers, row.available.Sub(row.createdAt))
	}
}

func TestEmitPayloadFromFileOrStdin(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	binary := []byte{0x00, 0xff, 'x', '\n', 0x80}
	file := filepath.Join(t.TempDir(), "payload.bin")
	if err := os.WriteFile(file, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	ok(t, relayCLI(t, tb, "emit", "--type", "from.file", "--payload-file", file))
	ok(t, cmd{args: onTable(tb, "emit", "--type", "from.stdin", "--payload-file", "-"), stdin: strings.NewReader("plain text")}.run(t))
	rows := emitted(t, tb)
	if len(rows) != 2 || !bytes.Equal(rows[0].payload, binary) || string(rows[1].payload) != "plain text" {
		t.Fatalf("payloads = %q, want the file's bytes and stdin's text", [][]byte{rows[0].payload, rows[1].payload})
	}
	r := relayCLI(t, tb, "emit", "--type", "t", "--payload-file", filepath.Join(t.TempDir(), "missing"))
	if r.code != 1 || !strings.Contains(r.stderr, "--payload-file") {
		t.Errorf("emit with a missing payload file, want exit 1 naming the flag:\n%s", r)
	}
	if n := len(emitted(t, tb)); n != 2 {
		t.Errorf("a failed emit wrote rows: %d", n)
	}
}
