package rabbitworker

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/worker"
)

// Config configures a Worker: the portable protocol, the broker and the
// queue, and the transport's own waits.
type Config struct {
	// Protocol is the per-message protocol's settings, as for every
	// transport: the claim store, the handler and its decoder, retention,
	// backoffs, logs and metrics. Retention is required: the broker does
	// not say how long it keeps a message.
	worker.Protocol
	// URL is the broker's AMQP URL (amqp://user:pass@host:port/vhost).
	// Required.
	URL string
	// Queue is the queue to consume, declared by Setup. Required.
	Queue string
	// DeadLetterQueue receives the messages the worker dead-letters
	// (poison, a reused key) and those the broker dead-letters at the
	// delivery limit. Defaults to Queue + ".dlq".
	DeadLetterQueue string
	// DelayQueue is where a retry waits when its delay is longer than
	// MaxReturnDelay (Setup declares it with its TTL and dead-lettering
	// back to Queue). Defaults to Queue + ".delay".
	DelayQueue string
	// Concurrency is how many messages are processed at once, and the
	// channel's prefetch. Defaults to DefaultConcurrency.
	Concurrency int
	// Lease is how long a claim's lease lasts from its acquisition or its
	// last renewal. No broker hold backs it (a delivery stays with its
	// consumer until acked or its connection ends): the lease stands alone.
	// Defaults to 30s.
	Lease time.Duration
	// HeartbeatInterval is how often a running handler's lease is renewed.
	// Defaults to Lease / 3.
	HeartbeatInterval time.Duration
	// HoldFor is how long a failing delivery is retried in process, under
	// its claim and unacked, before it is returned to the queue. With
	// MaxReturnDelay it must stay well under ConsumerTimeout. Defaults to
	// 10m.
	HoldFor time.Duration
	// MaxHoldBackoff caps the delay between in-process retries. Defaults
	// to 10s.
	MaxHoldBackoff time.Duration
	// MaxReturnDelay is the longest a returned delivery (a retry, or a
	// duplicate waiting for the holder of its key) is kept unacked before
	// it is requeued: the broker has no delayed redelivery, so a delay up
	// to it is waited here; a longer one goes through DelayQueue. Defaults
	// to 1m.
	MaxReturnDelay time.Duration
	// ConsumerTimeout is the broker's consumer_timeout: how long it lets a
	// delivery stay unacked before it closes the channel. The handler's
	// context ends a minute before it. Defaults to 30m, the broker's.
	ConsumerTimeout time.Duration
	// DeliveryLimit is the queue's x-delivery-limit (Setup declares it):
	// the delivery after which the broker dead-letters a message by
	// itself. The retry delays are sized so that the deliveries left span
	// OutageCover. Defaults to DefaultDeliveryLimit.
	DeliveryLimit int
	// ShutdownTimeout is how long Run waits, after its context ends, for
	// the handlers that run; then it closes the connection and the broker
	// requeues what is unacked. Defaults to DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// MinReconnect and MaxReconnect bound the backoff between connection
	// attempts after the broker was lost. Default to 200ms and 15s.
	MinReconnect time.Duration
	MaxReconnect time.Duration
	// DialTimeout bounds a connection attempt. Defaults to 10s.
	DialTimeout time.Duration
	// BreakerThreshold is how many dependency failures in a row make
	// Health report the dependency. Defaults to
	// DefaultBreakerThreshold; negative: none.
	BreakerThreshold int
}

// Defaults of Config's fields.
const (
	DefaultConcurrency      = 16
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultBreakerThreshold = 5
	DefaultLease            = 30 * time.Second
	DefaultHoldFor          = 10 * time.Minute
	DefaultMaxReturnDelay   = time.Minute
	DefaultConsumerTimeout  = 30 * time.Minute
	// DefaultDeliveryLimit is the x-delivery-limit Setup declares.
	DefaultDeliveryLimit = 20
	// consumerTimeoutMargin is how long before the broker's
	// consumer_timeout every hold ends: the broker checks it about once a
	// minute, and the margin must cover the handler's end and the ack.
	consumerTimeoutMargin = 5 * time.Minute
)

// DeadLetterQueueOf is a queue's default dead-letter queue.
func DeadLetterQueueOf(queue string) string { return queue + ".dlq" }

