package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type fixture struct {
	store   *memory.Store
	clock   *claimstoretest.Clock
	metrics *Metrics
	p       *processor
}

func newFixture(h Handler) *fixture {
	f := &fixture{clock: claimstoretest.NewClock(), metrics: NewMetrics(nil)}
	clock := f.clock.Now
	f.store = memory.New(memory.Config{Now: clock})
	f.p = &processor{
		store: f.store, handler: h, decoder: KeyFromMessageID, owner: "test",
		retention: 24 * time.Hour, minBackoff: time.Second, maxHold: 10 * time.Second,
		schedule:   newSchedule(time.Second, time.Minute, time.Hour, 0),
		deferSlack: time.Second, metrics: f.metrics, now: clock,
		log: slog.New(slog.DiscardHandler),
	}
	return f
}

func (f *fixture) lease() Hold { return Hold{Until: f.clock.Now().Add(30 * time.Second)} }

// takeOver acquires key for another holder, as a redelivery would after the
// lease ran out: the clock moves a minute on.
func (f *fixture) takeOver(key string) error {
	f.clock.Advance(time.Minute)
	_, err := f.store.Acquire(context.Background(), claimstore.AcquireParams{
		Key: key, Owner: "taker", LeaseUntil: f.clock.Now().Add(time.Minute), ExpiresAt: f.clock.Now().Add(time.Hour),
	})
	return err
}

// heartbeatLease returns a lease with a fast heartbeat that counts extensions.
func (f *fixture) heartbeatLease() (Hold, *atomic.Int32) {
	var extends atomic.Int32
	return Hold{
		Until: f.clock.Now().Add(30 * time.Second), Interval: 10 * time.Millisecond,
		RenewAt: f.clock.Now().Add(10 * time.Millisecond),
		Extend: func(context.Context) (time.Time, error) {
			extends.Add(1)
			return f.clock.Now().Add(30 * time.Second), nil
		},
	}, &extends
}

func ok(result string) Handler {
	return HandlerFunc(func(context.Context, *Message) (string, error) { return result, nil })
}

func TestProcessOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handler Handler
		decoder Decoder
		want    Action
		outcome Outcome
		status  claimstore.Status // of the claim afterwards; "" for none
	}{
		{"completed", ok("ch_1"), nil, Ack, OutcomeCompleted, claimstore.StatusCompleted},
		{"retryable failure releases", HandlerFunc(func(context.Context, *Message) (string, error) {
			return "", errors.New("provider unavailable")
		}), nil, Retry, OutcomeReleased, claimstore.StatusReleased},
		{"permanent failure dead-letters and releases", HandlerFunc(func(context.Context, *Message) (string, error) {
			return "", Permanentf("key reused")
		}), nil, DeadLetter, OutcomeAcquired, claimstore.StatusReleased},
		{"panic releases and never acks", HandlerFunc(func(context.Context, *Message) (string, error) {
			panic("boom")
		}), nil, Retry, OutcomePanic, claimstore.StatusReleased},
		{"poison is dead-lettered unclaimed", ok("x"), DecoderFunc(func(*Message) error {
			return Permanentf("not a payment")
		}), DeadLetter, "", ""},
		{"key too long is poison", ok("x"), DecoderFunc(func(m *Message) error {
			m.Key = string(make([]byte, claimstore.MaxKeyBytes+1))
			return nil
		}), DeadLetter, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(tc.handler)
			if tc.decoder != nil {
				f.p.decoder = tc.decoder
			}
			m := &Message{ID: "m1", Body: "{}", Attempt: 1}
			d := f.p.process(context.Background(), m, f.lease())
			if d.Action != tc.want {
				t.Fatalf("action = %v, want %v (Disposition %+v)", d.Action, tc.want, d)
			}
			if tc.outcome != "" && f.metrics.Count(tc.outcome) != 1 {
				t.Errorf("outcome %s counted %d times, want 1", tc.outcome, f.metrics.Count(tc.outcome))
			}
			if d.Action == DeadLetter && d.Reason == "" {
				t.Error("dead-letter without a reason")
			}
			c, err := f.store.Get(context.Background(), "m1")
			switch {
			case tc.status == "" && err == nil:
				t.Errorf("claim written for a poison message: %+v", c)
			case tc.status != "" && (err != nil || c.Status != tc.status):
				t.Errorf("claim = %+v, %v; want status %s", c, err, tc.status)
			}
		})
	}
}

