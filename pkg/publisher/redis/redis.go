// Package redis publishes events to Redis Streams with go-redis. Each event
// becomes one XADD to the stream named by the stream prefix and its event
// type, and a whole batch goes out as one pipeline, so a batch costs one
// round trip. The entry fields are those Open Outbox Relay writes (id,
// payload, partition_key, h:<header>), so its consumers keep working.
//
// Redis keeps no record of what it has seen: an event the relay sends again
// after a crash or a cut connection is a second entry with the same id
// field, and consumers deduplicate by it.
//
// Register it by importing the package; it serves redis:// and rediss://
// URLs.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

func init() {
	publisher.RegisterConfig(ParseURL, Open, "redis", "rediss")
	publisher.RegisterOptions(Options, "redis", "rediss")
	// Redis Cluster's and TLS spellings of other tools, for the unknown
	// scheme's did-you-mean.
	publisher.Alias("redis-cluster", "redis")
	publisher.Alias("redis+tls", "rediss")
	// go-redis prints connection trouble through the standard logger, as
	// plain lines among the relay's JSON logs. Every failure it reports also
	// comes back as an error, which the relay logs in its own format.
	goredis.SetLogger(silent{})
}

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// Defaults for the URL options.
const (
	PortDefault = "6379"
	// DialTimeoutDefault matches Open Outbox's REDIS_CONNECTION_TIMEOUT.
	DialTimeoutDefault = 5 * time.Second
	// ReadTimeoutDefault and WriteTimeoutDefault bound each pipeline's
	// write and the wait for its replies. A batch of a few hundred entries
	// takes milliseconds; the rest is room for a server that stalls on
	// fsync.
	ReadTimeoutDefault  = 5 * time.Second
	WriteTimeoutDefault = 5 * time.Second
	// PoolSizeDefault is the most connections in use at once: one per batch
	// in flight (MAX_IN_FLIGHT_BATCHES) and a health check, with room.
	PoolSizeDefault = 10
	// MaxEntryBytesDefault is Redis's default proto-max-bulk-len, the
	// largest single argument a server accepts. Keeping the whole entry
	// under it also keeps it under the two limits Redis puts on an entry as
	// a whole: 1 GiB in a stream node and the 1 GiB client query buffer.
	MaxEntryBytesDefault = 512 << 20
	// ClientNameDefault is what CLIENT LIST shows for the relay's
	// connections.
	ClientNameDefault = "outbox-relay"
)

// Entry field names, as Open Outbox Relay writes them.
const (
	FieldID           = "id"
	FieldPayload      = "payload"
	FieldPartitionKey = "partition_key"
	// FieldHeaderPrefix goes before each row header's name.
	FieldHeaderPrefix = "h:"
	// FieldCloudEventsPrefix goes before each CloudEvents attribute's
	// name with format=cloudevents. No CloudEvents binding covers Redis;
	// a stream entry is a list of binary-safe name/value pairs, as a Kafka
	// record's headers are, so the Kafka binding's names are used.
	FieldCloudEventsPrefix = "ce_"
)

// Config is a parsed redis:// or rediss:// URL.
type Config struct {
	// Addr is host:port; the port defaults to 6379.
	Addr string
	// TLS is true for rediss://.
	TLS bool
	// User and Password come from the URL's user info: an ACL user, or
	// only a password (redis://:password@host) for the default user.
	// Password is never logged or put in an error.
	User, Password string
	// DB is the database number, from the path (/2) or ?db=2.
	DB int
	// StreamPrefix goes before the event type to form the stream name.
	StreamPrefix string
	// MaxLen caps each stream at about this many entries (XADD MAXLEN ~);
	// zero leaves streams uncapped.
	MaxLen int64
	// MaxEntryBytes is the largest entry sent: stream name, field names and
	// values together. Larger events go DEAD without reaching Redis.
	MaxEntryBytes int64
	// DialTimeout bounds connecting; ReadTimeout and WriteTimeout bound
	// each pipeline's replies and its write.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// PoolSize is the most connections in use at once.
	PoolSize int
	// ClientName is set with CLIENT SETNAME on each connection, when the
	// ACL allows it; empty leaves connections unnamed.
	ClientName string
	// TLS files: CA to verify the server with (default: system roots),
	// client certificate and key for mutual TLS.
	TLSCA, TLSCert, TLSKey string
	// TLSInsecure skips verifying the server's certificate.
	TLSInsecure bool
	// CloudEvents are the format and ce_source options: with
	// format=cloudevents the entry holds the attributes as ce_ fields
	// instead of the id and partition_key fields.
	CloudEvents cloudevents.Config
}

