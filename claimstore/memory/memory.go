// Package memory is an in-process claimstore.Store: one map behind a mutex.
// It has the same semantics as the DynamoDB store (it passes the same
// conformance suite) and is meant for unit tests, the demo and single-process
// tools; claims do not survive the process.
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
	// KeyPrefix is prepended to every key, as in the DynamoDB store, and
	// counts toward claimstore.MaxKeyBytes. Defaults to "".
	KeyPrefix string
	// Now is the store's clock. Defaults to time.Now.
	Now func() time.Time
}

// Store is an in-memory claimstore.Store, safe for concurrent use.
type Store struct {
	prefix string
	now    func() time.Time

	mu     sync.Mutex
	claims map[string]claimstore.Claim
}

// New returns an empty Store.
func New(cfg Config) *Store {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Store{prefix: cfg.KeyPrefix, now: now, claims: make(map[string]claimstore.Claim)}
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
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.claims[p.Key]
	if ok && !old.Takeable(now) {
		return claimstore.Acquisition{Outcome: old.Blocked(), Claim: old}, nil
	}
	c := claimstore.Claim{
		Key:        p.Key,
		Status:     claimstore.StatusInProgress,
		Token:      old.Token + 1,
		LeaseUntil: time.UnixMilli(claimstore.LeaseMillis(p.LeaseUntil)),
		ExpiresAt:  time.Unix(claimstore.ExpirySeconds(p.ExpiresAt), 0),
		Owner:      p.Owner,
		Attempts:   old.Attempts + 1,
	}
	s.claims[p.Key] = c
	return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: c}, nil
}

// Renew implements claimstore.Store.
func (s *Store) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if err := p.Check(s.prefix); err != nil {
		return err
	}
	return s.update(ctx, p.Key, p.Token, "renew", func(c *claimstore.Claim) {
		c.LeaseUntil = time.UnixMilli(claimstore.LeaseMillis(p.LeaseUntil))
	})
}

// Complete implements claimstore.Store.
func (s *Store) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if err := p.Check(s.prefix); err != nil {
		return err
	}
	return s.update(ctx, p.Key, p.Token, "complete", func(c *claimstore.Claim) {
		c.Status = claimstore.StatusCompleted
		c.Result = p.Result
		c.ExpiresAt = time.Unix(claimstore.ExpirySeconds(p.ExpiresAt), 0)
	})
}

// Release implements claimstore.Store.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := claimstore.CheckRelease(s.prefix, key, token); err != nil {
		return err
	}
	return s.update(ctx, key, token, "release", func(c *claimstore.Claim) {
		c.Status = claimstore.StatusReleased
	})
}

// update applies change to key's claim if token holds it, as the DynamoDB
// store's condition "token = mine AND status = IN_PROGRESS" does.
func (s *Store) update(ctx context.Context, key string, token int64, op string, change func(*claimstore.Claim)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[key]
	if !ok || c.Token != token || c.Status != claimstore.StatusInProgress {
		return fmt.Errorf("%s %q token %d: %w", op, key, token, claimstore.ErrLeaseLost)
	}
	change(&c)
	s.claims[key] = c
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
