package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
)

// Every command against every storage: the same operator session on
// PostgreSQL and on MySQL (MariaDB here), through the storagetest harnesses,
// so that each command's use of the storage boundary is checked once per
// driver. The PostgreSQL-only files beside this one go into each command's
// details.

// anyTable is a test table of some storage, as relay-cli reaches it.
type anyTable struct {
	storagetest.Table
	// server is --storage-url: the server and database, no table.
	server string
	// name is --table: the table, qualified with its schema or database.
	name string
	// sibling names a table that does not exist yet beside this one.
	sibling string
}

// storages are the databases relay-cli is tested against.
var storages = []struct {
	name string
	// index is one that migrate creates, as it reports it.
	index string
	new   func(t *testing.T) anyTable
}{
	{"PostgreSQL", "pending_seq_idx", func(t *testing.T) anyTable {
		tb := pgtest.New(t)
		schemaName, _, _ := strings.Cut(tb.Name, ".")
		return anyTable{pgtest.Conformance(tb), pgtest.URL(), tb.Name, schemaName + ".fresh_outbox"}
	}},
	// Every command works on a table partitioned by time as on a plain one.
	{"PostgreSQL partitioned", "pending_seq_idx", func(t *testing.T) anyTable {
		tb := pgtest.NewPartitioned(t, "day")
		schemaName, _, _ := strings.Cut(tb.Name, ".")
		return anyTable{pgtest.Conformance(tb), pgtest.URL(), tb.Name, schemaName + ".fresh_outbox"}
	}},
	{"MySQL", "state_seq_idx", func(t *testing.T) anyTable {
		tb := mysqltest.New(t)
		return anyTable{mysqltest.Conformance(tb), mysqltest.DatabaseURL(tb.Database), tb.Name, tb.Database + ".fresh_outbox"}
	}},
}

// eachStorage runs test once per storage, in parallel; index is one that
// migrate creates there.
func eachStorage(t *testing.T, test func(t *testing.T, tb anyTable, index string)) {
	for _, s := range storages {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			test(t, s.new(t), s.index)
		})
	}
}

func (tb anyTable) cli(t *testing.T, args ...string) result {
	t.Helper()
	return cmd{args: append(args, "--storage-url", tb.server, "--table", tb.name)}.run(t)
}

