package main

import (
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

func TestGrantsGiveEachRoleItsRights(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	args := []string{"grants", "--storage-url", pgtest.URL(), "--table", tb.Name}

	printed := ok(t, cmd{args: append(args, "--print")}.run(t))
	if !strings.Contains(printed.stdout, "GRANT SELECT, UPDATE, DELETE ON "+quoted(tb.Name)+" TO outbox_relay") {
		t.Fatalf("--print does not show the relay's grant for %s:\n%s", tb.Name, printed.stdout)
	}

	res := ok(t, cmd{args: args}.run(t))
	if !strings.Contains(res.stdout, "outbox_relay") {
		t.Errorf("grants says nothing useful:\n%s", res)
	}
	for _, c := range []struct {
		role, privilege string
		want            bool
	}{
		{"outbox_relay", "UPDATE", true},
		{"outbox_relay", "DELETE", true}, // retention
		{"outbox_relay", "INSERT", false},
		{"outbox_producer", "INSERT", true},
		{"outbox_producer", "UPDATE", false},
		{"outbox_admin", "DELETE", true},
	} {
		var has bool
		if err := tb.Pool().QueryRow(ctx, "SELECT has_table_privilege($1, $2, $3)", c.role, tb.Name, c.privilege).Scan(&has); err != nil {
			t.Fatal(err)
		}
		if has != c.want {
			t.Errorf("%s has %s: %v, want %v", c.role, c.privilege, has, c.want)
		}
	}
}

func quoted(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, ".")
}
