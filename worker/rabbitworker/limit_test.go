package rabbitworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// TestDeliveryLimitEndsACrashLoop: a message whose every delivery loses
// its consumer's connection (as a consumer that crashes on it would) is
// dead-lettered by the broker at the queue's x-delivery-limit, with the
// broker's reason, instead of looping for ever; the worker goes on.
func TestDeliveryLimitEndsACrashLoop(t *testing.T) {
	u := brokerURL(t)
	t.Parallel()
	ctx := t.Context()
	queue := fmt.Sprintf("limit-%d", time.Now().UnixNano())
	const limit = 3
	ch := declared(t, u, Topology{Queue: queue, DeliveryLimit: limit})
	var err error
	var w *Worker
	var runs atomic.Int64
	handler := worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) {
		runs.Add(1)
		_ = w.current.Load().conn.Close() // the consumer "crashes" on this message
		return "", errors.New("crashed")
	})
	w, err = New(ctx, Config{
		Protocol: worker.Protocol{
			Store: memory.New(memory.Config{}), Handler: handler, Retention: time.Hour,
			Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
			Logger:  slog.New(slog.DiscardHandler),
		},
		URL: u, Queue: queue, DeliveryLimit: limit, Lease: time.Second, ShutdownTimeout: 200 * time.Millisecond,
		MinReconnect: 50 * time.Millisecond, MaxReconnect: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runWorker(t, ctx, w)()
	if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte("loop")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, ok, err := ch.Get(DeadLetterQueueOf(queue), true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			reason, _ := m.Headers["x-first-death-reason"].(string)
			t.Logf("dead-lettered by the broker after %d runs: %q, reason %q", runs.Load(), m.Body, reason)
			if string(m.Body) != "loop" || reason != "delivery_limit" {
				t.Errorf("dead letter %q with reason %q, want loop, delivery_limit", m.Body, reason)
			}
			if n := runs.Load(); n > limit+1 {
				t.Errorf("%d runs, want at most %d (the delivery limit and the first)", n, limit+1)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not dead-lettered after 30s and %d runs", runs.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runWorker runs w until the func it returns is called, which stops it and
// fails t if Run returned an error.
func runWorker(t *testing.T, ctx context.Context, w *Worker) func() {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
