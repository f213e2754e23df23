package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Ordered claims (ORDERING=partition): the rows without a key by the claim
// frontier (frontier.go), the keyed runs from their keys' floors (keys.go),
// in one pipeline under the table's advisory lock. The claim's shared
// steps are in queue.go.

// claimOrdered is Claim under ORDERING=partition. Ordered claims take
// turns: the claim statements' snapshots are taken after the table's
// advisory lock is held, so they see every run another relay claimed and
// cannot take a later part of it. The rows without a key go by the
// frontier as unordered ones do (claim_unkeyed), the keys from their
// floors (keys.go) where the relay knows them, and the two parts come
// back merged in write order.
func (s *Store) claimOrdered(ctx context.Context, p storage.ClaimParams) (storage.Batch, error) {
	p = p.WithDefaults()
	st, unlock := s.lockState(p)
	defer unlock()
	fpl, fread := freshPlan(st, p), &frontierRead{}
	fromFloors, limit, err := s.orderedSplit(ctx, st, p)
	if err != nil {
		return storage.Batch{}, err
	}
	b := &claimBatch{}
	s.queueFreshLock(b, p)
	b.step("lock", s.queries["claim_lock"], claimLockClass, s.table.Quoted())
	s.queueArms(b, planAsUsual, "claim_unkeyed", p, limit, fpl)
	keyed, keyedArgs := keyedClaim(p, fromFloors)
	if keyed != "" {
		b.Queue(s.queries[keyed], keyedArgs...)
	}

	c := s.sendClaim(ctx, s.pool, b)
	defer func() { _ = c.close() }()
	lease, err := c.lease(p.RelayID)
	if err != nil {
		return storage.Batch{}, err
	}
	events, seqs, _, read, err := readEvents(c.results, limit, false, fread)
	if err == nil && keyed != "" {
		var cut int
		events, cut, err = readKeyedInto(c.results, p.Limit, fromFloors, events, seqs)
		read.cut += cut
	}
	if err := c.end(ctx, err, lease, false); err != nil {
		return storage.Batch{}, err
	}
	batch := claimedBatch(lease, events, p, limit, read.cut, fread)
	batch.After = walkEnd(p.After, events)
	if fromFloors != nil {
		batch.After = fromFloors.end(batch.After, len(events) < p.Limit)
	}
	if st != nil {
		// Never held: there is nothing to release when it ends.
		st.frontier.done(fpl, limit, lease.LockedAt, *fread, false)
	}
	return batch, nil
}

// orderedSplit finds the keys an ordered claim walks from their floors
// (nil: it walks the index instead), and how many rows without a key it
// takes. The caller holds st's mutex.
func (s *Store) orderedSplit(ctx context.Context, st *claimState, p storage.ClaimParams) (fromFloors *floorsClaim, unkeyed int, err error) {
	if st == nil {
		// Beside the log the claim reads from the beginning and keeps no
		// frontier, but the split still alternates its odd row: a plain
		// half gave the rows without a key none at BATCH_SIZE=1.
		ls := s.states.of(p.RelayID)
		ls.mu.Lock()
		defer ls.mu.Unlock()
		return nil, ls.unkeyedLimit(p.Limit, true), nil
	}
	if st.keys == nil {
		st.keys = newKeyWalk()
	}
	if fromFloors, err = s.findKeys(ctx, st.keys, p); err != nil {
		return nil, 0, err
	}
	return fromFloors, st.unkeyedLimit(p.Limit, fromFloors == nil || len(fromFloors.keys) > 0), nil
}

// keyedClaim is the statement of the keyed part of an ordered claim, with
// its arguments: the keys from their floors, or else the walk of the
// index. None when no key waits: the rows without a key are then the
// whole claim.
func keyedClaim(p storage.ClaimParams, fromFloors *floorsClaim) (name string, args []any) {
	if fromFloors != nil && len(fromFloors.keys) == 0 {
		return "", nil
	}
	name, args = "claim_ordered", []any{p.RelayID, p.Limit, p.After, p.MaxBytes, p.RunLimit, p.Fresh.UpTo()}
	if fromFloors != nil {
		name, args = "claim_ordered_keys", fromFloors.claimArgs(p)
	}
	if p.OnDead == storage.DeadBlock {
		return name + "_block", args
	}
	return name + "_skip", args
}

// mergeBySeq merges two batches, each in write order with its seqs, into
// one in write order.
func mergeBySeq(a []outbox.Event, as []int64, b []outbox.Event, bs []int64) []outbox.Event {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := make([]outbox.Event, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if bs[0] < as[0] {
			out, b, bs = append(out, b[0]), b[1:], bs[1:]
		} else {
			out, a, as = append(out, a[0]), a[1:], as[1:]
		}
	}
	return append(append(out, a...), b...)
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

// claimLockClass is the high half of the ordered-claim advisory lock key;
// the low half is the table's OID.
const claimLockClass = 0x6f72 // "or"

// readKeyedInto reads the keyed part of an ordered claim of limit events,
// whose walk visited fromFloors's keys (nil: it walked the index), and
// merges its rows with those without a key (events, with their seqs) in
// write order; cut is how many rows its byte limit cut.
func readKeyedInto(results pgx.BatchResults, limit int, fromFloors *floorsClaim, events []outbox.Event, seqs []int64) (_ []outbox.Event, cut int, err error) {
	var visited func(key []byte, first pgtype.Int8, head bool)
	if fromFloors != nil {
		visited = fromFloors.visit
	}
	more, moreSeqs, cut, err := readKeyedEvents(results, limit, visited)
	return mergeBySeq(events, seqs, more, moreSeqs), cut, err
}

// readKeyedEvents reads the rows of the keyed part of an ordered claim
// (claim_ordered.sql) in write order, with their seqs, and how many rows
// its byte limit cut. The floors' walk adds a row for each key it visited
// (no event id), which goes to visited.
func readKeyedEvents(results pgx.BatchResults, limit int, visited func(key []byte, first pgtype.Int8, head bool)) (events []outbox.Event, seqs []int64, cut int, err error) {
	rows, err := results.Query()
	if err != nil {
		return nil, nil, 0, err
	}
	defer rows.Close()
	var (
		r    eventReader
		head pgtype.Bool
		n    int64
	)
	dest := append(r.dest(), &head, &n)
	r.init(limit)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, 0, fmt.Errorf("read row: %w", err)
		}
		if !r.id.Valid {
			if visited != nil {
				visited(r.key, r.seq, head.Bool)
			}
			continue
		}
		cut = int(n)
		r.add()
	}
	return r.events, r.seqs, cut, rows.Err()
}
