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

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
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
// (it is reported apart, broker-µs/msg). The claims are in the memory
// store (claimstore/memory), in this process: the store costs the same in
// both rows, so the rows differ by what consumes the topic. Rows:
//
//   - floor: franz-go (kgo) in a consumer group, autocommit off, polling
//     and for each record the claim store's two writes (Acquire, then
//     Complete) on its offset key, one record after another, then a
//     synchronous commit of what the poll returned: no transport.
//   - engine: the floor's loop with the worker's protocol (worker.Engine,
//     a handler that does nothing) in place of the two writes: what the
//     protocol costs beyond them, without a transport. Not bounded: it
//     says how much of the worker's cost is the protocol's.
//   - worker: the Kafka transport (kafkaworker) at benchConcurrency, its
//     default offset key, a handler that does nothing, committing every
//     kafkaBenchCommit.
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
	b.Run("floor", func(b *testing.B) { results["floor"] = benchKafka(b, brokers, kafkaFloor(storeWrites)) })
	b.Run("engine", func(b *testing.B) { results["engine"] = benchKafka(b, brokers, kafkaFloor(engineWork)) })
	b.Run("worker", func(b *testing.B) { results["worker"] = benchKafka(b, brokers, kafkaTransport) })
	transportVerdict(b, "kafka", "records", results)
}

// claimWork is what a floor row does for one message, id its key.
type claimWork func(ctx context.Context, id, body string) error

// storeWrites is the floor's work: the claim store's two writes.
func storeWrites(_ *testing.B, store claimstore.Store) claimWork {
	return func(ctx context.Context, id, _ string) error { return floorClaim(ctx, store, id) }
}

// engineWork is the engine row's work: the worker's protocol on store,
// with a handler that does nothing, and the message acked.
func engineWork(b *testing.B, store claimstore.Store) claimWork {
	eng, err := worker.NewEngine(worker.Protocol{
		Store: store, Metrics: worker.NewMetrics(nil), Logger: slog.New(slog.DiscardHandler), Retention: time.Hour,
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
	fmt.Printf("\n%-8s %10s %9s %13s %9s %16s\n", name, unit+"/s", "x floor", "cpu-µs/"+one, "x floor", "broker-µs/"+one)
	for _, n := range []string{"floor", "engine", "worker"} {
		if r, ok := rows[n]; ok && r.msgsPerSec > 0 {
			fmt.Printf("%-8s %10.0f %9.2f %13.1f %9.2f %16.1f\n", n, r.msgsPerSec, r.msgsPerSec/floor.msgsPerSec, r.cpuPerMsg, r.cpuPerMsg/floor.cpuPerMsg, r.emuPerMsg)
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

// kafkaConsume consumes topic in group with the claims in store until all
// n records are processed, its client built with joined (a hook that
// starts the meter when the group is joined); it returns a stop function
// that ends the consumer.
type kafkaConsume func(b *testing.B, brokers []string, topic, group string, store claimstore.Store, n int, joined kgo.Opt) (stop func())

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

	var m atomic.Pointer[transportMeter]
	hook := &joinHook{joined: func() { m.Store(startTransportMeter(b, os.Getenv("CLAIMFIRST_KAFKA_PID"))) }}
	stop := consume(b, brokers, topic, group, memory.New(memory.Config{}), b.N, kgo.WithHooks(hook))
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
// autocommit off, each polled record's work in turn, then a synchronous
// commit of the poll.
func kafkaFloor(work func(*testing.B, claimstore.Store) claimWork) kafkaConsume {
	return func(b *testing.B, brokers []string, topic, group string, store claimstore.Store, n int, joined kgo.Opt) func() {
		ctx := context.Background()
		do := work(b, store)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second), joined)
		if err != nil {
			b.Fatal(err)
		}
		done := 0
		for done < n {
			fs := cl.PollRecords(ctx, benchConcurrency*64)
			if err := fs.Err0(); err != nil {
				b.Fatal(err)
			}
			var rerr error
			fs.EachRecord(func(r *kgo.Record) {
				if rerr == nil {
					rerr = do(ctx, fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), string(r.Value))
				}
				done++
			})
			if rerr != nil {
				b.Fatal(rerr)
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				b.Fatal(err)
			}
		}
		return cl.Close
	}
}

// floorClaim is the store's two writes for one message: an Acquire, then
// a Complete.
func floorClaim(ctx context.Context, store claimstore.Store, key string) error {
	now := time.Now()
	a, err := store.Acquire(ctx, claimstore.AcquireParams{
		Key: key, Owner: "floor", LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour),
	})
	if err != nil {
		return err
	}
	if a.Outcome != claimstore.Acquired {
		return fmt.Errorf("key %s: outcome %v", key, a.Outcome)
	}
	return store.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(24 * time.Hour)})
}

// kafkaTransport runs the Kafka transport until it has completed n
// records.
func kafkaTransport(b *testing.B, brokers []string, topic, group string, store claimstore.Store, n int, joined kgo.Opt) func() {
	metrics := worker.NewMetrics(nil)
	var handled atomic.Int64
	all := make(chan struct{})
	w, err := kafkaworker.New(context.Background(), kafkaworker.Config{
		Protocol: worker.Protocol{
			Store: store, Metrics: metrics, Logger: slog.New(slog.DiscardHandler), Retention: 30 * 24 * time.Hour,
			Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) {
				if handled.Add(1) == int64(n) {
					close(all)
				}
				return "ok", nil
			}),
		},
		Brokers: brokers, Topic: topic, Group: group, Concurrency: benchConcurrency, CommitInterval: kafkaBenchCommit,
		ClientOptions: []kgo.Opt{joined},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-all:
	case err := <-done:
		b.Fatalf("the worker stopped after %d of %d records: %v", handled.Load(), n, err)
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d records handled in 5 minutes", handled.Load(), n)
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

// transportMeter measures one transport row: wall time and this process's
// CPU time from its start, and the broker's CPU time (its launcher's
// process and every descendant: RabbitMQ's script starts the Erlang VM)
// when the launcher said which process it is.
type transportMeter struct {
	start       time.Time
	user0, cpu0 time.Duration
	broker      string
	brokerCPU0  time.Duration
}

func startTransportMeter(b *testing.B, brokerPID string) *transportMeter {
	m := &transportMeter{broker: brokerPID}
	if brokerPID != "" {
		m.brokerCPU0 = procTreeCPU(brokerPID)
	}
	m.user0, m.cpu0 = cpuTime()
	b.ResetTimer()
	m.start = time.Now()
	return m
}

// stop reports the row's msgs/s, CPU and user CPU per message, and the
// broker's CPU per message.
func (m *transportMeter) stop(b *testing.B) benchResult {
	elapsed := time.Since(m.start)
	b.StopTimer()
	user1, cpu1 := cpuTime()
	n := float64(b.N)
	r := benchResult{msgsPerSec: n / elapsed.Seconds(), cpuPerMsg: float64((cpu1 - m.cpu0).Microseconds()) / n}
	b.ReportMetric(r.msgsPerSec, "msgs/s")
	b.ReportMetric(r.cpuPerMsg, "cpu-µs/msg")
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
