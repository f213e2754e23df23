package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
)

// hostileRow is an event a broker cannot take, or one that only reads
// oddly, mixed into good ones.
type hostileRow struct {
	name  string
	event pgtest.Event
	// set, when not empty, is an SQL assignment applied after the insert,
	// for values no producer helper writes.
	set string
	// want is where the row must end: DEAD with wantErr in last_error, or
	// DELIVERED.
	want    outbox.Status
	wantErr string
}

// infiniteCreatedAt is a row whose created_at no Go time can hold.
var infiniteCreatedAt = hostileRow{name: "created_at infinity", set: "created_at = 'infinity'", want: outbox.StatusDelivered}

// drainAmongHostileRows inserts good events of goodType with the hostile
// rows spread among them and relays them: every good event must be
// delivered at its first attempt, each hostile row must end as it should,
// and the engine must end active.
func drainAmongHostileRows(t *testing.T, tb *pgtest.Table, pub publisher.Publisher, goodType string, rows []hostileRow) {
	t.Helper()
	const good = 3000
	events := make([]pgtest.Event, 0, good+len(rows))
	at := map[int]int{} // position in events → rows index
	for i := range good {
		if k := i * len(rows) / good; i%(good/len(rows)) == good/len(rows)/2 && len(at) < len(rows) {
			at[len(events)] = k
			ev := rows[k].event
			if ev.Type == "" {
				ev.Type = goodType
			}
			events = append(events, ev)
		}
		events = append(events, pgtest.Event{Type: goodType, Payload: pgtest.Payload(i, 200)})
	}
	ids := tb.Insert(t, events...)
	hostileIDs := make([]uuid.UUID, len(rows))
	for pos, k := range at {
		hostileIDs[k] = ids[pos]
		if rows[k].set != "" {
			tb.Set(t, ids[pos], rows[k].set)
		}
	}

	r := start(t, relay.Config{BatchSize: 500, Logger: testLogger()}, tb.Store, pub)
	eventually.True(t, 60*time.Second, func() bool {
		done := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE status = 'DELIVERED' AND attempts = 0 AND NOT (event_id = ANY($1))", hostileIDs)
		return done == good
	}, func() string {
		return fmt.Sprintf("%d good events delivered at their first attempt; counts %v", good, tb.Counts(t))
	})
	for k, row := range rows {
		eventually.True(t, 30*time.Second, func() bool {
			return tb.Exec(t, "SELECT 1 FROM {{table}} WHERE event_id = $1 AND status = $2", hostileIDs[k], string(row.want)) == 1
		}, func() string {
			return fmt.Sprintf("%s: row %s %+v, want %s", row.name, hostileIDs[k], tb.Get(t, hostileIDs[k]), row.want)
		})
		if row.wantErr != "" {
			got := tb.Get(t, hostileIDs[k])
			if !strings.Contains(got.LastError, row.wantErr) {
				t.Errorf("%s: last_error %q does not name %q", row.name, got.LastError, row.wantErr)
			}
		}
	}
	if s := r.engine.State(); s != relay.StateActive {
		t.Errorf("engine is %s after the hostile rows, want active", s)
	}
}

