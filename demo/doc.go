// Package demo reproduces, with measured numbers, the four experiments that
// explain the claim protocol (the README's "Why: the demo"; the protocol
// itself is in the repository's docs/protocol.md):
//
//  1. Race: a duplicate arrives while the first copy is still being charged.
//     No deduplication charges it twice; check, charge, then remember charges
//     it twice too, because both copies check before either remembers; a claim
//     that only one caller can win charges it once.
//  2. Release: the provider fails a first attempt and the broker redelivers.
//     A claim that is never released blocks the redelivery, and the payment is
//     never charged; releasing the claim on failure lets the redelivery take over.
//  3. Lease: the worker dies between claim and charge, so no release code
//     runs. A claim without a lease holds forever and the redelivery is
//     deferred until it is dead-lettered; a lease that ends with the visibility
//     timeout lets the redelivery take over with the next fencing token.
//  4. Key: the provider charges and the answer times out, and the client
//     retries. Without the idempotency key the retry charges again; with it
//     the provider returns the original charge.
//
// Each experiment is a function (Race, Release, Lease, Key) that takes Options
// and returns the numbers it measured; Run runs them and prints the tables
// that `worker demo` shows.
//
// Every row runs a fresh fake payment provider (package fakeprovider) behind
// an httptest server on the loopback interface, and its handlers charge
// through the real provider client, so the numbers are what the provider
// counted. Deliveries come from a small in-process broker with at-least-once
// semantics: a fixed pool of workers, copies that arrive at once, and messages
// that come back after the visibility timeout when a handler does not ack
// them. The claim-based rows use the claim store from Options.NewStore (the
// memory store by default, or a DynamoDB table). The store's clock is moved
// forward by the visibility timeout instead of sleeping, so leases expire in
// no time. In experiments 1 to 3 the provider ignores idempotency keys, so
// the charges count what the consumer did alone; experiment 4 is about the key.
package demo
