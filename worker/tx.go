package worker

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/once"
)

// Tx is what a handler commits with its claim's completion: its own writes,
// and what a failed condition of one of them means.
type Tx struct {
	// Writes are the handler's writes in the claim store's terms (for
	// claimstore/dynamo, a dynamo.Writes of Put, Update, Delete and
	// ConditionCheck items on any table). Required.
	Writes claimstore.TxWrites
	// Rejected decides what a transaction cancelled by a condition of one of
	// Writes means (a business rejection: the entry exists, the balance
	// would go negative); e names the write. Nothing was written and the
	// claim is still held. It returns what the handler would have:
	//   - a result and a nil error: the claim is completed with that result
	//     alone, without the writes, and the message acked;
	//   - an error made with Permanent: the claim is released and the
	//     message dead-lettered;
	//   - any other error: the claim is released and the message retried.
	// Defaults to returning e: the message is retried.
	Rejected func(e *claimstore.WriteConditionError) (result string, err error)
}

// Commit asks the worker to commit tx.Writes in one transaction with the
// completion of m's claim once the handler returns a nil error: the writes
// are applied if and only if the claim is completed, once, and only while
// this delivery still holds the claim. A holder that lost its lease (it
// stalled, another worker took over) has its transaction cancelled by the
// claim's condition: it writes nothing and is counted as lease lost. A crash
// before the transaction leaves nothing written; the redelivery runs the
// handler again.
//
// The claim store must implement claimstore.TxCompleter (claimstore/dynamo
// does; claimstore/memory does not). Writes the store cannot commit with the
// completion (it has no transactions, or they exceed its limits) dead-letter
// the message with the reason, and nothing is written: the worker never
// completes the claim without them.
//
// Each call replaces the writes of an earlier one. Writes committed by a
// handler call that returned an error are dropped.
func (m *Message) Commit(tx Tx) { m.tx = &tx }

// finish completes the claim after the handler succeeded: alone, or with
// the writes the handler committed in one transaction. herr is not nil when
// the transaction cannot or must not be retried as it is: the writes are
// refused (permanent), or a write's condition failed and tx.Rejected says to
// release; then nothing was written and the claim is still held. Otherwise
// err is the completion's error, as from once.Claim.Complete, and result
// what the claim was completed with.
func (p *processor) finish(ctx context.Context, m *Message, c *once.Claim, result string) (string, error, error) {
	tx := m.tx
	if tx == nil || tx.Writes == nil || tx.Writes.Len() == 0 {
		return result, nil, p.complete(ctx, c, result, nil)
	}
	err := p.complete(ctx, c, result, tx.Writes)
	var wce *claimstore.WriteConditionError
	switch {
	case errors.Is(err, claimstore.ErrTxUnsupported), errors.Is(err, claimstore.ErrTxTooLarge), errors.Is(err, claimstore.ErrInvalidParams):
		return result, Permanent("the handler's writes cannot be committed with the claim", err), nil
	case errors.As(err, &wce):
		p.log.Info("transaction cancelled by a condition of the handler's writes; nothing written",
			slog.String("message_id", m.ID), slog.String("idempotency_key", m.Key), slog.Int64("token", c.Token), slog.Int("write", wce.Index))
		if tx.Rejected == nil {
			return result, err, nil
		}
		r, herr := rejected(tx.Rejected, wce)
		if herr != nil {
			return r, herr, nil
		}
		return r, nil, p.complete(ctx, c, r, nil)
	}
	return result, nil, err
}

// complete completes the claim, with the handler's writes if there are
// any; a failing store is retried in process while the message can be held
// (the claim's Retry): the work is done, and a redelivery would only find
// the claim in progress and wait for its lease.
func (p *processor) complete(ctx context.Context, c *once.Claim, result string, w claimstore.TxWrites) (err error) {
	ctx, span := p.span(ctx, SpanComplete)
	defer func() { endStep(span, err, errors.Is(err, once.ErrLeaseLost)) }()
	if w == nil {
		return c.Complete(ctx, result)
	}
	return c.CompleteTx(ctx, result, w)
}

// rejected calls the handler's Rejected, turning a panic into an error that
// is never acked, as a handler's own panic is.
func rejected(f func(*claimstore.WriteConditionError) (string, error), e *claimstore.WriteConditionError) (result string, err error) {
	defer func() {
		if v := recover(); v != nil {
			result, err = "", &panicError{value: v, stack: string(debug.Stack())}
		}
	}()
	return f(e)
}
