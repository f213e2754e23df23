package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/relay/pkg/storage"
)

// An ordered claim (ORDERING=partition) visits keys and takes each one's
// first unfinished event, its head, with the due run behind it. Found
// through key_seq_idx from each key's start (sql/ordered/walk_index.sql),
// a head lies behind two dead index entries per event the key delivered
// since the oldest snapshot: while a long query, an idle transaction or a
// replica's hot_standby_feedback holds vacuum back, every claim passes
// over more of them, and the drain slows down round after round.
//
// So a relay remembers the keys it has seen (keyWalk), each with a floor:
// a seq below which the key has no unfinished event. A claim passes the
// keys that may have a head due, with their floors, and the walk
// (walk_floors.sql) starts each key there. What the walk finds moves the
// floor up to just below the head; a key with nothing unfinished left
// rests until it has events again.
//
// A floor is only a lower bound while no event below it becomes
// unfinished. Two kinds can: a row whose transaction took its seq early
// and committed after the key's later rows were claimed, and a row
// handed back to PENDING (released, failed, reaped, retried from DEAD).
// Before each claim the relay reads the keyed PENDING rows after its key
// position and the keyed rows due again after its key due position
// (claim_keys.sql); either lowers its key's floor below it. Both
// positions move by the marks and sweeps of position.go, which see rows
// that become visible behind a position. Events handed back with a
// back-off lie behind the floor only when their key's floor passed them
// while they were leased, which it cannot: a leased event is an
// unfinished head that stops the floor.

// keyWalk is one relay's knowledge of the keys, for its ordered claims.
// The relay's position's mutex guards it.
type keyWalk struct {
	// find is the position of the keyed rows claim_keys.sql reads: seq
	// for those written, the due position for those due again.
	find position
	// A sweep of find reads its range (from sweepStart) over several
	// claims, as far as sweepAt so far, beside the reads after the
	// position: a backlog read through at once would cost a long
	// statement every sweep interval. sweepSafe is find's safe seq when
	// it began: every row up to it was visible to all its parts.
	sweeping                       bool
	sweepStart, sweepAt, sweepSafe int64
	// floors holds every key seen (up to maxKnownKeys), waiting ones
	// those that may have a head due: seen with an event since, or with
	// a head at the last visit.
	floors  map[string]int64
	waiting map[string]struct{}
	// walkUntil is set when more keys wait than maxWaitingKeys: the claims
	// walk the index until then, and start over with no keys known.
	walkUntil time.Time
}

const (
	// maxWaitingKeys bounds the keys a relay sorts and passes to its
	// claims; with more, the claims walk the index for a while
	// (indexWalkFor) and then start over.
	maxWaitingKeys = 10_000
	// maxKnownKeys bounds the keys remembered; resting ones are
	// forgotten beyond it (a key met again then starts from its first
	// event).
	maxKnownKeys = 100_000
	// keyReadLeast is the least number of new rows claim_keys.sql reads,
	// and of keys a claim is passed, for claims of few events: the keys of
	// a backlog are met as the reads get to their events.
	keyReadLeast = 256
)

// keyReadMost is how many new rows claim_keys.sql reads past those it read
// before, of each kind, and how many keys a claim is passed, for a claim
// of limit events: as many as it may take, so that the reads keep ahead of
// the claims without reading far ahead of them (a read from a position
// that has not moved yet reads the rows after it again).
func keyReadMost(limit int) int64 { return max(int64(limit), keyReadLeast) }

// indexWalkFor is how long a relay with too many waiting keys walks the
// index: a sweep interval's worth, at the least a few seconds.
func indexWalkFor(sweepInterval time.Duration) time.Duration {
	return max(sweepInterval, 5*time.Second)
}

func newKeyWalk() *keyWalk {
	return &keyWalk{find: position{sweptAt: time.Now()}, floors: map[string]int64{}, waiting: map[string]struct{}{}}
}

// usable says whether a claim at now may walk from floors.
func (w *keyWalk) usable(now time.Time) bool {
	if !w.walkUntil.IsZero() && now.Before(w.walkUntil) {
		return false
	}
	if !w.walkUntil.IsZero() {
		// Start over: every key is met again from claim_keys.sql's reads,
		// which begin at the table's start.
		*w = *newKeyWalk()
	}
	return true
}

// keyRead is what claim_keys.sql read, for one claim, with the stamp
// before it (claim_stamp.sql) and the read's own transaction id after it
// (claim_xid.sql: the bound of its mark; 0 when it has none).
type keyRead struct {
	stamp       time.Time
	xmin, bound uint64
	issued      pgtype.Int8
	// rows read after the key position, and the highest seq among them.
	written int64
	highest int64
	// due rows read, and the last one in due_at_idx's order.
	due     int64
	dueLast dueKey
	// rows a sweep's part read, and the highest seq among them.
	sweptRows, sweptHighest int64
}

