package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awsreq"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
)

// Bounds of the transport benchmarks (BenchmarkKafka, BenchmarkRabbit): the
// worker keeps at least transportMinRate of the floor's records per second
// at no more than transportMaxCPU times its CPU per record.
const (
	transportMinRate = 0.8
	transportMaxCPU  = 1.3
)

// benchPartitions is the partition count of the Kafka benchmark's topic.
const benchPartitions = 4

// BenchmarkKafka drains a topic of b.N records (produced before the
// timer starts, keyed by a payment id each) and reports records per
// second and CPU per record, against kfake in its own process
// (emulator/with-kafka.sh), so that the broker's CPU is not counted here
// (it is reported apart, broker-µs/record). The claims are the DynamoDB
// store's: each row's requests go to the canned endpoint (internal/canned)
// in a child process of its own, which answers every one at once and
// whose CPU is not counted either, so a row's CPU is its client side: the
// broker's client, the DynamoDB SDK, and what lies between. Every row
// makes two DynamoDB requests per record (reported, ddb/record). Rows:
//
//   - floor: franz-go (kgo) in a consumer group, autocommit off, polling,
//     and for each polled record the DynamoDB store's two writes written
//     out with the stock SDK (floorWrites: a guarded PutItem, then the
//     conditional UpdateItem that completes it, as BenchmarkCost's sdk
//     row) on its offset key, from benchConcurrency goroutines, then a
//     synchronous commit of the poll: no transport, no claimstore code.
//   - engine: the floor's loop with the worker's protocol (worker.Engine
//     over claimstore/dynamo, a handler that does nothing) in place of
//     the two writes: what the protocol costs beyond them, without a
//     transport. Not bounded: it says how much of the worker's cost is
//     the protocol's.
//   - worker: the Kafka transport (kafkaworker) over claimstore/dynamo at
//     benchConcurrency, its default offset key, a handler that does
//     nothing, committing every kafkaBenchCommit.
//
// Each row is timed from the end of its group join (the SyncGroup
// response, seen by a kgo hook: joining is not throughput) until the
// group's committed offsets reach the topic's end.
// The last line is the worker's CPU per record and rate as ratios to the
// floor's; the benchmark fails when the worker falls below
// transportMinRate of the floor's rate or above transportMaxCPU times its
// CPU, except under the race detector (`make test` runs it once, to show
// it runs). Run with `make bench`.
func BenchmarkKafka(b *testing.B) {
	brokers := kafkaBrokers(b)
	results := map[string]benchResult{}
	b.Run("floor", func(b *testing.B) { results["floor"] = benchKafka(b, brokers, kafkaFloor(floorWork)) })
	b.Run("engine", func(b *testing.B) { results["engine"] = benchKafka(b, brokers, kafkaFloor(engineWork)) })
	b.Run("worker", func(b *testing.B) { results["worker"] = benchKafka(b, brokers, kafkaTransport) })
	transportVerdict(b, "kafka", "records", results)
}

// claimWork is what a floor row does for one message, id its key.
type claimWork func(ctx context.Context, id, body string) error

// benchClaims is a row's claims: the DynamoDB store's requests, answered
// by the canned endpoint in a child process, every one counted.
type benchClaims struct {
	ddb     *dynamodb.Client // for the floor's writes, by hand
	store   *dynamo.Store    // for the engine and the worker
	counter *awsreq.Counter
}

// cannedClaims starts a canned endpoint of its own (in a child process,
// stopped when b ends) and returns the claims on it, in table
// cannedTable: the start check (DescribeTable, DescribeTimeToLive) is
// answered as the store wants it, every write succeeds. It hands out no
// SQS messages (nothing here receives any).
func cannedClaims(b *testing.B) benchClaims {
	cfg, counter := cannedConfig(startCanned(b, 0))
	ddb := dynamodb.NewFromConfig(cfg)
	store, err := dynamo.New(dynamo.Config{Client: ddb, Table: cannedTable})
	if err != nil {
		b.Fatal(err)
	}
	return benchClaims{ddb: ddb, store: store, counter: counter}
}

// cannedTable is the claim table named to the canned endpoint (any will do).
const cannedTable = "canned"

