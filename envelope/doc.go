// Package envelope takes the envelopes other AWS services put around a
// message delivered to SQS off its body, so that the key and fingerprint
// come from the message that was published, not from the wrapper: an SNS
// notification (a subscription with raw message delivery off) and an
// EventBridge event (a rule whose target is the queue).
//
// A body is unwrapped only when it has every field AWS writes in that
// envelope, with AWS's types; anything else passes through unchanged. The
// worker unwraps by default (worker.Protocol.KeepEnvelopes turns it off) and
// copies an SNS notification's String and Number message attributes onto
// the message where it has none of that name, except the worker's own
// (OriginalMessageId, DeadLetterReason, FirstReceivedAt), which nothing in
// an envelope vouches for.
package envelope
