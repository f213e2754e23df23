package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Claim moves up to p.Limit due rows to DELIVERING and returns them in the
// order they were written (seq), so that events sharing a partition key are
// published in that order.
//
// An unordered claim is one short transaction: SELECT … FOR UPDATE SKIP
// LOCKED reads and locks the rows along with the lease stamp (the
// statement's UTC_TIMESTAMP(6)), one UPDATE leases them, and COMMIT. A
// deadlock or lock-wait timeout rolls it back and it runs again. The
// SELECT starts where the relay's previous claims ended, or sweeps from
// the start of the due rows (cursor.go).
func (s *Store) Claim(ctx context.Context, p storage.ClaimParams) (storage.Batch, error) {
	if p.Limit < 1 {
		return storage.Batch{}, fmt.Errorf("claim batch: Limit must be positive, got %d", p.Limit)
	}
	p = p.WithDefaults()
	if p.Ordering == storage.OrderingPartition {
		b, err := s.claimOrdered(ctx, p)
		if p.Fresh.ToLog && p.Fresh.WhenUnlocked {
			// In a transaction (ordered.go), which a deadlock rolls
			// back whole: the claim runs again.
			err = withLockRetry(ctx, func() error {
				if !retryable(err) {
					return err
				}
				b, err = s.claimOrdered(ctx, p)
				return err
			})
		}
		s.recycle(err)
		return b, err
	}
	// A backfill beside a log reader sweeps: its rows may lie behind the
	// position, which the claims' sweeps (SWEEP_INTERVAL) reach late.
	planned := s.cursors.plan(p.RelayID, p.SweepInterval, time.Now(), p.Fresh.ToLog && p.Fresh.BackfillTo > 0)
	var (
		batch    storage.Batch
		last     *position
		end      *time.Time
		plan     claimPlan
		withheld bool
	)
	err := withLockRetry(ctx, func() error {
		var err error
		batch, plan, last, end, withheld, err = s.claimOnce(ctx, p, planned)
		return err
	})
	if err != nil {
		s.recycle(err)
		return storage.Batch{}, err
	}
	s.cursors.record(p.RelayID, plan, last, end, withheld)
	return batch, nil
}

// claimOnce runs the claim's transaction. Besides the batch it returns the
// plan it followed, the position of the last row taken (nil: none), when
// the scan reached the end of the due rows before the limit the
// database's clock, and whether it left fresh rows to a log reader.
func (s *Store) claimOnce(ctx context.Context, p storage.ClaimParams, plan claimPlan) (storage.Batch, claimPlan, *position, *time.Time, bool, error) {
	batch, last, end, withheld, err := s.claimIn(ctx, p, &plan)
	return batch, plan, last, end, withheld, err
}

