package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// csrfCookie holds a random browser id; a form's token is an HMAC of it
// under a key only this process knows. Another site can make a browser send
// the cookie but can read neither it nor a page, so it cannot forge the
// token (the double-submit pattern, signed).
const csrfCookie = "relay_console_csrf"

// csrfField is the form field that carries the token.
const csrfField = "csrf"

// csrfToken returns the token for r's browser, setting the cookie when it
// has none.
func (c *Console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	id := ""
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) == 32 {
		id = ck.Value
	} else {
		id = randomHex(16)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: id, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	return c.sign(id)
}

func (c *Console) sign(id string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// checkPost refuses a POST that another origin sent or that lacks this
// browser's token, and explains which.
func (c *Console) checkPost(r *http.Request) (string, bool) {
	if origin := r.Header.Get("Origin"); origin != "" && origin != "null" {
		u, err := url.Parse(origin)
		if err != nil || u.Host != r.Host {
			return "cross-origin request refused", false
		}
	} else if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return "cross-site request refused", false
	}
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return "missing CSRF cookie: reload the page and try again", false
	}
	token := r.PostFormValue(csrfField)
	if token == "" || !hmac.Equal([]byte(token), []byte(c.sign(ck.Value))) {
		return "missing or wrong CSRF token: reload the page and try again", false
	}
	return "", true
}

// authorized reports whether r may see the console: always without a
// password, else with it as basic authentication's password or a bearer
// token.
func (c *Console) authorized(r *http.Request) bool {
	if c.cfg.Password == "" {
		return true
	}
	given := ""
	if _, pw, ok := r.BasicAuth(); ok {
		given = pw
	} else if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		given = t
	}
	return subtle.ConstantTimeCompare([]byte(given), []byte(c.cfg.Password)) == 1
}

// actor names who acted, for the log: the basic-auth user name when one
// was given, and the client's address.
func actor(r *http.Request) (user, addr string) {
	user, _, _ = r.BasicAuth()
	if user == "" {
		user = "anonymous"
	}
	addr = r.RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	return user, addr
}

// Loopback reports whether addr (host:port) listens only on a loopback
// interface, where a console needs no password.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostPort gives a Host header a port when it has none, for Loopback.
func hostPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}
