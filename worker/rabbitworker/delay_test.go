package rabbitworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// delayRun is one run of the delay scenario: the times the handler ran,
// from the publish, and how many deliveries the worker received.
type delayRun struct {
	runs       []time.Duration
	deliveries int64
	attempts   []int
}

// runDelayed publishes one message whose first run fails asking for a
// retry after delay, and waits until its second run or until wait ends.
// before, if set, runs once the worker is consuming.
func runDelayed(t *testing.T, u string, topo Topology, delay, wait time.Duration, before func(ch *amqp.Channel)) delayRun {
	t.Helper()
	ctx := t.Context()
	ch := declared(t, u, topo)
	var mu sync.Mutex
	var r delayRun
	start := time.Now()
	second := make(chan struct{})
	handler := worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		r.runs = append(r.runs, time.Since(start))
		r.attempts = append(r.attempts, m.Attempt)
		if len(r.runs) == 1 {
			return "", worker.RetryAfter(delay, errors.New("the provider says: not now"))
		}
		if len(r.runs) == 2 {
			close(second)
		}
		return "done", nil
	})
	w, err := New(ctx, Config{
		Protocol: worker.Protocol{
			Store: memory.New(memory.Config{}), Handler: handler, Retention: time.Hour,
			Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
			Logger:  slog.New(slog.DiscardHandler),
		},
		URL: u, Queue: topo.Queue, Lease: time.Second, HoldFor: time.Nanosecond,
		MaxReturnDelay: 300 * time.Millisecond, ShutdownTimeout: 200 * time.Millisecond,
		MinReconnect: 50 * time.Millisecond, MaxReconnect: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runWorker(t, ctx, w)()
	if before != nil {
		before(ch)
	}
	start = time.Now()
	if err := ch.PublishWithContext(ctx, "", topo.Queue, false, false, amqp.Publishing{Body: []byte("later"), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second:
	case <-time.After(wait):
	}
	mu.Lock()
	defer mu.Unlock()
	r.deliveries = w.deliveries.Load()
	return r
}

// TestLongRetryGoesThroughTheDelayQueue: a retry asking for longer than a
// delivery may be held unacked (MaxReturnDelay) waits in the delay queue,
// hop by hop of its TTL, and runs again after the delay, not before, with
// a handful of deliveries rather than a requeue loop; its attempt counts on
// (the delay queue's dead-lettering makes a new message for the broker's
// delivery count). Seen failing before the delay queue: the retry asking
// for 3s ran 0.3s after the failure (requeued after MaxReturnDelay).
func TestLongRetryGoesThroughTheDelayQueue(t *testing.T) {
	u := brokerURL(t)
	t.Parallel()
	const delay, ttl = 3 * time.Second, 500 * time.Millisecond
	topo := Topology{Queue: fmt.Sprintf("delay-%d", time.Now().UnixNano()), DelayTTL: ttl}
	r := runDelayed(t, u, topo, delay, 15*time.Second, nil)
	t.Logf("runs at %v, attempts %v, %d deliveries", r.runs, r.attempts, r.deliveries)
	if len(r.runs) != 2 {
		t.Fatalf("%d runs, want 2 (a failure, then the retry)", len(r.runs))
	}
	if got := r.runs[1] - r.runs[0]; got < delay {
		t.Errorf("the retry ran %s after the failure, before the %s it asked for", got, delay)
	}
	if got := r.runs[1] - r.runs[0]; got > delay+2*ttl+time.Second {
		t.Errorf("the retry ran %s after the failure, long after the %s it asked for", got, delay)
	}
	// One delivery per hop of the delay queue's TTL, and the two runs.
	if most := int64(delay/ttl) + 3; r.deliveries > most {
		t.Errorf("%d deliveries for one retry, want at most %d: a requeue loop", r.deliveries, most)
	}
	if r.attempts[1] != 2 {
		t.Errorf("the retry's attempt is %d, want 2: the delay queue must not reset it", r.attempts[1])
	}
}

// TestDelayQueueRefusedAcksNothing: when the delay queue refuses the
// publish (deleted: the mandatory publish comes back), the delivery is not
// acked; it is returned after MaxReturnDelay instead, and runs again:
// nothing lost, and no requeue loop either. Seen failing against a
// publish that ignored the broker's return (one run: the message lost).
func TestDelayQueueRefusedAcksNothing(t *testing.T) {
	u := brokerURL(t)
	t.Parallel()
	topo := Topology{Queue: fmt.Sprintf("delaygone-%d", time.Now().UnixNano()), DelayTTL: time.Second}
	r := runDelayed(t, u, topo, time.Minute, 10*time.Second, func(ch *amqp.Channel) {
		if _, err := ch.QueueDelete(DelayQueueOf(topo.Queue), false, false, false); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("runs at %v, attempts %v, %d deliveries", r.runs, r.attempts, r.deliveries)
	if len(r.runs) != 2 {
		t.Fatalf("%d runs, want 2: the message was lost (acked when its delay publish was refused)", len(r.runs))
	}
	if r.deliveries > 3 {
		t.Errorf("%d deliveries, want 2: a requeue loop", r.deliveries)
	}
}

// TestDelayQueueKeepsTheDeliveryLimit: a message that fails for ever, each
// retry through the delay queue (which resets the broker's delivery
// count), is still dead-lettered once its attempts pass DeliveryLimit,
// with the broker's reason: the delay queue gives no attempts for free.
// Seen failing with the attempts not carried: 40 runs in 20s, each attempt
// 1, never dead-lettered.
func TestDelayQueueKeepsTheDeliveryLimit(t *testing.T) {
	u := brokerURL(t)
	t.Parallel()
	ctx := t.Context()
	const limit = 3
	topo := Topology{Queue: fmt.Sprintf("delaylimit-%d", time.Now().UnixNano()), DelayTTL: 200 * time.Millisecond, DeliveryLimit: limit}
	ch := declared(t, u, topo)
	var mu sync.Mutex
	var attempts []int
	handler := worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
		mu.Lock()
		attempts = append(attempts, m.Attempt)
		mu.Unlock()
		return "", worker.RetryAfter(500*time.Millisecond, errors.New("never"))
	})
	w, err := New(ctx, Config{
		Protocol: worker.Protocol{
			Store: memory.New(memory.Config{}), Handler: handler, Retention: time.Hour,
			MinRetryBackoff: 300 * time.Millisecond, MaxRetryBackoff: 400 * time.Millisecond, OutageCover: time.Second,
			Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
			Logger:  slog.New(slog.DiscardHandler),
		},
		URL: u, Queue: topo.Queue, DeliveryLimit: limit, Lease: time.Second, HoldFor: time.Nanosecond,
		MaxReturnDelay: 100 * time.Millisecond, ShutdownTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runWorker(t, ctx, w)()
	if err := ch.PublishWithContext(ctx, "", topo.Queue, false, false, amqp.Publishing{Body: []byte("never")}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		m, ok, err := ch.Get(DeadLetterQueueOf(topo.Queue), true)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := append([]int(nil), attempts...)
		mu.Unlock()
		if ok {
			t.Logf("dead-lettered after attempts %v, headers %v", got, m.Headers)
			if r := m.Headers[ReasonHeader]; r != ReasonDeliveryLimit {
				t.Errorf("reason %v, want %s", r, ReasonDeliveryLimit)
			}
			if want := []int{1, 2, 3, 4}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("attempts %v, want %v", got, want)
			}
			if _, ok := m.Headers[AttemptsHeader]; ok {
				t.Errorf("the dead letter carries %s: a redrive would start it near the limit", AttemptsHeader)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not dead-lettered after 20s; attempts %v", got)
		}
	}
}
