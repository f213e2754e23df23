package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/storage"
)

func showCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print every column of one event",
		ArgsUsage: "EVENT_ID",
		Description: "Prints every column. The payload is printed as text when it is UTF-8 without control\n" +
			"characters (other than newline, tab and carriage return), otherwise as base64;\n" +
			"headers are pretty-printed.",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("show takes one EVENT_ID, got %d arguments", c.NArg())
			}
			id, err := uuid.Parse(c.Args().First())
			if err != nil {
				return usagef("%q is not an event id (a UUID)", c.Args().First())
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			row, err := store.Get(c.Context, id)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, rowJSON(row))
			}
			return writeRowText(c.App.Writer, row)
		},
	}
}

// showJSON is `show --json`: every column under its own name, ages in
// seconds, the payload as text or base64 as payload_encoding says.
type showJSON struct {
	listJSON
	LockedBy        *string         `json:"locked_by"`
	LockedAt        *time.Time      `json:"locked_at"`
	DeliveredAt     *time.Time      `json:"delivered_at"`
	Seq             *int64          `json:"seq"`
	Headers         json.RawMessage `json:"headers"`
	Payload         string          `json:"payload"`
	PayloadEncoding string          `json:"payload_encoding"`
	PayloadBytes    int             `json:"payload_bytes"`
}

func rowJSON(r storage.Row) showJSON {
	payload, encoding := payloadText(r.Payload)
	headers := r.Headers
	if len(headers) == 0 {
		headers = json.RawMessage("{}")
	}
	return showJSON{
		listJSON: listRowJSON(r),
		LockedBy: r.LockedBy, LockedAt: r.LockedAt, DeliveredAt: r.DeliveredAt, Seq: r.Seq,
		Headers: headers, Payload: payload, PayloadEncoding: encoding, PayloadBytes: len(r.Payload),
	}
}

// payloadText returns the payload as text when it is printable UTF-8, and
// as base64 otherwise: binary data, and escape sequences that would drive
// the operator's terminal, are shown encoded.
func payloadText(p []byte) (text, encoding string) {
	if utf8.Valid(p) && !bytes.ContainsFunc(p, func(r rune) bool {
		return unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r'
	}) {
		return string(p), "text"
	}
	return base64.StdEncoding.EncodeToString(p), "base64"
}

func writeRowText(out io.Writer, r storage.Row) error {
	orNull := func(s *string) string {
		if s == nil {
			return "(null)"
		}
		return printable(*s)
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "(null)"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	seq := "(null)"
	if r.Seq != nil {
		seq = fmt.Sprint(*r.Seq)
	}
	tw := newTable(out)
	fields := [][2]string{
		{"event_id", r.ID.String()},
		{"event_type", printable(r.Type)},
		{"partition_key", orNull(r.PartitionKey)},
		{"status", string(r.Status)},
		{"attempts", fmt.Sprint(r.Attempts)},
		{"last_error", orNull(r.LastError)},
		{"available_at", when(&r.AvailableAt)},
		{"locked_by", orNull(r.LockedBy)},
		{"locked_at", when(r.LockedAt)},
		{"delivered_at", when(r.DeliveredAt)},
		{"created_at", when(&r.CreatedAt) + " (" + formatAge(r.Age) + " ago)"},
		{"updated_at", when(&r.UpdatedAt)},
		{"seq", seq},
	}
	for _, f := range fields {
		fmt.Fprintf(tw, "%s\t%s\n", f[0], f[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var headers bytes.Buffer
	if err := json.Indent(&headers, r.Headers, "", "  "); err != nil {
		headers.Reset()
		headers.Write(r.Headers)
	}
	fmt.Fprintf(out, "\nheaders:\n%s\n", indentLines(printableLines(headers.String())))

	payload, encoding := payloadText(r.Payload)
	fmt.Fprintf(out, "\npayload (%d bytes, %s):\n%s\n", len(r.Payload), encoding, payload)
	return nil
}

func indentLines(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// printableLines is printable for each line of s.
func printableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n")
}
