package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// Admin is what operators need: relay-cli, the metrics' backlog gauges and
// the console reach a table through it and nothing else. Methods that
// change rows never touch a PENDING row's lease or a DELIVERING row. On a
// table that does not exist every method returns an error wrapping
// ErrTableMissing that says to run `relay-cli migrate`.
type Admin interface {
	// Backlog reads the work waiting, cheaply enough to be called every few
	// seconds on a table with a long delivered history.
	Backlog(ctx context.Context) (Backlog, error)
	// Stats reads a consistent snapshot of the table, p checked and
	// defaulted by driverkit.RunStats.
	Stats(ctx context.Context, p StatsParams) (Stats, error)
	// List returns rows newest first (created_at, then the later insert
	// first, then event_id), or oldest first when asked, without payload
	// and headers; none match: an empty list and no error. p is checked
	// and defaulted by its WithDefaults, and its conditions are the ones
	// p.Filters returns, in p.Direction().
	List(ctx context.Context, p ListParams) ([]Row, error)
	// Get returns every column of one row, or an error wrapping
	// ErrEventNotFound.
	Get(ctx context.Context, id uuid.UUID) (Row, error)
	// Prune deletes DELIVERED or DEAD rows older than p.OlderThan in
	// batches; in a dry run it only counts them. driverkit.RunPrune (or
	// driverkit.PruneWith) decides the batches; the driver supplies the
	// statements.
	Prune(ctx context.Context, p PruneParams) (PruneResult, error)
	// RetryDead moves the DEAD rows p selects back to PENDING, attempts 0
	// and due now, wakes the relays as an insert would, and returns how
	// many it moved (or would move, in a dry run: driverkit.RunRetryDead
	// decides).
	RetryDead(ctx context.Context, p RetryDeadParams) (int64, error)
	// DeliveryRate counts the deliveries of the last DeliveryRateMinutes
	// minutes, minute by minute, from the DELIVERED rows' delivered_at.
	DeliveryRate(ctx context.Context) (DeliveryRate, error)
	// Emit inserts test events through the driver's producer insert, in
	// one statement, and returns their ids in insertion order.
	Emit(ctx context.Context, p EmitParams) ([]uuid.UUID, error)
}

// ErrEventNotFound is returned when no row has the event id asked for.
var ErrEventNotFound = errors.New("event not found")

// Backlog is the work waiting in the table. It is cheap to read: every
// number comes from rows the PENDING and DEAD partial indexes select.
type Backlog struct {
	// PendingNew counts PENDING rows never attempted (attempts = 0).
	PendingNew int64
	// PendingRetrying counts PENDING rows waiting for another attempt.
	PendingRetrying int64
	// OldestPendingAt is the created_at of the oldest PENDING row that is
	// due (available_at has passed); zero when none is. Events scheduled for
	// later, or backing off before a retry, are not late and do not count.
	OldestPendingAt time.Time
	// OldestPendingAge is how long that row has waited, by the database's
	// clock; zero when nothing is pending.
	OldestPendingAge time.Duration
	// Dead counts DEAD rows.
	Dead int64
}

// Pending counts every PENDING row.
func (b Backlog) Pending() int64 { return b.PendingNew + b.PendingRetrying }

// StatsTopTypesDefault is how many event types StatsParams reports when
// TopTypes is zero.
const StatsTopTypesDefault = 10

// StatsParams chooses what Stats reports beyond the counts.
type StatsParams struct {
	// TopTypes is how many event types with the largest backlog to list;
	// 0 means StatsTopTypesDefault.
	TopTypes int
	// EstimateDelivered estimates Delivered from the database's table
	// statistics, less the other statuses' exact counts, instead of
	// counting a delivered history of millions of rows (seconds on a large
	// table). It is the console's overview's choice, refreshed every few
	// seconds. Where the statistics are missing, the rows are counted.
	EstimateDelivered bool
}

// WithDefaults checks p and returns it with its defaults filled in: every
// driver's Stats starts here, so that none has rules of its own.
func (p StatsParams) WithDefaults() (StatsParams, error) {
	if p.TopTypes < 0 {
		return p, fmt.Errorf("stats: TopTypes must not be negative, got %d", p.TopTypes)
	}
	if p.TopTypes == 0 {
		p.TopTypes = StatsTopTypesDefault
	}
	return p, nil
}

