// Command producer-mysql shows how an application on MySQL or MariaDB
// writes events: the business change (an order marked paid) and its event
// commit in one database/sql transaction, so neither exists without the
// other. Run it against a migrated database:
//
//	bin/relay-cli migrate --storage-url 'mysql://root@127.0.0.1:3306/app'
//	go run ./examples/producer-mysql -db 'root@tcp(127.0.0.1:3306)/app' -order 42
//
// -db is a go-sql-driver/mysql DSN, the application's own connection: the
// producer helper needs no setting of it (it writes times in UTC and ids as
// 16 bytes whatever the connection's loc and time_zone).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

func main() {
	dsn := flag.String("db", envOr("MYSQL_DSN", "root@tcp(127.0.0.1:3306)/app"), "go-sql-driver/mysql DSN")
	order := flag.Int("order", 42, "order id to mark paid")
	flag.Parse()

	ctx := context.Background()
	db, err := sql.Open("mysql", *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// The example's own business table.
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS example_orders (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	// Lock the order first: events of one key are then stamped in commit
	// order (see docs/architecture.md).
	if _, err := tx.ExecContext(ctx, `INSERT INTO example_orders (id, status) VALUES (?, 'paid')
		ON DUPLICATE KEY UPDATE status = 'paid'`, *order); err != nil {
		log.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"order_id": *order, "status": "paid"})
	err = mysql.Write(ctx, tx, outbox.Message{
		Type:    "orders.paid",
		Key:     fmt.Sprintf("order-%d", *order),
		Payload: payload,
		Headers: map[string]string{"content-type": "application/json"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
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
