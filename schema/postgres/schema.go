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

// WriterOrder is a row's writer as the claims order rows by it
// ({{writer}} in Expand): writer_xid, with rows written before the column
// existed first. The writer indexes and every claim statement that reads
// by them write it so, one text, which the planner matches to the index.
const WriterOrder = "COALESCE(writer_xid, '0'::xid8)"

// LogLockClass is the high half of a table's log lock, whose low half is
// the table's OID ({{log_lock}} in Expand): the advisory lock by which a
// log reader (CAPTURE=wal) and the claims split the table's fresh rows. A
// relay's capture holds it exclusively from before its stream's first
// batch until its last is recorded; a claim takes fresh rows past the
// stream's backfill only in a transaction that holds it shared
// (docs/architecture.md, "Capture from the WAL").
const LogLockClass = 0x6c67 // "lg"

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

// Sibling returns the quoted name of the object named name in the
// table's schema, such as a partition or an index.
func (t Table) Sibling(name string) string { return t.schemaPrefix() + `"` + name + `"` }

func (t Table) schemaPrefix() string {
	if t.Schema == "" {
		return ""
	}
	return `"` + t.Schema + `".`
}

// Render returns the schema DDL for t, as `relay-cli migrate --print`
// shows it: RenderBase, then each index built CONCURRENTLY.
func Render(t Table) string {
	return RenderBase(t) + indexesForPrint(t)
}

// RenderBase returns the schema DDL for t but its indexes: what migrate
// runs in one transaction before it builds the indexes one by one.
func RenderBase(t Table) string {
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

// partitionedTemplate is schema.sql for a table partitioned by created_at:
// created with PARTITION BY RANGE (created_at) and the primary key
// (event_id, created_at), followed by its default partition and the
// partitions of the next few periods.
func partitionedTemplate() string {
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
	return ddl + partitionedTailSQL
}

// RenderPartitioned returns the schema DDL for t partitioned by by ("day"
// or "hour"), as `relay-cli migrate --partition-by --print` shows it:
// RenderPartitionedBase, then the indexes. Everything but the table's
// partitioning (sequence, indexes, trigger) is the same as Render's.
func RenderPartitioned(t Table, by string) (string, error) {
	ddl, err := RenderPartitionedBase(t, by)
	if err != nil {
		return "", err
	}
	ddl += "\n-- The indexes. CREATE INDEX on a partitioned table creates them on every\n" +
		"-- partition; on a new table that takes no time. (`relay-cli migrate` builds\n" +
		"-- one missing from an existing table partition by partition, CONCURRENTLY.)\n"
	for _, ix := range Indexes(t) {
		ddl += fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%s" ON %s %s;`, ix.Name, t.Quoted(), ix.Definition) + "\n"
	}
	return ddl, nil
}

// RenderPartitionedBase is RenderPartitioned without the indexes, which
// migrate builds after it.
func RenderPartitionedBase(t Table, by string) (string, error) {
	p, ok := Partitionings[by]
	if !ok {
		return "", fmt.Errorf("cannot partition by %q: use day or hour", by)
	}
	ddl := partitionedTemplate()
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
		"{{writer}}", WriterOrder,
		"{{log_lock}}", "(("+strconv.Itoa(LogLockClass)+"::bigint << 32) | '"+t.Quoted()+"'::regclass::oid::bigint)",
		"{{late_after}}", LateAfter,
		"{{delivered_late}}", deliveredLate,
		"{{seq_reserved}}", strconv.FormatInt(SeqReserved, 10),
		"{{seq_numbering}}", SeqNumbering,
	).Replace(sql)
}

//go:embed number_rows.sql
var numberRowsSQL string

// SeqReserved is where a table's seq starts when migrate adds the column
// to a table with rows: the rows that predate it are numbered below it
// (NumberRows) after the column exists, without a lock on the table,
// while new rows take numbers above.
const SeqReserved = int64(1) << 40

// SeqNumbering is the comment on the seq column while the rows that
// predate it wait to be numbered; NumberRows removes it.
const SeqNumbering = "outbox-relay: numbering the rows that predate seq"

// NumberRows returns the statement that numbers the unfinished rows of t
// that predate its seq column and then drops the comment that marked the
// work as pending. It locks those rows, not the table.
func NumberRows(t Table) string { return Expand(numberRowsSQL, t) }

// Index is one index migrate keeps on the table: created CONCURRENTLY,
// one at a time, after the rest of the schema.
type Index struct {
	// Name is the index's bare name, <table>_<suffix>.
	Name string
	// Definition follows ON <table>: columns and condition.
	Definition string
}

