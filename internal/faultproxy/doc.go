// Package faultproxy is an HTTP reverse proxy that injects faults between a
// client and a real upstream, for tests that need a real wire: the AWS SDK
// in a worker process in front of the emulator, or the provider client in
// front of the fake provider.
//
// A test starts a Proxy on 127.0.0.1, points the client at its URL, and adds
// rules at run time. Each request is checked against the rules that are on,
// in the order they were added; the first whose Match accepts it and whose
// Probability draw hits applies its Fault. A request no rule takes is
// forwarded untouched (the Host header included, so signed requests stay
// valid).
//
// The faults are the ones distributed systems meet:
//
//   - Respond answers with a status and body and never forwards: an error
//     page, DynamoDB's 500 InternalServerError, a 400 ThrottlingException, a
//     provider's 503 or 401. With a rule left on until the test switches it
//     off, it is an outage window.
//   - Drop forwards the request, so the upstream applies it, reads the
//     answer and closes the client's connection instead of sending it: the
//     client sees a broken connection for a write that happened.
//   - Hang holds the request for a while (or until the client gives up),
//     then forwards it: a dependency that accepted a request and went
//     silent.
//   - ShiftDate forwards the request and moves its answer's Date header:
//     a server whose clock disagrees with the client's, which is how the
//     client's own clock skew shows.
//
// Rules are safe to add, switch and read from any goroutine while requests
// flow. The probability draws come from one seeded generator, so a run with
// the same seed and the same request order injects the same faults.
package faultproxy
