package integration

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// TestAbandonedHandlerKeepsItsClaim: a handler ignores its cancelled
// context and runs well past the shutdown timeout; Run returns
// ErrShutdownTimeout while it runs on in the process. Its claim is renewed
// and its message's visibility extended until it returns, so a second
// worker on the same queue never starts the key alongside it (counted in
// the handler). When it returns its claim is completed; its ack is dropped
// (Run has returned) and the redelivery is acked as a duplicate: one run.
func TestAbandonedHandlerKeepsItsClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 3 * time.Second, maxReceive: 10})
	store, err := dynamo.New(dynamo.Config{Client: e.ddb, Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	var running, most, runs atomic.Int32
	started := make(chan struct{}, 4)
	returned := make(chan struct{})
	handler := worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) {
		runs.Add(1)
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started <- struct{}{}
		defer running.Add(-1)
		if runs.Load() == 1 {
			defer close(returned)
			time.Sleep(9 * time.Second) // three visibility timeouts, ignoring the context
		}
		return "sent", nil
	})
	newWorker := func(name string, m *worker.Metrics) *sqsworker.Worker {
		w, err := sqsworker.New(context.Background(), sqsworker.Config{
			QueueURL: e.queueURL, SQS: e.sqs, WaitTime: time.Second, ShutdownTimeout: time.Second,
			Protocol: worker.Protocol{Store: store, Handler: handler, Owner: name, Metrics: m,
				Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
				Logger:  slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))},
		})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	key := awstest.Name("abandoned")
	e.send(key)

	w1 := newWorker("w1", worker.NewMetrics(nil))
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan error, 1)
	go func() { done1 <- w1.Run(ctx1) }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start")
	}
	stop1()
	if err := <-done1; !errors.Is(err, worker.ErrShutdownTimeout) {
		t.Fatalf("w1's Run = %v, want ErrShutdownTimeout", err)
	}

	m2 := worker.NewMetrics(nil)
	w2 := newWorker("w2", m2)
	ctx2, stop2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- w2.Run(ctx2) }()
	defer func() {
		stop2()
		if err := <-done2; err != nil {
			t.Errorf("w2's Run = %v", err)
		}
	}()
	<-returned // the abandoned handler's whole run, with w2 polling
	waitFor(t, 30*time.Second, "the redelivery to be acked as a duplicate, or run", func() bool {
		return m2.Count(worker.OutcomeDuplicate) > 0 || runs.Load() > 1
	})
	t.Logf("runs %d, at most %d at once; w2: duplicates %d, deferred %d", runs.Load(), most.Load(),
		m2.Count(worker.OutcomeDuplicate), m2.Count(worker.OutcomeDeferred))
	if most.Load() != 1 || runs.Load() != 1 {
		t.Errorf("the key ran %d times, at most %d at once; want once: the abandoned handler's claim lapsed while it ran", runs.Load(), most.Load())
	}
	if row := e.claim(key); row["status"] != "COMPLETED" || row["token"] != "1" {
		t.Errorf("claim %v, want COMPLETED by the abandoned handler (token 1)", row)
	}
}
