package workertest

import (
	"context"
	"errors"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/worker"
)

// Harness is one transport's side of a scenario: a fresh queue (topic,
// ...) on its broker, used by this scenario alone, with a dead-letter
// destination; a claim store of its own; consumers that run the worker
// protocol on the queue; and the broker-side faults. Its methods are called
// from the scenario's goroutine and, for the readers, from polling loops;
// they must be safe for concurrent use. Errors fail the scenario.
type Harness interface {
	// Timing says how long the transport's waits are.
	Timing() Timing
	// Absent returns why the transport cannot do c, or "" when it can.
	Absent(c Capability) string
	// Store is the scenario's claim store, as the suite reads it. The
	// consumers get it through the Protocol the suite passes to Start,
	// wrapped for faults.
	Store() claimstore.Store
	// Send publishes one message, as a producer would: not through any
	// consumer's connection, so a broker outage between consumer and broker
	// does not stop it. Sending the same body twice is a producer's retry.
	Send(ctx context.Context, m Message) error
	// Start starts a consumer (one process, or one execution environment)
	// that receives from the queue and runs the worker protocol with p: its
	// Store, Handler, Decoder and OnReplay are the suite's. The harness sets
	// the timing fields it needs (retry backoffs, outage cover, ...) and
	// leaves the suite's. The consumer runs until stopped or crashed; the
	// harness ends what is left at the end of the scenario.
	Start(ctx context.Context, p worker.Protocol) (Consumer, error)
	// Acked returns the body of every message the broker recorded as acked
	// (settled done), once per ack, in no particular order.
	Acked(ctx context.Context) ([]string, error)
	// DeadLetters returns what was dead-lettered so far.
	DeadLetters(ctx context.Context) ([]DeadLetter, error)
	// Unsettled returns how many messages are neither acked nor
	// dead-lettered: waiting, in flight, or returned for later.
	Unsettled(ctx context.Context) (int, error)
	// Redeliver makes the broker deliver again, now, every message it
	// delivered that was not settled (SQS: visibility 0 for the receipts
	// it handed out; Kafka: a rebalance; RabbitMQ: closing the channel).
	Redeliver(ctx context.Context) error
	// LoseAcks, on, makes every ack a consumer sends get lost before the
	// broker applies it, the consumer left unaware or told it failed; off
	// ends that. It returns how many acks were lost so far.
	LoseAcks(on bool) (lost int, err error)
	// BrokerOutage, on, makes the broker unreachable for consumers (every
	// request fails, none is applied), off ends it. Send still works.
	BrokerOutage(on bool) error
}

// Consumer is one consumer a Harness started.
type Consumer interface {
	// Stop shuts the consumer down as its process would on a termination
	// signal, and returns when the transport's shutdown returns (within
	// Timing.Shutdown), with its error. The process lives on: a handler the
	// shutdown abandoned keeps running.
	Stop(ctx context.Context) error
	// Crash kills the consumer's process at once: from now on nothing it
	// does reaches the broker or the store, and Dead reports true.
	Crash()
	// CrashAtAck arms a crash at the consumer's next ack: the process dies
	// after deciding to ack and before the broker hears it.
	CrashAtAck()
	// Dead reports whether the process is dead: crashed, or (Lambda) its
	// execution environment killed at the invocation's deadline. A dead
	// process's handlers have no effect and do not count as running.
	Dead() bool
}

// Message is one message to send.
type Message struct {
	// Body is the message body.
	Body string
	// Group is the ordering group (an SQS MessageGroupId, a Kafka
	// partition key), or "" on a queue without order.
	Group string
}

// DeadLetter is a message the transport dead-lettered.
type DeadLetter struct {
	// Body is the original body.
	Body string
	// Reason is the reason the transport attached (worker.ReasonAttribute
	// on SQS, a header on Kafka): "" when it attached none.
	Reason string
}

// Timing is how long a transport's waits are; the suite's waits and
// handler durations are multiples of them. Short is better: a few seconds.
type Timing struct {
	// Redelivery is the longest a delivered message whose consumer went
	// silent waits before the broker delivers it again (SQS: the visibility
	// timeout).
	Redelivery time.Duration
	// Lease is how long a claim's lease lasts from its acquisition, before
	// it is renewed (SQS: the visibility timeout less the margin; Lambda:
	// the function timeout less the margin).
	Lease time.Duration
	// Shutdown is the consumer's shutdown timeout: Stop returns within it.
	Shutdown time.Duration
	// MaxRun is the longest a handler can run before the transport ends
	// it whatever it does (Lambda: the lease, which ends before the
	// invocation's deadline). Zero: a handler may outlive any number of
	// leases, its claim renewed while it runs.
	MaxRun time.Duration
}

// Capability is a fault or promise a scenario needs from the transport.
type Capability string

// The capabilities.
const (
	// CanCrashAtAck is Consumer.CrashAtAck.
	CanCrashAtAck Capability = "crash_at_ack"
	// CanRedeliver is Harness.Redeliver.
	CanRedeliver Capability = "redeliver"
	// CanLoseAcks is Harness.LoseAcks.
	CanLoseAcks Capability = "lose_acks"
	// CanBrokerOutage is Harness.BrokerOutage.
	CanBrokerOutage Capability = "broker_outage"
	// Ordered is a queue whose messages of one group are delivered in the
	// order sent, one at a time (Options.Ordered).
	Ordered Capability = "ordered"
	// CompletesAfterRenewalBlip is the contract RenewalBlip checks: a claim
	// whose renewals failed with store errors (not a store-confirmed loss)
	// is still completed by a handler that succeeds. A transport that
	// declares it absent names the break and where it is being fixed.
	CompletesAfterRenewalBlip Capability = "completes_after_renewal_blip"
	// NoOverlapAfterShutdown is the contract ShutdownOverrun checks: a
	// handler a shutdown abandons while its process lives on keeps its claim
	// renewed until it returns, so the key's next run never overlaps it. A
	// transport that declares it absent names the break and where it is
	// being fixed.
	NoOverlapAfterShutdown Capability = "no_overlap_after_shutdown"
)

// Options choose the queue a harness makes.
type Options struct {
	// Ordered asks for a queue that keeps the order of each group (SQS:
	// FIFO). Defaults to false.
	Ordered bool
}

// NewHarness makes the harness of one scenario, with its own queue and
// store; it registers its cleanup with t.
type NewHarness func(t T, o Options) Harness

// ErrUnsupported is what a harness method returns for a fault its
// transport cannot make; Absent must then name the capability.
var ErrUnsupported = errors.New("workertest: not supported by this transport")
