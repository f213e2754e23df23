package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

type pruneJSON struct {
	Table            string           `json:"table"`
	DryRun           bool             `json:"dry_run"`
	OlderThanSeconds float64          `json:"older_than_seconds"`
	Rows             map[string]int64 `json:"rows"`
	Total            int64            `json:"total"`
}

func TestPruneDryRunsCountAndChangeNothing(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	pgtest.NewPruneRows(t, tb, 5)
	before := tb.Snapshot(t)

	js := decode[pruneJSON](t, ok(t, relayCLI(t, tb, "prune", "--older-than", "7d", "--status", "all", "--dry-run", "--json")))
	if !js.DryRun || js.Rows["delivered"] != 5 || js.Rows["dead"] != 3 || js.Total != 8 || js.OlderThanSeconds != 7*86400 {
		t.Errorf("prune --dry-run --json = %+v, want 5 delivered and 3 dead rows of 7 days", js)
	}
	r := ok(t, relayCLI(t, tb, "prune", "--older-than", "1w", "--dry-run"))
	if !strings.Contains(r.stdout, "would delete 5 DELIVERED rows") || strings.Contains(r.stdout, "DEAD") {
		t.Errorf("prune --dry-run (default status delivered):\n%s", r)
	}
	r = ok(t, relayCLI(t, tb, "prune", "--older-than", "0s", "--status", "dead", "--dry-run"))
	if !strings.Contains(r.stdout, "would delete 4 DEAD rows") {
		t.Errorf("prune --status dead --dry-run:\n%s", r)
	}
	pgtest.RequireUnchanged(t, "prune --dry-run", before, tb.Snapshot(t))
}

func TestPruneDeletesOldFinishedRowsInBatchesAndSparesLiveOnes(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := pgtest.NewPruneRows(t, tb, 7)

	// Default status: DELIVERED only, by delivered_at.
	r := ok(t, relayCLI(t, tb, "prune", "--older-than", "7d", "--batch-size", "3"))
	if !strings.Contains(r.stdout, "deleted 7 DELIVERED rows with delivered_at older than 7d (3 batches)") {
		t.Errorf("prune output:\n%s", r)
	}
	if r.stderr != "" {
		t.Errorf("prune wrote to stderr, which is not a terminal:\n%s", r)
	}
	if got, want := ids(t, tb), sorted(f.NewDelivered, f.OldDead, f.NewDead, f.Live); !slices.Equal(got, want) {
		t.Fatalf("after prune rows\n%v\nremain, want\n%v", got, want)
	}

	// DEAD rows by updated_at.
	js := decode[pruneJSON](t, ok(t, relayCLI(t, tb, "prune", "--older-than", "2d", "--status", "dead", "--json")))
	if js.DryRun || js.Rows["dead"] != 3 || js.Total != 3 || len(js.Rows) != 1 {
		t.Errorf("prune --status dead --json = %+v, want 3 dead rows", js)
	}
	if got, want := ids(t, tb), sorted(f.NewDelivered, f.NewDead, f.Live); !slices.Equal(got, want) {
		t.Fatalf("after prune --status dead rows\n%v\nremain, want\n%v", got, want)
	}

	// Everything finished, however recent: the live rows stay.
	r = ok(t, relayCLI(t, tb, "prune", "--older-than", "0s", "--status", "all"))
	if !strings.Contains(r.stdout, "deleted 2 DELIVERED rows") || !strings.Contains(r.stdout, "deleted 1 DEAD row with updated_at older than 0s (1 batch)") {
		t.Errorf("prune --status all:\n%s", r)
	}
	if got, want := ids(t, tb), sorted(f.Live); !slices.Equal(got, want) {
		t.Fatalf("after pruning everything finished rows\n%v\nremain, want only the PENDING and DELIVERING rows\n%v", got, want)
	}
	for _, id := range f.Live[2:] {
		if row := tb.Get(t, id); row.Status != "DELIVERING" || row.LockedBy != "r" {
			t.Errorf("a DELIVERING row changed: %+v", row)
		}
	}
}

// Progress goes to stderr only when stderr is a terminal, so that cron logs
// and pipes get the result line alone.
func TestPruneShowsProgressOnATerminal(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	pgtest.NewPruneRows(t, tb, 5)
	terminal := openPTY(t)
	screen := make(chan string)
	go func() {
		var b strings.Builder
		buf := make([]byte, 1024)
		for {
			n, err := terminal.master.Read(buf)
			b.Write(buf[:n])
			if err != nil { // EIO once the command and the test closed the slave
				screen <- b.String()
				return
			}
		}
	}()
	x, cancel := cmd{args: onTable(tb, "prune", "--older-than", "7d", "--batch-size", "2")}.start(t)
	defer cancel()
	var stdout strings.Builder
	x.Stdout, x.Stderr = &stdout, terminal.slave
	code := exitCode(t, x.Run())
	terminal.slave.Close()
	shown := <-screen
	if code != 0 || !strings.Contains(stdout.String(), "deleted 5 DELIVERED rows") {
		t.Fatalf("prune on a terminal exited %d:\n%s\n%s", code, stdout.String(), shown)
	}
	for _, want := range []string{"pruning DELIVERED rows: 2 deleted", "pruning DELIVERED rows: 4 deleted", "pruning DELIVERED rows: 5 deleted"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the terminal did not show %q:\n%q", want, shown)
		}
	}
	if strings.Contains(stdout.String(), "pruning") {
		t.Errorf("progress went to stdout:\n%s", stdout.String())
	}
}

type prunePerStatusJSON struct {
	pruneJSON
	AgeSeconds map[string]float64 `json:"age_seconds"`
}

// Open Outbox's maintenance guide runs prune --delivered-age 7d --dead-age
// 30d [--dry-run]: each status gets its own age.
func TestPruneTakesOpenOutboxsPerStatusAges(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := pgtest.NewPruneRows(t, tb, 5)
	before := tb.Snapshot(t)

	r := ok(t, relayCLI(t, tb, "prune", "--delivered-age", "7d", "--dead-age", "2d", "--dry-run"))
	if !strings.Contains(r.stdout, "would delete 5 DELIVERED rows with delivered_at older than 7d") ||
		!strings.Contains(r.stdout, "would delete 3 DEAD rows with updated_at older than 2d") {
		t.Errorf("prune --delivered-age --dead-age --dry-run:\n%s", r)
	}
	pgtest.RequireUnchanged(t, "prune --dry-run", before, tb.Snapshot(t))

	js := decode[prunePerStatusJSON](t, ok(t, relayCLI(t, tb, "prune", "--delivered-age", "7d", "--dead-age", "2d", "--json")))
	if js.Rows["delivered"] != 5 || js.Rows["dead"] != 3 || js.Total != 8 ||
		js.AgeSeconds["delivered"] != 7*86400 || js.AgeSeconds["dead"] != 2*86400 {
		t.Errorf("prune --json = %+v", js)
	}
	if got, want := ids(t, tb), sorted(f.NewDelivered, f.NewDead, f.Live); !slices.Equal(got, want) {
		t.Fatalf("after prune rows\n%v\nremain, want\n%v", got, want)
	}
	// One of the two alone prunes that status alone.
	r = ok(t, relayCLI(t, tb, "prune", "--dead-age", "0s"))
	if !strings.Contains(r.stdout, "deleted 1 DEAD row") || strings.Contains(r.stdout, "DELIVERED") {
		t.Errorf("prune --dead-age alone:\n%s", r)
	}
}
