package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
)

// pruneRows are rows of every status, old and recent. The PENDING and
// DELIVERING rows carry old created_at, updated_at and delivered_at values,
// so that only their status keeps prune away from them.
type pruneRows struct {
	oldDelivered, newDelivered, oldDead, newDead, live []uuid.UUID
}

func newPruneRows(t *testing.T, tb *pgtest.Table, oldDelivered int) pruneRows {
	t.Helper()
	var f pruneRows
	f.oldDelivered = tb.InsertN(t, oldDelivered, "old.delivered")
	f.newDelivered = tb.InsertN(t, 2, "new.delivered")
	f.oldDead = tb.InsertN(t, 3, "old.dead")
	f.newDead = tb.InsertN(t, 1, "new.dead")
	f.live = tb.InsertN(t, 4, "live")
	tb.Exec(t, `UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() - interval '8 days',
		updated_at = now() - interval '8 days' WHERE event_id = ANY($1)`, f.oldDelivered)
	tb.Exec(t, `UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() - interval '6 days',
		updated_at = now() - interval '30 days', created_at = now() - interval '30 days' WHERE event_id = ANY($1)`, f.newDelivered)
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', updated_at = now() - interval '8 days' WHERE event_id = ANY($1)`, f.oldDead)
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', updated_at = now() - interval '1 day',
		delivered_at = now() - interval '30 days' WHERE event_id = ANY($1)`, f.newDead)
	old := "created_at = now() - interval '30 days', updated_at = now() - interval '30 days', delivered_at = now() - interval '30 days'"
	setRow(t, tb, f.live[0], old)
	setRow(t, tb, f.live[1], old+", attempts = 3")
	setRow(t, tb, f.live[2], old+", status = 'DELIVERING', locked_by = 'r', locked_at = now() - interval '30 days'")
	setRow(t, tb, f.live[3], old+", status = 'DELIVERING', locked_by = 'r', locked_at = now()")
	return f
}

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
	newPruneRows(t, tb, 5)
	before := snapshot(t, tb)

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
	unchanged(t, "prune --dry-run", before, snapshot(t, tb))
}

func TestPruneDeletesOldFinishedRowsInBatchesAndSparesLiveOnes(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	f := newPruneRows(t, tb, 7)

	// Default status: DELIVERED only, by delivered_at.
	r := ok(t, relayCLI(t, tb, "prune", "--older-than", "7d", "--batch-size", "3"))
	if !strings.Contains(r.stdout, "deleted 7 DELIVERED rows with delivered_at older than 7d (3 batches)") {
		t.Errorf("prune output:\n%s", r)
	}
	if r.stderr != "" {
		t.Errorf("prune wrote to stderr, which is not a terminal:\n%s", r)
	}
	if got, want := ids(t, tb), sorted(f.newDelivered, f.oldDead, f.newDead, f.live); !slices.Equal(got, want) {
		t.Fatalf("after prune rows\n%v\nremain, want\n%v", got, want)
	}

	// DEAD rows by updated_at.
	js := decode[pruneJSON](t, ok(t, relayCLI(t, tb, "prune", "--older-than", "2d", "--status", "dead", "--json")))
	if js.DryRun || js.Rows["dead"] != 3 || js.Total != 3 || len(js.Rows) != 1 {
		t.Errorf("prune --status dead --json = %+v, want 3 dead rows", js)
	}
	if got, want := ids(t, tb), sorted(f.newDelivered, f.newDead, f.live); !slices.Equal(got, want) {
		t.Fatalf("after prune --status dead rows\n%v\nremain, want\n%v", got, want)
	}

	// Everything finished, however recent: the live rows stay.
	r = ok(t, relayCLI(t, tb, "prune", "--older-than", "0s", "--status", "all"))
	if !strings.Contains(r.stdout, "deleted 2 DELIVERED rows") || !strings.Contains(r.stdout, "deleted 1 DEAD row with updated_at older than 0s (1 batch)") {
		t.Errorf("prune --status all:\n%s", r)
	}
	if got, want := ids(t, tb), sorted(f.live); !slices.Equal(got, want) {
		t.Fatalf("after pruning everything finished rows\n%v\nremain, want only the PENDING and DELIVERING rows\n%v", got, want)
	}
	for _, id := range f.live[2:] {
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
	newPruneRows(t, tb, 5)
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
