package rabbitworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology is what Setup declares.
type Topology struct {
	// Queue is the quorum queue consumers read. Required.
	Queue string
	// DeadLetterQueue is the quorum queue dead letters go to. Defaults to
	// Queue + ".dlq".
	DeadLetterQueue string
	// DeliveryLimit is the queue's x-delivery-limit. Defaults to
	// DefaultDeliveryLimit.
	DeliveryLimit int
	// DelayQueue is the quorum queue where a retry waits when its delay
	// is longer than a delivery may be held unacked. Defaults to Queue +
	// ".delay".
	DelayQueue string
	// DelayTTL is the delay queue's x-message-ttl: how long a message
	// waits there before the broker dead-letters it back to Queue, one
	// hop of a longer delay. Defaults to DefaultDelayTTL.
	DelayTTL time.Duration
}

// DefaultDelayTTL is the delay queue's x-message-ttl Setup declares: the
// default MaxReturnDelay, so that a delay of any length ends within
// MaxReturnDelay of its due time without being held longer than that.
const DefaultDelayTTL = DefaultMaxReturnDelay

// DelayQueueOf is a queue's default delay queue.
func DelayQueueOf(queue string) string { return queue + ".delay" }

func (t *Topology) setDefaults() {
	if t.DeadLetterQueue == "" {
		t.DeadLetterQueue = DeadLetterQueueOf(t.Queue)
	}
	if t.DeliveryLimit == 0 {
		t.DeliveryLimit = DefaultDeliveryLimit
	}
	if t.DelayQueue == "" {
		t.DelayQueue = DelayQueueOf(t.Queue)
	}
	if t.DelayTTL == 0 {
		t.DelayTTL = DefaultDelayTTL
	}
}

// DeadLetterExchange is the name of a queue's dead-letter exchange.
func DeadLetterExchange(queue string) string { return queue + ".dlx" }

// queueArgs are the source queue's arguments as Setup declares them.
func (t Topology) queueArgs() amqp.Table {
	return amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		"x-delivery-limit":          int64(t.DeliveryLimit),
		"x-dead-letter-exchange":    DeadLetterExchange(t.Queue),
		"x-dead-letter-routing-key": t.DeadLetterQueue,
		"x-dead-letter-strategy":    "at-least-once",
		amqp.QueueOverflowArg:       amqp.QueueOverflowRejectPublish,
	}
}

// delayArgs are the delay queue's arguments: one TTL for every message
// (a per-message expiration would not do: the broker expires only the
// message at a queue's head, so a long one would hold back the shorter
// ones behind it), dead-lettered at-least-once back to the queue through
// the dead-letter exchange.
func (t Topology) delayArgs() amqp.Table {
	return amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		amqp.QueueMessageTTLArg:     t.DelayTTL.Milliseconds(),
		"x-dead-letter-exchange":    DeadLetterExchange(t.Queue),
		"x-dead-letter-routing-key": t.Queue,
		"x-dead-letter-strategy":    "at-least-once",
		amqp.QueueOverflowArg:       amqp.QueueOverflowRejectPublish,
	}
}

// Setup declares the topology on the broker at url: the dead-letter queue
// (quorum), the dead-letter exchange (direct, bound to it), the queue
// (quorum, with x-delivery-limit, dead-lettering at-least-once to the
// exchange, x-overflow reject-publish, which at-least-once dead-lettering
// requires; bound to the exchange too, by its own name, for what comes
// back from the delay queue) and the delay queue (quorum, x-message-ttl
// DelayTTL, dead-lettering at-least-once back to the queue). Declaring
// what exists with the same arguments changes nothing; an existing queue
// with other arguments is an error naming them.
func Setup(ctx context.Context, url string, t Topology) error {
	if t.Queue == "" {
		return errors.New("rabbitworker: setup: the queue is required")
	}
	t.setDefaults()
	if t.DelayTTL < time.Millisecond {
		return fmt.Errorf("rabbitworker: setup: DelayTTL %s: must be at least 1ms", t.DelayTTL)
	}
	if t.DelayQueue == t.Queue || t.DelayQueue == t.DeadLetterQueue {
		return fmt.Errorf("rabbitworker: setup: the delay queue %s must be neither the queue nor the dead-letter queue", t.DelayQueue)
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return fmt.Errorf("rabbitworker: setup: connect to %s: %w", redact(url), err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitworker: setup: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(t.DeadLetterQueue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		return fmt.Errorf("rabbitworker: setup: declare the dead-letter queue %s: %w", t.DeadLetterQueue, err)
	}
	dlx := DeadLetterExchange(t.Queue)
	if err := ch.ExchangeDeclare(dlx, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitworker: setup: declare the dead-letter exchange %s: %w", dlx, err)
	}
	if err := ch.QueueBind(t.DeadLetterQueue, t.DeadLetterQueue, dlx, false, nil); err != nil {
		return fmt.Errorf("rabbitworker: setup: bind %s to %s: %w", t.DeadLetterQueue, dlx, err)
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, t.queueArgs()); err != nil {
		return fmt.Errorf("rabbitworker: setup: declare the queue %s: %w", t.Queue, err)
	}
	if err := ch.QueueBind(t.Queue, t.Queue, dlx, false, nil); err != nil {
		return fmt.Errorf("rabbitworker: setup: bind %s to %s: %w", t.Queue, dlx, err)
	}
	if _, err := ch.QueueDeclare(t.DelayQueue, true, false, false, false, t.delayArgs()); err != nil {
		return fmt.Errorf("rabbitworker: setup: declare the delay queue %s: %w", t.DelayQueue, err)
	}
	return nil
}

// checkQueue checks at start that the queue, the dead-letter queue and the
// delay queue exist, and logs when the queue is not the quorum queue Setup declares
// (a classic queue has no x-delivery-limit: a message that crashes its
// consumer is redelivered without end).
func checkQueue(conn *amqp.Connection, cfg Config, log *slog.Logger) error {
	for _, q := range []string{cfg.Queue, cfg.DeadLetterQueue, cfg.DelayQueue} {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitworker: %w", err)
		}
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
			return fmt.Errorf("rabbitworker: queue %s: %w (run setup to declare the topology)", q, err)
		}
		_ = ch.Close()
	}
	// Declaring the queue again with Setup's arguments changes nothing
	// when they are its own, and names the first that differs otherwise.
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitworker: %w", err)
	}
	t := Topology{Queue: cfg.Queue, DeadLetterQueue: cfg.DeadLetterQueue, DeliveryLimit: cfg.DeliveryLimit}
	_, err = ch.QueueDeclare(cfg.Queue, true, false, false, false, t.queueArgs())
	var ae *amqp.Error
	switch {
	case err == nil:
		_ = ch.Close()
	case errors.As(err, &ae) && strings.Contains(ae.Reason, "'"+amqp.QueueTypeArg+"'"):
		log.Warn("the queue is not a quorum queue (a classic queue?): x-delivery-limit is not available, so a message that crashes its consumer is redelivered without end, and Attempt is 1 or 2 (the redelivered flag) instead of the delivery count; declare it with setup",
			slog.String("broker_said", ae.Reason))
	case errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed:
		log.Warn("the queue's arguments differ from setup's: the delivery limit or dead-lettering may not be what this worker assumes",
			slog.String("broker_said", ae.Reason), slog.Int("delivery_limit", cfg.DeliveryLimit))
	default:
		return fmt.Errorf("rabbitworker: check queue %s: %w", cfg.Queue, err)
	}
	return nil
}
