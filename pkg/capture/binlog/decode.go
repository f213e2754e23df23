package binlog

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/relay/pkg/outbox"
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

// layout is where each column the decoder reads lies in a row image of
// the outbox table.
type layout struct {
	at    [colCount]int
	width int // the number of columns the layout was made for
}

// layoutOf finds the decoder's columns among names, the table's columns in
// their order; a column it needs that is missing is a setup error.
func layoutOf(names []string) (layout, error) {
	l := layout{width: len(names)}
	for c := range l.at {
		l.at[c] = -1
	}
	for i, n := range names {
		for c, want := range columnNames {
			if strings.EqualFold(n, want) {
				l.at[c] = i
			}
		}
	}
	var missing []string
	for c, i := range l.at {
		if i < 0 {
			missing = append(missing, columnNames[c])
		}
	}
	if len(missing) > 0 {
		return l, fmt.Errorf("the outbox table has no column %s", strings.Join(missing, ", "))
	}
	return l, nil
}

// event reads an inserted row. fresh is false for a row the log does not
// deliver: one not PENDING, or one due again or scheduled (available_at
// after created_at), which the claims take.
func (l layout) event(row []any) (ev outbox.Event, seq int64, fresh bool, err error) {
	if len(row) != l.width {
		return ev, 0, false, fmt.Errorf("a row of %d columns, but the table has %d", len(row), l.width)
	}
	col := func(c int) any { return row[l.at[c]] }
	if s, _ := text(col(colStatus)); s != "PENDING" {
		return ev, 0, false, nil
	}
	available, err := timeOf(col(colAvailable))
	if err != nil {
		return ev, 0, false, fmt.Errorf("available_at: %w", err)
	}
	created, err := timeOf(col(colCreated))
	if err != nil {
		return ev, 0, false, fmt.Errorf("created_at: %w", err)
	}
	if available.After(created) {
		return ev, 0, false, nil
	}
	// The log leaves out a BINARY column's trailing zero bytes, the
	// padding the column adds back.
	id, _ := text(col(colID))
	if len(id) > 16 {
		return ev, 0, false, fmt.Errorf("event_id is %d bytes, not 16", len(id))
	}
	copy(ev.ID[:], id)
	ev.Type, _ = text(col(colType))
	ev.PartitionKey, _ = text(col(colKey))
	ev.Payload = bytesOf(col(colPayload))
	if h := bytesOf(col(colHeaders)); len(h) > 0 {
		ev.Headers = h
	}
	attempts, err := intOf(col(colAttempts))
	if err != nil {
		return ev, 0, false, fmt.Errorf("attempts: %w", err)
	}
	ev.Attempts = int(attempts)
	if seq, err = intOf(col(colSeq)); err != nil {
		return ev, 0, false, fmt.Errorf("seq: %w", err)
	}
	ev.CreatedAt = created
	return ev, seq, true, nil
}

// text is a string or bytes column's value; ok is false for NULL.
func text(v any) (s string, ok bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// bytesOf is a copy of a string or bytes column's value (nil for NULL),
// made once: the log's buffer is not the event's to keep.
func bytesOf(v any) []byte {
	switch v := v.(type) {
	case string:
		return []byte(v)
	case []byte:
		return append([]byte(nil), v...)
	}
	return nil
}

// datetimeLayout is how the binlog library writes a DATETIME(6).
const datetimeLayout = "2006-01-02 15:04:05.999999"

// timeOf reads a DATETIME column, which holds UTC. The zero date a
// permissive sql_mode lets a producer write reads as the zero time: the
// event still goes, as the claims would send it.
func timeOf(v any) (time.Time, error) {
	switch v := v.(type) {
	case time.Time:
		return time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC), nil
	case []byte:
		return timeOf(string(v))
	case string:
		if strings.HasPrefix(v, "0000-00-00") {
			return time.Time{}, nil
		}
		return time.ParseInLocation(datetimeLayout, v, time.UTC)
	}
	return time.Time{}, fmt.Errorf("not a time: %T", v)
}

// intOf reads an integer column.
func intOf(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case int32:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int8:
		return int64(v), nil
	case uint64:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case int:
		return int64(v), nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("not an integer: %T", v)
}
