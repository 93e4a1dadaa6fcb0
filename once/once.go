package once

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// RenewEvery is the interval between renewals while the function runs.
	// Defaults to a third of Lease.
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
	// StoreTimeout bounds each completion or release attempt, which outlive
	// the caller's context. Defaults to 10s.
	StoreTimeout time.Duration
	// MinBackoff is Wait's first delay between attempts. Defaults to 50ms.
	MinBackoff time.Duration
	// MaxBackoff is Wait's longest delay between attempts. Defaults to 5s.
	MaxBackoff time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Owner == "" {
		o.Owner = "once"
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.RenewEvery <= 0 {
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
	// the function's context ended with this cause.
	ErrLeaseLost = errors.New("once: lease lost")
	// ErrNotStored means the function succeeded but its result could not be
	// stored (the store failed): the claim stays in progress until its lease
	// ends, and a call after that runs the function again.
	ErrNotStored = errors.New("once: result not stored")
)

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

// PermanentError marks a function's failure that retrying cannot fix.
type PermanentError struct {
	// Err is the failure.
	Err error
}

// Error implements error.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the failure.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as a failure that retrying cannot fix. The claim is
// released as for any error; Wait returns it rather than retrying. Permanent
// returns nil for a nil err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
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
// result could not be stored. If fn panics, the claim is released and the
// panic goes on.
func Do(ctx context.Context, store claimstore.Store, key string, opts Options, fn Func) (string, error) {
	r, err := Run(ctx, store, key, opts, fn)
	return r.Value, err
}

// Run is Do that also says whether the result was replayed, and under which
// token it was made.
func Run(ctx context.Context, store claimstore.Store, key string, opts Options, fn Func) (Result, error) {
	o := opts.withDefaults()
	now := o.Now()
	leaseUntil := o.LeaseUntil
	if leaseUntil.IsZero() {
		leaseUntil = now.Add(o.Lease)
	}
	acq, err := store.Acquire(ctx, claimstore.AcquireParams{
		Key: key, Owner: o.Owner, Fingerprint: o.Fingerprint,
		LeaseUntil: leaseUntil, ExpiresAt: later(now.Add(o.Retention), leaseUntil),
	})
	if err != nil {
		if errors.Is(err, claimstore.ErrInvalidKey) || errors.Is(err, claimstore.ErrInvalidParams) {
			return Result{}, err
		}
		return Result{}, &StoreError{Op: "acquire", Err: err}
	}
	c := acq.Claim
	switch acq.Outcome {
	case claimstore.Acquired:
	case claimstore.Duplicate:
		return Result{Value: c.Result, Replayed: true, Token: c.Token}, nil
	case claimstore.HeldElsewhere:
		return Result{}, &HeldError{Key: key, Owner: c.Owner, Token: c.Token, Until: c.LeaseUntil}
	case claimstore.KeyReused:
		e := &KeyReusedError{Key: key, Fingerprint: o.Fingerprint, Stored: c.Fingerprint}
		if c.Status == claimstore.StatusInProgress && now.Before(c.LeaseUntil) {
			e.HeldUntil = c.LeaseUntil
		}
		return Result{}, e
	default:
		return Result{}, &StoreError{Op: "acquire", Err: fmt.Errorf("unknown outcome %v", acq.Outcome)}
	}

	h := &holder{store: store, o: o, h: c.Holder(), until: c.LeaseUntil}
	call := Call{Key: key, Token: c.Token, FirstAt: c.FirstAt, Attempt: c.Attempts}
	value, ferr, lost := h.run(ctx, call, fn)
	if lost {
		return Result{}, fmt.Errorf("key %q token %d: %w", key, c.Token, ErrLeaseLost)
	}
	if ferr != nil {
		if rerr := h.release(ctx, ferr.Error()); rerr != nil {
			return Result{}, errors.Join(ferr, rerr)
		}
		return Result{}, ferr
	}
	if err := h.complete(ctx, value); err != nil {
		return Result{}, err
	}
	return Result{Value: value, Token: c.Token}, nil
}

// holder runs a function under an acquired claim.
type holder struct {
	store claimstore.Store
	o     Options
	h     claimstore.Holder
	until time.Time // the lease's end as last stored; read by run after the heartbeat stops
}

// run calls fn with a context that ends when the lease is lost, renewing the
// lease meanwhile. lost reports that the lease was lost before fn returned.
func (h *holder) run(ctx context.Context, call Call, fn Func) (value string, err error, lost bool) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		h.heartbeat(fctx, cancel, done)
	}()
	stop := func() { close(done); <-beat }

	panicked := true
	defer func() {
		if panicked {
			stop()
			if errors.Is(context.Cause(fctx), ErrLeaseLost) {
				return
			}
			_ = h.release(ctx, "panic")
		}
	}()
	value, err = fn(fctx, call)
	panicked = false
	stop()
	return value, err, errors.Is(context.Cause(fctx), ErrLeaseLost)
}

