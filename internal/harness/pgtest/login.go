package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Login creates a login role of the test's own, holding privileges (such as
// "SELECT, UPDATE, DELETE") on the table and USAGE on its schema, and
// returns its name and a storage URL for the table that logs in as it.
// Tests give the role settings with ALTER ROLE … SET, as a DBA would. Roles
// are shared by every database of the server, so the name is unique; the
// role and its grants are dropped when the test ends.
func (tb *Table) Login(t testing.TB, privileges string) (role, storageURL string) {
	t.Helper()
	role = "login_" + randomHex(6)
	schemaName, _, _ := strings.Cut(tb.Name, ".")
	tb.Exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		// Not tb.Exec: a cleanup must not stop the others.
		for _, sql := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := tb.Pool().Exec(context.Background(), sql); err != nil {
				t.Errorf("pgtest: %s: %v", sql, err)
			}
		}
	})
	tb.Exec(t, "GRANT USAGE ON SCHEMA "+schemaName+" TO "+role)
	tb.Exec(t, "GRANT "+privileges+" ON {{table}} TO "+role)
	u, err := url.Parse(tb.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.User = url.User(role)
	return role, u.String()
}

// SlowUpdates makes every UPDATE statement on the table take at least d,
// as on a bloated table or a server that is short of I/O: a statement
// trigger sleeps. It lasts as long as the table.
func (tb *Table) SlowUpdates(t testing.TB, d time.Duration) {
	t.Helper()
	schemaName, _, _ := strings.Cut(tb.Name, ".")
	fn := schemaName + ".slow_updates"
	tb.Exec(t, "CREATE FUNCTION "+fn+"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep("+fmt.Sprint(d.Seconds())+"); RETURN NULL; END $$")
	tb.Exec(t, "CREATE TRIGGER slow_updates BEFORE UPDATE ON {{table}} FOR EACH STATEMENT EXECUTE FUNCTION "+fn+"()")
}
