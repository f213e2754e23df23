package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// password is recognisable in any error text that leaks it.
const password = "Sup3rS3cretPW"

var ctx = context.Background()

func claim(t *testing.T, s *postgres.Store, relayID string, limit int) storage.Batch {
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

// ---- Claim ----------------------------------------------------------------

func TestClaimReadsARowWithAnInfiniteCreatedAt(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 40, "good")
	bad := tb.InsertN(t, 1, "bad")[0]
	tb.Exec(t, "UPDATE {{table}} SET created_at = 'infinity' WHERE event_id = $1", bad)

	b := claim(t, tb.Store, "r1", 100)
	if len(b.Events) != 41 {
		t.Fatalf("claimed %d events, want all 41", len(b.Events))
	}
	last := b.Events[40]
	if last.ID != bad || !last.CreatedAt.IsZero() {
		t.Errorf("last event = %s created %s, want %s with a zero CreatedAt", last.ID, last.CreatedAt, bad)
	}
	if !slices.Equal(eventIDs(b.Events[:40]), ids) {
		t.Errorf("the good events were not claimed oldest first")
	}
}

func TestAFailedClaimHandsItsRowsBack(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 10, "e")
	other := claim(t, tb.Store, "r1", 4)
	failed := claim(t, tb.Store, "r1", 6) // as if its rows could not be read
	cause := errors.New("connection reset while reading rows")

	err := tb.Store.HandBack(ctx, failed.Lease, cause)
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "6 rows were handed back") {
		t.Fatalf("HandBack = %v, want the cause and the count handed back", err)
	}
	for _, ev := range failed.Events {
		if r := tb.Get(t, ev.ID); r.Status != outbox.StatusPending || r.Attempts != 0 {
			t.Errorf("row %s is %s with %d attempts, want PENDING with none burned", ev.ID, r.Status, r.Attempts)
		}
	}
	for _, ev := range other.Events {
		if r := tb.Get(t, ev.ID); r.Status != outbox.StatusDelivering {
			t.Errorf("row %s of the relay's other lease is %s, want it left DELIVERING", ev.ID, r.Status)
		}
	}
}

// ---- Migrate ----------------------------------------------------------------

// open opens a store on table without migrating it.
func open(t *testing.T, table string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctx, storage.URLWithTable(pgtest.URL(), table))
	if err != nil {
		t.Fatalf("Open(%s): %v", table, err)
	}
	t.Cleanup(s.Close)
	return s
}

// openPrivate opens a store on table in a database of its own: for a test
// whose migrate builds indexes on a table that exists (CONCURRENTLY, which
// waits for every older transaction in its database, other tests' too).
func openPrivate(t *testing.T, table string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctx, storage.URLWithTable(pgtest.NewDatabase(t), table))
	if err != nil {
		t.Fatalf("Open(%s): %v", table, err)
	}
	t.Cleanup(s.Close)
	return s
}

func exec(t *testing.T, s *postgres.Store, sql string, args ...any) {
	t.Helper()
	if _, err := s.Pool().Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// openOutboxDDL is the Open Outbox table as its own migrations create it:
// no seq column, no trigger, no relay indexes.
const openOutboxDDL = `CREATE TABLE %s (
    event_id      UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    event_type    TEXT NOT NULL,
    partition_key TEXT,
    payload       BYTEA NOT NULL,
    headers       JSONB NOT NULL DEFAULT '{}',
    status        TEXT NOT NULL DEFAULT 'PENDING',
    attempts      INT NOT NULL DEFAULT 0,
    last_error    TEXT,
    available_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_by     TEXT,
    locked_at     TIMESTAMPTZ,
    delivered_at  TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT check_valid_status CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD'))
)`

func TestMigrateFreshSchema(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.NewSchema(t)+".outbox")

	first, err := s.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	want := []string{
		"table outbox", "column seq", "column writer_xid", "sequence outbox_seq", "function outbox_notify()", "trigger outbox_notify",
		"function outbox_writer()", "trigger outbox_writer", "trigger outbox_writer_update",
		"function outbox_event_id()", "default event_id",
		"index outbox_pkey", "index outbox_pending_seq_idx", "index outbox_frontier_idx", "index outbox_due_at_idx",
		"index outbox_key_seq_idx", "index outbox_key_writer_idx", "index outbox_key_dead_seq_idx", "index outbox_delivering_idx", "index outbox_late_idx", "index outbox_dead_idx",
		"index outbox_created_idx", "index outbox_key_written_idx",
	}
	if !sameStrings(first.Created, want) {
		t.Errorf("first Migrate created %q\nwant %q", first.Created, want)
	}
	if len(first.Existed) != 0 {
		t.Errorf("first Migrate found existing objects %q", first.Existed)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check after Migrate: %v", err)
	}
}

