package once

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

// Func is the work done at most once per key. It runs while the caller holds
// the key's claim; ctx ends with cause ErrLeaseLost if the lease is lost. The
// result is stored with the completed claim and returned to later calls.
type Func func(ctx context.Context, c Call) (result string, err error)

// Call describes the claim a Func runs under.
type Call struct {
	// Key is the claimed key, as passed to Do.
	Key string
	// Token is the claim's fencing token: 1 at the first acquisition, +1 at
	// each takeover. Pass it downstream where a resource can reject writes
	// from a superseded holder.
	Token int64
	// FirstAt is the key's first acquisition, by any caller: when a
	// downstream service first may have seen the key.
	FirstAt time.Time
	// Attempt counts the acquisitions of the key so far, this one included.
	Attempt int64
}

// Result is what Run returns on success.
type Result struct {
	// Value is the function's result, or the stored result of an earlier call.
	Value string
	// Replayed reports that Value is the stored result of an earlier call:
	// the function did not run.
	Replayed bool
	// Token is the fencing token of the claim the value came from.
	Token int64
	// Cached reports that a replay was answered by a cache in front of the
	// store (package claimstore/cache), without a request to the backend.
	Cached bool
}

// Options configure a call. The zero Options are usable.
type Options struct {
	// Owner names the caller in the claim, for diagnostics. Defaults to "once".
	Owner string
	// Fingerprint says what the work is (a hash of its inputs). The same key
	// with another fingerprint is ErrKeyReused, not a repeat. Defaults to "",
	// which matches anything.
	Fingerprint string
	// Lease is how long the claim is held without a renewal. Defaults to 30s.
	Lease time.Duration
	// RenewEvery is the interval between renewals while the function runs;
	// a negative interval renews nothing, and the lease ends where it began
	// (the function's context ends then). Defaults to a third of Lease.
	RenewEvery time.Duration
	// Retention is how long a key is remembered: a completed key returns its
	// result for that long, and then counts as new. Defaults to 24h.
	Retention time.Duration
	// LeaseUntil, if set, is when the first lease ends, instead of Lease from
	// the acquisition (the SQS worker aligns it with a message's visibility).
	// Defaults to zero.
	LeaseUntil time.Time
	// FirstRenewal, if set, is when the first renewal is due, instead of
	// RenewEvery after the acquisition. Defaults to zero.
	FirstRenewal time.Time
	// Extend, if set, is called at each renewal before the claim is renewed,
	// and returns the lease's new end (the SQS worker extends the message's
	// visibility there). An error skips that renewal; a zero time means
	// nothing can be extended any more and the lease runs out as it is.
	// Defaults to nil: the lease is extended to Lease from now.
	Extend func(ctx context.Context) (time.Time, error)
	// Renewed, if set, is told the outcome of each renewal try while the
	// function runs, and of the lease running out (for logs and metrics).
	// It is called from the goroutine that renews. Defaults to nil.
	Renewed func(Renewal)
	// Acq is the acquisition id the key is claimed with (see
	// claimstore.AcquireParams.Acq). A caller retrying Acquire after a store
	// error passes the same one each time, so that a try whose answer was
	// lost is found as its own claim, not as one held elsewhere. After a
	// release (the function failed and the call returned its error) the
	// claim is free: a later call with the same Acq takes it over as any
	// acquirer would, with a new token, on every store; a new Acq does the
	// same. Defaults to a new one per call.
	Acq string
	// Retry, if set, decides whether a completion (op "complete" or
	// "complete_tx") that failed in the store is tried again: it waits as it
	// sees fit and returns true to try again, false to give up (the call
	// then fails with ErrNotStored). try counts from 0. Defaults to retrying
	// with backoff while the lease lasts.
	Retry func(ctx context.Context, op string, try int, err error) bool
	// StoreTimeout bounds each completion or release attempt, which outlive
	// the caller's context. Defaults to 10s.
	StoreTimeout time.Duration
	// MinBackoff is Wait's first delay between attempts. Defaults to 50ms.
	MinBackoff time.Duration
	// MaxBackoff is Wait's longest delay between attempts. Defaults to 5s.
	MaxBackoff time.Duration
	// Now is the clock every step reads: the lease asked for, renewals, the
	// watchdog, expires_at and backoffs. Defaults to time.Now.
	Now func() time.Time
	// Codec turns RunValue's and DoValue's typed result into the stored
	// string and back, as worker.ValueHandler's Codec field does; Run and
	// Do, whose results are strings already, do not use it. Defaults to
	// JSONCodec.
	Codec Codec
}

