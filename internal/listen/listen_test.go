package listen

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// A taken port is explained with the setting, the holder, the way out and
// the next port; another failure with the setting and the address only.
func TestError(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	_, lerr := net.Listen("tcp", addr)
	if lerr == nil {
		t.Fatal("listening twice on one port succeeded")
	}
	taken := Taken{Setting: "--addr", Holder: "another console", Serves: "pages are served there",
		Fix: func(next string) string { return "use port " + next }, Fallback: "8091"}
	msg := Error(addr, lerr, taken).Error()
	for _, want := range []string{"--addr " + addr + " is taken (another console", "use port " + NextPort(addr, ""), "or stop what holds it", "address already in use"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if msg := Error("x:1", errors.New("no such host"), taken).Error(); msg != "--addr x:1: no such host" {
		t.Errorf("another failure: %q", msg)
	}
	for addr, want := range map[string]string{"127.0.0.1:8090": "8091", ":65535": "8091", "[::1]:80": "81", "host:http": "8091"} {
		if got := NextPort(addr, "8091"); got != want {
			t.Errorf("NextPort(%q) = %q, want %q", addr, got, want)
		}
	}
}