func TestProcessDuplicateAndHeld(t *testing.T) {
	t.Parallel()
	f := newFixture(ok("ch_1"))
	ctx := context.Background()
	if d := f.p.process(ctx, &Message{ID: "a", Attempt: 1}, f.lease()); d.Action != Ack {
		t.Fatalf("first: %v", d.Action)
	}
	if d := f.p.process(ctx, &Message{ID: "a", Attempt: 2}, f.lease()); d.Action != Ack {
		t.Fatalf("duplicate: %v, want ack", d.Action)
	}
	if f.metrics.Count(OutcomeDuplicate) != 1 {
		t.Errorf("duplicates counted %d, want 1", f.metrics.Count(OutcomeDuplicate))
	}

	// Another holder's live lease: deferred until it ends, plus slack.
	holderLease := f.clock.Now().Add(20 * time.Second)
	if _, err := f.store.Acquire(ctx, claimstore.AcquireParams{Key: "b", Owner: "other", LeaseUntil: holderLease, ExpiresAt: f.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	d := f.p.process(ctx, &Message{ID: "b", Attempt: 1}, f.lease())
	if d.Action != Defer || d.Delay < 21*time.Second-time.Millisecond || d.Delay > 21*time.Second {
		t.Fatalf("held elsewhere: %+v, want defer 21s (the holder's 20s plus 1s)", d)
	}
}

// TestHeartbeatLeaseLost: a takeover while the handler runs makes the next
// renew fail; the handler's context is cancelled and the message is left
// alone (neither completed nor acked).
func TestHeartbeatLeaseLost(t *testing.T) {
	t.Parallel()
	var f *fixture
	f = newFixture(HandlerFunc(func(ctx context.Context, m *Message) (string, error) {
		// Someone takes the claim over while we work (an operator's
		// force-release, then a redelivery's acquire), with the clock
		// standing still so that only the failed renew, not our own lease
		// watchdog, can notice.
		if _, err := f.store.ForceRelease(ctx, m.Key); err != nil {
			return "", err
		}
		if _, err := f.store.Acquire(ctx, claimstore.AcquireParams{
			Key: m.Key, Owner: "taker", LeaseUntil: f.clock.Now().Add(time.Minute), ExpiresAt: f.clock.Now().Add(time.Hour),
		}); err != nil {
			return "", err
		}
		<-ctx.Done()
		return "late", nil
	}))
	l, extends := f.heartbeatLease()
	d := f.p.process(context.Background(), &Message{ID: "k", Attempt: 1}, l)
	if d.Action != Leave {
		t.Fatalf("action = %v, want leave", d.Action)
	}
	if f.metrics.Count(OutcomeLeaseLost) != 1 || f.metrics.Count(OutcomeCompleted) != 0 {
		t.Errorf("lease_lost %d completed %d", f.metrics.Count(OutcomeLeaseLost), f.metrics.Count(OutcomeCompleted))
	}
	c, _ := f.store.Get(context.Background(), "k")
	if c.Owner != "taker" || c.Status != claimstore.StatusInProgress || c.Token != 2 {
		t.Errorf("claim = %+v, want the taker's, untouched", c)
	}
	if extends.Load() == 0 {
		t.Error("no heartbeat ran")
	}
}

// TestLeaseWatchdog: the process stalls past its lease (the clock jumps)
// and nobody has taken over yet: the handler's context is cancelled at the
// next heartbeat without waiting for a renew to fail (renewals go on while
// it has not returned). The lease ran out on
// this clock only, so what the handler returns still counts: a failure
// releases the claim (the message is retried), a success completes it and
// acks, both conditioned on the acquisition.
func TestLeaseWatchdog(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		err     error
		want    Action
		outcome Outcome
		status  claimstore.Status
	}{
		{"handler fails", context.Canceled, Retry, OutcomeReleased, claimstore.StatusReleased},
		{"handler succeeds", nil, Ack, OutcomeCompleted, claimstore.StatusCompleted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var f *fixture
			f = newFixture(HandlerFunc(func(ctx context.Context, _ *Message) (string, error) {
				f.clock.Advance(time.Minute)
				<-ctx.Done()
				if !errors.Is(context.Cause(ctx), once.ErrLeaseExpired) {
					t.Errorf("cause %v, want ErrLeaseExpired", context.Cause(ctx))
				}
				return "sent", tc.err
			}))
			l, extends := f.heartbeatLease()
			d := f.p.process(context.Background(), &Message{ID: "k", Attempt: 1}, l)
			if d.Action != tc.want || f.metrics.Count(tc.outcome) != 1 || f.metrics.Count(OutcomeLeaseLost) != 0 {
				t.Fatalf("action %v, %s %d, lease_lost %d; want %v, 1, 0", d.Action, tc.outcome, f.metrics.Count(tc.outcome),
					f.metrics.Count(OutcomeLeaseLost), tc.want)
			}
			// Renewals may go on after the lease ran out, while the
			// cancelled handler has not returned yet: each is conditioned
			// on the acquisition, as the completion is.
			t.Logf("extended %d times", extends.Load())
			c, _ := f.store.Get(context.Background(), "k")
			if c.Status != tc.status || c.Token != 1 {
				t.Errorf("claim = %+v, want ours, %s", c, tc.status)
			}
		})
	}
}

