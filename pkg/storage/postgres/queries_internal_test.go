package postgres

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	schema "github.com/outbox-relay/relay/schema/postgres"
)

// runTimeValues are the named values a statement's caller fills in when it
// runs the statement; every other mark is filled in at load time.
var runTimeValues = []string{"partition", "default", "filters", "order", "dir", "limit"}

// Every statement is whole once loaded: its {% %} actions rendered and its
// load-time values filled in, so that what the server runs is the file's
// text with nothing left to splice but the values its caller names.
func TestStatementsAreWholeOnceLoaded(t *testing.T) {
	t.Parallel()
	_, queries := loadedQueries(t)
	mark := regexp.MustCompile(`{{\s*([a-z_]*)\s*}}`)
	for name, q := range queries {
		if strings.Contains(q, "{%") || strings.Contains(q, "%}") {
			t.Errorf("%s: a {%% %%} action is left", name)
		}
		for _, m := range mark.FindAllStringSubmatch(q, -1) {
			if !slices.Contains(runTimeValues, m[1]) {
				t.Errorf("%s: %s is left unfilled", name, m[0])
			}
		}
	}
	for _, v := range statementVariants {
		if _, ok := queries[v.name]; !ok {
			t.Errorf("variant %s is missing", v.name)
		}
	}
	// The files that are only variants' sources, or parts, are no
	// statements of their own.
	for _, name := range []string{"claim_arms", "claim_ordered"} {
		if _, ok := queries[name]; ok {
			t.Errorf("%s is loaded as a statement, but it is only a part or a variants' source", name)
		}
	}
}

// Each claim arm and its second read, in skipped, share the arm's row
// conditions (claim_arms.sql): in every claim statement, the arm's template
// read for the arm is in the arm and read for the second read is in that
// read, and the two differ only in the due condition (none for the again
// arm).
func TestClaimArmsShareTheirSecondReads(t *testing.T) {
	t.Parallel()
	table, queries := loadedQueries(t)
	_, tmpl, err := loadTemplates(table)
	if err != nil {
		t.Fatal(err)
	}
	comment := regexp.MustCompile(`--[^\n]*`)
	norm := func(q string) string { return strings.Join(strings.Fields(comment.ReplaceAllString(q, "")), " ") }
	render := func(name string, p armParams) string {
		var b strings.Builder
		if err := tmpl.ExecuteTemplate(&b, name, p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return norm(b.String())
	}
	// between returns the text of q from start to end (or to its end).
	between := func(stmt, q, start, end string) string {
		_, after, ok := strings.Cut(q, start)
		if !ok {
			t.Fatalf("%s: no %q", stmt, start)
		}
		if end != "" {
			after, _, ok = strings.Cut(after, end)
			if !ok {
				t.Fatalf("%s: no %q after %q", stmt, end, start)
			}
		}
		return after
	}
	// Each arm's template, where the arm and its second read begin and
	// end, and whether the reads differ in the due condition.
	arms := []struct {
		name, rows        string
		arm, armEnd       string
		reread, rereadEnd string
		due               bool
	}{
		{"again", "again_rows", "again AS (", "), watched AS (", "'skip again'", "UNION ALL", false},
		{"watched", "watched_rows", "), watched AS (", "), ahead AS (", "'skip watched'", "", true},
		{"ahead", "ahead_rows", "), ahead AS (", "), skipped AS (", "'skip ahead'", "UNION ALL", true},
	}
	n := 0
	for _, v := range statementVariants {
		if v.file != "claim" && v.file != "claim_held" {
			continue
		}
		n++
		q := norm(queries[v.name])
		skipped := between(v.name, q, "), skipped AS (", "), locked AS (")
		for _, a := range arms {
			onArm := render(a.rows, armParams{sqlParams: v.params})
			onReread := render(a.rows, armParams{sqlParams: v.params, Reread: true})
			if c := strings.Count(between(v.name, q, a.arm, a.armEnd), onArm); c != 1 {
				t.Errorf("%s: the %s arm has its rows (%s) %d times, want once:\n%s", v.name, a.name, a.rows, c, onArm)
			}
			if c := strings.Count(between(v.name, skipped, a.reread, a.rereadEnd), onReread); c != 1 {
				t.Errorf("%s: the %s arm's second read has its rows (%s, reread) %d times, want once:\n%s", v.name, a.name, a.rows, c, onReread)
			}
			// The reads differ in when a row is due, and only there.
			want := onArm
			if a.due {
				dueArm := render("due", armParams{sqlParams: v.params})
				dueReread := render("due", armParams{sqlParams: v.params, Reread: true})
				if !strings.Contains(onArm, dueArm) || !strings.Contains(onReread, dueReread) {
					t.Errorf("%s: the %s arm's rows (%s) have no due condition", v.name, a.name, a.rows)
				}
				want = strings.Replace(onArm, dueArm, dueReread, 1)
			}
			if onReread != want {
				t.Errorf("%s: the %s arm's second read differs from the arm beyond the due condition:\narm:    %s\nreread: %s", v.name, a.name, onArm, onReread)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d claim statements read the claim arms, want 3 (claim, claim_held, claim_unkeyed)", n)
	}
}

// loadedQueries are the statements of a table app.outbox_events, loaded.
func loadedQueries(t *testing.T) (schema.Table, map[string]string) {
	t.Helper()
	table, err := schema.ParseTable("app.outbox_events")
	if err != nil {
		t.Fatal(err)
	}
	queries, err := loadQueries(table)
	if err != nil {
		t.Fatal(err)
	}
	return table, queries
}
