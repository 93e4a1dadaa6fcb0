package rabbitworker

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// completeFailsOnce is a store whose first Complete says the lease was
// lost (as when a later holder took the key over): the protocol does not
// ack, and leaves the delivery (worker.Leave).
type completeFailsOnce struct {
	claimstore.Store
	n atomic.Int32
}

func (s *completeFailsOnce) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if s.n.Add(1) == 1 {
		return claimstore.ErrLeaseLost
	}
	return s.Store.Complete(ctx, p)
}

// TestLeftDeliveryComesBack: a delivery the protocol leaves (its lease
// lost at completion) is requeued once its lease has
// surely ended, as SQS makes it visible again when its visibility ends;
// the next delivery settles it. Left unacked, it would hold a prefetch
// slot until the broker's consumer_timeout (30 minutes by default) closed
// the channel.
func TestLeftDeliveryComesBack(t *testing.T) {
	u := brokerURL(t)
	t.Parallel()
	ctx := t.Context()
	queue := fmt.Sprintf("leave-%d", time.Now().UnixNano())
	ch := declared(t, u, Topology{Queue: queue})
	store := &completeFailsOnce{Store: memory.New(memory.Config{})}
	var runs atomic.Int64
	w, err := New(ctx, Config{
		Protocol: worker.Protocol{
			Store: store, Retention: time.Hour,
			Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
				runs.Add(1)
				return "done:" + m.Key, nil
			}),
			Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
			Logger:  slog.New(slog.DiscardHandler),
		},
		URL: u, Queue: queue, Lease: time.Second, ShutdownTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte("left")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := store.Get(ctx, "left")
		if err == nil && c.Status == claimstore.StatusCompleted {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not completed 15s after a left delivery (lease 1s): %d runs, claim %+v, %v; Run: %v", runs.Load(), c, err, <-done)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the ack after the completion
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages in the queue after the worker stopped, want 0: the completed delivery was not acked", q.Messages)
	}
	t.Logf("completed after %d runs (the first lost its lease at completion; the next took the ended lease over)", runs.Load())
}
