package main

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
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
}

// ignoredOpenOutboxSettings have no meaning here: the relay batches from the
// database itself, always waits for the broker, and retries per event.
var ignoredOpenOutboxSettings = []string{
	"ENVIRONMENT", "KAFKA_BATCH_SIZE", "KAFKA_BATCH_TIMEOUT", "KAFKA_MAX_ATTEMPTS", "KAFKA_READ_TIMEOUT",
}

// publisherSchemes maps PUBLISHER_TYPE values to URL schemes.
var publisherSchemes = map[string]string{
	"nats": "nats", "kafka": "kafka", "stdout": "stdout", "null": "null", "amqp": "amqp", "rabbitmq": "amqp",
}

// applyOpenOutbox translates Open Outbox settings into cfg and returns what
// it did, for the log.
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
		if err := applyPublisherType(cfg, environ, strings.ToLower(oo.PublisherType)); err != nil {
			return nil, err
		}
		notes = append(notes, "PUBLISHER_TYPE is implied by PUBLISHER_URL's scheme; it can be removed")
	}
	if oo.ServerPort != "" {
		if _, set := environ["HTTP_ADDR"]; !set {
			cfg.HTTPAddr = oo.ServerPort
			if _, err := strconv.Atoi(oo.ServerPort); err == nil {
				cfg.HTTPAddr = ":" + oo.ServerPort
			}
			notes = append(notes, "SERVER_PORT used as HTTP_ADDR="+cfg.HTTPAddr)
		}
	}

	var opts []urlOption
	switch scheme := schemeOf(cfg.PublisherURL); scheme {
	case "nats", "tls":
		opts = []urlOption{{"NATS_PUBLISH_TIMEOUT", oo.NATSPublishTimeout, "timeout", checkDuration}}
	case "kafka":
		opts = []urlOption{
			{"KAFKA_REQUIRED_ACKS", strings.ToLower(oo.KafkaRequiredAcks), "acks", checkOneOf("all", "one", "none")},
			{"KAFKA_COMPRESSION", strings.ToLower(oo.KafkaCompression), "compression", checkOneOf("none", "gzip", "snappy", "lz4", "zstd")},
			{"KAFKA_BATCH_BYTES", oo.KafkaBatchBytes, "batch_bytes", checkPositiveInt},
			{"KAFKA_WRITE_TIMEOUT", oo.KafkaWriteTimeout, "timeout", checkDuration},
		}
		if b, _ := strconv.ParseBool(oo.KafkaAsync); b {
			notes = append(notes, "KAFKA_ASYNC=true ignored: the relay always waits for Kafka's acknowledgement before marking events delivered")
		}
	}
	for _, o := range opts {
		note, err := o.apply(cfg)
		if err != nil {
			return nil, err
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	for _, name := range ignoredOpenOutboxSettings {
		if _, set := environ[name]; set {
			notes = append(notes, name+" ignored: it has no meaning for this relay")
		}
	}
	return notes, nil
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
// allows, without a scheme ("broker-1:9092,broker-2:9092").
func applyPublisherType(cfg *config, environ map[string]string, typ string) error {
	scheme, ok := publisherSchemes[typ]
	if !ok {
		return fmt.Errorf("PUBLISHER_TYPE=%q is not supported here (nats, kafka, amqp, stdout, null)", typ)
	}
	raw, set := environ["PUBLISHER_URL"]
	switch {
	case !set || raw == "":
		if scheme != "stdout" && scheme != "null" {
			return fmt.Errorf("PUBLISHER_TYPE=%s needs PUBLISHER_URL", typ)
		}
		cfg.PublisherURL = scheme + "://"
	case !strings.Contains(raw, "://"):
		cfg.PublisherURL = scheme + "://" + raw
	case !sameDriver(scheme, schemeOf(raw)):
		return fmt.Errorf("PUBLISHER_TYPE=%s contradicts PUBLISHER_URL's scheme %q; remove PUBLISHER_TYPE", typ, schemeOf(raw))
	}
	return nil
}

// sameDriver reports whether two schemes select the same driver: tls:// is
// NATS with TLS, amqps:// RabbitMQ with TLS.
func sameDriver(a, b string) bool {
	secure := map[string]string{"tls": "nats", "amqps": "amqp"}
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
	variable, value, option string
	check                   func(string) error
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
	if q.Has(o.option) {
		return o.variable + " ignored: PUBLISHER_URL sets " + o.option, nil
	}
	q.Set(o.option, o.value)
	u.RawQuery = q.Encode()
	cfg.PublisherURL = u.String()
	return o.variable + " used as PUBLISHER_URL option " + o.option + "=" + o.value, nil
}

func checkDuration(s string) error {
	if d, err := time.ParseDuration(s); err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 5s")
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
