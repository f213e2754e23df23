package pgwal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/capture"
)

// A zero Config takes its defaults: the table's names, the status
// interval, heartbeats on.
func TestZeroConfigTakesTheDefaults(t *testing.T) {
	t.Parallel()
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Validate of a zero Config: %v", err)
	}
	d := Config{Schema: "app", Table: "events"}.withDefaults()
	if d.Slot != "outbox_relay_app_events" || d.Publication != "outbox_relay_app_events" ||
		d.StatusInterval != StatusIntervalDefault || d.Heartbeat != HeartbeatDefault || d.Logger == nil {
		t.Errorf("Config{app.events} with defaults = %+v", d)
	}
	if off := (Config{Heartbeat: HeartbeatOff}).withDefaults(); off.Heartbeat >= 0 {
		t.Errorf("HeartbeatOff became %s", off.Heartbeat)
	}
	long := NameDefault("", strings.Repeat("t", 60))
	if len(long) != 63 || !Identifier(long) || long == NameDefault("", strings.Repeat("t", 61)) {
		t.Errorf("NameDefault of a long table = %q: want 63 characters, a valid name, apart from a longer one's", long)
	}
}

// A field that cannot work is an error naming the field as Go spells it;
// Open and Check refuse it as a SetupError, which no retry mends.
func TestInvalidFieldsAreNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Slot: "Bad-Name"}, `pgwal: Slot "Bad-Name": use lowercase letters, digits and underscores (at most 63)`},
		{Config{Publication: "1st"}, `pgwal: Publication "1st": use lowercase letters, digits and underscores (at most 63)`},
		{Config{StatusInterval: -time.Second}, "pgwal: StatusInterval must be positive, got -1s"},
	} {
		err := c.cfg.Validate()
		if err == nil || err.Error() != c.want {
			t.Errorf("%+v: Validate = %v, want %s", c.cfg, err, c.want)
		}
		var fe *fieldcheck.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%v is not a FieldError", err)
		}
		var setup *capture.SetupError
		if _, err := Open(context.Background(), c.cfg); !errors.As(err, &setup) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v) = %v, want a SetupError saying %s", c.cfg, err, c.want)
		}
		if err := Check(context.Background(), c.cfg); !errors.As(err, &setup) {
			t.Errorf("Check(%+v) = %v, want a SetupError", c.cfg, err)
		}
	}
}
