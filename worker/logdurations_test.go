package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/logcheck"
)

// TestLogsCarryNoDurations: the protocol's log lines carry durations as
// strings ("28s"), never as time.Duration values, which a JSON handler
// without a ReplaceAttr writes as bare nanoseconds. It runs the paths that
// log a wait: a key held elsewhere (deferred), a failure held and retried
// in process, a failure returned to the broker, a breaker closing.
func TestLogsCarryNoDurations(t *testing.T) {
	t.Parallel()
	check := logcheck.New(nil)
	store := memory.New(memory.Config{})
	var calls atomic.Int32
	e, err := NewEngine(Protocol{
		Store: store, Retention: time.Hour, Logger: slog.New(check),
		Decoder: DecoderFunc(func(m *Message) error { m.Key = m.Body; return nil }),
		Handler: HandlerFunc(func(_ context.Context, m *Message) (string, error) {
			if m.Body == "fails" || (m.Body == "fails-once" && calls.Add(1) == 1) {
				return "", Dependency("provider", errors.New("unavailable"))
			}
			return "ok", nil
		}),
		MinRetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: time.Second, OutageCover: time.Minute,
	}, EngineOptions{MaxHoldBackoff: 20 * time.Millisecond, BreakerThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Acquire(context.Background(), claimstore.AcquireParams{
		Key: "held", Owner: "elsewhere", LeaseUntil: time.Now().Add(time.Minute), ExpiresAt: time.Now().Add(time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	held := func() Hold {
		now := time.Now()
		return Hold{
			Until: now.Add(30 * time.Second), Interval: 10 * time.Second, RenewAt: now.Add(10 * time.Second),
			Extend: func(context.Context) (time.Time, error) { return time.Now().Add(30 * time.Second), nil },
			Stop:   stop, HoldUntil: now.Add(time.Minute),
		}
	}
	plain := func() Hold { return Hold{Until: time.Now().Add(30 * time.Second)} }
	for _, tc := range []struct {
		body string
		hold Hold
		want Action
	}{
		{"held", plain(), Defer},
		{"fails", plain(), Retry},
		{"fails-once", held(), Ack},
	} {
		if d := e.Process(context.Background(), &Message{ID: tc.body, Body: tc.body, Attempt: 1}, tc.hold); d.Action != tc.want {
			t.Fatalf("%s: %v, want %v", tc.body, d.Action, tc.want)
		}
	}
	if found := check.Durations(); len(found) > 0 {
		t.Errorf("durations logged as time.Duration (bare nanoseconds in JSON):\n%s", strings.Join(found, "\n"))
	}
}
