package demo

import "time"

// WithAttemptTimeout returns o with experiment 4's per-attempt client
// timeout set to d: tests on a loaded machine use a longer one, so that no
// ordinary charge times out and the counts stay exact.
func WithAttemptTimeout(o Options, d time.Duration) Options {
	o.attemptTimeout = d
	return o
}

// WithProgressEvery returns o with progress lines from the start of Run and
// then every d, so that a test sees many of them.
func WithProgressEvery(o Options, d time.Duration) Options {
	o.progressAfter, o.progressEvery = time.Nanosecond, d
	return o
}
