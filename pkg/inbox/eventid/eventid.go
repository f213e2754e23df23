// Package eventid reads the event id the relay put on a message, for each
// destination, so a consumer can pass it to the inbox.
//
// The functions take the clients' data rather than their types — a NATS
// message's header map, a Kafka record's header slice, an AMQP delivery's
// message id and header table — so this package imports no broker client,
// and a consumer that reads one broker links no other broker's client:
//
//	id, err := eventid.NATS(msg.Headers())           // nats.go jetstream.Msg (or msg.Header of a *nats.Msg)
//	id, err := eventid.Kafka(m.Headers)              // kafka-go Message, franz-go Record, confluent-kafka-go Message
//	id, err := eventid.AMQP(d.MessageId, d.Headers)  // amqp091 Delivery
//	id, err := eventid.Redis(x.Values)               // go-redis XMessage
//	id, err := eventid.Webhook(r.Header)             // *http.Request
//
// With the relay's format=cloudevents the id is the CloudEvents id
// attribute, read by CloudEventsHeaders (HTTP, NATS), CloudEventsKafka,
// CloudEventsAMQP and CloudEventsRedis; NATS, AMQP and Webhook find it
// either way (Nats-Msg-Id, message_id, webhook-id).
//
// A message without an id is ErrMissing: it was not published by the relay
// (or something between took the id off), and redelivering it will not
// give it one.
package eventid

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Where the relay puts the event id.
const (
	// HeaderEventID is the header every driver adds (X-Event-ID).
	HeaderEventID = "X-Event-ID"
	// HeaderNATSMsgID is JetStream's deduplication header, which the NATS
	// driver sets to the event id.
	HeaderNATSMsgID = "Nats-Msg-Id"
	// FieldRedisID is the Redis stream entry field holding the event id.
	FieldRedisID = "id"
	// HeaderWebhookID is the Standard Webhooks message id header, which
	// stays the same across the relay's retries of one event.
	HeaderWebhookID = "webhook-id"
)

// CloudEvents attribute names of the id in binary content mode, per
// protocol binding.
const (
	// CloudEventsHTTPHeader is the HTTP binding's header; the NATS binding
	// uses the same name.
	CloudEventsHTTPHeader = "ce-id"
	// CloudEventsKafkaHeader is the Kafka binding's header.
	CloudEventsKafkaHeader = "ce_id"
	// CloudEventsAMQPProperty is the AMQP binding's application property.
	CloudEventsAMQPProperty = "cloudEvents:id"
	// cloudEventsAMQPPropertyJMS is the prefix some AMQP clients use
	// because a colon is not allowed in JMS property names.
	cloudEventsAMQPPropertyJMS = "cloudEvents_id"
	// CloudEventsRedisField is the entry field the relay's Redis driver
	// writes the id attribute to (no CloudEvents binding covers Redis; the
	// driver uses the Kafka binding's names).
	CloudEventsRedisField = "ce_id"
)

// ErrMissing means the message carries no event id where the relay puts it.
var ErrMissing = errors.New("eventid: message carries no event id")

func missing(where string) error {
	return fmt.Errorf("%w (looked for %s; was it published by the relay?)", ErrMissing, where)
}

// NATS returns the event id of a NATS message from its headers: X-Event-ID,
// or else Nats-Msg-Id. Pass msg.Headers() of a jetstream.Msg or msg.Header
// of a *nats.Msg; both are nats.Header, a map[string][]string. NATS header
// names are case-sensitive and the relay writes these exactly; a header
// spelt in another case is found too, for bridges that change case.
func NATS(headers map[string][]string) (string, error) {
	for _, name := range []string{HeaderEventID, HeaderNATSMsgID} {
		if id := lookup(headers, name); id != "" {
			return id, nil
		}
	}
	return "", missing("the " + HeaderEventID + " and " + HeaderNATSMsgID + " headers")
}

// KafkaHeader is the shape of a Kafka record header in kafka-go
// (kafka.Header), franz-go (kgo.RecordHeader) and confluent-kafka-go
// (kafka.Header): a key and a value. Sarama's *RecordHeader differs (its
// key is []byte); copy its headers into one of these.
type KafkaHeader interface {
	~struct {
		Key   string
		Value []byte
	}
}

// Kafka returns the event id of a Kafka record from its X-Event-ID
// header: eventid.Kafka(m.Headers).
func Kafka[H KafkaHeader](headers []H) (string, error) {
	if id := kafkaHeader(headers, HeaderEventID); id != "" {
		return id, nil
	}
	return "", missing("the " + HeaderEventID + " header")
}

// kafkaHeader returns the value of the first header named name, exactly
// or else in any case.
func kafkaHeader[H KafkaHeader](headers []H, name string) string {
	type header = struct {
		Key   string
		Value []byte
	}
	for _, h := range headers {
		if h := header(h); h.Key == name && len(h.Value) > 0 {
			return string(h.Value)
		}
	}
	for _, h := range headers {
		if h := header(h); strings.EqualFold(h.Key, name) && len(h.Value) > 0 {
			return string(h.Value)
		}
	}
	return ""
}