func (o Options) withDefaults() Options {
	if o.Owner == "" {
		o.Owner = "once"
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.RenewEvery == 0 {
		o.RenewEvery = o.Lease / 3
	}
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = 10 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 50 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

var (
	// ErrHeldElsewhere means another caller holds the key: its lease is live.
	// The error is a *HeldError, which says until when.
	ErrHeldElsewhere = errors.New("once: key held elsewhere")
	// ErrKeyReused means the key was used before with another fingerprint.
	// The error is a *KeyReusedError.
	ErrKeyReused = errors.New("once: key reused with another fingerprint")
	// ErrLeaseLost means the caller lost the claim while the function ran,
	// or before its result could be stored: a later holder owns the key.
	// Whether the function's effect happened is for that holder to find out;
	// the function's context ended with this cause. It is
	// claimstore.ErrLeaseLost: one value, whichever package names it.
	ErrLeaseLost = claimstore.ErrLeaseLost
	// ErrLeaseExpired is the cause a function's context ends with when its
	// lease ran out on this caller's clock before a renewal extended it
	// (the store failed or hung, the process stalled): a later caller may
	// take the key over, so the work should stop, but the store has not
	// said the claim is lost. It matches ErrLeaseLost. What the function
	// returns still counts: its success is completed, its failure released,
	// both conditioned on this caller's acquisition, so they fail with
	// ErrLeaseLost if the key was taken over meanwhile.
	ErrLeaseExpired error = leaseExpired{}
	// ErrNotStored means the function succeeded but its result could not be
	// stored (the store failed): the claim stays in progress until its lease
	// ends, and a call after that runs the function again.
	ErrNotStored = errors.New("once: result not stored")
	// ErrResultTooLarge means the function's result was too large for the
	// store (claimstore.MaxResultBytes, or refused by the backend): the
	// function ran once and its claim is completed without the result, so
	// it never runs again for the key; the result itself is lost. The
	// error is a *ResultTooLargeError, which says the result's size and
	// hash. It is claimstore.ErrResultTooLarge.
	ErrResultTooLarge = claimstore.ErrResultTooLarge
)

// leaseExpired is ErrLeaseExpired's type: it matches ErrLeaseLost.
type leaseExpired struct{}

func (leaseExpired) Error() string        { return "once: lease expired on this caller's clock" }
func (leaseExpired) Is(target error) bool { return target == ErrLeaseLost }

// ResultTooLargeError is the error of a call whose result was not stored
// because it was too large: the first call (which also returns the result)
// and every later call with the key (which cannot). It matches
// ErrResultTooLarge.
type ResultTooLargeError struct {
	// Key is the key.
	Key string
	// Token is the fencing token of the claim the result came from.
	Token int64
	// Size is the result's length in bytes.
	Size int
	// SHA256 is the result's SHA-256, in hex.
	SHA256 string
}

// Error implements error.
func (e *ResultTooLargeError) Error() string {
	return fmt.Sprintf("once: key %q token %d: the result (%d bytes, sha256 %s) was too large to store: the work was done and is not done again",
		e.Key, e.Token, e.Size, e.SHA256)
}

// Is reports whether target is ErrResultTooLarge.
func (e *ResultTooLargeError) Is(target error) bool { return target == ErrResultTooLarge }

// omitted returns the *ResultTooLargeError of a stored result that is the
// marker of a result not stored, or nil.
func omitted(key string, token int64, stored string) *ResultTooLargeError {
	size, sum, ok := claimstore.ParseOmittedResult(stored)
	if !ok {
		return nil
	}
	return &ResultTooLargeError{Key: key, Token: token, Size: size, SHA256: sum}
}

// HeldError is the error of a call that found the key held by another
// caller. It matches ErrHeldElsewhere.
type HeldError struct {
	// Key is the key.
	Key string
	// Owner is the holder's Options.Owner.
	Owner string
	// Token is the holder's fencing token.
	Token int64
	// Until is when the holder's lease ends unless it renews it: the holder
	// completes or releases the key by then, or a call after it takes over.
	Until time.Time
}

// Error implements error.
func (e *HeldError) Error() string {
	return fmt.Sprintf("once: key %q held elsewhere (owner %q, token %d) until %s",
		e.Key, e.Owner, e.Token, e.Until.UTC().Format(time.RFC3339Nano))
}

// Is reports whether target is ErrHeldElsewhere.
func (e *HeldError) Is(target error) bool { return target == ErrHeldElsewhere }

// KeyReusedError is the error of a call whose fingerprint differs from the
// one the key was first used with. It matches ErrKeyReused.
type KeyReusedError struct {
	// Key is the key.
	Key string
	// Fingerprint is the call's fingerprint.
	Fingerprint string
	// Stored is the fingerprint the key's claim carries.
	Stored string
	// HeldUntil is the end of the live lease of the claim's holder, if the
	// key is still in progress; zero otherwise. An HTTP API answers such a
	// repeat with 409 rather than 422, as nothing is stored yet.
	HeldUntil time.Time
}

// Error implements error.
func (e *KeyReusedError) Error() string {
	return fmt.Sprintf("once: key %q reused with another fingerprint (%s, first used with %s)", e.Key, e.Fingerprint, e.Stored)
}

// Is reports whether target is ErrKeyReused.
func (e *KeyReusedError) Is(target error) bool { return target == ErrKeyReused }

// PermanentError marks a function's failure that retrying cannot fix. It
// has the shape of worker.PermanentError (a reason and the error under it),
// which wraps one: one notion of permanent for both.
type PermanentError struct {
	// Reason says why, in a form fit for a log line.
	Reason string
	// Err is the underlying error, if any.
	Err error
}

// Error implements error.
func (e *PermanentError) Error() string { return "permanent: " + e.Text() }

// Text is the reason and the underlying error's detail, the reason said
// once: an error that repeats it ("provider: <reason>: HTTP 422") adds only
// what follows. worker.PermanentError says it the same way.
func (e *PermanentError) Text() string {
	switch {
	case e.Err == nil:
		return e.Reason
	case e.Reason == "":
		return e.Err.Error()
	}
	detail := e.Err.Error()
	if i := strings.Index(detail, e.Reason); i >= 0 {
		return e.Reason + detail[i+len(e.Reason):]
	}
	return e.Reason + ": " + detail
}

// Unwrap returns the underlying error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent returns an error that marks a failure retrying cannot fix, with
// reason and the underlying error err (either may be empty). The claim is
// released as for any error; Wait returns it rather than retrying. It has
// worker.Permanent's shape: once.Permanent("card declined", err).
func Permanent(reason string, err error) error {
	return &PermanentError{Reason: reason, Err: err}
}

// IsPermanent reports whether err is or wraps a PermanentError.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}

// StoreError is a failure of the claim store. The outcome of the failed
// operation is unknown: callers treat it as retryable.
type StoreError struct {
	// Op is the claim operation that failed: "acquire", "complete" or "release".
	Op string
	// Err is the store's error.
	Err error
}

// Error implements error.
func (e *StoreError) Error() string { return "once: claim store " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Do runs fn at most once per key across every caller sharing store, and
// returns its result, or the stored result of an earlier call with key.
//
// Errors: a *HeldError (ErrHeldElsewhere) if another caller holds the key; a
// *KeyReusedError (ErrKeyReused) if the key was used with another
// fingerprint; claimstore.ErrInvalidKey for a bad key; a *StoreError if the
// store failed before fn ran; fn's own error, after the claim was released;
// ErrLeaseLost if the claim was lost while fn ran or before its result was
// stored; ErrNotStored (with the store's error) if fn succeeded and its
// result could not be stored; a *ResultTooLargeError (ErrResultTooLarge) if
// fn's result, or the result of the call that completed the key, was too
// large to store (the first call returns the result with it; fn never runs
// again for the key); an *EncodeError (ErrUnencodable) if the call that
// completed the key had a typed result that did not encode (RunValue). If
// fn panics, the claim is released and the panic goes on.
func Do(ctx context.Context, store claimstore.Store, key string, opts Options, fn Func) (string, error) {
	r, err := Run(ctx, store, key, opts, fn)
	return r.Value, err
}

// Run is Do that also says whether the result was replayed, and under which
// token it was made.
func Run(ctx context.Context, store claimstore.Store, key string, opts Options, fn Func) (Result, error) {
	c, replay, err := Acquire(ctx, store, key, opts)
	if err != nil || c == nil {
		return replay, err
	}
	var value string
	panicked := true
	defer func() {
		if panicked && !c.lost {
			_ = c.Release(ctx, "panic")
		}
	}()
	herr := c.Hold(ctx, func(ctx context.Context) error {
		var ferr error
		value, ferr = fn(ctx, c.Call)
		return ferr
	})
	panicked = false
	if c.lost {
		// The store said a later holder owns the key. A lease that only
		// ran out on this clock (c.Expired) is still completed or
		// released below: both are conditioned on the acquisition.
		return Result{}, herr
	}
	if herr != nil {
		if rerr := c.Release(ctx, herr.Error()); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			return Result{}, errors.Join(herr, rerr)
		}
		return Result{}, herr
	}
	if err := c.Complete(ctx, value); err != nil {
		if errors.Is(err, ErrResultTooLarge) {
			return Result{Value: value, Token: c.Token}, err
		}
		return Result{}, err
	}
	return Result{Value: value, Token: c.Token}, nil
}

// Acquire claims key for this caller, the first step of Run, for callers
// that hold the claim around their own work (the SQS worker does): it
// returns the held *Claim; or, for a key completed before, a nil Claim and
// the stored Result (with a *ResultTooLargeError if the result was not
// stored, or an *EncodeError if it did not encode: the Result says the
// token); or Run's errors from before its function would run (a
// *HeldError, a *KeyReusedError, claimstore.ErrInvalidKey or
// ErrInvalidParams, a *StoreError). The holder of a Claim calls Hold around
// the work, then Complete or Release.
func Acquire(ctx context.Context, store claimstore.Store, key string, opts Options) (*Claim, Result, error) {
	o := opts.withDefaults()
	now := o.Now()
	leaseUntil := o.LeaseUntil
	if leaseUntil.IsZero() {
		leaseUntil = now.Add(o.Lease)
	}
	acq, err := store.Acquire(ctx, claimstore.AcquireParams{
		Key: key, Owner: o.Owner, Fingerprint: o.Fingerprint, Acq: o.Acq,
		LeaseUntil: leaseUntil, ExpiresAt: later(now.Add(o.Retention), leaseUntil),
	})
	if err != nil {
		if errors.Is(err, claimstore.ErrInvalidKey) || errors.Is(err, claimstore.ErrInvalidParams) {
			return nil, Result{}, err
		}
		return nil, Result{}, &StoreError{Op: "acquire", Err: err}
	}
	c := acq.Claim
	switch acq.Outcome {
	case claimstore.Acquired:
	case claimstore.Duplicate:
		if e := omitted(key, c.Token, c.Result); e != nil {
			return nil, Result{Replayed: true, Token: c.Token, Cached: acq.Cached}, e
		}
		if e := notEncoded(key, c.Token, c.Result); e != nil {
			return nil, Result{Replayed: true, Token: c.Token, Cached: acq.Cached}, e
		}
		return nil, Result{Value: c.Result, Replayed: true, Token: c.Token, Cached: acq.Cached}, nil
	case claimstore.HeldElsewhere:
		return nil, Result{}, &HeldError{Key: key, Owner: c.Owner, Token: c.Token, Until: c.LeaseUntil}
	case claimstore.KeyReused:
		e := &KeyReusedError{Key: key, Fingerprint: o.Fingerprint, Stored: c.Fingerprint}
		if c.Status == claimstore.StatusInProgress && now.Before(c.LeaseUntil) {
			e.HeldUntil = c.LeaseUntil
		}
		return nil, Result{}, e
	default:
		return nil, Result{}, &StoreError{Op: "acquire", Err: fmt.Errorf("unknown outcome %v", acq.Outcome)}
	}
	if c.LeaseUntil.IsZero() {
		c.LeaseUntil = leaseUntil // a store that does not echo the lease: the one asked for
	}
	return &Claim{
		Call:  Call{Key: key, Token: c.Token, FirstAt: c.FirstAt, Attempt: c.Attempts},
		store: store, o: o, h: c.Holder(), until: c.LeaseUntil, prev: acq.Previous,
	}, Result{}, nil
}

// Claim is a key held by this caller, from Acquire until it is completed
// or released. Its methods are not safe for concurrent use: one goroutine
// holds the claim, runs the work under Hold, then completes or releases.
type Claim struct {
	// Call describes the claim: key, fencing token, first use, attempt.
	Call

	store   claimstore.Store
	o       Options
	h       claimstore.Holder
	until   time.Time // the lease's end as last stored
	lost    bool      // the store said the lease is lost (ErrLeaseLost)
	expired bool      // the lease ran out on this clock before a renewal
	prev    *claimstore.Claim
	note    atomic.Pointer[string] // a LastError for the next renewal (NoteError)
}

// NoteError records msg as the claim's last error at its next renewal
// under Hold (claimstore.RenewParams.LastError): why the work is being
// retried while the claim is held, for whoever inspects the claim. Safe
// to call from the work while Hold runs; without renewals it is not written.
func (c *Claim) NoteError(msg string) {
	if msg != "" {
		c.note.Store(&msg)
	}
}

// TookOver returns the row this claim took over, as the store found it:
// an earlier holder's whose lease ended, or who released the key (its
// owner, token and last error). Nil for a first acquisition, and when the
// store does not say (claimstore.Acquisition.Previous); a Token above 1
// says a takeover happened all the same.
func (c *Claim) TookOver() *claimstore.Claim { return c.prev }

// Holder returns the claim's identity in the store's terms.
func (c *Claim) Holder() claimstore.Holder { return c.h }

// Until returns when the claim's lease ends unless it is renewed: its end
// at the acquisition, or as the last renewal under Hold left it.
func (c *Claim) Until() time.Time { return c.until }

// Lost reports that the store said the claim's lease is lost
// (ErrLeaseLost) under Hold: a later holder owns the key, and the claim can
// no longer be completed or released.
func (c *Claim) Lost() bool { return c.lost }

// Expired reports that the claim's lease ran out on this caller's clock
// under Hold before a renewal extended it (ErrLeaseExpired): the work's
// context ended, but the store has not said the claim is lost. Complete
// or Release it all the same: each succeeds if nobody took the key over,
// and fails with ErrLeaseLost if somebody did.
func (c *Claim) Expired() bool { return c.expired }

// Renewal is what Options.Renewed is told after each renewal try.
type Renewal struct {
	// Until is the lease's end after the try.
	Until time.Time
	// Extended reports that the try renewed the lease to Until.
	Extended bool
	// Err is why the try did not renew the lease (Extend or the store
	// failed), if it did not; nil with Extended false when Extend had
	// nothing more to extend.
	Err error
	// Lost reports that the function's context ends: the store said a
	// later holder owns the claim (ErrLeaseLost), or the lease ran out
	// before it was renewed (Expired). The context's cause matches
	// ErrLeaseLost.
	Lost bool
	// Expired reports that the lease ran out on this clock, at Until,
	// before a renewal extended it (ErrLeaseExpired): the store has not
	// said the claim is lost, and the claim is still completed or released
	// when the function returns.
	Expired bool
}

// Hold runs work with a context that ends, with cause ErrLeaseLost, when
// the claim's lease is lost, renewing the lease meanwhile: first at
// Options.FirstRenewal (or RenewEvery after Hold starts) and then every
// RenewEvery. If the first renewal is due before work starts (winning the
// claim took long), the lease is renewed first and work runs only if that
// kept the claim. Hold is also the lease's watchdog: if the lease runs out
// before a renewal extends it (the process stalled, the store hung), the
// context ends at once with cause ErrLeaseExpired, since a later caller may
// take over. When ctx ends, work's context ends too, but the renewals go on
// until work returns: a caller whose work ignores its context (abandoned at
// shutdown) keeps the key, and nobody runs it alongside.
//
// Hold returns work's error; or an error matching ErrLeaseLost if the
// store said the lease is lost (Lost) before work returned, whatever work
// returned, or before it could start. A lease that only ran out on this
// clock (Expired) does not change what work returned: its success is
// completed, its failure released, as the store's condition on the
// acquisition allows; if it ran out before work could start, Hold returns
// an error matching ErrLeaseExpired. If work panics, the renewals stop and
// the panic goes on.
func (c *Claim) Hold(ctx context.Context, work func(ctx context.Context) error) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	now := c.o.Now()
	next := c.o.FirstRenewal
	if next.IsZero() {
		next = now.Add(c.o.RenewEvery)
	}
	if c.o.RenewEvery > 0 && !now.Before(next) {
		// Nothing has acted yet, so a renewal after the lease ended is
		// safe: it fails if anyone took the claim over meanwhile.
		if !c.beat(wctx, cancel) {
			return c.lostErr()
		}
		next = c.o.Now().Add(c.o.RenewEvery)
	}
	if !c.o.Now().Before(c.until) {
		c.expire(cancel)
		return c.expiredErr()
	}
	if c.o.RenewEvery < 0 {
		// Nothing to renew: the lease's end is the work's deadline, and no
		// goroutine needs to watch it.
		dctx, stop := context.WithTimeoutCause(wctx, c.until.Sub(c.o.Now()), ErrLeaseExpired)
		defer stop()
		err := work(dctx)
		if errors.Is(context.Cause(dctx), ErrLeaseLost) {
			c.expire(cancel)
		}
		return err
	}
	done := make(chan struct{})
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		// Renewals go on while work runs, even after ctx ended (a
		// shutdown): a claim that lapsed under work that ignores its
		// context would let a later caller run the key alongside it.
		c.heartbeat(context.WithoutCancel(wctx), cancel, next, done)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(done)
			<-beat
		}
	}
	defer stop()
	err := work(wctx)
	stop()
	if c.lost {
		return c.lostErr()
	}
	return err
}

