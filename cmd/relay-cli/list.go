package main

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// lastErrorWidth is how much of last_error a table row shows; --json and
// `show` give all of it.
const lastErrorWidth = 60

func listCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list events, newest first (or oldest)",
		Description: "Lists events newest first (by created_at, then insertion order; with --key in the\n" +
			"order they were written, which is the order the relay delivers them in): id, type,\n" +
			"partition key, status, attempts, age and last_error, cut to 60 characters in the\n" +
			"table and whole with --json. Payloads are not read; show prints one event whole.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "status", Usage: "only events in this `STATUS`: pending, delivering, delivered or dead"},
			&cli.StringFlag{Name: "event-type", Usage: "only events of this `TYPE`"},
			&cli.StringFlag{Name: "key", Usage: "only events with this partition `KEY`"},
			&cli.StringFlag{Name: "error-contains", Usage: "only events whose last_error contains `TEXT` (any case)"},
			&cli.BoolFlag{Name: "oldest", Usage: "oldest first"},
			&cli.IntFlag{Name: "limit", Value: storage.ListLimitDefault, Usage: "show at most `N` events"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			p := storage.ListParams{EventType: c.String("event-type"), Limit: c.Int("limit"),
				PartitionKey: c.String("key"), ErrorContains: c.String("error-contains"), OldestFirst: c.Bool("oldest")}
			for _, f := range []string{"key", "error-contains"} {
				if c.IsSet(f) && c.String(f) == "" {
					return usagef("--%s must not be empty", f)
				}
			}
			if c.IsSet("status") {
				st, ok := parseStatus(c.String("status"))
				if !ok {
					return usagef("--status must be pending, delivering, delivered or dead, got %q", c.String("status"))
				}
				p.Status = st
			}
			if c.IsSet("event-type") && p.EventType == "" {
				return usagef("--event-type must not be empty")
			}
			if p.Limit < 1 {
				return usagef("--limit must be at least 1, got %d", p.Limit)
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			rows, err := store.List(c.Context, p)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				list := make([]listJSON, len(rows))
				for i, r := range rows {
					list[i] = listRowJSON(r)
				}
				return writeJSON(c.App.Writer, list)
			}
			if len(rows) == 0 {
				fmt.Fprintln(c.App.ErrWriter, "no events match")
				return nil
			}
			tw := newTable(c.App.Writer)
			fmt.Fprintln(tw, "EVENT ID\tTYPE\tKEY\tSTATUS\tATTEMPTS\tAGE\tLAST ERROR")
			for _, r := range rows {
				key := "-"
				if r.PartitionKey != nil {
					key = printable(*r.PartitionKey)
				}
				lastErr := ""
				if r.LastError != nil {
					lastErr = shorten(printable(*r.LastError), lastErrorWidth)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n",
					r.ID, printable(r.Type), key, r.Status, r.Attempts, formatAge(r.Age), lastErr)
			}
			return tw.Flush()
		},
	}
}

// listJSON is one row of `list --json`, and the start of `show --json`.
type listJSON struct {
	EventID      uuid.UUID     `json:"event_id"`
	EventType    string        `json:"event_type"`
	PartitionKey *string       `json:"partition_key"`
	Status       outbox.Status `json:"status"`
	Attempts     int           `json:"attempts"`
	LastError    *string       `json:"last_error"`
	CreatedAt    time.Time     `json:"created_at"`
	AgeSeconds   float64       `json:"age_seconds"`
	AvailableAt  time.Time     `json:"available_at"`
	UpdatedAt    time.Time     `json:"updated_at"`
}

func listRowJSON(r storage.Row) listJSON {
	return listJSON{
		EventID: r.ID, EventType: r.Type, PartitionKey: r.PartitionKey, Status: r.Status,
		Attempts: r.Attempts, LastError: r.LastError, CreatedAt: r.CreatedAt,
		AgeSeconds: r.Age.Seconds(), AvailableAt: r.AvailableAt, UpdatedAt: r.UpdatedAt,
	}
}
