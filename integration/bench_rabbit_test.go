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
//
// The rows take turns: b.N messages each, in rabbitBenchRounds rounds of
// a share of them, each round in another order (the floor, the engine and
// the worker first in turn, and back to front every other round), and a
// row's rate is all its messages over all its time. On a shared machine
// the load moves within seconds: rows timed one after the other, a
// minute each, differed by the load they met, not by what they ran (the
// worker at 0.71 of the floor's rate in one run, the engine row, with no
// transport, at 0.69; profiled apart, the worker and the engine rows
// differed by 4% of CPU, none of it in the transport's code). Taking
// turns, each row meets the same loads.
func BenchmarkRabbit(b *testing.B) {
	u := amqpURL(b)
	b.StopTimer()
	rows := []struct {
		name    string
		consume rabbitConsume
		claims  benchClaims
		total   rabbitTotal
	}{
		{name: "floor", consume: rabbitFloor(floorWork)},
		{name: "engine", consume: rabbitFloor(engineWork)},
		{name: "worker", consume: rabbitTransport},
	}
	for i := range rows {
		rows[i].claims = cannedClaims(b) // each its own endpoint, kept for its rounds
	}
	rounds := min(b.N, rabbitBenchRounds)
	broker := os.Getenv("CLAIMFIRST_RABBITMQ_PID")
	for r := range rounds {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - n*(rounds-1)
		}
		for k := range rows {
			i := (r + k) % len(rows)
			if r%2 == 1 {
				i = (r + len(rows) - 1 - k) % len(rows)
			}
			row := &rows[i]
			row.total.add(benchRabbit(b, u, broker, row.consume, row.claims, n))
		}
	}
	results := map[string]benchResult{}
	for _, row := range rows {
		results[row.name] = row.total.result()
		b.ReportMetric(results[row.name].msgsPerSec, row.name+"-msgs/s")
		b.ReportMetric(results[row.name].cpuPerMsg, row.name+"-cpu-µs/msg")
	}
	if b.N < rabbitBenchRounds {
		return // the framework's first call, with one message: too few to judge
	}
	transportVerdict(b, "rabbitmq", "messages", results)
}

// rabbitBenchRounds is how many turns each row of BenchmarkRabbit takes.
const rabbitBenchRounds = 4

// rabbitTotal adds up a row's rounds.
type rabbitTotal struct {
	msgs                    int
	elapsed, cpu, brokerCPU time.Duration
	ddb                     int
}

func (t *rabbitTotal) add(r rabbitRound) {
	t.msgs += r.msgs
	t.elapsed += r.elapsed
	t.cpu += r.cpu
	t.brokerCPU += r.brokerCPU
	t.ddb += r.ddb
}

func (t *rabbitTotal) result() benchResult {
	if t.msgs == 0 || t.elapsed <= 0 {
		return benchResult{}
	}
	n := float64(t.msgs)
	return benchResult{
		msgsPerSec: n / t.elapsed.Seconds(), cpuPerMsg: float64(t.cpu.Microseconds()) / n,
		ddbPerMsg: float64(t.ddb) / n, emuPerMsg: float64(t.brokerCPU.Microseconds()) / n,
	}
}

// rabbitRound is one row's turn: its messages, the time from its
// connection to the last ack or completion, this process's CPU, the
// broker's (its launcher's process tree, when known) and the DynamoDB
// requests.
type rabbitRound struct {
	msgs                    int
	elapsed, cpu, brokerCPU time.Duration
	ddb                     int
}

// rabbitConsume consumes queue with claims until all n messages are
// processed, and returns a stop function that ends the consumer (closing
// its connection).
type rabbitConsume func(b *testing.B, url, queue string, claims benchClaims, n int) (stop func())

// benchRabbit publishes n messages to a new queue, times consume on
// them, and checks that the queue is empty once the consumer is gone.
func benchRabbit(b *testing.B, url, broker string, consume rabbitConsume, claims benchClaims, n int) rabbitRound {
	queue := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	conn := rabbitBenchPublish(b, url, queue, n)
	defer func() { _ = conn.Close() }()

	claims.counter.Reset()
	var broker0 time.Duration
	if broker != "" {
		broker0 = procTreeCPU(broker)
	}
	_, cpu0 := cpuTime()
	b.StartTimer()
	start := time.Now()
	stop := consume(b, url, queue, claims, n)
	r := rabbitRound{msgs: n, elapsed: time.Since(start)}
	b.StopTimer()
	_, cpu1 := cpuTime()
	r.cpu = cpu1 - cpu0
	if broker != "" {
		r.brokerCPU = procTreeCPU(broker) - broker0
	}
	r.ddb = int(claims.counter.Service("DynamoDB"))
	stop()

	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = ch.Close()
		deleteTopology(conn, queue)
	}()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	if q.Messages != 0 {
		b.Fatalf("%d of %d messages still in the queue after the run: not every ack reached the broker", q.Messages, n)
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
