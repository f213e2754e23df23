package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "create the outbox table and what the relay adds to it (idempotent)",
		Description: "Applies the embedded schema for the database STORAGE_URL names (PostgreSQL: the\n" +
			"table, its sequence, indexes and notify trigger, in one transaction; MySQL: the table\n" +
			"and its indexes) and says what it created and what already existed. Running it again\n" +
			"is safe: nothing is ever dropped.",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "print", Usage: "print the SQL instead of applying it"},
			jsonFlag(),
		}, inboxMigrateFlags()...),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if c.Bool("print") && c.Bool("json") {
				return usagef("--print and --json cannot be combined: --print writes SQL")
			}
			if c.Bool("inbox") || c.IsSet("inbox-table") {
				return migrateInbox(c)
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			out := c.App.Writer
			if c.Bool("print") {
				_, err := fmt.Fprint(out, store.SchemaSQL())
				return err
			}
			res, err := store.Migrate(c.Context)
			if err != nil {
				return err
			}
			return printMigrated(c, "table", store.Table(), res.Created, res.Existed)
		},
	}
}

// printMigrated reports what a migration created and found, as text or
// --json.
func printMigrated(c *cli.Context, what, table string, created, existed []string) error {
	out := c.App.Writer
	if c.Bool("json") {
		return writeJSON(out, struct {
			Table   string   `json:"table"`
			Created []string `json:"created"`
			Existed []string `json:"existed"`
		}{table, nonNil(created), nonNil(existed)})
	}
	for _, obj := range created {
		fmt.Fprintf(out, "created  %s\n", obj)
	}
	for _, obj := range existed {
		fmt.Fprintf(out, "exists   %s\n", obj)
	}
	fmt.Fprintf(out, "%s %s is ready (%d created, %d already existed)\n", what, table, len(created), len(existed))
	return nil
}

// nonNil makes an empty list encode as [] rather than null, so that JSON
// consumers need not tell the two apart.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
