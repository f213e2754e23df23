// Command relay-cli is the operator's tool for the outbox table: it applies
// the schema (migrate), prepares the broker (setup-broker), shows what is
// waiting (stats, list, show), deletes finished rows (prune), lists and
// maintains a partitioned table's partitions (partitions), gives dead events
// another chance (retry-dead) and writes test events (emit). It is built to
// run from a shell, a cron job or a Kubernetes Job: results go to stdout (as
// JSON with --json), messages to stderr, and the exit code says what
// happened — 0 done, 1 runtime failure, 2 usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"unicode"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/outbox-relay/relay/internal/buildinfo"
	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/internal/spelling"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	_ "github.com/outbox-relay/relay/pkg/storage/mysql"
	_ "github.com/outbox-relay/relay/pkg/storage/postgres"
)

// version and commit are set at build time with -ldflags "-X
// main.version=... -X main.commit=..." (make build, the image); without
// them the version reads "dev" and the commit is what Go recorded.
var version, commit = "dev", ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks a mistake in the command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	warnEnvSlips(app, os.Environ(), stderr)
	reordered := reorderArgs(app, args)
	app.Metadata = map[string]any{argsKey: reordered}
	err := app.RunContext(ctx, reordered)
	if err == nil {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		err = explainFlagError(app, reordered, ue)
	}
	// Errors can quote the URL; redact scrubs any password left in them.
	fmt.Fprintf(stderr, "relay-cli: %s\n", redact.URL(err.Error()))
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

// flagProblem matches the errors of Go's flag package that name a flag.
// It writes the name with one dash whatever the user typed (--jsn becomes
// "-jsn"), which reads like a different flag.
var flagProblem = regexp.MustCompile(`^(flag provided but not defined: |flag needs an argument: |` +
	`invalid (?:boolean )?value "(?:[^"\\]|\\.)*" for (?:flag )?)-([^\s:=]+)`)

// explainFlagError rewrites a flag error to name the flag as it was typed
// and, for an unknown flag, suggests the flag it most likely meant.
func explainFlagError(app *cli.App, args []string, ue usageError) error {
	msg := ue.Error()
	m := flagProblem.FindStringSubmatch(msg)
	if m == nil {
		return ue
	}
	name := m[2]
	typed := "--" + name
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if n, _ := flagName(a); isFlagArg(a) && n == name {
			typed = a[:len(a)-len(strings.TrimLeft(a, "-"))] + name
			break
		}
	}
	msg = m[1] + typed + msg[len(m[0]):]
	if !strings.HasPrefix(m[1], "flag provided but not defined") {
		return usageError{errors.New(msg)}
	}
	// The error came from the command's flags when a command was named,
	// else from the global ones.
	flags, help := app.Flags, "relay-cli --help"
	if len(args) > 1 {
		if cmd := app.Command(args[1]); cmd != nil {
			flags, help = cmd.Flags, "relay-cli "+cmd.Name+" --help"
		}
	}
	if guess := closestFlag(name, flags); guess != "" {
		return usageError{fmt.Errorf("%s; did you mean --%s?", msg, guess)}
	}
	return usageError{fmt.Errorf("%s; %s lists the flags", msg, help)}
}

