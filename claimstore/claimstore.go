package claimstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxKeyBytes is the longest key, prefix and separator included, a store
// accepts: DynamoDB's limit for a partition key.
const MaxKeyBytes = 2048

// KeySeparator stands between a store's key prefix and a key in the stored
// key (StoredKey). Neither keys nor prefixes may contain it, so keys of
// different prefixes never meet: prefixes "pay" and "payout" store key
// "out1" and key "1" as "pay\x1fout1" and "payout\x1f1". It is the ASCII
// unit separator, U+001F.
const KeySeparator = "\x1f"

// StoredKey is key as a store with prefix stores it: the key alone without
// a prefix (the layout of a table without prefixes is unchanged), else
// prefix, KeySeparator, key.
func StoredKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + KeySeparator + key
}

// MaxItemBytes is the largest row a store writes, every attribute's name
// and value counted: DynamoDB's item limit, 400 KB. Every store checks the
// same limits, so a result that one stores, all store.
const MaxItemBytes = 400 * 1024

// MaxFingerprintBytes and MaxOwnerBytes bound AcquireParams.Fingerprint and
// AcquireParams.Owner, so that a row's attributes other than its result
// have a known most (see MaxResultBytes).
const (
	MaxFingerprintBytes = 1024
	MaxOwnerBytes       = 1024
)

// MaxResultBytes is the longest result a Complete stores: MaxItemBytes less
// 16 KiB kept for the row's other attributes at their longest (the key with
// its prefix, owner, fingerprint, last error, attribute names, numbers). A
// longer result fails with ErrResultTooLarge and nothing is written.
const MaxResultBytes = MaxItemBytes - 16*1024

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

// Claim is one key's row. docs/protocol.md describes each attribute as
// stored, with its type and unit.
type Claim struct {
	// Key is the idempotency key, without the store's prefix.
	Key string
	// Status is the claim's state.
	Status Status
	// Token is the fencing token: 1 at the first acquisition, +1 at each takeover.
	// Pass it downstream where a resource can reject a superseded holder.
	Token int64
	// Acq is the acquisition's own random id, new at every acquisition. The
	// holder's writes are conditioned on it, and a retried write whose first
	// try was applied recognizes itself by it.
	Acq string
	// LeaseUntil is when the holder's lease ends; meaningful while in progress.
	LeaseUntil time.Time
	// ExpiresAt is when the row stops counting (the TTL); second precision.
	ExpiresAt time.Time
	// FirstAt is the key's first acquisition, kept by takeovers: when a
	// downstream service (the payment provider) may first have seen the key.
	// Millisecond precision; zero on rows written before it was stored.
	FirstAt time.Time
	// Fingerprint says what the payload was; empty if none was given.
	Fingerprint string
	// Owner names the worker instance that last acquired the claim.
	Owner string
	// Attempts counts acquisitions so far.
	Attempts int64
	// Result is the stored outcome of a completed claim.
	Result string
	// LastError is the failure the last holder recorded when it released the
	// claim, for diagnostics (a message SQS dead-letters still says why).
	LastError string
}

// Holder identifies the holder of a claim in its writes: the acquisition,
// and the token for logs and downstream fencing.
type Holder struct {
	// Key is the claim's key.
	Key string
	// Token is the holder's fencing token, from Acquire.
	Token int64
	// Acq is the holder's acquisition id, from Acquire; writes are conditioned on it.
	Acq string
}

// Holder returns the identity of the claim's current holder.
func (c Claim) Holder() Holder { return Holder{Key: c.Key, Token: c.Token, Acq: c.Acq} }

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
	// KeyReused means the key's row has another fingerprint: the key was
	// reused for another payload. Nothing is written; Claim is the row found.
	KeyReused
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
	case KeyReused:
		return "key_reused"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Acquisition is the result of Acquire.
type Acquisition struct {
	// Outcome says whether the caller holds the claim.
	Outcome Outcome
	// Claim is the row after the acquisition (Acquired) or the row that
	// blocked it (Duplicate, HeldElsewhere, KeyReused).
	Claim Claim
	// Cached reports that a cache in front of the store answered from
	// memory (Duplicate, KeyReused; see package cache): no request reached
	// the backend.
	Cached bool
	// Previous is the row an Acquired took over, an earlier holder's whose
	// lease ended or who released the key, for diagnostics (which owner,
	// which token, its last error); nil for a first acquisition, and from a
	// store that does not say (the PostgreSQL store's single statement
	// returns only the row it wrote).
	Previous *Claim
}