// AMQP returns the event id of an AMQP 0-9-1 delivery: its message-id
// property, or else its X-Event-ID header. Pass d.MessageId and d.Headers
// of an amqp091.Delivery (amqp091.Table is a map[string]any).
func AMQP(messageID string, headers map[string]any) (string, error) {
	if messageID != "" {
		return messageID, nil
	}
	if id := tableString(headers, HeaderEventID); id != "" {
		return id, nil
	}
	return "", missing("the message_id property and the " + HeaderEventID + " header")
}

// Redis returns the event id of a Redis stream entry from its id field:
// eventid.Redis(msg.Values) for a go-redis XMessage.
func Redis(values map[string]any) (string, error) {
	if id := tableString(values, FieldRedisID); id != "" {
		return id, nil
	}
	return "", missing("the entry field " + FieldRedisID)
}

// Webhook returns the event id of a webhook request from its webhook-id
// header: eventid.Webhook(r.Header).
func Webhook(headers map[string][]string) (string, error) {
	if id := lookup(headers, HeaderWebhookID); id != "" {
		return id, nil
	}
	return "", missing("the " + HeaderWebhookID + " header")
}

// CloudEventsHeaders returns the id of a CloudEvent in binary content mode
// over HTTP (r.Header) or NATS (msg.Headers()): the ce-id header.
func CloudEventsHeaders(headers map[string][]string) (string, error) {
	if id := lookup(headers, CloudEventsHTTPHeader); id != "" {
		return id, nil
	}
	return "", missing("the " + CloudEventsHTTPHeader + " header")
}

// CloudEventsKafka returns the id of a CloudEvent in binary content mode
// over Kafka: the ce_id header.
func CloudEventsKafka[H KafkaHeader](headers []H) (string, error) {
	if id := kafkaHeader(headers, CloudEventsKafkaHeader); id != "" {
		return id, nil
	}
	return "", missing("the " + CloudEventsKafkaHeader + " header")
}

// CloudEventsAMQP returns the id of a CloudEvent in binary content mode
// over AMQP: the cloudEvents:id application property (or cloudEvents_id).
// Pass d.Headers of an amqp091.Delivery.
func CloudEventsAMQP(properties map[string]any) (string, error) {
	for _, name := range []string{CloudEventsAMQPProperty, cloudEventsAMQPPropertyJMS} {
		if id := tableString(properties, name); id != "" {
			return id, nil
		}
	}
	return "", missing("the " + CloudEventsAMQPProperty + " property")
}

// CloudEventsRedis returns the id of a CloudEvent the relay wrote to a
// Redis stream with format=cloudevents: the ce_id field of
// eventid.CloudEventsRedis(msg.Values).
func CloudEventsRedis(values map[string]any) (string, error) {
	if id := tableString(values, CloudEventsRedisField); id != "" {
		return id, nil
	}
	return "", missing("the entry field " + CloudEventsRedisField)
}

// CloudEventsJSON returns the id of a CloudEvent in structured content
// mode (application/cloudevents+json): the "id" member of the JSON body.
// With the CloudEvents SDK, event.ID() is the id already.
func CloudEventsJSON(body []byte) (string, error) {
	var e struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return "", fmt.Errorf("eventid: CloudEvent is not a JSON object: %w", err)
	}
	var id string
	if len(e.ID) == 0 || json.Unmarshal(e.ID, &id) != nil || id == "" {
		return "", missing(`a string "id" member in the CloudEvent`)
	}
	return id, nil
}

// lookup returns the first value of header name in h: under name as
// written, in the canonical form net/http stores (Webhook-Id, Ce-Id,
// X-Event-Id), or in any case.
func lookup(h map[string][]string, name string) string {
	for _, key := range []string{name, canonical(name)} {
		if v := h[key]; len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	for key, v := range h {
		if strings.EqualFold(key, name) && len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return ""
}

// canonical is textproto's canonical header key for ASCII names: each
// dash-separated word capitalised.
func canonical(name string) string {
	b := []byte(strings.ToLower(name))
	upper := true
	for i, c := range b {
		if upper && 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		upper = c == '-'
	}
	return string(b)
}

// tableString returns the text of field name in t, exactly or else in any
// case: AMQP decodes long strings as string and byte arrays as []byte.
func tableString(t map[string]any, name string) string {
	text := func(v any) string {
		switch v := v.(type) {
		case string:
			return v
		case []byte:
			return string(v)
		}
		return ""
	}
	if id := text(t[name]); id != "" {
		return id
	}
	for key, v := range t {
		if strings.EqualFold(key, name) {
			if id := text(v); id != "" {
				return id
			}
		}
	}
	return ""
}
