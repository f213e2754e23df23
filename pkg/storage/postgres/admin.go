package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/driverkit"
)

// The queries operators run through relay-cli, and Backlog, which the
// metrics endpoint reads. They sit outside storage.Store because the relay
// never needs them.

// querier is what both the pool and a transaction offer, so that Backlog's
// query can run alone or inside the Stats snapshot.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Backlog counts PENDING rows (new and retrying), dates the oldest one and
// counts DEAD rows in one statement that reads only rows the PENDING and
// DEAD partial indexes select, so it is cheap to call every few seconds on
// a table with a long delivered history (admin_backlog.sql).
func (s *Store) Backlog(ctx context.Context) (storage.Backlog, error) {
	b, err := s.backlog(ctx, s.pool)
	if err != nil {
		return b, s.adminError(ctx, "read backlog", err)
	}
	return b, nil
}

func (s *Store) backlog(ctx context.Context, q querier) (storage.Backlog, error) {
	var (
		b      storage.Backlog
		oldest *time.Time
		ageUS  int64
	)
	err := q.QueryRow(ctx, s.queries["admin_backlog"]).
		Scan(&b.PendingNew, &b.PendingRetrying, &oldest, &ageUS, &b.Dead)
	if oldest != nil {
		b.OldestPendingAt = *oldest
		b.OldestPendingAge = microseconds(ageUS)
	}
	return b, err
}

// Stats reads the backlog, the counts of the other statuses, recent
// deliveries, the event types with the largest backlog and the relays
// holding leases, all from one snapshot (a read-only repeatable-read
// transaction), so the numbers agree with each other.
func (s *Store) Stats(ctx context.Context, p storage.StatsParams) (storage.Stats, error) {
	return driverkit.RunStats(p, func(p storage.StatsParams) (storage.Stats, error) { return s.stats(ctx, p) })
}

func (s *Store) stats(ctx context.Context, p storage.StatsParams) (storage.Stats, error) {
	var st storage.Stats
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			var err error
			if st.Backlog, err = s.backlog(ctx, tx); err != nil {
				return err
			}
			var estimate *int64
			if p.EstimateDelivered {
				if err := tx.QueryRow(ctx, s.queries["admin_table_rows"]).Scan(&estimate); err != nil {
					return err
				}
			}
			err = tx.QueryRow(ctx, s.queries["admin_stats_counts"], estimate == nil).
				Scan(&st.Delivering, &st.Delivered, &st.DeliveredLastMinute, &st.DeliveredLastHour, &st.ObservedAt)
			if err != nil {
				return err
			}
			if estimate != nil {
				st.EstimateDelivered(*estimate)
			}
			rows, err := tx.Query(ctx, s.queries["admin_stats_types"], p.TopTypes)
			if err != nil {
				return err
			}
			st.TopTypes, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.TypeBacklog, error) {
				var (
					t     storage.TypeBacklog
					ageUS int64
				)
				err := r.Scan(&t.EventType, &t.Pending, &ageUS)
				t.OldestPendingAge = microseconds(ageUS)
				return t, err
			})
			if err != nil {
				return err
			}
			rows, err = tx.Query(ctx, s.queries["admin_stats_leases"])
			if err != nil {
				return err
			}
			st.Leases, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.LeaseHolder, error) {
				var (
					l     storage.LeaseHolder
					at    *time.Time
					ageUS int64
				)
				err := r.Scan(&l.RelayID, &l.Events, &at, &ageUS)
				if at != nil {
					l.OldestLockedAt = *at
					l.OldestLeaseAge = microseconds(ageUS)
				}
				return l, err
			})
			if err != nil {
				return err
			}
			rows, err = tx.Query(ctx, s.queries["admin_stats_blocked"], storage.StatsBlockedKeysMax)
			if err != nil {
				return err
			}
			st.BlockedKeys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.BlockedKey, error) {
				var b storage.BlockedKey
				err := r.Scan(&b.Key, &b.DeadEventID, &b.DeadEventType, &b.Waiting)
				return b, err
			})
			return err
		})
	if err != nil {
		return st, s.adminError(ctx, "read stats", err)
	}
	return st, nil
}

// Prune deletes DELIVERED or DEAD rows older than p.OlderThan in batches of
// p.BatchSize, each its own statement and transaction, until a batch comes
// back short. It never deletes PENDING or DELIVERING rows. When ctx ends
// between batches, the result counts what was deleted before.
func (s *Store) Prune(ctx context.Context, p storage.PruneParams) (storage.PruneResult, error) {
	return driverkit.PruneWith(ctx, adminStatements{s}, p)
}

