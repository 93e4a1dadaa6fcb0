package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/origin"
)

// Protocol configures the per-message protocol that every transport
// shares: the claim store, the handler and its decoder, how long completed
// keys are remembered, the retry schedule, and the process's identity,
// logs, metrics, traces and clock. Each transport's configuration embeds it
// (sqsworker.Config, sqsworker.LambdaConfig).
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
	// Retention is how long completed keys are remembered. It must
	// outlive every redelivery the broker can make: for SQS at least
	// sqsworker.MinRetention (the queue's retention plus the longest wait
	// before a claim plus twice the clock bound). The transport fills its
	// default from the broker (sqsworker.DefaultRetention of the queue); a
	// Lambda without a QueueURL cannot read the queue and requires it.
	Retention time.Duration
	// MinRetryBackoff is the delay before the first retry of a failed
	// step, in process or through the queue. Defaults to 1s.
	MinRetryBackoff time.Duration
	// MaxRetryBackoff caps the visibility delay of a message returned to
	// the queue after a failure. Defaults to DefaultMaxRetryBackoff (12h
	// less a second, SQS's cap).
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
	// Defaults to unregistered metrics (HTTPHandler serves them all the
	// same).
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

// MaxConcurrency is the most messages (or Lambda records) a transport
// processes at once. Each is a goroutine with its own heartbeat, and every
// ten a long poll: far above what one process's CPU, connections and the
// provider can serve, a larger number only multiplies leases that lapse
// while messages wait their turn. Scale out with more workers instead.
const MaxConcurrency = 1000

// SetDefaults fills f's unset settings with their defaults. A transport
// calls it before it reads them (NewEngine calls it too); calling it again
// changes nothing.
func (f *Protocol) SetDefaults() { f.setDefaults() }

// setDefaults fills the protocol settings' defaults.
func (f *Protocol) setDefaults() {
	if f.Decoder == nil {
		f.Decoder = KeyFromMessageID
	}
	if _, unwraps := f.Decoder.(unwrapping); !f.KeepEnvelopes && !unwraps {
		f.Decoder = UnwrapEnvelopes(f.Decoder)
	}
	if f.MinRetryBackoff == 0 {
		f.MinRetryBackoff = time.Second
	}
	if f.MaxRetryBackoff == 0 {
		f.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if f.OutageCover == 0 {
		f.OutageCover = DefaultOutageCover
	}
	if f.Owner == "" {
		f.Owner = defaultOwner()
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

// SettingErrors returns what is wrong with f's settings, defaults applied,
// (not joined: a transport adds its own and joins them under ErrConfig): a MaxRetryBackoff below MinRetryBackoff, an
// OriginalIDSecret too short (never showing it). Store, Handler and
// Retention are not checked: NewEngine does, once the transport filled
// what it derives from its broker.
func (f *Protocol) SettingErrors() []error {
	var errs []error
	if f.MaxRetryBackoff < f.MinRetryBackoff {
		errs = append(errs, fieldErr("MaxRetryBackoff", f.MaxRetryBackoff, "must not be less than MinRetryBackoff %s", f.MinRetryBackoff))
	}
	return append(errs, f.secretErrs()...)
}

// secretErrs are what is wrong with f's OriginalIDSecret, never showing it.
func (f *Protocol) secretErrs() []error {
	if origin.Check(f.OriginalIDSecret) != nil {
		return []error{&setting.Error{Field: "OriginalIDSecret", Problem: fmt.Sprintf("must be at least %d bytes", origin.MinSecretBytes)}}
	}
	return nil
}

func fieldErr(field string, value any, format string, args ...any) *setting.Error {
	return &setting.Error{Field: field, Value: value, Problem: fmt.Sprintf(format, args...)}
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

// DefaultOutageCover is Protocol.OutageCover's default.
const DefaultOutageCover = time.Hour

// DefaultMaxRetryBackoff is Protocol.MaxRetryBackoff's default: 12h less a
// second, SQS's cap on a message's visibility (a transport whose broker
// keeps a returned delivery away for less says so in
// EngineOptions.MaxDelay).
const DefaultMaxRetryBackoff = 12*time.Hour - time.Second

// checker is a store that can check at start that it can work: its table
// exists with the key and TTL it needs (dynamo.Store.Check).
type checker interface {
	Check(ctx context.Context) error
}

// CheckStore runs s's Check (dynamo.Store.Check, postgres.Store.Check: its
// table exists with the key and TTL it needs), if it has one; a failure
// wraps ErrConfig, so a transport refuses to start rather than fail at
// the first message.
func CheckStore(ctx context.Context, s claimstore.Store) error {
	c, ok := s.(checker)
	if !ok {
		return nil
	}
	if err := c.Check(ctx); err != nil {
		if ctx.Err() != nil {
			return err // stopped while checking
		}
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// defaultOwner names this process: host, pid and a random suffix.
func defaultOwner() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
