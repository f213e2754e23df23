package main

import (
	"fmt"
	"time"

	"github.com/outbox-relay/relay/internal/duration"
)

// Units time.ParseDuration lacks and retention periods need.
const day = duration.Day

// parseDuration reads a non-negative duration in Go syntax that may also
// use d and w (duration.Parse).
func parseDuration(s string) (time.Duration, error) { return duration.Parse(s) }

// formatAge writes a duration the way an operator reads an age: 45s, 3m12s,
// 2h05m, 3d04h.
func formatAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < day:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd%02dh", int(d/day), int(d%day/time.Hour))
	}
}