// ParseURL reads the driver's options from u: stream_prefix, maxlen,
// max_entry_bytes, db, dial_timeout, read_timeout, write_timeout, pool_size,
// client_name, tls_ca, tls_cert, tls_key, tls_insecure, format, ce_source.
// It connects to nothing.
func ParseURL(u *url.URL) (Config, error) {
	cfg := Config{
		TLS:           strings.EqualFold(u.Scheme, "rediss"),
		MaxEntryBytes: MaxEntryBytesDefault,
		DialTimeout:   DialTimeoutDefault,
		ReadTimeout:   ReadTimeoutDefault,
		WriteTimeout:  WriteTimeoutDefault,
		PoolSize:      PoolSizeDefault,
		ClientName:    ClientNameDefault,
	}
	if u.Hostname() == "" {
		return cfg, fmt.Errorf("redis URL %q has no host: want %s://[user:password@]host:6379[/db]", u.Redacted(), u.Scheme)
	}
	if strings.Contains(u.Host, ",") {
		return cfg, fmt.Errorf("redis URL %q: one host only; Redis Cluster and Sentinel are not supported", u.Redacted())
	}
	port := u.Port()
	if port == "" {
		port = PortDefault
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return cfg, fmt.Errorf("redis URL %q has an invalid port", u.Redacted())
	}
	cfg.Addr = net.JoinHostPort(u.Hostname(), port)
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}

	v, err := Options.Parse(u.Query())
	if err != nil {
		return cfg, err
	}
	if err := parseDB(&cfg, u.Path, v); err != nil {
		return cfg, err
	}
	cfg.StreamPrefix = optStreamPrefix.Get(v)
	cfg.CloudEvents = optCloudEvents.Get(v)
	cfg.MaxLen, cfg.MaxEntryBytes = optMaxLen.Get(v), optMaxEntryBytes.Get(v)
	cfg.PoolSize = int(optPoolSize.Get(v))
	cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout = optDialTimeout.Get(v), optReadTimeout.Get(v), optWriteTimeout.Get(v)
	if name, ok := optClientName.Lookup(v); ok {
		cfg.ClientName = name // empty leaves connections unnamed
	}
	files := optTLS.Get(v)
	cfg.TLSCA, cfg.TLSCert, cfg.TLSKey, cfg.TLSInsecure = files.CA, files.Cert, files.Key, files.Insecure
	if !cfg.TLS && !files.IsZero() {
		return cfg, errors.New("redis URL: tls_* options need a rediss:// URL")
	}
	return cfg, nil
}

// parseDB reads the database number from the path or the db option; when
// both are given they must agree.
func parseDB(cfg *Config, path string, v option.Values) error {
	fromPath := strings.Trim(path, "/")
	if fromPath != "" {
		n, err := strconv.Atoi(fromPath)
		if err != nil || n < 0 {
			return fmt.Errorf("redis URL: path %q is not a database number such as /0", path)
		}
		cfg.DB = n
	}
	if n, ok := optDB.Lookup(v); ok {
		if fromPath != "" && int(n) != cfg.DB {
			return fmt.Errorf("redis URL: db=%d contradicts the path's database %d; give one", n, cfg.DB)
		}
		cfg.DB = int(n)
	}
	return nil
}

// Options are the driver's URL options, declared once: ParseURL reads
// them, and docs/brokers.md lists them as Options.Table writes them (a
// test holds the two together). The connection options keep go-redis's
// names, so a URL written for go-redis (as Open Outbox's PUBLISHER_URL is)
// reads the same here.
var Options = option.New("redis")

