package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/claimfirst/claimfirst/claimstore"
)

// action is what the transport does with a message after processing.
type action int

const (
	actAck        action = iota + 1 // delete it: done or duplicate
	actRetry                        // make it visible again after delay
	actDefer                        // held elsewhere: make it visible when the holder's lease ends
	actDeadLetter                   // move it to the dead-letter queue with reason
	actLeave                        // touch nothing: the lease was lost or the outcome is unknown
)

func (a action) String() string {
	switch a {
	case actAck:
		return "ack"
	case actRetry:
		return "retry"
	case actDefer:
		return "defer"
	case actDeadLetter:
		return "dead_letter"
	case actLeave:
		return "leave"
	default:
		return fmt.Sprintf("action(%d)", int(a))
	}
}

// disposition is the result of processing one delivery.
type disposition struct {
	action action
	delay  time.Duration // actRetry, actDefer
	reason string        // actDeadLetter
}

// storeCallTimeout bounds a completion or release, which outlive the
// handler's context: a hung call must not hold the message forever.
const storeCallTimeout = 10 * time.Second

// errLeaseLost is the cause of a handler context cancelled by a failed renew.
var errLeaseLost = errors.New("worker: lease lost")

// lease describes how long a delivery's claim may be held and how to extend it.
type lease struct {
	// until is when the first lease ends: the visibility timeout's end minus
	// the safety margin, or the Lambda invocation's deadline.
	until time.Time
	// deadline is when the handler's context ends whatever happens (SQS's
	// 12-hour cap on invisibility, or the invocation's deadline).
	deadline time.Time
	// interval between heartbeats; zero disables them (Lambda).
	interval time.Duration
	// renewAt is when the first heartbeat is due: interval after the
	// lease began (the receipt), not after the handler starts, so a claim
	// that took long to win is renewed before its handler runs.
	renewAt time.Time
	// extend pushes the message's visibility and returns the new lease end
	// to renew the claim to; nil disables heartbeats.
	extend func(ctx context.Context) (time.Time, error)
	// stop is closed when the worker stops receiving: a held message is
	// returned to the queue then rather than retried in process. Nil (Lambda)
	// or probe set: failures are never held, the message goes back at once.
	stop <-chan struct{}
	// probe marks the breaker's probe message: it must answer quickly
	// whether the dependency is back, so it is not held.
	probe bool
	// holdUntil is how long the message may be held retrying in process.
	holdUntil time.Time
	// acq is the acquisition id the delivery claims its key with, the same
	// for every in-process retry: a retry then finds a try whose answer was
	// lost (applied, the connection cut) as its own claim, not as one held
	// elsewhere. Set by acquire.
	acq string
}

// canHold reports whether a failure at now may be retried in process: the
// message's visibility can be extended, the worker is not stopping, and the
// hold has time left.
func (l *lease) canHold(now time.Time) bool {
	if l.extend == nil || l.stop == nil || l.probe || !now.Before(l.holdUntil) {
		return false
	}
	select {
	case <-l.stop:
		return false
	default:
		return true
	}
}

// processor is the per-message protocol shared by the long-polling worker and
// the Lambda adapter: decode, claim, handle with heartbeats, then complete,
// release or dead-letter. It decides; the transport acts.
type processor struct {
	store      claimstore.Store
	handler    Handler
	decoder    Decoder
	owner      string
	retention  time.Duration
	schedule   schedule      // visibility delays after failed receives
	minBackoff time.Duration // first in-process retry's delay
	maxHold    time.Duration // longest delay between in-process retries
	deferSlack time.Duration
	breaker    *breaker // nil: none (Lambda)
	metrics    *Metrics
	tracer     trace.Tracer // nil: no spans
	log        *slog.Logger
	now        func() time.Time
}

