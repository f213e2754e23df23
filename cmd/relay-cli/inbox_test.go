package main

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/inbox"
)

// inboxDB is a schema of the test's own holding an inbox table named
// schema.inbox, with db open on the server.
type inboxDB struct {
	db    *sql.DB
	box   *inbox.Inbox
	table string
}

func newInboxDB(t *testing.T, create bool) inboxDB {
	t.Helper()
	schemaName, _, _ := strings.Cut(pgtest.New(t).Name, ".")
	db, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	table := schemaName + ".inbox"
	box, err := inbox.New(inbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if create {
		if _, err := box.CreateTable(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	return inboxDB{db: db, box: box, table: table}
}

// record applies n events for consumer, stamped hoursAgo hours ago.
func (d inboxDB) record(t *testing.T, consumer string, n, hoursAgo int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%dh-%d", hoursAgo, i)
		if _, err := d.box.Process(ctx, d.db, consumer, id, func(*sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	_, err := d.db.Exec(fmt.Sprintf("UPDATE %s SET processed_at = now() - interval '%d hours' WHERE consumer = $1 AND event_id LIKE '%dh-%%'",
		d.table, hoursAgo, hoursAgo), consumer)
	if err != nil {
		t.Fatal(err)
	}
}

func (d inboxDB) count(t *testing.T) int {
	t.Helper()
	var n int
	if err := d.db.QueryRow("SELECT count(*) FROM " + d.table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func inboxCLI(t *testing.T, d inboxDB, args ...string) result {
	t.Helper()
	return cmd{args: append(args, "--storage-url", pgtest.URL(), "--inbox-table", d.table)}.run(t)
}

func TestMigrateInboxCreatesThenFindsTheTable(t *testing.T) {
	t.Parallel()
	d := newInboxDB(t, false)
	first := ok(t, inboxCLI(t, d, "migrate", "--inbox"))
	for _, want := range []string{"created  table inbox", "created  index inbox_processed_at_idx", "inbox table " + d.table + " is ready (2 created, 0 already existed)"} {
		if !strings.Contains(first.stdout, want) {
			t.Errorf("first migrate --inbox does not say %q:\n%s", want, first)
		}
	}
	if err := d.box.Check(ctx, d.db); err != nil {
		t.Fatalf("after migrate --inbox: %v", err)
	}
	js := decode[struct {
		Table   string   `json:"table"`
		Created []string `json:"created"`
		Existed []string `json:"existed"`
	}](t, ok(t, inboxCLI(t, d, "migrate", "--inbox", "--json")))
	if js.Table != d.table || js.Created == nil || len(js.Created) != 0 ||
		!slices.Equal(js.Existed, []string{"table inbox", "index inbox_processed_at_idx"}) {
		t.Errorf("second migrate --inbox --json = %+v, want nothing created ([]) and both existing", js)
	}
	if strings.Contains(first.stdout, "openoutbox_events") {
		t.Errorf("migrate --inbox touched the outbox table:\n%s", first)
	}
}

// --print needs no database: the URL points nowhere.
func TestMigrateInboxPrint(t *testing.T) {
	t.Parallel()
	r := ok(t, cmd{args: []string{"migrate", "--inbox", "--print", "--inbox-table", "app.billing_inbox", "--storage-url", unreachableURL}}.run(t))
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "app"."billing_inbox"`, `CREATE INDEX IF NOT EXISTS "billing_inbox_processed_at_idx"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate --inbox --print lacks %q:\n%s", want, r)
		}
	}
	if strings.Contains(r.stdout, "openoutbox_events") {
		t.Errorf("migrate --inbox --print shows the outbox table:\n%s", r)
	}
}

func TestInboxPruneDeletesOldRecordsInBatches(t *testing.T) {
	t.Parallel()
	d := newInboxDB(t, true)
	d.record(t, "billing", 5, 72)
	d.record(t, "billing", 2, 1)
	d.record(t, "shipping", 3, 72)

	dry := ok(t, inboxCLI(t, d, "inbox", "prune", "--older-than", "2d", "--dry-run"))
	if !strings.Contains(dry.stdout, "would delete 8 inbox records of every consumer's with processed_at older than 2d") {
		t.Errorf("dry run:\n%s", dry)
	}
	if n := d.count(t); n != 10 {
		t.Fatalf("a dry run deleted: %d records left, want 10", n)
	}

	r := ok(t, inboxCLI(t, d, "inbox", "prune", "--older-than", "2d", "--consumer", "billing", "--batch-size", "2"))
	if !strings.Contains(r.stdout, `deleted 5 inbox records of consumer "billing"'s with processed_at older than 2d (3 batches)`) {
		t.Errorf("prune --consumer billing:\n%s", r)
	}
	if n := d.count(t); n != 5 {
		t.Fatalf("%d records left, want 2 new billing and 3 shipping", n)
	}

	js := decode[struct {
		Table            string  `json:"table"`
		Consumer         *string `json:"consumer"`
		DryRun           bool    `json:"dry_run"`
		OlderThanSeconds float64 `json:"older_than_seconds"`
		Deleted          int64   `json:"deleted"`
		Batches          int     `json:"batches"`
	}](t, ok(t, inboxCLI(t, d, "inbox", "prune", "--older-than", "2d", "--json")))
	if js.Table != d.table || js.Consumer != nil || js.DryRun || js.OlderThanSeconds != 2*86400 || js.Deleted != 3 || js.Batches != 1 {
		t.Errorf("prune --json = %+v", js)
	}
	if n := d.count(t); n != 2 {
		t.Fatalf("%d records left, want the 2 new billing ones", n)
	}
}

// Progress goes to stderr only on a terminal, as for prune.
func TestInboxPruneShowsProgressOnATerminal(t *testing.T) {
	t.Parallel()
	d := newInboxDB(t, true)
	d.record(t, "billing", 5, 72)
	terminal := openPTY(t)
	screen := make(chan string)
	go func() {
		var b strings.Builder
		buf := make([]byte, 1024)
		for {
			n, err := terminal.master.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				screen <- b.String()
				return
			}
		}
	}()
	x, cancel := cmd{args: []string{"inbox", "prune", "--older-than", "1d", "--batch-size", "2",
		"--storage-url", pgtest.URL(), "--inbox-table", d.table}}.start(t)
	defer cancel()
	var stdout strings.Builder
	x.Stdout, x.Stderr = &stdout, terminal.slave
	code := exitCode(t, x.Run())
	terminal.slave.Close()
	shown := <-screen
	if code != 0 || !strings.Contains(stdout.String(), "deleted 5 inbox records") {
		t.Fatalf("inbox prune on a terminal exited %d:\n%s\n%s", code, stdout.String(), shown)
	}
	for _, want := range []string{"pruning inbox records: 2 deleted", "pruning inbox records: 4 deleted", "pruning inbox records: 5 deleted"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the terminal did not show %q:\n%q", want, shown)
		}
	}
	if strings.Contains(stdout.String(), "pruning") {
		t.Errorf("progress went to stdout:\n%s", stdout.String())
	}
}

func TestInboxPruneOfAMissingTableSaysToMigrate(t *testing.T) {
	t.Parallel()
	d := newInboxDB(t, false)
	r := inboxCLI(t, d, "inbox", "prune", "--older-than", "30d")
	if r.code != 1 || !strings.Contains(r.stderr, "relay-cli migrate --inbox") {
		t.Fatalf("want exit code 1 and a hint to run migrate --inbox:\n%s", r)
	}
}

// Mistakes in the command line exit 2 before any connection is tried.
// The inbox commands work on MySQL/MariaDB through the same storage
// driver as the outbox commands.
func TestInboxCommandsOnMariaDB(t *testing.T) {
	t.Parallel()
	my := mysqltest.New(t)
	database, _, _ := strings.Cut(my.Name, ".")
	box, err := inbox.New(inbox.Config{Dialect: inbox.MySQL, Table: database + ".inbox"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) result {
		return cmd{args: append(args, "--storage-url", mysqltest.DatabaseURL(database), "--inbox-table", database+".inbox")}.run(t)
	}
	r := ok(t, run("migrate", "--inbox"))
	if !strings.Contains(r.stdout, "created  table inbox") {
		t.Fatalf("migrate --inbox on MariaDB:\n%s", r)
	}
	db := mysqltest.Admin(t)
	if err := box.Check(ctx, db); err != nil {
		t.Fatalf("after migrate --inbox: %v", err)
	}
	for i := range 3 {
		if _, err := box.Process(ctx, db, "billing", fmt.Sprint(i), func(*sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("UPDATE " + database + ".inbox SET processed_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY"); err != nil {
		t.Fatal(err)
	}
	r = ok(t, run("inbox", "prune", "--older-than", "1d"))
	var left int
	if err := db.QueryRow("SELECT count(*) FROM " + database + ".inbox").Scan(&left); err != nil || left != 0 {
		t.Fatalf("after inbox prune: %d records left (%v); output:\n%s", left, err, r)
	}
	if p := ok(t, run("migrate", "--inbox", "--print")); !strings.Contains(p.stdout, "VARBINARY") {
		t.Errorf("migrate --inbox --print on a mysql:// URL does not print MySQL's DDL:\n%s", p)
	}
}

func TestInboxUsageErrorsExit2BeforeConnecting(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"inbox"}, "inbox needs a subcommand"},
		{"unknown subcommand", []string{"inbox", "vacuum"}, `unknown inbox subcommand "vacuum"`},
		{"extra argument", []string{"inbox", "prune", "now", "--older-than", "7d"}, "takes no arguments"},
		{"without --older-than", []string{"inbox", "prune"}, "inbox prune needs --older-than"},
		{"bad duration", []string{"inbox", "prune", "--older-than", "30 days"}, "invalid duration"},
		{"negative duration", []string{"inbox", "prune", "--older-than", "-1d"}, "invalid duration"},
		{"batch size zero", []string{"inbox", "prune", "--older-than", "30d", "--batch-size", "0"}, "--batch-size must be"},
		{"empty consumer", []string{"inbox", "prune", "--older-than", "30d", "--consumer", ""}, "--consumer must be"},
		{"invalid inbox table", []string{"inbox", "prune", "--older-than", "30d", "--inbox-table", "inbox; DROP TABLE x"}, "invalid table name"},
		{"unknown scheme", []string{"inbox", "prune", "--older-than", "30d", "--storage-url", "oracle://op:" + secret + "@db/x"}, "unknown storage scheme"},
		{"inbox table without --inbox", []string{"migrate", "--inbox-table", "x"}, "--inbox-table needs --inbox"},
		{"migrate --inbox with a bad table", []string{"migrate", "--inbox", "--inbox-table", "A.B.C"}, "invalid table name"},
		{"migrate --inbox --print --json", []string{"migrate", "--inbox", "--print", "--json"}, "cannot be combined"},
		{"migrate --inbox --plan", []string{"migrate", "--inbox", "--plan"}, "--plan applies to the outbox table"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := c.args
			if !slices.Contains(args, "--storage-url") {
				args = append([]string{"--storage-url", unreachableURL}, args...)
			}
			r := cmd{args: args}.run(t)
			if r.code != 2 {
				t.Fatalf("want exit code 2:\n%s", r)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr does not say %q:\n%s", c.want, r)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("output contains the password:\n%s", r)
			}
		})
	}
}

func TestInboxUnreachableDatabaseExits1WithoutThePassword(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"migrate", "--inbox"}, {"inbox", "prune", "--older-than", "30d"}} {
		r := cmd{args: append(args, "--storage-url", unreachableURL)}.run(t)
		if r.code != 1 || !strings.Contains(r.stderr, "cannot reach PostgreSQL at 127.0.0.1:1") {
			t.Errorf("relay-cli %v: want exit code 1 and 'cannot reach PostgreSQL':\n%s", args, r)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("relay-cli %v: output contains the password:\n%s", args, r)
		}
	}
}
