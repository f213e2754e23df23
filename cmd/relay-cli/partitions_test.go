package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

type partitionsJSON struct {
	Table       string `json:"table"`
	PartitionBy string `json:"partition_by"`
	Partitions  []struct {
		Name    string       `json:"name"`
		Default bool         `json:"default"`
		From    *time.Time   `json:"from"`
		To      *time.Time   `json:"to"`
		Rows    statusCounts `json:"rows"`
		Bytes   int64        `json:"bytes"`
	} `json:"partitions"`
}

// migrate --partition-by creates a partitioned table (and --print shows
// it without creating it); partitions lists its partitions with the rows
// in each, as text and --json.
func TestMigratePartitionByThenPartitions(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	name := newTableName(tb)
	args := []string{"--storage-url", pgtest.URL(), "--table", name}

	printed := ok(t, cmd{args: append([]string{"migrate", "--partition-by", "hour", "--print"}, args...)}.run(t))
	for _, want := range []string{"PARTITION BY RANGE (created_at)", "PRIMARY KEY (event_id, created_at)", "PARTITION OF"} {
		if !strings.Contains(printed.stdout, want) {
			t.Errorf("migrate --partition-by hour --print does not contain %q", want)
		}
	}
	if tableExists(t, tb, name) {
		t.Fatal("migrate --print created the table")
	}

	first := ok(t, cmd{args: append([]string{"migrate", "--partition-by", "hour"}, args...)}.run(t))
	for _, want := range []string{"created  table fresh_outbox", "created  partition fresh_outbox_default",
		"created  index fresh_outbox_pending_seq_idx", "partitioned by hour", "relay-cli partitions"} {
		if !strings.Contains(first.stdout, want) {
			t.Errorf("migrate --partition-by hour does not say %q:\n%s", want, first)
		}
	}
	again := ok(t, cmd{args: append([]string{"migrate", "--partition-by", "hour"}, args...)}.run(t))
	if !strings.Contains(again.stdout, "(0 created,") {
		t.Errorf("migrate --partition-by again created something:\n%s", again)
	}
	if r := (cmd{args: append([]string{"migrate", "--partition-by", "day"}, args...)}.run(t)); r.code != 1 ||
		!strings.Contains(r.stderr, "partitioned by hour, not day") {
		t.Errorf("migrate --partition-by day on a table by hour: want exit 1 naming both:\n%s", r)
	}

	ok(t, cmd{args: append([]string{"emit", "--type", "t", "--count", "3"}, args...)}.run(t))
	text := ok(t, cmd{args: append([]string{"partitions"}, args...)}.run(t))
	now := time.Now().UTC()
	current := "fresh_outbox_p" + now.Format("2006010215")
	for _, want := range []string{"PARTITION", "PENDING", "fresh_outbox_default", "partitioned by hour:", "3 rows"} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("partitions does not say %q:\n%s", want, text)
		}
	}
	js := decode[partitionsJSON](t, ok(t, cmd{args: append([]string{"partitions", "--json"}, args...)}.run(t)))
	if js.Table != name || js.PartitionBy != "hour" || len(js.Partitions) < 3 {
		t.Fatalf("partitions --json = %+v", js)
	}
	last := js.Partitions[len(js.Partitions)-1]
	if !last.Default || last.From != nil || last.Name != "fresh_outbox_default" {
		t.Errorf("last partition %+v, want the default one without a range", last)
	}
	pending := int64(0)
	var names []string
	for _, p := range js.Partitions {
		names = append(names, p.Name)
		pending += p.Rows.Pending
		if p.Bytes <= 0 {
			t.Errorf("partition %s has no size", p.Name)
		}
		if !p.Default && (p.From == nil || p.To == nil || p.To.Sub(*p.From) != time.Hour) {
			t.Errorf("partition %+v: want an hour's range", p)
		}
	}
	if pending != 3 {
		t.Errorf("partitions count %d PENDING rows, want 3", pending)
	}
	// The clock may have passed the hour since emit; the current hour's
	// partition exists either way.
	if !slices.Contains(names, current) {
		t.Errorf("partitions %v lack the current hour's, %s", names, current)
	}
}