// Stats is a consistent snapshot of the table for operators.
type Stats struct {
	Backlog
	Delivering int64
	Delivered  int64
	// DeliveredEstimated says Delivered is an estimate (see
	// StatsParams.EstimateDelivered).
	DeliveredEstimated bool
	// DeliveredLastMinute and DeliveredLastHour count DELIVERED rows by
	// delivered_at; rows pruned since do not count.
	DeliveredLastMinute int64
	DeliveredLastHour   int64
	// TopTypes are the event types with the most PENDING rows, largest first.
	TopTypes []TypeBacklog
	// Leases are the relays holding DELIVERING rows now, most rows first.
	Leases []LeaseHolder
	// BlockedKeys are keys whose first unfinished event is DEAD while later
	// events wait: ORDERING_ON_DEAD=block holds them until an operator acts.
	BlockedKeys []BlockedKey
	// ObservedAt is the database's clock when the snapshot was taken.
	ObservedAt time.Time
}

// EstimateDelivered sets Delivered from the table's estimated row count
// (the database's statistics), less the exact counts of the other
// statuses, which Stats must already hold.
func (s *Stats) EstimateDelivered(tableRows int64) {
	s.Delivered = max(0, tableRows-s.Pending()-s.Dead-s.Delivering)
	s.DeliveredEstimated = true
}

// TypeBacklog is the PENDING backlog of one event type.
type TypeBacklog struct {
	EventType        string
	Pending          int64
	OldestPendingAge time.Duration
}

// StatsBlockedKeysMax bounds the blocked keys Stats lists.
const StatsBlockedKeysMax = 20

// BlockedKey is a partition key held back by a DEAD event.
type BlockedKey struct {
	Key string
	// DeadEventID and DeadEventType name the DEAD event at the key's head.
	DeadEventID   uuid.UUID
	DeadEventType string
	// Waiting counts the key's PENDING events behind it.
	Waiting int64
}

// LeaseHolder is a relay (locked_by) holding DELIVERING rows.
type LeaseHolder struct {
	RelayID string
	Events  int64
	// OldestLockedAt is the earliest lease the relay holds; a lease much
	// older than LEASE_TIMEOUT means the reaper is not running.
	OldestLockedAt time.Time
	OldestLeaseAge time.Duration
}

// PruneBatchSizeDefault is how many rows one prune statement deletes when
// PruneParams.BatchSize is zero: small enough for short locks and
// transactions, large enough that a million rows take a few hundred
// statements.
const PruneBatchSizeDefault = 5000

// PruneParams selects finished rows to delete.
type PruneParams struct {
	// Status is DELIVERED (aged by delivered_at) or DEAD (aged by
	// updated_at, the moment it died). Other statuses are refused.
	Status outbox.Status
	// OlderThan is the age a row must exceed to be deleted.
	OlderThan time.Duration
	// BatchSize bounds the rows one statement (and transaction) deletes;
	// 0 means PruneBatchSizeDefault.
	BatchSize int
	// DryRun only counts the rows that would be deleted.
	DryRun bool
	// Pause is waited between two batches, so that a long prune leaves
	// the database's time to the relays' claims; 0 goes straight on. When
	// ctx ends during a pause, Prune returns what it deleted and ctx's
	// error.
	Pause time.Duration
	// Progress, when set, is called after every batch with the rows
	// deleted so far.
	Progress func(deleted int64)
}

// PruneResult says how many rows a prune deleted (or, in a dry run, would
// delete) and in how many statements.
type PruneResult struct {
	Deleted int64
	Batches int
}

// DeadFilter selects DEAD rows. Every set field must match; an empty filter
// selects every DEAD row.
type DeadFilter struct {
	IDs       []uuid.UUID
	EventType string
	// Since selects rows that went DEAD (updated_at) at or after it.
	Since time.Time
	// ErrorContains selects rows whose last_error contains it, ignoring case.
	ErrorContains string
	// PartitionKey selects rows with that key.
	PartitionKey string
	// CreatedFrom and CreatedBefore select rows created at or after From
	// and before Before.
	CreatedFrom, CreatedBefore time.Time
}

// Empty reports whether the filter selects every DEAD row.
func (f DeadFilter) Empty() bool {
	return len(f.IDs) == 0 && f.EventType == "" && f.Since.IsZero() && f.ErrorContains == "" &&
		f.PartitionKey == "" && f.CreatedFrom.IsZero() && f.CreatedBefore.IsZero()
}

// RetryDeadParams selects DEAD rows to send back to PENDING.
type RetryDeadParams struct {
	DeadFilter
	// Limit bounds the rows moved, oldest deaths first; 0 means no limit.
	Limit int
	// DryRun only counts the rows that would be moved.
	DryRun bool
}

// Check reports what is wrong with p; every driver's RetryDead starts here.
func (p RetryDeadParams) Check() error {
	if p.Limit < 0 {
		return fmt.Errorf("retry dead: Limit must not be negative, got %d", p.Limit)
	}
	return nil
}

// ListParams selects rows to list, newest first. Every set filter must
// match. A listing continues page by page with After (keyset pagination):
// each page is one index range read, however deep it is, never an OFFSET.
type ListParams struct {
	// Status, when set, keeps only rows in that status.
	Status    outbox.Status
	EventType string
	Limit     int
	// PartitionKey, when set, keeps only rows with that key.
	PartitionKey string
	// EventID, when set, keeps only that row.
	EventID uuid.UUID
	// CreatedFrom and CreatedBefore, when set, keep rows created at or
	// after From and before Before.
	CreatedFrom, CreatedBefore time.Time
	// ErrorContains keeps rows whose last_error contains it, ignoring case.
	ErrorContains string
	// OldestFirst lists oldest first instead.
	OldestFirst bool
	// After, when set, continues a listing after the row it names (see
	// CursorOf), in the listing's order.
	After *ListCursor
}

// WithDefaults checks p and returns it with its defaults filled in (Limit:
// ListLimitDefault); every driver's List starts here.
func (p ListParams) WithDefaults() (ListParams, error) {
	if p.Limit <= 0 {
		p.Limit = ListLimitDefault
	}
	if p.Status != "" && !p.Status.Valid() {
		return p, fmt.Errorf("list: unknown status %q", p.Status)
	}
	return p, nil
}

// ListFilterKind names one of ListParams' filters.
type ListFilterKind int

// The filters of a listing, in the order Filters returns them, with the
// values each carries in ListFilter.Values.
const (
	ListStatus        ListFilterKind = iota // the status, as a string
	ListEventType                           // the event type
	ListPartitionKey                        // the key, as a string
	ListEventID                             // a uuid.UUID
	ListCreatedFrom                         // a time.Time: created at or after it
	ListCreatedBefore                       // a time.Time: created before it
	ListErrorContains                       // text last_error contains, ignoring case
	// ListAfter and ListBefore continue a listing by creation time past a
	// cursor, oldest first and newest first: its CreatedAt, Seq and ID.
	ListAfter
	ListBefore
	// ListAfterWritten and ListBeforeWritten continue a listing in write
	// order (ListParams.WriteOrder) past a cursor: its Seq, CreatedAt and
	// ID.
	ListAfterWritten
	ListBeforeWritten
)

// ListFilter is one condition a listing applies.
type ListFilter struct {
	Kind   ListFilterKind
	Values []any
}

// Filters are the conditions p sets, in a fixed order: the driver only
// writes each kind as SQL (with one placeholder per value) and converts
// the values to its arguments. Which filters apply, and which way a cursor
// points, is decided here.
func (p ListParams) Filters() []ListFilter {
	var fs []ListFilter
	add := func(k ListFilterKind, vals ...any) { fs = append(fs, ListFilter{Kind: k, Values: vals}) }
	if p.Status != "" {
		add(ListStatus, string(p.Status))
	}
	if p.EventType != "" {
		add(ListEventType, p.EventType)
	}
	if p.PartitionKey != "" {
		add(ListPartitionKey, p.PartitionKey)
	}
	if p.EventID != uuid.Nil {
		add(ListEventID, p.EventID)
	}
	if !p.CreatedFrom.IsZero() {
		add(ListCreatedFrom, p.CreatedFrom)
	}
	if !p.CreatedBefore.IsZero() {
		add(ListCreatedBefore, p.CreatedBefore)
	}
	if p.ErrorContains != "" {
		add(ListErrorContains, p.ErrorContains)
	}
	if c := p.After; c != nil {
		switch {
		case p.WriteOrder() && p.OldestFirst:
			add(ListAfterWritten, c.Seq, c.CreatedAt, c.ID)
		case p.WriteOrder():
			add(ListBeforeWritten, c.Seq, c.CreatedAt, c.ID)
		case p.OldestFirst:
			add(ListAfter, c.CreatedAt, c.Seq, c.ID)
		default:
			add(ListBefore, c.CreatedAt, c.Seq, c.ID)
		}
	}
	return fs
}

// WriteOrder reports whether the listing is in write order (seq, then
// created_at for rows written before seq existed, then event_id) rather
// than by creation time (created_at, then seq, then event_id). One key's
// events are listed in write order, the order in which the relay delivers
// them under ORDERING=partition: created_at is when the inserting
// transaction began, and one that began first may have written its event
// after another committed one of the same key. Listings of every key keep
// to the time events were created.
func (p ListParams) WriteOrder() bool {
	return p.PartitionKey != ""
}

// Direction is the listing's SQL sort direction: DESC, or ASC when
// OldestFirst.
func (p ListParams) Direction() string {
	if p.OldestFirst {
		return "ASC"
	}
	return "DESC"
}

