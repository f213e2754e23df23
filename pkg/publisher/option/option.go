// Package option reads a broker driver's URL query options from one
// declaration. A driver declares each option once, with its name, kind,
// default, documentation, whether it is secret and how it is validated; the
// unknown-option check ("did you mean …?"), the validation messages (which
// name the option and the fix), the masking of secret values and the
// option table in docs/brokers.md all follow from that declaration instead
// of from hand-written lists that drift apart. Durations read as
// internal/duration reads them (5s, 1m30s, 7d) wherever a driver takes one,
// and the tls_* options are one group built by internal/tlsconfig.
//
// The package links no broker client, so drivers and tools alike may use
// it.
package option

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/relay/internal/duration"
	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/internal/spelling"
)

// Set is the options one driver declares, in the order its documentation
// lists them.
type Set struct {
	driver string // names the URL in errors: "nats" gives "nats URL: …"
	specs  []*spec
	// unknownHint follows the unknown-option error, for drivers where a
	// misplaced parameter has a likely home (the webhook's query=).
	unknownHint string
	// checks span several options of a group (tls_cert with tls_key); they
	// run once every value has been read.
	checks []func(Values) error
}

// spec is one declared option.
type spec struct {
	name string
	doc  string
	// def is the Default column of the documentation's table.
	def string
	// secret values are masked by Redact and never quoted in an error.
	secret bool
	// repeat lets the option be given more than once (header=, query=).
	repeat bool
	// joined options share the documentation row of the option before.
	joined bool
	// parse turns a present, non-empty raw value into the typed one, or
	// says why it cannot ("is not …" or a reason of its own). Nil keeps
	// the raw string.
	parse func(raw string) (any, error)
	// parseEmpty runs parse on an empty value too; otherwise an empty value
	// is the same as none, as drivers have always read it.
	parseEmpty bool
}

// New starts the declaration of a driver's options. driver names the URL
// in every error ("nats URL: timeout=…").
func New(driver string) *Set { return &Set{driver: driver} }

// UnknownHint appends hint to the unknown-option error, for the mistake a
// driver's users are likely to make.
func (s *Set) UnknownHint(hint string) *Set {
	s.unknownHint = hint
	return s
}

// Names returns the declared option names in order.
func (s *Set) Names() []string {
	names := make([]string, len(s.specs))
	for i, sp := range s.specs {
		names[i] = sp.name
	}
	return names
}

// Driver returns the name given to New.
func (s *Set) Driver() string { return s.driver }

func (s *Set) add(sp *spec) *spec {
	if slices.ContainsFunc(s.specs, func(o *spec) bool { return o.name == sp.name }) {
		panic("option " + sp.name + " declared twice for " + s.driver) // a programming mistake, found by any test
	}
	s.specs = append(s.specs, sp)
	return sp
}

func (s *Set) lookup(name string) *spec {
	for _, sp := range s.specs {
		if sp.name == name {
			return sp
		}
	}
	return nil
}

// Errorf returns an error about the driver's URL, prefixed as every error
// of the set is: for the checks that span several options.
func (s *Set) Errorf(format string, args ...any) error {
	return s.wrap(fmt.Errorf(format, args...))
}

// wrap prefixes err with the URL it is about; a set without a driver name
// (a group parsed on its own) leaves it bare.
func (s *Set) wrap(err error) error {
	if s.driver == "" {
		return err
	}
	return fmt.Errorf("%s URL: %w", s.driver, err)
}

// Rule adds a check that spans several options (one needs another, two
// exclude each other). It runs once every value is read; its error says
// what to change and gets the URL's prefix.
func (s *Set) Rule(check func(Values) error) {
	s.checks = append(s.checks, check)
}

// Values are a URL query read against a Set: every value is known, given
// no more often than allowed, and valid for its kind.
type Values struct {
	q      url.Values
	parsed map[*spec]any
}

// Parse checks q against the declaration and reads every value. The first
// mistake, in declaration order, is the error: an unknown option (with the
// nearest known name), an option given twice, or a value that is not of
// its kind.
func (s *Set) Parse(q url.Values) (Values, error) {
	v := Values{q: q, parsed: map[*spec]any{}}
	unknown := make([]string, 0)
	for key := range q {
		if s.lookup(key) == nil {
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown) // the same URL gives the same error
		return v, s.unknownError(unknown[0])
	}
	for _, sp := range s.specs {
		raws, ok := q[sp.name]
		if !ok {
			continue
		}
		if len(raws) > 1 && !sp.repeat {
			return v, s.Errorf("option %s is given %d times; give it once", sp.name, len(raws))
		}
		if sp.parse == nil {
			continue
		}
		var values []any
		for _, raw := range raws {
			if raw == "" && !sp.parseEmpty {
				continue
			}
			x, err := sp.parse(raw)
			if err != nil {
				return v, s.valueError(sp, raw, err)
			}
			values = append(values, x)
		}
		if len(values) > 0 {
			v.parsed[sp] = values[0]
		}
	}
	for _, check := range s.checks {
		if err := check(v); err != nil {
			return v, s.wrap(err)
		}
	}
	return v, nil
}

