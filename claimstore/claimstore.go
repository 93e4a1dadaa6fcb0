package claimstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MaxKeyBytes is the longest key, prefix included, a store accepts: DynamoDB's
// limit for a partition key.
const MaxKeyBytes = 2048

// Status is the state of a claim.
type Status string

// The states of a claim, as stored.
const (
	// StatusInProgress means a holder is doing the work until LeaseUntil.
	StatusInProgress Status = "IN_PROGRESS"
	// StatusCompleted means the work is done and Result is its outcome.
	StatusCompleted Status = "COMPLETED"
	// StatusReleased means the last holder gave up; the next Acquire takes over.
	StatusReleased Status = "RELEASED"
)

// Claim is one key's row.
type Claim struct {
	// Key is the idempotency key, without the store's prefix.
	Key string
	// Status is the claim's state.
	Status Status
	// Token is the fencing token: 1 at the first acquisition, +1 at each takeover.
	Token int64
	// LeaseUntil is when the holder's lease ends; meaningful while in progress.
	LeaseUntil time.Time
	// ExpiresAt is when the row stops counting (the TTL); second precision.
	ExpiresAt time.Time
	// Owner names the worker instance that last acquired the claim.
	Owner string
	// Attempts counts acquisitions so far.
	Attempts int64
	// Result is the stored outcome of a completed claim.
	Result string
}

// Outcome says what an Acquire found.
type Outcome int

// The outcomes of Acquire.
const (
	// Acquired means the caller now holds the claim; Claim.Token is its token.
	Acquired Outcome = iota + 1
	// Duplicate means the key was completed; Claim.Result is the stored result.
	Duplicate
	// HeldElsewhere means another holder's lease is live until Claim.LeaseUntil.
	HeldElsewhere
)

// String returns the outcome's name as used in logs and metrics.
func (o Outcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Duplicate:
		return "duplicate"
	case HeldElsewhere:
		return "held_elsewhere"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Acquisition is the result of Acquire.
type Acquisition struct {
	// Outcome says whether the caller holds the claim.
	Outcome Outcome
	// Claim is the row after the acquisition (Acquired) or the row that
	// blocked it (Duplicate, HeldElsewhere).
	Claim Claim
}

// AcquireParams are the arguments of Acquire.
type AcquireParams struct {
	// Key is the idempotency key. Required; at most MaxKeyBytes with the prefix.
	Key string
	// Owner names the acquiring worker instance, for diagnostics.
	Owner string
	// LeaseUntil is when the lease ends if nobody renews it. Required, in the future.
	LeaseUntil time.Time
	// ExpiresAt is when the row stops counting unless Complete refreshes it.
	// Required, after LeaseUntil.
	ExpiresAt time.Time
}

// RenewParams are the arguments of Renew.
type RenewParams struct {
	// Key is the claim's key.
	Key string
	// Token is the caller's fencing token, from Acquire.
	Token int64
	// LeaseUntil is the lease's new end.
	LeaseUntil time.Time
}

// CompleteParams are the arguments of Complete.
type CompleteParams struct {
	// Key is the claim's key.
	Key string
	// Token is the caller's fencing token, from Acquire.
	Token int64
	// Result is the outcome to return to duplicates.
	Result string
	// ExpiresAt is how long the completed key is remembered; see the Retention
	// section of the design: it must outlast any redelivery.
	ExpiresAt time.Time
}

// Store is the claim protocol's storage. Implementations are safe for
// concurrent use by many goroutines and processes: each operation is a single
// atomic conditional write, and exactly one of any number of concurrent
// Acquire calls for an absent key gets Acquired.
//
// Errors: ErrInvalidKey and ErrInvalidParams for bad arguments (nothing is
// written), ErrLeaseLost when the caller's token no longer holds the claim,
// ErrNotFound from Get. Any other error is the backend's, wrapped, and the
// outcome of the operation is unknown: callers treat it as retryable.
type Store interface {
	// Acquire claims p.Key. It returns Acquired with a new token if the key
	// is absent, released, past its lease, or past its ExpiresAt; Duplicate if
	// it is completed; HeldElsewhere if another holder's lease is live.
	Acquire(ctx context.Context, p AcquireParams) (Acquisition, error)

	// Renew extends the lease of the holder of p.Token. It fails with
	// ErrLeaseLost if the claim was taken over, completed or released.
	Renew(ctx context.Context, p RenewParams) error

	// Complete marks the claim completed with p.Result, if p.Token still holds
	// it; otherwise it fails with ErrLeaseLost and changes nothing.
	Complete(ctx context.Context, p CompleteParams) error

	// Release gives the claim up so that the next Acquire takes over at once,
	// if token still holds it; otherwise it fails with ErrLeaseLost. The row is
	// kept so that tokens stay monotonic.
	Release(ctx context.Context, key string, token int64) error

	// Get returns the claim for key, or ErrNotFound if there is none or it is
	// past its ExpiresAt. It is for diagnostics and tests; the protocol never
	// reads before it writes.
	Get(ctx context.Context, key string) (Claim, error)
}

var (
	// ErrLeaseLost means the caller's token no longer holds the claim: it was
	// taken over after the lease expired, or completed or released already.
	ErrLeaseLost = errors.New("claimstore: lease lost")
	// ErrNotFound means there is no live claim for the key.
	ErrNotFound = errors.New("claimstore: claim not found")
	// ErrInvalidKey means the key is empty or longer than MaxKeyBytes with its prefix.
	ErrInvalidKey = errors.New("claimstore: invalid key")
	// ErrInvalidParams means an operation's parameters are inconsistent.
	ErrInvalidParams = errors.New("claimstore: invalid parameters")
)

// CheckKey validates key with the store's prefix against MaxKeyBytes. Stores
// call it first, so every backend rejects the same keys.
func CheckKey(prefix, key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if n := len(prefix) + len(key); n > MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes with prefix, more than %d", ErrInvalidKey, n, MaxKeyBytes)
	}
	return nil
}

