package pgwal

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// Type OIDs the decoder tells apart; the other columns it reads are taken
// as their binary bytes (text, bytea) or integers of any width.
const (
	oidTimestamp   = 1114
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
}

// decode processes one pgoutput message; it returns a transaction when the
// message is a COMMIT of one with outbox events.
func (d *decoder) decode(data []byte, a *acks) (*txn, error) {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parse logical replication message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		d.relations[m.RelationID] = d.relation(m)
	case *pglogrepl.BeginMessage:
		d.txn = &txn{xid: m.Xid}
		d.skip = false
		a.begin()
	case *pglogrepl.InsertMessage:
		rel := d.relations[m.RelationID]
		if d.txn == nil || rel == nil || !rel.outbox || d.skip {
			return nil, nil
		}
		ev, seq, fresh, err := rel.event(m.Tuple)
		if err != nil {
			return nil, fmt.Errorf("decode an outbox insert: %w", err)
		}
		if fresh {
			d.txn.events = append(d.txn.events, ev)
			d.txn.seqs = append(d.txn.seqs, seq)
		}
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

// event reads an inserted row. fresh is false for a row the log does not
// deliver: one not PENDING, or one due again or scheduled (available_at
// after created_at), which the claims take.
func (rel *relation) event(t *pglogrepl.TupleData) (ev outbox.Event, seq int64, fresh bool, err error) {
	col := func(c int) *pglogrepl.TupleDataColumn {
		i := rel.at[c]
		if i < 0 || i >= len(t.Columns) {
			return nil
		}
		v := t.Columns[i]
		if v.DataType != pglogrepl.TupleDataTypeBinary {
			return nil
		}
		return v
	}
	if v := col(colStatus); v == nil || string(v.Data) != "PENDING" {
		return ev, 0, false, nil
	}
	available, err := timeOf(col(colAvailable), rel.oid[colAvailable])
	if err != nil {
		return ev, 0, false, fmt.Errorf("available_at: %w", err)
	}
	created, err := timeOf(col(colCreated), rel.oid[colCreated])
	if err != nil {
		return ev, 0, false, fmt.Errorf("created_at: %w", err)
	}
	if available.After(created) {
		return ev, 0, false, nil
	}
	v := col(colID)
	if v == nil || rel.oid[colID] != oidUUID || len(v.Data) != 16 {
		return ev, 0, false, fmt.Errorf("event_id is not a uuid")
	}
	copy(ev.ID[:], v.Data)
	if v := col(colType); v != nil {
		ev.Type = string(v.Data)
	}
	if v := col(colKey); v != nil {
		ev.PartitionKey = string(v.Data)
	}
	if v := col(colPayload); v != nil {
		ev.Payload = v.Data
	}
	if v := col(colHeaders); v != nil {
		ev.Headers = v.Data
		if rel.oid[colHeaders] == oidJSONB && len(ev.Headers) > 0 {
			// jsonb's binary form is a version byte, then the text.
			ev.Headers = ev.Headers[1:]
		}
	}
	if v := col(colAttempts); v != nil {
		n, err := intOf(v.Data)
		if err != nil {
			return ev, 0, false, fmt.Errorf("attempts: %w", err)
		}
		ev.Attempts = int(n)
	}
	if v := col(colSeq); v != nil {
		if seq, err = intOf(v.Data); err != nil {
			return ev, 0, false, fmt.Errorf("seq: %w", err)
		}
	}
	if isFinite(created) {
		ev.CreatedAt = created
	}
	return ev, seq, true, nil
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
func timeOf(v *pglogrepl.TupleDataColumn, oid uint32) (time.Time, error) {
	if v == nil {
		return negInfinity, nil
	}
	if oid != oidTimestamptz && oid != oidTimestamp {
		return time.Time{}, fmt.Errorf("type %d is not a timestamp", oid)
	}
	if len(v.Data) != 8 {
		return time.Time{}, fmt.Errorf("%d bytes for a timestamp", len(v.Data))
	}
	us := int64(binary.BigEndian.Uint64(v.Data))
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
