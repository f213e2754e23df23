package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// pruneBatchSizeMax keeps one batch a short transaction even when asked
// for more.
const pruneBatchSizeMax = 100000

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "delete DELIVERED (and/or DEAD) rows older than a given age, in batches",
		Description: "Deletes DELIVERED rows whose delivered_at, and/or DEAD rows whose updated_at, is older\n" +
			"than --older-than, a batch per short transaction until none are left. PENDING and\n" +
			"DELIVERING rows are never touched. Progress goes to stderr when it is a terminal.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "older-than", Usage: "delete rows older than `DURATION` (required; 7d, 36h, 2w)"},
			&cli.StringFlag{Name: "status", Value: "delivered", Usage: "which rows: delivered, dead or all"},
			&cli.IntFlag{Name: "batch-size", Value: storage.PruneBatchSizeDefault, Usage: "rows deleted per statement"},
			&cli.BoolFlag{Name: "dry-run", Usage: "only count the rows that would be deleted"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if !c.IsSet("older-than") {
				return usagef("prune needs --older-than, e.g. --older-than 7d")
			}
			olderThan, err := parseDuration(c.String("older-than"))
			if err != nil {
				return usagef("--older-than: %w", err)
			}
			var statuses []outbox.Status
			switch strings.ToLower(c.String("status")) {
			case "delivered":
				statuses = []outbox.Status{outbox.StatusDelivered}
			case "dead":
				statuses = []outbox.Status{outbox.StatusDead}
			case "all":
				statuses = []outbox.Status{outbox.StatusDelivered, outbox.StatusDead}
			default:
				return usagef("--status must be delivered, dead or all, got %q; PENDING and DELIVERING rows are never pruned", c.String("status"))
			}
			batch := c.Int("batch-size")
			if batch < 1 || batch > pruneBatchSizeMax {
				return usagef("--batch-size must be 1 to %d, got %d", pruneBatchSizeMax, batch)
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()

			dryRun := c.Bool("dry-run")
			progress := isTerminal(c.App.ErrWriter) && !dryRun
			rows := map[string]int64{}
			var total int64
			for _, st := range statuses {
				p := storage.PruneParams{Status: st, OlderThan: olderThan, BatchSize: batch, DryRun: dryRun}
				if progress {
					p.Progress = func(n int64) {
						fmt.Fprintf(c.App.ErrWriter, "\rpruning %s rows: %d deleted", st, n)
					}
				}
				res, err := store.Prune(c.Context, p)
				if progress && res.Batches > 0 {
					fmt.Fprintln(c.App.ErrWriter)
				}
				total += res.Deleted
				if err != nil && total > 0 {
					return fmt.Errorf("%w (%d rows were deleted before)", err, total)
				}
				if err != nil {
					return err
				}
				rows[strings.ToLower(string(st))] = res.Deleted
				if !c.Bool("json") {
					printPruned(c, st, res, c.String("older-than"), dryRun)
				}
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, struct {
					Table            string           `json:"table"`
					DryRun           bool             `json:"dry_run"`
					OlderThanSeconds float64          `json:"older_than_seconds"`
					Rows             map[string]int64 `json:"rows"`
					Total            int64            `json:"total"`
				}{store.Table(), dryRun, olderThan.Seconds(), rows, total})
			}
			return nil
		},
	}
}

func printPruned(c *cli.Context, st outbox.Status, res storage.PruneResult, olderThan string, dryRun bool) {
	column := "delivered_at"
	if st == outbox.StatusDead {
		column = "updated_at"
	}
	if dryRun {
		fmt.Fprintf(c.App.Writer, "would delete %s with %s older than %s (dry run: nothing deleted)\n",
			plural(res.Deleted, string(st)+" row"), column, olderThan)
		return
	}
	fmt.Fprintf(c.App.Writer, "deleted %s with %s older than %s (%s)\n",
		plural(res.Deleted, string(st)+" row"), column, olderThan, plural(int64(res.Batches), "batch"))
}