// floorWork is the floor's work: the DynamoDB store's two writes, by hand
// with the stock SDK.
func floorWork(_ *testing.B, c benchClaims) claimWork {
	return func(ctx context.Context, id, _ string) error { return floorWrites(ctx, c.ddb, cannedTable, id, "acq") }
}

// workPool runs the jobs given to add on benchConcurrency goroutines.
type workPool struct {
	jobs   chan func() error
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	failed chan struct{} // closed at the first job's error, err
}

func startWorkPool() *workPool {
	p := &workPool{jobs: make(chan func() error, benchConcurrency), failed: make(chan struct{})}
	for range benchConcurrency {
		go func() {
			for job := range p.jobs {
				if err := job(); err != nil {
					p.once.Do(func() { p.err = err; close(p.failed) })
				}
				p.wg.Done()
			}
		}()
	}
	return p
}

func (p *workPool) add(job func() error) {
	p.wg.Add(1)
	p.jobs <- job
}

// wait waits for every job added and returns the first error of any.
func (p *workPool) wait() error {
	p.wg.Wait()
	select {
	case <-p.failed:
		return p.err
	default:
		return nil
	}
}

// close ends the goroutines once the jobs added are done.
func (p *workPool) close() { close(p.jobs) }

// engineWork is the engine row's work: the worker's protocol on the
// DynamoDB store, with a handler that does nothing, and the message acked.
func engineWork(b *testing.B, c benchClaims) claimWork {
	eng, err := worker.NewEngine(worker.Protocol{
		Store: c.store, Metrics: worker.NewMetrics(nil), Logger: slog.New(slog.DiscardHandler), Retention: time.Hour,
		MinRetryBackoff: time.Second, MaxRetryBackoff: time.Minute,
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) { return "ok", nil }),
	}, worker.EngineOptions{System: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	const lease = 30 * time.Second
	extend := func(context.Context) (time.Time, error) { return time.Now().Add(lease), nil }
	return func(ctx context.Context, id, body string) error {
		now := time.Now()
		m := worker.Message{ID: id, Body: body, Attempt: 1, FirstReceived: now}
		d := eng.Process(ctx, &m, worker.Hold{
			Until: now.Add(lease), Interval: lease / 3, RenewAt: now.Add(lease / 3), HoldUntil: now.Add(time.Minute), Extend: extend,
		})
		if d.Action != worker.Ack {
			return fmt.Errorf("message %s: action %v", id, d.Action)
		}
		return nil
	}
}

// transportVerdict prints the rows' rates and CPU and the worker's ratios
// to the floor's, and fails the benchmark when a bound is broken (not
// under the race detector, whose numbers mean nothing).
func transportVerdict(b *testing.B, name, unit string, rows map[string]benchResult) {
	floor, w := rows["floor"], rows["worker"]
	if floor.msgsPerSec == 0 || w.msgsPerSec == 0 {
		return
	}
	one := unit[:len(unit)-1]
	fmt.Printf("\n%-8s %10s %9s %13s %9s %11s %16s\n", name, unit+"/s", "x floor", "cpu-µs/"+one, "x floor", "ddb/"+one, "broker-µs/"+one)
	for _, n := range []string{"floor", "engine", "worker"} {
		if r, ok := rows[n]; ok && r.msgsPerSec > 0 {
			fmt.Printf("%-8s %10.0f %9.2f %13.1f %9.2f %11.3f %16.1f\n", n, r.msgsPerSec, r.msgsPerSec/floor.msgsPerSec,
				r.cpuPerMsg, r.cpuPerMsg/floor.cpuPerMsg, r.ddbPerMsg, r.emuPerMsg)
		}
	}
	rate, cpu := w.msgsPerSec/floor.msgsPerSec, w.cpuPerMsg/floor.cpuPerMsg
	fmt.Printf("%s: worker x%.2f the floor's CPU, %.2f of its rate\n", name, cpu, rate)
	if raceEnabled {
		return
	}
	if rate < transportMinRate {
		b.Errorf("%s: the worker's rate is %.2f of the floor's, below %.2f", name, rate, transportMinRate)
	}
	if cpu > transportMaxCPU {
		b.Errorf("%s: the worker's CPU per %s is x%.2f the floor's, above x%.2f", name, one, cpu, transportMaxCPU)
	}
}

