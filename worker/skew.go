package worker

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Clock skew.
//
// The protocol compares instants written by different processes
// (lease_until, expires_at, first_at), so it assumes the workers' clocks
// agree within the lease's safety margin. The worker checks that: every SQS
// answer carries AWS's clock in its Date header (which the SDK reads for
// signing, awsmiddleware.GetServerTime), and the call's start and end on the
// worker's own clock (Protocol.Now) bound where that instant fell. The
// offset (AWS's clock minus this one) lies in [Date - end, Date + 1s - start]
// (Date has whole seconds); the intersection of the last few such intervals
// is the estimate. Neither the answer's latency nor Date's resolution can
// make a correct clock look skewed: only an interval lying wholly beyond
// ClockSkewMax counts. While it does, the worker claims nothing: pollers
// stop receiving (and re-measure about every second), a message already
// received is returned after a short delay without being claimed, /readyz
// answers 503 naming the clock skew, one line is logged, and
// claimfirst_clock_skewed is 1. It resumes by itself when the clock agrees
// again. Messages wait in the queue meanwhile: nothing is lost or
// dead-lettered.

// skewSamples is how many answers the offset estimate intersects.
const skewSamples = 5

// skewRetryDelay is how long a message received while the clock is skewed
// stays invisible before it is offered again.
const skewRetryDelay = 10 * time.Second

// span is an interval of possible offsets.
type span struct{ lo, hi time.Duration }

func (s span) intersect(o span) (span, bool) {
	r := span{lo: max(s.lo, o.lo), hi: min(s.hi, o.hi)}
	return r, r.lo <= r.hi
}

// ClockCheck estimates this process's clock's offset from its broker's,
// from the broker's answers a transport observes (Observe; the SQS
// transports: every answer's Date), and says whether it is too far off to
// claim (EngineOptions.Clock). A nil *ClockCheck measures nothing and
// never is.
type ClockCheck struct {
	max     time.Duration
	now     func() time.Time
	log     *slog.Logger
	offsetG prometheus.Gauge
	skewedG prometheus.Gauge

	mu       sync.Mutex
	samples  []span // newest last
	est      span
	exceeded bool
	at       time.Time // when the last sample was taken, by now
}

// NewClockCheck returns a check with bound maxSkew; negative: none (nil).
func NewClockCheck(maxSkew time.Duration, now func() time.Time, m *Metrics, log *slog.Logger) *ClockCheck {
	if maxSkew < 0 {
		return nil
	}
	return &ClockCheck{max: maxSkew, now: now, log: log, offsetG: m.clockOffset, skewedG: m.clockSkewed}
}

// Observe records an answer whose Date was server, for a call that started
// at start and was answered at end by this process's clock.
func (c *ClockCheck) Observe(server, start, end time.Time) {
	if c == nil || server.IsZero() || end.Before(start) {
		return
	}
	s := span{lo: server.Sub(end), hi: server.Add(time.Second).Sub(start)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = end
	if len(c.samples) > 0 {
		if _, ok := s.intersect(c.samples[len(c.samples)-1]); !ok {
			c.samples = c.samples[:0] // the clock was stepped: start afresh
		}
	}
	c.samples = append(c.samples, s)
	if len(c.samples) > skewSamples {
		c.samples = c.samples[len(c.samples)-skewSamples:]
	}
	est := s
	for i := len(c.samples) - 2; i >= 0; i-- {
		x, ok := est.intersect(c.samples[i])
		if !ok {
			break
		}
		est = x
	}
	c.est = est
	offset := (est.lo + est.hi) / 2
	c.offsetG.Set(offset.Seconds())
	exceeded := est.lo > c.max || est.hi < -c.max
	if exceeded == c.exceeded {
		return
	}
	c.exceeded = exceeded
	if exceeded {
		c.skewedG.Set(1)
		c.log.Error("clock skew: this clock is off AWS's by more than the bound; claiming nothing until it agrees (messages wait in the queue)",
			slog.String("offset", offset.String()), slog.String("offset_min", est.lo.String()), slog.String("offset_max", est.hi.String()),
			slog.String("clock_skew_max", c.max.String()))
		return
	}
	c.skewedG.Set(0)
	c.log.Info("clock skew: this clock agrees with AWS's again; claiming again",
		slog.String("offset", offset.String()), slog.String("clock_skew_max", c.max.String()))
}

// state reports whether the offset is beyond the bound, and the estimate.
func (c *ClockCheck) state() (exceeded bool, offset time.Duration) {
	if c == nil {
		return false, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exceeded, (c.est.lo + c.est.hi) / 2
}

// err returns an error naming the skew while it is beyond the bound.
func (c *ClockCheck) err() error {
	if exceeded, offset := c.state(); exceeded {
		return fmt.Errorf("clock skew: this clock is %s off AWS's, more than ClockSkewMax %s; claiming nothing until it agrees",
			(-offset).Round(time.Millisecond), c.max)
	}
	return nil
}

// stale reports whether no answer was measured within d.
func (c *ClockCheck) stale(d time.Duration) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at.IsZero() || c.now().Sub(c.at) > d
}
