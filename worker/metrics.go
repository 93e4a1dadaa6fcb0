package worker

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is what the worker did with a delivery: the label of
// claimfirst_messages_total{outcome=...}, the name of its EMF metric, and
// the "outcome" attribute of the log line that says it.
// Each is counted and logged together (Metrics.record), so a count never
// happens without its line.
type Outcome string

// logKeyOutcome is the log attribute that names a delivery's outcome.
const logKeyOutcome = "outcome"

// The outcomes.
const (
	// OutcomeAcquired counts claims won (the handler then ran) beside the
	// message's final outcome, which is counted too: a sum over every
	// outcome counts an acquired message twice. Leave it out of sums.
	OutcomeAcquired     Outcome = "acquired"      // the claim was won and the handler ran
	OutcomeCompleted    Outcome = "completed"     // the claim was completed and the message acked
	OutcomeDuplicate    Outcome = "duplicate"     // the key was completed already: acked without work
	OutcomeDeferred     Outcome = "deferred"      // the key is held elsewhere: hidden until its lease ends
	OutcomeReleased     Outcome = "released"      // the handler failed retryably: claim released, message retried
	OutcomeLeaseLost    Outcome = "lease_lost"    // the claim was taken over: neither completed nor acked
	OutcomeDeadLettered Outcome = "dead_lettered" // poison or permanent failure: moved to the DLQ
	OutcomePoisonKept   Outcome = "poison_kept"   // poison with no DLQ to move it to: left for SQS's redrive
	OutcomeStoreError   Outcome = "store_error"   // the claim store failed: message retried
	OutcomeSendFailed   Outcome = "send_failed"   // the dead-letter send failed: message left to come back
	OutcomePanic        Outcome = "panic"         // the handler panicked: claim released, never acked
	OutcomeReturned     Outcome = "returned"      // received during shutdown and returned unstarted
	OutcomeKeyReused    Outcome = "key_reused"    // the key's claim has another payload's fingerprint: dead-lettered
	OutcomeSkipped      Outcome = "skipped"       // FIFO: not started behind a message of its group that was not done; returned or reported
	OutcomeClockSkew    Outcome = "clock_skew"    // this clock is off AWS's beyond ClockSkewMax: returned unclaimed, after a short delay
)

// The labels of claimfirst_takeovers_total.
const (
	takeoverExpired  = "expired"
	takeoverReleased = "released"
	takeoverUnknown  = "unknown"
)

var outcomes = []Outcome{
	OutcomeAcquired, OutcomeCompleted, OutcomeDuplicate, OutcomeDeferred, OutcomeReleased,
	OutcomeLeaseLost, OutcomeDeadLettered, OutcomePoisonKept, OutcomeStoreError, OutcomeSendFailed, OutcomePanic, OutcomeReturned,
	OutcomeKeyReused, OutcomeSkipped, OutcomeClockSkew,
}

// Metrics are the worker's Prometheus metrics. A program makes them with
// NewMetrics and hands them to its transport; the methods are for the two
// others who need them. A transport (sqsworker, kafkaworker, rabbitworker,
// or a user's own outside this module) counts what it does itself with
// Record, RecordN, Received, DroppedAttribute, and SQS's DeleteBatch,
// GroupBlocked and Heartbeats, kept here so that one Metrics serves every
// transport in one registry. A test reads counters as numbers with Count,
// Replays, Takeovers and ResultsNotStored (the registry has the same).
// KnownDependencies is for a program whose handler names dependencies.
type Metrics struct {
	messages      *prometheus.CounterVec
	handlerTime   prometheus.Histogram
	inFlight      prometheus.Gauge
	received      prometheus.Counter
	heartbeats    prometheus.Counter
	deleteBatches prometheus.Counter
	retries       *prometheus.CounterVec
	breakerOpen   *prometheus.GaugeVec
	breakerOpens  prometheus.Counter
	fifoBlocked   *prometheus.CounterVec
	clockOffset   prometheus.Gauge
	clockSkewed   prometheus.Gauge
	// resultsNotStored counts claims completed without their result.
	resultsNotStored prometheus.Counter
	replays          *prometheus.CounterVec
	// droppedAttributes counts the worker's attributes left off
	// dead-letter copies for lack of room, by attribute.
	droppedAttributes *prometheus.CounterVec
	// takeovers counts claims taken over from an earlier holder, by what
	// was taken over (takeoverFrom).
	takeovers *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, as in tests that run many workers in one process). Nothing
