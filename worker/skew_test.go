package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

// answer is one SQS answer as the clock check sees it: AWS's Date (whole
// seconds) and the call's start and end on this process's clock.
type answer struct {
	date       time.Time
	start, end time.Time
}

// answers returns n answers from a server whose clock is offset from ours,
// each taking latency, one every 700ms from base.
func answers(base time.Time, offset, latency time.Duration, n int) []answer {
	var out []answer
	for i := range n {
		start := base.Add(time.Duration(i) * 700 * time.Millisecond)
		server := start.Add(latency / 2).Add(offset)
		out = append(out, answer{date: server.Truncate(time.Second), start: start, end: start.Add(latency)})
	}
	return out
}

func TestClockSkew(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 4, 12, 0, 0, 300e6, time.UTC)
	ahead := answers(base, -5*time.Second, 20*time.Millisecond, 3)
	cases := []struct {
		name     string
		answers  []answer
		exceeded bool
		offset   time.Duration // the estimate, within tolerance
	}{
		{"agreeing clock, fast answers", answers(base, 0, 5*time.Millisecond, 5), false, 0},
		{"agreeing clock, answers slower than the bound", answers(base, 0, 3*time.Second, 5), false, 0},
		{"agreeing clock, a 20 s long poll", answers(base, 0, 20*time.Second, 1), false, 0},
		{"within the bound", answers(base, 300*time.Millisecond, 5*time.Millisecond, 5), false, 300 * time.Millisecond},
		{"this clock 5 s ahead", ahead, true, -5 * time.Second},
		{"this clock 5 s behind", answers(base, 5*time.Second, 20*time.Millisecond, 3), true, 5 * time.Second},
		{"ahead, then stepped back into agreement", append(ahead, answers(base.Add(3*time.Second), 0, 20*time.Millisecond, 1)...), false, 0},
		{"ahead, seen only through a long poll", answers(base, -5*time.Second, 20*time.Second, 1), false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			c := NewClockCheck(time.Second, time.Now, NewMetrics(nil), slog.New(slog.NewTextHandler(&buf, nil)))
			for _, a := range tc.answers {
				c.Observe(a.date, a.start, a.end)
			}
			exceeded, offset := c.state()
			if exceeded != tc.exceeded {
				t.Fatalf("exceeded = %v (offset %s), want %v", exceeded, offset, tc.exceeded)
			}
			if tc.exceeded && (offset-tc.offset).Abs() > time.Second {
				t.Errorf("offset %s, want about %s", offset, tc.offset)
			}
			if got := strings.Count(buf.String(), "claiming nothing"); tc.exceeded && got != 1 {
				t.Errorf("logged the skew %d times, want once:\n%s", got, buf.String())
			}
			if (c.err() != nil) != tc.exceeded {
				t.Errorf("err() = %v, want an error %v", c.err(), tc.exceeded)
			}
		})
	}
}

// TestProcessClaimsNothingWhileSkewed: a message processed while the clock
// is off AWS's is returned after a short delay, its key never claimed.
func TestProcessClaimsNothingWhileSkewed(t *testing.T) {
	t.Parallel()
	ran := false
	f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) { ran = true; return "ch_1", nil }))
	f.p.skew = NewClockCheck(time.Second, f.clock.Now, f.metrics, slog.New(slog.DiscardHandler))
	now := f.clock.Now()
	f.p.skew.Observe(now.Add(-time.Minute).Truncate(time.Second), now, now.Add(10*time.Millisecond))

	d := f.p.process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 1}, f.lease())
	if d.Action != Retry || d.Delay != skewRetryDelay || ran {
		t.Fatalf("Disposition %v after %s, handler ran %v; want retry after %s without running", d.Action, d.Delay, ran, skewRetryDelay)
	}
	if _, err := f.store.Get(context.Background(), "m1"); !errors.Is(err, claimstore.ErrNotFound) {
		t.Errorf("Get after the skewed delivery: %v, want ErrNotFound (nothing claimed)", err)
	}
	if f.metrics.Count(OutcomeClockSkew) != 1 {
		t.Errorf("outcome %s counted %d times, want 1", OutcomeClockSkew, f.metrics.Count(OutcomeClockSkew))
	}

	// The clock agrees again: the next delivery is processed.
	now = f.clock.Now().Add(time.Second)
	for range skewSamples {
		f.p.skew.Observe(now.Truncate(time.Second), now.Add(-10*time.Millisecond), now.Add(10*time.Millisecond))
	}
	if d := f.p.process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 2}, f.lease()); d.Action != Ack || !ran {
		t.Fatalf("after the clock agreed: Disposition %v, handler ran %v; want ack", d.Action, ran)
	}
}
