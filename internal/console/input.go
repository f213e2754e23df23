package console

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// InputMaxLen is the most characters one parameter may hold (an event
// type, a key, a text to find in errors). Longer values are refused, not
// sent to the storage.
const InputMaxLen = 1000

// formMaxBytes bounds the body of an action's form.
const formMaxBytes = 64 << 10

// inputError is what is wrong with one parameter of a request.
type inputError struct {
	param, problem string
	status         int
}

func (e *inputError) Error() string { return e.param + ": " + e.problem }

// handle serves pattern with h, behind checkInput: no handler sees a
// request with a parameter the storage could not take (PostgreSQL refuses
// a NUL byte and invalid UTF-8 with an encoding error), so every page and
// action answers such input with 400 naming the parameter.
func (c *Console) handle(pattern string, h http.Handler) {
	params := wildcards(pattern)
	c.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := checkInput(w, r, params); e != nil {
			user, addr := actor(r)
			// The route, not the path: the path may hold the refused value.
			c.log.Warn("console: refused input", "param", e.param, "problem", e.problem,
				"route", pattern, "user", user, "remote", addr)
			c.fail(w, r, e.status, e.Error())
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// wildcards returns the names of pattern's wildcards ({id}, {rest...}).
func wildcards(pattern string) []string {
	var names []string
	for rest := pattern; ; {
		i := strings.IndexByte(rest, '{')
		j := strings.IndexByte(rest[max(i, 0):], '}')
		if i < 0 || j < 0 {
			return names
		}
		if name := strings.TrimSuffix(rest[i+1:i+j], "..."); name != "$" {
			names = append(names, name)
		}
		rest = rest[i+j+1:]
	}
}

// checkInput checks every value r carries to a handler: the path's
// wildcards (params), the query string and, for a POST, the form body.
func checkInput(w http.ResponseWriter, r *http.Request, params []string) *inputError {
	for _, name := range params {
		if p := checkValue(r.PathValue(name)); p != "" {
			return &inputError{name, p, http.StatusBadRequest}
		}
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return &inputError{"query string", "cannot be read: " + err.Error(), http.StatusBadRequest}
	}
	if e := checkValues(q); e != nil {
		return e
	}
	if r.Method != http.MethodPost {
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, formMaxBytes)
	if err := r.ParseForm(); err != nil {
		if big := (*http.MaxBytesError)(nil); errors.As(err, &big) {
			return &inputError{"form", fmt.Sprintf("is larger than %d KiB", formMaxBytes>>10), http.StatusRequestEntityTooLarge}
		}
		return &inputError{"form", "cannot be read: " + err.Error(), http.StatusBadRequest}
	}
	return checkValues(r.PostForm)
}

// checkValues checks names and values, by name in order, so that the same
// request is refused for the same parameter every time.
func checkValues(vs url.Values) *inputError {
	for _, name := range slices.Sorted(maps.Keys(vs)) {
		if p := checkValue(name); p != "" {
			shown := name
			if len(shown) > 40 {
				shown = shown[:40] + "…"
			}
			return &inputError{fmt.Sprintf("parameter %q", shown), "its name " + p, http.StatusBadRequest}
		}
		for _, v := range vs[name] {
			if p := checkValue(v); p != "" {
				return &inputError{name, p, http.StatusBadRequest}
			}
		}
	}
	return nil
}

// checkValue says what is wrong with a value, or "". Other control
// characters are text the storage takes.
func checkValue(v string) string {
	switch {
	case strings.IndexByte(v, 0) >= 0:
		return "contains a NUL byte"
	case !utf8.ValidString(v):
		return "is not valid UTF-8"
	}
	if n := utf8.RuneCountInString(v); n > InputMaxLen {
		return fmt.Sprintf("is %d characters long, more than the %d allowed", n, InputMaxLen)
	}
	return ""
}
