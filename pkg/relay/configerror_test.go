package relay_test

import (
	"errors"
	"testing"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
)

// An embedder finds each field that cannot work with errors.As and the
// public packages' own names for the error type, in what Validate and New
// return: every such field, joined.
func TestConfigErrorsAreFoundByTheirPublicType(t *testing.T) {
	t.Parallel()
	fields := func(err error) map[string]string {
		found := map[string]string{}
		var walk func(error)
		walk = func(err error) {
			if joined, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range joined.Unwrap() {
					walk(e)
				}
				return
			}
			var fe *relay.ConfigError
			if errors.As(err, &fe) {
				found[fe.Pkg+"."+fe.Field] = fe.Problem()
			}
		}
		walk(err)
		return found
	}
	_, err := relay.New(relay.Config{RelayID: "r", BatchSize: -1, PollInterval: -1}, nil, nil)
	got := fields(err)
	if _, ok := got["relay.BatchSize"]; !ok || len(got) != 2 {
		t.Errorf("relay.New: %v, want BatchSize and PollInterval", got)
	}
	var reaperErr *reaper.ConfigError
	if err := (reaper.Config{BatchSize: -1}).Validate(); !errors.As(err, &reaperErr) || reaperErr.Field != "BatchSize" {
		t.Errorf("reaper.Config.Validate: %v", err)
	}
	var walErr *pgwal.ConfigError
	if err := (pgwal.Config{Slot: "Bad Name"}).Validate(); !errors.As(err, &walErr) || walErr.Field != "Slot" {
		t.Errorf("pgwal.Config.Validate: %v", err)
	}
}
