//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup keeps the terminal's Ctrl-C from reaching the relay
// directly: the demo stops it with one SIGTERM, and a second signal would
// make the relay exit at once instead of shutting down cleanly.
func ownProcessGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }
