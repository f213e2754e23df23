package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
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
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
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

// Upgrading a table made by an earlier version: migrate drops the index
// another now replaces, and says so.
func TestMigrateSaysWhatItDropped(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	name := newTableName(tb)
	args := []string{"migrate", "--storage-url", pgtest.URL(), "--table", name}
	ok(t, cmd{args: args}.run(t))
	// due_idx, as the releases before due_at_idx made it.
	tb.Exec(t, "CREATE INDEX fresh_outbox_due_idx ON "+name+" (available_at) WHERE status = 'PENDING' AND available_at > created_at")

	upgrade := ok(t, cmd{args: append(args, "--json")}.run(t))
	js := decode[struct {
		Created []string `json:"created"`
		Dropped []string `json:"dropped"`
	}](t, upgrade)
	if len(js.Created) != 0 || len(js.Dropped) != 1 || js.Dropped[0] != "index fresh_outbox_due_idx" {
		t.Errorf("migrate --json after an earlier version's index = %+v, want due_idx dropped and nothing created", js)
	}
	tb.Exec(t, "CREATE INDEX fresh_outbox_due_idx ON "+name+" (available_at) WHERE status = 'PENDING' AND available_at > created_at")
	text := ok(t, cmd{args: args}.run(t))
	if !strings.Contains(text.stdout, "dropped  index fresh_outbox_due_idx") || !strings.Contains(text.stdout, ", 1 dropped)") {
		t.Errorf("migrate does not say what it dropped:\n%s", text)
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
			"-- idempotent, and nothing is dropped but indexes of earlier versions that",
			"-- others replace: running this file again is safe.",
		}
		if strings.Join(header, "\n") != strings.Join(want, "\n") {
			t.Errorf("migrate --print --table %s begins\n%s\nwant\n%s", table, strings.Join(header, "\n"), strings.Join(want, "\n"))
		}
	}
}

// docs/migrating-from-open-outbox.md shows how to read the index
// definitions out of `migrate --print` (to build them CONCURRENTLY first):
// the command it gives must print every index the guide lists, with its
// definition.
func TestMigratingGuideCommandPrintsTheIndexDefinitions(t *testing.T) {
	t.Parallel()
	doc := readFile(t, "../../docs/migrating-from-open-outbox.md")
	m := regexp.MustCompile(`relay-cli migrate --print \| sed -n '/([^/]+)/,/([^/]+)/p'`).FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("the guide has no `relay-cli migrate --print | sed -n '/FROM/,/TO/p'` (update this test if it reads the definitions another way)")
	}
	from, to := m[1], m[2]
	for _, p := range []string{from, to} {
		// sed's basic regular expressions: these characters would make a
		// pattern more than a plain string.
		if strings.ContainsAny(p, `.*[]^$\`) {
			t.Fatalf("pattern %q is more than a plain string; teach this test to read it", p)
		}
	}
	r := ok(t, cmd{args: []string{"migrate", "--print", "--storage-url", unreachableURL}}.run(t))
	// What sed -n '/from/,/to/p' prints: from the first line holding from
	// through the next line holding to.
	var printed []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if len(printed) == 0 && !strings.Contains(line, from) {
			continue
		}
		printed = append(printed, line)
		if len(printed) > 1 && strings.Contains(line, to) {
			break
		}
	}
	out := strings.Join(printed, "\n")
	names := regexp.MustCompile("index(?:es)? ((?:`<table>_[a-z_]+_idx`(?:, )?)+)").FindAllStringSubmatch(doc, -1)
	listed := 0
	for _, n := range names {
		for _, idx := range regexp.MustCompile("`<table>(_[a-z_]+_idx)`").FindAllStringSubmatch(n[1], -1) {
			listed++
			name := schema.DefaultTable + idx[1]
			if !regexp.MustCompile(`\('` + name + `', \$d\$\(`).MatchString(out) {
				t.Errorf("the guide's command does not print index %s with its definition:\n%s", name, out)
			}
		}
	}
	if listed < 8 {
		t.Errorf("found %d indexes in the guide's table, want the 8 the schema creates", listed)
	}
}

func TestMigratePrintWritesSQLAndChangesNothing(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	name := newTableName(tb)
	r := ok(t, cmd{args: []string{"migrate", "--print", "--storage-url", pgtest.URL(), "--table", name}}.run(t))
	schemaName, _, _ := strings.Cut(name, ".")
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "` + schemaName + `"."fresh_outbox"`, "CREATE INDEX %I ON", "pg_notify"} {
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
