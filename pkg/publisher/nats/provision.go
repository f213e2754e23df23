package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/pkg/publisher"
)

// StreamDefault names the stream Provision creates when asked for none.
const StreamDefault = "OUTBOX"

// DuplicateWindowDefault is the duplicate window of the streams Provision
// creates. The relay may publish an event again after its lease expired
// (LEASE_TIMEOUT, 1m by default, plus REAPER_INTERVAL, 10s): a window above
// that drops the copy by Nats-Msg-Id. JetStream's own default is the same
// two minutes; it is set explicitly so that the stream says so.
const DuplicateWindowDefault = 2 * time.Minute

var _ publisher.Provisioner = (*Publisher)(nil)

// Provision creates the stream that captures the subjects of p.EventTypes
// (subject_prefix + event type; orders.> for every type under orders.), or
// adds the missing subjects to the stream of that name. A subject another
// stream already captures is left to it. Without a stream events go DEAD at
// once ("no JetStream stream captures subject").
func (p *Publisher) Provision(ctx context.Context, pp publisher.ProvisionParams) ([]publisher.Provisioned, error) {
	if len(pp.EventTypes) == 0 {
		return nil, errors.New("nats: name the event types the stream captures (orders.paid, or orders.> for every type under orders.)")
	}
	name := pp.Name
	if name == "" {
		name = StreamDefault
	}
	var subjects []string
	for _, t := range pp.EventTypes {
		s := p.cfg.SubjectPrefix + t
		if s == ">" {
			// A stream on every subject would capture JetStream's own API.
			return nil, errors.New("nats: a stream cannot capture every subject (>); name a prefix such as orders.>, or set subject_prefix")
		}
		subjects = append(subjects, s)
	}
	c, err := p.connection()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()

	// Subjects another stream captures are that stream's: adding them to
	// this one would be refused as overlapping.
	var out []publisher.Provisioned
	var want []string
	others := map[string]bool{}
	for _, s := range subjects {
		other, err := c.js.StreamNameBySubject(ctx, s)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			want = append(want, s)
		case err != nil:
			return nil, fmt.Errorf("nats: server %s: find the stream for %q: %w", c.server(), s, err)
		case other == name:
			want = append(want, s)
		default:
			others[other] = true
		}
	}
	for other := range others {
		d, err := p.describe(ctx, c, other, publisher.Exists)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	if len(want) == 0 {
		return out, nil
	}

	action := publisher.Exists
	s, err := c.js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = c.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: "events from Outbox Relay",
			Subjects:    want,
			Storage:     jetstream.FileStorage,
			Duplicates:  DuplicateWindowDefault,
		})
		if err != nil {
			return nil, fmt.Errorf("nats: server %s: create stream %s: %w", c.server(), name, err)
		}
		action = publisher.Created
	case err != nil:
		return nil, fmt.Errorf("nats: server %s: look up stream %s: %w", c.server(), name, err)
	default:
		cfg := s.CachedInfo().Config
		var added bool
		for _, w := range want {
			if !slices.Contains(cfg.Subjects, w) {
				cfg.Subjects = append(cfg.Subjects, w)
				added = true
			}
		}
		if added {
			if _, err := c.js.UpdateStream(ctx, cfg); err != nil {
				return nil, fmt.Errorf("nats: server %s: add subjects to stream %s: %w", c.server(), name, err)
			}
			action = publisher.Updated
		}
	}
	d, err := p.describe(ctx, c, name, action)
	if err != nil {
		return nil, err
	}
	return append(out, d), nil
}

// describe says what a stream captures and holds.
func (p *Publisher) describe(ctx context.Context, c *conn, name, action string) (publisher.Provisioned, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return publisher.Provisioned{}, fmt.Errorf("nats: server %s: look up stream %s: %w", c.server(), name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return publisher.Provisioned{}, fmt.Errorf("nats: server %s: stream %s: %w", c.server(), name, err)
	}
	detail := fmt.Sprintf("subjects %s, duplicate window %s, %s",
		strings.Join(info.Config.Subjects, " "), info.Config.Duplicates, messages(info.State.Msgs))
	if info.Config.Duplicates < DuplicateWindowDefault {
		detail += fmt.Sprintf("; a duplicate window under %s lets copies of an event published again after a lease expired into the stream", DuplicateWindowDefault)
	}
	return publisher.Provisioned{Kind: "stream", Name: name, Action: action, Detail: detail}, nil
}

func messages(n uint64) string {
	if n == 1 {
		return "1 message"
	}
	return fmt.Sprintf("%d messages", n)
}
