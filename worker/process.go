package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/origin"
)

// Action is what a transport does with a delivery after the protocol ran.
type Action int

// The actions of a Disposition.
const (
	// Ack takes the delivery off the broker: done, or a duplicate.
	Ack Action = iota + 1
	// Retry returns the delivery to the broker, to come back after Delay.
	Retry
	// Defer returns the delivery to come back after Delay, when the lease
	// of the holder of its key ends (held elsewhere).
	Defer
	// DeadLetter moves the delivery to the dead letters with Reason.
	DeadLetter
	// Leave touches nothing: the lease was lost or the outcome is unknown,
	// and the broker's own hold ends by itself.
	Leave
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case Defer:
		return "defer"
	case DeadLetter:
		return "dead_letter"
	case Leave:
		return "leave"
	default:
		return fmt.Sprintf("action(%d)", int(a))
	}
}

// Disposition is the result of processing one delivery: what the
// transport does with it. Engine.Process is the one place that decides it
// (the settle table in docs/protocol.md, "Settling a delivery").
type Disposition struct {
	Action Action
	Delay  time.Duration // Retry, Defer
	Reason string        // DeadLetter
}

// storeCallTimeout bounds a completion or release, which outlive the
// handler's context: a hung call must not hold the message forever.
const storeCallTimeout = 10 * time.Second

// Hold describes the broker's hold on a delivery: how long its claim may
// be held and how to extend it. A transport fills it for each delivery.
type Hold struct {
	// Until is when the first lease ends: the end of the broker's hold (a
	// visibility timeout, an invocation's deadline) less a safety margin.
	Until time.Time
	// Deadline is when the handler's context ends whatever happens (the
	// broker's cap on a hold); zero: none.
	Deadline time.Time
	// Interval between heartbeats; zero disables them.
	Interval time.Duration
	// RenewAt is when the first heartbeat is due: Interval after the
	// hold began (the receipt), not after the handler starts, so a claim
	// that took long to win is renewed before its handler runs.
	RenewAt time.Time
	// Extend pushes the broker's hold and returns the new lease end to
	// renew the claim to (zero: it cannot be pushed further); nil disables
	// heartbeats and holding.
	Extend func(ctx context.Context) (time.Time, error)
	// Stop is closed when the transport stops receiving: a held delivery
	// is returned then rather than retried in process. Nil: failures are
	// never held, the delivery goes back at once.
	Stop <-chan struct{}
	// Probe marks the breaker's probe delivery: it must answer quickly
	// whether the dependency is back, so it is not held.
	Probe bool
	// HoldUntil is how long the delivery may be held retrying in process.
	HoldUntil time.Time
	// Ordered marks a delivery the broker hands out in order behind others
	// (an SQS FIFO group): see failures.
	Ordered bool
}

// lease is a delivery's Hold as the protocol tracks it.
type lease struct {
	Hold
	// acq is the acquisition id the delivery claims its key with, the same
	// for every in-process retry: a retry then finds a try whose answer was
	// lost (applied, the connection cut) as its own claim, not as one held
	// elsewhere. Set by acquire.
	acq string
	// twinGone: the key was found held by this process's owner with no
	// delivery of it left here, and claimed once more (awaitTwin).
	twinGone bool
}

// canHold reports whether a failure at now may be retried in process: the
// broker's hold can be extended, the transport is not stopping, and the
// hold has time left.
func (l *lease) canHold(now time.Time) bool {
	if l.Extend == nil || l.Stop == nil || l.Probe || !now.Before(l.HoldUntil) {
		return false
	}
	select {
	case <-l.Stop:
		return false
	default:
		return true
	}
}

// Settler carries out a disposition the way its transport can: the
// long-poll transport and the Lambda adapter differ in how, not in what.
type Settler interface {
	// Ack takes the delivery off the broker (the Lambda: by not reporting it).
	Ack()
	// ReturnAfter makes the delivery come back after delay.
	ReturnAfter(delay time.Duration)
	// DeadLetter moves the delivery to the dead letters with reason and
	// reports whether it is off the broker.
	DeadLetter(reason string) bool
}