func (c *Config) setDefaults() {
	if c.DeadLetterQueue == "" && c.Queue != "" {
		c.DeadLetterQueue = DeadLetterQueueOf(c.Queue)
	}
	if c.DelayQueue == "" && c.Queue != "" {
		c.DelayQueue = DelayQueueOf(c.Queue)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.Lease / 3
	}
	if c.HoldFor == 0 {
		c.HoldFor = DefaultHoldFor
	}
	if c.MaxHoldBackoff == 0 {
		c.MaxHoldBackoff = 10 * time.Second
	}
	if c.MaxReturnDelay == 0 {
		c.MaxReturnDelay = DefaultMaxReturnDelay
	}
	if c.ConsumerTimeout == 0 {
		c.ConsumerTimeout = DefaultConsumerTimeout
	}
	if c.DeliveryLimit == 0 {
		c.DeliveryLimit = DefaultDeliveryLimit
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.MinReconnect == 0 {
		c.MinReconnect = 200 * time.Millisecond
	}
	if c.MaxReconnect == 0 {
		c.MaxReconnect = 15 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = DefaultBreakerThreshold
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Metrics == nil {
		c.Metrics = worker.NewMetrics(nil) // one set for the engine and the transport's own counts
	}
}

// CheckSettings validates c's settings (not its clients: Store, Handler)
// with their defaults, as New does before it connects, and without
// connecting: the binary checks its flags and environment with it. The
// errors are field errors under worker.ErrConfig.
func (c Config) CheckSettings() error {
	c.setDefaults()
	return c.validate()
}

// validate names every bad field, joined under worker.ErrConfig. The
// protocol's own fields are checked by worker.NewEngine.
func (c *Config) validate() error {
	var errs []error
	bad := func(field string, value any, format string, args ...any) {
		errs = append(errs, &setting.Error{Field: field, Value: value, Problem: fmt.Sprintf(format, args...)})
	}
	if c.URL == "" {
		errs = append(errs, &setting.Error{Field: "URL", Problem: "is required"})
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		bad("URL", redact(c.URL), "must be an amqp:// or amqps:// URL")
	}
	if c.Queue == "" {
		errs = append(errs, &setting.Error{Field: "Queue", Problem: "is required"})
	}
	if c.DeadLetterQueue != "" && c.DeadLetterQueue == c.Queue {
		bad("DeadLetterQueue", c.DeadLetterQueue, "must not be the queue itself")
	}
	if c.DelayQueue != "" && (c.DelayQueue == c.Queue || c.DelayQueue == c.DeadLetterQueue) {
		bad("DelayQueue", c.DelayQueue, "must be neither the queue nor the dead-letter queue")
	}
	if c.Concurrency < 1 || c.Concurrency > worker.MaxConcurrency {
		bad("Concurrency", c.Concurrency, "must be 1 to %d", worker.MaxConcurrency)
	}
	if c.Lease <= 0 {
		bad("Lease", c.Lease, "must be positive")
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.Lease {
		bad("HeartbeatInterval", c.HeartbeatInterval, "must be positive and shorter than Lease (%s)", c.Lease)
	}
	if c.ConsumerTimeout <= consumerTimeoutMargin {
		bad("ConsumerTimeout", c.ConsumerTimeout, "must be more than %s (the broker's default is %s)", consumerTimeoutMargin, DefaultConsumerTimeout)
	}
	if budget := c.ConsumerTimeout - consumerTimeoutMargin; c.HoldFor < 0 || c.HoldFor+c.MaxReturnDelay+c.Lease > budget {
		bad("HoldFor", c.HoldFor, "with MaxReturnDelay %s and Lease %s must stay within %s, %s under the broker's consumer_timeout (ConsumerTimeout %s), which closes the channel of a delivery unacked that long",
			c.MaxReturnDelay, c.Lease, budget, consumerTimeoutMargin, c.ConsumerTimeout)
	}
	if c.MaxReturnDelay < 0 {
		bad("MaxReturnDelay", c.MaxReturnDelay, "must not be negative")
	}
	if c.MaxHoldBackoff <= 0 {
		bad("MaxHoldBackoff", c.MaxHoldBackoff, "must be positive")
	}
	if c.DeliveryLimit < 1 {
		bad("DeliveryLimit", c.DeliveryLimit, "must be positive")
	}
	if c.ShutdownTimeout <= 0 {
		bad("ShutdownTimeout", c.ShutdownTimeout, "must be positive")
	}
	if c.MinReconnect <= 0 || c.MaxReconnect < c.MinReconnect {
		bad("MaxReconnect", c.MaxReconnect, "must be at least MinReconnect %s, which must be positive", c.MinReconnect)
	}
	if c.Retention <= 0 {
		errs = append(errs, &setting.Error{Field: "Retention", Problem: "is required: the broker does not say how long it keeps a message; at least the longest a message may wait in the queue"})
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", worker.ErrConfig, errors.Join(errs...))
}

// redact hides a URL's password.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
