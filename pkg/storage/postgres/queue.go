package postgres

import (
	"context"
	"errors"
	"fmt"
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
// in the order they were written. Claims go forward from the relay's claim
// frontier (frontier.go), and ordered ones walk keys from their floors
// (keys.go).
//
// The claim goes out as one pipeline, which PostgreSQL runs as one implicit
// transaction in one round trip: for ordered claims first a per-table
// advisory lock, for unordered ones the planner settings of claim_plan.sql;
// then the lease stamp (the transaction's now()) with the snapshot's
// transaction ids, then the claiming statement. Knowing the stamp before
// reading the rows lets a claim whose rows cannot be read in full hand them
// back at once.
func (s *Store) Claim(ctx context.Context, p storage.ClaimParams) (storage.Batch, error) {
	if p.Ordering == storage.OrderingPartition {
		return s.claimOrdered(ctx, p)
	}
	b, _, _, err := s.claim(ctx, s.pool, p, 0)
	return b, err
}

// batchSender runs a pipeline: the pool, or a held claim's connection.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claim is Claim unordered on on, or, with idle > 0, a held claim
// (held.go), which is always unordered: its pipeline begins a
// transaction, which it leaves open on on's connection, and takes the rows
// without leasing them. A held claim returns where each of its rows lies
// (rows), and unhold, to be called when its transaction ends, saying
// whether it ended without a commit.
func (s *Store) claim(ctx context.Context, on batchSender, p storage.ClaimParams, idle time.Duration) (_ storage.Batch, rows []rowAddress, unhold func(abandoned bool), _ error) {
	p = p.WithDefaults()
	held := idle > 0
	st, unlock := s.lockState(p)
	defer unlock()
	fpl, fread := freshPlan(st, p), &frontierRead{}
	b := &claimBatch{}
	claim, limit := "claim", p.Limit
	if held {
		b.step("begin", "BEGIN")
		b.step("idle timeout", s.queries["held_begin"], idle.Milliseconds())
		claim = "claim_held"
		if st != nil {
			limit = st.heldLimit.rows(limit)
		}
	}
	s.queueFreshLock(b, p)
	s.queueArms(b, planOnce, claim, p, limit, fpl)

	c := s.sendClaim(ctx, on, b)
	defer func() { _ = c.close() }()
	lease, err := c.lease(p.RelayID)
	if err != nil {
		return storage.Batch{}, nil, nil, err
	}
	events, _, rows, read, err := readEvents(c.results, limit, held, fread)
	if err := c.end(ctx, err, lease, held); err != nil {
		return storage.Batch{}, nil, nil, err
	}
	batch := claimedBatch(lease, events, p, limit, read.cut, fread)
	if st == nil {
		return batch, rows, func(bool) {}, nil
	}
	if held {
		st.heldLimit.claimed(limit, len(events), read.cut)
	}
	// The rows a held claim leaves stay locked until its transaction
	// ends: their writers stay watched until then.
	unpin := st.frontier.done(fpl, limit, lease.LockedAt, *fread, held)
	return batch, rows, func(abandoned bool) {
		st.mu.Lock()
		defer st.mu.Unlock()
		unpin(abandoned)
	}, nil
}

// lockState is the relay's claim state, held for the claim's round trip
// (one relay's claims come one after another), and what lets it go. It
// is nil when the log delivers the fresh rows (p.Fresh), which a claim
// then reads from the beginning, moving nothing (everything).
func (s *Store) lockState(p storage.ClaimParams) (st *claimState, unlock func()) {
	if p.Fresh.ToLog {
		return nil, func() {}
	}
	st = s.states.of(p.RelayID)
	st.mu.Lock()
	return st, st.mu.Unlock
}

// freshPlan plans the claim of rows by the frontier's arms from st, or
// from the beginning without one.
func freshPlan(st *claimState, p storage.ClaimParams) frontierPlan {
	if st == nil {
		return everything()
	}
	return st.frontier.plan(p.SweepInterval, time.Now())
}

// claimBatch is a claim's pipeline as it is queued: first the statements
// whose results only say whether they ran (steps, each named for the
// claim's error), then the lease stamp, then the claim statements.
type claimBatch struct {
	pgx.Batch
	steps []string
}

// step queues a statement before the lease stamp.
func (b *claimBatch) step(name, sql string, args ...any) {
	b.Queue(sql, args...)
	b.steps = append(b.steps, name)
}

// queueFreshLock queues, beside a log reader, the choice of the fresh
// rows the claim statements take, by the table's log lock
// (fresh_lock.sql).
func (s *Store) queueFreshLock(b *claimBatch, p storage.ClaimParams) {
	if p.Fresh.ToLog && p.Fresh.WhenUnlocked {
		b.step("log lock", s.queries["fresh_lock"], p.Fresh.BackfillTo)
	}
}

// queueArms queues the claim of at most limit rows by the frontier's arms
// (claim_arms.sql), as the statement name planned as mode
// (claim_plan.sql), after the lease stamp.
func (s *Store) queueArms(b *claimBatch, mode, name string, p storage.ClaimParams, limit int, fpl frontierPlan) {
	b.step("plan", s.queries["claim_plan"], mode)
	b.Queue(s.queries["claim_stamp"])
	b.Queue(s.queries[name], append([]any{p.RelayID, limit, p.MaxBytes}, fpl.args(p.Fresh.UpTo())...)...)
}

// sentClaim is a claim's pipeline once sent.
type sentClaim struct {
	s       *Store
	steps   []string
	results pgx.BatchResults
	closed  bool
}

func (s *Store) sendClaim(ctx context.Context, on batchSender, b *claimBatch) *sentClaim {
	return &sentClaim{s: s, steps: b.steps, results: on.SendBatch(ctx, &b.Batch)}
}

// close closes the results, once only: after an error, pgx's Close
// touches the connection's statement cache even when called again, by
// which time the connection is back in the pool and may serve another
// goroutine.
func (c *sentClaim) close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.results.Close()
}

