package sqsworker

import (
	"fmt"
	"time"

	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/worker"
)

// MaxVisibility is SQS's limit on a message's visibility timeout, and on how
// long it may stay invisible in all from its receipt.
const MaxVisibility = 12 * time.Hour

// Config configures a Worker.
type Config struct {
	// Protocol is the per-message protocol's settings (Store, Handler,
	// Decoder, Retention, ...), shared with LambdaConfig; its fields are
	// Config's too.
	worker.Protocol
	// QueueURL is the source queue. Required.
	QueueURL string
	// SQS is the SQS client, usually sqs.NewFromConfig. Required.
	SQS SQSAPI
	// Concurrency is how many messages are processed at once, at most
	// worker.MaxConcurrency. Defaults to 16.
	Concurrency int
	// Pollers is how many long polls run at once. Defaults to one per ten
	// of Concurrency, at least one.
	Pollers int
	// VisibilityTimeout is asked for on each receive, and is the lease's
	// length. Defaults to the queue's visibility timeout.
	VisibilityTimeout time.Duration
	// LeaseMargin is how long before the visibility timeout ends the claim's
	// lease ends. Defaults to a tenth of VisibilityTimeout, between 200ms and 5s.
	LeaseMargin time.Duration
	// HeartbeatInterval is how often visibility and lease are extended while
	// a handler runs. Defaults to a third of VisibilityTimeout.
	HeartbeatInterval time.Duration
	// ShutdownTimeout bounds how long Run takes to return after its context
	// ends, whatever the pollers and handlers do: in-flight messages get all
	// of it but a quarter (at most 5s), then their contexts are cancelled so
	// they release their claims, and at the end Run abandons any handler that
	// ignores its cancelled context, logging its message id (the message
	// reappears when its visibility ends) and returning worker.ErrShutdownTimeout.
	// Defaults to 30s.
	ShutdownTimeout time.Duration
	// HoldFor is how long a message whose step failed retryably is held
	// (visibility extended, claim kept) and retried in process before it is
	// returned to the queue, spending a receive. Defaults to 15m.
	HoldFor time.Duration
	// MaxHoldBackoff caps the delay between in-process retries. Defaults to 10s.
	MaxHoldBackoff time.Duration
	// BreakerThreshold is how many dependency failures in a row, with no
	// message completed between them, open the breaker: then pollers receive
	// one probe message at a time until one completes. Defaults to 5.
	BreakerThreshold int
	// ProbeInterval is the pause between probe receives while the breaker
	// is open. Defaults to 2s.
	ProbeInterval time.Duration
	// DeleteDelay is the longest an ack waits to be batched with others. The
	// claim is completed before, so a crash meanwhile costs a duplicate
	// delivery, not a second effect. Defaults to a twentieth of
	// VisibilityTimeout, at most 1s.
	DeleteDelay time.Duration
	// WaitTime is the long poll's wait. Defaults to 20s.
	WaitTime time.Duration
	// ClockSkewMax is the largest offset of this process's clock from AWS's
	// (measured from the Date of SQS's answers) at which the worker claims
	// messages; beyond it the worker claims nothing, and /readyz answers 503,
	// until the clock agrees again. It must be less than LeaseMargin, which
	// covers it. Negative: no check. Defaults to half of LeaseMargin.
	ClockSkewMax time.Duration
}

// Defaults of Config's settings, named so that the binary's help can show
// them without writing them again.
const (
	DefaultConcurrency      = 16
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultHoldFor          = 15 * time.Minute
	DefaultBreakerThreshold = 5
	DefaultProbeInterval    = 2 * time.Second
)

