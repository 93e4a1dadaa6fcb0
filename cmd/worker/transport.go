package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// `worker run` consumes one broker, chosen by which of QUEUE_URL,
// KAFKA_BROKERS and AMQP_URL is set: exactly one. The payment handler, the
// claim store, the provider, the metrics and /readyz are the same for all
// three (app); only the transport differs.

// namedSetting is a transport Config field as the binary's user knows it.
type namedSetting struct{ field, flag, env string }

func (n namedSetting) String() string { return fmt.Sprintf("%s (-%s)", n.env, n.flag) }

// The settings that choose the broker.
var (
	sqsChoice   = namedSetting{"QueueURL", "queue-url", "QUEUE_URL"}
	kafkaChoice = namedSetting{"Brokers", "kafka-brokers", "KAFKA_BROKERS"}
	amqpChoice  = namedSetting{"URL", "amqp-url", "AMQP_URL"}
)

// brokerName names the broker each choice consumes.
var brokerName = map[namedSetting]string{sqsChoice: "SQS", kafkaChoice: "Kafka", amqpChoice: "RabbitMQ"}

// Settings the Kafka and RabbitMQ transports share with the app.
var (
	leaseSetting     = namedSetting{"Lease", "lease", "CLAIM_LEASE"}
	retentionSetting = namedSetting{"Retention", "claim-retention", "CLAIM_RETENTION"}
)

// kafkaSettings are kafkaworker.Config's fields `worker run` takes, besides
// the shared ones of workerSettings.
var kafkaSettings = []namedSetting{
	kafkaChoice,
	{"Topic", "kafka-topic", "KAFKA_TOPIC"},
	{"Group", "kafka-group", "KAFKA_GROUP"},
	{"DeadLetterTopic", "kafka-dead-letter-topic", "KAFKA_DEAD_LETTER_TOPIC"},
	{"SessionTimeout", "kafka-session-timeout", "KAFKA_SESSION_TIMEOUT"},
	{"RebalanceTimeout", "kafka-rebalance-timeout", "KAFKA_REBALANCE_TIMEOUT"},
	{"PartitionOrder", "kafka-partition-order", "KAFKA_PARTITION_ORDER"},
	leaseSetting, retentionSetting,
}

// rabbitSettings are rabbitworker.Config's fields `worker run` takes,
// besides the shared ones of workerSettings.
var rabbitSettings = []namedSetting{
	amqpChoice,
	{"Queue", "amqp-queue", "AMQP_QUEUE"},
	{"DeadLetterQueue", "amqp-dead-letter-queue", "AMQP_DEAD_LETTER_QUEUE"},
	{"DeliveryLimit", "amqp-delivery-limit", "AMQP_DELIVERY_LIMIT"},
	{"ConsumerTimeout", "amqp-consumer-timeout", "AMQP_CONSUMER_TIMEOUT"},
	{"MaxReturnDelay", "amqp-max-return-delay", "AMQP_MAX_RETURN_DELAY"},
	leaseSetting, retentionSetting,
}

// brokerFlags are the Kafka and RabbitMQ settings of `worker run`.
type brokerFlags struct {
	kafkaBrokers, kafkaTopic, kafkaGroup, kafkaDLT    *string
	kafkaSession, kafkaRebalance                      *time.Duration
	kafkaPartitionOrder                               *bool
	kafkaSec                                          kafkaSecurity
	amqpURL, amqpQueue, amqpDLQ                       *string
	amqpDeliveryLimit                                 *int
	amqpConsumerTimeout, amqpMaxReturnDelay, leaseFor *time.Duration
}

