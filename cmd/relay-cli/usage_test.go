package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Usage errors are found before any connection is tried: the URL points at a
// port nothing listens on, so a command that got as far as the database
// would exit 1, not 2.
func TestUsageErrorsExit2BeforeConnecting(t *testing.T) {
	t.Parallel()
	const id = "0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no such command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"help for no such command", []string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{"unknown global flag", []string{"--colour", "stats"}, "flag provided but not defined"},
		{"unknown command flag", []string{"stats", "--colour"}, "flag provided but not defined"},
		{"flag without its value", []string{"list", "--limit"}, "flag needs an argument"},
		{"arguments to a command that takes none", []string{"stats", "extra"}, "stats takes no arguments"},
		{"invalid table name", []string{"stats", "--table", "events; DROP TABLE users"}, "invalid table name"},
		{"unknown URL scheme", []string{"stats", "--storage-url", "oracle://op:" + secret + "@db/x"}, "unknown storage scheme"},
		{"MySQL URL without a database", []string{"stats", "--storage-url", "mysql://op:" + secret + "@127.0.0.1:1/"}, "names no database"},
		{"MySQL option the driver sets", []string{"stats", "--storage-url", "mysql://op:" + secret + "@127.0.0.1:1/x?parseTime=false"}, "sets parseTime itself"},
		{"malformed URL", []string{"stats", "--storage-url", "postgres://op:" + secret + "@[::1"}, "malformed"},

		{"migrate --print with --json", []string{"migrate", "--print", "--json"}, "cannot be combined"},
		{"migrate --partition-by week", []string{"migrate", "--partition-by", "week"}, "--partition-by must be day or hour"},
		{"migrate --partition-by with --inbox", []string{"migrate", "--inbox", "--partition-by", "day"}, "not to --inbox"},
		{"migrate --partition-by on MySQL", []string{"migrate", "--partition-by", "day", "--storage-url", "mysql://op:" + secret + "@127.0.0.1:1/x"}, "PostgreSQL only"},
		{"partitions on MySQL", []string{"partitions", "--storage-url", "mysql://op:" + secret + "@127.0.0.1:1/x"}, "PostgreSQL only"},
		{"partitions --ahead without --maintain", []string{"partitions", "--ahead", "1d"}, "--ahead needs --maintain"},
		{"partitions --maintain bad ahead", []string{"partitions", "--maintain", "--ahead", "soon"}, "--ahead: invalid duration"},
		{"partitions --maintain bad retention", []string{"partitions", "--maintain", "--dead-retention", "-1d"}, "--dead-retention: invalid duration"},
		{"partitions with an argument", []string{"partitions", "x"}, "partitions takes no arguments"},

		{"stats watch interval not a duration", []string{"stats", "--watch", "soon"}, `invalid duration "soon"`},
		{"stats watch interval too short", []string{"stats", "--watch", "1ms"}, "--watch must be at least"},
		{"stats top zero", []string{"stats", "--top", "0"}, "--top must be at least 1"},

		{"prune without --older-than", []string{"prune"}, "prune needs --older-than"},
		{"prune with both kinds of age", []string{"prune", "--older-than", "7d", "--dead-age", "30d"}, "either --older-than"},
		{"prune --status with per-status ages", []string{"prune", "--status", "all", "--delivered-age", "7d"}, "--status goes with --older-than"},
		{"prune with a bad --dead-age", []string{"prune", "--dead-age", "-30d"}, "--dead-age: invalid duration"},
		{"prune bad duration", []string{"prune", "--older-than", "7x"}, `invalid duration "7x"`},
		{"prune number without unit", []string{"prune", "--older-than", "7"}, "missing unit"},
		{"prune negative duration", []string{"prune", "--older-than", "-7d"}, "invalid duration"},
		{"prune pending rows", []string{"prune", "--older-than", "7d", "--status", "pending"}, "--status must be delivered, dead or all"},
		{"prune unknown status", []string{"prune", "--older-than", "7d", "--status", "old"}, "--status must be"},
		{"prune batch size zero", []string{"prune", "--older-than", "7d", "--batch-size", "0"}, "--batch-size must be"},
		{"prune batch size not a number", []string{"prune", "--older-than", "7d", "--batch-size", "many"}, "invalid value"},

		{"retry-dead bad id", []string{"retry-dead", "--id", "42"}, `"42" is not a UUID`},
		{"retry-dead bad since", []string{"retry-dead", "--since", "yesterday"}, "neither a duration"},
		{"retry-dead empty event type", []string{"retry-dead", "--event-type", ""}, "--event-type must not be empty"},
		{"retry-dead negative limit", []string{"retry-dead", "--event-type", "x", "--limit", "-1"}, "--limit must not be negative"},
		{"retry-dead without filter or --yes off a terminal", []string{"retry-dead"}, "--yes"},
		{"replay-dead without filter or --yes off a terminal", []string{"replay-dead", "--limit", "5"}, "--yes"},

		{"list unknown status", []string{"list", "--status", "sleeping"}, "--status must be pending, delivering, delivered or dead"},
		{"list limit zero", []string{"list", "--limit", "0"}, "--limit must be at least 1"},

		{"show without an id", []string{"show"}, "show takes one EVENT_ID"},
		{"show with two ids", []string{"show", id, id}, "show takes one EVENT_ID"},
		{"show bad id", []string{"show", "not-a-uuid"}, `"not-a-uuid" is not an event id`},

		{"emit without type", []string{"emit"}, "emit needs --type"},
		{"emit payload and payload file", []string{"emit", "--type", "t", "--payload", "{}", "--payload-file", "x"}, "cannot be combined"},
		{"emit payload not JSON", []string{"emit", "--type", "t", "--payload", "{oops"}, "not valid JSON"},
		{"emit header without value", []string{"emit", "--type", "t", "--header", "novalue"}, "want KEY=VALUE"},
		{"emit header twice", []string{"emit", "--type", "t", "--header", "a=1", "--header", "a=2"}, "given twice"},
		{"emit count zero", []string{"emit", "--type", "t", "--count", "0"}, "--count must be"},
		{"emit bad delay", []string{"emit", "--type", "t", "--available-in", "later"}, "invalid duration"},
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

// A mistyped flag is named as it was typed (Go's flag package writes every
// name with one dash, so --jsn came out as "-jsn"), with the flag it most
// likely meant, and exits 2.
func TestFlagErrorsNameTheFlagAsTyped(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"list", "--jsn"}, "flag provided but not defined: --jsn; did you mean --json?"},
		{[]string{"list", "-jsn"}, "flag provided but not defined: -jsn; did you mean --json?"},
		{[]string{"list", "--jsn=true"}, "flag provided but not defined: --jsn; did you mean --json?"},
		{[]string{"show", "--jsn", "0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"}, "flag provided but not defined: --jsn; did you mean --json?"},
		{[]string{"--tabel", "x", "stats"}, "flag provided but not defined: --tabel; did you mean --table?"},
		{[]string{"stats", "--storage_url", "x"}, "flag provided but not defined: --storage_url; did you mean --storage-url?"},
		{[]string{"retry-dead", "--eror-contains", "x"}, "flag provided but not defined: --eror-contains; did you mean --error-contains?"},
		{[]string{"list", "--stat", "dead"}, "flag provided but not defined: --stat; did you mean --status?"},
		{[]string{"prune", "--hlep"}, "flag provided but not defined: --hlep; did you mean --help?"},
		{[]string{"stats", "--colour"}, "flag provided but not defined: --colour; relay-cli stats --help lists the flags"},
		{[]string{"--colour", "stats"}, "flag provided but not defined: --colour; relay-cli --help lists the flags"},
		{[]string{"list", "--limit"}, "flag needs an argument: --limit"},
		{[]string{"list", "-limit"}, "flag needs an argument: -limit"},
		{[]string{"prune", "--older-than", "7d", "--batch-size", "many"}, `invalid value "many" for flag --batch-size`},
		{[]string{"list", "--json=maybe"}, `invalid boolean value "maybe" for --json`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			r := cmd{args: c.args, env: []string{"STORAGE_URL=" + unreachableURL}}.run(t)
			if r.code != 2 {
				t.Fatalf("want exit code 2:\n%s", r)
			}
			if got := strings.TrimSpace(r.stderr); !strings.HasPrefix(got, "relay-cli: "+c.want) {
				t.Errorf("stderr %q, want it to begin %q", got, "relay-cli: "+c.want)
			}
		})
	}
}

