package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/internal/bytesize"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

func partitionsCommand() *cli.Command {
	return &cli.Command{
		Name:  "partitions",
		Usage: "list a partitioned table's partitions with their rows by status (PostgreSQL)",
		Description: "For a table created with `migrate --partition-by day|hour`: each partition, oldest\n" +
			"first and the default partition last, with the created_at range it covers, its rows by\n" +
			"status and its size on disk. Counting reads the whole table once. On a table that is\n" +
			"not partitioned it says so and lists nothing.\n\n" +
			"--maintain does what the relay's retention does each cycle, for a CronJob that runs as\n" +
			"the table's owner when the relay's role may not create and drop partitions: creates the\n" +
			"partitions --ahead covers and drops every expired partition whose rows are all DELIVERED\n" +
			"or DEAD and past --delivered-retention / --dead-retention (unset: kept forever).",
		Flags: []cli.Flag{
			jsonFlag(),
			&cli.BoolFlag{Name: "maintain", Usage: "create partitions ahead and drop finished ones, then report what it did"},
			&cli.StringFlag{Name: "ahead", Value: "2d", Usage: "with --maintain: partitions must exist `DURATION` ahead of now"},
			&cli.StringFlag{Name: "delivered-retention", Usage: "with --maintain: DELIVERED rows are kept for `DURATION` (unset: forever)"},
			&cli.StringFlag{Name: "dead-retention", Usage: "with --maintain: DEAD rows are kept for `DURATION` (unset: forever)"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			var policy storage.PartitionPolicy
			if c.Bool("maintain") {
				var err error
				if policy, err = partitionPolicy(c); err != nil {
					return err
				}
			} else {
				for _, f := range []string{"ahead", "delivered-retention", "dead-retention"} {
					if c.IsSet(f) {
						return usagef("--%s needs --maintain", f)
					}
				}
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			p, ok := store.(storage.Partitioner)
			if !ok {
				return usagef("partitions: %s tables are not partitioned by the relay (PostgreSQL only)", driverName(c))
			}
			by, err := p.Partitioning(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("maintain") {
				if by == "" {
					return fmt.Errorf("table %s is not partitioned: nothing to maintain (`relay-cli prune` deletes old rows)", store.Table())
				}
				rep, err := p.MaintainPartitions(c.Context, policy)
				if perr := printMaintained(c, store.Table(), rep); perr != nil {
					return perr
				}
				return err
			}
			var parts []storage.PartitionInfo
			if by != "" {
				if parts, err = p.Partitions(c.Context); err != nil {
					return err
				}
			}
			return printPartitions(c, store.Table(), by, parts)
		},
	}
}

// partitionPolicy reads --ahead and the retentions of --maintain.
func partitionPolicy(c *cli.Context) (storage.PartitionPolicy, error) {
	p := storage.PartitionPolicy{DeliveredRetention: -1, DeadRetention: -1}
	var err error
	if p.Ahead, err = parseDuration(c.String("ahead")); err != nil {
		return p, usagef("--ahead: %w", err)
	}
	for flag, d := range map[string]*time.Duration{"delivered-retention": &p.DeliveredRetention, "dead-retention": &p.DeadRetention} {
		if c.IsSet(flag) {
			if *d, err = parseDuration(c.String(flag)); err != nil {
				return p, usagef("--%s: %w", flag, err)
			}
		}
	}
	return p, nil
}

// printMaintained reports one maintenance, as text or --json.
func printMaintained(c *cli.Context, table string, rep storage.PartitionReport) error {
	out := c.App.Writer
	if c.Bool("json") {
		type kept struct {
			Name   string `json:"name"`
			Reason string `json:"reason"`
		}
		keptJSON := []kept{}
		for _, k := range rep.Kept {
			keptJSON = append(keptJSON, kept{k.Name, k.Reason})
		}
		rows := rep.DroppedRows
		if rows == nil {
			rows = map[string]int64{}
		}
		return writeJSON(out, struct {
			Table       string           `json:"table"`
			Created     []string         `json:"created"`
			Dropped     []string         `json:"dropped"`
			DroppedRows map[string]int64 `json:"dropped_rows"`
			Kept        []kept           `json:"kept"`
		}{table, nonNil(rep.Created), nonNil(rep.Dropped), rows, keptJSON})
	}
	for _, name := range rep.Created {
		fmt.Fprintf(out, "created  partition %s\n", name)
	}
	for _, name := range rep.Dropped {
		fmt.Fprintf(out, "dropped  partition %s\n", name)
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(out, "kept     partition %s: %s\n", k.Name, printable(k.Reason))
	}
	var rows int64
	for _, n := range rep.DroppedRows {
		rows += n
	}
	_, err := fmt.Fprintf(out, "table %s: %d created, %d dropped (%s), %d kept\n",
		table, len(rep.Created), len(rep.Dropped), plural(rows, "row"), len(rep.Kept))
	return err
}

// driverName names the database STORAGE_URL points at, for messages.
func driverName(c *cli.Context) string {
	d, err := storage.Lookup(c.String("storage-url"))
	if err != nil {
		return "these"
	}
	return d.Name
}

// partitionJSON is one partition in the --json form; from and to are null
// for the default partition.
type partitionJSON struct {
	Name    string       `json:"name"`
	Default bool         `json:"default"`
	From    *time.Time   `json:"from"`
	To      *time.Time   `json:"to"`
	Rows    statusCounts `json:"rows"`
	Bytes   int64        `json:"bytes"`
}

func printPartitions(c *cli.Context, table, by string, parts []storage.PartitionInfo) error {
	out := c.App.Writer
	if c.Bool("json") {
		list := make([]partitionJSON, 0, len(parts))
		for _, p := range parts {
			j := partitionJSON{Name: p.Name, Default: p.From.IsZero(), Rows: partitionCounts(p), Bytes: p.Bytes}
			if !p.From.IsZero() {
				from, to := p.From.UTC(), p.To.UTC()
				j.From, j.To = &from, &to
			}
			list = append(list, j)
		}
		return writeJSON(out, struct {
			Table       string          `json:"table"`
			PartitionBy string          `json:"partition_by"`
			Partitions  []partitionJSON `json:"partitions"`
		}{table, by, list})
	}
	if by == "" {
		_, err := fmt.Fprintf(out, "table %s is not partitioned (`relay-cli migrate --partition-by day|hour` creates a partitioned table)\n", table)
		return err
	}
	w := newTable(out)
	fmt.Fprintln(w, "PARTITION\tFROM (UTC)\tTO (UTC)\tPENDING\tDELIVERING\tDELIVERED\tDEAD\tSIZE")
	var rows int64
	for _, p := range parts {
		from, to := "default", "-"
		if !p.From.IsZero() {
			from, to = p.From.UTC().Format("2006-01-02 15:04"), p.To.UTC().Format("2006-01-02 15:04")
		}
		n := partitionCounts(p)
		rows += n.Pending + n.Delivering + n.Delivered + n.Dead
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", p.Name, from, to, n.Pending, n.Delivering, n.Delivered, n.Dead, bytesize.Format(p.Bytes))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "table %s is partitioned by %s: %s, %s\n", table, by, plural(int64(len(parts)), "partition"), plural(rows, "row"))
	return err
}

func partitionCounts(p storage.PartitionInfo) statusCounts {
	return statusCounts{
		Pending:    p.Rows[string(outbox.StatusPending)],
		Delivering: p.Rows[string(outbox.StatusDelivering)],
		Delivered:  p.Rows[string(outbox.StatusDelivered)],
		Dead:       p.Rows[string(outbox.StatusDead)],
	}
}
