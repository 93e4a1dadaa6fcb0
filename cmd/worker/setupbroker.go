package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/claimfirst/claimfirst/worker/kafkaworker"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
)

// kafkaSetup are `worker setup`'s Kafka settings: with KAFKA_BROKERS set it
// creates the topic and its dead-letter topic instead of SQS's queues.
type kafkaSetup struct {
	brokers, topic, dlt *string
	partitions, rf      *int
	sec                 kafkaSecurity
}

func defineKafkaSetup(s *settings) kafkaSetup {
	k := kafkaSettings
	return kafkaSetup{
		brokers:    s.String(k[0].flag, k[0].env, "", "Kafka seed brokers, host:port,...: create the Kafka topic and its dead-letter topic instead of SQS's queues"),
		topic:      s.String(k[1].flag, k[1].env, "payments", "Kafka: the topic"),
		dlt:        s.String(k[3].flag, k[3].env, "", "Kafka: the dead-letter topic (default: <topic>"+kafkaworker.DeadLetterSuffix+")"),
		partitions: s.Int("kafka-partitions", "KAFKA_PARTITIONS", 3, "Kafka: the topic's partitions (the dead-letter topic has one)"),
		rf:         s.Int("kafka-replication-factor", "KAFKA_REPLICATION_FACTOR", -1, "Kafka: both topics' replication factor (-1: the brokers' default)"),
		sec:        defineKafkaSecurity(s),
	}
}

// setup creates the topics, or says they exist, and returns what to print.
func (k kafkaSetup) setup(ctx context.Context, report io.Writer) ([][2]string, error) {
	if *k.dlt == "" {
		*k.dlt = *k.topic + kafkaworker.DeadLetterSuffix
	}
	switch {
	case *k.topic == "":
		return nil, usagef("KAFKA_TOPIC (-kafka-topic) must not be empty")
	case *k.dlt == *k.topic:
		return nil, usagef("KAFKA_DEAD_LETTER_TOPIC (-kafka-dead-letter-topic) %q: must not be the topic", *k.dlt)
	case *k.partitions < 1:
		return nil, usagef("KAFKA_PARTITIONS (-kafka-partitions) %d: must be at least 1", *k.partitions)
	case *k.rf == 0 || *k.rf < -1 || *k.rf > 32767:
		return nil, usagef("KAFKA_REPLICATION_FACTOR (-kafka-replication-factor) %d: must be -1 or 1 to 32767", *k.rf)
	}
	sec, watch, err := k.sec.options()
	if err != nil {
		return nil, err
	}
	if err := k.sec.readPassword(ctx); err != nil {
		return nil, err
	}
	if k.sec.cleartextPassword() {
		fmt.Fprintln(report, "setup: KAFKA_SASL_MECHANISM=PLAIN without KAFKA_TLS sends KAFKA_SASL_PASSWORD as it is: set KAFKA_TLS=on (or KAFKA_TLS_CA_FILE)")
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(splitList(*k.brokers)...)}, sec...)...)
	if err != nil {
		return nil, usagef("KAFKA_BROKERS (-kafka-brokers): %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctx, refused := watch.during(ctx)
	defer func() { _ = refused(nil) }()
	for _, t := range []struct {
		kind, name string
		partitions int32
	}{{"dead-letter topic", *k.dlt, 1}, {"topic", *k.topic, int32(*k.partitions)}} {
		_, err := adm.CreateTopic(ctx, t.partitions, int16(*k.rf), nil, t.name)
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			fmt.Fprintf(report, "setup: %s %s exists\n", t.kind, t.name)
		case err != nil:
			return nil, fmt.Errorf("setup: create %s %s: %w", t.kind, t.name, refused(err))
		default:
			fmt.Fprintf(report, "setup: created %s %s (%d %s)\n", t.kind, t.name, t.partitions, plural(int(t.partitions), "partition"))
		}
	}
	return [][2]string{{"KAFKA_TOPIC", *k.topic}, {"KAFKA_DEAD_LETTER_TOPIC", *k.dlt}}, nil
}

