// Package idempotency is net/http middleware that gives an HTTP API the
// server side of the IETF "Idempotency-Key" HTTP header draft over any
// claimstore.Store (memory for one process, DynamoDB for many).
//
//	mw, err := idempotency.New(idempotency.Options{
//		Store:    store,
//		Required: true,
//		Scope:    idempotency.Prefix("payments#"),
//		Client:   idempotency.Principal(userKey{}), // set by the authentication middleware
//	})
//	mux.Handle("POST /v1/charges", authenticate(mw(chargeHandler)))
//
// Every key belongs to the client that sent it (Options.Client: the
// authenticated principal with Principal, or an HMAC of the Authorization
// header keyed with a server Secret, with AuthorizationHash): a client
// that sends another client's key
// runs the handler for itself, and never gets the other's response. New
// refuses options without a Client unless Options.SharedKeys says that all
// clients share one key space, which is unsafe for any API with more than
// one client. Authentication belongs outside this middleware: a request
// the middleware sees has already been let in.
//
// For a request with an Idempotency-Key header (POST and PATCH by default):
//
//   - The first request with the key claims it (package once) and runs the
//     handler. Its response goes to the client as the handler writes it, and
//     its status, selected headers (Options.StoredHeaders) and body are stored
//     with the completed claim, as JSON.
//   - The key is parsed as the draft's Structured Field string ("..."); a
//     bare value is accepted as the same key, for clients that predate the
//     draft.
//   - A repeat with the same fingerprint (a SHA-256 of the method, path as
//     sent (escaped), query and body, length-prefixed, unless
//     Options.Fingerprint says otherwise) gets the stored
//     response again, with Idempotent-Replayed: true; the handler does not run.
//   - A repeat while the first still runs gets 409 with Retry-After, whatever
//     its fingerprint: nothing is stored yet to compare it with.
//   - The same key with another fingerprint gets 422 once the first is done.
//   - A missing key gets 400 where Options.Required says keys are required
//     (otherwise the request passes through unclaimed); an over-long or
//     malformed key gets 400.
//   - A 5xx response (or a panic) releases the claim, so a retry runs the
//     handler again; so do 401, 403, 408 and 429 (Options.ReleaseStatuses),
//     which say nothing about the operation. Every other status is the
//     key's stored outcome.
//   - A handler that returns without writing anything once its context is
//     done (the request's deadline passed) has not answered: the claim is
//     released and the client gets 503 with Retry-After. A handler that did
//     the work answers, even late (a bare WriteHeader(200) is an answer);
//     one that returns without writing while its context is live answers
//     200 with no body, which is stored.
//   - A client that disconnects does not end the claim: the handler runs on
//     a context the disconnect does not cancel (bounded by the request's own
//     deadline), and its response is stored for the retry.
//   - A response (body and stored headers) over Options.MaxResponseBytes still reaches the first
//     client, but cannot be replayed: the claim records that it ran, and a
//     repeat gets 500 saying the response was too large to store, rather than
//     running the handler twice.
//
// Keys are also scoped (Options.Scope: a prefix per route or API) so that
// one table serves many APIs. The scope is stored apart from the key, with
// ScopeSeparator between them (StoreKey), so that scope "pay" with key
// "out-1" and scope "payout" with key "-1" are two keys. Without a scope,
// the stored key is as it always was; with one, keys stored by a version
// before the separator are not found by later ones: a request answered
// before such an upgrade and retried after it runs the handler again
// (upgrade when clients have no retries outstanding). The store holds, per key, a
// 128-bit hash of the client (never its name or credential), the request's
// fingerprint and the stored response.
// Rejections are written by Options.Reject, so an API keeps its own error
// format; Options.Observe sees every outcome, for metrics.
package idempotency
