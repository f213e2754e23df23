package mysql_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
	schema "github.com/outbox-relay/relay/schema/mysql"
)

// What the conformance suite (TestStorage) cannot see: how the driver
// speaks to MySQL — its URL, errors, types, clock, locks and schema.

// password is recognisable in any error text that leaks it.
const password = "Sup3rS3cretPW"

var ctx = context.Background()

func claim(t *testing.T, s storage.Queue, relayID string, limit int) storage.Batch {
	t.Helper()
	b, err := s.Claim(ctx, storage.ClaimParams{RelayID: relayID, Limit: limit})
	if err != nil {
		t.Fatalf("Claim(%s, %d): %v", relayID, limit, err)
	}
	return b
}

func eventIDs(events []outbox.Event) []uuid.UUID {
	ids := make([]uuid.UUID, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

// ---- URL and errors -----------------------------------------------------------

func TestOpenDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	s, err := mysql.Open(ctx, "mysql://relay:"+password+"@db.example/app")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Table(); got != schema.DefaultTable {
		t.Errorf("default table = %q, want %q", got, schema.DefaultTable)
	}
	want := `MySQL at db.example:3306 database "app" as user "relay", table openoutbox_events`
	if got := s.Describe(); got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if got := s.DB().Stats().MaxOpenConnections; got != mysql.PoolMaxConnsDefault {
		t.Errorf("pool size = %d, want %d", got, mysql.PoolMaxConnsDefault)
	}

	s, err = mysql.Open(ctx, "mysql://relay@/app?table=other.outbox&pool_max_conns=3&socket=/run/mysqld/mysqld.sock&tls=false&readTimeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want = `MySQL at socket /run/mysqld/mysqld.sock database "other" as user "relay", table other.outbox`
	if got := s.Describe(); got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if got := s.DB().Stats().MaxOpenConnections; got != 3 {
		t.Errorf("pool_max_conns=3 gave %d", got)
	}

	// A CA file is read at Open, and the options are the driver's own.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, selfSignedPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = mysql.Open(ctx, "mysql://relay@db/app?tls_ca="+url.QueryEscape(ca))
	if err != nil {
		t.Fatalf("Open with tls_ca: %v", err)
	}
	s.Close()
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.Open(ctx, "mysql://relay@db/app?tls_ca="+url.QueryEscape(ca)); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("Open with a tls_ca that holds no certificate = %v", err)
	}
}

// selfSignedPEM is a CA certificate in PEM.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestOpenRejectsBadURLsWithoutThePassword(t *testing.T) {
	t.Parallel()
	tests := []struct{ raw, want string }{
		{"mysql://relay:" + password + "@db/app?table=Bad", "invalid table name"},
		{"mysql://relay:" + password + "@db/app?table=a.b.c", "invalid table name"},
		{"mysql://relay:" + password + "@db/", "names no database"},
		{"mysql://relay:" + password + "@db/app?pool_max_conns=many", "pool_max_conns must be a positive number"},
		{"mysql://relay:" + password + "@db/app?parseTime=false", "sets parseTime itself"},
		{"mysql://relay:" + password + "@db/app?loc=Local", "sets loc itself"},
		{"mysql://relay:" + password + "@db/app?multiStatements=true", "sets multiStatements itself"},
		{"mysql://relay:" + password + "@db/app?timeout=soon", "parse storage URL"},
		{"mysql://relay:" + password + "@db/app/more", "one database name"},
		{"mysql://relay:" + password + "@db:notaport/app", "malformed storage URL"},
		{"mysql://relay:" + password + "@db/app?tls_ca=/no/such/ca.pem", "tls_ca: open /no/such/ca.pem"},
		{"mysql://relay:" + password + "@db/app?tls_cert=/c.pem", "tls_cert and tls_key go together"},
		{"mysql://relay:" + password + "@db/app?tls_ca=/ca.pem&tls=skip-verify", "remove the tls option"},
	}
	for _, tt := range tests {
		s, err := mysql.Open(ctx, tt.raw)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", tt.raw)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), password) {
			t.Errorf("Open(%q) = %q, want it to say %q without the password", tt.raw, err, tt.want)
		}
	}
}

func TestStorageOpenChoosesMySQL(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	s, err := storage.Open(ctx, tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*mysql.Store); !ok {
		t.Fatalf("storage.Open(mysql://) = %T", s)
	}
	if _, ok := s.(storage.Notifier); ok {
		t.Error("the MySQL store claims to notify; relays on it must poll")
	}
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
	d, err := storage.Lookup(tb.URL)
	if err != nil || d.Name != "MySQL" || d.DefaultTable != "openoutbox_events" || d.CheckTable("a.b") != nil || d.CheckTable("A") == nil {
		t.Errorf("registered driver = %+v, %v", d, err)
	}
}

