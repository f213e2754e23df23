package pgwal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// Type OIDs the decoder tells apart.
const (
	oidTimestamptz = 1184
	oidUUID        = 2950
	oidJSONB       = 3802
)

// The outbox columns the decoder reads, by name.
const (
	colID = iota
	colType
	colKey
	colPayload
	colHeaders
	colStatus
	colAttempts
	colAvailable
	colCreated
	colSeq
	colCount
)

var columnNames = [colCount]string{
	"event_id", "event_type", "partition_key", "payload", "headers",
	"status", "attempts", "available_at", "created_at", "seq",
}

// relation is what a Relation message says about the outbox table: where
// each column the decoder reads is in a tuple (-1: missing) and its type.
type relation struct {
	outbox bool
	at     [colCount]int
	oid    [colCount]uint32
}

// decoder turns pgoutput messages into transactions of outbox events.
type decoder struct {
	schema, table string
	relations     map[uint32]*relation
	// txn is the transaction being received; skip marks one whose
	// inserts only move rows between partitions.
	txn      *txn
	skip     bool
	replyNow bool
	// vals is reused from insert to insert; strs interns types and keys.
	vals []value
	strs map[string]string
	// claimedNotStreamed counts the events that were due when their
	// transaction committed but that the log leaves to the claims, since
	// their available_at lies after their created_at: their producer set
	// created_at itself, before its transaction's now() (see
	// Reader.warnClaimedNotStreamed).
	claimedNotStreamed int64
}

// decode processes one pgoutput message; it returns a transaction when the
// message is a COMMIT of one with outbox events. data is only valid until
// the next message arrives: what an event keeps is copied.
func (d *decoder) decode(data []byte, a *acks) (*txn, error) {
	if len(data) > 0 && data[0] == 'I' {
		// Inserts are nearly every message: read without pglogrepl's
		// per-column allocations.
		return nil, d.insert(data)
	}
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parse logical replication message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		rel := d.relation(m)
		if err := rel.check(); err != nil {
			return nil, err
		}
		d.relations[m.RelationID] = rel
	case *pglogrepl.BeginMessage:
		d.txn = &txn{xid: m.Xid, committed: m.CommitTime}
		d.skip = false
		a.begin()
	case *pglogrepl.LogicalDecodingMessage:
		if m.Transactional && m.Prefix == MovePrefix {
			d.skip = true
		}
	case *pglogrepl.CommitMessage:
		t := d.txn
		d.txn = nil
		if t == nil || d.skip || len(t.events) == 0 {
			a.commitEmpty(m.TransactionEndLSN)
			return nil, nil
		}
		t.end = m.TransactionEndLSN
		a.commit(t)
		return t, nil
	}
	return nil, nil
}

// insert reads an Insert message ('I', relation id, 'N', tuple) into the
// transaction being received.
func (d *decoder) insert(data []byte) error {
	if len(data) < 6 || data[5] != 'N' {
		return fmt.Errorf("malformed insert message")
	}
	rel := d.relations[binary.BigEndian.Uint32(data[1:5])]
	if d.txn == nil || rel == nil || !rel.outbox || d.skip {
		return nil
	}
	// One copy of the message; the event's fields point into it.
	msg := bytes.Clone(data[6:])
	vals, err := tupleValues(msg, d.vals[:0])
	d.vals = vals
	if err != nil {
		return fmt.Errorf("decode an outbox insert: %w", err)
	}
	ev, seq, available, fresh, err := rel.event(vals, d.intern)
	if err != nil {
		return fmt.Errorf("decode an outbox insert: %w", err)
	}
	if fresh {
		d.txn.events = append(d.txn.events, ev)
		d.txn.seqs = append(d.txn.seqs, seq)
	} else if !available.IsZero() && !available.After(d.txn.committed) {
		d.claimedNotStreamed++
	}
	return nil
}

// value is one column of a tuple as the message carries it.
type value struct {
	kind byte // 'n' NULL, 'u' unchanged TOAST, 't' text, 'b' binary
	data []byte
}

