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
	"time"
)

//go:embed schema.sql
var schemaSQL string

//go:embed grants.sql
var grantsSQL string

//go:embed partitioned_head.sql
var partitionedHeadSQL string

//go:embed partitioned_tail.sql
var partitionedTailSQL string

// DefaultTable is the Open Outbox table name.
const DefaultTable = "openoutbox_events"

// MigrationLockKey is the advisory lock that serialises migrations and
// grants: several relays starting with STORAGE_AUTO_MIGRATE at once, or
// grants run while a migration creates roles' objects.
const MigrationLockKey = 0x6f7574626f78 // "outbox"

// maxNameLen keeps derived names such as <name>_key_dead_seq_idx within
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

// Partitioning is how a partitioned table is cut: each partition covers
// one Step of created_at, starting at a multiple of it in UTC, and is named
// <table>_p<start formatted with Format>.
type Partitioning struct {
	By     string // "day" or "hour"
	Step   time.Duration
	Format string // Go time layout of the name's suffix
	// Ahead is how far ahead migrate creates partitions.
	Ahead time.Duration
}

// Partitionings are the partitionings migrate --partition-by offers.
var Partitionings = map[string]Partitioning{
	"day":  {By: "day", Step: 24 * time.Hour, Format: "20060102", Ahead: 3 * 24 * time.Hour},
	"hour": {By: "hour", Step: time.Hour, Format: "2006010215", Ahead: 12 * time.Hour},
}

// pgFormats are the Partitioning formats as to_char patterns.
var pgFormats = map[string]string{"20060102": "YYYYMMDD", "2006010215": "YYYYMMDDHH24"}

// PartitionName is the name of t's partition that starts at start; with
// the longest table name (45 bytes) it fits PostgreSQL's 63-byte limit.
func (p Partitioning) PartitionName(t Table, start time.Time) string {
	return t.Name + "_p" + start.UTC().Format(p.Format)
}

// Start is the start of the partition that holds created_at at.
func (p Partitioning) Start(at time.Time) time.Time { return at.UTC().Truncate(p.Step) }

// RenderPartitioned returns the schema DDL for t partitioned by by ("day"
// or "hour"): the table is created with PARTITION BY RANGE (created_at) and
// the primary key (event_id, created_at), followed by its default
// partition and the partitions of the next few periods. Everything else
// (sequence, indexes, trigger) is the same as Render's.
func RenderPartitioned(t Table, by string) (string, error) {
	p, ok := Partitionings[by]
	if !ok {
		return "", fmt.Errorf("cannot partition by %q: use day or hour", by)
	}
	ddl := schemaSQL
	for _, r := range [][2]string{
		{"event_id      UUID PRIMARY KEY DEFAULT", "event_id      UUID NOT NULL DEFAULT"},
		{"CONSTRAINT check_valid_status CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD'))\n);",
			"CONSTRAINT check_valid_status CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD')),\n" +
				"    PRIMARY KEY (event_id, created_at)\n) PARTITION BY RANGE (created_at);"},
		{"CREATE TABLE IF NOT EXISTS", partitionedHeadSQL + "CREATE TABLE IF NOT EXISTS"},
	} {
		if strings.Count(ddl, r[0]) != 1 {
			panic("schema.sql changed: cannot find " + r[0]) // caught by the package's tests
		}
		ddl = strings.Replace(ddl, r[0], r[1], 1)
	}
	ddl += partitionedTailSQL
	ahead := fmt.Sprintf("%d hours", int(p.Ahead.Hours()))
	return strings.NewReplacer(
		"{{partition_by}}", p.By,
		"{{partition_format}}", pgFormats[p.Format],
		"{{partition_ahead}}", ahead,
	).Replace(Expand(ddl, t)), nil
}

// RenderGrants returns the least-privilege roles and grants for t: what the
// relay, producers and relay-cli each need and nothing more.
func RenderGrants(t Table) string {
	return Expand(grantsSQL, t)
}

// LateAfter is how long after its creation an event must be delivered to
// count as delivered late. Only late deliveries have an entry in the
// late_idx index: an index on delivered_at for every delivered row would
// cost each settle one more index entry, and the rows delivered in time
// are found by created_at instead (created_idx), which they cannot
// precede by more than LateAfter.
const LateAfter = "interval '1 minute'"

// deliveredLate is the late_idx index's condition beyond status =
// 'DELIVERED': not delivered in time, that is within LateAfter after it
// was created. It holds for rows delivered late, rows whose delivery time
// precedes their creation (a producer that sets created_at, a clock put
// back) and rows without a delivery time (written by another tool): the
// rows that a range of created_idx around their delivery time would miss.
// Queries repeat it word for word, which is how the planner knows that
// the index holds what they look for.
//
// It compares timestamps without time zone (UTC), the only kind whose
// arithmetic an index may use (it cannot depend on the session's time
// zone), and adds rather than subtracts, which an infinite created_at
// (a producer's '-infinity') would make an error in every write.
const deliveredLate = "(delivered_at IS NULL OR NOT (timezone('UTC', delivered_at) BETWEEN timezone('UTC', created_at) AND timezone('UTC', created_at) + " + LateAfter + "))"

// Expand substitutes t into SQL text written with the placeholders {{table}}
// (the quoted, possibly schema-qualified name), {{name}} (the bare table
// name), {{schema}} (the quoted schema and a dot, or nothing),
// {{migration_lock}}, {{late_after}} (LateAfter) and {{delivered_late}}
// (the late index's condition). Comments in the templates are substituted too and are
// written for the reader of the result (`relay-cli migrate --print`), so
// they use placeholders only where the rendered name reads well.
func Expand(sql string, t Table) string {
	return strings.NewReplacer(
		"{{table}}", t.Quoted(),
		"{{name}}", t.Name,
		"{{schema}}", t.schemaPrefix(),
		"{{migration_lock}}", strconv.Itoa(MigrationLockKey),
		"{{late_after}}", LateAfter,
		"{{delivered_late}}", deliveredLate,
	).Replace(sql)
}