// adminStatements runs the store's statements for storage's shared Admin
// code, each on a pooled connection of its own.
type adminStatements struct{ s *Store }

func (a adminStatements) Count(ctx context.Context, what, name string, args ...any) (n int64, err error) {
	if err = a.s.pool.QueryRow(ctx, a.s.queries[name], args...).Scan(&n); err != nil {
		err = a.s.adminError(ctx, what, err)
	}
	return n, err
}

func (a adminStatements) Exec(ctx context.Context, what, name string, args ...any) (int64, error) {
	tag, err := a.s.pool.Exec(ctx, a.s.queries[name], args...)
	if err != nil {
		return 0, a.s.adminError(ctx, what, err)
	}
	return tag.RowsAffected(), nil
}

// RetryDead moves the DEAD rows p selects back to PENDING with attempts 0,
// due now, and notifies the table's channel in the same transaction so
// listening relays claim them at once. It returns how many rows it moved,
// or in a dry run how many it would move.
func (s *Store) RetryDead(ctx context.Context, p storage.RetryDeadParams) (int64, error) {
	args := deadFilterArgs(p.DeadFilter, p.Limit)
	return driverkit.RunRetryDead(p, func() (int64, error) {
		var n int64
		if err := s.pool.QueryRow(ctx, s.queries["admin_retry_dead_count"], args...).Scan(&n); err != nil {
			return 0, s.adminError(ctx, "count dead rows", err)
		}
		return n, nil
	}, func() (int64, error) {
		var n int64
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, s.queries["admin_retry_dead"], args...)
			if err != nil {
				return err
			}
			n = tag.RowsAffected()
			if n == 0 {
				return nil
			}
			// Delivered on commit, like the insert trigger's notification.
			_, err = tx.Exec(ctx, s.queries["admin_notify"], s.table.Quoted())
			return err
		})
		if err != nil {
			return 0, s.adminError(ctx, "retry dead rows", err)
		}
		return n, nil
	})
}

// deadFilterArgs turns a filter into the parameters of the retry-dead
// queries, where NULL matches everything.
func deadFilterArgs(f storage.DeadFilter, limit int) []any {
	args := make([]any, 8)
	if len(f.IDs) > 0 {
		args[0] = f.IDs
	}
	if f.EventType != "" {
		args[1] = f.EventType
	}
	if !f.Since.IsZero() {
		args[2] = f.Since
	}
	if f.ErrorContains != "" {
		args[3] = f.ErrorContains
	}
	if limit > 0 {
		args[4] = limit
	}
	if f.PartitionKey != "" {
		args[5] = f.PartitionKey
	}
	if !f.CreatedFrom.IsZero() {
		args[6] = f.CreatedFrom
	}
	if !f.CreatedBefore.IsZero() {
		args[7] = f.CreatedBefore
	}
	return args
}

// adminListFilters are admin_list.sql's conditions, one per kind of
// filter; %d is the argument's number.
var adminListFilters = map[storage.ListFilterKind]string{
	storage.ListStatus:        "\n  AND status = $%d::text",
	storage.ListEventType:     "\n  AND event_type = $%d::text",
	storage.ListPartitionKey:  "\n  AND partition_key = $%d::text",
	storage.ListEventID:       "\n  AND event_id = $%d::uuid",
	storage.ListCreatedFrom:   "\n  AND created_at >= $%d::timestamptz",
	storage.ListCreatedBefore: "\n  AND created_at < $%d::timestamptz",
	storage.ListErrorContains: "\n  AND strpos(lower(coalesce(last_error, '')), lower($%d::text)) > 0",
	// The cursor: rows after it in the listing's order.
	storage.ListAfter:  "\n  AND (created_at, COALESCE(seq, 0), event_id) > ($%d::timestamptz, $%d::bigint, $%d::uuid)",
	storage.ListBefore: "\n  AND (created_at, COALESCE(seq, 0), event_id) < ($%d::timestamptz, $%d::bigint, $%d::uuid)",
	// The same in write order, one key's listing (key_written_idx).
	storage.ListAfterWritten:  "\n  AND (COALESCE(seq, 0), created_at, event_id) > ($%d::bigint, $%d::timestamptz, $%d::uuid)",
	storage.ListBeforeWritten: "\n  AND (COALESCE(seq, 0), created_at, event_id) < ($%d::bigint, $%d::timestamptz, $%d::uuid)",
}

// listOrders are admin_list.sql's orders: by creation time (created_idx)
// and, for one key's events, in write order (key_written_idx).
var listOrders = map[bool]string{
	false: "created_at {{dir}}, COALESCE(seq, 0) {{dir}}, event_id {{dir}}",
	true:  "COALESCE(seq, 0) {{dir}}, created_at {{dir}}, event_id {{dir}}",
}