// heartbeat renews the lease until done, first at FirstRenewal (or
// RenewEvery from now) and then every RenewEvery. It is also the lease's
// watchdog: if the lease runs out before a renewal extends it, fn's context
// is cancelled with ErrLeaseLost, since a later caller may take over.
func (h *holder) heartbeat(ctx context.Context, lose context.CancelCauseFunc, done <-chan struct{}) {
	now := h.o.Now()
	next := h.o.FirstRenewal
	if next.IsZero() {
		next = now.Add(h.o.RenewEvery)
	}
	t := time.NewTimer(next.Sub(now))
	defer t.Stop()
	expiry := time.NewTimer(h.until.Sub(now))
	defer expiry.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-expiry.C:
			lose(ErrLeaseLost)
			return
		case <-t.C:
		}
		if !h.o.Now().Before(h.until) {
			lose(ErrLeaseLost)
			return
		}
		until, err := h.renew(ctx)
		t.Reset(h.o.RenewEvery)
		switch {
		case errors.Is(err, claimstore.ErrLeaseLost):
			lose(ErrLeaseLost)
			return
		case err == nil && !until.IsZero():
			h.until = until
			expiry.Reset(until.Sub(h.o.Now()))
		}
	}
}

// renew extends the lease once, bounded by its current end so that a hung
// call never keeps the watchdog from firing.
func (h *holder) renew(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithDeadline(ctx, h.until)
	defer cancel()
	until := h.o.Now().Add(h.o.Lease)
	if h.o.Extend != nil {
		u, err := h.o.Extend(ctx)
		if err != nil || u.IsZero() {
			return time.Time{}, err
		}
		until = u
	}
	err := h.store.Renew(ctx, claimstore.RenewParams{Holder: h.h, LeaseUntil: until, ExpiresAt: h.o.Now().Add(h.o.Retention)})
	if err != nil {
		return time.Time{}, err
	}
	return until, nil
}

// complete stores value with the claim, retrying a failing store while the
// lease lasts: the work is done, and a later caller could only take over
// and do it again once the lease has ended.
func (h *holder) complete(ctx context.Context, value string) error {
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.o.StoreTimeout)
		err := h.store.Complete(cctx, claimstore.CompleteParams{Holder: h.h, Result: value, ExpiresAt: h.o.Now().Add(h.o.Retention)})
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, claimstore.ErrLeaseLost):
			return fmt.Errorf("key %q token %d: complete: %w", h.h.Key, h.h.Token, ErrLeaseLost)
		}
		wait := backoff(h.o.MinBackoff, h.o.MaxBackoff, try)
		if !h.o.Now().Add(wait).Before(h.until) || !sleep(ctx, wait) {
			return fmt.Errorf("key %q token %d: %w: %w", h.h.Key, h.h.Token, ErrNotStored, &StoreError{Op: "complete", Err: err})
		}
	}
}

// release gives the claim up after a failure. A lost lease is no error
// here: the claim is someone else's, which is what a release wants.
func (h *holder) release(ctx context.Context, reason string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.o.StoreTimeout)
	defer cancel()
	err := h.store.Release(rctx, claimstore.ReleaseParams{Holder: h.h, LastError: reason})
	if err == nil || errors.Is(err, claimstore.ErrLeaseLost) {
		return nil
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
