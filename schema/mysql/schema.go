// Package mysql embeds the outbox table's DDL for MySQL 8 and MariaDB 10.6
// or later and renders it for a validated table name, for `relay-cli
// migrate`, STORAGE_AUTO_MIGRATE and teams that apply migrations with their
// own tools.
//
// schema.sql creates the table with every column and index in one CREATE
// TABLE. upgrade.sql holds one statement per object that a table created
// elsewhere (Open Outbox's, or an older relay's) may lack — the seq and
// state_at columns, state_at's current expression and each index — so
// that Migrate can add exactly what is missing: MySQL has no CREATE INDEX
// IF NOT EXISTS, and MariaDB's is not MySQL's.
package mysql

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
)

//go:embed schema.sql
var schemaSQL string

//go:embed upgrade.sql
var upgradeSQL string

//go:embed grants.sql
var grantsSQL string

// DefaultTable is the Open Outbox table name.
const DefaultTable = "openoutbox_events"

// MigrationLock is the name of the server-wide lock (GET_LOCK) that
// serialises migrations and grants: several relays starting with
// STORAGE_AUTO_MIGRATE at once, or grants run while a migration runs.
const MigrationLock = "outbox_relay.migrate"

// maxNameLen keeps derived names such as <name>_key_order_seq_idx within
// MySQL's 64-character identifier limit.
const maxNameLen = 45

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Table is a validated, optionally database-qualified table name. Its parts
// are safe to place in SQL, quoted.
type Table struct {
	Database string // empty: the connection's database
	Name     string
}

// ParseTable validates name as "table" or "database.table". Each part must
// be lowercase letters, digits and underscores, not start with a digit, and
// be at most 45 characters, so no name can smuggle SQL into a statement.
func ParseTable(name string) (Table, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return Table{}, fmt.Errorf("invalid table name %q: use table or database.table", name)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) || len(p) > maxNameLen {
			return Table{}, fmt.Errorf("invalid table name %q: each part must be 1-%d lowercase letters, digits or underscores, not starting with a digit", name, maxNameLen)
		}
	}
	if len(parts) == 2 {
		return Table{Database: parts[0], Name: parts[1]}, nil
	}
	return Table{Name: parts[0]}, nil
}

// String returns the name as given, database.table or table.
func (t Table) String() string {
	if t.Database == "" {
		return t.Name
	}
	return t.Database + "." + t.Name
}

// Quoted returns the name ready for SQL: `database`.`table` or `table`.
func (t Table) Quoted() string {
	if t.Database == "" {
		return "`" + t.Name + "`"
	}
	return "`" + t.Database + "`.`" + t.Name + "`"
}

// Render returns the schema DDL for t: statements separated by lines that
// end in a semicolon.
func Render(t Table) string {
	return Expand(schemaSQL, t)
}

// RenderGrants returns the least-privilege roles and grants for t: what the
// relay, producers and relay-cli each need and nothing more.
func RenderGrants(t Table) string {
	return Expand(grantsSQL, t)
}

// Upgrade is one object Migrate adds to an existing table when it lacks
// it.
type Upgrade struct {
	// Object is "column seq", "expression state_at", "index <name>",
	// "table <name>_log_lock" or "row <name>_log_lock", as Migrate
	// reports it.
	Object string
	// SQL adds the object (or, for an expression, changes the column to
	// it).
	SQL string
	// Blocks says whether it blocks the table's writers while it runs:
	// a column's change rebuilds the table; an index is built in place.
	Blocks bool
}

// Retired lists the bare names of the indexes of earlier releases that
// `migrate --cleanup` drops: state_idx and key_order_idx, ordered by
// created_at first, and key_idx, which listed a key's events by
// created_at.
func Retired(t Table) []string {
	return []string{t.Name + "_state_idx", t.Name + "_key_order_idx", t.Name + "_key_idx"}
}

// DropIndexSQL drops the index name of t in place, without blocking
// writers.
func DropIndexSQL(t Table, name string) string {
	return "ALTER TABLE " + t.Quoted() + " DROP INDEX `" + name + "`, ALGORITHM=INPLACE, LOCK=NONE"
}

// Upgrades returns the statements that complete an existing table, one per
// object, in the order to apply them.
func Upgrades(t Table) []Upgrade {
	var out []Upgrade
	for _, block := range strings.Split(Expand(upgradeSQL, t), "-- object: ")[1:] {
		object, body, _ := strings.Cut(block, "\n")
		var sql []string
		for _, line := range strings.Split(body, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
				sql = append(sql, line)
			}
		}
		object = strings.TrimSpace(object)
		// A column's change rebuilds the table; an index is built in
		// place, and the log lock's table and row are new.
		blocks := strings.HasPrefix(object, "column ") || strings.HasPrefix(object, "expression ")
		out = append(out, Upgrade{Object: object, SQL: strings.TrimSuffix(strings.Join(sql, "\n"), ";"), Blocks: blocks})
	}
	return out
}

// Statements splits a script rendered by this package into its statements:
// each ends with a semicolon at the end of a line, and comment lines are
// dropped.
func Statements(script string) []string {
	var out []string
	var cur []string
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		if strings.HasSuffix(trimmed, ";") {
			cur = append(cur, strings.TrimSuffix(line, ";"))
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

// LogLock is the one-row table beside t whose row is t's log lock: a log
// reader (CAPTURE=binlog) holds it exclusively while it streams, and the
// claims that may take every fresh event hold it shared.
func (t Table) LogLock() Table { return Table{Database: t.Database, Name: t.Name + "_log_lock"} }

// Expand substitutes t into SQL text written with the placeholders
// {{table}} (quoted, qualified when t is), {{name}} (the bare name, for
// the names of indexes and constraints) and {{log_lock}} (t.LogLock(),
// quoted).
func Expand(sql string, t Table) string {
	return strings.NewReplacer(
		"{{table}}", t.Quoted(),
		"{{name}}", t.Name,
		"{{log_lock}}", t.LogLock().Quoted(),
	).Replace(sql)
}
