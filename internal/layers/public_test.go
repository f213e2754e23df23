package layers

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/outbox-relay/relay/"

// conformanceSuites are the packages outside tests that may import
// testing: what a third-party driver runs to show it behaves.
var conformanceSuites = []string{
	"pkg/capture/capturetest",
	"pkg/publisher/publishertest",
	"pkg/storage/storagetest",
}

// TestPublicPackagesAreListed holds the public API to the list in
// docs/architecture.md ("Public packages"): a package outside internal/ and
// cmd/ that users could import is either there, with what it is for, or
// moved under internal/.
func TestPublicPackagesAreListed(t *testing.T) {
	t.Parallel()
	listed := documentedPackages(t)
	var public []string
	for _, p := range goList(t, `{{if ne .Name "main"}}{{.ImportPath}}{{end}}`) {
		rel := strings.TrimPrefix(p, module)
		if rel == "" || strings.HasPrefix(rel, "internal/") || strings.Contains(rel, "/internal/") {
			continue
		}
		public = append(public, rel)
	}
	for _, p := range public {
		if !slices.Contains(listed, p) {
			t.Errorf("%s is public but not in docs/architecture.md's public packages: list it with what users import it for, or move it under internal/", p)
		}
	}
	for _, p := range listed {
		if !slices.Contains(public, p) {
			t.Errorf("docs/architecture.md lists %s as public, but there is no such package outside internal/", p)
		}
	}
}

// TestOnlySuitesImportTesting keeps test support out of what users link:
// a package that imports testing outside a _test.go file is a harness,
// which belongs under internal/harness, unless it is a conformance suite.
func TestOnlySuitesImportTesting(t *testing.T) {
	t.Parallel()
	for _, line := range goList(t, `{{.ImportPath}}: {{join .Imports " "}}`) {
		pkg, imports, _ := strings.Cut(line, ": ")
		rel := strings.TrimPrefix(pkg, module)
		if strings.HasPrefix(rel, "internal/") || slices.Contains(conformanceSuites, rel) {
			continue
		}
		if slices.Contains(strings.Fields(imports), "testing") {
			t.Errorf("%s imports testing outside its tests: move the test support under internal/harness", rel)
		}
	}
}

// documentedPackages reads the package column of the table under
// "### Public packages" in docs/architecture.md.
func documentedPackages(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### Public packages\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no "### Public packages" section`)
	}
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var pkgs []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		pkgs = append(pkgs, m[1])
	}
	if len(pkgs) == 0 {
		t.Fatal("docs/architecture.md's public packages table lists no package")
	}
	return pkgs
}

// goList runs go list with format over every package of the module, from
// its root, and returns its non-empty lines.
func goList(t *testing.T, format string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", format, "./...")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// repoRoot is the module's root: this package's directory is two below it.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}
