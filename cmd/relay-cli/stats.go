package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/internal/bytesize"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// watchIntervalMin keeps --watch from turning into a load test.
const watchIntervalMin = 100 * time.Millisecond

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "count events per status, the backlog and who holds leases",
		Description: "Counts per status (PENDING split into new and retrying), the oldest pending age (of\n" +
			"the oldest PENDING event that is due: scheduled and backing-off events are not late),\n" +
			"deliveries in the last minute and hour, the event types with the largest backlog\n" +
			"and the relays holding leases now, all from one snapshot.",
		Flags: []cli.Flag{
			jsonFlag(),
			&cli.StringFlag{Name: "watch", Usage: "redraw every `INTERVAL` (2s, 1m) until interrupted"},
			&cli.IntFlag{Name: "top", Value: storage.StatsTopTypesDefault, Usage: "how many event types to list by backlog"},
			&cli.StringFlag{Name: "delivered-retention", EnvVars: []string{"DELIVERED_RETENTION"},
				Usage: "the relays' DELIVERED_RETENTION (`DURATION`), read from the environment as the relay reads it: 0 says the table runs in delete mode"},
			&cli.StringFlag{Name: "dead-retention", EnvVars: []string{"DEAD_RETENTION"},
				Usage: "the relays' DEAD_RETENTION (`DURATION`), read from the environment as the relay reads it"},
			&cli.StringFlag{Name: "sweep-interval", EnvVars: []string{"SWEEP_INTERVAL"},
				Usage: "the relays' SWEEP_INTERVAL (`DURATION`, default 10s), read from the environment as the relay reads it: on MySQL/MariaDB, how long an event of a transaction that commits late may wait"},
			slotFlag(),
			&cli.StringFlag{Name: "publication", Usage: "publication `NAME` of CAPTURE=wal (default outbox_relay_<schema>_<table>, as WAL_PUBLICATION_NAME)", EnvVars: []string{"WAL_PUBLICATION_NAME"}},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			ret, err := readRetention(c)
			if err != nil {
				return err
			}
			sweep := storage.SweepIntervalDefault
			if v := c.String("sweep-interval"); v != "" {
				if sweep, err = parseDuration(v); err != nil || sweep <= 0 {
					if err == nil {
						err = fmt.Errorf("must be positive, got %s", v)
					}
					return usagef("--sweep-interval (or SWEEP_INTERVAL): %w", err)
				}
			}
			top := c.Int("top")
			if top < 1 {
				return usagef("--top must be at least 1, got %d", top)
			}
			var interval time.Duration
			if c.IsSet("watch") {
				if interval, err = parseDuration(c.String("watch")); err != nil {
					return usagef("--watch: %w", err)
				}
				if interval < watchIntervalMin {
					return usagef("--watch must be at least %s, got %s", watchIntervalMin, c.String("watch"))
				}
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			bound := claimBoundOf(store, sweep)
			params := storage.StatsParams{TopTypes: top}
			if interval == 0 {
				st, err := store.Stats(c.Context, params)
				if err != nil {
					return err
				}
				return printStats(c, store, st, ret, bound, false)
			}
			return watchStats(c, store, params, ret, bound, interval)
		},
	}
}

