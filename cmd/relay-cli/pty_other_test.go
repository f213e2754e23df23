//go:build !linux

package main

import (
	"os"
	"testing"
)

type pty struct{ master, slave *os.File }

// openPTY skips: the terminal tests open pseudo-terminals the Linux way.
func openPTY(t *testing.T) pty {
	t.Skip("pseudo-terminal tests run on Linux only")
	return pty{}
}
