package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// The consumer applies each event once although the stream holds it
// twice, drops what it cannot process instead of retrying it forever, and
// stops cleanly when its context ends.
func TestConsumerAppliesEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	space, _, _ := strings.Cut(pgtest.New(t).Name, ".")
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	_, js := srv.Connect(t)

	publish := func(id string, order int, customer string, cents int) {
		t.Helper()
		msg := &natsgo.Msg{Subject: "orders.paid", Header: natsgo.Header{},
			Data: fmt.Appendf(nil, `{"order_id":%d,"customer":%q,"amount_cents":%d}`, order, customer, cents)}
		if id != "" {
			// No Nats-Msg-Id: JetStream keeps both copies, as it does
			// for a re-publish outside its duplicate window.
			msg.Header.Set("X-Event-ID", id)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	publish("e1", 1, "acme", 100)
	publish("e2", 2, "acme", 20)
	publish("e1", 1, "acme", 100) // the relay published e1 again
	publish("e3", 3, "globex", 3)
	publish("", 4, "acme", 1000) // not from the relay: no id
	if _, err := js.PublishMsg(ctx, &natsgo.Msg{Subject: "orders.paid", Header: natsgo.Header{"X-Event-ID": {"e5"}}, Data: []byte("not json")}); err != nil {
		t.Fatal(err)
	}
	publish("e2", 2, "acme", 20)

	dbURL := pgtest.URL() + "&search_path=" + space
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, config{db: dbURL, nats: srv.URL(), stream: "ORDERS", durable: "billing", ackWait: 5 * time.Second},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()

	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eventually.True(t, 30*time.Second, func() bool {
		cons, err := js.Consumer(ctx, "ORDERS", "billing")
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Stream == 7 && info.NumAckPending == 0 && info.NumPending == 0
	}, func() string { return "every message acked or terminated" })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	got := map[string]string{}
	rows, err := db.Query("SELECT customer, orders, amount_cents FROM example_revenue")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var c string
		var orders, cents int
		if err := rows.Scan(&c, &orders, &cents); err != nil {
			t.Fatal(err)
		}
		got[c] = fmt.Sprintf("%d orders, %d cents", orders, cents)
	}
	want := map[string]string{"acme": "2 orders, 120 cents", "globex": "1 orders, 3 cents"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("revenue %v, want %v", got, want)
	}
	var records int
	if err := db.QueryRow("SELECT count(*) FROM inbox WHERE consumer = 'billing'").Scan(&records); err != nil || records != 3 {
		t.Fatalf("inbox holds %d records (%v), want e1, e2 and e3", records, err)
	}
}
