package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/internal/bytesize"
	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/capture/binlog"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "create the outbox table and what the relay adds to it (idempotent)",
		Description: "Applies the embedded schema for the database STORAGE_URL names (PostgreSQL: the\n" +
			"table, its sequence, indexes and notify trigger; MySQL: the table and its indexes) and\n" +
			"says what it created and what already existed. Running it again is safe.\n\n" +
			"On a live table it never stops the application's writes for longer than --lock-timeout\n" +
			"at a time: indexes are built CONCURRENTLY (PostgreSQL) or in place with LOCK=NONE (MySQL),\n" +
			"and a statement whose lock is not free in time is tried again later. An index a build\n" +
			"cut short left INVALID is built again. Indexes of earlier releases stay for relays of\n" +
			"those releases still running: --cleanup drops them once none is left. On MySQL a change\n" +
			"that rebuilds the table (a column) is refused unless --allow-blocking. --plan prints\n" +
			"each statement it would run and whether it blocks writers, and changes nothing.\n" +
			"Progress of long builds goes to stderr.\n\n" +
			"--partition-by day|hour (PostgreSQL) creates the table partitioned by created_at, with a\n" +
			"default partition and the partitions of the next few days or hours; the relay's retention\n" +
			"then creates partitions ahead and drops finished ones instead of deleting rows. The primary\n" +
			"key becomes (event_id, created_at). An existing table is never converted: see\n" +
			"\"Partitioned tables\" in docs/operations.md.\n\n" +
			"--capture wal (PostgreSQL 15+, wal_level=logical) also creates the publication the relay\n" +
			"reads the table's inserts through with CAPTURE=wal (the relay makes its replication slot);\n" +
			"--capture poll drops the publication and the slot again, once no relay streams from it.\n" +
			"--capture binlog (MySQL/MariaDB) also creates outbox_relay_positions, where the relays keep\n" +
			"their binlog position, and warns when the server's log cannot serve them yet (log_bin,\n" +
			"binlog_format=ROW, binlog_row_image=FULL).",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "print", Usage: "print the SQL instead of applying it"},
			&cli.BoolFlag{Name: "plan", Usage: "print what it would run on this table, whether each statement blocks writers, and the table's size; change nothing"},
			&cli.BoolFlag{Name: "cleanup", Usage: "also drop the indexes of earlier releases (once no relay of those releases runs)"},
			&cli.DurationFlag{Name: "lock-timeout", Value: storage.DefaultLockTimeout,
				Usage: "longest `WAIT` for a lock that writers would queue behind; the statement is tried again later"},
			&cli.BoolFlag{Name: "allow-blocking", Usage: "run changes that block the table's writers throughout (MySQL: a column that rebuilds the table), in a maintenance window"},
			&cli.StringFlag{Name: "partition-by", Usage: "create the table partitioned by `PERIOD` of created_at: day or hour (PostgreSQL)"},
			&cli.StringFlag{Name: "capture", Usage: "`MODE` the relays will run with: wal creates the publication CAPTURE=wal reads, poll drops it and the slot (PostgreSQL); binlog (MySQL/MariaDB) creates the position table CAPTURE=binlog keeps"},
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
			if c.Bool("print") && c.Bool("plan") {
				return usagef("--print and --plan cannot be combined: --print shows the whole schema, --plan what this table needs")
			}
			if c.IsSet("lock-timeout") && c.Duration("lock-timeout") <= 0 {
				return usagef("--lock-timeout must be above 0, such as 500ms or 2s")
			}
			capture := c.String("capture")
			if err := checkCaptureFlag(c); err != nil {
				return err
			}
			if capture != "" && (c.Bool("print") || c.Bool("plan")) {
				return usagef("--capture cannot be combined with --print or --plan")
			}
			by := c.String("partition-by")
			if c.IsSet("partition-by") && !slices.Contains(storage.PartitionBy, by) {
				return usagef("--partition-by must be day or hour, got %q", by)
			}
			if c.Bool("inbox") || c.IsSet("inbox-table") {
				if by != "" {
					return usagef("--partition-by applies to the outbox table, not to --inbox")
				}
				for _, f := range []string{"plan", "cleanup", "allow-blocking", "lock-timeout"} {
					if c.IsSet(f) {
						return usagef("--%s applies to the outbox table, not to --inbox (--inbox --print shows the inbox's SQL)", f)
					}
				}
				return migrateInbox(c)
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			if err := checkCaptureStorage(store, capture); err != nil {
				return err
			}
			out := c.App.Writer
			if !c.Bool("print") && !c.Bool("plan") {
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
			res, err := store.Migrate(c.Context, migrateOptions(c))
			if err != nil {
				return err
			}
			if c.Bool("plan") {
				return printPlan(c, store.Table(), res)
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
	res, err := pm.MigratePartitioned(c.Context, by, migrateOptions(c))
	if err != nil {
		return err
	}
	if c.Bool("plan") {
		return printPlan(c, store.Table(), res)
	}
	if err := printMigrated(c, "table", store.Table(), res); err != nil || c.Bool("json") {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "partitioned by %s; `relay-cli partitions` lists the partitions\n", by)
	return err
}

// migrateOptions are the migration's options from the flags; progress
// goes to stderr.
func migrateOptions(c *cli.Context) storage.MigrateOptions {
	return storage.MigrateOptions{
		Plan:          c.Bool("plan"),
		Cleanup:       c.Bool("cleanup"),
		LockTimeout:   c.Duration("lock-timeout"),
		AllowBlocking: c.Bool("allow-blocking"),
		Progress: func(msg string) {
			fmt.Fprintf(c.App.ErrWriter, "relay-cli: %s\n", msg)
		},
	}
}

// printPlan prints what migrate --plan found: the table's size, then each
// statement with what it is for and whether it blocks writers, as an SQL
// script with comments, or --json.
func printPlan(c *cli.Context, table string, res storage.MigrateResult) error {
	out := c.App.Writer
	if c.Bool("json") {
		type step struct {
			SQL    string `json:"sql"`
			Blocks string `json:"blocks_writers"`
			Why    string `json:"why"`
		}
		steps := []step{}
		for _, st := range res.Plan {
			steps = append(steps, step{st.SQL, st.Blocks, st.Why})
		}
		return writeJSON(out, struct {
			Table string   `json:"table"`
			Bytes int64    `json:"table_bytes"`
			Rows  int64    `json:"table_rows_estimate"`
			Steps []step   `json:"steps"`
			Kept  []string `json:"kept"`
		}{table, res.TableBytes, res.TableRows, steps, nonNil(res.Kept)})
	}
	if res.TableBytes < 0 {
		fmt.Fprintf(out, "-- table %s does not exist: migrate creates it\n", table)
	} else {
		fmt.Fprintf(out, "-- table %s: %s, about %d rows\n", table, bytesize.Format(res.TableBytes), res.TableRows)
	}
	if len(res.Plan) == 0 {
		fmt.Fprintln(out, "-- nothing to do")
	}
	for _, st := range res.Plan {
		blocks := st.Blocks
		switch st.Blocks {
		case "briefly":
			blocks = fmt.Sprintf("briefly (waits at most %s for its lock, then tries again later)", res.LockTimeout)
		case "yes":
			blocks = "YES, until it is done"
		}
		stmt := strings.TrimSpace(st.SQL)
		if !strings.HasPrefix(stmt, "--") {
			stmt += ";"
		}
		fmt.Fprintf(out, "\n-- %s\n-- blocks writers: %s\n%s\n", st.Why, blocks, stmt)
	}
	for _, obj := range res.Kept {
		fmt.Fprintf(out, "\n-- kept: %s, an earlier release's (migrate --cleanup drops it)\n", obj)
	}
	return nil
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
			Kept    []string `json:"kept"`
			Rebuilt []string `json:"rebuilt"`
		}{table, nonNil(res.Created), nonNil(res.Existed), nonNil(res.Dropped), nonNil(res.Kept), nonNil(res.Rebuilt)})
	}
	for _, obj := range res.Rebuilt {
		fmt.Fprintf(out, "rebuilt  %s (a build cut short had left it INVALID)\n", obj)
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
	for _, obj := range res.Kept {
		fmt.Fprintf(out, "kept     %s (an earlier release's: once no relay of it runs, migrate --cleanup drops it)\n", obj)
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
	if mode == captureBinlog {
		// checkCaptureStorage made sure the table is MySQL's.
		return migrateBinlog(c, store.(*mysql.Store))
	}
	pg, ok := store.(*postgres.Store)
	if !ok {
		return usagef("--capture poll: only PostgreSQL has a publication and a slot to drop; MySQL/MariaDB relays that poll need nothing beside the table")
	}
	table := pg.TableName()
	own := pgwal.Config{ConnString: pg.ConnString(), Schema: table.Schema, Table: table.Name,
		Slot: c.String("slot"), Publication: c.String("publication")}
	publication, slot := own.PublicationName(), own.SlotName()
	if mode == "wal" {
		if err := pgwal.CreatePublication(c.Context, own); err != nil {
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
	if err := pgwal.DropPublication(c.Context, own); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "relay-cli: dropped publication %s and replication slot %s; the relays poll with CAPTURE=poll\n", publication, slot)
	return nil
}

// migrateBinlog is `migrate --capture binlog`: the table the relays keep
// their binlog position in, and a warning when the server's log cannot
// serve them yet (a migrate may well run before the server is
// reconfigured).
func migrateBinlog(c *cli.Context, store *mysql.Store) error {
	cfg := binlog.Config{Conn: store.ConnConfig(), Database: store.Database(), Table: store.TableName()}
	if err := binlog.CreatePositionTable(c.Context, cfg); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "relay-cli: position table %s.%s ready; start the relays with CAPTURE=binlog (their user needs relay-cli grants --capture binlog --login-role USER)\n",
		store.Database(), binlog.PositionTable)
	var setup *capture.SetupError
	switch err := binlog.CheckServer(c.Context, cfg); {
	case errors.As(err, &setup):
		fmt.Fprintf(c.App.ErrWriter, "relay-cli: warning: CAPTURE=binlog relays cannot start on this server yet: %s; %s\n", setup.Problem, setup.Fix)
	case err != nil:
		fmt.Fprintf(c.App.ErrWriter, "relay-cli: warning: could not check the server's binary log: %v\n", err)
	}
	return nil
}

// slotFlag names the CAPTURE=wal replication slot, as WAL_SLOT_NAME does.
func slotFlag() cli.Flag {
	return &cli.StringFlag{Name: "slot", EnvVars: []string{"WAL_SLOT_NAME"},
		Usage: "the CAPTURE=wal replication slot's `NAME` (default outbox_relay_<schema>_<table>, as WAL_SLOT_NAME)"}
}