// TestCompleteLeaseLost: the handler finished, but meanwhile the claim was
// taken over: the completion is rejected and the message not acked.
func TestCompleteLeaseLost(t *testing.T) {
	t.Parallel()
	var f *fixture
	f = newFixture(HandlerFunc(func(_ context.Context, m *Message) (string, error) {
		return "late", f.takeOver(m.Key)
	}))
	d := f.p.process(context.Background(), &Message{ID: "k", Attempt: 1}, f.lease())
	if d.Action != Leave || f.metrics.Count(OutcomeLeaseLost) != 1 {
		t.Fatalf("action %v lease_lost %d, want leave and 1", d.Action, f.metrics.Count(OutcomeLeaseLost))
	}
}

func TestLeaseOverBeforeStart(t *testing.T) {
	t.Parallel()
	f := newFixture(ok("x"))
	d := f.p.process(context.Background(), &Message{ID: "k", Attempt: 1}, Hold{Until: f.clock.Now()})
	if d.Action != Retry || d.Delay != 0 {
		t.Fatalf("%+v, want an immediate retry", d)
	}
	if _, err := f.store.Get(context.Background(), "k"); !errors.Is(err, claimstore.ErrNotFound) {
		t.Errorf("claimed a message whose lease was already over: %v", err)
	}
}

// slowAcquire is a claim store whose Acquire returns only after the clock
// has moved on by delay, as a throttled or overloaded store's would.
type slowAcquire struct {
	claimstore.Store
	clock *claimstoretest.Clock
	delay time.Duration
	after func(key string) // runs once the claim is won, before Acquire returns
}

func (s *slowAcquire) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	r, err := s.Store.Acquire(ctx, p)
	s.clock.Advance(s.delay)
	if s.after != nil {
		s.after(p.Key)
	}
	return r, err
}

