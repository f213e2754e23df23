package main

import (
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
)

// migrate --capture wal makes the publication CAPTURE=wal reads, and
// --capture poll takes it and the slot away again.
func TestMigrateCaptureMakesAndDropsThePublication(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	url := c.URL(db)
	tb := pgtest.NewAt(t, url)
	name := tb.WAL(pgwal.Config{}).SlotName() // the publication's too
	count := func(sql string) int {
		var n int
		if err := tb.Pool().QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	r := ok(t, cmd{args: []string{"migrate", "--storage-url", url, "--table", tb.Name, "--capture", "wal"}}.run(t))
	if !strings.Contains(r.stderr, "publication "+name+" ready") {
		t.Errorf("migrate --capture wal does not say the publication is ready:\n%s", r)
	}
	if n := count("SELECT count(*) FROM pg_publication_tables WHERE pubname = '" + name + "'"); n != 1 {
		t.Fatalf("publication covers %d tables, want 1", n)
	}
	c.Exec(t, db, "SELECT pg_create_logical_replication_slot('"+name+"', 'pgoutput')")
	st := ok(t, cmd{args: []string{"stats", "--storage-url", url, "--table", tb.Name}}.run(t))
	if !strings.Contains(st.stdout, "replication slot "+name+" (CAPTURE=wal): no relay streams from it; keeps ") {
		t.Errorf("stats does not show the slot:\n%s", st.stdout)
	}
	js := decode[struct {
		WALSlot *struct {
			Name      string `json:"name"`
			WALStatus string `json:"wal_status"`
		} `json:"wal_slot"`
	}](t, ok(t, cmd{args: []string{"stats", "--storage-url", url, "--table", tb.Name, "--json"}}.run(t)))
	if js.WALSlot == nil || js.WALSlot.Name != name || js.WALSlot.WALStatus == "" {
		t.Errorf("stats --json wal_slot = %+v", js.WALSlot)
	}
	if !strings.Contains(st.stdout, "publication "+name+": ok") {
		t.Errorf("stats does not show the publication as ok:\n%s", st.stdout)
	}
	// A publication dropped under the slot: stats says what the relays
	// do and what to run.
	c.Exec(t, db, "DROP PUBLICATION "+name)
	gone := decode[struct {
		WALSlot *struct {
			Publication struct {
				Exists bool `json:"exists"`
			} `json:"publication"`
		} `json:"wal_slot"`
	}](t, ok(t, cmd{args: []string{"stats", "--storage-url", url, "--table", tb.Name, "--json"}}.run(t)))
	if gone.WALSlot == nil || gone.WALSlot.Publication.Exists {
		t.Errorf("stats --json with the publication dropped: %+v", gone.WALSlot)
	}
	st = ok(t, cmd{args: []string{"stats", "--storage-url", url, "--table", tb.Name}}.run(t))
	if !strings.Contains(st.stdout, "does not exist: relays claim every event from the table; run relay-cli migrate --capture wal") {
		t.Errorf("stats does not say the publication is gone:\n%s", st.stdout)
	}
	ok(t, cmd{args: []string{"migrate", "--storage-url", url, "--table", tb.Name, "--capture", "wal"}}.run(t))
	ok(t, cmd{args: []string{"migrate", "--storage-url", url, "--table", tb.Name, "--capture", "poll"}}.run(t))
	if n := count("SELECT count(*) FROM pg_publication WHERE pubname = '"+name+"'") +
		count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+name+"'"); n != 0 {
		t.Fatalf("migrate --capture poll left the publication or the slot")
	}
	bad := cmd{args: []string{"migrate", "--storage-url", url, "--table", tb.Name, "--capture", "binlog"}}.run(t)
	if bad.code != 2 {
		t.Fatalf("--capture binlog: exit %d, want 2:\n%s", bad.code, bad)
	}
}

// grants --capture wal names the right a WAL relay needs, on its login role.
func TestGrantsCaptureWALNamesReplication(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	r := ok(t, cmd{args: []string{"grants", "--storage-url", pgtest.URL(), "--table", tb.Name, "--capture", "wal", "--login-role", "relay_app", "--print"}}.run(t))
	if !strings.Contains(r.stdout, "ALTER ROLE relay_app REPLICATION;") {
		t.Fatalf("grants --capture wal --print lacks the REPLICATION grant:\n%s", r.stdout)
	}
	if bad := (cmd{args: []string{"grants", "--storage-url", pgtest.URL(), "--table", tb.Name, "--capture", "wal"}}.run(t)); bad.code != 2 {
		t.Fatalf("--capture wal without --login-role: exit %d, want 2", bad.code)
	}
}