// The indexes, all partial but two, so each holds only the rows one query
// needs:
//
//	pending_seq_idx   the PENDING rows in write order: the log's backfill
//	                  check (CAPTURE=wal); claims read frontier_idx;
//	frontier_idx      claims go forward through it in the order of the
//	                  rows' writers (writer_xid, then seq), from the
//	                  relay's claim frontier, and look up the rows of
//	                  writers that were running when the frontier passed
//	                  their ids; NULL (rows from before the column) reads
//	                  as 0, the first;
//	due_at_idx        rows that became PENDING again (released, retried,
//	                  reaped, retried from DEAD: each gets available_at =
//	                  now() or later) and scheduled events: everything
//	                  whose available_at is after its created_at. Claims
//	                  find them here wherever their seq lies, in the order
//	                  (available_at, seq) and from where their last ones
//	                  ended. An event whose producer set created_at before
//	                  the insert's now() is here from the start;
//	key_seq_idx       ORDERING=partition walks the keys with unfinished
//	                  events and reads each key's events in write order;
//	                  "C" collation so that the database and the relay
//	                  agree on the order of keys;
//	key_writer_idx    ordered claims meet the keys in the order of the
//	                  rows' writers, as frontier_idx serves the unordered
//	                  ones, and the rows of writers that were running when
//	                  they passed their ids: every keyed row not
//	                  DELIVERED, so that a row another relay holds (or
//	                  sent DEAD) is seen too;
//	key_dead_seq_idx  ORDERING_ON_DEAD=block finds a DEAD event ahead of a
//	                  key's first unfinished one;
//	delivering_idx    the reaper finds expired leases;
//	dead_idx          pruning DEAD rows;
//	created_idx       the console and `relay-cli list`: every status, newest
//	                  or oldest first, a page after a cursor one range of it
//	                  (not partial: it costs an entry per insert and per
//	                  change of status); also the rows delivered within
//	                  LateAfter of their creation (nearly all), for
//	                  pruning and the counts of recent deliveries: such a
//	                  row's created_at is at most that much before its
//	                  delivered_at;
//	late_idx          the DELIVERED rows delivered later than that (or
//	                  without a delivery time), by delivered_at: with
//	                  created_idx, every DELIVERED row by when it was
//	                  delivered, while a settle in time adds no entry here;
//	key_written_idx   the same for the events of one partition key, in
//	                  write order (seq; created_at for rows written before
//	                  seq existed), the order the relay delivers them in.
var indexes = []struct{ suffix, definition string }{
	{"pending_seq_idx", `(seq) WHERE status = 'PENDING'`},
	{"frontier_idx", `(({{writer}}), seq) WHERE status = 'PENDING'`},
	{"due_at_idx", `(available_at, seq) WHERE status = 'PENDING' AND available_at > created_at`},
	{"key_seq_idx", `(partition_key COLLATE "C", seq) WHERE status IN ('PENDING', 'DELIVERING') AND partition_key IS NOT NULL`},
	{"key_writer_idx", `(({{writer}}), seq) WHERE status <> 'DELIVERED' AND partition_key <> ''`},
	{"key_dead_seq_idx", `(partition_key COLLATE "C", seq) WHERE status = 'DEAD' AND partition_key IS NOT NULL`},
	{"delivering_idx", `(locked_at) WHERE status = 'DELIVERING'`},
	{"late_idx", `(delivered_at) WHERE status = 'DELIVERED' AND {{delivered_late}}`},
	{"dead_idx", `(updated_at) WHERE status = 'DEAD'`},
	{"created_idx", `(created_at, (COALESCE(seq, 0)), event_id)`},
	{"key_written_idx", `(partition_key, (COALESCE(seq, 0)), created_at, event_id) WHERE partition_key IS NOT NULL`},
}

// retired are the suffixes of indexes earlier releases made and this one
// no longer reads: those that ordered by created_at, which the ones above
// replace; pending_age_idx, whose question (the oldest pending event) the
// backlog answers; delivered_idx, which late_idx and created_idx replace;
// key_idx, which listed a key's events by created_at; due_idx, which
// due_at_idx replaces; and unkeyed_seq_idx and keyed_pending_idx, which
// ordered claims read before they went by the claim frontier. A relay of
// an earlier release may still read them during a rolling upgrade, so
// migrate drops them only when asked (--cleanup).
var retired = []string{"pending_idx", "key_order_idx", "key_dead_idx", "unkeyed_idx", "pending_age_idx",
	"delivered_idx", "key_idx", "due_idx", "unkeyed_seq_idx", "keyed_pending_idx"}

// Indexes lists the indexes migrate keeps on t, in the order it creates
// them.
func Indexes(t Table) []Index {
	out := make([]Index, len(indexes))
	for i, ix := range indexes {
		out[i] = Index{Name: t.Name + "_" + ix.suffix, Definition: Expand(ix.definition, t)}
	}
	return out
}

// Retired lists the bare names of the indexes of earlier releases that
// `migrate --cleanup` drops from t.
func Retired(t Table) []string {
	out := make([]string, len(retired))
	for i, suffix := range retired {
		out[i] = t.Name + "_" + suffix
	}
	return out
}

// CreateIndexSQL is the statement that builds ix on t without blocking
// writers. It cannot run inside a transaction block.
func CreateIndexSQL(t Table, ix Index) string {
	return fmt.Sprintf(`CREATE INDEX CONCURRENTLY IF NOT EXISTS "%s" ON %s %s`, ix.Name, t.Quoted(), ix.Definition)
}

// indexesForPrint is the end of `migrate --print`: the indexes, each its
// own statement outside any transaction.
func indexesForPrint(t Table) string {
	var b strings.Builder
	b.WriteString("\n-- The indexes, built without blocking writers: CREATE INDEX CONCURRENTLY\n" +
		"-- cannot run in a transaction block, so run these one by one (psql does).\n" +
		"-- A build cut short leaves an INVALID index that IF NOT EXISTS would keep:\n" +
		"-- `relay-cli migrate` finds such an index and builds it again.\n")
	for _, ix := range Indexes(t) {
		b.WriteString(CreateIndexSQL(t, ix) + ";\n")
	}
	return b.String()
}
