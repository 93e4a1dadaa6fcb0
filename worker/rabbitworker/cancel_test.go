package rabbitworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// TestQueueDeletedStops: the broker cancels the consumer when its queue is
// deleted; the worker tries to subscribe again, finds the queue gone, and
// Run returns ErrQueueGone rather than spin.
func TestQueueDeletedStops(t *testing.T) {
	u := brokerURL(t)
	t.Parallel()
	ctx := t.Context()
	queue := fmt.Sprintf("cancel-%d", time.Now().UnixNano())
	ch := declared(t, u, Topology{Queue: queue})
	w, err := New(ctx, Config{
		Protocol: worker.Protocol{
			Store: memory.New(memory.Config{}), Retention: time.Hour,
			Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) { return "", nil }),
			Logger:  slog.New(slog.DiscardHandler),
		},
		URL: u, Queue: queue, MinReconnect: 50 * time.Millisecond, MaxReconnect: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for w.Health() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", w.Health())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrQueueGone) {
			t.Errorf("Run: %v, want ErrQueueGone", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run went on after its queue was deleted")
	}
}