func (c *Claim) lostErr() error {
	return fmt.Errorf("key %q token %d: %w", c.Key, c.Token, ErrLeaseLost)
}

func (c *Claim) expiredErr() error {
	return fmt.Errorf("key %q token %d: %w", c.Key, c.Token, ErrLeaseExpired)
}

// heartbeat renews the lease at next and then every RenewEvery until done
// (work returned), and ends work's context when the lease is lost or runs
// out. ctx carries values only: the caller's cancellation does not stop
// the renewals of work still running.
func (c *Claim) heartbeat(ctx context.Context, lose context.CancelCauseFunc, next time.Time, done <-chan struct{}) {
	expiry := time.NewTimer(c.until.Sub(c.o.Now()))
	defer expiry.Stop()
	var t *time.Timer
	var tick <-chan time.Time // nil, never ready, when the lease is not renewed
	if c.o.RenewEvery > 0 {
		t = time.NewTimer(next.Sub(c.o.Now()))
		defer t.Stop()
		tick = t.C
	}
	expired := expiry.C
	for {
		select {
		case <-done:
			return
		case <-expired:
			// The work's context ends, but the renewals go on while it
			// runs: a renewal is conditioned on the acquisition, so it
			// fails if anyone took the key over, and keeps the message
			// (and the key) from going to another caller while this one's
			// work, which may not heed its context at once, still runs.
			c.expire(lose)
			expired = nil
			if tick == nil {
				return
			}
			continue
		case <-tick:
		}
		if !c.expired && !c.o.Now().Before(c.until) {
			// The lease ran out (the process stalled): end the work's
			// context now, and renew at the next tick if it still runs.
			c.expire(lose)
			expired = nil
			t.Reset(c.o.RenewEvery)
			continue
		}
		if !c.beat(ctx, lose) {
			return
		}
		t.Reset(c.o.RenewEvery)
		if !c.expired {
			expiry.Reset(c.until.Sub(c.o.Now()))
		}
	}
}