// Settle carries out d with s and reports whether the delivery is done:
// off the broker, acked or dead-lettered. A delivery left alone (its lease
// lost, its outcome unknown) comes back when the broker's hold ends.
func (d Disposition) Settle(s Settler) bool {
	switch d.Action {
	case Ack:
		s.Ack()
		return true
	case Retry, Defer:
		s.ReturnAfter(d.Delay)
	case DeadLetter:
		return s.DeadLetter(d.Reason)
	}
	return false
}

// Engine is the per-message protocol a transport drives: decode, key,
// fingerprint, acquire, hold and renew, run the handler, complete or
// release, classify the failure, and choose the Disposition. It knows no
// broker: what it needs from one comes in the Message (Attempt, ...), the
// Hold and EngineOptions. Safe for concurrent use.
type Engine struct {
	processor
}

// EngineOptions is what a transport tells the protocol about its broker.
type EngineOptions struct {
	// System names the broker in the message spans' messaging.system
	// ("aws_sqs"). Defaults to "".
	System string
	// MaxAttempts is how many deliveries of a message the broker makes
	// before it dead-letters it by itself (SQS: the redrive policy's
	// maxReceiveCount); the delays of Retry are sized so that the attempts
	// left span Protocol.OutageCover. Zero: the broker never does, and the
	// delays double up to MaxRetryBackoff. Defaults to 0.
	MaxAttempts int
	// MaxDelay is the longest the broker can keep a returned delivery
	// away; zero: no limit. Defaults to 0.
	MaxDelay time.Duration
	// MaxHoldBackoff caps the delay between in-process retries of a held
	// delivery (see Hold.Extend). Defaults to 0.
	MaxHoldBackoff time.Duration
	// BreakerThreshold is how many dependency failures in a row, with no
	// delivery completed between them, open the breaker (Engine.Health).
	// Zero: no breaker. Defaults to 0.
	BreakerThreshold int
	// Clock, if set, is the clock check the transport feeds with its
	// broker's answers (ClockCheck.Observe): while it finds this clock off
	// the broker's, deliveries are returned unclaimed. Defaults to nil: none.
	Clock *ClockCheck
}

// NewEngine returns the protocol configured by p, with p's defaults
// filled in, for a transport whose broker is described by o. A bad
// configuration is an error wrapping ErrConfig.
func NewEngine(p Protocol, o EngineOptions) (*Engine, error) {
	p.setDefaults()
	var errs []error
	if p.Store == nil {
		errs = append(errs, &setting.Error{Field: "Store", Problem: "is required"})
	}
	if p.Handler == nil {
		errs = append(errs, &setting.Error{Field: "Handler", Problem: "is required"})
	}
	if p.Retention <= 0 {
		errs = append(errs, &setting.Error{Field: "Retention", Problem: "is required"})
	}
	if p.MaxRetryBackoff < p.MinRetryBackoff {
		errs = append(errs, fieldErr("MaxRetryBackoff", p.MaxRetryBackoff, "must not be less than MinRetryBackoff %s", p.MinRetryBackoff))
	}
	if err := setting.Join(errs...); err != nil {
		return nil, err
	}
	return p.engine(p.Logger, o), nil
}

// Process runs the protocol for m, held by the broker as h, and returns
// what the transport does with it. ctx is the handlers' context: it is not
// cancelled when the transport stops receiving, only when in-flight work
// must end.
func (e *Engine) Process(ctx context.Context, m *Message, h Hold) Disposition {
	return e.process(ctx, m, h)
}

