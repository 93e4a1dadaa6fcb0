// Package idempotency is net/http middleware that gives an HTTP API the
// server side of the IETF "Idempotency-Key" HTTP header draft over any
// claimstore.Store (memory for one process, DynamoDB for many).
//
//	mw, err := idempotency.New(idempotency.Options{Store: store, Required: true, Scope: idempotency.Prefix("payments#")})
//	mux.Handle("POST /v1/charges", mw(chargeHandler))
//
// For a request with an Idempotency-Key header (POST and PATCH by default):
//
//   - The first request with the key claims it (package once) and runs the
//     handler. Its response goes to the client as the handler writes it, and
//     its status, selected headers (Options.StoredHeaders) and body are stored
//     with the completed claim, as JSON.
//   - A repeat with the same fingerprint (method, path and a SHA-256 of the
//     body, unless Options.Fingerprint says otherwise) gets the stored
//     response again, with Idempotent-Replayed: true; the handler does not run.
//   - A repeat while the first still runs gets 409 with Retry-After, whatever
//     its fingerprint: nothing is stored yet to compare it with.
//   - The same key with another fingerprint gets 422 once the first is done.
//   - A missing key gets 400 where Options.Required says keys are required
//     (otherwise the request passes through unclaimed); an over-long or
//     malformed key gets 400.
//   - A 5xx response (or a panic) releases the claim, so a retry runs the
//     handler again. Every other status is the key's stored outcome.
//   - A response body over Options.MaxResponseBytes still reaches the first
//     client, but cannot be replayed: the claim records that it ran, and a
//     repeat gets 500 saying the response was too large to store, rather than
//     running the handler twice.
//
// Keys are scoped (Options.Scope: a prefix per route or tenant) so that one
// table serves many APIs, and one client's key never meets another's.
// Rejections are written by Options.Reject, so an API keeps its own error
// format; Options.Observe sees every outcome, for metrics.
package idempotency