// expire ends work's context because the lease ran out on this clock.
func (c *Claim) expire(lose context.CancelCauseFunc) {
	if c.expired {
		return
	}
	c.expired = true
	c.report(Renewal{Until: c.until, Lost: true, Expired: true, Err: ErrLeaseExpired})
	lose(ErrLeaseExpired)
}

// beat renews the lease once and reports whether the claim is still held.
func (c *Claim) beat(ctx context.Context, lose context.CancelCauseFunc) bool {
	until, err := c.renew(ctx)
	switch {
	case errors.Is(err, claimstore.ErrLeaseLost):
		c.lost = true
		c.report(Renewal{Until: c.until, Lost: true, Err: err})
		lose(ErrLeaseLost)
		return false
	case err == nil && !until.IsZero():
		c.until = until
		c.report(Renewal{Until: until, Extended: true})
	default:
		c.report(Renewal{Until: c.until, Err: err})
	}
	return true
}

func (c *Claim) report(r Renewal) {
	if c.o.Renewed != nil {
		c.o.Renewed(r)
	}
}

// renew extends the lease once, bounded by its current end so that a hung
// call never keeps the watchdog from firing; after the lease ran out on
// this clock, by the interval between renewals.
func (c *Claim) renew(ctx context.Context) (time.Time, error) {
	deadline := c.until
	if now := c.o.Now(); !deadline.After(now) {
		deadline = now.Add(c.o.RenewEvery)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	until := c.o.Now().Add(c.o.Lease)
	if c.o.Extend != nil {
		u, err := c.o.Extend(ctx)
		if err != nil || u.IsZero() {
			return time.Time{}, err
		}
		until = u
	}
	p := claimstore.RenewParams{Holder: c.h, LeaseUntil: until, ExpiresAt: c.o.Now().Add(c.o.Retention)}
	note := c.note.Swap(nil)
	if note != nil {
		p.LastError = *note
	}
	if err := c.store.Renew(ctx, p); err != nil {
		if note != nil {
			c.note.CompareAndSwap(nil, note) // for the next renewal, unless a newer one came
		}
		return time.Time{}, err
	}
	return until, nil
}

// Complete stores value with the claim, retrying a failing store as
// Options.Retry decides (by default with backoff while the lease lasts):
// the work is done, and a later caller could only take over and do it again
// once the lease has ended. It returns nil, an error matching ErrLeaseLost
// if the claim is someone else's now, or one matching ErrNotStored (and
// wrapping a *StoreError) if the store kept failing. A value too large for
// the store is not retried: the claim is completed with a marker instead
// (claimstore.OmittedResult), and Complete returns a *ResultTooLargeError
// with the claim completed.
func (c *Claim) Complete(ctx context.Context, value string) error {
	return c.complete(ctx, "complete", func(ctx context.Context, p claimstore.CompleteParams) error {
		return c.store.Complete(ctx, p)
	}, value, nil)
}

// CompleteTx is Complete that commits writes in one transaction with the
// completion (claimstore.CompleteTx): they are applied if and only if the
// claim is completed, while this caller still holds it. Errors that no
// retry can change come back as they are, with nothing written:
// claimstore.ErrTxUnsupported, ErrTxTooLarge, ErrInvalidParams, and a
// *claimstore.WriteConditionError when a condition of writes failed (the
// claim is still held: Complete or Release it). A failing store is retried
// as by Complete; a transaction applied but whose answer was lost is
// recognized as this caller's own.
func (c *Claim) CompleteTx(ctx context.Context, value string, writes claimstore.TxWrites) error {
	return c.complete(ctx, "complete_tx", func(ctx context.Context, p claimstore.CompleteParams) error {
		return claimstore.CompleteTx(ctx, c.store, p, writes)
	}, value, func(err error) bool {
		var wce *claimstore.WriteConditionError
		return errors.As(err, &wce) || errors.Is(err, claimstore.ErrTxUnsupported) ||
			errors.Is(err, claimstore.ErrTxTooLarge) || errors.Is(err, claimstore.ErrInvalidParams)
	})
}

func (c *Claim) complete(ctx context.Context, op string, call func(context.Context, claimstore.CompleteParams) error,
	value string, final func(error) bool,
) error {
	var tooLarge *ResultTooLargeError
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.StoreTimeout)
		err := call(cctx, claimstore.CompleteParams{Holder: c.h, Result: value, ExpiresAt: c.o.Now().Add(c.o.Retention)})
		cancel()
		switch {
		case err == nil && tooLarge != nil:
			return tooLarge
		case err == nil:
			return nil
		case errors.Is(err, claimstore.ErrLeaseLost):
			return fmt.Errorf("key %q token %d: %s: %w", c.Key, c.Token, op, ErrLeaseLost)
		case errors.Is(err, claimstore.ErrResultTooLarge) && tooLarge == nil:
			// No retry stores it, and a store outage it is not: complete
			// without it, so that the work is never done again.
			value = claimstore.OmittedResult(value)
			tooLarge = omitted(c.Key, c.Token, value)
			try--
			continue
		case errors.Is(err, claimstore.ErrResultTooLarge):
			return fmt.Errorf("key %q token %d: %s: even the marker of a result not stored was refused: %w: %w", c.Key, c.Token, op, ErrNotStored, err)
		case final != nil && final(err):
			return err
		}
		if !c.retry(ctx, op, try, err) {
			return fmt.Errorf("key %q token %d: %w: %w", c.Key, c.Token, ErrNotStored, &StoreError{Op: op, Err: err})
		}
	}
}

