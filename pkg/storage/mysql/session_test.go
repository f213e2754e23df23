package mysql_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

// TestCorrectedAccountLimitsApplyAtTheNextAttempt: a statement time limit a
// DBA gives the relay's account by mistake makes its claims fail; once the
// DBA lifts it, the very next claim must run under the account's limits as
// they are now, not those its pooled connection logged in with (which it
// would keep until it sat idle long enough to be closed). The pool holds
// one connection, so without a recycle the next claim would get the stale
// one.
func TestCorrectedAccountLimitsApplyAtTheNextAttempt(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	userURL := tb.UserURL(t, "secret-pw")
	u, err := url.Parse(userURL)
	if err != nil {
		t.Fatal(err)
	}
	account := "'" + u.User.Username() + "'@'%'"
	admin := mysqltest.Admin(t)
	limit := func(seconds string) {
		t.Helper()
		if _, err := admin.ExecContext(ctx, "ALTER USER "+account+" WITH MAX_STATEMENT_TIME "+seconds); err != nil {
			t.Fatal(err)
		}
	}
	limit("0.1")
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	store, err := mysql.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	id := tb.InsertN(t, 1, "session.event")[0]
	// Every UPDATE takes 300 ms, as on a struggling server.
	tb.Exec(t, "CREATE TRIGGER slow_updates BEFORE UPDATE ON {{table}} FOR EACH ROW SET @slept = SLEEP(0.3)")

	_, err = store.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 10})
	if err == nil || !strings.Contains(err.Error(), "1969") {
		t.Fatalf("claim under a 100 ms statement limit = %v, want error 1969 (max_statement_time)", err)
	}
	limit("0")
	b, err := store.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 10})
	if err != nil {
		t.Fatalf("claim after the limit was lifted: %v; want the pool's connections to log in again", err)
	}
	if len(b.Events) != 1 || b.Events[0].ID != id {
		t.Errorf("claimed %v, want the one event %s", eventIDs(b.Events), id)
	}
}
