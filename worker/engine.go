package worker

import (
	"log/slog"
	"slices"
	"time"
)

// What a transport reads from the protocol, and tells it, besides
// Engine.Process: the breaker, the retry schedule's reach, whether spans
// are made, the clock check, and the counts of what the transport did.

// Breaker reports whether the breaker is open (EngineOptions.
// BreakerThreshold dependency failures in a row) and for which dependency;
// a transport that receives in a loop then receives one probe delivery at
// a time (Hold.Probe). Never open without a breaker.
func (e *Engine) Breaker() (open bool, dependency string) {
	open, dependency, _ = e.breaker.state()
	return open, dependency
}

// DependencyFailed counts a failure of the transport's own dependency (its
// broker: "sqs") toward the breaker, as the protocol counts the store's
// and the handler's dependencies'.
func (e *Engine) DependencyFailed(dependency string, err error) {
	e.breaker.failure(dependency, err)
}

// DependencyRecovered records that dependency answered (a receive proves
// the broker): it closes a breaker open, or ends failures counted, for
// that dependency only.
func (e *Engine) DependencyRecovered(dependency string) {
	e.breaker.recovered(dependency)
}

// RetryCovers is how long the delays of Retry span over the attempts the
// broker makes before it dead-letters a message by itself
// (EngineOptions.MaxAttempts): a transport warns when it is less than
// Protocol.OutageCover.
func (e *Engine) RetryCovers() time.Duration { return e.schedule.covers }

// Traces reports whether the engine makes spans (Protocol.TracerProvider
// is set): a transport that reads a parent from its broker's own trace
// header (SQS's AWSTraceHeader) puts it in Process's context
// (trace.ContextWithRemoteSpanContext) only then; a traceparent message
// attribute still comes first.
func (e *Engine) Traces() bool { return e.tracer != nil }

// Skewed reports whether the last measurements put this clock off the
// broker's beyond the bound; false for a nil ClockCheck.
func (c *ClockCheck) Skewed() bool {
	exceeded, _ := c.state()
	return exceeded
}

// Err returns an error naming the offset while this clock is off the
// broker's beyond the bound, nil otherwise (and for a nil ClockCheck).
func (c *ClockCheck) Err() error { return c.err() }

// Stale reports whether no answer was measured within d: the transport
// then makes a short call to measure again. False for a nil ClockCheck.
func (c *ClockCheck) Stale(d time.Duration) bool { return c.stale(d) }

// Outcomes returns every Outcome, in the order metrics list them, for a
// transport that exports them its own way (sqsworker's EMF lines).
func Outcomes() []Outcome { return slices.Clone(outcomes) }

// Record counts one message with outcome o and logs msg at level with
// the outcome and attrs: a count and its log line always go together.
// For what a transport does (OutcomeDeadLettered, OutcomeReturned, ...).
func (m *Metrics) Record(log *slog.Logger, level slog.Level, o Outcome, msg string, attrs ...any) {
	m.record(log, level, o, msg, attrs...)
}

// RecordN is Record for n messages at once (one log line).
func (m *Metrics) RecordN(log *slog.Logger, level slog.Level, o Outcome, n int, msg string, attrs ...any) {
	m.recordN(log, level, o, n, msg, attrs...)
}

// Received counts n messages received from the broker.
func (m *Metrics) Received(n int) { m.received.Add(float64(n)) }

// DeleteBatch counts one batched ack request sent (SQS's DeleteMessageBatch).
func (m *Metrics) DeleteBatch() { m.deleteBatches.Inc() }

// DroppedAttribute counts a dead letter sent without attribute (one of
// the transport's own), for want of room.
func (m *Metrics) DroppedAttribute(attribute string) {
	m.droppedAttributes.WithLabelValues(attribute).Inc()
}

// GroupBlocked counts an ordered group (an SQS FIFO message group)
// stopped by a delivery that was not done, by cause.
func (m *Metrics) GroupBlocked(cause string) { m.fifoBlocked.WithLabelValues(cause).Inc() }

// Heartbeats counts n extensions of a hold the transport made itself (an
// SQS FIFO group's waiting messages), beside the protocol's own.
func (m *Metrics) Heartbeats(n int) { m.heartbeats.Add(float64(n)) }