// retry decides whether the try+1-th retry of a failed completion runs,
// after waiting for it.
func (c *Claim) retry(ctx context.Context, op string, try int, err error) bool {
	if c.o.Retry != nil {
		return c.o.Retry(ctx, op, try, err)
	}
	wait := backoff(c.o.MinBackoff, c.o.MaxBackoff, try)
	return c.o.Now().Add(wait).Before(c.until) && sleep(ctx, wait)
}

// Release gives the claim up after a failure, recording reason as the
// claim's last error: the next call with the key runs again at once. It
// returns nil, an error matching ErrLeaseLost if the claim is someone
// else's already (which is what a release wants, but the caller may want
// to know), or a *StoreError, in which case the claim stays held until its
// lease ends.
func (c *Claim) Release(ctx context.Context, reason string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.StoreTimeout)
	defer cancel()
	err := c.store.Release(rctx, claimstore.ReleaseParams{Holder: c.h, LastError: reason})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, claimstore.ErrLeaseLost):
		return fmt.Errorf("key %q token %d: release: %w", c.Key, c.Token, ErrLeaseLost)
	}
	return &StoreError{Op: "release", Err: err}
}

// Wait is Do that waits while the key is held elsewhere: it tries again
// with backoff (from Options.MinBackoff, doubling to MaxBackoff, with
// jitter, and never long past the holder's lease) until the holder has
// completed the key (its result is returned), given it up or lost it (this
// caller takes over and runs fn), or ctx ends (ctx's error is returned,
// joined with the last HeldError). Every other outcome of Do, including fn's
// failures, is returned at once: retrying work is the caller's policy.
func Wait(ctx context.Context, store claimstore.Store, key string, opts Options, fn Func) (string, error) {
	o := opts.withDefaults()
	for try := 0; ; try++ {
		v, err := Do(ctx, store, key, opts, fn)
		var held *HeldError
		if !errors.As(err, &held) {
			return v, err
		}
		wait := backoff(o.MinBackoff, o.MaxBackoff, try)
		if untilEnd := held.Until.Sub(o.Now()) + o.MinBackoff; untilEnd > 0 && untilEnd < wait {
			wait = untilEnd
		}
		if !sleep(ctx, wait) {
			return "", errors.Join(ctx.Err(), err)
		}
	}
}

// backoff is the wait before the try+1-th retry: doubling from minD to
// maxD, with equal jitter.
func backoff(minD, maxD time.Duration, try int) time.Duration {
	d := minD
	for range try {
		if d >= maxD {
			break
		}
		d *= 2
	}
	d = min(d, maxD)
	if half := d / 2; half > 0 {
		return half + rand.N(half+1)
	}
	return d
}

// sleep waits d and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
