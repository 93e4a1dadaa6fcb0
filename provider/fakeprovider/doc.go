// Package fakeprovider is a payment provider for tests, the demo and
// `worker provider`: it speaks the protocol of package provider, honours
// Idempotency-Key as the IETF draft describes, injects faults on demand and
// counts what it did, so experiments can report calls and charges.
//
// Its charge route is package idempotency's middleware over a memory claim
// store, the same code a team would put in front of its own API. Per key it
// stores the first result (a charge or a decline). A repeated key with the
// same payment replays it with Idempotent-Replayed: true; with a different
// payment it gets 422; while the first request is still being processed it
// gets 409; a request without a key gets 400. So under any concurrency a key
// is charged at most once, unless Config.IgnoreKeys asks for the provider
// that does not honour keys. The faults sit around the middleware: a failure
// before charging is a 503, which releases the key; a timeout after charging
// holds back an answer that is already stored.
//
// A provider's memory is finite: with Config.KeyLifetime a key is forgotten
// that long after its first use, and a request with it charges again. The
// charges themselves stay listed: GET /v1/charges?payment_id=ID answers a
// provider.ChargeList (or 404 with Config.DisableLookup), so that a caller
// can reconcile a payment whose key may have been forgotten.
//
// A payment whose payment_id starts with "decline" is declined (402), and the
// decline is the key's stored result.
//
// Routes: POST /v1/charges, GET /v1/charges?payment_id=ID, GET /stats (Stats
// as JSON).
package fakeprovider
