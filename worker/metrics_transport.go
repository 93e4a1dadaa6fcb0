package worker

import "log/slog"

// Record counts outcome o and logs msg with it at level, as the protocol
// does for its own outcomes: for a transport outside this package whose
// settling has outcomes of its own (a dead-letter write, a failed one).
func (m *Metrics) Record(log *slog.Logger, level slog.Level, o Outcome, msg string, attrs ...any) {
	m.record(log, level, o, msg, attrs...)
}

// Received counts n deliveries received from the broker
// (claimfirst_received_total).
func (m *Metrics) Received(n int) { m.received.Add(float64(n)) }
