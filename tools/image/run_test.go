package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The servers `make test-image` starts or finds (scripts/services.sh).
const (
	pgAddr   = "127.0.0.1:5432"
	natsAddr = "127.0.0.1:4222"
)

// podmanLimits are the flags that let podman 4.3 start a container on this
// kind of machine, where the session runs as root without
// CAP_SYS_RESOURCE, so that no process can raise a hard limit:
//
//   - By default podman writes RLIMIT_NOFILE 1048576 (and RLIMIT_NPROC
//     32768) into the container's spec. Above this process's hard limit
//     (20000 here) setrlimit fails: crun "setrlimit `RLIMIT_NOFILE`:
//     Operation not permitted", runc "error setting rlimit type 7".
//   - With --ulimit nofile alone, podman asks for RLIMIT_NPROC 1048576,
//     above the 32768 podman lowers its own limit to when it starts, which
//     the runtime, its child, inherits: "setrlimit `RLIMIT_NPROC`" (crun),
//     "rlimit type 6" (runc). Hence nproc at most 32768.
//   - A containers.conf with `default_ulimits = []` (CONTAINERS_CONF) also
//     works: podman then writes no rlimits and the container inherits the
//     host's. The flags need no file.
//   - crun then stops at "cgroups in hybrid mode not supported, drop all
//     controllers from cgroupv2" (cgroup v1 controllers beside
//     /sys/fs/cgroup/unified); runc runs, so the test asks for it when it
//     is installed.
func podmanLimits(t *testing.T) []string {
	t.Helper()
	var nofile, nproc syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Getrlimit(6 /* RLIMIT_NPROC */, &nproc); err != nil {
		t.Fatal(err)
	}
	files := min(nofile.Max, 1048576)
	procs := min(nproc.Max, 32768)
	args := []string{
		"--ulimit", fmt.Sprintf("nofile=%d:%d", files, files),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", procs, procs),
	}
	if _, err := exec.LookPath("runc"); err == nil {
		args = append(args, "--runtime", "runc")
	}
	return args
}

