package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Units time.ParseDuration lacks and retention periods need.
const (
	day  = 24 * time.Hour
	week = 7 * day
)

// parseDuration reads a non-negative duration in Go syntax (90s, 1h30m,
// 500ms) that may also use d (24h) and w (7d): 7d, 2w, 1w3d12h. Days are
// always 24 hours; retention does not care about daylight saving.
func parseDuration(s string) (time.Duration, error) {
	bad := func(why string) error {
		return fmt.Errorf("invalid duration %q: %s; use Go syntax (90s, 36h) or d and w (7d, 2w)", s, why)
	}
	if s == "" {
		return 0, bad("empty")
	}
	if s == "0" {
		return 0, nil
	}
	var total time.Duration
	for rest := s; rest != ""; {
		// One component: a decimal number and a unit.
		n := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if n == 0 {
			return 0, bad("expected a number at " + strconv.Quote(rest))
		}
		if n < 0 {
			return 0, bad("missing unit after " + strconv.Quote(rest))
		}
		u := strings.IndexFunc(rest[n:], func(r rune) bool { return (r >= '0' && r <= '9') || r == '.' })
		if u < 0 {
			u = len(rest) - n
		}
		number, unit := rest[:n], rest[n:n+u]
		rest = rest[n+u:]

		v, err := strconv.ParseFloat(number, 64)
		if err != nil {
			return 0, bad("bad number " + strconv.Quote(number))
		}
		var d time.Duration
		switch unit {
		case "d", "w":
			size := day
			if unit == "w" {
				size = week
			}
			f := v * float64(size)
			if f >= math.MaxInt64 {
				return 0, bad("too long")
			}
			d = time.Duration(f)
		default:
			// Go's own units.
			if d, err = time.ParseDuration(number + unit); err != nil {
				if strings.Contains(err.Error(), "unknown unit") {
					return 0, bad("unknown unit " + strconv.Quote(unit))
				}
				return 0, bad("too long")
			}
		}
		if total > math.MaxInt64-d {
			return 0, bad("too long")
		}
		total += d
	}
	return total, nil
}

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