// TestSlowAcquire: the claim is won only after its lease has ended. The
// lease is renewed before the handler starts, so the delivery is not thrown
// away; if someone took the claim over meanwhile, the handler never runs.
func TestSlowAcquire(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		takeOver bool
		want     Action
		ran      bool
		outcome  Outcome
	}{
		{"renewed, then handled", false, Ack, true, OutcomeCompleted},
		{"taken over meanwhile: never handled", true, Leave, false, OutcomeLeaseLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Bool
			var f *fixture
			f = newFixture(HandlerFunc(func(ctx context.Context, m *Message) (string, error) {
				ran.Store(true)
				if c, _ := f.store.Get(ctx, m.Key); !c.LeaseUntil.After(f.clock.Now()) {
					t.Errorf("handler started on a lease that had ended: %+v", c)
				}
				return "ch_1", nil
			}))
			slow := &slowAcquire{Store: f.store, clock: f.clock, delay: time.Minute}
			if tc.takeOver {
				slow.after = func(key string) {
					if _, err := f.store.Acquire(context.Background(), claimstore.AcquireParams{
						Key: key, Owner: "taker", LeaseUntil: f.clock.Now().Add(time.Minute), ExpiresAt: f.clock.Now().Add(time.Hour),
					}); err != nil {
						t.Error(err)
					}
				}
			}
			f.p.store = slow
			l, extends := f.heartbeatLease() // lease 30s, renew due 10ms in: both long past a minute later
			d := f.p.process(context.Background(), &Message{ID: "k", Attempt: 1}, l)
			if d.Action != tc.want || ran.Load() != tc.ran || f.metrics.Count(tc.outcome) != 1 {
				t.Fatalf("action %v, handler ran %v, %s %d; want %v, %v, 1", d.Action, ran.Load(), tc.outcome, f.metrics.Count(tc.outcome), tc.want, tc.ran)
			}
			if extends.Load() == 0 {
				t.Error("visibility was not extended before the handler")
			}
		})
	}
}

// TestSlowAcquireRenewFails: the claim is won after its lease ended and
// the store cannot renew it: the handler does not start on a dead lease.
func TestSlowAcquireRenewFails(t *testing.T) {
	t.Parallel()
	var ran atomic.Bool
	f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) {
		ran.Store(true)
		return "ch_1", nil
	}))
	f.p.store = &slowAcquire{Store: &failRenew{f.store}, clock: f.clock, delay: time.Minute}
	l, _ := f.heartbeatLease()
	d := f.p.process(context.Background(), &Message{ID: "k", Attempt: 1}, l)
	if d.Action != Retry || ran.Load() {
		t.Fatalf("action %v, handler ran %v; want retry, not run", d.Action, ran.Load())
	}
	// The lease ran out on this clock, the store said nothing: the claim
	// is released, not left for its lease to end.
	if c, _ := f.store.Get(context.Background(), "k"); c.Status != claimstore.StatusReleased {
		t.Errorf("claim = %+v, want released", c)
	}
}

// failRenew is a claim store that cannot renew: the store is unreachable.
type failRenew struct{ claimstore.Store }

func (failRenew) Renew(context.Context, claimstore.RenewParams) error {
	return errors.New("store unreachable")
}

