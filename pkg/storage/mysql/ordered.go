package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/storage"
)

// Ordered claims (ORDERING=partition). An event may be claimed only when
// every event written before it with its key (by seq) is DELIVERED
// or — with ORDERING_ON_DEAD=skip — DEAD; a key's events are claimed as a
// run in order, at most p.RunLimit of them. The rules are PostgreSQL's
// (claim_ordered.sql there); MySQL has neither LATERAL joins nor partial
// indexes, so the walk over keys is driven from here, a chunk of keys per
// statement, and reads only a few entries of key_order_seq_idx per key.
//
// Claims take turns through a named lock (GET_LOCK) held by the claim's
// connection; each statement then reads at READ COMMITTED, so it sees every
// run another relay claimed before, and no two relays can both see a key
// free and claim parts of it. The lease goes on with one UPDATE, which
// commits by itself: the picks need no row locks while the lock is held,
// since only a claim moves a row out of PENDING.

// claimConn is where an ordered claim's statements run: its connection,
// or a transaction on it.
type claimConn interface {
	querier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// errNoLock says an ordered claim gave up waiting for the claims of other
// relays.
var errNoLock = errors.New("timed out waiting for the ordered-claim lock")

// claimLockWait is how long an ordered claim waits for the claims of other
// relays on the table; they take milliseconds.
const claimLockWait = 10 * time.Second

func (s *Store) claimOrdered(ctx context.Context, p storage.ClaimParams) (storage.Batch, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return storage.Batch{}, fmt.Errorf("claim batch: %w", err)
	}
	defer conn.Close()

	var locked sql.NullInt64
	var now time.Time
	err = conn.QueryRowContext(ctx, s.queries["claim_ordered_lock"], s.claimLock, int(claimLockWait/time.Second)).
		Scan(&locked, &now)
	switch {
	case err != nil:
		return storage.Batch{}, fmt.Errorf("claim batch: lock: %w", err)
	case locked.Int64 != 1:
		return storage.Batch{}, fmt.Errorf("claim batch: %w after %s; another relay's claim on %s is stuck", errNoLock, claimLockWait, s.table)
	}
	defer func() {
		// On a connection that cannot say RELEASE_LOCK the lock goes with
		// the connection, which database/sql then discards.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), s.queries["claim_ordered_unlock"], s.claimLock)
	}()

	lease := storage.Lease{RelayID: p.RelayID, LockedAt: now}
	// The claim's statements run on q: the connection, or beside a log
	// reader that may let the claims take every fresh row
	// (FreshEvents.WhenUnlocked) a transaction on it, which holds the log
	// lock's row shared until the lease commits.
	var (
		q  claimConn = conn
		tx *sql.Tx
	)
	if p.Fresh.ToLog && p.Fresh.WhenUnlocked {
		if tx, err = conn.BeginTx(ctx, nil); err != nil {
			return storage.Batch{}, fmt.Errorf("claim batch: %w", err)
		}
		defer func() { _ = tx.Rollback() }() // a no-op after Commit; before RELEASE_LOCK
		q = tx
	}
	upTo, err := s.freshTo(ctx, q, p.Fresh)
	if err != nil {
		return storage.Batch{}, fmt.Errorf("claim batch: %w", err)
	}
	keyed, keys, err := s.walkKeys(ctx, q, p, now, upTo)
	if err != nil {
		return storage.Batch{}, fmt.Errorf("claim batch: %w", err)
	}
	unkeyed, err := s.unkeyed(ctx, q, p.Limit, now, upTo)
	if err != nil {
		return storage.Batch{}, fmt.Errorf("claim batch: %w", err)
	}
	// Keyed and unkeyed events alternate, so neither crowds out the other.
	// Each list is taken from its start, so a key's picks stay the first
	// places of its run. walked[i] is how many keyed picks ids[:i+1] holds.
	ids := make([]uuid.UUID, 0, p.Limit)
	walked := make([]int, 0, p.Limit)
	for i := 0; len(ids) < p.Limit && (i < len(keyed) || i < len(unkeyed)); i++ {
		if i < len(keyed) {
			ids = append(ids, keyed[i])
			walked = append(walked, i+1)
		}
		if i < len(unkeyed) && len(ids) < p.Limit {
			ids = append(ids, unkeyed[i])
			walked = append(walked, min(i+1, len(keyed)))
		}
	}
	if len(ids) == 0 {
		return storage.Batch{Lease: lease, After: p.After}, nil
	}
	picked := len(ids)
	if p.MaxBytes > 0 {
		// A prefix of the picks: every key's picks stay the first places
		// of its run.
		if ids, err = s.fitting(ctx, q, ids, p.MaxBytes); err != nil {
			return storage.Batch{}, fmt.Errorf("claim batch: %w", err)
		}
	}
	// The next claim's walk starts after the last key this one took: the
	// key of the last keyed pick that the byte limit kept.
	after := p.After
	if n := walked[len(ids)-1]; n > 0 {
		after = keys[n-1]
	}

	// failed hands the lease's rows back: the UPDATE commits by itself,
	// and an error after it was sent may hide a lease that took effect. In
	// a transaction, rolling it back undoes the lease.
	failed := func(err error) error {
		if tx != nil {
			_ = tx.Rollback()
			return err
		}
		return s.handBack(ctx, lease, err)
	}
	args := append([]any{p.RelayID, stamp(now), stamp(now)}, idArgs(ids)...)
	mark := func() error {
		_, err := q.ExecContext(ctx, expandList(s.queries["claim_mark"], "{{ids}}", len(ids)), args...)
		return err
	}
	if tx != nil {
		// A deadlock rolls the whole transaction back, and the claim
		// with it: the relay claims again.
		err = mark()
	} else {
		err = withLockRetry(ctx, mark)
	}
	if err != nil {
		return storage.Batch{}, failed(fmt.Errorf("claim batch: %w", err))
	}
	rows, err := q.QueryContext(ctx, expandList(s.queries["claim_read"], "{{ids}}", len(ids)),
		append(idArgs(ids), p.RelayID, stamp(now))...)
	if err != nil {
		return storage.Batch{}, failed(fmt.Errorf("claim batch: read claimed rows: %w", err))
	}
	events, seqs, _, err := readEvents(rows, len(ids), false)
	if err != nil {
		return storage.Batch{}, failed(fmt.Errorf("claim batch: read claimed rows: %w", err))
	}
	if tx != nil {
		if err := tx.Commit(); err != nil {
			// The commit may have happened before the connection failed.
			return storage.Batch{}, s.handBack(ctx, lease, fmt.Errorf("claim batch: commit: %w", err))
		}
	}
	sortBySeq(events, seqs)
	// Picks the byte limit cut are left for the next claim, at once.
	full := picked >= p.Limit || len(ids) < picked
	return storage.Batch{Lease: lease, Events: events, After: after, Full: full}, nil
}

