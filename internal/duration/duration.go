// Package duration reads the durations operators write for retention
// periods and ages: Go's syntax plus days and weeks (7d, 2w). relay-cli's
// flags and the relay's DELIVERED_RETENTION and DEAD_RETENTION share it.
package duration

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Units time.ParseDuration lacks and retention periods need.
const (
	Day  = 24 * time.Hour
	Week = 7 * Day
)

// Parse reads a non-negative duration in Go syntax (90s, 1h30m,
// 500ms) that may also use d (24h) and w (7d): 7d, 2w, 1w3d12h. Days are
// always 24 hours; retention does not care about daylight saving.
func Parse(s string) (time.Duration, error) {
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
			size := Day
			if unit == "w" {
				size = Week
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