// kafkaBenchCommit is the worker's CommitInterval in the benchmark: the
// tail between the last record settled and its commit is counted.
const kafkaBenchCommit = 50 * time.Millisecond

// kafkaConsume consumes topic in group with claims until all n records
// are processed, its client built with joined (a hook that starts the
// meter when the group is joined); it returns a stop function that ends
// the consumer.
type kafkaConsume func(b *testing.B, brokers []string, topic, group string, claims benchClaims, n int, joined kgo.Opt) (stop func())

// joinHook calls joined once, when the first SyncGroup response is read:
// the member has its partitions.
type joinHook struct {
	once   sync.Once
	joined func()
}

func (h *joinHook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.SyncGroup.Int16() && err == nil {
		h.once.Do(h.joined)
	}
}

// benchKafka produces b.N records to a new topic, runs consume on them,
// and measures from the first record to the group's commit of the last.
func benchKafka(b *testing.B, brokers []string, consume kafkaConsume) benchResult {
	ctx := context.Background()
	topic := awstest.Name("bench")
	group := topic + "-group"
	ends := kafkaBenchProduce(b, brokers, topic, b.N)

	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	admin := kadm.NewClient(adm)

	claims := cannedClaims(b)
	var m atomic.Pointer[transportMeter]
	hook := &joinHook{joined: func() { m.Store(startTransportMeter(b, os.Getenv("CLAIMFIRST_KAFKA_PID"), claims.counter)) }}
	stop := consume(b, brokers, topic, group, claims, b.N, kgo.WithHooks(hook))
	// consume returned: every record is processed; now the commits.
	for giveUp := time.Now().Add(time.Minute); !kafkaCommitted(ctx, b, admin, group, topic, ends); {
		if time.Now().After(giveUp) {
			b.Fatalf("every record processed, and the group's commits short of the end offsets %v a minute later", ends)
		}
		time.Sleep(2 * time.Millisecond)
	}
	r := m.Load().stop(b)
	stop()
	return r
}

// kafkaCommitted reports whether group's committed offsets of topic are
// ends.
func kafkaCommitted(ctx context.Context, b *testing.B, adm *kadm.Client, group, topic string, ends map[int32]int64) bool {
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		b.Fatal(err)
	}
	for part, end := range ends {
		o, ok := offs.Lookup(topic, part)
		if !ok || o.Err != nil || o.At < end {
			return false
		}
	}
	return true
}

// kafkaBenchProduce creates topic (and its dead-letter topic) and
// produces n records, each keyed by its payment id, returning each
// partition's end offset.
func kafkaBenchProduce(b *testing.B, brokers []string, topic string, n int) map[int32]int64 {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, benchPartitions, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic+kafkaworker.DeadLetterSuffix); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	ends := map[int32]int64{}
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range n {
		id := fmt.Sprintf("pay_%s_%d", topic, i)
		r := &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(`{"payment_id":"` + id + `","amount":100,"currency":"EUR"}`)}
		wg.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				failed.Store(err)
				return
			}
			mu.Lock()
			ends[r.Partition] = max(ends[r.Partition], r.Offset+1)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return ends
}

// kafkaFloor is the floor's consumer with work for each record: kgo,
// autocommit off, each polled record's work on benchConcurrency
// goroutines, then, all done, a synchronous commit of the poll.
func kafkaFloor(work func(*testing.B, benchClaims) claimWork) kafkaConsume {
	return func(b *testing.B, brokers []string, topic, group string, claims benchClaims, n int, joined kgo.Opt) func() {
		ctx := context.Background()
		do := work(b, claims)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second), joined)
		if err != nil {
			b.Fatal(err)
		}
		pool := startWorkPool()
		defer pool.close()
		done := 0
		for done < n {
			fs := cl.PollRecords(ctx, benchConcurrency*64)
			if err := fs.Err0(); err != nil {
				b.Fatal(err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				id, body := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), string(r.Value)
				pool.add(func() error { return do(ctx, id, body) })
				done++
			})
			if err := pool.wait(); err != nil {
				b.Fatal(err)
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				b.Fatal(err)
			}
		}
		return cl.Close
	}
}