// TestScheduleCoversTheOutage: the visibility delays after failed receives
// add up to at least the outage cover over the receives the redrive policy
// leaves, growing from the first delay, for the maxReceiveCounts users pick.
func TestScheduleCoversTheOutage(t *testing.T) {
	t.Parallel()
	for _, maxReceive := range []int{2, 3, 5, 10, 100} {
		s := newSchedule(time.Second, DefaultMaxRetryBackoff, time.Hour, maxReceive)
		if len(s.delays) != maxReceive-1 {
			t.Fatalf("maxReceive %d: %d delays, want %d", maxReceive, len(s.delays), maxReceive-1)
		}
		var total time.Duration
		for r := 1; r < maxReceive; r++ {
			lo := s.delays[r-1]
			for range 20 {
				if d := s.delay(r); d < lo || d > lo+lo/4 {
					t.Fatalf("maxReceive %d: delay(%d) = %s, want in [%s, %s]", maxReceive, r, d, lo, lo+lo/4)
				}
			}
			if r > 1 && lo < s.delays[r-2] {
				t.Errorf("maxReceive %d: delays shrink: %v", maxReceive, s.delays)
			}
			total += lo
		}
		if total < time.Hour || s.covers != total {
			t.Errorf("maxReceive %d: delays %v add up to %s (covers %s), want at least 1h", maxReceive, s.delays, total, s.covers)
		}
		if s.delays[0] != time.Second && maxReceive > 2 {
			t.Errorf("maxReceive %d: first delay %s, want 1s", maxReceive, s.delays[0])
		}
		t.Logf("maxReceiveCount %d: %v", maxReceive, s.delays)
	}
	// Capped delays cannot cover: the schedule says how much they do.
	s := newSchedule(time.Second, time.Minute, time.Hour, 5)
	if s.covers != 4*time.Minute || s.delays[0] != time.Minute {
		t.Errorf("capped schedule %v covers %s, want 4 x 1m", s.delays, s.covers)
	}
	// No redrive policy: doubling up to the cap.
	s = newSchedule(time.Second, time.Minute, time.Hour, 0)
	if s.delays[0] != time.Second || s.delays[len(s.delays)-1] != time.Minute {
		t.Errorf("no-DLQ schedule %v, want doubling from 1s to 1m", s.delays)
	}
}

// hangingRenew is a claim store whose Renew hangs until its context ends, as
// a call to an unresponsive endpoint does without a response timeout.
type hangingRenew struct{ claimstore.Store }

