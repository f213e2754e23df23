package relay_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU time, to report what each event costs the database server and the
// relay: on a shared machine throughput varies with the neighbours' load,
// CPU per event much less.

// serverCPU returns the MariaDB/MySQL server's user and system CPU time
// (BENCH_MARIADB_PID, else the local mariadbd or mysqld), zero when it
// cannot be read.
func serverCPU() time.Duration {
	pid := os.Getenv("BENCH_MARIADB_PID")
	for _, name := range []string{"mariadbd", "mysqld"} {
		if pid != "" {
			break
		}
		out, _ := exec.Command("pgrep", "-x", name).Output()
		pid, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	if len(f) < 13 {
		return 0
	}
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * 10 * time.Millisecond // clock ticks of 10 ms
}

// selfCPU returns this process's user and system CPU time.
func selfCPU() time.Duration {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// perEvent is d divided over n events, in microseconds.
func perEvent(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
