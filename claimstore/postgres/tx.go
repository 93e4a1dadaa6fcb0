package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimfirst/claimfirst/claimstore"
)

// Writes is a handler's SQL work, run inside the transaction that completes
// its claim: the statements it issues on tx commit if and only if the claim
// is completed. The claim's row is already locked and its completion
// written when Writes runs, so a holder that lost its lease never gets
// here, and no takeover can start until the transaction ends.
//
// Return an error to roll everything back. An error that is, or wraps, a
// *claimstore.WriteConditionError, or a *pgconn.PgError of class 23 (an
// integrity constraint: a unique or check violation, the entry exists, the
// balance would go negative) is a business rejection: CompleteTx returns it
// as a *claimstore.WriteConditionError and the claim stays held. Any other
// error is returned wrapped, as retryable. Do not commit or roll back tx.
type Writes func(ctx context.Context, tx pgx.Tx) error

// Len implements claimstore.TxWrites: a Writes is one unit of work.
func (w Writes) Len() int {
	if w == nil {
		return 0
	}
	return 1
}

// CompleteTx implements claimstore.TxCompleter: in one transaction, the
// completion (conditioned as Complete's, and first, so that it locks the
// claim's row), then w. A completion that finds the acquisition gone rolls
// back and returns claimstore.ErrLeaseLost; one that finds its own earlier
// transaction committed (the claim completed by this acquisition) rolls back
// and succeeds, since w went with it. w must be a Writes.
func (s *Store) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	writes, ok := w.(Writes)
	if !ok || writes == nil {
		return fmt.Errorf("%w: complete %q: writes are %T, want postgres.Writes", claimstore.ErrInvalidParams, p.Key, w)
	}
	now, local := s.clock()
	tx, err := s.cfg.DB.Begin(ctx)
	if err != nil {
		return fmt.Errorf("complete %q token %d: begin: %w", p.Key, p.Token, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	written, err := s.holderWriteOn(ctx, tx, "complete", s.sql.complete, claimstore.StatusCompleted, p.Holder, now,
		p.Result, micros(p.ExpiresAt, local))
	switch {
	case err != nil:
		return err
	case !written:
		return nil // the first try committed, writes and all
	}
	if err := writes(ctx, tx); err != nil {
		var wce *claimstore.WriteConditionError
		var pge *pgconn.PgError
		switch {
		case errors.As(err, &wce):
			return wce
		case errors.As(err, &pge) && len(pge.Code) == 5 && pge.Code[:2] == "23":
			return &claimstore.WriteConditionError{Index: 0, Item: pge, Err: err}
		}
		return fmt.Errorf("complete %q token %d: writes: %w", p.Key, p.Token, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("complete %q token %d: commit: %w", p.Key, p.Token, err)
	}
	return nil
}