func TestNATSHostileRowsDoNotStallTheRest(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = 1 << 20 })
	srv.Stream(t, jetstream.StreamConfig{Name: "HOSTILE", Subjects: []string{"hostile.>"}})
	drainAmongHostileRows(t, tb, openNATS(t, srv, ""), "hostile.good", []hostileRow{
		{name: "event_type over the control line", event: pgtest.Event{Type: "hostile." + strings.Repeat("x", 5000)},
			want: outbox.StatusDead, wantErr: "max_control_line"},
		{name: "headers over 64 KB", event: pgtest.Event{Headers: `{"big":"` + strings.Repeat("h", 70000) + `"}`},
			want: outbox.StatusDead, wantErr: "65535"},
		{name: "header name NATS refuses", event: pgtest.Event{Headers: `{"bad/name":"v"}`},
			want: outbox.StatusDead, wantErr: "bad/name"},
		{name: "payload over max_payload", event: pgtest.Event{Payload: []byte(strings.Repeat("p", 2<<20))},
			want: outbox.StatusDead, wantErr: "max_payload"},
		{name: "headers not an object", event: pgtest.Event{Headers: `["a"]`},
			want: outbox.StatusDead, wantErr: "must be a JSON object"},
		// Issue 20: NATS headers would carry these altered (trimmed, line
		// breaks folded into spaces), so they go DEAD instead.
		{name: "partition key with spaces around it", event: pgtest.Event{PartitionKey: "  spaced key  "},
			want: outbox.StatusDead, wantErr: `partition_key "  spaced key  " cannot travel in the X-Partition-Key header: value begins or ends with white space`},
		{name: "partition key with a line break", event: pgtest.Event{PartitionKey: "line1\r\nline2"},
			want: outbox.StatusDead, wantErr: `partition_key "line1\r\nline2" cannot travel in the X-Partition-Key header: value contains a line break`},
		{name: "header value with spaces around it", event: pgtest.Event{Headers: `{"note":"  padded  "}`},
			want: outbox.StatusDead, wantErr: `header "note": value begins or ends with white space`},
		infiniteCreatedAt,
	})
}

func TestKafkaHostileRowsDoNotStallTheRest(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	c := kafkatest.Start(t)
	c.CreateTopic(t, "good", 3, nil)
	drainAmongHostileRows(t, tb, openKafka(t, c, ""), "good", []hostileRow{
		{name: "topic with a non-ASCII letter", event: pgtest.Event{Type: "gööd"},
			want: outbox.StatusDead, wantErr: "'ö'"},
		{name: "topic over 249 characters", event: pgtest.Event{Type: strings.Repeat("t", 300)},
			want: outbox.StatusDead, wantErr: "249"},
		{name: "record over batch_bytes", event: pgtest.Event{Payload: []byte(strings.Repeat("p", 2<<20))},
			want: outbox.StatusDead, wantErr: "batch_bytes"},
		infiniteCreatedAt,
	})
}

func TestAMQPHostileRowsDoNotStallTheRest(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	exchange, _ := amqpDestination(t, "#", nil)
	drainAmongHostileRows(t, tb, openAMQP(t, "", exchange, ""), "good", []hostileRow{
		{name: "headers larger than the frame", event: pgtest.Event{Headers: `{"big":"` + strings.Repeat("h", 200_000) + `"}`},
			want: outbox.StatusDead, wantErr: "frame_max"},
		{name: "partition key larger than the frame", event: pgtest.Event{PartitionKey: strings.Repeat("k", 200_000)},
			want: outbox.StatusDead, wantErr: "frame_max"},
		{name: "routing key over 255 bytes", event: pgtest.Event{Type: strings.Repeat("r", 300)},
			want: outbox.StatusDead, wantErr: "255"},
		infiniteCreatedAt,
	})
}

// TestAnEventThatMakesTheBrokerDropItsConnectionStandsAlone: the server's
// control line is shorter than the driver believes, so a long event_type
// passes the driver's check and the server closes the connection on it,
// every time. The batch is sent again in halves until that event stands
// alone; it is charged an attempt, everything else is delivered, and the
// relay does not pause.
func TestAnEventThatMakesTheBrokerDropItsConnectionStandsAlone(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t, func(o *server.Options) { o.MaxControlLine = 1024 })
	st := srv.Stream(t, jetstream.StreamConfig{Name: "DROPS", Subjects: []string{"drops.>"}})
	drainAmongHostileRows(t, tb, openNATS(t, srv, ""), "drops.good", []hostileRow{
		{name: "subject the server closes the connection over", event: pgtest.Event{Type: "drops." + strings.Repeat("x", 2000)},
			want: outbox.StatusPending, wantErr: "closed the connection each time this event was sent"},
	})
	if got := natstest.Count(t, st); got != 3000 {
		t.Errorf("stream holds %d messages, want the 3000 good ones", got)
	}
	if n := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts > 0"); n != 1 {
		t.Errorf("%d rows were charged attempts, want only the culprit", n)
	}
}
