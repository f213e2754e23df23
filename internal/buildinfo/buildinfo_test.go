package buildinfo

import "testing"

func TestDescribeNamesTheCommit(t *testing.T) {
	if got := Describe("v0.1.0", "1a2b3c4d5e6f7a8b9c"); got != "v0.1.0 (commit 1a2b3c4d5e6f)" {
		t.Errorf("Describe = %q", got)
	}
	// A test binary records no commit: the version alone.
	if got := Describe("dev", ""); got != "dev" && got[:len("dev (commit ")] != "dev (commit " {
		t.Errorf("Describe without a commit = %q", got)
	}
}