// claimIn is claimOnce, changing plan when the claim sweeps after all.
func (s *Store) claimIn(ctx context.Context, p storage.ClaimParams, plan *claimPlan) (storage.Batch, *position, *time.Time, bool, error) {
	lease := storage.Lease{RelayID: p.RelayID}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storage.Batch{}, nil, nil, false, fmt.Errorf("claim batch: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	// Beside a log reader, first the fresh rows this claim may take (and
	// the log lock shared, when it may take them all).
	upTo, err := s.freshTo(ctx, tx, p.Fresh)
	if err != nil {
		return storage.Batch{}, nil, nil, false, fmt.Errorf("claim batch: %w", err)
	}
	withheld := upTo != math.MaxInt64
	if !withheld && plan.withheld {
		// Earlier claims left fresh rows to a log reader, behind the
		// position: this one may take them.
		*plan = plan.fromStart()
	}
	batch, last, end, err := s.claimRows(ctx, tx, p, *plan, upTo, lease)
	return batch, last, end, withheld, err
}

// claimRows is the claim's transaction after the log lock: fresh rows
// with seq up to upTo only.
func (s *Store) claimRows(ctx context.Context, tx *sql.Tx, p storage.ClaimParams, plan claimPlan, upTo int64, lease storage.Lease) (storage.Batch, *position, *time.Time, error) {
	query, args := s.claimQuery(plan, p.Limit, upTo)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	picks, at, err := readPicks(rows, p.Limit, true)
	if err != nil {
		return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	if len(picks) == 0 {
		// Nothing due after the floor: the scan's end is now, by the
		// database's clock, which the empty SELECT did not return.
		if err := tx.QueryRowContext(ctx, s.queries["claim_clock"]).Scan(&at); err != nil {
			return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: read the clock: %w", err)
		}
		return storage.Batch{Lease: lease}, nil, &at, nil
	}
	lease.LockedAt = at
	// Rows locked and not kept are free again when the claim commits.
	ids := picks.fitting(p.MaxBytes)
	args = append([]any{p.RelayID, stamp(at), stamp(at)}, idArgs(ids)...)
	res, err := tx.ExecContext(ctx, expandList(s.queries["claim_mark"], "{{ids}}", len(ids)), args...)
	if err != nil {
		return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && int(n) != len(ids) {
		// The rows are locked, so this cannot happen; returning rows that
		// are not leased would be worse than failing.
		return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: leased %d of the %d rows read", n, len(ids))
	}
	rows, err = tx.QueryContext(ctx, expandList(s.queries["claim_read"], "{{ids}}", len(ids)),
		append(idArgs(ids), p.RelayID, stamp(at))...)
	if err != nil {
		return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: read claimed rows: %w", err)
	}
	events, seqs, _, err := readEvents(rows, len(ids), false)
	if err != nil {
		return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: read claimed rows: %w", err)
	}
	if err := tx.Commit(); err != nil {
		// The commit may have happened before the connection failed.
		return storage.Batch{}, nil, nil, s.handBack(ctx, lease, fmt.Errorf("claim batch: commit: %w", err))
	}
	sortBySeq(events, seqs)
	// The picks came in index order, so the last one kept is where this
	// claim ended; a row whose state_at cannot be read (a zero date) says
	// nothing, and the position stays.
	var last *position
	if kept := picks[len(ids)-1]; kept.at.valid {
		last = &position{at: kept.at.t, seq: kept.seq}
	}
	var end *time.Time
	if len(picks) < p.Limit && len(ids) == len(picks) {
		end = &at
	}
	// Rows the byte limit cut are left for the next claim, at once.
	full := len(picks) >= p.Limit || len(ids) < len(picks)
	return storage.Batch{Lease: lease, Events: events, Full: full}, last, end, nil
}

// claimQuery is the claim's SELECT and its arguments: from the start of
// the due rows, or after the plan's floor; fresh rows with seq up to upTo
// only (math.MaxInt64: all, and the statement of a claim without a log
// reader).
func (s *Store) claimQuery(plan claimPlan, limit int, upTo int64) (string, []any) {
	query, args := s.queries["claim"], []any{}
	if plan.floor == nil {
		query = strings.Replace(query, "{{floor}}", "", 1)
	} else {
		query = strings.Replace(query, "{{floor}}", s.queries["claim_floor"], 1)
		args = append(args, stamp(plan.floor.at), stamp(plan.floor.at), plan.floor.seq)
	}
	query, args = s.withFresh(query, "claim_fresh", args, upTo)
	return query, append(args, limit)
}

// withFresh fills query's {{fresh}} with the named part for fresh rows up
// to upTo, appending its argument to args, or with nothing when every
// fresh row may be taken.
func (s *Store) withFresh(query, part string, args []any, upTo int64) (string, []any) {
	if upTo == math.MaxInt64 {
		return strings.Replace(query, "{{fresh}}", "", 1), args
	}
	return strings.Replace(query, "{{fresh}}", s.queries[part], 1), append(args, upTo)
}

// sortBySeq orders a claimed batch by seq, the order the events were
// written in (created_at is the start of the writer's transaction, which
// may have written after a transaction that began later).
func sortBySeq(events []outbox.Event, seqs []int64) {
	idx := make([]int, len(events))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(seqs[a], seqs[b]) })
	sorted := make([]outbox.Event, len(events))
	for i, j := range idx {
		sorted[i] = events[j]
	}
	copy(events, sorted)
}

// readEvents reads claimed rows: event_id, event_type, partition_key,
// payload, headers, attempts, created_at, seq and, when withStamp, the
// lease stamp. A created_at the driver cannot parse (a zero or invalid date
// written by a producer in a lax sql_mode) reads as the zero time: one such
// row must not fail the claim of the whole batch.
func readEvents(rows *sql.Rows, limit int, withStamp bool) ([]outbox.Event, []int64, time.Time, error) {
	defer rows.Close()
	events := make([]outbox.Event, 0, limit)
	seqs := make([]int64, 0, limit)
	var at time.Time
	for rows.Next() {
		var (
			e         outbox.Event
			id        []byte
			key       sql.NullString
			headers   []byte
			createdAt lenientTime
			seq       sql.NullInt64
		)
		dest := []any{&id, &e.Type, &key, &e.Payload, &headers, &e.Attempts, &createdAt, &seq}
		if withStamp {
			dest = append(dest, &at)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, at, fmt.Errorf("read row: %w", err)
		}
		if err := e.ID.UnmarshalBinary(id); err != nil {
			return nil, nil, at, fmt.Errorf("read row: event_id: %w", err)
		}
		e.PartitionKey = key.String
		e.Headers = headers
		if e.Payload == nil {
			e.Payload = []byte{}
		}
		e.CreatedAt = createdAt.t
		events = append(events, e)
		seqs = append(seqs, seq.Int64)
	}
	return events, seqs, at, rows.Err()
}

// picks are the ids a claim may take, in the order it takes them, with
// their sizes and, for the unordered claim, their places in state_seq_idx.
type picks []pick

type pick struct {
	id   uuid.UUID
	size int64
	at   lenientTime
	seq  int64
}

// fitting returns the ids of the longest prefix whose sizes add up to at
// most maxBytes, or of the first pick alone when even it is larger, so that
// no event is stuck; maxBytes 0 keeps them all.
func (ps picks) fitting(maxBytes int64) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(ps))
	var total int64
	for i, p := range ps {
		total += p.size
		if maxBytes > 0 && total > maxBytes && i > 0 {
			break
		}
		ids = append(ids, p.id)
	}
	return ids
}

