package buildinfo

import (
	"strings"
	"testing"
)

func TestDescribeNamesTheCommit(t *testing.T) {
	if got := Describe("v0.1.0", "1a2b3c4d5e6f7a8b9c"); got != "v0.1.0 (commit 1a2b3c4d5e6f)" {
		t.Errorf("Describe = %q", got)
	}
	// Without a stamped commit, the one Go recorded, if any: a test
	// binary records none, a go build in a checkout does.
	if got := Describe("dev", ""); got != "dev" && !strings.HasPrefix(got, "dev (commit ") {
		t.Errorf("Describe without a stamped commit = %q", got)
	}
}