func TestMigrateUnqualifiedTableUsesSearchPath(t *testing.T) {
	t.Parallel()
	sch := pgtest.NewSchema(t)
	u, err := url.Parse(storage.URLWithTable(pgtest.URL(), "my_outbox"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", sch)
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)

	res, err := s.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Created, "table my_outbox") || !slices.Contains(res.Created, "index my_outbox_pending_seq_idx") {
		t.Errorf("Migrate created %q", res.Created)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'my_outbox'", sch).Scan(&n); err != nil || n != 1 {
		t.Fatalf("table in %s: %d, %v", sch, n, err)
	}
}

func TestMigrateAdoptsAnOpenOutboxTable(t *testing.T) {
	t.Parallel()
	table := "openoutbox_events"
	s := openPrivate(t, table)
	exec(t, s, fmt.Sprintf(openOutboxDDL, table))
	old := uuid.New()
	exec(t, s, "INSERT INTO "+table+" (event_id, event_type, payload) VALUES ($1, 'old.event', '\\x01')", old)
	history := uuid.New()
	exec(t, s, "INSERT INTO "+table+" (event_id, event_type, payload, status, delivered_at) VALUES ($1, 'done.event', '\\x00', 'DELIVERED', now())", history)

	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "seq") {
		t.Fatalf("Check before Migrate = %v, want it to name the missing seq column", err)
	}
	res, err := s.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	for _, obj := range []string{"column seq", "trigger openoutbox_events_notify", "index openoutbox_events_pending_seq_idx", "default event_id"} {
		if !slices.Contains(res.Created, obj) {
			t.Errorf("Migrate did not report creating %q: created %q", obj, res.Created)
		}
	}
	for _, obj := range []string{"table openoutbox_events", "index openoutbox_events_pkey"} {
		if !slices.Contains(res.Existed, obj) {
			t.Errorf("Migrate did not report %q as existing: existed %q", obj, res.Existed)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}

	// A producer that knows only the Open Outbox columns still inserts.
	newer := uuid.New()
	exec(t, s, "INSERT INTO "+table+" (event_id, event_type, partition_key, payload, headers) VALUES ($1, 'new.event', 'k', '\\x02', '{\"a\":\"b\"}')", newer)
	var oldSeq, newSeq, historySeq *int64
	if err := s.Pool().QueryRow(ctx, "SELECT (SELECT seq FROM "+table+" WHERE event_id = $1), (SELECT seq FROM "+table+" WHERE event_id = $2), (SELECT seq FROM "+table+" WHERE event_id = $3)",
		old, newer, history).Scan(&oldSeq, &newSeq, &historySeq); err != nil {
		t.Fatal(err)
	}
	// Unfinished rows are numbered once, so ordered claims can compare
	// seq; delivered history is left alone (no rewrite of the table).
	if oldSeq == nil {
		t.Error("the existing PENDING row got no seq")
	}
	if historySeq != nil {
		t.Errorf("the delivered row got seq %d; history must be left alone", *historySeq)
	}
	if newSeq == nil || (oldSeq != nil && *newSeq <= *oldSeq) {
		t.Errorf("a new row got seq %v, want one after the existing row's %v", newSeq, oldSeq)
	}

	b := claim(t, s, "relay-1", 10)
	if got := eventIDs(b.Events); !slices.Equal(got, []uuid.UUID{old, newer}) {
		t.Fatalf("claimed %v, want the existing row then the new one %v", got, []uuid.UUID{old, newer})
	}
	if b.Events[0].Type != "old.event" || string(b.Events[0].Payload) != "\x01" {
		t.Errorf("existing row came back as %+v", b.Events[0])
	}
}

func TestInsertNotifiesTheChannel(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	channel := tb.Name // the trigger notifies on the schema-qualified name
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `LISTEN "`+channel+`"`); err != nil {
		t.Fatal(err)
	}

	tb.InsertN(t, 3, "e")

	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no notification after an INSERT: %v", err)
	}
	if n.Channel != channel {
		t.Errorf("notification on %q, want %q", n.Channel, channel)
	}
}

func TestSchemaSQLIsWhatMigrateApplies(t *testing.T) {
	t.Parallel()
	s := open(t, "app.outbox")
	if got, want := s.SchemaSQL(), schema.Render(schema.Table{Schema: "app", Name: "outbox"}); got != want {
		t.Errorf("SchemaSQL() differs from schema.Render")
	}
}

