// Package memory is an in-process claimstore.Store: one map behind a mutex.
// It has the same semantics as the DynamoDB store (it passes the same
// conformance suite) and is meant for unit tests, the demo, development and
// single-process tools: claims do not survive the process, and two
// processes do not share them. Expired rows are dropped as new keys come
// (as DynamoDB's TTL drops them), and Config.MaxClaims bounds the rows, so
// that a stream of unique keys cannot grow the process without bound.
package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

var _ claimstore.Store = (*Store)(nil)

// Config configures a Store.
type Config struct {
	// KeyPrefix is the key prefix, as in the DynamoDB store: it counts
	// toward claimstore.MaxKeyBytes with claimstore.KeySeparator, and must
	// not contain the separator. Defaults to "".
	KeyPrefix string
	// Now is the store's clock: it stamps first_at and judges whether a
	// lease has ended (a takeover). Defaults to time.Now.
	Now func() time.Time
	// MaxClaims, if positive, is the most rows the store holds: a new key
	// when as many live claims are held fails with ErrFull. Defaults to 0,
	// no bound beyond expiry.
	MaxClaims int
}

// Store is an in-memory claimstore.Store, safe for concurrent use.
type Store struct {
	prefix string
	now    func() time.Time

	mu     sync.Mutex
	claims map[string]claimstore.Claim
	// maxClaims is Config.MaxClaims; sweepAt is the row count at which
	// expired rows are next dropped (expiry.go).
	maxClaims, sweepAt int
}

// New returns an empty Store.
func New(cfg Config) *Store {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Store{prefix: cfg.KeyPrefix, now: now, claims: make(map[string]claimstore.Claim), maxClaims: cfg.MaxClaims, sweepAt: minSweep}
}

// Acquire implements claimstore.Store.
func (s *Store) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	if err := ctx.Err(); err != nil {
		return claimstore.Acquisition{}, err
	}
	now := s.now()
	if err := p.Check(s.prefix, now); err != nil {
		return claimstore.Acquisition{}, err
	}
	if p.Acq == "" {
		p.Acq = claimstore.NewAcq()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.claims[p.Key]
	if !ok {
		if err := s.makeRoom(now); err != nil {
			return claimstore.Acquisition{}, err
		}
		c := claimstore.NewClaim(p, now)
		s.claims[p.Key] = c
		return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: c}, nil
	}
	outcome, take := old.Decide(p, now)
	if !take {
		return claimstore.Acquisition{Outcome: outcome, Claim: old}, nil
	}
	c := old.Takeover(p, now)
	s.claims[p.Key] = c
	return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: c, Previous: &old}, nil
}

// Renew implements claimstore.Store.
func (s *Store) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if err := p.Check(s.prefix); err != nil {
		return err
	}
	return s.update(ctx, p.Holder, "renew", claimstore.StatusInProgress, func(c *claimstore.Claim) {
		c.LeaseUntil = time.UnixMilli(claimstore.LeaseMillis(p.LeaseUntil))
		c.ExpiresAt = time.Unix(claimstore.ExpirySeconds(p.RenewExpiry()), 0)
		if p.LastError != "" {
			c.LastError = claimstore.TruncateLastError(p.LastError)
		}
	})
}

// Complete implements claimstore.Store.
func (s *Store) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if err := p.Check(s.prefix); err != nil {
		return err
	}
	return s.update(ctx, p.Holder, "complete", claimstore.StatusCompleted, func(c *claimstore.Claim) {
		c.Status = claimstore.StatusCompleted
		c.Result = p.Result
		c.ExpiresAt = time.Unix(claimstore.ExpirySeconds(p.ExpiresAt), 0)
	})
}

// Release implements claimstore.Store.
func (s *Store) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	if err := p.Check(s.prefix); err != nil {
		return err
	}
	return s.update(ctx, p.Holder, "release", claimstore.StatusReleased, func(c *claimstore.Claim) {
		c.Status = claimstore.StatusReleased
		if p.LastError != "" {
			c.LastError = claimstore.TruncateLastError(p.LastError)
		}
	})
}

// update applies change to h's claim if h holds it, as the DynamoDB store's
// condition "acq = mine AND status = IN_PROGRESS" does. A claim already in
// state target with h's acquisition is h's own earlier write: success.
func (s *Store) update(ctx context.Context, h claimstore.Holder, op string, target claimstore.Status, change func(*claimstore.Claim)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[h.Key]
	switch {
	case ok && c.Acq == h.Acq && c.Status == claimstore.StatusInProgress:
	case ok && c.Acq == h.Acq && c.Status == target:
		return nil
	default:
		return fmt.Errorf("%s %q token %d: %w", op, h.Key, h.Token, claimstore.ErrLeaseLost)
	}
	change(&c)
	s.claims[h.Key] = c
	return nil
}

// Get implements claimstore.Store.
func (s *Store) Get(ctx context.Context, key string) (claimstore.Claim, error) {
	if err := ctx.Err(); err != nil {
		return claimstore.Claim{}, err
	}
	if err := claimstore.CheckKey(s.prefix, key); err != nil {
		return claimstore.Claim{}, err
	}
	s.mu.Lock()
	c, ok := s.claims[key]
	s.mu.Unlock()
	if !ok || !c.Live(s.now()) {
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, claimstore.ErrNotFound)
	}
	return c, nil
}