// Health returns nil while the engine claims normally, and an error naming
// the dependency and its last failure while the breaker is open, or the
// clock check's finding while this clock is off the broker's.
func (e *Engine) Health() error {
	if err := e.skew.err(); err != nil {
		return err
	}
	if open, dep, reason := e.breaker.state(); open {
		return fmt.Errorf("breaker open: %s keeps failing: %s", dep, reason)
	}
	return nil
}

// processor is the per-message protocol (Engine's): decode, claim, handle
// with heartbeats, then complete, release or dead-letter. It decides; the
// transport acts.
type processor struct {
	store      claimstore.Store
	handler    Handler
	decoder    Decoder
	owner      string
	retention  time.Duration
	schedule   schedule      // delays of Retry, by attempt
	minBackoff time.Duration // first in-process retry's delay
	maxHold    time.Duration // longest delay between in-process retries
	deferSlack time.Duration
	breaker    *breaker    // nil: none (Lambda)
	skew       *ClockCheck // nil: no clock check
	system     string      // messaging.system of the spans
	metrics    *Metrics
	tracer     trace.Tracer // nil: no spans
	log        *slog.Logger
	now        func() time.Time
	onReplay   func(context.Context, Replay) // nil: none
	// originSecret verifies OriginalIDAttribute ("": nothing verifies).
	originSecret origin.Secret
	// flights are the keys this engine's deliveries hold (awaitTwin).
	flights flights
}

