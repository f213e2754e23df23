package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/storage"
)

func retryDeadCommand() *cli.Command {
	return &cli.Command{
		Name:    "retry-dead",
		Aliases: []string{"replay-dead"},
		Usage:   "move DEAD events back to PENDING for another round of attempts",
		Description: "Moves the DEAD rows every given filter matches back to PENDING with attempts 0,\n" +
			"due now, and wakes the relays. last_error stays until the next attempt overwrites it.\n" +
			"Without a filter it would move every DEAD row: on a terminal it asks first, elsewhere\n" +
			"it refuses unless --yes is given.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "id", Usage: "only the event with this `UUID` (repeat for several)"},
			&cli.StringFlag{Name: "event-type", Usage: "only events of this `TYPE`"},
			&cli.StringFlag{Name: "since", Usage: "only events that died within `DURATION` (36h, 7d) or at or after an RFC3339 time"},
			&cli.StringFlag{Name: "error-contains", Usage: "only events whose last_error contains `TEXT` (any case)"},
			&cli.StringFlag{Name: "key", Usage: "only events with this partition `KEY`"},
			&cli.IntFlag{Name: "limit", Usage: "move at most `N` events, oldest deaths first (0: no limit)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "only count the events that would be moved"},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation when no filter is given"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			filter, err := deadFilter(c)
			if err != nil {
				return err
			}
			limit := c.Int("limit")
			if limit < 0 {
				return usagef("--limit must not be negative, got %d", limit)
			}
			dryRun := c.Bool("dry-run")
			// Refuse before connecting: a cron job without --yes is a
			// mistake whether or not the database answers.
			ask := filter.Empty() && !dryRun && !c.Bool("yes")
			if ask && !isTerminal(c.App.Reader) {
				return usagef("retry-dead without a filter would move every DEAD event back to PENDING; "+
					"pass --yes to confirm, or narrow it with %s", orList(deadFilterFlags))
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			p := storage.RetryDeadParams{DeadFilter: filter, Limit: limit, DryRun: dryRun}

			if ask {
				count := p
				count.DryRun = true
				n, err := store.RetryDead(c.Context, count)
				if err != nil {
					return err
				}
				if n == 0 {
					return printRetried(c, store.Table(), 0, false)
				}
				fmt.Fprintf(c.App.ErrWriter, "No filter given: move %s in %s back to PENDING? [y/N] ", plural(n, "DEAD event"), store.Table())
				answer, _ := bufio.NewReader(c.App.Reader).ReadString('\n')
				switch strings.ToLower(strings.TrimSpace(answer)) {
				case "y", "yes":
				default:
					return errors.New("not confirmed; nothing changed")
				}
			}
			n, err := store.RetryDead(c.Context, p)
			if err != nil {
				return err
			}
			return printRetried(c, store.Table(), n, dryRun)
		},
	}
}

// deadFilterFlags are the flags that narrow retry-dead, --id first; the
// refusal without a filter lists them from here, so that a new filter
// cannot be left out of it.
var deadFilterFlags = []string{"id", "event-type", "since", "error-contains", "key"}

// orList writes flag names as "--a, --b or --c".
func orList(names []string) string {
	flags := make([]string, len(names))
	for i, n := range names {
		flags[i] = "--" + n
	}
	if len(flags) < 2 {
		return strings.Join(flags, "")
	}
	return strings.Join(flags[:len(flags)-1], ", ") + " or " + flags[len(flags)-1]
}

// deadFilter reads the filter flags. An empty value is refused rather than
// taken as "no filter", which would widen the selection to every row.
func deadFilter(c *cli.Context) (storage.DeadFilter, error) {
	var f storage.DeadFilter
	for _, raw := range c.StringSlice("id") {
		id, err := uuid.Parse(strings.TrimSpace(raw))
		if err != nil {
			return f, usagef("--id: %q is not a UUID", raw)
		}
		f.IDs = append(f.IDs, id)
	}
	for _, name := range deadFilterFlags[1:] {
		if c.IsSet(name) && strings.TrimSpace(c.String(name)) == "" {
			return f, usagef("--%s must not be empty", name)
		}
	}
	f.EventType = c.String("event-type")
	f.ErrorContains = c.String("error-contains")
	f.PartitionKey = c.String("key")
	if c.IsSet("since") {
		since, err := parseSince(c.String("since"), time.Now())
		if err != nil {
			return f, usageError{err}
		}
		f.Since = since
	}
	return f, nil
}

// parseSince reads --since: an age (36h, 7d) counted back from now, or an
// RFC3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since: %q is neither a duration (36h, 7d) nor an RFC3339 time (2024-05-01T12:00:00Z)", s)
	}
	return now.Add(-d), nil
}

func printRetried(c *cli.Context, table string, n int64, dryRun bool) error {
	if c.Bool("json") {
		return writeJSON(c.App.Writer, struct {
			Table  string `json:"table"`
			DryRun bool   `json:"dry_run"`
			Events int64  `json:"events"`
		}{table, dryRun, n})
	}
	if dryRun {
		fmt.Fprintf(c.App.Writer, "would move %s back to PENDING (dry run: nothing changed)\n", plural(n, "DEAD event"))
		return nil
	}
	fmt.Fprintf(c.App.Writer, "moved %s back to PENDING\n", plural(n, "DEAD event"))
	return nil
}
