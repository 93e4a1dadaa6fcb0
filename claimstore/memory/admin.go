package memory

import (
	"context"
	"fmt"

	"github.com/claimfirst/claimfirst/claimstore"
)

var _ claimstore.Admin = (*Store)(nil)

// ForceRelease implements claimstore.Admin.
func (s *Store) ForceRelease(ctx context.Context, key string) (claimstore.Claim, error) {
	return s.admin(ctx, key, "force release", claimstore.Claim.AllowsForceRelease, func(c *claimstore.Claim) bool {
		c.Status = claimstore.StatusReleased
		c.Acq = claimstore.NewAcq()
		return true
	})
}

// ForceComplete implements claimstore.Admin.
func (s *Store) ForceComplete(ctx context.Context, p claimstore.ForceCompleteParams) (claimstore.Claim, error) {
	if err := p.Check(s.prefix); err != nil {
		return claimstore.Claim{}, err
	}
	return s.admin(ctx, p.Key, "force complete", claimstore.Claim.AllowsForceComplete, func(c *claimstore.Claim) bool {
		c.ExpiresAt = p.Expiry(*c)
		c.Status = claimstore.StatusCompleted
		c.Result = p.Result
		c.Acq = claimstore.NewAcq()
		return true
	})
}

// Forget implements claimstore.Admin.
func (s *Store) Forget(ctx context.Context, key string) (claimstore.Claim, error) {
	return s.admin(ctx, key, "forget", claimstore.Claim.AllowsForget, func(*claimstore.Claim) bool { return false })
}

// admin applies change to key's live claim if allowed says it may; a change
// that returns false deletes the row. The mutex makes the read and the
// write one step, so the row cannot change between them.
func (s *Store) admin(ctx context.Context, key, op string, allowed func(claimstore.Claim) bool, change func(*claimstore.Claim) bool) (claimstore.Claim, error) {
	if err := ctx.Err(); err != nil {
		return claimstore.Claim{}, err
	}
	if err := claimstore.CheckKey(s.prefix, key); err != nil {
		return claimstore.Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	before, ok := s.claims[key]
	if !ok || !before.Live(s.now()) {
		return claimstore.Claim{}, fmt.Errorf("%s %q: %w", op, key, claimstore.ErrNotFound)
	}
	if !allowed(before) {
		return before, fmt.Errorf("%s %q: status %s: %w", op, key, before.Status, claimstore.ErrWrongState)
	}
	after := before
	if change(&after) {
		s.claims[key] = after
	} else {
		delete(s.claims, key)
	}
	return before, nil
}