// process runs the protocol for m. ctx is the handlers' context: it is not
// cancelled when the worker stops receiving, only when in-flight work must end.
func (p *processor) process(ctx context.Context, m *Message, h Hold) (disp Disposition) {
	l := lease{Hold: h}
	ctx, span := p.startMessage(ctx, m)
	defer func() { endMessage(span, m, disp) }()
	log := p.log.With(slog.String("message_id", m.ID), slog.Int("attempt", m.Attempt))
	verifyOrigin(m, p.originSecret, log)
	if m.originalID != "" && m.originalID != m.ID {
		log = log.With(slog.String("original_message_id", m.originalID)) // a redriven copy
	}
	if err := p.decode(m); err != nil {
		return p.poison(log, err)
	}
	log = log.With(slog.String("idempotency_key", m.Key))

	if err := p.skew.err(); err != nil {
		// Logged once when it began (ClockCheck.Observe); claim nothing.
		p.metrics.record(log, slog.LevelDebug, OutcomeClockSkew, "not claiming: clock skew; returning the message", slog.Any("error", err))
		return Disposition{Action: Retry, Delay: skewRetryDelay}
	}
	now := p.now()
	if !l.Until.After(now) {
		// The message sat too long before processing: its lease would already
		// be over. Let the broker redeliver it at once rather than race the
		// redelivery.
		log.Warn("lease ended before processing started; returning message")
		return Disposition{Action: Retry}
	}
	acq, err := p.acquire(ctx, log, m, &l)
	for err == nil && acq.outcome == claimstore.HeldElsewhere && p.awaitTwin(ctx, log, m, acq.held, &l) {
		acq, err = p.acquire(ctx, log, m, &l)
	}
	now = p.now()
	switch {
	case errors.Is(err, claimstore.ErrInvalidKey):
		return p.poison(log, Permanent("invalid idempotency key", err))
	case err != nil:
		p.metrics.record(log, slog.LevelError, OutcomeStoreError, "acquire failed; the message will be retried", slog.Any("error", err))
		return Disposition{Action: Retry, Delay: p.schedule.delay(m.Attempt)}
	}
	switch acq.outcome {
	case claimstore.KeyReused:
		p.metrics.record(log, slog.LevelWarn, OutcomeKeyReused, "idempotency key reused with another payload", slog.String("fingerprint", m.Fingerprint))
		return p.poison(log, &PermanentError{Code: CodeKeyReused, Reason: fmt.Sprintf("idempotency key %q reused with another payload (fingerprint %s, stored %s)",
			m.Key, m.Fingerprint, acq.reused.Stored)})
	case claimstore.Duplicate:
		r := replayed(m, acq.replay)
		p.metrics.replays.WithLabelValues(r.Source).Inc()
		if p.onReplay != nil {
			p.onReplay(ctx, r)
		}
		if acq.notEncoded != nil {
			p.metrics.record(log, slog.LevelInfo, OutcomeDuplicate, "duplicate: key already completed, its result not stored: it did not encode",
				slog.Int64("token", acq.replay.Token), slog.String("result_type", acq.notEncoded.Type), slog.String("reason", acq.notEncoded.Reason),
				slog.Bool("replayed", true), slog.String("replay_source", r.Source))
			return Disposition{Action: Ack}
		}
		if acq.notStored != nil {
			p.metrics.record(log, slog.LevelInfo, OutcomeDuplicate, "duplicate: key already completed, its result too large to have been stored",
				slog.Int64("token", acq.replay.Token), slog.Int("result_bytes", acq.notStored.Size), slog.String("result_sha256", acq.notStored.SHA256),
				slog.Bool("replayed", true), slog.String("replay_source", r.Source))
			return Disposition{Action: Ack}
		}
		attrs := append(resultAttrs(acq.replay.Value), slog.Int64("token", acq.replay.Token),
			slog.Bool("replayed", true), slog.String("replay_source", r.Source))
		p.metrics.record(log, slog.LevelInfo, OutcomeDuplicate, "duplicate: key already completed", attrs...)
		return Disposition{Action: Ack}
	case claimstore.HeldElsewhere:
		wait := acq.held.Until.Sub(now) + p.deferSlack
		p.metrics.record(log, slog.LevelInfo, OutcomeDeferred, "deferred: key held elsewhere", slog.String("holder", acq.held.Owner),
			slog.Int64("token", acq.held.Token), slog.String("visible_in", wait.String()))
		return Disposition{Action: Defer, Delay: wait}
	}

	c := acq.claim
	m.Token, m.FirstAt = c.Token, c.FirstAt
	fl := p.flights.start(m.Key, c.Token)
	defer p.flights.finish(m.Key, fl)
	log = log.With(slog.Int64("token", m.Token))
	p.metrics.record(log, slog.LevelDebug, OutcomeAcquired, "claim acquired", slog.Time("lease_until", c.Until()))
	if m.Token > 1 {
		p.tookOver(log, c)
	}
	result, herr, lost := p.handle(ctx, log, m, c, &l)
	if lost {
		p.metrics.record(log, slog.LevelWarn, OutcomeLeaseLost, "lease lost while handling: not completing, not acking")
		return Disposition{Action: Leave}
	}
	unencoded := notEncoded(herr)
	if unencoded != nil {
		// The handler succeeded; its result did not encode. Complete with
		// the marker that says so: the work is never done again.
		result, herr = unencoded.Stored(), nil
	}
	if herr == nil {
		result, herr, err = p.finish(ctx, m, c, result)
	}
	if herr == nil && err == nil && unencoded != nil {
		p.metrics.resultsNotStored.Inc()
		p.breaker.success()
		p.metrics.record(log, slog.LevelWarn, OutcomeCompleted, "completed without its result: it does not encode",
			slog.String("result_type", unencoded.Type), slog.String("reason", unencoded.Reason))
		return Disposition{Action: Ack}
	}
	var notStored *once.ResultTooLargeError
	if herr == nil && errors.As(err, &notStored) {
		// Completed without its result: the work is done and never
		// done again; duplicates are acked without it.
		p.metrics.resultsNotStored.Inc()
		p.breaker.success()
		p.metrics.record(log, slog.LevelWarn, OutcomeCompleted, "completed without its result: too large to store", slog.Int("result_bytes", notStored.Size),
			slog.String("result_sha256", notStored.SHA256), slog.Int("max_result_bytes", claimstore.MaxResultBytes))
		return Disposition{Action: Ack}
	}
	if herr == nil {
		switch {
		case errors.Is(err, once.ErrLeaseLost):
			p.metrics.record(log, slog.LevelWarn, OutcomeLeaseLost, "lease lost at completion: a later holder owns the key; not acking", slog.Any("error", err))
			return Disposition{Action: Leave}
		case err != nil:
			// The outcome is unknown. The message and the lease expire
			// together; the redelivery finds the claim completed or takes over.
			p.metrics.record(log, slog.LevelError, OutcomeStoreError, "complete failed; leaving the message to redeliver", slog.Any("error", err))
			return Disposition{Action: Leave}
		}
		p.breaker.success()
		p.metrics.record(log, slog.LevelInfo, OutcomeCompleted, "completed", resultAttrs(result)...)
		return Disposition{Action: Ack}
	}

	delay := max(p.schedule.delay(failures(m, c, l.Ordered)), retryAfterOf(herr))
	if rerr := c.Release(ctx, herr.Error()); rerr != nil {
		if errors.Is(rerr, once.ErrLeaseLost) {
			p.metrics.record(log, slog.LevelWarn, OutcomeLeaseLost, "lease lost at release; not touching the message", slog.Any("error", rerr), slog.Any("handler_error", herr))
			return Disposition{Action: Leave}
		}
		// The claim stays in progress until its lease ends: a retry before
		// then would find it held and be deferred, spending a receive.
		p.breaker.failure(storeDependency, rerr)
		delay = max(delay, c.Until().Sub(p.now())+p.deferSlack)
		p.metrics.record(log, slog.LevelError, OutcomeStoreError, "release failed; the retry waits for the lease to end", slog.Any("error", rerr), slog.String("visible_in", delay.String()))
	}
	if IsPermanent(herr) {
		r := reason(herr, CodePermanent)
		log.Warn("handler failed permanently: dead-lettering", slog.String("reason", r))
		return Disposition{Action: DeadLetter, Reason: r}
	}
	var pe *panicError
	switch {
	case errors.As(herr, &pe):
		p.metrics.record(log, slog.LevelError, OutcomePanic, "handler panicked; claim released, message not acked", slog.Any("panic", pe.value), slog.String("stack", pe.stack))
	default:
		p.metrics.record(log, slog.LevelWarn, OutcomeReleased, "handler failed; claim released, message will be retried", slog.Any("error", herr),
			slog.String("dependency", dependencyOf(herr)), slog.String("visible_in", delay.String()))
	}
	return Disposition{Action: Retry, Delay: delay}
}

