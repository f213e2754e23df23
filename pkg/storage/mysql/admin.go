package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/driverkit"
)

// The queries operators run through relay-cli, and Backlog, which the
// metrics endpoint reads.

// querier is what both the pool and a transaction offer, so that Backlog's
// query can run alone or inside the Stats snapshot.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Backlog counts PENDING rows (new and retrying), dates the oldest due one
// and counts DEAD rows in one statement that reads only the PENDING and
// DEAD ranges of two indexes, so it is cheap to call every few seconds on a
// table with a long delivered history.
func (s *Store) Backlog(ctx context.Context) (storage.Backlog, error) {
	b, err := s.backlog(ctx, s.db, nil)
	if err != nil {
		return b, s.adminError(ctx, "read backlog", err)
	}
	return b, nil
}

// backlogQuery is admin_backlog.sql reading the PENDING range from the
// lowest claim floor of this process's relays (all of it when there is
// none), and its arguments.
func (s *Store) backlogQuery(now any) (string, []any) {
	floor := s.cursors.lowestFloor()
	if floor == nil {
		return strings.ReplaceAll(s.queries["admin_backlog"], "{{from}}", ""), []any{now}
	}
	const after = "\n    AND (p.state_at > CAST(? AS DATETIME(6)) OR (p.state_at = CAST(? AS DATETIME(6)) AND p.seq > ?))"
	at := stamp(floor.at)
	return strings.ReplaceAll(s.queries["admin_backlog"], "{{from}}", after), []any{now, at, at, floor.seq}
}

// backlog reads the backlog as of now, or of the statement's own clock
// when now is nil.
func (s *Store) backlog(ctx context.Context, q querier, now any) (storage.Backlog, error) {
	var (
		b      storage.Backlog
		oldest sql.NullTime
		at     time.Time
	)
	query, args := s.backlogQuery(now)
	err := q.QueryRowContext(ctx, query, args...).
		Scan(&b.PendingNew, &b.PendingRetrying, &oldest, &at, &b.Dead)
	if oldest.Valid {
		b.OldestPendingAt = oldest.Time
		b.OldestPendingAge = max(at.Sub(oldest.Time), 0)
	}
	return b, err
}

// Stats reads the backlog, the counts of the other statuses, recent
// deliveries, the event types with the largest backlog, the relays holding
// leases and the keys a DEAD event blocks, all from one snapshot (a
// read-only REPEATABLE READ transaction) and judged by one instant, so the
// numbers agree with each other.
func (s *Store) Stats(ctx context.Context, p storage.StatsParams) (storage.Stats, error) {
	return driverkit.RunStats(p, func(p storage.StatsParams) (storage.Stats, error) { return s.stats(ctx, p) })
}

func (s *Store) stats(ctx context.Context, p storage.StatsParams) (storage.Stats, error) {
	var st storage.Stats
	err := s.inTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, s.queries["admin_now"]).Scan(&st.ObservedAt); err != nil {
			return err
		}
		now := stamp(st.ObservedAt)
		var err error
		if st.Backlog, err = s.backlog(ctx, tx, now); err != nil {
			return err
		}
		var estimate sql.NullInt64
		if p.EstimateDelivered {
			var database any
			if s.table.Database != "" {
				database = s.table.Database
			}
			err := tx.QueryRowContext(ctx, s.queries["admin_table_rows"], database, s.table.Name).Scan(&estimate)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		exact := 1
		if estimate.Valid {
			exact = 0
		}
		err = tx.QueryRowContext(ctx, s.queries["admin_stats_counts"], exact, now, now).
			Scan(&st.Delivering, &st.Delivered, &st.DeliveredLastMinute, &st.DeliveredLastHour)
		if err != nil {
			return err
		}
		if estimate.Valid {
			st.EstimateDelivered(estimate.Int64)
		}
		st.TopTypes = []storage.TypeBacklog{}
		err = eachRow(ctx, tx, s.queries["admin_stats_types"], []any{now, p.TopTypes}, func(r *sql.Rows) error {
			var (
				t     storage.TypeBacklog
				ageUS int64
			)
			err := r.Scan(&t.EventType, &t.Pending, &ageUS)
			t.OldestPendingAge = microseconds(max(ageUS, 0))
			st.TopTypes = append(st.TopTypes, t)
			return err
		})
		if err != nil {
			return err
		}
		st.Leases = []storage.LeaseHolder{}
		err = eachRow(ctx, tx, s.queries["admin_stats_leases"], []any{now}, func(r *sql.Rows) error {
			var (
				l     storage.LeaseHolder
				at    sql.NullTime
				ageUS int64
			)
			err := r.Scan(&l.RelayID, &l.Events, &at, &ageUS)
			if at.Valid {
				l.OldestLockedAt = at.Time
				l.OldestLeaseAge = microseconds(max(ageUS, 0))
			}
			st.Leases = append(st.Leases, l)
			return err
		})
		if err != nil {
			return err
		}
		st.BlockedKeys = []storage.BlockedKey{}
		return eachRow(ctx, tx, s.queries["admin_stats_blocked"], []any{storage.StatsBlockedKeysMax}, func(r *sql.Rows) error {
			var (
				b   storage.BlockedKey
				key []byte
				id  []byte
			)
			if err := r.Scan(&key, &id, &b.DeadEventType, &b.Waiting); err != nil {
				return err
			}
			b.Key = string(key)
			var err error
			b.DeadEventID, err = uuid.FromBytes(id)
			st.BlockedKeys = append(st.BlockedKeys, b)
			return err
		})
	})
	if err != nil {
		return st, s.adminError(ctx, "read stats", err)
	}
	return st, nil
}

