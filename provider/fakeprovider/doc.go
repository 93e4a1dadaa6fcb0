// Package fakeprovider is a payment provider for tests, the demo and
// `worker provider`: it speaks the protocol of package provider, honours
// Idempotency-Key as the IETF draft describes, injects faults on demand and
// counts what it did, so experiments can report calls and charges.
//
// Per key it stores the first result (a charge or a decline). A repeated key
// with the same payment replays it with Idempotent-Replayed: true; with a
// different payment it gets 422; while the first request is still being
// processed it gets 409; a request without a key gets 400. So under any
// concurrency a key is charged at most once, unless Config.IgnoreKeys asks
// for the provider that does not honour keys.
//
// A payment whose payment_id starts with "decline" is declined (402), and the
// decline is the key's stored result.
//
// Routes: POST /v1/charges, GET /stats (Stats as JSON).
package fakeprovider
