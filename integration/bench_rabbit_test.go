package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
)

// BenchmarkRabbit drains a queue of b.N messages (published with
// confirms before the timer starts, each with its own message id) and
// reports messages per second and CPU per message, against the RabbitMQ
// broker of emulator/with-rabbitmq.sh, its own process, whose CPU is not
// counted here (it is reported apart, broker-µs/msg). The queue is the
// quorum queue rabbitworker.Setup declares. The claims are the DynamoDB
// store's, on a canned endpoint in a child process, as in BenchmarkKafka
// (cannedClaims): a row's CPU is its client side. Rows:
//
//   - floor: amqp091 consuming with manual acks at prefetch
//     benchConcurrency, for each delivery the DynamoDB store's two writes
//     by hand with the stock SDK (floorWrites) on its message id, then its
//     ack, on benchConcurrency goroutines: no transport, no claimstore
//     code.
//   - engine: the floor's loop with the worker's protocol (worker.Engine
//     over claimstore/dynamo, a handler that does nothing) in place of
//     the two writes: what the protocol costs beyond them, without a
//     transport. Not bounded.
//   - worker: the RabbitMQ transport (rabbitworker) over claimstore/dynamo
//     at benchConcurrency (its prefetch too), its default message-id key,
//     a handler that does nothing.
//
// Each row is timed from its connection to the broker until the last
// message is acked (the floor) or completed (the worker, whose ack
// follows); after the timer, the queue is checked empty with the consumer
// gone, so every ack reached the broker. The last line is the worker's
// CPU per message and rate as ratios to the floor's; the benchmark fails
// when the worker falls below transportMinRate of the floor's rate or
// above transportMaxCPU times its CPU, except under the race detector
// (`make test` runs it once, to show it runs). Run with `make bench`.
func BenchmarkRabbit(b *testing.B) {
	u := amqpURL(b)
	results := map[string]benchResult{}
	b.Run("floor", func(b *testing.B) { results["floor"] = benchRabbit(b, u, rabbitFloor(floorWork)) })
	b.Run("engine", func(b *testing.B) { results["engine"] = benchRabbit(b, u, rabbitFloor(engineWork)) })
	b.Run("worker", func(b *testing.B) { results["worker"] = benchRabbit(b, u, rabbitTransport) })
	transportVerdict(b, "rabbitmq", "messages", results)
}

// rabbitConsume consumes queue with claims until all n messages are
// processed, and returns a stop function that ends the consumer (closing
// its connection).
type rabbitConsume func(b *testing.B, url, queue string, claims benchClaims, n int) (stop func())

// benchRabbit publishes b.N messages to a new queue, times consume on
// them, and checks that the queue is empty once the consumer is gone.
func benchRabbit(b *testing.B, url string, consume rabbitConsume) benchResult {
	queue := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	conn := rabbitBenchPublish(b, url, queue, b.N)
	defer func() { _ = conn.Close() }()

	claims := cannedClaims(b)
	m := startTransportMeter(b, os.Getenv("CLAIMFIRST_RABBITMQ_PID"), claims.counter)
	stop := consume(b, url, queue, claims, b.N)
	r := m.stop(b)
	stop()

	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_, _ = ch.QueueDelete(rabbitworker.DeadLetterQueueOf(queue), false, false, false)
		_, _ = ch.QueueDelete(rabbitworker.DelayQueueOf(queue), false, false, false)
		_ = ch.ExchangeDelete(rabbitworker.DeadLetterExchange(queue), false, false)
		_ = ch.Close()
	}()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	if q.Messages != 0 {
		b.Fatalf("%d of %d messages still in the queue after the run: not every ack reached the broker", q.Messages, b.N)
	}
	return r
}

// rabbitBenchPublish declares queue (rabbitworker.Setup's topology) and
// publishes n messages with confirms; it returns its connection.
func rabbitBenchPublish(b *testing.B, url, queue string, n int) *amqp.Connection {
	ctx := context.Background()
	if err := rabbitworker.Setup(ctx, url, rabbitworker.Topology{Queue: queue}); err != nil {
		b.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confs := make([]*amqp.DeferredConfirmation, 0, n)
	for i := range n {
		id := queue + "-" + strconv.Itoa(i)
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json",
			Body: []byte(`{"payment_id":"` + id + `","amount":100,"currency":"EUR"}`),
		})
		if err != nil {
			b.Fatal(err)
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			b.Fatalf("publish not confirmed: %v", err)
		}
	}
	return conn
}

// rabbitFloor is the floor's consumer with work for each delivery:
// amqp091, manual acks at prefetch benchConcurrency, each delivery's work
// then its ack on benchConcurrency goroutines.
func rabbitFloor(work func(*testing.B, benchClaims) claimWork) rabbitConsume {
	return func(b *testing.B, url, queue string, claims benchClaims, n int) func() {
		ctx := context.Background()
		do := work(b, claims)
		conn, err := amqp.Dial(url)
		if err != nil {
			b.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		if err := ch.Qos(benchConcurrency, 0, false); err != nil {
			b.Fatal(err)
		}
		ds, err := ch.Consume(queue, "floor", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		pool := startWorkPool()
		defer pool.close()
		for range n {
			var d amqp.Delivery
			var ok bool
			select {
			case d, ok = <-ds:
			case <-pool.failed:
				b.Fatal(pool.wait())
			}
			if !ok {
				b.Fatal("the delivery channel closed")
			}
			pool.add(func() error {
				if err := do(ctx, d.MessageId, string(d.Body)); err != nil {
					return err
				}
				return d.Ack(false)
			})
		}
		if err := pool.wait(); err != nil {
			b.Fatal(err)
		}
		return func() { _ = conn.Close() }
	}
}

// rabbitTransport runs the RabbitMQ transport until it has completed n
// messages.
func rabbitTransport(b *testing.B, url, queue string, claims benchClaims, n int) func() {
	return runTransport(b, claims, n, "messages", time.Hour, func(p worker.Protocol) (func(context.Context) error, error) {
		w, err := rabbitworker.New(context.Background(), rabbitworker.Config{
			Protocol: p,
			URL:      url, Queue: queue, Concurrency: benchConcurrency,
		})
		if err != nil {
			return nil, err
		}
		return w.Run, nil
	})
}