// kafkaTransport runs the Kafka transport until it has completed n
// records.
func kafkaTransport(b *testing.B, brokers []string, topic, group string, claims benchClaims, n int, joined kgo.Opt) func() {
	return runTransport(b, claims, n, "records", 30*24*time.Hour, func(p worker.Protocol) (func(context.Context) error, error) {
		w, err := kafkaworker.New(context.Background(), kafkaworker.Config{
			Protocol: p,
			Brokers:  brokers, Topic: topic, Group: group, Concurrency: benchConcurrency, CommitInterval: kafkaBenchCommit,
			ClientOptions: []kgo.Opt{joined},
		})
		if err != nil {
			return nil, err
		}
		return w.Run, nil
	})
}

// runTransport runs a transport, which start makes from a protocol over
// claims' store with a handler that does nothing but count, until it has
// completed n messages (called unit in its errors); the func it returns
// stops it.
func runTransport(b *testing.B, claims benchClaims, n int, unit string, retention time.Duration, start func(worker.Protocol) (func(context.Context) error, error)) func() {
	metrics := worker.NewMetrics(nil)
	var handled atomic.Int64
	all := make(chan struct{})
	run, err := start(worker.Protocol{
		Store: claims.store, Metrics: metrics, Logger: slog.New(slog.DiscardHandler), Retention: retention,
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) {
			if handled.Add(1) == int64(n) {
				close(all)
			}
			return "ok", nil
		}),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case <-all:
	case err := <-done:
		b.Fatalf("the worker stopped after %d of %d %s: %v", handled.Load(), n, unit, err)
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d %s handled in 5 minutes", handled.Load(), n, unit)
	}
	for metrics.Count(worker.OutcomeCompleted) < int64(n) {
		time.Sleep(time.Millisecond)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}

// transportMeter measures one transport row: wall time, this process's
// CPU time and the DynamoDB requests from its start, and the broker's CPU
// time (its launcher's process and every descendant: RabbitMQ's script
// starts the Erlang VM) when the launcher said which process it is.
type transportMeter struct {
	start       time.Time
	user0, cpu0 time.Duration
	counter     *awsreq.Counter
	broker      string
	brokerCPU0  time.Duration
}

// startTransportMeter resets counter and the benchmark timer and starts
// measuring.
func startTransportMeter(b *testing.B, brokerPID string, counter *awsreq.Counter) *transportMeter {
	counter.Reset()
	m := &transportMeter{broker: brokerPID, counter: counter}
	if brokerPID != "" {
		m.brokerCPU0 = procTreeCPU(brokerPID)
	}
	m.user0, m.cpu0 = cpuTime()
	b.ResetTimer()
	m.start = time.Now()
	return m
}

// stop reports the row's msgs/s, CPU, user CPU and DynamoDB requests per
// message, and the broker's CPU per message.
func (m *transportMeter) stop(b *testing.B) benchResult {
	elapsed := time.Since(m.start)
	b.StopTimer()
	user1, cpu1 := cpuTime()
	n := float64(b.N)
	r := benchResult{
		msgsPerSec: n / elapsed.Seconds(), cpuPerMsg: float64((cpu1 - m.cpu0).Microseconds()) / n,
		ddbPerMsg: float64(m.counter.Service("DynamoDB")) / n,
	}
	b.ReportMetric(r.msgsPerSec, "msgs/s")
	b.ReportMetric(r.cpuPerMsg, "cpu-µs/msg")
	b.ReportMetric(r.ddbPerMsg, "ddb-req/msg")
	b.ReportMetric(float64((user1-m.user0).Microseconds())/n, "user-µs/msg")
	if m.broker != "" {
		r.emuPerMsg = float64((procTreeCPU(m.broker) - m.brokerCPU0).Microseconds()) / n
		b.ReportMetric(r.emuPerMsg, "broker-µs/msg")
	}
	return r
}

// procTreeCPU is the user+system CPU time of process pid and of every
// process descended from it, from /proc.
func procTreeCPU(pid string) time.Duration {
	parent := map[string]string{}
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// The fields after the command (which may hold spaces): state, ppid, ...
			if f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:])); len(f) > 1 {
				parent[e.Name()] = f[1]
			}
		}
	}
	var total time.Duration
	for p := range parent {
		for q := p; q != "" && q != "0"; q = parent[q] {
			if q == pid {
				total += procCPU(p)
				break
			}
		}
	}
	return total
}
