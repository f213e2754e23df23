package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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
// a seq below which the key has no event that is not DELIVERED. A claim
// passes the keys that may have a head due, with their floors, and the
// walk (walk_floors.sql) starts each key there. What the walk finds moves
// the floor up to just below the key's first event that is not
// DELIVERED; a key with nothing unfinished left rests until it has events
// again. The argument, for every way a row is written or becomes due, is
// in docs/architecture.md ("Ordered claims"): in short,
//   - order: a floor never passes a visible row that is not DELIVERED, DEAD
//     ones included, so every row handed back (a lease's, or a DEAD one
//     retried) lies above its key's floor, where the walk, in the claim's
//     own snapshot, finds it before the key's later events;
//   - no key forgotten: every keyed row not DELIVERED is read once by the
//     key frontier (claim_keys.sql, keyFrontier) after its writer ended,
//     which makes its key wait and lowers its floor below it;
//   - a walk takes only rows the key frontier has read: by then the read
//     has lowered the floor below every unfinished row their writers
//     wrote earlier under the key, even one that committed after a walk
//     raised the floor past it, and one another relay claimed since.
// No step needs a clock; sweeps only read again.

// keyWalk is one relay's knowledge of the keys, for its ordered claims.
// The relay's claim state's mutex guards it.
type keyWalk struct {
	// find is where the reads of keyed rows (claim_keys.sql) go on from.
	find keyFrontier
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
	// maxKnownKeys bounds the keys remembered: with more, every resting
	// one is forgotten (a key met again then starts from its first
	// event).
	maxKnownKeys = 100_000
	// keyReadLeast is the least number of rows claim_keys.sql reads of
	// each kind, and of keys a claim is passed, for claims of few events:
	// the keys of a backlog are met as the reads get to their events.
	keyReadLeast = 256
)

// keyReadMost is how many keys a claim of limit events is passed: as many
// as it may take events.
func keyReadMost(limit int) int64 { return max(int64(limit), keyReadLeast) }

// keyRowsMost is how many rows claim_keys.sql reads of each kind (those
// ahead, each watched writer's, the sweep's) for a claim of limit events
// whose runs take at most runLimit events of a key: enough for whole runs,
// since a walk takes only rows the reads have returned, at most
// keyRowsCap. Reading only limit rows, a backlog spread over many keys
// gave each claim one event of each of limit keys: the walk visited a key
// per event, and 1,000 keys drained at 0.17 of the unordered rate.
func keyRowsMost(limit, runLimit int) int64 {
	return max(min(int64(limit)*int64(runLimit), keyRowsCap), int64(limit), keyReadLeast)
}

// keyRowsCap bounds keyRowsMost: one read then steps over at most that
// many index entries of each kind.
const keyRowsCap = 20_000

// indexWalkLeast is the least time a relay with too many waiting keys
// walks the index for.
const indexWalkLeast = 5 * time.Second

// indexWalkFor is how long a relay with too many waiting keys walks the
// index: a sweep interval's worth, at least indexWalkLeast.
func indexWalkFor(sweepInterval time.Duration) time.Duration {
	return max(sweepInterval, indexWalkLeast)
}

