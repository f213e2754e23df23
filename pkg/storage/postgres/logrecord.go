package postgres

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/relay/pkg/storage"
)

// The log reader's side of the store (storage.LogRecorder): settling events
// the relay read from the write-ahead log rather than claimed. Each
// statement changes only rows still PENDING and fresh, the rows no claim
// has touched (sql/record_delivered.sql).

var _ storage.LogRecorder = (*Store)(nil)

// Record records o on the log reader's rows: a statement per kind
// (record_delivered.sql or record_deleted.sql, record_failed.sql,
// defer.sql), after record_plan.sql, all in one pipeline and so one
// implicit transaction, one round trip.
func (s *Store) Record(ctx context.Context, o storage.Outcome) (storage.Settled, error) {
	if o.Len() == 0 {
		return storage.Settled{}, nil
	}
	b := &settleBatch{}
	b.queue(nil, s.queries["record_plan"])
	if len(o.Delivered) > 0 {
		name := "record_delivered"
		if o.Delete {
			name = "record_deleted"
		}
		ids := uuidArray(o.Delivered)
		s.queueRecord(b, &b.settled.Delivered, name, o.Delivered, o.CreatedAt, func(i []int, created []pgtype.Timestamptz) []any {
			return []any{pick(ids, i), created}
		})
	}
	if len(o.Failed) > 0 {
		ids, msgs, dead, delays := failureArrays(o.Failed)
		failed := make([]uuid.UUID, len(o.Failed))
		for i := range o.Failed {
			failed[i] = o.Failed[i].ID
		}
		s.queueRecord(b, &b.settled.Failed, "record_failed", failed, o.CreatedAt, func(i []int, created []pgtype.Timestamptz) []any {
			return []any{pick(ids, i), created, pick(msgs, i), pick(dead, i), pick(delays, i)}
		})
	}
	if len(o.Released) > 0 {
		ids := uuidArray(o.Released)
		s.queueRecord(b, &b.settled.Released, "defer", o.Released, o.CreatedAt, func(i []int, created []pgtype.Timestamptz) []any {
			return []any{pick(ids, i), created}
		})
	}
	return s.sendSettle(ctx, "record log events", b)
}

// queueRecord queues one of the log reader's statements for ids: the rows
// whose created_at is known in one statement that finds each in its
// partition, the others (created_at unread: ±infinity) in its _any
// variant. args gives the statement's arguments for the ids at the
// indexes it is passed, with their created_at.
func (s *Store) queueRecord(b *settleBatch, kind *int, name string, ids []uuid.UUID, created map[uuid.UUID]time.Time,
	args func(idx []int, created []pgtype.Timestamptz) []any) {
	var known, unknown []int
	for i, id := range ids {
		if !created[id].IsZero() {
			known = append(known, i)
		} else {
			unknown = append(unknown, i)
		}
	}
	for _, group := range []struct {
		query string
		rows  []int
	}{{name, known}, {name + "_any", unknown}} {
		if len(group.rows) == 0 {
			continue
		}
		at := make([]pgtype.Timestamptz, len(group.rows))
		for j, i := range group.rows {
			if t := created[ids[i]]; !t.IsZero() {
				at[j] = pgtype.Timestamptz{Time: t, Valid: true}
			}
		}
		b.queue(kind, s.queries[group.query], args(group.rows, at)...)
	}
}

// pick returns the elements of all at the indexes idx.
func pick[T any](all []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = all[i]
	}
	return out
}

// BlockedKeys returns the lowest seq blocking each of p.Keys that has one.
func (s *Store) BlockedKeys(ctx context.Context, p storage.BlockedKeysParams) (map[string]int64, error) {
	blocked := map[string]int64{}
	if len(p.Keys) == 0 {
		return blocked, nil
	}
	rows, err := s.pool.Query(ctx, s.queries["blocked_keys"], p.Keys, p.OnDead == storage.DeadBlock, max(p.Backfill, 0))
	if err != nil {
		s.recycle(err)
		return nil, fmt.Errorf("find blocked keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key string
			seq int64
		)
		if err := rows.Scan(&key, &seq); err != nil {
			return nil, fmt.Errorf("find blocked keys: %w", err)
		}
		blocked[key] = seq
	}
	if err := rows.Err(); err != nil {
		s.recycle(err)
		return nil, fmt.Errorf("find blocked keys: %w", err)
	}
	return blocked, nil
}

// LastSeq is the seq sequence's last value.
func (s *Store) LastSeq(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.pool.QueryRow(ctx, s.queries["last_seq"]).Scan(&seq); err != nil {
		s.recycle(err)
		return 0, fmt.Errorf("read the last seq: %w", err)
	}
	return seq, nil
}

// LockLog takes the table's log lock (log_lock.sql) on a connection taken
// out of the pool. unlock releases it (log_unlock.sql), so that a claim
// right after can take it, and closes the connection, which releases it
// in any case.
func (s *Store) LockLog(ctx context.Context) (unlock func(), err error) {
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("take the table's log lock: %w", err)
	}
	conn := pooled.Hijack()
	if _, err := conn.Exec(ctx, s.queries["log_lock"]); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("take the table's log lock: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			closing, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = conn.Exec(closing, s.queries["log_unlock"])
			_ = conn.Close(closing)
		})
	}, nil
}

// FreshLeft reports whether a fresh PENDING row with seq up to upTo is left.
// It runs after record_plan.sql, as the record statements do: every
// quarter second during a backfill, it must walk the PENDING index, not
// scan the table, whatever the statistics say.
func (s *Store) FreshLeft(ctx context.Context, upTo int64) (bool, error) {
	b := &pgx.Batch{}
	b.Queue(s.queries["record_plan"])
	var left bool
	b.Queue(s.queries["fresh_left"], upTo).QueryRow(func(row pgx.Row) error { return row.Scan(&left) })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		s.recycle(err)
		return false, fmt.Errorf("look for events left to backfill: %w", err)
	}
	return left, nil
}

// Visible reports whether every transaction of txns (xids in decimal, as
// pgwal names them) is visible to a new snapshot.
func (s *Store) Visible(ctx context.Context, txns []string) (bool, error) {
	ids := make([]int64, len(txns))
	for i, t := range txns {
		x, err := strconv.ParseUint(t, 10, 32)
		if err != nil {
			return false, fmt.Errorf("wait for transactions to become visible: %q is no transaction id of PostgreSQL's log", t)
		}
		ids[i] = int64(x)
	}
	var visible bool
	if err := s.pool.QueryRow(ctx, s.queries["visible"], ids).Scan(&visible); err != nil {
		s.recycle(err)
		return false, fmt.Errorf("wait for transactions to become visible: %w", err)
	}
	return visible, nil
}
