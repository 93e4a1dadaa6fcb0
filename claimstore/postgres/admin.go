package postgres

import (
	"context"
	"fmt"

	"github.com/claimfirst/claimfirst/claimstore"
)

// ForceRelease implements claimstore.Admin: a read, then one UPDATE
// conditioned on the row as read, giving the row a new acq (so neither the
// holder nor its retried Acquire takes the release for its own).
func (s *Store) ForceRelease(ctx context.Context, key string) (claimstore.Claim, error) {
	before, err := s.adminRead(ctx, key, "force release", claimstore.Claim.AllowsForceRelease)
	if err != nil {
		return before, err
	}
	return before, s.adminWrite(ctx, "force release", s.sql.forceRelease, before, claimstore.NewAcq())
}

// ForceComplete implements claimstore.Admin: a read, then one UPDATE
// conditioned on the row as read.
func (s *Store) ForceComplete(ctx context.Context, p claimstore.ForceCompleteParams) (claimstore.Claim, error) {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return claimstore.Claim{}, err
	}
	before, err := s.adminRead(ctx, p.Key, "force complete", claimstore.Claim.AllowsForceComplete)
	if err != nil {
		return before, err
	}
	now, local := s.clock()
	return before, s.adminWrite(ctx, "force complete", s.sql.forceComplete, before,
		p.Result, claimstore.NewAcq(), now, micros(p.ExpiresAt, local))
}

// Forget implements claimstore.Admin: a read, then one DELETE conditioned on
// the row as read.
func (s *Store) Forget(ctx context.Context, key string) (claimstore.Claim, error) {
	before, err := s.adminRead(ctx, key, "forget", claimstore.Claim.AllowsForget)
	if err != nil {
		return before, err
	}
	return before, s.adminWrite(ctx, "forget", s.sql.forget, before)
}

// adminRead reads key's live row and checks that allowed accepts it.
func (s *Store) adminRead(ctx context.Context, key, op string, allowed func(claimstore.Claim) bool) (claimstore.Claim, error) {
	return claimstore.ReadForRepair(ctx, s.Get, key, op, allowed)
}

// adminWrite runs sql conditioned on the row still being before; no row
// changed means it moved meanwhile.
func (s *Store) adminWrite(ctx context.Context, op, sql string, before claimstore.Claim, args ...any) error {
	all := append([]any{claimstore.StoredKey(s.cfg.KeyPrefix, before.Key), string(before.Status), before.Token, before.Acq}, args...)
	tag, err := s.exec(ctx, s.cfg.DB, sql, all...)
	switch {
	case err != nil:
		return fmt.Errorf("%s %q: %w", op, before.Key, err)
	case tag.RowsAffected() == 0:
		return fmt.Errorf("%s %q: %w", op, before.Key, claimstore.ErrClaimChanged)
	}
	return nil
}
