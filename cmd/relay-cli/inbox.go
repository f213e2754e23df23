package main

// The consumer side: `migrate --inbox` creates a consumer's inbox table and
// `inbox prune` deletes its old records. Both work on the database that
// --storage-url names — the consumer's, usually not the outbox's — through
// pkg/inbox over the database/sql handle its storage driver offers
// (storage.SQLDatabase), on PostgreSQL and MySQL alike.

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/inbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

func inboxTableFlag() cli.Flag {
	return &cli.StringFlag{
		Name:  "inbox-table",
		Value: inbox.TableDefault,
		Usage: "the consumer's inbox table, table or schema.table",
	}
}

// inboxMigrateFlags are migrate's flags for the inbox.
func inboxMigrateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "inbox", Usage: "create a consumer's inbox table (--inbox-table) instead of the outbox table"},
		inboxTableFlag(),
	}
}

// migrateInbox is `migrate --inbox`: the inbox table and its index, in the
// same output as the outbox's migrate.
func migrateInbox(c *cli.Context) error {
	if !c.Bool("inbox") {
		return usagef("--inbox-table needs --inbox")
	}
	box, db, store, err := openInbox(c)
	if err != nil {
		return err
	}
	defer store.Close()
	out := c.App.Writer
	if c.Bool("print") {
		_, err := fmt.Fprint(out, box.SchemaSQL())
		return err
	}
	if err := reachable(c, store); err != nil {
		return err
	}
	res, err := box.CreateTable(c.Context, db)
	if err != nil {
		return err
	}
	return printMigrated(c, "inbox table", box.Table(), storage.MigrateResult{Created: res.Created, Existed: res.Existed})
}

func inboxCommand() *cli.Command {
	return &cli.Command{
		Name:      "inbox",
		Usage:     "maintain a consumer's inbox table: inbox prune",
		ArgsUsage: "prune",
		Description: "inbox prune deletes inbox records whose processed_at is older than --older-than, a batch\n" +
			"per short transaction, while consumers keep working. The window must be longer than any\n" +
			"redelivery the consumer can still see (broker retention and replays, relay retries,\n" +
			"retry-dead): an event whose record is gone is applied again if it comes back.\n" +
			"Progress goes to stderr when it is a terminal. Create the table with migrate --inbox.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "older-than", Usage: "delete records older than `DURATION` (required; 30d, 2w)"},
			&cli.StringFlag{Name: "consumer", Usage: "only this consumer's records (default: every consumer's)"},
			&cli.IntFlag{Name: "batch-size", Value: inbox.PruneBatchSizeDefault, Usage: "records deleted per statement"},
			&cli.BoolFlag{Name: "dry-run", Usage: "only count the records that would be deleted"},
			inboxTableFlag(),
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			switch c.Args().First() {
			case "prune":
				if c.NArg() > 1 {
					return usagef("inbox prune takes no arguments, got %q", c.Args().Get(1))
				}
				return inboxPrune(c)
			case "":
				return usagef("inbox needs a subcommand: relay-cli inbox prune --older-than 30d")
			default:
				return usagef("unknown inbox subcommand %q; run relay-cli inbox --help", c.Args().First())
			}
		},
	}
}

func inboxPrune(c *cli.Context) error {
	if !c.IsSet("older-than") {
		return usagef("inbox prune needs --older-than, e.g. --older-than 30d")
	}
	olderThan, err := parseDuration(c.String("older-than"))
	if err != nil {
		return usagef("--older-than: %w", err)
	}
	consumer := c.String("consumer")
	if c.IsSet("consumer") && (consumer == "" || len(consumer) > inbox.MaxIDLen) {
		return usagef("--consumer must be a consumer name of 1 to %d bytes, got %q", inbox.MaxIDLen, consumer)
	}
	batch := c.Int("batch-size")
	if batch < 1 || batch > pruneBatchSizeMax {
		return usagef("--batch-size must be 1 to %d, got %d", pruneBatchSizeMax, batch)
	}
	box, db, store, err := openInbox(c)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := reachable(c, store); err != nil {
		return err
	}

	dryRun := c.Bool("dry-run")
	p := inbox.PruneParams{OlderThan: olderThan, Consumer: consumer, BatchSize: batch, DryRun: dryRun}
	progress := isTerminal(c.App.ErrWriter) && !dryRun
	if progress {
		p.Progress = func(n int64) { fmt.Fprintf(c.App.ErrWriter, "\rpruning inbox records: %d deleted", n) }
	}
	res, err := box.Prune(c.Context, db, p)
	if progress && res.Batches > 0 {
		fmt.Fprintln(c.App.ErrWriter)
	}
	if err != nil && res.Deleted > 0 {
		return fmt.Errorf("%w (%d records were deleted before)", err, res.Deleted)
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, struct {
			Table            string  `json:"table"`
			Consumer         *string `json:"consumer"`
			DryRun           bool    `json:"dry_run"`
			OlderThanSeconds float64 `json:"older_than_seconds"`
			Deleted          int64   `json:"deleted"`
			Batches          int     `json:"batches"`
		}{box.Table(), nilIfEmpty(consumer), dryRun, olderThan.Seconds(), res.Deleted, res.Batches})
	}
	whose := "every consumer's"
	if consumer != "" {
		whose = fmt.Sprintf("consumer %q's", consumer)
	}
	if dryRun {
		fmt.Fprintf(c.App.Writer, "would delete %s of %s with processed_at older than %s (dry run: nothing deleted)\n",
			plural(res.Deleted, "inbox record"), whose, c.String("older-than"))
		return nil
	}
	fmt.Fprintf(c.App.Writer, "deleted %s of %s with processed_at older than %s (%s)\n",
		plural(res.Deleted, "inbox record"), whose, c.String("older-than"), plural(int64(res.Batches), "batch"))
	return nil
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// openInbox opens the inbox table --inbox-table names in the database
// --storage-url names, through that URL's storage driver, without
// connecting. Closing store releases the connections.
func openInbox(c *cli.Context) (box *inbox.Inbox, db *sql.DB, store storage.Storage, err error) {
	store, err = openStore(c)
	if err != nil {
		return nil, nil, nil, err
	}
	sqlStore, ok := store.(storage.SQLDatabase)
	if !ok {
		store.Close()
		return nil, nil, nil, usagef("%s: this storage driver offers no SQL database to keep an inbox table in", settingName(c, "storage-url"))
	}
	db, dialect := sqlStore.SQL()
	d, err := inbox.ParseDialect(dialect)
	if err == nil {
		box, err = inbox.New(inbox.Config{Dialect: d, Table: c.String("inbox-table")})
	}
	if err != nil {
		store.Close()
		return nil, nil, nil, usagef("--inbox-table: %w", err)
	}
	return box, db, store, nil
}

// reachable checks that the database answers, with the storage driver's
// own account of why it does not; the outbox table need not exist.
func reachable(c *cli.Context, store storage.Storage) error {
	if err := store.Check(c.Context); errors.Is(err, storage.ErrUnreachable) {
		return err
	}
	return nil
}
