// Package kafka publishes events to Apache Kafka with segmentio/kafka-go.
// A batch goes out in one WriteMessages call, which sends one produce
// request per partition and waits for the acknowledgements, so a batch costs
// about one round trip. The partition key is the record key and picks the
// partition with murmur2, the hash of the Java client's default partitioner,
// so one key always lands in one partition (the same one a Java producer
// would choose) and keeps its order there. Register it by importing the
// package; it serves kafka:// URLs.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	kafkago "github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

func init() {
	publisher.RegisterConfig(ParseURL, Open, "kafka")
	publisher.RegisterOptions(Options, "kafka")
}

// Defaults for the URL options.
const (
	// PortDefault is used for a broker given without a port.
	PortDefault = "9092"
	// TimeoutDefault bounds connecting, each produce request and each
	// health check; it matches kafka-go's own read and write timeouts.
	TimeoutDefault = 10 * time.Second
	// BatchBytesDefault is kafka-go's default, just under the 1 MiB that
	// Kafka's message.max.bytes allows by default.
	BatchBytesDefault = 1 << 20
	// AcksDefault waits for every in-sync replica.
	AcksDefault = "all"
	// CompressionDefault sends records as they are.
	CompressionDefault = "none"
)

const (
	clientID = "outbox-relay"
	// writerBatchSize is the most records of one partition that go in one
	// produce request. A Publish with more for one partition sends further
	// requests, in order. kafka-go allocates room for this many records per
	// request, so it is generous but not huge.
	writerBatchSize = 1000
	// flushAfter is kafka-go's BatchTimeout. WriteMessages queues every
	// record of a call before a partition's timer can fire, so a tiny
	// timeout sends each call's records at once instead of waiting for
	// records that no caller will add.
	flushAfter = time.Nanosecond
	// writeAttempts lets kafka-go retry a produce request that failed on a
	// stale connection. It stays small because the relay's own answer to a
	// broker that is gone (release, pause, ping) beats waiting here.
	writeAttempts = 3
)

// CloudEvents header names (Kafka binding, binary content mode): ce_ and
// the attribute's name, but content-type for datacontenttype.
const (
	cePrefix      = "ce_"
	ceContentType = "content-type"
)

// Config is a parsed kafka:// URL.
type Config struct {
	// Brokers are host:port addresses used to discover the cluster.
	Brokers []string
	// Topic, when set, receives every event; otherwise each event goes to
	// TopicPrefix + its event type.
	Topic       string
	TopicPrefix string
	// Acks is "all", "one" or "none".
	Acks string
	// Compression is "none", "gzip", "snappy", "lz4" or "zstd".
	Compression string
	// BatchBytes bounds one produce request per partition, and so one
	// record: a record above it can never be sent.
	BatchBytes int64
	// Timeout bounds connecting, each produce request and health checks.
	Timeout time.Duration
	// TLS turns TLS on; the files and TLSInsecure imply it.
	TLS                    bool
	TLSCA, TLSCert, TLSKey string
	TLSInsecure            bool
	// SASL is "", "plain", "scram-sha-256" or "scram-sha-512"; User and
	// Password come from the URL's user info.
	SASL string
	User string
	// Password is never logged or put in an error.
	Password string
	// CloudEvents are the format and ce_source options: with
	// format=cloudevents the attributes go in ce_ headers (Kafka binding,
	// binary content mode) instead of X-Event-*.
	CloudEvents cloudevents.Config
}