// process runs the protocol for m. ctx is the handlers' context: it is not
// cancelled when the worker stops receiving, only when in-flight work must end.
func (p *processor) process(ctx context.Context, m *Message, l lease) (disp disposition) {
	ctx, span := p.startMessage(ctx, m)
	defer func() { endMessage(span, m, disp) }()
	log := p.log.With(slog.String("message_id", m.ID), slog.Int("receive_count", m.ReceiveCount))
	if err := p.decode(m); err != nil {
		return p.poison(log, err)
	}
	log = log.With(slog.String("idempotency_key", m.Key))

	now := p.now()
	if !l.until.After(now) {
		// The message sat too long before processing: its lease would already
		// be over. Let SQS redeliver it at once rather than race the redelivery.
		log.Warn("lease ended before processing started; returning message")
		return disposition{action: actRetry}
	}
	acq, err := p.acquire(ctx, log, m, &l)
	now = p.now()
	switch {
	case errors.Is(err, claimstore.ErrInvalidKey):
		return p.poison(log, Permanent("invalid idempotency key", err))
	case err != nil:
		p.metrics.count(OutcomeStoreError)
		log.Error("acquire failed; the message will be retried", slog.Any("error", err))
		return disposition{action: actRetry, delay: p.schedule.delay(m.ReceiveCount)}
	}
	switch acq.Outcome {
	case claimstore.KeyReused:
		p.metrics.count(OutcomeKeyReused)
		return p.poison(log, Permanentf("idempotency key %q reused with another payload (fingerprint %s, stored %s)",
			m.Key, m.Fingerprint, acq.Claim.Fingerprint))
	case claimstore.Duplicate:
		p.metrics.count(OutcomeDuplicate)
		log.Info("duplicate: key already completed", slog.String("result", acq.Claim.Result), slog.Int64("token", acq.Claim.Token))
		return disposition{action: actAck}
	case claimstore.HeldElsewhere:
		p.metrics.count(OutcomeDeferred)
		wait := acq.Claim.LeaseUntil.Sub(now) + p.deferSlack
		log.Info("deferred: key held elsewhere", slog.String("holder", acq.Claim.Owner),
			slog.Int64("token", acq.Claim.Token), slog.Duration("visible_in", wait))
		return disposition{action: actDefer, delay: wait}
	case claimstore.Acquired:
	default:
		p.metrics.count(OutcomeStoreError)
		log.Error("acquire returned an unknown outcome", slog.Any("outcome", acq.Outcome))
		return disposition{action: actRetry, delay: p.schedule.delay(m.ReceiveCount)}
	}

	m.Token, m.FirstAt = acq.Claim.Token, acq.Claim.FirstAt
	holder := acq.Claim.Holder()
	log = log.With(slog.Int64("token", m.Token))
	p.metrics.count(OutcomeAcquired)
	log.Debug("claim acquired", slog.Time("lease_until", l.until))
	result, herr, lost := p.handle(ctx, log, m, holder, l)
	if lost {
		p.metrics.count(OutcomeLeaseLost)
		log.Warn("lease lost while handling: not completing, not acking")
		return disposition{action: actLeave}
	}
	if herr == nil {
		result, herr, err = p.finish(ctx, log, m, holder, result, &l)
	}
	if herr == nil {
		switch {
		case errors.Is(err, claimstore.ErrLeaseLost):
			p.metrics.count(OutcomeLeaseLost)
			log.Warn("lease lost at completion: a later holder owns the key; not acking", slog.Any("error", err))
			return disposition{action: actLeave}
		case err != nil:
			// The outcome is unknown. The message and the lease expire
			// together; the redelivery finds the claim completed or takes over.
			p.metrics.count(OutcomeStoreError)
			log.Error("complete failed; leaving the message to redeliver", slog.Any("error", err))
			return disposition{action: actLeave}
		}
		p.metrics.count(OutcomeCompleted)
		p.breaker.success()
		log.Info("completed", slog.String("result", result))
		return disposition{action: actAck}
	}

	delay := max(p.schedule.delay(m.ReceiveCount), retryAfterOf(herr))
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	rerr := p.store.Release(rctx, claimstore.ReleaseParams{Holder: holder, LastError: herr.Error()})
	cancel()
	if rerr != nil {
		if errors.Is(rerr, claimstore.ErrLeaseLost) {
			p.metrics.count(OutcomeLeaseLost)
			log.Warn("lease lost at release; not touching the message", slog.Any("error", rerr), slog.Any("handler_error", herr))
			return disposition{action: actLeave}
		}
		// The claim stays in progress until its lease ends: a retry before
		// then would find it held and be deferred, spending a receive.
		p.metrics.count(OutcomeStoreError)
		p.breaker.failure(storeDependency, rerr)
		delay = max(delay, l.until.Sub(p.now())+p.deferSlack)
		log.Error("release failed; the retry waits for the lease to end", slog.Any("error", rerr), slog.Duration("visible_in", delay))
	}
	if IsPermanent(herr) {
		r := reason(herr)
		log.Warn("handler failed permanently: dead-lettering", slog.String("reason", r))
		return disposition{action: actDeadLetter, reason: r}
	}
	var pe *panicError
	switch {
	case errors.As(herr, &pe):
		p.metrics.count(OutcomePanic)
		log.Error("handler panicked; claim released, message not acked", slog.Any("panic", pe.value), slog.String("stack", pe.stack))
	default:
		p.metrics.count(OutcomeReleased)
		log.Warn("handler failed; claim released, message will be retried", slog.Any("error", herr),
			slog.String("dependency", dependencyOf(herr)), slog.Duration("visible_in", delay))
	}
	return disposition{action: actRetry, delay: delay}
}

// storeDependency names the claim store in breaker metrics and logs.
const storeDependency = "claimstore"

