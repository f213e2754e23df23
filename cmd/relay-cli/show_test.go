package main

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

func TestShowTextPayloadAndHeaders(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	id := tb.Insert(t, pgtest.Event{Type: "orders.paid", PartitionKey: "order-42",
		Payload: []byte(`{"order_id": 42, "note": "grüße"}`), Headers: `{"content-type": "application/json", "retry": 2}`})[0]
	tb.Set(t, id, "status = 'DEAD', attempts = 3, last_error = 'no stream'")

	for _, args := range [][]string{{"show", id.String()}, {"show", "--storage-url", pgtest.URL(), id.String()}} {
		r := ok(t, relayCLI(t, tb, args...))
		for _, want := range []string{
			"event_id       " + id.String(),
			"event_type     orders.paid",
			"partition_key  order-42",
			"status         DEAD",
			"attempts       3",
			"last_error     no stream",
			"locked_by      (null)",
			"delivered_at   (null)",
			"seq            ",
			// jsonb keeps keys shortest first.
			"headers:\n  {\n    \"retry\": 2,\n    \"content-type\": \"application/json\"\n  }",
			"payload (35 bytes, text):\n{\"order_id\": 42, \"note\": \"grüße\"}",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("show does not print %q:\n%s", want, r.stdout)
			}
		}
	}

	js := decode[showJSON](t, ok(t, relayCLI(t, tb, "show", id.String(), "--json")))
	if js.EventID != id || js.PayloadEncoding != "text" || js.Payload != `{"order_id": 42, "note": "grüße"}` ||
		js.PayloadBytes != 35 || js.Status != "DEAD" || js.LastError == nil || *js.LastError != "no stream" ||
		js.PartitionKey == nil || *js.PartitionKey != "order-42" || js.Seq == nil || js.LockedAt != nil {
		t.Errorf("show --json = %+v", js)
	}
	var headers map[string]any
	if err := json.Unmarshal(js.Headers, &headers); err != nil || headers["content-type"] != "application/json" || headers["retry"] != 2.0 {
		t.Errorf("show --json headers = %s (%v), want the row's object", js.Headers, err)
	}
	// Every column is there under its own name.
	var raw map[string]any
	if err := json.Unmarshal([]byte(ok(t, relayCLI(t, tb, "show", "--json", id.String())).stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"event_id", "event_type", "partition_key", "payload", "headers", "status", "attempts",
		"last_error", "available_at", "locked_by", "locked_at", "delivered_at", "created_at", "updated_at", "seq"} {
		if _, ok := raw[col]; !ok {
			t.Errorf("show --json lacks the column %s", col)
		}
	}
}

func TestShowBinaryPayloadAsBase64(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	payload := []byte{0x00, 0xff, 0xfe, 'o', 'k', 0x1b}
	id := tb.Insert(t, pgtest.Event{Type: "bin", Payload: payload})[0]
	encoded := base64.StdEncoding.EncodeToString(payload)

	r := ok(t, relayCLI(t, tb, "show", id.String()))
	if !strings.Contains(r.stdout, "payload (6 bytes, base64):\n"+encoded+"\n") || !strings.Contains(r.stdout, "partition_key  (null)") {
		t.Errorf("binary payload not shown as base64:\n%s", r.stdout)
	}
	js := decode[showJSON](t, ok(t, relayCLI(t, tb, "show", "--json", id.String())))
	if js.PayloadEncoding != "base64" || js.Payload != encoded || js.PartitionKey != nil {
		t.Errorf("show --json = %+v, want the payload in base64", js)
	}
}

func TestShowUnknownEventExits1(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	id := uuid.New()
	r := relayCLI(t, tb, "show", id.String())
	if r.code != 1 || !strings.Contains(r.stderr, id.String()) || !strings.Contains(r.stderr, "not found") {
		t.Errorf("show of an unknown id, want exit 1 saying it was not found:\n%s", r)
	}
}