func (hangingRenew) Renew(ctx context.Context, _ claimstore.RenewParams) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestHangingRenewWatchdog: a heartbeat's renew hangs past the lease. The
// watchdog still cancels the handler when the lease ends; the handler
// gives up, and its claim is released (the store never said it was lost).
func TestHangingRenewWatchdog(t *testing.T) {
	t.Parallel()
	cancelled := make(chan time.Time, 1)
	f := newFixture(HandlerFunc(func(ctx context.Context, _ *Message) (string, error) {
		select {
		case <-ctx.Done():
			cancelled <- time.Now()
			return "", ctx.Err()
		case <-time.After(5 * time.Second):
			return "ran past its lease", nil
		}
	}))
	f.p.now = time.Now
	f.p.store = hangingRenew{memory.New(memory.Config{})}
	start := time.Now()
	const leaseFor = 400 * time.Millisecond
	l := Hold{
		Until: start.Add(leaseFor), Interval: 100 * time.Millisecond, RenewAt: start.Add(100 * time.Millisecond),
		Extend: func(context.Context) (time.Time, error) { return time.Now().Add(leaseFor), nil },
	}
	done := make(chan Disposition, 1)
	go func() { done <- f.p.process(context.Background(), &Message{ID: "k", Attempt: 1}, l) }()
	select {
	case d := <-done:
		if d.Action != Retry || f.metrics.Count(OutcomeReleased) != 1 {
			t.Fatalf("action %v released %d, want retry and 1", d.Action, f.metrics.Count(OutcomeReleased))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the handler was not cancelled within 3s of a 400ms lease: a hung renew blocked the watchdog")
	}
	if late := (<-cancelled).Sub(start.Add(leaseFor)); late > 150*time.Millisecond {
		t.Errorf("handler cancelled %s after its lease ended, want within 150ms", late)
	}
}

// TestKeyReusedIsDeadLettered: the same key with another payload after the
// first completed is poison with a reason naming the key, not a duplicate.
func TestKeyReusedIsDeadLettered(t *testing.T) {
	t.Parallel()
	f := newFixture(ok("ch_1"))
	fp := "a"
	f.p.decoder = DecoderFunc(func(m *Message) error { m.Key, m.Fingerprint = "pay_1", fp; return nil })
	if d := f.p.process(context.Background(), &Message{ID: "m1", Attempt: 1}, f.lease()); d.Action != Ack {
		t.Fatalf("first: %+v, want ack", d)
	}
	if d := f.p.process(context.Background(), &Message{ID: "m2", Attempt: 1}, f.lease()); d.Action != Ack || f.metrics.Count(OutcomeDuplicate) != 1 {
		t.Fatalf("same payload again: %+v, want ack as a duplicate", d)
	}
	fp = "b"
	d := f.p.process(context.Background(), &Message{ID: "m3", Attempt: 1}, f.lease())
	if d.Action != DeadLetter || !strings.Contains(d.Reason, `"pay_1"`) || !strings.Contains(d.Reason, "reused") {
		t.Fatalf("another payload: %+v, want dead-letter with a reason naming the key", d)
	}
	if f.metrics.Count(OutcomeKeyReused) != 1 {
		t.Errorf("key_reused counted %d, want 1", f.metrics.Count(OutcomeKeyReused))
	}
}

func TestPanickingDecoderIsPoison(t *testing.T) {
	t.Parallel()
	f := newFixture(ok("x"))
	f.p.decoder = DecoderFunc(func(*Message) error { panic("bad input") })
	d := f.p.process(context.Background(), &Message{ID: "m1", Attempt: 1}, f.lease())
	if d.Action != DeadLetter || !strings.Contains(d.Reason, "decoder panicked: bad input") {
		t.Fatalf("%+v, want dead-letter with the panic as the reason", d)
	}
}

// holdingLease is a container-mode lease that may be held: visibility
// extensions succeed and the worker is not stopping.
func holdingLease(stop chan struct{}) Hold {
	now := time.Now()
	return Hold{
		Until: now.Add(30 * time.Second), Interval: 10 * time.Second, RenewAt: now.Add(10 * time.Second),
		Extend:    func(context.Context) (time.Time, error) { return time.Now().Add(30 * time.Second), nil },
		Stop:      stop,
		HoldUntil: now.Add(time.Minute),
	}
}

// flakyAcquire fails its first n Acquire calls, as a store in an outage.
type flakyAcquire struct {
	claimstore.Store
	n atomic.Int32
}

func (s *flakyAcquire) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	if s.n.Add(-1) >= 0 {
		return claimstore.Acquisition{}, errors.New("dynamodb: 500 internal server error")
	}
	return s.Store.Acquire(ctx, p)
}

// TestHoldRetriesInProcess: a dependency failing for a while (the provider,
// then the claim store) is waited out in process, holding the message: it
// completes on the same receive, and nothing goes back to the queue.
func TestHoldRetriesInProcess(t *testing.T) {
	t.Parallel()
	t.Run("handler", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) {
			if calls.Add(1) <= 2 {
				return "", Dependency("provider", errors.New("HTTP 503"))
			}
			return "ch_1", nil
		}))
		f.p.now, f.p.minBackoff, f.p.maxHold = time.Now, 10*time.Millisecond, 20*time.Millisecond
		f.p.store = memory.New(memory.Config{})
		d := f.p.process(context.Background(), &Message{ID: "m1", Attempt: 1}, holdingLease(make(chan struct{})))
		if d.Action != Ack || calls.Load() != 3 {
			t.Fatalf("%+v after %d calls, want ack after 3", d, calls.Load())
		}
		if got := counterValue(f.metrics.retries.WithLabelValues("provider")); got != 2 {
			t.Errorf("retries{provider} = %v, want 2", got)
		}
	})
	t.Run("acquire", func(t *testing.T) {
		t.Parallel()
		f := newFixture(ok("ch_1"))
		f.p.now, f.p.minBackoff, f.p.maxHold = time.Now, 10*time.Millisecond, 20*time.Millisecond
		fs := &flakyAcquire{Store: memory.New(memory.Config{})}
		fs.n.Store(3)
		f.p.store = fs
		d := f.p.process(context.Background(), &Message{ID: "m1", Attempt: 1}, holdingLease(make(chan struct{})))
		if d.Action != Ack || f.metrics.Count(OutcomeCompleted) != 1 {
			t.Fatalf("%+v, want ack after the store came back", d)
		}
	})
	t.Run("not held when stopping", func(t *testing.T) {
		t.Parallel()
		f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) {
			return "", Dependency("provider", errors.New("HTTP 503"))
		}))
		f.p.now = time.Now
		f.p.store = memory.New(memory.Config{})
		stop := make(chan struct{})
		close(stop)
		d := f.p.process(context.Background(), &Message{ID: "m1", Attempt: 1}, holdingLease(stop))
		if d.Action != Retry || f.metrics.Count(OutcomeReleased) != 1 {
			t.Fatalf("%+v, want a release and a retry through the queue", d)
		}
	})
}