// readPicks reads rows of (event_id, size) or, for a claim, of (event_id,
// size, state_at, seq, stamp).
func readPicks(rows *sql.Rows, limit int, claim bool) (picks, time.Time, error) {
	defer rows.Close()
	ps := make(picks, 0, limit)
	var at time.Time
	for rows.Next() {
		var (
			id   []byte
			p    pick
			size sql.NullInt64
		)
		dest := []any{&id, &size}
		if claim {
			dest = append(dest, &p.at, &p.seq, &at)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, at, fmt.Errorf("read row: %w", err)
		}
		if err := p.id.UnmarshalBinary(id); err != nil {
			return nil, at, fmt.Errorf("read row: event_id: %w", err)
		}
		p.size = size.Int64
		ps = append(ps, p)
	}
	return ps, at, rows.Err()
}

// lenientTime scans a DATETIME and never fails: what it cannot read is the
// zero time, and valid is false.
type lenientTime struct {
	t     time.Time
	valid bool
}

func (l *lenientTime) Scan(src any) error {
	var err error
	switch v := src.(type) {
	case time.Time:
		l.t = v
	case []byte:
		l.t, err = time.Parse("2006-01-02 15:04:05.999999", string(v))
	case string:
		l.t, err = time.Parse("2006-01-02 15:04:05.999999", v)
	default:
		l.t, err = time.Time{}, errors.New("not a time")
	}
	l.valid = err == nil && !l.t.IsZero()
	return nil
}

