// Package worker turns SQS's at-least-once delivery into exactly-once effects
// for any handler, using the claim protocol of package claimstore through
// package once (the worker holds each message's claim with once's Acquire,
// Hold, Complete and Release, its lease aligned with the message's
// visibility).
//
// For each message a Worker (long polling, in a container) or a Lambda (SQS
// events) does the same steps:
//
//  1. The Decoder validates the body and chooses the idempotency key. A
//     message that cannot be decoded is poison: it goes to the queue's
//     dead-letter queue at once, with the reason as a message attribute.
//  2. The key is claimed with a lease that ends when the message's
//     visibility timeout ends, minus a safety margin (in Lambda, at the
//     invocation's deadline). A key completed already is a duplicate: the
//     message is acked without work. A key held by a live lease elsewhere is
//     deferred: the message becomes visible again when that lease ends, so it
//     is then either a duplicate or takes over from a dead holder.
//  3. The Handler runs with the key and the claim's fencing token. A
//     heartbeat extends the message's visibility and renews the lease
//     together, well before either ends; if the renew finds the claim taken
//     over, the handler's context is cancelled and nothing is acked.
//  4. Success completes the claim with the handler's result and acks the
//     message (deletes are batched). A retryable error releases the claim and
//     makes the message visible after a backoff that grows with its receive
//     count. A Permanent error releases the claim and dead-letters the
//     message. A panic is recovered, counted, and never acked. A handler
//     whose effect is a DynamoDB write hands it to Message.Commit instead of
//     writing it: the claim store commits it in one transaction with the
//     completion, so it is applied exactly when the claim is completed.
//
// Completed keys are remembered for Config.Retention, which defaults to the
// queue's retention plus its dead-letter queue's plus a day, and may not be
// set below MinRetention (the queue's retention, plus the longest wait before
// a claim, plus twice the clock bound): a redelivery that arrives after its
// claim is forgotten would be processed as new.
//
// Run stops receiving when its context ends (cutting a long poll short),
// returns messages it has not started to the queue at once, and waits for the
// rest; it returns within ShutdownTimeout of its context's end, cancelling
// handlers still running when all but a quarter of it (at most 5s) has
// passed. A message a cut-short long poll took is neither processed nor
// lost: it becomes visible again when its visibility timeout ends.
//
// # The protocol and its transports
//
// The per-message protocol is Engine: decode, key, claim, hold and renew,
// run the handler, complete or release, and choose the Disposition (ack,
// return after a delay, dead-letter with a reason, leave). It knows no
// broker. A transport (Worker, the SQS long poll; Lambda, the adapter for
// SQS events) receives, fills each Message's broker-neutral fields
// (Attempt, FirstReceived, Redelivered, Native) and its Hold, calls
// Engine.Process, and carries out the Disposition (Disposition.Settle).
// Package workertest is the contract every transport passes.
//
// # FIFO queues
//
// A FIFO queue (its FifoQueue attribute, or a Lambda event source ARN ending
// in ".fifo") is processed one message group at a time: the messages of a
// MessageGroupId run one after another in the order SQS gave them, different
// groups in parallel, and a message that is not done holds back its group's
// later messages. The rules (what holds a group and for how long, how poison
// leaves it, the queue's maxReceiveCount, what Lambda reports) are written
// once, in the repository's docs/protocol.md, "FIFO queues".
//
// # Messages from SNS and EventBridge, keys by expression, replays
//
// A body that is an SNS notification (raw delivery off) or an EventBridge
// event is taken out of its envelope before the Decoder sees it
// (UnwrapEnvelopes; Config.KeepEnvelopes turns it off). KeyFromJMESPath
// keys messages by a JMESPath expression over the body (package keyexpr).
// ValueHandler stores a typed result; Config.OnReplay hears every
// duplicate absorbed, with its stored result (DecodeResult reads a typed
// one).
//
// # Metrics
//
// NewMetrics(reg) registers the Prometheus metrics with reg (and
// nothing registers them with the default registry); Worker.HTTPHandler
// serves them with /healthz and /readyz. A Lambda writes its outcome counts
// as one CloudWatch Embedded Metric Format line per invocation to
// LambdaConfig.EMF (stdout). What each outcome means and what to do about it
// is in the repository's docs/runbook.md; the claim row and the failure
// classes are in docs/protocol.md.
package worker