// tupleValues splits TupleData (Int16 count, then per column a kind byte
// and, for text and binary, an Int32 length and the bytes) into vals.
func tupleValues(b []byte, vals []value) ([]value, error) {
	if len(b) < 2 {
		return vals, fmt.Errorf("short tuple")
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	for range n {
		if len(b) < 1 {
			return vals, fmt.Errorf("short tuple")
		}
		v := value{kind: b[0]}
		b = b[1:]
		switch v.kind {
		case 'n', 'u':
		case 't', 'b':
			if len(b) < 4 {
				return vals, fmt.Errorf("short tuple")
			}
			l := int(binary.BigEndian.Uint32(b))
			if l < 0 || len(b)-4 < l {
				return vals, fmt.Errorf("short tuple")
			}
			v.data = b[4 : 4+l : 4+l]
			b = b[4+l:]
		default:
			return vals, fmt.Errorf("unknown column kind %q", v.kind)
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// intern returns b as a string, the same string for the same bytes, so
// that a stream of events of a few types and keys allocates each once.
func (d *decoder) intern(b []byte) string {
	if s, ok := d.strs[string(b)]; ok { // no allocation for the lookup
		return s
	}
	if len(d.strs) >= internMax {
		clear(d.strs)
	}
	s := string(b)
	d.strs[s] = s
	return s
}

// internMax bounds the interned strings: keys may be unbounded.
const internMax = 4096

// relation records where the outbox columns are in m's tuples, when m is
// the outbox table.
func (d *decoder) relation(m *pglogrepl.RelationMessage) *relation {
	rel := &relation{outbox: m.RelationName == d.table && (d.schema == "" || m.Namespace == d.schema)}
	for i := range rel.at {
		rel.at[i] = -1
	}
	for i, c := range m.Columns {
		for j, name := range columnNames {
			if c.Name == name {
				rel.at[j], rel.oid[j] = i, c.DataType
			}
		}
	}
	return rel
}

// Type OIDs the decoder reads each column as.
const (
	oidBytea = 17
	oidInt8  = 20
	oidInt2  = 21
	oidInt4  = 23
	oidText  = 25
	oidJSON  = 114
	oidVchar = 1043
)

// columnTypes are the types the decoder can read each column as; a column
// missing from a table where the decoder needs it is as bad as a wrong one.
var columnTypes = [colCount]struct {
	oids     []uint32
	required bool
}{
	colID:        {[]uint32{oidUUID}, true},
	colType:      {[]uint32{oidText, oidVchar}, false},
	colKey:       {[]uint32{oidText, oidVchar}, false},
	colPayload:   {[]uint32{oidBytea}, false},
	colHeaders:   {[]uint32{oidJSONB, oidJSON}, false},
	colStatus:    {[]uint32{oidText, oidVchar}, true},
	colAttempts:  {[]uint32{oidInt2, oidInt4, oidInt8}, false},
	colAvailable: {[]uint32{oidTimestamptz}, true},
	colCreated:   {[]uint32{oidTimestamptz}, true},
	colSeq:       {[]uint32{oidInt8, oidInt4}, true},
}

// check refuses an outbox table whose columns the decoder cannot read:
// every insert would fail the stream, again at every reconnection, while
// the slot kept the WAL. It is the operator's to fix, as a SetupError.
func (rel *relation) check() error {
	if !rel.outbox {
		return nil
	}
	for c, want := range columnTypes {
		if rel.at[c] < 0 {
			if want.required {
				return &SetupError{Problem: fmt.Sprintf("the outbox table has no %s column", columnNames[c]),
					Fix: "CAPTURE=wal reads the table relay-cli migrate creates; use CAPTURE=poll for this one"}
			}
			continue
		}
		if !slices.Contains(want.oids, rel.oid[c]) {
			return &SetupError{Problem: fmt.Sprintf("the outbox table's %s column has a type (oid %d) the WAL reader does not read", columnNames[c], rel.oid[c]),
				Fix: "use the column types relay-cli migrate creates (timestamptz, not timestamp), or CAPTURE=poll"}
		}
	}
	return nil
}

// event reads an inserted row. fresh is false for a row the log does not
// deliver: one not PENDING, or one due again or scheduled (available_at
// after created_at), which the claims take; available is a PENDING row's
// available_at.
func (rel *relation) event(vals []value, intern func([]byte) string) (ev outbox.Event, seq int64, available time.Time, fresh bool, err error) {
	col := func(c int) []byte {
		i := rel.at[c]
		if i < 0 || i >= len(vals) || vals[i].kind != 'b' {
			return nil
		}
		return vals[i].data
	}
	if string(col(colStatus)) != "PENDING" {
		return ev, 0, time.Time{}, false, nil
	}
	available, err = timeOf(col(colAvailable), rel.oid[colAvailable])
	if err != nil {
		return ev, 0, time.Time{}, false, fmt.Errorf("available_at: %w", err)
	}
	created, err := timeOf(col(colCreated), rel.oid[colCreated])
	if err != nil {
		return ev, 0, time.Time{}, false, fmt.Errorf("created_at: %w", err)
	}
	if available.After(created) {
		return ev, 0, available, false, nil
	}
	id := col(colID)
	if rel.oid[colID] != oidUUID || len(id) != 16 {
		return ev, 0, time.Time{}, false, fmt.Errorf("event_id is not a uuid")
	}
	copy(ev.ID[:], id)
	ev.Type = intern(col(colType))
	ev.PartitionKey = intern(col(colKey))
	ev.Payload = col(colPayload)
	if h := col(colHeaders); len(h) > 0 {
		ev.Headers = h
		if rel.oid[colHeaders] == oidJSONB {
			// jsonb's binary form is a version byte, then the text.
			ev.Headers = h[1:]
		}
	}
	if v := col(colAttempts); v != nil {
		n, err := intOf(v)
		if err != nil {
			return ev, 0, time.Time{}, false, fmt.Errorf("attempts: %w", err)
		}
		ev.Attempts = int(n)
	}
	if v := col(colSeq); v != nil {
		if seq, err = intOf(v); err != nil {
			return ev, 0, time.Time{}, false, fmt.Errorf("seq: %w", err)
		}
	}
	if isFinite(created) {
		ev.CreatedAt = created
	}
	return ev, seq, available, true, nil
}

// pgEpochMicros is where PostgreSQL's binary timestamps count from
// (2000-01-01 UTC), in Unix microseconds.
const pgEpochMicros = 946684800 * 1e6

// The binary timestamps of ±infinity, as the times they stand for.
var (
	negInfinity = time.UnixMicro(math.MinInt64)
	posInfinity = time.UnixMicro(math.MaxInt64)
)

func isFinite(t time.Time) bool { return !t.Equal(negInfinity) && !t.Equal(posInfinity) }

// timeOf reads a binary timestamp(tz); NULL reads as -infinity.
func timeOf(v []byte, oid uint32) (time.Time, error) {
	if v == nil {
		return negInfinity, nil
	}
	if oid != oidTimestamptz {
		return time.Time{}, fmt.Errorf("type %d is not a timestamp", oid)
	}
	if len(v) != 8 {
		return time.Time{}, fmt.Errorf("%d bytes for a timestamp", len(v))
	}
	us := int64(binary.BigEndian.Uint64(v))
	switch us {
	case math.MaxInt64:
		return posInfinity, nil
	case math.MinInt64:
		return negInfinity, nil
	}
	return time.UnixMicro(us + pgEpochMicros).UTC(), nil
}

// intOf reads a binary int2, int4 or int8.
func intOf(b []byte) (int64, error) {
	switch len(b) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(b))), nil
	case 4:
		return int64(int32(binary.BigEndian.Uint32(b))), nil
	case 8:
		return int64(binary.BigEndian.Uint64(b)), nil
	}
	return 0, fmt.Errorf("%d bytes for an integer", len(b))
}
