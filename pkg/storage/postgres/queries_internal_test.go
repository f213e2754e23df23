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
	table, err := schema.ParseTable("app.outbox_events")
	if err != nil {
		t.Fatal(err)
	}
	queries, err := loadQueries(table)
	if err != nil {
		t.Fatal(err)
	}
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
