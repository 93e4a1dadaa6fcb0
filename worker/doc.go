// Package worker turns SQS's at-least-once delivery into exactly-once effects
// for any handler, using the claim protocol of package claimstore.
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
// set shorter than the queue's retention: a redelivery that arrives after its
// claim is forgotten would be processed as new.
//
// Run stops receiving when its context ends, returns messages it has not
// started to the queue at once, and waits up to ShutdownTimeout for the rest.
package worker