// tookOver logs and counts a claim taken over from an earlier holder: whose
// lease ended (it crashed, stalled or was cut off) or who released the key.
func (p *processor) tookOver(log *slog.Logger, c *once.Claim) {
	from := takeoverUnknown
	attrs := []any{slog.Int64("previous_token", c.Token-1)}
	if prev := c.TookOver(); prev != nil {
		from = takeoverExpired
		if prev.Status == claimstore.StatusReleased {
			from = takeoverReleased
		}
		attrs = []any{slog.String("previous_owner", prev.Owner), slog.Int64("previous_token", prev.Token)}
		if prev.LastError != "" {
			attrs = append(attrs, slog.String("previous_error", prev.LastError))
		}
	}
	p.metrics.takeovers.WithLabelValues(from).Inc()
	log.Info("took over the key from an earlier holder", append([]any{slog.String("from", from)}, attrs...)...)
}

// failures is which failure of m's key this one is, for its backoff, so
// that the backoffs span OutageCover before the broker's attempts run out:
// its Attempt, since every delivery it spent (a store error before its
// claim too) brings the broker's dead-lettering nearer; for an ordered
// delivery the claim's attempts (acquisitions of the key), not more than
// its Attempt, because a message returned unstarted behind a failed one of
// its group is delivered again without being tried: its Attempt grows
// with the failures of the messages in front of it, its claim's attempts
// do not (sqsworker.FIFOMaxReceiveCount leaves room for those deliveries).
func failures(m *Message, c *once.Claim, ordered bool) int {
	n := m.Attempt
	if a := int(min(c.Attempt, int64(n))); ordered && a >= 1 {
		n = a
	}
	return n
}

