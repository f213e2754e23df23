package option_test

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/pkg/publisher/amqp"
	"github.com/outbox-relay/relay/pkg/publisher/kafka"
	"github.com/outbox-relay/relay/pkg/publisher/nats"
	"github.com/outbox-relay/relay/pkg/publisher/null"
	"github.com/outbox-relay/relay/pkg/publisher/option"
	"github.com/outbox-relay/relay/pkg/publisher/redis"
	"github.com/outbox-relay/relay/pkg/publisher/stdout"
	"github.com/outbox-relay/relay/pkg/publisher/webhook"
)

var update = flag.Bool("update", false, "rewrite docs/brokers.md's option tables from the declarations")

// brokersDoc is docs/brokers.md, from this package's directory.
var brokersDoc = filepath.Join("..", "..", "..", "docs", "brokers.md")

// TestBrokersDocListsTheDeclaredOptions holds docs/brokers.md to the
// drivers' declarations: each driver's section has exactly the table its
// Set writes, so an option cannot be added, renamed, removed or
// re-documented in one place only. go test -run BrokersDoc -update
// rewrites the tables from the declarations.
func TestBrokersDocListsTheDeclaredOptions(t *testing.T) {
	raw, err := os.ReadFile(brokersDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, d := range []struct {
		heading string // the section's heading, up to its first " — "
		set     *option.Set
	}{
		{"NATS JetStream", nats.Options},
		{"Kafka", kafka.Options},
		{"RabbitMQ", amqp.Options},
		{"Redis Streams", redis.Options},
		{"HTTP webhooks", webhook.Options},
	} {
		start, end, ok := optionTable(doc, d.heading)
		if !ok {
			t.Errorf("docs/brokers.md: no option table under ## %s", d.heading)
			continue
		}
		want := d.set.Table()
		if got := doc[start:end]; got != want {
			if *update {
				doc = doc[:start] + want + doc[end:]
				continue
			}
			t.Errorf("docs/brokers.md, ## %s: the option table is not what the %s driver declares (go test -run BrokersDoc -update rewrites it):\n%s\nwant:\n%s",
				d.heading, d.set.Driver(), got, want)
		}
	}
	if *update {
		if err := os.WriteFile(brokersDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// optionTable finds the first "| Option |" table in the section whose
// heading starts with heading: its bytes are doc[start:end].
func optionTable(doc, heading string) (start, end int, ok bool) {
	sec := strings.Index(doc, "\n## "+heading)
	if sec < 0 {
		return 0, 0, false
	}
	secEnd := len(doc)
	if next := strings.Index(doc[sec+1:], "\n## "); next >= 0 {
		secEnd = sec + 1 + next
	}
	rel := strings.Index(doc[sec:secEnd], "\n| Option |")
	if rel < 0 {
		return 0, 0, false
	}
	start = sec + rel + 1
	end = start
	for end < secEnd && strings.HasPrefix(doc[end:], "|") {
		nl := strings.IndexByte(doc[end:], '\n')
		if nl < 0 {
			end = len(doc)
			break
		}
		end += nl + 1
	}
	return start, end, true
}

// The sections of stdout:// and null://, whose options are the
// CloudEvents pair or none, say so in words instead of a table; the
// declarations must agree with the words.
func TestBrokersDocDescribesTheDriversWithoutATable(t *testing.T) {
	raw, err := os.ReadFile(brokersDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, d := range []struct {
		heading string
		set     *option.Set
		says    string
	}{
		{"stdout", stdout.Options, "Its only options are `format` and `ce_source`"},
		{"null", null.Options, "It takes no options"},
	} {
		sec := strings.Index(doc, "\n## "+d.heading)
		if sec < 0 {
			t.Errorf("docs/brokers.md has no ## %s", d.heading)
			continue
		}
		section := doc[sec+1:]
		if next := strings.Index(section, "\n## "); next >= 0 {
			section = section[:next]
		}
		if !strings.Contains(strings.Join(strings.Fields(section), " "), d.says) {
			t.Errorf("docs/brokers.md, ## %s: does not say %q", d.heading, d.says)
		}
		var said []string
		for _, name := range []string{"format", "ce_source"} {
			if strings.Contains(d.says, "`"+name+"`") {
				said = append(said, name)
			}
		}
		if got := d.set.Names(); !slices.Equal(got, said) && (len(got) != 0 || len(said) != 0) {
			t.Errorf("the %s driver declares %q, its section says %q", d.set.Driver(), got, said)
		}
	}
}
