package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Header names every driver adds to a message next to the row's own headers,
// so consumers can identify an event without parsing its payload.
const (
	HeaderEventID      = "X-Event-ID"
	HeaderEventType    = "X-Event-Type"
	HeaderPartitionKey = "X-Partition-Key"
	// HeaderTraceparent is the W3C trace context header. A producer that
	// puts it in the row's headers has it arrive at the broker unchanged.
	HeaderTraceparent = "traceparent"
)

// ParseHeaders turns a row's headers column into broker headers. The column
// must hold a JSON object whose values are strings, numbers or booleans;
// numbers and booleans become their JSON text and null values are left out.
// Anything else is an error that names the offending key, because no broker
// could carry it and retrying will not change the row.
func ParseHeaders(raw []byte) (map[string]string, error) {
	raw = bytes.TrimSpace(raw)
	// Most rows carry no headers; JSONB spells that "{}".
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte("{}")) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("headers must be a JSON object, got %s", describeJSON(raw))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("headers are not valid JSON: %w", err)
	}
	out := make(map[string]string, len(fields))
	for key, value := range fields {
		text, ok, err := headerText(value)
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", key, err)
		}
		if ok {
			out[key] = text
		}
	}
	return out, nil
}

// headerText returns the text a JSON scalar is sent as; ok is false for null.
func headerText(value json.RawMessage) (text string, ok bool, err error) {
	switch value[0] {
	case '"':
		var s string
		if err := json.Unmarshal(value, &s); err != nil {
			return "", false, err
		}
		return s, true, nil
	case 'n':
		return "", false, nil
	case '{', '[':
		return "", false, fmt.Errorf("value must be a string, number or boolean, got %s", describeJSON(value))
	default: // a number or a boolean: its JSON text
		return string(value), true, nil
	}
}

// IsEventHeader reports whether name is one of the headers every driver
// sets itself (X-Event-ID, X-Event-Type, X-Partition-Key), in any letter
// case. A row header of that name is dropped, so a message never carries
// two values for one of them.
func IsEventHeader(name string) bool {
	return strings.EqualFold(name, HeaderEventID) ||
		strings.EqualFold(name, HeaderEventType) ||
		strings.EqualFold(name, HeaderPartitionKey)
}

func describeJSON(raw []byte) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}