// defineBrokerFlags defines the flags of kafkaSettings and rabbitSettings
// (CLAIM_RETENTION is the app's). No default is written here: the library
// fills in each zero value, and the help shows its default.
func defineBrokerFlags(s *settings) *brokerFlags {
	str := func(n namedSetting, help string) *string { return s.String(n.flag, n.env, "", help) }
	dur := func(n namedSetting, help string) *time.Duration { return s.Duration(n.flag, n.env, 0, help) }
	k, r := kafkaSettings, rabbitSettings
	return &brokerFlags{
		kafkaBrokers: str(k[0], "Kafka seed brokers, host:port,... (consume Kafka instead of SQS; exactly one of QUEUE_URL, KAFKA_BROKERS, AMQP_URL; TLS and SASL: KAFKA_TLS, KAFKA_SASL_MECHANISM)"),
		kafkaTopic:   str(k[1], "Kafka: the topic consumed (required with KAFKA_BROKERS)"),
		kafkaGroup:   str(k[2], "Kafka: the consumer group (required with KAFKA_BROKERS)"),
		kafkaDLT:     str(k[3], "Kafka: the dead-letter topic (default: <topic>"+kafkaworker.DeadLetterSuffix+")"),
		kafkaSession: dur(k[4], fmt.Sprintf("Kafka: the group session timeout; a silent member's partitions move after it (default %s)", kafkaworker.DefaultSessionTimeout)),
		kafkaRebalance: dur(k[5], fmt.Sprintf("Kafka: how long the group waits for its members during a rebalance (default %s)",
			kafkaworker.DefaultRebalanceTimeout)),
		kafkaPartitionOrder: s.Bool(k[6].flag, k[6].env, false, "Kafka: process each partition's records one at a time, in offset order (default: one key at a time, keys in parallel)"),
		amqpURL:             str(r[0], "RabbitMQ broker, amqp://user:pass@host:port/vhost (consume RabbitMQ instead of SQS; exactly one of QUEUE_URL, KAFKA_BROKERS, AMQP_URL); never printed"),
		amqpQueue:           str(r[1], "RabbitMQ: the queue consumed, declared by worker setup (required with AMQP_URL)"),
		amqpDLQ:             str(r[2], "RabbitMQ: the dead-letter queue (default: <queue>.dlq)"),
		amqpDeliveryLimit: s.Int(r[3].flag, r[3].env, 0, fmt.Sprintf("RabbitMQ: the queue's x-delivery-limit, as worker setup declared it (default %d)",
			rabbitworker.DefaultDeliveryLimit)),
		amqpConsumerTimeout: dur(r[4], fmt.Sprintf("RabbitMQ: the broker's consumer_timeout; every hold stays 5m under it (default %s)", rabbitworker.DefaultConsumerTimeout)),
		amqpMaxReturnDelay: dur(r[5], fmt.Sprintf("RabbitMQ: the longest a delivery to retry later is kept unacked before it is requeued (default %s)",
			rabbitworker.DefaultMaxReturnDelay)),
		kafkaSec: defineKafkaSecurity(s),
		leaseFor: dur(leaseSetting, fmt.Sprintf("Kafka and RabbitMQ: the claim's lease, renewed while the handler runs (default: Kafka a third of the session timeout, RabbitMQ %s; SQS: VISIBILITY_TIMEOUT)",
			rabbitworker.DefaultLease)),
	}
}

// consumer is a transport, built, as `worker run` serves it.
type consumer struct {
	run     func(ctx context.Context) error
	handler func(reg prometheus.Gatherer) http.Handler // /metrics, /healthz, /readyz
}

// healthConsumer serves a transport whose readiness is its Health: the
// Kafka and RabbitMQ workers.
func healthConsumer(w interface {
	Run(ctx context.Context) error
	Health() error
}, m *worker.Metrics,
) consumer {
	return consumer{run: w.Run, handler: func(g prometheus.Gatherer) http.Handler {
		return worker.HTTPHandler(w.Health, g, m)
	}}
}

// starter builds the chosen transport on the app's protocol: store,
// handler, decoder, logs, metrics and traces.
type starter func(ctx context.Context, ap *app, p worker.Protocol) (consumer, error)

// setBy is a setting and whether it has a value.
type setBy struct {
	name namedSetting
	set  bool
}