// rabbitSetup are `worker setup`'s RabbitMQ settings: with AMQP_URL set it
// declares rabbitworker.Setup's topology instead of SQS's queues.
type rabbitSetup struct {
	url, queue, dlq *string
	limit           *int
}

func defineRabbitSetup(s *settings) rabbitSetup {
	r := rabbitSettings
	return rabbitSetup{
		url:   s.String(r[0].flag, r[0].env, "", "RabbitMQ broker, amqp://user:pass@host:port/vhost: declare the RabbitMQ topology instead of SQS's queues; never printed"),
		queue: s.String(r[1].flag, r[1].env, "payments", "RabbitMQ: the queue (quorum)"),
		dlq:   s.String(r[2].flag, r[2].env, "", "RabbitMQ: the dead-letter queue (default: <queue>.dlq)"),
		limit: s.Int(r[3].flag, r[3].env, rabbitworker.DefaultDeliveryLimit, "RabbitMQ: the queue's x-delivery-limit: deliveries before the broker dead-letters a message by itself"),
	}
}

// setup declares the topology, says what it created and what existed, and
// returns what to print.
func (r rabbitSetup) setup(ctx context.Context, report io.Writer) ([][2]string, error) {
	if *r.dlq == "" {
		*r.dlq = rabbitworker.DeadLetterQueueOf(*r.queue)
	}
	switch {
	case *r.queue == "":
		return nil, usagef("AMQP_QUEUE (-amqp-queue) must not be empty")
	case *r.dlq == *r.queue:
		return nil, usagef("AMQP_DEAD_LETTER_QUEUE (-amqp-dead-letter-queue) %q: must not be the queue", *r.dlq)
	case *r.limit < 1:
		return nil, usagef("AMQP_DELIVERY_LIMIT (-amqp-delivery-limit) %d: must be at least 1", *r.limit)
	}
	delayQueue := rabbitworker.DelayQueueOf(*r.queue)
	existed, err := queuesExist(*r.url, *r.dlq, *r.queue, delayQueue)
	if err != nil {
		return nil, err
	}
	t := rabbitworker.Topology{Queue: *r.queue, DeadLetterQueue: *r.dlq, DeliveryLimit: *r.limit}
	if err := rabbitworker.Setup(ctx, *r.url, t); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	for _, q := range []struct{ kind, name, what string }{
		{"dead-letter queue", *r.dlq, "quorum, bound to the exchange " + rabbitworker.DeadLetterExchange(*r.queue)},
		{"queue", *r.queue, fmt.Sprintf("quorum, x-delivery-limit %d, dead-lettering at-least-once to %s", *r.limit, *r.dlq)},
		{"delay queue", delayQueue, fmt.Sprintf("quorum, x-message-ttl %s, dead-lettering at-least-once back to %s", rabbitworker.DefaultDelayTTL, *r.queue)},
	} {
		if existed[q.name] {
			fmt.Fprintf(report, "setup: %s %s exists\n", q.kind, q.name)
		} else {
			fmt.Fprintf(report, "setup: created %s %s (%s)\n", q.kind, q.name, q.what)
		}
	}
	return [][2]string{{"AMQP_QUEUE", *r.queue}, {"AMQP_DEAD_LETTER_QUEUE", *r.dlq}}, nil
}

// queuesExist reports which of the queues exist on the broker at url.
func queuesExist(url string, queues ...string) (map[string]bool, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("setup: connect to RabbitMQ (AMQP_URL): %w", err)
	}
	defer func() { _ = conn.Close() }()
	out := map[string]bool{}
	for _, q := range queues {
		// A passive declaration of a missing queue closes its channel:
		// one channel per queue.
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case err == nil:
			out[q] = true
			_ = ch.Close()
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		default:
			return nil, fmt.Errorf("setup: queue %s: %w", q, err)
		}
	}
	return out, nil
}

// plural is noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}
