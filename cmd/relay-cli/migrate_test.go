package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// newTableName names a table that does not exist yet, in tb's schema, which
// is dropped with everything in it when the test ends.
func newTableName(tb *pgtest.Table) string {
	schemaName, _, _ := strings.Cut(tb.Name, ".")
	return schemaName + ".fresh_outbox"
}

func tableExists(t *testing.T, tb *pgtest.Table, name string) bool {
	t.Helper()
	var exists bool
	if err := tb.Pool().QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestMigrateCreatesThenFindsEverything(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	name := newTableName(tb)
	args := []string{"migrate", "--storage-url", pgtest.URL(), "--table", name}

	first := ok(t, cmd{args: args}.run(t))
	for _, want := range []string{"created  table fresh_outbox", "created  index fresh_outbox_pending_seq_idx",
		"created  trigger fresh_outbox_notify", "table " + name + " is ready", "0 already existed"} {
		if !strings.Contains(first.stdout, want) {
			t.Errorf("first migrate does not say %q:\n%s", want, first)
		}
	}
	if strings.Contains(first.stdout, "exists ") {
		t.Errorf("first migrate found objects that existed:\n%s", first)
	}
	// It says where the table goes, so that it goes where the relay looks.
	if !regexp.MustCompile(`relay-cli: migrating PostgreSQL at \S+:\d+ database "[^"]+" as user "[^"]*", table ` + regexp.QuoteMeta(name)).MatchString(first.stderr) {
		t.Errorf("first migrate does not say which database it migrates:\n%s", first)
	}
	if !tableExists(t, tb, name) {
		t.Fatalf("migrate did not create %s", name)
	}

	second := ok(t, cmd{args: args}.run(t))
	if strings.Contains(second.stdout, "created ") || !strings.Contains(second.stdout, "exists   table fresh_outbox") ||
		!strings.Contains(second.stdout, "(0 created,") {
		t.Errorf("second migrate should find everything and create nothing:\n%s", second)
	}

	js := decode[struct {
		Table   string   `json:"table"`
		Created []string `json:"created"`
		Existed []string `json:"existed"`
	}](t, ok(t, cmd{args: append(args, "--json")}.run(t)))
	if js.Table != name || js.Created == nil || len(js.Created) != 0 || len(js.Existed) < 8 {
		t.Errorf("migrate --json = %+v, want nothing created ([]) and every object existing", js)
	}
}

// Upgrading a table made by an earlier version: migrate keeps the index
// another now replaces, for the relays of that version still running, and
// says so; migrate --cleanup drops it, and says so.
func TestMigrateKeepsAnEarlierVersionsIndexUntilCleanup(t *testing.T) {
	t.Parallel()
	// A database of its own: DROP INDEX CONCURRENTLY waits for every older
	// transaction in its database.
	dbURL := pgtest.NewDatabase(t)
	name := "fresh_outbox"
	args := []string{"migrate", "--storage-url", dbURL, "--table", name}
	ok(t, cmd{args: args}.run(t))
	// due_idx, as the releases before due_at_idx made it.
	db, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(context.Background(), "CREATE INDEX fresh_outbox_due_idx ON "+name+" (available_at) WHERE status = 'PENDING' AND available_at > created_at"); err != nil {
		t.Fatal(err)
	}

	upgrade := ok(t, cmd{args: append(args, "--json")}.run(t))
	js := decode[struct {
		Created []string `json:"created"`
		Dropped []string `json:"dropped"`
		Kept    []string `json:"kept"`
	}](t, upgrade)
	if len(js.Created) != 0 || len(js.Dropped) != 0 || len(js.Kept) != 1 || js.Kept[0] != "index fresh_outbox_due_idx" {
		t.Errorf("migrate --json after an earlier version's index = %+v, want due_idx kept and nothing created or dropped", js)
	}
	if text := ok(t, cmd{args: args}.run(t)); !strings.Contains(text.stdout, "kept     index fresh_outbox_due_idx") ||
		!strings.Contains(text.stdout, "migrate --cleanup") {
		t.Errorf("migrate does not say what it kept and how to drop it:\n%s", text)
	}
	text := ok(t, cmd{args: append(args, "--cleanup")}.run(t))
	if !strings.Contains(text.stdout, "dropped  index fresh_outbox_due_idx") || !strings.Contains(text.stdout, ", 1 dropped)") {
		t.Errorf("migrate --cleanup does not say what it dropped:\n%s", text)
	}
}

// --plan prints what migrate would run on this table, whether each
// statement blocks writers, and the table's size, and changes nothing.
func TestMigratePlanPrintsWhatItWouldRun(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	name := newTableName(tb)
	args := []string{"migrate", "--storage-url", pgtest.URL(), "--table", name}
	plan := ok(t, cmd{args: append(args, "--plan")}.run(t))
	for _, want := range []string{"does not exist", "CREATE INDEX IF NOT EXISTS", "(a new table)", "-- blocks writers: no"} {
		if !strings.Contains(plan.stdout, want) {
			t.Errorf("migrate --plan on a new table lacks %q:\n%s", want, plan)
		}
	}
	if tableExists(t, tb, name) {
		t.Fatal("migrate --plan created the table")
	}
	ok(t, cmd{args: args}.run(t))
	tb.Exec(t, "DROP INDEX "+strings.TrimSuffix(name, "fresh_outbox")+"fresh_outbox_dead_idx")
	js := decode[struct {
		Bytes int64 `json:"table_bytes"`
		Steps []struct {
			SQL    string `json:"sql"`
			Blocks string `json:"blocks_writers"`
		} `json:"steps"`
	}](t, ok(t, cmd{args: append(args, "--plan", "--json")}.run(t)))
	if js.Bytes <= 0 || len(js.Steps) != 2 || !strings.Contains(js.Steps[1].SQL, "CONCURRENTLY") || js.Steps[1].Blocks != "no" {
		t.Errorf("migrate --plan --json with one index missing = %+v, want the table's size, the base step and the index built CONCURRENTLY", js)
	}
	for _, bad := range [][]string{{"--plan", "--print"}, {"--lock-timeout", "0s"}} {
		if r := (cmd{args: append(args, bad...)}).run(t); r.code != 2 {
			t.Errorf("migrate %v: exit %d, want 2 (usage)\n%s", bad, r.code, r)
		}
	}
}

// The printed schema opens with a header that names the table as the
// statements below spell it.
func TestMigratePrintHeaderNamesTheTable(t *testing.T) {
	t.Parallel()
	for table, quoted := range map[string]string{"openoutbox_events": `"openoutbox_events"`, "app.events": `"app"."events"`} {
		r := ok(t, cmd{args: []string{"migrate", "--print", "--storage-url", unreachableURL, "--table", table}}.run(t))
		var header []string
		for _, line := range strings.Split(r.stdout, "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			header = append(header, line)
		}
		want := []string{
			"-- Outbox Relay schema for PostgreSQL 13 or later: the outbox table",
			"-- " + quoted + ", its indexes, its insert trigger and its id function.",
			"--",
			"-- The table follows the Open Outbox table contract column for column, so the",
			"-- relay can take over an existing Open Outbox table. Every statement is",
			"-- idempotent and drops nothing: running this file again is safe. Each",
			"-- change to an existing table takes a lock that is held only for a",
			"-- moment (no table is rewritten or read under it); `relay-cli migrate`",
			"-- runs this file under a short lock_timeout and tries again when a lock",
			"-- is not free in time.",
		}
		if strings.Join(header, "\n") != strings.Join(want, "\n") {
			t.Errorf("migrate --print --table %s begins\n%s\nwant\n%s", table, strings.Join(header, "\n"), strings.Join(want, "\n"))
		}
	}
}

// Every index docs/migrating-from-open-outbox.md lists is one migrate
// --print builds CONCURRENTLY.
func TestMigratingGuideListsTheIndexesMigrateBuilds(t *testing.T) {
	t.Parallel()
	doc := readFile(t, "../../docs/migrating-from-open-outbox.md")
	out := ok(t, cmd{args: []string{"migrate", "--print", "--storage-url", unreachableURL}}.run(t)).stdout
	names := regexp.MustCompile("index(?:es)? ((?:`<table>_[a-z_]+_idx`(?:, )?)+)").FindAllStringSubmatch(doc, -1)
	listed := 0
	for _, n := range names {
		for _, idx := range regexp.MustCompile("`<table>(_[a-z_]+_idx)`").FindAllStringSubmatch(n[1], -1) {
			listed++
			name := schema.DefaultTable + idx[1]
			if !strings.Contains(out, `CREATE INDEX CONCURRENTLY IF NOT EXISTS "`+name+`" ON`) {
				t.Errorf("migrate --print does not build index %s the guide lists", name)
			}
		}
	}
	if listed < 8 {
		t.Errorf("found %d indexes in the guide's table, want the 8 or more the schema creates", listed)
	}
}

func TestMigratePrintWritesSQLAndChangesNothing(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	name := newTableName(tb)
	r := ok(t, cmd{args: []string{"migrate", "--print", "--storage-url", pgtest.URL(), "--table", name}}.run(t))
	schemaName, _, _ := strings.Cut(name, ".")
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "` + schemaName + `"."fresh_outbox"`, "CREATE INDEX CONCURRENTLY IF NOT EXISTS", "pg_notify"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate --print does not contain %q:\n%s", want, r.stdout)
		}
	}
	if tableExists(t, tb, name) {
		t.Fatal("migrate --print created the table")
	}
	// Printing needs no database at all.
	r = ok(t, cmd{args: []string{"migrate", "--print", "--storage-url", unreachableURL}}.run(t))
	if !strings.Contains(r.stdout, "CREATE TABLE") || strings.Contains(r.stdout+r.stderr, secret) {
		t.Errorf("migrate --print against an unreachable database:\n%s", r)
	}
}
