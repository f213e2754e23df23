package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// TestCorrectedRoleSettingsApplyAtTheNextAttempt: a setting a DBA gives the
// relay's role by mistake makes its claims fail; once the DBA resets it, the
// very next claim must run with the role's settings as they are now, not
// with those its pooled connection logged in with (which it would keep for
// the connection's lifetime). The pool holds one connection, so without a
// recycle the next claim would get the stale one.
func TestCorrectedRoleSettingsApplyAtTheNextAttempt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		setting, value, reset string
		// provoke makes a claim fail under the setting, and returns what
		// ends the provocation once the setting is reset (nil: nothing).
		provoke func(t *testing.T, tb *pgtest.Table) (end func())
		code    string
	}{
		{
			// Every UPDATE takes 300 ms, as on a struggling server; the
			// claim must go through once there is no timeout.
			setting: "statement_timeout", value: "100ms", reset: "0",
			provoke: func(t *testing.T, tb *pgtest.Table) func() {
				tb.SlowUpdates(t, 300*time.Millisecond)
				return nil
			},
			code: "57014",
		},
		{
			// A long lock (a migration by hand, say) that the claim's
			// UPDATE must wait for.
			setting: "lock_timeout", value: "100ms", reset: "0",
			provoke: func(t *testing.T, tb *pgtest.Table) func() {
				tx, err := tb.Store.Pool().Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "LOCK TABLE "+tb.Name+" IN SHARE MODE"); err != nil {
					t.Fatal(err)
				}
				return func() {
					if err := tx.Commit(ctx); err != nil {
						t.Fatal(err)
					}
				}
			},
			code: "55P03",
		},
		{
			setting: "default_transaction_read_only", value: "on", reset: "off",
			provoke: func(*testing.T, *pgtest.Table) func() { return nil },
			code:    "25006",
		},
	} {
		t.Run(c.setting, func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			role, roleURL := tb.Login(t, "SELECT, UPDATE")
			tb.Exec(t, "ALTER ROLE "+role+" SET "+c.setting+" = '"+c.value+"'")
			store, err := postgres.Open(ctx, roleURL+"&pool_max_conns=1")
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			id := tb.InsertN(t, 1, "session.event")[0]
			end := c.provoke(t, tb)

			_, err = store.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 10})
			if err == nil || !strings.Contains(err.Error(), "SQLSTATE "+c.code) {
				t.Fatalf("claim with %s = %s: %v, want SQLSTATE %s", c.setting, c.value, err, c.code)
			}

			tb.Exec(t, "ALTER ROLE "+role+" RESET "+c.setting)
			if end != nil {
				end()
			}
			var now string
			if err := store.Pool().QueryRow(ctx, "SHOW "+c.setting).Scan(&now); err != nil || now != c.reset {
				t.Errorf("after the reset the store's session has %s = %q (%v), want %q", c.setting, now, err, c.reset)
			}
			claimCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			b, err := store.Claim(claimCtx, storage.ClaimParams{RelayID: "r", Limit: 10})
			if err != nil || len(b.Events) != 1 || b.Events[0].ID != id {
				t.Fatalf("claim after the reset: %d events, %v; want the pending event", len(b.Events), err)
			}
		})
	}
}