// inTx runs fn in a transaction and commits it when fn succeeds.
func (s *Store) inTx(ctx context.Context, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// eachRow runs query and calls fn for every row.
func eachRow(ctx context.Context, q querier, query string, args []any, fn func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Prune deletes DELIVERED or DEAD rows older than p.OlderThan in batches of
// p.BatchSize, each its own statement and transaction, until a batch comes
// back short. It never deletes PENDING or DELIVERING rows. When ctx ends
// between batches, the result counts what was deleted before.
func (s *Store) Prune(ctx context.Context, p storage.PruneParams) (storage.PruneResult, error) {
	return driverkit.PruneWith(ctx, adminStatements{s}, p)
}

// adminStatements runs the store's statements for storage's shared Admin
// code. A statement that changes rows runs again after a deadlock or
// lock-wait timeout, as every write of the driver does.
type adminStatements struct{ s *Store }

func (a adminStatements) Count(ctx context.Context, what, name string, args ...any) (int64, error) {
	var n int64
	err := a.s.db.QueryRowContext(ctx, a.s.queries[name], args...).Scan(&n)
	if err != nil {
		return 0, a.s.adminError(ctx, what, err)
	}
	return n, nil
}

func (a adminStatements) Exec(ctx context.Context, what, name string, args ...any) (int64, error) {
	var n int64
	err := withLockRetry(ctx, func() error {
		r, err := a.s.db.ExecContext(ctx, a.s.queries[name], args...)
		if err == nil {
			n, err = r.RowsAffected()
		}
		return err
	})
	if err != nil {
		return 0, a.s.adminError(ctx, what, err)
	}
	return n, nil
}

// RetryDead moves the DEAD rows p selects back to PENDING with attempts 0,
// due now, and returns how many rows it moved, or in a dry run how many it
// would move. Relays find them at their next poll: MySQL cannot notify
// them.
func (s *Store) RetryDead(ctx context.Context, p storage.RetryDeadParams) (int64, error) {
	filter, args := s.deadFilter(p.DeadFilter)
	limit := int64(math.MaxInt64)
	if p.Limit > 0 {
		limit = int64(p.Limit)
	}
	args = append(args, limit)
	return driverkit.RunRetryDead(p, func() (int64, error) {
		var n int64
		query := strings.Replace(s.queries["admin_retry_dead_count"], "{{filter}}", filter, 1)
		if err := s.db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
			return 0, s.adminError(ctx, "count dead rows", err)
		}
		return n, nil
	}, func() (int64, error) {
		query := strings.Replace(s.queries["admin_retry_dead"], "{{filter}}", filter, 1)
		var n int64
		err := withLockRetry(ctx, func() error {
			r, err := s.db.ExecContext(ctx, query, args...)
			if err == nil {
				n, err = r.RowsAffected()
			}
			return err
		})
		if err != nil {
			return 0, s.adminError(ctx, "retry dead rows", err)
		}
		return n, nil
	})
}

// deadFilter turns a filter into admin_dead_filter.sql's text and
// arguments, where NULL matches everything.
func (s *Store) deadFilter(f storage.DeadFilter) (string, []any) {
	filter := s.queries["admin_dead_filter"]
	filter = strings.Replace(filter, "{{any_id}}", fmt.Sprint(len(f.IDs) == 0), 1)
	filter = expandList(filter, "{{ids}}", len(f.IDs))
	args := idArgs(f.IDs)
	var eventType, since, contains any
	if f.EventType != "" {
		eventType = f.EventType
	}
	if !f.Since.IsZero() {
		since = stamp(f.Since)
	}
	if f.ErrorContains != "" {
		contains = f.ErrorContains
	}
	var key, from, before any
	if f.PartitionKey != "" {
		key = []byte(f.PartitionKey)
	}
	if !f.CreatedFrom.IsZero() {
		from = stamp(f.CreatedFrom)
	}
	if !f.CreatedBefore.IsZero() {
		before = stamp(f.CreatedBefore)
	}
	return filter, append(args, eventType, eventType, since, since, contains, contains, key, key, from, from, before, before)
}

// adminListFilters are admin_list.sql's conditions, one per kind of
// filter, each with as many ? as listArgs gives it arguments.
var adminListFilters = map[storage.ListFilterKind]string{
	storage.ListStatus:        "\n  AND status = ?",
	storage.ListEventType:     "\n  AND event_type = ?",
	storage.ListPartitionKey:  "\n  AND partition_key = ?",
	storage.ListEventID:       "\n  AND event_id = ?",
	storage.ListCreatedFrom:   "\n  AND created_at >= CAST(? AS DATETIME(6))",
	storage.ListCreatedBefore: "\n  AND created_at < CAST(? AS DATETIME(6))",
	storage.ListErrorContains: "\n  AND LOCATE(LOWER(?), LOWER(COALESCE(last_error, ''))) > 0",
	// The cursor: rows after it in the listing's order. Spelled out rather
	// than as a row comparison, which MariaDB does not read as a range.
	storage.ListAfter:  "\n  AND (created_at > CAST(? AS DATETIME(6)) OR (created_at = CAST(? AS DATETIME(6)) AND seq > ?))",
	storage.ListBefore: "\n  AND (created_at < CAST(? AS DATETIME(6)) OR (created_at = CAST(? AS DATETIME(6)) AND seq < ?))",
	// The same in write order, one key's listing (key_written_idx).
	storage.ListAfterWritten:  "\n  AND seq > ?",
	storage.ListBeforeWritten: "\n  AND seq < ?",
}

// listOrders are admin_list.sql's orders: by creation time (created_idx)
// and, for one key's events, in write order (key_written_idx).
var listOrders = map[bool]string{
	false: "created_at {{dir}}, seq {{dir}}",
	true:  "seq {{dir}}",
}

// listArgs are f's arguments as the server compares them: keys and ids as
// bytes (the columns are binary), times as UTC text. A cursor's seq alone
// names its row, since seq is unique here: its id is not needed.
func listArgs(f storage.ListFilter) []any {
	switch f.Kind {
	case storage.ListAfter, storage.ListBefore:
		at := stamp(f.Values[0].(time.Time))
		return []any{at, at, f.Values[1]}
	case storage.ListAfterWritten, storage.ListBeforeWritten:
		return []any{f.Values[0]}
	case storage.ListPartitionKey:
		return []any{[]byte(f.Values[0].(string))}
	}
	args := make([]any, len(f.Values))
	for i, v := range f.Values {
		switch v := v.(type) {
		case uuid.UUID:
			args[i] = v[:]
		case time.Time:
			args[i] = stamp(v)
		default:
			args[i] = v
		}
	}
	return args
}

// List returns up to p.Limit rows that match p's filters, newest first
// (or oldest first), after p.After when it is set, without payload and
// headers. seq is unique here, so a cursor's created_at and seq name a row.
func (s *Store) List(ctx context.Context, p storage.ListParams) ([]storage.Row, error) {
	p, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	var (
		filters strings.Builder
		args    []any
	)
	for _, f := range p.Filters() {
		filters.WriteString(adminListFilters[f.Kind])
		args = append(args, listArgs(f)...)
	}
	query := strings.NewReplacer("{{order}}", listOrders[p.WriteOrder()]).Replace(s.queries["admin_list"])
	query = strings.NewReplacer("{{filters}}", filters.String(), "{{dir}}", p.Direction()).Replace(query)
	list := []storage.Row{}
	err = eachRow(ctx, s.db, query, append(args, p.Limit), func(r *sql.Rows) error {
		row, err := scanRow(r, false)
		list = append(list, row)
		return err
	})
	if err != nil {
		return nil, s.adminError(ctx, "list rows", err)
	}
	return list, nil
}

// DeliveryRate counts the DELIVERED rows of each of the last
// storage.DeliveryRateMinutes minutes in one range read of state_seq_idx.
func (s *Store) DeliveryRate(ctx context.Context) (storage.DeliveryRate, error) {
	r := storage.DeliveryRate{PerMinute: make([]int64, storage.DeliveryRateMinutes)}
	if err := s.db.QueryRowContext(ctx, s.queries["admin_now"]).Scan(&r.Until); err != nil {
		return r, s.adminError(ctx, "read delivery rate", err)
	}
	now := stamp(r.Until)
	err := eachRow(ctx, s.db, s.queries["admin_delivery_rate"], []any{now, now, now}, func(rows *sql.Rows) error {
		var (
			ago int
			n   int64
		)
		if err := rows.Scan(&ago, &n); err != nil {
			return err
		}
		if ago >= 0 && ago < storage.DeliveryRateMinutes {
			r.PerMinute[storage.DeliveryRateMinutes-1-ago] += n
		}
		return nil
	})
	if err != nil {
		return r, s.adminError(ctx, "read delivery rate", err)
	}
	return r, nil
}

// Get returns every column of one row, or an error wrapping
// storage.ErrEventNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (storage.Row, error) {
	rows, err := s.db.QueryContext(ctx, s.queries["admin_get"], id[:])
	if err != nil {
		return storage.Row{}, s.adminError(ctx, "read event", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return storage.Row{}, s.adminError(ctx, "read event", err)
		}
		return storage.Row{}, fmt.Errorf("event %s in table %s: %w", id, s.table, storage.ErrEventNotFound)
	}
	row, err := scanRow(rows, true)
	if err != nil {
		return row, s.adminError(ctx, "read event", err)
	}
	return row, nil
}