// A bad value is reported under the name the operator set it by: the
// environment variable when it came from there, the flag when it was typed
// (which wins over the variable).
func TestBadValuesNameWhereTheyCameFrom(t *testing.T) {
	t.Parallel()
	const oracle = "oracle://op:" + secret + "@db/x"
	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"STORAGE_URL", []string{"stats"}, []string{"STORAGE_URL=" + oracle}, "STORAGE_URL: unknown storage scheme"},
		{"--storage-url", []string{"stats", "--storage-url", oracle}, nil, "--storage-url: unknown storage scheme"},
		{"--storage-url over STORAGE_URL", []string{"stats", "--storage-url", oracle}, []string{"STORAGE_URL=" + unreachableURL}, "--storage-url: unknown storage scheme"},
		{"STORAGE_URL without a scheme", []string{"stats"}, []string{"STORAGE_URL=localhost:5432/db"}, `STORAGE_URL: storage URL "localhost:5432/db" has no scheme`},
		{"STORAGE_TABLE_NAME", []string{"stats"}, []string{"STORAGE_URL=" + unreachableURL, "STORAGE_TABLE_NAME=a;b"}, "STORAGE_TABLE_NAME: invalid table name"},
		{"--table", []string{"stats", "--table", "a;b"}, []string{"STORAGE_URL=" + unreachableURL}, "--table: invalid table name"},
		{"PUBLISHER_URL", []string{"setup-broker", "--event-type", "x"}, []string{"PUBLISHER_URL=localhost:9092"}, `PUBLISHER_URL: publisher URL "localhost:9092" has no scheme`},
		{"--publisher-url", []string{"setup-broker", "--event-type", "x", "--publisher-url", "localhost:9092"}, []string{"PUBLISHER_URL=nats://127.0.0.1:1"}, `--publisher-url: publisher URL "localhost:9092" has no scheme`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := cmd{args: c.args, env: c.env}.run(t)
			if r.code != 2 {
				t.Fatalf("want exit code 2:\n%s", r)
			}
			if got := strings.TrimSpace(r.stderr); !strings.HasPrefix(got, "relay-cli: "+c.want) {
				t.Errorf("stderr %q, want it to begin %q", got, "relay-cli: "+c.want)
			}
			if strings.Contains(r.stderr, secret) {
				t.Errorf("stderr contains the password:\n%s", r)
			}
		})
	}
}

