package console

import (
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
)

// A zero Config takes its defaults; a field that cannot work is an error
// naming the field as Go spells it.
func TestConfigTakesDefaultsAndNamesFields(t *testing.T) {
	t.Parallel()
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Validate of a zero Config: %v", err)
	}
	if d := (Config{}).withDefaults(); d.Refresh != RefreshDefault || d.PageSize != PageSizeDefault {
		t.Errorf("Config{} with defaults = %+v", d)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Refresh: -time.Second}, "console: Refresh must not be negative, got -1s"},
		{Config{Refresh: 500 * time.Millisecond}, "console: Refresh must be at least 1s, got 500ms"},
		{Config{PageSize: 1001}, "console: PageSize must be 0 to 1000, got 1001"},
	} {
		err := c.cfg.Validate()
		var fe *fieldcheck.FieldError
		if err == nil || err.Error() != c.want || !errors.As(err, &fe) {
			t.Errorf("%+v: Validate = %v, want the FieldError %s", c.cfg, err, c.want)
		}
	}
}