// ParseURL reads the driver's options from u: topic, topic_prefix, acks,
// compression, batch_bytes, timeout, tls, tls_ca, tls_cert, tls_key,
// tls_insecure, sasl, format, ce_source. It connects to nothing.
func ParseURL(u *url.URL) (Config, error) {
	cfg := Config{Acks: AcksDefault, Compression: CompressionDefault, BatchBytes: BatchBytesDefault, Timeout: TimeoutDefault}
	if u.Host == "" {
		return cfg, fmt.Errorf("kafka URL %q has no broker: want kafka://host:9092[,host:9092]", u.Redacted())
	}
	if u.Path != "" && u.Path != "/" {
		return cfg, fmt.Errorf("kafka URL %q has a path; the topic goes in ?topic= or ?topic_prefix=", u.Redacted())
	}
	for _, host := range strings.Split(u.Host, ",") {
		addr, err := brokerAddr(host)
		if err != nil {
			return cfg, err
		}
		cfg.Brokers = append(cfg.Brokers, addr)
	}
	v, err := Options.Parse(u.Query())
	if err != nil {
		return cfg, err
	}
	cfg.CloudEvents = optCloudEvents.Get(v)
	topic, hasTopic := optTopic.Lookup(v)
	cfg.Topic, cfg.TopicPrefix = topic, optTopicPrefix.Get(v)
	switch {
	case hasTopic && v.Has("topic_prefix"):
		return cfg, errors.New("kafka URL: topic and topic_prefix exclude each other: topic sends every event to one topic")
	case hasTopic:
		if err := validTopic(cfg.Topic); err != nil {
			return cfg, fmt.Errorf("kafka URL: %w", err)
		}
	case cfg.TopicPrefix != "":
		if err := validTopic(cfg.TopicPrefix); err != nil {
			return cfg, fmt.Errorf("kafka URL: topic_prefix: %w", err)
		}
	}
	cfg.Acks, cfg.Compression = optAcks.Get(v), optCompression.Get(v)
	cfg.BatchBytes = optBatchBytes.Get(v)
	cfg.Timeout = optTimeout.Get(v)

	files := optTLSFiles.Get(v)
	cfg.TLSCA, cfg.TLSCert, cfg.TLSKey, cfg.TLSInsecure = files.CA, files.Cert, files.Key, files.Insecure
	cfg.TLS = optTLS.Get(v)
	if cfg.TLSCA != "" || cfg.TLSCert != "" || cfg.TLSInsecure {
		if v.Has("tls") && !cfg.TLS {
			return cfg, errors.New("kafka URL: tls=false contradicts tls_ca, tls_cert or tls_insecure")
		}
		cfg.TLS = true
	}

	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	cfg.SASL = optSASL.Get(v)
	switch cfg.SASL {
	case "":
		if u.User != nil {
			// Credentials that silently went unused would surface as a
			// broker refusing an anonymous client, far from the cause.
			return cfg, errors.New("kafka URL has user info but no sasl= mechanism (plain, scram-sha-256, scram-sha-512)")
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		if cfg.User == "" {
			return cfg, fmt.Errorf("kafka URL: sasl=%s needs user:password@ before the brokers", cfg.SASL)
		}
	}
	return cfg, nil
}

// Options are the driver's URL options, declared once: ParseURL reads
// them, and docs/brokers.md lists them as Options.Table writes them (a
// test holds the two together).
var Options = option.New("kafka")

var (
	optTopicPrefix = Options.String("topic_prefix", "",
		"Put before `event_type` to form the topic: `events.` + `orders.paid` → `events.orders.paid`.")
	optTopic = Options.String("topic", "",
		"Send every event to this one topic instead; the event type still travels in `X-Event-Type`. Cannot be combined with `topic_prefix`.")
	optAcks = Options.String("acks", AcksDefault,
		"Acknowledgement a record needs to count as delivered: `all` (every in-sync replica), `one` (the partition leader), `none` (no acknowledgement at all).").
		OneOf("all", "one", "none")
	optCompression = Options.String("compression", CompressionDefault, "`none`, `gzip`, `snappy`, `lz4` or `zstd`.").
			OneOf("none", "gzip", "snappy", "lz4", "zstd")
	optBatchBytes = Options.Int("batch_bytes", BatchBytesDefault,
		"Largest produce request for one partition, and so the largest record (key, value and headers). Keep it at or below the brokers' `message.max.bytes`.").
		Max(math.MaxInt32).Unit("bytes")
	optTimeout = Options.Duration("timeout", TimeoutDefault,
		"Bounds connecting to a broker, each produce request, and each health check.")
	optTLS      = Options.Bool("tls", false, "`true` turns TLS on, verifying the brokers against the system roots.")
	optTLSFiles = Options.TLS(option.TLSDocs{
		CA:       "CA certificate file for verifying the brokers; turns TLS on.",
		CertKey:  "Client certificate and key for mutual TLS (both or neither); turn TLS on.",
		Insecure: "`true` skips verifying the brokers' certificates (tests only); turns TLS on.",
	})
	optSASL = Options.String("sasl", "",
		"`plain`, `scram-sha-256` or `scram-sha-512`, with the user and password of the URL's user info. User info without `sasl` is a configuration error.").
		OneOf("plain", "scram-sha-256", "scram-sha-512")
	optCloudEvents = cloudevents.Declare(Options,
		"`format=cloudevents` sends [CloudEvents](#cloudevents--formatcloudevents) in binary mode: the attributes in `ce_` headers, `datacontenttype` in `content-type`. `ce_source` sets their `source`.")
)

// brokerAddr checks one host[:port] of the URL and adds the default port.
func brokerAddr(host string) (string, error) {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h, port, err = net.SplitHostPort(host + ":" + PortDefault)
	}
	if err != nil || h == "" {
		return "", fmt.Errorf("kafka URL: broker %q is not host:port", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("kafka URL: broker %q has an invalid port", host)
	}
	return net.JoinHostPort(h, port), nil
}

var acksByName = map[string]kafkago.RequiredAcks{
	"all":  kafkago.RequireAll,
	"one":  kafkago.RequireOne,
	"none": kafkago.RequireNone,
}

var compressionByName = map[string]kafkago.Compression{
	"none":   0,
	"gzip":   kafkago.Gzip,
	"snappy": kafkago.Snappy,
	"lz4":    kafkago.Lz4,
	"zstd":   kafkago.Zstd,
}

// maxTopicLen is Kafka's limit on a topic name.
const maxTopicLen = 249

// validTopic applies Kafka's rules for topic names, so that a bad event type
// goes DEAD with a clear reason instead of a broker error code.
func validTopic(topic string) error {
	switch topic {
	case "":
		return fmt.Errorf(`invalid topic "": Kafka topic names are 1 to %d characters of [a-zA-Z0-9._-]`, maxTopicLen)
	case ".", "..":
		return fmt.Errorf(`invalid topic %q: Kafka does not allow "." or ".." as a topic name`, topic)
	}
	// Every allowed character is one byte, so a rune that is not one of
	// them is named whole rather than by its first byte.
	for _, r := range topic {
		if r >= utf8.RuneSelf || !legalInTopic(byte(r)) {
			return fmt.Errorf("invalid topic %q: character %q is not allowed; Kafka topic names use [a-zA-Z0-9._-]", publisher.Clip(topic), r)
		}
	}
	if len(topic) > maxTopicLen {
		return fmt.Errorf("invalid topic %q: it is %d characters; Kafka topic names are 1 to %d characters", publisher.Clip(topic), len(topic), maxTopicLen)
	}
	return nil
}

func legalInTopic(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		return true
	}
	return false
}