// choose picks the transport from the settings (cfg holds the SQS and the
// shared ones), checks the chosen transport's settings as its library
// does, and returns the setting that chose it and what builds it; or a
// usage error naming the settings when none or more than one broker is
// chosen, when the library refuses a value, or when a setting of another
// broker is set.
func (b *brokerFlags) choose(cfg sqsworker.Config, retention time.Duration) (namedSetting, starter, error) {
	var chosen []namedSetting
	for _, c := range []setBy{{sqsChoice, cfg.QueueURL != ""}, {kafkaChoice, *b.kafkaBrokers != ""}, {amqpChoice, *b.amqpURL != ""}} {
		if c.set {
			chosen = append(chosen, c.name)
		}
	}
	if len(chosen) != 1 {
		names := make([]string, len(chosen))
		for i, n := range chosen {
			names[i] = n.String()
		}
		if len(chosen) == 0 {
			return namedSetting{}, nil, usagef("no broker: set exactly one of %s, %s or %s", sqsChoice, kafkaChoice, amqpChoice)
		}
		are := "are both set"
		if len(chosen) > 2 {
			are = "are all set"
		}
		return namedSetting{}, nil, usagef("%s %s: set exactly one of QUEUE_URL, KAFKA_BROKERS or AMQP_URL", strings.Join(names, " and "), are)
	}
	var start starter
	var err error
	switch chosen[0] {
	case kafkaChoice:
		start, err = b.kafka(cfg, retention)
	case amqpChoice:
		start, err = b.rabbit(cfg, retention)
	default:
		start, err = b.sqs(cfg)
	}
	if err != nil {
		return namedSetting{}, nil, err
	}
	return chosen[0], start, b.othersUnset(chosen[0], cfg)
}

// othersUnset refuses a setting that the chosen broker does not take:
// a setting meant for it would be silently ignored.
func (b *brokerFlags) othersUnset(chosen namedSetting, cfg sqsworker.Config) error {
	sqsOnly := []setBy{
		{namedSetting{"VisibilityTimeout", "visibility-timeout", "VISIBILITY_TIMEOUT"}, cfg.VisibilityTimeout != 0},
		{namedSetting{"ClockSkewMax", "clock-skew-max", "CLOCK_SKEW_MAX"}, cfg.ClockSkewMax != 0},
	}
	kafkaOnly := []setBy{
		{kafkaSettings[1], *b.kafkaTopic != ""}, {kafkaSettings[2], *b.kafkaGroup != ""}, {kafkaSettings[3], *b.kafkaDLT != ""},
		{kafkaSettings[4], *b.kafkaSession != 0}, {kafkaSettings[5], *b.kafkaRebalance != 0}, {kafkaSettings[6], *b.kafkaPartitionOrder},
	}
	if n, set := b.kafkaSec.set(); set {
		kafkaOnly = append(kafkaOnly, setBy{n, true})
	}
	rabbitOnly := []setBy{
		{rabbitSettings[1], *b.amqpQueue != ""}, {rabbitSettings[2], *b.amqpDLQ != ""}, {rabbitSettings[3], *b.amqpDeliveryLimit != 0},
		{rabbitSettings[4], *b.amqpConsumerTimeout != 0}, {rabbitSettings[5], *b.amqpMaxReturnDelay != 0},
	}
	check := func(want namedSetting, settings []setBy) error {
		if chosen == want {
			return nil
		}
		for _, s := range settings {
			if s.set {
				return usagef("%s is set, but it applies to %s (%s) only, and this worker consumes %s (%s)",
					s.name, brokerName[want], want.env, brokerName[chosen], chosen.env)
			}
		}
		return nil
	}
	if err := check(sqsChoice, sqsOnly); err != nil {
		return err
	}
	if err := check(kafkaChoice, kafkaOnly); err != nil {
		return err
	}
	if err := check(amqpChoice, rabbitOnly); err != nil {
		return err
	}
	if chosen == amqpChoice && cfg.ProbeInterval != 0 {
		return usagef("BREAKER_PROBE_INTERVAL (-probe-interval) is set, but it applies to SQS and Kafka only: on RabbitMQ the breaker (BREAKER_THRESHOLD) only makes /readyz name the failing dependency")
	}
	if chosen == sqsChoice && *b.leaseFor != 0 {
		return usagef("%s is set, but on SQS the lease is the visibility timeout: set VISIBILITY_TIMEOUT (-visibility-timeout)", leaseSetting)
	}
	return nil
}