// lease reads the steps' results, then the lease stamp.
func (c *sentClaim) lease(relayID string) (storage.Lease, error) {
	for _, step := range c.steps {
		if _, err := c.results.Exec(); err != nil {
			c.s.recycle(err)
			return storage.Lease{}, fmt.Errorf("claim batch: %s: %w", step, err)
		}
	}
	lease := storage.Lease{RelayID: relayID}
	if err := c.results.QueryRow().Scan(&lease.LockedAt); err != nil {
		c.s.recycle(err)
		return storage.Lease{}, fmt.Errorf("claim batch: %w", err)
	}
	return lease, nil
}

// end closes the pipeline once its rows are read, err saying how that
// went, and returns the claim's error: nil when it took its rows.
func (c *sentClaim) end(ctx context.Context, err error, lease storage.Lease, held bool) error {
	if err == nil {
		err = c.close()
	}
	if err == nil {
		return nil
	}
	// The claim's connection goes back to the pool first: on a pool of
	// one, handing back would otherwise wait for it until it timed out.
	_ = c.close()
	claimErr := fmt.Errorf("claim batch: %w", err)
	var pgErr *pgconn.PgError
	if held {
		// Its transaction is still open: ClaimHeld ends it, and the
		// rows are PENDING as they were.
		c.s.recycle(err)
		return claimErr
	}
	if errors.As(err, &pgErr) {
		// The server refused the claim, so the pipeline's implicit
		// transaction rolled back and no row is leased: nothing to hand
		// back, and a hand-back failing for the same reason would only
		// blur the error.
		c.s.recycle(err)
		return claimErr
	}
	return c.s.handBack(ctx, lease, claimErr)
}