// fitting keeps the longest prefix of ids whose payloads and headers add up
// to at most maxBytes (at least the first).
func (s *Store) fitting(ctx context.Context, conn claimConn, ids []uuid.UUID, maxBytes int64) ([]uuid.UUID, error) {
	rows, err := conn.QueryContext(ctx, expandList(s.queries["claim_sizes"], "{{ids}}", len(ids)), idArgs(ids)...)
	if err != nil {
		return nil, fmt.Errorf("read sizes: %w", err)
	}
	found, _, err := readPicks(rows, len(ids), false)
	if err != nil {
		return nil, fmt.Errorf("read sizes: %w", err)
	}
	size := make(map[uuid.UUID]int64, len(found))
	for _, p := range found {
		size[p.id] = p.size
	}
	ps := make(picks, len(ids))
	for i, id := range ids {
		ps[i] = pick{id: id, size: size[id]}
	}
	return ps.fitting(maxBytes), nil
}

// walkKeys picks the runs of keyed events, at most p.Limit events, walking
// the keys with PENDING events in bytewise order from just after p.After
// to the end, then from the start up to p.After itself. It returns the
// picks in walk order and each one's key.
func (s *Store) walkKeys(ctx context.Context, conn claimConn, p storage.ClaimParams, now time.Time, freshUpTo int64) ([]uuid.UUID, []string, error) {
	var (
		picks   []uuid.UUID
		keyOfID []string
	)
	chunk := min(p.Limit, 64)
	walk := func(after string, upTo *string) error {
		for len(picks) < p.Limit {
			keys, err := s.nextKeys(ctx, conn, after, upTo, chunk)
			if err != nil || len(keys) == 0 {
				return err
			}
			runs, err := s.runs(ctx, conn, keys, p.OnDead, p.RunLimit, now, freshUpTo)
			if err != nil {
				return err
			}
			for _, k := range keys {
				for _, id := range runs[k] {
					if len(picks) == p.Limit {
						return nil
					}
					picks = append(picks, id)
					keyOfID = append(keyOfID, k)
				}
			}
			if len(keys) < chunk {
				return nil
			}
			after = keys[len(keys)-1]
			chunk = min(2*chunk, 512)
		}
		return nil
	}
	if err := walk(p.After, nil); err != nil {
		return nil, nil, err
	}
	if p.After != "" {
		upTo := p.After
		if err := walk("", &upTo); err != nil {
			return nil, nil, err
		}
	}
	return picks, keyOfID, nil
}

