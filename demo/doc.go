// Package demo reproduces, with measured numbers, the nine experiments that
// explain the claim protocol (the repository's docs/demo.md; the protocol
// itself is in the repository's docs/protocol.md) and what it must get right
// around it:
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
//  5. Natural idempotency: a shipment message is delivered twice, with no
//     claim at all. Adding one on each delivery ships twice; writing the new
//     state, or a state transition conditioned on the old state, does not.
//  6. How long to remember: duplicates arrive two hours late. Claims kept for
//     an hour have forgotten the payment and it is charged again; claims kept
//     past the queue's retention recognize it.
//  7. The claim committed with the database write: a worker dies right after
//     its ledger write. Written, then completed, the claim is taken over and
//     the entry written again; committed in one transaction with the claim's
//     completion, the entry is written exactly once.
//  8. The provider's memory: the provider forgets keys after 24 hours and a
//     payment whose outcome was unknown is redriven two days later. Retrying
//     with the forgotten key charges again; looking the charge up first, when
//     the claim's first acquisition is older than the key lifetime, does not.
//  9. Kafka: a consumer group on an in-process kfake cluster, some payments
//     produced twice (a producer's retry), a member that joins mid-run and one
//     that dies after charging and before committing. A consumer that
//     charges, then commits charges each retry and each record read again
//     twice; kafkaworker members over the claims charge each payment once and
//     commit every record.
//
// Each experiment is a function (Race, Release, Lease, Key, Natural,
// Remember, Ledger, Forget, Kafka) that takes Options and returns the
// numbers it measured; Run runs them and prints the tables that `worker demo` shows.
// Every row ends with a mark that says whether its effects were exactly
// once: "ok", "double N" (N effects beyond one per unit) or "lost N" (N
// units with none).
//
// Every row of experiments 1 to 4 runs a fresh fake payment provider
// (package fakeprovider) behind an httptest server on the loopback interface,
// and its handlers charge through the real provider client, so the numbers
// are what the provider counted. Deliveries come from a small in-process broker with at-least-once
// semantics: a fixed pool of workers, copies that arrive at once, and messages
// that come back after the visibility timeout when a handler does not ack
// them. The claim-based rows use the claim store from Options.NewStore (the
// memory store by default, or a DynamoDB table). The store's clock is moved
// forward by the visibility timeout instead of sleeping, so leases expire in
// no time. In experiments 1 to 3 the provider ignores idempotency keys, so
// the charges count what the consumer did alone; experiment 4 is about the key.
//
// Experiments 5 to 8 run in process on the same clock, which they also move
// by hours and days: experiment 5 writes an in-memory orders table and uses
// no claims; experiments 6 and 8 charge an in-process provider that forgets
// keys after a lifetime (in experiment 6, at once: it ignores them) and lists
// charges by payment id; experiment 7 writes an in-memory ledger, and its
// transactional row commits the claim's completion and the entry as one step
// under the ledger's lock, the in-memory equivalent of a DynamoDB
// TransactWriteItems. Without Options.Ledger, experiment 7 therefore keeps
// its claims in a memory store whatever Options.NewStore says; with it
// (DynamoDBLedger), the ledger is a DynamoDB table and the transactional row
// is a real TransactWriteItems of the entry, the balance and the claim.
//
// Experiment 9 runs on real time: a kfake cluster
// (github.com/twmb/franz-go/pkg/kfake) on 127.0.0.1 per row, franz-go clients over TCP, a session timeout of
// 1.5 s, and the fake provider over HTTP; its claim-based row uses
// Options.NewStore's store. kfake keeps everything in memory and has no
// replication: the experiment shows the consumer's side.
package demo