// A mistyped command, like a mistyped flag, exits 2 with the command it
// most likely meant: one typing mistake away (stat), or the only command it
// begins (retry). A word close to none gets no guess.
func TestMisspeltCommandsSuggestTheCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"stat"}, `unknown command "stat"; did you mean stats?`},
		{[]string{"retry"}, `unknown command "retry"; did you mean retry-dead?`},
		{[]string{"retry", "--yes"}, `unknown command "retry"; did you mean retry-dead?`},
		{[]string{"--table", "x", "stat"}, `unknown command "stat"; did you mean stats?`},
		{[]string{"migarte"}, `unknown command "migarte"; did you mean migrate?`},
		{[]string{"help", "stat"}, `no help for unknown command "stat"; did you mean stats?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"; run relay-cli --help`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			r := cmd{args: c.args, env: []string{"STORAGE_URL=" + unreachableURL}}.run(t)
			if r.code != 2 {
				t.Fatalf("want exit code 2:\n%s", r)
			}
			if got := strings.TrimSpace(r.stderr); !strings.HasPrefix(got, "relay-cli: "+c.want) {
				t.Errorf("stderr %q, want it to begin %q", got, "relay-cli: "+c.want)
			}
		})
	}
}

func TestClosestFlag(t *testing.T) {
	t.Parallel()
	flags := listCommand().Flags
	for name, want := range map[string]string{
		"jsn": "json", "josn": "json", "jason": "json", "limt": "limit", "stauts": "status",
		"event_type": "event-type", "eventtype": "event-type", "event": "event-type",
		"help": "help", "x": "", "colour": "", "verbose": "", "lim": "limit", "j": "",
	} {
		if got := closestFlag(name, flags); got != want {
			t.Errorf("closestFlag(%q) = %q, want %q", name, got, want)
		}
	}
}

