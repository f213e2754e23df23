package main

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/caarlos0/env/v11"

	"github.com/outbox-relay/relay/internal/duration"
)

// openOutboxConfig holds Open Outbox Relay settings that have no variable of
// their own here. They are translated into PUBLISHER_URL options and
// HTTP_ADDR, so an Open Outbox deployment keeps working when only the image
// changes. Explicit settings of ours always win.
type openOutboxConfig struct {
	StorageType        string `env:"STORAGE_TYPE"`
	PublisherType      string `env:"PUBLISHER_TYPE"`
	ServerPort         string `env:"SERVER_PORT"`
	NATSPublishTimeout string `env:"NATS_PUBLISH_TIMEOUT"`
	KafkaRequiredAcks  string `env:"KAFKA_REQUIRED_ACKS"`
	KafkaCompression   string `env:"KAFKA_COMPRESSION"`
	KafkaBatchBytes    string `env:"KAFKA_BATCH_BYTES"`
	KafkaWriteTimeout  string `env:"KAFKA_WRITE_TIMEOUT"`
	KafkaAsync         string `env:"KAFKA_ASYNC"`
	RedisConnTimeout   string `env:"REDIS_CONNECTION_TIMEOUT"`
	RedisWriteTimeout  string `env:"REDIS_WRITE_TIMEOUT"`
}

// ignoredOpenOutboxSettings have no meaning here; each is logged with why.
var ignoredOpenOutboxSettings = []struct{ name, why string }{
	{"ENVIRONMENT", "this relay behaves the same everywhere; LOG_FORMAT and LOG_LEVEL set its logging"},
	{"KAFKA_BATCH_SIZE", "the relay batches from the database (BATCH_SIZE) and sends each batch in one request"},
	{"KAFKA_BATCH_TIMEOUT", "the relay sends each batch in one request as soon as it is claimed"},
	{"KAFKA_MAX_ATTEMPTS", "failed events are retried per event (RETRY_MAX_ATTEMPTS, RETRY_BASE_DELAY, RETRY_MAX_DELAY)"},
	{"KAFKA_READ_TIMEOUT", "PUBLISHER_URL's ?timeout= bounds every Kafka request"},
}

// publisherSchemes maps PUBLISHER_TYPE values to URL schemes.
var publisherSchemes = map[string]string{
	"nats": "nats", "kafka": "kafka", "stdout": "stdout", "null": "null", "amqp": "amqp", "rabbitmq": "amqp",
	"redis": "redis",
}

