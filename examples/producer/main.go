// Command producer shows how an application writes events: the business
// change (an order marked paid) and its event commit in one transaction, so
// neither exists without the other. Run it against a migrated database:
//
//	bin/relay-cli migrate
//	go run ./examples/producer -order 42
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

func main() {
	dsn := flag.String("db", envOr("STORAGE_URL", "postgres://postgres@localhost:5432/postgres?sslmode=disable"), "PostgreSQL URL")
	order := flag.Int("order", 42, "order id to mark paid")
	flag.Parse()

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)

	// The example's own business table.
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_orders (id int PRIMARY KEY, status text NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Lock the order first: events of one key are then stamped in
		// commit order (see docs/architecture.md).
		if _, err := tx.Exec(ctx, `INSERT INTO example_orders (id, status) VALUES ($1, 'paid')
			ON CONFLICT (id) DO UPDATE SET status = 'paid'`, *order); err != nil {
			return err
		}
		payload, _ := json.Marshal(map[string]any{"order_id": *order, "status": "paid"})
		return postgres.Write(ctx, postgres.PgxTx(tx), outbox.Message{
			Type:    "orders.paid",
			Key:     fmt.Sprintf("order-%d", *order),
			Payload: payload,
			Headers: map[string]string{"content-type": "application/json"},
		})
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order %d marked paid; event orders.paid written to the outbox\n", *order)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