// Every command's help says what it does at length, not just its one line.
func TestEveryCommandHelpHasADescription(t *testing.T) {
	t.Parallel()
	for _, c := range newApp(nil, nil, nil).Commands {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			if c.Usage == "" || c.Description == "" {
				t.Fatalf("command %s has Usage %q and Description %q; it needs both", c.Name, c.Usage, c.Description)
			}
			r := cmd{args: []string{c.Name, "--help"}}.run(t)
			firstLine, _, _ := strings.Cut(c.Description, "\n")
			if r.code != 0 || !strings.Contains(r.stdout, "DESCRIPTION:") || !strings.Contains(r.stdout, firstLine) ||
				!strings.Contains(r.stdout, c.Usage) {
				t.Errorf("relay-cli %s --help does not show its usage and description:\n%s", c.Name, r)
			}
		})
	}
}

func TestUnreachableDatabaseExits1WithoutThePassword(t *testing.T) {
	t.Parallel()
	const id = "0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
	urls := map[string]string{
		"password in user info": unreachableURL,
		"password parameter":    "postgres://operator@127.0.0.1:1/outbox?sslmode=disable&connect_timeout=5&password=" + secret,
	}
	commands := [][]string{
		{"migrate"},
		{"stats"},
		{"stats", "--watch", "1s"},
		{"prune", "--older-than", "7d"},
		{"prune", "--older-than", "7d", "--dry-run"},
		{"retry-dead", "--yes"},
		{"retry-dead", "--event-type", "x", "--dry-run"},
		{"list"},
		{"show", id},
		{"emit", "--type", "t"},
	}
	for urlName, url := range urls {
		for _, args := range commands {
			t.Run(urlName+"/"+strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				r := cmd{args: append(slices.Clone(args), "--storage-url", url, "--json")}.run(t)
				if r.code != 1 {
					t.Fatalf("want exit code 1:\n%s", r)
				}
				if !strings.Contains(r.stderr, "cannot reach PostgreSQL at 127.0.0.1:1") {
					t.Errorf("stderr does not say the database is unreachable:\n%s", r)
				}
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("output contains the password:\n%s", r)
				}
			})
		}
	}
}

func TestMissingTableExits1AndSaysToMigrate(t *testing.T) {
	t.Parallel()
	r := cmd{args: []string{"stats", "--storage-url", pgtest.URL(), "--table", "no_such_schema_q.outbox"}}.run(t)
	if r.code != 1 || !strings.Contains(r.stderr, "relay-cli migrate") {
		t.Fatalf("want exit code 1 and a hint to run migrate:\n%s", r)
	}
	// The hint names the database looked in, so that migrate is run there.
	if !strings.Contains(r.stderr, "in PostgreSQL at ") || !strings.Contains(r.stderr, " database ") {
		t.Errorf("the error does not name the database it looked in:\n%s", r)
	}
	if strings.Contains(r.stderr, "STORAGE_URL is not set") {
		t.Errorf("a --storage-url given is not the default:\n%s", r)
	}
}

// Without STORAGE_URL or --storage-url, relay-cli says which default it
// uses before it connects, and its errors name that database.
func TestDefaultStorageURLIsAnnounced(t *testing.T) {
	t.Parallel()
	r := cmd{args: []string{"stats", "--table", "no_such_outbox_q"}}.run(t)
	for _, w := range []string{
		"STORAGE_URL is not set and no --storage-url given: using the default postgres://postgres@localhost:5432/postgres",
		`table no_such_outbox_q in PostgreSQL at localhost:5432 database "postgres"`,
	} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, r)
		}
	}
}