// applyOpenOutbox translates Open Outbox settings into cfg and returns what
// it did, for the log: one note for every Open Outbox variable that is set,
// saying whether it was used, and how, or why not.
func applyOpenOutbox(cfg *config, environ map[string]string) (notes []string, err error) {
	var oo openOutboxConfig
	if err := env.ParseWithOptions(&oo, env.Options{Environment: environ}); err != nil {
		return nil, err
	}
	if oo.StorageType != "" {
		if err := checkStorageType(strings.ToLower(oo.StorageType), cfg.StorageURL); err != nil {
			return nil, err
		}
		notes = append(notes, "STORAGE_TYPE is implied by STORAGE_URL's scheme; it can be removed")
	}
	if oo.PublisherType != "" {
		note, err := applyPublisherType(cfg, environ, strings.ToLower(oo.PublisherType))
		if err != nil {
			return nil, err
		}
		notes = append(notes, note)
	}
	if oo.ServerPort != "" {
		if _, set := environ["HTTP_ADDR"]; set {
			notes = append(notes, "SERVER_PORT ignored: HTTP_ADDR is set, and wins")
		} else {
			cfg.HTTPAddr = oo.ServerPort
			if _, err := strconv.Atoi(oo.ServerPort); err == nil {
				cfg.HTTPAddr = ":" + oo.ServerPort
			}
			notes = append(notes, "SERVER_PORT used as HTTP_ADDR="+cfg.HTTPAddr)
		}
	}

	// Each driver option applies to its own driver only; set for another,
	// it is reported as ignored rather than dropped without a word.
	nats := []urlOption{{"NATS_PUBLISH_TIMEOUT", oo.NATSPublishTimeout, []string{"timeout"}, checkDuration}}
	kafka := []urlOption{
		{"KAFKA_REQUIRED_ACKS", strings.ToLower(oo.KafkaRequiredAcks), []string{"acks"}, checkOneOf("all", "one", "none")},
		{"KAFKA_COMPRESSION", strings.ToLower(oo.KafkaCompression), []string{"compression"}, checkOneOf("none", "gzip", "snappy", "lz4", "zstd")},
		{"KAFKA_BATCH_BYTES", oo.KafkaBatchBytes, []string{"batch_bytes"}, checkPositiveInt},
		{"KAFKA_WRITE_TIMEOUT", oo.KafkaWriteTimeout, []string{"timeout"}, checkDuration},
	}
	// Open Outbox bounds both the write of an XADD and the wait for its
	// reply with REDIS_WRITE_TIMEOUT.
	redis := []urlOption{
		{"REDIS_CONNECTION_TIMEOUT", oo.RedisConnTimeout, []string{"dial_timeout"}, checkDuration},
		{"REDIS_WRITE_TIMEOUT", oo.RedisWriteTimeout, []string{"write_timeout", "read_timeout"}, checkDuration},
	}
	scheme := schemeOf(cfg.PublisherURL)
	var apply, ignore []urlOption
	var driver string
	switch scheme {
	case "nats", "tls":
		apply, ignore, driver = nats, slices.Concat(kafka, redis), "NATS"
	case "kafka":
		apply, ignore, driver = kafka, slices.Concat(nats, redis), "Kafka"
	case "redis", "rediss":
		apply, ignore, driver = redis, slices.Concat(nats, kafka), "Redis"
	default:
		ignore = slices.Concat(nats, kafka, redis)
	}
	for _, o := range apply {
		note, err := o.apply(cfg)
		if err != nil {
			return nil, err
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	for _, o := range ignore {
		if o.value != "" {
			notes = append(notes, o.variable+" ignored: it is an option of another broker's driver, and PUBLISHER_URL is "+schemeName(scheme))
		}
	}
	if oo.KafkaAsync != "" {
		async, err := strconv.ParseBool(oo.KafkaAsync)
		switch {
		case driver != "Kafka":
			notes = append(notes, "KAFKA_ASYNC ignored: it is an option of the Kafka driver, and PUBLISHER_URL is "+schemeName(scheme))
		case err != nil:
			return nil, fmt.Errorf("KAFKA_ASYNC=%q: want true or false", oo.KafkaAsync)
		case async:
			notes = append(notes, "KAFKA_ASYNC=true ignored: the relay always waits for Kafka's acknowledgement before marking events delivered")
		default:
			notes = append(notes, "KAFKA_ASYNC=false can be removed: the relay always waits for Kafka's acknowledgement")
		}
	}
	for _, s := range ignoredOpenOutboxSettings {
		if _, set := environ[s.name]; set {
			notes = append(notes, s.name+" ignored: "+s.why)
		}
	}
	return notes, nil
}

// schemeName names a PUBLISHER_URL by its scheme for a note; the URL itself
// can hold credentials and is never logged.
func schemeName(scheme string) string {
	if scheme == "" {
		return "not set"
	}
	return scheme + "://…"
}

// storageSchemes maps STORAGE_TYPE values to the STORAGE_URL schemes that
// agree with them.
var storageSchemes = map[string][]string{
	"postgres": {"postgres", "postgresql"}, "postgresql": {"postgres", "postgresql"}, "mysql": {"mysql"},
}

// checkStorageType accepts an Open Outbox STORAGE_TYPE that agrees with
// STORAGE_URL: the URL's scheme chooses the driver, and a type that says
// otherwise means the URL is not the one meant.
func checkStorageType(typ, storageURL string) error {
	schemes, ok := storageSchemes[typ]
	if !ok {
		return fmt.Errorf("STORAGE_TYPE=%q is not supported here (postgres, mysql)", typ)
	}
	if scheme := schemeOf(storageURL); !slices.Contains(schemes, scheme) {
		return fmt.Errorf("STORAGE_TYPE=%s contradicts STORAGE_URL's scheme %q; set STORAGE_URL to a %s:// URL (or unset STORAGE_TYPE)",
			typ, scheme, schemes[0])
	}
	return nil
}

// applyPublisherType completes a PUBLISHER_URL written, as Open Outbox
// allows, without a scheme ("broker-1:9092,broker-2:9092"), and says what it
// did.
func applyPublisherType(cfg *config, environ map[string]string, typ string) (note string, err error) {
	scheme, ok := publisherSchemes[typ]
	if !ok {
		return "", fmt.Errorf("PUBLISHER_TYPE=%q is not supported here (nats, kafka, amqp, redis, stdout, null)", typ)
	}
	raw, set := environ["PUBLISHER_URL"]
	switch {
	case !set || raw == "":
		if scheme != "stdout" && scheme != "null" {
			return "", fmt.Errorf("PUBLISHER_TYPE=%s needs PUBLISHER_URL", typ)
		}
		cfg.PublisherURL = scheme + "://"
		return fmt.Sprintf("PUBLISHER_TYPE=%s used as PUBLISHER_URL=%s://; set that instead and PUBLISHER_TYPE can be removed", typ, scheme), nil
	case !strings.Contains(raw, "://"):
		cfg.PublisherURL = scheme + "://" + raw
		return fmt.Sprintf("PUBLISHER_TYPE=%s completed PUBLISHER_URL, which has no scheme, as %s://…; "+
			"write %s:// in front of PUBLISHER_URL and PUBLISHER_TYPE can be removed", typ, scheme, scheme), nil
	case !sameDriver(scheme, schemeOf(raw)):
		return "", fmt.Errorf("PUBLISHER_TYPE=%s contradicts PUBLISHER_URL's scheme %q; remove PUBLISHER_TYPE", typ, schemeOf(raw))
	}
	return fmt.Sprintf("PUBLISHER_TYPE=%s can be removed: PUBLISHER_URL's scheme %s:// selects the driver", typ, schemeOf(raw)), nil
}

// sameDriver reports whether two schemes select the same driver: tls:// is
// NATS with TLS, amqps:// RabbitMQ with TLS, rediss:// Redis with TLS.
func sameDriver(a, b string) bool {
	secure := map[string]string{"tls": "nats", "amqps": "amqp", "rediss": "redis"}
	if s, ok := secure[b]; ok {
		b = s
	}
	return a == b
}

func schemeOf(raw string) string {
	scheme, _, found := strings.Cut(raw, "://")
	if !found {
		return ""
	}
	return strings.ToLower(scheme)
}

// urlOption carries one Open Outbox variable into a PUBLISHER_URL option.
type urlOption struct {
	variable, value string
	// options are the driver's URL options the variable sets.
	options []string
	check   func(string) error
}

func (o urlOption) apply(cfg *config) (note string, err error) {
	if o.value == "" {
		return "", nil
	}
	if err := o.check(o.value); err != nil {
		return "", fmt.Errorf("%s=%q: %w", o.variable, o.value, err)
	}
	u, err := url.Parse(cfg.PublisherURL)
	if err != nil {
		return "", nil // PUBLISHER_URL's own check reports it
	}
	q := u.Query()
	var used, kept []string
	for _, opt := range o.options {
		if q.Has(opt) {
			kept = append(kept, opt)
			continue
		}
		q.Set(opt, o.value)
		used = append(used, opt+"="+o.value)
	}
	u.RawQuery = q.Encode()
	cfg.PublisherURL = u.String()
	switch {
	case len(used) == 0:
		return o.variable + " ignored: PUBLISHER_URL sets " + strings.Join(kept, " and "), nil
	case len(kept) == 0:
		return o.variable + " used as PUBLISHER_URL option " + strings.Join(used, " and "), nil
	}
	return o.variable + " used as PUBLISHER_URL option " + strings.Join(used, " and ") +
		"; PUBLISHER_URL sets " + strings.Join(kept, " and ") + " itself", nil
}

// checkDuration reads a value as the driver will read the URL option it
// becomes (internal/duration: 5s, 7d), so the variable is refused here
// exactly when the option would be.
func checkDuration(s string) error {
	if d, err := duration.Parse(s); err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 5s or 7d")
	}
	return nil
}

func checkPositiveInt(s string) error {
	if n, err := strconv.Atoi(s); err != nil || n <= 0 {
		return fmt.Errorf("want a positive integer")
	}
	return nil
}

func checkOneOf(values ...string) func(string) error {
	return func(s string) error {
		for _, v := range values {
			if s == v {
				return nil
			}
		}
		return fmt.Errorf("want one of %s", strings.Join(values, ", "))
	}
}