// Check validates p for a store whose clock reads now.
func (p AcquireParams) Check(prefix string, now time.Time) error {
	if err := CheckKey(prefix, p.Key); err != nil {
		return err
	}
	var errs []error
	if !p.LeaseUntil.After(now) {
		errs = append(errs, errors.New("LeaseUntil must be in the future"))
	}
	if p.ExpiresAt.Before(p.LeaseUntil) {
		errs = append(errs, errors.New("ExpiresAt must not be before LeaseUntil"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: acquire: %w", ErrInvalidParams, errors.Join(errs...))
	}
	return nil
}

// Check validates p.
func (p RenewParams) Check(prefix string) error {
	if err := CheckKey(prefix, p.Key); err != nil {
		return err
	}
	if p.Token < 1 {
		return fmt.Errorf("%w: renew: Token must be positive", ErrInvalidParams)
	}
	return nil
}

// Check validates p.
func (p CompleteParams) Check(prefix string) error {
	if err := CheckKey(prefix, p.Key); err != nil {
		return err
	}
	if p.Token < 1 {
		return fmt.Errorf("%w: complete: Token must be positive", ErrInvalidParams)
	}
	if p.ExpiresAt.IsZero() {
		return fmt.Errorf("%w: complete: ExpiresAt is required", ErrInvalidParams)
	}
	return nil
}

// CheckRelease validates Release's arguments.
func CheckRelease(prefix, key string, token int64) error {
	if err := CheckKey(prefix, key); err != nil {
		return err
	}
	if token < 1 {
		return fmt.Errorf("%w: release: token must be positive", ErrInvalidParams)
	}
	return nil
}

// Live reports whether c still counts at now: a row past ExpiresAt is absent.
func (c Claim) Live(now time.Time) bool {
	return now.Before(c.ExpiresAt)
}

// Takeable reports whether an Acquire at now may take c over: it is past its
// expiry, released, or in progress with an expired lease.
func (c Claim) Takeable(now time.Time) bool {
	switch {
	case !c.Live(now):
		return true
	case c.Status == StatusReleased:
		return true
	case c.Status == StatusInProgress:
		return !now.Before(c.LeaseUntil)
	default:
		return false
	}
}

// Blocked returns the outcome of an Acquire that found c and could not take it
// over: Duplicate for a completed claim, HeldElsewhere otherwise.
func (c Claim) Blocked() Outcome {
	if c.Status == StatusCompleted {
		return Duplicate
	}
	return HeldElsewhere
}

// ExpirySeconds is t as the epoch seconds stored in the TTL attribute, rounded
// up so that a claim is never remembered for less than was asked.
func ExpirySeconds(t time.Time) int64 {
	s := t.Unix()
	if t.After(time.Unix(s, 0)) {
		s++
	}
	return s
}

// LeaseMillis is t as the epoch milliseconds stored for a lease's end.
func LeaseMillis(t time.Time) int64 { return t.UnixMilli() }
