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
		detail := "the cluster's default partitions"
		if pp.Partitions > 0 && action == publisher.Created {
			detail = fmt.Sprintf("%d partitions", pp.Partitions)
		}
		if action == publisher.Exists {
			detail = "left as it is"
		}
		out = append(out, publisher.Provisioned{Kind: "topic", Name: t.Topic, Action: action, Detail: detail})
	}
	return out, nil
}
