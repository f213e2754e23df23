package main

// The consumer side: `migrate --inbox` creates a consumer's inbox table and
// `inbox prune` deletes its old records. Both work on the database that
// --storage-url names — the consumer's, usually not the outbox's — through
// pkg/inbox over database/sql, so MySQL needs only another way to open it.

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/inbox"
	"github.com/outbox-relay/relay/pkg/redact"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
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
	box, err := inboxFromFlags(c)
	if err != nil {
		return err
	}
	out := c.App.Writer
	if c.Bool("print") {
		_, err := fmt.Fprint(out, box.SchemaSQL())
		return err
	}
	db, err := openInboxDB(c)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := box.CreateTable(c.Context, db)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(out, struct {
			Table   string   `json:"table"`
			Created []string `json:"created"`
			Existed []string `json:"existed"`
		}{box.Table(), nonNil(res.Created), nonNil(res.Existed)})
	}
	for _, obj := range res.Created {
		fmt.Fprintf(out, "created  %s\n", obj)
	}
	for _, obj := range res.Existed {
		fmt.Fprintf(out, "exists   %s\n", obj)
	}
	fmt.Fprintf(out, "inbox table %s is ready (%d created, %d already existed)\n",
		box.Table(), len(res.Created), len(res.Existed))
	return nil
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
	box, err := inboxFromFlags(c)
	if err != nil {
		return err
	}
	db, err := openInboxDB(c)
	if err != nil {
		return err
	}
	defer db.Close()

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

// inboxFromFlags is the inbox --inbox-table names, on PostgreSQL.
func inboxFromFlags(c *cli.Context) (*inbox.Inbox, error) {
	box, err := inbox.New(inbox.Config{Dialect: inbox.Postgres, Table: c.String("inbox-table")})
	if err != nil {
		return nil, usagef("--inbox-table: %w", err)
	}
	return box, nil
}

// openInboxDB opens --storage-url through database/sql and checks that
// the server answers. Only PostgreSQL for now: relay-cli opens MySQL when
// the MySQL storage driver exists; the library serves both already.
func openInboxDB(c *cli.Context) (*sql.DB, error) {
	raw := c.String("storage-url")
	u, err := url.Parse(raw)
	if err != nil {
		return nil, usagef("--storage-url: malformed URL %q", redact.URL(raw))
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, usagef("--storage-url: the inbox commands take a postgres:// URL for now, got %s://; "+
			"on MySQL or MariaDB, call Inbox.CreateTable and Inbox.Prune (pkg/inbox) from Go", u.Scheme)
	}
	// ?table= names the outbox table for the other commands; to PostgreSQL
	// it would be an unknown setting.
	q := u.Query()
	q.Del("table")
	u.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, usagef("--storage-url: %s", redact.Error(err, raw, u.String()))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = postgres.ConnectTimeoutDefault
	}
	db := stdlib.OpenDB(*cfg)
	if err := db.PingContext(c.Context); err != nil {
		_ = db.Close()
		if c.Err() != nil {
			return nil, fmt.Errorf("connect: %w", context.Cause(c.Context))
		}
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s:%d as user %q (check STORAGE_URL and that the server is running): %s",
			cfg.Host, cfg.Port, cfg.User, redact.Error(err, raw, u.String()))
	}
	return db, nil
}