// watchStats redraws until interrupted, which is how it is meant to end:
// exit code 0. A database error on the first read ends it (the URL or table
// is probably wrong); later ones are reported and the watch goes on.
func watchStats(c *cli.Context, store storage.Storage, p storage.StatsParams, ret retentionSettings, bound *storage.ClaimBound, interval time.Duration) error {
	ctx := c.Context
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for first := true; ; first = false {
		st, err := store.Stats(ctx, p)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && first:
			return err
		case err != nil:
			fmt.Fprintf(c.App.ErrWriter, "relay-cli: %v\n", err)
		default:
			if err := printStats(c, store, st, ret, bound, true); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// statsJSON is the --json form; keys are stable, ages in seconds.
type statsJSON struct {
	Table                  string        `json:"table"`
	ObservedAt             time.Time     `json:"observed_at"`
	Counts                 statusCounts  `json:"counts"`
	PendingNew             int64         `json:"pending_new"`
	PendingRetrying        int64         `json:"pending_retrying"`
	OldestPendingAgeSec    *float64      `json:"oldest_pending_age_seconds"`
	OldestPendingCreatedAt *time.Time    `json:"oldest_pending_created_at"`
	DeliveredLastMinute    int64         `json:"delivered_last_minute"`
	DeliveredLastHour      int64         `json:"delivered_last_hour"`
	TopEventTypes          []typeJSON    `json:"top_event_types"`
	Leases                 []leaseJSON   `json:"leases"`
	BlockedKeys            []blockedJSON `json:"blocked_keys"`
	// DeleteMode is DELIVERED_RETENTION=0 as relay-cli's environment (or
	// flag) says; the retentions are null when unset (kept forever).
	DeleteMode         bool     `json:"delete_mode"`
	DeliveredRetention *float64 `json:"delivered_retention_seconds"`
	DeadRetention      *float64 `json:"dead_retention_seconds"`
	// WALSlot is the CAPTURE=wal replication slot, when it exists.
	WALSlot *slotJSON `json:"wal_slot,omitempty"`
	// BinlogPosition is the CAPTURE=binlog reader's saved position and
	// its lag, when one is saved.
	BinlogPosition *binlogJSON `json:"binlog_position,omitempty"`
	// ClaimBound is the storage's claim bound at the relays'
	// SWEEP_INTERVAL, as the relay's /readyz reports it; absent for a
	// storage that does not say.
	ClaimBound *claimBoundJSON `json:"claim_bound,omitempty"`
}

// claimBoundJSON is storage.ClaimBound in stats --json, the relay's
// /readyz claim_bound: exact, or how long an event of a transaction that
// commits late may wait, why and what fixes it.
type claimBoundJSON struct {
	Exact                 bool     `json:"exact"`
	LateCommitWaitSeconds *float64 `json:"late_commit_wait_seconds,omitempty"`
	Why                   string   `json:"why,omitempty"`
	Fix                   string   `json:"fix,omitempty"`
}

// claimBoundOf asks the storage for its claim bound at sweep, the relays'
// SWEEP_INTERVAL; nil when it does not say.
func claimBoundOf(store storage.Storage, sweep time.Duration) *storage.ClaimBound {
	cb, ok := store.(storage.ClaimBounder)
	if !ok {
		return nil
	}
	b := cb.ClaimBound(sweep)
	return &b
}

// newClaimBoundJSON is b in stats' form.
func newClaimBoundJSON(b storage.ClaimBound) *claimBoundJSON {
	j := &claimBoundJSON{Exact: b.Exact, Why: b.Why, Fix: b.Fix}
	if !b.Exact {
		j.LateCommitWaitSeconds = seconds(b.LateCommitWait)
	}
	return j
}

// text is the bound in words, for stats' text form.
func (b *claimBoundJSON) text() string {
	if b.Exact {
		return "exact: the claims find an event however late its transaction commits"
	}
	return fmt.Sprintf("not exact: an event of a transaction that commits late waits up to %s (SWEEP_INTERVAL) plus one claim; %s; to remove the wait, %s",
		time.Duration(*b.LateCommitWaitSeconds*float64(time.Second)), b.Why, b.Fix)
}

// slotJSON is the CAPTURE=wal slot in stats --json.
type slotJSON struct {
	Name string `json:"name"`
	// Publication is the publication the slot is read with; a slot whose
	// publication is missing or does not hold the table serves nothing,
	// and relays claim every event from the table until it is fixed.
	Publication   publicationJSON `json:"publication"`
	Active        bool            `json:"active"`
	WALStatus     string          `json:"wal_status"`
	RetainedBytes int64           `json:"retained_bytes"`
}

// publicationJSON is the CAPTURE=wal publication in stats --json.
type publicationJSON struct {
	Name           string `json:"name"`
	Exists         bool   `json:"exists"`
	PublishesTable bool   `json:"publishes_table"`
	Inserts        bool   `json:"publishes_inserts_via_root"`
}

// state says what the publication means for the slot, in words.
func (p publicationJSON) state() string {
	switch {
	case !p.Exists:
		return "does not exist: relays claim every event from the table; run relay-cli migrate --capture wal"
	case !p.PublishesTable:
		return "does not hold the table: relays claim every event from the table; run relay-cli migrate --capture wal"
	case !p.Inserts:
		return "does not publish inserts via the table: relays claim every event from the table; see docs/operations.md"
	}
	return "ok"
}

// retentionSettings are the relays' DELIVERED_RETENTION and DEAD_RETENTION
// as relay-cli's environment or flags give them; negative when unset.
// The table does not record them: relay-cli runs with the relay's
// environment (in its container, from its ConfigMap or env file) or is
// told with the flags.
type retentionSettings struct {
	delivered, dead time.Duration
}

func readRetention(c *cli.Context) (retentionSettings, error) {
	r := retentionSettings{delivered: -1, dead: -1}
	for _, f := range []struct {
		flag, env string
		to        *time.Duration
	}{{"delivered-retention", "DELIVERED_RETENTION", &r.delivered}, {"dead-retention", "DEAD_RETENTION", &r.dead}} {
		v := c.String(f.flag)
		if v == "" {
			continue
		}
		d, err := parseDuration(v)
		if err != nil {
			return r, usagef("--%s (or %s): %w", f.flag, f.env, err)
		}
		*f.to = d
	}
	return r, nil
}

func (r retentionSettings) deleteMode() bool { return r.delivered == 0 }

func (r retentionSettings) deliveredSeconds() *float64 { return seconds(r.delivered) }

func (r retentionSettings) deadSeconds() *float64 { return seconds(r.dead) }

func seconds(d time.Duration) *float64 {
	if d < 0 {
		return nil
	}
	s := d.Seconds()
	return &s
}

// kept says how long the relays keep a status's rows, when they remove
// them at all.
func (r retentionSettings) kept(d time.Duration, name string) string {
	if d < 0 {
		return ""
	}
	return fmt.Sprintf(", removed after %s (%s)", formatAge(d), name)
}

type blockedJSON struct {
	PartitionKey  string `json:"partition_key"`
	DeadEventID   string `json:"dead_event_id"`
	DeadEventType string `json:"dead_event_type"`
	Waiting       int64  `json:"waiting"`
}

type statusCounts struct {
	Pending    int64 `json:"pending"`
	Delivering int64 `json:"delivering"`
	Delivered  int64 `json:"delivered"`
	Dead       int64 `json:"dead"`
}

// typeJSON is one event type's backlog. OldestPendingAgeSec means what the
// top level's does: the age of the type's oldest due PENDING event, null when
// none is due.
type typeJSON struct {
	EventType           string   `json:"event_type"`
	Pending             int64    `json:"pending"`
	OldestPendingAgeSec *float64 `json:"oldest_pending_age_seconds"`
}

type leaseJSON struct {
	LockedBy          string     `json:"locked_by"`
	Events            int64      `json:"events"`
	OldestLockedAt    *time.Time `json:"oldest_locked_at"`
	OldestLeaseAgeSec float64    `json:"oldest_lease_age_seconds"`
}

// storeBound is the storage's claim bound at the relays' SWEEP_INTERVAL,
// nil when the storage does not say; it is shown as it stands beside a
// log reader that streams now, if one does (storage.ClaimBound.BesideLog).
func printStats(c *cli.Context, store storage.Storage, st storage.Stats, ret retentionSettings, storeBound *storage.ClaimBound, watching bool) error {
	out := c.App.Writer
	slot, err := walSlot(c.Context, store, c.String("slot"), c.String("publication"))
	if err != nil {
		return err
	}
	position, err := binlogPosition(c.Context, store)
	if err != nil {
		return err
	}
	var bound *claimBoundJSON
	if storeBound != nil {
		streaming := slot != nil && slot.Active || position != nil && position.Active
		bound = newClaimBoundJSON(storeBound.BesideLog(streaming))
	}
	if c.Bool("json") {
		v := statsJSON{
			Table:      store.Table(),
			ObservedAt: st.ObservedAt,
			Counts: statusCounts{
				Pending: st.Pending(), Delivering: st.Delivering, Delivered: st.Delivered, Dead: st.Dead,
			},
			PendingNew:          st.PendingNew,
			PendingRetrying:     st.PendingRetrying,
			DeliveredLastMinute: st.DeliveredLastMinute,
			DeliveredLastHour:   st.DeliveredLastHour,
			TopEventTypes:       []typeJSON{},
			Leases:              []leaseJSON{},
			BlockedKeys:         []blockedJSON{},
			DeleteMode:          ret.deleteMode(),
			DeliveredRetention:  ret.deliveredSeconds(),
			DeadRetention:       ret.deadSeconds(),
			WALSlot:             slot,
			BinlogPosition:      position,
			ClaimBound:          bound,
		}
		for _, b := range st.BlockedKeys {
			v.BlockedKeys = append(v.BlockedKeys, blockedJSON{b.Key, b.DeadEventID.String(), b.DeadEventType, b.Waiting})
		}
		if !st.OldestPendingAt.IsZero() {
			age := st.OldestPendingAge.Seconds()
			v.OldestPendingAgeSec, v.OldestPendingCreatedAt = &age, &st.OldestPendingAt
		}
		for _, t := range st.TopTypes {
			tj := typeJSON{EventType: t.EventType, Pending: t.Pending}
			if t.OldestPendingAge != 0 {
				age := t.OldestPendingAge.Seconds()
				tj.OldestPendingAgeSec = &age
			}
			v.TopEventTypes = append(v.TopEventTypes, tj)
		}
		for _, l := range st.Leases {
			lj := leaseJSON{LockedBy: l.RelayID, Events: l.Events, OldestLeaseAgeSec: l.OldestLeaseAge.Seconds()}
			if !l.OldestLockedAt.IsZero() {
				lj.OldestLockedAt = &l.OldestLockedAt
			}
			v.Leases = append(v.Leases, lj)
		}
		if watching {
			// One object per line, for consumers that read a stream.
			return json.NewEncoder(out).Encode(v)
		}
		return writeJSON(out, v)
	}

	if watching {
		if isTerminal(out) {
			fmt.Fprint(out, "\x1b[H\x1b[2J") // home and clear: redraw in place
		} else {
			fmt.Fprintln(out)
		}
	}
	if err := writeStatsText(out, store.Table(), st, ret); err != nil {
		return err
	}
	if bound != nil {
		if _, err := fmt.Fprintf(out, "\nclaims: %s\n", bound.text()); err != nil {
			return err
		}
	}
	if position != nil {
		if err := writeBinlogText(out, position); err != nil {
			return err
		}
	}
	if slot != nil {
		state := "no relay streams from it"
		if slot.Active {
			state = "a relay streams from it"
		}
		_, err := fmt.Fprintf(out, "\nreplication slot %s (CAPTURE=wal): %s; keeps %s of WAL; wal_status %s\npublication %s: %s\n",
			slot.Name, state, bytesize.Format(slot.RetainedBytes), slot.WALStatus, slot.Publication.Name, slot.Publication.state())
		return err
	}
	return nil
}

// walSlot reads the CAPTURE=wal slot name (default the table's) of a
// PostgreSQL table; nil when there is none (a polled table, or MySQL).
func walSlot(ctx context.Context, store storage.Storage, name, publication string) (*slotJSON, error) {
	pg, ok := store.(*postgres.Store)
	if !ok {
		return nil, nil
	}
	table := pg.TableName()
	cfg := pgwal.Config{Schema: table.Schema, Table: table.Name, Slot: name, Publication: publication}
	name = cfg.SlotName()
	db, _ := pg.SQL()
	st, err := pgwal.ReadSlot(ctx, db, name)
	if err != nil || !st.Exists {
		return nil, err
	}
	pub, err := pgwal.ReadPublication(ctx, db, cfg)
	if err != nil {
		return nil, err
	}
	return &slotJSON{Name: name, Active: st.Active, WALStatus: st.WALStatus, RetainedBytes: st.RetainedBytes,
		Publication: publicationJSON{Name: cfg.PublicationName(), Exists: pub.Exists, PublishesTable: pub.PublishesTable, Inserts: pub.Inserts}}, nil
}

func writeStatsText(out io.Writer, table string, st storage.Stats, ret retentionSettings) error {
	fmt.Fprintf(out, "table %s at %s\n\n", table, st.ObservedAt.UTC().Format(time.RFC3339))
	tw := newTable(out)
	fmt.Fprintln(tw, "STATUS\tEVENTS\tDETAIL")
	pendingDetail := fmt.Sprintf("new %d, retrying %d", st.PendingNew, st.PendingRetrying)
	if st.Pending() > 0 {
		pendingDetail += ", oldest pending " + oldestPending(st.OldestPendingAge, !st.OldestPendingAt.IsZero())
	}
	fmt.Fprintf(tw, "PENDING\t%d\t%s\n", st.Pending(), pendingDetail)
	fmt.Fprintf(tw, "DELIVERING\t%d\t%d relay(s) holding leases\n", st.Delivering, len(st.Leases))
	if ret.deleteMode() {
		fmt.Fprintf(tw, "DELIVERED\t%d\tdelete mode (DELIVERED_RETENTION=0): rows are deleted as they are delivered; relays count deliveries (openoutbox_events_total)\n", st.Delivered)
	} else {
		fmt.Fprintf(tw, "DELIVERED\t%d\tlast minute %d, last hour %d%s\n", st.Delivered, st.DeliveredLastMinute, st.DeliveredLastHour,
			ret.kept(ret.delivered, "DELIVERED_RETENTION"))
	}
	fmt.Fprintf(tw, "DEAD\t%d\t%s\n", st.Dead, strings.TrimPrefix(ret.kept(ret.dead, "DEAD_RETENTION"), ", "))
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(out, "\nBACKLOG BY EVENT TYPE")
	if len(st.TopTypes) == 0 {
		fmt.Fprintln(out, "  (nothing pending)")
	} else {
		tw = newTable(out)
		fmt.Fprintln(tw, "EVENT TYPE\tPENDING\tOLDEST PENDING")
		for _, t := range st.TopTypes {
			// The storage reports 0 for a type with nothing due.
			fmt.Fprintf(tw, "%s\t%d\t%s\n", printable(t.EventType), t.Pending, oldestPending(t.OldestPendingAge, t.OldestPendingAge != 0))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "\nLEASES")
	if len(st.Leases) == 0 {
		fmt.Fprintln(out, "  (no relay holds a lease)")
	} else {
		tw = newTable(out)
		fmt.Fprintln(tw, "RELAY\tEVENTS\tOLDEST LEASE")
		for _, l := range st.Leases {
			relay := printable(l.RelayID)
			if relay == "" {
				relay = "(none)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", relay, l.Events, formatAge(l.OldestLeaseAge))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	// Only ORDERING_ON_DEAD=block holds these keys, so the section appears
	// only when there is something to say.
	if len(st.BlockedKeys) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nKEYS BEHIND A DEAD EVENT (held under ORDERING_ON_DEAD=block; retry-dead --id or prune to release)")
	tw = newTable(out)
	fmt.Fprintln(tw, "PARTITION KEY\tWAITING\tDEAD EVENT\tTYPE")
	for _, b := range st.BlockedKeys {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", printable(b.Key), b.Waiting, b.DeadEventID, printable(b.DeadEventType))
	}
	return tw.Flush()
}

// oldestPending writes the oldest pending age, which counts only events that
// are due, the same in the headline and per event type.
func oldestPending(age time.Duration, due bool) string {
	if !due {
		return "none due"
	}
	return formatAge(age)
}
