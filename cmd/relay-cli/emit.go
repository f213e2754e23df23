package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/storage"
)

func emitCommand() *cli.Command {
	return &cli.Command{
		Name:  "emit",
		Usage: "insert test events, for smoke tests and demos",
		Description: "Inserts --count identical events in one transaction, as an application would, and\n" +
			"prints their ids (UUIDv7, in insertion order) one per line.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "type", Usage: "event type (required)"},
			&cli.StringFlag{Name: "key", Usage: "partition key (default: none)"},
			&cli.StringFlag{Name: "payload", Usage: "payload, a JSON document (default {})"},
			&cli.StringFlag{Name: "payload-file", Usage: "read the payload, any bytes, from `FILE` (- for stdin)"},
			&cli.StringSliceFlag{Name: "header", Usage: "add a header `KEY=VALUE` (repeat for several)"},
			&cli.IntFlag{Name: "count", Value: 1, Usage: "how many events to insert"},
			&cli.StringFlag{Name: "available-in", Usage: "make the events due after `DURATION` (30s, 1h)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			p, err := emitParams(c)
			if err != nil {
				return err
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			ids, err := store.Emit(c.Context, p)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, struct {
					Table     string      `json:"table"`
					EventType string      `json:"event_type"`
					Count     int         `json:"count"`
					EventIDs  []uuid.UUID `json:"event_ids"`
				}{store.Table(), p.Type, len(ids), ids})
			}
			for _, id := range ids {
				fmt.Fprintln(c.App.Writer, id)
			}
			fmt.Fprintf(c.App.ErrWriter, "emitted %s of type %s into %s\n", plural(int64(len(ids)), "event"), p.Type, store.Table())
			return nil
		},
	}
}

func emitParams(c *cli.Context) (storage.EmitParams, error) {
	p := storage.EmitParams{
		Type:         c.String("type"),
		PartitionKey: c.String("key"),
		Count:        c.Int("count"),
		Payload:      []byte("{}"),
	}
	if strings.TrimSpace(p.Type) == "" {
		return p, usagef("emit needs --type, the event type")
	}
	if c.IsSet("key") && p.PartitionKey == "" {
		return p, usagef("--key must not be empty; leave it out for no partition key")
	}
	if p.Count < 1 || p.Count > storage.EmitCountMax {
		return p, usagef("--count must be 1 to %d, got %d", storage.EmitCountMax, p.Count)
	}
	if c.IsSet("available-in") {
		d, err := parseDuration(c.String("available-in"))
		if err != nil {
			return p, usagef("--available-in: %w", err)
		}
		p.AvailableIn = d
	}

	switch {
	case c.IsSet("payload") && c.IsSet("payload-file"):
		return p, usagef("--payload and --payload-file cannot be combined")
	case c.IsSet("payload"):
		if !json.Valid([]byte(c.String("payload"))) {
			return p, usagef("--payload is not valid JSON; use --payload-file for other content")
		}
		p.Payload = []byte(c.String("payload"))
	case c.IsSet("payload-file"):
		data, err := readPayloadFile(c)
		if err != nil {
			return p, err
		}
		p.Payload = data
	}

	headers := map[string]string{}
	for _, h := range c.StringSlice("header") {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return p, usagef("--header %q: want KEY=VALUE", h)
		}
		if _, dup := headers[k]; dup {
			return p, usagef("--header %q given twice", k)
		}
		headers[k] = v
	}
	p.Headers = headers
	return p, nil
}

func readPayloadFile(c *cli.Context) ([]byte, error) {
	name := c.String("payload-file")
	if name == "-" {
		data, err := io.ReadAll(c.App.Reader)
		if err != nil {
			return nil, fmt.Errorf("read payload from stdin: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read --payload-file: %w", err)
	}
	return data, nil
}
