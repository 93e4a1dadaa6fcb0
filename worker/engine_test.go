package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/setting"
)

// TestNewEngineRefuses: an engine without a store, a handler or a
// retention is a configuration error, named by field.
func TestNewEngineRefuses(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) (string, error) { return "", nil })
	cases := []struct {
		name  string
		p     Protocol
		field string
	}{
		{"no store", Protocol{Handler: h, Retention: time.Hour}, "Store"},
		{"no handler", Protocol{Store: memory.New(memory.Config{}), Retention: time.Hour}, "Handler"},
		{"no retention", Protocol{Store: memory.New(memory.Config{}), Handler: h}, "Retention"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewEngine(tc.p, EngineOptions{})
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("err %v, want ErrConfig", err)
			}
			if fe := setting.Errors(err); len(fe) != 1 || fe[0].Field != tc.field {
				t.Fatalf("field errors %v, want one for %s", fe, tc.field)
			}
		})
	}
}

// TestEngineRetryDelays: the delay of a failed delivery's Retry comes from
// the schedule the transport sized (MaxAttempts) and stays within the
// broker's MaxDelay; a broker without a limit gets the schedule's delay.
func TestEngineRetryDelays(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		maxDelay       time.Duration
		attempt        int
		wantLo, wantHi time.Duration
	}{
		{"first attempt", 0, 1, time.Second, time.Second + time.Second/4},
		{"within the broker's limit", 5 * time.Second, 10, 5 * time.Second, 5 * time.Second},
		{"no limit", 0, 10, time.Minute, time.Minute + time.Minute/4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := claimstoretest.NewClock()
			e, err := NewEngine(Protocol{
				Store: memory.New(memory.Config{Now: clock.Now}), Retention: time.Hour, Now: clock.Now,
				Handler: HandlerFunc(func(context.Context, *Message) (string, error) {
					return "", errors.New("provider unavailable")
				}),
				MinRetryBackoff: time.Second, MaxRetryBackoff: time.Minute, OutageCover: time.Hour,
				Logger: slog.New(slog.DiscardHandler),
			}, EngineOptions{MaxAttempts: 0, MaxDelay: tc.maxDelay})
			if err != nil {
				t.Fatal(err)
			}
			d := e.Process(context.Background(), &Message{ID: "m", Body: "{}", Attempt: tc.attempt},
				Hold{Until: clock.Now().Add(30 * time.Second)})
			if d.Action != Retry || d.Delay < tc.wantLo || d.Delay > tc.wantHi {
				t.Fatalf("%v after %s, want retry after %s to %s", d.Action, d.Delay, tc.wantLo, tc.wantHi)
			}
		})
	}
}

