package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/syncbuf"
)

// relayBinary is built once for the whole package.
var relayBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chaos-relay-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relayBinary = filepath.Join(dir, "relay")
	build := exec.Command("go", "build", "-o", relayBinary, "../../cmd/relay")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build relay:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// relayProc is one run of the relay binary (or another the tests start).
type relayProc struct {
	cmd *exec.Cmd
	// exited is closed when the process has ended; err is then its Wait
	// result.
	exited chan struct{}
	err    error
	log    syncbuf.Buffer
}

func (p *relayProc) Write(b []byte) (int, error) { return p.log.Write(b) }

// Log returns what the relay logged so far.
func (p *relayProc) Log() string { return p.log.String() }

// startRelay runs the relay with env added to the defaults below; it is
// killed when the test ends if still running.
func startRelay(t *testing.T, env ...string) *relayProc {
	t.Helper()
	cmd := exec.Command(relayBinary)
	cmd.Env = append(os.Environ(),
		"HTTP_ADDR=127.0.0.1:0",
		"LOG_FORMAT=text",
		"POLL_INTERVAL=100ms",
		"LEASE_TIMEOUT=2s",
		"REAPER_INTERVAL=200ms",
		"OTEL_METRICS_EXPORTER=none",
	)
	cmd.Env = append(cmd.Env, env...)
	return startProcess(t, cmd)
}

// startProcess starts cmd (the relay, or a consumer), keeping its output;
// it is killed when the test ends if still running.
func startProcess(t *testing.T, cmd *exec.Cmd) *relayProc {
	t.Helper()
	p := &relayProc{cmd: cmd, exited: make(chan struct{})}
	// If the test binary dies (a timeout, a panic), the process dies with
	// it instead of draining other tests' tables in the background.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", filepath.Base(cmd.Path), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// kill ends the relay with SIGKILL, as an OOM killer or a node failure
// would: no shutdown, no settling.
func (p *relayProc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("relay did not die on SIGKILL")
	}
}

// stop sends SIGTERM and requires exit code 0.
func (p *relayProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("relay exited with %v after SIGTERM; log:\n%s", p.err, p.Log())
		}
	case <-time.After(time.Minute):
		t.Fatalf("relay did not stop within a minute; log:\n%s", p.Log())
	}
}

// requireRunning fails the test if the relay has exited.
func (p *relayProc) requireRunning(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("relay exited (%v); log:\n%s", p.err, p.Log())
	default:
	}
}