// ListCursor names a row's place in List's order: created_at, then seq
// (insertion order; 0 where a row has none), then event_id; or in write
// order (ListParams.WriteOrder), seq, then created_at, then event_id.
type ListCursor struct {
	CreatedAt time.Time
	Seq       int64
	ID        uuid.UUID
}

// CursorOf returns the cursor that continues a listing after r.
func CursorOf(r Row) ListCursor {
	c := ListCursor{CreatedAt: r.CreatedAt, ID: r.ID}
	if r.Seq != nil {
		c.Seq = *r.Seq
	}
	return c
}

// String encodes c for a URL: microseconds since the epoch, seq and id.
func (c ListCursor) String() string {
	return fmt.Sprintf("%d.%d.%s", c.CreatedAt.UnixMicro(), c.Seq, c.ID)
}

// ParseListCursor reads what ListCursor.String wrote.
func ParseListCursor(s string) (ListCursor, error) {
	var (
		c  ListCursor
		us int64
		id string
	)
	parts := strings.SplitN(s, ".", 3)
	if len(parts) != 3 {
		return c, fmt.Errorf("cursor %q: want <microseconds>.<seq>.<event id>", s)
	}
	us, err := strconv.ParseInt(parts[0], 10, 64)
	if err == nil {
		c.Seq, err = strconv.ParseInt(parts[1], 10, 64)
	}
	if err == nil {
		id = parts[2]
		c.ID, err = uuid.Parse(id)
	}
	if err != nil {
		return c, fmt.Errorf("cursor %q: %w", s, err)
	}
	c.CreatedAt = time.UnixMicro(us).UTC()
	return c, nil
}

// DeliveryRateMinutes is how many minutes DeliveryRate reports.
const DeliveryRateMinutes = 60

// DeliveryRate counts deliveries per minute, by the database's clock.
type DeliveryRate struct {
	// Until is the end of the last minute counted: the database's now.
	Until time.Time
	// PerMinute holds DeliveryRateMinutes counts, oldest first: entry i
	// counts DELIVERED rows whose delivered_at is in the minute ending
	// DeliveryRateMinutes-1-i minutes before Until. Pruned rows do not
	// count.
	PerMinute []int64
}

// ListLimitDefault is what `relay-cli list` shows without --limit.
const ListLimitDefault = 20

// Row is one outbox row, every column. List leaves Payload and Headers
// empty: it is for finding rows, and payloads can be large.
type Row struct {
	ID           uuid.UUID
	Type         string
	PartitionKey *string
	Payload      []byte
	Headers      json.RawMessage
	Status       outbox.Status
	Attempts     int
	LastError    *string
	AvailableAt  time.Time
	LockedBy     *string
	LockedAt     *time.Time
	DeliveredAt  *time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// Seq is the insertion order the relay adds; nil for rows older than it.
	Seq *int64
	// Age is how long ago the row was created, by the database's clock.
	Age time.Duration
}

// Columns checks p and makes its events ready for the driver's producer
// insert: p.Count copies of the event, with new UUIDv7 ids. Every driver's
// Emit starts here.
func (p EmitParams) Columns(ctx context.Context) (outbox.Columns, error) {
	switch {
	case p.Type == "":
		return outbox.Columns{}, errors.New("emit: an event type is required")
	case p.Count < 1 || p.Count > EmitCountMax:
		return outbox.Columns{}, fmt.Errorf("emit: count must be 1 to %d, got %d", EmitCountMax, p.Count)
	case p.AvailableIn < 0:
		return outbox.Columns{}, fmt.Errorf("emit: AvailableIn must not be negative, got %s", p.AvailableIn)
	}
	m := outbox.Message{Type: p.Type, Key: p.PartitionKey, Payload: p.Payload, Headers: p.Headers}
	if p.AvailableIn > 0 {
		// By this process's clock: the rows are written a moment later.
		m.AvailableAt = time.Now().Add(p.AvailableIn)
	}
	msgs := make([]outbox.Message, p.Count)
	for i := range msgs {
		msgs[i] = m
	}
	c, err := outbox.Prepare(ctx, msgs)
	if err != nil {
		return c, fmt.Errorf("emit: %w", err)
	}
	return c, nil
}

// EmitCountMax bounds one Emit: the events are one statement and one
// transaction, and test traffic does not need more.
const EmitCountMax = 100000

// EmitParams describes test events to insert.
type EmitParams struct {
	Type         string
	PartitionKey string // empty: NULL
	Payload      []byte
	Headers      map[string]string
	Count        int
	AvailableIn  time.Duration
}