var (
	optStreamPrefix = Options.String("stream_prefix", "",
		"Put before `event_type` to form the stream's key: `events:` + `orders.paid` → `events:orders.paid`.")
	optMaxLen = Options.Int("maxlen", 0,
		"Cap each stream at about this many entries (`XADD … MAXLEN ~ N`). Redis trims only whole nodes of `stream-node-max-entries` (100 by default), so a stream keeps between N and about N + 100 entries; the oldest go, read or not. Without it streams grow until something else trims them.").
		Unit("entries").DocDefault("none")
	optMaxEntryBytes = Options.Int("max_entry_bytes", MaxEntryBytesDefault,
		"Largest entry, in bytes: stream name, field names and values together. Larger events go `DEAD` without reaching Redis. The default is Redis's default `proto-max-bulk-len` (512 MiB); set it to the server's value if that is lower, or lower still to refuse large events early.").
		Unit("bytes")
	optDB = Options.Int("db", 0,
		"Database number; the URL path `/N` says the same. When both are given they must agree.").
		Min(0).Want("a database number")
	optDialTimeout = Options.Duration("dial_timeout", DialTimeoutDefault,
		"Bounds connecting: TCP, TLS and the `HELLO`/`AUTH` handshake.")
	optReadTimeout = Options.Duration("read_timeout", ReadTimeoutDefault,
		"Bounds the wait for a batch's replies and for a health check's.")
	optWriteTimeout = Options.Duration("write_timeout", WriteTimeoutDefault,
		"Bounds writing a batch to the connection.")
	optPoolSize = Options.Int("pool_size", PoolSizeDefault,
		"Connections in use at once; each batch in flight and each health check takes one, and a publish waits up to `read_timeout` + 1s for a free one.").
		Unit("connections")
	optClientName = Options.String("client_name", ClientNameDefault,
		"Connection name (`CLIENT SETNAME`) that `CLIENT LIST` shows; skipped when the ACL user may not set it; `client_name=` for none.").
		Check(func(name string) error {
			if strings.ContainsAny(name, " \t\r\n") {
				return errors.New("the Redis server refuses client names with spaces")
			}
			return nil
		})
	optTLS = Options.TLS(option.TLSDocs{
		CA:       "CA certificate file for verifying the server (`rediss://` only; the system roots otherwise).",
		Insecure: "`true` skips verifying the server's certificate (tests only).",
	})
	optCloudEvents = cloudevents.Declare(Options,
		"`format=cloudevents` writes [CloudEvents](#cloudevents--formatcloudevents) in binary mode: the attributes as `ce_` fields in place of `id` and `partition_key`. `ce_source` sets their `source`.")
)

// errClosed is what a closed publisher answers.
var errClosed = errors.New("redis: publisher is closed")

// Publisher publishes to Redis Streams through a pool of connections that
// concurrent Publish calls share.
type Publisher struct {
	cfg    Config
	client *goredis.Client
	// ce maps events to CloudEvents attributes; nil writes id and
	// partition_key fields.
	ce *cloudevents.Mapper

	closed    atomic.Bool
	closeOnce sync.Once
}

// Open prepares the client. It does not connect: the first Publish or Ping
// does, so a server that is down is not an error here. Only a bad TLS file
// is.
func Open(ctx context.Context, cfg Config) (*Publisher, error) {
	var tlsCfg *tls.Config
	if cfg.TLS {
		var err error
		tlsCfg, err = publisher.TLSFiles{CA: cfg.TLSCA, Cert: cfg.TLSCert, Key: cfg.TLSKey, Insecure: cfg.TLSInsecure}.Config()
		if err != nil {
			return nil, fmt.Errorf("redis URL: %w", err)
		}
		host, _, _ := net.SplitHostPort(cfg.Addr)
		tlsCfg.ServerName = host
	}
	client := goredis.NewClient(&goredis.Options{
		Addr:     cfg.Addr,
		Username: cfg.User,
		Password: cfg.Password,
		DB:       cfg.DB,
		// go-redis's ClientName needs the ACL's +client|setname, which a
		// user allowed only XADD and PING lacks: every connection would
		// fail. The name is set where allowed instead.
		OnConnect: setName(cfg.ClientName),
		TLSConfig: tlsCfg,
		// The relay decides what happens after a failure: a pipeline
		// resent by the client would delay the answer and, when the first
		// copy reached Redis, add entries the relay does not know of.
		MaxRetries: -1,
		// One dial per attempt: a server that refuses connections is
		// reported at once and the relay pauses, instead of five dials in
		// a row per batch.
		DialerRetries: 1,
		DialTimeout:   cfg.DialTimeout,
		ReadTimeout:   cfg.ReadTimeout,
		WriteTimeout:  cfg.WriteTimeout,
		// The engine's context (shutdown, the health check's deadline)
		// cuts a wait short.
		ContextTimeoutEnabled: true,
		PoolSize:              cfg.PoolSize,
		// Every command is a pipeline: one pool serves them all.
		PipelinePoolSize: -1,
		// Entries of a few hundred bytes fill a 500-event batch's write
		// in a handful of syscalls with this buffer.
		WriteBufferSize: 128 << 10,
		// Nothing here reacts to Redis Enterprise's maintenance pushes,
		// and asking for them costs a command per connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	return &Publisher{cfg: cfg, client: client, ce: cfg.CloudEvents.Mapper(ctx)}, nil
}

// setName names each new connection, unless the ACL forbids it.
func setName(name string) func(context.Context, *goredis.Conn) error {
	return func(ctx context.Context, cn *goredis.Conn) error {
		if name == "" {
			return nil
		}
		if err := cn.ClientSetName(ctx, name).Err(); err != nil && !goredis.IsPermissionError(err) {
			return err
		}
		return nil
	}
}

// Publish sends the batch as one pipeline of XADDs and maps each reply back
// to its event. Redis runs a connection's commands in the order they
// arrive, so the entries land in batch order. Events that cannot become an
// entry are answered without being sent.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	if p.closed.Load() {
		return publisher.Fill(len(batch), publisher.Unavailable(errClosed))
	}
	pipe := p.client.Pipeline()
	cmds := make([]*goredis.StringCmd, len(batch))
	streams := make([]string, len(batch))
	for i := range batch {
		stream, fields, err := p.entry(&batch[i])
		if err != nil {
			errs[i] = publisher.Permanent(err)
			continue
		}
		streams[i] = stream
		cmds[i] = pipe.XAdd(ctx, &goredis.XAddArgs{
			Stream: stream,
			MaxLen: p.cfg.MaxLen,
			Approx: p.cfg.MaxLen > 0,
			ID:     "*",
			Values: fields,
		})
	}
	if pipe.Len() == 0 {
		return errs
	}
	_, execErr := pipe.Exec(ctx)
	for i, cmd := range cmds {
		if cmd != nil {
			errs[i] = p.result(cmd, execErr, streams[i])
		}
	}
	return errs
}

