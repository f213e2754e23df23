// Package postgres embeds the outbox table's DDL for PostgreSQL and renders
// it for a validated table name, for `relay-cli migrate`,
// STORAGE_AUTO_MIGRATE and teams that apply migrations with their own tools.
package postgres

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

//go:embed schema.sql
var schemaSQL string

//go:embed grants.sql
var grantsSQL string

// DefaultTable is the Open Outbox table name.
const DefaultTable = "openoutbox_events"

// MigrationLockKey is the advisory lock that serialises migrations and
// grants: several relays starting with STORAGE_AUTO_MIGRATE at once, or
// grants run while a migration creates roles' objects.
const MigrationLockKey = 0x6f7574626f78 // "outbox"

// maxNameLen keeps derived names such as <name>_pending_age_idx within
// PostgreSQL's 63-byte identifier limit.
const maxNameLen = 45

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Table is a validated, optionally schema-qualified table name. Its parts are
// safe to place in SQL, quoted.
type Table struct {
	Schema string // empty: the connection's search_path decides
	Name   string
}

// ParseTable validates name as "table" or "schema.table". Each part must be
// lowercase letters, digits and underscores, not start with a digit, and be
// at most 45 characters, so no name can smuggle SQL into a statement.
func ParseTable(name string) (Table, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return Table{}, fmt.Errorf("invalid table name %q: use table or schema.table", name)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) || len(p) > maxNameLen {
			return Table{}, fmt.Errorf("invalid table name %q: each part must be 1-%d lowercase letters, digits or underscores, not starting with a digit", name, maxNameLen)
		}
	}
	if len(parts) == 2 {
		return Table{Schema: parts[0], Name: parts[1]}, nil
	}
	return Table{Name: parts[0]}, nil
}

// String returns the name as given, schema.table or table.
func (t Table) String() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// Quoted returns the name ready for SQL: "schema"."table" or "table".
func (t Table) Quoted() string { return t.schemaPrefix() + `"` + t.Name + `"` }

// Object returns the quoted name of an object derived from the table, such
// as an index or function, in the table's schema.
func (t Table) Object(suffix string) string {
	return t.schemaPrefix() + `"` + t.Name + "_" + suffix + `"`
}

func (t Table) schemaPrefix() string {
	if t.Schema == "" {
		return ""
	}
	return `"` + t.Schema + `".`
}

// Render returns the schema DDL for t.
func Render(t Table) string {
	return Expand(schemaSQL, t)
}

// RenderGrants returns the least-privilege roles and grants for t: what the
// relay, producers and relay-cli each need and nothing more.
func RenderGrants(t Table) string {
	return Expand(grantsSQL, t)
}

// Expand substitutes t into SQL text written with the placeholders {{table}}
// (the quoted, possibly schema-qualified name), {{name}} (the bare table
// name), {{schema}} (the quoted schema and a dot, or nothing) and
// {{migration_lock}}. Comments in the templates are substituted too and are
// written for the reader of the result (`relay-cli migrate --print`), so
// they use placeholders only where the rendered name reads well.
func Expand(sql string, t Table) string {
	return strings.NewReplacer(
		"{{table}}", t.Quoted(),
		"{{name}}", t.Name,
		"{{schema}}", t.schemaPrefix(),
		"{{migration_lock}}", strconv.Itoa(MigrationLockKey),
	).Replace(sql)
}