// sqs is the SQS transport: sqsworker.New on QUEUE_URL.
func (b *brokerFlags) sqs(cfg sqsworker.Config) (starter, error) {
	// The library's own checks, before anything is built or dialled.
	if err := cfg.CheckSettings(); err != nil {
		return nil, reword(err)
	}
	return func(ctx context.Context, ap *app, p worker.Protocol) (consumer, error) {
		cfg.Protocol, cfg.SQS = p, sqs.NewFromConfig(ap.aws, ap.tracing.sqs)
		w, err := sqsworker.New(ctx, cfg)
		if err != nil {
			return consumer{}, err
		}
		ap.warnKeyLifetime(w.Queue())
		return consumer{run: w.Run, handler: w.HTTPHandler}, nil
	}, nil
}

// kafka is the Kafka transport: a member of KAFKA_GROUP on KAFKA_TOPIC.
func (b *brokerFlags) kafka(shared sqsworker.Config, retention time.Duration) (starter, error) {
	cfg := kafkaworker.Config{
		Brokers: splitList(*b.kafkaBrokers), Topic: *b.kafkaTopic, Group: *b.kafkaGroup, DeadLetterTopic: *b.kafkaDLT,
		Concurrency: shared.Concurrency, PartitionOrder: *b.kafkaPartitionOrder, Lease: *b.leaseFor,
		SessionTimeout: *b.kafkaSession, RebalanceTimeout: *b.kafkaRebalance, HoldFor: shared.HoldFor,
		BreakerThreshold: shared.BreakerThreshold, ProbeInterval: shared.ProbeInterval, ShutdownTimeout: shared.ShutdownTimeout,
	}
	cfg.Protocol = shared.Protocol
	cfg.Retention = retention
	if err := cfg.CheckSettings(); err != nil {
		return nil, reword(err, kafkaSettings...)
	}
	sec, watch, err := b.kafkaSec.options()
	if err != nil {
		return nil, err
	}
	cfg.ClientOptions = sec
	return func(ctx context.Context, ap *app, p worker.Protocol) (consumer, error) {
		cfg.Protocol = p
		if b.kafkaSec.cleartextPassword() {
			ap.log.Warn("KAFKA_SASL_MECHANISM=PLAIN without KAFKA_TLS sends KAFKA_SASL_PASSWORD as it is: set KAFKA_TLS=on (or KAFKA_TLS_CA_FILE)")
		}
		if err := b.kafkaSec.readPassword(ctx); err != nil {
			return consumer{}, err
		}
		nctx, refused := watch.during(ctx)
		w, err := kafkaworker.New(nctx, cfg)
		if err = refused(err); err != nil {
			return consumer{}, err
		}
		return healthConsumer(w, p.Metrics), nil
	}, nil
}

// rabbit is the RabbitMQ transport: AMQP_QUEUE on AMQP_URL.
func (b *brokerFlags) rabbit(shared sqsworker.Config, retention time.Duration) (starter, error) {
	cfg := rabbitworker.Config{
		URL: *b.amqpURL, Queue: *b.amqpQueue, DeadLetterQueue: *b.amqpDLQ, Concurrency: shared.Concurrency, Lease: *b.leaseFor,
		HoldFor: shared.HoldFor, MaxReturnDelay: *b.amqpMaxReturnDelay, ConsumerTimeout: *b.amqpConsumerTimeout,
		DeliveryLimit: *b.amqpDeliveryLimit, ShutdownTimeout: shared.ShutdownTimeout, BreakerThreshold: shared.BreakerThreshold,
	}
	cfg.Protocol = shared.Protocol
	cfg.Retention = retention
	if err := cfg.CheckSettings(); err != nil {
		return nil, reword(err, rabbitSettings...)
	}
	return func(ctx context.Context, _ *app, p worker.Protocol) (consumer, error) {
		cfg.Protocol = p
		w, err := rabbitworker.New(ctx, cfg)
		if err != nil {
			return consumer{}, err
		}
		return healthConsumer(w, p.Metrics), nil
	}, nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