// TestEngineDuplicateWaitsForItsTwin: a duplicate of a key held by a
// delivery of the same engine waits for that delivery in process and is
// acked as a duplicate as soon as it completes, with one handler call,
// rather than deferred until the holder's lease ends.
func TestEngineDuplicateWaitsForItsTwin(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	started, finish := make(chan struct{}), make(chan struct{})
	e, err := NewEngine(Protocol{
		Store: memory.New(memory.Config{}), Retention: time.Hour,
		Decoder: DecoderFunc(func(m *Message) error { m.Key = "pay_1"; return nil }),
		Handler: HandlerFunc(func(context.Context, *Message) (string, error) {
			if calls.Add(1) == 1 {
				close(started)
				<-finish
			}
			return "ch_1", nil
		}),
		Logger: slog.New(slog.DiscardHandler),
	}, EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hold := func() Hold { return Hold{Until: time.Now().Add(30 * time.Second)} }
	first := make(chan Disposition, 1)
	go func() { first <- e.Process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 1}, hold()) }()
	<-started
	type result struct {
		d  Disposition
		at time.Time
	}
	second := make(chan result, 1)
	go func() {
		d := e.Process(context.Background(), &Message{ID: "m2", Body: "{}", Attempt: 1}, hold())
		second <- result{d, time.Now()}
	}()
	time.Sleep(200 * time.Millisecond) // the twin is running meanwhile
	done := time.Now()
	close(finish)
	if d := <-first; d.Action != Ack {
		t.Fatalf("first: %+v, want ack", d)
	}
	select {
	case r := <-second:
		if r.d.Action != Ack {
			t.Fatalf("duplicate: %v after %s, want ack (a duplicate of a completed key)", r.d.Action, r.d.Delay)
		}
		if waited := r.at.Sub(done); waited > time.Second {
			t.Errorf("duplicate acked %s after its twin completed, want within a second", waited)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("duplicate not settled 5s after its twin completed")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
}

// TestEngineDuplicateTakesOverFromItsTwin: a duplicate waiting for its
// twin in process takes the key over when the twin releases it.
func TestEngineDuplicateTakesOverFromItsTwin(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	started, finish := make(chan struct{}), make(chan struct{})
	e, err := NewEngine(Protocol{
		Store: memory.New(memory.Config{}), Retention: time.Hour,
		Decoder: DecoderFunc(func(m *Message) error { m.Key = "pay_1"; return nil }),
		Handler: HandlerFunc(func(context.Context, *Message) (string, error) {
			if calls.Add(1) == 1 {
				close(started)
				<-finish
				return "", errors.New("provider unavailable")
			}
			return "ch_1", nil
		}),
		Logger: slog.New(slog.DiscardHandler),
	}, EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hold := func() Hold { return Hold{Until: time.Now().Add(30 * time.Second)} }
	first := make(chan Disposition, 1)
	go func() { first <- e.Process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 1}, hold()) }()
	<-started
	second := make(chan Disposition, 1)
	go func() { second <- e.Process(context.Background(), &Message{ID: "m2", Body: "{}", Attempt: 1}, hold()) }()
	time.Sleep(100 * time.Millisecond)
	close(finish)
	if d := <-first; d.Action != Retry {
		t.Fatalf("first: %+v, want retry", d)
	}
	select {
	case d := <-second:
		if d.Action != Ack {
			t.Fatalf("duplicate: %v after %s, want ack after taking over", d.Action, d.Delay)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("duplicate not settled 5s after its twin released the key")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2 (the twin's failure, the takeover)", n)
	}
}

// TestEngineHeldFailureInLastError: while a failed handler is held and
// retried in process, the claim's last_error says why (the heartbeat
// writes it), so `worker claims get` shows more than IN_PROGRESS.
func TestEngineHeldFailureInLastError(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	var calls atomic.Int32
	var seen atomic.Value
	e, err := NewEngine(Protocol{
		Store: store, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler),
		Decoder: DecoderFunc(func(m *Message) error { m.Key = "pay_1"; return nil }),
		Handler: HandlerFunc(func(ctx context.Context, _ *Message) (string, error) {
			if calls.Add(1) == 1 {
				return "", Dependency("provider", errors.New("HTTP 503"))
			}
			c, err := store.Get(ctx, "pay_1")
			if err != nil {
				return "", err
			}
			seen.Store(c.LastError)
			return "ch_1", nil
		}),
		MinRetryBackoff: 400 * time.Millisecond, MaxRetryBackoff: time.Second, OutageCover: time.Minute,
	}, EngineOptions{MaxHoldBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	now := time.Now()
	h := Hold{
		Until: now.Add(30 * time.Second), Interval: 50 * time.Millisecond, RenewAt: now.Add(50 * time.Millisecond),
		Extend: func(context.Context) (time.Time, error) { return time.Now().Add(30 * time.Second), nil },
		Stop:   stop, HoldUntil: now.Add(time.Minute),
	}
	if d := e.Process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 1}, h); d.Action != Ack {
		t.Fatalf("%+v, want ack after the retry in process", d)
	}
	if got, _ := seen.Load().(string); !strings.Contains(got, "HTTP 503") {
		t.Errorf("last_error during the hold = %q, want the held failure (HTTP 503)", got)
	}
}
