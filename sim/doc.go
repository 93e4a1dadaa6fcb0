// Package sim runs the real worker, once and claim code in a simulated AWS
// on testing/synctest's virtual clock, under fault schedules chosen by a
// seed, and checks the two promises after every run: nothing twice,
// nothing lost.
//
// The world is an in-memory SQS (SQS, an sqsworker.SQSAPI: standard and FIFO
// queues, long polling, visibility timeouts, receive counts, redrive to a
// dead-letter queue, duplicate delivery, stale receipt handles, message
// limits), a claim table (Store, seen by each worker through a StoreView on
// its own clock, behind a FaultyStore: errors before the write, answers
// lost after it, throttling, latency, outages, and renewal blips: a
// holder's renewals alone failing for about a lease while SQS still
// extends the message, so the lease runs out on the worker's clock;
// transactional completion of ledger Writes), and a payment Provider that
// honours idempotency keys and counts the money moved per payment (the
// oracle). The payment workload returns a typed receipt
// (worker.ValueHandler) whose fee rate the seed may make a NaN the codec
// refuses; it is keyed by payment id, by message id (the seed may then
// publish through SNS, which delivers some publications twice, each copy
// a second SQS message in the same envelope), or by an order number above
// 2^53 through a key expression (worker.KeyFromJMESPath), where
// neighbouring orders share a float64. Several real
// sqsworker.Worker instances consume the queue, or real sqsworker.Lambda
// functions (Deploy) that a simulated event source mapping invokes with
// batches of up to ten records and a deadline, deleting what they did not
// report as failed, and killing an invocation at its deadline with its
// execution environment; the seed crashes them at any
// instant (their clients then refuse every call), stalls them past their
// lease, drains them (a handler that outlasts the shutdown timeout runs
// on in the process after Run returned, as in a library user's process)
// and restarts them, skews their clocks (within the lease
// margin, or one worker's beyond its ClockSkewMax: SQS's answers carry a
// Date on the simulated clock, which the worker's own check reads through
// the SDK's middleware, and that worker must claim nothing), and an
// operator redrives the dead-letter queue after a long outage.
//
// # Kafka
//
// RunKafka and SimulateKafka run the Kafka world: two or three real
// kafkaworker.Worker members of one consumer group (cooperative-sticky, as
// kgo does by default) on a kfake cluster over kfake's VirtualNetwork, in
// the bubble, claiming in the same simulated claim table and charging the
// same Provider, the oracle. The seed chooses (KafkaFaults) member crashes
// (the member's connections severed, its new dials, store calls and
// effects refused, as a crashed SQS worker's clients are; it restarts
// later), a member joining part-way, a member cut off the brokers past its
// session timeout and let back (its partitions lost while its handlers and
// their claims run on), OffsetCommit requests refused or applied with the
// answer lost (kfake's Fault), records produced twice at a new offset,
// poison, store errors and slow or ambiguous charges. After every run:
// every valid payment charged and its ledger entry applied exactly once,
// poison in the dead-letter topic with its reason and no valid payment
// there, and the group's committed offsets equal to the partitions' end
// offsets; while it runs: no partition's committed offset goes back, and
// no member commits a partition in a generation where another member owns
// it (a commit sent after its revoke callback returned), beside the claim
// checks above. kfake's classic coordinator can wedge for good when a
// group's leader dies between JoinGroup and SyncGroup or every member dies
// at once: the world crashes or cuts off one member at a time, only while
// the group is stable and another member is in it, and a group left
// unsettled in a rebalance is reported as kfake's (Result.Wedged), not as
// a violation. Its tests build with -tags synctests, which makes kgo's
// and kfake's mutexes block durably; the members' clients retry no
// request inside kgo (a commit waiting out a backoff under the worker's
// commit lock would stop the bubble's clock while a revoke waits for the
// lock). The planted faults of KafkaMutant reach the transport through
// internal/plant.
//
// Every fault decision is a function of the seed and the event's identity
// (message, attempt, operation), not of a shared random stream, so a seed
// names its schedule. Goroutines still interleave as the runtime chooses at
// one virtual instant, so two runs of a seed can differ in detail; the
// invariants must hold in every interleaving.
//
// # Invariants
//
// After every run (see Result.Violations): no payment's money moved twice
// and no ledger entry applied twice; every valid message completed with its
// effect exactly once, every poison message dead-lettered with its reason;
// no valid message dead-lettered when every outage ended within the outage
// cover (checked where only dependency failures spent receives); FIFO
// groups' effects in order; the queue drains within two virtual hours of
// the last fault, and within a minute of a FIFO burst (some FIFO seeds
// queue groups of payments before the workers start, each payment's first
// charge refused, every retry returned through the queue: a message's
// backoff must follow its own failures, not the receives its group spent in
// front of it); a worker whose clock is off beyond its ClockSkewMax
// reports it (claimfirst_clock_skewed). While it runs: no delivery
// acquires a key while another holder's lease, as that holder knows it, is
// live (beyond the lease margin); a worker whose clock is off beyond its
// ClockSkewMax acquires nothing; no write is applied with a token that is
// not the row's; a write the store acknowledged is in the row.
// synctest.Test itself fails a run whose goroutines outlive it.
//
// # Your handler
//
// Run and Simulate take a Config with your worker.Handler, Decoder and
// message bodies; the handler does its side effects through Effect (so that
// a crashed worker's effects stop at its crash) and your Check counts them
// (see the example). Run calls synctest.Test, so it is called from a test.
//
// # What it does not model
//
// SQS: retention expiry, queue-level delay, high-throughput FIFO, fair
// queues, the native move task, in-flight limits, MD5 digests, the 12-hour
// visibility cap counted per receive (it is counted from the first
// receive). A stalled worker's timers keep running (only its calls wait),
// unlike a SIGSTOP. A Lambda function's clock is never off beyond its
// ClockSkewMax (Lambda's clocks are AWS's own): such a function would report
// every record back with a short visibility, each a receive spent, and a
// valid message could reach maxReceiveCount. The event source mapping's
// scaling, batching windows and its own retries are not modelled. The real
// SDK, the HTTP wire and DynamoDB's own behaviour are not here: the
// emulator tests cover them, and where the simulator and the emulator
// disagree on an SQS behaviour, the emulator decides. Kafka: kfake is one
// broker (no replication, acks durability, log truncation, quotas or
// broker failures), the records' retention never expires within a run, a
// crash or a cut comes only while the group is stable, one at a time, and
// no commit is slow on the wire (the worker's commit lock is a plain
// mutex, which synctest cannot see past); the emulator tests run kfake as
// its own process and SIGKILL real worker processes.
package sim