func TestHelpAndVersionExit0(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "prune"}, {"prune", "--help"}, {"--version"}, {}} {
		// Help shows defaults and variable names, never the values.
		r := cmd{args: args, env: []string{"STORAGE_URL=" + unreachableURL}}.run(t)
		if r.code != 0 || r.stdout == "" {
			t.Errorf("relay-cli %v:\n%s", args, r)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("relay-cli %v shows the password from STORAGE_URL:\n%s", args, r)
		}
	}
	r := cmd{args: []string{"--help"}}.run(t)
	for _, name := range []string{"migrate", "stats", "prune", "retry-dead", "list", "show", "emit", "--storage-url", "--table"} {
		if !strings.Contains(r.stdout, name) {
			t.Errorf("--help does not mention %s:\n%s", name, r.stdout)
		}
	}
	r = cmd{args: []string{"list", "--help"}}.run(t)
	for _, name := range []string{"--storage-url", "--table", "--json", "STORAGE_URL", "STORAGE_TABLE_NAME"} {
		if !strings.Contains(r.stdout, name) {
			t.Errorf("list --help does not mention %s:\n%s", name, r.stdout)
		}
	}
}

// The table and URL come from flags before or after the command, or from
// the environment; a flag wins over the environment.
func TestGlobalFlagsAnywhereAndFromTheEnvironment(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 3, "e")
	wrongEnv := []string{"STORAGE_URL=" + unreachableURL, "STORAGE_TABLE_NAME=no_such_table"}
	cases := map[string]cmd{
		"before the command": {args: []string{"--storage-url", pgtest.URL(), "--table", tb.Name, "stats", "--json"}},
		"after the command":  {args: []string{"stats", "--json", "--storage-url", pgtest.URL(), "--table", tb.Name}},
		"with =":             {args: []string{"--table=" + tb.Name, "stats", "--storage-url=" + pgtest.URL(), "--json"}},
		"environment": {args: []string{"stats", "--json"},
			env: []string{"STORAGE_URL=" + pgtest.URL(), "STORAGE_TABLE_NAME=" + tb.Name}},
		"flags over environment":        {args: []string{"stats", "--json", "--storage-url", pgtest.URL(), "--table", tb.Name}, env: wrongEnv},
		"flags before over environment": {args: []string{"--storage-url", pgtest.URL(), "--table", tb.Name, "stats", "--json"}, env: wrongEnv},
		"table in the URL wins": {args: []string{"stats", "--json", "--table", "no_such_table"},
			env: []string{"STORAGE_URL=" + storage.URLWithTable(pgtest.URL(), tb.Name)}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := ok(t, c.run(t))
			st := decode[statsJSON](t, r)
			if st.Table != tb.Name || st.Counts.Pending != 3 {
				t.Errorf("stats of table %s with %d pending, want %s with 3", st.Table, st.Counts.Pending, tb.Name)
			}
		})
	}
}

func TestReorderArgs(t *testing.T) {
	t.Parallel()
	app := newApp(nil, nil, nil)
	cases := []struct{ in, want string }{
		{"relay-cli stats", "relay-cli stats"},
		{"relay-cli --table x stats --json", "relay-cli stats --table x --json"},
		{"relay-cli --table=x --storage-url u stats", "relay-cli stats --table=x --storage-url u"},
		{"relay-cli show ID --json", "relay-cli show --json -- ID"},
		{"relay-cli show --json ID --table t", "relay-cli show --json --table t -- ID"},
		{"relay-cli show -- --weird", "relay-cli show -- --weird"},
		{"relay-cli list --limit -5", "relay-cli list --limit -5"},
		{"relay-cli retry-dead --id a --id b --yes", "relay-cli retry-dead --id a --id b --yes"},
		{"relay-cli replay-dead --event-type t", "relay-cli replay-dead --event-type t"},
		// Left alone for urfave/cli to handle or report.
		{"relay-cli --help stats", "relay-cli --help stats"},
		{"relay-cli --bogus stats", "relay-cli --bogus stats"},
		{"relay-cli frob --json", "relay-cli frob --json"},
		{"relay-cli --table x", "relay-cli --table x"},
	}
	for _, c := range cases {
		got := strings.Join(reorderArgs(app, strings.Fields(c.in)), " ")
		if got != c.want {
			t.Errorf("reorderArgs(%s)\n = %s\nwant %s", c.in, got, c.want)
		}
	}
}

