package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The engine's side of the store (storage.Queue and storage.Reaper): claims
// and the lease-guarded settles. The store itself — opening, checking,
// errors, notifications — is in postgres.go.

// Claim moves up to p.Limit due rows to DELIVERING and returns them in
// write order (seq), so that events sharing a partition key are published
// in the order they were written. Unordered claims go forward from the
// relay's claim position (position.go).
//
// The claim goes out as one pipeline, which PostgreSQL runs as one implicit
// transaction in one round trip: for ordered claims first a per-table
// advisory lock, for unordered ones the planner settings of claim_plan.sql;
// then the lease stamp (the transaction's now()) with the snapshot's
// transaction ids, then the claiming statement. Knowing the stamp before
// reading the rows lets a claim whose rows cannot be read in full hand them
// back at once.
func (s *Store) Claim(ctx context.Context, p storage.ClaimParams) (storage.Batch, error) {
	b, _, _, err := s.claim(ctx, s.pool, p, 0)
	return b, err
}

// batchSender runs a pipeline: the pool, or a held claim's connection.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claim is Claim on on, or, with idle > 0, a held claim (held.go): its
// pipeline begins a transaction, which it leaves open on on's connection,
// and takes the rows without leasing them. A held claim returns where each
// of its rows lies (rows), and unhold, to be called when its transaction
// ends.
func (s *Store) claim(ctx context.Context, on batchSender, p storage.ClaimParams, idle time.Duration) (_ storage.Batch, rows []pgtype.TID, unhold func(), _ error) {
	p = p.WithDefaults()
	held := idle > 0
	b := &pgx.Batch{}
	claim := s.queries["claim"]
	var (
		pos *position
		pl  plan
		// fpl is an unordered claim's plan, by the relay's frontier
		// unless the log delivers fresh rows.
		fpl   frontierPlan
		fread *frontierRead
	)
	if held {
		b.Queue("BEGIN")
		b.Queue(s.queries["held_begin"], idle.Milliseconds())
		claim = s.queries["claim_held"]
	}
	var fromFloors *floorsClaim
	if p.Ordering == storage.OrderingPartition {
		// Ordered claims take turns: the claim statement's snapshot is
		// taken after the lock is held, so it sees every run another
		// relay claimed and cannot take a later part of it. Events
		// without a key are taken in seq order from a position, as the
		// unordered claims take theirs (unless the log delivers them),
		// and keys from their floors (keys.go) where the relay knows them.
		var unkeyedFloor int64
		if p.FreshTo == 0 {
			pos = s.positions.of(p.RelayID)
			pos.mu.Lock()
			defer pos.mu.Unlock()
			pos.ordered = true
			pl = pos.next(p.Limit, p.SweepInterval, time.Now())
			unkeyedFloor = pl.floor
			var err error
			if fromFloors, err = s.findKeys(ctx, pos, p); err != nil {
				return storage.Batch{}, nil, nil, err
			}
		}
		b.Queue(s.queries["claim_lock"], claimLockClass, s.table.Quoted())
		b.Queue(s.queries["claim_plan"])
		b.Queue(s.queries["claim_stamp"], true)
		name := "claim_ordered"
		if fromFloors != nil {
			name = "claim_ordered_keys"
		}
		if p.OnDead == storage.DeadBlock {
			name += "_block"
		} else {
			name += "_skip"
		}
		if fromFloors != nil {
			b.Queue(s.queries[name], fromFloors.claimArgs(p, pl)...)
		} else {
			b.Queue(s.queries[name], p.RelayID, p.Limit, p.After, p.MaxBytes, p.RunLimit, freshTo(p.FreshTo), unkeyedFloor, dueAt(pl.dueFrom), pl.dueFrom.seq)
		}
	} else if p.FreshTo != 0 {
		// The log delivers fresh rows: a backfill's walk is bounded and
		// done once, and a claim of rows due again alone reads the due
		// index; neither moves the relay's claim position.
		fpl, fread = everything(), &frontierRead{}
		b.Queue(s.queries["claim_plan"])
		b.Queue(s.queries["claim_stamp"], false)
		b.Queue(claim, append([]any{p.RelayID, p.Limit, p.MaxBytes}, fpl.args(freshTo(p.FreshTo))...)...)
	} else {
		// One relay's claims come one after another; the frontier is
		// held for the claim's round trip.
		pos = s.positions.of(p.RelayID)
		pos.mu.Lock()
		defer pos.mu.Unlock()
		if held {
			p.Limit = pos.heldLimit.rows(p.Limit)
		}
		fpl, fread = pos.fresh.plan(p.SweepInterval, time.Now()), &frontierRead{}
		b.Queue(s.queries["claim_plan"])
		b.Queue(s.queries["claim_stamp"], false)
		b.Queue(claim, append([]any{p.RelayID, p.Limit, p.MaxBytes}, fpl.args(math.MaxInt64)...)...)
	}
	// An ordered claim's transaction id: the bound of the claim's mark.
	ownID := p.Ordering == storage.OrderingPartition && pos != nil
	if ownID {
		b.Queue(s.queries["claim_xid"], pos != nil && pos.needsBound(pl))
	}

	results := on.SendBatch(ctx, b)
	// Closed once only: after an error, pgx's Close touches the
	// connection's statement cache even when called again, by which time
	// the connection is back in the pool and may serve another goroutine.
	closed := false
	closeResults := func() error {
		if closed {
			return nil
		}
		closed = true
		return results.Close()
	}
	defer func() { _ = closeResults() }()
	if held {
		for _, step := range []string{"begin", "idle timeout"} {
			if _, err := results.Exec(); err != nil {
				s.recycle(err)
				return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: %s: %w", step, err)
			}
		}
	}
	if p.Ordering == storage.OrderingPartition {
		if _, err := results.Exec(); err != nil {
			s.recycle(err)
			return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: lock: %w", err)
		}
	}
	if _, err := results.Exec(); err != nil {
		s.recycle(err)
		return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: plan: %w", err)
	}
	lease := storage.Lease{RelayID: p.RelayID}
	var (
		xmin   uint64
		issued pgtype.Int8
	)
	if err := results.QueryRow().Scan(&lease.LockedAt, &xmin, &issued); err != nil {
		s.recycle(err)
		return storage.Batch{}, nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	// An ordered claim's position is its events without a key's: keyed
	// runs may fill a batch past unkeyed rows it leaves for the next.
	ordered := p.Ordering == storage.OrderingPartition
	var visited func(key []byte, head pgtype.Int8)
	if fromFloors != nil {
		visited = fromFloors.visit
	}
	events, rows, read, err := readEvents(results, p.Limit, held, ordered, visited, fread)
	var xid pgtype.Int8
	if err == nil && ownID {
		err = results.QueryRow().Scan(&xid)
	}
	if err == nil {
		err = closeResults()
	}
	if err != nil {
		// The claim's connection goes back to the pool first: on a pool of
		// one, handing back would otherwise wait for it until it timed out.
		_ = closeResults()
		claimErr := fmt.Errorf("claim batch: %w", err)
		var pgErr *pgconn.PgError
		if held {
			// Its transaction is still open: ClaimHeld ends it, and the
			// rows are PENDING as they were.
			s.recycle(err)
			return storage.Batch{}, nil, nil, claimErr
		}
		if errors.As(err, &pgErr) {
			// The server refused the claim, so the pipeline's implicit
			// transaction rolled back and no row is leased: nothing to hand
			// back, and a hand-back failing for the same reason would only
			// blur the error.
			s.recycle(err)
			return storage.Batch{}, nil, nil, claimErr
		}
		return storage.Batch{}, nil, nil, s.handBack(ctx, lease, claimErr)
	}
	batch := storage.Batch{Lease: lease, Events: events}
	// Rows the claim locked: those it took and those past its byte limit.
	locked := len(events) + read.cut
	if held && pos != nil {
		pos.heldLimit.claimed(p.Limit, len(events), read.cut)
	}
	// A claim that stopped at its own limits left events it could have
	// taken: the relay claims again at once.
	batch.Full = locked >= p.Limit || read.cut > 0
	if fread != nil {
		lease.CreatedFrom, lease.CreatedTo = createdRange(events)
		batch.Lease = lease
		if pos == nil {
			return batch, rows, func() {}, nil
		}
		// The rows a held claim leaves stay locked until its transaction
		// ends: their writers stay watched until then.
		release := pos.fresh.done(fpl, p.Limit, lease.LockedAt, *fread, held)
		return batch, rows, func() {
			pos.mu.Lock()
			defer pos.mu.Unlock()
			release()
		}, nil
	}
	// Ordered claims from here on: they are never held.
	if pos != nil {
		wentBack := issued.Valid && issued.Int64 < pos.frontier
		now := time.Now()
		pos.done(pl, xmin, uint64(max(xid.Int64, 0)), read.lowest, read.highest, read.dueReached(lease.LockedAt, p.Limit), now)
		if issued.Valid && locked < p.Limit && read.cut == 0 {
			// Nothing more is due after the position: whatever seq was
			// handed out is claimed by others or not yet committed. (An
			// ordered claim's position is its unkeyed rows', which no key
			// holds back: a short ordered batch took every one it saw. A
			// batch its byte limit cut says nothing of the kind: it left
			// rows below the value read PENDING, and counting them as
			// others' would start the next claims past them.)
			pos.issued(issued.Int64, now)
		}
		if wentBack {
			// The sequence went back (TRUNCATE … RESTART IDENTITY, ALTER
			// SEQUENCE … RESTART): every new row would lie behind the
			// position. Start again from the beginning.
			pos.reset()
		}
	}
	if ordered {
		batch.After = walkEnd(p.After, events)
		if fromFloors != nil {
			batch.After = fromFloors.end(batch.After, len(events) < p.Limit)
		}
	}
	lease.CreatedFrom, lease.CreatedTo = createdRange(events)
	batch.Lease = lease
	return batch, rows, nil, nil
}

// freshTo is the highest seq of a fresh row a claim may take
// (storage.ClaimParams.FreshTo): every one when 0.
func freshTo(p int64) int64 {
	if p == 0 {
		return math.MaxInt64
	}
	return max(p, -1)
}

// walkEnd is where the next ordered claim's walk starts: the last key this
// claim took in claim_ordered.sql's walk, which went through the keys after
// after in bytewise order (Go's string order, the "C" collation's), then
// wrapped around to the start and ended with after itself. The claim
// returns its rows in write order, so the walk's end is found from the
// keys: the highest wrapped key, or else the highest key past after.
func walkEnd(after string, events []outbox.Event) string {
	var past, wrapped string
	for i := range events {
		switch k := events[i].PartitionKey; {
		case k == "":
		case k > after:
			past = max(past, k)
		default:
			wrapped = max(wrapped, k)
		}
	}
	switch {
	case wrapped != "":
		return wrapped
	case past != "":
		return past
	}
	return after
}

// createdRange bounds the events' created_at; zero when an event's is
// unknown (±infinity reads as zero) or there are none.
func createdRange(events []outbox.Event) (from, to time.Time) {
	for i, e := range events {
		if e.CreatedAt.IsZero() {
			return time.Time{}, time.Time{}
		}
		if i == 0 || e.CreatedAt.Before(from) {
			from = e.CreatedAt
		}
		if i == 0 || e.CreatedAt.After(to) {
			to = e.CreatedAt
		}
	}
	return from, to
}

// createdFrom and createdTo are a lease's created_at bounds for the settle
// statements: -infinity and infinity when unknown, so that every row
// matches.
func createdFrom(l storage.Lease) pgtype.Timestamptz {
	if l.CreatedFrom.IsZero() || l.CreatedTo.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: l.CreatedFrom, Valid: true}
}

