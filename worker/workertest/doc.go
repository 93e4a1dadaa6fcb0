// Package workertest is the door contract: the behaviour every transport of
// the worker protocol must show (SQS long polling and the Lambda adapter in
// this module; Kafka, RabbitMQ or a user's own later), written once and run
// against each transport's real broker or emulator, as package
// claimstoretest is for stores.
//
// A transport provides a Harness: a fresh queue on its broker, a claim
// store, consumers that run the worker protocol on that queue (sqsworker.New,
// sqsworker.NewLambda, ...), and the broker-side faults it can make. The suite
// provides the rest: the decoder, a counting handler whose effect (the
// provider) is a counter keyed by idempotency key, a claim store wrapper
// that injects store faults (which works for every transport), and the
// checks. Effects, runs, replays and what the broker settled are counted;
// log lines never are.
//
// The scenarios, each an exported function run by RunAll as a subtest of
// its name:
//
//   - DuplicateWhileRunning: a second copy arrives while the first runs:
//     one run, one effect, both copies settled.
//   - CrashBeforeAck: the consumer dies after the effect and the
//     completion, before the broker hears the ack: one effect, the
//     redelivery to a restarted consumer is settled as a duplicate.
//   - FailureThenSuccess: the handler fails retryably, then succeeds: two
//     runs, one effect, settled, nothing dead-lettered.
//   - Poison: a body the decoder refuses is dead-lettered at its first
//     delivery with the decoder's reason, the handler never sees it, and the
//     message beside it is done as usual.
//   - KeyReused: the same key with another payload after the first
//     completed is dead-lettered with a reason naming the key; the first
//     effect and its stored result stand.
//   - ResultTooLarge: a result the store cannot hold: one effect, acked,
//     the claim completed, a later copy a duplicate.
//   - RenewalBlip: the store fails renewals for over a lease while the
//     handler runs and then succeeds (where a handler cannot outlive its
//     lease, Timing.MaxRun, for most of the run): completed by that run,
//     one effect.
//   - ShutdownOverrun: the consumer shuts down while a handler ignores its
//     cancelled context past the shutdown timeout, and the process lives
//     on; a new consumer gets the redelivery: the key's runs never overlap,
//     one effect.
//   - LostAck: the broker never hears an ack: the redelivery is settled
//     as a duplicate, one effect.
//   - StoreOutage: every store call fails for a while: nothing is
//     dead-lettered, every message is done after, once.
//   - BrokerOutage: the consumer cannot reach the broker for a while:
//     nothing is lost, every message is done after, once.
//   - Ordering: where the broker promises order (FIFO message groups),
//     each group's effects happen in the order sent, a retried message
//     holding back the rest of its group.
//
// A scenario that needs a fault or promise the transport does not have
// fails, unless Harness.Absent declares it absent with a reason: then it is
// skipped with that reason. A transport declares absent only what it truly
// cannot do.
//
// Check runs a scenario against a T that records instead of failing, so a
// transport's tests can show each scenario fails against a planted fault
// (a store that completes nothing, a handler wrapper that acks failures, a
// transport that loses groups, ...): a suite that cannot fail proves nothing.
//
//	func TestWorkertest(t *testing.T) {
//		workertest.RunAll(t, func(t workertest.T, o workertest.Options) workertest.Harness {
//			return newMyHarness(t, o)
//		})
//	}
package workertest