// closestFlag returns the flag name (or help) that name is most likely a
// slip of (spelling.Nearest).
func closestFlag(name string, flags []cli.Flag) string {
	names := []string{"help"}
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) >= 2 { // -h and -y: a one-letter flag is too easy to match
				names = append(names, n)
			}
		}
	}
	return spelling.Nearest(name, names)
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:  "relay-cli",
		Usage: "inspect and maintain an Outbox Relay table",
		Description: "Every command accepts --storage-url (STORAGE_URL) and --table (STORAGE_TABLE_NAME),\n" +
			"before or after its name. Exit codes: 0 done, 1 runtime failure, 2 usage error.\n" +
			"Durations take Go syntax plus d and w: 90s, 36h, 7d, 2w.",
		Version:         buildinfo.Describe(version, commit),
		Reader:          stdin,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// A comma is a legitimate part of a header value (emit --header).
		DisableSliceFlagSeparator: true,
		Flags:                     globalFlags(),
		// Errors are printed once, by run, with the right exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
		// The root action runs when no command matched: urfave/cli would
		// otherwise print a message and exit 0, or os.Exit where tests
		// cannot see it.
		Action: rootAction,
		Commands: []*cli.Command{
			migrateCommand(),
			grantsCommand(),
			statsCommand(),
			pruneCommand(),
			retryDeadCommand(),
			listCommand(),
			showCommand(),
			emitCommand(),
			inboxCommand(),
			partitionsCommand(),
			consoleCommand(),
		},
	}
	for _, cmd := range registered {
		app.Commands = append(app.Commands, cmd())
	}
	for _, cmd := range app.Commands {
		cmd.Flags = append(cmd.Flags, globalFlags()...)
		cmd.OnUsageError = onUsageError
		cmd.HideHelpCommand = true
	}
	return app
}

// registered are the commands whose files add them from init with
// register, so that a new command is one file.
var registered []func() *cli.Command

func register(cmd func() *cli.Command) { registered = append(registered, cmd) }

func onUsageError(_ *cli.Context, err error, _ bool) error { return usageError{err} }

func rootAction(c *cli.Context) error {
	if !c.Args().Present() {
		return cli.ShowAppHelp(c)
	}
	name := c.Args().First()
	if name == "help" {
		topic := c.Args().Get(1)
		if topic == "" {
			return cli.ShowAppHelp(c)
		}
		if c.App.Command(topic) == nil {
			return usagef("no help for %s", unknownCommand(c.App, topic))
		}
		return cli.ShowCommandHelp(c, topic)
	}
	return usageError{errors.New(unknownCommand(c.App, name))}
}

// unknownCommand says that name is no command of app and suggests the one
// it most likely meant (spelling.Nearest, as for flags): stat is stats,
// retry is retry-dead.
func unknownCommand(app *cli.App, name string) string {
	var names []string
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			names = append(names, cmd.Names()...)
		}
	}
	if guess := spelling.Nearest(name, names); guess != "" {
		return fmt.Sprintf("unknown command %q; did you mean %s? (relay-cli --help lists the commands)", name, guess)
	}
	return fmt.Sprintf("unknown command %q; run relay-cli --help", name)
}

// globalFlags are accepted by the app and by every command, so that
// `relay-cli stats --table x` works as well as `relay-cli --table x stats`.
func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "storage-url",
			Usage:   "URL of the database holding the outbox table (postgres://, mysql://)",
			EnvVars: []string{"STORAGE_URL"},
			Value:   storage.URLDefault,
		},
		&cli.StringFlag{
			Name:        "table",
			Usage:       "outbox table name, table or schema.table (a ?table= in the URL wins)",
			EnvVars:     []string{"STORAGE_TABLE_NAME"},
			DefaultText: "openoutbox_events",
		},
	}
}

func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "write the result as JSON"}
}

// reorderArgs lets flags follow a command's arguments (`show ID --json`)
// and global flags precede the command (`--table x stats`): Go's flag
// package, under urfave/cli v2, stops at the first argument, and a flag
// parsed before the command would be shadowed by the command's own default.
// Global flags are moved after the command name, the command's arguments
// after its flags, behind "--". Anything it does not recognise is left for
// urfave/cli to report.
func reorderArgs(app *cli.App, args []string) []string {
	i := 1
	var globals []string
	for i < len(args) && isFlagArg(args[i]) {
		name, inline := flagName(args[i])
		known, value := flagTakesValue(app.Flags, name)
		if !known {
			return args // --help, --version or a mistake
		}
		globals = append(globals, args[i])
		i++
		if value && !inline && i < len(args) {
			globals = append(globals, args[i])
			i++
		}
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return args
	}
	out := append([]string{args[0], args[i]}, globals...)
	var positional []string
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" {
			positional = append(positional, rest[j+1:]...)
			break
		}
		if !isFlagArg(a) {
			positional = append(positional, a)
			continue
		}
		out = append(out, a)
		name, inline := flagName(a)
		if _, value := flagTakesValue(cmd.Flags, name); value && !inline && j+1 < len(rest) {
			j++
			out = append(out, rest[j])
		}
	}
	if len(positional) > 0 {
		out = append(append(out, "--"), positional...)
	}
	return out
}

