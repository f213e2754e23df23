package fieldcheck_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
)

func TestFieldErrorsNameTheField(t *testing.T) {
	t.Parallel()
	v := fieldcheck.Check("relay")
	v.Expect("BatchSize", -5 >= 0, "must be positive, got %d", -5)
	v.Expect("PollInterval", true, "must be positive, got %s", time.Second)
	v.Expect("Retry.MaxDelay", false, "(%s) must not be below %s (%s)", time.Millisecond, fieldcheck.Field("Retry.BaseDelay"), time.Second)
	v.Wrap("Exporter", io.ErrUnexpectedEOF)
	v.Wrap("Other", nil)
	err := v.Err()
	want := "relay: BatchSize must be positive, got -5\n" +
		"relay: Retry.MaxDelay (1ms) must not be below Retry.BaseDelay (1s)\n" +
		"relay: Exporter: unexpected EOF"
	if err == nil || err.Error() != want {
		t.Fatalf("errors:\n%v\nwant:\n%s", err, want)
	}
	var fe *fieldcheck.FieldError
	if !errors.As(err, &fe) || fe.Pkg != "relay" || fe.Field != "BatchSize" || fe.Problem() != " must be positive, got -5" {
		t.Errorf("first FieldError = %+v", fe)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Error("a wrapped error is not found with errors.Is")
	}
	if err := fieldcheck.Check("relay").Err(); err != nil {
		t.Errorf("nothing recorded, Err = %v", err)
	}
}

func TestRenameNamesFieldsTheCommandsWay(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"relay.BatchSize":       "BATCH_SIZE",
		"relay.Retry.MaxDelay":  "RETRY_MAX_DELAY",
		"relay.Retry.BaseDelay": "RETRY_BASE_DELAY",
		"relay.LeaseTimeout":    "LEASE_TIMEOUT",
		"reaper.LeaseTimeout":   "LEASE_TIMEOUT",
	}
	name := func(pkg, field string) string { return vars[pkg+"."+field] }

	a := fieldcheck.Check("relay")
	a.Expect("BatchSize", false, "must be positive, got %d", -5)
	a.Expect("Retry.MaxDelay", false, "(%s) must not be below %s (%s)", time.Millisecond, fieldcheck.Field("Retry.BaseDelay"), time.Second)
	a.Expect("LeaseTimeout", false, "must be at least %s, got %s", time.Second, -time.Second)
	a.Expect("Unmapped", false, "is wrong")
	b := fieldcheck.Check("reaper")
	b.Expect("LeaseTimeout", false, "must be at least %s, got %s", time.Second, -time.Second)
	plain := errors.New("STORAGE_URL: unknown scheme")

	err := fieldcheck.Rename(errors.Join(plain, errors.Join(a.Err(), b.Err())), name)
	want := "STORAGE_URL: unknown scheme\n" +
		"BATCH_SIZE must be positive, got -5\n" +
		"RETRY_MAX_DELAY (1ms) must not be below RETRY_BASE_DELAY (1s)\n" +
		"LEASE_TIMEOUT must be at least 1s, got -1s\n" +
		"relay: Unmapped is wrong"
	if err == nil || err.Error() != want {
		t.Fatalf("renamed:\n%v\nwant:\n%s", err, want)
	}
	var fe *fieldcheck.FieldError
	if !errors.As(err, &fe) || fe.Field != "BatchSize" {
		t.Errorf("a renamed error does not unwrap to its FieldError: %+v", fe)
	}
	if !errors.Is(err, plain) {
		t.Error("other errors are not kept")
	}

	// An error that is not a join, or that wraps one, is left whole.
	single := fmt.Errorf("open: %w", a.Err())
	if got := fieldcheck.Rename(single, name); got != single {
		t.Errorf("Rename(%v) = %v, want it unchanged", single, got)
	}
	if fieldcheck.Rename(nil, name) != nil {
		t.Error("Rename(nil) is not nil")
	}
}

func TestDefaultFillsZerosOnly(t *testing.T) {
	t.Parallel()
	n, d, s := 0, 3*time.Second, ""
	fieldcheck.Default(&n, 500)
	fieldcheck.Default(&d, time.Second)
	fieldcheck.Default(&s, "x")
	if n != 500 || d != 3*time.Second || s != "x" {
		t.Errorf("Default gave %d, %s, %q; want 500, 3s, x", n, d, s)
	}
	neg := -1
	fieldcheck.Default(&neg, 500)
	if neg != -1 {
		t.Errorf("Default replaced a negative value: %d", neg)
	}
}
