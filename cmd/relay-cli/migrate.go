package main

import (
	"fmt"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/storage"
)

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "create the outbox table and what the relay adds to it (idempotent)",
		Description: "Applies the embedded schema for the database STORAGE_URL names (PostgreSQL: the\n" +
			"table, its sequence, indexes and notify trigger, in one transaction; MySQL: the table\n" +
			"and its indexes) and says what it created and what already existed. Running it again\n" +
			"is safe: nothing is ever dropped.\n\n" +
			"--partition-by day|hour (PostgreSQL) creates the table partitioned by created_at, with a\n" +
			"default partition and the partitions of the next few days or hours; the relay's retention\n" +
			"then creates partitions ahead and drops finished ones instead of deleting rows. The primary\n" +
			"key becomes (event_id, created_at). An existing table is never converted: see\n" +
			"\"Partitioned tables\" in docs/operations.md.",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "print", Usage: "print the SQL instead of applying it"},
			&cli.StringFlag{Name: "partition-by", Usage: "create the table partitioned by `PERIOD` of created_at: day or hour (PostgreSQL)"},
			jsonFlag(),
		}, inboxMigrateFlags()...),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if c.Bool("print") && c.Bool("json") {
				return usagef("--print and --json cannot be combined: --print writes SQL")
			}
			by := c.String("partition-by")
			if c.IsSet("partition-by") && !slices.Contains(storage.PartitionBy, by) {
				return usagef("--partition-by must be day or hour, got %q", by)
			}
			if c.Bool("inbox") || c.IsSet("inbox-table") {
				if by != "" {
					return usagef("--partition-by applies to the outbox table, not to --inbox")
				}
				return migrateInbox(c)
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			out := c.App.Writer
			if !c.Bool("print") {
				// Where the table goes, before it goes there: the relay
				// finds it only in the database its own STORAGE_URL names.
				fmt.Fprintf(c.App.ErrWriter, "relay-cli: migrating %s\n", store.Describe())
			}
			if by != "" {
				return migratePartitioned(c, store, by)
			}
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

// migratePartitioned is `migrate --partition-by`.
func migratePartitioned(c *cli.Context, store storage.Storage, by string) error {
	pm, ok := store.(storage.PartitionMigrator)
	if !ok {
		return usagef("--partition-by: %s tables cannot be partitioned by the relay (PostgreSQL only); drop the flag", driverName(c))
	}
	if c.Bool("print") {
		_, err := fmt.Fprint(c.App.Writer, pm.PartitionedSchemaSQL(by))
		return err
	}
	res, err := pm.MigratePartitioned(c.Context, by)
	if err != nil {
		return err
	}
	if err := printMigrated(c, "table", store.Table(), res.Created, res.Existed); err != nil || c.Bool("json") {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "partitioned by %s; `relay-cli partitions` lists the partitions\n", by)
	return err
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
