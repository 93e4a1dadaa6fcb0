// Package worker is the per-message protocol that turns a broker's
// at-least-once delivery into exactly-once effects for any handler, using
// the claim protocol of package claimstore through package once. It knows
// no broker: each transport (package sqsworker for SQS long polling and
// Lambda SQS events) receives, hands each delivery to Engine.Process, and
// carries out what it decides.
//
// For each delivery the Engine does the same steps:
//
//  1. The Decoder validates the body and chooses the idempotency key. A
//     message that cannot be decoded is poison: it is dead-lettered at
//     once, with the reason.
//  2. The key is claimed with a lease that ends when the broker's hold on
//     the delivery ends, minus a safety margin (Hold.Until). A key
//     completed already is a duplicate: the delivery is acked without
//     work. A key held by a live lease elsewhere is deferred: the delivery
//     comes back when that lease ends, so it is then either a duplicate or
//     takes over from a dead holder.
//  3. The Handler runs with the key and the claim's fencing token. A
//     heartbeat extends the broker's hold (Hold.Extend) and renews the
//     lease together, well before either ends; if the renew finds the
//     claim taken over, the handler's context is cancelled and nothing is
//     acked.
//  4. Success completes the claim with the handler's result and acks the
//     delivery. A retryable error releases the claim and returns the
//     delivery after a backoff that grows with its Attempt. A Permanent
//     error releases the claim and dead-letters the delivery. A panic is
//     recovered, counted, and never acked. A handler whose effect is a
//     DynamoDB write hands it to Message.Commit instead of writing it: the
//     claim store commits it in one transaction with the completion, so it
//     is applied exactly when the claim is completed.
//
// Completed keys are remembered for Protocol.Retention, which must outlive
// every redelivery the broker can make; each transport fills its default
// from its broker and refuses a shorter one (sqsworker.MinRetention).
//
// # The protocol and its transports
//
// The per-message protocol is Engine: decode, key, claim, hold and renew,
// run the handler, complete or release, and choose the Disposition (ack,
// return after a delay, dead-letter with a reason, leave). A transport
// receives, fills each Message's broker-neutral fields (Attempt,
// FirstReceived, Redelivered, Native) and its Hold, calls Engine.Process,
// and carries out the Disposition (Disposition.Settle with its Settler).
// What a transport tells the engine besides (its broker's failures, a
// clock check fed with its broker's answers, a parent span in Process's
// context) and reads back (Engine.Breaker, Engine.Ready) is in
// EngineOptions and Engine's methods; HTTPHandler serves /metrics,
// /healthz and /readyz for any of them. The settle table (outcome ->
// disposition -> what each transport does) is in the repository's
// docs/protocol.md, "Settling a delivery". Package workertest is the
// contract every transport passes.
//
// A handler and decoder are written once for every broker: the same
// Message, Handler, Decoder, Permanent and Commit(Tx). Message.Native
// holds the broker's own record of the delivery for those who need it.
//
// # Messages from SNS and EventBridge, keys by expression, replays
//
// A body that is an SNS notification (raw delivery off) or an EventBridge
// event is taken out of its envelope before the Decoder sees it
// (UnwrapEnvelopes; Protocol.KeepEnvelopes turns it off). KeyFromJMESPath
// keys messages by a JMESPath expression over the body (package keyexpr).
// ValueHandler stores a typed result; Protocol.OnReplay hears every
// duplicate absorbed, with its stored result (DecodeResult reads a typed
// one).
//
// # Metrics
//
// NewMetrics(reg) registers the Prometheus metrics with reg (and
// nothing registers them with the default registry); HTTPHandler serves
// them with /healthz and /readyz. What each outcome means and what to do
// about it is in the repository's docs/runbook.md; the claim row and the
// failure classes are in docs/protocol.md.
package worker
