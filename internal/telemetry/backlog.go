package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outbox-relay/relay/pkg/storage"
)

// The backlog gauges, read from the BacklogPoller's last reading; the first
// two are Open Outbox Relay's. Its query is timed in storage.latency with
// op = backlog.
const (
	MetricPendingCount = "openoutbox.backlog.pending_count"
	MetricOldestAge    = "openoutbox.backlog.oldest_age_seconds"
	MetricDeadCount    = "openoutbox.backlog.dead_count"
)

const (
	opBacklog = "backlog"

	statusNew      = "new"
	statusRetrying = "retrying"
)

var (
	setNew      = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusNew)))
	setRetrying = metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStatus, statusRetrying)))
)

func (t *Telemetry) createBacklogInstruments() error {
	m := t.meter
	var errs [3]error
	var pending, dead metric.Int64ObservableGauge
	var oldest metric.Float64ObservableGauge
	pending, errs[0] = m.Int64ObservableGauge(MetricPendingCount, metric.WithUnit(unitEvents),
		metric.WithDescription("PENDING events in the table: new (never attempted) or retrying. Read every BACKLOG_INTERVAL."))
	oldest, errs[1] = m.Float64ObservableGauge(MetricOldestAge, metric.WithUnit(unitSeconds),
		metric.WithDescription("Age (since created_at, by the database's clock) of the oldest PENDING event that is due (available_at passed), 0 when none is due: events scheduled for later or backing off before a retry do not count. Read every BACKLOG_INTERVAL."))
	dead, errs[2] = m.Int64ObservableGauge(MetricDeadCount, metric.WithUnit(unitEvents),
		metric.WithDescription("DEAD events in the table. Read every BACKLOG_INTERVAL."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		p := t.backlog.Load()
		if p == nil {
			return nil
		}
		// Until the first reading there is nothing to report: a zero
		// would claim an empty backlog.
		r, ok, _ := p.Last()
		if !ok {
			return nil
		}
		o.ObserveInt64(pending, r.PendingNew, setNew)
		o.ObserveInt64(pending, r.PendingRetrying, setRetrying)
		o.ObserveFloat64(oldest, r.OldestPendingAge.Seconds())
		o.ObserveInt64(dead, r.Dead)
		return nil
	}, pending, oldest, dead)
	return err
}

// BacklogIntervalDefault is how often the backlog is read.
const BacklogIntervalDefault = 15 * time.Second

// backlogTimeout bounds one backlog query, so a hung database cannot stall
// the poller past a few intervals.
const backlogTimeout = 10 * time.Second

// BacklogSource reads the table's backlog in one cheap query; every
// storage.Admin has it.
type BacklogSource interface {
	Backlog(ctx context.Context) (storage.Backlog, error)
}

// BacklogReading is one successful read of the backlog.
type BacklogReading struct {
	storage.Backlog
	// ReadAt is when it was read, by the relay's clock.
	ReadAt time.Time
}

// BacklogPoller reads the backlog on an interval, not per batch or per
// scrape, so that the gauges cost the database one small query per
// interval however many relays and scrapers there are. The gauges and
// /stats report its last reading.
type BacklogPoller struct {
	src      BacklogSource
	interval time.Duration
	log      *slog.Logger
	t        *Telemetry

	mu      sync.Mutex
	last    BacklogReading
	read    bool
	lastErr error
}

// PollBacklog returns a poller whose readings feed the backlog gauges
// (pending_count, oldest_age_seconds, dead_count) every
// Config.BacklogInterval; start it with Run. log nil discards its
// warnings.
func (t *Telemetry) PollBacklog(src BacklogSource, log *slog.Logger) *BacklogPoller {
	interval := t.backlogInterval
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &BacklogPoller{src: src, interval: interval, log: log, t: t}
	t.backlog.Store(p)
	return p
}

// Run reads the backlog at once and then every interval until ctx ends.
func (p *BacklogPoller) Run(ctx context.Context) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		if err := p.RunOnce(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("reading the backlog failed; the gauges keep the last reading", "error", err, "retry_in", p.interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// RunOnce reads the backlog now. A failed read keeps the last reading: a
// gap in the gauges would fire "absent" alerts, while relay.state and
// /readyz already say that the database is down.
func (p *BacklogPoller) RunOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, backlogTimeout)
	defer cancel()
	began := time.Now()
	b, err := p.src.Backlog(ctx)
	p.t.storageLatency.Record(ctx, time.Since(began).Seconds(), storageSet(opBacklog, err))

	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = err
	if err != nil {
		return err
	}
	p.last = BacklogReading{Backlog: b, ReadAt: time.Now()}
	p.read = true
	return nil
}

// Last returns the latest successful reading (ok is false before the first
// one) and the error of the most recent read if it failed.
func (p *BacklogPoller) Last() (r BacklogReading, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, p.read, p.lastErr
}
