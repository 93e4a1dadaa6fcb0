// Package provider is the last hop of exactly-once: a client for the payment
// provider that forwards the message's idempotency key, so that a charge whose
// response was lost can be asked for again without charging twice.
//
// The protocol (modelled on the IETF draft "The Idempotency-Key HTTP Header
// Field"; the failure classes and what the worker does with each are in the
// repository's docs/protocol.md):
//
//	POST {BaseURL}/v1/charges
//	Idempotency-Key: <key>
//	Content-Type: application/json
//
//	{"payment_id": "pay_123", "amount": 1999, "currency": "EUR"}
//
// A 2xx answer is {"id": "ch_...", "status": "succeeded"}, with the header
// Idempotent-Replayed: true when it is the stored result of an earlier request
// with the same key. Any other answer carries an ErrorResponse body.
//
// Client.Charge retries every answer whose outcome is unknown (5xx, 408, 409,
// 429, a timeout, a connection error) with the same key, with exponential
// backoff and full jitter, honouring Retry-After, until Config.MaxAttempts or
// the context ends. Every failure is an *Error whose Kind tells the caller what
// to do next:
//
//	KindUnknown      the charge may or may not have happened: try again later
//	                 with the same key (release the claim, let the queue redeliver)
//	KindDeclined     a definitive business outcome: complete the claim with it
//	KindKeyMismatch  the key was used for a different payload: permanent
//	KindBadRequest   the request can never succeed: permanent
//
// Payment is also the schema of the payment message on the queue;
// DecodePayment decodes and validates one strictly.
//
// Package fakeprovider is a provider server that honours keys and injects
// faults, for tests, the demo and `worker provider`.
package provider