// Publisher publishes to Kafka.
type Publisher struct {
	cfg Config
	// writer sends batches; isolate sends one record per produce request,
	// to find which records of a refused request are too large.
	writer, isolate *kafkago.Writer
	transport       *kafkago.Transport
	// dialer opens the direct connections of Ping and topic checks, which
	// must reach a broker rather than the transport's cached metadata.
	dialer *kafkago.Dialer
	cancel context.CancelFunc
	// ce maps events to CloudEvents attributes; nil sends X-Event-*.
	ce *cloudevents.Mapper

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Open prepares the writer. It connects to nothing: brokers that are down are
// not an error, Ping reports them. Only the configuration can fail here, such
// as unreadable TLS files.
func Open(ctx context.Context, cfg Config) (*Publisher, error) {
	var tlsCfg *tls.Config
	if cfg.TLS {
		var err error
		tlsCfg, err = publisher.TLSFiles{CA: cfg.TLSCA, Cert: cfg.TLSCert, Key: cfg.TLSKey, Insecure: cfg.TLSInsecure}.Config()
		if err != nil {
			return nil, fmt.Errorf("kafka URL: %w", err)
		}
	}
	mechanism, err := saslMechanism(cfg)
	if err != nil {
		return nil, fmt.Errorf("kafka URL: %w", err)
	}

	// The transport's background metadata refreshes live until Close.
	bg, cancel := context.WithCancel(context.Background())
	// Each address of a several-broker list gets its share of the dial
	// timeout, so one that never answers leaves time to try the others.
	perAddr := max(cfg.Timeout/time.Duration(len(cfg.Brokers)), time.Second)
	transport := &kafkago.Transport{
		Dial:        (&net.Dialer{Timeout: perAddr}).DialContext,
		DialTimeout: cfg.Timeout,
		ClientID:    clientID,
		TLS:         tlsCfg,
		SASL:        mechanism,
		Context:     bg,
	}
	newWriter := func(batchSize int) *kafkago.Writer {
		return &kafkago.Writer{
			Addr:         kafkago.TCP(cfg.Brokers...),
			Balancer:     kafkago.Murmur2Balancer{},
			MaxAttempts:  writeAttempts,
			BatchSize:    batchSize,
			BatchBytes:   cfg.BatchBytes,
			BatchTimeout: flushAfter,
			ReadTimeout:  cfg.Timeout,
			WriteTimeout: cfg.Timeout,
			RequiredAcks: acksByName[cfg.Acks],
			Compression:  compressionByName[cfg.Compression],
			Transport:    transport,
			// The cluster's auto.create.topics.enable decides, as it does
			// for the Java producer.
			AllowAutoTopicCreation: true,
		}
	}
	return &Publisher{
		cfg:       cfg,
		ce:        cfg.CloudEvents.Mapper(ctx),
		writer:    newWriter(writerBatchSize),
		isolate:   newWriter(1),
		transport: transport,
		dialer: &kafkago.Dialer{
			ClientID:      clientID,
			Timeout:       cfg.Timeout,
			TLS:           tlsCfg,
			SASLMechanism: mechanism,
		},
		cancel: cancel,
	}, nil
}

func saslMechanism(cfg Config) (sasl.Mechanism, error) {
	switch cfg.SASL {
	case "plain":
		return plain.Mechanism{Username: cfg.User, Password: cfg.Password}, nil
	case "scram-sha-256", "scram-sha-512":
		algo := scram.SHA256
		if cfg.SASL == "scram-sha-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, cfg.User, cfg.Password)
		if err != nil {
			// The library's error may quote the credentials.
			return nil, fmt.Errorf("sasl=%s: user name or password is not valid SASLprep text", cfg.SASL)
		}
		return m, nil
	}
	return nil, nil
}

// Publish sends the batch in one WriteMessages call and maps each record's
// outcome back to its event. Events that cannot become a valid record, or
// whose topic is missing, are answered without being sent.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	if p.closed.Load() {
		return publisher.Fill(len(batch), publisher.Unavailable(errClosed))
	}
	errs := make([]error, len(batch))
	msgs := make([]kafkago.Message, 0, len(batch))
	at := make([]int, 0, len(batch)) // msgs[j] carries batch[at[j]]
	topics := map[string]error{}     // per topic: nil, or why nothing can go there now
	now := time.Now()
	for i := range batch {
		m, err := p.message(&batch[i], now)
		if err != nil {
			errs[i] = publisher.Permanent(err)
			continue
		}
		topicErr, seen := topics[m.Topic]
		if !seen {
			topicErr = p.checkTopic(ctx, m.Topic)
			topics[m.Topic] = topicErr
		}
		if topicErr != nil {
			errs[i] = topicErr
			continue
		}
		msgs = append(msgs, m)
		at = append(at, i)
	}

	verdicts := map[string]error{} // per topic a broker called unknown
	var tooLarge []int
	for j, err := range p.write(ctx, p.writer, msgs) {
		if isTooLarge(err) {
			tooLarge = append(tooLarge, j)
			continue
		}
		errs[at[j]] = p.classify(ctx, msgs[j].Topic, err, verdicts)
	}
	if len(tooLarge) == 0 {
		return errs
	}
	// A broker refuses a whole produce request when one record in it is
	// too large, so the innocent records of that request are told apart
	// by sending each on its own, in the same order.
	again := make([]kafkago.Message, len(tooLarge))
	for k, j := range tooLarge {
		again[k] = msgs[j]
	}
	for k, err := range p.write(ctx, p.isolate, again) {
		errs[at[tooLarge[k]]] = p.classify(ctx, again[k].Topic, err, verdicts)
	}
	return errs
}

