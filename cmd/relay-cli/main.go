// Command relay-cli is the operator's tool for the outbox table: it applies
// the schema and, in later commands, inspects and maintains the table.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/redact"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args, os.Stdout, os.Stderr))
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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, args)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "relay-cli: %s\n", redact.URL(err.Error()))
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:            "relay-cli",
		Usage:           "inspect and maintain an Outbox Relay table",
		Version:         version,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "storage-url",
				Usage:   "PostgreSQL URL of the database holding the outbox table",
				EnvVars: []string{"STORAGE_URL"},
				Value:   "postgres://postgres@localhost:5432/postgres?sslmode=disable",
			},
			&cli.StringFlag{
				Name:    "table",
				Usage:   "outbox table name, table or schema.table",
				EnvVars: []string{"STORAGE_TABLE_NAME"},
				Value:   schema.DefaultTable,
			},
		},
		// Errors are printed once, by run, with the right exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(stderr, "relay-cli: unknown command %q; run relay-cli --help\n", name)
			os.Exit(exitUsage)
		},
		Commands: []*cli.Command{
			migrateCommand(),
		},
	}
}

// openStore opens the table named by the global flags. It does not connect.
func openStore(c *cli.Context) (*postgres.Store, error) {
	if _, err := schema.ParseTable(c.String("table")); err != nil {
		return nil, usagef("--table: %w", err)
	}
	raw := storage.URLWithTable(c.String("storage-url"), c.String("table"))
	if err := storage.Check(raw); err != nil {
		return nil, usagef("--storage-url: %w", err)
	}
	store, err := postgres.Open(c.Context, raw)
	if err != nil {
		return nil, usagef("--storage-url: %w", err)
	}
	return store, nil
}

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "create the outbox table, its indexes and notify trigger (idempotent)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "print", Usage: "print the SQL instead of applying it"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("migrate takes no arguments, got %q", c.Args().First())
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			if c.Bool("print") {
				_, err := fmt.Fprint(c.App.Writer, store.SchemaSQL())
				return err
			}
			res, err := store.Migrate(c.Context)
			if err != nil {
				return err
			}
			for _, obj := range res.Created {
				fmt.Fprintf(c.App.Writer, "created  %s\n", obj)
			}
			for _, obj := range res.Existed {
				fmt.Fprintf(c.App.Writer, "exists   %s\n", obj)
			}
			fmt.Fprintf(c.App.Writer, "table %s is ready (%d created, %d already existed)\n",
				store.Table(), len(res.Created), len(res.Existed))
			return nil
		},
	}
}