// claimedBatch is the batch of a claim that took events, and cut more
// past its byte limit, reading at most limit rows by the frontier's arms
// (fr).
func claimedBatch(lease storage.Lease, events []outbox.Event, p storage.ClaimParams, limit, cut int, fr *frontierRead) storage.Batch {
	lease.CreatedFrom, lease.CreatedTo = createdRange(events)
	batch := storage.Batch{Lease: lease, Events: events}
	// A claim that stopped at its own limits left events it could have
	// taken: the relay claims again at once. Rows locked past the byte
	// limit count towards the limit they were read under.
	unkeyed := fr.arms[0].n + fr.arms[1].n + fr.arms[2].n
	batch.Full = len(events)+cut >= p.Limit || limit > 0 && unkeyed >= limit || cut > 0
	return batch
}

// Plan cache modes for claim_plan.sql: an unordered claim's arms are
// planned once per connection (their plan cannot change with the
// parameters), ordered claims as PostgreSQL decides (their key reads,
// findKeys, are planned once too).
const (
	planOnce    = "force_generic_plan"
	planAsUsual = "auto"
)

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

// claimRead is what a claim's rows tell besides its events: how many rows
// it locked (or, ordered, picked) but did not take, past its byte limit.
type claimRead struct {
	cut int
}

// dueAt passes a due position's time to the claim: '-infinity' for the
// beginning.
func dueAt(k dueKey) pgtype.Timestamptz {
	if k.at.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: k.at, Valid: true}
}

// readEvents reads the rows of a claim by the frontier's arms
// (claim_arms.sql), which it returns in write order, with their seqs and
// a held claim's row addresses. Every row it locked comes back, each with
// its arm, writer and whether it is taken, and rows without an event id
// carry its snapshot and what other transactions' locks kept from it: all
// of that goes to fr.
//
// It is on the hot path, and written to allocate per batch rather than per
// event: the columns are read without a copy (valid until the next row),
// payloads and headers copied into a few shared chunks, and repeated event
// types and keys share one string.
func readEvents(results pgx.BatchResults, limit int, held bool, fr *frontierRead) (events []outbox.Event, seqs []int64, addrs []rowAddress, read claimRead, err error) {
	rows, err := results.Query()
	if err != nil {
		return nil, nil, nil, read, err
	}
	defer rows.Close()
	var (
		r      eventReader
		arm    pgtype.Int4
		dueAt  pgtype.Timestamptz // available_at of a row read from the due index
		writer pgtype.Int8
		taken  bool
		addr   pgtype.TID
		table  pgtype.Uint32
	)
	dest := append(r.dest(), &arm, &dueAt, &writer, &taken)
	if held {
		dest = append(dest, &addr, &table)
		addrs = make([]rowAddress, 0, limit)
	}
	r.init(limit)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, nil, read, fmt.Errorf("read row: %w", err)
		}
		if !r.id.Valid {
			if err := fr.fact(string(r.typ), uint64(writer.Int64), r.seq.Int64, dueAt.Time); err != nil {
				return nil, nil, nil, read, err
			}
			continue
		}
		fr.row(int(arm.Int32), uint64(writer.Int64), r.seq.Int64, dueAt.Time, taken)
		if !taken {
			read.cut++
			continue
		}
		if held {
			addrs = append(addrs, rowAddress{table: table.Uint32, tid: addr})
		}
		r.add()
	}
	return r.events, r.seqs, addrs, read, rows.Err()
}

// eventReader scans a claim's event columns, row after row into the same
// variables (the addresses Scan takes would otherwise move each row's
// Event to the heap), and collects the events.
type eventReader struct {
	// The id as pgtype.UUID, its 16 bytes: scanned as a uuid.UUID, pgx
	// would go through database/sql's Scanner and the id's text form.
	id                         pgtype.UUID
	typ, key, payload, headers pgtype.DriverBytes
	attempts                   int
	createdAt                  pgtype.Timestamptz
	seq                        pgtype.Int8
	arena                      byteArena
	strs                       map[string]string
	events                     []outbox.Event
	seqs                       []int64
}

func (r *eventReader) dest() []any {
	return []any{&r.id, &r.typ, &r.key, &r.payload, &r.headers, &r.attempts, &r.createdAt, &r.seq}
}

