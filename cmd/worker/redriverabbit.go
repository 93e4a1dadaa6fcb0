package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/redrive"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
)

// rabbitRedrive is `worker redrive` with AMQP_URL: the dead letters of a
// RabbitMQ queue back to it.
type rabbitRedrive struct {
	url, queue, dlq *string
}

func defineRabbitRedrive(s *settings) rabbitRedrive {
	r := rabbitSettings
	return rabbitRedrive{
		url:   s.String(r[0].flag, r[0].env, "", "RabbitMQ broker, amqp://user:pass@host:port/vhost: move the dead letters of AMQP_QUEUE instead of SQS's; never printed"),
		queue: s.String(r[1].flag, r[1].env, "", "RabbitMQ: the queue to move the dead letters back to (required with AMQP_URL)"),
		dlq:   s.String(r[2].flag, r[2].env, "", "RabbitMQ: its dead-letter queue (default: <queue>.dlq)"),
	}
}

// deathHeader reports whether a moved copy drops header k: the worker's account of
// the last failure, and the broker's dead-lettering record, which describe
// the last failure and not the next, and the attempts and due time a
// retry through the delay queue carried (a moved message starts afresh).
func deathHeader(k string) bool {
	switch k {
	case rabbitworker.ReasonHeader, rabbitworker.AttemptHeader, rabbitworker.KeyHeader, "x-death", "x-delivery-count", "x-claimfirst-publish",
		rabbitworker.AttemptsHeader, rabbitworker.NotBeforeHeader:
		return true
	}
	return strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
}

// rabbitReason is a dead letter's reason: the worker's header, else the
// broker's (delivery_limit, for a message the queue's x-delivery-limit
// dead-lettered), else redrive.NoReason. The broker's is its latest
// death (x-death lists them latest first): a message that went through
// the delay queue died there first, expired, on its way back.
func rabbitReason(d amqp.Delivery) string {
	if r, ok := d.Headers[rabbitworker.ReasonHeader].(string); ok && r != "" {
		return r
	}
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			if r, ok := t["reason"].(string); ok && r != "" {
				return r
			}
		}
	}
	if r, ok := d.Headers["x-first-death-reason"].(string); ok && r != "" {
		return r
	}
	return redrive.NoReason
}

// redrive moves (or, with dryRun, counts) the dead letters: at most those
// the dead-letter queue held when it started, and at most o.Max moved.
// Each is published to the queue with confirms and mandatory, then acked;
// a crash between the two leaves a copy in both, which the claim absorbs.
// Those it leaves are requeued in the dead-letter queue at the end.
func (r rabbitRedrive) redrive(ctx context.Context, o redrive.Options, dryRun bool, io stdio) error {
	if err := require(*r.queue, rabbitSettings[1].flag, rabbitSettings[1].env); err != nil {
		return err
	}
	if *r.dlq == "" {
		*r.dlq = rabbitworker.DeadLetterQueueOf(*r.queue)
	}
	conn, err := amqp.DialConfig(*r.url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return fmt.Errorf("redrive: connect to RabbitMQ (AMQP_URL): %w", err)
	}
	defer func() { _ = conn.Close() }()
	depth := 0
	for _, q := range []string{*r.queue, *r.dlq} {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("redrive: %w", err)
		}
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("redrive: queue %s: %w (worker setup declares it)", q, err)
		}
		depth = st.Messages // the dead-letter queue's, the last
		_ = ch.Close()
	}
	get, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("redrive: %w", err)
	}
	pub, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("redrive: %w", err)
	}
	if err := pub.Confirm(false); err != nil {
		return fmt.Errorf("redrive: confirm mode: %w", err)
	}
	// A mandatory publish no queue takes comes back before its confirmation.
	returns := pub.NotifyReturn(make(chan amqp.Return, 1))
	byReason := map[string]int{}
	var left []uint64 // delivery tags to requeue in the dead-letter queue
	moved, seen := 0, 0
	defer func() {
		for _, tag := range left {
			_ = get.Nack(tag, false, true)
		}
	}()
	for seen < depth && ctx.Err() == nil {
		d, ok, err := get.Get(*r.dlq, false)
		if err != nil {
			return fmt.Errorf("redrive: get from %s: %w", *r.dlq, err)
		}
		if !ok {
			break
		}
		seen++
		reason := rabbitReason(d)
		byReason[reason]++
		if dryRun || !o.Selects(reason) || (o.Max > 0 && moved >= o.Max) {
			left = append(left, d.DeliveryTag)
			continue
		}
		if err := publishBack(ctx, pub, returns, *r.queue, d); err != nil {
			left = append(left, d.DeliveryTag)
			return fmt.Errorf("redrive: moved %d; publish to %s: %w (the message stays in %s)", moved, *r.queue, err, *r.dlq)
		}
		if err := get.Ack(d.DeliveryTag, false); err != nil {
			return fmt.Errorf("redrive: moved %d; ack in %s: %w (the last one moved is in both queues: the claim absorbs it)", moved+1, *r.dlq, err)
		}
		moved++
	}
	if dryRun {
		fmt.Fprintf(io.stdout, "dead-letter queue %s: %d messages (dry run: nothing moved)\n", *r.dlq, seen)
		if n := selected(byReason, o); len(o.Reasons)+len(o.ExcludeReasons) > 0 {
			fmt.Fprintf(io.stdout, "with -reason and -exclude-reason: would move %d messages, would leave %d for their reason\n", n, seen-n)
		}
		printReasons(io.stdout, byReason)
		return nil
	}
	fmt.Fprintf(io.stdout, "moved %d messages from %s to %s", moved, *r.dlq, *r.queue)
	if len(left) > 0 {
		fmt.Fprintf(io.stdout, "; left %d in the dead-letter queue (-reason, -exclude-reason, -max)", len(left))
	}
	fmt.Fprintln(io.stdout)
	if ctx.Err() != nil {
		return errors.New("redrive: interrupted; the rest are still in the dead-letter queue: run it again to move them")
	}
	return nil
}

// selected is how many of the counted dead letters o would move.
func selected(byReason map[string]int, o redrive.Options) int {
	n := 0
	for reason, c := range byReason {
		if o.Selects(reason) {
			n += c
		}
	}
	return n
}

// publishBack publishes d's copy to queue (default exchange, mandatory,
// persistent) and waits for the broker's confirmation: without it the
// dead letter is not acked.
func publishBack(ctx context.Context, pub *amqp.Channel, returns <-chan amqp.Return, queue string, d amqp.Delivery) error {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if !deathHeader(k) {
			headers[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conf, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: amqp.Persistent,
		CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId,
		Body: d.Body,
	})
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the broker refused it (nack)")
	}
	select {
	case ret := <-returns:
		return fmt.Errorf("returned unroutable: %s", ret.ReplyText)
	default:
	}
	return nil
}
