// This file: the URL and its options, read into a Config.

package amqp

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

// Defaults for the URL options.
const (
	ExchangeDefault     = "outbox"
	ExchangeTypeDefault = "topic"
	TimeoutDefault      = 5 * time.Second
	HeartbeatDefault    = 10 * time.Second
	// MaxMessageSizeDefault is RabbitMQ 3.x's default max_message_size.
	MaxMessageSizeDefault = 128 << 20
	NameDefault           = "outbox-relay"
)

// maxShortstr is the longest AMQP short string: routing keys, header names,
// content types and exchange names. amqp091 cannot encode a longer one, and a
// frame that fails half-way kills the whole connection, so such events are
// refused before anything is written.
const maxShortstr = 255

// Config is a parsed amqp:// or amqps:// URL.
type Config struct {
	// TLS is true for amqps://.
	TLS bool
	// Host is host:port; the port defaults to 5672, or 5671 with TLS.
	Host string
	// User and Password default to guest/guest when the URL has no user
	// info. Password is never logged.
	User, Password string
	// Vhost is the URL's path without its leading slash; no path or "/"
	// is the default vhost "/" (write %2f to name it explicitly).
	Vhost string
	// Exchange receives every event; empty is the default exchange, which
	// routes to the queue named like the routing key.
	Exchange string
	// ExchangeType is used only when Declare is set.
	ExchangeType string
	// Declare declares the exchange (durable) on every connect; otherwise
	// it must already exist.
	Declare bool
	// Timeout bounds connecting and the wait for a batch's confirms.
	Timeout time.Duration
	// Heartbeat is the AMQP heartbeat interval: a silent dead connection is
	// noticed after about three of them.
	Heartbeat time.Duration
	// MaxMessageSize is the largest payload sent; larger events go DEAD
	// without reaching the broker. Set it to the server's max_message_size.
	MaxMessageSize int64
	// Name is the connection name the management UI shows.
	Name string
	// TLS files: CA to verify the server with (default: system roots),
	// client certificate and key for mutual TLS.
	TLSCA, TLSCert, TLSKey string
	// TLSInsecure skips verifying the server's certificate.
	TLSInsecure bool
	// CloudEvents are the format and ce_source options: with
	// format=cloudevents the attributes go in cloudEvents: headers (AMQP
	// binding, binary content mode) instead of X-Event-*.
	CloudEvents cloudevents.Config
}

// validExchange is what RabbitMQ accepts in an exchange name.
var validExchange = regexp.MustCompile(`^[a-zA-Z0-9_.:\-]*$`)

// ParseURL reads the driver's options from u: exchange, exchange_type,
// declare, timeout, heartbeat, max_message_size, name, tls_ca, tls_cert,
// tls_key, tls_insecure, format, ce_source.
func ParseURL(u *url.URL) (Config, error) {
	cfg := Config{
		TLS:            strings.EqualFold(u.Scheme, "amqps"),
		User:           "guest",
		Password:       "guest",
		Exchange:       ExchangeDefault,
		ExchangeType:   ExchangeTypeDefault,
		Timeout:        TimeoutDefault,
		Heartbeat:      HeartbeatDefault,
		MaxMessageSize: MaxMessageSizeDefault,
		Name:           NameDefault,
	}
	if u.Hostname() == "" {
		return cfg, fmt.Errorf("amqp URL %q has no host: want %s://user:password@host:5672/vhost", u.Redacted(), u.Scheme)
	}
	if strings.Contains(u.Host, ",") {
		return cfg, fmt.Errorf("amqp URL %q: one host only (use a load balancer or DNS name for a cluster)", u.Redacted())
	}
	cfg.Host = u.Host
	if u.Port() == "" {
		port := "5672"
		if cfg.TLS {
			port = "5671"
		}
		cfg.Host = net.JoinHostPort(u.Hostname(), port)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	if cfg.Vhost = strings.TrimPrefix(u.Path, "/"); cfg.Vhost == "" {
		cfg.Vhost = "/"
	}

	v, err := Options.Parse(u.Query())
	if err != nil {
		return cfg, err
	}
	cfg.CloudEvents = optCloudEvents.Get(v)
	if exchange, ok := optExchange.Lookup(v); ok {
		cfg.Exchange = exchange // empty is the default exchange
	}
	if len(cfg.Exchange) > maxShortstr || !validExchange.MatchString(cfg.Exchange) {
		return cfg, fmt.Errorf("amqp URL: exchange=%q is not a valid exchange name (letters, digits, '-', '_', '.', ':'; at most 255 bytes)", cfg.Exchange)
	}
	cfg.ExchangeType = optExchangeType.Get(v)
	cfg.Declare = optDeclare.Get(v)
	if cfg.Declare && cfg.Exchange == "" {
		return cfg, fmt.Errorf("amqp URL: declare=true needs a named exchange; the default exchange always exists")
	}
	cfg.Timeout, cfg.Heartbeat = optTimeout.Get(v), optHeartbeat.Get(v)
	cfg.MaxMessageSize = optMaxMessageSize.Get(v)
	cfg.Name = optName.Get(v)
	files := optTLS.Get(v)
	cfg.TLSCA, cfg.TLSCert, cfg.TLSKey, cfg.TLSInsecure = files.CA, files.Cert, files.Key, files.Insecure
	if !cfg.TLS && !files.IsZero() {
		return cfg, fmt.Errorf("amqp URL: tls_* options need an amqps:// URL")
	}
	return cfg, nil
}

// Options are the driver's URL options, declared once: ParseURL reads
// them, and docs/brokers.md lists them as Options.Table writes them (a
// test holds the two together).
var Options = option.New("amqp")

var (
	optExchange = Options.String("exchange", ExchangeDefault,
		"The exchange every event is published to. `exchange=` (empty) is the default exchange, which delivers to the queue named like the routing key.")
	optExchangeType = Options.String("exchange_type", ExchangeTypeDefault,
		"Type the exchange is declared with; used only with `declare=true`.")
	optDeclare = Options.Bool("declare", false,
		"`true` declares the exchange, durable, on every connect (and in every health check), so it exists even if someone deleted it. Otherwise the exchange must exist.")
	optTimeout = Options.Duration("timeout", TimeoutDefault,
		"Bounds connecting, the wait for a batch's confirms, and each write to the connection.")
	optHeartbeat = Options.Duration("heartbeat", HeartbeatDefault,
		"AMQP heartbeat interval (at least 1s); a connection that goes silent is noticed after about three.").
		Min(time.Second, "AMQP counts heartbeats in seconds")
	optMaxMessageSize = Options.Int("max_message_size", MaxMessageSizeDefault,
		"Largest payload sent, in bytes; larger events go `DEAD` without reaching RabbitMQ. Set it to the server's `max_message_size` (128 MiB on RabbitMQ 3.x, 16 MiB on 4.x).").
		Unit("bytes")
	optName = Options.String("name", NameDefault, "Connection name shown in the management UI.")
	optTLS  = Options.TLS(option.TLSDocs{
		CA:       "CA certificate file for verifying the server (`amqps://` only; the system roots otherwise).",
		Insecure: "`true` skips verifying the server's certificate (tests only).",
	})
	optCloudEvents = cloudevents.Declare(Options,
		"`format=cloudevents` sends [CloudEvents](#cloudevents--formatcloudevents) in binary mode: the attributes in `cloudEvents:` headers, `datacontenttype` in the `content_type` property. `ce_source` sets their `source`.")
)
