package postgres

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"text/template"

	"github.com/outbox-relay/relay/pkg/storage/driverkit"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// The statements the driver runs are the files under sql/, one statement
// each, named by the file. Two kinds of marks fill them in:
//   - {{name}} is a named value: the table's ({{table}}, {{name}}, …;
//     schema.Expand) and the hand-back rules (dueAgainRules) at load time,
//     and a few that the statement's caller fills in when it runs it
//     ({{partition}}, {{filters}}, …);
//   - {% … %} is a Go text/template action for the statements written once
//     for several uses: shared parts ({% template "claim_arms" . %}) and
//     what differs between the uses ({% if .Held %}), by sqlParams. The
//     uses are listed in statementVariants; each is a statement of its own.
//     A part used twice in one statement takes what differs between those
//     uses by a function of sqlFuncs: each claim arm's row conditions
//     ({% template "fresh_rows" (arm .) %}) are also its second read's
//     ({% template "fresh_rows" (reread .) %}), which differs in when a row
//     counts as due (armParams.Reread).
//
// A file that only defines parts ({% define %}) is no statement.

//go:embed sql/*.sql sql/ordered/*.sql
var sqlFiles embed.FS

// sqlParams are the parameters of the {% %} actions.
type sqlParams struct {
	// Held: a held claim's arms also read each row's address.
	Held bool
	// Unkeyed: the arms read only rows without a key (the unkeyed part of
	// an ordered claim).
	Unkeyed bool
	// Floors: the ordered claim walks the keys from the relay's floors
	// (walk_floors.sql), not through the key index (walk_index.sql).
	Floors bool
	// Block: ORDERING_ON_DEAD=block; a DEAD event stops its key.
	Block bool
	// ByAddress: a held claim's settle, in its transaction, finds the rows
	// where the claim found them; otherwise (SettleHeld, after the
	// transaction ended) by id alone, without the claim's created_at
	// range, which statistics that lag the inserts make look like a better
	// way in than the primary key.
	ByAddress bool
	// ExactCreated: the log reader's records find each row by id and its
	// exact created_at (one partition); otherwise by id alone, for rows
	// whose created_at it could not read.
	ExactCreated bool
}

// armParams are the parameters of a claim arm's row conditions in
// claim_arms.sql: the statement's, and which of the arm's two reads.
type armParams struct {
	sqlParams
	// Reread: the arm's second read, in skipped, which for the ahead and
	// watched arms also sees the rows outside the due index that are not
	// due yet.
	Reread bool
}

// sqlFuncs are the functions of the {% %} actions: arm and reread give a
// claim arm's row conditions the statement's parameters for the arm's read
// or for its second read.
var sqlFuncs = template.FuncMap{
	"arm":    func(p sqlParams) armParams { return armParams{sqlParams: p} },
	"reread": func(p sqlParams) armParams { return armParams{sqlParams: p, Reread: true} },
}

// statementVariants are the statements rendered from a file with {% %}
// actions: name, file, parameters.
var statementVariants = []struct {
	name, file string
	params     sqlParams
}{
	{"claim", "claim", sqlParams{}},
	{"claim_held", "claim_held", sqlParams{Held: true}},
	{"claim_unkeyed", "claim", sqlParams{Unkeyed: true}},
	{"claim_ordered_skip", "claim_ordered", sqlParams{}},
	{"claim_ordered_block", "claim_ordered", sqlParams{Block: true}},
	{"claim_ordered_keys_skip", "claim_ordered", sqlParams{Floors: true}},
	{"claim_ordered_keys_block", "claim_ordered", sqlParams{Floors: true, Block: true}},
	{"held_delivered", "held_delivered", sqlParams{ByAddress: true}},
	{"held_delivered_by_id", "held_delivered", sqlParams{}},
	{"held_deleted", "held_deleted", sqlParams{ByAddress: true}},
	{"held_deleted_by_id", "held_deleted", sqlParams{}},
	{"held_failed", "held_failed", sqlParams{ByAddress: true}},
	{"held_failed_by_id", "held_failed", sqlParams{}},
	{"held_released", "held_released", sqlParams{ByAddress: true}},
	{"held_released_by_id", "held_released", sqlParams{}},
	{"record_delivered", "record_delivered", sqlParams{ExactCreated: true}},
	{"record_delivered_any", "record_delivered", sqlParams{}},
	{"record_deleted", "record_deleted", sqlParams{ExactCreated: true}},
	{"record_deleted_any", "record_deleted", sqlParams{}},
	{"record_failed", "record_failed", sqlParams{ExactCreated: true}},
	{"record_failed_any", "record_failed", sqlParams{}},
	{"defer", "defer", sqlParams{ExactCreated: true}},
	{"defer_any", "defer", sqlParams{}},
}