// On a table that is not partitioned, partitions says so and exits 0.
func TestPartitionsOfAPlainTable(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	r := ok(t, relayCLI(t, tb, "partitions"))
	if !strings.Contains(r.stdout, "is not partitioned") || !strings.Contains(r.stdout, "migrate --partition-by") {
		t.Errorf("partitions of a plain table:\n%s", r)
	}
	js := decode[partitionsJSON](t, ok(t, relayCLI(t, tb, "partitions", "--json")))
	if js.PartitionBy != "" || js.Partitions == nil || len(js.Partitions) != 0 {
		t.Errorf("partitions --json of a plain table = %+v, want partition_by \"\" and []", js)
	}
	if r := relayCLI(t, tb, "migrate", "--partition-by", "day"); r.code != 1 || !strings.Contains(r.stderr, "not partitioned") {
		t.Errorf("migrate --partition-by on a plain table: want exit 1, refused:\n%s", r)
	}
}

// partitions --maintain creates partitions ahead and drops finished ones,
// as the relay's retention does, and keeps what is not finished.
func TestPartitionsMaintain(t *testing.T) {
	t.Parallel()
	tb := pgtest.NewPartitioned(t, "hour")
	ids := tb.InsertN(t, 2, "e")
	tb.Set(t, ids[0], "created_at = now() - interval '3 hours', status = 'DELIVERED', delivered_at = now() - interval '2 days'")
	tb.Set(t, ids[1], "created_at = now() - interval '5 hours'")

	type report struct {
		Table       string           `json:"table"`
		Created     []string         `json:"created"`
		Dropped     []string         `json:"dropped"`
		DroppedRows map[string]int64 `json:"dropped_rows"`
		Kept        []struct {
			Name   string `json:"name"`
			Reason string `json:"reason"`
		} `json:"kept"`
	}
	js := decode[report](t, ok(t, relayCLI(t, tb, "partitions", "--maintain", "--ahead", "1d", "--delivered-retention", "1h", "--json")))
	if len(js.Created) < 2 || len(js.Dropped) != 1 || js.DroppedRows["DELIVERED"] != 1 || len(js.Kept) != 1 ||
		!strings.Contains(js.Kept[0].Reason, "1 PENDING") {
		t.Fatalf("partitions --maintain --json = %+v; want partitions created, the delivered hour dropped, the pending one kept", js)
	}
	rows := tb.Snapshot(t)
	if _, ok := rows[ids[0]]; ok || len(rows) != 1 {
		t.Errorf("after --maintain %d rows are left, want only the PENDING one", len(rows))
	}
	// Without retentions DELIVERED and DEAD rows are kept forever.
	tb.Set(t, ids[1], "status = 'DEAD', updated_at = now() - interval '30 days'")
	text := ok(t, relayCLI(t, tb, "partitions", "--maintain", "--ahead", "1d", "--delivered-retention", "1h"))
	if !strings.Contains(text.stdout, "kept     partition") || !strings.Contains(text.stdout, "0 created, 0 dropped (0 rows), 1 kept") {
		t.Errorf("partitions --maintain without --dead-retention:\n%s", text)
	}
	text = ok(t, relayCLI(t, tb, "partitions", "--maintain", "--dead-retention", "1h"))
	if !strings.Contains(text.stdout, "dropped  partition") || !strings.Contains(text.stdout, "1 dropped (1 row), 0 kept") {
		t.Errorf("partitions --maintain --dead-retention 1h:\n%s", text)
	}

	plain := pgtest.New(t)
	if r := relayCLI(t, plain, "partitions", "--maintain"); r.code != 1 || !strings.Contains(r.stderr, "not partitioned") {
		t.Errorf("partitions --maintain on a plain table: want exit 1:\n%s", r)
	}
}