// handBack releases every row of a claim that failed after its UPDATE may
// have committed, and returns the claim's error with what became of them.
func (s *Store) handBack(ctx context.Context, lease storage.Lease, claimErr error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	var n int64
	err := withLockRetry(ctx, func() error {
		res, err := s.db.ExecContext(ctx, s.queries["release_lease"], lease.RelayID, stamp(lease.LockedAt))
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%w (handing its rows back failed too, the reaper will take them back: %v)", claimErr, err)
	}
	if n > 0 {
		return fmt.Errorf("%w (its %d rows were handed back)", claimErr, n)
	}
	return claimErr
}

// handBackTimeout bounds handing back the rows of a failed claim.
const handBackTimeout = 5 * time.Second

// Settle records o on the lease's rows: a statement per kind
// (mark_delivered.sql or delete_delivered.sql, mark_failed.sql,
// release.sql), one after another (byKind), each retried on a lock wait
// or a deadlock. Running the whole call again after an error is safe:
// every statement changes only rows still DELIVERING under the lease, and
// leaves none so, so a statement that landed changes nothing when it runs
// again, and mark_failed.sql cannot count a failure's attempt twice.
func (s *Store) Settle(ctx context.Context, lease storage.Lease, o storage.Outcome) (storage.Settled, error) {
	return byKind("settle", o, func() (int, error) {
		return s.settle(ctx, deliveredStatement(o, "mark_delivered", "delete_delivered"), nil, o.Delivered, lease)
	}, func() (int, error) {
		query, args, ids := s.withFailures("mark_failed", o.Failed)
		return s.settle(ctx, "", args, ids, lease, query)
	}, func() (int, error) {
		return s.settle(ctx, "release", nil, o.Released, lease)
	})
}

// deliveredStatement names the statement of o's delivered rows: marked,
// or deleted with o.Delete (DELIVERED_RETENTION=0).
func deliveredStatement(o storage.Outcome, marked, deleted string) string {
	if o.Delete {
		return deleted
	}
	return marked
}

// byKind runs the statement of each kind of o that has rows — delivered,
// failed, released, in that order — and counts the rows each changed.
// They are not one transaction: when one fails, those before it have
// committed, and their counts come back with its error (named by what
// and the kind).
func byKind(what string, o storage.Outcome, delivered, failed, released func() (int, error)) (storage.Settled, error) {
	var settled storage.Settled
	for _, k := range []struct {
		kind  string
		rows  int
		count *int
		run   func() (int, error)
	}{
		{"delivered", len(o.Delivered), &settled.Delivered, delivered},
		{"failed", len(o.Failed), &settled.Failed, failed},
		{"released", len(o.Released), &settled.Released, released},
	} {
		if k.rows == 0 {
			continue
		}
		n, err := k.run()
		if err != nil {
			return settled, fmt.Errorf("%s %s: %w", what, k.kind, err)
		}
		*k.count = n
	}
	return settled, nil
}

// Renew moves the lease's rows among p.IDs to the stamp p.To.
func (s *Store) Renew(ctx context.Context, p storage.RenewParams) (int, error) {
	n, err := s.settle(ctx, "renew", []any{stamp(p.To)}, p.IDs, p.Lease)
	if err != nil {
		return 0, fmt.Errorf("renew lease: %w", err)
	}
	return n, nil
}

// withFailures is the statement name with its {{failures}} mark filled:
// a derived table of one SELECT per failure (id, error, dead, delay_us),
// which the statement joins with the outbox table; args are the derived
// table's arguments, ids the failures' ids, in order.
func (s *Store) withFailures(name string, failures []storage.Failure) (query string, args []any, ids []uuid.UUID) {
	var rows strings.Builder
	args = make([]any, 0, 4*len(failures))
	ids = make([]uuid.UUID, len(failures))
	for i, f := range failures {
		if i > 0 {
			rows.WriteString(" UNION ALL ")
		}
		rows.WriteString("SELECT ? AS id, ? AS error, ? AS dead, ? AS delay_us")
		args = append(args, f.ID[:], storage.StorableError(f.Error), f.Dead, f.Delay.Microseconds())
		ids[i] = f.ID
	}
	return strings.Replace(s.queries[name], "{{failures}}", rows.String(), 1), args, ids
}

// settle runs one of the lease-guarded statements: its leading arguments
// first, then the ids, the relay id and the lease's stamps. query, when
// given, replaces the named query (already expanded but for the lists).
func (s *Store) settle(ctx context.Context, name string, lead []any, ids []uuid.UUID, lease storage.Lease, query ...string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	q := s.queries[name]
	if len(query) > 0 {
		q = query[0]
	}
	stamps := lease.Stamps()
	q = expandList(expandList(q, "{{ids}}", len(ids)), "{{stamps}}", len(stamps))
	args := append(append(lead, idArgs(ids)...), lease.RelayID)
	for _, t := range stamps {
		args = append(args, stamp(t))
	}
	var n int64
	err := withLockRetry(ctx, func() error {
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	s.recycle(err)
	return int(n), err
}

// Reap takes back at most p.Limit leases older than p.LeaseTimeout, in one
// transaction: lock the expired rows (SKIP LOCKED), then update them.
func (s *Store) Reap(ctx context.Context, p storage.ReapParams) (storage.ReapResult, error) {
	var r storage.ReapResult
	err := withLockRetry(ctx, func() error {
		var err error
		r, err = s.reapOnce(ctx, p)
		return err
	})
	if err != nil {
		s.recycle(err)
		return storage.ReapResult{}, fmt.Errorf("reap expired leases: %w", err)
	}
	return r, nil
}

func (s *Store) reapOnce(ctx context.Context, p storage.ReapParams) (storage.ReapResult, error) {
	var r storage.ReapResult
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return r, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, s.queries["reap_pick"], p.LeaseTimeout.Microseconds(), p.Limit)
	if err != nil {
		return r, err
	}
	var ids []uuid.UUID
	for rows.Next() {
		var id []byte
		var attempts int
		if err := rows.Scan(&id, &attempts); err != nil {
			rows.Close()
			return r, err
		}
		u, err := uuid.FromBytes(id)
		if err != nil {
			rows.Close()
			return r, fmt.Errorf("event_id: %w", err)
		}
		ids = append(ids, u)
		if p.Dead(attempts) {
			r.Dead++
		} else {
			r.Requeued++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, err
	}
	if len(ids) == 0 {
		return r, nil
	}
	args := append([]any{p.DeadFrom()}, idArgs(ids)...)
	if _, err := tx.ExecContext(ctx, expandList(s.queries["reap"], "{{ids}}", len(ids)), args...); err != nil {
		return storage.ReapResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return storage.ReapResult{}, err
	}
	return r, nil
}

// expandList replaces marker in query with n comma-separated placeholders.
func expandList(query, marker string, n int) string {
	if n == 0 {
		return strings.ReplaceAll(query, marker, "NULL")
	}
	return strings.ReplaceAll(query, marker, strings.TrimSuffix(strings.Repeat("?, ", n), ", "))
}

// idArgs turns ids into BINARY(16) arguments. A uuid.UUID as an argument
// would be sent as its text form.
func idArgs(ids []uuid.UUID) []any {
	args := make([]any, len(ids))
	for i := range ids {
		args[i] = ids[i][:]
	}
	return args
}