// TestDependencyFailuresAreNeverPoison: whatever the provider refuses for
// (credentials, an outage), the message is retried, never dead-lettered.
func TestDependencyFailuresAreNeverPoison(t *testing.T) {
	t.Parallel()
	f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) {
		return "", Dependency("provider", errors.New("HTTP 401 unauthorized"))
	}))
	for rc := 1; rc <= 10; rc++ {
		d := f.p.process(context.Background(), &Message{ID: "m1", Attempt: rc}, f.lease())
		if d.Action != Retry {
			t.Fatalf("receive %d: %+v, want retry", rc, d)
		}
	}
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	b := newBreaker(3, m, slog.New(slog.DiscardHandler), time.Now)
	for i := range 2 {
		b.failure("provider", errors.New("503"))
		if open, _, _ := b.state(); open {
			t.Fatalf("open after %d failures, want closed until 3", i+1)
		}
	}
	b.success() // a completion between failures resets the count
	for range 3 {
		b.failure("provider", errors.New("503"))
	}
	open, dep, reason := b.state()
	if !open || dep != "provider" || reason != "503" {
		t.Fatalf("state = %v %q %q, want open for provider: 503", open, dep, reason)
	}
	if counterValue(m.breakerOpens) != 1 || gaugeValue(m.breakerOpen.WithLabelValues("provider")) != 1 {
		t.Errorf("opens %v gauge %v, want 1 and 1", counterValue(m.breakerOpens), gaugeValue(m.breakerOpen.WithLabelValues("provider")))
	}
	b.success()
	if open, _, _ := b.state(); open || gaugeValue(m.breakerOpen.WithLabelValues("provider")) != 0 {
		t.Error("a success did not close the breaker")
	}
	var none *breaker
	none.failure("x", errors.New("y")) // Lambda has none: a no-op
	if open, _, _ := none.state(); open {
		t.Error("a nil breaker is open")
	}
}

// failingRelease is a claim store whose Release fails, as in an outage.
type failingRelease struct{ claimstore.Store }

func (failingRelease) Release(context.Context, claimstore.ReleaseParams) error {
	return errors.New("store unavailable")
}