func createdTo(l storage.Lease) pgtype.Timestamptz {
	if l.CreatedFrom.IsZero() || l.CreatedTo.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: l.CreatedTo, Valid: true}
}

// handBack releases every row of a claim that failed after the claiming
// statement may have committed, and returns the claim's error with what
// became of them.
func (s *Store) handBack(ctx context.Context, lease storage.Lease, claimErr error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	tag, err := s.pool.Exec(ctx, s.queries["release_lease"], lease.RelayID, lease.LockedAt)
	if err != nil {
		s.recycle(err)
		return fmt.Errorf("%w (handing its rows back failed too, the reaper will take them back: %v)", claimErr, err)
	}
	if n := tag.RowsAffected(); n > 0 {
		return fmt.Errorf("%w (its %d rows were handed back)", claimErr, n)
	}
	return claimErr
}

// handBackTimeout bounds handing back the rows of a failed claim.
const handBackTimeout = 5 * time.Second

// claimLockClass is the high half of the ordered-claim advisory lock key;
// the low half is the table's OID.
const claimLockClass = 0x6f72 // "or"

// claimRead is what a claim's rows tell of how far it read: the lowest seq
// among those that were not PENDING again (0 for none: rows a sweep found
// behind the claim position) and the highest seq; the last row it took from
// the due index and how many (dueTaken), and how many that read locked.
type claimRead struct {
	lowest, highest int64
	dueLast         dueKey
	dueTaken        int64
	dueLocked       int64
	// cut is how many rows the claim locked (or, ordered, picked) but did
	// not take, past its byte limit.
	cut int
}

