package rabbitworker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// brokerURL is AMQP_URL, or skips the test (fails it under `make test`,
// whose launcher sets CLAIMFIRST_RABBITMQ).
func brokerURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("AMQP_URL")
	if u == "" {
		if os.Getenv("CLAIMFIRST_RABBITMQ") != "" {
			t.Fatal("CLAIMFIRST_RABBITMQ is set but AMQP_URL is not: the RabbitMQ launcher did not export it")
		}
		t.Skip("needs RabbitMQ: run `make test`, or emulator/with-rabbitmq.sh go test ..., or set AMQP_URL")
	}
	return u
}

// declared sets up topo on the broker at u (Setup) and returns a channel
// of the test's own, to publish and look; when t ends the queue and its
// dead-letter queue are deleted and the connection closed.
func declared(t *testing.T, u string, topo Topology) *amqp.Channel {
	t.Helper()
	_, ch := declaredConn(t, u, topo)
	return ch
}

// declaredConn is declared, with the channel's connection, for more
// channels.
func declaredConn(t *testing.T, u string, topo Topology) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	if err := Setup(t.Context(), u, topo); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(topo.Queue, false, false, false)
		_, _ = ch.QueueDelete(DeadLetterQueueOf(topo.Queue), false, false, false)
		_, _ = ch.QueueDelete(DelayQueueOf(topo.Queue), false, false, false)
	})
	return conn, ch
}

// TestStaleAckAfterReconnect: a handler still running when its connection
// ends finishes on the next incarnation, and its ack must not land on the
// delivery that now has its tag. X is delivered (tag 1) and its handler
// held; the connection is closed, and another consumer takes X's
// redelivery; Y is then delivered to the new incarnation as its tag 1, and
// its handler held too. X's handler returns and acks: dropped, Y still
// unacked, so when the worker stops both come back. With the planted fault
// (acking on the connection of the moment, as a client that recovers
// connections under its caller does) Y is acked unprocessed and lost.
func TestStaleAckAfterReconnect(t *testing.T) {
	u := brokerURL(t)
	t.Parallel()
	if lost := staleAck(t, u, false); lost {
		t.Errorf("a stale ack acked another message: Y left the queue unprocessed")
	}
	if lost := staleAck(t, u, true); !lost {
		t.Errorf("the planted fault (tags reused across connections) was not caught: the scenario does not test it")
	}
}

// staleAck runs the scenario and reports whether Y was lost.
func staleAck(t *testing.T, u string, plant bool) bool {
	t.Helper()
	ctx := t.Context()
	queue := fmt.Sprintf("stale-%d-%t", time.Now().UnixNano(), plant)
	conn, ch := declaredConn(t, u, Topology{Queue: queue})
	publish := func(body string) {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	started := map[string]chan struct{}{"X": make(chan struct{}), "Y": make(chan struct{})}
	release := map[string]chan struct{}{"X": make(chan struct{}), "Y": make(chan struct{})}
	runs := map[string]int{}
	handler := worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
		mu.Lock()
		runs[m.Key]++
		first := runs[m.Key] == 1
		mu.Unlock()
		if first {
			close(started[m.Key])
			<-release[m.Key]
		}
		return "done", nil
	})
	w, err := New(ctx, Config{
		Protocol: worker.Protocol{
			Store: memory.New(memory.Config{}), Handler: handler, Retention: time.Hour,
			Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
			Logger:  slog.New(slog.DiscardHandler),
		},
		URL: u, Queue: queue, Concurrency: 2, Lease: 2 * time.Second, ShutdownTimeout: 200 * time.Millisecond,
		MinReconnect: 50 * time.Millisecond, MaxReconnect: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.tagReuse = plant
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	defer func() { close(release["Y"]) }()

	publish("X")
	wait(t, started["X"], "X's handler")
	first := w.current.Load()

	// The other consumer takes X's redelivery when the connection ends.
	other, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	taken, err := other.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = first.conn.Close()
	select {
	case <-taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the other consumer never got X's redelivery")
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.current.Load() == first {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not reconnect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	publish("Y")
	wait(t, started["Y"], "Y's handler")
	close(release["X"]) // X completes and acks: on its own, closed, channel
	time.Sleep(500 * time.Millisecond)

	cancel() // Y's handler is still held: the worker abandons it and closes
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	_ = other.Close() // X's redelivery goes back
	time.Sleep(300 * time.Millisecond)
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch2.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plant %t: %d messages back in the queue (want X and Y)", plant, q.Messages)
	return q.Messages < 2
}

func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
	}
}
