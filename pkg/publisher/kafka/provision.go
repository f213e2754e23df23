package kafka

import (
	"context"
	"errors"
	"fmt"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/relay/pkg/publisher"
)

var _ publisher.Provisioner = (*Publisher)(nil)

// Provision creates the topic of every event type (topic_prefix + event
// type) that the cluster does not have, with p.Partitions partitions (the
// cluster's default when 0) and its default replication. A cluster that
// does not create topics on demand sends events of a missing topic DEAD.
// Kafka routes by exact topic, so no event type may be a pattern. With
// topic= in the URL, that one topic is created.
func (p *Publisher) Provision(ctx context.Context, pp publisher.ProvisionParams) ([]publisher.Provisioned, error) {
	partitions := pp.Partitions
	if partitions <= 0 {
		partitions = -1 // the cluster's num.partitions
	}
	var topics []kafkago.TopicConfig
	switch {
	case p.cfg.Topic != "":
		// topic= sends every event to one topic, whatever its type.
		topics = append(topics, kafkago.TopicConfig{Topic: p.cfg.Topic, NumPartitions: partitions, ReplicationFactor: -1})
		pp.EventTypes = nil
	case len(pp.EventTypes) == 0:
		return nil, errors.New("kafka: name the event types whose topics to create (orders.paid)")
	}
	for _, t := range pp.EventTypes {
		if _, ok := publisher.IsPrefixPattern(t); ok {
			return nil, fmt.Errorf("kafka: topics are named one by one: name each event type instead of %q", t)
		}
		topics = append(topics, kafkago.TopicConfig{Topic: p.cfg.TopicPrefix + t, NumPartitions: partitions, ReplicationFactor: -1})
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	client := &kafkago.Client{Addr: p.writer.Addr, Transport: p.transport}
	res, err := client.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("kafka: create topics: %w", err)
	}
	var out []publisher.Provisioned
	for _, t := range topics {
		action := publisher.Created
		switch err := res.Errors[t.Topic]; {
		case errors.Is(err, kafkago.TopicAlreadyExists):
			action = publisher.Exists
		case err != nil:
			return out, fmt.Errorf("kafka: create topic %q: %w", t.Topic, err)
		}
		detail, err := p.holds(ctx, client, t.Topic)
		if err != nil {
			return out, err
		}
		out = append(out, publisher.Provisioned{Kind: "topic", Name: t.Topic, Action: action, Detail: detail})
	}
	return out, nil
}

// holds says how many partitions a topic has and how many records they
// hold (end offset minus start offset, so records that retention removed
// do not count), so that running Provision again shows what arrived.
func (p *Publisher) holds(ctx context.Context, client *kafkago.Client, topic string) (string, error) {
	meta, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return "", fmt.Errorf("kafka: metadata for topic %q: %w", topic, err)
	}
	var req []kafkago.OffsetRequest
	for _, mt := range meta.Topics {
		if mt.Name != topic {
			continue
		}
		if mt.Error != nil {
			return "", fmt.Errorf("kafka: metadata for topic %q: %w", topic, mt.Error)
		}
		for _, part := range mt.Partitions {
			req = append(req, kafkago.FirstOffsetOf(part.ID), kafkago.LastOffsetOf(part.ID))
		}
	}
	offsets, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: req}})
	if err != nil {
		return "", fmt.Errorf("kafka: offsets of topic %q: %w", topic, err)
	}
	var records int64
	for _, po := range offsets.Topics[topic] {
		if po.Error != nil {
			return "", fmt.Errorf("kafka: offsets of topic %q partition %d: %w", topic, po.Partition, po.Error)
		}
		records += po.LastOffset - po.FirstOffset
	}
	msgs := fmt.Sprintf("%d messages", records)
	if records == 1 {
		msgs = "1 message"
	}
	return fmt.Sprintf("%d partitions, %s", len(req)/2, msgs), nil
}