// acquire claims m's key, retrying a failing store in process while the
// message can be held (its visibility extended meanwhile).
func (p *processor) acquire(ctx context.Context, log *slog.Logger, m *Message, l *lease) (acq claimstore.Acquisition, err error) {
	ctx, span := p.span(ctx, SpanAcquire)
	defer func() { endAcquire(span, acq, err) }()
	for try := 0; ; try++ {
		now := p.now()
		// The claim is worth nothing once the lease it would start has ended.
		actx, cancel := context.WithDeadline(ctx, l.until)
		if l.acq == "" {
			l.acq = claimstore.NewAcq()
		}
		acq, err := p.store.Acquire(actx, claimstore.AcquireParams{
			Key: m.Key, Owner: p.owner, Fingerprint: m.Fingerprint, Acq: l.acq, LeaseUntil: l.until, ExpiresAt: now.Add(p.retention),
		})
		cancel()
		if err == nil {
			p.breaker.recovered(storeDependency)
		}
		if err == nil || errors.Is(err, claimstore.ErrInvalidKey) || errors.Is(err, claimstore.ErrInvalidParams) {
			return acq, err
		}
		p.breaker.failure(storeDependency, err)
		if !p.hold(ctx, log, l, try, storeDependency, err) {
			return acq, err
		}
	}
}

// complete completes the claim, retrying a failing store in process while
// the message can be held: the work is done, and a redelivery would only
// find the claim in progress and wait for its lease.
func (p *processor) complete(ctx context.Context, log *slog.Logger, h claimstore.Holder, result string, l *lease) (err error) {
	ctx, span := p.span(ctx, SpanComplete)
	defer func() { endStep(span, err, errors.Is(err, claimstore.ErrLeaseLost)) }()
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
		err := p.store.Complete(cctx, claimstore.CompleteParams{Holder: h, Result: result, ExpiresAt: p.now().Add(p.retention)})
		cancel()
		if err == nil || errors.Is(err, claimstore.ErrLeaseLost) {
			return err
		}
		p.breaker.failure(storeDependency, err)
		if !p.hold(context.WithoutCancel(ctx), log, l, try, storeDependency, err) {
			return err
		}
	}
}

