package mysqltest

import (
	"context"
	"database/sql"
	"net/url"
	"strconv"
	"testing"

	"github.com/outbox-relay/relay/internal/mycluster"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// NewAt makes its database, table and users on the server it is given.
func TestNewAtIsOnThatServer(t *testing.T) {
	t.Parallel()
	c := mycluster.Start(t, mycluster.Options{})
	admin := c.DB(t)

	var database string
	t.Run("table", func(t *testing.T) {
		tb := NewAt(t, c.URL(""))
		database = tb.Database
		u, err := url.Parse(tb.URL)
		if err != nil {
			t.Fatal(err)
		}
		if u.Port() != strconv.Itoa(c.Port()) {
			t.Errorf("table URL %s is not on the private server's port %d", tb.URL, c.Port())
		}
		tb.InsertN(t, 3, "test.at")
		if got := tb.Counts(t)[outbox.StatusPending]; got != 3 {
			t.Errorf("%d pending events, want 3", got)
		}
		var n int
		if err := admin.QueryRow("SELECT COUNT(*) FROM " + tb.Name).Scan(&n); err != nil {
			t.Fatalf("the table is not on the private server: %v", err)
		}
		if n != 3 {
			t.Errorf("%d rows on the private server, want 3", n)
		}

		// The user is made on the table's server: it logs in there.
		userURL := tb.UserURL(t, "secret")
		uu, err := url.Parse(userURL)
		if err != nil {
			t.Fatal(err)
		}
		dsn := uu.User.Username() + ":secret@tcp(127.0.0.1:" + strconv.Itoa(c.Port()) + ")/" + tb.Database
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.PingContext(context.Background()); err != nil {
			t.Errorf("the user UserURL made cannot log in to the private server: %v", err)
		}
	})

	// The subtest's cleanup dropped the database on that server.
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", database).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still on the private server after its test", database)
	}
}
