package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// loginAs creates a login role that is a member of group and returns
// rawURL changed to connect as it. The role is dropped when the test ends.
func loginAs(t *testing.T, tb *pgtest.Table, rawURL, group string) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := group + "_" + hex.EncodeToString(b)
	tb.Exec(t, "CREATE ROLE "+name+" LOGIN IN ROLE "+group)
	t.Cleanup(func() {
		if _, err := tb.Pool().Exec(context.Background(), "DROP ROLE "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	return u.String()
}

// TestRelayRunsWithLeastPrivilege applies the shipped grants and runs a
// producer and the relay as roles that hold only them. The group roles the
// script creates are server-wide and shared, so they stay; the login roles
// and the table go.
func TestRelayRunsWithLeastPrivilege(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	table, err := schema.ParseTable(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A hardened database lets no role run a function unless granted.
	if _, err := tb.Pool().Exec(ctx, "REVOKE EXECUTE ON FUNCTION "+table.Object("event_id")+"() FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Pool().Exec(ctx, schema.RenderGrants(table), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("apply grants: %v", err)
	}

	// A producer writes events with INSERT alone.
	producer, err := pgx.Connect(ctx, loginAs(t, tb, pgtest.URL(), "outbox_producer"))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close(ctx)
	w, err := postgres.NewWriter(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, producer, func(tx pgx.Tx) error {
		msgs := make([]outbox.Message, 100)
		for i := range msgs {
			msgs[i] = outbox.Message{Type: "grants.event", Key: "k"}
		}
		return w.Write(ctx, postgres.PgxTx(tx), msgs...)
	})
	if err != nil {
		t.Fatalf("producer write: %v", err)
	}
	// So does one that leaves the id to the table's default.
	if _, err := producer.Exec(ctx, "INSERT INTO "+table.Quoted()+" (event_type, partition_key, payload) VALUES ('grants.event', 'k', '')"); err != nil {
		t.Fatalf("producer insert without an id: %v", err)
	}

	// The relay claims, settles, reaps and listens with SELECT and UPDATE.
	store, err := postgres.Open(ctx, loginAs(t, tb, tb.URL, "outbox_relay"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Check(ctx); err != nil {
		t.Fatalf("Check as outbox_relay: %v", err)
	}
	pub, err := publisher.Open(ctx, "null://")
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, relay.Config{PollInterval: time.Hour}, store, pub)
	listen(t, r, store)
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: 101})
	rp, err := reaper.New(reaper.Config{Interval: time.Hour, LeaseTimeout: time.Minute, BatchSize: 10, MaxAttempts: 3}, store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rp.RunOnce(ctx); err != nil {
		t.Fatalf("reap as outbox_relay: %v", err)
	}

	// And can do nothing more.
	for _, sql := range []string{
		"INSERT INTO " + tb.Name + " (event_type, payload) VALUES ('x', '')",
		"TRUNCATE " + tb.Name,
	} {
		db, _ := store.SQL()
		_, err := db.ExecContext(ctx, sql)
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s as outbox_relay: %v, want permission denied", sql, err)
		}
	}
}
