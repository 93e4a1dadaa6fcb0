package claimstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Admin is the operator's repair of single claims, for the runbook's cases:
// a claim stuck in progress, a payment reconciled by hand, a completed key
// that must run again. The protocol never calls it. Each operation is one
// conditional write on the row as read just before it (status, token and
// acquisition id), so it never overwrites a change it did not see: a row
// that moved meanwhile fails with ErrClaimChanged and nothing is written.
// Each returns the row as it was before the change.
//
// Errors: ErrNotFound when there is no live row, ErrWrongState when the
// row's status does not allow the operation, ErrClaimChanged as above,
// ErrInvalidKey and ErrInvalidParams for bad arguments; any other error is
// the backend's and the outcome is unknown (read the row again).
type Admin interface {
	// Get returns the claim for key, as Store.Get does.
	Get(ctx context.Context, key string) (Claim, error)

	// ForceRelease sets an IN_PROGRESS claim RELEASED with a new
	// acquisition id, keeping its token, so that the next delivery takes it
	// over at once instead of waiting for the lease to end. A holder that is
	// still working then fails its Renew, Complete or Release with
	// ErrLeaseLost, and an Acquire retried with the old id takes the row
	// over rather than find it as its own.
	ForceRelease(ctx context.Context, key string) (Claim, error)

	// ForceComplete marks an IN_PROGRESS or RELEASED claim COMPLETED with
	// p.Result and a new acquisition id (the token is kept): later
	// deliveries are duplicates, and a holder still working fails its
	// writes with ErrLeaseLost rather than pass the operator's completion
	// for its own. For a payment reconciled by hand.
	ForceComplete(ctx context.Context, p ForceCompleteParams) (Claim, error)

	// Forget deletes a COMPLETED claim, so that the key's next delivery runs
	// the work again. The token restarts at 1: only forget a key whose
	// downstream effects need no fencing against the old holder.
	Forget(ctx context.Context, key string) (Claim, error)
}

// ForceCompleteParams are the arguments of ForceComplete.
type ForceCompleteParams struct {
	// Key is the claim's key. Required.
	Key string
	// Result is the outcome later deliveries see as the stored result. Required.
	Result string
	// ExpiresAt is how long the completed key is remembered; the row's own
	// expiry is kept if it is later. Required.
	ExpiresAt time.Time
}

// Check validates p.
func (p ForceCompleteParams) Check(prefix string) error {
	if err := CheckKey(prefix, p.Key); err != nil {
		return err
	}
	var errs []error
	if p.Result == "" {
		errs = append(errs, errors.New("Result is required"))
	}
	if p.ExpiresAt.IsZero() {
		errs = append(errs, errors.New("ExpiresAt is required"))
	}
	if err := checkResult(p.Result); err != nil {
		return err
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: force complete: %w", ErrInvalidParams, errors.Join(errs...))
	}
	return nil
}

// Expiry is the expiry a ForceComplete of c stores: p.ExpiresAt, or c's if
// that is later, in the stored precision.
func (p ForceCompleteParams) Expiry(c Claim) time.Time {
	s := ExpirySeconds(p.ExpiresAt)
	if c.ExpiresAt.Unix() > s {
		s = c.ExpiresAt.Unix()
	}
	return time.Unix(s, 0)
}

var (
	// ErrWrongState means the claim's status does not allow the operation:
	// only an IN_PROGRESS claim is force-released, only an IN_PROGRESS or
	// RELEASED one force-completed, only a COMPLETED one forgotten.
	ErrWrongState = errors.New("claimstore: claim is not in a state that allows this")
	// ErrClaimChanged means the row changed between the read and the
	// conditional write; nothing was written.
	ErrClaimChanged = errors.New("claimstore: claim changed meanwhile")
)

// AllowsForceRelease reports whether ForceRelease may change c.
func (c Claim) AllowsForceRelease() bool { return c.Status == StatusInProgress }

// AllowsForceComplete reports whether ForceComplete may change c.
func (c Claim) AllowsForceComplete() bool {
	return c.Status == StatusInProgress || c.Status == StatusReleased
}

// AllowsForget reports whether Forget may delete c.
func (c Claim) AllowsForget() bool { return c.Status == StatusCompleted }

// ReadForRepair is the read an Admin repair starts with, for every backend:
// get's row for key, refused with ErrWrongState (the row returned) unless
// allowed accepts it; an absent row is ErrNotFound. op names the repair in
// the errors.
func ReadForRepair(ctx context.Context, get func(context.Context, string) (Claim, error), key, op string, allowed func(Claim) bool) (Claim, error) {
	before, err := get(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Claim{}, fmt.Errorf("%s %q: %w", op, key, ErrNotFound)
		}
		return Claim{}, fmt.Errorf("%s: %w", op, err)
	}
	if !allowed(before) {
		return before, fmt.Errorf("%s %q: status %s: %w", op, key, before.Status, ErrWrongState)
	}
	return before, nil
}