func newKeyWalk() *keyWalk {
	return &keyWalk{floors: map[string]int64{}, waiting: map[string]struct{}{}}
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

// keyFrontier is the frontier of the keyed rows' reads (claim_keys.sql):
// the claim frontier of frontier.go without its locks or due rows, so
// that a read passes nothing it did not return. Every keyed row not
// DELIVERED is read by it once its writer has ended: after at in writer
// order, or among the rows of a watched writer.
type keyFrontier struct {
	// writerFrontier is at, where the reads go on from, and watch: the
	// writers passed while they were running, each read from its place
	// (just after the highest seq of its rows read since a read saw it
	// ended) and dropped once a read returned the last of its rows.
	// Together they say which rows the reads have returned: a claim's
	// walk takes no other (walk_floors.sql).
	writerFrontier
	// A sweep, every SweepInterval, reads again from where at was at the
	// sweep before, and every fullSweepEvery-th from the beginning, as
	// defence in depth: beside the reads from at, most rows a read, from
	// sweep on up to at, which it does not move. A sweep that had to go
	// back over a long history (every DEAD keyed row, after a full sweep)
	// so delays none of the reads ahead.
	sweeps sweepSchedule
	sweep  *writePlace
}

// keyFindPlan is one claim_keys.sql read: the rows ahead, after start, the
// watched writers' rows each after its seq in after, most of each.
type keyFindPlan struct {
	start writePlace
	watch []uint64
	after []int64
	most  int64
	// sweep, when set, is where this read's sweep goes on from, up to
	// start.
	sweep *writePlace
}

// plan plans the next read.
func (f *keyFrontier) plan(sweepInterval time.Duration, now time.Time, most int64) keyFindPlan {
	if from, sweep := f.sweeps.sweepNow(sweepInterval, now, f.at); sweep && from.before(f.at) && f.sweep == nil {
		f.sweep = &from
	}
	watch, from := f.watched()
	return keyFindPlan{start: f.at, watch: watch, after: seqsBefore(from), most: most, sweep: f.sweep}
}

// args are claim_keys.sql's arguments.
func (pl keyFindPlan) args() []any {
	watch := make([]string, len(pl.watch))
	for i, x := range pl.watch {
		watch[i] = strconv.FormatUint(x, 10)
	}
	sweep := writePlace{}
	if pl.sweep != nil {
		sweep = *pl.sweep
	}
	return []any{strconv.FormatUint(pl.start.xid, 10), pl.start.seq, watch, pl.after, pl.most,
		pl.sweep != nil, strconv.FormatUint(sweep.xid, 10), sweep.seq}
}

// keyRead is what one claim_keys.sql read says of how far it read.
type keyRead struct {
	snap snapshot
	// ahead is how many rows ahead of the frontier it read, last the last of them.
	ahead int64
	last  writePlace
	// watched are, per watched writer it read rows of, how many and the
	// highest seq.
	watched map[uint64]writePlace
	// swept is how many rows the sweep read, sweptTo the last of them.
	swept   int64
	sweptTo writePlace
}

// done moves the key frontier by a read planned as pl.
func (f *keyFrontier) done(pl keyFindPlan, r keyRead) {
	if pl.sweep != nil {
		// The sweep is over once it read up to where the reads go on
		// from.
		if r.swept < pl.most || !r.sweptTo.before(pl.start) {
			f.sweep = nil
		} else {
			to := r.sweptTo
			f.sweep = &to
		}
	}
	// A watched writer's rows are all visible once it has ended: a read
	// that returned fewer than it could read the last of them.
	for _, x := range pl.watch {
		got := r.watched[x] // xid: how many; seq: the highest
		f.readOn(x, r.snap, got.seq+1, int64(got.xid) < pl.most)
	}
	// The rows ahead: the writer frontier's rule.
	f.pass(reached(r.snap, r.last, r.ahead >= pl.most), r.snap)
}

// seqsBefore are the seqs just before places: the key reads take a
// watched writer's rows after a seq.
func seqsBefore(from []int64) []int64 {
	after := make([]int64, len(from))
	for i, seq := range from {
		after[i] = seq - 1
	}
	return after
}

// readArgs are walk_floors.sql's arguments that say which rows the reads
// have returned: those at or before at in writer order, save a watched
// writer's after the highest seq read of it.
func (f *keyFrontier) readArgs() []any {
	watch, from := f.watched()
	watched := make([]string, len(watch))
	for i, x := range watch {
		watched[i] = strconv.FormatUint(x, 10)
	}
	return []any{strconv.FormatUint(f.at.xid, 10), f.at.seq,
		pgtype.FlatArray[string](watched), pgtype.FlatArray[int64](seqsBefore(from))}
}

// saw records a keyed row not DELIVERED at seq: its key waits, and its floor
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

// visited records what a claim's walk found for key: the seq of its first
// event after its floor that is not DELIVERED (first; valid false: none),
// and whether the key has a head, an unfinished event, after its floor.
func (w *keyWalk) visited(key string, first int64, valid, head bool) {
	if valid {
		// Every event of the key before first is DELIVERED.
		w.floors[key] = max(w.floors[key], first-1)
	}
	if !head {
		delete(w.waiting, key)
		return
	}
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
// claim: nil when it is to walk the index instead. The caller holds the
// claim state's mutex.
func (s *Store) findKeys(ctx context.Context, w *keyWalk, p storage.ClaimParams) (*floorsClaim, error) {
	now := time.Now()
	if !w.usable(now) {
		return nil, nil
	}
	pl := w.find.plan(p.SweepInterval, now, keyRowsMost(p.Limit, p.RunLimit))
	b := &pgx.Batch{}
	// Its reads walk key_writer_idx in its order whatever the arguments:
	// planned once, as an unordered claim is (0.7 ms a read otherwise).
	b.Queue(s.queries["claim_plan"], planOnce)
	b.Queue(s.queries["claim_keys"], pl.args()...)
	read, err := readKeys(s.pool.SendBatch(ctx, b), w)
	if err != nil {
		s.recycle(err)
		return nil, fmt.Errorf("claim batch: find keys: %w", err)
	}
	w.find.done(pl, read)
	if w.overflowing() {
		w.walkUntil = now.Add(indexWalkFor(p.SweepInterval))
		return nil, nil
	}
	keys, floors, all := w.candidates(p.After, int(keyReadMost(p.Limit)))
	return &floorsClaim{walk: w, keys: keys, floors: floors, all: all}, nil
}

// readKeys reads claim_keys.sql's rows into w, after the planner settings
// before it.
func readKeys(results pgx.BatchResults, w *keyWalk) (read keyRead, err error) {
	defer func() {
		if cerr := results.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := results.Exec(); err != nil {
		return read, err
	}
	rows, err := results.Query()
	if err != nil {
		return read, err
	}
	defer rows.Close()
	var (
		fact   string
		key    pgtype.Text
		writer pgtype.Int8
		seq    pgtype.Int8
		n      pgtype.Int8
	)
	read.watched = map[uint64]writePlace{}
	for rows.Next() {
		if err := rows.Scan(&fact, &key, &writer, &seq, &n); err != nil {
			return read, err
		}
		switch fact {
		case "key":
			w.saw(key.String, seq.Int64)
		case "ahead":
			read.ahead, read.last = n.Int64, writePlace{xid: uint64(writer.Int64), seq: seq.Int64}
		case "watched":
			read.watched[uint64(writer.Int64)] = writePlace{xid: uint64(n.Int64), seq: seq.Int64}
		case "swept":
			read.swept, read.sweptTo = n.Int64, writePlace{xid: uint64(writer.Int64), seq: seq.Int64}
		case "snapshot":
			if read.snap, err = parseSnapshot(key.String); err != nil {
				return read, err
			}
		default:
			return read, fmt.Errorf("claim_keys: unknown row %q", fact)
		}
	}
	rows.Close()
	return read, rows.Err()
}

// floorsClaim is a claim that walks the keys from their floors.
type floorsClaim struct {
	walk   *keyWalk
	keys   []string
	floors []int64
	// all says whether keys are every waiting key; visits counts the
	// keys the walk visited.
	all    bool
	visits int
}

// claimArgs are the arguments of the claim statement (claim_ordered.sql
// with walk_floors.sql) for p.
func (c *floorsClaim) claimArgs(p storage.ClaimParams) []any {
	return append([]any{p.RelayID, p.Limit, pgtype.FlatArray[string](c.keys), p.MaxBytes, p.RunLimit, p.Fresh.UpTo(),
		pgtype.FlatArray[int64](c.floors)}, c.walk.find.readArgs()...)
}

// visit records what the claim's walk found for a key (the rows
// claim_ordered.sql adds under .Floors).
func (c *floorsClaim) visit(key []byte, first pgtype.Int8, head bool) {
	c.visits++
	c.walk.visited(string(key), first.Int64, first.Valid, head)
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