func isFlagArg(a string) bool { return len(a) > 1 && a[0] == '-' && a != "--" }

// flagName returns the name in -name, --name or --name=value, and whether
// the value is inline.
func flagName(a string) (name string, inline bool) {
	name = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	name, _, inline = strings.Cut(name, "=")
	return name, inline
}

func flagTakesValue(flags []cli.Flag, name string) (known, value bool) {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return true, !isBool
			}
		}
	}
	return false, false
}

// argsKey keys the command line, as run passes it to urfave/cli, in the
// app's Metadata, for settingName.
const argsKey = "args"

// settingName names where the value of the flag called name came from, for
// a message about that value: the flag when it is on the command line,
// else the environment variable that set it (STORAGE_URL for
// --storage-url), else the flag, whose default it is. An operator told
// "--storage-url: …" who never typed that flag looks in the wrong place.
func settingName(c *cli.Context, name string) string {
	args, _ := c.App.Metadata[argsKey].([]string)
	for _, a := range args[min(1, len(args)):] {
		if a == "--" {
			break
		}
		if n, _ := flagName(a); isFlagArg(a) && n == name {
			return "--" + name
		}
	}
	flags := c.App.Flags
	if c.Command != nil {
		flags = c.Command.Flags
	}
	for _, f := range flags {
		ef, ok := f.(interface{ GetEnvVars() []string })
		if !ok || !slices.Contains(f.Names(), name) {
			continue
		}
		for _, env := range ef.GetEnvVars() {
			if _, set := os.LookupEnv(env); set {
				return env
			}
		}
	}
	return "--" + name
}

// noArgs refuses positional arguments to a command that takes none.
func noArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("%s takes no arguments, got %q", c.Command.Name, c.Args().First())
	}
	return nil
}

// openStore opens the table named by the global flags through the driver
// the URL's scheme selects. It does not connect.
func openStore(c *cli.Context) (storage.Storage, error) {
	d, err := storage.Lookup(c.String("storage-url"))
	if err != nil {
		return nil, usagef("%s: %w", settingName(c, "storage-url"), err)
	}
	if t := c.String("table"); t != "" {
		if err := d.CheckTable(t); err != nil {
			return nil, usagef("%s: %w", settingName(c, "table"), err)
		}
	}
	store, err := storage.Open(c.Context, storage.URLWithTable(c.String("storage-url"), c.String("table")))
	if err != nil {
		return nil, usagef("%s: %w", settingName(c, "storage-url"), err)
	}
	// Said because `migrate` on the default creates a table in a database
	// the relay, configured elsewhere, may never look at.
	if !c.IsSet("storage-url") {
		fmt.Fprintf(c.App.ErrWriter, "relay-cli: STORAGE_URL is not set and no --storage-url given: using the default %s\n", redact.URL(storage.URLDefault))
	}
	return store, nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable is what every table goes through, so that they all look alike:
// tab-separated cells aligned in columns two spaces apart.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// isTerminal reports whether v is an *os.File open on a terminal. A
// character device alone is not enough: /dev/null, a cron job's usual
// stdin, is one too.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// parseStatus reads a status in any case.
func parseStatus(s string) (outbox.Status, bool) {
	st := outbox.Status(strings.ToUpper(strings.TrimSpace(s)))
	return st, st.Valid()
}

// printable replaces control characters (including newlines) with spaces,
// so that text from the table cannot break a table row or send escape
// sequences to the operator's terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// plural counts n things: "1 row", "2 rows", "1 batch", "3 batches".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	if strings.HasSuffix(thing, "ch") || strings.HasSuffix(thing, "s") {
		return fmt.Sprintf("%d %ses", n, thing)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
