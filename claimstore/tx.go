package claimstore

import (
	"context"
	"errors"
	"fmt"
)

// TxWrites are a caller's own writes, in a backend's own terms, for a
// TxCompleter to commit in one transaction with a completion. Each backend
// names the type it accepts (package dynamo: dynamo.Writes) and rejects any
// other with ErrInvalidParams, so this package needs no backend's types.
type TxWrites interface {
	// Len is the number of writes.
	Len() int
}

// TxCompleter is implemented by a Store that can commit the caller's own
// writes atomically with a completion: either the claim is completed and
// every write applied, or nothing changes. Safe for concurrent use, as Store.
//
// CompleteTx is conditioned as Complete is, and a retry of a transaction
// whose first try was applied succeeds, as Complete's does (the claim shows
// the caller's acquisition completed, and the writes went with it). Errors:
//   - ErrLeaseLost: the claim's condition failed; nothing was written.
//   - *WriteConditionError: one of w's own conditions failed while the claim
//     was still held; nothing was written and the claim is still in progress.
//   - ErrTxTooLarge, ErrInvalidParams: refused before anything was sent.
//   - ErrTxUnsupported: the backend's client cannot run transactions.
//   - any other error: the backend's, wrapped; a cancelled transaction
//     (throttling, a conflict with another transaction) is among them and
//     is retryable, and so is an unknown outcome.
type TxCompleter interface {
	CompleteTx(ctx context.Context, p CompleteParams, w TxWrites) error
}

var (
	// ErrTxUnsupported means the store cannot commit writes with a
	// completion (the memory store): nothing was written, and the caller
	// must not fall back to writing them separately.
	ErrTxUnsupported = errors.New("claimstore: transactional completion not supported by this store")
	// ErrTxTooLarge means the writes and the completion exceed the
	// backend's transaction limits (DynamoDB: 100 items, 4 MB); nothing was sent.
	ErrTxTooLarge = errors.New("claimstore: transaction too large")
)

// WriteConditionError is a transaction cancelled by the condition of one of
// the caller's own writes, not the claim's: a business rejection (the entry
// exists, the balance would go negative). Nothing was written and the claim
// is still held. Whether to retry is the caller's decision.
type WriteConditionError struct {
	// Index is the failed write's position in the caller's writes, from 0.
	Index int
	// Item is the failed write's row as the backend returned it, if the
	// write asked for it (package dynamo: a map[string]types.AttributeValue,
	// with ReturnValuesOnConditionCheckFailure ALL_OLD); nil otherwise.
	Item any
	// Err is the backend's error.
	Err error
}

// Error implements error.
func (e *WriteConditionError) Error() string {
	return fmt.Sprintf("claimstore: condition of write %d failed: %v", e.Index, e.Err)
}

// Unwrap returns the backend's error.
func (e *WriteConditionError) Unwrap() error { return e.Err }

// CompleteTx completes p's claim together with w through s, or fails with
// ErrTxUnsupported if s is not a TxCompleter. With no writes it is Complete.
func CompleteTx(ctx context.Context, s Store, p CompleteParams, w TxWrites) error {
	if w == nil || w.Len() == 0 {
		return s.Complete(ctx, p)
	}
	tc, ok := s.(TxCompleter)
	if !ok {
		return fmt.Errorf("complete %q with %d writes: %w", p.Key, w.Len(), ErrTxUnsupported)
	}
	return tc.CompleteTx(ctx, p, w)
}
