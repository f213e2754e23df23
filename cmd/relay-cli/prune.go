package main

import (
	"fmt"
	"strings"
	"time"

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
			"DELIVERING rows are never touched. Progress goes to stderr when it is a terminal.\n\n" +
			"--delivered-age and --dead-age (Open Outbox's flags) give each status its own age\n" +
			"instead: prune --delivered-age 7d --dead-age 30d. The relay can do this itself:\n" +
			"DELIVERED_RETENTION and DEAD_RETENTION (docs/configuration.md).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "older-than", Usage: "delete rows older than `DURATION` (7d, 36h, 2w)"},
			&cli.StringFlag{Name: "status", Value: "delivered", Usage: "which rows --older-than deletes: delivered, dead or all"},
			&cli.StringFlag{Name: "delivered-age", Usage: "delete DELIVERED rows older than `DURATION` (instead of --older-than)"},
			&cli.StringFlag{Name: "dead-age", Usage: "delete DEAD rows older than `DURATION` (instead of --older-than)"},
			&cli.IntFlag{Name: "batch-size", Value: storage.PruneBatchSizeDefault, Usage: "rows deleted per statement"},
			&cli.BoolFlag{Name: "dry-run", Usage: "only count the rows that would be deleted"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			targets, err := pruneTargets(c)
			if err != nil {
				return err
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
			ages := map[string]float64{}
			var total int64
			for _, tg := range targets {
				st := tg.status
				p := storage.PruneParams{Status: st, OlderThan: tg.age, BatchSize: batch, DryRun: dryRun}
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
				ages[strings.ToLower(string(st))] = tg.age.Seconds()
				if !c.Bool("json") {
					printPruned(c, st, res, tg.flag, dryRun)
				}
			}
			if c.Bool("json") {
				out := struct {
					Table            string             `json:"table"`
					DryRun           bool               `json:"dry_run"`
					OlderThanSeconds *float64           `json:"older_than_seconds,omitempty"`
					AgeSeconds       map[string]float64 `json:"age_seconds"`
					Rows             map[string]int64   `json:"rows"`
					Total            int64              `json:"total"`
				}{Table: store.Table(), DryRun: dryRun, AgeSeconds: ages, Rows: rows, Total: total}
				if c.IsSet("older-than") {
					sec := targets[0].age.Seconds()
					out.OlderThanSeconds = &sec
				}
				return writeJSON(c.App.Writer, out)
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

// pruneTarget is one status to prune and the age its rows must exceed, as
// the flag that set it was written.
type pruneTarget struct {
	status outbox.Status
	age    time.Duration
	flag   string
}

// pruneTargets reads either --older-than with --status, or --delivered-age
// and/or --dead-age (Open Outbox's flags), never both kinds.
func pruneTargets(c *cli.Context) ([]pruneTarget, error) {
	perStatus := c.IsSet("delivered-age") || c.IsSet("dead-age")
	switch {
	case perStatus && c.IsSet("older-than"):
		return nil, usagef("give either --older-than (with --status) or --delivered-age/--dead-age, not both")
	case perStatus && c.IsSet("status"):
		return nil, usagef("--status goes with --older-than; --delivered-age and --dead-age choose the statuses themselves")
	case perStatus:
		var targets []pruneTarget
		for _, f := range []struct {
			name   string
			status outbox.Status
		}{{"delivered-age", outbox.StatusDelivered}, {"dead-age", outbox.StatusDead}} {
			if !c.IsSet(f.name) {
				continue
			}
			age, err := parseDuration(c.String(f.name))
			if err != nil {
				return nil, usagef("--%s: %w", f.name, err)
			}
			targets = append(targets, pruneTarget{f.status, age, c.String(f.name)})
		}
		return targets, nil
	case !c.IsSet("older-than"):
		return nil, usagef("prune needs --older-than (e.g. --older-than 7d), or --delivered-age and/or --dead-age (e.g. --delivered-age 7d --dead-age 30d)")
	}
	olderThan, err := parseDuration(c.String("older-than"))
	if err != nil {
		return nil, usagef("--older-than: %w", err)
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
		return nil, usagef("--status must be delivered, dead or all, got %q; PENDING and DELIVERING rows are never pruned", c.String("status"))
	}
	targets := make([]pruneTarget, len(statuses))
	for i, st := range statuses {
		targets[i] = pruneTarget{st, olderThan, c.String("older-than")}
	}
	return targets, nil
}