// AcquireParams are the arguments of Acquire.
type AcquireParams struct {
	// Key is the idempotency key. Required; at most MaxKeyBytes with the prefix.
	Key string
	// Owner names the acquiring worker instance, for diagnostics.
	Owner string
	// Fingerprint says what the payload is (a hash of its fields). A row with
	// another non-empty fingerprint makes Acquire return KeyReused; an empty
	// one on either side matches anything. Defaults to "".
	Fingerprint string
	// Acq is the new acquisition's id. Set it only to retry an Acquire whose
	// answer was lost: a row that already carries it is the caller's own.
	// Defaults to a new random id.
	Acq string
	// LeaseUntil is when the lease ends if nobody renews it. Required, in the future.
	LeaseUntil time.Time
	// ExpiresAt is when the row stops counting unless Complete refreshes it.
	// Required, after LeaseUntil.
	ExpiresAt time.Time
}

// RenewParams are the arguments of Renew.
type RenewParams struct {
	Holder
	// LeaseUntil is the lease's new end.
	LeaseUntil time.Time
	// ExpiresAt is the row's new expiry; the store keeps it no earlier than
	// LeaseUntil, so a long-held claim never expires under its holder. Required.
	ExpiresAt time.Time
	// LastError, if set, becomes the claim's LastError: the failure its
	// holder is retrying in process, for diagnostics. Truncated as
	// Release's is. Defaults to "": LastError unchanged.
	LastError string
}

// CompleteParams are the arguments of Complete.
type CompleteParams struct {
	Holder
	// Result is the outcome to return to duplicates.
	Result string
	// ExpiresAt is how long the completed key is remembered: it must outlast
	// any redelivery (docs/protocol.md, "Retention"). Required.
	ExpiresAt time.Time
}

// ReleaseParams are the arguments of Release.
type ReleaseParams struct {
	Holder
	// LastError is why the holder gives up, stored with the row for
	// diagnostics (truncated to MaxLastErrorBytes). Defaults to "".
	LastError string
}

// MaxLastErrorBytes is the longest LastError a store keeps.
const MaxLastErrorBytes = 1024

// Store is the claim protocol's storage. Implementations are safe for
// concurrent use by many goroutines and processes: each operation is a single
// atomic conditional write, and exactly one of any number of concurrent
// Acquire calls for an absent key gets Acquired.
//
// The holder's writes (Renew, Complete, Release) are conditioned on the
// holder's acquisition id and the claim being in progress. A write that finds
// the row already in the state it asks for with the holder's id is its own
// earlier try, applied but unanswered: it succeeds. So a caller (or its SDK)
// may retry any operation with the same arguments.
//
// Errors: ErrInvalidKey and ErrInvalidParams for bad arguments (nothing is
// written), ErrLeaseLost when the caller no longer holds the claim,
// ErrNotFound from Get. Any other error is the backend's, wrapped, and the
// outcome of the operation is unknown: callers treat it as retryable.
type Store interface {
	// Acquire claims p.Key. It returns Acquired with a new token and Acq if
	// the key is absent, released, past its lease, or past its ExpiresAt (or
	// if the row is the caller's own, by p.Acq); KeyReused if the row has
	// another fingerprint; Duplicate if it is completed; HeldElsewhere if
	// another holder's lease is live.
	Acquire(ctx context.Context, p AcquireParams) (Acquisition, error)

	// Renew extends the holder's lease. It fails with ErrLeaseLost if the
	// claim was taken over, completed or released.
	Renew(ctx context.Context, p RenewParams) error

	// Complete marks the claim completed with p.Result if p still holds it;
	// otherwise it fails with ErrLeaseLost and changes nothing.
	Complete(ctx context.Context, p CompleteParams) error

	// Release gives the claim up so that the next Acquire takes over at once,
	// if p still holds it; otherwise it fails with ErrLeaseLost. The row is
	// kept so that tokens stay monotonic, and so is p.LastError.
	Release(ctx context.Context, p ReleaseParams) error

	// Get returns the claim for key, or ErrNotFound if there is none or it is
	// past its ExpiresAt. It is for diagnostics and tests; the protocol never
	// reads before it writes.
	Get(ctx context.Context, key string) (Claim, error)
}

