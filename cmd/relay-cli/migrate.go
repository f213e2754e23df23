package main

import (
	"fmt"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "create the outbox table and what the relay adds to it (idempotent)",
		Description: "Applies the embedded schema for the database STORAGE_URL names (PostgreSQL: the\n" +
			"table, its sequence, indexes and notify trigger, in one transaction; MySQL: the table\n" +
			"and its indexes) and says what it created, what already existed and what it dropped.\n" +
			"Running it again is safe: it drops only indexes of earlier versions that others now\n" +
			"replace (PostgreSQL), never a table, a column or a row.\n\n" +
			"--partition-by day|hour (PostgreSQL) creates the table partitioned by created_at, with a\n" +
			"default partition and the partitions of the next few days or hours; the relay's retention\n" +
			"then creates partitions ahead and drops finished ones instead of deleting rows. The primary\n" +
			"key becomes (event_id, created_at). An existing table is never converted: see\n" +
			"\"Partitioned tables\" in docs/operations.md.\n\n" +
			"--capture wal (PostgreSQL 15+, wal_level=logical) also creates the publication the relay\n" +
			"reads the table's inserts through with CAPTURE=wal (the relay makes its replication slot);\n" +
			"--capture poll drops the publication and the slot again, once no relay streams from it.",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "print", Usage: "print the SQL instead of applying it"},
			&cli.StringFlag{Name: "partition-by", Usage: "create the table partitioned by `PERIOD` of created_at: day or hour (PostgreSQL)"},
			&cli.StringFlag{Name: "capture", Usage: "`MODE` the relays will run with: wal creates the publication CAPTURE=wal reads, poll drops it and the slot (PostgreSQL)"},
			&cli.StringFlag{Name: "publication", Usage: "publication `NAME` for --capture (default outbox_relay_<schema>_<table>, as WAL_PUBLICATION_NAME)", EnvVars: []string{"WAL_PUBLICATION_NAME"}},
			slotFlag(),
			&cli.StringFlag{Name: "wal-storage-url", EnvVars: []string{"WAL_STORAGE_URL"},
				Usage: "the relays' replication connection (`URL`, as WAL_STORAGE_URL): --capture poll drops the slot through it when set"},
			jsonFlag(),
		}, inboxMigrateFlags()...),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if c.Bool("print") && c.Bool("json") {
				return usagef("--print and --json cannot be combined: --print writes SQL")
			}
			capture := c.String("capture")
			if c.IsSet("capture") && capture != "wal" && capture != "poll" {
				return usagef("--capture must be wal or poll, got %q", capture)
			}
			if capture != "" && c.Bool("print") {
				return usagef("--capture cannot be combined with --print")
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
				if err := migratePartitioned(c, store, by); err != nil {
					return err
				}
				return migrateCapture(c, store, capture)
			}
			if c.Bool("print") {
				_, err := fmt.Fprint(out, store.SchemaSQL())
				return err
			}
			res, err := store.Migrate(c.Context)
			if err != nil {
				return err
			}
			if err := printMigrated(c, "table", store.Table(), res); err != nil {
				return err
			}
			return migrateCapture(c, store, capture)
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
	if err := printMigrated(c, "table", store.Table(), res); err != nil || c.Bool("json") {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "partitioned by %s; `relay-cli partitions` lists the partitions\n", by)
	return err
}

// printMigrated reports what a migration created, found and dropped, as
// text or --json.
func printMigrated(c *cli.Context, what, table string, res storage.MigrateResult) error {
	out := c.App.Writer
	if c.Bool("json") {
		return writeJSON(out, struct {
			Table   string   `json:"table"`
			Created []string `json:"created"`
			Existed []string `json:"existed"`
			Dropped []string `json:"dropped"`
		}{table, nonNil(res.Created), nonNil(res.Existed), nonNil(res.Dropped)})
	}
	for _, obj := range res.Created {
		fmt.Fprintf(out, "created  %s\n", obj)
	}
	for _, obj := range res.Existed {
		fmt.Fprintf(out, "exists   %s\n", obj)
	}
	for _, obj := range res.Dropped {
		fmt.Fprintf(out, "dropped  %s\n", obj)
	}
	dropped := ""
	if len(res.Dropped) > 0 {
		dropped = fmt.Sprintf(", %d dropped", len(res.Dropped))
	}
	fmt.Fprintf(out, "%s %s is ready (%d created, %d already existed%s)\n", what, table, len(res.Created), len(res.Existed), dropped)
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

// migrateCapture is `migrate --capture`: the publication CAPTURE=wal reads,
// made or, for poll, dropped with the slot.
func migrateCapture(c *cli.Context, store storage.Storage, mode string) error {
	if mode == "" {
		return nil
	}
	pg, ok := store.(*postgres.Store)
	if !ok {
		return usagef("--capture: only PostgreSQL has a write-ahead log to read; MySQL relays poll")
	}
	table := pg.TableName()
	publication, slot := c.String("publication"), c.String("slot")
	if publication == "" {
		publication = postgres.PublicationDefault(table)
	}
	if slot == "" {
		slot = postgres.SlotDefault(table)
	}
	if mode == "wal" {
		if err := pg.CreatePublication(c.Context, publication); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "relay-cli: publication %s ready; start the relays with CAPTURE=wal (the first makes replication slot %s)\n", publication, slot)
		return nil
	}
	conn := pg.ConnString()
	if u := c.String("wal-storage-url"); u != "" {
		// The role with REPLICATION may be another than STORAGE_URL's.
		conn = u
	}
	if err := pgwal.DropSlot(c.Context, conn, slot); err != nil {
		return fmt.Errorf("%w (stop the relays running with CAPTURE=wal first)", err)
	}
	if err := pg.DropPublication(c.Context, publication); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "relay-cli: dropped publication %s and replication slot %s; the relays poll with CAPTURE=poll\n", publication, slot)
	return nil
}

// slotFlag names the CAPTURE=wal replication slot, as WAL_SLOT_NAME does.
func slotFlag() cli.Flag {
	return &cli.StringFlag{Name: "slot", EnvVars: []string{"WAL_SLOT_NAME"},
		Usage: "the CAPTURE=wal replication slot's `NAME` (default outbox_relay_<schema>_<table>, as WAL_SLOT_NAME)"}
}
