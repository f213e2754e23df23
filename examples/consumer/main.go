// Command consumer applies orders.paid events from NATS JetStream to a
// table, each exactly once, however often the relay and JetStream deliver
// it. Its effect is deliberately not idempotent — it adds each order to its
// customer's revenue — so an event applied twice would show. The inbox
// makes it safe: the revenue update and the event's inbox record commit in
// one transaction, and a second delivery finds the record and changes
// nothing.
//
// The whole loop, with the producer example and the relay:
//
//	bin/relay-cli migrate                              # the outbox table
//	bin/relay-cli migrate --inbox                      # the consumer's inbox table (here in the same database)
//	PUBLISHER_URL=nats://127.0.0.1:4222 bin/relay-cli setup-broker --event-type 'orders.>' --name ORDERS  # where the relay publishes orders.* events
//	PUBLISHER_URL=nats://127.0.0.1:4222 bin/relay &
//	go run ./examples/consumer &
//	go run ./examples/producer -order 42 -customer acme -amount 1999
//	psql -c 'SELECT * FROM example_revenue'
//
// The consumer creates its tables if they are missing, so it also runs on
// its own. Run it several times at once (same -durable): JetStream shares
// the messages out, and the inbox keeps a redelivery that overlaps a slow
// first delivery from applying twice. On MySQL or MariaDB, open the
// database with go-sql-driver/mysql and use inbox.New(inbox.Config{Dialect:
// inbox.MySQL}) in place of the package-level inbox.Process.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/pkg/inbox"
	"github.com/outbox-relay/relay/pkg/inbox/eventid"
)

// config is the command line.
type config struct {
	db      string
	nats    string
	stream  string
	durable string
	ackWait time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.db, "db", envOr("DATABASE_URL", "postgres://postgres@localhost:5432/postgres?sslmode=disable"), "PostgreSQL URL of the consumer's database (DATABASE_URL)")
	flag.StringVar(&cfg.nats, "nats", envOr("NATS_URL", natsgo.DefaultURL), "NATS server URL (NATS_URL)")
	flag.StringVar(&cfg.stream, "stream", "ORDERS", "JetStream stream holding the orders.paid events")
	flag.StringVar(&cfg.durable, "durable", "billing", "durable consumer name, also the inbox's consumer name")
	flag.DurationVar(&cfg.ackWait, "ack-wait", 30*time.Second, "how long JetStream waits for an ack before redelivering")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, cfg, log); err != nil {
		log.Error("consumer stopped", "err", err)
		os.Exit(1)
	}
}

// orderPaid is the event's payload, as examples/producer writes it.
type orderPaid struct {
	OrderID     int64  `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// addRevenue is the effect: not idempotent on purpose.
const addRevenue = `INSERT INTO example_revenue (customer, orders, amount_cents) VALUES ($1, 1, $2)
ON CONFLICT (customer) DO UPDATE
SET orders = example_revenue.orders + 1, amount_cents = example_revenue.amount_cents + EXCLUDED.amount_cents`

// createRevenueTable creates the example's business table. Replicas often
// start together, and two concurrent CREATE TABLE IF NOT EXISTS can both
// miss the table and one then fails on PostgreSQL's catalog, so the DDL runs
// under a transaction-scoped advisory lock: the second replica waits for the
// first and finds the table.
func createRevenueTable(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('examples/consumer: example_revenue'))`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS example_revenue (
		customer text PRIMARY KEY, orders int NOT NULL, amount_cents bigint NOT NULL)`); err != nil {
		return err
	}
	return tx.Commit()
}

// run consumes until ctx ends, then lets the messages in hand finish.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	db, err := sql.Open("pgx", cfg.db)
	if err != nil {
		return err
	}
	defer db.Close()
	// The inbox table (relay-cli migrate --inbox does the same) and the
	// example's business table.
	if _, err := inbox.Default().CreateTable(ctx, db); err != nil {
		return err
	}
	if err := createRevenueTable(ctx, db); err != nil {
		return fmt.Errorf("create example_revenue: %w", err)
	}

	nc, err := natsgo.Connect(cfg.nats, natsgo.Name("example-consumer"), natsgo.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.stream, jetstream.ConsumerConfig{
		Durable:       cfg.durable,
		FilterSubject: "orders.paid",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.ackWait,
	})
	if err != nil {
		return fmt.Errorf("consumer %s on stream %s (create the stream first: relay-cli setup-broker --event-type 'orders.>' --name %s): %w",
			cfg.durable, cfg.stream, cfg.stream, err)
	}
	// Messages in hand finish after a signal: their work is not cut off
	// halfway by the cancelled ctx.
	work := context.WithoutCancel(ctx)
	cc, err := cons.Consume(func(msg jetstream.Msg) { handle(work, db, cfg.durable, msg, log) })
	if err != nil {
		return err
	}
	log.Info("consuming", "stream", cfg.stream, "durable", cfg.durable)
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// handle applies one message through the inbox and acknowledges it once
// its effect (now or earlier) is committed.
func handle(ctx context.Context, db *sql.DB, consumer string, msg jetstream.Msg, log *slog.Logger) {
	id, err := eventid.NATS(msg.Headers())
	if err != nil {
		// Not from the relay: no id to deduplicate by, and redelivery
		// will not give it one.
		log.Error("dropping message", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	var paid orderPaid
	if err := json.Unmarshal(msg.Data(), &paid); err != nil || paid.Customer == "" {
		log.Error("dropping malformed orders.paid event", "event_id", id, "err", err)
		_ = msg.Term()
		return
	}
	applied, err := inbox.Process(ctx, db, consumer, id, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, addRevenue, paid.Customer, paid.AmountCents)
		return err
	})
	switch {
	case errors.Is(err, inbox.ErrInvalidID):
		log.Error("dropping message", "event_id", id, "err", err)
		_ = msg.Term()
	case err != nil:
		// Nothing was committed: let JetStream deliver it again.
		log.Warn("will retry", "event_id", id, "err", err)
		_ = msg.NakWithDelay(time.Second)
	default:
		// Applied now, or a duplicate whose effect committed before. A
		// lost ack only means one more duplicate.
		if applied {
			log.Info("applied", "event_id", id, "order_id", paid.OrderID, "customer", paid.Customer)
		} else {
			log.Info("duplicate skipped", "event_id", id, "order_id", paid.OrderID)
		}
		_ = msg.Ack()
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
