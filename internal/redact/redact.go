// Package redact removes secrets from connection URLs before they reach a log
// line, an error message or command output.
package redact

import (
	"net/url"
	"regexp"
	"strings"
	"unicode"
)

// Mask replaces every secret.
const Mask = "xxxxx"

var (
	// userinfoPassword finds "scheme://user:password@", also in strings that
	// url.Parse rejects, and in comma-separated broker lists. Like url.Parse,
	// it ends the password at the last '@', so a user name (Azure's
	// user@server) or a password containing '@' leaks nothing.
	userinfoPassword = regexp.MustCompile(`(://[^:/\s]*):\S*@`)
	// natsToken finds "nats://token@" and "tls://token@": NATS reads user
	// info without a colon as a token, a secret on its own.
	natsToken = regexp.MustCompile(`(?i)(\b(?:nats|tls)://)[^:/\s]+@`)
	// portStart is how the text after "host:" starts when the colon is the
	// port's: digits, then the end of the authority or of the word.
	portStart = regexp.MustCompile("^[0-9]*(?:[/?#,:;.)\\]\"'`]|$)")
	// secretParam finds query parameters that carry credentials. The
	// webhook driver's header= and query= carry whatever an endpoint wants,
	// often an API key, so their values are masked too.
	secretParam = regexp.MustCompile(`(?i)((?:^|[?&;\s])(?:password|passwd|pass|pwd|secret|token|sslpassword|nkey|sasl_password|header|query)=)[^&;\s]*`)
)

// URL returns raw with any password, secret query parameter or key=value
// password replaced by Mask. It never fails: a string it cannot parse is
// scrubbed by pattern.
func URL(raw string) string {
	out := spacedPasswords(raw)
	out = userinfoPassword.ReplaceAllString(out, "${1}:"+Mask+"@")
	out = natsToken.ReplaceAllString(out, "${1}"+Mask+"@")
	return secretParam.ReplaceAllString(out, "${1}"+Mask)
}

// spacedPasswords masks the passwords of "scheme://user:pass word@host",
// which url.Parse rejects and userinfoPassword cannot delimit: the password
// runs from the colon to the last '@' before the next URL (a later word
// containing "://") or the end of raw. It leaves log text alone unless the
// word after "://" really starts a user and password: "user:" followed by
// something other than a port, with no '@' in the word that already ends a
// user info ("u:xxxxx@db/app said ... bob@example.com" is left as it is).
func spacedPasswords(raw string) string {
	var b strings.Builder
	done := 0 // raw[:done] is written to b
	for from := 0; ; {
		i := strings.Index(raw[from:], "://")
		if i < 0 {
			break
		}
		start := from + i + 3
		from = start
		end := len(raw)
		if j := strings.Index(raw[start:], "://"); j >= 0 {
			// The next URL begins at the start of its word.
			end = start + j
			if ws := strings.LastIndexFunc(raw[start:end], unicode.IsSpace); ws >= 0 {
				end = start + ws
			}
		}
		pw, at, ok := spacedPassword(raw[start:end])
		if !ok {
			continue
		}
		b.WriteString(raw[done : start+pw])
		b.WriteString(Mask)
		done = start + at
		from = done
	}
	if done == 0 {
		return raw
	}
	b.WriteString(raw[done:])
	return b.String()
}

// spacedPassword finds, in seg (the text after "://" up to the next URL),
// a password containing white space: seg[pw:at] is the password and
// seg[at] its closing '@'.
func spacedPassword(seg string) (pw, at int, ok bool) {
	ws := strings.IndexFunc(seg, unicode.IsSpace)
	if ws < 0 {
		return 0, 0, false // no white space: userinfoPassword's case
	}
	word := seg[:ws]
	colon := strings.IndexByte(word, ':')
	if colon < 0 || strings.ContainsAny(word[:colon], "/?#[") {
		return 0, 0, false // no user before a colon: a host, path or IPv6 address
	}
	if portStart.MatchString(word[colon+1:]) {
		return 0, 0, false // "host:5432": a port, not a password
	}
	if a := strings.LastIndexByte(word, '@'); a >= 0 && endsUserinfo(word[a+1:]) {
		return 0, 0, false // the user info ends in this word
	}
	at = strings.LastIndexByte(seg, '@')
	if at < ws || at+1 == len(seg) || !isHostStart(seg[at+1]) {
		return 0, 0, false
	}
	return colon + 1, at, true
}

// endsUserinfo reports whether rest, what follows an '@', is a host with an
// optional port: then that '@' closed the user info.
func endsUserinfo(rest string) bool {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if strings.HasSuffix(rest, "]") {
		return true // [::1]
	}
	i := strings.LastIndexByte(rest, ':')
	return i < 0 || portStart.MatchString(rest[i+1:])
}

func isHostStart(c byte) bool {
	return c == '[' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
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
			pw, ok := u.User.Password()
			if !ok && isNATS(u.Scheme) {
				pw = u.User.Username() // a token
			}
			if pw != "" {
				msg = strings.ReplaceAll(msg, pw, Mask)
			}
		}
	}
	return URL(msg)
}

func isNATS(scheme string) bool {
	return strings.EqualFold(scheme, "nats") || strings.EqualFold(scheme, "tls")
}
