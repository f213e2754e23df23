package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-relay/relay/internal/duration"
	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// keepFor is DELIVERED_RETENTION or DEAD_RETENTION: a duration that may use
// d and w (7d, 2w), 0, or unset for forever.
type keepFor time.Duration

// forever is an unset retention: rows are kept, as before retention
// existed.
const forever = keepFor(retention.Forever)

func (k *keepFor) UnmarshalText(b []byte) error {
	d, err := duration.Parse(string(b))
	if err != nil {
		return err
	}
	*k = keepFor(d)
	return nil
}

func (k keepFor) String() string {
	if k < 0 {
		return "forever"
	}
	return time.Duration(k).String()
}

// validateRetention refuses DEAD_RETENTION=0, which the retention loop
// could do but the relay does not offer: DEAD rows are what operators look
// at and retry, and deleting them as they die loses events without a
// trace. The retention Config checks the rest.
func (c config) validateRetention() error {
	if c.DeadRetention == 0 {
		return errors.New("DEAD_RETENTION=0 would delete events the moment they fail, before anyone can look at them or retry them; keep them for a while (such as DEAD_RETENTION=7d), or leave it unset to keep them forever (only DELIVERED_RETENTION=0 deletes at once)")
	}
	return nil
}

// retentionConfig is what the retention loop keeps to.
func (c config) retentionConfig(log *slog.Logger) retention.Config {
	return retention.Config{
		Delivered: time.Duration(c.DeliveredRetention),
		Dead:      time.Duration(c.DeadRetention),
		Interval:  c.RetentionInterval,
		Logger:    log,
	}
}

// retentionNotes are start-up warnings about settings that work but may
// surprise.
func (c config) retentionNotes() []string {
	var notes []string
	if c.DeadRetention >= 0 && c.OrderingOnDead == string(storage.DeadBlock) {
		notes = append(notes, fmt.Sprintf("DEAD_RETENTION=%s deletes DEAD events after that long, which lets the keys ORDERING_ON_DEAD=block holds behind them go on without an operator", c.DeadRetention))
	}
	return notes
}

// canDelete checks at start that the relay may delete from the table, which
// retention needs: without it DELIVERED_RETENTION=0 could settle nothing,
// and every delivered event would be taken back by the reaper and sent
// again. It runs a prune that matches no row (DELIVERED rows older than a
// century): the database checks the privilege all the same.
func canDelete(ctx context.Context, store storage.Admin) error {
	const century = 100 * 365 * 24 * time.Hour
	_, err := store.Prune(ctx, storage.PruneParams{Status: outbox.StatusDelivered, OlderThan: century, BatchSize: 1})
	if err != nil && !errors.Is(err, storage.ErrUnreachable) && ctx.Err() == nil {
		return fmt.Errorf("DELIVERED_RETENTION and DEAD_RETENTION need DELETE on the table, and it failed: %w; grant it (relay-cli grants gives the outbox_relay role DELETE) or unset them", err)
	}
	return err
}