// nextKeys returns at most n keys with PENDING events after after (and up
// to upTo, when set), in bytewise order.
func (s *Store) nextKeys(ctx context.Context, conn claimConn, after string, upTo *string, n int) ([]string, error) {
	query := s.queries["claim_ordered_keys"]
	args := []any{[]byte(after)}
	if upTo != nil {
		query = strings.Replace(query, "{{upper}}", "AND partition_key <= ?", 1)
		args = append(args, []byte(*upTo))
	} else {
		query = strings.Replace(query, "{{upper}}", "", 1)
	}
	rows, err := conn.QueryContext(ctx, query, append(args, n)...)
	if err != nil {
		return nil, fmt.Errorf("walk keys: %w", err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("walk keys: %w", err)
		}
		keys = append(keys, string(k))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("walk keys: %w", err)
	}
	return keys, nil
}

// runs returns, for each of keys that is free, the events it may claim:
// its PENDING events from the first on, in order, while they are due (and,
// under block, no DEAD event precedes them), at most runLimit. A key with
// an event DELIVERING gets none. A fresh event with a seq past upTo is the
// log's and counts as not due: a key whose first event it is gets none.
func (s *Store) runs(ctx context.Context, conn claimConn, keys []string, onDead storage.DeadPolicy, runLimit int, now time.Time, upTo int64) (map[string][]uuid.UUID, error) {
	branch, lead := s.withFresh(s.queries["claim_ordered_run"], "claim_ordered_fresh", []any{stamp(now)}, upTo)
	perKey := 3 + len(lead)
	if onDead == storage.DeadBlock {
		branch = strings.Replace(branch, "{{held}}", s.queries["claim_ordered_held"], 1)
		perKey++
	} else {
		branch = strings.Replace(branch, "{{held}}", "0", 1)
	}
	parts := make([]string, len(keys))
	args := make([]any, 0, perKey*len(keys))
	for i, k := range keys {
		parts[i] = branch
		args = append(append(args, lead...), []byte(k))
		if onDead == storage.DeadBlock {
			args = append(args, []byte(k))
		}
		args = append(args, []byte(k), runLimit)
	}
	rows, err := conn.QueryContext(ctx, strings.Join(parts, "\nUNION ALL\n"), args...)
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	defer rows.Close()
	type candidate struct {
		id   uuid.UUID
		seq  int64
		due  bool
		busy bool
		held bool
	}
	byKey := map[string][]candidate{}
	for rows.Next() {
		var (
			key, id []byte
			c       candidate
		)
		if err := rows.Scan(&key, &id, &c.seq, &c.due, &c.busy, &c.held); err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
		if err := c.id.UnmarshalBinary(id); err != nil {
			return nil, fmt.Errorf("read runs: event_id: %w", err)
		}
		byKey[string(key)] = append(byKey[string(key)], c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	out := make(map[string][]uuid.UUID, len(byKey))
	for k, cs := range byKey {
		// UNION ALL promises no order; each key's events are put back in
		// the order they were written.
		slices.SortFunc(cs, func(a, b candidate) int { return cmp.Compare(a.seq, b.seq) })
		var run []uuid.UUID
		for _, c := range cs {
			if c.busy || !c.due || c.held {
				break
			}
			run = append(run, c.id)
		}
		out[k] = run
	}
	return out, nil
}

// unkeyed returns at most limit due events without a key, by age, fresh
// ones with seq up to upTo only.
func (s *Store) unkeyed(ctx context.Context, conn claimConn, limit int, now time.Time, upTo int64) ([]uuid.UUID, error) {
	query, args := s.withFresh(s.queries["claim_unkeyed"], "claim_fresh", []any{stamp(now)}, upTo)
	rows, err := conn.QueryContext(ctx, query, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("read events without a key: %w", err)
	}
	defer rows.Close()
	var ids []uuid.UUID
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read events without a key: %w", err)
		}
		u, err := uuid.FromBytes(id)
		if err != nil {
			return nil, fmt.Errorf("read events without a key: event_id: %w", err)
		}
		ids = append(ids, u)
	}
	return ids, rows.Err()
}
