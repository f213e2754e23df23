package amqp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// rabbitFrameMax is the frame_max the test server negotiates: RabbitMQ's
// default, which amqp091 also proposes.
const rabbitFrameMax = 131072

func goodEvents(typ string, n int) []outbox.Event {
	batch := make([]outbox.Event, n)
	for i := range batch {
		batch[i] = newEvent(typ, fmt.Sprintf("k%d", i%7), fmt.Sprintf("good %d", i), `{"tenant":"acme"}`)
	}
	return batch
}

func manyHeaders(n, size int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"h%d":"%s"`, i, strings.Repeat("v", size))
	}
	b.WriteString("}")
	return b.String()
}

// TestHostileEventAmongManyGoodOnes mixes one event that breaks a limit of
// AMQP into a batch of good ones: the good ones reach the queue once each,
// the hostile one goes DEAD naming the limit, and the publisher keeps
// working. Before the frame size was checked, headers or a key over it made
// RabbitMQ close the connection (FRAME_ERROR): the whole batch was released
// and sent again, forever, and the queue collected duplicates.
func TestHostileEventAmongManyGoodOnes(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("v", 140000)
	cases := []struct {
		name string
		bad  func(typ string) outbox.Event
		want []string
	}{
		{"header over the frame size", func(typ string) outbox.Event { return newEvent(typ, "k", "{}", `{"big":"`+big+`"}`) },
			[]string{"properties and headers are 140", "frame_max", "131072"}},
		{"partition key over the frame size", func(typ string) outbox.Event { return newEvent(typ, big, "{}", "") },
			[]string{"frame_max", "131072"}},
		{"many headers over the frame size", func(typ string) outbox.Event { return newEvent(typ, "k", "{}", manyHeaders(1000, 140)) },
			[]string{"frame_max", "131072"}},
		{"event type over 255 bytes", func(string) outbox.Event { return newEvent(strings.Repeat("t", 256), "k", "{}", "") },
			[]string{"event_type is 256 bytes", "255"}},
		{"header name over 255 bytes", func(typ string) outbox.Event {
			return newEvent(typ, "k", "{}", `{"`+strings.Repeat("h", 256)+`":"v"}`)
		}, []string{"name is 256 bytes", "255"}},
		{"content type over 255 bytes", func(typ string) outbox.Event {
			return newEvent(typ, "k", "{}", `{"Content-Type":"`+strings.Repeat("c", 256)+`"}`)
		}, []string{"content type is 256 bytes", "255"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exchange, typ := exchangeWithQueue(t)
			p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange+"&timeout=3s"))

			good := goodEvents(typ, 200)
			batch := append(append(append([]outbox.Event{}, good[:100]...), tc.bad(typ)), good[100:]...)
			errs := publishertest.Publish(t, p, batch...)
			for i, err := range errs {
				if i != 100 && err != nil {
					t.Fatalf("good event %d: %v", i, err)
				}
			}
			err := errs[100]
			if !publisher.IsPermanent(err) || publisher.IsUnavailable(err) {
				t.Fatalf("hostile event: %v, want a permanent error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}

			next := goodEvents(typ, 20)
			publishertest.RequireDelivered(t, publishertest.Publish(t, p, next...))
			want := append(good, next...)
			got := amqptest.Drain(t, typ, len(want))
			if len(got) != len(want) {
				t.Fatalf("queue holds %d messages, want the %d good events once each", len(got), len(want))
			}
			for i, d := range got {
				if d.MessageId != want[i].ID.String() {
					t.Fatalf("message %d is %s, want %s", i, d.MessageId, want[i].ID)
				}
			}
		})
	}
}

// TestFrameLimitIsExact sends an event whose content header frame is
// exactly the negotiated frame_max, which RabbitMQ must take, and one byte
// more, which the driver must refuse, as AMQP says frames are at most
// frame_max. RabbitMQ itself tolerates 8 bytes more (it allows for clients
// that forget the frame's own 8 bytes); 9 bytes more, sent on a connection
// of the test's own, makes it close that connection: the driver's limit is
// the server's, give or take that tolerance.
func TestFrameLimitIsExact(t *testing.T) {
	t.Parallel()
	exchange, typ := exchangeWithQueue(t)
	pub := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange))
	p := pub.(*Publisher)
	if err := p.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.sess.conn.Config.FrameSize; got != rabbitFrameMax {
		t.Fatalf("negotiated frame_max %d, the test assumes %d", got, rabbitFrameMax)
	}

	padded := func(n int) outbox.Event {
		return newEvent(typ, "k", "body", `{"pad":"`+strings.Repeat("p", n)+`"}`)
	}
	base := padded(0)
	msg, err := p.message(&base, rabbitFrameMax)
	if err != nil {
		t.Fatal(err)
	}
	room := rabbitFrameMax - headerFrameSize(&msg)

	fits := padded(room)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, fits))
	if got := amqptest.Drain(t, typ, 1); len(got) != 1 || got[0].MessageId != fits.ID.String() {
		t.Fatalf("the event of exactly frame_max did not arrive")
	}

	over := padded(room + 1)
	err = publishertest.Publish(t, p, over)[0]
	if !publisher.IsPermanent(err) || !strings.Contains(err.Error(), fmt.Sprintf("are %d bytes", rabbitFrameMax+1)) {
		t.Fatalf("one byte over frame_max: %v, want permanent naming %d bytes", err, rabbitFrameMax+1)
	}

	// What RabbitMQ does beyond its tolerance.
	beyond := padded(room + 9)
	overMsg, err := p.message(&beyond, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := amqp091.Dial(amqptest.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	// The server may close the connection while the frames are still being
	// written, so the publish itself can fail: the close reason decides.
	publishErr := ch.PublishWithContext(context.Background(), exchange, typ, false, false, overMsg)
	select {
	case reason := <-closed:
		if reason == nil || reason.Code != amqp091.FrameError {
			t.Fatalf("RabbitMQ closed the connection with %v (publish: %v), want FRAME_ERROR", reason, publishErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("RabbitMQ took a content header over frame_max (publish: %v): the driver's limit is too strict", publishErr)
	}
	// The publisher's own connection was never disturbed.
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, padded(10)))
}
