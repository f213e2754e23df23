// Package fieldcheck is the rule every package's Config keeps: a zero field
// takes its documented XxxDefault, and a field that cannot work is a
// *FieldError naming the field as Go spells it ("relay: BatchSize must be
// positive, got -5"). Packages never name environment variables or flags:
// a command, which knows what set each field, renames the fields in the
// errors it shows (Rename).
package fieldcheck

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is a Config field that cannot work.
type FieldError struct {
	// Pkg is the package whose Config it is ("relay"), Field the field as
	// Go spells it from the Config ("Retry.MaxAttempts").
	Pkg, Field string

	sep    string // between the field's name and the problem: " " or ": "
	format string
	args   []any
	err    error // wrapped, when the problem is another error
}

// Field is another field of the same Config named in a problem (a bound
// that is one: "must not be below Retry.BaseDelay"), so that Rename names
// it the command's way too.
type Field string

// Error is the package, then the field, then the problem.
func (e *FieldError) Error() string { return e.Pkg + ": " + e.Field + e.Problem() }

// Problem is what follows the field's name in the message, separator
// included: " must be positive, got -5", ": unknown exporter \"statsd\"".
func (e *FieldError) Problem() string { return e.problem(nil) }

func (e *FieldError) problem(rename func(Field) string) string {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		args[i] = a
		if f, ok := a.(Field); ok && rename != nil {
			if n := rename(f); n != "" {
				args[i] = n
			}
		}
	}
	return e.sep + fmt.Sprintf(e.format, args...)
}

func (e *FieldError) Unwrap() error { return e.err }

// Checker collects the FieldErrors of one package's Config.
type Checker struct {
	pkg  string
	errs []error
}

// Check starts collecting the errors of a Config of package pkg, which is
// its Go name.
func Check(pkg string) *Checker { return &Checker{pkg: pkg} }

// Expect records an error for field unless ok: the field's name, a space,
// then format's text. Args of type Field are fields named in the problem.
func (c *Checker) Expect(field string, ok bool, format string, args ...any) {
	if !ok {
		c.errs = append(c.errs, &FieldError{Pkg: c.pkg, Field: field, sep: " ", format: format, args: args})
	}
}

// Wrap records err, when it is not nil, as field's problem: the field's
// name, a colon, then err's text.
func (c *Checker) Wrap(field string, err error) {
	if err != nil {
		c.errs = append(c.errs, &FieldError{Pkg: c.pkg, Field: field, sep: ": ", format: "%s", args: []any{err.Error()}, err: err})
	}
}

// Err returns the errors recorded, joined, or nil.
func (c *Checker) Err() error { return errors.Join(c.errs...) }

// Default sets *v to def when *v is zero: the rule for every field that
// has a default.
func Default[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Rename rewrites the FieldErrors in err, alone or among joined errors
// (errors.Join, at any depth), to name each field as name says, such as
// by the environment variable that set it; name returns "" for a field it
// does not know, which keeps its Go name and package. Other errors stay as
// they are. Joined errors come back flat, one a line, each message once: a
// variable that sets the fields of two packages is reported once when
// both refuse it alike.
func Rename(err error, name func(pkg, field string) string) error {
	if err == nil {
		return nil
	}
	var out []error
	seen := map[string]bool{}
	var walk func(error)
	walk = func(e error) {
		if parts, ok := joined(e); ok {
			for _, p := range parts {
				walk(p)
			}
			return
		}
		if fe, ok := e.(*FieldError); ok {
			if n := name(fe.Pkg, fe.Field); n != "" {
				e = &renamed{msg: n + fe.problem(func(f Field) string { return name(fe.Pkg, string(f)) }), err: fe}
			}
		}
		if !seen[e.Error()] {
			seen[e.Error()] = true
			out = append(out, e)
		}
	}
	walk(err)
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// joined returns the parts of an errors.Join result: an error with
// several wrapped ones whose message is theirs, one a line.
func joined(err error) ([]error, bool) {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil, false
	}
	parts := j.Unwrap()
	msgs := make([]string, len(parts))
	for i, p := range parts {
		msgs[i] = p.Error()
	}
	return parts, err.Error() == strings.Join(msgs, "\n")
}

// renamed is a FieldError as a command names its field.
type renamed struct {
	msg string
	err *FieldError
}

func (r *renamed) Error() string { return r.msg }
func (r *renamed) Unwrap() error { return r.err }
