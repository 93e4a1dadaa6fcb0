// Package once runs a Go function at most once per key, over any
// claimstore.Store: the generic door onto the claim protocol, for work that
// does not arrive on SQS (a Kafka consumer, a cron job, a webhook, a retried
// HTTP client call).
//
//	chargeID, err := once.Do(ctx, store, "invoice-2026-11:cust_42", once.Options{}, func(ctx context.Context, c once.Call) (string, error) {
//		return bill(ctx, c.Key, c.Token) // c.Token fences a superseded holder downstream
//	})
//
// Do claims the key, runs the function while it holds the claim, renews the
// claim's lease in the background while the function runs, and stores the
// function's result with the completed claim. A later call with the key does
// not run the function: it returns the stored result. Exactly one of any
// number of concurrent callers runs it; the others get an error matching
// ErrHeldElsewhere that says until when the key is held, and decide whether
// to wait (Wait does, with backoff) or give up.
//
// The function's context ends with cause ErrLeaseLost when the lease is lost
// (the claim was taken over, or could not be renewed before it ran out): a
// later holder may already be doing the work, so the function should stop,
// and Do neither completes nor releases the claim.
//
// Failures: a nil error completes the claim. Any error releases it, so the
// next call with the key runs the function again; the error is recorded as
// the claim's last error. Permanent marks an error that retrying cannot fix:
// the claim is released all the same (a completed claim would keep a fixable
// failure, such as a bad setting or a card the customer replaces, for the
// whole retention), but Wait and callers that check IsPermanent stop
// retrying. A caller that wants a failure remembered returns it as the
// result instead. A key used with another fingerprint is ErrKeyReused.
//
// What a caller does with each outcome of Run (the SQS worker's mapping in
// brackets):
//
//	Result, Replayed false       fn ran, result stored              [ack]
//	Result, Replayed true        stored result, fn did not run      [duplicate: ack]
//	*HeldError                   held elsewhere until Until         [defer until then]
//	*KeyReusedError              another fingerprint                [dead-letter]
//	claimstore.ErrInvalidKey     bad key, nothing written           [dead-letter]
//	*StoreError, Op "acquire"    store failed, fn did not run       [retry]
//	fn's error                   claim released                     [retry, or dead-letter if IsPermanent]
//	  joined with *StoreError    ... but the release failed: the key is held until its lease ends
//	ErrLeaseLost                 another holder owns the key        [leave the message alone]
//	ErrNotStored                 fn ran, result not stored          [leave the message alone]
//	*ResultTooLargeError         fn ran once, key completed without [ack; later calls get it too: duplicate, ack]
//	                             its result (too large to store)
//	*EncodeError                 as *ResultTooLargeError, for a     [ack; duplicates ack]
//	                             typed result that did not encode
//
// Options.LeaseUntil, FirstRenewal and Extend let a caller align the claim's
// lease with another one (a message's visibility timeout, an invocation's
// deadline); Options.Fingerprint says what the work is. Options.Now should
// agree with the store's clock, which judges leases.
//
// # Step by step
//
// Run is four steps, exported for callers that hold a claim around work of
// their own shape (the SQS worker does: it retries a handler in process
// under one claim, and commits the handler's writes with the completion):
//
//	c, stored, err := once.Acquire(ctx, store, key, opts) // nil c: stored is the earlier result
//	err = c.Hold(ctx, work)                               // renewed, watched; ErrLeaseLost if lost
//	err = c.Complete(ctx, result)                         // or c.CompleteTx(ctx, result, writes)
//	err = c.Release(ctx, reason)                          // after a failure
//
// Options.Acq keeps one acquisition id across a caller's retries of
// Acquire, Options.Retry decides whether a failed completion is tried again
// (the worker keeps the message invisible while it waits), and
// Options.Renewed hears each renewal, for logs and metrics.
//
// RunValue and DoValue store a result of the caller's type (JSON by
// default, or Options.Codec), and decode a replay into it; a stored result that
// no longer decodes is a *DecodeError (ErrUndecodable), not a zero value.
// A result that does not encode (a NaN in JSON) after the function
// succeeded completes the key with a marker, as a result too large does:
// the first call gets its value and an *EncodeError (ErrUnencodable), later
// calls the error alone, and the function never runs again for the key.
package once