// valueError names the option, its value unless secret, and why.
func (s *Set) valueError(sp *spec, raw string, why error) error {
	shown := strconv.Quote(raw)
	if sp.secret {
		shown = redact.Mask
	}
	if strings.HasPrefix(why.Error(), "is ") {
		return s.wrap(fmt.Errorf("%s=%s %w", sp.name, shown, why)) // timeout="5" is not …
	}
	return s.wrap(fmt.Errorf("%s=%s: %w", sp.name, shown, why))
}

func (s *Set) unknownError(key string) error {
	if len(s.specs) == 0 {
		return s.wrap(fmt.Errorf("unknown option %q: the driver takes no options", key))
	}
	msg := fmt.Sprintf("unknown option %q (known: %s)", key, strings.Join(s.Names(), ", "))
	if near := spelling.Nearest(strings.ToLower(key), s.Names()); near != "" {
		msg += "; did you mean " + near + "?"
	}
	if s.unknownHint != "" {
		msg += " " + s.unknownHint
	}
	return s.wrap(errors.New(msg))
}

// Has reports whether the URL gives the option, even empty.
func (v Values) Has(name string) bool { return v.q.Has(name) }

// Redact returns rawURL with the user info's password and the value of
// every option declared secret masked, for log lines. The URL keeps its
// shape (the order and spelling of its options); options it does not
// declare are left to redact.URL's patterns.
func (s *Set) Redact(rawURL string) string {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return redact.URL(rawURL)
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	params := strings.Split(query, "&")
	for i, p := range params {
		key, _, _ := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(key); err == nil {
			if sp := s.lookup(name); sp != nil && sp.secret {
				params[i] = key + "=" + redact.Mask
			}
		}
	}
	out := base + "?" + strings.Join(params, "&")
	if hasFragment {
		out += "#" + fragment
	}
	return redact.URL(out)
}

// ---- Kinds ------------------------------------------------------------------

// Option is what every kind's declaration shares.
type Option struct{ sp *spec }

// Name is the option's name in the URL.
func (o Option) Name() string { return o.sp.name }

// joinRow puts the option on the documentation row of the one declared
// before it, as tls_cert and tls_key share one.
func (o Option) joinRow() { o.sp.joined = true }

// String is an option whose value is text.
type String struct {
	Option
	def string
}

// String declares a text option; def is its value when the URL does not
// give it, or gives it empty.
func (s *Set) String(name, def, doc string) *String {
	sp := s.add(&spec{name: name, doc: doc, def: docDefault(def)})
	return &String{Option{sp}, def}
}

// Secret masks the value in logs and errors.
func (o *String) Secret() *String { o.sp.secret = true; return o }

// Repeatable lets the option be given more than once; read it with All.
func (o *String) Repeatable() *String { o.sp.repeat = true; return o }

// DocDefault sets the Default column when the default is not a plain
// value (another option's, say).
func (o *String) DocDefault(text string) *String { o.sp.def = text; return o }

// JoinRow documents the option on the row of the option declared before.
func (o *String) JoinRow() *String { o.joinRow(); return o }

// OneOf refuses any value but these.
func (o *String) OneOf(values ...string) *String {
	return o.Check(func(v string) error {
		if slices.Contains(values, v) {
			return nil
		}
		return fmt.Errorf("is not one of %s", strings.Join(values, ", "))
	})
}

// Check validates a non-empty value with check, whose error says why it is
// wrong ("is not …", or a reason of its own) and how to fix it.
func (o *String) Check(check func(string) error) *String {
	o.sp.parse = func(raw string) (any, error) { return raw, check(raw) }
	return o
}

// CheckEmpty runs the check on an empty value too, for options where
// empty is a mistake rather than the default.
func (o *String) CheckEmpty() *String { o.sp.parseEmpty = true; return o }

// Get returns the value, or the default when none or an empty one is
// given.
func (o *String) Get(v Values) string {
	if x := v.q.Get(o.sp.name); x != "" {
		return x
	}
	return o.def
}

// Lookup returns the value as given, empty included, and whether it is.
func (o *String) Lookup(v Values) (string, bool) {
	if !v.q.Has(o.sp.name) {
		return "", false
	}
	return v.q.Get(o.sp.name), true
}

// All returns every value of a repeatable option, in URL order.
func (o *String) All(v Values) []string { return v.q[o.sp.name] }

// Bool is a true-or-false option.
type Bool struct {
	Option
	def bool
}

// Bool declares a true-or-false option (strconv.ParseBool's spellings).
func (s *Set) Bool(name string, def bool, doc string) *Bool {
	sp := s.add(&spec{name: name, doc: doc, def: "`" + strconv.FormatBool(def) + "`"})
	sp.parse = func(raw string) (any, error) {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return nil, errors.New("is not true or false")
		}
		return b, nil
	}
	return &Bool{Option{sp}, def}
}

