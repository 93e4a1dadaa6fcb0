package provider

import "sync/atomic"

// ClientStats counts a Client's HTTP attempts since it was made.
type ClientStats struct {
	// Attempts counts HTTP requests sent (or tried).
	Attempts int64
	// Retries counts attempts that failed with an unknown outcome and were
	// tried again after a backoff.
	Retries int64
	// Exhausted counts calls that gave up with MaxAttempts failed attempts.
	Exhausted int64
}

type clientStats struct {
	attempts, retries, exhausted atomic.Int64
}

// Stats returns the client's counters, for metrics.
func (c *Client) Stats() ClientStats {
	return ClientStats{Attempts: c.stats.attempts.Load(), Retries: c.stats.retries.Load(), Exhausted: c.stats.exhausted.Load()}
}