// loadQueries returns every statement for table, by name.
func loadQueries(table schema.Table) (map[string]string, error) {
	queries, tmpl, err := loadTemplates(table)
	if err != nil {
		return nil, err
	}
	for _, v := range statementVariants {
		var b strings.Builder
		if err := tmpl.ExecuteTemplate(&b, v.file, v.params); err != nil {
			return nil, fmt.Errorf("sql statement %s: %w", v.name, err)
		}
		queries[v.name] = b.String()
	}
	return queries, nil
}

// loadTemplates returns the statements for table without {% %} actions, by
// name, and the files with actions, and the parts they share, as
// templates.
func loadTemplates(table schema.Table) (map[string]string, *template.Template, error) {
	expand := func(q string) string { return freshRule.Replace(dueAgainRules.Replace(schema.Expand(q, table))) }
	queries, err := driverkit.LoadQueries(sqlFiles, "sql", expand)
	if err != nil {
		return nil, nil, err
	}
	tmpl := template.New("").Delims("{%", "%}").Option("missingkey=error").Funcs(sqlFuncs)
	parts, err := fs.Glob(sqlFiles, "sql/ordered/*.sql")
	if err != nil {
		return nil, nil, err
	}
	for _, file := range parts {
		name := strings.TrimSuffix(path.Base(file), ".sql")
		if _, err := tmpl.New(name).Parse(expand(driverkit.MustReadQuery(sqlFiles, file))); err != nil {
			return nil, nil, fmt.Errorf("sql file %s: %w", file, err)
		}
	}
	for name, q := range queries {
		if !strings.Contains(q, "{%") {
			continue
		}
		if _, err := tmpl.New(name).Parse(q); err != nil {
			return nil, nil, fmt.Errorf("sql file %s.sql: %w", name, err)
		}
		delete(queries, name) // a statement only as one of its variants
	}
	return queries, tmpl, nil
}

// mustReadSQL returns the embedded sql/<name>.sql, unexpanded.
func mustReadSQL(name string) string { return driverkit.MustReadQuery(sqlFiles, "sql/"+name+".sql") }

// dueAgainRules writes, once for every statement that hands rows back to the
// claims, when they are due again and what a failed attempt changes.
//
// A row handed back (released, failed, reaped, retried from DEAD) with a
// back-off lies in due_at_idx, whose rows are PENDING with an
// available_at after their created_at, where the claims find it once due
// (docs/architecture.md, "The claim frontier"). So it is never due before
// its created_at, which a producer may set ahead of the database's clock. {{due_now}} is due at once.
// {{failed_attempt}} is the failure rule of every settle: count the
// attempt, keep the error (f.error), and either bury the event (f.dead;
// available_at stays) or make it due after the back-off (f.delay_us,
// microseconds). The statements name their table t. statement_timestamp()
// is the statement's moment also in a held claim's transaction, which
// began before its batch was published.
//
// {{handed_back}}, which every hand-back writes (and {{failed_attempt}}
// includes), makes the handing transaction the row's writer: the row is
// claimable again only once that transaction commits, and the claim
// frontier, which goes by writers, cannot have passed it before then
// (docs/architecture.md, "The claim frontier").
var dueAgainRules = strings.NewReplacer(
	"{{due_now}}", dueAfter("statement_timestamp()"),
	"{{handed_back}}", handedBack,
	"{{failed_attempt}}", `status = CASE WHEN f.dead THEN 'DEAD' ELSE 'PENDING' END,
    attempts = t.attempts + 1,
    last_error = f.error,
    available_at = CASE WHEN f.dead THEN t.available_at
                        ELSE `+dueAfter("statement_timestamp() + f.delay_us * interval '1 microsecond'")+` END,
    `+handedBack,
)

// freshRule writes the highest seq of a fresh row a claim statement may
// take, {{fresh_to}}: what fresh_lock.sql decided earlier in the claim's
// pipeline beside a log reader, or else the statement's $6
// (FreshEvents.UpTo). A scalar subquery, so it is read once a statement.
var freshRule = strings.NewReplacer(
	"{{fresh_to}}", "(SELECT coalesce(nullif(current_setting('outbox_relay.fresh_to', true), '')::bigint, $6::bigint))",
)

// handedBack makes the statement's transaction the row's writer.
const handedBack = "writer_xid = pg_catalog.pg_current_xact_id()"

// dueAfter is when a row handed back at moment is due: then, or just after
// its created_at when that is later.
func dueAfter(moment string) string {
	return "greatest(" + moment + ", t.created_at + interval '1 microsecond')"
}
