package postgres_test

import (
	"os"
	"strings"
	"testing"

	schema "github.com/outbox-relay/relay/schema/postgres"
)

func TestParseTableAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want schema.Table
	}{
		{"openoutbox_events", schema.Table{Name: "openoutbox_events"}},
		{"events", schema.Table{Name: "events"}},
		{"_events", schema.Table{Name: "_events"}},
		{"events2", schema.Table{Name: "events2"}},
		{"e", schema.Table{Name: "e"}},
		{"app.outbox", schema.Table{Schema: "app", Name: "outbox"}},
		{"app_1.outbox_v2", schema.Table{Schema: "app_1", Name: "outbox_v2"}},
		{strings.Repeat("a", 45), schema.Table{Name: strings.Repeat("a", 45)}},
		{"s." + strings.Repeat("b", 45), schema.Table{Schema: "s", Name: strings.Repeat("b", 45)}},
		// Long enough that "<schema>.<table>" exceeds PostgreSQL's 63-byte
		// channel names: the trigger cuts the channel to fit.
		{strings.Repeat("s", 30) + "." + strings.Repeat("t", 40), schema.Table{Schema: strings.Repeat("s", 30), Name: strings.Repeat("t", 40)}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := schema.ParseTable(tt.in)
			if err != nil {
				t.Fatalf("ParseTable(%q) = %v, want ok", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseTable(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			if got.String() != tt.in {
				t.Errorf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestParseTableRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"only dot", "."},
		{"empty schema", ".events"},
		{"empty table", "app."},
		{"uppercase", "Events"},
		{"uppercase schema", "App.events"},
		{"double quote", `"events"`},
		{"quote injection", `events"; drop table x; --`},
		{"single quote", "ev'ents"},
		{"semicolon", "x;drop table y"},
		{"space", "my events"},
		{"trailing space", "events "},
		{"hyphen", "my-events"},
		{"three parts", "db.app.events"},
		{"leading digit", "1events"},
		{"leading digit schema", "1app.events"},
		{"too long table", strings.Repeat("a", 46)},
		{"too long schema", strings.Repeat("a", 46) + ".events"},
		{"non-ascii", "événements"},
		{"newline", "events\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schema.ParseTable(tt.in)
			if err == nil {
				t.Fatalf("ParseTable(%q) = %#v, want an error", tt.in, got)
			}
			if !strings.Contains(err.Error(), "invalid table name") {
				t.Errorf("error %q does not say the table name is invalid", err)
			}
		})
	}
}

func TestTableNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in                        string
		quoted, object            string
		wantInRender, notInRender []string
	}{
		{
			in:     "openoutbox_events",
			quoted: `"openoutbox_events"`,
			object: `"openoutbox_events_notify"`,
			wantInRender: []string{
				`CREATE TABLE IF NOT EXISTS "openoutbox_events" (`,
				`CREATE SEQUENCE IF NOT EXISTS "openoutbox_events_seq"`,
				`nextval('"openoutbox_events_seq"')`,
				`CREATE INDEX CONCURRENTLY IF NOT EXISTS "openoutbox_events_pending_seq_idx" ON "openoutbox_events" (seq) WHERE status = 'PENDING';`,
				`CREATE OR REPLACE FUNCTION "openoutbox_events_notify"()`,
				`pg_notify(left(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, 63), '')`,
				`EXECUTE FUNCTION "openoutbox_events_notify"()`,
			},
		},
		{
			in:     "app.outbox",
			quoted: `"app"."outbox"`,
			object: `"app"."outbox_notify"`,
			wantInRender: []string{
				`CREATE TABLE IF NOT EXISTS "app"."outbox" (`,
				`CREATE SEQUENCE IF NOT EXISTS "app"."outbox_seq"`,
				`nextval('"app"."outbox_seq"')`,
				`CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_pending_seq_idx" ON "app"."outbox" (seq) WHERE status = 'PENDING';`,
				`CREATE OR REPLACE FUNCTION "app"."outbox_notify"()`,
				`EXECUTE FUNCTION "app"."outbox_notify"()`,
				`'"app"."outbox"'::regclass`,
			},
			// The table must never be created unqualified when a schema
			// was named.
			notInRender: []string{`CREATE TABLE IF NOT EXISTS "outbox"`, `ON "outbox"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			tbl, err := schema.ParseTable(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := tbl.Quoted(); got != tt.quoted {
				t.Errorf("Quoted() = %s, want %s", got, tt.quoted)
			}
			if got := tbl.Object("notify"); got != tt.object {
				t.Errorf(`Object("notify") = %s, want %s`, got, tt.object)
			}
			ddl := schema.Render(tbl)
			if strings.Contains(ddl, "{{") || strings.Contains(ddl, "}}") {
				t.Errorf("Render left a placeholder:\n%s", ddl)
			}
			for _, want := range tt.wantInRender {
				if !strings.Contains(ddl, want) {
					t.Errorf("Render does not contain %s", want)
				}
			}
			for _, bad := range tt.notInRender {
				if strings.Contains(ddl, bad) {
					t.Errorf("Render contains %s", bad)
				}
			}
		})
	}
}

func TestExpand(t *testing.T) {
	t.Parallel()
	tbl := schema.Table{Schema: "app", Name: "outbox"}
	got := schema.Expand("{{table}} {{name}} {{schema}}x {{table}}", tbl)
	want := `"app"."outbox" outbox "app".x "app"."outbox"`
	if got != want {
		t.Errorf("Expand = %q, want %q", got, want)
	}
	got = schema.Expand("{{schema}}\"{{name}}_seq\"", schema.Table{Name: "outbox"})
	if want := `"outbox_seq"`; got != want {
		t.Errorf("Expand without schema = %q, want %q", got, want)
	}
}

func TestDefaultTableIsValid(t *testing.T) {
	t.Parallel()
	tbl, err := schema.ParseTable(schema.DefaultTable)
	if err != nil {
		t.Fatalf("DefaultTable %q: %v", schema.DefaultTable, err)
	}
	if tbl.Schema != "" || tbl.Name != "openoutbox_events" {
		t.Errorf("DefaultTable parsed as %#v", tbl)
	}
}

// Comments are rendered with the statements (`relay-cli migrate --print`
// shows them), so a template comment may name the table only as {{table}}:
// {{name}} and {{schema}} become fragments, or nothing, once substituted.
func TestTemplateCommentsReadWellOnceRendered(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"schema.sql", "grants.sql"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			_, comment, ok := strings.Cut(line, "--")
			if !ok {
				continue
			}
			for _, p := range []string{"{{name}}", "{{schema}}", "{{migration_lock}}"} {
				if strings.Contains(comment, p) {
					t.Errorf("%s:%d: a comment holds %s, which reads as a fragment once rendered: %s", file, i+1, p, line)
				}
			}
		}
	}
}
