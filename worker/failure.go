package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DependencyError is a failure of something the message depends on, not of
// the message: a provider that is down or refuses the credentials, a claim
// store or queue that errs or throttles. The worker never dead-letters a
// message for it: it holds the message and retries, and when such failures
// persist across messages its breaker stops receiving until the dependency
// recovers.
type DependencyError struct {
	// Dependency names what failed, for metrics and logs: "provider",
	// "dynamodb", "sqs", or a handler's own name.
	Dependency string
	// Err is the failure.
	Err error
}

// Error implements error.
func (e *DependencyError) Error() string { return e.Dependency + " unavailable: " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *DependencyError) Unwrap() error { return e.Err }

// Dependency returns an error saying that dependency failed with err.
func Dependency(dependency string, err error) error {
	return &DependencyError{Dependency: dependency, Err: err}
}

// RetryAfterError is a transient failure that is worth retrying only after
// a while (a provider that says the key is in flight there): the message is
// retried with the same key no sooner than After.
type RetryAfterError struct {
	// After is the least delay before the retry.
	After time.Duration
	// Err is the failure.
	Err error
}

// Error implements error.
func (e *RetryAfterError) Error() string { return fmt.Sprintf("retry after %s: %v", e.After, e.Err) }

// Unwrap returns the underlying error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns an error that retries the message no sooner than d.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{After: d, Err: err} }

// dependencyOf returns the dependency an error blames, or "".
func dependencyOf(err error) string {
	var de *DependencyError
	if errors.As(err, &de) {
		return de.Dependency
	}
	return ""
}

// retryAfterOf returns the least delay an error asks for, or 0.
func retryAfterOf(err error) time.Duration {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return ra.After
	}
	return 0
}

// schedule is the delay before a failed delivery comes back, by attempt,
// sized so that the attempts a message has before its broker dead-letters
// it by itself span at least an outage of cover: delays grow geometrically
// from min, each at most max.
type schedule struct {
	delays []time.Duration // delays[r-1] follows the r-th attempt; the last repeats
	covers time.Duration   // what the attempts left after the first span in all
	limit  time.Duration   // the broker's longest delay (EngineOptions.MaxDelay); 0: none
}

// newSchedule sizes the delays for a broker that dead-letters a message
// after maxReceive attempts (0: never).
func newSchedule(minD, maxD, cover time.Duration, maxReceive int) schedule {
	if maxReceive <= 0 {
		// No dead-letter queue: nothing is lost by waiting, so back off by
		// doubling up to max.
		var ds []time.Duration
		for d := minD; ; d *= 2 {
			ds = append(ds, min(d, maxD))
			if d >= maxD {
				break
			}
		}
		return schedule{delays: ds, covers: time.Duration(math.MaxInt64)}
	}
	n := maxReceive - 1 // the failed receives that are followed by another
	switch {
	case n == 0:
		return schedule{delays: []time.Duration{minD}}
	case n == 1:
		d := min(max(cover, minD), maxD)
		return schedule{delays: []time.Duration{d}, covers: d}
	case time.Duration(n)*maxD <= cover:
		// Even the longest delays cannot cover it: use them all.
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = maxD
		}
		return schedule{delays: ds, covers: time.Duration(n) * maxD}
	}
	sum := func(k float64) (time.Duration, []time.Duration) {
		ds := make([]time.Duration, n)
		var total time.Duration
		d := float64(minD)
		for i := range ds {
			d = min(d, float64(maxD))
			ds[i] = time.Duration(d)
			total += ds[i]
			d *= k
		}
		return total, ds
	}
	// The smallest growth factor whose delays add up to cover.
	lo, hi := 1.0, 1.0
	for {
		total, _ := sum(hi)
		if total >= cover || hi > 1e9 {
			break
		}
		lo, hi = hi, hi*2
	}
	for range 60 {
		mid := (lo + hi) / 2
		if total, _ := sum(mid); total >= cover {
			hi = mid
		} else {
			lo = mid
		}
	}
	total, ds := sum(hi)
	return schedule{delays: ds, covers: total}
}

// delay returns the delay after the attempt-th delivery failed, with
// jitter that only lengthens it (up to a quarter), so the schedule still
// covers what it was sized for, within the broker's limit.
func (s schedule) delay(attempt int) time.Duration {
	if len(s.delays) == 0 {
		return 0
	}
	d := s.delays[min(max(attempt, 1), len(s.delays))-1]
	if q := d / 4; q > 0 {
		d += rand.N(q + 1)
	}
	if s.limit > 0 {
		d = min(d, s.limit)
	}
	return d
}

// A nil *breaker is none: it never opens (Lambda: the event source mapping
// decides what is received).
//
// breaker stops receiving when dependency failures persist across
// messages: after threshold failures in a row with no success between them
// it opens; while it is open the pollers receive one probe message at a
// time; the first success closes it.
type breaker struct {
	threshold int
	log       *slog.Logger
	gauge     *prometheus.GaugeVec
	opened    prometheus.Counter
	now       func() time.Time

	mu         sync.Mutex
	failures   int
	open       bool
	dependency string
	reason     string
	since      time.Time
}

func newBreaker(threshold int, m *Metrics, log *slog.Logger, now func() time.Time) *breaker {
	return &breaker{threshold: threshold, log: log, gauge: m.breakerOpen, opened: m.breakerOpens, now: now}
}

// failure records a dependency failure.
func (b *breaker) failure(dependency string, err error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	if b.open && dependency != b.dependency {
		// Still open, now for another dependency: the gauge follows, so
		// that closing it leaves no label at 1.
		b.gauge.WithLabelValues(b.dependency).Set(0)
		b.gauge.WithLabelValues(dependency).Set(1)
	}
	b.dependency, b.reason = dependency, err.Error()
	if b.open || b.failures < b.threshold {
		return
	}
	b.open, b.since = true, b.now()
	b.gauge.WithLabelValues(dependency).Set(1)
	b.opened.Inc()
	b.log.Error("breaker open: a dependency keeps failing; receiving one probe message at a time until it recovers",
		slog.String("dependency", dependency), slog.Int("failures", b.failures), slog.String("error", b.reason))
}

// success records that a message got past its dependencies.
func (b *breaker) success() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeLocked()
}

// closeLocked resets the failure count and closes the breaker; b.mu is held.
func (b *breaker) closeLocked() {
	b.failures = 0
	if !b.open {
		return
	}
	b.open = false
	b.gauge.WithLabelValues(b.dependency).Set(0)
	b.log.Info("breaker closed: the dependency recovered; receiving again",
		slog.String("dependency", b.dependency), slog.String("open_for", b.now().Sub(b.since).String()))
}

// recovered records that the dependencies deps answered (a receive proves
// SQS, an acquisition the claim store): it counts as a success only if the
// failures being counted, or the open breaker, are those of one of deps. A
// probe that turns out a duplicate thus closes a breaker open for the store
// or SQS, but not one open for the provider.
func (b *breaker) recovered(deps ...string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures > 0 && slices.Contains(deps, b.dependency) {
		b.closeLocked()
	}
}

// state reports whether the breaker is open, and if so which dependency
// failed and how.
func (b *breaker) state() (open bool, dependency, reason string) {
	if b == nil {
		return false, "", ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open, b.dependency, b.reason
}