var (
	// ErrLeaseLost means the caller no longer holds the claim: it was taken
	// over after the lease expired, or completed or released already.
	ErrLeaseLost = errors.New("claimstore: lease lost")
	// ErrNotFound means there is no live claim for the key.
	ErrNotFound = errors.New("claimstore: claim not found")
	// ErrInvalidKey means the key is empty, longer than MaxKeyBytes with its
	// prefix, or not valid UTF-8.
	ErrInvalidKey = errors.New("claimstore: invalid key")
	// ErrInvalidParams means an operation's parameters are inconsistent.
	ErrInvalidParams = errors.New("claimstore: invalid parameters")
	// ErrResultTooLarge means a Complete's result is longer than
	// MaxResultBytes, or the backend refused it as invalid (DynamoDB's
	// ValidationException): nothing was written, the claim is still held,
	// and no retry can store it. The holder completes the claim with
	// OmittedResult instead, so the work is never done again.
	ErrResultTooLarge = errors.New("claimstore: result too large to store")
)

// omittedPrefix starts OmittedResult's marker; the control character
// U+001F keeps it apart from any result a caller means, and every store can
// hold it (PostgreSQL's text cannot hold a NUL).
const omittedPrefix = "\x1fclaimfirst:result-not-stored:"

// OmittedResult is the result a claim completes with when result itself
// cannot be stored (ErrResultTooLarge): a marker that says so, with
// result's size and SHA-256, which ParseOmittedResult reads back.
func OmittedResult(result string) string {
	sum := sha256.Sum256([]byte(result))
	return omittedPrefix + strconv.Itoa(len(result)) + ":" + hex.EncodeToString(sum[:])
}

// ParseOmittedResult reports whether stored is an OmittedResult marker, and
// if so the omitted result's size in bytes and hex SHA-256.
func ParseOmittedResult(stored string) (size int, sha256Hex string, ok bool) {
	rest, ok := strings.CutPrefix(stored, omittedPrefix)
	if !ok {
		return 0, "", false
	}
	n, sum, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, "", false
	}
	size, err := strconv.Atoi(n)
	if err != nil {
		return 0, "", false
	}
	return size, sum, true
}