// registers them with prometheus.DefaultRegisterer unless you pass it here;
// HTTPHandler serves them either way.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimfirst_messages_total",
			Help: "Messages by what the worker did with them. outcome=\"acquired\" (claim won, handler ran) is counted beside the final outcome: leave it out of a sum over outcomes.",
		}, []string{"outcome"}),
		handlerTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "claimfirst_handler_duration_seconds",
			Help:    "Time handlers spent on messages whose claim was acquired.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimfirst_in_flight",
			Help: "Handlers running.",
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimfirst_received_total",
			Help: "Messages received from SQS.",
		}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimfirst_heartbeats_total",
			Help: "Lease and visibility extensions.",
		}),
		deleteBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimfirst_delete_batches_total",
			Help: "DeleteMessageBatch requests sent.",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimfirst_retries_total",
			Help: "Retries of a failed step (acquire, handle, complete) while the worker held the message, by dependency (\"handler\" for a handler's own failure).",
		}, []string{"dependency"}),
		breakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "claimfirst_breaker_open",
			Help: "1 while the breaker is open because this dependency keeps failing: pollers receive one probe message at a time.",
		}, []string{"dependency"}),
		breakerOpens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimfirst_breaker_opens_total",
			Help: "Times the breaker opened.",
		}),
		fifoBlocked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimfirst_fifo_groups_blocked_total",
			Help: "FIFO message groups stopped by a message that was not done, by cause (held_elsewhere: its key is held by another consumer, and the group waits for that holder; failed; lease_lost; dead_letter_failed; stopping). The group's later messages of the delivery were returned or reported unstarted.",
		}, []string{"cause"}),
		clockOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimfirst_clock_offset_seconds",
			Help: "AWS's clock minus this process's, estimated from the Date of SQS's answers (negative: this clock is ahead).",
		}),
		clockSkewed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimfirst_clock_skewed",
			Help: "1 while this clock is off AWS's by more than ClockSkewMax: the worker claims nothing and /readyz answers 503.",
		}),
		resultsNotStored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimfirst_results_not_stored_total",
			Help: "Claims completed without their handler's result because it was too large to store (claimstore.MaxResultBytes): the work is done once, and duplicates are acked without the result.",
		}),
		droppedAttributes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimfirst_dead_letter_attributes_dropped_total",
			Help: "The worker's attributes left off dead-letter copies because the message's own filled SQS's limits, by attribute: without OriginalMessageId a redrive changes a message-id key (worker redrive leaves such copies unless -move-unkeyed).",
		}, []string{"attribute"}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimfirst_takeovers_total",
			Help: "Claims a delivery took over from an earlier holder, by what it took over: expired (the holder's lease ended: it crashed, stalled or was cut off), released (the holder gave up after a failure), or unknown (the store does not say).",
		}, []string{"from"}),
	}
	for _, from := range []string{takeoverExpired, takeoverReleased, takeoverUnknown} {
		m.takeovers.WithLabelValues(from)
	}
	m.replays = newReplays()
	for _, o := range outcomes {
		m.messages.WithLabelValues(string(o)) // export zeros so dashboards see every outcome
	}
	// Zeros for the dependencies the worker knows, so that dashboards and
	// alarms see them before the first failure.
	for _, d := range []string{"sqs", storeDependency} {
		m.retries.WithLabelValues(d)
		m.breakerOpen.WithLabelValues(d)
	}
	m.retries.WithLabelValues(handlerDependency)
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

// collectors returns every metric of m, for registering.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.messages, m.handlerTime, m.inFlight, m.received, m.heartbeats, m.deleteBatches,
		m.retries, m.breakerOpen, m.breakerOpens, m.fifoBlocked, m.clockOffset, m.clockSkewed, m.resultsNotStored, m.replays,
		m.droppedAttributes, m.takeovers}
}

// KnownDependencies exports claimfirst_retries_total and
// claimfirst_breaker_open at zero for the dependencies a handler names with
// Dependency, so that dashboards and alarms see them before the first
// failure. The worker's own (sqs, claimstore, handler) are exported already.
func (m *Metrics) KnownDependencies(names ...string) {
	for _, d := range names {
		m.retries.WithLabelValues(d)
		m.breakerOpen.WithLabelValues(d)
	}
}

// record counts one delivery's outcome o and writes the line that says it,
// at level, with o as its logKeyOutcome attribute.
func (m *Metrics) record(log *slog.Logger, level slog.Level, o Outcome, msg string, attrs ...any) {
	m.recordN(log, level, o, 1, msg, attrs...)
}

// recordN is record for n deliveries with one line (a FIFO group's later
// messages), which says how many.
func (m *Metrics) recordN(log *slog.Logger, level slog.Level, o Outcome, n int, msg string, attrs ...any) {
	m.messages.WithLabelValues(string(o)).Add(float64(n))
	head := []any{slog.String(logKeyOutcome, string(o))}
	if n != 1 {
		head = append(head, slog.Int("messages", n))
	}
	log.Log(context.Background(), level, msg, append(head, attrs...)...)
}

// ResultsNotStored returns how many claims were completed without their
// result because it was too large to store.
func (m *Metrics) ResultsNotStored() int64 { return int64(counterValue(m.resultsNotStored)) }

// Takeovers returns how many claims were taken over from an earlier
// holder, by what was taken over: "expired", "released" or "unknown".
func (m *Metrics) Takeovers(from string) int64 {
	c, err := m.takeovers.GetMetricWithLabelValues(from)
	if err != nil {
		return 0
	}
	return int64(counterValue(c))
}

// Count returns the number of messages counted with outcome, for tests and
// the benchmark.
func (m *Metrics) Count(o Outcome) int64 {
	c, err := m.messages.GetMetricWithLabelValues(string(o))
	if err != nil {
		return 0
	}
	return int64(counterValue(c))
}
