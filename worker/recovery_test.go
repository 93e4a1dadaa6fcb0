package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

// TestBreakerGaugeFollowsDependency: a breaker open for one dependency that
// then sees another fail reports the latest, and closing it leaves no gauge
// at 1.
func TestBreakerGaugeFollowsDependency(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	b := newBreaker(2, m, slog.New(slog.DiscardHandler), time.Now)
	b.failure("provider", errors.New("503"))
	b.failure("provider", errors.New("503"))
	b.failure(storeDependency, errors.New("500"))
	if open, dep, _ := b.state(); !open || dep != storeDependency {
		t.Fatalf("state = %v %q, want open for %s", open, dep, storeDependency)
	}
	if p, s := gaugeValue(m.breakerOpen.WithLabelValues("provider")), gaugeValue(m.breakerOpen.WithLabelValues(storeDependency)); p != 0 || s != 1 {
		t.Errorf("gauge provider %v, claimstore %v; want 0 and 1", p, s)
	}
	b.success()
	for _, dep := range []string{"provider", storeDependency} {
		if g := gaugeValue(m.breakerOpen.WithLabelValues(dep)); g != 0 {
			t.Errorf("gauge %s = %v after the breaker closed, want 0", dep, g)
		}
	}
}

// TestProcessProbeProvesTheStore: a message that gets past the claim store
// (here a duplicate, acked without its handler) closes a breaker open for
// the store; it says nothing about the provider, so it leaves one open for
// the provider alone.
func TestProcessProbeProvesTheStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dependency string
		wantOpen   bool
	}{
		{storeDependency, false},
		{"provider", true},
	} {
		t.Run(tc.dependency, func(t *testing.T) {
			t.Parallel()
			f := newFixture(ok("ch_1"))
			ctx := context.Background()
			if d := f.p.process(ctx, &Message{ID: "a", Attempt: 1}, f.lease()); d.Action != Ack {
				t.Fatalf("first: %v", d.Action)
			}
			f.p.breaker = newBreaker(1, f.metrics, slog.New(slog.DiscardHandler), time.Now)
			f.p.breaker.failure(tc.dependency, errors.New("down"))
			if d := f.p.process(ctx, &Message{ID: "a", Attempt: 2}, Hold{Until: f.clock.Now().Add(30e9), Probe: true}); d.Action != Ack {
				t.Fatalf("duplicate: %v, want ack", d.Action)
			}
			if open, _, _ := f.p.breaker.state(); open != tc.wantOpen {
				t.Errorf("breaker open = %v after a duplicate, want %v", open, tc.wantOpen)
			}
		})
	}
}

// TestBreakerRecovered: a dependency's answer closes the breaker only when
// that dependency is the one failing.
func TestBreakerRecovered(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	b := newBreaker(2, m, slog.New(slog.DiscardHandler), time.Now)
	b.recovered("sqs") // nothing failing: nothing to do
	b.failure("sqs", errors.New("500"))
	b.failure("sqs", errors.New("500"))
	b.recovered(storeDependency, "provider")
	if open, _, _ := b.state(); !open {
		t.Fatal("the store or provider answering closed a breaker open for SQS")
	}
	b.recovered("sqs")
	if open, _, _ := b.state(); open || gaugeValue(m.breakerOpen.WithLabelValues("sqs")) != 0 {
		t.Error("a receive did not close a breaker open for SQS")
	}
	b.failure("provider", errors.New("503"))
	b.recovered("sqs") // not the failing dependency: the count goes on
	b.failure("provider", errors.New("503"))
	if open, _, _ := b.state(); !open {
		t.Error("an SQS answer reset the count of provider failures")
	}
}

// lostAcquireAnswer applies the first Acquire and loses its answer, as a
// connection cut after DynamoDB applied the write.
type lostAcquireAnswer struct {
	claimstore.Store
	calls int
}

func (s *lostAcquireAnswer) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	acq, err := s.Store.Acquire(ctx, p)
	if s.calls++; s.calls == 1 && err == nil {
		return claimstore.Acquisition{}, errors.New("connection reset by peer")
	}
	return acq, err
}

// TestProcessAcquireRetryFindsItsOwnClaim: an acquisition retried in process
// after its answer was lost finds its own claim (the same acquisition id),
// not a claim "held elsewhere" that defers the message behind itself.
func TestProcessAcquireRetryFindsItsOwnClaim(t *testing.T) {
	t.Parallel()
	f := newFixture(ok("ch_1"))
	// Real time: holding a message waits on real timers.
	store := &lostAcquireAnswer{Store: memory.New(memory.Config{})}
	f.p.store, f.p.now, f.p.minBackoff = store, time.Now, time.Millisecond
	now := time.Now()
	l := Hold{
		Until: now.Add(30 * time.Second), Interval: 10 * time.Second, RenewAt: now.Add(10 * time.Second),
		Extend:    func(context.Context) (time.Time, error) { return time.Now().Add(30 * time.Second), nil },
		Stop:      make(chan struct{}),
		HoldUntil: now.Add(time.Minute),
	}
	d := f.p.process(context.Background(), &Message{ID: "a", Attempt: 1}, l)
	if d.Action != Ack || f.metrics.Count(OutcomeDeferred) != 0 || store.calls != 2 {
		t.Errorf("action %v, deferred %d, acquire calls %d; want ack, 0 deferred, 2 calls", d.Action, f.metrics.Count(OutcomeDeferred), store.calls)
	}
}
