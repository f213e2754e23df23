// Package listen explains why a program could not listen on the address a
// setting names — above all a port something else holds — in the same
// words for the relay's HTTP_ADDR and relay-cli console's --addr.
package listen

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// Taken describes, for Error, the setting that named the address and what
// listens there.
type Taken struct {
	// Setting names the address as the user set it: "HTTP_ADDR",
	// "--addr", "CONSOLE_ADDR".
	Setting string
	// Holder is who most likely holds the port: "another relay on this
	// host".
	Holder string
	// Serves says what is served there: "the relay serves /healthz,
	// /readyz and /metrics there".
	Serves string
	// Fix says how to choose another port, given the one after addr's:
	// "set HTTP_ADDR to a free port, such as HTTP_ADDR=:8081".
	Fix func(next string) string
	// Fallback is the port to suggest when addr's is no number.
	Fallback string
}

// Error explains err, net.Listen's failure on addr: for a taken port, who
// may hold it, how to find out, and how to choose another port or free
// this one; for any other failure, the setting and the address.
func Error(addr string, err error, t Taken) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s is taken (%s, or another program: `ss -ltnp` shows which); "+
			"%s: %s, or stop what holds it: %w", t.Setting, addr, t.Holder, t.Serves, t.Fix(NextPort(addr, t.Fallback)), err)
	}
	return fmt.Errorf("%s %s: %w", t.Setting, addr, err)
}

// NextPort returns the port after addr's, to suggest in place of a taken
// one, or fallback when addr has no port number below 65535.
func NextPort(addr, fallback string) string {
	_, port, _ := net.SplitHostPort(addr)
	if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65535 {
		return strconv.Itoa(n + 1)
	}
	return fallback
}
