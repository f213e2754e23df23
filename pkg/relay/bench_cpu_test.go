package relay_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU time, to report what each event costs the database server and the
// relay: on a shared machine throughput varies with the neighbours' load,
// CPU per event much less.

// serverCPU returns the user and system CPU time of every process of the
// -storage database's server (PostgreSQL: the postmaster, every backend
// and background worker; MariaDB/MySQL: mariadbd or mysqld, or
// BENCH_MARIADB_PID), zero when none can be read. Backends that exit
// between two readings take their time with them: benchmarks read it
// while their connections stay open.
func serverCPU() time.Duration {
	if pid := os.Getenv("BENCH_MARIADB_PID"); pid != "" && *benchStorage == "mysql" {
		return processCPU(pid)
	}
	names := map[string]bool{"postgres": true}
	if *benchStorage == "mysql" {
		names = map[string]bool{"mariadbd": true, "mysqld": true}
	}
	dirs, _ := os.ReadDir("/proc")
	var total time.Duration
	for _, d := range dirs {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		comm, err := os.ReadFile("/proc/" + d.Name() + "/comm")
		if err != nil || !names[strings.TrimSpace(string(comm))] {
			continue
		}
		total += processCPU(d.Name())
	}
	return total
}

// processCPU reads one process's user and system CPU time from /proc.
func processCPU(pid string) time.Duration {
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
