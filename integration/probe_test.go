package integration

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// TestProbeIgnoringItsContext: while the breaker is open, a probe message
// whose handler ignores its context and never returns must give the
// probe slot back when its lease ends, so that the pollers probe again and
// the worker recovers; and shutdown must end within ShutdownTimeout
// whatever that handler does, naming the message it abandoned. Before,
// the stuck probe kept the only slot: nothing was received again, and Run
// never returned.
func TestProbeIgnoringItsContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 3 * time.Second})
	var (
		recovered atomic.Bool
		fails     atomic.Int32
		handled   sync.Map // body -> struct{}, on success
		started   = make(chan string, 1)
		release   = make(chan struct{})
	)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	logs := &syncbuf.Buffer{}
	const shutdown = 2 * time.Second
	w, err := sqsworker.New(context.Background(), sqsworker.Config{
		QueueURL: e.queueURL, SQS: e.sqs,
		Concurrency: 4, WaitTime: time.Second, ShutdownTimeout: shutdown,
		HoldFor: time.Millisecond, BreakerThreshold: 1, ProbeInterval: 100 * time.Millisecond,
		Protocol: worker.Protocol{Store: memory.New(memory.Config{}),
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
				switch {
				case m.Body == "fail" && !recovered.Load():
					fails.Add(1)
					return "", worker.Dependency("provider", errors.New("down"))
				case m.Body == "stuck":
					started <- m.ID
					<-release // ignores its context
				}
				handled.Store(m.Body, struct{}{})
				return "ok", nil
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	e.send("fail")
	// Its second failure comes from a probe: every receive from then on is
	// a probe, one at a time.
	waitFor(t, 30*time.Second, "the breaker to open and a probe to fail", func() bool { return w.Health() != nil && fails.Load() >= 2 })
	// A long poll that began before the breaker opened receives a whole
	// batch, not a probe: let those end (WaitTime), so that the stuck
	// message is received as a probe.
	time.Sleep(2 * time.Second)
	e.send("stuck")
	var stuckID string
	select {
	case stuckID = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck message was never received as a probe")
	}
	recovered.Store(true)
	e.send("ok1", "ok2")
	deadline := time.Now().Add(30 * time.Second)
	for _, b := range []string{"fail", "ok1", "ok2"} {
		for {
			if _, ok := handled.Load(b); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q not handled 30s after the dependency recovered: the stuck probe holds the probe slot (breaker: %v)", b, w.Health())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if os.Getenv("PROBE_TEST_LOG") != "" {
		t.Log(logs.String())
	}
	if strings.Count(logs.String(), "giving the probe slot back") == 0 {
		t.Error("the probe slot's return was not logged")
	}

	cancel()
	stopping := time.Now()
	select {
	case err := <-done:
		if took := time.Since(stopping); took > shutdown+time.Second {
			t.Errorf("Run returned %s after its context ended, want within ShutdownTimeout %s", took, shutdown)
		}
		if !errors.Is(err, worker.ErrShutdownTimeout) {
			t.Errorf("Run: %v, want ErrShutdownTimeout (a handler was abandoned)", err)
		}
	case <-time.After(shutdown + 10*time.Second):
		t.Fatalf("Run did not return %s after its context ended (ShutdownTimeout %s)", shutdown+10*time.Second, shutdown)
	}
	abandoned := false
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "abandoning a handler") && strings.Contains(line, stuckID) {
			abandoned = true
		}
	}
	if !abandoned {
		t.Errorf("shutdown did not log that it abandoned message %s", stuckID)
	}
	close(release) // the abandoned handler finishes; its late ack is dropped
}