// dueReached is how far the claim's read of the due index got, for a
// claim made at stamp (its transaction's now()) with limit: past every due
// row when its read stopped short of the limit and it took every row it
// locked (then up to its own moment, less dueSettle), else up to the last
// row it took: those it took are the first after where it began.
func (r claimRead) dueReached(stamp time.Time, limit int) dueKey {
	if r.dueLocked < int64(limit) && r.dueTaken == r.dueLocked {
		return dueKey{at: stamp.Add(-dueSettle)}
	}
	return r.dueLast
}

// dueAt passes a due position's time to the claim: '-infinity' for the
// beginning.
func dueAt(k dueKey) pgtype.Timestamptz {
	if k.at.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: k.at, Valid: true}
}

// readEvents reads the claimed rows, which the claim returns in write
// order, with a held claim's row addresses, and how far the claim read,
// the seqs with unkeyedOnly among the rows without a key alone. An
// unordered claim (fr not nil) returns every row it locked, each with its
// arm, writer and whether it is taken, and a last row with its snapshot
// (claim_arms.sql), which go to fr; an ordered one says on every row how
// many rows its byte limit cut (claim_ordered.sql).
//
// It is on the hot path, and written to allocate per batch rather than per
// event: the columns are read without a copy (valid until the next row),
// payloads and headers copied into a few shared chunks, and repeated event
// types and keys share one string.
//
// The floors' walk adds a row for each key it visited (no event id), which
// goes to visited.
func readEvents(results pgx.BatchResults, limit int, held, unkeyedOnly bool, visited func(key []byte, head pgtype.Int8), fr *frontierRead) (events []outbox.Event, addrs []pgtype.TID, read claimRead, err error) {
	rows, err := results.Query()
	if err != nil {
		return nil, nil, read, err
	}
	defer rows.Close()
	events = make([]outbox.Event, 0, limit)
	// Scanned into the same variables row after row: the addresses Scan
	// takes would otherwise move each row's Event to the heap.
	var (
		id                         pgtype.UUID
		typ, key, payload, headers pgtype.DriverBytes
		attempts                   int
		createdAt                  pgtype.Timestamptz
		seq                        pgtype.Int8
		again                      pgtype.Bool
		dueFrom                    pgtype.Timestamptz // available_at of a row read from the due index
		addr                       pgtype.TID
		arena                      byteArena
		strs                       = map[string]string{}
		arm                        pgtype.Int4
		writer                     pgtype.Int8
		taken                      = true
		cut                        int64
	)
	dest := []any{&id, &typ, &key, &payload, &headers, &attempts, &createdAt, &seq}
	if fr != nil {
		dest = append(dest, &arm, &dueFrom, &writer, &taken)
		if held {
			dest = append(dest, &addr)
			addrs = make([]pgtype.TID, 0, limit)
		}
	} else {
		dest = append(dest, &again, &dueFrom, &read.dueLocked, &cut)
	}
	for rows.Next() {
		// The id as pgtype.UUID, its 16 bytes: scanned as a uuid.UUID,
		// pgx would go through database/sql's Scanner and the id's text
		// form.
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, read, fmt.Errorf("read row: %w", err)
		}
		if fr == nil {
			// 0 on the floors' walk's rows.
			read.cut = max(read.cut, int(cut))
		}
		if !id.Valid {
			switch {
			case fr != nil:
				if err := fr.fact(string(typ), uint64(writer.Int64), seq.Int64, dueFrom.Time); err != nil {
					return nil, nil, read, err
				}
			case visited != nil:
				visited(key, seq)
			}
			continue
		}
		if fr != nil {
			fr.row(int(arm.Int32), uint64(writer.Int64), seq.Int64, dueFrom.Time, taken)
			if !taken {
				read.cut++
				continue
			}
			if held {
				addrs = append(addrs, addr)
			}
		}
		if fr == nil {
			// How far an ordered claim read, for its positions.
			if !unkeyedOnly || len(key) == 0 {
				if seq.Valid && !again.Bool && (read.lowest == 0 || seq.Int64 < read.lowest) {
					read.lowest = seq.Int64
				}
				read.highest = max(read.highest, seq.Int64)
			}
			if dueFrom.Valid {
				read.dueTaken++
				read.dueLast = laterDue(read.dueLast, dueKey{at: dueFrom.Time, seq: seq.Int64})
			}
		}
		e := outbox.Event{
			ID:           id.Bytes,
			Type:         intern(strs, typ),
			PartitionKey: intern(strs, key),
			Payload:      arena.copy(payload),
			Headers:      arena.copy(headers),
			Attempts:     attempts,
		}
		if createdAt.Valid {
			e.CreatedAt = createdAt.Time
		}
		events = append(events, e)
	}
	return events, addrs, read, rows.Err()
}