// scanner is a row to read: *sql.Rows or *sql.Row.
type scanner interface{ Scan(dest ...any) error }

// scanRow reads admin_list's columns, and admin_get's payload and headers
// when full.
func scanRow(r scanner, full bool) (storage.Row, error) {
	var (
		row                 storage.Row
		id, key, headers    []byte
		status              string
		available, created  lenientTime
		updated             lenientTime
		locked, delivered   sql.NullTime
		lastError, lockedBy sql.NullString
		seq                 sql.NullInt64
		ageUS               sql.NullInt64
	)
	dest := []any{&id, &row.Type, &key, &status, &row.Attempts, &lastError,
		&available, &lockedBy, &locked, &delivered, &created, &updated, &seq, &ageUS}
	if full {
		dest = append(dest, &row.Payload, &headers)
	}
	if err := r.Scan(dest...); err != nil {
		return row, err
	}
	var err error
	if row.ID, err = uuid.FromBytes(id); err != nil {
		return row, fmt.Errorf("event_id: %w", err)
	}
	if key != nil {
		k := string(key)
		row.PartitionKey = &k
	}
	row.Status = outbox.Status(status)
	if lastError.Valid {
		row.LastError = &lastError.String
	}
	if lockedBy.Valid {
		row.LockedBy = &lockedBy.String
	}
	if locked.Valid {
		row.LockedAt = &locked.Time
	}
	if delivered.Valid {
		row.DeliveredAt = &delivered.Time
	}
	if seq.Valid {
		row.Seq = &seq.Int64
	}
	row.AvailableAt, row.CreatedAt, row.UpdatedAt = available.t, created.t, updated.t
	row.Age = microseconds(ageUS.Int64)
	if full {
		row.Headers = headers
		if row.Payload == nil {
			row.Payload = []byte{}
		}
	}
	return row, nil
}

// Emit inserts p.Count identical test events through the producer's insert
// in one transaction and returns their ids (new UUIDv7s) in insertion
// order.
func (s *Store) Emit(ctx context.Context, p storage.EmitParams) ([]uuid.UUID, error) {
	c, err := p.Columns(ctx)
	if err != nil {
		return nil, err
	}
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.writer.WriteColumns(ctx, tx, c) })
	if err != nil {
		return nil, s.adminError(ctx, "emit events", err)
	}
	return c.IDs, nil
}

// adminError explains err like queryError, and also says what to do about
// a missing table and that an interruption was one.
func (s *Store) adminError(ctx context.Context, what string, err error) error {
	return driverkit.AdminError(ctx, what, s.table.Name, s.location(), err, isTableMissing, s.queryError)
}

// isTableMissing reports whether err says the table does not exist.
func isTableMissing(err error) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && myErr.Number == errNoSuchTable
}