// ---- Check ------------------------------------------------------------------

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"no_such_table", "no_such_schema_x1.outbox"} {
		t.Run("missing "+table, func(t *testing.T) {
			t.Parallel()
			s := open(t, table)
			err := s.Check(ctx)
			if !errors.Is(err, storage.ErrTableMissing) {
				t.Fatalf("Check = %v, want ErrTableMissing", err)
			}
			if !strings.Contains(err.Error(), "`relay-cli migrate`") || !strings.Contains(err.Error(), table) {
				t.Errorf("error %q does not name the table and `relay-cli migrate`", err)
			}
		})
	}
	t.Run("missing columns", func(t *testing.T) {
		t.Parallel()
		table := pgtest.NewSchema(t) + ".partial"
		s := open(t, table)
		exec(t, s, "CREATE TABLE "+table+" (event_id uuid PRIMARY KEY, event_type text, payload bytea, status text)")
		err := s.Check(ctx)
		if err == nil {
			t.Fatal("Check accepted a table without most columns")
		}
		if errors.Is(err, storage.ErrTableMissing) {
			t.Errorf("Check = %v; the table exists", err)
		}
		for _, col := range []string{"partition_key", "headers", "attempts", "locked_by", "updated_at", "seq"} {
			if !strings.Contains(err.Error(), col) {
				t.Errorf("error %q does not name missing column %s", err, col)
			}
		}
		for _, col := range []string{"event_id", "event_type", "payload"} {
			if strings.Contains(err.Error(), col) {
				t.Errorf("error %q names %s, which exists", err, col)
			}
		}
	})
}

func TestUnreachableDatabaseErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	s, err := postgres.Open(ctx, "postgres://relay:"+password+"@127.0.0.1:1/app?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatalf("Open must not connect: %v", err)
	}
	t.Cleanup(s.Close)

	errs := map[string]error{"Check": s.Check(ctx)}
	_, errs["Migrate"] = s.Migrate(ctx, storage.MigrateOptions{})
	_, errs["Claim"] = s.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 1})
	_, errs["Reap"] = s.Reap(ctx, storage.ReapParams{LeaseTimeout: time.Minute, Limit: 1, MaxAttempts: 1})
	for op, err := range errs {
		if err == nil {
			t.Errorf("%s on port 1 succeeded", op)
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("%s error leaks the password: %v", op, err)
		}
	}
	for _, op := range []string{"Check", "Migrate"} {
		msg := errs[op].Error()
		if !strings.Contains(msg, "cannot reach PostgreSQL") || !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, `"relay"`) {
			t.Errorf("%s error %q does not say which server could not be reached", op, msg)
		}
	}
}

func TestLoginFailuresNameTheLoginNotTheTable(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(u *url.URL)
		want string
	}{
		{"unknown user", func(u *url.URL) { u.User = url.UserPassword("no_such_role_x1", password) },
			`refused the login of user "no_such_role_x1"`},
		{"missing database", func(u *url.URL) { u.Path = "/no_such_database_x1" },
			`has no database "no_such_database_x1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := *base
			tt.edit(&u)
			s, err := postgres.Open(ctx, storage.URLWithTable(u.String(), "openoutbox_events"))
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

// ---- Open -------------------------------------------------------------------

func TestOpenRejectsInvalidTableNames(t *testing.T) {
	t.Parallel()
	for _, table := range []string{
		"x;drop table y",
		"Upper",
		strings.Repeat("a", 46),
		"a.b.c",
		`a"b`,
		"1abc",
		"app.",
	} {
		s, err := postgres.Open(ctx, storage.URLWithTable(pgtest.URL(), table))
		if err == nil {
			s.Close()
			t.Errorf("Open accepted table %q", table)
			continue
		}
		if !strings.Contains(err.Error(), "invalid table name") {
			t.Errorf("Open with table %q: %v, want an invalid table name error", table, err)
		}
	}
}

func TestOpenErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://relay:" + password + "@db:notaport/app",
		"postgres://relay:" + password + "@[::1/app",
		"postgres://relay:" + password + "@db/app?sslmode=bogus",
		"postgres://relay:" + password + "@db/app?pool_max_conns=many",
		"postgres://relay:" + password + "@db/app?connect_timeout=soon",
		"postgres://relay:Sup3r@S3cretPW@db:notaport/app",
		"postgres://relay@azure:Sup3rS3cretPW@db:notaport/app",
		"postgres://relay:" + url.QueryEscape("Sup3r S3cretPW") + "@db/app?sslmode=bogus",
		"postgres://db/app?password=" + password + "&sslmode=bogus",
	} {
		s, err := postgres.Open(ctx, raw)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if strings.Contains(err.Error(), "S3cretPW") {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
}

func TestOpenDefaults(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)

	s, err := postgres.Open(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Table(); got != schema.DefaultTable {
		t.Errorf("default table = %q, want %q", got, schema.DefaultTable)
	}
	if got := s.Pool().Config().MaxConns; got != postgres.PoolMaxConnsDefault {
		t.Errorf("pool size = %d, want %d", got, postgres.PoolMaxConnsDefault)
	}
	if got := s.Pool().Config().ConnConfig.ConnectTimeout; got != postgres.ConnectTimeoutDefault {
		t.Errorf("connect timeout = %s, want %s (a silent server must not hang a start)", got, postgres.ConnectTimeoutDefault)
	}
	// Settings a DBA gives the role reach new connections only.
	if cfg := s.Pool().Config(); cfg.MaxConnLifetime != postgres.PoolMaxConnLifetimeDefault ||
		cfg.MaxConnLifetimeJitter != postgres.PoolMaxConnLifetimeJitterDefault {
		t.Errorf("connection lifetime = %s + up to %s, want %s + up to %s", cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter,
			postgres.PoolMaxConnLifetimeDefault, postgres.PoolMaxConnLifetimeJitterDefault)
	}
	// The table parameter is the relay's, not a server setting: a
	// connection made with it works.
	var app string
	if err := tb.Store.Pool().QueryRow(ctx, "SHOW application_name").Scan(&app); err != nil {
		t.Fatal(err)
	}
	if app != "outbox-relay" {
		t.Errorf("application_name = %q, want outbox-relay", app)
	}

	custom, err := postgres.Open(ctx, pgtest.URL()+"&pool_max_conns=3&application_name=mine&connect_timeout=3&pool_max_conn_lifetime=1h")
	if err != nil {
		t.Fatal(err)
	}
	defer custom.Close()
	if got := custom.Pool().Config().MaxConns; got != 3 {
		t.Errorf("pool_max_conns=3 gave %d", got)
	}
	if got := custom.Pool().Config().ConnConfig.ConnectTimeout; got != 3*time.Second {
		t.Errorf("connect_timeout=3 gave %s", got)
	}
	if cfg := custom.Pool().Config(); cfg.MaxConnLifetime != time.Hour || cfg.MaxConnLifetimeJitter != 0 {
		t.Errorf("pool_max_conn_lifetime=1h gave %s + up to %s", cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter)
	}
	if err := custom.Pool().QueryRow(ctx, "SHOW application_name").Scan(&app); err != nil || app != "mine" {
		t.Errorf("application_name = %q, %v; want mine", app, err)
	}
}

func TestStorageOpenChoosesPostgres(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	for _, scheme := range []string{"postgres", "postgresql"} {
		raw := scheme + strings.TrimPrefix(tb.URL, "postgres")
		s, err := storage.Open(ctx, raw)
		if err != nil {
			t.Fatalf("storage.Open(%s): %v", scheme, err)
		}
		if _, ok := s.(*postgres.Store); !ok {
			t.Errorf("storage.Open(%s) = %T", scheme, s)
		}
		if err := s.Check(ctx); err != nil {
			t.Errorf("%s store Check: %v", scheme, err)
		}
		s.Close()
	}
	if _, err := storage.Open(ctx, "mysql://u:"+password+"@db/app"); err == nil || strings.Contains(err.Error(), password) || !strings.Contains(err.Error(), "postgres://") {
		t.Errorf("unknown scheme: %v, want an error listing postgres:// without the password", err)
	}
}

func TestURLWithTable(t *testing.T) {
	t.Parallel()
	tests := []struct{ raw, table, want string }{
		{"postgres://db/app", "app.outbox", "postgres://db/app?table=app.outbox"},
		{"postgres://db/app?sslmode=disable", "outbox", "postgres://db/app?sslmode=disable&table=outbox"},
		{"postgres://db/app?table=mine", "outbox", "postgres://db/app?table=mine"},
		{"postgres://db/app", "", "postgres://db/app"},
	}
	for _, tt := range tests {
		got := storage.URLWithTable(tt.raw, tt.table)
		gu, err1 := url.Parse(got)
		wu, err2 := url.Parse(tt.want)
		if err1 != nil || err2 != nil || gu.Host != wu.Host || gu.Path != wu.Path || !maps.EqualFunc(gu.Query(), wu.Query(), slices.Equal) {
			t.Errorf("URLWithTable(%q, %q) = %q, want %q", tt.raw, tt.table, got, tt.want)
		}
	}
}

func sameStrings[T ~string](a, b []T) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestListenHearsInsertsHoweverTheTableIsSpelt: a relay configured with the
// bare table name (found through search_path) and one with the
// schema-qualified name listen on the same channel.
func TestListenHearsInsertsHoweverTheTableIsSpelt(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	schemaName, table, _ := strings.Cut(tb.Name, ".")
	bare, err := postgres.Open(context.Background(), storage.URLWithTable(pgtest.URL()+"&search_path="+schemaName, table))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if err := bare.Check(context.Background()); err != nil {
		t.Fatalf("the bare name does not resolve through search_path: %v", err)
	}

	heard := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bare.Listen(ctx, func() { heard <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	}()
	select { // the announcement Listen makes once it listens
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Fatal("Listen never started")
	}
	tb.InsertN(t, 1, "spelt") // through the qualified name
	select {
	case <-heard:
	case err := <-done:
		t.Fatalf("Listen ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("an insert through the qualified name did not reach a listener using the bare name")
	}
}

// An INSERT that names no event_id gets a UUIDv7 of the database's clock:
// a new table's default, and an Open Outbox table's once migrated (it was
// gen_random_uuid()).
func TestMigrateGivesEventIDATimeOrderedDefault(t *testing.T) {
	t.Parallel()
	for _, adopted := range []bool{false, true} {
		table := "openoutbox_events"
		s := openPrivate(t, table)
		if adopted {
			exec(t, s, fmt.Sprintf(openOutboxDDL, table))
		}
		if _, err := s.Migrate(ctx, storage.MigrateOptions{}); err != nil {
			t.Fatal(err)
		}
		var before, after time.Time
		var id uuid.UUID
		if err := s.Pool().QueryRow(ctx, "SELECT clock_timestamp()").Scan(&before); err != nil {
			t.Fatal(err)
		}
		if err := s.Pool().QueryRow(ctx, "INSERT INTO "+table+" (event_type, payload) VALUES ('t', '') RETURNING event_id").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if err := s.Pool().QueryRow(ctx, "SELECT clock_timestamp()").Scan(&after); err != nil {
			t.Fatal(err)
		}
		if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("adopted %v: default id %s is version %d, variant %v; want a UUIDv7", adopted, id, id.Version(), id.Variant())
		}
		sec, nsec := id.Time().UnixTime()
		at := time.Unix(sec, nsec)
		if at.Before(before.Truncate(time.Millisecond)) || at.After(after) {
			t.Errorf("adopted %v: id %s says %s, want a moment within the insert (%s to %s)", adopted, id, at, before, after)
		}
	}
}

// A default the application gave event_id is its own: migrate keeps it and
// does not claim it.
func TestMigrateKeepsAnEventIDDefaultItDidNotSet(t *testing.T) {
	t.Parallel()
	table := "openoutbox_events"
	s := openPrivate(t, table)
	exec(t, s, strings.Replace(fmt.Sprintf(openOutboxDDL, table), "DEFAULT gen_random_uuid()", "DEFAULT md5(random()::text)::uuid", 1))
	res, err := s.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(res.Created, "default event_id") {
		t.Errorf("Migrate reported taking over event_id's default: %q", res.Created)
	}
	var def string
	if err := s.Pool().QueryRow(ctx, "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = $1::regclass AND adnum = 1", table).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "md5") {
		t.Errorf("event_id's default is now %s, want the application's", def)
	}
}

// TestMigrateOfAMigratedTableBlocksNoWriter: with nothing to create,
// migrate takes no table lock, so it neither waits behind a long
// transaction nor makes inserts queue behind it.
func TestMigrateOfAMigratedTableBlocksNoWriter(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	reader, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Rollback(ctx) }()
	// A long-running transaction that read the table holds a lock that
	// ALTER TABLE or CREATE INDEX would have to wait for.
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM "+tb.Name); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := tb.Store.Migrate(quick, storage.MigrateOptions{})
	if err != nil {
		t.Fatalf("migrating a migrated table waited behind a reader: %v", err)
	}
	if len(res.Created) != 0 {
		t.Fatalf("created %v on a migrated table", res.Created)
	}
}

// A Migrate or Check whose context was cancelled (Ctrl-C) says it was
// interrupted, not that the server cannot be reached, and does not send the
// operator to check that the server is running.
func TestCancelledContextIsAnInterruptionNotAnUnreachableServer(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	s, err := postgres.Open(ctx, storage.URLWithTable(u.String(), "openoutbox_events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	storagetest.RequireInterrupted(t, s, password)
}
