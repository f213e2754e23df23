package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a number of bytes read from the environment: a plain integer
// or one with a unit, 512KiB, 8MiB, 1GiB (powers of 1024) or 500KB, 8MB, 1GB
// (powers of 1000).
type byteSize int64

var byteUnits = []struct {
	suffix string
	factor int64
}{
	// Longest suffixes first, so "MiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"B", 1},
}

func (b *byteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	factor := int64(1)
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, factor = strings.TrimSpace(num), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/factor {
		return fmt.Errorf("%q is not a size such as 8MiB, 512KiB or 1048576", string(text))
	}
	*b = byteSize(n * factor)
	return nil
}

func (b byteSize) String() string {
	for _, u := range byteUnits[:3] {
		if b >= byteSize(u.factor) && int64(b)%u.factor == 0 && (u.suffix == "GiB" || int64(b)/u.factor < 1024) {
			return fmt.Sprintf("%d%s", int64(b)/u.factor, u.suffix)
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