// storeDependency names the claim store in breaker metrics and logs.
const storeDependency = "claimstore"

// maxLoggedResult is the most of a result a log line carries.
const maxLoggedResult = 256

// resultAttrs is a result for a log line: whole when short, else its first
// maxLoggedResult bytes (on a rune boundary) and its size in bytes.
func resultAttrs(result string) []any {
	if len(result) <= maxLoggedResult {
		return []any{slog.String("result", result)}
	}
	cut := maxLoggedResult
	for cut > 0 && !utf8.RuneStart(result[cut]) {
		cut--
	}
	return []any{slog.String("result", result[:cut]+"..."), slog.Int("result_bytes", len(result))}
}

// handlerDependency labels a handler's own failures (not wrapped by
// Dependency) in claimfirst_retries_total.
const handlerDependency = "handler"

// acquisition is what claiming a message's key came to: a claim held by
// this delivery (Acquired), the stored result of a completed key
// (Duplicate), or why the delivery cannot have it.
type acquisition struct {
	outcome claimstore.Outcome
	claim   *once.Claim // Acquired
	replay  once.Result // Duplicate
	// notStored says a Duplicate's result was too large to be stored.
	notStored *once.ResultTooLargeError
	// notEncoded says a Duplicate's result did not encode.
	notEncoded *once.EncodeError
	held       *once.HeldError      // HeldElsewhere
	reused     *once.KeyReusedError // KeyReused
}

// token is the fencing token of the claim the acquisition found.
func (a acquisition) token() int64 {
	switch a.outcome {
	case claimstore.Acquired:
		return a.claim.Token
	case claimstore.Duplicate:
		return a.replay.Token
	case claimstore.HeldElsewhere:
		return a.held.Token
	}
	return 0
}

// refused turns once's answers for a key the delivery cannot have (held
// elsewhere, reused) into an acquisition.
func refused(err error) (acquisition, bool) {
	var held *once.HeldError
	if errors.As(err, &held) {
		return acquisition{outcome: claimstore.HeldElsewhere, held: held}, true
	}
	var reused *once.KeyReusedError
	if errors.As(err, &reused) {
		return acquisition{outcome: claimstore.KeyReused, reused: reused}, true
	}
	return acquisition{}, false
}

func isStoreError(err error) bool {
	var serr *once.StoreError
	return errors.As(err, &serr)
}

// claimOptions are the once options a delivery holds its claim with: the
// lease aligned with the broker's hold, renewed by extending it,
// and a failing store held in process as the delivery's other steps are.
func (p *processor) claimOptions(log *slog.Logger, m *Message, l *lease) once.Options {
	o := once.Options{
		Owner: p.owner, Fingerprint: m.Fingerprint, Retention: p.retention, Now: p.now,
		StoreTimeout: storeCallTimeout,
		RenewEvery:   -1, // no heartbeats (no Extend): the lease ends with the hold
		Renewed: func(r once.Renewal) {
			switch {
			case r.Expired:
				log.Warn("lease expired before it was renewed; cancelling the handler", slog.Time("lease_until", r.Until))
			case r.Lost:
				log.Warn("renew failed: lease lost; cancelling the handler", slog.Any("error", r.Err))
			case r.Extended:
				p.metrics.heartbeats.Inc()
			case r.Err != nil:
				log.Warn("heartbeat failed; will retry at the next heartbeat", slog.Any("error", r.Err))
			}
		},
		Retry: func(ctx context.Context, _ string, try int, err error) bool {
			p.breaker.failure(storeDependency, err)
			return p.hold(context.WithoutCancel(ctx), log, l, try, storeDependency, err)
		},
	}
	if l.Extend != nil && l.Interval > 0 {
		o.RenewEvery, o.FirstRenewal, o.Extend = l.Interval, l.RenewAt, l.Extend
	}
	return o
}