// TestFailedReleaseWaitsForTheRenewedLease: a handler that ran past its
// first lease (heartbeats renewed it) fails, and the release fails too: the
// retry must wait for the lease as renewed, not as first granted, or it
// comes back while the claim is still held and is deferred, spending a
// receive.
func TestFailedReleaseWaitsForTheRenewedLease(t *testing.T) {
	t.Parallel()
	var f *fixture
	var extends *atomic.Int32
	f = newFixture(HandlerFunc(func(ctx context.Context, _ *Message) (string, error) {
		f.clock.Advance(20 * time.Second)
		n := extends.Load()
		for extends.Load() < n+2 && ctx.Err() == nil { // a renewal at +20s, finished
			time.Sleep(time.Millisecond)
		}
		f.clock.Advance(20 * time.Second) // +40s: past the first lease's end (+30s)
		return "", errors.New("provider unavailable")
	}))
	f.p.store = failingRelease{f.store}
	var l Hold
	l, extends = f.heartbeatLease()
	d := f.p.process(context.Background(), &Message{ID: "k", Attempt: 1}, l)
	c, err := f.store.Get(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if wait := c.LeaseUntil.Sub(f.clock.Now()); d.Action != Retry || d.Delay < wait {
		t.Fatalf("%v in %s, want a retry no sooner than the renewed lease's end, %s away", d.Action, d.Delay, wait)
	}
}

// TestProtocolReadsTheInjectedClock runs a message with the worker's and the
// store's clock a year ahead of the wall clock: every instant the claim
// carries comes from the injected clock, none from time.Now.
func TestProtocolReadsTheInjectedClock(t *testing.T) {
	t.Parallel()
	f := newFixture(ok("ch_1"))
	f.clock.Advance(365 * 24 * time.Hour)
	f.p.handler = HandlerFunc(func(_ context.Context, m *Message) (string, error) {
		if d := m.FirstAt.Sub(f.clock.Now()); d < -time.Second || d > time.Second {
			t.Errorf("FirstAt = %v, want the injected clock's %v", m.FirstAt, f.clock.Now())
		}
		return "ch_1", nil
	})
	l := f.lease()
	if d := f.p.process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 1}, l); d.Action != Ack {
		t.Fatalf("action = %v, want ack (the lease read the wall clock?)", d.Action)
	}
	c, err := f.store.Get(context.Background(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	if want := f.clock.Now().Add(f.p.retention); c.ExpiresAt.Before(want.Add(-time.Second)) {
		t.Errorf("ExpiresAt = %v, want about %v (from the injected clock)", c.ExpiresAt, want)
	}
}

// TestBackoffFollowsTheMessagesOwnFailures: a FIFO message returned unstarted
// behind others of its group comes back with a receive count grown by their
// failures; its first failure is still its first, and the claim says so. On
// a standard queue every receive counts.
func TestBackoffFollowsTheMessagesOwnFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		fifo         bool
		receiveCount int
		earlier      int // failed attempts of the key before this one
		want         int // the failure the delay is scheduled for
	}{
		{"first failure behind four returns", true, 5, 0, 1},
		{"third failure, receives match", true, 3, 2, 3},
		{"second failure behind returns", true, 7, 1, 2},
		{"attempts beyond receives (another copy of the key)", true, 2, 4, 2},
		// A standard queue returns nothing behind others: a receive spent
		// without a claim (a store error before it) still brings the
		// redrive nearer, and the schedule must count it.
		{"standard queue, two receives lost to store errors", false, 5, 2, 5},
		{"standard queue, receives match", false, 3, 2, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) {
				return "", errors.New("provider unavailable")
			}))
			for range tc.earlier {
				a, err := f.store.Acquire(context.Background(), claimstore.AcquireParams{
					Key: "m1", Owner: "earlier", LeaseUntil: f.clock.Now().Add(time.Minute), ExpiresAt: f.clock.Now().Add(time.Hour),
				})
				if err != nil || a.Outcome != claimstore.Acquired {
					t.Fatalf("earlier attempt: %v %v", a.Outcome, err)
				}
				if err := f.store.Release(context.Background(), claimstore.ReleaseParams{Holder: a.Claim.Holder(), LastError: "earlier"}); err != nil {
					t.Fatal(err)
				}
			}
			l := f.lease()
			l.Ordered = tc.fifo
			d := f.p.process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: tc.receiveCount}, l)
			lo := f.p.schedule.delays[tc.want-1]
			if d.Action != Retry || d.Delay < lo || d.Delay > lo+lo/4 {
				t.Errorf("Disposition %v after %s, want retry after %s (the failure %d's delay, up to a quarter more)",
					d.Action, d.Delay, lo, tc.want)
			}
		})
	}
}
