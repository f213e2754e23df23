package mysql_test

import (
	"strings"
	"testing"

	schema "github.com/outbox-relay/relay/schema/mysql"
)

func TestParseTable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]schema.Table{
		"openoutbox_events":                 {Name: "openoutbox_events"},
		"_e2":                               {Name: "_e2"},
		"app.outbox":                        {Database: "app", Name: "outbox"},
		strings.Repeat("a", 45):             {Name: strings.Repeat("a", 45)},
		"d." + strings.Repeat("b", 45):      {Database: "d", Name: strings.Repeat("b", 45)},
		strings.Repeat("c", 45) + ".outbox": {Database: strings.Repeat("c", 45), Name: "outbox"},
	} {
		got, err := schema.ParseTable(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseTable(%q) = %#v, %v; want %#v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", ".", ".events", "app.", "Events", "App.events", "`events`", "ev`ents", "events`; drop table x; --",
		"ev'ents", "x;drop table y", "my events", "my-events", "a.b.c", "1events", strings.Repeat("a", 46), "événements",
		"events\n",
	} {
		if got, err := schema.ParseTable(in); err == nil || !strings.Contains(err.Error(), "invalid table name") {
			t.Errorf("ParseTable(%q) = %#v, %v; want an invalid table name error", in, got, err)
		}
	}
}

func TestRenderQuotesTheTableEverywhere(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		table        schema.Table
		quoted, want string
	}{
		{schema.Table{Name: "outbox"}, "`outbox`", "CREATE TABLE IF NOT EXISTS `outbox` ("},
		{schema.Table{Database: "app", Name: "outbox"}, "`app`.`outbox`", "CREATE TABLE IF NOT EXISTS `app`.`outbox` ("},
	} {
		if got := tt.table.Quoted(); got != tt.quoted {
			t.Errorf("Quoted() = %s, want %s", got, tt.quoted)
		}
		ddl := schema.Render(tt.table)
		for _, want := range []string{tt.want, "KEY `outbox_key_order_seq_idx` (status, partition_key, seq)",
			"CONSTRAINT `outbox_valid_status`"} {
			if !strings.Contains(ddl, want) {
				t.Errorf("Render(%s) lacks %s", tt.table, want)
			}
		}
		for _, text := range append([]string{ddl, schema.RenderGrants(tt.table)}, upgradeSQL(tt.table)...) {
			if strings.Contains(text, "{{") {
				t.Errorf("a placeholder is left:\n%s", text)
			}
		}
		lock := strings.TrimSuffix(tt.quoted, "`") + "_log_lock`"
		if stmts := schema.Statements(ddl); len(stmts) != 3 || !strings.HasPrefix(stmts[0], "CREATE TABLE "+"IF NOT EXISTS "+tt.quoted) ||
			!strings.HasPrefix(stmts[1], "CREATE TABLE IF NOT EXISTS "+lock) || stmts[2] != "INSERT IGNORE INTO "+lock+" (id) VALUES (1)" {
			t.Errorf("the schema is %d statements, want the CREATE TABLE, the log lock's and its row: %q", len(stmts), stmts)
		}
		grants := schema.Statements(schema.RenderGrants(tt.table))
		if len(grants) != 7 || grants[3] != "GRANT SELECT, UPDATE, DELETE ON "+tt.quoted+" TO outbox_relay" ||
			grants[4] != "GRANT SELECT, UPDATE ON "+lock+" TO outbox_relay" {
			t.Errorf("grants = %q", grants)
		}
	}
}

func upgradeSQL(t schema.Table) []string {
	var out []string
	for _, u := range schema.Upgrades(t) {
		out = append(out, u.SQL)
	}
	return out
}

// Every object an upgrade adds is declared by the CREATE TABLE as well,
// with the same definition.
func TestUpgradesMatchTheSchema(t *testing.T) {
	t.Parallel()
	tbl := schema.Table{Name: "outbox"}
	// Column definitions are aligned in the CREATE TABLE.
	ddl := strings.Join(strings.Fields(schema.Render(tbl)), " ")
	ups := schema.Upgrades(tbl)
	if len(ups) != 9 || ups[0].Object != "column seq" || ups[1].Object != "column state_at" ||
		ups[2].Object != "expression state_at" || ups[3].Object != "index outbox_state_seq_idx" ||
		ups[7].Object != "table outbox_log_lock" || ups[8].Object != "row outbox_log_lock" {
		t.Fatalf("Upgrades = %+v", ups)
	}
	// The log lock's table and row are schema.sql's statements, as they
	// are, and block no writer of the outbox table.
	stmts := schema.Statements(schema.Render(tbl))
	for i, u := range ups[7:] {
		if strings.Join(strings.Fields(u.SQL), " ") != strings.Join(strings.Fields(stmts[1+i]), " ") || u.Blocks {
			t.Errorf("upgrade %s = %q (blocks %v), want schema.sql's %q, not blocking", u.Object, u.SQL, u.Blocks, stmts[1+i])
		}
	}
	for _, u := range ups[:7] {
		// An expression is changed where the column exists; everything
		// else is added.
		verb := "ADD "
		if strings.HasPrefix(u.Object, "expression ") {
			verb = "MODIFY "
		}
		if !strings.HasPrefix(u.SQL, "ALTER TABLE `outbox` "+verb) || strings.HasSuffix(u.SQL, ";") {
			t.Errorf("upgrade %s = %q", u.Object, u.SQL)
		}
		for _, part := range strings.Split(strings.TrimPrefix(u.SQL, "ALTER TABLE `outbox` "), ",\n") {
			if strings.TrimSpace(part) == "ALGORITHM=INPLACE, LOCK=NONE" {
				if u.Blocks {
					t.Errorf("upgrade %s builds in place but says it blocks writers", u.Object)
				}
				continue
			}
			def := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(part), verb))
			def = strings.Join(strings.Fields(strings.TrimPrefix(def, "COLUMN ")), " ")
			if !strings.Contains(ddl, def) {
				t.Errorf("upgrade %s adds %q, which the CREATE TABLE does not declare", u.Object, def)
			}
		}
	}
}
