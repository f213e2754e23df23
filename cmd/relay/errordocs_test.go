package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// TestDocsQuoteErrorsTheCodeWrites keeps the sample errors in the docs true:
// an operator copies them into `retry-dead --error-contains` or searches the
// logs for them, so each must be text the code can write. The samples are
// found by the ways the docs quote errors (sampleErrorPatterns); each must
// fit an error string in the non-test Go source or the SQL, where a format
// verb stands for any value, %w for another such string, and "…", "..." or
// <name> in a sample for any text.
func TestDocsQuoteErrorsTheCodeWrites(t *testing.T) {
	t.Parallel()
	sources := errorSources(t, "../..")
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, sample := range sampleErrors(string(b)) {
			found++
			if !sources.fit(sample) {
				t.Errorf("%s quotes the error %q, which no error string in the code can produce; quote what the code writes",
					filepath.Base(f), strings.ReplaceAll(sample, placeholder, "…"))
			}
		}
	}
	// The patterns find a few dozen today: far fewer means one broke.
	if found < 20 {
		t.Errorf("found %d sample errors in the docs, want at least 20: has a pattern stopped matching?", found)
	}
}

// A package's FieldError reaches the user naming the variable that set the
// field, so the docs may quote it that way: the sources hold both forms.
func TestErrorSourcesHoldFieldErrorsByTheirVariables(t *testing.T) {
	t.Parallel()
	sources := errorSources(t, "../..")
	for _, s := range []string{
		"relay: BatchSize must be positive, got %d",
		"BATCH_SIZE must be positive, got %d",
		"LEASE_TIMEOUT must be at least %s, got %s",
		"OTEL_METRICS_EXPORTER: %w",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (or OTEL_EXPORTER_OTLP_PROTOCOL) must be grpc or http/protobuf (http/json is not supported), got %q",
	} {
		want := parseFormat(s)
		if !slices.ContainsFunc(sources, func(ps []piece) bool { return slices.Equal(ps, want) }) {
			t.Errorf("the error sources lack %q", s)
		}
	}
}

// placeholder stands in a sample for text the docs leave out.
const placeholder = "\x00"

var (
	// How the docs quote errors.
	sampleErrorPatterns = []*regexp.Regexp{
		regexp.MustCompile(`--error-contains '([^']+)'`),
		regexp.MustCompile(`--error-contains "([^"]+)"`),
		regexp.MustCompile("last_error = '([^']+)'"),
		// relay-cli show's output in a code block.
		regexp.MustCompile(`(?m)^last_error {2,}(\S.*)$`),
		// relay-cli list's: LAST ERROR is the last column.
		regexp.MustCompile(`(?m)^[0-9a-f]{8}-[0-9a-f-]{27} .*\b(?:PENDING|DELIVERING|DELIVERED|DEAD) +\d+ +\S+ +(\S.*)$`),
	}
	// A list of code spans after one of these phrases is a list of errors.
	sampleListIntro = regexp.MustCompile("(?:`last_error` says|`last_error` naming it:|`DEAD`(?: at once)? with|`DEAD` at once:|Exit [12]:)" +
		" ((?:`[^`]+`(?:, | / | or )?)+)")
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// A code span quoting an assignment: `last_error = '…'`.
	lastErrorAssignment = regexp.MustCompile(`^last_error = '(.*)'$`)
	paragraphBreak      = regexp.MustCompile(`\n\s*\n`)
	// "…", "..." and <name> leave text out of a sample.
	samplePlaceholder = regexp.MustCompile(`…|\.\.\.|<[a-z_ ]+>`)
)