// setDefaults fills the fields that do not depend on the queue.
func (c *Config) setDefaults() {
	c.SetDefaults()
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Pollers == 0 {
		c.Pollers = max(1, (c.Concurrency+9)/10)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.HoldFor == 0 {
		c.HoldFor = DefaultHoldFor
	}
	if c.MaxHoldBackoff == 0 {
		c.MaxHoldBackoff = 10 * time.Second
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = DefaultBreakerThreshold
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.WaitTime == 0 {
		c.WaitTime = 20 * time.Second
	}
}

// setQueueDefaults fills the fields that default to the queue's settings.
func (c *Config) setQueueDefaults(q QueueInfo) {
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = q.VisibilityTimeout
	}
	if c.LeaseMargin == 0 {
		c.LeaseMargin = min(max(c.VisibilityTimeout/10, 200*time.Millisecond), 5*time.Second)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.VisibilityTimeout / 3
	}
	if c.ClockSkewMax == 0 {
		c.ClockSkewMax = c.LeaseMargin / 2
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention(q)
	}
	if c.DeleteDelay == 0 {
		c.DeleteDelay = min(c.VisibilityTimeout/20, time.Second)
	}
}

// clockBound is how far the worker's clock may be off AWS's: ClockSkewMax,
// or with the check off, LeaseMargin, which the protocol assumes covers it.
func (c *Config) clockBound() time.Duration {
	if c.ClockSkewMax > 0 {
		return c.ClockSkewMax
	}
	return c.LeaseMargin
}

// holdBeforeClaim is the longest a received message may wait before its
// key is acquired: on a FIFO queue, behind the earlier messages of its
// group, for as long as SQS lets a received message stay invisible
// (MaxVisibility); on a standard queue, the in-process retries of a
// failing store (HoldFor), the last try ending with its lease.
func (c *Config) holdBeforeClaim(q QueueInfo) time.Duration {
	if q.FIFO {
		return MaxVisibility
	}
	return c.HoldFor + c.VisibilityTimeout
}

func (c *Config) validate() error {
	var errs []error
	if c.SQS == nil {
		errs = append(errs, &setting.Error{Field: "SQS", Problem: "is required"})
	}
	if c.Store == nil {
		errs = append(errs, &setting.Error{Field: "Store", Problem: "is required"})
	}
	if c.Handler == nil {
		errs = append(errs, &setting.Error{Field: "Handler", Problem: "is required"})
	}
	return setting.Join(append(errs, c.settingErrs()...)...)
}

// CheckSettings validates c's settings (not its clients: SQS, Store,
// Handler) with their defaults, as New does before it reads the queue, and
// without reading it: the binary checks its flags and environment with it
// before it connects to anything. The errors are under worker.ErrConfig, one per field.
func (c Config) CheckSettings() error {
	c.setDefaults()
	return setting.Join(c.settingErrs()...)
}

// settingErrs are c's bad settings, defaults applied.
func (c *Config) settingErrs() []error {
	var errs []error
	if c.QueueURL == "" {
		errs = append(errs, &setting.Error{Field: "QueueURL", Problem: "is required"})
	}
	if c.VisibilityTimeout != 0 {
		errs = append(errs, visibilityErrs(c.VisibilityTimeout)...)
	}
	if c.Concurrency < 1 || c.Concurrency > worker.MaxConcurrency {
		errs = append(errs, fieldErr("Concurrency", c.Concurrency, "must be 1 to %d", worker.MaxConcurrency))
	}
	if c.Pollers < 1 {
		errs = append(errs, fieldErr("Pollers", c.Pollers, "must be at least 1"))
	}
	if c.WaitTime < 0 || c.WaitTime > 20*time.Second {
		errs = append(errs, fieldErr("WaitTime", c.WaitTime, "must be between 0 and 20s"))
	}
	for name, d := range map[string]time.Duration{
		"ShutdownTimeout": c.ShutdownTimeout, "MinRetryBackoff": c.MinRetryBackoff,
		"MaxRetryBackoff": c.MaxRetryBackoff, "DeleteDelay": c.DeleteDelay,
		"Retention": c.Retention, "LeaseMargin": c.LeaseMargin, "HeartbeatInterval": c.HeartbeatInterval,
		"VisibilityTimeout": c.VisibilityTimeout, "OutageCover": c.OutageCover, "HoldFor": c.HoldFor,
		"MaxHoldBackoff": c.MaxHoldBackoff, "ProbeInterval": c.ProbeInterval,
	} {
		if d < 0 {
			errs = append(errs, fieldErr(name, d, "must not be negative"))
		}
	}
	if c.BreakerThreshold < 1 {
		errs = append(errs, fieldErr("BreakerThreshold", c.BreakerThreshold, "must be at least 1"))
	}
	if c.MaxRetryBackoff > MaxVisibility {
		errs = append(errs, fieldErr("MaxRetryBackoff", c.MaxRetryBackoff, "must not exceed SQS's %s", MaxVisibility))
	}
	return append(errs, c.SettingErrors()...)
}

// visibilityErrs are what is wrong with v as a visibility timeout.
func visibilityErrs(v time.Duration) []error {
	switch {
	case v < time.Second || v > MaxVisibility:
		return []error{fieldErr("VisibilityTimeout", v, "must be between 1s and %s", MaxVisibility)}
	case v%time.Second != 0:
		return []error{fieldErr("VisibilityTimeout", v, "SQS counts whole seconds")}
	}
	return nil
}

// validateLease checks the settings that depend on the queue's defaults.
func (c *Config) validateLease() error {
	v := c.VisibilityTimeout
	errs := visibilityErrs(v)
	if c.LeaseMargin >= v {
		errs = append(errs, fieldErr("LeaseMargin", c.LeaseMargin, "must be shorter than VisibilityTimeout %s", v))
	}
	if c.ClockSkewMax >= c.LeaseMargin {
		errs = append(errs, fieldErr("ClockSkewMax", c.ClockSkewMax, "must be less than LeaseMargin %s, which covers it", c.LeaseMargin))
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= v-c.LeaseMargin {
		errs = append(errs, fieldErr("HeartbeatInterval", c.HeartbeatInterval, "must be positive and shorter than VisibilityTimeout minus LeaseMargin (%s)", v-c.LeaseMargin))
	}
	return setting.Join(errs...)
}

func fieldErr(field string, value any, format string, args ...any) *setting.Error {
	return &setting.Error{Field: field, Value: value, Problem: fmt.Sprintf(format, args...)}
}