func (r *eventReader) init(limit int) {
	r.strs = map[string]string{}
	r.events = make([]outbox.Event, 0, limit)
	r.seqs = make([]int64, 0, limit)
}

// add appends the row just scanned.
func (r *eventReader) add() {
	e := outbox.Event{
		ID:           r.id.Bytes,
		Type:         intern(r.strs, r.typ),
		PartitionKey: intern(r.strs, r.key),
		Payload:      r.arena.copy(r.payload),
		Headers:      r.arena.copy(r.headers),
		Attempts:     r.attempts,
	}
	if r.createdAt.Valid {
		e.CreatedAt = r.createdAt.Time
	}
	r.events = append(r.events, e)
	r.seqs = append(r.seqs, r.seq.Int64)
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

// Settle records o on the lease's rows: a statement per kind
// (mark_delivered.sql or delete_delivered.sql, mark_failed.sql,
// release.sql), all in one pipeline and so one implicit transaction, one
// round trip. Either all land or none.
func (s *Store) Settle(ctx context.Context, lease storage.Lease, o storage.Outcome) (storage.Settled, error) {
	b := &settleBatch{}
	if len(o.Delivered) > 0 {
		name := "mark_delivered"
		if o.Delete {
			name = "delete_delivered"
		}
		b.queue(&b.settled.Delivered, s.queries[name], leaseArgs(lease, uuidArray(o.Delivered))...)
	}
	if len(o.Failed) > 0 {
		ids, msgs, dead, delays := failureArrays(o.Failed)
		b.queue(&b.settled.Failed, s.queries["mark_failed"], leaseArgs(lease, ids, msgs, dead, delays)...)
	}
	if len(o.Released) > 0 {
		b.queue(&b.settled.Released, s.queries["release"], leaseArgs(lease, uuidArray(o.Released))...)
	}
	return s.sendSettle(ctx, "settle batch", b)
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

// Renew moves the lease's rows among p.IDs to the stamp p.To.
func (s *Store) Renew(ctx context.Context, p storage.RenewParams) (int, error) {
	tag, err := s.pool.Exec(ctx, s.queries["renew"], leaseArgs(p.Lease, uuidArray(p.IDs), p.To)...)
	if err != nil {
		s.recycle(err)
		return 0, fmt.Errorf("renew lease: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// leaseArgs are the arguments of a lease-guarded statement
// (sql/<name>.sql): always the relay id, the lease's stamps, the rows'
// ids, what the statement adds (more), then the lease's created_at bounds.
func leaseArgs(lease storage.Lease, ids any, more ...any) []any {
	args := append([]any{lease.RelayID, lease.Stamps(), ids}, more...)
	return append(args, createdFrom(lease), createdTo(lease))
}

// settleBatch is a pipeline of settle statements, each counted toward
// the kind of outcome it records.
type settleBatch struct {
	pgx.Batch
	// kinds has, for each statement queued, the count its changed rows
	// add to (nil: not counted, such as a statement's plan settings).
	kinds   []*int
	settled storage.Settled
}

// queue queues a statement whose changed rows count toward *kind.
func (b *settleBatch) queue(kind *int, query string, args ...any) {
	b.Queue(query, args...)
	b.kinds = append(b.kinds, kind)
}

// read takes the results of the statements, in order, and counts them.
func (b *settleBatch) read(results pgx.BatchResults) error {
	for _, kind := range b.kinds {
		tag, err := results.Exec()
		if err != nil {
			return err
		}
		if kind != nil {
			*kind += int(tag.RowsAffected())
		}
	}
	return nil
}

// sendSettle runs b in one pipeline, one implicit transaction, and returns
// what it changed; on an error, nothing.
func (s *Store) sendSettle(ctx context.Context, what string, b *settleBatch) (storage.Settled, error) {
	if b.Len() == 0 {
		return storage.Settled{}, nil
	}
	results := s.pool.SendBatch(ctx, &b.Batch)
	err := b.read(results)
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.recycle(err)
		return storage.Settled{}, fmt.Errorf("%s: %w", what, err)
	}
	return b.settled, nil
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