// Every command and flag is documented in docs/operations.md.
func TestOperationsGuideDocumentsEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	doc := readFile(t, "../../docs/operations.md")
	app := newApp(nil, nil, nil)
	for _, c := range app.Commands {
		if !strings.Contains(doc, "relay-cli "+c.Name) {
			t.Errorf("docs/operations.md does not document relay-cli %s", c.Name)
		}
		for _, f := range c.Flags {
			if e, ok := f.(*envOnly); ok {
				// Not a flag: its variable is what to document.
				if !strings.Contains(doc, "`"+e.EnvVar+"`") {
					t.Errorf("docs/operations.md does not document %s's %s", c.Name, e.EnvVar)
				}
				continue
			}
			if _, isGlobal := map[string]bool{"storage-url": true, "table": true}[f.Names()[0]]; isGlobal {
				continue
			}
			if !strings.Contains(doc, "`--"+f.Names()[0]) {
				t.Errorf("docs/operations.md does not document %s --%s", c.Name, f.Names()[0])
			}
		}
		for _, alias := range c.Aliases {
			if !strings.Contains(doc, alias) {
				t.Errorf("docs/operations.md does not mention the alias %s", alias)
			}
		}
	}
	for _, g := range []string{"--storage-url", "--table", "STORAGE_URL", "STORAGE_TABLE_NAME", "CronJob"} {
		if !strings.Contains(doc, g) {
			t.Errorf("docs/operations.md does not mention %s", g)
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A misspelt variable of relay-cli's is named with the one meant, before
// anything else: STORAGE_URLL would leave relay-cli on the default database.
func TestMisspeltVariablesAreNamed(t *testing.T) {
	t.Parallel()
	r := cmd{args: []string{"migrate", "--print"}, env: []string{
		"STORAGE_URLL=" + pgtest.URL(), "CONSOLE_ADR=:9000", "CONSOLE_PASWORD=x", "BATCH_SIZE=100", "PGCONNECT_TIMEOUT=3",
		"CONSOLE_PASSWORD=y",
	}}.run(t)
	if r.code != 0 {
		t.Fatalf("migrate --print failed:\n%s", r)
	}
	for _, w := range []string{
		"relay-cli: STORAGE_URLL is set but is not a variable relay-cli reads, and is ignored; did you mean STORAGE_URL?",
		"did you mean CONSOLE_ADDR?",
		// An env-only setting is known as well as the flags' variables.
		"relay-cli: CONSOLE_PASWORD is set but is not a variable relay-cli reads, and is ignored; did you mean CONSOLE_PASSWORD?",
	} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, r)
		}
	}
	// The relay's settings, pgx's variables and CONSOLE_PASSWORD itself are
	// not relay-cli's slips.
	if n := strings.Count(r.stderr, "did you mean"); n != 3 {
		t.Errorf("%d variables named, want 3:\n%s", n, r)
	}
}

// README.md's table of relay-cli commands has one row for every command,
// so that a newcomer sees them all in one place.
func TestReadmeListsEveryCommand(t *testing.T) {
	t.Parallel()
	readme := readFile(t, "../../README.md")
	for _, c := range newApp(nil, nil, nil).Commands {
		if n := strings.Count(readme, "\n| `relay-cli "+c.Name+"` | "); n != 1 {
			t.Errorf("README.md's command table has %d rows for relay-cli %s, want 1", n, c.Name)
		}
	}
}