// insert writes events of one type, keyed when key is set.
func (tb anyTable) insert(t *testing.T, n int, eventType, key string) []uuid.UUID {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Type: eventType, Key: key, Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	c, err := outbox.Prepare(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	tb.Insert(t, c)
	return c.IDs
}

func (tb anyTable) row(t *testing.T, id uuid.UUID) (storage.Row, bool) {
	t.Helper()
	for _, r := range tb.Rows(t) {
		if r.ID == id {
			return r, true
		}
	}
	return storage.Row{}, false
}

// storageHasTable reports whether the named table exists, as the relay's check
// finds it.
func storageHasTable(t *testing.T, server, name string) bool {
	t.Helper()
	s, err := storage.Open(ctx, storage.URLWithTable(server, name))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Check(ctx)
	if err != nil && !errors.Is(err, storage.ErrTableMissing) {
		t.Fatal(err)
	}
	return err == nil
}

func TestMigrateOnEveryStorage(t *testing.T) {
	t.Parallel()
	eachStorage(t, func(t *testing.T, tb anyTable, index string) {
		fresh := anyTable{server: tb.server, name: tb.sibling}
		printed := ok(t, fresh.cli(t, "migrate", "--print"))
		if !strings.Contains(printed.stdout, "CREATE TABLE IF NOT EXISTS") || storageHasTable(t, tb.server, tb.sibling) {
			t.Fatalf("migrate --print printed no DDL or created the table:\n%s", printed)
		}
		first := ok(t, fresh.cli(t, "migrate"))
		for _, want := range []string{"created  table fresh_outbox", "created  index fresh_outbox_" + index,
			"table " + tb.sibling + " is ready", "0 already existed"} {
			if !strings.Contains(first.stdout, want) {
				t.Errorf("first migrate does not say %q:\n%s", want, first)
			}
		}
		if !storageHasTable(t, tb.server, tb.sibling) {
			t.Fatal("migrate did not create the table")
		}
		js := decode[struct {
			Created []string `json:"created"`
			Existed []string `json:"existed"`
		}](t, ok(t, fresh.cli(t, "migrate", "--json")))
		if js.Created == nil || len(js.Created) != 0 || len(js.Existed) < 7 {
			t.Errorf("second migrate --json = %+v, want nothing created and every object existing", js)
		}
	})
}

func TestGrantsOnEveryStorage(t *testing.T) {
	t.Parallel()
	eachStorage(t, func(t *testing.T, tb anyTable, _ string) {
		printed := ok(t, tb.cli(t, "grants", "--print"))
		if !strings.Contains(printed.stdout, "GRANT SELECT, UPDATE, DELETE ON ") || !strings.Contains(printed.stdout, "TO outbox_relay") {
			t.Fatalf("grants --print does not show the relay's grant:\n%s", printed.stdout)
		}
		r := ok(t, tb.cli(t, "grants"))
		if !strings.Contains(r.stdout, "outbox_relay") || !strings.Contains(r.stdout, tb.name) {
			t.Errorf("grants says nothing useful:\n%s", r)
		}
	})
}

// An operator's session: emit test events, find them with list and show,
// watch them in stats, bring a dead one back, prune what was delivered.
func TestOperatorSessionOnEveryStorage(t *testing.T) {
	t.Parallel()
	eachStorage(t, func(t *testing.T, tb anyTable, _ string) {
		// emit
		r := ok(t, tb.cli(t, "emit", "--type", "orders.paid", "--key", "order-42", "--count", "3",
			"--payload", `{"note": "grüße"}`, "--header", "content-type=application/json"))
		emitted := strings.Fields(r.stdout)
		if len(emitted) != 3 || !strings.Contains(r.stderr, "emitted 3 events of type orders.paid into "+tb.name) {
			t.Fatalf("emit:\n%s", r)
		}
		rows := tb.Rows(t)
		if len(rows) != 3 {
			t.Fatalf("%d rows after emit, want 3", len(rows))
		}
		for i, row := range rows {
			if row.ID.String() != emitted[i] || row.Type != "orders.paid" || row.PartitionKey == nil || *row.PartitionKey != "order-42" ||
				string(row.Payload) != `{"note": "grüße"}` || !strings.Contains(string(row.Headers), `"content-type"`) {
				t.Errorf("row %d = %+v, want what emit printed there and was given", i, row)
			}
		}
		ids := []uuid.UUID{rows[0].ID, rows[1].ID, rows[2].ID}
		other := tb.insert(t, 2, "users.created", "")

		// The first dies, the second was delivered 8 days ago, the third
		// is held by a relay; the other type waits.
		tb.Set(t, storagetest.Change{Status: outbox.StatusDead, Attempts: storagetest.Ptr(25),
			LastError: storagetest.Ptr("nats: no stream"), UpdatedAt: storagetest.Ago(time.Hour)}, ids[0])
		tb.Set(t, storagetest.Change{Status: outbox.StatusDelivered, DeliveredAt: storagetest.Ago(8 * 24 * time.Hour)}, ids[1])
		tb.Set(t, storagetest.Change{Status: outbox.StatusDelivering, LockedBy: storagetest.Ptr("relay-x"),
			LockedAt: storagetest.Ago(90 * time.Second)}, ids[2])
		tb.Set(t, storagetest.Change{CreatedAt: storagetest.Ago(10 * time.Minute)}, other[0])
		// Ages read later are those above plus the time this test has
		// taken since, which a loaded machine stretches.
		setAt := time.Now()
		aged := func(got, want float64) bool { return got >= want-1 && got <= want+1+time.Since(setAt).Seconds() }

		// list
		listed := decode[[]listJSON](t, ok(t, tb.cli(t, "list", "--json", "--status", "pending")))
		if len(listed) != 2 || listed[0].EventID != other[1] || listed[1].EventID != other[0] {
			t.Errorf("list --status pending = %+v, want the two users.created events newest first", listed)
		}
		text := ok(t, tb.cli(t, "list", "--event-type", "orders.paid")).stdout
		for _, want := range []string{"DEAD", "DELIVERED", "DELIVERING", "order-42", "nats: no stream"} {
			if !strings.Contains(text, want) {
				t.Errorf("list does not show %q:\n%s", want, text)
			}
		}

		// show
		shown := decode[showJSON](t, ok(t, tb.cli(t, "show", "--json", ids[0].String())))
		if shown.EventID != ids[0] || shown.Status != outbox.StatusDead || shown.Attempts != 25 || shown.Payload != `{"note": "grüße"}` ||
			shown.PayloadEncoding != "text" || shown.LastError == nil || *shown.LastError != "nats: no stream" || shown.Seq == nil {
			t.Errorf("show --json = %+v", shown)
		}
		if text := ok(t, tb.cli(t, "show", ids[2].String())).stdout; !strings.Contains(text, "locked_by      relay-x") ||
			!strings.Contains(text, "event_id       "+ids[2].String()) {
			t.Errorf("show:\n%s", text)
		}
		if r := tb.cli(t, "show", uuid.NewString()); r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("show of an unknown id, want exit 1:\n%s", r)
		}

		// stats
		st := decode[statsJSON](t, ok(t, tb.cli(t, "stats", "--json")))
		if st.Counts != (statusCounts{Pending: 2, Delivering: 1, Delivered: 1, Dead: 1}) || st.PendingNew != 2 ||
			st.OldestPendingAgeSec == nil || !aged(*st.OldestPendingAgeSec, 600) {
			t.Errorf("stats --json = %+v", st)
		}
		if len(st.Leases) != 1 || st.Leases[0].LockedBy != "relay-x" || !aged(st.Leases[0].OldestLeaseAgeSec, 90) ||
			len(st.TopEventTypes) != 1 || st.TopEventTypes[0].EventType != "users.created" {
			t.Errorf("stats --json leases %+v, types %+v", st.Leases, st.TopEventTypes)
		}
		if text := ok(t, tb.cli(t, "stats")).stdout; !strings.Contains(text, "relay-x") || !strings.Contains(text, "users.created") {
			t.Errorf("stats:\n%s", text)
		}

		// retry-dead
		before := tb.Rows(t)
		if r := ok(t, tb.cli(t, "retry-dead", "--error-contains", "NO STREAM", "--dry-run")); !strings.Contains(r.stdout, "would move 1 DEAD event back to PENDING") {
			t.Errorf("retry-dead --dry-run:\n%s", r)
		}
		if after := tb.Rows(t); string(mustJSON(t, after)) != string(mustJSON(t, before)) {
			t.Error("retry-dead --dry-run changed rows")
		}
		moved := decode[struct {
			Events int64 `json:"events"`
		}](t, ok(t, tb.cli(t, "retry-dead", "--id", ids[0].String(), "--json")))
		if row, _ := tb.row(t, ids[0]); moved.Events != 1 || row.Status != outbox.StatusPending || row.Attempts != 0 ||
			row.LastError == nil || *row.LastError != "before retry-dead (attempts: 25): nats: no stream" {
			t.Errorf("retry-dead --id = %+v; row %+v, want PENDING, 0 attempts, the error kept as from before the retry", moved, row)
		}

		// prune
		if r := ok(t, tb.cli(t, "prune", "--older-than", "7d", "--dry-run")); !strings.Contains(r.stdout, "would delete 1 DELIVERED row") {
			t.Errorf("prune --dry-run:\n%s", r)
		}
		if r := ok(t, tb.cli(t, "prune", "--older-than", "7d", "--status", "all")); !strings.Contains(r.stdout, "deleted 1 DELIVERED row") {
			t.Errorf("prune:\n%s", r)
		}
		var left []uuid.UUID
		for _, row := range tb.Rows(t) {
			left = append(left, row.ID)
		}
		if want := []uuid.UUID{ids[0], ids[2], other[0], other[1]}; !sameIDs(left, want) {
			t.Errorf("after prune %v remain, want %v", left, want)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameIDs(a, b []uuid.UUID) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y uuid.UUID) int { return strings.Compare(x.String(), y.String()) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}