// hold waits before the try+1-th in-process retry of a failed step while
// keeping the message invisible, and reports whether to retry: false when
// the message cannot be held (Lambda, a probe, stopping, the hold used up)
// or its visibility could not be extended.
func (p *processor) hold(ctx context.Context, log *slog.Logger, l *lease, try int, dependency string, err error) bool {
	if !l.canHold(p.now()) {
		return false
	}
	wait := p.holdDelay(try)
	p.metrics.retries.WithLabelValues(dependency).Inc()
	log.Warn("step failed; holding the message and retrying in process", slog.String("dependency", dependency),
		slog.Any("error", err), slog.Int("retry", try+1), slog.Duration("retry_in", wait))
	end := p.now().Add(wait)
	for p.now().Before(end) {
		// Extend a heartbeat's interval before the lease would end.
		extendAt := l.until.Add(-l.interval)
		next := end
		if extendAt.Before(next) {
			next = extendAt
		}
		if !p.sleep(ctx, l.stop, next.Sub(p.now())) {
			return false
		}
		if p.now().Before(extendAt) {
			continue
		}
		ectx, cancel := context.WithDeadline(ctx, l.until)
		until, xerr := l.extend(ectx)
		cancel()
		if xerr != nil || until.IsZero() {
			log.Warn("could not extend a held message's visibility; returning it", slog.Any("error", xerr))
			return false
		}
		l.until = until
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

// handle runs the handler with heartbeats. lost reports that the lease was
// lost while it ran, whatever the handler returned, or before it could start.
func (p *processor) handle(ctx context.Context, log *slog.Logger, m *Message, h claimstore.Holder, l lease) (result string, err error, lost bool) {
	ctx, span := p.span(ctx, SpanHandle)
	defer func() { endStep(span, err, lost) }()
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !l.deadline.IsZero() {
		var stop context.CancelFunc
		hctx, stop = context.WithDeadline(hctx, l.deadline)
		defer stop()
	}
	if l.extend != nil && l.interval > 0 {
		leaseUntil, next := l.until, l.renewAt
		if !p.now().Before(next) {
			// Winning the claim took long (a slow or throttled store): renew
			// now, before any work, rather than start on a lease about to end
			// and throw the delivery away when it does. Nothing has acted, so
			// a renew after the lease ended is safe: it fails if anyone took
			// the claim over meanwhile.
			until, err := p.beat(hctx, log, h, l, l.until)
			switch {
			case errors.Is(err, claimstore.ErrLeaseLost):
				return "", nil, true
			case err == nil && !until.IsZero():
				leaseUntil = until
			}
			next = p.now().Add(l.interval)
		}
		if !p.now().Before(leaseUntil) {
			log.Warn("lease ended before the handler started and could not be renewed", slog.Time("lease_until", leaseUntil))
			return "", nil, true
		}
		done := make(chan struct{})
		beat := make(chan struct{})
		go func() {
			defer close(beat)
			p.heartbeat(hctx, log, h, l, leaseUntil, next, cancel, done)
		}()
		defer func() { close(done); <-beat }()
	}

	for try := 0; ; try++ {
		p.metrics.inFlight.Inc()
		start := time.Now()
		result, err = p.call(hctx, m)
		p.metrics.handlerTime.Observe(time.Since(start).Seconds())
		p.metrics.inFlight.Dec()
		if err == nil || !p.holdHandler(hctx, log, &l, try, err) {
			return result, err, errors.Is(context.Cause(hctx), errLeaseLost)
		}
	}
}

// holdHandler decides whether a handler's failure is retried in process,
// with the claim held and heartbeating, instead of spending a receive; if
// so it waits before the retry. Permanent failures, panics, a lost lease,
// and messages that cannot be held are not.
func (p *processor) holdHandler(ctx context.Context, log *slog.Logger, l *lease, try int, err error) bool {
	dep := dependencyOf(err)
	if dep != "" {
		p.breaker.failure(dep, err)
	}
	var pe *panicError
	if IsPermanent(err) || errors.As(err, &pe) || ctx.Err() != nil || !l.canHold(p.now()) {
		return false
	}
	wait := max(p.holdDelay(try), retryAfterOf(err))
	p.metrics.retries.WithLabelValues(dep).Inc()
	log.Warn("handler failed; holding the claim and retrying in process", slog.String("dependency", dep),
		slog.Any("error", err), slog.Int("retry", try+1), slog.Duration("retry_in", wait))
	return p.sleep(ctx, l.stop, wait)
}

// heartbeat extends visibility and renews the claim, first at next and then
// every interval, until done. It is also the lease's watchdog: if the lease
// runs out before a renew extends it (the process was stalled, or the store
// unreachable), the handler's context is cancelled at once, since a later
// holder may already be doing the work.
func (p *processor) heartbeat(ctx context.Context, log *slog.Logger, h claimstore.Holder, l lease, leaseUntil, next time.Time,
	lose context.CancelCauseFunc, done <-chan struct{},
) {
	t := time.NewTimer(next.Sub(p.now()))
	defer t.Stop()
	expiry := time.NewTimer(leaseUntil.Sub(p.now()))
	defer expiry.Stop()
	expired := func() {
		log.Warn("lease expired before it was renewed; cancelling the handler", slog.Time("lease_until", leaseUntil))
		lose(errLeaseLost)
	}
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-expiry.C:
			expired()
			return
		case <-t.C:
		}
		if !p.now().Before(leaseUntil) {
			expired()
			return
		}
		until, err := p.beat(ctx, log, h, l, leaseUntil)
		t.Reset(l.interval)
		switch {
		case errors.Is(err, claimstore.ErrLeaseLost):
			lose(errLeaseLost)
			return
		case err == nil && !until.IsZero():
			leaseUntil = until
			expiry.Reset(leaseUntil.Sub(p.now()))
		}
	}
}

// beat extends the message's visibility and renews the claim to match. It
// returns the lease's new end, or zero with a nil error when SQS's cap on
// invisibility leaves nothing to extend. A failed visibility extension
// skips the renew: the claim must not outlive the message's invisibility.
// Both calls are bounded by leaseUntil, the lease's current end: a call that
// hangs returns when the lease ends, so the watchdog always fires on time.
func (p *processor) beat(ctx context.Context, log *slog.Logger, h claimstore.Holder, l lease, leaseUntil time.Time) (time.Time, error) {
	ctx, cancel := context.WithDeadline(ctx, leaseUntil)
	defer cancel()
	until, err := l.extend(ctx)
	if err != nil {
		log.Warn("visibility extension failed", slog.Any("error", err))
		return time.Time{}, err
	}
	if until.IsZero() {
		return time.Time{}, nil
	}
	err = p.store.Renew(ctx, claimstore.RenewParams{Holder: h, LeaseUntil: until, ExpiresAt: p.now().Add(p.retention)})
	switch {
	case errors.Is(err, claimstore.ErrLeaseLost):
		log.Warn("renew failed: lease lost; cancelling the handler", slog.Any("error", err))
		return time.Time{}, err
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("renew failed; will retry at the next heartbeat", slog.Any("error", err))
		}
		return time.Time{}, err
	}
	p.metrics.heartbeats.Inc()
	return until, nil
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

func (p *processor) poison(log *slog.Logger, err error) disposition {
	r := reason(err)
	log.Warn("poison message: dead-lettering", slog.String("reason", r))
	return disposition{action: actDeadLetter, reason: r}
}
