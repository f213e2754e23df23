// Package redact removes secrets from connection URLs before they reach a log
// line, an error message or command output.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every secret.
const Mask = "xxxxx"

var (
	// userinfoPassword finds "scheme://user:password@", also in strings that
	// url.Parse rejects, and in comma-separated broker lists. Like url.Parse,
	// it ends the password at the last '@', so a user name (Azure's
	// user@server) or a password containing '@' leaks nothing.
	userinfoPassword = regexp.MustCompile(`(://[^:/\s]*):\S*@`)
	// secretParam finds query parameters that carry credentials.
	secretParam = regexp.MustCompile(`(?i)((?:^|[?&;\s])(?:password|passwd|pass|pwd|secret|token|sslpassword|nkey|sasl_password)=)[^&;\s]*`)
)

// URL returns raw with any password, secret query parameter or key=value
// password replaced by Mask. It never fails: a string it cannot parse is
// scrubbed by pattern.
func URL(raw string) string {
	out := userinfoPassword.ReplaceAllString(raw, "${1}:"+Mask+"@")
	return secretParam.ReplaceAllString(out, "${1}"+Mask)
}

// Error returns err's text with every secret of the given URLs removed, for
// errors from libraries that may quote the URL they were given.
func Error(err error, urls ...string) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	for _, raw := range urls {
		msg = strings.ReplaceAll(msg, raw, URL(raw))
		if u, perr := url.Parse(raw); perr == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, Mask)
			}
		}
	}
	return URL(msg)
}