// entry builds the stream name and the entry's fields for e, or says why it
// cannot exist. It is the one place that decides the entry's layout.
func (p *Publisher) entry(e *outbox.Event) (stream string, fields []any, err error) {
	stream = p.cfg.StreamPrefix + e.Type
	if stream == "" {
		return "", nil, errors.New("invalid stream name: event_type and stream_prefix are empty")
	}
	headers, err := outbox.ParseHeaders(e.Headers)
	if err != nil {
		return "", nil, err
	}
	id := e.ID.String()
	payload := e.Payload
	if payload == nil {
		payload = []byte{}
	}
	var size int64
	if p.ce != nil {
		attrs, err := p.ce.Attributes(e, headers)
		if err != nil {
			return "", nil, err
		}
		fields = make([]any, 0, 2*len(attrs)+2+2*len(headers))
		for _, a := range attrs {
			fields = append(fields, FieldCloudEventsPrefix+a.Name, a.Value)
			size += int64(len(FieldCloudEventsPrefix) + len(a.Name) + len(a.Value))
		}
		fields = append(fields, FieldPayload, payload)
		size += int64(len(stream) + len(FieldPayload) + len(payload))
	} else {
		size = int64(len(stream) + len(FieldID) + len(id) + len(FieldPayload) + len(payload))
		fields = make([]any, 0, 6+2*len(headers))
		fields = append(fields, FieldID, id, FieldPayload, payload)
		if e.PartitionKey != "" {
			fields = append(fields, FieldPartitionKey, e.PartitionKey)
			size += int64(len(FieldPartitionKey) + len(e.PartitionKey))
		}
	}
	for _, k := range sortedKeys(headers) {
		// The driver's own fields win: a row's x-event-id header next to
		// the id field would leave consumers guessing which is true.
		if outbox.IsEventHeader(k) {
			continue
		}
		fields = append(fields, FieldHeaderPrefix+k, headers[k])
		size += int64(len(FieldHeaderPrefix) + len(k) + len(headers[k]))
	}
	if size > p.cfg.MaxEntryBytes {
		// Redis would drop the connection over an argument above its
		// proto-max-bulk-len, failing the whole batch every time it is sent.
		return "", nil, fmt.Errorf("entry too large: %d bytes with stream name and fields, above max_entry_bytes=%d", size, p.cfg.MaxEntryBytes)
	}
	return stream, fields, nil
}

// sortedKeys returns h's keys in order, so that equal rows give identical
// entries. Most rows have one header or none, which need no sorting.
func sortedKeys(h map[string]string) []string {
	switch len(h) {
	case 0:
		return nil
	case 1:
		for k := range h {
			return []string{k}
		}
	}
	return slices.Sorted(maps.Keys(h))
}

