package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/origin"
)

// MaxVisibility is SQS's limit on a message's visibility timeout, and on how
// long it may stay invisible in all from its receipt.
const MaxVisibility = 12 * time.Hour

// Config configures a Worker.
type Config struct {
	// Protocol is the per-message protocol's settings (Store, Handler,
	// Decoder, Retention, ...), shared with LambdaConfig; its fields are
	// Config's too.
	Protocol
	// QueueURL is the source queue. Required.
	QueueURL string
	// SQS is the SQS client, usually sqs.NewFromConfig. Required.
	SQS SQSAPI
	// Concurrency is how many messages are processed at once, at most
	// MaxConcurrency. Defaults to 16.
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
	// reappears when its visibility ends) and returning ErrShutdownTimeout.
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

// Protocol configures the per-message protocol that Worker and Lambda share:
// the claim store, the handler and its decoder, how long completed keys are
// remembered, the retry schedule, and the process's identity, logs,
// metrics, traces and clock. Config and LambdaConfig embed it.
type Protocol struct {
	// Store holds the claims. Required.
	Store claimstore.Store
	// Handler does each message's work. Required.
	Handler Handler
	// Decoder validates a message and chooses its idempotency key. Defaults
	// to KeyFromMessageID.
	Decoder Decoder
	// KeepEnvelopes hands the Decoder SNS notifications and EventBridge
	// events as they arrived. Defaults to false: their envelopes are taken
	// off first (see UnwrapEnvelopes), so a key expression (KeyFromJMESPath)
	// searches the message inside, and one that starts with $body the body
	// as delivered.
	KeepEnvelopes bool
	// Retention is how long completed keys are remembered. It must be at
	// least MinRetention: the queue's retention plus the longest wait
	// before a claim plus twice the clock bound. Defaults to DefaultRetention of the
	// queue; a Lambda without a QueueURL cannot read the queue and requires
	// it.
	Retention time.Duration
	// MinRetryBackoff is the delay before the first retry of a failed
	// step, in process or through the queue. Defaults to 1s.
	MinRetryBackoff time.Duration
	// MaxRetryBackoff caps the visibility delay of a message returned to
	// the queue after a failure. Defaults to 12h less a second (SQS's cap).
	MaxRetryBackoff time.Duration
	// OutageCover is the dependency outage a message must survive before
	// SQS's redrive policy could dead-letter it: the visibility delays after
	// failed receives grow so that the receives left (the queue's
	// maxReceiveCount, read at start) span at least this long. Defaults to 1h.
	OutageCover time.Duration
	// Owner names this instance in claims. Defaults to host/pid/random.
	Owner string
	// Logger receives structured logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics receives counts; NewMetrics(reg) registers them with reg.
	// Defaults to unregistered metrics (Worker.HTTPHandler serves them all
	// the same).
	Metrics *Metrics
	// TracerProvider, if set, traces each message: a span from processing
	// to disposition, with children for acquire, handle and complete, and
	// the producer's trace as parent when the message carries a traceparent
	// attribute (see SpanMessage). Defaults to nil: no spans.
	TracerProvider trace.TracerProvider
	// Now is the clock every protocol step reads: lease ends, backoffs,
	// takeover decisions, the claims' lease_until, expires_at and first_at
	// (the claim store reads its own Config.Now). Tests, a simulator and the
	// clock-skew check move it. Defaults to time.Now.
	Now func() time.Time
	// OnReplay, if set, is called for every delivery of a key completed
	// already (acked without running the handler), after the duplicate is
	// logged and counted, from the goroutine processing it: keep it quick.
	// Defaults to nil.
	OnReplay func(ctx context.Context, r Replay)
	// OriginalIDSecret keys the MAC of OriginalIDAttribute (see package
	// origin): the worker signs the attribute when it dead-letters a
	// message, `worker redrive` keeps it, and a delivery's original id
	// (Message.OriginalID, and so KeyFromMessageID's key) is taken from it
	// only when the MAC verifies, so that no producer can choose another
	// message's key. At least origin.MinSecretBytes; every worker and the
	// redrive of one queue need the same one. Defaults to none: the
	// attribute is neither written nor believed, and a redriven message is
	// keyed by its new id (a business key, such as the payment binary's
	// payment_id, is unaffected).
	OriginalIDSecret origin.Secret
}

// MaxConcurrency is the most messages (or Lambda records) a worker
// processes at once. Each is a goroutine with its own heartbeat, and every
// ten a long poll: far above what one process's CPU, connections and the
// provider can serve, a larger number only multiplies leases that lapse
// while messages wait their turn. Scale out with more workers instead.
const MaxConcurrency = 1000

// Defaults of Config's settings, named so that the binary's help can show
// them without writing them again.
const (
	DefaultConcurrency      = 16
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultOutageCover      = time.Hour
	DefaultHoldFor          = 15 * time.Minute
	DefaultBreakerThreshold = 5
	DefaultProbeInterval    = 2 * time.Second
)

// setDefaults fills the fields that do not depend on the queue.
func (c *Config) setDefaults() {
	c.Protocol.setDefaults()
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

// setDefaults fills the protocol settings' defaults.
func (f *Protocol) setDefaults() {
	if f.Decoder == nil {
		f.Decoder = KeyFromMessageID
	}
	if !f.KeepEnvelopes {
		f.Decoder = UnwrapEnvelopes(f.Decoder)
	}
	if f.MinRetryBackoff == 0 {
		f.MinRetryBackoff = time.Second
	}
	if f.MaxRetryBackoff == 0 {
		f.MaxRetryBackoff = MaxVisibility - time.Second
	}
	if f.OutageCover == 0 {
		f.OutageCover = DefaultOutageCover
	}
	if f.Owner == "" {
		f.Owner = DefaultOwner()
	}
	if f.Logger == nil {
		f.Logger = slog.Default()
	}
	if f.Metrics == nil {
		f.Metrics = NewMetrics(nil)
	}
	if f.Now == nil {
		f.Now = time.Now
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
		errs = append(errs, &FieldError{Field: "SQS", Problem: "is required"})
	}
	if c.Store == nil {
		errs = append(errs, &FieldError{Field: "Store", Problem: "is required"})
	}
	if c.Handler == nil {
		errs = append(errs, &FieldError{Field: "Handler", Problem: "is required"})
	}
	return joinConfig(append(errs, c.settingErrs()...))
}

// CheckSettings validates c's settings (not its clients: SQS, Store,
// Handler) with their defaults, as New does before it reads the queue, and
// without reading it: the binary checks its flags and environment with it
// before it connects to anything. The errors are FieldErrors under ErrConfig.
func (c Config) CheckSettings() error {
	c.setDefaults()
	return joinConfig(c.settingErrs())
}

// settingErrs are c's bad settings, defaults applied.
func (c *Config) settingErrs() []error {
	var errs []error
	if c.QueueURL == "" {
		errs = append(errs, &FieldError{Field: "QueueURL", Problem: "is required"})
	}
	if c.VisibilityTimeout != 0 {
		errs = append(errs, visibilityErrs(c.VisibilityTimeout)...)
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		errs = append(errs, fieldErr("Concurrency", c.Concurrency, "must be 1 to %d", MaxConcurrency))
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
	if c.MaxRetryBackoff < c.MinRetryBackoff {
		errs = append(errs, fieldErr("MaxRetryBackoff", c.MaxRetryBackoff, "must not be less than MinRetryBackoff %s", c.MinRetryBackoff))
	}
	if c.BreakerThreshold < 1 {
		errs = append(errs, fieldErr("BreakerThreshold", c.BreakerThreshold, "must be at least 1"))
	}
	if c.MaxRetryBackoff > MaxVisibility {
		errs = append(errs, fieldErr("MaxRetryBackoff", c.MaxRetryBackoff, "must not exceed SQS's %s", MaxVisibility))
	}
	return append(errs, c.secretErrs()...)
}

// secretErrs are what is wrong with f's OriginalIDSecret, never showing it.
func (f *Protocol) secretErrs() []error {
	if origin.Check(f.OriginalIDSecret) != nil {
		return []error{&FieldError{Field: "OriginalIDSecret", Problem: fmt.Sprintf("must be at least %d bytes", origin.MinSecretBytes)}}
	}
	return nil
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
	return joinConfig(errs)
}

// FieldError is a setting a configuration refuses: validation joins one
// per bad field under ErrConfig, so that a caller (the binary) can name the
// setting as its user knows it (an environment variable, a flag).
type FieldError struct {
	// Field is the configuration field, as named in Config or LambdaConfig.
	Field string
	// Value is the refused value; nil for a missing one.
	Value any
	// Problem says what is wrong with it.
	Problem string
}

// Error implements error: "Field Value: Problem", or "Field Problem"
// for a missing one.
func (e *FieldError) Error() string {
	if e.Value == nil {
		return e.Field + " " + e.Problem
	}
	return fmt.Sprintf("%s %v: %s", e.Field, e.Value, e.Problem)
}

func fieldErr(field string, value any, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Value: value, Problem: fmt.Sprintf(format, args...)}
}

// FieldErrors returns the FieldErrors err joins (in order), none when err
// holds none.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if fe, ok := e.(*FieldError); ok { //nolint:errorlint // this walk is the unwrapping
			out = append(out, fe)
			return
		}
		switch u := e.(type) { //nolint:errorlint // this walk is the unwrapping
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

func joinConfig(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
}

// engine returns the per-message protocol with f's settings (defaults
// filled in) for the broker o describes, logging to log.
func (f *Protocol) engine(log *slog.Logger, o EngineOptions) *Engine {
	s := newSchedule(f.MinRetryBackoff, f.MaxRetryBackoff, f.OutageCover, o.MaxAttempts)
	s.limit = o.MaxDelay
	e := &Engine{processor{
		store: f.Store, handler: f.Handler, decoder: f.Decoder, owner: f.Owner,
		retention: f.Retention, minBackoff: f.MinRetryBackoff, maxHold: o.MaxHoldBackoff,
		schedule: s, deferSlack: time.Second, metrics: f.Metrics, log: log, now: f.Now,
		tracer: newTracer(f.TracerProvider), onReplay: f.OnReplay, system: o.System, skew: o.Clock,
		originSecret: f.OriginalIDSecret,
	}}
	if o.BreakerThreshold > 0 {
		e.breaker = newBreaker(o.BreakerThreshold, f.Metrics, log, f.Now)
	}
	return e
}

// DefaultOwner names this process: host, pid and a random suffix.
func DefaultOwner() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