// CheckKey validates key with the store's prefix: not empty, without
// KeySeparator (nor the prefix), at most MaxKeyBytes as stored, and
// valid UTF-8. Stores call
// it first, so every backend rejects the same keys.
func CheckKey(prefix, key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if strings.Contains(key, KeySeparator) {
		return fmt.Errorf("%w: contains the key separator U+001F", ErrInvalidKey)
	}
	if strings.Contains(prefix, KeySeparator) {
		return fmt.Errorf("%w: the store's key prefix contains the key separator U+001F", ErrInvalidKey)
	}
	n := len(key)
	if prefix != "" {
		n += len(prefix) + len(KeySeparator)
	}
	if n > MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes with prefix, more than %d", ErrInvalidKey, n, MaxKeyBytes)
	}
	if !utf8.ValidString(key) {
		// DynamoDB's JSON turns each bad byte into U+FFFD: two different
		// keys would become one item, the second a duplicate of the first.
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
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
	if len(p.Fingerprint) > MaxFingerprintBytes {
		errs = append(errs, fmt.Errorf("Fingerprint is %d bytes, more than %d", len(p.Fingerprint), MaxFingerprintBytes))
	}
	if len(p.Owner) > MaxOwnerBytes {
		errs = append(errs, fmt.Errorf("Owner is %d bytes, more than %d", len(p.Owner), MaxOwnerBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: acquire: %w", ErrInvalidParams, errors.Join(errs...))
	}
	return nil
}

// Check validates h for the operation op.
func (h Holder) Check(prefix, op string) error {
	if err := CheckKey(prefix, h.Key); err != nil {
		return err
	}
	var errs []error
	if h.Token < 1 {
		errs = append(errs, errors.New("Token must be positive"))
	}
	if h.Acq == "" {
		errs = append(errs, errors.New("Acq is required"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s: %w", ErrInvalidParams, op, errors.Join(errs...))
	}
	return nil
}

// Check validates p.
func (p RenewParams) Check(prefix string) error {
	if err := p.Holder.Check(prefix, "renew"); err != nil {
		return err
	}
	if p.LeaseUntil.IsZero() || p.ExpiresAt.IsZero() {
		return fmt.Errorf("%w: renew: LeaseUntil and ExpiresAt are required", ErrInvalidParams)
	}
	return nil
}

// Check validates p.
func (p CompleteParams) Check(prefix string) error {
	if err := p.Holder.Check(prefix, "complete"); err != nil {
		return err
	}
	if p.ExpiresAt.IsZero() {
		return fmt.Errorf("%w: complete: ExpiresAt is required", ErrInvalidParams)
	}
	return checkResult(p.Result)
}

// checkResult fails with ErrResultTooLarge if result is longer than
// MaxResultBytes. CompleteParams.Check and ForceCompleteParams.Check
// check it, so every store does before writing.
func checkResult(result string) error {
	if len(result) > MaxResultBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrResultTooLarge, len(result), MaxResultBytes)
	}
	return nil
}

// Check validates p.
func (p ReleaseParams) Check(prefix string) error { return p.Holder.Check(prefix, "release") }

// RenewExpiry is the expiry a Renew stores: p.ExpiresAt, or the lease's end
// if that is later, so that the row outlives its lease.
func (p RenewParams) RenewExpiry() time.Time {
	if p.ExpiresAt.Before(p.LeaseUntil) {
		return p.LeaseUntil
	}
	return p.ExpiresAt
}

// TruncateLastError cuts s to MaxLastErrorBytes, on a UTF-8 boundary.
func TruncateLastError(s string) string {
	if len(s) <= MaxLastErrorBytes {
		return s
	}
	s = s[:MaxLastErrorBytes]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// NewAcq returns a new random acquisition id.
func NewAcq() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Live reports whether c still counts at now: a row past ExpiresAt is absent.
func (c Claim) Live(now time.Time) bool {
	return now.Before(c.ExpiresAt)
}

// Decide says what an Acquire with p at now does on finding the row c: its own
// earlier write (Acquired), a takeover (Acquired with take true), or an
// outcome that blocks it. Every store decides with it, so that they agree.
// A row is the caller's own only if it carries p.Acq in the state an
// Acquire leaves (in progress): an operator's repair gives a row a new acq,
// but a row released or completed with the caller's acq is not its acquire.
func (c Claim) Decide(p AcquireParams, now time.Time) (o Outcome, take bool) {
	switch {
	case p.Acq != "" && c.Acq == p.Acq && c.Status == StatusInProgress:
		return Acquired, false
	case !c.Live(now):
		return Acquired, true
	case c.Fingerprint != "" && p.Fingerprint != "" && c.Fingerprint != p.Fingerprint:
		return KeyReused, false
	case c.Takeable(now):
		return Acquired, true
	default:
		return c.Blocked(), false
	}
}

// Takeover returns the row an Acquire with p at now writes over c: the
// token incremented, a new acquisition, first_at kept. An expired completed
// row counts as absent, so the key starts afresh; an expired row that was
// never completed (released, or in progress) keeps its first_at, since a
// downstream service may have seen the key since then.
func (c Claim) Takeover(p AcquireParams, now time.Time) Claim {
	n := NewClaim(p, now)
	n.Token = c.Token + 1
	if c.Status != StatusCompleted && !c.FirstAt.IsZero() {
		n.FirstAt = c.FirstAt
	}
	if c.Live(now) {
		n.Attempts = c.Attempts + 1
		if !c.FirstAt.IsZero() {
			n.FirstAt = c.FirstAt
		}
		if n.Fingerprint == "" {
			n.Fingerprint = c.Fingerprint
		}
		n.LastError = c.LastError
	}
	return n
}

// NewClaim returns the row a first Acquire with p at now writes. p.Acq must
// be set.
func NewClaim(p AcquireParams, now time.Time) Claim {
	return Claim{
		Key:         p.Key,
		Status:      StatusInProgress,
		Token:       1,
		Acq:         p.Acq,
		LeaseUntil:  time.UnixMilli(LeaseMillis(p.LeaseUntil)),
		ExpiresAt:   time.Unix(ExpirySeconds(p.ExpiresAt), 0),
		FirstAt:     time.UnixMilli(now.UnixMilli()),
		Fingerprint: p.Fingerprint,
		Owner:       p.Owner,
		Attempts:    1,
	}
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