// List returns up to p.Limit rows that match p's filters, newest first
// (or oldest first), after p.After when it is set, without payload and
// headers.
func (s *Store) List(ctx context.Context, p storage.ListParams) ([]storage.Row, error) {
	p, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	query, args := s.listQuery(p)
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, s.adminError(ctx, "list rows", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Row, error) {
		var row storage.Row
		var ageUS int64
		err := r.Scan(&row.ID, &row.Type, &row.PartitionKey, &row.Status, &row.Attempts, &row.LastError,
			&row.AvailableAt, &row.LockedBy, &row.LockedAt, &row.DeliveredAt, &row.CreatedAt, &row.UpdatedAt,
			&row.Seq, &ageUS)
		row.Age = microseconds(ageUS)
		return row, err
	})
	if err != nil {
		return nil, s.adminError(ctx, "list rows", err)
	}
	return list, nil
}

// listQuery is admin_list.sql with p's filters, and its arguments.
func (s *Store) listQuery(p storage.ListParams) (string, []any) {
	var (
		filters strings.Builder
		args    []any
	)
	add := func(cond string, vals ...any) {
		nums := make([]any, len(vals))
		for i := range vals {
			nums[i] = len(args) + i + 1
		}
		fmt.Fprintf(&filters, cond, nums...)
		args = append(args, vals...)
	}
	for _, f := range p.Filters() {
		add(adminListFilters[f.Kind], f.Values...)
	}
	query := strings.NewReplacer("{{order}}", listOrders[p.WriteOrder()]).Replace(s.queries["admin_list"])
	query = strings.NewReplacer("{{filters}}", filters.String(), "{{dir}}", p.Direction(),
		"{{limit}}", fmt.Sprintf("$%d", len(args)+1)).Replace(query)
	args = append(args, p.Limit)
	return query, args
}

// DeliveryRate counts the DELIVERED rows of each of the last
// storage.DeliveryRateMinutes minutes in one statement that reads a range
// of late_idx and one of created_idx.
func (s *Store) DeliveryRate(ctx context.Context) (storage.DeliveryRate, error) {
	r := storage.DeliveryRate{PerMinute: make([]int64, storage.DeliveryRateMinutes)}
	var (
		ago    []int32
		counts []int64
	)
	err := s.pool.QueryRow(ctx, s.queries["admin_delivery_rate"]).Scan(&r.Until, &ago, &counts)
	if err != nil {
		return r, s.adminError(ctx, "read delivery rate", err)
	}
	for i, a := range ago {
		if a >= 0 && int(a) < storage.DeliveryRateMinutes {
			r.PerMinute[storage.DeliveryRateMinutes-1-int(a)] += counts[i]
		}
	}
	return r, nil
}

// Get returns every column of one row, or an error wrapping
// storage.ErrEventNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (storage.Row, error) {
	var row storage.Row
	var ageUS int64
	err := s.pool.QueryRow(ctx, s.queries["admin_get"], id).Scan(
		&row.ID, &row.Type, &row.PartitionKey, &row.Status, &row.Attempts, &row.LastError,
		&row.AvailableAt, &row.LockedBy, &row.LockedAt, &row.DeliveredAt, &row.CreatedAt, &row.UpdatedAt,
		&row.Seq, &ageUS, &row.Payload, &row.Headers)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, fmt.Errorf("event %s in table %s: %w", id, s.table, storage.ErrEventNotFound)
	}
	if err != nil {
		return row, s.adminError(ctx, "read event", err)
	}
	row.Age = microseconds(ageUS)
	return row, nil
}

// Emit inserts p.Count identical test events through the producer's insert
// (one statement, so they commit together and relays are notified once) and
// returns their ids (new UUIDv7s) in insertion order.
func (s *Store) Emit(ctx context.Context, p storage.EmitParams) ([]uuid.UUID, error) {
	c, err := p.Columns(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.writer.WriteColumns(ctx, PgxTx(s.pool), c); err != nil {
		return nil, s.adminError(ctx, "emit events", err)
	}
	return c.IDs, nil
}

// adminError explains err like queryError, and also says what to do about
// a missing table and that an interruption was one.
func (s *Store) adminError(ctx context.Context, what string, err error) error {
	return driverkit.AdminError(ctx, what, s.table.String(), s.location(), err, s.isTableMissing, s.queryError)
}

// isTableMissing reports whether err says the table does not exist
// (undefined_table), and then recycles the pool: the table may be gone, or
// the sessions' search_path stale.
func (s *Store) isTableMissing(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		s.recycle(err)
		return true
	}
	return false
}

func microseconds(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