var errClosed = errors.New("kafka: publisher is closed")

// connectionDropped reports whether err is an established connection
// closed under a request, as opposed to one that could not be made.
func connectionDropped(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// write sends msgs in one call and returns each one's error.
func (p *Publisher) write(ctx context.Context, w *kafkago.Writer, msgs []kafkago.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	err := w.WriteMessages(ctx, msgs...)
	var perMessage kafkago.WriteErrors
	if errors.As(err, &perMessage) && len(perMessage) == len(msgs) {
		return perMessage
	}
	return publisher.Fill(len(msgs), err)
}

// message builds the record for e, or says why it cannot exist.
func (p *Publisher) message(e *outbox.Event, now time.Time) (kafkago.Message, error) {
	topic := p.cfg.Topic
	if topic == "" {
		topic = p.cfg.TopicPrefix + e.Type
		if err := validTopic(topic); err != nil {
			return kafkago.Message{}, err
		}
	}
	rowHeaders, err := outbox.ParseHeaders(e.Headers)
	if err != nil {
		return kafkago.Message{}, err
	}
	var attrs []cloudevents.Attribute
	if p.ce != nil {
		if attrs, err = p.ce.Attributes(e, rowHeaders); err != nil {
			return kafkago.Message{}, err
		}
	}
	headers := make([]kafkago.Header, 0, len(rowHeaders)+len(attrs)+3)
	// Sorted, so that equal rows give byte-identical records.
	for _, k := range slices.Sorted(maps.Keys(rowHeaders)) {
		// The driver's own headers win: two X-Event-ID headers on one
		// record would leave consumers guessing which is true. With
		// CloudEvents, the attributes' headers are the driver's own, and
		// the row's content type travels as datacontenttype.
		if outbox.IsEventHeader(k) || p.ce != nil && (cloudevents.IsRelayAttribute(cePrefix, k) || strings.EqualFold(k, ceContentType)) {
			continue
		}
		headers = append(headers, kafkago.Header{Key: k, Value: []byte(rowHeaders[k])})
	}
	var key []byte // nil, not empty: a NULL partition_key is no key at all
	if e.PartitionKey != "" {
		key = []byte(e.PartitionKey)
	}
	if p.ce == nil {
		headers = append(headers,
			kafkago.Header{Key: outbox.HeaderEventID, Value: []byte(e.ID.String())},
			kafkago.Header{Key: outbox.HeaderEventType, Value: []byte(e.Type)})
		if key != nil {
			headers = append(headers, kafkago.Header{Key: outbox.HeaderPartitionKey, Value: key})
		}
	}
	for _, a := range attrs {
		name := cePrefix + a.Name
		if a.Name == cloudevents.AttrDataContentType {
			name = ceContentType
		}
		headers = append(headers, kafkago.Header{Key: name, Value: []byte(a.Value)})
	}
	value := e.Payload
	if value == nil {
		// A null value is a tombstone on compacted topics.
		value = []byte{}
	}
	m := kafkago.Message{Topic: topic, Key: key, Value: value, Headers: headers, Time: now}
	if size := recordSize(&m); size > p.cfg.BatchBytes {
		// kafka-go would refuse the whole WriteMessages call for it.
		return kafkago.Message{}, fmt.Errorf("record too large: %d bytes counting key, value and headers, above batch_bytes=%d, the largest record the relay sends (keep it at or below the brokers' message.max.bytes)", size, p.cfg.BatchBytes)
	}
	return m, nil
}

// recordSize is the size kafka-go's Writer gives a message (its unexported
// Message.totalSize) and compares with BatchBytes before sending anything.
func recordSize(m *kafkago.Message) int64 {
	n := 4 + 1 + 1 + 8 + (4 + len(m.Key)) + (4 + len(m.Value)) + varintLen(len(m.Headers))
	for _, h := range m.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return int64(n)
}

// varintLen is the length of n as a zig-zag varint.
func varintLen(n int) int {
	u := uint64(n) << 1
	size := 1
	for ; u >= 0x80; u >>= 7 {
		size++
	}
	return size
}

// checkTopic asks for the topic's partitions the way WriteMessages will,
// from the transport's cache or, for a topic the cache does not know, from
// a broker. WriteMessages fails a whole call when one topic is missing, so
// the events of a missing topic are answered here and kept out of it.
func (p *Publisher) checkTopic(ctx context.Context, topic string) error {
	res, err := p.transport.RoundTrip(ctx, p.writer.Addr, &metadataAPI.Request{
		TopicNames:             []string{topic},
		AllowAutoTopicCreation: true,
	})
	if err != nil {
		return p.classify(ctx, topic, fmt.Errorf("metadata for topic %q: %w", topic, err), nil)
	}
	for _, t := range res.(*metadataAPI.Response).Topics {
		if t.Name == topic && t.ErrorCode != 0 {
			return p.classify(ctx, topic, fmt.Errorf("metadata for topic %q: %w", topic, kafkago.Error(t.ErrorCode)), nil)
		}
	}
	return nil
}

func isTooLarge(err error) bool {
	return errors.Is(err, kafkago.MessageSizeTooLarge) || errors.Is(err, kafkago.RecordListTooLarge)
}

// unavailableCodes are broker answers that blame the cluster, not the event:
// retrying soon may work, and every event waiting meanwhile keeps its
// attempts.
var unavailableCodes = []kafkago.Error{
	kafkago.LeaderNotAvailable,
	kafkago.NotLeaderForPartition,
	kafkago.RequestTimedOut,
	kafkago.BrokerNotAvailable,
	kafkago.ReplicaNotAvailable,
	kafkago.NetworkException,
	kafkago.NotEnoughReplicas,
	kafkago.NotEnoughReplicasAfterAppend,
	kafkago.KafkaStorageError,
	kafkago.SASLAuthenticationFailed,
}

// classify sorts a send error into permanent (the event can never be
// stored), unavailable (the cluster cannot take anything now) or retryable.
// missing caches, per Publish, the verdicts on topics a broker called
// unknown; nil skips the cache.
func (p *Publisher) classify(ctx context.Context, topic string, err error, missing map[string]error) error {
	if err == nil {
		return nil
	}
	var code kafkago.Error
	if !errors.As(err, &code) {
		// Not an answer from a broker: the connection failed (refused,
		// reset, DNS, TLS, timeout), the context ended, or the writer is
		// closed. Checked before net.Error, which kafka-go's Error also
		// satisfies. A connection the broker closed mid-request may have
		// been closed over one of the records.
		if ctx.Err() == nil && connectionDropped(err) {
			return publisher.Dropped(fmt.Errorf("kafka: the broker closed the connection: %w", err))
		}
		return publisher.Unavailable(fmt.Errorf("kafka: %w", err))
	}
	switch {
	case isTooLarge(err):
		return publisher.Permanent(fmt.Errorf("message too large for the broker (message.max.bytes, or the topic's max.message.bytes): %w", err))
	case code == kafkago.InvalidTopic:
		return publisher.Permanent(fmt.Errorf("invalid topic %q: %w", topic, err))
	case code == kafkago.UnknownTopicOrPartition:
		if verdict, ok := missing[topic]; ok {
			return verdict
		}
		verdict := p.missingTopic(ctx, topic, err)
		if missing != nil {
			missing[topic] = verdict
		}
		return verdict
	case slices.Contains(unavailableCodes, code):
		return publisher.Unavailable(fmt.Errorf("kafka: topic %q: %w", topic, err))
	}
	return fmt.Errorf("kafka: topic %q: %w", topic, err)
}

// missingTopic asks the brokers themselves whether a topic that a broker
// called unknown really is missing: only then is the event beyond help. A
// broker whose metadata lags behind a new topic says unknown too.
func (p *Publisher) missingTopic(ctx context.Context, topic string, err error) error {
	answer := p.askBrokers(ctx, func(c *kafkago.Conn) error {
		_, err := c.ReadPartitions(topic)
		return err
	})
	var code kafkago.Error
	switch {
	case errors.Is(answer, kafkago.UnknownTopicOrPartition):
		return publisher.Permanent(fmt.Errorf("topic %q does not exist and the cluster does not create topics on demand; create it (relay-cli setup-broker --event-type %q) or fix the event type or topic_prefix",
			topic, strings.TrimPrefix(topic, p.cfg.TopicPrefix)))
	case answer == nil:
		return fmt.Errorf("kafka: topic %q exists, yet a broker called it unknown: %w", topic, err)
	case errors.As(answer, &code):
		return fmt.Errorf("kafka: topic %q: %w", topic, answer)
	}
	return publisher.Unavailable(fmt.Errorf("kafka: cannot check whether topic %q exists: %w", topic, answer))
}

// askBrokers puts question to every broker at once, each on a connection of
// its own, and returns the first answer: nil, or an error code a broker sent
// back. Only when no broker answers within the timeout does it return the
// connection errors, one per broker. Asking all at once means a broker that
// is down or silent costs nothing while another one answers.
func (p *Publisher) askBrokers(ctx context.Context, question func(*kafkago.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	results := make(chan error, len(p.cfg.Brokers))
	for _, addr := range p.cfg.Brokers {
		go func() { results <- p.ask(ctx, addr, question) }()
	}
	failures := make([]string, 0, len(p.cfg.Brokers))
	for range p.cfg.Brokers {
		err := <-results
		var code kafkago.Error
		if err == nil || errors.As(err, &code) {
			return err
		}
		failures = append(failures, err.Error())
	}
	slices.Sort(failures)
	return fmt.Errorf("no broker answered: %s", strings.Join(failures, "; "))
}

func (p *Publisher) ask(ctx context.Context, addr string, question func(*kafkago.Conn) error) error {
	conn, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()
	// A kafka-go Conn honours deadlines, not contexts.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if err := question(conn); err != nil {
		if ctx.Err() != nil {
			// Closing the connection on time made the error "use of
			// closed network connection"; the real story is the wait.
			return fmt.Errorf("%s: no answer: %w", addr, ctx.Err())
		}
		return fmt.Errorf("%s: %w", addr, err)
	}
	return nil
}

// Ping succeeds when any broker of the URL answers a metadata request. It
// opens a connection of its own to each, so it reports the brokers as they
// are now, not as the writer's cached metadata last saw them.
func (p *Publisher) Ping(ctx context.Context) error {
	if p.closed.Load() {
		return errClosed
	}
	err := p.askBrokers(ctx, func(c *kafkago.Conn) error {
		_, err := c.Brokers()
		return err
	})
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}

// Close waits for the writes in flight, until ctx ends, and stops the
// transport's background work. Calling it again does nothing.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		done := make(chan struct{})
		go func() {
			_ = p.writer.Close()
			_ = p.isolate.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			p.closeErr = fmt.Errorf("kafka: close: gave up waiting for writes in flight: %w", ctx.Err())
		}
		p.cancel()
		p.transport.CloseIdleConnections()
	})
	return p.closeErr
}