// intern returns b as a string, the same string for the same bytes.
func intern(strs map[string]string, b []byte) string {
	if s, ok := strs[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	strs[s] = s
	return s
}

// byteArena hands out copies of byte slices carved from shared chunks.
type byteArena struct{ chunk []byte }

// arenaChunk is the size of a chunk; a larger slice gets a chunk of its own.
const arenaChunk = 64 << 10

func (a *byteArena) copy(b []byte) []byte {
	if len(b) == 0 {
		return []byte{} // empty, not nil: a Kafka record tells them apart
	}
	if len(b) > cap(a.chunk)-len(a.chunk) {
		a.chunk = make([]byte, 0, max(arenaChunk, len(b)))
	}
	start := len(a.chunk)
	a.chunk = append(a.chunk, b...)
	// Capped, so that an append to one event's slice cannot run into the
	// next event's bytes.
	return a.chunk[start:len(a.chunk):len(a.chunk)]
}

// MarkDelivered moves the lease's rows among p.IDs to DELIVERED.
func (s *Store) MarkDelivered(ctx context.Context, p storage.SettleParams) (int, error) {
	return s.settle(ctx, "mark delivered", "mark_delivered", p.Lease, uuidArray(p.IDs))
}

// DeleteDelivered deletes the lease's rows among p.IDs.
func (s *Store) DeleteDelivered(ctx context.Context, p storage.SettleParams) (int, error) {
	return s.settle(ctx, "delete delivered", "delete_delivered", p.Lease, uuidArray(p.IDs))
}

// MarkFailed records one failed attempt for each of the lease's rows in
// p.Failures.
func (s *Store) MarkFailed(ctx context.Context, p storage.FailParams) (int, error) {
	ids, msgs, dead, delays := failureArrays(p.Failures)
	return s.settle(ctx, "mark failed", "mark_failed", p.Lease, ids, msgs, dead, delays)
}

// failureArrays passes failures to PostgreSQL as one array per column, for
// unnest: ids, the errors as stored, DEAD or not, delays in microseconds.
func failureArrays(fs []storage.Failure) (ids [][16]byte, msgs []string, dead []bool, delays []int64) {
	n := len(fs)
	ids, msgs, dead, delays = make([][16]byte, n), make([]string, n), make([]bool, n), make([]int64, n)
	for i, f := range fs {
		ids[i], msgs[i], dead[i], delays[i] = f.ID, storage.StorableError(f.Error), f.Dead, f.Delay.Microseconds()
	}
	return ids, msgs, dead, delays
}

// Release returns the lease's rows among p.IDs to PENDING, attempts unchanged.
func (s *Store) Release(ctx context.Context, p storage.SettleParams) (int, error) {
	return s.settle(ctx, "release", "release", p.Lease, uuidArray(p.IDs))
}

// Renew moves the lease's rows among p.IDs to the stamp p.To.
func (s *Store) Renew(ctx context.Context, p storage.RenewParams) (int, error) {
	return s.settle(ctx, "renew lease", "renew", p.Lease, uuidArray(p.IDs), p.To)
}

// settle runs one of the lease-guarded statements (sql/<name>.sql), whose
// arguments are always the relay id, the lease's stamps, the rows' ids,
// what the statement adds (more), then the lease's created_at bounds.
func (s *Store) settle(ctx context.Context, what, name string, lease storage.Lease, ids any, more ...any) (int, error) {
	args := append([]any{lease.RelayID, lease.Stamps(), ids}, more...)
	args = append(args, createdFrom(lease), createdTo(lease))
	tag, err := s.pool.Exec(ctx, s.queries[name], args...)
	if err != nil {
		s.recycle(err)
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return int(tag.RowsAffected()), nil
}

// Reap takes back at most p.Limit leases older than p.LeaseTimeout.
func (s *Store) Reap(ctx context.Context, p storage.ReapParams) (storage.ReapResult, error) {
	var r storage.ReapResult
	err := s.pool.QueryRow(ctx, s.queries["reap"], p.LeaseTimeout.Microseconds(), p.Limit, p.DeadFrom()).
		Scan(&r.Requeued, &r.Dead)
	if err != nil {
		s.recycle(err)
		return r, fmt.Errorf("reap expired leases: %w", err)
	}
	return r, nil
}

// uuidArray passes ids to PostgreSQL as 16-byte values. As []uuid.UUID,
// pgx would encode each through database/sql's Valuer: formatted as text,
// parsed back, and planned anew for every element.
func uuidArray(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}