// JoinRow documents the option on the row of the option declared before.
func (o *Bool) JoinRow() *Bool { o.joinRow(); return o }

// Get returns the value, or the default.
func (o *Bool) Get(v Values) bool {
	if b, ok := v.parsed[o.sp].(bool); ok {
		return b
	}
	return o.def
}

// Duration is a positive duration, in internal/duration's syntax.
type Duration struct {
	Option
	def     time.Duration
	min     time.Duration
	minWhy  string
	example string
}

// Duration declares a positive duration option: Go's syntax, or days and
// weeks (7d), as every duration the relay reads.
func (s *Set) Duration(name string, def time.Duration, doc string) *Duration {
	sp := s.add(&spec{name: name, doc: doc, def: "`" + formatDuration(def) + "`"})
	d := &Duration{Option: Option{sp}, def: def, example: formatDuration(def)}
	sp.parse = d.parse
	return d
}

func (d *Duration) parse(raw string) (any, error) {
	v, err := duration.Parse(raw)
	if err != nil || v <= 0 {
		return nil, fmt.Errorf("is not a positive duration such as %s or 7d", d.example)
	}
	if v < d.min {
		return nil, fmt.Errorf("is under %s; %s", formatDuration(d.min), d.minWhy)
	}
	return v, nil
}

// Min refuses durations under least, saying why.
func (d *Duration) Min(least time.Duration, why string) *Duration {
	d.min, d.minWhy = least, why
	return d
}

// Get returns the value, or the default.
func (d *Duration) Get(v Values) time.Duration {
	if x, ok := v.parsed[d.sp].(time.Duration); ok {
		return x
	}
	return d.def
}

// formatDuration writes a duration as an operator would: 2m and 1h, not
// time.Duration's 2m0s and 1h0m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Int is a whole-number option within bounds.
type Int struct {
	Option
	def      int64
	min, max int64
	unit     string // "bytes", "entries"; empty for a bare number
	want     string // overrides the phrase built from the bounds
	hint     string
}

// Int declares a whole-number option of at least 1 unless Min says
// otherwise.
func (s *Set) Int(name string, def int64, doc string) *Int {
	sp := s.add(&spec{name: name, doc: doc, def: "`" + strconv.FormatInt(def, 10) + "`"})
	n := &Int{Option: Option{sp}, def: def, min: 1, max: 1<<63 - 1}
	sp.parse = n.parse
	return n
}

func (n *Int) parse(raw string) (any, error) {
	x, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || x < n.min || x > n.max {
		msg := "is not " + n.phrase()
		if n.hint != "" {
			msg += "; " + n.hint
		}
		return nil, errors.New(msg)
	}
	return x, nil
}

// phrase says what the option wants: "a positive number of bytes", "a
// number from 1 to 4096".
func (n *Int) phrase() string {
	if n.want != "" {
		return n.want
	}
	what := "integer"
	if n.unit != "" {
		what = "number of " + n.unit
	}
	bounded := n.max != 1<<63-1
	switch {
	case n.min == 1 && !bounded:
		return "a positive " + what
	case n.min == 1:
		return fmt.Sprintf("a positive %s up to %d", what, n.max)
	}
	article := "a"
	if n.unit == "" {
		article = "an" // an integer
	}
	if !bounded {
		return fmt.Sprintf("%s %s of at least %d", article, what, n.min)
	}
	return fmt.Sprintf("%s %s from %d to %d", article, what, n.min, n.max)
}

// Min sets the least value (1 unless set).
func (n *Int) Min(least int64) *Int { n.min = least; return n }

// Max sets the greatest value.
func (n *Int) Max(most int64) *Int { n.max = most; return n }

// Unit names what is counted, for the error: "bytes", "entries".
func (n *Int) Unit(unit string) *Int { n.unit = unit; return n }

// Want replaces the error's description of a valid value.
func (n *Int) Want(phrase string) *Int { n.want = phrase; return n }

// Hint adds the fix to the error: where the right value is found.
func (n *Int) Hint(hint string) *Int { n.hint = hint; return n }

// DocDefault sets the Default column when the default is not a plain
// number ("none" for an option whose absence means no limit).
func (n *Int) DocDefault(text string) *Int { n.sp.def = text; return n }

// Get returns the value, or the default.
func (n *Int) Get(v Values) int64 {
	if x, ok := v.parsed[n.sp].(int64); ok {
		return x
	}
	return n.def
}

// Lookup returns the value and whether the URL gives one.
func (n *Int) Lookup(v Values) (int64, bool) {
	x, ok := v.parsed[n.sp].(int64)
	return x, ok
}

// docDefault writes a default for the documentation's table.
func docDefault(def string) string {
	if def == "" {
		return "none"
	}
	return "`" + def + "`"
}
