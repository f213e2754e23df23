package main

import (
	"runtime/debug"
)

// The garbage collector's defaults for the relay, used unless GOGC or
// GOMEMLIMIT is set. The relay's live heap is small (batches in flight,
// bounded by MAX_BATCH_BYTES) and its garbage is churn per batch: with
// Go's default GOGC=100 it collects so often that the collector and the
// return of memory to the OS cost about a quarter of its CPU. GOGC=400
// collects a fifth as often; the memory limit keeps the heap, whatever the
// payload sizes, within what the defaults promise (see docs/benchmarks.md).
const (
	gcPercentDefault   = 400
	memoryLimitDefault = 192 << 20
)

// tuneGC applies the defaults for what the environment leaves unset, and
// returns the settings in force for the start-up log.
func tuneGC(environ map[string]string) (gogc string, memLimit string) {
	gogc, memLimit = environ["GOGC"], environ["GOMEMLIMIT"]
	if gogc == "" {
		debug.SetGCPercent(gcPercentDefault)
		gogc = "400 (default)"
	}
	if memLimit == "" {
		debug.SetMemoryLimit(memoryLimitDefault)
		memLimit = "192MiB (default)"
	}
	return gogc, memLimit
}