// acquire claims m's key, retrying a failing store in process while the
// delivery can be held (the broker's hold extended meanwhile).
func (p *processor) acquire(ctx context.Context, log *slog.Logger, m *Message, l *lease) (acq acquisition, err error) {
	ctx, span := p.span(ctx, SpanAcquire)
	defer func() { endAcquire(span, acq.outcome, acq.token(), err) }()
	o := p.claimOptions(log, m, l)
	if l.acq == "" {
		l.acq = claimstore.NewAcq()
	}
	o.Acq = l.acq
	for try := 0; ; try++ {
		// The claim is worth nothing once the lease it would start has ended.
		o.LeaseUntil = l.Until
		actx, cancel := context.WithDeadline(ctx, l.Until)
		c, replay, err := once.Acquire(actx, p.store, m.Key, o)
		cancel()
		switch {
		case err == nil && c != nil:
			p.breaker.recovered(storeDependency)
			return acquisition{outcome: claimstore.Acquired, claim: c}, nil
		case err == nil:
			p.breaker.recovered(storeDependency)
			return acquisition{outcome: claimstore.Duplicate, replay: replay}, nil
		}
		var notStored *once.ResultTooLargeError
		if errors.As(err, &notStored) {
			p.breaker.recovered(storeDependency)
			return acquisition{outcome: claimstore.Duplicate, replay: replay, notStored: notStored}, nil
		}
		var unencoded *once.EncodeError
		if errors.As(err, &unencoded) {
			p.breaker.recovered(storeDependency)
			return acquisition{outcome: claimstore.Duplicate, replay: replay, notEncoded: unencoded}, nil
		}
		if a, ok := refused(err); ok {
			p.breaker.recovered(storeDependency) // the store answered
			return a, nil
		}
		if !isStoreError(err) {
			return acquisition{}, err // an invalid key or parameters
		}
		p.breaker.failure(storeDependency, err)
		if !p.hold(ctx, log, l, try, storeDependency, err) {
			return acquisition{}, err
		}
	}
}

// hold waits before the try+1-th in-process retry of a failed step while
// keeping the broker's hold on it, and reports whether to retry: false when
// the delivery cannot be held (no Extend, a probe, stopping, the hold used
// up) or the hold could not be extended.
func (p *processor) hold(ctx context.Context, log *slog.Logger, l *lease, try int, dependency string, err error) bool {
	if !l.canHold(p.now()) {
		return false
	}
	wait := p.holdDelay(try)
	p.metrics.retries.WithLabelValues(dependency).Inc()
	log.Warn("step failed; holding the message and retrying in process", slog.String("dependency", dependency),
		slog.Any("error", err), slog.Int("retry", try+1), slog.String("retry_in", wait.String()))
	end := p.now().Add(wait)
	for p.now().Before(end) {
		// Extend a heartbeat's interval before the lease would end.
		extendAt := l.Until.Add(-l.Interval)
		next := end
		if extendAt.Before(next) {
			next = extendAt
		}
		if !p.sleep(ctx, l.Stop, next.Sub(p.now())) {
			return false
		}
		if p.now().Before(extendAt) {
			continue
		}
		ectx, cancel := context.WithDeadline(ctx, l.Until)
		until, xerr := l.Extend(ectx)
		cancel()
		if xerr != nil || until.IsZero() {
			log.Warn("could not extend a held message's visibility; returning it", slog.Any("error", xerr))
			return false
		}
		l.Until = until
	}
	return true
}