func TestUnreachableServerErrorsNameTheServerNotThePassword(t *testing.T) {
	t.Parallel()
	s, err := mysql.Open(ctx, "mysql://relay:"+password+"@127.0.0.1:1/app?timeout=5s")
	if err != nil {
		t.Fatalf("Open must not connect: %v", err)
	}
	t.Cleanup(s.Close)
	errs := map[string]error{"Check": s.Check(ctx)}
	_, errs["Migrate"] = s.Migrate(ctx, storage.MigrateOptions{})
	_, errs["Claim"] = s.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 1})
	_, errs["Backlog"] = s.Backlog(ctx)
	for op, err := range errs {
		if err == nil {
			t.Errorf("%s on port 1 succeeded", op)
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("%s error leaks the password: %v", op, err)
		}
	}
	for _, op := range []string{"Check", "Migrate", "Backlog"} {
		msg := errs[op].Error()
		if !errors.Is(errs[op], storage.ErrUnreachable) || !strings.Contains(msg, "cannot reach MySQL at 127.0.0.1:1") ||
			!strings.Contains(msg, `"relay"`) || !strings.Contains(msg, "STORAGE_URL") {
			t.Errorf("%s error %q does not say which server could not be reached", op, msg)
		}
	}
}

func TestLoginFailuresNameTheLoginNotTheTable(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(mysqltest.URL())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(u *url.URL)
		want string
	}{
		{"wrong password", func(u *url.URL) { u.User = url.UserPassword(u.User.Username(), password) },
			`refused the login of user "root"`},
		{"unknown user", func(u *url.URL) { u.User = url.UserPassword("no_such_user_x1", password) },
			`refused the login of user "no_such_user_x1"`},
		{"missing database", func(u *url.URL) { u.Path = "/no_such_database_x1" },
			`has no database "no_such_database_x1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := *base
			u.Path = "/mysql"
			tt.edit(&u)
			s, err := mysql.Open(ctx, storage.URLWithTable(u.String(), "openoutbox_events"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			err = s.Check(ctx)
			if !errors.Is(err, storage.ErrUnreachable) {
				t.Fatalf("Check = %v, want an error matching ErrUnreachable", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) || !strings.Contains(msg, "STORAGE_URL") {
				t.Errorf("Check = %q, want it to say %q and name STORAGE_URL", msg, tt.want)
			}
			if strings.Contains(msg, "openoutbox_events") || strings.Contains(msg, password) {
				t.Errorf("Check = %q: mentions the table or the password", msg)
			}
		})
	}
}

func TestCheckSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	database := mysqltest.NewDatabase(t)
	s, err := mysql.Open(ctx, storage.URLWithTable(mysqltest.DatabaseURL(database), "outbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(ctx); !errors.Is(err, storage.ErrTableMissing) || errors.Is(err, storage.ErrUnreachable) ||
		!strings.Contains(err.Error(), "relay-cli migrate") {
		t.Fatalf("Check of a missing table = %v", err)
	}
	if _, err := s.Backlog(ctx); !errors.Is(err, storage.ErrTableMissing) {
		t.Errorf("Backlog of a missing table = %v, want ErrTableMissing", err)
	}
	if _, err := s.DB().ExecContext(ctx, "CREATE TABLE outbox (event_id BINARY(16) PRIMARY KEY, event_type TEXT)"); err != nil {
		t.Fatal(err)
	}
	err = s.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "lacks column(s) partition_key, payload") || !strings.Contains(err.Error(), "seq") {
		t.Errorf("Check of a table without the contract's columns = %v", err)
	}
}

// ---- types and clock ----------------------------------------------------------

// Event ids are 16 bytes in the table and text everywhere a user sees them.
func TestEventIDsAreBinaryInTheTableAndTextOutside(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	id := uuid.MustParse("0190b7a2-1234-7abc-8def-0123456789ab")
	tb.Insert(t, mysqltest.Event{ID: id, Type: "t"})

	var hex string
	var length int
	if err := tb.Store.DB().QueryRowContext(ctx, "SELECT HEX(event_id), LENGTH(event_id) FROM "+tb.Name).Scan(&hex, &length); err != nil {
		t.Fatal(err)
	}
	if length != 16 || hex != strings.ToUpper(strings.ReplaceAll(id.String(), "-", "")) {
		t.Errorf("stored event_id = %s (%d bytes), want the UUID's 16 bytes", hex, length)
	}
	row, err := tb.Store.Get(ctx, id)
	if err != nil || row.ID != id {
		t.Fatalf("Get = %v, %v", row.ID, err)
	}
	if b := claim(t, tb.Store, "r", 1); len(b.Events) != 1 || b.Events[0].ID.String() != id.String() {
		t.Errorf("claimed %v, want %s", eventIDs(b.Events), id)
	}
	if _, err := tb.Store.Get(ctx, uuid.New()); !errors.Is(err, storage.ErrEventNotFound) {
		t.Errorf("Get of an unknown id = %v, want ErrEventNotFound", err)
	}
	// A producer's plain INSERT without an id gets one from the server.
	tb.Exec(t, "INSERT INTO {{table}} (event_type, payload) VALUES ('raw', 'x')")
	rows, err := tb.Store.List(ctx, storage.ListParams{EventType: "raw"})
	if err != nil || len(rows) != 1 || rows[0].ID == uuid.Nil {
		t.Errorf("a row inserted without an id: %+v, %v", rows, err)
	}
}

// Timestamps are UTC whatever the session's time zone, to the microsecond,
// and a producer's connection with its own time_zone and loc writes the
// same instants.
func TestTimestampsAreUTCWhateverTheSessionTimeZone(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	// A producer's own pool: go-sql-driver's defaults, a session time
	// zone far from UTC and times read in local time.
	dsn := "root@tcp(127.0.0.1:3306)/" + tb.Database + "?time_zone=%27%2B09%3A00%27&parseTime=true&loc=Asia%2FTokyo"
	if u, err := url.Parse(mysqltest.URL()); err == nil && u.Host != "127.0.0.1:3306" {
		t.Skip("the producer DSN assumes the local test server")
	}
	producer, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	w, err := mysql.NewWriter("openoutbox_events")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := w.Write(ctx, producer, outbox.Message{Type: "a"}, outbox.Message{Type: "b", AvailableAt: later}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	rows, err := tb.Store.List(ctx, storage.ListParams{})
	if err != nil || len(rows) != 2 {
		t.Fatalf("List = %d rows, %v", len(rows), err)
	}
	b, a := rows[0], rows[1]
	const slack = 2 * time.Second
	if a.CreatedAt.Before(before.Add(-slack)) || a.CreatedAt.After(after.Add(slack)) || a.CreatedAt.Location() != time.UTC {
		t.Errorf("created_at = %s, want about %s in UTC (not shifted by the session's +09:00)", a.CreatedAt, before.UTC())
	}
	if a.AvailableAt.After(after.Add(slack)) {
		t.Errorf("available_at of an event due now = %s, in the future", a.AvailableAt)
	}
	if !b.AvailableAt.Equal(later) {
		t.Errorf("available_at = %s, want %s to the microsecond", b.AvailableAt, later)
	}
	// The lease stamp comes back exactly as stored, so that settles
	// match it.
	batch := claim(t, tb.Store, "r", 1)
	row, err := tb.Store.Get(ctx, batch.Events[0].ID)
	if err != nil || row.LockedAt == nil || !row.LockedAt.Equal(batch.Lease.LockedAt) || batch.Lease.LockedAt.Nanosecond()%1000 != 0 {
		t.Fatalf("locked_at %v, lease %s: want equal, to the microsecond", row.LockedAt, batch.Lease.LockedAt)
	}
	if n, err := tb.Store.Settle(ctx, batch.Lease, storage.Outcome{Delivered: eventIDs(batch.Events)}); n.Delivered != 1 || err != nil {
		t.Errorf("Settle = %d, %v", n.Delivered, err)
	}
}

// A created_at MySQL accepts but no time.Time holds (a zero date, which a
// producer can write when sql_mode allows it) must not fail the claim.
func TestClaimReadsARowWithAZeroCreatedAt(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	ids := tb.InsertN(t, 3, "e")
	conn, err := tb.Store.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"SET SESSION sql_mode = ''",
		"UPDATE " + tb.Name + " SET created_at = '0000-00-00 00:00:00' WHERE event_id = ?",
		"SET SESSION sql_mode = DEFAULT",
	} {
		args := []any{}
		if strings.Contains(q, "?") {
			args = append(args, ids[1][:])
		}
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	b := claim(t, tb.Store, "r", 10)
	if fmt.Sprint(eventIDs(b.Events)) != fmt.Sprint(ids) || !b.Events[1].CreatedAt.IsZero() {
		t.Fatalf("claimed %v, want all three in write order %v, the zero date with a zero CreatedAt", eventIDs(b.Events), ids)
	}
	if n, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Delivered: ids}); n.Delivered != 3 || err != nil {
		t.Errorf("Settle = %d, %v", n.Delivered, err)
	}
	if _, err := tb.Store.List(ctx, storage.ListParams{}); err != nil {
		t.Errorf("List with a zero date: %v", err)
	}
}

// ---- locks --------------------------------------------------------------------

// A statement that InnoDB picks as a deadlock's victim runs again inside
// the driver: the settle succeeds, and nothing reaches the relay.
func TestADeadlockedSettleRunsAgain(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	ids := tb.InsertN(t, 2, "e")
	filler := tb.InsertN(t, 50, "filler")
	b := claim(t, tb.Store, "r", 2)
	first, second := ids[0], ids[1]
	if string(first[:]) > string(second[:]) {
		first, second = second, first
	}

	// The other transaction changes many rows, so that InnoDB rolls the
	// settle back rather than it, then holds the row the settle takes
	// second (the primary key's order).
	other, err := tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback() }()
	in := strings.TrimSuffix(strings.Repeat("?, ", len(filler)), ", ")
	args := make([]any, len(filler))
	for i, id := range filler {
		args[i] = id[:]
	}
	if _, err := other.ExecContext(ctx, "UPDATE "+tb.Name+" SET attempts = attempts + 1 WHERE event_id IN ("+in+")", args...); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(ctx, "SELECT 1 FROM "+tb.Name+" WHERE event_id = ? FOR UPDATE", second[:]); err != nil {
		t.Fatal(err)
	}

	settled := make(chan error, 1)
	var n storage.Settled
	go func() {
		var err error
		n, err = tb.Store.Settle(ctx, b.Lease, storage.Outcome{Delivered: ids})
		settled <- err
	}()
	// Wait until the settle holds the first row and waits for the second,
	// then close the cycle.
	waitForLockWait(t, tb)
	_, err = other.ExecContext(ctx, "SELECT 1 FROM "+tb.Name+" WHERE event_id = ? FOR UPDATE", first[:])
	var myErr *gomysql.MySQLError
	if err != nil && (!errors.As(err, &myErr) || myErr.Number != 1213) {
		t.Fatal(err)
	}
	if err == nil {
		// InnoDB chose the settle as the victim: it must run again once
		// the other transaction ends.
		if err := other.Commit(); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("InnoDB rolled the other transaction back instead; the settle did not need to run again")
	}
	if err := <-settled; err != nil || n.Delivered != 2 {
		t.Fatalf("Settle after a deadlock = %d, %v; want 2 and no error", n.Delivered, err)
	}
}

// waitForLockWait waits until a statement on the server waits for a row
// lock. InnoDB refreshes information_schema.innodb_trx only after 100 ms
// without a read, so it is read less often than that.
func waitForLockWait(t *testing.T, tb *mysqltest.Table) {
	t.Helper()
	var last time.Time
	eventually.True(t, 10*time.Second, func() bool {
		if time.Since(last) < 150*time.Millisecond {
			return false
		}
		last = time.Now()
		var waiting int
		err := tb.Store.DB().QueryRowContext(ctx,
			"SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'").Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	}, func() string { return "a statement waiting for a row lock" })
}

// Many claimers on two pools, at READ COMMITTED, claim and settle a backlog
// without an error reaching them and without sharing a row.
func TestConcurrentClaimersNeitherFailNorShare(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	const n = 3000
	for range n / 1000 {
		tb.InsertN(t, 1000, "e")
	}
	second, err := mysql.Open(ctx, tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	var (
		mu   sync.Mutex
		seen = map[uuid.UUID]string{}
		wg   sync.WaitGroup
		errs = make(chan error, 8)
	)
	for w := range 8 {
		store := tb.Store
		if w%2 == 1 {
			store = second
		}
		relayID := fmt.Sprintf("relay-%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := store.Claim(ctx, storage.ClaimParams{RelayID: relayID, Limit: 50})
				if err != nil {
					errs <- fmt.Errorf("%s: claim: %w", relayID, err)
					return
				}
				if len(b.Events) == 0 {
					return
				}
				mu.Lock()
				for _, e := range b.Events {
					if other, dup := seen[e.ID]; dup {
						mu.Unlock()
						errs <- fmt.Errorf("%s and %s both claimed %s", other, relayID, e.ID)
						return
					}
					seen[e.ID] = relayID
				}
				mu.Unlock()
				if m, err := store.Settle(ctx, b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil || m.Delivered != len(b.Events) {
					errs <- fmt.Errorf("%s: mark delivered = %d, %v", relayID, m.Delivered, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != n || tb.Counts(t)[outbox.StatusDelivered] != n {
		t.Errorf("claimed %d, delivered %v; want %d each", len(seen), tb.Counts(t), n)
	}
}

// The claim hands back the rows of a claim that failed after its UPDATE
// may have committed.
func TestAFailedClaimHandsItsRowsBack(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	ids := tb.InsertN(t, 3, "e")
	b := claim(t, tb.Store, "r", 3)
	err := tb.Store.HandBack(ctx, b.Lease, errors.New("claim batch: connection lost"))
	if err == nil || !strings.Contains(err.Error(), "connection lost") || !strings.Contains(err.Error(), "3 rows were handed back") {
		t.Fatalf("HandBack = %v", err)
	}
	if again := claim(t, tb.Store, "r", 3); len(again.Events) != 3 {
		t.Fatalf("after the hand-back a claim took %v, want %v", eventIDs(again.Events), ids)
	}
	for _, e := range b.Events {
		if e.Attempts != 0 {
			t.Errorf("event %s came back with %d attempts; handing back burns none", e.ID, e.Attempts)
		}
	}
}

// ---- producer helper -----------------------------------------------------------

func TestWriteInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	w, err := mysql.NewWriter(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, tx, outbox.Message{Type: "gone"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if c := tb.Counts(t); len(c) != 0 {
		t.Fatalf("a rolled-back write left %v", c)
	}

	// More events than one statement takes: several statements, in order,
	// in one transaction.
	n := mysql.WriteChunkEvents + 10
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Type: "many", Key: "k", Payload: []byte(fmt.Sprint(i))}
	}
	tx, err = tb.Store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Store.DB().QueryContext(ctx, "SELECT payload FROM "+tb.Name+" ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		if p != fmt.Sprint(i) {
			t.Fatalf("row %d by seq holds payload %s: insertion order lost", i, p)
		}
		i++
	}
	if i != n {
		t.Fatalf("%d rows, want %d", i, n)
	}
}

func TestWriteToTheDefaultTable(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	conn, err := tb.Store.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := mysql.Write(ctx, conn, outbox.Message{Type: "default", Key: "k", Headers: map[string]string{"h": "v"}}); err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Store.List(ctx, storage.ListParams{})
	if err != nil || len(rows) != 1 || rows[0].Type != "default" || rows[0].ID.Version() != 7 || *rows[0].PartitionKey != "k" {
		t.Fatalf("List = %+v, %v", rows, err)
	}
	if err := mysql.Write(ctx, conn, outbox.Message{}); err == nil || !strings.Contains(err.Error(), "no Type") {
		t.Errorf("Write without a type = %v", err)
	}
}

// ---- schema ---------------------------------------------------------------------

func TestMigrateTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	res, err := tb.Store.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 || len(res.Existed) != 12 {
		t.Errorf("second Migrate = %+v, want nothing created and the table, seq, state_at and its expression, the primary key, 5 indexes and the log lock's table and row existing", res)
	}
}

func TestMigrateReportsWhatItCreated(t *testing.T) {
	t.Parallel()
	database := mysqltest.NewDatabase(t)
	s, err := mysql.Open(ctx, storage.URLWithTable(mysqltest.DatabaseURL(database), "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"column seq", "column state_at", "expression state_at", "index PRIMARY", "index events_created_idx",
		"index events_key_order_seq_idx", "index events_key_written_idx", "index events_seq_idx", "index events_state_seq_idx",
		"row events_log_lock", "table events", "table events_log_lock"}
	if fmt.Sprint(res.Created) != fmt.Sprint(want) || len(res.Existed) != 0 {
		t.Errorf("Migrate = %+v, want created %v", res, want)
	}
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
}

// An outbox table made elsewhere, with the contract's columns and nothing
// else, ends up as a table migrate made, its rows kept and numbered.
func TestMigrateCompletesAnOpenOutboxTable(t *testing.T) {
	t.Parallel()
	database := mysqltest.NewDatabase(t)
	fresh := mysqltest.NewDatabase(t)
	db := mysqltest.Admin(t)
	// The contract's columns, in MySQL's types, and nothing else.
	_, err := db.ExecContext(ctx, "CREATE TABLE `"+database+"`.openoutbox_events ("+`
		event_id      BINARY(16) NOT NULL DEFAULT (UNHEX(REPLACE(UUID(), '-', ''))),
		event_type    VARCHAR(255) NOT NULL,
		partition_key VARBINARY(1024) NULL,
		payload       LONGBLOB NOT NULL,
		headers       JSON NOT NULL DEFAULT ('{}'),
		status        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'PENDING',
		attempts      INT NOT NULL DEFAULT 0,
		last_error    TEXT NULL,
		available_at  DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
		locked_by     VARCHAR(255) NULL,
		locked_at     DATETIME(6) NULL,
		delivered_at  DATETIME(6) NULL,
		created_at    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
		updated_at    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
		PRIMARY KEY (event_id),
		CONSTRAINT openoutbox_events_valid_status CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD'))
	) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`)
	if err != nil {
		t.Fatalf("create an Open Outbox table: %v", err)
	}
	ids := make([]uuid.UUID, 3)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		if _, err := db.ExecContext(ctx, "INSERT INTO `"+database+"`.openoutbox_events (event_id, event_type, payload) VALUES (?, 'old', 'x')", ids[i][:]); err != nil {
			t.Fatal(err)
		}
	}

	old, err := mysql.Open(ctx, storage.URLWithTable(mysqltest.DatabaseURL(database), "openoutbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Check(ctx); err == nil || !strings.Contains(err.Error(), "seq") {
		t.Fatalf("Check before migrate = %v, want it to ask for seq", err)
	}
	// Adding seq rebuilds the table: refused unless asked for, with the
	// way to run it, and nothing changed.
	if _, err := old.Migrate(ctx, storage.MigrateOptions{}); err == nil || !strings.Contains(err.Error(), "--allow-blocking") ||
		!strings.Contains(err.Error(), "column seq") {
		t.Fatalf("Migrate without AllowBlocking = %v, want a refusal that names the column and --allow-blocking", err)
	}
	if err := old.Check(ctx); err == nil || !strings.Contains(err.Error(), "seq") {
		t.Fatalf("Check after a refused migrate = %v, want it to still ask for seq", err)
	}
	res, err := old.Migrate(ctx, storage.MigrateOptions{AllowBlocking: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 10 || fmt.Sprint(res.Existed) != "[index PRIMARY table openoutbox_events]" {
		t.Errorf("Migrate = %+v, want seq, state_at (with its expression), 5 indexes and the log lock's table and row created", res)
	}
	newer, err := mysql.Open(ctx, storage.URLWithTable(mysqltest.DatabaseURL(fresh), "openoutbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	if _, err := newer.Migrate(ctx, storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := showCreate(t, db, database), showCreate(t, db, fresh); got != want {
		t.Errorf("upgraded table:\n%s\nwant it as migrate makes it:\n%s", got, want)
	}
	b := claim(t, old, "r", 10)
	if fmt.Sprint(eventIDs(b.Events)) != fmt.Sprint(ids) {
		t.Errorf("claimed %v, want the old rows in their order %v", eventIDs(b.Events), ids)
	}
}

// A table that the previous release migrated: state_at with a PENDING
// row's moment its available_at alone, and the indexes ordered by
// created_at first (state_idx, key_order_idx).
const previousReleaseTable = `CREATE TABLE openoutbox_events (
    event_id      BINARY(16) NOT NULL DEFAULT (UNHEX(REPLACE(UUID(), '-', ''))),
    event_type    VARCHAR(255) NOT NULL,
    partition_key VARBINARY(1024) NULL,
    payload       LONGBLOB NOT NULL,
    headers       JSON NOT NULL DEFAULT ('{}'),
    status        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'PENDING',
    attempts      INT NOT NULL DEFAULT 0,
    last_error    TEXT NULL,
    available_at  DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    locked_by     VARCHAR(255) NULL,
    locked_at     DATETIME(6) NULL,
    delivered_at  DATETIME(6) NULL,
    created_at    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    seq           BIGINT NOT NULL AUTO_INCREMENT,
    state_at      DATETIME(6) AS (CASE status WHEN 'PENDING' THEN available_at WHEN 'DELIVERING' THEN locked_at
                      WHEN 'DELIVERED' THEN delivered_at ELSE updated_at END) STORED,
    PRIMARY KEY (event_id),
    UNIQUE KEY openoutbox_events_seq_idx (seq),
    KEY openoutbox_events_state_idx (status, state_at, created_at, seq, attempts),
    KEY openoutbox_events_key_order_idx (status, partition_key, created_at, seq),
    KEY openoutbox_events_created_idx (created_at, seq),
    KEY openoutbox_events_key_idx (partition_key, created_at, seq),
    CONSTRAINT openoutbox_events_valid_status CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`

// The previous release's table: Check asks for migrate, which changes
// state_at's expression (a rebuild, so only with AllowBlocking) and adds
// the two indexes this release claims through, keeping the rows and
// leaving the old indexes to relays of the old release; once migrate
// --cleanup has dropped those, the table is the one migrate makes.
func TestMigrateUpgradesAPreviousReleasesTable(t *testing.T) {
	t.Parallel()
	database := mysqltest.NewDatabase(t)
	fresh := mysqltest.NewDatabase(t)
	db := mysqltest.Admin(t)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"USE `" + database + "`", previousReleaseTable} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// A row handed back by the old release: due long ago, updated now.
	old := uuid.Must(uuid.NewV7())
	if _, err := conn.ExecContext(ctx, "INSERT INTO openoutbox_events (event_id, event_type, payload, available_at) VALUES (?, 'old', 'x', UTC_TIMESTAMP(6) - INTERVAL 1 DAY)", old[:]); err != nil {
		t.Fatal(err)
	}

	s, err := mysql.Open(ctx, storage.URLWithTable(mysqltest.DatabaseURL(database), "openoutbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "openoutbox_events_state_seq_idx") || !strings.Contains(err.Error(), "relay-cli migrate") {
		t.Fatalf("Check of the previous release's table = %v, want it to ask for migrate", err)
	}
	res, err := s.Migrate(ctx, storage.MigrateOptions{AllowBlocking: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[expression state_at index openoutbox_events_key_order_seq_idx index openoutbox_events_key_written_idx index openoutbox_events_state_seq_idx" +
		" row openoutbox_events_log_lock table openoutbox_events_log_lock]"; fmt.Sprint(res.Created) != want ||
		!slices.Contains(res.Existed, "index openoutbox_events_state_idx") {
		t.Errorf("Migrate = %+v, want created %s and the old indexes kept", res, want)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check after migrate: %v", err)
	}
	var stateAt, updatedAt time.Time
	if err := s.DB().QueryRowContext(ctx, "SELECT state_at, updated_at FROM openoutbox_events WHERE event_id = ?", old[:]).Scan(&stateAt, &updatedAt); err != nil || !stateAt.Equal(updatedAt) {
		t.Errorf("state_at of the PENDING row = %s, %v; want its updated_at %s", stateAt, err, updatedAt)
	}
	if b := claim(t, s, "r", 10); len(b.Events) != 1 || b.Events[0].ID != old {
		t.Errorf("claimed %v after the upgrade, want %s", eventIDs(b.Events), old)
	}

	if want := "[index openoutbox_events_state_idx index openoutbox_events_key_order_idx index openoutbox_events_key_idx]"; fmt.Sprint(res.Kept) != want {
		t.Errorf("Migrate kept %v, want %s for the old release's relays", res.Kept, want)
	}

	// Once no relay of the old release is left: migrate --cleanup.
	cleaned, err := s.Migrate(ctx, storage.MigrateOptions{Cleanup: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[index openoutbox_events_key_idx index openoutbox_events_key_order_idx index openoutbox_events_state_idx]"; fmt.Sprint(cleaned.Dropped) != want || len(cleaned.Kept) != 0 {
		t.Errorf("migrate --cleanup dropped %v and kept %v, want %s dropped", cleaned.Dropped, cleaned.Kept, want)
	}
	newer, err := mysql.Open(ctx, storage.URLWithTable(mysqltest.DatabaseURL(fresh), "openoutbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	if _, err := newer.Migrate(ctx, storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Indexes added later are listed later.
	if got, want := keysSorted(showCreate(t, db, database)), keysSorted(showCreate(t, db, fresh)); got != want {
		t.Errorf("upgraded table:\n%s\nwant it as migrate makes it:\n%s", got, want)
	}
}

// keysSorted puts the KEY lines of a CREATE TABLE in order.
func keysSorted(ddl string) string {
	lines := strings.Split(ddl, "\n")
	var keys []int
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "KEY ") {
			keys = append(keys, i)
		}
	}
	sorted := make([]string, len(keys))
	for i, k := range keys {
		sorted[i] = lines[k]
	}
	slices.Sort(sorted)
	for i, k := range keys {
		lines[k] = sorted[i]
	}
	return strings.Join(lines, "\n")
}

func showCreate(t *testing.T, db *sql.DB, database string) string {
	t.Helper()
	var name, ddl string
	if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE `"+database+"`.openoutbox_events").Scan(&name, &ddl); err != nil {
		t.Fatal(err)
	}
	// The next AUTO_INCREMENT value differs with the rows.
	if i := strings.Index(ddl, " AUTO_INCREMENT="); i >= 0 {
		j := strings.IndexByte(ddl[i+1:], ' ')
		if j < 0 {
			ddl = ddl[:i]
		} else {
			ddl = ddl[:i] + ddl[i+1+j:]
		}
	}
	return ddl
}

func TestConcurrentMigrationsAllSucceed(t *testing.T) {
	t.Parallel()
	database := mysqltest.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := mysql.Open(ctx, storage.URLWithTable(mysqltest.DatabaseURL(database), "openoutbox_events"))
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			if _, err := s.Migrate(ctx, storage.MigrateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The grants give each role what it needs and nothing more; run as users
// holding them, a producer writes and a relay claims and settles.
func TestGrantsGiveEachRoleItsRights(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	if err := tb.Store.ApplyGrants(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tb.Store.ApplyGrants(ctx); err != nil {
		t.Fatalf("grants a second time: %v", err)
	}
	producer := loginAs(t, tb, "outbox_producer")
	relay := loginAs(t, tb, "outbox_relay")
	admin := loginAs(t, tb, "outbox_admin")

	if err := relay.Check(ctx); err != nil {
		t.Fatalf("the relay's Check: %v", err)
	}
	if _, err := producer.Emit(ctx, storage.EmitParams{Type: "g", Count: 7}); err != nil {
		t.Fatalf("the producer's insert: %v", err)
	}
	if _, err := producer.Claim(ctx, storage.ClaimParams{RelayID: "p", Limit: 1}); err == nil {
		t.Error("the producer could claim (SELECT, UPDATE)")
	}
	b := claim(t, relay, "relay", 7)
	ids := eventIDs(b.Events)
	if n, err := relay.Settle(ctx, b.Lease, storage.Outcome{Delivered: ids[:5]}); n.Delivered != 5 || err != nil {
		t.Fatalf("the relay's settle = %d, %v", n.Delivered, err)
	}
	// DELIVERED_RETENTION=0 and the retention loop delete.
	if n, err := relay.Settle(ctx, b.Lease, storage.Outcome{Delivered: ids[5:], Delete: true}); n.Delivered != 2 || err != nil {
		t.Fatalf("the relay's delete on delivery = %d, %v", n.Delivered, err)
	}
	if _, err := relay.Prune(ctx, storage.PruneParams{Status: outbox.StatusDead}); err != nil {
		t.Errorf("the relay's retention (DELETE): %v", err)
	}
	if _, err := relay.Claim(ctx, storage.ClaimParams{RelayID: "relay", Limit: 1, Ordering: storage.OrderingPartition}); err != nil {
		t.Errorf("the relay's ordered claim (GET_LOCK): %v", err)
	}
	if _, err := relay.Emit(ctx, storage.EmitParams{Type: "g", Count: 1}); err == nil {
		t.Error("the relay could insert")
	}
	// CAPTURE=binlog: the log lock, the claims' shared try of it, the
	// counter and a locking read of the table.
	if unlock, err := relay.LockLog(ctx); err != nil {
		t.Errorf("the relay's LockLog: %v", err)
	} else {
		unlock()
	}
	for _, ordering := range []storage.Ordering{storage.OrderingNone, storage.OrderingPartition} {
		if _, err := relay.Claim(ctx, storage.ClaimParams{RelayID: "relay", Limit: 1, Ordering: ordering,
			Fresh: storage.FreshEvents{ToLog: true, WhenUnlocked: true}}); err != nil {
			t.Errorf("the relay's %s claim beside a log reader: %v", ordering, err)
		}
	}
	if last, err := relay.LastSeq(ctx); err != nil || last < 7 {
		t.Errorf("the relay's LastSeq = %d, %v", last, err)
	}
	if v, err := relay.Visible(ctx, []string{"1"}); err != nil || !v {
		t.Errorf("the relay's Visible = %v, %v", v, err)
	}
	if res, err := admin.Prune(ctx, storage.PruneParams{Status: outbox.StatusDelivered}); err != nil || res.Deleted != 5 {
		t.Errorf("the admin's prune = %+v, %v", res, err)
	}
}

// loginAs creates a user holding role (as its default role) and opens the
// table as that user; the user is dropped when the test ends.
func loginAs(t *testing.T, tb *mysqltest.Table, role string) *mysql.Store {
	t.Helper()
	db := mysqltest.Admin(t)
	user := role + "_" + uuid.NewString()[:8]
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'",
		"GRANT " + role + " TO '" + user + "'@'%'",
		"SET DEFAULT ROLE " + role + " FOR '" + user + "'@'%'",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "DROP USER '"+user+"'@'%'"); err != nil {
			t.Errorf("drop user %s: %v", user, err)
		}
	})
	u, err := url.Parse(tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	s, err := mysql.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A Migrate or Check whose context was cancelled (Ctrl-C) says it was
// interrupted, not that the server cannot be reached.
func TestCancelledContextIsAnInterruptionNotAnUnreachableServer(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(mysqltest.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	u.Path = "/mysql"
	s, err := mysql.Open(ctx, storage.URLWithTable(u.String(), "openoutbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	storagetest.RequireInterrupted(t, s, password)
}