// result classifies one XADD of an executed pipeline. execErr is the
// pipeline's error; a command without a reply of its own failed with it.
func (p *Publisher) result(cmd *goredis.StringCmd, execErr error, stream string) error {
	err := cmd.Err()
	if err == nil && cmd.Val() != "" {
		return nil // the new entry's ID
	}
	if err == nil {
		// go-redis leaves a Redis error that came while setting up the
		// connection (AUTH, SELECT) on the pipeline alone: nothing was sent.
		if execErr == nil {
			execErr = errors.New("no reply to XADD")
		}
		return publisher.Unavailable(fmt.Errorf("redis %s: %w", p.cfg.Addr, execErr))
	}
	return p.classify(err, stream)
}

// classify sorts an XADD's error into permanent (this event can never be
// stored), unavailable (Redis cannot take anything now) or retryable.
func (p *Publisher) classify(err error, stream string) error {
	var redisErr goredis.Error
	if !errors.As(err, &redisErr) {
		// No answer from Redis: refused, reset, EOF, timeout, TLS, the
		// pool's wait or the caller's context. A connection closed under
		// the pipeline may have been closed over one of its entries.
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
			return publisher.Dropped(fmt.Errorf("redis %s: the connection was closed: %w", p.cfg.Addr, err))
		}
		return publisher.Unavailable(fmt.Errorf("redis %s: %w", p.cfg.Addr, err))
	}
	// The checks read the reply itself, whatever go-redis wrapped it in.
	reply := error(redisErr)
	switch {
	case goredis.HasErrorPrefix(reply, "WRONGTYPE"):
		return publisher.Permanent(fmt.Errorf("stream %q: the key holds a value that is not a stream; rename or delete it, or change stream_prefix: %w", stream, err))
	case goredis.HasErrorPrefix(reply, "Elements are too large"):
		// Above what a stream node holds, whatever the server's state.
		return publisher.Permanent(fmt.Errorf("entry too large for stream %q: %w", stream, err))
	case goredis.IsPermissionError(reply) && !strings.Contains(reply.Error(), "command"):
		// An ACL key pattern that leaves out this event's stream: the other
		// streams still take entries. Operators fix the ACL within the
		// retry budget, or the event goes DEAD after RETRY_MAX_ATTEMPTS.
		return fmt.Errorf("redis: the ACL user may not write stream %q; allow the key (ACL SETUSER … ~%s*) or change stream_prefix: %w", stream, p.cfg.StreamPrefix, err)
	case isServerState(reply):
		return publisher.Unavailable(fmt.Errorf("redis %s: %w", p.cfg.Addr, err))
	}
	return fmt.Errorf("redis refused XADD to stream %q: %w", stream, err)
}

// isServerState reports a Redis error that says the server, not the event,
// is the problem: no write can succeed until it changes.
func isServerState(err error) bool {
	if _, ok := goredis.IsMovedError(err); ok {
		return true // a Redis Cluster node: only some streams live here
	}
	if _, ok := goredis.IsAskError(err); ok {
		return true
	}
	return goredis.IsLoadingError(err) || // restarting, reading its data
		goredis.IsReadOnlyError(err) || // a replica, as after a failover
		goredis.IsMasterDownError(err) ||
		goredis.IsClusterDownError(err) ||
		goredis.IsTryAgainError(err) ||
		goredis.IsNoReplicasError(err) || // min-replicas-to-write not met
		goredis.IsOOMError(err) || // at maxmemory: any entry is refused, however small
		goredis.IsMaxClientsError(err) ||
		goredis.IsAuthError(err) ||
		goredis.IsPermissionError(err) || // XADD itself is not allowed
		goredis.HasErrorPrefix(err, "BUSY") || // a script or module command holds the server
		goredis.HasErrorPrefix(err, "MISCONF") // writes stop when a snapshot cannot be saved
}

// Ping checks that Redis answers PING. A server that is loading its data
// answers LOADING, which fails the check.
func (p *Publisher) Ping(ctx context.Context) error {
	if p.closed.Load() {
		return errClosed
	}
	if err := p.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: PING: %w", p.cfg.Addr, err)
	}
	return nil
}

// Close closes the connections. Publish has already had every reply or
// given up on it, so nothing is waited for. Calling it again does nothing.
func (p *Publisher) Close(context.Context) error {
	var err error
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		if cerr := p.client.Close(); cerr != nil {
			err = fmt.Errorf("redis: close: %w", cerr)
		}
	})
	return err
}