// sleep waits d, and reports false if ctx ended or stop closed first.
func (p *processor) sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// holdDelay is the wait before the try+1-th in-process retry: doubling from
// minBackoff up to maxHold, with equal jitter.
func (p *processor) holdDelay(try int) time.Duration {
	d := p.minBackoff
	for range try {
		if d >= p.maxHold {
			break
		}
		d *= 2
	}
	d = min(d, p.maxHold)
	if half := d / 2; half > 0 {
		return half + rand.N(half+1)
	}
	return d
}

// handle runs the handler while the claim is held and renewed. lost
// reports that the store said the lease is lost while it ran, whatever the
// handler returned, or before it could start.
func (p *processor) handle(ctx context.Context, log *slog.Logger, m *Message, c *once.Claim, l *lease) (result string, err error, lost bool) {
	ctx, span := p.span(ctx, SpanHandle)
	defer func() { endStep(span, err, lost) }()
	if !l.Deadline.IsZero() {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, l.Deadline)
		defer stop()
	}
	work := func(hctx context.Context) error {
		for try := 0; ; try++ {
			p.metrics.inFlight.Inc()
			start := p.now()
			result, err = p.call(hctx, m)
			p.metrics.handlerTime.Observe(p.now().Sub(start).Seconds())
			p.metrics.inFlight.Dec()
			if err == nil || notEncoded(err) != nil || !p.holdHandler(hctx, log, c, l, try, err) {
				return err
			}
		}
	}
	// Hold returns work's error, or why work did not run, or that the store
	// said the lease is lost. A lease that only ran out on this clock
	// (c.Expired) is not lost: the handler's success is still completed,
	// its failure released, both conditioned on this delivery's
	// acquisition.
	err = c.Hold(ctx, work)
	lost = c.Lost()
	l.Until = c.Until()
	return result, err, lost
}

// holdHandler decides whether a handler's failure is retried in process,
// with the claim held and heartbeating, instead of spending a receive; if
// so it waits before the retry. Permanent failures, panics, a lost lease,
// and messages that cannot be held are not.
func (p *processor) holdHandler(ctx context.Context, log *slog.Logger, c *once.Claim, l *lease, try int, err error) bool {
	dep := dependencyOf(err)
	if dep != "" {
		p.breaker.failure(dep, err)
	}
	var pe *panicError
	if IsPermanent(err) || errors.As(err, &pe) || ctx.Err() != nil || !l.canHold(p.now()) {
		return false
	}
	wait := max(p.holdDelay(try), retryAfterOf(err))
	p.metrics.retries.WithLabelValues(cmp.Or(dep, handlerDependency)).Inc()
	log.Warn("handler failed; holding the claim and retrying in process", slog.String("dependency", dep),
		slog.Any("error", err), slog.Int("retry", try+1), slog.String("retry_in", wait.String()))
	c.NoteError(err.Error()) // the claim's last_error says why it is held, at the next heartbeat
	return p.sleep(ctx, l.Stop, wait)
}

// panicError carries a recovered handler panic.
type panicError struct {
	value any
	stack string
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panic: %v", e.value) }

// decode runs the decoder; a panicking decoder makes the message poison
// rather than crash the worker.
func (p *processor) decode(m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = Permanentf("decoder panicked: %v", v)
		}
	}()
	return p.decoder.Decode(m)
}

// call runs the handler, turning a panic into an error that is never acked.
func (p *processor) call(ctx context.Context, m *Message) (result string, err error) {
	defer func() {
		if v := recover(); v != nil {
			result, err = "", &panicError{value: v, stack: string(debug.Stack())}
		}
	}()
	m.tx = nil // a failed try's writes are not the retry's
	return p.handler.Handle(ctx, m)
}

func (p *processor) poison(log *slog.Logger, err error) Disposition {
	r := reason(err, CodePoison)
	log.Warn("poison message: dead-lettering", slog.String("reason", r))
	return Disposition{Action: DeadLetter, Reason: r}
}