func podman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("podman", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func mustPodman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podman(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func psql(t *testing.T, sql string) {
	t.Helper()
	out, err := exec.Command("psql", "-h", "127.0.0.1", "-p", "5432", "-U", "postgres", "-d", "postgres",
		"-v", "ON_ERROR_STOP=1", "-qc", sql).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v: %s", sql, err, out)
	}
}

// TestRunWithPodman runs the image `make image` built with podman, on the
// host's network, against the local PostgreSQL and NATS.
func TestRunWithPodman(t *testing.T) {
	archive := os.Getenv("IMAGE_ARCHIVE")
	if archive == "" {
		t.Skip("IMAGE_ARCHIVE is not set: make test-image builds the image and runs it")
	}
	for _, tool := range []string{"podman", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make test-image installs podman and runc from Debian packages when it can)", tool)
		}
	}
	for _, addr := range []string{pgAddr, natsAddr} {
		if !answers(addr) {
			t.Skipf("nothing answers on %s (make test-image starts PostgreSQL and NATS)", addr)
		}
	}
	ref := readArchive(t, archive).ref
	if _, err := podman(t, "image", "exists", ref); err != nil {
		// Loaded by this test: removed after it.
		t.Cleanup(func() { podman(t, "rmi", "-f", ref) })
	}
	out := mustPodman(t, "load", "-i", archive)
	if !strings.Contains(out, ref) {
		t.Fatalf("podman load did not load %s:\n%s", ref, out)
	}

	suffix := make([]byte, 4)
	rand.Read(suffix)
	id := "imgtest_" + hex.EncodeToString(suffix)
	db := id
	psql(t, "CREATE DATABASE "+db)
	t.Cleanup(func() { psql(t, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	storageURL := "postgres://postgres@" + pgAddr + "/" + db + "?sslmode=disable"
	publisherURL := "nats://" + natsAddr
	stream := strings.ToUpper(id)
	eventType := id + ".created"

	nc, err := nats.Connect(publisherURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // after the stream's deletion: cleanups run last first
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := js.DeleteStream(stream); err != nil && !errors.Is(err, nats.ErrStreamNotFound) {
			t.Errorf("deleting stream %s: %v", stream, err)
		}
	})

	limits := podmanLimits(t)
	version, _ := podman(t, "--version")
	t.Logf("%s, podman run %s", strings.TrimSpace(version), strings.Join(limits, " "))
	// A runtime that cannot start any container on this machine (its
	// rlimits, cgroups or kernel) says nothing of the image, whose layout
	// and config the other tests checked: say why, and skip. Every step
	// after a container has started must pass.
	probe := append(append([]string{"run", "--rm", "--network", "host", "--read-only"}, limits...), ref, "--version")
	if _, err := podman(t, probe...); err != nil {
		t.Skipf("podman cannot start a container here, so the image is checked statically only: %v", err)
	}
	// cli runs /app/cli in a container of its own, read-only too.
	cli := func(args ...string) string {
		t.Helper()
		a := []string{"run", "--rm", "--network", "host", "--read-only"}
		a = append(a, limits...)
		a = append(a, "-e", "STORAGE_URL="+storageURL, "-e", "PUBLISHER_URL="+publisherURL,
			"--entrypoint", "/app/cli", ref)
		return mustPodman(t, append(a, args...)...)
	}

	start := time.Now()
	cli("migrate")
	t.Logf("/app/cli migrate: %v", time.Since(start).Round(time.Millisecond))
	cli("setup-broker", "--event-type", id+".>", "--name", stream)
	var emitted struct {
		EventIDs []string `json:"event_ids"`
	}
	if err := json.Unmarshal([]byte(cli("emit", "--type", eventType, "--count", "5", "--json")), &emitted); err != nil || len(emitted.EventIDs) != 5 {
		t.Fatalf("emit: %v, ids %v", err, emitted.EventIDs)
	}

	port := freePort(t)
	const grace = 10 * time.Second
	name := id
	a := []string{"run", "-d", "--name", name, "--network", "host", "--read-only"}
	a = append(a, limits...)
	a = append(a, "-e", "STORAGE_URL="+storageURL, "-e", "PUBLISHER_URL="+publisherURL,
		"-e", "HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port), "-e", "SHUTDOWN_TIMEOUT="+grace.String(), ref)
	mustPodman(t, a...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("podman", "logs", name).CombinedOutput()
			t.Logf("relay's log:\n%s", logs)
		}
		podman(t, "rm", "-f", "-t", "0", name)
	})

	// /readyz answers 200 once the database and the broker do.
	ready := false
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
		if err != nil {
			last = err.Error()
			continue
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body.String())
		if resp.StatusCode == http.StatusOK {
			ready = true
			break
		}
	}
	if !ready {
		t.Fatalf("/readyz never answered 200; last: %s", last)
	}

	// The five events arrive in JetStream, once each, with their ids.
	var got []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		si, err := js.StreamInfo(stream)
		if err == nil && si.State.Msgs >= 5 {
			break
		}
	}
	si, err := js.StreamInfo(stream)
	if err != nil {
		t.Fatal(err)
	}
	if si.State.Msgs != 5 {
		t.Fatalf("stream %s holds %d messages, want 5", stream, si.State.Msgs)
	}
	for seq := uint64(1); seq <= 5; seq++ {
		m, err := js.GetMsg(stream, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != eventType {
			t.Errorf("message %d on %q, want %q", seq, m.Subject, eventType)
		}
		got = append(got, m.Header.Get("Nats-Msg-Id"))
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(emitted.EventIDs))
	if !slices.Equal(got, want) {
		t.Errorf("Nats-Msg-Id %v, want the emitted ids %v", got, want)
	}

	// The process runs as 65532:65532 on a read-only root filesystem.
	pid := strings.TrimSpace(mustPodman(t, "inspect", "--format", "{{.State.Pid}}", name))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") {
			for _, v := range f[1:] {
				if v != "65532" {
					t.Errorf("relay's %s %v, want 65532 everywhere", f[0], f[1:])
					break
				}
			}
		}
	}
	if !strings.Contains(string(status), "Uid:\t65532") {
		t.Errorf("relay's status has no Uid 65532:\n%s", status)
	}
	mounts, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	rootRO := false
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		// id parent major:minor root mountpoint options ...
		f := strings.Fields(sc.Text())
		if len(f) > 5 && f[4] == "/" {
			rootRO = slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	if !rootRO {
		t.Errorf("the relay's / is not mounted read-only:\n%s", mounts)
	}
	if ro := strings.TrimSpace(mustPodman(t, "inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", name)); ro != "true" {
		t.Errorf("ReadonlyRootfs = %s", ro)
	}

	// SIGTERM: exit 0, within the grace period, "relay stopped" last.
	start = time.Now()
	mustPodman(t, "kill", "--signal", "TERM", name)
	code := strings.TrimSpace(mustPodman(t, "wait", name))
	took := time.Since(start)
	t.Logf("SIGTERM → exit %s in %v", code, took.Round(time.Millisecond))
	if code != "0" {
		t.Errorf("exit code %s after SIGTERM, want 0", code)
	}
	if took > grace {
		t.Errorf("took %v to exit, more than SHUTDOWN_TIMEOUT %v", took, grace)
	}
	logs, err := exec.Command("podman", "logs", name).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(logs)), "\n")
	if !strings.Contains(lines[len(lines)-1], "relay stopped") {
		t.Errorf("the relay's last log line is %q, want relay stopped", lines[len(lines)-1])
	}
}