// sampleErrors returns the errors doc quotes, placeholders marked.
func sampleErrors(doc string) []string {
	var out []string
	add := func(s string) {
		s = strings.Join(strings.Fields(s), " ")
		if m := lastErrorAssignment.FindStringSubmatch(s); m != nil {
			s = m[1]
		}
		out = append(out, samplePlaceholder.ReplaceAllString(s, placeholder))
	}
	for _, re := range sampleErrorPatterns {
		for _, m := range re.FindAllStringSubmatch(doc, -1) {
			add(m[1])
		}
	}
	for _, para := range paragraphBreak.Split(doc, -1) {
		flat := strings.Join(strings.Fields(para), " ")
		for _, m := range sampleListIntro.FindAllStringSubmatch(flat, -1) {
			for _, span := range codeSpan.FindAllStringSubmatch(m[1], -1) {
				add(span[1])
			}
		}
		// A broker's **Errors.** paragraph quotes errors as code spans;
		// spans without a space there are names (LEADER_NOT_AVAILABLE).
		if strings.HasPrefix(flat, "**Errors.**") {
			for _, span := range codeSpan.FindAllStringSubmatch(flat, -1) {
				if strings.Contains(span[1], " ") {
					add(span[1])
				}
			}
		}
	}
	return dedupe(out)
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// piece is a run of literal text or a format verb of an error string.
type piece struct {
	lit  string
	verb byte // 0 for literal text
}

type errorStrings [][]piece

// errorSources collects the string constants of the non-test Go files under
// root (concatenations folded, an operand that is not a constant becoming
// %s) and the quoted strings of the SQL files. Packages named *test are test
// helpers and are left out. A package's FieldErrors (config.Checker's
// Expect and Wrap) name a Go field, which the relay shows by the variable
// that set it (fieldVariable): each is collected as both print it.
func errorSources(t *testing.T, root string) errorStrings {
	t.Helper()
	var out errorStrings
	seen := map[string]bool{}
	add := func(s string) {
		if keep(s) && !seen[s] {
			seen[s] = true
			out = append(out, parseFormat(s))
		}
	}
	sqlConcat := regexp.MustCompile(`'\s*\|\|.*?\|\|\s*'`)
	sqlString := regexp.MustCompile(`'((?:[^']|'')*)'`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasSuffix(name, "test") ||
				name == "testdata" || name == "bin" || name == "tmp" || name == "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if e, ok := n.(ast.Expr); ok {
					if s, ok := foldString(e); ok {
						add(s)
					}
				}
				switch field, problem, ok := fieldErrorCall(n); {
				case ok && field == "":
					t.Errorf("%s: a FieldError's field must be a constant string, so that its messages are known here", path)
				case ok:
					add(f.Name.Name + ": " + field + problem)
					if v := fieldVariable(f.Name.Name, field); v != "" {
						add(v + problem)
					}
				}
				return true
			})
		case strings.HasSuffix(path, ".sql"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			text := sqlConcat.ReplaceAllString(string(b), "%s")
			for _, m := range sqlString.FindAllStringSubmatch(text, -1) {
				add(strings.ReplaceAll(m[1], "''", "'"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("found %d strings in the source: is the root wrong?", len(out))
	}
	return out
}

// fieldErrorCall recognises v.Expect("Field", ok, "format", …) and
// v.Wrap("Field", err), config.Checker's ways to record a FieldError, and
// returns the field and the problem's format as the error prints them after
// the field's name; field is "" when it is not a constant string.
func fieldErrorCall(n ast.Node) (field, problem string, ok bool) {
	call, isCall := n.(*ast.CallExpr)
	if !isCall {
		return "", "", false
	}
	sel, isSel := call.Fun.(*ast.SelectorExpr)
	if !isSel {
		return "", "", false
	}
	switch {
	case sel.Sel.Name == "Expect" && len(call.Args) >= 3:
		format, isString := foldString(call.Args[2])
		if !isString {
			return "", "", false
		}
		problem = " " + format
	case sel.Sel.Name == "Wrap" && len(call.Args) == 2:
		problem = ": %w"
	default:
		return "", "", false
	}
	field, _ = foldString(call.Args[0])
	return field, problem, true
}

// keep reports whether s could be (part of) an error message: it has a
// letter, and is not a long text such as a help page.
func keep(s string) bool {
	return len(s) <= 400 && strings.ContainsFunc(s, unicode.IsLetter)
}

// foldString returns the string an expression of string constants and +
// makes, with %s for operands that are not constants; ok is false unless a
// string constant is part of it.
func foldString(e ast.Expr) (s string, ok bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.ParenExpr:
		return foldString(e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		l, lok := foldString(e.X)
		r, rok := foldString(e.Y)
		if !lok && !rok {
			return "", false
		}
		if !lok {
			l = "%s"
		}
		if !rok {
			r = "%s"
		}
		return l + r, true
	}
	return "", false
}

// formatVerb matches a fmt verb with its flags, width and precision.
var formatVerb = regexp.MustCompile(`%[-+# 0]*[0-9]*(?:\.[0-9]*)?[a-zA-Z%]`)

// parseFormat splits s at its format verbs. Backticks are dropped: a
// Markdown code span cannot show them.
func parseFormat(s string) []piece {
	s = strings.ReplaceAll(s, "`", "")
	var ps []piece
	last := 0
	for _, loc := range formatVerb.FindAllStringIndex(s, -1) {
		verb := s[loc[1]-1]
		if verb == '%' {
			continue // %% stays literal text, with both signs: harmless
		}
		if loc[0] > last {
			ps = append(ps, piece{lit: s[last:loc[0]]})
		}
		ps = append(ps, piece{verb: verb})
		last = loc[1]
	}
	if last < len(s) {
		ps = append(ps, piece{lit: s[last:]})
	}
	return ps
}

// fit reports whether sample occurs in some text one of the strings can
// produce, with enough of it matched by literal text rather than taken by
// verbs: any sample fits "%s".
func (src errorStrings) fit(sample string) bool {
	need := literalNeeded(sample)
	for _, ps := range src {
		for _, tail := range tails(ps, sample[0]) {
			if src.prefixOf(sample, tail, 0) >= need {
				return true
			}
		}
	}
	return false
}

// literalNeeded is how much of a sample must be matched by literal text:
// all of a short one, 12 bytes of a longer one.
func literalNeeded(sample string) int {
	return min(len(strings.ReplaceAll(sample, placeholder, "")), 12)
}

// tails returns ps from each place where text beginning with first can
// start: a byte of a literal that is first, every verb, and the end.
func tails(ps []piece, first byte) [][]piece {
	var out [][]piece
	for i, p := range ps {
		if p.verb != 0 {
			out = append(out, ps[i:])
			continue
		}
		for k := range len(p.lit) {
			if p.lit[k] == first || first == placeholder[0] {
				out = append(out, append([]piece{{lit: p.lit[k:]}}, ps[i+1:]...))
			}
		}
	}
	return append(out, nil)
}

// prefixOf reports how s can begin some text ps produces: the most bytes
// of s that literal text matched, or -1 when it cannot. depth bounds how
// deep %w follows wrapped errors.
func (src errorStrings) prefixOf(s string, ps []piece, depth int) int {
	if s == "" {
		return 0
	}
	if strings.HasPrefix(s, placeholder) {
		// Left-out text: whatever ps produces up to any point.
		best := -1
		for _, tail := range tails(ps, placeholder[0]) {
			best = max(best, src.prefixOf(s[len(placeholder):], tail, depth))
		}
		return best
	}
	if len(ps) == 0 {
		return -1
	}
	p := ps[0]
	if p.verb == 0 {
		// The text of s up to a placeholder must be the literal's next.
		text, _, _ := strings.Cut(s, placeholder)
		n := min(len(text), len(p.lit))
		if s[:n] != p.lit[:n] {
			return -1
		}
		next := ps[1:]
		if n < len(p.lit) {
			next = append([]piece{{lit: p.lit[n:]}}, next...)
		}
		rest := src.prefixOf(s[n:], next, depth)
		if rest < 0 {
			return -1
		}
		return n + rest
	}
	if p.verb == 'w' && len(ps) == 1 {
		// A wrapped error ends the message: the rest of s is its text,
		// which the code writes too, held to the same standard as a
		// sample. (Elsewhere %w is read as a plain value.)
		if depth >= 3 {
			return -1
		}
		// The same rest of a sample comes here from many places: its
		// answer is remembered (per set of sources), or the search takes
		// minutes under the race detector.
		key := wrapKey{src: fmt.Sprintf("%p", src), s: s, depth: depth}
		if got, ok := wrapped.Load(key); ok {
			return got.(int)
		}
		need := literalNeeded(s)
		best := -1
		for _, inner := range src {
			if got := src.prefixOf(s, inner, depth+1); got >= need {
				best = max(best, got)
			}
		}
		wrapped.Store(key, best)
		return best
	}
	best := -1
	for k := 1; k <= len(s); k++ {
		took := src.verbTakes(p.verb, s[:k], k == len(s))
		if took < 0 {
			continue
		}
		if rest := src.prefixOf(s[k:], ps[1:], depth); rest >= 0 {
			best = max(best, took+rest)
		}
	}
	return best
}

// wrapKey names what prefixOf found for the text s that a %w at depth
// prints, with the sources it searched.
type wrapKey struct {
	src, s string
	depth  int
}

// wrapped remembers prefixOf's answers for wrapped errors (wrapKey).
var wrapped sync.Map

// verbTakes reports whether a verb can print v: 0 if it can, -1 if not;
// partial is set when v ends the sample, so that the value may go on.
func (src errorStrings) verbTakes(verb byte, v string, partial bool) int {
	if v == placeholder {
		return 0
	}
	switch verb {
	case 'q':
		inner, ok := strings.CutPrefix(v, `"`)
		if ok && (partial && !strings.Contains(inner, `"`) || len(inner) > 0 && strings.Index(inner, `"`) == len(inner)-1) {
			return 0
		}
		return -1
	case 'd':
		if strings.Trim(v, "-0123456789") == "" {
			return 0
		}
		return -1
	}
	// A value (%s, %v): a name, a number, a list; an error chain (": ")
	// is not a value.
	if len(v) > 80 || strings.Contains(v, ": ") {
		return -1
	}
	return 0
}

func TestSampleErrorMatching(t *testing.T) {
	t.Parallel()
	var src errorStrings
	for _, s := range []string{
		"no JetStream stream captures subject %q; create one",
		"%s: %w",
		"header %q: %w",
		"value must be a string, got %s",
		"PUBLISHER_URL: %w",
		"malformed %s URL %q: expected scheme://host",
		"lease expired (relay %s)",
		"table %s lacks column(s) %s; run `relay-cli migrate` to add what is missing",
		"BATCH_SIZE must be positive, got %d",
	} {
		src = append(src, parseFormat(s))
	}
	mark := func(s string) string { return samplePlaceholder.ReplaceAllString(s, placeholder) }
	for _, s := range []string{
		`no JetStream stream captures subject "…"`,
		`no JetStream stream captures subject "orders.paid"; create one`,
		`no JetStream stream captures subject "orders.paid"; create …`,
		`stream captures subject`,
		`header "tags": value must be a string, got an array`,
		`PUBLISHER_URL: malformed publisher URL "nats://u:xxxxx@[::1"`,
		`lease expired (relay <id>)`,
		`table x lacks column(s) attempts, seq; run relay-cli migrate …`,
		`BATCH_SIZE must be positive, got 0`,
	} {
		if !src.fit(mark(s)) {
			t.Errorf("%q does not fit, want it to", s)
		}
	}
	for _, s := range []string{
		`no stream`,                                   // words the code never writes together
		`nats: no stream for subject "x"`,             // only "%s: %w" could take it, and its inner text fits nothing
		`PUBLISHER_URL: something else entirely`,      // a wrapped error must fit too
		`header "tags": value must be a number`,       // wrong wording after the verb
		`BATCH_SIZE must be positive, got zero`,       // %d prints digits
		`no JetStream stream captures subject orders`, // %q prints quotes
	} {
		if src.fit(mark(s)) {
			t.Errorf("%q fits, want it not to", s)
		}
	}
}