// saw records a keyed PENDING row at seq: its key waits, and its floor
// is below the row. A key not known before may have unfinished events
// anywhere: its walk starts from its first.
func (w *keyWalk) saw(key string, seq int64) {
	if floor, ok := w.floors[key]; ok {
		w.floors[key] = min(floor, seq-1)
	} else {
		w.floors[key] = 0
	}
	w.waiting[key] = struct{}{}
}

// visited records what a claim's walk found for key: its head's seq, or
// none (valid false) when nothing of it is unfinished after its floor.
func (w *keyWalk) visited(key string, head int64, valid bool) {
	if !valid {
		delete(w.waiting, key)
		return
	}
	// Every event of the key before its head is finished.
	w.floors[key] = head - 1
	w.waiting[key] = struct{}{}
}

// overflowing says whether too many keys wait to be passed to a claim, and
// forgets resting keys beyond maxKnownKeys.
func (w *keyWalk) overflowing() bool {
	if len(w.floors) > maxKnownKeys {
		for k := range w.floors {
			if _, ok := w.waiting[k]; !ok {
				delete(w.floors, k)
			}
		}
	}
	return len(w.waiting) > maxWaitingKeys
}

// candidates lists the waiting keys in walk order: those after the cursor
// after in bytewise order (the "C" collation's), then from the start up
// to after itself; and their floors. all says whether the list is every
// waiting key.
func (w *keyWalk) candidates(after string, most int) (keys []string, floors []int64, all bool) {
	keys = make([]string, 0, len(w.waiting))
	for k := range w.waiting {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	start, _ := slices.BinarySearch(keys, after)
	if start < len(keys) && keys[start] == after {
		start++
	}
	keys = slices.Concat(keys[start:], keys[:start])
	all = len(keys) <= most
	if !all {
		keys = keys[:most]
	}
	floors = make([]int64, len(keys))
	for i, k := range keys {
		floors[i] = w.floors[k]
	}
	return keys, floors, all
}

// findKeys reads what the relay may not know of its keys (claim_keys.sql)
// before an ordered claim, and returns the keys and floors to pass to the
// claim: nil when it is to walk the index instead. The caller holds
// pos.mu.
func (s *Store) findKeys(ctx context.Context, pos *position, p storage.ClaimParams) (*floorsClaim, error) {
	now := time.Now()
	if pos.keys == nil {
		pos.keys = newKeyWalk()
	}
	w := pos.keys
	if !w.usable(now) {
		return nil, nil
	}
	pl := w.find.next(p.Limit, p.SweepInterval, now)
	r := w.readPlan(pl, p.Limit)
	b := &pgx.Batch{}
	b.Queue(s.queries["claim_plan"])
	b.Queue(s.queries["claim_stamp"], true)
	b.Queue(s.queries["claim_keys"], r.args()...)
	b.Queue(s.queries["claim_xid"], w.find.needsBound(pl))
	read, err := readKeys(s.pool.SendBatch(ctx, b), w)
	if err != nil {
		s.recycle(err)
		return nil, fmt.Errorf("claim batch: find keys: %w", err)
	}
	due := read.dueLast
	if !r.due.Valid || read.due < r.due.Int64 {
		due = dueKey{at: read.stamp.Add(-dueSettle)}
	}
	if read.issued.Valid && read.issued.Int64 < w.find.frontier {
		// The sequence went back (see claim): every floor is void.
		*w = *newKeyWalk()
		return nil, nil
	}
	lowest := w.swept(r, read)
	w.find.done(pl, read.xmin, read.bound, lowest, read.highest, due, now)
	if pl.sweep && lowest == 0 {
		// The sweep read its whole range (and every due row): done
		// found it complete.
		w.endSweep()
	}
	if read.issued.Valid && read.written < r.written.Int64 {
		w.find.issued(read.issued.Int64, now)
	}
	if w.overflowing() {
		w.walkUntil = now.Add(indexWalkFor(p.SweepInterval))
		return nil, nil
	}
	keys, floors, all := w.candidates(p.After, int(keyReadMost(p.Limit)))
	return &floorsClaim{walk: w, keys: keys, floors: floors, all: all, dueFrom: pl.dueFrom}, nil
}

// keyReadPlan is one claim_keys.sql read: after the key position from on,
// at most written rows (those read before, which a read from a position
// that has not moved yet reads again, and most new ones); the due rows
// from pl.dueFrom on, at most due of them (a sweep reads them all: NULL);
// and a sweep's part, the rows after sweepFrom up to sweepTo, at most most.
type keyReadPlan struct {
	pl                 plan
	from               int64
	written, due       pgtype.Int8
	sweepFrom, sweepTo int64
	most               int64
}

// readPlan plans the read before a claim of limit events, the key
// position's plan being pl.
func (w *keyWalk) readPlan(pl plan, limit int) keyReadPlan {
	r := keyReadPlan{pl: pl, from: w.find.forward(limit), most: keyReadMost(limit)}
	r.written = pgtype.Int8{Int64: max(w.find.claimed-r.from, 0) + r.most, Valid: true}
	r.due = pgtype.Int8{Int64: r.most, Valid: true}
	if pl.sweep {
		r.due = pgtype.Int8{}
		r.sweepFrom, r.sweepTo = pl.floor, r.from
		if w.sweeping && w.sweepStart == pl.floor {
			r.sweepFrom = max(r.sweepFrom, w.sweepAt)
		}
	}
	return r
}

// args are claim_keys.sql's arguments.
func (r keyReadPlan) args() []any {
	return []any{r.from, r.written, dueAt(r.pl.dueFrom), r.pl.dueFrom.seq, r.due, r.sweepFrom, r.sweepTo, r.most}
}

// swept records the sweep part of read r, and returns what the key
// position's done takes for lowest: 0 when the sweep has read its whole
// range, else 1 (it goes on at the next claim).
func (w *keyWalk) swept(r keyReadPlan, read keyRead) (lowest int64) {
	if !r.pl.sweep {
		return 0
	}
	if !w.sweeping || w.sweepStart != r.pl.floor {
		w.sweeping, w.sweepStart, w.sweepSafe = true, r.pl.floor, w.find.safe
	}
	if read.sweptRows < r.most || read.sweptHighest >= r.sweepTo {
		return 0
	}
	w.sweepAt = read.sweptHighest
	return 1
}

// endSweep ends a sweep that has read its whole range: the next one
// starts no later than the first part's safe seq, below which every part
// saw every row.
func (w *keyWalk) endSweep() {
	w.find.sweepFrom = min(w.find.sweepFrom, w.sweepSafe)
	w.sweeping, w.sweepAt = false, 0
}

// readKeys reads claim_keys.sql's rows into w, after the stamp before it.
func readKeys(results pgx.BatchResults, w *keyWalk) (read keyRead, err error) {
	defer func() {
		if cerr := results.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := results.Exec(); err != nil {
		return read, err
	}
	if err := results.QueryRow().Scan(&read.stamp, &read.xmin, &read.issued); err != nil {
		return read, err
	}
	rows, err := results.Query()
	if err != nil {
		return read, err
	}
	defer rows.Close()
	var (
		kind int16
		key  pgtype.Text
		seq  pgtype.Int8
		at   pgtype.Timestamptz
		n    pgtype.Int8
	)
	for rows.Next() {
		if err := rows.Scan(&kind, &key, &seq, &at, &n); err != nil {
			return read, err
		}
		switch kind {
		case 0, 3:
			w.saw(key.String, seq.Int64)
		case 1:
			w.saw(key.String, seq.Int64)
			read.due++
			read.dueLast = laterDue(read.dueLast, dueKey{at: at.Time, seq: seq.Int64})
		case 2:
			read.highest, read.written = seq.Int64, n.Int64
		case 4:
			read.sweptHighest, read.sweptRows = seq.Int64, n.Int64
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return read, err
	}
	var bound pgtype.Int8
	if err := results.QueryRow().Scan(&bound); err != nil {
		return read, err
	}
	read.bound = uint64(max(bound.Int64, 0))
	return read, nil
}

// floorsClaim is a claim that walks the keys from their floors.
type floorsClaim struct {
	walk   *keyWalk
	keys   []string
	floors []int64
	// dueFrom is where the read before the claim read the keyed rows due
	// again from: the claim reads them again in its own snapshot.
	dueFrom dueKey
	// all says whether keys are every waiting key; visits counts the
	// keys the walk visited.
	all    bool
	visits int
}

// claimArgs are the arguments of the claim statement (claim_ordered.sql
// with walk_floors.sql) for p, with the relay's unkeyed position as pl
// plans it.
func (c *floorsClaim) claimArgs(p storage.ClaimParams, pl plan) []any {
	return []any{p.RelayID, p.Limit, pgtype.FlatArray[string](c.keys), p.MaxBytes, p.RunLimit, freshTo(p.FreshTo),
		pl.floor, dueAt(pl.dueFrom), pl.dueFrom.seq, pgtype.FlatArray[int64](c.floors), dueAt(c.dueFrom), c.dueFrom.seq,
		keyReadMost(p.Limit)}
}

// visit records what the claim's walk found for a key (claim_ordered.sql's
// walk_info rows).
func (c *floorsClaim) visit(key []byte, head pgtype.Int8) {
	c.visits++
	c.walk.visited(string(key), head.Int64, head.Valid)
}

// end is where the next claim's walk starts: after took, the last key this
// one took; or, when its batch came out short after it visited every key
// it was given but not every waiting one, after the last it was given, so
// that the keys beyond get their turn.
func (c *floorsClaim) end(took string, short bool) string {
	if short && !c.all && c.visits == len(c.keys) && len(c.keys) > 0 {
		return c.keys[len(c.keys)-1]
	}
	return took
}
