package main

import "testing"

func TestByteSize(t *testing.T) {
	t.Parallel()
	good := map[string]int64{
		"1048576": 1 << 20, "8MiB": 8 << 20, "512KiB": 512 << 10, "1GiB": 1 << 30,
		"500KB": 500_000, "8MB": 8_000_000, "2GB": 2_000_000_000, "100B": 100, " 4 MiB ": 4 << 20, "0": 0,
	}
	for in, want := range good {
		var b byteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || int64(b) != want {
			t.Errorf("%q = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "8 mib", "-1", "1.5MiB", "MiB", "8TiB", "99999999999GiB"} {
		var b byteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q = %d, want an error", in, b)
		}
	}
	for b, want := range map[byteSize]string{8 << 20: "8MiB", 512 << 10: "512KiB", 1 << 30: "1GiB", 3 << 30: "3GiB", 1000: "1000"} {
		if got := b.String(); got != want {
			t.Errorf("String(%d) = %q, want %q", int64(b), got, want)
		}
	}
}
